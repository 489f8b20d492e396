//! Copies of byte ranges between files, through the kernel where it is as
//! fast as `cp`.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

use super::progress::Progress;

/// Pages of the files copied: a copy whose source and destination offsets
/// agree modulo this goes through the kernel at `cp`'s speed.
pub const PAGE: u64 = 4096;

/// Copies `len` bytes at `off` of `from` to the current position of `to`.
///
/// When source and destination offsets are congruent modulo [`PAGE`],
/// `copy_file_range` (what std's `io::copy` uses between files) is as fast as
/// `cp` (100 MB on ext4: 28 ms at the same offset or shifted 256 KiB). Shifted
/// by other amounts the kernel's splice path is slower (41 ms) than plain
/// `pread`/`write` through a 1 MiB buffer (33 ms), so such copies take that.
/// (Not the record reader's 128 KiB `READ_CHUNK`: `convert --to pipe` of the
/// dense benchmark recording took 32.9 ms through it against 28.0 ms, medians
/// of 25: eight times the writes.)
pub(crate) fn copy_range(from: &File, off: u64, len: u64, to: &mut File) -> io::Result<()> {
    copy_range_shown(from, off, len, to, true)
}

/// [`copy_range`] without a progress line: for copies made beside a walk,
/// which shows its own (two would overwrite each other).
pub(crate) fn copy_range_quietly(from: &File, off: u64, len: u64, to: &mut File) -> io::Result<()> {
    copy_range_shown(from, off, len, to, false)
}

fn copy_range_shown(from: &File, off: u64, len: u64, to: &mut File, show: bool) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let dest = to.stream_position()?;
    // a total of 0 is never shown
    let mut progress = Progress::new("copying", if show { len } else { 0 });
    let mut done = 0;
    let mut buf = Vec::new();
    while done < len {
        let n = if dest.abs_diff(off) % PAGE == 0 {
            let mut f = from;
            f.seek(SeekFrom::Start(off + done))?;
            io::copy(&mut f.take((len - done).min(256 << 20)), to)?
        } else {
            if buf.is_empty() {
                buf = vec![0u8; (1 << 20).min(len as usize)];
            }
            let want = (len - done).min(buf.len() as u64) as usize;
            let n = from.read_at(&mut buf[..want], off + done)?;
            to.write_all(&buf[..n])?;
            n as u64
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "input shrank while being copied",
            ));
        }
        done += n;
        progress.at(done);
    }
    progress.done();
    Ok(())
}
