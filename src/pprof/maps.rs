//! The address spaces a recording describes, replayed record by record: per
//! process the maps its MMAP/MMAP2 records made (a new map cuts what it
//! overlaps, as the kernel's would), copied to a child on FORK, emptied on
//! exec, dropped some time after its EXIT ([`AddressSpaces::exit`]); the
//! kernel's and modules' maps shared by all. Pure. A process's maps are a
//! persistent tree ([`rpds`]): a fork shares its parent's, and a change on
//! either side copies only the tree nodes on its path (O(log n)), not the
//! whole set: a child mapping into a copy of a parent with 40,000 maps,
//! 40,000 times over, cost 1.6 billion entry copies.
//!
//! What is held is bounded by the input's size ([`map_limit`]), counted in
//! tree nodes that can be alive, not in maps each process sees: a fork
//! makes none (600 children of a 2,000-map process that exit without
//! mapping anything hold what their parent does, not 1.2 million entries).
//! The nodes a space makes between two of its forks form a `Chunk` shared
//! with the children forked since, gone with the last of them; a change to
//! a tree that may share nodes counts the path it may copy, up to the
//! tree's size. Changes (maps inserted and removed, a cut of every forked
//! copy counting anew) are bounded the same way, which bounds the time.

use foldhash::HashMap;
use std::rc::Rc;

use crate::model::{BuildId, FileKey};

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
    /// Device and inode, from an inode-form MMAP2 record: a map without a
    /// build id is then known by the file its live process maps there.
    pub file: Option<FileKey>,
}

impl Map {
    /// The name a process's anonymous mapping is written with: pprof merges
    /// mappings of the same size, offset and name (or build id), moving one's
    /// addresses into the other's, so each process's anonymous ranges are
    /// named apart (`[anon] pid 7 at 0x7f0000001000`; starting with `[`, which
    /// pprof does not try to open as a file).
    pub fn anonymous_name(&self, pid: u32) -> String {
        let name = match &*self.filename {
            b"//anon" => "[anon]".into(),
            other => String::from_utf8_lossy(other),
        };
        format!("{name} pid {pid} at {:#x}", self.start)
    }
}

/// Whether a map of this name is a process's own memory, no file's:
/// perf's anonymous names (`//anon`, `/dev/zero`, `/anon_hugepage`), its
/// "no DSO" ones (`[heap]`, `[stack`, `/SYSV`) and the kernel's named
/// anonymous memory (`[anon:NAME]`). perf names code in such memory from
/// the process's `/tmp/perf-PID.map` (JIT compilers write it); two
/// processes' are never the same memory, whatever their names and sizes.
pub fn is_anonymous(name: &[u8]) -> bool {
    name == b"//anon"
        || name == b"[heap]"
        || [
            &b"/dev/zero"[..],
            b"/anon_hugepage",
            b"[stack",
            b"/SYSV",
            b"[anon:",
        ]
        .iter()
        .any(|p| name.starts_with(p))
}

/// One address space's maps, by start address (cloned in O(1), sharing).
pub type Maps = rpds::RedBlackTreeMap<u64, Rc<Map>>;

/// Past a bound on what the replay holds or does: the recording is refused
/// rather than exhaust memory or time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooManyMaps {
    /// Tree nodes that may be alive at once (forked copies share theirs).
    Held(usize),
    /// Maps inserted and removed so far (a cut of each forked copy counts).
    Changes(usize),
}

impl TooManyMaps {
    /// What passed its bound, and the count, for the error.
    pub fn what(self) -> (&'static str, usize) {
        match self {
            TooManyMaps::Held(n) => ("number of map tree nodes held at once", n),
            TooManyMaps::Changes(n) => ("number of map changes (each forked copy's counted)", n),
        }
    }
}

/// Tree nodes one address space made between two of its forks: shared with
/// the spaces forked from it since (and theirs), so alive until the last
/// of them is gone; `older` are the chunks its tree was made from.
#[derive(Debug)]
struct Chunk {
    /// At most this many of its nodes are alive.
    nodes: usize,
    older: Option<Rc<Chunk>>,
}

impl Drop for Chunk {
    /// One by one: a chain of a million forks dropped recursively would
    /// overflow the stack.
    fn drop(&mut self) {
        let mut next = self.older.take();
        while let Some(c) = next {
            next = Rc::try_unwrap(c).ok().and_then(|mut c| c.older.take());
        }
    }
}

/// One process's maps and what they hold.
#[derive(Debug)]
struct Space {
    maps: Maps,
    /// Nodes it may share with others: made before its last fork, or
    /// inherited at its own.
    shared: Option<Rc<Chunk>>,
    /// Nodes made since its last fork, its alone: at most its size.
    own: usize,
    /// The first file mapped into it (its executable: exec and perf's
    /// synthesis map it first), kept for the profile once it is dropped.
    first: Option<Rc<Map>>,
    /// Which space this is (a pid's EXIT must not drop its successor's).
    serial: u64,
}

/// Every process's maps and the kernel's.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    procs: HashMap<u32, Space>,
    kernel: Maps,
    /// The first file of each process dropped after its exit.
    gone: HashMap<u32, Rc<Map>>,
    /// Live threads: tid -> pid.
    threads: HashMap<u32, u32>,
    /// Per pid: its live threads, whether its leader exited.
    live: HashMap<u32, (u32, bool)>,
    /// Processes whose last thread exited: (pid, serial, rounds since).
    exited: Vec<(u32, u64, u8)>,
    /// Tree nodes that may be alive, bounded by `limit`.
    held: usize,
    /// Maps inserted and removed so far, bounded by `limit`.
    changes: usize,
    serials: u64,
    limit: usize,
}

/// Most tree nodes held at once, and most map changes, for an input of
/// `len` bytes: one per 8 bytes (a map record takes at least 48), at least
/// 1M, so forked copies cannot multiply what a small file holds or costs
/// without bound.
pub fn map_limit(len: u64) -> usize {
    usize::try_from(len / 8).unwrap_or(usize::MAX).max(1 << 20)
}

/// Nodes a change to a tree of `size` may copy when shared: its path
/// (a red-black tree is at most 2 lg(n + 1) high) and a new node.
fn path(size: usize) -> usize {
    2 * (usize::BITS - (size + 1).leading_zeros()) as usize + 2
}

impl AddressSpaces {
    /// Empty, holding at most `limit` tree nodes and making at most
    /// `limit` changes.
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
        let Some(pid) = pid else {
            let before = self.kernel.size();
            let removed = cut(&mut self.kernel, map.start, map.end);
            self.kernel.insert_mut(map.start, Rc::new(map));
            self.held = (self.held + self.kernel.size()).saturating_sub(before);
            return self.changed(1 + removed);
        };
        let serials = &mut self.serials;
        let space = self.procs.entry(pid).or_insert_with(|| {
            *serials += 1;
            Space {
                maps: Maps::new(),
                shared: None,
                own: 0,
                first: None,
                serial: *serials,
            }
        });
        self.held -= space.own + compact(space);
        let size = space.maps.size();
        let removed = cut(&mut space.maps, map.start, map.end);
        let map = Rc::new(map);
        if space.first.is_none() && map.filename.first() == Some(&b'/') {
            space.first = Some(map.clone());
        }
        space.maps.insert_mut(map.start, map);
        let after = space.maps.size();
        space.own = match space.shared {
            None => after,
            // a removal copies its path, both spines under the node it
            // removes and, rebalancing, two siblings a level: 4 paths
            Some(_) => (space.own + (1 + 4 * removed) * path(size)).min(after),
        };
        self.held += space.own;
        self.changed(1 + removed)
    }

    /// Counts `n` changes; fails past a bound.
    fn changed(&mut self, n: usize) -> Result<(), TooManyMaps> {
        self.changes = self.changes.saturating_add(n);
        if self.held > self.limit {
            return Err(TooManyMaps::Held(self.held));
        }
        if self.changes > self.limit {
            return Err(TooManyMaps::Changes(self.changes));
        }
        Ok(())
    }

    /// FORK of a new process: the child starts with its parent's maps,
    /// sharing every node (none made, so none counted).
    pub fn fork(&mut self, parent: u32, child: u32) {
        if parent == child {
            return;
        }
        self.live.remove(&child);
        self.gone.remove(&child);
        let Some(p) = self.procs.get_mut(&parent) else {
            self.exec(child);
            return;
        };
        // what the parent made so far is shared from now on
        if p.own > 0 || p.shared.is_none() {
            let older = p.shared.take();
            p.shared = Some(Rc::new(Chunk {
                nodes: p.own,
                older,
            }));
            p.own = 0;
        }
        self.serials += 1;
        let space = Space {
            maps: p.maps.clone(),
            shared: p.shared.clone(),
            own: 0,
            first: p.first.clone(),
            serial: self.serials,
        };
        if let Some(old) = self.procs.insert(child, space) {
            self.release(old);
        }
    }

    /// exec (a COMM record with the exec bit): the old maps are gone.
    pub fn exec(&mut self, pid: u32) {
        if let Some(old) = self.procs.remove(&pid) {
            self.release(old);
        }
    }

    /// Uncounts what a space dropped held alone.
    fn release(&mut self, mut old: Space) {
        self.held -= old.own;
        let mut next = old.shared.take();
        while let Some(c) = next {
            next = match Rc::try_unwrap(c) {
                Ok(mut c) => {
                    self.held -= c.nodes;
                    c.older.take()
                }
                Err(_) => None,
            };
        }
    }

    /// Thread `tid` of process `pid` is alive (a COMM, FORK or sample of it).
    pub fn thread(&mut self, pid: u32, tid: u32) {
        match self.threads.insert(tid, pid) {
            Some(p) if p == pid => return,
            Some(p) => {
                self.thread_gone(p);
            }
            None => {}
        }
        self.live.entry(pid).or_default().0 += 1;
    }

    /// One thread of `pid` fewer: true when none is left and its leader
    /// exited.
    fn thread_gone(&mut self, pid: u32) -> bool {
        let Some((n, leader_gone)) = self.live.get_mut(&pid) else {
            return true;
        };
        *n = n.saturating_sub(1);
        *n == 0 && *leader_gone
    }

    /// EXIT of thread `tid` of `pid`. Once the leader and every thread known
    /// alive exited, the process's maps are dropped, but not yet: perf
    /// writes per-CPU buffers in rounds, so a sample taken before the EXIT
    /// may come after it in the file, up to the end of the next round
    /// (perf report sorts by time; its ordering flushes on that rule).
    /// They go at the second FINISHED_ROUND after it ([`Self::round`]).
    pub fn exit(&mut self, pid: u32, tid: u32) {
        if self.threads.get(&tid) == Some(&pid) {
            self.threads.remove(&tid);
        } else {
            // a thread never seen: it counts no less to the leader
            self.live.entry(pid).or_default().0 += 1;
        }
        if tid == pid {
            self.live.entry(pid).or_default().1 = true;
        }
        if self.thread_gone(pid) {
            self.live.remove(&pid);
            if let Some(space) = self.procs.get(&pid) {
                self.exited.push((pid, space.serial, 0));
            }
        }
    }

    /// A FINISHED_ROUND: the processes that exited two rounds ago are
    /// dropped (their first file kept); true if any was.
    pub fn round(&mut self) -> bool {
        let mut dropped = Vec::new();
        self.exited.retain_mut(|(pid, serial, rounds)| {
            *rounds += 1;
            if *rounds < 2 {
                return true;
            }
            dropped.push((*pid, *serial));
            false
        });
        let mut any = false;
        for (pid, serial) in dropped {
            // not a successor, nor alive again (a thread seen since)
            let same = self.procs.get(&pid).is_some_and(|s| s.serial == serial);
            if !same || self.live.contains_key(&pid) {
                continue;
            }
            if let Some(old) = self.procs.remove(&pid) {
                if let Some(first) = &old.first {
                    self.gone.insert(pid, first.clone());
                }
                self.release(old);
                any = true;
            }
        }
        any
    }

    /// The maps of process `pid` (look addresses up with [`find`]).
    pub fn process(&self, pid: u32) -> Option<&Maps> {
        self.procs.get(&pid).map(|s| &s.maps)
    }

    /// The maps of process `pid` at the end: all of them while it lives,
    /// its first file once it was dropped after its exit.
    pub fn at_end(&self, pid: u32) -> impl Iterator<Item = &Rc<Map>> {
        let live = self.procs.get(&pid).map(|s| s.maps.values());
        let gone = live.is_none().then(|| self.gone.get(&pid)).flatten();
        live.into_iter().flatten().chain(gone)
    }

    /// The kernel map holding `addr`.
    pub fn kernel(&self, addr: u64) -> Option<&Rc<Map>> {
        find(&self.kernel, addr)
    }

    /// The kernel's own map (`[kernel.kallsyms]...`) as last recorded.
    pub fn kernel_image(&self) -> Option<&Rc<Map>> {
        let kernel = crate::proc::kernel::KERNEL_DSO;
        self.kernel
            .values()
            .find(|m| m.filename.starts_with(kernel))
    }

    /// Tree nodes that may be alive now (what the bound counts).
    pub fn held(&self) -> usize {
        self.held
    }
}

/// Takes into a space's own count the chunks no other space holds any
/// more (their forks are gone), returning their nodes: once none is left,
/// its tree shares no node and holds exactly its size.
fn compact(space: &mut Space) -> usize {
    let mut taken = 0;
    while let Some(c) = space.shared.take() {
        match Rc::try_unwrap(c) {
            Ok(mut c) => {
                taken += c.nodes;
                space.own += c.nodes;
                space.shared = c.older.take();
            }
            Err(c) => {
                space.shared = Some(c);
                return taken;
            }
        }
    }
    space.own = space.maps.size();
    taken
}

/// The map in `space` holding `addr`.
pub fn find(space: &Maps, addr: u64) -> Option<&Rc<Map>> {
    let (_, m) = space.range(..=addr).next_back()?;
    (addr < m.end).then_some(m)
}

/// Removes [start, end) from `space`, keeping the parts of maps outside it
/// (their file offsets moved with them); returns how many maps it removed
/// and put back.
/// `start < end` (a range the other way round panics in [`rpds`]).
fn cut(space: &mut Maps, start: u64, end: u64) -> usize {
    let mut hit: Vec<Rc<Map>> = Vec::new();
    if let Some((_, m)) = space.range(..start).next_back() {
        if m.end > start {
            hit.push(m.clone());
        }
    }
    hit.extend(space.range(start..end).map(|(_, m)| m.clone()));
    let mut changes = hit.len();
    for m in hit {
        space.remove_mut(&m.start);
        if m.start < start {
            let head = Map {
                end: start,
                ..(*m).clone()
            };
            space.insert_mut(head.start, Rc::new(head));
            changes += 1;
        }
        if m.end > end {
            let tail = Map {
                start: end,
                pgoff: m.pgoff.wrapping_add(end - m.start),
                ..(*m).clone()
            };
            space.insert_mut(tail.start, Rc::new(tail));
            changes += 1;
        }
    }
    changes
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
            file: None,
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
        s.fork(1, 2);
        s.insert(Some(2), map(0x1000, 0x2000, "c")).unwrap();
        assert_eq!(name(&s, 1, 0x1000).as_deref(), Some("a"));
        assert_eq!(name(&s, 2, 0x1000).as_deref(), Some("c"));
        s.exec(2);
        assert_eq!(name(&s, 2, 0x1000), None);
        s.insert(None, map(0xffff_0000, 0xffff_1000, "k")).unwrap();
        assert!(s.kernel(0xffff_0fff).is_some());
    }

    /// Process 1 with `n` maps, in a space bounded by `limit`.
    fn parent_of(n: u64, limit: usize) -> AddressSpaces {
        let mut s = AddressSpaces::new(limit);
        for i in 0..n {
            s.insert(Some(1), map(i * 0x2000, i * 0x2000 + 0x1000, "/a"))
                .unwrap();
        }
        s
    }

    // Forks share their parent's nodes: 600 children of a 2,000-map
    // process hold what it holds (the logical count, 1.2 million, was
    // refused), and a child's change counts at most the path it copies.
    #[test]
    fn forks_hold_no_copies() {
        let mut s = parent_of(2000, 10_000);
        assert_eq!(s.held, 2000);
        for child in 2..602 {
            s.fork(1, child);
        }
        assert_eq!(s.held, 2000);
        s.insert(Some(7), map(0x1000, 0x1800, "/b")).unwrap();
        let copied = s.held - 2000;
        assert!((1..=path(2000)).contains(&copied), "{copied}");
        assert_eq!(name(&s, 7, 0x1000).as_deref(), Some("/b"));
        assert_eq!(name(&s, 1, 0x1000), None);
        assert_eq!(name(&s, 8, 0x0).as_deref(), Some("/a"));
        // the children gone, the parent's tree is its own again
        for child in 2..602 {
            s.exec(child);
        }
        s.insert(Some(1), map(0x10_0000_0000, 0x10_0000_1000, "/c"))
            .unwrap();
        assert_eq!(s.held, 2001);
    }

    // Children that change their copies are bounded: each holds at most its
    // size, and their sum is refused past the limit; cutting every map of a
    // shared tree in child after child is refused by the count of changes
    // (the time it takes), though each child then holds one map.
    #[test]
    fn changed_copies_and_repeated_cuts_are_bounded() {
        let mut s = parent_of(1000, 20_000);
        let mut err = None;
        for child in 2..1000 {
            s.fork(1, child);
            let at = child as u64 * 0x2000 + 0x1800;
            let m = map(at, at + 0x100, "/b");
            if let Err(e) = s.insert(Some(child), m) {
                err = Some((child, e));
                break;
            }
        }
        let Some((child, TooManyMaps::Held(n))) = err else {
            panic!("{err:?}");
        };
        assert!(
            n > 20_000 && child as usize > 19_000 / path(1000),
            "{child} {n}"
        );
        let mut s = parent_of(1000, 20_000);
        let mut err = None;
        for child in 2..100 {
            s.fork(1, child);
            if let Err(e) = s.insert(Some(child), map(0, 1 << 40, "/all")) {
                err = Some((child, e));
                break;
            }
            assert!(s.held < 1000 + 100 * child as usize, "{}", s.held);
        }
        assert!(
            matches!(err, Some((c, TooManyMaps::Changes(_))) if c >= 19),
            "{err:?}"
        );
    }

    // A process goes at the second FINISHED_ROUND after its leader and every
    // thread known alive exited (samples taken before its EXIT may follow
    // it in the file until then), keeping its first file; not while a
    // thread lives, nor when the pid is a new process by then.
    #[test]
    fn exited_processes_go_two_rounds_later() {
        let mut s = parent_of(10, 1000);
        s.thread(1, 1);
        s.thread(1, 2);
        s.fork(1, 5);
        s.thread(5, 5);
        s.insert(Some(5), map(0x100_0000, 0x100_1000, "/five"))
            .unwrap();
        s.exit(1, 1);
        s.exit(5, 5);
        assert!(!s.round());
        assert!(s.process(5).is_some());
        assert!(s.round());
        assert!(s.process(5).is_none() && s.process(1).is_some());
        let first: Vec<_> = s.at_end(5).map(|m| m.filename.clone()).collect();
        assert_eq!(first, vec![Rc::from(&b"/a"[..])], "inherited first file");
        assert_eq!(s.held, 10, "{}", s.held);
        // the last thread of 1 exits; a thread seen meanwhile keeps it
        s.exit(1, 2);
        s.thread(1, 3);
        s.round();
        s.round();
        assert!(s.process(1).is_some());
        // pid 6 exits, and is forked anew before the rounds: kept
        s.fork(1, 6);
        s.exit(6, 6);
        s.fork(1, 6);
        s.round();
        s.round();
        assert!(s.process(6).is_some());
        // an EXIT of a thread alone leaves its process
        s.thread(6, 6);
        s.exit(6, 60);
        s.round();
        s.round();
        assert!(s.process(6).is_some());
        assert_eq!(s.at_end(6).count(), 10);
    }

    /// What `held` should be: each space's own nodes, each chunk any space
    /// still holds once, the kernel's maps.
    fn recount(s: &AddressSpaces) -> usize {
        let mut seen = std::collections::HashSet::new();
        let mut n = s.kernel.size();
        for space in s.procs.values() {
            n += space.own;
            let mut c = space.shared.as_ref();
            while let Some(chunk) = c {
                if seen.insert(Rc::as_ptr(chunk)) {
                    n += chunk.nodes;
                }
                c = chunk.older.as_ref();
            }
        }
        n
    }

    // The count stays what the spaces hold through any mix of maps, cuts,
    // forks, execs, exits and rounds (a pseudo-random walk of 20,000 of
    // them over 40 pids), and each space's own count stays within its size.
    #[test]
    fn held_is_what_the_spaces_hold() {
        let mut s = AddressSpaces::new(usize::MAX);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..20_000 {
            let (pid, other) = (next(40) as u32 + 1, next(40) as u32 + 1);
            match next(10) {
                0..=4 => {
                    let at = next(256) * 0x1000;
                    let m = map(at, at + (1 + next(8)) * 0x800, "/x");
                    s.insert(Some(pid), m).unwrap();
                }
                5 => s.fork(other, pid),
                6 => s.exec(pid),
                7 => {
                    s.thread(pid, pid);
                    s.exit(pid, pid);
                }
                8 => {
                    s.round();
                }
                _ => {
                    let at = next(16) * 0x1000;
                    s.insert(
                        None,
                        map(0xffff_0000_0000 + at, 0xffff_0000_0000 + at + 0x1000, "k"),
                    )
                    .unwrap();
                }
            }
            assert_eq!(s.held, recount(&s));
            assert!(s.procs.values().all(|p| p.own <= p.maps.size()));
        }
    }
}
