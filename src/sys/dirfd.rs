//! Files named relative to a directory held open (`*at` calls on one path
//! component, never through a symlink): what a user cannot redirect by
//! swapping a directory on the path.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A path component as a C string; None when it holds a NUL or a `/`, or
/// is empty, `.` or `..` (so it names one entry of one directory).
fn component(name: &[u8]) -> Option<std::ffi::CString> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return None;
    }
    std::ffi::CString::new(name).ok()
}

pub(super) fn bad_name() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a single path component")
}

/// Opens (creating it first, with `mode` less the umask, if missing) the
/// directory `name` inside `dir`, never through a symlink (ELOOP/ENOTDIR
/// then); true when this call created it. A directory that was there keeps
/// its mode.
pub fn dir_at(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> io::Result<(OwnedFd, bool)> {
    let c = component(name).ok_or_else(bad_name)?;
    // SAFETY: `c` is a valid C string and `dir` an open descriptor for the call.
    let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    let created = rc == 0;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as above; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, created))
}

/// Whether we may make entries in the directory `dir`: write and search
/// permission for our effective ids, on a file system mounted read-write,
/// the directory not immutable. Ok, or the kernel's answer (EACCES, EPERM,
/// EROFS).
pub fn may_write_in(dir: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a valid C string literal and `dir` open for the call.
    let rc = unsafe {
        libc::faccessat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes the empty directory `name` from `dir` (ENOTEMPTY otherwise).
pub fn rmdir_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let c = component(name).ok_or_else(bad_name)?;
    // SAFETY: valid C string; `dir` open for the call.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `name` exists in `dir` (a symlink counts, and is not followed).
pub fn exists_at(dir: BorrowedFd<'_>, name: &[u8]) -> bool {
    identity_at(dir, name).is_ok()
}

/// The status of `name` in `dir` (a symlink's own, not followed).
fn lstat_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<libc::stat> {
    let c = component(name).ok_or_else(bad_name)?;
    // SAFETY: plain-data out struct; `c` valid; `dir` open for the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; fstatat writes only into `st`.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// What `lstat` tells of one entry of a directory: enough to tell whether
/// it is a file of ours, and which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The type bits (`st_mode & S_IFMT`: `S_IFREG`, `S_IFDIR`, ...).
    pub kind: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// The owner.
    pub uid: u32,
    /// How many names the inode has.
    pub nlink: u64,
    /// The device and inode.
    pub id: (u64, u64),
}

impl Status {
    // (nlink_t is 32 bits wide on some targets)
    #[allow(clippy::unnecessary_cast)]
    fn of(st: &libc::stat) -> Status {
        Status {
            kind: st.st_mode & libc::S_IFMT,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            nlink: st.st_nlink as u64,
            id: (st.st_dev, st.st_ino),
        }
    }
}

/// Whether `name` in `dir` is the root of a mount (something mounted on
/// it), its symlink not followed, asking no filesystem (see
/// [`super::mount_id`]). Sweeps of our own leftovers skip such entries: none of
/// ours is, and a FUSE mount there would hang them.
pub fn is_mount_root_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<bool> {
    let c = component(name).ok_or_else(bad_name)?;
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT;
    Ok(statx_mount_at(dir, &c, flags)?.1)
}

/// `statx` of `name` in `dir` for the mount id alone, without syncing:
/// (mount id, whether it is a mount's root).
pub(super) fn statx_mount_at(
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    flags: i32,
) -> io::Result<(u32, bool)> {
    // SAFETY: plain-data out struct, written by statx only.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `dir` open for the call, statx
    // writes only into `st`.
    let rc = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::AT_STATX_DONT_SYNC,
            libc::STATX_MNT_ID,
            &mut st,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if st.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "statx gave no mount id (Linux 5.8+)",
        ));
    }
    let root = st.stx_attributes & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0;
    Ok((st.stx_mnt_id as u32, root))
}

/// The [`Status`] of `name` in `dir` (a symlink's own, not followed).
pub fn status_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<Status> {
    Ok(Status::of(&lstat_at(dir, name)?))
}

/// The [`Status`] of what `fd` is open on.
pub fn status_of(fd: BorrowedFd<'_>) -> io::Result<Status> {
    // SAFETY: plain-data out struct, written by fstat only.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` open for the call; fstat writes only into `st`.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Status::of(&st))
}

/// The device and inode of `name` in `dir` (a symlink's own, not followed).
pub fn identity_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<(u64, u64)> {
    let st = lstat_at(dir, name)?;
    Ok((st.st_dev, st.st_ino))
}

/// The type bits of `name` in `dir` (`st_mode & S_IFMT`: `S_IFIFO`,
/// `S_IFREG`, ...; a symlink is `S_IFLNK`, not followed).
pub fn file_type_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<u32> {
    Ok(lstat_at(dir, name)?.st_mode & libc::S_IFMT)
}

/// Opens the existing directory `name` inside `dir` for reading, never
/// through a symlink (ELOOP) and nothing but a directory (ENOTDIR).
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<std::fs::File> {
    let c = component(name).ok_or_else(bad_name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `c` valid, `dir` open; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Opens the existing `name` in `dir` for reading, never through a
/// symlink (ELOOP), without blocking (a FIFO opens at once, O_NOCTTY).
pub fn open_read_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<std::fs::File> {
    let c = component(name).ok_or_else(bad_name)?;
    let flags =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: `c` valid, `dir` open; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Creates the new file `name` in `dir` (never existing before, never
/// through a symlink), mode `mode`, for reading and writing.
pub fn create_at(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> io::Result<std::fs::File> {
    let c = component(name).ok_or_else(bad_name)?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `c` valid, `dir` open; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Creates an unnamed file in `dir` (O_TMPFILE, mode `mode`): it has no
/// name until [`link_at`] gives it one, so a process killed before that
/// (even by SIGKILL) leaves nothing behind. Fails where the file system
/// has no O_TMPFILE (EOPNOTSUPP, EISDIR or EINVAL on older kernels).
pub fn create_unnamed_at(dir: BorrowedFd<'_>, mode: u32) -> io::Result<std::fs::File> {
    let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC;
    // SAFETY: a valid C string literal, `dir` open; a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c".".as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Gives the unnamed file `file` (from [`create_unnamed_at`]) the name
/// `name` in `dir` (EEXIST if taken), through `/proc/self/fd` (the
/// AT_EMPTY_PATH form needs CAP_DAC_READ_SEARCH).
pub fn link_at(file: &std::fs::File, dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let c = component(name).ok_or_else(bad_name)?;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| bad_name())?;
    // SAFETY: valid C strings; `dir` and `file` open for the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Renames `from` to `to`, both in `dir` (replacing `to`).
pub fn rename_at(dir: BorrowedFd<'_>, from: &[u8], to: &[u8]) -> io::Result<()> {
    let (a, b) = (
        component(from).ok_or_else(bad_name)?,
        component(to).ok_or_else(bad_name)?,
    );
    // SAFETY: valid C strings; `dir` open for the call.
    let rc = unsafe { libc::renameat(dir.as_raw_fd(), a.as_ptr(), dir.as_raw_fd(), b.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes the file `name` from `dir`.
pub fn unlink_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let c = component(name).ok_or_else(bad_name)?;
    // SAFETY: valid C string; `dir` open for the call.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates the symlink `name` in `dir` pointing at `target`.
pub fn symlink_at(target: &[u8], dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    let t = std::ffi::CString::new(target).map_err(|_| bad_name())?;
    let c = component(name).ok_or_else(bad_name)?;
    // SAFETY: valid C strings; `dir` open for the call.
    let rc = unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), c.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens `name` in `dir` (one component, or `..`) as an O_PATH
/// descriptor, never following a symlink: a symlink gives a descriptor of
/// the link itself (for [`type_and_owner`] and [`read_link_fd`]). Nothing
/// is opened for I/O, so a FIFO or device there is not touched and no
/// read permission is needed: the steps of a path walk.
pub fn open_path_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<OwnedFd> {
    let c = match name {
        b".." => c"..".into(),
        _ => component(name).ok_or_else(bad_name)?,
    };
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `c` valid, `dir` open; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where a path walk starts: "/" (`absolute`) or the working directory,
/// as an O_PATH descriptor.
pub fn open_path_start(absolute: bool) -> io::Result<OwnedFd> {
    let at = if absolute { c"/" } else { c"." };
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a valid C string literal; a new descriptor or -1.
    let fd = unsafe { libc::openat(libc::AT_FDCWD, at.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The type bits (`st_mode & S_IFMT`) and owner of what `fd` is open on
/// (an O_PATH descriptor of a symlink: the link's own).
pub fn type_and_owner(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    // SAFETY: plain-data out struct, written by fstat only.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` open for the call; fstat writes only into `st`.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_mode & libc::S_IFMT, st.st_uid))
}

/// The text of the symlink `link` is open on (an O_PATH descriptor from
/// [`open_path_at`]): the very link whose owner was checked, whatever is
/// at its name now.
pub fn read_link_fd(link: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `link` open; the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe {
        libc::readlinkat(
            link.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if n >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(buf)
}

/// Opens the directory `dir` is open on (an O_PATH descriptor too) for
/// reading: what `*at` calls that make files want.
pub fn reopen_dir(dir: BorrowedFd<'_>) -> io::Result<std::fs::File> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a valid C string literal, `dir` open; a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c".".as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Opens the existing `name` in `dir` for writing (O_NOCTTY), never
/// through a symlink (ELOOP): a FIFO waits for its reader.
pub fn open_write_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<std::fs::File> {
    let c = component(name).ok_or_else(bad_name)?;
    let flags = libc::O_WRONLY | libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `c` valid, `dir` open; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Whether `dir` is a directory of /proc (whose entries no user makes or
/// swaps).
pub fn on_procfs(dir: BorrowedFd<'_>) -> bool {
    // SAFETY: plain-data out struct, written by fstatfs only.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` open for the call; fstatfs writes only into `st`.
    let rc = unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) };
    rc == 0 && st.f_type == libc::PROC_SUPER_MAGIC
}
