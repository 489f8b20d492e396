//! One shared copy of each VMA name a scan worker reads.

use std::collections::HashSet;
use std::sync::Arc;

use crate::memo::Slots;
use crate::model::Name;

/// One shared copy of each VMA name a worker read (a library's name is
/// read again for each of its VMAs and in every process that maps it), so
/// a VMA costs no allocation of its own. Up to `NAMES_BYTES` of names
/// are kept; past that the table starts again, so a process of many
/// distinct names cannot grow it.
#[derive(Default)]
pub struct Names {
    set: HashSet<Arc<[u8]>, foldhash::fast::RandomState>,
    /// Bytes `set` holds, each name counted with [`NAME_ENTRY_BYTES`].
    bytes: usize,
    /// The names given last, one per slot: most names are found here, with
    /// no hash and one compare (see [`crate::memo`]). They hold at most
    /// `NAME_SLOTS` names more than `set`'s budget.
    recent: Slots<Arc<[u8]>, (), NAME_SLOTS>,
}

/// Slots of [`Names::recent`].
const NAME_SLOTS: usize = 64;

/// Bytes of names one worker keeps at most.
const NAMES_BYTES: usize = 1 << 20;
/// What a kept name costs besides its bytes: the table's slot, the shared
/// copy's counts and the allocator's rounding (a helper measured 1.13-1.25
/// MiB held at the budget with short names counted at 48).
const NAME_ENTRY_BYTES: usize = 64;

impl Names {
    /// The shared copy of `name` (none for anonymous memory).
    pub fn get(&mut self, name: &[u8]) -> Name {
        if name.is_empty() {
            return Name::EMPTY;
        }
        if let Some((known, ())) = self.recent.find(name) {
            return Name::shared(known.clone());
        }
        let shared = match self.set.get(name) {
            Some(known) => known.clone(),
            None => {
                let cost = NAME_ENTRY_BYTES + name.len();
                if self.bytes + cost > NAMES_BYTES {
                    // a new table: `clear` would keep the old one's slots
                    self.set = HashSet::default();
                    self.bytes = 0;
                }
                let new: Arc<[u8]> = Arc::from(name);
                self.bytes += cost;
                self.set.insert(new.clone());
                new
            }
        };
        self.recent.put::<[u8]>(shared.clone(), ());
        Name::shared(shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A name read again is the same shared copy and anonymous memory is no
    // copy at all; the table keeps exactly as many
    // names as its budget counts (each with NAME_ENTRY_BYTES), and the next
    // one starts it again instead of growing it.
    #[test]
    fn names_are_shared_within_a_budget() {
        let mut names = Names::default();
        let empty = names.get(b"");
        assert!(empty.is_empty() && empty.shares(&names.get(b"")));
        assert!(
            names.set.is_empty() && names.bytes == 0,
            "no entry for anonymous memory"
        );
        let a = names.get(b"/usr/lib/libc.so.6");
        let b = names.get(b"/usr/lib/libm.so.6");
        // not only the last one given
        assert!(a.shares(&names.get(b"/usr/lib/libc.so.6")));
        assert!(b.shares(&names.get(b"/usr/lib/libm.so.6")));
        assert_eq!(names.bytes, 2 * (NAME_ENTRY_BYTES + 18));
        let name = |i: usize| format!("/{i:0>1000}").into_bytes();
        let fit = (NAMES_BYTES - names.bytes) / (NAME_ENTRY_BYTES + 1001);
        let kept: Vec<Name> = (0..fit).map(|i| names.get(&name(i))).collect();
        assert_eq!(names.set.len(), fit + 2);
        assert!(names.bytes <= NAMES_BYTES);
        // all still kept: the same copies
        for (i, k) in kept.iter().enumerate() {
            assert!(k.shares(&names.get(&name(i))), "name {i} kept");
        }
        assert!(a.shares(&names.get(b"/usr/lib/libc.so.6")));
        // one more does not fit: a new table with it alone
        let over = names.get(&name(fit));
        assert_eq!(*over, *name(fit));
        assert_eq!((names.set.len(), names.bytes), (1, NAME_ENTRY_BYTES + 1001));
        // once the recent names no longer hold it (another name took its
        // slot), a name of the old table is a new copy
        let libc = &b"/usr/lib/libc.so.6"[..];
        for i in 0..10_000 {
            if names.recent.find(libc).is_none() {
                break;
            }
            names.get(format!("/r{i}").as_bytes());
        }
        assert!(names.recent.find(libc).is_none());
        let again = names.get(b"/usr/lib/libc.so.6");
        assert_eq!(*again, *b"/usr/lib/libc.so.6");
        assert!(!a.shares(&again), "the table was started again");
    }
}
