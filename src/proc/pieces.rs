//! A process's VMAs as a walk reads them: handed on in pieces of about
//! [`PART_BYTES`], each with its read times, the head checked against them
//! when it was read ahead; from the leader or, for a zombie leader, a live
//! thread.

use std::io;
use std::sync::atomic::AtomicBool;

use super::head::read_head;
use super::idcache::BuildIdCache;
use super::options::Options;
use super::skip::SkipReason;
use super::source::{self, BuildIdPolicy, Local, Walk};
use super::tasks::ExeId;
use crate::model::{Part, Process, ReadTimes, Source, Thread, Vma};

/// Bytes of VMAs (as [`Process::held_bytes`] counts them) past which a
/// process's VMAs read so far are handed on as a piece ([`Part`]) while the
/// rest are read, so no process is held whole however many maps it has.
/// Ordinary processes (up to a few thousand VMAs) are one piece, so this
/// costs them nothing.
pub const PART_BYTES: usize = 1 << 20;

/// VMAs room is made for at first: a typical process's executable maps,
/// so its vector does not grow four times from empty.
const FIRST_VMAS: usize = 32;

/// The shared build-id cache and this worker's copy of its answers.
pub(super) type Caches<'a> = (&'a BuildIdCache, &'a mut Local);

/// Where the pieces of a process before its last go: false when the scan
/// stopped.
pub(super) type PieceSink<'a> = dyn FnMut(Process, Part) -> bool + 'a;

/// Whether a process's head still has to be checked against its maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
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
pub(super) struct Seen {
    code: bool,
    vdso: bool,
}

/// A process's VMAs as they are read, handed on as a piece each time they
/// hold [`PART_BYTES`].
pub(super) struct Pieces<'p, 's> {
    /// The process without VMAs (every thread, the source once known).
    pub(super) head: Process,
    /// Whether `head` is known to go with the VMAs read.
    pub(super) check: Check,
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
    pub(super) pushed: usize,
    /// A piece was handed on: the next is not the first.
    pub(super) emitted: bool,
    sink: &'p mut PieceSink<'s>,
}

impl<'p, 's> Pieces<'p, 's> {
    pub(super) fn new(
        head: Process,
        check: Check,
        opts: &'p Options,
        sink: &'p mut PieceSink<'s>,
    ) -> Self {
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
    pub(super) fn settle(&mut self) -> io::Result<()> {
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
        // (here, not at the start: kernel threads have no walk)
        self.vmas.reserve(FIRST_VMAS);
        self.bytes = 0;
        self.walk_start = read_clock();
        self.times = ReadTimes::at(self.walk_start);
        self.last_end = 0;
    }

    /// The last piece: the VMAs not yet handed on and every thread.
    pub(super) fn last(mut self) -> (Process, Part) {
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

/// Reads the leader's VMAs into `pieces`; when the leader is a zombie
/// (empty maps or ESRCH) a live thread's maps are used instead.
pub(super) fn read_vmas(
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
    let dir = opts.proc_root.join(pid.to_string());
    for &tid in &tids {
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
