//! A watched snapshot, whatever its output (perf.data or `--json` lines):
//! the watch opened before the scan and closed after it ([`ScanWatch`]),
//! and what it tells the summary; which of its records are added is the
//! filter's ([`WatchFilter`]).

use super::filter::WatchFilter;
use super::stats::Stats;
use crate::bytes::Endian;
use crate::proc::watch::{parse_watched, Watch, Watched};
use crate::proc::{self, Target};

/// The watch of a live snapshot, opened before anything is read (maps made
/// from then on are reported by the kernel even if the scan has passed
/// their process), or why there is none.
pub struct ScanWatch {
    watch: Option<Watch>,
    /// Why watching was asked for and is not possible.
    skipped: Option<String>,
    /// CLOCK_MONOTONIC ns at the start.
    start: u64,
}

/// What the watch of a scan tells the summary.
#[derive(Debug, Default)]
pub struct WatchNotes {
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
    }
}

/// Now on the watched records' clock (the kernel's CLOCK_MONOTONIC).
fn monotonic() -> u64 {
    crate::proc::clock::event_monotonic_ns().unwrap_or(0)
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
            skipped,
            start,
        }
    }

    /// Whether the scan is watched (its pieces' map ranges and read times
    /// are needed).
    pub fn is_on(&self) -> bool {
        self.watch.is_some()
    }

    /// The filter for this watch's records, following its drains so it
    /// keeps only the map ranges it may need.
    pub fn filter(&self) -> WatchFilter {
        WatchFilter::following(self.watch.as_ref().map(Watch::progress))
    }

    /// Right after the scan: the records the watch saw (time-ordered, this
    /// machine's byte order; none when not watched) and the notes. A
    /// watched window ends when the last drain began, so the maps made
    /// inside it are the ones it took (it ended before the drain, and maps
    /// made meanwhile were added from after its end).
    pub fn finish(self) -> (Vec<Watched>, WatchNotes) {
        let mut end = None;
        let mut notes = WatchNotes {
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
