//! Where `record`'s perf writes, and how its recording reaches `-o`.
//!
//! perf runs as root and opens its output by path: it renames a non-empty
//! file there to `.old`, truncates and fills an empty one (keeping its
//! owner and mode), and the file at `-o` when it exits is what the maps
//! would be merged into. In a directory another user can write, that user
//! could hand perf a file of theirs to fill with root's samples, or swap
//! perf's file for a crafted one while it records and have the maps of
//! root's processes merged into theirs. So:
//!
//! - an `-o` owned by another user (not root, not us) is refused before
//!   perf starts;
//! - perf writes `perf.data` in a private directory of ours (mode 0700)
//!   made beside `-o` (the same file system), named to it as
//!   `/proc/OURPID/fd/N/perf.data` of that directory as we hold it open:
//!   no directory renamed or swapped on the path can redirect it, and no
//!   other user can touch what is in it;
//! - once perf has written its file's header (its events are open, not yet
//!   on), the file is given `-o` as a second name (linked in our directory,
//!   then renamed over `-o`), as perf would have had it there; a non-empty
//!   `-o` is first renamed to `-o.old`, as perf does when it opens its
//!   output ([`Landing::make_room`]). A perf that fails before (a pid that
//!   does not exist, an event it cannot open) leaves `-o` as it was: its
//!   empty file never goes there. The user's file is at `-o` or `-o.old`
//!   at every moment, whatever ends the run;
//! - when perf has exited, `-o` must still be that file (same device and
//!   inode, not through a link): if it is not (renamed, replaced), nothing
//!   is merged, nothing written there, exit 2, and perf's recording is left
//!   in the private directory, whose path is given;
//! - the merge rewrites perf's file in place in our directory (a temporary
//!   file there, renamed over it, mode and owner kept: 0600, ours), and
//!   the result is renamed over `-o` in the directory held, again only
//!   while `-o` is still perf's file.
//!
//! The private directory is removed once perf's recording is at `-o`
//! ([`settle`]), and kept, marked so, where the recording is left in it
//! (and said). A SIGKILL leaves it (with a second name of the file); it is
//! locked (`flock`) while `record` runs, and the next `record` writing in
//! the same directory removes such leftovers ([`super::leftover`]).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use mmap2_synth::output::Walked;
use mmap2_synth::sys::{identity_at, rmdir_at, unlink_at};

use super::super::error::CliError;
use super::leftover::{KEPT, LINK, PERF_FILE, PREFIX};

/// `-o` and the private directory perf writes in.
struct Landing {
    /// The directory of `-o`, held open from before perf started.
    dir: File,
    /// `-o`'s name in `dir`.
    name: OsString,
    /// `-o` as given (symlinks resolved), for messages.
    shown: PathBuf,
    /// The private directory in `dir`: its name there, and held open.
    private_name: OsString,
    private: File,
    /// perf's file, once linked at `-o`: its device and inode.
    linked: Option<(u64, u64)>,
    /// The merge is at `-o` (perf's private name no longer needed).
    merged: bool,
    /// Where perf's file was left has been said.
    said: bool,
}

impl Landing {
    /// perf's file as the user may reach it (for messages).
    fn private_shown(&self) -> PathBuf {
        let dir = self.shown.parent().unwrap_or(Path::new(""));
        dir.join(&self.private_name).join(PERF_FILE)
    }

    /// perf's file, opened without following a link: a regular file of
    /// ours, made 0600 (as perf makes it; an umask could take more away).
    fn perf_file(&self) -> std::io::Result<File> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(at(&self.private, PERF_FILE))?;
        let m = f.metadata()?;
        if !m.is_file() || m.uid() != mmap2_synth::sys::effective_uid() {
            return Err(std::io::Error::other("not a regular file of ours"));
        }
        if m.mode() & 0o7777 != 0o600 {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(f)
    }

    /// Moves a non-empty regular file at `-o` that is not perf's to
    /// `-o.old` (replacing one there), as perf does with its output: done
    /// just before perf's file is put at `-o`, so the user's file is left
    /// where it is unless a recording takes its place. A link or another
    /// user's file swapped in since [`prepare`] looked is moved, not
    /// followed.
    fn make_room(&self) -> std::io::Result<()> {
        let Ok(m) = std::fs::symlink_metadata(at(&self.dir, &self.name)) else {
            return Ok(());
        };
        if !m.is_file() || m.len() == 0 || self.linked == Some((m.dev(), m.ino())) {
            return Ok(());
        }
        let mut old = self.name.clone();
        old.push(".old");
        std::fs::rename(at(&self.dir, &self.name), at(&self.dir, &old)).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("keeping the previous {} as .old: {e}", self.shown.display()),
            )
        })
    }

    /// Whether perf has written into its file (its header, at least): a
    /// recording that may take `-o`'s place.
    fn perf_wrote(&self) -> bool {
        std::fs::symlink_metadata(at(&self.private, PERF_FILE))
            .is_ok_and(|m| m.is_file() && m.len() > 0)
    }

    /// Marks the private directory as holding a recording left there on
    /// purpose (whose place is said): a later `record` keeps it.
    fn keep(&mut self) {
        self.said = true;
        let _ = mmap2_synth::sys::create_at(self.private.as_fd(), KEPT.as_bytes(), 0o600);
    }
}

static LANDING: std::sync::Mutex<Option<Landing>> = std::sync::Mutex::new(None);

fn landing() -> std::sync::MutexGuard<'static, Option<Landing>> {
    LANDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// `name` in the directory `dir` holds open, as a path: through
/// `/proc/self/fd`, so it reaches that very directory whatever is renamed
/// on the way to it meanwhile.
fn at(dir: &File, name: impl AsRef<OsStr>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name.as_ref())
}

/// Gets `-o` ready before perf starts: refuses another user's file there
/// (one of ours or root's stays until perf's recording takes its place:
/// [`Landing::make_room`]), and makes the private directory perf will
/// write in. `walked` is `-o` walked to its
/// directory, held open, its links followed (each checked: ours or
/// root's, on the way as at its end).
pub(super) fn prepare(walked: Walked) -> Result<(), CliError> {
    let me = mmap2_synth::sys::effective_uid();
    let resolved = walked.path();
    let shown = resolved.display();
    // a directory that cannot be written in (no permission, read-only) is
    // the user's to change, exit 2, as for every output
    let err = |what: &str, e: std::io::Error| match mmap2_synth::output::unusable_path(&e) {
        true => CliError::Usage(format!("record: {what}: {e}")),
        false => CliError::Record(format!("record: {what}: {e}")),
    };
    let dir_path = walked.shown.clone();
    let dir_path = match dir_path.as_os_str().is_empty() {
        true => PathBuf::from("."),
        false => dir_path,
    };
    let dir = walked
        .open_dir()
        .map_err(|e| err(&format!("opening {}", dir_path.display()), e))?;
    let Some(name) = walked.name.as_deref().map(OsStr::from_bytes) else {
        return Err(CliError::Usage(format!(
            "record: perf's output {shown} names no file"
        )));
    };
    if let Ok(m) = std::fs::symlink_metadata(at(&dir, name)) {
        if m.uid() != 0 && m.uid() != me {
            return Err(CliError::Usage(format!(
                "record: {shown} belongs to uid {}: refused (perf would fill it with the \
                 recording, readable by its owner, or move it to .old); remove it or give \
                 another -o",
                m.uid()
            )));
        }
    }
    let made = tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{}-", std::process::id()))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(at(&dir, ""))
        .map_err(|e| {
            err(
                &format!("a directory for perf's output in {}", dir_path.display()),
                e,
            )
        })?
        .keep();
    let private_name = made.file_name().unwrap_or_default().to_os_string();
    let private = mmap2_synth::sys::open_dir_at(dir.as_fd(), private_name.as_bytes())
        .map_err(|e| err("opening the directory for perf's output", e))?;
    // the one we made (ours, for us alone), not one swapped in under its name
    let m = private
        .metadata()
        .map_err(|e| err("the directory for perf's output", e))?;
    if m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(CliError::Record(format!(
            "record: {}: replaced after it was made: not writing into it",
            dir_path.join(&private_name).display()
        )));
    }
    // "in use" for as long as we run (the kernel drops it when we die); a
    // file system without flock leaves our pid alone to say it
    let _ = mmap2_synth::sys::try_lock_exclusive(&private);
    super::leftover::remove_stale(&dir, &dir_path, &private_name);
    *landing() = Some(Landing {
        dir,
        name: name.to_os_string(),
        shown: resolved.clone(),
        private_name,
        private,
        linked: None,
        merged: false,
        said: false,
    });
    Ok(())
}

/// What perf is given as `-o`: its file in the private directory, through
/// our own descriptor of it (`/proc/OURPID/fd/N/perf.data`).
pub(super) fn perf_output() -> Option<String> {
    let l = landing();
    let l = l.as_ref()?;
    Some(format!(
        "/proc/{}/fd/{}/{PERF_FILE}",
        std::process::id(),
        l.private.as_raw_fd()
    ))
}

/// Whether perf has written its file's header: it has opened its events
/// (perf writes the header after them, before it reads commands), so its
/// file is a recording, to take `-o`'s place.
pub(super) fn perf_wrote_its_header() -> bool {
    landing().as_ref().is_some_and(Landing::perf_wrote)
}

/// Gives perf's file the name `-o` (it keeps its private one), a
/// non-empty `-o` moved to `-o.old` first; notes which file that is. An
/// error says why it is not there (then it is merged into `-o` at the end,
/// as when linked).
pub(super) fn link_at_output() -> Result<(), String> {
    let mut l = landing();
    let Some(l) = l.as_mut() else { return Ok(()) };
    let link = || -> std::io::Result<(u64, u64)> {
        let m = l.perf_file()?.metadata()?;
        l.make_room()?;
        let _ = std::fs::remove_file(at(&l.private, LINK));
        std::fs::hard_link(at(&l.private, PERF_FILE), at(&l.private, LINK))?;
        let renamed = std::fs::rename(at(&l.private, LINK), at(&l.dir, &l.name));
        if renamed.is_err() {
            let _ = std::fs::remove_file(at(&l.private, LINK));
        }
        renamed.map(|()| (m.dev(), m.ino()))
    };
    match link() {
        Ok(id) => {
            l.linked = Some(id);
            Ok(())
        }
        Err(e) => Err(format!(
            "perf's recording is at {} until it ends, not at {}: {e}",
            l.private_shown().display(),
            l.shown.display()
        )),
    }
}

/// Whether `-o` is still perf's file as linked there (always, when it was
/// not linked); if not, says where perf's file is left (`how`: merged or
/// not) in an error, exit 2.
fn still_at_output(l: &mut Landing, how: &str) -> Result<(), CliError> {
    let Some(id) = l.linked else { return Ok(()) };
    if identity_at(l.dir.as_fd(), l.name.as_bytes()).is_ok_and(|now| now == id) {
        return Ok(());
    }
    l.keep();
    Err(CliError::Usage(format!(
        "record: {} is no longer the file perf wrote (renamed or replaced while perf ran): \
         nothing merged into it or written there; perf's recording is left, {how}, at {}",
        l.shown.display(),
        l.private_shown().display()
    )))
}

/// After perf exited: perf's file (through our directory), to merge into
/// in place, if it made one and `-o` is still that file (else exit 2,
/// nothing written at `-o`: see [`still_at_output`]).
pub(super) fn perf_file_to_merge() -> Result<Option<PathBuf>, CliError> {
    let mut l = landing();
    let Some(l) = l.as_mut() else { return Ok(None) };
    if l.perf_file().is_err() {
        return Ok(None);
    }
    still_at_output(l, "unmerged")?;
    Ok(Some(at(&l.private, PERF_FILE)))
}

/// The merge rewrote perf's file in our directory (a new file, unless it
/// had nothing to add): it replaces `-o`, if `-o` is still perf's file.
pub(super) fn place_merged() -> Result<(), CliError> {
    let mut l = landing();
    let Some(l) = l.as_mut() else { return Ok(()) };
    let perf = at(&l.private, PERF_FILE);
    let now = std::fs::symlink_metadata(&perf).map(|m| (m.dev(), m.ino()));
    if now.is_ok() && now.ok() != l.linked {
        still_at_output(l, "merged")?;
        // (never linked at -o: the user's file there goes to .old now)
        let placed = l
            .make_room()
            .and_then(|()| std::fs::rename(&perf, at(&l.dir, &l.name)));
        placed.map_err(|e| {
            l.keep();
            CliError::Record(format!(
                "record: putting the merged recording at {}: {e}; it is left at {}",
                l.shown.display(),
                l.private_shown().display()
            ))
        })?;
    }
    l.merged = true;
    Ok(())
}

/// Ends the landing (when `record` ends, or a signal ends it): perf's file
/// goes to `-o` if it is not there yet, the merge did not write it and
/// perf wrote into it (an empty one, of a perf that failed at its start,
/// leaves `-o` as it was), then its private name and the private
/// directory are removed; where `-o` is no longer perf's file (or it
/// cannot be put there), they stay, and that is said.
pub(crate) fn settle() {
    let Some(mut l) = landing().take() else {
        return;
    };
    let _ = unlink_at(l.private.as_fd(), LINK.as_bytes());
    if l.perf_wrote() && !l.merged {
        let placed = match l.linked {
            Some(id) => identity_at(l.dir.as_fd(), l.name.as_bytes()).is_ok_and(|now| now == id),
            None => (l.make_room())
                .and_then(|()| std::fs::rename(at(&l.private, PERF_FILE), at(&l.dir, &l.name)))
                .is_ok(),
        };
        if !placed {
            let said = l.said;
            l.keep();
            if !said {
                eprintln!(
                    "mmap2-synth record: perf's recording is left, unmerged, at {} ({} is \
                     not it)",
                    l.private_shown().display(),
                    l.shown.display()
                );
            }
            return;
        }
    }
    let _ = unlink_at(l.private.as_fd(), PERF_FILE.as_bytes());
    // still the directory made (its name is in a directory others may write)
    let name = l.private_name.as_bytes();
    if let (Ok(m), Ok(there)) = (l.private.metadata(), identity_at(l.dir.as_fd(), name)) {
        if (m.dev(), m.ino()) == there {
            let _ = rmdir_at(l.dir.as_fd(), name);
        }
    }
}

/// Settles the landing when dropped (see [`settle`]).
pub(super) struct Settle;

impl Drop for Settle {
    fn drop(&mut self) {
        settle();
    }
}
