//! Records read from a file, in file order, held by their distinct
//! content: each distinct one once, the order as runs of its index (8
//! bytes a run). A file of a few records repeated (a compressed bomb)
//! costs its distinct records, however often they repeat.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Items in order, each distinct one held once, the order as runs.
#[derive(Debug, Clone)]
pub struct Runs<T> {
    distinct: Vec<T>,
    /// The first distinct item of each hash (seeded per run); the others
    /// of that hash follow in `next`. The items are not copied into it.
    index: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// For each distinct item, the next one of its hash (`u32::MAX`: none).
    next: Vec<u32>,
    hasher: foldhash::fast::RandomState,
    runs: Vec<(u32, u32)>,
    /// For [`Runs::push_keyed`]: where in `runs` each key's last run is.
    last_of_key: HashMap<u64, usize, foldhash::fast::RandomState>,
}

impl<T> Default for Runs<T> {
    fn default() -> Self {
        Runs {
            distinct: Vec::new(),
            index: HashMap::default(),
            next: Vec::new(),
            hasher: Default::default(),
            runs: Vec::new(),
            last_of_key: HashMap::default(),
        }
    }
}

impl<T: Hash + Eq> Runs<T> {
    /// Appends `item`.
    pub fn push(&mut self, item: T) {
        let i = self.index_of(item);
        match self.runs.last_mut() {
            Some((last, n)) if *last == i && *n < u32::MAX => *n += 1,
            _ => self.runs.push((i, 1)),
        }
    }

    /// Appends `item`, a repeat of the last item of `key` joining its run
    /// even when items of other keys came between: for runs that are put in
    /// `key` order later ([`Runs::sort_by_key`] with the same key), where
    /// only the order within a key counts (maps repeated at several
    /// addresses in turn are then one run each, not a run per record).
    pub fn push_keyed(&mut self, item: T, key: u64) {
        let i = self.index_of(item);
        if let Some(&at) = self.last_of_key.get(&key) {
            if let Some((last, n)) = self.runs.get_mut(at) {
                if *last == i && *n < u32::MAX {
                    *n += 1;
                    return;
                }
            }
        }
        self.last_of_key.insert(key, self.runs.len());
        self.runs.push((i, 1));
    }

    /// The index of `item` in `distinct`, added if new.
    fn index_of(&mut self, item: T) -> u32 {
        if self.next.len() != self.distinct.len() {
            // the index was let go: held again
            self.distinct.push(item);
            return self.distinct.len() as u32 - 1;
        }
        let h = self.hasher.hash_one(&item);
        let head = self.index.get(&h).copied();
        let mut at = head.unwrap_or(u32::MAX);
        while let Some(known) = self.distinct.get(at as usize) {
            if *known == item {
                return at;
            }
            at = self.next.get(at as usize).copied().unwrap_or(u32::MAX);
        }
        let i = self.distinct.len() as u32;
        self.distinct.push(item);
        self.next.push(head.unwrap_or(u32::MAX));
        self.index.insert(h, i);
        i
    }

    /// Drops every item `keep` refuses (all its repeats).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let kept: Vec<bool> = self.distinct.iter().map(&mut keep).collect();
        self.runs
            .retain(|&(i, _)| kept.get(i as usize).copied().unwrap_or(false));
        self.last_of_key.clear();
    }
}

impl<T> Runs<T> {
    /// Orders the runs by `key` of their items, stably (items of one key
    /// keep their order), and joins runs of one item that come together.
    pub fn sort_by_key<K: Ord>(&mut self, key: impl Fn(&T) -> K) {
        let distinct = &self.distinct;
        (self.runs).sort_by_key(|&(i, _)| distinct.get(i as usize).map(&key));
        let mut joined: Vec<(u32, u32)> = Vec::with_capacity(self.runs.len());
        for &(i, n) in &self.runs {
            match joined.last_mut() {
                Some((last, m)) if *last == i && m.checked_add(n).is_some() => *m += n,
                _ => joined.push((i, n)),
            }
        }
        self.runs = joined;
        self.last_of_key.clear();
    }

    /// Lets go of the index of the distinct items (its memory): an item
    /// pushed after is held again, not found.
    pub fn forget_index(&mut self) {
        self.index = HashMap::default();
        self.next = Vec::new();
        self.last_of_key = HashMap::default();
    }

    /// Gives back the room grown ahead of need (a vector doubles as it
    /// grows: half of it may be spare).
    pub fn shrink_to_fit(&mut self) {
        self.distinct.shrink_to_fit();
        self.next.shrink_to_fit();
        self.runs.shrink_to_fit();
    }

    /// How many runs.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// How many, repeats counted.
    pub fn count(&self) -> u64 {
        self.runs.iter().map(|&(_, n)| u64::from(n)).sum()
    }

    /// The distinct items, in the order they first came (those dropped
    /// by [`Runs::retain`] too).
    pub fn distinct(&self) -> &[T] {
        &self.distinct
    }

    /// Each run: the item and how often it repeats there, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&T, u32)> + '_ {
        (self.runs.iter()).filter_map(|&(i, n)| Some((self.distinct.get(i as usize)?, n)))
    }
}

impl<T: Clone> Runs<T> {
    /// Every item, in order, as often as it came.
    pub fn into_vec(self) -> Vec<T> {
        let mut all = Vec::with_capacity(self.count() as usize);
        for (item, n) in self.iter() {
            all.extend(std::iter::repeat_n(item.clone(), n as usize));
        }
        all
    }
}

impl<T: Hash + Eq> FromIterator<T> for Runs<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut runs = Runs::default();
        for item in items {
            runs.push(item);
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Items are found again by content among many, and after the index
    // is let go a pushed item is held again (not lost, not misplaced).
    #[test]
    fn distinct_items_are_found_by_content() {
        let mut r: Runs<u32> = Runs::default();
        for i in 0..10_000u32 {
            r.push(i % 1000);
        }
        assert_eq!((r.distinct().len(), r.count()), (1000, 10_000));
        r.forget_index();
        r.push(5);
        r.push(5);
        assert_eq!(r.distinct().len(), 1002, "each held again");
        let last: Vec<(u32, u32)> = r.iter().map(|(&i, n)| (i, n)).skip(10_000).collect();
        assert_eq!(last, [(5, 1), (5, 1)]);
        assert_eq!(r.count(), 10_002);
    }

    // Keyed pushes join the last run of their key across other keys' items;
    // sorted by key, each key's items keep their order, and joined runs
    // count every repeat.
    #[test]
    fn keyed_repeats_join_their_keys_last_run() {
        let mut r: Runs<(u64, u8)> = Runs::default();
        for item in [
            (2, b'a'),
            (1, b'x'),
            (2, b'a'),
            (1, b'x'),
            (2, b'b'),
            (1, b'x'),
            (2, b'a'),
        ] {
            r.push_keyed(item, item.0);
        }
        assert_eq!(r.runs.len(), 4); // a2 x3 b1 a1
        r.sort_by_key(|&(k, _)| k);
        let runs: Vec<((u64, u8), u32)> = r.iter().map(|(&i, n)| (i, n)).collect();
        assert_eq!(
            runs,
            [
                ((1, b'x'), 3),
                ((2, b'a'), 2),
                ((2, b'b'), 1),
                ((2, b'a'), 1)
            ]
        );
        assert_eq!(r.count(), 7);
    }

    // Items come back in order, as often as they came, each distinct one
    // held once; retain drops every repeat of what it refuses.
    #[test]
    fn held_once_each_in_order() {
        let mut r: Runs<u32> = [1, 2, 2, 1, 1].into_iter().collect();
        assert_eq!((r.distinct(), r.runs.len(), r.count()), (&[1, 2][..], 3, 5));
        assert_eq!(r.clone().into_vec(), [1, 2, 2, 1, 1]);
        let runs: Vec<(u32, u32)> = r.iter().map(|(&i, n)| (i, n)).collect();
        assert_eq!(runs, [(1, 1), (2, 2), (1, 2)]);
        r.retain(|&i| i != 1);
        assert_eq!(
            (r.into_vec(), Runs::<u8>::default().is_empty()),
            (vec![2, 2], true)
        );
    }
}
