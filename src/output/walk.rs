//! The one way an output's directory is opened: walked from "/" (or the
//! working directory) by [`crate::pathwalk`], a symlink met on the way (a
//! directory's as well as the last component's) followed only when root
//! or we own it. The directory reached is held open: files are made and
//! renamed relative to it, and nothing renamed or swapped on the path
//! meanwhile can move them.
//!
//! The kernel's fs.protected_symlinks refuses such links only in sticky
//! directories: without this walk, another user's link to /etc in a
//! directory of theirs (`-o /home/them/dir/passwd`) would make root
//! replace /etc/passwd.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::OutputError;
use crate::pathwalk::{self, Rules, Stop};

/// Where a walk ended.
#[derive(Debug)]
pub struct Walked {
    /// The directory holding the last component, held open (O_PATH).
    pub dir: OwnedFd,
    /// The last component's name in `dir`: missing or no symlink (unless
    /// not followed); None when the path ends at a directory itself ("/",
    /// ".", "..", or a link to one of those).
    pub name: Option<Vec<u8>>,
    /// `dir` as a path: the components walked, links resolved (relative
    /// when the walk started at the working directory), for messages.
    pub shown: PathBuf,
    /// The last symlink followed as the path's final component: the
    /// directory holding it (held open) and its name. For a /proc fd link
    /// whose text names no path (`/dev/stdout` is `/proc/self/fd/1`,
    /// `"pipe:[N]"`), the descriptor it stands for is read from it.
    pub last_link: Option<(OwnedFd, Vec<u8>)>,
}

impl Walked {
    /// The last component as a path ([`Walked::shown`] and the name).
    pub fn path(&self) -> PathBuf {
        match &self.name {
            Some(n) => self.shown.join(std::ffi::OsStr::from_bytes(n)),
            None if self.shown.as_os_str().is_empty() => PathBuf::from("."),
            None => self.shown.clone(),
        }
    }

    /// Opens the directory the walk ended in, for reading (to make files
    /// in it with `*at` calls).
    pub fn open_dir(&self) -> io::Result<std::fs::File> {
        crate::sys::reopen_dir(self.dir.as_fd())
    }

    /// Opens what the path names as a directory: the last component's, never
    /// through a link swapped in since the walk (ELOOP), a directory only
    /// (ENOTDIR: a FIFO or device is not opened).
    pub fn open_target_dir(&self) -> io::Result<std::fs::File> {
        match &self.name {
            Some(n) => crate::sys::open_dir_at(self.dir.as_fd(), n),
            None => self.open_dir(),
        }
    }
}

/// Walks `path` as [`crate::pathwalk::walk`] does from "/" or the working
/// directory, following a symlink at the last component too when
/// `follow_last` (else it is returned as the name, to be replaced, never
/// followed). A link owned by neither root nor us is
/// [`OutputError::ForeignLink`]; more than 40 links, ELOOP; a missing
/// directory on the way, ENOENT; a missing last component is returned
/// (for a new file). A trailing "/" is not kept: callers check the path's
/// form themselves ([`super::names_a_directory`]).
pub fn walk(path: &Path, follow_last: bool) -> Result<Walked, OutputError> {
    let rules = Rules {
        root: None,
        judge: None,
        own_links_only: true,
        follow_last,
    };
    match pathwalk::walk(path.as_os_str().as_bytes(), &rules) {
        Ok(end) => Ok(Walked {
            dir: end.dir,
            name: end.name,
            shown: end.shown,
            last_link: end.last_link,
        }),
        Err(Stop::ForeignLink { link, uid }) => Err(OutputError::ForeignLink {
            path: path.to_path_buf(),
            link,
            uid,
        }),
        Err(Stop::Io(source)) => Err(OutputError::Io {
            path: path.to_path_buf(),
            source,
        }),
        // no judge: nothing is refused
        Err(Stop::Refused) => Err(OutputError::Io {
            path: path.to_path_buf(),
            source: io::Error::from_raw_os_error(libc::EACCES),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn walked(p: &Path, follow_last: bool) -> (PathBuf, Option<Vec<u8>>) {
        let w = walk(p, follow_last).unwrap();
        (w.shown, w.name)
    }

    // Links on the way (relative, absolute, to directories and to the
    // last component) are followed by hand, `..` after a link is taken in
    // the directory the link led to, and the last link is kept as the
    // name unless followed.
    #[test]
    fn links_and_dot_dot_resolve_as_the_kernel_does() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(t.join("a/b/c")).unwrap();
        std::fs::create_dir(t.join("x")).unwrap();
        symlink("a/b/c", t.join("l")).unwrap();
        symlink(t.join("a/b"), t.join("abs")).unwrap();
        symlink("../../x", t.join("a/b/up")).unwrap();
        std::fs::write(t.join("x/f"), b"").unwrap();
        symlink("../x/f", t.join("a/fl")).unwrap();
        let some = |s: &str| Some(s.as_bytes().to_vec());
        // l/.. is a/b (c's parent), not t
        assert_eq!(
            walked(&t.join("l/../out"), true),
            (t.join("a/b"), some("out"))
        );
        assert_eq!(
            walked(&t.join("abs/c/new"), true),
            (t.join("a/b/c"), some("new"))
        );
        assert_eq!(walked(&t.join("a/b/up/f"), true), (t.join("x"), some("f")));
        assert_eq!(walked(&t.join("a/fl"), true), (t.join("x"), some("f")));
        assert_eq!(walked(&t.join("a/fl"), false), (t.join("a"), some("fl")));
        assert_eq!(walked(&t.join("a/b/./c/.."), true), (t.join("a/b"), None));
        assert_eq!(walked(Path::new("/.."), true), (PathBuf::from("/"), None));
        // "l/." wants l's directory itself
        let w = walk(&t.join("l/."), true).unwrap();
        assert_eq!((w.path(), w.name), (t.join("a/b/c"), None));
        // a file on the way is not a directory; a missing directory is missing
        let e = walk(&t.join("x/f/g"), true).unwrap_err();
        assert!(
            matches!(e, OutputError::Io { ref source, .. }
            if source.raw_os_error() == Some(libc::ENOTDIR)),
            "{e}"
        );
        let e = walk(&t.join("gone/g"), true).unwrap_err();
        assert!(
            matches!(e, OutputError::Io { ref source, .. }
            if source.kind() == io::ErrorKind::NotFound),
            "{e}"
        );
    }

    // A loop of links, or a chain of more than 40, is ELOOP (not followed
    // forever); 40 links are still followed.
    #[test]
    fn loops_are_eloop() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        symlink("b", t.join("a")).unwrap();
        symlink("a", t.join("b")).unwrap();
        for p in [t.join("a"), t.join("a/x")] {
            let e = walk(&p, true).unwrap_err();
            assert!(
                matches!(e, OutputError::Io { ref source, .. }
                if source.raw_os_error() == Some(libc::ELOOP)),
                "{e}"
            );
        }
        std::fs::create_dir(t.join("d")).unwrap();
        symlink("d", t.join("l0")).unwrap();
        for i in 1..=41 {
            symlink(format!("l{}", i - 1), t.join(format!("l{i}"))).unwrap();
        }
        assert!(walk(&t.join("l39/new"), true).is_ok());
        assert!(walk(&t.join("l40/new"), true).is_err());
    }

    // Another user's link is refused wherever it is on the path (a
    // directory's, the last component's), naming it and its owner; a last
    // component not followed is not checked (it is replaced, not used).
    #[test]
    #[ignore = "needs root (lchown)"]
    fn another_users_links_are_refused_anywhere() {
        assert_eq!(crate::sys::effective_uid(), 0, "needs root");
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        std::fs::create_dir(t.join("d")).unwrap();
        symlink("d", t.join("dl")).unwrap();
        std::os::unix::fs::lchown(t.join("dl"), Some(65534), None).unwrap();
        for (p, follow) in [
            ("dl/x", true),
            ("dl/x", false),
            ("dl", true),
            ("d/../dl/", true),
        ] {
            let e = walk(&t.join(p), follow).unwrap_err();
            let OutputError::ForeignLink { link, uid, .. } = e else {
                panic!("{p}: {e}")
            };
            assert_eq!((link, uid), (t.join("dl"), 65534), "{p}");
        }
        assert_eq!(
            walk(&t.join("dl"), false).unwrap().name,
            Some(b"dl".to_vec())
        );
    }

    // A relative path is walked from the working directory and shown
    // relative ("-o name", "-o ./x/../y").
    #[test]
    fn relative_paths_start_at_the_working_directory() {
        let w = walk(Path::new("name"), true).unwrap();
        assert_eq!(w.path(), PathBuf::from("name"));
        let w = walk(Path::new("./src/../Cargo.toml"), true).unwrap();
        assert_eq!(w.path(), PathBuf::from("Cargo.toml"));
        assert!(crate::sys::identity_at(w.dir.as_fd(), b"Cargo.toml").is_ok());
        let w = walk(Path::new(".."), true).unwrap();
        assert_eq!((w.path(), w.name), (PathBuf::from(".."), None));
    }
}
