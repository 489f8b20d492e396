//! `dump`: a recording's maps on stdout.

use mmap2_synth::dump::{self, DumpError, DumpOptions};

use super::args::DumpArgs;
use super::error::CliError;
use super::stdout::Stream;

pub(crate) fn run_dump(d: &DumpArgs) -> Result<(), CliError> {
    let input = mmap2_synth::perf::Input::open_as(&d.file, false, d.salvage.salvage)
        .map_err(DumpError::from)?;
    let opts = DumpOptions {
        json: d.json,
        sort: d.sort,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(Stream(stdout.lock()));
    dump::dump(&input, opts, &mut out)?;
    if let Some(cut) = &input.salvaged {
        eprintln!("mmap2-synth: {}", cut.warning(&input.path));
    }
    Ok(())
}
