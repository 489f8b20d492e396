//! The text side of a maps walk: `/proc/PID/maps` read a chunk of whole
//! lines at a time and parsed, the ioctl asked only what the text leaves
//! open, and lines naming paths of PATH_MAX or more bounded.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};

use super::idcache::{resolve, BuildIdPolicy, LocalBuildIds};
use super::ioctl_walk::{ioctl_answers, ioctl_name, kernel_build_id, Asked, VmaSink};
use super::local::{Local, NameBuf, TextBuf, MAX_LINE};
use super::maps_text::{self, NameText};
use super::names::Names;
use super::walk_cap::{LongNames, TooManyMaps, LONG_NAME_TEXT};
use crate::model::{Selection, Vma, TOOLONG_NAME, VSYSCALL_NAME};

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
/// are asked of it too, as [`super::ioctl_walk::walk_ioctl`] does. At a name of PATH_MAX or
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
        ..
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
