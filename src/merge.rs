//! `merge`: insert synthesized COMM/MMAP2 records into an existing recording
//! without touching anything else.
//!
//! A streaming scan of the records (decompressing PERF_RECORD_COMPRESSED only
//! to look inside) finds the pids that need maps, the maps already present,
//! the time range and, in pipe mode, the insertion point. In file mode the
//! scan also writes every byte it reads to the output, [`RESERVE`] bytes
//! further on, so the data section is read once; the inserted records then
//! fill the room in front of it and the header, feature table and sections
//! (BUILD_ID merged, the rest copied byte for byte) are written with fixed
//! offsets. Pipe mode copies the stream around the inserted records.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::buildid::BuildId;
use crate::output::AtomicFile;
use crate::perf_data::{feature, FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use crate::perf_read::{
    self, bad, AttrInfo, FileHeader, FormatError, Kind, MapKey, RecordHeader, Section,
};
use crate::record::{self, types, BuildIdEntry, Endian, PutExt};
use crate::stream::{copy_range, Decompressor, Progress, RecordStream, StreamError};
use crate::synth::{self, Encoding, Process, Snapshot, Target, Thread};
use crate::vma::{Perms, Vma};

/// PERF_RECORD_COMPRESSED.
pub const COMPRESSED: u32 = 81;
/// PERF_RECORD_COMPRESSED2 (newer perf: header, u64 data_size, data).
pub const COMPRESSED2: u32 = 83;

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

/// Merge options.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Which processes.
    pub which: Which,
    /// Take records from this snapshot file instead of the live system.
    pub maps: Option<PathBuf>,
    /// Options for a live snapshot.
    pub snapshot: synth::Options,
}

/// What a merge did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MergeReport {
    /// Records in the input's data section (those inside compressed records
    /// counted one by one).
    pub input_records: u64,
    /// Records inserted.
    pub inserted_records: u64,
    /// Processes that got records.
    pub processes: usize,
    /// MMAP2 records inserted.
    pub maps: usize,
    /// Maps not inserted because the recording has them already.
    pub duplicate_maps: usize,
    /// Pids skipped because the live process started after the recording.
    pub stale: Vec<u32>,
    /// Pids the recording needed that neither the system nor the snapshot had.
    pub missing: Vec<u32>,
    /// Live processes skipped while reading them.
    pub skipped: Vec<synth::Skip>,
    /// Build ids added to the BUILD_ID table.
    pub new_build_ids: usize,
    /// Pipe mode (else file mode).
    pub pipe: bool,
}

/// A merge failure.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The input (or snapshot) is malformed.
    #[error("{}: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What and where.
        #[source]
        source: FormatError,
    },
    /// I/O failed.
    #[error("{op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading the live system failed.
    #[error("reading processes")]
    Scan(#[from] synth::ScanError),
}

impl MergeError {
    /// True for bad input (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, MergeError::Format { .. })
    }
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MergeError {
    let path = path.to_path_buf();
    move |source| MergeError::Io { op, path, source }
}

/// Turns a stream error into a merge error naming the file.
fn stream_error(err: StreamError, path: &Path) -> MergeError {
    match err {
        StreamError::Format(source) => MergeError::Format {
            path: path.to_path_buf(),
            source,
        },
        StreamError::Io(source) => MergeError::Io {
            op: "reading",
            path: path.to_path_buf(),
            source,
        },
    }
}

/// What the scan learns.
#[derive(Default)]
struct Scan {
    attrs: Vec<AttrInfo>,
    id_to_attr: HashMap<u64, usize>,
    pids: BTreeSet<u32>,
    has_maps: HashSet<u32>,
    existing: HashSet<MapKey>,
    /// Pids whose maps are remembered for dedupe (None: all). Keeps memory
    /// bounded by what may be inserted, not by the recording's maps.
    dedupe_for: Option<HashSet<u32>>,
    existing_ids: HashSet<(Vec<u8>, BuildId)>,
    time: Option<(u64, u64)>,
    records: u64,
    /// Pipe mode: where to insert.
    insert_at: Option<u64>,
    /// Pipe mode: a FINISHED_INIT was seen before any sample or round.
    after_init: Option<u64>,
    // Collected when reading a snapshot (--maps).
    comms: Vec<(u32, u32, Vec<u8>)>,
    maps: Vec<perf_read::MapRecord>,
}

impl Scan {
    fn sample_attr(&self, body: &[u8], e: Endian) -> Option<&AttrInfo> {
        let first = self.attrs.first()?;
        if self.attrs.len() == 1 {
            return Some(first);
        }
        let pos = perf_read::id_pos(first.sample_type).sample?;
        let id = perf_read::Rd(e).u64(body, pos)?;
        self.id_to_attr
            .get(&id)
            .and_then(|&i| self.attrs.get(i))
            .or(Some(first))
    }

    /// Handles one record (also the records inside compressed ones).
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        e: Endian,
        keep: bool,
    ) -> Result<(), FormatError> {
        match h.type_ {
            types::SAMPLE => {
                if let Some(a) = self.sample_attr(body, e) {
                    let (pid, time) = perf_read::sample_pid_time(body, a.sample_type, e);
                    if let Some(p) = pid.filter(|&p| p != 0 && p != u32::MAX) {
                        self.pids.insert(p);
                    }
                    if let Some(t) = time.filter(|&t| t != 0) {
                        self.time = Some(match self.time {
                            Some((lo, hi)) => (lo.min(t), hi.max(t)),
                            None => (t, t),
                        });
                    }
                }
            }
            types::COMM | types::FORK => {
                let pid = perf_read::Rd(e)
                    .u32(body, 0)
                    .ok_or_else(|| bad(at, "truncated COMM/FORK record"))?;
                if pid != 0 && pid != u32::MAX {
                    self.pids.insert(pid);
                }
                if keep && h.type_ == types::COMM {
                    self.comms.push(
                        perf_read::parse_comm(body, e)
                            .ok_or_else(|| bad(at, "truncated COMM record"))?,
                    );
                }
            }
            types::MMAP | types::MMAP2 => {
                let m = perf_read::parse_map(&h, body, e)
                    .ok_or_else(|| bad(at, format!("malformed MMAP record of type {}", h.type_)))?;
                if m.key.pid != u32::MAX {
                    self.has_maps.insert(m.key.pid);
                }
                if keep {
                    self.maps.push(m.clone());
                }
                if self
                    .dedupe_for
                    .as_ref()
                    .is_none_or(|d| d.contains(&m.key.pid))
                {
                    self.existing.insert(m.key);
                }
            }
            types::HEADER_BUILD_ID => {
                let mut full = Vec::with_capacity(body.len() + 8);
                full.put_u32(e, h.type_);
                full.put_u16(e, h.misc);
                full.put_u16(e, h.size);
                full.extend_from_slice(body);
                for b in perf_read::parse_build_id_table(&full, e, at)? {
                    if let Some(id) = b.build_id {
                        self.existing_ids.insert((b.filename, id));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Parsed input layout.
struct Input {
    path: PathBuf,
    file: File,
    len: u64,
    kind: Kind,
    header: Option<FileHeader>,
    /// Feature sections of a file-mode input: (bit, section).
    features: Vec<(u32, Section)>,
}

fn open_input(path: &Path) -> Result<Input, MergeError> {
    let mut file = File::open(path).map_err(io_err("opening", path))?;
    let len = file.metadata().map_err(io_err("reading", path))?.len();
    let fmt = |source| MergeError::Format {
        path: path.to_path_buf(),
        source,
    };
    let mut head = vec![0u8; FILE_HEADER_SIZE.min(len) as usize];
    file.read_exact(&mut head)
        .map_err(io_err("reading", path))?;
    if head.len() < 16 {
        return Err(fmt(bad(
            0,
            format!("file is {len} bytes, too short for a perf.data header"),
        )));
    }
    let kind = perf_read::kind_of(&head).map_err(fmt)?;
    let mut input = Input {
        path: path.to_path_buf(),
        file,
        len,
        kind,
        header: None,
        features: Vec::new(),
    };
    if let Kind::File(e) = kind {
        let h = FileHeader::parse(&head, len).map_err(fmt)?;
        let bits = h.feature_bits();
        let table = h.data.end();
        let mut tb = vec![0u8; bits.len() * 16];
        if table + tb.len() as u64 > len {
            return Err(fmt(bad(
                table,
                "feature section table runs past the end of the file",
            )));
        }
        read_at(&input.file, &mut tb, table).map_err(io_err("reading", path))?;
        for (i, bit) in bits.iter().enumerate() {
            let r = perf_read::Rd(e);
            let s = Section {
                offset: r.u64(&tb, i * 16).unwrap_or(0),
                size: r.u64(&tb, i * 16 + 8).unwrap_or(0),
            };
            if s.offset.checked_add(s.size).is_none_or(|end| end > len) {
                return Err(fmt(bad(
                    table + i as u64 * 16,
                    format!("feature {bit} section runs past the end of the file"),
                )));
            }
            input.features.push((*bit, s));
        }
        input.header = Some(h);
    }
    Ok(input)
}

fn read_at(f: &File, buf: &mut [u8], off: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    f.read_exact_at(buf, off)
}

/// Reads the attrs of a file-mode input.
fn file_attrs(input: &Input, h: &FileHeader) -> Result<Vec<AttrInfo>, MergeError> {
    let e = h.endian;
    let mut raw = vec![0u8; h.attrs.size as usize];
    read_at(&input.file, &mut raw, h.attrs.offset).map_err(io_err("reading", &input.path))?;
    let fmt = |source| MergeError::Format {
        path: input.path.clone(),
        source,
    };
    let mut attrs = Vec::new();
    for (i, entry) in raw.chunks(h.attr_size as usize).enumerate() {
        let at = h.attrs.offset + i as u64 * h.attr_size;
        let mut a = AttrInfo::parse(entry, e, at).map_err(fmt)?;
        let n = entry.len();
        let r = perf_read::Rd(e);
        let ids = Section {
            offset: r.u64(entry, n - 16).unwrap_or(0),
            size: r.u64(entry, n - 8).unwrap_or(0),
        };
        if ids.end() > input.len || ids.size % 8 != 0 || ids.size > 1 << 24 {
            return Err(fmt(bad(at + n as u64 - 16, "bad event id section")));
        }
        if ids.size > 0 && ids.offset >= h.data.offset {
            return Err(fmt(bad(
                at + n as u64 - 16,
                "event ids after the data section are not supported",
            )));
        }
        let mut idb = vec![0u8; ids.size as usize];
        read_at(&input.file, &mut idb, ids.offset).map_err(io_err("reading", &input.path))?;
        a.ids = idb.chunks(8).filter_map(|c| r.u64(c, 0)).collect();
        attrs.push(a);
    }
    if attrs.is_empty() {
        return Err(fmt(bad(24, "no event attributes")));
    }
    if h.attrs.offset >= h.data.offset {
        return Err(fmt(bad(
            24,
            "an attr section after the data section is not supported",
        )));
    }
    Ok(attrs)
}

/// Scans the records of an input (file or pipe mode). `keep` also collects
/// COMM and map records (for reading a snapshot).
fn scan(
    input: &mut Input,
    keep: bool,
    dedupe_for: Option<HashSet<u32>>,
    tee: Option<&mut File>,
) -> Result<Scan, MergeError> {
    let mut s = Scan {
        dedupe_for,
        ..Scan::default()
    };
    let (e, start, end) =
        match (input.kind, &input.header) {
            (Kind::File(e), Some(h)) => {
                s.attrs = file_attrs(input, h)?;
                for (bit, sec) in &input.features {
                    if *bit == feature::BUILD_ID {
                        let mut b = vec![0u8; sec.size as usize];
                        read_at(&input.file, &mut b, sec.offset)
                            .map_err(io_err("reading", &input.path))?;
                        for r in perf_read::parse_build_id_table(&b, e, sec.offset).map_err(
                            |source| MergeError::Format {
                                path: input.path.clone(),
                                source,
                            },
                        )? {
                            if let Some(id) = r.build_id {
                                s.existing_ids.insert((r.filename, id));
                            }
                        }
                    }
                }
                (e, h.data.offset, h.data.end())
            }
            (Kind::Pipe(e), _) => (e, PIPE_HEADER_SIZE, input.len),
            (Kind::File(_), None) => unreachable!("file-mode input without header"),
        };
    for (i, a) in s.attrs.iter().enumerate() {
        for &id in &a.ids {
            s.id_to_attr.insert(id, i);
        }
    }
    let mut stream = RecordStream::new(&input.file, start, end, e, tee);
    let pipe = matches!(input.kind, Kind::Pipe(_));
    let mut dec: Option<Decompressor> = None;
    let mut progress = Progress::new("scanning", end - start);
    loop {
        let next = stream
            .next()
            .map_err(|err| stream_error(err, &input.path))?;
        let Some((at, h, body)) = next else { break };
        progress.at(at - start);
        s.records += 1;
        let fmt = |source| MergeError::Format {
            path: input.path.clone(),
            source,
        };
        if pipe && s.insert_at.is_none() {
            match h.type_ {
                types::FINISHED_INIT if s.after_init.is_none() => {
                    s.after_init = Some(at + u64::from(h.size));
                }
                types::SAMPLE | types::FINISHED_ROUND | COMPRESSED | COMPRESSED2 => {
                    s.insert_at = Some(s.after_init.unwrap_or(at));
                }
                types::HEADER_ATTR => {
                    let mut a = AttrInfo::parse(body, e, at).map_err(fmt)?;
                    let asz = a.size as usize;
                    if asz < 64 || asz > body.len() {
                        return Err(fmt(bad(at, format!("HEADER_ATTR with attr.size {asz}"))));
                    }
                    a.ids = body[asz..]
                        .chunks(8)
                        .filter_map(|c| perf_read::Rd(e).u64(c, 0))
                        .collect();
                    for &id in &a.ids {
                        s.id_to_attr.insert(id, s.attrs.len());
                    }
                    s.attrs.push(a);
                }
                _ => {}
            }
        }
        match h.type_ {
            COMPRESSED | COMPRESSED2 => {
                let payload = if h.type_ == COMPRESSED2 {
                    let n = perf_read::Rd(e)
                        .u64(body, 0)
                        .ok_or_else(|| fmt(bad(at, "truncated COMPRESSED2")))?;
                    body.get(8..8 + n as usize)
                        .ok_or_else(|| fmt(bad(at, "COMPRESSED2 data_size too large")))?
                } else {
                    body
                };
                let d = match &mut dec {
                    Some(d) => d,
                    None => dec
                        .insert(Decompressor::new().map_err(io_err("decompressing", &input.path))?),
                };
                // count the records inside, not the container
                s.records -= 1;
                d.feed(at, payload, e, |ih, ib| {
                    s.records += 1;
                    s.record(at, ih, ib, e, keep)
                })
                .map_err(fmt)?;
            }
            _ => s.record(at, h, body, e, keep).map_err(fmt)?,
        }
    }
    progress.done();
    if pipe && s.insert_at.is_none() {
        s.insert_at = Some(s.after_init.unwrap_or(end));
    }
    if s.attrs.is_empty() {
        return Err(MergeError::Format {
            path: input.path.clone(),
            source: bad(start, "no event attributes (HEADER_ATTR) in the stream"),
        });
    }
    Ok(s)
}

/// Turns the COMM and map records of a snapshot file into processes.
fn processes_from_snapshot(s: &Scan) -> Vec<Process> {
    let mut by_pid: BTreeMap<u32, Process> = BTreeMap::new();
    for (pid, tid, comm) in &s.comms {
        let p = by_pid.entry(*pid).or_insert_with(|| empty_process(*pid));
        if !p.threads.iter().any(|t| t.tid == *tid) {
            p.threads.push(Thread {
                tid: *tid,
                comm: comm.clone(),
            });
        }
    }
    for m in &s.maps {
        if m.key.pid == u32::MAX {
            continue;
        }
        let p = by_pid
            .entry(m.key.pid)
            .or_insert_with(|| empty_process(m.key.pid));
        let mut perms = Perms::default();
        for (bit, perm) in [(1, Perms::READ), (2, Perms::WRITE), (4, Perms::EXEC)] {
            if m.prot & bit != 0 {
                perms = perms | perm;
            }
        }
        if m.flags & 1 != 0 {
            perms = perms | Perms::SHARED;
        }
        let (dev_major, dev_minor, inode) = m.dev_ino.unwrap_or((0, 0, 0));
        p.vmas.push(Vma {
            start: m.key.addr,
            end: m.key.addr.saturating_add(m.key.len),
            offset: m.key.pgoff,
            perms,
            dev_major,
            dev_minor,
            inode,
            name: m.key.filename.clone(),
            build_id: m.build_id,
        });
    }
    for p in by_pid.values_mut() {
        // the leader first, as the encoder expects
        p.threads.sort_by_key(|t| (t.tid != p.pid, t.tid));
        if p.threads.first().is_none_or(|t| t.tid != p.pid) {
            p.threads.insert(
                0,
                Thread {
                    tid: p.pid,
                    comm: Vec::new(),
                },
            );
        }
        p.vmas.sort_by_key(|v| v.start);
    }
    by_pid.into_values().collect()
}

fn empty_process(pid: u32) -> Process {
    Process {
        pid,
        ppid: 0,
        uid: 0,
        kernel_thread: false,
        start_time: 0,
        threads: Vec::new(),
        vmas: Vec::new(),
        source: None,
    }
}

/// Whether a live process started after the recording's last sample.
///
/// perf's default clock (sched_clock) runs with CLOCK_MONOTONIC: time since
/// boot without suspend. `/proc/PID/stat` counts from boot *with* suspend
/// (CLOCK_BOOTTIME), in clock ticks. The start time is moved onto the
/// monotonic clock by today's BOOTTIME - MONOTONIC offset; the margin covers
/// the tick resolution plus 100 ppm of uptime for the drift between
/// sched_clock and the NTP-steered monotonic clock.
pub fn started_after(start_ticks: u64, ticks_per_sec: u64, last_sample_ns: u64) -> bool {
    let mono = crate::sys::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let boot = crate::sys::clock_ns(libc::CLOCK_BOOTTIME).unwrap_or(mono);
    started_after_at(start_ticks, ticks_per_sec, last_sample_ns, mono, boot)
}

/// [`started_after`] with the clocks given (pure, for tests).
pub fn started_after_at(
    start_ticks: u64,
    ticks_per_sec: u64,
    last_sample_ns: u64,
    monotonic_now: u64,
    boottime_now: u64,
) -> bool {
    let start_boot =
        (u128::from(start_ticks) * 1_000_000_000 / u128::from(ticks_per_sec.max(1))) as u64;
    let start_mono = start_boot.saturating_sub(boottime_now.saturating_sub(monotonic_now));
    start_mono > last_sample_ns.saturating_add(stale_margin_ns(monotonic_now))
}

/// The margin [`started_after`] allows: 0.5 s plus 100 ppm of uptime.
pub fn stale_margin_ns(monotonic_now: u64) -> u64 {
    500_000_000 + monotonic_now / 10_000
}

/// Merges synthesized records into `input`, writing `output` (which may be
/// `input` itself for in-place). The output is written to a temporary file
/// next to it and renamed; on error nothing changes.
pub fn merge(
    input_path: &Path,
    output: &Path,
    opts: &MergeOptions,
) -> Result<MergeReport, MergeError> {
    let mut input = open_input(input_path)?;
    // A snapshot file is read first: its pids bound what needs dedupe.
    let snapshot_procs = match &opts.maps {
        Some(snap_path) => {
            let mut snap_in = open_input(snap_path)?;
            let snap = scan(&mut snap_in, true, Some(HashSet::new()), None)?;
            Some(processes_from_snapshot(&snap))
        }
        None => None,
    };
    // Only maps of pids that may get records are remembered for dedupe;
    // pids the recording "needs" have no maps in it by definition.
    let dedupe_for: HashSet<u32> = match (&opts.which, &snapshot_procs) {
        (Which::Needed, _) => HashSet::new(),
        (Which::Pids(p), _) => p.iter().copied().collect(),
        (Which::All, Some(procs)) => procs.iter().map(|p| p.pid).collect(),
        (Which::All, None) => crate::proc::list_ids(&opts.snapshot.proc_root)
            .map_err(io_err("listing", &opts.snapshot.proc_root))?
            .into_iter()
            .collect(),
    };
    let mut out =
        AtomicFile::create(output).map_err(io_err("creating a temporary file for", output))?;
    // File mode copies the data section while scanning it, to RESERVE bytes
    // past its old offset; the inserted records then go just before it.
    let tee = match &input.header {
        Some(h) => {
            let f = out.file();
            f.write_all(&[0u8; FILE_HEADER_SIZE as usize])
                .and_then(|_| {
                    copy_range(
                        &input.file,
                        FILE_HEADER_SIZE,
                        h.data.offset - FILE_HEADER_SIZE,
                        f,
                    )
                })
                .and_then(|_| f.seek(SeekFrom::Start(h.data.offset + RESERVE)))
                .map_err(io_err("writing", output))?;
            Some(f)
        }
        None => None,
    };
    let scan_result = scan(&mut input, false, Some(dedupe_for), tee)?;
    let e = match input.kind {
        Kind::File(e) | Kind::Pipe(e) => e,
    };
    let mut report = MergeReport {
        input_records: scan_result.records,
        pipe: matches!(input.kind, Kind::Pipe(_)),
        ..Default::default()
    };
    let needed: Vec<u32> = scan_result
        .pids
        .iter()
        .copied()
        .filter(|p| !scan_result.has_maps.contains(p))
        .collect();

    // The processes to insert.
    let mut processes: Vec<Process> = match snapshot_procs {
        Some(all) => select(all, &opts.which, &needed, &mut report),
        None => {
            let target = match &opts.which {
                Which::Needed => Target::Pids(needed.clone()),
                Which::All => Target::All,
                Which::Pids(p) => Target::Pids(p.clone()),
            };
            let live = if matches!(target, Target::Pids(ref p) if p.is_empty()) {
                Snapshot::default()
            } else {
                synth::snapshot(&target, &opts.snapshot)?
            };
            report.skipped = live.skipped;
            let skipped: HashSet<u32> = report.skipped.iter().map(|s| s.pid).collect();
            let tck = crate::sys::clock_ticks_per_second();
            let mut kept = Vec::new();
            for p in live.processes {
                match scan_result.time {
                    Some((_, end)) if started_after(p.start_time, tck, end) => {
                        report.stale.push(p.pid)
                    }
                    _ => kept.push(p),
                }
            }
            if opts.which == Which::Needed {
                let got: HashSet<u32> = kept
                    .iter()
                    .map(|p| p.pid)
                    .chain(report.stale.iter().copied())
                    .chain(skipped.iter().copied())
                    .collect();
                report.missing = needed
                    .iter()
                    .copied()
                    .filter(|p| !got.contains(p))
                    .collect();
            }
            kept
        }
    };

    // Dedupe against the maps already present.
    for p in &mut processes {
        let before = p.vmas.len();
        p.vmas.retain(|v| {
            !scan_result.existing.contains(&MapKey {
                pid: p.pid,
                addr: v.start,
                len: v.len(),
                pgoff: v.offset,
                filename: synth::mmap_filename(v).0.to_vec(),
            })
        });
        report.duplicate_maps += before - p.vmas.len();
    }
    // A process whose maps are all present already gets nothing; one the
    // recording needs keeps its COMM even without maps (kernel threads).
    processes.retain(|p| !p.vmas.is_empty() || needed.binary_search(&p.pid).is_ok());

    // Encode with the recording's byte order and first attr's trailer.
    let snap = Snapshot {
        processes,
        skipped: Vec::new(),
    };
    let enc = Encoding {
        endian: e,
        layout: scan_result.attrs[0].layout(),
        id: 0,
        forks: false,
        fill_tid: false,
    };
    let mut inserted = Vec::new();
    synth::encode(&snap, &enc, &mut inserted).map_err(|err| MergeError::Format {
        path: input_path.to_path_buf(),
        source: bad(0, err.to_string()),
    })?;
    report.processes = snap.processes.len();
    report.maps = snap.processes.iter().map(|p| p.vmas.len()).sum();
    report.inserted_records = count_records(&inserted, e);
    let new_ids: Vec<BuildIdEntry> = synth::build_id_entries(&snap)
        .into_iter()
        .filter(|b| {
            !scan_result
                .existing_ids
                .contains(&(b.filename.clone(), b.build_id))
        })
        .collect();
    report.new_build_ids = new_ids.len();

    match input.kind {
        Kind::File(_) => finish_file_mode(&input, &mut out, &inserted, &new_ids, e),
        Kind::Pipe(_) => {
            let at = scan_result.insert_at.unwrap_or(input.len);
            let mut ids = Vec::new();
            for b in &new_ids {
                record::encode_build_id_entry(&mut ids, e, types::HEADER_BUILD_ID, b)
                    .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
                    .map_err(io_err("encoding build ids for", output))?;
            }
            report.inserted_records += new_ids.len() as u64;
            copy_range(&input.file, 0, at, out.file())
                .and_then(|_| out.file().write_all(&ids))
                .and_then(|_| out.file().write_all(&inserted))
                .and_then(|_| copy_range(&input.file, at, input.len - at, out.file()))
                .map_err(io_err("writing", output))
        }
    }?;
    out.commit().map_err(io_err("writing", output))?;
    Ok(report)
}

fn select(
    all: Vec<Process>,
    which: &Which,
    needed: &[u32],
    report: &mut MergeReport,
) -> Vec<Process> {
    let want: Option<HashSet<u32>> = match which {
        Which::All => None,
        Which::Needed => Some(needed.iter().copied().collect()),
        Which::Pids(p) => Some(p.iter().copied().collect()),
    };
    let Some(want) = want else { return all };
    let have: HashSet<u32> = all.iter().map(|p| p.pid).collect();
    let mut missing: Vec<u32> = want.iter().copied().filter(|p| !have.contains(p)).collect();
    missing.sort_unstable();
    report.missing = missing;
    all.into_iter().filter(|p| want.contains(&p.pid)).collect()
}

fn count_records(b: &[u8], e: Endian) -> u64 {
    perf_read::split_records(b, e).count() as u64
}

/// Room left before the copied data section for the inserted records. A
/// merge that inserts more rewrites the data section once more.
pub const RESERVE: u64 = 256 << 10;

/// Completes a file-mode output whose data section was copied (by the scan)
/// to `data.offset + RESERVE`: places the inserted records right before it
/// (or, if they do not fit, copies the data again behind them), appends the
/// feature table and sections, and writes the header last.
fn finish_file_mode(
    input: &Input,
    out: &mut AtomicFile,
    inserted: &[u8],
    new_ids: &[BuildIdEntry],
    e: Endian,
) -> Result<(), MergeError> {
    use std::os::unix::fs::FileExt;
    let h = input.header.clone().expect("file mode has a header");
    let path = input.path.clone();
    let outp = out.tmp_path().to_path_buf();
    let werr = || io_err("writing", &outp);
    let ins = inserted.len() as u64;
    let f = out.file();
    if ins == 0 && new_ids.is_empty() {
        // Nothing to add: the output is the input, byte for byte.
        return f
            .set_len(0)
            .and_then(|_| f.seek(SeekFrom::Start(0)))
            .and_then(|_| copy_range(&input.file, 0, input.len, f))
            .map_err(werr());
    }
    let data_offset = if ins <= RESERVE {
        let at = h.data.offset + RESERVE - ins;
        f.write_all_at(inserted, at).map_err(werr())?;
        at
    } else {
        f.set_len(h.data.offset)
            .and_then(|_| f.seek(SeekFrom::Start(h.data.offset)))
            .and_then(|_| f.write_all(inserted))
            .and_then(|_| copy_range(&input.file, h.data.offset, h.data.size, f))
            .map_err(werr())?;
        h.data.offset
    };
    let data_end = data_offset + ins + h.data.size;
    f.seek(SeekFrom::Start(data_end)).map_err(werr())?;

    let mut extra_ids = Vec::new();
    for b in new_ids {
        record::encode_build_id_entry(&mut extra_ids, e, 0, b).map_err(|err| {
            MergeError::Format {
                path: path.clone(),
                source: bad(0, err.to_string()),
            }
        })?;
    }
    // Feature sections: all copied byte for byte; BUILD_ID grows (or appears).
    let mut feats: Vec<(u32, Section, u64)> = input
        .features
        .iter()
        .map(|(b, s)| (*b, *s, s.size))
        .collect();
    if !extra_ids.is_empty() {
        match feats.iter_mut().find(|(b, _, _)| *b == feature::BUILD_ID) {
            Some(f) => f.2 += extra_ids.len() as u64,
            None => {
                feats.push((
                    feature::BUILD_ID,
                    Section::default(),
                    extra_ids.len() as u64,
                ));
                feats.sort_by_key(|f| f.0);
            }
        }
    }
    let mut pos = data_end + 16 * feats.len() as u64;
    let mut table = Vec::new();
    for (_, _, size) in &feats {
        table.put_u64(e, pos);
        table.put_u64(e, *size);
        pos += size;
    }
    f.write_all(&table).map_err(werr())?;
    for (bit, sec, _) in &feats {
        copy_range(&input.file, sec.offset, sec.size, f).map_err(werr())?;
        if *bit == feature::BUILD_ID {
            f.write_all(&extra_ids).map_err(werr())?;
        }
    }

    let mut head = vec![0u8; FILE_HEADER_SIZE as usize];
    read_at(&input.file, &mut head, 0).map_err(io_err("reading", &path))?;
    let put = |head: &mut Vec<u8>, off: usize, v: u64| {
        let b = match e {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        };
        head[off..off + 8].copy_from_slice(&b);
    };
    put(&mut head, 40, data_offset);
    put(&mut head, 48, h.data.size + ins);
    if h.event_types.end() > h.data.offset {
        // The obsolete event_types section (ignored by perf, written empty)
        // would point into moved bytes: drop it rather than point at garbage.
        put(&mut head, 56, 0);
        put(&mut head, 64, 0);
    }
    let mut bitmap = h.features;
    for (b, _, _) in &feats {
        bitmap[(*b / 64) as usize] |= 1 << (b % 64);
    }
    for (i, w) in bitmap.iter().enumerate() {
        put(&mut head, 72 + i * 8, *w);
    }
    f.write_all_at(&head, 0).map_err(werr())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::{self, attr_flags, Attr, EventDesc, Metadata};
    use crate::record::misc;
    use crate::record::{sample_type as st, PutExt};
    use crate::snapshot_file::{self, Mode, WriteOptions};
    use crate::synth::Thread;
    use crate::vma::Perms;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("m2s-merge-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A recording with one attr (IP|TID|TIME|ID, sample_id_all) and two
    /// samples of pid 42, then a FINISHED_ROUND.
    fn recording(e: Endian) -> (Vec<u8>, Vec<u8>) {
        let attr = Attr {
            type_: 1,
            sample_type: st::IP | st::TID | st::TIME | st::ID,
            flags: attr_flags::SAMPLE_ID_ALL | attr_flags::MMAP2,
            ..Default::default()
        };
        let mut data = Vec::new();
        for (ip, time) in [(0x7f00_0000_1000u64, 1_000u64), (0x7f00_0000_2000, 2_000)] {
            data.put_u32(e, types::SAMPLE);
            data.put_u16(e, misc::USER);
            data.put_u16(e, 8 + 32);
            data.put_u64(e, ip);
            data.put_u32(e, 42);
            data.put_u32(e, 43);
            data.put_u64(e, time);
            data.put_u64(e, 7);
        }
        record::encode_empty(&mut data, e, types::FINISHED_ROUND);
        let meta = Metadata {
            endian: e,
            events: vec![EventDesc {
                attr: attr.encode(e),
                name: b"cycles".to_vec(),
                ids: vec![7],
            }],
            features: vec![(
                perf_data::feature::HOSTNAME,
                perf_data::string_feature(e, b"host"),
            )],
            build_ids: vec![],
        };
        let mut f = Vec::new();
        perf_data::write_file(&mut f, &meta, &data).unwrap();
        (f, data)
    }

    fn process(pid: u32, name: &[u8]) -> Process {
        Process {
            pid,
            ppid: 1,
            uid: 0,
            kernel_thread: false,
            start_time: 0,
            threads: vec![Thread {
                tid: pid,
                comm: name.to_vec(),
            }],
            vmas: vec![Vma {
                start: 0x7f00_0000_0000,
                end: 0x7f00_0001_0000,
                offset: 0,
                perms: Perms::READ | Perms::EXEC,
                dev_major: 8,
                dev_minor: 1,
                inode: 99,
                name: b"/lib/libx.so".to_vec(),
                build_id: BuildId::new(&[0xab; 20]),
            }],
            source: None,
        }
    }

    // A merge from a snapshot file inserts COMM + MMAP2 of the needed pid only,
    // at the start of the data section, in the recording's byte order; the
    // original records follow byte for byte; BUILD_ID gains the id; HOSTNAME
    // is kept.
    #[test]
    fn merge_from_snapshot_both_byte_orders() {
        for e in [Endian::Little, Endian::Big] {
            let dir = tmpdir(&format!("{e:?}"));
            let (rec, data) = recording(e);
            let rec_path = dir.join("rec.data");
            std::fs::write(&rec_path, &rec).unwrap();
            let snap = Snapshot {
                processes: vec![process(42, b"target"), process(50, b"other")],
                skipped: vec![],
            };
            let mut sb = Vec::new();
            snapshot_file::write_snapshot(
                &mut sb,
                &snap,
                &WriteOptions {
                    endian: Endian::Little,
                    mode: Mode::File,
                    forks: true,
                    cmdline: vec![],
                    host: crate::host::HostFacts::read(),
                },
            )
            .unwrap();
            let snap_path = dir.join("snap.data");
            std::fs::write(&snap_path, &sb).unwrap();
            let out = dir.join("out.data");
            let opts = MergeOptions {
                which: Which::Needed,
                maps: Some(snap_path),
                snapshot: synth::Options::default(),
            };
            let report = merge(&rec_path, &out, &opts).unwrap();
            assert_eq!(report.processes, 1);
            assert_eq!(report.inserted_records, 2);
            assert_eq!(report.new_build_ids, 1);
            assert_eq!(report.input_records, 3);

            let o = std::fs::read(&out).unwrap();
            let h = FileHeader::parse(&o[..104], o.len() as u64).unwrap();
            assert_eq!(h.endian, e);
            let d = &o[h.data.offset as usize..h.data.end() as usize];
            let h1 = RecordHeader::parse(d, e).unwrap();
            assert_eq!(h1.type_, types::COMM);
            let (pid, tid, name) = perf_read::parse_comm(&d[8..h1.size as usize], e).unwrap();
            assert_eq!((pid, tid, name.as_slice()), (42, 42, &b"target"[..]));
            // trailer: TID, TIME, ID all zero (sample_id_all, first attr's layout)
            assert_eq!(&d[h1.size as usize - 24..h1.size as usize], &[0u8; 24]);
            let rest = &d[h1.size as usize..];
            let h2 = RecordHeader::parse(rest, e).unwrap();
            assert_eq!(h2.type_, types::MMAP2);
            let m = perf_read::parse_map(&h2, &rest[8..h2.size as usize], e).unwrap();
            assert_eq!(m.key.filename, b"/lib/libx.so");
            assert_eq!(m.build_id, BuildId::new(&[0xab; 20]));
            assert_eq!(
                &rest[h2.size as usize..],
                &data[..],
                "original records untouched"
            );
            assert_eq!(
                h.feature_bits(),
                vec![perf_data::feature::BUILD_ID, perf_data::feature::HOSTNAME]
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    // Corrupted recordings (single-byte and truncation damage all over the
    // file, both byte orders) give errors or valid output, never a panic.
    #[test]
    fn corrupted_inputs_never_panic() {
        let dir = tmpdir("fuzz");
        let opts = MergeOptions {
            which: Which::Pids(vec![]),
            maps: None,
            snapshot: synth::Options::default(),
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut ok, mut err) = (0, 0);
        for e in [Endian::Little, Endian::Big] {
            let (rec, _) = recording(e);
            for i in 0..400 {
                let mut b = rec.clone();
                let pos = (next() % b.len() as u64) as usize;
                if i % 10 == 0 {
                    b.truncate(pos);
                } else {
                    b[pos] = next() as u8;
                }
                let input = dir.join("in.data");
                std::fs::write(&input, &b).unwrap();
                match merge(&input, &dir.join("out.data"), &opts) {
                    Ok(_) => ok += 1,
                    Err(_) => err += 1,
                }
            }
        }
        assert!(ok > 0 && err > 0, "ok={ok} err={err}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(left.is_empty(), "temporary files left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // Start times are moved from the boot clock to the monotonic one and
    // compared with a margin; suspend time does not make old processes stale.
    #[test]
    fn staleness_uses_one_clock() {
        let sec = 1_000_000_000u64;
        // started at 100 s, recording ended at 200 s: not stale
        assert!(!started_after_at(
            100 * 100,
            100,
            200 * sec,
            300 * sec,
            300 * sec
        ));
        // started at 250 s, after the recording: stale
        assert!(started_after_at(
            250 * 100,
            100,
            200 * sec,
            300 * sec,
            300 * sec
        ));
        // same, but within the margin: not stale
        assert!(!started_after_at(
            20_040,
            100,
            200 * sec,
            300 * sec,
            300 * sec
        ));
        // a machine that slept 1000 s after booting: boottime is ahead, a
        // process started (monotonic) at 100 s shows 1100 s in /proc
        assert!(!started_after_at(
            1100 * 100,
            100,
            200 * sec,
            300 * sec,
            1300 * sec
        ));
        assert_eq!(stale_margin_ns(100_000 * sec), sec / 2 + 10 * sec);
    }

    // Records split across compressed payloads are reassembled.
    #[test]
    fn decompressor_handles_records_across_payloads() {
        let e = Endian::Little;
        let mut raw = Vec::new();
        for i in 0..3u32 {
            record::encode_comm(
                &mut raw,
                e,
                i,
                i,
                b"abc",
                &Default::default(),
                &Default::default(),
            )
            .unwrap();
        }
        let (a, b) = raw.split_at(20);
        let ca = zstd::bulk::compress(a, 1).unwrap();
        let cb = zstd::bulk::compress(b, 1).unwrap();
        let mut d = Decompressor::new().unwrap();
        let mut seen = Vec::new();
        for payload in [&ca, &cb] {
            d.feed(0, payload, e, |h, body| {
                seen.push((h.type_, perf_read::parse_comm(body, e).unwrap().0));
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(seen, vec![(3, 0), (3, 1), (3, 2)]);
        assert!(d.feed(0, b"not zstd at all", e, |_, _| Ok(())).is_err());
    }

    // Snapshot records become processes: leader first, maps sorted, perms from prot/flags.
    #[test]
    fn snapshot_records_to_processes() {
        let mut s = Scan::default();
        s.comms.push((5, 6, b"worker".to_vec()));
        s.comms.push((5, 5, b"main".to_vec()));
        for (addr, prot, flags) in [(0x2000u64, 5u32, 2u32), (0x1000, 3, 1)] {
            s.maps.push(perf_read::MapRecord {
                key: MapKey {
                    pid: 5,
                    addr,
                    len: 0x1000,
                    pgoff: 0,
                    filename: b"/x".to_vec(),
                },
                tid: 5,
                misc: 0,
                build_id: None,
                dev_ino: Some((1, 2, 3)),
                prot,
                flags,
            });
        }
        let p = processes_from_snapshot(&s);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].threads[0].comm, b"main");
        assert_eq!(p[0].vmas[0].start, 0x1000);
        assert_eq!(
            p[0].vmas[0].perms,
            Perms::READ | Perms::WRITE | Perms::SHARED
        );
        assert_eq!(p[0].vmas[1].perms, Perms::READ | Perms::EXEC);
        assert_eq!(p[0].vmas[1].inode, 3);
    }
}
