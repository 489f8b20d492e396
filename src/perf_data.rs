//! perf.data writer: file mode (two phases: lay out every section, then write)
//! and pipe mode. Feature payload encoders are pure functions over bytes.

use std::io::{self, Write};

use crate::record::{self, BuildIdEntry, Endian, PutExt, RecordTooLarge};

/// `PERFILE2` as bytes; read as a host u64 it tells the byte order.
pub const MAGIC: &[u8; 8] = b"PERFILE2";
/// Size of the file-mode header.
pub const FILE_HEADER_SIZE: u64 = 104;
/// Size of the pipe-mode header.
pub const PIPE_HEADER_SIZE: u64 = 16;
/// `perf_event_attr` size written in new files (PERF_ATTR_SIZE_VER7), the
/// largest perf 6.1 accepts.
pub const ATTR_SIZE: usize = 128;

/// Feature bit numbers (`HEADER_*`).
pub mod feature {
    /// HEADER_BUILD_ID.
    pub const BUILD_ID: u32 = 2;
    /// HEADER_HOSTNAME.
    pub const HOSTNAME: u32 = 3;
    /// HEADER_OSRELEASE.
    pub const OSRELEASE: u32 = 4;
    /// HEADER_VERSION.
    pub const VERSION: u32 = 5;
    /// HEADER_ARCH.
    pub const ARCH: u32 = 6;
    /// HEADER_NRCPUS.
    pub const NRCPUS: u32 = 7;
    /// HEADER_CMDLINE.
    pub const CMDLINE: u32 = 11;
    /// HEADER_EVENT_DESC.
    pub const EVENT_DESC: u32 = 12;
    /// HEADER_LAST_FEATURE as perf 6.1 numbers it: ends the pipe-mode features.
    pub const LAST_FEATURE: u32 = 32;
}

/// `perf_event_attr` flag bits (the C bitfield after `read_format`).
pub mod attr_flags {
    /// disabled.
    pub const DISABLED: u64 = 1 << 0;
    /// mmap.
    pub const MMAP: u64 = 1 << 8;
    /// comm.
    pub const COMM: u64 = 1 << 9;
    /// task.
    pub const TASK: u64 = 1 << 13;
    /// sample_id_all.
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// mmap2.
    pub const MMAP2: u64 = 1 << 23;
    /// comm_exec.
    pub const COMM_EXEC: u64 = 1 << 24;
    /// build_id: MMAP2 records carry build ids.
    pub const BUILD_ID: u64 = 1 << 34;
}

/// The fields of `perf_event_attr` this tool sets; the rest are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    /// `type` (PERF_TYPE_*).
    pub type_: u32,
    /// `config`.
    pub config: u64,
    /// `sample_period`.
    pub sample_period: u64,
    /// `sample_type`.
    pub sample_type: u64,
    /// `read_format`.
    pub read_format: u64,
    /// The bitfield, as on a little-endian machine (bit 0 = `disabled`).
    pub flags: u64,
}

/// PERF_TYPE_SOFTWARE.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// PERF_COUNT_SW_DUMMY.
pub const PERF_COUNT_SW_DUMMY: u64 = 9;

impl Attr {
    /// Encodes as a 128-byte `perf_event_attr`. In a big-endian file the
    /// bitfield is laid out as a big-endian compiler does (bit 0 is the top
    /// bit of the first byte), which is how perf reads it back.
    pub fn encode(&self, e: Endian) -> Vec<u8> {
        let mut b = Vec::with_capacity(ATTR_SIZE);
        b.put_u32(e, self.type_);
        b.put_u32(e, ATTR_SIZE as u32);
        b.put_u64(e, self.config);
        b.put_u64(e, self.sample_period);
        b.put_u64(e, self.sample_type);
        b.put_u64(e, self.read_format);
        match e {
            Endian::Little => b.put_u64(e, self.flags),
            Endian::Big => b.extend(self.flags.to_le_bytes().map(u8::reverse_bits)),
        }
        b.resize(ATTR_SIZE, 0);
        b
    }

    /// The trailer layout this attr gives non-sample records.
    pub fn sample_id_layout(&self) -> record::SampleIdLayout {
        record::SampleIdLayout {
            sample_type: self.sample_type,
            sample_id_all: self.flags & attr_flags::SAMPLE_ID_ALL != 0,
        }
    }
}

/// Encodes a header string: u32 length (strlen + 1 rounded up to 64), then
/// the NUL-padded bytes.
pub fn encode_string(out: &mut Vec<u8>, e: Endian, s: &[u8]) {
    let len = (s.len() + 1).div_ceil(64) * 64;
    out.put_u32(e, len as u32);
    out.extend_from_slice(s);
    out.resize(out.len() + (len - s.len()), 0);
}

/// HOSTNAME / OSRELEASE / VERSION / ARCH payload.
pub fn string_feature(e: Endian, s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_string(&mut out, e, s);
    out
}

/// NRCPUS payload: u32 online, u32 available.
pub fn nrcpus_feature(e: Endian, online: u32, available: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u32(e, online);
    out.put_u32(e, available);
    out
}

/// CMDLINE payload: u32 count, then the strings.
pub fn cmdline_feature(e: Endian, args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u32(e, args.len() as u32);
    for a in args {
        encode_string(&mut out, e, a);
    }
    out
}

/// One event for EVENT_DESC and the attr section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDesc {
    /// Encoded `perf_event_attr`.
    pub attr: Vec<u8>,
    /// Event name.
    pub name: Vec<u8>,
    /// Event ids.
    pub ids: Vec<u64>,
}

/// EVENT_DESC payload: u32 nr, u32 attr_sz, then per event the attr, u32
/// nr_ids, the name string and the ids.
pub fn event_desc_feature(e: Endian, events: &[EventDesc]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u32(e, events.len() as u32);
    out.put_u32(
        e,
        events.first().map_or(ATTR_SIZE, |ev| ev.attr.len()) as u32,
    );
    for ev in events {
        out.extend_from_slice(&ev.attr);
        out.put_u32(e, ev.ids.len() as u32);
        encode_string(&mut out, e, &ev.name);
        for &id in &ev.ids {
            out.put_u64(e, id);
        }
    }
    out
}

/// BUILD_ID payload: one entry per DSO.
pub fn build_id_feature(e: Endian, entries: &[BuildIdEntry]) -> Result<Vec<u8>, RecordTooLarge> {
    let mut out = Vec::new();
    for b in entries {
        record::encode_build_id_entry(&mut out, e, 0, b)?;
    }
    Ok(out)
}

/// Everything a perf.data needs besides its records.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// Byte order of the output.
    pub endian: Endian,
    /// The events (attrs with names and ids).
    pub events: Vec<EventDesc>,
    /// Feature payloads by bit number, ascending, BUILD_ID excluded.
    pub features: Vec<(u32, Vec<u8>)>,
    /// BUILD_ID table entries.
    pub build_ids: Vec<BuildIdEntry>,
}

/// Section location in a file-mode header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Section {
    offset: u64,
    size: u64,
}

/// Writes a file-mode perf.data: header, ids, attrs, data, feature table,
/// feature payloads. Offsets are reserved first, then everything is written
/// in one pass, so `out` needs no seeking.
pub fn write_file(out: &mut impl Write, meta: &Metadata, data: &[u8]) -> io::Result<()> {
    let e = meta.endian;
    let mut features = meta.features.clone();
    if !meta.build_ids.is_empty() {
        let payload = build_id_feature(e, &meta.build_ids)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
        features.push((feature::BUILD_ID, payload));
    }
    features.sort_by_key(|(bit, _)| *bit);
    features.dedup_by_key(|(bit, _)| *bit);

    // Phase 1: layout.
    let mut pos = FILE_HEADER_SIZE;
    let mut id_sections = Vec::new();
    for ev in &meta.events {
        let size = ev.ids.len() as u64 * 8;
        id_sections.push(Section { offset: pos, size });
        pos += size;
    }
    let attr_entry = meta.events.first().map_or(ATTR_SIZE, |ev| ev.attr.len()) as u64 + 16;
    let attrs = Section {
        offset: pos,
        size: attr_entry * meta.events.len() as u64,
    };
    pos += attrs.size;
    let data_sec = Section {
        offset: pos,
        size: data.len() as u64,
    };
    pos += data_sec.size;
    let table_at = pos;
    pos += 16 * features.len() as u64;
    let mut feat_sections = Vec::new();
    for (_, payload) in &features {
        feat_sections.push(Section {
            offset: pos,
            size: payload.len() as u64,
        });
        pos += payload.len() as u64;
    }
    debug_assert_eq!(table_at, data_sec.offset + data_sec.size);

    // Phase 2: write.
    let mut head = Vec::with_capacity(FILE_HEADER_SIZE as usize);
    let magic_value = u64::from_le_bytes(*MAGIC);
    head.put_u64(e, magic_value);
    head.put_u64(e, FILE_HEADER_SIZE);
    head.put_u64(e, attr_entry);
    for s in [attrs, data_sec, Section::default()] {
        head.put_u64(e, s.offset);
        head.put_u64(e, s.size);
    }
    let mut bitmap = [0u64; 4];
    for (bit, _) in &features {
        bitmap[(*bit / 64) as usize] |= 1 << (bit % 64);
    }
    for w in bitmap {
        head.put_u64(e, w);
    }
    out.write_all(&head)?;

    let mut buf = Vec::new();
    for ev in &meta.events {
        for &id in &ev.ids {
            buf.put_u64(e, id);
        }
    }
    for (ev, ids) in meta.events.iter().zip(&id_sections) {
        buf.extend_from_slice(&ev.attr);
        buf.put_u64(e, ids.offset);
        buf.put_u64(e, ids.size);
    }
    out.write_all(&buf)?;
    out.write_all(data)?;
    buf.clear();
    for s in &feat_sections {
        buf.put_u64(e, s.offset);
        buf.put_u64(e, s.size);
    }
    out.write_all(&buf)?;
    for (_, payload) in &features {
        out.write_all(payload)?;
    }
    Ok(())
}

/// Writes the pipe-mode prologue: the 16-byte header, HEADER_ATTR records,
/// HEADER_FEATURE records (ending with LAST_FEATURE) and the build ids as
/// HEADER_BUILD_ID records. The data records follow.
pub fn write_pipe_prologue(out: &mut impl Write, meta: &Metadata) -> io::Result<()> {
    let e = meta.endian;
    let too_large = |err: RecordTooLarge| io::Error::new(io::ErrorKind::InvalidData, err);
    let mut buf = Vec::new();
    buf.put_u64(e, u64::from_le_bytes(*MAGIC));
    buf.put_u64(e, PIPE_HEADER_SIZE);
    for ev in &meta.events {
        let at = record::begin_record(&mut buf, e, record::types::HEADER_ATTR, 0);
        buf.extend_from_slice(&ev.attr);
        for &id in &ev.ids {
            buf.put_u64(e, id);
        }
        record::finish_record(&mut buf, e, at, record::types::HEADER_ATTR).map_err(too_large)?;
    }
    // Each feature, then LAST_FEATURE with no payload to end the list.
    let last = (feature::LAST_FEATURE, Vec::new());
    for (bit, payload) in meta.features.iter().chain(std::iter::once(&last)) {
        let at = record::begin_record(&mut buf, e, record::types::HEADER_FEATURE, 0);
        buf.put_u64(e, u64::from(*bit));
        buf.extend_from_slice(payload);
        buf.pad_to(8);
        record::finish_record(&mut buf, e, at, record::types::HEADER_FEATURE).map_err(too_large)?;
    }
    for b in &meta.build_ids {
        record::encode_build_id_entry(&mut buf, e, record::types::HEADER_BUILD_ID, b)
            .map_err(too_large)?;
    }
    out.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Header strings are padded so their length is a multiple of 64 including the NUL.
    #[test]
    fn string_padding() {
        let s = string_feature(Endian::Little, b"x86_64");
        assert_eq!(&s[..4], &64u32.to_le_bytes());
        assert_eq!(s.len(), 68);
        let s = string_feature(Endian::Big, &[b'a'; 64]);
        assert_eq!(&s[..4], &128u32.to_be_bytes());
        assert_eq!(s[4 + 64], 0);
    }

    // The big-endian attr bitfield is bit-reversed per byte, as a BE compiler lays it out.
    #[test]
    fn attr_bitfield_big_endian() {
        let a = Attr {
            flags: attr_flags::DISABLED | attr_flags::SAMPLE_ID_ALL,
            ..Default::default()
        };
        let le = a.encode(Endian::Little);
        let be = a.encode(Endian::Big);
        assert_eq!(le.len(), ATTR_SIZE);
        assert_eq!(le[40], 0x01);
        assert_eq!(be[40], 0x80);
        // bit 18 = byte 2, bit 2 -> reversed: bit 5
        assert_eq!(le[42], 0x04);
        assert_eq!(be[42], 0x20);
        assert_eq!(&be[4..8], &128u32.to_be_bytes());
    }

    // The file layout puts the feature table right after the data and the offsets add up.
    #[test]
    fn file_layout() {
        let attr = Attr::default().encode(Endian::Little);
        let meta = Metadata {
            endian: Endian::Little,
            events: vec![EventDesc {
                attr,
                name: b"dummy".to_vec(),
                ids: vec![1],
            }],
            features: vec![(feature::HOSTNAME, string_feature(Endian::Little, b"h"))],
            build_ids: vec![],
        };
        let mut out = Vec::new();
        write_file(&mut out, &meta, &[0xee; 24]).unwrap();
        let u = |o: usize| u64::from_le_bytes(out[o..o + 8].try_into().unwrap());
        assert_eq!(&out[..8], MAGIC);
        assert_eq!(u(8), 104);
        assert_eq!(u(16), 144);
        assert_eq!((u(24), u(32)), (112, 144));
        assert_eq!((u(40), u(48)), (256, 24));
        assert_eq!(u(72), 1 << feature::HOSTNAME);
        assert_eq!(u(104), 1);
        assert_eq!(&out[256..280], &[0xee; 24]);
        assert_eq!((u(280), u(288)), (296, 68));
        assert_eq!(out.len(), 296 + 68);
        let mut be = Vec::new();
        write_file(
            &mut be,
            &Metadata {
                endian: Endian::Big,
                ..meta
            },
            &[],
        )
        .unwrap();
        assert_eq!(&be[..8], b"2ELIFREP");
    }
}
