//! Watching for maps made while a scan runs: software dummy perf events
//! opened before the scan (system-wide, one per online CPU, or per thread
//! of the selected processes with inherit) report every mmap, comm, fork
//! and exit meanwhile. A thread drains their rings every few milliseconds
//! while the scan runs (so a long scan does not fill them), up to a cap;
//! what the kernel could not write is counted by the events themselves
//! (PERF_FORMAT_LOST), so no loss goes unreported. The records are
//! returned as the kernel wrote them; [`parse_watched`] splits them (pure).

mod attr;
mod progress;
mod records;

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use attr::watch_attr;
use progress::FailOnPanic;
pub use progress::{Drains, Progress};
pub use records::{fork_children, map_pids, parse_watched, records, Watched, TRAILER};

use super::parse::cpu_list;
use super::scan::Target;
use crate::sys::{perf_event_open, perf_read_lost, perf_set_output, PerfRing};

/// How often the drainer empties the rings during the scan.
const DRAIN_EVERY: Duration = Duration::from_millis(5);

/// Bytes the drainer keeps at most before it stops emptying the rings (a
/// process mapping without pause cannot grow our memory without bound;
/// what no longer fits the rings is then counted as lost).
pub const DRAIN_CAP: usize = 16 << 20;

/// Open watch events, drained by a thread until [`Watch::finish`].
pub struct Watch {
    drainer: std::thread::JoinHandle<Drained>,
    progress: Arc<Progress>,
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
        let mut forked = Vec::new();
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
            fork_children(&bytes[from..], &mut forked);
            progress.forked(&mut forked);
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
