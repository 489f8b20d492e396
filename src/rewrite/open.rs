//! Opening the input of a rewrite: for `--in-place`, locked exclusively
//! for the whole rewrite, opened again if another rewrite replaced it
//! meanwhile, and (with `--salvage`) refused while a writer has it open.

use std::io;
use std::path::Path;

use super::error::{out_err, MergeError};
use crate::perf::Input;

/// Opens the input of a rewrite: locked (see [`open_locked`]) when the
/// output replaces it.
pub(super) fn open_input(path: &Path, in_place: bool, salvage: bool) -> Result<Input, MergeError> {
    if in_place {
        open_locked(path, salvage)
    } else {
        Ok(Input::open_as(path, false, salvage)?)
    }
}

/// How long an `--in-place` rewrite waits for another's lock on the file
/// (whoever owns the file can hold one for ever).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Locks `file` exclusively, waiting until `deadline` at most.
pub(super) fn lock_by(file: &std::fs::File, deadline: std::time::Instant) -> io::Result<()> {
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "held by another process until the wait ran out",
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Opens `path`, a regular file, and locks it exclusively; when another
/// rewrite replaced the file while we waited (the path names a new inode),
/// opens it again.
fn open_locked(path: &Path, salvage: bool) -> Result<Input, MergeError> {
    use std::os::unix::fs::MetadataExt;
    // one wait for all the tries (a file swapped for a new, locked one
    // each time would otherwise restart it)
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    for _ in 0..1000 {
        let input = Input::open_as(path, true, salvage)?;
        lock_by(&input.file, deadline).map_err(out_err("locking", path))?;
        let held = input.file.metadata().map_err(out_err("reading", path))?;
        let now = std::fs::metadata(path).map_err(out_err("reading", path))?;
        if (held.dev(), held.ino()) == (now.dev(), now.ino()) {
            // a perf record still writing its file looks killed: replacing
            // it would leave the rest of the recording in the unlinked file
            if input.salvaged.is_some() && crate::sys::open_for_writing(&input.file) == Some(true) {
                return Err(MergeError::Output {
                    op: "salvaging in place",
                    path: path.to_path_buf(),
                    source: io::Error::other(
                        "it is open for writing (a perf record still running?); \
                         salvage it with -o into another file",
                    ),
                });
            }
            return Ok(input);
        }
    }
    Err(MergeError::Output {
        op: "locking (it keeps being replaced)",
        path: path.to_path_buf(),
        source: io::Error::from(io::ErrorKind::WouldBlock),
    })
}
