//! Why a process was skipped, and how an I/O error reading it says so.

use std::io;

/// Why a process was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// It did not exist when the scan came to it (`-p` of a pid that is
    /// gone, or a recording's process that exited): not a failure.
    NotFound,
    /// It existed, then exited while being read (ENOENT / ESRCH).
    Vanished,
    /// Access denied (EACCES / EPERM).
    Denied,
    /// Any other error reading it.
    Failed,
    /// It failed (vanished, mostly) after the first pieces of its maps were
    /// written: it is written with the maps read until then.
    CutShort,
}

impl SkipReason {
    pub(super) fn of(e: &io::Error) -> SkipReason {
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => SkipReason::Vanished,
            Some(libc::EACCES) | Some(libc::EPERM) => SkipReason::Denied,
            _ => SkipReason::Failed,
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkipReason::NotFound => "not found",
            SkipReason::Vanished => "vanished",
            SkipReason::Denied => "denied",
            SkipReason::Failed => "failed",
            SkipReason::CutShort => "cut short",
        })
    }
}

/// A skipped process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub pid: u32,
    pub reason: SkipReason,
    pub detail: String,
}
