//! Failures reading an input, each naming the file, and the operations
//! an I/O failure names.

use std::io;
use std::path::{Path, PathBuf};

use super::error::FormatError;

/// A failure reading an input, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file is malformed.
    #[error("{}: {source}", path.display())]
    Format {
        path: PathBuf,
        /// What and where.
        #[source]
        source: FormatError,
    },
    /// The path names a device, a directory holding no `data` file, or
    /// another non-file.
    #[error("{}: not a regular file, nor a FIFO or stdin holding a pipe-mode stream, nor a perf.data directory (holding `data`)", path.display())]
    NotAFile {
        /// The input.
        path: PathBuf,
    },
    /// A file of a perf.data directory is a symlink: perf writes its
    /// files there itself, and a link (to `/etc/shadow`, say) would have
    /// root copy what it names into the recording.
    #[error("{}: a symlink in a perf.data directory, not followed (perf writes the files there itself)", path.display())]
    NotFollowed {
        /// The link.
        path: PathBuf,
    },
    /// A file of a perf.data directory has other hard links.
    #[error("{}: a file of a perf.data directory with other hard links, not read (perf writes the files there itself)", path.display())]
    HardLinked {
        /// The file.
        path: PathBuf,
    },
    /// A file of a perf.data directory is malformed (see [`DirFileError`]).
    #[error(transparent)]
    InDirectory(Box<DirFileError>),
    /// An input to be replaced in place is not a regular file.
    #[error("{}: not a regular file (an input rewritten in place must be one)", path.display())]
    NotRegular {
        /// The input.
        path: PathBuf,
    },
    /// Reading failed.
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Creating or writing the unlinked temporary file a stream input
    /// (stdin, a FIFO) is copied to, or a perf.data directory assembled
    /// into, and read from failed: `dir` (the temporary directory,
    /// `TMPDIR`) full, most likely.
    #[error("{op} the temporary copy of {what} {} (an unlinked file in {})", path.display(), dir.display())]
    Spool {
        /// What failed: creating or writing it.
        op: &'static str,
        /// What the input is: "stream", "directory recording".
        what: &'static str,
        /// The stream.
        path: PathBuf,
        /// Where the copy was.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// A file of a perf.data directory is malformed: found while the directory
/// was assembled (when cut short, `--salvage` does not reach it), or later
/// in the assembled recording (`assembled`: `--salvage` reads that up to a
/// cut, as it reads a file).
#[derive(Debug)]
pub struct DirFileError {
    /// The file.
    pub path: PathBuf,
    /// What and where in it.
    pub what: FormatError,
    /// `what`'s offset counts in the records the file's COMPRESSED records
    /// decompress to, not in the file.
    pub decompressed: bool,
    /// Found in the assembled recording, not while assembling it.
    pub assembled: bool,
}

impl std::fmt::Display for DirFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, path) = (&self.what, self.path.display());
        match self.decompressed {
            true => write!(
                f,
                "{path}: at byte {} of its records, its COMPRESSED records decompressed: {}",
                what.offset, what.kind
            )?,
            false => write!(f, "{path}: {what}")?,
        }
        // one found in the assembled recording gets the CLI's usual
        // `--salvage` hint instead
        if what.is_cut() && !self.assembled {
            f.write_str(
                " (a file of a perf.data directory: --salvage does not read these up to a cut)",
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for DirFileError {
    /// `what` where it was found in the assembled recording at an offset
    /// of the file: the CLI finds a cut among the causes and adds that
    /// `--salvage` reads it.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let told = self.assembled && !self.decompressed;
        told.then_some(&self.what as &(dyn std::error::Error + 'static))
    }
}

/// The `op` of an [`InputError::Io`] opening the input itself (a path that
/// names nothing there is the user's mistake, not the system's).
pub(super) const OPENING: &str = "opening";

/// The `op` of an [`InputError::Io`] reading the input.
pub(super) const READING: &str = "reading";

/// The `op` of an [`InputError::Io`] when the input, found and checked,
/// cannot be reopened (a system failure, not the input's).
pub(super) const REOPENING: &str = "reopening (through /proc/thread-self/fd: is /proc mounted?)";

impl InputError {
    /// Whether the input itself is at fault (malformed, not a file, or no
    /// such file, or not ours to open or read), not the system: the CLI
    /// exits 2 for these.
    pub fn is_bad_input(&self) -> bool {
        match self {
            InputError::Format { .. }
            | InputError::NotAFile { .. }
            | InputError::NotFollowed { .. }
            | InputError::HardLinked { .. }
            | InputError::InDirectory(_)
            | InputError::NotRegular { .. } => true,
            // one we may not open or read (EACCES, EPERM) is the user's
            // to fix, as a missing one is
            InputError::Io { op, source, .. }
                if (*op == OPENING || *op == READING)
                    && source.kind() == io::ErrorKind::PermissionDenied =>
            {
                true
            }
            InputError::Io { op, source, .. } => {
                *op == OPENING
                    && (matches!(
                        source.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) || matches!(
                        source.raw_os_error(),
                        Some(libc::ELOOP | libc::ENAMETOOLONG)
                    ))
            }
            // the system's: the temporary directory full or unwritable
            InputError::Spool { .. } => false,
        }
    }
}

/// The [`InputError::Spool`] of the temporary copy of `path` (`what` it
/// is) in `dir`, failing to be `op` (created, written).
pub(super) fn spool_err(
    (op, what): (&'static str, &'static str),
    path: &Path,
    dir: &Path,
) -> impl FnOnce(io::Error) -> InputError {
    let (path, dir) = (path.to_path_buf(), dir.to_path_buf());
    move |source| InputError::Spool {
        op,
        what,
        path,
        dir,
        source,
    }
}

pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> InputError {
    let path = path.to_path_buf();
    move |source| InputError::Io { op, path, source }
}
