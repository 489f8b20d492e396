//! One cache entry: where it goes in perf's layout ([`cache_entry`]) and
//! how it is written, relative to directory descriptors reached without
//! following symlinks; an entry that fails takes the directories made for
//! it away again. Its temporary file and directories are listed for the
//! output module's signal cleanup while they are made.
//!
//! Directory modes: the names of an entry's directories are its file's
//! path and build id, so the directories made for a private entry (a copy
//! others may not read) are 0700, those for the others 0755 as perf makes
//! them (both less the umask). The cache's frame, the cache directory and
//! its `.build-id`, is made 0755 for every entry: it names no more than the
//! first component of a path (a name in `/`) and the first two hex digits
//! of an id, and perf reaches every entry through it. A directory this run
//! made private stays private when a public entry goes in it too (that
//! entry is then for root and the archiver only); one it made public is
//! made private before a private entry goes in it, so within a run the
//! order of the entries does not matter. A directory the run did not make
//! (there before, made by an earlier run or by anyone else) is never
//! changed.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
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

/// ENOTDIR from opening the cache directory, saying what is there instead
/// ("is a FIFO, not a directory"); other errors as they are.
fn not_a_directory(path: &Path, e: io::Error) -> io::Error {
    use std::os::unix::fs::FileTypeExt;
    if e.raw_os_error() != Some(libc::ENOTDIR) {
        return e;
    }
    let kind = match std::fs::symlink_metadata(path).map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() => "a FIFO",
        Ok(t) if t.is_char_device() => "a character device",
        Ok(t) if t.is_block_device() => "a block device",
        Ok(t) if t.is_socket() => "a socket",
        Ok(t) if t.is_file() => "a regular file",
        _ => return e,
    };
    io::Error::new(
        io::ErrorKind::NotADirectory,
        format!("is {kind}, not a directory (archive -o names the cache directory)"),
    )
}

/// A directory's device and inode.
type Identity = (u64, u64);

/// The cache directory: held open (every entry is made relative to it)
/// and its path, for messages.
pub(super) struct Root {
    pub(super) dir: File,
    pub(super) path: PathBuf,
    /// The directories of `path` this run made, outermost first: removed
    /// again (when still empty) when dropped before [`Root::keep`], listed
    /// for a signal until then.
    made: Vec<Made>,
    /// The entry directories this run made public (0755) for entries that
    /// were written: made private before a private entry goes in one.
    public: HashSet<Identity>,
}

impl Root {
    /// Opens the cache directory `path`, first making it and its missing
    /// parents (mode 0755 less the umask, as perf makes its cache; never
    /// through a symlink).
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
        // a directory only: a FIFO or device is refused at once (ENOTDIR),
        // never waited on or opened; reached through links of root's or
        // ours only, on the way as at its end (the error is the
        // OutputError, wrapped), walked from "/" a directory at a time and
        // opened in the one held, without following a link swapped in since
        let walked = crate::output::walk(base, true).map_err(io::Error::other)?;
        let dir = walked
            .open_target_dir()
            .map_err(|e| not_a_directory(&walked.path(), e))?;
        // one we may not write in is refused now, as any output's
        // directory is, not entry by entry
        crate::sys::may_write_in(dir.as_fd())?;
        let mut fd: Arc<OwnedFd> = Arc::new(dir.into());
        let mut made = Vec::new();
        for name in missing.iter().rev() {
            match make_temporary(&fd, name, true, || dir_at(fd.as_fd(), name, 0o755)) {
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
            public: HashSet::new(),
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

/// How the directories of one entry are made (see the module doc).
struct Walk<'a> {
    /// The run's public entry directories (see [`Root`]).
    public: &'a mut HashSet<Identity>,
    /// Whether the entry is private.
    private: bool,
    /// The directories this entry made, with their parents (and on the
    /// signal handler's list), so a failed entry can take them away again.
    made: Vec<Made>,
    /// Those of them made public, for [`Root`]'s list once it is written.
    made_public: Vec<Identity>,
}

impl Walk<'_> {
    /// Walks (creating) `parts` below the cache directory `root`, never
    /// through a symlink: a component an attacker made a symlink stops the
    /// walk. The first `frame` parts are the cache's frame (`.build-id`),
    /// made 0755 and never changed; the others are 0700 for a private
    /// entry, and made private when this run made them public.
    fn dirs(&mut self, root: &File, parts: &[Vec<u8>], frame: usize) -> io::Result<Arc<OwnedFd>> {
        let mut fd = Arc::new(root.as_fd().try_clone_to_owned()?);
        for (i, c) in parts.iter().enumerate() {
            let (ruled, private) = (i >= frame, self.private && i >= frame);
            let mode = if private { 0o700 } else { 0o755 };
            let (mut next, created) = make_temporary(&fd, c, true, || dir_at(fd.as_fd(), c, mode))?;
            if created {
                self.made.push((fd.clone(), c.clone()));
            }
            if created && ruled && !private {
                let (dir, m) = metadata(next)?;
                self.made_public.push((m.dev(), m.ino()));
                next = dir;
            } else if !created && private && !self.public.is_empty() {
                next = self.tighten(next)?;
            }
            fd = Arc::new(next);
        }
        Ok(fd)
    }

    /// `dir`, made private (its group's and others' bits cleared) when
    /// this run made it public.
    fn tighten(&mut self, dir: OwnedFd) -> io::Result<OwnedFd> {
        use std::os::unix::fs::PermissionsExt;
        let (dir, m) = metadata(dir)?;
        if !self.public.remove(&(m.dev(), m.ino())) {
            return Ok(dir);
        }
        let dir = File::from(dir);
        let mode = m.permissions().mode() & 0o7700;
        dir.set_permissions(std::fs::Permissions::from_mode(mode))?;
        Ok(dir.into())
    }
}

/// The open directory `dir` (given back) and its metadata.
fn metadata(dir: OwnedFd) -> io::Result<(OwnedFd, std::fs::Metadata)> {
    let dir = File::from(dir);
    let m = dir.metadata()?;
    Ok((dir.into(), m))
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
/// less readable), and its `.build-id` link (made again if it was lost).
/// Every step is relative to a directory descriptor reached without
/// following symlinks, so nothing is written outside the cache. The
/// directories of an entry others may not read (`mode` without 0o004) are
/// private (see the module doc). Directories made for an entry that fails
/// are removed again (when still empty).
pub(super) fn add_entry(
    root: &mut Root,
    e: &CacheEntry,
    name: &[u8],
    mode: u32,
    copy: impl FnOnce(&mut File) -> Result<u64, CopyFailed>,
) -> Result<Added, EntryError> {
    let [file, link] = e.files(&root.path, name);
    let mut walk = Walk {
        public: &mut root.public,
        private: mode & 0o004 == 0,
        made: Vec::new(),
        made_public: Vec::new(),
    };
    let leaf = (cache_leaf(name), mode);
    let result = match add_file(&root.dir, e, leaf, copy, &mut walk) {
        Err(f) if f.reading => Err(EntryError::Read),
        Err(f) => Err(EntryError::Write(file, f.err)),
        Ok(added) => add_link(&root.dir, e, &mut walk)
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
    settle_dirs(&mut walk.made, result.is_err());
    if result.is_ok() {
        walk.public.extend(walk.made_public);
    }
    result
}

/// The entry's `.build-id` link, unless it is there.
fn add_link(root: &File, e: &CacheEntry, walk: &mut Walk) -> io::Result<()> {
    let links = walk.dirs(root, &e.link_dir, 1)?;
    if !exists_at(links.as_fd(), &e.link_name) {
        symlink_at(&e.target, links.as_fd(), &e.link_name)?;
    }
    Ok(())
}

/// The entry's file (see [`add_entry`]).
fn add_file(
    root: &File,
    e: &CacheEntry,
    (leaf, mode): (&str, u32),
    copy: impl FnOnce(&mut File) -> Result<u64, CopyFailed>,
    walk: &mut Walk,
) -> Result<Added, CopyFailed> {
    use std::os::unix::fs::PermissionsExt;
    let dir = walk.dirs(root, &e.dir, 0).map_err(CopyFailed::writing)?;
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
        let mut root = Root::create(tmp.path()).unwrap();
        let id = BuildId::new(&[0xab, 0xcd, 0xef, 0x01]).unwrap();
        let name = b"/usr/lib/libx.so";
        let e = cache_entry(name, &id).unwrap();
        let full = |_: &mut File| {
            Err(CopyFailed::writing(io::Error::from_raw_os_error(
                libc::ENOSPC,
            )))
        };
        match add_entry(&mut root, &e, name, 0o644, full) {
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
            add_entry(&mut root, &e, name, 0o644, ok),
            Ok(Added::New(3))
        ));
        let [file, via_link] = e.files(tmp.path(), name);
        assert_eq!(std::fs::read(file).unwrap(), b"elf");
        assert_eq!(std::fs::read(via_link).unwrap(), b"elf");
    }

    // Directories made for a private entry are 0700, for a public one 0755
    // (the frame, the cache and .build-id, 0755 for both); a directory
    // this run made public is made private before a private entry goes in
    // it, one made private stays so, and one that was there is not changed.
    #[test]
    fn private_entries_get_private_directories_whatever_the_order() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        // what the umask leaves of 0755 (0700 is 0700 under any sane one)
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
            .unwrap();
        let open = 0o755 & !umask;
        let mode = |p: &str| {
            let m = std::fs::metadata(tmp.path().join(p)).unwrap();
            m.permissions().mode() & 0o777
        };
        std::fs::create_dir(tmp.path().join("old")).unwrap();
        std::fs::set_permissions(
            tmp.path().join("old"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let mut root = Root::create(tmp.path()).unwrap();
        let add = |root: &mut Root, name: &[u8], id: u8, mode: u32| {
            let id = BuildId::new(&[id, 1, 2, 3]).unwrap();
            let e = cache_entry(name, &id).unwrap();
            let ok = |out: &mut File| write_bytes(out, b"elf");
            assert!(matches!(
                add_entry(root, &e, name, mode, ok),
                Ok(Added::New(3))
            ));
        };
        // public first, then private beside it
        add(&mut root, b"/a/pub", 0x10, 0o644);
        assert_eq!(
            (mode("a"), mode("a/pub"), mode(".build-id/10")),
            (open, open, open)
        );
        add(&mut root, b"/a/priv", 0x20, 0o600);
        assert_eq!(
            (mode("a"), mode("a/priv"), mode(".build-id/20")),
            (0o700, 0o700, 0o700)
        );
        assert_eq!((mode("a/pub"), mode(".build-id")), (open, open));
        // private first, then public beside it: stays private
        add(&mut root, b"/b/priv", 0x30, 0o600);
        add(&mut root, b"/b/pub", 0x30 + 1, 0o644);
        assert_eq!(
            (mode("b"), mode("b/priv"), mode("b/pub")),
            (0o700, 0o700, open)
        );
        // one there before is kept as it was
        add(&mut root, b"/old/priv", 0x40, 0o600);
        assert_eq!((mode("old"), mode("old/priv")), (0o755, 0o700));
        root.keep();
    }
}
