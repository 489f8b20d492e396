//! The walk's visitor for `pprof`: replays maps, comms and forks in record
//! order and turns each sample into a stack of locations in the builder.

use std::hash::BuildHasher;
use std::rc::Rc;

use foldhash::HashMap;

use super::maps::{find, AddressSpaces, Map};
use super::profile::{Builder, Space};
use super::PprofReport;
use crate::bytes::{cstr, Endian, Rd};
use crate::perf::consts::{attr_flags, event_update, misc, types};
use crate::perf::events::{parse_comm, parse_fork, parse_map};
use crate::perf::sample::{frames_into, parse_sample, Callchain, FrameMode, Sample};
use crate::perf::{Attrs, FormatError, FormatErrorKind as K, RecordHeader, Visitor};
use crate::rewrite::buildids::MapIds;
use crate::rewrite::ConvertReport;

/// The aggregate a raw stack went to: samples with the same callchain
/// bytes, ip, cpumode, thread and comms go to the same one while no map
/// changes, so they skip the per-frame lookups.
/// ip, cpumode (and whether there is a callchain), pid, tid, comm, thread
/// comm.
type CacheKey = (u64, u16, u32, u32, i64, i64);

struct Cached {
    chain: Box<[u8]>,
    key: CacheKey,
    sample: usize,
    /// Counts the slow path made, repeated on a hit.
    ip_only: bool,
    unmapped: u32,
    guest: u32,
    /// The entry before it with the same hash.
    next: usize,
}

impl Cached {
    fn matches(&self, chain: &[u8], key: &CacheKey) -> bool {
        self.key == *key && *self.chain == *chain
    }
}

/// Raw stacks seen since the maps last changed.
#[derive(Default)]
struct StackCache {
    by_hash: HashMap<u64, usize>,
    entries: Vec<Cached>,
    hasher: foldhash::fast::RandomState,
}

/// Most raw stacks remembered before starting over (memory stays within
/// a few times the distinct stacks).
const STACK_CACHE_MAX: usize = 1 << 20;

impl StackCache {
    fn find(&self, h: u64, chain: &[u8], key: &CacheKey) -> Option<usize> {
        let mut i = self.by_hash.get(&h).copied().unwrap_or(usize::MAX);
        while let Some(e) = self.entries.get(i) {
            if e.matches(chain, key) {
                return Some(i);
            }
            i = e.next;
        }
        None
    }

    fn insert(&mut self, h: u64, mut e: Cached) -> usize {
        if self.entries.len() >= STACK_CACHE_MAX {
            self.clear();
        }
        e.next = self
            .by_hash
            .insert(h, self.entries.len())
            .unwrap_or(usize::MAX);
        self.entries.push(e);
        self.entries.len() - 1
    }

    fn clear(&mut self) {
        self.by_hash.clear();
        self.entries.clear();
    }
}

/// What the walk gathers.
pub(super) struct Reader {
    pub(super) e: Endian,
    pub(super) spaces: AddressSpaces,
    /// tid -> string id of its comm.
    comms: HashMap<u32, i64>,
    pub(super) builder: Builder,
    ids: MapIds,
    ids_report: ConvertReport,
    names_by_path: HashMap<Vec<u8>, Rc<[u8]>>,
    /// Event names from EVENT_UPDATE records (pipe mode), by event id.
    pub(super) names_by_id: HashMap<u64, Vec<u8>>,
    cache: StackCache,
    /// The last sample's thread and comms, and its cache entry: runs of
    /// samples of one thread, often of one stack, skip the lookups.
    last_thread: Option<(u32, u32, i64, i64)>,
    last_entry: Option<usize>,
    /// Buffers reused from sample to sample.
    stack: Vec<(FrameMode, u64)>,
    locations: Vec<u64>,
    /// First and last sample time.
    pub(super) times: Option<(u64, u64)>,
    pub(super) report: PprofReport,
}

impl Reader {
    /// After the walk: the files the maps name, when the walk used a table
    /// id for a path whose maps turned out to name several files (the
    /// walk must be made again knowing them, [`MapIds::knowing`]).
    pub(super) fn take_second_pass(&mut self) -> Option<crate::rewrite::attribution::MappedFiles> {
        self.ids.take_second_pass()
    }

    /// Paths of maps kept without the table's or the disk's id: replaced
    /// since they were mapped (stale), or one table id for several files
    /// (ambiguous).
    pub(super) fn unattributed(&self) -> Vec<Vec<u8>> {
        let r = &self.ids_report;
        let mut paths = r.stale_paths.clone();
        paths.extend(r.ambiguous_paths.iter().cloned());
        paths
    }

    pub(super) fn new(e: Endian, ids: MapIds, map_limit: usize) -> Reader {
        Reader {
            e,
            spaces: AddressSpaces::new(map_limit),
            comms: HashMap::default(),
            builder: Builder::default(),
            ids,
            ids_report: ConvertReport::default(),
            names_by_path: HashMap::default(),
            names_by_id: HashMap::default(),
            cache: StackCache::default(),
            last_thread: None,
            last_entry: None,
            stack: Vec::new(),
            locations: Vec::new(),
            times: None,
            report: PprofReport::default(),
        }
    }

    fn map(&mut self, at: u64, h: &RecordHeader, body: &[u8]) -> Result<(), FormatError> {
        let m = parse_map(h, body, self.e).ok_or_else(|| {
            FormatError::at(at, crate::perf::FormatErrorKind::MalformedRecord(h.type_))
        })?;
        let cpumode = h.misc & misc::CPUMODE_MASK;
        // guests' maps are not the host's (their frames are left out)
        if matches!(cpumode, misc::GUEST_KERNEL | misc::GUEST_USER) {
            return Ok(());
        }
        let kernel = cpumode == misc::KERNEL || m.key.pid == u32::MAX;
        let Some(end) = m.key.addr.checked_add(m.key.len) else {
            return Ok(());
        };
        // convert's rules; names that are no file (`[vdso]`) take the
        // table's id as it is, files never (one id_of kept may be another
        // file's: stale or ambiguous)
        let build_id = match m.build_id {
            Some(id) => Some(id),
            None => self
                .ids
                .id_of(h, body, self.e, &mut self.ids_report)
                .or_else(|| match m.key.filename.first() {
                    Some(b'/') => None,
                    _ => self.ids.table_id(cpumode, &m.key.filename),
                }),
        };
        let filename = self
            .names_by_path
            .entry(m.key.filename.clone())
            .or_insert_with(|| m.key.filename.as_slice().into())
            .clone();
        let map = Map {
            start: m.key.addr,
            end,
            pgoff: m.key.pgoff,
            filename,
            build_id,
        };
        self.report.maps += 1;
        self.cache.clear();
        let pid = (!kernel).then_some(m.key.pid);
        self.spaces.insert(pid, map).map_err(|n| too_many(at, n.0))
    }

    #[inline]
    fn sample(
        &mut self,
        at: u64,
        h: &RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let Some(slot) = attrs.index_of_sample(body, self.e) else {
            return Ok(());
        };
        let attr = &attrs.list[slot].0;
        let s =
            parse_sample(body, attr, self.e).map_err(|err| FormatError::at(at, K::Sample(err)))?;
        self.report.samples += 1;
        if let Some(t) = s.time {
            let (first, last) = self.times.get_or_insert((t, t));
            *first = (*first).min(t);
            *last = (*last).max(t);
        }
        let cpumode = h.misc & misc::CPUMODE_MASK;
        let mode = match cpumode {
            misc::KERNEL | misc::HYPERVISOR => FrameMode::Kernel,
            misc::GUEST_KERNEL | misc::GUEST_USER => FrameMode::Guest,
            _ => FrameMode::User,
        };
        let (pid, tid) = s.pid_tid.unwrap_or((u32::MAX, u32::MAX));
        let period = s.period.unwrap_or(if attr.flags & attr_flags::FREQ != 0 {
            1
        } else {
            attr.sample_period.max(1)
        });
        let (comm, thread_comm) = self.comms_of(pid, tid);
        // a stack seen since the maps last changed: its aggregate
        let raw = s.callchain.as_ref().map_or(&[][..], |c| c.as_bytes());
        let key = (
            s.ip.unwrap_or(u64::MAX),
            cpumode | u16::from(s.callchain.is_some()) << 8,
            pid,
            tid,
            comm,
            thread_comm,
        );
        let same = self.last_entry.filter(|&i| {
            self.cache
                .entries
                .get(i)
                .is_some_and(|e| e.matches(raw, &key))
        });
        let h = match same {
            Some(_) => 0,
            None => self.cache.hasher.hash_one((raw, &key)),
        };
        if let Some(i) = same.or_else(|| self.cache.find(h, raw, &key)) {
            let c = &self.cache.entries[i];
            self.report.ip_only += u64::from(c.ip_only);
            self.report.unmapped_frames += u64::from(c.unmapped);
            self.report.guest_frames += u64::from(c.guest);
            self.builder.add_to(c.sample, slot, period);
            self.last_entry = Some(i);
            return Ok(());
        }
        self.first_seen(&s, mode, (h, key), (slot, period));
        Ok(())
    }

    /// A stack not in the cache: its locations found, its aggregate added
    /// and cached under `h`, the hash of (raw callchain, `key`).
    #[inline(never)]
    fn first_seen(
        &mut self,
        s: &Sample<'_>,
        mode: FrameMode,
        (h, key): (u64, CacheKey),
        (slot, period): (usize, u64),
    ) {
        let raw = s.callchain.as_ref().map_or(&[][..], |c| c.as_bytes());
        let (_, _, pid, tid, comm, thread_comm) = key;
        let before = (self.report.unmapped_frames, self.report.guest_frames);
        let ip_only = self.locate(mode, s.ip, s.callchain.as_ref(), pid);
        let locations = std::mem::take(&mut self.locations);
        let sample = self
            .builder
            .add(&locations, (pid, tid), (comm, thread_comm), slot, period);
        let count = |now: u64, then: u64| u32::try_from(now - then).unwrap_or(u32::MAX);
        self.last_entry = Some(self.cache.insert(
            h,
            Cached {
                chain: raw.into(),
                key,
                sample,
                ip_only,
                unmapped: count(self.report.unmapped_frames, before.0),
                guest: count(self.report.guest_frames, before.1),
                next: usize::MAX,
            },
        ));
        self.locations = locations;
    }

    /// The string ids of the comms of process `pid` and thread `tid`.
    fn comms_of(&mut self, pid: u32, tid: u32) -> (i64, i64) {
        match self.last_thread {
            Some((p, t, c, tc)) if (p, t) == (pid, tid) => (c, tc),
            _ => {
                let comm = self.comms.get(&pid).copied().unwrap_or(0);
                let thread_comm = self.comms.get(&tid).copied().unwrap_or(comm);
                self.last_thread = Some((pid, tid, comm, thread_comm));
                (comm, thread_comm)
            }
        }
    }

    /// The locations of a sample's stack into `self.locations` (counting
    /// frames without a map and guest frames); true when the callchain
    /// was not used (it does not start at the ip).
    fn locate(
        &mut self,
        mode: FrameMode,
        ip: Option<u64>,
        callchain: Option<&Callchain<'_>>,
        pid: u32,
    ) -> bool {
        let mut ip_only = false;
        let mut stack = std::mem::take(&mut self.stack);
        let mut locations = std::mem::take(&mut self.locations);
        match callchain {
            Some(chain) => frames_into(chain.iter(), mode, &mut stack),
            None => stack.clear(),
        }
        // a callchain that does not start at the ip (`--call-graph dwarf`
        // takes no user callchain) is not this sample's stack: the ip alone
        if let Some(ip) = ip {
            if stack.first().map(|f| f.1) != Some(ip) {
                if callchain.is_some() {
                    self.report.ip_only += 1;
                    ip_only = true;
                }
                stack.clear();
                stack.push((mode, ip));
            }
        }
        locations.clear();
        let process = self.spaces.process(pid);
        // the last map hit: the frames of a stack often share one
        let mut last: Option<(&Rc<Map>, Space)> = None;
        for (i, &(mode, addr)) in stack.iter().enumerate() {
            // a caller's address is its return address: step back into
            // the call instruction, as perf_to_profile does (the first
            // frame after a switch of mode is where it was interrupted)
            let caller = i > 0 && stack[i - 1].0 == mode;
            let addr = if caller { addr.saturating_sub(1) } else { addr };
            let space = match mode {
                FrameMode::Guest => {
                    self.report.guest_frames += 1;
                    continue;
                }
                FrameMode::Kernel => Space::Kernel,
                FrameMode::User => Space::User,
            };
            let map = match last {
                Some((m, s)) if s == space && m.start <= addr && addr < m.end => Some(m),
                _ => match space {
                    Space::Kernel => self.spaces.kernel(addr),
                    Space::User => process.and_then(|p| find(p, addr)),
                },
            };
            last = map.map(|m| (m, space));
            let mapping = match map {
                Some(m) => self.builder.mapping(m, space),
                None => {
                    self.report.unmapped_frames += 1;
                    0
                }
            };
            locations.push(self.builder.location(mapping, addr));
        }
        self.stack = stack;
        self.locations = locations;
        ip_only
    }
}

fn too_many(at: u64, n: usize) -> FormatError {
    FormatError::at(
        at,
        K::Implausible {
            what: "number of maps held at once (fork copies included)",
            value: n as u64,
        },
    )
}

impl Visitor for Reader {
    #[inline]
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        // samples are nearly every record: their path stays inlined
        if h.type_ == types::SAMPLE {
            return self.sample(at, &h, body, attrs);
        }
        self.other(at, h, body)
    }
}

impl Reader {
    /// Every record but samples.
    #[inline(never)]
    fn other(&mut self, at: u64, h: RecordHeader, body: &[u8]) -> Result<(), FormatError> {
        let e = self.e;
        let malformed = || FormatError::at(at, K::MalformedRecord(h.type_));
        match h.type_ {
            types::MMAP | types::MMAP2 => self.map(at, &h, body)?,
            types::COMM => {
                let (pid, tid, name) = parse_comm(body, e).ok_or_else(malformed)?;
                if h.misc & misc::COMM_EXEC != 0 {
                    self.spaces.exec(pid);
                    self.cache.clear();
                }
                let id = self.builder.strings.id_bytes(&name);
                self.comms.insert(tid, id);
                self.last_thread = None;
            }
            types::FORK => {
                let f = parse_fork(body, e).ok_or_else(malformed)?;
                if f.pid != f.ppid {
                    self.spaces
                        .fork(f.ppid, f.pid)
                        .map_err(|n| too_many(at, n.0))?;
                    self.cache.clear();
                }
                if let Some(&c) = self.comms.get(&f.ptid) {
                    self.comms.entry(f.tid).or_insert(c);
                }
                self.last_thread = None;
            }
            types::EVENT_UPDATE => {
                let r = Rd(e);
                if r.u64(body, 0) == Some(event_update::NAME) {
                    let id = r.u64(body, 8).ok_or_else(malformed)?;
                    let name = cstr(body.get(16..).unwrap_or_default()).to_vec();
                    self.names_by_id.insert(id, name);
                }
            }
            _ => {}
        }
        Ok(())
    }
}
