//! What `perf record`'s arguments say: where it writes and what it
//! records, read as perf's own option parser reads them (which options take
//! a value, glued or not, clusters, abbreviations, negation).

use std::path::PathBuf;

use mmap2_synth::proc::Target;

use super::buildid::BuildIdArgs;
use crate::cli::error::CliError;

/// What `perf record`'s arguments say: where it writes and what it records.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PerfTarget {
    pub(crate) output: PathBuf,
    /// None: a workload (perf's child).
    pub(crate) target: Option<Target>,
    /// Where perf's options end in its arguments (the index of a lone
    /// `--`, of the workload's first word, or their count): an option
    /// record adds after the user's goes there, and so overrides theirs.
    pub(crate) options_end: usize,
    /// perf's build-id options, for record's part of perf's cache.
    pub(crate) buildid: BuildIdArgs,
    /// perf samples data addresses (its `sample_address`: `-d/--data`, or
    /// `--call-graph dwarf[,SIZE]`, in order, `--no-data` clearing it), so
    /// it asks for data maps (`mmap_data`) and would synthesize them: the
    /// snapshot reads them for the merge to insert.
    pub(crate) data_maps: bool,
    /// `--all-cgroups` and `--namespaces`: side-band records of the
    /// processes that ran before perf, which it synthesizes (see
    /// [`PerfTarget::synth`]).
    pub(crate) cgroups: bool,
    pub(crate) namespaces: bool,
    /// `-t`'s threads, when they are what perf records (no `-a`, no `-p`).
    pub(crate) tids: Option<Vec<u32>>,
}

/// Whether a perf record option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    Nothing,
    /// The next word when not glued (`-o F`, `-oF`, `--output=F`).
    Value,
    /// Only glued (`-z3`, `--aio=2`): the next word is never it.
    Optional,
}

/// perf record 6.1's options (`perf record -h` and `--list-opts`): short
/// name, long name ("" for none), and whether a value follows.
/// `--pfm-events` is only in perf built with libpfm.
const PERF_RECORD_OPTIONS: &[(Option<char>, &str, Takes)] = {
    use Takes::{Nothing as N, Optional as O, Value as V};
    &[
        (Some('a'), "all-cpus", N),
        (Some('b'), "branch-any", N),
        (Some('B'), "no-buildid", N),
        (Some('c'), "count", V),
        (Some('C'), "cpu", V),
        (Some('d'), "data", N),
        (Some('D'), "delay", V),
        (Some('e'), "event", V),
        (Some('F'), "freq", V),
        (Some('g'), "", N),
        (Some('G'), "cgroup", V),
        (Some('I'), "intr-regs", O),
        (Some('i'), "no-inherit", N),
        (Some('j'), "branch-filter", V),
        (Some('k'), "clockid", V),
        (Some('m'), "mmap-pages", V),
        (Some('N'), "no-buildid-cache", N),
        (Some('n'), "no-samples", N),
        (Some('o'), "output", V),
        (Some('P'), "period", N),
        (Some('p'), "pid", V),
        (Some('q'), "quiet", N),
        (Some('R'), "raw-samples", N),
        (Some('r'), "realtime", V),
        (Some('S'), "snapshot", O),
        (Some('s'), "stat", N),
        (Some('t'), "tid", V),
        (Some('T'), "timestamp", N),
        (Some('u'), "uid", V),
        (Some('v'), "verbose", N),
        (Some('W'), "weight", N),
        (Some('z'), "compression-level", O),
        (None, "affinity", V),
        (None, "aio", O),
        (None, "all-cgroups", N),
        (None, "all-kernel", N),
        (None, "all-user", N),
        (None, "aux-sample", O),
        (None, "buildid-all", N),
        (None, "buildid-mmap", N),
        (None, "call-graph", V),
        (None, "clang-opt", V),
        (None, "clang-path", V),
        (None, "code-page-size", N),
        (None, "control", V),
        (None, "data-page-size", N),
        (None, "debuginfod", O),
        (None, "dry-run", N),
        (None, "exclude-perf", N),
        (None, "filter", V),
        (None, "group", N),
        (None, "kcore", N),
        (None, "kernel-callchains", N),
        (None, "max-size", V),
        (None, "mmap-flush", V),
        (None, "namespaces", N),
        (None, "no-bpf-event", N),
        (None, "no-buffering", N),
        (None, "num-thread-synthesize", V),
        (None, "off-cpu", N),
        (None, "overwrite", N),
        (None, "per-thread", N),
        (None, "pfm-events", V),
        (None, "phys-data", N),
        (None, "proc-map-timeout", V),
        (None, "running-time", N),
        (None, "sample-cpu", N),
        (None, "sample-identifier", N),
        (None, "strict-freq", N),
        (None, "switch-events", N),
        (None, "switch-max-files", V),
        (None, "switch-output", O),
        (None, "switch-output-event", V),
        (None, "synth", V),
        (None, "tail-synthesize", N),
        (None, "threads", O),
        (None, "timestamp-boundary", N),
        (None, "timestamp-filename", N),
        (None, "transaction", N),
        (None, "user-callchains", N),
        (None, "user-regs", O),
        (None, "vmlinux", V),
    ]
};

/// The options `perf record -h` lists (its usage text on stderr): short
/// name, long name ("" for none) and what each takes, read from the
/// option lines (indented at most 8 spaces, starting with `-`): `<arg>`
/// after the name is a value, `[=<arg>]` an optional glued one.
fn help_options(help: &str) -> Vec<(Option<char>, String, Takes)> {
    let takes_of = |rest: &str| {
        if rest.starts_with("[=") || rest.starts_with('[') {
            Takes::Optional
        } else if rest.trim_start().starts_with('<') || rest.starts_with("=<") {
            Takes::Value
        } else {
            Takes::Nothing
        }
    };
    let mut out = Vec::new();
    for line in help.lines() {
        let spec = line.trim_start_matches(' ');
        if line.len() - spec.len() > 8 || !spec.starts_with('-') {
            continue;
        }
        // the spec ends where the description starts (two spaces) or at
        // the end of the line
        let spec = spec.split("  ").next().unwrap_or_default();
        let (short, rest) = match spec.strip_prefix('-') {
            Some(r) if !r.starts_with('-') => {
                let mut chars = r.chars();
                let c = chars.next();
                let rest = chars.as_str();
                (c, rest.strip_prefix(", ").unwrap_or(rest))
            }
            _ => (None, spec),
        };
        match rest.strip_prefix("--") {
            Some(l) => {
                let end = l.find([' ', '[', '=', '<']).unwrap_or(l.len());
                out.push((short, l[..end].to_string(), takes_of(&l[end..])));
            }
            None => out.push((short, String::new(), takes_of(rest))),
        }
    }
    out
}

/// What an option this table does not know takes, by what `help` (perf
/// record -h of the perf that will run) says: a newer perf's option with a
/// separate value must not have its value taken for the workload. `long`:
/// the name as typed (exact, or the one option it abbreviates, `no-`
/// negations taking nothing); else the short option `short`.
fn learned_takes(help: &str, long: Option<&str>, short: Option<char>) -> Option<Takes> {
    let opts = help_options(help);
    match long {
        Some(name) => {
            if let Some(o) = opts.iter().find(|o| o.1 == name) {
                return Some(o.2);
            }
            if let Some(n) = name.strip_prefix("no-") {
                if opts.iter().any(|o| o.1 == n) {
                    return Some(Takes::Nothing);
                }
            }
            let mut abbreviated = opts
                .iter()
                .filter(|o| !o.1.is_empty() && o.1.starts_with(name));
            match (abbreviated.next(), abbreviated.next()) {
                (Some(o), None) => Some(o.2),
                _ => None,
            }
        }
        None => opts.iter().find(|o| o.0 == short).map(|o| o.2),
    }
}

/// One option of perf record's command line, as perf's parse-options reads
/// it: its long name ("" for `-g`, which has none), its value, and
/// whether it was negated (`--no-output`: back to the default).
#[derive(Debug, PartialEq, Eq)]
struct PerfOption<'a> {
    long: &'static str,
    value: Option<&'a str>,
    negated: bool,
}

/// The long option `name` (what is before any `=`) stands for, as perf's
/// parse-options matches it: exactly, else as the one option it
/// abbreviates; `no-NAME` negates (as does `NAME` for an option named
/// `no-NAME`), and a negated option takes no value. Returns the option's
/// long name, what it takes and whether it is negated; None when unknown or
/// ambiguous (perf refuses it).
fn long_option(name: &str) -> Option<(&'static str, Takes, bool)> {
    // (what is typed, the option, what it takes, negated)
    let mut forms = Vec::new();
    for &(_, long, takes) in PERF_RECORD_OPTIONS.iter().filter(|o| !o.1.is_empty()) {
        forms.push((long.to_string(), long, takes, false));
        forms.push((format!("no-{long}"), long, Takes::Nothing, true));
        if let Some(l) = long.strip_prefix("no-") {
            forms.push((l.to_string(), long, Takes::Nothing, true));
        }
    }
    let found = |f: &(String, &'static str, Takes, bool)| (f.1, f.2, f.3);
    if let Some(f) = forms.iter().find(|f| f.0 == name) {
        return Some(found(f));
    }
    let mut abbreviated = forms.iter().filter(|f| f.0.starts_with(name));
    match (abbreviated.next(), abbreviated.next()) {
        (Some(f), None) => Some(found(f)),
        _ => None,
    }
}

/// perf record's options in `args`, read as perf reads them: up to a lone
/// `--` or the first word that is not an option (the workload); `--name`,
/// `--name=value` and abbreviations of long names; clusters of short ones
/// (`-ag`), whose first option that takes a value takes the rest of the
/// word (`-F999`, `-gecycles`) or, when none is left and the value is not
/// optional, the next word. An option 6.1 did not have is looked up in
/// `help()` (the running perf's `perf record -h`, asked at most once): a
/// separate value it takes is skipped; unknown there too, it is skipped
/// alone (perf refuses it). Also returns where the options end (see
/// [`PerfTarget::options_end`]).
fn perf_options<'a>(
    args: &'a [String],
    help: &mut dyn FnMut() -> String,
) -> Result<(Vec<PerfOption<'a>>, usize), CliError> {
    let mut text: Option<String> = None;
    let mut learned = |long: Option<&str>, short: Option<char>| {
        let t = text.get_or_insert_with(&mut *help);
        learned_takes(t, long, short)
    };
    fn next<'a>(
        what: &str,
        words: &mut impl Iterator<Item = &'a str>,
    ) -> Result<&'a str, CliError> {
        words
            .next()
            .ok_or_else(|| CliError::Usage(format!("record: perf's {what} needs a value")))
    }
    let mut out = Vec::new();
    let mut words = args.iter().map(String::as_str);
    let mut end = args.len();
    while let Some(a) = words.next() {
        if a == "--" || a == "-" || !a.starts_with('-') {
            // (the word just taken is not an option)
            end = args.len() - words.len() - 1;
            break;
        }
        if let Some(l) = a.strip_prefix("--") {
            let (name, glued) = match l.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (l, None),
            };
            let Some((long, takes, negated)) = long_option(name) else {
                if glued.is_none() && learned(Some(name), None) == Some(Takes::Value) {
                    next(a, &mut words)?;
                }
                continue;
            };
            let value = match (takes, glued) {
                (Takes::Nothing, _) => None,
                (Takes::Value, None) => Some(next(a, &mut words)?),
                (_, glued) => glued,
            };
            out.push(PerfOption {
                long,
                value,
                negated,
            });
            continue;
        }
        for (at, c) in a.char_indices().skip(1) {
            let Some(&(_, long, takes)) = PERF_RECORD_OPTIONS.iter().find(|o| o.0 == Some(c))
            else {
                let glued = a.len() > at + c.len_utf8();
                if !glued && learned(None, Some(c)) == Some(Takes::Value) {
                    next(&format!("-{c}"), &mut words)?;
                }
                break;
            };
            let rest = &a[at + c.len_utf8()..];
            let value = match takes {
                Takes::Nothing => None,
                _ if !rest.is_empty() => Some(rest),
                Takes::Value => Some(next(&format!("-{c}"), &mut words)?),
                Takes::Optional => None,
            };
            out.push(PerfOption {
                long,
                value,
                negated: false,
            });
            if takes != Takes::Nothing {
                break;
            }
        }
    }
    Ok((out, end))
}

/// Reads where perf writes (`-o/--output`) and what it records out of
/// `perf record`'s arguments: `-a/--all-cpus` every process; else
/// `-p/--pid` those; else, for `-C/--cpu`, `-t/--tid` or `-u/--uid`, every
/// process too (the merge takes only those the recording has); else the
/// workload. As in perf, the last of an option counts. Without `-o`, perf
/// writes a stream to its stdout when that is a pipe (`stdout_is_pipe`).
pub(crate) fn perf_target(args: &[String], stdout_is_pipe: bool) -> Result<PerfTarget, CliError> {
    perf_target_with(args, stdout_is_pipe, &mut running_perf_help)
}

/// `perf record -h` of the perf on the PATH (its usage goes to stderr);
/// empty when it cannot run (then options 6.1 did not have stay unknown).
fn running_perf_help() -> String {
    std::process::Command::new("perf")
        .args(["record", "-h"])
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default()
}

/// Why `record` refuses perf option `long` (any form), if it does: the
/// options it sets itself, which a second copy would silently override
/// (perf takes the last), and `--threads`, with which perf writes a
/// directory, which `merge` reads only once it is whole.
fn owned_by_record(long: &str) -> Option<&'static str> {
    match long {
        "control" => Some(
            "record drives perf through its own control FIFO (perf keeps only the last \
             --control: record could not enable the events, and would kill perf after 30 s)",
        ),
        "delay" => Some(
            "record starts perf with its events off (-D -1) and enables them once it is \
             ready; a delay of perf's own would replace that",
        ),
        "synth" => Some(
            "record runs perf without its synthesis of running processes (it inserts their \
             COMM and maps itself, with build ids, and asks perf only for the CGROUP or \
             NAMESPACES records `--all-cgroups`/`--namespaces` need): perf's own would \
             write every map twice; use `perf record` for perf's synthesis",
        ),
        "threads" => Some(
            "perf then writes a directory of files, not a perf.data record can merge into \
             as it runs; record with `perf record --synth=no --threads -o DIR` and run \
             `mmap2-synth merge DIR -o FILE` (a live merge, or `--maps SNAP` of a snapshot \
             taken at the start) afterwards",
        ),
        _ => None,
    }
}

/// [`perf_target`] with `help` standing for `perf record -h`.
fn perf_target_with(
    args: &[String],
    stdout_is_pipe: bool,
    help: &mut dyn FnMut() -> String,
) -> Result<PerfTarget, CliError> {
    let (mut output, mut all, mut pid) = (None, false, None);
    let (mut cpu, mut tid, mut uid) = (None, None, None);
    let (mut buildid, mut data_maps) = (BuildIdArgs::default(), false);
    let (mut cgroups, mut namespaces) = (false, false);
    let (options, options_end) = perf_options(args, help)?;
    for o in options {
        let v = if o.negated { None } else { o.value };
        if o.long.starts_with("switch-output") || o.long == "timestamp-filename" {
            // perf renames its output (at every switch and) at exit: there
            // is no file left under -o to merge into. (perf 6.1 crashes on
            // the negated forms: refused too.)
            return Err(CliError::Usage(format!(
                "record: --{} makes perf rename its output to timestamped files; record \
                 with `perf record --synth=no`, snapshot with `mmap2-synth --all -o SNAP`, \
                 and `mmap2-synth merge FILE --maps SNAP` each file",
                o.long
            )));
        }
        if let Some(why) = owned_by_record(o.long) {
            return Err(CliError::Usage(format!("record: --{}: {why}", o.long)));
        }
        if buildid.take(o.long, o.negated) {
            continue;
        }
        match o.long {
            "output" => output = v,
            "all-cpus" => all = !o.negated,
            "pid" => pid = v,
            "cpu" => cpu = v,
            "tid" => tid = v,
            "uid" => uid = v,
            "data" => data_maps = !o.negated,
            "all-cgroups" => cgroups = !o.negated,
            "namespaces" => namespaces = !o.negated,
            // (perf's parse_callchain_record: the mode is the first word, exactly)
            "call-graph" => data_maps |= v.is_some_and(|v| v.split(',').next() == Some("dwarf")),
            _ => {}
        }
    }
    let output = match output {
        Some(o) => PathBuf::from(o),
        None if stdout_is_pipe => {
            return Err(CliError::Usage(
                "record: perf's output must be a file (without -o it writes a stream to \
                 stdout, a pipe here, which cannot be merged into): give -o FILE"
                    .into(),
            ));
        }
        None => PathBuf::from("perf.data"),
    };
    if output.as_os_str() == "-" {
        return Err(CliError::Usage(
            "record: perf's output must be a file (-o -, a stream, cannot be merged into)".into(),
        ));
    }
    let ids = |list: &str, what: &str| -> Result<Vec<u32>, CliError> {
        let id = |p: &str| p.trim().parse().ok();
        let bad = |p: &str| CliError::Usage(format!("record: bad {what} {p}"));
        list.split(',')
            .map(|p| id(p).ok_or_else(|| bad(p)))
            .collect()
    };
    let target = match (all, pid) {
        (true, _) => Some(Target::All),
        (false, Some(pids)) => Some(Target::Pids(ids(pids, "pid")?)),
        (false, None) if cpu.or(tid).or(uid).is_some() => Some(Target::All),
        (false, None) => None,
    };
    // -t decides what perf records when neither -a nor -p does
    let tids = match (all, pid, tid) {
        (false, None, Some(t)) => Some(ids(t, "tid")?),
        _ => None,
    };
    Ok(PerfTarget {
        output,
        target,
        options_end,
        buildid,
        data_maps,
        cgroups,
        namespaces,
        tids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// perf 6.1's `perf record -h`, as captured.
    const HELP_6_1: &str = include_str!("../../../fixtures/perf-help/record-6.1.txt");

    fn target(v: &[&str]) -> Result<PerfTarget, CliError> {
        let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        perf_target_with(&args, false, &mut || HELP_6_1.to_string()).map(unplaced)
    }

    /// `t` without where its options end, nor `-t`'s threads, to compare
    /// with [`pt`]'s.
    fn unplaced(t: PerfTarget) -> PerfTarget {
        PerfTarget {
            options_end: 0,
            tids: None,
            ..t
        }
    }

    // The help parser reads perf 6.1's own usage text as the table has it:
    // every option there with the same short name and what it takes.
    #[test]
    fn help_of_6_1_agrees_with_the_table() {
        let help = help_options(HELP_6_1);
        assert!(
            help.len() >= PERF_RECORD_OPTIONS.len() - 1,
            "{} options read",
            help.len()
        );
        for &(short, long, takes) in PERF_RECORD_OPTIONS {
            let found = help.iter().find(|o| match long {
                "" => o.0 == short && o.1.is_empty(),
                _ => o.1 == long,
            });
            let Some(found) = found else {
                assert_eq!(long, "pfm-events", "{long} missing from the help");
                continue;
            };
            assert_eq!((found.0, found.2), (short, takes), "--{long}");
        }
    }

    // Options a newer perf added are learned from its help: a separate
    // value is not taken for the workload, so -a after it is still read;
    // glued values and unknown-everywhere options stay one word.
    #[test]
    fn newer_options_learned_from_help() {
        let newer = format!(
            "{HELP_6_1}        --setup-filter <pin|unpin>\n                          BPF filter\n        \
             --off-cpu-thresh <ms>\n    -X, --xnew <n>        a new short one\n"
        );
        let t = |v: &[&str]| {
            let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            unplaced(perf_target_with(&args, false, &mut || newer.clone()).unwrap())
        };
        assert_eq!(
            t(&["--setup-filter", "pin", "-a", "-o", "F"]),
            pt("F", Some(Target::All))
        );
        assert_eq!(
            t(&["--off-cpu-thresh", "5", "-a"]),
            pt("perf.data", Some(Target::All))
        );
        assert_eq!(
            t(&["--setup-f", "pin", "-a"]),
            pt("perf.data", Some(Target::All))
        );
        assert_eq!(t(&["-X", "3", "-a"]), pt("perf.data", Some(Target::All)));
        assert_eq!(
            t(&["--setup-filter=pin", "-a"]),
            pt("perf.data", Some(Target::All))
        );
        // unknown to the help too: skipped alone (perf refuses it)
        assert_eq!(t(&["--bogus", "prog", "-a"]), pt("perf.data", None));
        // and a refused option after a learned one is still seen
        let args: Vec<String> = ["--setup-filter", "pin", "--switch-output", "-a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(perf_target_with(&args, false, &mut || newer.clone()).is_err());
    }

    // The help is asked for only when an option 6.1 did not have appears.
    #[test]
    fn help_asked_only_when_needed() {
        let mut asked = 0;
        let args: Vec<String> = ["-a", "-g", "-o", "F", "prog"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        perf_target_with(&args, false, &mut || {
            asked += 1;
            String::new()
        })
        .unwrap();
        assert_eq!(asked, 0);
    }

    // The perf on this machine lists the options the table has, taking
    // the same (a newer perf in CI would show here first).
    #[test]
    #[ignore = "needs perf"]
    fn running_perf_help_agrees_with_the_table() {
        let help = help_options(&running_perf_help());
        for &(short, long, takes) in PERF_RECORD_OPTIONS {
            if long == "pfm-events" {
                continue;
            }
            let found = help.iter().find(|o| match long {
                "" => o.0 == short && o.1.is_empty(),
                _ => o.1 == long,
            });
            let found = found.unwrap_or_else(|| panic!("--{long} not in perf record -h"));
            assert_eq!((found.0, found.2), (short, takes), "--{long}");
        }
    }

    fn pt(output: &str, target: Option<Target>) -> PerfTarget {
        PerfTarget {
            output: output.into(),
            target,
            options_end: 0,
            buildid: BuildIdArgs::default(),
            data_maps: false,
            cgroups: false,
            namespaces: false,
            tids: None,
        }
    }

    // perf synthesizes what the options ask that record does not insert:
    // CGROUP records for --all-cgroups, task (and so NAMESPACES) records
    // for --namespaces of -p/-t/-u/-a/-C; nothing else, negations and
    // abbreviations read.
    #[test]
    fn synth_as_the_options_ask() {
        let placed = |v: &[&str]| {
            let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            perf_target_with(&args, false, &mut || HELP_6_1.to_string()).unwrap()
        };
        let synth = |v: &[&str]| placed(v).synth();
        assert_eq!(synth(&["-a", "-g"]), "no");
        assert_eq!(synth(&["--all-cgroups", "-a"]), "cgroup");
        assert_eq!(synth(&["--all-cg", "-a"]), "cgroup");
        assert_eq!(synth(&["--namespaces", "-p", "1"]), "task");
        assert_eq!(synth(&["--namespaces", "-t", "1"]), "task");
        assert_eq!(
            synth(&["--namespaces", "-u", "0", "--all-cgroups"]),
            "task,cgroup"
        );
        // a workload's are perf's own
        assert_eq!(synth(&["--namespaces", "--all-cgroups", "x"]), "cgroup");
        assert_eq!(synth(&["--namespaces", "-a"]), "task");
        assert_eq!(synth(&["--namespaces", "-C", "0"]), "task");
        assert_eq!(synth(&["-C", "0"]), "no");
        assert_eq!(synth(&["--all-cgroups", "--no-all-cgroups", "x"]), "no");
        assert_eq!(synth(&["--namespaces", "--no-namespaces", "-p", "1"]), "no");
    }

    // perf asks for data maps as its sample_address says: -d (in a
    // cluster too) and --call-graph dwarf[,SIZE] turn it on, in order,
    // --no-data off; fp, lbr and -g leave it.
    #[test]
    fn data_maps_as_perf_samples_addresses() {
        let data = |v: &[&str]| target(v).unwrap().data_maps;
        assert!(data(&["-d", "-p", "1"]));
        assert!(data(&["-gd", "-p", "1"]));
        assert!(data(&["--data", "prog"]));
        assert!(data(&["--call-graph", "dwarf", "prog"]));
        assert!(data(&["--call-graph=dwarf,8192", "prog"]));
        assert!(data(&["--call", "dwarf", "prog"]));
        assert!(data(&["--no-data", "--call-graph", "dwarf", "prog"]));
        assert!(!data(&["--call-graph", "dwarf", "--no-data", "prog"]));
        assert!(!data(&["-d", "--no-data", "prog"]));
        assert!(!data(&["-g", "prog"]));
        assert!(!data(&["--call-graph", "fp", "prog"]));
        assert!(!data(&["--call-graph=lbr", "prog"]));
        assert!(!data(&["--call-graph", "dwarfish", "prog"]));
        assert!(!data(&["prog", "-d"]), "the workload's -d");
    }

    // Where perf's options end (record's own -o goes there, after the
    // user's): at a lone `--` or `-`, at the workload's first word (after
    // the values options take, glued or not), or after the last word.
    #[test]
    fn where_the_options_end() {
        let end = |v: &[&str]| {
            let args: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            perf_target_with(&args, false, &mut || HELP_6_1.to_string())
                .unwrap()
                .options_end
        };
        assert_eq!(end(&["-g", "-p", "12", "-o", "x", "--", "sleep", "1"]), 5);
        assert_eq!(end(&["-a", "-o", "F"]), 3);
        assert_eq!(end(&[]), 0);
        assert_eq!(end(&["-e", "cpu-clock", "prog", "-o", "F"]), 2);
        assert_eq!(end(&["-go", "F", "prog"]), 2);
        assert_eq!(end(&["-z", "prog"]), 1);
        assert_eq!(end(&["-oF", "-", "x"]), 1);
        assert_eq!(end(&["-o", "--", "prog"]), 2);
    }

    // --switch-output and --timestamp-filename (any form, abbreviated or
    // negated) are refused up front: perf would leave no file under -o to
    // merge into; as a workload's argument or another option's value they
    // are not.
    #[test]
    fn switch_output_refused() {
        for args in [
            &["--switch-output", "-a"][..],
            &["--switch-output=1s", "-a"],
            &["--switch-output-event", "syscalls:sys_enter_getpid", "-a"],
            &["--timestamp-filename", "-a"],
            &["--timestamp-f", "-a"],
            &["--no-switch-output", "-a"],
        ] {
            let Err(e) = target(args) else {
                panic!("{args:?} not refused")
            };
            assert!(e.to_string().contains("timestamped files"), "{args:?}: {e}");
        }
        assert!(target(&["-a", "--", "prog", "--switch-output"]).is_ok());
        assert!(target(&["-o", "--switch-output", "prog"]).is_ok());
    }

    // The options record sets itself (--control, -D/--delay, --synth) and
    // --threads (perf writes a directory) are refused in every form; a workload's
    // own flags of those names are not.
    #[test]
    fn options_record_owns_refused() {
        for (args, name) in [
            (&["--control", "fifo:c1", "-a"][..], "--control"),
            (&["--control=fd:3", "-a"], "--control"),
            (&["-D", "100", "-a"], "--delay"),
            (&["-D100", "-a"], "--delay"),
            (&["--delay=-1", "-a"], "--delay"),
            (&["--threads", "-a"], "--threads"),
            (&["--threads=cpu", "-a"], "--threads"),
            (&["-ga", "--thread", "--", "true"], "--threads"),
            (&["--synth=all", "-a"], "--synth"),
            (&["--synth", "no", "-a"], "--synth"),
        ] {
            match target(args) {
                Err(CliError::Usage(m)) => assert!(m.contains(name), "{args:?}: {m}"),
                other => panic!("{args:?} not refused: {other:?}"),
            }
        }
        assert!(target(&[
            "-a",
            "--",
            "prog",
            "--control",
            "-D",
            "1",
            "--threads",
            "--synth"
        ])
        .is_ok());
    }

    // perf record's -o, -a and -p are read; the workload's own flags are not.
    #[test]
    fn perf_targets() {
        let t = target(&["-g", "-p", "12,13", "-o", "x.data", "--", "sleep", "1"]).unwrap();
        assert_eq!(t, pt("x.data", Some(Target::Pids(vec![12, 13]))));
        let t = target(&["-a", "--output=y"]).unwrap();
        assert_eq!(t, pt("y", Some(Target::All)));
        let t = target(&["-g", "./prog", "-o", "not-perfs"]).unwrap();
        assert_eq!(t, pt("perf.data", None));
        assert!(target(&["-o", "-"]).is_err());
        assert!(target(&["-p", "x"]).is_err());
        // without -o, perf streams into a piped stdout
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(perf_target(&args(&["-a", "--", "prog"]), true).is_err());
        let t = unplaced(perf_target(&args(&["-a", "-o", "F", "--", "prog"]), true).unwrap());
        assert_eq!(t, pt("F", Some(Target::All)));
    }

    // The values of perf's options are not taken for the workload (issue:
    // `-a -e dummy -o F` took "dummy" for it), in every form perf accepts.
    #[test]
    fn option_values_are_skipped() {
        let ok = |v: &[&str]| target(v).unwrap();
        assert_eq!(
            ok(&["-a", "-e", "dummy", "-o", "F", "--", "prog"]),
            pt("F", Some(Target::All))
        );
        assert_eq!(
            ok(&["-e", "cpu-clock", "-F", "999", "-g", "-o", "OUT", "--", "w"]),
            pt("OUT", None)
        );
        // every option that takes a separate value, then -o (`--synth` too,
        // but record refuses it: `options_record_owns_refused`)
        for (short, long) in [
            ("-c", "--count"),
            ("-C", "--cpu"),
            ("-e", "--event"),
            ("-F", "--freq"),
            ("-G", "--cgroup"),
            ("-j", "--branch-filter"),
            ("-k", "--clockid"),
            ("-m", "--mmap-pages"),
            ("-r", "--realtime"),
            ("-t", "--tid"),
            ("-u", "--uid"),
            ("", "--affinity"),
            ("", "--call-graph"),
            ("", "--clang-opt"),
            ("", "--clang-path"),
            ("", "--filter"),
            ("", "--max-size"),
            ("", "--mmap-flush"),
            ("", "--num-thread-synthesize"),
            ("", "--proc-map-timeout"),
            ("", "--switch-max-files"),
            ("", "--vmlinux"),
        ] {
            for opt in [short, long].into_iter().filter(|o| !o.is_empty()) {
                let t = ok(&[opt, "1", "-o", "F", "prog", "-o", "G"]);
                assert_eq!(t.output, PathBuf::from("F"), "{opt}");
            }
        }
        // glued values: -ecycles, -F999, -oOUT, --event=x, a cluster (-gaF99)
        assert_eq!(ok(&["-ecycles", "-F999", "-oOUT", "prog"]), pt("OUT", None));
        assert_eq!(
            ok(&["--event=dummy", "--output=O", "-gaF99", "prog"]),
            pt("O", Some(Target::All))
        );
        // -go F: the cluster's -o takes the next word
        assert_eq!(ok(&["-go", "F", "prog"]), pt("F", None));
        // -o's value may look like an option, or be --
        assert_eq!(ok(&["-o", "-a", "prog"]), pt("-a", None));
        assert_eq!(ok(&["-o", "--", "prog"]), pt("--", None));
    }

    // Options whose value is optional take it only glued: the next word is
    // the workload (or the next option).
    #[test]
    fn optional_values_are_only_glued() {
        let ok = |v: &[&str]| target(v).unwrap();
        for opt in [
            "-z",
            "--compression-level",
            "-S",
            "--snapshot",
            "-I",
            "--intr-regs",
            "--user-regs",
            "--aio",
            "--aux-sample",
            "--debuginfod",
        ] {
            assert_eq!(ok(&[opt, "-o", "F", "prog"]), pt("F", None), "{opt}");
            assert_eq!(
                ok(&[opt, "prog", "-o", "F"]),
                pt("perf.data", None),
                "{opt}"
            );
        }
        assert_eq!(ok(&["-z3", "--aio=2", "-o", "F"]), pt("F", None));
        // -zo: o is -z's level, not -o
        assert_eq!(ok(&["-zo", "F"]), pt("perf.data", None));
        // options without a value (-g, -b, --exclude-perf) take none
        assert_eq!(
            ok(&["-b", "-g", "--exclude-perf", "prog", "-o", "F"]),
            pt("perf.data", None)
        );
    }

    // -p as --pid=1,2 or glued, --pid abbreviated, the last -p counts, and
    // --no-output / --no-pid go back to perf's defaults; a lone `-` is the
    // workload's first word.
    #[test]
    fn perf_option_forms() {
        let ok = |v: &[&str]| target(v).unwrap();
        let pids = |p: &[u32]| Some(Target::Pids(p.to_vec()));
        assert_eq!(ok(&["--pid=1,2"]), pt("perf.data", pids(&[1, 2])));
        assert_eq!(ok(&["-p7", "-o", "F"]), pt("F", pids(&[7])));
        assert_eq!(ok(&["-p", "1", "-p", "2"]), pt("perf.data", pids(&[2])));
        assert_eq!(ok(&["--pi", "3", "--out", "F"]), pt("F", pids(&[3])));
        assert_eq!(ok(&["--out=F", "--no-output"]), pt("perf.data", None));
        assert_eq!(ok(&["-p", "4", "--no-pid", "prog"]), pt("perf.data", None));
        assert_eq!(ok(&["-p", "4", "-a"]), pt("perf.data", Some(Target::All)));
        assert_eq!(ok(&["-", "-o", "F"]), pt("perf.data", None));
        // an option named no-X is negated by --X (no value either)
        let negated = BuildIdArgs {
            no_buildid: Some(false),
            ..BuildIdArgs::default()
        };
        let t = ok(&["--buildid", "prog", "-o", "F"]);
        assert_eq!(
            t,
            PerfTarget {
                buildid: negated,
                ..pt("perf.data", None)
            }
        );
        // ambiguous (--s: stat, synth, ...) or unknown: no value taken
        assert_eq!(ok(&["--s", "-o", "F"]), pt("F", None));
        assert_eq!(ok(&["--bogus", "-o", "F"]), pt("F", None));
        // -C, -t and -u record other processes than the workload: all are
        // snapshotted (the merge takes the recording's)
        for opt in ["-C", "-t", "-u", "--cpu=0"] {
            let t = ok(&[opt, "0", "--", "prog"]);
            assert_eq!(t.target, Some(Target::All), "{opt}");
        }
        // a value missing at the end
        for v in [&["-o"][..], &["-ga", "-e"], &["--output"], &["-gp"]] {
            assert!(matches!(target(v), Err(CliError::Usage(_))), "{v:?}");
        }
    }

    // perf's build-id options are read for record's cache: -N and -B in
    // clusters, long forms abbreviated and negated, the last counting.
    #[test]
    fn build_id_options() {
        let b = |v: &[&str]| target(v).unwrap().buildid;
        let args = |no_buildid, no_cache, all, mmap| BuildIdArgs {
            no_buildid,
            no_cache,
            all,
            mmap,
        };
        assert_eq!(b(&["-p", "1"]), BuildIdArgs::default());
        assert_eq!(b(&["-gN", "-p", "1"]), args(None, Some(true), None, None));
        assert_eq!(b(&["-NB"]), args(Some(true), Some(true), None, None));
        assert_eq!(
            b(&[
                "-N",
                "--buildid-cache",
                "--buildid-a",
                "--buildid-mmap",
                "--",
                "-B"
            ]),
            args(None, Some(false), Some(true), Some(true))
        );
        assert_eq!(
            b(&["--no-buildid-all"]),
            args(None, None, Some(false), None)
        );
    }
}
