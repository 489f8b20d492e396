//! What a conversion did: the counts `convert` (and `pprof`, which shares
//! its build-id rules) report, and the first few paths behind the maps kept
//! as stale or ambiguous.

/// What a conversion did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConvertReport {
    /// Records in the input.
    pub records: u64,
    /// Maps given a build id from the BUILD_ID table.
    pub from_table: u64,
    /// MMAP2 records given a build id read from the (same) file on disk.
    pub from_disk: u64,
    /// MMAP2 records given a build id read through the live process that
    /// maps the file (`/proc/PID/map_files`, `/proc/PID/root/PATH`), its
    /// device and inode the record's: another mount namespace's file, or
    /// one replaced at the path here.
    pub from_live: u64,
    /// MMAP2 records that had a build id already.
    pub already: u64,
    /// MMAP2 records with the build-id flag over an inode body (the
    /// kernel's leak, see `leaked_build_id_flag`): written back with an id,
    /// or as the inode form they are.
    pub leaked_flags: usize,
    /// Kept: another file is at the path now (or, for a table id, another
    /// file with exactly that id): replaced on disk, or the path names
    /// another file in the map's mount namespace; no live process told.
    pub stale: u64,
    /// Kept: the table's id for the path, whose maps name several files
    /// (replaced while recorded, or other mount namespaces'), may be
    /// another file's.
    pub ambiguous: u64,
    /// Kept: no file at the path (and no live process that maps it).
    pub missing: u64,
    /// Kept: the file has no build id, or one longer than MMAP2 holds.
    pub no_id: u64,
    /// Anonymous and special maps (`[vdso]`, `//anon`, `[heap]`...), passed through.
    pub special: u64,
    /// MMAP (v1) records kept as they are (no id known for them).
    pub mmap_v1: u64,
    /// MMAP (v1) records turned into build-id MMAP2.
    pub v1_converted: u64,
    /// MMAP (v1) maps of files with no id in the table (read from the
    /// file at the path only with `--trust-paths`) or none at that path.
    pub v1_no_id: u64,
    /// Ids taken from the file at the path without an inode check
    /// (`--trust-paths`: MMAP v1, `[vdso]`).
    pub from_path: u64,
    /// Kernel and module ids read from /sys (recording of this kernel).
    pub from_sys: u64,
    /// Kernel and module maps left without an id.
    pub kernel_no_id: u64,
    /// BUILD_ID table entries added (`--buildid-all`).
    pub table_added: u64,
    /// Feature bits left out of a stream (perf 6.1 aborts on a
    /// HEADER_FEATURE it does not know).
    pub features_dropped: Vec<u32>,
    /// Feature bits left out of the output because perf 6.1's reader of
    /// its mode could not read their payload, with why (see
    /// `perf::feature_check`).
    pub features_unreadable: Vec<(u32, &'static str)>,
    /// BUILD_ID entries left out of a file-mode output: longer than perf's
    /// file-mode reader holds.
    pub build_ids_too_long: usize,
    /// Where the recording, cut short, was read up to (`salvage`).
    pub salvaged: Option<crate::perf::Salvaged>,
    /// Up to 5 stale paths, for the summary.
    pub stale_paths: Vec<Vec<u8>>,
    /// Up to 5 ambiguous paths, for the summary.
    pub ambiguous_paths: Vec<Vec<u8>>,
    /// PERF_RECORD_COMPRESSED(2) records in the input.
    pub compressed_records: u64,
    /// Records taken out of compressed ones (`--decompress`).
    pub decompressed: u64,
    /// COMPRESSED records written anew (maps converted inside them, or
    /// the input's could not be copied: `odd_compressed`).
    pub recompressed: u64,
    /// The first of the input's COMPRESSED records that perf does not read
    /// as they are (offset, what it holds: nested, empty, two zstd frames),
    /// which made a copy of them compress them anew instead.
    pub odd_compressed: Option<(u64, &'static str)>,
    /// The input was a pipe-mode stream.
    pub from_pipe: bool,
    /// The output is a pipe-mode stream.
    pub to_pipe: bool,
    /// (offset, length) of bytes at the end of a pipe-mode input that form
    /// no records (perf's messages appended by `2>&1`, or damage): copied
    /// to a pipe-mode output, left out of a file-mode one.
    pub trailing: Option<(u64, u64)>,
}

impl ConvertReport {
    /// Counts a map kept as stale (another file at its path now).
    pub fn note_stale(&mut self, path: &[u8]) {
        note_path(&mut self.stale, &mut self.stale_paths, path);
    }

    /// Counts a map kept as ambiguous (one table id, several files).
    pub fn note_ambiguous(&mut self, path: &[u8]) {
        note_path(&mut self.ambiguous, &mut self.ambiguous_paths, path);
    }
}

/// Counts a map kept for `path`, which joins the first five named.
fn note_path(count: &mut u64, paths: &mut Vec<Vec<u8>>, path: &[u8]) {
    *count += 1;
    if paths.len() < 5 && !paths.iter().any(|p| p == path) {
        paths.push(path.to_vec());
    }
}
