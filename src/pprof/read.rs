//! The walk's visitor for `pprof`: replays maps, comms, forks and exits in
//! record order (but the records of a process not known yet, held for its
//! FORK and read in time order: `park`) and turns each sample into a stack
//! of locations in the builder (through `cache`'s memo of raw stacks; a
//! stack not seen yet is located by `stack`). It notes where FORKs,
//! samples and changes to their processes' maps or threads' comms came in
//! the opposite order of their times (`inversions`).

use std::hash::BuildHasher;
use std::rc::Rc;

use foldhash::HashMap;

use super::cache::StackCache;
use super::inversions::Inversions;
use super::maps::{AddressSpaces, Map, TooManyMaps};
use super::park::{Held, Parked};
use super::profile::Builder;
use super::PprofReport;
use crate::bytes::{cstr, Endian, Rd};
use crate::model::FileKey;
use crate::perf::consts::{attr_flags, event_update, misc, types};
use crate::perf::events::{parse_comm, parse_fork, parse_map};
use crate::perf::sample::{parse_sample, FrameMode};
use crate::perf::{Attrs, FormatError, FormatErrorKind as K, RecordHeader, Visitor};
use crate::rewrite::buildids::MapIds;
use crate::rewrite::ConvertReport;

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
    pub(super) cache: StackCache,
    /// The last sample's thread and comms, and its cache entry: runs of
    /// samples of one thread, often of one stack, skip the lookups.
    last_thread: Option<(u32, u32, i64, i64)>,
    pub(super) last_entry: Option<usize>,
    /// Buffers reused from sample to sample.
    pub(super) stack: Vec<(FrameMode, u64)>,
    pub(super) locations: Vec<u64>,
    /// First and last sample time.
    pub(super) times: Option<(u64, u64)>,
    pub(super) report: PprofReport,
    /// Records of processes not known yet, held for their FORK.
    parked: Parked,
    /// Held records are being read (none is held again).
    replaying: bool,
    /// The last pid found known (they stay known).
    last_known: u32,
    /// The child the last FORK read made.
    forked: Option<u32>,
    /// Where FORKs and changes to their parents' maps were read in the
    /// opposite order of their times.
    pub(super) inversions: Inversions,
}

impl Reader {
    /// After the walk: the files the maps name, when the walk used a table
    /// id for a path whose maps turned out to name several files (the
    /// walk must be made again knowing them, [`MapIds::knowing`]).
    pub(super) fn take_second_pass(&mut self) -> Option<crate::rewrite::attribution::MappedFiles> {
        self.ids.take_second_pass()
    }

    /// Paths of maps kept without the table's, the disk's or a live
    /// process's id: not the file at the path now (stale: replaced, or
    /// another mount namespace's), or one table id for several files
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
            parked: Parked::default(),
            replaying: false,
            last_known: 0,
            forked: None,
            inversions: Inversions::default(),
        }
    }

    fn map(
        &mut self,
        at: u64,
        h: &RecordHeader,
        body: &[u8],
        time: Option<u64>,
    ) -> Result<(), FormatError> {
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
            file: m.dev_ino.map(|(dev_major, dev_minor, inode)| FileKey {
                dev_major,
                dev_minor,
                inode,
            }),
        };
        self.report.maps += 1;
        self.cache.clear();
        let pid = (!kernel).then_some(m.key.pid);
        if let Some(pid) = pid {
            self.inversions
                .change(pid, time.unwrap_or(0), map.start..map.end);
        }
        self.spaces.insert(pid, map).map_err(|e| too_many(at, e))
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
        let (pid, tid) = s.pid_tid.unwrap_or((u32::MAX, u32::MAX));
        if pid != self.last_known && self.hold(pid, s.time, (at, h, body), attrs)? {
            return Ok(());
        }
        self.report.samples += 1;
        if let Some(t) = s.time {
            self.inversions.sample(pid, tid, t);
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

    /// Holds a record of process `pid` back ([`Parked`]) while no record
    /// read made the pid known: its FORK may come later in the file. Not
    /// those of time 0 (perf's synthesized records, which come first) nor
    /// while held records are read. True if it was held.
    fn hold(
        &mut self,
        pid: u32,
        time: Option<u64>,
        (at, h, body): (u64, &RecordHeader, &[u8]),
        attrs: &Attrs,
    ) -> Result<bool, FormatError> {
        let known = pid == 0
            || pid == u32::MAX
            || self.comms.contains_key(&pid)
            || self.spaces.process(pid).is_some();
        if known {
            self.last_known = pid;
        }
        let Some(time) = time.filter(|&t| t > 0 && !known && !self.replaying) else {
            return Ok(false);
        };
        if self.parked.park(pid, (time, at), *h, body) {
            return Ok(true);
        }
        // too much held: all of it read first, in time order
        let all = self.parked.all();
        self.replay(all, attrs)?;
        Ok(false)
    }

    /// Reads held records in time order; a FORK among them releases its
    /// child's in turn (a stack of them, not a recursion).
    fn replay(&mut self, held: Vec<Held>, attrs: &Attrs) -> Result<(), FormatError> {
        let was = std::mem::replace(&mut self.replaying, true);
        let mut stack = vec![held.into_iter()];
        let mut read = Ok(());
        while let Some(top) = stack.last_mut() {
            let Some(r) = top.next() else {
                stack.pop();
                continue;
            };
            read = match r.header.type_ {
                types::SAMPLE => self.sample(r.at, &r.header, &r.body, attrs),
                _ => self.other(r.at, r.header, &r.body, attrs),
            };
            if read.is_err() {
                break;
            }
            if let Some(child) = self.forked.take() {
                stack.push(self.parked.take(child).into_iter());
            }
        }
        self.replaying = was;
        read
    }

    /// After the walk: the records still held, in time order.
    pub(super) fn finish(&mut self, attrs: &Attrs) -> Result<(), FormatError> {
        let held = self.parked.all();
        self.replay(held, attrs)
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
}

fn too_many(at: u64, e: TooManyMaps) -> FormatError {
    let (what, n) = e.what();
    FormatError::at(
        at,
        K::Implausible {
            what,
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
        self.other(at, h, body, attrs)?;
        match self.forked.take() {
            Some(child) if !self.parked.is_empty() => {
                let held = self.parked.take(child);
                self.replay(held, attrs)
            }
            _ => Ok(()),
        }
    }
}

impl Reader {
    /// Every record but samples.
    #[inline(never)]
    fn other(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let e = self.e;
        let malformed = || FormatError::at(at, K::MalformedRecord(h.type_));
        let held = holder(&h, body, attrs, e);
        if let Some((pid, time)) = held {
            if self.hold(pid, time, (at, &h, body), attrs)? {
                return Ok(());
            }
        }
        let time = held.and_then(|(_, t)| t);
        match h.type_ {
            types::MMAP | types::MMAP2 => self.map(at, &h, body, time)?,
            types::COMM => {
                let (pid, tid, name) = parse_comm(body, e).ok_or_else(malformed)?;
                if h.misc & misc::COMM_EXEC != 0 {
                    self.inversions.change(pid, time.unwrap_or(0), 0..u64::MAX);
                    self.spaces.exec(pid);
                    self.cache.clear();
                }
                self.inversions.comm(tid, time.unwrap_or(0));
                self.spaces.thread(pid, tid);
                let id = self.builder.strings.id_bytes(&name);
                self.comms.insert(tid, id);
                self.last_thread = None;
            }
            types::FORK => {
                let f = parse_fork(body, e).ok_or_else(malformed)?;
                if f.pid != f.ppid {
                    self.inversions.fork(f.ppid, f.pid, f.time);
                    self.spaces.fork(f.ppid, f.pid);
                    self.cache.clear();
                    self.forked = Some(f.pid);
                }
                self.spaces.thread(f.pid, f.tid);
                // the thread's samples read before it had its process's
                let apart = !self.comms.contains_key(&f.tid)
                    && (self.comms.get(&f.ptid)).is_some_and(|c| Some(c) != self.comms.get(&f.pid));
                self.inversions.spawn(f.ptid, f.tid, f.time, apart);
                if let Some(&c) = self.comms.get(&f.ptid) {
                    self.comms.entry(f.tid).or_insert(c);
                }
                self.last_thread = None;
            }
            types::EXIT => {
                let f = parse_fork(body, e).ok_or_else(malformed)?;
                self.spaces.exit(f.pid, f.tid);
            }
            types::FINISHED_ROUND => {
                self.inversions.round();
                let due = self.parked.round();
                self.replay(due, attrs)?;
                if self.spaces.round() {
                    self.cache.clear();
                }
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

/// The process a record is of, to hold it back while that is not known,
/// and the record's time (`None`: not recorded): a FORK is its parent's
/// (a thread's, its own process's).
fn holder(h: &RecordHeader, body: &[u8], attrs: &Attrs, e: Endian) -> Option<(u32, Option<u64>)> {
    let r = Rd(e);
    match h.type_ {
        types::FORK => {
            let (pid, ppid) = (r.u32(body, 0)?, r.u32(body, 4)?);
            Some((if pid == ppid { pid } else { ppid }, r.u64(body, 16)))
        }
        types::EXIT => Some((r.u32(body, 0)?, r.u64(body, 16))),
        types::MMAP | types::MMAP2 | types::COMM => {
            Some((r.u32(body, 0)?, attrs.trailer_time(body, e)))
        }
        _ => None,
    }
}
