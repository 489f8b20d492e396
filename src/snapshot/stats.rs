//! The counts a snapshot's summary reports.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use crate::model::{Part, Process, Source, Vma};
use crate::proc::idcache::IdNotes;
use crate::proc::{Skip, SkipReason, Snapshot};

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
    /// Ids whose file matched by inode but not device, and files not
    /// read (FUSE, mounted nowhere).
    pub build_id_notes: IdNotes,
    /// Skips by reason.
    pub skipped: BTreeMap<SkipReason, usize>,
    /// Processes whose comm, parent and threads came from the BPF task
    /// iterator (the others: /proc).
    pub iterator_heads: usize,
    /// Processes read per source.
    pub sources: BTreeMap<String, usize>,
    /// Kernel and module maps written.
    pub kernel_maps: usize,
    /// Why the kernel maps asked for were not written.
    pub kernel_skipped: Option<String>,
    /// BPF programs written (KSYMBOL and BPF_EVENT records).
    pub bpf_programs: usize,
    /// Their KSYMBOL records (JITed functions).
    pub bpf_functions: usize,
    /// BPF programs left out (not JITed, hidden or unreadable).
    pub bpf_left_out: usize,
    /// Why no BPF programs were written (no privileges, hidden addresses).
    pub bpf_skipped: Option<String>,
    /// Watched records added (made during the scan).
    pub watched_added: usize,
    /// Watched maps dropped: recorded before the scan read their place,
    /// over a map it wrote there (see `WatchFilter`).
    pub watched_superseded: usize,
    /// Watched records dropped as repeats: the same record again right
    /// after, from one thread (written through two events, or made again
    /// with nothing between).
    pub watched_repeated: usize,
    /// Records the watch lost (ring overflow).
    pub watch_lost: u64,
    /// `watch_lost` is a lower bound (a kernel before 6.0 does not count
    /// every loss).
    pub watch_lost_at_least: bool,
    /// Why watching was not possible (None: watched, or not asked).
    pub watch_skipped: Option<String>,
    /// CLOCK_MONOTONIC ns when the watch started (would have) and when the
    /// scan ended (live snapshots).
    pub watch_window: Option<(u64, u64)>,
    /// The scan was watched.
    pub watched: bool,
    /// Processes the watch saw forked during the scan, read after it.
    pub late_read: usize,
    /// Processes the watch saw forked during the scan and not read (gone,
    /// or past the bound): left to their FORK, their parent's maps.
    pub late_unread: usize,
    /// Whether each DSO seen so far has a build id, by [`name_key`] (names
    /// are a process's choice: randomly seeded hash).
    dso_ids: HashMap<NameKey, bool, foldhash::fast::RandomState>,
}

/// A DSO name as the summary tells names apart: two randomly seeded 64-bit
/// hashes of it, so counting a host's distinct names does not hold them (a
/// process can map 15,000 hard links of one file, each under a 3.8 KB
/// name). Two names that collide are counted as one DSO, which only the
/// summary line would show.
type NameKey = u128;

fn name_key(name: &[u8]) -> NameKey {
    use std::hash::BuildHasher;
    static SEEDS: OnceLock<[foldhash::fast::RandomState; 2]> = OnceLock::new();
    let [a, b] = SEEDS.get_or_init(Default::default);
    (u128::from(a.hash_one(name)) << 64) | u128::from(b.hash_one(name))
}

/// What the summary counts of one process, computed on the worker that read
/// it so the writer only adds numbers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessSummary {
    /// 1 for a process's first piece ([`Part`]), else 0.
    processes: usize,
    kernel_thread: bool,
    threads: usize,
    vmas: usize,
    source: Option<Source>,
    /// Its distinct DSO names ([`name_key`]), each with whether one of its
    /// VMAs has a build id.
    dsos: Vec<(NameKey, bool)>,
}

impl ProcessSummary {
    /// Bytes it holds, roughly.
    pub fn held_bytes(&self) -> usize {
        64 + 32 * self.dsos.len()
    }

    /// The counts of one process.
    pub fn of(p: &Process) -> ProcessSummary {
        ProcessSummary::of_part(p, Part::WHOLE)
    }

    /// The counts of one piece of a process: the process itself with its
    /// first piece, its threads with its last, its VMAs with each.
    pub fn of_part(p: &Process, part: Part) -> ProcessSummary {
        ProcessSummary::of_part_with(p, part, &p.vmas)
    }

    /// [`ProcessSummary::of_part`] counting DSOs of `dso_vmas` only (the
    /// VMAs of `p` that a worker has not yet reported).
    pub fn of_part_with<'a>(
        p: &Process,
        part: Part,
        dso_vmas: impl IntoIterator<Item = &'a Vma>,
    ) -> ProcessSummary {
        // A file's VMAs are mostly neighbours: merge runs first, so the
        // sort sees about one entry per file.
        let mut dsos: Vec<(&[u8], bool)> = Vec::new();
        for v in dso_vmas
            .into_iter()
            .filter(|v| v.is_file_backed() || v.is_vdso())
        {
            let (name, found) = (&v.name[..], v.build_id.is_some());
            match dsos.last_mut() {
                Some((n, f)) if *n == name => *f |= found,
                _ => dsos.push((name, found)),
            }
        }
        let mut keyed: Vec<(NameKey, bool)> =
            dsos.into_iter().map(|(n, f)| (name_key(n), f)).collect();
        keyed.sort_unstable_by_key(|d| d.0);
        let mut distinct: Vec<(NameKey, bool)> = Vec::with_capacity(keyed.len());
        for (key, found) in keyed {
            match distinct.last_mut() {
                Some((k, f)) if *k == key => *f |= found,
                _ => distinct.push((key, found)),
            }
        }
        ProcessSummary {
            processes: usize::from(part.first),
            kernel_thread: part.first && p.kernel_thread,
            threads: if part.last { p.threads.len() } else { 0 },
            vmas: p.vmas.len(),
            source: if part.first { p.source } else { None },
            dsos: distinct,
        }
    }
}

impl Stats {
    /// Counts the BPF programs written and why some or all were not.
    pub fn note_bpf(&mut self, progs: &crate::proc::bpf_progs::BpfPrograms) {
        self.bpf_programs = progs.programs.len();
        self.bpf_functions = progs.programs.iter().map(|p| p.funcs.len()).sum();
        self.bpf_left_out = progs.left_out;
        self.bpf_skipped.clone_from(&progs.skipped);
    }

    /// The counts of a snapshot.
    pub fn of(snap: &Snapshot) -> Stats {
        let mut s = Stats::default();
        for p in &snap.processes {
            s.add(ProcessSummary::of(p));
        }
        s.add_skips(&snap.skipped, snap.build_id_notes);
        s.iterator_heads = snap.iterator_heads;
        s
    }

    /// Adds one process.
    pub fn add(&mut self, p: ProcessSummary) {
        self.processes += p.processes;
        self.kernel_threads += usize::from(p.kernel_thread);
        self.threads += p.threads;
        self.vmas += p.vmas;
        if let Some(src) = p.source {
            let name = src.name();
            match self.sources.get_mut(name) {
                Some(n) => *n += 1,
                None => {
                    self.sources.insert(name.to_string(), 1);
                }
            }
        }
        for (key, found) in p.dsos {
            let had = self.dso_ids.get(&key).copied();
            match had {
                None => {
                    self.dsos += 1;
                    self.build_ids_found += usize::from(found);
                    self.dso_ids.insert(key, found);
                }
                Some(false) if found => {
                    self.build_ids_found += 1;
                    self.dso_ids.insert(key, true);
                }
                Some(_) => {}
            }
        }
        self.build_ids_missing = self.dsos - self.build_ids_found;
    }

    /// Adds the skipped processes and what the scan noted of build ids.
    pub fn add_skips(&mut self, skipped: &[Skip], notes: IdNotes) {
        self.build_id_notes.add(notes);
        for k in skipped {
            *self.skipped.entry(k.reason).or_default() += 1;
        }
    }
}
