//! A `--maps` snapshot whose processes to insert weigh more than
//! [`WINDOW_BYTES`] held: read again window by window of pids, in pid
//! order, each window's processes held, deduplicated against the
//! recording, encoded and let go. The windows are found once (where each
//! starts, what they insert), then each pass over the records (measuring
//! them, writing them) reads the file again, so memory is bounded by a
//! window, not by the snapshot.

use std::collections::HashSet;

use super::coverage::NotRecorded;
use super::error::MergeError;
use super::plan;
use super::scan::RecordingFacts;
use crate::perf::{BuildIdEntry, FormatError, FormatErrorKind, Input, InputError};
use std::path::Path;

use crate::snapshot::{
    read_window, BpfRecord, BuildIdSet, HeldProcess, KernelMaps, Runs, SnapshotMaps, Window,
};

/// What the processes of one window may weigh held
/// ([`HeldProcess::weight`]; a single process weighing more is held
/// whole).
pub const WINDOW_BYTES: usize = 16 << 20;

/// The processes a merge takes from a snapshot file.
#[derive(Debug, Clone)]
pub enum Want {
    /// Every one (`-a`).
    All,
    /// Those of these pids.
    Pids(HashSet<u32>),
}

impl Want {
    /// Whether the process of `pid` is taken.
    pub fn takes(&self, pid: u32) -> bool {
        match self {
            Want::All => true,
            Want::Pids(p) => p.contains(&pid),
        }
    }
}

/// Window `k`, from pid `from` on (the kernel's maps and BPF records held
/// too with `kernel`). Every fourth window may weigh twice as much, so a
/// huge snapshot takes a few dozen passes, not thousands.
fn window(k: usize, from: u32, kernel: bool) -> Window {
    let budget = crate::testhook::window_bytes(WINDOW_BYTES);
    Window {
        from,
        budget: budget.saturating_mul(1 << (k / 4).min(8)),
        kernel,
    }
}

/// A window's processes, and where the next window starts (`None`:
/// none follows).
type Read = (SnapshotMaps, Option<u32>);

/// Reads the first window of `input`: the maps (with the kernel's and
/// BPF records) and where the next window starts. The pid of every
/// process goes into `pids`.
fn first_window(
    input: &Input,
    want: &Want,
    pids: Option<&mut HashSet<u32>>,
) -> Result<Read, InputError> {
    read_window(input, window(0, 0, true), &|pid| want.takes(pid), pids)
}

/// A `--maps` snapshot file, opened: its first window read at once with
/// `-a` (whose dedupe needs every pid of the file before the recording's
/// scan), else after the scan, holding only the processes to insert.
pub struct SnapFile {
    pub input: Input,
    /// Its OSRELEASE.
    pub release: Option<Vec<u8>>,
    /// What it was when opened: every pass must read the same file.
    before: std::fs::Metadata,
    /// With `-a`: the first window and every pid of the file.
    early: Option<(Read, HashSet<u32>)>,
}

/// The processes a snapshot file gives a merge: the first window's, and
/// where the second starts.
pub struct FromFile<'a> {
    pub input: &'a Input,
    pub want: Want,
    pub first: Vec<HeldProcess>,
    pub next: Option<u32>,
}

impl SnapFile {
    /// Opens `path`, reading its first window at once with `all` (`-a`).
    pub fn open(path: &Path, all: bool) -> Result<SnapFile, MergeError> {
        let input = Input::open(path)?;
        let before = input.file.metadata().map_err(|source| InputError::Io {
            op: "reading",
            path: input.path.clone(),
            source,
        })?;
        let release = super::kernel::osrelease_of(&input)?;
        let early = match all {
            true => {
                let mut pids = HashSet::new();
                let read = first_window(&input, &Want::All, Some(&mut pids))?;
                Some((read, pids))
            }
            false => None,
        };
        Ok(SnapFile {
            input,
            release,
            before,
            early,
        })
    }

    /// Every pid of the file, when read at once (`-a`).
    pub fn pids(&self) -> Option<&HashSet<u32>> {
        self.early.as_ref().map(|(_, pids)| pids)
    }

    /// The processes `want` takes (the first window read at open, else
    /// now), the kernel maps and the BPF records.
    pub fn read(
        &mut self,
        want: Want,
    ) -> Result<(FromFile<'_>, KernelMaps, Runs<BpfRecord>), InputError> {
        let (maps, next) = match self.early.take() {
            Some((read, _)) => read,
            None => first_window(&self.input, &want, None)?,
        };
        let from = FromFile {
            input: &self.input,
            want,
            first: maps.processes,
            next,
        };
        Ok((from, maps.kernel, maps.bpf))
    }

    /// An error if the file changed since it was opened.
    pub fn check_unchanged(&self) -> Result<(), InputError> {
        super::write::check_unchanged(&self.input, &self.before, "changed while being merged")
    }
}

/// A snapshot file's processes to insert, window by window.
pub struct Windows<'a> {
    input: &'a Input,
    want: Want,
    facts: &'a RecordingFacts,
    needed: Vec<u32>,
    /// The first pid of each window.
    starts: Vec<u32>,
    /// Processes inserted.
    pub processes: usize,
    /// Maps inserted (repeats counted).
    pub maps: usize,
    /// Maps left out: the recording has them.
    pub duplicate_maps: usize,
    /// Data maps inserted, and those left out as not asked for.
    pub data_maps: (usize, usize),
    /// Wanted pids the file has no process of.
    pub missing: Vec<u32>,
    /// Processes left out: not the ones the recording sampled.
    pub not_recorded: Vec<NotRecorded>,
    /// The BUILD_ID table entries of the maps inserted.
    pub build_ids: Vec<BuildIdEntry>,
}

impl<'a> Windows<'a> {
    /// Finds every window after `first` (read by [`first_window`], which
    /// said where the second starts), counting what they insert.
    pub fn plan(
        input: &'a Input,
        want: Want,
        facts: &'a RecordingFacts,
        first: (Vec<HeldProcess>, u32),
    ) -> Result<Windows<'a>, InputError> {
        let mut w = Windows {
            input,
            want,
            facts,
            needed: facts.needed(),
            starts: vec![0, first.1],
            processes: 0,
            maps: 0,
            duplicate_maps: 0,
            data_maps: (0, 0),
            missing: Vec::new(),
            not_recorded: Vec::new(),
            build_ids: Vec::new(),
        };
        let (mut ids, mut seen) = (BuildIdSet::default(), HashSet::new());
        w.take_in(first.0, &mut ids, &mut seen);
        loop {
            let k = w.starts.len() - 1;
            let (maps, next) = w.read(k)?;
            w.take_in(maps.processes, &mut ids, &mut seen);
            match next {
                Some(next) => w.starts.push(next),
                None => break,
            }
        }
        if let Want::Pids(p) = &w.want {
            let mut missing: Vec<u32> = p.iter().copied().filter(|p| !seen.contains(p)).collect();
            missing.sort_unstable();
            w.missing = missing;
        }
        w.build_ids = ids.entries();
        Ok(w)
    }

    /// Counts what one window inserts.
    fn take_in(
        &mut self,
        mut window: Vec<HeldProcess>,
        ids: &mut BuildIdSet,
        seen: &mut HashSet<u32>,
    ) {
        seen.extend(window.iter().map(|p| p.pid));
        let dropped = plan::drop_not_recorded(&mut window, self.facts);
        self.not_recorded.extend(dropped);
        let d = plan::dedupe(&mut window, self.facts, &self.needed);
        self.duplicate_maps += d.duplicates;
        self.data_maps.0 += d.data_kept;
        self.data_maps.1 += d.data_left_out;
        self.processes += window.len();
        self.maps += window.iter().map(HeldProcess::map_count).sum::<usize>();
        for p in &window {
            ids.add(p.runs().map(|(v, _)| v));
        }
    }

    /// Window `k` as read now.
    fn read(&self, k: usize) -> Result<Read, InputError> {
        let w = window(k, self.starts[k], false);
        read_window(self.input, w, &|pid| self.want.takes(pid), None)
    }

    /// Hands each window's processes to insert, in pid order, to `f`.
    /// A file read otherwise than when planned is an error.
    pub fn each(
        &self,
        f: &mut dyn FnMut(&[HeldProcess]) -> Result<(), MergeError>,
    ) -> Result<(), MergeError> {
        for k in 0..self.starts.len() {
            let (maps, next) = self.read(k)?;
            if next != self.starts.get(k + 1).copied() {
                let what = FormatErrorKind::Inconsistent("changed while being merged");
                return Err(self.input.format(FormatError::at(0, what)).into());
            }
            let mut window = maps.processes;
            plan::drop_not_recorded(&mut window, self.facts);
            plan::dedupe(&mut window, self.facts, &self.needed);
            f(&window)?;
        }
        Ok(())
    }
}
