//! Reading one process for the scan: its head from `stat` (and `status`,
//! the task directory and thread names only when needed), or read ahead by
//! the task iterator and then checked against the VMAs, then its VMAs,
//! handed on in pieces of about [`PART_BYTES`] as they are read, from the
//! leader or, for a zombie leader, a live thread; and why a process is
//! skipped when reading it fails.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::AtomicBool;

use super::buildid::BuildIdCache;
use super::options::Options;
use super::parse::{self, ProcParseError, PF_KTHREAD};
use super::source::{self, BuildIdPolicy, Local, TooManyMaps, Walk};
use super::tasks::{ExeId, Head};
use crate::model::{Part, Process, ReadTimes, Source, Thread, Vma};

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

/// What reading one process came to.
pub(super) enum Outcome<T> {
    /// Read whole (its last or only piece).
    Read(T),
    /// Its first pieces were handed on, then reading it failed: the last
    /// piece (the VMAs read since, every thread) and why.
    CutShort(T, Skip),
    /// Nothing of it is written, and why.
    Skipped(Skip),
    /// Not the uid asked for.
    NotSelected,
}

/// Bytes of VMAs (as [`Process::held_bytes`] counts them) past which a
/// process's VMAs read so far are handed on as a piece ([`Part`]) while the
/// rest are read, so no process is held whole however many maps it has.
/// Ordinary processes (up to a few thousand VMAs) are one piece, so this
/// costs them nothing.
pub const PART_BYTES: usize = 1 << 20;

/// The shared build-id cache and this worker's copy of its answers.
type Caches<'a> = (&'a BuildIdCache, &'a mut Local);

/// Where the pieces of a process before its last go: false when the scan
/// stopped.
type PieceSink<'a> = dyn FnMut(Process, Part) -> bool + 'a;

/// Where a process's head (comm, parent, threads) comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum HeadFrom<'a> {
    /// Read ahead (by the task iterator): used once the maps show the
    /// process still runs the executable it ran then, else read again
    /// from /proc.
    Read(&'a Head),
    /// /proc, keeping the process only if its real uid is this, when given.
    Proc(Option<u32>),
}

/// Reads process `pid`, its head as `head` says: its pieces before the
/// last go to `piece`, the last is returned, and whether a head read ahead
/// went into it (rather than one read again from /proc).
pub(super) fn read_process(
    pid: u32,
    head: HeadFrom<'_>,
    opts: &Options,
    walk: Walk,
    cache: Caches<'_>,
    no_ioctl: &AtomicBool,
    piece: &mut PieceSink<'_>,
) -> (Outcome<(Process, Part)>, bool) {
    let mut ahead = false;
    let outcome = read_checked(pid, head, opts, (walk, cache, no_ioctl), piece, &mut ahead);
    (outcome, ahead)
}

fn read_checked(
    pid: u32,
    head: HeadFrom<'_>,
    opts: &Options,
    (walk, cache, no_ioctl): (Walk, Caches<'_>, &AtomicBool),
    piece: &mut PieceSink<'_>,
    ahead: &mut bool,
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
    let (head, check) = match head {
        HeadFrom::Read(Head {
            process,
            exe: Some(exe),
        }) => (
            Ok(Some(process.clone())),
            Check::Pending(*exe, Seen::default()),
        ),
        HeadFrom::Read(_) => (read_head(pid, None, opts), Check::Proc),
        HeadFrom::Proc(uid) => (read_head(pid, uid, opts), Check::Proc),
    };
    let mut pieces = match head {
        Ok(Some(p)) => Pieces::new(p, check, opts, piece),
        Ok(None) => return Outcome::NotSelected,
        Err(e) => return Outcome::Skipped(skip(e)),
    };
    if pieces.head.kernel_thread {
        return Outcome::Read((pieces.head, Part::WHOLE));
    }
    let mut result = read_vmas(opts, walk, (cache.0, &mut *cache.1), no_ioctl, &mut pieces);
    if matches!(pieces.check, Check::Pending(..)) && pieces.pushed == 0 && !pieces.emitted {
        // no VMA from the threads the head lists: they may all be gone (a
        // leader that exited after the iterator, leaving a newer thread):
        // the head again from /proc, and the maps of the threads it lists
        if let Err(e) = pieces.settle() {
            return Outcome::Skipped(skip(e));
        }
        result = read_vmas(opts, walk, cache, no_ioctl, &mut pieces);
    }
    // a head read ahead that the maps did not confirm is read again now
    if let Err(e) = pieces.settle() {
        return Outcome::Skipped(skip(e));
    }
    *ahead = pieces.check == Check::Confirmed;
    match result {
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

/// Whether a process's head still has to be checked against its maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Read from /proc just before the maps: nothing to check.
    Proc,
    /// Read ahead: used only once one VMA maps this executable at its
    /// start of code and another is its vDSO, where they were.
    Pending(ExeId, Seen),
    /// Read ahead, and the VMAs showed the process still runs that image.
    Confirmed,
}

/// Which of an image's two marks the VMAs read so far showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Seen {
    code: bool,
    vdso: bool,
}

/// A process's VMAs as they are read, handed on as a piece each time they
/// hold [`PART_BYTES`].
struct Pieces<'p, 's> {
    /// The process without VMAs (every thread, the source once known).
    head: Process,
    /// Whether `head` is known to go with the VMAs read.
    check: Check,
    /// Where `head` is read again if it is not.
    opts: &'p Options,
    /// VMAs read and not yet handed on.
    vmas: Vec<Vma>,
    /// When they were read.
    times: ReadTimes,
    /// The end of the last VMA the walk pushed (0 before the first): the
    /// next was asked for from there.
    last_end: u64,
    /// When the walk of the maps file began: the time of every VMA a text
    /// walk reads (it reads many at once, ahead of handing them on).
    walk_start: u64,
    /// Their bytes, as [`Process::held_bytes`] counts them.
    bytes: usize,
    /// VMAs read in all.
    pushed: usize,
    /// A piece was handed on: the next is not the first.
    emitted: bool,
    sink: &'p mut PieceSink<'s>,
}

impl<'p, 's> Pieces<'p, 's> {
    fn new(head: Process, check: Check, opts: &'p Options, sink: &'p mut PieceSink<'s>) -> Self {
        Pieces {
            head,
            check,
            opts,
            vmas: Vec::new(),
            times: ReadTimes::default(),
            last_end: 0,
            walk_start: 0,
            bytes: 0,
            pushed: 0,
            emitted: false,
            sink,
        }
    }

    /// The process with `vmas` and these threads.
    fn with(&self, vmas: Vec<Vma>, read_times: ReadTimes, threads: Vec<Thread>) -> Process {
        let h = &self.head;
        Process {
            pid: h.pid,
            ppid: h.ppid,
            kernel_thread: h.kernel_thread,
            start_time: h.start_time,
            threads,
            vmas,
            source: h.source,
            read_times,
        }
    }

    /// The times of the VMAs read from here on start again: at the walk's
    /// start for a text walk (its lines may have been read already), now
    /// for PROCMAP_QUERY (the next VMA is read after this).
    fn times_from_here(&self) -> ReadTimes {
        let times = match self.head.source {
            Some(Source::Text) => ReadTimes::at(self.walk_start),
            _ => ReadTimes::at(read_clock()),
        };
        times.from_addr(self.last_end)
    }

    fn push(&mut self, v: Vma) -> io::Result<()> {
        if let Check::Pending(exe, mut seen) = self.check {
            seen.code |= exe.is_in(&v);
            seen.vdso |= exe.is_vdso(&v);
            self.check = match seen.code && seen.vdso {
                true => Check::Confirmed,
                false => Check::Pending(exe, seen),
            };
        }
        self.bytes += 128 + v.name.len();
        self.pushed += 1;
        self.last_end = v.end;
        self.vmas.push(v);
        // a test changes maps here: this VMA read, the next run's time not
        // taken
        crate::testhook::hold_after_vma(self.pushed);
        let ioctl = self.head.source == Some(Source::Ioctl);
        if ioctl && self.vmas.len().is_multiple_of(ReadTimes::EVERY) {
            // before the next VMA's ioctl
            self.times.push(read_clock());
        }
        if self.bytes < PART_BYTES {
            return Ok(());
        }
        self.times.end_at(read_clock());
        self.settle()?;
        let vmas = std::mem::take(&mut self.vmas);
        let next = self.times_from_here();
        let times = std::mem::replace(&mut self.times, next);
        let leader = self.head.threads.first().cloned().into_iter().collect();
        let p = self.with(vmas, times, leader);
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

    /// Reads the head again from /proc if it was read ahead and no VMA
    /// read so far confirmed it: the process exec'd, or its pid went to
    /// another process, after the iterator ran (or it maps no executable).
    /// The VMAs read are kept: they are the process's now.
    fn settle(&mut self) -> io::Result<()> {
        if let Check::Pending(..) = self.check {
            let fresh = read_head(self.head.pid, None, self.opts)?;
            let fresh = fresh.ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
            self.head = Process {
                source: self.head.source,
                ..fresh
            };
            self.check = Check::Proc;
        }
        Ok(())
    }

    /// Drops the VMAs read of a file that is not used after all (before
    /// any piece was handed on), and notes the time before a walk starts.
    fn restart(&mut self) {
        self.pushed -= self.vmas.len();
        self.vmas.clear();
        self.bytes = 0;
        self.walk_start = read_clock();
        self.times = ReadTimes::at(self.walk_start);
        self.last_end = 0;
    }

    /// The last piece: the VMAs not yet handed on and every thread.
    fn last(mut self) -> (Process, Part) {
        let part = Part {
            first: !self.emitted,
            last: true,
        };
        self.head.vmas = std::mem::take(&mut self.vmas);
        if !self.times.ended() {
            self.times.end_at(read_clock());
        }
        self.head.read_times = std::mem::take(&mut self.times);
        (self.head, part)
    }
}

/// The events' clock now, for [`ReadTimes`]; 0 (before anything) when it
/// cannot be read. The kernel stamps records with its NMI-safe monotonic
/// clock, which can differ from this one by a few nanoseconds around
/// timekeeping updates; a bound taken a few hundred nanoseconds before a
/// read has that much room.
fn read_clock() -> u64 {
    super::clock::event_monotonic_ns().unwrap_or(0)
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
        read_times: ReadTimes::default(),
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
                pieces.times.end_at(read_clock());
                pieces.head.source = Some(s);
                // a test changes a map here: read, not yet handed on
                crate::testhook::hold("MMAP2_SYNTH_TEST_HOLD_AFTER_MAPS");
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
