//! A perf.data opened for reading (file or pipe mode, either byte order):
//! the header, the feature table and the attr section checked, every read
//! bounded by what the file holds. Opening the file (and copying a
//! stream) is `input_open`'s, its errors `input_error`'s; walking its
//! records is the `walk` module's.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::attr::{Attr, Attrs};
use super::consts::{feature, FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use super::error::{FormatError, FormatErrorKind as K};
use super::header::{FeatureBits, FeatureTable, FileHeader, Kind, Section};
use super::input_dir::Origins;
pub(crate) use super::input_error::io_err;
use super::input_error::READING;
pub use super::input_error::{DirFileError, InputError};
use super::input_open::Opened;
use super::salvage::Salvaged;
use crate::bytes::{Endian, Rd};

/// A format error found in a directory's assembled copy as the error of
/// the file its bytes came from (else as it is).
fn locate(err: InputError, origins: &Origins) -> InputError {
    match &err {
        InputError::Format { source, .. } => origins.locate(source).unwrap_or(err),
        _ => err,
    }
}

/// Where the file header holds the data section's size.
pub(super) const DATA_SIZE_FIELD: u64 = 48;

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
    /// Opened with `salvage` and cut short: where its records end (`len`
    /// and, in file mode, the header's data section then end there).
    pub salvaged: Option<Salvaged>,
    /// Read from a stream (stdin, a FIFO), copied up to where it stopped
    /// holding records: a record header of size 0 ends it where it is, as
    /// nothing after it was read (a zero-filled tail is a file's).
    pub streamed: bool,
    /// A perf.data directory's assembled copy: where its bytes came from,
    /// for the errors found in it.
    origins: Option<Box<Origins>>,
}

impl Input {
    /// Opens and checks the header (and in file mode the feature table).
    /// `path` is a regular file, or `-` (stdin) or a FIFO holding a
    /// pipe-mode stream, which is first copied to an unlinked temporary
    /// file (a FIFO once its writer has connected); opening never blocks
    /// and anything else is refused.
    pub fn open(path: &Path) -> Result<Input, InputError> {
        Input::open_as(path, false, false)
    }

    /// [`Input::open`] for an input that is to be replaced in place: only a
    /// regular file (a FIFO or `-` is refused, not read: `-o /dev/stdout`
    /// with stdout a pipe would otherwise wait on our own pipe forever).
    pub fn open_regular(path: &Path) -> Result<Input, InputError> {
        Input::open_as(path, true, false)
    }

    /// [`Input::open`] (or with `regular_only`, [`Input::open_regular`]);
    /// with `salvage`, an input cut short (see [`super::salvage`]) is read
    /// up to its last whole record, as if it ended there, and
    /// [`Input::salvaged`] says where: a stream that ends inside a record,
    /// a file whose data section runs past its end or whose header has
    /// data size 0 and no feature sections after the records (perf record
    /// killed), a file cut at or after its data's end (the features not
    /// whole dropped), COMPRESSED records whose data ends inside a record
    /// (it is dropped). Only what cannot be a cut stays an error.
    pub fn open_as(path: &Path, regular_only: bool, salvage: bool) -> Result<Input, InputError> {
        let (file, len, streamed) = match super::input_open::open_input_file(path, regular_only)? {
            Opened::File(file, len, streamed) => (file, len, streamed),
            Opened::Dir(dir) => {
                let (file, len, origins) = super::input_dir::assemble(path, &dir, &|p, f, n| {
                    let data = Input::of_file(p, f, n, false, false)?;
                    let Layout::File { header, features } = &data.layout else {
                        let err = K::Unsupported("a pipe-mode `data` file in a directory");
                        return Err(data.format(FormatError::at(0, err)));
                    };
                    // the attrs and their ids before the records, which
                    // the other files' are appended to
                    data.file_attrs_and_end(header)?;
                    let (header, features) = (header.clone(), features.clone());
                    let cap = data.decompressed_cap()?;
                    Ok((data.file, header, features, cap))
                })?;
                let mut input = Input::of_file(path, file, len, false, salvage)
                    .map_err(|e| locate(e, &origins))?;
                input.origins = Some(Box::new(origins));
                return Ok(input);
            }
        };
        let input = Input::of_file(path, file, len, streamed, salvage)?;
        // a directory's `data` alone holds the head of its records only
        if let Some((s, b)) = input.feature(feature::DIR_FORMAT)? {
            let version = super::input_dir::version_of(&b, input.endian());
            if version.map_or(true, |v| v >= super::input_dir::MULTI_FILE) {
                let err = K::Unsupported(
                    "the `data` file of a perf.data directory alone (give the directory: \
                     most records are in the data.* files beside it)",
                );
                return Err(input.format(FormatError::at(s.offset, err)));
            }
        }
        Ok(input)
    }

    /// [`Input::open_as`] of a file already open (`len` bytes; `streamed`:
    /// a stream's copy), its errors naming `path`.
    pub(super) fn of_file(
        path: &Path,
        file: File,
        len: u64,
        streamed: bool,
        salvage: bool,
    ) -> Result<Input, InputError> {
        let mut input = Input {
            path: path.to_path_buf(),
            file,
            len,
            layout: Layout::Pipe(Endian::Little),
            salvaged: None,
            streamed,
            origins: None,
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
            Kind::File(_) if salvage => input.salvage_file(&mut head)?,
            Kind::File(_) => {
                let header = FileHeader::parse(&head, len).map_err(|err| input.format(err))?;
                let features = match input.feature_table(&header) {
                    // perf record writes the data size and the features
                    // when it ends: killed, it leaves 0 and records where
                    // the table should be (perf itself only warns)
                    Err(InputError::Format { .. }) if header.data.size == 0 => {
                        let err = FormatError::at(DATA_SIZE_FIELD, K::DataSizeZero);
                        return Err(input.format(err));
                    }
                    t => t?,
                };
                if input.killed(&header) {
                    let err = FormatError::at(DATA_SIZE_FIELD, K::DataSizeZero);
                    return Err(input.format(err));
                }
                Layout::File { header, features }
            }
        };
        if salvage && matches!(input.layout, Layout::Pipe(_)) {
            input.salvage(PIPE_HEADER_SIZE, None)?;
        }
        if salvage {
            input.salvage_compressed()?;
        }
        Ok(input)
    }

    /// Whether a file-mode `header` whose feature table reads is what perf
    /// record killed before it set any feature bit leaves: data size 0,
    /// no features, bytes after the data's offset (its records). An empty
    /// recording has nothing there.
    pub(super) fn killed(&self, header: &FileHeader) -> bool {
        header.data.size == 0
            && header.features == FeatureBits::default()
            && self.len > header.data.offset
    }

    /// Reads and checks the feature table of a file-mode input.
    pub(super) fn feature_table(&self, header: &FileHeader) -> Result<FeatureTable, InputError> {
        let at = header.feature_table_offset();
        let table_len = header.feature_table_len();
        if at.checked_add(table_len).is_none_or(|end| end > self.len) {
            let err = K::Truncated("feature section table");
            return Err(self.format(FormatError::at(at, err)));
        }
        let mut tb = vec![0u8; table_len as usize];
        self.read_at(&mut tb, at)?;
        FeatureTable::parse(&tb, header.endian, &header.features, at, self.len)
            .map_err(|err| self.format(err))
    }

    /// The byte order.
    pub fn endian(&self) -> Endian {
        match &self.layout {
            Layout::File { header, .. } => header.endian,
            Layout::Pipe(e) => *e,
        }
    }

    /// Wraps a format error with the path (for a directory's assembled
    /// copy, that of the file the bytes came from, and the offset there).
    pub fn format(&self, source: FormatError) -> InputError {
        let err = InputError::Format {
            path: self.path.clone(),
            source,
        };
        match &self.origins {
            Some(o) => locate(err, o),
            None => err,
        }
    }

    /// Reads exactly `buf.len()` bytes at `off` (callers bound them by the
    /// checked sections).
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> Result<(), InputError> {
        self.file
            .read_exact_at(buf, off)
            .map_err(io_err(READING, &self.path))
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

    /// Reads the attrs (and their ids) of a file-mode input.
    pub fn file_attrs(&self, h: &FileHeader) -> Result<Attrs, InputError> {
        self.file_attrs_and_end(h).map(|(attrs, _)| attrs)
    }

    /// [`Input::file_attrs`], and the end of the bytes they take before the
    /// data section (the attr section and the id sections, which must lie
    /// there): what a rewrite keeps of the bytes in front of the records.
    pub fn file_attrs_and_end(&self, h: &FileHeader) -> Result<(Attrs, u64), InputError> {
        let e = h.endian;
        let mut end = h.attrs.end();
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
            if ids.size > 0 && ids.end() > h.data.offset {
                let err = K::Unsupported("an event id section in or after the data section");
                return Err(self.format(FormatError::at(ids_at, err)));
            }
            if ids.size > 0 {
                end = end.max(ids.end());
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
        Ok((attrs, end))
    }
}
