//! `archive --from`: the files a snapshot or recording says its processes
//! mapped, held as one entry per distinct mapped file of a process (pid,
//! name, build id or device and inode) with the number of its maps, never
//! one per map record: a file of a few map records repeated in compressed
//! records (~180 MiB of them from 16 KB) held two decoded copies of each
//! (~500 MB) and tried each map's file again (8 s).

use std::collections::{BTreeSet, HashMap};

use crate::model::{BuildId, Name, Vma};
use crate::perf::{Input, InputError};
use crate::snapshot::{vma_of, walk_maps, MapsRecord, Names};

/// One distinct mapped file of a process.
pub(super) struct Mapped {
    pub(super) pid: u32,
    /// Its map at the lowest address (the first of those there).
    pub(super) vma: Vma,
    /// How many maps of the process name it.
    pub(super) maps: usize,
}

/// What a `--from` file names.
pub(super) struct MappedFiles {
    /// Processes (pids of its COMM and user-space map records).
    pub(super) processes: usize,
    /// Its mapped files (absolute names), by pid, then by the address of
    /// their first map: the order a walk of each process's maps by
    /// address meets them.
    pub(super) files: Vec<Mapped>,
}

/// A mapped file's identity within a process.
type Key = (u32, Name, Option<BuildId>, (u32, u32, u64));

/// Reads the distinct mapped files of `input` (see [`MappedFiles`]).
pub(super) fn mapped_files(input: &Input) -> Result<MappedFiles, InputError> {
    let mut pids = BTreeSet::new();
    let mut names = Names::default();
    // by key: the index in `files`; the record number of each one's map
    let mut seen: HashMap<Key, usize, foldhash::fast::RandomState> = HashMap::default();
    let mut files: Vec<Mapped> = Vec::new();
    let mut order: Vec<u64> = Vec::new();
    let mut n = 0u64;
    walk_maps(input, |r| {
        let m = match r {
            MapsRecord::Comm(pid, ..) => {
                pids.insert(pid);
                return;
            }
            MapsRecord::Map(m) if m.key.pid != u32::MAX => m,
            MapsRecord::Map(_) | MapsRecord::Bpf(_) => return,
        };
        pids.insert(m.key.pid);
        if m.key.filename.first() != Some(&b'/') {
            return;
        }
        n += 1;
        let vma = vma_of(&m, &mut names);
        let ident = (vma.dev_major, vma.dev_minor, vma.inode);
        let key = (m.key.pid, vma.name.clone(), vma.build_id, ident);
        match seen.get_mut(&key) {
            Some(i) => {
                let f = &mut files[*i];
                f.maps += 1;
                if vma.start < f.vma.start {
                    f.vma = vma;
                    order[*i] = n;
                }
            }
            None => {
                seen.insert(key, files.len());
                order.push(n);
                files.push(Mapped {
                    pid: m.key.pid,
                    vma,
                    maps: 1,
                });
            }
        }
    })?;
    drop(seen);
    let mut by: Vec<(u32, u64, u64, usize)> = files
        .iter()
        .zip(&order)
        .enumerate()
        .map(|(i, (f, &n))| (f.pid, f.vma.start, n, i))
        .collect();
    by.sort_unstable();
    let mut slots: Vec<Option<Mapped>> = files.into_iter().map(Some).collect();
    let files = by
        .into_iter()
        .filter_map(|(.., i)| slots.get_mut(i).and_then(Option::take))
        .collect();
    Ok(MappedFiles {
        processes: pids.len(),
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{Endian, PutExt};
    use crate::perf::consts::types;

    /// A file-mode-less (pipe) recording of these MMAP2 records (pid, addr,
    /// inode, name), in order.
    fn recording(maps: &[(u32, u64, u64, &str)]) -> tempfile::NamedTempFile {
        let e = Endian::Little;
        let mut f = b"PERFILE2".to_vec();
        f.put_u64(e, 16);
        // one attr (PERF_ATTR_SIZE_VER0, no sample_id_all), id 1
        let mut attr = Vec::new();
        attr.put_u32(e, 1);
        attr.put_u32(e, 64);
        attr.resize(64, 0);
        attr.put_u64(e, 1);
        f.put_u32(e, types::HEADER_ATTR);
        f.put_u16(e, 0);
        f.put_u16(e, 8 + attr.len() as u16);
        f.extend_from_slice(&attr);
        for &(pid, addr, ino, name) in maps {
            let mut body = Vec::new();
            body.put_u32(e, pid);
            body.put_u32(e, pid);
            body.put_u64(e, addr);
            body.put_u64(e, 0x1000);
            body.put_u64(e, 0);
            body.put_u32(e, 8);
            body.put_u32(e, 1);
            body.put_u64(e, ino);
            body.put_u64(e, 0);
            body.put_u32(e, 5);
            body.put_u32(e, 2);
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.pad_to(8);
            f.put_u32(e, types::MMAP2);
            f.put_u16(e, 2);
            f.put_u16(e, 8 + body.len() as u16);
            f.extend_from_slice(&body);
        }
        let t = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(t.path(), f).unwrap();
        t
    }

    // One entry per distinct file of a process, at its lowest address, with
    // its map count, in the order a walk by pid and address meets them;
    // names that are not paths count their process only.
    #[test]
    fn one_entry_per_distinct_mapped_file() {
        let t = recording(&[
            (7, 0x5000, 1, "/b"),
            (3, 0x9000, 1, "/a"),
            (7, 0x3000, 2, "/a"),
            (7, 0x4000, 1, "/b"),
            (7, 0x4000, 1, "/b"),
            (7, 0x1000, 1, "/a"),
            (7, 0x2000, 1, "/b"),
            (9, 0x1000, 0, "[heap]"),
        ]);
        let got = mapped_files(&Input::open(t.path()).unwrap()).unwrap();
        assert_eq!(got.processes, 3);
        let files: Vec<_> = got
            .files
            .iter()
            .map(|f| (f.pid, f.vma.start, f.vma.inode, &*f.vma.name, f.maps))
            .collect();
        assert_eq!(
            files,
            [
                (3, 0x9000, 1, &b"/a"[..], 1),
                (7, 0x1000, 1, b"/a", 1),
                (7, 0x2000, 1, b"/b", 4),
                (7, 0x3000, 2, b"/a", 1),
            ]
        );
    }
}
