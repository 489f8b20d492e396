//! The PROCMAP_QUERY side of a maps walk: the walk of an open maps file
//! VMA by VMA, and the single questions the text walk asks of it (a name,
//! a build id, whether the memory is still there, whether it answers).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use super::idcache::{resolve, BuildIdPolicy};
use super::local::{Local, NameBuf};
use super::name_memo::{Known, NameScope};
use super::walk_cap::TooManyMaps;
use crate::model::{BuildId, FileKey, Perms, Selection, Vma, MAX_BUILD_ID, TOOLONG_NAME};
use crate::sys::{self, ProcmapQuery};

/// What each VMA read is handed to, in address order, as it is read; an
/// error it returns ends the walk with that error.
pub type VmaSink<'a> = dyn FnMut(Vma) -> io::Result<()> + 'a;

/// Misses of a walk without names (a VMA of a file the memo does not
/// share, or of anonymous memory, each asked twice) after which a process
/// is read with names.
const MAX_MISSES: u32 = 4;

/// Walks the VMAs of an open maps file with PROCMAP_QUERY from address
/// `from.0`, `from.1` VMAs visited before it, handing each to `push`.
/// Errors are the ioctl's: ENOTTY means the kernel lacks it (it comes
/// before any VMA), ESRCH that the memory is gone.
///
/// Names come from the worker's name memo (`name_memo`) where it may
/// share them: once a process shows a file whose name is shared, its VMAs
/// are asked without names, and only a VMA the memo does not name is asked
/// again with its name (after four of those, the rest of the process is
/// read with names).
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
    let scope = NameScope::of(ids).filter(|_| sel == Selection::Exec);
    let (mut nameless, mut misses) = (false, 0);
    let mut addr = from;
    for visited in visited_before.. {
        if visited == max_vmas {
            return Err(TooManyMaps(max_vmas).into());
        }
        let mut shared = None;
        let answer = match (&scope, nameless) {
            (Some(scope), true) => match ask(fd, flags, addr, &mut [])? {
                Some((q, _)) => match (q.inode, memo.get(scope, file_key(&q))) {
                    (1.., Known::Shared(n)) => {
                        shared = Some(n.clone());
                        Some((q, false))
                    }
                    _ => {
                        // (the vDSO too, and a JIT's code: anonymous memory
                        // is named by the kernel each time)
                        misses += 1;
                        nameless = misses < MAX_MISSES;
                        ask(fd, flags, addr, name)?
                    }
                },
                None => None,
            },
            _ => ask(fd, flags, addr, name)?,
        };
        let Some((q, toolong)) = answer else {
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
        let learn = shared.is_none() && q.inode != 0 && scope.is_some();
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
        if let (true, Some(scope)) = (learn, &scope) {
            match memo.get(scope, file_key(&q)) {
                // a file another process showed: the rest without names
                Known::Shared(_) => nameless = misses < MAX_MISSES,
                Known::Own => {}
                Known::Unknown => _ = memo.learn(scope, &vma),
            }
        }
        if let Some(cache) = ids.cache {
            vma.build_id = resolve(&vma, cache, local_ids, ids, || kernel_build_id(fd, &vma));
        }
        push(vma)?;
    }
    Ok(())
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
