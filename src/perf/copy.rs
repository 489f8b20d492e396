//! Copies of byte ranges between files, through the kernel where it is as
//! fast as `cp`.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::progress::Progress;

/// Pages of the files copied: a copy whose source and destination offsets
/// agree modulo this goes through the kernel at `cp`'s speed.
pub const PAGE: u64 = 4096;

/// Bytes a kernel copy between files moves per round (its internal pipe's
/// sixteen pages). Each round is one write to the destination, and the page
/// cache gives a write a large folio only at an index aligned to its size:
/// rounds that start a page or a few past a multiple of this get order-0
/// folios. 25.5 MB from offset 280 on ext4 (6.18): 7.8-8.0 ms to a
/// destination whose first page is a multiple of 16, 8.8 ms at 8 mod 16,
/// 10.5-11.2 ms at other pages (`cp` itself copies from offset 0 to 0).
pub const ROUND: u64 = 16 * PAGE;

/// The pipe a large copy goes through (see [`splice_part`]): the most an
/// unprivileged user gets without raising `fs.pipe-max-size`.
const PIPE_BYTES: usize = 1 << 20;

/// Copies smaller than this take the kernel's own copy (a pipe costs three
/// system calls to make).
const SPLICE_FROM: u64 = 256 << 10;

/// Copies `len` bytes at `off` of `from` to the current position of `to`.
///
/// Large copies to a regular file go through a 1 MiB pipe with `splice`
/// ([`splice_part`]): 25.5 MB from offset 280 in 10.2 ms where
/// `copy_file_range` (as `cp` copies) took 11.5 ms, 11.0 against 15.5 to a
/// destination off a round (below) and 11.3 against 16.7 (and `pread`/`write`
/// 12.8) to one not page-congruent. What that cannot copy goes as follows.
///
/// When source and destination offsets are congruent modulo [`PAGE`],
/// `copy_file_range` (what std's `io::copy` uses between files) is as fast as
/// `cp` (100 MB on ext4: 28 ms at the same offset or shifted 256 KiB) once
/// the destination is on a [`ROUND`]'s first page: the bytes before the next
/// round's start go through `pread`/`write`. Shifted
/// by other amounts the kernel's splice path is slower (41 ms) than plain
/// `pread`/`write` through a 1 MiB buffer (33 ms), so such copies take that.
/// (Not the record reader's 128 KiB `READ_CHUNK`: `convert --to pipe` of the
/// dense benchmark recording took 32.9 ms through it against 28.0 ms, medians
/// of 25: eight times the writes.)
pub(crate) fn copy_range(from: &File, off: u64, len: u64, to: &mut File) -> io::Result<()> {
    copy_range_shown(from, off, len, to, None)
}

/// [`copy_range`] without a progress line, for copies made beside a walk
/// (which shows its own: two would overwrite each other), stopping with an
/// error (kind [`io::ErrorKind::Other`]: not a retryable EINTR) within
/// [`STOP_CHECK`] bytes once `stop`
/// is set (the walk failed: its error is the one to report, now, not after
/// the rest of a large file is copied).
pub(crate) fn copy_range_beside(
    from: &File,
    off: u64,
    len: u64,
    to: &mut File,
    stop: &AtomicBool,
) -> io::Result<()> {
    copy_range_shown(from, off, len, to, Some(stop))
}

/// Runs `walk` beside a copy watching `stop`, and sets `stop` unless the walk
/// returns `Ok` -- when it fails *or panics*, so a copy of a large file ends
/// within [`STOP_CHECK`] bytes instead of finishing before the failure is
/// seen. A panic is caught and returned for the caller to tidy up (drop
/// what others wait on) and then resume with [`std::panic::resume_unwind`].
pub(crate) fn walk_beside<T, E>(
    stop: &AtomicBool,
    walk: impl FnOnce() -> Result<T, E>,
) -> std::thread::Result<Result<T, E>> {
    let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(walk));
    if !matches!(walked, Ok(Ok(_))) {
        stop.store(true, Ordering::Relaxed);
    }
    walked
}

/// Bytes from `at` to the next [`ROUND`]'s start; 0 on a round's first
/// page (the kernel's rounds end on page boundaries, so a copy to there
/// fills its rounds' pages from their starts).
fn before_round(at: u64) -> u64 {
    let in_round = at % ROUND;
    if in_round < PAGE {
        0
    } else {
        ROUND - in_round
    }
}

/// Bytes copied between two looks at a copy's stop flag.
pub(crate) const STOP_CHECK: u64 = 16 << 20;

fn copy_range_shown(
    from: &File,
    off: u64,
    len: u64,
    to: &mut File,
    stop: Option<&AtomicBool>,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let dest = to.stream_position()?;
    // a total of 0 is never shown
    let mut progress = Progress::new("copying", if stop.is_none() { len } else { 0 });
    let mut done = 0;
    let mut buf = Vec::new();
    let congruent = dest.abs_diff(off) % PAGE == 0;
    let step = if stop.is_some() {
        STOP_CHECK
    } else {
        256 << 20
    };
    if len >= SPLICE_FROM && to.metadata()?.is_file() {
        done = splice_part(from, off, len, to, stop, &mut progress)?;
    }
    while done < len {
        stopped(stop)?;
        let to_round = before_round(dest + done);
        let n = if congruent && (to_round == 0 || len - done < ROUND) {
            let mut f = from;
            f.seek(SeekFrom::Start(off + done))?;
            io::copy(&mut f.take((len - done).min(step)), to)?
        } else {
            // congruent: only the bytes before the round's start
            let most = if congruent { to_round } else { 1 << 20 };
            if buf.is_empty() {
                buf = vec![0u8; most.min(len) as usize];
            }
            let want = (len - done).min(most) as usize;
            let n = match from.read_at(&mut buf[..want], off + done) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r?,
            };
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

/// Copies what it can of `len` bytes at `off` of `from` to `to`'s position
/// through a [`PIPE_BYTES`] pipe, in writes that end on the destination's
/// multiples of the pipe's size (so its page cache gets large folios);
/// returns the bytes copied: all of them, or as many as went before the
/// pipe could not be made, the source could not be spliced (nothing is in
/// the pipe then) or the destination refused (what the pipe held is
/// written through user space first). The rest is the caller's to copy.
fn splice_part(
    from: &File,
    off: u64,
    len: u64,
    to: &mut File,
    stop: Option<&AtomicBool>,
    progress: &mut Progress,
) -> io::Result<u64> {
    let Ok(pipe) = crate::sys::SplicePipe::new(PIPE_BYTES) else {
        return Ok(0);
    };
    let cap = pipe.capacity() as u64;
    let mut at = to.stream_position()?;
    let mut done = 0;
    while done < len {
        stopped(stop)?;
        let want = (len - done).min(cap - at % cap) as usize;
        let n = match pipe.fill(from, off + done, want) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "input shrank while being copied",
                ))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if refused(&e) => return Ok(done),
            Err(e) => return Err(e),
        };
        let mut left = n;
        while left > 0 {
            match pipe.drain(to, left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if refused(&e) => {
                    // the destination takes no splice: what the pipe holds
                    // goes through user space, the rest by the caller
                    let mut buf = vec![0u8; left];
                    let mut got = 0;
                    while got < left {
                        match pipe.read(&mut buf[got..]) {
                            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                            Ok(r) => got += r,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    to.write_all(&buf)?;
                    return Ok(done + n as u64);
                }
                Err(e) => return Err(e),
            }
        }
        done += n as u64;
        at += n as u64;
        progress.at(done);
    }
    Ok(done)
}

/// An error once `stop` is set: the walk beside the copy failed.
fn stopped(stop: Option<&AtomicBool>) -> io::Result<()> {
    match stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        true => Err(io::Error::other("copy stopped: the walk beside it failed")),
        false => Ok(()),
    }
}

/// Whether `e` says a file takes no `splice` (a file system without it, an
/// append-only file): the copy goes another way.
fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // The bytes before a round are none on a round's first page and reach
    // the next round's start from anywhere else.
    #[test]
    fn bytes_before_a_round() {
        assert_eq!(before_round(0), 0);
        assert_eq!(before_round(280), 0);
        assert_eq!(before_round(PAGE - 1), 0);
        assert_eq!(before_round(PAGE), ROUND - PAGE);
        assert_eq!(before_round(523_336), 952);
        assert_eq!(before_round(ROUND * 3 + 5), 0);
        assert_eq!(before_round(ROUND * 3 - 1), 1);
    }

    // Copies to a congruent place inside a round and to one not
    // congruent, under the splice pipe's size (a congruent one's head
    // through pread/write, the rest by the kernel's copy) and over it
    // (through the pipe), copy every byte where it belongs.
    #[test]
    fn congruent_copies_off_a_round_copy_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let (under, over) = (3 * ROUND + 777, 5 * ROUND + 777);
        assert!(under < SPLICE_FROM && over - 5000 >= SPLICE_FROM);
        copies_every_byte(dir.path(), under as usize);
        copies_every_byte(dir.path(), over as usize);
    }

    fn copies_every_byte(dir: &std::path::Path, size: usize) {
        use std::os::unix::fs::FileExt;
        let src_path = dir.join("src");
        let data: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
        std::fs::write(&src_path, &data).unwrap();
        let src = File::open(&src_path).unwrap();
        for (off, dest) in [(3144u64, 127 * PAGE + 3144), (100, 100), (5000, 7000)] {
            let mut out = tempfile::tempfile().unwrap();
            out.seek(SeekFrom::Start(dest)).unwrap();
            let len = data.len() as u64 - off;
            copy_range(&src, off, len, &mut out).unwrap();
            let mut back = vec![0u8; len as usize];
            out.read_exact_at(&mut back, dest).unwrap();
            assert!(back[..] == data[off as usize..], "{off} -> {dest}");
        }
    }

    // A destination that takes no splice (opened to append) still gets
    // every byte, in order, the pipe's first fill written through user
    // space; so does a copy too small for the pipe.
    #[test]
    fn copies_to_a_file_refusing_splice_are_whole() {
        let dir = tempfile::tempdir().unwrap();
        let src_path = dir.path().join("src");
        let data: Vec<u8> = (0..(3 * PIPE_BYTES + 12_345))
            .map(|i| (i % 241) as u8)
            .collect();
        std::fs::write(&src_path, &data).unwrap();
        let src = File::open(&src_path).unwrap();
        for (off, len) in [(7u64, data.len() as u64 - 7), (100, 1000)] {
            let out_path = dir.path().join(format!("out{off}"));
            std::fs::write(&out_path, b"head").unwrap();
            let mut out = std::fs::OpenOptions::new()
                .append(true)
                .open(&out_path)
                .unwrap();
            out.seek(SeekFrom::End(0)).unwrap();
            copy_range(&src, off, len, &mut out).unwrap();
            let back = std::fs::read(&out_path).unwrap();
            assert_eq!(&back[..4], b"head");
            assert!(
                back[4..] == data[off as usize..(off + len) as usize],
                "{off}+{len}"
            );
        }
    }

    // A copy beside a walk stops within one check's bytes once told to (the
    // flag set before it starts: nothing copied), and copies all otherwise.
    #[test]
    fn copy_beside_stops_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let src_path = dir.path().join("src");
        let data: Vec<u8> = (0..(3 * STOP_CHECK + 5)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&src_path, &data).unwrap();
        let src = File::open(&src_path).unwrap();
        let mut out = tempfile::tempfile().unwrap();
        let stop = AtomicBool::new(true);
        let len = data.len() as u64;
        let e = copy_range_beside(&src, 0, len, &mut out, &stop).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert_eq!(out.metadata().unwrap().len(), 0);
        stop.store(false, Ordering::Relaxed);
        copy_range_beside(&src, 0, len, &mut out, &stop).unwrap();
        let mut back = Vec::new();
        out.seek(SeekFrom::Start(0)).unwrap();
        out.read_to_end(&mut back).unwrap();
        assert!(back == data, "copied bytes differ");
    }

    // The stop flag is set when the walk beside a copy fails or panics (the
    // panic handed back, not swallowed), and left clear when it succeeds.
    #[test]
    fn walk_beside_stops_the_copy_unless_the_walk_succeeds() {
        let stop = AtomicBool::new(false);
        let ok = walk_beside(&stop, || Ok::<u8, ()>(7));
        assert!(matches!(ok, Ok(Ok(7))));
        assert!(!stop.load(Ordering::Relaxed));
        let failed = walk_beside(&stop, || Err::<u8, ()>(()));
        assert!(matches!(failed, Ok(Err(()))));
        assert!(stop.swap(false, Ordering::Relaxed));
        let panicked = walk_beside(&stop, || -> Result<u8, ()> { panic!("walk") });
        let payload = panicked.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"walk"));
        assert!(stop.load(Ordering::Relaxed));
    }
}
