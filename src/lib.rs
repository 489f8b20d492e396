//! mmap2-synth: synthesize PERF_RECORD_MMAP2 records (with build ids) for
//! running processes, write them as perf.data, and insert them into
//! existing recordings.
//!
//! The pipeline, one folder per stage:
//! 1. [`proc`]: select processes and read them from /proc (status, threads,
//!    VMAs by PROCMAP_QUERY or text, build ids, clocks, host facts).
//! 2. [`snapshot`]: turn what was read into perf records in perf's order,
//!    and write or read snapshot files.
//! 3. [`perf`]: the perf.data format itself (header, sections, feature
//!    table, attrs, records, writers, the streaming reader), used by 2 and 4.
//! 4. [`rewrite`]: the streaming engine that merges records into recordings.
//! 5. [`dump`]: recordings and snapshots printed for people and scripts.
//! 6. [`archive`]: the mapped binaries copied into perf's build-id cache.
//! 7. [`pprof`]: recordings written as symbolized pprof profiles.
//!
//! Leaves shared by all of them: [`bytes`] (byte order), [`model`] (the data
//! types), [`text`] (bytes others control made safe to print: every path,
//! comm, name and foreign message a command prints goes through it),
//! [`memo`] (the scan's direct-mapped lookup memo), [`output`] (atomic
//! output files), [`pathwalk`] (paths opened a component at a time, by
//! rules: outputs' and found inputs'), [`interrupt`] (signals while
//! a stream input is read), [`sys`] (every FFI call, the only
//! `unsafe`). [`summary`] formats the CLI's reports.
//!
//! Imports go one way: leaves <- `perf`, `proc` <- `snapshot` <- `rewrite`
//! <- `summary` (`perf` and `proc` do not know each other). `.ci/check-layers.py`
//! fails CI on a cycle.

#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(clippy::too_many_lines)]

pub mod archive;
pub mod bytes;
pub mod dump;
pub mod interrupt;
pub mod memo;
pub mod model;
pub mod output;
pub mod pathwalk;
pub mod perf;
pub mod pprof;
pub mod proc;
pub mod rewrite;
pub mod snapshot;
pub mod summary;
#[allow(unsafe_code)]
pub mod sys;
pub mod testhook;
pub mod text;
