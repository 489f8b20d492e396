//! The `mmap2-synth` command line: a thin layer over the library.

#![warn(clippy::too_many_lines)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use mmap2_synth::bytes::Endian;
use mmap2_synth::dump::{self, DumpError, DumpOptions, Printer};
use mmap2_synth::model::Selection;
use mmap2_synth::output::{self, AtomicFile, OutputError};
use mmap2_synth::perf::WriteError;
use mmap2_synth::proc::{self, HostFacts, Options, ScanError, SourceChoice, Target};
use mmap2_synth::rewrite::{self, MergeError, MergeOptions, Which};
use mmap2_synth::snapshot::{self, LiveError, LiveReport, Out, WriteOptions};
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
    /// Print the snapshot as JSON Lines on stdout (the lines `dump --json`
    /// prints for its perf.data) instead of writing perf.data.
    #[arg(long, conflicts_with = "output")]
    json: bool,
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
    /// Print the maps, COMMs, FORK/EXITs and build ids of a recording or snapshot.
    Dump(DumpArgs),
    /// Rewrite a recording into a form every reader understands.
    Convert(ConvertArgs),
}

#[derive(clap::Args, Debug)]
struct ConvertArgs {
    #[command(flatten)]
    target: RewriteTarget,
    /// Inode-form MMAP2 records of files become build-id MMAP2 records (ids
    /// from the BUILD_ID table, else from the file on disk when its device
    /// and inode are still the recorded ones).
    #[arg(long)]
    buildid_mmap2: bool,
    /// No summary.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(clap::Args, Debug)]
struct DumpArgs {
    /// The recording or snapshot (`-` for stdin; file or pipe mode, either
    /// byte order, compressed or not).
    file: PathBuf,
    /// JSON Lines with named fields instead of text.
    #[arg(long)]
    json: bool,
    /// In time order (stable) instead of file order.
    #[arg(long)]
    sort: bool,
}

/// The recording a rewrite reads and where its result goes.
#[derive(clap::Args, Debug)]
struct RewriteTarget {
    /// The recording (file or pipe mode, any byte order, compressed or not).
    recording: PathBuf,
    /// Where to write the result.
    #[arg(short = 'o', long, conflicts_with = "in_place")]
    output: Option<PathBuf>,
    /// Rewrite the recording itself (atomically, under an exclusive lock,
    /// keeping its mode and owner; a symlink is followed).
    #[arg(long)]
    in_place: bool,
    /// With --in-place: rewrite a file that has other hard links (they keep
    /// the old contents).
    #[arg(long, requires = "in_place")]
    force: bool,
}

#[derive(clap::Args, Debug)]
struct MergeArgs {
    #[command(flatten)]
    target: RewriteTarget,
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
    Convert(#[from] mmap2_synth::rewrite::ConvertError),
    /// `--strict` and something was skipped.
    #[error(transparent)]
    Strict(#[from] StrictFailure),
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Output(OutputError::Unsupported { .. }) => 2,
            CliError::Merge(e) if e.is_bad_input() => 2,
            CliError::Dump(e) if e.is_bad_input() => 2,
            CliError::Convert(e) if e.is_bad_input() => 2,
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
    remove_temporaries_on_signals();
    let result = match &cli.command {
        Some(Command::Merge(m)) => run_merge(m),
        Some(Command::Dump(d)) => run_dump(d),
        Some(Command::Convert(c)) => run_convert(c),
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
    mmap2_synth::sys::uid_of_user(user)
        .map_err(|e| CliError::Usage(format!("cannot look up user {user:?}: {e}")))?
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

/// Where a merge writes, from `-o` / `--in-place`: a regular file (or a new
/// one), symlinks resolved. A merge seeks in its output, so streams are refused.
fn rewrite_output(m: &RewriteTarget, cmd: &str) -> Result<PathBuf, CliError> {
    let path = match (&m.output, m.in_place) {
        (Some(o), false) if o.as_os_str() == "-" => {
            return Err(CliError::Usage(format!(
                "{cmd} cannot write to stdout (it seeks in its output); give -o FILE"
            )))
        }
        (Some(o), false) if same_file(o, &m.recording) => {
            return Err(CliError::Usage(format!(
                "-o {} is the recording itself; use --in-place to rewrite it",
                o.display()
            )))
        }
        (Some(o), false) => o,
        (None, true) => &m.recording,
        _ => {
            return Err(CliError::Usage(format!(
                "{cmd} needs -o OUT.data or --in-place (refusing to guess where to write)"
            )))
        }
    };
    match output::classify(path)? {
        output::Target::File(p) => Ok(p),
        output::Target::Stream(p) => Err(CliError::Usage(format!(
            "{}: {cmd} writes a seekable file, not a FIFO or device",
            p.display()
        ))),
    }
}

/// Refuses `--in-place` on a file with other hard links unless `--force`.
fn check_links(m: &RewriteTarget, path: &Path) -> Result<(), CliError> {
    use std::os::unix::fs::MetadataExt;
    let links = std::fs::metadata(path).map_or(1, |md| md.nlink());
    if m.in_place && links > 1 && !m.force {
        return Err(CliError::Usage(format!(
            "{} has {links} hard links; --in-place would split them (use --force)",
            path.display()
        )));
    }
    Ok(())
}

fn print(lines: &[String]) {
    for l in lines {
        eprintln!("{l}");
    }
}

/// The output of a rewrite and the file it reads (the output itself for
/// `--in-place`), after the usage checks.
fn rewrite_paths(t: &RewriteTarget, cmd: &str) -> Result<(PathBuf, PathBuf), CliError> {
    let output = rewrite_output(t, cmd)?;
    check_links(t, &output)?;
    let recording = if t.in_place {
        output.clone()
    } else {
        t.recording.clone()
    };
    Ok((recording, output))
}

fn run_merge(m: &MergeArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let (recording, output) = rewrite_paths(&m.target, "merge")?;
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
        in_place: m.target.in_place,
    };
    let report = rewrite::merge(&recording, &output, &opts)?;
    if !m.scan.quiet {
        let dest = output.display().to_string();
        print(&summary::merge(&report, started.elapsed(), &dest));
    }
    summary::strict(m.scan.strict, &report.skipped)?;
    Ok(())
}

fn run_convert(c: &ConvertArgs) -> Result<(), CliError> {
    let started = Instant::now();
    if !c.buildid_mmap2 {
        return Err(CliError::Usage(
            "convert: nothing to do; give --buildid-mmap2".into(),
        ));
    }
    let (recording, output) = rewrite_paths(&c.target, "convert")?;
    let opts = rewrite::ConvertOptions {
        buildid_mmap2: c.buildid_mmap2,
        in_place: c.target.in_place,
    };
    let report = rewrite::convert(&recording, &output, &opts)?;
    if !c.quiet {
        print(&summary::convert(
            &report,
            started.elapsed(),
            &output.display().to_string(),
        ));
    }
    Ok(())
}

fn run_dump(d: &DumpArgs) -> Result<(), CliError> {
    let input = mmap2_synth::perf::Input::open(&d.file).map_err(DumpError::from)?;
    let opts = DumpOptions {
        json: d.json,
        sort: d.sort,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    dump::dump(&input, opts, &mut out)?;
    Ok(())
}

/// `--json`: the snapshot's lines on stdout, streamed as the scan goes.
fn run_json(cli: &Cli, target: &Target) -> Result<(), CliError> {
    let started = Instant::now();
    let scan = scan_options(&cli.scan)?;
    let enc = snapshot::snapshot_encoding(Endian::NATIVE, cli.all);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printer = Printer::new(
        &mut out,
        DumpOptions {
            json: true,
            sort: false,
        },
    );
    let mut ids = std::collections::BTreeMap::new();
    let mut stats = mmap2_synth::snapshot::Stats::default();
    let scanned = proc::scan_each(
        target,
        &scan,
        |p| snapshot::encode_for_writer(&p, &enc),
        |encoded| -> Result<(), CliError> {
            let encoded = encoded.map_err(|e| CliError::write(Path::new("stdout"), e))?;
            printer.records(&encoded.records, enc.endian, enc.layout);
            for (name, id) in encoded.build_ids {
                ids.entry(name)
                    .or_insert_with(std::collections::BTreeSet::new)
                    .insert(id);
            }
            stats.add(encoded.summary);
            Ok(())
        },
    )?;
    for b in mmap2_synth::snapshot::encode::table_entries(&ids) {
        printer.line(dump::Line::of_build_id(&b));
    }
    printer.finish()?;
    stats.add_skips(&scanned.skipped, scanned.unverified_build_ids);
    if !cli.scan.quiet {
        print(&summary::snapshot(
            &stats,
            &scanned.skipped,
            started.elapsed(),
            "stdout",
        ));
    }
    summary::strict(cli.scan.strict, &scanned.skipped)?;
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
    if cli.json {
        return run_json(cli, &target);
    }
    let scan = scan_options(&cli.scan)?;
    let to_stdout = cli.output.as_os_str() == "-";
    // None: stdout
    let dest = if to_stdout {
        None
    } else {
        Some(output::classify(&cli.output)?)
    };
    let wopts = WriteOptions {
        endian: match cli.byte_order {
            ByteOrderArg::Native => Endian::NATIVE,
            ByteOrderArg::Little => Endian::Little,
            ByteOrderArg::Big => Endian::Big,
        },
        forks: cli.all,
        cmdline: std::env::args_os()
            .map(|a| std::os::unix::ffi::OsStrExt::as_bytes(a.as_os_str()).to_vec())
            .collect(),
        host: HostFacts::read(),
    };
    let mut write = |out: Out<'_>| snapshot::write_live(&target, &scan, out, &wopts);
    let report = match &dest {
        None => write_stdout(&mut write)?,
        Some(output::Target::File(p)) => write_file(p, &mut write)?,
        Some(output::Target::Stream(p)) => write_stream(p, &mut write)?,
    };
    if !cli.scan.quiet {
        let dest = if to_stdout {
            "stdout".to_string()
        } else {
            cli.output.display().to_string()
        };
        print(&summary::snapshot(
            &report.stats,
            &report.skipped,
            started.elapsed(),
            &dest,
        ));
    }
    summary::strict(cli.scan.strict, &report.skipped)?;
    Ok(())
}

/// A live snapshot written into an output.
type WriteFn<'a> = &'a mut dyn FnMut(Out<'_>) -> Result<LiveReport, LiveError>;

/// The CLI error for a live snapshot into `path` that failed.
fn live_error(path: &Path) -> impl Fn(LiveError) -> CliError + '_ {
    move |e| match e {
        LiveError::Scan(e) => CliError::Scan(e),
        LiveError::Write(e) => CliError::write(path, e),
    }
}

/// Writes to stdout, which must be open (std ignores writes to a closed
/// descriptor 1, which would report success for data that went nowhere).
fn write_stdout(f: WriteFn<'_>) -> Result<LiveReport, CliError> {
    use std::os::fd::AsFd;
    let err = |e: WriteError| CliError::Write {
        path: "stdout".into(),
        source: e,
    };
    let stdout = std::io::stdout();
    let fd = stdout
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| err(e.into()))?;
    if stdout_was_closed(&fd) {
        let closed = std::io::Error::from_raw_os_error(libc::EBADF);
        return Err(err(closed.into()));
    }
    let mut w = std::io::BufWriter::new(std::fs::File::from(fd));
    let report = f(Out::Pipe(&mut w)).map_err(live_error(Path::new("stdout")))?;
    w.flush().map_err(|e| err(e.into()))?;
    Ok(report)
}

/// Whether descriptor 1 was closed when we started: the Rust runtime then
/// opens /dev/null read-write in its place, which no shell redirection does
/// (`>` opens write-only), so that is what is looked for.
fn stdout_was_closed(fd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Ok(null) = std::fs::metadata("/dev/null") else {
        return false;
    };
    let Ok(meta) = fd
        .try_clone()
        .and_then(|d| std::fs::File::from(d).metadata())
    else {
        return false;
    };
    meta.rdev() == null.rdev()
        && mmap2_synth::sys::access_mode(fd.as_fd()).is_ok_and(|m| m == libc::O_RDWR)
}

/// Writes straight into a FIFO or character device.
fn write_stream(path: &Path, f: WriteFn<'_>) -> Result<LiveReport, CliError> {
    let mut w = std::io::BufWriter::new(output::open_stream(path)?);
    let report = f(Out::Pipe(&mut w)).map_err(live_error(path))?;
    w.flush().map_err(|e| CliError::write(path, e))?;
    Ok(report)
}

/// Writes `path` atomically through `f`.
fn write_file(path: &Path, f: WriteFn<'_>) -> Result<LiveReport, CliError> {
    let mut out = AtomicFile::create(path).map_err(|e| CliError::write(path, e))?;
    let report = {
        let mut w = std::io::BufWriter::with_capacity(WRITE_BUFFER, out.file());
        let report = f(Out::File(&mut w)).map_err(live_error(path))?;
        w.flush().map_err(|e| CliError::write(path, e))?;
        report
    };
    out.commit().map_err(|e| CliError::write(path, e))?;
    Ok(report)
}

/// Bytes gathered per write into a snapshot file: a few large writes cost
/// less than many small ones.
const WRITE_BUFFER: usize = 256 << 10;

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary output files, then
/// exit with 128 + the signal, as a shell reports it.
fn remove_temporaries_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            output::remove_temporaries();
            std::process::exit(128 + sig);
        }
    });
}
