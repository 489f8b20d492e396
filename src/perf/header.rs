//! The file-mode header, its sections and the feature table: each parsed and
//! encoded by one type. Every offset read is checked against the file size.

use super::consts::{FILE_HEADER_SIZE, MAGIC, PIPE_HEADER_SIZE};
use super::error::{FormatError, FormatErrorKind as K};
use crate::bytes::{Endian, PutExt, Rd};

/// Byte order from the first 8 bytes, or None if they are not perf's magic.
pub fn endian_of(magic: &[u8]) -> Option<Endian> {
    if magic.get(..8)? == MAGIC {
        Some(Endian::Little)
    } else if magic.get(..8)? == b"2ELIFREP" {
        Some(Endian::Big)
    } else {
        None
    }
}

/// The magic as it is written in a file of byte order `e`.
pub fn magic_bytes(e: Endian) -> [u8; 8] {
    e.u64_bytes(u64::from_le_bytes(*MAGIC))
}

/// An {offset, size} pair of the file header or the feature table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Section {
    /// File offset of the first byte.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

impl Section {
    /// One past the end (saturating: a parsed section is checked first).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }

    /// Reads a section at `off` of `b`; `what` names it in the error when it
    /// does not lie inside a file of `file_len` bytes.
    fn parse(
        b: &[u8],
        off: usize,
        e: Endian,
        file_len: u64,
        what: &'static str,
        at: u64,
    ) -> Result<Section, FormatError> {
        let r = Rd(e);
        let short = || FormatError::at(at, K::Truncated(what));
        let s = Section {
            offset: r.u64(b, off).ok_or_else(short)?,
            size: r.u64(b, off + 8).ok_or_else(short)?,
        };
        if s.offset
            .checked_add(s.size)
            .is_none_or(|end| end > file_len)
        {
            return Err(FormatError::at(
                at,
                K::SectionPastEnd {
                    what,
                    offset: s.offset,
                    size: s.size,
                    file_len,
                },
            ));
        }
        Ok(s)
    }

    fn put(&self, out: &mut Vec<u8>, e: Endian) {
        out.put_u64(e, self.offset);
        out.put_u64(e, self.size);
    }
}

/// The 256-bit feature bitmap of the header. Unknown bits are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureBits(pub [u64; 4]);

impl FeatureBits {
    /// Sets `bit` (0..256).
    pub fn set(&mut self, bit: u32) {
        self.0[(bit / 64) as usize % 4] |= 1 << (bit % 64);
    }

    /// Whether `bit` is set.
    pub fn contains(&self, bit: u32) -> bool {
        bit < 256 && self.0[(bit / 64) as usize] & (1 << (bit % 64)) != 0
    }

    /// The set bits, ascending: the order of the feature table.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..256u32).filter(|&b| self.contains(b))
    }

    /// The bitmap with exactly these bits.
    pub fn from_bits(bits: impl IntoIterator<Item = u32>) -> FeatureBits {
        let mut f = FeatureBits::default();
        for b in bits {
            f.set(b);
        }
        f
    }
}

/// The kind of a perf.data, from its first 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// File mode (104-byte header).
    File(Endian),
    /// Pipe mode (16-byte header).
    Pipe(Endian),
}

impl Kind {
    /// Tells file mode from pipe mode.
    pub fn of(head: &[u8]) -> Result<Kind, FormatError> {
        let e = endian_of(head).ok_or(FormatError::at(0, K::BadMagic))?;
        match Rd(e).u64(head, 8) {
            Some(FILE_HEADER_SIZE) => Ok(Kind::File(e)),
            Some(PIPE_HEADER_SIZE) => Ok(Kind::Pipe(e)),
            Some(n) => Err(FormatError::at(8, K::UnknownHeaderSize(n))),
            None => Err(FormatError::at(8, K::Truncated("header"))),
        }
    }

    /// The byte order.
    pub fn endian(self) -> Endian {
        match self {
            Kind::File(e) | Kind::Pipe(e) => e,
        }
    }
}

/// Largest attr section accepted: 64 MiB is far beyond any real recording.
const MAX_ATTR_SECTION: u64 = 64 << 20;

/// The header of a file-mode perf.data: every field of its 104 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHeader {
    pub endian: Endian,
    /// Size of one attr-section entry (attr + ids section).
    pub attr_size: u64,
    /// The attr section.
    pub attrs: Section,
    /// The data section.
    pub data: Section,
    /// The obsolete event_types section (perf writes it empty and ignores it).
    pub event_types: Section,
    /// The feature bitmap.
    pub features: FeatureBits,
}

impl FileHeader {
    /// Parses the 104-byte header, checking the sections lie in a file of
    /// `file_len` bytes.
    pub fn parse(b: &[u8], file_len: u64) -> Result<FileHeader, FormatError> {
        let e = match Kind::of(b)? {
            Kind::File(e) => e,
            Kind::Pipe(_) => {
                return Err(FormatError::at(
                    8,
                    K::Unsupported("a pipe-mode header here"),
                ))
            }
        };
        let r = Rd(e);
        let short = || FormatError::at(0, K::Truncated("104-byte header"));
        let attr_size = r.u64(b, 16).ok_or_else(short)?;
        let attrs = Section::parse(b, 24, e, file_len, "attr section", 24)?;
        let data = Section::parse(b, 40, e, file_len, "data section", 40)?;
        let event_types = Section {
            offset: r.u64(b, 56).ok_or_else(short)?,
            size: r.u64(b, 64).ok_or_else(short)?,
        };
        let mut features = FeatureBits::default();
        for (i, f) in features.0.iter_mut().enumerate() {
            *f = r.u64(b, 72 + i * 8).ok_or_else(short)?;
        }
        let implausible =
            |at, what, value| Err(FormatError::at(at, K::Implausible { what, value }));
        if !(16 + 64..=4096).contains(&attr_size) {
            return implausible(16, "attr entry size", attr_size);
        }
        if attrs.size > MAX_ATTR_SECTION {
            return implausible(32, "attr section size", attrs.size);
        }
        if attrs.size % attr_size != 0 {
            return Err(FormatError::at(
                32,
                K::Inconsistent("attr section size is not a multiple of the entry size"),
            ));
        }
        if data.offset < FILE_HEADER_SIZE {
            return Err(FormatError::at(
                40,
                K::Inconsistent("data section overlaps the header"),
            ));
        }
        Ok(FileHeader {
            endian: e,
            attr_size,
            attrs,
            data,
            event_types,
            features,
        })
    }

    /// The 104 bytes, in the header's byte order.
    pub fn encode(&self) -> Vec<u8> {
        let e = self.endian;
        let mut head = Vec::with_capacity(FILE_HEADER_SIZE as usize);
        head.extend_from_slice(&magic_bytes(e));
        head.put_u64(e, FILE_HEADER_SIZE);
        head.put_u64(e, self.attr_size);
        for s in [self.attrs, self.data, self.event_types] {
            s.put(&mut head, e);
        }
        for w in self.features.0 {
            head.put_u64(e, w);
        }
        head
    }

    /// Where the feature table starts: right after the data section.
    pub fn feature_table_offset(&self) -> u64 {
        self.data.end()
    }

    /// The feature table's length for this header's bitmap.
    pub fn feature_table_len(&self) -> u64 {
        16 * self.features.iter().count() as u64
    }
}

/// The feature table: one section per set feature bit, ascending.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureTable(pub Vec<(u32, Section)>);

impl FeatureTable {
    /// Parses the table bytes `b` (read at file offset `at`) for the bits of
    /// `bits`, checking each section lies in a file of `file_len` bytes.
    pub fn parse(
        b: &[u8],
        e: Endian,
        bits: &FeatureBits,
        at: u64,
        file_len: u64,
    ) -> Result<FeatureTable, FormatError> {
        let mut out = Vec::new();
        for (i, bit) in bits.iter().enumerate() {
            let off = i * 16;
            let s = Section::parse(b, off, e, file_len, "feature section", at + off as u64)?;
            out.push((bit, s));
        }
        Ok(FeatureTable(out))
    }

    /// The bitmap of the bits in the table.
    pub fn bits(&self) -> FeatureBits {
        FeatureBits::from_bits(self.0.iter().map(|(b, _)| *b))
    }

    /// The table bytes.
    pub fn encode(&self, e: Endian) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() * 16);
        for (_, s) in &self.0 {
            s.put(&mut out, e);
        }
        out
    }

    /// A table for payloads of these sizes laid out back to back from
    /// `start` (the first byte after the table itself).
    pub fn laid_out(sizes: impl IntoIterator<Item = (u32, u64)>, start: u64) -> FeatureTable {
        let mut pos = start;
        let mut out = Vec::new();
        for (bit, size) in sizes {
            out.push((bit, Section { offset: pos, size }));
            pos += size;
        }
        FeatureTable(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(e: Endian) -> FileHeader {
        FileHeader {
            endian: e,
            attr_size: 144,
            attrs: Section {
                offset: 112,
                size: 144,
            },
            data: Section {
                offset: 256,
                size: 24,
            },
            event_types: Section::default(),
            features: FeatureBits::from_bits([2, 3, 200]),
        }
    }

    // A header encodes to 104 bytes and parses back equal, in both byte orders.
    #[test]
    fn header_round_trip() {
        for e in [Endian::Little, Endian::Big] {
            let h = header(e);
            let b = h.encode();
            assert_eq!(b.len(), 104);
            assert_eq!(FileHeader::parse(&b, 1000).unwrap(), h);
            assert_eq!(Kind::of(&b).unwrap(), Kind::File(e));
        }
        assert_eq!(&header(Endian::Big).encode()[..8], b"2ELIFREP");
        assert_eq!(
            header(Endian::Little).features.iter().collect::<Vec<_>>(),
            vec![2, 3, 200]
        );
    }

    // Bad magic, short files and sections past the end are errors with offsets.
    #[test]
    fn rejects_bad_headers() {
        assert_eq!(Kind::of(b"NOTPERF!xxxxxxxx").unwrap_err().offset, 0);
        let mut h = vec![0u8; 104];
        h[..8].copy_from_slice(MAGIC);
        h[8..16].copy_from_slice(&104u64.to_le_bytes());
        h[16..24].copy_from_slice(&144u64.to_le_bytes());
        h[40..48].copy_from_slice(&104u64.to_le_bytes());
        h[48..56].copy_from_slice(&1000u64.to_le_bytes());
        let err = FileHeader::parse(&h, 200).unwrap_err();
        assert_eq!(err.offset, 40);
        assert!(err.to_string().contains("past the end"), "{err}");
        assert!(matches!(err.kind, K::SectionPastEnd { size: 1000, .. }));
    }

    // The feature table lays out, encodes and parses back; a section past the end is refused.
    #[test]
    fn feature_table_round_trip() {
        let t = FeatureTable::laid_out([(2, 10), (3, 68)], 500);
        assert_eq!(
            t.0[1].1,
            Section {
                offset: 510,
                size: 68
            }
        );
        let b = t.encode(Endian::Big);
        let back = FeatureTable::parse(&b, Endian::Big, &t.bits(), 468, 578).unwrap();
        assert_eq!(back, t);
        let err = FeatureTable::parse(&b, Endian::Big, &t.bits(), 468, 577).unwrap_err();
        assert_eq!(err.offset, 484);
    }
}
