//! Records of a process not known yet, held back until the FORK that makes
//! it. perf writes its per-CPU buffers one after another each round, and a
//! FORK is written on the parent's CPU: a child's samples, COMM, MMAPs and
//! EXIT, written on its own, can all come before it (a fork-heavy recording
//! had 83 of 600 children so, their samples all "in no map" when read in
//! file order). perf report sorts by time; these are read in time order
//! once the FORK has been read (a FORK held, of a parent not known yet,
//! releases its child's in turn), or once two FINISHED_ROUNDs have passed
//! (no record earlier than them can come after that: perf's own rule for
//! flushing), or at the end. Pure.

use foldhash::HashMap;

use crate::perf::RecordHeader;

/// Most bytes of records held at once: past it, what is held is read (in
/// time order) and records are read as they come, so memory stays bounded.
const MAX_BYTES: usize = 16 << 20;

/// One record held back.
#[derive(Debug)]
pub(super) struct Held {
    /// Its time.
    pub(super) time: u64,
    /// Its offset in the input.
    pub(super) at: u64,
    pub(super) header: RecordHeader,
    pub(super) body: Box<[u8]>,
    /// The FINISHED_ROUNDs seen before it.
    round: u64,
}

/// The records held, by pid.
#[derive(Debug, Default)]
pub(super) struct Parked {
    by_pid: HashMap<u32, Vec<Held>>,
    bytes: usize,
    rounds: u64,
}

impl Parked {
    /// Nothing held.
    pub(super) fn is_empty(&self) -> bool {
        self.by_pid.is_empty()
    }

    /// Holds a record of `pid` made at `time`; false (nothing held) past
    /// the bound on bytes held.
    pub(super) fn park(
        &mut self,
        pid: u32,
        (time, at): (u64, u64),
        header: RecordHeader,
        body: &[u8],
    ) -> bool {
        if self.bytes + body.len() > MAX_BYTES {
            return false;
        }
        self.bytes += body.len();
        self.by_pid.entry(pid).or_default().push(Held {
            time,
            at,
            header,
            body: body.into(),
            round: self.rounds,
        });
        true
    }

    /// The records of `pid`, in time order: it is known now.
    pub(super) fn take(&mut self, pid: u32) -> Vec<Held> {
        let mut out = self.by_pid.remove(&pid).unwrap_or_default();
        self.taken(&mut out)
    }

    /// A FINISHED_ROUND: the records held since two rounds before it, in
    /// time order, to read now.
    pub(super) fn round(&mut self) -> Vec<Held> {
        self.rounds += 1;
        let due = |h: &Held| h.round + 2 <= self.rounds;
        let mut out = Vec::new();
        self.by_pid.retain(|_, held| {
            let (now, keep): (Vec<Held>, Vec<Held>) =
                std::mem::take(held).into_iter().partition(due);
            out.extend(now);
            *held = keep;
            !held.is_empty()
        });
        self.taken(&mut out)
    }

    /// Every record still held, in time order (the input has ended, or too
    /// much is held).
    pub(super) fn all(&mut self) -> Vec<Held> {
        let mut out: Vec<Held> = self.by_pid.drain().flat_map(|(_, h)| h).collect();
        self.taken(&mut out)
    }

    /// `out`, uncounted and sorted by time (then offset: the file's order).
    fn taken(&mut self, out: &mut Vec<Held>) -> Vec<Held> {
        self.bytes -= out.iter().map(|h| h.body.len()).sum::<usize>();
        out.sort_by_key(|h| (h.time, h.at));
        std::mem::take(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RecordHeader {
        RecordHeader {
            type_: 9,
            misc: 2,
            size: 16,
        }
    }

    fn times(v: &[Held]) -> Vec<u64> {
        v.iter().map(|h| h.time).collect()
    }

    // Held records come back in time order: a pid's when it is known, the
    // others at the second round after they were held, then all.
    #[test]
    fn held_records_come_back_in_time_order() {
        let mut p = Parked::default();
        for (pid, time) in [(7, 30), (7, 10), (8, 5), (9, 20)] {
            assert!(p.park(pid, (time, 0), header(), &[0; 8]));
        }
        assert_eq!(times(&p.take(7)), vec![10, 30]);
        assert!(p.take(7).is_empty());
        assert!(p.round().is_empty());
        assert!(p.park(8, (1, 0), header(), &[0; 8]));
        assert_eq!(times(&p.round()), vec![5, 20]);
        assert!(!p.is_empty());
        assert_eq!(times(&p.all()), vec![1]);
        assert!(p.is_empty() && p.bytes == 0);
    }

    // Past the bound on bytes, nothing more is held.
    #[test]
    fn held_bytes_are_bounded() {
        let mut p = Parked::default();
        let big = vec![0u8; MAX_BYTES / 2 + 1];
        assert!(p.park(1, (1, 0), header(), &big));
        assert!(!p.park(1, (2, 0), header(), &big));
        assert_eq!(p.all().len(), 1);
    }
}
