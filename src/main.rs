//! The `mmap2-synth` command line: a thin layer over the library (see
//! `cli/` for its parts).

#![warn(clippy::too_many_lines)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
