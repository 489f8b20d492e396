//! What a rewrite learns from one pass over a recording: the pids its records
//! name, which of them it gives perf the maps of, the maps and build ids already present, the
//! sample time range, the sampled addresses that tell whether a process is
//! the one sampled (see [`super::coverage`]) and, in pipe mode, where
//! synthesized records belong.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::coverage::Sampled;
use samples::Latest;

use crate::bytes::{Endian, Rd};
use crate::model::{BuildId, Selection};
use crate::perf::consts::{feature, misc, types};
use crate::perf::events::{parse_map, MapKey};
use crate::perf::features::{parse_build_id_table, parse_string_feature};
use crate::perf::{Attrs, FormatError, FormatErrorKind, RecordHeader, Visitor};
use crate::proc::kernel::KERNEL_DSO;
use crate::snapshot::{is_kernel_map, BpfRecord};

mod samples;

/// The facts of a recording that plan a merge.
pub struct RecordingFacts {
    /// Pids named by samples, COMM and FORK records (never 0 or -1), each
    /// with its place in `kept`.
    pids: BTreeMap<u32, usize>,
    /// How many sample addresses of each pid `sampled` has, by its place.
    kept: Vec<u8>,
    /// Where `sampled` keeps each pid's latest addresses, by its place:
    /// asked for once its first are kept ([`Latest`]).
    latest: Vec<Latest>,
    /// Samples' user-mode addresses (module `samples`) and executable
    /// maps, by pid: whether a process to insert is the one sampled.
    pub sampled: Sampled,
    /// Pids whose maps the recording gives perf whole: it has one
    /// synthesized for them (time 0, or records without times), or saw
    /// them born (a FORK of a new process; an exec COMM of one with no
    /// sample before that ran its image, in user mode or in the kernel
    /// with user frames: those need the first image's maps). A process that
    /// only mapped something during the recording is not among them: its
    /// maps from before are missing. Complete once [`RecordingFacts::finish`]
    /// has run.
    pub covered: HashSet<u32>,
    /// Processes named by a FORK perf synthesized (time 0): perf's task
    /// synthesis of those running when it started, not births. Covered
    /// (as before) when perf synthesized maps too, so that a process with
    /// none there (a kernel thread) is given whole; not when it wrote none
    /// (`perf record --synth=task`, `--namespaces` with `-a`): then every
    /// one lacks its maps.
    synth_forked: HashSet<u32>,
    /// The recording has a user-space map perf synthesized (time 0).
    synth_maps: bool,
    /// Threads renamed during the recording: tids of the kernel's non-exec
    /// COMMs with a time (`prctl(PR_SET_NAME)`, a write to `comm`; perf's
    /// own are at time 0), at most [`MAX_RENAMED`] (past that, none is
    /// added). A live merge writes no COMM of theirs: their names of now,
    /// at time 0, would name their samples from before the rename too.
    pub renamed: HashSet<u32>,
    /// Processes covered by an exec COMM alone, with its time: a sample
    /// with a user-mode address taken before it (written after it from
    /// another CPU's buffer) needs the first image's maps after all.
    exec_covered: HashMap<u32, u64>,
    /// The end of the last FORK perf synthesized before the first sample,
    /// round or compressed record: perf takes a FORK as a new thread,
    /// dropping the maps inserted before it, so a file-mode merge inserts
    /// after perf's synthesized records (see [`RecordingFacts::file_insert_at`]).
    head_fork_end: Option<u64>,
    /// The recording has a map of the host kernel (`[kernel.kallsyms]...`,
    /// pid -1, cpumode kernel).
    pub has_kernel_map: bool,
    /// The recording's KSYMBOL and BPF_EVENT records (of BPF programs),
    /// each distinct one once.
    pub existing_bpf: HashSet<BpfRecord>,
    /// Maps present, of the pids `remember` names.
    pub existing: HashSet<MapKey>,
    /// Whose maps go into `existing`. Keeps memory bounded by what may be
    /// inserted, not by the recording's maps.
    pub remember: Remember,
    /// Which maps a merge inserts: executable ones, and data maps too when
    /// perf would have synthesized them (see `rewrite::merge`). Set after
    /// the scan, from the recording's attrs and the options; `Exec` until then.
    pub maps: Selection,
    /// (file name, build id) pairs of the BUILD_ID table.
    pub existing_ids: HashSet<(Vec<u8>, BuildId)>,
    /// Pipe mode: the OSRELEASE string of the stream's HEADER_FEATURE.
    pub osrelease: Option<Vec<u8>>,
    /// First and last nonzero sample time.
    pub time: Option<(u64, u64)>,
    /// Pipe mode: where to insert (after FINISHED_INIT, else before the first
    /// sample, round or compressed record).
    pub insert_at: Option<u64>,
    /// Pipe mode: the end of the first FINISHED_INIT seen before any sample.
    pub after_init: Option<u64>,
    /// Byte order of the records.
    pub endian: Endian,
    /// The pid of the last sample, already in `pids`, its place in `kept`
    /// and whether its first addresses are still being kept: runs of
    /// samples of one process (a CPU's buffer) then cost no lookup.
    last_pid: Option<(u32, usize, bool)>,
}

/// Renamed threads a scan keeps at most (`RecordingFacts::renamed`), in
/// under 1 MiB; the threads a recording renames after those keep the
/// COMM of their name of now in a live merge.
pub const MAX_RENAMED: usize = 1 << 16;

/// Whose maps a scan remembers, for a merge not to insert them again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remember {
    /// Every process's.
    All,
    /// These pids' (`merge -p`, `-a`: those that may get records).
    Pids(HashSet<u32>),
    /// Those of pids whose maps the recording does not give whole when the
    /// map is read (not in `covered`: no synthesized map, no FORK or exec
    /// COMM of theirs before it): the default merge inserts into those
    /// alone, and such a process may have mapped something during a
    /// `--synth=no` recording (a `dlopen`) that it still maps. A pid covered
    /// later (an exec COMM) keeps what was remembered; it gets nothing.
    Uncovered,
}

impl RecordingFacts {
    /// Facts to gather, remembering the maps `remember` says.
    pub fn new(e: Endian, remember: Remember) -> RecordingFacts {
        RecordingFacts {
            pids: BTreeMap::new(),
            kept: Vec::new(),
            latest: Vec::new(),
            sampled: Sampled::default(),
            covered: HashSet::new(),
            synth_forked: HashSet::new(),
            exec_covered: HashMap::new(),
            renamed: HashSet::new(),
            synth_maps: false,
            head_fork_end: None,
            has_kernel_map: false,
            existing_bpf: HashSet::new(),
            existing: HashSet::new(),
            remember,
            maps: Selection::Exec,
            existing_ids: HashSet::new(),
            osrelease: None,
            time: None,
            insert_at: None,
            after_init: None,
            endian: e,
            last_pid: None,
        }
    }

    /// Completes the facts once the scan is over: the processes perf's
    /// synthesis forked are covered when it synthesized maps (see
    /// `synth_forked`), and the sampled addresses are sorted.
    pub fn finish(&mut self) {
        if self.synth_maps {
            self.covered.extend(self.synth_forked.drain());
        }
        self.sampled.finish();
    }

    /// File mode: where the inserted records go, when not at the start of
    /// the data section: after perf's synthesized records (after
    /// FINISHED_INIT, else before the first sample, round or compressed
    /// record, as in pipe mode, and after the last synthesized FORK) when
    /// they hold a FORK, which would drop the maps inserted before it.
    pub fn file_insert_at(&self) -> Option<u64> {
        let fork_end = self.head_fork_end?;
        Some(
            self.insert_at
                .or(self.after_init)
                .map_or(fork_end, |at| at.max(fork_end)),
        )
    }

    /// Pids the recording names but does not give the maps of, ascending.
    pub fn needed(&self) -> Vec<u32> {
        self.pids
            .keys()
            .copied()
            .filter(|p| !self.covered.contains(p))
            .collect()
    }

    /// Adds `pid` (a real one); its place in `kept`.
    fn add_pid(&mut self, pid: u32) -> usize {
        let next = self.kept.len();
        let at = *self.pids.entry(pid).or_insert(next);
        if at == next {
            self.kept.push(0);
            self.latest.push(Latest::Unasked);
        }
        at
    }

    /// Adds the entries of a BUILD_ID table (or one HEADER_BUILD_ID record).
    pub fn add_build_ids(&mut self, table: &[u8], e: Endian, at: u64) -> Result<(), FormatError> {
        for b in parse_build_id_table(table, e, at)? {
            self.existing_ids.insert((b.filename, b.build_id));
        }
        Ok(())
    }
}

impl Visitor for RecordingFacts {
    fn stored(&mut self, at: u64, h: &RecordHeader, _body: &[u8]) {
        if self.insert_at.is_some() {
            return;
        }
        match h.type_ {
            types::FINISHED_INIT if self.after_init.is_none() => {
                self.after_init = Some(at + u64::from(h.size));
            }
            types::SAMPLE | types::FINISHED_ROUND | types::COMPRESSED | types::COMPRESSED2 => {
                self.insert_at = Some(self.after_init.unwrap_or(at));
            }
            _ => {}
        }
    }

    #[inline(always)]
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        // samples are nearly every record of a dense recording: the path
        // of user-mode ones stays small and inlined into the walk; the
        // others (which may read their callchain) go out of line
        if h.type_ == types::SAMPLE {
            if h.misc & misc::CPUMODE_MASK == misc::USER {
                self.sample::<true>(h.misc, body, attrs, self.endian);
            } else {
                self.other_sample(h.misc, body, attrs);
            }
            return Ok(());
        }
        self.other(at, h, body, attrs)
    }
}

impl RecordingFacts {
    /// Every record but samples.
    #[inline(never)]
    fn other(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let e = self.endian;
        let bad = || FormatError::at(at, FormatErrorKind::MalformedRecord(h.type_));
        let real = |p: u32| p != 0 && p != u32::MAX;
        match h.type_ {
            types::COMM => {
                let pid = Rd(e).u32(body, 0).ok_or_else(bad)?;
                if h.misc & misc::COMM_EXEC == 0 {
                    self.rename(body, attrs);
                }
                if real(pid) {
                    // perf records every map of the new image: the
                    // recording gives the process whole, unless samples
                    // that ran the image before came first (kept user-mode
                    // addresses: a user-mode ip, or a kernel-mode sample's
                    // user frame; past the bound on them, none can be told
                    // apart: not covered), which need that image's maps.
                    // (perf's own COMM of a workload before its exec,
                    // `perf-exec`, is not one.) Samples written after the
                    // COMM though taken before it (another CPU's buffer)
                    // are told by their time (see `before_exec`).
                    let at = self.add_pid(pid);
                    let none_before = self.kept[at] == 0 && self.sampled.keeps(0);
                    if h.misc & misc::COMM_EXEC != 0 && none_before && self.covered.insert(pid) {
                        let time = attrs.trailer_time(body, e).unwrap_or(0);
                        if time != 0 {
                            self.exec_covered.insert(pid, time);
                        }
                    }
                }
            }
            types::KSYMBOL | types::BPF_EVENT => {
                // a malformed one is no program's: left as it is
                if let Ok(Some(r)) = BpfRecord::parse(h.type_, body, e) {
                    self.existing_bpf.insert(r);
                }
            }
            types::FORK => self.fork(at, &h, body).ok_or_else(bad)?,
            types::MMAP | types::MMAP2 => {
                let m = parse_map(&h, body, e).ok_or_else(|| {
                    FormatError::at(at, FormatErrorKind::MalformedRecord(h.type_))
                })?;
                if m.key.pid != u32::MAX {
                    // synthesized: perf writes them with time 0
                    let time = attrs.trailer_time(body, e).unwrap_or(0);
                    if time == 0 {
                        self.covered.insert(m.key.pid);
                        self.synth_maps |= real(m.key.pid);
                    }
                } else if is_kernel_map(&m) && m.key.filename.starts_with(KERNEL_DSO) {
                    self.has_kernel_map = true;
                }
                if real(m.key.pid) && m.prot & libc::PROT_EXEC as u32 != 0 {
                    self.sampled.exec_map(m.key.pid, m.key.addr, m.key.len);
                }
                let remembered = match &self.remember {
                    Remember::All => true,
                    Remember::Pids(p) => p.contains(&m.key.pid),
                    Remember::Uncovered => !self.covered.contains(&m.key.pid),
                };
                if remembered {
                    self.existing.insert(m.key);
                }
            }
            types::HEADER_FEATURE if Rd(e).u64(body, 0) == Some(u64::from(feature::OSRELEASE)) => {
                self.osrelease = parse_string_feature(&body[8..], e).map(<[u8]>::to_vec);
            }
            types::HEADER_BUILD_ID => {
                let mut full = Vec::with_capacity(body.len() + 8);
                h.put(&mut full, e);
                full.extend_from_slice(body);
                self.add_build_ids(&full, e, at)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A COMM not of an exec (`body`): the kernel's of a rename when it has
    /// a time (perf writes its own, of its task synthesis and its
    /// workload's `perf-exec`, at time 0; one without a time cannot be told
    /// from those and is not taken). A COMM too short for its tid, or of
    /// no real one, names none.
    #[inline(never)]
    fn rename(&mut self, body: &[u8], attrs: &Attrs) {
        let e = self.endian;
        let tid = Rd(e).u32(body, 4).filter(|&t| t != 0 && t != u32::MAX);
        let time = attrs.trailer_time(body, e).filter(|&t| t != 0);
        if let (Some(tid), Some(_)) = (tid, time) {
            if self.renamed.len() < MAX_RENAMED {
                self.renamed.insert(tid);
            }
        }
    }

    /// A FORK record (at `at`); `None` when too short for its fields.
    fn fork(&mut self, at: u64, h: &RecordHeader, body: &[u8]) -> Option<()> {
        let r = Rd(self.endian);
        let (pid, ppid, tid) = (r.u32(body, 0)?, r.u32(body, 4)?, r.u32(body, 8)?);
        let real = |p: u32| p != 0 && p != u32::MAX;
        if real(pid) {
            self.add_pid(pid);
        }
        // perf's synthesis of a running task: time 0 (the kernel's carry
        // the fork's time)
        let synthesized = r.u64(body, 16) == Some(0);
        if synthesized && self.insert_at.is_none() {
            self.head_fork_end = Some(at + u64::from(h.size));
        }
        if real(pid) && pid == tid && pid != ppid {
            if synthesized {
                self.synth_forked.insert(pid);
            } else {
                // A new process: perf gives it its parent's maps, so the
                // parent's are needed, and its own after that are recorded.
                self.covered.insert(pid);
                if real(ppid) {
                    self.add_pid(ppid);
                }
            }
        }
        Some(())
    }
}
