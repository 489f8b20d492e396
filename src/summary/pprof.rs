//! The summary of `pprof`: what was converted, and what could not be
//! symbolized and why, every name from the recording escaped.

use std::time::Duration;

use super::{escape, shown};

/// Texts from elsewhere, each escaped, joined by ", ".
fn list(items: &[String]) -> String {
    let shown: Vec<String> = items.iter().map(|i| shown(i)).collect();
    shown.join(", ")
}

/// The events of a pprof conversion with their sample counts: the first
/// few by name (a file can declare hundreds of thousands).
fn pprof_events(r: &crate::pprof::PprofReport) -> Vec<String> {
    const SHOWN: usize = 8;
    let mut events: Vec<String> = r
        .events
        .iter()
        .take(SHOWN)
        .map(|(n, c)| format!("{} ({c} samples)", shown(n)))
        .collect();
    if r.events.len() > SHOWN {
        events.push(format!("{} more events", r.events.len() - SHOWN));
    }
    if events.is_empty() {
        events.push("no event (the recording has no samples)".into());
    }
    events
}

/// What the perf maps (`/tmp/perf-PID.map`) named, and those not read.
fn perf_maps(r: &crate::pprof::PprofReport) -> Vec<String> {
    let mut lines = Vec::new();
    if r.perf_maps + r.perf_map_problems + r.jit_unnamed > 0 {
        lines.push(format!(
            "mmap2-synth: code in anonymous memory (JIT) named from {} perf maps (/tmp/perf-PID.map); {} of its locations not named (no perf map of their process covers them)",
            r.perf_maps, r.jit_unnamed
        ));
    }
    if r.perf_map_problems > 0 {
        lines.push(format!(
            "mmap2-synth: {} perf maps not read, or read in part: {}",
            r.perf_map_problems,
            list(&r.perf_map_problem_names)
        ));
    }
    lines
}

/// The summary of `pprof`.
pub fn pprof(r: &crate::pprof::PprofReport, took: Duration, dest: &str) -> Vec<String> {
    let events = pprof_events(r);
    let mut lines = vec![format!(
        "mmap2-synth pprof: {} samples -> {} distinct stacks of {}; {} locations in {} mappings, {} symbolized; {:.3} s -> {}",
        r.samples,
        r.distinct_samples,
        events.join(", "),
        r.locations,
        r.mappings,
        r.symbolized,
        took.as_secs_f64(),
        shown(dest),
    )];
    if r.ip_only > 0 {
        lines.push(format!(
            "mmap2-synth: {} samples have a callchain that does not start at their ip (--call-graph dwarf keeps no user callchain): written with the ip alone",
            r.ip_only
        ));
    }
    if r.unmapped_frames + r.guest_frames > 0 {
        lines.push(format!(
            "mmap2-synth: {} frames in no map (kept as addresses: of a process the recording has no maps of, which `mmap2-synth merge` adds while it runs, or a callchain walked through code built without frame pointers), {} guest frames left out",
            r.unmapped_frames, r.guest_frames
        ));
    }
    lines.extend(build_id_lines(r));
    if r.no_dwarf > 0 {
        lines.push(format!(
            "mmap2-synth: DWARF not read for {} binaries (named from their symbol tables, without lines): {}",
            r.no_dwarf,
            list(&r.no_dwarf_names)
        ));
    }
    if r.no_minidebug > 0 {
        lines.push(format!(
            "mmap2-synth: MiniDebugInfo (.gnu_debugdata) not read for {} binaries (named from their own symbol tables only): {}",
            r.no_minidebug,
            list(&r.no_minidebug_names)
        ));
    }
    lines.extend(perf_maps(r));
    if !r.replaced.is_empty() {
        let paths: Vec<String> = r.replaced.iter().map(|p| escape(p)).collect();
        lines.push(format!(
            "mmap2-synth: no build id for maps of files not the one at their path now (replaced since or while recorded, or another mount namespace's, its process gone; the BUILD_ID table's id may be another file's): {}",
            paths.join(", ")
        ));
    }
    if let Some(k) = &r.kernel_symbols {
        lines.push(format!("mmap2-synth: kernel symbols: {}", shown(k)));
    }
    if r.unsymbolizable > 0 {
        lines.push(format!(
            "mmap2-synth: {} binaries could not be symbolized (addresses kept): {}",
            r.unsymbolizable,
            list(&r.unsymbolizable_names)
        ));
    }
    if let Some(e) = &r.symbolize_error {
        lines.push(format!(
            "mmap2-synth: {} files could not be symbolized: {}",
            r.symbolize_errors,
            shown(e)
        ));
    }
    lines
}

/// What the summary says of the files found by build id: those missing,
/// maps without an id.
fn build_id_lines(r: &crate::pprof::PprofReport) -> Vec<String> {
    let mut lines = Vec::new();
    if r.files_missing > 0 {
        lines.push(format!(
            "mmap2-synth: no file with the right build id for {} binaries (addresses kept; --buildid-dir with an `archive` of them): {}",
            r.files_missing,
            list(&r.missing)
        ));
    }
    if r.vdso_running {
        lines.push(
            "mmap2-synth: [vdso] recorded without a build id named from the running kernel's (the recording's kernel is this build, as perf assumes)".to_string(),
        );
    }
    if r.no_build_id > 0 {
        lines.push(format!(
            "mmap2-synth: {} locations in maps without a build id not symbolized (nothing proves which file they were)",
            r.no_build_id
        ));
    }
    lines
}
