//! A watched snapshot, whatever its output (perf.data or `--json` lines):
//! the watch opened before the scan and closed after it ([`ScanWatch`]),
//! and what it tells the summary; which of its records are added is the
//! filter's ([`WatchFilter`]).

use std::collections::HashSet;
use std::time::Duration;

use super::filter::WatchFilter;
use super::stats::Stats;
use crate::bytes::Endian;
use crate::model::{Part, Process};
use crate::proc::scan::{ScanError, Scanned};
use crate::proc::watch::{parse_watched, Watch, Watched};
use crate::proc::{self, Target};

/// Rounds of [`ScanWatch::scan`]'s reads of processes forked during the
/// scan (a round reads the children forked before the last one's reads).
const LATE_ROUNDS: usize = 3;

/// Processes forked during the scan that [`ScanWatch::scan`] reads at most
/// (a host forking without pause cannot keep it reading).
const LATE_MAX: usize = 4096;

/// How long [`ScanWatch::scan`] waits for a drain of the watch.
const SYNC_TIMEOUT: Duration = Duration::from_secs(5);

/// The watch of a live snapshot, opened before anything is read (maps made
/// from then on are reported by the kernel even if the scan has passed
/// their process), or why there is none.
pub struct ScanWatch {
    watch: Option<Watch>,
    /// Processes forked during the scan and read after it, and those
    /// left to their FORK (gone, past [`LATE_MAX`], or no drain in time).
    late: (usize, usize),
    /// Why watching was asked for and is not possible.
    skipped: Option<String>,
    /// CLOCK_MONOTONIC ns at the start.
    start: u64,
    /// Whether the watched maps get their files' build ids, as the scan's
    /// do (not with `--no-buildid`).
    build_ids: bool,
}

/// What the watch of a scan tells the summary.
#[derive(Debug, Default)]
pub struct WatchNotes {
    late_read: usize,
    late_unread: usize,
    lost: u64,
    repeated: usize,
    lost_at_least: bool,
    skipped: Option<String>,
    window: (u64, u64),
    watched: bool,
}

impl WatchNotes {
    /// Puts the notes into the snapshot's counts.
    pub fn apply(self, stats: &mut Stats) {
        stats.watch_lost = self.lost;
        stats.watched_repeated = self.repeated;
        stats.watch_lost_at_least = self.lost_at_least;
        stats.watch_skipped = self.skipped;
        stats.watch_window = Some(self.window);
        stats.watched = self.watched;
        stats.late_read = self.late_read;
        stats.late_unread = self.late_unread;
    }
}

/// Now on the watched records' clock (the kernel's CLOCK_MONOTONIC).
fn monotonic() -> u64 {
    crate::proc::clock::event_monotonic_ns().unwrap_or(0)
}

/// The parent pid of process `pid` now, from its stat file under `root`.
fn parent_of(root: &std::path::Path, pid: u32) -> Option<u32> {
    let text = std::fs::read(root.join(pid.to_string()).join("stat")).ok()?;
    proc::parse::parse_stat(&text).ok().map(|s| s.ppid)
}

impl ScanWatch {
    /// Opens the watch for `target` when `on` (only in this machine's byte
    /// order; `pages`: of each ring, None for the defaults).
    pub fn start(
        target: &Target,
        scan: &proc::Options,
        on: bool,
        endian: Endian,
        pages: Option<usize>,
    ) -> ScanWatch {
        let start = monotonic();
        let (watch, skipped) = match (on, endian == Endian::NATIVE) {
            (false, _) => (None, None),
            (true, false) => (
                None,
                Some("watching writes this machine's byte order only".to_string()),
            ),
            // the kernel writes pids as our pid namespace sees them
            (true, true) if !proc::scan::proc_is_own(&scan.proc_root) => (
                None,
                Some(format!(
                    "{} is not the /proc of this pid namespace: its pids are not the watch's",
                    scan.proc_root.display()
                )),
            ),
            (true, true) => {
                let data = scan.selection == crate::model::Selection::ExecAndData;
                match Watch::start(target, &scan.proc_root, data, pages) {
                    Ok(w) => (Some(w), None),
                    Err(why) => (None, Some(why)),
                }
            }
        };
        ScanWatch {
            watch,
            late: (0, 0),
            skipped,
            start,
            build_ids: scan.build_ids,
        }
    }

    /// Reads `target`'s processes as [`proc::scan_each_with`] does, then,
    /// when watched, the new processes the watch saw forked meanwhile that
    /// the scan's list did not have (of the selection: with `-p`, the
    /// children of those read), each after its fork, so that its maps are
    /// its own: left to its FORK, perf's replay would give it its parent's
    /// maps as the scan read them, after the fork. Up to `LATE_ROUNDS`
    /// rounds (children forked before a round's reads) and `LATE_MAX`
    /// processes. Their results go to `sink` after the scan's.
    pub fn scan<T: Send, E: From<ScanError>, W: Default>(
        &mut self,
        target: &Target,
        opts: &proc::Options,
        map: impl Fn(&mut W, Process, Part) -> (T, usize) + Sync,
        mut sink: impl FnMut(T) -> Result<(), E>,
    ) -> Result<Scanned, E> {
        let mut scanned = proc::scan_each_with(target, opts, &map, &mut sink)?;
        let Some(watch) = &self.watch else {
            return Ok(scanned);
        };
        let uid = match target {
            Target::Uid(u) => Some(*u),
            _ => None,
        };
        let mut known: HashSet<u32> = scanned.listed.iter().copied().collect();
        // ourselves, and what another pid namespace's processes are to us
        known.extend([std::process::id(), 0]);
        let progress = watch.progress();
        for _ in 0..LATE_ROUNDS {
            let Some(forked) = progress.sync(SYNC_TIMEOUT) else {
                break;
            };
            let mut late = Vec::new();
            let named = matches!(target, Target::Pids(_));
            for (pid, ppid) in forked {
                // with -p, only the children of what was selected, and not
                // once the pid is another's child (reused since; one gone is
                // counted so)
                let selected = !named
                    || (known.contains(&ppid)
                        && parent_of(&opts.proc_root, pid).is_none_or(|p| p == ppid));
                if selected && known.insert(pid) {
                    late.push(pid);
                }
            }
            let room = LATE_MAX.saturating_sub(self.late.0 + self.late.1);
            if late.len() > room {
                self.late.1 += late.len() - room;
                late.truncate(room);
            }
            if late.is_empty() {
                break;
            }
            late.sort_unstable();
            let more = proc::scan_late_with(&late, uid, opts, &map, &mut sink)?;
            self.late.0 += more.read;
            self.late.1 += late.len().saturating_sub(more.read + more.not_selected);
            scanned.skipped.extend(more.skipped);
        }
        Ok(scanned)
    }

    /// Whether the scan is watched (its pieces' map ranges and read times
    /// are needed).
    pub fn is_on(&self) -> bool {
        self.watch.is_some()
    }

    /// The filter for this watch's records, following its drains so it
    /// keeps only the map ranges it may need.
    pub fn filter(&self) -> WatchFilter {
        WatchFilter::following(self.watch.as_ref().map(Watch::progress), self.build_ids)
    }

    /// Right after the scan: the records the watch saw (time-ordered, this
    /// machine's byte order; none when not watched) and the notes. A
    /// watched window ends when the last drain began, so the maps made
    /// inside it are the ones it took (it ended before the drain, and maps
    /// made meanwhile were added from after its end).
    pub fn finish(self) -> (Vec<Watched>, WatchNotes) {
        let mut end = None;
        let mut notes = WatchNotes {
            late_read: self.late.0,
            late_unread: self.late.1,
            skipped: self.skipped,
            watched: self.watch.is_some(),
            ..WatchNotes::default()
        };
        let recs = match self.watch {
            Some(watch) => {
                // a test maps a library here: after the scan, before the drain
                crate::testhook::hold("MMAP2_SYNTH_TEST_HOLD_BEFORE_DRAIN");
                let drained = watch.finish();
                end = Some(drained.ended);
                let mut reported = 0;
                let recs = parse_watched(&drained.bytes, &mut reported, &mut notes.repeated);
                // The events' counts include what PERF_RECORD_LOST reported;
                // without them, a ring found full at a drain may have dropped
                // records with no PERF_RECORD_LOST written: one at least.
                notes.lost = match drained.lost {
                    Some(n) => n.max(reported),
                    None => reported.max(u64::from(drained.was_full)),
                };
                notes.lost_at_least = drained.lost.is_none();
                if drained.failed {
                    // maps made during the scan are missing, one at least
                    notes.skipped = Some("the watch's drainer failed".to_string());
                    (notes.lost, notes.lost_at_least) = (notes.lost.max(1), true);
                }
                recs
            }
            None => Vec::new(),
        };
        notes.window = (self.start, end.unwrap_or_else(monotonic));
        (recs, notes)
    }
}
