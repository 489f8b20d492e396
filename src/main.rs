//! The `mmap2-synth` command line: a thin layer over the library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use mmap2_synth::merge::{self, MergeOptions, Which};
use mmap2_synth::output::AtomicFile;
use mmap2_synth::record::Endian;
use mmap2_synth::snapshot_file::{self, Mode, WriteOptions};
use mmap2_synth::synth::{self, Options, SourceChoice, Target};
use mmap2_synth::vma::Selection;

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
    let result = match &cli.command {
        Some(Command::Merge(m)) => run_merge(m),
        None => run(&cli),
    };
    match result {
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

fn scan_options(a: &ScanArgs) -> Result<Options, Failure> {
    if a.jobs == Some(0) {
        return Err(Failure::msg(2, "-j must be at least 1"));
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

fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

fn run_merge(m: &MergeArgs) -> Result<(), Failure> {
    let started = Instant::now();
    let output = match (&m.output, m.in_place) {
        (Some(o), false) => {
            if same_file(o, &m.recording) {
                return Err(Failure::msg(
                    2,
                    format!(
                        "-o {} is the recording itself; use --in-place to rewrite it",
                        o.display()
                    ),
                ));
            }
            o.clone()
        }
        (None, true) => m.recording.clone(),
        _ => {
            return Err(Failure::msg(
                2,
                "merge needs -o OUT.data or --in-place (refusing to guess where to write)",
            ))
        }
    };
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
    let report = merge::merge(&m.recording, &output, &opts).map_err(|e| {
        let code = if e.is_bad_input() { 2 } else { 1 };
        Failure::new(code, &e)
    })?;
    if !m.scan.quiet {
        eprintln!(
            "mmap2-synth merge: {} {} records; inserted {} records ({} processes, {} maps, {} new build ids); {} maps already present; stale (started after the recording): {}; not found: {}; skipped: {}; {:.3} s -> {}",
            if report.pipe { "pipe-mode" } else { "file-mode" },
            report.input_records,
            report.inserted_records,
            report.processes,
            report.maps,
            report.new_build_ids,
            report.duplicate_maps,
            report.stale.len(),
            report.missing.len(),
            report.skipped.len(),
            started.elapsed().as_secs_f64(),
            output.display(),
        );
        for s in &report.skipped {
            eprintln!(
                "mmap2-synth: skipped pid {} ({}): {}",
                s.pid, s.reason, s.detail
            );
        }
        if !report.stale.is_empty() {
            eprintln!("mmap2-synth: stale pids: {:?}", report.stale);
        }
    }
    if m.scan.strict && !report.skipped.is_empty() {
        return Err(Failure::msg(
            3,
            format!("--strict: {} processes were skipped", report.skipped.len()),
        ));
    }
    Ok(())
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
    let opts = scan_options(&cli.scan)?;
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
        host: mmap2_synth::host::HostFacts::read(),
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
    if !cli.scan.quiet {
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
    if cli.scan.strict && !snap.skipped.is_empty() {
        return Err(Failure::msg(
            3,
            format!("--strict: {} processes were skipped", snap.skipped.len()),
        ));
    }
    Ok(())
}
