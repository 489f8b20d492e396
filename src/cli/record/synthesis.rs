//! What perf synthesizes for the processes that ran before it, and what
//! record gives them in its place: perf runs with `--synth=no` (record
//! inserts their COMM and maps, of the processes perf would have given
//! them) but for the side-band records record does not write (CGROUP,
//! NAMESPACES).

use std::path::Path;

use mmap2_synth::perf::consts::{PERF_COUNT_SW_DUMMY, PERF_TYPE_SOFTWARE};
use mmap2_synth::perf::{Attr, Input, Layout};
use mmap2_synth::proc::{self, Target};
use mmap2_synth::rewrite::Which;

use super::perf_args::PerfTarget;

impl PerfTarget {
    /// perf's `--synth`: nothing record inserts itself (COMM, maps), but
    /// the CGROUP records `--all-cgroups` needs (a walk of cgroupfs), and,
    /// for `--namespaces` of a target (`-p`/`-t`/`-u`, `-a`/`-C`), perf
    /// 6.1's task synthesis, the only one writing NAMESPACES records (no
    /// maps read; system-wide with a FORK of every task, which the merge
    /// inserts its maps after). A workload needs none (perf writes its
    /// NAMESPACES itself).
    pub(crate) fn synth(&self) -> &'static str {
        match (self.cgroups, self.namespaces && self.target.is_some()) {
            (false, false) => "no",
            (true, false) => "cgroup",
            (false, true) => "task",
            (true, true) => "task,cgroup",
        }
    }
}

/// The processes record snapshots: those of `-t`'s threads (perf
/// synthesizes each one's process; the scan takes a thread's id for its
/// process), else those perf's arguments name (every one for `-a`, `-C`,
/// `-u`), else perf's `workload`.
pub(super) fn snapshot_target(pt: &PerfTarget, workload: &[u32]) -> Target {
    let processes = |ids: &[u32]| Target::Pids(proc::processes_of(Path::new("/proc"), ids));
    match (&pt.tids, &pt.target) {
        (Some(tids), _) => processes(tids),
        (None, Some(Target::Pids(pids))) => processes(pids),
        (None, Some(t)) => t.clone(),
        (None, None) => Target::Pids(workload.to_vec()),
    }
}

/// Which processes of the snapshot the merge inserts, as perf's synthesis
/// would have given them: every one named (`-p`, `-t`: the snapshot holds
/// those alone), sampled or not; every one of a system-wide recording
/// whose events sample nothing (`-a -e dummy`: side-band only); else those
/// the recording needs (its samples', see `merge`), perf's maps of the
/// others being of no use to a report.
pub(super) fn which(pt: &PerfTarget, perf_file: &Path) -> Which {
    let named = pt.tids.is_some() || matches!(pt.target, Some(Target::Pids(_)));
    if named || (pt.target == Some(Target::All) && samples_nothing(perf_file)) {
        Which::All
    } else {
        Which::Needed
    }
}

/// perf's recording has no event that samples: each is the dummy event
/// (side-band records alone) or has no sample period (`-n`, counting).
fn samples_nothing(perf_file: &Path) -> bool {
    let Ok(input) = Input::open_regular(perf_file) else {
        return false;
    };
    let Layout::File { header, .. } = &input.layout else {
        return false;
    };
    let Ok(attrs) = input.file_attrs(header) else {
        return false;
    };
    let dummy = |a: &Attr| a.type_ == PERF_TYPE_SOFTWARE && a.config == PERF_COUNT_SW_DUMMY;
    !attrs.list.is_empty() && (attrs.list.iter()).all(|(a, _)| dummy(a) || a.sample_period == 0)
}
