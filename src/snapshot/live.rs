//! A live snapshot streamed to its output: the scan reads processes in
//! parallel, each is encoded on the worker that read it, and the writer
//! takes them in pid order while the workers read on, at most
//! [`AHEAD`](crate::proc::scan::AHEAD) processes and
//! [`AHEAD_BYTES`](crate::proc::scan::AHEAD_BYTES) ahead. Memory is
//! bounded by that and the processes in the workers' hands, whatever the
//! size of the host.

use super::file::{Out, WriteOptions};
use super::reported::Reported;
use super::stats::Stats;
use super::watched::ScanWatch;
use super::writer::{encode_piece, weighed, SnapshotWriter};
use crate::perf::WriteError;
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
    // the task iterator's BTF is read while the watch and kernel maps are
    // set up
    proc::scan::read_ahead(target, scan);
    // The watch opens before anything is read.
    let mut watch = ScanWatch::start(target, scan, opts.watch, opts.endian, opts.watch_pages);
    let mut w = SnapshotWriter::start(out, opts)?;
    w.follow(watch.filter());
    let enc = w.encoding();
    if let Some(roots) = &opts.kernel {
        w.write_kernel(&crate::proc::kernel::kernel_maps(roots))?;
        w.write_bpf(&crate::proc::bpf_progs::bpf_programs())?;
    }
    let watched = watch.is_on();
    let scanned = watch.scan(
        target,
        scan,
        |memo: &mut Reported, p, part| weighed(encode_piece(&p, part, &enc, watched, Some(memo))),
        |e| -> Result<(), LiveError> { Ok(w.write(e.map_err(WriteError::from)?)?) },
    )?;
    let (recs, notes) = watch.finish();
    w.write_watched(&recs, *target == Target::All)?;
    let mut stats = w.finish()?;
    notes.apply(&mut stats);
    stats.add_skips(&scanned.skipped, scanned.build_id_notes);
    stats.iterator_heads = scanned.iterator_heads;
    Ok(LiveReport {
        stats,
        skipped: scanned.skipped,
    })
}
