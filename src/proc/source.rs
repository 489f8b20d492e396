//! The two VMA sources over an open `/proc/PID/maps`: the PROCMAP_QUERY walk
//! and the text parser. Both return the same [`Vma`]s, build ids resolved.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use super::idcache::BuildIdPolicy;
use super::idcache::{resolve, LocalBuildIds};
use crate::memo::Slots;
use crate::model::{
    BuildId, Name, Perms, Selection, Source, Vma, MAX_BUILD_ID, PATH_MAX, TOOLONG_NAME,
    VSYSCALL_NAME,
};
use crate::sys::{self, ProcmapQuery};

/// Which VMA source to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceChoice {
    /// PROCMAP_QUERY, falling back to text when the kernel lacks it.
    Auto,
    /// Only PROCMAP_QUERY.
    Ioctl,
    /// Only text maps.
    Text,
}

/// What one scan worker keeps from one maps file to the next: its copy of
/// the build-id answers, one copy of each name it read and the buffer the
/// ioctl writes names into.
#[derive(Default)]
pub struct Local {
    pub ids: LocalBuildIds,
    pub names: Names,
    name_buf: NameBuf,
}

/// The PROCMAP_QUERY name buffer, made once per worker: on the stack it
/// cost a 4 KiB `memset` per process (8 MB at 2000 processes), on the heap
/// per process it made the allocator consolidate its small free chunks.
struct NameBuf(Box<[u8]>);

impl Default for NameBuf {
    fn default() -> Self {
        NameBuf(vec![0; MAX_NAME].into_boxed_slice())
    }
}

/// One shared copy of each VMA name a worker read (a library's name is
/// read again for each of its VMAs and in every process that maps it), so
/// a VMA costs no allocation of its own. Up to `NAMES_BYTES` of names
/// are kept; past that the table starts again, so a process of many
/// distinct names cannot grow it.
#[derive(Default)]
pub struct Names {
    set: HashSet<Arc<[u8]>, foldhash::fast::RandomState>,
    /// Bytes `set` holds, each name counted with [`NAME_ENTRY_BYTES`].
    bytes: usize,
    /// The names given last, one per slot: most names are found here, with
    /// no hash and one compare (see [`crate::memo`]). They hold at most
    /// `NAME_SLOTS` names more than `set`'s budget.
    recent: Slots<Arc<[u8]>, (), NAME_SLOTS>,
}

/// Slots of [`Names::recent`].
const NAME_SLOTS: usize = 64;

/// Bytes of names one worker keeps at most.
const NAMES_BYTES: usize = 1 << 20;
/// What a kept name costs besides its bytes: the table's slot, the shared
/// copy's counts and the allocator's rounding (a helper measured 1.13-1.25
/// MiB held at the budget with short names counted at 48).
const NAME_ENTRY_BYTES: usize = 64;

impl Names {
    /// The shared copy of `name` (none for anonymous memory).
    pub fn get(&mut self, name: &[u8]) -> Name {
        if name.is_empty() {
            return Name::EMPTY;
        }
        if let Some((known, ())) = self.recent.find(name) {
            return Name::shared(known.clone());
        }
        let shared = match self.set.get(name) {
            Some(known) => known.clone(),
            None => {
                let cost = NAME_ENTRY_BYTES + name.len();
                if self.bytes + cost > NAMES_BYTES {
                    // a new table: `clear` would keep the old one's slots
                    self.set = HashSet::default();
                    self.bytes = 0;
                }
                let new: Arc<[u8]> = Arc::from(name);
                self.bytes += cost;
                self.set.insert(new.clone());
                new
            }
        };
        self.recent.put::<[u8]>(shared.clone(), ());
        Name::shared(shared)
    }
}

/// The name buffer: PATH_MAX, so longer names (ENAMETOOLONG) are the ones
/// the text parser also names `//toolong`.
const MAX_NAME: usize = PATH_MAX;

/// What each VMA read is handed to, in address order, as it is read; an
/// error it returns ends the walk with that error.
pub type VmaSink<'a> = dyn FnMut(Vma) -> io::Result<()> + 'a;

/// Walks the VMAs of an open maps file with PROCMAP_QUERY, handing each to
/// `push`. Errors are the ioctl's: ENOTTY means the kernel lacks it (it
/// comes before any VMA), ESRCH that the memory is gone.
pub fn walk_ioctl(
    file: &File,
    sel: Selection,
    max_vmas: usize,
    ids: BuildIdPolicy<'_>,
    local: &mut Local,
    push: &mut VmaSink<'_>,
) -> io::Result<()> {
    let fd = file.as_fd();
    let filter = match sel {
        Selection::Exec => sys::PROCMAP_QUERY_VMA_EXECUTABLE,
        Selection::ExecAndData => 0,
    };
    let Local {
        ids: local_ids,
        names,
        name_buf: NameBuf(name),
    } = local;
    let mut addr = 0u64;
    for visited in 0.. {
        if visited == max_vmas {
            return Err(TooManyMaps(max_vmas).into());
        }
        let mut q = ProcmapQuery {
            query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA | filter,
            query_addr: addr,
            ..Default::default()
        };
        let mut toolong = false;
        match sys::procmap_query(fd, &mut q, name, &mut []) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                q = ProcmapQuery {
                    query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA | filter,
                    query_addr: addr,
                    ..Default::default()
                };
                sys::procmap_query(fd, &mut q, &mut [], &mut [])?;
                toolong = true;
            }
            Err(e) => return Err(e),
        }
        if q.vma_end <= addr && addr != 0 {
            // The kernel never returns a VMA behind the query address; stop
            // rather than loop if it ever did.
            break;
        }
        addr = q.vma_end;
        let perms = Perms((q.vma_flags & 0x0f) as u8);
        if !sel.wants(perms) {
            continue;
        }
        let name_len = (q.vma_name_size as usize).saturating_sub(1).min(name.len());
        let mut vma = Vma {
            start: q.vma_start,
            end: q.vma_end,
            offset: q.vma_offset,
            perms,
            dev_major: q.dev_major,
            dev_minor: q.dev_minor,
            inode: q.inode,
            name: names.get(match toolong {
                true => TOOLONG_NAME,
                false => &name[..name_len],
            }),
            build_id: None,
        };
        if let Some(cache) = ids.cache {
            vma.build_id = resolve(&vma, cache, local_ids, ids, || kernel_build_id(fd, &vma));
        }
        push(vma)?;
    }
    Ok(())
}

/// The build id the kernel read for `vma`'s file (PROCMAP_QUERY asked
/// again for it), if the VMA there is still `vma`.
fn kernel_build_id(fd: std::os::fd::BorrowedFd<'_>, vma: &Vma) -> Option<BuildId> {
    let mut bid = [0u8; MAX_BUILD_ID];
    let mut q = ProcmapQuery {
        query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA,
        query_addr: vma.start,
        ..Default::default()
    };
    // the answer must be about the same file: the process may have mapped
    // another over this place since (its id would be cached for this file,
    // for every process)
    let same = |q: &ProcmapQuery| {
        (q.vma_start, q.vma_end, q.vma_offset) == (vma.start, vma.end, vma.offset)
            && (q.dev_major, q.dev_minor, q.inode) == (vma.dev_major, vma.dev_minor, vma.inode)
    };
    match sys::procmap_query(fd, &mut q, &mut [], &mut bid) {
        Ok(()) if same(&q) && q.build_id_size > 0 => {
            BuildId::new(&bid[..(q.build_id_size as usize).min(MAX_BUILD_ID)])
        }
        _ => None,
    }
}

/// Bytes of text maps parsed at a time: the file is read in pieces of
/// whole lines, so its size (which a process can make hundreds of MB with
/// long names) is never held.
const TEXT_CHUNK: usize = 64 * 1024;

/// Bytes of a line held at most: a PATH_MAX path with every byte escaped
/// as `\ooo`, and the fields before it. A longer line (`d_path` has no
/// limit) has its fields read from this much of its start and is named
/// `//toolong`; the rest of it is skipped unread into memory.
const MAX_LINE: usize = 4 * PATH_MAX + 256;

/// Reads and parses a text maps file a piece at a time, handing each VMA to
/// `push`. `[vsyscall]` is dropped, as the ioctl never reports it. Stops
/// with [`TooManyMaps`] after `max_vmas` lines.
pub fn walk_text(
    file: &mut File,
    sel: Selection,
    max_vmas: usize,
    ids: BuildIdPolicy<'_>,
    local: &mut Local,
    push: &mut VmaSink<'_>,
) -> io::Result<()> {
    let mut text: Vec<u8> = Vec::with_capacity(TEXT_CHUNK + MAX_LINE);
    // where `text` starts in the file, in bytes and lines
    let (mut offset, mut line) = (0usize, 0usize);
    // in the rest of an over-long line, already handed on: drop to its end
    let mut skipping = false;
    let keep = |perms, name: &[u8]| sel.wants(perms) && name != VSYSCALL_NAME;
    let Local {
        ids: local_ids,
        names,
        ..
    } = local;
    let mut each = |vma: Vma| -> io::Result<()> {
        let mut vma = vma;
        if let Some(cache) = ids.cache {
            vma.build_id = resolve(&vma, cache, local_ids, ids, || None);
        }
        push(vma)
    };
    loop {
        let have = text.len();
        text.resize(have + TEXT_CHUNK, 0);
        let n = loop {
            match file.read(&mut text[have..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        text.truncate(have + n.as_ref().map_or(0, |&n| n));
        let n = n?;
        if skipping {
            let Some(nl) = text.iter().position(|&b| b == b'\n') else {
                offset += text.len();
                text.clear();
                if n == 0 {
                    return Ok(());
                }
                continue;
            };
            offset += nl + 1;
            line += 1;
            text.drain(..=nl);
            skipping = false;
        }
        let mut end = match n {
            0 => text.len(),
            _ => text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1),
        };
        let mut lines = text[..end].iter().filter(|&&b| b == b'\n').count();
        if line + lines >= max_vmas {
            // only the lines up to the cap, then stop
            // (none when an over-long line just ended at the cap)
            lines = max_vmas - line;
            end = match lines.checked_sub(1) {
                None => 0,
                Some(last) => text[..end]
                    .iter()
                    .enumerate()
                    .filter(|&(_, &b)| b == b'\n')
                    .nth(last)
                    .map_or(end, |(i, _)| i + 1),
            };
        }
        let name_of = |n: &[u8]| names.get(n);
        super::maps_text::each_vma(&text[..end], (line, offset), keep, name_of, &mut each)?;
        line += lines;
        offset += end;
        text.drain(..end);
        if line >= max_vmas && !(n == 0 && text.is_empty()) {
            return Err(TooManyMaps(max_vmas).into());
        }
        if n == 0 {
            return Ok(());
        }
        if text.len() > MAX_LINE {
            // the start of a line too long to hold: its fields are here
            let at = (line, offset);
            let toolong = names.get(TOOLONG_NAME);
            let name_of = |_: &[u8]| toolong.clone();
            super::maps_text::each_vma(&text[..MAX_LINE], at, keep, name_of, &mut each)?;
            offset += text.len();
            text.clear();
            skipping = true;
        }
    }
}

/// After a text walk chosen with `--source text`: ESRCH if the memory the
/// file was opened on is gone. A process that execs (or exits) mid-walk
/// leaves its old maps file reading as a plain end of file, where the
/// ioctl says ESRCH; one query on the same descriptor tells the two apart,
/// so the process is counted cut short as the ioctl walk counts it. A
/// kernel without the ioctl (ENOTTY, the fallback's case, where it is not
/// asked) cannot tell: the walk stands as complete.
fn memory_still_there(file: &File) -> io::Result<()> {
    let mut q = ProcmapQuery {
        query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA,
        ..Default::default()
    };
    match sys::procmap_query(file.as_fd(), &mut q, &mut [], &mut []) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(e),
        _ => Ok(()),
    }
}

/// How each maps file is walked.
#[derive(Debug, Clone, Copy)]
pub struct Walk {
    pub selection: Selection,
    pub source: SourceChoice,
    /// VMAs one walk visits (kept or not) before it stops with
    /// [`TooManyMaps`]; see [`walk_limit`].
    pub max_vmas: usize,
}

/// A walk went on past the VMAs a process can have at once: it maps new
/// ones ahead of the walk (and unmaps behind it) as fast as they are read,
/// which would otherwise stretch the walk, and the output, for as long as
/// the process lives. What was read is kept.
#[derive(Debug, thiserror::Error)]
#[error("stopped after {0} maps, more than vm.max_map_count allows at once: the process maps them as fast as they are read")]
pub struct TooManyMaps(pub usize);

impl From<TooManyMaps> for io::Error {
    fn from(e: TooManyMaps) -> Self {
        io::Error::other(e)
    }
}

impl TooManyMaps {
    /// Whether `e` is this.
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|e| e.is::<TooManyMaps>())
    }
}

/// The VMAs one walk may visit: vm.max_map_count (read under `proc_root`;
/// 65,530, the kernel's default, when unreadable) and a quarter more, plus
/// 1,024, room for a process that maps while it is read.
pub fn walk_limit(proc_root: &Path) -> usize {
    let mut text = String::new();
    let max = File::open(proc_root.join("sys/vm/max_map_count"))
        .and_then(|f| f.take(32).read_to_string(&mut text))
        .ok()
        .and_then(|_| text.trim().parse::<usize>().ok())
        .unwrap_or(65_530);
    max.saturating_add(max / 4).saturating_add(1024)
}

/// Reads one maps file with the chosen source, handing each VMA to `push`
/// with the source it came from as it is read; returns the source used.
/// The first ENOTTY (a kernel without PROCMAP_QUERY, before any VMA) sets
/// `no_ioctl`, so every later file goes straight to the text parser; with
/// [`SourceChoice::Ioctl`] it is returned instead.
pub fn read_maps_file(
    path: &Path,
    walk: Walk,
    ids: BuildIdPolicy<'_>,
    local: &mut Local,
    no_ioctl: &AtomicBool,
    push: &mut dyn FnMut(Source, Vma) -> io::Result<()>,
) -> io::Result<Source> {
    let (sel, max) = (walk.selection, walk.max_vmas);
    let mut file = File::open(path)?;
    if !no_ioctl.load(Ordering::Relaxed) {
        let mut pushed = false;
        let mut each = |v| {
            pushed = true;
            push(Source::Ioctl, v)
        };
        match walk_ioctl(&file, sel, max, ids, local, &mut each) {
            Ok(()) => return Ok(Source::Ioctl),
            // only before the first VMA: after it, a text walk would repeat them
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) && !pushed => {
                no_ioctl.store(true, Ordering::Relaxed);
                if walk.source == SourceChoice::Ioctl {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    walk_text(&mut file, sel, max, ids, local, &mut |v| {
        push(Source::Text, v)
    })?;
    if walk.source == SourceChoice::Text {
        memory_still_there(&file)?;
    }
    Ok(Source::Text)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A name read again is the same shared copy and anonymous memory is no
    // copy at all; the table keeps exactly as many
    // names as its budget counts (each with NAME_ENTRY_BYTES), and the next
    // one starts it again instead of growing it.
    #[test]
    fn names_are_shared_within_a_budget() {
        let mut names = Names::default();
        let empty = names.get(b"");
        assert!(empty.is_empty() && empty.shares(&names.get(b"")));
        assert!(
            names.set.is_empty() && names.bytes == 0,
            "no entry for anonymous memory"
        );
        let a = names.get(b"/usr/lib/libc.so.6");
        let b = names.get(b"/usr/lib/libm.so.6");
        // not only the last one given
        assert!(a.shares(&names.get(b"/usr/lib/libc.so.6")));
        assert!(b.shares(&names.get(b"/usr/lib/libm.so.6")));
        assert_eq!(names.bytes, 2 * (NAME_ENTRY_BYTES + 18));
        let name = |i: usize| format!("/{i:0>1000}").into_bytes();
        let fit = (NAMES_BYTES - names.bytes) / (NAME_ENTRY_BYTES + 1001);
        let kept: Vec<Name> = (0..fit).map(|i| names.get(&name(i))).collect();
        assert_eq!(names.set.len(), fit + 2);
        assert!(names.bytes <= NAMES_BYTES);
        // all still kept: the same copies
        for (i, k) in kept.iter().enumerate() {
            assert!(k.shares(&names.get(&name(i))), "name {i} kept");
        }
        assert!(a.shares(&names.get(b"/usr/lib/libc.so.6")));
        // one more does not fit: a new table with it alone
        let over = names.get(&name(fit));
        assert_eq!(*over, *name(fit));
        assert_eq!((names.set.len(), names.bytes), (1, NAME_ENTRY_BYTES + 1001));
        // once the recent names no longer hold it (another name took its
        // slot), a name of the old table is a new copy
        let libc = &b"/usr/lib/libc.so.6"[..];
        for i in 0..10_000 {
            if names.recent.find(libc).is_none() {
                break;
            }
            names.get(format!("/r{i}").as_bytes());
        }
        assert!(names.recent.find(libc).is_none());
        let again = names.get(b"/usr/lib/libc.so.6");
        assert_eq!(*again, *b"/usr/lib/libc.so.6");
        assert!(!a.shares(&again), "the table was started again");
    }
}
