//! Output files. A regular file (or a new one) is written atomically: to a
//! temporary file in the target's directory, mode 0600 as perf writes, then
//! renamed into place; on error, drop or a signal the temporary file is
//! removed. A FIFO or character device is written straight into (pipe-mode
//! streams only). Anything else is refused. Every symlink on the path (a
//! directory's too) is followed by hand, and only when root or we own it
//! ([`walk()`]): the link itself is never replaced; a symlink to nothing,
//! or another user's anywhere on the path, is refused.

pub mod aligned;
pub mod stale;
mod stream;
mod walk;

mod error;

use error::{io_err, raced};
pub use error::{unusable_path, OutputError};
pub use stream::open_stream;
pub use walk::{walk, Walked};

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What an output path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A regular file or nothing yet, at this (symlink-resolved) path.
    File(PathBuf),
    /// A FIFO or character device: written in place, no seeking.
    Stream(PathBuf),
}

/// Whether `path` has a directory's form ("dir/", "dir/.", ".."): a
/// directory to the kernel even when nothing is there yet, whatever
/// `Path::file_name` makes of it (it drops a trailing "/" or "/.", and a
/// file would be made at "dir").
pub fn names_a_directory(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    let last = bytes.rsplit(|&c| c == b'/').next().unwrap_or_default();
    bytes.ends_with(b"/") || last == b"." || last == b".."
}

/// Classifies an output path, following symlinks to an existing file (a
/// link to nothing is refused). The path is looked at twice (walked, then
/// followed by the kernel); a file renamed over it in between (another
/// `--in-place` merge of it finishing) reads as a different file: looked
/// at again, up to three times, before it is taken for a link naming no
/// path to its file.
pub fn classify(path: &Path) -> Result<Target, OutputError> {
    let mut tries = 0;
    loop {
        match classify_once(path) {
            Err(OutputError::Unreachable { .. }) if tries < 2 => tries += 1,
            other => return other,
        }
    }
}

/// [`classify`], one look.
fn classify_once(path: &Path) -> Result<Target, OutputError> {
    if names_a_directory(path) {
        return Err(OutputError::Unsupported {
            path: path.to_path_buf(),
            kind: "directory",
        });
    }
    // where the links lead, each checked (before anything is opened); a
    // directory on the way missing (or no directory) is the write's error,
    // named as such when the file cannot be made
    let walked = match walk(path, true) {
        Err(OutputError::Io { source, .. })
            if matches!(
                source.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Target::File(path.to_path_buf()));
        }
        w => w?,
    };
    // What it is, as the kernel follows links (magic ones too: /dev/stdout
    // is /proc/self/fd/1, whose text "pipe:[N]" names no path)...
    let meta = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(path)(e)),
    };
    let Some(meta) = meta else {
        // Nothing there, as the kernel follows links: the file is made at
        // the name as given (a link planted there meanwhile is replaced by
        // the rename, never followed). A link to nothing is refused:
        // following it by hand would follow whatever a user swaps in after
        // the kernel looked, past fs.protected_symlinks.
        if std::fs::symlink_metadata(path).is_ok_and(|l| l.file_type().is_symlink()) {
            return Err(OutputError::Unsupported {
                path: path.to_path_buf(),
                kind: "dangling symlink",
            });
        }
        return Ok(Target::File(path.to_path_buf()));
    };
    let ft = meta.file_type();
    let kind = if ft.is_file() {
        ""
    } else if ft.is_fifo() || ft.is_char_device() {
        return Ok(Target::Stream(path.to_path_buf()));
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_socket() {
        "socket"
    } else {
        "special file"
    };
    if !kind.is_empty() {
        return Err(OutputError::Unsupported {
            path: path.to_path_buf(),
            kind,
        });
    }
    // ...and, for a file (or nothing yet), where: the file a link names is
    // replaced, never the link. A link of /proc (/proc/self/fd/1 for
    // /dev/stdout) reads as text that need not name the file ("/f
    // (deleted)", "/memfd:x", another namespace's path): the path reached
    // must be the very file the kernel found, or nothing is replaced.
    let same = walked.name.as_ref().is_some_and(|n| {
        crate::sys::identity_at(walked.dir.as_fd(), n)
            .is_ok_and(|id| id == (meta.dev(), meta.ino()))
    });
    if !same {
        return Err(OutputError::Unreachable {
            path: path.to_path_buf(),
        });
    }
    Ok(Target::File(walked.path()))
}

/// A temporary file being written (or a directory made for one): its
/// directory (held open), its name and whether it is a directory.
type Temporary = (Arc<OwnedFd>, Vec<u8>, bool);

/// Temporary files being written, removed by [`remove_temporaries`] when a
/// signal ends the process.
struct Temporaries {
    list: Vec<Temporary>,
    /// [`remove_temporaries`] ran: the process is ending, and no temporary
    /// file may be made after the list was emptied (it would be left).
    closing: bool,
}

static TEMPORARIES: Mutex<Temporaries> = Mutex::new(Temporaries {
    list: Vec::new(),
    closing: false,
});

fn temporaries() -> std::sync::MutexGuard<'static, Temporaries> {
    TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes every temporary file still registered, then the directories
/// made for them (last made first, each only while empty), for a signal
/// handler thread before the process exits; none can be made after it.
pub fn remove_temporaries() {
    let mut t = temporaries();
    t.closing = true;
    for (dir, name, directory) in t.list.drain(..).rev() {
        let _ = match directory {
            true => crate::sys::rmdir_at(dir.as_fd(), &name),
            false => crate::sys::unlink_at(dir.as_fd(), &name),
        };
    }
}

/// The error for a temporary not made because a signal is ending the
/// process.
fn ending() -> io::Error {
    io::Error::new(
        io::ErrorKind::Interrupted,
        "the process is ending (a signal)",
    )
}

/// Makes the file or directory `name` in `dir` with `make` (which says
/// whether it made it: a directory may have been there) and, if it did,
/// lists it for [`remove_temporaries`] before a signal handler can see it
/// (the handler waits): for outputs written outside [`AtomicFile`]
/// (`archive`'s cache files and the directories made for them). Fails
/// once a signal is ending the process. Take it off with
/// [`settle_temporary`].
pub fn make_temporary<T>(
    dir: &Arc<OwnedFd>,
    name: &[u8],
    directory: bool,
    make: impl FnOnce() -> io::Result<(T, bool)>,
) -> io::Result<(T, bool)> {
    let mut t = temporaries();
    if t.closing {
        return Err(ending());
    }
    let (made, listed) = make()?;
    if listed {
        t.list.push((dir.clone(), name.to_vec(), directory));
    }
    Ok((made, listed))
}

/// Does `op` to the temporary `name` in `dir` (its rename into place, its
/// removal, nothing when it is kept) while a signal handler waits, and
/// takes it off the list when `op` succeeded: a signal never removes a
/// name that is no longer a temporary.
pub fn settle_temporary(
    dir: &Arc<OwnedFd>,
    name: &[u8],
    op: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    let mut t = temporaries();
    op()?;
    t.list
        .retain(|(d, n, _)| !(Arc::ptr_eq(d, dir) && n.as_slice() == name));
    Ok(())
}

/// An output file being written. Its directory is resolved once, when it is
/// created, and held open: the temporary file is made, renamed and removed
/// relative to it, so a directory on the path swapped for a link meanwhile
/// (by whoever owns it) cannot send the file anywhere else.
///
/// The file is made unnamed (O_TMPFILE) where the file system allows: then
/// it is invisible until the commit links it in, and a process killed
/// even by SIGKILL leaves nothing (but in the instant of a commit that
/// replaces a file, when it is named to be renamed). Elsewhere it is a
/// named temporary file, removed on error or a catchable signal; what a
/// SIGKILL leaves of one is removed by a later run writing in the same
/// directory ([`stale::remove_stale_temporaries`]).
#[derive(Debug)]
pub struct AtomicFile {
    file: Option<File>,
    dir: Arc<OwnedFd>,
    /// The temporary file's name in `dir`; empty while unnamed, and once
    /// renamed or removed.
    tmp: Vec<u8>,
    /// The target's name in `dir`.
    name: Vec<u8>,
    /// Mode, uid and gid to give the new file (from the file it replaces,
    /// for `--in-place`).
    keep: Option<(u32, u32, u32)>,
    /// The target as given, for errors.
    path: PathBuf,
}

impl AtomicFile {
    /// Creates a temporary file next to `target` (a regular file or a new
    /// path, symlinks already resolved), mode 0600. Its directory is
    /// reached by [`walk()`] (another user's link on the way is an error
    /// wrapping [`OutputError::ForeignLink`]); a link at `target` itself
    /// is not followed (the commit replaces it). The directory gone by the
    /// time the file is made in it, or one we may not write in, is an
    /// error wrapping [`OutputError::Io`] too: see
    /// [`OutputError::refusal_in`].
    pub fn create(target: &Path) -> io::Result<AtomicFile> {
        crate::testhook::hold("MMAP2_SYNTH_TEST_HOLD_BEFORE_OUTPUT");
        let walked = walk(target, false).map_err(io::Error::other)?;
        let Some(name) = walked.name.clone() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "output has no file name",
            ));
        };
        let dir_fd: OwnedFd = walked.open_dir().map_err(raced(target))?.into();
        let dir_fd = Arc::new(dir_fd);
        stale::remove_stale_temporaries(dir_fd.as_fd());
        // (linked in through /proc/self/fd at the commit: only with it)
        if Path::new("/proc/self/fd").is_dir() {
            if let Ok(file) = crate::sys::create_unnamed_at(dir_fd.as_fd(), 0o600) {
                // locked for our life: should it be named (at the commit)
                // and we be killed, a later run sees it is not in use
                let _ = crate::sys::try_lock_exclusive(&file);
                return Ok(AtomicFile {
                    file: Some(file),
                    dir: dir_fd,
                    tmp: Vec::new(),
                    name,
                    keep: None,
                    path: target.to_path_buf(),
                });
            }
        }
        let (file, tmp) = create_named(&dir_fd, None).map_err(raced(target))?;
        Ok(AtomicFile {
            file,
            dir: dir_fd,
            tmp,
            name,
            keep: None,
            path: target.to_path_buf(),
        })
    }
}

/// Creates a temporary file `.m2s-PID-N.tmp` in `dir` (mode 0600, listed
/// for the signal handler, locked for our life: see
/// [`stale::remove_stale_temporaries`]), or, with `unnamed`, gives that
/// name to the unnamed file: the file made (None for `unnamed`) and its
/// name.
/// A number no other process can predict (std's hash keys come from the
/// kernel's random source), of at most 10 digits as [`stale`] reads them.
fn unguessable() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32
}

fn create_named(
    dir_fd: &Arc<OwnedFd>,
    unnamed: Option<&File>,
) -> io::Result<(Option<File>, Vec<u8>)> {
    let mut tries = 0u32;
    {
        loop {
            // Short, so it fits wherever the target's name does; its number
            // random, so another user cannot make every name a run will try
            // exist beforehand (names of a guessed pid and 0..100 did).
            let tmp = format!(".m2s-{}-{}.tmp", std::process::id(), unguessable()).into_bytes();
            // listed before a signal can see it made (the handler waits)
            let mut t = temporaries();
            if t.closing {
                return Err(ending());
            }
            let made = match unnamed {
                Some(f) => crate::sys::link_at(f, dir_fd.as_fd(), &tmp).map(|()| None),
                None => crate::sys::create_at(dir_fd.as_fd(), &tmp, 0o600).map(|f| {
                    let _ = crate::sys::try_lock_exclusive(&f);
                    Some(f)
                }),
            };
            match made {
                Ok(file) => {
                    t.list.push((dir_fd.clone(), tmp.clone(), false));
                    return Ok((file, tmp));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

impl AtomicFile {
    /// Gives the committed file the mode and owner of `meta` (the file it
    /// replaces) instead of 0600 and ours.
    pub fn keep_mode_and_owner(&mut self, meta: &std::fs::Metadata) {
        self.keep = Some((meta.mode() & 0o7777, meta.uid(), meta.gid()));
    }

    /// Whether the file the commit will replace is `meta`'s (same device
    /// and inode, not through a link): for `--in-place`, that the directory
    /// held is the one the input was opened in.
    pub fn replaces(&self, meta: &std::fs::Metadata) -> bool {
        crate::sys::identity_at(self.dir.as_fd(), &self.name)
            .is_ok_and(|id| id == (meta.dev(), meta.ino()))
    }

    /// The open temporary file.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file present until commit")
    }

    /// Renames into place. When an existing file is replaced, the data is
    /// flushed to disk first, so a crash leaves the old file or the new one,
    /// never a torn one; a new file needs no flush (nothing is lost if it is
    /// missing after a crash), which keeps big outputs as fast as `cp`.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take();
        if let Some(f) = &file {
            if let Some((mode, uid, gid)) = self.keep {
                std::os::unix::fs::fchown(f, Some(uid), Some(gid))?;
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            if crate::sys::exists_at(self.dir.as_fd(), &self.name) {
                f.sync_all()?;
            }
        }
        if let (Some(f), true) = (&file, self.tmp.is_empty()) {
            // unnamed, for a new file: linked in under its name at once
            match crate::sys::link_at(f, self.dir.as_fd(), &self.name) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                done => return done.map_err(raced(&self.path)),
            }
            // replacing one: named first (listed for a signal), then renamed
            self.tmp = create_named(&self.dir, Some(f))
                .map_err(raced(&self.path))?
                .1;
        }
        // renamed and off the list at once for a signal (which would
        // otherwise remove a name that is not ours any more)
        let mut t = temporaries();
        crate::sys::rename_at(self.dir.as_fd(), &self.tmp, &self.name)
            .map_err(raced(&self.path))?;
        self.forget_tmp(&mut t.list);
        Ok(())
    }

    /// Takes the temporary file off the signal handler's list.
    fn forget_tmp(&mut self, list: &mut Vec<Temporary>) {
        let tmp = std::mem::take(&mut self.tmp);
        list.retain(|(d, n, _)| !(Arc::ptr_eq(d, &self.dir) && *n == tmp));
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            let mut t = temporaries();
            let _ = crate::sys::unlink_at(self.dir.as_fd(), &self.tmp);
            self.forget_tmp(&mut t.list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    // A stream output swapped for a link after classify looked (to a file,
    // or through another user's link) is not written through: open_stream
    // checks the links again, opens their end without following one and
    // wants a FIFO or device there.
    #[test]
    fn a_stream_swapped_for_a_link_after_classify_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("out");
        let made = std::process::Command::new("mkfifo").arg(&p).status();
        assert!(made.unwrap().success());
        assert_eq!(classify(&p).unwrap(), Target::Stream(p.clone()));
        let file = tmp.path().join("file");
        std::fs::write(&file, b"keep").unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&file, &p).unwrap();
        assert!(open_stream(&p).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        // a link of ours to a device is still followed
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/dev/null", &p).unwrap();
        assert!(open_stream(&p).is_ok());
    }

    // The target appears only on commit, mode 0600, replacing a file or
    // new; while written the file has no name (nothing in the directory,
    // nothing for a signal to remove), and a dropped one leaves nothing.
    #[test]
    fn commit_and_abandon() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let target = dir.join("out.data");
        std::fs::write(&target, b"old").unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1, "unnamed");
        f.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let mode = std::fs::metadata(&target).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let fresh = dir.join("fresh.data");
        let mut f = AtomicFile::create(&fresh).unwrap();
        f.file().write_all(b"fresh").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"fresh");
        let mut f = AtomicFile::create(&target).unwrap();
        f.file().write_all(b"partial").unwrap();
        let held = f.dir.clone();
        assert!(f.tmp.is_empty());
        assert!(!temporaries()
            .list
            .iter()
            .any(|(d, ..)| Arc::ptr_eq(d, &held)));
        drop(f);
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 2);
        // a named temporary (where there is no O_TMPFILE) is listed for a
        // signal until removed
        let (named, name) = create_named(&held, None).unwrap();
        assert!(named.is_some() && dir.join(std::ffi::OsStr::from_bytes(&name)).exists());
        assert!(temporaries()
            .list
            .iter()
            .any(|(d, n, _)| Arc::ptr_eq(d, &held) && *n == name));
        drop(AtomicFile {
            file: named,
            dir: held.clone(),
            tmp: name,
            name: b"never.data".to_vec(),
            keep: None,
            path: dir.join("never.data"),
        });
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 2);
        assert!(!temporaries()
            .list
            .iter()
            .any(|(d, ..)| Arc::ptr_eq(d, &held)));
    }

    // The directory is resolved once, at create: a link on the path
    // repointed before the commit (or the drop) cannot move the file, or
    // the removal of the temporary one, into the directory it names now.
    #[test]
    fn directory_held_from_create_to_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let link = tmp.path().join("link");
        let repoint = |to: &Path| {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(to, &link).unwrap();
        };
        repoint(&a);
        let mut f = AtomicFile::create(&link.join("out.data")).unwrap();
        f.file().write_all(b"new").unwrap();
        repoint(&b);
        f.commit().unwrap();
        assert_eq!(std::fs::read(a.join("out.data")).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(&b).unwrap().count(), 0);
        repoint(&a);
        let f = AtomicFile::create(&link.join("gone.data")).unwrap();
        repoint(&b);
        std::fs::write(b.join("gone.data"), b"theirs").unwrap();
        drop(f);
        assert_eq!(std::fs::read_dir(&a).unwrap().count(), 1, "only out.data");
        assert_eq!(
            std::fs::read_dir(&b).unwrap().count(),
            1,
            "theirs untouched"
        );
        // replaces: the file at the name in the held directory
        let f = AtomicFile::create(&a.join("out.data")).unwrap();
        assert!(f.replaces(&std::fs::metadata(a.join("out.data")).unwrap()));
        assert!(!f.replaces(&std::fs::metadata(tmp.path()).unwrap()));
    }

    // A directory on the path swapped for another user's link after
    // classify looked (the race a check by path loses) is not followed by
    // create: it walks the path again, from "/", a directory at a time.
    #[test]
    #[ignore = "needs root (lchown)"]
    fn create_refuses_a_directory_swapped_for_a_foreign_link() {
        assert_eq!(crate::sys::effective_uid(), 0, "needs root");
        let tmp = tempfile::tempdir().unwrap();
        let (d, elsewhere) = (tmp.path().join("d"), tmp.path().join("elsewhere"));
        std::fs::create_dir(&d).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        let Target::File(p) = classify(&d.join("out.data")).unwrap() else {
            panic!("a file")
        };
        std::fs::remove_dir(&d).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &d).unwrap();
        std::os::unix::fs::lchown(&d, Some(65534), None).unwrap();
        let e = AtomicFile::create(&p).unwrap_err();
        assert!(e.get_ref().is_some_and(|e| e.is::<OutputError>()), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    // A /proc fd link (what /dev/stdout is) to a file with a path resolves
    // to that path; to a deleted file its text ("/x (deleted)") names no
    // path to it, so it is refused, not created at that text.
    #[test]
    fn proc_fd_links_are_resolved_only_to_the_file_itself() {
        use std::os::fd::AsRawFd;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out.data");
        let f = File::create(&path).unwrap();
        let link = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
        assert_eq!(classify(&link).unwrap(), Target::File(path.clone()));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            classify(&link),
            Err(OutputError::Unreachable { .. })
        ));
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    // A path the kernel takes for a directory ("new/", "new/.", "..") is
    // refused even when nothing is there, not made into a file at "new".
    #[test]
    fn directory_forms_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let new = tmp.path().join("new");
        for p in [
            format!("{}/", new.display()),
            format!("{}/.", new.display()),
            "..".into(),
        ] {
            let r = classify(Path::new(&p));
            assert!(
                matches!(
                    r,
                    Err(OutputError::Unsupported {
                        kind: "directory",
                        ..
                    })
                ),
                "{p}: {r:?}"
            );
        }
        assert!(!new.exists());
        assert_eq!(classify(&new).unwrap(), Target::File(new.clone()));
    }

    // A 255-byte name works (the temporary name is short), and symlinks,
    // FIFOs, devices and directories are classified, never replaced.
    #[test]
    fn long_names_and_classification() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let long = dir.join("x".repeat(255));
        let f = AtomicFile::create(&long).unwrap();
        f.commit().unwrap();
        assert!(long.exists());
        let real = dir.join("real.data");
        std::os::unix::fs::symlink("real.data", dir.join("link")).unwrap();
        // a link to nothing: refused (its target could be swapped after
        // the look); to a file: that file
        assert!(matches!(
            classify(&dir.join("link")),
            Err(OutputError::Unsupported {
                kind: "dangling symlink",
                ..
            })
        ));
        std::fs::write(&real, b"x").unwrap();
        assert_eq!(classify(&dir.join("link")).unwrap(), Target::File(real));
        assert_eq!(
            classify(Path::new("/dev/null")).unwrap(),
            Target::Stream("/dev/null".into())
        );
        assert!(matches!(
            classify(dir),
            Err(OutputError::Unsupported {
                kind: "directory",
                ..
            })
        ));
    }
}
