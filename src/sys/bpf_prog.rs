//! The bpf(2) calls that list the loaded BPF programs and describe one:
//! BPF_PROG_GET_NEXT_ID, BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD (for
//! `struct bpf_prog_info`'s name, tag, JITed functions and BTF function
//! info), the raw BTF of a program (BPF_BTF_GET_FD_BY_ID), and, for tests,
//! loading a small socket filter.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_BTF_GET_FD_BY_ID: libc::c_long = 19;

/// Most JITed functions taken of one program (the verifier allows 256
/// sub-programs; more than this is not a program the kernel made).
pub const MAX_BPF_FUNCS: u32 = 1024;
/// Largest program BTF read (bytes).
pub const MAX_BPF_BTF: u32 = 16 << 20;
/// Bytes of one `struct bpf_func_info` (insn_off, type_id) as asked for.
const FUNC_INFO_REC: u32 = 8;

/// `struct bpf_prog_info` as of Linux 5.16 (232 bytes; older kernels fill
/// a prefix, newer ones no more than asked).
#[repr(C)]
#[derive(Default)]
struct ProgInfoRaw {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
    ifindex: u32,
    gpl_compatible: u32,
    netns_dev: u64,
    netns_ino: u64,
    nr_jited_ksyms: u32,
    nr_jited_func_lens: u32,
    jited_ksyms: u64,
    jited_func_lens: u64,
    btf_id: u32,
    func_info_rec_size: u32,
    func_info: u64,
    nr_func_info: u32,
    nr_line_info: u32,
    line_info: u64,
    jited_line_info: u64,
    nr_jited_line_info: u32,
    line_info_rec_size: u32,
    jited_line_info_rec_size: u32,
    nr_prog_tags: u32,
    prog_tags: u64,
    run_time_ns: u64,
    run_cnt: u64,
    recursion_misses: u64,
    verified_insns: u32,
    attach_btf_obj_id: u32,
    attach_btf_id: u32,
    _pad: u32,
}

const _: () = assert!(std::mem::size_of::<ProgInfoRaw>() == 232);
const _: () = assert!(std::mem::offset_of!(ProgInfoRaw, name) == 64);
const _: () = assert!(std::mem::offset_of!(ProgInfoRaw, nr_jited_ksyms) == 104);
const _: () = assert!(std::mem::offset_of!(ProgInfoRaw, btf_id) == 128);
const _: () = assert!(std::mem::offset_of!(ProgInfoRaw, nr_prog_tags) == 180);
const _: () = assert!(std::mem::offset_of!(ProgInfoRaw, prog_tags) == 184);

/// `struct bpf_btf_info`.
#[repr(C)]
#[derive(Default)]
struct BtfInfoRaw {
    btf: u64,
    btf_size: u32,
    id: u32,
    name: u64,
    name_len: u32,
    kernel_btf: u32,
}

/// `union bpf_attr` for the *_GET_NEXT_ID and *_GET_FD_BY_ID commands.
#[repr(C)]
#[derive(Default)]
struct IdAttr {
    start_or_id: u32,
    next_id: u32,
    open_flags: u32,
    _pad: u32,
}

/// `union bpf_attr` for BPF_OBJ_GET_INFO_BY_FD.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// What the kernel says of one loaded program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BpfProgInfo {
    /// Its id.
    pub id: u32,
    /// Its tag (a hash of its instructions).
    pub tag: [u8; 8],
    /// Its name (up to 15 bytes, no NUL; may be empty).
    pub name: Vec<u8>,
    /// The start of each JITed function (empty: not JITed, or the
    /// addresses are hidden from this user).
    pub jited_ksyms: Vec<u64>,
    /// The length of each JITed function.
    pub jited_func_lens: Vec<u32>,
    /// Each function's tag.
    pub prog_tags: Vec<[u8; 8]>,
    /// The BTF object describing it (0: none).
    pub btf_id: u32,
    /// Each function's BTF type id (`bpf_func_info.type_id`), when it has
    /// BTF function info.
    pub func_type_ids: Vec<u32>,
}

/// bpf(cmd, attr, size), returning what the call returns.
///
/// # Safety
/// `attr` must be the attribute struct `cmd` expects, its pointers valid
/// for the call (and for the sizes they are given).
unsafe fn bpf_call<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: the caller passes the struct the command reads, and its size,
    // so the kernel reads no further; its pointers are the caller's promise.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// The id of the first loaded program after `after` (0: the first), None
/// past the last. EPERM without CAP_SYS_ADMIN.
pub fn bpf_prog_next_id(after: u32) -> io::Result<Option<u32>> {
    let mut attr = IdAttr {
        start_or_id: after,
        ..Default::default()
    };
    // SAFETY: the GET_NEXT_ID struct, no pointers.
    match unsafe { bpf_call(BPF_PROG_GET_NEXT_ID, &mut attr) } {
        Ok(_) => Ok(Some(attr.next_id)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A descriptor of the program `id` (ENOENT: unloaded since it was listed).
pub fn bpf_prog_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut attr = IdAttr {
        start_or_id: id,
        ..Default::default()
    };
    // SAFETY: the GET_FD_BY_ID struct, no pointers.
    let fd = unsafe { bpf_call(BPF_PROG_GET_FD_BY_ID, &mut attr) }?;
    // SAFETY: the kernel just returned this descriptor; no one else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// BPF_OBJ_GET_INFO_BY_FD into `info`.
///
/// # Safety
/// Every pointer in `info` must be 0 or point to as many writable bytes as
/// its count (or size) field says.
unsafe fn obj_info<T>(fd: BorrowedFd<'_>, info: &mut T) -> io::Result<()> {
    let mut attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<T>() as u32,
        info: info as *mut T as u64,
    };
    // SAFETY: `attr` points at `info` of the length given; the kernel
    // writes at most that many bytes there, and through `info`'s pointers
    // at most their counts (the caller's promise).
    unsafe { bpf_call(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.map(|_| ())
}

/// Checks a count the kernel gave against `max`.
fn bounded(n: u32, max: u32, what: &str) -> io::Result<usize> {
    if n > max {
        return Err(io::Error::other(format!(
            "{n} {what} (at most {max} taken)"
        )));
    }
    Ok(n as usize)
}

/// Describes the program open at `fd`: a first call for the counts, a
/// second with arrays of exactly those sizes (bounded by [`MAX_BPF_FUNCS`]).
pub fn bpf_prog_info(fd: BorrowedFd<'_>) -> io::Result<BpfProgInfo> {
    let mut first = ProgInfoRaw::default();
    // SAFETY: all pointers 0: the kernel only fills in the counts.
    unsafe { obj_info(fd, &mut first) }?;
    let nr_ksyms = bounded(first.nr_jited_ksyms, MAX_BPF_FUNCS, "JITed functions")?;
    let nr_lens = bounded(first.nr_jited_func_lens, MAX_BPF_FUNCS, "function lengths")?;
    let nr_tags = bounded(first.nr_prog_tags, MAX_BPF_FUNCS, "function tags")?;
    let with_finfo = first.btf_id != 0 && first.func_info_rec_size != 0;
    let nr_finfo = if with_finfo {
        bounded(first.nr_func_info, MAX_BPF_FUNCS, "BTF function infos")?
    } else {
        0
    };
    let mut ksyms = vec![0u64; nr_ksyms];
    let mut lens = vec![0u32; nr_lens];
    let mut tags = vec![[0u8; 8]; nr_tags];
    let mut finfo = vec![[0u32; 2]; nr_finfo];
    let mut second = ProgInfoRaw {
        nr_jited_ksyms: nr_ksyms as u32,
        jited_ksyms: if nr_ksyms > 0 {
            ksyms.as_mut_ptr() as u64
        } else {
            0
        },
        nr_jited_func_lens: nr_lens as u32,
        jited_func_lens: if nr_lens > 0 {
            lens.as_mut_ptr() as u64
        } else {
            0
        },
        nr_prog_tags: nr_tags as u32,
        prog_tags: if nr_tags > 0 {
            tags.as_mut_ptr() as u64
        } else {
            0
        },
        nr_func_info: nr_finfo as u32,
        func_info_rec_size: if nr_finfo > 0 { FUNC_INFO_REC } else { 0 },
        func_info: if nr_finfo > 0 {
            finfo.as_mut_ptr() as u64
        } else {
            0
        },
        ..Default::default()
    };
    // SAFETY: each pointer is 0 or a live buffer of exactly the count (of
    // elements of the size the kernel writes: u64, u32, 8-byte tags, 8-byte
    // func infos as asked by func_info_rec_size) set beside it; the
    // kernel copies at most that many.
    unsafe { obj_info(fd, &mut second) }?;
    // the kernel zeroes the pointer when it hides the addresses
    // (kptr_restrict), and may report fewer than asked
    if second.jited_ksyms == 0 {
        ksyms.clear();
    }
    ksyms.truncate(second.nr_jited_ksyms as usize);
    lens.truncate(second.nr_jited_func_lens as usize);
    tags.truncate(second.nr_prog_tags as usize);
    if second.func_info == 0 || second.func_info_rec_size != FUNC_INFO_REC {
        finfo.clear();
    }
    finfo.truncate(second.nr_func_info as usize);
    let name_len = second.name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(BpfProgInfo {
        id: second.id,
        tag: second.tag,
        name: second.name[..name_len].to_vec(),
        jited_ksyms: ksyms,
        jited_func_lens: lens,
        prog_tags: tags,
        btf_id: second.btf_id,
        func_type_ids: finfo.iter().map(|f| f[1]).collect(),
    })
}

/// The raw bytes of BTF object `btf_id` (at most [`MAX_BPF_BTF`]).
pub fn bpf_btf_data(btf_id: u32) -> io::Result<Vec<u8>> {
    let mut attr = IdAttr {
        start_or_id: btf_id,
        ..Default::default()
    };
    // SAFETY: the GET_FD_BY_ID struct, no pointers.
    let fd = unsafe { bpf_call(BPF_BTF_GET_FD_BY_ID, &mut attr) }?;
    // SAFETY: the kernel just returned this descriptor; no one else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let mut first = BtfInfoRaw::default();
    // SAFETY: no pointers: the kernel fills in the size.
    unsafe { obj_info(fd.as_fd(), &mut first) }?;
    let size = bounded(first.btf_size, MAX_BPF_BTF, "bytes of BTF")?;
    let mut data = vec![0u8; size];
    let mut second = BtfInfoRaw {
        btf: data.as_mut_ptr() as u64,
        btf_size: size as u32,
        ..Default::default()
    };
    // SAFETY: `btf` points to `btf_size` writable bytes.
    unsafe { obj_info(fd.as_fd(), &mut second) }?;
    data.truncate(second.btf_size as usize);
    Ok(data)
}
