//! perf.data writers: file mode in two phases (lay out every section, then
//! write them in one pass, so the output needs no seeking) and the pipe-mode
//! prologue. Layout facts come from [`FileHeader`] and [`FeatureTable`].

use std::io::{self, Write};

use super::consts::{feature, types, ATTR_SIZE, FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use super::error::RecordTooLarge;
use super::features::{build_id_feature, encode_build_id_entries, BuildIdEntry, EventDesc};
use super::header::{magic_bytes, FeatureTable, FileHeader, Section};
use super::record::{begin_record, finish_record};
use crate::bytes::{Endian, PutExt};

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

/// A writer failure: I/O, or a record of ours that does not fit.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A record would be too large (a bug: every input is bounded).
    #[error("internal error, please report: {0}")]
    TooLarge(#[from] RecordTooLarge),
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The sections of a file-mode output, computed before anything is written.
struct Layout {
    header: FileHeader,
    id_sections: Vec<Section>,
    table: FeatureTable,
}

/// A file-mode output's layout, the bytes before its data section (header,
/// ids, attrs) and its feature payloads.
struct Planned {
    layout: Layout,
    head: Vec<u8>,
    features: Vec<(u32, Vec<u8>)>,
}

fn lay_out(
    meta: &Metadata,
    attrs: &[Vec<u8>],
    data_len: u64,
    features: &[(u32, Vec<u8>)],
) -> Layout {
    let mut pos = FILE_HEADER_SIZE;
    let mut id_sections = Vec::new();
    for ev in &meta.events {
        let size = ev.ids.len() as u64 * 8;
        id_sections.push(Section { offset: pos, size });
        pos += size;
    }
    let attr_entry = attrs.first().map_or(ATTR_SIZE, Vec::len) as u64 + 16;
    let attrs = Section {
        offset: pos,
        size: attr_entry * meta.events.len() as u64,
    };
    let data = Section {
        offset: attrs.end(),
        size: data_len,
    };
    let table_len = 16 * features.len() as u64;
    let table = FeatureTable::laid_out(
        features.iter().map(|(bit, p)| (*bit, p.len() as u64)),
        data.end() + table_len,
    );
    let header = FileHeader {
        endian: meta.endian,
        attr_size: attr_entry,
        attrs,
        data,
        event_types: Section::default(),
        features: table.bits(),
    };
    Layout {
        header,
        id_sections,
        table,
    }
}

/// The feature payloads of a file-mode output, ascending, BUILD_ID included
/// when there are build ids.
fn file_features(meta: &Metadata) -> Result<Vec<(u32, Vec<u8>)>, WriteError> {
    let mut features = meta.features.clone();
    if !meta.build_ids.is_empty() {
        let ids = build_id_feature(meta.endian, &meta.build_ids)?;
        features.push((feature::BUILD_ID, ids));
    }
    features.sort_by_key(|(bit, _)| *bit);
    features.dedup_by_key(|(bit, _)| *bit);
    Ok(features)
}

fn layout_of(meta: &Metadata, data_len: u64) -> Result<Planned, WriteError> {
    let features = file_features(meta)?;
    let attrs: Vec<Vec<u8>> = meta
        .events
        .iter()
        .map(|ev| ev.attr.encode(meta.endian))
        .collect();
    let layout = lay_out(meta, &attrs, data_len, &features);
    let mut head = layout.header.encode();
    for ev in &meta.events {
        for &id in &ev.ids {
            head.put_u64(meta.endian, id);
        }
    }
    for (attr, ids) in attrs.iter().zip(&layout.id_sections) {
        head.extend_from_slice(attr);
        head.put_u64(meta.endian, ids.offset);
        head.put_u64(meta.endian, ids.size);
    }
    Ok(Planned {
        layout,
        head,
        features,
    })
}

/// Writes a file-mode perf.data: header, ids, attrs, data, feature table,
/// feature payloads.
pub fn write_file(
    out: &mut (impl Write + ?Sized),
    meta: &Metadata,
    data: &[u8],
) -> Result<(), WriteError> {
    write_file_head(out, meta, data.len() as u64)?;
    out.write_all(data)?;
    write_file_tail(out, meta, data.len() as u64)
}

/// Writes what comes before the data section of a file-mode output (header,
/// ids, attrs) for `data_len` bytes of records. Its length does not depend
/// on `data_len` or the build ids, so a writer that streams its records
/// writes this with a guess and overwrites the first [`FILE_HEADER_SIZE`]
/// bytes with [`file_header`] at the end.
pub fn write_file_head(
    out: &mut (impl Write + ?Sized),
    meta: &Metadata,
    data_len: u64,
) -> Result<(), WriteError> {
    out.write_all(&layout_of(meta, data_len)?.head)?;
    Ok(())
}

/// Writes what follows `data_len` bytes of records: the feature table and
/// the feature payloads.
pub fn write_file_tail(
    out: &mut (impl Write + ?Sized),
    meta: &Metadata,
    data_len: u64,
) -> Result<(), WriteError> {
    let plan = layout_of(meta, data_len)?;
    out.write_all(&plan.layout.table.encode(meta.endian))?;
    for (_, payload) in &plan.features {
        out.write_all(payload)?;
    }
    Ok(())
}

/// The file header of an output with `data_len` bytes of records.
pub fn file_header(meta: &Metadata, data_len: u64) -> Result<Vec<u8>, WriteError> {
    Ok(layout_of(meta, data_len)?.layout.header.encode())
}

/// Writes the pipe-mode prologue: the 16-byte header, HEADER_ATTR records,
/// HEADER_FEATURE records (ending with LAST_FEATURE) and the build ids as
/// HEADER_BUILD_ID records. The data records follow.
pub fn write_pipe_prologue(
    out: &mut (impl Write + ?Sized),
    meta: &Metadata,
) -> Result<(), WriteError> {
    let e = meta.endian;
    let mut buf = Vec::new();
    buf.extend_from_slice(&magic_bytes(e));
    buf.put_u64(e, PIPE_HEADER_SIZE);
    for ev in &meta.events {
        let at = begin_record(&mut buf, e, types::HEADER_ATTR, 0);
        buf.extend_from_slice(&ev.attr.encode(e));
        for &id in &ev.ids {
            buf.put_u64(e, id);
        }
        finish_record(&mut buf, e, at, types::HEADER_ATTR)?;
    }
    // Each feature, then LAST_FEATURE with no payload to end the list.
    let last = (feature::LAST_FEATURE, Vec::new());
    for (bit, payload) in meta.features.iter().chain(std::iter::once(&last)) {
        let at = begin_record(&mut buf, e, types::HEADER_FEATURE, 0);
        buf.put_u64(e, u64::from(*bit));
        buf.extend_from_slice(payload);
        buf.pad_to(8);
        finish_record(&mut buf, e, at, types::HEADER_FEATURE)?;
    }
    buf.extend(encode_build_id_entries(
        e,
        types::HEADER_BUILD_ID,
        &meta.build_ids,
    )?);
    out.write_all(&buf)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::perf::attr::Attr;
    use crate::perf::consts::MAGIC;
    use crate::perf::features::string_feature;

    /// Metadata with one event (the given attr, ids [7]) and a HOSTNAME.
    pub(crate) fn metadata(e: Endian, attr: Attr) -> Metadata {
        Metadata {
            endian: e,
            events: vec![EventDesc {
                attr,
                name: b"cycles".to_vec(),
                ids: vec![7],
            }],
            features: vec![(feature::HOSTNAME, string_feature(e, b"host"))],
            build_ids: vec![],
        }
    }

    // The file layout puts the feature table right after the data and the offsets add up.
    #[test]
    fn file_layout() {
        let mut meta = metadata(Endian::Little, Attr::default());
        meta.events[0].ids = vec![1];
        meta.features = vec![(feature::HOSTNAME, string_feature(Endian::Little, b"h"))];
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

    // A written file parses back: header, attr and BUILD_ID table, in both byte orders.
    #[test]
    fn header_and_attr_round_trip() {
        use crate::model::BuildId;
        use crate::perf::consts::{attr_flags, misc, sample_type as st};
        use crate::perf::features::parse_build_id_table;
        use crate::perf::header::FeatureBits;
        for e in [Endian::Little, Endian::Big] {
            let attr = Attr {
                sample_type: st::IP | st::TID | st::TIME | st::ID,
                flags: attr_flags::SAMPLE_ID_ALL | attr_flags::MMAP2,
                ..Default::default()
            };
            let mut meta = metadata(e, attr);
            meta.features.clear();
            meta.build_ids = vec![BuildIdEntry {
                cpumode: misc::USER,
                pid: -1,
                build_id: BuildId::new(&[3; 8]).unwrap(),
                filename: b"/x".to_vec(),
            }];
            let mut f = Vec::new();
            write_file(&mut f, &meta, &[]).unwrap();
            let h = FileHeader::parse(&f[..104], f.len() as u64).unwrap();
            assert_eq!(h.endian, e);
            assert_eq!(h.features, FeatureBits::from_bits([feature::BUILD_ID]));
            let a = Attr::parse(&f[h.attrs.offset as usize..], e, h.attrs.offset).unwrap();
            assert_eq!(a, attr);
            let at = h.feature_table_offset();
            let t = &f[at as usize..(at + h.feature_table_len()) as usize];
            let table = FeatureTable::parse(t, e, &h.features, at, f.len() as u64).unwrap();
            let s = table.0[0].1;
            let ids =
                parse_build_id_table(&f[s.offset as usize..s.end() as usize], e, s.offset).unwrap();
            assert_eq!(ids, meta.build_ids);
        }
    }
}
