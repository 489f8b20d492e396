#![no_main]
//! Fuzz target: see `fuzz/targets.rs` for what it exercises.

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::perf_pprof(data));
