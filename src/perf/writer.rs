//! perf.data writers: file mode in two phases (lay out every section, then
//! write them in one pass, so the output needs no seeking) and the pipe-mode
//! prologue. Layout facts come from [`FileHeader`] and [`FeatureTable`].
//!
//! Both work on [`RawMeta`], the metadata as bytes, which is what a lossless
//! rewrite carries from its input; [`Metadata`] (what a snapshot knows) is
//! turned into it.

use std::io::{self, Write};

use super::consts::{feature, types, ATTR_SIZE, FILE_HEADER_SIZE, PIPE_HEADER_SIZE};
use super::error::RecordTooLarge;
use super::feature_check::{build_ids_perf_holds, unreadable_features, Bad};
use super::features::{build_id_feature, BuildIdEntry, EventDesc};
use super::header::{magic_bytes, FeatureTable, FileHeader, Section};
use super::record::{begin_record, finish_record, split_records, RecordHeader};
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

/// The metadata of a perf.data as bytes, either mode: what a rewrite keeps
/// of its input, unknown attr fields and feature bits included.
#[derive(Debug, Clone)]
pub struct RawMeta {
    /// Byte order.
    pub endian: Endian,
    /// Per event: the `perf_event_attr` bytes (its own `size`) and its ids.
    pub attrs: Vec<(Vec<u8>, Vec<u64>)>,
    /// Feature payloads by bit, as file-mode sections hold them, ascending;
    /// BUILD_ID (entries with record type 0) and TRACING_DATA included.
    pub features: Vec<(u32, Vec<u8>)>,
}

impl RawMeta {
    /// The payload of feature `bit`.
    pub fn feature(&self, bit: u32) -> Option<&[u8]> {
        self.features
            .iter()
            .find(|(b, _)| *b == bit)
            .map(|(_, p)| p.as_slice())
    }

    /// Sets (or replaces) feature `bit`, keeping the bits ascending.
    pub fn set_feature(&mut self, bit: u32, payload: Vec<u8>) {
        match self.features.binary_search_by_key(&bit, |(b, _)| *b) {
            Ok(i) => self.features[i].1 = payload,
            Err(i) => self.features.insert(i, (bit, payload)),
        }
    }

    /// Drops feature `bit`.
    pub fn remove_feature(&mut self, bit: u32) {
        self.features.retain(|(b, _)| *b != bit);
    }
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

/// Where a file-mode output's sections go, computed before anything is
/// written. The bytes before the data section do not depend on its length.
struct Layout {
    header: FileHeader,
    id_sections: Vec<Section>,
    /// The size of every file attr entry: the longest attr, plus 16.
    attr_entry: u64,
    table: FeatureTable,
}

fn lay_out(meta: &RawMeta, data_len: u64) -> Layout {
    let mut pos = FILE_HEADER_SIZE;
    let mut id_sections = Vec::new();
    for (_, ids) in &meta.attrs {
        let size = ids.len() as u64 * 8;
        id_sections.push(Section { offset: pos, size });
        pos += size;
    }
    let longest = meta.attrs.iter().map(|(a, _)| a.len()).max();
    let attr_entry = longest.unwrap_or(ATTR_SIZE) as u64 + 16;
    let attrs = Section {
        offset: pos,
        size: attr_entry * meta.attrs.len() as u64,
    };
    let data = Section {
        offset: attrs.end(),
        size: data_len,
    };
    let table_len = 16 * meta.features.len() as u64;
    let table = FeatureTable::laid_out(
        meta.features.iter().map(|(bit, p)| (*bit, p.len() as u64)),
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
        attr_entry,
        table,
    }
}

impl Metadata {
    /// The same metadata as bytes (BUILD_ID encoded into the features).
    pub fn raw(&self) -> Result<RawMeta, WriteError> {
        self.clone().into_raw()
    }

    /// [`Metadata::raw`], the feature payloads moved rather than copied.
    pub fn into_raw(self) -> Result<RawMeta, WriteError> {
        let mut features = self.features;
        if !self.build_ids.is_empty() {
            let ids = build_id_feature(self.endian, &self.build_ids)?;
            features.push((feature::BUILD_ID, ids));
        }
        features.sort_by_key(|(bit, _)| *bit);
        features.dedup_by_key(|(bit, _)| *bit);
        Ok(RawMeta {
            endian: self.endian,
            attrs: self
                .events
                .iter()
                .map(|ev| (ev.attr.encode(self.endian), ev.ids.clone()))
                .collect(),
            features,
        })
    }
}

/// What comes before the data section of a file-mode output: header (for
/// `data_len` bytes of records), ids, attrs. Its length does not depend on
/// `data_len`, so a writer that streams its records writes this first and
/// overwrites the first [`FILE_HEADER_SIZE`] bytes with
/// [`raw_file_header`] at the end.
pub fn raw_file_head(meta: &RawMeta, data_len: u64) -> Vec<u8> {
    let layout = lay_out(meta, data_len);
    let e = meta.endian;
    let mut head = layout.header.encode();
    for (_, ids) in &meta.attrs {
        for &id in ids {
            head.put_u64(e, id);
        }
    }
    for ((attr, _), ids) in meta.attrs.iter().zip(&layout.id_sections) {
        let at = head.len();
        head.extend_from_slice(attr);
        head.resize(at + layout.attr_entry as usize - 16, 0);
        // perf reads `attr.size` bytes: a padded attr says it is that long
        let size = (layout.attr_entry - 16) as u32;
        head[at + 4..at + 8].copy_from_slice(&e.u32_bytes(size));
        head.put_u64(e, ids.offset);
        head.put_u64(e, ids.size);
    }
    head
}

/// What follows `data_len` bytes of records: the feature table and the
/// feature payloads.
pub fn raw_file_tail(meta: &RawMeta, data_len: u64) -> Vec<u8> {
    let mut tail = Vec::new();
    // a Vec takes every write
    let _ = write_raw_file_tail(&mut tail, meta, data_len);
    tail
}

/// Writes [`raw_file_tail`] without gathering it first (the BUILD_ID
/// payload of a big host is tens of MB).
pub fn write_raw_file_tail(
    out: &mut (impl Write + ?Sized),
    meta: &RawMeta,
    data_len: u64,
) -> io::Result<()> {
    out.write_all(&lay_out(meta, data_len).table.encode(meta.endian))?;
    for (_, payload) in &meta.features {
        out.write_all(payload)?;
    }
    Ok(())
}

/// The file header of an output with `data_len` bytes of records.
pub fn raw_file_header(meta: &RawMeta, data_len: u64) -> Vec<u8> {
    lay_out(meta, data_len).header.encode()
}

/// Features that a pipe-mode stream cannot carry as HEADER_FEATURE: the
/// build ids (HEADER_BUILD_ID records; pprof's quipper rejects a BUILD_ID
/// feature record), the tracing data (a HEADER_TRACING_DATA record with the
/// data after it) and the AUXTRACE index (file offsets, meaningless in a
/// stream; rebuilt when written as a file again).
pub fn pipe_carries_as_feature(bit: u32) -> bool {
    !matches!(
        bit,
        feature::BUILD_ID | feature::TRACING_DATA | feature::AUXTRACE
    ) && is_known_feature(bit)
}

/// The features [`raw_pipe_prologue`] leaves out although a stream could
/// carry them, with why: perf 6.1's pipe-mode reader aborts on a
/// HEADER_FEATURE whose payload its `process_*` cannot read (see
/// [`super::feature_check`]).
pub fn pipe_unreadable_features(meta: &RawMeta) -> Vec<(u32, Bad)> {
    let carried = meta
        .features
        .iter()
        .filter(|(b, _)| pipe_carries_as_feature(*b));
    unreadable_features(
        meta.endian,
        meta.attrs.len(),
        carried.map(|(b, p)| (*b, &p[..])),
    )
}

/// What a file-mode output of `meta` must leave out for perf 6.1's
/// file-mode reader: the sections it cannot read (see
/// [`super::feature_check`]), with why, and the BUILD_ID entries longer
/// than it holds (how many). Leaves them out of `meta`; every other
/// section stays byte for byte.
pub fn drop_file_unreadable(meta: &mut RawMeta) -> (Vec<(u32, Bad)>, usize) {
    let features = meta.features.iter().map(|(b, p)| (*b, &p[..]));
    let bad = unreadable_features(meta.endian, meta.attrs.len(), features);
    meta.features
        .retain(|(b, _)| !bad.iter().any(|(x, _)| x == b));
    let table = meta.feature(feature::BUILD_ID).unwrap_or_default();
    let mut long = 0;
    if let Some((kept, n)) = build_ids_perf_holds(table, meta.endian) {
        meta.set_feature(feature::BUILD_ID, kept);
        long = n;
    }
    (bad, long)
}

/// Feature bits perf 6.1 accepts in a HEADER_FEATURE record: 1 up to
/// HEADER_LAST_FEATURE (it aborts on any other; bit 0 is reserved).
pub fn is_known_feature(bit: u32) -> bool {
    (1..feature::LAST_FEATURE).contains(&bit)
}

/// Writes the pipe-mode prologue: the 16-byte header, HEADER_ATTR records,
/// HEADER_FEATURE records (ending with LAST_FEATURE), the tracing data as a
/// HEADER_TRACING_DATA record and the build ids as HEADER_BUILD_ID records.
/// The data records follow.
pub fn raw_pipe_prologue(meta: &RawMeta) -> Result<Vec<u8>, RecordTooLarge> {
    let e = meta.endian;
    let mut buf = Vec::new();
    buf.extend_from_slice(&magic_bytes(e));
    buf.put_u64(e, PIPE_HEADER_SIZE);
    for (attr, ids) in &meta.attrs {
        let at = begin_record(&mut buf, e, types::HEADER_ATTR, 0);
        let attr_at = buf.len();
        buf.extend_from_slice(attr);
        // the ids follow `attr.size` bytes: it must be the attr's length
        if attr.len() >= 8 {
            buf[attr_at + 4..attr_at + 8].copy_from_slice(&e.u32_bytes(attr.len() as u32));
        }
        for &id in ids {
            buf.put_u64(e, id);
        }
        finish_record(&mut buf, e, at, types::HEADER_ATTR)?;
    }
    // Each feature perf reads, then LAST_FEATURE with no payload to end the list.
    let unreadable = pipe_unreadable_features(meta);
    let last = (feature::LAST_FEATURE, Vec::new());
    let carried = meta
        .features
        .iter()
        .filter(|(b, _)| pipe_carries_as_feature(*b) && !unreadable.iter().any(|(u, _)| u == b));
    for (bit, payload) in carried.chain(std::iter::once(&last)) {
        let at = begin_record(&mut buf, e, types::HEADER_FEATURE, 0);
        buf.put_u64(e, u64::from(*bit));
        // Not padded, as perf writes it: the record is the section's bytes.
        buf.extend_from_slice(payload);
        finish_record(&mut buf, e, at, types::HEADER_FEATURE)?;
    }
    if let Some(data) = meta.feature(feature::TRACING_DATA) {
        put_tracing_data(&mut buf, e, data)?;
    }
    if let Some(table) = meta.feature(feature::BUILD_ID) {
        retyped_build_ids(&mut buf, table, e, types::HEADER_BUILD_ID);
    }
    Ok(buf)
}

/// Appends BUILD_ID table entries (record-shaped) with their record type
/// set to `record_type`: HEADER_BUILD_ID for a stream, 0 for a file-mode
/// table. Everything else of each entry is kept byte for byte.
pub fn retyped_build_ids(out: &mut Vec<u8>, table: &[u8], e: Endian, record_type: u32) {
    for (h, body) in split_records(table, e) {
        RecordHeader {
            type_: record_type,
            ..h
        }
        .put(out, e);
        out.extend_from_slice(body);
    }
}

/// Size of a HEADER_TRACING_DATA record itself: header, `u32 size` and the
/// `u32 pad` newer perf has (perf 6.1 writes 12 bytes but reads
/// `header.size`, so it reads 16 too).
pub const TRACING_DATA_RECORD: usize = 16;

/// Appends a HEADER_TRACING_DATA record and the tracing data after it,
/// zero-padded to 8 (the record's `size` field counts the padding).
pub fn put_tracing_data(out: &mut Vec<u8>, e: Endian, data: &[u8]) -> Result<(), RecordTooLarge> {
    let padded = data.len().div_ceil(8) * 8;
    if u32::try_from(padded).is_err() {
        return Err(RecordTooLarge {
            record_type: types::HEADER_TRACING_DATA,
            size: padded,
        });
    }
    RecordHeader {
        type_: types::HEADER_TRACING_DATA,
        misc: 0,
        size: TRACING_DATA_RECORD as u16,
    }
    .put(out, e);
    out.put_u32(e, padded as u32);
    out.put_u32(e, 0);
    out.extend_from_slice(data);
    out.resize(out.len() + padded - data.len(), 0);
    Ok(())
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

/// [`raw_file_head`] of `meta`.
pub fn write_file_head(
    out: &mut (impl Write + ?Sized),
    meta: &Metadata,
    data_len: u64,
) -> Result<(), WriteError> {
    out.write_all(&raw_file_head(&meta.raw()?, data_len))?;
    Ok(())
}

/// [`raw_file_tail`] of `meta`.
pub fn write_file_tail(
    out: &mut (impl Write + ?Sized),
    meta: &Metadata,
    data_len: u64,
) -> Result<(), WriteError> {
    write_raw_file_tail(out, &meta.raw()?, data_len)?;
    Ok(())
}

/// [`raw_file_header`] of `meta`.
pub fn file_header(meta: &Metadata, data_len: u64) -> Result<Vec<u8>, WriteError> {
    Ok(raw_file_header(&meta.raw()?, data_len))
}

/// [`raw_pipe_prologue`] of `meta`.
pub fn write_pipe_prologue(
    out: &mut (impl Write + ?Sized),
    meta: &Metadata,
) -> Result<(), WriteError> {
    out.write_all(&raw_pipe_prologue(&meta.raw()?)?)?;
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

    // Attrs of different sizes padded to one file entry say the padded
    // size (perf reads `attr.size` bytes, then expects the ids); in a
    // stream each HEADER_ATTR's size is its own length, whatever the input
    // claimed.
    #[test]
    fn padded_attrs_say_their_size() {
        let e = Endian::Little;
        let mut short = Attr::default().encode(e);
        short.truncate(112);
        short[4..8].copy_from_slice(&40u32.to_le_bytes()); // claims 40
        let long = Attr::default().encode(e);
        let meta = RawMeta {
            endian: e,
            attrs: vec![(short, vec![1]), (long, vec![2])],
            features: vec![],
        };
        let head = raw_file_head(&meta, 0);
        let h = FileHeader::parse(&head[..104], u64::MAX).unwrap();
        assert_eq!(h.attr_size, 128 + 16);
        for i in 0..2 {
            let at = (h.attrs.offset + i * h.attr_size) as usize;
            assert_eq!(&head[at + 4..at + 8], &128u32.to_le_bytes());
        }
        let pipe = raw_pipe_prologue(&meta).unwrap();
        let first = &pipe[16..];
        assert_eq!(&first[8 + 4..8 + 8], &112u32.to_le_bytes());
    }
}
