//! Pure parsers for perf.data structures over byte slices, in either byte
//! order: headers, attrs, record headers, the fields of the records the
//! merge needs, and BUILD_ID tables. Every size is validated.

use crate::buildid::BuildId;
use crate::perf_data::{FILE_HEADER_SIZE, MAGIC, PIPE_HEADER_SIZE};
pub use crate::record::Rd;
use crate::record::{sample_type as st, types, Endian, SampleIdLayout};

/// What was wrong with the input, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at offset {offset}: {what}")]
pub struct FormatError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What was wrong.
    pub what: String,
}

/// Shorthand for a [`FormatError`].
pub fn bad(offset: u64, what: impl Into<String>) -> FormatError {
    FormatError {
        offset,
        what: what.into(),
    }
}

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

/// An {offset, size} pair of the file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Section {
    /// Offset.
    pub offset: u64,
    /// Size.
    pub size: u64,
}

impl Section {
    /// One past the end.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }
}

/// The header of a file-mode perf.data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHeader {
    /// Byte order.
    pub endian: Endian,
    /// Size of one attr-section entry (attr + ids section).
    pub attr_size: u64,
    /// The attr section.
    pub attrs: Section,
    /// The data section.
    pub data: Section,
    /// The (ignored) event_types section.
    pub event_types: Section,
    /// The feature bitmap.
    pub features: [u64; 4],
}

/// The kind of a perf.data, from its first 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// File mode (104-byte header).
    File(Endian),
    /// Pipe mode (16-byte header).
    Pipe(Endian),
}

/// Tells file mode from pipe mode.
pub fn kind_of(head: &[u8]) -> Result<Kind, FormatError> {
    let e = endian_of(head).ok_or_else(|| bad(0, "not a perf.data file (bad magic)"))?;
    match Rd(e).u64(head, 8) {
        Some(FILE_HEADER_SIZE) => Ok(Kind::File(e)),
        Some(PIPE_HEADER_SIZE) => Ok(Kind::Pipe(e)),
        Some(n) => Err(bad(8, format!("unknown header size {n}"))),
        None => Err(bad(8, "file too short for a header")),
    }
}

impl FileHeader {
    /// Parses the 104-byte header, checking the sections lie in a file of
    /// `file_len` bytes.
    pub fn parse(b: &[u8], file_len: u64) -> Result<FileHeader, FormatError> {
        let e = match kind_of(b)? {
            Kind::File(e) => e,
            Kind::Pipe(_) => return Err(bad(8, "pipe-mode header where file mode was expected")),
        };
        let r = Rd(e);
        let short = || bad(0, "file shorter than the 104-byte header");
        let sec = |off: usize| -> Result<Section, FormatError> {
            let s = Section {
                offset: r.u64(b, off).ok_or_else(short)?,
                size: r.u64(b, off + 8).ok_or_else(short)?,
            };
            if s.offset
                .checked_add(s.size)
                .is_none_or(|end| end > file_len)
            {
                return Err(bad(
                    off as u64,
                    format!(
                        "section {}+{} runs past the end of the file ({file_len} bytes)",
                        s.offset, s.size
                    ),
                ));
            }
            Ok(s)
        };
        let attr_size = r.u64(b, 16).ok_or_else(short)?;
        let attrs = sec(24)?;
        let data = sec(40)?;
        let event_types = Section {
            offset: r.u64(b, 56).ok_or_else(short)?,
            size: r.u64(b, 64).ok_or_else(short)?,
        };
        let mut features = [0u64; 4];
        for (i, f) in features.iter_mut().enumerate() {
            *f = r.u64(b, 72 + i * 8).ok_or_else(short)?;
        }
        if !(16 + 64..=4096).contains(&attr_size) {
            return Err(bad(16, format!("implausible attr entry size {attr_size}")));
        }
        if attrs.size > 64 << 20 {
            return Err(bad(
                32,
                format!("implausible attr section size {}", attrs.size),
            ));
        }
        if attrs.size % attr_size != 0 {
            return Err(bad(
                32,
                "attr section size is not a multiple of the entry size",
            ));
        }
        if data.offset < FILE_HEADER_SIZE {
            return Err(bad(40, "data section overlaps the header"));
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

    /// Set feature bits, ascending.
    pub fn feature_bits(&self) -> Vec<u32> {
        (0..256u32)
            .filter(|b| self.features[(b / 64) as usize] & (1 << (b % 64)) != 0)
            .collect()
    }
}

/// The parts of a `perf_event_attr` the merge needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrInfo {
    /// `sample_type`.
    pub sample_type: u64,
    /// `read_format`.
    pub read_format: u64,
    /// The bitfield, normalized to little-endian bit numbering.
    pub flags: u64,
    /// `attr.size`.
    pub size: u32,
    /// Event ids.
    pub ids: Vec<u64>,
}

/// `sample_id_all` bit of the attr bitfield.
pub const SAMPLE_ID_ALL: u64 = 1 << 18;

impl AttrInfo {
    /// Parses a `perf_event_attr` (at least 64 bytes). A big-endian bitfield
    /// is turned back into bit numbers as perf does.
    pub fn parse(b: &[u8], e: Endian, offset: u64) -> Result<AttrInfo, FormatError> {
        let r = Rd(e);
        let short = || bad(offset, "perf_event_attr truncated");
        let flags = match e {
            Endian::Little => r.u64(b, 40).ok_or_else(short)?,
            Endian::Big => {
                let raw: [u8; 8] = b
                    .get(40..48)
                    .ok_or_else(short)?
                    .try_into()
                    .map_err(|_| short())?;
                u64::from_le_bytes(raw.map(u8::reverse_bits))
            }
        };
        Ok(AttrInfo {
            size: r.u32(b, 4).ok_or_else(short)?,
            sample_type: r.u64(b, 24).ok_or_else(short)?,
            read_format: r.u64(b, 32).ok_or_else(short)?,
            flags,
            ids: Vec::new(),
        })
    }

    /// The sample_id trailer layout of this attr.
    pub fn layout(&self) -> SampleIdLayout {
        SampleIdLayout {
            sample_type: self.sample_type,
            sample_id_all: self.flags & SAMPLE_ID_ALL != 0,
        }
    }
}

/// A record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Type.
    pub type_: u32,
    /// misc.
    pub misc: u16,
    /// Total size, header included.
    pub size: u16,
}

impl RecordHeader {
    /// Parses 8 bytes.
    pub fn parse(b: &[u8], e: Endian) -> Option<RecordHeader> {
        let r = Rd(e);
        Some(RecordHeader {
            type_: r.u32(b, 0)?,
            misc: r.u16(b, 4)?,
            size: r.u16(b, 6)?,
        })
    }
}

/// Splits a buffer of whole records into (header, body) pairs; stops at the
/// first header that is truncated, has a size below 8 or runs past the end.
pub fn split_records(b: &[u8], e: Endian) -> impl Iterator<Item = (RecordHeader, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let h = RecordHeader::parse(b.get(at..)?, e)?;
        let size = usize::from(h.size);
        let rec = b.get(at..at.checked_add(size)?).filter(|_| size >= 8)?;
        at += size;
        Some((h, &rec[8..]))
    })
}

/// Where the id of a sample and of other records is, for finding its attr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdPos {
    /// Byte offset of the id in a sample body (after the header), if any.
    pub sample: Option<usize>,
    /// Byte offset of the id counted back from the end of a non-sample record.
    pub trailer_from_end: Option<usize>,
}

/// The id positions perf derives from an attr (`__perf_evsel__calc_id_pos`
/// and `calc_is_pos`).
pub fn id_pos(sample_type: u64) -> IdPos {
    if sample_type & st::IDENTIFIER != 0 {
        return IdPos {
            sample: Some(0),
            trailer_from_end: Some(8),
        };
    }
    if sample_type & st::ID == 0 {
        return IdPos {
            sample: None,
            trailer_from_end: None,
        };
    }
    let before = [st::IP, st::TID, st::TIME, 1 << 3 /* ADDR */];
    let sample = before.iter().filter(|&&b| sample_type & b != 0).count() * 8;
    let after = [st::CPU, st::STREAM_ID];
    let from_end = (after.iter().filter(|&&b| sample_type & b != 0).count() + 1) * 8;
    IdPos {
        sample: Some(sample),
        trailer_from_end: Some(from_end),
    }
}

/// pid, tid and time of a sample body (after the header), per sample_type.
pub fn sample_pid_time(body: &[u8], sample_type: u64, e: Endian) -> (Option<u32>, Option<u64>) {
    let r = Rd(e);
    let mut off = 0;
    if sample_type & st::IDENTIFIER != 0 {
        off += 8;
    }
    if sample_type & st::IP != 0 {
        off += 8;
    }
    let pid = if sample_type & st::TID != 0 {
        let p = r.u32(body, off);
        off += 8;
        p
    } else {
        None
    };
    let time = if sample_type & st::TIME != 0 {
        r.u64(body, off)
    } else {
        None
    };
    (pid, time)
}

/// The map-identifying fields of an MMAP or MMAP2 record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MapKey {
    /// pid.
    pub pid: u32,
    /// Start address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// File offset.
    pub pgoff: u64,
    /// File name.
    pub filename: Vec<u8>,
}

/// A decoded MMAP/MMAP2 record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapRecord {
    /// Identity for dedupe.
    pub key: MapKey,
    /// tid.
    pub tid: u32,
    /// misc bits.
    pub misc: u16,
    /// Build id (MMAP2 build-id form).
    pub build_id: Option<BuildId>,
    /// maj, min, ino (MMAP2 inode form).
    pub dev_ino: Option<(u32, u32, u64)>,
    /// PROT_* (MMAP2) — MMAP records get PROT_READ|PROT_EXEC unless MMAP_DATA.
    pub prot: u32,
    /// MAP_* flags (MMAP2), MAP_PRIVATE for MMAP.
    pub flags: u32,
}

fn cstr(b: &[u8]) -> Vec<u8> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    b[..end].to_vec()
}

/// Decodes an MMAP (1) or MMAP2 (10) record body (after the header).
pub fn parse_map(h: &RecordHeader, body: &[u8], e: Endian) -> Option<MapRecord> {
    let r = Rd(e);
    let pid = r.u32(body, 0)?;
    let tid = r.u32(body, 4)?;
    let addr = r.u64(body, 8)?;
    let len = r.u64(body, 16)?;
    let pgoff = r.u64(body, 24)?;
    // The parts that differ: where the name starts, the file identity,
    // prot and flags (MMAP has none: exec unless MMAP_DATA, private).
    let (name_at, build_id, dev_ino, prot, flags) = match h.type_ {
        types::MMAP => {
            let data = h.misc & crate::record::misc::MMAP_DATA != 0;
            (32, None, None, if data { 1 } else { 5 }, 2)
        }
        types::MMAP2 => {
            let (build_id, dev_ino) = if h.misc & crate::record::misc::MMAP_BUILD_ID != 0 {
                let n = usize::from(*body.get(32)?);
                if n > 20 {
                    return None;
                }
                (BuildId::new(body.get(36..36 + n)?), None)
            } else {
                let ino = (r.u32(body, 32)?, r.u32(body, 36)?, r.u64(body, 40)?);
                (None, Some(ino))
            };
            (64, build_id, dev_ino, r.u32(body, 56)?, r.u32(body, 60)?)
        }
        _ => return None,
    };
    Some(MapRecord {
        key: MapKey {
            pid,
            addr,
            len,
            pgoff,
            filename: cstr(body.get(name_at..)?),
        },
        tid,
        misc: h.misc,
        build_id,
        dev_ino,
        prot,
        flags,
    })
}

/// Decodes a COMM record body: (pid, tid, name).
pub fn parse_comm(body: &[u8], e: Endian) -> Option<(u32, u32, Vec<u8>)> {
    let r = Rd(e);
    Some((r.u32(body, 0)?, r.u32(body, 4)?, cstr(body.get(8..)?)))
}

/// One entry of a BUILD_ID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdRecord {
    /// The id (None when it does not fit 1..=20 bytes).
    pub build_id: Option<BuildId>,
    /// The file name.
    pub filename: Vec<u8>,
}

/// Parses a BUILD_ID feature payload (or one HEADER_BUILD_ID record body
/// with its header) into entries; `base` is the payload's file offset.
pub fn parse_build_id_table(
    b: &[u8],
    e: Endian,
    base: u64,
) -> Result<Vec<BuildIdRecord>, FormatError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < b.len() {
        let h = RecordHeader::parse(&b[off..], e)
            .ok_or_else(|| bad(base + off as u64, "truncated build-id entry header"))?;
        let size = usize::from(h.size);
        if size < 36 || off + size > b.len() {
            return Err(bad(
                base + off as u64,
                format!("bad build-id entry size {size}"),
            ));
        }
        let rec = &b[off..off + size];
        let len = if h.misc & crate::record::misc::BUILD_ID_SIZE != 0 {
            usize::from(rec[12 + 20]).min(20)
        } else {
            20
        };
        out.push(BuildIdRecord {
            build_id: BuildId::new(&rec[12..12 + len]),
            filename: cstr(&rec[36..]),
        });
        off += size;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::{self, Attr, EventDesc, Metadata};
    use crate::record::{self, misc, BuildIdEntry, Mmap2, Mmap2Id, SampleId};

    // A file written by our writer parses back, in both byte orders, attrs included.
    #[test]
    fn header_and_attr_round_trip() {
        for e in [Endian::Little, Endian::Big] {
            let attr = Attr {
                sample_type: st::IP | st::TID | st::TIME | st::ID,
                flags: perf_data::attr_flags::SAMPLE_ID_ALL | perf_data::attr_flags::MMAP2,
                ..Default::default()
            };
            let meta = Metadata {
                endian: e,
                events: vec![EventDesc {
                    attr: attr.encode(e),
                    name: b"x".to_vec(),
                    ids: vec![5],
                }],
                features: vec![],
                build_ids: vec![BuildIdEntry {
                    cpumode: misc::USER,
                    pid: -1,
                    build_id: BuildId::new(&[3; 8]).unwrap(),
                    filename: b"/x".to_vec(),
                }],
            };
            let mut f = Vec::new();
            perf_data::write_file(&mut f, &meta, &[]).unwrap();
            let h = FileHeader::parse(&f[..104], f.len() as u64).unwrap();
            assert_eq!(h.endian, e);
            assert_eq!(h.feature_bits(), vec![perf_data::feature::BUILD_ID]);
            let a = AttrInfo::parse(&f[h.attrs.offset as usize..], e, h.attrs.offset).unwrap();
            assert_eq!(a.sample_type, attr.sample_type);
            assert_eq!(a.flags, attr.flags);
            assert!(a.layout().sample_id_all);
            let table = (h.data.end()) as usize;
            let off = Rd(e).u64(&f, table).unwrap() as usize;
            let size = Rd(e).u64(&f, table + 8).unwrap() as usize;
            let ids = parse_build_id_table(&f[off..off + size], e, off as u64).unwrap();
            assert_eq!(ids[0].build_id.unwrap().as_bytes(), &[3; 8]);
            assert_eq!(ids[0].filename, b"/x");
        }
    }

    // Bad magic, short files and sections past the end are errors with offsets.
    #[test]
    fn rejects_bad_headers() {
        assert_eq!(kind_of(b"NOTPERF!xxxxxxxx").unwrap_err().offset, 0);
        let mut h = vec![0u8; 104];
        h[..8].copy_from_slice(MAGIC);
        h[8..16].copy_from_slice(&104u64.to_le_bytes());
        h[16..24].copy_from_slice(&144u64.to_le_bytes());
        h[40..48].copy_from_slice(&104u64.to_le_bytes());
        h[48..56].copy_from_slice(&1000u64.to_le_bytes());
        let err = FileHeader::parse(&h, 200).unwrap_err();
        assert_eq!(err.offset, 40);
        assert!(err.what.contains("past the end"), "{}", err.what);
    }

    // MMAP2 in both forms and COMM decode to the fields that were encoded.
    #[test]
    fn map_and_comm_round_trip() {
        for e in [Endian::Little, Endian::Big] {
            for id in [
                Mmap2Id::BuildId(BuildId::new(&[9; 20]).unwrap()),
                Mmap2Id::Inode {
                    maj: 8,
                    min: 2,
                    ino: 77,
                    ino_generation: 0,
                },
            ] {
                let mut out = Vec::new();
                let m = Mmap2 {
                    misc: misc::USER,
                    pid: 4,
                    tid: 5,
                    addr: 0x1000,
                    len: 0x2000,
                    pgoff: 0x3000,
                    id,
                    prot: 5,
                    flags: 2,
                    filename: b"/lib/a.so",
                };
                let l = SampleIdLayout {
                    sample_type: st::TID | st::IDENTIFIER,
                    sample_id_all: true,
                };
                record::encode_mmap2(&mut out, e, &m, &l, &SampleId::default()).unwrap();
                let h = RecordHeader::parse(&out, e).unwrap();
                assert_eq!(usize::from(h.size), out.len());
                let d = parse_map(&h, &out[8..], e).unwrap();
                assert_eq!(d.key.filename, b"/lib/a.so");
                assert_eq!(
                    (d.key.pid, d.tid, d.key.addr, d.key.len, d.key.pgoff),
                    (4, 5, 0x1000, 0x2000, 0x3000)
                );
                match id {
                    Mmap2Id::BuildId(b) => assert_eq!(d.build_id, Some(b)),
                    Mmap2Id::Inode { .. } => assert_eq!(d.dev_ino, Some((8, 2, 77))),
                }
            }
            let mut out = Vec::new();
            record::encode_comm(
                &mut out,
                e,
                1,
                2,
                b"name",
                &SampleIdLayout::default(),
                &SampleId::default(),
            )
            .unwrap();
            assert_eq!(parse_comm(&out[8..], e), Some((1, 2, b"name".to_vec())));
        }
    }

    // split_records yields whole records and stops at a truncated or bad one.
    #[test]
    fn split_records_stops_at_damage() {
        let e = Endian::Little;
        let mut b = Vec::new();
        record::encode_empty(&mut b, e, types::FINISHED_ROUND);
        record::encode_empty(&mut b, e, types::FINISHED_INIT);
        assert_eq!(split_records(&b, e).count(), 2);
        assert_eq!(split_records(&b[..12], e).count(), 1);
        b[14] = 4; // second record claims size 4
        assert_eq!(split_records(&b, e).count(), 1);
    }

    // Sample fields and id positions follow perf's rules.
    #[test]
    fn sample_fields_and_id_positions() {
        let mut body = Vec::new();
        use crate::record::PutExt;
        body.put_u64(Endian::Little, 0x42); // IDENTIFIER
        body.put_u64(Endian::Little, 0xffff); // IP
        body.put_u32(Endian::Little, 77); // pid
        body.put_u32(Endian::Little, 78); // tid
        body.put_u64(Endian::Little, 123456); // time
        let t = st::IDENTIFIER | st::IP | st::TID | st::TIME;
        assert_eq!(
            sample_pid_time(&body, t, Endian::Little),
            (Some(77), Some(123456))
        );
        assert_eq!(id_pos(t).sample, Some(0));
        let t = st::IP | st::TID | st::TIME | st::ID | st::CPU;
        assert_eq!(
            id_pos(t),
            IdPos {
                sample: Some(24),
                trailer_from_end: Some(16)
            }
        );
        assert_eq!(id_pos(st::IP).sample, None);
    }
}
