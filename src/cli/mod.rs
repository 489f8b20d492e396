//! The command line, by concern: arguments (`args`), the error and its exit
//! codes (`error`), the snapshot and `archive` (`snapshot`),
//! `merge`/`convert` (`rewrite`), `dump` (`dump`), `record` and `pprof`.

mod args;
mod dump;
mod error;
mod pprof;
mod record;
mod rewrite;
mod snapshot;

use std::process::ExitCode;

use clap::Parser;
use mmap2_synth::output;

use args::{Cli, Command};

/// Parses the arguments, runs the command, prints an error once with its
/// causes and maps it to the exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    remove_temporaries_on_signals();
    let result = match &cli.command {
        Some(Command::Merge(m)) => rewrite::run_merge(m),
        Some(Command::Dump(d)) => dump::run_dump(d),
        Some(Command::Convert(c)) => rewrite::run_convert(c),
        Some(Command::Archive(a)) => snapshot::run_archive(a),
        Some(Command::Record(r)) => record::run_record(r),
        Some(Command::Pprof(p)) => pprof::run_pprof(p),
        None => snapshot::run(&cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error::chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Prints summary lines on stderr.
pub(crate) fn print(lines: &[String]) {
    for l in lines {
        eprintln!("{l}");
    }
}

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary output files, then
/// exit with 128 + the signal, as a shell reports it. While `record` waits
/// for perf, the signal is perf's instead (see [`RECORDING`]).
fn remove_temporaries_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use std::sync::atomic::Ordering::SeqCst;
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        for sig in signals.forever() {
            match RECORDING.load(SeqCst) {
                // perf is told to stop (SIGHUP as SIGTERM, which perf
                // handles); it finishes its output, and the merge into it
                // still happens. (Ctrl-C reaches perf anyway, through the
                // process group; a second SIGINT changes nothing.)
                pidfd if pidfd >= 0 => {
                    let to = if sig == SIGHUP { SIGTERM } else { sig };
                    if mmap2_synth::sys::pidfd_send_signal(pidfd, to).is_ok() {
                        continue;
                    }
                }
                // no pidfd: Ctrl-C is left to perf, which has it too
                RECORDING_NO_PIDFD if sig == SIGINT => continue,
                _ => {}
            }
            output::remove_temporaries();
            record::remove_scratch();
            std::process::exit(128 + sig);
        }
    });
}

/// While `record` waits for perf: perf's pidfd, through which the signal
/// thread forwards SIGINT, SIGTERM and SIGHUP to it (else perf would record
/// on with nobody to merge its output), or [`RECORDING_NO_PIDFD`] on a
/// kernel without pidfds; [`NOT_RECORDING`] otherwise.
pub(crate) static RECORDING: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(NOT_RECORDING);
/// [`RECORDING`] outside `record`'s wait for perf.
pub(crate) const NOT_RECORDING: i32 = -1;
/// [`RECORDING`] while waiting for a perf without a pidfd: SIGINT is
/// ignored (perf, in the same process group, has it too).
pub(crate) const RECORDING_NO_PIDFD: i32 = -2;
