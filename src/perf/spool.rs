//! Copying a stream input (stdin, a FIFO) to the unlinked file it is read
//! from, record by record, so the copy ends where the stream stops being
//! perf.data: at a record header the reader refuses (size under 8: a
//! zero-filled tail, garbage). A recording followed by endless zeros
//! (`(cat rec; cat /dev/zero) | mmap2-synth dump -`) was copied until the
//! disk was full; now the copy holds the records and that one header, and
//! the reader then reports it (or, with `--salvage`, cuts there).

use std::io::{self, BufRead, Read, Write};

use super::consts::{types, FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use super::header::endian_of;
use crate::bytes::Rd;

/// Most bytes of data after one record (AUXTRACE, HEADER_TRACING_DATA)
/// copied: one AUX buffer or tracing blob, which perf keeps far smaller.
const MAX_DATA_AFTER: u64 = 4 << 30;

/// Copies the stream `src` to `dst` as far as it holds records and returns
/// the bytes copied: the pipe-mode header, then each record whole
/// (AUXTRACE and HEADER_TRACING_DATA with the data after them), up to the
/// end of the stream, the first header of a size under 8 (copied, nothing
/// after it read), a record claiming over [`MAX_DATA_AFTER`] after it, or
/// a record the stream ends inside. A stream that is not pipe-mode perf.data
/// is copied as far as the reader needs to say so (a file-mode header's
/// 104 bytes).
pub fn spool_records(src: &mut impl BufRead, dst: &mut impl Write) -> io::Result<u64> {
    let mut copied = 0u64;
    let mut head = [0u8; PIPE_HEADER_SIZE as usize];
    let got = copy_some(src, dst, &mut head, &mut copied)?;
    let pipe = endian_of(&head[..got])
        .filter(|&e| got == head.len() && Rd(e).u64(&head, 8) == Some(PIPE_HEADER_SIZE));
    let Some(e) = pipe else {
        let rest = FILE_HEADER_SIZE - got as u64;
        copied += io::copy(&mut src.take(rest), dst)?;
        return Ok(copied);
    };
    let rd = Rd(e);
    loop {
        // the record header, and for AUXTRACE the size of its AUX data
        let mut h = [0u8; 16];
        if copy_some(src, dst, &mut h[..8], &mut copied)? < 8 {
            return Ok(copied);
        }
        let (Some(kind), Some(size)) = (rd.u32(&h, 0), rd.u16(&h, 6)) else {
            return Ok(copied);
        };
        if size < 8 {
            return Ok(copied);
        }
        let mut rest = u64::from(size) - 8;
        // the size of the data after the record, at the start of its body
        let after = match kind {
            types::AUXTRACE => 8,
            types::HEADER_TRACING_DATA => 4,
            _ => 0,
        };
        if after > 0 && rest >= after as u64 {
            if copy_some(src, dst, &mut h[8..8 + after], &mut copied)? < after {
                return Ok(copied);
            }
            rest -= after as u64;
            let data = match after {
                8 => rd.u64(&h, 8),
                _ => rd.u32(&h, 8).map(u64::from),
            };
            match data {
                // (one AUX buffer: far below this; claiming more is not
                // a recording, and the reader says so)
                Some(n) if n <= MAX_DATA_AFTER => rest += n,
                _ => return Ok(copied),
            }
        }
        let n = io::copy(&mut src.take(rest), dst)?;
        copied += n;
        if n < rest {
            return Ok(copied);
        }
    }
}

/// Reads up to `buf.len()` bytes (fewer only at the end of the stream),
/// copies them to `dst` and counts them.
fn copy_some(
    src: &mut impl Read,
    dst: &mut impl Write,
    buf: &mut [u8],
    copied: &mut u64,
) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    dst.write_all(&buf[..got])?;
    *copied += got as u64;
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::Endian;

    fn pipe_header(e: Endian) -> Vec<u8> {
        let mut v = super::super::header::magic_bytes(e).to_vec();
        v.extend_from_slice(&e.u64_bytes(PIPE_HEADER_SIZE));
        v
    }

    fn record(e: Endian, kind: u32, body: &[u8]) -> Vec<u8> {
        let mut v = e.u32_bytes(kind).to_vec();
        v.extend_from_slice(&e.u16_bytes(0));
        v.extend_from_slice(&e.u16_bytes(8 + body.len() as u16));
        v.extend_from_slice(body);
        v
    }

    fn spool(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let n = spool_records(&mut io::BufReader::new(bytes), &mut out).unwrap();
        assert_eq!(n, out.len() as u64);
        out
    }

    // Whole streams are copied as they are, in both byte orders, AUXTRACE
    // with its AUX data.
    #[test]
    fn records_are_copied_whole() {
        for e in [Endian::Little, Endian::Big] {
            let mut s = pipe_header(e);
            s.extend(record(e, 3, b"comm\0\0\0\0"));
            let mut aux = e.u64_bytes(5).to_vec();
            aux.extend_from_slice(&[0; 32]);
            s.extend(record(e, types::AUXTRACE, &aux));
            s.extend_from_slice(b"12345");
            s.extend(record(e, 9, &[7; 24]));
            assert_eq!(spool(&s), s);
        }
    }

    // The copy ends with the first header of a size under 8 (zeros after a
    // recording, garbage): nothing after it is read, however much follows.
    #[test]
    fn the_copy_ends_at_a_header_the_reader_refuses() {
        let e = Endian::Little;
        let mut s = pipe_header(e);
        s.extend(record(e, 3, &[1; 16]));
        let good = s.len();
        let endless = io::Read::chain(&s[..], io::repeat(0));
        let mut out = Vec::new();
        spool_records(&mut io::BufReader::new(endless), &mut out).unwrap();
        assert_eq!(out.len(), good + 8);
        assert_eq!(out[..good], s[..]);
        // a stream cut inside a record: what arrived
        assert_eq!(spool(&s[..good - 3]), s[..good - 3]);
    }

    // A stream that is not pipe-mode perf.data is copied only as far as
    // the reader needs to refuse it (a file-mode header, bad magic).
    #[test]
    fn other_streams_are_copied_only_to_their_header() {
        let mut file_mode = super::super::header::magic_bytes(Endian::Little).to_vec();
        file_mode.extend_from_slice(&FILE_HEADER_SIZE.to_le_bytes());
        let endless = io::Read::chain(&file_mode[..], io::repeat(1));
        let mut out = Vec::new();
        spool_records(&mut io::BufReader::new(endless), &mut out).unwrap();
        assert_eq!(out.len() as u64, FILE_HEADER_SIZE);
        let mut out = Vec::new();
        spool_records(&mut io::BufReader::new(io::repeat(0)), &mut out).unwrap();
        assert_eq!(out.len() as u64, FILE_HEADER_SIZE);
        assert_eq!(spool(b"short"), b"short");
    }
}
