//! `mmap2-synth merge` end to end with real perf recordings of a process the
//! test starts (a CPU burner in a shared library function).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// Records the burner with `perf record --synth=no` (so its samples have no
/// maps) for about a second. Only our own process is recorded (-p).
fn record(pid: u32, out: &Path, extra: &[&str]) {
    let mut args = vec!["--synth=no", "-g"];
    args.extend_from_slice(extra);
    perf_record_pid(pid, out, &args, "1");
}

/// Share of the burner's user-space samples whose ip resolves to libburn.so's
/// burn_work, and the number of those samples, per `perf script`. Kernel
/// samples are left out: merge does not touch the kernel map, and on a
/// loaded machine (CI runs these tests in parallel) preemption and
/// interrupts put several percent of a burner's samples in the kernel
/// (94.7% burn_work once in CI, 99.8% idle).
fn burn_share(data: &Path, pid: u32) -> (f64, usize) {
    let text = perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "pid,ip,sym,dso".as_ref(),
        "-G".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    let lib = fixtures().libburn.display().to_string();
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(pid.to_string().as_str()))
        .filter(|l| !l.ends_with("([kernel.kallsyms])"))
        .collect();
    let hits = mine
        .iter()
        .filter(|l| l.contains(" burn_work") && l.contains(&format!("({lib})")))
        .count();
    (hits as f64 / mine.len().max(1) as f64, mine.len())
}

/// Sample fields that must not change: time, pid, tid, ip, period.
fn sample_fields(data: &Path) -> String {
    perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "time,pid,tid,ip,period".as_ref(),
        "-G".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ])
}

/// Records in the file as `perf report -D` counts them (also checks that
/// perf accepts the file).
fn record_count(data: &Path) -> usize {
    perf(&[
        "report".as_ref(),
        "-D".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ])
    .lines()
    .filter(|l| l.contains(": event:"))
    .count()
}

fn inserted_from(stderr: &str) -> usize {
    let (_, rest) = stderr
        .split_once("inserted ")
        .expect("summary names inserted records");
    rest.split(' ').next().unwrap().parse().unwrap()
}

fn merge(args: &[&std::ffi::OsStr]) -> String {
    let mut all: Vec<&std::ffi::OsStr> = vec!["merge".as_ref()];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&synth_ok(&all).stderr).into_owned()
}

fn unknown_share(data: &Path, pid: u32) -> f64 {
    let text = perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "pid,ip,dso".as_ref(),
        "-G".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(pid.to_string().as_str()))
        .collect();
    mine.iter().filter(|l| l.contains("[unknown]")).count() as f64 / mine.len().max(1) as f64
}

/// Checks a merged recording against its input: samples unchanged, record
/// count grown by exactly the inserted records, the burner resolved (and
/// judged the recorded process: its sampled addresses are in its maps).
fn check_merged(rec: &Path, merged: &Path, pid: u32, stderr: &str) {
    assert!(stderr.contains("not the recorded process: 0;"), "{stderr}");
    let (share, n) = burn_share(merged, pid);
    assert!(n > 100, "too few samples of the burner: {n}");
    assert!(
        share >= 0.95,
        "only {:.1}% of {n} samples in burn_work after merge",
        share * 100.0
    );
    assert_eq!(sample_fields(rec), sample_fields(merged), "samples changed");
    assert_eq!(
        record_count(merged),
        record_count(rec) + inserted_from(stderr),
        "{stderr}"
    );
}

/// The common start of a test that records: perf and the permission to
/// record (else fail), a burner, a scratch directory.
fn burner_and_dir(name: &str) -> (Mapper, Scratch) {
    needs_perf_record();
    (Mapper::burner(), scratch(name))
}

/// Merges `merged` again for `pid` and asserts nothing more is inserted
/// (every map is found present); returns the summary.
fn merge_again_inserts_nothing(merged: &Path, pid: u32, dir: &Path) -> String {
    let again = dir.join("again.data");
    let pid = pid.to_string();
    let err = merge(&[
        merged.as_os_str(),
        "-p".as_ref(),
        pid.as_ref(),
        "-o".as_ref(),
        again.as_os_str(),
    ]);
    assert!(err.contains("inserted 0 records"), "{err}");
    err
}

/// A hash of the file's bytes (keeps assertion messages short).
fn digest(p: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(p).unwrap().hash(&mut h);
    h.finish()
}

// Merge from the live system turns [unknown] samples into burn_work in
// libburn.so, leaves samples byte-identical and the input untouched; the
// merged file has MMAP2 records with build ids for linux-perf-data.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn live_merge_resolves_samples() {
    let (b, dir) = burner_and_dir("merge-live");
    let rec = dir.join("rec.data");
    record(b.pid, &rec, &[]);
    let before = digest(&rec);
    assert!(
        unknown_share(&rec, b.pid) > 0.9,
        "samples should be [unknown] before merge"
    );
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    assert!(err.contains("file-mode"), "{err}");
    check_merged(&rec, &merged, b.pid, &err);
    assert_eq!(digest(&rec), before, "input modified");
    // perf report's top entry is burn_work in libburn.so (it was [unknown]).
    let report = |f: &Path| {
        perf(&[
            "report".as_ref(),
            "--stdio".as_ref(),
            "-q".as_ref(),
            "-g".as_ref(),
            "none".as_ref(),
            "--sort".as_ref(),
            "dso,sym".as_ref(),
            "-i".as_ref(),
            f.as_os_str(),
        ])
    };
    let top = |text: &str| {
        text.lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .to_string()
    };
    assert!(top(&report(&rec)).contains("[unknown]"), "{}", report(&rec));
    let after = top(&report(&merged));
    assert!(
        after.contains("libburn.so") && after.contains("burn_work"),
        "{after}"
    );

    // linux-perf-data sees the new MMAP2 of libburn.so with its build id.
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let f = std::io::BufReader::new(std::fs::File::open(&merged).unwrap());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(f).unwrap();
    let want = readelf_build_id(&fixtures().libburn).unwrap();
    let mut found = false;
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { record, .. } = r {
            if let Ok(linux_perf_event_reader::EventRecord::Mmap2(m)) = record.parse() {
                if m.path.as_slice().ends_with(b"libburn.so") {
                    if let linux_perf_event_reader::Mmap2FileId::BuildId(id) = &m.file_id {
                        let hex: String = id.iter().map(|x| format!("{x:02x}")).collect();
                        assert_eq!(hex, want);
                        found = true;
                    }
                }
            }
        }
    }
    assert!(found, "no MMAP2 with build id for libburn.so");
    // perf buildid-list sees the merged BUILD_ID table entry.
    let list = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        merged.as_os_str(),
    ]));
    assert_eq!(list.get(fixtures().libburn.to_str().unwrap()), Some(&want));

    // Merging again finds every map present: nothing more is inserted.
    let err = merge_again_inserts_nothing(&merged, b.pid, &dir);
    // the burner's 5 maps (burn, libburn, libc, ld, vdso) are all found present
    assert!(err.contains("; 5 maps already present"), "{err}");
    assert_eq!(
        data_records(&std::fs::read(dir.join("again.data")).unwrap()),
        data_records(&std::fs::read(&merged).unwrap()),
        "a merge that inserts nothing keeps the records"
    );
}

/// Records the burner (`perf_args` added), merges the recording with
/// `merge_args` added, checks the result with [`check_merged`] and returns
/// (recording, merged file, merge summary).
fn record_merge_check(
    b: &Mapper,
    dir: &Path,
    name: &str,
    perf_args: &[&str],
    merge_args: &[&std::ffi::OsStr],
) -> (PathBuf, PathBuf, String) {
    let rec = dir.join(format!("{name}.data"));
    record(b.pid, &rec, perf_args);
    let merged = dir.join(format!("{name}.merged.data"));
    let mut args = vec![rec.as_os_str()];
    args.extend_from_slice(merge_args);
    args.extend(["-o".as_ref(), merged.as_os_str()]);
    let err = merge(&args);
    check_merged(&rec, &merged, b.pid, &err);
    (rec, merged, err)
}

// A process that maps a file during a --synth=no recording (so the
// recording has a map of its own, with a real time) still gets its maps
// from before the recording by default: only synthesized maps (time 0) or
// its fork or exec in the recording give perf its whole picture (a process
// with any map was skipped, its samples left [unknown]).
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_process_mapping_during_the_recording_is_merged() {
    let (b, dir, rec) = record_a_map_made_during("merge-mapping");
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    check_merged(&rec, &merged, b.pid, &err);
}

// A process whose first samples were in a library it dlclose'd since, its
// latest in its own code, is the recorded one: merged, its own code's
// samples attributed (it was left out whole as "not the recorded
// process", 0 of 16 first addresses in its maps, and they were [unknown]).
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_process_that_unloaded_its_first_sampled_library_is_merged() {
    needs_perf_record();
    let dir = scratch("merge-dlclosed");
    let (_, lib) = build_burner(&dir, &[]);
    let prog = build_fixture("dlclosed", &dir, &["-ldl"]);
    let (unload, rec) = (dir.join("unload"), dir.join("rec.data"));
    let p = Mapper::start_as(&prog, &[lib.as_os_str(), unload.as_os_str()]);
    let recorder = perf_record_enabled(p.pid, &rec, &dir, &["--synth=no"]);
    // samples in the library, then in its own code only: 0.3 s of CPU
    // each, however busy the machine (a fixed 0.7 s once gave the second
    // phase too few samples in CI)
    wait_cpu(p.pid, cpu_ticks(p.pid), 30);
    std::fs::write(&unload, b"").unwrap();
    wait_until("the library's unloading", || {
        dir.join("unload.done").exists()
    });
    wait_cpu(p.pid, cpu_ticks(p.pid), 30);
    sigint(recorder);
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    assert!(err.contains("(1 processes,"), "{err}");
    assert!(!err.contains("not the recorded process: 1"), "{err}");
    let script = perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "pid,ip,dso".as_ref(),
        "-G".as_ref(),
        "-i".as_ref(),
        merged.as_os_str(),
    ]);
    let own = format!("({})", prog.display());
    let mine = script.lines().filter(|l| l.ends_with(&own)).count();
    assert!(mine > 100, "{mine} samples in {own}: {err}");
}

/// Starts the burner, records it (`--synth=no -g`) while it maps
/// libmd5.so, checks the recording has that map; returns the burner, the
/// scratch directory (`name`) and the recording.
fn record_a_map_made_during(name: &str) -> (Mapper, Scratch, PathBuf) {
    needs_perf_record();
    let dir = scratch(name);
    let (trigger, rec) = (dir.join("map.now"), dir.join("rec.data"));
    let f = fixtures();
    let b = Mapper::start_as(
        &f.burn,
        &["120".as_ref(), trigger.as_os_str(), f.lib_md5.as_os_str()],
    );
    let recorder = perf_record_enabled(b.pid, &rec, &dir, &["--synth=no", "-g"]);
    std::fs::write(&trigger, b"").unwrap();
    let done = dir.join("map.now.done");
    wait_until("the burner's map", || done.exists());
    // samples for a moment after the map
    std::thread::sleep(std::time::Duration::from_millis(500));
    sigint(recorder);
    assert_eq!(
        md5_maps(&rec, b.pid),
        1,
        "the recording has the burner's map"
    );
    (b, dir, rec)
}

/// How many MMAP2 records of `pid` map libmd5.so in `data`.
fn md5_maps(data: &Path, pid: u32) -> usize {
    let md5 = fixtures().lib_md5.display().to_string();
    let maps = perf_mmaps_of(data);
    maps.iter()
        .filter(|m| m.pid == pid && m.path == md5)
        .count()
}

// The default merge (the processes the recording needs) inserts no second
// copy of a map the recording has: the burner mapped libmd5.so during the
// --synth=no recording, and the merged file has that map once, found
// present (it was inserted again at time 0: "0 maps already present").
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_map_made_during_the_recording_is_not_inserted_again() {
    let (b, dir, rec) = record_a_map_made_during("merge-mapping-once");
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    assert!(err.contains("; 1 maps already present;"), "{err}");
    assert_eq!(md5_maps(&merged, b.pid), 1, "{err}");
}

// A --synth=no --call-graph dwarf recording asks for data maps (mmap_data):
// the default merge inserts them, as perf's own synthesis would, and says
// why; perf script then unwinds the burner's samples past burn_work to
// main (every stack stopped at the leaf without them).
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_of_a_dwarf_recording_keeps_the_callers() {
    let (b, dir) = burner_and_dir("merge-dwarf");
    let (rec, merged) = (dir.join("ns.data"), dir.join("m.data"));
    record(b.pid, &rec, &["--call-graph", "dwarf"]);
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    let (share, n) = main_caller_share(&merged, b.pid);
    assert!(n > 100, "{n} samples of the burner in burn_work");
    assert!(share > 0.9, "{:.1}% of {n} unwound to main", share * 100.0);
    assert!(err.contains("because the recording asks for them"), "{err}");
}

// A snapshot taken before the recording (--maps) repairs it just as well.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_from_snapshot_file() {
    let (b, dir) = burner_and_dir("merge-maps");
    let snap = dir.join("snap.data");
    synth_ok(["-q", "-p", &b.pid.to_string(), "-o", snap.to_str().unwrap()]);
    let (_, _, err) =
        record_merge_check(&b, &dir, "rec", &[], &["--maps".as_ref(), snap.as_os_str()]);
    assert!(
        err.contains("inserted 6 records"),
        "COMM + 5 maps from the snapshot: {err}"
    );
}

// Pipe-mode recordings are written back in pipe mode, records inserted after
// the metadata, and perf resolves the samples.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_pipe_mode_recording() {
    let (b, dir) = burner_and_dir("merge-pipe");
    let (_, merged, err) = record_merge_check(&b, &dir, "rec.pipe", &["-o", "-"], &[]);
    assert!(err.contains("pipe-mode"), "{err}");
    let bytes = std::fs::read(&merged).unwrap();
    assert_eq!(
        u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
        16,
        "pipe header"
    );
}

// Compressed recordings (perf record -z) are scanned through zstd and the
// data passes through untouched.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_compressed_recording() {
    let (b, dir) = burner_and_dir("merge-z");
    let (_, merged, _) = record_merge_check(&b, &dir, "rec", &["-z"], &[]);
    // the scan saw inside the compressed records: a second merge dedupes
    merge_again_inserts_nothing(&merged, b.pid, &dir);
}

// Multi-event recordings, with and without PERF_SAMPLE_IDENTIFIER.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_multi_event_recordings() {
    let (b, dir) = burner_and_dir("merge-multi");
    record_merge_check(&b, &dir, "plain", &["-e", "cpu-clock,task-clock"], &[]);
    record_merge_check(
        &b,
        &dir,
        "ident",
        &["-e", "cpu-clock,task-clock", "--sample-identifier"],
        &[],
    );
}

// A big-endian recording (made with our own writer) stays big-endian and
// perf reads the inserted records.
#[test]
#[ignore = "needs perf"]
fn merge_keeps_big_endian() {
    needs_perf();
    let m1 = Mapper::start(&[]);
    let f = fixtures();
    let m2 = Mapper::start(&[f.lib_sha1.as_os_str()]);
    let dir = scratch("merge-be");
    let rec = dir.join("be.data");
    synth_ok([
        "-q",
        "--byte-order",
        "big",
        "-p",
        &m1.pid.to_string(),
        "-o",
        rec.to_str().unwrap(),
    ]);
    assert_eq!(&std::fs::read(&rec).unwrap()[..8], b"2ELIFREP");
    let merged = dir.join("merged.data");
    let pid2 = m2.pid.to_string();
    let err = merge(&[
        rec.as_os_str(),
        "-p".as_ref(),
        pid2.as_ref(),
        "-o".as_ref(),
        merged.as_os_str(),
    ]);
    let bytes = std::fs::read(&merged).unwrap();
    assert_eq!(&bytes[..8], b"2ELIFREP");
    let maps = perf_mmaps_of(&merged);
    let want = readelf_build_id(&f.lib_sha1);
    assert!(
        maps.iter().any(|m| m.pid == m2.pid
            && m.path == f.lib_sha1.to_str().unwrap()
            && m.build_id == want),
        "{maps:?}"
    );
    assert!(
        maps.iter().any(|m| m.pid == m1.pid),
        "the recording's own maps survive"
    );
    assert_eq!(
        record_count(&merged),
        record_count(&rec) + inserted_from(&err)
    );
    let list = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        merged.as_os_str(),
    ]));
    assert_eq!(list.get(f.lib_sha1.to_str().unwrap()), want.as_ref());
}

/// A file-mode recording (attr IP|TID|TIME) with one sample of `pid` at
/// `time` ns on perf's clock.
fn recording_with_sample_at(path: &Path, pid: u32, time: u64) {
    let user = mmap2_synth::perf::consts::misc::USER;
    recording_with_samples(path, pid, time, user, &[0x1000]);
}

/// A file-mode recording (attr IP|TID|TIME) with a sample of `pid` at
/// each of `ips`, all at `time` ns on perf's clock, `misc` their header's
/// misc (cpumode).
fn recording_with_samples(path: &Path, pid: u32, time: u64, misc: u16, ips: &[u64]) {
    use mmap2_synth::bytes::{Endian, PutExt};
    use mmap2_synth::perf::consts::{sample_type as st, types};
    use mmap2_synth::perf::Attr;
    let e = Endian::Little;
    let mut data = Vec::new();
    for &ip in ips {
        data.put_u32(e, types::SAMPLE);
        data.put_u16(e, misc);
        data.put_u16(e, 8 + 24);
        data.put_u64(e, ip);
        data.put_u32(e, pid);
        data.put_u32(e, pid);
        data.put_u64(e, time);
    }
    let attr = Attr {
        type_: 1,
        sample_type: st::IP | st::TID | st::TIME,
        ..Default::default()
    };
    write_recording(path, attr, vec![], &data);
}

// A live process that started after the recording's last sample (pid reuse)
// is skipped and counted, one that started before it is merged. The
// recordings' timestamps are built (1 ms after boot, and 10 s from now), so
// the outcome depends on neither uptime nor sleeping.
#[test]
fn stale_process_is_skipped() {
    let dir = scratch("merge-stale");
    let late = Mapper::start(&[]);
    let now = mmap2_synth::sys::clock_ns(libc::CLOCK_MONOTONIC).unwrap();
    let pid = late.pid.to_string();
    let run = |time: u64| {
        let rec = dir.join(format!("rec-{time}.data"));
        recording_with_sample_at(&rec, late.pid, time);
        let merged = dir.join("merged.data");
        merge(&[
            rec.as_os_str(),
            "-p".as_ref(),
            pid.as_ref(),
            "-o".as_ref(),
            merged.as_os_str(),
        ])
    };
    let kept = run(now + 10_000_000_000);
    assert!(
        kept.contains("stale (started after the recording): 0")
            && !kept.contains("inserted 0 records"),
        "{kept}"
    );
    let err = run(1_000_000);
    assert!(
        err.contains("inserted 0 records")
            && err.contains("stale (started after the recording): 1"),
        "{err}"
    );
}

/// The start of the first executable map of `pid` (its /proc maps).
fn first_code(pid: u32) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = (maps.lines())
        .find(|l| l.split_whitespace().nth(1) == Some("r-xp"))
        .expect("an executable map");
    let start = line.split('-').next().unwrap();
    u64::from_str_radix(start, 16).unwrap()
}

/// The lines of `mmap2-synth dump` of `data` that are a COMM or MMAP2 of
/// `pid`.
fn dumped_records_of(data: &Path, pid: u32) -> Vec<String> {
    let text = synth_ok(["dump".as_ref(), data.as_os_str()]).stdout;
    let (comm, mmap2) = (format!("comm pid={pid} "), format!("mmap2 pid={pid} "));
    (String::from_utf8_lossy(&text).lines())
        .filter(|l| l.starts_with(&comm) || l.starts_with(&mmap2))
        .map(str::to_string)
        .collect()
}

// A process whose executable maps hold none of the recording's sampled
// user-mode addresses of its pid is not the one recorded (the recording
// came from another pid namespace, or the pid was reused): neither its COMM
// nor its maps are inserted, whether they come from the live system or a
// --maps snapshot (held, or read window by window); the summary counts it
// and a warning names it, and --strict exits 3. The same samples inside its
// code are merged, and so are too few samples, or kernel-mode ones,
// outside it. (Every such process used to be inserted.)
#[test]
fn a_process_the_samples_miss_is_not_merged() {
    use mmap2_synth::perf::consts::misc;
    let dir = scratch("merge-not-recorded");
    let m = Mapper::start(&[]);
    let other = Mapper::start(&[]);
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", m.pid)).unwrap();
    let now = mmap2_synth::sys::clock_ns(libc::CLOCK_MONOTONIC).unwrap();
    let code = first_code(m.pid);
    let inside: Vec<u64> = (0..16).map(|i| code + 4 * i).collect();
    // below mmap_min_addr: no process has a map there
    let outside: Vec<u64> = (0..16).map(|i| 0x1000 + 8 * i).collect();
    let snap = dir.join("snap.data");
    let both = format!("{},{}", m.pid, other.pid);
    synth_ok(["-q", "-p", &both, "-o", snap.to_str().unwrap()]);
    let out = dir.join("out.data");
    let run = |misc: u16, ips: &[u64], args: &[&str], window: Option<&str>| {
        let rec = dir.join("rec.data");
        recording_with_samples(&rec, m.pid, now + 10_000_000_000, misc, ips);
        let mut cmd = Command::new(bin());
        cmd.arg("merge").arg(&rec).args(args).arg("-o").arg(&out);
        if let Some(w) = window {
            cmd.env("MMAP2_SYNTH_TEST_WINDOW_BYTES", w);
        }
        let o = cmd.output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let snap_args = ["--maps", snap.to_str().unwrap()];
    let windows = ["--maps", snap.to_str().unwrap(), "-p", &both];
    let sources: [(&[&str], Option<&str>); 3] =
        [(&[], None), (&snap_args, None), (&windows, Some("1"))];
    for (args, window) in sources {
        let what = format!("{args:?} {window:?}");
        let (exit, err) = run(misc::USER, &outside, args, window);
        assert_eq!(exit, Some(0), "{what}: {err}");
        assert_eq!(
            dumped_records_of(&out, m.pid),
            Vec::<String>::new(),
            "{what}"
        );
        if window.is_some() {
            // the other process of the snapshot, no sample of it, is inserted
            assert!(!dumped_records_of(&out, other.pid).is_empty(), "{what}");
        }
        assert!(
            err.contains("not the recorded process: 1;"),
            "{what}: {err}"
        );
        let warning = format!(
            "warning: pid {} ({}) is not the recorded process: 0 of 16 sampled user-mode addresses",
            m.pid,
            comm.trim_end()
        );
        assert!(err.contains(&warning), "{what}: {err}");
        let mut strict = args.to_vec();
        strict.push("--strict");
        let (exit, err) = run(misc::USER, &outside, &strict, window);
        assert_eq!(exit, Some(3), "{what}: {err}");
        assert!(err.contains("not the recorded ones"), "{what}: {err}");
        // the recorded process, too few addresses, kernel-mode ones: merged
        for (mode, ips) in [
            (misc::USER, &inside[..]),
            (misc::USER, &outside[..7]),
            (misc::KERNEL, &outside[..]),
        ] {
            let (exit, err) = run(mode, ips, args, window);
            assert_eq!(exit, Some(0), "{what}: {err}");
            assert!(
                err.contains("not the recorded process: 0;"),
                "{what}: {err}"
            );
            let records = dumped_records_of(&out, m.pid);
            assert!(
                records.iter().any(|l| l.starts_with("comm"))
                    && records
                        .iter()
                        .any(|l| l.contains(&format!("start={code:#x} "))),
                "{what} {mode} {}: {err}\n{records:?}",
                ips.len()
            );
        }
    }
}

/// The burner in a new pid namespace (`unshare -fp --mount-proc`) with
/// pid `ns_pid` there (set through the namespace's ns_last_pid): SIGKILLed
/// with its namespace on drop (`unshare --kill-child`; the namespace's init
/// ignores SIGTERM).
struct NsBurner {
    unshare: std::process::Child,
    /// The burner's pid on the host.
    host_pid: u32,
}

impl NsBurner {
    fn start(ns_pid: u32) -> NsBurner {
        use std::io::BufRead;
        use std::process::Stdio;
        // a background job's stdin is /dev/null: the burner gets ours
        // through fd 3 (it stops when its stdin closes)
        let script = format!(
            "echo {} > /proc/sys/kernel/ns_last_pid; exec 3<&0; '{}' 120 <&3 & wait",
            ns_pid - 1,
            fixtures().burn.display()
        );
        let mut unshare = Command::new("unshare")
            .args([
                "-fp",
                "--mount-proc",
                "--kill-child",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run unshare");
        let stdout = unshare.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(stdout);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = rx
            .recv_timeout(READY_TIMEOUT)
            .expect("the burner's ready line");
        let children = |pid: u32| -> Vec<u32> {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default()
                .split_whitespace()
                .map(|p| p.parse().unwrap())
                .collect()
        };
        let init = children(unshare.id());
        let host_pid = *init
            .first()
            .and_then(|&i| children(i).first().copied())
            .as_ref()
            .expect("the namespace's init and its burner");
        let b = NsBurner { unshare, host_pid };
        // the burner says its own pid, which is the namespace's
        assert_eq!(
            line.trim(),
            format!("ready {ns_pid}"),
            "ns_last_pid was not taken"
        );
        let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap();
        assert!(
            status.contains(&format!("NSpid:\t{host_pid}\t{ns_pid}\n")),
            "{status}"
        );
        b
    }
}

impl Drop for NsBurner {
    fn drop(&mut self) {
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

// perf recording in a pid namespace (a container's perf) a burner whose
// pid there is the host pid of another process, started before the
// recording: merge on the host does not insert that process's COMM or
// maps (which named the burner's samples after it, all [unknown]); the
// summary counts it and names it, and perf report names no sample after
// it. (The host process passes the staleness check: only the samples'
// addresses, none in its maps, tell it apart.)
#[test]
#[ignore = "needs root (unshare -p, nsenter) and perf record"]
fn a_pid_of_another_pid_namespace_is_not_merged() {
    needs_root("unshare -p, nsenter");
    needs_perf_record();
    let dir = scratch("merge-pidns");
    let host = Mapper::start(&[]);
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", host.pid)).unwrap();
    let comm = comm.trim_end();
    let b = NsBurner::start(host.pid);
    let rec = dir.join("rec.data");
    let o = Command::new("nsenter")
        .args(["-t", &b.host_pid.to_string(), "-p", "-m", "--"])
        .args(["perf", "record", "-q", "--synth=no", "-F", "999"])
        .args(["-p", &host.pid.to_string(), "-o"])
        .arg(&rec)
        .args(["--", "sleep", "1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(b);
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    assert_eq!(
        dumped_records_of(&merged, host.pid),
        Vec::<String>::new(),
        "{err}"
    );
    // every sample is the burner's, and none is named after the host process
    let script = perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "comm,pid".as_ref(),
        "-i".as_ref(),
        merged.as_os_str(),
    ]);
    let samples: Vec<&str> = script.lines().collect();
    assert!(samples.len() > 100, "{script}");
    assert!(
        samples.iter().all(|l| !l.contains(comm)),
        "{}",
        samples[..10].join("\n")
    );
    assert!(err.contains("not the recorded process: 1;"), "{err}");
    let warning = format!(
        "warning: pid {} ({comm}) is not the recorded process: ",
        host.pid
    );
    assert!(err.contains(&warning), "{err}");
    assert!(err.contains("another pid namespace"), "{err}");
}

// In a time namespace whose clocks run behind the kernel's (perf's), a
// process that started after the recording's end is still stale: start
// times are compared on the kernel's clock. Set back by three quarters of
// the uptime, the namespace's monotonic clock made the process look older
// than the recording's end at half the uptime, and so did its boot clock
// (a negative BOOTTIME - MONOTONIC was taken as 0); both were merged. The
// times are fractions of the uptime, so any uptime over a few seconds
// gives the same outcome.
#[test]
#[ignore = "needs root (unshare -T)"]
fn time_namespace_offsets_do_not_hide_stale_processes() {
    needs_root("unshare -T");
    let dir = scratch("merge-timens");
    let late = Mapper::start(&[]);
    let now = mmap2_synth::sys::clock_ns(libc::CLOCK_MONOTONIC).unwrap();
    let back = format!("-{}", now / 1_000_000_000 * 3 / 4);
    let rec = dir.join("rec.data");
    recording_with_sample_at(&rec, late.pid, now / 2);
    let merged = dir.join("merged.data");
    let (mono, boot) = (format!("--monotonic={back}"), format!("--boottime={back}"));
    for offsets in [vec![&mono], vec![&boot], vec![&mono, &boot]] {
        let o = Command::new("unshare")
            .arg("-T")
            .args(&offsets)
            .args(["--fork", bin(), "merge"])
            .arg(&rec)
            .args(["-p", &late.pid.to_string(), "-o"])
            .arg(&merged)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{offsets:?}: {err}");
        assert!(
            err.contains("inserted 0 records")
                && err.contains("stale (started after the recording): 1"),
            "{offsets:?}: {err}"
        );
    }
}

fn run_merge(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut all: Vec<&std::ffi::OsStr> = vec!["merge".as_ref()];
    all.extend_from_slice(args);
    synth(&all)
}

// Without -o/--in-place merge refuses naming both; -o naming the input is
// refused; --in-place rewrites atomically and leaves no temporary file.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn output_rules_and_in_place() {
    let (b, dir) = burner_and_dir("merge-inplace");
    let rec = dir.join("rec.data");
    record(b.pid, &rec, &[]);
    let o = run_merge(&[rec.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("-o OUT.data") && e.contains("--in-place"), "{e}");
    let o = run_merge(&[rec.as_os_str(), "-o".as_ref(), rec.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    // stdin cannot be rewritten in place (was: "reading -: No such file", 1)
    let o = Command::new(bin())
        .args(["merge", "-", "--in-place"])
        .stdin(std::fs::File::open(&rec).unwrap())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("not stdin"), "{e}");
    let copy = dir.join("copy.data");
    std::fs::copy(&rec, &copy).unwrap();
    let err = merge(&[rec.as_os_str(), "--in-place".as_ref()]);
    check_merged(&copy, &rec, b.pid, &err);
    let names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

// Malformed inputs exit 2 with the file, the offset and what was wrong; no
// output or temporary file is left and nothing panics.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn bad_inputs_are_reported_not_panicked() {
    let (b, dir) = burner_and_dir("merge-bad");
    let rec = dir.join("rec.data");
    record(b.pid, &rec, &[]);
    let good = std::fs::read(&rec).unwrap();
    let out = dir.join("out.data");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "too short"),
        (
            "garbage",
            b"hello, this is not perf data at all....".to_vec(),
            "bad magic",
        ),
        ("truncated", good[..good.len() / 2].to_vec(), "past the end"),
        (
            "bad-record",
            {
                let mut g = good.clone();
                let data_off = u64::from_le_bytes(g[40..48].try_into().unwrap()) as usize;
                g[data_off + 6..data_off + 8].copy_from_slice(&4u16.to_le_bytes());
                g
            },
            "size 4",
        ),
    ];
    for (name, bytes, what) in cases {
        let input = dir.join(format!("{name}.data"));
        std::fs::write(&input, &bytes).unwrap();
        let o = run_merge(&[input.as_os_str(), "-o".as_ref(), out.as_os_str()]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {e}");
        assert!(
            e.starts_with("error: ") && e.contains(input.to_str().unwrap()) && e.contains(what),
            "{name}: {e}"
        );
        if name != "empty" {
            assert!(e.contains("offset"), "{name}: {e}");
        }
        assert!(!out.exists());
        assert_eq!(std::fs::read(&input).unwrap(), bytes);
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

// A merge that inserts more than the reserved room (RESERVE) rewrites the
// data section behind the records and still leaves samples untouched.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_larger_than_reserve() {
    needs_perf_record();
    let b = Mapper::burner();
    let big = Mapper::start(&["--data-maps".as_ref(), "6000".as_ref()]);
    let dir = scratch("merge-reserve");
    let rec = dir.join("rec.data");
    record(b.pid, &rec, &[]);
    let merged = dir.join("merged.data");
    let pids = format!("{},{}", b.pid, big.pid);
    let err = merge(&[
        rec.as_os_str(),
        "--data".as_ref(),
        "-p".as_ref(),
        pids.as_ref(),
        "-o".as_ref(),
        merged.as_os_str(),
    ]);
    let maps: usize = err
        .split_once("processes, ")
        .unwrap()
        .1
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        maps * 100 > mmap2_synth::rewrite::write::RESERVE as usize,
        "{err}"
    );
    check_merged(&rec, &merged, b.pid, &err);
    let n = perf_mmaps_of(&merged)
        .iter()
        .filter(|m| m.pid == big.pid)
        .count();
    assert!(n >= 6000, "{n} maps of the big process");
}

// A large recording (64 MiB of records of an unknown type) passes through
// byte for byte, and a terminal on stderr gets a progress display.
#[test]
fn large_input_progress_and_unknown_records_pass_through() {
    use mmap2_synth::perf::consts::attr_flags;
    use mmap2_synth::perf::Attr;
    let data = unknown_records(64 << 20, |i| (i % 251) as u8);
    let attr = Attr {
        sample_type: 0x7,
        flags: attr_flags::SAMPLE_ID_ALL,
        ..Default::default()
    };
    let dir = scratch("merge-progress");
    let rec = dir.join("big.data");
    write_recording(&rec, attr, vec![1], &data);
    let out = dir.join("out.data");
    let m = Mapper::start(&[]);
    let cmd = format!(
        "{} merge -p {} '{}' -o '{}'",
        bin(),
        m.pid,
        rec.display(),
        out.display()
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("run script (util-linux) for a pseudo-terminal");
    let tty = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{tty}");
    assert!(tty.contains("scanning") && tty.contains("100%"), "{tty}");
    // the copy beside the scan shows no second line over it
    assert!(!tty.contains("copying"), "{tty}");
    let merged = std::fs::read(&out).unwrap();
    let u = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let (off, size) = (u(&merged, 40), u(&merged, 48));
    assert!(size > data.len(), "records were inserted");
    assert_eq!(&merged[off + size - data.len()..off + size], &data[..]);
}

// A merge with nothing to add leaves an --in-place recording untouched
// (same inode, bytes and mtime) and gives -o the same records and feature
// sections (the records sit behind the unused room).
#[test]
fn nothing_to_add() {
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("merge-nothing");
    let rec = dir.join("rec.data");
    std::fs::copy(pin("snap-le.data"), &rec).unwrap();
    let before = std::fs::metadata(&rec).unwrap();
    let err = merge(&[
        "--in-place".as_ref(),
        "--no-kernel".as_ref(),
        rec.as_os_str(),
    ]);
    assert!(err.contains("left as it was"), "{err}");
    let after = std::fs::metadata(&rec).unwrap();
    assert_eq!(
        (before.ino(), before.mtime_nsec(), before.len()),
        (after.ino(), after.mtime_nsec(), after.len())
    );
    assert_eq!(
        std::fs::read(&rec).unwrap(),
        std::fs::read(pin("snap-le.data")).unwrap()
    );
    let out = dir.join("out.data");
    merge(&[
        "--no-kernel".as_ref(),
        rec.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let (a, b) = (std::fs::read(&rec).unwrap(), std::fs::read(&out).unwrap());
    assert_eq!(data_records(&a), data_records(&b));
    for bit in [2, 4, 12] {
        // BUILD_ID, OSRELEASE, EVENT_DESC: the same bytes
        let (x, y) = (feature_range(&a, bit), feature_range(&b, bit));
        assert_eq!(
            x.map(|r| a[r].to_vec()),
            y.map(|r| b[r].to_vec()),
            "feature {bit}"
        );
    }
}

// Data maps go in as perf would synthesize them: a `--maps` snapshot taken
// with -d gives a recording that does not ask for them (no -d, no dwarf)
// none, and says so; `merge -d` inserts them, marked MMAP_DATA.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_snapshots_data_maps_go_in_only_when_asked() {
    let (b, dir) = burner_and_dir("merge-snap-data");
    let (snap, rec) = (dir.join("snap.data"), dir.join("rec.data"));
    synth_ok([
        "-q",
        "-d",
        "-p",
        &b.pid.to_string(),
        "-o",
        snap.to_str().unwrap(),
    ]);
    assert!(
        data_maps_of(&snap, b.pid).len() >= 5,
        "the snapshot has them"
    );
    record(b.pid, &rec, &[]);
    let (plain, with_d) = (dir.join("plain.data"), dir.join("d.data"));
    let m = |out: &Path, extra: &[&str]| {
        let mut args = vec![rec.as_os_str(), "--maps".as_ref(), snap.as_os_str()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        args.extend(["-o".as_ref(), out.as_os_str()]);
        merge(&args)
    };
    let err = m(&plain, &[]);
    assert!(data_maps_of(&plain, b.pid).is_empty(), "{err}");
    assert!(err.contains("of the snapshot's left out"), "{err}");
    check_merged(&rec, &plain, b.pid, &err);
    let err = m(&with_d, &["-d"]);
    assert_eq!(
        data_maps_of(&with_d, b.pid),
        data_maps_of(&snap, b.pid),
        "{err}"
    );
    assert!(err.contains("inserted (-d)"), "{err}");
}

/// Starts `prog` (a fixture that execs burn once its trigger file appears),
/// snapshots it, records it with `perf_args` for a second before the exec
/// and `after_ms` after it into `dir/rec.data`, and merges the snapshot in:
/// (the process, the merged recording, merge's summary).
fn merged_across_an_exec(
    dir: &Path,
    prog: &Path,
    perf_args: &[&str],
    after_ms: u64,
) -> (Mapper, PathBuf, String) {
    let trigger = dir.join("exec");
    let burn = &fixtures().burn;
    let args = [trigger.as_os_str(), burn.as_os_str(), "30".as_ref()];
    let m = Mapper::start_as(prog, &args);
    let snap = dir.join("snap.data");
    synth_ok(["-p", &m.pid.to_string(), "-o", snap.to_str().unwrap()]);
    let rec = dir.join("rec.data");
    let recorder = perf_record_enabled(m.pid, &rec, dir, perf_args);
    // a second of the first image's samples, then the exec
    std::thread::sleep(std::time::Duration::from_secs(1));
    std::fs::write(&trigger, b"").unwrap();
    let exe = format!("/proc/{}/exe", m.pid);
    wait_until("the exec", || {
        std::fs::read_link(&exe).is_ok_and(|p| p == *burn)
    });
    std::thread::sleep(std::time::Duration::from_millis(after_ms));
    sigint(recorder);
    let merged = dir.join("merged.data");
    let err = merge(&[
        rec.as_os_str(),
        "--maps".as_ref(),
        snap.as_os_str(),
        "-o".as_ref(),
        merged.as_os_str(),
    ]);
    (m, merged, err)
}

// A process that execs during a `--synth=no` recording keeps its samples
// from before the exec: a snapshot taken before it, merged in, attributes
// them to the first image (as perf's own synthesis does), not `[unknown]`;
// the exec COMM gives perf only the new image's maps.
#[test]
#[ignore = "needs perf and permission to record"]
fn samples_before_an_exec_keep_the_first_images_maps() {
    needs_perf_record();
    let dir = scratch("merge-exec");
    let prog = build_fixture("burnexec", &dir, &[]);
    let perf_args = ["--synth=no", "-F", "499"];
    let (_m, merged, err) = merged_across_an_exec(&dir, &prog, &perf_args, 500);
    let report = perf(&[
        "report".as_ref(),
        "--stdio".as_ref(),
        "--sort".as_ref(),
        "dso,sym".as_ref(),
        "-i".as_ref(),
        merged.as_os_str(),
    ]);
    let name = prog.file_name().unwrap().to_str().unwrap();
    let first = report
        .lines()
        .find(|l| l.contains("pre_exec_burn"))
        .unwrap_or_else(|| panic!("no sample in pre_exec_burn ({err}):\n{report}"));
    assert!(first.contains(name), "{first}");
    assert!(
        report.contains("burn_work"),
        "no sample after the exec:\n{report}"
    );
}

/// Of `pid`'s samples in `data` (`perf script` with callchains): how many
/// there are, and how many are shown under `comm` with a user frame in
/// `main` of the program `prog`.
fn samples_in_main(data: &Path, pid: u32, comm: &str, prog: &Path) -> (usize, usize) {
    let text = perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "comm,pid,ip,sym,dso".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    let (pid, dso) = (pid.to_string(), format!("({})", prog.display()));
    let (mut all, mut in_main) = (0, 0);
    // a sample: a header line (comm, pid), then its frames, then a blank line
    for sample in text.split("\n\n") {
        let mut lines = sample.trim_start_matches('\n').lines();
        let head: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        if head.get(1) != Some(&pid.as_str()) {
            continue;
        }
        all += 1;
        let main = |l: &str| l.split_whitespace().nth(1) == Some("main") && l.ends_with(&dso);
        if head[0] == comm && lines.any(main) {
            in_main += 1;
        }
    }
    (all, in_main)
}

// A process sampled in the kernel alone (`-e cpu-clock:k -g`: its user
// code only in the callchains) before it execs keeps its first image: the
// merge inserts it from a snapshot taken before, and its pre-exec samples'
// user frames resolve to that program's `main` under its name (they were
// left `[unknown]`, named after the new image: the exec COMM covered it).
#[test]
#[ignore = "needs root and perf"]
fn kernel_mode_samples_before_an_exec_keep_the_first_images_maps() {
    needs_perf_record();
    let dir = scratch("merge-kexec");
    let prog = build_fixture("syscallexec", &dir, &["-fno-omit-frame-pointer"]);
    let perf_args = ["--synth=no", "-e", "cpu-clock:k", "-g", "-F", "999"];
    let (m, merged, err) = merged_across_an_exec(&dir, &prog, &perf_args, 300);
    let rec = dir.join("rec.data");
    assert!(err.contains("(1 processes,"), "{err}");
    let maps = perf_mmaps_of(&merged);
    let path = prog.to_str().unwrap();
    assert!(
        maps.iter().any(|m2| m2.pid == m.pid && m2.path == path),
        "no map of {path} inserted: {err}"
    );
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let (all, in_main) = samples_in_main(&merged, m.pid, comm, &prog);
    assert!(all > 100, "too few samples: {all}");
    // the samples after the exec (the burner in user space: interrupts
    // alone) are a few percent
    assert!(
        in_main * 10 >= all * 8,
        "{in_main} of {all} samples in main of {comm} ({err})"
    );
    assert_eq!(samples_in_main(&rec, m.pid, comm, &prog).1, 0);
}

// A live merge two seconds or more after the recording's last sample says
// its maps are of now (a library swapped in since would take its samples);
// not for a recording on a clock of the user's choice (`-k`), whose times
// say nothing of now.
#[test]
#[ignore = "needs perf and permission to record"]
fn a_late_live_merge_says_its_maps_are_of_now() {
    let (b, dir) = burner_and_dir("merge-late");
    for (name, extra) in [("default", &[][..]), ("k", &["-k", "mono"][..])] {
        let rec = dir.join(format!("{name}.data"));
        let mut args = vec!["--synth=no"];
        args.extend_from_slice(extra);
        perf_record_pid(b.pid, &rec, &args, "0.5");
        assert!(record_count(&rec) > 10, "{name}: no samples");
        // (at least this long after the last sample, however slow the run)
        std::thread::sleep(std::time::Duration::from_secs(3));
        let out = dir.join(format!("{name}.merged.data"));
        let err = merge(&[rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
        let noted = err.contains("note: maps read from the live processes");
        assert_eq!(noted, name == "default", "{name}: {err}");
    }
}

/// Checks that `merged` (from `rec`, merge summary `err`) attributes the
/// burner's samples (`pid`) to libburn.so with its build id, perf's own
/// records untouched; `what` names the case in messages.
fn check_task_merge(rec: &Path, merged: &Path, pid: u32, err: &str, what: &str) {
    assert!(
        unknown_share(rec, pid) > 0.9,
        "{what}: not [unknown] before"
    );
    check_merged(rec, merged, pid, err);
    let ids = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        merged.as_os_str(),
    ]));
    let lib = fixtures().libburn.to_str().unwrap();
    let want = readelf_build_id(&fixtures().libburn);
    assert_eq!(ids.get(lib), want.as_ref(), "{what}: {ids:?}");
}

// A `perf record --synth=task -p` recording (perf's COMM of each thread,
// no FORK, no maps) gets the burner's maps with build ids.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_synth_task_recording_of_a_pid_is_merged() {
    let (b, dir) = burner_and_dir("merge-task-p");
    let rec = dir.join("rec.data");
    perf_record_pid(b.pid, &rec, &["--synth=task", "-g"], "1");
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    check_task_merge(&rec, &merged, b.pid, &err, "-p");
}

// `perf record --synth=task -a` (a FORK and COMM of every task at time 0,
// no maps) in a private pid namespace, file and pipe mode, merged live
// there: the running burner's samples resolve to libburn.so (they stayed
// [unknown]: its synthesized FORK was taken for a birth in the recording),
// its maps inserted after perf's FORK of it, which would drop them.
#[test]
#[ignore = "needs root (unshare -p) and perf record"]
fn a_synth_task_system_wide_recording_is_merged() {
    needs_root("unshare -fp --mount-proc");
    needs_perf_record();
    let dir = scratch("merge-task-a");
    let (ready, fifo) = (dir.join("ready"), dir.join("stdin"));
    mkfifo(&fifo);
    let d = |name: &str| q(&dir.join(name));
    // the burner's stdin is the FIFO, held open by the script (fd 3): it
    // stops when the namespace ends
    let script = format!(
        "set -e\nexec 3<>{fifo}\n{burn} 60 <{fifo} >{ready} &\n{wait}\
         perf record -q --synth=task -g -a -o {rec} -- sleep 1\n\
         perf record -q --synth=task -g -a -o - -- sleep 1 >{pipe}\n\
         {bin} merge {rec} -o {rec_m} 2>{rec_err}\n\
         {bin} merge {pipe} -o {pipe_m} 2>{pipe_err}\n",
        fifo = q(&fifo),
        burn = q(&fixtures().burn),
        ready = q(&ready),
        wait = sh_poll("the burner", &format!("! grep -q ready {}", q(&ready))),
        rec = d("rec.data"),
        pipe = d("pipe.data"),
        bin = bin(),
        rec_m = d("rec.merged.data"),
        rec_err = d("rec.err"),
        pipe_m = d("pipe.merged.data"),
        pipe_err = d("pipe.err"),
    );
    let o = Command::new("unshare")
        .args(["-fp", "--mount-proc", "--kill-child", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let text = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    assert!(
        o.status.success(),
        "{}\n{}{}",
        String::from_utf8_lossy(&o.stderr),
        text("rec.err"),
        text("pipe.err")
    );
    let pid: u32 = text("ready")
        .trim()
        .strip_prefix("ready ")
        .unwrap()
        .parse()
        .unwrap();
    for mode in ["rec", "pipe"] {
        let rec = dir.join(format!("{mode}.data"));
        let merged = dir.join(format!("{mode}.merged.data"));
        check_task_merge(&rec, &merged, pid, &text(&format!("{mode}.err")), mode);
    }
    // perf's FORK of the burner, then its maps (the kernel's records of
    // perf's workload come after)
    let dump = synth_ok(["dump".as_ref(), dir.join("rec.merged.data").as_os_str()]).stdout;
    let dump = String::from_utf8_lossy(&dump);
    let at = |what: &str| {
        dump.find(&format!("{what} pid={pid} "))
            .unwrap_or(usize::MAX)
    };
    assert!(
        at("fork") < at("mmap2") && at("mmap2") < dump.len(),
        "{dump}"
    );
}

/// A sample as `perf script` shows it: comm, tid, time, in `burn_phase`.
type Shown = (String, u32, f64, bool);

/// A thread's rename: tid, time, new name.
type Rename = (u32, f64, String);

/// The samples of `data` as `perf script` reads them (comm, tid, time and
/// whether the ip is in `burn_phase`), and each tid's rename: the time and
/// new name of its kernel COMM record (`--show-task-events`; those at time
/// 0 are synthesized, no renames).
fn comms_and_renames(data: &Path) -> (Vec<Shown>, Vec<Rename>) {
    let text = perf(&[
        "script".as_ref(),
        "--show-task-events".as_ref(),
        "-F".as_ref(),
        "comm,tid,time,ip,sym".as_ref(),
        "-G".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    let (mut samples, mut renames) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let time = |s: &str| s.trim_end_matches(':').parse::<f64>().ok();
        if let Some(at) = w.iter().position(|s| *s == "PERF_RECORD_COMM:") {
            // "... TID TIME: PERF_RECORD_COMM: NAME:PID/TID"
            let (name, ids) = w[at + 1].rsplit_once(':').unwrap();
            let tid = ids.split('/').nth(1).unwrap().parse().unwrap();
            let t = time(w[at - 1]).unwrap();
            if t > 0.0 {
                renames.push((tid, t, name.to_string()));
            }
        } else if let (3.., Some(tid), Some(t)) = (w.len(), w.get(1), w.get(2)) {
            if let (Ok(tid), Some(t)) = (tid.parse(), time(t)) {
                samples.push((w[0].to_string(), tid, t, line.contains("burn_phase")));
            }
        }
    }
    (samples, renames)
}

// A live merge of a recording in which two threads (the leader too) were
// renamed with prctl does not give them their new names before the
// rename (they show as :TID there), while samples after it carry the new
// names, the process still gets its maps and the summary counts both.
#[test]
#[ignore = "needs root and perf"]
fn a_live_merge_gives_a_renamed_thread_its_new_name_only_after_the_rename() {
    needs_perf_record();
    let dir = scratch("merge-rename");
    let prog = build_fixture("rename", &dir, &["-lpthread"]);
    let done = dir.join("done");
    let mut m = Mapper::start_as(&prog, &["0.3".as_ref(), done.as_os_str()]);
    let rec = dir.join("rec.data");
    let recorder = perf_record_enabled(m.pid, &rec, &dir, &["--synth=no"]);
    let stdin = m.child.stdin.as_mut().unwrap();
    std::io::Write::write_all(stdin, b"go\n").unwrap();
    wait_until("the renamed threads' burning", || done.exists());
    sigint(recorder);
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    let (samples, renames) = comms_and_renames(&merged);
    assert_eq!(renames.len(), 2, "{renames:?}\n{err}");
    let mut early_names = Vec::new();
    for (tid, at, name) in &renames {
        let of = |before: bool| {
            (samples.iter())
                .filter(move |s| s.1 == *tid && (s.2 < *at) == before && s.2 != *at)
                .collect::<Vec<_>>()
        };
        let (before, after) = (of(true), of(false));
        let counts = (before.len(), after.len());
        assert!(counts.0 > 20 && counts.1 > 20, "{tid}: {counts:?} samples");
        let early = before.iter().filter(|s| s.0 == *name).count();
        early_names.push((*tid, *at, early, before.len()));
        let late = after.iter().find(|s| s.0 != *name);
        assert!(late.is_none(), "{tid} renamed at {at}: {late:?}");
        let burnt = before.iter().filter(|s| s.3).count();
        let maps = (burnt, before.first());
        assert!(burnt * 2 > before.len(), "{tid}: maps missing: {maps:?}");
    }
    // (tid, rename time, samples before it under the new name, of all)
    let named = early_names.iter().any(|&(_, _, early, _)| early > 0);
    assert!(
        !named,
        "new names before the renames: {early_names:?}\n{err}"
    );
    assert!(err.contains("note: 2 threads' COMMs left out"), "{err}");
}

/// Samples in a recording as linux-perf-data reads them.
fn lpd_samples(data: &Path) -> usize {
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let f = std::io::BufReader::new(std::fs::File::open(data).unwrap());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(f).unwrap();
    let mut n = 0;
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { record, .. } = r {
            n += usize::from(matches!(
                record.parse(),
                Ok(linux_perf_event_reader::EventRecord::Sample(_))
            ));
        }
    }
    n
}

/// `convert`s the directory `rec` into DIR/flat.data and asserts `perf
/// script` prints the two alike (and over 100 lines); returns the file.
fn converted_prints_alike(rec: &Path, dir: &Path) -> PathBuf {
    let flat = dir.join("flat.data");
    synth_ok([
        "convert".as_ref(),
        rec.as_os_str(),
        "-o".as_ref(),
        flat.as_os_str(),
    ]);
    let script = |p: &Path| perf(&["script".as_ref(), "-i".as_ref(), p.as_os_str()]);
    let (theirs, ours) = (script(rec), script(&flat));
    assert!(theirs.lines().count() > 100, "{theirs}");
    // perf orders samples of the same time (two CPUs' timers firing
    // together) by how it read them, file by file from a directory: such a
    // pair may come the other way round (seen once in 8 loaded runs)
    // (a sample is a line, or with callchains a block ending in a blank one)
    let sorted = |t: &str| {
        let mut v: Vec<&str> = match t.contains("\n\n") {
            true => t.split("\n\n").collect(),
            false => t.lines().collect(),
        };
        v.sort_unstable();
        v.join("\n")
    };
    if sorted(&theirs) != sorted(&ours) {
        let first = (theirs.lines().zip(ours.lines()))
            .enumerate()
            .find(|(_, (a, b))| a != b);
        panic!(
            "perf script of the directory ({} lines) and of its conversion ({} lines) \
             differ, first at (line, directory, conversion): {first:?}",
            theirs.lines().count(),
            ours.lines().count()
        );
    }
    flat
}

/// `perf record --threads --synth=no` of the burner: a directory of
/// `data` and a `data.N` per recording thread.
fn record_directory(b: &Mapper, dir: &Path) -> PathBuf {
    let rec = dir.join("rec.dir");
    record(b.pid, &rec, &["--threads"]);
    let files: Vec<String> = std::fs::read_dir(&rec)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().any(|f| f == "data") && files.iter().any(|f| f.starts_with("data.")),
        "{files:?}"
    );
    rec
}

// A perf.data directory (`perf record --threads --synth=no`: records in
// `data` and a `data.N` per recording thread) is merged as a file is: the
// burner's samples resolve, samples and record count as perf reads the
// directory; `convert` with no option makes it one file that perf reads
// exactly as the directory (`perf script` identical) and linux-perf-data
// (which takes no directory) reads with every sample.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_perf_data_directory_is_merged_and_converted() {
    let (b, dir) = burner_and_dir("merge-dir");
    let rec = record_directory(&b, &dir);
    assert!(
        unknown_share(&rec, b.pid) > 0.9,
        "the directory lacks the maps"
    );
    let merged = dir.join("merged.data");
    let err = merge(&[rec.as_os_str(), "-o".as_ref(), merged.as_os_str()]);
    check_merged(&rec, &merged, b.pid, &err);
    let flat = converted_prints_alike(&rec, &dir);
    assert_eq!(lpd_samples(&flat), sample_fields(&rec).lines().count());
    // `dump` reads the directory as it reads the file
    let dump = |p: &Path| synth_ok(["dump".as_ref(), p.as_os_str()]).stdout;
    assert!(
        dump(&rec) == dump(&flat),
        "dump of the directory and its conversion differ"
    );
}

// With `-z` each data.N file holds a zstd stream of its own (helper-95:
// appended as they were, the second file's stream failed to decode): they
// are decompressed as the directory is assembled, and `perf script` prints
// the conversion as it prints the directory. The workload is two busy
// loops of the test's own, so that both recording threads write. A
// malformed record in one of them is refused naming that file.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_compressed_perf_data_directory_is_converted() {
    needs_perf_record();
    let dir = scratch("dir-z");
    let rec = dir.join("z.dir");
    // (each loop ends itself: `sh` has no job control to kill them by;
    // each on a CPU of its own, so that both CPUs' recording threads get
    // samples even when other tests keep one CPU busy)
    let loops = "taskset -c 0 timeout 0.5 yes >/dev/null & \
                 taskset -c 1 timeout 0.5 yes >/dev/null & wait";
    let work = ["sh", "-c", loops];
    perf_record_to(
        &rec,
        &["--threads", "-z"],
        &[&["--"][..], &work[..]].concat(),
    );
    let compressed = std::fs::read_dir(&rec)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("data."))
        .filter(|e| e.metadata().unwrap().len() > 0)
        .count();
    assert!(compressed >= 2, "{compressed} data.* files hold records");
    converted_prints_alike(&rec, &dir);
    // a malformed record in a compressed data.N file: the error names the
    // file, the offset counting in its records decompressed
    let (bad, _) = biggest_data_file(&rec);
    append_short_mmap2(&bad);
    let run = synth(["dump".as_ref(), rec.as_os_str()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    let want = format!("{}: at byte ", bad.display());
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("COMPRESSED records decompressed: malformed record of type 10"));
}

// A perf.data directory's files are read only as regular files of its
// own: a symlink named data.N (to /etc/passwd, say, which root would copy
// into the output) is refused, exit 2, naming it; a FIFO named data.N is
// skipped, as perf skips it, not waited on; a data.N ending inside a
// record is refused naming that file and the offset, as is a malformed
// record found after assembling (not the directory and an offset in its
// assembled copy); `--in-place` takes no directory.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_perf_data_directorys_odd_entries_are_refused_or_skipped() {
    let (b, dir) = burner_and_dir("merge-dir-hostile");
    let rec = record_directory(&b, &dir);
    drop(b);
    let flat = dir.join("flat.data");
    let convert = |out: &Path| {
        synth([
            "convert".as_ref(),
            rec.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
    };
    assert!(convert(&flat).status.success());
    mkfifo(&rec.join("data.900"));
    let with_fifo = dir.join("fifo.data");
    let run = convert(&with_fifo);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(std::fs::read(&flat).unwrap() == std::fs::read(&with_fifo).unwrap());
    std::os::unix::fs::symlink("/etc/passwd", rec.join("data.901")).unwrap();
    let run = convert(&dir.join("link.data"));
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(
        err.contains("data.901: a symlink in a perf.data directory"),
        "{err}"
    );
    assert!(!dir.join("link.data").exists());
    std::fs::remove_file(rec.join("data.901")).unwrap();
    // the biggest data.N loses its last 3 bytes
    let (cut, len) = biggest_data_file(&rec);
    assert!(len > 1000, "{len}");
    let f = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(len - 3).unwrap();
    let run = convert(&dir.join("cut.data"));
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}: ", cut.display())) && err.contains("offset"),
        "{err}"
    );
    let run = synth(["convert".as_ref(), "--in-place".as_ref(), rec.as_os_str()]);
    assert_eq!(
        run.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::remove_file(&cut).unwrap();
    // `data` alone holds only the head of the records: refused, not read
    // as a recording of none
    let run = synth(["dump".as_ref(), rec.join("data").as_os_str()]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("give the directory"), "{err}");
    // a second name of a file (of someone else's, where hard links to
    // them are allowed) is not read
    let other = dir.join("elsewhere");
    std::fs::write(&other, b"not records").unwrap();
    std::fs::hard_link(&other, rec.join("data.902")).unwrap();
    let run = convert(&dir.join("linked.data"));
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("data.902: a file of a perf.data directory with other hard links"));
    std::fs::remove_file(rec.join("data.902")).unwrap();
    // a record whole but malformed in a data.N file (an MMAP2 too short
    // for its fields), found after the directory is assembled: the error
    // names that file and the record's offset in it (not the directory and
    // an offset in the assembled copy)
    let (bad, len) = biggest_data_file(&rec);
    append_short_mmap2(&bad);
    let out = dir.join("m.data");
    for cmd in [&["dump"][..], &["merge", "-o", out.to_str().unwrap()]] {
        let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_ref()).collect();
        args.push(rec.as_os_str());
        let run = synth(args);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{cmd:?}: {err}");
        let want = format!(
            "{}: at offset {len}: malformed record of type 10",
            bad.display()
        );
        assert!(err.contains(&want), "{cmd:?}: {err}");
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&bad)
        .unwrap()
        .set_len(len)
        .unwrap();
    // a hole of 16 GiB claimed in `data`'s records is refused at once,
    // not copied to $TMPDIR as zeros (helper-95)
    let data = std::fs::read(rec.join("data")).unwrap();
    let (off, size) = (u64_at(&data, 40), u64_at(&data, 48));
    let end = (off + size) as usize;
    let hole = 16u64 << 30;
    let mut head = data[..end].to_vec();
    head[48..56].copy_from_slice(&(size + hole).to_le_bytes());
    let mut tail = data[end..].to_vec();
    let features: u32 = (0..4).map(|i| u64_at(&data, 72 + 8 * i).count_ones()).sum();
    for i in 0..features as usize {
        let at = 16 * i;
        let moved = u64_at(&tail, at) + hole;
        tail[at..at + 8].copy_from_slice(&moved.to_le_bytes());
    }
    let f = std::fs::File::create(rec.join("data")).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&head, 0).unwrap();
    f.write_all_at(&tail, end as u64 + hole).unwrap();
    let run = convert(&dir.join("hole.data"));
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    // (a hole reads as zeros: told as a zero-filled tail, found through
    // SEEK_DATA, not read)
    assert!(err.contains("are all zero (zero-filled"), "{err}");
}

/// The biggest regular `data.N` file of the directory `rec`, and its size.
fn biggest_data_file(rec: &Path) -> (PathBuf, u64) {
    std::fs::read_dir(rec)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("data.") && p.is_file()
        })
        .map(|p| {
            let n = p.metadata().unwrap().len();
            (p, n)
        })
        .max_by_key(|(_, n)| *n)
        .unwrap()
}

/// Appends to `file` an MMAP2 record (little-endian) whose 24 bytes are
/// too few for its fields: whole as a record, malformed as an MMAP2.
fn append_short_mmap2(file: &Path) {
    let mut rec = 10u32.to_le_bytes().to_vec();
    rec.extend(0u16.to_le_bytes());
    rec.extend(24u16.to_le_bytes());
    rec.resize(24, 0);
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    f.write_all(&rec).unwrap();
}

/// The little-endian u64 at `at`.
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
