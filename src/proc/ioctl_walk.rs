//! The PROCMAP_QUERY side of a maps walk: the walk of an open maps file
//! VMA by VMA, and the single questions the text walk asks of it (a name,
//! a build id, whether the memory is still there, whether it answers).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use super::idcache::{resolve, BuildIdPolicy};
use super::local::{Local, NameBuf};
use super::name_memo::{Known, NameMemo, NameScope};
use super::walk_cap::TooManyMaps;
use crate::model::{BuildId, FileKey, Name, Perms, Selection, Vma, MAX_BUILD_ID, TOOLONG_NAME};
use crate::sys::{self, ProcmapQuery};

/// What each VMA read is handed to, in address order, as it is read; an
/// error it returns ends the walk with that error.
pub type VmaSink<'a> = dyn FnMut(Vma) -> io::Result<()> + 'a;

/// Misses of a process's walk (a VMA asked without its name that the memo
/// does not name after all, asked again) after which the rest of it is
/// read with names.
const MAX_MISSES: u32 = 4;

/// Walks the VMAs of an open maps file with PROCMAP_QUERY from address
/// `from.0`, `from.1` VMAs visited before it, handing each to `push`.
/// Errors are the ioctl's: ENOTTY means the kernel lacks it (it comes
/// before any VMA), ESRCH that the memory is gone.
///
/// Names come from the worker's name memo (`name_memo`) where it may
/// share them: a VMA is asked without its name where the last process of
/// the same program had a shared name at that place of its walk
/// (`Naming`); one the memo does not name after all is asked again with
/// its name.
pub fn walk_ioctl(
    file: &File,
    sel: Selection,
    (from, visited_before): (u64, usize),
    max_vmas: usize,
    ids: BuildIdPolicy<'_>,
    local: &mut Local,
    push: &mut VmaSink<'_>,
) -> io::Result<()> {
    let fd = file.as_fd();
    let flags = sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA
        | match sel {
            Selection::Exec => sys::PROCMAP_QUERY_VMA_EXECUTABLE,
            Selection::ExecAndData => 0,
        };
    let Local {
        ids: local_ids,
        names,
        name_memo: memo,
        name_buf: NameBuf(name),
        ..
    } = local;
    // executable VMAs only: with every VMA (`--source ioctl -d`) most are
    // anonymous, each asked again for its name
    let mut naming = Naming::new(match sel {
        Selection::Exec => NameScope::of(ids, memo),
        Selection::ExecAndData => None,
    });
    let mut addr = from;
    for visited in visited_before.. {
        if visited == max_vmas {
            return Err(TooManyMaps(max_vmas).into());
        }
        let Some((q, toolong, shared)) = naming.ask(fd, flags, addr, name, memo)? else {
            break;
        };
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
        let from_memo = shared.is_some();
        let mut vma = Vma {
            start: q.vma_start,
            end: q.vma_end,
            offset: q.vma_offset,
            perms,
            dev_major: q.dev_major,
            dev_minor: q.dev_minor,
            inode: q.inode,
            name: shared.unwrap_or_else(|| {
                names.get(match toolong {
                    true => TOOLONG_NAME,
                    false => &name[..name_len],
                })
            }),
            build_id: None,
        };
        if let Some(cache) = ids.cache {
            vma.build_id = resolve(&vma, cache, local_ids, ids, || kernel_build_id(fd, &vma));
        }
        naming.note(&vma, from_memo, memo);
        push(vma)?;
    }
    naming.finish(memo);
    Ok(())
}

/// How one process's walk gets its names (see [`walk_ioctl`]): a VMA is
/// asked without its name where the last process the worker read with the
/// same first file (its executable) had, at the same place in its walk, a
/// VMA whose name the memo shares: processes of one program map their
/// libraries in one order.
struct Naming<'a> {
    /// Where names may be shared; `None`: every VMA asked with its name.
    scope: Option<NameScope<'a>>,
    /// That last process's walk: per VMA, whether its name was shared.
    layout: Vec<bool>,
    /// This process's walk so far, and its first file.
    seen: Vec<bool>,
    first: Option<FileKey>,
    misses: u32,
}

impl<'a> Naming<'a> {
    fn new(scope: Option<NameScope<'a>>) -> Self {
        Naming {
            scope,
            layout: Vec::new(),
            seen: Vec::new(),
            first: None,
            misses: 0,
        }
    }

    /// The walk's next answer (see [`ask`]), with the memo's name for it
    /// when it was asked without one.
    fn ask(
        &mut self,
        fd: BorrowedFd<'_>,
        flags: u64,
        addr: u64,
        name: &mut [u8],
        memo: &NameMemo,
    ) -> io::Result<Option<(ProcmapQuery, bool, Option<Name>)>> {
        let nameless = self.scope.is_some()
            && self.misses < MAX_MISSES
            && self.layout.get(self.seen.len()) == Some(&true);
        if !nameless {
            return Ok(ask(fd, flags, addr, name)?.map(|(q, long)| (q, long, None)));
        }
        let Some((q, _)) = ask(fd, flags, addr, &mut [])? else {
            return Ok(None);
        };
        if let (1.., Known::Shared(n)) = (q.inode, memo.get(file_key(&q))) {
            return Ok(Some((q, false, Some(n.clone()))));
        }
        // another file than the layout said: asked again with the name
        self.misses += 1;
        Ok(ask(fd, flags, addr, name)?.map(|(q, long)| (q, long, None)))
    }

    /// Notes `vma` (named from the memo, or read with its name and then
    /// judged into `memo` if new) in this process's layout. A file the memo
    /// shares, shown by another name, is no longer shared.
    fn note(&mut self, vma: &Vma, from_memo: bool, memo: &mut NameMemo) {
        let Some(scope) = &self.scope else {
            return;
        };
        let file = vma.file_key();
        let shared = from_memo
            || file.is_some_and(|file| match memo.get(file) {
                Known::Shared(n) if n.shares(&vma.name) || **n == *vma.name => true,
                Known::Shared(_) => {
                    memo.disown(file);
                    false
                }
                Known::Own => false,
                Known::Unknown => memo.learn(scope, vma),
            });
        if self.seen.is_empty() {
            self.first = file;
            self.layout = file.map(|f| memo.take_layout(f)).unwrap_or_default();
        }
        self.seen.push(shared);
    }

    /// Keeps this process's layout for the next process of its first file.
    fn finish(self, memo: &mut NameMemo) {
        if let (Some(_), Some(first)) = (&self.scope, self.first) {
            memo.keep_layout(first, self.seen);
        }
    }
}

/// The file an answer names (inode 0 for none).
fn file_key(q: &ProcmapQuery) -> FileKey {
    FileKey {
        dev_major: q.dev_major,
        dev_minor: q.dev_minor,
        inode: q.inode,
    }
}

/// The walk's query: the VMA at or after `addr` that `flags` select, its
/// name written into `name` (empty: not asked), and whether the name was
/// PATH_MAX or longer (the VMA then asked again without it); `None` past
/// the last VMA.
fn ask(
    fd: BorrowedFd<'_>,
    flags: u64,
    addr: u64,
    name: &mut [u8],
) -> io::Result<Option<(ProcmapQuery, bool)>> {
    let query = || ProcmapQuery {
        query_flags: flags,
        query_addr: addr,
        ..Default::default()
    };
    let mut q = query();
    match sys::procmap_query(fd, &mut q, name, &mut []) {
        Ok(()) => Ok(Some((q, false))),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
            q = query();
            match sys::procmap_query(fd, &mut q, &mut [], &mut []) {
                Ok(()) => Ok(Some((q, true))),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// The build id the kernel read for `vma`'s file (PROCMAP_QUERY asked
/// again for it), if the VMA there is still `vma`.
pub(super) fn kernel_build_id(fd: BorrowedFd<'_>, vma: &Vma) -> Option<BuildId> {
    let mut bid = [0u8; MAX_BUILD_ID];
    // the answer must be about the same file: the process may have mapped
    // another over this place since (its id would be cached for this file,
    // for every process)
    match query_at(fd, vma.start, &mut [], &mut bid) {
        Ok(q) if is_still(&q, vma) && q.build_id_size > 0 => {
            BuildId::new(&bid[..(q.build_id_size as usize).min(MAX_BUILD_ID)])
        }
        _ => None,
    }
}

/// PROCMAP_QUERY of the VMA covering `addr` or the next one, any kind,
/// with its name into `name` and build id into `build_id` (empty: not
/// asked).
fn query_at(
    fd: BorrowedFd<'_>,
    addr: u64,
    name: &mut [u8],
    build_id: &mut [u8],
) -> io::Result<ProcmapQuery> {
    let mut q = ProcmapQuery {
        query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA,
        query_addr: addr,
        ..Default::default()
    };
    sys::procmap_query(fd, &mut q, name, build_id).map(|()| q)
}

/// Whether the answer `q` is `vma` still: the same place, file offset and
/// file.
fn is_still(q: &ProcmapQuery, vma: &Vma) -> bool {
    (q.vma_start, q.vma_end, q.vma_offset) == (vma.start, vma.end, vma.offset)
        && (q.dev_major, q.dev_minor, q.inode) == (vma.dev_major, vma.dev_minor, vma.inode)
}

/// What PROCMAP_QUERY said of a VMA read from the text.
pub(super) enum Asked<'b> {
    /// It is still there, with this name.
    Named(&'b [u8]),
    /// Another VMA is there now, or none, or the memory is gone.
    Gone,
    /// No answer (a kernel without the ioctl).
    Unanswered,
}

/// The name PROCMAP_QUERY gives the VMA at `vma`'s place, if it is still
/// `vma`.
pub(super) fn ioctl_name<'b>(fd: BorrowedFd<'_>, vma: &Vma, buf: &'b mut [u8]) -> Asked<'b> {
    let gone = |e: &io::Error| matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH));
    let (q, toolong) = match query_at(fd, vma.start, buf, &mut []) {
        Ok(q) => (q, false),
        Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
            match query_at(fd, vma.start, &mut [], &mut []) {
                Ok(q) => (q, true),
                Err(e) if gone(&e) => return Asked::Gone,
                Err(_) => return Asked::Unanswered,
            }
        }
        Err(e) if gone(&e) => return Asked::Gone,
        Err(_) => return Asked::Unanswered,
    };
    match (is_still(&q, vma), toolong) {
        (false, _) => Asked::Gone,
        (true, true) => Asked::Named(TOOLONG_NAME),
        (true, false) => {
            let len = (q.vma_name_size as usize).saturating_sub(1).min(buf.len());
            Asked::Named(&buf[..len])
        }
    }
}

/// After a text walk chosen with `--source text`: ESRCH if the memory the
/// file was opened on is gone. A process that execs (or exits) mid-walk
/// leaves its old maps file reading as a plain end of file, where the
/// ioctl says ESRCH; one query on the same descriptor tells the two apart,
/// so the process is counted cut short as the ioctl walk counts it. A
/// kernel without the ioctl (ENOTTY) cannot tell: the walk stands as
/// complete, and `Ok(false)` says the ioctl did not answer.
pub(super) fn memory_still_there(file: &File) -> io::Result<bool> {
    match query_at(file.as_fd(), 0, &mut [], &mut []) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(e),
        Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => Ok(false),
        _ => Ok(true),
    }
}

/// Whether PROCMAP_QUERY answers on `fd` (anything but ENOTTY: a kernel
/// before 6.11, or a file that is not a maps file).
pub(super) fn ioctl_answers(fd: BorrowedFd<'_>) -> bool {
    let r = query_at(fd, 0, &mut [], &mut []);
    !matches!(r, Err(e) if e.raw_os_error() == Some(libc::ENOTTY))
}
