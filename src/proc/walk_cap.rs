//! How far one maps walk may go: vm.max_map_count and a margin, past
//! which a process mapping ahead of the walk stops it, and the bytes of
//! text lines naming files by paths of PATH_MAX or more.

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

/// A text walk read [`LONG_NAME_TEXT`] bytes of lines whose names are
/// PATH_MAX or longer (written `//toolong`): the kernel writes such a path
/// whole on every line that maps it (a user can nest directories to make
/// it megabytes long and map it thousands of times: seconds of kernel time
/// per process), and only a user's own construction has one. What was read
/// is kept.
#[derive(Debug, thiserror::Error)]
#[error("stopped after {0} bytes of maps lines naming paths of PATH_MAX or more (the kernel writes each such path whole on every line)")]
pub struct LongNames(pub usize);

impl From<LongNames> for io::Error {
    fn from(e: LongNames) -> Self {
        io::Error::other(e)
    }
}

/// Bytes of `//toolong` lines one text walk reads at most (the first such
/// line is read whatever its length): about 40 ms of the kernel's time here.
pub const LONG_NAME_TEXT: usize = 4 << 20;

/// Whether `e` is a cap of this module stopping a walk ([`TooManyMaps`],
/// [`LongNames`]): the process keeps what was read and is reported cut
/// short.
pub fn is_walk_cap(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|e| e.is::<TooManyMaps>() || e.is::<LongNames>())
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
