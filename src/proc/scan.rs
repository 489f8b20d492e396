//! Reads the selected processes from /proc in parallel (Rayon), each by
//! `process.rs`. The result is ordered by pid whatever the number of
//! workers, and what is read ahead is bounded in processes and bytes;
//! processes that vanish or deny access are counted as skips, never fatal.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::idcache::{BuildIdCache, IdNotes};
pub use super::options::{Options, Target, TaskSource, BPF_MIN_PROCESSES};
use super::parse;
pub use super::pieces::PART_BYTES;
use super::process::{read_process, HeadFrom, Outcome};
pub use super::skip::{Skip, SkipReason};
pub use super::source::SourceChoice;
use super::source::{self, Local, Walk};
use super::tasks;
use super::window::Window;
use crate::model::{Part, Process};

/// The result of a scan.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Processes read, by pid.
    pub processes: Vec<Process>,
    /// Processes skipped, by pid.
    pub skipped: Vec<Skip>,
    /// Build ids matched by inode only, and files not read (FUSE, or
    /// mounted nowhere).
    pub build_id_notes: IdNotes,
    /// Processes whose head came from the BPF task iterator.
    pub iterator_heads: usize,
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
    /// `--task-source bpf` where the task iterator cannot be used.
    #[error("the BPF task iterator cannot be used (--task-source auto or proc reads /proc)")]
    TaskIter(#[source] super::tasks::TaskIterError),
    /// The worker pool could not be built.
    #[error("cannot start worker threads")]
    Pool(#[from] rayon::ThreadPoolBuildError),
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

/// What [`scan_each`] reports besides the processes it handed on.
#[derive(Debug, Default)]
pub struct Scanned {
    /// Processes skipped, by pid.
    pub skipped: Vec<Skip>,
    /// See [`Snapshot::build_id_notes`].
    pub build_id_notes: IdNotes,
    /// See [`Snapshot::iterator_heads`].
    pub iterator_heads: usize,
    /// The pids listed to be read, sorted (whether read or not).
    pub listed: Vec<u32>,
    /// Processes read (their last pieces handed on).
    pub read: usize,
    /// Processes listed but not of the selection (another user's, for
    /// `-u`).
    pub not_selected: usize,
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
        build_id_notes: scanned.build_id_notes,
        iterator_heads: scanned.iterator_heads,
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
    sink: impl FnMut(T) -> Result<(), E>,
) -> Result<Scanned, E> {
    scan_each_with(target, opts, |_: &mut (), p, part| map(p, part), sink)
}

/// [`scan_each`] whose `map` also gets state of its own on each worker (a
/// `W::default()` per worker, per scan): what a worker already handed on,
/// say, so that it is not handed on again with every process. Each worker
/// takes processes in pid order, so the first process to carry something
/// is mapped on a worker that has not seen it yet.
pub fn scan_each_with<T: Send, E: From<ScanError>, W: Default>(
    target: &Target,
    opts: &Options,
    map: impl Fn(&mut W, Process, Part) -> (T, usize) + Sync,
    sink: impl FnMut(T) -> Result<(), E>,
) -> Result<Scanned, E> {
    // a test forks a process here: after the watch opened, before the list
    crate::testhook::hold("MMAP2_SYNTH_TEST_HOLD_BEFORE_LIST");
    let pids = pids_of(target, opts)?;
    let uid = match target {
        Target::Uid(u) => Some(*u),
        _ => None,
    };
    let heads = Prefetched::new(prefetch_heads(&pids, target, opts)?);
    // a test makes a process exec here: between the heads and its maps
    crate::testhook::hold("MMAP2_SYNTH_TEST_HOLD_AFTER_HEADS");
    let mut scanned = read_listed(&pids, uid, heads, opts, map, sink)?;
    scanned.listed = pids;
    Ok(scanned)
}

/// [`scan_each_with`] of processes found after a scan's list was taken
/// (those a watch saw forked meanwhile), each read from /proc if it still
/// runs and, with `uid`, is that user's. One that is gone is not a skip:
/// it is left out of what is returned.
pub fn scan_late_with<T: Send, E: From<ScanError>, W: Default>(
    pids: &[u32],
    uid: Option<u32>,
    opts: &Options,
    map: impl Fn(&mut W, Process, Part) -> (T, usize) + Sync,
    sink: impl FnMut(T) -> Result<(), E>,
) -> Result<Scanned, E> {
    let heads = Prefetched::new(BTreeMap::new());
    let mut scanned = read_listed(pids, uid, heads, opts, map, sink)?;
    // gone before or while it was read: left to its FORK, not a skip
    let gone = [SkipReason::Vanished, SkipReason::NotFound];
    scanned.skipped.retain(|s| !gone.contains(&s.reason));
    scanned.listed = pids.to_vec();
    Ok(scanned)
}

/// Reads the processes `pids` (sorted) in parallel, their heads from
/// `heads` or /proc, as [`scan_each_with`] tells.
fn read_listed<T: Send, E: From<ScanError>, W: Default>(
    pids: &[u32],
    uid: Option<u32>,
    heads: Prefetched,
    opts: &Options,
    map: impl Fn(&mut W, Process, Part) -> (T, usize) + Sync,
    mut sink: impl FnMut(T) -> Result<(), E>,
) -> Result<Scanned, E> {
    // both hold our mount table open: made before the workers unshare
    // their descriptor tables, each keeps a copy
    let cache = BuildIdCache::new(&opts.proc_root);
    super::mounts::host();
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
    let pool = worker_pool(workers)?;
    let window = Window::new(pids.len(), AHEAD, AHEAD_BYTES);
    let mut scanned = Scanned::default();
    // an outcome and its weight (the bytes it holds); earlier pieces go to
    // the window as they are read
    let read = |i: usize, local: &mut Local, own: &mut W| {
        let mut piece = |p: Process, part: Part| {
            let (t, weight) = map(own, p, part);
            window.part(i, Outcome::Read(t), weight)
        };
        let caches = (&cache, local);
        let head = heads.of(pids[i], uid);
        let (outcome, ahead) =
            read_process(pids[i], head, opts, walk, caches, &no_ioctl, &mut piece);
        heads.count(ahead, &outcome);
        match outcome {
            Outcome::Read((p, part)) => {
                let (t, weight) = map(own, p, part);
                (Outcome::Read(t), weight)
            }
            Outcome::CutShort((p, part), skip) => {
                let (t, weight) = map(own, p, part);
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
                let mut local = Local::default();
                let mut own = W::default();
                while let Some(i) = window.next() {
                    let (outcome, weight) = read(i, &mut local, &mut own);
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
                Outcome::Read(t) => {
                    sink(t)?;
                    scanned.read += 1;
                }
                Outcome::CutShort(t, s) => {
                    sink(t)?;
                    scanned.skipped.push(s);
                    scanned.read += 1;
                }
                Outcome::Skipped(s) => scanned.skipped.push(s),
                Outcome::NotSelected => scanned.not_selected += 1,
            }
        }
        Ok(())
    });
    result?;
    scanned.build_id_notes = cache.notes();
    scanned.iterator_heads = heads.used.into_inner();
    Ok(scanned)
}

/// The scan's workers, each with a file table of its own
/// ([`crate::sys::unshare_files`]): a maps file is opened, walked and
/// closed on one worker, and a private table spares each of its tens of
/// ioctls the reference a shared table takes (at 2,000 processes, `-j 1`,
/// 20 kHz, 10 runs: `fput` 309 samples -> 2, `fdget` 308 -> 168, of about
/// 42,000). Files a worker opens
/// stay on that worker; one that cannot unshare still works, shared.
fn worker_pool(workers: usize) -> Result<rayon::ThreadPool, ScanError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .start_handler(|_| {
            let _ = crate::sys::unshare_files();
        })
        .build()
        .map_err(ScanError::from)
}

/// Heads read ahead by the task iterator (maybe none), and how many of
/// them went into processes read.
struct Prefetched {
    heads: BTreeMap<u32, tasks::Head>,
    used: AtomicUsize,
}

impl Prefetched {
    fn new(heads: BTreeMap<u32, tasks::Head>) -> Prefetched {
        Prefetched {
            heads,
            used: AtomicUsize::new(0),
        }
    }

    /// Where the head of `pid` comes from.
    fn of(&self, pid: u32, uid: Option<u32>) -> HeadFrom<'_> {
        match self.heads.get(&pid) {
            Some(h) => HeadFrom::Read(h),
            None => HeadFrom::Proc(uid),
        }
    }

    /// Counts a process read with a head read ahead (`ahead`).
    fn count<T>(&self, ahead: bool, outcome: &Outcome<T>) {
        if ahead && matches!(outcome, Outcome::Read(_) | Outcome::CutShort(..)) {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// This process's status as `proc_root` gives it.
fn own_status(proc_root: &Path) -> Option<parse::Status> {
    let t = std::fs::read(proc_root.join("self/status")).ok()?;
    parse::parse_status(&t).ok()
}

/// Whether `proc_root` is the /proc of this process's own pid namespace,
/// `me` being our status read from it: only there do its pids match those
/// the kernel gives us elsewhere (perf records, the task iterator). A /proc
/// of another pid namespace names processes by other numbers; NSpid has
/// one entry only in our own.
fn is_own_proc(proc_root: &Path, me: Option<&parse::Status>) -> bool {
    proc_root == Path::new("/proc") && me.is_some_and(|s| s.nspid_levels == 1)
}

/// `is_own_proc`, reading our status from `proc_root`.
pub fn proc_is_own(proc_root: &Path) -> bool {
    is_own_proc(proc_root, own_status(proc_root).as_ref())
}

/// The heads of `pids` from the BPF task iterator where [`Options::tasks`]
/// asks for it, or nothing (every head is then read from /proc). Only for
/// the real /proc of this process's own pid namespace, and not when
/// selecting by uid (which /proc answers).
fn prefetch_heads(
    pids: &[u32],
    target: &Target,
    opts: &Options,
) -> Result<BTreeMap<u32, tasks::Head>, ScanError> {
    if opts.tasks == TaskSource::Proc {
        return Ok(BTreeMap::new());
    }
    let me = own_status(&opts.proc_root);
    let here = !matches!(target, Target::Uid(_)) && is_own_proc(&opts.proc_root, me.as_ref());
    let wanted = match opts.tasks {
        TaskSource::Proc => false, // returned above
        TaskSource::Bpf if !here => return Err(ScanError::TaskIter(tasks::TaskIterError::NotHere)),
        TaskSource::Bpf => true,
        TaskSource::Auto if !here => false,
        TaskSource::Auto => {
            let tasks_total = host_tasks();
            let all = matches!(target, Target::All);
            me.is_some_and(|s| auto_uses_iterator(&s, pids.len(), all, tasks_total))
        }
    };
    if !wanted {
        return Ok(BTreeMap::new());
    }
    match tasks::read_records(Path::new(tasks::VMLINUX_BTF)) {
        Ok(records) => Ok(tasks::heads_of(&records, tasks::StartClock::here())),
        Err(e) if opts.tasks == TaskSource::Bpf => Err(ScanError::TaskIter(e)),
        Err(_) => Ok(BTreeMap::new()),
    }
}

/// Starts reading the task iterator's layout ahead
/// ([`tasks::read_layout_ahead`]) when a scan of `target` will likely load
/// it: `--task-source bpf`, or `auto` over every process of our own /proc
/// with the rights `auto_uses_iterator` asks for, on a host of at least
/// [`BPF_MIN_PROCESSES`] tasks (the processes are not listed yet).
pub fn read_ahead(target: &Target, opts: &Options) {
    let likely = match opts.tasks {
        TaskSource::Proc => false,
        TaskSource::Bpf => !matches!(target, Target::Uid(_)),
        TaskSource::Auto => {
            let me = own_status(&opts.proc_root);
            let tasks_total = host_tasks();
            *target == Target::All
                && is_own_proc(&opts.proc_root, me.as_ref())
                && me.is_some_and(|s| {
                    let many = tasks_total.unwrap_or(0);
                    auto_uses_iterator(&s, many, true, tasks_total)
                })
        }
    };
    if likely {
        tasks::read_layout_ahead(Path::new(tasks::VMLINUX_BTF));
    }
}

/// How many tasks the host runs (`/proc/loadavg`, every pid namespace's).
fn host_tasks() -> Option<usize> {
    let text = std::fs::read("/proc/loadavg").ok()?;
    parse::parse_loadavg_tasks(&text)
}

/// Capabilities (bit numbers) the task iterator needs: CAP_SYS_ADMIN, or
/// CAP_BPF to load it with CAP_PERFMON for its kernel reads.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Tasks on the host per selected process past which a scan of chosen
/// pids reads /proc: the iterator visits every task (about 1 µs each)
/// while /proc costs about 8 µs per selected process and thread.
const TASKS_PER_SELECTED: usize = 5;

/// Whether [`TaskSource::Auto`] loads the task iterator for a scan of
/// `selected` processes (`all`: every process of the namespace) on a host
/// of `tasks_total` tasks, for this process (`me`): only when the scan is
/// big enough to repay loading it, when walking every task costs less
/// than the /proc reads it saves, when we hold the capabilities (a failed
/// load still costs the BTF read), and without a seccomp filter (one may
/// kill the process for calling bpf(2), and we cannot tell which).
fn auto_uses_iterator(
    me: &parse::Status,
    selected: usize,
    all: bool,
    tasks_total: Option<usize>,
) -> bool {
    let has = |cap: u32| me.cap_eff.is_some_and(|c| c >> cap & 1 == 1);
    let capable = has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON));
    let cheap_walk =
        all || tasks_total.is_some_and(|t| t <= selected.saturating_mul(TASKS_PER_SELECTED));
    selected >= BPF_MIN_PROCESSES && capable && me.seccomp == Some(0) && cheap_walk
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

/// The processes of the threads `ids` a user named (`-p`: a thread's id
/// stands for its process, as with `perf record -p`), in their order, each
/// once; an id whose `status` cannot be read (gone) stays itself (reported
/// as not found). Not for pids a recording names: those are processes, and
/// a pid reused since by another process's thread must not become it.
pub fn processes_of(proc_root: &std::path::Path, ids: &[u32]) -> Vec<u32> {
    let mut seen = std::collections::HashSet::new();
    (ids.iter())
        .map(|&id| leader_of(proc_root, id).unwrap_or(id))
        .filter(|&p| seen.insert(p))
        .collect()
}

/// The process (thread group) the thread `id` belongs to, from its
/// `status`; `None` if it cannot be read.
fn leader_of(proc_root: &std::path::Path, id: u32) -> Option<u32> {
    use std::io::Read;
    let path = proc_root.join(id.to_string()).join("status");
    let mut text = Vec::new();
    let file = std::fs::File::open(path).ok()?;
    file.take(64 << 10).read_to_end(&mut text).ok()?;
    parse::parse_status(&text).ok().map(|s| s.tgid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Selection, Vma};
    use std::path::Path;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::time::Duration;

    // Auto loads the iterator only for 200+ processes, with CAP_SYS_ADMIN
    // or CAP_BPF + CAP_PERFMON, no seccomp filter, and (for chosen pids) a
    // host of at most 5 tasks per chosen process.
    #[test]
    fn auto_needs_size_capabilities_no_seccomp_and_few_other_tasks() {
        let root = parse::Status {
            seccomp: Some(0),
            cap_eff: Some(0x1ff_ffff_ffff),
            nspid_levels: 1,
            ..Default::default()
        };
        assert!(auto_uses_iterator(&root, 200, true, None));
        assert!(!auto_uses_iterator(&root, 199, true, None));
        assert!(auto_uses_iterator(&root, 200, false, Some(1000)));
        assert!(!auto_uses_iterator(&root, 200, false, Some(1001)));
        assert!(!auto_uses_iterator(&root, 200, false, None));
        let filtered = parse::Status {
            seccomp: Some(2),
            ..root.clone()
        };
        assert!(!auto_uses_iterator(&filtered, 5000, true, None));
        let unknown = parse::Status {
            seccomp: None,
            ..root.clone()
        };
        assert!(!auto_uses_iterator(&unknown, 5000, true, None));
        let caps = |c: u64| parse::Status {
            cap_eff: Some(c),
            ..root.clone()
        };
        assert!(auto_uses_iterator(&caps(1 << 21), 500, true, None));
        assert!(auto_uses_iterator(
            &caps(1 << 38 | 1 << 39),
            500,
            true,
            None
        ));
        assert!(!auto_uses_iterator(&caps(1 << 39), 500, true, None));
        assert!(!auto_uses_iterator(&caps(0), 500, true, None));
    }

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
    // a read or spans many, and the lines after it are read as usual (also
    // by -d's walk, which goes on with the ioctl there only if it answers);
    // a cap reached as such a line ends cuts the walk short there.
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
            .map(|v| match &v.name[..] {
                b"//toolong" => (v.start >> 12, v.inode, 0),
                n => (v.start >> 12, v.inode, n.len()),
            })
            .collect();
        let want = [(1, 1, 10), (2, 2, 0), (3, 3, 0), (4, 4, 4095), (5, 5, 0)];
        assert_eq!(got, want);
        // -d reads the text by default and leaves it for the ioctl at a
        // name this long, unless the ioctl does not answer (ENOTTY here,
        // on a regular file, as on a kernel before 6.11): the same VMAs
        let all = Options {
            source: SourceChoice::Auto,
            selection: Selection::ExecAndData,
            ..options(root.path())
        };
        let snap = snapshot(&Target::Pids(vec![100, 101]), &all).unwrap();
        assert!(snap.skipped.is_empty(), "{:?}", snap.skipped);
        let names: Vec<usize> = snap.processes[1]
            .vmas
            .iter()
            .map(|v| v.name.len())
            .collect();
        assert_eq!(names, [10, 9, 9, 4095, 9]);
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
