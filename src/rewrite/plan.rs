//! Which processes a merge inserts, decided without I/O: the pids the
//! recording needs, the selection asked for, stale processes, processes
//! not the ones sampled, maps already present and build ids the table
//! lacks.

use std::collections::{HashMap, HashSet};

use super::coverage::NotRecorded;
use super::scan::RecordingFacts;
use crate::model::{Perms, Process, Vma};
use crate::perf::bpf::BpfEvent;
use crate::perf::consts::bpf::TAG_SIZE;
use crate::perf::events::MapKey;
use crate::perf::BuildIdEntry;
use crate::snapshot::{mmap_filename, BpfRecord, HeldProcess, Runs};

/// Which processes get records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// Those the recording needs: pids of its samples, COMM and FORK records
    /// that have no MMAP/MMAP2 in it.
    Needed,
    /// Every process (of the live system or of the snapshot).
    All,
    /// These pids.
    Pids(Vec<u32>),
}

/// The processes of a snapshot file (each `pid` says its pid) that
/// `which` asks for, and the wanted pids it lacks.
pub fn select<P>(
    all: Vec<P>,
    pid: impl Fn(&P) -> u32,
    which: &Which,
    needed: &[u32],
) -> (Vec<P>, Vec<u32>) {
    let want: HashSet<u32> = match which {
        Which::All => return (all, Vec::new()),
        Which::Needed => needed.iter().copied().collect(),
        Which::Pids(p) => p.iter().copied().collect(),
    };
    let have: HashSet<u32> = all.iter().map(&pid).collect();
    let mut missing: Vec<u32> = want.iter().copied().filter(|p| !have.contains(p)).collect();
    missing.sort_unstable();
    (
        all.into_iter().filter(|p| want.contains(&pid(p))).collect(),
        missing,
    )
}

/// Splits live processes into those kept and the pids of stale ones.
pub fn split_stale(
    procs: Vec<Process>,
    is_stale: impl Fn(&Process) -> bool,
) -> (Vec<Process>, Vec<u32>) {
    let (stale, kept): (Vec<Process>, Vec<Process>) = procs.into_iter().partition(is_stale);
    (kept, stale.into_iter().map(|p| p.pid).collect())
}

/// The needed pids that no process, stale pid or skip accounts for.
pub fn missing(needed: &[u32], accounted: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let got: HashSet<u32> = accounted.into_iter().collect();
    needed
        .iter()
        .copied()
        .filter(|p| !got.contains(p))
        .collect()
}

/// A process whose maps a merge may insert: live ([`Process`]) or held
/// from a snapshot file ([`HeldProcess`]).
pub trait Maps {
    /// Its pid.
    fn pid(&self) -> u32;
    /// Drops the maps `keep` refuses; how many (repeats counted).
    fn retain_maps(&mut self, keep: &mut dyn FnMut(&Vma) -> bool) -> usize;
    /// True when it has none.
    fn no_maps(&self) -> bool;
    /// How many of its maps `f` takes (repeats counted).
    fn count_maps(&self, f: &dyn Fn(&Vma) -> bool) -> usize;
    /// The (start, end) of its executable maps.
    fn exec_ranges(&self) -> Vec<(u64, u64)>;
    /// Its leader's comm.
    fn comm(&self) -> Vec<u8>;
}

/// The (start, end) of the executable ones of `vmas`.
fn exec_ranges<'a>(vmas: impl Iterator<Item = &'a Vma>) -> Vec<(u64, u64)> {
    (vmas.filter(|v| v.perms.contains(Perms::EXEC)))
        .map(|v| (v.start, v.end))
        .collect()
}

impl Maps for Process {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn exec_ranges(&self) -> Vec<(u64, u64)> {
        exec_ranges(self.vmas.iter())
    }
    fn comm(&self) -> Vec<u8> {
        self.threads
            .first()
            .map(|t| t.comm.clone())
            .unwrap_or_default()
    }
    fn retain_maps(&mut self, keep: &mut dyn FnMut(&Vma) -> bool) -> usize {
        let before = self.vmas.len();
        self.vmas.retain(|v| keep(v));
        before - self.vmas.len()
    }
    fn no_maps(&self) -> bool {
        self.vmas.is_empty()
    }
    fn count_maps(&self, f: &dyn Fn(&Vma) -> bool) -> usize {
        self.vmas.iter().filter(|v| f(v)).count()
    }
}

impl Maps for HeldProcess {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn exec_ranges(&self) -> Vec<(u64, u64)> {
        exec_ranges(self.runs().map(|(v, _)| v))
    }
    fn comm(&self) -> Vec<u8> {
        // the leader comes first
        (self.threads().into_iter().next())
            .map(|t| t.comm)
            .unwrap_or_default()
    }
    fn retain_maps(&mut self, keep: &mut dyn FnMut(&Vma) -> bool) -> usize {
        HeldProcess::retain_maps(self, keep)
    }
    fn no_maps(&self) -> bool {
        self.map_count() == 0
    }
    fn count_maps(&self, f: &dyn Fn(&Vma) -> bool) -> usize {
        self.runs().filter(|(v, _)| f(v)).map(|(_, n)| n).sum()
    }
}

/// Drops the processes that are not the ones the recording sampled under
/// their pids (see [`super::coverage`]: recorded in another pid namespace,
/// or the pid reused), COMM and maps; returns them, by pid. Done before
/// [`dedupe`], so every executable map of a process counts.
pub fn drop_not_recorded<P: Maps>(
    processes: &mut Vec<P>,
    facts: &RecordingFacts,
) -> Vec<NotRecorded> {
    let mut dropped = Vec::new();
    processes.retain(|p| match facts.sampled.judge(p.pid(), || p.exec_ranges()) {
        Some(coverage) if coverage.is_other() => {
            let (pid, comm) = (p.pid(), p.comm());
            dropped.push(NotRecorded {
                pid,
                comm,
                coverage,
            });
            false
        }
        _ => true,
    });
    dropped.sort_unstable_by_key(|n| n.pid);
    dropped
}

/// What [`dedupe`] left out and kept, in maps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Deduped {
    /// Left out: the recording has them.
    pub duplicates: usize,
    /// Data maps left out: not asked for (`facts.maps`), as perf
    /// synthesizes none then (a `--maps` snapshot taken with `-d` has them).
    pub data_left_out: usize,
    /// Data maps kept, to insert.
    pub data_kept: usize,
}

/// Drops the maps the recording has already and the data maps it does
/// not ask for (`facts.maps`), counting them, then the processes left
/// with nothing to insert; a needed process keeps its COMM even without
/// maps (kernel threads).
pub fn dedupe<P: Maps>(processes: &mut Vec<P>, facts: &RecordingFacts, needed: &[u32]) -> Deduped {
    let mut d = Deduped::default();
    let data = |v: &Vma| !v.perms.contains(Perms::EXEC);
    for p in processes.iter_mut() {
        let pid = p.pid();
        d.data_left_out += p.retain_maps(&mut |v| facts.maps.wants(v.perms));
        d.duplicates += p.retain_maps(&mut |v| {
            !facts.existing.contains(&MapKey {
                pid,
                addr: v.start,
                len: v.len(),
                pgoff: v.offset,
                filename: mmap_filename(v).0.to_vec(),
            })
        });
        d.data_kept += p.count_maps(&data);
    }
    processes.retain(|p| !p.no_maps() || needed.binary_search(&p.pid()).is_ok());
    d
}

/// Leaves out the COMMs of the live processes' threads that `renamed` names
/// (renamed during the recording: [`RecordingFacts::renamed`]): a name of
/// now, written at time 0, would also name the samples from before the
/// rename, and the name before it is unknown (perf shows such a thread as
/// `:TID` until the recording's COMM of the rename). A renamed leader's
/// process keeps its maps; one left with nothing to insert (no maps, no
/// COMM) is dropped. Returns how many threads' COMMs were left out. For
/// maps of now only: a snapshot's comms are of its time.
pub fn leave_out_renamed(processes: &mut Vec<Process>, renamed: &HashSet<u32>) -> usize {
    let mut left_out = 0;
    for t in processes.iter_mut().flat_map(|p| p.threads.iter_mut()) {
        if !t.comm.is_empty() && renamed.contains(&t.tid) {
            // an empty comm is written as no COMM (snapshot::encode)
            t.comm.clear();
            left_out += 1;
        }
    }
    processes.retain(|p| !p.vmas.is_empty() || p.threads.iter().any(|t| !t.comm.is_empty()));
    left_out
}

/// What [`dedupe_bpf`] does with a snapshot's KSYMBOL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Inserted.
    Kept,
    /// Dropped: the recording has it (the same fields).
    Duplicate,
    /// Dropped: over a place the recording saw another program take.
    Stale,
}

/// The fates of one program's KSYMBOLs, as far as [`dedupe_bpf`] found them.
#[derive(Debug, Clone, Copy, Default)]
struct Fates {
    kept: bool,
    stale: bool,
}

impl Fates {
    fn add(&mut self, f: Fate) {
        self.kept |= f == Fate::Kept;
        self.stale |= f == Fate::Stale;
    }

    /// Its KSYMBOLs all dropped, one at least as stale: the program is not
    /// the one the recording saw there, so its BPF_EVENT goes too.
    fn stale(self) -> bool {
        self.stale && !self.kept
    }
}

/// Drops the KSYMBOL and BPF_EVENT records the recording has already
/// (the same fields), and every KSYMBOL over addresses one of the
/// recording's own KSYMBOLs names otherwise: programs come and go, so a
/// snapshot's program at a place the recording saw another one take is
/// stale there, and inserted after the recording's own (in a stream, after
/// FINISHED_INIT) it would take that program's samples. A program whose
/// KSYMBOLs are all dropped so loses its BPF_EVENT too (its id and tag
/// would name a program the output has no code of): the KSYMBOLs right
/// before the event are its program's, else those named with its tag.
pub fn dedupe_bpf(records: &mut Runs<BpfRecord>, facts: &RecordingFacts) {
    let mut own: Vec<(u64, u64)> = (facts.existing_bpf.iter())
        .filter_map(|r| match r {
            BpfRecord::Ksymbol(addr, len, ..) => {
                Some((*addr, addr.saturating_add(u64::from(*len))))
            }
            BpfRecord::Event(_) => None,
        })
        .collect();
    own.sort_unstable();
    // the farthest end of the ranges up to each one
    let reach: Vec<u64> = (own.iter())
        .scan(0, |far, &(_, e)| {
            *far = e.max(*far);
            Some(*far)
        })
        .collect();
    // some range starting before `end` reaches past `addr`
    let taken = |addr: u64, end: u64| {
        let i = own.partition_point(|&(start, _)| start < end);
        i > 0 && reach[i - 1] > addr
    };
    let fate = |r: &BpfRecord| match r {
        _ if facts.existing_bpf.contains(r) => Fate::Duplicate,
        BpfRecord::Ksymbol(addr, len, ..) if taken(*addr, addr.saturating_add(u64::from(*len))) => {
            Fate::Stale
        }
        _ => Fate::Kept,
    };
    let stale = stale_events(records, &fate);
    records.retain(|r| match r {
        _ if facts.existing_bpf.contains(r) => false,
        BpfRecord::Ksymbol(..) => fate(r) == Fate::Kept,
        BpfRecord::Event(b) => !stale.contains(b),
    });
}

/// The BPF_EVENTs of `records` whose program's KSYMBOLs `fate` drops all,
/// one at least as stale. A program's KSYMBOLs are those right before its
/// BPF_EVENT (after the BPF_EVENT before it): perf record synthesizes a
/// program so, the kernel emits its load and unload so, and a snapshot
/// writes it so. An event with none there (records laid out otherwise)
/// has those its tag names, `bpf_prog_<tag>[_<name>]`, as kallsyms names a
/// one-function program (a sub-program's function carries a tag of its
/// own, and perf links them through the BPF_PROG_INFO feature, which a
/// snapshot has not); with none of those either it is kept.
fn stale_events(
    records: &Runs<BpfRecord>,
    fate: &impl Fn(&BpfRecord) -> Fate,
) -> HashSet<BpfEvent> {
    let mut of_event: HashMap<BpfEvent, Fates> = HashMap::new();
    let mut of_tag: HashMap<[u8; TAG_SIZE], Fates> = HashMap::new();
    let mut before: Option<Fates> = None;
    for (r, _) in records.iter() {
        match r {
            BpfRecord::Ksymbol(.., name) => {
                let f = fate(r);
                before.get_or_insert_with(Fates::default).add(f);
                if let Some(tag) = tag_of(name) {
                    of_tag.entry(tag).or_default().add(f);
                }
            }
            BpfRecord::Event(b) => {
                // a repeat right after it has none before it
                if let Some(fates) = before.take() {
                    let all = of_event.entry(*b).or_default();
                    all.kept |= fates.kept;
                    all.stale |= fates.stale;
                }
            }
        }
    }
    let events = records.iter().filter_map(|(r, _)| match r {
        BpfRecord::Event(b) => Some(*b),
        BpfRecord::Ksymbol(..) => None,
    });
    events
        .filter(|b| match of_event.get(b) {
            Some(fates) => fates.stale(),
            None => of_tag.get(&b.tag).is_some_and(|f| f.stale()),
        })
        .collect()
}

/// The tag a KSYMBOL's name `bpf_prog_<16 hex digits>[_<name>]` carries.
fn tag_of(name: &[u8]) -> Option<[u8; TAG_SIZE]> {
    let rest = name.strip_prefix(b"bpf_prog_")?;
    let (hex, after) = rest.split_at_checked(2 * TAG_SIZE)?;
    if !(after.is_empty() || after.starts_with(b"_")) {
        return None;
    }
    let mut tag = [0u8; TAG_SIZE];
    for (t, pair) in tag.iter_mut().zip(hex.chunks_exact(2)) {
        let digit = |c: u8| (c as char).to_digit(16);
        *t = (digit(pair[0])? << 4 | digit(pair[1])?) as u8;
    }
    Some(tag)
}

/// The entries of `all` that the recording's BUILD_ID table lacks.
pub fn new_build_ids(all: Vec<BuildIdEntry>, facts: &RecordingFacts) -> Vec<BuildIdEntry> {
    all.into_iter()
        .filter(|b| {
            !facts
                .existing_ids
                .contains(&(b.filename.clone(), b.build_id))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::scan::Remember;

    // A snapshot's KSYMBOL over the place of one of the recording's own
    // (another program there since) is left out, as is one the recording
    // has; the rest and the BPF_EVENTs are kept.
    #[test]
    fn stale_bpf_symbols_are_left_out() {
        let k =
            |addr: u64, len: u32, name: &[u8]| BpfRecord::Ksymbol(addr, len, 1, 0, name.to_vec());
        let mut facts = RecordingFacts::new(crate::bytes::Endian::NATIVE, Remember::All);
        facts.existing_bpf.insert(k(0x1000, 0x100, b"bpf_prog_q"));
        facts.existing_bpf.insert(k(0x5000, 0x10, b"bpf_prog_r"));
        let mut runs = Runs::default();
        for r in [
            k(0x1000, 0x100, b"bpf_prog_q"), // the recording's own
            k(0x1080, 0x100, b"bpf_prog_p"), // over q: stale
            k(0x0f00, 0x101, b"bpf_prog_s"), // reaches into q
            k(0x1100, 0x100, b"bpf_prog_t"), // right after q
            k(0x4ff0, 0x10, b"bpf_prog_u"),  // right before r
            k(0x5008, 0x1, b"bpf_prog_v"),   // inside r
        ] {
            runs.push(r);
        }
        dedupe_bpf(&mut runs, &facts);
        let kept: Vec<u64> = runs
            .iter()
            .filter_map(|(r, _)| match r {
                BpfRecord::Ksymbol(a, ..) => Some(*a),
                BpfRecord::Event(_) => None,
            })
            .collect();
        assert_eq!(kept, [0x1100, 0x4ff0]);
    }

    // A program whose KSYMBOLs were all dropped as stale loses its
    // BPF_EVENT, linked by order (the KSYMBOLs right before it) or, with
    // none there, by the tag in a KSYMBOL's name; one with a KSYMBOL kept,
    // or only ones the recording has, keeps it.
    #[test]
    fn a_stale_programs_bpf_event_is_left_out() {
        let k =
            |addr: u64, len: u32, name: &[u8]| BpfRecord::Ksymbol(addr, len, 1, 0, name.to_vec());
        let ev = |id: u32, t: u8| {
            BpfRecord::Event(BpfEvent {
                event_type: crate::perf::consts::bpf::EVENT_PROG_LOAD,
                flags: 0,
                id,
                tag: [t; TAG_SIZE],
            })
        };
        let mut facts = RecordingFacts::new(crate::bytes::Endian::NATIVE, Remember::All);
        facts.existing_bpf.insert(k(0x1000, 0x100, b"bpf_prog_q"));
        facts.existing_bpf.insert(k(0x5000, 0x100, b"bpf_prog_r"));
        let all = [
            k(0x1000, 0x10, b"bpf_prog_aaaaaaaaaaaaaaaa_a"), // stale
            ev(1, 0xaa),                                     // its only one: left out
            k(0x5000, 0x10, b"bpf_prog_b1"),                 // stale
            k(0x9000, 0x10, b"bpf_prog_b2"),                 // kept
            ev(2, 0xbb),                                     // one kept: kept
            k(0x1000, 0x100, b"bpf_prog_q"),                 // the recording's own
            ev(3, 0xcc),                                     // kept
            k(0xa000, 0x10, b"bpf_prog_d"),                  // kept
            ev(4, 0xdd),                                     // kept
            ev(5, 0xee),                                     // none before it: by tag
            k(0x5080, 0x10, b"bpf_prog_eeeeeeeeeeeeeeee_e"), // stale
        ];
        let mut runs: Runs<BpfRecord> = all.iter().cloned().collect();
        dedupe_bpf(&mut runs, &facts);
        let kept: Vec<BpfRecord> = runs.iter().map(|(r, _)| r.clone()).collect();
        let want = [&all[3], &all[4], &all[6], &all[7], &all[8]];
        assert_eq!(kept.iter().collect::<Vec<_>>(), want);
        assert_eq!(
            tag_of(b"bpf_prog_0102030405060708"),
            Some([1, 2, 3, 4, 5, 6, 7, 8])
        );
        assert_eq!(tag_of(b"bpf_prog_0102030405060708x"), None);
        assert_eq!(tag_of(b"bpf_prog_01020304050607"), None);
        assert_eq!(tag_of(b"bpf_prog_010203040506070g_f"), None);
    }

    // Selection from a snapshot keeps the wanted pids and names the missing ones.
    #[test]
    fn select_and_missing() {
        let all = vec![Process::empty(1), Process::empty(3)];
        let pid = |p: &Process| p.pid;
        let (got, miss) = select(all.clone(), pid, &Which::Pids(vec![3, 4]), &[]);
        assert_eq!((got.len(), got[0].pid, miss), (1, 3, vec![4]));
        let (got, miss) = select(all.clone(), pid, &Which::Needed, &[1]);
        assert_eq!((got.len(), miss), (1, vec![]));
        assert_eq!(select(all, pid, &Which::All, &[]).0.len(), 2);
        assert_eq!(missing(&[1, 2, 3], [2]), vec![1, 3]);
    }
}
