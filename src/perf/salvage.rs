//! `--salvage`: where a recording cut short (a `perf record -o -` stream
//! truncated by a full disk or a killed `tee`, a file-mode perf.data whose
//! writer was killed) stops holding whole records. The input is then read
//! as if it ended there, as perf itself reads such a file up to the cut.

use std::fs::File;

use super::consts::types;
use super::error::FormatErrorKind as K;
use super::header::FeatureBits;
use super::stream::{RecordStream, StreamError, AUX_PAST_END, TRACING_PAST_END};
use crate::bytes::Endian;

/// What `--salvage` did to an input cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// Where the records read end: the end of the last whole record.
    pub at: u64,
    /// Bytes of the file after `at`, dropped (the record cut short).
    pub dropped: u64,
    /// The record cut short, when its header was whole: its type and the
    /// size it claims.
    pub cut_record: Option<(u32, u16)>,
    /// File mode: what was wrong with the header (the data section's size
    /// was not taken as it stands, and the feature sections, which perf
    /// writes last, are missing).
    pub header: Option<&'static str>,
    /// File mode: the feature bits the header set (perf sets them when it
    /// starts) whose sections are missing.
    pub lost: FeatureBits,
}

/// The header said nothing of the data's size: perf record killed.
pub const KILLED: &str = "data size 0 and no feature sections (perf record killed?)";
/// The header's data section runs past the end of the file.
pub const PAST_EOF: &str = "the data section runs past the end of the file";

impl Salvaged {
    /// The warning to print, naming the input `path`.
    pub fn warning(&self, path: &std::path::Path) -> String {
        let mut w = format!("warning: {}: ", path.display());
        if let Some(h) = self.header {
            w += &format!(
                "{h}: its records taken to run to the end of the file, without features; "
            );
        }
        if self.dropped == 0 {
            w += &format!(
                "read up to the end of the file at offset {} (it ends at a record boundary)",
                self.at
            );
            return w;
        }
        w += &format!(
            "cut short at offset {}: read up to the last whole record there, {} bytes after it dropped",
            self.at, self.dropped
        );
        match self.cut_record {
            Some((types::COMPRESSED | types::COMPRESSED2, size)) => {
                w += &format!(
                    " (a COMPRESSED record of {size} bytes cut mid-frame: dropped whole, with the records it held)"
                );
            }
            Some((t, 0)) => w += &format!(" (a record of type {t}, the data after it cut)"),
            Some((t, size)) => w += &format!(" (a record of type {t} claiming {size} bytes)"),
            None => w += " (inside a record header)",
        }
        w
    }
}

/// Finds where the records of `file[start..end)` stop being whole: None
/// when they all are, or when what stops them is not a cut (a record
/// claiming less than its own header, text for `is_text`, which a stream
/// keeps after its records): the walk then reports or keeps it as it
/// would without `--salvage`. A cut is a record (or the data after an
/// AUXTRACE or HEADER_TRACING_DATA record) that runs past `end`, or fewer
/// than 8 bytes left there.
pub(crate) fn find_cut(
    file: &File,
    start: u64,
    end: u64,
    e: Endian,
    is_text: impl Fn(u64) -> bool,
) -> std::io::Result<Option<Salvaged>> {
    let mut stream = RecordStream::new(file, start, end, e);
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
        find_cut(&f, 0, bytes.len() as u64, e, |_| text).unwrap()
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
}
