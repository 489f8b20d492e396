//! `--strict`: which of a command's counts fail it (exit 3), and how the
//! failure reads.

use crate::proc::Skip;

/// `--strict` failed: processes were skipped, records lost, files not
/// archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StrictFailure {
    /// Processes had to be skipped.
    #[error("--strict: {0} processes were skipped")]
    Skipped(usize),
    /// The watch lost records (a ring overflowed): maps may be missing.
    #[error("--strict: the watch lost {0} records")]
    Lost(u64),
    /// `merge`: processes were left out as not the ones the recording
    /// sampled: their samples keep no maps.
    #[error("--strict: {0} processes were not the recorded ones (not inserted)")]
    NotRecorded(usize),
    /// `archive`: mapped files could not be read, or were not the
    /// recorded ones.
    #[error(
        "--strict: {0} mapped files could not be read or were not verifiably the recorded ones"
    )]
    NotArchived(usize),
}

/// Fails under `--strict` when the watch lost records.
pub fn strict_lost(enabled: bool, lost: u64) -> Result<(), StrictFailure> {
    if enabled && lost > 0 {
        return Err(StrictFailure::Lost(lost));
    }
    Ok(())
}

/// Fails `merge --strict` when processes were left out as not the ones
/// the recording sampled (`n` of them).
pub fn strict_not_recorded(enabled: bool, n: usize) -> Result<(), StrictFailure> {
    if enabled && n > 0 {
        return Err(StrictFailure::NotRecorded(n));
    }
    Ok(())
}

/// Fails under `--strict` when a process had to be skipped. A pid that did
/// not exist fails only when `named` (the user named the pids, `-p`): one
/// gone between the list of /proc and its read is the host's churn.
pub fn strict(enabled: bool, skipped: &[Skip], named: bool) -> Result<(), StrictFailure> {
    let failed = skipped
        .iter()
        .filter(|s| named || s.reason != crate::proc::SkipReason::NotFound)
        .count();
    if enabled && failed > 0 {
        return Err(StrictFailure::Skipped(failed));
    }
    Ok(())
}

/// Fails `archive --strict` when mapped files could not be read (gone,
/// denied) or were not the recorded ones: the archive lacks them.
pub fn strict_archive(
    enabled: bool,
    r: &crate::archive::ArchiveReport,
) -> Result<(), StrictFailure> {
    if enabled && r.not_read() > 0 {
        return Err(StrictFailure::NotArchived(r.not_read()));
    }
    Ok(())
}
