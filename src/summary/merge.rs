//! The summary of a merge: what went in, what was left out and why.

use super::{escape, shown, skip_lines};
use std::time::Duration;

use crate::rewrite::MergeReport;

/// The merge summary, then its skips and stale pids.
pub fn merge(report: &MergeReport, took: Duration, dest: &str) -> Vec<String> {
    let mut lines = vec![format!(
        "mmap2-synth merge: {} {} records; inserted {} records ({} processes, {} maps, {} new build ids); {} maps already present; stale (started after the recording): {}; not the recorded process: {}; not found: {}; skipped: {}; {:.3} s -> {}",
        if report.pipe { "pipe-mode" } else { "file-mode" },
        report.input_records,
        report.inserted_records,
        report.processes,
        report.maps,
        report.new_build_ids,
        report.duplicate_maps,
        report.stale.len(),
        report.not_recorded.len(),
        report.missing.len(),
        report.skipped.len(),
        took.as_secs_f64(),
        shown(dest),
    )];
    lines.extend(data_maps_line(report));
    lines.extend(skip_lines(&report.skipped));
    if report.unchanged {
        lines.push("mmap2-synth: nothing to add: the recording is left as it was".into());
    }
    if let Some(at) = report.trailing_bytes_at {
        lines.push(format!(
            "mmap2-synth: warning: the input's bytes from offset {at} on are not records (perf's messages appended to its output?); kept as they are"
        ));
    }
    if let Some((at, what)) = report.odd_compressed {
        lines.push(format!(
            "mmap2-synth: warning: the COMPRESSED record at offset {at} {what}: perf misreads it, in the input as in the output (kept as it is); `convert --decompress` writes its records as perf reads them"
        ));
    }
    if !report.stale.is_empty() {
        lines.push(format!("mmap2-synth: stale pids: {:?}", report.stale));
    }
    lines.extend(live_line(report));
    if report.renamed_comms > 0 {
        lines.push(format!(
            "mmap2-synth merge: note: {} threads' COMMs left out: renamed during the recording, their names of now would name their samples from before (perf shows them as :TID until the rename); `record`, or `--maps` of a snapshot taken at the start, gives the first names",
            report.renamed_comms
        ));
    }
    lines.extend(not_recorded_lines(&report.not_recorded));
    if report.kernel_maps > 0 {
        lines.push(format!(
            "mmap2-synth: the recording had no kernel map: {} kernel/module maps inserted",
            report.kernel_maps
        ));
    }
    if let Some(why) = &report.kernel_skipped {
        lines.push(format!(
            "mmap2-synth: the recording has no kernel map and gets none: {}",
            shown(why)
        ));
    }
    if report.bpf_programs > 0 {
        lines.push(format!(
            "mmap2-synth: {} loaded BPF programs inserted (the KSYMBOL and BPF_EVENT records the recording lacked)",
            report.bpf_programs
        ));
    }
    if let Some(why) = &report.bpf_skipped {
        lines.push(format!(
            "mmap2-synth: no BPF programs inserted: {}",
            shown(why)
        ));
    }
    lines
}

/// What a merge did with data maps, and why: nothing to say when none were
/// asked for and none were left out.
fn data_maps_line(r: &MergeReport) -> Option<String> {
    use crate::rewrite::merge::DataMaps;
    let n = r.data_maps_inserted;
    match r.data_maps {
        DataMaps::Recording => Some(format!(
            "mmap2-synth merge: data maps: {n} inserted because the recording asks for them (an event with mmap_data: perf -d / --call-graph dwarf, whose unwinding needs them), as perf's own synthesis would"
        )),
        DataMaps::Asked => Some(format!("mmap2-synth merge: data maps: {n} inserted (-d)")),
        DataMaps::No if r.data_maps_left_out > 0 => Some(format!(
            "mmap2-synth merge: data maps: {} of the snapshot's left out: the recording does not ask for them (perf synthesizes them only for -d / --call-graph dwarf); -d inserts them",
            r.data_maps_left_out
        )),
        DataMaps::No => None,
    }
}

/// Processes named in warnings one by one; the rest are counted.
const NOT_RECORDED_SHOWN: usize = 10;

/// A warning per process a merge left out as not the one sampled, naming
/// its pid, comm and coverage and the likely causes.
fn not_recorded_lines(all: &[crate::rewrite::coverage::NotRecorded]) -> Vec<String> {
    let mut lines: Vec<String> = (all.iter().take(NOT_RECORDED_SHOWN))
        .map(|n| format!(
            "mmap2-synth: warning: pid {} ({}) is not the recorded process: {} of {} sampled user-mode addresses are in its executable maps; its COMM and maps are not inserted (recorded in another pid namespace, e.g. by perf in a container, the pid reused since, or every sampled address in code it has unmapped since: --maps of a snapshot taken while recording has it)",
            n.pid,
            escape(&n.comm),
            n.coverage.covered,
            n.coverage.sampled
        ))
        .collect();
    if all.len() > NOT_RECORDED_SHOWN {
        lines.push(format!(
            "mmap2-synth: warning: {} more processes not the recorded ones, not inserted",
            all.len() - NOT_RECORDED_SHOWN
        ));
    }
    lines
}

/// Maps read from live processes long after the recording ended: what a
/// process maps now may not be what it mapped then, and nothing in the
/// recording tells (a library unloaded and another loaded at its place
/// after the recording takes its samples: every sampled address is still
/// mapped, so the not-the-recorded-process check passes).
fn live_line(r: &MergeReport) -> Option<String> {
    let after = r
        .live_after_ns
        .filter(|&ns| ns >= LIVE_NOTE_NS && r.processes > 0)?;
    Some(format!(
        "mmap2-synth merge: note: maps read from the live processes about {:.0} s after the recording's last sample: a library unloaded or replaced at its place since then would take its samples; `record`, or `--maps` of a snapshot taken while recording, gives the maps of that time",
        after as f64 / 1e9
    ))
}

/// How long after the recording's end a live merge says so ([`live_line`]).
const LIVE_NOTE_NS: u64 = 2_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    // A live merge says its maps are of now once two seconds or more have
    // passed since the recording's last sample and it inserted a process;
    // not sooner, nor for a merge that inserted none or read no live maps.
    #[test]
    fn a_late_live_merge_says_its_maps_are_of_now() {
        let report = |after: Option<u64>, processes| MergeReport {
            live_after_ns: after,
            processes,
            ..MergeReport::default()
        };
        let note = live_line(&report(Some(5_200_000_000), 1)).unwrap();
        assert!(
            note.contains("about 5 s after the recording's last sample"),
            "{note}"
        );
        assert!(merge(&report(Some(5_200_000_000), 1), Duration::ZERO, "o").contains(&note));
        assert_eq!(live_line(&report(Some(1_900_000_000), 1)), None);
        assert_eq!(live_line(&report(Some(5_200_000_000), 0)), None);
        assert_eq!(live_line(&report(None, 3)), None);
    }

    // The threads whose COMMs a live merge left out as renamed are counted
    // in one line, and only when there are some.
    #[test]
    fn renamed_threads_left_out_are_counted_only_when_some_are() {
        let lines = |n| {
            let r = MergeReport {
                renamed_comms: n,
                ..MergeReport::default()
            };
            merge(&r, Duration::ZERO, "o")
        };
        let said = |l: &Vec<String>| l.iter().filter(|l| l.contains("COMMs left out")).count();
        assert_eq!(said(&lines(0)), 0);
        let two = lines(2);
        assert_eq!(said(&two), 1, "{two:?}");
        assert!(two
            .iter()
            .any(|l| l.contains("note: 2 threads' COMMs left out: renamed")));
    }
}
