//! The live system: which processes, what /proc says about them, their VMAs
//! (PROCMAP_QUERY with a text fallback), build ids, clocks and host facts.
//! `parse`, `maps_text` and `elf` are pure parsers over bytes; `options`
//! says what to scan; `scan`, `process` (with `head`, `pieces`, `skip`), `source` (with `ioctl_walk`, `text_walk`, `local`, `names`, `name_memo`, `walk_cap`), `buildid`, `debuginfo`, `idcache`, `clock` and
//! `host` are the thin layers that read files and call into `sys`; `window`
//! orders the workers' results for the writer.
//!
//! May import: `bytes`, `memo`, `model`, `sys`. Knows nothing of perf.data.

pub mod bpf_progs;
pub mod btf;
pub mod buildid;
pub mod clock;
pub mod debuginfo;
pub mod elf;
mod head;
pub mod host;
pub mod idcache;
mod ioctl_walk;
pub mod kernel;
mod local;
pub mod maps_text;
pub mod minidebug;
pub mod mountinfo;
pub mod mounts;
mod name_memo;
mod names;
mod options;
pub mod parse;
mod pieces;
mod process;
pub mod scan;
mod skip;
pub mod source;
pub mod tasks;
mod text_walk;
pub mod unasked;
mod walk_cap;
pub mod watch;
mod window;

pub use host::HostFacts;
pub use scan::{
    processes_of, scan_each, scan_each_with, scan_late_with, snapshot, Options, ScanError, Scanned,
    Skip, SkipReason, Snapshot, SourceChoice, Target, TaskSource,
};
