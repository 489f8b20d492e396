//! Reads the selected processes from /proc in parallel (Rayon): status,
//! stat, threads and VMAs with build ids. The result is ordered by pid
//! whatever the number of workers; processes that vanish or deny access are
//! counted as skips, never fatal.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::buildid::{BuildIdCache, LocalBuildIds};
use super::parse::{self, ProcParseError, PF_KTHREAD};
pub use super::source::SourceChoice;
use super::source::{self, BuildIdPolicy};
use super::window::Window;
use crate::model::{Process, Selection, Source, Thread, Vma};

/// Which processes to snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every process in /proc (except this tool itself).
    All,
    /// These pids.
    Pids(Vec<u32>),
    /// Every process whose real uid is this.
    Uid(u32),
}

/// Snapshot options.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    pub source: SourceChoice,
    /// Resolve build ids.
    pub build_ids: bool,
    /// Worker threads (None = all cores).
    pub jobs: Option<usize>,
    /// Root of the proc filesystem (normally `/proc`).
    pub proc_root: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            selection: Selection::Exec,
            source: SourceChoice::Auto,
            build_ids: true,
            jobs: None,
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// Why a process was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// It did not exist when the scan came to it (`-p` of a pid that is
    /// gone, or a recording's process that exited): not a failure.
    NotFound,
    /// It existed, then exited while being read (ENOENT / ESRCH).
    Vanished,
    /// Access denied (EACCES / EPERM).
    Denied,
    /// Any other error reading it.
    Failed,
}

impl SkipReason {
    fn of(e: &io::Error) -> SkipReason {
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => SkipReason::Vanished,
            Some(libc::EACCES) | Some(libc::EPERM) => SkipReason::Denied,
            _ => SkipReason::Failed,
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkipReason::NotFound => "not found",
            SkipReason::Vanished => "vanished",
            SkipReason::Denied => "denied",
            SkipReason::Failed => "failed",
        })
    }
}

/// A skipped process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub pid: u32,
    pub reason: SkipReason,
    pub detail: String,
}

/// The result of a scan.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Processes read, by pid.
    pub processes: Vec<Process>,
    /// Processes skipped, by pid.
    pub skipped: Vec<Skip>,
    /// Build ids whose file matched the VMA by inode but not by device
    /// (overlayfs, btrfs subvolumes): kept, and counted here.
    pub unverified_build_ids: usize,
}

/// A fatal scan error (not a per-process one).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// /proc could not be listed.
    #[error("cannot list {path}")]
    ListProc {
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `--source ioctl` on a kernel without PROCMAP_QUERY.
    #[error("this kernel has no PROCMAP_QUERY ioctl (Linux 6.11+); use --source text or auto")]
    NoIoctl,
    /// The worker pool could not be built.
    #[error("cannot start worker threads")]
    Pool(#[from] rayon::ThreadPoolBuildError),
}

enum Outcome<T> {
    Read(T),
    Skipped(Skip),
    NotSelected,
}

/// Processes [`scan_each`] reads ahead of the one it hands on next: enough
/// to keep every worker busy while the caller writes (which it does in
/// batches of half this), a bound on what is held for ordinary processes.
pub const AHEAD: usize = 64;

/// Bytes held by the processes read and waiting to be handed on (as
/// [`Process::held_bytes`] counts them) beyond which no worker starts
/// another: the bound for big processes, whatever their number. (A budget
/// of VMAs did not bound it: 6 processes of 60,000 VMAs with 3.8 KB names
/// held 1.3 GB.)
pub const AHEAD_BYTES: usize = 16 << 20;

/// What [`scan_each`] reports besides the processes it handed on.
#[derive(Debug, Default)]
pub struct Scanned {
    /// Processes skipped, by pid.
    pub skipped: Vec<Skip>,
    /// See [`Snapshot::unverified_build_ids`].
    pub unverified_build_ids: usize,
}

/// Reads the selected processes in parallel. The result is ordered by pid,
/// whatever the number of workers.
pub fn snapshot(target: &Target, opts: &Options) -> Result<Snapshot, ScanError> {
    let mut processes = Vec::new();
    let scanned = scan_each(
        target,
        opts,
        |p| p,
        |p| {
            processes.push(p);
            Ok::<(), ScanError>(())
        },
    )?;
    Ok(Snapshot {
        processes,
        skipped: scanned.skipped,
        unverified_build_ids: scanned.unverified_build_ids,
    })
}

/// Reads the selected processes in parallel without holding them all: each
/// one read is passed through `map` on the worker that read it (encode it
/// there), and the results go to `sink` on the calling thread in pid order,
/// whatever the number of workers, while the workers read on: at most
/// [`AHEAD`] processes ahead of the one `sink` gets next, and none while
/// those waiting hold more than [`AHEAD_BYTES`]. The first error `sink`
/// returns stops the scan.
pub fn scan_each<T: Send, E: From<ScanError>>(
    target: &Target,
    opts: &Options,
    map: impl Fn(Process) -> T + Sync,
    mut sink: impl FnMut(T) -> Result<(), E>,
) -> Result<Scanned, E> {
    let me = std::process::id();
    let pids = match target {
        Target::Pids(p) => {
            let mut p = p.clone();
            p.sort_unstable();
            p.dedup();
            p
        }
        Target::All | Target::Uid(_) => {
            let mut p = parse::list_ids(&opts.proc_root).map_err(|source| ScanError::ListProc {
                path: opts.proc_root.clone(),
                source,
            })?;
            p.retain(|&pid| pid != me);
            p
        }
    };
    let uid = match target {
        Target::Uid(u) => Some(*u),
        _ => None,
    };
    let cache = BuildIdCache::new();
    let no_ioctl = AtomicBool::new(opts.source == SourceChoice::Text);
    // No more workers than processes: a merge that needs one pid should not
    // start a thread per core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = opts.jobs.unwrap_or(cores).min(pids.len()).max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .map_err(ScanError::from)?;
    let window = Window::new(pids.len(), AHEAD, AHEAD_BYTES);
    let mut scanned = Scanned::default();
    // an outcome and its weight (the bytes it holds)
    let read = |i: usize, local: &mut LocalBuildIds| match read_process(
        pids[i],
        uid,
        opts,
        (&cache, local),
        &no_ioctl,
    ) {
        Outcome::Read(p) => {
            let weight = p.held_bytes();
            (Outcome::Read(map(p)), weight)
        }
        Outcome::Skipped(s) => (Outcome::Skipped(s), 64),
        Outcome::NotSelected => (Outcome::NotSelected, 64),
    };
    let result = pool.in_place_scope(|s| -> Result<(), E> {
        for _ in 0..workers {
            s.spawn(|_| {
                // a worker that panics stops the scan (the scope re-raises)
                let _stop = window.stop_on_drop(true);
                let mut local = LocalBuildIds::default();
                while let Some(i) = window.next() {
                    let (outcome, weight) = read(i, &mut local);
                    window.done(i, outcome, weight);
                }
            });
        }
        // however this loop ends (done, an error, a panic), the workers stop
        let _stop = window.stop_on_drop(false);
        while let Some(o) = window.take() {
            if opts.source == SourceChoice::Ioctl && no_ioctl.load(Ordering::Relaxed) {
                return Err(ScanError::NoIoctl.into());
            }
            match o {
                Outcome::Read(t) => sink(t)?,
                Outcome::Skipped(s) => scanned.skipped.push(s),
                Outcome::NotSelected => {}
            }
        }
        Ok(())
    });
    result?;
    scanned.unverified_build_ids = cache.unverified();
    Ok(scanned)
}

/// The shared build-id cache and this worker's copy of its answers.
type Caches<'a> = (&'a BuildIdCache, &'a mut LocalBuildIds);

fn read_process(
    pid: u32,
    uid: Option<u32>,
    opts: &Options,
    cache: Caches<'_>,
    no_ioctl: &AtomicBool,
) -> Outcome<Process> {
    match try_read_process(pid, uid, opts, cache, no_ioctl) {
        Ok(Some(p)) => Outcome::Read(p),
        Ok(None) => Outcome::NotSelected,
        Err(e) => {
            let mut reason = SkipReason::of(&e);
            // gone before we read anything of it, or gone while we read it
            let dir = opts.proc_root.join(pid.to_string());
            if reason == SkipReason::Vanished
                && !dir.exists()
                && e.kind() == io::ErrorKind::NotFound
            {
                reason = SkipReason::NotFound;
            }
            Outcome::Skipped(Skip {
                pid,
                reason,
                detail: e.to_string(),
            })
        }
    }
}

/// Reads one process from `stat` alone (comm, ppid, flags, thread count,
/// start time), plus `status` only to select by uid, the task directory and
/// each thread's `comm` only when it has more than one thread, and its maps.
fn try_read_process(
    pid: u32,
    uid: Option<u32>,
    opts: &Options,
    cache: Caches<'_>,
    no_ioctl: &AtomicBool,
) -> io::Result<Option<Process>> {
    let dir = opts.proc_root.join(pid.to_string());
    if let Some(want) = uid {
        let path = dir.join("status");
        let text = std::fs::read(&path)?;
        let status = parse::parse_status(&text).map_err(|m| invalid(&path, m))?;
        if status.uid != want {
            return Ok(None);
        }
    }
    let mut buf = [0u8; SMALL_FILE];
    let path = dir.join("stat");
    let stat = parse::parse_stat(read_small(&path, &mut buf)?).map_err(|m| invalid(&path, m))?;
    let kernel_thread = stat.flags & PF_KTHREAD != 0;
    let mut threads = vec![Thread {
        tid: pid,
        comm: stat.comm.to_vec(),
    }];
    let (ppid, start_time) = (stat.ppid, stat.start_time);
    if stat.num_threads > 1 {
        let task = dir.join("task");
        for tid in parse::list_ids(&task)? {
            if tid == pid {
                continue;
            }
            // A thread that exits mid-scan is simply not there.
            let mut buf = [0u8; SMALL_FILE];
            match read_small(&task.join(tid.to_string()).join("comm"), &mut buf) {
                Ok(text) => threads.push(Thread {
                    tid,
                    comm: parse::parse_comm_file(text).to_vec(),
                }),
                Err(e) if SkipReason::of(&e) == SkipReason::Vanished => {}
                Err(e) => return Err(e),
            }
        }
    }
    let (vmas, source) = if kernel_thread {
        (Vec::new(), None)
    } else {
        let (v, s) = read_vmas(pid, &threads, opts, cache, no_ioctl)?;
        (v, Some(s))
    };
    Ok(Some(Process {
        pid,
        ppid,
        kernel_thread,
        start_time,
        threads,
        vmas,
        source,
    }))
}

/// Room for a `stat` or `comm` file (a stat line is at most ~1.2 KB: 52
/// numbers and a 64-byte kernel thread name).
const SMALL_FILE: usize = 4096;

/// Reads a small /proc file into `buf` with as few system calls as the
/// kernel allows: procfs hands a one-line file over in one read, so a read
/// that ends its line is the whole file. A file that fills `buf` is bad data.
fn read_small<'b>(path: &Path, buf: &'b mut [u8; SMALL_FILE]) -> io::Result<&'b [u8]> {
    let mut f = File::open(path)?;
    let mut n = 0;
    loop {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n == buf.len() {
                    return Err(invalid_len(path));
                }
                if buf[n - 1] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(&buf[..n])
}

fn invalid_len(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: longer than {SMALL_FILE} bytes", path.display()),
    )
}

/// A /proc file that does not parse, as an I/O error (the process is
/// skipped as "failed", naming the file).
fn invalid(path: &Path, source: ProcParseError) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {source}", path.display()),
    )
}

/// Reads the leader's VMAs; when the leader is a zombie (empty maps or ESRCH)
/// a live thread's maps are used instead.
fn read_vmas(
    pid: u32,
    threads: &[Thread],
    opts: &Options,
    (cache, local): Caches<'_>,
    no_ioctl: &AtomicBool,
) -> io::Result<(Vec<Vma>, Source)> {
    let ids = BuildIdPolicy {
        cache: opts.build_ids.then_some(cache),
        pid,
        tid: pid,
        proc_root: &opts.proc_root,
    };
    let mut fallback = None; // first empty or vanished result, if no thread has VMAs
    for t in threads {
        let dir = opts.proc_root.join(pid.to_string());
        let path = if t.tid == pid {
            dir.join("maps")
        } else {
            dir.join("task").join(t.tid.to_string()).join("maps")
        };
        let ids = BuildIdPolicy { tid: t.tid, ..ids };
        let result =
            source::read_maps_file(&path, opts.selection, opts.source, ids, local, no_ioctl);
        match result {
            Ok((v, s)) if !v.is_empty() || threads.len() == 1 => return Ok((v, s)),
            Ok((v, s)) => {
                fallback.get_or_insert(Ok((v, s)));
            }
            Err(e) if SkipReason::of(&e) == SkipReason::Vanished => {
                fallback.get_or_insert(Err(e));
            }
            Err(e) => return Err(e),
        }
    }
    fallback.unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::ESRCH)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A fake /proc of `n` one-thread processes (pids 100..) whose maps are
    /// regular files (read as text).
    fn fake_proc(n: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for pid in 100..100 + n {
            let d = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            let stat = format!("{pid} (p{pid}) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n");
            std::fs::write(d.join("stat"), stat).unwrap();
            let maps = format!(
                "{:x}-{:x} r-xp 00000000 08:01 7 /bin/x\n",
                pid << 12,
                (pid + 1) << 12
            );
            std::fs::write(d.join("maps"), maps).unwrap();
        }
        dir
    }

    fn options(root: &Path) -> Options {
        Options {
            source: SourceChoice::Text,
            build_ids: false,
            jobs: Some(2),
            proc_root: root.to_path_buf(),
            ..Options::default()
        }
    }

    /// Runs `f` on a thread, failing the test if it takes over 60 s (a
    /// deadlocked scan must fail, not hang the suite).
    fn bounded<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(f()).unwrap());
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the scan finished within 60 s")
    }

    // Every process reaches the sink, in pid order, and never more than
    // AHEAD plus the one being handed on are read and not yet handed on.
    #[test]
    fn scan_is_ordered_and_bounded() {
        let root = fake_proc(300);
        let (seen, max) = bounded(move || {
            let opts = options(root.path());
            let live = AtomicUsize::new(0);
            let max = AtomicUsize::new(0);
            let mut seen = Vec::new();
            scan_each(
                &Target::Pids((100..400).rev().collect()),
                &opts,
                |p| {
                    let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    p.pid
                },
                |pid| {
                    live.fetch_sub(1, Ordering::SeqCst);
                    seen.push(pid);
                    Ok::<(), ScanError>(())
                },
            )
            .unwrap();
            (seen, max.into_inner())
        });
        assert_eq!(seen, (100..400).collect::<Vec<_>>());
        assert!(max <= AHEAD + 1, "{max} processes held");
    }

    // The sink's first error ends the scan at once: the workers stop within
    // the window, nothing waits forever.
    #[test]
    fn sink_error_stops_the_scan() {
        let root = fake_proc(300);
        let (err, read) = bounded(move || {
            let opts = options(root.path());
            let read = AtomicUsize::new(0);
            let mut n = 0;
            let r = scan_each(
                &Target::Pids((100..400).collect()),
                &opts,
                |p| {
                    read.fetch_add(1, Ordering::SeqCst);
                    p.pid
                },
                |_| {
                    n += 1;
                    match n {
                        10 => Err(ScanError::NoIoctl),
                        _ => Ok(()),
                    }
                },
            );
            (r.is_err(), read.into_inner())
        });
        assert!(err);
        assert!(read <= 10 + AHEAD + 2, "{read} read after the error");
    }
}
