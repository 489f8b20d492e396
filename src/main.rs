//! The `mmap2-synth` command line: a thin layer over the library.

#![warn(clippy::too_many_lines)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use mmap2_synth::bytes::Endian;
use mmap2_synth::model::Selection;
use mmap2_synth::output::AtomicFile;
use mmap2_synth::perf::WriteError;
use mmap2_synth::proc::{self, HostFacts, Options, ScanError, SourceChoice, Target};
use mmap2_synth::rewrite::{self, MergeError, MergeOptions, Which};
use mmap2_synth::snapshot::{self, Mode, Stats, WriteOptions};
use mmap2_synth::summary::{self, StrictFailure};

/// Synthesize PERF_RECORD_MMAP2 records (with build ids) for running
/// processes and write them as perf.data.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(group(clap::ArgGroup::new("target").args(["all", "pid", "uid"]).required(true)))]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
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
    #[command(flatten)]
    scan: ScanArgs,
    /// Byte order of the output.
    #[arg(long, value_enum, default_value_t = ByteOrderArg::Native)]
    byte_order: ByteOrderArg,
}

/// Options shared by the snapshot and `merge`.
#[derive(clap::Args, Debug, Clone)]
struct ScanArgs {
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
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Insert synthesized maps into an existing recording (nothing else changes).
    Merge(MergeArgs),
}

#[derive(clap::Args, Debug)]
struct MergeArgs {
    /// The recording (file or pipe mode, any byte order, compressed or not).
    recording: PathBuf,
    /// Where to write the merged recording.
    #[arg(short = 'o', long, conflicts_with = "in_place")]
    output: Option<PathBuf>,
    /// Rewrite the recording itself (atomically).
    #[arg(long)]
    in_place: bool,
    /// Take the records from a snapshot written earlier by `mmap2-synth -o SNAP`.
    #[arg(long, value_name = "SNAP")]
    maps: Option<PathBuf>,
    /// Every process, not only those the recording needs.
    #[arg(short = 'a', long, conflicts_with = "pid")]
    all: bool,
    /// These processes (comma-separated pids).
    #[arg(short = 'p', long, value_delimiter = ',')]
    pid: Vec<u32>,
    #[command(flatten)]
    scan: ScanArgs,
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

/// A CLI failure: what went wrong, and through [`CliError::exit_code`] the
/// exit status (2 bad usage or input, 3 `--strict`, 1 anything else).
#[derive(Debug, thiserror::Error)]
enum CliError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// The scan of /proc failed as a whole.
    #[error(transparent)]
    Scan(#[from] ScanError),
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
    /// `--strict` and something was skipped.
    #[error(transparent)]
    Strict(#[from] StrictFailure),
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Merge(e) if e.is_bad_input() => 2,
            CliError::Strict(_) => 3,
            _ => 1,
        }
    }

    fn write(path: &Path, source: impl Into<WriteError>) -> CliError {
        CliError::Write {
            path: path.display().to_string(),
            source: source.into(),
        }
    }
}

/// The error and its causes, joined by ": ", each once.
fn chain(err: &dyn std::error::Error) -> String {
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
    message
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::Merge(m)) => run_merge(m),
        None => run(&cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

fn resolve_uid(user: &str) -> Result<u32, CliError> {
    if let Ok(n) = user.parse() {
        return Ok(n);
    }
    let passwd = std::fs::read("/etc/passwd").map_err(|e| {
        CliError::Usage(format!(
            "cannot read /etc/passwd to look up user {user:?}: {e}"
        ))
    })?;
    proc::parse::uid_from_passwd(&passwd, user)
        .ok_or_else(|| CliError::Usage(format!("no such user: {user:?}")))
}

fn scan_options(a: &ScanArgs) -> Result<Options, CliError> {
    if a.jobs == Some(0) {
        return Err(CliError::Usage("-j must be at least 1".into()));
    }
    Ok(Options {
        selection: if a.data {
            Selection::ExecAndData
        } else {
            Selection::Exec
        },
        source: match a.source {
            SourceArg::Auto => SourceChoice::Auto,
            SourceArg::Ioctl => SourceChoice::Ioctl,
            SourceArg::Text => SourceChoice::Text,
        },
        build_ids: !a.no_buildid,
        jobs: a.jobs,
        ..Options::default()
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Where a merge writes, from `-o` / `--in-place`.
fn merge_output(m: &MergeArgs) -> Result<PathBuf, CliError> {
    match (&m.output, m.in_place) {
        (Some(o), false) if same_file(o, &m.recording) => Err(CliError::Usage(format!(
            "-o {} is the recording itself; use --in-place to rewrite it",
            o.display()
        ))),
        (Some(o), false) => Ok(o.clone()),
        (None, true) => Ok(m.recording.clone()),
        _ => Err(CliError::Usage(
            "merge needs -o OUT.data or --in-place (refusing to guess where to write)".into(),
        )),
    }
}

fn print(lines: &[String]) {
    for l in lines {
        eprintln!("{l}");
    }
}

fn run_merge(m: &MergeArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let output = merge_output(m)?;
    let opts = MergeOptions {
        which: if m.all {
            Which::All
        } else if !m.pid.is_empty() {
            Which::Pids(m.pid.clone())
        } else {
            Which::Needed
        },
        maps: m.maps.clone(),
        snapshot: scan_options(&m.scan)?,
    };
    let report = rewrite::merge(&m.recording, &output, &opts)?;
    if !m.scan.quiet {
        let dest = output.display().to_string();
        print(&summary::merge(&report, started.elapsed(), &dest));
    }
    summary::strict(m.scan.strict, &report.skipped)?;
    Ok(())
}

fn run(cli: &Cli) -> Result<(), CliError> {
    let started = Instant::now();
    let target = if cli.all {
        Target::All
    } else if let Some(u) = &cli.uid {
        Target::Uid(resolve_uid(u)?)
    } else {
        Target::Pids(cli.pid.clone())
    };
    let snap = proc::snapshot(&target, &scan_options(&cli.scan)?)?;
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
        host: HostFacts::read(),
    };
    if to_stdout {
        let stdout = std::io::stdout();
        let mut lock = std::io::BufWriter::new(stdout.lock());
        snapshot::write_snapshot(&mut lock, &snap, &wopts)
            .map_err(|e| CliError::write(Path::new("to stdout"), e))?;
    } else {
        write_file(&cli.output, |w| snapshot::write_snapshot(w, &snap, &wopts))?;
    }
    if !cli.scan.quiet {
        let dest = if to_stdout {
            "stdout".to_string()
        } else {
            cli.output.display().to_string()
        };
        print(&summary::snapshot(
            &Stats::of(&snap),
            &snap.skipped,
            started.elapsed(),
            &dest,
        ));
    }
    summary::strict(cli.scan.strict, &snap.skipped)?;
    Ok(())
}

/// Writes `path` atomically through `f`.
fn write_file(
    path: &Path,
    f: impl FnOnce(&mut std::io::BufWriter<&mut std::fs::File>) -> Result<(), WriteError>,
) -> Result<(), CliError> {
    let mut out = AtomicFile::create(path).map_err(|e| CliError::write(path, e))?;
    {
        let mut w = std::io::BufWriter::new(out.file());
        f(&mut w).map_err(|e| CliError::write(path, e))?;
        w.flush().map_err(|e| CliError::write(path, e))?;
    }
    out.commit().map_err(|e| CliError::write(path, e))
}
