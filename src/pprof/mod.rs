//! `pprof`: a recording written as a gzipped pprof Profile, the way
//! perf_to_profile writes it (two sample types per event, `pid`/`tid`/
//! `comm`/`thread_comm` labels, one Sample per distinct stack and thread),
//! with build ids in every mapping and, unless asked not to, functions,
//! files, lines and inlined frames from the files those ids name.
//!
//! Stages: `read` replays the recording (maps per process in `maps`, the
//! kernel's, comms; records that come before their process's FORK held in
//! `park`; again in perf's time order, `order`, when the file's order gave
//! a frame's process other maps there, or a sample another comm:
//! `inversions`) and aggregates samples in `profile`'s builder; `symbolize`
//! (the only part that opens files, with `perfmap` for JIT code's
//! `/tmp/perf-PID.map`) names the locations, `demangle` their names;
//! `proto` is the schema.
//!
//! May import: `archive` (the build-id cache layout), `bytes`, `model`,
//! `perf`, `proc`, `rewrite`, `sys`.

mod cache;
mod demangle;
mod find;
mod inversions;
mod isolate;
pub mod maps;
mod order;
mod park;
mod perfmap;
pub mod profile;
pub mod proto;
mod read;
mod stack;
mod strings;
pub mod symbolize;

use std::io::Write;
use std::path::PathBuf;

use prost::Message;

use crate::perf::consts::feature;
use crate::perf::evname::generic_name;
use crate::perf::features::parse_event_desc;
use crate::perf::writer::RawMeta;
use crate::perf::{Attr, FormatError, FormatErrorKind, Input, InputError, Layout, Walk};
use crate::rewrite::meta::read_meta;
use crate::rewrite::transcode::map_ids;

/// What to write.
#[derive(Debug, Clone, Default)]
pub struct PprofOptions {
    /// Keep only the event with this name.
    pub event: Option<String>,
    /// Name the locations (functions, files, lines); off: leave it to pprof.
    pub symbolize: bool,
    /// perf's build-id cache layout to find binaries and kallsyms in.
    pub buildid_dir: Option<PathBuf>,
}

/// What a conversion did, for the summary. Its texts hold what the
/// recording and the files named in it say (paths, event names, blazesym's
/// messages), unescaped: the summary escapes them as it prints them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PprofReport {
    /// Samples read.
    pub samples: u64,
    /// Map records replayed.
    pub maps: u64,
    /// Samples whose callchain does not start at their ip (`--call-graph
    /// dwarf` records no user callchain): written with the ip alone.
    pub ip_only: u64,
    /// Frames of guests, left out.
    pub guest_frames: u64,
    /// Frames no map covers (kept, without a mapping).
    pub unmapped_frames: u64,
    /// Events written: (name as the recording gives it, samples).
    pub events: Vec<(String, u64)>,
    /// Distinct samples (stack, pid, tid, comms) written.
    pub distinct_samples: usize,
    /// Locations and mappings written.
    pub locations: usize,
    /// Mappings written.
    pub mappings: usize,
    /// Locations given a function name.
    pub symbolized: usize,
    /// User locations in mappings without a build id (not symbolized:
    /// nothing proves which file they were).
    pub no_build_id: usize,
    /// A `[vdso]` recorded without a build id was taken as the running
    /// kernel's (the recording's kernel is the running build).
    pub vdso_running: bool,
    /// Paths of maps whose id is not known because the file is not the one
    /// at the path now (replaced since or while recorded, or another mount
    /// namespace's whose process is gone: convert's stale and ambiguous
    /// maps), up to 10.
    pub replaced: Vec<Vec<u8>>,
    /// Build ids whose file was not found.
    pub files_missing: usize,
    /// Up to 5 of them, as `path (id)`.
    pub missing: Vec<String>,
    /// Where kernel symbols came from, or why not.
    pub kernel_symbols: Option<String>,
    /// Files blazesym could not read, and the first error.
    pub symbolize_errors: usize,
    /// The first error.
    pub symbolize_error: Option<String>,
    /// Files blazesym panicked on (malformed debug info), left as
    /// addresses.
    pub unsymbolizable: usize,
    /// Up to 5 of them, as `path (why: where blazesym panicked)`.
    pub unsymbolizable_names: Vec<String>,
    /// Files whose DWARF was not read, by [`crate::proc::debuginfo`]'s
    /// verdict: compressed sections that would unpack out of bounds, or
    /// section headers blazesym would read otherwise than they say; their
    /// symbol tables were read.
    pub no_dwarf: usize,
    /// Up to 5 of them, as `path (why)`.
    pub no_dwarf_names: Vec<String>,
    /// Files whose MiniDebugInfo (`.gnu_debugdata`) was not read
    /// ([`crate::proc::minidebug`]: it would unpack out of bounds, or does
    /// not unpack); their own symbol tables were read.
    pub no_minidebug: usize,
    /// Up to 5 of them, as `path (why)`.
    pub no_minidebug_names: Vec<String>,
    /// Perf maps (`/tmp/perf-PID.map`) read to name code in processes'
    /// anonymous memory.
    pub perf_maps: usize,
    /// Locations in processes' anonymous memory that no perf map named.
    pub jit_unnamed: usize,
    /// Perf maps not read, or read in part (lines skipped).
    pub perf_map_problems: usize,
    /// Up to 5 of them, as `path (why)`.
    pub perf_map_problem_names: Vec<String>,
}

/// Why no profile was written.
#[derive(Debug, thiserror::Error)]
pub enum PprofError {
    /// Reading the recording failed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// `--event NAME` names no event with samples. Both are as given and
    /// as the recording names them: the CLI escapes them when it prints.
    #[error("no samples of event \"{name}\" (events with samples: {have})")]
    NoEvent {
        /// The name asked for.
        name: String,
        /// Those there are.
        have: String,
    },
    /// Writing the profile failed.
    #[error("writing the profile")]
    Write(#[source] std::io::Error),
}

/// Writes the gzipped profile of `input` to `out`.
pub fn pprof(
    input: &Input,
    opts: &PprofOptions,
    out: &mut dyn Write,
) -> Result<PprofReport, PprofError> {
    let meta = metadata(input)?;
    let (mut reader, walk) = read_all(input, &meta)?;
    let mut names: Vec<Option<String>> = vec![None; walk.attrs.list.len()];
    let desc = meta
        .feature(feature::EVENT_DESC)
        .and_then(|b| parse_event_desc(b, input.endian()))
        .unwrap_or_default();
    for (i, (name, ids)) in desc.into_iter().enumerate() {
        let slot = ids.first().and_then(|&id| walk.attrs.index_of_id(id));
        if let Some(n) = slot.or(Some(i)).and_then(|s| names.get_mut(s)) {
            n.get_or_insert(String::from_utf8_lossy(&name).into_owned());
        }
    }
    for (id, name) in &reader.names_by_id {
        if let Some(n) = walk.attrs.index_of_id(*id).and_then(|s| names.get_mut(s)) {
            n.get_or_insert(String::from_utf8_lossy(name).into_owned());
        }
    }
    let mut report = std::mem::take(&mut reader.report);
    report.replaced = reader.unattributed();
    let spaces = &reader.spaces;
    reader.builder.add_main_binary(|pid| spaces.at_end(pid));
    let builder = reader.builder;
    let mut events: Vec<(usize, String)> = builder
        .slots_with_samples()
        .into_iter()
        .map(|s| {
            let name = names.get(s).cloned().flatten();
            (
                s,
                name.unwrap_or_else(|| fallback_name(&walk.attrs.list[s].0)),
            )
        })
        .collect();
    if let Some(want) = &opts.event {
        let have = events.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>();
        let have = have.join(", ");
        events.retain(|(_, n)| n == want);
        if events.is_empty() {
            return Err(PprofError::NoEvent {
                name: want.clone(),
                have,
            });
        }
    }
    // the profile holds two values per event for each distinct stack: a
    // file declaring many events cannot make that outgrow its own size
    let cells = (2 * events.len()).saturating_mul(builder.distinct_samples());
    let limit = usize::try_from(input.len)
        .unwrap_or(usize::MAX)
        .max(1 << 24);
    if cells > limit {
        let kind = FormatErrorKind::Implausible {
            what: "profile values (2 per event with samples, per distinct stack)",
            value: cells as u64,
        };
        let at = input.records_range().0;
        return Err(input.format(FormatError::at(at, kind)).into());
    }
    let symbols = if opts.symbolize {
        let kernel = reader.spaces.kernel_image().map(|m| &**m);
        symbolize::symbolize(&builder, (kernel, opts.buildid_dir.as_deref()), &mut report)
    } else {
        symbolize::Symbols::default()
    };
    report.locations = builder.locations.len();
    report.mappings = builder.mappings.len();
    let duration = reader
        .times
        .map_or(0, |(a, b)| i64::try_from(b - a).unwrap_or(i64::MAX));
    let profile = builder.finish(&events, &symbols.frames, &symbols.mappings, duration);
    report.distinct_samples = profile.sample.len();
    for (i, (_, name)) in events.iter().enumerate() {
        let n: i64 = profile.sample.iter().map(|s| s.value[2 * i]).sum();
        report.events.push((name.clone(), n as u64));
    }
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec())
        .and_then(|()| gz.finish().map(drop))
        .map_err(PprofError::Write)?;
    Ok(report)
}

/// The recording's samples and maps, read by a walk in file order: made
/// again knowing the files the maps name when the first used a table id
/// for a path whose maps name several files (replaced while recorded, or
/// other mount namespaces'; see [`crate::rewrite::attribution`]), and in
/// perf's time order ([`order`]) when a frame is where the file's order
/// gave its process other maps than that order does, or some sample
/// another comm ([`inversions`]).
fn read_all(input: &Input, meta: &RawMeta) -> Result<(read::Reader, Walk), InputError> {
    let limit = maps::map_limit(input.len);
    let read = |ids, in_time_order: bool| -> Result<(read::Reader, Walk), InputError> {
        let mut reader = read::Reader::new(input.endian(), ids, limit);
        let walk = if in_time_order {
            let mut ordered = order::Ordered::new(&mut reader, input.endian());
            let walk = input.walk(&mut ordered)?;
            ordered.finish(&walk.attrs).map_err(|e| input.format(e))?;
            walk
        } else {
            input.walk(&mut reader)?
        };
        reader.finish(&walk.attrs).map_err(|e| input.format(e))?;
        Ok((reader, walk))
    };
    let (mut reader, walk) = read(map_ids(input, meta, false)?, false)?;
    let files = reader.take_second_pass();
    let in_time_order = reader.inversions.matter(reader.builder.user_frames());
    if files.is_none() && !in_time_order {
        return Ok((reader, walk));
    }
    let ids = map_ids(input, meta, false)?;
    let ids = match files {
        Some(files) => ids.knowing(files),
        None => ids,
    };
    read(ids, in_time_order)
}

/// The features pprof reads (BUILD_ID, OSRELEASE, EVENT_DESC): from their
/// sections in file mode (not every feature, tracing data included), from
/// the stream's metadata records in pipe mode.
fn metadata(input: &Input) -> Result<RawMeta, InputError> {
    if let Layout::Pipe(_) = input.layout {
        return read_meta(input);
    }
    let mut features = Vec::new();
    for bit in [feature::BUILD_ID, feature::OSRELEASE, feature::EVENT_DESC] {
        if let Some((_, payload)) = input.feature(bit)? {
            features.push((bit, payload));
        }
    }
    Ok(RawMeta {
        endian: input.endian(),
        attrs: Vec::new(),
        features,
    })
}

/// perf's name for an event the recording does not name.
fn fallback_name(a: &Attr) -> String {
    match generic_name(a.type_, a.config) {
        Some(n) => n.to_string(),
        None => format!("event-{}-{:#x}", a.type_, a.config),
    }
}
