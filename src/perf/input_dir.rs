//! A perf.data directory (`perf record --threads`, perf 5.17+): its `data`
//! file holds the header, attrs, features and the records perf wrote
//! itself, each `data.*` file beside it the records one recording thread
//! read. Few readers but perf take a directory, so it is assembled into one
//! unlinked temporary file-mode perf.data (the `data` file with the other
//! files' records appended to its data section, in the order of their
//! numbers, and without the DIR_FORMAT feature), which every command then
//! reads as a file; perf sorts the records of a directory by time, as it
//! sorts those of a file without FINISHED_ROUND records. An error found
//! later in the assembled recording names the file of the directory the
//! bytes came from and the offset there ([`Origins`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::compress::{compressed_payload, Decompressor};
use super::consts::feature;
use super::error::{FormatError, FormatErrorKind as K};
use super::header::{FeatureTable, FileHeader, Section};
use super::input_error::{io_err, spool_err, DirFileError, InputError, OPENING, READING};
use super::input_open::{Roomy, SPOOL_CHUNK};
use super::stream::{RecordStream, StreamError};
use crate::bytes::{Endian, Rd};

/// How the `data` file is opened as a recording (by `Input`, which this
/// module does not reach): the file again, its header and
/// feature table.
pub(super) type Parse<'a> = dyn Fn(&Path, File, u64) -> Result<Parsed, InputError> + 'a;

/// The `data` file as [`Parse`] gives it back: the file, its header and
/// feature table (its attrs and id sections checked to lie before its
/// records), and the most one COMPRESSED record may decompress to.
pub(super) type Parsed = (File, FileHeader, FeatureTable, u64);

/// `data.*` files a directory may hold at most: perf writes one per
/// recording thread (`--threads`: one per CPU at most).
const MAX_FILES: usize = 4096;

/// The DIR_FORMAT version of a directory whose records are in `data` and
/// the `data.*` files (perf's `PERF_DIR_VERSION`); 0, or no DIR_FORMAT, is
/// one whose records are all in `data` (a `--kcore` recording's).
pub(super) const MULTI_FILE: u64 = 1;

/// The version a DIR_FORMAT feature section (`payload`) holds: its first
/// u64; a shorter section is an error.
pub(super) fn version_of(payload: &[u8], e: Endian) -> Result<u64, K> {
    Rd(e)
        .u64(payload, 0)
        .ok_or(K::Truncated("DIR_FORMAT feature"))
}

/// Where each piece of an assembled recording came from: one piece for
/// `data`'s header and attrs, one for its records, one for each `data.*`
/// file's records and one for each feature section (the feature table is
/// ours), so that an error found in the recording later names the file
/// and the offset in it.
#[derive(Debug, Default)]
pub(super) struct Origins(Vec<Origin>);

/// A piece of an assembled recording.
#[derive(Debug)]
struct Origin {
    /// Its first byte in the assembled recording.
    at: u64,
    /// Its length there.
    len: u64,
    /// The file of the directory it came from.
    path: PathBuf,
    /// Where it starts in that file; `None`: records decompressed from the
    /// file's COMPRESSED records, where an offset counts from the first
    /// byte they decompress to.
    from: Option<u64>,
}

impl Origins {
    fn add(&mut self, at: u64, len: u64, path: &Path, from: Option<u64>) {
        let path = path.to_path_buf();
        self.0.push(Origin {
            at,
            len,
            path,
            from,
        });
    }

    /// `err`, found at an offset of the assembled recording, as an error
    /// of the file of the directory that offset came from; `None` for an
    /// offset in what assembling wrote itself (the feature table).
    pub(super) fn locate(&self, err: &FormatError) -> Option<InputError> {
        let o = (self.0.iter()).find(|o| err.offset >= o.at && err.offset - o.at < o.len)?;
        // (offsets inside the error's kind lie in the same piece)
        let there = |at: u64| o.from.unwrap_or(0) + at.saturating_sub(o.at);
        let what = FormatError::at(there(err.offset), err.kind.clone().moved(&there));
        Some(InputError::InDirectory(Box::new(DirFileError {
            path: o.path.clone(),
            what,
            decompressed: o.from.is_none(),
            assembled: true,
        })))
    }
}

/// Assembles the perf.data directory at `path` (`dir`, an `O_PATH`
/// descriptor of it) into an unlinked temporary file: the file, its
/// length and where its bytes came from. Only regular files are read,
/// never through a symlink (an error) or from a FIFO or device (skipped,
/// as perf skips them).
pub(super) fn assemble(
    path: &Path,
    dir: &File,
    parse: &Parse<'_>,
) -> Result<(File, u64, Origins), InputError> {
    let data_path = path.join("data");
    let (file, len) = open_data(path, dir, &data_path)?;
    // (a `data` cut short is a file of the directory salvage does not read)
    let (data, header, features, cap) = parse(&data_path, file, len).map_err(|e| match e {
        InputError::Format { path, source } => cut(&path, source),
        e => e,
    })?;
    let e = header.endian;
    let names = files_of((path, dir), (&data, &data_path), &header, &features)?;
    let tmp = std::env::temp_dir();
    let spool_err = |op| spool(op, path, &tmp);
    let copy = tempfile::tempfile_in(&tmp).map_err(spool_err("creating"))?;
    let mut out = BufWriter::with_capacity(SPOOL_CHUNK, Roomy::new(copy));
    // the header (written again at the end) and attrs, then `data`'s
    // records, their framing checked (a hole reads as a record of size 0)
    copy_range(
        &data,
        &data_path,
        (0, header.data.offset),
        &mut out,
        &spool_err,
    )?;
    let mut origins = Origins::default();
    origins.add(0, header.data.offset, &data_path, Some(0));
    let records = (&data, data_path.as_path(), header.data);
    let (mut size, _) = copy_records(records, e, None, &mut out, &spool_err)?;
    origins.add(
        header.data.offset,
        size,
        &data_path,
        Some(header.data.offset),
    );
    for (p, name) in names {
        // one at a time: thousands need not be open at once
        let Some((f, n)) = open_entry(dir, &name, &p)? else {
            continue;
        };
        let part = Section { offset: 0, size: n };
        let (written, decompressed) =
            copy_records((&f, &p, part), e, Some(cap), &mut out, &spool_err)?;
        let from = (!decompressed).then_some(0);
        origins.add(header.data.offset + size, written, &p, from);
        size += written;
    }
    let kept: Vec<(u32, Section)> = (features.0.iter())
        .filter(|(bit, _)| *bit != feature::DIR_FORMAT)
        .copied()
        .collect();
    let table_at = header.data.offset + size;
    let payload_at = table_at + 16 * kept.len() as u64;
    let table = FeatureTable::laid_out(kept.iter().map(|(b, s)| (*b, s.size)), payload_at);
    out.write_all(&table.encode(e))
        .map_err(spool_err("writing"))?;
    for ((_, s), (_, laid)) in kept.iter().zip(&table.0) {
        no_hole(&data, &data_path, *s)?;
        copy_range(&data, &data_path, (s.offset, s.end()), &mut out, &spool_err)?;
        origins.add(laid.offset, s.size, &data_path, Some(s.offset));
    }
    let copy = out
        .into_inner()
        .map_err(|err| spool_err("writing")(err.into_error()))?
        .file;
    let mut head = header.clone();
    head.data.size = size;
    head.features = table.bits();
    copy.write_all_at(&head.encode(), 0)
        .map_err(spool_err("writing"))?;
    let len = payload_at + kept.iter().map(|(_, s)| s.size).sum::<u64>();
    Ok((copy, len, origins))
}

/// The `data.*` files (path and name) whose records follow `data`'s, as
/// `data`'s DIR_FORMAT version says (none for version 0 or no DIR_FORMAT);
/// an AUXTRACE index with them is refused.
fn files_of(
    (path, dir): (&Path, &File),
    (data, data_path): (&File, &Path),
    header: &FileHeader,
    features: &FeatureTable,
) -> Result<Vec<(PathBuf, Vec<u8>)>, InputError> {
    let format = |at, kind| InputError::Format {
        path: data_path.to_path_buf(),
        source: FormatError::at(at, kind),
    };
    let (version, at) = match features.0.iter().find(|(b, _)| *b == feature::DIR_FORMAT) {
        None => (0, 0),
        Some((_, s)) => {
            let mut b = vec![0u8; s.size.min(8) as usize];
            (data.read_exact_at(&mut b, s.offset)).map_err(io_err(READING, data_path))?;
            let v = version_of(&b, header.endian).map_err(|k| format(s.offset, k))?;
            (v, s.offset)
        }
    };
    let names = match version {
        0 => Vec::new(),
        MULTI_FILE => data_file_names(path, dir)?,
        _ => {
            let err = K::Unsupported("a perf.data directory version other than 0 and 1");
            return Err(format(at, err));
        }
    };
    if !names.is_empty() && header.features.contains(feature::AUXTRACE) {
        // its index holds offsets in the file each AUXTRACE record is in
        let err = K::Unsupported("AUX area data (an AUXTRACE index) in a perf.data directory");
        return Err(format(0, err));
    }
    Ok(names)
}

/// The directory's `data` file (`data_path`) and its length; a directory
/// without one (nor a regular file by that name) is no recording.
fn open_data(path: &Path, dir: &File, data_path: &Path) -> Result<(File, u64), InputError> {
    let not_a_recording = || InputError::NotAFile {
        path: path.to_path_buf(),
    };
    match open_entry(dir, b"data", data_path) {
        Ok(Some(data)) => Ok(data),
        Ok(None) => Err(not_a_recording()),
        Err(InputError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(not_a_recording())
        }
        Err(e) => Err(e),
    }
}

/// The `data.*` entries of the directory (`dir` at `path`), by number
/// (then name): each path and name.
fn data_file_names(path: &Path, dir: &File) -> Result<Vec<(PathBuf, Vec<u8>)>, InputError> {
    let listing = format!("/proc/thread-self/fd/{}", dir.as_raw_fd());
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&listing).map_err(io_err(READING, path))? {
        let name = entry.map_err(io_err(READING, path))?.file_name();
        if name.as_bytes().starts_with(b"data.") {
            names.push(name.as_bytes().to_vec());
            if names.len() > MAX_FILES {
                let err = K::Implausible {
                    what: "number of data.* files",
                    value: names.len() as u64,
                };
                return Err(InputError::Format {
                    path: path.to_path_buf(),
                    source: FormatError::at(0, err),
                });
            }
        }
    }
    // data.2 before data.10
    names.sort_by_key(|n| {
        let number = std::str::from_utf8(&n[5..])
            .ok()
            .and_then(|d| d.parse::<u64>().ok());
        (number.is_none(), number, n.clone())
    });
    Ok(names
        .into_iter()
        .map(|n| (path.join(std::ffi::OsStr::from_bytes(&n)), n))
        .collect())
}

/// Opens the entry `name` of `dir` (`path`) for reading if it is a regular
/// file, with its length; `None` for anything else that is no symlink.
/// Looked at through an `O_PATH` descriptor first, so a FIFO or device is
/// never opened.
fn open_entry(dir: &File, name: &[u8], path: &Path) -> Result<Option<(File, u64)>, InputError> {
    let at = crate::sys::open_path_at(dir.as_fd(), name).map_err(io_err(OPENING, path))?;
    let at = File::from(at);
    let meta = at.metadata().map_err(io_err(READING, path))?;
    if meta.file_type().is_symlink() {
        return Err(InputError::NotFollowed {
            path: path.to_path_buf(),
        });
    }
    if !meta.is_file() {
        return Ok(None);
    }
    if meta.nlink() > 1 {
        // perf's files have one name; another may be a file of someone
        // else's (where fs.protected_hardlinks is off)
        return Err(InputError::HardLinked {
            path: path.to_path_buf(),
        });
    }
    let file = crate::sys::reopen_for_reading(&at, &meta).map_err(io_err(OPENING, path))?;
    let len = file.metadata().map_err(io_err(READING, path))?.len();
    Ok(Some((file, len)))
}

/// Copies the records in `range` of `file` (`path`) to `out`, framed as
/// every walk frames them (a record cut short, appended to another file's,
/// would misframe everything after it), with the data an AUXTRACE record
/// holds after it; with `cap`, COMPRESSED records are decompressed into
/// the records they hold (each file's are one zstd stream of their own,
/// which appended to another's would not decode), none to more than `cap`
/// bytes. Returns the bytes written and whether any were decompressed.
fn copy_records<W: Write, E: FnOnce(std::io::Error) -> InputError>(
    (file, path, range): (&File, &Path, Section),
    e: Endian,
    cap: Option<u64>,
    out: &mut W,
    spool_err: &impl Fn(&'static str) -> E,
) -> Result<(u64, bool), InputError> {
    let stream_err = |err| match err {
        StreamError::Format(f) => cut(path, f),
        StreamError::Io(source) => io_err(READING, path)(source),
    };
    let mut records = RecordStream::new(file, range.offset, range.end(), e);
    let (mut head, mut decoded) = (Vec::with_capacity(8), Vec::new());
    let mut written = 0u64;
    let mut dec: Option<(Decompressor, u64)> = None;
    while let Some((at, h, body)) = records.next().map_err(stream_err)? {
        let payload = match cap {
            Some(_) => compressed_payload(at, &h, body, e).map_err(|f| cut(path, f))?,
            None => None,
        };
        let bytes: [&[u8]; 2] = match (payload, cap) {
            (Some(payload), Some(cap)) => {
                if dec.is_none() {
                    let d = Decompressor::new().map_err(io_err("decompressing", path))?;
                    dec = Some((d, at));
                }
                let (d, last) = dec.as_mut().expect("just set");
                *last = at;
                decoded.clear();
                d.feed(at, payload, e, cap, |h, body| {
                    h.put(&mut decoded, e);
                    decoded.extend_from_slice(body);
                    Ok(())
                })
                .map_err(|f| cut(path, f))?;
                [&decoded, &[]]
            }
            _ => {
                head.clear();
                h.put(&mut head, e);
                [&head, body]
            }
        };
        for b in bytes {
            out.write_all(b).map_err(spool_err("writing"))?;
            written += b.len() as u64;
        }
        // the data that follows an AUXTRACE record, outside its size
        let mut failed = None;
        records
            .pass_data_after(|b| match out.write_all(b) {
                Ok(()) => written += b.len() as u64,
                Err(err) => {
                    failed.get_or_insert(err);
                }
            })
            .map_err(stream_err)?;
        if let Some(err) = failed {
            return Err(spool_err("writing")(err));
        }
    }
    if let Some((d, last)) = &dec {
        d.finish(*last).map_err(|f| cut(path, f))?;
    }
    Ok((written, dec.is_some()))
}

/// A file of the directory is malformed (`what`, at an offset in it).
fn cut(path: &Path, what: FormatError) -> InputError {
    InputError::InDirectory(Box::new(DirFileError {
        path: path.to_path_buf(),
        what,
        decompressed: false,
        assembled: false,
    }))
}

/// Refuses a hole in `s` of `file` (`path`): perf writes none, and copied
/// it would be written out as zeros, as large as the file claims.
fn no_hole(file: &File, path: &Path, s: Section) -> Result<(), InputError> {
    match crate::sys::seek_hole(file, s.offset) {
        Ok(Some(hole)) if hole < s.end() => Err(cut(
            path,
            FormatError::at(
                hole,
                K::Inconsistent("a hole (unwritten bytes) in a feature section"),
            ),
        )),
        _ => Ok(()),
    }
}

/// The error of writing the assembled copy of the directory `path` in
/// `tmp` (`op`: creating or writing it).
fn spool(op: &'static str, path: &Path, tmp: &Path) -> impl FnOnce(std::io::Error) -> InputError {
    spool_err((op, "directory recording"), path, tmp)
}

/// Copies bytes `from..to` of `file` (`path`) to `out`, its write errors
/// made by `spool_err`.
fn copy_range<W: Write, E: FnOnce(std::io::Error) -> InputError>(
    file: &File,
    path: &Path,
    (from, to): (u64, u64),
    out: &mut W,
    spool_err: &impl Fn(&'static str) -> E,
) -> Result<(), InputError> {
    let mut buf = vec![0u8; SPOOL_CHUNK];
    let mut at = from;
    while at < to {
        let n = (to - at).min(SPOOL_CHUNK as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)
            .map_err(io_err(READING, path))?;
        out.write_all(&buf[..n]).map_err(spool_err("writing"))?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` records of `size` bytes (type 9) in byte order `e`.
    fn records(e: Endian, n: usize, size: u16) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..n {
            let at = out.len();
            out.resize(at + usize::from(size), 0xa5);
            out[at..at + 4].copy_from_slice(&e.u32_bytes(9));
            out[at + 4..at + 6].copy_from_slice(&e.u16_bytes(0));
            out[at + 6..at + 8].copy_from_slice(&e.u16_bytes(size));
        }
        out
    }

    /// `bytes` as a data.N file copied by `copy_records` (no
    /// decompression): what it wrote, or its error.
    fn check(bytes: &[u8], e: Endian) -> Result<(), InputError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.0");
        std::fs::write(&path, bytes).unwrap();
        let f = File::open(&path).unwrap();
        let part = Section {
            offset: 0,
            size: bytes.len() as u64,
        };
        let mut out = Vec::new();
        let tmp = dir.path().to_path_buf();
        let (n, _) = copy_records((&f, &path, part), e, None, &mut out, &|op| {
            spool(op, &path, &tmp)
        })?;
        assert_eq!((n, &out[..]), (bytes.len() as u64, bytes));
        Ok(())
    }

    fn offset_of(r: Result<(), InputError>) -> (u64, String) {
        match r {
            Err(InputError::InDirectory(d)) => (d.what.offset, d.what.kind.to_string()),
            other => panic!("{other:?}"),
        }
    }

    // An offset of the assembled recording is told as the file it came
    // from and the offset there (counting in the decompressed records of a
    // file that had COMPRESSED records); one in the feature table, which
    // assembling wrote, is left as it is.
    #[test]
    fn errors_name_the_file_their_bytes_came_from() {
        let mut o = Origins::default();
        let (data, one, two) = (
            Path::new("d/data"),
            Path::new("d/data.1"),
            Path::new("d/data.2"),
        );
        o.add(0, 256, data, Some(0));
        o.add(256, 100, data, Some(256));
        o.add(356, 50, one, Some(0));
        o.add(406, 70, two, None);
        // (the feature table: 476..508)
        o.add(508, 20, data, Some(900));
        let at = |offset| {
            let err = FormatError::at(offset, K::Truncated("x"));
            match o.locate(&err).map(|e| match e {
                InputError::InDirectory(d) => *d,
                other => panic!("{other:?}"),
            }) {
                Some(
                    d @ DirFileError {
                        assembled: true, ..
                    },
                ) => {
                    // the cause (where the CLI looks for a cut) is `what`
                    // where the offset is the file's
                    let cause = std::error::Error::source(&d).is_some();
                    assert_eq!(cause, !d.decompressed);
                    Some((d.path, d.what.offset, d.decompressed))
                }
                None => None,
                Some(other) => panic!("{other:?}"),
            }
        };
        let got = |p: &Path, off, dec| Some((p.to_path_buf(), off, dec));
        assert_eq!(at(40), got(data, 40, false));
        assert_eq!(at(300), got(data, 300, false));
        assert_eq!(at(356), got(one, 0, false));
        assert_eq!(at(405), got(one, 49, false));
        assert_eq!(at(410), got(two, 4, true));
        assert_eq!(at(480), None);
        assert_eq!(at(510), got(data, 902, false));
        assert_eq!(at(528), None);
        // offsets inside the error's kind move with it (helper-96: a
        // HEADER_FEATURE record's bad entry was told in the copy)
        let inner = K::BadFeatureRecord {
            feature: "BUILD_ID",
            at: 380,
            payload: 370,
            what: Box::new(K::BadBuildIdEntry(12)),
        };
        match o.locate(&FormatError::at(360, inner)) {
            Some(InputError::InDirectory(d)) => {
                let text = d.what.to_string();
                assert!(text.starts_with("at offset 4: "), "{text}");
                assert!(
                    text.ends_with("(at offset 24, byte 10 of its payload)"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    // An AUXTRACE record's AUX data, which follows it outside its size (a
    // `--kcore` directory of an AUX event holds them in `data`), is copied
    // after it, and the records after that framed from its end (it was
    // read as the next record's header: refused).
    #[test]
    fn the_data_after_an_auxtrace_record_is_copied() {
        for e in [Endian::Little, Endian::Big] {
            let mut aux = e.u32_bytes(crate::perf::consts::types::AUXTRACE).to_vec();
            aux.extend(e.u16_bytes(0));
            aux.extend(e.u16_bytes(48));
            aux.extend(e.u64_bytes(24)); // the AUX data's size
            aux.resize(48, 0);
            aux.extend([0x5a; 24]);
            let bytes = [records(e, 2, 16), aux, records(e, 3, 24)].concat();
            assert!(check(&bytes, e).is_ok());
            // its data claimed past the end of the file: refused there
            let (at, what) = offset_of(check(&bytes[..32 + 48 + 8], e));
            assert_eq!((at, what.contains("implausible")), (32, true), "{what}");
        }
    }

    // Whole records are copied as they are, in either byte order, also with
    // record headers across two of the reader's fills (13-byte records: the
    // 128 KiB boundary falls inside one's header); a file ending inside a record,
    // or in bytes too few for a header, or with a record smaller than its
    // header, is refused at that record's offset.
    #[test]
    fn a_data_file_must_be_whole_records() {
        for e in [Endian::Little, Endian::Big] {
            let whole = records(e, 30_000, 13);
            assert!(whole.len() > 2 * SPOOL_CHUNK);
            assert!(check(&whole, e).is_ok());
            let cut = &whole[..whole.len() - 3];
            let (at, what) = offset_of(check(cut, e));
            assert_eq!(at, 13 * 29_999, "{what}");
            assert!(what.contains("runs past the end"), "{what}");
            let (at, what) = offset_of(check(&whole[..13 * 5 + 4], e));
            assert_eq!((at, what.contains("stray bytes")), (13 * 5, true), "{what}");
            // a tail zero-filled after a crash is told as such, a cut
            // (helper-96: it was a record of size 0, not a cut)
            let mut zeroed = whole[..13 * 7].to_vec();
            zeroed.resize(13 * 7 + 4096, 0);
            let (at, what) = offset_of(check(&zeroed, e));
            assert_eq!((at, what.contains("zero-filled")), (13 * 7, true), "{what}");
            let mut small = records(e, 3, 16);
            small[16 + 6..16 + 8].copy_from_slice(&e.u16_bytes(4));
            let (at, what) = offset_of(check(&small, e));
            assert_eq!((at, what.contains("size 4")), (16, true), "{what}");
            // read in the other order, sizes are wrong
            let other = match e {
                Endian::Little => Endian::Big,
                Endian::Big => Endian::Little,
            };
            assert!(check(&whole, other).is_err());
        }
    }
}
