//! The one-line summaries the CLI prints on stderr, and `--strict`.
//!
//! Every piece of text a summary did not write itself (paths, comms, event
//! names, the output's name, reasons that quote a file or a library) goes
//! through [`escape`] here, where it is printed: a recording or a file name
//! with terminal escape sequences or newlines gets none of them through.

use std::time::Duration;

use crate::archive::Vdso;
use crate::proc::Skip;
use crate::rewrite::ConvertReport;
use crate::snapshot::Stats;
use crate::text::escape;

mod merge;
mod pprof;
mod strict;
pub use merge::merge;
pub use pprof::pprof;
pub use strict::{strict, strict_archive, strict_lost, strict_not_recorded, StrictFailure};

/// Text from elsewhere, as printed ([`escape`] of its bytes).
fn shown(s: &str) -> String {
    escape(s.as_bytes())
}

fn list_or_none(items: Vec<String>) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

/// One line per skipped process.
pub fn skip_lines(skipped: &[Skip]) -> Vec<String> {
    skipped
        .iter()
        .map(|s| {
            format!(
                "mmap2-synth: skipped pid {} ({}): {}",
                s.pid,
                s.reason,
                shown(&s.detail)
            )
        })
        .collect()
}

/// The summary's lines on the kernel: its maps and BPF programs, or why
/// they are missing.
fn kernel_lines(stats: &Stats, lines: &mut Vec<String>) {
    if stats.kernel_maps > 0 {
        lines.push(format!(
            "mmap2-synth: kernel: {} maps (the kernel and {} modules)",
            stats.kernel_maps,
            stats.kernel_maps - 1
        ));
    }
    if let Some(why) = &stats.kernel_skipped {
        lines.push(format!(
            "mmap2-synth: kernel maps not written: {}",
            shown(why)
        ));
    }
    if stats.bpf_programs > 0 || stats.bpf_left_out > 0 {
        let left = match stats.bpf_left_out {
            0 => String::new(),
            n => format!(", {n} left out (not JITed or unreadable)"),
        };
        lines.push(format!(
            "mmap2-synth: kernel: {} BPF programs ({} JITed functions){left}",
            stats.bpf_programs, stats.bpf_functions
        ));
    }
    if let Some(why) = &stats.bpf_skipped {
        lines.push(format!(
            "mmap2-synth: BPF programs not written: {}",
            shown(why)
        ));
    }
}

/// What the snapshot line says of build ids beyond found and missing: ids
/// matched by inode only, files not read and why.
fn id_notes(n: &crate::proc::idcache::IdNotes) -> String {
    use crate::proc::mounts::FsTrust;
    let unread = |t: FsTrust| format!("{}, not read", t.unread().unwrap_or_default());
    let said: Vec<String> = [
        (n.unverified, "matched by inode only".to_string()),
        (n.on_fuse, unread(FsTrust::Fuse)),
        (n.user_ns, unread(FsTrust::UserNs)),
        (n.unmounted, unread(FsTrust::Unmounted)),
        (n.unsettled, unread(FsTrust::Unsettled)),
    ]
    .iter()
    .filter(|(count, _)| *count > 0)
    .map(|(count, what)| format!("{count} {what}"))
    .collect();
    match said.is_empty() {
        true => String::new(),
        false => format!(" ({})", said.join("; ")),
    }
}

/// The snapshot summary, then its skips.
pub fn snapshot(stats: &Stats, skipped: &[Skip], took: Duration, dest: &str) -> Vec<String> {
    let skips = stats
        .skipped
        .iter()
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    let sources = stats
        .sources
        .iter()
        .map(|(s, n)| format!("{s} ({n})"))
        .collect();
    let mut lines = vec![format!(
        "mmap2-synth: {} processes ({} kernel threads), {} threads, {} VMAs, {} DSOs; build ids: {} found, {} missing{}; skipped: {}; source: {}; {:.3} s -> {}",
        stats.processes,
        stats.kernel_threads,
        stats.threads,
        stats.vmas,
        stats.dsos,
        stats.build_ids_found,
        stats.build_ids_missing,
        id_notes(&stats.build_id_notes),
        list_or_none(skips),
        list_or_none(sources),
        took.as_secs_f64(),
        shown(dest),
    )];
    if stats.iterator_heads > 0 {
        lines.push(format!(
            "mmap2-synth: comm, parent and threads of {} processes from the BPF task iterator",
            stats.iterator_heads
        ));
    }
    kernel_lines(stats, &mut lines);
    let lost_hint = match stats.watch_lost {
        0 => String::new(),
        _ => format!(
            "; maps made during the scan may be missing (a bigger -m keeps more, up to the {} MiB the watch holds; with --all or -u every process's losses count)",
            crate::proc::watch::DRAIN_CAP >> 20
        ),
    };
    let window = stats
        .watch_window
        .map(|(from, to)| format!(" (CLOCK_MONOTONIC {from} to {to} ns)"))
        .unwrap_or_default();
    match (&stats.watch_skipped, stats.watched) {
        (Some(why), _) => lines.push(format!(
            "mmap2-synth: {}; maps made during the scan{window} may be missing",
            shown(why)
        )),
        (None, true) => lines.push(format!(
            "mmap2-synth: watched during the scan: {} records added, {} superseded by the scan's maps, {} repeated, {}{} lost{window}{}{}",
            stats.watched_added,
            stats.watched_superseded,
            stats.watched_repeated,
            if stats.watch_lost_at_least { "at least " } else { "" },
            stats.watch_lost,
            late_note(stats),
            lost_hint
        )),
        (None, false) if stats.watch_window.is_some() => lines.push(format!(
            "mmap2-synth: not watched: maps made during the scan{window} may be missing"
        )),
        (None, false) => {}
    }
    lines.extend(skip_lines(skipped));
    lines
}

/// The processes forked during a watched scan, read after it or left to
/// their FORK records (then perf gives them their parent's maps as read).
fn late_note(stats: &Stats) -> String {
    match (stats.late_read, stats.late_unread) {
        (0, 0) => String::new(),
        (r, 0) => format!("; {r} processes forked meanwhile also read"),
        (r, u) => format!(
            "; {r} processes forked meanwhile also read, {u} others gone or past the bound (given their parent's maps)"
        ),
    }
}

/// The line of a conversion that repaired MMAP2 records with the kernel's
/// leaked build-id flag, if it did.
fn leaked_line(r: &ConvertReport) -> Option<String> {
    (r.leaked_flags > 0).then(|| format!(
        "mmap2-synth: {} MMAP2 records had the build-id flag over an inode body (Linux leaks it from another session's event that asked for ids; perf 6.1 aborts on them): repaired",
        r.leaked_flags
    ))
}

/// Where feature sections perf 6.1 cannot read went (`perf::feature_check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOut {
    /// Left out of a pipe-mode output.
    Stream,
    /// Left out of a file-mode output.
    File,
    /// Kept: an `--in-place` merge with nothing to add wrote nothing.
    Kept,
}

/// A warning line per feature section perf 6.1 cannot read (`unreadable`,
/// with why) and one for the BUILD_ID entries too long for its file-mode
/// reader (`long`), saying what became of them (`how`). Printed whether
/// or not the summary is.
pub fn feature_warnings(unreadable: &[(u32, &str)], long: usize, how: LeftOut) -> Vec<String> {
    let mut lines: Vec<String> = unreadable
        .iter()
        .map(|(bit, why)| {
            let name = crate::perf::consts::feature::name(*bit).unwrap_or("?");
            let what = format!("feature {name} (bit {bit})");
            match how {
                LeftOut::Stream => format!("mmap2-synth: warning: {what} left out of the stream: perf's pipe-mode reader would abort on it ({why})"),
                LeftOut::File => format!("mmap2-synth: warning: {what} left out of the file: perf's file-mode reader cannot read it ({why}; it would read past it or stop reading features there)"),
                LeftOut::Kept => format!("mmap2-synth: warning: {what} cannot be read by perf ({why}); left as it is with the rest (`convert --to file --in-place` leaves it out)"),
            }
        })
        .collect();
    if long > 0 {
        let limit = crate::perf::feature_check::MAX_FILE_BUILD_ID_ENTRY;
        lines.push(match how {
            LeftOut::Kept => format!("mmap2-synth: warning: {long} BUILD_ID entries are longer than the {limit} bytes perf's file-mode reader holds; left as they are (`convert --to file --in-place` leaves them out)"),
            _ => format!("mmap2-synth: warning: {long} BUILD_ID entries left out: longer than the {limit} bytes perf's file-mode reader holds (it would overrun its stack)"),
        });
    }
    lines
}

/// The summary of a conversion: what became build-id MMAP2, and why the
/// rest did not.
pub fn convert(r: &ConvertReport, took: Duration, dest: &str) -> Vec<String> {
    let mut lines = vec![format!(
        "mmap2-synth convert: {} records; {} maps given build ids ({} from the BUILD_ID table, {} from the same file on disk, {} from a live process's file, {} from /sys, {} by path); kept: {} stale (not the file at the path now), {} ambiguous (one table id, several files at the path), {} file missing, {} without a usable id, {} had ids already, {} anonymous/special; {:.3} s -> {}",
        r.records,
        r.from_table + r.from_disk + r.from_live + r.from_sys + r.from_path,
        r.from_table,
        r.from_disk,
        r.from_live,
        r.from_sys,
        r.from_path,
        r.stale,
        r.ambiguous,
        r.missing,
        r.no_id,
        r.already,
        r.special,
        took.as_secs_f64(),
        shown(dest),
    )];
    if r.v1_converted + r.mmap_v1 > 0 {
        lines.push(format!(
            "mmap2-synth: MMAP (v1): {} became build-id MMAP2, {} kept ({} user maps without an id in the table{})",
            r.v1_converted,
            r.mmap_v1,
            r.v1_no_id,
            if r.from_path > 0 { "; ids by path were trusted (--trust-paths)" } else { "; --trust-paths reads the file at the path" },
        ));
    }
    lines.extend(leaked_line(r));
    if r.kernel_no_id > 0 {
        lines.push(format!(
            "mmap2-synth: {} kernel/module maps without an id (not in the table, and the recording is not of this kernel)",
            r.kernel_no_id
        ));
    }
    if r.table_added > 0 {
        lines.push(format!(
            "mmap2-synth: BUILD_ID table: {} mapped files added (--buildid-all)",
            r.table_added
        ));
    }
    let mode = |pipe| if pipe { "pipe" } else { "file" };
    if r.from_pipe != r.to_pipe {
        lines.push(format!(
            "mmap2-synth: {} mode -> {} mode",
            mode(r.from_pipe),
            mode(r.to_pipe)
        ));
    }
    if r.decompressed > 0 {
        lines.push(format!(
            "mmap2-synth: {} records taken out of {} COMPRESSED records",
            r.decompressed, r.compressed_records
        ));
    }
    if !r.features_dropped.is_empty() {
        lines.push(format!(
            "mmap2-synth: feature sections left out of the stream (unknown to perf, which aborts on them there): bits {:?}",
            r.features_dropped
        ));
    }
    lines.extend(recompressed(r));
    if let Some((at, n)) = r.trailing {
        let what = if r.to_pipe {
            "copied as they are"
        } else {
            "left out"
        };
        lines.push(format!(
            "mmap2-synth: the stream's last {n} bytes (from offset {at}) form no records: {what}"
        ));
    }
    lines.extend(kept_paths(r));
    lines
}

/// The COMPRESSED records `convert` wrote anew, and why when they were
/// not to be copied (one of them perf misreads).
fn recompressed(r: &ConvertReport) -> Option<String> {
    let why = match r.odd_compressed {
        Some((at, what)) => format!(" (the one at offset {at} {what}: perf misreads a copy of it)"),
        None => String::new(),
    };
    (r.recompressed > 0).then(|| {
        format!(
            "mmap2-synth: {} COMPRESSED records recompressed into {}{why}",
            r.compressed_records, r.recompressed
        )
    })
}

/// The paths whose maps `convert` kept without an id, and why.
fn kept_paths(r: &ConvertReport) -> impl Iterator<Item = String> + '_ {
    let stale = r.stale_paths.iter().map(|p| {
        let p = escape(p);
        format!(
            "mmap2-synth: stale: the file mapped as {p} is not the file at {p} now (replaced on disk, or another mount namespace's); its maps keep maj/min/ino"
        )
    });
    let ambiguous = r.ambiguous_paths.iter().map(|p| {
        format!(
            "mmap2-synth: ambiguous: {} names several files in this recording (replaced while recorded, or other mount namespaces') and the BUILD_ID table one id; maps not of the file it was read from keep maj/min/ino",
            escape(p)
        )
    });
    stale.chain(ambiguous)
}

/// The summary of `archive`.
pub fn archive(r: &crate::archive::ArchiveReport, took: Duration, dest: &str) -> Vec<String> {
    let kernel = match &r.kernel_missing {
        None => "kallsyms".to_string(),
        Some(why) => format!("no kallsyms ({})", shown(why)),
    };
    let mut lines = vec![format!(
        "mmap2-synth archive: {} processes; {} files added ({} bytes), {} already there, {} unreadable, {} mapping another file than recorded, {} with no id or inode in the record and not mapped there now, {} too large or sparse, {} not written; vdso {}; {}; {:.3} s -> {}",
        r.processes,
        r.added,
        r.bytes,
        r.present,
        r.unreadable,
        r.mismatched,
        r.unidentified,
        r.too_large,
        r.failed,
        match r.vdso {
            Vdso::Archived => "archived",
            Vdso::NotFound => "not found",
            Vdso::NotWritten => "not written",
        },
        kernel,
        took.as_secs_f64(),
        shown(dest),
    )];
    if r.bad_names > 0 {
        let names: Vec<String> = r
            .bad_name_examples
            .iter()
            .map(|n| crate::text::escape(n))
            .collect();
        lines.push(format!(
            "mmap2-synth: archive: {} mapped files not archived: their names are no clean absolute path (`.`, `..` or empty components), so no cache path can hold them: {}",
            r.bad_names,
            names.join(", ")
        ));
    }
    for f in &r.failures {
        lines.push(format!("mmap2-synth: archive: not written: {}", shown(f)));
    }
    lines.extend(skip_lines(&r.skipped));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::SkipReason;
    use crate::rewrite::MergeReport;

    // pprof's line names the first 8 events and counts the rest (a file
    // declaring 400,000 events made it megabytes long).
    #[test]
    fn pprof_line_shows_a_few_events() {
        let r = crate::pprof::PprofReport {
            events: (0..10).map(|i| (format!("ev{i}"), i)).collect(),
            ..Default::default()
        };
        let line = &pprof(&r, Duration::ZERO, "p.pb.gz")[0];
        assert!(line.contains("ev7 (7 samples), 2 more events"), "{line}");
        assert!(!line.contains("ev8"), "{line}");
    }

    // Whatever a recording names goes out escaped: event names, missing and
    // unsymbolizable binaries, blazesym's error, the output; no line of the
    // recording's own, no terminal control.
    #[test]
    fn pprof_lines_escape_what_the_recording_names() {
        let bad = "x\x1b]0;t\x07\nFAKE";
        let r = crate::pprof::PprofReport {
            events: vec![(bad.into(), 1)],
            files_missing: 1,
            missing: vec![bad.into()],
            unsymbolizable: 1,
            unsymbolizable_names: vec![bad.into()],
            symbolize_errors: 1,
            symbolize_error: Some(bad.into()),
            kernel_symbols: Some(bad.into()),
            ..Default::default()
        };
        let text = pprof(&r, Duration::ZERO, bad).join("\n");
        assert_eq!(
            text.matches("x\\x1b]0;t\\x07\\x0aFAKE").count(),
            6,
            "{text}"
        );
        assert!(!text.contains(['\x1b', '\x07']) && !text.contains("\nFAKE"));
    }

    // The watch line: "at least" only when the count is a lower bound, the
    // hint (with the cap from the drainer's constant) only when something
    // was lost.
    #[test]
    fn watch_line_says_what_was_lost() {
        let line = |lost, at_least| {
            let mut stats = Stats::default();
            stats.watched = true;
            stats.watch_lost = lost;
            stats.watch_lost_at_least = at_least;
            let lines = snapshot(&stats, &[], Duration::ZERO, "out");
            lines
                .into_iter()
                .find(|l| l.contains("watched during the scan"))
                .unwrap()
        };
        let none = line(0, false);
        assert!(
            none.contains(", 0 lost") && !none.contains("missing"),
            "{none}"
        );
        let exact = line(3, false);
        assert!(
            exact.contains(", 3 lost") && exact.contains("up to the 16 MiB"),
            "{exact}"
        );
        let bound = line(1, true);
        assert!(bound.contains(", at least 1 lost; maps made"), "{bound}");
    }

    // The kernel lines count BPF programs and functions (and those left out), or say why there are none.
    #[test]
    fn bpf_lines() {
        let mut stats = Stats::default();
        let lines = |stats: &Stats| snapshot(stats, &[], Duration::ZERO, "out").join("\n");
        assert!(!lines(&stats).contains("BPF"));
        stats.bpf_programs = 2;
        stats.bpf_functions = 3;
        let text = lines(&stats);
        assert!(
            text.contains("kernel: 2 BPF programs (3 JITed functions)")
                && !text.contains("left out"),
            "{text}"
        );
        stats.bpf_left_out = 1;
        assert!(
            lines(&stats).contains("2 BPF programs (3 JITed functions), 1 left out"),
            "{}",
            lines(&stats)
        );
        stats = Stats::default();
        stats.bpf_skipped = Some("why".into());
        assert!(lines(&stats).contains("BPF programs not written: why"));
    }

    // A merge's processes left out as not the recorded ones are counted in
    // its summary and each named in a warning (its comm escaped), ten at
    // most; merge --strict fails on them.
    #[test]
    fn not_recorded_processes_are_counted_and_named() {
        use crate::rewrite::coverage::{Coverage, NotRecorded};
        let n = |pid| NotRecorded {
            pid,
            comm: b"x\x1b[2Jy".to_vec(),
            coverage: Coverage {
                covered: 1,
                sampled: 16,
            },
        };
        let mut report = MergeReport {
            not_recorded: vec![n(41)],
            ..Default::default()
        };
        let lines = merge(&report, Duration::ZERO, "out");
        assert!(
            lines[0].contains("; not the recorded process: 1;"),
            "{}",
            lines[0]
        );
        let warn = lines.iter().find(|l| l.contains("pid 41")).unwrap();
        assert!(
            warn.starts_with("mmap2-synth: warning: pid 41 (x\\x1b[2Jy) is not the recorded process: 1 of 16 sampled")
                && warn.contains("another pid namespace")
                && warn.contains("pid reused"),
            "{warn}"
        );
        report.not_recorded = (0..12).map(n).collect();
        let lines = merge(&report, Duration::ZERO, "out");
        assert_eq!(lines.iter().filter(|l| l.contains(" (x")).count(), 10);
        assert!(lines.iter().any(|l| l.contains("2 more processes")));
        assert_eq!(
            strict_not_recorded(true, 2),
            Err(StrictFailure::NotRecorded(2))
        );
        assert!(strict_not_recorded(false, 2).is_ok() && strict_not_recorded(true, 0).is_ok());
    }

    // --strict fails only when enabled and something was skipped (a pid
    // that did not exist only if named); skips get a line each.
    #[test]
    fn strict_and_skip_lines() {
        let s = vec![Skip {
            pid: 7,
            reason: SkipReason::Denied,
            detail: "EACCES".into(),
        }];
        assert_eq!(strict(true, &s, false), Err(StrictFailure::Skipped(1)));
        assert_eq!(strict_lost(true, 2), Err(StrictFailure::Lost(2)));
        assert!(strict_lost(false, 2).is_ok() && strict_lost(true, 0).is_ok());
        assert!(strict(false, &s, true).is_ok() && strict(true, &[], true).is_ok());
        // a pid that did not exist fails only when the user named it
        let gone = [Skip {
            pid: 8,
            reason: SkipReason::NotFound,
            detail: "ENOENT".into(),
        }];
        assert!(strict(true, &gone, false).is_ok());
        assert_eq!(strict(true, &gone, true), Err(StrictFailure::Skipped(1)));
        assert_eq!(
            skip_lines(&s),
            vec!["mmap2-synth: skipped pid 7 (denied): EACCES"]
        );
        let lines = snapshot(&Stats::default(), &s, Duration::ZERO, "x");
        assert!(
            lines[0].contains("skipped: none; source: none;"),
            "{}",
            lines[0]
        );
        assert_eq!(lines.len(), 2);
    }
}
