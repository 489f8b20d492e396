//! Records read from a file, in file order, held by their distinct
//! content: each distinct one once, the order as runs of its index (8
//! bytes a run). A file of a few records repeated (a compressed bomb)
//! costs its distinct records, however often they repeat.

use std::collections::HashMap;
use std::hash::Hash;

/// Items in order, each distinct one held once, the order as runs.
#[derive(Debug, Clone)]
pub struct Runs<T> {
    distinct: Vec<T>,
    index: HashMap<T, u32, foldhash::fast::RandomState>,
    runs: Vec<(u32, u32)>,
}

impl<T> Default for Runs<T> {
    fn default() -> Self {
        Runs {
            distinct: Vec::new(),
            index: HashMap::default(),
            runs: Vec::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> Runs<T> {
    /// Appends `item`.
    pub fn push(&mut self, item: T) {
        let i = match self.index.get(&item) {
            Some(&i) => i,
            None => {
                let i = self.distinct.len() as u32;
                self.distinct.push(item.clone());
                self.index.insert(item, i);
                i
            }
        };
        match self.runs.last_mut() {
            Some((last, n)) if *last == i && *n < u32::MAX => *n += 1,
            _ => self.runs.push((i, 1)),
        }
    }

    /// Drops every item `keep` refuses (all its repeats).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let kept: Vec<bool> = self.distinct.iter().map(&mut keep).collect();
        self.runs
            .retain(|&(i, _)| kept.get(i as usize).copied().unwrap_or(false));
    }
}

impl<T> Runs<T> {
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

impl<T: Hash + Eq + Clone> FromIterator<T> for Runs<T> {
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
