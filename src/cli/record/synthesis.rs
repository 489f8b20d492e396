//! What perf synthesizes for the processes that ran before it, and what
//! record gives them in its place: perf runs with `--synth=no` (record
//! inserts their COMM and maps) but for the side-band records record does
//! not write (CGROUP, NAMESPACES).

use super::perf_args::PerfTarget;

impl PerfTarget {
    /// perf's `--synth`: nothing record inserts itself (COMM, maps), but
    /// the CGROUP records `--all-cgroups` needs (a walk of cgroupfs), and,
    /// for `--namespaces` of `-p`/`-t`/`-u`, perf 6.1's task synthesis,
    /// the only one writing NAMESPACES records (no maps read). A workload
    /// needs none (perf writes its NAMESPACES itself); `-a`/`-C` see
    /// [`PerfTarget::namespaces_lost`].
    pub(crate) fn synth(&self) -> &'static str {
        match (self.cgroups, self.namespaces && self.threads) {
            (false, false) => "no",
            (true, false) => "cgroup",
            (false, true) => "task",
            (true, true) => "task,cgroup",
        }
    }

    /// `--namespaces` system-wide (`-a`, `-C`): perf's task synthesis
    /// there writes a FORK of every process, which perf report takes as a
    /// new thread, dropping the maps record inserted before it; so
    /// processes that ran before perf get no NAMESPACES records.
    pub(crate) fn namespaces_lost(&self) -> bool {
        self.namespaces && !self.threads && self.target.is_some()
    }

    /// What [`PerfTarget::namespaces_lost`] costs, said before perf starts.
    pub(crate) fn warn_lost(&self) {
        if self.namespaces_lost() {
            eprintln!(
                "mmap2-synth record: warning: --namespaces with -a/-C: the processes \
                 running before perf get no NAMESPACES records (perf writes them with \
                 its task synthesis, whose FORK records would drop the maps record \
                 inserts), so `perf report --sort cgroup_id` shows them as 0/0x0; \
                 those started while it records get theirs. Use -p PIDS, or perf \
                 record itself, to have them"
            );
        }
    }
}
