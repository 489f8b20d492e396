//! `pprof`: where the profile goes, and running the conversion.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use mmap2_synth::output::{self, AtomicFile};
use mmap2_synth::perf::Input;
use mmap2_synth::pprof::{self, PprofOptions};
use mmap2_synth::summary;

use super::args::PprofArgs;
use super::error::CliError;
use super::print;
use super::stdout::{open_stdout, Stream};

pub(crate) fn run_pprof(a: &PprofArgs) -> Result<(), CliError> {
    let started = Instant::now();
    if let Some(dir) = &a.buildid_dir {
        // a mistyped cache would quietly leave every frame unnamed
        if !dir.is_dir() {
            return Err(CliError::Usage(format!(
                "--buildid-dir {}: not a directory",
                dir.display()
            )));
        }
    }
    super::rewrite::refuse_output_over(&a.output, &a.recording, "the recording")?;
    let input =
        Input::open_as(&a.recording, false, a.salvage.salvage).map_err(pprof::PprofError::from)?;
    let opts = PprofOptions {
        event: a.event.clone(),
        symbolize: !a.no_symbolize,
        buildid_dir: a.buildid_dir.clone(),
    };
    // the profile into `w`, flushed; errors name `path`
    let write = |w: &mut dyn Write, path: &Path| -> Result<_, CliError> {
        let mut w = std::io::BufWriter::new(w);
        let report = pprof::pprof(&input, &opts, &mut w)?;
        w.flush().map_err(|e| CliError::write(path, e))?;
        Ok(report)
    };
    let (report, dest) = if a.output.as_os_str() == "-" {
        (
            write(&mut Stream(open_stdout()?), Path::new("stdout"))?,
            "stdout".into(),
        )
    } else {
        match output::classify(&a.output)? {
            output::Target::Stream(p) => {
                let report = write(&mut Stream(output::open_stream(&p)?), &p)?;
                (report, p.display().to_string())
            }
            output::Target::File(p) => {
                let mut file = AtomicFile::create(&p).map_err(|e| CliError::write(&p, e))?;
                let report = write(&mut file.file(), &p)?;
                file.commit().map_err(|e| CliError::write(&p, e))?;
                (report, p.display().to_string())
            }
        }
    };
    if let Some(cut) = &input.salvaged {
        eprintln!("mmap2-synth: {}", cut.warning(&input.path));
    }
    if !a.quiet {
        print(&summary::pprof(&report, started.elapsed(), &dest));
    }
    Ok(())
}
