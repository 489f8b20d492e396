//! What `convert` decides per map and counts: the build id of each
//! inode-form MMAP2 (from the recording's BUILD_ID table, or from the file
//! on disk only while it is provably the mapped one) and the report of a
//! conversion. Shared by the in-place patch and the streaming rewrite.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::bytes::Endian;
use crate::model::{BuildId, FileKey};
use crate::perf::consts::misc;
use crate::perf::events::{parse_map, put_mmap2_id, Mmap2Id};
use crate::perf::features::parse_build_id_table;
use crate::perf::{FormatError, RecordHeader};
use crate::proc::buildid::{read_build_id_if_same, OnDisk};

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
    /// PERF_RECORD_COMPRESSED(2) records in the input.
    pub compressed_records: u64,
    /// Records taken out of compressed ones (`--decompress`).
    pub decompressed: u64,
    /// The input was a pipe-mode stream.
    pub from_pipe: bool,
    /// The output is a pipe-mode stream.
    pub to_pipe: bool,
    /// (offset, length) of bytes at the end of a pipe-mode input that form
    /// no records (perf's messages appended by `2>&1`, or damage): copied
    /// to a pipe-mode output, left out of a file-mode one.
    pub trailing: Option<(u64, u64)>,
}

/// Decides the build id of each inode-form MMAP2: the BUILD_ID table (by
/// cpumode and path; host entries first) or the file on disk when it is
/// provably the mapped one. Shared by the in-place patch and the streaming
/// rewrite.
pub struct MapIds {
    table: HashMap<(u16, Vec<u8>), BuildId>,
    disk: HashMap<(FileKey, Vec<u8>), OnDisk>,
}

impl MapIds {
    /// Looks ids up in `table` (a BUILD_ID feature payload, `at` its offset).
    pub fn new(table: Option<&[u8]>, e: Endian, at: u64) -> Result<MapIds, FormatError> {
        let mut ids = HashMap::new();
        for b in parse_build_id_table(table.unwrap_or_default(), e, at)? {
            let key = (b.cpumode & misc::CPUMODE_MASK, b.filename);
            if b.pid == -1 || !ids.contains_key(&key) {
                ids.insert(key, b.build_id);
            }
        }
        Ok(MapIds {
            table: ids,
            disk: HashMap::new(),
        })
    }

    /// For an MMAP2 record (`h`, `body`): its new header and the 24-byte
    /// build-id field to put at [`crate::perf::events::MMAP2_ID_AT`] of the body, or None when it
    /// stays as it is (counted in `r`).
    pub fn convert(
        &mut self,
        h: &RecordHeader,
        body: &[u8],
        e: Endian,
        r: &mut ConvertReport,
    ) -> Option<(RecordHeader, Vec<u8>)> {
        if h.misc & misc::MMAP_BUILD_ID != 0 {
            r.already += 1;
            return None;
        }
        // malformed: passed through as it is
        let m = parse_map(h, body, e)?;
        let (Some((maj, min, ino)), path) = (m.dev_ino, &m.key.filename) else {
            return None;
        };
        if path.first() != Some(&b'/') || ino == 0 {
            r.special += 1;
            return None;
        }
        let key = FileKey {
            dev_major: maj,
            dev_minor: min,
            inode: ino,
        };
        let id = self.id_for(h.misc & misc::CPUMODE_MASK, path, key, r)?;
        let patched = RecordHeader {
            misc: h.misc | misc::MMAP_BUILD_ID,
            ..*h
        };
        let mut field = Vec::with_capacity(24);
        put_mmap2_id(&mut field, e, &Mmap2Id::BuildId(id));
        Some((patched, field))
    }

    /// The id for an inode-form MMAP2 of `path` with `key`, counting why not.
    fn id_for(
        &mut self,
        cpumode: u16,
        path: &[u8],
        key: FileKey,
        r: &mut ConvertReport,
    ) -> Option<BuildId> {
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
                r.from_table += 1;
                return Some(*id);
            }
        }
        match on_disk {
            OnDisk::Same(Some(raw)) => match BuildId::new(&raw) {
                Some(id) => {
                    r.from_disk += 1;
                    Some(id)
                }
                None => {
                    r.no_id += 1;
                    None
                }
            },
            OnDisk::Same(None) => {
                r.no_id += 1;
                None
            }
            OnDisk::Replaced => {
                r.stale += 1;
                if r.stale_paths.len() < 5 && !r.stale_paths.iter().any(|p| p == path) {
                    r.stale_paths.push(path.to_vec());
                }
                None
            }
            OnDisk::Missing => {
                r.missing += 1;
                None
            }
        }
    }
}
