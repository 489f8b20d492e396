//! A live snapshot streamed to its output: the scan reads processes in
//! parallel, [`CHUNK`](crate::proc::scan::CHUNK) at a time, each is encoded
//! on the worker that read it, and the writer takes them in pid order. Memory
//! is bounded by a chunk of processes, whatever the size of the host.

use super::file::{Out, WriteOptions};
use super::stats::Stats;
use super::writer::{encode_keyed, SnapshotWriter};
use crate::perf::WriteError;
use crate::proc::watch::{parse_watched, Watch};
use crate::proc::{self, ScanError, Skip, Target};

/// A live snapshot that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The scan as a whole failed (no /proc, no ioctl with `--source ioctl`).
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// The output could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// What a live snapshot wrote.
#[derive(Debug, Default)]
pub struct LiveReport {
    /// The counts, skips included.
    pub stats: Stats,
    /// The processes skipped, by pid.
    pub skipped: Vec<Skip>,
}

/// Reads the target's processes and writes them as a snapshot to `out`.
pub fn write_live(
    target: &Target,
    scan: &proc::Options,
    out: Out<'_>,
    opts: &WriteOptions,
) -> Result<LiveReport, LiveError> {
    // The watch opens before anything is read: maps made from here on are
    // reported by the kernel even if the scan has passed their process.
    let clock = || crate::sys::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let watch_start = clock();
    let mut watch_skipped = None;
    let watch = match (opts.watch, opts.endian == crate::bytes::Endian::NATIVE) {
        (false, _) => None,
        (true, false) => {
            watch_skipped = Some("watching writes this machine's byte order only".to_string());
            None
        }
        (true, true) => {
            let data = scan.selection == crate::model::Selection::ExecAndData;
            match Watch::start(target, &scan.proc_root, data, opts.watch_pages) {
                Ok(w) => Some(w),
                Err(why) => {
                    watch_skipped = Some(why);
                    None
                }
            }
        }
    };
    let mut w = SnapshotWriter::start(out, opts)?;
    let enc = w.encoding();
    if let Some(roots) = &opts.kernel {
        w.write_kernel(&crate::proc::kernel::kernel_maps(roots))?;
    }
    let keyed = watch.is_some();
    let scanned = proc::scan_each(
        target,
        scan,
        |p| encode_keyed(&p, &enc, keyed),
        |e| -> Result<(), LiveError> { Ok(w.write(e.map_err(WriteError::from)?)?) },
    )?;
    let scan_end = clock();
    let watched = watch.is_some();
    let mut lost = 0;
    if let Some(watch) = watch {
        hold_for_tests();
        let recs = parse_watched(&watch.drain(), &mut lost);
        w.write_watched(&recs, *target == Target::All)?;
    }
    let mut stats = w.finish()?;
    stats.watch_lost = lost;
    stats.watch_skipped = watch_skipped;
    stats.watch_window = Some((watch_start, scan_end));
    stats.watched = watched;
    stats.add_skips(&scanned.skipped, scanned.unverified_build_ids);
    Ok(LiveReport {
        stats,
        skipped: scanned.skipped,
    })
}

/// A test hook: with `MMAP2_SYNTH_TEST_HOLD_BEFORE_DRAIN=PATH`, a watched
/// snapshot creates PATH after its scan and waits (30 s at most) until it
/// is removed before reading the watch, so a test can map a library after
/// the scan read its process and before the watch is drained.
fn hold_for_tests() {
    let Some(path) = std::env::var_os("MMAP2_SYNTH_TEST_HOLD_BEFORE_DRAIN") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    if std::fs::write(&path, b"").is_err() {
        return;
    }
    for _ in 0..3000 {
        if !path.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
