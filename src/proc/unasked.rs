//! Opening a path without asking a filesystem that is not read (FUSE, an
//! overlay on it, one a user namespace mounted: see [`super::mounts`]). A
//! path walk asks each directory on the way for the next name, so one
//! symlink into a FUSE mount (a user's `ln -s ~/fuse ~/lib`, made before or
//! after the mount tables were read) hangs a plain `open` on a stalled
//! daemon. Here the path is walked a component at a time (`O_PATH`, never
//! following a link), each step's mount judged before anything inside it is
//! looked up, symlinks followed by hand (their text, magic links' too, taken
//! as a path); a walk inside a process's root (`/proc/PID/root/...`) stays
//! inside it, `..` and absolute links included.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use super::mounts::{host, FsTrust};

/// Symlinks followed in one walk at most (the kernel's limit).
const MAX_LINKS: usize = 40;

/// `path` opened `O_PATH`, the link at its end followed, or `None` when a
/// step is on a filesystem not read or the walk fails. `root`: walk inside
/// the root of the process whose /proc directory this is (`path` then
/// seen from it); else from our `/`.
pub fn open_path(path: &[u8], root: Option<&Path>) -> Option<File> {
    let judge = |fd: &OwnedFd| host().trust_fd(fd.as_fd(), root) == FsTrust::Readable;
    let base: OwnedFd = match root {
        Some(dir) => crate::sys::open_path(&dir.join("root")).ok()?.into(),
        None => crate::sys::open_path_start(true).ok()?,
    };
    if !judge(&base) {
        return None;
    }
    let mut todo: VecDeque<Vec<u8>> = components(path).collect();
    // the directories walked through, the root first (`..` stops there)
    let mut walked: Vec<OwnedFd> = vec![base];
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == b".." {
            if walked.len() > 1 {
                walked.pop();
            }
            continue;
        }
        let here = walked.last()?;
        let next = crate::sys::open_path_at(here.as_fd(), &name).ok()?;
        if !judge(&next) {
            return None;
        }
        let (kind, _) = crate::sys::type_and_owner(next.as_fd()).ok()?;
        if kind != libc::S_IFLNK {
            // a name after it (`file/x`, `file/..`) must be in a directory
            if kind != libc::S_IFDIR && !todo.is_empty() {
                return None;
            }
            walked.push(next);
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return None;
        }
        let target = crate::sys::read_link_fd(next.as_fd()).ok()?;
        if target.first() == Some(&b'/') {
            walked.truncate(1);
        }
        for c in components(&target).rev() {
            todo.push_front(c);
        }
    }
    // (a path of no component names the root itself)
    walked.pop().map(File::from)
}

/// The components of a path, `.` and empty ones left out.
fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = Vec<u8>> + '_ {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;

    // A walk reaches the file a path names, through absolute and relative
    // links and `..`, and a link loop ends it.
    #[test]
    fn walks_reach_what_paths_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/b/f"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("abs")).unwrap();
        std::os::unix::fs::symlink("a/b/../b", d.join("rel")).unwrap();
        std::os::unix::fs::symlink("loop", d.join("loop")).unwrap();
        let want = std::fs::metadata(d.join("a/b/f")).unwrap().ino();
        for p in ["a/b/f", "abs/b/f", "rel/f", "a/./b//f", "a/b/../b/f"] {
            let full = d.join(p);
            let f = open_path(full.as_os_str().as_bytes(), None).expect(p);
            assert_eq!(f.metadata().unwrap().ino(), want, "{p}");
        }
        assert!(open_path(d.join("loop/f").as_os_str().as_bytes(), None).is_none());
        assert!(open_path(d.join("a/none").as_os_str().as_bytes(), None).is_none());
    }
}
