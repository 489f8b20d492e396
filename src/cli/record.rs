//! `mmap2-synth record [OPTIONS] -- PERF-RECORD-ARGS...`: runs `perf record`
//! without its own text-based synthesis, and gives its output the maps of
//! the processes it records. perf starts with its events disabled
//! (`-D -1 --control fifo:...`); once it acknowledges `enable`, the
//! processes are snapshotted (every map made from then on is in perf's own
//! stream), and when perf exits the snapshot is merged into its output in
//! place.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use mmap2_synth::proc::{self, Target};
use mmap2_synth::rewrite::{self, MergeOptions, Which};
use mmap2_synth::snapshot::{self, Out, WriteOptions};
use mmap2_synth::{bytes::Endian, proc::HostFacts, summary};

use super::args::RecordArgs;
use super::error::CliError;
use super::print;
use super::snapshot::scan_options;

/// What `perf record`'s arguments say: where it writes and what it records.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PerfTarget {
    pub(crate) output: PathBuf,
    /// None: a workload (perf's child).
    pub(crate) target: Option<Target>,
}

/// Reads `-o/--output`, `-a/--all-cpus` and `-p/--pid` out of `perf
/// record`'s arguments (what is after a lone `--`, or the first word that
/// is not an option, is the workload).
pub(crate) fn perf_target(args: &[String]) -> Result<PerfTarget, CliError> {
    let mut output = PathBuf::from("perf.data");
    let mut target = None;
    let mut pids = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let value = |i: &mut usize| -> Result<String, CliError> {
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or_else(|| CliError::Usage(format!("record: {a} needs a value")))
        };
        match a {
            "--" => break,
            "-o" | "--output" => output = PathBuf::from(value(&mut i)?),
            "-a" | "--all-cpus" => target = Some(Target::All),
            "-p" | "--pid" => pids.push(value(&mut i)?),
            _ if a.starts_with("--output=") => output = PathBuf::from(&a["--output=".len()..]),
            _ if a.starts_with("--pid=") => pids.push(a["--pid=".len()..].to_string()),
            _ if !a.starts_with('-') => break,
            _ => {}
        }
        i += 1;
    }
    if output.as_os_str() == "-" {
        return Err(CliError::Usage(
            "record: perf's output must be a file (-o -, a stream, cannot be merged into)".into(),
        ));
    }
    if !pids.is_empty() && target.is_none() {
        let mut list = Vec::new();
        for p in pids.iter().flat_map(|p| p.split(',')) {
            list.push(
                p.parse()
                    .map_err(|_| CliError::Usage(format!("record: bad pid {p}")))?,
            );
        }
        target = Some(Target::Pids(list));
    }
    Ok(PerfTarget { output, target })
}

/// Polls `f` every 10 ms for at most 30 s, or until perf has exited.
fn poll<T>(
    perf: &mut std::process::Child,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, CliError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if let Ok(Some(st)) = perf.try_wait() {
            // the workload ended (or perf failed) before recording began:
            // perf's status is ours
            eprintln!("mmap2-synth record: perf exited ({st}) before it would {what}");
            return Err(CliError::Child(exit_code(st)));
        }
        if Instant::now() > deadline {
            let _ = perf.kill();
            return Err(CliError::Usage(format!(
                "record: perf did not {what} within 30 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(crate) fn run_record(r: &RecordArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let pt = perf_target(&r.perf_args)?;
    let tmp = std::env::temp_dir().join(format!("mmap2-synth-record-{}", std::process::id()));
    std::fs::create_dir(&tmp)
        .map_err(|e| CliError::Usage(format!("record: {}: {e}", tmp.display())))?;
    let result = record_in(r, &pt, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    if !r.scan.quiet {
        eprintln!(
            "mmap2-synth record: {:.3} s",
            started.elapsed().as_secs_f64()
        );
    }
    result
}

fn record_in(r: &RecordArgs, pt: &PerfTarget, tmp: &Path) -> Result<(), CliError> {
    let (ctl, ack) = (tmp.join("ctl"), tmp.join("ack"));
    let fifo_err = |e: std::io::Error| CliError::Usage(format!("record: making a FIFO: {e}"));
    mmap2_synth::sys::mkfifo(&ctl).map_err(fifo_err)?;
    mmap2_synth::sys::mkfifo(&ack).map_err(fifo_err)?;
    // Opened first, non-blocking: perf opens it for writing and would wait.
    let mut ack_r = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&ack)
        .map_err(fifo_err)?;
    let control = format!("fifo:{},{}", ctl.display(), ack.display());
    super::RECORDING.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut perf = Command::new("perf")
        .args(["record", "--synth=no", "-D", "-1", "--control", &control])
        .args(&r.perf_args)
        .spawn()
        .map_err(|e| {
            CliError::Usage(format!(
                "record: cannot run perf (apt-get install linux-perf): {e}"
            ))
        })?;
    let mut ctl_w = poll(&mut perf, "open its control FIFO", || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&ctl)
            .ok()
    })?;
    ctl_w
        .write_all(b"enable\n")
        .map_err(|e| CliError::Usage(format!("record: writing to perf's control FIFO: {e}")))?;
    let mut got = Vec::new();
    poll(&mut perf, "acknowledge enable", || {
        let mut b = [0u8; 64];
        if let Ok(n) = ack_r.read(&mut b) {
            got.extend_from_slice(&b[..n]);
        }
        got.windows(3).any(|w| w == b"ack").then_some(())
    })?;
    // Events are on: every map made from now on is in perf's stream.
    let target = match &pt.target {
        Some(t) => t.clone(),
        None => Target::Pids(children_of(perf.id())),
    };
    let snap = tmp.join("snap.data");
    let live = snapshot_to(r, &target, &snap);
    let status = perf
        .wait()
        .map_err(|e| CliError::Usage(format!("record: waiting for perf: {e}")))?;
    super::RECORDING.store(false, std::sync::atomic::Ordering::SeqCst);
    let live = live?;
    if !pt.output.exists() {
        return Err(CliError::Child(exit_code(status)));
    }
    let opts = MergeOptions {
        which: Which::Needed,
        maps: Some(snap),
        snapshot: proc::Options::default(),
        in_place: true,
        kernel: true,
    };
    let report = rewrite::merge(&pt.output, &pt.output, &opts)?;
    if !r.scan.quiet {
        let dest = pt.output.display().to_string();
        print(&summary::merge(&report, Duration::ZERO, &dest));
        print(&summary::skip_lines(&live.skipped));
    }
    // perf's status when it failed (a failing workload), else the merge's
    match status.success() {
        true => Ok(()),
        false => Err(CliError::Child(exit_code(status))),
    }
}

/// Snapshots `target` into the file `snap` (no kernel map: perf writes
/// one; no watch: perf's events are on).
fn snapshot_to(
    r: &RecordArgs,
    target: &Target,
    snap: &Path,
) -> Result<snapshot::LiveReport, CliError> {
    let mut f = std::fs::File::create(snap).map_err(|e| CliError::write(snap, e))?;
    let wopts = WriteOptions {
        endian: Endian::NATIVE,
        forks: *target == Target::All,
        cmdline: Vec::new(),
        host: HostFacts::read(),
        kernel: None,
        watch: false,
        watch_pages: None,
    };
    let scan = scan_options(&r.scan)?;
    snapshot::write_live(target, &scan, Out::File(&mut f), &wopts)
        .map_err(|e| CliError::Usage(format!("record: snapshot: {e}")))
}

/// perf's exit status as ours (a signal as 128 + it, as a shell says).
fn exit_code(st: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => c.clamp(1, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(1, 255) as u8,
        _ => 1,
    }
}

/// The processes perf started (its workload) and theirs, down the tree.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if out.len() > 100_000 {
            break;
        }
        let task = format!("/proc/{p}/task");
        for t in std::fs::read_dir(task).into_iter().flatten().flatten() {
            let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for child in c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
                if !out.contains(&child) {
                    out.push(child);
                    todo.push(child);
                }
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // perf record's -o, -a and -p are read; the workload's own flags are not.
    #[test]
    fn perf_targets() {
        let a = |v: &[&str]| perf_target(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let t = a(&["-g", "-p", "12,13", "-o", "x.data", "--", "sleep", "1"]).unwrap();
        assert_eq!(
            t,
            PerfTarget {
                output: "x.data".into(),
                target: Some(Target::Pids(vec![12, 13]))
            }
        );
        let t = a(&["-a", "--output=y"]).unwrap();
        assert_eq!(
            t,
            PerfTarget {
                output: "y".into(),
                target: Some(Target::All)
            }
        );
        let t = a(&["-g", "./prog", "-o", "not-perfs"]).unwrap();
        assert_eq!(
            t,
            PerfTarget {
                output: "perf.data".into(),
                target: None
            }
        );
        assert!(a(&["-o", "-"]).is_err());
        assert!(a(&["-p", "x"]).is_err());
    }
}
