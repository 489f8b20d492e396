//! The scan's maps as the watch filter keeps them ([`ScanMaps`]): where
//! each lies, the place its walk showed, when it was read and what it is
//! ([`MapIdentity`]); and what a watched scan hands the filter with each
//! piece's records ([`ScanRead`]).

use super::identity::MapIdentity;
use crate::bytes::Endian;
use crate::model::{Process, ReadTimes};
use crate::perf::consts::types;
use crate::perf::events::parse_map;
use crate::perf::RecordHeader;
use crate::proc;

/// What the watch filter needs of a piece the scan read besides its
/// records: when its maps were read, and the device and inode of each
/// file it wrote by build id (the record carries the id alone; the kernel
/// writes the watched map with the device and inode, and its id may no
/// longer be readable once the scan is over).
#[derive(Debug, Clone, Default)]
pub struct ScanRead {
    times: ReadTimes,
    /// (major, minor, inode) of each VMA with a build id, in order: the
    /// n-th is the n-th MMAP2 in build-id form.
    files: Vec<(u32, u32, u64)>,
}

impl ScanRead {
    /// What the filter needs of the piece `p` (its VMAs as encoded).
    pub fn of(p: &Process) -> ScanRead {
        // room for every VMA up front: a filtered collect grows from empty
        let mut files = Vec::with_capacity(p.vmas.len());
        let by_id = p.vmas.iter().filter(|v| v.build_id.is_some());
        files.extend(by_id.map(|v| (v.dev_major, v.dev_minor, v.inode)));
        ScanRead {
            times: p.read_times.clone(),
            files,
        }
    }

    /// When the piece's maps were read.
    pub fn times(&self) -> &ReadTimes {
        &self.times
    }
}

/// Times alone: every map's file is the one its record tells.
impl From<ReadTimes> for ScanRead {
    fn from(times: ReadTimes) -> ScanRead {
        ScanRead {
            times,
            files: Vec::new(),
        }
    }
}

/// A map the scan wrote, as [`ScanMaps`] keeps it (fields in this order
/// for sorting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Seen {
    pub(super) pid: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    /// Where the place its read showed begins: the end of the map the
    /// walk wrote before it (0 for a walk's first), or its start if that is
    /// lower. The walk asked for the first map at or after that address,
    /// so the gap up to this map held nothing it wanted then.
    pub(super) from: u64,
    /// When it was read: after the first, by the second ([`ReadTimes`]).
    pub(super) read: (u64, u64),
    pub(super) identity: MapIdentity,
}

/// The scan's maps, appended per piece (cheap on the scan's path), sorted
/// once when the first watched map is looked up: most scans see few or
/// none.
#[derive(Debug, Default)]
pub struct ScanMaps {
    pub(super) seen: Vec<Seen>,
    /// For each of `seen`, sorted, the furthest end of its pid's maps up to
    /// it: maps read while the process changed may overlap or nest.
    reach: Vec<u64>,
    /// Whether `seen` is sorted and `reach` made since the last append.
    sorted: bool,
}

impl ScanMaps {
    /// Keeps the maps of a piece's records (this machine's byte order):
    /// the n-th MMAP2 is its n-th VMA.
    pub fn keep(&mut self, pid: u32, records: &[u8], read: &ScanRead) {
        let times = &read.times;
        let mut from = times.first_from();
        let mut files = read.files.iter();
        let maps = proc::watch::records(records).filter(|&(t, ..)| t == types::MMAP2);
        for (i, (t, misc, body)) in maps.enumerate() {
            let h = RecordHeader {
                type_: t,
                misc,
                size: 0,
            };
            let Some(m) = parse_map(&h, body, Endian::NATIVE) else {
                continue;
            };
            let mut identity = MapIdentity::of(&m);
            if m.build_id.is_some() {
                identity = identity.with_file(files.next().copied());
            }
            let k = &m.key;
            let end = k.addr.saturating_add(k.len);
            self.seen.push(Seen {
                pid,
                start: k.addr,
                end,
                from: from.min(k.addr),
                read: times.bounds(i),
                identity,
            });
            from = end;
        }
        self.sorted = false;
    }

    /// Whether the scan's maps around a watched map of `pid` over
    /// `start..end` recorded at `time` show it all after `time`, or are one
    /// map of its place and `identity` maybe read after it.
    pub fn over(
        &mut self,
        pid: u32,
        (start, end): (u64, u64),
        time: u64,
        identity: &MapIdentity,
    ) -> bool {
        if !self.sorted {
            self.seen.sort_unstable();
            let mut last = None;
            self.reach.clear();
            for m in &self.seen {
                let reach = match last {
                    Some((lp, r)) if lp == m.pid => m.end.max(r),
                    _ => m.end,
                };
                self.reach.push(reach);
                last = Some((m.pid, reach));
            }
            self.sorted = true;
        }
        // the maps over it: back from the last one starting before `end`,
        // while some map of the pid up to there still reaches past `start`;
        // and the next one, whose read showed the gap before it
        let below = (self.seen).partition_point(|m| (m.pid, m.start) < (pid, end));
        let mut over = Vec::new();
        for i in (0..below).rev() {
            let m = &self.seen[i];
            if m.pid != pid || self.reach[i] <= start {
                break;
            }
            if m.end > start {
                over.push(*m);
            }
        }
        if let Some(next) = self.seen.get(below) {
            if next.pid == pid && next.from < end {
                over.push(*next);
            }
        }
        if let [m] = over[..] {
            let same = (m.start, m.end) == (start, end) && m.identity.same(identity);
            if same && time <= m.read.1 {
                return true;
            }
        }
        // all read after it, and their places cover it
        if over.is_empty() || over.iter().any(|m| time > m.read.0) {
            return false;
        }
        over.sort_unstable_by_key(|m| m.from);
        let mut covered = start;
        for m in &over {
            if m.from > covered {
                return false;
            }
            covered = covered.max(m.end);
        }
        covered >= end
    }
}
