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
use super::source::{self, BuildIdPolicy, TooManyMaps, Walk};
use super::window::Window;
use crate::model::{Part, Process, Selection, Thread, Vma};

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
    /// VMAs one walk of a maps file visits before the process is cut
    /// short; None: [`source::walk_limit`], from vm.max_map_count.
    pub max_vmas: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            selection: Selection::Exec,
            source: SourceChoice::Auto,
            build_ids: true,
            jobs: None,
            proc_root: PathBuf::from("/proc"),
            max_vmas: None,
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
    /// It failed (vanished, mostly) after the first pieces of its maps were
    /// written: it is written with the maps read until then.
    CutShort,
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
            SkipReason::CutShort => "cut short",
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
    /// Its first pieces were handed on, then reading it failed: the last
    /// piece (the VMAs read since, every thread) and why.
    CutShort(T, Skip),
    Skipped(Skip),
    NotSelected,
}

/// Processes [`scan_each`] reads ahead of the one it hands on next: enough
/// to keep every worker busy while the caller writes (which it does in
/// batches of half this), a bound on what is held for ordinary processes.
pub const AHEAD: usize = 64;

/// Bytes held by the processes read and waiting to be handed on (as
/// [`scan_each`]'s `map` weighs them) beyond which no worker starts
/// another: the bound for big processes, whatever their number. (A budget
/// of VMAs did not bound it: 6 processes of 60,000 VMAs with 3.8 KB names
/// held 1.3 GB.)
pub const AHEAD_BYTES: usize = 16 << 20;

/// Bytes of VMAs (as [`Process::held_bytes`] counts them) past which a
/// process's VMAs read so far are handed on as a piece ([`Part`]) while the
/// rest are read, so no process is held whole however many maps it has.
/// Ordinary processes (up to a few thousand VMAs) are one piece, so this
/// costs them nothing.
pub const PART_BYTES: usize = 1 << 20;

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
    let mut processes: Vec<Process> = Vec::new();
    let scanned = scan_each(
        target,
        opts,
        |p, part| {
            let weight = p.held_bytes();
            ((p, part), weight)
        },
        |(p, part)| {
            match processes.last_mut() {
                // a later piece of the process before it: put it back together
                Some(whole) if !part.first => {
                    whole.vmas.extend(p.vmas);
                    whole.threads = p.threads;
                }
                _ => processes.push(p),
            }
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
/// there), which returns the result and the bytes it holds (its weight
/// against [`AHEAD_BYTES`]), and the results go to `sink` on the calling thread in pid order,
/// whatever the number of workers, while the workers read on: at most
/// [`AHEAD`] processes ahead of the one `sink` gets next, and none while
/// those waiting hold more than [`AHEAD_BYTES`]. A process is passed on in
/// pieces of about [`PART_BYTES`] as its maps are read ([`Part`]; most are
/// one piece), and a piece waits for room like a process, so no process is
/// held whole either. A process that fails after its first pieces were
/// passed on gets a last piece with what was read and is reported as
/// [`SkipReason::CutShort`]. The first error `sink` returns stops the scan.
pub fn scan_each<T: Send, E: From<ScanError>>(
    target: &Target,
    opts: &Options,
    map: impl Fn(Process, Part) -> (T, usize) + Sync,
    mut sink: impl FnMut(T) -> Result<(), E>,
) -> Result<Scanned, E> {
    let pids = pids_of(target, opts)?;
    let uid = match target {
        Target::Uid(u) => Some(*u),
        _ => None,
    };
    let cache = BuildIdCache::new();
    let no_ioctl = AtomicBool::new(opts.source == SourceChoice::Text);
    let walk = Walk {
        selection: opts.selection,
        source: opts.source,
        max_vmas: (opts.max_vmas).unwrap_or_else(|| source::walk_limit(&opts.proc_root)),
    };
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
    // an outcome and its weight (the bytes it holds); earlier pieces go to
    // the window as they are read
    let read = |i: usize, local: &mut LocalBuildIds| {
        let mut piece = |p: Process, part: Part| {
            let (t, weight) = map(p, part);
            window.part(i, Outcome::Read(t), weight)
        };
        let caches = (&cache, local);
        match read_process(pids[i], uid, opts, walk, caches, &no_ioctl, &mut piece) {
            Outcome::Read((p, part)) => {
                let (t, weight) = map(p, part);
                (Outcome::Read(t), weight)
            }
            Outcome::CutShort((p, part), skip) => {
                let (t, weight) = map(p, part);
                (Outcome::CutShort(t, skip), weight)
            }
            Outcome::Skipped(s) => (Outcome::Skipped(s), 64),
            Outcome::NotSelected => (Outcome::NotSelected, 64),
        }
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
                Outcome::CutShort(t, s) => {
                    sink(t)?;
                    scanned.skipped.push(s);
                }
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

/// The pids `target` selects, sorted, without duplicates or this tool.
fn pids_of(target: &Target, opts: &Options) -> Result<Vec<u32>, ScanError> {
    let me = std::process::id();
    Ok(match target {
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
    })
}

/// The shared build-id cache and this worker's copy of its answers.
type Caches<'a> = (&'a BuildIdCache, &'a mut LocalBuildIds);

/// Where the pieces of a process before its last go: false when the scan
/// stopped.
type PieceSink<'a> = dyn FnMut(Process, Part) -> bool + 'a;

fn read_process(
    pid: u32,
    uid: Option<u32>,
    opts: &Options,
    walk: Walk,
    cache: Caches<'_>,
    no_ioctl: &AtomicBool,
    piece: &mut PieceSink<'_>,
) -> Outcome<(Process, Part)> {
    let skip = |e: io::Error| {
        let mut reason = SkipReason::of(&e);
        // gone before we read anything of it, or gone while we read it
        let dir = opts.proc_root.join(pid.to_string());
        if reason == SkipReason::Vanished && !dir.exists() && e.kind() == io::ErrorKind::NotFound {
            reason = SkipReason::NotFound;
        }
        Skip {
            pid,
            reason,
            detail: e.to_string(),
        }
    };
    let mut pieces = match read_head(pid, uid, opts) {
        Ok(Some(p)) => Pieces::new(p, piece),
        Ok(None) => return Outcome::NotSelected,
        Err(e) => return Outcome::Skipped(skip(e)),
    };
    if pieces.head.kernel_thread {
        return Outcome::Read((pieces.head, Part::WHOLE));
    }
    match read_vmas(opts, walk, cache, no_ioctl, &mut pieces) {
        Ok(()) => Outcome::Read(pieces.last()),
        // a walk stretched without end keeps what it read, piece or not
        Err(e) if pieces.emitted || TooManyMaps::is(&e) => {
            let read = pieces.pushed;
            let detail = format!("{e}; the {read} maps read before are written");
            let reason = SkipReason::CutShort;
            let last = pieces.last();
            Outcome::CutShort(
                last,
                Skip {
                    pid,
                    reason,
                    detail,
                },
            )
        }
        Err(e) => Outcome::Skipped(skip(e)),
    }
}

/// A process's VMAs as they are read, handed on as a piece each time they
/// hold [`PART_BYTES`].
struct Pieces<'p, 's> {
    /// The process without VMAs (every thread, the source once known).
    head: Process,
    /// VMAs read and not yet handed on.
    vmas: Vec<Vma>,
    /// Their bytes, as [`Process::held_bytes`] counts them.
    bytes: usize,
    /// VMAs read in all.
    pushed: usize,
    /// A piece was handed on: the next is not the first.
    emitted: bool,
    sink: &'p mut PieceSink<'s>,
}

impl<'p, 's> Pieces<'p, 's> {
    fn new(head: Process, sink: &'p mut PieceSink<'s>) -> Self {
        Pieces {
            head,
            vmas: Vec::new(),
            bytes: 0,
            pushed: 0,
            emitted: false,
            sink,
        }
    }

    /// The process with `vmas` and these threads.
    fn with(&self, vmas: Vec<Vma>, threads: Vec<Thread>) -> Process {
        let h = &self.head;
        Process {
            pid: h.pid,
            ppid: h.ppid,
            kernel_thread: h.kernel_thread,
            start_time: h.start_time,
            threads,
            vmas,
            source: h.source,
        }
    }

    fn push(&mut self, v: Vma) -> io::Result<()> {
        self.bytes += 128 + v.name.len();
        self.pushed += 1;
        self.vmas.push(v);
        if self.bytes < PART_BYTES {
            return Ok(());
        }
        let vmas = std::mem::take(&mut self.vmas);
        let leader = self.head.threads.first().cloned().into_iter().collect();
        let p = self.with(vmas, leader);
        let part = Part {
            first: !self.emitted,
            last: false,
        };
        self.emitted = true;
        self.bytes = 0;
        match (self.sink)(p, part) {
            true => Ok(()),
            false => Err(io::Error::other("the scan stopped")),
        }
    }

    /// Drops the VMAs read of a file that is not used after all (before
    /// any piece was handed on).
    fn restart(&mut self) {
        self.pushed -= self.vmas.len();
        self.vmas.clear();
        self.bytes = 0;
    }

    /// The last piece: the VMAs not yet handed on and every thread.
    fn last(mut self) -> (Process, Part) {
        let part = Part {
            first: !self.emitted,
            last: true,
        };
        self.head.vmas = std::mem::take(&mut self.vmas);
        (self.head, part)
    }
}

/// Reads one process from `stat` alone (comm, ppid, flags, thread count,
/// start time), plus `status` only to select by uid, and the task directory
/// and each thread's `comm` only when it has more than one thread: all but
/// its maps.
fn read_head(pid: u32, uid: Option<u32>, opts: &Options) -> io::Result<Option<Process>> {
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
    Ok(Some(Process {
        pid,
        ppid,
        kernel_thread,
        start_time,
        threads,
        vmas: Vec::new(),
        source: None,
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

/// Reads the leader's VMAs into `pieces`; when the leader is a zombie
/// (empty maps or ESRCH) a live thread's maps are used instead.
fn read_vmas(
    opts: &Options,
    walk: Walk,
    (cache, local): Caches<'_>,
    no_ioctl: &AtomicBool,
    pieces: &mut Pieces<'_, '_>,
) -> io::Result<()> {
    let pid = pieces.head.pid;
    let ids = BuildIdPolicy {
        cache: opts.build_ids.then_some(cache),
        pid,
        tid: pid,
        proc_root: &opts.proc_root,
    };
    let tids: Vec<u32> = pieces.head.threads.iter().map(|t| t.tid).collect();
    let mut fallback = None; // first empty or vanished result, if no thread has VMAs
    for &tid in &tids {
        let dir = opts.proc_root.join(pid.to_string());
        let path = if tid == pid {
            dir.join("maps")
        } else {
            dir.join("task").join(tid.to_string()).join("maps")
        };
        let ids = BuildIdPolicy { tid, ..ids };
        pieces.restart();
        let result = source::read_maps_file(
            &path,
            walk,
            ids,
            local,
            no_ioctl,
            // the source goes with the first piece, whenever it is handed on
            &mut |s, v| {
                pieces.head.source = Some(s);
                pieces.push(v)
            },
        );
        match result {
            Ok(s) if pieces.pushed > 0 || tids.len() == 1 => {
                pieces.head.source = Some(s);
                return Ok(());
            }
            Ok(s) => {
                fallback.get_or_insert(Ok(s));
            }
            Err(e) if pieces.emitted => return Err(e),
            Err(e) if SkipReason::of(&e) == SkipReason::Vanished => {
                fallback.get_or_insert(Err(e));
            }
            Err(e) => return Err(e),
        }
    }
    pieces.restart();
    let s = fallback.unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::ESRCH)))?;
    pieces.head.source = Some(s);
    Ok(())
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
                |p, _| {
                    let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    (p.pid, 64)
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
                |p, _| {
                    read.fetch_add(1, Ordering::SeqCst);
                    (p.pid, 64)
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

    /// Makes pid 101 of a [`fake_proc`] a two-thread process of `n` VMAs
    /// with 200-byte names (about 330 bytes each as held), the line after
    /// `bad_after` of them malformed when given; returns its maps text.
    fn big_process(root: &Path, n: usize, bad_after: Option<usize>) -> Vec<u8> {
        let d = root.join("101");
        let stat = "101 (big) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 2 0 1 0 0\n";
        std::fs::write(d.join("stat"), stat).unwrap();
        std::fs::create_dir_all(d.join("task/102")).unwrap();
        std::fs::create_dir_all(d.join("task/101")).unwrap();
        std::fs::write(d.join("task/102/comm"), "worker\n").unwrap();
        let mut maps = Vec::new();
        for i in 0..n as u64 {
            if bad_after == Some(i as usize) {
                maps.extend_from_slice(b"not a maps line\n");
            }
            let name = format!("/lib/{:0>195}", i);
            let line = format!(
                "{:x}-{:x} r-xp 00000000 08:01 {} {name}\n",
                (i + 16) << 12,
                (i + 17) << 12,
                i + 1
            );
            maps.extend_from_slice(line.as_bytes());
        }
        std::fs::write(d.join("maps"), &maps).unwrap();
        maps
    }

    /// Scans pids 100..103 of `root`, returning each piece handed on as
    /// (pid, part, VMAs, held bytes, threads) and the skips.
    #[allow(clippy::type_complexity)]
    fn pieces_of(root: &Path) -> (Vec<(u32, Part, Vec<Vma>, usize, usize)>, Vec<Skip>) {
        let root = root.to_path_buf();
        bounded(move || {
            let mut got = Vec::new();
            let scanned = scan_each(
                &Target::Pids(vec![100, 101, 103]),
                &options(&root),
                |p, part| {
                    let held = p.held_bytes();
                    ((p.pid, part, p.vmas, held, p.threads.len()), held)
                },
                |piece| {
                    got.push(piece);
                    Ok::<(), ScanError>(())
                },
            )
            .unwrap();
            (got, scanned.skipped)
        })
    }

    // A process too big to hold whole is handed on in pieces of about
    // PART_BYTES, in order, first and last marked, the leader with every
    // piece and every thread with the last, and its VMAs, put back
    // together, are exactly those of its maps file (held whole, it was one
    // 6.6 MB piece).
    #[test]
    fn big_process_comes_in_pieces() {
        let root = fake_proc(4);
        let maps = big_process(root.path(), 20_000, None);
        let (got, skipped) = pieces_of(root.path());
        assert!(skipped.is_empty(), "{skipped:?}");
        let pids: Vec<u32> = got.iter().map(|g| g.0).collect();
        let big: Vec<_> = got.iter().filter(|g| g.0 == 101).collect();
        assert!(big.len() >= 6, "{} pieces", big.len());
        assert_eq!(pids.first(), Some(&100));
        assert_eq!(pids.last(), Some(&103));
        assert!(pids.windows(2).all(|w| w[0] <= w[1]), "{pids:?}");
        for (k, (_, part, _, held, threads)) in big.iter().enumerate() {
            let last = k + 1 == big.len();
            assert_eq!(
                *part,
                Part {
                    first: k == 0,
                    last
                },
                "piece {k}"
            );
            assert!(*held <= PART_BYTES + 512, "piece {k} holds {held}");
            assert_eq!(*threads, if last { 2 } else { 1 }, "piece {k}");
        }
        let vmas: Vec<Vma> = big.iter().flat_map(|g| g.2.clone()).collect();
        let whole = super::super::maps_text::parse_maps(&maps, |_, _| true).unwrap();
        assert_eq!(vmas, whole);
        // and the collecting scan puts it back together
        let snap = snapshot(&Target::Pids(vec![101]), &options(root.path())).unwrap();
        assert_eq!(snap.processes.len(), 1);
        assert_eq!(snap.processes[0].vmas, whole);
        assert_eq!(snap.processes[0].threads.len(), 2);
    }

    // A process that fails after its first pieces were handed on still gets
    // a last piece (the VMAs read since and every thread, so its records
    // stay whole), and is reported as cut short, naming why.
    #[test]
    fn failure_after_pieces_is_cut_short() {
        let root = fake_proc(4);
        big_process(root.path(), 20_000, Some(15_000));
        let (got, skipped) = pieces_of(root.path());
        let big: Vec<_> = got.iter().filter(|g| g.0 == 101).collect();
        let last = big.last().unwrap();
        assert!(last.1.last && !last.1.first);
        assert_eq!(last.4, 2, "every thread goes with the last piece");
        let read: usize = big.iter().map(|g| g.2.len()).sum();
        assert_eq!(read, 15_000);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(skipped[0].pid, 101);
        assert_eq!(skipped[0].reason, SkipReason::CutShort);
        assert!(
            skipped[0].detail.contains("line 15001"),
            "{}",
            skipped[0].detail
        );
        assert!(got.iter().any(|g| g.0 == 103), "the scan went on");
    }

    // A walk that goes on past the cap (a process mapping ahead of the walk
    // as fast as it is read) stops there: the VMAs read are kept, in pieces
    // or not, and the process is reported cut short, naming why.
    #[test]
    fn endless_walk_is_cut_short() {
        let root = fake_proc(4);
        let maps = big_process(root.path(), 20_000, None);
        let whole = super::super::maps_text::parse_maps(&maps, |_, _| true).unwrap();
        for cap in [100, 12_345] {
            let opts = Options {
                max_vmas: Some(cap),
                ..options(root.path())
            };
            let snap = snapshot(&Target::Pids(vec![100, 101, 103]), &opts).unwrap();
            let pids: Vec<u32> = snap.processes.iter().map(|p| p.pid).collect();
            assert_eq!(pids, [100, 101, 103], "cap {cap}");
            assert_eq!(snap.processes[1].vmas, whole[..cap], "cap {cap}");
            assert_eq!(snap.processes[1].threads.len(), 2);
            assert_eq!(snap.skipped.len(), 1, "{:?}", snap.skipped);
            assert_eq!(snap.skipped[0].reason, SkipReason::CutShort);
            let detail = &snap.skipped[0].detail;
            assert!(
                detail.contains(&format!("stopped after {cap} maps")),
                "{detail}"
            );
        }
    }

    // A maps line too long to hold (d_path has no length limit) is read from
    // its start and named //toolong, as the ioctl names it, whether it fits
    // a read or spans many, and the lines after it are read as usual; a cap
    // reached as such a line ends cuts the walk short there.
    #[test]
    fn overlong_lines_are_toolong() {
        let root = fake_proc(2);
        let line = |i: u64, name: &[u8]| {
            let head = format!("{:x}-{:x} r-xp 00000000 08:01 {i} ", i << 12, (i + 1) << 12);
            [head.as_bytes(), name].concat()
        };
        let mut maps = Vec::new();
        for (i, len) in [
            (1u64, 10usize),
            (2, 20_000),
            (3, 100_000),
            (4, 4095),
            (5, 300_000),
        ] {
            maps.extend(line(i, &[b'/'; 1].repeat(len)));
            if i < 5 {
                maps.push(b'\n');
            }
        }
        std::fs::write(root.path().join("101/maps"), &maps).unwrap();
        let snap = snapshot(&Target::Pids(vec![100, 101]), &options(root.path())).unwrap();
        assert!(snap.skipped.is_empty(), "{:?}", snap.skipped);
        let got: Vec<(u64, u64, usize)> = snap.processes[1]
            .vmas
            .iter()
            .map(|v| match v.name.as_slice() {
                b"//toolong" => (v.start >> 12, v.inode, 0),
                n => (v.start >> 12, v.inode, n.len()),
            })
            .collect();
        let want = [(1, 1, 10), (2, 2, 0), (3, 3, 0), (4, 4, 4095), (5, 5, 0)];
        assert_eq!(got, want);
        // the cap reached as an over-long line ends: cut short there
        for cap in [2, 3] {
            let opts = Options {
                max_vmas: Some(cap),
                ..options(root.path())
            };
            let snap = snapshot(&Target::Pids(vec![101]), &opts).unwrap();
            assert_eq!(snap.processes[0].vmas.len(), cap, "cap {cap}");
            assert_eq!(snap.skipped[0].reason, SkipReason::CutShort, "cap {cap}");
        }
    }
}
