//! `archive`: the binaries live processes map, copied into perf's build-id
//! cache layout (what `perf buildid-cache` writes), from the mapped files
//! themselves (`/proc/PID/map_files`), so deleted and replaced binaries are
//! archived as they ran; plus this kernel's vDSO image and, where kernel
//! addresses are readable, its kallsyms. perf 6.1's layout:
//! `DIR/PATH/BUILDID/elf` (`[vdso]/ID/vdso`, `[kernel.kallsyms]/ID/kallsyms`)
//! and `DIR/.build-id/xx/rest-of-id`, a symlink to `../../PATH/BUILDID`.
//! Use it with `perf --buildid-dir DIR report`.
//! [`hit_files`] and [`cache_hits`] are `record`'s part of perf's own cache:
//! the files of the maps it inserted that samples hit.
//!
//! May import: `bytes`, `model`, `output`, `proc`, `perf`, `snapshot`,
//! `sys`, `testhook`.

mod entry;
mod file;
mod from;
mod hits;

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use entry::{add_entry, write_bytes, Added, EntryError, Root};
pub use entry::{cache_entry, cache_leaf, CacheEntry};
pub use hits::{cache_hits, hit_files, HitFiles, MAX_PLACES};

use crate::model::{BuildId, VDSO_NAME};
use crate::proc::buildid::{kernel_build_id, vdso_image};
use crate::proc::kernel::KERNEL_DSO;
use crate::proc::{self, ScanError, Skip, Target};

/// What to archive, and where.
#[derive(Debug, Clone)]
pub struct ArchiveOptions {
    /// The cache directory (created if missing).
    pub dir: PathBuf,
    /// Which processes.
    pub target: Target,
    /// How to read them (build ids are always read).
    pub scan: proc::Options,
    /// Also the kernel's kallsyms.
    pub kernel: bool,
    /// Take the maps from this snapshot or recording instead of reading the
    /// target's (the files still come from the live processes' mappings).
    pub from: Option<PathBuf>,
}

/// What an archive run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Processes read.
    pub processes: usize,
    /// Files copied into the cache.
    pub added: usize,
    /// Bytes copied.
    pub bytes: u64,
    /// Ids the cache had already.
    pub present: usize,
    /// Mapped files with an id that could not be opened or read (gone,
    /// denied, a read error while copying).
    pub unreadable: usize,
    /// Maps whose mapped file is not the one the scan or record says
    /// (another id, device or inode).
    pub mismatched: usize,
    /// `--from` maps whose record names no build id, device or inode (MMAP
    /// v1 records, MMAP2 with inode 0) and whose process does not map that
    /// path's file at the record's address now: no file is known to be
    /// theirs.
    pub unidentified: usize,
    /// Files skipped for their size (over [`MAX_FILE`], or sparse).
    pub too_large: usize,
    /// Mapped files whose name no cache path can hold (`.`, `..` or empty
    /// components, a NUL: a memfd named `x/../../etc` would leave the
    /// cache), and the first few names as recorded.
    pub bad_names: usize,
    pub bad_name_examples: Vec<Vec<u8>>,
    /// Entries that could not be written (a full disk, a symlink in the
    /// way, a name too long), and the first messages (`PATH: cause`, PATH
    /// the cache file or link not written). Any makes the run an error
    /// ([`ArchiveReport::written`]).
    pub failed: usize,
    pub failures: Vec<String>,
    /// Processes skipped while reading them.
    pub skipped: Vec<Skip>,
    /// What became of this kernel's vDSO image.
    pub vdso: Vdso,
    /// Why the kernel's kallsyms was not archived (None: it was, or the
    /// cache had it).
    pub kernel_missing: Option<String>,
}

/// What became of this kernel's vDSO image.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Vdso {
    /// Archived, or the cache had it.
    Archived,
    /// No vDSO here, or no build id in it.
    #[default]
    NotFound,
    /// Found, but writing it into the cache failed (counted in `failed`).
    NotWritten,
}

impl ArchiveReport {
    /// Mapped files that were not archived because they could not be read
    /// or were not the recorded file: what `--strict` fails on.
    pub fn not_read(&self) -> usize {
        self.unreadable + self.mismatched + self.unidentified + self.bad_names
    }

    /// An error when some entry could not be written into the cache (the
    /// run went on with the others): naming how many and the first, with
    /// its path and cause.
    pub fn written(&self) -> Result<(), ArchiveError> {
        if self.failed == 0 {
            return Ok(());
        }
        Err(ArchiveError::NotWritten {
            count: self.failed,
            first: self.failures.first().cloned().unwrap_or_default(),
        })
    }
}

/// An archive failure.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Reading the live system failed.
    #[error("reading processes")]
    Scan(#[from] ScanError),
    /// The `--from` file is malformed or unreadable.
    #[error(transparent)]
    Input(#[from] crate::perf::InputError),
    /// Writing the cache failed.
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Entries could not be written into the cache (the others were).
    #[error("{count} cache entries not written; the first: {first}")]
    NotWritten {
        /// How many.
        count: usize,
        /// The first, as `PATH: cause`.
        first: String,
    },
}

/// Most bytes of one archived file: bigger (or sparse) files are skipped
/// and counted, so no mapping can fill the disk.
pub const MAX_FILE: u64 = 4 << 30;

/// Adds an entry ([`add_entry`]) and counts what became of it: true when
/// the cache has it now. A source that could not be read is counted
/// unreadable; an entry not written is counted failed, the first few
/// messages kept for the summary and the error.
fn add_counted(
    root: &mut Root,
    (entry, name, mode): (&CacheEntry, &[u8], u32),
    copy: impl FnOnce(&mut File) -> Result<u64, entry::CopyFailed>,
    report: &mut ArchiveReport,
) -> bool {
    let err = match add_entry(root, entry, name, mode, copy) {
        Ok(Added::Present) => {
            report.present += 1;
            return true;
        }
        Ok(Added::New(n)) => {
            report.added += 1;
            report.bytes += n;
            return true;
        }
        Err(err) => err,
    };
    match err {
        EntryError::Read => report.unreadable += 1,
        EntryError::Write(path, err) => {
            report.failed += 1;
            if report.failures.len() < 3 {
                report.failures.push(format!("{}: {err}", path.display()));
            }
        }
    }
    false
}

/// Archives the mapped files of the target's processes (see the module doc).
pub fn archive(opts: &ArchiveOptions) -> Result<ArchiveReport, ArchiveError> {
    let mut report = ArchiveReport {
        kernel_missing: Some("not asked for".into()),
        ..Default::default()
    };
    let scan = proc::Options {
        build_ids: true,
        ..opts.scan.clone()
    };
    // a missing or malformed --from creates no directory; a bad directory
    // is found before a scan of the host
    let from = match &opts.from {
        Some(path) => Some(crate::perf::Input::open(path)?),
        None => None,
    };
    // (what it made removed again should the run fail, or a signal end it)
    let mut root = Root::create(&opts.dir).map_err(|source| ArchiveError::Io {
        op: "creating",
        path: opts.dir.clone(),
        source,
    })?;
    let mut done: HashSet<BuildId> = HashSet::new();
    match &from {
        Some(input) => {
            let named = from::mapped_files(input)?;
            report.processes = named.processes;
            for f in &named.files {
                file::archive_recorded(&opts.scan.proc_root, &mut root, f, &mut done, &mut report);
            }
        }
        None => {
            let snap = proc::snapshot(&opts.target, &scan)?;
            report.skipped = snap.skipped;
            report.processes = snap.processes.len();
            for p in &snap.processes {
                let pdir = opts.scan.proc_root.join(p.pid.to_string());
                for vma in &p.vmas {
                    file::archive_vma(&mut root, &pdir, vma, &mut done, &mut report);
                }
            }
        }
    }
    archive_vdso(&mut root, &mut report, None);
    if opts.kernel {
        report.kernel_missing = archive_kernel(opts, &mut root, &mut report).err();
    }
    root.keep();
    Ok(report)
}

/// This kernel's vDSO image into the cache, when there is one with a
/// build id (and, with `want`, that id is one of those wanted).
fn archive_vdso(
    root: &mut Root,
    report: &mut ArchiveReport,
    want: Option<&HashSet<Option<BuildId>>>,
) {
    let vdso = vdso_image()
        .filter(|(id, _)| want.is_none_or(|w| w.contains(&Some(*id))))
        .and_then(|(id, image)| Some((cache_entry(VDSO_NAME, &id)?, image)));
    if let Some((entry, image)) = vdso {
        let copy = |out: &mut File| write_bytes(out, &image);
        let entry = (&entry, VDSO_NAME, 0o644);
        report.vdso = match add_counted(root, entry, copy, report) {
            true => Vdso::Archived,
            false => Vdso::NotWritten,
        };
    }
}

/// The kernel's entry: a copy of kallsyms under its build id, when its
/// addresses are readable; else why not (a failed write is counted too).
fn archive_kernel(
    opts: &ArchiveOptions,
    root: &mut Root,
    report: &mut ArchiveReport,
) -> Result<(), String> {
    let id = kernel_build_id().ok_or("no build id in /sys/kernel/notes")?;
    let kallsyms = std::fs::read(opts.scan.proc_root.join("kallsyms"))
        .map_err(|e| format!("reading kallsyms: {e}"))?;
    let hidden = kallsyms
        .split(|&c| c == b'\n')
        .take(16)
        .filter(|l| !l.is_empty())
        .all(|l| l.iter().take_while(|&&c| c != b' ').all(|&c| c == b'0'));
    if hidden {
        return Err(
            "kernel addresses are hidden from this user (kptr_restrict, CAP_SYSLOG)".into(),
        );
    }
    let entry = cache_entry(KERNEL_DSO, &id).ok_or("bad kernel name")?;
    let copy = |out: &mut File| write_bytes(out, &kallsyms);
    let mode = kallsyms_mode(&opts.scan.proc_root);
    match add_counted(root, (&entry, KERNEL_DSO, mode), copy, report) {
        true => Ok(()),
        false => Err("not written".into()),
    }
}

/// The mode of the kallsyms copy: readable by all (0644, as perf's cache
/// keeps it) only where every user reads the kernel's addresses anyway
/// (kptr_restrict 0 and perf_event_paranoid <= 1, as the kernel's
/// `kallsyms_show_value` has it); else 0600, so that the copy root makes
/// does not hand other users the addresses (and KASLR's offset) the
/// kernel hides from them.
fn kallsyms_mode(proc_root: &Path) -> u32 {
    let sysctl = |name: &str| -> Option<i64> {
        let mut text = String::new();
        let path = proc_root.join("sys/kernel").join(name);
        File::open(path)
            .and_then(|f| f.take(32).read_to_string(&mut text))
            .ok()?;
        text.trim().parse().ok()
    };
    match (sysctl("kptr_restrict"), sysctl("perf_event_paranoid")) {
        (Some(0), Some(p)) if p <= 1 => 0o644,
        _ => 0o600,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // kallsyms is archived readable by all only where every user reads the
    // addresses: kptr_restrict 0 and perf_event_paranoid <= 1; else (or
    // unreadable sysctls) for its owner only.
    #[test]
    fn kallsyms_is_private_where_the_kernel_hides_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let k = dir.path().join("sys/kernel");
        std::fs::create_dir_all(&k).unwrap();
        assert_eq!(kallsyms_mode(dir.path()), 0o600);
        for (restrict, paranoid, mode) in [
            ("0", "1", 0o644),
            ("0", "-1", 0o644),
            ("0", "2", 0o600),
            ("1", "-1", 0o600),
            ("2", "0", 0o600),
        ] {
            std::fs::write(k.join("kptr_restrict"), format!("{restrict}\n")).unwrap();
            std::fs::write(k.join("perf_event_paranoid"), format!("{paranoid}\n")).unwrap();
            assert_eq!(kallsyms_mode(dir.path()), mode, "{restrict} {paranoid}");
        }
    }
}
