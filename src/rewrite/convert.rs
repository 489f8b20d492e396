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
//! cpumode and path), else from the file at the path, but only when that
//! file still has the record's device and inode; otherwise the record is
//! kept and counted as stale, never given another file's id.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::buildids::{ConvertReport, MapIds};
use super::merge::{open_input, MergeError};
use super::transcode::{transcode, TranscodeError, TranscodeOptions};
use crate::bytes::Endian;
use crate::output::AtomicFile;
use crate::perf::consts::{feature, types};
use crate::perf::events::MMAP2_ID_AT;
use crate::perf::stream::copy_range;
use crate::perf::{
    Attrs, FormatError, FormatErrorKind, Input, InputError, Layout, RecordHeader, Visitor,
};

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
    /// True for bad or unsupported input (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ConvertError::Input(InputError::Format { .. } | InputError::NotAFile { .. })
                | ConvertError::TooLarge { .. }
        )
    }
}

fn out_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ConvertError {
    let path = path.to_path_buf();
    move |source| ConvertError::Output { op, path, source }
}

/// The in-place walk's visitor: patches each converted MMAP2 where it lies.
struct Patcher<'a> {
    e: Endian,
    out: &'a File,
    ids: MapIds,
    report: ConvertReport,
    compressed: bool,
    /// An MMAP (v1) record would become a (longer) MMAP2.
    resized: bool,
    failed: Option<io::Error>,
}

impl Visitor for Patcher<'_> {
    fn stored(&mut self, _at: u64, h: &RecordHeader, _body: &[u8]) {
        if matches!(h.type_, types::COMPRESSED | types::COMPRESSED2) {
            self.compressed = true;
        }
    }

    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        self.report.records += 1;
        if h.type_ == types::MMAP {
            let trailer = attrs
                .of_trailer(body, self.e)
                .map_or(0, |a| a.layout().len());
            let r = &mut self.report;
            if self.ids.convert_v1(&h, body, trailer, self.e, r).is_some() {
                self.resized = true;
            }
            return Ok(());
        }
        if h.type_ != types::MMAP2 || self.compressed {
            return Ok(());
        }
        let Some((patched, field)) = self.ids.convert(&h, body, self.e, &mut self.report) else {
            return Ok(());
        };
        let mut head = Vec::with_capacity(8);
        patched.put(&mut head, self.e);
        let id_at = at + 8 + MMAP2_ID_AT as u64;
        let res = self
            .out
            .write_all_at(&head, at)
            .and_then(|()| self.out.write_all_at(&field, id_at));
        if let Err(e) = res {
            self.failed.get_or_insert(e);
        }
        Ok(())
    }
}

/// Converts `input_path` into `output` (which may be the input itself with
/// `in_place`), atomically: on error nothing changes.
pub fn convert(
    input_path: &Path,
    output: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport, ConvertError> {
    let input = open_input(input_path, opts.in_place).map_err(|e| match e {
        MergeError::Input(e) => ConvertError::Input(e),
        MergeError::Output { op, path, source } => ConvertError::Output { op, path, source },
        other => ConvertError::Output {
            op: "opening",
            path: input_path.to_path_buf(),
            source: io::Error::other(other.to_string()),
        },
    })?;
    let from_pipe = matches!(input.layout, Layout::Pipe(_));
    let to_pipe = opts.to_pipe.unwrap_or(from_pipe);
    let compressed = match &input.layout {
        Layout::File { header, .. } => header.features.contains(feature::COMPRESSED),
        Layout::Pipe(_) => false,
    };
    let mut out =
        AtomicFile::create(output).map_err(out_err("creating a temporary file for", output))?;
    if opts.in_place {
        let meta = input
            .file
            .metadata()
            .map_err(out_err("reading", &input.path))?;
        out.keep_mode_and_owner(&meta);
    }
    let patchable = opts.buildid_mmap2
        && !opts.buildid_all
        && !from_pipe
        && !to_pipe
        && !opts.decompress
        && !compressed;
    let mut report = None;
    if patchable {
        report = patch_copy(&input, &mut out, output, opts.trust_paths)?;
        if report.is_none() {
            // MMAP (v1) to convert, or compressed records without the
            // COMPRESSED feature: start over with the stream
            let f = out.file();
            f.set_len(0).map_err(out_err("writing", output))?;
            f.seek(SeekFrom::Start(0))
                .map_err(out_err("writing", output))?;
        }
    }
    let mut report = match report {
        Some(r) => r,
        None => {
            let t = TranscodeOptions {
                to_pipe,
                decompress: opts.decompress,
                buildid_mmap2: opts.buildid_mmap2,
                trust_paths: opts.trust_paths,
                buildid_all: opts.buildid_all,
            };
            transcode(&input, out.file(), t).map_err(|e| match e {
                TranscodeError::Input(e) => ConvertError::Input(e),
                TranscodeError::Output(source) => out_err("writing", output)(source),
                e @ TranscodeError::TooLarge { .. } => ConvertError::TooLarge {
                    path: input_path.to_path_buf(),
                    source: e,
                },
            })?
        }
    };
    report.from_pipe = from_pipe;
    report.to_pipe = to_pipe;
    out.commit().map_err(out_err("writing", output))?;
    Ok(report)
}

/// The in-place patch: a kernel copy of the input with each converted
/// MMAP2 patched where it lies (the inode and build-id forms have the same
/// size). None when the walk met compressed records (then the streaming
/// rewrite must do it).
fn patch_copy(
    input: &Input,
    out: &mut AtomicFile,
    output: &Path,
    trust_paths: bool,
) -> Result<Option<ConvertReport>, ConvertError> {
    copy_range(&input.file, 0, input.len, out.file()).map_err(out_err("writing", output))?;
    // Walk the copy, not the input: the patches then land on the bytes the
    // walk saw even if someone rewrites the input meanwhile. Offsets are the
    // same, so errors still name the input.
    let mut copy = Input::open(out.tmp_path())?;
    copy.path.clone_from(&input.path);
    if !matches!(copy.layout, Layout::File { .. }) {
        let err = FormatError::at(
            0,
            FormatErrorKind::Inconsistent("changed while being copied"),
        );
        return Err(copy.format(err).into());
    }
    let table = copy.feature(feature::BUILD_ID)?;
    let (at, table) = table.map_or((0, None), |(s, t)| (s.offset, Some(t)));
    let osrelease = copy.feature(feature::OSRELEASE)?.map(|(_, b)| b);
    let e = copy.endian();
    let ids = MapIds::new(table.as_deref(), osrelease.as_deref(), (e, at), trust_paths)
        .map_err(|e| copy.format(e))?;
    let mut p = Patcher {
        e: copy.endian(),
        out: out.file(),
        ids,
        report: ConvertReport::default(),
        compressed: false,
        resized: false,
        failed: None,
    };
    copy.walk(None, &mut p)?;
    if p.compressed || p.resized {
        return Ok(None);
    }
    if let Some(e) = p.failed.take() {
        return Err(out_err("writing", output)(e));
    }
    Ok(Some(std::mem::take(&mut p.report)))
}
