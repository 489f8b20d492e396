//! `archive --from`: the files a snapshot or recording says its processes
//! mapped, held as one entry per distinct mapped file (name, build id or
//! device and inode) with the places its maps name (pid, start and end:
//! where a live mapping may prove the file) and how many maps name each,
//! never one per map record: a file of a few map records repeated in
//! compressed records (~180 MiB of them from 16 KB) held two decoded copies
//! of each (~500 MB) and tried each map's file again (8 s). A file is
//! tried at its places in turn until one proves it, so a process gone or a
//! map changed since the record does not lose a file another place shows.

use std::collections::{BTreeSet, HashMap};

use crate::model::{BuildId, Name, Vma};
use crate::perf::events::MapRecord;
use crate::perf::{Input, InputError};
use crate::snapshot::{vma_of, walk_maps, MapsRecord, Names};

/// Most places kept for one file in one process: its lowest (a file is
/// mapped a few times per load: its segments); the maps at the others are
/// counted with the last one kept. Bounds what a recording of a file mapped
/// at many addresses costs to hold and to try.
pub(super) const PLACES_PER_PROCESS: usize = 16;

/// Where the maps of a file name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) pid: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    /// How many maps name it (with those of places dropped after it).
    pub(super) maps: usize,
    /// The record number of its first map.
    first: u64,
}

/// One distinct mapped file.
pub(super) struct Mapped {
    /// The file as its first map names it (name, build id, device and
    /// inode; its addresses are that map's).
    pub(super) vma: Vma,
    /// Its places, by pid, then address, then the order of their first
    /// maps.
    pub(super) places: Vec<Place>,
}

impl Mapped {
    /// The file's map at `p`.
    pub(super) fn at(&self, p: &Place) -> Vma {
        Vma {
            start: p.start,
            end: p.end,
            ..self.vma.clone()
        }
    }

    /// How many maps name it.
    pub(super) fn maps(&self) -> usize {
        self.places.iter().map(|p| p.maps).sum()
    }
}

/// What a `--from` file names.
pub(super) struct MappedFiles {
    /// Processes (pids of its COMM and user-space map records).
    pub(super) processes: usize,
    /// Its mapped files (absolute names), in the order of their first
    /// places: the order a walk of each process's maps by address meets
    /// them.
    pub(super) files: Vec<Mapped>,
}

/// A mapped file's identity: an id-less record's is its name alone.
type Key = (Name, Option<BuildId>, (u32, u32, u64));

/// Counts a map of a file at `p` among `places` (one process's, in order),
/// keeping the lowest [`PLACES_PER_PROCESS`].
fn add_place(places: &mut Vec<Place>, p: Place) {
    if let Some(q) = places
        .iter_mut()
        .find(|q| (q.start, q.end) == (p.start, p.end))
    {
        q.maps += 1;
        return;
    }
    // after those at its address or below: they were met first
    let at = places.partition_point(|q| q.start <= p.start);
    places.insert(at, p);
    if places.len() > PLACES_PER_PROCESS {
        if let Some(dropped) = places.pop() {
            if let Some(last) = places.last_mut() {
                last.maps += dropped.maps;
            }
        }
    }
}

/// Gathers the distinct mapped files of map records handed to it one by
/// one (see [`MappedFiles`]).
#[derive(Default)]
pub(super) struct Collector {
    pids: BTreeSet<u32>,
    names: Names,
    /// By key: the index in `files`.
    seen: HashMap<Key, usize, foldhash::fast::RandomState>,
    /// By that index and pid: its places.
    places: HashMap<(usize, u32), Vec<Place>, foldhash::fast::RandomState>,
    files: Vec<Mapped>,
    /// Maps of files taken so far.
    n: u64,
}

impl Collector {
    /// Counts a process (a COMM's).
    pub(super) fn process(&mut self, pid: u32) {
        self.pids.insert(pid);
    }

    /// Takes a user-space map record: the index of its file among those
    /// gathered (see [`Collector::finish`]), None for a name that is not a
    /// path (`[vdso]`, perf's `//anon`: its process is counted).
    pub(super) fn map(&mut self, m: &MapRecord) -> Option<usize> {
        self.pids.insert(m.key.pid);
        // perf's names of memory without a file (`//anon`, `//toolong`)
        // are no paths
        if m.key.filename.first() != Some(&b'/') || m.key.filename.starts_with(b"//") {
            return None;
        }
        self.n += 1;
        let vma = vma_of(m, &mut self.names);
        let place = Place {
            pid: m.key.pid,
            start: vma.start,
            end: vma.end,
            maps: 1,
            first: self.n,
        };
        let ident = (vma.dev_major, vma.dev_minor, vma.inode);
        let key = (vma.name.clone(), vma.build_id, ident);
        let files = &mut self.files;
        let i = *self.seen.entry(key).or_insert_with(|| {
            files.push(Mapped {
                vma,
                places: Vec::new(),
            });
            files.len() - 1
        });
        add_place(self.places.entry((i, m.key.pid)).or_default(), place);
        Some(i)
    }

    /// The files gathered whose index `keep` says (see [`MappedFiles`]).
    pub(super) fn finish(self, keep: impl Fn(usize) -> bool) -> MappedFiles {
        let Collector {
            pids,
            seen,
            places,
            mut files,
            ..
        } = self;
        drop(seen);
        for ((i, _), mut at) in places {
            if let Some(f) = files.get_mut(i).filter(|_| keep(i)) {
                f.places.append(&mut at);
            }
        }
        let mut files: Vec<Mapped> = (files.into_iter().enumerate())
            .filter(|(i, _)| keep(*i))
            .map(|(_, f)| f)
            .collect();
        for f in &mut files {
            f.places.sort_unstable_by_key(|p| (p.pid, p.start, p.first));
        }
        files.sort_unstable_by_key(|f| f.places.first().map(|p| (p.pid, p.start, p.first)));
        MappedFiles {
            processes: pids.len(),
            files,
        }
    }
}

/// Reads the distinct mapped files of `input` (see [`MappedFiles`]).
pub(super) fn mapped_files(input: &Input) -> Result<MappedFiles, InputError> {
    let mut c = Collector::default();
    walk_maps(input, |r| match r {
        MapsRecord::Comm(pid, ..) => c.process(pid),
        MapsRecord::Map(m) if m.key.pid != u32::MAX => {
            c.map(&m);
        }
        MapsRecord::Map(_) | MapsRecord::Bpf(_) => {}
    })?;
    Ok(c.finish(|_| true))
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

    // One entry per distinct file (name, id, device and inode), whatever
    // process maps it, in the order of its first place; each place (pid,
    // address) once with its map count, by pid and address; names that are
    // not paths (`[heap]`, perf's `//anon`, which `archive --from --strict`
    // failed as a file it could not read) count their process only.
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
            // perf's anonymous executable memory (a JIT's): no file
            (11, 0x1000, 0, "//anon"),
        ]);
        let got = mapped_files(&Input::open(t.path()).unwrap()).unwrap();
        assert_eq!(got.processes, 4);
        let files: Vec<_> = got
            .files
            .iter()
            .map(|f| {
                let at: Vec<_> = f.places.iter().map(|p| (p.pid, p.start, p.maps)).collect();
                (f.vma.inode, &*f.vma.name, at, f.maps())
            })
            .collect();
        assert_eq!(
            files,
            [
                (1, &b"/a"[..], vec![(3, 0x9000, 1), (7, 0x1000, 1)], 2),
                (
                    1,
                    b"/b",
                    vec![(7, 0x2000, 1), (7, 0x4000, 2), (7, 0x5000, 1)],
                    4
                ),
                (2, b"/a", vec![(7, 0x3000, 1)], 1),
            ]
        );
        let f = &got.files[1];
        let at = f.at(&f.places[1]);
        assert_eq!((at.start, at.end, &*at.name), (0x4000, 0x5000, &b"/b"[..]));
    }

    // A file mapped at more places of one process than are kept keeps its
    // lowest, the maps of the others counted with the last one kept.
    #[test]
    fn places_of_a_process_are_bounded() {
        let extra = 5;
        let maps: Vec<_> = (0..(PLACES_PER_PROCESS + extra) as u64)
            .rev()
            .map(|i| (4, 0x10000 + i * 0x1000, 1, "/lib"))
            .collect();
        let t = recording(&maps);
        let got = mapped_files(&Input::open(t.path()).unwrap()).unwrap();
        let places = &got.files[0].places;
        assert_eq!(places.len(), PLACES_PER_PROCESS);
        assert_eq!(places[0].start, 0x10000);
        assert_eq!(places[PLACES_PER_PROCESS - 1].maps, 1 + extra);
        assert_eq!(got.files[0].maps(), PLACES_PER_PROCESS + extra);
    }
}
