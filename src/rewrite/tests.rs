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
pub(super) fn recording(e: Endian) -> (Vec<u8>, Vec<u8>) {
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
    use super::edited::{write_edited, Edit};
    use super::meta::Unreadable;
    use super::write::Sections;
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
pub(super) fn v1_recording(e: Endian, before: bool) -> Vec<u8> {
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

/// Merge options of these tests: the maps of the pids the recording needs,
/// live, no kernel map.
pub(super) fn merge_opts(in_place: bool) -> MergeOptions {
    MergeOptions {
        which: Which::Needed,
        maps: None,
        snapshot: proc::Options::default(),
        in_place,
        kernel: false,
        salvage: false,
    }
}

// A merged recording merged again (nothing to insert) leaves the old room
// behind: it does not grow by a room each time (at most a page, to keep
// its records page-congruent), its records and attrs stay as they were,
// and a third merge is the second's size.
#[test]
fn merging_a_merged_recording_again_does_not_grow_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let e = Endian::Little;
    let (rec, _) = recording(e);
    std::fs::write(dir.join("rec.data"), &rec).unwrap();
    let snap = dir.join("snap.data");
    snapshot_file(&snap, vec![process(42, b"target")], e);
    let opts = MergeOptions {
        maps: Some(snap),
        ..merge_opts(false)
    };
    let mut sizes = Vec::new();
    let mut records = Vec::new();
    let mut from = dir.join("rec.data");
    for i in 1..=3 {
        let out = dir.join(format!("m{i}.data"));
        let report = merge(&from, &out, &opts).unwrap();
        assert_eq!(
            report.inserted_records,
            if i == 1 { 2 } else { 0 },
            "merge {i}"
        );
        let o = std::fs::read(&out).unwrap();
        let h = FileHeader::parse(&o[..104], o.len() as u64).unwrap();
        let in_front = &o[h.attrs.end() as usize..h.data.offset as usize];
        assert!(
            in_front.iter().all(|&b| b == 0),
            "merge {i}: room not zeros"
        );
        records.push(o[h.data.offset as usize..h.data.end() as usize].to_vec());
        sizes.push(o.len() as u64);
        from = out;
    }
    assert!(records.iter().all(|r| *r == records[0]), "records changed");
    assert!(sizes[1] <= sizes[0] + crate::perf::copy::PAGE, "{sizes:?}");
    assert_eq!(sizes[2], sizes[1], "{sizes:?}");
}
