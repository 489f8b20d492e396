//! Pure parsers for the parts of ELF needed to find a GNU build id:
//! the file header, program headers (PT_NOTE) and note entries.
//! Every size and offset comes from the file and is validated before use.

use crate::bytes::{Endian, Rd};

/// `NT_GNU_BUILD_ID`.
pub const NT_GNU_BUILD_ID: u32 = 3;
const PT_NOTE: u32 = 4;

/// Why an ELF image could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// The header is too short or has the wrong magic.
    #[error("not an ELF file")]
    NotElf,
    /// A field has a value this parser does not accept.
    #[error("bad ELF header at offset {offset}: {what}")]
    BadHeader {
        /// Offset of the field.
        offset: u64,
        what: &'static str,
    },
}

/// The fields of an ELF header needed to find the program headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfHeader {
    /// ELFCLASS64 (true) or ELFCLASS32.
    pub is_64: bool,
    /// ELFDATA2MSB (true) or ELFDATA2LSB.
    pub big_endian: bool,
    /// Program header table offset.
    pub phoff: u64,
    /// Size of one program header.
    pub phentsize: u16,
    /// Number of program headers.
    pub phnum: u16,
}

/// Size of the ELF header prefix to read before calling [`parse_header`].
pub const HEADER_LEN: usize = 64;

/// Parses the ELF header from the first bytes of a file (at least 52 for
/// ELF32, 64 for ELF64).
pub fn parse_header(b: &[u8]) -> Result<ElfHeader, ElfError> {
    if b.len() < 16 || &b[..4] != b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    let is_64 = match b[4] {
        1 => false,
        2 => true,
        _ => {
            return Err(ElfError::BadHeader {
                offset: 4,
                what: "unknown ELF class",
            })
        }
    };
    let big_endian = match b[5] {
        1 => false,
        2 => true,
        _ => {
            return Err(ElfError::BadHeader {
                offset: 5,
                what: "unknown ELF data encoding",
            })
        }
    };
    let r = Rd(Endian::big_if(big_endian));
    let short = |offset| ElfError::BadHeader {
        offset,
        what: "header truncated",
    };
    let (phoff, phentsize, phnum, want_ent) = if is_64 {
        (
            r.u64(b, 32).ok_or(short(32))?,
            r.u16(b, 54).ok_or(short(54))?,
            r.u16(b, 56).ok_or(short(56))?,
            56,
        )
    } else {
        (
            u64::from(r.u32(b, 28).ok_or(short(28))?),
            r.u16(b, 42).ok_or(short(42))?,
            r.u16(b, 44).ok_or(short(44))?,
            32,
        )
    };
    if phnum != 0 && phentsize < want_ent {
        return Err(ElfError::BadHeader {
            offset: if is_64 { 54 } else { 42 },
            what: "program header entry too small",
        });
    }
    Ok(ElfHeader {
        is_64,
        big_endian,
        phoff,
        phentsize,
        phnum,
    })
}

/// Size in bytes of the program header table.
pub fn phdrs_len(h: &ElfHeader) -> usize {
    usize::from(h.phentsize) * usize::from(h.phnum)
}

/// The (file offset, size) of every PT_NOTE segment in a program header table.
pub fn note_segments(h: &ElfHeader, phdrs: &[u8]) -> Vec<(u64, u64)> {
    let r = Rd(Endian::big_if(h.big_endian));
    let ent = usize::from(h.phentsize);
    let mut out = Vec::new();
    for i in 0..usize::from(h.phnum) {
        let base = i * ent;
        let Some(p_type) = r.u32(phdrs, base) else {
            break;
        };
        if p_type != PT_NOTE {
            continue;
        }
        let seg = if h.is_64 {
            r.u64(phdrs, base + 8).zip(r.u64(phdrs, base + 32))
        } else {
            r.u32(phdrs, base + 4)
                .zip(r.u32(phdrs, base + 16))
                .map(|(o, s)| (u64::from(o), u64::from(s)))
        };
        if let Some(seg) = seg {
            out.push(seg);
        }
    }
    out
}

/// Finds the descriptor of the first `GNU` note of type [`NT_GNU_BUILD_ID`]
/// in a note segment. Malformed notes end the search.
pub fn find_gnu_build_id(notes: &[u8], big_endian: bool) -> Option<&[u8]> {
    let r = Rd(Endian::big_if(big_endian));
    let mut off = 0usize;
    while off + 12 <= notes.len() {
        let namesz = r.u32(notes, off)? as usize;
        let descsz = r.u32(notes, off + 4)? as usize;
        let ntype = r.u32(notes, off + 8)?;
        let name_start = off + 12;
        let desc_start = name_start.checked_add(namesz.checked_add(3)? & !3)?;
        let desc_end = desc_start.checked_add(descsz)?;
        if desc_end > notes.len() {
            return None;
        }
        let name = &notes[name_start..name_start + namesz];
        if ntype == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(&notes[desc_start..desc_end]);
        }
        off = desc_end.checked_add(3)? & !3;
    }
    None
}

/// Finds the GNU build id in a whole ELF image held in memory (e.g. the vDSO).
pub fn build_id_from_image(image: &[u8]) -> Result<Option<Vec<u8>>, ElfError> {
    let h = parse_header(image)?;
    let start = usize::try_from(h.phoff).map_err(|_| ElfError::BadHeader {
        offset: 32,
        what: "program headers outside the image",
    })?;
    let phdrs = start
        .checked_add(phdrs_len(&h))
        .and_then(|end| image.get(start..end))
        .ok_or(ElfError::BadHeader {
            offset: 32,
            what: "program headers outside the image",
        })?;
    for (off, size) in note_segments(&h, phdrs) {
        let seg = usize::try_from(off)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| image.get(o..o.checked_add(s)?));
        if let Some(id) = seg.and_then(|seg| find_gnu_build_id(seg, h.big_endian)) {
            return Ok(Some(id.to_vec()));
        }
    }
    Ok(None)
}

/// Where the section headers are: (offset, entry size, count, index of
/// the section-name string table), from the first [`HEADER_LEN`] bytes.
pub fn section_table(b: &[u8]) -> Option<(u64, u16, u16, u16)> {
    let h = parse_header(b).ok()?;
    let r = Rd(Endian::big_if(h.big_endian));
    let (shoff, at, want) = if h.is_64 {
        (r.u64(b, 40)?, 58, 64)
    } else {
        (u64::from(r.u32(b, 32)?), 46, 40)
    };
    let (ent, num, strndx) = (r.u16(b, at)?, r.u16(b, at + 2)?, r.u16(b, at + 4)?);
    (num == 0 || ent >= want).then_some((shoff, ent, num, strndx))
}

/// `SHT_NOBITS`: a section with no bytes in the file.
pub const SHT_NOBITS: u32 = 8;
/// `SHF_COMPRESSED`: the section's bytes are a compression header
/// ([`compression_header`]) and a compressed stream.
pub const SHF_COMPRESSED: u64 = 0x800;
/// `ELFCOMPRESS_ZLIB`: a zlib stream follows the compression header.
pub const ELFCOMPRESS_ZLIB: u32 = 1;
/// `ELFCOMPRESS_ZSTD`: a zstd stream follows the compression header.
pub const ELFCOMPRESS_ZSTD: u32 = 2;

/// The fields of one section header that say what and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionHeader {
    /// Offset of its name in the section-name string table.
    pub name: u32,
    /// `sh_type` (e.g. [`SHT_NOBITS`]).
    pub kind: u32,
    /// `sh_flags` (e.g. [`SHF_COMPRESSED`]).
    pub flags: u64,
    /// File offset of its bytes.
    pub offset: u64,
    /// Size of its bytes in the file (compressed size when compressed).
    pub size: u64,
}

/// Section `i` of the section header table `shdrs` (entries `ent` bytes
/// apart); `None` when it runs past the table.
pub fn section(
    shdrs: &[u8],
    i: usize,
    ent: u16,
    is_64: bool,
    big_endian: bool,
) -> Option<SectionHeader> {
    let r = Rd(Endian::big_if(big_endian));
    let base = i.checked_mul(usize::from(ent))?;
    let (name, kind) = (r.u32(shdrs, base)?, r.u32(shdrs, base + 4)?);
    let (flags, offset, size) = if is_64 {
        (
            r.u64(shdrs, base + 8)?,
            r.u64(shdrs, base + 24)?,
            r.u64(shdrs, base + 32)?,
        )
    } else {
        let word = |at| r.u32(shdrs, base + at).map(u64::from);
        (word(8)?, word(16)?, word(20)?)
    };
    Some(SectionHeader {
        name,
        kind,
        flags,
        offset,
        size,
    })
}

/// Size of a compression header (`Elf64_Chdr` or `Elf32_Chdr`).
pub fn compression_header_len(is_64: bool) -> usize {
    if is_64 {
        24
    } else {
        12
    }
}

/// The (`ch_type`, `ch_size`: the size unpacked) of the compression header
/// at the start of a compressed section's bytes `b`; `None` when `b` is
/// shorter than one.
pub fn compression_header(b: &[u8], is_64: bool, big_endian: bool) -> Option<(u32, u64)> {
    let r = Rd(Endian::big_if(big_endian));
    if b.len() < compression_header_len(is_64) {
        return None;
    }
    // Elf64_Chdr: type, reserved, size, addralign; Elf32_Chdr: type, size,
    // addralign
    match is_64 {
        true => Some((r.u32(b, 0)?, r.u64(b, 8)?)),
        false => Some((r.u32(b, 0)?, u64::from(r.u32(b, 4)?))),
    }
}

/// Sections that make a DWARF reader open other files by name
/// (`.gnu_debuglink`, `.gnu_debugaltlink`, `.debug_sup`).
pub const LINK_SECTIONS: [&[u8]; 3] = [b".gnu_debuglink", b".gnu_debugaltlink", b".debug_sup"];

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a minimal ELF image with one PT_NOTE segment holding `notes`.
    pub(crate) fn tiny_elf(is_64: bool, be: bool, notes: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 0x200];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = if is_64 { 2 } else { 1 };
        b[5] = if be { 2 } else { 1 };
        let put16 = |b: &mut Vec<u8>, o: usize, v: u16| {
            let a = if be { v.to_be_bytes() } else { v.to_le_bytes() };
            b[o..o + 2].copy_from_slice(&a);
        };
        let put32 = |b: &mut Vec<u8>, o: usize, v: u32| {
            let a = if be { v.to_be_bytes() } else { v.to_le_bytes() };
            b[o..o + 4].copy_from_slice(&a);
        };
        let put64 = |b: &mut Vec<u8>, o: usize, v: u64| {
            let a = if be { v.to_be_bytes() } else { v.to_le_bytes() };
            b[o..o + 8].copy_from_slice(&a);
        };
        let note_off = 0x100u64;
        if is_64 {
            put64(&mut b, 32, 64);
            put16(&mut b, 54, 56);
            put16(&mut b, 56, 2);
            // phdr 0: PT_LOAD, phdr 1: PT_NOTE
            put32(&mut b, 64, 1);
            put32(&mut b, 64 + 56, PT_NOTE);
            put64(&mut b, 64 + 56 + 8, note_off);
            put64(&mut b, 64 + 56 + 32, notes.len() as u64);
        } else {
            put32(&mut b, 28, 52);
            put16(&mut b, 42, 32);
            put16(&mut b, 44, 1);
            put32(&mut b, 52, PT_NOTE);
            put32(&mut b, 52 + 4, note_off as u32);
            put32(&mut b, 52 + 16, notes.len() as u32);
        }
        b[0x100..0x100 + notes.len()].copy_from_slice(notes);
        b
    }

    pub(crate) fn note(be: bool, name: &[u8], ntype: u32, desc: &[u8]) -> Vec<u8> {
        let w = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut n = Vec::new();
        n.extend(w(name.len() as u32));
        n.extend(w(desc.len() as u32));
        n.extend(w(ntype));
        n.extend(name);
        while n.len() % 4 != 0 {
            n.push(0);
        }
        n.extend(desc);
        while n.len() % 4 != 0 {
            n.push(0);
        }
        n
    }

    // The build id is found after another note, in ELF32/64 of either byte order.
    #[test]
    fn finds_build_id_all_classes_and_orders() {
        for is_64 in [false, true] {
            for be in [false, true] {
                let mut notes = note(be, b"GNU\0", 1, &[0, 0, 0, 0, 3, 0, 0, 0]);
                notes.extend(note(be, b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]));
                let img = tiny_elf(is_64, be, &notes);
                assert_eq!(
                    build_id_from_image(&img).unwrap(),
                    Some(vec![0xab; 20]),
                    "is_64={is_64} be={be}"
                );
            }
        }
    }

    // Notes of other owners and sizes other than 20 are handled.
    #[test]
    fn other_owner_and_sizes() {
        let mut notes = note(false, b"Go\0\0", NT_GNU_BUILD_ID, &[1; 8]);
        notes.extend(note(false, b"GNU\0", NT_GNU_BUILD_ID, &[7; 8]));
        assert_eq!(find_gnu_build_id(&notes, false), Some(&[7u8; 8][..]));
        let long = note(false, b"GNU\0", NT_GNU_BUILD_ID, &[9; 32]);
        assert_eq!(find_gnu_build_id(&long, false), Some(&[9u8; 32][..]));
    }

    // Compression headers are read in ELF64 and ELF32 layout, either byte
    // order; one cut short is None.
    #[test]
    fn compression_headers_all_classes_and_orders() {
        for be in [false, true] {
            let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            let w64 = |v: u64| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            let mut h64 = w32(ELFCOMPRESS_ZLIB).to_vec();
            h64.extend([0; 4]);
            h64.extend(w64(1 << 40));
            h64.extend(w64(8));
            assert_eq!(compression_header(&h64, true, be), Some((1, 1 << 40)));
            assert_eq!(compression_header(&h64[..23], true, be), None);
            let mut h32 = w32(ELFCOMPRESS_ZSTD).to_vec();
            h32.extend(w32(0x1234_5678));
            h32.extend(w32(4));
            assert_eq!(compression_header(&h32, false, be), Some((2, 0x1234_5678)));
            assert_eq!(compression_header(&h32[..11], false, be), None);
        }
    }

    // Truncated or lying sizes never read out of bounds.
    #[test]
    fn malformed_notes_are_rejected() {
        let mut n = note(false, b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]);
        n[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(find_gnu_build_id(&n, false), None);
        let n = note(false, b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]);
        assert_eq!(find_gnu_build_id(&n[..30], false), None);
        assert_eq!(parse_header(b"\x7fELX"), Err(ElfError::NotElf));
        let mut img = tiny_elf(true, false, &n);
        img[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(build_id_from_image(&img).is_err());
        let mut img = tiny_elf(true, false, &n);
        img[54] = 8;
        assert!(matches!(
            parse_header(&img),
            Err(ElfError::BadHeader { offset: 54, .. })
        ));
    }
}
