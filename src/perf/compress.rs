//! perf's `-z` framing: a streaming zstd decoder for PERF_RECORD_COMPRESSED
//! (and COMPRESSED2) payloads, and an encoder that groups records into them
//! as perf does.

use std::io;

use super::consts::types;
use super::error::{FormatError, FormatErrorKind as K, UNFINISHED};
use super::record::RecordHeader;
use crate::bytes::{Endian, Rd};

/// How many times its compressed size a recording's compressed data may
/// expand to in total (beyond [`EXPANSION_FLOOR`]). perf's `-z` data (zstd
/// level 1 by default, flushed after every ring-buffer chunk) shrinks a few
/// times to about 20 times; only bombs, runs of identical records that zstd
/// squeezes up to ~30,000 times, come near 1000. The bound keeps the time
/// every reader spends, and the output of `convert --decompress`, within
/// 1000 times the compressed bytes read.
pub(crate) const EXPANSION_RATIO: u64 = 1000;

/// What compressed data may always expand to, whatever its ratio: a small
/// recording of near-identical records is let through.
pub(crate) const EXPANSION_FLOOR: u64 = 256 << 20;

/// How deep COMPRESSED records may nest (a top-level record is at depth
/// one). perf's reader decodes a COMPRESSED record found in another's data
/// too (its records then follow, in order, as if it were not there), so
/// every reader here does; one nested deeper is refused. All depths share
/// the recording's expansion bound and each record its cap, so nested
/// frames cost no more time or memory than flat ones.
pub(crate) const MAX_DEPTH: u32 = 4;

/// Why perf 6.1's reader does not read a COMPRESSED record as
/// [`Decompressor`] does (its `perf_session__process_compressed_event`
/// refuses a record that decodes to no bytes, and writes a frame after the
/// first in one record's data at the wrong place), or reads it only by
/// chance: a COMPRESSED record inside another (its records are read twice
/// unless it ends its container). A copy of such a record is not readable:
/// the records must be compressed anew.
pub(crate) mod odd {
    pub(crate) const NO_PAYLOAD: &str = "has no zstd bytes";
    pub(crate) const NOTHING: &str = "decompresses to no bytes";
    pub(crate) const FRAMES: &str = "holds more than one zstd frame";
    pub(crate) const NESTED: &str = "holds a COMPRESSED record";
}

/// Streaming zstd decoder for PERF_RECORD_COMPRESSED payloads; records may
/// span payloads, so the undecoded tail is kept. Records are handed out after
/// every output chunk, so memory stays within one record plus one chunk
/// per nesting depth whatever a payload expands to; the total output, all
/// depths together, is bounded by the input fed ([`EXPANSION_RATIO`],
/// [`EXPANSION_FLOOR`]). A COMPRESSED record in the decoded data is decoded
/// in turn (by a decoder of its depth, whose stream runs on through the
/// records of that depth) and its records handed out in its place.
pub(crate) struct Decompressor {
    top: Depth,
    budget: Budget,
}

/// The decoder of one nesting depth.
struct Depth {
    dec: zstd::stream::raw::Decoder<'static>,
    pending: Vec<u8>,
    out: Vec<u8>,
    /// zstd's hint after the last run that consumed or produced bytes: how
    /// many input bytes it needs next (0: the frame ended).
    hint: usize,
    /// 1 for the top-level records.
    depth: u32,
    /// The decoder of the COMPRESSED records inside this depth's.
    inner: Option<Box<Depth>>,
}

/// What the decoders of all depths share.
struct Budget {
    /// Compressed bytes fed at the top level so far.
    read: u64,
    /// Bytes decompressed so far, at every depth.
    written: u64,
    /// [`EXPANSION_FLOOR`] (lower in unit tests).
    floor: u64,
    /// The first record perf does not read as decoded here: the offset of
    /// its top-level record, and an [`odd`] reason.
    odd: Option<(u64, &'static str)>,
}

impl Budget {
    /// Fails when the bytes decompressed so far pass the bound on the
    /// compressed bytes fed.
    fn check_expansion(&self, at: u64) -> Result<(), FormatError> {
        let bound = self.read.saturating_mul(EXPANSION_RATIO).max(self.floor);
        if self.written > bound {
            let kind = K::Expansion {
                ratio: EXPANSION_RATIO,
                compressed: self.read,
                decompressed: self.written,
            };
            return Err(FormatError::at(at, kind));
        }
        Ok(())
    }

    fn odd(&mut self, at: u64, why: &'static str) {
        self.odd.get_or_insert((at, why));
    }
}

impl Decompressor {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Decompressor {
            top: Depth::new(1)?,
            budget: Budget {
                read: 0,
                written: 0,
                floor: EXPANSION_FLOOR,
                odd: None,
            },
        })
    }

    /// Decodes one payload, at most `cap` bytes of output (and as much for
    /// each COMPRESSED record inside), and calls `f` for every complete
    /// record it holds, at any depth.
    pub(crate) fn feed(
        &mut self,
        at: u64,
        payload: &[u8],
        e: Endian,
        cap: u64,
        mut f: impl FnMut(RecordHeader, &[u8]) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        self.budget.read += payload.len() as u64;
        self.top
            .feed(&mut self.budget, (at, e, cap), payload, &mut f)
    }

    /// The first COMPRESSED record fed that perf's reader does not read as
    /// this decoder does: its offset (the top-level record's), and why.
    pub(crate) fn odd(&self) -> Option<(u64, &'static str)> {
        self.budget.odd
    }

    /// At the end of the input: a partial record left over, or a zstd block
    /// cut in the middle, at any depth, means the compressed data was cut
    /// short. perf
    /// flushes its stream after each ring-buffer chunk it compresses but
    /// never ends the frame, so a frame that is open at a block boundary
    /// (zstd then asks for the next 3-byte block header) is complete. A
    /// ring buffer that wrapped is compressed in two chunks, each flushed
    /// to its own COMPRESSED record(s), and a record may straddle them:
    /// cut between them, the data ends inside that record. `at` is the
    /// offset of the last compressed record.
    pub(crate) fn finish(&self, at: u64) -> Result<(), FormatError> {
        if self.unfinished().is_some() {
            let kind = K::Truncated(UNFINISHED);
            return Err(FormatError::at(at, kind));
        }
        Ok(())
    }

    /// The decompressed bytes of records cut short left at the end, at
    /// every depth (0 for a zstd block cut short at a record boundary),
    /// None when the data decoded so far ends whole (see
    /// [`Decompressor::finish`]).
    pub(crate) fn unfinished(&self) -> Option<u64> {
        let mut cut = None;
        let mut depth = Some(&self.top);
        while let Some(d) = depth {
            if d.unfinished() {
                *cut.get_or_insert(0) += d.pending.len() as u64;
            }
            depth = d.inner.as_deref();
        }
        cut
    }
}

/// Where a payload comes from: the offset of its top-level record, the
/// byte order, the most one record may decompress to.
type Ctx = (u64, Endian, u64);

impl Depth {
    fn new(depth: u32) -> io::Result<Self> {
        Ok(Depth {
            dec: zstd::stream::raw::Decoder::new()?,
            pending: Vec::new(),
            out: vec![0; 1 << 16],
            hint: 0,
            depth,
            inner: None,
        })
    }

    /// Whether the data decoded at this depth ends inside a record or a
    /// zstd block.
    fn unfinished(&self) -> bool {
        const BLOCK_HEADER: usize = 3;
        !self.pending.is_empty() || !matches!(self.hint, 0 | BLOCK_HEADER)
    }

    /// Decodes one payload of this depth (see [`Decompressor::feed`]).
    fn feed<F>(
        &mut self,
        b: &mut Budget,
        (at, e, cap): Ctx,
        payload: &[u8],
        f: &mut F,
    ) -> Result<(), FormatError>
    where
        F: FnMut(RecordHeader, &[u8]) -> Result<(), FormatError>,
    {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        if payload.is_empty() {
            b.odd(at, odd::NO_PAYLOAD);
        }
        let mut input = InBuffer::around(payload);
        let mut stalled = false;
        let mut produced = 0u64;
        loop {
            let before = input.pos;
            let mut output = OutBuffer::around(&mut self.out[..]);
            let hint = self.dec.run(&mut input, &mut output).map_err(|err| {
                FormatError::at(at, K::Compressed(format!("does not decompress: {err}")))
            })?;
            let n = output.pos();
            // A run that neither consumed nor produced anything changes
            // nothing but its hint: after a frame that ended with a full
            // output buffer, the hint for a next frame's header (not a
            // frame cut short).
            if n > 0 || input.pos != before {
                self.hint = hint;
            }
            if hint == 0 && input.pos < payload.len() {
                b.odd(at, odd::FRAMES);
            }
            produced += n as u64;
            b.written += n as u64;
            if produced > cap {
                let kind = K::Implausible {
                    what: "decompressed size of one COMPRESSED record (over the recording's buffer size)",
                    value: produced,
                };
                return Err(FormatError::at(at, kind));
            }
            b.check_expansion(at)?;
            self.pending.extend_from_slice(&self.out[..n]);
            self.hand_out(b, (at, e, cap), f)?;
            // A full output buffer may leave more decoded bytes inside zstd.
            if input.pos >= payload.len() && n < self.out.len() {
                break;
            }
            if n == 0 && input.pos == before {
                if stalled {
                    let kind = K::Compressed("zstd makes no progress".into());
                    return Err(FormatError::at(at, kind));
                }
                // A finished frame followed by more data: start a new frame.
                b.odd(at, odd::FRAMES);
                self.dec
                    .reinit()
                    .map_err(|err| FormatError::at(at, K::Compressed(format!("zstd: {err}"))))?;
                stalled = true;
            } else {
                stalled = false;
            }
        }
        if produced == 0 {
            b.odd(at, odd::NOTHING);
        }
        Ok(())
    }

    /// Calls `f` for the complete records decoded so far and drops them;
    /// a COMPRESSED one is decoded by the next depth's decoder instead.
    fn hand_out<F>(&mut self, b: &mut Budget, ctx: Ctx, f: &mut F) -> Result<(), FormatError>
    where
        F: FnMut(RecordHeader, &[u8]) -> Result<(), FormatError>,
    {
        let (at, e, _) = ctx;
        let Depth {
            pending,
            inner,
            depth,
            ..
        } = self;
        let mut off = 0;
        while pending.len() - off >= 8 {
            let h = RecordHeader::parse(&pending[off..], e)
                .ok_or(FormatError::at(at, K::Truncated("inner record header")))?;
            if h.size < 8 {
                let kind = K::RecordTooSmall {
                    record_type: h.type_,
                    size: h.size,
                };
                return Err(FormatError::at(at, kind));
            }
            let size = usize::from(h.size);
            if pending.len() - off < size {
                break;
            }
            let body = &pending[off + 8..off + size];
            match compressed_payload(at, &h, body, e)? {
                None => f(h, body)?,
                Some(payload) => {
                    if *depth >= MAX_DEPTH {
                        let what = format!("COMPRESSED records nested more than {MAX_DEPTH} deep");
                        return Err(FormatError::at(at, K::Compressed(what)));
                    }
                    b.odd(at, odd::NESTED);
                    let next = match inner {
                        Some(d) => d,
                        None => inner.insert(Box::new(Depth::new(*depth + 1).map_err(|err| {
                            FormatError::at(at, K::Compressed(format!("zstd: {err}")))
                        })?)),
                    };
                    next.feed(b, ctx, payload, f)?;
                }
            }
            off += size;
        }
        pending.drain(..off);
        Ok(())
    }
}

/// Streaming zstd encoder that writes records as perf's `-z` does: one
/// frame across the whole recording, flushed at the end of each group of
/// records, so every COMPRESSED payload decodes to whole records (perf
/// flushes after each ring-buffer chunk). Groups stay under
/// [`Compressor::GROUP`] bytes of input (one record may exceed it), so one
/// record never needs more than perf's decompression buffer.
pub(crate) struct Compressor {
    enc: zstd::stream::raw::Encoder<'static>,
    /// Compressed bytes not yet handed out.
    out: Vec<u8>,
    /// Input bytes since the last flush.
    unflushed: usize,
    record_type: u32,
    e: Endian,
}

impl Compressor {
    /// Most input bytes per flushed group (before the record that would
    /// cross it).
    pub(crate) const GROUP: usize = 32 << 10;
    /// Most payload bytes per COMPRESSED record (perf's limit is 65527,
    /// less for COMPRESSED2's size field and padding).
    pub(crate) const MAX_PAYLOAD: usize = 65_504;

    /// An encoder at zstd `level` writing `record_type` (COMPRESSED or
    /// COMPRESSED2) records in byte order `e`.
    pub(crate) fn new(level: i32, record_type: u32, e: Endian) -> io::Result<Self> {
        Ok(Compressor {
            enc: zstd::stream::raw::Encoder::new(level)?,
            out: Vec::new(),
            unflushed: 0,
            record_type,
            e,
        })
    }

    /// Adds one whole record; completed COMPRESSED records go to `emit`.
    pub(crate) fn push(&mut self, rec: &[u8], emit: &mut impl FnMut(&[u8])) -> io::Result<()> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        if self.unflushed > 0 && self.unflushed + rec.len() > Self::GROUP {
            self.flush(emit)?;
        }
        let mut input = InBuffer::around(rec);
        while input.pos < rec.len() {
            self.out.reserve(rec.len() + 1024);
            let mut output = OutBuffer::around(&mut self.out);
            self.enc.run(&mut input, &mut output)?;
        }
        self.unflushed += rec.len();
        Ok(())
    }

    /// Ends the current group: flushes zstd and hands out its COMPRESSED
    /// records (a payload over [`Self::MAX_PAYLOAD`] is split; the decoder
    /// is a stream, so the pieces decode in order).
    pub(crate) fn flush(&mut self, emit: &mut impl FnMut(&[u8])) -> io::Result<()> {
        use zstd::stream::raw::{Operation, OutBuffer};
        if self.unflushed == 0 {
            return Ok(());
        }
        loop {
            self.out.reserve(1 << 16);
            let mut output = OutBuffer::around(&mut self.out);
            if self.enc.flush(&mut output)? == 0 {
                break;
            }
        }
        self.unflushed = 0;
        let mut rec = Vec::with_capacity(Self::MAX_PAYLOAD + 24);
        for chunk in self.out.chunks(Self::MAX_PAYLOAD) {
            rec.clear();
            encode_compressed(&mut rec, self.e, self.record_type, chunk);
            emit(&rec);
        }
        self.out.clear();
        Ok(())
    }
}

/// Appends a COMPRESSED record holding `payload` (or a COMPRESSED2: its
/// u64 data_size, then the payload zero-padded to 8).
pub(crate) fn encode_compressed(out: &mut Vec<u8>, e: Endian, record_type: u32, payload: &[u8]) {
    use crate::bytes::PutExt;
    let (fixed, padded) = match record_type {
        types::COMPRESSED2 => (16, payload.len().div_ceil(8) * 8),
        _ => (8, payload.len()),
    };
    RecordHeader {
        type_: record_type,
        misc: 0,
        size: (fixed + padded) as u16,
    }
    .put(out, e);
    if record_type == types::COMPRESSED2 {
        out.put_u64(e, payload.len() as u64);
    }
    out.extend_from_slice(payload);
    out.resize(out.len() + padded - payload.len(), 0);
}

/// The zstd payload of a COMPRESSED or COMPRESSED2 record, None for others
/// (the type test inlined into every walk; the decoding out of line).
#[inline(always)]
pub(crate) fn compressed_payload<'b>(
    at: u64,
    h: &RecordHeader,
    body: &'b [u8],
    e: Endian,
) -> Result<Option<&'b [u8]>, FormatError> {
    match h.type_ {
        types::COMPRESSED => Ok(Some(body)),
        types::COMPRESSED2 => compressed2_payload(at, body, e).map(Some),
        _ => Ok(None),
    }
}

/// The zstd payload of a COMPRESSED2 record: `data_size` bytes after it.
#[inline(never)]
fn compressed2_payload(at: u64, body: &[u8], e: Endian) -> Result<&[u8], FormatError> {
    let n = Rd(e)
        .u64(body, 0)
        .ok_or(FormatError::at(at, K::Truncated("COMPRESSED2 record")))?;
    let too_large = FormatError::at(
        at,
        K::Implausible {
            what: "COMPRESSED2 data_size",
            value: n,
        },
    );
    let n = usize::try_from(n).map_err(|_| too_large.clone())?;
    let end = n.checked_add(8).ok_or(too_large.clone())?;
    body.get(8..end).ok_or(too_large)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;

    // Records compressed in groups come back whole and in order through the
    // decoder, in both record forms; an incompressible record near 64 KiB
    // splits its payload over records that each fit perf's record size.
    #[test]
    fn compressor_round_trip() {
        for t in [types::COMPRESSED, types::COMPRESSED2] {
            let e = Endian::Big;
            let mut z = Compressor::new(1, t, e).unwrap();
            let mut recs: Vec<Vec<u8>> = Vec::new();
            let mut x = 0x9e37_79b9u32;
            for i in 0..300usize {
                let len = if i == 150 { 65_528 } else { 8 + (i % 40) * 8 };
                let mut r = Vec::new();
                RecordHeader {
                    type_: 9,
                    misc: 0,
                    size: len as u16,
                }
                .put(&mut r, e);
                while r.len() < len {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    r.push(if i == 150 { x as u8 } else { (i % 7) as u8 });
                }
                recs.push(r);
            }
            let mut out: Vec<Vec<u8>> = Vec::new();
            for r in &recs {
                z.push(r, &mut |c| out.push(c.to_vec())).unwrap();
            }
            z.flush(&mut |c| out.push(c.to_vec())).unwrap();
            assert!(out.len() > 3, "groups");
            let mut d = Decompressor::new().unwrap();
            let mut back = Vec::new();
            for c in &out {
                let h = RecordHeader::parse(c, e).unwrap();
                assert_eq!((h.type_, usize::from(h.size)), (t, c.len()));
                let payload = match t {
                    types::COMPRESSED => &c[8..],
                    _ => &c[16..16 + Rd(e).u64(c, 8).unwrap() as usize],
                };
                d.feed(0, payload, e, 1 << 20, |h, b| {
                    let mut r = Vec::new();
                    h.put(&mut r, e);
                    r.extend_from_slice(b);
                    back.push(r);
                    Ok(())
                })
                .unwrap();
            }
            d.finish(0).unwrap();
            assert_eq!(back, recs);
        }
    }

    /// `n` bytes of 8-byte FINISHED_ROUND records.
    fn rounds(n: usize, e: Endian) -> Vec<u8> {
        let mut r = Vec::with_capacity(n);
        while r.len() < n {
            RecordHeader {
                type_: types::FINISHED_ROUND,
                misc: 0,
                size: 8,
            }
            .put(&mut r, e);
        }
        r
    }

    // A finished zstd frame whose output fills the 64 KiB output buffer
    // exactly (once, twice, thrice) is complete: zstd's hint for the next
    // frame's header, after a run that did nothing, is not a frame cut short.
    #[test]
    fn a_frame_ending_on_a_full_output_buffer_is_complete() {
        let e = Endian::Little;
        for k in 1..=3 {
            let frame = zstd::bulk::compress(&rounds(k << 16, e), 3).unwrap();
            let mut d = Decompressor::new().unwrap();
            let mut n = 0;
            d.feed(0, &frame, e, u64::MAX, |_, _| {
                n += 1;
                Ok(())
            })
            .unwrap();
            assert_eq!(n, k << 13);
            d.finish(0).unwrap();
            // cut by a byte, the frame is unfinished
            let mut d = Decompressor::new().unwrap();
            d.feed(0, &frame[..frame.len() - 1], e, u64::MAX, |_, _| Ok(()))
                .unwrap();
            assert!(d.finish(0).is_err(), "{k}");
        }
    }

    // The total output is bounded by EXPANSION_RATIO times the compressed
    // bytes fed, past the floor: a bomb is refused at its record's offset,
    // data that shrinks less decodes in full beyond the floor.
    #[test]
    fn total_expansion_is_bounded_by_the_ratio() {
        let e = Endian::Little;
        let floor = 1 << 20;
        let bomb = zstd::bulk::compress(&rounds(2 << 20, e), 19).unwrap();
        assert!(bomb.len() as u64 * EXPANSION_RATIO < 2 << 20);
        let mut d = Decompressor::new().unwrap();
        d.budget.floor = floor;
        let err = d.feed(4242, &bomb, e, u64::MAX, |_, _| Ok(())).unwrap_err();
        assert_eq!(err.offset, 4242);
        assert!(
            matches!(err.kind, K::Expansion { ratio: 1000, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("more than 1000 times"), "{err}");

        // records of pseudo-random bytes: zstd barely shrinks them
        let mut raw = Vec::new();
        let mut x = 0x2545_f491u32;
        while raw.len() < 2 << 20 {
            RecordHeader {
                type_: 4000,
                misc: 0,
                size: 4096,
            }
            .put(&mut raw, e);
            for _ in 0..4088 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                raw.push(x as u8);
            }
        }
        let mut d = Decompressor::new().unwrap();
        d.budget.floor = floor;
        let mut n = 0;
        for chunk in zstd::bulk::compress(&raw, 1).unwrap().chunks(60_000) {
            d.feed(0, chunk, e, u64::MAX, |_, b| {
                n += 8 + b.len();
                Ok(())
            })
            .unwrap();
        }
        d.finish(0).unwrap();
        assert_eq!(n, raw.len());
    }

    /// A COMPRESSED2 record holding one zstd frame of `recs`.
    fn framed(recs: &[u8], e: Endian) -> Vec<u8> {
        let mut r = Vec::new();
        encode_compressed(
            &mut r,
            e,
            types::COMPRESSED2,
            &zstd::bulk::compress(recs, 1).unwrap(),
        );
        r
    }

    /// Feeds `payload` at offset 40; the records handed out, the error.
    fn decode(d: &mut Decompressor, payload: &[u8], e: Endian) -> (Vec<u32>, Option<FormatError>) {
        let mut got = Vec::new();
        let res = d.feed(40, payload, e, 1 << 20, |h, _| {
            got.push(h.type_);
            Ok(())
        });
        (got, res.err())
    }

    // A COMPRESSED record inside another's data is decoded in its place, at
    // every depth up to MAX_DEPTH (each depth's stream running on through
    // the next top-level record), all depths counted in the one expansion
    // bound against the top-level zstd bytes only; one deeper is an error at
    // the top-level record's offset; the walk is told perf misreads it.
    #[test]
    fn nested_records_are_handed_out_in_place() {
        let e = Endian::Little;
        let rec = |t: u32| {
            let mut r = Vec::new();
            crate::perf::record::encode_empty(&mut r, e, t);
            r
        };
        let (a, b, c, z) = (rec(1000), rec(1001), rec(1002), rec(1003));
        // depth 2: one frame flushed in two pieces, as perf writes them;
        // depth 3: a frame of its own
        let deep = framed(&z, e);
        let mut inner = Compressor::new(1, types::COMPRESSED, e).unwrap();
        let (mut first, mut second) = (Vec::new(), Vec::new());
        inner.push(&b, &mut |_| ()).unwrap();
        inner.push(&deep, &mut |_| ()).unwrap();
        inner.flush(&mut |r| first.extend_from_slice(r)).unwrap();
        inner.push(&c, &mut |_| ()).unwrap();
        inner.flush(&mut |r| second.extend_from_slice(r)).unwrap();
        let top1 = zstd::bulk::compress(&[&a[..], &first].concat(), 1).unwrap();
        let top2 = zstd::bulk::compress(&[&second[..], &a].concat(), 1).unwrap();
        let mut d = Decompressor::new().unwrap();
        assert_eq!(decode(&mut d, &top1, e), (vec![1000, 1001, 1003], None));
        assert_eq!(decode(&mut d, &top2, e), (vec![1002, 1000], None));
        d.finish(0).unwrap();
        assert_eq!(d.odd(), Some((40, odd::NESTED)));
        assert_eq!(d.budget.read, (top1.len() + top2.len()) as u64);
        let depth1 = 2 * a.len() + first.len() + second.len();
        let depth2 = b.len() + deep.len() + c.len();
        assert_eq!(d.budget.written, (depth1 + depth2 + z.len()) as u64);

        let mut r = a.clone();
        for _ in 1..MAX_DEPTH {
            r = framed(&r, e);
        }
        let mut d = Decompressor::new().unwrap();
        let payload = zstd::bulk::compress(&r, 1).unwrap();
        assert_eq!(decode(&mut d, &payload, e), (vec![1000], None));
        let payload = zstd::bulk::compress(&framed(&r, e), 1).unwrap();
        let (got, err) = decode(&mut Decompressor::new().unwrap(), &payload, e);
        let err = err.unwrap();
        assert!(got.is_empty());
        assert_eq!(err.offset, 40);
        assert!(err.to_string().contains("nested more than 4 deep"), "{err}");
    }

    // What perf 6.1's reader refuses is read, and named for the walk: no
    // zstd bytes, an empty frame, two frames in one record. perf's own
    // layout (one frame flushed in pieces) and a frame per record are not.
    #[test]
    fn layouts_perf_refuses_are_named() {
        let e = Endian::Little;
        let recs = rounds(64, e);
        let frame = zstd::bulk::compress(&recs, 1).unwrap();
        let empty = zstd::bulk::compress(&[], 1).unwrap();
        for (payloads, odd, n) in [
            (vec![&frame[..], &[]], Some(odd::NO_PAYLOAD), 8),
            (vec![&frame[..], &empty], Some(odd::NOTHING), 8),
            (vec![&empty[..], &frame], Some(odd::NOTHING), 8),
            (
                vec![&[&frame[..], &frame].concat()[..]],
                Some(odd::FRAMES),
                16,
            ),
            (vec![&frame[..], &frame], None, 16),
        ] {
            let mut d = Decompressor::new().unwrap();
            let mut got = 0;
            for p in payloads {
                d.feed(40, p, e, 1 << 20, |_, _| {
                    got += 1;
                    Ok(())
                })
                .unwrap();
            }
            d.finish(40).unwrap();
            assert_eq!((d.odd().map(|o| o.1), got), (odd, n));
        }
        let mut z = Compressor::new(1, types::COMPRESSED, e).unwrap();
        let mut d = Decompressor::new().unwrap();
        for _ in 0..3 {
            z.push(&recs, &mut |_| ()).unwrap();
            let mut payload = Vec::new();
            z.flush(&mut |r| payload.extend_from_slice(&r[8..]))
                .unwrap();
            d.feed(0, &payload, e, 1 << 20, |_, _| Ok(())).unwrap();
        }
        d.finish(0).unwrap();
        assert_eq!(d.odd(), None);
    }

    // COMPRESSED2's data_size is checked without overflow: u64::MAX or more
    // than the record holds is an error at the record's offset, never a panic.
    #[test]
    fn compressed2_sizes_do_not_overflow() {
        let e = Endian::Little;
        let h = RecordHeader {
            type_: types::COMPRESSED2,
            misc: 0,
            size: 8 + 16,
        };
        for n in [u64::MAX, u64::MAX - 7, 9] {
            let mut body = Vec::new();
            body.put_u64(e, n);
            body.put_u64(e, 0);
            let err = compressed_payload(77, &h, &body, e).unwrap_err();
            assert_eq!(err.offset, 77);
        }
        let mut body = Vec::new();
        body.put_u64(e, 8);
        body.put_u64(e, 0x1122);
        let payload = compressed_payload(0, &h, &body, e).unwrap().unwrap();
        assert_eq!(payload.len(), 8);
        assert!(compressed_payload(5, &h, &[1, 2], e).is_err());
    }
}
