//! `archive`: the binaries live processes map, copied into perf's build-id
//! cache layout (what `perf buildid-cache` writes), from the mapped files
//! themselves (`/proc/PID/map_files`), so deleted and replaced binaries are
//! archived as they ran; plus this kernel's vDSO image and, where kernel
//! addresses are readable, its kallsyms. perf 6.1's layout:
//! `DIR/PATH/BUILDID/elf` (`[vdso]/ID/vdso`, `[kernel.kallsyms]/ID/kallsyms`)
//! and `DIR/.build-id/xx/rest-of-id`, a symlink to `../../PATH/BUILDID`.
//! Use it with `perf --buildid-dir DIR report`.
//!
//! May import: `model`, `proc`, `perf`, `snapshot`, `sys`.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::model::{BuildId, Process, Vma, VDSO_NAME};
use crate::proc::buildid::{
    kernel_build_id, open_mapped_file, read_build_id_from_file, vdso_image,
};
use crate::proc::kernel::KERNEL_DSO;
use crate::proc::{self, ScanError, Skip, Target};
use crate::sys::{create_at, dir_at, exists_at, rename_at, symlink_at, unlink_at};

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
    /// Maps whose mapped file is not the one the scan or record says
    /// (another id, device or inode).
    pub mismatched: usize,
    /// Files skipped for their size (over [`MAX_FILE`], or sparse).
    pub too_large: usize,
    /// Entries that could not be written (a symlink in the way, a name too
    /// long), and the first messages.
    pub failed: usize,
    pub failures: Vec<String>,
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
/// `[kernel.kallsyms]`) with `id` goes, as path components under the cache
/// directory: the entry's directory, the `.build-id/xx` directory, the
/// link's name there and the link's target. None for a name that is not a
/// clean absolute path (`.`/`..` or empty components, NUL) nor one of
/// perf's bracketed names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// PATH components, then the id in hex.
    pub dir: Vec<Vec<u8>>,
    /// `.build-id`, then the id's first two hex digits.
    pub link_dir: [Vec<u8>; 2],
    /// The rest of the id's hex digits.
    pub link_name: Vec<u8>,
    /// `../../PATH/ID`.
    pub target: Vec<u8>,
}

impl CacheEntry {
    /// The archived file under `root`: `PATH/ID/` then `elf`, or `vdso` and
    /// `kallsyms` for those names (what `perf --buildid-dir` reads), and
    /// the same through the `.build-id` link.
    pub fn files(&self, root: &Path, name: &[u8]) -> [PathBuf; 2] {
        let leaf = cache_leaf(name);
        let dir: PathBuf = self.dir.iter().map(|c| OsStr::from_bytes(c)).collect();
        let link: PathBuf = self
            .link_dir
            .iter()
            .chain([&self.link_name])
            .map(|c| OsStr::from_bytes(c))
            .collect();
        [root.join(dir).join(leaf), root.join(link).join(leaf)]
    }
}

/// The file name an entry's directory holds for `name`.
pub fn cache_leaf(name: &[u8]) -> &'static str {
    match name {
        n if n == VDSO_NAME => "vdso",
        n if n == KERNEL_DSO => "kallsyms",
        _ => "elf",
    }
}

/// See [`CacheEntry`].
pub fn cache_entry(name: &[u8], id: &BuildId) -> Option<CacheEntry> {
    let hex = id.to_hex();
    let mut dir: Vec<Vec<u8>> = if name == VDSO_NAME || name == KERNEL_DSO {
        vec![name.to_vec()]
    } else {
        let rest = name.strip_prefix(b"/")?;
        let parts: Vec<Vec<u8>> = rest.split(|&c| c == b'/').map(<[u8]>::to_vec).collect();
        let clean = parts
            .iter()
            .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.contains(&0));
        if !clean {
            return None;
        }
        parts
    };
    dir.push(hex.as_bytes().to_vec());
    let mut target = b"../..".to_vec();
    for c in &dir {
        target.push(b'/');
        target.extend_from_slice(c);
    }
    Some(CacheEntry {
        dir,
        link_dir: [b".build-id".to_vec(), hex.as_bytes()[..2].to_vec()],
        link_name: hex.as_bytes()[2..].to_vec(),
        target,
    })
}

/// Most bytes of one archived file: bigger (or sparse) files are skipped
/// and counted, so no mapping can fill the disk.
pub const MAX_FILE: u64 = 4 << 30;

/// Walks (creating) `parts` below the cache directory `root`, never through
/// a symlink: a component an attacker made a symlink stops the walk.
fn walk_dirs(root: &File, parts: &[Vec<u8>]) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    let mut fd = root.as_fd().try_clone_to_owned()?;
    for c in parts {
        fd = dir_at(fd.as_fd(), c)?;
    }
    Ok(fd)
}

/// Adds one entry: the bytes `copy` writes, as `file` in the entry's
/// directory (a temporary file renamed into place, mode 0644 as perf's
/// cache keeps readable files), and its `.build-id` link (made again if it
/// was lost). Every step is relative to a directory descriptor reached
/// without following symlinks, so nothing is written outside the cache.
/// Ok(false) when the cache had the file.
fn add_entry(
    root: &File,
    e: &CacheEntry,
    file: &str,
    copy: impl FnOnce(&mut File) -> io::Result<u64>,
    report: &mut ArchiveReport,
) -> io::Result<bool> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;
    let dir = walk_dirs(root, &e.dir)?;
    let added = if exists_at(dir.as_fd(), file.as_bytes()) {
        report.present += 1;
        false
    } else {
        let tmp = format!(".m2s-{}.tmp", std::process::id());
        let mut out = create_at(dir.as_fd(), tmp.as_bytes(), 0o600)?;
        let done = copy(&mut out)
            .and_then(|n| {
                out.set_permissions(std::fs::Permissions::from_mode(0o644))?;
                Ok(n)
            })
            .and_then(|n| rename_at(dir.as_fd(), tmp.as_bytes(), file.as_bytes()).map(|()| n));
        match done {
            Ok(n) => {
                report.added += 1;
                report.bytes += n;
                true
            }
            Err(err) => {
                let _ = unlink_at(dir.as_fd(), tmp.as_bytes());
                return Err(err);
            }
        }
    };
    let links = walk_dirs(root, &e.link_dir)?;
    if !exists_at(links.as_fd(), &e.link_name) {
        symlink_at(&e.target, links.as_fd(), &e.link_name)?;
    }
    Ok(added)
}

/// Counts a failed entry, keeping the first few messages for the summary.
fn failed(report: &mut ArchiveReport, what: &[u8], err: &io::Error) {
    report.failed += 1;
    if report.failures.len() < 3 {
        report
            .failures
            .push(format!("{}: {err}", String::from_utf8_lossy(what)));
    }
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
    std::fs::create_dir_all(&opts.dir).map_err(|source| ArchiveError::Io {
        op: "creating",
        path: opts.dir.clone(),
        source,
    })?;
    let root = File::open(&opts.dir).map_err(|source| ArchiveError::Io {
        op: "opening",
        path: opts.dir.clone(),
        source,
    })?;
    let processes = match &from {
        Some(input) => crate::snapshot::read_snapshot(input)?,
        None => {
            let snap = proc::snapshot(&opts.target, &scan)?;
            report.skipped = snap.skipped;
            snap.processes
        }
    };
    report.processes = processes.len();
    let mut done: HashSet<BuildId> = HashSet::new();
    for p in &processes {
        archive_process(opts, &root, p, &mut done, &mut report);
    }
    if let Some((id, image)) = vdso_image() {
        if let Some(entry) = cache_entry(VDSO_NAME, &id) {
            let copy =
                |out: &mut File| io::Write::write_all(out, &image).map(|()| image.len() as u64);
            match add_entry(&root, &entry, cache_leaf(VDSO_NAME), copy, &mut report) {
                Ok(_) => report.vdso = true,
                Err(e) => failed(&mut report, VDSO_NAME, &e),
            }
        }
    }
    if opts.kernel {
        report.kernel_missing = archive_kernel(opts, &root, &mut report).err();
    }
    Ok(report)
}

/// Archives the mapped files of one process (read live, or named by the
/// `--from` file and found in the live process's mappings). A file that
/// cannot be archived is counted and skipped; the run goes on.
fn archive_process(
    opts: &ArchiveOptions,
    root: &File,
    p: &Process,
    done: &mut HashSet<BuildId>,
    report: &mut ArchiveReport,
) {
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
        let Some(id) = mapped_id(&f, vma, report) else {
            continue;
        };
        if done.contains(&id) {
            continue;
        }
        let size = f.metadata().map_or(u64::MAX, |m| m.len());
        let sparse = f.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.len() > 64 << 20 && m.blocks() * 512 < m.len() / 2
        });
        if size > MAX_FILE || sparse {
            report.too_large += 1;
            continue;
        }
        let Some(entry) = cache_entry(file_name(vma), &id) else {
            report.unreadable += 1;
            continue;
        };
        match add_entry(
            root,
            &entry,
            cache_leaf(file_name(vma)),
            |out| io::copy(&mut f, out),
            report,
        ) {
            Ok(_) => {
                done.insert(id);
            }
            Err(e) => failed(report, file_name(vma), &e),
        }
    }
}

/// The id of the open mapped file `f`, read from the file itself: it must
/// be the scan's (or the record's) id, and for an inode-form record the
/// file must be the recorded device and inode; else counted, None.
fn mapped_id(f: &File, vma: &Vma, report: &mut ArchiveReport) -> Option<BuildId> {
    use std::os::unix::fs::MetadataExt;
    if let (Some(k), Ok(m)) = (vma.file_key(), f.metadata()) {
        let dev = (libc::major(m.dev()), libc::minor(m.dev()));
        if m.ino() != k.inode || dev != (k.dev_major, k.dev_minor) {
            report.mismatched += 1;
            return None;
        }
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
fn archive_kernel(
    opts: &ArchiveOptions,
    root: &File,
    report: &mut ArchiveReport,
) -> Result<bool, String> {
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
    let copy =
        |out: &mut File| io::Write::write_all(out, &kallsyms).map(|()| kallsyms.len() as u64);
    add_entry(root, &entry, cache_leaf(KERNEL_DSO), copy, report).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Entries, links and file names as perf lays them out; unclean names have none.
    #[test]
    fn cache_layout() {
        let id = BuildId::new(&[0xab, 0xcd, 0xef, 0x01]).unwrap();
        let e = cache_entry(b"/usr/lib/libx.so", &id).unwrap();
        let parts: Vec<&[u8]> = e.dir.iter().map(Vec::as_slice).collect();
        assert_eq!(parts, [&b"usr"[..], b"lib", b"libx.so", b"abcdef01"]);
        assert_eq!(e.link_dir, [b".build-id".to_vec(), b"ab".to_vec()]);
        assert_eq!(e.link_name, b"cdef01");
        assert_eq!(e.target, b"../../usr/lib/libx.so/abcdef01");
        let root = Path::new("/c");
        assert_eq!(
            e.files(root, b"/usr/lib/libx.so"),
            [
                PathBuf::from("/c/usr/lib/libx.so/abcdef01/elf"),
                PathBuf::from("/c/.build-id/ab/cdef01/elf")
            ]
        );
        let e = cache_entry(b"[vdso]", &id).unwrap();
        assert_eq!(e.target, b"../../[vdso]/abcdef01");
        assert_eq!(
            e.files(root, b"[vdso]")[0],
            PathBuf::from("/c/[vdso]/abcdef01/vdso")
        );
        let k = cache_entry(KERNEL_DSO, &id).unwrap();
        assert_eq!(
            k.files(root, KERNEL_DSO)[0],
            PathBuf::from("/c/[kernel.kallsyms]/abcdef01/kallsyms")
        );
        for bad in [
            &b"relative/x"[..],
            b"/a/../b",
            b"/a/./b",
            b"/a//b",
            b"/",
            b"[heap]",
        ] {
            assert!(cache_entry(bad, &id).is_none(), "{bad:?}");
        }
    }
}
