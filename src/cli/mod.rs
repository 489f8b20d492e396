//! The command line, by concern: arguments (`args`), the error and its exit
//! codes (`error`), the snapshot and `archive` (`snapshot`),
//! `merge`/`convert` (`rewrite`), `dump` (`dump`), `record` and `pprof`;
//! stdout as they write it (`stdout`: a reader gone is a quiet stop).

mod args;
mod dump;
mod error;
mod pprof;
mod record;
mod rewrite;
mod snapshot;
mod stdout;

use std::process::ExitCode;

use clap::Parser;
use mmap2_synth::output;

use args::{Cli, Command};

/// Parses the arguments, runs the command, prints an error once with its
/// causes and maps it to the exit status.
pub fn main() -> ExitCode {
    mmap2_synth::sys::keep_freed_memory();
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
        // (said already, or nothing to say: perf stopped as the user asked)
        Err(error::CliError::Stopped(code)) => ExitCode::from(code),
        Err(e) => {
            let hint = match error::is_cut(&e) {
                true => salvage_hint(&cli.command),
                false => "",
            };
            eprintln!("error: {}{hint}", error::chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// How to read a recording cut short anyway, said after the error it gave:
/// `--salvage` where the command has it and it was not given.
fn salvage_hint(command: &Option<Command>) -> &'static str {
    const HINT: &str =
        "; if the recording was cut short, --salvage reads it up to its last whole record";
    let given = match command {
        Some(Command::Merge(m)) => m.target.salvage.salvage,
        Some(Command::Convert(c)) => c.target.salvage.salvage,
        Some(Command::Dump(d)) => d.salvage.salvage,
        Some(Command::Pprof(p)) => p.salvage.salvage,
        Some(Command::Record(_)) => {
            return "; if perf record was cut short, `mmap2-synth merge --salvage --in-place \
                    FILE` reads its file up to its last whole record"
        }
        _ => return "",
    };
    if given {
        ""
    } else {
        HINT
    }
}

/// Prints summary lines on stderr.
pub(crate) fn print(lines: &[String]) {
    for l in lines {
        eprintln!("{l}");
    }
}

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary output files, then
/// exit with 128 + the signal, as a shell reports it. While `record` runs
/// perf, the signal is perf's instead ([`record::on_signal`]): perf stops,
/// and its output is still merged. While a stream input is read, the first
/// SIGINT or SIGTERM is put off ([`mmap2_synth::interrupt`]): the writer
/// (perf record, in the same process group) ends its stream, and the
/// command reads it to its end and completes (or, if the stream stops
/// being perf.data, ends then as for the signal).
fn remove_temporaries_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if record::on_signal(sig) {
                continue;
            }
            if mmap2_synth::interrupt::put_off(sig) {
                let name = signal_hook::low_level::signal_name(sig).unwrap_or("signal");
                let stall = mmap2_synth::testhook::stream_stall(mmap2_synth::interrupt::STALL);
                eprintln!(
                    "mmap2-synth: {name}: reading the input stream to its end \
                     (signal again to abort; aborting if it sends nothing for {} s)",
                    stall.as_secs_f64()
                );
                mmap2_synth::interrupt::watch_for_stall(stall, move || {
                    eprintln!(
                        "mmap2-synth: {name}: the input stream sent nothing for {} s: aborting",
                        stall.as_secs_f64()
                    );
                    abort(sig);
                });
                continue;
            }
            abort(sig);
        }
    });
    mmap2_synth::interrupt::on_abort(abort);
}

/// Ends the process for signal `sig`: the temporary outputs removed, exit
/// 128 + the signal.
fn abort(sig: i32) {
    output::remove_temporaries();
    record::remove_scratch();
    std::process::exit(128 + sig);
}
