//! The one way an output's directory is opened: walked from "/" (or the
//! working directory) one component at a time, each opened relative to
//! the directory held before it without following a link (O_PATH |
//! O_NOFOLLOW). A symlink met on the way (a directory's as well as the
//! last component's) is followed by hand only when root or we own it:
//! its owner is read from the link held open and its text read from that
//! same link, so no link swapped in between is followed. The directory
//! reached is held open: files are made and renamed relative to it, and
//! nothing renamed or swapped on the path meanwhile can move them.
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

/// As the kernel: at most this many links followed in one path.
const MAX_LINKS: u32 = 40;

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

/// The path walked so far, for messages: a stack of components.
struct Shown {
    absolute: bool,
    parts: Vec<Vec<u8>>,
}

impl Shown {
    fn up(&mut self) {
        match self.parts.last().map(Vec::as_slice) {
            Some(b"..") => self.parts.push(b"..".to_vec()),
            Some(_) => {
                self.parts.pop();
            }
            // "/.." is "/"
            None if self.absolute => {}
            None => self.parts.push(b"..".to_vec()),
        }
    }

    fn path(&self) -> PathBuf {
        let mut p = PathBuf::from(if self.absolute { "/" } else { "" });
        for c in &self.parts {
            p.push(std::ffi::OsStr::from_bytes(c));
        }
        p
    }
}

/// Pushes the components of `text` (a path or a link's text) on `todo`,
/// first to walk on top; "" and "/" parts (a repeated or trailing "/")
/// are dropped.
fn push_components(todo: &mut Vec<Vec<u8>>, text: &[u8]) {
    let parts = text.split(|&c| c == b'/').filter(|c| !c.is_empty());
    let parts: Vec<&[u8]> = parts.collect();
    todo.extend(parts.into_iter().rev().map(<[u8]>::to_vec));
}

/// A symlink met by [`walk()`]: held open (O_PATH), its owner and name.
struct Link<'a> {
    fd: OwnedFd,
    uid: u32,
    name: &'a [u8],
}

/// Follows `link` (the `n`th in the walk of `path`) when root or we own
/// it: its text, read from the link held, is pushed on `todo`, and an
/// absolute one restarts the walk at "/".
fn follow(
    path: &Path,
    link: Link<'_>,
    n: u32,
    dir: &mut OwnedFd,
    shown: &mut Shown,
    todo: &mut Vec<Vec<u8>>,
) -> Result<(), OutputError> {
    let err = |e: io::Error| OutputError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    if link.uid != 0 && link.uid != crate::sys::effective_uid() {
        let mut at = shown.path();
        at.push(std::ffi::OsStr::from_bytes(link.name));
        return Err(OutputError::ForeignLink {
            path: path.to_path_buf(),
            link: at,
            uid: link.uid,
        });
    }
    if n > MAX_LINKS {
        return Err(err(io::Error::from_raw_os_error(libc::ELOOP)));
    }
    let text = crate::sys::read_link_fd(link.fd.as_fd()).map_err(err)?;
    if text.is_empty() {
        return Err(err(io::Error::from_raw_os_error(libc::ENOENT)));
    }
    if text.starts_with(b"/") {
        *dir = crate::sys::open_path_start(true).map_err(err)?;
        *shown = Shown {
            absolute: true,
            parts: Vec::new(),
        };
    }
    push_components(todo, &text);
    Ok(())
}

/// Walks `path` (see the module's doc), following a symlink at the last
/// component too when `follow_last` (else it is returned as the name, to
/// be replaced, never followed). A link owned by neither root nor us is
/// [`OutputError::ForeignLink`]; more than 40 links, ELOOP; a missing
/// directory on the way, ENOENT; a missing last component is returned
/// (for a new file). `..` after a followed link is relative to where the
/// link led, as the kernel has it. A trailing "/" is not kept: callers
/// check the path's form themselves ([`super::names_a_directory`]).
pub fn walk(path: &Path, follow_last: bool) -> Result<Walked, OutputError> {
    let err = |e: io::Error| OutputError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(err(io::Error::from_raw_os_error(libc::ENOENT)));
    }
    let absolute = bytes.starts_with(b"/");
    let mut dir = crate::sys::open_path_start(absolute).map_err(err)?;
    let mut shown = Shown {
        absolute,
        parts: Vec::new(),
    };
    let mut todo = Vec::new();
    push_components(&mut todo, bytes);
    let mut links = 0;
    let mut last_link = None;
    let done = |dir, name, shown: &Shown, last_link| Walked {
        dir,
        name,
        shown: shown.path(),
        last_link,
    };
    while let Some(c) = todo.pop() {
        let last = todo.is_empty();
        if c == b"." {
            continue;
        }
        if c == b".." {
            dir = crate::sys::open_path_at(dir.as_fd(), &c).map_err(err)?;
            shown.up();
            continue;
        }
        if last && !follow_last {
            return Ok(done(dir, Some(c), &shown, last_link));
        }
        let next = match crate::sys::open_path_at(dir.as_fd(), &c) {
            Ok(fd) => fd,
            Err(e) if last && e.kind() == io::ErrorKind::NotFound => {
                return Ok(done(dir, Some(c), &shown, last_link));
            }
            Err(e) => return Err(err(e)),
        };
        let (kind, uid) = crate::sys::type_and_owner(next.as_fd()).map_err(err)?;
        if kind == libc::S_IFLNK {
            if last {
                last_link = Some((dir.try_clone().map_err(err)?, c.clone()));
            }
            let link = Link {
                fd: next,
                uid,
                name: &c,
            };
            links += 1;
            follow(path, link, links, &mut dir, &mut shown, &mut todo)?;
            continue;
        }
        if last {
            return Ok(done(dir, Some(c), &shown, last_link));
        }
        if kind != libc::S_IFDIR {
            return Err(err(io::Error::from_raw_os_error(libc::ENOTDIR)));
        }
        dir = next;
        shown.parts.push(c);
    }
    Ok(done(dir, None, &shown, last_link))
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
