//! The `pprof` reader's memo of raw stacks: samples with the same callchain
//! bytes, ip, cpumode, thread and comms go to the aggregate the first one
//! went to while no map changes, skipping the per-frame lookups.

use foldhash::HashMap;

/// ip, cpumode (and whether there is a callchain), pid, tid, comm, thread
/// comm: with the raw callchain, what makes two samples one stack.
pub(super) type CacheKey = (u64, u16, u32, u32, i64, i64);

/// The aggregate a raw stack went to, and what its first sample counted.
pub(super) struct Cached {
    pub(super) chain: Box<[u8]>,
    pub(super) key: CacheKey,
    pub(super) sample: usize,
    /// Counts the slow path made, repeated on a hit.
    pub(super) ip_only: bool,
    pub(super) unmapped: u32,
    pub(super) guest: u32,
    /// The entry before it with the same hash.
    pub(super) next: usize,
}

impl Cached {
    pub(super) fn matches(&self, chain: &[u8], key: &CacheKey) -> bool {
        self.key == *key && *self.chain == *chain
    }
}

/// Raw stacks seen since the maps last changed.
#[derive(Default)]
pub(super) struct StackCache {
    by_hash: HashMap<u64, usize>,
    pub(super) entries: Vec<Cached>,
    pub(super) hasher: foldhash::fast::RandomState,
}

/// Most raw stacks remembered before starting over (memory stays within
/// a few times the distinct stacks).
const STACK_CACHE_MAX: usize = 1 << 20;

impl StackCache {
    pub(super) fn find(&self, h: u64, chain: &[u8], key: &CacheKey) -> Option<usize> {
        let mut i = self.by_hash.get(&h).copied().unwrap_or(usize::MAX);
        while let Some(e) = self.entries.get(i) {
            if e.matches(chain, key) {
                return Some(i);
            }
            i = e.next;
        }
        None
    }

    pub(super) fn insert(&mut self, h: u64, mut e: Cached) -> usize {
        if self.entries.len() >= STACK_CACHE_MAX {
            self.clear();
        }
        e.next = self
            .by_hash
            .insert(h, self.entries.len())
            .unwrap_or(usize::MAX);
        self.entries.push(e);
        self.entries.len() - 1
    }

    pub(super) fn clear(&mut self) {
        self.by_hash.clear();
        self.entries.clear();
    }
}
