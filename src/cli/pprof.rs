//! `pprof`: where the profile goes, and running the conversion.

use std::io::Write;
use std::time::Instant;

use mmap2_synth::output::{self, AtomicFile};
use mmap2_synth::perf::Input;
use mmap2_synth::pprof::{self, PprofOptions};
use mmap2_synth::summary;

use super::args::PprofArgs;
use super::error::CliError;
use super::print;

pub(crate) fn run_pprof(a: &PprofArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let input = Input::open(&a.recording).map_err(pprof::PprofError::from)?;
    let opts = PprofOptions {
        event: a.event.clone(),
        symbolize: !a.no_symbolize,
        buildid_dir: a.buildid_dir.clone(),
    };
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| output::OutputError::Io { path, source }
    };
    let (report, dest) = if a.output.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let report = pprof::pprof(&input, &opts, &mut out)?;
        out.flush().map_err(io(&a.output))?;
        (report, "stdout".to_string())
    } else {
        match output::classify(&a.output)? {
            output::Target::Stream(p) => {
                let mut out = std::io::BufWriter::new(output::open_stream(&p)?);
                let report = pprof::pprof(&input, &opts, &mut out)?;
                out.flush().map_err(io(&p))?;
                (report, p.display().to_string())
            }
            output::Target::File(p) => {
                let mut file = AtomicFile::create(&p).map_err(io(&p))?;
                let mut out = std::io::BufWriter::new(file.file());
                let report = pprof::pprof(&input, &opts, &mut out)?;
                out.flush().map_err(io(&p))?;
                drop(out);
                file.commit().map_err(io(&p))?;
                (report, p.display().to_string())
            }
        }
    };
    if !a.quiet {
        print(&summary::pprof(&report, started.elapsed(), &dest));
    }
    Ok(())
}
