//! Child processes and users: pidfds and their signals, dispositions a
//! child starts with, and user lookup.

use std::io;

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

/// Makes the program `cmd` runs get `sig` when the thread that started it
/// ends, killed too (PR_SET_PDEATHSIG, kept across exec); a child whose
/// parent is gone before that is set does not run.
pub fn signal_on_parent_death(cmd: &mut std::process::Command, sig: libc::c_int) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec; it only
    // calls prctl(2) and getppid(2), which are async-signal-safe, and
    // allocates nothing (an io::Error from an errno does not allocate).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // the parent died before the prctl: no signal will come
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
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

/// Gives the calling thread a file table of its own, a copy of the shared
/// one. Every system call on a descriptor of a multi-threaded process takes
/// and drops a reference to the file (an atomic pair on a shared line); with
/// a table of its own the thread's calls skip that. Descriptors the thread
/// opens afterwards are its own: they must not be used by other threads.
pub fn unshare_files() -> io::Result<()> {
    // SAFETY: unshare takes flags and touches only the calling thread.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This process's effective user id: whose files it may treat as its own.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes nothing, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The user namespace that owns the mount namespace at `mnt_ns` (a
/// `/proc/PID/ns/mnt` path), as (device, inode) of its nsfs file: mounts
/// made in a namespace another user namespace owns were made by whoever
/// made that user namespace, any user.
pub fn mount_ns_owner(mnt_ns: &std::path::Path) -> io::Result<(u64, u64)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::File::open(mnt_ns)?;
    // NS_GET_USERNS: _IO(0xb7, 0x1)
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    // SAFETY: the ioctl takes no argument and returns a new descriptor or -1.
    let fd = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS as _) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    let user = unsafe { std::fs::File::from_raw_fd(fd) };
    let m = user.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// The user namespace this process runs in, as [`mount_ns_owner`] gives
/// one.
pub fn own_user_ns() -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/self/ns/user")?;
    Ok((m.dev(), m.ino()))
}

/// What `statx` tells of a process's mapped file through its `map_files`
/// entry (`/proc/PID/map_files/START-END`, the link followed to the very
/// file mapped, root only): without syncing, asking only the type, links,
/// inode and mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedFile {
    /// The type bits (`S_IFREG`, ...).
    pub kind: u32,
    /// How many names the inode has.
    pub nlink: u32,
    pub inode: u64,
    /// The id of the mount the mapping reaches it through.
    pub mount_id: u32,
}

/// The [`MappedFile`] at `map_file` (a `map_files` entry); an error where
/// the kernel could not tell all of it.
pub fn mapped_file(map_file: &std::path::Path) -> io::Result<MappedFile> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(map_file.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mask = libc::STATX_TYPE | libc::STATX_NLINK | libc::STATX_INO | libc::STATX_MNT_ID;
    // SAFETY: plain-data out struct, written by statx only.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and lives across the call; statx writes
    // only into `st`.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_STATX_DONT_SYNC,
            mask,
            &mut st,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if st.stx_mask & mask != mask {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "statx gave no type, links, inode or mount id (Linux 5.8+)",
        ));
    }
    Ok(MappedFile {
        kind: u32::from(st.stx_mode) & libc::S_IFMT,
        nlink: st.stx_nlink,
        inode: st.stx_ino,
        mount_id: st.stx_mnt_id as u32,
    })
}
