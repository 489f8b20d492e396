//! What a scan reads and how: the processes ([`Target`]) and the options
//! ([`Options`]), shared by the parallel scan and the reading of each
//! process.

use std::path::PathBuf;

use super::source::SourceChoice;
use crate::model::Selection;

/// Which processes to snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every process in /proc (except this tool itself).
    All,
    /// These pids.
    Pids(Vec<u32>),
    /// Every process whose real uid is this.
    Uid(u32),
}

/// Snapshot options.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    pub source: SourceChoice,
    /// Resolve build ids.
    pub build_ids: bool,
    /// Worker threads (None = all cores).
    pub jobs: Option<usize>,
    /// Root of the proc filesystem (normally `/proc`).
    pub proc_root: PathBuf,
    /// VMAs one walk of a maps file visits before the process is cut
    /// short; None: [`walk_limit`](super::source::walk_limit), from vm.max_map_count.
    pub max_vmas: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            selection: Selection::Exec,
            source: SourceChoice::Auto,
            build_ids: true,
            jobs: None,
            proc_root: PathBuf::from("/proc"),
            max_vmas: None,
        }
    }
}
