//! Reading a snapshot file (or any recording) back: its COMM and map
//! records as processes, and its kernel maps. What is held grows with the
//! distinct content, not the record count: a thread's first COMM is kept,
//! names are shared (one copy of each distinct name), and a map repeated
//! (the same map at the same address) is one run with a count until the
//! processes are made ([`HeldProcess::into_process`]) or encoded run by
//! run (`merge`); kernel maps and BPF records are held once each, their
//! order as runs ([`Runs`]). A bomb of a few map records repeated in
//! compressed records (~180 MiB of them from 16 KB) held 2 decoded copies
//! of each, ~500 MB.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::bytes::Endian;
use crate::model::{KernelMap, Name, Perms, Process, Thread, Vma};
use crate::perf::consts::{misc, types};
use crate::perf::events::{parse_comm, parse_map, MapRecord};
use crate::perf::{Attrs, FormatError, FormatErrorKind, Input, InputError, RecordHeader, Visitor};
use crate::proc::kernel::KERNEL_DSO;

use super::bpf::BpfRecord;
use super::runs::Runs;

/// Longest thread name accepted from a snapshot file (the kernel's are at
/// most 15 bytes).
const MAX_COMM: usize = 255;

/// A record [`walk_maps`] hands out.
pub enum MapsRecord {
    /// A COMM: pid, tid, name.
    Comm(u32, u32, Vec<u8>),
    /// An MMAP or MMAP2.
    Map(MapRecord),
    /// A KSYMBOL or BPF_EVENT.
    Bpf(BpfRecord),
}

/// Hands the COMM and map records of a walk to its callback.
struct MapsReader<F> {
    each: F,
    e: Endian,
}

impl<F: FnMut(MapsRecord)> Visitor for MapsReader<F> {
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        _attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let e = self.e;
        let bad = || FormatError::at(at, FormatErrorKind::MalformedRecord(h.type_));
        match h.type_ {
            types::COMM => {
                let (pid, tid, comm) = parse_comm(body, e).ok_or_else(bad)?;
                // the kernel's comm is 16 bytes; a snapshot naming a thread
                // with 64 KiB could not be encoded again
                if comm.len() > MAX_COMM {
                    return Err(bad());
                }
                (self.each)(MapsRecord::Comm(pid, tid, comm));
            }
            types::MMAP | types::MMAP2 => {
                (self.each)(MapsRecord::Map(parse_map(&h, body, e).ok_or_else(bad)?));
            }
            _ => {
                if let Some(r) = BpfRecord::parse(h.type_, body, e).map_err(|()| bad())? {
                    (self.each)(MapsRecord::Bpf(r));
                }
            }
        }
        Ok(())
    }
}

/// Walks a recording, handing each COMM, MMAP/MMAP2, KSYMBOL and BPF_EVENT
/// record to `each`,
/// in file order; a malformed one is an error at its offset.
pub fn walk_maps(input: &Input, each: impl FnMut(MapsRecord)) -> Result<(), InputError> {
    input.walk(&mut MapsReader {
        each,
        e: input.endian(),
    })?;
    Ok(())
}

/// One copy of each distinct name.
#[derive(Default)]
pub struct Names(HashSet<Arc<[u8]>, foldhash::fast::RandomState>);

impl Names {
    /// The shared copy of `name`.
    pub fn get(&mut self, name: &[u8]) -> Name {
        if let Some(n) = self.0.get(name) {
            return Name::shared(n.clone());
        }
        let n: Arc<[u8]> = name.into();
        self.0.insert(n.clone());
        Name::shared(n)
    }
}

/// The VMA of a (user space) map record, its name shared through `names`.
pub fn vma_of(m: &MapRecord, names: &mut Names) -> Vma {
    let (dev_major, dev_minor, inode) = m.dev_ino.unwrap_or((0, 0, 0));
    Vma {
        start: m.key.addr,
        end: m.key.addr.saturating_add(m.key.len),
        offset: m.key.pgoff,
        perms: Perms::from_prot_flags(m.prot, m.flags),
        dev_major,
        dev_minor,
        inode,
        name: names.get(&m.key.filename),
        build_id: m.build_id,
    }
}

/// A process of a snapshot file as read: its threads (the first COMM of
/// each) and its maps, each distinct one held once and their order as runs
/// ([`Runs`]: 8 bytes a run, so maps alternating at one address cost 8
/// bytes a record, not a copy each), by address once read (those at one
/// address in file order).
#[derive(Debug, Default)]
pub struct HeldProcess {
    pub pid: u32,
    threads: BTreeMap<u32, Vec<u8>>,
    maps: Runs<Vma>,
}

impl HeldProcess {
    fn comm(&mut self, tid: u32, comm: Vec<u8>) {
        self.threads.entry(tid).or_insert(comm);
    }

    fn map(&mut self, vma: Vma) {
        let at = vma.start;
        self.maps.push_keyed(vma, at);
    }

    /// About the bytes its threads and maps take, as a window of
    /// [`read_window`] counts them (not its shared names): a thread
    /// with its tree node, each distinct map with its index entries, 8
    /// bytes a run.
    pub fn weight(&self) -> usize {
        const THREAD: usize = 64;
        const MAP: usize = std::mem::size_of::<Vma>() + 80;
        self.threads.len() * THREAD + self.maps.distinct().len() * MAP + self.maps.runs() * 8
    }

    /// Orders the maps by address (stably), once all are read; their
    /// index is let go (nothing is added after).
    fn by_address(&mut self) {
        self.maps.sort_by_key(|v| v.start);
        self.maps.forget_index();
    }

    /// The threads: the leader first (a nameless leader added if the file
    /// had none), then by tid.
    pub fn threads(&self) -> Vec<Thread> {
        let leader = self.threads.get(&self.pid).cloned().unwrap_or_default();
        let others = self.threads.iter().filter(|(t, _)| **t != self.pid);
        std::iter::once((self.pid, leader))
            .chain(others.map(|(t, c)| (*t, c.clone())))
            .map(|(tid, comm)| Thread { tid, comm })
            .collect()
    }

    /// The runs of maps: each map (by address, those at one address in
    /// file order) and how often it repeats there.
    pub fn runs(&self) -> impl Iterator<Item = (&Vma, usize)> + '_ {
        self.maps.iter().map(|(v, n)| (v, n as usize))
    }

    /// How many maps, repeats counted.
    pub fn map_count(&self) -> usize {
        self.runs().map(|(_, n)| n).sum()
    }

    /// Drops every map `keep` refuses (all its repeats); how many that was.
    pub fn retain_maps(&mut self, mut keep: impl FnMut(&Vma) -> bool) -> usize {
        let before = self.map_count();
        self.maps.retain(|v| keep(v));
        before - self.map_count()
    }

    /// The process: [`HeldProcess::threads`]; every map as often as it came.
    pub fn into_process(self) -> Process {
        let mut p = Process::empty(self.pid);
        p.threads = self.threads();
        p.vmas = self.maps.into_vec();
        p
    }
}

/// A snapshot file's processes, as held ([`HeldProcess`], by pid), its
/// kernel's and modules' maps (pid -1, cpumode kernel) with their ids, and
/// its KSYMBOL and BPF_EVENT records, each in file order.
pub struct SnapshotMaps {
    pub processes: Vec<HeldProcess>,
    pub kernel: KernelMaps,
    pub bpf: Runs<BpfRecord>,
}

/// Kernel and module maps in file order, each distinct one held once.
pub type KernelMaps = Runs<KernelMap>;

/// Reads a snapshot file (or any recording) back into processes: one per
/// pid of its COMM and map records, the leader first, maps by address.
pub fn read_snapshot(input: &Input) -> Result<Vec<Process>, InputError> {
    Ok(read_snapshot_with_kernel(input)?.0)
}

/// [`read_snapshot`], and the kernel's and modules' maps (pid -1, cpumode
/// kernel) with the ids they carry.
pub fn read_snapshot_with_kernel(
    input: &Input,
) -> Result<(Vec<Process>, Vec<KernelMap>), InputError> {
    let maps = read_snapshot_maps(input)?;
    let procs = maps.processes.into_iter().map(HeldProcess::into_process);
    Ok((procs.collect(), maps.kernel.into_vec()))
}

/// Reads a snapshot file (or any recording) into [`SnapshotMaps`].
pub fn read_snapshot_maps(input: &Input) -> Result<SnapshotMaps, InputError> {
    read_snapshot_maps_of(input, |_| true)
}

/// [`read_snapshot_maps`], holding only the processes whose pid `keep`
/// takes (every record is still read and checked): what a merge holds
/// is then the processes it inserts, not the whole snapshot.
pub fn read_snapshot_maps_of(
    input: &Input,
    keep: impl Fn(u32) -> bool,
) -> Result<SnapshotMaps, InputError> {
    let all = Window {
        from: 0,
        budget: usize::MAX,
        kernel: true,
    };
    Ok(read_window(input, all, &keep, None)?.0)
}

/// Which processes a pass of [`read_window`] holds.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// The lowest pid held.
    pub from: u32,
    /// Bytes the maps held may weigh ([`HeldProcess::weight`]): past it
    /// the highest pids are let go (never the lowest one held).
    pub budget: usize,
    /// Whether the kernel maps and BPF records are held too.
    pub kernel: bool,
}

/// Reads a snapshot file holding the processes from `w.from` on that
/// `keep` takes, the lowest of them whose maps fit `w.budget` (each whole);
/// with the first pid let go for the budget, where the next window starts
/// (`None`: every such process is held). Every record is read and checked,
/// and the pid of every process (map or COMM) goes into `pids`.
pub fn read_window(
    input: &Input,
    w: Window,
    keep: &dyn Fn(u32) -> bool,
    mut pids: Option<&mut HashSet<u32>>,
) -> Result<(SnapshotMaps, Option<u32>), InputError> {
    let mut by_pid: BTreeMap<u32, HeldProcess> = BTreeMap::new();
    let (mut kernel, mut bpf) = (KernelMaps::default(), Runs::default());
    let mut names = Names::default();
    // the pid of the last map, and those whose spare room was given back
    let (mut last, mut left) = (None, HashSet::new());
    // the highest pid held, and the weight of all held
    let (mut to, mut held) = (u32::MAX, 0usize);
    walk_maps(input, |r| {
        let pid = match &r {
            MapsRecord::Comm(pid, ..) => *pid,
            MapsRecord::Map(m) if !is_kernel_map(m) && m.key.pid != u32::MAX => m.key.pid,
            _ => u32::MAX,
        };
        if let Some(pids) = pids.as_deref_mut().filter(|_| pid != u32::MAX) {
            pids.insert(pid);
        }
        let wanted = pid != u32::MAX && (w.from..=to).contains(&pid) && keep(pid);
        match r {
            MapsRecord::Comm(pid, tid, comm) if wanted => {
                let p = process(&mut by_pid, pid);
                let before = p.weight();
                p.comm(tid, comm);
                held += p.weight() - before;
            }
            MapsRecord::Map(m) if is_kernel_map(&m) && w.kernel => kernel.push(kernel_map(m)),
            MapsRecord::Map(m) if wanted => {
                let vma = vma_of(&m, &mut names);
                // a process's maps usually come together: once the next
                // process's begin, its vectors give back their spare room
                // (once each, so pids taking turns cost no copying)
                match last.replace(pid) {
                    Some(prev) if prev != pid && left.insert(prev) => {
                        if let Some(p) = by_pid.get_mut(&prev) {
                            p.maps.shrink_to_fit();
                        }
                    }
                    _ => {}
                }
                let p = process(&mut by_pid, pid);
                let before = p.weight();
                p.map(vma);
                held += p.weight() - before;
            }
            MapsRecord::Bpf(r) if w.kernel => bpf.push(r),
            _ => {}
        }
        // over budget: the highest pids go, and no pid above them comes
        while held > w.budget && by_pid.len() > 1 {
            if let Some((top, p)) = by_pid.pop_last() {
                held -= p.weight();
                to = top - 1;
            }
        }
    })?;
    let mut processes: Vec<HeldProcess> = by_pid.into_values().collect();
    for p in &mut processes {
        p.by_address();
    }
    let next = (to != u32::MAX).then(|| to + 1);
    let maps = SnapshotMaps {
        processes,
        kernel,
        bpf,
    };
    Ok((maps, next))
}

/// The held process of `pid`, made if new.
fn process(by_pid: &mut BTreeMap<u32, HeldProcess>, pid: u32) -> &mut HeldProcess {
    by_pid.entry(pid).or_insert_with(|| HeldProcess {
        pid,
        ..HeldProcess::default()
    })
}

/// The [`KernelMap`] of a kernel or module map record.
fn kernel_map(m: MapRecord) -> KernelMap {
    let name = m.key.filename;
    KernelMap {
        start: m.key.addr,
        end: m.key.addr.saturating_add(m.key.len),
        pgoff: m.key.pgoff,
        dso: match name.starts_with(KERNEL_DSO) {
            true => KERNEL_DSO.to_vec(),
            false => name.clone(),
        },
        name,
        build_id: m.build_id,
    }
}

/// A map of the host kernel or a module: pid -1, cpumode kernel.
pub fn is_kernel_map(m: &MapRecord) -> bool {
    m.key.pid == u32::MAX && m.misc & misc::CPUMODE_MASK == misc::KERNEL
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::events::MapKey;

    /// A held process made of these COMMs (tid, name) and map records.
    fn held(comms: &[(u32, &[u8])], maps: &[MapRecord]) -> HeldProcess {
        let mut p = HeldProcess {
            pid: 5,
            ..HeldProcess::default()
        };
        let mut names = Names::default();
        for (tid, comm) in comms {
            p.comm(*tid, comm.to_vec());
        }
        for m in maps {
            p.map(vma_of(m, &mut names));
        }
        p.by_address();
        p
    }

    fn map(addr: u64, prot: u32, flags: u32) -> MapRecord {
        MapRecord {
            key: MapKey {
                pid: 5,
                addr,
                len: 0x1000,
                pgoff: 0,
                filename: b"/x".to_vec(),
            },
            tid: 5,
            misc: 0,
            build_id: None,
            dev_ino: Some((1, 2, 3)),
            ino_generation: 0,
            prot,
            flags,
        }
    }

    // Snapshot records become processes: leader first, maps sorted, perms from prot/flags.
    #[test]
    fn snapshot_records_to_processes() {
        let comms: &[(u32, &[u8])] = &[(6, b"worker"), (5, b"main"), (5, b"later")];
        let p = held(comms, &[map(0x2000, 5, 2), map(0x1000, 3, 1)]).into_process();
        assert_eq!(p.threads[0].comm, b"main");
        assert_eq!(p.threads[1].tid, 6);
        assert_eq!(p.vmas[0].start, 0x1000);
        assert_eq!(p.vmas[0].perms, Perms::READ | Perms::WRITE | Perms::SHARED);
        assert_eq!(p.vmas[1].perms, Perms::READ | Perms::EXEC);
        assert_eq!(p.vmas[1].inode, 3);
        // no COMM of the leader: a nameless one, first
        let p = held(&[(7, b"t")], &[]).into_process();
        assert_eq!((p.threads[0].tid, p.threads[0].comm.len()), (5, 0));
    }

    // Repeats are held as runs and come back as often, in the order a
    // stable sort by address gives, their names shared.
    #[test]
    fn repeated_maps_are_runs() {
        let (a, b, c) = (map(0x1000, 5, 2), map(0x1000, 1, 2), map(0x3000, 5, 2));
        let maps = [&c, &a, &a, &b, &c, &a, &a].map(Clone::clone);
        let h = held(&[], &maps);
        assert_eq!(h.runs().count(), 4); // a x2, b, a x2 at 0x1000; c x2
        let p = h.into_process();
        let mut sorted = maps.to_vec();
        sorted.sort_by_key(|m| m.key.addr);
        let mut names = Names::default();
        let want: Vec<Vma> = sorted.iter().map(|m| vma_of(m, &mut names)).collect();
        assert_eq!(p.vmas, want);
        assert!(p.vmas[0].name.shares(&p.vmas[6].name));
    }

    // Maps alternating at one address (a bomb's shape) are held once each,
    // their order as 8-byte runs, and come back in file order.
    #[test]
    fn alternating_maps_are_held_once_each() {
        let (a, b) = (map(0x1000, 5, 2), map(0x1000, 1, 2));
        let maps: Vec<MapRecord> = (0..1000).map(|i| [&a, &b][i % 2].clone()).collect();
        let h = held(&[], &maps);
        assert_eq!(h.maps.distinct().len(), 2);
        assert_eq!(h.map_count(), 1000);
        let p = h.into_process();
        let perms: Vec<Perms> = p.vmas.iter().map(|v| v.perms).collect();
        let mut names = Names::default();
        let want: Vec<Perms> = maps.iter().map(|m| vma_of(m, &mut names).perms).collect();
        assert_eq!(perms, want);
    }

    // Kernel maps come back in file order, as often as they came, each
    // distinct one held once.
    #[test]
    fn kernel_maps_are_held_once_each() {
        let (a, b) = (map(0x1000, 5, 2), map(0x2000, 5, 2));
        let mut k = KernelMaps::default();
        for m in [&a, &b, &b, &a, &a] {
            k.push(kernel_map(m.clone()));
        }
        assert_eq!((k.distinct().len(), k.iter().count()), (2, 3));
        let starts: Vec<u64> = k.into_vec().iter().map(|m| m.start).collect();
        assert_eq!(starts, [0x1000, 0x2000, 0x2000, 0x1000, 0x1000]);
    }

    // Removing maps drops all their repeats and counts them; the threads
    // come leader first (a nameless one when the file had none).
    #[test]
    fn held_maps_are_retained_by_run() {
        let (a, b) = (map(0x1000, 5, 2), map(0x3000, 5, 2));
        let mut h = held(&[(9, b"w")], &[a.clone(), a, b.clone(), b]);
        assert_eq!(h.map_count(), 4);
        assert_eq!(h.retain_maps(|v| v.start != 0x1000), 2);
        let runs: Vec<(u64, usize)> = h.runs().map(|(v, n)| (v.start, n)).collect();
        assert_eq!(runs, [(0x3000, 2)]);
        let t: Vec<(u32, usize)> = h.threads().iter().map(|t| (t.tid, t.comm.len())).collect();
        assert_eq!(t, [(5, 0), (9, 1)]);
    }
}
