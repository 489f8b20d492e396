//! The main job: a snapshot of live processes into perf.data (file, FIFO,
//! device or stdout) or as JSON Lines.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use mmap2_synth::bytes::Endian;
use mmap2_synth::dump::{self, DumpOptions, Printer};
use mmap2_synth::model::Selection;
use mmap2_synth::output::{self, AtomicFile};
use mmap2_synth::proc::kernel::KernelRoots;
use mmap2_synth::proc::{HostFacts, Options, SourceChoice, Target, TaskSource};
use mmap2_synth::snapshot::{self, LiveError, LiveReport, Out, ScanWatch, WriteOptions};
use mmap2_synth::summary;

use super::args::{ByteOrderArg, Cli, MapArgs, ScanArgs, SourceArg, TaskSourceArg};
use super::error::CliError;
use super::print;
use super::stdout::{open_stdout, Stream};

pub(crate) fn resolve_uid(user: &str) -> Result<u32, CliError> {
    if let Ok(n) = user.parse() {
        return Ok(n);
    }
    mmap2_synth::sys::uid_of_user(user)
        .map_err(|e| CliError::Usage(format!("cannot look up user {user:?}: {e}")))?
        .ok_or_else(|| CliError::Usage(format!("no such user: {user:?}")))
}

/// The scan's options from the command line: `maps` says what the maps
/// written hold (`archive` has none of its own: [`MapArgs::default`]).
pub(crate) fn scan_options(a: &ScanArgs, maps: &MapArgs) -> Result<Options, CliError> {
    if a.jobs == Some(0) {
        return Err(CliError::Usage("-j must be at least 1".into()));
    }
    Ok(Options {
        selection: if maps.data {
            Selection::ExecAndData
        } else {
            Selection::Exec
        },
        source: match a.source {
            SourceArg::Auto => SourceChoice::Auto,
            SourceArg::Ioctl => SourceChoice::Ioctl,
            SourceArg::Text => SourceChoice::Text,
        },
        tasks: match a.task_source {
            TaskSourceArg::Auto => TaskSource::Auto,
            TaskSourceArg::Bpf => TaskSource::Bpf,
            TaskSourceArg::Proc => TaskSource::Proc,
        },
        build_ids: !maps.no_buildid,
        jobs: a.jobs,
        ..Options::default()
    })
}

/// `--json`: the snapshot's lines on stdout, streamed as the scan goes;
/// watched as a snapshot file is (the records added after the scan's).
pub(crate) fn run_json(cli: &Cli, target: &Target) -> Result<(), CliError> {
    let started = Instant::now();
    let scan = scan_options(&cli.scan, &cli.written)?;
    // The watch opens before anything is read.
    let mut watch = ScanWatch::start(target, &scan, !cli.no_watch, Endian::NATIVE, cli.mmap_pages);
    let enc = snapshot::snapshot_encoding(Endian::NATIVE, cli.all);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(Stream(stdout.lock()));
    let mut printer = Printer::new(
        &mut out,
        DumpOptions {
            json: true,
            sort: false,
        },
    );
    let mut ids = std::collections::BTreeMap::new();
    let mut stats = mmap2_synth::snapshot::Stats::default();
    // the kernel's maps first, as the snapshot file has them
    let (kernel, bpf) = match kernel_roots(cli, &scan) {
        Some(roots) => (
            mmap2_synth::proc::kernel::kernel_maps(&roots),
            mmap2_synth::proc::bpf_progs::bpf_programs(),
        ),
        None => Default::default(),
    };
    let mut recs = Vec::new();
    snapshot::encode_kernel(&kernel.maps, &enc, &mut recs)
        .and_then(|()| snapshot::encode_bpf_programs(&bpf.programs, &enc, &mut recs))
        .map_err(|e| CliError::write(Path::new("stdout"), e))?;
    stats.note_bpf(&bpf);
    printer.records(&recs, enc.endian, enc.layout);
    stats.kernel_maps = kernel.maps.len();
    stats.kernel_skipped = kernel.skipped;
    let watched = watch.is_on();
    let mut filter = watch.filter();
    let scanned = watch.scan(
        target,
        &scan,
        |memo: &mut snapshot::Reported, p, part| {
            snapshot::weighed(snapshot::encode_piece(&p, part, &enc, watched, Some(memo)))
        },
        |encoded| -> Result<(), CliError> {
            let encoded = encoded.map_err(|e| CliError::write(Path::new("stdout"), e))?;
            printer.records(&encoded.records, enc.endian, enc.layout);
            for (name, id) in encoded.build_ids {
                ids.entry(name)
                    .or_insert_with(std::collections::BTreeSet::new)
                    .insert(id);
            }
            stats.add(encoded.summary);
            filter.note(encoded.pid, encoded.records, encoded.read);
            Ok(())
        },
    )?;
    let (watched, notes) = watch.finish();
    let all = *target == Target::All;
    filter.add(
        &watched,
        all,
        &enc,
        &mut ids,
        &mut stats,
        |_, rec| -> Result<(), CliError> {
            printer.records(rec, enc.endian, enc.layout);
            Ok(())
        },
    )?;
    notes.apply(&mut stats);
    let table = snapshot::kernel_table_entries(&kernel.maps)
        .into_iter()
        .chain(mmap2_synth::snapshot::encode::table_entries(ids));
    for b in table {
        printer.line(dump::Line::of_build_id(&b));
    }
    // (the lines are the snapshot's on stdout, not a dump of a file)
    printer.finish().map_err(|e| match e {
        dump::DumpError::Write(e) => CliError::write(Path::new("stdout"), e),
        e => e.into(),
    })?;
    stats.add_skips(&scanned.skipped, scanned.build_id_notes);
    stats.iterator_heads = scanned.iterator_heads;
    conclude(cli, target, (&stats, &scanned.skipped), started, "stdout")
}

/// The end of a snapshot: its summary (unless `-q`) for `dest`, then what
/// `--strict` makes of its skips and losses.
fn conclude(
    cli: &Cli,
    target: &Target,
    (stats, skipped): (&mmap2_synth::snapshot::Stats, &[mmap2_synth::proc::Skip]),
    started: Instant,
    dest: &str,
) -> Result<(), CliError> {
    if !cli.scan.quiet {
        print(&summary::snapshot(stats, skipped, started.elapsed(), dest));
    }
    summary::strict(cli.scan.strict, skipped, matches!(target, Target::Pids(_)))?;
    summary::strict_lost(cli.scan.strict, stats.watch_lost)?;
    Ok(())
}

pub(crate) fn run(cli: &Cli) -> Result<(), CliError> {
    let started = Instant::now();
    let target = if cli.all {
        Target::All
    } else if let Some(u) = &cli.uid {
        Target::Uid(resolve_uid(u)?)
    } else {
        Target::Pids(mmap2_synth::proc::processes_of(
            Path::new("/proc"),
            &cli.pid,
        ))
    };
    if cli.json {
        return run_json(cli, &target);
    }
    let scan = scan_options(&cli.scan, &cli.written)?;
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
        kernel: kernel_roots(cli, &scan),
        watch: !cli.no_watch,
        watch_pages: cli.mmap_pages,
    };
    let mut write = |out: Out<'_>| snapshot::write_live(&target, &scan, out, &wopts);
    let report = match &dest {
        None => write_stdout(&mut write)?,
        Some(output::Target::File(p)) => write_file(p, &mut write)?,
        Some(output::Target::Stream(p)) => write_stream(p, &mut write)?,
    };
    let dest = if to_stdout {
        "stdout".to_string()
    } else {
        cli.output.display().to_string()
    };
    conclude(
        cli,
        &target,
        (&report.stats, &report.skipped),
        started,
        &dest,
    )
}

/// A live snapshot written into an output.
pub(crate) type WriteFn<'a> = &'a mut dyn FnMut(Out<'_>) -> Result<LiveReport, LiveError>;

/// The CLI error for a live snapshot into `path` that failed.
pub(crate) fn live_error(path: &Path) -> impl Fn(LiveError) -> CliError + '_ {
    move |e| match e {
        LiveError::Scan(e) => CliError::Scan(e),
        LiveError::Write(e) => CliError::write(path, e),
    }
}

/// Writes to stdout, which must be open (see [`open_stdout`]).
pub(crate) fn write_stdout(f: WriteFn<'_>) -> Result<LiveReport, CliError> {
    let mut w = std::io::BufWriter::new(Stream(open_stdout()?));
    let report = f(Out::Pipe(&mut w)).map_err(live_error(Path::new("stdout")))?;
    w.flush()
        .map_err(|e| CliError::write(Path::new("stdout"), e))?;
    Ok(report)
}

/// Writes straight into a FIFO or character device.
pub(crate) fn write_stream(path: &Path, f: WriteFn<'_>) -> Result<LiveReport, CliError> {
    let mut w = std::io::BufWriter::new(Stream(output::open_stream(path)?));
    let report = f(Out::Pipe(&mut w)).map_err(live_error(path))?;
    w.flush().map_err(|e| CliError::write(path, e))?;
    Ok(report)
}

/// Writes `path` atomically through `f`.
pub(crate) fn write_file(path: &Path, f: WriteFn<'_>) -> Result<LiveReport, CliError> {
    let mut out = AtomicFile::create(path).map_err(|e| CliError::write(path, e))?;
    let report = {
        let file = out.file();
        let mut w =
            output::aligned::AlignedWriter::new(file).map_err(|e| CliError::write(path, e))?;
        let report = f(Out::File(&mut w)).map_err(live_error(path))?;
        w.flush().map_err(|e| CliError::write(path, e))?;
        report
    };
    out.commit().map_err(|e| CliError::write(path, e))?;
    Ok(report)
}

pub(crate) fn run_archive(a: &super::args::ArchiveArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let target = if a.all {
        Target::All
    } else if let Some(u) = &a.uid {
        Target::Uid(resolve_uid(u)?)
    } else {
        Target::Pids(mmap2_synth::proc::processes_of(Path::new("/proc"), &a.pid))
    };
    let opts = mmap2_synth::archive::ArchiveOptions {
        dir: a.output.clone(),
        target,
        scan: scan_options(&a.scan, &MapArgs::default())?,
        kernel: !a.no_kernel,
        from: a.from.clone(),
    };
    let report = mmap2_synth::archive::archive(&opts)?;
    if !a.scan.quiet {
        print(&summary::archive(
            &report,
            started.elapsed(),
            &a.output.display().to_string(),
        ));
    }
    // a cache entry not written is an error (exit 1) like any failed
    // output; files that could not be read only fail --strict (exit 3)
    report.written()?;
    // (with --from, the snapshot's pids are not the user's naming)
    let named = !a.all && a.uid.is_none() && a.from.is_none();
    summary::strict(a.scan.strict, &report.skipped, named)?;
    summary::strict_archive(a.scan.strict, &report)?;
    Ok(())
}

/// Where the kernel's maps are read from, when they are asked for
/// (`--kernel`, or `--all` without `--no-kernel`).
fn kernel_roots(cli: &Cli, scan: &Options) -> Option<KernelRoots> {
    (cli.kernel || cli.all && !cli.no_kernel).then(|| KernelRoots::system(&scan.proc_root))
}
