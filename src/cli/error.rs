//! The CLI's one error type, its exit codes, and how it is printed.

use std::path::Path;

use mmap2_synth::dump::DumpError;
use mmap2_synth::output::OutputError;
use mmap2_synth::perf::WriteError;
use mmap2_synth::proc::ScanError;
use mmap2_synth::rewrite::{ConvertError, MergeError};
use mmap2_synth::summary::StrictFailure;

/// A CLI failure: what went wrong, and through [`CliError::exit_code`] the
/// exit status (2 bad usage or input, 3 `--strict`, 1 anything else).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// The scan of /proc failed as a whole.
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// The output cannot be used.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// Writing the snapshot failed.
    #[error("writing {path}")]
    Write {
        /// The output ("stdout" for `-o -`).
        path: String,
        /// The cause.
        #[source]
        source: WriteError,
    },
    /// The merge failed.
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// The dump failed.
    #[error(transparent)]
    Dump(#[from] DumpError),
    /// The conversion failed.
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// The archive failed.
    #[error(transparent)]
    Archive(#[from] mmap2_synth::archive::ArchiveError),
    /// The pprof conversion failed.
    #[error(transparent)]
    Pprof(#[from] mmap2_synth::pprof::PprofError),
    /// `record` could not run or follow perf (a FIFO, a timeout, a wait):
    /// the system's failure, not a bad argument.
    #[error("{0}")]
    Record(String),
    /// `perf record` failed: its exit status is ours.
    #[error("perf record failed (exit status {0})")]
    Child(u8),
    /// `perf record` ended of the SIGINT or SIGTERM the user sent (Ctrl-C,
    /// the usual way to end `-p`), or with its workload's failing status
    /// after a whole recording: its exit status is ours, as perf's own
    /// would be, and no error is printed (`record` notes why).
    #[error("perf record stopped by a signal (exit status {0})")]
    Stopped(u8),
    /// `--strict` and something was skipped.
    #[error(transparent)]
    Strict(#[from] StrictFailure),
}

impl CliError {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Output(o) if o.is_refusal() => 2,
            // an output refused or raced when its temporary file was made
            // or renamed into place (its directory gone, or swapped for
            // another user's link, since it was checked)
            CliError::Write {
                source: WriteError::Io(e),
                ..
            } if OutputError::refusal_in(e).is_some() => 2,
            // an archive -o that is no directory (a FIFO, a device, a file),
            // reached through another user's link (an OutputError), or that
            // cannot be made or written in (a directory missing on the way
            // is made; no permission, a read-only file system)
            CliError::Archive(mmap2_synth::archive::ArchiveError::Io {
                op: "creating",
                source,
                ..
            }) if mmap2_synth::output::unusable_path(source)
                || OutputError::refusal_in(source).is_some() =>
            {
                2
            }
            CliError::Merge(e) if e.is_bad_input() => 2,
            CliError::Dump(e) if e.is_bad_input() => 2,
            CliError::Convert(e) if e.is_bad_input() => 2,
            CliError::Archive(mmap2_synth::archive::ArchiveError::Input(e)) if e.is_bad_input() => {
                2
            }
            CliError::Pprof(mmap2_synth::pprof::PprofError::NoEvent { .. }) => 2,
            CliError::Pprof(mmap2_synth::pprof::PprofError::Input(e)) if e.is_bad_input() => 2,
            CliError::Strict(_) => 3,
            CliError::Child(c) | CliError::Stopped(c) => *c,
            _ => 1,
        }
    }

    pub(crate) fn write(path: &Path, source: impl Into<WriteError>) -> CliError {
        CliError::Write {
            path: path.display().to_string(),
            source: source.into(),
        }
    }
}

/// The error and its causes, joined by ": ", each once, escaped as the
/// terminal gets it ([`mmap2_synth::text::escape`]: paths, event names and
/// the messages of libraries that read a hostile file carry whatever bytes
/// it put there).
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    mmap2_synth::text::escape(message.as_bytes())
}

/// Whether `err` (or a cause) is what a recording cut short gives.
pub(crate) fn is_cut(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut e = Some(err);
    while let Some(x) = e {
        if x.downcast_ref::<mmap2_synth::perf::FormatError>()
            .is_some_and(|f| f.is_cut())
        {
            return true;
        }
        e = x.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmap2_synth::perf::{DirFileError, FormatError, FormatErrorKind, InputError};

    // A cut in a perf.data directory's file is one `--salvage` reads (the
    // hint is added) when found in the assembled recording at an offset of
    // the file, and not when found while assembling (its own note says so).
    #[test]
    fn a_directory_files_cut_is_salvageable_only_in_the_assembled_recording() {
        let err = |assembled, decompressed| {
            InputError::InDirectory(Box::new(DirFileError {
                path: "d/data".into(),
                what: FormatError::at(536, FormatErrorKind::StrayBytes(3)),
                decompressed,
                assembled,
            }))
        };
        assert!(is_cut(&err(true, false)));
        assert!(!is_cut(&err(false, false)));
        let text = chain(&err(true, false));
        assert_eq!(
            text,
            "d/data: at offset 536: 3 stray bytes at the end of the data"
        );
        assert!(chain(&err(false, false)).ends_with("does not read these up to a cut)"));
    }
}
