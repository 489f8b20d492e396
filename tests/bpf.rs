//! JITed BPF programs in a snapshot: a program the test loads itself comes
//! out as perf record writes it (one PERF_RECORD_KSYMBOL per function, one
//! PERF_RECORD_BPF_EVENT), as perf, linux-perf-data and perf's own
//! synthesis see it.

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::Command;

use common::*;
use mmap2_synth::sys::{bpf_load_socket_filter, bpf_prog_info, BpfProgInfo};

/// `r0 = 0; exit`: a socket filter that drops every packet, as 8-byte
/// instructions (opcode, registers, offset, immediate) in native order.
const DROP_ALL: [u64; 2] = [0xb7, 0x95];

/// `call sub; exit; sub: r0 = 0; exit`: the same, with the work done in
/// a BPF-to-BPF call (a sub-program: two JITed functions; no BTF).
const DROP_ALL_IN_SUBPROG: [u64; 4] = [0x0000_0001_0000_1085, 0x95, 0xb7, 0x95];

/// Serializes this file's tests: each loads and unloads programs, and the
/// kernel gives a freed program's addresses to the next one loaded, so a
/// test's recording could see another test's program take the place of its
/// own (and merge then rightly drops its own as stale: seen in CI).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Loads `insns` as a socket filter named `name`, and what the kernel says
/// of it (`funcs` JITed functions).
fn load_prog(insns: &[u64], name: &str, funcs: usize) -> (OwnedFd, BpfProgInfo) {
    let fd = bpf_load_socket_filter(insns, name).expect("BPF_PROG_LOAD a socket filter");
    let info = bpf_prog_info(fd.as_fd()).expect("BPF_OBJ_GET_INFO_BY_FD");
    assert_eq!(info.jited_ksyms.len(), funcs, "JITed functions: {info:?}");
    (fd, info)
}

/// `base` (at most 10 bytes) and this test process's pid: a name no other
/// run of these tests loads at the same time (perf -a lists every loaded
/// program, and two suites may run on one machine).
fn unique(base: &str) -> String {
    format!("{base}{}", std::process::id() % 100_000)
}

/// Loads the test's one-function socket filter named `name`.
fn load(name: &str) -> (OwnedFd, BpfProgInfo) {
    load_prog(&DROP_ALL, name, 1)
}

/// `bpf_prog_<tag>_<name>`, as the kernel's kallsyms and perf name it.
fn symbol(info: &BpfProgInfo) -> String {
    let tag: String = info.tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("bpf_prog_{tag}_{}", String::from_utf8_lossy(&info.name))
}

/// A KSYMBOL as this test reads it: addr, len, ksym_type, flags, name.
type Ksym = (u64, u32, u16, u16, String);
/// A BPF_EVENT as this test reads it: type, flags, id, tag.
type BpfEv = (u16, u16, u32, [u8; 8]);

/// Records with their misc: KSYMBOLs, BPF_EVENTs.
type Records = (Vec<(u16, Ksym)>, Vec<(u16, BpfEv)>);

/// The KSYMBOL and BPF_EVENT records of a little-endian file, read by
/// linux-perf-data (which passes both on as raw records), with their misc.
fn bpf_records(path: &Path) -> Records {
    use linux_perf_data::linux_perf_event_reader::EventRecord;
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let file = std::fs::File::open(path).unwrap();
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(std::io::BufReader::new(file)).unwrap();
    let (mut ks, mut bs) = (Vec::new(), Vec::new());
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        let PerfFileRecord::EventRecord { record, .. } = r else {
            continue;
        };
        let Ok(EventRecord::Raw(raw)) = record.parse() else {
            continue;
        };
        let b = raw.data.as_slice();
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        match raw.record_type.0 {
            17 => {
                let name = &b[16..];
                let end = name.iter().position(|&c| c == 0).unwrap();
                let addr = u64::from_le_bytes(b[..8].try_into().unwrap());
                let k = (addr, u32_at(8), u16_at(12), u16_at(14));
                let name = String::from_utf8_lossy(&name[..end]).into_owned();
                ks.push((raw.misc, (k.0, k.1, k.2, k.3, name)));
            }
            18 => {
                let tag: [u8; 8] = b[8..16].try_into().unwrap();
                bs.push((raw.misc, (u16_at(0), u16_at(2), u32_at(4), tag)));
            }
            _ => {}
        }
    }
    (ks, bs)
}

/// Asserts `path` holds the program's KSYMBOL and BPF_EVENT exactly once
/// each, with the kernel's address, length, name, id and tag, misc 0, and
/// that `perf script --show-bpf-events` prints both.
fn assert_has_program(path: &Path, info: &BpfProgInfo) -> Ksym {
    let name = symbol(info);
    let (ks, bs) = bpf_records(path);
    let mine: Vec<_> = ks.iter().filter(|(_, k)| k.4 == name).collect();
    assert_eq!(mine.len(), 1, "one KSYMBOL named {name} in {ks:?}");
    let (misc, k) = mine[0];
    let want = (
        info.jited_ksyms[0],
        info.jited_func_lens[0],
        1,
        0,
        name.clone(),
    );
    assert_eq!((*misc, k), (0, &want));
    let ev: Vec<_> = bs.iter().filter(|(_, b)| b.2 == info.id).collect();
    assert_eq!(ev, [&(0, (1, 0, info.id, info.tag))], "one BPF_EVENT");
    let text = perf(&[
        "script".as_ref(),
        "--show-bpf-events".as_ref(),
        "-i".as_ref(),
        path.as_os_str(),
    ]);
    let ksym_line = format!(
        "addr {:x} len {} type 1 flags 0x0 name {name}",
        want.0, want.1
    );
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(&ksym_line)).collect();
    assert_eq!(lines.len(), 1, "perf script shows {ksym_line}:\n{text}");
    assert!(lines[0].contains("PERF_RECORD_KSYMBOL"), "{text}");
    let ev_line = format!("PERF_RECORD_BPF_EVENT type 1, flags 0, id {}", info.id);
    assert_eq!(
        text.lines().filter(|l| l.contains(&ev_line)).count(),
        1,
        "perf script shows {ev_line}:\n{text}"
    );
    want
}

// A snapshot with kernel maps (-p --kernel, and --all in a private PID
// namespace) holds a loaded program's KSYMBOL and BPF_EVENT once, as the
// kernel describes it, another tool's program named as mmap2-synth's task
// iterators too (it was left out by that name); its summary counts them; a
// snapshot without kernel maps has none.
#[test]
#[ignore = "needs root (BPF_PROG_LOAD, BPF_PROG_GET_NEXT_ID) and perf"]
fn snapshot_writes_loaded_bpf_programs() {
    let _one = one_at_a_time();
    needs_root("loading and listing BPF programs");
    needs_perf();
    let (_fd, info) = load(&unique("m2s_snap"));
    let iter_name = std::str::from_utf8(mmap2_synth::sys::ITER_PROG_NAME).unwrap();
    // instructions of its own (`r0 = pid; exit`): a tag no other run has
    let own = [u64::from(std::process::id()) << 32 | 0xb7, 0x95];
    let (_iter_fd, iter) = load_prog(&own, iter_name, 1);
    let dir = scratch("bpf-snapshot");
    let (a, b, c) = (dir.join("a.data"), dir.join("b.data"), dir.join("c.data"));
    let me = std::process::id().to_string();
    let out = synth_ok(["-p", &me, "--kernel", "-o", a.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("BPF programs (") && err.contains("JITed functions)"),
        "{err}"
    );
    assert_has_program(&a, &info);
    assert_has_program(&a, &iter);

    let script = format!("{} --all -q -o '{}'", bin(), b.display());
    let o = Command::new("unshare")
        .args(["-fp", "--mount-proc", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_has_program(&b, &info);

    synth_ok(["-p", &me, "-o", c.to_str().unwrap()]);
    let (ks, bs) = bpf_records(&c);
    assert!(ks.is_empty() && bs.is_empty(), "no kernel maps, no BPF");
}

// perf record's own synthesis (`perf record -a -e dummy -- true`) writes
// the same KSYMBOL (name, addr, len, type, flags) and BPF_EVENT for the
// program as the snapshot, and `mmap2-synth dump` prints both readably.
#[test]
#[ignore = "needs root (BPF_PROG_LOAD) and perf record -a"]
fn snapshot_matches_perf_records_synthesis() {
    let _one = one_at_a_time();
    needs_root("loading and listing BPF programs");
    needs_perf_record();
    let (_fd, info) = load(&unique("m2s_perf"));
    let dir = scratch("bpf-vs-perf");
    let (ours, theirs) = (dir.join("ours.data"), dir.join("perf.data"));
    let me = std::process::id().to_string();
    synth_ok(["-p", &me, "--kernel", "-o", ours.to_str().unwrap()]);
    perf_record_to(&theirs, &["-a", "-e", "dummy"], &["--", "true"]);
    let from_us = assert_has_program(&ours, &info);
    let from_perf = assert_has_program(&theirs, &info);
    assert_eq!(from_us, from_perf);

    let dump = synth_ok(["dump", ours.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&dump.stdout);
    let tag: String = info.tag.iter().map(|b| format!("{b:02x}")).collect();
    let ksym = format!(
        "ksymbol time=0 addr={:#x} len={:#x} type=1 flags=0x0 name={}",
        from_us.0, from_us.1, from_us.4
    );
    assert_eq!(text.lines().filter(|l| *l == ksym).count(), 1, "{text}");
    let ev = format!("bpf_event time=0 type=1 flags=0x0 id={} tag={tag}", info.id);
    assert_eq!(text.lines().filter(|l| *l == ev).count(), 1, "{text}");
}

// Without privileges (as nobody) no BPF program is listed, and the summary
// says why instead of failing.
#[test]
#[ignore = "needs root (to drop to nobody, and to load a program)"]
fn unprivileged_snapshot_says_why_bpf_is_missing() {
    let _one = one_at_a_time();
    needs_root("setpriv to drop to nobody");
    let (_fd, _info) = load(&unique("m2s_eperm"));
    let dir = scratch("bpf-eperm");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = dir.join("n.data");
    let m = Mapper::start(&[]);
    let pid = m.pid.to_string();
    let o = synth_as_nobody([
        "-p".as_ref(),
        pid.as_ref(),
        "--kernel".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("BPF programs not written: listing BPF programs needs CAP_SYS_ADMIN"),
        "{err}"
    );
    let (ks, bs) = bpf_records(&out);
    assert!(ks.is_empty() && bs.is_empty(), "{ks:?} {bs:?}");
}

// A program with a sub-program (no BTF) gets a KSYMBOL per JITed function,
// each named by its own tag and "F" as perf names them, and exactly what
// perf record's own synthesis writes for it.
#[test]
#[ignore = "needs root (BPF_PROG_LOAD) and perf record -a"]
fn subprograms_are_named_as_perf_names_them() {
    let _one = one_at_a_time();
    needs_root("loading and listing BPF programs");
    needs_perf_record();
    let (_fd, info) = load_prog(&DROP_ALL_IN_SUBPROG, &unique("m2s_sub"), 2);
    let dir = scratch("bpf-subprog");
    let (ours, theirs) = (dir.join("ours.data"), dir.join("perf.data"));
    let me = std::process::id().to_string();
    synth_ok(["-p", &me, "--kernel", "-o", ours.to_str().unwrap()]);
    perf_record_to(&theirs, &["-a", "-e", "dummy"], &["--", "true"]);
    let of_prog = |path: &Path| {
        let (ks, bs) = bpf_records(path);
        let funcs: Vec<Ksym> = ks
            .into_iter()
            .map(|(_, k)| k)
            .filter(|k| info.jited_ksyms.contains(&k.0))
            .collect();
        let ev: Vec<BpfEv> = bs
            .into_iter()
            .map(|(_, b)| b)
            .filter(|b| b.2 == info.id)
            .collect();
        (funcs, ev)
    };
    let (funcs, ev) = of_prog(&ours);
    let want: Vec<Ksym> = (0..2)
        .map(|i| {
            let tag: String = info.prog_tags[i]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let addr = info.jited_ksyms[i];
            (
                addr,
                info.jited_func_lens[i],
                1,
                0,
                format!("bpf_prog_{tag}_F"),
            )
        })
        .collect();
    assert_eq!(funcs, want);
    assert_eq!(ev, [(1, 0, info.id, info.tag)]);
    assert_eq!(of_prog(&theirs), (funcs, ev), "perf's own synthesis");
}

// merge gives a recording of this kernel without kernel maps the running
// system's BPF programs along with its kernel maps, once: merging the
// result again adds none, and --no-kernel adds none.
#[test]
#[ignore = "needs root (BPF_PROG_LOAD, BPF_PROG_GET_NEXT_ID) and perf"]
fn merge_inserts_bpf_programs_once() {
    let _one = one_at_a_time();
    needs_root("loading and listing BPF programs");
    needs_perf();
    let (_fd, info) = load(&unique("m2s_merge"));
    let dir = scratch("bpf-merge");
    let (rec, merged, again, none) = (
        dir.join("rec.data"),
        dir.join("merged.data"),
        dir.join("again.data"),
        dir.join("none.data"),
    );
    let me = std::process::id().to_string();
    // a recording of this kernel without kernel maps or BPF programs
    synth_ok(["-p", &me, "-q", "-o", rec.to_str().unwrap()]);
    let merge = |from: &Path, to: &Path, extra: &[&str]| {
        let mut args = vec!["merge", from.to_str().unwrap(), "-o", to.to_str().unwrap()];
        args.extend_from_slice(extra);
        String::from_utf8_lossy(&synth_ok(args).stderr).into_owned()
    };
    let err = merge(&rec, &merged, &[]);
    assert!(
        err.contains("kernel/module maps inserted") && err.contains("loaded BPF programs inserted"),
        "{err}"
    );
    assert_has_program(&merged, &info);
    let err = merge(&merged, &again, &[]);
    assert!(!err.contains("BPF programs inserted"), "{err}");
    assert_has_program(&again, &info);
    merge(&rec, &none, &["--no-kernel"]);
    let (ks, bs) = bpf_records(&none);
    assert!(ks.is_empty() && bs.is_empty(), "--no-kernel: no BPF");
}

// merge --maps carries a --kernel snapshot's BPF records into a `perf
// record --synth=no` recording (which has its kernel map, and no program):
// perf script and linux-perf-data see the program's KSYMBOL and BPF_EVENT
// once, after the inserted kernel records and before the processes'; a
// second merge adds none, and --no-kernel none.
#[test]
#[ignore = "needs root (BPF_PROG_LOAD, BPF_PROG_GET_NEXT_ID) and perf record"]
fn merge_maps_carries_the_snapshots_bpf_programs() {
    let _one = one_at_a_time();
    needs_root("loading and listing BPF programs");
    needs_perf_record();
    let (fd, info) = load(&unique("m2s_maps"));
    let dir = scratch("bpf-merge-maps");
    let path = |n: &str| dir.join(n);
    let (snap, rec) = (path("snap.data"), path("rec.data"));
    let me = std::process::id().to_string();
    synth_ok(["-p", &me, "--kernel", "-q", "-o", snap.to_str().unwrap()]);
    // unloaded before the recording: only the snapshot knows it
    drop(fd);
    perf_record_to(&rec, &["--synth=no", "-e", "dummy"], &["--", "true"]);
    let (ks, _) = bpf_records(&rec);
    assert!(!ks.iter().any(|(_, k)| k.4 == symbol(&info)), "{ks:?}");
    let merge = |from: &Path, to: &str, extra: &[&str]| {
        let to = path(to);
        let mut args = vec!["merge", from.to_str().unwrap(), "-o", to.to_str().unwrap()];
        args.extend_from_slice(&["-a", "--maps", snap.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let err = String::from_utf8_lossy(&synth_ok(args).stderr).into_owned();
        (to, err)
    };
    let (merged, err) = merge(&rec, "merged.data", &[]);
    assert!(err.contains("loaded BPF programs inserted"), "{err}");
    assert_has_program(&merged, &info);
    // file order: our inserted COMM (the first of this pid) follows it
    let dump = synth_ok(["dump", merged.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&dump.stdout);
    let at = |what: &str| text.lines().position(|l| l.contains(what));
    let ksym = at(&format!("name={}", symbol(&info))).expect("ksymbol dumped");
    let comm = at(&format!("comm pid={me}")).expect("our COMM dumped");
    assert!(ksym < comm, "{text}");

    let (again, err) = merge(&merged, "again.data", &[]);
    assert!(!err.contains("BPF programs inserted"), "{err}");
    assert_has_program(&again, &info);
    let (none, _) = merge(&rec, "none.data", &["--no-kernel"]);
    let (ks, _) = bpf_records(&none);
    assert!(!ks.iter().any(|(_, k)| k.4 == symbol(&info)), "--no-kernel");
}

// A snapshot's program unloaded before a recording in which another took
// its place: merge --maps leaves out its KSYMBOL (stale there) and its
// BPF_EVENT with it (kept before, naming a program the output has no code
// of), and adds nothing for the new one, which the recording has.
#[test]
#[ignore = "needs root (BPF_PROG_LOAD, BPF_PROG_GET_NEXT_ID) and perf record"]
fn merge_maps_leaves_out_a_stale_programs_bpf_event() {
    let _one = one_at_a_time();
    needs_root("loading and listing BPF programs");
    needs_perf_record();
    let (fd, old) = load(&unique("m2s_old"));
    let dir = scratch("bpf-merge-stale");
    let path = |n: &str| dir.join(n);
    let (snap, rec, merged) = (path("snap.data"), path("rec.data"), path("merged.data"));
    let me = std::process::id().to_string();
    synth_ok(["-p", &me, "--kernel", "-q", "-o", snap.to_str().unwrap()]);
    assert_has_program(&snap, &old);
    drop(fd);
    // programs loaded until one's code overlaps where the old one's was:
    // the JIT's allocator takes the first free place (64-byte chunks), once
    // the old code is freed (after an RCU grace period), and puts the code
    // at a random offset in it; one in its chunk but beside it is unloaded
    // to try again, the others held so that the next one looks there first
    let place = old.jited_ksyms[0];
    let old_end = place + u64::from(old.jited_func_lens[0]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut held = Vec::new();
    let new = loop {
        let (fd, info) = load(&unique("m2s_new"));
        let (start, len) = (info.jited_ksyms[0], info.jited_func_lens[0]);
        if start < old_end && place < start + u64::from(len) {
            held.push(fd);
            break info;
        }
        assert!(
            std::time::Instant::now() < deadline && held.len() < 2000,
            "no program took {place:#x}..{old_end:#x} in 20 s ({} held)",
            held.len()
        );
        if start.abs_diff(place) >= 128 {
            held.push(fd);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    perf_record_to(&rec, &["-e", "dummy"], &["--", "true"]);
    let (ks, bs) = bpf_records(&rec);
    let over = |k: &Ksym| k.0 < old_end && place < k.0 + u64::from(k.1);
    let at_place: Vec<&str> = (ks.iter())
        .filter(|(_, k)| over(k))
        .map(|(_, k)| k.4.as_str())
        .collect();
    assert_eq!(at_place, [symbol(&new)], "the recording has the new one");
    assert!(!bs.iter().any(|(_, b)| b.2 == old.id), "{bs:?}");
    let args = [&rec, &merged, &snap].map(|p| p.to_str().unwrap());
    synth_ok(["merge", args[0], "-o", args[1], "-a", "--maps", args[2]]);
    let (ks, bs) = bpf_records(&merged);
    let names: Vec<&str> = (ks.iter())
        .filter(|(_, k)| over(k))
        .map(|(_, k)| k.4.as_str())
        .collect();
    assert_eq!(names, [symbol(&new)], "the stale KSYMBOL left out");
    let old_events: Vec<_> = bs.iter().filter(|(_, b)| b.2 == old.id).collect();
    assert!(old_events.is_empty(), "the stale BPF_EVENT: {old_events:?}");
    let new_events = bs.iter().filter(|(_, b)| b.2 == new.id).count();
    assert_eq!(new_events, 1, "the new one's BPF_EVENT once");
    drop(held);
}

// A program whose BTF function name is 500 bytes gets the name kallsyms
// has for it, cut to 511 bytes as the kernel cuts it (it was 526 bytes).
#[test]
#[ignore = "needs root (BPF_BTF_LOAD, BPF_PROG_LOAD, listing programs)"]
fn long_btf_names_are_cut_as_kallsyms_cuts_them() {
    let _one = one_at_a_time();
    needs_root("loading and listing BPF programs");
    let mut func = unique("m2s_long");
    while func.len() < 500 {
        func.push('x');
    }
    let fd = mmap2_synth::sys::bpf_load_socket_filter_with_btf(&DROP_ALL, &func)
        .expect("BPF_PROG_LOAD with BTF function info");
    let info = bpf_prog_info(fd.as_fd()).unwrap();
    let addr = info.jited_ksyms[0];
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let theirs: Vec<&str> = kallsyms
        .lines()
        .filter(|l| l.contains(&func[..100]))
        .filter(|l| u64::from_str_radix(l.split(' ').next().unwrap(), 16) == Ok(addr))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert_eq!(theirs.len(), 1, "{func} at {addr:#x} in /proc/kallsyms");
    assert_eq!(theirs[0].len(), 511, "{}", theirs[0]);
    let dir = scratch("bpf-long");
    let out = dir.join("l.data");
    let me = std::process::id().to_string();
    synth_ok(["-p", &me, "--kernel", "-o", out.to_str().unwrap()]);
    let (ks, _) = bpf_records(&out);
    let ours: Vec<_> = ks.iter().filter(|(_, k)| k.0 == addr).collect();
    assert_eq!(ours.len(), 1, "one KSYMBOL at {addr:#x}");
    assert_eq!(ours[0].1 .4, theirs[0]);
}
