//! Opening a path without asking a filesystem that is not read (FUSE, an
//! overlay on it, one a user namespace mounted: see [`super::mounts`]). A
//! path walk asks each directory on the way for the next name, so one
//! symlink into a FUSE mount (a user's `ln -s ~/fuse ~/lib`, made before or
//! after the mount tables were read) hangs a plain `open` on a stalled
//! daemon. Here [`crate::pathwalk`] walks the path a component at a time,
//! each step's mount judged before anything inside it is looked up,
//! symlinks followed by hand (their text, magic links' too, taken as a
//! path); a walk inside a process's root (`/proc/PID/root/...`) stays
//! inside it, `..` and absolute links included.

use std::fs::File;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use super::mounts::{host, FsTrust};
use crate::pathwalk::{self, Rules};

/// `path` opened `O_PATH`, the link at its end followed, or `None` when a
/// step is on a filesystem not read or the walk fails. `root`: walk inside
/// the root of the process whose /proc directory this is (`path` then
/// seen from it); else from our `/`. Any link is followed (whoever owns
/// it: what is reached is only read, and judged).
pub fn open_path(path: &[u8], root: Option<&Path>) -> Option<File> {
    let judge = |fd: BorrowedFd<'_>| host().trust_fd(fd, root) == FsTrust::Readable;
    let base: OwnedFd = match root {
        Some(dir) => crate::sys::open_path(&dir.join("root")).ok()?.into(),
        None => crate::sys::open_path_start(true).ok()?,
    };
    let rules = Rules {
        root: Some(base),
        judge: Some(&judge),
        own_links_only: false,
        follow_last: true,
    };
    // (a path of no component names the root itself)
    let path = if path.is_empty() { b"/" } else { path };
    pathwalk::walk(path, &rules).ok()?.opened().map(File::from)
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
