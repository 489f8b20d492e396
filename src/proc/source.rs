//! The two VMA sources over an open `/proc/PID/maps`: the PROCMAP_QUERY walk
//! and the text parser. Both return the same [`Vma`]s, build ids resolved.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

pub use super::idcache::BuildIdPolicy;
use super::idcache::{resolve, LocalBuildIds};
use super::maps_text::{self, NameText};
pub use super::names::Names;
pub use super::walk_cap::{is_walk_cap, walk_limit, LongNames, TooManyMaps, LONG_NAME_TEXT};
use crate::model::{
    BuildId, Perms, Selection, Source, Vma, MAX_BUILD_ID, PATH_MAX, TOOLONG_NAME, VSYSCALL_NAME,
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
    text_buf: TextBuf,
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

/// The name buffer: PATH_MAX, so longer names (ENAMETOOLONG) are the ones
/// the text parser also names `//toolong`.
const MAX_NAME: usize = PATH_MAX;

/// What each VMA read is handed to, in address order, as it is read; an
/// error it returns ends the walk with that error.
pub type VmaSink<'a> = dyn FnMut(Vma) -> io::Result<()> + 'a;

/// Walks the VMAs of an open maps file with PROCMAP_QUERY from address
/// `from.0`, `from.1` VMAs visited before it, handing each to `push`.
/// Errors are the ioctl's: ENOTTY means the kernel lacks it (it comes
/// before any VMA), ESRCH that the memory is gone.
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
    let filter = match sel {
        Selection::Exec => sys::PROCMAP_QUERY_VMA_EXECUTABLE,
        Selection::ExecAndData => 0,
    };
    let Local {
        ids: local_ids,
        names,
        name_buf: NameBuf(name),
        ..
    } = local;
    let mut addr = from;
    for visited in visited_before.. {
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
fn kernel_build_id(fd: BorrowedFd<'_>, vma: &Vma) -> Option<BuildId> {
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

/// Bytes of text maps read at a time: the file is read in pieces of
/// whole lines, so its size (which a process can make hundreds of MB with
/// long names) is never held.
const TEXT_CHUNK: usize = 64 * 1024;

/// Bytes of a line held at most: a PATH_MAX path with every byte escaped
/// as `\ooo`, and the fields before it. A longer line (`d_path` has no
/// limit) has its fields read from this much of its start and is named
/// `//toolong`; the rest of it is skipped unread into memory.
const MAX_LINE: usize = 4 * PATH_MAX + 256;

/// The text walk's buffer, made (and zeroed) once per worker: a chunk and
/// the part of a line carried over. Made per process and zeroed before
/// each read it cost 128 KiB of `memset` a process (256 MB at 2000).
struct TextBuf(Box<[u8]>);

impl Default for TextBuf {
    fn default() -> Self {
        TextBuf(vec![0; TEXT_CHUNK + MAX_LINE].into_boxed_slice())
    }
}

/// Reads into `buf`, again after EINTR.
fn read_some(mut file: &File, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// Reads and parses a text maps file a piece at a time, handing each VMA to
/// `push`. `[vsyscall]` is dropped, as the ioctl never reports it. Stops
/// with [`TooManyMaps`] when a line follows the first `max_vmas`.
///
/// With `ioctl` (the descriptor's PROCMAP_QUERY), the text stands for the
/// ioctl walk: a name the text leaves ambiguous (it holds a backslash: the
/// kernel escapes only `\n`, as `\012`, so a literal `\012` reads the
/// same) is asked of the ioctl, and build ids the kernel alone can read
/// are asked of it too, as [`walk_ioctl`] does. At a name of PATH_MAX or
/// more the text is left: the kernel writes such a name whole on every
/// line that maps it (d_path has no limit; a user can make it megabytes
/// long, and map it tens of thousands of times), where the ioctl stops at
/// PATH_MAX. Then `Some((address, lines))` says where the ioctl walk goes
/// on and how many lines the text had. Without the ioctl, such lines stop
/// the walk with [`LongNames`] once they pass [`LONG_NAME_TEXT`] bytes.
pub fn walk_text(
    file: &File,
    sel: Selection,
    max_vmas: usize,
    ids: BuildIdPolicy<'_>,
    local: &mut Local,
    ioctl: bool,
    push: &mut VmaSink<'_>,
) -> io::Result<Option<(u64, usize)>> {
    let Local {
        ids: local_ids,
        names,
        name_buf: NameBuf(name_buf),
        text_buf: TextBuf(buf),
    } = local;
    let fd = ioctl.then(|| file.as_fd());
    // bytes carried over at the buffer's start; where they start in the
    // file, in bytes and lines
    let (mut have, mut offset, mut line) = (0usize, 0usize, 0usize);
    // in the rest of an over-long line, already handed on: drop to its end
    let mut skipping = false;
    // bytes of `//toolong` lines read, against LONG_NAME_TEXT
    let mut long_text = 0usize;
    // hands a line's VMA on; where the ioctl walk goes on after it, if it
    // must and can (a kernel without the ioctl leaves the text the only way)
    let mut each = |names: &mut Names, vma: Vma, text: NameText, line: usize| {
        let end = vma.end;
        let local = (names, &mut *local_ids, &mut name_buf[..]);
        hand_on(vma, text, fd, sel, ids, local, push)?;
        let resume = text == NameText::TooLong && fd.is_some_and(ioctl_answers);
        Ok::<_, io::Error>(resume.then_some((end, line + 1)))
    };
    loop {
        let n = read_some(file, &mut buf[have..])?;
        let filled = have + n;
        let mut pos = 0;
        if skipping {
            let Some(past) = skip_long(&buf[..filled], &mut offset, &mut long_text)? else {
                have = 0;
                if n == 0 {
                    return Ok(None);
                }
                continue;
            };
            (line, pos, skipping) = (line + 1, past, false);
        }
        // whole lines; at the end of the file, all that is left
        let end = match n {
            0 => filled,
            _ => memchr::memrchr(b'\n', &buf[pos..filled]).map_or(pos, |i| pos + i + 1),
        };
        while pos < end {
            if line == max_vmas {
                return Err(TooManyMaps(max_vmas).into());
            }
            let nl = memchr::memchr(b'\n', &buf[pos..end]).map_or(end, |i| pos + i);
            let text = &buf[pos..nl];
            if !text.is_empty() {
                let at = (line, offset);
                let (vma, text) = maps_text::parse_vma(text, at, &mut |n| names.get(n))?;
                if let Some(resume) = each(names, vma, text, line)? {
                    return Ok(Some(resume));
                }
                if text == NameText::TooLong {
                    long_line(&mut long_text, nl + 1 - pos)?;
                }
            }
            offset += nl + 1 - pos;
            line += 1;
            pos = nl + 1;
        }
        if n == 0 {
            return Ok(None);
        }
        have = filled - end;
        if have > MAX_LINE {
            // the start of a line too long to hold: its fields are here
            if line == max_vmas {
                return Err(TooManyMaps(max_vmas).into());
            }
            let toolong = names.get(TOOLONG_NAME);
            let text = &buf[end..end + MAX_LINE];
            let (vma, _) = maps_text::parse_vma(text, (line, offset), &mut |_| toolong.clone())?;
            if let Some(resume) = each(names, vma, NameText::TooLong, line)? {
                return Ok(Some(resume));
            }
            offset += have;
            long_line(&mut long_text, have)?;
            have = 0;
            skipping = true;
        } else {
            buf.copy_within(end..filled, 0);
        }
    }
}

/// Drops the rest of an over-long line from `buf`: where its end is
/// passed, or `None` when all of `buf` is in it; `offset` and `long_text`
/// count the bytes dropped.
fn skip_long(buf: &[u8], offset: &mut usize, long_text: &mut usize) -> io::Result<Option<usize>> {
    let past = memchr::memchr(b'\n', buf).map(|nl| nl + 1);
    let n = past.unwrap_or(buf.len());
    *offset += n;
    long_line(long_text, n)?;
    Ok(past)
}

/// Counts `n` more bytes of `//toolong` lines into `total`: [`LongNames`]
/// once they pass [`LONG_NAME_TEXT`], inside a line or at its end.
fn long_line(total: &mut usize, n: usize) -> io::Result<()> {
    *total += n;
    match *total > LONG_NAME_TEXT {
        true => Err(LongNames(*total).into()),
        false => Ok(()),
    }
}

/// Hands a VMA of a text walk to `push` if `sel` wants it and it is not
/// `[vsyscall]`: an ambiguous name asked of the ioctl (`fd`), the VMA
/// dropped if the ioctl finds it gone (as an ioctl walk would not see
/// it), its build id resolved (asking the kernel through `fd` if it must).
fn hand_on(
    mut vma: Vma,
    text: NameText,
    fd: Option<BorrowedFd<'_>>,
    sel: Selection,
    ids: BuildIdPolicy<'_>,
    (names, local_ids, name_buf): (&mut Names, &mut LocalBuildIds, &mut [u8]),
    push: &mut VmaSink<'_>,
) -> io::Result<()> {
    if !sel.wants(vma.perms) || *vma.name == *VSYSCALL_NAME {
        return Ok(());
    }
    if let (NameText::Ambiguous, Some(fd)) = (text, fd) {
        match ioctl_name(fd, &vma, name_buf) {
            Asked::Named(name) => vma.name = names.get(name),
            Asked::Gone => return Ok(()),
            // a kernel without the ioctl: the text's reading stands
            Asked::Unanswered => {}
        }
    }
    if let Some(cache) = ids.cache {
        vma.build_id = match fd {
            Some(fd) => resolve(&vma, cache, local_ids, ids, || kernel_build_id(fd, &vma)),
            None => resolve(&vma, cache, local_ids, ids, || None),
        };
    }
    push(vma)
}

/// What PROCMAP_QUERY said of a VMA read from the text.
enum Asked<'b> {
    /// It is still there, with this name.
    Named(&'b [u8]),
    /// Another VMA is there now, or none, or the memory is gone.
    Gone,
    /// No answer (a kernel without the ioctl).
    Unanswered,
}

/// The name PROCMAP_QUERY gives the VMA at `vma`'s place, if it is still
/// `vma`.
fn ioctl_name<'b>(fd: BorrowedFd<'_>, vma: &Vma, buf: &'b mut [u8]) -> Asked<'b> {
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
fn memory_still_there(file: &File) -> io::Result<bool> {
    match query_at(file.as_fd(), 0, &mut [], &mut []) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(e),
        Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => Ok(false),
        _ => Ok(true),
    }
}

/// Whether PROCMAP_QUERY answers on `fd` (anything but ENOTTY: a kernel
/// before 6.11, or a file that is not a maps file).
fn ioctl_answers(fd: BorrowedFd<'_>) -> bool {
    let r = query_at(fd, 0, &mut [], &mut []);
    !matches!(r, Err(e) if e.raw_os_error() == Some(libc::ENOTTY))
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

/// Reads one maps file with the chosen source, handing each VMA to `push`
/// with the source it came from as it is read; returns the source used.
/// The first ENOTTY (a kernel without PROCMAP_QUERY, before any VMA) sets
/// `no_ioctl`, so every later file goes straight to the text parser; with
/// [`SourceChoice::Ioctl`] it is returned instead.
///
/// Every VMA (`-d`) is read from the text by default, with the ioctl
/// asked only what the text leaves open (see [`walk_text`]): the kernel
/// writes a process's text for less than a query per VMA costs (200
/// processes x 1,100 VMAs: `cat` of every maps file 122 ms against 181 for
/// the walk). For executable VMAs alone the ioctl's filter wins: the text
/// has every line.
pub fn read_maps_file(
    path: &Path,
    walk: Walk,
    ids: BuildIdPolicy<'_>,
    local: &mut Local,
    no_ioctl: &AtomicBool,
    push: &mut dyn FnMut(Source, Vma) -> io::Result<()>,
) -> io::Result<Source> {
    let (sel, max) = (walk.selection, walk.max_vmas);
    let file = File::open(path)?;
    let text_first = walk.source == SourceChoice::Auto && sel == Selection::ExecAndData;
    if !no_ioctl.load(Ordering::Relaxed) && !text_first {
        let mut pushed = false;
        let mut each = |v| {
            pushed = true;
            push(Source::Ioctl, v)
        };
        match walk_ioctl(&file, sel, (0, 0), max, ids, local, &mut each) {
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
    let ioctl = text_first && !no_ioctl.load(Ordering::Relaxed);
    let mut each = |v| push(Source::Text, v);
    if let Some(from) = walk_text(&file, sel, max, ids, local, ioctl, &mut each)? {
        // a name too long for the text to be worth reading on
        walk_ioctl(&file, sel, from, max, ids, local, &mut each)?;
    }
    // a kernel without the ioctl, met by a text walk that asked it (`-d`):
    // later files are not asked (a query per process and per ambiguous name)
    if (walk.source == SourceChoice::Text || ioctl) && !memory_still_there(&file)? {
        no_ioctl.store(true, Ordering::Relaxed);
    }
    Ok(Source::Text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A VMA as a test's walk handed it on: its source, start and name.
    type Read = (Source, u64, Vec<u8>);

    /// What [`read_maps_file`] (`--source auto`, `sel`, no build ids)
    /// makes of the maps file `path`: its result, each VMA's source,
    /// start and name, and whether it marked the ioctl missing.
    fn read_fake(path: &Path, sel: Selection) -> (io::Result<Source>, Vec<Read>, bool) {
        let walk = Walk {
            selection: sel,
            source: SourceChoice::Auto,
            max_vmas: 100,
        };
        let ids = BuildIdPolicy {
            cache: None,
            pid: 1,
            tid: 1,
            proc_root: path.parent().unwrap(),
        };
        let mut got = Vec::new();
        let mut push = |s, v: Vma| {
            got.push((s, v.start, v.name.to_vec()));
            Ok(())
        };
        let (mut local, no_ioctl) = (Local::default(), AtomicBool::new(false));
        let r = read_maps_file(path, walk, ids, &mut local, &no_ioctl, &mut push);
        (r, got, no_ioctl.load(Ordering::Relaxed))
    }

    // Without the ioctl, lines naming paths of PATH_MAX or more stop a text
    // walk once they pass LONG_NAME_TEXT bytes, inside the line that passes
    // it (its VMA already handed on), with the walk-cap error that keeps
    // what was read; ordinary lines before them cost nothing.
    #[test]
    fn long_name_lines_stop_a_text_walk_past_their_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maps");
        let mut maps = b"1000-2000 r-xp 00000000 08:01 5 /usr/lib/libc.so.6\n".to_vec();
        let name = vec![b'/'; 300_000];
        let mut line_len = 0;
        for i in 2..40u64 {
            let start = maps.len();
            let head = format!("{:x}-{:x} r-xp 00000000 08:01 {i} ", i << 12, (i + 1) << 12);
            maps.extend_from_slice(head.as_bytes());
            maps.extend_from_slice(&name);
            maps.push(b'\n');
            line_len = maps.len() - start;
        }
        std::fs::write(&path, &maps).unwrap();
        for sel in [Selection::Exec, Selection::ExecAndData] {
            let (r, got, _) = read_fake(&path, sel);
            let e = r.expect_err("the walk goes on past its budget");
            assert!(is_walk_cap(&e), "{e}");
            assert!(e.to_string().contains("PATH_MAX or more"), "{e}");
            let long = LONG_NAME_TEXT / line_len + 1;
            assert_eq!(got.len(), 1 + long, "{sel:?}");
            assert_eq!(got[0].2, b"/usr/lib/libc.so.6");
            assert!(got[1..].iter().all(|(_, _, n)| n == TOOLONG_NAME));
        }
    }

    // A `-d` text walk whose ioctl does not answer (ENOTTY: a regular file
    // here, as on a kernel before 6.11) marks the kernel as without it, so
    // the next files are not asked.
    #[test]
    fn a_text_walk_meeting_enotty_marks_the_ioctl_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maps");
        let maps = "1000-2000 r-xp 00000000 08:01 5 /usr/lib/a\\012b\n\
                    2000-3000 rw-p 00000000 00:00 0 \n";
        std::fs::write(&path, maps).unwrap();
        let (source, got, no_ioctl) = read_fake(&path, Selection::ExecAndData);
        let source = source.unwrap();
        assert_eq!(source, Source::Text);
        assert!(no_ioctl);
        let want = [
            (Source::Text, 0x1000, b"/usr/lib/a\nb".to_vec()),
            (Source::Text, 0x2000, Vec::new()),
        ];
        assert_eq!(got, want);
    }
}
