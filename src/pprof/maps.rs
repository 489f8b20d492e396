//! The address spaces a recording describes, replayed record by record: per
//! process the maps its MMAP/MMAP2 records made (a new map cuts what it
//! overlaps, as the kernel's would), copied to a child on FORK, emptied on
//! exec; the kernel's and modules' maps shared by all. Pure. A process's
//! maps are a persistent tree ([`rpds`]): a fork shares its parent's, and a
//! change on either side copies only the tree nodes on its path (O(log n)),
//! not the whole set: a child mapping into a copy of a parent with 40,000
//! maps, 40,000 times over, cost 1.6 billion entry copies.

use foldhash::HashMap;
use std::rc::Rc;

use crate::model::BuildId;

/// One mapped range as the recording gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Map {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The path (or `[vdso]`, `[kernel.kallsyms]_text`, `//anon` ...).
    pub filename: Rc<[u8]>,
    /// Build id, from the record or the recording's table.
    pub build_id: Option<BuildId>,
}

/// One address space's maps, by start address (cloned in O(1), sharing).
pub type Maps = rpds::RedBlackTreeMap<u64, Rc<Map>>;

/// Too many maps held at once (fork copies included): the recording is
/// refused rather than exhaust memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyMaps(pub usize);

/// Every process's maps and the kernel's.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    procs: HashMap<u32, Maps>,
    kernel: Maps,
    /// Map entries held (a shared space counted once per holder), bounded
    /// by `limit`.
    held: usize,
    limit: usize,
}

/// Most map entries held at once for an input of `len` bytes: one per 8
/// bytes (a map record takes at least 48), at least 1M, so fork copies
/// cannot multiply what a small file holds without bound.
pub fn map_limit(len: u64) -> usize {
    usize::try_from(len / 8).unwrap_or(usize::MAX).max(1 << 20)
}

impl AddressSpaces {
    /// Empty, holding at most `limit` map entries.
    pub fn new(limit: usize) -> AddressSpaces {
        AddressSpaces {
            limit,
            ..Default::default()
        }
    }

    /// Adds a map of process `pid` (`None`: the kernel's).
    pub fn insert(&mut self, pid: Option<u32>, map: Map) -> Result<(), TooManyMaps> {
        if map.end <= map.start {
            return Ok(());
        }
        let space = match pid {
            None => &mut self.kernel,
            Some(pid) => self.procs.entry(pid).or_default(),
        };
        let before = space.size();
        cut(space, map.start, map.end);
        space.insert_mut(map.start, Rc::new(map));
        self.held = (self.held + space.size()).saturating_sub(before);
        if self.held > self.limit {
            return Err(TooManyMaps(self.held));
        }
        Ok(())
    }

    /// FORK of a new process: the child starts with its parent's maps.
    pub fn fork(&mut self, parent: u32, child: u32) -> Result<(), TooManyMaps> {
        if parent == child {
            return Ok(());
        }
        let Some(space) = self.procs.get(&parent).cloned() else {
            self.exec(child);
            return Ok(());
        };
        self.held += space.size();
        if let Some(old) = self.procs.insert(child, space) {
            self.held -= old.size();
        }
        if self.held > self.limit {
            return Err(TooManyMaps(self.held));
        }
        Ok(())
    }

    /// exec (a COMM record with the exec bit): the old maps are gone.
    pub fn exec(&mut self, pid: u32) {
        if let Some(old) = self.procs.remove(&pid) {
            self.held -= old.size();
        }
    }

    /// The maps of process `pid` (look addresses up with [`find`]).
    pub fn process(&self, pid: u32) -> Option<&Maps> {
        self.procs.get(&pid)
    }

    /// The kernel map holding `addr`.
    pub fn kernel(&self, addr: u64) -> Option<&Rc<Map>> {
        find(&self.kernel, addr)
    }
}

/// The map in `space` holding `addr`.
pub fn find(space: &Maps, addr: u64) -> Option<&Rc<Map>> {
    let (_, m) = space.range(..=addr).next_back()?;
    (addr < m.end).then_some(m)
}

/// Removes [start, end) from `space`, keeping the parts of maps outside it
/// (their file offsets moved with them).
/// `start < end` (a range the other way round panics in [`rpds`]).
fn cut(space: &mut Maps, start: u64, end: u64) {
    let mut hit: Vec<Rc<Map>> = Vec::new();
    if let Some((_, m)) = space.range(..start).next_back() {
        if m.end > start {
            hit.push(m.clone());
        }
    }
    hit.extend(space.range(start..end).map(|(_, m)| m.clone()));
    for m in hit {
        space.remove_mut(&m.start);
        if m.start < start {
            let head = Map {
                end: start,
                ..(*m).clone()
            };
            space.insert_mut(head.start, Rc::new(head));
        }
        if m.end > end {
            let tail = Map {
                start: end,
                pgoff: m.pgoff.wrapping_add(end - m.start),
                ..(*m).clone()
            };
            space.insert_mut(tail.start, Rc::new(tail));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, name: &str) -> Map {
        Map {
            start,
            end,
            pgoff: 0,
            filename: name.as_bytes().into(),
            build_id: None,
        }
    }

    fn name(s: &AddressSpaces, pid: u32, addr: u64) -> Option<String> {
        s.process(pid)
            .and_then(|p| find(p, addr))
            .map(|m| String::from_utf8_lossy(&m.filename).into_owned())
    }

    // A new map cuts the ones it overlaps, keeping their outer parts with
    // moved file offsets; lookups find the map holding an address only.
    #[test]
    fn overlaps_are_cut() {
        let mut s = AddressSpaces::new(100);
        s.insert(Some(1), map(0x1000, 0x5000, "a")).unwrap();
        s.insert(Some(1), map(0x2000, 0x3000, "b")).unwrap();
        assert_eq!(name(&s, 1, 0x1fff).as_deref(), Some("a"));
        assert_eq!(name(&s, 1, 0x2000).as_deref(), Some("b"));
        let tail = find(s.process(1).unwrap(), 0x3000).unwrap();
        assert_eq!(
            (tail.start, tail.pgoff, &*tail.filename),
            (0x3000, 0x2000, &b"a"[..])
        );
        assert_eq!(name(&s, 1, 0x5000), None);
        assert_eq!(name(&s, 2, 0x2000), None);
        assert_eq!(s.held, 3);
    }

    // FORK gives the child the parent's maps without changing the parent's;
    // exec empties a process.
    #[test]
    fn fork_and_exec() {
        let mut s = AddressSpaces::new(100);
        s.insert(Some(1), map(0x1000, 0x2000, "a")).unwrap();
        s.fork(1, 2).unwrap();
        s.insert(Some(2), map(0x1000, 0x2000, "c")).unwrap();
        assert_eq!(name(&s, 1, 0x1000).as_deref(), Some("a"));
        assert_eq!(name(&s, 2, 0x1000).as_deref(), Some("c"));
        s.exec(2);
        assert_eq!(name(&s, 2, 0x1000), None);
        s.insert(None, map(0xffff_0000, 0xffff_1000, "k")).unwrap();
        assert!(s.kernel(0xffff_0fff).is_some());
    }

    // Fork copies count against the limit: a recording forking a process
    // with many maps over and over is refused, not held.
    #[test]
    fn fork_copies_are_bounded() {
        let mut s = AddressSpaces::new(50);
        for i in 0..10 {
            s.insert(Some(1), map(i * 0x1000, i * 0x1000 + 0x800, "a"))
                .unwrap();
        }
        let mut err = None;
        for child in 2..20 {
            if let Err(e) = s.fork(1, child) {
                err = Some(e);
                break;
            }
        }
        assert!(matches!(err, Some(TooManyMaps(n)) if n > 50), "{err:?}");
    }
}
