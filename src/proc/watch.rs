//! Watching for maps made while a scan runs: software dummy perf events
//! opened before the scan (system-wide, one per online CPU, or per thread
//! of the selected processes with inherit) report every mmap, comm, fork
//! and exit meanwhile; drained after the scan. The records are returned as
//! the kernel wrote them; [`parse_watched`] splits them (pure).

use std::path::Path;

use super::parse::cpu_list;
use super::scan::Target;
use crate::bytes::{Endian, PutExt, Rd};
use crate::sys::{perf_event_open, perf_set_output, PerfRing};

/// perf_event_attr bits used here (kernel ABI).
mod bits {
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const INHERIT: u64 = 1 << 1;
    pub const TASK: u64 = 1 << 13;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
    pub const BUILD_ID: u64 = 1 << 34;
    pub const MMAP_DATA: u64 = 1 << 10;
}

/// Bytes of the sample_id trailer the watch asks for: TID then TIME.
pub const TRAILER: usize = 16;

/// The attr of a watch event: software dummy, mmap2/comm/task with build
/// ids, trailer TID|TIME, times on CLOCK_MONOTONIC.
pub fn watch_attr(inherit: bool, data: bool) -> Vec<u8> {
    let e = Endian::NATIVE;
    let mut a = Vec::with_capacity(128);
    a.put_u32(e, 1); // PERF_TYPE_SOFTWARE
    a.put_u32(e, 128);
    a.put_u64(e, 9); // PERF_COUNT_SW_DUMMY
    a.put_u64(e, 1); // sample_period
    a.put_u64(e, 2 | 4); // PERF_SAMPLE_TID | PERF_SAMPLE_TIME
    a.put_u64(e, 0); // read_format
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

/// Open watch events; drain them after the scan.
pub struct Watch {
    rings: Vec<PerfRing>,
    /// Events whose records go to another event's ring (kept open).
    _extra: Vec<std::os::fd::OwnedFd>,
}

impl Watch {
    /// Opens the events for `target` (`data`: data maps too, as `-d`). The
    /// error says why watching is not possible here.
    /// `pages`: data pages of each ring (a power of two; default 128 per
    /// CPU system-wide, 32 per CPU for `-p`).
    pub fn start(
        target: &Target,
        proc_root: &Path,
        data: bool,
        pages: Option<usize>,
    ) -> Result<Watch, String> {
        let mut rings: Vec<PerfRing> = Vec::new();
        let mut extra = Vec::new();
        let why =
            |what: &str, e: std::io::Error| format!("cannot watch for new maps ({what}: {e})");
        match target {
            Target::All | Target::Uid(_) => {
                let online = std::fs::read("/sys/devices/system/cpu/online").unwrap_or_default();
                let cpus = cpu_list(&online)
                    .filter(|c| !c.is_empty())
                    .ok_or("no online CPU list")?;
                let attr = watch_attr(false, data);
                for cpu in cpus {
                    let fd = perf_event_open(&attr, -1, cpu as i32)
                        .map_err(|e| why("system-wide perf event", e))?;
                    rings.push(
                        PerfRing::map(fd, pages.unwrap_or(128))
                            .map_err(|e| why("ring buffer", e))?,
                    );
                }
            }
            Target::Pids(pids) => {
                // Inherited per-task events can be mapped only per CPU: one
                // event per (thread, CPU), each CPU's into one ring.
                let online = std::fs::read("/sys/devices/system/cpu/online").unwrap_or_default();
                let cpus = cpu_list(&online)
                    .filter(|c| !c.is_empty())
                    .ok_or("no online CPU list")?;
                let attr = watch_attr(true, data);
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
                            let fd = match perf_event_open(&attr, tid, cpu as i32) {
                                Ok(fd) => fd,
                                // the thread exited meanwhile
                                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => break,
                                Err(e) => return Err(why("perf event of a thread", e)),
                            };
                            match ring_of[i] {
                                Some(r) => {
                                    use std::os::fd::AsFd;
                                    perf_set_output(fd.as_fd(), rings[r].fd())
                                        .map_err(|e| why("sharing a ring", e))?;
                                    extra.push(fd);
                                }
                                None => {
                                    ring_of[i] = Some(rings.len());
                                    rings.push(
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
        Ok(Watch {
            rings,
            _extra: extra,
        })
    }

    /// Every record written since the start, ring by ring.
    pub fn drain(mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for r in &mut self.rings {
            r.drain(&mut out);
        }
        out
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

/// Splits drained bytes (native byte order) into records, stopping at a
/// malformed one; PERF_RECORD_LOST records count into `lost`.
pub fn parse_watched(bytes: &[u8], lost: &mut u64) -> Vec<Watched> {
    let r = Rd(Endian::NATIVE);
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let (Some(t), Some(misc), Some(size)) =
            (r.u32(bytes, at), r.u16(bytes, at + 4), r.u16(bytes, at + 6))
        else {
            break;
        };
        let size = usize::from(size);
        if size < 8 || at + size > bytes.len() {
            break;
        }
        let body = &bytes[at + 8..at + size];
        at += size;
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
    out
}
