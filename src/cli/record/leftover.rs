//! The private directories `record`s killed by SIGKILL left beside `-o`
//! (see [`super::landing`]: `.mmap2-synth-record-PID-XXXXXX`, mode 0700,
//! holding a second name of perf's file), removed by the next `record`
//! writing in the same directory.
//!
//! That directory may be anyone's to write in, so a name is only a hint.
//! One is removed only when it is ours beyond doubt
//! ([`mmap2_synth::output::stale`]): of our naming, not our own, its pid
//! running no `mmap2-synth`, a directory (opened without following a
//! link) of our owner, mode 0700, its lock free, holding nothing but what
//! `record` makes there (perf's file with another name elsewhere, that
//! name's spare, a merge's temporary file: ours, regular, unlinked with
//! `*at` calls under the directory held, never followed, nothing recursed
//! into), in a directory whose names no other user can swap. A directory
//! whose recording `record` left on purpose (it said where) is kept, and
//! so is one in use. Anything else is left as it is and said, once.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use mmap2_synth::output::stale::{may_run_us, names_stay, pid_in, temporary_pid, LISTED_AT_MOST};
use mmap2_synth::sys::{self, Status};

/// What every private directory's name begins with; the pid, a `-` and
/// tempfile's random letters follow.
pub(super) const PREFIX: &str = ".mmap2-synth-record-";
/// perf's file in the private directory.
pub(super) const PERF_FILE: &str = "perf.data";
/// The second name made there before it is renamed over `-o`.
pub(super) const LINK: &str = "link";
/// Made in a private directory whose recording `record` left there and
/// said so: a later `record` keeps it.
pub(super) const KEPT: &str = "kept";

/// The pid in a private directory's name `.mmap2-synth-record-PID-XXXXXX`
/// (the random part 1 to 16 letters and digits); None for any other name.
fn pid_of(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX.as_bytes())?;
    let dash = rest.iter().position(|&c| c == b'-')?;
    let random = &rest[dash + 1..];
    if !(1..=16).contains(&random.len()) || !random.iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    pid_in(&rest[..dash])
}

/// Whether `name` is a merge's temporary file as [`mmap2_synth::output`]
/// names one: `.m2s-PID-N.tmp`.
fn is_temporary(name: &[u8]) -> bool {
    temporary_pid(name).is_some()
}

/// The files of a private directory: their names and what they are.
type Files = Vec<(Vec<u8>, Status)>;

/// What became of one directory of our naming.
enum Verdict {
    /// Removed.
    Removed,
    /// In use, its recording left on purpose, or another user's (anyone
    /// may plant names: saying so at every `record` would be their noise):
    /// kept, silently.
    Kept,
    /// Not ours beyond doubt: left, and why.
    Left(String),
}

/// Removes, from `dir` (`-o`'s directory, held; `shown` for messages),
/// the private directories killed `record`s left (see the module's doc),
/// all but our own `own`; says once which look-alikes it left.
pub(super) fn remove_stale(dir: &File, shown: &Path, own: &OsStr) {
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
        return;
    };
    let stay = names_stay(dir.as_fd());
    let mut left = Vec::new();
    // bounded like the sweep of temporary files: a directory of planted
    // names must not delay perf's start
    for entry in entries.take(LISTED_AT_MOST).flatten() {
        let name = entry.file_name();
        let Some(pid) = pid_of(name.as_bytes()) else {
            continue;
        };
        if name == own || (pid != std::process::id() && may_run_us(pid)) {
            continue;
        }
        if let Verdict::Left(why) = judge(dir, name.as_bytes(), stay) {
            left.push(format!(
                "{} ({why})",
                mmap2_synth::text::escape(name.as_bytes())
            ));
        }
    }
    if !left.is_empty() {
        // one line, however many a user planted
        let more = match left.len() {
            n @ 11.. => format!(" and {} more", n - 10),
            _ => String::new(),
        };
        left.truncate(10);
        eprintln!(
            "mmap2-synth record: left in {}, named as record's own but not beyond doubt \
             stale ones of ours: {}{more}",
            mmap2_synth::text::escape_path(shown),
            left.join(", ")
        );
    }
}

/// Removes the directory `name` of `dir` if it is a stale one of ours
/// (`stay`: whether `dir`'s names stay as found).
fn judge(dir: &File, name: &[u8], stay: bool) -> Verdict {
    let me = sys::effective_uid();
    // something mounted there (a user's FUSE mount would hang us) is not
    // ours
    match sys::is_mount_root_at(dir.as_fd(), name) {
        Ok(false) => {}
        Ok(true) => return Verdict::Left("a mount point".into()),
        Err(e) => return Verdict::Left(e.to_string()),
    }
    let d = match sys::open_dir_at(dir.as_fd(), name) {
        Ok(d) => d,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return Verdict::Left("not a directory".into());
        }
        Err(e) => return Verdict::Left(e.to_string()),
    };
    let st = match sys::status_of(d.as_fd()) {
        Ok(st) => st,
        Err(e) => return Verdict::Left(e.to_string()),
    };
    if st.uid != me {
        return Verdict::Kept;
    }
    if st.mode != 0o700 {
        return Verdict::Left(format!("mode {:04o}, not 0700", st.mode));
    }
    match sys::try_lock_exclusive(&d) {
        Ok(true) => {}
        // a record of another PID namespace is using it
        Ok(false) => return Verdict::Kept,
        Err(e) => return Verdict::Left(format!("cannot lock it: {e}")),
    }
    let files = match contents(&d, me) {
        Ok(Some(files)) => files,
        Ok(None) => return Verdict::Kept,
        Err(why) => return Verdict::Left(why),
    };
    if !stay {
        return Verdict::Left("other users can rename names beside it".into());
    }
    for (file, _) in &files {
        if let Err(e) = sys::unlink_at(d.as_fd(), file) {
            return Verdict::Left(format!("removing {}: {e}", mmap2_synth::text::escape(file)));
        }
    }
    // still the directory looked into (its name cannot be swapped: `stay`)
    match sys::identity_at(dir.as_fd(), name) {
        Ok(id) if id == st.id => match sys::rmdir_at(dir.as_fd(), name) {
            Ok(()) => Verdict::Removed,
            Err(e) => Verdict::Left(e.to_string()),
        },
        _ => Verdict::Left("renamed meanwhile".into()),
    }
}

/// The files in the private directory `d` (held and locked), each what
/// `record` makes there: an error saying what else is there; None when
/// `record` left it on purpose ([`KEPT`]). perf's file must have a name
/// outside it (at `-o`, or where `-o` was moved): this one is otherwise
/// the only copy of a recording (`record` killed before it linked it).
fn contents(d: &File, me: u32) -> Result<Option<Files>, String> {
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", d.as_raw_fd()))
        .map_err(|e| format!("reading it: {e}"))?;
    let mut files = Vec::new();
    for entry in entries {
        let name = entry.map_err(|e| format!("reading it: {e}"))?.file_name();
        let name = name.as_bytes().to_vec();
        if name == KEPT.as_bytes() {
            return Ok(None);
        }
        let shown = || mmap2_synth::text::escape(&name);
        let st = sys::status_at(d.as_fd(), &name).map_err(|e| format!("{}: {e}", shown()))?;
        let known = [PERF_FILE.as_bytes(), LINK.as_bytes()].contains(&name.as_slice())
            || is_temporary(&name);
        if !known || st.kind != libc::S_IFREG || st.uid != me {
            return Err(format!("it holds {}, not record's", shown()));
        }
        files.push((name, st));
    }
    for (name, st) in &files {
        let here = files.iter().filter(|(_, s)| s.id == st.id).count() as u64;
        if !is_temporary(name) && st.nlink <= here {
            return Err("it holds perf's only copy of a recording".into());
        }
    }
    Ok(Some(files))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only names of our naming give a pid, and only a merge's temporary
    // names are taken for one.
    #[test]
    fn names_of_our_naming() {
        assert_eq!(pid_of(b".mmap2-synth-record-123-aB3xYz"), Some(123));
        for other in [
            &b".mmap2-synth-record-123-"[..],
            b".mmap2-synth-record--abcdef",
            b".mmap2-synth-record-12a-abcdef",
            b".mmap2-synth-record-123-ab.def",
            b"mmap2-synth-record-123-abcdef",
            b".mmap2-synth-record-99999999999-abcdef",
        ] {
            assert_eq!(pid_of(other), None, "{}", String::from_utf8_lossy(other));
        }
        assert!(is_temporary(b".m2s-12-0.tmp"));
        for other in [
            &b".m2s-12-.tmp"[..],
            b".m2s-12.tmp",
            b"m2s-1-2.tmp",
            b".m2s-1-2.tmpx",
        ] {
            assert!(!is_temporary(other), "{}", String::from_utf8_lossy(other));
        }
    }

    // A stale directory of ours goes (perf's file also at -o, a merge's
    // temporary file); one holding anything else, perf's only copy of a
    // recording, or the mark of a recording left on purpose, stays whole.
    #[test]
    fn what_is_removed_and_what_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let parent = File::open(tmp.path()).unwrap();
        let make = |name: &str, files: &[&str]| {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .unwrap();
            for f in files {
                std::fs::write(d.join(f), b"x").unwrap();
            }
            d
        };
        let stale = make(".mmap2-synth-record-1-gone01", &[".m2s-1-0.tmp"]);
        std::fs::write(stale.join(PERF_FILE), b"rec").unwrap();
        std::fs::hard_link(stale.join(PERF_FILE), tmp.path().join("out.data")).unwrap();
        let only = make(".mmap2-synth-record-1-only01", &[PERF_FILE]);
        let kept = make(".mmap2-synth-record-1-kept01", &[KEPT]);
        let other = make(".mmap2-synth-record-1-othr01", &["notes"]);
        let d = |p: &Path| p.file_name().unwrap().as_bytes().to_vec();
        assert!(matches!(judge(&parent, &d(&stale), true), Verdict::Removed));
        assert!(!stale.exists());
        assert!(matches!(judge(&parent, &d(&only), true), Verdict::Left(_)));
        assert!(matches!(judge(&parent, &d(&kept), true), Verdict::Kept));
        assert!(matches!(judge(&parent, &d(&other), true), Verdict::Left(_)));
        assert!(only.join(PERF_FILE).exists() && kept.join(KEPT).exists());
        assert!(other.join("notes").exists());
        // where names may be swapped, nothing is removed by name
        let again = make(".mmap2-synth-record-1-agan01", &[]);
        assert!(matches!(
            judge(&parent, &d(&again), false),
            Verdict::Left(_)
        ));
        assert!(again.exists());
    }
}
