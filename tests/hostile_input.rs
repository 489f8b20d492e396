//! Hostile and unusual perf.data inputs: FIFOs and stdin, decompression
//! bombs, truncated zstd, claimed sizes larger than the file, AUXTRACE data,
//! trailing text after a pipe-mode stream, and one-line error messages.
//! Every bad input exits 2 with the file, the offset and what was wrong.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;
use mmap2_synth::bytes::{Endian, PutExt};
use mmap2_synth::perf::consts::{attr_flags, sample_type as st, types};
use mmap2_synth::perf::Attr;

/// `mmap2-synth merge IN -o OUT --maps <pinned snapshot> -p 100`, bounded by
/// a 60 s `timeout` so a hang fails instead of blocking the suite.
fn merge(input: &Path, out: &Path) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(bin())
        .arg("merge")
        .arg(input)
        .arg("-o")
        .arg(out)
        .arg("--maps")
        .arg(pin("snap-le.data"))
        .args(["-p", "100"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Asserts a bad-input exit (2) whose one error line names `input` and
/// contains `what`, printed once.
fn assert_bad(o: &Output, input: &Path, what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!("error: {}", input.display())),
        "{err}"
    );
    assert!(err.contains(what), "{err}");
    assert_eq!(
        err.matches(what).count(),
        1,
        "printed more than once: {err}"
    );
    err
}

/// A file-mode recording of these records under one attr (IP|TID|TIME,
/// sample_id_all).
fn recording(path: &Path, data: &[u8]) {
    let attr = Attr {
        type_: 1,
        sample_type: st::IP | st::TID | st::TIME,
        flags: attr_flags::SAMPLE_ID_ALL,
        ..Default::default()
    };
    write_recording(path, attr, vec![], data);
}

/// A PERF_RECORD_COMPRESSED record holding `payload`.
fn compressed_record(payload: &[u8]) -> Vec<u8> {
    let e = Endian::Little;
    let mut r = Vec::new();
    r.put_u32(e, types::COMPRESSED);
    r.put_u16(e, 0);
    r.put_u16(e, u16::try_from(8 + payload.len()).unwrap());
    r.extend_from_slice(payload);
    r.pad_to(8);
    let size = u16::try_from(r.len()).unwrap();
    r[6..8].copy_from_slice(&size.to_le_bytes());
    r
}

/// A PERF_RECORD_COMPRESSED2 record holding `payload` (its size given, so
/// the padding after an ended zstd frame is not taken for another frame).
fn compressed2_record(payload: &[u8]) -> Vec<u8> {
    let e = Endian::Little;
    let mut r = Vec::new();
    r.put_u32(e, types::COMPRESSED2);
    r.put_u16(e, 0);
    r.put_u16(
        e,
        u16::try_from(16 + payload.len().div_ceil(8) * 8).unwrap(),
    );
    r.put_u64(e, payload.len() as u64);
    r.extend_from_slice(payload);
    r.pad_to(8);
    r
}

/// `n` bytes of 8-byte FINISHED_ROUND records, zstd-compressed in a stream.
fn rounds_compressed(n: usize) -> Vec<u8> {
    use std::io::Write;
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
    let mut chunk = Vec::new();
    for _ in 0..(1 << 13) {
        chunk.put_u32(Endian::Little, types::FINISHED_ROUND);
        chunk.put_u16(Endian::Little, 0);
        chunk.put_u16(Endian::Little, 8);
    }
    for _ in 0..n / chunk.len() {
        enc.write_all(&chunk).unwrap();
    }
    enc.finish().unwrap()
}

// A FIFO or stdin carrying a pipe-mode recording is read (never a hang); a
// file-mode one on a FIFO, a directory, and a device are refused, exit 2.
#[test]
fn fifos_stdin_and_non_files() {
    let dir = scratch("in-fifo");
    let fifo = dir.join("in.fifo");
    mkfifo(&fifo);
    let feed = |src: PathBuf, fifo: PathBuf| {
        std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            let _ = std::io::copy(&mut std::fs::File::open(src).unwrap(), &mut w);
        })
    };
    let t = feed(pin("rec-pipe.data"), fifo.clone());
    let o = merge(&fifo, &dir.join("a.data"));
    t.join().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = feed(pin("rec-file.data"), fifo.clone());
    let o = merge(&fifo, &dir.join("b.data"));
    t.join().unwrap();
    assert_bad(&o, &fifo, "needs a seekable file");
    let o = Command::new(bin())
        .args(["merge", "-q", "-", "-o"])
        .arg(dir.join("c.data"))
        .stdin(std::fs::File::open(pin("rec-pipe.data")).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_bad(
        &merge(&dir, &dir.join("d.data")),
        &dir,
        "not a regular file",
    );
    let null = Path::new("/dev/null");
    assert_bad(
        &merge(null, &dir.join("e.data")),
        null,
        "not a regular file",
    );
}

/// Whether process `pid` has `path` open.
fn has_open(pid: u32, path: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .any(|l| l == path)
}

// A FIFO given as input before its writer has opened it is waited on (not
// read as an empty file, exit 2), by dump and convert alike, and what the
// writer then writes is read as from a file.
#[test]
fn a_fifo_input_waits_for_its_writer() {
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = scratch("in-fifo-wait");
    let fifo = dir.join("in.fifo");
    mkfifo(&fifo);
    let rec = pin("rec-pipe.data");
    let from_file = |args: &[&str]| {
        let o = Command::new(bin()).args(args).arg(&rec).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let reference = dir.join("ref.data");
    let convert = ["convert", "--to", "file", "-o"];
    from_file(&[&convert[..], &[reference.to_str().unwrap()]].concat());
    let out = dir.join("out.data");
    for args in [
        vec!["dump"],
        [&convert[..], &[out.to_str().unwrap()]].concat(),
    ] {
        let mut child = Command::new(bin())
            .args(&args)
            .arg(&fifo)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        wait_until("the reader to open the FIFO", || {
            has_open(pid, &fifo) || child.try_wait().unwrap().is_some()
        });
        // still there a while later: waiting, not failed
        std::thread::sleep(std::time::Duration::from_millis(200));
        if child.try_wait().unwrap().is_some() {
            let o = child.wait_with_output().unwrap();
            panic!("{args:?} ended: {}", String::from_utf8_lossy(&o.stderr));
        }
        // non-blocking: with no reader this fails (ENXIO) instead of hanging
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        mmap2_synth::sys::set_blocking(w.as_fd()).unwrap();
        std::io::copy(&mut std::fs::File::open(&rec).unwrap(), &mut w).unwrap();
        drop(w);
        wait_until("the reader to finish", || {
            child.try_wait().unwrap().is_some()
        });
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        if args[0] == "dump" {
            assert_eq!(o.stdout, from_file(&["dump"]));
        } else {
            assert_eq!(
                std::fs::read(&out).unwrap(),
                std::fs::read(&reference).unwrap()
            );
        }
    }
}

/// Asserts that dump, convert and merge refuse `rec` (a file-mode recording
/// with data size 0: perf record killed) with exit 2 and a message saying so.
fn assert_unterminated(rec: &Path, dir: &Path) {
    let out = dir.join("out.data");
    for cmd in ["dump", "convert", "merge"] {
        let mut c = Command::new(bin());
        c.arg(cmd).arg(rec);
        if cmd == "convert" {
            c.args(["--to", "pipe"]);
        }
        if cmd != "dump" {
            c.arg("-o").arg(&out);
        }
        let o = c.stdin(Stdio::null()).output().unwrap();
        let err = assert_bad(&o, rec, "at offset 48: the header's data size is 0");
        assert!(
            err.contains("not terminated properly (perf record killed?)"),
            "{err}"
        );
        assert!(!out.exists());
    }
}

// A recording whose header says its data size is 0 (as perf record leaves
// it when killed: records where the feature table should be) is refused
// with exit 2 and says so, not "feature section ... runs past the end".
#[test]
fn a_recording_with_data_size_zero_says_perf_was_killed() {
    let dir = scratch("in-size0");
    let rec = dir.join("killed.data");
    let mut b = std::fs::read(pin("rec-file.data")).unwrap();
    b[48..56].fill(0);
    std::fs::write(&rec, b).unwrap();
    assert_unterminated(&rec, &dir);
}

// The same for a real perf record killed with SIGKILL while its workload ran.
#[test]
#[ignore = "needs perf record"]
fn a_recording_of_a_killed_perf_record_says_so() {
    use std::os::unix::process::CommandExt;
    needs_perf_record();
    let dir = scratch("in-killed");
    let rec = dir.join("killed.data");
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-g", "-o"])
        .arg(&rec)
        .args(["--", "sh", "-c", "while :; do :; done"])
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    // records written after the header and attrs (the data offset, at 40)
    wait_until("perf record to write records", || {
        let b = std::fs::read(&rec).unwrap_or_default();
        let at = b
            .get(40..48)
            .map(|o| u64::from_le_bytes(o.try_into().unwrap()));
        at.is_some_and(|at| at > 0 && b.len() as u64 > at)
    });
    let group = format!("-{}", perf.id());
    let st = Command::new("kill")
        .args(["-s", "KILL", "--", &group])
        .status();
    assert!(st.unwrap().success());
    wait_until("perf to die", || perf.try_wait().unwrap().is_some());
    assert_unterminated(&rec, &dir);
}

// Without this process's /proc (a chroot, a tmpfs over it) an input that
// exists cannot be reopened from its checked descriptor: a system failure
// (exit 1) that says so, not "no such file" (exit 2, the input's fault).
#[test]
#[ignore = "needs root (a private mount namespace)"]
fn input_without_proc_is_a_system_failure() {
    let rec = pin("rec-file.data");
    let script = format!(
        "mount -t tmpfs none /proc && exec '{}' dump '{}'",
        bin(),
        rec.display()
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is /proc mounted?"), "{err}");
    assert!(err.contains(rec.to_str().unwrap()), "{err}");
}

// One COMPRESSED record that expands to 256 MiB is refused at its offset
// (over the 64 MiB cap), with memory bounded by a record plus a chunk.
#[test]
fn decompression_bomb_is_refused_with_bounded_memory() {
    let dir = scratch("in-bomb");
    let payload = rounds_compressed(256 << 20);
    assert!(payload.len() < 60_000, "payload {} bytes", payload.len());
    let rec = dir.join("bomb.data");
    recording(&rec, &compressed_record(&payload));
    let out = dir.join("out.data");
    let o = Command::new("/usr/bin/time")
        .args(["-f", "maxrss=%M"])
        .arg(bin())
        .arg("merge")
        .arg(&rec)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("GNU time (/usr/bin/time, Debian package time)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("decompressed size"), "{err}");
    let rss: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("maxrss="))
        .and_then(|v| v.trim().parse().ok())
        .expect("GNU time's maxrss line");
    eprintln!("decompression bomb: peak RSS {rss} KiB");
    assert!(rss < 64 * 1024, "peak RSS {rss} KiB");
    assert!(!out.exists());
}

// A zstd frame cut short inside the last COMPRESSED record is an error, not
// silently missing records.
#[test]
fn truncated_zstd_frame_is_an_error() {
    let dir = scratch("in-trunc");
    let payload = rounds_compressed(1 << 20);
    let rec = dir.join("trunc.data");
    recording(&rec, &compressed_record(&payload[..payload.len() / 2]));
    assert_bad(&merge(&rec, &dir.join("o.data")), &rec, "compressed data");
}

/// Runs `mmap2-synth CMD IN [-o OUT] ARGS...` (no `-o` for dump), bounded
/// by a 120 s `timeout`.
fn run(cmd: &[&str], input: &Path, out: &Path) -> Output {
    let mut c = Command::new("timeout");
    c.arg("120").arg(bin()).arg(cmd[0]).arg(input);
    if cmd[0] != "dump" {
        c.arg("-o").arg(out);
    }
    c.args(&cmd[1..]).stdin(Stdio::null()).output().unwrap()
}

/// The files in `dir` other than `keep`.
fn others(dir: &Path, keep: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != keep)
        .collect()
}

// COMPRESSED records each under the per-record cap but together expanding
// past 1000 times their zstd bytes (and the 256 MiB floor) are refused at the
// record that passes the bound: dump and convert --decompress exit 2, and
// convert leaves no output (it wrote 6.3 GB for 560 KB).
#[test]
fn compressed_data_expanding_past_the_ratio_is_refused() {
    let dir = scratch("in-ratio");
    let frame = zstd::bulk::compress(&unknown_records(60 << 20, |_| 7), 19).unwrap();
    assert!(frame.len() < 60_000, "frame {} bytes", frame.len());
    let one = compressed2_record(&frame);
    let rec = dir.join("ratio.data");
    recording(&rec, &one.repeat(5));
    let file = std::fs::read(&rec).unwrap();
    let data_at = u64::from_le_bytes(file[40..48].try_into().unwrap());
    // 4 x 60 MiB stay under the floor; the fifth record passes it
    let at = format!("at offset {}:", data_at + 4 * one.len() as u64);
    let what = "compressed data decompresses to more than 1000 times its size";
    let out = dir.join("o.data");
    for cmd in [&["dump"][..], &["convert", "--decompress"]] {
        let err = assert_bad(&run(cmd, &rec, &out), &rec, what);
        assert!(err.contains(&at), "{err}");
    }
    assert!(others(&dir, &rec).is_empty(), "{:?}", others(&dir, &rec));
}

// COMPRESSED records nested 5 deep (each holding the next, the last a few
// FINISHED_ROUNDs) are refused by every command at the top-level record's
// offset, naming the limit, nothing written; 4 deep is read, its records
// counted one by one (the inner records were taken for plain ones).
#[test]
fn compressed_records_nested_too_deep_are_refused() {
    let dir = scratch("in-znest");
    let nested = |depth: u32| {
        let mut r = Vec::new();
        for _ in 0..3 {
            r.put_u32(Endian::Little, types::FINISHED_ROUND);
            r.put_u16(Endian::Little, 0);
            r.put_u16(Endian::Little, 8);
        }
        for _ in 0..depth {
            r = compressed2_record(&zstd::bulk::compress(&r, 1).unwrap());
        }
        r
    };
    let out = dir.join("o.data");
    let ok = dir.join("four.data");
    recording(&ok, &nested(4));
    let o = run(&["convert", "--decompress", "--to", "pipe"], &ok, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("3 records taken out of 1 COMPRESSED"), "{err}");
    std::fs::remove_file(&out).unwrap();

    let rec = dir.join("five.data");
    recording(&rec, &nested(5));
    let file = std::fs::read(&rec).unwrap();
    let data_at = u64::from_le_bytes(file[40..48].try_into().unwrap());
    let what = format!(
        "at offset {data_at}: compressed record: COMPRESSED records nested more than 4 deep"
    );
    for cmd in [
        &["dump"][..],
        &["convert", "--decompress"],
        &["convert", "--buildid-mmap2"],
        &["convert", "--to", "pipe"],
        &["pprof", "--no-symbolize"],
    ] {
        assert_bad(&run(cmd, &rec, &out), &rec, &what);
        assert!(!out.exists(), "{cmd:?}");
    }
    assert_bad(&merge(&rec, &out), &rec, &what);
    assert!(!out.exists());
}

// An AUXTRACE or HEADER_TRACING_DATA record inside a COMPRESSED one (their
// data follows them in the file, where the compressed record's neighbours
// are) is refused at the compressed record's offset by every command:
// convert --decompress copied the bytes after the compressed record as its
// data (exit 0), or failed "writing OUT: input shrank" (exit 1) when last.
#[test]
fn records_with_data_after_them_inside_compressed_records_are_refused() {
    let dir = scratch("in-zaux");
    let e = Endian::Little;
    let mut aux = Vec::new();
    aux.put_u32(e, types::AUXTRACE);
    aux.put_u16(e, 0);
    aux.put_u16(e, 48);
    aux.put_u64(e, 20_000); // AUX data size
    aux.resize(48, 0);
    let mut tracing = Vec::new();
    tracing.put_u32(e, types::HEADER_TRACING_DATA);
    tracing.put_u16(e, 0);
    tracing.put_u16(e, 16);
    tracing.put_u32(e, 20_000); // tracing data size
    tracing.put_u32(e, 0);
    let stream = std::fs::read(pin("rec-pipe.data")).unwrap();
    let out = dir.join("o.data");
    for (name, inner) in [("AUXTRACE", &aux), ("HEADER_TRACING_DATA", &tracing)] {
        for last in [false, true] {
            let mut f = stream.clone();
            let at = f.len();
            f.extend(compressed2_record(&zstd::bulk::compress(inner, 1).unwrap()));
            if !last {
                f.extend(unknown_records(40_000, |_| 0xab)); // not its data
            }
            let rec = dir.join(format!("{name}-{last}.data"));
            std::fs::write(&rec, &f).unwrap();
            let what = format!("at offset {at}: {name} inside a compressed record");
            for cmd in [
                &["dump"][..],
                &["convert", "--buildid-mmap2"],
                &["convert", "--decompress"],
                &["convert", "--to", "file"],
                &["pprof", "--no-symbolize"],
            ] {
                assert_bad(&run(cmd, &rec, &out), &rec, &what);
                assert!(!out.exists(), "{cmd:?}");
            }
            assert_bad(&merge(&rec, &out), &rec, &what);
        }
    }
}

/// A record of `type_` with this body (its size the body's plus 8).
fn record(type_: u32, body: &[u8]) -> Vec<u8> {
    let e = Endian::Little;
    let mut r = Vec::new();
    r.put_u32(e, type_);
    r.put_u16(e, 0);
    r.put_u16(e, u16::try_from(8 + body.len()).unwrap());
    r.extend_from_slice(body);
    r
}

/// Asserts every command refuses `rec` (exit 2, `what` named once, no
/// output left).
fn refused_by_every_command(rec: &Path, what: &str) {
    let out = rec.with_extension("out");
    for cmd in [
        &["dump"][..],
        &["dump", "--sort"],
        &["convert", "--buildid-mmap2"],
        &["convert", "--to", "file"],
        &["convert", "--to", "pipe"],
        &["convert", "--decompress"],
        &["convert", "--portable"],
        &["pprof", "--no-symbolize"],
    ] {
        assert_bad(&run(cmd, rec, &out), rec, what);
        assert!(!out.exists(), "{cmd:?}");
    }
    assert_bad(&merge(rec, &out), rec, what);
    assert!(!out.exists());
}

// Records dump, merge and pprof refuse as malformed are refused by every
// command, at the same offset, wherever they are (found by fuzz/mutate.py):
// convert copied a FORK or MMAP of 8 bytes (merge a KSYMBOL), a HEADER_ATTR
// of attr.size 0 in a file's data section (a stream's attr once written
// --to pipe) and a malformed MMAP inside a stream's COMPRESSED record,
// exit 0, into outputs its own dump refused.
#[test]
fn records_one_reader_refuses_every_reader_refuses() {
    let dir = scratch("in-malformed");
    let e = Endian::Little;
    let data_at = |rec: &Path| {
        let f = std::fs::read(rec).unwrap();
        u64::from_le_bytes(f[40..48].try_into().unwrap())
    };
    // an 8-byte FORK, MMAP and KSYMBOL after a whole FORK (24 bytes and a
    // trailer); merge copied the KSYMBOL
    for t in [types::FORK, types::MMAP, types::KSYMBOL] {
        let good = record(types::FORK, &[0; 24 + 24]);
        let rec = dir.join(format!("short-{t}.data"));
        recording(&rec, &[good.clone(), record(t, &[])].concat());
        let at = data_at(&rec) + good.len() as u64;
        refused_by_every_command(
            &rec,
            &format!("at offset {at}: malformed record of type {t}"),
        );
    }
    // a HEADER_ATTR whose attr.size is 0 in a file's data section
    let mut attr = Attr::default().encode(e);
    attr[4..8].copy_from_slice(&0u32.to_le_bytes());
    attr.put_u64(e, 7);
    let rec = dir.join("attr.data");
    recording(&rec, &record(types::HEADER_ATTR, &attr));
    let at = data_at(&rec);
    refused_by_every_command(
        &rec,
        &format!("at offset {at}: HEADER_ATTR with attr.size 0"),
    );
    // a stream whose COMPRESSED record holds an 8-byte MMAP
    let mut stream = std::fs::read(pin("rec-pipe.data")).unwrap();
    let at = stream.len();
    let inner = zstd::bulk::compress(&record(types::MMAP, &[]), 1).unwrap();
    stream.extend_from_slice(&compressed2_record(&inner));
    let rec = dir.join("zmmap.data");
    std::fs::write(&rec, &stream).unwrap();
    refused_by_every_command(&rec, &format!("at offset {at}: malformed record of type 1"));
    // the fuzzer's own finds, minimized (fixtures/fuzz/perf_file/mutate-*)
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz/perf_file");
    for (name, what) in [
        (
            "mutate-attr-size-0",
            "at offset 256: HEADER_ATTR with attr.size 0",
        ),
        (
            "mutate-short-attr",
            "at offset 264: perf_event_attr truncated",
        ),
        (
            "mutate-short-fork",
            "at offset 256: malformed record of type 7",
        ),
    ] {
        let rec = dir.join(name);
        std::fs::copy(fuzz.join(name), &rec).unwrap();
        refused_by_every_command(&rec, what);
    }
}

// 200 attrs naming one 16 MiB id section are refused quickly (the ids may
// not add up to more than the file holds).
#[test]
fn id_sections_larger_than_the_file_are_refused() {
    let dir = scratch("in-ids");
    let e = Endian::Little;
    let ids_at = 104u64;
    let ids_size = 16u64 << 20;
    let attrs_at = ids_at + ids_size;
    let entry = 128 + 16;
    let data_at = attrs_at + 200 * entry;
    let mut f = Vec::new();
    f.extend_from_slice(b"PERFILE2");
    for v in [
        104,
        entry,
        attrs_at,
        200 * entry,
        data_at,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ] {
        f.put_u64(e, v);
    }
    f.resize(attrs_at as usize, 0);
    for _ in 0..200 {
        f.extend_from_slice(&Attr::default().encode(e));
        f.put_u64(e, ids_at);
        f.put_u64(e, ids_size);
    }
    let rec = dir.join("ids.data");
    std::fs::write(&rec, &f).unwrap();
    let started = std::time::Instant::now();
    assert_bad(&merge(&rec, &dir.join("o.data")), &rec, "event id sections");
    assert!(started.elapsed().as_secs() < 30);
}

// An id section that runs into the data section is refused by every
// command (a merge copied its ids up to the data section and left zeros
// for the rest: ids changed without a word).
#[test]
fn an_id_section_running_into_the_data_section_is_refused() {
    let dir = scratch("in-ids-data");
    let e = Endian::Little;
    let entry = 128 + 16;
    let (attrs_at, ids_at, data_at) = (104u64, 264u64, 280u64);
    let mut f = Vec::new();
    f.extend_from_slice(b"PERFILE2");
    for v in [104, entry, attrs_at, entry, data_at, 16, 0, 0, 0, 0, 0, 0] {
        f.put_u64(e, v);
    }
    f.extend_from_slice(&Attr::default().encode(e));
    f.put_u64(e, ids_at);
    f.put_u64(e, 32);
    f.resize(ids_at as usize, 0);
    f.put_u64(e, 7);
    f.put_u64(e, 8);
    for _ in 0..2 {
        f.put_u32(e, 12); // FINISHED_ROUND
        f.put_u16(e, 0);
        f.put_u16(e, 8);
    }
    assert_eq!(f.len() as u64, data_at + 16);
    let rec = dir.join("ids.data");
    std::fs::write(&rec, &f).unwrap();
    refused_by_every_command(&rec, "an event id section in or after the data section");
}

// AUXTRACE records (their AUX data follows the record) pass through byte for
// byte and the records after them are still found.
#[test]
fn auxtrace_data_is_stepped_over_and_kept() {
    let dir = scratch("in-aux");
    let e = Endian::Little;
    let mut data = Vec::new();
    data.put_u32(e, types::AUXTRACE);
    data.put_u16(e, 0);
    data.put_u16(e, 48);
    for v in [1000u64, 0, 7] {
        data.put_u64(e, v);
    }
    for v in [0u32, 100, 0, 0] {
        data.put_u32(e, v);
    }
    data.extend((0..1000u32).map(|i| (i * 7) as u8)); // AUX data, not records
    data.put_u32(e, types::COMM);
    data.put_u16(e, 0);
    data.put_u16(e, 8 + 8 + 8 + 16);
    data.put_u32(e, 100);
    data.put_u32(e, 100);
    data.extend_from_slice(b"pin100\0\0");
    data.put_u64(e, 0); // TID trailer
    data.put_u64(e, 0); // TIME trailer
    let rec = dir.join("aux.data");
    recording(&rec, &data);
    let out = dir.join("o.data");
    let o = merge(&rec, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let merged = std::fs::read(&out).unwrap();
    let u = |o: usize| u64::from_le_bytes(merged[o..o + 8].try_into().unwrap()) as usize;
    let (off, size) = (u(40), u(48));
    assert_eq!(&merged[off + size - data.len()..off + size], &data[..]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("file-mode 2 records"), "{err}");
}

// perf's stderr appended to a pipe-mode recording is kept byte for byte with
// a warning naming its offset; file mode stays strict.
#[test]
fn trailing_text_after_a_pipe_stream_is_kept_with_a_warning() {
    let dir = scratch("in-trail");
    let mut rec = std::fs::read(pin("rec-pipe.data")).unwrap();
    let at = rec.len();
    rec.extend_from_slice(b"[ perf record: Captured and wrote 0.003 MB (null) ]\n");
    let path = dir.join("trail.data");
    std::fs::write(&path, &rec).unwrap();
    let out = dir.join("o.data");
    let o = merge(&path, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("from offset {at} on are not records")),
        "{err}"
    );
    assert!(std::fs::read(&out).unwrap().ends_with(&rec[at..]));
    let mut file = std::fs::read(pin("rec-file.data")).unwrap();
    let u = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap()) as usize;
    let data_end = u(40) + u(48);
    file[data_end - 2] = 0xff; // the last record now claims to run past the end
    file[data_end - 1] = 0xff;
    let strict = dir.join("strict.data");
    std::fs::write(&strict, &file).unwrap();
    assert_eq!(merge(&strict, &dir.join("s.data")).status.code(), Some(2));
}

// Only lines are perf's text: a pipe stream with one printable byte after
// its last record (a cut one byte into the next: FINISHED_ROUND's `D`), or
// text with no newline at its end, is stray bytes at that offset, exit 2.
#[test]
fn a_byte_of_a_cut_record_is_not_taken_for_text() {
    let dir = scratch("in-trail-byte");
    let rec = std::fs::read(pin("rec-pipe.data")).unwrap();
    for tail in [&b"D"[..], b"[ perf record: Captured and wrote 0.003 MB ]"] {
        let path = dir.join("cut.data");
        std::fs::write(&path, [&rec[..], tail].concat()).unwrap();
        let o = merge(&path, &dir.join("o.data"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{tail:?}: {err}");
        assert!(
            err.contains(&format!("offset {}", rec.len())),
            "{tail:?}: {err}"
        );
        assert!(!dir.join("o.data").exists(), "{tail:?}: no output");
    }
}

// An MMAP2 too short for its fields is named as such (one whose build-id
// size is over 20 is the kernel's inode body under a leaked flag, read as
// such: `leaked_build_id_flags_are_read_and_repaired`); a bad magic is
// reported once with its offset.
#[test]
fn messages_say_what_was_wrong_once() {
    let dir = scratch("in-msg");
    let e = Endian::Little;
    let mut data = Vec::new();
    data.put_u32(e, types::MMAP2);
    data.put_u16(e, 2 | (1 << 14));
    data.put_u16(e, 8 + 40);
    data.put_u32(e, 100);
    data.put_u32(e, 100);
    for v in [0x1000u64, 0x1000, 0] {
        data.put_u64(e, v);
    }
    data.extend_from_slice(&[0; 8]);
    let rec = dir.join("mmap2.data");
    recording(&rec, &data);
    assert_bad(
        &merge(&rec, &dir.join("o.data")),
        &rec,
        "malformed record of type 10",
    );
    let bad = dir.join("bad.data");
    std::fs::write(&bad, b"NOTPERF!xxxxxxxxxxxxxxxxxxxxxx").unwrap();
    let err = assert_bad(&merge(&bad, &dir.join("o.data")), &bad, "bad magic");
    assert!(err.contains("at offset 0"), "{err}");
}

// A full disk during a merge names the output and says writing.
#[test]
#[ignore = "needs root (a small tmpfs in a private mount namespace)"]
fn full_disk_names_the_output() {
    needs_root("mount a 1 MiB tmpfs");
    let dir = scratch("in-full");
    let big = dir.join("big.data");
    recording(&big, &unknown_records(8 << 20, |_| 1));
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=1m none '{m}' && '{b}' merge '{i}' -o '{m}/out.data' -p 1",
        m = mnt.display(),
        b = bin(),
        i = big.display()
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: writing") && err.contains("out.data"),
        "{err}"
    );
    assert!(err.contains("No space left"), "{err}");
}

// A merge moves the AUXTRACE records, and the HEADER_AUXTRACE index (where
// perf looks for the trace data) moves with them.
#[test]
fn auxtrace_index_follows_the_records() {
    use mmap2_synth::perf::consts::feature;
    use mmap2_synth::perf::{writer::write_file, EventDesc, FeatureTable, FileHeader, Metadata};
    let dir = scratch("in-auxidx");
    let e = Endian::Little;
    let mut data = Vec::new();
    data.put_u32(e, types::AUXTRACE);
    data.put_u16(e, 0);
    data.put_u16(e, 48);
    for v in [64u64, 0, 7] {
        data.put_u64(e, v);
    }
    for v in [0u32, 100, 0, 0] {
        data.put_u32(e, v);
    }
    data.extend([0xa5; 64]);
    // header 104 + one attr entry (128 + 16): the data section starts at 248
    let mut index = Vec::new();
    for v in [1u64, 248, 48 + 64] {
        index.put_u64(e, v);
    }
    let meta = Metadata {
        endian: e,
        events: vec![EventDesc {
            attr: Attr::default(),
            name: b"intel_pt//".to_vec(),
            ids: vec![],
        }],
        features: vec![(feature::AUXTRACE, index)],
        build_ids: vec![],
    };
    let rec = dir.join("pt.data");
    let mut f = std::fs::File::create(&rec).unwrap();
    write_file(&mut f, &meta, &data).unwrap();
    drop(f);
    assert_eq!(
        FileHeader::parse(&std::fs::read(&rec).unwrap()[..104], 1 << 20)
            .unwrap()
            .data
            .offset,
        248
    );
    let out = dir.join("o.data");
    let o = merge(&rec, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = std::fs::read(&out).unwrap();
    let h = FileHeader::parse(&m[..104], m.len() as u64).unwrap();
    let at = h.feature_table_offset() as usize;
    let t = FeatureTable::parse(
        &m[at..at + 16 * h.features.iter().count()],
        e,
        &h.features,
        at as u64,
        m.len() as u64,
    )
    .unwrap();
    let (_, s) = t.0.iter().find(|(b, _)| *b == feature::AUXTRACE).unwrap();
    let entry = u64::from_le_bytes(
        m[s.offset as usize + 8..s.offset as usize + 16]
            .try_into()
            .unwrap(),
    );
    assert_ne!(entry, 248, "the index still points at the old place");
    let rec_at = entry as usize;
    assert_eq!(&m[rec_at..rec_at + 4], &types::AUXTRACE.to_le_bytes());
    assert_eq!(&m[rec_at + 48..rec_at + 48 + 64], &[0xa5; 64]);
}

// A snapshot (--maps) naming a thread with a 300-byte comm is bad input
// (exit 2, naming the snapshot), not an internal error.
#[test]
fn overlong_comm_in_a_snapshot_is_bad_input() {
    let dir = scratch("in-comm");
    let e = Endian::Little;
    let mut data = Vec::new();
    data.put_u32(e, types::COMM);
    data.put_u16(e, 0);
    data.put_u16(e, 8 + 8 + 304);
    data.put_u32(e, 100);
    data.put_u32(e, 100);
    data.extend([b'x'; 300]);
    data.extend([0; 4]);
    let snap = dir.join("snap.data");
    write_recording(&snap, Attr::default(), vec![], &data);
    let o = Command::new(bin())
        .arg("merge")
        .arg(pin("rec-file.data"))
        .arg("-o")
        .arg(dir.join("o.data"))
        .arg("--maps")
        .arg(&snap)
        .args(["-p", "100"])
        .output()
        .unwrap();
    assert_bad(&o, &snap, "malformed record of type 3");
}

// A recording that does not exist is the user's mistake, not the system's:
// every command that reads one exits 2 with one line naming it, writes nothing.
#[test]
fn missing_input_is_bad_input() {
    let d = scratch("missing-input");
    let gone = d.join("no-such.data");
    let out = d.join("out");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let runs: Vec<Vec<String>> = vec![
        vec!["dump".into(), s(&gone)],
        vec![
            "merge".into(),
            s(&gone),
            "-o".into(),
            s(&out),
            "--maps".into(),
            s(&pin("snap-le.data")),
        ],
        vec![
            "merge".into(),
            s(&pin("snap-le.data")),
            "-o".into(),
            s(&out),
            "--maps".into(),
            s(&gone),
        ],
        vec![
            "convert".into(),
            s(&gone),
            "-o".into(),
            s(&out),
            "--portable".into(),
        ],
        vec!["pprof".into(), s(&gone), "-o".into(), s(&out)],
        vec![
            "archive".into(),
            "--from".into(),
            s(&gone),
            "-o".into(),
            s(&out),
        ],
    ];
    // a path through a file (ENOTDIR) names nothing either
    let plain = d.join("plain");
    std::fs::write(&plain, b"x").unwrap();
    let through = plain.join("x.data");
    let o = synth(["dump".as_ref(), through.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for args in runs {
        let o = synth(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(&s(&gone)),
            "{args:?}: {err}"
        );
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    // and a malformed --from makes no archive directory either
    let junk = d.join("junk.data");
    std::fs::write(&junk, [b'x'; 200]).unwrap();
    let o = synth([
        "archive".as_ref(),
        "--from".as_ref(),
        junk.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists(), "archive of junk made {}", out.display());
}

// archive --from a recording whose header is sound but whose first record
// is not (a 4-byte size) fails with exit 2 naming the file and offset,
// and takes away the -o directories it made (two levels), none left empty.
#[test]
fn archive_from_a_file_damaged_after_its_header_leaves_no_directory() {
    let d = scratch("in-archive-bad");
    let e = Endian::Little;
    let mut data = Vec::new();
    data.put_u32(e, types::COMM);
    data.put_u16(e, 0);
    data.put_u16(e, 4); // shorter than a record header
    data.extend([0u8; 28]);
    let rec = d.join("bad.data");
    recording(&rec, &data);
    let out = d.join("new").join("cache");
    let o = synth([
        "archive".as_ref(),
        "--from".as_ref(),
        rec.as_os_str(),
        "--no-kernel".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let err = assert_bad(&o, &rec, "at offset ");
    assert!(!d.join("new").exists(), "left {}: {err}", out.display());
}

/// `n` COMPRESSED2 records, each `mib` MiB of the same four MMAP2 records
/// (one process's libc maps, inode form, a TIME trailer each) repeated:
/// what benches/gen_zmmap_bomb.py writes, in file mode.
fn map_bomb(path: &Path, n: usize, mib: usize, one_address: bool) {
    let mut cycle = Vec::new();
    let maps = [
        (0x7f00_0000_0000u64, 0x28000u64, 0u64, 1u32),
        (0x7f00_0002_8000, 0x195000, 0x28000, 5),
        (0x7f00_001b_d000, 0x58000, 0x1bd000, 1),
        (0x7f00_0021_5000, 0x6000, 0x214000, 3),
    ];
    for (i, (addr, len, pgoff, prot)) in maps.into_iter().enumerate() {
        // all at the first's address: four maps alternating there
        let addr = if one_address { maps[0].0 } else { addr };
        let map = (addr, len, pgoff, prot);
        cycle.extend(libc_map_record(999_999_999, map, 1000 + i as u64));
    }
    let plain = cycle.repeat((mib << 20) / cycle.len());
    let frame = zstd::bulk::compress(&plain, 19).unwrap();
    assert!(frame.len() < 60_000, "frame {} bytes", frame.len());
    recording(path, &compressed2_record(&frame).repeat(n));
}

/// An MMAP2 record of pid (and tid) `pid` mapping libc at (address,
/// length, file offset, prot), with a TID+TIME trailer at `time`.
fn libc_map_record(pid: u32, (addr, len, pgoff, prot): (u64, u64, u64, u32), time: u64) -> Vec<u8> {
    let e = Endian::Little;
    let mut body = Vec::new();
    for v in [pid, pid] {
        body.put_u32(e, v);
    }
    for v in [addr, len, pgoff] {
        body.put_u64(e, v);
    }
    body.put_u32(e, 8);
    body.put_u32(e, 1);
    body.put_u64(e, 1_234_567);
    body.put_u64(e, 0);
    body.put_u32(e, prot);
    body.put_u32(e, 2); // MAP_PRIVATE
    body.extend_from_slice(b"/usr/lib/x86_64-linux-gnu/libc.so.6\0");
    body.pad_to(8);
    for v in [pid, pid] {
        body.put_u32(e, v); // trailer: TID, then TIME
    }
    body.put_u64(e, time);
    let mut r = Vec::new();
    r.put_u32(e, types::MMAP2);
    r.put_u16(e, 2);
    r.put_u16(e, u16::try_from(8 + body.len()).unwrap());
    r.extend_from_slice(&body);
    r
}

// A host-sized snapshot (2,000 processes x 150 distinct maps, 36 MB) merged
// into a recording holds only the processes it inserts: `merge --maps`
// (the recording's own pids, none of them here) and `-p` of one snapshot
// process peak under 16 MiB (~65 MiB when the whole snapshot was held),
// and `-p` inserts that process's 150 maps whole.
#[test]
fn merge_holds_only_the_snapshot_processes_it_inserts() {
    let dir = scratch("in-bigsnap");
    let snap = dir.join("snap.data");
    let mut data = Vec::new();
    for p in 0..2000u32 {
        for m in 0..150u64 {
            let addr = 0x7f00_0000_0000 + m * 0x10_0000;
            data.extend(libc_map_record(
                100_000 + p,
                (addr, 0x1000, m << 12, 5),
                1000,
            ));
        }
    }
    recording(&snap, &data);
    drop(data);
    let (rec, out) = (pin("rec-file.data"), dir.join("o.data"));
    let o = std::ffi::OsString::from;
    let runs = [
        (&["-p", "101234"][..], " 150 maps,", 16),
        (&[][..], " 0 maps,", 16),
        (&["-a"][..], " 300000 maps,", 32),
    ];
    for (which, inserted, mib) in runs {
        let mut args = vec![
            o("merge"),
            rec.clone().into(),
            o("--maps"),
            snap.clone().into(),
        ];
        args.extend(which.iter().map(|a| o(a)));
        args.extend([o("-o"), out.clone().into()]);
        let (code, err, rss) = peak_rss(&args);
        assert_eq!(code, Some(0), "{which:?}: {err}");
        eprintln!("merge --maps of 300,000 maps, {which:?}: peak RSS {rss} KiB");
        assert!(rss < mib * 1024, "{which:?}: peak RSS {rss} KiB");
        assert!(err.contains(inserted), "{which:?}: {err}");
    }
}

// A snapshot read window by window (a window of a few processes, forced
// by the test hook; the processes' maps and COMMs taking turns in the
// file, as a watched snapshot's late records do) merges into the same
// bytes as when held whole, for `-a`, `-p` of many pids and in pipe mode.
#[test]
fn merge_of_a_snapshot_in_windows_is_the_same_as_held_whole() {
    let dir = scratch("in-windows");
    let snap = dir.join("snap.data");
    let mut data = Vec::new();
    for m in 0..20u64 {
        for p in 0..300u32 {
            let addr = 0x7f00_0000_0000 + ((m * 7 + u64::from(p)) % 20) * 0x10_0000;
            data.extend(libc_map_record(
                200 + p,
                (addr, 0x1000, m << 12, 5),
                1000 + m,
            ));
        }
    }
    recording(&snap, &data);
    let pids: Vec<String> = (0..300).step_by(3).map(|p| (200 + p).to_string()).collect();
    let pids = pids.join(",");
    for (rec, which) in [
        ("rec-file.data", &["-a"][..]),
        ("rec-file.data", &["-p", &pids][..]),
        ("rec-pipe.data", &["-a"][..]),
    ] {
        let mut outs = Vec::new();
        for window in [None, Some("20000")] {
            let out = dir.join("o.data");
            let mut cmd = Command::new(bin());
            cmd.args([
                "merge".as_ref(),
                pin(rec).as_os_str(),
                "--maps".as_ref(),
                snap.as_os_str(),
            ]);
            cmd.args(which).arg("-o").arg(&out);
            if let Some(w) = window {
                cmd.env("MMAP2_SYNTH_TEST_WINDOW_BYTES", w);
            }
            let o = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "{rec} {which:?}: {err}");
            outs.push(std::fs::read(&out).unwrap());
        }
        assert!(
            outs[0].len() > 100 * 20 * 100,
            "{rec} {which:?}: {} bytes",
            outs[0].len()
        );
        assert!(
            outs[0] == outs[1],
            "{rec} {which:?}: windows change the output"
        );
    }
}

/// Runs mmap2-synth with `args` under GNU time (stdout discarded): exit
/// status, stderr, peak RSS in KiB.
fn peak_rss(args: &[std::ffi::OsString]) -> (Option<i32>, String, u64) {
    let o = Command::new("/usr/bin/time")
        .args(["-f", "maxrss=%M"])
        .arg(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("GNU time (/usr/bin/time, Debian package time)");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let rss = err
        .lines()
        .find_map(|l| l.strip_prefix("maxrss="))
        .and_then(|v| v.trim().parse().ok())
        .expect("GNU time's maxrss line");
    (o.status.code(), err, rss)
}

// 72 MiB of four map records repeated in three compressed records (under
// the bomb bound) cost memory by their distinct content, not by that size
// (every limit is below it): archive --from and merge --maps hold one entry
// per distinct file or map run, dump --sort 16 bytes per repeat (each
// 300-350 MiB of a 3 x 40 MiB bomb before, holding decoded copies); merge
// -a -d --maps writes every map, encoding each run once as it writes (~300
// MiB before, all the records built in memory); the same with the four maps
// alternating at one address (merge held a copy of each record then: 142
// MiB).
#[test]
fn compressed_map_bombs_are_held_by_distinct_content() {
    for one_address in [false, true] {
        map_bomb_is_held_by_distinct_content(one_address);
    }
}

/// MiB of map records in each of the map bomb's three compressed records:
/// 72 MiB in all, over every peak RSS limit of its test (3 x 40 MiB made
/// the test run 86 s in debug builds; the peaks measured then were 20 MiB,
/// 30 MiB with -a -d and 36 MiB for dump --sort).
const BOMB_MIB: usize = 24;

/// [`compressed_map_bombs_are_held_by_distinct_content`], its four maps at
/// four addresses or alternating at one.
fn map_bomb_is_held_by_distinct_content(one_address: bool) {
    let dir = scratch("in-zmaps");
    let bomb = dir.join("bomb.data");
    map_bomb(&bomb, 3, BOMB_MIB, one_address);
    assert!(std::fs::metadata(&bomb).unwrap().len() < 100_000);
    let (cache, out) = (dir.join("cache"), dir.join("o.data"));
    let args = |a: &[&Path]| -> Vec<std::ffi::OsString> {
        a.iter().map(|p| p.as_os_str().to_owned()).collect()
    };
    let p = Path::new;
    let archive = args(&[
        p("archive"),
        p("--from"),
        &bomb,
        p("--no-kernel"),
        p("-o"),
        &cache,
    ]);
    let rec = pin("rec-file.data");
    let runs = [
        ("archive --from", archive.clone(), 48),
        (
            "merge --maps",
            args(&[p("merge"), &rec, p("--maps"), &bomb, p("-o"), &out]),
            48,
        ),
        (
            // (-d: three of the four are data maps, left out without it)
            "merge -a -d --maps",
            args(&[
                p("merge"),
                &rec,
                p("-a"),
                p("-d"),
                p("--maps"),
                &bomb,
                p("-o"),
                &out,
            ]),
            48,
        ),
        ("dump --sort", args(&[p("dump"), p("--sort"), &bomb]), 64),
    ];
    let maps = 3 * ((BOMB_MIB << 20) / 512) * 4;
    for (what, args, mib) in runs {
        let (code, err, rss) = peak_rss(&args);
        let what = format!("{what} (one address: {one_address})");
        assert_eq!(code, Some(0), "{what}: {err}");
        eprintln!("{what} of a compressed map bomb: peak RSS {rss} KiB");
        assert!(rss < mib * 1024, "{what}: peak RSS {rss} KiB");
        if what.starts_with("merge -a -d --maps") {
            // every map written, as the file has it
            assert!(err.contains(&format!(" {maps} maps,")), "{err}");
            // (an MMAP2 of that name is 112 bytes before its trailer)
            let len = std::fs::metadata(&out).unwrap().len();
            assert!(len >= maps as u64 * 112, "{len} bytes");
        }
    }
    // every map is still counted (archive), tried once
    let (_, err, _) = peak_rss(&archive);
    assert!(err.contains(&format!(" {maps} unreadable")), "{err}");
}

/// `dump ARGS -` of `rec` followed by endless zeros on stdin, with its
/// temporary files in `tmp`: the output, failing the test after 20 s.
fn dump_of_endless_zeros(rec: &Path, tmp: &Path, args: &[&str]) -> Output {
    let mut feeder = Command::new("sh")
        .arg("-c")
        .arg(format!("cat '{}'; exec cat /dev/zero", rec.display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut dump = Command::new(bin())
        .arg("dump")
        .args(args)
        .arg("-")
        .env("TMPDIR", tmp)
        .stdin(feeder.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while dump.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = dump.kill();
            let _ = feeder.kill();
            let _ = (dump.wait(), feeder.wait());
            panic!("dump of a stream of endless zeros still running after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = feeder.kill();
    let _ = feeder.wait();
    dump.wait_with_output().unwrap()
}

// A stream whose records are followed by endless zeros is read only to the
// first zero header (nothing spooled after it, no disk filled): exit 2
// naming --salvage, and with --salvage the records before it, exit 0.
#[test]
fn a_stream_followed_by_endless_zeros_ends_at_the_first_zero_header() {
    let dir = scratch("endless-zeros");
    let rec = pin("rec-pipe.data");
    let len = std::fs::metadata(&rec).unwrap().len();
    let o = dump_of_endless_zeros(&rec, &dir, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("at offset {len}")), "{err}");
    assert!(err.contains("--salvage"), "{err}");
    let o = dump_of_endless_zeros(&rec, &dir, &["--salvage"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("cut short"), "{err}");
    let whole = synth_ok(["dump".as_ref(), rec.as_os_str()]);
    assert_eq!(o.stdout, whole.stdout);
}
