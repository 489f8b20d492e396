//! Where the file's order gave a process other maps or comms than perf's
//! time order gives it. perf writes its per-CPU buffers one after another
//! each round, so records made on one CPU can be read before those made
//! earlier on another: a FORK before a change to its parent's maps (a map,
//! an exec) made earlier, and the child then lacks it; or after one made
//! later, and the child has it. Its maps, and its descendants', may then
//! differ from perf's in that change's range (everywhere, for an exec).
//! Likewise a process's samples (any thread's) and changes to its maps (a
//! thread's dlopen() read after another thread's later samples in the
//! library): its maps may differ in that range. And a thread's COMMs (a
//! leader's name its process; an exec's too) and its samples or the FORKs
//! it makes (the child takes its comm), or a FORK and the samples of the
//! thread it makes when that is named otherwise than its process: comms
//! may then differ, whatever the frames. Only records read within two
//! rounds of each other are compared: by then perf has read every record
//! made before them (its own rule for flushing), and it takes a later one
//! as it comes. The work is linear in the records (crafted inversions made
//! it quadratic): a sample walks only the changes its id's samples were not
//! found on the other side of yet, each once; a FORK the changes to maps
//! only, a thread's FORK or COMM asks only whether one comm or FORK came
//! later; every other step makes an entry counted against the bound. Pure.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};

use foldhash::HashMap;

/// Most FORKs, changes, ranges and sampled ids followed at once: past it,
/// every process's maps may differ.
const MAX_ENTRIES: usize = 1 << 20;

/// Records read, by (time, order read): what each was, and the
/// FINISHED_ROUNDs seen before it.
type ByTime<T> = BTreeMap<(u64, u64), (T, u64)>;

/// A change to a process's maps over a range, or to a thread's comm (the
/// leader's: its process's).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Maps(Range<u64>),
    Comm,
}

/// The latest time of an id's samples read this round and the round
/// before (0: none).
#[derive(Debug, Clone, Copy)]
struct Seen {
    now: u64,
    before: u64,
}

impl Seen {
    fn latest(self) -> u64 {
        self.now.max(self.before)
    }
}

/// What was read of a pid or tid in the last two rounds (its samples
/// apart: most ids have only those).
#[derive(Debug, Default)]
struct Recent {
    /// A process's FORKs: the children.
    forks: ByTime<u32>,
    /// A thread's FORKs (processes' and threads'): they take its comm.
    spawns: ByTime<()>,
    /// Changes to a process's maps.
    maps: ByTime<Range<u64>>,
    /// Changes to a thread's comm.
    comms: ByTime<()>,
    /// The keys of those of `maps` and `comms` that no sample of the id
    /// itself was found on the other side of yet: one found leaves, so no
    /// later sample walks it again.
    unfound: ByTime<()>,
}

impl Recent {
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        self.forks.len() + self.spawns.len() + self.maps.len() + self.comms.len()
    }
}

/// Those of `by_time` made after `time`, each counted in `steps`.
fn after<'a, T>(
    by_time: &'a ByTime<T>,
    time: u64,
    steps: &'a mut u64,
) -> impl Iterator<Item = &'a T> {
    let from = Bound::Excluded((time, u64::MAX));
    let later = by_time.range((from, Bound::Unbounded));
    later.map(move |(_, v)| {
        *steps += 1;
        &v.0
    })
}

/// The records read, and where processes' maps or comms may differ.
#[derive(Debug, Default)]
pub(super) struct Inversions {
    /// By pid (forks, maps) or tid (spawns, comms): a leader's are its
    /// process's.
    recent: HashMap<u32, Recent>,
    /// By pid (a process's samples: all its threads') or tid (a thread's).
    seen: HashMap<u32, Seen>,
    /// Per process: ranges its maps may differ in from perf's.
    differ: HashMap<u32, Vec<Range<u64>>>,
    /// Some comm may differ from perf's.
    relabel: bool,
    /// The last sample's process and thread, and the latest time of the
    /// samples of theirs read since (nothing else read since): not noted
    /// in `seen` yet.
    run: Option<(u32, u32, u64)>,
    rounds: u64,
    /// FORKs and changes read so far.
    read: u64,
    entries: usize,
    /// Too many to follow: every process's maps may differ.
    overflow: bool,
    /// Entries walked and entries made so far: linear in the records (the
    /// tests' measure of the work).
    #[cfg_attr(not(test), allow(dead_code))]
    steps: u64,
}

impl Inversions {
    /// A FORK of `child` from `parent` at `time` (0: not ordered): the
    /// child inherits where its parent differs.
    pub(super) fn fork(&mut self, parent: u32, child: u32, time: u64) {
        self.end_run();
        if time == 0 || self.overflow {
            return;
        }
        let mut ranges = self.differ.get(&parent).cloned().unwrap_or_default();
        let recent = self.recent.entry(parent).or_default();
        ranges.extend(after(&recent.maps, time, &mut self.steps).cloned());
        self.read += 1;
        recent.forks.insert((time, self.read), (child, self.rounds));
        self.count(1);
        for r in ranges {
            self.differs(child, Change::Maps(r));
        }
    }

    /// A FORK by thread `ptid` of thread `tid` (a process's or a thread's)
    /// at `time`, which takes its comm; `named_apart`: `tid` has none yet,
    /// and that comm is not its process's (what its samples read before
    /// the FORK were labelled).
    pub(super) fn spawn(&mut self, ptid: u32, tid: u32, time: u64, named_apart: bool) {
        self.end_run();
        if time == 0 || self.overflow {
            return;
        }
        let early = self.sampled_after(tid, time);
        let recent = self.recent.entry(ptid).or_default();
        let renamed = after(&recent.comms, time, &mut self.steps).next().is_some();
        self.read += 1;
        recent.spawns.insert((time, self.read), ((), self.rounds));
        self.count(1);
        if renamed || (named_apart && early) {
            self.differs(tid, Change::Comm);
        }
    }

    /// A change to the maps of `pid` at `time` (0: not ordered) over
    /// `range` (an exec: all of it).
    pub(super) fn change(&mut self, pid: u32, time: u64, range: Range<u64>) {
        self.end_run();
        if time == 0 || self.overflow {
            return;
        }
        let own = self.sampled_after(pid, time);
        let recent = self.recent.entry(pid).or_default();
        let later: Vec<u32> = after(&recent.forks, time, &mut self.steps)
            .copied()
            .collect();
        self.read += 1;
        let key = (time, self.read);
        recent.maps.insert(key, (range.clone(), self.rounds));
        if !own {
            recent.unfound.insert(key, ((), self.rounds));
        }
        self.count(1);
        for child in later {
            self.differs(child, Change::Maps(range.clone()));
        }
        if own {
            self.differs(pid, Change::Maps(range));
        }
    }

    /// A COMM of thread `tid` at `time` (an exec's too; a leader's names
    /// its process).
    pub(super) fn comm(&mut self, tid: u32, time: u64) {
        self.end_run();
        if time == 0 || self.overflow {
            return;
        }
        let own = self.sampled_after(tid, time);
        let recent = self.recent.entry(tid).or_default();
        let spawned = after(&recent.spawns, time, &mut self.steps)
            .next()
            .is_some();
        self.read += 1;
        let key = (time, self.read);
        recent.comms.insert(key, ((), self.rounds));
        if !own {
            recent.unfound.insert(key, ((), self.rounds));
        }
        self.count(1);
        if own || spawned {
            self.differs(tid, Change::Comm);
        }
    }

    /// Whether a sample of `id` made after `time` was read.
    fn sampled_after(&self, id: u32, time: u64) -> bool {
        self.seen.get(&id).is_some_and(|s| s.latest() > time)
    }

    /// A sample of thread `tid` of process `pid` at `time`: its maps or
    /// comms differ where changes made after it were read before it.
    #[inline]
    pub(super) fn sample(&mut self, pid: u32, tid: u32, time: u64) {
        if time == 0 || self.overflow || pid == u32::MAX {
            return;
        }
        // a run of one thread's samples in time order: the changes made
        // after its first were found then
        if let Some((p, t, latest)) = &mut self.run {
            if (*p, *t) == (pid, tid) && time >= *latest {
                *latest = time;
                return;
            }
        }
        self.end_run();
        self.sampled(pid, time);
        if tid != pid && tid != u32::MAX {
            self.sampled(tid, time);
        }
        self.run = Some((pid, tid, time));
    }

    /// Notes the run of samples' latest time.
    fn end_run(&mut self) {
        let Some((pid, tid, latest)) = self.run.take() else {
            return;
        };
        for id in [pid, tid] {
            if let Some(s) = self.seen.get_mut(&id) {
                s.now = s.now.max(latest);
            }
        }
    }

    /// A sample of `id` (its process or its thread) at `time`: the changes
    /// to it made later but read before, and not found yet, are found
    /// (each leaves `unfound`, walked once).
    fn sampled(&mut self, id: u32, time: u64) {
        let mut first = false;
        let seen = self.seen.entry(id).or_insert_with(|| {
            first = true;
            Seen { now: 0, before: 0 }
        });
        seen.now = seen.now.max(time);
        if first {
            self.count(1);
        }
        let Some(recent) = self.recent.get_mut(&id) else {
            return;
        };
        let late = recent
            .unfound
            .last_key_value()
            .is_some_and(|(k, _)| k.0 > time);
        if !late {
            return;
        }
        // (time < u64::MAX: a change was made after it)
        let found = recent.unfound.split_off(&(time + 1, 0));
        self.steps += found.len() as u64;
        let found: Vec<Change> = found
            .into_keys()
            .map(|k| match recent.maps.get(&k) {
                Some((r, _)) => Change::Maps(r.clone()),
                None => Change::Comm,
            })
            .collect();
        for c in found {
            self.differs(id, c);
        }
    }

    /// The maps of `pid` may differ in `range`, and so may those of the
    /// children it forked lately (forked since, they inherit it); a comm
    /// may differ.
    fn differs(&mut self, pid: u32, change: Change) {
        let Change::Maps(range) = change else {
            self.relabel = true;
            return;
        };
        let mut todo = vec![pid];
        while let Some(p) = todo.pop() {
            if self.overflow {
                return;
            }
            self.differ.entry(p).or_default().push(range.clone());
            if let Some(r) = self.recent.get(&p) {
                todo.extend(r.forks.values().map(|f| f.0));
            }
            self.steps += 1;
            self.count(1);
        }
    }

    /// A FINISHED_ROUND: what was read two rounds before it is forgotten.
    pub(super) fn round(&mut self) {
        self.end_run();
        self.rounds += 1;
        let rounds = self.rounds;
        let mut gone = 0;
        self.recent.retain(|_, r| {
            let before = r.len();
            r.forks.retain(|_, f| f.1 + 2 > rounds);
            r.spawns.retain(|_, f| f.1 + 2 > rounds);
            r.maps.retain(|_, c| c.1 + 2 > rounds);
            r.comms.retain(|_, c| c.1 + 2 > rounds);
            r.unfound.retain(|_, c| c.1 + 2 > rounds);
            gone += before - r.len();
            !r.is_empty()
        });
        let before = self.seen.len();
        self.seen.retain(|_, s| {
            *s = Seen {
                now: 0,
                before: s.now,
            };
            s.before > 0
        });
        gone += before - self.seen.len();
        self.entries -= gone;
        // tables emptied after a burst of ids would be walked whole every
        // round
        if self.recent.capacity() > 4 * self.recent.len() + 64 {
            self.recent.shrink_to(2 * self.recent.len());
        }
        if self.seen.capacity() > 4 * self.seen.len() + 64 {
            self.seen.shrink_to(2 * self.seen.len());
        }
    }

    /// Counts `n` entries more; past the bound, gives up following them.
    fn count(&mut self, n: usize) {
        self.entries += n;
        if self.entries > MAX_ENTRIES {
            self.overflow = true;
            self.recent = HashMap::default();
            self.seen = HashMap::default();
            self.differ = HashMap::default();
        }
    }

    /// Whether any of `frames` (pid, user address as located) is where
    /// its process's maps may differ from perf's, or some comm may.
    pub(super) fn matter(&self, mut frames: impl Iterator<Item = (u32, u64)>) -> bool {
        if self.overflow || self.relabel {
            return true;
        }
        if self.differ.is_empty() {
            return false;
        }
        let mut merged: HashMap<u32, Vec<Range<u64>>> = HashMap::default();
        for (&pid, ranges) in &self.differ {
            let mut v = ranges.clone();
            v.sort_unstable_by_key(|r| r.start);
            // (the later first: it goes if it overlaps the one kept)
            v.dedup_by(|later, kept| {
                let overlaps = later.start <= kept.end;
                if overlaps {
                    kept.end = kept.end.max(later.end);
                }
                overlaps
            });
            merged.insert(pid, v);
        }
        frames.any(|(pid, addr)| {
            merged.get(&pid).is_some_and(|v| {
                let i = v.partition_point(|r| r.start <= addr);
                i > 0 && addr < v[i - 1].end
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A FORK read before its parent's earlier change, or after its later
    // one, makes the child's maps differ in that range, and its children's
    // (forked before or after that was read); changes in order, another
    // process's, or read two rounds apart do not; an exec is every address.
    #[test]
    fn children_differ_where_forks_and_changes_were_read_out_of_order() {
        let mut i = Inversions::default();
        i.change(1, 10, 0x1000..0x2000);
        i.fork(1, 2, 20);
        i.fork(2, 6, 21);
        i.change(1, 30, 0x3000..0x4000);
        i.change(7, 5, 0x5000..0x6000);
        assert!(i.differ.is_empty());
        // 1 changed 0x5000 before forking 2 (read after it), and forked 3
        // after changing 0x3000 (read before it)
        i.change(1, 15, 0x5000..0x6000);
        i.fork(1, 3, 25);
        i.fork(3, 4, 40);
        let at = |i: &Inversions, pid, addr| i.matter([(pid, addr)].into_iter());
        assert!(at(&i, 2, 0x5000) && at(&i, 6, 0x5000));
        assert!(at(&i, 3, 0x3fff) && at(&i, 4, 0x3000));
        assert!(!at(&i, 2, 0x3000) && !at(&i, 3, 0x5000) && !at(&i, 1, 0x3000));
        assert!(!at(&i, 2, 0x6000) && !at(&i, 9, 0x5000));
        // two rounds later, a change read late is no longer compared; an
        // exec read late makes every address differ
        i.round();
        i.round();
        i.change(1, 12, 0x9000..0xa000);
        assert!(!at(&i, 2, 0x9000));
        i.fork(1, 5, 100);
        i.change(1, 50, 0..u64::MAX);
        assert!(at(&i, 5, 0x42));
    }

    // A process's samples (any thread's) read before an earlier change to
    // its maps, or after a later one, make its maps differ in that range;
    // in order, another process's, or two rounds apart they do not.
    #[test]
    fn a_process_differs_where_its_samples_and_maps_were_read_out_of_order() {
        let mut i = Inversions::default();
        i.sample(1, 1, 10);
        i.change(1, 5, 0x1000..0x2000);
        i.change(1, 30, 0x3000..0x4000);
        i.sample(1, 2, 40);
        i.change(1, 50, 0x5000..0x6000);
        i.sample(1, 2, 45);
        i.sample(1, 2, 46);
        i.sample(9, 9, 100);
        i.change(7, 60, 0x7000..0x8000);
        // within a run of one thread's samples too, in time order or not
        i.sample(3, 3, 10);
        i.sample(3, 3, 20);
        i.change(3, 15, 0xb000..0xc000);
        i.change(6, 35, 0xd000..0xe000);
        i.sample(6, 6, 40);
        i.sample(6, 6, 30);
        assert!(i.matter([(3, 0xb000)].into_iter()) && i.matter([(6, 0xd000)].into_iter()));
        i.round();
        i.round();
        i.change(1, 1, 0x9000..0xa000);
        i.sample(1, 1, 2);
        let at = |i: &Inversions, pid, addr| i.matter([(pid, addr)].into_iter());
        assert!(at(&i, 1, 0x1000) && at(&i, 1, 0x5fff));
        assert!(!at(&i, 1, 0x3000) && !at(&i, 7, 0x7000) && !at(&i, 1, 0x9000));
        assert!(!at(&i, 9, 0x1000));
        // the one range found once, however many samples were late
        assert_eq!(i.differ[&1].len(), 2);
    }

    // A thread's COMM (a leader's: its process's, an exec's too) read on the
    // other side of that thread's samples, or of a FORK by that thread, or a
    // FORK read after samples of the thread it makes with another name than
    // its process's: a comm may differ; in order, or another thread's, not.
    #[test]
    fn comms_differ_where_read_out_of_order() {
        let none = |i: &Inversions| !i.matter(std::iter::empty());
        let mut i = Inversions::default();
        i.sample(1, 2, 10);
        i.comm(3, 5);
        i.comm(2, 20);
        i.sample(1, 2, 30);
        i.spawn(2, 4, 40, false);
        i.sample(1, 7, 80);
        i.spawn(2, 7, 75, false);
        assert!(none(&i));
        i.comm(1, 8);
        assert!(!none(&i));
        let late: [fn(&mut Inversions); 4] = [
            |i| {
                i.comm(2, 50);
                i.sample(1, 2, 45);
            },
            |i| {
                i.spawn(2, 5, 60, false);
                i.comm(2, 55);
            },
            |i| {
                i.comm(2, 70);
                i.spawn(2, 6, 65, false);
            },
            |i| {
                i.sample(1, 8, 80);
                i.spawn(2, 8, 75, true);
            },
        ];
        for (n, f) in late.iter().enumerate() {
            let mut i = Inversions::default();
            f(&mut i);
            assert!(!none(&i), "case {n}");
        }
    }

    // Past the bound on what is followed, every frame may differ; a sampled
    // id counts until two rounds pass.
    #[test]
    fn too_many_to_follow_differs_everywhere() {
        let mut i = Inversions::default();
        i.fork(1, 2, 100);
        i.entries = MAX_ENTRIES;
        i.change(1, 50, 0..0x1000);
        assert!(i.overflow && i.recent.is_empty() && i.differ.is_empty());
        assert!(i.matter([(9, 0)].into_iter()));
        let mut i = Inversions::default();
        i.sample(1, 2, 10);
        assert_eq!(i.entries, 2);
        i.round();
        i.round();
        assert!(i.entries == 0 && i.recent.is_empty() && i.seen.is_empty());
        i.entries = MAX_ENTRIES;
        i.sample(5, 5, 10);
        assert!(i.overflow && i.matter(std::iter::empty()));
    }

    /// Records of each crafted shape: enough that walking every entry again
    /// each time (n * n steps) is far over the bound of a few per record.
    const N: u64 = 2000;
    const T0: u64 = 1_000_000;

    /// A map change of process 100 at `T0 + k`, one page of its own.
    fn change_k(i: &mut Inversions, k: u64) {
        let at = 0x1000_0000 + k * 0x1000;
        i.change(100, T0 + k, at..at + 0x1000);
    }

    // Samples read after many later changes to their maps, each earlier
    // than the last (no run): each change is walked once (was N * N).
    #[test]
    fn late_samples_walk_each_change_once() {
        let mut i = Inversions::default();
        (0..N).for_each(|k| change_k(&mut i, k));
        (0..N).for_each(|j| i.sample(100, 100, T0 - 1 - j));
        assert!(i.steps <= 3 * N, "{} steps for {N} changes", i.steps);
        assert_eq!(i.differ[&100].len(), N as usize);
        // a change read later is found by the next sample before it
        i.change(100, T0 + N, 0x9000_0000..0x9000_1000);
        i.sample(100, 100, T0);
        assert!(i.matter([(100, 0x9000_0000)].into_iter()));
    }

    // Thread FORKs read after many later changes to their maker's maps
    // walk none of them (was N * N steps).
    #[test]
    fn late_spawns_walk_no_map_changes() {
        let mut i = Inversions::default();
        (0..N).for_each(|k| change_k(&mut i, k));
        for j in 0..N {
            i.spawn(100, 1000 + j as u32, T0 - 1 - j, false);
        }
        assert!(i.steps <= 3 * N, "{} steps for {N} spawns", i.steps);
        assert!(!i.relabel);
    }

    // FORKs read after many later COMMs of their parent walk none of them
    // (was N * N steps), and still find the comm may differ.
    #[test]
    fn late_forks_walk_no_comms() {
        let mut i = Inversions::default();
        (0..N).for_each(|k| i.comm(100, T0 + k));
        for j in 0..N {
            let child = 200_000 + j as u32;
            i.fork(100, child, T0 - 1 - j);
            i.spawn(100, child, T0 - 1 - j, false);
        }
        assert!(i.steps <= 3 * N, "{} steps for {N} forks", i.steps);
        assert!(i.relabel);
    }

    // Tables emptied after a burst of ids shrink: each round walks what
    // is left, not the burst's room (one id kept sampled in 1M rounds after
    // 300,000 took 18 s).
    #[test]
    fn tables_shrink_after_a_burst() {
        let mut i = Inversions::default();
        for id in 1..10_000 {
            i.sample(id, id, 10);
            i.comm(id, 5);
        }
        for t in 0..3 {
            i.sample(1, 1, 20 + t);
            i.comm(1, 20 + t);
            i.round();
        }
        assert!(i.seen.capacity() < 1000 && i.recent.capacity() < 1000);
    }
}
