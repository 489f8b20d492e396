//! Snapshots as perf records: processes -> COMM/FORK/MMAP2 in perf's order
//! (`encode`), loaded BPF programs -> KSYMBOL/BPF_EVENT (`bpf`), what a snapshot file is (`file`), writing one (`writer`),
//! reading one back (`read`, repeats held as [`Runs`]), what a scan worker already reported
//! (`reported`), a live scan streamed to its output (`live`),
//! watching that scan, whatever the output (`watched`), which of the watch's
//! records are added (`filter`, comparing maps by `identity` with the
//! scan's as `seen` keeps them) with their files' build ids (`ids`), and
//! the counts of the summary (`stats`).
//!
//! May import: `bytes`, `model`, `perf`, `proc` (for the scan's result type
//! and host facts).

pub mod bpf;
pub mod encode;
pub mod file;
pub mod filter;
pub mod identity;
pub mod ids;
pub mod live;
pub mod read;
pub mod reported;
pub mod runs;
pub mod seen;
pub mod stats;
pub mod watched;
pub mod writer;

pub use bpf::{encode_bpf_programs, program_records, BpfRecord};
pub use encode::{
    build_id_entries, build_id_entries_of, encode, encode_kernel, encode_part, encode_process,
    kernel_table_entries, mmap_filename, BuildIdSet, Encoding,
};
pub use file::{snapshot_encoding, Out, WriteOptions, WriteSeek};
pub use filter::WatchFilter;
pub use live::{write_live, LiveError, LiveReport};
pub use read::{
    is_kernel_map, read_snapshot, read_snapshot_maps, read_snapshot_maps_of,
    read_snapshot_with_kernel, read_window, vma_of, walk_maps, HeldProcess, KernelMaps, MapsRecord,
    Names, SnapshotMaps, Window,
};
pub use reported::Reported;
pub use runs::Runs;
pub use stats::Stats;
pub use watched::{ScanWatch, WatchNotes};
pub use writer::{encode_for_writer, encode_piece, weighed, write_snapshot, SnapshotWriter};
