//! The watch's records, split from the bytes drained (pure).

use std::collections::HashSet;

use crate::bytes::{Endian, Rd};

/// Bytes of the sample_id trailer the watch asks for: TID then TIME.
pub const TRAILER: usize = 16;

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

/// Appends to `into` the (pid, parent pid) of each new process a FORK
/// record in drained bytes (native byte order) tells of (not the threads),
/// stopping at a malformed record.
pub fn fork_children(bytes: &[u8], into: &mut Vec<(u32, u32)>) {
    let r = Rd(Endian::NATIVE);
    // PERF_RECORD_FORK: pid, ppid, tid, ptid, time
    for (_, _, body) in records(bytes).filter(|&(t, _, _)| t == 7) {
        if let (Some(pid), Some(ppid), Some(tid)) = (r.u32(body, 0), r.u32(body, 4), r.u32(body, 8))
        {
            if pid == tid && pid != ppid {
                into.push((pid, ppid));
            }
        }
    }
}

/// Splits drained bytes (native byte order) into records, stopping at a
/// malformed one; PERF_RECORD_LOST records count into `lost`, and the
/// records a thread repeated at once (twins, see `drop_twins`) into
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
        // The watch asks for no build ids, so its MMAP2 bodies are in
        // inode form; the kernel may still have left the flag of another
        // session's event that asked for them (see `watch_attr`).
        let misc = match t {
            10 => misc & !crate::perf::consts::misc::MMAP_BUILD_ID,
            _ => misc,
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

    // FORK records give new processes (pid == tid) with their parent, not
    // new threads nor other records.
    #[test]
    fn fork_children_are_new_processes() {
        let fork = |pid: u32, ppid: u32, tid: u32| {
            let mut r = record(7, pid, 32);
            r[12..16].copy_from_slice(&ppid.to_ne_bytes());
            r[16..20].copy_from_slice(&tid.to_ne_bytes());
            r
        };
        let mut bytes = fork(20, 10, 20);
        bytes.extend(fork(10, 10, 21)); // a thread of 10
        bytes.extend(record(10, 30, 40)); // an MMAP2
        bytes.extend(fork(31, 20, 31));
        let mut got = Vec::new();
        fork_children(&bytes, &mut got);
        assert_eq!(got, [(20, 10), (31, 20)]);
    }
}
