//! Build ids of mapped files read from user space: the ELF note of the
//! mapped file (through the mapping, or a path checked against it), the
//! kernel's and modules' ids, and the vDSO's. The answers a scan keeps are
//! in `idcache`.

use std::fs::File;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::elf;
use crate::model::{BuildId, FileKey, Vma, VDSO_NAME};

/// Most program-header bytes read from one file (real binaries have a few
/// dozen 56-byte headers; a hostile e_phentsize x e_phnum can claim 4 GiB).
pub const MAX_PHDR_BYTES: usize = 64 << 10;
/// Most PT_NOTE segments examined in one file.
pub const MAX_NOTE_SEGMENTS: usize = 16;
/// Most note bytes read from one file, all segments together.
pub const MAX_NOTE_BYTES: u64 = 1 << 20;

/// Reads the GNU build id from an ELF file with positioned reads, validating
/// every size against the file and within the budgets above. Returns the raw
/// id of any length.
pub fn read_build_id_from_file(file: &File) -> io::Result<Option<Vec<u8>>> {
    let file_len = file.metadata()?.len();
    // Nothing is read from what cannot be an ELF file: procfs and sysfs
    // files say 0 bytes (reading some has effects: /proc/kmsg consumes the
    // kernel log) and pseudo filesystems hold no binaries.
    if file_len < elf::HEADER_LEN as u64 || crate::sys::is_pseudo_fs(file)? {
        return Ok(None);
    }
    let mut head = [0u8; elf::HEADER_LEN];
    let n = read_full_at(file, &mut head, 0)?;
    let h = match elf::parse_header(&head[..n]) {
        Ok(h) => h,
        Err(_) => return Ok(None),
    };
    let ph_len = elf::phdrs_len(&h);
    if ph_len > MAX_PHDR_BYTES
        || h.phoff
            .checked_add(ph_len as u64)
            .is_none_or(|end| end > file_len)
    {
        return Ok(None);
    }
    let mut phdrs = vec![0u8; ph_len];
    if read_full_at(file, &mut phdrs, h.phoff)? != phdrs.len() {
        return Ok(None);
    }
    let mut budget = MAX_NOTE_BYTES;
    for (off, size) in elf::note_segments(&h, &phdrs)
        .into_iter()
        .take(MAX_NOTE_SEGMENTS)
    {
        if size > budget || off.checked_add(size).is_none_or(|end| end > file_len) {
            continue;
        }
        budget -= size;
        let mut seg = vec![0u8; size as usize];
        let n = read_full_at(file, &mut seg, off)?;
        if let Some(id) = elf::find_gnu_build_id(&seg[..n], h.big_endian) {
            return Ok(Some(id.to_vec()));
        }
    }
    Ok(None)
}

/// Reads `buf.len()` bytes at `off`, fewer at the end of the file: the
/// count read.
pub(crate) fn read_full_at(file: &File, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], off) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// How far a build id read from a file can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// The mapped file itself (map_files), or a file whose device and inode
    /// are the VMA's.
    Verified,
    /// The inode matches but the device /proc reports is not the one stat
    /// gives (overlayfs, btrfs subvolumes): counted, not silently trusted.
    Unverified,
}

/// Opens `path` for reading only if it names a regular file, without the
/// effects of opening anything else (a watchdog starts, a tape rewinds, a
/// FIFO blocks) and without a window in which a swapped path could make
/// it so: the path is resolved once to an `O_PATH` descriptor (which opens
/// nothing), that inode is checked, and the very same inode reopened
/// through `/proc/thread-self/fd` (a look with `stat` before opening by path let
/// a link flipped in between reach a device node).
pub fn open_if_regular(path: &Path) -> Option<File> {
    use super::mounts::{host, FsTrust};
    // nothing on FUSE is asked (see `mounts`): a path is walked a step at a
    // time, each step's filesystem judged before it is asked for the next
    // name (`unasked`); a magic link of /proc (map_files) leads straight
    // to the mapped file, judged before anything is asked of it
    let bytes = path.as_os_str().as_bytes();
    let at = match proc_dir_of(bytes) {
        (Some(dir), Some(inside)) => super::unasked::open_path(inside, Some(&dir))?,
        (Some(dir), None) if is_map_file(bytes) => {
            let at = crate::sys::open_path(path).ok()?;
            let fd = std::os::fd::AsFd::as_fd(&at);
            if host().trust_fd(fd, Some(&dir)) != FsTrust::Readable {
                return None;
            }
            at
        }
        // (any other /proc path too: `cwd/`, `fd/N/` lead anywhere)
        (_, _) if path.is_absolute() => super::unasked::open_path(bytes, None)?,
        (_, _) => {
            let full = std::env::current_dir().ok()?.join(path);
            super::unasked::open_path(full.as_os_str().as_bytes(), None)?
        }
    };
    let held = at.metadata().ok()?;
    // (without this process's /proc, nothing is opened: no build ids
    // from files then, rather than a window for a swapped path)
    held.is_file()
        .then(|| crate::sys::reopen_for_reading(&at, &held).ok())
        .flatten()
}

/// Whether `path` is `/proc/PID/map_files/START-END` (a thread's too):
/// a magic link the kernel follows to a mapped file, asking no filesystem
/// on the way.
fn is_map_file(path: &[u8]) -> bool {
    let Some(at) = path.windows(11).rposition(|w| w == b"/map_files/") else {
        return false;
    };
    let (dir, range) = (&path[..at], &path[at + 11..]);
    let hex = |b: &[u8]| !b.is_empty() && b.iter().all(u8::is_ascii_hexdigit);
    let range_ok = range.split(|&b| b == b'-').filter(|p| hex(p)).count() == 2
        && range.iter().filter(|&&b| b == b'-').count() == 1;
    matches!(proc_dir_of(dir), (Some(d), None) if d.as_os_str().as_bytes() == dir) && range_ok
}

/// For a path under a process's /proc directory (`/proc/PID/...` or
/// `/proc/PID/task/TID/...`): that directory, and the path inside the
/// process's root when it goes through `root/`.
fn proc_dir_of(path: &[u8]) -> (Option<PathBuf>, Option<&[u8]>) {
    let Some(rest) = path.strip_prefix(b"/proc/") else {
        return (None, None);
    };
    let digits = |b: &[u8]| !b.is_empty() && b.iter().all(u8::is_ascii_digit);
    let mut parts = rest.splitn(4, |&b| b == b'/');
    let pid = parts.next().filter(|p| digits(p));
    let Some(pid) = pid else {
        return (None, None);
    };
    let mut dir = b"/proc/".to_vec();
    dir.extend_from_slice(pid);
    let mut after = &rest[pid.len()..];
    if let Some(task) = after.strip_prefix(b"/task/") {
        let tid = task.split(|&b| b == b'/').next().unwrap_or_default();
        if digits(tid) {
            dir.extend_from_slice(b"/task/");
            dir.extend_from_slice(tid);
            after = &task[tid.len()..];
        }
    }
    let dir = PathBuf::from(std::ffi::OsString::from_vec(dir));
    // `/root` itself is "/" in the process's root
    let inside = after
        .strip_prefix(b"/root")
        .filter(|r| r.first().is_none_or(|&b| b == b'/'));
    (
        Some(dir),
        inside.map(|r| if r.is_empty() { &b"/"[..] } else { r }),
    )
}

/// Opens a file found through /proc without blocking (a FIFO planted at a
/// mapped path cannot hang us) and keeps it only if it is a regular file and,
/// when `want` is given, has that inode.
fn open_checked(path: &Path, want: Option<FileKey>) -> Option<(File, Trust)> {
    use std::os::unix::fs::MetadataExt;
    let f = open_if_regular(path)?;
    let m = f.metadata().ok()?;
    let Some(k) = want else {
        return Some((f, Trust::Verified));
    };
    if m.ino() != k.inode {
        return None;
    }
    let dev = (libc::major(m.dev()), libc::minor(m.dev()));
    let trust = if dev == (k.dev_major, k.dev_minor) {
        Trust::Verified
    } else {
        Trust::Unverified
    };
    Some((f, trust))
}

/// What the file at a recorded path says about a recorded mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnDisk {
    /// The file has the recorded device and inode: its id (`None` for an
    /// ELF without one).
    Same(Option<Vec<u8>>),
    /// Another file is at the path now (inode or device differs).
    Replaced,
    /// Nothing usable at the path (absent, unreadable, not a regular file).
    Missing,
}

/// The regular file at a recorded path now, as [`read_file_at`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAt {
    /// Its device and inode, as `stat` gives them.
    pub key: FileKey,
    /// Its build id (`Some(None)`: an ELF without one; None: unreadable).
    pub id: Option<Option<Vec<u8>>>,
}

impl FileAt {
    /// What it says about a mapping of the file `key` (device and inode
    /// both).
    pub fn about(&self, key: FileKey) -> OnDisk {
        match &self.id {
            _ if self.key != key => OnDisk::Replaced,
            Some(id) => OnDisk::Same(id.clone()),
            None => OnDisk::Missing,
        }
    }
}

/// The regular file at `path` now and its build id (opened non-blocking,
/// regular files only); None when there is none.
pub fn read_file_at(path: &Path) -> Option<FileAt> {
    use std::os::unix::fs::MetadataExt;
    let (f, _) = open_checked(path, None)?;
    let m = f.metadata().ok()?;
    let key = FileKey {
        dev_major: libc::major(m.dev()),
        dev_minor: libc::minor(m.dev()),
        inode: m.ino(),
    };
    let id = read_build_id_from_file(&f).ok();
    Some(FileAt { key, id })
}

/// Reads the build id of the file at `path` only if it is still the mapped
/// file `key` (device and inode both). Opened non-blocking, regular files only.
pub fn read_build_id_if_same(path: &Path, key: FileKey) -> OnDisk {
    read_file_at(path).map_or(OnDisk::Missing, |f| f.about(key))
}

/// Reads the build id of whatever regular file is at `path` now, without
/// knowing which file was mapped (`convert --trust-paths`). None when no
/// regular file is there or it cannot be read; Some(None) for an ELF
/// without an id.
pub fn read_build_id_at_path(path: &Path) -> Option<Option<Vec<u8>>> {
    let (f, _) = open_checked(path, None)?;
    read_build_id_from_file(&f).ok()
}

/// Opens the file at `path` if it is a regular file (non-blocking; a
/// device or FIFO is never opened).
pub fn open_regular(path: &Path) -> Option<File> {
    open_checked(path, None).map(|(f, _)| f)
}

/// Opens the file at `path` only if it is a regular file whose build id
/// is `id` (non-blocking, so a FIFO planted there cannot hang us): the
/// file a symbolizer may read for a mapping with that id.
pub fn open_if_build_id(path: &Path, id: &crate::model::BuildId) -> Option<File> {
    let (f, _) = open_checked(path, None)?;
    let raw = read_build_id_from_file(&f).ok()??;
    (raw.as_slice() == id.as_bytes()).then_some(f)
}

/// The running kernel's build id, from `/sys/kernel/notes` (its ELF notes,
/// in this machine's byte order).
pub fn kernel_build_id() -> Option<BuildId> {
    notes_build_id(Path::new("/sys/kernel/notes"))
}

/// A loaded module's build id, from `/sys/module/NAME/notes`; `name` as
/// the kernel spells it (`-` in a file name is `_` there).
pub fn module_build_id(name: &[u8]) -> Option<BuildId> {
    if name.is_empty() || name.contains(&b'/') || name.starts_with(b".") {
        return None;
    }
    let name: Vec<u8> = name
        .iter()
        .map(|&c| if c == b'-' { b'_' } else { c })
        .collect();
    let mut p = b"/sys/module/".to_vec();
    p.extend_from_slice(&name);
    p.extend_from_slice(b"/notes/.note.gnu.build-id");
    notes_build_id(Path::new(std::ffi::OsStr::from_bytes(&p)))
}

/// The GNU build id in a sysfs notes file (read at most 64 KiB, regular
/// files only: sysfs attributes are).
pub fn notes_build_id(path: &Path) -> Option<BuildId> {
    let (f, _) = open_checked(path, None)?;
    let mut buf = vec![0u8; 64 << 10];
    let n = read_full_at(&f, &mut buf, 0).ok()?;
    let id = elf::find_gnu_build_id(&buf[..n], cfg!(target_endian = "big"))?;
    BuildId::new(id)
}

/// `map_files/START-END` of a VMA under `dir` (needs CAP_SYS_ADMIN), if it
/// is still the VMA's inode (another file may be mapped there since):
/// [`Trust::Verified`] when its device is the VMA's too, or (overlayfs and
/// btrfs `stat` another device than the maps show) it is the file at the
/// VMA's path in the process's view; else one of that inode number on
/// another filesystem may be it: [`Trust::Unverified`]. A VMA with a build
/// id and no inode (a build-id MMAP2 record) is matched by id instead; one
/// with neither (MMAP v1) only when the file mapped there is the VMA's
/// path (seen there, or named so by the kernel when deleted).
fn open_map_file(dir: &Path, vma: &Vma) -> Option<(File, Trust)> {
    use std::os::unix::fs::MetadataExt;
    let map_file = dir.join(format!("map_files/{:x}-{:x}", vma.start, vma.end));
    let f = open_if_regular(&map_file)?;
    if vma.inode != 0 {
        let m = f.metadata().ok()?;
        let dev = (libc::major(m.dev()), libc::minor(m.dev()));
        let same = dev == (vma.dev_major, vma.dev_minor) || is_at_path(dir, vma, &m);
        let trust = [Trust::Unverified, Trust::Verified][usize::from(same)];
        return (m.ino() == vma.inode).then_some((f, trust));
    }
    let Some(want) = vma.build_id else {
        return is_mapped_path(dir, vma, &f).then_some((f, Trust::Verified));
    };
    let got = read_build_id_from_file(&f).ok()??;
    (got.as_slice() == want.as_bytes()).then_some((f, Trust::Verified))
}

/// Whether the process of `dir` sees at the VMA's path the file `m` is the
/// status of (stat only, nothing opened; walked without asking a
/// filesystem not read, see `unasked`).
fn is_at_path(dir: &Path, vma: &Vma, m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let at = super::unasked::open_path(&vma.name, Some(dir)).and_then(|f| f.metadata().ok());
    at.is_some_and(|a| (a.dev(), a.ino()) == (m.dev(), m.ino()))
}

/// Whether `f`, a file mapped by the process of `dir`, is the one at the
/// VMA's path: [`is_at_path`], or the kernel's name of the open file is
/// the VMA's (a mapped file deleted since: "PATH (deleted)" both).
fn is_mapped_path(dir: &Path, vma: &Vma, f: &File) -> bool {
    use std::os::fd::AsRawFd;
    if f.metadata().is_ok_and(|m| is_at_path(dir, vma, &m)) {
        return true;
    }
    let name = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()));
    name.is_ok_and(|n| n.as_os_str().as_bytes() == &*vma.name)
}

/// Reads the build id of the mapped file of a VMA from user space, through
/// `dir` (`/proc/PID`, or `/proc/PID/task/TID` for a live thread when the
/// leader is a zombie): `map_files/START-END` while it is the VMA's inode,
/// else `root/PATH` (the process's view of the path), used only when its
/// inode is the VMA's. Files are opened non-blocking and must be regular
/// files. Returns what the file that was read says (an id, or
/// `None` for an ELF without one) and how far it is trusted; `None` when no
/// usable file could be read.
pub fn read_mapped_build_id(dir: &Path, vma: &Vma) -> Option<(Option<Vec<u8>>, Trust)> {
    if let Some((f, trust)) = open_map_file(dir, vma) {
        if let Ok(id) = read_build_id_from_file(&f) {
            return Some((id, trust));
        }
    }
    let path = &vma.name;
    if path.first() != Some(&b'/') || path.ends_with(b" (deleted)") {
        return None;
    }
    let mut p = dir.join("root").into_os_string().into_vec();
    p.extend_from_slice(path);
    let (f, trust) = open_checked(Path::new(std::ffi::OsStr::from_bytes(&p)), vma.file_key())?;
    Some((read_build_id_from_file(&f).ok()?, trust))
}

/// `/proc/PID/map_files/START-END`: the file process `pid` maps at
/// START..END, while it lives and still maps that range (root only).
pub fn map_file(pid: u32, start: u64, end: u64) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
}

/// `/proc/PID/root/PATH`: the file at `path` as process `pid` sees it (in
/// its mount namespace and root).
pub fn in_root(pid: u32, path: &[u8]) -> PathBuf {
    let mut p = format!("/proc/{pid}/root").into_bytes();
    p.extend_from_slice(path);
    PathBuf::from(std::ffi::OsStr::from_bytes(&p))
}

/// The build id of the file `key` a live process `pid` maps at
/// START..END from `path`, read long after the map was recorded (a
/// snapshot's second look, `convert`, `pprof`): its mapping
/// ([`map_file`]), else its view of the path ([`in_root`]: a container's
/// file whose host path holds another, or nothing), each taken only while
/// it is a regular file with the recorded inode. [`Trust::Verified`] when
/// its device is the recorded one too (which the caller may require: after
/// that long the pid may name another process, which may map another
/// device's file of that inode number there); [`Trust::Unverified`] when
/// only the inode is (overlayfs and btrfs give `stat` another device than
/// the maps show, for the same file), and none of the two is verified.
/// What the file says: an id, or `None` for an ELF without one.
pub fn read_live_build_id(
    pid: u32,
    (start, end): (u64, u64),
    path: &[u8],
    key: FileKey,
) -> Option<(Option<Vec<u8>>, Trust)> {
    if key.inode == 0 || pid == u32::MAX {
        return None;
    }
    let mut places = vec![map_file(pid, start, end)];
    if path.first() == Some(&b'/') && !path.ends_with(b" (deleted)") {
        places.push(in_root(pid, path));
    }
    let mut unverified = None;
    for p in places {
        let Some((f, trust)) = open_checked(&p, Some(key)) else {
            continue;
        };
        let Ok(id) = read_build_id_from_file(&f) else {
            continue;
        };
        if trust == Trust::Verified {
            return Some((id, trust));
        }
        unverified.get_or_insert((id, trust));
    }
    unverified
}

/// The vDSO's build id, read once from this process's own vDSO image through
/// `/proc/self/mem` (the vDSO is the same for every process of a kernel/arch).
pub fn vdso_build_id() -> Option<BuildId> {
    static VDSO: OnceLock<Option<BuildId>> = OnceLock::new();
    *VDSO.get_or_init(|| vdso_image().map(|(id, _)| id))
}

/// This process's vDSO image and its build id (read through
/// `/proc/self/mem`; the same image for every process of a kernel/arch).
pub fn vdso_image() -> Option<(BuildId, Vec<u8>)> {
    let maps = std::fs::read("/proc/self/maps").ok()?;
    let vdso = super::maps_text::parse_maps(&maps, |_, name| name == VDSO_NAME)
        .ok()?
        .into_iter()
        .next()?;
    let mem = File::open("/proc/self/mem").ok()?;
    let mut image = vec![0u8; usize::try_from(vdso.len()).ok()?];
    let n = read_full_at(&mem, &mut image, vdso.start).ok()?;
    image.truncate(n);
    let id = elf::build_id_from_image(&image).ok()??;
    Some((BuildId::new(&id)?, image))
}

/// Opens the file a VMA maps, as [`read_mapped_build_id`] finds it:
/// `map_files/START-END` under `dir` (`/proc/PID`) while it is the VMA's
/// inode or, for a VMA with a build id and no inode, has that build id;
/// else the process's view of the path when it is still the mapped inode
/// (any file there for a VMA with a build id and no inode: the caller
/// checks its id). A VMA with neither (an MMAP v1 record) names no file
/// the path could be checked against: only its live mapping, while it is
/// that path's file, is taken. Regular files only, never on a pseudo
/// filesystem.
pub fn open_mapped_file(dir: &Path, vma: &Vma) -> Option<File> {
    let f = match open_map_file(dir, vma) {
        Some((f, _)) => f,
        None => {
            let path = &vma.name;
            let unverifiable = vma.file_key().is_none() && vma.build_id.is_none();
            if unverifiable || path.first() != Some(&b'/') || path.ends_with(b" (deleted)") {
                return None;
            }
            let mut p = dir.join("root").into_os_string().into_vec();
            p.extend_from_slice(path);
            open_checked(Path::new(std::ffi::OsStr::from_bytes(&p)), vma.file_key())?.0
        }
    };
    match crate::sys::is_pseudo_fs(&f) {
        Ok(false) => Some(f),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only regular files are opened, through links too; a device node, a
    // FIFO (no writer: opening it would block) or a directory gives None.
    #[test]
    fn open_if_regular_opens_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let fifo = dir.path().join("fifo");
        crate::sys::mkfifo(&fifo).unwrap();
        let (to_file, to_null) = (dir.path().join("lf"), dir.path().join("ln"));
        std::os::unix::fs::symlink(&file, &to_file).unwrap();
        std::os::unix::fs::symlink("/dev/null", &to_null).unwrap();
        for p in [&file, &to_file] {
            let mut got = Vec::new();
            let mut f = open_if_regular(p).expect("a regular file");
            std::io::Read::read_to_end(&mut f, &mut got).unwrap();
            assert_eq!(got, b"x");
        }
        for p in [Path::new("/dev/null"), &to_null, &fifo, dir.path()] {
            assert!(open_if_regular(p).is_none(), "{}", p.display());
        }
    }

    // A path under a process's /proc directory gives that directory (a
    // thread's too) and the path inside its root; others give neither;
    // only a map_files link is taken as one.
    #[test]
    fn proc_paths_give_their_process_and_root_path() {
        let got = |p: &str| {
            let (d, inside) = proc_dir_of(p.as_bytes());
            let d = d.map(|d| d.to_str().unwrap().to_string());
            (
                d,
                inside.map(|i| std::str::from_utf8(i).unwrap().to_string()),
            )
        };
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            got("/proc/12/root/usr/lib/x.so"),
            (s("/proc/12"), s("/usr/lib/x.so"))
        );
        assert_eq!(got("/proc/12/root"), (s("/proc/12"), s("/")));
        assert_eq!(got("/proc/12/map_files/1-2"), (s("/proc/12"), None));
        assert_eq!(
            got("/proc/12/task/13/root/a"),
            (s("/proc/12/task/13"), s("/a"))
        );
        assert_eq!(got("/proc/12/rootx/a"), (s("/proc/12"), None));
        assert_eq!(got("/proc/self/root/a"), (None, None));
        assert_eq!(got("/usr/lib/x.so"), (None, None));
        // only map_files links lead straight to a file
        for (p, is) in [
            ("/proc/12/map_files/7f00-7f10", true),
            ("/proc/12/task/13/map_files/7f00-7f10", true),
            ("/proc/12/map_files/7f00-7f10/x", false),
            ("/proc/12/cwd/map_files/7f00-7f10", false),
            ("/proc/12/map_files/7f00", false),
            ("/tmp/map_files/7f00-7f10", false),
        ] {
            assert_eq!(is_map_file(p.as_bytes()), is, "{p}");
        }
    }

    // The file reader finds the note through PT_NOTE and survives a truncated file.
    #[test]
    fn reads_from_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let img = elf::tests::tiny_elf(
            true,
            false,
            &elf::tests::note(false, b"GNU\0", 3, &[0x5a; 16]),
        );
        let p = dir.join("a.elf");
        std::fs::write(&p, &img).unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(read_build_id_from_file(&f).unwrap(), Some(vec![0x5a; 16]));
        std::fs::write(&p, &img[..0x104]).unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(read_build_id_from_file(&f).unwrap(), None);
    }

    // The vDSO of this process has a build id on x86-64 Linux.
    #[test]
    fn vdso_has_build_id() {
        assert!(vdso_build_id().is_some());
    }

    /// An ELF64 header claiming `phnum` program headers of `phentsize` bytes
    /// at offset 64.
    fn elf_header(phentsize: u16, phnum: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&phentsize.to_le_bytes());
        b[56..58].copy_from_slice(&phnum.to_le_bytes());
        b
    }

    /// A PT_NOTE program header for `size` bytes at `off`.
    fn pt_note(off: u64, size: u64) -> Vec<u8> {
        let mut p = vec![0u8; 56];
        p[..4].copy_from_slice(&4u32.to_le_bytes());
        p[8..16].copy_from_slice(&off.to_le_bytes());
        p[32..40].copy_from_slice(&size.to_le_bytes());
        p
    }

    // e_phentsize = e_phnum = 65535 in a sparse 4 GiB file is refused without
    // reading (or allocating) the claimed 4 GiB of program headers.
    #[test]
    fn huge_program_header_table_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("huge.elf");
        std::fs::write(&p, elf_header(65535, 65535)).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(5 << 30).unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(read_build_id_from_file(&f).unwrap(), None);
    }

    // Note bytes are read within one budget per file: an id behind 1 MiB of
    // other notes is not reached, one in the first segment is.
    #[test]
    fn note_budget_caps_the_bytes_read() {
        let tmp = tempfile::tempdir().unwrap();
        let id_note = elf::tests::note(false, b"GNU\0", elf::NT_GNU_BUILD_ID, &[7; 20]);
        let data_at = 64 + 2 * 56;
        let mut img = elf_header(56, 2);
        img.extend(pt_note(data_at + MAX_NOTE_BYTES, id_note.len() as u64));
        img.extend(pt_note(data_at, MAX_NOTE_BYTES));
        img.resize((data_at + MAX_NOTE_BYTES) as usize, 0);
        img.extend(&id_note);
        let p = tmp.path().join("first.elf");
        std::fs::write(&p, &img).unwrap();
        let found = read_build_id_from_file(&File::open(&p).unwrap()).unwrap();
        assert_eq!(found, Some(vec![7; 20]));
        // the same segments, the big one first: the budget is spent on it
        img[64..64 + 56].copy_from_slice(&pt_note(data_at, MAX_NOTE_BYTES));
        img[120..176].copy_from_slice(&pt_note(data_at + MAX_NOTE_BYTES, id_note.len() as u64));
        std::fs::write(&p, &img).unwrap();
        let found = read_build_id_from_file(&File::open(&p).unwrap()).unwrap();
        assert_eq!(found, None);
    }
}
