//! `mmap2-synth convert --buildid-mmap2` end to end: real perf recordings
//! (inode-form MMAP2) get build ids equal to the ELF notes, perf reports
//! the same, and a library replaced on disk is never given the new file's id.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

/// `perf record` of `pid` for half a second, `extra` added.
fn perf_record(pid: u32, out: &Path, extra: &[&str]) {
    perf_record_pid(pid, out, extra, "0.5");
}

/// `perf report --sort dso,sym` without its `#` header lines.
fn report(data: &Path) -> String {
    perf(&[
        "report".as_ref(),
        "--stdio".as_ref(),
        "--sort".as_ref(),
        "dso,sym".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ])
    .lines()
    .filter(|l| !l.starts_with('#'))
    .collect::<Vec<_>>()
    .join("\n")
}

/// The MMAP2 lines of `dump --json`.
fn maps(data: &Path) -> Vec<Value> {
    let out = synth_ok(["dump".as_ref(), "--json".as_ref(), data.as_os_str()]);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["kind"] == "mmap2")
        .collect()
}

/// Runs convert and returns its summary (stderr), asserting success.
fn convert(args: &[&std::ffi::OsStr]) -> String {
    let mut all: Vec<&std::ffi::OsStr> = vec!["convert".as_ref(), "--buildid-mmap2".as_ref()];
    all.extend_from_slice(args);
    String::from_utf8(synth_ok(all).stderr).unwrap()
}

// A plain `perf record -g` (inode-form MMAP2): after convert every
// file-backed map shows a build id equal to its ELF note in perf script,
// perf report is unchanged, and only the converted records' bytes differ;
// --in-place writes the same bytes and keeps the file's mode.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn buildid_mmap2_gives_every_file_map_its_elf_id() {
    needs_perf_record();
    let b = Mapper::burner();
    let dir = scratch("convert");
    let rec = dir.join("rec.data");
    perf_record(b.pid, &rec, &["-g"]);
    let before = maps(&rec);
    assert!(
        before
            .iter()
            .any(|m| m["ino"].is_u64() && m["build_id"].is_null()),
        "perf 6.1 writes inode-form MMAP2"
    );
    let out = dir.join("out.data");
    let err = convert(&[rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert!(err.contains(" 0 stale"), "{err}");

    let script = perf(&[
        "script".as_ref(),
        "--show-mmap-events".as_ref(),
        "-i".as_ref(),
        out.as_os_str(),
    ]);
    let mut checked = 0;
    for line in script.lines().filter(|l| l.contains("PERF_RECORD_MMAP2")) {
        let path = line.rsplit(' ').next().unwrap();
        if !path.starts_with('/') {
            continue;
        }
        let want = readelf_build_id(Path::new(path)).expect("system files have build ids");
        assert!(line.contains(&format!("<{want}>")), "{line}");
        checked += 1;
    }
    let lib = fixtures().libburn.display().to_string();
    assert!(checked >= 3, "{script}");
    assert!(script.contains(&lib), "{script}");
    assert_eq!(report(&rec), report(&out));

    // Record by record (read by the test's own walk): the same records in
    // the same order; an MMAP2 differs in at most 26 bytes (header misc and
    // the 24-byte id field); an MMAP (v1, the kernel's) became an MMAP2 32
    // bytes longer with the same pid..pgoff, name and trailer.
    let (a, z) = (std::fs::read(&rec).unwrap(), std::fs::read(&out).unwrap());
    let (ra, rz) = (data_records(&a), data_records(&z));
    assert_eq!(ra.len(), rz.len());
    let mut converted = 0;
    for (x, y) in ra.iter().zip(&rz) {
        if x == y {
            continue;
        }
        converted += 1;
        match (x[0], y[0]) {
            (10, 10) => {
                assert_eq!(x.len(), y.len());
                let differing = x.iter().zip(y).filter(|(p, q)| p != q).count();
                assert!(differing <= 26, "{differing} bytes differ in {x:?}");
            }
            (1, 10) => {
                assert_eq!(x.len() + 32, y.len());
                assert_eq!(x[8..40], y[8..40], "pid, tid, addr, len, pgoff");
                assert_eq!(x[40..], y[72..], "name and trailer");
            }
            _ => panic!("record {x:?} became {y:?}"),
        }
    }
    assert!(converted >= 4, "{converted}");

    // In place: the same bytes, the mode kept.
    let inplace = dir.join("inplace.data");
    std::fs::copy(&rec, &inplace).unwrap();
    std::fs::set_permissions(&inplace, std::fs::Permissions::from_mode(0o640)).unwrap();
    convert(&[inplace.as_os_str(), "--in-place".as_ref()]);
    assert_eq!(std::fs::read(&inplace).unwrap(), z);
    let mode = std::fs::metadata(&inplace).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);
}

// MMAP2 records with the build-id flag over their inode bodies, as Linux
// writes them beside a session that asked for build ids (the flag is left
// in the header an mmap's records share): perf 6.1 aborts reading them;
// dump reads them as the inode form they are, and convert --buildid-mmap2
// repairs them (each file's map with its id), so perf reads the output.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn leaked_build_id_flags_are_read_and_repaired() {
    needs_perf_record();
    let b = Mapper::burner();
    let dir = scratch("convert-leaked");
    let rec = dir.join("rec.data");
    perf_record(b.pid, &rec, &[]);
    // the flag set on every inode-form MMAP2 whose device major shows it
    let mut bytes = std::fs::read(&rec).unwrap();
    let mut at = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    let mut flagged = 0;
    for r in data_records(&bytes.clone()) {
        let misc = u16::from_le_bytes([r[4], r[5]]);
        let maj = (r[0] == 10).then(|| u32::from_le_bytes(r[40..44].try_into().unwrap()));
        if misc & 0x4000 == 0 && maj.is_some_and(|m| m & 0xff > 20 || m > 0xff) {
            bytes[at + 4..at + 6].copy_from_slice(&(misc | 0x4000).to_le_bytes());
            flagged += 1;
        }
        at += r.len();
    }
    assert!(
        flagged >= 2,
        "no inode-form map on a device whose major shows the leak"
    );
    let leaked = dir.join("leaked.data");
    std::fs::write(&leaked, &bytes).unwrap();
    let o = Command::new("perf")
        .args(["script", "--show-mmap-events", "-i"])
        .arg(&leaked)
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "perf 6.1 reads the leaked flags: {o:?}"
    );
    let read = maps(&leaked);
    assert_eq!(
        read.iter().filter(|m| m["ino"].is_u64()).count(),
        maps(&rec).iter().filter(|m| m["ino"].is_u64()).count(),
        "dump reads them as inode form"
    );
    let out = dir.join("out.data");
    let err = convert(&[leaked.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert!(
        err.contains(&format!("{flagged} MMAP2 records had the build-id flag")),
        "{err}"
    );
    let script = perf(&[
        "script".as_ref(),
        "--show-mmap-events".as_ref(),
        "-i".as_ref(),
        out.as_os_str(),
    ]);
    let lib = fixtures().libburn.display().to_string();
    let want = readelf_build_id(&fixtures().libburn).unwrap();
    let line = script
        .lines()
        .find(|l| l.contains("PERF_RECORD_MMAP2") && l.contains(&lib));
    assert!(
        line.is_some_and(|l| l.contains(&format!("<{want}>"))),
        "{script}"
    );
}

// A library replaced on disk after a `--no-buildid` recording (no BUILD_ID
// table): while its process lives, its maps get the id of the file it still
// maps (by device and inode, through /proc/PID), never the new file's; once
// it is gone, they are counted as stale and keep their maj/min/ino;
// unchanged files still get their ids.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn replaced_library_is_stale_not_misattributed() {
    needs_perf_record();
    let f = fixtures();
    let dir = scratch("convert-stale");
    let lib = dir.join("libswap.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let m = Mapper::start(&[lib.as_os_str()]);
    let rec = dir.join("rec.data");
    perf_record(m.pid, &rec, &["--no-buildid", "-e", "cpu-clock"]);
    // A different build at the same path: a new inode.
    std::fs::remove_file(&lib).unwrap();
    std::fs::copy(&f.lib_md5, &lib).unwrap();
    let out = dir.join("out.data");
    let err = convert(&[rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let old_id = readelf_build_id(&f.lib_sha1).unwrap();
    let got = maps_of(&out, &lib);
    assert!(!got.is_empty(), "{err}");
    assert!(
        got.iter().all(|m| m == &(None, Some(old_id.clone()))),
        "{got:?}"
    );
    assert!(
        err.contains(" 0 stale") && !err.contains(" 0 from a live"),
        "{err}"
    );
    drop(m);
    let err = convert(&[rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert!(!err.contains(" 0 stale"), "{err}");
    assert!(err.contains("libswap.so now (replaced on disk"), "{err}");
    let lib_s = lib.to_str().unwrap();
    let new_id = readelf_build_id(&lib).unwrap();
    let mut seen_lib = 0;
    let mut seen_ids = 0;
    for m in maps(&out) {
        assert_ne!(m["build_id"].as_str(), Some(new_id.as_str()), "{m}");
        if m["path"] == lib_s {
            assert!(m["build_id"].is_null() && m["ino"].is_u64(), "{m}");
            seen_lib += 1;
        } else if m["build_id"].is_string() {
            seen_ids += 1;
        }
    }
    assert!(
        seen_lib >= 1,
        "the replaced library's maps are in the recording"
    );
    assert!(seen_ids >= 2, "unchanged files (libc, ld.so) got ids");
}

// Without perf: a snapshot (build-id MMAP2 already) converts to the same
// bytes, in file and in pipe mode; file mode into stdout and no option are
// refused with exit 2, writing nothing.
#[test]
fn convert_keeps_build_id_maps_and_refuses_what_it_cannot_do() {
    let f = fixtures();
    let dir = scratch("convert-cli");
    let m = Mapper::start(&[f.lib_sha1.as_os_str()]);
    let pid = m.pid.to_string();
    let snap = dir.join("snap.data");
    synth_ok(["-p", &pid, "-o", snap.to_str().unwrap()]);
    let out = dir.join("out.data");
    let err = convert(&[snap.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert!(err.contains(" 0 maps given build ids"), "{err}");
    assert_eq!(std::fs::read(&snap).unwrap(), std::fs::read(&out).unwrap());

    let pipe = dir.join("snap.pipe");
    let bytes = synth_ok(["-p", &pid, "-o", "-"]).stdout;
    std::fs::write(&pipe, &bytes).unwrap();
    let out_pipe = dir.join("out.pipe");
    convert(&[pipe.as_os_str(), "-o".as_ref(), out_pipe.as_os_str()]);
    assert_eq!(
        std::fs::read(&out_pipe).unwrap(),
        bytes,
        "a stream stays a stream"
    );
    std::fs::remove_file(&out).unwrap();
    let cases: [(Vec<&std::ffi::OsStr>, &str); 2] = [
        (
            vec![
                "convert".as_ref(),
                "--portable".as_ref(),
                snap.as_os_str(),
                "-o".as_ref(),
                "-".as_ref(),
            ],
            "only into a seekable file",
        ),
        (
            vec![
                "convert".as_ref(),
                snap.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
            ],
            "nothing to do",
        ),
    ];
    for (args, want) in cases {
        let o = synth(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{err}");
    }
    assert!(!out.exists(), "nothing written on refusal");
}

// Without perf: a `--no-buildid` snapshot (inode-form MMAP2) converted from
// disk holds the same maps and ids as a build-id snapshot of the process.
#[test]
fn inode_form_snapshot_converts_to_the_build_id_snapshot() {
    let f = fixtures();
    let dir = scratch("convert-snap");
    let m = Mapper::start(&[f.lib_sha1.as_os_str(), f.lib_md5.as_os_str()]);
    let pid = m.pid.to_string();
    let (plain, ids) = (dir.join("plain.data"), dir.join("ids.data"));
    synth_ok(["-p", &pid, "--no-buildid", "-o", plain.to_str().unwrap()]);
    synth_ok(["-p", &pid, "-o", ids.to_str().unwrap()]);
    let out = dir.join("out.data");
    let err = convert(&[plain.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert!(err.contains(" 0 stale"), "{err}");
    let key = |v: &Value| {
        (
            v["start"].as_u64(),
            v["path"].as_str().map(str::to_string),
            v["build_id"].as_str().map(str::to_string),
        )
    };
    let mut got: Vec<_> = maps(&out).iter().map(key).collect();
    let mut want: Vec<_> = maps(&ids).iter().map(key).collect();
    got.sort();
    want.sort();
    // The vDSO has no file on disk: the build-id snapshot reads it from
    // memory, convert passes it through.
    want.iter_mut()
        .filter(|w| w.1.as_deref() == Some("[vdso]"))
        .for_each(|w| w.2 = None);
    assert_eq!(got, want);
    let with_ids = got.iter().filter(|g| g.2.is_some()).count();
    assert!(with_ids >= 3, "{got:?}");
}

// A binary overwritten in place after the recording (`cp` over it keeps
// the inode, so device and inode still match): its maps take the id the
// recording's BUILD_ID table holds, never the new contents' id.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn table_wins_over_a_file_overwritten_in_place() {
    needs_perf_record();
    let dir = scratch("convert-overwritten");
    let bin = dir.join("mysum");
    std::fs::copy("/usr/bin/sha256sum", &bin).unwrap();
    let input = dir.join("zeros");
    std::fs::File::create(&input)
        .unwrap()
        .set_len(200 << 20)
        .unwrap();
    let rec = dir.join("rec.data");
    let o = std::process::Command::new("perf")
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(&bin)
        .arg(&input)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let old_id = readelf_build_id(&bin).unwrap();
    let table = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        rec.as_os_str(),
    ]));
    assert_eq!(table.get(bin.to_str().unwrap()), Some(&old_id), "{table:?}");
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before = ino(&bin);
    std::fs::write(&bin, std::fs::read("/usr/bin/ls").unwrap()).unwrap();
    assert_eq!(ino(&bin), before, "overwritten in place");
    let new_id = readelf_build_id(&bin).unwrap();
    assert_ne!(new_id, old_id);

    let out = dir.join("out.data");
    convert(&[rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let m: Vec<Value> = maps(&out)
        .into_iter()
        .filter(|m| m["path"] == bin.to_str().unwrap())
        .collect();
    assert!(!m.is_empty());
    for map in m {
        assert_eq!(map["build_id"], Value::String(old_id.clone()), "{map}");
    }
}

/// (inode, build id) of each MMAP2 of `path` in `data`, by `dump --json`,
/// in time order (perf writes its CPUs' records in rounds, not sorted).
fn maps_of(data: &Path, path: &Path) -> Vec<(Option<u64>, Option<String>)> {
    let mut maps: Vec<Value> = maps(data)
        .into_iter()
        .filter(|m| m["path"] == path.to_str().unwrap())
        .collect();
    maps.sort_by_key(|m| m["time"].as_u64());
    maps.iter()
        .map(|m| {
            (
                m["ino"].as_u64(),
                m["build_id"].as_str().map(str::to_string),
            )
        })
        .collect()
}

// A library replaced while recorded: one process mapped v1, the next v2 at
// the same path, and perf's BUILD_ID table holds v2's id for the path.
// Converted (in-place patch and stream both), only the map of the file at
// the path now (v2's inode, whose id is the table's) gets that id; v1's
// keeps its inode form, counted and named as ambiguous.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn one_table_id_for_a_library_replaced_while_recorded_goes_to_its_file_only() {
    needs_perf_record();
    let dir = scratch("convert-ambiguous");
    let r = record_replaced_library(&dir, true);
    let table = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        r.rec.as_os_str(),
    ]));
    assert_eq!(table.get(r.lib.to_str().unwrap()), Some(&r.ids[1]));
    let before = maps_of(&r.rec, &r.lib);
    let inodes: Vec<u64> = before.iter().filter_map(|m| m.0).collect();
    assert_eq!(inodes.len(), 2, "two maps, two files: {before:?}");
    assert_ne!(inodes[0], inodes[1]);
    let now = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&r.lib).unwrap());
    assert_eq!(inodes[1], now, "the second run mapped the file there now");
    for (name, extra) in [("patched", None), ("stream", Some("--to=pipe"))] {
        let out = dir.join(format!("{name}.data"));
        let mut args = vec![r.rec.as_os_str(), "-o".as_ref(), out.as_os_str()];
        args.extend(extra.map(std::ffi::OsStr::new));
        let err = convert(&args);
        let got = maps_of(&out, &r.lib);
        assert_eq!(
            got,
            [(Some(inodes[0]), None), (None, Some(r.ids[1].clone()))],
            "{name}"
        );
        assert!(
            err.contains(" 1 ambiguous")
                && err.contains("ambiguous: ")
                && err.contains("libburn.so"),
            "{name}: {err}"
        );
    }
}

// A library replaced after its last map but before the recording ended:
// the table holds the replacement's id (perf read it at the end) and the
// file at the path now is that replacement, so the map of the old file is
// stale, never given that id.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_library_replaced_before_the_recording_ended_is_stale() {
    needs_perf_record();
    let dir = scratch("convert-replaced-late");
    let r = record_replaced_library(&dir, false);
    let table = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        r.rec.as_os_str(),
    ]));
    assert_eq!(table.get(r.lib.to_str().unwrap()), Some(&r.ids[1]));
    let out = dir.join("out.data");
    let err = convert(&[r.rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let got = maps_of(&out, &r.lib);
    assert!(
        got.len() == 1 && got[0].0.is_some() && got[0].1.is_none(),
        "{got:?}"
    );
    assert!(
        err.contains(" 1 stale") && err.contains("libburn.so now (replaced on disk"),
        "{err}"
    );
}

/// A process in its own mount namespace (`unshare -m`) where `burn`'s
/// library path (`dir/libburn.so`) names another file, bind-mounted over
/// it: another build of the same source (`--build-id=md5`), or with
/// `same_build` a copy of the host's library (same id, another inode, as a
/// container's libc of the host's build). Returns it, the library path and
/// the id of the container's file.
fn container_burner(dir: &Path, same_build: bool) -> (Mapper, std::path::PathBuf, String) {
    let (burn, lib) = build_burner(dir, &[]);
    let theirs = dir.join("ctr-libburn.so");
    if same_build {
        std::fs::copy(&lib, &theirs).unwrap();
    } else {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/libburn.c");
        let (t, s) = (theirs.to_str().unwrap(), src.to_str().unwrap());
        cc(&["-shared", "-fPIC", "-O1", "-Wl,--build-id=md5", "-o", t, s]);
    }
    let (host_id, ctr_id) = (
        readelf_build_id(&lib).unwrap(),
        readelf_build_id(&theirs).unwrap(),
    );
    assert_eq!(host_id == ctr_id, same_build);
    let p = burner_with_library_bound_over(&burn, &lib, &theirs);
    (p, lib, ctr_id)
}

// perf's own recording (`-p`, inode-form MMAP2, with and without its
// BUILD_ID table) of a process in another mount namespace, whose library
// path names another file there than here: converted while it lives, its
// maps of that path get the id of the file it maps (read through /proc/PID,
// by device and inode), for another build and for a same-build copy, and
// perf script, perf buildid-list and perf report (the file in the build-id
// cache) agree.
#[test]
#[ignore = "needs root (unshare -m, mount) and perf record"]
fn a_live_containers_maps_get_its_files_ids() {
    needs_perf_record();
    needs_root("unshare -m");
    for same_build in [false, true] {
        let dir = scratch("convert-ctr");
        let (p, lib, ctr_id) = container_burner(&dir, same_build);
        let cache = dir.join("buildid-cache");
        let o = Command::new("perf")
            .args(["buildid-cache", "-a"])
            .arg(dir.join("ctr-libburn.so"))
            .env("PERF_BUILDID_DIR", &cache)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for extra in [&[][..], &["-B"]] {
            let what = format!("same build {same_build}, perf record {extra:?}");
            let rec = dir.join("rec.data");
            perf_record(p.pid, &rec, extra);
            let out = dir.join("out.data");
            let args = [rec.as_os_str(), "-o".as_ref(), out.as_os_str()];
            let err = convert(&[&args[..], &["--buildid-all".as_ref()]].concat());
            let got = maps_of(&out, &lib);
            assert!(!got.is_empty(), "{what}: {err}");
            for m in &got {
                assert_eq!(m, &(None, Some(ctr_id.clone())), "{what}: {err}");
            }
            assert!(
                err.contains(" 0 stale") && err.contains(" 0 ambiguous"),
                "{what}: {err}"
            );
            let lib_s = lib.to_str().unwrap();
            let mmaps: Vec<Map> = perf_mmaps_of(&out)
                .into_iter()
                .filter(|m| m.path == lib_s)
                .collect();
            assert_eq!(mmaps.len(), got.len(), "{what}");
            for m in mmaps {
                assert_eq!(m.build_id.as_deref(), Some(ctr_id.as_str()), "{what}");
            }
            let table = perf_buildid_list(&perf(&[
                "buildid-list".as_ref(),
                "-i".as_ref(),
                out.as_os_str(),
            ]));
            assert_eq!(table.get(lib_s), Some(&ctr_id), "{what}: {table:?}");
            let o = Command::new("perf")
                .args(["report", "--stdio", "--sort", "dso,sym", "-i"])
                .arg(&out)
                .env("PERF_BUILDID_DIR", &cache)
                .output()
                .unwrap();
            let shown = String::from_utf8_lossy(&o.stdout);
            let line = shown.lines().find(|l| l.contains("burn_work"));
            assert!(
                line.is_some_and(|l| l.contains("libburn.so")),
                "{what}: {shown}"
            );
        }
    }
}

// The same recording converted after the container's process is gone:
// its maps keep maj/min/ino (nothing can tell their id now), and the
// summary says the file mapped is not the one at the path now, replaced or
// another mount namespace's, rather than that it was replaced.
#[test]
#[ignore = "needs root (unshare -m, mount) and perf record"]
fn a_gone_containers_maps_are_not_said_to_be_replaced() {
    needs_perf_record();
    needs_root("unshare -m");
    let dir = scratch("convert-ctr-gone");
    let (p, lib, _) = container_burner(&dir, true);
    let rec = dir.join("rec.data");
    perf_record(p.pid, &rec, &[]);
    drop(p);
    let out = dir.join("out.data");
    let err = convert(&[rec.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    let got = maps_of(&out, &lib);
    assert!(!got.is_empty(), "{err}");
    assert!(
        got.iter().all(|m| m.0.is_some() && m.1.is_none()),
        "{got:?}"
    );
    let said = format!(
        "stale: the file mapped as {0} is not the file at {0} now (replaced on disk, or another mount namespace's)",
        lib.display()
    );
    assert!(err.contains(&said), "{err}");
    assert!(!err.contains("was replaced"), "{err}");
}
