//! What `dump --sort` holds until the input ends: each record's own bytes
//! once, in one arena, and a 16-byte index entry (the time it sorts by and
//! where it is), decoded into its line again only when printed. A decoded
//! line costs about twice its record (a struct, a path of its own), and a
//! hostile input of compressed map records (~180 MiB) made that 400 MB. A
//! record the same, byte for byte, as the latest one stored whose bytes
//! hash to its slot of 4,096 is not stored again (its entry points at that
//! one): repeats, what lets zstd shrink a bomb ~1000 times, cost their 16
//! bytes alone.

use super::line::Line;
use crate::bytes::Endian;
use crate::perf::RecordHeader;

/// The entry's record is big-endian.
const BIG: u64 = 1 << 63;
/// The record's trailer had a time: the entry's sort time is it.
const TIMED: u64 = 1 << 62;
/// A line that is no record (a build-id table entry): the rest of the
/// entry indexes [`Held::lines`].
const LINE: u64 = 1 << 61;
/// Bytes of the arena's own header before each record's body: type (4),
/// misc (2), size (2), body length (4), native order.
const HEAD: usize = 12;
/// Slots of the table of recent records (by hash, the latest of each).
const RECENT: usize = 4096;

/// Held records and lines, in the order they came.
#[derive(Default)]
pub(super) struct Held {
    /// Each record: [`HEAD`] bytes, then its body as read.
    arena: Vec<u8>,
    /// (sort time, arena offset or [`Held::lines`] index | flags).
    index: Vec<(u64, u64)>,
    /// Lines held as lines (build-id entries: no record to keep).
    lines: Vec<Line>,
    /// Arena offsets of recent records, in the slot their bytes hash to
    /// (`u64::MAX`: none); empty until the first record.
    recent: Vec<u64>,
    hasher: foldhash::fast::FixedState,
}

impl Held {
    /// Holds a record whose line sorts by `key` and whose trailer gave
    /// `time`.
    pub(super) fn record(
        &mut self,
        h: &RecordHeader,
        body: &[u8],
        e: Endian,
        time: Option<u64>,
        key: u64,
    ) {
        let mut at = 0;
        if e == Endian::Big {
            at |= BIG;
        }
        if time.is_some() {
            at |= TIMED;
        }
        let mut head = [0u8; HEAD];
        head[0..4].copy_from_slice(&h.type_.to_ne_bytes());
        head[4..6].copy_from_slice(&h.misc.to_ne_bytes());
        head[6..8].copy_from_slice(&h.size.to_ne_bytes());
        head[8..12].copy_from_slice(&(body.len() as u32).to_ne_bytes());
        let offset = self.stored(&head, body);
        self.index.push((key, at | offset));
    }

    /// The arena offset of a record with this head and body: one of the
    /// recent records if it is the same bytes, else a new copy.
    fn stored(&mut self, head: &[u8; HEAD], body: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        if self.recent.is_empty() {
            self.recent = vec![u64::MAX; RECENT];
        }
        let slot = (self.hasher.hash_one((head, body)) as usize) % RECENT;
        let seen = self.recent[slot];
        if seen != u64::MAX {
            let from = seen as usize;
            let end = from + HEAD + body.len();
            let same = self.arena.get(from..from + HEAD) == Some(&head[..])
                && self.arena.get(from + HEAD..end) == Some(body);
            if same {
                return seen;
            }
        }
        let offset = self.arena.len() as u64;
        self.arena.extend_from_slice(head);
        self.arena.extend_from_slice(body);
        self.recent[slot] = offset;
        offset
    }

    /// Holds a line as it is.
    pub(super) fn line(&mut self, l: Line) {
        self.index.push((l.time(), self.lines.len() as u64 | LINE));
        self.lines.push(l);
    }

    /// The held lines by time, those of one time in the order they came.
    pub(super) fn sorted(mut self) -> impl Iterator<Item = Line> {
        // stable: one time keeps file order
        self.index.sort_by_key(|&(key, _)| key);
        let index = std::mem::take(&mut self.index);
        index
            .into_iter()
            .filter_map(move |(key, at)| self.decode(key, at))
    }

    /// The line of one entry (None only if the arena were damaged: every
    /// record held decoded once already).
    fn decode(&self, key: u64, at: u64) -> Option<Line> {
        if at & LINE != 0 {
            return self.lines.get((at & !LINE) as usize).cloned();
        }
        let e = match at & BIG {
            0 => Endian::Little,
            _ => Endian::Big,
        };
        let time = (at & TIMED != 0).then_some(key);
        let from = usize::try_from(at & !(BIG | TIMED)).ok()?;
        let head = self.arena.get(from..from.checked_add(HEAD)?)?;
        let h = RecordHeader {
            type_: u32::from_ne_bytes(head[0..4].try_into().ok()?),
            misc: u16::from_ne_bytes(head[4..6].try_into().ok()?),
            size: u16::from_ne_bytes(head[6..8].try_into().ok()?),
        };
        let len = usize::try_from(u32::from_ne_bytes(head[8..12].try_into().ok()?)).ok()?;
        let body = self.arena.get(from + HEAD..from + HEAD + len)?;
        Line::of_record_timed(&h, body, e, time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;
    use crate::model::BuildId;
    use crate::perf::consts::types;

    /// A COMM record of `pid` in byte order `e`.
    fn comm(e: Endian, pid: u32) -> (RecordHeader, Vec<u8>) {
        let mut body = Vec::new();
        body.put_u32(e, pid);
        body.put_u32(e, pid);
        body.extend_from_slice(b"abc\0\0\0\0\0");
        let h = RecordHeader {
            type_: types::COMM,
            misc: 0,
            size: 8 + body.len() as u16,
        };
        (h, body)
    }

    // Held lines come back by time, those of one time in the order they
    // came, each decoded from its own bytes (either byte order, with or
    // without a time); a record repeated byte for byte is stored once.
    #[test]
    fn held_records_sort_stably_and_repeats_are_stored_once() {
        use Endian::{Big, Little};
        let mut held = Held::default();
        let mut want = Vec::new();
        let recs = [
            (1, Some(5), Little),
            (2, None, Big),
            (1, Some(5), Little),
            (3, Some(2), Little),
            (1, Some(0), Little),
            (1, Some(5), Little),
        ];
        for (pid, time, e) in recs {
            let (h, body) = comm(e, pid);
            let l = Line::of_record_timed(&h, &body, e, time).unwrap();
            held.record(&h, &body, e, time, l.time());
            want.push(l);
        }
        let id = Line::BuildId {
            pid: -1,
            build_id: BuildId::new(&[1, 2, 3]).unwrap(),
            path: b"/x".to_vec(),
            cpumode: 2,
        };
        held.line(id.clone());
        want.push(id);
        // pid 1 (one copy for its four), 2 (big-endian), 3
        assert_eq!(held.arena.len(), 3 * (HEAD + 16));
        want.sort_by_key(Line::time);
        assert_eq!(held.sorted().collect::<Vec<_>>(), want);
    }
}
