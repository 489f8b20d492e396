//! What can be wrong with a perf.data input ([`FormatError`]: a kind and the
//! byte offset), and the one way our own encoder can fail ([`RecordTooLarge`]).

/// A record would not fit its 16-bit size field. Every encoder input is
/// bounded (names by PATH_MAX, comms by the kernel), so in a rewrite this is
/// a bug of ours, not bad input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record of type {record_type} would be {size} bytes, more than 65535")]
pub struct RecordTooLarge {
    pub record_type: u32,
    pub size: usize,
}

/// What [`FormatErrorKind::Truncated`] names when the data of the
/// COMPRESSED records ends inside a zstd block or a record (`perf record
/// -z` killed, or its stream cut, between two of them).
pub(crate) const UNFINISHED: &str = "compressed data (unfinished zstd frame or record)";

/// What was wrong with the input, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at offset {offset}: {kind}")]
pub struct FormatError {
    /// Byte offset in the file (of the record, for records inside a
    /// compressed one).
    pub offset: u64,
    pub kind: FormatErrorKind,
}

/// The kinds of malformed input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatErrorKind {
    /// The first 8 bytes are not `PERFILE2` in either byte order.
    #[error("not a perf.data file (bad magic)")]
    BadMagic,
    /// The header's size field is neither 104 (file) nor 16 (pipe).
    #[error("unknown header size {0}")]
    UnknownHeaderSize(u64),
    /// The file is shorter than its header.
    #[error("file is {0} bytes, too short for a perf.data header")]
    TooShort(u64),
    /// A structure ends before its fields do.
    #[error("{0} truncated")]
    Truncated(&'static str),
    /// A section of the header or the feature table lies outside the file.
    #[error("{what} {offset}+{size} runs past the end of the file ({file_len} bytes)")]
    SectionPastEnd {
        what: &'static str,
        offset: u64,
        size: u64,
        /// The file's size.
        file_len: u64,
    },
    /// A size field is beyond anything perf writes.
    #[error("implausible {what} {value}")]
    Implausible { what: &'static str, value: u64 },
    /// A layout perf never writes and this tool does not handle.
    #[error("{0} is not supported")]
    Unsupported(&'static str),
    /// A file-mode header with data size 0 and no feature table after it:
    /// perf record did not end its file (killed).
    #[error(
        "the header's data size is 0: the recording was probably not terminated \
         properly (perf record killed?)"
    )]
    DataSizeZero,
    /// The sections contradict each other.
    #[error("{0}")]
    Inconsistent(&'static str),
    /// A record header claims a size below its own 8 bytes.
    #[error("record of type {record_type} has size {size} (< 8)")]
    RecordTooSmall { record_type: u32, size: u16 },
    /// A record runs past the end of the data section.
    #[error("record of type {record_type} (size {size}) runs past the end of the data at {end}")]
    RecordPastEnd {
        record_type: u32,
        size: u16,
        end: u64,
    },
    /// Fewer than 8 bytes are left after the last record.
    #[error("{0} stray bytes at the end of the data")]
    StrayBytes(u64),
    /// A record header of zeros, and zeros after it: a tail zero-filled
    /// after a crash (the file's size was written, its last blocks never
    /// were). `left` bytes run from there to the end of the data; the first
    /// `checked` of them were found zero (all of them, or as far as a
    /// bounded look read: the rest unread).
    #[error("{}", zero_filled(*checked, *left))]
    ZeroFilled { checked: u64, left: u64 },
    /// A record header of size 0 in a stream: the stream was not read past
    /// it (a stream has no zero-filled tail to step over; zeros after a
    /// recording would never end).
    #[error(
        "record header of size 0 in the stream: the stream stops being perf.data there \
         (not read any further)"
    )]
    ZeroInStream,
    /// A record's fields do not fit its size.
    #[error("malformed record of type {0}")]
    MalformedRecord(u32),
    /// A pipe-mode HEADER_ATTR whose attr size is out of range.
    #[error("HEADER_ATTR with attr.size {0}")]
    BadAttrSize(usize),
    /// A compressed record could not be decoded.
    #[error("compressed record: {0}")]
    Compressed(String),
    /// Compressed records expand past the bound on their total
    /// (`compress::EXPANSION_RATIO` times the compressed bytes read, beyond
    /// a floor).
    #[error(
        "compressed data decompresses to more than {ratio} times its size: \
         {decompressed} bytes from {compressed} bytes of zstd so far (a decompression bomb?)"
    )]
    Expansion {
        ratio: u64,
        compressed: u64,
        decompressed: u64,
    },
    /// A record whose data follows it in the file (AUXTRACE,
    /// HEADER_TRACING_DATA) inside a compressed record, where nothing can
    /// follow it: perf writes these uncompressed.
    #[error(
        "{0} inside a compressed record (perf writes it, and the data after it, uncompressed)"
    )]
    InsideCompressed(&'static str),
    /// A BUILD_ID table entry with a size outside 36..=rest of the table.
    #[error("bad build-id entry size {0}")]
    BadBuildIdEntry(usize),
    /// A pipe-mode HEADER_FEATURE record (the error's offset) whose payload,
    /// feature `feature`, is malformed: `what` at offset `at` in it.
    #[error("HEADER_FEATURE record of feature {feature}: {what} (at offset {at}, byte {} of its payload)", at - payload)]
    BadFeatureRecord {
        feature: &'static str,
        /// The file offset of what is wrong.
        at: u64,
        /// The file offset of the payload.
        payload: u64,
        what: Box<FormatErrorKind>,
    },
    /// A sample's fields do not fit its record.
    #[error("bad sample: {0}")]
    Sample(SampleError),
    /// No attrs: nothing tells how to read the records.
    #[error("no event attributes{0}")]
    NoAttrs(&'static str),
}

impl FormatErrorKind {
    /// This kind with the offsets into the records it holds passed
    /// through `f`: for an error found in a copy, told in the original
    /// (a [`FormatErrorKind::SectionPastEnd`], of the header's sections,
    /// is left as it is).
    #[must_use]
    pub fn moved(self, f: &impl Fn(u64) -> u64) -> FormatErrorKind {
        use FormatErrorKind as K;
        match self {
            K::BadFeatureRecord {
                feature,
                at,
                payload,
                what,
            } => K::BadFeatureRecord {
                feature,
                at: f(at),
                payload: f(payload),
                what: Box::new(what.moved(f)),
            },
            K::RecordPastEnd {
                record_type,
                size,
                end,
            } => K::RecordPastEnd {
                record_type,
                size,
                end: f(end),
            },
            other => other,
        }
    }
}

impl FormatError {
    /// A `kind` of error at `offset`.
    pub fn at(offset: u64, kind: FormatErrorKind) -> FormatError {
        FormatError { offset, kind }
    }

    /// Whether this is what a recording cut short gives (a stream or data
    /// section ending inside a record or in zeros, a data section past the
    /// end of the file, a killed perf record's header, compressed data
    /// ending inside a zstd block or a record): what `--salvage` reads.
    pub fn is_cut(&self) -> bool {
        use FormatErrorKind as K;
        match &self.kind {
            // a file cut at or after its data's end: its feature table
            // or sections
            K::SectionPastEnd { what, .. } => {
                matches!(*what, "data section" | "feature section")
            }
            K::Truncated(what) => matches!(*what, "feature section table" | UNFINISHED),
            K::DataSizeZero | K::RecordPastEnd { .. } | K::StrayBytes(_) => true,
            K::ZeroFilled { .. } | K::ZeroInStream => true,
            _ => false,
        }
    }
}

/// What [`FormatErrorKind::ZeroFilled`] says: that all `left` bytes are
/// zero only if all were checked.
fn zero_filled(checked: u64, left: u64) -> String {
    if checked >= left {
        format!(
            "record header of size 0, and the {left} bytes from there to the end of the data \
             are all zero (zero-filled after a crash?)"
        )
    } else {
        format!(
            "record header of size 0, and the first {checked} of the {left} bytes from there \
             to the end of the data are zero (zero-filled after a crash? the rest not read)"
        )
    }
}

/// Why a sample body could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleError {
    /// The body ends before the field named.
    Truncated(&'static str),
    /// A count that cannot fit in the record (callchain nr, READ group nr).
    Implausible(&'static str, u64),
}

impl std::error::Error for SampleError {}

impl std::fmt::Display for SampleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SampleError::Truncated(what) => write!(f, "sample ends inside its {what}"),
            SampleError::Implausible(what, n) => {
                write!(f, "sample {what} {n} is more than the record holds")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An unfinished zstd frame and a zero-filled tail are what a recording
    // cut short gives (the CLI then names --salvage); a record of size 0
    // followed by other bytes, or another truncation, is not.
    #[test]
    fn unfinished_frames_and_zero_tails_are_cuts() {
        let cut = |kind| FormatError::at(0, kind).is_cut();
        assert!(cut(FormatErrorKind::Truncated(UNFINISHED)));
        assert!(cut(FormatErrorKind::ZeroFilled {
            checked: 100,
            left: 100
        }));
        assert!(cut(FormatErrorKind::ZeroInStream));
        assert!(!cut(FormatErrorKind::Truncated("inner record header")));
        assert!(!cut(FormatErrorKind::RecordTooSmall {
            record_type: 0,
            size: 0
        }));
    }
}
