//! Build ids of mapped files: the per-file cache shared by all workers, the
//! user-space fallback that reads the ELF note from the mapped file, and the
//! vDSO's id.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use super::elf;
use crate::model::{BuildId, FileKey, VDSO_NAME};

/// Most bytes read from one PT_NOTE segment.
const MAX_NOTE_SEGMENT: u64 = 1 << 20;

/// Reads the GNU build id from an ELF file with positioned reads, validating
/// every size against the file. Returns the raw id of any length.
pub fn read_build_id_from_file(file: &File) -> io::Result<Option<Vec<u8>>> {
    let file_len = file.metadata()?.len();
    let mut head = [0u8; elf::HEADER_LEN];
    let n = read_full_at(file, &mut head, 0)?;
    let h = match elf::parse_header(&head[..n]) {
        Ok(h) => h,
        Err(_) => return Ok(None),
    };
    let ph_len = elf::phdrs_len(&h) as u64;
    if h.phoff.checked_add(ph_len).is_none_or(|end| end > file_len) {
        return Ok(None);
    }
    let mut phdrs = vec![0u8; ph_len as usize];
    if read_full_at(file, &mut phdrs, h.phoff)? != phdrs.len() {
        return Ok(None);
    }
    for (off, size) in elf::note_segments(&h, &phdrs) {
        if size > MAX_NOTE_SEGMENT || off.checked_add(size).is_none_or(|end| end > file_len) {
            continue;
        }
        let mut seg = vec![0u8; size as usize];
        let n = read_full_at(file, &mut seg, off)?;
        if let Some(id) = elf::find_gnu_build_id(&seg[..n], h.big_endian) {
            return Ok(Some(id.to_vec()));
        }
    }
    Ok(None)
}

fn read_full_at(file: &File, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], off) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Reads the build id of the mapped file of a VMA from user space:
/// `/proc/PID/map_files/START-END` (the mapped file itself, needs
/// CAP_SYS_ADMIN), else `/proc/PID/root/PATH` (the process's view of the path).
pub fn read_mapped_build_id(
    proc_root: &Path,
    pid: u32,
    start: u64,
    end: u64,
    path: &[u8],
) -> Option<Vec<u8>> {
    let dir = proc_root.join(pid.to_string());
    let map_file = dir.join(format!("map_files/{start:x}-{end:x}"));
    if let Ok(f) = File::open(&map_file) {
        if let Ok(id) = read_build_id_from_file(&f) {
            return id;
        }
    }
    if path.first() != Some(&b'/') || path.ends_with(b" (deleted)") {
        return None;
    }
    let mut p = dir.join("root").into_os_string().into_vec();
    p.extend_from_slice(path);
    let f = File::open(Path::new(std::ffi::OsStr::from_bytes(&p))).ok()?;
    read_build_id_from_file(&f).ok().flatten()
}

/// The vDSO's build id, read once from this process's own vDSO image through
/// `/proc/self/mem` (the vDSO is the same for every process of a kernel/arch).
pub fn vdso_build_id() -> Option<BuildId> {
    static VDSO: OnceLock<Option<BuildId>> = OnceLock::new();
    *VDSO.get_or_init(|| {
        let maps = std::fs::read("/proc/self/maps").ok()?;
        let vdso = super::maps_text::parse_maps(&maps, |_, name| name == VDSO_NAME)
            .ok()?
            .into_iter()
            .next()?;
        let mem = File::open("/proc/self/mem").ok()?;
        let mut image = vec![0u8; usize::try_from(vdso.len()).ok()?];
        let n = read_full_at(&mem, &mut image, vdso.start).ok()?;
        let id = elf::build_id_from_image(&image[..n]).ok()??;
        BuildId::new(&id)
    })
}

/// Build ids by file identity, shared by all workers so each distinct file is
/// asked for once.
#[derive(Default)]
pub struct BuildIdCache {
    map: Mutex<HashMap<FileKey, Option<BuildId>>>,
}

impl BuildIdCache {
    /// A new, empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached answer for a file: `None` if never asked, `Some(None)` if the
    /// file has no usable build id.
    pub fn get(&self, key: &FileKey) -> Option<Option<BuildId>> {
        self.lock().get(key).copied()
    }

    /// Records the answer for a file (the first answer wins).
    pub fn insert(&self, key: FileKey, id: Option<BuildId>) -> Option<BuildId> {
        *self.lock().entry(key).or_insert(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FileKey, Option<BuildId>>> {
        // A worker that panicked cannot leave the map half-updated: every
        // operation is a single insert or lookup.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The file reader finds the note through PT_NOTE and survives a truncated file.
    #[test]
    fn reads_from_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let img = elf::tests::tiny_elf(
            true,
            false,
            &elf::tests::note(false, b"GNU\0", 3, &[0x5a; 16]),
        );
        let p = dir.join("a.elf");
        std::fs::write(&p, &img).unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(read_build_id_from_file(&f).unwrap(), Some(vec![0x5a; 16]));
        std::fs::write(&p, &img[..0x104]).unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(read_build_id_from_file(&f).unwrap(), None);
    }

    // The vDSO of this process has a build id on x86-64 Linux.
    #[test]
    fn vdso_has_build_id() {
        assert!(vdso_build_id().is_some());
    }
}
