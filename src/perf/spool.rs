//! Copying a stream input (stdin, a FIFO) to the unlinked file it is then
//! read from, record by record, so that the copy stops where the stream
//! stops being perf.data. A stream has no zero-filled tail to step over
//! (only a file whose size was written before its blocks were has one): a
//! record header claiming under 8 bytes (zeros, garbage) ends the copy at
//! once, the header copied for the reader to report (or `--salvage` to cut
//! at), nothing after it read. `(cat rec.data; cat /dev/zero) | mmap2-synth
//! dump -` copied zeros until the disk was full.

use std::io::{self, Read, Write};

use super::consts::{types, FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use super::header::Kind;
use crate::bytes::Rd;

/// Most bytes of data after one record (AUXTRACE, HEADER_TRACING_DATA)
/// copied: one AUX buffer or tracing blob, which perf keeps far smaller.
const MAX_DATA_AFTER: u64 = 4 << 30;

/// Why a copy failed: reading the stream, or writing the copy (its
/// directory full, most likely), which the caller reports apart.
#[derive(Debug)]
pub(super) enum SpoolError {
    /// Reading the stream failed.
    Read(io::Error),
    /// Writing the copy failed.
    Write(io::Error),
}

/// How the copy of a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spooled {
    /// The stream ended (at a record boundary or inside a record: the
    /// reader tells which); it held `0` bytes.
    Ended(u64),
    /// The stream stopped being perf.data: a record header claiming less
    /// than its own 8 bytes (the last 8 of the `0` bytes copied) or too
    /// much data after it; the rest of the stream was not read.
    Stopped(u64),
}

/// Copies the pipe-mode stream `src` to `dst`: its header, then its
/// records whole, each with the data an AUXTRACE or HEADER_TRACING_DATA
/// record has after it, until the stream ends, a record header claims
/// under 8 bytes or a record more than [`MAX_DATA_AFTER`] after it. What
/// the copy holds is bounded by the bytes that really arrive (a size
/// claimed is copied only as far as the stream holds it). A
/// stream that is no pipe-mode perf.data is copied only as far as the
/// reader needs to say what it is (a file-mode header's 104 bytes).
pub(super) fn spool(src: &mut impl Read, dst: &mut impl Write) -> Result<Spooled, SpoolError> {
    let mut copied = 0;
    let mut head = [0u8; PIPE_HEADER_SIZE as usize];
    if copy_exact(src, dst, &mut head, &mut copied)? < head.len() {
        return Ok(Spooled::Ended(copied));
    }
    let e = match Kind::of(&head) {
        Ok(Kind::Pipe(e)) => e,
        _ => {
            let mut rest = [0u8; (FILE_HEADER_SIZE - PIPE_HEADER_SIZE) as usize];
            copy_exact(src, dst, &mut rest, &mut copied)?;
            return Ok(Spooled::Ended(copied));
        }
    };
    let r = Rd(e);
    // the largest record: 64 KiB
    let mut buf = vec![0u8; usize::from(u16::MAX)];
    loop {
        let mut h = [0u8; 8];
        if copy_exact(src, dst, &mut h, &mut copied)? < h.len() {
            return Ok(Spooled::Ended(copied));
        }
        let (Some(kind), Some(size)) = (r.u32(&h, 0), r.u16(&h, 6)) else {
            return Ok(Spooled::Ended(copied));
        };
        if size < 8 {
            return Ok(Spooled::Stopped(copied));
        }
        let body = &mut buf[..usize::from(size) - 8];
        if copy_exact(src, dst, body, &mut copied)? < body.len() {
            return Ok(Spooled::Ended(copied));
        }
        // the data after the record, its size at the start of its body
        let after = match kind {
            types::AUXTRACE => r.u64(body, 0),
            types::HEADER_TRACING_DATA => r.u32(body, 0).map(u64::from),
            _ => None,
        };
        if after.is_some_and(|n| n > MAX_DATA_AFTER) {
            // not a recording: the reader says so (or `--salvage` cuts)
            return Ok(Spooled::Stopped(copied));
        }
        if let Some(n) = after.filter(|&n| n > 0) {
            if copy_n(src, dst, n, &mut buf, &mut copied)? < n {
                return Ok(Spooled::Ended(copied));
            }
        }
    }
}

/// Copies `n` bytes from `src` to `dst` (fewer only at its end) through
/// `buf`, adding them to `copied`; returns how many.
fn copy_n(
    src: &mut impl Read,
    dst: &mut impl Write,
    n: u64,
    buf: &mut [u8],
    copied: &mut u64,
) -> Result<u64, SpoolError> {
    let mut left = n;
    while left > 0 {
        let len = left.min(buf.len() as u64) as usize;
        let chunk = &mut buf[..len];
        let got = copy_exact(src, dst, chunk, copied)?;
        left -= got as u64;
        if got < chunk.len() {
            break;
        }
    }
    Ok(n - left)
}

/// Reads `buf.len()` bytes from `src` (fewer only at its end) and writes
/// what it read to `dst`, adding it to `copied`; returns how many.
fn copy_exact(
    src: &mut impl Read,
    dst: &mut impl Write,
    buf: &mut [u8],
    copied: &mut u64,
) -> Result<usize, SpoolError> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(SpoolError::Read(e)),
        }
    }
    dst.write_all(&buf[..got]).map_err(SpoolError::Write)?;
    *copied += got as u64;
    Ok(got)
}

/// A stream input whose reads are told to [`crate::interrupt`]: the sign
/// of life that keeps a signal put off while the stream is read.
pub(super) struct Counted<'a>(pub(super) &'a std::fs::File);

impl io::Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (&mut &*self.0).read(buf)?;
        crate::interrupt::stream_progress(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{Endian, PutExt};
    use crate::perf::record::{self, RecordHeader};

    /// A pipe-mode header and three records in byte order `e`: a
    /// FINISHED_ROUND, an AUXTRACE with 16 bytes of data after it, a
    /// FINISHED_ROUND (8 + 16 + 40 + 8 bytes).
    fn stream(e: Endian) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(match e {
            Endian::Little => *b"PERFILE2",
            Endian::Big => *b"2ELIFREP",
        });
        b.put_u64(e, PIPE_HEADER_SIZE);
        record::encode_empty(&mut b, e, types::FINISHED_ROUND);
        RecordHeader {
            type_: types::AUXTRACE,
            misc: 0,
            size: 40,
        }
        .put(&mut b, e);
        b.put_u64(e, 16);
        b.resize(64, 0);
        b.resize(80, 0xaa);
        record::encode_empty(&mut b, e, types::FINISHED_ROUND);
        b
    }

    // The records are copied whole with the data after them, in both byte
    // orders; the copy stops right after a header of zeros (the zeros after
    // it not read), one claiming 4 bytes, or an AUXTRACE claiming 5 GiB
    // after it, and at the end of a stream cut anywhere, holding what
    // arrived.
    #[test]
    fn the_copy_stops_where_the_records_do() {
        for e in [Endian::Little, Endian::Big] {
            let s = stream(e);
            let run = |bytes: &[u8]| {
                let mut src = bytes;
                let mut dst = Vec::new();
                let got = spool(&mut src, &mut dst).unwrap();
                (got, dst, src.len())
            };
            assert_eq!(run(&s), (Spooled::Ended(88), s.clone(), 0));
            let mut z = s.clone();
            z.resize(z.len() + 100_000, 0);
            assert_eq!(run(&z), (Spooled::Stopped(96), z[..96].to_vec(), 99_992));
            let mut bad = s.clone();
            RecordHeader {
                type_: 9,
                misc: 0,
                size: 4,
            }
            .put(&mut bad, e);
            bad.resize(200, 0x11);
            assert_eq!(run(&bad).0, Spooled::Stopped(96));
            let mut huge = s.clone();
            let claim = match e {
                Endian::Little => (5u64 << 30).to_le_bytes(),
                Endian::Big => (5u64 << 30).to_be_bytes(),
            };
            huge[32..40].copy_from_slice(&claim);
            assert_eq!(run(&huge).0, Spooled::Stopped(64));
            for cut in 0..s.len() {
                assert_eq!(
                    run(&s[..cut]),
                    (Spooled::Ended(cut as u64), s[..cut].to_vec(), 0)
                );
            }
        }
    }

    // A file-mode header or garbage is copied only as far as the reader
    // needs to refuse it: 104 bytes at most.
    #[test]
    fn no_pipe_header_copies_little() {
        let mut f = b"PERFILE2".to_vec();
        f.put_u64(Endian::Little, FILE_HEADER_SIZE);
        f.resize(1 << 20, 0);
        let mut dst = Vec::new();
        assert_eq!(spool(&mut &f[..], &mut dst).unwrap(), Spooled::Ended(104));
        let garbage = vec![0x41u8; 1 << 20];
        assert_eq!(
            spool(&mut &garbage[..], &mut dst).unwrap(),
            Spooled::Ended(104)
        );
    }
}
