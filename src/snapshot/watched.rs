//! A watched snapshot, whatever its output (perf.data or `--json` lines):
//! the watch opened before the scan ([`ScanWatch`]), and which of its
//! records are added after the scan's, encoded as the snapshot's
//! ([`WatchFilter`]): those of the selection, MMAP2 only when the scan's
//! maps do not supersede them.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use super::encode::{map_identity, vma_identity, Encoding};
use super::stats::Stats;
use crate::bytes::Endian;
use crate::model::{BuildId, ReadTimes, Vma};
use crate::perf::consts::{misc, types};
use crate::perf::events::{parse_fork, parse_map};
use crate::perf::{BuildIdEntry, RecordHeader};
use crate::proc::watch::{parse_watched, Progress, Watch, Watched};
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
    lost_at_least: bool,
    skipped: Option<String>,
    window: (u64, u64),
    watched: bool,
}

impl WatchNotes {
    /// Puts the notes into the snapshot's counts.
    pub fn apply(self, stats: &mut Stats) {
        stats.watch_lost = self.lost;
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
        WatchFilter {
            progress: self.watch.as_ref().map(Watch::progress),
            ..WatchFilter::default()
        }
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
                let recs = parse_watched(&drained.bytes, &mut reported);
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

/// What the scan wrote, for choosing the watched records to add: where its
/// maps lie and when they had been read, and its pids.
///
/// The scan's records stand for each process as it was read, at time 0,
/// before every watched record. So a watched map the kernel recorded before
/// the scan read that place is superseded by the scan's view and dropped
/// when it overlaps a map the scan wrote there (the same map reported
/// twice, or an older one the scan saw replaced: replayed after the scan's
/// it would undo the replacement). One recorded after the read (an
/// `mprotect` back to executable, a map made again at the same place) is a
/// new event, added as `perf record` would have it; so is one of a place
/// the scan found empty.
///
/// When the scan read a place is known only between two times
/// ([`ReadTimes`]: taken before and after each run of 32 VMAs), so a map
/// recorded between them may or may not be one the scan read. It is
/// dropped as the scan's own when it is identical to the scan's map there
/// ([`map_identity`]: same place, offset, prot, build id and name) and no
/// watched map of that place was added before it: then replaying it
/// changes nothing. Anything else is added, in time order, so what perf
/// ends with is what the process ended with: a change is never lost, and a
/// map rarely written twice (one recorded between the times that differs
/// from the scan's only in what the identity leaves out).
#[derive(Debug, Default)]
pub struct WatchFilter {
    /// The scan's maps: (pid, start, end, bounds of when it was read (the
    /// events' CLOCK_MONOTONIC ns, see [`ReadTimes`]), [`map_identity`] or
    /// 0), appended per piece (cheap on the scan's path), sorted once when
    /// the first watched map is looked up: most scans see few or none.
    seen: Vec<Seen>,
    /// The scan's maps (pid, start, end) that a watched map added since
    /// overlapped: an identical one after it is a change back, not the
    /// scan's own.
    touched: HashSet<(u32, u64, u64)>,
    /// For each of `seen`, sorted, the furthest end of its pid's maps up to
    /// it: maps read while the process changed may overlap or nest.
    reach: Vec<u64>,
    /// Whether `seen` is sorted and `reach` made since the last append.
    sorted: bool,
    /// The pids written, and the children forked from them meanwhile.
    pids: HashSet<u32>,
    /// The watch's drains, when followed: a piece's ranges wait in
    /// `pending` until a drain begun after it was written has completed,
    /// then stay only if the watch took a map of its pid. So the ranges
    /// held are those of processes that mapped during the scan, not one per
    /// map of the host.
    progress: Option<Arc<Progress>>,
    pending: VecDeque<Pending>,
}

/// A map the scan wrote, as [`WatchFilter`] keeps it: (pid, start, end,
/// bounds of its read, identity), in that order for sorting.
type Seen = (u32, u64, u64, (u64, u64), u64);

/// A written piece's ranges waiting for the drains.
#[derive(Debug)]
struct Pending {
    /// The drains begun when the writer got the piece.
    mark: u64,
    pid: u32,
    maps: Vec<ScanMap>,
    times: ReadTimes,
}

/// A map the scan wrote, as the watch's filter needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanMap {
    pub start: u64,
    pub end: u64,
    /// Its [`map_identity`], 0 when it has none.
    pub identity: u64,
}

impl ScanMap {
    /// The map the scan wrote for `vma`.
    pub fn of(vma: &Vma) -> ScanMap {
        ScanMap {
            start: vma.start,
            end: vma.end,
            identity: vma_identity(vma).map_or(0, |i| i.max(1)),
        }
    }
}

impl WatchFilter {
    /// Notes a process (or a piece of one) the scan wrote, with its maps
    /// and when they were read, at the earliest.
    pub fn note(&mut self, pid: u32, maps: Vec<ScanMap>, times: ReadTimes) {
        self.pids.insert(pid);
        let Some(progress) = self.progress.clone() else {
            self.keep(pid, maps, &times);
            return;
        };
        self.settle();
        // marked after the process was read (it reached the writer)
        let mark = progress.lock().mark();
        if !maps.is_empty() {
            self.pending.push_back(Pending {
                mark,
                pid,
                maps,
                times,
            });
        }
    }

    /// Keeps or drops the waiting ranges the drains have settled: kept for
    /// the pids they took maps of. After the watch's last drain, all are.
    fn settle(&mut self) {
        let Some(progress) = self.progress.clone() else {
            return;
        };
        let drains = progress.lock();
        while let Some(p) = self.pending.front() {
            if !drains.settles(p.mark) {
                break;
            }
            let p = self.pending.pop_front().expect("front seen");
            if drains.mapped(p.pid) {
                self.keep(p.pid, p.maps, &p.times);
            }
        }
    }

    fn keep(&mut self, pid: u32, maps: Vec<ScanMap>, times: &ReadTimes) {
        let maps = (maps.into_iter().enumerate())
            .map(|(i, m)| (pid, m.start, m.end, times.bounds(i), m.identity));
        self.seen.extend(maps);
        self.sorted = false;
    }

    /// Whether the scan's view supersedes a map of `pid` over `start..end`
    /// recorded at `time` with `identity` (0: none): the scan wrote a map
    /// overlapping it and read it after `time` for sure, or wrote this very
    /// map there, maybe read after `time`, and no watched map added since
    /// touched it. If not, the scan's maps it overlaps are marked touched
    /// (it is added).
    fn superseded(&mut self, pid: u32, start: u64, end: u64, time: u64, identity: u64) -> bool {
        if !self.sorted {
            self.seen.sort_unstable();
            let mut last = None;
            self.reach.clear();
            for &(p, _, e, _, _) in &self.seen {
                let reach = match last {
                    Some((lp, r)) if lp == p => e.max(r),
                    _ => e,
                };
                self.reach.push(reach);
                last = Some((p, reach));
            }
            self.sorted = true;
        }
        // back from the last map starting before `end`, while some map of
        // the pid up to there still reaches past `start`
        let below = self.seen.partition_point(|&(p, s, ..)| (p, s) < (pid, end));
        let mut same = false;
        let mut under = Vec::new();
        for i in (0..below).rev() {
            let (p, s, e, (read_from, read_by), id) = self.seen[i];
            if p != pid || self.reach[i] <= start {
                break;
            }
            if e <= start {
                continue;
            }
            if time <= read_from {
                return true;
            }
            let maybe_read = time <= read_by;
            same |= maybe_read && (s, e) == (start, end) && id == identity && id != 0;
            under.push((p, s, e));
        }
        if same && !self.touched.contains(&(pid, start, end)) {
            return true;
        }
        self.touched.extend(under);
        false
    }

    /// Maps held, kept and waiting.
    #[cfg(test)]
    fn held_maps(&self) -> usize {
        self.seen.len() + self.pending.iter().map(|p| p.maps.len()).sum::<usize>()
    }

    /// Passes to `emit`, in order, each watched record to add, encoded under
    /// the snapshot's trailer (its pid, tid and real time), with the table
    /// entry its map brings when its build id is new to `ids` (which gets
    /// it). Added: the records of the selection (`all`: every process but
    /// this one; else the processes written and their children), MMAP2 only
    /// when the scan's view does not supersede it (see [`WatchFilter`]).
    /// Counts go to `stats`.
    pub fn add<E>(
        &mut self,
        recs: &[Watched],
        all: bool,
        enc: &Encoding,
        ids: &mut BTreeMap<Vec<u8>, BTreeSet<BuildId>>,
        stats: &mut Stats,
        mut emit: impl FnMut(Option<BuildIdEntry>, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.settle();
        let e = enc.endian;
        let me = std::process::id();
        let mut rec = Vec::new();
        for w in recs {
            let selected = |pids: &HashSet<u32>, pid: u32| {
                pid != u32::MAX && pid != 0 && pid != me && (all || pids.contains(&pid))
            };
            match w.record_type {
                types::FORK => {
                    if let Some(f) = parse_fork(&w.body, e) {
                        if selected(&self.pids, f.ppid) {
                            self.pids.insert(f.pid);
                        }
                    }
                }
                types::MMAP2 | types::COMM | types::EXIT => {}
                _ => continue,
            }
            if !selected(&self.pids, w.pid) {
                continue;
            }
            let mut new_id = None;
            if w.record_type == types::MMAP2 {
                let h = RecordHeader {
                    type_: types::MMAP2,
                    misc: w.misc,
                    size: 0,
                };
                let Some(m) = parse_map(&h, &w.body, e) else {
                    continue;
                };
                let k = &m.key;
                let end = k.addr.saturating_add(k.len);
                let identity =
                    map_identity(k.pgoff, m.prot, m.flags, m.build_id.as_ref(), &k.filename);
                let identity = identity.map_or(0, |i| i.max(1));
                if self.superseded(k.pid, k.addr, end, w.time, identity) {
                    stats.watched_superseded += 1;
                    continue;
                }
                new_id = m.build_id.map(|id| BuildIdEntry {
                    cpumode: m.misc & misc::CPUMODE_MASK,
                    pid: -1,
                    build_id: id,
                    filename: k.filename.clone(),
                });
            }
            rec.clear();
            if !encode_watched(enc, w, &mut rec) {
                continue;
            }
            let new_id = new_id.filter(|b| {
                ids.entry(b.filename.clone())
                    .or_default()
                    .insert(b.build_id)
            });
            emit(new_id, &rec)?;
            stats.watched_added += 1;
        }
        Ok(())
    }
}

/// Appends a watched record under the snapshot's trailer (its pid, tid and
/// real time); false when it would not fit a record.
fn encode_watched(enc: &Encoding, w: &Watched, rec: &mut Vec<u8>) -> bool {
    let e = enc.endian;
    let sid = crate::perf::SampleId {
        pid: w.pid,
        tid: w.tid,
        time: w.time,
        id: enc.id,
        ..Default::default()
    };
    let at = rec.len();
    RecordHeader {
        type_: w.record_type,
        misc: w.misc,
        size: 0,
    }
    .put(rec, e);
    rec.extend_from_slice(&w.body);
    enc.layout.write(rec, e, &sid);
    match u16::try_from(rec.len() - at) {
        Ok(size) => {
            rec[at + 6..at + 8].copy_from_slice(&e.u16_bytes(size));
            true
        }
        Err(_) => {
            rec.truncate(at);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::events::{encode_mmap2, Mmap2, Mmap2Id};
    use crate::perf::{SampleId, SampleIdLayout};

    /// A watched MMAP2 of a page of /lib/x.so at `addr` in `pid`, recorded
    /// at time 1.
    fn watched_map(pid: u32, addr: u64) -> Watched {
        watched_map_of(pid, addr, 0x1000, b"/lib/x.so", 1)
    }

    /// A watched MMAP2 of `name` over `addr..addr + len` in `pid`, recorded
    /// at `time` (the body as the ring gives it: no header, no trailer).
    fn watched_map_of(pid: u32, addr: u64, len: u64, name: &[u8], time: u64) -> Watched {
        let id = Mmap2Id::Inode {
            maj: 8,
            min: 1,
            ino: 42,
            ino_generation: 0,
        };
        watched_mmap2(pid, (addr, len, 5), name, id, time)
    }

    /// A watched MMAP2 of a page at `addr` in pid 7 of /lib/x.so with a
    /// build id, executable (`prot` 5) or not, recorded at `time`; and the
    /// scan's map of it.
    fn identified(addr: u64, prot: u32, time: u64) -> (Watched, ScanMap) {
        let id = BuildId::new(&[7; 20]).unwrap();
        let w = watched_mmap2(
            7,
            (addr, 0x1000, prot),
            b"/lib/x.so",
            Mmap2Id::BuildId(id),
            time,
        );
        let identity = map_identity(0, prot, 2, Some(&id), b"/lib/x.so").unwrap();
        let (start, end) = page(addr);
        (
            w,
            ScanMap {
                start,
                end,
                identity,
            },
        )
    }

    /// A watched MMAP2 over (addr, len, prot) with its name and id.
    fn watched_mmap2(
        pid: u32,
        (addr, len, prot): (u64, u64, u32),
        name: &[u8],
        id: Mmap2Id,
        time: u64,
    ) -> Watched {
        let e = Endian::NATIVE;
        let mut rec = Vec::new();
        let m = Mmap2 {
            misc: misc::USER,
            pid,
            tid: pid,
            addr,
            len,
            pgoff: 0,
            id,
            prot,
            flags: 2,
            filename: name,
        };
        encode_mmap2(
            &mut rec,
            e,
            &m,
            &SampleIdLayout::default(),
            &SampleId::default(),
        )
        .unwrap();
        let h = RecordHeader::parse(&rec, e).unwrap();
        Watched {
            record_type: types::MMAP2,
            misc: h.misc,
            body: rec[8..].to_vec(),
            pid,
            tid: pid,
            time,
        }
    }

    /// The range of the page at `addr`.
    fn page(addr: u64) -> (u64, u64) {
        (addr, addr + 0x1000)
    }

    /// The scan's map of the page at `addr`, with no identity.
    fn scanned(addr: u64) -> ScanMap {
        let (start, end) = page(addr);
        ScanMap {
            start,
            end,
            identity: 0,
        }
    }

    /// Runs `f` over `recs` (a `-p` selection, native byte order): how many
    /// records it added and how many maps the scan's superseded.
    fn added_and_superseded(f: &mut WatchFilter, recs: &[Watched]) -> (usize, usize) {
        let enc = Encoding {
            endian: Endian::NATIVE,
            layout: SampleIdLayout::default(),
            id: 0,
            forks: false,
            fill_tid: false,
        };
        let (mut ids, mut stats, mut n) = (BTreeMap::new(), Stats::default(), 0);
        f.add(recs, false, &enc, &mut ids, &mut stats, |_, _| {
            n += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        (n, stats.watched_superseded)
    }

    // A watched map the scan also wrote is dropped, a new one is added;
    // maps noted after a lookup are still found; processes outside the
    // selection are left out.
    #[test]
    fn watched_maps_deduplicated_against_the_scan() {
        let mut f = WatchFilter::default();
        f.note(7, vec![scanned(0x1000)], ReadTimes::at(10));
        let recs = [
            watched_map(7, 0x1000),
            watched_map(7, 0x2000),
            watched_map(9, 0x1000),
        ];
        assert_eq!(
            added_and_superseded(&mut f, &recs),
            (1, 1),
            "one added, one duplicate, pid 9 not selected"
        );
        f.note(9, vec![scanned(0x1000)], ReadTimes::at(10));
        assert_eq!(
            added_and_superseded(&mut f, &recs),
            (1, 2),
            "pid 9's map noted after a lookup"
        );
    }

    // A watched map of a place the scan wrote is superseded only when the
    // kernel recorded it before the scan read it; recorded after (an
    // mprotect back to executable), it is a new event and added.
    #[test]
    fn maps_recorded_after_the_read_are_new_events() {
        let mut f = WatchFilter::default();
        f.note(7, vec![scanned(0x1000), scanned(0x2000)], ReadTimes::at(10));
        let mut later = watched_map(7, 0x2000);
        later.time = 11;
        let recs = [watched_map(7, 0x1000), later];
        assert_eq!(added_and_superseded(&mut f, &recs), (1, 1));
        let mut at_end = watched_map(7, 0x2000);
        at_end.time = 10;
        assert_eq!(
            added_and_superseded(&mut f, &[at_end]),
            (0, 1),
            "recorded at the time taken before the read: the scan's"
        );
    }

    // Each map has the read time of its own run of VMAs, not the piece's:
    // a map recorded after the first run was read but before the second
    // is the scan's in the second run and a new event in the first.
    #[test]
    fn read_times_are_per_vma_not_per_piece() {
        let mut f = WatchFilter::default();
        let pages = (0..2 * ReadTimes::EVERY as u64).map(|i| scanned(0x1000 * (i + 1)));
        let mut times = ReadTimes::at(10);
        times.push(20);
        f.note(7, pages.collect(), times);
        let first = watched_map_of(7, 0x1000, 0x1000, b"/lib/a.so", 15);
        let second = watched_map_of(7, 0x1000 * 40, 0x1000, b"/lib/a.so", 15);
        assert_eq!(added_and_superseded(&mut f, &[first]), (1, 0));
        assert_eq!(added_and_superseded(&mut f, &[second]), (0, 1));
    }

    // A watched map recorded before the read that overlaps a map the scan
    // wrote is superseded by the scan's view, whatever its file (a library
    // the scan saw replaced: replayed after the scan's records it would
    // undo the replacement); one of a place the scan found empty is added.
    #[test]
    fn older_maps_under_the_scans_are_superseded() {
        let mut f = WatchFilter::default();
        f.note(
            7,
            vec![scanned(0x10000), scanned(0x20000)],
            ReadTimes::at(10),
        );
        let recs = [
            watched_map_of(7, 0x10000, 0x1000, b"/lib/b.so", 5),
            watched_map_of(7, 0x1f000, 0x2000, b"/lib/c.so", 6),
            watched_map_of(7, 0x30000, 0x1000, b"/lib/d.so", 7),
            watched_map_of(7, 0x0f000, 0x1000, b"/lib/e.so", 8),
        ];
        assert_eq!(
            added_and_superseded(&mut f, &recs),
            (2, 2),
            "b and c (overlapping) dropped; d and e (beside) added"
        );
    }

    // Maps read while a process changed may nest (the walk asks for the
    // map at or after an address): a watched map inside the outer one is
    // still found under it, past a nested one that ends before it.
    #[test]
    fn nested_scanned_maps_still_supersede() {
        let mut f = WatchFilter::default();
        let map = |start, end| ScanMap {
            start,
            end,
            identity: 0,
        };
        f.note(7, vec![map(0x1000, 0x9000)], ReadTimes::at(10));
        f.note(7, vec![map(0x2000, 0x3000)], ReadTimes::at(10));
        let inside = watched_map_of(7, 0x5000, 0x1000, b"/lib/b.so", 5);
        let beyond = watched_map_of(7, 0x9000, 0x1000, b"/lib/c.so", 5);
        assert_eq!(added_and_superseded(&mut f, &[inside, beyond]), (1, 1));
    }

    // A map recorded after the time taken before the read, identical to
    // the scan's there, may be the one the scan read: dropped. One that
    // differs (another build id, name or prot) is added, and so is an
    // identical one after it: the place changed and changed back.
    #[test]
    fn identical_maps_after_the_read_time_are_the_scans_until_touched() {
        let mut f = WatchFilter::default();
        let (same, map) = identified(0x1000, 5, 15);
        f.note(7, vec![map], ReadTimes::at(10));
        assert_eq!(
            added_and_superseded(&mut f, std::slice::from_ref(&same)),
            (0, 1)
        );
        let other = watched_map_of(7, 0x1000, 0x1000, b"/lib/x.so", 16);
        let (read_only, _) = identified(0x1000, 1, 17);
        let (again, _) = identified(0x1000, 5, 18);
        assert_eq!(
            added_and_superseded(&mut f, &[same, other, read_only, again]),
            (3, 1),
            "the first dropped; no build id, then read-only and back: added"
        );
        let mut f = WatchFilter::default();
        let (after, map) = identified(0x1000, 5, 21);
        let mut times = ReadTimes::at(10);
        times.end_at(20);
        f.note(7, vec![map], times);
        assert_eq!(
            added_and_superseded(&mut f, &[after]),
            (1, 0),
            "recorded after the read: a new event"
        );
        let mut f = WatchFilter::default();
        let (wide, _) = identified(0x1000, 5, 15);
        let (_, map) = identified(0x1000, 5, 0);
        let narrow = ScanMap { end: 0x1800, ..map };
        f.note(7, vec![narrow], ReadTimes::at(10));
        assert_eq!(
            added_and_superseded(&mut f, &[wide]),
            (1, 0),
            "another range"
        );
    }

    /// A filter following a drain progress of the test's own.
    fn following() -> (WatchFilter, Arc<Progress>) {
        let progress = Arc::new(Progress::default());
        let f = WatchFilter {
            progress: Some(Arc::clone(&progress)),
            ..WatchFilter::default()
        };
        (f, progress)
    }

    // Ranges wait until a drain begun after their piece was written has
    // completed, then stay only for pids the drains took maps of; a drain
    // already under way when the piece was written settles nothing.
    #[test]
    fn ranges_kept_only_for_pids_the_watch_mapped() {
        let (mut f, progress) = following();
        let under_way = progress.begin();
        f.note(7, vec![scanned(0x1000), scanned(0x2000)], ReadTimes::at(10));
        f.note(9, vec![scanned(0x1000)], ReadTimes::at(10));
        progress.complete(under_way, &mut HashSet::from([9]), false);
        f.note(11, vec![scanned(0x1000)], ReadTimes::at(10));
        assert_eq!(f.held_maps(), 4, "a drain begun before settles nothing");
        let next = progress.begin();
        progress.complete(next, &mut HashSet::from([9]), false);
        f.note(12, vec![], ReadTimes::at(10));
        assert_eq!(f.held_maps(), 1, "pid 9's map kept, 7's and 11's dropped");
        assert_eq!(f.seen, vec![(9, 0x1000, 0x2000, (10, u64::MAX), 0)]);
        // a cap that stopped the draining keeps every range
        f.note(13, vec![scanned(0x1000)], ReadTimes::at(10));
        let capped = progress.begin();
        progress.complete(capped, &mut HashSet::new(), true);
        f.note(14, vec![], ReadTimes::at(10));
        assert_eq!(f.held_maps(), 2, "pid 13's map kept under the cap");
    }

    // Ranges still waiting when the watched records are added are settled
    // by the watch's last drain: a map of a pid it alone took is still
    // superseded, and the ranges of pids with no maps taken are dropped.
    #[test]
    fn waiting_ranges_are_settled_by_the_last_drain() {
        let (mut f, progress) = following();
        f.note(7, vec![scanned(0x1000)], ReadTimes::at(10));
        f.note(8, vec![scanned(0x1000)], ReadTimes::at(10));
        assert_eq!(f.held_maps(), 2, "no drain yet: both wait");
        let last = progress.begin();
        progress.complete(last, &mut HashSet::from([7]), false);
        let recs = [watched_map(7, 0x1000), watched_map(7, 0x3000)];
        assert_eq!(added_and_superseded(&mut f, &recs), (1, 1));
        assert_eq!(f.held_maps(), 1, "pid 8 mapped nothing: its range dropped");
    }
}
