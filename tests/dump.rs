//! `mmap2-synth dump` and `--json` end to end: the lines of snapshots and of
//! real perf recordings (file, pipe, compressed) agree field by field with
//! linux-perf-data's decoding of the same file.

mod common;

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

/// One decoded record, as both sides can state it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Rec {
    Map {
        v2: bool,
        pid: i32,
        tid: i32,
        time: Option<u64>,
        start: u64,
        len: u64,
        pgoff: u64,
        /// MMAP2 only: prot, flags.
        prot_flags: Option<(u32, u32)>,
        build_id: Option<String>,
        dev_ino: Option<(u32, u32, u64)>,
        path: Vec<u8>,
        cpumode: u16,
    },
    Comm {
        pid: i32,
        tid: i32,
        time: Option<u64>,
        comm: Vec<u8>,
        exec: bool,
    },
    Task {
        fork: bool,
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
        time: u64,
    },
    BuildId {
        build_id: String,
        path: Vec<u8>,
    },
}

/// Undoes the dump's escaping (`\\` and `\xNN`), so paths compare as bytes.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') {
            let hex = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 4;
        } else {
            assert_ne!(b[i], b'\\', "lone backslash in {s:?}");
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The records of `dump --json` output.
fn from_json(text: &str) -> Vec<Rec> {
    let mut out = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {line}"));
        let i = |k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k} in {line}")) as i32;
        let s = |k: &str| unescape(v[k].as_str().unwrap_or_else(|| panic!("{k} in {line}")));
        let time = v["time"].as_u64();
        let kind = v["kind"].as_str().unwrap();
        out.push(match kind {
            "mmap" | "mmap2" => Rec::Map {
                v2: kind == "mmap2",
                pid: i("pid"),
                tid: i("tid"),
                time,
                start: u("start"),
                len: u("len"),
                pgoff: u("pgoff"),
                prot_flags: (kind == "mmap2").then(|| (u("prot") as u32, u("flags") as u32)),
                build_id: v["build_id"].as_str().map(str::to_string),
                dev_ino: v["ino"]
                    .as_u64()
                    .map(|ino| (u("maj") as u32, u("min") as u32, ino)),
                path: s("path"),
                cpumode: u("cpumode") as u16,
            },
            "comm" => Rec::Comm {
                pid: i("pid"),
                tid: i("tid"),
                time,
                comm: s("comm"),
                exec: v["exec"].as_bool().unwrap(),
            },
            "fork" | "exit" => Rec::Task {
                fork: kind == "fork",
                pid: i("pid"),
                ppid: i("ppid"),
                tid: i("tid"),
                ptid: i("ptid"),
                time: u("time"),
            },
            "build_id" => Rec::BuildId {
                build_id: v["build_id"].as_str().unwrap().to_string(),
                path: s("path"),
            },
            other => panic!("unknown kind {other}"),
        });
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The records of a perf.data file (file mode) or stream (pipe mode) as
/// linux-perf-data decodes them: its event records, then its build ids.
fn from_linux_perf_data(bytes: &[u8], pipe: bool) -> Vec<Rec> {
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    use linux_perf_event_reader::{EventRecord, Mmap2FileId};
    let cur = std::io::Cursor::new(bytes);
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = if pipe {
        PerfFileReader::parse_pipe(cur).unwrap()
    } else {
        PerfFileReader::parse_file(cur).unwrap()
    };
    let mut out = Vec::new();
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        let PerfFileRecord::EventRecord { record, .. } = r else {
            continue;
        };
        let time = record.timestamp();
        let cpumode = record.misc & 7;
        match record.parse().unwrap() {
            EventRecord::Mmap(m) => out.push(Rec::Map {
                v2: false,
                pid: m.pid,
                tid: m.tid,
                time,
                start: m.address,
                len: m.length,
                pgoff: m.page_offset,
                prot_flags: None,
                build_id: None,
                dev_ino: None,
                path: m.path.as_slice().to_vec(),
                cpumode,
            }),
            EventRecord::Mmap2(m) => {
                let (build_id, dev_ino) = match &m.file_id {
                    Mmap2FileId::BuildId(b) => (Some(hex(b)), None),
                    Mmap2FileId::InodeAndVersion(i) => (None, Some((i.major, i.minor, i.inode))),
                };
                out.push(Rec::Map {
                    v2: true,
                    pid: m.pid,
                    tid: m.tid,
                    time,
                    start: m.address,
                    len: m.length,
                    pgoff: m.page_offset,
                    prot_flags: Some((m.protection, m.flags)),
                    build_id,
                    dev_ino,
                    path: m.path.as_slice().to_vec(),
                    cpumode,
                })
            }
            EventRecord::Comm(c) => out.push(Rec::Comm {
                pid: c.pid,
                tid: c.tid,
                time,
                comm: c.name.as_slice().to_vec(),
                exec: c.is_execve,
            }),
            EventRecord::Fork(f) | EventRecord::Exit(f) => out.push(Rec::Task {
                fork: record.record_type.0 == 7,
                pid: f.pid,
                ppid: f.ppid,
                tid: f.tid,
                ptid: f.ptid,
                time: f.timestamp,
            }),
            _ => {}
        }
    }
    if !pipe {
        for info in perf_file.build_ids().unwrap().values() {
            out.push(Rec::BuildId {
                build_id: hex(&info.build_id),
                path: info.path.clone(),
            });
        }
    }
    out
}

/// `mmap2-synth dump --json FILE` (or stdin when `file` is "-" and `stdin` given).
fn dump_json(file: &Path, extra: &[&str]) -> String {
    let mut args: Vec<&std::ffi::OsStr> = vec!["dump".as_ref(), "--json".as_ref()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.push(file.as_os_str());
    String::from_utf8(synth_ok(args).stdout).unwrap()
}

/// Runs `dump --json -` with `bytes` on stdin.
fn dump_json_stdin(bytes: &[u8]) -> String {
    let mut child = Command::new(bin())
        .args(["dump", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = bytes.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(
        out.status.success(),
        "dump -: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Checks that dump and linux-perf-data see the same records: the same
/// multiset (linux-perf-data reorders by time), and at least `min_maps` maps.
fn assert_agree(json: &str, bytes: &[u8], pipe: bool, min_maps: usize) -> Vec<Rec> {
    let mut ours = from_json(json);
    let mut theirs = from_linux_perf_data(bytes, pipe);
    if pipe {
        // linux-perf-data keeps pipe-mode HEADER_BUILD_ID records to itself.
        ours.retain(|r| !matches!(r, Rec::BuildId { .. }));
    }
    let maps = ours.iter().filter(|r| matches!(r, Rec::Map { .. })).count();
    assert!(maps >= min_maps, "only {maps} maps:\n{json}");
    let in_order = ours.clone();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
    in_order
}

// A snapshot's dump (file, and pipe mode on stdin) is what linux-perf-data
// decodes, build ids and non-UTF-8 paths included, and the live `--json`
// lines equal the dump of the snapshot the same run would write.
#[test]
fn dump_of_snapshot_agrees_with_linux_perf_data() {
    let f = fixtures();
    let dir = scratch("dump-snap");
    // A library whose path is not UTF-8 and holds a newline and a backslash.
    let weird = dir.join(std::ffi::OsStr::from_bytes(b"lib\xff\nodd\\name.so"));
    std::fs::copy(&f.lib_sha1, &weird).unwrap();
    let m = Mapper::start(&[
        "--threads".as_ref(),
        "1".as_ref(),
        f.lib_sha1.as_os_str(),
        f.lib_space.as_os_str(),
        weird.as_os_str(),
    ]);
    let pid = m.pid.to_string();
    let snap = dir.join("snap.data");
    synth_ok(["-p", &pid, "-o", snap.to_str().unwrap()]);
    let json = dump_json(&snap, &[]);
    let bytes = std::fs::read(&snap).unwrap();
    let recs = assert_agree(&json, &bytes, false, 4);
    let weird_bytes = weird.as_os_str().as_bytes().to_vec();
    assert!(
        recs.iter()
            .any(|r| matches!(r, Rec::Map { path, build_id: Some(_), .. } if *path == weird_bytes)),
        "the odd path comes back byte for byte with its build id:\n{json}"
    );
    assert!(
        json.contains("lib\\\\xff\\\\x0aodd\\\\\\\\name.so"),
        "{json}"
    );
    assert!(!json.contains('\u{fffd}'), "no lossy replacement");

    // Live lines: the same bytes as the dump of the file.
    let live = String::from_utf8(synth_ok(["-p", &pid, "--json"]).stdout).unwrap();
    assert_eq!(live, json);

    // Pipe mode on stdin: the same records, build ids as records up front.
    let pipe = synth_ok(["-p", &pid, "-o", "-"]).stdout;
    let pjson = dump_json_stdin(&pipe);
    assert_agree(&pjson, &pipe, true, 4);
    let mut a = from_json(&pjson);
    let mut b = from_json(&json);
    a.sort();
    b.sort();
    assert_eq!(a, b, "pipe and file snapshots dump the same lines");
}

// The text form has one line per JSON line, path last and escaped, and
// `--sort` orders lines by time without losing any.
#[test]
fn text_form_and_sort() {
    let f = fixtures();
    let dir = scratch("dump-text");
    let m = Mapper::start(&[f.lib_space.as_os_str()]);
    let snap = dir.join("snap.data");
    synth_ok(["-p", &m.pid.to_string(), "-o", snap.to_str().unwrap()]);
    let json = dump_json(&snap, &[]);
    let text = String::from_utf8(synth_ok(["dump".as_ref(), snap.as_os_str()]).stdout).unwrap();
    assert_eq!(text.lines().count(), json.lines().count());
    let lib = f.lib_space.to_str().unwrap();
    let line = text
        .lines()
        .find(|l| l.ends_with(&format!(" path={lib}")))
        .unwrap_or_else(|| panic!("no map line for {lib}:\n{text}"));
    assert!(line.starts_with("mmap2 pid="), "{line}");
    assert!(line.contains(" prot=r-xp "), "{line}");
    assert!(line.contains(" build_id="), "{line}");
    let sorted = dump_json(&snap, &["--sort"]);
    let lines: Vec<Value> = (sorted.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // the records by time, then the build-id table
    let table = lines.iter().position(|v| v["kind"] == "build_id").unwrap();
    assert!(
        lines[table..].iter().all(|v| v["kind"] == "build_id"),
        "{sorted}"
    );
    let times: Vec<u64> = (lines[..table].iter())
        .map(|v| v["time"].as_u64().unwrap_or(0))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{sorted}");
    let mut a: Vec<&str> = sorted.lines().collect();
    let mut b: Vec<&str> = json.lines().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

/// Records the burner with plain `perf record -g` (perf's own synthesis,
/// inode-form MMAP2, kernel map, a BUILD_ID table), `extra` added.
fn perf_record(pid: u32, out: &Path, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["-g"];
    args.extend_from_slice(extra);
    perf_record_pid(pid, out, &args, "0.5");
    std::fs::read(out).unwrap()
}

// Real recordings (file, -z compressed, pipe mode): every MMAP/MMAP2, COMM,
// FORK/EXIT and BUILD_ID entry dumped equals linux-perf-data's decoding.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn dump_of_perf_recordings_agrees_with_linux_perf_data() {
    needs_perf_record();
    let b = Mapper::burner();
    let dir = scratch("dump-rec");
    for (name, extra, pipe) in [
        ("rec.data", &[][..], false),
        ("rec-z.data", &["-z"][..], false),
        ("rec.pipe", &["-o", "-"][..], true),
    ] {
        let path = dir.join(name);
        let bytes = perf_record(b.pid, &path, extra);
        let json = if pipe {
            dump_json_stdin(&bytes)
        } else {
            dump_json(&path, &[])
        };
        let recs = assert_agree(&json, &bytes, pipe, 3);
        let lib = fixtures().libburn.as_os_str().as_bytes().to_vec();
        assert!(
            recs.iter().any(|r| matches!(r,
                Rec::Map { v2: true, path, dev_ino: Some(_), pid, .. }
                    if *path == lib && *pid == b.pid as i32)),
            "{name}: perf's own inode-form map of libburn is dumped:\n{json}"
        );
        // perf 6.1 writes no build ids in pipe mode (no HEADER_BUILD_ID
        // records); the snapshot test covers those.
    }
}

// Input that is not a perf.data file is refused with exit 2 and an error
// naming the file and what is wrong; nothing is printed on stdout.
#[test]
fn dump_refuses_bad_input() {
    let dir = scratch("dump-bad");
    let junk = dir.join("junk.data");
    std::fs::write(&junk, b"PERFILE2 but then nothing sensible at all").unwrap();
    let passwd = Path::new("/etc/passwd");
    for (file, want) in [(junk.as_path(), "junk.data"), (passwd, "/etc/passwd")] {
        let o = synth(["dump".as_ref(), file.as_os_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains(want), "{err}");
        assert!(o.stdout.is_empty());
    }
    // A truncated snapshot: the error names an offset.
    let f = fixtures();
    let m = Mapper::start(&[f.lib_sha1.as_os_str()]);
    let snap = dir.join("snap.data");
    synth_ok(["-p", &m.pid.to_string(), "-o", snap.to_str().unwrap()]);
    let bytes = std::fs::read(&snap).unwrap();
    let cut = dir.join("cut.data");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = synth(["dump".as_ref(), cut.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("cut.data") && err.contains("offset"), "{err}");
    // A map record that does not decode (a COMM's 40 bytes typed MMAP2,
    // too short for its fields) is an error at its offset, not a line left
    // out.
    let data_at = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    let mut at = data_at;
    for r in data_records(&bytes) {
        if r[0] == 3 {
            break;
        }
        at += r.len();
    }
    let mut bad = bytes.clone();
    bad[at] = 10;
    let short = dir.join("short.data");
    std::fs::write(&short, &bad).unwrap();
    let o = synth(["dump".as_ref(), short.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("offset {at}")), "{at}: {err}");
    // Not a regular file.
    let o = synth(["dump", "/dev/zero"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/dev/zero"));
}
