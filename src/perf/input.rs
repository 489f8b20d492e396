//! A perf.data opened for reading (file or pipe mode, either byte order):
//! the header, the feature table and the attr section checked, every read
//! bounded by what the file holds. Walking its records is the
//! `walk` module's.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::attr::{Attr, Attrs};
use super::consts::{FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use super::error::{FormatError, FormatErrorKind as K};
use super::header::{FeatureBits, FeatureTable, FileHeader, Kind, Section};
use super::salvage::Salvaged;
use super::spool::{spool, SpoolError, Spooled};
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
    /// An input to be replaced in place is not a regular file.
    #[error("{}: not a regular file (an input rewritten in place must be one)", path.display())]
    NotRegular {
        /// The input.
        path: PathBuf,
    },
    /// Reading failed.
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Creating or writing the unlinked temporary file a stream input
    /// (stdin, a FIFO) is copied to and read from failed: `dir` (the
    /// temporary directory, `TMPDIR`) full, most likely.
    #[error("{op} the temporary copy of stream {} (an unlinked file in {})", path.display(), dir.display())]
    Spool {
        /// What failed: creating or writing it.
        op: &'static str,
        /// The stream.
        path: PathBuf,
        /// Where the copy was.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// The `op` of an [`InputError::Io`] opening the input itself (a path that
/// names nothing there is the user's mistake, not the system's).
const OPENING: &str = "opening";

/// The `op` of an [`InputError::Io`] reading the input.
const READING: &str = "reading";

/// The `op` of an [`InputError::Io`] when the input, found and checked,
/// cannot be reopened (a system failure, not the input's).
const REOPENING: &str = "reopening (through /proc/thread-self/fd: is /proc mounted?)";

/// Where the file header holds the data section's size.
pub(super) const DATA_SIZE_FIELD: u64 = 48;

impl InputError {
    /// Whether the input itself is at fault (malformed, not a file, or no
    /// such file, or not ours to open or read), not the system: the CLI
    /// exits 2 for these.
    pub fn is_bad_input(&self) -> bool {
        match self {
            InputError::Format { .. }
            | InputError::NotAFile { .. }
            | InputError::NotRegular { .. } => true,
            // one we may not open or read (EACCES, EPERM) is the user's
            // to fix, as a missing one is
            InputError::Io { op, source, .. }
                if (*op == OPENING || *op == READING)
                    && source.kind() == io::ErrorKind::PermissionDenied =>
            {
                true
            }
            InputError::Io { op, source, .. } => {
                *op == OPENING
                    && (matches!(
                        source.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) || matches!(
                        source.raw_os_error(),
                        Some(libc::ELOOP | libc::ENAMETOOLONG)
                    ))
            }
            // the system's: the temporary directory full or unwritable
            InputError::Spool { .. } => false,
        }
    }
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
    /// Opened with `salvage` and cut short: where its records end (`len`
    /// and, in file mode, the header's data section then end there).
    pub salvaged: Option<Salvaged>,
    /// Read from a stream (stdin, a FIFO), copied up to where it stopped
    /// holding records: a record header of size 0 ends it where it is, as
    /// nothing after it was read (a zero-filled tail is a file's).
    pub streamed: bool,
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
        let (file, len, streamed) = open_input_file(path, regular_only)?;
        let mut input = Input {
            path: path.to_path_buf(),
            file,
            len,
            layout: Layout::Pipe(Endian::Little),
            salvaged: None,
            streamed,
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

/// Opens an input: a regular file as it is; stdin (`-`) or a FIFO copied
/// to an unlinked temporary file (returned with `true`), unless
/// `regular_only`, up to where it stops holding records ([`spool`]).
/// Opening never blocks; a FIFO is then waited on until its writer
/// connects, and from then until the copy ends a first SIGINT or SIGTERM
/// lets it be read to its end ([`crate::interrupt`]).
fn open_input_file(path: &Path, regular_only: bool) -> Result<(File, u64, bool), InputError> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let file = if path.as_os_str() == "-" {
        let fd = io::stdin().as_fd().try_clone_to_owned();
        File::from(fd.map_err(io_err(READING, path))?)
    } else {
        // Resolved once to a descriptor that opens nothing, looked at, and
        // only a regular file or a FIFO is then opened, through that very
        // descriptor: opening a device node has effects of its own (a
        // watchdog starts), and a path looked at then opened again could
        // have been swapped in between.
        let (at, held) = crate::sys::locate(path).map_err(io_err(OPENING, path))?;
        let ft = held.file_type();
        if !(ft.is_file() || ft.is_fifo() && !regular_only) {
            return Err(if regular_only {
                InputError::NotRegular {
                    path: path.to_path_buf(),
                }
            } else {
                InputError::NotAFile {
                    path: path.to_path_buf(),
                }
            });
        }
        crate::sys::reopen_for_reading(&at, &held).map_err(|e| {
            // no /proc/thread-self/fd: ours to report; anything else (no read
            // permission, found only now) is the open's
            let op = if e.kind() == io::ErrorKind::NotFound {
                REOPENING
            } else {
                OPENING
            };
            io_err(op, path)(e)
        })?
    };
    let meta = file.metadata().map_err(io_err(READING, path))?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok((file, meta.len(), false));
    }
    if regular_only {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    if !(ft.is_fifo() || ft.is_socket() && path.as_os_str() == "-") {
        return Err(InputError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    // A FIFO opened (non-blocking) before its writer reads as empty: wait
    // for the writer, or anything to read, first.
    crate::sys::wait_readable(file.as_fd()).map_err(io_err(READING, path))?;
    crate::sys::set_blocking(file.as_fd()).map_err(io_err(READING, path))?;
    crate::interrupt::reading_a_stream();
    // where the copy goes, named in its errors (a full disk there is the
    // likely one)
    let dir = std::env::temp_dir();
    let spool_err = |op| {
        let (path, dir) = (path.to_path_buf(), dir.clone());
        move |source| InputError::Spool {
            op,
            path,
            dir,
            source,
        }
    };
    let copy = tempfile::tempfile_in(&dir).map_err(spool_err("creating"))?;
    let mut src = io::BufReader::with_capacity(SPOOL_CHUNK, super::spool::Counted(&file));
    let mut dst = io::BufWriter::with_capacity(SPOOL_CHUNK, Roomy::new(copy));
    let spooled = spool(&mut src, &mut dst);
    // a stream that stopped being perf.data (or could not be read on) is
    // not one a writer is still finishing: a signal put off ends us now
    crate::interrupt::stream_read(!matches!(spooled, Ok(Spooled::Ended(_))));
    let len = match spooled {
        Ok(Spooled::Ended(n) | Spooled::Stopped(n)) => n,
        Err(SpoolError::Read(e)) => return Err(io_err(READING, path)(e)),
        Err(SpoolError::Write(e)) => return Err(spool_err("writing")(e)),
    };
    let copy = dst
        .into_inner()
        .map_err(|e| spool_err("writing")(e.into_error()))?;
    Ok((copy.file, len, true))
}

/// The copy of a stream, written only while its file system keeps
/// [`MIN_LEFT_PERCENT`] of its size (at least [`MIN_LEFT`]) for others: a
/// stream of valid-looking records that never ends (or one larger than the
/// room) stops with an error instead of filling the disk.
struct Roomy {
    file: File,
    /// Bytes written since the room was last looked at.
    since: u64,
}

/// Bytes of a stream's copy written between two looks at the room left.
const ROOM_EVERY: u64 = 8 << 20;
/// What a stream's copy leaves of its file system, in percent of its size,
const MIN_LEFT_PERCENT: u64 = 2;
/// ... and at least this many bytes.
const MIN_LEFT: u64 = 16 << 20;

impl Roomy {
    fn new(file: File) -> Roomy {
        Roomy { file, since: 0 }
    }
}

impl io::Write for Roomy {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.since >= ROOM_EVERY {
            self.since = 0;
            let (left, size) = crate::sys::space_left(&self.file)?;
            let keep = (size / 100 * MIN_LEFT_PERCENT).max(MIN_LEFT);
            if left < keep.saturating_add(buf.len() as u64) {
                let mib = |b: u64| b >> 20;
                return Err(io::Error::other(format!(
                    "stopped with {} MiB of its file system left ({} MiB in all): a copy leaves {MIN_LEFT_PERCENT}% or {} MiB, whichever is more, for others (point TMPDIR at a larger one)",
                    mib(left),
                    mib(size),
                    mib(MIN_LEFT)
                )));
            }
        }
        let n = self.file.write(buf)?;
        self.since += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Bytes read from a stream, and written to its copy, at a time.
const SPOOL_CHUNK: usize = 128 << 10;

pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> InputError {
    let path = path.to_path_buf();
    move |source| InputError::Io { op, path, source }
}
