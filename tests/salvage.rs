//! `--salvage`: recordings cut short (a pipe stream truncated inside a
//! record header or body or at a record boundary, a file-mode data section
//! that runs past the end of the file, a `perf record` killed with
//! SIGKILL, with and without `-z`) are refused without it (exit 2, the
//! offset, a word on `--salvage`) and read with it up to their last whole
//! record: exit 0, a warning naming the file, the offset and the bytes
//! dropped, and outputs that perf and linux-perf-data read, holding exactly
//! the whole records before the cut.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::*;

/// Pipe-mode metadata record types (HEADER_ATTR, HEADER_EVENT_TYPE,
/// HEADER_TRACING_DATA, HEADER_BUILD_ID, HEADER_FEATURE): a file-mode
/// output holds them in its header, not its data section.
const PIPE_METADATA: [u32; 5] = [64, 65, 66, 67, 80];
const SAMPLE: u32 = 9;

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// (offset, type, size) of the whole records of little-endian `b[start..]`.
fn records(b: &[u8], start: usize) -> Vec<(usize, u32, usize)> {
    let mut out = Vec::new();
    let mut at = start;
    while at + 8 <= b.len() {
        let t = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let size = u16::from_le_bytes([b[at + 6], b[at + 7]]) as usize;
        assert!(
            size >= 8 && t != 66 && t != 71,
            "record at {at}: {t}, {size}"
        );
        if at + size > b.len() {
            break;
        }
        out.push((at, t, size));
        at += size;
    }
    out
}

/// The record to cut in: the first of more than 16 bytes in the second
/// half of the records.
fn middle(recs: &[(usize, u32, usize)]) -> (usize, usize) {
    let &(at, _, size) = recs[recs.len() / 2..]
        .iter()
        .find(|r| r.2 > 16)
        .expect("a record of more than 16 bytes");
    (at, size)
}

/// Runs `mmap2-synth ARGS` with stdin closed.
fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts `dump` and `convert` refuse `cut` without --salvage (exit 2,
/// `at offset AT`, a word on --salvage), and that they, `merge` and
/// `pprof` read it with --salvage (exit 0, the warning naming the file,
/// `offset CUT` and the bytes dropped). Returns the file-mode output of
/// `convert --salvage --to file` and the lines of `dump --salvage`.
fn check_cut(
    dir: &Path,
    cut: &Path,
    refused_at: Option<u64>,
    warning: Option<(u64, u64)>,
) -> (Vec<u8>, usize) {
    let out = dir.join("out.data");
    let _ = std::fs::remove_file(&out);
    let o = run(&["dump".as_ref(), cut.as_os_str()]);
    match refused_at {
        Some(at) => {
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{err}");
            assert!(
                err.starts_with(&format!("error: {}: at offset {at}:", cut.display())),
                "{err}"
            );
            assert!(err.contains("--salvage"), "{err}");
            let o = run(&[
                "convert".as_ref(),
                cut.as_os_str(),
                "--to".as_ref(),
                "file".as_ref(),
                "-o".as_ref(),
                out.as_os_str(),
            ]);
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            assert!(stderr(&o).contains("--salvage"));
            assert!(!out.exists());
        }
        None => assert!(o.status.success(), "{}", stderr(&o)),
    }
    let check_warning = |o: &Output, what: &str| {
        let err = stderr(o);
        assert!(o.status.success(), "{what}: {err}");
        match warning {
            Some((at, dropped)) => {
                let w = format!("mmap2-synth: warning: {}: ", cut.display());
                assert_eq!(err.matches(&w).count(), 1, "{what}: {err}");
                assert!(err.contains(&format!("offset {at}")), "{what}: {err}");
                if dropped > 0 {
                    assert!(
                        err.contains(&format!("{dropped} bytes after it dropped")),
                        "{what}: {err}"
                    );
                }
            }
            None => assert!(!err.contains("warning"), "{what}: {err}"),
        }
    };
    let dumped = run(&["dump".as_ref(), "--salvage".as_ref(), cut.as_os_str()]);
    check_warning(&dumped, "dump");
    let o = convert_salvaged(cut, &out, &[]);
    check_warning(&o, "convert");
    let bytes = std::fs::read(&out).unwrap();
    // the output dumps as the cut input does with --salvage
    let again = run(&["dump".as_ref(), out.as_os_str()]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(again.stdout, dumped.stdout, "dump of the output");
    let merged = dir.join("merged.data");
    let o = run(&[
        "merge".as_ref(),
        "--salvage".as_ref(),
        "-q".as_ref(),
        "-p".as_ref(),
        "1".as_ref(),
        cut.as_os_str(),
        "-o".as_ref(),
        merged.as_os_str(),
    ]);
    check_warning(&o, "merge");
    let profile = dir.join("profile.pb.gz");
    let o = run(&[
        "pprof".as_ref(),
        "--salvage".as_ref(),
        "-q".as_ref(),
        "--no-symbolize".as_ref(),
        cut.as_os_str(),
        "-o".as_ref(),
        profile.as_os_str(),
    ]);
    check_warning(&o, "pprof");
    let lines = dumped.stdout.iter().filter(|&&c| c == b'\n').count();
    (bytes, lines)
}

/// The records of `stream[..cut]` a file-mode output of it holds: its
/// whole records but the pipe metadata.
fn expected_from_stream(stream: &[u8], cut: usize) -> Vec<Vec<u8>> {
    records(&stream[..cut], 16)
        .into_iter()
        .filter(|r| !PIPE_METADATA.contains(&r.1))
        .map(|(at, _, size)| stream[at..at + size].to_vec())
        .collect()
}

fn samples(recs: &[Vec<u8>]) -> usize {
    recs.iter()
        .filter(|r| u32::from_le_bytes(r[..4].try_into().unwrap()) == SAMPLE)
        .count()
}

/// Samples linux-perf-data reads from a perf.data (file or pipe mode).
fn linux_perf_data_samples(bytes: &[u8]) -> usize {
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    use linux_perf_event_reader::EventRecord;
    let cursor = std::io::Cursor::new(bytes);
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = match u64_at(bytes, 8) {
        16 => PerfFileReader::parse_pipe(cursor).unwrap(),
        _ => PerfFileReader::parse_file(cursor).unwrap(),
    };
    let mut n = 0;
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { record, .. } = r {
            n += usize::from(matches!(record.parse().unwrap(), EventRecord::Sample(_)));
        }
    }
    n
}

/// Samples `perf script` prints from `data` (one line each, no callchains);
/// `perf report` must read it too.
fn perf_samples(data: &Path) -> usize {
    let text = perf(&[
        "script".as_ref(),
        "-G".as_ref(),
        "-F".as_ref(),
        "pid,time,ip".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    let report = perf(&[
        "report".as_ref(),
        "--stdio".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    let n = text.lines().filter(|l| !l.trim().is_empty()).count();
    // a cut holding no sample (its first COMPRESSED record had none) gets
    // perf's "no samples" report, which has no header
    assert!(n == 0 || report.contains("# Samples:"), "{report}");
    n
}

/// Cuts `stream` (pipe mode) inside a record's header, inside its body and
/// at its start; checks each cut, and with `perf`, that perf reads the
/// output with every sample before the cut.
fn cut_stream(dir: &Path, stream: &[u8], perf: bool) {
    let recs = records(stream, 16);
    assert_eq!(recs.last().map(|r| r.0 + r.2), Some(stream.len()), "whole");
    let (at, size) = middle(&recs);
    let cut = dir.join("cut.data");
    for (end, whole) in [(at + 3, false), (at + 12.min(size - 1), false), (at, true)] {
        std::fs::write(&cut, &stream[..end]).unwrap();
        let refused = (!whole).then_some(at as u64);
        let warning = (!whole).then_some((at as u64, (end - at) as u64));
        let (out, lines) = check_cut(dir, &cut, refused, warning);
        let want = expected_from_stream(stream, end);
        assert_eq!(
            data_records(&out),
            want,
            "cut at {end}: the records before the cut"
        );
        assert!(lines > 0, "maps before the cut");
        assert_eq!(
            linux_perf_data_samples(&out),
            samples(&want),
            "linux-perf-data"
        );
        if perf {
            assert!(samples(&want) > 0, "samples before the cut");
            assert_eq!(
                perf_samples(&dir.join("out.data")),
                samples(&want),
                "perf script"
            );
        }
    }
}

/// Cuts `file` (file mode, complete) inside a record of its data section
/// (header, body) and at its start: the data section then runs past the
/// end of the file.
fn cut_file(dir: &Path, file: &[u8], perf: bool) {
    let (start, size) = (u64_at(file, 40) as usize, u64_at(file, 48) as usize);
    let all = data_records(file);
    let recs = records(&file[..start + size], start);
    assert_eq!(recs.len(), all.len());
    let (at, rec_size) = middle(&recs);
    let cut = dir.join("cut.data");
    for end in [at + 3, at + 12.min(rec_size - 1), at] {
        std::fs::write(&cut, &file[..end]).unwrap();
        let (out, _) = check_cut(dir, &cut, Some(40), Some((at as u64, (end - at) as u64)));
        let n = recs.iter().take_while(|r| r.0 < at).count();
        let want = &all[..n];
        assert_eq!(
            data_records(&out),
            want,
            "cut at {end}: the records before the cut"
        );
        assert_eq!(
            linux_perf_data_samples(&out),
            samples(want),
            "linux-perf-data"
        );
        if perf {
            assert_eq!(
                perf_samples(&dir.join("out.data")),
                samples(want),
                "perf script"
            );
        }
    }
}

// A pinned pipe-mode perf recording cut inside a header, inside a body and
// at a record boundary: refused at the record's offset without --salvage,
// read up to it with (every command), the file-mode output holding exactly
// the whole records before the cut (linux-perf-data reads them all).
#[test]
fn a_pinned_stream_cut_short_is_salvaged() {
    let dir = scratch("salvage-pin-pipe");
    cut_stream(&dir, &std::fs::read(pin("rec-pipe.data")).unwrap(), false);
}

// A pinned file-mode recording whose data section runs past the end of the
// file (cut inside a record and at a boundary): refused at offset 40
// without --salvage, read up to the last whole record with it.
#[test]
fn a_pinned_file_cut_mid_data_is_salvaged() {
    let dir = scratch("salvage-pin-file");
    cut_file(&dir, &std::fs::read(pin("rec-file.data")).unwrap(), false);
}

// A pinned file with data size 0 and records where the features should be
// (what perf record killed leaves, cut inside a record too): read to the
// last whole record, the output a valid recording with those records.
#[test]
fn a_pinned_file_with_data_size_zero_is_salvaged() {
    let dir = scratch("salvage-pin-size0");
    let mut b = std::fs::read(pin("rec-file.data")).unwrap();
    let (start, size) = (u64_at(&b, 40) as usize, u64_at(&b, 48) as usize);
    b.truncate(start + size - 5);
    b[48..56].fill(0);
    let cut = dir.join("cut.data");
    std::fs::write(&cut, &b).unwrap();
    let recs = records(&b, start);
    let last = recs.last().unwrap();
    let end = (last.0 + last.2) as u64;
    let dropped = b.len() as u64 - end;
    let (out, _) = check_cut(&dir, &cut, Some(48), Some((end, dropped)));
    let all = data_records(&std::fs::read(pin("rec-file.data")).unwrap());
    assert_eq!(data_records(&out), all[..recs.len()]);
}

// Records followed by a 2 GiB hole (a crash left the file's size but not
// its blocks: zeros that take no disk) are salvaged up to the last record,
// the outputs holding what the recording without the hole holds: a
// pipe-mode stream, and a file with data size 0 (perf record killed) whose
// records run into the hole. (The hole is stepped over unread since it
// took 0.7 s to read; no timing here, stream.rs counts the bytes read.)
#[test]
fn records_followed_by_a_sparse_hole_are_salvaged() {
    let dir = scratch("salvage-hole");
    let hole = 2u64 << 30;
    let holed = dir.join("holed.data");
    let with_hole = |bytes: &[u8]| {
        std::fs::write(&holed, bytes).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&holed)
            .unwrap();
        f.set_len(bytes.len() as u64 + hole).unwrap();
        bytes.len() as u64
    };
    let stream = std::fs::read(pin("rec-pipe.data")).unwrap();
    let at = with_hole(&stream);
    let (out, _) = check_cut(&dir, &holed, Some(at), Some((at, hole)));
    assert_eq!(
        data_records(&out),
        expected_from_stream(&stream, stream.len())
    );
    let file = std::fs::read(pin("rec-file.data")).unwrap();
    let (start, size) = (u64_at(&file, 40) as usize, u64_at(&file, 48) as usize);
    let mut killed = file[..start + size].to_vec();
    killed[48..56].fill(0);
    let at = with_hole(&killed);
    let (out, _) = check_cut(&dir, &holed, Some(48), Some((at, hole)));
    assert_eq!(data_records(&out), data_records(&file));
}

// `merge --salvage --in-place` with nothing to insert still repairs the
// file (it was left as it was, still cut): afterwards it is read without
// --salvage, as the cut input's records up to the cut.
#[test]
fn merge_salvage_in_place_repairs_with_nothing_to_insert() {
    let dir = scratch("salvage-in-place");
    let file = std::fs::read(pin("rec-file.data")).unwrap();
    let (start, size) = (u64_at(&file, 40) as usize, u64_at(&file, 48) as usize);
    let (at, _) = middle(&records(&file[..start + size], start));
    let cut = dir.join("cut.data");
    std::fs::write(&cut, &file[..at + 3]).unwrap();
    let want = run(&["dump".as_ref(), "--salvage".as_ref(), cut.as_os_str()]);
    assert!(want.status.success(), "{}", stderr(&want));
    // the recording's own maps as the snapshot: nothing to insert
    let snap = dir.join("snap.data");
    std::fs::write(&snap, &file).unwrap();
    let o = run(&[
        "merge".as_ref(),
        "--salvage".as_ref(),
        "--in-place".as_ref(),
        "--no-kernel".as_ref(),
        "--maps".as_ref(),
        snap.as_os_str(),
        cut.as_os_str(),
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("inserted 0 records"), "{err}");
    let got = run(&["dump".as_ref(), cut.as_os_str()]);
    assert!(got.status.success(), "{}", stderr(&got));
    assert_eq!(got.stdout, want.stdout);
}

/// `convert --salvage -q EXTRA INPUT --to file -o OUT`.
fn convert_salvaged(input: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["convert".as_ref(), "--salvage".as_ref()];
    args.push("-q".as_ref());
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.extend([input.as_os_str(), "--to".as_ref(), "file".as_ref()]);
    args.extend(["-o".as_ref(), out.as_os_str()]);
    run(&args)
}

/// A recording of the burner by `perf record -g ARGS` into `out` (`-o -`
/// among ARGS: the stream).
fn record_burner(out: &Path, args: &[&str]) {
    let burn = format!("sleep 1 | {} 0.5", fixtures().burn.display());
    let mut all = vec!["-g"];
    all.extend_from_slice(args);
    perf_record_to(out, &all, &["--", "sh", "-c", &burn]);
}

// A real `perf record -o -` stream of the burner cut inside a header,
// inside a body and at a record boundary: perf script and perf report
// read `convert --salvage --to file`'s output, with every sample before
// the cut, as linux-perf-data does.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_perf_stream_cut_short_is_salvaged() {
    needs_perf_record();
    let dir = scratch("salvage-perf-pipe");
    let stream = dir.join("full.pipe");
    record_burner(&stream, &["-o", "-"]);
    cut_stream(&dir, &std::fs::read(&stream).unwrap(), true);
}

// A real file-mode recording of the burner truncated mid data section:
// the same.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_perf_file_truncated_mid_data_is_salvaged() {
    needs_perf_record();
    let dir = scratch("salvage-perf-file");
    let file = dir.join("full.data");
    record_burner(&file, &[]);
    cut_file(&dir, &std::fs::read(&file).unwrap(), true);
}

/// `perf record -g ARGS -o OUT` of a busy loop, killed with SIGKILL once
/// it has written records (data size 0, no features: what it leaves).
fn record_killed(out: &Path, args: &[&str]) {
    use std::os::unix::process::CommandExt;
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-g"])
        .args(args)
        .arg("-o")
        .arg(out)
        .args(["--", "sh", "-c", "while :; do :; done"])
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    wait_until("perf record to write 64 KiB of records", || {
        let b = std::fs::read(out).unwrap_or_default();
        b.len() > 64 << 10 && u64_at(&b, 40) > 0
    });
    let group = format!("-{}", perf.id());
    let st = Command::new("kill")
        .args(["-s", "KILL", "--", &group])
        .status();
    assert!(st.unwrap().success());
    wait_until("perf to die", || perf.try_wait().unwrap().is_some());
}

// `perf record` killed with SIGKILL, plain and -z: with --salvage every
// command reads it; the outputs of `convert --to file` and `merge` are
// valid recordings (a -z one gets the COMPRESSED feature perf needs to
// read its compressed records) that perf script and perf report read,
// with the same samples as the --decompress twin and the input's dump.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_killed_perf_record_is_salvaged() {
    needs_perf_record();
    for z in [false, true] {
        let dir = scratch("salvage-killed");
        let rec = dir.join("killed.data");
        record_killed(&rec, if z { &["-z"] } else { &[] });
        let b = std::fs::read(&rec).unwrap();
        assert_eq!(u64_at(&b, 48), 0, "perf record killed leaves data size 0");
        let recs = records(&b, u64_at(&b, 40) as usize);
        let last = recs.last().unwrap();
        let end = (last.0 + last.2) as u64;
        let (out, _) = check_cut(&dir, &rec, Some(48), Some((end, b.len() as u64 - end)));
        let out_path = dir.join("out.data");
        let n = perf_samples(&out_path);
        assert!(n > 0, "samples read");
        // merge's output too (a -z one with the COMPRESSED feature)
        assert_eq!(perf_samples(&dir.join("merged.data")), n, "merged");
        if !z {
            let all: Vec<Vec<u8>> = recs
                .iter()
                .map(|&(at, _, s)| b[at..at + s].to_vec())
                .collect();
            assert_eq!(data_records(&out), all);
            assert_eq!(n, samples(&all));
            assert_eq!(linux_perf_data_samples(&out), n);
            continue;
        }
        let plain = dir.join("plain.data");
        let o = convert_salvaged(&rec, &plain, &["--decompress"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(perf_samples(&plain), n, "compressed and decompressed");
        assert_eq!(linux_perf_data_samples(&std::fs::read(&plain).unwrap()), n);
    }
}

/// (names, samples per event) of a file-mode recording as linux-perf-data
/// reads it (which takes sample ids from EVENT_DESC only).
fn linux_perf_data_events(bytes: &[u8]) -> (Vec<String>, Vec<usize>) {
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    use linux_perf_event_reader::EventRecord;
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(std::io::Cursor::new(bytes)).unwrap();
    let attrs = perf_file.event_attributes();
    let names = attrs
        .iter()
        .map(|a| a.name().unwrap_or("").to_string())
        .collect();
    let mut n = vec![0; attrs.len()];
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { attr_index, record } = r {
            if matches!(record.parse().unwrap(), EventRecord::Sample(_)) {
                n[attr_index] += 1;
            }
        }
    }
    (names, n)
}

// A killed `perf record` of two events lost its EVENT_DESC with the other
// features: the salvaged convert and merge outputs get one made from the
// attrs (perf's names, the attrs' ids), so linux-perf-data (samply) puts
// each sample under its own event, as perf script counts them; pprof of
// the killed file names both.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_killed_recording_of_two_events_keeps_them_apart() {
    needs_perf_record();
    let dir = scratch("salvage-killed-two");
    let rec = dir.join("killed.data");
    record_killed(&rec, &["-e", "cpu-clock,task-clock"]);
    for cmd in [&["convert", "--to", "file"][..], &["merge"][..]] {
        let out = dir.join("out.data");
        let _ = std::fs::remove_file(&out);
        let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_ref()).collect();
        args.extend(["--salvage".as_ref(), "-q".as_ref(), rec.as_os_str()]);
        args.extend(["-o".as_ref(), out.as_os_str()]);
        let o = run(&args);
        assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
        let (names, counts) = linux_perf_data_events(&std::fs::read(&out).unwrap());
        assert_eq!(names, ["cpu-clock", "task-clock"], "{cmd:?}");
        let text = perf(&[
            "script".as_ref(),
            "-F".as_ref(),
            "event".as_ref(),
            "-i".as_ref(),
            out.as_os_str(),
        ]);
        let perf_counts: Vec<usize> = ["cpu-clock:", "task-clock:"]
            .iter()
            .map(|ev| text.lines().filter(|l| l.trim() == *ev).count())
            .collect();
        assert!(counts.iter().all(|&c| c > 0), "{cmd:?}: {counts:?}");
        assert_eq!(counts, perf_counts, "{cmd:?}: samples of each event");
    }
    // pprof of the killed file itself names both events (EVENT_UPDATE's
    // scale records were read as names: type 1 is SCALE, NAME is 2)
    let pb = dir.join("k.pb.gz");
    let o = run(&[
        "pprof".as_ref(),
        "--salvage".as_ref(),
        "--no-symbolize".as_ref(),
        rec.as_os_str(),
        "-o".as_ref(),
        pb.as_os_str(),
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    for ev in ["cpu-clock (", "task-clock ("] {
        assert!(err.contains(ev), "pprof names {ev}: {err}");
    }
}

// A `perf record` still writing its file looks killed (data size 0, no
// features): `--salvage --in-place` refuses to replace a file that is open
// for writing (it replaced it, and perf wrote the rest of the recording
// into the unlinked file), and the finished recording is whole.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_recording_still_being_written_is_not_salvaged_in_place() {
    needs_perf_record();
    let dir = scratch("salvage-live");
    let live = dir.join("live.data");
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-o"])
        .arg(&live)
        .args(["--", "sleep", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("perf record to start its file", || {
        std::fs::metadata(&live).is_ok_and(|m| m.len() > 0)
    });
    for cmd in [
        &["convert", "--buildid-mmap2"][..],
        &["merge", "--no-kernel"][..],
    ] {
        let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_ref()).collect();
        args.extend([
            "--salvage".as_ref(),
            "--in-place".as_ref(),
            live.as_os_str(),
        ]);
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(err.contains("open for writing"), "{cmd:?}: {err}");
    }
    assert!(perf.wait().unwrap().success());
    let b = std::fs::read(&live).unwrap();
    assert_ne!(u64_at(&b, 48), 0, "perf finished its own file");
    perf_samples(&live);
}

// The hint names --salvage only where it can help: not once it was given
// (a data section starting past the end of the file stays an error), and
// `record`, which has no such flag, is not concerned here.
#[test]
fn the_salvage_hint_is_not_given_twice() {
    let dir = scratch("salvage-hint");
    let mut b = std::fs::read(pin("rec-file.data")).unwrap();
    let len = b.len() as u64;
    b[40..48].copy_from_slice(&(len + 4096).to_le_bytes());
    let bad = dir.join("bad.data");
    std::fs::write(&bad, &b).unwrap();
    for salvage in [false, true] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["dump".as_ref(), bad.as_os_str()];
        if salvage {
            args.push("--salvage".as_ref());
        }
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.contains("--salvage reads it"), !salvage, "{err}");
    }
}

/// (end offset, is COMPRESSED) of every whole top-level record of the
/// little-endian records of `b` from `start` (AUXTRACE and tracing records
/// step over their data).
fn stream_record_ends(b: &[u8], start: usize) -> Vec<(usize, bool)> {
    let mut out = Vec::new();
    let mut at = start;
    while at + 8 <= b.len() {
        let t = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let size = u16::from_le_bytes([b[at + 6], b[at + 7]]) as usize;
        let after = match t {
            71 => u64_at(b, at + 8) as usize,
            66 => u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize,
            _ => 0,
        };
        at += size + after;
        if at <= b.len() {
            out.push((at, matches!(t, 81 | 83)));
        }
    }
    out
}

/// Samples in the file-mode output of `convert --salvage --decompress
/// --to file` of `cut` (their records counted, as linux-perf-data reads
/// them).
fn decompressed_samples(dir: &Path, cut: &Path) -> usize {
    let plain = dir.join("plain.data");
    let o = convert_salvaged(cut, &plain, &["--decompress"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&plain).unwrap();
    let n = samples(&data_records(&bytes));
    assert_eq!(linux_perf_data_samples(&bytes), n, "linux-perf-data");
    n
}

// A real `perf record -z -m 1 -o -` stream of the burner (its one-page ring
// buffer wrapping, each half compressed on its own, records straddling
// them) cut at the ends of COMPRESSED records, those where a record
// straddles (dump refuses them) and as many others, at most 4 of each
// spread over the stream: dump, convert and pprof read each cut with
// --salvage (exit 0; a record cut short at the end of the decompressed
// data is dropped and said); perf reads convert's output with as many
// samples as it reads from the cut itself, and as the decompressed output
// holds (linux-perf-data agrees). Without the fix the cuts between two
// halves fail (exit 2, "compressed data ... truncated").
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_perf_z_stream_cut_at_every_compressed_record_is_salvaged() {
    needs_perf_record();
    let dir = scratch("salvage-perf-z");
    let stream = dir.join("z.pipe");
    let burn = format!("sleep 2 | {} 1", fixtures().burn.display());
    perf_record_to(
        &stream,
        &["-z", "-m", "1", "-o", "-", "-F", "8000", "-g"],
        &["--", "sh", "-c", &burn],
    );
    let b = std::fs::read(&stream).unwrap();
    let cut = dir.join("cut.data");
    let out = dir.join("out.data");
    let ends: Vec<usize> = (stream_record_ends(&b, 16).into_iter())
        .filter_map(|(end, compressed)| compressed.then_some(end))
        .collect();
    let (mut inner, mut whole) = (Vec::new(), Vec::new());
    for &end in &ends {
        std::fs::write(&cut, &b[..end]).unwrap();
        match run(&["dump".as_ref(), cut.as_os_str()]).status.code() {
            Some(0) => whole.push(end),
            Some(2) => inner.push(end),
            c => panic!("cut at {end}: dump exit {c:?}"),
        }
    }
    assert!(
        !inner.is_empty(),
        "no cut between the two halves of a wrapped ring buffer in {} ends",
        ends.len()
    );
    let mut inner_cuts = 0;
    for end in spread4(&inner).into_iter().chain(spread4(&whole)) {
        std::fs::write(&cut, &b[..end]).unwrap();
        for cmd in [&["dump"][..], &["pprof", "--no-symbolize", "-q", "-o"]] {
            let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_ref()).collect();
            if cmd[0] == "pprof" {
                args.push(dir.join("p.pb.gz").into_os_string().leak());
            }
            args.extend(["--salvage".as_ref(), cut.as_os_str()]);
            let o = run(&args);
            assert!(o.status.success(), "cut at {end}: {cmd:?}: {}", stderr(&o));
        }
        let _ = std::fs::remove_file(&out);
        let o = convert_salvaged(&cut, &out, &[]);
        let err = stderr(&o);
        assert!(o.status.success(), "cut at {end}: convert: {err}");
        if err.contains("ends inside a record") {
            inner_cuts += 1;
            // the output is whole: read without --salvage
            let o = run(&["dump".as_ref(), out.as_os_str()]);
            assert!(o.status.success(), "cut at {end}: {}", stderr(&o));
        }
        let n = perf_samples(&out);
        assert_eq!(
            n,
            perf_samples(&cut),
            "cut at {end}: perf reads the cut alike"
        );
        assert_eq!(n, decompressed_samples(&dir, &cut), "cut at {end}");
    }
    assert_eq!(
        inner_cuts,
        spread4(&inner).len(),
        "each refused cut salvaged"
    );
}

/// Runs `dump` of `cut` without and with --salvage: refused (exit 2, the
/// hint), then read (exit 0); returns the warning.
fn refused_then_salvaged(cut: &Path) -> String {
    let o = run(&["dump".as_ref(), cut.as_os_str()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--salvage"), "{err}");
    let o = run(&["dump".as_ref(), "--salvage".as_ref(), cut.as_os_str()]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    err
}

// A real file-mode recording cut at its data end, inside its feature table
// and inside its feature sections (a full disk while copying it): refused
// without --salvage (exit 2, the hint); with it its whole data section is
// read, the features not whole dropped and named in the warning; perf and
// linux-perf-data read convert's output with every sample.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_perf_file_cut_in_its_features_is_salvaged() {
    needs_perf_record();
    let dir = scratch("salvage-perf-features");
    let file = dir.join("full.data");
    record_burner(&file, &[]);
    let b = std::fs::read(&file).unwrap();
    let end = (u64_at(&b, 40) + u64_at(&b, 48)) as usize;
    let want = samples(&data_records(&b));
    assert!(want > 0);
    let cut = dir.join("cut.data");
    let out = dir.join("out.data");
    for len in [end, end + 40, (end + b.len()) / 2, b.len() - 1] {
        std::fs::write(&cut, &b[..len]).unwrap();
        let w = refused_then_salvaged(&cut);
        assert!(w.contains("feature sections are cut short"), "{w}");
        assert!(w.contains(&format!("up to offset {end}")), "{w}");
        assert!(w.contains("feature sections lost: "), "{w}");
        if len <= end + 40 {
            assert!(w.contains("BUILD_ID, HOSTNAME"), "{w}");
        }
        let _ = std::fs::remove_file(&out);
        let o = convert_salvaged(&cut, &out, &[]);
        assert!(o.status.success(), "{len}: {}", stderr(&o));
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(data_records(&bytes), data_records(&b), "{len}");
        assert_eq!(linux_perf_data_samples(&bytes), want, "{len}");
        assert_eq!(perf_samples(&out), want, "{len}");
    }
}

// A pinned file with data size 0 and no feature bits but its records after
// the data offset (perf record killed before it set its features): refused
// without --salvage (exit 2, "data size is 0", the hint), read whole with
// it; with nothing after the data offset it is an empty recording, read
// without a word.
#[test]
fn data_size_zero_without_feature_bits_is_refused_and_salvaged() {
    let dir = scratch("salvage-size0-nobits");
    let full = std::fs::read(pin("rec-file.data")).unwrap();
    let (start, size) = (u64_at(&full, 40) as usize, u64_at(&full, 48) as usize);
    let mut b = full[..start + size].to_vec();
    b[48..56].fill(0);
    b[72..104].fill(0);
    let cut = dir.join("cut.data");
    std::fs::write(&cut, &b).unwrap();
    let o = run(&["dump".as_ref(), cut.as_os_str()]);
    assert!(stderr(&o).contains("data size is 0"), "{}", stderr(&o));
    let (out, _) = check_cut(&dir, &cut, Some(48), Some(((start + size) as u64, 0)));
    assert_eq!(data_records(&out), data_records(&full));
    b.truncate(start);
    std::fs::write(&cut, &b).unwrap();
    for salvage in [false, true] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["dump".as_ref(), cut.as_os_str()];
        if salvage {
            args.push("--salvage".as_ref());
        }
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    }
}

// A killed `perf record` of a tracepoint lost its TRACING_DATA section with
// the others: the warning names the lost features and says perf cannot
// read tracepoint samples without it.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_killed_tracepoint_recording_warns_of_its_lost_tracing_data() {
    needs_perf_record();
    let dir = scratch("salvage-killed-tp");
    let rec = dir.join("killed.data");
    record_killed(&rec, &["-e", "cpu-clock", "-e", "sched:sched_switch"]);
    let w = refused_then_salvaged(&rec);
    for want in [
        "feature sections lost: TRACING_DATA, BUILD_ID",
        "EVENT_DESC made again",
        "perf cannot read tracepoint samples without TRACING_DATA",
    ] {
        assert!(w.contains(want), "{want}: {w}");
    }
}

// A killed `perf record -z` (file mode, a ring buffer of one page, so that
// it wraps) cut at the end of every COMPRESSED record: each read with
// --salvage (exit 0; at least one cut between the two halves of a wrapped
// ring buffer, its partial record dropped); perf reads convert's output
// with the samples the decompressed output holds (at 4 cuts of each kind).
// Without the fix those cuts fail (exit 2).
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_killed_z_recording_cut_at_every_compressed_record_is_salvaged() {
    needs_perf_record();
    let dir = scratch("salvage-killed-z-cuts");
    let rec = dir.join("killed.data");
    record_killed(&rec, &["-z", "-F", "8000", "-m", "1"]);
    let b = std::fs::read(&rec).unwrap();
    let cut = dir.join("cut.data");
    let out = dir.join("out.data");
    let ends = compressed_ends(&b, u64_at(&b, 40) as usize);
    assert!(!ends.is_empty(), "COMPRESSED records");
    let (mut inner, mut whole) = (Vec::new(), Vec::new());
    for end in ends {
        std::fs::write(&cut, &b[..end]).unwrap();
        let _ = std::fs::remove_file(&out);
        let o = convert_salvaged(&cut, &out, &[]);
        assert!(o.status.success(), "cut at {end}: {}", stderr(&o));
        match stderr(&o).contains("ends inside a record") {
            true => inner.push(end),
            false => whole.push(end),
        }
    }
    assert!(
        !inner.is_empty(),
        "no cut between the two halves of a wrapped ring buffer"
    );
    // perf is slow (a script and a report of each): it reads the outputs
    // of at most 4 cuts of each kind, spread over the recording
    for end in spread4(&inner).into_iter().chain(spread4(&whole)) {
        std::fs::write(&cut, &b[..end]).unwrap();
        let _ = std::fs::remove_file(&out);
        let o = convert_salvaged(&cut, &out, &[]);
        assert!(o.status.success(), "cut at {end}: {}", stderr(&o));
        let n = decompressed_samples(&dir, &cut);
        assert_eq!(perf_samples(&out), n, "cut at {end}");
    }
}

/// At most 4 of `v`, spread evenly from its first.
fn spread4(v: &[usize]) -> Vec<usize> {
    let step = v.len().div_ceil(4).max(1);
    v.iter().step_by(step).copied().collect()
}

/// The end offsets of the whole COMPRESSED records of `b` from `start`.
fn compressed_ends(b: &[u8], start: usize) -> Vec<usize> {
    let ends = stream_record_ends(b, start).into_iter();
    ends.filter(|r| r.1).map(|r| r.0).collect()
}

/// A `perf record -z -m 1 -o -` stream of the burner (a ring buffer of one
/// page: it wraps at nearly every read, each half compressed apart) cut
/// at the end of every COMPRESSED record, into `dir/cut.data` one after
/// another: `f` is called with each cut that `dump` refuses (its data
/// ends inside a zstd block or a record) and its stderr. Returns how many.
fn z_stream_cuts(dir: &Path, mut f: impl FnMut(&Path, &str)) -> usize {
    let stream = dir.join("z.pipe");
    let burn = format!("sleep 2 | {} 1", fixtures().burn.display());
    perf_record_to(
        &stream,
        &["-z", "-m", "1", "-o", "-", "-F", "8000", "-g"],
        &["--", "sh", "-c", &burn],
    );
    let b = std::fs::read(&stream).unwrap();
    let cut = dir.join("cut.data");
    let mut n = 0;
    for end in compressed_ends(&b, 16) {
        std::fs::write(&cut, &b[..end]).unwrap();
        let o = run(&["dump".as_ref(), cut.as_os_str()]);
        if !o.status.success() {
            n += 1;
            f(&cut, &stderr(&o));
        }
    }
    n
}

/// Asserts our dump reads `merged` without --salvage, as many records as
/// `dump --salvage` of `cut`.
fn same_records_whole(merged: &Path, cut: &Path) {
    let lines = |o: &Output| o.stdout.iter().filter(|&&c| c == b'\n').count();
    let whole = run(&["dump".as_ref(), merged.as_os_str()]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    let salvaged = run(&["dump".as_ref(), "--salvage".as_ref(), cut.as_os_str()]);
    assert_eq!(lines(&whole), lines(&salvaged), "the same records");
}

/// `merge --salvage` of `cut` into `dir/merged.data` (inserting nothing:
/// no such pid, no kernel maps); returns its bytes.
fn merge_salvaged(dir: &Path, cut: &Path) -> Vec<u8> {
    let merged = dir.join("merged.data");
    let o = run(&[
        "merge".as_ref(),
        "--salvage".as_ref(),
        "-q".as_ref(),
        "--no-kernel".as_ref(),
        "-p".as_ref(),
        "999999999".as_ref(),
        cut.as_os_str(),
        "-o".as_ref(),
        merged.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::read(&merged).unwrap()
}

// A real `-z` stream cut where its compressed data ends inside a zstd
// block or a record: the "unfinished zstd frame" error (exit 2, the
// offset) ends with the --salvage hint in dump and convert, and with
// --salvage dump reads it and convert's output is read by perf and
// linux-perf-data with the samples of its --decompress twin.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn an_unfinished_zstd_frame_gets_the_hint_and_is_salvaged() {
    needs_perf_record();
    let dir = scratch("salvage-unfinished-zstd");
    let out = dir.join("out.data");
    let mut checked = 0;
    let n = z_stream_cuts(&dir, |cut, err| {
        let at = format!("error: {}: at offset ", cut.display());
        assert!(err.starts_with(&at), "{err}");
        assert!(err.contains("unfinished zstd frame"), "{err}");
        assert!(
            err.trim_end().ends_with("up to its last whole record"),
            "{err}"
        );
        let convert = |salvage: bool| {
            let _ = std::fs::remove_file(&out);
            let mut args: Vec<&std::ffi::OsStr> = vec!["convert".as_ref(), "-q".as_ref()];
            if salvage {
                args.push("--salvage".as_ref());
            }
            args.extend([cut.as_os_str(), "--to".as_ref(), "file".as_ref()]);
            run(&[&args[..], &["-o".as_ref(), out.as_os_str()]].concat())
        };
        let o = convert(false);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("--salvage reads it"), "{}", stderr(&o));
        let o = run(&["dump".as_ref(), "--salvage".as_ref(), cut.as_os_str()]);
        assert!(o.status.success(), "{}", stderr(&o));
        // perf is slow: the outputs of the first few cuts
        if checked < 4 {
            checked += 1;
            let o = convert(true);
            assert!(o.status.success(), "{}", stderr(&o));
            let want = decompressed_samples(&dir, cut);
            assert_eq!(perf_samples(&out), want, "perf");
            let bytes = std::fs::read(&out).unwrap();
            assert_eq!(linux_perf_data_samples(&bytes), want, "linux-perf-data");
        }
    });
    assert!(n > 0, "no cut inside the compressed data");
}

// `merge --salvage` of a real `-z` stream cut between the two halves of a
// wrapped ring buffer writes a whole recording: its damaged tail written
// out decompressed without the record cut short, our dump reads it
// without --salvage, perf and linux-perf-data read it with the samples of
// convert's output (which recompresses everything).
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_of_a_z_stream_cut_between_two_halves_is_whole() {
    needs_perf_record();
    let dir = scratch("salvage-merge-z-tail");
    let mut checked = 0;
    let n = z_stream_cuts(&dir, |cut, _| {
        let merged = merge_salvaged(&dir, cut);
        let path = dir.join("merged.data");
        same_records_whole(&path, cut);
        if checked < 4 {
            checked += 1;
            let want = decompressed_samples(&dir, cut);
            assert_eq!(perf_samples(&path), want, "perf");
            assert_eq!(linux_perf_data_samples(&merged), want, "linux-perf-data");
        }
    });
    assert!(
        n > 0,
        "no cut between the two halves of a wrapped ring buffer"
    );
}

// A killed `perf record -z` (file mode) cut between two halves: the same,
// `merge --salvage`'s file-mode output whole (and given the COMPRESSED
// feature the killed file lost).
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_of_a_killed_z_recording_cut_between_two_halves_is_whole() {
    needs_perf_record();
    let dir = scratch("salvage-merge-killed-z");
    let rec = dir.join("killed.data");
    record_killed(&rec, &["-z", "-F", "8000", "-m", "1"]);
    let b = std::fs::read(&rec).unwrap();
    let cut = dir.join("cut.data");
    let mut inner = 0;
    for end in compressed_ends(&b, u64_at(&b, 40) as usize) {
        std::fs::write(&cut, &b[..end]).unwrap();
        let o = run(&["dump".as_ref(), "--salvage".as_ref(), cut.as_os_str()]);
        if !stderr(&o).contains("ends inside a record") {
            continue;
        }
        inner += 1;
        let merged = merge_salvaged(&dir, &cut);
        let path = dir.join("merged.data");
        same_records_whole(&path, &cut);
        if inner <= 4 {
            let want = decompressed_samples(&dir, &cut);
            assert_eq!(perf_samples(&path), want, "perf");
            assert_eq!(linux_perf_data_samples(&merged), want, "linux-perf-data");
        }
    }
    assert!(
        inner > 0,
        "no cut between the two halves of a wrapped ring buffer"
    );
}

/// Runs perf `cmd` (report or script) on `data`: it succeeds, and does
/// not take the data section for an unterminated recording's.
fn perf_reads_whole(cmd: &str, data: &Path) {
    let mut args = vec![cmd.as_ref(), "-i".as_ref(), data.as_os_str()];
    if cmd == "report" {
        args.push("--stdio".as_ref());
    }
    let o = Command::new("perf").args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "perf {cmd}: {err}");
    assert!(!err.contains("data size field is 0"), "perf {cmd}: {err}");
}

// A pinned file cut inside its first record: a salvage that keeps no
// records writes one FINISHED_ROUND (data size 8, not 0), so perf report
// and perf script read convert's and merge's outputs without calling them
// unterminated, and linux-perf-data reads no sample.
#[test]
#[ignore = "needs perf"]
fn a_salvage_that_keeps_no_records_is_read_by_perf() {
    needs_perf();
    let dir = scratch("salvage-no-records");
    let b = std::fs::read(pin("rec-file.data")).unwrap();
    let cut = dir.join("cut.data");
    std::fs::write(&cut, &b[..u64_at(&b, 40) as usize + 5]).unwrap();
    let out = dir.join("out.data");
    let o = convert_salvaged(&cut, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let merged = merge_salvaged(&dir, &cut);
    for (path, bytes) in [
        (out.clone(), std::fs::read(&out).unwrap()),
        (dir.join("merged.data"), merged),
    ] {
        assert_eq!(data_records(&bytes), vec![vec![68, 0, 0, 0, 0, 0, 8, 0]]);
        assert_eq!(linux_perf_data_samples(&bytes), 0);
        perf_reads_whole("report", &path);
        perf_reads_whole("script", &path);
    }
}

/// Zeroes `file` (file mode, complete) from a record of its data section
/// to the data's end, as a crash leaves a file whose size was written but
/// not its last blocks, and checks it is refused at that record without
/// --salvage (the hint) and read up to it with --salvage (the warning
/// with the offset and bytes dropped), perf (when asked) and
/// linux-perf-data reading convert's output with the samples before it.
fn zero_tail(dir: &Path, file: &[u8], perf: bool) {
    let (start, size) = (u64_at(file, 40) as usize, u64_at(file, 48) as usize);
    let all = data_records(file);
    let recs = records(&file[..start + size], start);
    let (at, _) = middle(&recs);
    let mut zeroed = file.to_vec();
    zeroed[at..start + size].fill(0);
    let cut = dir.join("zeroed.data");
    std::fs::write(&cut, &zeroed).unwrap();
    let dropped = (start + size - at) as u64;
    let (out, _) = check_cut(dir, &cut, Some(at as u64), Some((at as u64, dropped)));
    let o = run(&["dump".as_ref(), cut.as_os_str()]);
    assert!(stderr(&o).contains("are all zero"), "{}", stderr(&o));
    let want = &all[..recs.iter().take_while(|r| r.0 < at).count()];
    assert_eq!(data_records(&out), want, "the records before the zeros");
    assert_eq!(linux_perf_data_samples(&out), samples(want));
    if perf {
        assert_eq!(perf_samples(&dir.join("out.data")), samples(want));
    }
}

// A pinned file-mode recording whose data section ends in zeros (a tail
// zero-filled after a crash): refused at the first zero record header
// without --salvage (exit 2, the hint), read up to it with, every command.
#[test]
fn a_pinned_file_with_a_zero_filled_tail_is_salvaged() {
    let dir = scratch("salvage-pin-zeroed");
    zero_tail(&dir, &std::fs::read(pin("rec-file.data")).unwrap(), false);
}

// A real file-mode recording of the burner with a zero-filled tail: the
// same, and perf reads convert's output with every sample before it.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_perf_file_with_a_zero_filled_tail_is_salvaged() {
    needs_perf_record();
    let dir = scratch("salvage-perf-zeroed");
    let file = dir.join("full.data");
    record_burner(&file, &[]);
    zero_tail(&dir, &std::fs::read(&file).unwrap(), true);
}
