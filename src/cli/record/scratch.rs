//! `record`'s scratch directory (`mmap2-synth-record-PID-XXXXXX` in the
//! temporary directory, mode 0700: perf's control FIFOs and the snapshot):
//! made fresh, locked (`flock`) while `record` runs, removed when it ends,
//! by a signal too. SIGKILL cannot be caught: the next `record` removes
//! what such a run left, the directories of its naming whose process is
//! gone and whose lock is free (see [`remove_stale`]).

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::super::error::CliError;

/// What every scratch directory's name begins with; the pid, a `-` and
/// tempfile's random letters follow.
const PREFIX: &str = "mmap2-synth-record-";

/// The names `record` gives the files it makes in its scratch directory,
/// with their type (`st_mode & S_IFMT`): the only ones a stale one's
/// removal takes.
const OURS: [(&[u8], u32); 3] = [
    (b"ctl", libc::S_IFIFO),
    (b"ack", libc::S_IFIFO),
    (b"snap.data", libc::S_IFREG),
];

/// The scratch directory and its open descriptor (which holds its lock),
/// once made.
static SCRATCH: std::sync::Mutex<Option<(PathBuf, Option<std::fs::File>)>> =
    std::sync::Mutex::new(None);

type Held = Option<(PathBuf, Option<std::fs::File>)>;

fn scratch() -> std::sync::MutexGuard<'static, Held> {
    SCRATCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes the scratch directory (a fresh name, mode 0700: another user
/// cannot squat on a name we would predict, nor see into it), locks it
/// and notes it for [`remove_scratch`]; then removes those that `record`s
/// killed by SIGKILL left.
pub(super) fn make_scratch() -> Result<PathBuf, CliError> {
    let prefix = format!("{PREFIX}{}-", std::process::id());
    let tmp = {
        // made and noted at once for a signal (its handler waits)
        let mut noted = scratch();
        // (tempfile makes directories with the umask's mode, 0755 as a
        // rule, unless told)
        let tmp = tempfile::Builder::new()
            .prefix(&prefix)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .map_err(|e| CliError::Record(format!("record: a scratch directory: {e}")))?
            .keep();
        // the lock says "in use" to a record that cannot see our pid
        // (another PID namespace sharing the directory); without one
        // (flock refused) the pid alone says it
        let held = (tmp.parent().zip(tmp.file_name()))
            .and_then(|(dir, name)| {
                let dir = std::fs::File::open(dir).ok()?;
                mmap2_synth::sys::open_dir_at(dir.as_fd(), name.as_encoded_bytes()).ok()
            })
            .filter(|d| mmap2_synth::sys::try_lock_exclusive(d).unwrap_or(false));
        *noted = Some((tmp.clone(), held));
        tmp
    };
    remove_stale(&tmp);
    Ok(tmp)
}

/// Removes the scratch directory when dropped.
pub(super) struct RemoveScratch;

impl Drop for RemoveScratch {
    fn drop(&mut self) {
        remove_scratch();
    }
}

/// Removes the scratch directory, if there is one (its lock goes after).
pub(crate) fn remove_scratch() {
    if let Some((dir, _lock)) = scratch().take() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The pid in a scratch directory's name `mmap2-synth-record-PID-XXXXXX`
/// (the random part 1 to 16 letters and digits); None for any other name.
fn pid_of(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX.as_bytes())?;
    let dash = rest.iter().position(|&c| c == b'-')?;
    let (pid, random) = (&rest[..dash], &rest[dash + 1..]);
    let digits = |s: &[u8]| (1..=10).contains(&s.len()) && s.iter().all(u8::is_ascii_digit);
    let letters = |s: &[u8]| (1..=16).contains(&s.len()) && s.iter().all(u8::is_ascii_alphanumeric);
    if !digits(pid) || !letters(random) {
        return None;
    }
    std::str::from_utf8(pid).ok()?.parse().ok()
}

/// Whether process `pid` is gone: pidfd_open says there is none (any
/// other answer, Linux < 5.3's included, counts as alive).
fn gone(pid: u32) -> bool {
    matches!(mmap2_synth::sys::pidfd_open(pid), Err(e) if e.raw_os_error() == Some(libc::ESRCH))
}

/// Removes, beside our own scratch directory `own`, those that `record`s
/// killed by SIGKILL left. The temporary directory is anyone's to write
/// in, so a name is only a hint: an entry is taken when its name is of our
/// naming, its pid is gone, it is a directory (opened without following a
/// symlink) of our owner, and its lock is free (no `record` of another PID
/// namespace uses it); inside it only our files go (the names we make,
/// of the types we make, unlinked, never followed), then the directory if
/// that left it empty. Anything else is left as it is, silently.
fn remove_stale(own: &Path) {
    let (Some(parent), Ok(own_meta)) = (own.parent(), std::fs::symlink_metadata(own)) else {
        return;
    };
    let (Ok(dir), Ok(entries)) = (std::fs::File::open(parent), std::fs::read_dir(parent)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        let Some(pid) = pid_of(name) else { continue };
        if pid != std::process::id() && gone(pid) {
            let _ = remove_one(&dir, name, own_meta.uid());
        }
    }
}

/// Removes the stale scratch directory `name` of `parent` if it is one
/// (see [`remove_stale`]).
fn remove_one(parent: &std::fs::File, name: &[u8], uid: u32) -> std::io::Result<()> {
    use mmap2_synth::sys::{file_type_at, identity_at, open_dir_at, rmdir_at, unlink_at};
    // something mounted there (a user's FUSE mount would hang us) is not
    // ours
    if mmap2_synth::sys::is_mount_root_at(parent.as_fd(), name)? {
        return Ok(());
    }
    let d = open_dir_at(parent.as_fd(), name)?;
    let m = d.metadata()?;
    if m.uid() != uid || !mmap2_synth::sys::try_lock_exclusive(&d)? {
        return Ok(());
    }
    for (file, kind) in OURS {
        if file_type_at(d.as_fd(), file).is_ok_and(|t| t == kind) {
            unlink_at(d.as_fd(), file)?;
        }
    }
    // still the directory looked at (not renamed away and replaced)
    if identity_at(parent.as_fd(), name)? == (m.dev(), m.ino()) {
        rmdir_at(parent.as_fd(), name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only names of our naming give a pid: a prefix, digits, a dash and
    // 1 to 16 letters or digits.
    #[test]
    fn names_of_our_naming() {
        assert_eq!(pid_of(b"mmap2-synth-record-123-aB3xYz"), Some(123));
        for other in [
            &b"mmap2-synth-record-123-"[..],
            b"mmap2-synth-record--abcdef",
            b"mmap2-synth-record-12a-abcdef",
            b"mmap2-synth-record-123-ab.def",
            b"mmap2-synth-record-123-abc/def",
            b"mmap2-synth-record-99999999999-abcdef",
            b"xmmap2-synth-record-123-abcdef",
        ] {
            assert_eq!(pid_of(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
