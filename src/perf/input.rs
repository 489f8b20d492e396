//! A perf.data opened for reading (file or pipe mode, either byte order) and
//! the one walk over its records that every reader shares: attrs from the
//! attr section or HEADER_ATTR records, records inside COMPRESSED ones
//! decoded one by one, optionally teeing every byte read to an output.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::attr::Attr;
use super::consts::{feature, types, ATTR_SIZE_VER0, FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use super::error::{FormatError, FormatErrorKind as K};
use super::header::{FeatureTable, FileHeader, Kind, Section};
use super::record::RecordHeader;
use super::stream::{Decompressor, Progress, RecordStream, StreamError};
use crate::bytes::{Endian, Rd};

/// A failure reading an input, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file is malformed.
    #[error("{}: {source}", path.display())]
    Format {
        path: PathBuf,
        /// What and where.
        #[source]
        source: FormatError,
    },
    /// The path names a directory, device or other non-file.
    #[error("{}: not a regular file, nor a FIFO or stdin holding a pipe-mode stream", path.display())]
    NotAFile {
        /// The input.
        path: PathBuf,
    },
    /// Writing the copy of the input (the output) failed.
    #[error("writing the output")]
    Output(#[source] io::Error),
    /// Reading failed.
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

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
}

/// How the input is laid out: a file-mode input always has its header.
#[derive(Debug, Clone)]
pub enum Layout {
    /// File mode: header and feature table.
    File {
        header: FileHeader,
        /// The feature sections, checked to lie in the file.
        features: FeatureTable,
    },
    /// Pipe mode: the metadata arrives as records.
    Pipe(Endian),
}

/// An open perf.data.
#[derive(Debug)]
pub struct Input {
    /// Its path, for error messages.
    pub path: PathBuf,
    pub file: File,
    /// Its size when opened: every read is bounded by it.
    pub len: u64,
    /// File or pipe mode.
    pub layout: Layout,
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
    fn push(&mut self, attr: Attr, ids: Vec<u64>, raw: &[u8]) {
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
    pub fn of_sample(&self, body: &[u8], e: Endian) -> Option<&Attr> {
        let first = self.first()?;
        if self.list.len() == 1 {
            return Some(first);
        }
        let id = first.id_pos().sample.and_then(|pos| Rd(e).u64(body, pos));
        self.by_id_or_first(id)
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
        self.by_id_or_first(id)
    }

    /// The attr with this id; the first when the id is absent or unknown.
    fn by_id_or_first(&self, id: Option<u64>) -> Option<&Attr> {
        let first = self.first()?;
        let i = id.and_then(|id| self.by_id.get(&id));
        Some(i.map_or(first, |&i| &self.list[i].0))
    }
}

/// What a walk hands to its visitor.
pub trait Visitor {
    /// Every record as stored at the top level (a COMPRESSED record as
    /// itself, with its body), before its contents are visited.
    fn stored(&mut self, _at: u64, _h: &RecordHeader, _body: &[u8]) {}

    /// Every record, those inside compressed ones one by one (`at` is then
    /// the offset of the compressed record).
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError>;
}

impl Input {
    /// Opens and checks the header (and in file mode the feature table).
    /// `path` is a regular file, or `-` (stdin) or a FIFO holding a
    /// pipe-mode stream, which is first copied to an unlinked temporary
    /// file; opening never blocks and anything else is refused.
    pub fn open(path: &Path) -> Result<Input, InputError> {
        let (file, len, streamed) = open_input_file(path)?;
        let mut input = Input {
            path: path.to_path_buf(),
            file,
            len,
            layout: Layout::Pipe(Endian::Little),
        };
        let mut head = vec![0u8; FILE_HEADER_SIZE.min(len) as usize];
        input.read_at(&mut head, 0)?;
        if head.len() < 16 {
            return Err(input.format(FormatError::at(0, K::TooShort(len))));
        }
        input.layout = match Kind::of(&head).map_err(|err| input.format(err))? {
            Kind::Pipe(e) => Layout::Pipe(e),
            Kind::File(_) if streamed => {
                let err =
                    K::Unsupported("file-mode perf.data from a pipe (it needs a seekable file)");
                return Err(input.format(FormatError::at(0, err)));
            }
            Kind::File(e) => {
                let header = FileHeader::parse(&head, len).map_err(|err| input.format(err))?;
                let at = header.feature_table_offset();
                let table_len = header.feature_table_len();
                if at.checked_add(table_len).is_none_or(|end| end > len) {
                    let err = K::Truncated("feature section table");
                    return Err(input.format(FormatError::at(at, err)));
                }
                let mut tb = vec![0u8; table_len as usize];
                input.read_at(&mut tb, at)?;
                let features = FeatureTable::parse(&tb, e, &header.features, at, len)
                    .map_err(|err| input.format(err))?;
                Layout::File { header, features }
            }
        };
        Ok(input)
    }

    /// The byte order.
    pub fn endian(&self) -> Endian {
        match &self.layout {
            Layout::File { header, .. } => header.endian,
            Layout::Pipe(e) => *e,
        }
    }

    /// Wraps a format error with the path.
    pub fn format(&self, source: FormatError) -> InputError {
        InputError::Format {
            path: self.path.clone(),
            source,
        }
    }

    /// Reads exactly `buf.len()` bytes at `off` (callers bound them by the
    /// checked sections).
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> Result<(), InputError> {
        self.file
            .read_exact_at(buf, off)
            .map_err(io_err("reading", &self.path))
    }

    /// The bytes of a section (already checked to lie in the file).
    pub fn section(&self, s: Section) -> Result<Vec<u8>, InputError> {
        let mut b = vec![0u8; s.size as usize];
        self.read_at(&mut b, s.offset)?;
        Ok(b)
    }

    /// The payload of feature `bit` of a file-mode input, if present.
    pub fn feature(&self, bit: u32) -> Result<Option<(Section, Vec<u8>)>, InputError> {
        let Layout::File { features, .. } = &self.layout else {
            return Ok(None);
        };
        match features.0.iter().find(|(b, _)| *b == bit) {
            Some((_, s)) => Ok(Some((*s, self.section(*s)?))),
            None => Ok(None),
        }
    }

    /// The byte range holding the records.
    pub fn records_range(&self) -> (u64, u64) {
        match &self.layout {
            Layout::File { header, .. } => (header.data.offset, header.data.end()),
            Layout::Pipe(_) => (PIPE_HEADER_SIZE, self.len),
        }
    }

    /// Walks every record, writing every byte of the record range it reads
    /// to `tee` when given.
    pub fn walk(
        &self,
        tee: Option<&mut File>,
        visitor: &mut impl Visitor,
    ) -> Result<Walk, InputError> {
        let mut w = Walk {
            attrs: match &self.layout {
                Layout::File { header, .. } => self.file_attrs(header)?,
                Layout::Pipe(_) => Attrs::default(),
            },
            records: 0,
            trailing: None,
        };
        let e = self.endian();
        let (start, end) = self.records_range();
        let mut stream = RecordStream::new(&self.file, start, end, e, tee);
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
                *records += 1;
                visitor.record(at, ih, ib, attrs)
            })
            .map_err(|err| self.format(err))?;
        }
        progress.done();
        if let Some(d) = &dec {
            d.finish(last_compressed).map_err(|err| self.format(err))?;
        }
        if w.attrs.list.is_empty() {
            let err = FormatError::at(start, K::NoAttrs(" (HEADER_ATTR) in the stream"));
            return Err(self.format(err));
        }
        Ok(w)
    }

    /// Whether the bytes from `at` (the first 4 KiB of them) are text, as
    /// perf's messages are: printable ASCII, tabs, newlines, UTF-8.
    fn text_from(&self, at: u64) -> bool {
        let mut buf = vec![0u8; (self.len.saturating_sub(at)).min(4096) as usize];
        !buf.is_empty()
            && self.file.read_exact_at(&mut buf, at).is_ok()
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
    fn decompressed_cap(&self) -> Result<u64, InputError> {
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
            StreamError::Tee(source) => InputError::Output(source),
        }
    }

    /// Reads the attrs (and their ids) of a file-mode input.
    pub fn file_attrs(&self, h: &FileHeader) -> Result<Attrs, InputError> {
        let e = h.endian;
        let raw = self.section(h.attrs)?;
        let mut attrs = Attrs::default();
        // The id sections together may not hold more than the file does
        // (200 attrs naming one 16 MiB section would otherwise cost 3 GB).
        let mut id_bytes = 0u64;
        for (i, entry) in raw.chunks(h.attr_size as usize).enumerate() {
            let at = h.attrs.offset + i as u64 * h.attr_size;
            let attr = Attr::parse(entry, e, at).map_err(|err| self.format(err))?;
            let n = entry.len();
            let r = Rd(e);
            let ids = Section {
                offset: r.u64(entry, n - 16).unwrap_or(0),
                size: r.u64(entry, n - 8).unwrap_or(0),
            };
            let ids_at = at + n as u64 - 16;
            if ids.end() > self.len || !ids.size.is_multiple_of(8) || ids.size > 1 << 24 {
                return Err(self.format(FormatError::at(
                    ids_at,
                    K::Inconsistent("bad event id section"),
                )));
            }
            if ids.size > 0 && ids.offset >= h.data.offset {
                let err = K::Unsupported("an event id section after the data section");
                return Err(self.format(FormatError::at(ids_at, err)));
            }
            id_bytes += ids.size;
            if id_bytes > self.len {
                let kind = K::Implausible {
                    what: "total size of the event id sections",
                    value: id_bytes,
                };
                return Err(self.format(FormatError::at(ids_at, kind)));
            }
            let idb = self.section(ids)?;
            let ids = idb.chunks(8).filter_map(|c| r.u64(c, 0)).collect();
            attrs.push(attr, ids, &entry[..n - 16]);
        }
        if attrs.list.is_empty() {
            return Err(self.format(FormatError::at(24, K::NoAttrs(""))));
        }
        if h.attrs.offset >= h.data.offset {
            let err = K::Unsupported("an attr section after the data section");
            return Err(self.format(FormatError::at(24, err)));
        }
        Ok(attrs)
    }
}

/// The attr and ids of a pipe-mode HEADER_ATTR record body.
fn pipe_attr(at: u64, body: &[u8], e: Endian) -> Result<(Attr, Vec<u64>), FormatError> {
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

/// The zstd payload of a COMPRESSED or COMPRESSED2 record, None for others.
fn compressed_payload<'b>(
    at: u64,
    h: &RecordHeader,
    body: &'b [u8],
    e: Endian,
) -> Result<Option<&'b [u8]>, FormatError> {
    match h.type_ {
        types::COMPRESSED => Ok(Some(body)),
        types::COMPRESSED2 => {
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
            Ok(Some(body.get(8..end).ok_or(too_large)?))
        }
        _ => Ok(None),
    }
}

/// Opens an input without blocking: a regular file as it is; stdin (`-`) or
/// a FIFO copied to an unlinked temporary file (returned with `true`).
fn open_input_file(path: &Path) -> Result<(File, u64, bool), InputError> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = if path.as_os_str() == "-" {
        let fd = io::stdin().as_fd().try_clone_to_owned();
        File::from(fd.map_err(io_err("reading", path))?)
    } else {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(io_err("opening", path))?
    };
    let meta = file.metadata().map_err(io_err("reading", path))?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok((file, meta.len(), false));
    }
    if !(ft.is_fifo() || ft.is_socket() && path.as_os_str() == "-") {
        return Err(InputError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    crate::sys::set_blocking(file.as_fd()).map_err(io_err("reading", path))?;
    let mut spool = tempfile::tempfile().map_err(io_err("spooling", path))?;
    let len = io::copy(&mut &file, &mut spool).map_err(io_err("reading", path))?;
    Ok((spool, len, true))
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> InputError {
    let path = path.to_path_buf();
    move |source| InputError::Io { op, path, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;

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
