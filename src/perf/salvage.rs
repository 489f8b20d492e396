//! `--salvage`: where a recording cut short (a `perf record -o -` stream
//! truncated by a full disk or a killed `tee`, a file-mode perf.data whose
//! writer was killed) stops holding whole records. The input is then read
//! as if it ended there, as perf itself reads such a file up to the cut.

use std::fs::File;

use super::compress::{compressed_payload, Decompressor};
use super::consts::{feature, types};
use super::error::FormatErrorKind as K;
use super::header::FeatureBits;
use super::stream::{RecordStream, StreamError, AUX_PAST_END, TRACING_PAST_END};
use crate::bytes::Endian;

/// What `--salvage` did to an input cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// Where the records read end: the end of the last whole record.
    pub at: u64,
    /// Bytes of the file after `at`, dropped (the record cut short; with
    /// [`FEATURES_CUT`], the feature area cut short, its whole sections
    /// kept).
    pub dropped: u64,
    /// The record cut short, when its header was whole: its type and the
    /// size it claims; (0, 0) for a header of zeros with only zeros after
    /// it (a tail zero-filled after a crash).
    pub cut_record: Option<(u32, u16)>,
    /// File mode: what was wrong with the header (the data section's size
    /// was not taken as it stands, and the feature sections, which perf
    /// writes last, are missing), or [`FEATURES_CUT`].
    pub header: Option<&'static str>,
    /// File mode: the feature bits the header set (perf sets them when it
    /// starts) whose sections are missing.
    pub lost: FeatureBits,
    /// The decompressed data of the COMPRESSED records ends inside a
    /// record: dropped.
    pub inner: Option<InnerCut>,
    /// A stream's records stopped at a record header of size 0 (`at`; with
    /// `cut_record` (0, 0)): the stream was not read past it.
    pub stream_stop: bool,
}

/// A record cut short at the end of the decompressed data: perf
/// compresses the two halves of a ring buffer that wrapped separately,
/// and a record may straddle them; cut after the first, the data ends
/// inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerCut {
    /// The offset of the last COMPRESSED record.
    pub at: u64,
    /// The decompressed bytes dropped (0: a zstd block cut short at a
    /// record boundary).
    pub bytes: u64,
    /// Where the damaged tail begins: the end of the last COMPRESSED
    /// record after which the decompressed data was whole (records and
    /// zstd blocks), else the first COMPRESSED record. The records from
    /// there on, written out decompressed, make the recording whole again
    /// (the zstd data before it is kept as it is: one frame runs through
    /// all COMPRESSED records, so what follows cannot be compressed anew
    /// into it). None when a record that cannot be written so (one with
    /// data after it, a HEADER_FEATURE) lies in the tail.
    pub tail: Option<u64>,
}

/// The header said nothing of the data's size: perf record killed.
pub const KILLED: &str = "data size 0 and no feature sections (perf record killed?)";
/// The header's data section runs past the end of the file.
pub const PAST_EOF: &str = "the data section runs past the end of the file";
/// The data section is whole, the feature table or sections after it are
/// not (the file cut at or after the data's end).
pub const FEATURES_CUT: &str = "the feature sections are cut short";

/// `n` and `what`, plural unless `n` is 1.
fn count(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// A record type's name, or its number.
fn type_name(t: u32) -> String {
    types::name(t).map_or_else(|| format!("type {t}"), |n| format!("{n} (type {t})"))
}

impl Salvaged {
    /// The warning to print, naming the input `path`.
    pub fn warning(&self, path: &std::path::Path) -> String {
        let mut w = format!("warning: {}: ", crate::text::escape_path(path));
        match self.header {
            Some(FEATURES_CUT) => {
                w += &format!(
                    "{FEATURES_CUT} (the file ends at offset {}): its data section read whole, up to offset {}",
                    self.at + self.dropped,
                    self.at
                );
            }
            Some(h) => {
                w += &format!(
                    "{h}: its records taken to run to the end of the file, without features; "
                );
                self.cut(&mut w);
            }
            None => self.cut(&mut w),
        }
        if let Some(inner) = self.inner {
            w += &format!(
                "; the data of its COMPRESSED records (the last at offset {}) ends inside a record \
                 (perf compresses the two halves of a ring buffer that wrapped apart; \
                 the cut came between them): its {} dropped, the records before kept",
                inner.at,
                count(inner.bytes, "decompressed byte")
            );
        }
        self.lost_features(&mut w);
        w
    }

    /// Where the records were cut, and what was dropped.
    fn cut(&self, w: &mut String) {
        if self.dropped == 0 {
            *w += &format!(
                "read up to the end of the file at offset {} (it ends at a record boundary)",
                self.at
            );
            return;
        }
        *w += &format!(
            "cut short at offset {}: read up to the last whole record there, {} after it dropped",
            self.at,
            count(self.dropped, "byte")
        );
        *w += &match self.cut_record {
            Some((0, 0)) if self.stream_stop => {
                " (a record header of size 0 in the stream: not read any further)".into()
            }
            Some((0, 0)) => {
                " (a record header of size 0 and only zeros after it: a tail zero-filled after a crash)"
                    .into()
            }
            Some((types::COMPRESSED | types::COMPRESSED2, size)) => format!(
                " (a COMPRESSED record of {size} bytes cut mid-frame: dropped whole, with the records it held)"
            ),
            Some((t, 0)) => format!(" (a record of {}, the data after it cut)", type_name(t)),
            Some((t, size)) => format!(" (a record of {} claiming {size} bytes)", type_name(t)),
            None => " (inside a record header)".into(),
        };
    }

    /// The feature sections lost, by name, and what their loss costs.
    fn lost_features(&self, w: &mut String) {
        if self.lost == FeatureBits::default() {
            return;
        }
        let names: Vec<String> = (self.lost.iter())
            .map(|b| feature::name(b).map_or_else(|| format!("feature {b}"), str::to_string))
            .collect();
        *w += &format!("; feature sections lost: {}", names.join(", "));
        let remade: Vec<&str> = [feature::COMPRESSED, feature::EVENT_DESC]
            .into_iter()
            .filter(|&b| self.lost.contains(b))
            .filter_map(feature::name)
            .collect();
        if !remade.is_empty() {
            *w += &format!(
                " ({} made again in the outputs of convert and merge)",
                remade.join(" and ")
            );
        }
        if self.lost.contains(feature::TRACING_DATA) {
            *w += "; perf cannot read tracepoint samples without TRACING_DATA: \
                   perf report and perf script refuse the output (\"incompatible file format\")";
        }
    }
}

/// Finds where the records of `file[start..end)` stop being whole: None
/// when they all are, or when what stops them is not a cut (a record
/// claiming less than its own header, text for `is_text`, which a stream
/// keeps after its records): the walk then reports or keeps it as it
/// would without `--salvage`. A cut is a record (or the data after an
/// AUXTRACE or HEADER_TRACING_DATA record) that runs past `end`, or fewer
/// than 8 bytes left there, or a record header of zeros with only zeros
/// after it (all of them read, holes stepped over), or in a `stream`'s
/// copy any record header of zeros.
pub(crate) fn find_cut(
    file: &File,
    (start, end): (u64, u64),
    e: Endian,
    stream: bool,
    is_text: impl Fn(u64) -> bool,
) -> std::io::Result<Option<Salvaged>> {
    let mut stream = RecordStream::new(file, start, end, e)
        .checking_all_zeros()
        .of_stream(stream);
    let err = loop {
        match stream.next() {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(None),
            Err(StreamError::Io(err)) => return Err(err),
            Err(StreamError::Format(err)) => break err,
        }
    };
    let cut_record = match err.kind {
        K::RecordPastEnd {
            record_type, size, ..
        } => Some((record_type, size)),
        K::Implausible { what, .. } if what == AUX_PAST_END || what == TRACING_PAST_END => {
            let t = if what == AUX_PAST_END {
                types::AUXTRACE
            } else {
                types::HEADER_TRACING_DATA
            };
            Some((t, 0))
        }
        K::StrayBytes(_) => None,
        K::ZeroFilled { .. } | K::ZeroInStream => Some((0, 0)),
        _ => return Ok(None),
    };
    if is_text(err.offset) {
        return Ok(None);
    }
    Ok(Some(Salvaged {
        at: err.offset,
        dropped: end - err.offset,
        cut_record,
        header: None,
        lost: FeatureBits::default(),
        inner: None,
        stream_stop: err.kind == K::ZeroInStream,
    }))
}

/// Decodes the COMPRESSED records of `file[start..end)` (each at most
/// `cap` bytes decompressed) and finds whether their data ends inside a
/// record ([`InnerCut`]), and where the tail to rewrite begins. None also
/// when there are none, or when the records or their data are damaged:
/// the walk reports that.
pub(crate) fn compressed_tail(
    file: &File,
    (start, end): (u64, u64),
    e: Endian,
    cap: u64,
) -> std::io::Result<Option<InnerCut>> {
    let mut stream = RecordStream::new(file, start, end, e);
    let mut dec: Option<Decompressor> = None;
    let mut last = 0;
    // where the tail begins, and whether it holds a record that cannot be
    // written out as it is
    let (mut tail, mut stuck) = (None, false);
    loop {
        let (at, h, body) = match stream.next() {
            Ok(Some(r)) => r,
            // text after a stream's records, or damage the walk reports
            Ok(None) | Err(StreamError::Format(_)) => break,
            Err(StreamError::Io(err)) => return Err(err),
        };
        let Ok(Some(payload)) = compressed_payload(at, &h, body, e) else {
            stuck |= tail.is_some()
                && matches!(
                    h.type_,
                    types::AUXTRACE | types::HEADER_TRACING_DATA | types::HEADER_FEATURE
                );
            continue;
        };
        let d = match &mut dec {
            Some(d) => d,
            None => dec.insert(Decompressor::new()?),
        };
        tail.get_or_insert(at);
        if d.feed(at, payload, e, cap, |_, _| Ok(())).is_err() {
            return Ok(None);
        }
        if d.unfinished().is_none() {
            (tail, stuck) = (Some(at + u64::from(h.size)), false);
        }
        last = at;
    }
    let tail = tail.filter(|_| !stuck);
    Ok(dec.and_then(|d| d.unfinished()).map(|bytes| InnerCut {
        at: last,
        bytes,
        tail,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;
    use crate::perf::record::RecordHeader;

    /// Three records: FINISHED_ROUND (8 bytes), a 24-byte sample, an AUXTRACE
    /// record (40 bytes) with 16 bytes of AUX data after it: 88 bytes.
    fn records(e: Endian) -> Vec<u8> {
        let mut b = Vec::new();
        crate::perf::record::encode_empty(&mut b, e, types::FINISHED_ROUND);
        RecordHeader {
            type_: types::SAMPLE,
            misc: 2,
            size: 24,
        }
        .put(&mut b, e);
        b.resize(32, 0x11);
        RecordHeader {
            type_: types::AUXTRACE,
            misc: 0,
            size: 40,
        }
        .put(&mut b, e);
        b.put_u64(e, 16);
        b.resize(72, 0);
        b.resize(88, 0xaa);
        b
    }

    /// [`find_cut`] over `bytes`, written to a file.
    fn cut_of(bytes: &[u8], e: Endian, text: bool) -> Option<Salvaged> {
        let f = tempfile::tempfile().unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, bytes, 0).unwrap();
        find_cut(&f, (0, bytes.len() as u64), e, false, |_| text).unwrap()
    }

    // Cut at every length, in both byte orders: whole records give no cut;
    // a cut inside a header, a body or the AUX data after its record is at
    // the start of the record cut, with the rest counted as dropped and the
    // record named when its header is whole.
    #[test]
    fn a_cut_is_found_at_the_last_whole_record() {
        for e in [Endian::Little, Endian::Big] {
            let all = records(e);
            for len in 0..=all.len() {
                let got = cut_of(&all[..len], e, false);
                let (at, what) = match len {
                    0 | 8 | 32 | 88 => {
                        assert_eq!(got, None, "{len} bytes are whole records");
                        continue;
                    }
                    1..8 => (0, None),
                    9..16 => (8, None),
                    16..32 => (8, Some((types::SAMPLE, 24))),
                    33..40 => (32, None),
                    40..72 => (32, Some((types::AUXTRACE, 40))),
                    _ => (32, Some((types::AUXTRACE, 0))),
                };
                let got = got.unwrap_or_else(|| panic!("no cut found in {len} bytes"));
                assert_eq!(
                    (got.at, got.dropped, got.cut_record),
                    (at, len as u64 - at, what),
                    "{len} bytes ({e:?})"
                );
            }
        }
    }

    // Zeros after the records to the end (a tail zero-filled after a
    // crash) are a cut at the first zero header, named as such; a
    // non-zero byte among them leaves it damage.
    #[test]
    fn a_zero_filled_tail_is_a_cut() {
        let e = Endian::Big;
        let mut b = records(e);
        b.resize(b.len() + 200, 0);
        let cut = cut_of(&b, e, false).expect("a cut");
        assert_eq!(
            (cut.at, cut.dropped, cut.cut_record),
            (88, 200, Some((0, 0)))
        );
        let w = cut.warning(std::path::Path::new("z.data"));
        assert!(w.contains("offset 88"), "{w}");
        assert!(w.contains("200 bytes after it dropped"), "{w}");
        assert!(w.contains("zero-filled"), "{w}");
        b[200] = 1;
        assert_eq!(cut_of(&b, e, false), None);
    }

    // What is not a cut is left to the walk: a record claiming fewer than
    // 8 bytes (damage), and text after the records (perf's messages,
    // which a stream keeps).
    #[test]
    fn damage_and_text_are_not_cuts() {
        let e = Endian::Little;
        let mut b = records(e);
        b[14] = 4; // the sample claims 4 bytes
        assert_eq!(cut_of(&b, e, false), None);
        let mut b = records(e);
        b.extend_from_slice(b"perf: done\n");
        assert_eq!(cut_of(&b, e, true), None);
        assert!(cut_of(&b, e, false).is_some());
    }

    // The warning names the file, the offset, the bytes dropped, and says
    // a COMPRESSED record cut mid-frame is dropped whole.
    #[test]
    fn the_warning_says_where_and_what() {
        let s = Salvaged {
            at: 4096,
            dropped: 100,
            cut_record: Some((types::COMPRESSED, 2000)),
            header: None,
            lost: FeatureBits::default(),
            inner: None,
            stream_stop: false,
        };
        let w = s.warning(std::path::Path::new("cut.data"));
        for want in [
            "cut.data",
            "offset 4096",
            "100 bytes",
            "COMPRESSED",
            "dropped whole",
        ] {
            assert!(w.contains(want), "{w}");
        }
    }

    // One byte dropped is "1 byte"; AUXTRACE and HEADER_TRACING_DATA are
    // named; the lost features are listed by name, those convert and merge
    // make again said so, and a lost TRACING_DATA said to leave perf unable
    // to read tracepoint samples.
    #[test]
    fn the_warning_names_types_and_lost_features() {
        let mut s = Salvaged {
            at: 100,
            dropped: 1,
            cut_record: Some((types::AUXTRACE, 0)),
            header: Some(KILLED),
            lost: FeatureBits::from_bits([
                feature::TRACING_DATA,
                feature::BUILD_ID,
                feature::EVENT_DESC,
                99,
            ]),
            inner: None,
            stream_stop: false,
        };
        let w = s.warning(std::path::Path::new("k.data"));
        for want in [
            "1 byte after it dropped",
            "AUXTRACE (type 71)",
            "feature sections lost: TRACING_DATA, BUILD_ID, EVENT_DESC, feature 99",
            "EVENT_DESC made again",
            "perf cannot read tracepoint samples without TRACING_DATA",
        ] {
            assert!(w.contains(want), "{want}: {w}");
        }
        s.cut_record = Some((types::HEADER_TRACING_DATA, 0));
        s.lost = FeatureBits::default();
        s.inner = Some(InnerCut {
            at: 64,
            bytes: 1,
            tail: None,
        });
        let w = s.warning(std::path::Path::new("k.data"));
        assert!(w.contains("HEADER_TRACING_DATA (type 66)"), "{w}");
        assert!(w.contains("its 1 decompressed byte dropped"), "{w}");
        assert!(!w.contains("lost"), "{w}");
    }

    /// A COMPRESSED record of `payload`, little-endian.
    fn compressed(payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        crate::perf::compress::encode_compressed(
            &mut b,
            Endian::Little,
            types::COMPRESSED,
            payload,
        );
        b
    }

    // Two halves of a ring buffer compressed apart, a record straddling
    // them (one zstd stream, flushed after each): cut after the first, the
    // decompressed data ends inside the record, found with the bytes of it
    // there; whole, or cut where the records are whole, nothing is found.
    #[test]
    fn a_record_cut_at_the_end_of_the_decompressed_data_is_found() {
        use zstd::stream::raw::{Encoder, InBuffer, Operation, OutBuffer};
        let e = Endian::Little;
        let recs = records(e);
        let recs = &recs[..32]; // FINISHED_ROUND and the sample
        let mut enc = Encoder::new(1).unwrap();
        let mut half = |bytes: &[u8]| {
            let mut out = vec![0u8; 1024];
            let mut o = OutBuffer::around(&mut out[..]);
            let mut i = InBuffer::around(bytes);
            enc.run(&mut i, &mut o).unwrap();
            while enc.flush(&mut o).unwrap() > 0 {}
            let n = o.pos();
            out.truncate(n);
            out
        };
        let (a, b) = (half(&recs[..20]), half(&recs[20..]));
        let tail = |bytes: &[u8]| {
            let f = tempfile::tempfile().unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, bytes, 0).unwrap();
            compressed_tail(&f, (0, bytes.len() as u64), e, 1 << 20).unwrap()
        };
        let first = compressed(&a);
        let cut = InnerCut {
            at: 0,
            bytes: 12,
            tail: Some(0),
        };
        assert_eq!(tail(&first), Some(cut));
        let mut both = first.clone();
        both.extend_from_slice(&compressed(&b));
        assert_eq!(tail(&both), None);
        // a third half after the two: the tail begins after them (a
        // FINISHED_ROUND between changes nothing)
        let c = half(&recs[..20]);
        let mut three = both.clone();
        crate::perf::record::encode_empty(&mut three, e, types::FINISHED_ROUND);
        three.extend_from_slice(&compressed(&c));
        let cut = InnerCut {
            at: both.len() as u64 + 8,
            bytes: 12,
            tail: Some(both.len() as u64),
        };
        assert_eq!(tail(&three), Some(cut));
        // an AUXTRACE record in the tail: it cannot be written out
        let mut aux = both.clone();
        aux.extend_from_slice(&compressed(&c));
        aux.extend_from_slice(&records(e)[32..]);
        assert_eq!(tail(&aux).map(|c| c.tail), Some(None));
        assert_eq!(tail(&records(e)), None, "no COMPRESSED records");
    }
}
