//! `archive`: the binaries live processes map, copied into perf's build-id
//! cache layout (what `perf buildid-cache` writes), from the mapped files
//! themselves (`/proc/PID/map_files`), so deleted and replaced binaries are
//! archived as they ran; plus this kernel's vDSO image and, where kernel
//! addresses are readable, its kallsyms. perf 6.1's layout:
//! `DIR/PATH/BUILDID/elf` (`[vdso]/ID/vdso`, `[kernel.kallsyms]/ID/kallsyms`)
//! and `DIR/.build-id/xx/rest-of-id`, a symlink to `../../PATH/BUILDID`.
//! Use it with `perf --buildid-dir DIR report`.
//!
//! May import: `model`, `proc`, `perf`, `snapshot`, `output`.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::model::{BuildId, Process, Vma, VDSO_NAME};
use crate::output::AtomicFile;
use crate::proc::buildid::{
    kernel_build_id, open_mapped_file, read_build_id_from_file, vdso_image,
};
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
    /// Mapped files with an id that could not be opened (gone, denied).
    pub unreadable: usize,
    /// `--from`: maps whose live mapping holds another file (another id).
    pub mismatched: usize,
    /// Processes skipped while reading them.
    pub skipped: Vec<Skip>,
    /// The vDSO was archived (or present).
    pub vdso: bool,
    /// Why the kernel's kallsyms was not archived (None: it was, or the
    /// cache had it).
    pub kernel_missing: Option<String>,
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
}

/// Where a cache entry for `name` (an absolute path, or `[vdso]` /
/// `[kernel.kallsyms]`) with `id` goes under `dir`: its directory, the
/// `.build-id` link and the link's target. None for a name that is not a
/// clean absolute path (`.`/`..` components, empty components, NUL) nor
/// one of perf's bracketed names.
pub fn cache_entry(dir: &Path, name: &[u8], id: &BuildId) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let hex = id.to_hex();
    let rel: Vec<u8> = if name == VDSO_NAME || name == KERNEL_DSO {
        name.to_vec()
    } else {
        let rest = name.strip_prefix(b"/")?;
        let clean = rest
            .split(|&c| c == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.contains(&0));
        if !clean {
            return None;
        }
        rest.to_vec()
    };
    let mut entry_rel = rel.clone();
    entry_rel.push(b'/');
    entry_rel.extend_from_slice(hex.as_bytes());
    let entry = dir.join(std::ffi::OsStr::from_bytes(&entry_rel));
    let link = dir.join(".build-id").join(&hex[..2]).join(&hex[2..]);
    let mut target = b"../../".to_vec();
    target.extend_from_slice(&entry_rel);
    Some((
        entry,
        link,
        PathBuf::from(std::ffi::OsStr::from_bytes(&target)),
    ))
}

/// The cache directory, refusing a symlinked component under `dir` (the
/// cache is written as root into a directory a user may control).
fn make_dirs(dir: &Path, path: &Path) -> Result<(), ArchiveError> {
    let err = |op, p: &Path| {
        let path = p.to_path_buf();
        move |source| ArchiveError::Io { op, path, source }
    };
    std::fs::create_dir_all(path).map_err(err("creating", path))?;
    let mut p = path.to_path_buf();
    while p != dir && p.starts_with(dir) {
        let m = std::fs::symlink_metadata(&p).map_err(err("reading", &p))?;
        if m.file_type().is_symlink() {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "a symlink inside the cache");
            return Err(err("refusing", &p)(e));
        }
        p.pop();
    }
    Ok(())
}

/// Adds one entry: the bytes `copy` writes, as `file` in the entry's
/// directory (atomically), and its `.build-id` link. Ok(false) when the
/// cache has it already.
fn add_entry(
    dir: &Path,
    (entry, link, target): &(PathBuf, PathBuf, PathBuf),
    file: &str,
    copy: impl FnOnce(&mut File) -> io::Result<u64>,
    report: &mut ArchiveReport,
) -> Result<bool, ArchiveError> {
    let dest = entry.join(file);
    let err = |op, p: &Path| {
        let p = p.to_path_buf();
        move |source| ArchiveError::Io {
            op,
            path: p,
            source,
        }
    };
    if std::fs::symlink_metadata(&dest).is_ok() {
        report.present += 1;
        return Ok(false);
    }
    make_dirs(dir, entry)?;
    let mut out = AtomicFile::create(&dest).map_err(err("creating a temporary file for", &dest))?;
    let n = copy(out.file()).map_err(err("copying into", &dest))?;
    out.commit().map_err(err("writing", &dest))?;
    let link_dir = link.parent().expect("a link has a parent");
    make_dirs(dir, link_dir)?;
    if std::fs::symlink_metadata(link).is_err() {
        std::os::unix::fs::symlink(target, link).map_err(err("linking", link))?;
    }
    report.added += 1;
    report.bytes += n;
    Ok(true)
}

/// The cache name of a VMA's file: its path without the kernel's
/// " (deleted)" mark.
fn file_name(vma: &Vma) -> &[u8] {
    vma.name.strip_suffix(b" (deleted)").unwrap_or(&vma.name)
}

/// Archives the mapped files of the target's processes (see the module doc).
pub fn archive(opts: &ArchiveOptions) -> Result<ArchiveReport, ArchiveError> {
    let mut report = ArchiveReport {
        kernel_missing: Some("not asked for".into()),
        ..Default::default()
    };
    std::fs::create_dir_all(&opts.dir).map_err(|source| ArchiveError::Io {
        op: "creating",
        path: opts.dir.clone(),
        source,
    })?;
    let scan = proc::Options {
        build_ids: true,
        ..opts.scan.clone()
    };
    let processes = match &opts.from {
        Some(path) => crate::snapshot::read_snapshot(&crate::perf::Input::open(path)?)?,
        None => {
            let snap = proc::snapshot(&opts.target, &scan)?;
            report.skipped = snap.skipped;
            snap.processes
        }
    };
    report.processes = processes.len();
    let mut done: HashSet<BuildId> = HashSet::new();
    for p in &processes {
        archive_process(opts, p, &mut done, &mut report)?;
    }
    if let Some((id, image)) = vdso_image() {
        if let Some(entry) = cache_entry(&opts.dir, VDSO_NAME, &id) {
            let copy =
                |out: &mut File| io::Write::write_all(out, &image).map(|()| image.len() as u64);
            add_entry(&opts.dir, &entry, "vdso", copy, &mut report)?;
            report.vdso = true;
        }
    }
    if opts.kernel {
        report.kernel_missing = archive_kernel(opts, &mut report).err();
    }
    Ok(report)
}

/// Archives the mapped files of one process (read live, or named by the
/// `--from` file and found in the live process's mappings).
fn archive_process(
    opts: &ArchiveOptions,
    p: &Process,
    done: &mut HashSet<BuildId>,
    report: &mut ArchiveReport,
) -> Result<(), ArchiveError> {
    let pdir = opts.scan.proc_root.join(p.pid.to_string());
    for vma in p.vmas.iter().filter(|v| v.name.first() == Some(&b'/')) {
        if vma.build_id.is_some_and(|id| done.contains(&id)) {
            continue;
        }
        if opts.from.is_none() && vma.build_id.is_none() {
            continue;
        }
        let Some(mut f) = open_mapped_file(&pdir, vma) else {
            report.unreadable += 1;
            continue;
        };
        let Some(id) = mapped_id(opts, &f, vma, report) else {
            continue;
        };
        if !done.insert(id) {
            continue;
        }
        let Some(entry) = cache_entry(&opts.dir, file_name(vma), &id) else {
            report.unreadable += 1;
            continue;
        };
        add_entry(
            &opts.dir,
            &entry,
            "elf",
            |out| io::copy(&mut f, out),
            report,
        )?;
    }
    Ok(())
}

/// The id of the open mapped file `f`: the scan's; with `--from` the
/// file's own, which must be the one the record names (else counted).
fn mapped_id(
    opts: &ArchiveOptions,
    f: &File,
    vma: &Vma,
    report: &mut ArchiveReport,
) -> Option<BuildId> {
    if opts.from.is_none() {
        return vma.build_id;
    }
    let got = read_build_id_from_file(f)
        .ok()
        .flatten()
        .and_then(|b| BuildId::new(&b))?;
    if vma.build_id.is_some_and(|want| want != got) {
        report.mismatched += 1;
        return None;
    }
    Some(got)
}

/// The kernel's entry: a copy of kallsyms under its build id, when its
/// addresses are readable.
fn archive_kernel(opts: &ArchiveOptions, report: &mut ArchiveReport) -> Result<bool, String> {
    let id = kernel_build_id().ok_or("no build id in /sys/kernel/notes")?;
    let kallsyms = std::fs::read(opts.scan.proc_root.join("kallsyms"))
        .map_err(|e| format!("reading kallsyms: {e}"))?;
    let hidden = kallsyms
        .split(|&c| c == b'\n')
        .take(16)
        .filter(|l| !l.is_empty())
        .all(|l| l.iter().take_while(|&&c| c != b' ').all(|&c| c == b'0'));
    if hidden {
        return Err("kernel addresses are hidden (kptr_restrict)".into());
    }
    let entry = cache_entry(&opts.dir, KERNEL_DSO, &id).ok_or("bad kernel name")?;
    let copy =
        |out: &mut File| io::Write::write_all(out, &kallsyms).map(|()| kallsyms.len() as u64);
    add_entry(&opts.dir, &entry, "kallsyms", copy, report).map_err(|e| e.to_string())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Entries and links as perf lays them out; unclean names have none.
    #[test]
    fn cache_layout() {
        let id = BuildId::new(&[0xab, 0xcd, 0xef, 0x01]).unwrap();
        let (entry, link, target) = cache_entry(Path::new("/c"), b"/usr/lib/libx.so", &id).unwrap();
        assert_eq!(entry, Path::new("/c/usr/lib/libx.so/abcdef01"));
        assert_eq!(link, Path::new("/c/.build-id/ab/cdef01"));
        assert_eq!(target, Path::new("../../usr/lib/libx.so/abcdef01"));
        let (entry, _, target) = cache_entry(Path::new("/c"), b"[vdso]", &id).unwrap();
        assert_eq!(entry, Path::new("/c/[vdso]/abcdef01"));
        assert_eq!(target, Path::new("../../[vdso]/abcdef01"));
        for bad in [
            &b"relative/x"[..],
            b"/a/../b",
            b"/a/./b",
            b"/a//b",
            b"/",
            b"[heap]",
        ] {
            assert!(cache_entry(Path::new("/c"), bad, &id).is_none(), "{bad:?}");
        }
    }
}
