//! The loaded BPF programs' JITed functions, named as perf record and the
//! kernel's kallsyms name them (`bpf_prog_<tag>_<name>`), for the KSYMBOL
//! and BPF_EVENT records a snapshot writes after the kernel maps. Listing
//! calls into `sys`; [`program_of`], which names the functions, is pure.

use std::collections::HashMap;
use std::os::fd::AsFd;

use super::btf::Btf;
use crate::sys::{bpf_btf_data, bpf_prog_fd_by_id, bpf_prog_info, bpf_prog_next_id, BpfProgInfo};

/// One JITed function of a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfFunc {
    /// Its start address in the kernel.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u32,
    /// `bpf_prog_<tag hex>[_<name>]`.
    pub name: Vec<u8>,
}

/// One loaded program: its id, tag and JITed functions (main one first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfProgram {
    pub id: u32,
    pub tag: [u8; 8],
    pub funcs: Vec<BpfFunc>,
}

/// The programs found, in id order, or why none could be listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BpfPrograms {
    pub programs: Vec<BpfProgram>,
    /// Why the programs are missing (no privileges, hidden addresses).
    pub skipped: Option<String>,
    /// Programs left out: not JITed, their addresses hidden, or their
    /// description inconsistent or unreadable.
    pub left_out: usize,
}

/// The kernel's longest symbol name, its `KSYM_NAME_LEN` (512 since Linux
/// 6.1) less the NUL.
pub const MAX_SYMBOL_NAME: usize = 511;

/// perf's name of a JITed BPF function: `bpf_prog_`, the tag in lower-case
/// hex, then `_` and `short` unless `short` is empty; cut to
/// [`MAX_SYMBOL_NAME`] bytes as the kernel's `bpf_get_prog_name` cuts it
/// (a `snprintf` into `KSYM_NAME_LEN`), so the name is kallsyms' own.
pub fn bpf_symbol_name(tag: &[u8; 8], short: &[u8]) -> Vec<u8> {
    let mut name = b"bpf_prog_".to_vec();
    for b in tag {
        name.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    if !short.is_empty() {
        name.push(b'_');
        name.extend_from_slice(short);
    }
    name.truncate(MAX_SYMBOL_NAME);
    name
}

/// A program's functions as perf's `perf_event__synthesize_one_bpf_prog`
/// names them: each function's own tag, then its BTF function name when
/// the program has BTF function info (and `btf` is its BTF), else the
/// program's name for a program of one function, else `F`. None when the
/// kernel gave no addresses (not JITed, or hidden) or counts that
/// disagree (perf writes nothing for such a program either).
pub fn program_of(info: &BpfProgInfo, btf: Option<&Btf<'_>>) -> Option<BpfProgram> {
    let n = info.jited_ksyms.len();
    if n == 0 || info.jited_func_lens.len() != n || info.prog_tags.len() != n {
        return None;
    }
    let btf = btf.filter(|_| info.func_type_ids.len() == n);
    let funcs = (0..n)
        .map(|i| {
            let short: &[u8] = match btf {
                Some(b) => b.name_of(info.func_type_ids[i]),
                None if n == 1 => &info.name,
                None => b"F",
            };
            BpfFunc {
                addr: info.jited_ksyms[i],
                len: info.jited_func_lens[i],
                name: bpf_symbol_name(&info.prog_tags[i], short),
            }
        })
        .collect();
    Some(BpfProgram {
        id: info.id,
        tag: info.tag,
        funcs,
    })
}

/// Every loaded program, in id order. Programs unloaded between being
/// listed and being opened are skipped, and so are this process's own task
/// iterators, by id ([`super::tasks::own_iterators`]: another program of
/// their name is any other's); without the privilege to list them
/// (CAP_SYS_ADMIN) there are none and `skipped` says so.
pub fn bpf_programs() -> BpfPrograms {
    let mut out = BpfPrograms::default();
    let mut btfs: HashMap<u32, Option<Vec<u8>>> = HashMap::new();
    let mut hidden = 0;
    let mut id = 0;
    loop {
        id = match bpf_prog_next_id(id) {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(e) => {
                out.skipped = Some(match e.raw_os_error() {
                    Some(libc::EPERM) => {
                        "listing BPF programs needs CAP_SYS_ADMIN (BPF_PROG_GET_NEXT_ID: EPERM)"
                            .to_string()
                    }
                    _ => format!("listing BPF programs (BPF_PROG_GET_NEXT_ID): {e}"),
                });
                out.programs.clear();
                return out;
            }
        };
        let info = match bpf_prog_fd_by_id(id) {
            Ok(fd) => bpf_prog_info(fd.as_fd()),
            // unloaded since it was listed
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => Err(e),
        };
        let Ok(info) = info else {
            out.left_out += 1;
            continue;
        };
        if super::tasks::own_iterators().contains(&info.id) {
            continue;
        }
        if info.jited_ksyms.is_empty() && !info.jited_func_lens.is_empty() {
            hidden += 1;
        }
        let data = if info.func_type_ids.is_empty() {
            None
        } else {
            btfs.entry(info.btf_id)
                .or_insert_with(|| bpf_btf_data(info.btf_id).ok())
                .as_deref()
        };
        let btf = data.and_then(|d| Btf::parse(d).ok());
        match program_of(&info, btf.as_ref()) {
            Some(p) => out.programs.push(p),
            None => out.left_out += 1,
        }
    }
    if out.programs.is_empty() && hidden > 0 {
        out.skipped = Some(
            "BPF programs' addresses are hidden from this user (kptr_restrict, CAP_SYSLOG)".into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: [u8; 8] = [0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67];

    fn info(n: usize) -> BpfProgInfo {
        BpfProgInfo {
            id: 7,
            tag: TAG,
            name: b"filter".to_vec(),
            jited_ksyms: (0..n as u64).map(|i| 0xffff_0000 + 0x100 * i).collect(),
            jited_func_lens: (0..n as u32).map(|i| 0x10 + i).collect(),
            prog_tags: (0..n as u8).map(|i| [i; 8]).collect(),
            btf_id: 0,
            func_type_ids: Vec::new(),
        }
    }

    // Names are perf's: the tag in lower-case hex, then the short name if any.
    #[test]
    fn symbol_names() {
        assert_eq!(
            bpf_symbol_name(&TAG, b"filter"),
            b"bpf_prog_deadbeef01234567_filter"
        );
        assert_eq!(bpf_symbol_name(&TAG, b""), b"bpf_prog_deadbeef01234567");
    }

    // One function takes the program's name (none: no suffix), several take "F" without BTF; each its own tag.
    #[test]
    fn names_without_btf() {
        let one = program_of(&info(1), None).unwrap();
        assert_eq!(one.id, 7);
        assert_eq!(one.tag, TAG);
        assert_eq!(
            one.funcs,
            vec![BpfFunc {
                addr: 0xffff_0000,
                len: 0x10,
                name: b"bpf_prog_0000000000000000_filter".to_vec(),
            }]
        );
        let mut nameless = info(1);
        nameless.name.clear();
        let p = program_of(&nameless, None).unwrap();
        assert_eq!(p.funcs[0].name, b"bpf_prog_0000000000000000");
        let two = program_of(&info(2), None).unwrap();
        assert_eq!(two.funcs[1].name, b"bpf_prog_0101010101010101_F");
        assert_eq!((two.funcs[1].addr, two.funcs[1].len), (0xffff_0100, 0x11));
    }

    // No addresses (not JITed, hidden) or disagreeing counts: nothing, as perf writes nothing.
    #[test]
    fn inconsistent_programs_are_left_out() {
        let mut hidden = info(1);
        hidden.jited_ksyms.clear();
        assert_eq!(program_of(&hidden, None), None);
        let mut short = info(2);
        short.prog_tags.pop();
        assert_eq!(program_of(&short, None), None);
    }

    // With BTF function info, each function is named by its BTF FUNC's name.
    #[test]
    fn names_from_btf() {
        // a BTF blob (little-endian) of two FUNCs, "main_fn" and "sub"
        let strings = b"\0main_fn\0sub\0";
        let mut types = Vec::new();
        for name_off in [1u32, 9] {
            types.extend_from_slice(&name_off.to_le_bytes());
            types.extend_from_slice(&(12u32 << 24).to_le_bytes());
            types.extend_from_slice(&0u32.to_le_bytes());
        }
        let mut blob = vec![0x9f, 0xeb, 1, 0];
        blob.extend_from_slice(&24u32.to_le_bytes());
        for v in [
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            blob.extend_from_slice(&v.to_le_bytes());
        }
        blob.extend_from_slice(&types);
        blob.extend_from_slice(strings);
        let btf = Btf::parse(&blob).unwrap();
        let mut i = info(2);
        i.btf_id = 3;
        i.func_type_ids = vec![1, 2];
        let p = program_of(&i, Some(&btf)).unwrap();
        assert_eq!(p.funcs[0].name, b"bpf_prog_0000000000000000_main_fn");
        assert_eq!(p.funcs[1].name, b"bpf_prog_0101010101010101_sub");
        // function info for another count than the functions: BTF unused
        i.func_type_ids = vec![1];
        let p = program_of(&i, Some(&btf)).unwrap();
        assert_eq!(p.funcs[0].name, b"bpf_prog_0000000000000000_F");
    }

    // Our own task iterators are left out by id, whatever their name: a
    // program held as ours is not listed, and is once it is no longer ours.
    #[test]
    #[ignore = "needs root (BPF_PROG_LOAD, listing programs)"]
    fn own_iterators_are_left_out_by_id() {
        use crate::sys::bpf_load_socket_filter;
        let insns = [u64::from(std::process::id()) << 32 | 0xb7, 0x95];
        let fd = bpf_load_socket_filter(&insns, "m2s_own").expect("root loads a program");
        let id = bpf_prog_info(fd.as_fd()).unwrap().id;
        let listed = |id| bpf_programs().programs.iter().any(|p| p.id == id);
        let own = crate::proc::tasks::OwnIterator::hold(id);
        assert!(!listed(id), "ours is left out");
        drop(own);
        assert!(listed(id), "listed once not ours");
    }

    // Names are cut to 511 bytes, as the kernel's kallsyms cuts them.
    #[test]
    fn long_names_are_cut_as_the_kernel_cuts_them() {
        let long = vec![b'x'; 500];
        let name = bpf_symbol_name(&TAG, &long);
        assert_eq!(name.len(), MAX_SYMBOL_NAME);
        assert!(name.starts_with(b"bpf_prog_deadbeef01234567_xxx"));
    }
}
