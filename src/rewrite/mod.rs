//! Rewriting recordings: the streaming engine that `merge` and
//! `convert` use: one scan of the input that gathers facts while teeing
//! its bytes to the output (`scan`), a pure plan of what to insert (`plan`),
//! file- and pipe-mode output (`write`), and the merge itself (`merge`).
//!
//! May import: `bytes`, `model`, `perf`, `proc`, `snapshot`, `output`.

pub mod convert;
pub mod merge;
pub mod plan;
pub mod scan;
pub mod write;

#[cfg(test)]
mod tests;

pub use convert::{convert, ConvertError, ConvertOptions, ConvertReport};
pub use merge::{merge, MergeError, MergeOptions, MergeReport};
pub use plan::Which;
