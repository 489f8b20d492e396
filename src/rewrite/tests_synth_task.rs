//! Unit tests of merges into recordings whose synthesized records hold
//! FORKs (perf's task synthesis: `perf record -a`, and `--synth=task`
//! with no maps), and into recordings with an exec COMM or a rename, over
//! files built in memory.

use super::merge::{merge, MergeOptions};
use super::plan::Which;
use super::tests::{process, snapshot_file};
use crate::bytes::{Endian, PutExt, Rd};
use crate::model::{Process, Vma};
use crate::perf::consts::{attr_flags, sample_type as st, types};
use crate::perf::events::parse_comm;
use crate::perf::record::{encode_empty, RecordHeader};
use crate::perf::writer::{tests::metadata, write_file};
use crate::perf::{Attr, FileHeader};
use crate::proc;
use crate::snapshot::{encode_process, Encoding};

const E: Endian = Endian::Little;

/// One attr: IP|TID|TIME|ID, sample_id_all (a 24-byte trailer).
fn attr() -> Attr {
    Attr {
        type_: 1,
        sample_type: st::IP | st::TID | st::TIME | st::ID,
        flags: attr_flags::SAMPLE_ID_ALL | attr_flags::MMAP2,
        ..Default::default()
    }
}

/// What perf's task synthesis writes for `procs` (FORK, COMM and their
/// maps, at time 0), then FINISHED_INIT.
fn synthesized(procs: &[Process]) -> Vec<u8> {
    let enc = Encoding {
        endian: E,
        layout: attr().layout(),
        id: 0,
        forks: true,
        fill_tid: false,
    };
    let mut out = Vec::new();
    for p in procs {
        encode_process(p, &enc, &mut out).unwrap();
    }
    encode_empty(&mut out, E, types::FINISHED_INIT);
    out
}

/// The kernel's FORK of a new process `pid` by `ppid` at `time`, then a
/// user-mode sample of each of `sampled` (times from `time` on), then a
/// FINISHED_ROUND.
fn during(pid: u32, ppid: u32, time: u64, sampled: &[u32]) -> Vec<u8> {
    let mut d = Vec::new();
    d.put_u32(E, types::FORK);
    d.put_u16(E, 0);
    d.put_u16(E, 8 + 24 + 24);
    for v in [pid, ppid, pid, ppid] {
        d.put_u32(E, v);
    }
    d.put_u64(E, time);
    d.put_u32(E, pid);
    d.put_u32(E, pid);
    d.put_u64(E, time);
    d.put_u64(E, 7);
    for (i, &p) in sampled.iter().enumerate() {
        d.put_u32(E, types::SAMPLE);
        d.put_u16(E, crate::perf::consts::misc::USER);
        d.put_u16(E, 8 + 32);
        d.put_u64(E, 0x7f00_0000_1000);
        d.put_u32(E, p);
        d.put_u32(E, p);
        d.put_u64(E, time + 1 + i as u64);
        d.put_u64(E, 7);
    }
    encode_empty(&mut d, E, types::FINISHED_ROUND);
    d
}

/// Merges the recording of `data` with a snapshot of `snap`'s processes
/// (by default: those it needs); returns the report and the output's data
/// section.
fn merged(data: &[u8], snap: Vec<Process>) -> (super::MergeReport, Vec<u8>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut rec = Vec::new();
    write_file(&mut rec, &metadata(E, attr()), data).unwrap();
    std::fs::write(dir.join("rec.data"), rec).unwrap();
    snapshot_file(&dir.join("snap.data"), snap, E);
    let opts = MergeOptions {
        which: Which::Needed,
        maps: Some(dir.join("snap.data")),
        snapshot: proc::Options::default(),
        in_place: false,
        kernel: false,
        salvage: false,
    };
    let out = dir.join("out.data");
    let report = merge(&dir.join("rec.data"), &out, &opts).unwrap();
    let o = std::fs::read(&out).unwrap();
    let h = FileHeader::parse(&o[..104], o.len() as u64).unwrap();
    (
        report,
        o[h.data.offset as usize..h.data.end() as usize].to_vec(),
    )
}

/// `process(pid, comm)` without maps.
fn mapless(pid: u32, comm: &[u8]) -> Process {
    let mut p = process(pid, comm);
    p.vmas.clear();
    p
}

/// The pid of the COMM record at the start of `d`.
fn comm_pid(d: &[u8]) -> u32 {
    let h = RecordHeader::parse(d, E).unwrap();
    assert_eq!(h.type_, types::COMM);
    parse_comm(&d[8..h.size as usize], E).unwrap().0
}

// perf's FORKs of the running processes (time 0, no maps: --synth=task)
// are no births: the process gets its maps, inserted after them (a FORK
// drops the maps perf holds for its pid), also when they outgrow the room
// reserved for them; a process forked during the recording (the kernel's
// FORK) still gets none.
#[test]
fn synthesized_forks_are_no_births() {
    for n in [1u64, 3000] {
        let mut old = process(42, b"old");
        let vma = old.vmas[0].clone();
        old.vmas = (0..n)
            .map(|i| Vma {
                start: vma.start + i * 0x10000,
                end: vma.end + i * 0x10000,
                ..vma.clone()
            })
            .collect();
        let head = synthesized(&[mapless(42, b"old")]);
        let rest = during(50, 42, 1_000, &[42, 50]);
        let data = [&head[..], &rest[..]].concat();
        let (report, out) = merged(&data, vec![old, process(50, b"born")]);
        assert_eq!((report.processes, report.inserted_records), (1, 1 + n));
        assert_eq!(&out[..head.len()], &head[..], "perf's records first");
        assert_eq!(comm_pid(&out[head.len()..]), 42);
        let inserted = out.len() - data.len();
        assert!(
            n == 1 || inserted as u64 > super::write::RESERVE,
            "{inserted}"
        );
        assert_eq!(&out[head.len() + inserted..], &rest[..]);
    }
}

// With maps synthesized too (perf record -a), a process perf forked
// without maps (a kernel thread) is given whole, as before; a process
// the recording names otherwise gets its maps after perf's records.
#[test]
fn synthesized_forks_with_maps_cover_their_processes() {
    let head = synthesized(&[mapless(42, b"kthread"), process(60, b"mapped")]);
    let rest = during(50, 60, 1_000, &[42, 70]);
    let data = [&head[..], &rest[..]].concat();
    let snap = [42, 50, 60, 70].map(|p| process(p, b"p")).to_vec();
    let (report, out) = merged(&data, snap);
    assert_eq!(report.processes, 1, "{report:?}");
    assert_eq!(comm_pid(&out[head.len()..]), 70);
    // perf's FINISHED_INIT right before them
    let init = &out[head.len() - 8..head.len()];
    assert_eq!(Rd(E).u32(init, 0), Some(types::FINISHED_INIT));
}

/// The kernel's exec COMM of `pid` at `time`, then a user-mode sample of it
/// taken at `sampled` (written after the COMM, as another CPU's buffer
/// may be), then a FINISHED_ROUND.
fn exec_then_sample(pid: u32, time: u64, sampled: u64) -> Vec<u8> {
    let mut d = Vec::new();
    d.put_u32(E, types::COMM);
    d.put_u16(E, crate::perf::consts::misc::COMM_EXEC);
    d.put_u16(E, 8 + 8 + 16 + 24);
    d.put_u32(E, pid);
    d.put_u32(E, pid);
    d.extend_from_slice(b"new\0\0\0\0\0\0\0\0\0\0\0\0\0");
    for v in [pid, pid] {
        d.put_u32(E, v);
    }
    d.put_u64(E, time);
    d.put_u64(E, 7);
    d.put_u32(E, types::SAMPLE);
    d.put_u16(E, crate::perf::consts::misc::USER);
    d.put_u16(E, 8 + 32);
    d.put_u64(E, 0x7f00_0000_1000);
    d.put_u32(E, pid);
    d.put_u32(E, pid);
    d.put_u64(E, sampled);
    d.put_u64(E, 7);
    encode_empty(&mut d, E, types::FINISHED_ROUND);
    d
}

// A user-mode sample written after a process's exec COMM but taken before
// it (perf orders by time) needs the first image's maps: the process gets
// them (it was taken as given whole by the exec); one taken after it
// does not.
#[test]
fn a_sample_taken_before_an_exec_but_written_after_it_needs_the_first_image() {
    for (sampled, inserted) in [(999, 1), (1_001, 0)] {
        let data = exec_then_sample(42, 1_000, sampled);
        let (report, _) = merged(&data, vec![process(42, b"old")]);
        assert_eq!(
            report.processes, inserted,
            "sample at {sampled}: {report:?}"
        );
    }
}

/// A fake /proc holding process 100 (started at boot: never stale) with
/// threads 100 (`lead`) and 101 (`work`), mapping `/bin/x` executable.
fn fake_proc() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("100");
    for tid in [100, 101] {
        std::fs::create_dir_all(d.join(format!("task/{tid}"))).unwrap();
    }
    std::fs::write(d.join("task/101/comm"), "work\n").unwrap();
    let stat = "100 (lead) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 2 0 0 0 0\n";
    std::fs::write(d.join("stat"), stat).unwrap();
    let maps = "7f0000000000-7f0000010000 r-xp 00000000 08:01 7 /bin/x\n";
    std::fs::write(d.join("maps"), maps).unwrap();
    dir
}

/// A user-mode sample of thread `tid` of process 100 at time 1000, then
/// a COMM of `tid` at `time` with `misc` (a rename, an exec, or perf's own
/// at time 0).
fn sample_then_comm(tid: u32, misc: u16, time: u64) -> Vec<u8> {
    let mut d = Vec::new();
    d.put_u32(E, types::SAMPLE);
    d.put_u16(E, crate::perf::consts::misc::USER);
    d.put_u16(E, 8 + 32);
    d.put_u64(E, 0x7f00_0000_1000);
    d.put_u32(E, 100);
    d.put_u32(E, tid);
    d.put_u64(E, 1_000);
    d.put_u64(E, 7);
    d.put_u32(E, types::COMM);
    d.put_u16(E, misc);
    d.put_u16(E, 8 + 8 + 16 + 24);
    d.put_u32(E, 100);
    d.put_u32(E, tid);
    d.extend_from_slice(b"new\0\0\0\0\0\0\0\0\0\0\0\0\0");
    for v in [100, tid] {
        d.put_u32(E, v);
    }
    d.put_u64(E, time);
    d.put_u64(E, 7);
    d
}

/// The (tid, record type) of each record a live merge of `data`, reading
/// the fake /proc `root`, inserts (file mode: before `data`), and its report.
fn live_inserted(data: &[u8], root: &std::path::Path) -> (super::MergeReport, Vec<(u32, u32)>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut rec = Vec::new();
    write_file(&mut rec, &metadata(E, attr()), data).unwrap();
    let (rec_path, out) = (tmp.path().join("rec.data"), tmp.path().join("out.data"));
    std::fs::write(&rec_path, rec).unwrap();
    let opts = MergeOptions {
        which: Which::Needed,
        maps: None,
        snapshot: proc::Options {
            source: proc::SourceChoice::Text,
            tasks: proc::TaskSource::Proc,
            build_ids: false,
            proc_root: root.to_path_buf(),
            ..proc::Options::default()
        },
        in_place: false,
        kernel: false,
        salvage: false,
    };
    let report = merge(&rec_path, &out, &opts).unwrap();
    let o = std::fs::read(&out).unwrap();
    let h = FileHeader::parse(&o[..104], o.len() as u64).unwrap();
    let d = &o[h.data.offset as usize..h.data.end() as usize];
    assert_eq!(&d[d.len() - data.len()..], data, "the recording follows");
    let mut records = Vec::new();
    let mut at = 0;
    while at < d.len() - data.len() {
        let h = RecordHeader::parse(&d[at..], E).unwrap();
        // COMM: pid, tid; MMAP2: pid, tid
        records.push((Rd(E).u32(&d[at + 8..], 4).unwrap(), h.type_));
        at += h.size as usize;
    }
    (report, records)
}

// A live merge writes no COMM of its own for a thread the recording
// renamed (the kernel's non-exec COMM: the worker's, or the leader's, whose
// process keeps its maps); one with only an exec COMM, or perf's own
// non-exec COMM at time 0 (`perf-exec`), still gets ours.
#[test]
fn a_live_merge_leaves_out_the_comm_of_a_renamed_thread() {
    use crate::perf::consts::misc::COMM_EXEC;
    let root = fake_proc();
    let (comm, mmap2) = (types::COMM, types::MMAP2);
    let all = vec![(100, comm), (100, mmap2), (101, comm)];
    let cases = [
        (101, 0, 1_001, vec![(100, comm), (100, mmap2)], 1),
        (100, 0, 1_001, vec![(100, mmap2), (101, comm)], 1),
        (100, COMM_EXEC, 1_001, all.clone(), 0),
        (101, 0, 0, all, 0),
    ];
    for (tid, misc, time, want, left_out) in cases {
        let data = sample_then_comm(tid, misc, time);
        let (report, got) = live_inserted(&data, root.path());
        assert_eq!(got, want, "COMM of {tid}, misc {misc:#x}: {report:?}");
        assert_eq!(report.renamed_comms, left_out, "{tid} {misc:#x}");
    }
}
