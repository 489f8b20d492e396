//! Whether the DWARF in an ELF file may be read, decided from its section
//! headers before the DWARF reader (blazesym 0.2.7) opens it. It is not
//! read when:
//! - the file links to other files by name (`.gnu_debuglink` and the like):
//!   the reader would open whatever path they name. Distro binaries all
//!   have one, so this is [`Dwarf::Quiet`];
//! - a compressed section (`SHF_COMPRESSED`, zlib or zstd) could not be
//!   unpacked within bounds. blazesym allocates the size its compression
//!   header claims at once (failing, the allocation aborts the process: no
//!   panic to catch), then unpacks the stream to its end whatever it
//!   claimed (a zlib bomb: 4 MB of zeros are 4 GiB; zstd shrinks them
//!   further). Each stream is unpacked here first, by the decoder blazesym
//!   uses, counting and keeping nothing, and must give exactly what its
//!   header claims;
//! - the section table would be read otherwise by blazesym than here: it
//!   reads headers in this machine's byte order, entries of the standard
//!   size, whatever the ELF header says.
//!
//! Every read is bounded by the file's size and the limits below.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use super::buildid::read_full_at;
use super::elf::{self, SectionHeader};
use crate::bytes::Endian;

/// Most section-header and section-name bytes read.
const MAX_SECTION_BYTES: u64 = 4 << 20;
/// Most bytes the compressed sections of one file may unpack to, together:
/// the most memory blazesym then holds for them. The largest file of
/// Debian's libc6-dbg unpacks to 10 MB; a `-gz` build of a large C++
/// program to a few hundred MB would get ELF symbols only.
pub const MAX_UNPACKED: u64 = 256 << 20;
/// Most times larger than packed the compressed sections of one file may
/// claim to unpack, together (beyond [`RATIO_FREE`]): then a file costs
/// memory in proportion to its size. Debian's libc6-dbg files unpack 2-3
/// times larger, 25 times at most (one of 1.8 MB; one section there, a
/// 158 KB `.debug_abbrev`, 83 times); zlib's limit is about 1000.
pub const MAX_RATIO: u64 = 64;
/// Unpacked bytes allowed a file whatever the ratio: small files'
/// sections are small, and a few highly repetitive ones (abbreviations,
/// string tables) would exceed the ratio.
pub const RATIO_FREE: u64 = 16 << 20;

/// The verdict on a file's DWARF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dwarf {
    /// It may be read.
    Read,
    /// Not read, without a word: the file links to other files by name,
    /// or its section table cannot be read whole (assume the worst).
    Quiet,
    /// Not read, for this reason (the file's symbol table still may be).
    Refused(String),
}

/// Whether the DWARF of `file` (an ELF file) may be read ([`Dwarf`]).
pub fn dwarf_verdict(file: &File) -> Dwarf {
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return Dwarf::Quiet;
    };
    let (is_64, sections) = match sections(file, len) {
        Ok(s) => s,
        Err(verdict) => return verdict,
    };
    if sections
        .iter()
        .any(|(name, _)| elf::LINK_SECTIONS.contains(&name.as_slice()))
    {
        return Dwarf::Quiet;
    }
    match compressed_within_bounds(file, len, is_64, &sections) {
        Ok(()) => Dwarf::Read,
        Err(why) => Dwarf::Refused(why),
    }
}

/// A section's name and header.
pub(super) type Section = (Vec<u8>, SectionHeader);

/// (ELF64?, every section) of `file` (`len` bytes), or the verdict when
/// they cannot be known as blazesym would read them.
pub(super) fn sections(file: &File, len: u64) -> Result<(bool, Vec<Section>), Dwarf> {
    let mut head = [0u8; elf::HEADER_LEN];
    if read_full_at(file, &mut head, 0).map_err(|_| Dwarf::Quiet)? < 52 {
        return Err(Dwarf::Quiet);
    }
    let h = elf::parse_header(&head).map_err(|_| Dwarf::Quiet)?;
    let (shoff, ent, num, strndx) = elf::section_table(&head).ok_or(Dwarf::Quiet)?;
    if h.big_endian != (Endian::NATIVE == Endian::Big) {
        return Err(Dwarf::Refused(
            "its ELF header gives the other byte order, which the DWARF reader ignores".into(),
        ));
    }
    let want = if h.is_64 { 64 } else { 40 };
    if num != 0 && ent != want {
        return Err(Dwarf::Refused(format!(
            "section headers of {ent} bytes at offset {shoff}, not the {want} the DWARF reader assumes"
        )));
    }
    let table_len = u64::from(ent) * u64::from(num);
    let table = read_exactly(file, len, shoff, table_len).ok_or(Dwarf::Quiet)?;
    if num == 0 {
        // no sections, unless the count is in section 0 (ELF's extended
        // numbering, which DWARF readers follow): then assume the worst
        return match shoff {
            0 => Ok((h.is_64, Vec::new())),
            _ => Err(Dwarf::Quiet),
        };
    }
    let header = |i| elf::section(&table, i, ent, h.is_64, h.big_endian);
    let strtab = header(usize::from(strndx)).ok_or(Dwarf::Quiet)?;
    let names = read_exactly(file, len, strtab.offset, strtab.size).ok_or(Dwarf::Quiet)?;
    let mut out = Vec::with_capacity(usize::from(num));
    for i in 0..usize::from(num) {
        let s = header(i).ok_or(Dwarf::Quiet)?;
        let name = names.get(s.name as usize..).ok_or(Dwarf::Quiet)?;
        out.push((crate::bytes::cstr(name).to_vec(), s));
    }
    Ok((h.is_64, out))
}

/// The `size` bytes of `file` (`len` bytes) at `off`, if they are all
/// there and at most [`MAX_SECTION_BYTES`].
fn read_exactly(file: &File, len: u64, off: u64, size: u64) -> Option<Vec<u8>> {
    if size > MAX_SECTION_BYTES || off.checked_add(size)? > len {
        return None;
    }
    let mut b = vec![0u8; size as usize];
    (read_full_at(file, &mut b, off).ok()? == b.len()).then_some(b)
}

/// Most window a zstd frame may ask for (2^27 bytes, zstd's own default
/// limit, which blazesym's decoder keeps): a frame asking more fails. The
/// decoder allocates at most this (less when the frame gives its size)
/// however few bytes the frame holds, and touches only what it writes.
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// Ok when every compressed section of `file` is zlib or zstd, all of them claim
/// at most [`MAX_UNPACKED`] bytes unpacked and at most [`MAX_RATIO`] times
/// their size (or [`RATIO_FREE`]), and each unpacks to exactly what it
/// claims; else why not, naming the section and its offset.
fn compressed_within_bounds(
    file: &File,
    len: u64,
    is_64: bool,
    sections: &[Section],
) -> Result<(), String> {
    let big = Endian::NATIVE == Endian::Big;
    let header_len = elf::compression_header_len(is_64);
    // (name, offset, (type, (stream offset, stream length)), claimed size)
    let mut streams = Vec::new();
    let (mut claimed, mut packed) = (0u64, 0u64);
    for (name, s) in sections {
        if s.flags & elf::SHF_COMPRESSED == 0 || s.kind == elf::SHT_NOBITS {
            continue;
        }
        let at = |why: String| {
            let name = String::from_utf8_lossy(name);
            format!("section {name} at offset {}: {why}", s.offset)
        };
        if s.offset.checked_add(s.size).is_none_or(|end| end > len) {
            return Err(at(format!("{} bytes, past the end of the file", s.size)));
        }
        let mut chdr = [0u8; 24];
        let chdr = &mut chdr[..header_len];
        let read = read_full_at(file, chdr, s.offset).map_err(|e| at(e.to_string()))?;
        let (kind, size) = match s.size < header_len as u64 || read < header_len {
            true => None,
            false => elf::compression_header(chdr, is_64, big),
        }
        .ok_or_else(|| at("shorter than a compression header".into()))?;
        match kind {
            elf::ELFCOMPRESS_ZLIB | elf::ELFCOMPRESS_ZSTD => {}
            k => return Err(at(format!("compressed with unknown type {k}"))),
        }
        claimed = claimed.saturating_add(size);
        packed += s.size;
        let stream = (s.offset + header_len as u64, s.size - header_len as u64);
        streams.push((name, s.offset, (kind, stream), size));
    }
    if claimed > MAX_UNPACKED {
        return Err(format!(
            "its compressed sections claim {claimed} bytes unpacked, more than {MAX_UNPACKED}"
        ));
    }
    if claimed > RATIO_FREE.max(packed.saturating_mul(MAX_RATIO)) {
        return Err(format!(
            "its compressed sections claim {claimed} bytes unpacked from {packed}, more than {MAX_RATIO} times as many"
        ));
    }
    for (name, offset, (kind, (at, size)), claim) in streams {
        let span = Span {
            file,
            off: at,
            left: size,
        };
        let why = match unpacked_len(kind, span, claim) {
            Ok(n) if n == claim => continue,
            Ok(n) if n > claim => format!("unpacks to more than the {claim} bytes it claims"),
            Ok(n) => format!("unpacks to {n} bytes, not the {claim} it claims"),
            Err(e) => format!("does not unpack: {e}"),
        };
        let name = String::from_utf8_lossy(name);
        return Err(format!("section {name} at offset {offset}: {why}"));
    }
    Ok(())
}

/// How many bytes the stream `span` (compressed with `kind`) unpacks to,
/// as blazesym unpacks it (zlib: flate2, to the end of the stream, what
/// follows ignored; zstd: the zstd crate, frame after frame to the end);
/// counted up to one past `most`, nothing kept. A zstd stream whose first
/// frame's header gives a size over `most` fails unread (the decoder
/// would size its buffer by it).
fn unpacked_len(kind: u32, span: Span<'_>, most: u64) -> io::Result<u64> {
    if kind == elf::ELFCOMPRESS_ZLIB {
        return count(flate2::read::ZlibDecoder::new(span), most);
    }
    let mut head = [0u8; 18]; // a frame header's most bytes
    let n = usize::try_from(span.left).map_or(head.len(), |l| l.min(head.len()));
    let n = read_full_at(span.file, &mut head[..n], span.off)?;
    if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(&head[..n]) {
        if size > most {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "its zstd frame claims {size} bytes, more than the {most} its header claims"
                ),
            ));
        }
    }
    let mut z = zstd::stream::read::Decoder::new(span)?;
    z.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
    count(z, most)
}

/// The bytes `r` gives to its end, counted up to one past `most` (a
/// buffer of 64 KiB reused, nothing kept).
fn count(mut r: impl Read, most: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if total > most {
            return Ok(total);
        }
    }
}

/// `left` bytes of a file from `off`, read in place.
pub(super) struct Span<'f> {
    pub(super) file: &'f File,
    pub(super) off: u64,
    pub(super) left: u64,
}

impl Read for Span<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = usize::try_from(self.left).map_or(buf.len(), |l| l.min(buf.len()));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.off)?;
        self.off += n as u64;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::*;

    /// A section to build: name, flags, bytes.
    pub(crate) type Spec<'a> = (&'a str, u64, Vec<u8>);

    /// An ELF image in this machine's byte order (64- or 32-bit) with a
    /// null section, `.shstrtab`, then `specs`.
    pub(crate) fn image(is_64: bool, specs: &[Spec<'_>]) -> Vec<u8> {
        let e = Endian::NATIVE;
        let mut img = elf::tests::tiny_elf(is_64, e == Endian::Big, &[]);
        let mut strtab = b"\0.shstrtab\0".to_vec();
        let mut placed = Vec::new();
        for (name, flags, bytes) in specs {
            let name_at = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            placed.push((name_at, *flags, img.len() as u64, bytes.len() as u64));
            img.extend_from_slice(bytes);
        }
        let str_at = img.len() as u64;
        img.extend_from_slice(&strtab);
        let shoff = img.len() as u64;
        let ent: usize = if is_64 { 64 } else { 40 };
        img.resize(img.len() + ent, 0); // section 0
        let mut shdr = |(name, flags, off, size): (u32, u64, u64, u64)| {
            let mut h = vec![0u8; ent];
            h[..4].copy_from_slice(&e.u32_bytes(name));
            h[4..8].copy_from_slice(&e.u32_bytes(1)); // SHT_PROGBITS
            if is_64 {
                h[8..16].copy_from_slice(&e.u64_bytes(flags));
                h[24..32].copy_from_slice(&e.u64_bytes(off));
                h[32..40].copy_from_slice(&e.u64_bytes(size));
            } else {
                h[8..12].copy_from_slice(&e.u32_bytes(flags as u32));
                h[16..20].copy_from_slice(&e.u32_bytes(off as u32));
                h[20..24].copy_from_slice(&e.u32_bytes(size as u32));
            }
            img.extend_from_slice(&h);
        };
        shdr((1, 0, str_at, strtab.len() as u64));
        for p in placed {
            shdr(p);
        }
        let table = if is_64 {
            img[40..48].copy_from_slice(&e.u64_bytes(shoff));
            58
        } else {
            img[32..36].copy_from_slice(&e.u32_bytes(shoff as u32));
            46
        };
        let num = specs.len() as u16 + 2;
        img[table..table + 2].copy_from_slice(&e.u16_bytes(ent as u16));
        img[table + 2..table + 4].copy_from_slice(&e.u16_bytes(num));
        img[table + 4..table + 6].copy_from_slice(&e.u16_bytes(1));
        img
    }

    /// A compressed section's bytes: the header (`kind`, claiming
    /// `claimed` bytes unpacked), then `stream`.
    fn packed(is_64: bool, kind: u32, claimed: u64, stream: &[u8]) -> Vec<u8> {
        let e = Endian::NATIVE;
        let mut b = e.u32_bytes(kind).to_vec();
        if is_64 {
            b.extend_from_slice(&[0; 4]);
            b.extend_from_slice(&e.u64_bytes(claimed));
            b.extend_from_slice(&e.u64_bytes(1));
        } else {
            b.extend_from_slice(&e.u32_bytes(claimed as u32));
            b.extend_from_slice(&e.u32_bytes(1));
        }
        b.extend_from_slice(stream);
        b
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    /// `n` zero bytes, zlib-compressed (fast: still 200 times smaller),
    /// written a MiB at a time.
    fn zeros(n: usize) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        let mib = vec![0u8; 1 << 20];
        let mut left = n;
        while left > 0 {
            let k = left.min(mib.len());
            z.write_all(&mib[..k]).unwrap();
            left -= k;
        }
        z.finish().unwrap()
    }

    fn verdict(img: &[u8]) -> Dwarf {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(img).unwrap();
        dwarf_verdict(&f)
    }

    fn refused(img: &[u8]) -> String {
        match verdict(img) {
            Dwarf::Refused(why) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    // Debug links are found by section name (.gnu_debuglink,
    // .gnu_debugaltlink, .debug_sup) and keep DWARF unread without a word,
    // as does a section table that cannot be read whole or a section count
    // of 0 with a table (extended numbering, which DWARF readers follow);
    // a file with no sections, or none of these, is read.
    #[test]
    fn debug_links_by_section_name() {
        let plain = image(
            true,
            &[(".text", 0, vec![0x90]), (".debug_info", 0, vec![1])],
        );
        assert_eq!(verdict(&plain), Dwarf::Read);
        for link in elf::LINK_SECTIONS {
            let name = std::str::from_utf8(link).unwrap();
            let img = image(true, &[(".text", 0, vec![0x90]), (name, 0, vec![0; 8])]);
            assert_eq!(verdict(&img), Dwarf::Quiet, "{name}");
        }
        let none = elf::tests::tiny_elf(true, Endian::NATIVE == Endian::Big, &[]);
        assert_eq!(verdict(&none), Dwarf::Read, "no sections");
        let mut extended = image(true, &[(".text", 0, vec![0x90])]);
        extended[60..62].copy_from_slice(&[0, 0]);
        assert_eq!(verdict(&extended), Dwarf::Quiet, "e_shnum 0 with a table");
        let cut = image(true, &[(".gnu_debuglink", 0, vec![0; 8])]);
        assert_eq!(verdict(&cut[..cut.len() - 10]), Dwarf::Quiet, "truncated");
    }

    // zlib-compressed sections that unpack to what they claim are read, in
    // ELF64 and ELF32: one that unpacks 80 times larger (as a real
    // .debug_abbrev does) too, being small.
    #[test]
    fn honest_compressed_sections_are_read() {
        let info: Vec<u8> = (0..5000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let abbrev = vec![7u8; 160_000];
        for is_64 in [true, false] {
            let z = elf::ELFCOMPRESS_ZLIB;
            let img = image(
                is_64,
                &[
                    (".text", 0, vec![0x90; 16]),
                    (
                        ".debug_info",
                        elf::SHF_COMPRESSED,
                        packed(is_64, z, 20_000, &zlib(&info)),
                    ),
                    (
                        ".debug_abbrev",
                        elf::SHF_COMPRESSED,
                        packed(is_64, z, 160_000, &zlib(&abbrev)),
                    ),
                ],
            );
            assert_eq!(verdict(&img), Dwarf::Read, "is_64={is_64}");
        }
    }

    // A compressed section claiming 1 TiB (blazesym allocated it and the
    // process aborted), a honest 17 MiB of zeros from about 80 KB (over 64 times
    // and the free 16 MiB), one claiming its packed size but unpacking to
    // 20 MiB (blazesym unpacked it all), one unpacking to less than it
    // claims, a corrupt stream, an unknown type, a header cut
    // short and a section past the end are refused, each naming the
    // section, its offset and why; the limits hold across sections.
    #[test]
    fn compressed_sections_out_of_bounds_are_refused() {
        let z = elf::ELFCOMPRESS_ZLIB;
        let c = elf::SHF_COMPRESSED;
        let small = zlib(b"a few bytes of DWARF");
        let one = |is_64: bool, bytes: Vec<u8>| image(is_64, &[(".debug_info", c, bytes)]);
        for is_64 in [true, false] {
            let claimed: u64 = if is_64 { 1 << 40 } else { u32::MAX.into() };
            let why = refused(&one(is_64, packed(is_64, z, claimed, &small)));
            assert!(
                why.contains(&format!(
                    "claim {claimed} bytes unpacked, more than 268435456"
                )),
                "{why}"
            );
        }
        let why = refused(&one(true, packed(true, z, 17 << 20, &zeros(17 << 20))));
        assert!(why.contains("more than 64 times"), "{why}");
        let bomb = zeros(20 << 20);
        let why = refused(&one(true, packed(true, z, bomb.len() as u64, &bomb)));
        assert!(
            why.starts_with("section .debug_info at offset 512: unpacks to more than"),
            "{why}"
        );
        let why = refused(&one(true, packed(true, z, 21, &small)));
        assert!(
            why.ends_with("unpacks to 20 bytes, not the 21 it claims"),
            "{why}"
        );
        let mut corrupt = small.clone();
        corrupt[4] ^= 0xff;
        let why = refused(&one(true, packed(true, z, 20, &corrupt)));
        assert!(why.contains("does not unpack"), "{why}");
        let why = refused(&one(false, packed(false, 7, 20, &small)));
        assert!(why.ends_with("compressed with unknown type 7"), "{why}");
        let why = refused(&one(true, packed(true, z, 20, &[])[..20].to_vec()));
        assert!(why.ends_with("shorter than a compression header"), "{why}");
        let mut past = one(true, packed(true, z, 20, &small));
        let shdr = past.len() - 64;
        past[shdr + 32..shdr + 40].copy_from_slice(&Endian::NATIVE.u64_bytes(1 << 30));
        let why = refused(&past);
        assert!(
            why.ends_with("1073741824 bytes, past the end of the file"),
            "{why}"
        );
        // 20 sections of 13 MiB each: each under the bounds, not together
        let thirteen = zeros(13 << 20);
        let names: Vec<String> = (0..20).map(|i| format!(".debug_{i}")).collect();
        let many: Vec<Spec<'_>> = names
            .iter()
            .map(|n| (n.as_str(), c, packed(true, z, 13 << 20, &thirteen)))
            .collect();
        let why = refused(&image(true, &many));
        assert!(why.contains("more than 268435456"), "{why}");
    }

    /// `data` as one zstd frame (its size in the header), or as one
    /// giving no size (streamed).
    fn zstd(data: &[u8], sized: bool) -> Vec<u8> {
        if sized {
            return zstd::bulk::compress(data, 19).unwrap();
        }
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 19).unwrap();
        z.include_contentsize(false).unwrap();
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    // zstd-compressed sections (as `objcopy --compress-debug-sections=zstd`
    // writes them, one frame giving its size; and streamed, giving none;
    // two frames one after the other) that unpack to what they claim are
    // read, in ELF64 and ELF32.
    #[test]
    fn honest_zstd_sections_are_read() {
        let info: Vec<u8> = (0..5000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let mut two = zstd(&info[..7000], true);
        two.extend_from_slice(&zstd(&info[7000..], false));
        for is_64 in [true, false] {
            let z = elf::ELFCOMPRESS_ZSTD;
            let c = elf::SHF_COMPRESSED;
            let img = image(
                is_64,
                &[
                    (".text", 0, vec![0x90; 16]),
                    (
                        ".debug_info",
                        c,
                        packed(is_64, z, 20_000, &zstd(&info, true)),
                    ),
                    (
                        ".debug_line",
                        c,
                        packed(is_64, z, 20_000, &zstd(&info, false)),
                    ),
                    (".debug_str", c, packed(is_64, z, 20_000, &two)),
                ],
            );
            assert_eq!(verdict(&img), Dwarf::Read, "is_64={is_64}");
        }
    }

    // zstd sections out of bounds are refused as zlib ones are, naming the
    // section, its offset and why: one claiming 1 TiB (before any
    // unpacking); a bomb (1 GiB of zeros in a few dozen KB, claiming its
    // packed size: counting stops past it), a frame whose header gives
    // more than the section claims (not unpacked), one unpacking to less,
    // a frame cut short, a corrupt one, bytes after the last frame, a
    // frame asking for a 2 GiB window.
    #[test]
    fn zstd_sections_out_of_bounds_are_refused() {
        let (z, c) = (elf::ELFCOMPRESS_ZSTD, elf::SHF_COMPRESSED);
        let one = |bytes: Vec<u8>| image(true, &[(".debug_info", c, bytes)]);
        let text = b"a few bytes of DWARF".repeat(10);
        let small = zstd(&text, true);
        let why = refused(&one(packed(true, z, 1 << 40, &small)));
        assert!(why.contains("claim 1099511627776 bytes unpacked"), "{why}");
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        let mib = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            enc.write_all(&mib).unwrap();
        }
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        let why = refused(&one(packed(true, z, bomb.len() as u64, &bomb)));
        assert!(
            why.starts_with("section .debug_info at offset 512: unpacks to more than"),
            "{why}"
        );
        let why = refused(&one(packed(true, z, 100, &small)));
        assert!(
            why.ends_with("its zstd frame claims 200 bytes, more than the 100 its header claims"),
            "{why}"
        );
        let why = refused(&one(packed(true, z, 201, &zstd(&text, false))));
        assert!(
            why.ends_with("unpacks to 200 bytes, not the 201 it claims"),
            "{why}"
        );
        let cut = &small[..small.len() - 3];
        let why = refused(&one(packed(true, z, 200, cut)));
        assert!(why.ends_with("does not unpack: incomplete frame"), "{why}");
        let mut corrupt = small.clone();
        let last = corrupt.len() - 5;
        corrupt[last] ^= 0xff;
        corrupt[8] ^= 0xff;
        let why = refused(&one(packed(true, z, 200, &corrupt)));
        assert!(why.contains("does not unpack"), "{why}");
        let mut trailing = small.clone();
        trailing.extend_from_slice(b"trailing");
        let why = refused(&one(packed(true, z, 200, &trailing)));
        assert!(why.contains("does not unpack"), "{why}");
        let mut wide = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        wide.include_contentsize(false).unwrap();
        wide.window_log(31).unwrap();
        wide.long_distance_matching(true).unwrap();
        wide.write_all(&text).unwrap();
        let wide = wide.finish().unwrap();
        let why = refused(&one(packed(true, z, 200, &wide)));
        assert!(
            why.contains("does not unpack: Frame requires too much memory"),
            "{why}"
        );
    }

    // What blazesym would read otherwise is refused: the other byte order
    // (it reads this machine's) and section headers of another size (it
    // assumes the standard one).
    #[test]
    fn tables_blazesym_reads_otherwise_are_refused() {
        let mut img = image(true, &[(".debug_info", 0, vec![1])]);
        img[5] = if Endian::NATIVE == Endian::Big { 1 } else { 2 };
        assert!(refused(&img).contains("byte order"));
        let mut img = image(true, &[(".debug_info", 0, vec![1])]);
        img[58..60].copy_from_slice(&Endian::NATIVE.u16_bytes(128));
        assert!(refused(&img).contains("section headers of 128 bytes"));
    }
}
