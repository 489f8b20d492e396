//! One cache entry: where it goes in perf's layout ([`cache_entry`]) and
//! how it is written, relative to directory descriptors reached without
//! following symlinks; an entry that fails takes the directories made for
//! it away again. Its temporary file and directories are listed for the
//! output module's signal cleanup while they are made.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::{BuildId, VDSO_NAME};
use crate::output::{make_temporary, settle_temporary};
use crate::proc::kernel::KERNEL_DSO;
use crate::sys::{create_at, dir_at, exists_at, rename_at, rmdir_at, symlink_at, unlink_at};

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

/// What [`add_entry`] did with the entry's file.
pub(super) enum Added {
    /// The cache had it.
    Present,
    /// Written, this many bytes.
    New(u64),
}

/// A directory made (its parent, held open, and its name).
type Made = (Arc<OwnedFd>, Vec<u8>);

/// The cache directory: held open (every entry is made relative to it)
/// and its path, for messages.
pub(super) struct Root {
    pub(super) dir: File,
    pub(super) path: PathBuf,
    /// The directories of `path` this run made, outermost first: removed
    /// again (when still empty) when dropped before [`Root::keep`], listed
    /// for a signal until then.
    made: Vec<Made>,
}

impl Root {
    /// Opens the cache directory `path`, first making it and its missing
    /// parents (mode 0755, never through a symlink).
    pub(super) fn create(path: &Path) -> io::Result<Root> {
        let mut missing = Vec::new();
        let mut base = path;
        while let (Some(name), Some(parent)) = (base.file_name(), base.parent()) {
            match std::fs::metadata(base) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                _ => break,
            }
            missing.push(name.as_bytes().to_vec());
            base = parent;
        }
        if base.as_os_str().is_empty() {
            base = Path::new(".");
        }
        let mut fd: Arc<OwnedFd> = Arc::new(File::open(base)?.into());
        let mut made = Vec::new();
        for name in missing.iter().rev() {
            match make_temporary(&fd, name, true, || crate::sys::dir_at(fd.as_fd(), name)) {
                Ok((next, created)) => {
                    if created {
                        made.push((fd.clone(), name.clone()));
                    }
                    fd = Arc::new(next);
                }
                Err(e) => {
                    settle_dirs(&mut made, true);
                    return Err(e);
                }
            }
        }
        Ok(Root {
            dir: File::from(fd.as_fd().try_clone_to_owned()?),
            path: path.to_path_buf(),
            made,
        })
    }

    /// Keeps the directories made for the cache (the run is over).
    pub(super) fn keep(mut self) {
        settle_dirs(&mut self.made, false);
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        settle_dirs(&mut self.made, true);
    }
}

/// Takes the directories `made` off the signal handler's list, innermost
/// first, with `remove` removing each first (while still empty).
fn settle_dirs(made: &mut Vec<Made>, remove: bool) {
    for (parent, dir) in made.drain(..).rev() {
        let _ = settle_temporary(&parent, &dir, || {
            if remove {
                let _ = rmdir_at(parent.as_fd(), &dir);
            }
            Ok(())
        });
    }
}

/// Walks (creating) `parts` below the cache directory `root`, never through
/// a symlink: a component an attacker made a symlink stops the walk. Each
/// directory this walk created goes into `made` with its parent (and on
/// the signal handler's list), so a failed entry can take them away again.
fn walk_dirs(root: &File, parts: &[Vec<u8>], made: &mut Vec<Made>) -> io::Result<Arc<OwnedFd>> {
    let mut fd = Arc::new(root.as_fd().try_clone_to_owned()?);
    for c in parts {
        let (next, created) = make_temporary(&fd, c, true, || dir_at(fd.as_fd(), c))?;
        if created {
            made.push((fd.clone(), c.clone()));
        }
        fd = Arc::new(next);
    }
    Ok(fd)
}

/// A failed copy into a cache file: reading its source or writing it.
pub(super) struct CopyFailed {
    reading: bool,
    err: io::Error,
}

impl CopyFailed {
    fn writing(err: io::Error) -> CopyFailed {
        CopyFailed {
            reading: false,
            err,
        }
    }
}

/// Why an entry was not added.
pub(super) enum EntryError {
    /// Reading the source failed (counted as unreadable).
    Read,
    /// Writing the cache failed: the file or link not written, and why.
    Write(PathBuf, io::Error),
}

/// Adds one entry for `name`: the bytes `copy` writes, as its leaf file
/// in the entry's directory (a temporary file renamed into place, then
/// `mode`: 0644 as perf's cache keeps readable files, less for a source
/// less readable), and its `.build-id` link (made again if it was lost). Every step is relative to a directory
/// descriptor reached without following symlinks, so nothing is written
/// outside the cache. Directories made for an entry that fails are
/// removed again (when still empty).
pub(super) fn add_entry(
    root: &Root,
    e: &CacheEntry,
    name: &[u8],
    mode: u32,
    copy: impl FnOnce(&mut File) -> Result<u64, CopyFailed>,
) -> Result<Added, EntryError> {
    let mut made = Vec::new();
    let [file, link] = e.files(&root.path, name);
    let result = match add_file(root, e, (cache_leaf(name), mode), copy, &mut made) {
        Err(f) if f.reading => Err(EntryError::Read),
        Err(f) => Err(EntryError::Write(file, f.err)),
        Ok(added) => add_link(&root.dir, e, &mut made)
            .map(|()| added)
            .map_err(|err| {
                // the link itself, not the file through it
                let at = link
                    .parent()
                    .map_or_else(|| link.clone(), Path::to_path_buf);
                EntryError::Write(at, err)
            }),
    };
    // innermost first; a directory something else was put in stays
    settle_dirs(&mut made, result.is_err());
    result
}

/// The entry's `.build-id` link, unless it is there.
fn add_link(root: &File, e: &CacheEntry, made: &mut Vec<Made>) -> io::Result<()> {
    let links = walk_dirs(root, &e.link_dir, made)?;
    if !exists_at(links.as_fd(), &e.link_name) {
        symlink_at(&e.target, links.as_fd(), &e.link_name)?;
    }
    Ok(())
}

/// The entry's file (see [`add_entry`]).
fn add_file(
    root: &Root,
    e: &CacheEntry,
    (leaf, mode): (&str, u32),
    copy: impl FnOnce(&mut File) -> Result<u64, CopyFailed>,
    made: &mut Vec<Made>,
) -> Result<Added, CopyFailed> {
    use std::os::unix::fs::PermissionsExt;
    let dir = walk_dirs(&root.dir, &e.dir, made).map_err(CopyFailed::writing)?;
    if exists_at(dir.as_fd(), leaf.as_bytes()) {
        return Ok(Added::Present);
    }
    let tmp = format!(".m2s-{}.tmp", std::process::id());
    let tmp = tmp.as_bytes();
    let create = || create_at(dir.as_fd(), tmp, 0o600).map(|f| (f, true));
    let (mut out, _) = make_temporary(&dir, tmp, false, create).map_err(CopyFailed::writing)?;
    let done = copy(&mut out).and_then(|n| {
        out.set_permissions(std::fs::Permissions::from_mode(mode))
            .and_then(|()| {
                settle_temporary(&dir, tmp, || rename_at(dir.as_fd(), tmp, leaf.as_bytes()))
            })
            .map_err(CopyFailed::writing)?;
        Ok(n)
    });
    match done {
        Ok(n) => Ok(Added::New(n)),
        Err(err) => {
            let _ = settle_temporary(&dir, tmp, || {
                let _ = unlink_at(dir.as_fd(), tmp);
                Ok(())
            });
            Err(err)
        }
    }
}

/// Copies the first `size` bytes of `src` (its size when it was checked)
/// into `out`, telling a failed read from a failed write: bytes the file
/// has grown by since are not copied, and a file that has shrunk below
/// `size` is a failed read.
pub(super) fn copy_file(src: &mut File, out: &mut File, size: u64) -> Result<u64, CopyFailed> {
    use std::io::{Read, Write};
    let mut buf = vec![0u8; 128 << 10];
    let mut total = 0u64;
    while total < size {
        let want = usize::try_from(size - total).map_or(buf.len(), |n| n.min(buf.len()));
        let n = match src.read(&mut buf[..want]) {
            Ok(0) => {
                let err = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("shrank to {total} bytes while copied ({size} when checked)"),
                );
                return Err(CopyFailed { reading: true, err });
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(CopyFailed { reading: true, err }),
        };
        out.write_all(&buf[..n]).map_err(CopyFailed::writing)?;
        total += n as u64;
    }
    Ok(total)
}

/// Writes `bytes` into `out` (the vDSO image, kallsyms).
pub(super) fn write_bytes(out: &mut File, bytes: &[u8]) -> Result<u64, CopyFailed> {
    io::Write::write_all(out, bytes)
        .map(|()| bytes.len() as u64)
        .map_err(CopyFailed::writing)
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

    // An entry whose copy fails to write is named by its cache path, and
    // takes away the directories made for it, but not one that was there.
    #[test]
    fn a_failed_entry_removes_the_directories_it_made() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("usr")).unwrap();
        let root = Root::create(tmp.path()).unwrap();
        let id = BuildId::new(&[0xab, 0xcd, 0xef, 0x01]).unwrap();
        let name = b"/usr/lib/libx.so";
        let e = cache_entry(name, &id).unwrap();
        let full = |_: &mut File| {
            Err(CopyFailed::writing(io::Error::from_raw_os_error(
                libc::ENOSPC,
            )))
        };
        match add_entry(&root, &e, name, 0o644, full) {
            Err(EntryError::Write(path, err)) => {
                assert_eq!(path, e.files(tmp.path(), name)[0]);
                assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
            }
            _ => panic!("not a write failure"),
        }
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["usr"]);
        assert_eq!(
            std::fs::read_dir(tmp.path().join("usr")).unwrap().count(),
            0
        );
        // and one that works leaves the file and its link
        let ok = |out: &mut File| write_bytes(out, b"elf");
        assert!(matches!(
            add_entry(&root, &e, name, 0o644, ok),
            Ok(Added::New(3))
        ));
        let [file, via_link] = e.files(tmp.path(), name);
        assert_eq!(std::fs::read(file).unwrap(), b"elf");
        assert_eq!(std::fs::read(via_link).unwrap(), b"elf");
    }
}
