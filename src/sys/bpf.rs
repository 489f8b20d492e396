//! The bpf(2) calls that run a BPF iterator: load a tracing program for an
//! iterator target, link it, and open the iterator as a file to read. The
//! program's instructions are built elsewhere (a pure encoder); this only
//! hands them to the kernel.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_BTF_LOAD: libc::c_long = 18;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const BPF_TRACE_ITER: u32 = 28;

/// The name iterator programs are loaded with (`bpf_prog_info.name`).
pub const ITER_PROG_NAME: &[u8] = b"m2s_tasks";

/// The leading fields of `union bpf_attr` for BPF_PROG_LOAD, up to
/// `attach_btf_obj_fd` (the kernel treats the fields past `size` as zero).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    _pad: u32,
}

const _: () = assert!(std::mem::offset_of!(ProgLoad, expected_attach_type) == 68);
const _: () = assert!(std::mem::offset_of!(ProgLoad, attach_btf_id) == 108);

/// `union bpf_attr` for BPF_LINK_CREATE of an iterator (no iterator info).
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    iter_info: u64,
    iter_info_len: u32,
    _pad: u32,
}

/// `union bpf_attr` for BPF_ITER_CREATE.
#[repr(C)]
#[derive(Default)]
struct IterCreate {
    link_fd: u32,
    flags: u32,
}

/// bpf(cmd, attr, size), returning the new descriptor.
///
/// # Safety
/// `attr` must be the attribute struct `cmd` expects, its pointers valid
/// for the call.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<OwnedFd> {
    // SAFETY: the caller passes the struct the command reads; its size is
    // passed with it, so the kernel reads no further.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; no one else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Loads `insns` (8-byte BPF instructions, native byte order) as a BPF
/// iterator program for the iterator target whose BTF function id in
/// vmlinux is `attach_btf_id`. On failure the verifier's log, as much as
/// fits in `log`, is appended to the error.
pub fn bpf_load_iter(
    insns: &[u64],
    license: &std::ffi::CStr,
    attach_btf_id: u32,
    log: &mut [u8],
) -> io::Result<OwnedFd> {
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_TRACING,
        insn_cnt: u32::try_from(insns.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: BPF_TRACE_ITER,
        attach_btf_id,
        ..Default::default()
    };
    attr.prog_name[..ITER_PROG_NAME.len()].copy_from_slice(ITER_PROG_NAME);
    if !log.is_empty() {
        log[0] = 0;
        attr.log_level = 1;
        attr.log_size = u32::try_from(log.len()).unwrap_or(u32::MAX);
        attr.log_buf = log.as_mut_ptr() as u64;
    }
    // SAFETY: `attr` is BPF_PROG_LOAD's struct; `insns`, `license` (NUL
    // terminated) and `log` (of the length given) outlive the call, and the
    // kernel writes at most `log_size` bytes into `log`.
    unsafe { bpf(BPF_PROG_LOAD, &mut attr) }
}

/// Loads `insns` (8-byte BPF instructions, native byte order) as a socket
/// filter named `name` (at most 15 bytes): for tests that need a program
/// of their own loaded. The program stays loaded while the descriptor is
/// open.
pub fn bpf_load_socket_filter(insns: &[u64], name: &str) -> io::Result<OwnedFd> {
    let mut attr = socket_filter(insns)?;
    let slot = attr
        .prog_name
        .get_mut(..name.len())
        .filter(|_| name.len() < 16);
    slot.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?
        .copy_from_slice(name.as_bytes());
    // SAFETY: `attr` is BPF_PROG_LOAD's struct; `insns` and the license
    // (NUL terminated, static) outlive the call; no log buffer.
    unsafe { bpf(BPF_PROG_LOAD, &mut attr) }
}

/// BPF_PROG_LOAD's struct for `insns` as a GPL socket filter (pointing at
/// `insns`, which must outlive its use).
fn socket_filter(insns: &[u64]) -> io::Result<ProgLoad> {
    Ok(ProgLoad {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: u32::try_from(insns.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        insns: insns.as_ptr() as u64,
        license: c"GPL".as_ptr() as u64,
        ..Default::default()
    })
}

/// `union bpf_attr` for BPF_BTF_LOAD (no log).
#[repr(C)]
#[derive(Default)]
struct BtfLoad {
    btf: u64,
    btf_log_buf: u64,
    btf_size: u32,
    btf_log_size: u32,
    btf_log_level: u32,
    _pad: u32,
}

/// A BTF blob (native byte order) of `int` and one static FUNC `func`
/// returning it: type 3 is the FUNC.
fn func_btf(func: &str) -> Vec<u8> {
    let mut strings = b"\0int\0".to_vec();
    strings.extend_from_slice(func.as_bytes());
    strings.push(0);
    // INT "int" (signed, 32 bits), FUNC_PROTO () -> int, FUNC func
    let types: [u32; 10] = [1, 1 << 24, 4, 1 << 24 | 32, 0, 13 << 24, 1, 5, 12 << 24, 2];
    let types: Vec<u8> = types.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let mut blob = 0xeb9f_u16.to_ne_bytes().to_vec();
    blob.extend_from_slice(&[1, 0]);
    let (tl, sl) = (types.len() as u32, strings.len() as u32);
    for v in [24, 0, tl, tl, sl] {
        blob.extend_from_slice(&u32::to_ne_bytes(v));
    }
    blob.extend_from_slice(&types);
    blob.extend_from_slice(&strings);
    blob
}

/// Loads `insns` as a socket filter whose one function is named `func`
/// in its BTF (as a compiler's `int func(...)`; the kernel's kallsyms and
/// perf name it by that): for tests. Stays loaded while the descriptor is
/// open.
pub fn bpf_load_socket_filter_with_btf(insns: &[u64], func: &str) -> io::Result<OwnedFd> {
    let blob = func_btf(func);
    let mut battr = BtfLoad {
        btf: blob.as_ptr() as u64,
        btf_size: u32::try_from(blob.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        ..Default::default()
    };
    // SAFETY: `battr` is BPF_BTF_LOAD's struct; `blob` (of the size given)
    // outlives the call; no log buffer.
    let btf = unsafe { bpf(BPF_BTF_LOAD, &mut battr) }?;
    // bpf_func_info: instruction 0 is FUNC type 3
    let finfo: [u32; 2] = [0, 3];
    let mut attr = ProgLoad {
        prog_btf_fd: btf.as_raw_fd() as u32,
        func_info_rec_size: 8,
        func_info: finfo.as_ptr() as u64,
        func_info_cnt: 1,
        ..socket_filter(insns)?
    };
    // SAFETY: `attr` is BPF_PROG_LOAD's struct; `insns`, the license
    // (static) and `finfo` (one 8-byte record, as given) outlive the call;
    // `btf` is open for it; no log buffer.
    unsafe { bpf(BPF_PROG_LOAD, &mut attr) }
}

/// Links a loaded iterator program (BPF_LINK_CREATE, BPF_TRACE_ITER).
pub fn bpf_link_iter(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut attr = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_TRACE_ITER,
        ..Default::default()
    };
    // SAFETY: `attr` is BPF_LINK_CREATE's struct, with no pointers (no
    // iterator info); `prog` is open for the call.
    unsafe { bpf(BPF_LINK_CREATE, &mut attr) }
}

/// Opens a new iteration of a linked iterator: a file whose reads run the
/// program over the next objects.
pub fn bpf_iter_open(link: BorrowedFd<'_>) -> io::Result<std::fs::File> {
    let mut attr = IterCreate {
        link_fd: link.as_raw_fd() as u32,
        flags: 0,
    };
    // SAFETY: `attr` is BPF_ITER_CREATE's struct, no pointers; `link` open.
    unsafe { bpf(BPF_ITER_CREATE, &mut attr) }.map(std::fs::File::from)
}

/// A file's first `len` bytes mapped private and read-only, unmapped on
/// drop: for the kernel's BTF in sysfs (Linux 6.16+ maps it without a
/// copy), a file no user can truncate or write.
pub struct KernelBlob {
    base: *mut libc::c_void,
    len: usize,
}

impl KernelBlob {
    /// Maps `file` (`len` bytes, not 0). Not for files a user can change:
    /// a file truncated under the mapping faults its reader.
    pub fn map(file: &std::fs::File, len: usize) -> io::Result<KernelBlob> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a new private read-only mapping; the kernel checks the
        // descriptor and length; the pointer is kept until drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(KernelBlob { base, len })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `base` maps `len` readable bytes for the life of `self`;
        // the file is the kernel's own read-only data (see `map`).
        unsafe { std::slice::from_raw_parts(self.base.cast::<u8>(), self.len) }
    }
}

impl Drop for KernelBlob {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`, used by no one after.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}
