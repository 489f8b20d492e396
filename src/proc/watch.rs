//! Watching for maps made while a scan runs: software dummy perf events
//! opened before the scan (system-wide, one per online CPU, or per thread
//! of the selected processes with inherit) report every mmap, comm, fork
//! and exit meanwhile. A thread drains their rings every few milliseconds
//! while the scan runs (so a long scan does not fill them), up to a cap;
//! what the kernel could not write is counted by the events themselves
//! (PERF_FORMAT_LOST), so no loss goes unreported. The records are
//! returned as the kernel wrote them; [`parse_watched`] splits them (pure).

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::parse::cpu_list;
use super::scan::Target;
use crate::bytes::{Endian, PutExt, Rd};
use crate::sys::{perf_event_open, perf_read_lost, perf_set_output, PerfRing};

/// perf_event_attr flag bits used here (kernel ABI; checked against
/// linux-perf-event-reader's by a test: `MMAP_DATA` was once bit 10, `freq`,
/// so `-d` watched no data maps).
mod bits {
    pub const INHERIT: u64 = 1 << 1;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const TASK: u64 = 1 << 13;
    pub const MMAP_DATA: u64 = 1 << 17;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
    pub const BUILD_ID: u64 = 1 << 34;
}

/// Bytes of the sample_id trailer the watch asks for: TID then TIME.
pub const TRAILER: usize = 16;

/// `read_format` PERF_FORMAT_LOST: reading the event gives the records
/// the kernel could not write (Linux 6.0+).
const FORMAT_LOST: u64 = 1 << 4;

/// How often the drainer empties the rings during the scan.
const DRAIN_EVERY: Duration = Duration::from_millis(5);

/// Bytes the drainer keeps at most before it stops emptying the rings (a
/// process mapping without pause cannot grow our memory without bound;
/// what no longer fits the rings is then counted as lost).
pub const DRAIN_CAP: usize = 16 << 20;

/// The attr of a watch event: software dummy, mmap2/comm/task with build
/// ids, trailer TID|TIME, times on CLOCK_MONOTONIC; `lost`: readable lost
/// count.
pub fn watch_attr(inherit: bool, data: bool, lost: bool) -> Vec<u8> {
    let e = Endian::NATIVE;
    let mut a = Vec::with_capacity(128);
    a.put_u32(e, 1); // PERF_TYPE_SOFTWARE
    a.put_u32(e, 128);
    a.put_u64(e, 9); // PERF_COUNT_SW_DUMMY
    a.put_u64(e, 1); // sample_period
    a.put_u64(e, 2 | 4); // PERF_SAMPLE_TID | PERF_SAMPLE_TIME
    a.put_u64(e, if lost { FORMAT_LOST } else { 0 }); // read_format
    let mut flags = bits::MMAP
        | bits::COMM
        | bits::TASK
        | bits::SAMPLE_ID_ALL
        | bits::MMAP2
        | bits::COMM_EXEC
        | bits::USE_CLOCKID
        | bits::BUILD_ID;
    if inherit {
        flags |= bits::INHERIT;
    }
    if data {
        flags |= bits::MMAP_DATA;
    }
    a.put_u64(e, flags);
    a.resize(92, 0);
    a.put_u32(e, libc::CLOCK_MONOTONIC as u32); // clockid
    a.resize(128, 0);
    a
}

/// Open watch events, drained by a thread until [`Watch::finish`].
pub struct Watch {
    drainer: std::thread::JoinHandle<Drained>,
    progress: Arc<Progress>,
}

/// How far the drainer has got, so a writer keeps the map ranges of a
/// scanned process only if the watch may hold a record of one of its pid.
/// The kernel writes a map's record into a ring before the new VMA can be
/// read, so a drain begun after a process was read has taken every record
/// of the maps that read saw. The drainer waits on it between drains, for
/// its period, a nudge (the writer has records waiting for a drain) or the
/// end.
#[derive(Debug, Default)]
pub struct Progress(Mutex<Drains>, Condvar);

/// The drains so far (see [`Progress`]).
#[derive(Debug, Default)]
pub struct Drains {
    begun: u64,
    done: u64,
    /// Pids of the MMAP2 records the completed drains took.
    mapped: HashSet<u32>,
    /// The drainer stopped taking records (its cap): any pid may have
    /// maps in the rings.
    all: bool,
    /// The drainer failed (panicked): nothing it took is used, so nothing
    /// waits for it.
    failed: bool,
    /// A drain is asked for now.
    nudged: bool,
    /// The watch is ending: the last drain comes.
    stop: bool,
}

impl Progress {
    /// The drains, locked: the lock orders a mark against the drains.
    pub fn lock(&self) -> MutexGuard<'_, Drains> {
        // a drainer that panicked holding it left whole counts behind
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a drain: its number.
    pub fn begin(&self) -> u64 {
        let mut d = self.lock();
        d.begun += 1;
        d.begun
    }

    /// Ends drain `n`, which took MMAP2 records of `mapped` (`all`: it
    /// took none, the cap reached).
    pub fn complete(&self, n: u64, mapped: &mut HashSet<u32>, all: bool) {
        let mut d = self.lock();
        d.mapped.extend(mapped.drain());
        d.all |= all;
        d.done = d.done.max(n);
    }

    /// Marks the drainer failed (see [`Drains::settles`]).
    fn fail(&self) {
        self.lock().failed = true;
    }

    /// Asks for a drain now rather than at the end of the period.
    pub fn nudge(&self) {
        self.lock().nudged = true;
        self.1.notify_one();
    }

    /// Tells the drainer to make its last drain.
    fn stop(&self) {
        self.lock().stop = true;
        self.1.notify_one();
    }

    /// The drainer's wait: until `period` has passed, a nudge or the stop
    /// (then true).
    pub(crate) fn wait(&self, period: Duration) -> bool {
        let mut d = self.lock();
        if !d.nudged && !d.stop {
            d = match self.1.wait_timeout(d, period) {
                Ok((d, _)) => d,
                Err(e) => e.into_inner().0,
            };
        }
        d.nudged = false;
        d.stop
    }
}

/// Marks a [`Progress`] failed if its drainer unwinds past this.
struct FailOnPanic<'a>(&'a Progress);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail();
        }
    }
}

impl Drains {
    /// A mark for what was read before now: [`Drains::settles`] it once a
    /// drain begun after it has completed.
    pub fn mark(&self) -> u64 {
        self.begun
    }

    /// Whether the drains have taken every record written before `mark`.
    pub fn settles(&self, mark: u64) -> bool {
        self.failed || self.done > mark
    }

    /// Whether the drains took a map record of `pid` (or may have left
    /// one in the rings).
    pub fn mapped(&self, pid: u32) -> bool {
        !self.failed && (self.all || self.mapped.contains(&pid))
    }
}

/// What a watch saw: every record drained (each ring's in its order, the
/// rings' interleaved as drained; [`parse_watched`] sorts them by time),
/// and what was lost.
#[derive(Debug, Default)]
pub struct Drained {
    pub bytes: Vec<u8>,
    /// Records the kernel could not write, as the events count them (None
    /// on kernels before 6.0: then only PERF_RECORD_LOST records tell).
    pub lost: Option<u64>,
    /// A ring was found with little room left at some drain (or the cap
    /// stopped the draining, or the drainer failed): on a kernel that does
    /// not count losses, records may have been dropped with no
    /// PERF_RECORD_LOST written.
    pub was_full: bool,
    /// The events' clock just before the last drain read the rings: a map
    /// made before then is among `bytes` (or counted lost).
    pub ended: u64,
    /// The drainer failed (panicked): `bytes` is empty, the rest unknown.
    pub failed: bool,
}

/// The events while they are open: rings, events writing into another's
/// ring, and whether their lost counts can be read.
struct Events {
    rings: Vec<PerfRing>,
    extra: Vec<OwnedFd>,
    counts_lost: bool,
}

impl Events {
    /// Opens one event of `attr` for `pid` on `cpu`; on a kernel that
    /// rejects the lost count, from then on without it.
    fn open(&mut self, inherit: bool, data: bool, pid: i32, cpu: i32) -> std::io::Result<OwnedFd> {
        let r = perf_event_open(&watch_attr(inherit, data, self.counts_lost), pid, cpu);
        match r {
            Err(e) if self.counts_lost && e.raw_os_error() == Some(libc::EINVAL) => {
                self.counts_lost = false;
                perf_event_open(&watch_attr(inherit, data, false), pid, cpu)
            }
            r => r,
        }
    }

    /// Empties every ring into `out`; true when one was nearly full (less
    /// than 8 KiB, or half the ring, left: a big record may not have fit).
    fn drain(&mut self, out: &mut Vec<u8>) -> bool {
        let mut full = false;
        for r in &mut self.rings {
            let n = r.drain(out);
            let size = r.data_size();
            full |= n > size - 8192.min(size / 2);
        }
        full
    }

    /// The sum of the events' lost counts (None when they cannot be read).
    fn lost(&self) -> Option<u64> {
        if !self.counts_lost {
            return None;
        }
        let fds = self
            .rings
            .iter()
            .map(|r| r.fd())
            .chain(self.extra.iter().map(|f| f.as_fd()));
        let mut sum = 0u64;
        for fd in fds {
            sum = sum.saturating_add(perf_read_lost(fd).ok()?);
        }
        Some(sum)
    }

    /// The drainer: empties the rings every [`DRAIN_EVERY`] (while under
    /// [`DRAIN_CAP`]) until told to stop, then reads the lost counts and
    /// takes what is left.
    fn run(mut self, progress: &Progress) -> Drained {
        let mut bytes = Vec::new();
        let mut mapped = HashSet::new();
        // sticky: a ring found full at any drain may have dropped records
        let mut was_full = false;
        // A test hook: drain only this often, so a test can fill a ring.
        let every = std::env::var("MMAP2_SYNTH_TEST_DRAIN_EVERY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(DRAIN_EVERY, Duration::from_millis);
        // Empties the rings into `bytes` (`capped`: takes nothing) as one
        // drain of `progress`, noting the pids it took maps of.
        let mut drain = |ev: &mut Events, bytes: &mut Vec<u8>, capped: bool| {
            let n = progress.begin();
            let from = bytes.len();
            let full = capped || ev.drain(bytes);
            map_pids(&bytes[from..], &mut mapped);
            progress.complete(n, &mut mapped, capped);
            full
        };
        while !progress.wait(every) {
            let capped = bytes.len() >= DRAIN_CAP;
            was_full |= drain(&mut self, &mut bytes, capped);
        }
        let lost = self.lost();
        let ended = super::clock::event_monotonic_ns().unwrap_or(0);
        was_full |= drain(&mut self, &mut bytes, false);
        Drained {
            bytes,
            lost,
            was_full,
            ended,
            failed: false,
        }
    }
}

impl Watch {
    /// Opens the events for `target` (`data`: data maps too, as `-d`) and
    /// starts draining them. The error says why watching is not possible
    /// here. `pages`: data pages of each ring (a power of two; default 128
    /// per CPU system-wide, 32 per CPU for `-p`).
    pub fn start(
        target: &Target,
        proc_root: &Path,
        data: bool,
        pages: Option<usize>,
    ) -> Result<Watch, String> {
        let mut ev = Events {
            rings: Vec::new(),
            extra: Vec::new(),
            counts_lost: true,
        };
        let why =
            |what: &str, e: std::io::Error| format!("cannot watch for new maps ({what}: {e})");
        let online = std::fs::read("/sys/devices/system/cpu/online").unwrap_or_default();
        let cpus = cpu_list(&online)
            .filter(|c| !c.is_empty())
            .ok_or("no online CPU list")?;
        match target {
            Target::All | Target::Uid(_) => {
                for cpu in cpus {
                    let fd = ev
                        .open(false, data, -1, cpu as i32)
                        .map_err(|e| why("system-wide perf event", e))?;
                    ev.rings.push(
                        PerfRing::map(fd, pages.unwrap_or(128))
                            .map_err(|e| why("ring buffer", e))?,
                    );
                }
            }
            Target::Pids(pids) => {
                // Inherited per-task events can be mapped only per CPU: one
                // event per (thread, CPU), each CPU's into one ring.
                let mut ring_of: Vec<Option<usize>> = vec![None; cpus.len()];
                for &pid in pids {
                    let tasks = std::fs::read_dir(proc_root.join(pid.to_string()).join("task"));
                    let Ok(tasks) = tasks else { continue };
                    for t in tasks.flatten() {
                        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok())
                        else {
                            continue;
                        };
                        for (i, &cpu) in cpus.iter().enumerate() {
                            let fd = match ev.open(true, data, tid, cpu as i32) {
                                Ok(fd) => fd,
                                // the thread exited meanwhile
                                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => break,
                                Err(e) => return Err(why("perf event of a thread", e)),
                            };
                            match ring_of[i] {
                                Some(r) => {
                                    perf_set_output(fd.as_fd(), ev.rings[r].fd())
                                        .map_err(|e| why("sharing a ring", e))?;
                                    ev.extra.push(fd);
                                }
                                None => {
                                    ring_of[i] = Some(ev.rings.len());
                                    ev.rings.push(
                                        PerfRing::map(fd, pages.unwrap_or(32))
                                            .map_err(|e| why("ring buffer", e))?,
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        let progress = Arc::new(Progress::default());
        let shared = Arc::clone(&progress);
        let drainer = std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || {
                let _failed = FailOnPanic(&shared);
                // a test makes the drainer fail here
                crate::testhook::fail("MMAP2_SYNTH_TEST_DRAINER_PANIC");
                ev.run(&shared)
            })
            .map_err(|e| why("drainer thread", e))?;
        Ok(Watch { drainer, progress })
    }

    /// The drainer's progress, shared with the writer's filter (see
    /// [`Progress`]).
    pub fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    /// Stops watching: every record written since the start, and what was
    /// lost.
    pub fn finish(self) -> Drained {
        self.progress.stop();
        // a drainer that panicked read nothing more
        self.drainer.join().unwrap_or_else(|_| Drained {
            was_full: true,
            ended: super::clock::event_monotonic_ns().unwrap_or(0),
            failed: true,
            ..Drained::default()
        })
    }
}

/// A record the watch saw: its header fields, its body without the
/// trailer, and the trailer's pid, tid and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub record_type: u32,
    pub misc: u16,
    pub body: Vec<u8>,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
}

/// The records of drained bytes (native byte order; or a watched
/// snapshot's own records, which are native too) as (type, misc, body
/// after the header), up to the first malformed one.
pub fn records(bytes: &[u8]) -> impl Iterator<Item = (u32, u16, &[u8])> {
    let r = Rd(Endian::NATIVE);
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let (t, misc, size) = (
            r.u32(bytes, at)?,
            r.u16(bytes, at + 4)?,
            r.u16(bytes, at + 6)?,
        );
        let size = usize::from(size);
        if size < 8 || at + size > bytes.len() {
            return None;
        }
        let body = &bytes[at + 8..at + size];
        at += size;
        Some((t, misc, body))
    })
}

/// Adds to `into` the pid of each MMAP2 record in drained bytes (native
/// byte order), stopping at a malformed record.
pub fn map_pids(bytes: &[u8], into: &mut HashSet<u32>) {
    let r = Rd(Endian::NATIVE);
    // PERF_RECORD_MMAP2: the pid is the body's first field
    let pids = records(bytes).filter(|&(t, _, _)| t == 10);
    into.extend(pids.filter_map(|(_, _, body)| r.u32(body, 0)));
}

/// Splits drained bytes (native byte order) into records, stopping at a
/// malformed one; PERF_RECORD_LOST records count into `lost`, and the
/// records a thread repeated at once (twins, see [`drop_twins`]) into
/// `repeated`.
pub fn parse_watched(bytes: &[u8], lost: &mut u64, repeated: &mut usize) -> Vec<Watched> {
    let r = Rd(Endian::NATIVE);
    let mut out = Vec::new();
    for (t, misc, body) in records(bytes) {
        if t == 2 {
            *lost += r.u64(body, 8).unwrap_or(0);
            continue;
        }
        let Some(n) = body.len().checked_sub(TRAILER) else {
            continue;
        };
        let (Some(pid), Some(tid), Some(time)) =
            (r.u32(body, n), r.u32(body, n + 4), r.u64(body, n + 8))
        else {
            continue;
        };
        out.push(Watched {
            record_type: t,
            misc,
            body: body[..n].to_vec(),
            pid,
            tid,
            time,
        });
    }
    out.sort_by_key(|w| w.time);
    let n = out.len();
    let out = drop_twins(out);
    *repeated += n - out.len();
    out
}

/// How far apart two of our events' copies of one kernel record can be.
const TWIN_NS: u64 = 100_000;

/// Drops the second of two records the kernel wrote through two of our
/// events within [`TWIN_NS`] (time-ordered `recs`): a thread created while
/// the per-thread events of `-p` were being opened inherits its creator's
/// event and gets its own, so each of its records comes twice, one copy
/// right after the other. Twins are a thread's consecutive records with
/// the same type, misc, pid and body (FORK and EXIT but for the time in
/// their body, each event's own). A record the thread truly made again,
/// with nothing of it between, changes nothing when dropped; one with
/// another between (a map, another, the first again) is kept.
fn drop_twins(recs: Vec<Watched>) -> Vec<Watched> {
    use std::collections::HashMap;
    fn key(w: &Watched) -> &[u8] {
        match w.record_type {
            // PERF_RECORD_EXIT, PERF_RECORD_FORK: pid, ppid, tid, ptid;
            // then the event's time
            4 | 7 => &w.body[..w.body.len().min(16)],
            _ => &w.body,
        }
    }
    // each thread's last record kept: its index in `out`
    let mut last: HashMap<u32, usize> = HashMap::new();
    let mut out: Vec<Watched> = Vec::with_capacity(recs.len());
    for w in recs {
        if let Some(&i) = last.get(&w.tid) {
            let o = &out[i];
            let same = (o.record_type, o.misc, o.pid) == (w.record_type, w.misc, w.pid)
                && key(o) == key(&w);
            if same && w.time - o.time <= TWIN_NS {
                continue;
            }
        }
        last.insert(w.tid, out.len());
        out.push(w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;

    // A record the kernel wrote through two events (a thread created
    // while the events were opened) is kept once: MMAP2 twins whole, FORK
    // twins but for their body's time; the same record again later, or
    // another thread's, or after another of the thread's (a change and a
    // change back), is kept; COMMs are compared whole (names that share
    // their first bytes are not twins).
    #[test]
    fn twin_records_are_kept_once() {
        let w = |t: u32, tid: u32, body: &[u8], time: u64| Watched {
            record_type: t,
            misc: 0,
            body: body.to_vec(),
            pid: 7,
            tid,
            time,
        };
        let fork = |time: u64| {
            let mut b = Vec::new();
            for v in [7u32, 1, 8, 1] {
                b.put_u32(Endian::NATIVE, v);
            }
            b.put_u64(Endian::NATIVE, time);
            b
        };
        let recs = vec![
            w(10, 7, b"map", 1_000),
            w(10, 7, b"map", 1_700),
            w(10, 8, b"map", 1_800),
            w(7, 8, &fork(2_000), 2_000),
            w(7, 8, &fork(2_600), 2_600),
            w(3, 9, b"\x07\0\0\0\x09\0\0\0process-aaa\0", 3_000),
            w(3, 9, b"\x07\0\0\0\x09\0\0\0process-bbb\0", 3_010),
            w(10, 7, b"map", 500_000),
            w(10, 7, b"other", 500_010),
            w(10, 7, b"map", 500_020),
        ];
        let kept: Vec<u64> = drop_twins(recs).iter().map(|w| w.time).collect();
        assert_eq!(
            kept,
            [1_000, 1_800, 2_000, 3_000, 3_010, 500_000, 500_010, 500_020]
        );
    }

    // The drainer's wait ends at once on a nudge (a drain, not the end)
    // and on the stop, and after its period otherwise.
    #[test]
    fn the_drainers_wait_ends_on_a_nudge_or_the_stop() {
        let p = Progress::default();
        let t = std::time::Instant::now();
        assert!(!p.wait(Duration::from_millis(20)), "the period");
        assert!(t.elapsed() >= Duration::from_millis(20));
        p.nudge();
        let t = std::time::Instant::now();
        assert!(!p.wait(Duration::from_secs(30)), "a nudge: drain");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        p.stop();
        assert!(p.wait(Duration::from_secs(30)), "the stop");
    }

    // A failed drainer settles every mark and maps no pid: the writer's
    // waiting ranges are dropped, not held to the end of the scan.
    #[test]
    fn a_failed_drainer_settles_everything() {
        let p = Progress::default();
        let n = p.begin();
        p.complete(n, &mut HashSet::from([7]), false);
        let mark = p.lock().mark();
        assert!(!p.lock().settles(mark) && p.lock().mapped(7));
        p.fail();
        assert!(p.lock().settles(mark + 5) && !p.lock().mapped(7));
    }

    /// A drained record of `record_type` whose body starts with `pid`.
    fn record(record_type: u32, pid: u32, body: usize) -> Vec<u8> {
        let e = Endian::NATIVE;
        let mut r = Vec::new();
        r.put_u32(e, record_type);
        r.put_u16(e, 0);
        r.put_u16(e, (8 + body) as u16);
        r.put_u32(e, pid);
        r.resize(8 + body, 0);
        r
    }

    // Only MMAP2 records give their pid, and a record running past the
    // bytes (or claiming less than a header) ends the walk.
    #[test]
    fn map_pids_takes_mmap2_pids() {
        let mut bytes = record(10, 7, 88);
        bytes.extend(record(3, 8, 24)); // COMM
        bytes.extend(record(10, 9, 40));
        let mut pids = HashSet::new();
        map_pids(&bytes, &mut pids);
        assert_eq!(pids, HashSet::from([7, 9]));
        let mut cut = record(10, 11, 40);
        cut.extend(&record(10, 12, 40)[..20]);
        let mut pids = HashSet::new();
        map_pids(&cut, &mut pids);
        assert_eq!(pids, HashSet::from([11]), "stops at the cut record");
        let mut pids = HashSet::new();
        let mut tiny = record(10, 14, 0);
        tiny[6..8].copy_from_slice(&4u16.to_ne_bytes());
        map_pids(&tiny, &mut pids);
        assert!(pids.is_empty(), "a size below a header stops the walk");
    }

    // The attr's flag bits are the kernel's, as linux-perf-event-reader
    // names them.
    #[test]
    fn attr_bits_match_the_reference_crate() {
        use linux_perf_event_reader::constants as k;
        let pairs = [
            (bits::INHERIT, k::ATTR_FLAG_BIT_INHERIT),
            (bits::MMAP, k::ATTR_FLAG_BIT_MMAP),
            (bits::COMM, k::ATTR_FLAG_BIT_COMM),
            (bits::TASK, k::ATTR_FLAG_BIT_TASK),
            (bits::MMAP_DATA, k::ATTR_FLAG_BIT_MMAP_DATA),
            (bits::SAMPLE_ID_ALL, k::ATTR_FLAG_BIT_SAMPLE_ID_ALL),
            (bits::MMAP2, k::ATTR_FLAG_BIT_MMAP2),
            (bits::COMM_EXEC, k::ATTR_FLAG_BIT_COMM_EXEC),
            (bits::USE_CLOCKID, k::ATTR_FLAG_BIT_USE_CLOCKID),
            (bits::BUILD_ID, k::ATTR_FLAG_BIT_BUILD_ID),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs);
        }
    }

    // A mark is settled only by a drain begun after it, once completed.
    #[test]
    fn drains_settle_marks_after_their_start() {
        let p = Progress::default();
        let first = p.begin();
        let mark = p.lock().mark();
        p.complete(first, &mut HashSet::from([5]), false);
        assert!(!p.lock().settles(mark), "begun before the mark");
        let second = p.begin();
        assert!(!p.lock().settles(mark), "begun, not completed");
        p.complete(second, &mut HashSet::new(), false);
        let d = p.lock();
        assert!(d.settles(mark));
        assert!(d.mapped(5) && !d.mapped(6));
    }
}
