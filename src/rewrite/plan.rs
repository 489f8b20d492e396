//! Which processes a merge inserts, decided without I/O: the pids the
//! recording needs, the selection asked for, stale processes, maps already
//! present and build ids the table lacks.

use std::collections::HashSet;

use super::scan::RecordingFacts;
use crate::model::{Process, Vma};
use crate::perf::events::MapKey;
use crate::perf::BuildIdEntry;
use crate::snapshot::{mmap_filename, BpfRecord, HeldProcess, Runs};

/// Which processes get records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// Those the recording needs: pids of its samples, COMM and FORK records
    /// that have no MMAP/MMAP2 in it.
    Needed,
    /// Every process (of the live system or of the snapshot).
    All,
    /// These pids.
    Pids(Vec<u32>),
}

/// The processes of a snapshot file (each `pid` says its pid) that
/// `which` asks for, and the wanted pids it lacks.
pub fn select<P>(
    all: Vec<P>,
    pid: impl Fn(&P) -> u32,
    which: &Which,
    needed: &[u32],
) -> (Vec<P>, Vec<u32>) {
    let want: HashSet<u32> = match which {
        Which::All => return (all, Vec::new()),
        Which::Needed => needed.iter().copied().collect(),
        Which::Pids(p) => p.iter().copied().collect(),
    };
    let have: HashSet<u32> = all.iter().map(&pid).collect();
    let mut missing: Vec<u32> = want.iter().copied().filter(|p| !have.contains(p)).collect();
    missing.sort_unstable();
    (
        all.into_iter().filter(|p| want.contains(&pid(p))).collect(),
        missing,
    )
}

/// Splits live processes into those kept and the pids of stale ones.
pub fn split_stale(
    procs: Vec<Process>,
    is_stale: impl Fn(&Process) -> bool,
) -> (Vec<Process>, Vec<u32>) {
    let (stale, kept): (Vec<Process>, Vec<Process>) = procs.into_iter().partition(is_stale);
    (kept, stale.into_iter().map(|p| p.pid).collect())
}

/// The needed pids that no process, stale pid or skip accounts for.
pub fn missing(needed: &[u32], accounted: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let got: HashSet<u32> = accounted.into_iter().collect();
    needed
        .iter()
        .copied()
        .filter(|p| !got.contains(p))
        .collect()
}

/// A process whose maps a merge may insert: live ([`Process`]) or held
/// from a snapshot file ([`HeldProcess`]).
pub trait Maps {
    /// Its pid.
    fn pid(&self) -> u32;
    /// Drops the maps `keep` refuses; how many (repeats counted).
    fn retain_maps(&mut self, keep: &mut dyn FnMut(&Vma) -> bool) -> usize;
    /// True when it has none.
    fn no_maps(&self) -> bool;
}

impl Maps for Process {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn retain_maps(&mut self, keep: &mut dyn FnMut(&Vma) -> bool) -> usize {
        let before = self.vmas.len();
        self.vmas.retain(|v| keep(v));
        before - self.vmas.len()
    }
    fn no_maps(&self) -> bool {
        self.vmas.is_empty()
    }
}

impl Maps for HeldProcess {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn retain_maps(&mut self, keep: &mut dyn FnMut(&Vma) -> bool) -> usize {
        HeldProcess::retain_maps(self, keep)
    }
    fn no_maps(&self) -> bool {
        self.map_count() == 0
    }
}

/// Drops the maps the recording has already (counting them), then the
/// processes left with nothing to insert; a needed process keeps its COMM
/// even without maps (kernel threads).
pub fn dedupe<P: Maps>(processes: &mut Vec<P>, facts: &RecordingFacts, needed: &[u32]) -> usize {
    let mut dropped = 0;
    for p in processes.iter_mut() {
        let pid = p.pid();
        dropped += p.retain_maps(&mut |v| {
            !facts.existing.contains(&MapKey {
                pid,
                addr: v.start,
                len: v.len(),
                pgoff: v.offset,
                filename: mmap_filename(v).0.to_vec(),
            })
        });
    }
    processes.retain(|p| !p.no_maps() || needed.binary_search(&p.pid()).is_ok());
    dropped
}

/// Drops the KSYMBOL and BPF_EVENT records the recording has already
/// (the same fields).
pub fn dedupe_bpf(records: &mut Runs<BpfRecord>, facts: &RecordingFacts) {
    records.retain(|r| !facts.existing_bpf.contains(r));
}

/// The entries of `all` that the recording's BUILD_ID table lacks.
pub fn new_build_ids(all: Vec<BuildIdEntry>, facts: &RecordingFacts) -> Vec<BuildIdEntry> {
    all.into_iter()
        .filter(|b| {
            !facts
                .existing_ids
                .contains(&(b.filename.clone(), b.build_id))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Selection from a snapshot keeps the wanted pids and names the missing ones.
    #[test]
    fn select_and_missing() {
        let all = vec![Process::empty(1), Process::empty(3)];
        let pid = |p: &Process| p.pid;
        let (got, miss) = select(all.clone(), pid, &Which::Pids(vec![3, 4]), &[]);
        assert_eq!((got.len(), got[0].pid, miss), (1, 3, vec![4]));
        let (got, miss) = select(all.clone(), pid, &Which::Needed, &[1]);
        assert_eq!((got.len(), miss), (1, vec![]));
        assert_eq!(select(all, pid, &Which::All, &[]).0.len(), 2);
        assert_eq!(missing(&[1, 2, 3], [2]), vec![1, 3]);
    }
}
