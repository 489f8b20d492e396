//! The metadata of a recording as bytes ([`RawMeta`]), lossless: from its
//! header in file mode, from its metadata records in pipe mode.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::os::unix::fs::FileExt;

use crate::bytes::{Endian, Rd};
use crate::perf::consts::{feature, types};
use crate::perf::evname::event_name;
use crate::perf::feature_check::{build_ids_perf_holds, is_walked, unreadable_features};
use crate::perf::features::{event_desc_of_raw, parse_build_id_table};
use crate::perf::writer::{
    drop_file_unreadable, is_known_feature, pipe_unreadable_features, retyped_build_ids, RawMeta,
};
use crate::perf::{
    Attrs, FormatError, FormatErrorKind as K, Input, InputError, Layout, RecordHeader, Section,
    Visitor,
};

/// Most bytes of feature sections a rewrite holds in memory (the tracing
/// data of a big tracepoint recording is a few MiB).
pub const MAX_METADATA: u64 = 256 << 20;

/// The records a pipe-mode input carries as metadata: a file-mode output
/// holds them in its header instead.
pub(super) fn is_pipe_metadata(t: u32) -> bool {
    matches!(
        t,
        types::HEADER_ATTR
            | types::HEADER_EVENT_TYPE
            | types::HEADER_TRACING_DATA
            | types::HEADER_BUILD_ID
            | types::HEADER_FEATURE
    )
}

/// The lossless metadata of an input: from its header in file mode, from
/// its metadata records in pipe mode (one pass over the stream).
pub fn read_meta(input: &Input) -> Result<RawMeta, InputError> {
    let e = input.endian();
    match &input.layout {
        Layout::File { header, features } => {
            let mut meta = RawMeta {
                endian: e,
                attrs: raw_attrs(&input.file_attrs(header)?),
                features: Vec::new(),
            };
            let total: u64 = features.0.iter().map(|(_, s)| s.size).sum();
            if total > MAX_METADATA {
                let kind = K::Implausible {
                    what: "total size of the feature sections to rewrite",
                    value: total,
                };
                return Err(input.format(FormatError::at(header.feature_table_offset(), kind)));
            }
            for (bit, sec) in &features.0 {
                let payload = input.section(*sec)?;
                if *bit == feature::BUILD_ID {
                    // checked here: it is split into records for a stream
                    parse_build_id_table(&payload, e, sec.offset)
                        .map_err(|err| input.format(err))?;
                }
                if *bit != 0 {
                    meta.features.push((*bit, payload));
                }
            }
            Ok(meta)
        }
        Layout::Pipe(_) => {
            let mut c = Collector {
                input,
                e,
                features: BTreeMap::new(),
                build_ids: BuildIds::default(),
                tracing: None,
            };
            let walk = input.walk(&mut c)?;
            let mut meta = RawMeta {
                endian: e,
                attrs: raw_attrs(&walk.attrs),
                features: Vec::new(),
            };
            for (bit, payload) in c.features {
                meta.set_feature(bit, payload);
            }
            if !c.build_ids.table.is_empty() {
                meta.set_feature(feature::BUILD_ID, c.build_ids.table);
            }
            if let Some(t) = c.tracing {
                meta.set_feature(feature::TRACING_DATA, t);
            }
            Ok(meta)
        }
    }
}

/// The HEADER_COMPRESSED payload a salvaged file-mode input lost (perf
/// record killed while recording with `-z`: its header set the bit, the
/// section never came), None when it lost none. perf decompresses each
/// COMPRESSED record into a buffer of the feature's mmap_len and reads
/// none of them without it, so a walk finds the most one record's records
/// take, plus 64 KiB for a record begun in the one before; zstd, level 1
/// (perf's default; only shown), ratio 0 (unknown).
pub fn lost_compressed_feature(input: &Input) -> Result<Option<Vec<u8>>, InputError> {
    if !input
        .salvaged
        .as_ref()
        .is_some_and(|s| s.lost.contains(feature::COMPRESSED))
    {
        return Ok(None);
    }
    let mut most = MostDecompressed::default();
    input.walk(&mut most)?;
    let mmap_len = (most.most + (64 << 10)).div_ceil(4096) * 4096;
    let e = input.endian();
    let mut payload = Vec::with_capacity(20);
    for field in [0, 1, 1, 0, u32::try_from(mmap_len).unwrap_or(u32::MAX)] {
        payload.extend_from_slice(&e.u32_bytes(field));
    }
    Ok(Some(payload))
}

/// The HEADER_EVENT_DESC payload a salvaged file-mode input lost (perf
/// record killed: the bit set, the section never written), None when it
/// lost none. perf names events from their attrs without it, but readers
/// such as linux-perf-data (samply) take the ids of samples only from it:
/// without it the samples of a recording of several events match none.
/// Each event gets its attr's bytes and ids and the name perf would give
/// it (`perf::evname`).
pub fn lost_event_desc_feature(input: &Input) -> Result<Option<Vec<u8>>, InputError> {
    let lost = |s: &crate::perf::Salvaged| s.lost.contains(feature::EVENT_DESC);
    let Layout::File { header, .. } = &input.layout else {
        return Ok(None);
    };
    if !input.salvaged.as_ref().is_some_and(lost) {
        return Ok(None);
    }
    let attrs = input.file_attrs(header)?;
    let names: Vec<Vec<u8>> = attrs.list.iter().map(|(a, _)| event_name(a)).collect();
    let events: Vec<(&[u8], &[u8], &[u64])> = (attrs.raw.iter().zip(&attrs.list))
        .zip(&names)
        .map(|((raw, (_, ids)), name)| (&raw[..], &name[..], &ids[..]))
        .collect();
    Ok(Some(event_desc_of_raw(input.endian(), &events)))
}

/// What a rewrite leaves out of its input's metadata.
#[derive(Debug, Default)]
pub(super) struct Dropped {
    /// Feature bits perf 6.1 does not know (a stream only: it aborts on
    /// them there).
    unknown: Vec<u32>,
    /// Feature bits whose payload perf's reader of the output's mode
    /// cannot read, with why.
    unreadable: Vec<(u32, &'static str)>,
    /// BUILD_ID entries too long for perf's file-mode reader.
    long_build_ids: usize,
}

impl Dropped {
    /// Says so in `r`.
    pub(super) fn into_report(self, r: &mut super::ConvertReport) {
        r.features_dropped = self.unknown;
        r.features_unreadable = self.unreadable;
        r.build_ids_too_long = self.long_build_ids;
    }
}

/// What is left out of `meta`: of a stream made from a file, the feature
/// bits perf does not know and those its pipe-mode reader cannot parse
/// (left out as the prologue is written); of a file-mode output, what its
/// file-mode reader cannot read, left out of `meta` here. Stream to
/// stream, nothing.
pub(super) fn dropped_features(meta: &mut RawMeta, to_pipe: bool, from_pipe: bool) -> Dropped {
    if !to_pipe {
        let (unreadable, long_build_ids) = drop_file_unreadable(meta);
        return Dropped {
            unreadable,
            long_build_ids,
            ..Dropped::default()
        };
    }
    if from_pipe {
        return Dropped::default();
    }
    let unknown = meta.features.iter().map(|(b, _)| *b);
    Dropped {
        unknown: unknown.filter(|&b| !is_known_feature(b)).collect(),
        unreadable: pipe_unreadable_features(meta),
        long_build_ids: 0,
    }
}

/// What a file-mode output that copies `input`'s feature sections leaves
/// out for perf 6.1's file-mode reader (see `perf::feature_check`).
#[derive(Debug, Default)]
pub struct Unreadable {
    /// The sections it cannot read, with why.
    pub sections: Vec<(u32, &'static str)>,
    /// The BUILD_ID table without the entries too long for it, and how
    /// many those were; None when every entry fits.
    pub build_ids: Option<(Vec<u8>, usize)>,
}

/// The sections of a file-mode input perf 6.1's file-mode reader could
/// not read, and the entries of its BUILD_ID table (`build_ids`, as the
/// caller read it) too long for it, found with the same walk as a
/// conversion's (nothing in pipe mode: a merge writes a stream as it is).
/// Only the sections the walk reads are read, within [`MAX_METADATA`]
/// bytes in all.
pub fn file_unreadable(input: &Input, build_ids: Option<&[u8]>) -> Result<Unreadable, InputError> {
    let Layout::File { header, features } = &input.layout else {
        return Ok(Unreadable::default());
    };
    let walked = features.0.iter().filter(|(b, _)| is_walked(*b));
    let walked: Vec<(u32, Section)> = walked.copied().collect();
    let total: u64 = walked.iter().map(|(_, s)| s.size).sum();
    if total > MAX_METADATA {
        let kind = K::Implausible {
            what: "total size of the feature sections to check",
            value: total,
        };
        return Err(input.format(FormatError::at(header.feature_table_offset(), kind)));
    }
    let mut payloads = Vec::with_capacity(walked.len());
    for (bit, sec) in walked {
        payloads.push((bit, input.section(sec)?));
    }
    let e = input.endian();
    let events = input.file_attrs(header)?.list.len();
    let sections = unreadable_features(e, events, payloads.iter().map(|(b, p)| (*b, &p[..])));
    Ok(Unreadable {
        sections,
        build_ids: build_ids.and_then(|t| build_ids_perf_holds(t, e)),
    })
}

/// The most bytes of records one COMPRESSED record held.
#[derive(Default)]
struct MostDecompressed {
    /// Offset of the COMPRESSED record being decoded.
    at: Option<u64>,
    /// Bytes of its records so far.
    bytes: u64,
    most: u64,
}

impl Visitor for MostDecompressed {
    fn stored(&mut self, at: u64, h: &RecordHeader, _body: &[u8]) {
        if matches!(h.type_, types::COMPRESSED | types::COMPRESSED2) {
            (self.at, self.bytes) = (Some(at), 0);
        }
    }

    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        _body: &[u8],
        _attrs: &Attrs,
    ) -> Result<(), FormatError> {
        if self.at == Some(at) {
            self.bytes += u64::from(h.size);
            self.most = self.most.max(self.bytes);
        }
        Ok(())
    }
}

/// Each attr's bytes and ids.
fn raw_attrs(attrs: &Attrs) -> Vec<(Vec<u8>, Vec<u64>)> {
    let ids = attrs.list.iter().map(|(_, ids)| ids.clone());
    attrs.raw.iter().cloned().zip(ids).collect()
}

/// Gathers a pipe-mode stream's metadata records, holding what differs
/// only: memory follows the distinct content, not the record count (a
/// compressed stream can repeat a 64 KiB record a million times).
struct Collector<'a> {
    input: &'a Input,
    e: Endian,
    /// The payload of each feature bit: the last HEADER_FEATURE record's,
    /// as perf reads a stream (each replaces what an earlier one set).
    features: BTreeMap<u32, Vec<u8>>,
    build_ids: BuildIds,
    tracing: Option<Vec<u8>>,
}

/// HEADER_BUILD_ID records as a BUILD_ID table (record type 0), in order,
/// each distinct entry once: perf gives a repeated entry (same cpumode,
/// pid, id and path, byte for byte) to the DSO that already has it.
#[derive(Default)]
struct BuildIds {
    table: Vec<u8>,
    /// Entries' (start, length) in `table` by their bytes' hash.
    seen: HashMap<u64, Vec<(usize, usize)>, foldhash::fast::FixedState>,
}

impl BuildIds {
    /// Appends `entry` unless the table has it; the table may not pass
    /// [`MAX_METADATA`].
    fn add(&mut self, at: u64, entry: &[u8]) -> Result<(), FormatError> {
        let hash = self.seen.hasher().hash_one(entry);
        let starts = self.seen.entry(hash).or_default();
        if starts
            .iter()
            .any(|&(s, n)| self.table.get(s..s + n) == Some(entry))
        {
            return Ok(());
        }
        let total = (self.table.len() + entry.len()) as u64;
        if total > MAX_METADATA {
            let kind = K::Implausible {
                what: "size of the distinct HEADER_BUILD_ID records (to hold in memory)",
                value: total,
            };
            return Err(FormatError::at(at, kind));
        }
        starts.push((self.table.len(), entry.len()));
        self.table.extend_from_slice(entry);
        Ok(())
    }
}

impl Visitor for Collector<'_> {
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        _attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let e = self.e;
        match h.type_ {
            types::HEADER_FEATURE => {
                let bit = Rd(e)
                    .u64(body, 0)
                    .ok_or(FormatError::at(at, K::Truncated("HEADER_FEATURE record")))?;
                if let Ok(bit) = u32::try_from(bit) {
                    // 0 is reserved (never set); LAST_FEATURE ends the list
                    if bit != 0 && bit != feature::LAST_FEATURE && bit < 256 {
                        self.features.insert(bit, body[8..].to_vec());
                    }
                }
            }
            types::HEADER_BUILD_ID => {
                let mut rec = Vec::with_capacity(body.len() + 8);
                h.put(&mut rec, e);
                rec.extend_from_slice(body);
                parse_build_id_table(&rec, e, at)?;
                let mut entry = Vec::with_capacity(rec.len());
                retyped_build_ids(&mut entry, &rec, e, 0);
                self.build_ids.add(at, &entry)?;
            }
            types::HEADER_TRACING_DATA if self.tracing.is_none() => {
                let size = tracing_size(at, body, e)?;
                if u64::from(size) > MAX_METADATA {
                    let kind = K::Implausible {
                        what: "tracing data size (to hold in memory)",
                        value: u64::from(size),
                    };
                    return Err(FormatError::at(at, kind));
                }
                let mut data = vec![0u8; size as usize];
                self.input
                    .file
                    .read_exact_at(&mut data, at + u64::from(h.size))
                    .map_err(|_| FormatError::at(at, K::Truncated("tracing data")))?;
                self.tracing = Some(data);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The `size` of a HEADER_TRACING_DATA record: the bytes after it.
pub(super) fn tracing_size(at: u64, body: &[u8], e: Endian) -> Result<u32, FormatError> {
    Rd(e).u32(body, 0).ok_or(FormatError::at(
        at,
        K::Truncated("HEADER_TRACING_DATA record"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;
    use crate::perf::features::string_feature;

    /// A record of `type_` with this body.
    fn rec(e: Endian, type_: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        let size = u16::try_from(8 + body.len()).unwrap();
        RecordHeader { type_, misc, size }.put(&mut r, e);
        r.extend_from_slice(body);
        r
    }

    /// A HEADER_BUILD_ID record: pid -1, a 20-byte id of `fill`, `path`.
    fn build_id(e: Endian, fill: u8, path: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.put_u32(e, u32::MAX);
        body.resize(4 + 20, fill);
        body.resize(4 + 24, 0);
        body.extend_from_slice(path);
        body.push(0);
        body.resize((body.len() + 8).div_ceil(8) * 8 - 8, 0);
        rec(e, types::HEADER_BUILD_ID, 2, &body)
    }

    // A stream's repeated metadata records are held once: the last
    // HEADER_FEATURE of a bit wins, as perf reads a stream, and a build-id
    // entry repeated byte for byte is kept once, distinct ones in order.
    #[test]
    fn repeated_stream_metadata_is_held_once() {
        let e = Endian::Little;
        let pin = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/pin/rec-pipe.data");
        let mut f = std::fs::read(pin).unwrap();
        let hostname = |s: &[u8]| {
            let mut body = Vec::new();
            body.put_u64(e, u64::from(feature::HOSTNAME));
            body.extend(string_feature(e, s));
            rec(e, types::HEADER_FEATURE, 0, &body)
        };
        let (a, b) = (build_id(e, 0xaa, b"/lib/a.so"), build_id(e, 0xbb, b"/b"));
        for r in [&hostname(b"first"), &a, &a, &b, &a, &hostname(b"last")] {
            f.extend_from_slice(r);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.data");
        std::fs::write(&path, &f).unwrap();
        let meta = read_meta(&Input::open(&path).unwrap()).unwrap();
        let last = string_feature(e, b"last");
        assert_eq!(meta.feature(feature::HOSTNAME), Some(&last[..]));
        let mut table = Vec::new();
        retyped_build_ids(&mut table, &a, e, 0);
        retyped_build_ids(&mut table, &b, e, 0);
        assert_eq!(meta.feature(feature::BUILD_ID), Some(&table[..]));
    }
}
