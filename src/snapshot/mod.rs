//! Snapshots as perf records: processes -> COMM/FORK/MMAP2 in perf's order
//! (`encode`), snapshot files written and read back (`file`), a live scan
//! streamed to its output (`live`), and the counts of the summary (`stats`).
//!
//! May import: `bytes`, `model`, `perf`, `proc` (for the scan's result type
//! and host facts).

pub mod encode;
pub mod file;
pub mod live;
pub mod stats;

pub use encode::{
    build_id_entries, encode, encode_kernel, encode_process, kernel_table_entries, mmap_filename,
    Encoding,
};
pub use file::{
    encode_for_writer, encode_keyed, is_kernel_map, read_snapshot, read_snapshot_with_kernel,
    snapshot_encoding, write_snapshot, Out, SnapshotWriter, WriteOptions, WriteSeek,
};
pub use live::{write_live, LiveError, LiveReport};
pub use stats::Stats;
