//! Every call into the C library: the PROCMAP_QUERY ioctl, sysconf and
//! clock_gettime. The only module allowed `unsafe`; each block says why it
//! is sound.
//!
//! The system headers on Debian 12 (Linux 6.1) do not define the ioctl, so the
//! structure and request number are declared here from `include/uapi/linux/fs.h`
//! of Linux 6.11+.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `PROCMAP_QUERY = _IOWR('f', 17, struct procmap_query)`.
pub const PROCMAP_QUERY: u64 = 0xC068_6611;

/// Query flag: the VMA must be readable.
pub const PROCMAP_QUERY_VMA_READABLE: u64 = 0x01;
/// Query flag: the VMA must be writable.
pub const PROCMAP_QUERY_VMA_WRITABLE: u64 = 0x02;
/// Query flag: the VMA must be executable.
pub const PROCMAP_QUERY_VMA_EXECUTABLE: u64 = 0x04;
/// Query flag: the VMA must be shared.
pub const PROCMAP_QUERY_VMA_SHARED: u64 = 0x08;
/// Query flag: return the VMA covering the address, else the next one.
pub const PROCMAP_QUERY_COVERING_OR_NEXT_VMA: u64 = 0x10;

/// `struct procmap_query` (104 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcmapQuery {
    /// In: `sizeof(struct procmap_query)`.
    pub size: u64,
    /// In: `PROCMAP_QUERY_*` flags.
    pub query_flags: u64,
    /// In: the address to look up.
    pub query_addr: u64,
    /// Out: VMA start.
    pub vma_start: u64,
    /// Out: VMA end (exclusive).
    pub vma_end: u64,
    /// Out: `PROCMAP_QUERY_VMA_*` bits of the VMA.
    pub vma_flags: u64,
    /// Out: page size of the VMA.
    pub vma_page_size: u64,
    /// Out: file offset of `vma_start`.
    pub vma_offset: u64,
    /// Out: inode of the backing file, 0 for anonymous memory.
    pub inode: u64,
    /// Out: device major number.
    pub dev_major: u32,
    /// Out: device minor number.
    pub dev_minor: u32,
    /// In: name buffer size; out: name length including NUL, 0 = no name.
    pub vma_name_size: u32,
    /// In: build-id buffer size; out: build-id length, 0 = none.
    pub build_id_size: u32,
    /// In: user pointer to the name buffer.
    pub vma_name_addr: u64,
    /// In: user pointer to the build-id buffer.
    pub build_id_addr: u64,
}

const _: () = assert!(std::mem::size_of::<ProcmapQuery>() == 104);

/// Issues PROCMAP_QUERY on an open `/proc/PID/maps` descriptor.
///
/// `q.query_flags` and `q.query_addr` must be set by the caller; the buffer
/// fields are filled from `name` and `build_id` (empty slices mean "don't fetch").
/// On success the kernel wrote at most `name.len()` / `build_id.len()` bytes.
pub fn procmap_query(
    fd: BorrowedFd<'_>,
    q: &mut ProcmapQuery,
    name: &mut [u8],
    build_id: &mut [u8],
) -> io::Result<()> {
    q.size = std::mem::size_of::<ProcmapQuery>() as u64;
    q.vma_name_size = u32::try_from(name.len()).unwrap_or(u32::MAX);
    q.vma_name_addr = if name.is_empty() {
        0
    } else {
        name.as_mut_ptr() as u64
    };
    q.build_id_size = u32::try_from(build_id.len()).unwrap_or(u32::MAX);
    q.build_id_addr = if build_id.is_empty() {
        0
    } else {
        build_id.as_mut_ptr() as u64
    };
    // SAFETY: `q` is a valid, exclusively borrowed `procmap_query` whose `size`
    // field matches its layout. The name and build-id pointers, when non-zero,
    // point to exclusively borrowed buffers whose lengths are the sizes passed in
    // `vma_name_size` / `build_id_size`; the kernel writes no more than that.
    // The buffers outlive the call. `fd` is a live descriptor for the call.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PROCMAP_QUERY as libc::Ioctl,
            q as *mut ProcmapQuery,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of the start
/// time in `/proc/PID/stat`; 100 if sysconf fails.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes an integer name and touches no memory of ours.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

/// Reads a clock (`CLOCK_MONOTONIC`, `CLOCK_BOOTTIME`, ...) in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed timespec that the call
    // fills; clock_gettime reads nothing else of ours.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// `perf_event_open(2)` of the `attr` bytes (a `struct perf_event_attr`,
/// its `size` field set) for `pid` on `cpu` (-1: any), close-on-exec.
pub fn perf_event_open(attr: &[u8], pid: i32, cpu: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    let mut buf = [0u64; 32];
    let n = attr.len().min(256);
    // SAFETY: `buf` is 256 bytes, 8-aligned, and we copy at most 256 bytes
    // into it; the source is a valid slice of at least `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(attr.as_ptr(), buf.as_mut_ptr().cast::<u8>(), n) };
    // SAFETY: the kernel reads `attr.size` bytes (at most 256, in `buf`)
    // and returns a new descriptor or -1; no memory of ours is kept.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            buf.as_ptr(),
            pid,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: the records of `fd` go to `target`'s ring
/// (both on the same CPU).
pub fn perf_set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
    // SAFETY: the ioctl takes the target descriptor as an integer; both
    // descriptors stay open for the call.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_SET_OUTPUT,
            target.as_raw_fd(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A perf event's ring buffer mapped read-write (the reader moves
/// `data_tail`), unmapped on drop.
pub struct PerfRing {
    fd: std::os::fd::OwnedFd,
    base: *mut libc::c_void,
    len: usize,
    page: usize,
}

// SAFETY: the mapping belongs to this value alone and is only touched
// through `&mut self` (drain) or on drop.
unsafe impl Send for PerfRing {}

impl PerfRing {
    /// Maps 1 + `data_pages` pages (a power of two) of `fd`'s ring.
    pub fn map(fd: std::os::fd::OwnedFd, data_pages: usize) -> io::Result<PerfRing> {
        let page = page_size();
        let len = (1 + data_pages) * page;
        // SAFETY: a fresh shared mapping of the event's ring; the kernel
        // checks fd and length; we keep the pointer until drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(PerfRing {
            fd,
            base,
            len,
            page,
        })
    }

    /// Appends every record the kernel has written since the last drain to
    /// `out` (in order, unwrapped) and frees that room.
    pub fn drain(&mut self, out: &mut Vec<u8>) {
        use std::sync::atomic::{fence, Ordering};
        let size = (self.len - self.page) as u64;
        // SAFETY: `base` maps `len` bytes; the first page is the control
        // page, whose u64 data_head (offset 1024) the kernel updates and
        // data_tail (offset 1032) we write; volatile accesses and fences as
        // the perf_event_mmap_page protocol requires.
        unsafe {
            let ctl = self.base.cast::<u8>();
            let head = std::ptr::read_volatile(ctl.add(1024).cast::<u64>());
            fence(Ordering::Acquire);
            let tail = std::ptr::read_volatile(ctl.add(1032).cast::<u64>());
            let data = ctl.add(self.page);
            let n = head.saturating_sub(tail).min(size);
            let start = out.len();
            out.reserve(n as usize);
            for i in 0..n {
                out.push(*data.add(((tail + i) % size) as usize));
            }
            debug_assert_eq!(out.len() - start, n as usize);
            fence(Ordering::Release);
            std::ptr::write_volatile(ctl.add(1032).cast::<u64>(), head);
        }
    }

    /// The event's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`, used by no one after.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// A path component as a C string; None when it holds a NUL or a `/`, or
/// is empty, `.` or `..` (so it names one entry of one directory).
fn component(name: &[u8]) -> Option<std::ffi::CString> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return None;
    }
    std::ffi::CString::new(name).ok()
}

fn bad_name() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a single path component")
}

/// Opens (creating it first, mode 0755, if missing) the directory `name`
/// inside `dir`, never through a symlink (ELOOP/ENOTDIR then).
pub fn dir_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let c = component(name).ok_or_else(bad_name)?;
    // SAFETY: `c` is a valid C string and `dir` an open descriptor for the call.
    let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: as above; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether `name` exists in `dir` (a symlink counts, and is not followed).
pub fn exists_at(dir: BorrowedFd<'_>, name: &[u8]) -> bool {
    identity_at(dir, name).is_ok()
}

/// The device and inode of `name` in `dir` (a symlink's own, not followed).
pub fn identity_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<(u64, u64)> {
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
    Ok((st.st_dev, st.st_ino))
}

/// Creates the new file `name` in `dir` (never existing before, never
/// through a symlink), mode `mode`, for reading and writing.
pub fn create_at(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
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

/// A pidfd for process `pid` (Linux 5.3+): signals sent through it reach
/// that process or nobody, never a later process given the same pid.
pub fn pidfd_open(pid: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags (0) and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Sends `sig` to the process of a pidfd from [`pidfd_open`]. A raw fd is
/// taken (a signal handler's thread holds it in an atomic): one closed
/// meanwhile fails with EBADF, one reused for something else with EINVAL.
pub fn pidfd_send_signal(pidfd: std::os::fd::RawFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: no siginfo (NULL) and no flags; the kernel checks the fd.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens for reading, non-blocking and without taking a terminal, the very
/// inode an `O_PATH` descriptor holds, through `/proc/self/fd` (Linux has
/// no other way to turn such a descriptor into a readable one). Fails when
/// `/proc` is not this process's (not mounted, another PID namespace's).
pub fn reopen_for_reading(at: &std::fs::File) -> io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", at.as_raw_fd()))
}

/// Makes the program `cmd` runs start with SIGHUP ignored (a disposition
/// that survives exec, unlike a handler).
pub fn ignore_sighup_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it only
    // calls signal(2), which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
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

/// Looks a user up through the C library (`getpwnam_r`: /etc/passwd, and
/// NSS sources such as LDAP or sssd); `None` when there is no such user.
pub fn uid_of_user(name: &str) -> io::Result<Option<u32>> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name with a NUL byte"))?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid value of this plain C struct;
        // getpwnam_r overwrites it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `pwd`, `buf` (with its true
        // length) and `found` are exclusively borrowed and outlive the call,
        // which writes only within them.
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(pwd.pw_uid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
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
