//! What pprof's replay of forks costs, counted in bytes allocated (a test
//! binary of its own: it counts with its own global allocator, per thread,
//! so the test runner's other threads do not add to it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use mmap2_synth::pprof::maps::{AddressSpaces, Map};

struct Counting;

thread_local! {
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count(n: usize) {
    // no destructor, no allocation: safe inside the allocator
    let _ = BYTES.try_with(|b| b.set(b.get() + n as u64));
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn allocated() -> u64 {
    BYTES.with(Cell::get)
}

fn map(start: u64) -> Map {
    Map {
        start,
        end: start + 0x1000,
        pgoff: 0,
        filename: b"/x"[..].into(),
        build_id: None,
        file: None,
    }
}

/// Bytes allocated per cycle of fork_clone.py's pattern: `n` maps in
/// process 1, then `n` times FORK 1 -> 2, one map into 2, exec of 2.
fn bytes_per_cycle(n: u64) -> u64 {
    let mut s = AddressSpaces::new(usize::MAX);
    for i in 0..n {
        s.insert(Some(1), map(0x1000_0000 + 0x2000 * i)).unwrap();
    }
    let before = allocated();
    for _ in 0..n {
        s.fork(1, 2);
        s.insert(Some(2), map(0x1000)).unwrap();
        s.exec(2);
    }
    (allocated() - before) / n
}

// A child changing its forked maps copies what the change touches, not its
// parent's whole set: the cost of a fork-map-exec cycle barely grows with
// the parent's maps (4x the maps: well under 2x the bytes), so the
// fork_clone.py recording is replayed in time linear in its size (copying
// the set made it 4x per cycle, quadratic in all: 37 s for 8.7 MB).
#[test]
fn a_forked_child_changing_its_maps_copies_only_the_change() {
    let small = bytes_per_cycle(1_000);
    let big = bytes_per_cycle(4_000);
    assert!(
        big < 2 * small,
        "per fork-map-exec cycle: {small} bytes with 1,000 parent maps, {big} with 4,000"
    );
    assert!(big < 4096, "{big} bytes per cycle");
}

/// Bytes allocated and tree nodes counted held (the bound's measure) while
/// 1,000 children of a 4,000-map process each map into their copy, all
/// alive at the end: two maps in gaps and one over three of its maps.
fn bytes_and_nodes_of_changed_children() -> (u64, usize) {
    let mut s = AddressSpaces::new(usize::MAX);
    for i in 0..4000 {
        s.insert(Some(1), map(0x1000_0000 + 0x2000 * i)).unwrap();
    }
    let (bytes, held) = (allocated(), s.held());
    for child in 2..1002u32 {
        s.fork(1, child);
        let at = 0x1000_0000 + 0x2000 * u64::from(child) * 3;
        s.insert(Some(child), map(at + 0x1000)).unwrap();
        s.insert(Some(child), map(at + 0x3000)).unwrap();
        let mut over = map(at);
        over.end = at + 0x6000;
        s.insert(Some(child), over).unwrap();
    }
    (allocated() - bytes, s.held() - held)
}

// The bound counts what forked copies really hold: children changing their
// copies allocate at most 64 bytes per tree node counted (a node is 48, and
// each new map brings its entry), so the count, bounded by the input's size,
// bounds their memory, though forks themselves count nothing.
#[test]
fn nodes_counted_bound_what_changed_copies_allocate() {
    let (bytes, nodes) = bytes_and_nodes_of_changed_children();
    assert!(nodes > 0);
    assert!(
        bytes <= 64 * nodes as u64,
        "{bytes} bytes allocated for {nodes} nodes counted"
    );
}
