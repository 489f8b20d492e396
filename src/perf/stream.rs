//! The record reader every walk uses: records one by one from a byte range of
//! a file, through a small buffer. Compressed payloads are `compress`'s,
//! range copies `copy`'s.

use std::fs::File;
use std::io;

use super::consts::types;
use super::error::{FormatError, FormatErrorKind as K};
use super::record::RecordHeader;
use crate::bytes::{Endian, Rd};

/// Error from the record stream: format or reading.
#[derive(Debug)]
pub(crate) enum StreamError {
    /// Malformed data.
    Format(FormatError),
    /// Reading the input failed.
    Io(io::Error),
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

/// What the error says of an AUXTRACE record whose data runs past the end.
pub(crate) const AUX_PAST_END: &str = "AUXTRACE data size (past the end of the data)";
/// What the error says of a HEADER_TRACING_DATA record whose data runs
/// past the end.
pub(crate) const TRACING_PAST_END: &str = "tracing data size (past the end of the data)";

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
    /// Most bytes read after a record header of zeros to tell a tail
    /// zero-filled after a crash (holes are not read): [`ZERO_CHECK`], or
    /// all for `--salvage`, which needs to know where a cut is.
    zero_check: u64,
    /// The range is a stream's copy: a record header of zeros ends it where
    /// it is (nothing after it was read).
    stream: bool,
}

/// Most bytes a walk reads after a record header of zeros to say the tail
/// is zero-filled: a 16 GiB tail of zeros written out took 6 s to read
/// only to say so in an error.
pub(crate) const ZERO_CHECK: u64 = 4 << 20;

impl<'f> RecordStream<'f> {
    pub(crate) fn new(file: &'f File, start: u64, end: u64, e: Endian) -> Self {
        RecordStream {
            file,
            buf: vec![0; READ_CHUNK],
            lo: 0,
            hi: 0,
            pos: start,
            end,
            e,
            skip: 0,
            zero_check: ZERO_CHECK,
            stream: false,
        }
    }

    /// Reads all of a tail after a record header of zeros to tell whether
    /// it is zeros to the end (`--salvage`: a cut there or not).
    pub(crate) fn checking_all_zeros(mut self) -> Self {
        self.zero_check = u64::MAX;
        self
    }

    /// Marks the range as a stream's copy (see [`RecordStream::stream`]).
    pub(crate) fn of_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Steps over `n` bytes of the range (read like the rest).
    fn skip_bytes(&mut self, n: u64) -> Result<(), StreamError> {
        self.pass_bytes(n, |_| {})
    }

    /// Hands the next `n` bytes of the range to `f`, a buffer's worth at a
    /// time.
    fn pass_bytes(&mut self, mut n: u64, mut f: impl FnMut(&[u8])) -> Result<(), StreamError> {
        while n > 0 {
            if self.hi == self.lo {
                self.fill(1)?;
            }
            let take = ((self.hi - self.lo) as u64).min(n);
            f(&self.buf[self.lo..self.lo + take as usize]);
            self.lo += take as usize;
            self.pos += take;
            n -= take;
        }
        Ok(())
    }

    /// Hands the data the last record holds after it (an AUXTRACE record's
    /// AUX data, a HEADER_TRACING_DATA record's tracing data), which the
    /// next record would step over, to `f`: for a copy of the records.
    pub(crate) fn pass_data_after(&mut self, f: impl FnMut(&[u8])) -> Result<(), StreamError> {
        let n = std::mem::take(&mut self.skip);
        self.pass_bytes(n, f)
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
            // range is read exactly once.
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
            self.hi += n;
        }
        Ok(())
    }

    /// How far the bytes from the next record on are zero (a tail
    /// zero-filled after a crash), looking at most `zero_check` bytes far,
    /// see [`zeros_from`]; the stream is not to be read on after it (its
    /// buffer is overwritten).
    fn zeros_to_end(&mut self) -> Result<Option<u64>, StreamError> {
        (self.lo, self.hi) = (0, 0);
        let (upto, _) = zeros_from(
            self.file,
            self.pos,
            self.end,
            &mut self.buf,
            self.zero_check,
        )?;
        Ok(upto)
    }

    /// The next record: (offset, header, body). Always inlined: a call per
    /// record of a dense recording cost a tenth of a merge's scan
    /// (callgrind: ~12 of its ~280 instructions per record).
    #[inline(always)]
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
            let zero = h.type_ == 0 && h.misc == 0 && h.size == 0;
            let zeros = match zero {
                true if self.stream => return Err(FormatError::at(at, K::ZeroInStream).into()),
                true => self.zeros_to_end()?,
                false => None,
            };
            let kind = match zeros {
                Some(upto) => K::ZeroFilled {
                    checked: upto - at,
                    left: self.end - at,
                },
                None => K::RecordTooSmall {
                    record_type: h.type_,
                    size: h.size,
                },
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
            types::AUXTRACE => Some((Rd(self.e).u64(body, 0), "AUXTRACE record", AUX_PAST_END)),
            types::HEADER_TRACING_DATA => Some((
                Rd(self.e).u32(body, 0).map(u64::from),
                "HEADER_TRACING_DATA record",
                TRACING_PAST_END,
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

/// How far the bytes of `file[at..end)` are zero, reading at most `budget`
/// of them: Some(end) when all are, Some(where it stopped) when the budget
/// ran out first, None at the first other byte; and how many bytes it read.
/// Holes (lseek SEEK_DATA, through `sys`) are stepped over unread and free,
/// so a sparse tail of gigabytes costs a few calls (it was read whole: 0.7
/// s for 2 GiB); data is read in chunks of `buf` with `pread` (the file's
/// cursor is not ours). Where SEEK_DATA is not supported, everything is
/// read.
fn zeros_from(
    file: &File,
    mut at: u64,
    end: u64,
    buf: &mut [u8],
    budget: u64,
) -> io::Result<(Option<u64>, u64)> {
    use std::os::unix::fs::FileExt;
    // compared with zeros whole (a memcmp)
    let zeros = vec![0u8; buf.len()];
    let (mut holes, mut read) = (true, 0);
    while at < end {
        if holes {
            match crate::sys::seek_data(file, at) {
                Ok(Some(data)) if data < end => at = data.max(at),
                Ok(_) => break,
                Err(_) => holes = false,
            }
        }
        if read >= budget {
            return Ok((Some(at), read));
        }
        let n = (end - at).min(buf.len() as u64) as usize;
        let chunk = &mut buf[..n];
        file.read_exact_at(chunk, at)?;
        read += n as u64;
        if chunk[..] != zeros[..n] {
            return Ok((None, read));
        }
        at += n as u64;
    }
    Ok((Some(end), read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::consts::types;
    use crate::perf::record;

    // The stream hands out every record of the range and nothing outside
    // it; a record claiming size < 8 is an error at its offset.
    #[test]
    fn records_of_the_range() {
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
        let mut seen = Vec::new();
        {
            let mut s = RecordStream::new(&f, 16, 40, e);
            while let Some((at, h, body)) = s.next().ok().flatten() {
                seen.push((at, h.type_, body.len()));
            }
        }
        assert_eq!(seen, vec![(16, 68, 0), (24, 82, 0), (32, 4000, 0)]);
        bytes[22] = 4; // size 4
        std::fs::write(&input, &bytes).unwrap();
        let f = File::open(&input).unwrap();
        let mut s = RecordStream::new(&f, 16, 40, e);
        match s.next() {
            Err(StreamError::Format(err)) => assert_eq!(err.offset, 16),
            _ => panic!("size 4 accepted"),
        }
    }

    // A record header of zeros with only zeros after it to the end of the
    // range (longer than the buffer) is a zero-filled tail, its bytes
    // counted; one other byte after it makes it a record of size 0 again.
    #[test]
    fn a_zero_filled_tail_is_told_from_a_record_of_size_zero() {
        let e = Endian::Little;
        let mut bytes = Vec::new();
        record::encode_empty(&mut bytes, e, types::FINISHED_ROUND);
        bytes.resize(8 + 3 * READ_CHUNK + 5, 0);
        let f = tempfile::tempfile().unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &bytes, 0).unwrap();
        let end = bytes.len() as u64;
        let mut s = RecordStream::new(&f, 0, end, e);
        assert!(matches!(s.next(), Ok(Some((0, _, _)))));
        match s.next() {
            Err(StreamError::Format(err)) => {
                let all = K::ZeroFilled {
                    checked: end - 8,
                    left: end - 8,
                };
                assert_eq!((err.offset, err.kind), (8, all));
            }
            _ => panic!("no zero-filled tail"),
        }
        std::os::unix::fs::FileExt::write_all_at(&f, &[1], end - 1).unwrap();
        let mut s = RecordStream::new(&f, 0, end, e);
        s.next().unwrap();
        match s.next() {
            Err(StreamError::Format(err)) => assert!(
                matches!(err.kind, K::RecordTooSmall { size: 0, .. }),
                "{err}"
            ),
            _ => panic!("size 0 accepted"),
        }
    }

    // A zero-filled tail that is a 2 GiB hole is told from what follows it
    // without reading the hole: a few chunks read, whether data (zeros or
    // not) follows it or the hole runs to the end (it read all 2 GiB).
    #[test]
    fn a_sparse_zero_tail_is_not_read() {
        let f = tempfile::tempfile().unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[0; 100], 0).unwrap();
        let end = 100 + (2u64 << 30);
        f.set_len(end).unwrap();
        let mut buf = vec![0; READ_CHUNK];
        let (zero, read) = zeros_from(&f, 8, end, &mut buf, u64::MAX).unwrap();
        assert_eq!(zero, Some(end));
        assert!(read <= 2 * READ_CHUNK as u64, "{read} bytes read");
        // data after the hole: zeros, then a byte that is not
        std::os::unix::fs::FileExt::write_all_at(&f, &[0; 10], end).unwrap();
        let zero = zeros_from(&f, 8, end + 10, &mut buf, u64::MAX).unwrap().0;
        assert_eq!(zero, Some(end + 10));
        std::os::unix::fs::FileExt::write_all_at(&f, &[1], end + 10).unwrap();
        let (zero, read) = zeros_from(&f, 8, end + 11, &mut buf, u64::MAX).unwrap();
        assert_eq!(zero, None);
        assert!(read <= 3 * READ_CHUNK as u64, "{read} bytes read");
        // the stream finds the cut where the records stop
        let mut s = RecordStream::new(&f, 0, end, Endian::Little);
        match s.next() {
            Err(StreamError::Format(err)) => {
                let all = K::ZeroFilled {
                    checked: end,
                    left: end,
                };
                assert_eq!((err.offset, err.kind), (0, all));
            }
            _ => panic!("no zero-filled tail"),
        }
    }

    // A zero tail written out is read only ZERO_CHECK bytes far to say so
    // (the rest not claimed to be zero), all of it for --salvage (which
    // then tells a byte past the budget); a stream's header of zeros is
    // reported where it is, nothing after it read.
    #[test]
    fn a_zero_tail_is_checked_only_so_far() {
        let e = Endian::Little;
        let f = tempfile::tempfile().unwrap();
        let end = ZERO_CHECK + 3 * READ_CHUNK as u64;
        std::os::unix::fs::FileExt::write_all_at(&f, &vec![0; end as usize], 0).unwrap();
        let err_of = |s: &mut RecordStream| match s.next() {
            Err(StreamError::Format(err)) => (err.offset, err.kind),
            _ => panic!("a header of zeros accepted"),
        };
        let part = K::ZeroFilled {
            checked: ZERO_CHECK,
            left: end,
        };
        assert_eq!(
            err_of(&mut RecordStream::new(&f, 0, end, e)),
            (0, part.clone())
        );
        let all = K::ZeroFilled {
            checked: end,
            left: end,
        };
        let mut s = RecordStream::new(&f, 0, end, e).checking_all_zeros();
        assert_eq!(err_of(&mut s), (0, all));
        let mut s = RecordStream::new(&f, 0, end, e).of_stream(true);
        assert_eq!(err_of(&mut s), (0, K::ZeroInStream));
        std::os::unix::fs::FileExt::write_all_at(&f, &[1], end - 1).unwrap();
        assert_eq!(err_of(&mut RecordStream::new(&f, 0, end, e)), (0, part));
        let mut s = RecordStream::new(&f, 0, end, e).checking_all_zeros();
        let small = K::RecordTooSmall {
            record_type: 0,
            size: 0,
        };
        assert_eq!(err_of(&mut s), (0, small));
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
            let mut s = RecordStream::new(&f, 0, bytes.len() as u64, e);
            let mut seen = Vec::new();
            while let Some((at, h, body)) = s.next().unwrap() {
                seen.push((at, h.type_, body.to_vec()));
            }
            assert_eq!(seen.len(), want.len());
            assert!(seen == want, "records differ ({e:?})");
        }
    }
}
