//! The streaming rewrite: every record of the input written again, one by
//! one, into a new file- or pipe-mode output. It carries `convert --to`,
//! `--decompress` and build-id MMAP2s in any input the in-place patch
//! cannot handle. Records are read by the one shared walk ([`Input::walk`]),
//! so memory stays within a record, a 1 MiB output buffer and the metadata.
//!
//! What moves between modes: attrs (file attr section <-> HEADER_ATTR), the
//! features (sections <-> HEADER_FEATURE records), the build ids (BUILD_ID
//! section <-> HEADER_BUILD_ID records) and the tracing data (section <->
//! HEADER_TRACING_DATA with its data after it). The AUXTRACE index holds
//! file offsets: it is rebuilt from the AUXTRACE records as written.
//! Everything else, unknown records and feature bits included, is copied.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use super::attribution::MappedFiles;
use super::buildids::{ConvertReport, MapIds};
use super::emit::{auxtrace_index, Emitter};
use super::meta::{dropped_features, lost_compressed_feature, lost_event_desc_feature, read_meta};
use crate::bytes::{PutExt, Rd};
use crate::perf::consts::{feature, types};
use crate::perf::features::encode_build_id_entries;
use crate::perf::writer::{
    raw_file_head, raw_file_header, raw_pipe_prologue, write_raw_file_tail, RawMeta,
};
use crate::perf::{Input, InputError, Layout, RecordTooLarge};

/// What the streaming rewrite does.
#[derive(Debug, Clone, Copy, Default)]
pub struct TranscodeOptions {
    /// Write pipe mode (else file mode).
    pub to_pipe: bool,
    /// Records inside COMPRESSED ones are written out one by one.
    pub decompress: bool,
    /// MMAP and inode-form MMAP2s get build ids.
    pub buildid_mmap2: bool,
    /// See [`super::ConvertOptions::trust_paths`].
    pub trust_paths: bool,
    /// The BUILD_ID table (HEADER_BUILD_ID records in a stream) gets every
    /// mapped file with a known id.
    pub buildid_all: bool,
}

/// A failure of the streaming rewrite.
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    /// Reading the input failed or it is malformed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Writing the output failed.
    #[error("writing the output")]
    Output(#[source] io::Error),
    /// The metadata does not fit the output's mode (a pipe-mode record
    /// holds at most 64 KiB).
    #[error("{what} does not fit a pipe-mode record")]
    TooLarge {
        /// Which part of the metadata.
        what: &'static str,
        #[source]
        source: RecordTooLarge,
    },
}

/// The id lookup for `--buildid-mmap2`: the table of `meta`, errors naming
/// its offset in a file-mode input.
pub fn map_ids(input: &Input, meta: &RawMeta, trust_paths: bool) -> Result<MapIds, InputError> {
    let at = match &input.layout {
        Layout::File { features, .. } => features
            .0
            .iter()
            .find(|(b, _)| *b == feature::BUILD_ID)
            .map_or(0, |(_, s)| s.offset),
        Layout::Pipe(_) => 0,
    };
    let table = meta.feature(feature::BUILD_ID);
    let osrelease = meta.feature(feature::OSRELEASE);
    MapIds::new(table, osrelease, (input.endian(), at), trust_paths)
        .map_err(|err| input.format(err))
}

/// The id lookup when maps are converted or listed, knowing the files
/// they name if a pass found them.
fn ids_for(
    input: &Input,
    meta: &RawMeta,
    opts: TranscodeOptions,
    known: Option<MappedFiles>,
) -> Result<Option<MapIds>, InputError> {
    if !(opts.buildid_mmap2 || opts.buildid_all) {
        return Ok(None);
    }
    let ids = map_ids(input, meta, opts.trust_paths)?;
    Ok(Some(match known {
        Some(files) => ids.knowing(files),
        None => ids,
    }))
}

/// What an output starts with: a file-mode head, the pipe-mode prologue
/// of a file-mode input's metadata, or (stream to stream, the metadata
/// records staying in place) just the pipe header.
fn head_of(meta: &RawMeta, to_pipe: bool, from_pipe: bool) -> Result<Vec<u8>, TranscodeError> {
    if !to_pipe {
        return Ok(raw_file_head(meta, 0));
    }
    if from_pipe {
        let mut h = crate::perf::header::magic_bytes(meta.endian).to_vec();
        h.put_u64(meta.endian, crate::perf::consts::PIPE_HEADER_SIZE);
        return Ok(h);
    }
    raw_pipe_prologue(meta).map_err(|source| TranscodeError::TooLarge {
        what: "the metadata",
        source,
    })
}

/// Rewrites `input` record by record into `out` (an empty file), as asked,
/// and counts what it did.
pub fn transcode(
    input: &Input,
    out: &mut File,
    opts: TranscodeOptions,
) -> Result<ConvertReport, TranscodeError> {
    transcode_knowing(input, out, opts, None)
}

/// Why a pass of the rewrite is made again.
enum Again {
    /// A table id was used for a path whose maps turned out to name
    /// several files: again, knowing them.
    Knowing(MappedFiles),
    /// The COMPRESSED records were being copied, and one is not read by
    /// perf as the walk read it (offset, why: `Walk::odd_compressed`):
    /// again, compressing the records anew (and knowing the files, if the
    /// pass also found them).
    Recompress((u64, &'static str), Option<MappedFiles>),
}

/// [`transcode`], knowing the files the maps name if a pass found them;
/// a pass that used a table id for a path whose maps turned out to name
/// several files is made again knowing them (see
/// [`super::attribution`]), and one that copied a COMPRESSED record perf
/// would not read as it is (nested, empty, several zstd frames) is made
/// again compressing the records anew.
pub fn transcode_knowing(
    input: &Input,
    out: &mut File,
    opts: TranscodeOptions,
    mut known: Option<MappedFiles>,
) -> Result<ConvertReport, TranscodeError> {
    let mut odd = None;
    loop {
        let files = match transcode_once(input, out, opts, known.take(), odd)? {
            Ok(mut report) => {
                report.odd_compressed = odd;
                return Ok(report);
            }
            Err(Again::Knowing(files)) => Some(files),
            Err(Again::Recompress(why, files)) => {
                odd = Some(why);
                files
            }
        };
        out.set_len(0)
            .and_then(|()| out.seek(SeekFrom::Start(0)).map(drop))
            .map_err(TranscodeError::Output)?;
        known = files;
    }
}

/// One pass of [`transcode_knowing`]: its report, or why it must be made
/// again. `odd`: a COMPRESSED record the copies would keep as perf does
/// not read it (the records are then compressed anew).
fn transcode_once(
    input: &Input,
    out: &mut File,
    opts: TranscodeOptions,
    known: Option<MappedFiles>,
    odd: Option<(u64, &'static str)>,
) -> Result<Result<ConvertReport, Again>, TranscodeError> {
    let e = input.endian();
    let mut meta = read_meta(input)?;
    let from_pipe = matches!(input.layout, Layout::Pipe(_));
    if opts.decompress {
        meta.remove_feature(feature::COMPRESSED);
    } else if let Some(c) = lost_compressed_feature(input)? {
        meta.set_feature(feature::COMPRESSED, c);
    }
    if let Some(d) = lost_event_desc_feature(input)? {
        meta.set_feature(feature::EVENT_DESC, d);
    }
    let ids = ids_for(input, &meta, opts, known)?;
    let werr = TranscodeError::Output;
    let dropped = dropped_features(&mut meta, opts.to_pipe, from_pipe);
    let head = head_of(&meta, opts.to_pipe, from_pipe)?;
    out.write_all(&head).map_err(werr)?;
    let mut em = Emitter {
        e,
        input: &input.file,
        out,
        buf: Vec::with_capacity(1 << 20),
        pos: head.len() as u64,
        decompress: opts.decompress,
        convert: opts.buildid_mmap2,
        recompress: opts.buildid_mmap2
            || odd.is_some()
            || input.salvaged.as_ref().is_some_and(|s| s.inner.is_some()),
        drop_metadata: from_pipe && !opts.to_pipe,
        ids,
        report: ConvertReport::default(),
        noted: ConvertReport::default(),
        in_compressed: false,
        aux_index: Vec::new(),
        zstd: None,
        level: zstd_level(&meta),
        failed: None,
    };
    let walk = input.walk(&mut em)?;
    em.end_group();
    if let Some(again) = again(&mut em, walk.odd_compressed) {
        return em.failed.take().map(werr).map_or(Ok(Err(again)), Err);
    }
    let added = match (&em.ids, opts.buildid_all) {
        (Some(ids), true) => ids.table_lacks(),
        _ => Vec::new(),
    };
    let too_large = |source| TranscodeError::TooLarge {
        what: "a BUILD_ID entry",
        source,
    };
    if opts.to_pipe && !added.is_empty() {
        // at the end of the stream: the ids are known only now (the maps
        // carry them themselves when converted)
        let recs = encode_build_id_entries(e, types::HEADER_BUILD_ID, &added).map_err(too_large)?;
        em.flush();
        em.buf = recs;
    }
    match (walk.trailing, opts.to_pipe) {
        (Some(t), true) => em.copy_after(t, input.len - t),
        _ => em.flush(),
    }
    if let Some(err) = em.failed.take() {
        return Err(werr(err));
    }
    let mut report = std::mem::take(&mut em.report);
    report.trailing = walk.trailing.map(|t| (t, input.len - t));
    report.table_added = added.len() as u64;
    dropped.into_report(&mut report);
    let data_len = em.pos - head.len() as u64;
    let aux = std::mem::take(&mut em.aux_index);
    drop(em);
    if !opts.to_pipe {
        if !added.is_empty() {
            let mut table = meta.feature(feature::BUILD_ID).unwrap_or_default().to_vec();
            table.extend(encode_build_id_entries(e, 0, &added).map_err(too_large)?);
            meta.set_feature(feature::BUILD_ID, table);
        }
        finish_file(&mut meta, &aux, data_len, out).map_err(werr)?;
    }
    Ok(Ok(report))
}

/// Why the pass `em` made must be made again, if it must: it copied a
/// COMPRESSED record perf misreads (`odd`, from the walk), or its maps
/// turned out to name several files at a path whose table id it used.
fn again(em: &mut Emitter, odd: Option<(u64, &'static str)>) -> Option<Again> {
    let files = em.ids.as_mut().and_then(MapIds::take_second_pass);
    let copied = !(em.decompress || em.recompress);
    match (odd.filter(|_| copied), files) {
        (Some(why), files) => Some(Again::Recompress(why, files)),
        (None, Some(files)) => Some(Again::Knowing(files)),
        (None, None) => None,
    }
}

/// The zstd level of recompressed records: the recording's
/// (HEADER_COMPRESSED), else perf's default 1.
fn zstd_level(meta: &RawMeta) -> i32 {
    meta.feature(feature::COMPRESSED)
        .and_then(|c| Rd(meta.endian).u32(c, 8))
        .and_then(|l| i32::try_from(l).ok())
        .filter(|l| (1..=22).contains(l))
        .unwrap_or(1)
}

/// Ends a file-mode output of `data_len` bytes of records: the AUXTRACE
/// index rebuilt from `aux`, the feature table and sections, the header.
/// No records (a salvage that kept none) get one FINISHED_ROUND: perf
/// takes data size 0 for a recording not terminated ("data size field is
/// 0"), and its script then fails.
fn finish_file(
    meta: &mut RawMeta,
    aux: &[(u64, u64)],
    mut data_len: u64,
    out: &mut File,
) -> io::Result<()> {
    if data_len == 0 {
        let mut round = Vec::with_capacity(8);
        crate::perf::record::encode_empty(&mut round, meta.endian, types::FINISHED_ROUND);
        out.write_all(&round)?;
        data_len = round.len() as u64;
    }
    if !aux.is_empty() || meta.feature(feature::AUXTRACE).is_some() {
        meta.set_feature(feature::AUXTRACE, auxtrace_index(meta.endian, aux));
    }
    write_raw_file_tail(out, meta, data_len)?;
    out.write_all_at(&raw_file_header(meta, data_len), 0)?;
    out.seek(SeekFrom::End(0))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{Endian, PutExt, Rd};
    use crate::perf::attr::Attr;
    use crate::perf::consts::{attr_flags, misc, sample_type as st};
    use crate::perf::features::string_feature;
    use crate::perf::record::{encode_empty, split_records};
    use crate::perf::writer::raw_file_tail;
    use crate::perf::RecordHeader;

    /// A file-mode recording: one attr, a sample, an AUXTRACE record with 16
    /// bytes of AUX data after it, a FINISHED_ROUND; HOSTNAME, TRACING_DATA
    /// (13 bytes) and an AUXTRACE index pointing at the record. Returns the
    /// file and its data section.
    fn recording(e: Endian) -> (Vec<u8>, Vec<u8>) {
        let attr = Attr {
            type_: 1,
            sample_type: st::IP | st::TID,
            flags: attr_flags::SAMPLE_ID_ALL,
            ..Default::default()
        };
        let mut data = Vec::new();
        RecordHeader {
            type_: types::SAMPLE,
            misc: misc::USER,
            size: 24,
        }
        .put(&mut data, e);
        data.put_u64(e, 0x1000);
        data.put_u64(e, 42 | 42 << 32);
        let aux_at = data.len() as u64;
        RecordHeader {
            type_: types::AUXTRACE,
            misc: 0,
            size: 48,
        }
        .put(&mut data, e);
        data.put_u64(e, 16); // size of the AUX data after the record
        data.resize(data.len() + 32, 0);
        data.extend_from_slice(&[0xa5; 16]);
        encode_empty(&mut data, e, types::FINISHED_ROUND);
        let mut meta = RawMeta {
            endian: e,
            attrs: vec![(attr.encode(e), vec![7])],
            features: vec![
                (feature::TRACING_DATA, b"tracing-bytes".to_vec()),
                (feature::HOSTNAME, string_feature(e, b"h")),
            ],
        };
        let head_len = raw_file_head(&meta, 0).len() as u64;
        meta.set_feature(
            feature::AUXTRACE,
            auxtrace_index(e, &[(head_len + aux_at, 48)]),
        );
        let len = data.len() as u64;
        let mut f = raw_file_head(&meta, len);
        f.extend_from_slice(&data);
        f.extend(raw_file_tail(&meta, len));
        (f, data)
    }

    fn run(dir: &std::path::Path, input: &[u8], name: &str, to_pipe: bool) -> Vec<u8> {
        let path = dir.join(name);
        std::fs::write(&path, input).unwrap();
        let input = Input::open(&path).unwrap();
        let out_path = dir.join(format!("{name}.out"));
        let mut out = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&out_path)
            .unwrap();
        let opts = TranscodeOptions {
            to_pipe,
            ..Default::default()
        };
        transcode(&input, &mut out, opts).unwrap();
        std::fs::read(&out_path).unwrap()
    }

    // file -> pipe -> file in both byte orders: the stream carries the
    // tracing data after a HEADER_TRACING_DATA record and no AUXTRACE
    // feature; back in file mode the data section, attrs and HOSTNAME are
    // the same bytes, the tracing data is the original padded to 8, and the
    // AUXTRACE index points at the AUXTRACE record where it now is.
    #[test]
    fn pipe_round_trip_moves_tracing_data_and_rebuilds_the_auxtrace_index() {
        for e in [Endian::Little, Endian::Big] {
            let tmp = tempfile::tempdir().unwrap();
            let (file, data) = recording(e);
            let pipe = run(tmp.path(), &file, "in.data", true);
            let types_in_pipe: Vec<(u32, usize)> = split_records(&pipe[16..], e)
                .map(|(h, b)| (h.type_, b.len()))
                .collect();
            assert_eq!(types_in_pipe[0].0, types::HEADER_ATTR);
            let feats: Vec<u64> = split_records(&pipe[16..], e)
                .filter(|(h, _)| h.type_ == types::HEADER_FEATURE)
                .map(|(_, b)| Rd(e).u64(b, 0).unwrap())
                .collect();
            assert_eq!(feats, vec![u64::from(feature::HOSTNAME), 32]);
            let at = pipe
                .windows(13)
                .position(|w| w == b"tracing-bytes")
                .unwrap();
            let rec = RecordHeader::parse(&pipe[at - 16..], e).unwrap();
            assert_eq!((rec.type_, rec.size), (types::HEADER_TRACING_DATA, 16));
            assert_eq!(
                Rd(e).u32(&pipe, at - 8),
                Some(16),
                "size counts the padding"
            );

            let back = run(tmp.path(), &pipe, "pipe.data", false);
            let input = Input::open(&tmp.path().join("pipe.data.out")).unwrap();
            let Layout::File { header, .. } = &input.layout else {
                panic!("file mode");
            };
            let d = header.data;
            assert_eq!(&back[d.offset as usize..d.end() as usize], &data[..]);
            assert_eq!(back[..d.offset as usize], file[..d.offset as usize]);
            let feature = |bit| input.feature(bit).unwrap().unwrap().1;
            assert_eq!(feature(feature::HOSTNAME), string_feature(e, b"h"));
            assert_eq!(feature(feature::TRACING_DATA), b"tracing-bytes\0\0\0");
            let index = feature(feature::AUXTRACE);
            let aux_at = d.offset + 24;
            assert_eq!(index, auxtrace_index(e, &[(aux_at, 48)]));
            let h = RecordHeader::parse(&back[aux_at as usize..], e).unwrap();
            assert_eq!(h.type_, types::AUXTRACE);
        }
    }

    // A feature too big for a pipe-mode record is an error, not a silent
    // drop (perf drops it); a stream whose tracing data runs past its end
    // is malformed input at that record's offset.
    #[test]
    fn what_a_stream_cannot_hold_is_refused() {
        let e = Endian::Little;
        let tmp = tempfile::tempdir().unwrap();
        let (file, _) = recording(e);
        let path = tmp.path().join("big.data");
        let mut input = Input::open(&{
            std::fs::write(&path, &file).unwrap();
            path.clone()
        })
        .unwrap();
        let mut meta = read_meta(&input).unwrap();
        meta.set_feature(feature::CMDLINE, vec![0; 70_000]);
        assert!(raw_pipe_prologue(&meta).is_err());
        let big = {
            let len = 0;
            let mut f = raw_file_head(&meta, len);
            f.extend(raw_file_tail(&meta, len));
            f
        };
        std::fs::write(&path, &big).unwrap();
        input = Input::open(&path).unwrap();
        let mut out = tempfile::tempfile().unwrap();
        let opts = TranscodeOptions {
            to_pipe: true,
            ..Default::default()
        };
        assert!(matches!(
            transcode(&input, &mut out, opts),
            Err(TranscodeError::TooLarge { .. })
        ));

        let mut pipe = run(tmp.path(), &file, "in.data", true);
        let at = pipe
            .windows(13)
            .position(|w| w == b"tracing-bytes")
            .unwrap();
        pipe[at - 8..at - 4].copy_from_slice(&1_000_000u32.to_le_bytes());
        let path = tmp.path().join("bad.pipe");
        std::fs::write(&path, &pipe).unwrap();
        let input = Input::open(&path).unwrap();
        let mut out = tempfile::tempfile().unwrap();
        // Not text where the next record should be: damage, an error at
        // the bad record's offset (text there would be perf's messages).
        match transcode(
            &input,
            &mut out,
            TranscodeOptions {
                to_pipe: true,
                ..Default::default()
            },
        ) {
            Err(TranscodeError::Input(InputError::Format { source, .. })) => {
                assert_eq!(source.offset, (at - 16) as u64, "{source}");
            }
            other => panic!("accepted: {other:?}"),
        }
    }
}
