//! `merge` and `convert`: where they write, and running them.

use std::path::{Path, PathBuf};
use std::time::Instant;

use mmap2_synth::output;
use mmap2_synth::perf::Salvaged;
use mmap2_synth::rewrite::{self, MergeOptions, Which};
use mmap2_synth::summary::{self, LeftOut};

use super::args::{ConvertArgs, MergeArgs, ModeArg, RewriteTarget};
use super::error::CliError;
use super::print;
use super::snapshot::scan_options;

pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Refuses an output that is one of the command's inputs (the same file,
/// by device and inode, through any link): writing it would destroy what
/// is being read. `what` names the input for the message.
pub(crate) fn refuse_output_over(output: &Path, input: &Path, what: &str) -> Result<(), CliError> {
    if output.as_os_str() != "-" && input.as_os_str() != "-" && same_file(output, input) {
        return Err(CliError::Usage(format!(
            "-o {} is {what} ({}): it would be overwritten while read",
            output.display(),
            input.display()
        )));
    }
    Ok(())
}

/// Where a merge writes, from `-o` / `--in-place`: a regular file (or a new
/// one), symlinks resolved. A merge seeks in its output, so streams are refused.
pub(crate) fn rewrite_output(m: &RewriteTarget, cmd: &str) -> Result<PathBuf, CliError> {
    // (clap's `requires` is met by the flag's default, so it is checked here)
    if m.force && !m.in_place {
        return Err(CliError::Usage(format!(
            "{cmd}: --force only goes with --in-place"
        )));
    }
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
        (None, true) if m.recording.as_os_str() == "-" => {
            return Err(CliError::Usage(format!(
                "{cmd} --in-place needs a file to rewrite, not stdin (-)"
            )))
        }
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
pub(crate) fn check_links(m: &RewriteTarget, path: &Path) -> Result<(), CliError> {
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

/// The output of a rewrite and the file it reads (the output itself for
/// `--in-place`), after the usage checks.
pub(crate) fn rewrite_paths(t: &RewriteTarget, cmd: &str) -> Result<(PathBuf, PathBuf), CliError> {
    let output = rewrite_output(t, cmd)?;
    check_links(t, &output)?;
    let recording = if t.in_place {
        output.clone()
    } else {
        t.recording.clone()
    };
    Ok((recording, output))
}

pub(crate) fn run_merge(m: &MergeArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let (recording, output) = rewrite_paths(&m.target, "merge")?;
    if let (Some(maps), false) = (&m.maps, m.target.in_place) {
        refuse_output_over(&output, maps, "the --maps input")?;
    }
    let opts = MergeOptions {
        which: if m.all {
            Which::All
        } else if !m.pid.is_empty() && m.maps.is_none() {
            // live: a thread's id stands for its process
            Which::Pids(mmap2_synth::proc::processes_of(Path::new("/proc"), &m.pid))
        } else if !m.pid.is_empty() {
            Which::Pids(m.pid.clone())
        } else {
            Which::Needed
        },
        maps: m.maps.clone(),
        snapshot: scan_options(&m.scan, &m.written)?,
        in_place: m.target.in_place,
        kernel: !m.no_kernel,
        salvage: m.target.salvage.salvage,
    };
    let report = rewrite::merge(&recording, &output, &opts)?;
    let how = match report.unchanged {
        true => LeftOut::Kept,
        false => LeftOut::File,
    };
    let bad = (&report.features_unreadable[..], report.build_ids_too_long);
    warn(&recording, report.salvaged.as_ref(), bad, how);
    if !m.scan.quiet {
        let dest = output.display().to_string();
        print(&summary::merge(&report, started.elapsed(), &dest));
    }
    // (pids the recording named and that are gone are counted apart)
    summary::strict(m.scan.strict, &report.skipped, false)?;
    summary::strict_not_recorded(m.scan.strict, report.not_recorded.len())?;
    Ok(())
}

/// The warnings of a rewrite, printed even with `-q`: where a salvaged
/// input was cut, and the feature sections (and too long BUILD_ID
/// entries) perf could not read, left out as `how` says.
fn warn(
    recording: &Path,
    cut: Option<&Salvaged>,
    (unreadable, long): (&[(u32, &str)], usize),
    how: LeftOut,
) {
    if let Some(cut) = cut {
        eprintln!("mmap2-synth: {}", cut.warning(recording));
    }
    print(&summary::feature_warnings(unreadable, long, how));
}

pub(crate) fn run_convert(c: &ConvertArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let opts = rewrite::ConvertOptions {
        buildid_mmap2: c.buildid_mmap2 || c.portable,
        to_pipe: if c.portable {
            Some(false)
        } else {
            c.to.map(|m| m == ModeArg::Pipe)
        },
        decompress: c.decompress || c.portable,
        trust_paths: c.trust_paths,
        buildid_all: c.buildid_all,
        in_place: c.target.in_place,
        salvage: c.target.salvage.salvage,
    };
    // a perf.data directory (`perf record --threads`) becomes one file
    // whatever else is asked
    let directory = std::fs::metadata(&c.target.recording).is_ok_and(|m| m.is_dir());
    let nothing = !opts.buildid_mmap2 && opts.to_pipe.is_none() && !opts.decompress;
    if nothing && !opts.buildid_all && !directory {
        return Err(CliError::Usage(
            "convert: nothing to do; give --buildid-mmap2, --buildid-all, --to file|pipe, --decompress or --portable"
                .into(),
        ));
    }
    if opts.trust_paths && !opts.buildid_mmap2 {
        return Err(CliError::Usage(
            "convert: --trust-paths goes with --buildid-mmap2 (or --portable)".into(),
        ));
    }
    let (report, output) = match convert_stream(&c.target, &opts)? {
        Some(stream) => {
            let mut opts = opts;
            opts.to_pipe = Some(true);
            let (mut w, name) = stream;
            (
                rewrite::convert_to_stream(&c.target.recording, &mut w, &name, &opts)?,
                name,
            )
        }
        None => {
            let (recording, output) = rewrite_paths(&c.target, "convert")?;
            (rewrite::convert(&recording, &output, &opts)?, output)
        }
    };
    let recording = &c.target.recording;
    let how = match report.to_pipe {
        true => LeftOut::Stream,
        false => LeftOut::File,
    };
    let bad = (&report.features_unreadable[..], report.build_ids_too_long);
    warn(recording, report.salvaged.as_ref(), bad, how);
    if !c.quiet {
        print(&summary::convert(
            &report,
            started.elapsed(),
            &output.display().to_string(),
        ));
    }
    Ok(())
}

/// A stream output, opened, and its name for messages.
type Stream = (Box<dyn std::io::Write>, PathBuf);

/// The stream `convert` writes into when `-o` is stdout (`-`), a FIFO or a
/// character device (opened, with its name for messages), or None for a
/// file. A stream gets pipe mode: file mode (`--to file`, `--portable`)
/// needs a seekable file and is refused.
fn convert_stream(
    t: &RewriteTarget,
    opts: &rewrite::ConvertOptions,
) -> Result<Option<Stream>, CliError> {
    let Some(o) = t.output.as_ref().filter(|_| !t.in_place) else {
        return Ok(None);
    };
    let (file, name) = if o.as_os_str() == "-" {
        (None, PathBuf::from("stdout"))
    } else {
        match output::classify(o)? {
            output::Target::File(_) => return Ok(None),
            output::Target::Stream(p) => (Some(p.clone()), p),
        }
    };
    if opts.to_pipe == Some(false) {
        return Err(CliError::Usage(format!(
            "{}: convert writes file mode (--to file, --portable) only into a seekable file; \
             a stream gets pipe mode (--to pipe)",
            name.display()
        )));
    }
    let w: Box<dyn std::io::Write> = match file {
        Some(p) => Box::new(super::stdout::Stream(output::open_stream(&p)?)),
        None => Box::new(super::stdout::Stream(super::stdout::open_stdout()?)),
    };
    Ok(Some((w, name)))
}
