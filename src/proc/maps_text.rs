//! Parser for the text format of `/proc/PID/maps`, over bytes.
//!
//! Paths are raw bytes: spaces, tabs, trailing spaces and non-UTF-8 bytes are
//! kept; the kernel escapes only `\n` (as `\012`), which is turned back into a
//! newline so that both sources give the same name. A name that holds
//! `\012` itself reads the same, so [`parse_vma`] tells which names held a
//! backslash ([`NameText`]): the `-d` walk asks PROCMAP_QUERY for those.

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

/// Parses a whole maps file. Lines are kept when `keep(perms, name)` says
/// so; a malformed line is an error naming its number and offset.
pub fn parse_maps(
    text: &[u8],
    mut keep: impl FnMut(Perms, &[u8]) -> bool,
) -> Result<Vec<Vma>, MapsError> {
    let mut out = Vec::new();
    let mut offset = 0;
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let at = (i, offset);
        offset += line.len() + 1;
        if line.is_empty() {
            continue;
        }
        let (vma, _) = parse_vma(line, at, &mut |n| n.into())?;
        if keep(vma.perms, &vma.name) {
            out.push(vma);
        }
    }
    Ok(out)
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
    parse_fields(line, &mut |n: &[u8]| n.into()).map(|(vma, _)| vma)
}

/// What a line's text tells of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameText {
    /// The name's own bytes.
    Exact,
    /// It held a backslash: a `\012` may be the kernel's escape of a
    /// newline or the name's own four bytes.
    Ambiguous,
    /// PATH_MAX bytes or more (at least that many whatever its escapes
    /// stood for): named `//toolong`, as PROCMAP_QUERY names it.
    TooLong,
}

/// Parses one line (without its newline) that is 0-based line `at.0` of
/// a file and starts at its byte `at.1` (for the error's position): the
/// VMA and what its text tells of its name.
pub fn parse_vma(
    line: &[u8],
    at: (usize, usize),
    name_of: &mut impl FnMut(&[u8]) -> Name,
) -> Result<(Vma, NameText), MapsError> {
    parse_fields(line, name_of).map_err(|kind| MapsError {
        line: at.0 + 1,
        offset: at.1,
        kind,
    })
}

/// The numbers and permissions of a line as the kernel writes them,
/// and where its name starts (the spaces before it skipped); None for
/// anything else, which [`slow_fields`] parses or names the fault of.
/// One pass with a digit table: the field splits and `to_digit` of the
/// slow parser cost ~1,100 instructions a line, a `-d` scan's largest
/// cost.
fn fast_fields(line: &[u8]) -> Option<(Vma, usize)> {
    let mut i = 0;
    let start = hex_run(line, &mut i, 16)?;
    expect(line, &mut i, b'-')?;
    let end = hex_run(line, &mut i, 16)?;
    expect(line, &mut i, b' ')?;
    if end < start {
        return None;
    }
    let p = line.get(i..i + 4)?;
    let bit = |c: u8, set: u8, i: u8| match c {
        b'-' => Some(0),
        c if c == set => Some(1 << i),
        _ => None,
    };
    let shared = match p[3] {
        b'p' => 0,
        c => bit(c, b's', 3)?,
    };
    let perms = Perms(bit(p[0], b'r', 0)? | bit(p[1], b'w', 1)? | bit(p[2], b'x', 2)? | shared);
    i += 4;
    expect(line, &mut i, b' ')?;
    let offset = hex_run(line, &mut i, 16)?;
    expect(line, &mut i, b' ')?;
    let dev_major = hex_run(line, &mut i, 8)? as u32;
    expect(line, &mut i, b':')?;
    let dev_minor = hex_run(line, &mut i, 8)? as u32;
    expect(line, &mut i, b' ')?;
    let inode_at = i;
    let mut inode = 0u64;
    while let Some(d) = line
        .get(i)
        .and_then(|&b| b.is_ascii_digit().then(|| b - b'0'))
    {
        // 19 digits cannot overflow; more are the slow parser's to judge
        if i - inode_at == 19 {
            return None;
        }
        inode = inode * 10 + u64::from(d);
        i += 1;
    }
    if i == inode_at {
        return None;
    }
    if i < line.len() {
        expect(line, &mut i, b' ')?;
        // the padding to the name's column, eight spaces at a time
        while line.get(i..i + 8).is_some_and(|s| s == b"        ") {
            i += 8;
        }
        while line.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    let vma = nameless(start, end, offset, perms, (dev_major, dev_minor), inode);
    Some((vma, i))
}

/// A VMA of these fields, its name still to come.
fn nameless(start: u64, end: u64, offset: u64, perms: Perms, dev: (u32, u32), inode: u64) -> Vma {
    Vma {
        start,
        end,
        offset,
        perms,
        dev_major: dev.0,
        dev_minor: dev.1,
        inode,
        name: Name::EMPTY,
        build_id: None,
    }
}

/// Hex digit values, 0xff for other bytes.
const HEX: [u8; 256] = {
    let mut t = [0xff; 256];
    let mut i = 0;
    while i < 16 {
        t[b"0123456789abcdef"[i] as usize] = i as u8;
        t[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// The hex number at `*i` (1 to `max` digits, `max` at most 16), `*i`
/// moved past it. (Eight digits judged and converted at once in a `u64`
/// took as many instructions and no less time: `-d` at 2000 x 70, a
/// 15-run A/B, user time 74.1 ms against this loop's 77.3, paired 1.01.)
#[inline]
fn hex_run(line: &[u8], i: &mut usize, max: usize) -> Option<u64> {
    let rest = line.get(*i..)?;
    let mut v = 0u64;
    let mut n = rest.len();
    for (k, &b) in rest.iter().enumerate() {
        let d = HEX[usize::from(b)];
        if d > 15 {
            n = k;
            break;
        }
        v = (v << 4) | u64::from(d);
    }
    (n > 0 && n <= max).then(|| {
        *i += n;
        v
    })
}

/// `*i` moved past the byte `b`, if it is there.
fn expect(line: &[u8], i: &mut usize, b: u8) -> Option<()> {
    (line.get(*i) == Some(&b)).then(|| *i += 1)
}

/// The address range, permissions, offset, device and inode of a line,
/// then its name and whether it held no backslash.
fn parse_fields(
    line: &[u8],
    name_of: &mut impl FnMut(&[u8]) -> Name,
) -> Result<(Vma, NameText), MapsErrorKind> {
    let (mut vma, at) = match fast_fields(line) {
        Some(f) => f,
        None => slow_fields(line)?,
    };
    let raw = &line[at..];
    let unescaped;
    let (mut name, mut text) = match memchr::memchr(b'\\', raw) {
        None => (raw, NameText::Exact),
        Some(_) => {
            unescaped = unescape_newlines(raw);
            (&unescaped[..], NameText::Ambiguous)
        }
    };
    if name.len() >= PATH_MAX {
        // as PROCMAP_QUERY (ENAMETOOLONG) and perf name it
        (name, text) = (TOOLONG_NAME, NameText::TooLong);
    }
    vma.name = name_of(name);
    Ok((vma, text))
}

/// [`fast_fields`] for any line, or what is wrong with it: fields split at
/// single spaces, numbers of any case and their limits checked.
fn slow_fields(line: &[u8]) -> Result<(Vma, usize), MapsErrorKind> {
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
    let vma = nameless(start, end, offset, perms, (dev_major, dev_minor), inode);
    Ok((vma, line.len() - rest.len() + first))
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

    /// A maps line of random fields: as the kernel writes them
    /// (`canonical`: addresses of 8-16 lowercase digits, an 8-digit offset,
    /// 2-3 digit devices, a decimal inode, padding and a name), or of any
    /// widths, case, separators and stray bytes. `rand(n)` is below n.
    fn random_line(rand: &dyn Fn(u64) -> u64, canonical: bool) -> Vec<u8> {
        let mut line = Vec::new();
        let hex = |line: &mut Vec<u8>, (min, spread): (u64, u64)| {
            let digits = b"0123456789abcdefABCDEF";
            let n = if canonical { 16 } else { digits.len() as u64 };
            line.extend((0..min + rand(spread)).map(|_| digits[rand(n) as usize]));
        };
        let widths = |k: (u64, u64), any: (u64, u64)| if canonical { k } else { any };
        hex(&mut line, widths((8, 9), (0, 19)));
        line.push(b'-');
        hex(&mut line, widths((8, 9), (0, 19)));
        line.push(b' ');
        for set in [b"r-", b"w-", b"x-", b"ps"] {
            line.push(match canonical || rand(50) > 0 {
                true => set[rand(2) as usize],
                false => b"rwxsp-?"[rand(7) as usize],
            });
        }
        line.push(b' ');
        hex(&mut line, widths((8, 1), (0, 19)));
        line.push(b' ');
        hex(&mut line, widths((2, 2), (0, 11)));
        line.push(b':');
        hex(&mut line, widths((2, 2), (0, 11)));
        line.push(b' ');
        let (min, spread) = widths((1, 19), (0, 22));
        line.extend((0..min + rand(spread)).map(|_| b'0' + rand(10) as u8));
        if canonical || rand(8) > 0 {
            line.extend(std::iter::repeat_n(b' ', 1 + rand(40) as usize));
            let name = b"/lib abc\\012.so[";
            line.extend((0..rand(30)).map(|_| name[rand(name.len() as u64) as usize]));
        }
        if !canonical && rand(3) == 0 {
            let stray = b"-: xzG/\\\n\t\x80\xff0";
            let at = rand(line.len() as u64) as usize;
            line[at] = stray[rand(stray.len() as u64) as usize];
        }
        line
    }

    // The fast parser agrees with the field-splitting one on every line it
    // takes (same fields, same name start), takes every line in the
    // kernel's shape, and leaves to it every line that one refuses:
    // 200,000 lines of random widths, separators, digits, stray bytes and
    // padding (a 20-digit inode overflowed the fast one's sum once).
    #[test]
    fn the_fast_parser_agrees_with_the_field_splitting_one() {
        let seed = std::cell::Cell::new(0x9e37_79b9_7f4a_7c15u64);
        let rand = |n: u64| {
            let mut x = seed.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            seed.set(x);
            x % n
        };
        let (mut taken, mut kernel_shaped) = (0, 0);
        for round in 0..200_000 {
            let canonical = round % 4 == 0;
            let line = random_line(&rand, canonical);
            let shown = String::from_utf8_lossy(&line);
            let (fast, slow) = (fast_fields(&line), slow_fields(&line));
            // (a kernel-shaped line whose end is below its start is refused)
            if canonical && slow.is_ok() {
                kernel_shaped += 1;
                assert!(
                    fast.is_some(),
                    "kernel-shaped, left to the slow parser: {shown:?}"
                );
            }
            if let Some(fast) = fast {
                taken += 1;
                let slow = slow.unwrap_or_else(|e| panic!("took what is refused ({e}): {shown:?}"));
                assert_eq!(fast, slow, "{shown:?}");
            }
        }
        assert!(kernel_shaped > 20_000, "{kernel_shaped}");
        assert!(taken > kernel_shaped, "{taken}");
    }

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
