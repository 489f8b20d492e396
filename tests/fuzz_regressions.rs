//! Replays every file under `fixtures/fuzz/<target>/` (the seed corpora and
//! every input a fuzzer ever crashed on) through the fuzz targets' own code
//! (`fuzz/targets.rs`), so `cargo test` keeps them fixed.

#[path = "../fuzz/targets.rs"]
mod targets;

use std::path::{Path, PathBuf};

/// The files of one target's corpus; fails if there are none.
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/fuzz")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
}

fn replay(target: &str, f: impl Fn(&[u8])) {
    for p in corpus(target) {
        let data = std::fs::read(&p).unwrap();
        // a panic names the file through the test's output
        eprintln!("replaying {}", p.display());
        f(&data);
    }
}

// The perf.data reader survives every corpus file (file, pipe, -z, dwarf, BE, AUXTRACE, crashes).
#[test]
fn perf_file_corpus() {
    replay("perf_file", targets::perf_file);
}

// merge (every writer) survives every corpus file.
#[test]
fn perf_merge_corpus() {
    let snap = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pin/snap-le.data");
    replay("perf_merge", |d| targets::perf_merge(d, &snap));
}

// convert (patch, stream, decompress, recompress) survives every perf.data corpus file.
#[test]
fn perf_convert_corpus() {
    replay("perf_file", targets::perf_convert);
    replay("perf_merge", targets::perf_convert);
}

// pprof (replay, aggregation, symbolization) survives every perf.data corpus file.
#[test]
fn perf_pprof_corpus() {
    replay("perf_file", targets::perf_pprof);
    replay("perf_merge", targets::perf_pprof);
}

// The maps text parser survives every corpus file.
#[test]
fn maps_text_corpus() {
    replay("maps_text", targets::maps_text);
}

// The ELF note readers survive every corpus file.
#[test]
fn elf_notes_corpus() {
    replay("elf_notes", targets::elf_notes);
}

// The record decoders survive every corpus file in both byte orders.
#[test]
fn records_corpus() {
    replay("records", targets::records);
}
