//! A small direct-mapped memo in front of a scan's hash tables: each key has
//! one slot, chosen by a cheap hash of it, so a lookup costs one compare and
//! no reordering. A scan asks about the same few dozen files in every
//! process, in the same cyclic order (each library's executable VMA once);
//! a least-recently-used list shorter than that cycle misses every time,
//! and one as long costs a linear search and a move to the front per VMA.
//!
//! Only a shortcut: a miss (a new key, or two keys sharing a slot, which a
//! process can cause on purpose) falls through to the caller's table.

use std::borrow::Borrow;

use crate::model::FileKey;

/// What picks a key's slot: a hash that is cheap rather than strong (the
/// table behind the memo is the one that must resist chosen collisions).
pub trait SlotHash {
    /// 64 bits the slot is taken from (their top bits after a multiply).
    fn slot_hash(&self) -> u64;
}

impl SlotHash for FileKey {
    fn slot_hash(&self) -> u64 {
        self.inode ^ (u64::from(self.dev_major) << 40) ^ (u64::from(self.dev_minor) << 20)
    }
}

impl SlotHash for [u8] {
    /// The length and the last 8 bytes: paths of one directory share their
    /// start, not their end.
    fn slot_hash(&self) -> u64 {
        let tail = &self[self.len().saturating_sub(8)..];
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        u64::from_le_bytes(last) ^ (self.len() as u64).rotate_left(56)
    }
}

/// `N` slots (a power of two) of a key and its value.
pub struct Slots<K, V, const N: usize> {
    slots: [Option<(K, V)>; N],
}

impl<K, V, const N: usize> Default for Slots<K, V, N> {
    fn default() -> Self {
        Slots {
            slots: std::array::from_fn(|_| None),
        }
    }
}

impl<K, V, const N: usize> Slots<K, V, N> {
    const BITS: u32 = {
        assert!(N.is_power_of_two() && N > 1);
        N.trailing_zeros()
    };

    fn slot<Q: SlotHash + ?Sized>(q: &Q) -> usize {
        // Fibonacci hashing: the multiply spreads every input bit upwards
        (q.slot_hash().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - Self::BITS)) as usize
    }

    /// The key equal to `q` and its value, when `q`'s slot holds it.
    pub fn find<Q>(&self, q: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: SlotHash + PartialEq + ?Sized,
    {
        match &self.slots[Self::slot(q)] {
            Some((k, v)) if k.borrow() == q => Some((k, v)),
            _ => None,
        }
    }

    /// Puts `key` in its slot, in place of whatever was there.
    pub fn put<Q>(&mut self, key: K, value: V)
    where
        K: Borrow<Q>,
        Q: SlotHash + ?Sized,
    {
        let at = Self::slot(key.borrow());
        self.slots[at] = Some((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(inode: u64) -> FileKey {
        FileKey::on_one_device(inode)
    }

    // A key is found in its slot until another key of the same slot
    // replaces it; keys of other slots never answer for it.
    #[test]
    fn slot_holds_its_last_key() {
        let mut s: Slots<FileKey, u32, 8> = Slots::default();
        assert_eq!(s.find(&key(1)), None);
        s.put::<FileKey>(key(1), 10);
        assert_eq!(s.find(&key(1)), Some((&key(1), &10)));
        let rival = (2..1000)
            .map(key)
            .find(|k| Slots::<FileKey, u32, 8>::slot(k) == Slots::<FileKey, u32, 8>::slot(&key(1)))
            .unwrap();
        let other = (2..1000)
            .map(key)
            .find(|k| Slots::<FileKey, u32, 8>::slot(k) != Slots::<FileKey, u32, 8>::slot(&key(1)))
            .unwrap();
        s.put::<FileKey>(other, 30);
        assert_eq!(s.find(&key(1)), Some((&key(1), &10)));
        s.put::<FileKey>(rival, 20);
        assert_eq!(s.find(&key(1)), None);
        assert_eq!(s.find(&rival), Some((&rival, &20)));
        assert_eq!(s.find(&other), Some((&other, &30)));
    }

    // Names are looked up by their bytes and found only when equal, also
    // when they share a slot hash (same length and last 8 bytes).
    #[test]
    fn names_match_by_bytes() {
        let mut s: Slots<Arc<[u8]>, (), 64> = Slots::default();
        let libc: Arc<[u8]> = Arc::from(&b"/usr/lib/libc.so.6"[..]);
        s.put::<[u8]>(libc.clone(), ());
        let (found, _) = s.find(&b"/usr/lib/libc.so.6"[..]).unwrap();
        assert!(Arc::ptr_eq(found, &libc));
        assert_eq!(s.find(&b"/opt/lib/libc.so.6"[..]), None);
        assert_eq!(s.find(&b"libc.so.6"[..]), None);
        assert_eq!(s.find(&b""[..]), None);
    }

    // The 20 files of a cyclic scan mostly get slots of their own among 128
    // (the memo's point: a cycle longer than a short recent list).
    #[test]
    fn a_cycle_of_files_spreads() {
        let slots: std::collections::HashSet<usize> = (0..20u64)
            .map(|i| Slots::<FileKey, (), 128>::slot(&key(1_000_000 + 7 * i)))
            .collect();
        assert!(slots.len() >= 17, "{} distinct slots", slots.len());
    }
}
