//! `perf_event_attr`: parsed and encoded by one type, plus what an attr says
//! about record layout (the sample_id trailer, where the id sits), and an
//! input's set of attrs with their ids ([`Attrs`]).

use std::collections::HashMap;

use super::consts::{attr_flags, sample_type as st, ATTR_SIZE, ATTR_SIZE_VER0};
use super::error::{FormatError, FormatErrorKind as K};
use super::record::SampleIdLayout;
use crate::bytes::{Endian, PutExt, Rd};

/// The fields of `perf_event_attr` this tool reads and writes. Encoding
/// writes `size` bytes with every other field zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// `type` (PERF_TYPE_*).
    pub type_: u32,
    /// `size`: the attr's length in the file.
    pub size: u32,
    pub config: u64,
    /// `sample_period` (or `sample_freq`).
    pub sample_period: u64,
    /// `sample_type`: which fields samples and trailers hold.
    pub sample_type: u64,
    pub read_format: u64,
    /// The bitfield, in little-endian bit numbering (bit 0 = `disabled`)
    /// whatever the file's byte order.
    pub flags: u64,
}

impl Default for Attr {
    fn default() -> Attr {
        Attr {
            type_: 0,
            size: ATTR_SIZE as u32,
            config: 0,
            sample_period: 0,
            sample_type: 0,
            read_format: 0,
            flags: 0,
        }
    }
}

/// Where the id of a sample and of other records is, for finding its attr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdPos {
    /// Byte offset of the id in a sample body (after the header), if any.
    pub sample: Option<usize>,
    /// Byte offset of the id counted back from the end of a non-sample record.
    pub trailer_from_end: Option<usize>,
}

impl Attr {
    /// Parses a `perf_event_attr` (at least its first 48 bytes) found at file
    /// offset `offset`. A big-endian bitfield is turned back into bit numbers
    /// as perf does (each byte bit-reversed).
    pub fn parse(b: &[u8], e: Endian, offset: u64) -> Result<Attr, FormatError> {
        let r = Rd(e);
        let short = || FormatError::at(offset, K::Truncated("perf_event_attr"));
        let raw: [u8; 8] = b
            .get(40..48)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(short)?;
        let flags = match e {
            Endian::Little => u64::from_le_bytes(raw),
            Endian::Big => u64::from_le_bytes(raw.map(u8::reverse_bits)),
        };
        Ok(Attr {
            type_: r.u32(b, 0).ok_or_else(short)?,
            size: r.u32(b, 4).ok_or_else(short)?,
            config: r.u64(b, 8).ok_or_else(short)?,
            sample_period: r.u64(b, 16).ok_or_else(short)?,
            sample_type: r.u64(b, 24).ok_or_else(short)?,
            read_format: r.u64(b, 32).ok_or_else(short)?,
            flags,
        })
    }

    /// Encodes as `size` bytes (at least 64). In a big-endian file the
    /// bitfield is laid out as a big-endian compiler does (bit 0 is the top
    /// bit of the first byte), which is how perf reads it back.
    pub fn encode(&self, e: Endian) -> Vec<u8> {
        let size = (self.size as usize).max(ATTR_SIZE_VER0);
        let mut b = Vec::with_capacity(size);
        b.put_u32(e, self.type_);
        b.put_u32(e, size as u32);
        b.put_u64(e, self.config);
        b.put_u64(e, self.sample_period);
        b.put_u64(e, self.sample_type);
        b.put_u64(e, self.read_format);
        match e {
            Endian::Little => b.put_u64(e, self.flags),
            Endian::Big => b.extend(self.flags.to_le_bytes().map(u8::reverse_bits)),
        }
        b.resize(size, 0);
        b
    }

    /// The trailer layout this attr gives non-sample records.
    pub fn layout(&self) -> SampleIdLayout {
        SampleIdLayout {
            sample_type: self.sample_type,
            sample_id_all: self.flags & attr_flags::SAMPLE_ID_ALL != 0,
        }
    }

    /// The id positions perf derives from an attr (`__perf_evsel__calc_id_pos`
    /// and `calc_is_pos`).
    pub fn id_pos(&self) -> IdPos {
        let t = self.sample_type;
        if t & st::IDENTIFIER != 0 {
            return IdPos {
                sample: Some(0),
                trailer_from_end: Some(8),
            };
        }
        if t & st::ID == 0 {
            return IdPos {
                sample: None,
                trailer_from_end: None,
            };
        }
        let before = [st::IP, st::TID, st::TIME, st::ADDR];
        let sample = before.iter().filter(|&&b| t & b != 0).count() * 8;
        let after = [st::CPU, st::STREAM_ID];
        let from_end = (after.iter().filter(|&&b| t & b != 0).count() + 1) * 8;
        IdPos {
            sample: Some(sample),
            trailer_from_end: Some(from_end),
        }
    }
}

/// The attrs of an input with their ids, and which attr an id belongs to.
#[derive(Debug, Default, Clone)]
pub struct Attrs {
    /// (attr, ids) in file order.
    pub list: Vec<(Attr, Vec<u64>)>,
    /// The `perf_event_attr` bytes of each, `attr.size` long (at most what
    /// the input holds), unknown fields included: what a rewrite copies.
    pub raw: Vec<Vec<u8>>,
    by_id: HashMap<u64, usize>,
}

impl Attrs {
    pub(crate) fn push(&mut self, attr: Attr, ids: Vec<u64>, raw: &[u8]) {
        for &id in &ids {
            self.by_id.insert(id, self.list.len());
        }
        let n = (attr.size as usize).clamp(ATTR_SIZE_VER0.min(raw.len()), raw.len());
        self.raw.push(raw[..n].to_vec());
        self.list.push((attr, ids));
    }

    /// The first attr: it decides the trailer of synthesized records.
    pub fn first(&self) -> Option<&Attr> {
        self.list.first().map(|(a, _)| a)
    }

    /// The attr a sample belongs to (by its id; the first when there is one
    /// attr or the id is unknown).
    #[inline]
    pub fn of_sample(&self, body: &[u8], e: Endian) -> Option<&Attr> {
        self.index_of_sample(body, e).map(|i| &self.list[i].0)
    }

    /// The position in [`Attrs::list`] of the attr a sample belongs to, by
    /// the same rule as [`Attrs::of_sample`]. One attr is decided inline
    /// (every sample of most recordings asks).
    #[inline]
    pub fn index_of_sample(&self, body: &[u8], e: Endian) -> Option<usize> {
        match self.list.len() {
            0 => None,
            1 => Some(0),
            _ => self.index_of_sample_by_id(body, e),
        }
    }

    #[inline(never)]
    fn index_of_sample_by_id(&self, body: &[u8], e: Endian) -> Option<usize> {
        let id = self
            .first()?
            .id_pos()
            .sample
            .and_then(|pos| Rd(e).u64(body, pos));
        self.index_by_id_or_first(id)
    }

    /// The position in [`Attrs::list`] of the attr with this id.
    pub fn index_of_id(&self, id: u64) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The time in a non-sample record's `sample_id` trailer, read by the
    /// layout of the attr it belongs to ([`Attrs::of_trailer`],
    /// [`SampleIdLayout::time`]).
    pub fn trailer_time(&self, body: &[u8], e: Endian) -> Option<u64> {
        self.of_trailer(body, e)?.layout().time(body, e)
    }

    /// The attr a non-sample record's `sample_id` trailer belongs to (by
    /// the id at the end of the body; the first when there is one attr or
    /// the id is unknown).
    pub fn of_trailer(&self, body: &[u8], e: Endian) -> Option<&Attr> {
        let first = self.first()?;
        if self.list.len() == 1 {
            return Some(first);
        }
        let id = first
            .id_pos()
            .trailer_from_end
            .and_then(|n| body.len().checked_sub(n))
            .and_then(|pos| Rd(e).u64(body, pos));
        self.index_by_id_or_first(id).map(|i| &self.list[i].0)
    }

    /// The position of the attr with this id; the first when the id is
    /// absent or unknown; None without attrs.
    fn index_by_id_or_first(&self, id: Option<u64>) -> Option<usize> {
        if self.list.is_empty() {
            return None;
        }
        Some(id.and_then(|id| self.by_id.get(&id).copied()).unwrap_or(0))
    }
}

/// The attr and ids of a pipe-mode HEADER_ATTR record body.
pub(crate) fn pipe_attr(at: u64, body: &[u8], e: Endian) -> Result<(Attr, Vec<u64>), FormatError> {
    let attr = Attr::parse(body, e, at)?;
    let size = attr.size as usize;
    if size < ATTR_SIZE_VER0 || size > body.len() {
        return Err(FormatError::at(at, K::BadAttrSize(size)));
    }
    let ids = body[size..]
        .chunks(8)
        .filter_map(|c| Rd(e).u64(c, 0))
        .collect();
    Ok((attr, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The big-endian attr bitfield is bit-reversed per byte, as a BE compiler lays it out.
    #[test]
    fn attr_bitfield_big_endian() {
        let a = Attr {
            flags: attr_flags::DISABLED | attr_flags::SAMPLE_ID_ALL,
            ..Default::default()
        };
        let le = a.encode(Endian::Little);
        let be = a.encode(Endian::Big);
        assert_eq!(le.len(), ATTR_SIZE);
        assert_eq!(le[40], 0x01);
        assert_eq!(be[40], 0x80);
        // bit 18 = byte 2, bit 2 -> reversed: bit 5
        assert_eq!(le[42], 0x04);
        assert_eq!(be[42], 0x20);
        assert_eq!(&be[4..8], &128u32.to_be_bytes());
    }

    // An attr encodes and parses back equal in both byte orders; a short one is an error.
    #[test]
    fn attr_round_trip() {
        let a = Attr {
            type_: 1,
            config: 9,
            sample_period: 4000,
            sample_type: st::IP | st::TID | st::TIME | st::ID,
            read_format: 4,
            flags: attr_flags::SAMPLE_ID_ALL | attr_flags::MMAP2 | attr_flags::BUILD_ID,
            ..Default::default()
        };
        for e in [Endian::Little, Endian::Big] {
            assert_eq!(Attr::parse(&a.encode(e), e, 0).unwrap(), a);
        }
        assert!(a.layout().sample_id_all);
        assert_eq!(
            Attr::parse(&[0; 47], Endian::Little, 9).unwrap_err().offset,
            9
        );
    }

    // Id positions follow perf's rules.
    #[test]
    fn id_positions() {
        let with = |t| Attr {
            sample_type: t,
            ..Default::default()
        };
        assert_eq!(with(st::IDENTIFIER | st::IP).id_pos().sample, Some(0));
        assert_eq!(
            with(st::IP | st::TID | st::TIME | st::ID | st::CPU).id_pos(),
            IdPos {
                sample: Some(24),
                trailer_from_end: Some(16)
            }
        );
        assert_eq!(with(st::IP).id_pos().sample, None);
    }
}
