//! `record`'s build-id cache, filled as `perf record` fills its own at its
//! end: the files of a recording's synthesized user-space maps (those with
//! time 0: the ones a merge inserted; perf's own carry their times, and
//! perf caches their files itself) that its samples hit, or all of them
//! (perf's `--buildid-all`). A hit is a user-mode sample whose ip lies in a
//! synthesized map of its process (perf 6.1 marks a file hit by the
//! sample's ip alone, not its callchain). The files are copied from the
//! live mappings as `archive --from` copies them ([`super::file`]): a
//! process gone by then has its files counted unreadable, not cached.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::entry::Root;
use super::from::{Collector, Mapped};
use super::{file, ArchiveError, ArchiveReport};
use crate::bytes::Endian;
use crate::model::{BuildId, VDSO_NAME};
use crate::perf::consts::{misc, types};
use crate::perf::events::parse_map;
use crate::perf::sample::parse_sample;
use crate::perf::{Attrs, FormatError, FormatErrorKind, Input, InputError, RecordHeader, Visitor};

/// Most distinct map places (pid, start, end) held to look samples up in:
/// beyond, maps are not taken (their files are not cached), so a recording
/// of millions of maps cannot hold unbounded memory.
pub const MAX_PLACES: usize = 1 << 22;

/// The files a recording's samples hit among its synthesized maps (see the
/// module doc), ready for [`cache_hits`].
pub struct HitFiles {
    files: Vec<Mapped>,
    /// The build ids of the `[vdso]` maps hit (None: a map without one).
    vdso: HashSet<Option<BuildId>>,
    /// Processes with synthesized maps.
    pub processes: usize,
    /// User-mode samples that fell in a synthesized map.
    pub samples: u64,
    /// Map places left out past [`MAX_PLACES`].
    pub places_dropped: usize,
}

impl HitFiles {
    /// How many files (the vDSO counted as one).
    pub fn len(&self) -> usize {
        self.files.len() + usize::from(!self.vdso.is_empty())
    }

    /// No file was hit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a synthesized map holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Of {
    /// The file of this index among those gathered.
    File(usize),
    /// The vDSO, this index in [`Walker::vdso`].
    Vdso(usize),
}

/// One process's synthesized maps: (start, end, what), sorted by start
/// before a sample is looked up in them.
#[derive(Default)]
struct Space {
    maps: Vec<(u64, u64, Of)>,
    sorted: bool,
}

impl Space {
    /// What the map holding `ip` holds (the last one starting at or below
    /// it, should two overlap).
    fn find(&mut self, ip: u64) -> Option<(u64, u64, Of)> {
        if !self.sorted {
            self.maps.sort_by_key(|m| m.0);
            self.sorted = true;
        }
        let at = self.maps.partition_point(|m| m.0 <= ip);
        let m = *self.maps.get(at.checked_sub(1)?)?;
        (ip < m.1).then_some(m)
    }
}

/// The walk's visitor: gathers the synthesized maps, marks those hit.
struct Walker {
    e: Endian,
    all: bool,
    files: Collector,
    /// By file index.
    hit: Vec<bool>,
    /// The `[vdso]` maps' ids, and whether each was hit.
    vdso: Vec<(Option<BuildId>, bool)>,
    spaces: HashMap<u32, Space, foldhash::fast::RandomState>,
    places: usize,
    places_dropped: usize,
    /// The last sample's process and map: runs of samples in one map skip
    /// the lookup.
    last: Option<(u32, u64, u64)>,
    samples: u64,
}

impl Walker {
    fn map(
        &mut self,
        at: u64,
        h: &RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let e = self.e;
        let m = parse_map(h, body, e)
            .ok_or_else(|| FormatError::at(at, FormatErrorKind::MalformedRecord(h.type_)))?;
        let cpumode = h.misc & misc::CPUMODE_MASK;
        if m.key.pid == u32::MAX || matches!(cpumode, misc::GUEST_KERNEL | misc::GUEST_USER) {
            return Ok(());
        }
        // synthesized: time 0 (perf's own maps carry their times)
        let time = attrs.trailer_time(body, e).unwrap_or(0);
        if time != 0 {
            return Ok(());
        }
        let Some(end) = m.key.addr.checked_add(m.key.len) else {
            return Ok(());
        };
        let of = if m.key.filename == VDSO_NAME {
            self.vdso.push((m.build_id, false));
            Of::Vdso(self.vdso.len() - 1)
        } else {
            match self.files.map(&m) {
                Some(i) => Of::File(i),
                None => return Ok(()),
            }
        };
        if let Of::File(i) = of {
            if self.hit.len() <= i {
                self.hit.resize(i + 1, false);
            }
        }
        let space = self.spaces.entry(m.key.pid).or_default();
        // a map repeated (compressed records of one map many times) is
        // held once
        if space.maps.last() == Some(&(m.key.addr, end, of)) {
            return Ok(());
        }
        if self.places >= MAX_PLACES {
            self.places_dropped += 1;
            return Ok(());
        }
        self.places += 1;
        space.sorted &= space.maps.last().is_none_or(|l| l.0 <= m.key.addr);
        space.maps.push((m.key.addr, end, of));
        self.last = None;
        Ok(())
    }

    fn sample(
        &mut self,
        at: u64,
        h: &RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        if self.all || h.misc & misc::CPUMODE_MASK != misc::USER {
            return Ok(());
        }
        let Some(attr) = attrs.of_sample(body, self.e) else {
            return Ok(());
        };
        let s = parse_sample(body, attr, self.e)
            .map_err(|err| FormatError::at(at, FormatErrorKind::Sample(err)))?;
        let (Some((pid, _)), Some(ip)) = (s.pid_tid, s.ip) else {
            return Ok(());
        };
        if self
            .last
            .is_some_and(|(p, start, end)| p == pid && (start..end).contains(&ip))
        {
            self.samples += 1;
            return Ok(());
        }
        let Some((start, end, of)) = self.spaces.get_mut(&pid).and_then(|s| s.find(ip)) else {
            return Ok(());
        };
        self.samples += 1;
        self.last = Some((pid, start, end));
        match of {
            Of::File(i) => self.hit.get_mut(i).map(|h| *h = true),
            Of::Vdso(i) => self.vdso.get_mut(i).map(|v| v.1 = true),
        };
        Ok(())
    }
}

impl Visitor for Walker {
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        match h.type_ {
            types::MMAP | types::MMAP2 => self.map(at, &h, body, attrs),
            types::SAMPLE => self.sample(at, &h, body, attrs),
            _ => Ok(()),
        }
    }
}

/// The files `input`'s samples hit among its synthesized maps, or all of
/// their files with `all` (see the module doc). Samples are looked up in
/// the maps that came before them in the file (a merge puts its maps in
/// front of the data).
pub fn hit_files(input: &Input, all: bool) -> Result<HitFiles, InputError> {
    let mut w = Walker {
        e: input.endian(),
        all,
        files: Collector::default(),
        hit: Vec::new(),
        vdso: Vec::new(),
        spaces: HashMap::default(),
        places: 0,
        places_dropped: 0,
        last: None,
        samples: 0,
    };
    input.walk(&mut w)?;
    let hit = w.hit;
    let processes = w.spaces.len();
    let files = w
        .files
        .finish(|i| all || hit.get(i).copied().unwrap_or(false))
        .files;
    let vdso = (w.vdso.into_iter())
        .filter(|v| all || v.1)
        .map(|v| v.0)
        .collect();
    Ok(HitFiles {
        files,
        vdso,
        processes,
        samples: w.samples,
        places_dropped: w.places_dropped,
    })
}

/// Copies `hits` into the build-id cache `dir` (made if missing, as
/// [`super::archive`] makes it) from the live mappings under `proc_root`,
/// and this kernel's vDSO image when a `[vdso]` map hit carries its id.
/// Nothing is made when there is nothing to copy.
pub fn cache_hits(
    hits: &HitFiles,
    dir: &Path,
    proc_root: &Path,
) -> Result<ArchiveReport, ArchiveError> {
    let mut report = ArchiveReport {
        processes: hits.processes,
        kernel_missing: Some("not asked for".into()),
        ..Default::default()
    };
    if hits.is_empty() {
        return Ok(report);
    }
    let mut root = Root::create(dir).map_err(|source| ArchiveError::Io {
        op: "creating",
        path: dir.to_path_buf(),
        source,
    })?;
    let mut done = HashSet::new();
    for f in &hits.files {
        file::archive_recorded(proc_root, &mut root, f, &mut done, &mut report);
    }
    if !hits.vdso.is_empty() {
        super::archive_vdso(&mut root, &mut report, Some(&hits.vdso));
    }
    root.keep();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;
    use crate::perf::consts::{attr_flags, sample_type as st};

    /// A record in a pipe-mode recording being built.
    enum Rec<'a> {
        /// An MMAP2 (pid, addr, inode, name, time of its trailer).
        Map(u32, u64, u64, &'a str, u64),
        /// A SAMPLE (misc, pid, ip).
        Sample(u16, u32, u64),
    }

    /// A pipe-mode recording of one attr (IP | TID | TIME, sample_id_all)
    /// and these records, in order.
    fn recording(recs: &[Rec]) -> tempfile::NamedTempFile {
        let e = Endian::Little;
        let mut f = b"PERFILE2".to_vec();
        f.put_u64(e, 16);
        let mut attr = Vec::new();
        attr.put_u32(e, 1);
        attr.put_u32(e, 64);
        attr.put_u64(e, 0);
        attr.put_u64(e, 1000);
        attr.put_u64(e, st::IP | st::TID | st::TIME);
        attr.put_u64(e, 0);
        attr.put_u64(e, attr_flags::SAMPLE_ID_ALL);
        attr.resize(64, 0);
        attr.put_u64(e, 1);
        let mut put = |type_: u32, misc: u16, body: &[u8]| {
            f.put_u32(e, type_);
            f.put_u16(e, misc);
            f.put_u16(e, 8 + body.len() as u16);
            f.extend_from_slice(body);
        };
        put(types::HEADER_ATTR, 0, &attr);
        for r in recs {
            let mut body = Vec::new();
            match *r {
                Rec::Map(pid, addr, ino, name, time) => {
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
                    body.put_u32(e, pid);
                    body.put_u32(e, pid);
                    body.put_u64(e, time);
                    put(types::MMAP2, misc::USER, &body);
                }
                Rec::Sample(m, pid, ip) => {
                    body.put_u64(e, ip);
                    body.put_u32(e, pid);
                    body.put_u32(e, pid);
                    body.put_u64(e, 9);
                    put(types::SAMPLE, m, &body);
                }
            }
        }
        let t = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(t.path(), f).unwrap();
        t
    }

    // A file is hit by a user-mode sample of its process inside one of its
    // synthesized (time 0) maps: not by perf's own maps (timed), another
    // process's address, or a kernel-mode sample; the vDSO counts once;
    // with `all` every synthesized map's file is taken, hit or not.
    #[test]
    fn samples_hit_the_synthesized_maps_of_their_process() {
        use Rec::{Map, Sample};
        let t = recording(&[
            Map(7, 0x1000, 1, "/lib/a", 0),
            Map(7, 0x3000, 2, "/lib/b", 0),
            Map(7, 0x5000, 3, "/lib/c", 5),
            Map(7, 0x9000, 0, "[vdso]", 0),
            Map(8, 0x1000, 2, "/lib/b", 0),
            Map(8, 0x7000, 0, "[heap]", 0),
            Sample(misc::USER, 7, 0x1800),
            Sample(misc::USER, 7, 0x1900),
            Sample(misc::USER, 7, 0x5800),
            Sample(misc::USER, 8, 0x3800),
            Sample(misc::USER, 8, 0x7800),
            Sample(misc::KERNEL, 7, 0x3800),
            Sample(misc::USER, 7, 0x9100),
            Sample(misc::USER, 9, 0x1800),
        ]);
        let input = Input::open(t.path()).unwrap();
        let names = |h: &HitFiles| -> Vec<String> {
            (h.files.iter())
                .map(|f| String::from_utf8_lossy(&f.vma.name).into_owned())
                .collect()
        };
        let hits = hit_files(&input, false).unwrap();
        assert_eq!(names(&hits), ["/lib/a"]);
        assert_eq!(hits.vdso, HashSet::from([None]));
        assert_eq!((hits.len(), hits.samples, hits.processes), (2, 3, 2));
        let all = hit_files(&input, true).unwrap();
        assert_eq!(names(&all), ["/lib/a", "/lib/b"]);
        let places: Vec<_> = all.files[1].places.iter().map(|p| p.pid).collect();
        assert_eq!(places, [7, 8]);
        assert_eq!(all.len(), 3);
    }

    // Lookups find the map holding an address whatever order the maps came
    // in, and none in a gap or past the last.
    #[test]
    fn space_lookup() {
        let mut s = Space {
            maps: vec![(0x5000, 0x6000, Of::File(1)), (0x1000, 0x2000, Of::File(0))],
            sorted: false,
        };
        assert_eq!(s.find(0x1fff).map(|m| m.2), Some(Of::File(0)));
        assert_eq!(s.find(0x5000).map(|m| m.2), Some(Of::File(1)));
        assert_eq!(s.find(0x2000), None);
        assert_eq!(s.find(0x6000), None);
        assert_eq!(s.find(0x10), None);
    }
}
