//! Opening an input file: a regular file as it is, found and reopened
//! through one descriptor (never a device or a path swapped in between); a
//! stream (stdin, a FIFO) copied to an unlinked temporary file first,
//! record by record ([`super::spool`]), leaving its file system room; a
//! perf.data directory found, for the `input_dir` module to assemble.

use std::fs::File;
use std::io;
use std::path::Path;

use super::input_error::{io_err, spool_err, InputError, OPENING, READING, REOPENING};
use super::spool::{spool, SpoolError, Spooled};

/// An input opened: a file (its length, and `true` for a stream's copy),
/// or a directory (an `O_PATH` descriptor of it), for
/// the `input_dir` module to assemble.
pub(super) enum Opened {
    File(File, u64, bool),
    Dir(File),
}

/// Opens an input: a regular file as it is; stdin (`-`) or a FIFO copied
/// to an unlinked temporary file (returned with `true`), unless
/// `regular_only`, up to where it stops holding records ([`spool`]); a
/// directory, unless `regular_only`, as it is found.
/// Opening never blocks; a FIFO is then waited on until its writer
/// connects, and from then until the copy ends a first SIGINT or SIGTERM
/// lets it be read to its end ([`crate::interrupt`]).
pub(super) fn open_input_file(path: &Path, regular_only: bool) -> Result<Opened, InputError> {
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
        if ft.is_dir() && !regular_only {
            // perf's directory format (`perf record --threads`)
            return Ok(Opened::Dir(at));
        }
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
        return Ok(Opened::File(file, meta.len(), false));
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
    let spool_err = |op| spool_err((op, "stream"), path, &dir);
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
    Ok(Opened::File(copy.file, len, true))
}

/// The copy of a stream, written only while its file system keeps
/// [`MIN_LEFT_PERCENT`] of its size (at least [`MIN_LEFT`]) for others: a
/// stream of valid-looking records that never ends (or one larger than the
/// room) stops with an error instead of filling the disk.
pub(super) struct Roomy {
    pub(super) file: File,
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
    pub(super) fn new(file: File) -> Roomy {
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
pub(super) const SPOOL_CHUNK: usize = 128 << 10;
