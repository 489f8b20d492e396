//! The `mmap2-synth` command line: a thin layer over the library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use mmap2_synth::output::AtomicFile;
use mmap2_synth::record::Endian;
use mmap2_synth::snapshot_file::{self, Mode, WriteOptions};
use mmap2_synth::synth::{self, Options, SourceChoice, Target};
use mmap2_synth::vma::Selection;

/// Synthesize PERF_RECORD_MMAP2 records (with build ids) for running
/// processes and write them as perf.data.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
#[command(group(clap::ArgGroup::new("target").args(["all", "pid", "uid"]).required(true)))]
struct Cli {
    /// Every process on the system (except mmap2-synth itself).
    #[arg(short = 'a', long)]
    all: bool,
    /// These processes (comma-separated pids).
    #[arg(short = 'p', long, value_delimiter = ',')]
    pid: Vec<u32>,
    /// Every process of this user (name or uid).
    #[arg(short = 'u', long)]
    uid: Option<String>,
    /// Output file; `-` writes pipe-mode perf.data to stdout.
    #[arg(short = 'o', long, default_value = "perf.data")]
    output: PathBuf,
    /// Also emit every readable data VMA (as `perf record -d`).
    #[arg(short = 'd', long)]
    data: bool,
    /// Where VMAs come from.
    #[arg(long, value_enum, default_value_t = SourceArg::Auto)]
    source: SourceArg,
    /// Do not look up build ids (MMAP2 records get maj/min/ino instead).
    #[arg(long)]
    no_buildid: bool,
    /// Worker threads (default: all cores).
    #[arg(short = 'j', long)]
    jobs: Option<usize>,
    /// Fail (exit 3) if any process had to be skipped.
    #[arg(long)]
    strict: bool,
    /// No summary on stderr.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Byte order of the output.
    #[arg(long, value_enum, default_value_t = ByteOrderArg::Native)]
    byte_order: ByteOrderArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SourceArg {
    /// PROCMAP_QUERY when the kernel has it (6.11+), else text.
    Auto,
    /// PROCMAP_QUERY only.
    Ioctl,
    /// Text /proc/PID/maps only.
    Text,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ByteOrderArg {
    /// This machine's.
    Native,
    /// Little-endian.
    Little,
    /// Big-endian.
    Big,
}

/// A CLI failure with its exit code.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, err: &dyn std::error::Error) -> Failure {
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Failure { code, message }
    }
    fn msg(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn resolve_uid(user: &str) -> Result<u32, Failure> {
    if let Ok(n) = user.parse() {
        return Ok(n);
    }
    let passwd = std::fs::read("/etc/passwd").map_err(|e| {
        Failure::msg(
            2,
            format!("cannot read /etc/passwd to look up user {user:?}: {e}"),
        )
    })?;
    mmap2_synth::proc::uid_from_passwd(&passwd, user)
        .ok_or_else(|| Failure::msg(2, format!("no such user: {user:?}")))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let started = Instant::now();
    let target = if cli.all {
        Target::All
    } else if let Some(u) = &cli.uid {
        Target::Uid(resolve_uid(u)?)
    } else {
        Target::Pids(cli.pid.clone())
    };
    if cli.jobs == Some(0) {
        return Err(Failure::msg(2, "-j must be at least 1"));
    }
    let opts = Options {
        selection: if cli.data {
            Selection::ExecAndData
        } else {
            Selection::Exec
        },
        source: match cli.source {
            SourceArg::Auto => SourceChoice::Auto,
            SourceArg::Ioctl => SourceChoice::Ioctl,
            SourceArg::Text => SourceChoice::Text,
        },
        build_ids: !cli.no_buildid,
        jobs: cli.jobs,
        ..Options::default()
    };
    let snap = synth::snapshot(&target, &opts).map_err(|e| Failure::new(1, &e))?;
    let to_stdout = cli.output.as_os_str() == "-";
    let wopts = WriteOptions {
        endian: match cli.byte_order {
            ByteOrderArg::Native => Endian::NATIVE,
            ByteOrderArg::Little => Endian::Little,
            ByteOrderArg::Big => Endian::Big,
        },
        mode: if to_stdout { Mode::Pipe } else { Mode::File },
        forks: cli.all,
        cmdline: std::env::args_os()
            .map(|a| std::os::unix::ffi::OsStrExt::as_bytes(a.as_os_str()).to_vec())
            .collect(),
    };
    if to_stdout {
        let stdout = std::io::stdout();
        let mut lock = std::io::BufWriter::new(stdout.lock());
        snapshot_file::write_snapshot(&mut lock, &snap, &wopts)
            .map_err(|e| Failure::msg(1, format!("writing to stdout: {e}")))?;
    } else {
        let path = &cli.output;
        let ctx =
            |e: &dyn std::fmt::Display| Failure::msg(1, format!("writing {}: {e}", path.display()));
        let mut out = AtomicFile::create(path).map_err(|e| ctx(&e))?;
        {
            let mut w = std::io::BufWriter::new(out.file());
            snapshot_file::write_snapshot(&mut w, &snap, &wopts).map_err(|e| ctx(&e))?;
            w.flush().map_err(|e| ctx(&e))?;
        }
        out.commit().map_err(|e| ctx(&e))?;
    }
    let stats = snap.stats();
    if !cli.quiet {
        let skipped: Vec<String> = stats
            .skipped
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        let sources: Vec<String> = stats
            .sources
            .iter()
            .map(|(s, n)| format!("{s} ({n})"))
            .collect();
        eprintln!(
            "mmap2-synth: {} processes ({} kernel threads), {} threads, {} VMAs, {} DSOs; build ids: {} found, {} missing; skipped: {}; source: {}; {:.3} s -> {}",
            stats.processes,
            stats.kernel_threads,
            stats.threads,
            stats.vmas,
            stats.dsos,
            stats.build_ids_found,
            stats.build_ids_missing,
            if skipped.is_empty() { "none".to_string() } else { skipped.join(", ") },
            if sources.is_empty() { "none".to_string() } else { sources.join(", ") },
            started.elapsed().as_secs_f64(),
            if to_stdout { "stdout".to_string() } else { cli.output.display().to_string() },
        );
        for s in &snap.skipped {
            eprintln!(
                "mmap2-synth: skipped pid {} ({}): {}",
                s.pid, s.reason, s.detail
            );
        }
    }
    if cli.strict && !snap.skipped.is_empty() {
        return Err(Failure::msg(
            3,
            format!("--strict: {} processes were skipped", snap.skipped.len()),
        ));
    }
    Ok(())
}
