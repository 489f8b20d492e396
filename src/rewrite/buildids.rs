//! What `convert` decides per map: the build id of each MMAP and
//! inode-form MMAP2 (from the recording's BUILD_ID table where it can be
//! the mapped file's, see [`super::attribution`]; from the file on disk
//! only while it is provably the mapped one; else, while the map's process
//! lives, from the file it maps or sees at the path, by device and inode
//! the record's: another mount namespace's file; kernel and modules from /sys
//! for a recording of this kernel, see [`super::trust`]; by path only when
//! trusted), counted in the report ([`super::report`]). Shared by the
//! in-place patch, the stream and `pprof`.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::attribution::{table_verdict, MappedFile, MappedFiles, TableVerdict};
pub use super::report::ConvertReport;
use super::trust::{module_name, trust_for, Trust};
use crate::bytes::Endian;
use crate::model::{BuildId, FileKey, VDSO_NAME};
use crate::perf::consts::{misc, types};
use crate::perf::events::{
    leaked_build_id_flag, mmap_to_mmap2, parse_map, put_mmap2_id, MapRecord, Mmap2Id, MMAP2_ID_AT,
};
use crate::perf::features::parse_build_id_table;
use crate::perf::BuildIdEntry;
use crate::perf::{FormatError, RecordHeader};
use crate::proc::buildid::{
    kernel_build_id, module_build_id, read_build_id_at_path, read_file_at, read_live_build_id,
    vdso_build_id, FileAt, OnDisk, Trust as FileTrust,
};
use crate::proc::kernel::KERNEL_DSO;

/// Decides the build id of each map record: the BUILD_ID table (by cpumode
/// and path; host entries first) where it can be the mapped file's, the
/// file on disk when it is provably the mapped one, and what [`Trust`]
/// allows. Shared by the in-place patch and the streaming rewrite.
pub struct MapIds {
    table: HashMap<(u16, Vec<u8>), BuildId>,
    /// The file at each path now, looked at once.
    now: HashMap<Vec<u8>, Option<FileAt>>,
    /// The files the maps seen so far name, per path.
    files: MappedFiles,
    /// Those of the whole recording, from a first pass.
    complete: Option<MappedFiles>,
    by_path: HashMap<Vec<u8>, Option<BuildId>>,
    /// The id read through a live process per map (pid, start, end, file).
    live: HashMap<(Place, FileKey), Option<BuildId>>,
    trust: Trust,
    /// Every (cpumode, path) with the id its maps carry after conversion,
    /// for `--buildid-all`.
    mapped: BTreeMap<(u16, Vec<u8>), BuildId>,
}

/// Where a map was: (pid, start, end).
type Place = (u32, u64, u64);

/// Why a map would be kept without an id, by the table and the file at its
/// path here (counted so once its live process, if any, does not tell).
#[derive(Debug, Clone, Copy)]
enum Kept {
    Stale,
    Ambiguous,
    Missing,
}

/// Kernel or guest-kernel cpumode.
fn is_kernel_mode(cpumode: u16) -> bool {
    cpumode == misc::KERNEL || cpumode == misc::GUEST_KERNEL
}

/// The BUILD_ID table by (cpumode, path); host entries (pid -1) win.
fn table_by_path(
    table: Option<&[u8]>,
    e: Endian,
    at: u64,
) -> Result<HashMap<(u16, Vec<u8>), BuildId>, FormatError> {
    let mut ids = HashMap::new();
    for b in parse_build_id_table(table.unwrap_or_default(), e, at)? {
        let key = (b.cpumode & misc::CPUMODE_MASK, b.filename);
        if b.pid == -1 || !ids.contains_key(&key) {
            ids.insert(key, b.build_id);
        }
    }
    Ok(ids)
}

impl MapIds {
    /// Looks ids up in `table` (a BUILD_ID feature payload, `at` its offset).
    /// `osrelease` is the recording's OSRELEASE payload (with the table it
    /// decides whether the recording is of this kernel); `trust_paths` is
    /// `--trust-paths`.
    pub fn new(
        table: Option<&[u8]>,
        osrelease: Option<&[u8]>,
        (e, at): (Endian, u64),
        trust_paths: bool,
    ) -> Result<MapIds, FormatError> {
        let table = table_by_path(table, e, at)?;
        let kernel = table.get(&(misc::KERNEL, KERNEL_DSO.to_vec())).copied();
        Ok(MapIds {
            table,
            now: HashMap::new(),
            files: MappedFiles::default(),
            complete: None,
            by_path: HashMap::new(),
            live: HashMap::new(),
            trust: trust_for(osrelease, e, kernel, trust_paths),
            mapped: BTreeMap::new(),
        })
    }

    /// The same lookup knowing the files every path's maps name (from a
    /// first pass, [`MapIds::take_second_pass`]).
    pub fn knowing(self, files: MappedFiles) -> MapIds {
        MapIds {
            complete: Some(files),
            ..self
        }
    }

    /// After a pass without that knowledge: the files the maps name, when a
    /// table id was looked up for a path whose maps name several files
    /// (the pass must be made again, [`MapIds::knowing`] them).
    pub fn take_second_pass(&mut self) -> Option<MappedFiles> {
        let again = self.complete.is_none() && self.files.needs_second_pass();
        again.then(|| std::mem::take(&mut self.files))
    }

    /// Whether the maps of (cpumode, path) name several files.
    fn several(&self, cpumode: u16, path: &[u8]) -> bool {
        self.complete
            .as_ref()
            .unwrap_or(&self.files)
            .several(cpumode, path)
    }

    /// The file at `path` now, looked at once.
    fn file_at(&mut self, path: &[u8]) -> Option<&FileAt> {
        if !self.now.contains_key(path) {
            let at = read_file_at(Path::new(std::ffi::OsStr::from_bytes(path)));
            self.now.insert(path.to_vec(), at);
        }
        self.now.get(path).and_then(Option::as_ref)
    }

    /// The (cpumode, path, id) of mapped files the table lacks: what
    /// `--buildid-all` adds.
    pub fn table_lacks(&self) -> Vec<BuildIdEntry> {
        self.mapped
            .iter()
            .filter(|(k, _)| !self.table.contains_key(*k))
            .map(|((cpumode, path), id)| BuildIdEntry {
                cpumode: *cpumode,
                pid: -1,
                build_id: *id,
                filename: path.clone(),
            })
            .collect()
    }

    fn remember(&mut self, cpumode: u16, path: &[u8], id: BuildId) {
        // the kernel's maps are named after its relocation symbol; its
        // table entry is the DSO
        let name = match path.starts_with(KERNEL_DSO) && is_kernel_mode(cpumode) {
            true => KERNEL_DSO,
            false => path,
        };
        let key = (cpumode, name.to_vec());
        self.mapped.entry(key).or_insert(id);
    }

    /// For an MMAP2 record (`h`, `body`): its new header and the 24-byte
    /// build-id field to put at [`crate::perf::events::MMAP2_ID_AT`] of the
    /// body, or None when it stays as it is (counted in `r`).
    pub fn convert(
        &mut self,
        h: &RecordHeader,
        body: &[u8],
        e: Endian,
        r: &mut ConvertReport,
    ) -> Option<(RecordHeader, Vec<u8>)> {
        // malformed: passed through as it is
        let m = parse_map(h, body, e)?;
        if m.build_id.is_some() {
            r.already += 1;
        }
        // the kernel's flag over an inode body: written back in the form
        // its body has when no id is found
        let leaked = leaked_build_id_flag(h, body);
        r.leaked_flags += usize::from(leaked);
        let Some((id, fresh)) = self.mmap2_id(h.misc & misc::CPUMODE_MASK, &m, r) else {
            let unflagged = RecordHeader {
                misc: h.misc & !misc::MMAP_BUILD_ID,
                ..*h
            };
            return leaked.then(|| (unflagged, body[MMAP2_ID_AT..MMAP2_ID_AT + 24].to_vec()));
        };
        if !fresh {
            return None;
        }
        let patched = RecordHeader {
            misc: h.misc | misc::MMAP_BUILD_ID,
            ..*h
        };
        let mut field = Vec::with_capacity(24);
        put_mmap2_id(&mut field, e, &Mmap2Id::BuildId(id));
        Some((patched, field))
    }

    /// The BUILD_ID table's id for (cpumode, path), host entries first
    /// (e.g. `[vdso]`, which perf records there).
    pub fn table_id(&self, cpumode: u16, path: &[u8]) -> Option<BuildId> {
        self.table.get(&(cpumode, path.to_vec())).copied()
    }

    /// The build id of the file an MMAP or MMAP2 record maps, by the rules
    /// of `convert` (the record's own, the table, the file on disk while
    /// provably the mapped one, /sys for this kernel, the path only when
    /// trusted), counted in `r`; None for other records and unknown ids.
    pub fn id_of(
        &mut self,
        h: &RecordHeader,
        body: &[u8],
        e: Endian,
        r: &mut ConvertReport,
    ) -> Option<BuildId> {
        let m = parse_map(h, body, e)?;
        let cpumode = h.misc & misc::CPUMODE_MASK;
        match h.type_ {
            types::MMAP2 => self.mmap2_id(cpumode, &m, r).map(|(id, _)| id),
            _ => self.v1_id(cpumode, &m, r),
        }
    }

    /// An MMAP2's id and whether it is new (the record has none yet).
    fn mmap2_id(
        &mut self,
        cpumode: u16,
        m: &MapRecord,
        r: &mut ConvertReport,
    ) -> Option<(BuildId, bool)> {
        let path = &m.key.filename;
        if let Some(id) = m.build_id {
            self.remember(cpumode, path, id);
            return Some((id, false));
        }
        let (maj, min, ino) = m.dev_ino?;
        let id = if is_kernel_mode(cpumode) {
            self.kernel_id(cpumode, path, r)
        } else if path.as_slice() == VDSO_NAME && self.trust.paths && self.trust.this_kernel {
            r.from_path += 1;
            vdso_build_id()
        } else if path.first() != Some(&b'/') || ino == 0 {
            r.special += 1;
            None
        } else {
            let key = FileKey {
                dev_major: maj,
                dev_minor: min,
                inode: ino,
            };
            let generation = m.ino_generation;
            self.files
                .note(cpumode, path, MappedFile { key, generation });
            let place = (m.key.pid, m.key.addr, m.key.addr.saturating_add(m.key.len));
            self.id_for(cpumode, path, (key, place), r)
        }?;
        self.remember(cpumode, path, id);
        Some((id, true))
    }

    /// An MMAP (v1)'s id: it has no inode, so the table, the kernel's
    /// sources, or the path when trusted.
    fn v1_id(&mut self, cpumode: u16, m: &MapRecord, r: &mut ConvertReport) -> Option<BuildId> {
        let path = &m.key.filename;
        if is_kernel_mode(cpumode) {
            self.kernel_id(cpumode, path, r)
        } else if path.first() != Some(&b'/') {
            r.special += 1;
            None
        } else if let Some(&id) = self.table.get(&(cpumode, path.clone())) {
            self.files.note_table_use(cpumode, path);
            // no inode: nothing can prove which of several files it was
            if self.several(cpumode, path) {
                r.note_ambiguous(path);
                return None;
            }
            r.from_table += 1;
            Some(id)
        } else if self.trust.paths {
            self.by_path_id(path, r)
        } else {
            r.v1_no_id += 1;
            None
        }
    }

    /// For an MMAP (v1) record whose last `trailer` body bytes are its
    /// sample_id: the build-id MMAP2 it becomes, or None when no id is
    /// known (counted in `r`; MMAP has no inode, so the file at the path
    /// is read only with `--trust-paths`).
    pub fn convert_v1(
        &mut self,
        h: &RecordHeader,
        body: &[u8],
        trailer: usize,
        e: Endian,
        r: &mut ConvertReport,
    ) -> Option<Vec<u8>> {
        let m = parse_map(h, body, e)?;
        let cpumode = h.misc & misc::CPUMODE_MASK;
        let path = &m.key.filename;
        let id = self.v1_id(cpumode, &m, r);
        let Some(id) = id else {
            r.mmap_v1 += 1;
            return None;
        };
        let rec = mmap_to_mmap2(h, body, trailer, id, e);
        match &rec {
            Some(_) => {
                r.v1_converted += 1;
                self.remember(cpumode, path, id);
            }
            None => r.mmap_v1 += 1,
        }
        rec
    }

    /// The id of a kernel or module map: the table's, else /sys when the
    /// recording is from this kernel.
    fn kernel_id(&mut self, cpumode: u16, path: &[u8], r: &mut ConvertReport) -> Option<BuildId> {
        let is_kernel = path.starts_with(KERNEL_DSO);
        let name = if is_kernel { KERNEL_DSO } else { path };
        if let Some(id) = self.table.get(&(cpumode, name.to_vec())) {
            r.from_table += 1;
            return Some(*id);
        }
        let from_sys = match (self.trust.this_kernel && cpumode == misc::KERNEL, is_kernel) {
            (false, _) => None,
            (true, true) => kernel_build_id(),
            (true, false) => module_name(path).and_then(|n| module_build_id(&n)),
        };
        match from_sys {
            Some(_) => r.from_sys += 1,
            None => r.kernel_no_id += 1,
        }
        from_sys
    }

    /// The id of the file at `path` now (`--trust-paths`), read once.
    fn by_path_id(&mut self, path: &[u8], r: &mut ConvertReport) -> Option<BuildId> {
        let id = *self.by_path.entry(path.to_vec()).or_insert_with(|| {
            let p = Path::new(std::ffi::OsStr::from_bytes(path));
            read_build_id_at_path(p)
                .flatten()
                .and_then(|raw| BuildId::new(&raw))
        });
        match id {
            Some(_) => r.from_path += 1,
            None => r.v1_no_id += 1,
        }
        id
    }

    /// The id of the file `key` that process `pid` maps at START..END from
    /// `path`, read through that process while it lives and the file there
    /// has the recorded device and inode ([`read_live_build_id`], verified
    /// only: the pid may have been reused since); once per map.
    fn live_id(&mut self, path: &[u8], key: FileKey, place: Place) -> Option<BuildId> {
        *self.live.entry((place, key)).or_insert_with(|| {
            let (pid, start, end) = place;
            match read_live_build_id(pid, (start, end), path, key)? {
                (raw, FileTrust::Verified) => BuildId::new(&raw?),
                (_, FileTrust::Unverified) => None,
            }
        })
    }

    /// The id for an inode-form MMAP2 of `path` with `key`, mapped by a
    /// process at `place`, counting why not. Before a map is kept as stale,
    /// ambiguous or missing, its live process's file is tried
    /// ([`MapIds::live_id`]): the path may name another file in the
    /// process's mount namespace than here.
    fn id_for(
        &mut self,
        cpumode: u16,
        path: &[u8],
        (key, place): (FileKey, Place),
        r: &mut ConvertReport,
    ) -> Option<BuildId> {
        let kept = match self.id_here(cpumode, path, key, r) {
            Ok(id) => return id,
            Err(kept) => kept,
        };
        if let Some(id) = self.live_id(path, key, place) {
            r.from_live += 1;
            return Some(id);
        }
        match kept {
            Kept::Stale => r.note_stale(path),
            Kept::Ambiguous => r.note_ambiguous(path),
            Kept::Missing => r.missing += 1,
        }
        None
    }

    /// [`MapIds::id_for`] from the table and the file at the path here:
    /// the id, None (counted), or why it would be kept when its live
    /// process does not tell.
    fn id_here(
        &mut self,
        cpumode: u16,
        path: &[u8],
        key: FileKey,
        r: &mut ConvertReport,
    ) -> Result<Option<BuildId>, Kept> {
        // The recording's own table first: the same device and inode do
        // not prove the same contents (`cp` over a file, `rsync --inplace`
        // keep the inode), while perf read the table's ids while recording;
        // but only where its id can be this file's.
        if let Some(&id) = self.table.get(&(cpumode, path.to_vec())) {
            self.files.note_table_use(cpumode, path);
            let several = self.several(cpumode, path);
            match table_verdict(several, key, self.file_at(path), &id) {
                TableVerdict::Table => {
                    r.from_table += 1;
                    return Ok(Some(id));
                }
                TableVerdict::Disk => {}
                TableVerdict::Ambiguous => return Err(Kept::Ambiguous),
                TableVerdict::Stale => return Err(Kept::Stale),
            }
        }
        let on_disk = self.file_at(path).map_or(OnDisk::Missing, |f| f.about(key));
        match on_disk {
            OnDisk::Same(Some(raw)) => match BuildId::new(&raw) {
                Some(id) => {
                    r.from_disk += 1;
                    Ok(Some(id))
                }
                None => {
                    r.no_id += 1;
                    Ok(None)
                }
            },
            OnDisk::Same(None) => {
                r.no_id += 1;
                Ok(None)
            }
            OnDisk::Replaced => Err(Kept::Stale),
            OnDisk::Missing => Err(Kept::Missing),
        }
    }
}
