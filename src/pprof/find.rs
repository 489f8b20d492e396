//! Which file symbolization reads for a build id, and the private copy it
//! reads: the file with that id in `--buildid-dir` (perf's build-id cache
//! layout), at a recorded path, or, while a process that mapped it lives,
//! the mapped file itself (`/proc/PID/map_files/START-END`) or the
//! process's view of the path (`/proc/PID/root/PATH`): a container's
//! binary whose host path holds another build, or nothing. Every candidate
//! is opened non-blocking, regular files only, and taken only with the
//! recorded build id; a map recorded with a device and inode instead
//! (perf's own MMAP2) gets the id of its live mapping's file while that is
//! the recorded inode.

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::OnceLock;

use super::maps::Map;
use crate::archive::cache_entry;
use crate::model::{BuildId, VDSO_NAME};
use crate::perf::copy::copy_range;
use crate::proc::buildid::{
    in_root, kernel_build_id, map_file, open_if_build_id, open_if_regular, read_build_id_at_path,
    read_build_id_from_file, read_live_build_id, vdso_image,
};
use crate::sys::data_bytes;

/// Where a build id's file was mapped in a process of the recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// The recorded path.
    pub path: Rc<[u8]>,
    /// The process and the range of its map.
    pub pid: u32,
    pub start: u64,
    pub end: u64,
}

/// Most processes whose files are tried for one build id.
const MAX_PROCESSES: usize = 16;

/// The file with build id `id`: in the build-id directory (perf's cache
/// layout, [`cache_entry`]), else a recorded path whose file has that id
/// now, else that of a live process that mapped it (its mapping, then its
/// view of the path: at most [`MAX_PROCESSES`] processes); for `[vdso]`,
/// this kernel's own image when the id is its. Not found, it says what is
/// at the recorded path when that is another build.
pub fn find_elf(
    id: &BuildId,
    mapped: &[Mapped],
    buildid_dir: Option<&Path>,
) -> Result<File, String> {
    let mut paths: Vec<&Rc<[u8]>> = Vec::new();
    for m in mapped {
        if !paths.contains(&&m.path) {
            paths.push(&m.path);
        }
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = buildid_dir {
        for p in &paths {
            if let Some(entry) = cache_entry(p, id) {
                candidates.extend(entry.files(dir, p));
            }
        }
    }
    let files = paths.iter().filter(|p| p.first() == Some(&b'/'));
    candidates.extend(
        files
            .clone()
            .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p))),
    );
    let mut pids: Vec<u32> = Vec::new();
    for m in mapped.iter().filter(|m| m.path.first() == Some(&b'/')) {
        if pids.len() < MAX_PROCESSES && !pids.contains(&m.pid) && m.pid != u32::MAX {
            pids.push(m.pid);
            candidates.push(map_file(m.pid, m.start, m.end));
            candidates.push(in_root(m.pid, &m.path));
        }
    }
    if let Some(f) = candidates.iter().find_map(|c| open_if_build_id(c, id)) {
        return Ok(f);
    }
    if paths.iter().any(|p| ***p == *VDSO_NAME) {
        if let Some((_, image)) = vdso_image().filter(|(running, _)| running == id) {
            let mut f = tempfile::tempfile().map_err(|e| format!("temporary copy: {e}"))?;
            std::io::Write::write_all(&mut f, &image).map_err(|e| e.to_string())?;
            return Ok(f);
        }
    }
    for p in files {
        let at = Path::new(std::ffi::OsStr::from_bytes(p));
        match read_build_id_at_path(at)
            .flatten()
            .and_then(|raw| BuildId::new(&raw))
        {
            Some(other) => {
                return Err(format!(
                    "another build at {} ({})",
                    at.display(),
                    other.to_hex()
                ))
            }
            // (looked at as the reads were: nothing on FUSE is asked)
            None if open_if_regular(at).is_some() => {
                return Err(format!("another file at {}", at.display()))
            }
            None => {}
        }
    }
    Err("not found".into())
}

/// The running vDSO's build id for a `[vdso]` map recorded without one
/// (perf 6.1's pipe-mode and `-z` recordings give it none), when the
/// recording's kernel (`kernel`: its map's build id) is the running build:
/// perf names such frames from its own vDSO alike ([`vdso_of`]).
pub fn this_kernels_vdso(map: &Map, kernel: Option<BuildId>) -> Option<BuildId> {
    static RUNNING: OnceLock<Running> = OnceLock::new();
    let running = RUNNING.get_or_init(|| {
        let vdso = vdso_image().map(|(id, image)| (id, image.len() as u64));
        (kernel_build_id(), vdso)
    });
    vdso_of(map, kernel, *running)
}

/// The running kernel's build id, and its vDSO's id and length.
type Running = (Option<BuildId>, Option<(BuildId, u64)>);

/// [`this_kernels_vdso`]'s rule, given what is [`Running`]: the map must be
/// as long as the running vDSO too (a 32-bit process's is another image,
/// of another size).
fn vdso_of(map: &Map, kernel: Option<BuildId>, running: Running) -> Option<BuildId> {
    let (Some(kernel), (Some(now), Some((vdso, len)))) = (kernel, running) else {
        return None;
    };
    let same = kernel == now && map.end.wrapping_sub(map.start) == len;
    (map.build_id.is_none() && *map.filename == *VDSO_NAME && same).then_some(vdso)
}

/// The build id of the file a map without one maps (a map recorded with
/// its device and inode), read through process `pid` while it lives and
/// that is the recorded inode ([`read_live_build_id`]; its device is not
/// required: overlayfs gives `stat` another device than the maps show, for
/// the same file).
pub fn live_id(pid: u32, map: &Map) -> Option<BuildId> {
    let key = map.file?;
    let (raw, _) = read_live_build_id(pid, (map.start, map.end), &map.filename, key)?;
    BuildId::new(&raw?)
}

/// Largest file copied for symbolization (as `archive` copies).
const MAX_COPY: u64 = 4 << 30;

/// A private copy of a verified file, checked again: blazesym maps what it
/// reads, and the owner of the original could truncate it under the map
/// (SIGBUS) or rewrite it meanwhile.
pub fn private_copy(f: &File, id: &BuildId) -> Result<File, String> {
    let copy = bounded_copy(f, MAX_COPY)?;
    match read_build_id_from_file(&copy) {
        Ok(Some(raw)) if raw.as_slice() == id.as_bytes() => Ok(copy),
        _ => Err("changed while it was copied".into()),
    }
}

/// A copy of `f` in an unlinked temporary file; sparse files (a 6 GiB
/// hole, or a `fallocate`d one never written, costs nothing to make and
/// all of it to read) and files over `max` bytes are refused.
pub fn bounded_copy(f: &File, max: u64) -> Result<File, String> {
    let m = f.metadata().map_err(|e| e.to_string())?;
    if m.len() > max {
        return Err(format!("{} bytes, more than {max}", m.len()));
    }
    let data = data_bytes(f, &m);
    if data + (1 << 20) < m.len() {
        return Err(format!(
            "sparse file: {data} of its {} bytes written (the rest holes or unwritten extents)",
            m.len()
        ));
    }
    let mut copy = tempfile::tempfile().map_err(|e| format!("temporary copy: {e}"))?;
    copy_range(f, 0, m.len(), &mut copy).map_err(|e| format!("copying: {e}"))?;
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Archived kallsyms and files to symbolize are copied only when whole
    // and bounded: a 6 GiB hole (instant to make, 46 s and 6 GiB of memory
    // to read, as seen) and a file over the bound are refused.
    #[test]
    fn bounded_copy_refuses_holes_and_oversize() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(6 << 30).unwrap();
        let e = bounded_copy(&sparse, u64::MAX).unwrap_err();
        assert!(e.contains("sparse"), "{e}");
        let small = dir.path().join("small");
        std::fs::write(&small, b"ffffffff81000000 T _text\n").unwrap();
        let e = bounded_copy(&File::open(&small).unwrap(), 8).unwrap_err();
        assert!(e.contains("more than 8"), "{e}");
        let mut copy = bounded_copy(&File::open(&small).unwrap(), 1 << 20).unwrap();
        std::io::Seek::rewind(&mut copy).unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut copy, &mut got).unwrap();
        assert_eq!(got, "ffffffff81000000 T _text\n");
    }

    // A recorded path holding another build is named with its id when
    // nothing has the recorded one; an absent file is "not found".
    #[test]
    fn another_build_at_the_path_is_named() {
        let elf = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz/elf_notes/libz.so.1");
        let raw = read_build_id_from_file(&File::open(&elf).unwrap())
            .unwrap()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("libz.so.1");
        std::fs::copy(&elf, &at).unwrap();
        let mapped = |path: &Path| {
            [Mapped {
                path: Rc::from(path.as_os_str().as_bytes()),
                pid: u32::MAX,
                start: 0,
                end: 0,
            }]
        };
        let want = BuildId::new(&[7; 20]).unwrap();
        let e = find_elf(&want, &mapped(&at), None).unwrap_err();
        let other = BuildId::new(&raw).unwrap().to_hex();
        assert_eq!(e, format!("another build at {} ({other})", at.display()));
        let e = find_elf(&want, &mapped(&dir.path().join("gone")), None).unwrap_err();
        assert_eq!(e, "not found");
    }

    // A [vdso] map recorded without an id is taken as the running vDSO only
    // for the running kernel's build and the running vDSO's length; never a
    // map with an id of its own, another name, or when either is unknown.
    #[test]
    fn a_vdso_without_an_id_is_the_running_one_of_the_same_build_only() {
        let id = |b| BuildId::new(&[b; 20]);
        let (kernel, vdso) = (id(1), id(2).unwrap());
        let map = |name: &[u8], len: u64, build_id| Map {
            start: 0x7000,
            end: 0x7000 + len,
            pgoff: 0,
            filename: Rc::from(name),
            build_id,
            file: None,
        };
        let running = (kernel, Some((vdso, 0x2000)));
        let ours = map(b"[vdso]", 0x2000, None);
        assert_eq!(vdso_of(&ours, kernel, running), Some(vdso));
        assert_eq!(vdso_of(&ours, id(3), running), None, "another build");
        assert_eq!(vdso_of(&ours, None, running), None, "kernel unknown");
        assert_eq!(vdso_of(&ours, kernel, (None, running.1)), None);
        assert_eq!(vdso_of(&ours, kernel, (kernel, None)), None);
        let short = map(b"[vdso]", 0x1000, None);
        assert_eq!(vdso_of(&short, kernel, running), None, "another image");
        assert_eq!(
            vdso_of(&map(b"[vdso]", 0x2000, id(4)), kernel, running),
            None
        );
        assert_eq!(
            vdso_of(&map(b"[vvar]", 0x2000, None), kernel, running),
            None
        );
    }

    // A [vdso] mapping whose id is not the running kernel's is found in the
    // build-id directory, at the file `archive` writes for it (`[vdso]/ID/
    // vdso`): a recording from another kernel symbolizes its vDSO frames
    // from the archive. Without the archive it is not found.
    #[test]
    fn archived_vdso_of_another_kernel_is_found() {
        let elf = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz/elf_notes/libz.so.1");
        let raw = read_build_id_from_file(&File::open(&elf).unwrap())
            .unwrap()
            .expect("the fixture has a build id");
        let id = BuildId::new(&raw).unwrap();
        assert_ne!(vdso_image().map(|(running, _)| running), Some(id));
        let dir = tempfile::tempdir().unwrap();
        let paths = [Mapped {
            path: Rc::from(VDSO_NAME),
            pid: u32::MAX,
            start: 0,
            end: 0,
        }];
        assert!(find_elf(&id, &paths, Some(dir.path())).is_err());
        let archived = &cache_entry(VDSO_NAME, &id)
            .unwrap()
            .files(dir.path(), VDSO_NAME)[0];
        assert!(archived.ends_with(format!("[vdso]/{}/vdso", id.to_hex())));
        std::fs::create_dir_all(archived.parent().unwrap()).unwrap();
        std::fs::copy(&elf, archived).unwrap();
        let mut found = find_elf(&id, &paths, Some(dir.path())).expect("archived vdso");
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut found, &mut got).unwrap();
        assert!(got == std::fs::read(&elf).unwrap(), "not the archived file");
    }
}
