//! Kernel maps in snapshots: the kernel's text map as perf writes it (same
//! start, length and pgoff), as a build-id MMAP2 carrying the running
//! kernel's id, in the BUILD_ID table; on by default with --all only.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

/// The lines of `dump --json` for the kernel's map (`[kernel.kallsyms]...`).
fn kernel_lines(data: &Path) -> Vec<Value> {
    let out = synth_ok(["dump".as_ref(), "--json".as_ref(), data.as_os_str()]);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| {
            v["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("[kernel.kallsyms]"))
                && v["kind"] != "build_id"
        })
        .collect()
}

// `-p PID --kernel`: one kernel map with perf's start, length and pgoff
// (those of `perf record -e dummy -- true`'s own kernel map), cpumode
// kernel, pid -1, PROT_EXEC, the id `perf buildid-list -k` reports, which
// is also the table's `[kernel.kallsyms]` entry; none without --kernel.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn kernel_map_is_perfs_with_the_running_kernels_id() {
    needs_perf_record();
    let m = Mapper::start(&[]);
    let dir = scratch("kernel");
    let snap = dir.join("snap.data");
    let pid = m.pid.to_string();
    let err = synth_ok(["-p", &pid, "--kernel", "-o", snap.to_str().unwrap()]).stderr;
    assert!(
        String::from_utf8_lossy(&err).contains("kernel: 1 maps"),
        "{}",
        String::from_utf8_lossy(&err)
    );
    let rec = dir.join("perf.data");
    let o = Command::new("perf")
        .args(["record", "-q", "-e", "dummy", "-o"])
        .arg(&rec)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let ours = kernel_lines(&snap);
    let theirs = kernel_lines(&rec);
    assert_eq!((ours.len(), theirs.len()), (1, 1), "{ours:?} {theirs:?}");
    let (k, p) = (&ours[0], &theirs[0]);
    for f in ["start", "len", "pgoff", "path", "pid", "cpumode"] {
        assert_eq!(k[f], p[f], "{f}: {k} vs {p}");
    }
    assert_eq!(k["kind"], "mmap2");
    assert_eq!(k["prot"], 5, "PROT_READ|PROT_EXEC");
    let id = perf(&["buildid-list".as_ref(), "-k".as_ref()])
        .trim()
        .to_string();
    assert_eq!(k["build_id"], Value::String(id.clone()));
    let table = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-i".as_ref(),
        snap.as_os_str(),
    ]));
    assert_eq!(table.get("[kernel.kallsyms]"), Some(&id));
    let script = perf(&[
        "script".as_ref(),
        "--show-mmap-events".as_ref(),
        "-i".as_ref(),
        snap.as_os_str(),
    ]);
    assert!(
        script.lines().any(|l| l.contains("PERF_RECORD_MMAP2 -1/0")
            && l.contains(&format!("<{id}>"))
            && l.ends_with("r-xp [kernel.kallsyms]_text")),
        "{script}"
    );

    let plain = dir.join("plain.data");
    synth_ok(["-p", &pid, "-o", plain.to_str().unwrap()]);
    assert!(
        kernel_lines(&plain).is_empty(),
        "no kernel map without --kernel"
    );
}

// --all writes the kernel map unless --no-kernel (in a private PID namespace).
#[test]
#[ignore = "needs root (unshare -fp)"]
fn all_writes_the_kernel_map_by_default() {
    needs_root("unshare -fp");
    let dir = scratch("kernel-all");
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let script = format!(
        "{bin} --all -q -o '{a}' && {bin} --all --no-kernel -q -o '{b}'",
        bin = bin(),
        a = a.display(),
        b = b.display()
    );
    let out = Command::new("unshare")
        .args(["-fp", "--mount-proc", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(kernel_lines(&a).len(), 1);
    assert!(kernel_lines(&b).is_empty());
}

/// `perf report --sort dso` lines (percent and dso), without comments.
fn dso_report(data: &Path) -> Vec<String> {
    perf(&[
        "report".as_ref(),
        "--sort".as_ref(),
        "dso".as_ref(),
        "--stdio".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ])
    .lines()
    .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    .collect()
}

/// The recording with its kernel map made a user map of an unused pid
/// (pid -1 -> 0x7fff0000, cpumode user), as a test-side rewrite.
fn without_kernel_map(rec: &[u8]) -> Vec<u8> {
    let mut b = rec.to_vec();
    let mut n = 0;
    for (at, r) in data_records_at(rec) {
        if !matches!(r[0], 1 | 10) || r.len() < 12 {
            continue;
        }
        let pid = u32::from_le_bytes(r[8..12].try_into().unwrap());
        if pid == u32::MAX && (r[4] & 7) == 1 {
            b[at + 8..at + 12].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
            b[at + 4] = (b[at + 4] & !7) | 2;
            n += 1;
        }
    }
    assert_eq!(n, 1, "perf writes one kernel map (no modules here)");
    b
}

/// (offset, bytes) of each record of a little-endian file's data section.
fn data_records_at(file: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let start = u64::from_le_bytes(file[40..48].try_into().unwrap()) as usize;
    let mut at = start;
    data_records(file)
        .into_iter()
        .map(|r| {
            let here = at;
            at += r.len();
            (here, r)
        })
        .collect()
}

// A recording whose kernel map was removed puts its kernel samples in
// [unknown]; merge (live, and --maps from a --kernel snapshot) inserts the
// kernel map and perf reports them in [kernel.kallsyms] as for the
// original; a snapshot of another kernel release inserts nothing; merging
// into a recording that has its kernel map adds nothing.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn merge_repairs_a_missing_kernel_map_once() {
    needs_perf_record();
    let dir = scratch("kernel-merge");
    let rec = dir.join("rec.data");
    let o = Command::new("perf")
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .args([
            "--",
            "sh",
            "-c",
            "for i in $(seq 1 3000); do cat /proc/self/stat > /dev/null; done",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let original = dso_report(&rec);
    let kernel_share = original
        .iter()
        .find(|l| l.ends_with("[kernel.kallsyms]"))
        .expect("kernel samples")
        .clone();
    let broken = dir.join("broken.data");
    std::fs::write(&broken, without_kernel_map(&std::fs::read(&rec).unwrap())).unwrap();
    let before = dso_report(&broken);
    assert!(
        !before.iter().any(|l| l.ends_with("[kernel.kallsyms]")),
        "{before:?}"
    );
    let pct = kernel_share.split(' ').next().unwrap();
    assert!(before.contains(&format!("{pct} [unknown]")), "{before:?}");

    let fixed = dir.join("fixed.data");
    let err = synth_ok([
        "merge".as_ref(),
        broken.as_os_str(),
        "-o".as_ref(),
        fixed.as_os_str(),
    ])
    .stderr;
    assert!(
        String::from_utf8_lossy(&err).contains("1 kernel/module maps inserted"),
        "{}",
        String::from_utf8_lossy(&err)
    );
    assert_eq!(dso_report(&fixed), original);

    let m = Mapper::start(&[]);
    let snap = dir.join("snap.data");
    synth_ok([
        "-p",
        &m.pid.to_string(),
        "--kernel",
        "-q",
        "-o",
        snap.to_str().unwrap(),
    ]);
    let from_snap = dir.join("from-snap.data");
    synth_ok([
        "merge".as_ref(),
        broken.as_os_str(),
        "--maps".as_ref(),
        snap.as_os_str(),
        "-o".as_ref(),
        from_snap.as_os_str(),
    ]);
    assert_eq!(dso_report(&from_snap), original);

    // A snapshot of another kernel release gives the recording nothing.
    let mut other = std::fs::read(&snap).unwrap();
    let r = feature_range(&other, 4).expect("OSRELEASE");
    other[r.start + 4] ^= 1;
    let other_snap = dir.join("other-release.data");
    std::fs::write(&other_snap, &other).unwrap();
    let refused = dir.join("refused.data");
    let err = synth_ok([
        "merge".as_ref(),
        broken.as_os_str(),
        "--maps".as_ref(),
        other_snap.as_os_str(),
        "-o".as_ref(),
        refused.as_os_str(),
    ])
    .stderr;
    assert!(
        String::from_utf8_lossy(&err).contains("not of the recording's kernel release"),
        "{}",
        String::from_utf8_lossy(&err)
    );
    assert_eq!(dso_report(&refused), before);

    let again = dir.join("again.data");
    let err = synth_ok([
        "merge".as_ref(),
        rec.as_os_str(),
        "-o".as_ref(),
        again.as_os_str(),
    ])
    .stderr;
    assert!(
        !String::from_utf8_lossy(&err).contains("kernel map"),
        "{}",
        String::from_utf8_lossy(&err)
    );
    // the same records (nothing added; the records may sit further back)
    assert_eq!(
        data_records(&std::fs::read(&again).unwrap()),
        data_records(&std::fs::read(&rec).unwrap()),
        "no second kernel map"
    );
}

// `-p PID --kernel --json` prints the same lines as `dump --json` of the
// `-p PID --kernel` snapshot, the kernel's map and table entry included.
#[test]
fn kernel_json_is_the_dump_of_the_snapshot() {
    let m = Mapper::start(&[]);
    let dir = scratch("kernel-json");
    let snap = dir.join("snap.data");
    let pid = m.pid.to_string();
    synth_ok(["-p", &pid, "--kernel", "-q", "-o", snap.to_str().unwrap()]);
    let live = synth_ok(["-p", &pid, "--kernel", "-q", "--json"]).stdout;
    let dumped = synth_ok(["dump".as_ref(), "--json".as_ref(), snap.as_os_str()]).stdout;
    assert_eq!(
        String::from_utf8(live).unwrap(),
        String::from_utf8(dumped).unwrap()
    );
    if is_root() {
        assert_eq!(
            kernel_lines(&snap).len(),
            1,
            "root reads the kernel's addresses"
        );
    }
}
