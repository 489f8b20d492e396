//! The command line's arguments (clap derive), one struct per subcommand.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Synthesize PERF_RECORD_MMAP2 records (with build ids) for running
/// processes and write them as perf.data.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(group(clap::ArgGroup::new("target").args(["all", "pid", "uid"]).required(true)))]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// Every process on the system (except mmap2-synth itself).
    #[arg(short = 'a', long)]
    pub(crate) all: bool,
    /// These processes (comma-separated pids; a thread's id stands for its process, as with `perf record -p`).
    #[arg(short = 'p', long, value_delimiter = ',')]
    pub(crate) pid: Vec<u32>,
    /// Every process of this user (name or uid).
    #[arg(short = 'u', long)]
    pub(crate) uid: Option<String>,
    /// Output file; `-` writes pipe-mode perf.data to stdout.
    #[arg(short = 'o', long, default_value = "perf.data")]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) written: MapArgs,
    #[command(flatten)]
    pub(crate) scan: ScanArgs,
    /// Byte order of the output.
    #[arg(long, value_enum, default_value_t = ByteOrderArg::Native)]
    pub(crate) byte_order: ByteOrderArg,
    /// Print the snapshot as JSON Lines on stdout (the lines `dump --json`
    /// prints for its perf.data) instead of writing perf.data.
    #[arg(long, conflicts_with = "output")]
    pub(crate) json: bool,
    /// Also write the kernel's and the loaded modules' text maps, with
    /// build ids from /sys (the default with --all).
    #[arg(long, overrides_with = "no_kernel")]
    pub(crate) kernel: bool,
    /// No kernel or module maps (the default without --all).
    #[arg(long, overrides_with = "kernel")]
    pub(crate) no_kernel: bool,
    /// Do not watch for maps made during the scan (perf events opened
    /// before it; on by default where they can be opened).
    #[arg(long)]
    pub(crate) no_watch: bool,
    /// Data pages of each watch ring buffer, a power of two (default 128
    /// per CPU, 32 per CPU for -p): more when records are lost.
    #[arg(short = 'm', long, value_parser = pages)]
    pub(crate) mmap_pages: Option<usize>,
}

/// What the maps written say, for the commands that write maps (the
/// snapshot, `merge`, `record`): not `archive`, which writes no records
/// and reads build ids whatever it is told.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct MapArgs {
    /// Also emit every readable data VMA (as `perf record -d`), marked
    /// MMAP_DATA. merge and record insert them without it when the
    /// recording asks for them (perf -d / --call-graph dwarf), as perf's
    /// own synthesis does, and leave a snapshot's out otherwise.
    #[arg(short = 'd', long)]
    pub(crate) data: bool,
    /// Do not look up build ids (MMAP2 records get maj/min/ino instead).
    #[arg(long)]
    pub(crate) no_buildid: bool,
}

/// How processes are read, and the summary: every command that reads
/// them (the snapshot, `merge`, `record`, `archive`).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ScanArgs {
    /// Where VMAs come from.
    #[arg(long, value_enum, default_value_t = SourceArg::Auto)]
    pub(crate) source: SourceArg,
    /// Where each process's comm, parent and threads come from.
    #[arg(long, value_enum, default_value_t = TaskSourceArg::Auto)]
    pub(crate) task_source: TaskSourceArg,
    /// Worker threads (default: all cores).
    #[arg(short = 'j', long)]
    pub(crate) jobs: Option<usize>,
    /// Fail (exit 3) if any process had to be skipped.
    #[arg(long)]
    pub(crate) strict: bool,
    /// No summary on stderr.
    #[arg(short = 'q', long)]
    pub(crate) quiet: bool,
}

/// `--salvage`, shared by the commands that read a recording.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct SalvageArg {
    /// Read a recording cut short (a stream or data section ending inside
    /// a record, a killed perf record's file) up to its last whole record;
    /// a warning on stderr names the file, the offset of the cut and the
    /// bytes dropped, and the exit status is 0. Without it such a
    /// recording is refused (exit 2).
    #[arg(long)]
    pub(crate) salvage: bool,
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum Command {
    /// Insert synthesized maps into an existing recording (nothing else changes).
    Merge(MergeArgs),
    /// Print the maps, COMMs, FORK/EXITs and build ids of a recording or snapshot.
    Dump(DumpArgs),
    /// Rewrite a recording into a form every reader understands.
    Convert(ConvertArgs),
    /// Copy the binaries processes map into a perf build-id cache
    /// directory (use with `perf --buildid-dir DIR`).
    Archive(ArchiveArgs),
    /// Run `perf record` without its slow synthesis and merge the maps of
    /// what it records into its output (`record -- PERF-RECORD-ARGS`).
    Record(RecordArgs),
    /// Write a recording as a gzipped pprof profile, symbolized.
    Pprof(PprofArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct PprofArgs {
    /// The recording (`-` for stdin; file or pipe mode, either byte order,
    /// compressed or not, or the directory `perf record --threads` writes).
    pub(crate) recording: PathBuf,
    /// Where the profile goes (`-` for stdout).
    #[arg(short, long, default_value = "profile.pb.gz")]
    pub(crate) output: PathBuf,
    /// Keep only this event's samples (as `perf evlist` names it).
    #[arg(long)]
    pub(crate) event: Option<String>,
    /// Leave function names, files and lines to pprof.
    #[arg(long)]
    pub(crate) no_symbolize: bool,
    /// perf's build-id cache layout (`archive -o DIR`) to find binaries
    /// and the kernel's kallsyms by build id.
    #[arg(long, value_name = "DIR")]
    pub(crate) buildid_dir: Option<PathBuf>,
    /// No summary.
    #[arg(short, long)]
    pub(crate) quiet: bool,
    #[command(flatten)]
    pub(crate) salvage: SalvageArg,
}

#[derive(clap::Args, Debug)]
pub(crate) struct RecordArgs {
    #[command(flatten)]
    pub(crate) written: MapArgs,
    #[command(flatten)]
    pub(crate) scan: ScanArgs,
    /// `perf record`'s arguments (after `--`).
    #[arg(last = true, required = true)]
    pub(crate) perf_args: Vec<String>,
}

/// `archive --strict`: what it fails on besides skipped processes (a
/// cache entry not written is an error whatever the flag, exit 1).
const ARCHIVE_STRICT: &str = "Fail (exit 3) if any process had to be skipped or a mapped file \
could not be read (gone, denied) or was not the recorded one";

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("archive_target").args(["all", "pid", "uid", "from"]).required(true)))]
#[command(mut_arg("strict", |a| a.help(ARCHIVE_STRICT)))]
pub(crate) struct ArchiveArgs {
    /// The cache directory (created if missing).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub(crate) output: PathBuf,
    /// The maps of this snapshot or recording (their processes must still
    /// run: the files are copied from their mappings).
    #[arg(long, value_name = "FILE")]
    pub(crate) from: Option<PathBuf>,
    /// Every process on the system (except mmap2-synth itself).
    #[arg(short = 'a', long)]
    pub(crate) all: bool,
    /// These processes (comma-separated pids; a thread's id stands for its process, as with `perf record -p`).
    #[arg(short = 'p', long, value_delimiter = ',')]
    pub(crate) pid: Vec<u32>,
    /// Every process of this user (name or uid).
    #[arg(short = 'u', long)]
    pub(crate) uid: Option<String>,
    /// Not the kernel's kallsyms.
    #[arg(long)]
    pub(crate) no_kernel: bool,
    #[command(flatten)]
    pub(crate) scan: ScanArgs,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ConvertArgs {
    #[command(flatten)]
    pub(crate) target: RewriteTarget,
    /// Inode-form MMAP2 records of files become build-id MMAP2 records (ids
    /// from the BUILD_ID table, else from the file on disk when its device
    /// and inode are still the recorded ones).
    #[arg(long)]
    pub(crate) buildid_mmap2: bool,
    /// Write this mode: `file` (perf.data with a header) or `pipe` (a
    /// stream, as `perf record -o -` writes). Default: the input's mode.
    #[arg(long, value_enum)]
    pub(crate) to: Option<ModeArg>,
    /// PERF_RECORD_COMPRESSED records (`perf record -z`) become the records
    /// they hold, in order; the COMPRESSED feature is dropped.
    #[arg(long)]
    pub(crate) decompress: bool,
    /// With --buildid-mmap2: where a record cannot tell which file was
    /// mapped (MMAP v1 has no inode; `[vdso]` of a recording of this
    /// kernel), take the file at its path now (and this vDSO) for it.
    #[arg(long)]
    pub(crate) trust_paths: bool,
    /// The BUILD_ID table lists every mapped file with a known id, not only
    /// those perf saw samples in.
    #[arg(long)]
    pub(crate) buildid_all: bool,
    /// The form every reader understands: `--to file --decompress
    /// --buildid-mmap2`.
    #[arg(long, conflicts_with = "to")]
    pub(crate) portable: bool,
    /// No summary.
    #[arg(short, long)]
    pub(crate) quiet: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct DumpArgs {
    /// The recording or snapshot (`-` for stdin; file or pipe mode, either
    /// byte order, compressed or not, or the directory `perf record
    /// --threads` writes).
    pub(crate) file: PathBuf,
    /// JSON Lines with named fields instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// In time order (stable) instead of file order.
    #[arg(long)]
    pub(crate) sort: bool,
    #[command(flatten)]
    pub(crate) salvage: SalvageArg,
}

/// The recording a rewrite reads and where its result goes.
#[derive(clap::Args, Debug)]
pub(crate) struct RewriteTarget {
    /// The recording (file or pipe mode, any byte order, compressed or not,
    /// or the directory `perf record --threads` writes: convert makes it one
    /// file-mode perf.data, with no other option too).
    pub(crate) recording: PathBuf,
    /// Where to write the result.
    #[arg(short = 'o', long, conflicts_with = "in_place")]
    pub(crate) output: Option<PathBuf>,
    /// Rewrite the recording itself (atomically, under an exclusive lock,
    /// keeping its mode and owner; a symlink is followed).
    #[arg(long)]
    pub(crate) in_place: bool,
    /// With --in-place: rewrite a file that has other hard links (they keep
    /// the old contents).
    #[arg(long, requires = "in_place")]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) salvage: SalvageArg,
}

#[derive(clap::Args, Debug)]
pub(crate) struct MergeArgs {
    #[command(flatten)]
    pub(crate) target: RewriteTarget,
    /// Take the records from a snapshot written earlier by `mmap2-synth -o SNAP`.
    #[arg(long, value_name = "SNAP")]
    pub(crate) maps: Option<PathBuf>,
    /// Every process, not only those the recording needs.
    #[arg(short = 'a', long, conflicts_with = "pid")]
    pub(crate) all: bool,
    /// These processes (comma-separated pids; a thread's id stands for its process, as with `perf record -p`).
    #[arg(short = 'p', long, value_delimiter = ',')]
    pub(crate) pid: Vec<u32>,
    /// Do not insert kernel and module maps into a recording that has no
    /// kernel map.
    #[arg(long)]
    pub(crate) no_kernel: bool,
    #[command(flatten)]
    pub(crate) written: MapArgs,
    #[command(flatten)]
    pub(crate) scan: ScanArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum SourceArg {
    /// PROCMAP_QUERY when the kernel has it (6.11+), else text; with
    /// `-d` the text, its ambiguous names (a backslash) and build ids only
    /// the kernel can read asked of PROCMAP_QUERY (the same output, less
    /// kernel time than a query per VMA).
    Auto,
    /// PROCMAP_QUERY only.
    Ioctl,
    /// Text /proc/PID/maps only.
    Text,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum TaskSourceArg {
    /// A BPF task iterator (root, BTF) for scans of 200 processes or more
    /// where it pays and may be loaded, else /proc (default). Its heads are
    /// read before the scan; one whose process no longer runs the same
    /// executable image when its maps are read is read again from /proc.
    Auto,
    /// The BPF task iterator only (an error where it cannot be loaded).
    Bpf,
    /// /proc/PID/stat and each thread's comm, just before its maps.
    Proc,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ByteOrderArg {
    /// This machine's.
    Native,
    /// Little-endian.
    Little,
    /// Big-endian.
    Big,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// File mode.
    File,
    /// Pipe mode.
    Pipe,
}

/// A ring size in pages: a power of two, at most 65536.
fn pages(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n.is_power_of_two() && n <= 65536 {
        Ok(n)
    } else {
        Err("a power of two up to 65536".into())
    }
}
