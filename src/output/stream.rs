//! Stream outputs (a FIFO, a character device): opened where the path
//! leads as it is walked, never by the path once more; a /proc fd link of
//! ours (`/dev/stdout`) is the descriptor it stands for, duplicated.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::{io_err, walk, OutputError, Walked};

/// Opens a stream target (FIFO, character device) for writing (a FIFO,
/// as perf's `-o`, once a reader opens it: as a FIFO input waits for its
/// writer).
///
/// The path is walked again as [`walk()`] does, and the FIFO or device it
/// leads to is opened in the directory held, without following a link,
/// and must still be one: a link put on the way since
/// [`classify`](super::classify) looked (by whoever can write its
/// directory) cannot send the stream into a device or a file. A chain
/// ending in a /proc fd link whose text names no path (`/dev/stdout`:
/// `/proc/self/fd/1`, `"pipe:[N]"`) is that link's descriptor: ours
/// duplicated (no second lookup, no permission check on reopening it),
/// another process's opened through the fd directory held since the walk.
pub fn open_stream(path: &Path) -> Result<File, OutputError> {
    let end = walk(path, true)?;
    let name = end.name.as_deref().unwrap_or_default();
    let file = if crate::sys::exists_at(end.dir.as_fd(), name) {
        crate::sys::open_write_at(end.dir.as_fd(), name)
    } else if crate::sys::on_procfs(end.dir.as_fd()) {
        open_proc_link(&end)
    } else {
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }
    .map_err(io_err(path))?;
    let ft = file.metadata().map_err(io_err(path))?.file_type();
    if !(ft.is_fifo() || ft.is_char_device()) {
        return Err(io_err(path)(io::Error::other(
            "no longer a FIFO or character device (changed since it was checked)",
        )));
    }
    Ok(file)
}

/// What the /proc fd link the walk `end` followed last stands for (its
/// text, `"pipe:[N]"`, names no path). Our own descriptor N is duplicated:
/// the very pipe or device it is, with no second lookup of anything (and
/// no permission check on reopening it: a pipe root made, handed to us
/// running as another user, can be written but not opened by its /proc
/// link). It must be open for writing.
///
/// Another process's descriptor (`/proc/PID/fd/N`) has no descriptor of
/// ours to stand for it: it is opened through the fd directory held since
/// the walk (`/proc/self/fd/DIRFD/N`), so no component of the path the
/// user gave is looked up again, but what N is, is read at this open: that
/// process may have closed N and opened something else since the check.
/// That window cannot be closed from here (`pidfd_getfd` would read N at
/// the same moment, no earlier); only that process or root can change its
/// N, and what is opened must still be a FIFO or device ([`open_stream`]).
fn open_proc_link(end: &Walked) -> io::Result<File> {
    let Some((dir, name)) = &end.last_link else {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    };
    if let Some(fd) = own_fd(dir.as_fd(), name) {
        let file = crate::sys::dup_fd(fd)?;
        if crate::sys::access_mode(file.as_fd())? == libc::O_RDONLY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("our descriptor {fd} is open for reading only"),
            ));
        }
        return Ok(file);
    }
    let name = std::ffi::OsStr::from_bytes(name);
    let held = Path::new("/proc/self/fd").join(dir.as_raw_fd().to_string());
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(held.join(name))
}

/// The descriptor N when `dir` is the fd directory of this thread's
/// descriptor table (`/proc/thread-self/fd`, or `/proc/self/fd` from the
/// main thread, whose table it is) and `name` is N.
fn own_fd(dir: BorrowedFd<'_>, name: &[u8]) -> Option<RawFd> {
    if !(1..=10).contains(&name.len()) || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let fd: RawFd = std::str::from_utf8(name).ok()?.parse().ok()?;
    let id = crate::sys::status_of(dir).ok()?.id;
    let is = |p: &str| std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == id);
    let pid = std::process::id();
    let main_thread = std::fs::read_link("/proc/thread-self")
        .is_ok_and(|t| t.as_os_str().as_bytes() == format!("{pid}/task/{pid}").as_bytes());
    (is("/proc/thread-self/fd") || (main_thread && is("/proc/self/fd"))).then_some(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Our own descriptors named through /proc (thread-self's, self's from
    // the main thread's table, or our pid's) are found; another process's
    // fd directory, or a name that is no number, is not ours.
    #[test]
    fn own_fd_links_are_recognised() {
        let f = File::open("/dev/null").unwrap();
        let n = f.as_raw_fd();
        let dir = |p: &str| {
            crate::sys::open_path_start(true).and_then(|root| {
                let mut d = root;
                for c in p.split('/').filter(|c| !c.is_empty()) {
                    d = crate::sys::open_path_at(d.as_fd(), c.as_bytes())?;
                }
                Ok(d)
            })
        };
        let name = n.to_string();
        let tid = std::fs::read_link("/proc/thread-self").unwrap();
        let here = dir(&format!("/proc/{}/fd", tid.display())).unwrap();
        assert_eq!(own_fd(here.as_fd(), name.as_bytes()), Some(n));
        assert_eq!(own_fd(here.as_fd(), b"x1"), None);
        let init = dir("/proc/1/fd").unwrap();
        assert_eq!(own_fd(init.as_fd(), b"0"), None);
    }
}
