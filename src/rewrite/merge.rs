//! `merge`: insert synthesized COMM/MMAP2 records into an existing recording
//! without touching anything else. One scan of the input (see
//! [`super::scan`]) finds what is needed, [`super::plan`] decides what to
//! insert, [`super::write`] writes it; the output is atomic.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::coverage::NotRecorded;
pub use super::datamaps::DataMaps;
use super::error::out_err;
pub use super::error::MergeError;
use super::insert::{Processes, Records};
use super::kernel::kernel_to_insert;
use super::meta::{file_unreadable, Unreadable};
use super::open::open_input;
use super::plan::{self, Which};
use super::scan::{RecordingFacts, Remember};
use super::tail::{tail_of, walk_with_tail, Tail};
use super::windows::{FromFile, SnapFile, Want, Windows};
use super::write;
use super::write::Room;
use crate::model::Process;
use crate::output::AtomicFile;
use crate::perf::consts::{attr_flags, feature, types};
use crate::perf::copy::walk_beside;
use crate::perf::features::encode_build_id_entries;
use crate::perf::{Attrs, FileHeader, Input, Layout};
use crate::proc::{self, clock, parse, Skip, Snapshot, Target};
use crate::snapshot::Encoding;

/// Merge options.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Which processes.
    pub which: Which,
    /// Take records from this snapshot file instead of the live system.
    pub maps: Option<PathBuf>,
    /// Options for a live snapshot.
    pub snapshot: proc::Options,
    /// The output replaces the input: hold an exclusive lock on it for the
    /// whole rewrite and keep its mode and owner.
    pub in_place: bool,
    /// Insert the kernel's and modules' maps when the recording has no
    /// kernel map (from the snapshot file, or the running kernel when the
    /// recording's OSRELEASE is this one's).
    pub kernel: bool,
    /// A recording cut short is read up to its last whole record.
    pub salvage: bool,
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
    /// Whether data maps were inserted, and why.
    pub data_maps: DataMaps,
    /// Data maps inserted (among `maps`).
    pub data_maps_inserted: usize,
    /// Data maps of a `--maps` snapshot left out: not asked for.
    pub data_maps_left_out: usize,
    /// Pids skipped because the live process started after the recording.
    pub stale: Vec<u32>,
    /// Maps read from live processes: how long after the recording's last
    /// sample, when it has one on perf's default clock (none with `-k`).
    pub live_after_ns: Option<u64>,
    /// Processes skipped, by pid, because they are not the ones the
    /// recording sampled: too few of its sampled addresses in their maps
    /// (recorded in another pid namespace, or the pid reused).
    pub not_recorded: Vec<NotRecorded>,
    /// Threads of live processes whose COMM was left out: renamed during the
    /// recording, their names of now not those of its start.
    pub renamed_comms: usize,
    /// Pids the recording needed that neither the system nor the snapshot had.
    pub missing: Vec<u32>,
    /// Where the recording, cut short, was read up to (`salvage`).
    pub salvaged: Option<crate::perf::Salvaged>,
    /// Live processes skipped while reading them.
    pub skipped: Vec<Skip>,
    /// Build ids added to the BUILD_ID table.
    pub new_build_ids: usize,
    /// Kernel and module maps inserted (the recording had no kernel map).
    pub kernel_maps: usize,
    /// Why a recording without a kernel map did not get one.
    pub kernel_skipped: Option<String>,
    /// BPF programs inserted (their KSYMBOL and BPF_EVENT records, those
    /// the recording lacks): the snapshot file's, or the running
    /// system's along with its kernel maps.
    pub bpf_programs: usize,
    /// Why they were not.
    pub bpf_skipped: Option<String>,
    /// Pipe mode (else file mode).
    pub pipe: bool,
    /// Pipe mode: where bytes that are not records begin (kept as they are).
    pub trailing_bytes_at: Option<u64>,
    /// `--in-place` with nothing to add: the recording was left as it was.
    pub unchanged: bool,
    /// The first COMPRESSED record perf misreads (`Walk::odd_compressed`),
    /// copied as it is: a warning.
    pub odd_compressed: Option<(u64, &'static str)>,
    /// Feature sections perf 6.1's file-mode reader cannot read, with why
    /// (`perf::feature_check`): left out of a file-mode output, or left as
    /// they are with the recording when nothing else was written.
    pub features_unreadable: Vec<(u32, &'static str)>,
    /// BUILD_ID entries too long for that reader, likewise.
    pub build_ids_too_long: usize,
}

/// Whose maps the scan remembers for dedupe: only those that may get
/// records (for the default choice, pids the recording does not give
/// whole when their maps are read: those are the processes it inserts).
fn remember(opts: &MergeOptions, snapshot: Option<&HashSet<u32>>) -> Result<Remember, MergeError> {
    Ok(match (&opts.which, snapshot) {
        (Which::Needed, _) => Remember::Uncovered,
        (Which::Pids(p), _) => Remember::Pids(p.iter().copied().collect()),
        (Which::All, Some(pids)) => Remember::Pids(pids.clone()),
        (Which::All, None) => {
            let root = &opts.snapshot.proc_root;
            Remember::Pids(
                parse::list_ids(root)
                    .map_err(|source| proc::ScanError::ListProc {
                        path: root.clone(),
                        source,
                    })?
                    .into_iter()
                    .collect(),
            )
        }
    })
}

/// Reads the wanted live processes, leaving out stale ones.
fn live_processes(
    opts: &MergeOptions,
    facts: &RecordingFacts,
    needed: &[u32],
    report: &mut MergeReport,
) -> Result<Vec<Process>, MergeError> {
    let target = match &opts.which {
        Which::Needed => Target::Pids(needed.to_vec()),
        Which::All => Target::All,
        Which::Pids(p) => Target::Pids(p.clone()),
    };
    // data maps are read when they are to be inserted
    let scan = proc::Options {
        selection: facts.maps,
        ..opts.snapshot.clone()
    };
    let live = if matches!(target, Target::Pids(ref p) if p.is_empty()) {
        Snapshot::default()
    } else {
        proc::snapshot(&target, &scan)?
    };
    let (not_found, skipped): (Vec<Skip>, Vec<Skip>) = live
        .skipped
        .into_iter()
        .partition(|s| s.reason == proc::SkipReason::NotFound);
    report.skipped = skipped;
    report.missing = not_found.iter().map(|s| s.pid).collect();
    let tck = clock::ticks_per_second();
    let (kept, stale) = plan::split_stale(live.processes, |p| {
        facts
            .time
            .is_some_and(|(_, end)| clock::started_after(p.start_time, tck, end))
    });
    report.stale = stale;
    let now = clock::event_monotonic_ns().unwrap_or(0);
    report.live_after_ns = facts.time.map(|(_, end)| now.saturating_sub(end));
    if opts.which == Which::Needed {
        let accounted = kept
            .iter()
            .map(|p| p.pid)
            .chain(report.stale.iter().copied());
        let skipped = report.skipped.iter().map(|s| s.pid);
        report.missing = plan::missing(needed, accounted.chain(skipped));
    }
    Ok(kept)
}

/// The processes to insert, those the recording has whole left out: the
/// snapshot file's (held as read, or read window by window) or the live
/// system's.
fn processes_to_insert<'a>(
    opts: &MergeOptions,
    facts: &'a RecordingFacts,
    from_file: Option<FromFile<'a>>,
    report: &mut MergeReport,
) -> Result<Processes<'a>, MergeError> {
    let needed = facts.needed();
    Ok(match from_file {
        Some(FromFile {
            input,
            want,
            first,
            next: Some(next),
        }) => {
            let w = Windows::plan(input, want, facts, (first, next))?;
            report.missing = w.missing.clone();
            report.not_recorded = w.not_recorded.clone();
            report.duplicate_maps = w.duplicate_maps;
            (report.data_maps_inserted, report.data_maps_left_out) = w.data_maps;
            Processes::Windows(w)
        }
        Some(FromFile { first, .. }) => {
            let (mut procs, missing) = plan::select(first, |p| p.pid, &opts.which, &needed);
            report.missing = missing;
            report.not_recorded = plan::drop_not_recorded(&mut procs, facts);
            deduped(plan::dedupe(&mut procs, facts, &needed), report);
            Processes::Held(procs)
        }
        None => {
            let mut procs = live_processes(opts, facts, &needed, report)?;
            report.not_recorded = plan::drop_not_recorded(&mut procs, facts);
            deduped(plan::dedupe(&mut procs, facts, &needed), report);
            // comms of now: not before a rename (a snapshot's are of its time)
            report.renamed_comms = plan::leave_out_renamed(&mut procs, &facts.renamed);
            Processes::Live(procs)
        }
    })
}

/// What [`plan::dedupe`] left out and kept, into the report.
fn deduped(d: plan::Deduped, report: &mut MergeReport) {
    report.duplicate_maps = d.duplicates;
    report.data_maps_inserted = d.data_kept;
    report.data_maps_left_out = d.data_left_out;
}

/// Merges synthesized records into `input`, writing `output` (which may be
/// `input` itself for in-place). The output is written to a temporary file
/// next to it and renamed; on error nothing changes.
pub fn merge(
    input_path: &Path,
    output: &Path,
    opts: &MergeOptions,
) -> Result<MergeReport, MergeError> {
    let input = open_input(input_path, opts.in_place, opts.salvage)?;
    // what the input is now: every read of it below must see the same file
    let before = input
        .file
        .metadata()
        .map_err(out_err("reading", &input.path))?;
    // With `-a` the snapshot file's pids bound what needs dedupe, so it is
    // read first. Otherwise it is read after the scan, holding only the
    // processes to insert (a whole host's snapshot into a recording of
    // one process costs that process); many are read window by window.
    let all = opts.which == Which::All;
    let mut snap = (opts.maps.as_deref())
        .map(|p| SnapFile::open(p, all))
        .transpose()?;
    let e = input.endian();
    let file_pids = snap.as_ref().and_then(SnapFile::pids);
    let mut facts = RecordingFacts::new(e, remember(opts, file_pids)?);
    let bad = read_sections(&input, &mut facts)?;
    let (mut out, room) = prepare_output(&input, output, opts.in_place)?;
    let (walk, tail) = walk_and_copy(&input, &before, (&mut out, output, room), &mut facts)?;
    facts.finish();
    let attrs = walk.attrs;
    let mut report = MergeReport {
        data_maps: DataMaps::of(&attrs, opts.snapshot.selection),
        input_records: walk.records,
        trailing_bytes_at: walk.trailing,
        odd_compressed: walk.odd_compressed,
        pipe: matches!(input.layout, Layout::Pipe(_)),
        salvaged: input.salvaged.clone(),
        ..Default::default()
    };
    facts.maps = report.data_maps.selection();
    // times on a clock of the user's choice (`-k`) say nothing of now
    let own_clock = (attrs.list.iter()).any(|(a, _)| a.flags & attr_flags::USE_CLOCKID != 0);
    let (from_file, file_kernel) = match &mut snap {
        Some(s) => {
            let release = s.release.clone();
            let (from, kernel, bpf) = s.read(want_of(opts, &facts))?;
            (Some(from), Some((kernel, bpf, release)))
        }
        None => (None, None),
    };
    report.features_unreadable = bad.sections.clone();
    report.build_ids_too_long = bad.build_ids.as_ref().map_or(0, |(_, n)| *n);
    let processes = processes_to_insert(opts, &facts, from_file, &mut report)?;
    if own_clock {
        report.live_after_ns = None;
    }
    let (kernel, mut bpf) = match opts.kernel {
        true => {
            let root = &opts.snapshot.proc_root;
            let k = kernel_to_insert(&input, &facts, file_kernel, root)?;
            (report.kernel_skipped, report.bpf_skipped) = (k.kernel_skipped, k.bpf_skipped);
            (k.maps, k.bpf)
        }
        false => Default::default(),
    };
    plan::dedupe_bpf(&mut bpf, &facts);

    let inserted = Records::new(kernel, bpf, processes, encoding(e, &attrs))?;
    report.kernel_maps = inserted.kernel.count() as usize;
    report.bpf_programs = inserted.bpf_programs();
    report.processes = inserted.processes.len();
    report.maps = inserted.processes.maps();
    report.inserted_records = inserted.records();
    let new_ids = plan::new_build_ids(inserted.build_id_entries(), &facts);
    report.new_build_ids = new_ids.len();

    if matches!(input.layout, Layout::Pipe(_)) {
        report.inserted_records += new_ids.len() as u64;
    }
    let salvaged = input.salvaged.is_some();
    if opts.in_place && !salvaged && write::Inserted::size(&inserted) == 0 && new_ids.is_empty() {
        // nothing to add: the recording stays as it is (the temporary
        // file goes with `out`); a salvaged one is written whole
        report.unchanged = true;
        return Ok(report);
    }
    let tail = tail.map(|(file, len)| (file, len, walk.trailing));
    let inserts = (&inserted, &new_ids[..]);
    let out_at = (out.file(), output, room);
    finish_output(&input, out_at, &facts, inserts, tail, &bad)?;
    // the features (and a moved data section) were read after the scan
    write::check_unchanged(&input, &before, "changed while being merged")?;
    if let Some(s) = &snap {
        s.check_unchanged()?;
    }
    out.commit().map_err(out_err("writing", output))?;
    Ok(report)
}

/// How the inserted records are encoded, as they are written: with the
/// recording's byte order and its first attr's trailer, as perf
/// synthesizes them into a recording (no FORK, zero pid/tid and id).
fn encoding(e: crate::bytes::Endian, attrs: &Attrs) -> Encoding {
    let first = attrs.first().copied().unwrap_or_default();
    Encoding {
        endian: e,
        layout: first.layout(),
        id: 0,
        forks: false,
        fill_tid: false,
    }
}

/// The processes of a `--maps` file a merge takes.
fn want_of(opts: &MergeOptions, facts: &RecordingFacts) -> Want {
    match &opts.which {
        Which::All => Want::All,
        Which::Pids(p) => Want::Pids(p.iter().copied().collect()),
        Which::Needed => Want::Pids(facts.needed().into_iter().collect()),
    }
}

/// Reads a file-mode input's BUILD_ID table into `facts`; returns what of
/// its feature sections perf's file-mode reader cannot read, which the
/// output leaves out (all others copied as they are).
fn read_sections(input: &Input, facts: &mut RecordingFacts) -> Result<Unreadable, MergeError> {
    let table = input.feature(feature::BUILD_ID)?;
    if let Some((s, table)) = &table {
        facts
            .add_build_ids(table, input.endian(), s.offset)
            .map_err(|err| input.format(err))?;
    }
    Ok(file_unreadable(input, table.as_ref().map(|(_, t)| &t[..]))?)
}

/// Scans the recording; in file mode the kernel copies its data section
/// (up to the damaged tail of a salvaged `-z` recording, which the scan
/// writes out decompressed: see [`super::tail`]) into `out` on one core
/// while the scan reads it on the other. An input changed since `before`
/// is an error, whatever else failed because of it (the copy would not be
/// what was scanned).
fn walk_and_copy(
    input: &Input,
    before: &std::fs::Metadata,
    (out, output, room): (&mut AtomicFile, &Path, Option<Room>),
    facts: &mut RecordingFacts,
) -> Result<(crate::perf::Walk, Option<(File, u64)>), MergeError> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let from = tail_of(input);
    // the copy's room, zeroed by the walk's thread through a second handle
    let room = room.map(|r| (r, out.file().try_clone()));
    let (walk, copied, zeroed) = std::thread::scope(|s| {
        let copier = match &input.layout {
            Layout::File { header, .. } => {
                let (f, stop) = (out.file(), &stop);
                let header = kept(header, from);
                Some(s.spawn(move || write::copy_data_section(input, &header, f, stop)))
            }
            Layout::Pipe(_) => None,
        };
        // The walk reads only with pread: the copier owns the file
        // cursors. A failed or panicking walk stops the copy (its error is
        // the one reported: the rest is not copied first).
        let zeroed = room.map(|(r, f)| f.and_then(|f| write::zero_room(r, &f)));
        let walk = walk_beside(&stop, || walk_with_tail(input, facts, from, output));
        let copied = copier.map(|c| c.join());
        let copied = copied.map(|c| c.unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (
            walk.unwrap_or_else(|p| std::panic::resume_unwind(p)),
            copied,
            zeroed,
        )
    });
    write::check_unchanged(input, before, "changed while being merged")?;
    let walk = walk?;
    for written in [copied, zeroed].into_iter().flatten() {
        written.map_err(out_err("writing", output))?;
    }
    Ok(walk)
}

/// The temporary output, its mode and owner taken from the input for
/// `--in-place`, prepared for the scan's copy in file mode.
fn prepare_output(
    input: &Input,
    output: &Path,
    in_place: bool,
) -> Result<(AtomicFile, Option<Room>), MergeError> {
    let room = match &input.layout {
        Layout::File { header, .. } => Some(Room::of(input, header)?),
        Layout::Pipe(_) => None,
    };
    let mut out = write::create_output(input, output, in_place)
        .map_err(out_err("creating a temporary file for", output))?;
    if let Some(room) = room {
        write::start_file_mode(input, room, out.file()).map_err(out_err("writing", output))?;
    }
    Ok((out, room))
}

/// The header of the data section a merge copies as it is: all of it, or
/// up to `from`, where the damaged tail it rewrites begins.
fn kept(header: &FileHeader, from: Option<u64>) -> FileHeader {
    let mut h = header.clone();
    if let Some(from) = from.filter(|f| (h.data.offset..=h.data.end()).contains(f)) {
        h.data.size = from - h.data.offset;
    }
    h
}

/// Writes everything after the scan: file mode around the copied data,
/// pipe mode around the insertion point; `out` is the open temporary file
/// and the path its errors name; `tail`, the damaged tail rewritten, its
/// length and where a stream's text after its records begins; `bad`, what
/// a file-mode output leaves out of the input's feature sections.
fn finish_output(
    input: &Input,
    (out, output, room): (&mut File, &Path, Option<Room>),
    facts: &RecordingFacts,
    (inserted, new_ids): (&Records, &[crate::perf::BuildIdEntry]),
    tail: Option<(File, u64, Option<u64>)>,
    bad: &Unreadable,
) -> Result<(), MergeError> {
    let e = input.endian();
    let werr = out_err("writing", output);
    let from = tail_of(input);
    let tail = match (&tail, from) {
        (Some((file, len, trailing)), Some(from)) => Some(Tail {
            from,
            to: trailing.unwrap_or(input.len),
            file,
            len: *len,
        }),
        _ => None,
    };
    match &input.layout {
        Layout::File { header, features } => {
            let room = room.map_or_else(|| Room::of(input, header), Ok)?;
            let ids = encode_build_id_entries(e, 0, new_ids)?;
            let header = kept(header, from);
            // perf's synthesized records that go before the inserted ones
            let prefix =
                (facts.file_insert_at()).map_or(0, |at| at.saturating_sub(header.data.offset));
            let data = (inserted as &dyn write::Inserted, tail.as_ref(), prefix);
            let sections = write::Sections::of(features, bad);
            let at = (&header, room);
            write::finish_file_mode(input, at, &sections, out, data, &ids).map_err(werr)
        }
        Layout::Pipe(_) => {
            let at = facts.insert_at.or(facts.after_init).unwrap_or(input.len);
            let ids = encode_build_id_entries(e, types::HEADER_BUILD_ID, new_ids)?;
            write::write_pipe_mode(input, out, at, (&ids, inserted), tail.as_ref()).map_err(werr)
        }
    }
}
