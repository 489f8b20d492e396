//! Feature payloads: header strings, NRCPUS, CMDLINE, EVENT_DESC and the
//! BUILD_ID table (encoded and parsed by one type, [`BuildIdEntry`]).

use super::attr::Attr;
use super::consts::{misc, ATTR_SIZE, MAX_BUILD_ID};
use super::error::{FormatError, FormatErrorKind as K, RecordTooLarge};
use super::record::{begin_record, finish_record, put_cstr, RecordHeader};
use crate::bytes::{cstr, Endian, PutExt, Rd};
use crate::model::BuildId;

/// Header, pid and the 24-byte id field of a BUILD_ID entry: the name follows.
const ENTRY_FIXED: usize = 36;

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

/// The string of a HOSTNAME / OSRELEASE / VERSION / ARCH payload (up to
/// its first NUL), None when the length runs past the payload.
pub fn parse_string_feature(b: &[u8], e: Endian) -> Option<&[u8]> {
    let len = Rd(e).u32(b, 0)? as usize;
    Some(cstr(b.get(4..4usize.checked_add(len)?)?))
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
    pub attr: Attr,
    pub name: Vec<u8>,
    pub ids: Vec<u64>,
}

/// EVENT_DESC payload: u32 nr, u32 attr_sz, then per event the attr, u32
/// nr_ids, the name string and the ids.
pub fn event_desc_feature(e: Endian, events: &[EventDesc]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u32(e, events.len() as u32);
    let attrs: Vec<Vec<u8>> = events.iter().map(|ev| ev.attr.encode(e)).collect();
    out.put_u32(e, attrs.first().map_or(ATTR_SIZE, Vec::len) as u32);
    for (ev, attr) in events.iter().zip(&attrs) {
        out.extend_from_slice(attr);
        out.put_u32(e, ev.ids.len() as u32);
        encode_string(&mut out, e, &ev.name);
        for &id in &ev.ids {
            out.put_u64(e, id);
        }
    }
    out
}

/// EVENT_DESC payload for attrs as a file holds them: each attr's own
/// bytes (unknown fields kept, in the file's byte order), zero-padded to
/// the longest, with its name and ids.
pub fn event_desc_of_raw(e: Endian, events: &[(&[u8], &[u8], &[u64])]) -> Vec<u8> {
    let attr_sz = events
        .iter()
        .map(|(raw, ..)| raw.len())
        .max()
        .unwrap_or(ATTR_SIZE);
    let mut out = Vec::new();
    out.put_u32(e, events.len() as u32);
    out.put_u32(e, attr_sz as u32);
    for &(raw, name, ids) in events {
        out.extend_from_slice(raw);
        out.resize(out.len() + attr_sz - raw.len(), 0);
        out.put_u32(e, ids.len() as u32);
        encode_string(&mut out, e, name);
        for &id in ids {
            out.put_u64(e, id);
        }
    }
    out
}

/// The (name, ids) of each event in an EVENT_DESC payload, in order; None
/// when a count or length runs past the payload.
pub fn parse_event_desc(b: &[u8], e: Endian) -> Option<Vec<(Vec<u8>, Vec<u64>)>> {
    let r = Rd(e);
    let nr = r.u32(b, 0)? as usize;
    let attr_sz = r.u32(b, 4)? as usize;
    let mut at = 8usize;
    // each event takes at least its attr, nr_ids and a string length
    if nr > b.len() / attr_sz.saturating_add(8).max(1) {
        return None;
    }
    let mut out = Vec::with_capacity(nr);
    for _ in 0..nr {
        at = at.checked_add(attr_sz)?;
        let nr_ids = r.u32(b, at)? as usize;
        let len = r.u32(b, at + 4)? as usize;
        let name = cstr(b.get(at + 8..(at + 8).checked_add(len)?)?).to_vec();
        at = at + 8 + len;
        if nr_ids > b.len().saturating_sub(at) / 8 {
            return None;
        }
        let ids = (0..nr_ids)
            .map(|i| r.u64(b, at + 8 * i))
            .collect::<Option<_>>()?;
        at += nr_ids * 8;
        out.push((name, ids));
    }
    Some(out)
}

/// BUILD_ID entries back to back: `record_type` 0 for the feature payload,
/// HEADER_BUILD_ID for pipe-mode records.
pub fn encode_build_id_entries(
    e: Endian,
    record_type: u32,
    entries: &[BuildIdEntry],
) -> Result<Vec<u8>, RecordTooLarge> {
    let mut out = Vec::new();
    for b in entries {
        encode_build_id_entry(&mut out, e, record_type, b)?;
    }
    Ok(out)
}

/// BUILD_ID feature payload: one entry per DSO.
pub fn build_id_feature(e: Endian, entries: &[BuildIdEntry]) -> Result<Vec<u8>, RecordTooLarge> {
    encode_build_id_entries(e, 0, entries)
}

/// One entry of the BUILD_ID table (feature section or pipe-mode record).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BuildIdEntry {
    /// cpumode (`misc::USER` or `misc::KERNEL`, guest modes too).
    pub cpumode: u16,
    /// Machine pid: -1 for the host.
    pub pid: i32,
    pub build_id: BuildId,
    pub filename: Vec<u8>,
}

/// Encodes a BUILD_ID table entry: `record_type` 0 inside the feature
/// section, [`super::consts::types::HEADER_BUILD_ID`] as a pipe-mode record. The file name
/// is padded to 64 bytes, as perf 6.1 writes it.
pub fn encode_build_id_entry(
    out: &mut Vec<u8>,
    e: Endian,
    record_type: u32,
    b: &BuildIdEntry,
) -> Result<(), RecordTooLarge> {
    let at = begin_record(out, e, record_type, b.cpumode | misc::BUILD_ID_SIZE);
    out.put_u32(e, b.pid as u32);
    let id = b.build_id.as_bytes();
    out.extend_from_slice(id);
    out.resize(out.len() + (MAX_BUILD_ID - id.len()), 0);
    out.push(id.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    put_cstr(out, &b.filename, 64);
    finish_record(out, e, at, record_type)
}

/// Parses a BUILD_ID feature payload (or one HEADER_BUILD_ID record body
/// with its header) into entries; `base` is the payload's file offset.
/// Entries whose id is empty are left out (they name no file version).
pub fn parse_build_id_table(
    b: &[u8],
    e: Endian,
    base: u64,
) -> Result<Vec<BuildIdEntry>, FormatError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < b.len() {
        let at = base + off as u64;
        let h = RecordHeader::parse(&b[off..], e)
            .ok_or(FormatError::at(at, K::Truncated("build-id entry header")))?;
        let size = usize::from(h.size);
        if size < ENTRY_FIXED || size > b.len() - off {
            return Err(FormatError::at(at, K::BadBuildIdEntry(size)));
        }
        let rec = &b[off..off + size];
        let len = if h.misc & misc::BUILD_ID_SIZE != 0 {
            usize::from(rec[12 + MAX_BUILD_ID]).min(MAX_BUILD_ID)
        } else {
            MAX_BUILD_ID
        };
        if let Some(build_id) = BuildId::new(&rec[12..12 + len]) {
            out.push(BuildIdEntry {
                cpumode: h.misc & !misc::BUILD_ID_SIZE,
                pid: Rd(e).u32(rec, 8).unwrap_or(u32::MAX) as i32,
                build_id,
                filename: cstr(&rec[ENTRY_FIXED..]).to_vec(),
            });
        }
        off += size;
    }
    Ok(out)
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

    // EVENT_DESC parses back to the names and ids encoded, in both orders,
    // from attrs or their raw bytes (padded to the longest); a count past
    // the payload is None, not an allocation.
    #[test]
    fn event_desc_round_trip() {
        for e in [Endian::Little, Endian::Big] {
            let ev = |name: &[u8], ids: Vec<u64>| EventDesc {
                attr: Attr::default(),
                name: name.to_vec(),
                ids,
            };
            let b = event_desc_feature(e, &[ev(b"cycles", vec![1, 2]), ev(b"cpu-clock", vec![])]);
            let got = parse_event_desc(&b, e).unwrap();
            assert_eq!(
                got,
                vec![
                    (b"cycles".to_vec(), vec![1, 2]),
                    (b"cpu-clock".to_vec(), vec![])
                ]
            );
            // from attrs' own bytes: each padded to the longest, kept as is
            let (short, long) = ([7u8; 64], [9u8; 136]);
            let r = event_desc_of_raw(e, &[(&short, b"a", &[5]), (&long, b"b", &[6, 7])]);
            assert_eq!(e.u32_bytes(136), r[4..8]);
            assert_eq!((&r[8..72], &r[72..144]), (&short[..], &[0u8; 72][..]));
            let got = parse_event_desc(&r, e).unwrap();
            assert_eq!(
                got,
                vec![(b"a".to_vec(), vec![5]), (b"b".to_vec(), vec![6, 7])]
            );
            let mut bad = b.clone();
            bad[..4].copy_from_slice(&e.u32_bytes(u32::MAX));
            assert_eq!(parse_event_desc(&bad, e), None);
            assert_eq!(parse_event_desc(&b[..b.len() - 4], e), None);
        }
    }

    // A BUILD_ID table entry stores the length at byte 20 and pads the name to 64.
    #[test]
    fn build_id_entry_layout() {
        let mut out = Vec::new();
        let b = BuildIdEntry {
            cpumode: misc::USER,
            pid: -1,
            build_id: BuildId::new(&[1; 16]).unwrap(),
            filename: b"/a".to_vec(),
        };
        encode_build_id_entry(&mut out, Endian::Little, 0, &b).unwrap();
        assert_eq!(out.len(), 36 + 64);
        assert_eq!(
            u16::from_le_bytes([out[4], out[5]]),
            misc::USER | misc::BUILD_ID_SIZE
        );
        assert_eq!(&out[8..12], &(-1i32).to_le_bytes());
        assert_eq!(out[12 + 20], 16);
    }

    // BUILD_ID entries parse back with cpumode, pid and id length; a bad size is an error at its offset.
    #[test]
    fn build_id_table_round_trip() {
        for e in [Endian::Little, Endian::Big] {
            let entries = vec![
                BuildIdEntry {
                    cpumode: misc::USER,
                    pid: -1,
                    build_id: BuildId::new(&[3; 8]).unwrap(),
                    filename: b"/x".to_vec(),
                },
                BuildIdEntry {
                    cpumode: misc::KERNEL,
                    pid: 7,
                    build_id: BuildId::new(&[4; 20]).unwrap(),
                    filename: b"[kernel.kallsyms]".to_vec(),
                },
            ];
            let mut b = build_id_feature(e, &entries).unwrap();
            assert_eq!(parse_build_id_table(&b, e, 0).unwrap(), entries);
            b[6] = 20;
            b[7] = 0;
            let err = parse_build_id_table(&b, e, 500).unwrap_err();
            assert_eq!(err.offset, 500);
        }
    }
}
