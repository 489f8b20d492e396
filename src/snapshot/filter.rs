//! Which records of a watch are added after a snapshot's, and how: the
//! rules that keep a change from being lost and a map from being written
//! twice ([`WatchFilter`]), each record encoded under the snapshot's
//! trailer.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::encode::Encoding;
use super::identity::MapIdentity;
use super::ids::WatchedIds;
use super::seen::{ScanMaps, ScanRead};
use super::stats::Stats;
use crate::bytes::Endian;
use crate::model::BuildId;
use crate::perf::consts::{misc, types};
use crate::perf::events::{parse_fork, parse_map};
use crate::perf::{BuildIdEntry, RecordHeader};
use crate::proc::watch::{Progress, Watched};

/// What the scan wrote, for choosing the watched records to add: where its
/// maps lie, what each walk saw and when, and its pids.
///
/// The scan's records stand for each process as it was read, at time 0,
/// before every watched record, which perf replays after them in time
/// order, each over what was there. So the watched records are taken in
/// time order, and a map is dropped only where that changes nothing perf
/// ends with:
/// - **Seen after it.** A walk asks for the map at or after the end of the
///   one before, so each map the scan wrote shows its place and the gap
///   before it as they were when it was read ([`ScanMaps`]). A watched
///   map whose whole range those places show, all read after it was
///   recorded for sure ([`ReadTimes`](crate::model::ReadTimes): times
///   taken before each run of 32 VMAs), is in the scan's view or was
///   undone before it: superseded (the same map twice, or one the scan saw
///   replaced, which replayed would undo the replacement).
/// - **Maybe the scan's own.** One recorded while the one map there was
///   being read (between the times around its run) is dropped when it is
///   identical to it ([`MapIdentity`]: same place, offset, prot, name
///   and file, by build id or device and inode, each side's taken in both
///   forms where it has them): replaying it would change nothing.
/// - **Anything else** is added: one recorded after the read (an
///   `mprotect` back to executable, a map made again), one only partly
///   seen after it, one of a place the scan never showed; and so is every
///   later one over a place an added one covers, so the replay ends as the
///   process did.
///
/// So a change is never lost; a map made while the scan read near it is
/// written twice only where the two records cannot be compared (a name
/// the kernel writes otherwise than /proc shows it, beyond those
/// [`MapIdentity`] knows) or it replaced another there in that moment (the
/// older is added, then it over it; the text fallback's moment is its
/// whole walk).
///
/// A watched FORK of a process the scan read after that fork is dropped
/// too: replayed after the scan's records, it would give the child its
/// parent's maps again over what the scan read (an exec'd child would end
/// with its parent's image). So is every record about that pid before the
/// fork (its maps, COMM, EXIT, and the FORK that made it, not those it
/// wrote for its children): an earlier process's, the pid reused, which
/// would land on the process the scan read.
#[derive(Debug, Default)]
pub struct WatchFilter {
    /// The scan's maps kept (of the pids the drains saw mapping).
    seen: ScanMaps,
    /// Places covered by the watched maps added so far: a later one over
    /// them is added too (see [`Dirty`]).
    dirty: Dirty,
    /// The pids written, each with the time before its maps were first
    /// read (0 for the children forked from them meanwhile).
    pids: HashMap<u32, u64>,
    /// The watch's drains, when followed: a piece's maps wait in `pending`
    /// until a drain begun after it was written has completed, then stay
    /// only if the watch took a map of its pid. So the maps held are those
    /// of processes that mapped during the scan, not one per map of the
    /// host.
    progress: Option<Arc<Progress>>,
    pending: VecDeque<Pending>,
    /// Bytes of records in `pending`.
    pending_bytes: usize,
    /// The drains begun when the drainer was last nudged.
    nudged_at: Option<u64>,
    /// The build ids of the watched maps' files.
    ids: WatchedIds,
}

/// A written piece's records waiting for the drains.
#[derive(Debug)]
struct Pending {
    /// The drains begun when the writer got the piece.
    mark: u64,
    pid: u32,
    records: Vec<u8>,
    read: ScanRead,
}

/// Bytes of written records waiting for the drains past which the oldest
/// are kept without waiting (a drainer far behind must not make the filter
/// hold the output).
const PENDING_BYTES: usize = 8 << 20;

/// Bytes of written records waiting for the drains past which the drainer
/// is asked for a drain at once: on a busy machine its period can stretch
/// to tens of milliseconds, megabytes of a `-d` scan.
const NUDGE_BYTES: usize = 256 << 10;

/// Places (pid, start..end) as disjoint ranges, merged as they are added.
#[derive(Debug, Default)]
struct Dirty(BTreeMap<(u32, u64), u64>);

impl Dirty {
    /// Whether some range of `pid` overlaps `start..end`.
    fn overlaps(&self, pid: u32, start: u64, end: u64) -> bool {
        let before = self.0.range(..(pid, end)).next_back();
        before.is_some_and(|(&(p, _), &e)| p == pid && e > start)
    }

    /// Adds `start..end` of `pid`, merged with the ranges it overlaps.
    fn add(&mut self, pid: u32, mut start: u64, mut end: u64) {
        while let Some((&(p, s), &e)) = self.0.range(..=(pid, end)).next_back() {
            if p != pid || e < start {
                break;
            }
            self.0.remove(&(p, s));
            (start, end) = (start.min(s), end.max(e));
        }
        self.0.insert((pid, start), end);
    }
}

impl WatchFilter {
    /// A filter following the drains of `progress` (see `progress` below),
    /// or keeping every map noted when None; the watched maps get their
    /// files' build ids when `build_ids`.
    pub fn following(progress: Option<Arc<Progress>>, build_ids: bool) -> WatchFilter {
        WatchFilter {
            progress,
            ids: WatchedIds::new(build_ids),
            ..WatchFilter::default()
        }
    }

    /// Notes a process (or a piece of one) the scan wrote: with `read`
    /// (a watched scan: when its maps were read, and the files of those
    /// written by build id), the maps are read from its `records` (this
    /// machine's byte order, as a watched snapshot's are) once the drains
    /// tell they are needed.
    pub fn note(&mut self, pid: u32, records: Vec<u8>, read: Option<ScanRead>) {
        let Some(read) = read else {
            self.pids.entry(pid).or_insert(0);
            return;
        };
        let first_read = read.times().bounds(0).0;
        self.pids.entry(pid).or_insert(first_read);
        let Some(progress) = self.progress.clone() else {
            self.seen.keep(pid, &records, &read);
            return;
        };
        self.settle();
        // marked after the process was read (it reached the writer)
        let mark = progress.lock().mark();
        if records.is_empty() {
            return;
        }
        self.pending_bytes += records.len();
        self.pending.push_back(Pending {
            mark,
            pid,
            records,
            read,
        });
        // once per drain begun: a drain begun after this settles them all
        if self.pending_bytes > NUDGE_BYTES && self.nudged_at != Some(mark) {
            progress.nudge();
            self.nudged_at = Some(mark);
        }
        while self.pending_bytes > PENDING_BYTES {
            let p = self.pending.pop_front().expect("bytes are pending");
            self.pending_bytes -= p.records.len();
            self.seen.keep(p.pid, &p.records, &p.read);
        }
    }

    /// Keeps or drops the waiting maps the drains have settled: kept for
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
            self.pending_bytes -= p.records.len();
            if drains.mapped(p.pid) {
                self.seen.keep(p.pid, &p.records, &p.read);
            }
        }
    }

    /// Whether the scan's view supersedes a watched map of `pid` over
    /// `start..end` recorded at `time` with `identity`, the
    /// watched maps before it taken (see [`WatchFilter`]). If not, its
    /// place is marked: it is added.
    fn superseded(
        &mut self,
        pid: u32,
        start: u64,
        end: u64,
        time: u64,
        identity: &MapIdentity,
    ) -> bool {
        let seen = |s: &mut ScanMaps| s.over(pid, (start, end), time, identity);
        if !self.dirty.overlaps(pid, start, end) && seen(&mut self.seen) {
            return true;
        }
        self.dirty.add(pid, start, end);
        false
    }

    /// Maps kept, and pieces waiting.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        (self.seen.seen.len(), self.pending.len())
    }

    /// For each pid the scan read a process of that was forked during the
    /// watch, before the read: when (the last such fork). Records of the
    /// pid before then are of a process that ended, the pid reused.
    fn born(&self, recs: &[Watched], e: Endian) -> HashMap<u32, u64> {
        let mut born = HashMap::new();
        for w in recs.iter().filter(|w| w.record_type == types::FORK) {
            let Some(f) = parse_fork(&w.body, e) else {
                continue;
            };
            let first_read = self.pids.get(&f.pid).copied().unwrap_or(0);
            if f.pid == f.tid && f.pid != f.ppid && w.time <= first_read {
                let at = born.entry(f.pid).or_insert(w.time);
                *at = (*at).max(w.time);
            }
        }
        born
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
        let born = self.born(recs, e);
        let mut rec = Vec::new();
        for w in recs {
            // an earlier process of a pid the scan read a newer one of (a
            // FORK is about its child; the parent writes it)
            let subject = match w.record_type {
                types::FORK => parse_fork(&w.body, e).map_or(w.pid, |f| f.pid),
                _ => w.pid,
            };
            if born.get(&subject).is_some_and(|&b| w.time < b) {
                stats.watched_superseded += 1;
                continue;
            }
            let selected = |pids: &HashMap<u32, u64>, pid: u32| {
                pid != u32::MAX && pid != 0 && pid != me && (all || pids.contains_key(&pid))
            };
            match w.record_type {
                types::FORK => {
                    let Some(f) = parse_fork(&w.body, e) else {
                        continue;
                    };
                    // a new process the scan read after it was forked
                    let first_read = self.pids.get(&f.pid).copied().unwrap_or(0);
                    if f.pid == f.tid && f.pid != f.ppid && w.time <= first_read {
                        stats.watched_superseded += 1;
                        continue;
                    }
                    if selected(&self.pids, f.ppid) {
                        self.pids.entry(f.pid).or_insert(0);
                    }
                }
                types::MMAP2 | types::COMM | types::EXIT => {}
                _ => continue,
            }
            if !selected(&self.pids, w.pid) {
                continue;
            }
            let mut new_id = None;
            let (mut misc, mut body) = (w.misc, std::borrow::Cow::Borrowed(&w.body[..]));
            if w.record_type == types::MMAP2 {
                let h = |misc| RecordHeader {
                    type_: types::MMAP2,
                    misc,
                    size: 0,
                };
                // as the kernel wrote it, in inode form
                let Some(kernel) = parse_map(&h(misc), &body, e) else {
                    continue;
                };
                // its file's id, read now (the watch asks the kernel for none)
                self.ids.stamp(&mut misc, &mut body);
                let Some(m) = parse_map(&h(misc), &body, e) else {
                    continue;
                };
                let k = &m.key;
                let end = k.addr.saturating_add(k.len);
                let identity = MapIdentity::watched(&kernel, &m);
                if self.superseded(k.pid, k.addr, end, w.time, &identity) {
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
            if !encode_watched(enc, w, (misc, &body), &mut rec) {
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
fn encode_watched(
    enc: &Encoding,
    w: &Watched,
    (misc, body): (u16, &[u8]),
    rec: &mut Vec<u8>,
) -> bool {
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
        misc,
        size: 0,
    }
    .put(rec, e);
    rec.extend_from_slice(body);
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
    use crate::model::ReadTimes;
    use crate::perf::events::{encode_mmap2, Mmap2, Mmap2Id};
    use crate::perf::{SampleId, SampleIdLayout};
    use std::collections::HashSet;

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
    /// scan's record of it.
    fn identified(addr: u64, prot: u32, time: u64) -> (Watched, Vec<u8>) {
        identified_over((addr, 0x1000, prot), time)
    }

    /// [`identified`] over (addr, len, prot).
    fn identified_over(place: (u64, u64, u32), time: u64) -> (Watched, Vec<u8>) {
        let id = Mmap2Id::BuildId(BuildId::new(&[7; 20]).unwrap());
        let w = watched_mmap2(7, place, b"/lib/x.so", id, time);
        let mut rec = Vec::new();
        put_mmap2(&mut rec, place, b"/lib/x.so", id);
        (w, rec)
    }

    /// A watched FORK of process `pid` from `ppid`, recorded at `time`.
    fn watched_fork(pid: u32, ppid: u32, time: u64) -> Watched {
        let e = Endian::NATIVE;
        let (mut rec, layout) = (Vec::new(), SampleIdLayout::default());
        let f = crate::perf::events::Fork {
            pid,
            ppid,
            tid: pid,
            ptid: ppid,
            time,
        };
        crate::perf::events::encode_fork(&mut rec, e, &f, &layout, &SampleId::default()).unwrap();
        Watched {
            record_type: types::FORK,
            misc: 0,
            body: rec[8..].to_vec(),
            pid,
            tid: pid,
            time,
        }
    }

    /// Appends an MMAP2 of pid 7 over (addr, len, prot) with its name and
    /// id, as the scan writes it (no trailer fields set).
    fn put_mmap2(rec: &mut Vec<u8>, (addr, len, prot): (u64, u64, u32), name: &[u8], id: Mmap2Id) {
        let m = Mmap2 {
            misc: misc::USER,
            pid: 7,
            tid: 7,
            addr,
            len,
            pgoff: 0,
            id,
            prot,
            flags: 2,
            filename: name,
        };
        let (layout, sid) = (SampleIdLayout::default(), SampleId::default());
        encode_mmap2(rec, Endian::NATIVE, &m, &layout, &sid).unwrap();
    }

    /// A watched MMAP2 over (addr, len, prot) with its name and id.
    fn watched_mmap2(
        pid: u32,
        (addr, len, prot): (u64, u64, u32),
        name: &[u8],
        id: Mmap2Id,
        time: u64,
    ) -> Watched {
        let mut rec = Vec::new();
        put_mmap2(&mut rec, (addr, len, prot), name, id);
        let h = RecordHeader::parse(&rec, Endian::NATIVE).unwrap();
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

    /// The records of the maps one walk wrote over `ranges`, in order,
    /// with no build id (no identity).
    fn scan(ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut rec = Vec::new();
        let id = Mmap2Id::Inode {
            maj: 8,
            min: 1,
            ino: 42,
            ino_generation: 0,
        };
        for &(start, end) in ranges {
            put_mmap2(&mut rec, (start, end - start, 5), b"/lib/x.so", id);
        }
        rec
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
        f.note(7, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
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
        f.note(9, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
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
        // read at 10, over by 10: identical maps after it are not the scan's
        let mut read = ReadTimes::at(10);
        read.end_at(10);
        let mut f = WatchFilter::default();
        let pages = [page(0x1000), page(0x2000)];
        f.note(7, scan(&pages), Some(read.clone().into()));
        let mut later = watched_map(7, 0x2000);
        later.time = 11;
        let recs = [watched_map(7, 0x1000), later];
        assert_eq!(added_and_superseded(&mut f, &recs), (1, 1));
        let mut f = WatchFilter::default();
        f.note(7, scan(&pages), Some(read.into()));
        let mut at_start = watched_map(7, 0x2000);
        at_start.time = 10;
        assert_eq!(
            added_and_superseded(&mut f, &[at_start]),
            (0, 1),
            "recorded at the time taken before the read: the scan's"
        );
    }

    // Each map has the read time of its own run of VMAs, not the piece's:
    // another map recorded after the first run began but before the second
    // is the scan's view in the second run and a new event in the first.
    #[test]
    fn read_times_are_per_vma_not_per_piece() {
        let mut f = WatchFilter::default();
        let pages: Vec<_> = (0..2 * ReadTimes::EVERY as u64)
            .map(|i| page(0x1000 * (i + 1)))
            .collect();
        let mut times = ReadTimes::at(10);
        times.push(20);
        f.note(7, scan(&pages), Some(times.into()));
        let first = watched_map_of(7, 0x1000, 0x1000, b"/lib/ab.so", 15);
        let second = watched_map_of(7, 0x1000 * 40, 0x1000, b"/lib/ab.so", 15);
        assert_eq!(added_and_superseded(&mut f, &[first]), (1, 0));
        assert_eq!(added_and_superseded(&mut f, &[second]), (0, 1));
    }

    // A watched map recorded before the read whose place the scan's maps
    // and the gaps before them showed is superseded by the scan's view,
    // whatever its file (a library the scan saw replaced: replayed after
    // the scan's records it would undo the replacement); one past the
    // walk's last map, or only partly shown, is added.
    #[test]
    fn older_maps_under_the_scans_are_superseded() {
        let mut f = WatchFilter::default();
        let ranges = [page(0x10000), page(0x20000)];
        f.note(7, scan(&ranges), Some(ReadTimes::at(10).into()));
        let recs = [
            watched_map_of(7, 0x10000, 0x1000, b"/lib/b.so", 5),
            watched_map_of(7, 0x1f000, 0x2000, b"/lib/c.so", 6),
            watched_map_of(7, 0x30000, 0x1000, b"/lib/d.so", 7),
            watched_map_of(7, 0x0f000, 0x1000, b"/lib/e.so", 8),
        ];
        assert_eq!(
            added_and_superseded(&mut f, &recs),
            (1, 3),
            "b, c (over the gap and a map) and e (in the first gap) dropped; d added"
        );
        let mut f = WatchFilter::default();
        let times = ReadTimes::at(10).from_addr(0x20000);
        f.note(7, scan(&[page(0x20000)]), Some(times.into()));
        let c = watched_map_of(7, 0x1f000, 0x2000, b"/lib/c.so", 6);
        assert_eq!(added_and_superseded(&mut f, &[c]), (1, 0), "half shown");
    }

    // A watched map over two of the scan's maps, one read before it and one
    // after, is added (the first would be stale), and so is a later one
    // under it that the second map's read showed: replayed after the first,
    // it puts back what the scan saw there. A map made ahead of the walk
    // and written by it, then one identical to the first map there again,
    // within one run: both added (the second map overlaps the first's place,
    // so the first's identity alone does not tell its place).
    #[test]
    fn a_map_over_places_read_before_and_after_it_is_added_with_the_rest() {
        let mut f = WatchFilter::default();
        let first = ReadTimes::at(10);
        f.note(7, scan(&[(0x1000, 0x2000)]), Some(first.into()));
        let second = ReadTimes::at(20).from_addr(0x2000);
        f.note(7, scan(&[(0x2000, 0x3000)]), Some(second.into()));
        let over = watched_map_of(7, 0x1000, 0x2000, b"/lib/f.so", 15);
        let under = watched_map_of(7, 0x2000, 0x1000, b"/lib/g.so", 16);
        assert_eq!(added_and_superseded(&mut f, &[over, under]), (2, 0));

        let mut f = WatchFilter::default();
        let (a_again, a) = identified_over((0x1000, 0x2000, 5), 16);
        let (b_over_a, b) = identified_over((0x2000, 0x2000, 5), 15);
        f.note(7, [a, b].concat(), Some(ReadTimes::at(10).into()));
        assert_eq!(added_and_superseded(&mut f, &[b_over_a, a_again]), (2, 0));
    }

    // A map in the gap before one of the scan's maps, recorded before that
    // map was read, was gone when the walk passed there: superseded; one
    // recorded after is added.
    #[test]
    fn maps_in_a_gap_the_walk_showed_are_superseded() {
        let mut f = WatchFilter::default();
        f.note(7, scan(&[page(0x10000)]), Some(ReadTimes::at(10).into()));
        let before = watched_map_of(7, 0x5000, 0x1000, b"/lib/g.so", 9);
        let after = watched_map_of(7, 0x6000, 0x1000, b"/lib/g.so", 12);
        assert_eq!(added_and_superseded(&mut f, &[before, after]), (1, 1));
    }

    // A watched FORK of a process the scan read after it was forked is
    // dropped (replayed, it would give the child its parent's maps over
    // the scan's); one after the read, or of a process the scan did not
    // write, is added.
    #[test]
    fn forks_of_processes_read_after_them_are_superseded() {
        let mut f = WatchFilter::default();
        f.note(7, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
        f.note(8, Vec::new(), Some(ReadTimes::at(20).into()));
        let recs = [
            watched_fork(7, 8, 9),
            watched_fork(8, 1, 21),
            watched_fork(9, 8, 22),
        ];
        assert_eq!(added_and_superseded(&mut f, &recs), (2, 1));
    }

    // Records of a pid before a fork of a new process with it that the
    // scan read after (the pid reused) are an earlier process's: dropped,
    // the fork too; the new process's after it follow the usual rules.
    #[test]
    fn records_of_a_reused_pid_before_its_fork_are_dropped() {
        let mut f = WatchFilter::default();
        f.note(7, scan(&[page(0x1000)]), Some(ReadTimes::at(20).into()));
        let mut exit = watched_fork(7, 1, 7);
        exit.record_type = types::EXIT;
        let recs = [
            watched_map_of(7, 0x50000, 0x1000, b"/lib/old.so", 6),
            exit,
            watched_fork(7, 1, 8),
            watched_map_of(7, 0x60000, 0x1000, b"/lib/new.so", 9),
        ];
        assert_eq!(added_and_superseded(&mut f, &recs), (1, 3));
        // the earlier process's fork of a child of its own is kept
        let mut f = WatchFilter {
            pids: HashMap::from([(7, 20)]),
            ..WatchFilter::default()
        };
        let (mut child, new) = (watched_fork(13, 7, 5), watched_fork(7, 1, 8));
        child.pid = 7;
        assert_eq!(added_and_superseded(&mut f, &[child, new]), (1, 1));
    }

    // Places merge as they are added; a range overlaps only what it shares
    // with one, and other pids' are apart.
    #[test]
    fn dirty_places_merge() {
        let mut d = Dirty::default();
        d.add(7, 0x1000, 0x2000);
        d.add(7, 0x3000, 0x4000);
        d.add(7, 0x1800, 0x3000);
        d.add(8, 0x0, 0x10000);
        assert_eq!(d.0.len(), 2, "{d:?}");
        assert!(d.overlaps(7, 0x3fff, 0x5000) && d.overlaps(7, 0, 0x1001));
        assert!(!d.overlaps(7, 0x4000, 0x5000) && !d.overlaps(7, 0, 0x1000));
        assert!(!d.overlaps(9, 0, u64::MAX) && !d.overlaps(6, 0, u64::MAX));
    }

    // Maps read while a process changed may nest (the walk asks for the
    // map at or after an address): a watched map inside the outer one is
    // still found under it, past a nested one that ends before it.
    #[test]
    fn nested_scanned_maps_still_supersede() {
        let mut f = WatchFilter::default();
        f.note(7, scan(&[(0x1000, 0x9000)]), Some(ReadTimes::at(10).into()));
        f.note(7, scan(&[(0x2000, 0x3000)]), Some(ReadTimes::at(10).into()));
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
        f.note(7, map, Some(ReadTimes::at(10).into()));
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
        f.note(7, map, Some(times.into()));
        assert_eq!(
            added_and_superseded(&mut f, &[after]),
            (1, 0),
            "recorded after the read: a new event"
        );
        let mut f = WatchFilter::default();
        let (wide, _) = identified(0x1000, 5, 15);
        let (_, narrow) = identified_over((0x1000, 0x800, 5), 0);
        f.note(7, narrow, Some(ReadTimes::at(10).into()));
        assert_eq!(
            added_and_superseded(&mut f, &[wide]),
            (1, 0),
            "another range"
        );
    }

    // With no build id on either side, a map recorded while the scan read
    // the one map there is the scan's when identical by device and inode (a
    // file with no id or a long one, `--no-buildid`), or for anonymous
    // memory by prot and name, whatever page offset the kernel recorded:
    // dropped. Another inode or prot there, or one recorded after the
    // read, is added.
    #[test]
    fn maps_without_build_ids_are_the_scans_by_inode() {
        let inode = |ino| Mmap2Id::Inode {
            maj: 8,
            min: 1,
            ino,
            ino_generation: 3,
        };
        let anon = Mmap2Id::Inode {
            maj: 0,
            min: 0,
            ino: 0,
            ino_generation: 0,
        };
        let mut records = Vec::new();
        put_mmap2(&mut records, (0x1000, 0x1000, 5), b"/lib/x.so", inode(42));
        put_mmap2(&mut records, (0x4000, 0x2000, 3), b"//anon", anon);
        let mut read = ReadTimes::at(10);
        read.end_at(20);
        let watched = |(addr, len, prot), name: &[u8], id, time| {
            let mut w = watched_mmap2(7, (addr, len, prot), name, id, time);
            w.body[24..32].copy_from_slice(&(addr * u64::from(id == anon)).to_ne_bytes());
            w
        };
        let mut f = WatchFilter::default();
        f.note(7, records.clone(), Some(read.clone().into()));
        let recs = [
            watched((0x1000, 0x1000, 5), b"/lib/x.so", inode(42), 15),
            watched((0x4000, 0x2000, 3), b"//anon", anon, 15),
        ];
        assert_eq!(added_and_superseded(&mut f, &recs), (0, 2));
        for (w, what) in [
            (
                watched((0x1000, 0x1000, 5), b"/lib/x.so", inode(43), 15),
                "inode",
            ),
            (watched((0x4000, 0x2000, 1), b"//anon", anon, 15), "prot"),
            (watched((0x4000, 0x2000, 3), b"//anon", anon, 21), "after"),
        ] {
            let mut f = WatchFilter::default();
            f.note(7, records.clone(), Some(read.clone().into()));
            assert_eq!(added_and_superseded(&mut f, &[w]), (1, 0), "{what}");
        }
    }

    // A map the scan wrote by build id is known by its device and inode
    // too (`ScanRead`): the watched map of it whose id could not be read
    // after the scan (left in inode form; here no id is read at all) is
    // the scan's, dropped. Its record alone (times only) has no inode to
    // compare; another inode there is another file: both added.
    #[test]
    fn maps_written_by_build_id_are_the_scans_by_inode_too() {
        let mut p = crate::model::Process::empty(7);
        p.vmas.push(crate::model::Vma {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            perms: crate::model::Perms::from_prot_flags(5, 2),
            dev_major: 8,
            dev_minor: 1,
            inode: 42,
            name: (&b"/lib/x.so"[..]).into(),
            build_id: BuildId::new(&[7; 20]),
        });
        p.read_times = ReadTimes::at(10);
        let mut records = Vec::new();
        let enc = crate::snapshot::snapshot_encoding(Endian::NATIVE, false);
        crate::snapshot::encode_part(&p, crate::model::Part::WHOLE, &enc, &mut records).unwrap();
        let unread = watched_map_of(7, 0x1000, 0x1000, b"/lib/x.so", 15);
        let mut other = unread.clone();
        other.body[40..48].copy_from_slice(&43u64.to_ne_bytes());
        for (read, w, want) in [
            (ScanRead::of(&p), &unread, (0, 1)),
            (p.read_times.clone().into(), &unread, (1, 0)),
            (ScanRead::of(&p), &other, (1, 0)),
        ] {
            let mut f = WatchFilter::following(None, false);
            f.note(7, records.clone(), Some(read));
            assert_eq!(added_and_superseded(&mut f, std::slice::from_ref(w)), want);
        }
    }

    // Anonymous memory named after it was mapped (`[anon:NAME]` as the
    // scan reads it) is the unnamed `//anon` the kernel recorded at mmap
    // time, whatever page offset it recorded: dropped, written once, the
    // scan's name. Another prot there is added.
    #[test]
    fn named_anonymous_memory_is_the_scans() {
        let anon = Mmap2Id::Inode {
            maj: 0,
            min: 0,
            ino: 0,
            ino_generation: 0,
        };
        let mut records = Vec::new();
        put_mmap2(&mut records, (0x4000, 0x2000, 5), b"[anon:jit code]", anon);
        let watched = |prot| {
            let mut w = watched_mmap2(7, (0x4000, 0x2000, prot), b"//anon", anon, 15);
            w.body[24..32].copy_from_slice(&4u64.to_ne_bytes());
            w
        };
        for (prot, want) in [(5, (0, 1)), (7, (1, 0))] {
            let mut f = WatchFilter::default();
            f.note(7, records.clone(), Some(ReadTimes::at(10).into()));
            assert_eq!(added_and_superseded(&mut f, &[watched(prot)]), want);
        }
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
        f.note(
            7,
            scan(&[page(0x1000), page(0x2000)]),
            Some(ReadTimes::at(10).into()),
        );
        f.note(9, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
        progress.complete(under_way, &mut HashSet::from([9]), false);
        f.note(11, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
        assert_eq!(f.held(), (0, 3), "a drain begun before settles nothing");
        let next = progress.begin();
        progress.complete(next, &mut HashSet::from([9]), false);
        f.note(12, Vec::new(), Some(ReadTimes::at(10).into()));
        assert_eq!(f.held(), (1, 0), "pid 9's map kept, 7's and 11's dropped");
        let kept = (f.seen.seen.iter()).map(|m| (m.pid, m.start, m.end, m.read));
        assert_eq!(
            kept.collect::<Vec<_>>(),
            [(9, 0x1000, 0x2000, (10, u64::MAX))]
        );
        // a cap that stopped the draining keeps every range
        f.note(13, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
        let capped = progress.begin();
        progress.complete(capped, &mut HashSet::new(), true);
        f.note(14, Vec::new(), Some(ReadTimes::at(10).into()));
        assert_eq!(f.held(), (2, 0), "pid 13's map kept under the cap");
    }

    // Records waiting past NUDGE_BYTES ask the drainer for a drain at once.
    #[test]
    fn waiting_records_nudge_the_drainer() {
        let (mut f, progress) = following();
        let pages: Vec<_> = (0..4000u64).map(|i| page(0x1000 * (i + 1))).collect();
        let records = scan(&pages);
        assert!(records.len() > NUDGE_BYTES);
        f.note(7, records, Some(ReadTimes::at(10).into()));
        let t = std::time::Instant::now();
        assert!(!progress.wait(std::time::Duration::from_secs(30)));
        assert!(t.elapsed().as_secs() < 10, "not nudged: {:?}", t.elapsed());
    }

    // Records waiting past PENDING_BYTES are kept at once, the oldest
    // first: a drainer far behind does not make the filter hold the output.
    #[test]
    fn pending_records_are_bounded() {
        let (mut f, _progress) = following();
        let pages: Vec<_> = (0..60_000u64).map(|i| page(0x1000 * (i + 1))).collect();
        let records = scan(&pages);
        assert!(records.len() < PENDING_BYTES);
        f.note(7, records.clone(), Some(ReadTimes::at(10).into()));
        assert_eq!(f.held(), (0, 1), "under the bound: waiting");
        f.note(8, records, Some(ReadTimes::at(10).into()));
        assert_eq!(f.held(), (60_000, 1), "the oldest kept");
        assert!(f.pending_bytes <= PENDING_BYTES);
    }

    // Ranges still waiting when the watched records are added are settled
    // by the watch's last drain: a map of a pid it alone took is still
    // superseded, and the ranges of pids with no maps taken are dropped.
    #[test]
    fn waiting_ranges_are_settled_by_the_last_drain() {
        let (mut f, progress) = following();
        f.note(7, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
        f.note(8, scan(&[page(0x1000)]), Some(ReadTimes::at(10).into()));
        assert_eq!(f.held(), (0, 2), "no drain yet: both wait");
        let last = progress.begin();
        progress.complete(last, &mut HashSet::from([7]), false);
        let recs = [watched_map(7, 0x1000), watched_map(7, 0x3000)];
        assert_eq!(added_and_superseded(&mut f, &recs), (1, 1));
        assert_eq!(f.held(), (1, 0), "pid 8 mapped nothing: its range dropped");
    }
}
