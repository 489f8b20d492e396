//! Streaming I/O for rewriting perf.data: a record reader over a byte range
//! of a file (optionally writing what it reads to an output), a zstd decoder
//! for PERF_RECORD_COMPRESSED payloads, range copies and a progress display.

use std::fs::File;
use std::io::{self, IsTerminal, Read, Seek, SeekFrom, Write};

use super::consts::types;
use super::error::{FormatError, FormatErrorKind as K};
use super::record::RecordHeader;
use crate::bytes::{Endian, Rd};

/// Error from the record stream: format, reading, or writing the tee.
#[derive(Debug)]
pub(crate) enum StreamError {
    /// Malformed data.
    Format(FormatError),
    /// Reading the input failed.
    Io(io::Error),
    /// Writing the tee (the output) failed.
    Tee(io::Error),
}

impl From<io::Error> for StreamError {
    fn from(e: io::Error) -> Self {
        StreamError::Io(e)
    }
}
impl From<FormatError> for StreamError {
    fn from(e: FormatError) -> Self {
        StreamError::Format(e)
    }
}

/// A record from a [`RecordStream`]: (file offset, header, body).
pub(crate) type Rec<'a> = (u64, RecordHeader, &'a [u8]);

/// The read buffer of a [`RecordStream`]: large enough for the largest record
/// (64 KiB) with room to spare, small enough to stay in the CPU's cache. On
/// this machine `pread` of a cached 25 MB file costs 3.4 ms through 64-128
/// KiB buffers and 17-23 ms through 256 KiB to 4 MiB ones (the copy misses
/// the cache), which was half of a dense merge's time.
pub(crate) const READ_CHUNK: usize = 128 << 10;

/// Reads records one by one from a byte range of a file through its own
/// buffer, handing out bodies as slices of it (no copy per record).
pub(crate) struct RecordStream<'f> {
    file: &'f File,
    /// Every byte read is also written here, in order (the single-pass copy).
    tee: Option<&'f mut File>,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    /// File offset of `buf[lo]`, the next record.
    pos: u64,
    end: u64,
    e: Endian,
    /// Bytes to step over before the next record (the AUX data that follows
    /// a PERF_RECORD_AUXTRACE).
    skip: u64,
}

impl<'f> RecordStream<'f> {
    pub(crate) fn new(
        file: &'f File,
        start: u64,
        end: u64,
        e: Endian,
        tee: Option<&'f mut File>,
    ) -> Self {
        RecordStream {
            file,
            tee,
            buf: vec![0; READ_CHUNK],
            lo: 0,
            hi: 0,
            pos: start,
            end,
            e,
            skip: 0,
        }
    }

    /// Steps over `n` bytes of the range (read and teed like the rest).
    fn skip_bytes(&mut self, mut n: u64) -> Result<(), StreamError> {
        while n > 0 {
            if self.hi == self.lo {
                self.fill(1)?;
            }
            let take = ((self.hi - self.lo) as u64).min(n);
            self.lo += take as usize;
            self.pos += take;
            n -= take;
        }
        Ok(())
    }

    /// Makes at least `need` bytes (<= the buffer size) available at `lo`.
    fn fill(&mut self, need: usize) -> Result<(), StreamError> {
        use std::os::unix::fs::FileExt;
        if self.hi - self.lo >= need {
            return Ok(());
        }
        self.buf.copy_within(self.lo..self.hi, 0);
        self.hi -= self.lo;
        self.lo = 0;
        while self.hi < need {
            let left = (self.end - self.pos) as usize - self.hi;
            // Read whole chunks even for a small `need`: each byte of the
            // range is read (and teed) exactly once.
            let want = left.min(self.buf.len() - self.hi);
            let n = if want == 0 {
                0
            } else {
                self.file.read_at(
                    &mut self.buf[self.hi..self.hi + want],
                    self.pos + self.hi as u64,
                )?
            };
            if n == 0 {
                return Err(StreamError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ended early (did it shrink while being read?)",
                )));
            }
            if let Some(t) = self.tee.as_mut() {
                t.write_all(&self.buf[self.hi..self.hi + n])
                    .map_err(StreamError::Tee)?;
            }
            self.hi += n;
        }
        Ok(())
    }

    /// The next record: (offset, header, body).
    #[inline]
    pub(crate) fn next(&mut self) -> Result<Option<Rec<'_>>, StreamError> {
        // The common case, a whole ordinary record already in the buffer
        // (which never holds bytes past `end`), without leaving this
        // function; everything else below.
        if self.skip == 0 && self.hi - self.lo >= 8 {
            let lo = self.lo;
            if let Some(h) = RecordHeader::parse(&self.buf[lo..lo + 8], self.e) {
                let size = usize::from(h.size);
                if size >= 8
                    && self.hi - lo >= size
                    && h.type_ != types::AUXTRACE
                    && h.type_ != types::HEADER_TRACING_DATA
                {
                    let at = self.pos;
                    self.lo += size;
                    self.pos += size as u64;
                    return Ok(Some((at, h, &self.buf[lo + 8..lo + size])));
                }
            }
        }
        self.next_slow()
    }

    /// [`RecordStream::next`] when the record is not whole in the buffer,
    /// is malformed or has data after it.
    #[inline(never)]
    fn next_slow(&mut self) -> Result<Option<Rec<'_>>, StreamError> {
        let skip = std::mem::take(&mut self.skip);
        self.skip_bytes(skip)?;
        if self.pos >= self.end {
            return Ok(None);
        }
        let at = self.pos;
        if self.end - at < 8 {
            return Err(FormatError::at(at, K::StrayBytes(self.end - at)).into());
        }
        self.fill(8)?;
        let h = RecordHeader::parse(&self.buf[self.lo..self.lo + 8], self.e)
            .ok_or(FormatError::at(at, K::Truncated("record header")))?;
        if h.size < 8 {
            let kind = K::RecordTooSmall {
                record_type: h.type_,
                size: h.size,
            };
            return Err(FormatError::at(at, kind).into());
        }
        let size = usize::from(h.size);
        if at + size as u64 > self.end {
            let kind = K::RecordPastEnd {
                record_type: h.type_,
                size: h.size,
                end: self.end,
            };
            return Err(FormatError::at(at, kind).into());
        }
        self.fill(size)?;
        let lo = self.lo;
        self.lo += size;
        self.pos += size as u64;
        let body = &self.buf[lo + 8..lo + size];
        // Records whose data follows them outside their size.
        let after = match h.type_ {
            types::AUXTRACE => Some((
                Rd(self.e).u64(body, 0),
                "AUXTRACE record",
                "AUXTRACE data size (past the end of the data)",
            )),
            types::HEADER_TRACING_DATA => Some((
                Rd(self.e).u32(body, 0).map(u64::from),
                "HEADER_TRACING_DATA record",
                "tracing data size (past the end of the data)",
            )),
            _ => None,
        };
        if let Some((size, short, what)) = after {
            let size = size.ok_or(FormatError::at(at, K::Truncated(short)))?;
            if size > self.end - self.pos {
                let kind = K::Implausible { what, value: size };
                return Err(FormatError::at(at, kind).into());
            }
            self.skip = size;
        }
        Ok(Some((at, h, body)))
    }
}

/// Streaming zstd decoder for PERF_RECORD_COMPRESSED payloads; records may
/// span payloads, so the undecoded tail is kept. Records are handed out after
/// every output chunk, so memory stays within one record plus one chunk
/// whatever a payload expands to.
pub(crate) struct Decompressor {
    dec: zstd::stream::raw::Decoder<'static>,
    pending: Vec<u8>,
    out: Vec<u8>,
    /// zstd's hint after the last payload: how many input bytes it needs
    /// next (0: the frame ended).
    hint: usize,
}

impl Decompressor {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Decompressor {
            dec: zstd::stream::raw::Decoder::new()?,
            pending: Vec::new(),
            out: vec![0; 1 << 16],
            hint: 0,
        })
    }

    /// Decodes one payload, at most `cap` bytes of output, and calls `f` for
    /// every complete inner record.
    pub(crate) fn feed(
        &mut self,
        at: u64,
        payload: &[u8],
        e: Endian,
        cap: u64,
        mut f: impl FnMut(RecordHeader, &[u8]) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
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
            self.hint = hint;
            produced += n as u64;
            if produced > cap {
                let kind = K::Implausible {
                    what: "decompressed size of one COMPRESSED record (over the recording's buffer size)",
                    value: produced,
                };
                return Err(FormatError::at(at, kind));
            }
            self.pending.extend_from_slice(&self.out[..n]);
            self.hand_out(at, e, &mut f)?;
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
                self.dec
                    .reinit()
                    .map_err(|err| FormatError::at(at, K::Compressed(format!("zstd: {err}"))))?;
                stalled = true;
            } else {
                stalled = false;
            }
        }
        Ok(())
    }

    /// Calls `f` for the complete records decoded so far and drops them.
    fn hand_out(
        &mut self,
        at: u64,
        e: Endian,
        f: &mut impl FnMut(RecordHeader, &[u8]) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        let mut off = 0;
        while self.pending.len() - off >= 8 {
            let h = RecordHeader::parse(&self.pending[off..], e)
                .ok_or(FormatError::at(at, K::Truncated("inner record header")))?;
            if h.size < 8 {
                let kind = K::RecordTooSmall {
                    record_type: h.type_,
                    size: h.size,
                };
                return Err(FormatError::at(at, kind));
            }
            let size = usize::from(h.size);
            if self.pending.len() - off < size {
                break;
            }
            f(h, &self.pending[off + 8..off + size])?;
            off += size;
        }
        self.pending.drain(..off);
        Ok(())
    }

    /// At the end of the input: a partial record left over, or a zstd block
    /// cut in the middle, means the compressed data was cut short. perf
    /// flushes its stream after every record but never ends the frame, so a
    /// frame that is open at a block boundary (zstd then asks for the next
    /// 3-byte block header) is complete. `at` is the offset of the last
    /// compressed record.
    pub(crate) fn finish(&self, at: u64) -> Result<(), FormatError> {
        const BLOCK_HEADER: usize = 3;
        if !self.pending.is_empty() || !matches!(self.hint, 0 | BLOCK_HEADER) {
            let kind = K::Truncated("compressed data (unfinished zstd frame or record)");
            return Err(FormatError::at(at, kind));
        }
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

/// Progress on stderr for big inputs when stderr is a terminal.
pub(crate) struct Progress {
    total: u64,
    next: u64,
    on: bool,
    what: &'static str,
}

impl Progress {
    pub(crate) fn new(what: &'static str, total: u64) -> Progress {
        Progress {
            total,
            next: 0,
            on: total >= 64 << 20 && io::stderr().is_terminal(),
            what,
        }
    }
    pub(crate) fn at(&mut self, pos: u64) {
        if self.on && pos >= self.next {
            eprint!(
                "\rmmap2-synth: {} {:3}%",
                self.what,
                pos * 100 / self.total.max(1)
            );
            self.next = pos + (self.total / 100).max(1 << 20);
        }
    }
    pub(crate) fn done(&self) {
        if self.on {
            eprintln!("\rmmap2-synth: {} 100%", self.what);
        }
    }
}

/// Pages of the files copied: a copy whose source and destination offsets
/// agree modulo this goes through the kernel at `cp`'s speed.
pub const PAGE: u64 = 4096;

/// Copies `len` bytes at `off` of `from` to the current position of `to`.
///
/// When source and destination offsets are congruent modulo [`PAGE`],
/// `copy_file_range` (what std's `io::copy` uses between files) is as fast as
/// `cp` (100 MB on ext4: 28 ms at the same offset or shifted 256 KiB). Shifted
/// by other amounts the kernel's splice path is slower (41 ms) than plain
/// `pread`/`write` through a 1 MiB buffer (33 ms), so such copies take that.
pub(crate) fn copy_range(from: &File, off: u64, len: u64, to: &mut File) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let dest = to.stream_position()?;
    let mut progress = Progress::new("copying", len);
    let mut done = 0;
    let mut buf = Vec::new();
    while done < len {
        let n = if dest.abs_diff(off) % PAGE == 0 {
            let mut f = from;
            f.seek(SeekFrom::Start(off + done))?;
            io::copy(&mut f.take((len - done).min(256 << 20)), to)?
        } else {
            if buf.is_empty() {
                buf = vec![0u8; (1 << 20).min(len as usize)];
            }
            let want = (len - done).min(buf.len() as u64) as usize;
            let n = from.read_at(&mut buf[..want], off + done)?;
            to.write_all(&buf[..n])?;
            n as u64
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "input shrank while being copied",
            ));
        }
        done += n;
        progress.at(done);
    }
    progress.done();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::consts::types;
    use crate::perf::record;

    // The stream hands out every record of the range and tees exactly the
    // range's bytes; a record claiming size < 8 is an error at its offset.
    #[test]
    fn records_and_tee() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let e = Endian::Little;
        let mut bytes = vec![0xee; 16];
        for t in [types::FINISHED_ROUND, types::FINISHED_INIT, 4000] {
            record::encode_empty(&mut bytes, e, t);
        }
        bytes.extend([0xee; 4]);
        let input = dir.join("in");
        std::fs::write(&input, &bytes).unwrap();
        let f = File::open(&input).unwrap();
        let mut out = File::create(dir.join("tee")).unwrap();
        let mut seen = Vec::new();
        {
            let mut s = RecordStream::new(&f, 16, 40, e, Some(&mut out));
            while let Some((at, h, body)) = s.next().ok().flatten() {
                seen.push((at, h.type_, body.len()));
            }
        }
        assert_eq!(seen, vec![(16, 68, 0), (24, 82, 0), (32, 4000, 0)]);
        assert_eq!(std::fs::read(dir.join("tee")).unwrap(), &bytes[16..40]);
        bytes[22] = 4; // size 4
        std::fs::write(&input, &bytes).unwrap();
        let f = File::open(&input).unwrap();
        let mut s = RecordStream::new(&f, 16, 40, e, None);
        match s.next() {
            Err(StreamError::Format(err)) => assert_eq!(err.offset, 16),
            _ => panic!("size 4 accepted"),
        }
    }

    // Records of every size, straddling the buffer's edges, and AUXTRACE
    // data after its record come back exactly as written, in both byte
    // orders (the in-buffer fast path and the refilling one agree).
    #[test]
    fn records_across_buffer_edges() {
        let tmp = tempfile::tempdir().unwrap();
        for e in [Endian::Little, Endian::Big] {
            let mut bytes = Vec::new();
            let mut want = Vec::new();
            let mut x = 12345u32;
            while bytes.len() < 3 * READ_CHUNK + 1000 {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                // mostly small records, some near the 64 KiB limit
                let size = if x.is_multiple_of(17) {
                    65528
                } else {
                    16 + 8 * (x >> 8) as usize % 400
                };
                let t = if x.is_multiple_of(29) {
                    types::AUXTRACE
                } else {
                    9
                };
                let at = bytes.len() as u64;
                RecordHeader {
                    type_: t,
                    misc: (x & 0xffff) as u16,
                    size: size as u16,
                }
                .put(&mut bytes, e);
                let body_at = bytes.len();
                bytes.resize(body_at + size - 8, (x >> 3) as u8);
                let mut aux = 0;
                if t == types::AUXTRACE {
                    aux = u64::from(x % 5000);
                    let n = if e == Endian::Little {
                        aux.to_le_bytes()
                    } else {
                        aux.to_be_bytes()
                    };
                    bytes[body_at..body_at + 8].copy_from_slice(&n);
                }
                want.push((at, t, bytes[body_at..].to_vec()));
                bytes.resize(bytes.len() + aux as usize, 0xaa);
            }
            let input = tmp.path().join("in");
            std::fs::write(&input, &bytes).unwrap();
            let f = File::open(&input).unwrap();
            let mut s = RecordStream::new(&f, 0, bytes.len() as u64, e, None);
            let mut seen = Vec::new();
            while let Some((at, h, body)) = s.next().unwrap() {
                seen.push((at, h.type_, body.to_vec()));
            }
            assert_eq!(seen.len(), want.len());
            assert!(seen == want, "records differ ({e:?})");
        }
    }

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
}
