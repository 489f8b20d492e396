//! Parser for the text format of `/proc/PID/maps`, over bytes.
//!
//! Paths are raw bytes: spaces, tabs, trailing spaces and non-UTF-8 bytes are
//! kept; the kernel escapes only `\n` (as `\012`), which is turned back into a
//! newline so that both sources give the same name.

use crate::model::{Name, Perms, Vma, PATH_MAX, TOOLONG_NAME};

/// A malformed maps line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} (byte offset {offset}): {kind}")]
pub struct MapsError {
    /// 1-based line number.
    pub line: usize,
    /// Byte offset of the start of the line.
    pub offset: usize,
    pub kind: MapsErrorKind,
}

/// What was wrong with a maps line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MapsErrorKind {
    /// The address range has no `-`.
    #[error("address range has no '-'")]
    NoDash,
    /// A field is not a number of its base (or is too long for one).
    #[error("bad {0}")]
    BadNumber(&'static str),
    /// The end address is below the start.
    #[error("end address below start address")]
    EndBelowStart,
    /// The permissions field is not 4 characters.
    #[error("permissions are not 4 characters")]
    PermsLength,
    /// A permission character other than `rwxsp-` in its place.
    #[error("bad permission character")]
    BadPermission,
    /// The device has no `:`.
    #[error("device has no ':'")]
    NoColon,
    /// A device number beyond 32 bits.
    #[error("{0} too large")]
    TooLarge(&'static str),
}

use MapsErrorKind as K;

/// Parses a whole maps file. Lines are kept when `keep(perms, name)` says so.
pub fn parse_maps(
    text: &[u8],
    keep: impl FnMut(Perms, &[u8]) -> bool,
) -> Result<Vec<Vma>, MapsError> {
    let mut out = Vec::new();
    each_vma(
        text,
        (0, 0),
        keep,
        |n| n.into(),
        |v| {
            out.push(v);
            Ok::<(), MapsError>(())
        },
    )?;
    Ok(out)
}

/// Parses whole lines of a maps file that start at 0-based line `at.0`
/// and byte offset `at.1` of it (for the error's position), handing each
/// VMA `keep(perms, name)` keeps to `f` as it is parsed: the VMAs before a
/// malformed line are all handed on. Each name is made by `name_of` (a
/// scan worker hands out shared copies).
pub fn each_vma<E: From<MapsError>>(
    text: &[u8],
    at: (usize, usize),
    mut keep: impl FnMut(Perms, &[u8]) -> bool,
    mut name_of: impl FnMut(&[u8]) -> Name,
    mut f: impl FnMut(Vma) -> Result<(), E>,
) -> Result<(), E> {
    let mut offset = at.1;
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line_offset = offset;
        offset += line.len() + 1;
        if line.is_empty() {
            continue;
        }
        let vma = parse_line_with(line, &mut name_of).map_err(|kind| MapsError {
            line: at.0 + i + 1,
            offset: line_offset,
            kind,
        })?;
        if keep(vma.perms, &vma.name) {
            f(vma)?;
        }
    }
    Ok(())
}

impl From<MapsError> for std::io::Error {
    fn from(e: MapsError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

fn hex(field: &[u8], what: &'static str) -> Result<u64, MapsErrorKind> {
    if field.is_empty() || field.len() > 16 {
        return Err(K::BadNumber(what));
    }
    let mut v: u64 = 0;
    for &b in field {
        let d = (b as char).to_digit(16).ok_or(K::BadNumber(what))?;
        v = (v << 4) | u64::from(d);
    }
    Ok(v)
}

fn dec(field: &[u8], what: &'static str) -> Result<u64, MapsErrorKind> {
    if field.is_empty() {
        return Err(K::BadNumber(what));
    }
    let mut v: u64 = 0;
    for &b in field {
        if !b.is_ascii_digit() {
            return Err(K::BadNumber(what));
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(K::BadNumber(what))?;
    }
    Ok(v)
}

/// Splits off the next space-delimited field, returning (field, rest).
fn field(s: &[u8]) -> (&[u8], &[u8]) {
    match s.iter().position(|&b| b == b' ') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &[]),
    }
}

/// Parses one line (without its newline).
pub fn parse_line(line: &[u8]) -> Result<Vma, MapsErrorKind> {
    parse_line_with(line, &mut |n: &[u8]| n.into())
}

/// [`parse_line`], its name made by `name_of` from the name's bytes.
pub fn parse_line_with(
    line: &[u8],
    name_of: &mut impl FnMut(&[u8]) -> Name,
) -> Result<Vma, MapsErrorKind> {
    let (range, rest) = field(line);
    let dash = range.iter().position(|&b| b == b'-').ok_or(K::NoDash)?;
    let start = hex(&range[..dash], "start address")?;
    let end = hex(&range[dash + 1..], "end address")?;
    if end < start {
        return Err(K::EndBelowStart);
    }
    let (perms_f, rest) = field(rest);
    if perms_f.len() != 4 {
        return Err(K::PermsLength);
    }
    let mut perms = Perms::default();
    for (i, &c) in perms_f.iter().enumerate() {
        match c {
            b'-' => {}
            b'p' if i == 3 => {}
            c if c == b"rwxs"[i] => perms = perms | Perms(1 << i),
            _ => return Err(K::BadPermission),
        }
    }
    let (off_f, rest) = field(rest);
    let offset = hex(off_f, "offset")?;
    let (dev_f, rest) = field(rest);
    let colon = dev_f.iter().position(|&b| b == b':').ok_or(K::NoColon)?;
    let dev_major = u32::try_from(hex(&dev_f[..colon], "device major")?)
        .map_err(|_| K::TooLarge("device major"))?;
    let dev_minor = u32::try_from(hex(&dev_f[colon + 1..], "device minor")?)
        .map_err(|_| K::TooLarge("device minor"))?;
    let (ino_f, rest) = field(rest);
    let inode = dec(ino_f, "inode")?;
    let first = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    let raw = &rest[first..];
    let unescaped;
    let mut name = match raw.contains(&b'\\') {
        true => {
            unescaped = unescape_newlines(raw);
            &unescaped[..]
        }
        false => raw,
    };
    if name.len() >= PATH_MAX {
        // as PROCMAP_QUERY (ENAMETOOLONG) and perf name it
        name = TOOLONG_NAME;
    }
    Ok(Vma {
        start,
        end,
        offset,
        perms,
        dev_major,
        dev_minor,
        inode,
        name: name_of(name),
        build_id: None,
    })
}

/// Turns the kernel's `\012` escape back into a newline. Nothing else is
/// escaped (a lone backslash is literal).
pub fn unescape_newlines(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i..].starts_with(b"\\012") {
            out.push(b'\n');
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // A typical file-backed line parses into every field.
    #[test]
    fn parses_file_line() {
        let v = parse_line(
            b"7f4398532000-7f4398557000 r-xp 00001000 fe:00 325843                     /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        )
        .unwrap();
        assert_eq!(v.start, 0x7f4398532000);
        assert_eq!(v.end, 0x7f4398557000);
        assert_eq!(v.offset, 0x1000);
        assert_eq!(v.perms, Perms::READ | Perms::EXEC);
        assert_eq!((v.dev_major, v.dev_minor, v.inode), (0xfe, 0, 325843));
        assert_eq!(
            &v.name[..],
            b"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        );
    }

    // Nameless anonymous lines have an empty name and shared maps set SHARED.
    #[test]
    fn parses_anonymous_and_shared() {
        let v = parse_line(b"7f0000000000-7f0000001000 rw-s 00000000 00:00 0").unwrap();
        assert!(v.name.is_empty());
        assert_eq!(v.perms, Perms::READ | Perms::WRITE | Perms::SHARED);
        assert_eq!(v.perms.map_flags(), libc::MAP_SHARED as u32);
    }

    // Spaces, tabs, trailing spaces, non-UTF-8 bytes and backslashes stay raw; \012 becomes a newline.
    #[test]
    fn keeps_odd_paths_raw() {
        let v =
            parse_line(b"1000-2000 r-xp 00000000 08:01 42    /tmp/a b\tc\xff\\x\\012y  (deleted)")
                .unwrap();
        assert_eq!(&v.name[..], b"/tmp/a b\tc\xff\\x\ny  (deleted)".to_vec());
        let v = parse_line(b"1000-2000 r-xp 00000000 08:01 42 /tmp/trailing  ").unwrap();
        assert_eq!(&v.name[..], b"/tmp/trailing  ");
    }

    // A name of PATH_MAX bytes or more (after unescaping) is //toolong, as the ioctl names it; one byte less is kept.
    #[test]
    fn overlong_names_are_toolong() {
        let line = |name: &[u8]| [&b"1000-2000 r-xp 00000000 08:01 42 "[..], name].concat();
        let fits = vec![b'a'; PATH_MAX - 1];
        assert_eq!(&parse_line(&line(&fits)).unwrap().name[..], fits);
        let long = parse_line(&line(&vec![b'a'; PATH_MAX])).unwrap();
        assert_eq!((&long.name[..], long.inode), (TOOLONG_NAME, 42));
        // escaped newlines count once: 1024 of them is a 1024-byte name
        let escaped = b"\\012".repeat(1024);
        assert_eq!(
            &parse_line(&line(&escaped)).unwrap().name[..],
            vec![b'\n'; 1024]
        );
    }

    // Malformed lines are rejected with the line number and byte offset.
    #[test]
    fn reports_bad_lines() {
        let text = b"1000-2000 r-xp 00000000 08:01 42 /a\n1000-zz r-xp 0 0:0 0\n";
        let err = parse_maps(text, |_, _| true).unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(err.offset, 36);
        assert_eq!(err.kind, K::BadNumber("end address"));
        assert!(err.to_string().ends_with("bad end address"), "{err}");
        for bad in [
            &b"1000 r-xp 0 0:0 0"[..],
            b"1000-2000 rwxq 0 0:0 0",
            b"1000-2000 r-xp 0 00 0",
            b"1000-2000 r-xp 0 0:0 x",
            b"2000-1000 r-xp 0 0:0 0",
            b"1000-2000 r-x",
        ] {
            assert!(
                parse_line(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    // The keep predicate filters lines and the vsyscall line parses as exec-only.
    #[test]
    fn filters_with_predicate() {
        let text = b"1000-2000 r-xp 0 0:0 0\n3000-4000 rw-p 0 0:0 0 [heap]\nffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";
        let v = parse_maps(text, |p, _| p.contains(Perms::EXEC)).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(&v[1].name[..], b"[vsyscall]");
        assert_eq!(v[1].perms, Perms::EXEC);
    }
}
