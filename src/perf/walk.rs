//! The one walk over a perf.data's records that every reader shares: attrs
//! from the attr section or HEADER_ATTR records, records inside COMPRESSED
//! ones decoded one by one (those inside a COMPRESSED record inside
//! another too, in its place: perf reads them so), each record checked
//! (`check.rs`) before a visitor sees it.

use std::os::unix::fs::FileExt;

use super::attr::{pipe_attr, Attrs};
use super::check::check;
use super::compress::{compressed_payload, Decompressor};
use super::consts::{feature, types};
use super::error::{FormatError, FormatErrorKind as K};
use super::input::{io_err, Input, InputError, Layout};
use super::progress::Progress;
use super::record::RecordHeader;
use super::stream::{RecordStream, StreamError};
use crate::bytes::Rd;

/// Largest decompressed size of one COMPRESSED record when the recording
/// does not give perf's buffer size (HEADER_COMPRESSED): 64 MiB.
pub const DEFAULT_DECOMPRESSED_CAP: u64 = 64 << 20;

/// What a walk found besides what the visitor gathered.
#[derive(Debug, Clone)]
pub struct Walk {
    /// The attrs with their ids.
    pub attrs: Attrs,
    /// Records seen (those inside compressed ones counted one by one).
    pub records: u64,
    /// Pipe mode: the offset where bytes that do not form records begin (kept
    /// as they are; perf's stderr appended to its stdout, typically).
    pub trailing: Option<u64>,
    /// The first COMPRESSED record perf's reader does not read as this walk
    /// did (it refuses one that decodes to no bytes, or holds two zstd
    /// frames; one holding a COMPRESSED record it may read twice): its
    /// offset, and what it holds. A copy of the compressed records as they
    /// are would not be read as the input was.
    pub odd_compressed: Option<(u64, &'static str)>,
}

/// What a walk hands to its visitor.
pub trait Visitor {
    /// Every record as stored at the top level (a COMPRESSED record as
    /// itself, with its body), before its contents are visited.
    fn stored(&mut self, _at: u64, _h: &RecordHeader, _body: &[u8]) {}

    /// Every record, those inside compressed ones one by one, at any
    /// depth, never a COMPRESSED record (`at` is then the offset of the
    /// top-level compressed record; an AUXTRACE or
    /// HEADER_TRACING_DATA, whose data follows at `at + size`, is never
    /// one of those).
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError>;
}

impl Input {
    /// Walks every record.
    pub fn walk(&self, visitor: &mut impl Visitor) -> Result<Walk, InputError> {
        #[cfg(test)]
        if self.path.file_name() == Some(tests::PANICKING_WALK.as_ref()) {
            panic!("injected: a walk of {} panics", tests::PANICKING_WALK);
        }
        let mut w = Walk {
            attrs: match &self.layout {
                Layout::File { header, .. } => self.file_attrs(header)?,
                Layout::Pipe(_) => Attrs::default(),
            },
            records: 0,
            trailing: None,
            odd_compressed: None,
        };
        let e = self.endian();
        let (start, end) = self.records_range();
        let mut stream = RecordStream::new(&self.file, start, end, e).of_stream(self.streamed);
        let mut dec = None;
        let mut last_compressed = 0;
        let cap = self.decompressed_cap()?;
        let mut progress = Progress::new("scanning", end - start);
        let pipe = matches!(self.layout, Layout::Pipe(_));
        loop {
            let next = match stream.next() {
                Ok(next) => next,
                // perf's own messages appended to a pipe-mode stream
                // (`2>&1`): text where the next record should be. Anything
                // else is damage, reported as such.
                Err(StreamError::Format(err)) if pipe && self.text_from(err.offset) => {
                    w.trailing = Some(err.offset);
                    break;
                }
                Err(err) => return Err(self.stream_error(err)),
            };
            let Some((at, h, body)) = next else { break };
            progress.at(at - start);
            visitor.stored(at, &h, body);
            check(at, &h, body, e).map_err(|err| self.format(err))?;
            if pipe && h.type_ == types::HEADER_ATTR {
                let (attr, ids) = pipe_attr(at, body, e).map_err(|err| self.format(err))?;
                w.attrs.push(attr, ids, body);
            }
            let payload = compressed_payload(at, &h, body, e).map_err(|err| self.format(err))?;
            let Some(payload) = payload else {
                w.records += 1;
                visitor
                    .record(at, h, body, &w.attrs)
                    .map_err(|err| self.format(err))?;
                continue;
            };
            last_compressed = at;
            let d = self.decompressor(&mut dec)?;
            let (attrs, records) = (&w.attrs, &mut w.records);
            d.feed(at, payload, e, cap, |ih, ib| {
                if let Some(what) = data_follows(ih.type_) {
                    return Err(FormatError::at(at, K::InsideCompressed(what)));
                }
                check(at, &ih, ib, e)?;
                *records += 1;
                visitor.record(at, ih, ib, attrs)
            })
            .map_err(|err| self.format(err))?;
        }
        progress.done();
        // salvaged: a record cut short at the end of the decompressed
        // data is dropped, as the opening found (`Salvaged::inner`)
        let inner_cut = self.salvaged.as_ref().is_some_and(|s| s.inner.is_some());
        if let (Some(d), false) = (&dec, inner_cut) {
            d.finish(last_compressed).map_err(|err| self.format(err))?;
        }
        w.odd_compressed = dec.as_ref().and_then(Decompressor::odd);
        if w.attrs.list.is_empty() {
            let err = FormatError::at(start, K::NoAttrs(" (HEADER_ATTR) in the stream"));
            return Err(self.format(err));
        }
        Ok(w)
    }

    /// Whether the bytes from `at` are text as perf's messages are: lines
    /// (the last byte a newline, at least 2 bytes) of printable ASCII,
    /// tabs and UTF-8 (the first 4 KiB looked at). A record cut short is
    /// never that: its second byte, its type's high byte, is 0; so a
    /// stream cut a byte into its last record (a printable type byte,
    /// FINISHED_ROUND's `D`) is stray bytes, not text.
    pub(crate) fn text_from(&self, at: u64) -> bool {
        let left = self.len.saturating_sub(at);
        let mut buf = vec![0u8; left.min(4096) as usize];
        let mut last = [0u8];
        left >= 2
            && self.file.read_exact_at(&mut buf, at).is_ok()
            && self.file.read_exact_at(&mut last, self.len - 1).is_ok()
            && last == *b"\n"
            && buf
                .iter()
                .all(|&c| matches!(c, b'\t' | b'\n' | b'\r' | 0x20..=0x7e | 0x80..))
    }

    fn decompressor<'d>(
        &self,
        dec: &'d mut Option<Decompressor>,
    ) -> Result<&'d mut Decompressor, InputError> {
        if dec.is_none() {
            *dec = Some(Decompressor::new().map_err(io_err("decompressing", &self.path))?);
        }
        Ok(dec.as_mut().expect("just set"))
    }

    /// The most one COMPRESSED record may decompress to: the buffer perf
    /// decompresses into (HEADER_COMPRESSED's mmap_len, at least 1 MiB), or
    /// [`DEFAULT_DECOMPRESSED_CAP`] when the recording does not say.
    pub(super) fn decompressed_cap(&self) -> Result<u64, InputError> {
        let mmap_len = self
            .feature(feature::COMPRESSED)?
            .and_then(|(_, b)| Rd(self.endian()).u32(&b, 16));
        Ok(mmap_len.map_or(DEFAULT_DECOMPRESSED_CAP, |n| u64::from(n).max(1 << 20)))
    }

    fn stream_error(&self, err: StreamError) -> InputError {
        match err {
            StreamError::Format(source) => self.format(source),
            StreamError::Io(source) => InputError::Io {
                op: "reading",
                path: self.path.clone(),
                source,
            },
        }
    }
}

/// The name of a record type whose data follows the record in the file,
/// outside its size (AUXTRACE, HEADER_TRACING_DATA). Inside a COMPRESSED
/// record nothing can follow it (perf never compresses them): readers would
/// take the bytes after the compressed record for its data.
fn data_follows(t: u32) -> Option<&'static str> {
    match t {
        types::AUXTRACE => Some("AUXTRACE"),
        types::HEADER_TRACING_DATA => Some("HEADER_TRACING_DATA"),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    /// An input of this file name makes [`Input::walk`] panic (unit tests
    /// only), so the tests of the engines around it see a panicking walk.
    pub(crate) const PANICKING_WALK: &str = "walk-panics.data";
}
