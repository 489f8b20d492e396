//! perf events opened by this process: `perf_event_open`, output
//! redirection and the mapped ring buffer.

use std::io;

use super::clock::page_size;
use std::os::fd::{AsRawFd, BorrowedFd};

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

/// The records the kernel could not write for `fd` (an event opened with
/// `read_format` PERF_FORMAT_LOST alone: reading it gives the count, then
/// the lost count; Linux 6.0+). For an inherited event, its children's
/// losses are counted on it.
pub fn perf_read_lost(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut v = [0u64; 2];
    // SAFETY: reads at most 16 bytes into `v`, which holds 16.
    let n = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 16) };
    match n {
        16 => Ok(v[1]),
        n if n < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short read of a perf event",
        )),
    }
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
    /// `out` (in order, unwrapped), frees that room and returns how many
    /// bytes it appended.
    pub fn drain(&mut self, out: &mut Vec<u8>) -> usize {
        use std::sync::atomic::{fence, Ordering};
        let size = self.data_size();
        // SAFETY: `base` maps `len` bytes; the first page is the control
        // page, whose u64 data_head (offset 1024) the kernel updates and
        // data_tail (offset 1032) we write; volatile accesses and fences as
        // the perf_event_mmap_page protocol requires. The data area is the
        // `size` bytes after the control page; the two slices read lie in
        // it (`off + first <= size`, `n - first <= off`) and the kernel does
        // not write there until data_tail moves past them.
        unsafe {
            let ctl = self.base.cast::<u8>();
            let head = std::ptr::read_volatile(ctl.add(1024).cast::<u64>());
            fence(Ordering::Acquire);
            let tail = std::ptr::read_volatile(ctl.add(1032).cast::<u64>());
            let data = ctl.add(self.page);
            let n = head.saturating_sub(tail).min(size as u64) as usize;
            let off = (tail % size as u64) as usize;
            let first = n.min(size - off);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(off), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, n - first));
            fence(Ordering::Release);
            std::ptr::write_volatile(ctl.add(1032).cast::<u64>(), head);
            n
        }
    }

    /// Bytes of the ring's data area.
    pub fn data_size(&self) -> usize {
        self.len - self.page
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
