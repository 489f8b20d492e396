//! mmap2-synth: synthesize PERF_RECORD_MMAP2 records (with build ids) for
//! running processes and write them as perf.data.
//!
//! Pure encoders and parsers ([`record`], [`maps`], [`elf`], [`proc`],
//! [`perf_data`]) sit beside thin modules that touch the system ([`source`],
//! [`synth`], [`output`], [`host`]). All `unsafe` is in [`sys`].

#![warn(missing_docs)]

pub mod buildid;
pub mod elf;
pub mod host;
pub mod maps;
pub mod merge;
pub mod output;
pub mod perf_data;
pub mod perf_read;
pub mod proc;
pub mod record;
pub mod snapshot_file;
pub mod source;
mod stream;
pub mod synth;
pub mod sys;
pub mod vma;
