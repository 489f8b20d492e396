//! Rewriting recordings: the streaming engine that `merge` and
//! `convert` use: one scan of the input that gathers facts while the kernel
//! copies its data section to the output (`scan`), a pure plan of what to insert (`plan`),
//! file- and pipe-mode output (`write`), the merge itself (`merge`) with
//! its inserted records encoded as they are written (`insert`), the
//! record-by-record rewrite between modes (`transcode`) and `convert`,
//! with the build id each map gets (`buildids`, `attribution`, `trust`) and
//! what a conversion reports (`report`), the damaged tail of a
//! salvaged `-z` recording that a merge writes out decompressed (`tail`),
//! and whether a process to insert is the one sampled (`coverage`).
//!
//! May import: `bytes`, `model`, `perf`, `proc`, `snapshot`, `output`.

pub mod attribution;
pub mod buildids;
pub mod convert;
pub mod coverage;
mod datamaps;
pub mod edited;
mod emit;
mod error;
mod insert;
mod kernel;
pub mod merge;
pub mod meta;
mod open;
pub mod plan;
pub mod report;
pub mod scan;
pub mod tail;
pub mod transcode;
pub mod trust;
mod windows;
pub mod write;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_in_place;
#[cfg(test)]
mod tests_kernel_samples;
#[cfg(test)]
mod tests_synth_task;

pub use buildids::ConvertReport;
pub use convert::{convert, convert_to_stream, ConvertError, ConvertOptions};
pub use merge::{merge, MergeError, MergeOptions, MergeReport};
pub use plan::Which;
