//! End-to-end: snapshot processes this test started and read the output
//! with real perf and with linux-perf-data.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::*;

/// Expected exec maps of a mapper, with build ids from readelf (ids longer
/// than 20 bytes or absent give None) and the vDSO's from its memory image.
fn expected(m: &Mapper, dir: &Path) -> Vec<Map> {
    let vdso = vdso_build_id(m.pid, dir);
    assert!(vdso.is_some(), "the vDSO has a build id on this kernel");
    expected_exec_maps(m.pid, |path| {
        if path == "[vdso]" {
            return vdso.clone();
        }
        if !path.starts_with('/') {
            return None;
        }
        readelf_build_id(Path::new(path)).filter(|id| id.len() <= 40)
    })
}

// A thread's id given to -p stands for its process, as with `perf record
// -p`: perf script shows the process once, under its leader's pid, with
// every thread's COMM and its maps, and no process made of the thread.
#[test]
#[ignore = "needs perf"]
fn a_thread_id_given_to_p_is_its_process() {
    needs_perf();
    let m = Mapper::with_all_libs(2);
    let dir = scratch("roundtrip-tid");
    let tid = (std::fs::read_dir(format!("/proc/{}/task", m.pid)).unwrap())
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|t| *t != m.pid.to_string())
        .expect("a second thread");
    let out = dir.join("snap.data");
    let both = format!("{tid},{}", m.pid);
    let run = synth_ok(["-p", both.as_str(), "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("1 processes"), "{err}");
    let script = perf_script_side_band(&out);
    let maps = perf_script_mmaps(&script);
    assert!(!maps.is_empty(), "{script}");
    let as_process = format!(" {tid}/");
    for line in script.lines() {
        assert!(
            !line.contains(&as_process),
            "the thread as a process: {line}"
        );
    }
    let comm = format!(":{}/{tid}", m.pid);
    assert!(
        script
            .lines()
            .any(|l| l.contains("PERF_RECORD_COMM") && l.ends_with(&comm)),
        "no COMM of thread {tid} in process {}:\n{script}",
        m.pid
    );
    assert_eq!(
        maps,
        perf_script_mmaps(&perf(&[
            "script".as_ref(),
            "--show-mmap-events".as_ref(),
            "-i".as_ref(),
            synth_snapshot_of(m.pid, &dir).as_os_str(),
        ]))
    );
}

/// A snapshot of `pid` alone in `dir`: its path.
fn synth_snapshot_of(pid: u32, dir: &Path) -> std::path::PathBuf {
    let out = dir.join(format!("{pid}.data"));
    synth_ok(["-p", pid.to_string().as_str(), "-o", out.to_str().unwrap()]);
    out
}

// perf script and perf buildid-list see every executable VMA of our process
// (address, length, offset, path, build id) and nothing else.
#[test]
#[ignore = "needs perf"]
fn perf_sees_every_exec_vma_with_build_ids() {
    needs_perf();
    let f = fixtures();
    let m = Mapper::with_all_libs(2);
    let dir = scratch("roundtrip");
    let out = dir.join("snap.data");
    synth_ok([
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let mut want = expected(&m, &dir);
    let script = perf_script_side_band(&out);
    let mut got = perf_script_mmaps(&script);
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // Every kind of build id is exercised: 20, 16 and 8 bytes in build-id
    // form; 32 bytes and none in inode form.
    let by_path: BTreeMap<&str, Option<&str>> = got
        .iter()
        .map(|m| (m.path.as_str(), m.build_id.as_deref()))
        .collect();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    assert_eq!(by_path[s(&f.lib_sha1).as_str()].map(str::len), Some(40));
    assert_eq!(by_path[s(&f.lib_md5).as_str()].map(str::len), Some(32));
    assert_eq!(by_path[s(&f.lib_hex8).as_str()], Some("0123456789abcdef"));
    assert_eq!(by_path[s(&f.lib_long).as_str()], None);
    assert_eq!(by_path[s(&f.lib_none).as_str()], None);
    assert!(by_path[s(&f.lib_space).as_str()].is_some());
    assert!(by_path["[vdso]"].is_some());

    // COMM for the leader and each named thread.
    let task = std::fs::read_dir(format!("/proc/{}/task", m.pid))
        .unwrap()
        .count();
    assert_eq!(task, 3);
    for name in ["mapper", "worker-0", "worker-1"] {
        assert!(
            script.contains(&format!("PERF_RECORD_COMM: {name}:{}/", m.pid)),
            "no COMM for {name}:\n{script}"
        );
    }
    assert!(!script.contains("PERF_RECORD_FORK"), "FORK only with --all");

    // The BUILD_ID table holds exactly the DSOs with usable ids.
    let list = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        out.as_os_str(),
    ]));
    let want_ids: BTreeMap<String, String> = want
        .iter()
        .filter_map(|m| Some((m.path.clone(), m.build_id.clone()?)))
        .collect();
    assert_eq!(list, want_ids);
}

/// Record fields as linux-perf-data decodes them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Rec {
    Comm {
        pid: i32,
        tid: i32,
        name: Vec<u8>,
    },
    Fork {
        pid: i32,
        ppid: i32,
        tid: i32,
        ptid: i32,
    },
    Mmap2(Map),
}

fn decode(records: &mut Vec<Rec>, rec: linux_perf_event_reader::EventRecord<'_>) {
    use linux_perf_event_reader::{EventRecord, Mmap2FileId};
    match rec {
        EventRecord::Comm(c) => records.push(Rec::Comm {
            pid: c.pid,
            tid: c.tid,
            name: c.name.as_slice().to_vec(),
        }),
        EventRecord::Fork(f) => records.push(Rec::Fork {
            pid: f.pid,
            ppid: f.ppid,
            tid: f.tid,
            ptid: f.ptid,
        }),
        EventRecord::Mmap2(m) => {
            let build_id = match &m.file_id {
                Mmap2FileId::BuildId(b) => {
                    Some(b.iter().map(|x| format!("{x:02x}")).collect::<String>())
                }
                Mmap2FileId::InodeAndVersion(_) => None,
            };
            let prot = m.protection;
            let perms = format!(
                "{}{}{}{}",
                if prot & 1 != 0 { 'r' } else { '-' },
                if prot & 2 != 0 { 'w' } else { '-' },
                if prot & 4 != 0 { 'x' } else { '-' },
                if m.flags & 1 != 0 { 's' } else { 'p' },
            );
            records.push(Rec::Mmap2(Map {
                pid: m.pid as u32,
                start: m.address,
                len: m.length,
                pgoff: m.page_offset,
                perms,
                path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
                build_id,
            }))
        }
        _ => {}
    }
}

fn read_file_mode(path: &Path) -> Vec<Rec> {
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let f = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(f).unwrap();
    let names: Vec<_> = perf_file
        .event_attributes()
        .iter()
        .filter_map(|a| a.name())
        .collect();
    assert_eq!(names, vec!["dummy:u"]);
    let mut out = Vec::new();
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { record, .. } = r {
            decode(&mut out, record.parse().unwrap());
        }
    }
    out
}

fn read_pipe_mode(bytes: &[u8]) -> Vec<Rec> {
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_pipe(std::io::Cursor::new(bytes)).unwrap();
    let mut out = Vec::new();
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { record, .. } = r {
            decode(&mut out, record.parse().unwrap());
        }
    }
    out
}

// linux-perf-data decodes the same MMAP2 records perf shows, field by field,
// and pipe output (`-o -`) carries the same records as file output.
#[test]
#[ignore = "needs perf"]
fn linux_perf_data_and_pipe_mode_agree_with_perf() {
    needs_perf();
    let m = Mapper::with_all_libs(1);
    let dir = scratch("decoders");
    let out = dir.join("snap.data");
    let pid = m.pid.to_string();
    synth_ok(["-p", pid.as_str(), "-o", out.to_str().unwrap()]);
    let recs = read_file_mode(&out);

    let mut from_perf = perf_mmaps_of(&out);
    let mut from_lpd: Vec<Map> = recs
        .iter()
        .filter_map(|r| match r {
            Rec::Mmap2(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    assert!(from_lpd.len() >= 8, "{from_lpd:?}");
    from_perf.sort();
    from_lpd.sort();
    assert_eq!(from_lpd, from_perf);
    assert!(recs.contains(&Rec::Comm {
        pid: m.pid as i32,
        tid: m.pid as i32,
        name: b"mapper".to_vec()
    }));

    // Pipe mode: same records for linux-perf-data and for `perf script -i -`.
    let piped = synth_ok(["-p", pid.as_str(), "-o", "-"]);
    assert_eq!(read_pipe_mode(&piped.stdout), recs);
    let mut child = std::process::Command::new("perf")
        .args(["script", "--show-mmap-events", "-i", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&piped.stdout)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut from_pipe = perf_script_mmaps(&String::from_utf8_lossy(&o.stdout));
    from_pipe.sort();
    assert_eq!(from_pipe, from_perf);
}

/// Moves the directory `top` under `levels` new directories of 250-byte
/// names in `dir` (`dir/w{levels-1}/ddd.../.../w0/ddd...`), inside out so
/// that no path handed to the kernel is long: files mapped from it get a
/// path of `levels` x 251 bytes more in /proc/PID/maps.
fn bury(dir: &Path, mut top: std::path::PathBuf, levels: usize) {
    for i in 0..levels {
        let wrap = dir.join(format!("w{i}"));
        std::fs::create_dir(&wrap).unwrap();
        std::fs::rename(&top, wrap.join("d".repeat(250))).unwrap();
        top = wrap;
    }
}

/// The data section of the file-mode perf.data at `path` (its offset and
/// size at header bytes 40 and 48).
fn data_section(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let u = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    bytes[u(40)..u(40) + u(48)].to_vec()
}

// The text source and the ioctl source give byte-identical records, with odd
// paths (space, newline, non-UTF-8, deleted, a 75 KB path) and with --data.
#[test]
#[ignore = "needs root and PROCMAP_QUERY (Linux 6.11+)"]
fn text_and_ioctl_sources_agree() {
    needs_procmap_query();
    needs_root("map_files, for the build id of a deleted file");
    let f = fixtures();
    let dir = scratch("sources");
    let odd_dir = dir.join("odd dir");
    std::fs::create_dir_all(&odd_dir).unwrap();
    use std::os::unix::ffi::OsStrExt;
    let odd = odd_dir.join(std::ffi::OsStr::from_bytes(b"lib\nnew\xffline .so"));
    std::fs::copy(&f.lib_sha1, &odd).unwrap();
    let deleted = dir.join("deleted.so");
    std::fs::copy(&f.lib_md5, &deleted).unwrap();
    let moved = dir.join("moved");
    std::fs::create_dir_all(&moved).unwrap();
    let deep = moved.join("libdeep.so");
    std::fs::copy(&f.lib_hex8, &deep).unwrap();
    let m = Mapper::start(&[
        "--threads".as_ref(),
        "1".as_ref(),
        "--data-maps".as_ref(),
        "5".as_ref(),
        odd.as_os_str(),
        deleted.as_os_str(),
        deep.as_os_str(),
        f.lib_none.as_os_str(),
    ]);
    std::fs::remove_file(&deleted).unwrap();
    // moved, once mapped, under 300 directories of 250 bytes: a 75 KB path
    // (d_path has no PATH_MAX limit), so a 75 KB text maps line; both
    // sources call it //toolong
    bury(&dir, moved, 300);
    let maps = std::fs::read(format!("/proc/{}/maps", m.pid)).unwrap();
    let longest = maps.split(|&b| b == b'\n').map(<[u8]>::len).max();
    assert!(longest > Some(75_000), "longest maps line {longest:?}");
    let pid = m.pid.to_string();
    for data in [false, true] {
        let mut outs = Vec::new();
        for source in ["ioctl", "text"] {
            let out = dir.join(format!("{source}-{data}.data"));
            let mut args = vec!["-p", &pid, "--source", source, "-o", out.to_str().unwrap()];
            if data {
                args.push("--data");
            }
            let o = synth_ok(&args);
            assert!(
                String::from_utf8_lossy(&o.stderr).contains(&format!("source: {source} (1)")),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
            outs.push((data_section(&out), read_file_mode(&out)));
        }
        assert_eq!(outs[0].0, outs[1].0, "data sections differ (--data={data})");
        let recs = &outs[0].1;
        let paths: BTreeSet<String> = recs
            .iter()
            .filter_map(|r| match r {
                Rec::Mmap2(m) => Some(m.path.clone()),
                _ => None,
            })
            .collect();
        let odd_s = String::from_utf8_lossy(odd.as_os_str().as_bytes()).into_owned();
        assert!(paths.contains(&odd_s), "{paths:?}");
        let del = format!("{} (deleted)", deleted.display());
        let del_rec = recs.iter().find_map(|r| match r {
            Rec::Mmap2(m) if m.path == del => Some(m.clone()),
            _ => None,
        });
        // the deleted file keeps its build id (read from the mapped file)
        assert_eq!(
            del_rec.expect("deleted lib present").build_id,
            readelf_build_id(&f.lib_md5)
        );
        let has_data = recs
            .iter()
            .any(|r| matches!(r, Rec::Mmap2(m) if !m.perms.contains('x')));
        assert_eq!(has_data, data);
        assert!(!paths.contains("[vsyscall]"));
        let toolong = recs.iter().find_map(|r| match r {
            Rec::Mmap2(m) if m.path == "//toolong" && m.perms.contains('x') => Some(m.clone()),
            _ => None,
        });
        // and the file under the long path keeps its build id
        assert_eq!(
            toolong.expect("the 75 KB path as //toolong").build_id,
            readelf_build_id(&f.lib_hex8)
        );
    }
}

// -d reads the text by default, which cannot tell a newline in a name
// (the kernel writes `\012`) from a name holding `\012` itself: those two
// names are asked of the ioctl, so the default -d output is byte-identical
// to the ioctl walk's, where `--source text` names both with a newline.
#[test]
#[ignore = "needs root and PROCMAP_QUERY (Linux 6.11+)"]
fn the_default_d_walk_asks_the_ioctl_for_names_the_text_leaves_ambiguous() {
    needs_procmap_query();
    needs_root("map_files, for build ids");
    use std::os::unix::ffi::OsStrExt;
    let f = fixtures();
    let dir = scratch("d-ambiguous");
    let newline = dir.join(std::ffi::OsStr::from_bytes(b"lib\nx.so"));
    let literal = dir.join(std::ffi::OsStr::from_bytes(b"lib\\012x.so"));
    std::fs::copy(&f.lib_sha1, &newline).unwrap();
    std::fs::copy(&f.lib_md5, &literal).unwrap();
    let m = Mapper::start(&[newline.as_os_str(), literal.as_os_str()]);
    let pid = m.pid.to_string();
    let run = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut args = vec!["-p", &pid, "-d", "-o", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = synth_ok(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let data = data_section(&out);
        let paths: BTreeSet<Vec<u8>> = read_file_mode(&out)
            .into_iter()
            .filter_map(|r| match r {
                Rec::Mmap2(m) => Some(m.path.into_bytes()),
                _ => None,
            })
            .collect();
        (err, data, paths)
    };
    let (err, default, paths) = run("default.data", &[]);
    assert!(err.contains("source: text (1)"), "{err}");
    let (_, ioctl, _) = run("ioctl.data", &["--source", "ioctl"]);
    assert!(default == ioctl, "the default -d and the ioctl walk differ");
    let literal_b = literal.as_os_str().as_bytes().to_vec();
    let newline_b = newline.as_os_str().as_bytes().to_vec();
    assert!(
        paths.contains(&literal_b) && paths.contains(&newline_b),
        "{paths:?}"
    );
    // the text alone misnames the literal one
    let (_, _, text_paths) = run("text.data", &["--source", "text"]);
    assert!(!text_paths.contains(&literal_b), "{text_paths:?}");
}

/// A mapper with a library mapped 400 times, moved once mapped under 80
/// directories of 250 bytes (a 20 KB path, past PATH_MAX: over 8 MB of
/// maps text), in a scratch directory `name`.
fn long_path_mapped_400_times(name: &str) -> (Mapper, Scratch) {
    let dir = scratch(name);
    let moved = dir.join("moved");
    std::fs::create_dir_all(&moved).unwrap();
    let lib = moved.join("liblong.so");
    std::fs::copy(&fixtures().lib_sha1, &lib).unwrap();
    let m = Mapper::start(&["--exec-maps".as_ref(), "400".as_ref(), lib.as_os_str()]);
    bury(&dir, moved, 80);
    let maps = std::fs::read(format!("/proc/{}/maps", m.pid)).unwrap();
    assert!(maps.len() > 8_000_000, "{} bytes of maps", maps.len());
    (m, dir)
}

// A user can map one file under a path of any length thousands of times,
// and the text writes that path whole on each line (d_path has no limit):
// the default -d walk leaves the text at the first name of PATH_MAX or
// more and goes on with the ioctl, which stops at PATH_MAX. 400 maps of a
// 20 KB path: byte-identical to the ioctl walk, in as many reads as it
// (perf's syscall count) but a few, where `--source text` reads every
// line (8 MB).
#[test]
#[ignore = "needs root, perf and PROCMAP_QUERY (Linux 6.11+)"]
fn a_long_path_mapped_many_times_sends_the_d_walk_to_the_ioctl() {
    needs_procmap_query();
    needs_root("syscall tracepoints");
    let (m, dir) = long_path_mapped_400_times("d-long-path");
    let pid = m.pid.to_string();
    let run = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let stat = dir.join(format!("{name}.stat"));
        let mut args = vec!["stat", "-x,", "-e", "syscalls:sys_enter_read", "-o"];
        args.extend([stat.to_str().unwrap(), "--", bin(), "-q", "-p", &pid, "-d"]);
        args.extend(["-o", out.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        perf(&args);
        let stat = std::fs::read_to_string(&stat).unwrap();
        let reads: u64 = stat
            .lines()
            .find(|l| l.contains("sys_enter_read"))
            .and_then(|l| l.split(',').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no read count: {stat}"));
        (reads, data_section(&out))
    };
    let (reads, default) = run("default.data", &[]);
    let (_, ioctl) = run("ioctl.data", &["--source", "ioctl"]);
    assert!(default == ioctl, "the default -d and the ioctl walk differ");
    // reads beside the maps (mountinfo, /proc files, ELF notes) are the
    // ioctl walk's count
    let (ioctl_reads, _) = run("ioctl2.data", &["--source", "ioctl"]);
    let (text_reads, _) = run("text.data", &["--source", "text"]);
    let counts = format!("reads: default {reads}, ioctl {ioctl_reads}, text {text_reads}");
    assert!(reads <= ioctl_reads + 20, "{counts}");
    // (the text reads lines up to its budget for such names, 4 MiB)
    assert!(text_reads >= ioctl_reads + 150, "{counts}");
    let toolong = read_file_mode(&dir.join("default.data"))
        .into_iter()
        .filter(|r| matches!(r, Rec::Mmap2(m) if m.path == "//toolong"))
        .count();
    assert!(
        toolong > 400,
        "{toolong}: the library's segments and its 400 maps"
    );
}

// Where the text is the only source (`--source text`, as on a kernel
// before 6.11), lines naming a path of PATH_MAX or more (a user's 20 KB
// path mapped 400 times: 8 MB of text, the kernel writing the path whole on
// each line) stop the walk past 4 MiB of them: the process is reported cut
// short (exit 3 with --strict) with the maps read before it, not read on.
#[test]
#[ignore = "needs root (a path buried past PATH_MAX)"]
fn long_name_lines_cut_a_text_walk_short() {
    needs_root("a path buried past PATH_MAX");
    let (m, dir) = long_path_mapped_400_times("text-long-path");
    let out = dir.join("text.data");
    let pid = m.pid.to_string();
    let args = ["-p", &pid, "--source", "text", "-o", out.to_str().unwrap()];
    let run = synth(args);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    assert!(
        err.contains("cut short") && err.contains("PATH_MAX or more"),
        "{err}"
    );
    let maps = read_file_mode(&out)
        .into_iter()
        .filter_map(|r| match r {
            Rec::Mmap2(m) => Some(m.path),
            _ => None,
        })
        .collect::<Vec<_>>();
    let toolong = maps.iter().filter(|p| *p == "//toolong").count();
    // 4 MiB of 20 KB lines, the first ones before the buried library's
    assert!((150..300).contains(&toolong), "{toolong} of 400: {maps:?}");
    assert!(maps.iter().any(|p| p.ends_with("/mapper")), "{maps:?}");
    let strict = synth(["--strict"].iter().chain(&args));
    assert_eq!(
        strict.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&strict.stderr)
    );
}

// A comm with a backslash (and a tab) is written as the kernel holds it
// (/proc/PID/comm, as the kernel's own COMM records carry it), not as
// /proc/PID/status escapes it; linux-perf-data reads it back for the leader
// and the thread.
#[test]
fn comm_is_written_raw() {
    let dir = scratch("raw-comm");
    let prog = dir.join("m2s\\a\tb");
    std::fs::copy(&fixtures().mapper, &prog).unwrap();
    let m = Mapper::start_as(&prog, &["--threads".as_ref(), "1".as_ref()]);
    let comm = std::fs::read(format!("/proc/{}/comm", m.pid)).unwrap();
    assert_eq!(comm, b"m2s\\a\tb\n");
    let status = std::fs::read_to_string(format!("/proc/{}/status", m.pid)).unwrap();
    assert!(status.contains("Name:\tm2s\\\\a\tb"), "{status}");
    let out = dir.join("c.data");
    synth_ok(["-p", &m.pid.to_string(), "-o", out.to_str().unwrap()]);
    let names: Vec<(i32, Vec<u8>)> = read_file_mode(&out)
        .into_iter()
        .filter_map(|r| match r {
            Rec::Comm { tid, name, .. } => Some((tid, name)),
            _ => None,
        })
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], (m.pid as i32, b"m2s\\a\tb".to_vec()));
    assert_eq!(names[1].1, b"worker-0");
}

// A process with 20,000 maps of a library under a 3.8 KB path (about 78 MB
// of VMAs, held whole before: 160 MB peak) is written in pieces with
// bounded memory; perf sees every one of its maps with its build id and
// every thread's COMM (the last piece's), and the bytes do not depend on
// the number of workers.
#[test]
#[ignore = "needs perf"]
fn huge_process_is_written_in_bounded_memory() {
    needs_perf();
    let dir = scratch("huge");
    let mut long = dir.to_path_buf();
    for _ in 0..15 {
        long.push("d".repeat(250));
    }
    std::fs::create_dir_all(&long).unwrap();
    let lib = long.join("libsha1.so");
    std::fs::copy(&fixtures().lib_sha1, &lib).unwrap();
    let m = Mapper::start(&[
        "--threads".as_ref(),
        "2".as_ref(),
        "--exec-maps".as_ref(),
        "20000".as_ref(),
        lib.as_os_str(),
    ]);
    let out = dir.join("snap.data");
    let o = Command::new("/usr/bin/time")
        .args(["-f", "maxrss=%M"])
        .arg(bin())
        .args(["-q", "-p", &m.pid.to_string(), "-o"])
        .arg(&out)
        .output()
        .expect("GNU time (/usr/bin/time, Debian package time)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let rss: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("maxrss="))
        .and_then(|v| v.trim().parse().ok())
        .expect("GNU time's maxrss line");
    eprintln!("20,000 maps under a 3.8 KB path: peak RSS {rss} KiB");
    assert!(rss < 48 * 1024, "peak RSS {rss} KiB");

    let mut want = expected(&m, &dir);
    assert!(want.len() > 20_000, "{} maps", want.len());
    let script = perf_script_side_band(&out);
    // Each output is ~80 MB: removed once read, so the suite's peak disk use
    // stays small beside the other tests.
    std::fs::remove_file(&out).unwrap();
    let mut got = perf_script_mmaps(&script);
    want.sort();
    got.sort();
    assert!(
        got == want,
        "{} maps seen, {} expected",
        got.len(),
        want.len()
    );
    for name in ["mapper", "worker-0", "worker-1"] {
        let comm = format!("PERF_RECORD_COMM: {name}:{}/", m.pid);
        assert!(script.contains(&comm), "no COMM for {name}");
    }

    // with another process beside it, one worker or two write the same bytes
    let other = Mapper::with_all_libs(1);
    let pids = format!("{},{}", m.pid, other.pid);
    let runs: Vec<Vec<u8>> = ["1", "2"]
        .iter()
        .map(|j| {
            let f = dir.join(format!("j{j}.data"));
            synth_ok([
                "-j".as_ref(),
                j.as_ref(),
                "-p".as_ref(),
                pids.as_ref(),
                "-o".as_ref(),
                f.as_os_str(),
            ]);
            let bytes = std::fs::read(&f).unwrap();
            std::fs::remove_file(&f).unwrap();
            bytes
        })
        .collect();
    assert_same_but_cmdline(&runs[0], &runs[1]);
}
