#![allow(dead_code)] // each fuzz binary uses one of these
//! The bodies of the fuzz targets, shared with `tests/fuzz_regressions.rs`
//! (which replays every file under `fixtures/fuzz/`), so a crash found by
//! fuzzing is replayed by `cargo test` through exactly the same code.
//! Errors are fine; a panic, a hang or unbounded memory is a bug.

use std::path::{Path, PathBuf};

use mmap2_synth::bytes::Endian;
use mmap2_synth::perf::{self, events, features, record, Input};

/// A file of this process's under /dev/shm (tmpfs: fast), holding `data`.
fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let p = dir.join(format!("m2s-fuzz-{}-{name}", std::process::id()));
    std::fs::write(&p, data).expect("write the fuzz input");
    p
}

/// perf.data reader: open (file or pipe mode) and walk every record with
/// the merge's visitor, then read it back as a snapshot.
pub fn perf_file(data: &[u8]) {
    let p = scratch_file("in.data", data);
    if let Ok(input) = Input::open(&p) {
        let mut facts = mmap2_synth::rewrite::scan::RecordingFacts::new(
            input.endian(),
            mmap2_synth::rewrite::scan::Remember::All,
        );
        let _ = input.walk(&mut facts);
        let _ = mmap2_synth::snapshot::read_snapshot(&input);
    }
    // `--salvage`: the same input read up to its last whole record
    if let Ok(input) = Input::open_as(&p, false, true) {
        let mut facts = mmap2_synth::rewrite::scan::RecordingFacts::new(
            input.endian(),
            mmap2_synth::rewrite::scan::Remember::All,
        );
        let _ = input.walk(&mut facts);
    }
}

/// merge of the input with a fixed snapshot (every writer path).
pub fn perf_merge(data: &[u8], snapshot: &Path) {
    use mmap2_synth::rewrite::{merge, MergeOptions, Which};
    let p = scratch_file("merge-in.data", data);
    let out = p.with_extension("out");
    let opts = MergeOptions {
        which: Which::All,
        maps: Some(snapshot.to_path_buf()),
        snapshot: mmap2_synth::proc::Options::default(),
        in_place: false,
        kernel: true,
        // (a cut input read up to its cut; any other as without it)
        salvage: true,
    };
    let _ = merge(&p, &out, &opts);
}

/// convert under every combination of its options that rewrites (the
/// in-place patch, the stream both ways, decompression, recompression):
/// bad input must be an error, never a panic.
pub fn perf_convert(data: &[u8]) {
    use mmap2_synth::rewrite::{convert, ConvertOptions};
    let p = scratch_file("convert-in.data", data);
    let out = p.with_extension("out");
    for (to_pipe, decompress, buildid_mmap2, buildid_all) in [
        (None, false, true, false),
        (Some(true), false, false, false),
        (Some(false), true, true, true),
        (None, false, true, true),
    ] {
        let opts = ConvertOptions {
            buildid_mmap2,
            to_pipe,
            decompress,
            trust_paths: false,
            buildid_all,
            in_place: false,
            // one way with `--salvage`: a cut input read up to its cut
            salvage: buildid_all,
        };
        let _ = convert(&p, &out, &opts);
    }
}

/// pprof: the replay of maps and samples into a profile, with and without
/// symbolization (the files a hostile recording names are opened only when
/// their build id matches).
pub fn perf_pprof(data: &[u8]) {
    use mmap2_synth::pprof::{pprof, PprofOptions};
    let p = scratch_file("pprof-in.data", data);
    if let Ok(input) = Input::open(&p) {
        for symbolize in [false, true] {
            let opts = PprofOptions {
                symbolize,
                ..Default::default()
            };
            let _ = pprof(&input, &opts, &mut std::io::sink());
        }
    }
    let _ = std::fs::remove_file(&p);
}

/// The text /proc/PID/maps parser.
pub fn maps_text(data: &[u8]) {
    let _ = mmap2_synth::proc::maps_text::parse_maps(data, |_, _| true);
}

/// The ELF header, program header and note readers, in memory and as a file.
pub fn elf_notes(data: &[u8]) {
    use mmap2_synth::proc::{buildid, elf};
    let _ = elf::build_id_from_image(data);
    if let Ok(h) = elf::parse_header(data) {
        let _ = elf::note_segments(
            &h,
            data.get(h.phoff.min(data.len() as u64) as usize..)
                .unwrap_or(&[]),
        );
    }
    let _ = elf::find_gnu_build_id(data, false);
    let _ = elf::find_gnu_build_id(data, true);
    let p = scratch_file("elf", data);
    if let Ok(f) = std::fs::File::open(&p) {
        let _ = buildid::read_build_id_from_file(&f);
    }
}

/// Every record decoder over records split from the input, both byte orders.
pub fn records(data: &[u8]) {
    use mmap2_synth::perf::consts::sample_type as st;
    for e in [Endian::Little, Endian::Big] {
        let _ = perf::Kind::of(data);
        let _ = perf::FileHeader::parse(data, data.len() as u64);
        let _ = perf::Attr::parse(data, e, 0);
        let _ = features::parse_build_id_table(data, e, 0);
        let bits = perf::FeatureBits([u64::MAX; 4]);
        let _ = perf::FeatureTable::parse(data, e, &bits, 0, data.len() as u64);
        for (h, body) in record::split_records(data, e) {
            let _ = events::parse_map(&h, body, e);
            let _ = events::leaked_build_id_flag(&h, body);
            let _ = events::parse_comm(body, e);
            for t in [
                st::IP | st::TID | st::TIME,
                st::IDENTIFIER | st::TID | st::TIME | st::ID,
            ] {
                let _ = events::sample_head(body, t, e);
            }
        }
    }
}
