//! Why an output cannot be written, and which of those are refusals (bad
//! input, exit 2) rather than failures.

use std::io;
use std::path::{Path, PathBuf};

/// Why an output path cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The path names something that is neither a regular file, a FIFO nor
    /// a character device.
    #[error("{}: is a {kind}, not a file, FIFO or character device", path.display())]
    Unsupported {
        /// The output.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A regular file reached through a link whose text names no path to
    /// it (a /proc fd link to a deleted file or a memfd): it cannot be
    /// replaced by renaming.
    #[error(
        "{}: a file reached through a link that names no path to it (a /proc fd link?): \
         it cannot be replaced",
        path.display()
    )]
    Unreachable {
        /// The output.
        path: PathBuf,
    },
    /// A symlink on the way to the output belongs to another user: root
    /// following it would write wherever that user points it.
    #[error(
        "{}: the symlink {} belongs to uid {uid}: not followed (its owner could point it \
         at any file)",
        path.display(),
        link.display()
    )]
    ForeignLink {
        /// The output.
        path: PathBuf,
        /// The link.
        link: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// The file an `--in-place` rewrite would replace is no longer the one
    /// it read: a directory on its path was replaced since it was opened.
    #[error(
        "{}: the input is no longer at that path (a directory on it replaced while it was \
         opened?): not replacing whatever is there now",
        path.display()
    )]
    Replaced {
        /// The output.
        path: PathBuf,
    },
    /// An I/O error on the output.
    #[error("{}", path.display())]
    Io {
        /// The output.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Whether `e`, met walking an output's path or making, linking or
/// renaming the output in its directory, says that the path cannot be
/// used as given: a directory on it missing (or gone since it was
/// checked), or not a directory; a loop of links; a name that is no file
/// name; no permission to write there (EACCES, EPERM) or a read-only file
/// system. The user's to change, as a missing or unreadable input is
/// (exit 2); anything else (a full disk, an I/O error, a quota) is the
/// system failing to write (exit 1).
pub fn unusable_path(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::ReadOnlyFilesystem
    ) || e.raw_os_error() == Some(libc::ELOOP)
}

impl OutputError {
    /// Whether the output cannot be used as given, or was raced: every
    /// refusal, and a path that cannot be written ([`unusable_path`]).
    /// Bad input (exit 2), not a failure of the system (exit 1).
    pub fn is_refusal(&self) -> bool {
        match self {
            OutputError::Io { source, .. } => unusable_path(source),
            _ => true,
        }
    }

    /// The refusal ([`OutputError::is_refusal`]) an I/O error carries, as
    /// [`super::AtomicFile`] returns one: None for any other error.
    pub fn refusal_in(e: &io::Error) -> Option<&OutputError> {
        let o = e.get_ref()?.downcast_ref::<OutputError>()?;
        o.is_refusal().then_some(o)
    }
}

/// `e`, from making or naming the output `path` in its directory held: a
/// path that cannot be used ([`unusable_path`]: the directory removed
/// since it was walked, or not writable by us) becomes the refusal
/// [`OutputError::Io`] carries; anything else (a full disk) is left as
/// it is.
pub(super) fn raced(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| match unusable_path(&e) {
        true => io::Error::other(io_err(path)(e)),
        false => e,
    }
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}
