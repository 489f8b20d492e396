//! The counts a snapshot's summary reports.

use std::collections::BTreeMap;

use crate::proc::{SkipReason, Snapshot};

/// Counts for the summary.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Processes read.
    pub processes: usize,
    /// Of which kernel threads.
    pub kernel_threads: usize,
    /// Threads of the processes read.
    pub threads: usize,
    /// VMAs emitted.
    pub vmas: usize,
    /// Distinct file-backed DSOs (by name).
    pub dsos: usize,
    /// DSOs with a build id.
    pub build_ids_found: usize,
    /// DSOs without one.
    pub build_ids_missing: usize,
    /// Ids whose file matched by inode but not device.
    pub build_ids_unverified: usize,
    /// Skips by reason.
    pub skipped: BTreeMap<SkipReason, usize>,
    /// Processes read per source.
    pub sources: BTreeMap<String, usize>,
}

impl Stats {
    /// The counts of a snapshot.
    pub fn of(snap: &Snapshot) -> Stats {
        let mut s = Stats::default();
        let mut dsos: BTreeMap<&[u8], bool> = BTreeMap::new();
        for p in &snap.processes {
            s.processes += 1;
            s.kernel_threads += usize::from(p.kernel_thread);
            s.threads += p.threads.len();
            s.vmas += p.vmas.len();
            if let Some(src) = p.source {
                *s.sources.entry(src.to_string()).or_default() += 1;
            }
            for v in &p.vmas {
                if v.is_file_backed() || v.is_vdso() {
                    *dsos.entry(&v.name).or_default() |= v.build_id.is_some();
                }
            }
        }
        s.dsos = dsos.len();
        s.build_ids_found = dsos.values().filter(|&&f| f).count();
        s.build_ids_missing = s.dsos - s.build_ids_found;
        s.build_ids_unverified = snap.unverified_build_ids;
        for k in &snap.skipped {
            *s.skipped.entry(k.reason).or_default() += 1;
        }
        s
    }
}
