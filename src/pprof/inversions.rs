//! Where the file's order gave a process other maps than perf's time order
//! gives it. perf writes its per-CPU buffers one after another each round,
//! so a FORK can be read before a change to its parent's maps (a map, an
//! exec) made earlier on another CPU, and the child then lacks it; or
//! after one made later, and the child has it. Its maps, and its
//! descendants', may then differ from perf's in that change's range
//! (everywhere, for an exec). Only records read within two rounds of each
//! other are compared: by then perf has read every record made before
//! them (its own rule for flushing), and it takes a later one as it comes.
//! Pure.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};

use foldhash::HashMap;

/// Most FORKs, changes and ranges followed at once: past it, every
/// process's maps may differ.
const MAX_ENTRIES: usize = 1 << 20;

/// FORKs or changes read, by (time, order read): the child or the range,
/// and the FINISHED_ROUNDs seen before it.
type ByTime<T> = BTreeMap<(u64, u64), (T, u64)>;

/// A process's FORKs and changes read in the last two rounds.
#[derive(Debug, Default)]
struct Recent {
    forks: ByTime<u32>,
    changes: ByTime<Range<u64>>,
}

/// Those of `by_time` made after `time`.
fn after<T>(by_time: &ByTime<T>, time: u64) -> impl Iterator<Item = &T> {
    let from = Bound::Excluded((time, u64::MAX));
    by_time.range((from, Bound::Unbounded)).map(|(_, v)| &v.0)
}

/// The FORKs and changes read, and where children's maps may differ.
#[derive(Debug, Default)]
pub(super) struct Inversions {
    recent: HashMap<u32, Recent>,
    /// Per process: ranges its maps may differ in from perf's.
    differ: HashMap<u32, Vec<Range<u64>>>,
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
        if time == 0 || self.overflow {
            return;
        }
        let mut ranges = self.differ.get(&parent).cloned().unwrap_or_default();
        let recent = self.recent.entry(parent).or_default();
        ranges.extend(after(&recent.changes, time).cloned());
        self.read += 1;
        recent.forks.insert((time, self.read), (child, self.rounds));
        self.count(1);
        for r in ranges {
            self.differs(child, r);
        }
    }

    /// A change to the maps of `pid` at `time` (0: not ordered) over
    /// `range` (an exec: all of it).
    pub(super) fn change(&mut self, pid: u32, time: u64, range: Range<u64>) {
        if time == 0 || self.overflow {
            return;
        }
        let recent = self.recent.entry(pid).or_default();
        let later: Vec<u32> = after(&recent.forks, time).copied().collect();
        self.read += 1;
        let value = (range.clone(), self.rounds);
        recent.changes.insert((time, self.read), value);
        self.count(1);
        for child in later {
            self.differs(child, range.clone());
        }
    }

    /// The maps of `pid` may differ in `range`, and so may those of the
    /// children it forked lately (forked since, they inherit it).
    fn differs(&mut self, pid: u32, range: Range<u64>) {
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
        self.rounds += 1;
        let rounds = self.rounds;
        let mut gone = 0;
        self.recent.retain(|_, r| {
            let before = r.forks.len() + r.changes.len();
            r.forks.retain(|_, f| f.1 + 2 > rounds);
            r.changes.retain(|_, c| c.1 + 2 > rounds);
            gone += before - r.forks.len() - r.changes.len();
            !(r.forks.is_empty() && r.changes.is_empty())
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
    /// its process's maps may differ from perf's.
    pub(super) fn matter(&self, mut frames: impl Iterator<Item = (u32, u64)>) -> bool {
        if self.overflow {
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

    // Past the bound on what is followed, every frame may differ.
    #[test]
    fn too_many_to_follow_differs_everywhere() {
        let mut i = Inversions::default();
        i.fork(1, 2, 100);
        i.entries = MAX_ENTRIES;
        i.change(1, 50, 0..0x1000);
        assert!(i.overflow && i.recent.is_empty() && i.differ.is_empty());
        assert!(i.matter([(9, 0)].into_iter()));
    }
}
