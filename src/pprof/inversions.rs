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
//! as it comes. Pure.

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

/// What was read of a pid or tid in the last two rounds.
#[derive(Debug, Default)]
struct Recent {
    /// A process's FORKs: the children.
    forks: ByTime<u32>,
    /// A thread's FORKs (processes' and threads'): they take its comm.
    spawns: ByTime<()>,
    /// Changes to a process's maps and to a thread's comm, and whether
    /// samples of the id itself were already found on their other side.
    changes: ByTime<(Change, bool)>,
    /// Its samples (a process's: all its threads').
    seen: Option<Seen>,
}

impl Recent {
    fn is_empty(&self) -> bool {
        self.forks.is_empty() && self.spawns.is_empty() && self.changes.is_empty()
    }

    fn len(&self) -> usize {
        self.forks.len() + self.spawns.len() + self.changes.len() + usize::from(self.seen.is_some())
    }

    /// Whether a sample of the id made after `time` was read.
    fn sampled_after(&self, time: u64) -> bool {
        self.seen.is_some_and(|s| s.latest() > time)
    }
}

/// Those of `by_time` made after `time`.
fn after<T>(by_time: &ByTime<T>, time: u64) -> impl Iterator<Item = &T> {
    let from = Bound::Excluded((time, u64::MAX));
    by_time.range((from, Bound::Unbounded)).map(|(_, v)| &v.0)
}

/// The records read, and where processes' maps or comms may differ.
#[derive(Debug, Default)]
pub(super) struct Inversions {
    /// By pid (forks, maps, a process's samples) or tid (spawns, comms, a
    /// thread's samples): a leader's are its process's.
    recent: HashMap<u32, Recent>,
    /// Per process: ranges its maps may differ in from perf's.
    differ: HashMap<u32, Vec<Range<u64>>>,
    /// Some comm may differ from perf's.
    relabel: bool,
    /// The last sample's process and thread, and the latest time of the
    /// samples of theirs read since (nothing else read since): not noted
    /// in `recent` yet.
    run: Option<(u32, u32, u64)>,
    rounds: u64,
    /// FORKs and changes read so far.
    read: u64,
    entries: usize,
    /// Too many to follow: every process's maps may differ.
    overflow: bool,
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
        ranges.extend(after(&recent.changes, time).filter_map(|c| match &c.0 {
            Change::Maps(r) => Some(r.clone()),
            Change::Comm => None,
        }));
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
        let early = self.recent.get(&tid).is_some_and(|r| r.sampled_after(time));
        let recent = self.recent.entry(ptid).or_default();
        let renamed = after(&recent.changes, time).any(|c| c.0 == Change::Comm);
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
        let recent = self.recent.entry(pid).or_default();
        let later: Vec<u32> = after(&recent.forks, time).copied().collect();
        let own = recent.sampled_after(time);
        self.read += 1;
        let value = ((Change::Maps(range.clone()), own), self.rounds);
        recent.changes.insert((time, self.read), value);
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
        let recent = self.recent.entry(tid).or_default();
        let own = recent.sampled_after(time);
        let spawned = after(&recent.spawns, time).next().is_some();
        self.read += 1;
        let value = ((Change::Comm, own), self.rounds);
        recent.changes.insert((time, self.read), value);
        self.count(1);
        if own || spawned {
            self.differs(tid, Change::Comm);
        }
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
            if let Some(s) = self.recent.get_mut(&id).and_then(|r| r.seen.as_mut()) {
                s.now = s.now.max(latest);
            }
        }
    }

    fn sampled(&mut self, id: u32, time: u64) {
        let recent = self.recent.entry(id).or_default();
        let first = match &mut recent.seen {
            Some(s) => {
                s.now = s.now.max(time);
                false
            }
            None => {
                recent.seen = Some(Seen {
                    now: time,
                    before: 0,
                });
                true
            }
        };
        let late = recent
            .changes
            .last_key_value()
            .is_some_and(|(k, _)| k.0 > time);
        let mut found = Vec::new();
        if late {
            let from = Bound::Excluded((time, u64::MAX));
            for (_, ((c, own), _)) in recent.changes.range_mut((from, Bound::Unbounded)) {
                if !std::mem::replace(own, true) {
                    found.push(c.clone());
                }
            }
        }
        for c in found {
            self.differs(id, c);
        }
        if first {
            self.count(1);
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
            r.changes.retain(|_, c| c.1 + 2 > rounds);
            r.seen = r.seen.filter(|s| s.now > 0).map(|s| Seen {
                now: 0,
                before: s.now,
            });
            gone += before - r.len();
            !(r.is_empty() && r.seen.is_none())
        });
        self.entries -= gone;
    }

    /// Counts `n` entries more; past the bound, gives up following them.
    fn count(&mut self, n: usize) {
        self.entries += n;
        if self.entries > MAX_ENTRIES {
            self.overflow = true;
            self.recent = HashMap::default();
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
        assert!(i.entries == 0 && i.recent.is_empty());
        i.entries = MAX_ENTRIES;
        i.sample(5, 5, 10);
        assert!(i.overflow && i.matter(std::iter::empty()));
    }
}
