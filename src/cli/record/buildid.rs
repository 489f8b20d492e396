//! perf's build-id cache after `record`: `perf record` copies the files its
//! samples hit into the cache at its end, but with `--synth=no` it does not
//! know the maps of the processes that ran before it, so record copies the
//! files of the maps it inserted that samples hit (`archive`'s copier, from
//! the live mappings), as perf would have. Where and whether, as perf 6.1
//! decides: the cache directory is perf's `buildid.dir` (from `perf config
//! -l`, so `$PERF_CONFIG`, /etc/perfconfig and ~/.perfconfig count as perf
//! reads them), else `$HOME/.debug` (perf 6.1 ignores `$PERF_BUILDID_DIR`;
//! `perf --buildid-dir` is a perf option before `record`, which record's
//! arguments cannot carry); off with `-N/--no-buildid-cache`,
//! `-B/--no-buildid` or `--buildid-mmap` (or `record.build-id` = `no-cache`,
//! `skip` or `mmap` in perf's config, which those options override), every
//! inserted map's file with `--buildid-all`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mmap2_synth::archive::{cache_hits, hit_files, ArchiveReport, HitFiles, MAX_PLACES};
use mmap2_synth::perf::Input;

use crate::cli::error::chain;

/// perf record's build-id options as given (None: not given, perf's
/// config decides), the last of each counting, negations included.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BuildIdArgs {
    /// `-B/--no-buildid`.
    pub(crate) no_buildid: Option<bool>,
    /// `-N/--no-buildid-cache`.
    pub(crate) no_cache: Option<bool>,
    /// `--buildid-all`.
    pub(crate) all: Option<bool>,
    /// `--buildid-mmap` (perf then caches nothing).
    pub(crate) mmap: Option<bool>,
}

impl BuildIdArgs {
    /// Takes perf record option `long` (negated or not) if it is one of
    /// these; false when it is not.
    pub(crate) fn take(&mut self, long: &str, negated: bool) -> bool {
        let slot = match long {
            "no-buildid" => &mut self.no_buildid,
            "no-buildid-cache" => &mut self.no_cache,
            "buildid-all" => &mut self.all,
            "buildid-mmap" => &mut self.mmap,
            _ => return false,
        };
        *slot = Some(!negated);
        true
    }
}

/// What perf would do with its cache.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Cache the files hit (or, `all`, every inserted map's) in this
    /// directory.
    Cache { dir: PathBuf, all: bool },
    /// Leave the cache alone, for this reason.
    Off(String),
}

/// The plan for options `b` and perf's config `config` (`perf config -l`
/// lines), `home` standing for `$HOME`; perf's own order: the config
/// first, options over it.
fn plan(b: &BuildIdArgs, config: &str, home: Option<&Path>) -> Plan {
    let mut dir = None;
    let (mut no_buildid, mut no_cache, mut mmap) = (false, false, false);
    let mut from_config = None;
    for line in config.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "buildid.dir" => dir = Some(PathBuf::from(value)),
            "record.build-id" => {
                (no_buildid, no_cache, mmap) = (false, false, false);
                match value.trim() {
                    "no-cache" => no_cache = true,
                    "skip" => no_buildid = true,
                    "mmap" => mmap = true,
                    _ => {}
                }
                from_config = Some(value.trim().to_string());
            }
            _ => {}
        }
    }
    let why = |given: Option<bool>, config: bool, option: &str| match given {
        Some(true) => Some(option.to_string()),
        None if config => Some(format!(
            "record.build-id = {} in perf's config",
            from_config.as_deref().unwrap_or_default()
        )),
        _ => None,
    };
    let off = (why(b.no_cache, no_cache, "-N/--no-buildid-cache"))
        .or_else(|| why(b.no_buildid, no_buildid, "-B/--no-buildid"))
        .or_else(|| why(b.mmap, mmap, "--buildid-mmap"));
    if let Some(why) = off {
        return Plan::Off(why);
    }
    let dir = dir.unwrap_or_else(|| match home {
        Some(h) => h.join(".debug"),
        None => PathBuf::from(".debug"),
    });
    Plan::Cache {
        dir,
        all: b.all == Some(true),
    }
}

/// Most bytes of `perf config -l` read; most time it may take.
const CONFIG_MAX: u64 = 1 << 20;
const CONFIG_TIMEOUT: Duration = Duration::from_secs(5);

/// `perf config -l` of the perf on the PATH: what perf record read (empty
/// when it cannot run, or does not answer within 5 s: then killed).
fn perf_config() -> String {
    let Ok(mut child) = Command::new("perf")
        .args(["config", "-l"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return String::new();
    };
    let out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(out) = out {
            let _ = out.take(CONFIG_MAX).read_to_end(&mut text);
        }
        text
    });
    let deadline = Instant::now() + CONFIG_TIMEOUT;
    let ok = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    let text = reader.join().unwrap_or_default();
    match ok {
        true => String::from_utf8_lossy(&text).into_owned(),
        false => String::new(),
    }
}

/// What became of the cache so far: the files found, or why none.
pub(super) enum Pending {
    Found { dir: PathBuf, hits: HitFiles },
    Not(String),
}

/// Finds the files to cache in the merged `recording` (see the module
/// doc); perf's config is asked only when the options leave it open.
pub(super) fn find(b: &BuildIdArgs, recording: &Path) -> Pending {
    let off_anyway = [b.no_cache, b.no_buildid, b.mmap].contains(&Some(true));
    let config = if off_anyway {
        String::new()
    } else {
        perf_config()
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let (dir, all) = match plan(b, &config, home.as_deref()) {
        Plan::Off(why) => return Pending::Not(format!("not updated ({why})")),
        Plan::Cache { dir, all } => (dir, all),
    };
    if let Some(why) = foreign_on_path(&dir) {
        return Pending::Not(format!("not updated: {why}"));
    }
    let found = Input::open(recording).and_then(|input| hit_files(&input, all));
    match found {
        Ok(hits) => Pending::Found { dir, hits },
        Err(e) => Pending::Not(format!("not updated: {}", chain(&e))),
    }
}

/// Why the cache directory `dir` is not written: a directory on its path
/// (itself included, where it exists) owned by a user other than root and
/// us. With `$HOME` another user's (sudo keeping it, `su` without `-`),
/// perf writes there as root, where that user may have planted entries a
/// later `perf report` as root trusts; we do not.
fn foreign_on_path(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = mmap2_synth::sys::effective_uid();
    dir.ancestors().find_map(|d| {
        let uid = std::fs::symlink_metadata(d).ok()?.uid();
        (uid != 0 && uid != me).then(|| {
            format!(
                "{} is another user's (uid {uid}): root does not write a cache there",
                mmap2_synth::text::escape_path(d)
            )
        })
    })
}

/// Copies what [`find`] found into the cache; the lines saying what
/// became of it, and whether they are warnings (printed under `-q` too).
pub(super) fn fill(p: Pending, proc_root: &Path) -> (Vec<String>, bool) {
    let say = |s: String| format!("mmap2-synth record: build-id cache {s}");
    let (dir, hits) = match p {
        Pending::Found { dir, hits } => (dir, hits),
        Pending::Not(why) => {
            let warn = why.starts_with("not updated:");
            return (vec![say(why)], warn);
        }
    };
    match cache_hits(&hits, &dir, proc_root) {
        Ok(r) => {
            let mut lines = vec![cached(&r, &hits, &dir)];
            for f in &r.failures {
                lines.push(say(format!("entry not written: {f}")));
            }
            (lines, r.failed > 0)
        }
        Err(e) => (vec![say(format!("not updated: {}", chain(&e)))], true),
    }
}

/// "cached N binaries in DIR", and what was not cached, and why.
fn cached(r: &ArchiveReport, hits: &HitFiles, dir: &Path) -> String {
    let n = r.added + r.present;
    let mut line = format!(
        "mmap2-synth record: cached {n} {} in {}",
        if n == 1 { "binary" } else { "binaries" },
        dir.display()
    );
    let mut notes = Vec::new();
    if r.present > 0 {
        notes.push(format!("{} already there", r.present));
    }
    for (n, what) in [
        (r.unreadable, "unreadable (their processes gone, or denied)"),
        (r.mismatched + r.unidentified, "no longer the mapped file"),
        (r.too_large, "too large or sparse"),
        (r.failed, "not written"),
    ] {
        if n > 0 {
            notes.push(format!("{n} {what}"));
        }
    }
    if hits.places_dropped > 0 {
        notes.push(format!(
            "{} maps past the first {MAX_PLACES} not looked at",
            hits.places_dropped
        ));
    }
    if !notes.is_empty() {
        line.push_str(&format!(" ({})", notes.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(no_buildid: Option<bool>, no_cache: Option<bool>, all: Option<bool>) -> BuildIdArgs {
        BuildIdArgs {
            no_buildid,
            no_cache,
            all,
            mmap: None,
        }
    }

    // perf's order: the cache is ~/.debug unless buildid.dir says; off with
    // -N, -B, --buildid-mmap or record.build-id = no-cache/skip/mmap in
    // the config, which the options (negated too) override.
    #[test]
    fn plan_follows_perfs_options_over_its_config() {
        let home = Some(Path::new("/h"));
        let cache = |dir: &str, all| Plan::Cache {
            dir: PathBuf::from(dir),
            all,
        };
        let none = BuildIdArgs::default();
        assert_eq!(plan(&none, "", home), cache("/h/.debug", false));
        assert_eq!(plan(&none, "", None), cache(".debug", false));
        let dir = "core.x=1\nbuildid.dir=/c/d\n";
        assert_eq!(plan(&none, dir, home), cache("/c/d", false));
        let all = given(None, None, Some(true));
        assert_eq!(plan(&all, dir, home), cache("/c/d", true));
        let n = given(None, Some(true), None);
        assert_eq!(
            plan(&n, "", home),
            Plan::Off("-N/--no-buildid-cache".into())
        );
        let b = given(Some(true), None, None);
        assert_eq!(plan(&b, "", home), Plan::Off("-B/--no-buildid".into()));
        let mmap = BuildIdArgs {
            mmap: Some(true),
            ..none
        };
        assert_eq!(plan(&mmap, "", home), Plan::Off("--buildid-mmap".into()));
        for v in ["no-cache", "skip", "mmap"] {
            let cfg = format!("record.build-id={v}\n");
            let why = format!("record.build-id = {v} in perf's config");
            assert_eq!(plan(&none, &cfg, home), Plan::Off(why));
        }
        let cfg = "record.build-id=no-cache\n";
        let back = given(None, Some(false), None);
        assert_eq!(plan(&back, cfg, home), cache("/h/.debug", false));
        assert_eq!(
            plan(&none, "record.build-id=cache\n", home),
            cache("/h/.debug", false)
        );
    }

    // The options are taken with their negations; others are not theirs.
    #[test]
    fn build_id_options_are_taken_negated_too() {
        let mut b = BuildIdArgs::default();
        assert!(b.take("no-buildid-cache", false));
        assert!(b.take("buildid-all", false));
        assert!(b.take("no-buildid", true));
        assert!(!b.take("output", false));
        assert_eq!(b, given(Some(false), Some(true), Some(true)));
    }
}
