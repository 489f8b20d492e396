//! MiniDebugInfo: `.gnu_debugdata`, an xz-compressed ELF file holding the
//! symbols (static functions' mostly) that a stripped binary no longer
//! has, as Fedora and others ship their binaries. blazesym 0.2.7 reads it
//! when a file's `.symtab` is empty, only if built with liblzma (its `xz`
//! feature: unpacked to its end, unbounded), and otherwise fails every
//! address of the file, `.dynsym`'s too. So the section is hidden from it
//! in the private copy it reads ([`hide`]), and unpacked here within the
//! bounds compressed debug sections have ([`unpack`]) into a file of its
//! own, whose symbols name what the binary's tables did not
//! ([`virt_offsets`] turns the binary's file offsets into the addresses
//! those symbols have).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;

use super::buildid::read_full_at;
use super::debuginfo::{sections, Span, MAX_RATIO, MAX_UNPACKED, RATIO_FREE};
use super::elf;
use crate::bytes::{Endian, Rd};

/// The section's name.
const NAME: &[u8] = b".gnu_debugdata";
/// Most memory the xz decoder may ask for, in KiB: its dictionary and
/// buffers (xz's presets use 8 MiB of dictionary by default, 64 MiB at
/// most); a stream asking more fails before anything is allocated.
const MEM_LIMIT_KIB: u32 = 80 << 10;
/// `PT_LOAD`.
const PT_LOAD: u32 = 1;

/// Where a file's `.gnu_debugdata` bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugData {
    /// File offset.
    pub offset: u64,
    /// Size in bytes (xz-compressed).
    pub size: u64,
}

/// Finds the `.gnu_debugdata` section of `copy` (an ELF file that is ours
/// to change: the private copy blazesym reads) and hides it from blazesym
/// by giving it the empty name (its header's `sh_name` set to 0, the
/// string every section-name table starts with). None when the file has
/// none, or its section table cannot be read as blazesym would (it reads
/// no `.gnu_debugdata` either then).
pub fn hide(copy: &File) -> io::Result<Option<DebugData>> {
    let len = copy.metadata()?.len();
    let Ok((_, sections)) = sections(copy, len) else {
        return Ok(None);
    };
    let Some(i) = sections.iter().position(|(name, _)| name == NAME) else {
        return Ok(None);
    };
    let s = sections[i].1;
    if s.kind == elf::SHT_NOBITS || s.flags & elf::SHF_COMPRESSED != 0 {
        return Ok(None);
    }
    let mut head = [0u8; elf::HEADER_LEN];
    read_full_at(copy, &mut head, 0)?;
    // sections() read this table whole, so the entry is in the file
    let Some((shoff, ent, _, _)) = elf::section_table(&head) else {
        return Ok(None);
    };
    let at = shoff + i as u64 * u64::from(ent);
    copy.write_all_at(&[0; 4], at)?;
    Ok(Some(DebugData {
        offset: s.offset,
        size: s.size,
    }))
}

/// The ELF file `data` of `copy` unpacks to, in an unlinked temporary
/// file: at most [`MAX_UNPACKED`] bytes and [`MAX_RATIO`] times its
/// packed size beyond [`RATIO_FREE`] (the bounds of compressed debug
/// sections), the decoder's memory at most 80 MiB; else why not.
pub fn unpack(copy: &File, data: DebugData) -> Result<File, String> {
    let len = copy.metadata().map_err(|e| e.to_string())?.len();
    if data
        .offset
        .checked_add(data.size)
        .is_none_or(|end| end > len)
    {
        return Err(format!(
            "section .gnu_debugdata at offset {}: {} bytes, past the end of the file",
            data.offset, data.size
        ));
    }
    let most = MAX_UNPACKED.min(RATIO_FREE.max(data.size.saturating_mul(MAX_RATIO)));
    let span = Span {
        file: copy,
        off: data.offset,
        left: data.size,
    };
    let at = |why: String| format!("section .gnu_debugdata at offset {}: {why}", data.offset);
    let mut out = tempfile::tempfile().map_err(|e| format!("temporary file: {e}"))?;
    let mut xz = lzma_rust2::XzReader::new_mem_limit(io::BufReader::new(span), true, MEM_LIMIT_KIB);
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        let n = match xz.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(at(format!("does not unpack: {e}"))),
        };
        total += n as u64;
        if total > most {
            return Err(at(format!("unpacks to more than {most} bytes")));
        }
        out.write_all(&buf[..n])
            .map_err(|e| format!("temporary file: {e}"))?;
    }
    Ok(out)
}

/// The virtual address of each file offset of `file` (by its `PT_LOAD`
/// segments, as blazesym turns file offsets into addresses), None where
/// no segment holds the offset or the program headers cannot be read.
pub fn virt_offsets(file: &File, offsets: &[u64]) -> Vec<Option<u64>> {
    let loads = load_segments(file).unwrap_or_default();
    offsets
        .iter()
        .map(|&off| {
            loads.iter().find_map(|&(p_offset, p_vaddr, p_filesz)| {
                let inside = off >= p_offset && off - p_offset < p_filesz;
                inside.then(|| (off - p_offset).wrapping_add(p_vaddr))
            })
        })
        .collect()
}

/// Most program headers read (as the build-id reader).
const MAX_PHDRS_BYTES: usize = 64 << 10;

/// (p_offset, p_vaddr, p_filesz) of each `PT_LOAD` of `file`.
fn load_segments(file: &File) -> Option<Vec<(u64, u64, u64)>> {
    let mut head = [0u8; elf::HEADER_LEN];
    read_full_at(file, &mut head, 0).ok()?;
    let h = elf::parse_header(&head).ok()?;
    let table = elf::phdrs_len(&h);
    if table > MAX_PHDRS_BYTES {
        return None;
    }
    let mut phdrs = vec![0u8; table];
    if read_full_at(file, &mut phdrs, h.phoff).ok()? < table {
        return None;
    }
    let r = Rd(Endian::big_if(h.big_endian));
    let ent = usize::from(h.phentsize);
    let mut out = Vec::new();
    for base in (0..usize::from(h.phnum)).map(|i| i * ent) {
        if r.u32(&phdrs, base)? != PT_LOAD {
            continue;
        }
        let seg = match h.is_64 {
            true => (
                r.u64(&phdrs, base + 8)?,
                r.u64(&phdrs, base + 16)?,
                r.u64(&phdrs, base + 32)?,
            ),
            false => (
                u64::from(r.u32(&phdrs, base + 4)?),
                u64::from(r.u32(&phdrs, base + 8)?),
                u64::from(r.u32(&phdrs, base + 16)?),
            ),
        };
        out.push(seg);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, Write};

    use super::*;
    use crate::proc::debuginfo::tests::image;

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut w =
            lzma_rust2::XzWriter::new(Vec::new(), lzma_rust2::XzOptions::with_preset(1)).unwrap();
        w.write_all(data).unwrap();
        w.finish().unwrap()
    }

    fn file(img: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(img).unwrap();
        f
    }

    fn unpacked(mut f: File) -> Vec<u8> {
        f.rewind().unwrap();
        let mut got = Vec::new();
        f.read_to_end(&mut got).unwrap();
        got
    }

    // `.gnu_debugdata` is found and renamed to "" in the copy (its header's
    // sh_name zeroed, nothing else changed), so blazesym finds it no more;
    // a file without one, or with a compressed or NOBITS one, is left as
    // it is.
    #[test]
    fn debugdata_is_found_and_hidden() {
        let img = image(
            true,
            &[
                (".text", 0, vec![0x90; 16]),
                (".gnu_debugdata", 0, xz(b"x")),
            ],
        );
        let f = file(&img);
        let found = hide(&f).unwrap().expect("found");
        assert_eq!(found.offset, 512 + 16);
        let after = unpacked(f.try_clone().unwrap());
        let diff: Vec<usize> = (0..img.len()).filter(|&i| img[i] != after[i]).collect();
        assert!(!diff.is_empty() && diff.len() <= 4, "{diff:?}");
        assert_eq!(hide(&f).unwrap(), None, "hidden already");
        let none = image(true, &[(".text", 0, vec![0x90])]);
        assert_eq!(hide(&file(&none)).unwrap(), None);
        let packed = image(
            true,
            &[(".gnu_debugdata", elf::SHF_COMPRESSED, vec![0; 32])],
        );
        assert_eq!(hide(&file(&packed)).unwrap(), None);
    }

    // An honest MiniDebugInfo unpacks to its bytes; an xz bomb (20 MiB of
    // zeros in a few KB: over 64 times and the free 16 MiB) is refused
    // once past its bound, as are a stream cut short, bytes that are no
    // xz, one asking more than the decoder's memory limit, and a section
    // past the end of the file, each naming the section and its offset.
    #[test]
    fn unpacking_is_bounded() {
        let elf_bytes: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 97).to_le_bytes())
            .collect();
        let one = |bytes: Vec<u8>| {
            let f = file(&image(true, &[(".gnu_debugdata", 0, bytes)]));
            let data = hide(&f).unwrap().expect("found");
            unpack(&f, data)
        };
        assert!(unpacked(one(xz(&elf_bytes)).unwrap()) == elf_bytes);
        let bomb = xz(&vec![0u8; 20 << 20]);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        let why = one(bomb).unwrap_err();
        assert_eq!(
            why,
            "section .gnu_debugdata at offset 512: unpacks to more than 16777216 bytes"
        );
        let honest = xz(&elf_bytes);
        let why = one(honest[..honest.len() - 20].to_vec()).unwrap_err();
        assert!(why.contains("does not unpack"), "{why}");
        let why = one(b"not xz at all".to_vec()).unwrap_err();
        assert!(why.contains("does not unpack"), "{why}");
        // its block's LZMA2 dictionary made 1 GiB (property 36), the block
        // header's CRC32 made again
        let mut wide = xz(b"small");
        let header = 12 + (usize::from(wide[12]) + 1) * 4;
        let flags = wide[13];
        assert_eq!(flags & 0xc3, 0, "one filter, no sizes: {flags:#x}");
        assert_eq!(wide[14..16], [0x21, 1], "LZMA2, one property byte");
        wide[16] = 36;
        let mut crc = flate2::Crc::new();
        crc.update(&wide[12..header - 4]);
        wide[header - 4..header].copy_from_slice(&crc.sum().to_le_bytes());
        let why = one(wide).unwrap_err();
        assert!(
            why.contains("does not unpack: needed memory too big"),
            "{why}"
        );
        let f = file(&image(true, &[(".gnu_debugdata", 0, xz(b"x"))]));
        let mut data = hide(&f).unwrap().unwrap();
        data.size = 1 << 30;
        let why = unpack(&f, data).unwrap_err();
        assert!(
            why.ends_with("1073741824 bytes, past the end of the file"),
            "{why}"
        );
    }

    // File offsets become addresses through the PT_LOAD holding them (as
    // blazesym turns them): none for an offset outside every segment.
    #[test]
    fn file_offsets_to_addresses() {
        let e = Endian::NATIVE;
        let mut img = image(true, &[(".text", 0, vec![0x90; 16])]);
        // tiny_elf's first program header is a PT_LOAD: 0x1000 bytes at
        // offset 0x1000, at 0x401000
        img[64 + 8..64 + 16].copy_from_slice(&e.u64_bytes(0x1000));
        img[64 + 16..64 + 24].copy_from_slice(&e.u64_bytes(0x40_1000));
        img[64 + 32..64 + 40].copy_from_slice(&e.u64_bytes(0x1000));
        let got = virt_offsets(&file(&img), &[0x1000, 0x1abc, 0x2000, 0x10]);
        assert_eq!(got, [Some(0x40_1000), Some(0x40_1abc), None, None]);
        assert_eq!(
            virt_offsets(&file(b"not an ELF file at all, no"), &[1]),
            [None]
        );
    }
}
