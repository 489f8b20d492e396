//! How far one maps walk may go: vm.max_map_count and a margin, past
//! which a process mapping ahead of the walk stops it.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// A walk went on past the VMAs a process can have at once: it maps new
/// ones ahead of the walk (and unmaps behind it) as fast as they are read,
/// which would otherwise stretch the walk, and the output, for as long as
/// the process lives. What was read is kept.
#[derive(Debug, thiserror::Error)]
#[error("stopped after {0} maps, more than vm.max_map_count allows at once: the process maps them as fast as they are read")]
pub struct TooManyMaps(pub usize);

impl From<TooManyMaps> for io::Error {
    fn from(e: TooManyMaps) -> Self {
        io::Error::other(e)
    }
}

impl TooManyMaps {
    /// Whether `e` is this.
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|e| e.is::<TooManyMaps>())
    }
}

/// The VMAs one walk may visit: vm.max_map_count (read under `proc_root`;
/// 65,530, the kernel's default, when unreadable) and a quarter more, plus
/// 1,024, room for a process that maps while it is read.
pub fn walk_limit(proc_root: &Path) -> usize {
    let mut text = String::new();
    let max = File::open(proc_root.join("sys/vm/max_map_count"))
        .and_then(|f| f.take(32).read_to_string(&mut text))
        .ok()
        .and_then(|_| text.trim().parse::<usize>().ok())
        .unwrap_or(65_530);
    max.saturating_add(max / 4).saturating_add(1024)
}
