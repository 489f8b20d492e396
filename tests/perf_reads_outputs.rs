//! Outputs of `convert` that real perf 6.1 must read whenever it reads the
//! input: feature sections its pipe-mode reader cannot parse (and its
//! file-mode reader, see also `file_features.rs`), and odd COMPRESSED
//! layouts.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Asserts `perf script -i DATA` and `perf report -i DATA --stdio` exit 0.
fn assert_perf_reads(data: &Path, what: &str) {
    for args in [&["script", "-i"][..], &["report", "--stdio", "-i"][..]] {
        let out = Command::new("perf").args(args).arg(data).output().unwrap();
        assert!(
            out.status.success(),
            "{what}: perf {args:?} exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The set feature bits of a little-endian file-mode perf.data, ascending.
fn feature_bits(file: &[u8]) -> Vec<u32> {
    let word = |i: usize| u64::from_le_bytes(file[72 + i * 8..80 + i * 8].try_into().unwrap());
    (0..256u32)
        .filter(|&b| word(b as usize / 64) & (1 << (b % 64)) != 0)
        .collect()
}

/// `file` with the table entry of feature `bit` sized `size`.
fn with_section_size(file: &[u8], bit: u32, size: u64) -> Vec<u8> {
    let u = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap()) as usize;
    let idx = feature_bits(file).iter().position(|&b| b == bit).unwrap();
    let at = u(40) + u(48) + idx * 16 + 8;
    let mut f = file.to_vec();
    f[at..at + 8].copy_from_slice(&size.to_le_bytes());
    f
}

/// Runs `convert IN --to MODE -o OUT`, asserting success; returns stderr.
fn convert_to(input: &Path, mode: &str, out: &Path) -> String {
    let args = [
        "convert".as_ref(),
        input.as_os_str(),
        "--to".as_ref(),
        mode.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    let o = synth_ok::<_, &std::ffi::OsStr>(args);
    String::from_utf8(o.stderr).unwrap()
}

// A real recording with any one feature section emptied (perf's file-mode
// reader reads on past it into the next, and an empty CMDLINE corrupts its
// heap) converts to a stream and to a file perf reads: the section is left
// out of either with a warning naming it, but for an empty BUILD_ID table,
// which a file keeps.
#[test]
#[ignore = "needs perf"]
fn empty_feature_sections_are_left_out_of_streams_and_files() {
    needs_perf();
    let dir = scratch("pipefeat-empty");
    let rec = std::fs::read(pin("rec-file.data")).unwrap();
    let (input, out) = (dir.join("in.data"), dir.join("out.data"));
    for bit in feature_bits(&rec) {
        let f = with_section_size(&rec, bit, 0);
        std::fs::write(&input, &f).unwrap();
        let err = convert_to(&input, "pipe", &out);
        assert_perf_reads(&out, &format!("stream with bit {bit} empty"));
        // BUILD_ID goes as HEADER_BUILD_ID records: an empty table is no error
        if bit != 2 {
            assert!(
                err.contains(&format!("(bit {bit}) left out of the stream")),
                "bit {bit}: {err}"
            );
        }
        let err = convert_to(&input, "file", &out);
        assert_perf_reads(&out, &format!("file with bit {bit} empty"));
        let back = std::fs::read(&out).unwrap();
        assert_eq!(feature_bits(&back).contains(&bit), bit == 2, "bit {bit}");
        if bit != 2 {
            let left_out = format!("(bit {bit}) left out of the file");
            assert!(err.contains(&left_out), "bit {bit}: {err}");
        }
    }
}

// CMDLINE with a count or a string length past its end (perf's file-mode
// reader skips it) converts to a stream perf reads, without CMDLINE.
#[test]
#[ignore = "needs perf"]
fn bad_cmdline_is_left_out_of_streams() {
    needs_perf();
    let dir = scratch("pipefeat-cmdline");
    let rec = std::fs::read(pin("rec-file.data")).unwrap();
    let range = feature_range(&rec, 11).unwrap();
    let (input, out) = (dir.join("in.data"), dir.join("out.data"));
    // the count, then the first string's length
    for (at, v) in [(0, 1u32 << 24), (4, 1 << 24), (4, 0), (4, u32::MAX)] {
        let mut f = rec.clone();
        f[range.start + at..range.start + at + 4].copy_from_slice(&v.to_le_bytes());
        std::fs::write(&input, &f).unwrap();
        assert_perf_reads(&input, &format!("input with {v} at {at}"));
        let err = convert_to(&input, "pipe", &out);
        assert_perf_reads(&out, &format!("stream with {v} at {at}"));
        assert!(err.contains("feature CMDLINE (bit 11) left out"), "{err}");
    }
}
