#![no_main]
//! Fuzz target: see `fuzz/targets.rs` for what it exercises.

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let snap = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/pin/snap-le.data");
    targets::perf_merge(data, std::path::Path::new(snap))
});
