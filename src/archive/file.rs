//! One mapped file into the cache: proven the scan's or the record's file
//! through a live process's mapping of it ([`prove`]), then copied under
//! the id read from the file itself. A `--from` file is tried at each of
//! its places until one proves it; what failed is counted only when none
//! does.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::entry::{copy_file, Root};
use super::from::Mapped;
use super::{add_counted, cache_entry, ArchiveReport, MAX_FILE};
use crate::model::{BuildId, Vma};
use crate::proc::buildid::{open_mapped_file, read_build_id_from_file};

/// Why a map did not prove its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unproven {
    /// Not opened (its process gone, access denied, the file replaced).
    Unreadable,
    /// Its record names no id, device or inode, and its process does not
    /// map that path's file at its address now.
    Unidentified,
    /// Its mapping holds another file than recorded (id, device or inode).
    Mismatched,
}

impl Unproven {
    /// Counts `maps` maps failed this way.
    fn count(self, report: &mut ArchiveReport, maps: usize) {
        match self {
            Unproven::Unreadable => report.unreadable += maps,
            Unproven::Unidentified => report.unidentified += maps,
            Unproven::Mismatched => report.mismatched += maps,
        }
    }
}

/// The cache name of a VMA's file: its path without the kernel's
/// " (deleted)" mark.
fn file_name(vma: &Vma) -> &[u8] {
    vma.name.strip_suffix(b" (deleted)").unwrap_or(&vma.name)
}

/// Archives the file of one map of a live process (`pdir`, its /proc
/// directory) read by the scan: one with a build id. A file that cannot be
/// archived is counted and skipped; the run goes on.
pub(super) fn archive_vma(
    root: &mut Root,
    pdir: &Path,
    vma: &Vma,
    done: &mut HashSet<BuildId>,
    report: &mut ArchiveReport,
) {
    let Some(want) = vma.build_id else {
        return;
    };
    if vma.name.first() != Some(&b'/') || done.contains(&want) {
        return;
    }
    match prove(pdir, vma) {
        Ok(Some((f, id))) => store(root, vma, f, id, done, report),
        Ok(None) => {}
        Err(why) => why.count(report, 1),
    }
}

/// Archives a file a `--from` file names, through the live mapping at its
/// first place that proves it (at most one per place, none after that).
/// When none does, each place's maps are counted as that place failed (a
/// process found gone is not opened again); once one does, what becomes
/// of the file counts for all of its maps.
pub(super) fn archive_recorded(
    proc_root: &Path,
    root: &mut Root,
    file: &Mapped,
    done: &mut HashSet<BuildId>,
    report: &mut ArchiveReport,
) {
    let first = &file.vma;
    if first.name.first() != Some(&b'/') || first.build_id.is_some_and(|id| done.contains(&id)) {
        return;
    }
    let mut failed = Vec::new();
    let mut gone = None;
    for p in &file.places {
        let vma = file.at(p);
        let pdir = proc_root.join(p.pid.to_string());
        let proof = match gone == Some(p.pid) {
            true => Err(not_opened(&vma)),
            false => prove(&pdir, &vma),
        };
        match proof {
            Ok(Some((f, id))) => {
                let before = Failures::of(report);
                store(root, &vma, f, id, done, report);
                // its other maps would fail the same way
                before.repeat(report, file.maps() - 1);
                return;
            }
            // the file has no id: nothing to archive
            Ok(None) => return,
            Err(why) => {
                if why != Unproven::Mismatched && std::fs::symlink_metadata(&pdir).is_err() {
                    gone = Some(p.pid);
                }
                failed.push((why, p.maps));
            }
        }
    }
    for (why, maps) in failed {
        why.count(report, maps);
    }
}

/// Why a map whose file could not be opened did not prove it.
fn not_opened(vma: &Vma) -> Unproven {
    match vma.file_key().is_none() && vma.build_id.is_none() {
        // nothing but a live mapping there could have told its file
        true => Unproven::Unidentified,
        false => Unproven::Unreadable,
    }
}

/// The file a live process (`pdir`) maps at the VMA's place, opened, and
/// its build id read from it: it must be the VMA's (scan's or record's)
/// id, and for an inode-form record the file must be the recorded device
/// and inode. `Ok(None)` for the VMA's file without an id.
fn prove(pdir: &Path, vma: &Vma) -> Result<Option<(File, BuildId)>, Unproven> {
    let f = open_mapped_file(pdir, vma).ok_or_else(|| not_opened(vma))?;
    if let (Some(k), Ok(m)) = (vma.file_key(), f.metadata()) {
        let dev = (libc::major(m.dev()), libc::minor(m.dev()));
        if m.ino() != k.inode || dev != (k.dev_major, k.dev_minor) {
            return Err(Unproven::Mismatched);
        }
    }
    let got = read_build_id_from_file(&f)
        .ok()
        .flatten()
        .and_then(|b| BuildId::new(&b));
    match got {
        Some(got) if vma.build_id.is_some_and(|want| want != got) => Err(Unproven::Mismatched),
        Some(got) => Ok(Some((f, got))),
        None => Ok(None),
    }
}

/// Copies the proven open file `f` of `vma` into the cache under `id`
/// (unless done already), counting what became of it.
fn store(
    root: &mut Root,
    vma: &Vma,
    mut f: File,
    id: BuildId,
    done: &mut HashSet<BuildId>,
    report: &mut ArchiveReport,
) {
    if done.contains(&id) {
        return;
    }
    let Ok(meta) = f.metadata() else {
        report.unreadable += 1;
        return;
    };
    let size = meta.len();
    // holes and unwritten (`fallocate`d) extents alike hold no data
    let sparse = size > 64 << 20 && crate::sys::data_bytes(&f, &meta) < size / 2;
    if size > MAX_FILE || sparse {
        report.too_large += 1;
        return;
    }
    let Some(entry) = cache_entry(file_name(vma), &id) else {
        report.bad_names += 1;
        if report.bad_name_examples.len() < 3 {
            report.bad_name_examples.push(file_name(vma).to_vec());
        }
        return;
    };
    // no more readable than its source (its owner may still read it); the
    // copy's group is not the source's, so its group may read it only when
    // everyone may
    let src = meta.mode();
    let group = if src & 0o004 != 0 { 0o040 } else { 0 };
    let mode = 0o400 | (src & 0o604) | (src & group);
    let copy = |out: &mut File| {
        // (tests: the temporary file is made, the size checked)
        crate::testhook::hold("MMAP2_SYNTH_TEST_HOLD_ARCHIVE_COPY");
        // only what was checked, should the file grow meanwhile
        copy_file(&mut f, out, size)
    };
    if add_counted(root, (&entry, file_name(vma), mode), copy, report) {
        done.insert(id);
    }
}

/// The failure counts of a report, before an entry is tried.
struct Failures {
    unreadable: usize,
    mismatched: usize,
    unidentified: usize,
    too_large: usize,
    failed: usize,
    messages: usize,
}

impl Failures {
    fn of(r: &ArchiveReport) -> Failures {
        Failures {
            unreadable: r.unreadable,
            mismatched: r.mismatched,
            unidentified: r.unidentified,
            too_large: r.too_large,
            failed: r.failed,
            messages: r.failures.len(),
        }
    }

    /// Counts what failed since `self` `times` more, as if tried again
    /// (the same file fails the same way; one archived is not tried
    /// again, and counts nothing).
    fn repeat(&self, r: &mut ArchiveReport, times: usize) {
        r.unreadable += (r.unreadable - self.unreadable) * times;
        r.mismatched += (r.mismatched - self.mismatched) * times;
        r.unidentified += (r.unidentified - self.unidentified) * times;
        r.too_large += (r.too_large - self.too_large) * times;
        r.failed += (r.failed - self.failed) * times;
        if r.failures.len() > self.messages {
            let last = r.failures.last().cloned().unwrap_or_default();
            let more = times.min(3usize.saturating_sub(r.failures.len()));
            r.failures.extend(std::iter::repeat_n(last, more));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What failed for a file's first map is counted once per map of it
    // (its message kept at most three times); one archived counts nothing.
    #[test]
    fn a_failed_file_counts_once_per_map() {
        let mut r = ArchiveReport {
            unreadable: 2,
            ..Default::default()
        };
        let before = Failures::of(&r);
        r.failed += 1;
        r.failures.push("x: full".into());
        before.repeat(&mut r, 4);
        assert_eq!((r.failed, r.unreadable), (5, 2));
        assert_eq!(r.failures, ["x: full"; 3]);
        let before = Failures::of(&r);
        r.added += 1;
        before.repeat(&mut r, 9);
        assert_eq!((r.failed, r.added, r.failures.len()), (5, 1, 3));
    }
}
