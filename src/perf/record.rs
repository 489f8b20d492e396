//! Record framing: the 8-byte header, splitting a buffer into records, the
//! size patch of an encoded record, and the sample_id trailer.

use super::consts::sample_type as st;
use super::error::RecordTooLarge;
use crate::bytes::{Endian, PutExt, Rd};

/// A record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Record type (`PERF_RECORD_*`), unknown ones included.
    pub type_: u32,
    /// cpumode and per-type flag bits.
    pub misc: u16,
    /// Total size, header included.
    pub size: u16,
}

impl RecordHeader {
    /// Parses the first 8 bytes of `b`.
    pub fn parse(b: &[u8], e: Endian) -> Option<RecordHeader> {
        let r = Rd(e);
        Some(RecordHeader {
            type_: r.u32(b, 0)?,
            misc: r.u16(b, 4)?,
            size: r.u16(b, 6)?,
        })
    }

    /// Appends the 8 bytes.
    pub fn put(&self, out: &mut Vec<u8>, e: Endian) {
        out.put_u32(e, self.type_);
        out.put_u16(e, self.misc);
        out.put_u16(e, self.size);
    }
}

/// Splits a buffer of whole records into (header, body) pairs; stops at the
/// first header that is truncated, has a size below 8 or runs past the end.
pub fn split_records(b: &[u8], e: Endian) -> impl Iterator<Item = (RecordHeader, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let h = RecordHeader::parse(b.get(at..)?, e)?;
        let size = usize::from(h.size);
        let rec = b.get(at..at.checked_add(size)?).filter(|_| size >= 8)?;
        at += size;
        Some((h, &rec[8..]))
    })
}

/// Starts a record: returns the position of its header, to finish with
/// [`finish_record`].
pub(crate) fn begin_record(out: &mut Vec<u8>, e: Endian, record_type: u32, misc: u16) -> usize {
    let at = out.len();
    RecordHeader {
        type_: record_type,
        misc,
        size: 0,
    }
    .put(out, e);
    at
}

/// Writes the final size into the header begun at `at`.
pub(crate) fn finish_record(
    out: &mut Vec<u8>,
    e: Endian,
    at: usize,
    record_type: u32,
) -> Result<(), RecordTooLarge> {
    let size = out.len() - at;
    let Ok(s) = u16::try_from(size) else {
        out.truncate(at);
        return Err(RecordTooLarge { record_type, size });
    };
    out[at + 6..at + 8].copy_from_slice(&e.u16_bytes(s));
    Ok(())
}

/// Appends a NUL-terminated string padded with zeros to a multiple of `align`
/// (counted from the start of the string).
pub(crate) fn put_cstr(out: &mut Vec<u8>, s: &[u8], align: usize) {
    let start = out.len();
    out.extend_from_slice(s);
    out.push(0);
    while !(out.len() - start).is_multiple_of(align) {
        out.push(0);
    }
}

/// Encodes a header-only record (FINISHED_ROUND, FINISHED_INIT).
pub fn encode_empty(out: &mut Vec<u8>, e: Endian, record_type: u32) {
    out.put_u32(e, record_type);
    out.put_u16(e, 0);
    out.put_u16(e, 8);
}

/// The `sample_id` trailer appended to non-sample records when
/// `attr.sample_id_all` is set, shaped by `attr.sample_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleIdLayout {
    /// `attr.sample_type` of the attr that decides the layout.
    pub sample_type: u64,
    /// `attr.sample_id_all`; without it there is no trailer.
    pub sample_id_all: bool,
}

/// The longest trailer: six 8-byte fields (TID, TIME, ID, STREAM_ID, CPU,
/// IDENTIFIER).
const MAX_TRAILER: usize = 6 * 8;

/// A `sample_id` trailer already encoded ([`SampleIdLayout::encode`]).
#[derive(Debug, Clone, Copy)]
pub struct Trailer {
    bytes: [u8; MAX_TRAILER],
    len: u8,
}

impl Trailer {
    /// The trailer's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Values for the trailer fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleId {
    /// TID: pid.
    pub pid: u32,
    /// TID: tid.
    pub tid: u32,
    pub time: u64,
    pub id: u64,
    pub stream_id: u64,
    pub cpu: u32,
}

impl SampleIdLayout {
    /// Trailer length in bytes.
    pub fn len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        use st::*;
        [TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER]
            .iter()
            .filter(|&&b| self.sample_type & b != 0)
            .count()
            * 8
    }

    /// True when there is no trailer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The time in the trailer of a non-sample record's body; `None`
    /// without PERF_SAMPLE_TIME in it, or without a whole trailer.
    pub fn time(&self, body: &[u8], e: Endian) -> Option<u64> {
        let timed = self.sample_type & st::TIME != 0;
        self.read(body, e).filter(|_| timed).map(|s| s.time)
    }

    /// Reads the trailer at the end of a non-sample record's body; `None`
    /// when there is none or the body is too short to hold it.
    pub fn read(&self, body: &[u8], e: Endian) -> Option<SampleId> {
        if self.is_empty() {
            return None;
        }
        let r = Rd(e);
        let mut at = body.len().checked_sub(self.len())?;
        let mut v = SampleId::default();
        let st = self.sample_type;
        let mut next = |present: bool| {
            let here = at;
            if present {
                at += 8;
            }
            present.then_some(here)
        };
        use st::*;
        if let Some(o) = next(st & TID != 0) {
            v.pid = r.u32(body, o)?;
            v.tid = r.u32(body, o + 4)?;
        }
        if let Some(o) = next(st & TIME != 0) {
            v.time = r.u64(body, o)?;
        }
        if let Some(o) = next(st & ID != 0) {
            v.id = r.u64(body, o)?;
        }
        if let Some(o) = next(st & STREAM_ID != 0) {
            v.stream_id = r.u64(body, o)?;
        }
        if let Some(o) = next(st & CPU != 0) {
            v.cpu = r.u32(body, o)?;
        }
        if let Some(o) = next(st & IDENTIFIER != 0) {
            v.id = r.u64(body, o)?;
        }
        Some(v)
    }

    /// Appends the trailer in perf's field order.
    pub fn write(&self, out: &mut Vec<u8>, e: Endian, v: &SampleId) {
        let at = out.len();
        out.resize(at + self.len(), 0);
        self.write_into(&mut out[at..], e, v);
    }

    /// The trailer for `v`, encoded once: a snapshot writes the same one
    /// after each of a process's records, so it is copied, not re-encoded
    /// field by field, per record.
    pub fn encode(&self, e: Endian, v: &SampleId) -> Trailer {
        let mut t = Trailer {
            bytes: [0; MAX_TRAILER],
            len: self.len() as u8,
        };
        self.write_into(&mut t.bytes[..usize::from(t.len)], e, v);
        t
    }

    /// Writes the trailer in perf's field order over `dst`, which is
    /// [`SampleIdLayout::len`] bytes long (the CPU's reserved half is left
    /// as `dst` has it: zeroed by the callers).
    pub fn write_into(&self, dst: &mut [u8], e: Endian, v: &SampleId) {
        if !self.sample_id_all {
            return;
        }
        use st::*;
        let st = self.sample_type;
        let mut at = 0;
        let mut put = |b: &[u8]| {
            dst[at..at + b.len()].copy_from_slice(b);
            at += 8;
        };
        if st & TID != 0 {
            let (pid, tid) = (e.u32_bytes(v.pid), e.u32_bytes(v.tid));
            put(&[
                pid[0], pid[1], pid[2], pid[3], tid[0], tid[1], tid[2], tid[3],
            ]);
        }
        if st & TIME != 0 {
            put(&e.u64_bytes(v.time));
        }
        if st & ID != 0 {
            put(&e.u64_bytes(v.id));
        }
        if st & STREAM_ID != 0 {
            put(&e.u64_bytes(v.stream_id));
        }
        if st & CPU != 0 {
            put(&e.u32_bytes(v.cpu));
        }
        if st & IDENTIFIER != 0 {
            put(&e.u64_bytes(v.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::consts::types;

    // The trailer length and order follow sample_type; no sample_id_all means no trailer.
    #[test]
    fn trailer_layouts() {
        use st::*;
        let all = SampleIdLayout {
            sample_type: TID | TIME | ID | STREAM_ID | CPU | IDENTIFIER | IP | PERIOD,
            sample_id_all: true,
        };
        assert_eq!(all.len(), 48);
        let mut out = Vec::new();
        let sid = SampleId {
            pid: 1,
            tid: 2,
            time: 3,
            id: 4,
            stream_id: 5,
            cpu: 6,
        };
        all.write(&mut out, Endian::Little, &sid);
        let words: Vec<u64> = out
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, vec![1 | (2 << 32), 3, 4, 5, 6, 4]);
        let off = SampleIdLayout {
            sample_id_all: false,
            ..all
        };
        assert_eq!(off.len(), 0);
    }

    // split_records yields whole records and stops at a truncated or bad one.
    #[test]
    fn split_records_stops_at_damage() {
        let e = Endian::Little;
        let mut b = Vec::new();
        encode_empty(&mut b, e, types::FINISHED_ROUND);
        encode_empty(&mut b, e, types::FINISHED_INIT);
        assert_eq!(split_records(&b, e).count(), 2);
        assert_eq!(split_records(&b[..12], e).count(), 1);
        b[14] = 4; // second record claims size 4
        assert_eq!(split_records(&b, e).count(), 1);
    }
}
