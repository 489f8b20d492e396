//! Open files and FIFOs: making FIFOs, reopening an `O_PATH` descriptor,
//! file status flags and the filesystem a file lives on.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::dirfd::bad_name;

/// Creates a FIFO at `path`, mode 0600.
pub fn mkfifo(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| bad_name())?;
    // SAFETY: `c` is a valid C string for the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What `path` names, resolved once to an `O_PATH` descriptor (which opens
/// nothing: no device's open effects, no FIFO wait) and its status, for
/// [`reopen_for_reading`] to open if it is wanted: looking at a path and
/// then opening it again by name would let a link swapped in between
/// reach something else.
pub fn locate(path: &std::path::Path) -> io::Result<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let at = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)?;
    let meta = at.metadata()?;
    Ok((at, meta))
}

/// Opens for reading, non-blocking and without taking a terminal, the very
/// inode a [`locate`]d descriptor holds (`held` its status), through
/// `/proc/thread-self/fd`: Linux has no other way to turn such a descriptor
/// into a readable one. (Not `/proc/self/fd`: that is the main thread's
/// file table, and a scan worker has a table of its own, see
/// [`super::unshare_files`].) Fails with NotFound when `/proc` is not this process's
/// (not mounted, another PID namespace's), and when what opened is not
/// that inode.
pub fn reopen_for_reading(
    at: &std::fs::File,
    held: &std::fs::Metadata,
) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/thread-self/fd/{}", at.as_raw_fd()))?;
    let m = f.metadata()?;
    if (m.dev(), m.ino()) != (held.dev(), held.ino()) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "/proc/thread-self/fd opened another file (a /proc not this process's?)",
        ));
    }
    Ok(f)
}

/// Whether an open file lives on a pseudo filesystem (procfs, sysfs,
/// debugfs, tracefs, securityfs, cgroup, bpf, configfs, efivarfs, pstore),
/// whose "regular" files are kernel interfaces, not binaries.
pub fn is_pseudo_fs(file: &std::fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    const PSEUDO: [i64; 11] = [
        0x9fa0,      // PROC_SUPER_MAGIC
        0x6265_6572, // SYSFS_MAGIC
        0x6462_6720, // DEBUGFS_MAGIC
        0x7472_6163, // TRACEFS_MAGIC
        0x7363_6673, // SECURITYFS_MAGIC
        0x0027_e0eb, // CGROUP_SUPER_MAGIC
        0x6367_7270, // CGROUP2_SUPER_MAGIC
        0xcafe_4a11, // BPF_FS_MAGIC
        0x6265_6570, // CONFIGFS_MAGIC
        0xde5e_81e4, // EFIVARFS_MAGIC
        0x6165_676c, // PSTOREFS_MAGIC
    ];
    // SAFETY: statfs is plain data, zeroed is a valid value; fstatfs writes
    // only into it and reads only the descriptor, open for the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` outlives the call.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(PSEUDO.contains(&(st.f_type as i64)))
}

/// The access mode (`O_RDONLY`, `O_WRONLY` or `O_RDWR`) of an open descriptor.
pub fn access_mode(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: F_GETFL takes no pointer argument and only reads the flags of
    // `fd`, a descriptor that stays open for the call.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags & libc::O_ACCMODE)
}

/// Clears `O_NONBLOCK` on a descriptor opened non-blocking (so that opening a
/// FIFO cannot hang) before it is read as a stream.
pub fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL and F_SETFL take an integer argument and touch only the
    // status flags of `fd`, which stays open for both calls.
    let rc = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK)
        }
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // procfs and sysfs files are pseudo-filesystem files; a temporary file is not.
    #[test]
    fn pseudo_filesystems() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(is_pseudo_fs(&f).unwrap());
        let f = std::fs::File::open("/sys/kernel/notes").unwrap();
        assert!(is_pseudo_fs(&f).unwrap());
        let t = tempfile::tempfile().unwrap();
        assert!(!is_pseudo_fs(&t).unwrap());
    }
}
