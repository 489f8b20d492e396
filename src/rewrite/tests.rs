//! Unit tests of the rewrite engine over files built in memory.

use super::merge::{merge, MergeOptions};
use super::plan::Which;
use crate::bytes::{Endian, PutExt, Rd};
use crate::model::{BuildId, Perms, Process, Thread, Vma};
use crate::perf::compress::Decompressor;
use crate::perf::consts::{attr_flags, feature, misc, sample_type as st, types};
use crate::perf::events::{parse_comm, parse_map};
use crate::perf::record::{encode_empty, RecordHeader};
use crate::perf::writer::{tests::metadata, write_file};
use crate::perf::{Attr, FeatureBits, FileHeader};
use crate::proc::{self, HostFacts, Snapshot};
use crate::snapshot::{write_snapshot, Out, WriteOptions};

/// A recording with one attr (IP|TID|TIME|ID, sample_id_all) and two
/// samples of pid 42, then a FINISHED_ROUND.
fn recording(e: Endian) -> (Vec<u8>, Vec<u8>) {
    let attr = Attr {
        type_: 1,
        sample_type: st::IP | st::TID | st::TIME | st::ID,
        flags: attr_flags::SAMPLE_ID_ALL | attr_flags::MMAP2,
        ..Default::default()
    };
    let mut data = Vec::new();
    for (ip, time) in [(0x7f00_0000_1000u64, 1_000u64), (0x7f00_0000_2000, 2_000)] {
        data.put_u32(e, types::SAMPLE);
        data.put_u16(e, misc::USER);
        data.put_u16(e, 8 + 32);
        data.put_u64(e, ip);
        data.put_u32(e, 42);
        data.put_u32(e, 43);
        data.put_u64(e, time);
        data.put_u64(e, 7);
    }
    encode_empty(&mut data, e, types::FINISHED_ROUND);
    let mut f = Vec::new();
    write_file(&mut f, &metadata(e, attr), &data).unwrap();
    (f, data)
}

/// Writes a file-mode snapshot of `processes` (byte order `e`, FORKs
/// included) to `path`, as `mmap2-synth --all -o` would.
pub(super) fn snapshot_file(path: &std::path::Path, processes: Vec<Process>, e: Endian) {
    let snap = Snapshot {
        processes,
        ..Snapshot::default()
    };
    let wopts = WriteOptions {
        endian: e,
        forks: true,
        cmdline: vec![],
        host: HostFacts::read(),
        kernel: None,
        watch: false,
        watch_pages: None,
    };
    let mut sb = std::io::Cursor::new(Vec::new());
    write_snapshot(Out::File(&mut sb), &snap, &wopts).unwrap();
    std::fs::write(path, sb.into_inner()).unwrap();
}

pub(super) fn process(pid: u32, name: &[u8]) -> Process {
    Process {
        pid,
        ppid: 1,
        kernel_thread: false,
        start_time: 0,
        threads: vec![Thread {
            tid: pid,
            comm: name.to_vec(),
        }],
        vmas: vec![Vma {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0001_0000,
            offset: 0,
            perms: Perms::READ | Perms::EXEC,
            dev_major: 8,
            dev_minor: 1,
            inode: 99,
            name: b"/lib/libx.so"[..].into(),
            build_id: BuildId::new(&[0xab; 20]),
        }],
        source: None,
        read_times: Default::default(),
    }
}

// A merge from a snapshot file inserts COMM + MMAP2 of the needed pid only,
// at the start of the data section, in the recording's byte order; the
// original records follow byte for byte; BUILD_ID gains the id; HOSTNAME
// is kept.
#[test]
fn merge_from_snapshot_both_byte_orders() {
    for e in [Endian::Little, Endian::Big] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (rec, data) = recording(e);
        let rec_path = dir.join("rec.data");
        std::fs::write(&rec_path, &rec).unwrap();
        let snap_path = dir.join("snap.data");
        let procs = vec![process(42, b"target"), process(50, b"other")];
        snapshot_file(&snap_path, procs, Endian::Little);
        let out = dir.join("out.data");
        let opts = MergeOptions {
            which: Which::Needed,
            maps: Some(snap_path),
            snapshot: proc::Options::default(),
            in_place: false,
            kernel: false,
            salvage: false,
        };
        let report = merge(&rec_path, &out, &opts).unwrap();
        assert_eq!(report.processes, 1);
        assert_eq!(report.inserted_records, 2);
        assert_eq!(report.new_build_ids, 1);
        assert_eq!(report.input_records, 3);

        let o = std::fs::read(&out).unwrap();
        let h = FileHeader::parse(&o[..104], o.len() as u64).unwrap();
        assert_eq!(h.endian, e);
        let d = &o[h.data.offset as usize..h.data.end() as usize];
        let h1 = RecordHeader::parse(d, e).unwrap();
        assert_eq!(h1.type_, types::COMM);
        let (pid, tid, name) = parse_comm(&d[8..h1.size as usize], e).unwrap();
        assert_eq!((pid, tid, name.as_slice()), (42, 42, &b"target"[..]));
        // trailer: TID, TIME, ID all zero (sample_id_all, first attr's layout)
        assert_eq!(&d[h1.size as usize - 24..h1.size as usize], &[0u8; 24]);
        let rest = &d[h1.size as usize..];
        let h2 = RecordHeader::parse(rest, e).unwrap();
        assert_eq!(h2.type_, types::MMAP2);
        let m = parse_map(&h2, &rest[8..h2.size as usize], e).unwrap();
        assert_eq!(m.key.filename, b"/lib/libx.so");
        assert_eq!(m.build_id, BuildId::new(&[0xab; 20]));
        assert_eq!(
            &rest[h2.size as usize..],
            &data[..],
            "original records untouched"
        );
        assert_eq!(
            h.features,
            FeatureBits::from_bits([feature::BUILD_ID, feature::HOSTNAME])
        );
    }
}

// Corrupted recordings (single-byte and truncation damage all over the
// file, both byte orders) give errors or valid output, never a panic.
#[test]
fn corrupted_inputs_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = MergeOptions {
        which: Which::Pids(vec![]),
        maps: None,
        snapshot: proc::Options::default(),
        in_place: false,
        kernel: false,
        salvage: false,
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut ok, mut err) = (0, 0);
    for e in [Endian::Little, Endian::Big] {
        let (rec, _) = recording(e);
        for i in 0..400 {
            let mut b = rec.clone();
            let pos = (next() % b.len() as u64) as usize;
            if i % 10 == 0 {
                b.truncate(pos);
            } else {
                b[pos] = next() as u8;
            }
            let input = dir.join("in.data");
            std::fs::write(&input, &b).unwrap();
            match merge(&input, &dir.join("out.data"), &opts) {
                Ok(_) => ok += 1,
                Err(_) => err += 1,
            }
        }
    }
    assert!(ok > 0 && err > 0, "ok={ok} err={err}");
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left behind");
}

// Records split across compressed payloads are reassembled.
#[test]
fn decompressor_handles_records_across_payloads() {
    let e = Endian::Little;
    let mut raw = Vec::new();
    for i in 0..3u32 {
        crate::perf::events::encode_comm(
            &mut raw,
            e,
            i,
            i,
            b"abc",
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
    }
    let (a, b) = raw.split_at(20);
    let ca = zstd::bulk::compress(a, 1).unwrap();
    let cb = zstd::bulk::compress(b, 1).unwrap();
    let mut d = Decompressor::new().unwrap();
    let mut seen = Vec::new();
    for payload in [&ca, &cb] {
        d.feed(0, payload, e, u64::MAX, |h, body| {
            seen.push((h.type_, parse_comm(body, e).unwrap().0));
            Ok(())
        })
        .unwrap();
    }
    assert_eq!(seen, vec![(3, 0), (3, 1), (3, 2)]);
    assert!(d
        .feed(0, b"not zstd at all", e, u64::MAX, |_, _| Ok(()))
        .is_err());
}

// An edit that grows a record moves the data section by a zero gap that
// keeps the records after it page-congruent with the input (so they are
// copied at `cp`'s speed); the feature sections follow unchanged and the
// output parses with the new record in place.
#[test]
fn write_edited_keeps_the_tail_page_congruent() {
    use super::meta::Unreadable;
    use super::write::{write_edited, Edit, Sections};
    use crate::perf::{Input, Layout};
    let e = Endian::Little;
    let tmp = tempfile::tempdir().unwrap();
    let (rec, data) = recording(e);
    let path = tmp.path().join("rec.data");
    std::fs::write(&path, &rec).unwrap();
    let input = Input::open(&path).unwrap();
    let Layout::File { header, features } = &input.layout else {
        panic!("file mode")
    };
    let mut grown = data[..40].to_vec();
    grown[6..8].copy_from_slice(&72u16.to_le_bytes());
    grown.extend_from_slice(&[0; 32]);
    let edits = vec![Edit {
        at: header.data.offset,
        old: 40,
        new: grown.clone(),
    }];
    let out_path = tmp.path().join("out.data");
    let mut out = std::fs::File::create(&out_path).unwrap();
    let none = Unreadable::default();
    let sections = Sections::of(features, &none);
    write_edited(&input, header, &sections, &edits, &mut out).unwrap();
    drop(out);
    let out = Input::open(&out_path).unwrap();
    let Layout::File { header: h2, .. } = &out.layout else {
        panic!("file mode")
    };
    assert_eq!(h2.data.size, header.data.size + 32);
    let bytes = std::fs::read(&out_path).unwrap();
    let d = h2.data.offset as usize;
    assert_eq!(&bytes[d..d + 72], &grown[..]);
    assert_eq!(&bytes[d + 72..h2.data.end() as usize], &data[40..]);
    assert_eq!(
        (h2.data.offset + 72) % 4096,
        (header.data.offset + 40) % 4096
    );
    assert_eq!(
        out.feature(feature::HOSTNAME).unwrap().unwrap().1,
        input.feature(feature::HOSTNAME).unwrap().unwrap().1
    );
}

/// A recording of one sample and one MMAP (v1) of a file the BUILD_ID
/// table knows, the map `before` or after the sample.
fn v1_recording(e: Endian, before: bool) -> Vec<u8> {
    use crate::perf::features::BuildIdEntry;
    let attr = Attr {
        type_: 1,
        sample_type: st::IP | st::TID | st::TIME | st::ID,
        flags: attr_flags::SAMPLE_ID_ALL,
        ..Default::default()
    };
    let mut sample = Vec::new();
    RecordHeader {
        type_: types::SAMPLE,
        misc: misc::USER,
        size: 40,
    }
    .put(&mut sample, e);
    for v in [0x7f00_0000_1000u64, 42 | 42 << 32, 5, 7] {
        sample.put_u64(e, v);
    }
    let mut map = Vec::new();
    RecordHeader {
        type_: types::MMAP,
        misc: misc::USER,
        size: 8 + 32 + 24 + 24,
    }
    .put(&mut map, e);
    for v in [42 | 42 << 32, 0x7f00_0000_0000, 0x10000, 0] {
        map.put_u64(e, v);
    }
    let mut name = b"/nonexistent/libq.so".to_vec();
    name.resize(24, 0);
    map.extend_from_slice(&name);
    for v in [42 | 42 << 32, 1, 7] {
        map.put_u64(e, v);
    }
    let mut data = Vec::new();
    let (first, second) = if before {
        (&map, &sample)
    } else {
        (&sample, &map)
    };
    data.extend_from_slice(first);
    data.extend_from_slice(second);
    encode_empty(&mut data, e, types::FINISHED_ROUND);
    let mut meta = metadata(e, attr);
    meta.build_ids = vec![BuildIdEntry {
        cpumode: misc::USER,
        pid: -1,
        build_id: BuildId::new(&[0x5a; 20]).unwrap(),
        filename: b"/nonexistent/libq.so".to_vec(),
    }];
    let mut f = Vec::new();
    write_file(&mut f, &meta, &data).unwrap();
    f
}

// An MMAP (v1) the table has an id for becomes a build-id MMAP2 whether it
// sits in the synthesized prefix (the rest is copied while the walk runs)
// or after a sample (then the copy is redone in one ordered pass); the
// sample and the trailer are kept, in both byte orders.
#[test]
fn v1_maps_convert_before_and_after_the_first_sample() {
    use super::convert::{convert, ConvertOptions};
    use crate::perf::record::split_records;
    use crate::perf::{Input, Layout};
    for e in [Endian::Little, Endian::Big] {
        for before in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            let (inp, out) = (tmp.path().join("in.data"), tmp.path().join("out.data"));
            std::fs::write(&inp, v1_recording(e, before)).unwrap();
            let opts = ConvertOptions {
                buildid_mmap2: true,
                ..Default::default()
            };
            let r = convert(&inp, &out, &opts).unwrap();
            assert_eq!((r.v1_converted, r.from_table), (1, 1), "{r:?}");
            let input = Input::open(&out).unwrap();
            let Layout::File { header, .. } = &input.layout else {
                panic!("file mode")
            };
            let data = input.section(header.data).unwrap();
            let recs: Vec<_> = split_records(&data, e).collect();
            assert_eq!(recs.len(), 3);
            let (h, body) = recs[usize::from(!before)];
            let m = parse_map(&h, body, e).unwrap();
            assert_eq!(m.build_id, BuildId::new(&[0x5a; 20]));
            assert_eq!(m.key.filename, b"/nonexistent/libq.so");
            assert_eq!(Rd(e).u64(body, body.len() - 16), Some(1), "trailer time");
            let (hs, _) = recs[usize::from(before)];
            assert_eq!(hs.type_, types::SAMPLE);
        }
    }
}

/// Runs `f` on its own thread and returns what it returned or its panic,
/// failing the test if it has not ended within 30 s (a hang).
fn without_hanging<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> std::thread::Result<R> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    rx.recv_timeout(std::time::Duration::from_secs(30))
        .expect("hung")
}

/// Merge options of these tests: the maps of the pids the recording needs,
/// live, no kernel map.
fn merge_opts(in_place: bool) -> MergeOptions {
    MergeOptions {
        which: Which::Needed,
        maps: None,
        snapshot: proc::Options::default(),
        in_place,
        kernel: false,
        salvage: false,
    }
}

/// `convert --buildid-mmap2`, in place or not.
fn convert_opts(in_place: bool) -> super::convert::ConvertOptions {
    super::convert::ConvertOptions {
        buildid_mmap2: true,
        in_place,
        ..Default::default()
    }
}

// A walk that panics ends convert (before the synthesized prefix is known:
// the copy waiting for it is released) and merge (beside its data copy)
// with that panic: no hang, and no output left behind.
#[test]
fn walk_panic_is_not_a_hang() {
    use super::convert::convert;
    use crate::perf::walk::tests::PANICKING_WALK;
    for tool in ["convert", "merge"] {
        let tmp = tempfile::tempdir().unwrap();
        let (inp, out) = (tmp.path().join(PANICKING_WALK), tmp.path().join("out.data"));
        let run: Box<dyn FnOnce() + Send> = if tool == "convert" {
            std::fs::write(&inp, v1_recording(Endian::Little, true)).unwrap();
            Box::new(move || drop(convert(&inp, &out, &convert_opts(false))))
        } else {
            std::fs::write(&inp, recording(Endian::Little).0).unwrap();
            Box::new(move || drop(merge(&inp, &out, &merge_opts(false))))
        };
        assert!(without_hanging(run).is_err(), "{tool}: no panic");
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{tool}: only the input remains: {left:?}");
    }
}

// An input rewritten in place must be a regular file: merge and convert
// (as `record` calls them, past the CLI's output checks) refuse a FIFO
// without reading it, as bad input (`record -o /dev/stdout` with stdout a
// pipe once waited on its own pipe forever).
#[test]
fn in_place_refuses_a_fifo_unread() {
    use super::convert::convert;
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("in.fifo");
    crate::sys::mkfifo(&fifo).unwrap();
    let f = fifo.clone();
    let (merged, converted) = without_hanging(move || {
        let merged = merge(&f, &f, &merge_opts(true)).map(|_| ());
        let converted = convert(&f, &f, &convert_opts(true)).map(|_| ());
        (
            merged.map_err(|e| e.to_string()),
            converted.map_err(|e| e.to_string()),
        )
    })
    .expect("no panic");
    for r in [merged, converted] {
        let e = r.unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}

// --in-place refuses to write when the input is no longer in the directory
// the output's path leads to now (a directory on it swapped for a link
// after the input was opened): nothing is written in either directory.
#[test]
fn in_place_output_must_sit_beside_the_input_opened() {
    use crate::perf::Input;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(a.join("perf.data"), recording(Endian::Little).0).unwrap();
    std::fs::write(b.join("perf.data"), b"root's").unwrap();
    let link = tmp.path().join("proj");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let path = link.join("perf.data");
    let input = Input::open_regular(&path).unwrap();
    assert!(super::write::create_output(&input, &path, true).is_ok());
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&b, &link).unwrap();
    let e = super::write::create_output(&input, &path, true).unwrap_err();
    assert!(e.to_string().contains("no longer at that path"), "{e}");
    assert_eq!(std::fs::read(b.join("perf.data")).unwrap(), b"root's");
    assert_eq!(std::fs::read_dir(&b).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), 1);
}

// An --in-place lock held by someone else is waited for a bounded time,
// then reported (the file's owner can hold a lock for ever).
#[test]
fn lock_wait_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    let holder = std::fs::File::open(&path).unwrap();
    holder.lock().unwrap();
    let other = std::fs::File::open(&path).unwrap();
    let soon = || std::time::Instant::now() + std::time::Duration::from_millis(100);
    let e = super::open::lock_by(&other, soon()).unwrap_err();
    assert!(e.to_string().contains("held by another process"), "{e}");
    drop(holder);
    super::open::lock_by(&other, soon()).unwrap();
}

/// A sample of pid 42 at `time` with `misc`'s cpumode (IP|TID|TIME|ID|
/// CALLCHAIN, as [`recording_with_chains`]' attr lays it out), at kernel
/// ip 0xffff_ffff_8100_0000 with callchain `chain`.
fn chain_sample(d: &mut Vec<u8>, misc: u16, time: u64, chain: &[u64]) {
    let e = Endian::Little;
    d.put_u32(e, types::SAMPLE);
    d.put_u16(e, misc);
    d.put_u16(e, 8 + 40 + 8 * chain.len() as u16);
    d.put_u64(e, 0xffff_ffff_8100_0000);
    d.put_u32(e, 42);
    d.put_u32(e, 42);
    d.put_u64(e, time);
    d.put_u64(e, 7);
    d.put_u64(e, chain.len() as u64);
    chain.iter().for_each(|&a| d.put_u64(e, a));
}

/// The kernel's exec COMM of pid 42 at `time` (a TID|TIME|ID trailer).
fn exec_comm(d: &mut Vec<u8>, time: u64) {
    let e = Endian::Little;
    d.put_u32(e, types::COMM);
    d.put_u16(e, misc::COMM_EXEC);
    d.put_u16(e, 8 + 8 + 16 + 24);
    d.put_u32(e, 42);
    d.put_u32(e, 42);
    d.extend_from_slice(b"new\0\0\0\0\0\0\0\0\0\0\0\0\0");
    d.put_u32(e, 42);
    d.put_u32(e, 42);
    d.put_u64(e, time);
    d.put_u64(e, 7);
}

/// Merges `data` (records of an IP|TID|TIME|ID|CALLCHAIN attr, little
/// endian) with a snapshot of `process(42, "old")` (maps 0x7f00_0000_0000
/// to 0x7f00_0001_0000); its report.
fn recording_with_chains(data: &[u8]) -> super::MergeReport {
    let e = Endian::Little;
    let attr = Attr {
        type_: 1,
        sample_type: st::IP | st::TID | st::TIME | st::ID | st::CALLCHAIN,
        flags: attr_flags::SAMPLE_ID_ALL | attr_flags::MMAP2,
        ..Default::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut rec = Vec::new();
    write_file(&mut rec, &metadata(e, attr), data).unwrap();
    std::fs::write(dir.join("rec.data"), rec).unwrap();
    snapshot_file(&dir.join("snap.data"), vec![process(42, b"old")], e);
    let opts = MergeOptions {
        maps: Some(dir.join("snap.data")),
        ..merge_opts(false)
    };
    merge(&dir.join("rec.data"), &dir.join("out.data"), &opts).unwrap()
}

/// A callchain of a sample taken in the kernel: two kernel frames, then
/// the user frames `user` (none: no USER marker).
fn kernel_chain(user: &[u64]) -> Vec<u64> {
    use crate::perf::consts::context;
    let mut chain = vec![
        context::KERNEL,
        0xffff_ffff_8100_0000,
        0xffff_ffff_8100_0100,
    ];
    if !user.is_empty() {
        chain.push(context::USER);
        chain.extend_from_slice(user);
    }
    chain
}

// A sample taken in the kernel (a syscall, a `:k` event) whose callchain
// has user frames ran the first image before its exec COMM: the process
// is not covered by the exec and gets its maps, whether the sample is
// written before the COMM or after it though taken before; one without
// user frames (kernel frames only), or taken after the exec, leaves it
// covered; so does a guest-mode one.
#[test]
fn a_kernel_mode_sample_with_user_frames_before_an_exec_keeps_its_process_uncovered() {
    let user = kernel_chain(&[0x7f00_0000_1000, 0x7f00_0000_2000]);
    let cases = [
        (misc::KERNEL, user.clone(), 900, true, 1),
        (misc::HYPERVISOR, user.clone(), 900, true, 1),
        (misc::KERNEL, user.clone(), 999, false, 1),
        (misc::KERNEL, user.clone(), 1_001, false, 0),
        (misc::KERNEL, kernel_chain(&[]), 900, true, 0),
        (misc::GUEST_KERNEL, user, 900, true, 0),
    ];
    for (mode, chain, time, written_first, inserted) in cases {
        let mut d = Vec::new();
        if written_first {
            chain_sample(&mut d, mode, time, &chain);
        }
        exec_comm(&mut d, 1_000);
        if !written_first {
            chain_sample(&mut d, mode, time, &chain);
        }
        encode_empty(&mut d, Endian::Little, types::FINISHED_ROUND);
        let report = recording_with_chains(&d);
        assert_eq!(
            report.processes, inserted,
            "mode {mode}, {chain:x?} at {time}: {report:?}"
        );
    }
}

// The addresses kept to tell whether a process is the recorded one come
// from a kernel-mode sample's first user frame (not its kernel ip): the
// snapshot's process, whose maps hold them, is inserted; with user frames
// outside its maps, it is not the recorded process and left out. (Before,
// kernel-mode samples kept nothing and either was inserted unjudged.)
#[test]
fn the_kept_addresses_of_kernel_mode_samples_are_their_user_frames() {
    for (frame, inserted) in [(0x7f00_0000_1000u64, 1), (0x5555_0000_1000, 0)] {
        let mut d = Vec::new();
        for i in 0..40 {
            let chain = kernel_chain(&[frame + 16 * i, 0x7f00_0000_8000]);
            chain_sample(&mut d, misc::KERNEL, 1_000 + i, &chain);
        }
        encode_empty(&mut d, Endian::Little, types::FINISHED_ROUND);
        let report = recording_with_chains(&d);
        assert_eq!(report.processes, inserted, "{frame:#x}: {report:?}");
        assert_eq!(report.not_recorded.len(), 1 - inserted, "{frame:#x}");
        if let Some(n) = report.not_recorded.first() {
            assert_eq!((n.pid, n.coverage.covered, n.coverage.sampled), (42, 0, 16));
        }
    }
}
