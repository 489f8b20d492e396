//! `convert`: rewrite a recording into a form every reader understands.
//! Implemented so far: `--buildid-mmap2` on file-mode, uncompressed
//! recordings. An inode-form MMAP2 (maj/min/ino) has the same size as the
//! build-id form, so the output is a kernel copy of the input with each
//! converted record patched where it lies: its place in the stream, the
//! sample_id trailer and every other byte stay as they were.
//!
//! The id of a record comes from the recording's own BUILD_ID table (by
//! cpumode and path), else from the file at the path, but only when that
//! file still has the record's device and inode; otherwise the record is
//! kept and counted as stale, never given another file's id.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::merge::{open_input, out_err};
use crate::bytes::Endian;
use crate::model::{BuildId, FileKey};
use crate::output::AtomicFile;
use crate::perf::consts::{feature, misc, types};
use crate::perf::events::{parse_map, put_mmap2_id, Mmap2Id, MMAP2_ID_AT};
use crate::perf::features::parse_build_id_table;
use crate::perf::stream::copy_range;
use crate::perf::{Attrs, FormatError, Input, InputError, Layout, RecordHeader, Visitor};
use crate::proc::buildid::{read_build_id_if_same, OnDisk};

/// What to convert.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// Inode-form MMAP2 records of files become build-id MMAP2 records.
    pub buildid_mmap2: bool,
    /// The output replaces the input (locked, mode and owner kept).
    pub in_place: bool,
}

/// What a conversion did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConvertReport {
    /// Records in the input.
    pub records: u64,
    /// MMAP2 records given a build id from the BUILD_ID table.
    pub from_table: u64,
    /// MMAP2 records given a build id read from the (same) file on disk.
    pub from_disk: u64,
    /// MMAP2 records that had a build id already.
    pub already: u64,
    /// Kept: another file is at the path now.
    pub stale: u64,
    /// Kept: no file at the path.
    pub missing: u64,
    /// Kept: the file has no build id, or one longer than MMAP2 holds.
    pub no_id: u64,
    /// Anonymous and special maps ([vdso], //anon, [heap]...), passed through.
    pub special: u64,
    /// MMAP (v1) records, kept as they are (not converted yet).
    pub mmap_v1: u64,
    /// Up to 5 stale paths, for the summary.
    pub stale_paths: Vec<Vec<u8>>,
}

/// A conversion failure.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The recording is malformed or unreadable.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Writing the output failed.
    #[error(transparent)]
    Output(#[from] super::MergeError),
    /// The recording is of a kind this version does not convert yet.
    #[error("{}: {what} recordings are not converted yet (see issue 9); nothing was written", path.display())]
    Unsupported {
        /// The recording.
        path: PathBuf,
        /// Its kind.
        what: &'static str,
    },
}

impl ConvertError {
    /// True for bad or unsupported input (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        match self {
            ConvertError::Input(InputError::Format { .. } | InputError::NotAFile { .. }) => true,
            ConvertError::Output(m) => m.is_bad_input(),
            ConvertError::Unsupported { .. } => true,
            ConvertError::Input(_) => false,
        }
    }
}

/// The BUILD_ID table, looked up by (cpumode, path); host entries (pid -1)
/// win over guest ones.
fn table_ids(input: &Input) -> Result<HashMap<(u16, Vec<u8>), BuildId>, InputError> {
    let mut ids = HashMap::new();
    if let Some((s, table)) = input.feature(feature::BUILD_ID)? {
        let entries =
            parse_build_id_table(&table, input.endian(), s.offset).map_err(|e| input.format(e))?;
        for b in entries {
            let key = (b.cpumode & misc::CPUMODE_MASK, b.filename);
            if b.pid == -1 || !ids.contains_key(&key) {
                ids.insert(key, b.build_id);
            }
        }
    }
    Ok(ids)
}

/// The walk's visitor: decides each MMAP2's id and patches the output.
struct Patcher<'a> {
    e: Endian,
    out: &'a File,
    table: HashMap<(u16, Vec<u8>), BuildId>,
    disk: HashMap<(FileKey, Vec<u8>), OnDisk>,
    report: ConvertReport,
    compressed: bool,
    failed: Option<io::Error>,
}

impl Patcher<'_> {
    /// The id for an inode-form MMAP2 of `path` with `key`, counting why not.
    fn id_for(&mut self, cpumode: u16, path: &[u8], key: FileKey) -> Option<BuildId> {
        // The file on disk first, when it is provably the mapped one: the
        // table's id was read by path at the end of the recording, so a
        // library upgraded meanwhile has the new build's id there.
        let on_disk = self
            .disk
            .entry((key, path.to_vec()))
            .or_insert_with(|| {
                read_build_id_if_same(Path::new(std::ffi::OsStr::from_bytes(path)), key)
            })
            .clone();
        if !matches!(on_disk, OnDisk::Same(Some(_))) {
            if let Some(id) = self.table.get(&(cpumode, path.to_vec())) {
                self.report.from_table += 1;
                return Some(*id);
            }
        }
        match on_disk {
            OnDisk::Same(Some(raw)) => match BuildId::new(&raw) {
                Some(id) => {
                    self.report.from_disk += 1;
                    Some(id)
                }
                None => {
                    self.report.no_id += 1;
                    None
                }
            },
            OnDisk::Same(None) => {
                self.report.no_id += 1;
                None
            }
            OnDisk::Replaced => {
                self.report.stale += 1;
                if self.report.stale_paths.len() < 5
                    && !self.report.stale_paths.iter().any(|p| p == path)
                {
                    self.report.stale_paths.push(path.to_vec());
                }
                None
            }
            OnDisk::Missing => {
                self.report.missing += 1;
                None
            }
        }
    }
}

impl Visitor for Patcher<'_> {
    fn stored(&mut self, _at: u64, h: &RecordHeader) {
        if matches!(h.type_, types::COMPRESSED | types::COMPRESSED2) {
            self.compressed = true;
        }
    }

    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        _attrs: &Attrs,
    ) -> Result<(), FormatError> {
        self.report.records += 1;
        if h.type_ == types::MMAP {
            self.report.mmap_v1 += 1;
            return Ok(());
        }
        if h.type_ != types::MMAP2 || self.compressed {
            return Ok(());
        }
        if h.misc & misc::MMAP_BUILD_ID != 0 {
            self.report.already += 1;
            return Ok(());
        }
        let Some(m) = parse_map(&h, body, self.e) else {
            return Ok(()); // malformed: passed through as it is
        };
        let (Some((maj, min, ino)), path) = (m.dev_ino, &m.key.filename) else {
            return Ok(());
        };
        if path.first() != Some(&b'/') || ino == 0 {
            self.report.special += 1;
            return Ok(());
        }
        let key = FileKey {
            dev_major: maj,
            dev_minor: min,
            inode: ino,
        };
        let Some(id) = self.id_for(h.misc & misc::CPUMODE_MASK, path, key) else {
            return Ok(());
        };
        let patched = RecordHeader {
            misc: h.misc | misc::MMAP_BUILD_ID,
            ..h
        };
        let mut head = Vec::with_capacity(8);
        patched.put(&mut head, self.e);
        let mut field = Vec::with_capacity(24);
        put_mmap2_id(&mut field, self.e, &Mmap2Id::BuildId(id));
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
    let input = open_input(input_path, opts.in_place)?;
    let unsupported = |what| ConvertError::Unsupported {
        path: input_path.to_path_buf(),
        what,
    };
    let Layout::File { header, .. } = &input.layout else {
        return Err(unsupported("pipe-mode"));
    };
    if header.features.contains(feature::COMPRESSED) {
        return Err(unsupported("compressed (perf record -z)"));
    }
    let mut out = AtomicFile::create(output)
        .map_err(|e| out_err("creating a temporary file for", output)(e))?;
    if opts.in_place {
        let meta = input
            .file
            .metadata()
            .map_err(|e| out_err("reading", &input.path)(e))?;
        out.keep_mode_and_owner(&meta);
    }
    copy_range(&input.file, 0, input.len, out.file()).map_err(|e| out_err("writing", output)(e))?;
    // Walk the copy, not the input: the patches then land on the bytes the
    // walk saw even if someone rewrites the input meanwhile. Offsets are the
    // same, so errors still name the input.
    let mut copy = Input::open(out.tmp_path())?;
    copy.path.clone_from(&input.path);
    if !matches!(copy.layout, Layout::File { .. }) {
        return Err(unsupported("pipe-mode"));
    }
    let table = table_ids(&copy)?;
    let mut p = Patcher {
        e: copy.endian(),
        out: out.file(),
        table,
        disk: HashMap::new(),
        report: ConvertReport::default(),
        compressed: false,
        failed: None,
    };
    copy.walk(None, &mut p)?;
    if p.compressed {
        return Err(unsupported("compressed (perf record -z)"));
    }
    if let Some(e) = p.failed.take() {
        return Err(out_err("writing", output)(e).into());
    }
    let report = std::mem::take(&mut p.report);
    drop(p);
    out.commit().map_err(|e| out_err("writing", output)(e))?;
    Ok(report)
}
