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

/// Where a scan reads each process's head (comm, parent, threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSource {
    /// A BPF task iterator when the scan is big enough to repay loading
    /// it ([`BPF_MIN_PROCESSES`]), walking every task costs less than the
    /// /proc reads it saves, and we may load it (capabilities, no seccomp
    /// filter), else /proc (the default). Its heads are read once before
    /// the scan and each is checked against its process's maps: one whose
    /// process no longer runs the executable image it ran then (it exec'd,
    /// or its pid went to another process) is read again from /proc.
    #[default]
    Auto,
    /// Only the BPF task iterator (an error where it cannot be loaded);
    /// kernel threads and processes it did not see still come from /proc.
    Bpf,
    /// Only `/proc/PID/stat` and each thread's `comm`, read just before
    /// each process's maps.
    Proc,
}

/// Processes from which [`TaskSource::Auto`] uses the task iterator: it
/// costs about 2 ms to set up (mapping and indexing the kernel's BTF,
/// loading the program), and reading a process's head from /proc about
/// 11 µs per process, more with threads.
pub const BPF_MIN_PROCESSES: usize = 200;

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
    /// Where process heads come from.
    pub tasks: TaskSource,
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
            tasks: TaskSource::Auto,
        }
    }
}
