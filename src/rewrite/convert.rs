//! `convert`: rewrite a recording into a form every reader understands:
//! build-id MMAP2s, file or pipe mode, decompressed. Two ways: when only
//! `--buildid-mmap2` is asked of a file-mode, uncompressed recording, the
//! output is a kernel copy of the input with each converted record patched
//! where it lies (an inode-form MMAP2 has the same size as the build-id
//! form: its place in the stream, the sample_id trailer and every other
//! byte stay as they were); anything else goes through the streaming
//! rewrite of [`super::transcode`].
//!
//! The id of a record comes from the recording's own BUILD_ID table (by
//! cpumode and path) where that id can be the mapped file's
//! ([`super::attribution`]), else from the file at the path, but only when
//! that file still has the record's device and inode; otherwise the record
//! is kept and counted as stale or ambiguous, never given another file's
//! id. When a path's maps turn out to name several files after its table
//! id was used, the conversion is made again knowing them.

use std::io::{self, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::attribution::MappedFiles;
use super::buildids::{ConvertReport, MapIds};
use super::edited::{
    finish_edited, gap_for, growth, patch_in_place, write_edited, write_head_and_prefix, Edit,
};
use super::error::MergeError;
use super::meta::file_unreadable;
use super::open::open_input;
use super::transcode::{transcode_knowing, TranscodeError, TranscodeOptions};
use super::write::Sections;
use crate::bytes::Endian;
use crate::output::AtomicFile;
use crate::perf::consts::{feature, types};
use crate::perf::copy::{copy_range, copy_range_beside, walk_beside};
use crate::perf::events::MMAP2_ID_AT;
use crate::perf::{Attrs, FormatError, Input, InputError, Layout, RecordHeader, Visitor};
use std::sync::mpsc::SyncSender;

/// What to convert.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// Inode-form MMAP2 records of files become build-id MMAP2 records.
    pub buildid_mmap2: bool,
    /// Write pipe mode (Some(true)) or file mode (Some(false)); None: the
    /// input's mode.
    pub to_pipe: Option<bool>,
    /// COMPRESSED records become the records they hold.
    pub decompress: bool,
    /// The file at a path is taken for the mapped one where the record
    /// cannot tell (MMAP v1, `[vdso]` on this kernel).
    pub trust_paths: bool,
    /// The BUILD_ID table gets every mapped file with a known id.
    pub buildid_all: bool,
    /// The output replaces the input (locked, mode and owner kept).
    pub in_place: bool,
    /// A recording cut short is read up to its last whole record.
    pub salvage: bool,
}

/// A conversion failure.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The recording is malformed or unreadable.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Writing the output failed.
    #[error("{op} {}", path.display())]
    Output {
        op: &'static str,
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The recording's metadata does not fit pipe mode.
    #[error("{}: cannot be written in pipe mode", path.display())]
    TooLarge {
        /// The recording.
        path: PathBuf,
        #[source]
        source: TranscodeError,
    },
}

impl ConvertError {
    /// True for bad or unsupported input (exit code 2), an output refused
    /// or raced ([`crate::output::OutputError::refusal_in`]) included.
    pub fn is_bad_input(&self) -> bool {
        match self {
            ConvertError::Input(e) => e.is_bad_input(),
            ConvertError::TooLarge { .. } => true,
            ConvertError::Output { source, .. } => {
                crate::output::OutputError::refusal_in(source).is_some()
            }
        }
    }
}

fn out_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ConvertError {
    let path = path.to_path_buf();
    move |source| ConvertError::Output { op, path, source }
}

/// The in-place walk's visitor: the edit each converted map makes.
struct Editor {
    e: Endian,
    ids: MapIds,
    report: ConvertReport,
    edits: Vec<Edit>,
    compressed: bool,
    /// Told, once, where the synthesized prefix ends (the first sample,
    /// round or compressed record) and how much the edits so far grow it.
    prefix: Option<SyncSender<(u64, u64)>>,
}

impl Editor {
    /// An editor with the ids of `input`'s BUILD_ID table (and OSRELEASE,
    /// for /sys), knowing the files its maps name if a pass found them,
    /// telling `tx` where the prefix ends.
    fn new(
        input: &Input,
        trust_paths: bool,
        known: Option<MappedFiles>,
        tx: SyncSender<(u64, u64)>,
    ) -> Result<Editor, InputError> {
        let table = input.feature(feature::BUILD_ID)?;
        let (at, table) = table.map_or((0, None), |(s, t)| (s.offset, Some(t)));
        let osrelease = input.feature(feature::OSRELEASE)?.map(|(_, b)| b);
        let e = input.endian();
        let ids = MapIds::new(table.as_deref(), osrelease.as_deref(), (e, at), trust_paths)
            .map_err(|err| input.format(err))?;
        let ids = match known {
            Some(files) => ids.knowing(files),
            None => ids,
        };
        Ok(Editor {
            e,
            ids,
            report: ConvertReport::default(),
            edits: Vec::new(),
            compressed: false,
            prefix: Some(tx),
        })
    }
}

impl Visitor for Editor {
    fn stored(&mut self, at: u64, h: &RecordHeader, _body: &[u8]) {
        let compressed = matches!(h.type_, types::COMPRESSED | types::COMPRESSED2);
        self.compressed |= compressed;
        if compressed || matches!(h.type_, types::SAMPLE | types::FINISHED_ROUND) {
            if let Some(tx) = self.prefix.take() {
                let _ = tx.send((at, growth(&self.edits)));
            }
        }
    }

    #[inline]
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        self.report.records += 1;
        // compressed: the stream takes over; samples and the rest stay as
        // they are, on this small inlined path
        if !self.compressed && matches!(h.type_, types::MMAP | types::MMAP2) {
            self.map(at, h, body, attrs);
        }
        Ok(())
    }
}

impl Editor {
    /// The edit of one MMAP or MMAP2 record, if it gets a build id.
    #[inline(never)]
    fn map(&mut self, at: u64, h: RecordHeader, body: &[u8], attrs: &Attrs) {
        let (e, r) = (self.e, &mut self.report);
        let new = match h.type_ {
            types::MMAP => {
                let trailer = attrs.of_trailer(body, e).map_or(0, |a| a.layout().len());
                self.ids.convert_v1(&h, body, trailer, e, r)
            }
            types::MMAP2 => self.ids.convert(&h, body, e, r).map(|(patched, field)| {
                let mut rec = Vec::with_capacity(usize::from(h.size));
                patched.put(&mut rec, e);
                rec.extend_from_slice(body);
                let id_at = 8 + MMAP2_ID_AT;
                rec[id_at..id_at + field.len()].copy_from_slice(&field);
                rec
            }),
            _ => None,
        };
        if let Some(new) = new {
            self.edits.push(Edit {
                at,
                old: u64::from(h.size),
                new,
            });
        }
    }
}

/// Converts `input_path` into `output` (which may be the input itself with
/// `in_place`), atomically: on error nothing changes.
pub fn convert(
    input_path: &Path,
    output: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let (input, before) = open_to_convert(input_path, opts)?;
    let from_pipe = matches!(input.layout, Layout::Pipe(_));
    let to_pipe = opts.to_pipe.unwrap_or(from_pipe);
    let compressed = match &input.layout {
        Layout::File { header, .. } => header.features.contains(feature::COMPRESSED),
        Layout::Pipe(_) => false,
    };
    let mut out = super::write::create_output(&input, output, opts.in_place)
        .map_err(out_err("creating a temporary file for", output))?;
    // (a salvaged file's header is rewritten: not a patch of its bytes)
    let patchable = opts.buildid_mmap2
        && input.salvaged.is_none()
        && !opts.buildid_all
        && !from_pipe
        && !to_pipe
        && !opts.decompress
        && !compressed;
    let mut report = None;
    let mut known = None;
    let restart = |out: &mut AtomicFile| {
        let f = out.file();
        f.set_len(0)
            .and_then(|()| f.seek(SeekFrom::Start(0)).map(drop))
            .map_err(out_err("writing", output))
    };
    while patchable && report.is_none() {
        match patch_copy(&input, &mut out, output, opts.trust_paths, known.take())? {
            Patched::Done(r) => report = Some(*r),
            Patched::Again(files) => {
                // a table id was used for a path that turned out to name
                // several files: again, knowing them
                restart(&mut out)?;
                known = Some(files);
            }
            Patched::Stream => {
                // compressed records without the COMPRESSED feature, or an
                // AUXTRACE index: start over with the stream
                restart(&mut out)?;
                break;
            }
        }
    }
    let report = match report {
        Some(r) => r,
        None => transcode_into(&input, out.file(), output, opts, to_pipe)?,
    };
    let report = settle(&input, &before, report, to_pipe)?;
    out.commit().map_err(out_err("writing", output))?;
    Ok(report)
}

/// Converts `input_path` into the pipe-mode stream `stream` (stdout, a
/// FIFO, a device; `name` names it in errors). The rewrite may start over
/// (see [`transcode_knowing`]), and a reader of the stream cannot take back
/// what it was given, so the output is made whole in an unnamed file in
/// `$TMPDIR` first (as a stream input's copy is: nothing is left behind
/// whatever ends the run), checked like a file output, then copied: on an
/// error the stream gets nothing.
pub fn convert_to_stream(
    input_path: &Path,
    stream: &mut dyn io::Write,
    name: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let (input, before) = open_to_convert(input_path, opts)?;
    let mut scratch =
        tempfile::tempfile().map_err(out_err("making a file in $TMPDIR for", name))?;
    let report = transcode_into(&input, &mut scratch, name, opts, true)?;
    let report = settle(&input, &before, report, true)?;
    scratch
        .seek(SeekFrom::Start(0))
        .and_then(|_| io::copy(&mut scratch, stream))
        .and_then(|_| stream.flush())
        .map_err(out_err("writing", name))?;
    Ok(report)
}

/// The recording to convert, opened (see [`open_input`]), and its state
/// before the conversion reads it.
fn open_to_convert(
    input_path: &Path,
    opts: &ConvertOptions,
) -> Result<(Input, std::fs::Metadata), ConvertError> {
    let input = open_input(input_path, opts.in_place, opts.salvage).map_err(|e| match e {
        MergeError::Input(e) => ConvertError::Input(e),
        MergeError::Output { op, path, source } => ConvertError::Output { op, path, source },
        other => ConvertError::Output {
            op: "opening",
            path: input_path.to_path_buf(),
            source: io::Error::other(other.to_string()),
        },
    })?;
    let before = input
        .file
        .metadata()
        .map_err(out_err("reading", &input.path))?;
    Ok((input, before))
}

/// The streaming rewrite of `input` into `out` (named `output` in errors).
fn transcode_into(
    input: &Input,
    out: &mut std::fs::File,
    output: &Path,
    opts: &ConvertOptions,
    to_pipe: bool,
) -> Result<ConvertReport, ConvertError> {
    let t = TranscodeOptions {
        to_pipe,
        decompress: opts.decompress,
        buildid_mmap2: opts.buildid_mmap2,
        trust_paths: opts.trust_paths,
        buildid_all: opts.buildid_all,
    };
    transcode_knowing(input, out, t, None).map_err(|e| match e {
        TranscodeError::Input(e) => ConvertError::Input(e),
        TranscodeError::Output(source) => out_err("writing", output)(source),
        e @ TranscodeError::TooLarge { .. } => ConvertError::TooLarge {
            path: input.path.clone(),
            source: e,
        },
    })
}

/// The report of a conversion made, once the input is seen unchanged: a
/// writer meanwhile (a perf record still appending, or edits beside the
/// patch's copies) made what was read a part of the file, and the file is
/// kept, not the part (one check for the patch and the stream alike).
fn settle(
    input: &Input,
    before: &std::fs::Metadata,
    mut report: ConvertReport,
    to_pipe: bool,
) -> Result<ConvertReport, ConvertError> {
    report.from_pipe = matches!(input.layout, Layout::Pipe(_));
    report.to_pipe = to_pipe;
    report.salvaged = input.salvaged.clone();
    check_unchanged(input, before)?;
    Ok(report)
}

/// What the in-place patch did.
enum Patched {
    /// The output is written.
    Done(Box<ConvertReport>),
    /// A table id was used for a path whose maps turned out to name
    /// several files: to be made again knowing them.
    Again(MappedFiles),
    /// The streaming rewrite must do it.
    Stream,
}

/// The in-place patch: the input's records walked once for the edits the
/// converted maps make, the output written from the input with kernel
/// copies around them (see [`write_edited`]). The records after the
/// synthesized prefix (where MMAP v1 records, which grow, are) are copied
/// while the walk still runs: MMAP2 patches there keep their size, so
/// their place is known once the prefix is. Feature sections perf cannot
/// read are left out ([`Sections`]). [`Patched::Stream`] when the walk met
/// compressed records or the recording has an AUXTRACE index.
fn patch_copy(
    input: &Input,
    out: &mut AtomicFile,
    output: &Path,
    trust_paths: bool,
    known: Option<MappedFiles>,
) -> Result<Patched, ConvertError> {
    let Layout::File { header, features } = &input.layout else {
        return Ok(Patched::Stream);
    };
    if header.features.contains(feature::AUXTRACE) {
        return Ok(Patched::Stream);
    }
    let table = input.feature(feature::BUILD_ID)?;
    let bad = file_unreadable(input, table.as_ref().map(|(_, t)| &t[..]))?;
    drop(table);
    let sections = Sections::of(features, &bad);
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let mut ed = Editor::new(input, trust_paths, known, tx)?;
    let werr = out_err("writing", output);
    let end = header.data.end();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (walked, tail) = std::thread::scope(|s| {
        let walker = s.spawn(|| {
            // a failed or panicking walk stops the copy: its error is the
            // one reported
            let walked = walk_beside(&stop, || input.walk(&mut ed).map(|_| ()));
            // a walk without samples (or one that panicked before its
            // first): the receiver stops waiting
            ed.prefix = None;
            walked.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        // The prefix's end and growth, then the rest of the data copied to
        // where it will be (a page-congruent kernel copy).
        let tail = rx.recv().ok().map(|(p, grow)| {
            let shift = grow + gap_for(grow);
            let f = out.file();
            let copied = f
                .seek(SeekFrom::Start(p + shift))
                .and_then(|_| copy_range_beside(&input.file, p, end - p, f, &stop));
            (p, shift, copied)
        });
        let walked = walker.join();
        (
            walked.unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            tail,
        )
    });
    walked?;
    if ed.compressed {
        return Ok(Patched::Stream);
    }
    if let Some(files) = ed.ids.take_second_pass() {
        return Ok(Patched::Again(files));
    }
    ed.report.features_unreadable = bad.sections.clone();
    ed.report.build_ids_too_long = bad.build_ids.as_ref().map_or(0, |(_, n)| *n);
    let f = out.file();
    let planned = match tail {
        Some((p, shift, copied))
            if ed
                .edits
                .iter()
                .all(|x| x.at < p || x.new.len() as u64 == x.old) =>
        {
            copied.map_err(out_err("writing", output))?;
            Some((p, shift))
        }
        _ => None,
    };
    let Some((p, shift)) = planned else {
        // no samples, or a record grows after them: one pass, in order
        f.set_len(0).map_err(out_err("writing", output))?;
        f.seek(SeekFrom::Start(0))
            .map_err(out_err("writing", output))?;
        write_edited(input, header, &sections, &ed.edits, f).map_err(werr)?;
        return Ok(Patched::Done(Box::new(ed.report)));
    };
    let (prefix, rest) = ed.edits.split_at(ed.edits.partition_point(|x| x.at < p));
    let got =
        write_head_and_prefix(input, header, prefix, p, f).map_err(out_err("writing", output))?;
    debug_assert_eq!(got, shift);
    patch_in_place(rest, shift, f).map_err(out_err("writing", output))?;
    let grow = growth(prefix);
    if grow == 0 && sections.as_they_are() {
        // the feature sections and table stay where they are
        f.seek(SeekFrom::Start(end))
            .map_err(out_err("writing", output))?;
        copy_range(&input.file, end, input.len - end, f).map_err(out_err("writing", output))?;
    } else {
        finish_edited(input, header, &sections, grow, f).map_err(werr)?;
    }
    Ok(Patched::Done(Box::new(ed.report)))
}

/// Errors if the input changed since `before` was taken at the open.
fn check_unchanged(input: &Input, before: &std::fs::Metadata) -> Result<(), ConvertError> {
    Ok(super::write::check_unchanged(
        input,
        before,
        "changed while being converted",
    )?)
}
