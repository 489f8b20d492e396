//! The metadata of a recording as bytes ([`RawMeta`]), lossless: from its
//! header in file mode, from its metadata records in pipe mode.

use std::os::unix::fs::FileExt;

use crate::bytes::{Endian, Rd};
use crate::perf::consts::{feature, types};
use crate::perf::features::parse_build_id_table;
use crate::perf::writer::{retyped_build_ids, RawMeta};
use crate::perf::{
    Attrs, FormatError, FormatErrorKind as K, Input, InputError, Layout, RecordHeader, Visitor,
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
                features: Vec::new(),
                build_ids: Vec::new(),
                tracing: None,
            };
            let walk = input.walk(&mut c)?;
            let mut meta = RawMeta {
                endian: e,
                attrs: raw_attrs(&walk.attrs),
                features: Vec::new(),
            };
            for (bit, payload) in c.features {
                if meta.feature(bit).is_none() {
                    meta.set_feature(bit, payload);
                }
            }
            if !c.build_ids.is_empty() {
                meta.set_feature(feature::BUILD_ID, c.build_ids);
            }
            if let Some(t) = c.tracing {
                meta.set_feature(feature::TRACING_DATA, t);
            }
            Ok(meta)
        }
    }
}

/// Each attr's bytes and ids.
fn raw_attrs(attrs: &Attrs) -> Vec<(Vec<u8>, Vec<u64>)> {
    let ids = attrs.list.iter().map(|(_, ids)| ids.clone());
    attrs.raw.iter().cloned().zip(ids).collect()
}

/// Gathers a pipe-mode stream's metadata records.
struct Collector<'a> {
    input: &'a Input,
    e: Endian,
    features: Vec<(u32, Vec<u8>)>,
    build_ids: Vec<u8>,
    tracing: Option<Vec<u8>>,
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
                        self.features.push((bit, body[8..].to_vec()));
                    }
                }
            }
            types::HEADER_BUILD_ID => {
                let mut rec = Vec::with_capacity(body.len() + 8);
                h.put(&mut rec, e);
                rec.extend_from_slice(body);
                parse_build_id_table(&rec, e, at)?;
                retyped_build_ids(&mut self.build_ids, &rec, e, 0);
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
