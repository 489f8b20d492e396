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
    /// True for bad input (exit code 2): the recording's or snapshot's,
    /// or an output refused or raced ([`crate::output::OutputError::refusal_in`]).
    pub fn is_bad_input(&self) -> bool {
        match self {
            MergeError::Input(e) => e.is_bad_input(),
            MergeError::Output { source, .. } => {
                crate::output::OutputError::refusal_in(source).is_some()
            }
            _ => false,
        }
    }
}

pub(super) fn out_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MergeError {
    let path = path.to_path_buf();
    move |source| MergeError::Output { op, path, source }
}
