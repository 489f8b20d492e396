//! Code in a process's anonymous memory (a JIT's) named as perf names it:
//! from the process's perf map, `/tmp/perf-PID.map`, one `START SIZE NAME`
//! line per symbol (hexadecimal, `0x` optional), which JITs write (V8's
//! `--perf-basic-prof`, the JVM's perf-map-agent, ...). perf 6.1 reads it
//! whoever owns it (root too, without `-f`), and so does this. For a live
//! process in another mount namespace the one in its own `/tmp`, under its
//! pid there (the last of `NStgid:`), comes first, as perf looks for it;
//! else the host's, under the pid the recording gives.
//!
//! A map file is anyone's text: it is opened without following a link
//! (the container's `/tmp` neither: an absolute link there would lead out
//! of its root), nothing but a regular file, never on a pseudo
//! filesystem; read to [`MAX_BYTES`], [`MAX_LINES`] lines (the last ones:
//! a later line for an address is newer code) and [`MAX_TOTAL`] for all
//! processes together; a line that is not `START SIZE NAME` (or names more
//! than [`MAX_NAME`] bytes) is skipped and counted. Names go into the
//! profile as they are (made valid UTF-8); printing them is the summary's
//! business, which escapes them.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::PprofReport;
use crate::proc::parse::parse_status;

/// Most bytes read of one perf map.
pub const MAX_BYTES: u64 = 64 << 20;
/// Most lines read of one perf map (its last ones).
pub const MAX_LINES: usize = 4 << 20;
/// Longest name taken (a longer line is skipped).
pub const MAX_NAME: usize = 8 << 10;
/// Most bytes read of all perf maps of a conversion together.
pub const MAX_TOTAL: u64 = 512 << 20;

/// What reading one map file found: per address asked about, the name
/// of the last line covering it (a range of the text), and the lines
/// skipped.
#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    names: Vec<Option<std::ops::Range<usize>>>,
    /// Lines read that are not `START SIZE NAME`, and the byte offset of
    /// the first of them.
    bad: usize,
    first_bad: Option<usize>,
    /// Lines left unread at the start of the file (past [`MAX_LINES`]).
    unread: bool,
}

/// A hexadecimal number as perf's `strtoull(.., 16)` reads it (leading
/// blanks, an optional `0x`), and what follows it.
fn hex(b: &[u8]) -> Option<(u64, &[u8])> {
    let b = b.trim_ascii_start();
    let b = b
        .strip_prefix(b"0x")
        .or_else(|| b.strip_prefix(b"0X"))
        .unwrap_or(b);
    let digits = b.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    if digits == 0 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &b[..digits] {
        let d = (c as char).to_digit(16)?;
        v = v.checked_mul(16)?.checked_add(u64::from(d))?;
    }
    Some((v, &b[digits..]))
}

/// One line as perf reads it: `START SIZE NAME`, one blank after each
/// number, the name the rest of the line (not empty, at most
/// [`MAX_NAME`] bytes).
fn parse_line(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    fn one_blank(b: &[u8]) -> Option<&[u8]> {
        match b {
            [b' ' | b'\t', rest @ ..] => Some(rest),
            _ => None,
        }
    }
    let (start, rest) = hex(line)?;
    let (size, rest) = hex(one_blank(rest)?)?;
    let name = one_blank(rest)?;
    (!name.is_empty() && name.len() <= MAX_NAME).then_some((start, size, name))
}

/// The next address at or after `i` not named yet (`next` links named
/// ones onward: each is passed over once, however many lines cover it).
fn unnamed(next: &mut [usize], mut i: usize) -> usize {
    while next[i] != i {
        next[i] = next[next[i]];
        i = next[i];
    }
    i
}

/// Names `addrs` (sorted, distinct) from the text of a map file: each
/// the last line covering it (`START <= addr < START + SIZE`, or `START`
/// itself for a size 0, as perf finds symbols). Lines are read from the
/// end, each address named once, so the time is linear in the lines and
/// addresses whatever the ranges.
fn scan(text: &[u8], addrs: &[u64]) -> Scan {
    let mut s = Scan {
        names: vec![None; addrs.len()],
        ..Scan::default()
    };
    let mut next: Vec<usize> = (0..=addrs.len()).collect();
    let (mut end, mut lines) = (text.len(), 0usize);
    loop {
        let start = text[..end]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |p| p + 1);
        let line = &text[start..end];
        if !line.is_empty() {
            if lines == MAX_LINES {
                s.unread = true;
                break;
            }
            lines += 1;
            match parse_line(line) {
                Some((at, size, name)) => {
                    let range = start + (line.len() - name.len())..end;
                    let last = at.saturating_add(size);
                    let mut i = unnamed(&mut next, addrs.partition_point(|&a| a < at));
                    while i < addrs.len() && (addrs[i] < last || addrs[i] == at) {
                        s.names[i] = Some(range.clone());
                        next[i] = i + 1;
                        i = unnamed(&mut next, i + 1);
                    }
                }
                None => {
                    s.bad += 1;
                    s.first_bad = Some(start);
                }
            }
        }
        if start == 0 {
            break;
        }
        end = start - 1;
    }
    s
}

/// Where a process's map file may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `/tmp/perf-PID.map` of our own root.
    Host(u32),
    /// `/tmp/perf-NSPID.map` in the root of live process `pid`.
    Inside { pid: u32, nspid: u32 },
}

impl Place {
    /// The path shown for it.
    fn shown(self) -> String {
        match self {
            Place::Host(pid) => format!("/tmp/perf-{pid}.map"),
            Place::Inside { pid, nspid } => format!("/proc/{pid}/root/tmp/perf-{nspid}.map"),
        }
    }
}

/// Where process `pid`'s map file may be, in perf's order: inside its
/// mount namespace first when it is alive in another one.
fn places(pid: u32) -> Vec<Place> {
    let mut places = Vec::new();
    let ns = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    };
    let theirs = ns(&format!("/proc/{pid}/ns/mnt"));
    if theirs.is_some() && theirs != ns("/proc/self/ns/mnt") {
        let status = std::fs::read(format!("/proc/{pid}/status")).ok();
        let nspid = status.and_then(|t| parse_status(&t).ok()?.nstgid);
        if let Some(nspid) = nspid {
            places.push(Place::Inside { pid, nspid });
        }
    }
    places.push(Place::Host(pid));
    places
}

/// Why a map file was not used, or None when there is none.
type Opened = Result<Option<File>, String>;

/// Opens the map file at `place`: Ok(None) when nothing is there.
fn open(place: Place) -> Opened {
    let absent = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let dir_flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let (tmp, pid): (OwnedFd, u32) = match place {
        Place::Host(pid) => {
            let tmp = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(dir_flags)
                .open("/tmp");
            match tmp {
                Ok(t) => {
                    not_on_fuse(t.as_fd(), None).map_err(|e| format!("/tmp: {e}"))?;
                    (t.into(), pid)
                }
                Err(e) if absent(&e) => return Ok(None),
                Err(e) => return Err(format!("/tmp: {e}")),
            }
        }
        Place::Inside { pid, nspid } => {
            let root = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(dir_flags)
                .open(format!("/proc/{pid}/root"))
                .map_err(|e| format!("its root: {e}"))?;
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            not_on_fuse(root.as_fd(), Some(&proc_dir)).map_err(|e| format!("its root: {e}"))?;
            let tmp = match crate::sys::open_path_at(root.as_fd(), b"tmp") {
                Ok(t) => t,
                Err(e) if absent(&e) => return Ok(None),
                Err(e) => return Err(format!("its /tmp: {e}")),
            };
            not_on_fuse(tmp.as_fd(), Some(&proc_dir)).map_err(|e| format!("its /tmp: {e}"))?;
            match crate::sys::type_and_owner(tmp.as_fd()) {
                Ok((libc::S_IFDIR, _)) => {}
                Ok((kind, _)) => return Err(format!("its /tmp is {}", not_regular(kind))),
                Err(e) => return Err(format!("its /tmp: {e}")),
            }
            (tmp, nspid)
        }
    };
    let name = format!("perf-{pid}.map");
    let at = match crate::sys::open_path_at(tmp.as_fd(), name.as_bytes()) {
        Ok(at) => at,
        Err(e) if absent(&e) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let dir = match place {
        Place::Host(_) => None,
        Place::Inside { pid, .. } => Some(PathBuf::from(format!("/proc/{pid}"))),
    };
    not_on_fuse(at.as_fd(), dir.as_deref())?;
    match crate::sys::type_and_owner(at.as_fd()).map_err(|e| e.to_string())? {
        (libc::S_IFREG, _) => {}
        (kind, _) => return Err(not_regular(kind)),
    }
    let at = File::from(at);
    let meta = at.metadata().map_err(|e| e.to_string())?;
    let f = crate::sys::reopen_for_reading(&at, &meta).map_err(|e| e.to_string())?;
    match crate::sys::is_pseudo_fs(&f) {
        Ok(false) => Ok(Some(f)),
        Ok(true) => Err("on a pseudo filesystem: not read".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Refuses what `fd` is open on when it is on FUSE, on a filesystem a user
/// namespace mounted, or on no mounted filesystem (found through process
/// directory `dir`, or ours): looking
/// inside it, or at it, could wait on a FUSE daemon forever (see
/// [`crate::proc::mounts`]).
fn not_on_fuse(fd: BorrowedFd<'_>, dir: Option<&Path>) -> Result<(), String> {
    match crate::proc::mounts::host().trust_fd(fd, dir).unread() {
        None => Ok(()),
        Some(where_) => Err(format!("{where_}: not read")),
    }
}

/// What a file of type `kind` (`S_IFMT` bits) is, and that it is not
/// read, for a message.
fn not_regular(kind: u32) -> String {
    let what = match kind {
        libc::S_IFLNK => return "a symbolic link: not followed".into(),
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        libc::S_IFSOCK => "a socket",
        libc::S_IFDIR => "a directory",
        _ => "not a regular file",
    };
    format!("{what}: not read")
}

/// The perf maps of a conversion, read within [`MAX_TOTAL`] together.
#[derive(Debug, Default)]
pub struct PerfMaps {
    read: u64,
}

impl PerfMaps {
    /// Names of `addrs` (sorted, distinct) in the anonymous memory of
    /// process `pid` from its map file, if it has one; what was read, and
    /// what was wrong with it, counted in `report`.
    pub fn names(&mut self, pid: u32, addrs: &[u64], r: &mut PprofReport) -> Vec<Option<String>> {
        let none = || vec![None; addrs.len()];
        for place in places(pid) {
            let shown = place.shown();
            let text = match open(place).and_then(|f| f.map(|f| self.read_all(f)).transpose()) {
                Ok(None) => continue,
                Ok(Some(t)) => t,
                Err(why) => {
                    problem(r, &shown, &why);
                    return none();
                }
            };
            r.perf_maps += 1;
            let s = scan(&text, addrs);
            if let Some(at) = s.first_bad {
                let why = format!(
                    "{} lines not `START SIZE NAME` skipped, the first at byte {at}",
                    s.bad
                );
                problem(r, &shown, &why);
            }
            if s.unread {
                let why = format!("more than {MAX_LINES} lines: the first ones not read");
                problem(r, &shown, &why);
            }
            let name = |range: Option<std::ops::Range<usize>>| {
                range.map(|g| String::from_utf8_lossy(&text[g]).into_owned())
            };
            return s.names.into_iter().map(name).collect();
        }
        none()
    }

    /// The text of an open map file, within the bounds.
    fn read_all(&mut self, f: File) -> Result<Vec<u8>, String> {
        let len = f.metadata().map_err(|e| e.to_string())?.len();
        if len > MAX_BYTES {
            return Err(format!(
                "{len} bytes, more than the {MAX_BYTES} a perf map is read to: not read"
            ));
        }
        if self.read + len > MAX_TOTAL {
            return Err(format!(
                "not read: the {MAX_TOTAL} bytes all perf maps together are read to are spent"
            ));
        }
        let mut text = Vec::with_capacity(len as usize);
        f.take(MAX_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| format!("reading: {e}"))?;
        self.read += text.len() as u64;
        if text.len() as u64 > MAX_BYTES {
            return Err(format!("grew past {MAX_BYTES} bytes while read: not used"));
        }
        Ok(text)
    }
}

/// Counts and names (up to 5) a map file not read, or read in part.
fn problem(r: &mut PprofReport, shown: &str, why: &str) {
    r.perf_map_problems += 1;
    if r.perf_map_problem_names.len() < 5 {
        r.perf_map_problem_names.push(format!("{shown} ({why})"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &[u8], addrs: &[u64]) -> Vec<Option<String>> {
        let s = scan(text, addrs);
        let name = |g: Option<std::ops::Range<usize>>| {
            g.map(|g| String::from_utf8_lossy(&text[g]).into_owned())
        };
        s.names.into_iter().map(name).collect()
    }

    // Lines are `START SIZE NAME` in hex, `0x` optional, one blank after
    // each number, the name the rest of the line (blanks kept); a range
    // covers [START, START + SIZE), a size 0 its START only.
    #[test]
    fn lines_as_perf_reads_them() {
        assert_eq!(parse_line(b"7f00 1d f"), Some((0x7f00, 0x1d, &b"f"[..])));
        assert_eq!(parse_line(b"0x10\t0X2 a b "), Some((0x10, 2, &b"a b "[..])));
        for bad in [
            &b"7f00 1d"[..],
            b"7f00 1d ",
            b"xyz 1 f",
            b"7f00,1 f",
            b"10000000000000000 1 f",
            b"",
        ] {
            assert_eq!(parse_line(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        let long = format!("1 1 {}", "n".repeat(MAX_NAME + 1));
        assert_eq!(parse_line(long.as_bytes()), None);
        let text = b"1000 10 first\n2000 0 zero\n";
        let got = names(text, &[0xfff, 0x1000, 0x100f, 0x1010, 0x2000, 0x2001]);
        let want = [None, Some("first"), Some("first"), None, Some("zero"), None];
        let want: Vec<Option<String>> = want.iter().map(|n| n.map(String::from)).collect();
        assert_eq!(got, want);
    }

    // A later line for an address wins (newer code there); junk lines are
    // counted with the offset of the first; a file of a million lines all
    // covering every address is read in linear time.
    #[test]
    fn last_line_wins_and_junk_is_counted() {
        let text = b"\x00\xff junk\n1000 100 old\nnot a line\n1000 10 new\n";
        assert_eq!(
            names(text, &[0x1005, 0x1050]),
            vec![Some("new".into()), Some("old".into())]
        );
        let s = scan(text, &[]);
        assert_eq!((s.bad, s.first_bad, s.unread), (2, Some(0), false));
        let mut big = Vec::new();
        for i in 0..1_000_000u64 {
            big.extend_from_slice(format!("0 ffffffffffffffff f{i}\n").as_bytes());
        }
        let addrs: Vec<u64> = (0..100_000u64).map(|i| i * 0x1000).collect();
        let t = std::time::Instant::now();
        let got = names(&big, &addrs);
        assert!(got.iter().all(|n| n.as_deref() == Some("f999999")));
        assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    }

    // Past MAX_LINES lines, the first ones are not read, and it is said.
    #[test]
    fn lines_are_bounded() {
        let text = "1 1 a\n".repeat(MAX_LINES + 1);
        let s = scan(text.as_bytes(), &[1]);
        assert!(s.unread);
        assert_eq!(s.names[0], Some(text.len() - 2..text.len() - 1));
    }
}
