//! `mmap2-synth record [OPTIONS] -- PERF-RECORD-ARGS...`: runs `perf record`
//! without its own text-based synthesis, and gives its output the maps of
//! the processes it records. perf starts with its events disabled
//! (`-D -1 --control fifo:...`); once it acknowledges `enable`, the
//! processes are snapshotted (every map made from then on is in perf's own
//! stream), and when perf exits the snapshot is merged into its output.
//! perf writes in a private directory of ours, its file linked at `-o`
//! before its events are on; the merge goes to `-o` only while `-o` is
//! still that file (see [`landing`]).

mod buildid;
mod landing;
mod leftover;
mod perf_args;
mod scratch;
mod signals;
mod synthesis;

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use mmap2_synth::proc::{self, Target};
use mmap2_synth::rewrite::{self, MergeOptions};
use mmap2_synth::snapshot::{self, Out, WriteOptions};
use mmap2_synth::{bytes::Endian, proc::HostFacts, summary};

use super::args::RecordArgs;
use super::error::CliError;
use super::print;
use super::snapshot::scan_options;
use perf_args::{perf_target, PerfTarget};
use scratch::{make_scratch, RemoveScratch};
pub(crate) use signals::on_signal;
use signals::SignalsToPerf;

/// For a signal ending the process: perf's file put at `-o` if it is not
/// there yet (see [`landing::settle`]), and the scratch directory removed.
pub(crate) fn remove_scratch() {
    landing::settle();
    scratch::remove_scratch();
}

/// Polls `f` every 10 ms for at most 30 s, or until perf has exited
/// (then None when it succeeded: nothing was recorded, nothing to merge).
fn poll<T>(
    perf: &mut std::process::Child,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> Result<Option<T>, CliError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return Ok(Some(v));
        }
        if let Ok(Some(st)) = perf.try_wait() {
            // the workload ended (or perf failed, or only parsed its
            // options) before recording began: perf's status is ours
            eprintln!("mmap2-synth record: perf exited ({st}) before it would {what}");
            return failed(st).map_or(Ok(None), Err);
        }
        if Instant::now() > deadline {
            stop_perf(perf);
            return Err(CliError::Record(format!(
                "record: perf did not {what} within 30 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops a perf that does not answer: SIGTERM first (perf then stops its
/// workload and finishes its file), SIGKILL after 5 s (the workload is then
/// orphaned), and reaps it, for 5 s more at most (a perf stuck in the
/// kernel is left to init rather than hang us).
fn stop_perf(perf: &mut std::process::Child) {
    use std::os::fd::AsRawFd;
    let exited = |perf: &mut std::process::Child| {
        for _ in 0..500 {
            if !matches!(perf.try_wait(), Ok(None)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    };
    // not reaped yet: the pid is still perf's
    if let Ok(fd) = mmap2_synth::sys::pidfd_open(perf.id()) {
        let _ = mmap2_synth::sys::pidfd_send_signal(fd.as_raw_fd(), libc::SIGTERM);
        if exited(perf) {
            return;
        }
    }
    let _ = perf.kill();
    exited(perf);
}

pub(crate) fn run_record(r: &RecordArgs) -> Result<(), CliError> {
    let started = Instant::now();
    // the scan's options are checked before perf runs the workload
    scan_options(&r.scan, &r.written)?;
    // perf inherits our stdout
    let stdout_is_pipe = std::fs::metadata("/proc/self/fd/1").is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_fifo()
    });
    let pt = perf_target(&r.perf_args, stdout_is_pipe)?;
    // where perf's recording goes: a regular file or nothing yet (a FIFO,
    // `/dev/stdout` or a directory could not be merged into), as the
    // kernel follows links (a link to nothing: the file it names is made)
    if std::fs::metadata(&pt.output).is_ok_and(|m| !m.is_file())
        || mmap2_synth::output::names_a_directory(&pt.output)
    {
        return Err(not_a_file(&pt.output));
    }
    // another user's link on the way is refused (perf, as root, followed
    // it: an empty file or a /proc/sys file it names truncated and
    // written), and so is another user's file at its end
    let walked = mmap2_synth::output::walk(&pt.output, true)?;
    landing::prepare(walked)?;
    // perf's file put at -o however record ends (perf is reaped first)
    let _landing = landing::Settle;
    let tmp = make_scratch()?;
    let result = {
        // removed however record_in ends (a panic too)
        let _scratch = RemoveScratch;
        record_in(r, &pt, &tmp)
    };
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
    let fifo_err = |e: std::io::Error| CliError::Record(format!("record: making a FIFO: {e}"));
    mmap2_synth::sys::mkfifo(&ctl).map_err(fifo_err)?;
    mmap2_synth::sys::mkfifo(&ack).map_err(fifo_err)?;
    // Opened first, non-blocking: perf opens it for writing and would wait.
    let mut ack_r = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&ack)
        .map_err(fifo_err)?;
    let control = format!("fifo:{},{}", ctl.display(), ack.display());
    let output = landing::perf_output()
        .ok_or_else(|| CliError::Record("record: no directory for perf's output".into()))?;
    let signals = SignalsToPerf::spawning();
    let mut cmd = Command::new("perf");
    // our -o after the user's options (perf takes the last), before the
    // workload
    let (options, workload) = r.perf_args.split_at(pt.options_end.min(r.perf_args.len()));
    // perf synthesizes none of what we insert; CGROUP and NAMESPACES
    // records when asked (see synthesis)
    let synth = format!("--synth={}", pt.synth());
    cmd.args(["record", &synth, "-D", "-1", "--control", &control])
        .args(options)
        .args(["-o", &output])
        .args(workload);
    // a terminal's hangup reaches the whole process group: perf would die
    // of it with its file unfinished; we pass it on as SIGTERM instead
    mmap2_synth::sys::ignore_sighup_on_exec(&mut cmd);
    // and if we are killed (SIGKILL), perf stops as for Ctrl-C and writes
    // its file, rather than record on with nobody to merge it
    mmap2_synth::sys::signal_on_parent_death(&mut cmd, libc::SIGTERM);
    let perf = cmd.spawn().map_err(|e| {
        CliError::Record(format!(
            "record: cannot run perf (apt-get install linux-perf): {e}"
        ))
    })?;
    let mut perf = Perf {
        child: perf,
        waited: false,
    };
    signals.started(&mut perf.child);
    let Some(mut ctl_w) = poll(&mut perf.child, "open its control FIFO", || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&ctl)
            .ok()
    })?
    else {
        return Ok(());
    };
    // perf writes its file's header (its events open) before it reads
    // commands: it is at -o before the events are on (and stays there if
    // we are killed); a perf failing before leaves -o as it was
    let made = poll(&mut perf.child, "write its file's header", || {
        landing::perf_wrote_its_header().then_some(())
    })?;
    if made.is_none() {
        return Ok(());
    }
    if let Err(e) = landing::link_at_output() {
        eprintln!("mmap2-synth record: {e}");
    }
    // (on failure perf, waiting for ever with its events off, is stopped
    // as the guard goes)
    ctl_w
        .write_all(b"enable\n")
        .map_err(|e| CliError::Record(format!("record: writing to perf's control FIFO: {e}")))?;
    let mut got = Vec::new();
    let acked = poll(&mut perf.child, "acknowledge enable", || {
        let mut b = [0u8; 64];
        if let Ok(n) = ack_r.read(&mut b) {
            got.extend_from_slice(&b[..n]);
        }
        got.windows(3).any(|w| w == b"ack").then_some(())
    })?;
    if acked.is_none() {
        return Ok(());
    }
    // Events are on: every map made from now on is in perf's stream.
    // perf's workload (its child, even with -p) and the workload's own
    let workload = children_of(perf.child.id());
    let target = synthesis::snapshot_target(pt, &workload);
    let snap = tmp.join("snap.data");
    let live = snapshot_to(r, (&target, pt.data_maps), &snap);
    let status = perf.wait()?;
    drop(signals);
    let live = live?;
    merge_into(r, pt, (snap, &workload), status, &live)
}

/// perf as started: stopped (SIGTERM, then SIGKILL) and reaped if
/// dropped before it was waited for, so that no early return or panic of
/// ours leaves it recording with nobody to enable it or merge its file.
struct Perf {
    child: std::process::Child,
    waited: bool,
}

impl Perf {
    fn wait(&mut self) -> Result<ExitStatus, CliError> {
        let st = self
            .child
            .wait()
            .map_err(|e| CliError::Record(format!("record: waiting for perf: {e}")))?;
        self.waited = true;
        Ok(st)
    }
}

impl Drop for Perf {
    fn drop(&mut self) {
        if !self.waited && matches!(self.child.try_wait(), Ok(None)) {
            stop_perf(&mut self.child);
        }
    }
}

fn not_a_file(output: &Path) -> CliError {
    CliError::Usage(format!(
        "record: perf's output {} is not a regular file, so the maps cannot be merged \
         into it: give -o FILE",
        output.display()
    ))
}

/// Merges the snapshot `snap` into perf's file, in place in our directory,
/// then puts it at `-o` (exit 2 if `-o` is no longer perf's file); perf's
/// status when it failed (a failing workload), else the merge's, else
/// what `--strict` makes of the processes skipped. A process of perf's
/// `workload` that ended before it was read is neither skipped nor
/// missing: it simply exited.
fn merge_into(
    r: &RecordArgs,
    pt: &PerfTarget,
    (snap, workload): (PathBuf, &[u32]),
    status: ExitStatus,
    live: &snapshot::LiveReport,
) -> Result<(), CliError> {
    let perf_failed = failed(status);
    let Some(perf_file) = landing::perf_file_to_merge()? else {
        return Err(perf_failed.unwrap_or_else(|| {
            CliError::Record(format!("record: perf wrote no {}", pt.output.display()))
        }));
    };
    // data maps go in when perf asks for them (its attrs say) or -d
    let opts = MergeOptions {
        which: synthesis::which(pt, &perf_file),
        maps: Some(snap),
        snapshot: proc::Options {
            selection: scan_options(&r.scan, &r.written)?.selection,
            ..proc::Options::default()
        },
        in_place: true,
        kernel: true,
        salvage: false,
    };
    let merge_started = Instant::now();
    let merged = rewrite::merge(&perf_file, &perf_file, &opts);
    let merge_took = merge_started.elapsed();
    let (mut report, cache) = match merged {
        Ok(report) => {
            // read in our directory, before the file is placed at -o
            let cache = buildid::find(&pt.buildid, &perf_file);
            landing::place_merged()?;
            (report, cache)
        }
        Err(e) => match perf_failed {
            None => {
                // (the error names perf's file by our descriptor's path)
                eprintln!(
                    "mmap2-synth record: {} is perf's recording, left unmerged at {}",
                    perf_file.display(),
                    pt.output.display()
                );
                return Err(e.into());
            }
            Some(perf) => {
                eprintln!("mmap2-synth record: merge: {}", super::error::chain(&e));
                return Err(perf);
            }
        },
    };
    let ended = |pid: &u32| workload.contains(pid);
    report.missing.retain(|p| !ended(p));
    let skipped: Vec<_> = (live.skipped.iter())
        .filter(|s| !(s.reason == proc::SkipReason::NotFound && ended(&s.pid)))
        .cloned()
        .collect();
    if !r.scan.quiet {
        let dest = pt.output.display().to_string();
        print(&summary::merge(&report, merge_took, &dest));
        print(&summary::skip_lines(&skipped));
    }
    let (lines, warn) = buildid::fill(cache, &opts.snapshot.proc_root);
    if warn || !r.scan.quiet {
        print(&lines);
    }
    if let Some(perf) = perf_failed {
        // the recording is whole and merged: perf's status is most likely
        // its workload's, which perf passes on (`sh -c 'exit 3'`), no failure
        // of perf's to call an error
        return Err(match perf {
            CliError::Child(code) => {
                eprintln!(
                    "mmap2-synth record: perf exited with status {code} (a workload's \
                     exit status, which perf passes on); the recording is merged at {}",
                    pt.output.display()
                );
                CliError::Stopped(code)
            }
            other => other,
        });
    }
    let named = matches!(pt.target, Some(Target::Pids(_)));
    summary::strict(r.scan.strict, &skipped, named)?;
    Ok(summary::strict_not_recorded(
        r.scan.strict,
        report.not_recorded.len(),
    )?)
}

/// Snapshots `target` into the file `snap` (no kernel map: perf writes
/// one; no watch: perf's events are on), with the data maps too when
/// `data` (perf's arguments ask for them) or `-d`.
fn snapshot_to(
    r: &RecordArgs,
    (target, data): (&Target, bool),
    snap: &Path,
) -> Result<snapshot::LiveReport, CliError> {
    // readable by us alone: it holds every map of the processes scanned
    let mut f = (std::fs::OpenOptions::new().write(true).create_new(true))
        .mode(0o600)
        .open(snap)
        .map_err(|e| CliError::write(snap, e))?;
    let wopts = WriteOptions {
        endian: Endian::NATIVE,
        forks: *target == Target::All,
        cmdline: Vec::new(),
        host: HostFacts::read(),
        kernel: None,
        watch: false,
        watch_pages: None,
    };
    let mut scan = scan_options(&r.scan, &r.written)?;
    if data {
        scan.selection = mmap2_synth::model::Selection::ExecAndData;
    }
    snapshot::write_live(target, &scan, Out::File(&mut f), &wopts)
        .map_err(|e| CliError::Record(format!("record: snapshot: {e}")))
}

/// perf's failure as ours (None when it succeeded); perf ended by the
/// signal the user sent is no failure: its status without an error line.
fn failed(st: ExitStatus) -> Option<CliError> {
    use std::os::unix::process::ExitStatusExt;
    if st.success() {
        return None;
    }
    let code = exit_code(st);
    Some(match signals::stopped_as_asked(st.signal()) {
        Some(sig) => {
            let name = signal_hook::low_level::signal_name(sig).unwrap_or("a signal");
            eprintln!("mmap2-synth record: perf stopped by {name} (exit status {code})");
            CliError::Stopped(code)
        }
        None => CliError::Child(code),
    })
}

/// perf's exit status as ours (a signal as 128 + it, as a shell says): 0
/// stays 0.
fn exit_code(st: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(s)) => u8::try_from(128 + s).unwrap_or(255),
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

    // perf's exit status is ours: 0 stays 0 (no failure), a code is kept,
    // a signal is 128 + it.
    #[test]
    fn perf_exit_status() {
        use std::os::unix::process::ExitStatusExt;
        let st = |raw| ExitStatus::from_raw(raw);
        assert_eq!(exit_code(st(0)), 0);
        assert!(failed(st(0)).is_none());
        assert_eq!(exit_code(st(3 << 8)), 3);
        assert!(matches!(failed(st(3 << 8)), Some(CliError::Child(3))));
        assert_eq!(exit_code(st(255 << 8)), 255);
        assert_eq!(exit_code(st(libc::SIGINT)), 130);
    }

    // A signal that comes while perf is being started is kept and sent to
    // it once started (SIGHUP as SIGTERM), not taken as ours to die of
    // (which orphaned perf); once perf is done, signals are ours again.
    #[test]
    fn signal_while_spawning_reaches_the_child() {
        use std::os::unix::process::ExitStatusExt;
        let signals = SignalsToPerf::spawning();
        assert!(on_signal(libc::SIGHUP), "kept for the child");
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        signals.started(&mut child);
        let st = child.wait().unwrap();
        assert_eq!(st.signal(), Some(libc::SIGTERM));
        drop(signals);
        assert!(!on_signal(libc::SIGTERM), "ours once perf is done");
    }

    // An unanswering perf is asked to stop with SIGTERM (it then finishes
    // its file and its workload), and killed 5 s later if it ignores that;
    // either way it is reaped.
    #[test]
    fn stop_perf_terms_then_kills() {
        use std::os::unix::process::ExitStatusExt;
        let mut polite = Command::new("sleep").arg("30").spawn().unwrap();
        stop_perf(&mut polite);
        let st = polite.try_wait().unwrap().expect("reaped");
        assert_eq!(st.signal(), Some(libc::SIGTERM));
        let mut stubborn = Command::new("sh")
            .args(["-c", "trap '' TERM; echo ready; while :; do sleep 1; done"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // its trap is set once it says so
        let mut line = [0u8; 6];
        std::io::Read::read_exact(stubborn.stdout.as_mut().unwrap(), &mut line).unwrap();
        stop_perf(&mut stubborn);
        let st = stubborn.try_wait().unwrap().expect("reaped");
        assert_eq!(st.signal(), Some(libc::SIGKILL));
    }
}
