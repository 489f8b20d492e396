//! stdout and the other streams the commands write their output to
//! (`dump`, `--json`, `-o -`, `pprof -o -`; `-o FIFO`, `-o /dev/stdout`):
//! a closed descriptor 1 is refused ([`open_stdout`]), and a reader that
//! went away is a quiet stop, whichever stream it read.
//!
//! Rust ignores SIGPIPE, so a write to a pipe whose reader has gone
//! (`mmap2-synth dump big.data | head -1`) fails with EPIPE instead of
//! killing the process. That is the reader's choice, not our failure: as
//! ripgrep does, nothing is printed and the exit status is 0 (ripgrep's
//! for a broken pipe). The run stops at that write, as a C tool killed by
//! SIGPIPE would (a dump does not read on through a large recording), its
//! temporary files removed. A closed descriptor 1 (EBADF) and a full disk
//! stay errors ([`open_stdout`]).

use std::io::{self, Write};
use std::path::Path;

use super::error::CliError;

/// A writer to stdout or another stream (a FIFO, a device) whose EPIPE
/// ends the run quietly (see the module).
pub(crate) struct Stream<W: Write>(pub(crate) W);

impl<W: Write> Write for Stream<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(stop_if_gone)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(stop_if_gone)
    }
}

/// Ends the run, exit 0, when `e` says stdout's reader has gone; else
/// gives `e` back.
fn stop_if_gone(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        mmap2_synth::output::remove_temporaries();
        super::record::remove_scratch();
        std::process::exit(0);
    }
    e
}

/// Descriptor 1 as a file, refused when it was closed (std ignores writes
/// to a closed descriptor 1, which would report success for data that went
/// nowhere).
pub(crate) fn open_stdout() -> Result<std::fs::File, CliError> {
    use std::os::fd::AsFd;
    let err = |e: std::io::Error| CliError::write(Path::new("stdout"), e);
    let fd = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(err)?;
    if stdout_was_closed(&fd) {
        return Err(err(std::io::Error::from_raw_os_error(libc::EBADF)));
    }
    Ok(std::fs::File::from(fd))
}

/// Whether descriptor 1 was closed when we started: the Rust runtime then
/// opens /dev/null read-write in its place, which no shell redirection does
/// (`>` opens write-only), so that is what is looked for.
fn stdout_was_closed(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Ok(null) = std::fs::metadata("/dev/null") else {
        return false;
    };
    let Ok(meta) = fd
        .try_clone()
        .and_then(|d| std::fs::File::from(d).metadata())
    else {
        return false;
    };
    meta.rdev() == null.rdev()
        && mmap2_synth::sys::access_mode(fd.as_fd()).is_ok_and(|m| m == libc::O_RDWR)
}
