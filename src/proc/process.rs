//! Reading one process for the scan: its head (read ahead by the task
//! iterator, or from /proc: `head`), then its VMAs in pieces (`pieces`),
//! and what that came to (read, cut short, skipped: `skip`).

use std::io;
use std::sync::atomic::AtomicBool;

use super::head::read_head;
use super::options::Options;
use super::pieces::{read_vmas, Caches, Check, PieceSink, Pieces, Seen};
use super::skip::{Skip, SkipReason};
use super::source::{is_walk_cap, Walk};
use super::tasks::Head;
use crate::model::{Part, Process};

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
        Err(e) if pieces.emitted || is_walk_cap(&e) => {
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
