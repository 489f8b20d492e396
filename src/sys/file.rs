//! Open files and FIFOs: making FIFOs, reopening an `O_PATH` descriptor,
//! file status flags, waiting for a FIFO's writer, the filesystem a file
//! lives on, where its holes begin and end (and how much data it holds)
//! and `flock`.

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
    let at = open_path(path)?;
    let meta = at.metadata()?;
    Ok((at, meta))
}

/// `path` resolved to an `O_PATH` descriptor (see [`locate`]), its status
/// not yet asked: asking a FUSE file's status may wait on its daemon,
/// so [`mount_id`] tells where it is first.
pub fn open_path(path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
}

/// The id of the mount `fd` is on (as `mountinfo`'s first field gives
/// it), asking the kernel only: `statx` with `AT_STATX_DONT_SYNC` and no
/// other field makes no request of the file's filesystem (a FUSE daemon
/// that never answers cannot hold it). Where `statx` cannot tell (before
/// Linux 5.8, or refused by a seccomp filter), the descriptor's
/// `/proc/thread-self/fdinfo` (`mnt_id:`, Linux 3.15+) does.
pub fn mount_id(fd: BorrowedFd<'_>) -> io::Result<u32> {
    match super::dirfd::statx_mount_at(fd, c"", libc::AT_EMPTY_PATH) {
        Ok((id, _)) => Ok(id),
        Err(e)
            if e.kind() == io::ErrorKind::Unsupported
                || matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) =>
        {
            fdinfo_mount_id(fd)?.ok_or(e)
        }
        Err(e) => Err(e),
    }
}

/// statx's mask bit for the mount's unique id (Linux 6.8+), which the
/// kernel never gives another mount (the ids of [`mount_id`] it reuses,
/// lowest free first).
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

/// The unique id of the mount `fd` is on (Linux 6.8+; Unsupported before),
/// asking no filesystem (as [`mount_id`]).
pub fn mount_id_unique(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: plain-data out struct, written by statx only.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated empty name with AT_EMPTY_PATH, `fd` open for
    // the call; statx writes only into `st`.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            STATX_MNT_ID_UNIQUE,
            &mut st,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if st.stx_mask & STATX_MNT_ID_UNIQUE == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "statx gave no unique mount id (Linux 6.8+)",
        ));
    }
    Ok(st.stx_mnt_id)
}

/// The `mnt_id:` line of `fd`'s `/proc/thread-self/fdinfo`.
fn fdinfo_mount_id(fd: BorrowedFd<'_>) -> io::Result<Option<u32>> {
    let info = std::fs::read(format!("/proc/thread-self/fdinfo/{}", fd.as_raw_fd()))?;
    let line = info
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"mnt_id:"));
    Ok(line.and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok()))
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

/// Bytes of the file system holding `file` that ordinary users may still
/// take, and its size in bytes (`fstatvfs`).
pub fn space_left(file: &std::fs::File) -> io::Result<(u64, u64)> {
    use std::os::fd::AsRawFd;
    // SAFETY: statvfs is plain data, zeroed is a valid value; fstatvfs
    // writes only into it and reads only the descriptor, open for the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` outlives the call.
    let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    let unit = st.f_frsize as u64;
    #[allow(clippy::unnecessary_cast)]
    Ok((
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    ))
}

/// Whether some process (this one included) has the file open for
/// writing: a read lease (F_SETLEASE F_RDLCK) on a read-only descriptor is
/// refused with EAGAIN then, and released at once otherwise. `None` when
/// the file system or the caller cannot take leases (not the owner and no
/// CAP_LEASE): it cannot tell.
pub fn open_for_writing(file: &std::fs::File) -> Option<bool> {
    // SAFETY: fcntl on a descriptor we own; F_SETLEASE takes an int.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
    if rc == 0 {
        // SAFETY: as above; releases the lease just taken.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
        return Some(false);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Some(true),
        _ => None,
    }
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

/// A new descriptor (close-on-exec) of what our descriptor `fd` is open on,
/// sharing its open file (offset, status flags): EBADF if `fd` is not
/// open. For outputs named as `/proc/self/fd/N`, used as they are rather
/// than opened again by that path.
pub fn dup_fd(fd: std::os::fd::RawFd) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_DUPFD_CLOEXEC takes an integer (the lowest new descriptor)
    // and touches no memory; the kernel checks `fd` itself (EBADF).
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::fs::File::from_raw_fd(new) })
}

/// The device (major, minor) and mount id (when the kernel tells it) of
/// the kernel's internal shared-memory filesystem, which no mount table
/// shows: where memfds (executables run from one, as runc's clone of
/// itself) and SysV shared memory live. Found by making an empty memfd,
/// which is closed at once.
pub fn shmem_identity() -> io::Result<((u32, u32), Option<u32>)> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: the name is a NUL-terminated literal; the flags take no
    // pointer. The kernel returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"mmap2-synth-probe".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let dev = file.metadata()?.dev();
    let mount = mount_id(std::os::fd::AsFd::as_fd(&file)).ok();
    Ok(((libc::major(dev), libc::minor(dev)), mount))
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

/// Where the next data of `file` at or after `at` is (lseek SEEK_DATA):
/// `at` itself when data is there, a later offset past a hole, None when
/// only a hole runs from `at` to the end of the file (or `at` is past
/// it). Err (EINVAL, ...) where the call is not supported: the caller
/// reads instead. A file system that knows no holes answers `at`. The
/// file's cursor is put back where it was.
pub fn seek_data(file: &std::fs::File, at: u64) -> io::Result<Option<u64>> {
    seek(file, at, libc::SEEK_DATA)
}

/// Where the next hole of `file` at or after `at` begins (lseek
/// SEEK_HOLE; the end of the file is one): None when `at` is past the end.
/// Unwritten extents (what `fallocate` makes: blocks allocated and
/// counted by `st_blocks`, never written, read as zeros) are holes here
/// on ext4, XFS and btrfs. Err where the call is not supported; the
/// file's cursor is put back where it was.
pub fn seek_hole(file: &std::fs::File, at: u64) -> io::Result<Option<u64>> {
    seek(file, at, libc::SEEK_HOLE)
}

/// lseek(`at`, `whence`), the cursor put back; ENXIO is None.
fn seek(file: &std::fs::File, at: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let fd = file.as_raw_fd();
    let at = libc::off_t::try_from(at).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: lseek takes plain integers and touches only the cursor of
    // `fd`, open for the call.
    let cursor = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
    if cursor < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let found = unsafe { libc::lseek(fd, at, whence) };
    let err = io::Error::last_os_error();
    // SAFETY: as above; puts the cursor back.
    unsafe { libc::lseek(fd, cursor, libc::SEEK_SET) };
    match found {
        d if d >= 0 => Ok(u64::try_from(d).ok()),
        _ if err.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        _ => Err(err),
    }
}

/// Most holes [`data_bytes`] walks through before it gives up on a file.
const MOST_HOLES: usize = 4096;

/// How many of the bytes of `file` (status `meta`) hold written data, to
/// tell a file worth copying from one that is mostly nothing: its
/// allocated blocks (`st_blocks`), less what lseek reports as holes, so
/// unwritten extents (a `fallocate`d file: every block allocated, none
/// written, read as gigabytes of zeros) count as holes too. A file with
/// more than 4,096 holes counts 0 (the walk stops there); where
/// SEEK_DATA is not supported, its blocks alone count.
pub fn data_bytes(file: &std::fs::File, meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let len = meta.len();
    let blocks = meta.blocks().saturating_mul(512).min(len);
    let (mut at, mut holes) = (0u64, 0u64);
    for _ in 0..MOST_HOLES {
        let data = match seek_data(file, at) {
            Ok(d) => d.unwrap_or(len).min(len),
            Err(_) => return blocks,
        };
        holes += data.saturating_sub(at);
        if data >= len {
            return blocks.min(len - holes.min(len));
        }
        at = match seek_hole(file, data) {
            Ok(h) => h.unwrap_or(len).max(data + 1),
            Err(_) => return blocks,
        };
        if at >= len {
            return blocks.min(len - holes.min(len));
        }
    }
    0
}

/// Takes an exclusive `flock` on an open file (a directory too) without
/// waiting: true when taken (held until every descriptor of that open
/// file is closed, by the kernel when its process dies, SIGKILL too),
/// false when another open file holds one.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    // SAFETY: flock takes a descriptor, open for the call, and flags.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

/// Waits until a stream opened for reading has something to read, or its
/// writers have come and gone (poll(2) for POLLIN, no timeout, no spinning;
/// a signal does not end the wait, the signal thread does). A FIFO opened
/// non-blocking before any writer reads as empty (EOF) but shows no POLLHUP
/// until a writer has connected (Linux keeps the writer count it was
/// opened at), so this waits for its writer as a blocking open would.
pub fn wait_readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one valid pollfd, alive and not aliased for the
        // call, and nfds is 1; poll writes only its `revents`. `fd` stays
        // open for the call.
        let rc = unsafe { libc::poll(&mut p, 1, -1) };
        if rc > 0 {
            return Ok(());
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Whether the mount table `fd` is open on (a `mountinfo` file) changed
/// since it was opened or this last said so: the kernel marks such a file
/// POLLPRI | POLLERR on every mount or unmount in its namespace. Asks
/// without waiting; false if poll fails.
pub fn mounts_changed(fd: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd, alive and not aliased for the call,
    // and nfds is 1; poll writes only its `revents`, and with a timeout of
    // 0 returns at once. `fd` stays open for the call.
    let rc = unsafe { libc::poll(&mut p, 1, 0) };
    rc > 0 && p.revents & (libc::POLLPRI | libc::POLLERR) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    // fdinfo's mount id, the fallback where statx cannot tell one, is the
    // one statx gives.
    #[test]
    fn fdinfo_and_statx_give_one_mount_id() {
        let f = tempfile::tempfile().unwrap();
        let fd = std::os::fd::AsFd::as_fd(&f);
        let by_statx = crate::sys::dirfd::statx_mount_at(fd, c"", libc::AT_EMPTY_PATH)
            .unwrap()
            .0;
        assert_eq!(fdinfo_mount_id(fd).unwrap(), Some(by_statx));
    }
    use std::os::fd::AsFd;

    // A FIFO opened non-blocking before any writer is waited on until a
    // writer connects (no POLLHUP before), then reads what it wrote.
    #[test]
    fn a_fifo_without_a_writer_is_waited_for() {
        use std::io::{Read, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        mkfifo(&path).unwrap();
        let mut r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let fd = r.try_clone().unwrap();
        std::thread::spawn(move || tx.send(wait_readable(fd.as_fd()).is_ok()));
        let wait = std::time::Duration::from_millis(300);
        assert!(rx.recv_timeout(wait).is_err(), "returned with no writer");
        let mut w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        w.write_all(b"x").unwrap();
        drop(w);
        let bound = std::time::Duration::from_secs(30);
        assert_eq!(rx.recv_timeout(bound), Ok(true));
        set_blocking(r.as_fd()).unwrap();
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"x");
    }

    // Data is what was written: a written file counts all its bytes, a
    // hole made by set_len none, and a real `fallocate`d extent (blocks
    // allocated, counted by st_blocks, never written) none either, on
    // this machine's file system (ext4 here; XFS and btrfs say the same).
    #[test]
    fn unwritten_extents_hold_no_data() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let data = |f: &std::fs::File| data_bytes(f, &f.metadata().unwrap());
        let written = dir.path().join("written");
        let mut f = std::fs::File::create(&written).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        assert_eq!(data(&f), 1 << 20);
        let sparse = dir.path().join("sparse");
        let mut f = std::fs::File::create(&sparse).unwrap();
        f.write_all(&[1u8; 8192]).unwrap();
        f.set_len(64 << 20).unwrap();
        f.sync_all().unwrap();
        assert!(data(&f) <= 8192, "{}", data(&f));
        let fallocated = dir.path().join("fallocated");
        let mut f = std::fs::File::create(&fallocated).unwrap();
        f.write_all(&[1u8; 8192]).unwrap();
        f.sync_all().unwrap();
        let o = std::process::Command::new("fallocate")
            .args(["-l", "64MiB"])
            .arg(&fallocated)
            .output()
            .expect("fallocate (util-linux)");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let f = std::fs::File::open(&fallocated).unwrap();
        use std::os::unix::fs::MetadataExt;
        let m = f.metadata().unwrap();
        assert!(m.blocks() * 512 >= 64 << 20, "not allocated: {m:?}");
        assert!(data(&f) <= 8192, "{} bytes of data", data(&f));
    }

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

    // SEEK_DATA skips a hole to the data after it, answers None in a hole
    // that runs to the end (and past the end), and leaves the cursor.
    #[test]
    fn seek_data_skips_holes() {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[1; 4096]).unwrap();
        f.seek(SeekFrom::Start(1 << 20)).unwrap();
        f.write_all(&[2; 4096]).unwrap();
        f.set_len(4 << 20).unwrap();
        f.seek(SeekFrom::Start(123)).unwrap();
        assert_eq!(seek_data(&f, 0).unwrap(), Some(0));
        // a file system without holes answers where it was asked
        let got = seek_data(&f, 8192).unwrap();
        assert!(got == Some(1 << 20) || got == Some(8192), "{got:?}");
        if got == Some(1 << 20) {
            assert_eq!(seek_data(&f, (1 << 20) + 4096).unwrap(), None);
        }
        assert_eq!(seek_data(&f, 5 << 20).unwrap(), None);
        assert_eq!(f.stream_position().unwrap(), 123);
    }
}
