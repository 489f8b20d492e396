//! What can make a merge fail (and the opening of any rewrite's input):
//! its one error type, kept apart so every stage can name it.

use std::io;
use std::path::{Path, PathBuf};

use crate::perf::{InputError, RecordTooLarge};
use crate::proc;

/// A merge failure.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The recording or snapshot is malformed or unreadable.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Writing the output failed.
    #[error("{op} {}", path.display())]
    Output {
        op: &'static str,
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading the live system failed.
    #[error("reading processes")]
    Scan(#[from] proc::ScanError),
    /// Our encoder produced a record that does not fit (a bug).
    #[error("internal error, please report: {0}")]
    Encode(#[from] RecordTooLarge),
}

impl MergeError {
    /// True for bad input (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, MergeError::Input(e) if e.is_bad_input())
    }
}

pub(super) fn out_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MergeError {
    let path = path.to_path_buf();
    move |source| MergeError::Output { op, path, source }
}
