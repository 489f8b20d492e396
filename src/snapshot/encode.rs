//! Processes -> perf records, in perf's order: per thread (leader first)
//! FORK (system-wide) and COMM, after the leader's COMM its MMAP2s in address
//! order, all at time 0. Pure: the input is already read.

use std::collections::{BTreeMap, BTreeSet};

use crate::bytes::Endian;
use crate::model::{BuildId, KernelMap, Part, Perms, Process, Thread, Vma, PATH_MAX, TOOLONG_NAME};
use crate::perf::consts::misc;
use crate::perf::events::{self, Fork, Mmap2, Mmap2Id};
use crate::perf::{BuildIdEntry, RecordTooLarge, SampleId, SampleIdLayout};
use crate::proc::Snapshot;

/// `MAP_HUGETLB`, set by perf for hugetlbfs mappings.
pub const MAP_HUGETLB: u32 = libc::MAP_HUGETLB as u32;

/// The file name and extra flags perf writes for a VMA.
pub fn mmap_filename(vma: &Vma) -> (&[u8], u32) {
    if vma.name.is_empty() {
        (b"//anon", 0)
    } else if vma.name.starts_with(b"/anon_hugepage") {
        (b"//anon", MAP_HUGETLB)
    } else if vma.name.len() >= PATH_MAX {
        (TOOLONG_NAME, 0)
    } else {
        (&vma.name, 0)
    }
}

/// How records are encoded.
#[derive(Debug, Clone, Copy)]
pub struct Encoding {
    pub endian: Endian,
    /// Trailer layout of the first attr.
    pub layout: SampleIdLayout,
    /// Id written in the trailer.
    pub id: u64,
    /// Write FORK records (system-wide snapshots).
    pub forks: bool,
    /// Fill the trailer's TID with the record's pid/tid (else zeros, as perf
    /// does for records it synthesizes into a recording).
    pub fill_tid: bool,
}

/// Encodes a snapshot in perf's per-process order: per thread (leader
/// first) FORK (if enabled) and COMM; after the leader's COMM its MMAP2s in
/// address order. Every record has time 0.
pub fn encode(snap: &Snapshot, enc: &Encoding, out: &mut Vec<u8>) -> Result<(), RecordTooLarge> {
    for p in &snap.processes {
        encode_process(p, enc, out)?;
    }
    Ok(())
}

/// Encodes one process (see [`encode`]).
pub fn encode_process(
    p: &Process,
    enc: &Encoding,
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    encode_part(p, Part::WHOLE, enc, out)
}

/// Encodes one piece of a process (see [`Part`]): the leader's FORK and
/// COMM if it is the first, its MMAP2s, the other threads' FORK and COMM if
/// it is the last. The pieces' bytes in order are [`encode_process`]'s.
pub fn encode_part(
    p: &Process,
    part: Part,
    enc: &Encoding,
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    if part.first {
        if let Some(leader) = p.threads.first() {
            encode_thread(p, leader, true, enc, out)?;
        }
    }
    let e = enc.endian;
    let sid = SampleId {
        pid: if enc.fill_tid { p.pid } else { 0 },
        tid: if enc.fill_tid { p.pid } else { 0 },
        id: enc.id,
        ..Default::default()
    };
    let trailer = enc.layout.encode(e, &sid);
    for vma in &p.vmas {
        let (filename, extra_flags) = mmap_filename(vma);
        let mut m = misc::USER;
        if !vma.perms.contains(Perms::EXEC) {
            m |= misc::MMAP_DATA;
        }
        let id = match vma.build_id {
            Some(b) => Mmap2Id::BuildId(b),
            None => Mmap2Id::Inode {
                maj: vma.dev_major,
                min: vma.dev_minor,
                ino: vma.inode,
                ino_generation: 0,
            },
        };
        let mm = Mmap2 {
            misc: m,
            pid: p.pid,
            tid: p.pid,
            addr: vma.start,
            len: vma.len(),
            pgoff: vma.offset,
            id,
            prot: vma.perms.prot(),
            flags: vma.perms.map_flags() | extra_flags,
            filename,
        };
        events::encode_mmap2_with(out, e, &mm, &trailer)?;
    }
    if part.last {
        for t in p.threads.iter().skip(1) {
            encode_thread(p, t, false, enc, out)?;
        }
    }
    Ok(())
}

/// A thread's FORK (system-wide) and COMM.
fn encode_thread(
    p: &Process,
    t: &Thread,
    leader: bool,
    enc: &Encoding,
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    let e = enc.endian;
    let sid = SampleId {
        pid: if enc.fill_tid { p.pid } else { 0 },
        tid: if enc.fill_tid { t.tid } else { 0 },
        id: enc.id,
        ..Default::default()
    };
    if enc.forks {
        let parent = if leader { p.ppid } else { p.pid };
        let f = Fork {
            pid: p.pid,
            ppid: parent,
            tid: t.tid,
            ptid: parent,
            time: 0,
        };
        events::encode_fork(out, e, &f, &enc.layout, &sid)?;
    }
    // A thread whose name is unknown (a snapshot file without its COMM)
    // gets none rather than an empty one that would rename it.
    if !t.comm.is_empty() {
        events::encode_comm(out, e, p.pid, t.tid, &t.comm, &enc.layout, &sid)?;
    }
    Ok(())
}

/// Encodes kernel and module text maps as perf's kernel maps are (pid -1,
/// tid 0, cpumode KERNEL, time 0), but as MMAP2 with the build id when
/// known and PROT_READ|PROT_EXEC (perf writes prot 0, which some readers
/// take for a data map and drop).
pub fn encode_kernel(
    maps: &[KernelMap],
    enc: &Encoding,
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    for m in maps {
        let id = match m.build_id {
            Some(b) => Mmap2Id::BuildId(b),
            None => Mmap2Id::Inode {
                maj: 0,
                min: 0,
                ino: 0,
                ino_generation: 0,
            },
        };
        let mm = Mmap2 {
            misc: misc::KERNEL,
            pid: u32::MAX,
            tid: 0,
            addr: m.start,
            len: m.end.saturating_sub(m.start),
            pgoff: m.pgoff,
            id,
            prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
            flags: libc::MAP_PRIVATE as u32,
            filename: &m.name,
        };
        let sid = SampleId {
            pid: if enc.fill_tid { u32::MAX } else { 0 },
            id: enc.id,
            ..Default::default()
        };
        events::encode_mmap2(out, enc.endian, &mm, &enc.layout, &sid)?;
    }
    Ok(())
}

/// The BUILD_ID table entries of kernel maps (cpumode KERNEL, by DSO name).
pub fn kernel_table_entries(maps: &[KernelMap]) -> Vec<BuildIdEntry> {
    maps.iter()
        .filter_map(|m| {
            Some(BuildIdEntry {
                cpumode: misc::KERNEL,
                pid: -1,
                build_id: m.build_id?,
                filename: m.dso.clone(),
            })
        })
        .collect()
}

/// A process's distinct (file name as written, build id) pairs, sorted.
pub fn process_build_ids(p: &Process) -> Vec<(Vec<u8>, BuildId)> {
    build_ids_of(&p.vmas)
}

/// The distinct (file name as written, build id) pairs of these VMAs,
/// sorted.
pub fn build_ids_of<'a>(vmas: impl IntoIterator<Item = &'a Vma>) -> Vec<(Vec<u8>, BuildId)> {
    // neighbours first (a file's VMAs mostly are), then the sort
    let mut ids: Vec<(&[u8], BuildId)> = Vec::new();
    for (name, id) in vmas
        .into_iter()
        .filter_map(|v| Some((mmap_filename(v).0, v.build_id?)))
    {
        if ids.last() != Some(&(name, id)) {
            ids.push((name, id));
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter().map(|(n, id)| (n.to_vec(), id)).collect()
}

/// BUILD_ID table entries for these ids: one per (file name, id), sorted.
pub fn table_entries(
    ids: BTreeMap<Vec<u8>, BTreeSet<BuildId>>,
) -> impl Iterator<Item = BuildIdEntry> {
    ids.into_iter().flat_map(|(name, set)| {
        // the name moves into its last entry, so a table of long names
        // taken an entry at a time is never held twice
        let n = set.len();
        let mut name = Some(name);
        set.into_iter().enumerate().map(move |(i, build_id)| {
            let filename = match i + 1 == n {
                true => name.take().unwrap_or_default(),
                false => name.clone().unwrap_or_default(),
            };
            BuildIdEntry {
                cpumode: misc::USER,
                pid: -1,
                build_id,
                filename,
            }
        })
    })
}

/// The BUILD_ID table for a snapshot: one entry per distinct (file name,
/// build id), sorted.
pub fn build_id_entries(snap: &Snapshot) -> Vec<BuildIdEntry> {
    build_id_entries_of(snap.processes.iter().map(|p| &p.vmas))
}

/// [`build_id_entries`] of processes given as their VMAs (each process's
/// VMAs once, or as often as they repeat: the same entries).
pub fn build_id_entries_of<'a, V: IntoIterator<Item = &'a Vma>>(
    processes: impl IntoIterator<Item = V>,
) -> Vec<BuildIdEntry> {
    let mut set = BuildIdSet::default();
    for vmas in processes {
        set.add(vmas);
    }
    set.entries()
}

/// The distinct (file name, build id) pairs of VMAs given a process (or
/// a window of processes) at a time, for one BUILD_ID table.
#[derive(Debug, Default)]
pub struct BuildIdSet(BTreeMap<Vec<u8>, BTreeSet<BuildId>>);

impl BuildIdSet {
    /// Takes in the ids of one process's `vmas`.
    pub fn add<'a>(&mut self, vmas: impl IntoIterator<Item = &'a Vma>) {
        for (name, id) in build_ids_of(vmas) {
            self.0.entry(name).or_default().insert(id);
        }
    }

    /// The table's entries: one per (file name, id), sorted.
    pub fn entries(self) -> Vec<BuildIdEntry> {
        table_entries(self.0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Source;

    fn vma(start: u64, name: &[u8], id: Option<BuildId>, perms: Perms) -> Vma {
        Vma {
            start,
            end: start + 0x1000,
            offset: 0,
            perms,
            dev_major: 8,
            dev_minor: 1,
            inode: if name.starts_with(b"/") { 7 } else { 0 },
            name: name.into(),
            build_id: id,
        }
    }

    // Records come in perf's order: FORK, COMM, MMAP2s for the leader; FORK, COMM per thread.
    #[test]
    fn per_process_order() {
        let id = BuildId::new(&[1; 20]);
        let p = Process {
            pid: 10,
            ppid: 1,
            kernel_thread: false,
            start_time: 0,
            threads: vec![
                Thread {
                    tid: 10,
                    comm: b"a".to_vec(),
                },
                Thread {
                    tid: 11,
                    comm: b"b".to_vec(),
                },
            ],
            vmas: vec![
                vma(0x1000, b"/bin/a", id, Perms::READ | Perms::EXEC),
                vma(0x5000, b"", None, Perms::READ | Perms::WRITE),
            ],
            source: Some(Source::Ioctl),
            read_times: Default::default(),
        };
        let enc = Encoding {
            endian: Endian::Little,
            layout: SampleIdLayout::default(),
            id: 0,
            forks: true,
            fill_tid: true,
        };
        let mut out = Vec::new();
        encode_process(&p, &enc, &mut out).unwrap();
        let recs: Vec<_> = crate::perf::record::split_records(&out, Endian::Little).collect();
        let types: Vec<u32> = recs.iter().map(|(h, _)| h.type_).collect();
        // the second MMAP2 is the nameless data VMA
        assert_eq!(recs[3].0.misc, misc::USER | misc::MMAP_DATA);
        assert_eq!(&recs[3].1[64..70], b"//anon");
        use crate::perf::consts::types::*;
        assert_eq!(types, vec![FORK, COMM, MMAP2, MMAP2, FORK, COMM]);
    }

    // A process encoded in pieces gives the same bytes as encoded whole.
    #[test]
    fn pieces_encode_as_whole() {
        let id = BuildId::new(&[1; 20]);
        let t = |tid, c: &[u8]| Thread {
            tid,
            comm: c.to_vec(),
        };
        let whole = Process {
            pid: 10,
            ppid: 1,
            kernel_thread: false,
            start_time: 0,
            threads: vec![t(10, b"a"), t(11, b"b"), t(12, b"c")],
            vmas: (0..5)
                .map(|i| vma(0x1000 * (i + 1), b"/bin/a", id, Perms::EXEC))
                .collect(),
            source: Some(Source::Ioctl),
            read_times: Default::default(),
        };
        let enc = Encoding {
            endian: Endian::Big,
            layout: SampleIdLayout::default(),
            id: 3,
            forks: true,
            fill_tid: true,
        };
        let mut want = Vec::new();
        encode_process(&whole, &enc, &mut want).unwrap();
        let mut got = Vec::new();
        for (range, first, last) in [
            (0..2, true, false),
            (2..3, false, false),
            (3..5, false, true),
        ] {
            let piece = Process {
                vmas: whole.vmas[range].to_vec(),
                threads: match last {
                    true => whole.threads.clone(),
                    false => whole.threads[..1].to_vec(),
                },
                ..whole.clone()
            };
            encode_part(&piece, Part { first, last }, &enc, &mut got).unwrap();
        }
        assert_eq!(got, want);
    }

    // perf's name rules: nameless -> //anon, hugetlb -> //anon + MAP_HUGETLB, huge -> //toolong.
    #[test]
    fn filename_rules() {
        let p = Perms::EXEC;
        assert_eq!(mmap_filename(&vma(0, b"", None, p)), (&b"//anon"[..], 0));
        assert_eq!(
            mmap_filename(&vma(0, b"/anon_hugepage (deleted)", None, p)),
            (&b"//anon"[..], MAP_HUGETLB)
        );
        let long = vec![b'a'; PATH_MAX];
        assert_eq!(mmap_filename(&vma(0, &long, None, p)).0, b"//toolong");
        assert_eq!(mmap_filename(&vma(0, b"[vdso]", None, p)).0, b"[vdso]");
    }
}
