//! The PROCMAP_QUERY ioctl (Linux 6.11+). The system headers on Debian 12
//! (Linux 6.1) do not define it, so the structure and request number are
//! declared here from `include/uapi/linux/fs.h`.

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
