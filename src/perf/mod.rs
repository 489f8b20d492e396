//! The perf.data format, and nothing else: constants, the header with its
//! sections and feature table, attrs, record framing, the records we encode
//! and decode, feature payloads, the two writers, the streaming record
//! reader (`stream`), what the walk requires of every record (`check`), `-z` payloads (`compress`), range copies (`copy`), where a recording cut
//! short stops holding whole records (`salvage`), which feature payloads
//! perf itself can read (`feature_check`).
//! Pure code over bytes but for `stream`, `copy` and `input`, which read
//! files.
//!
//! May import: `bytes`, `model`, `text`. Nothing here knows about /proc,
//! snapshots or merging.

pub mod attr;
pub mod bpf;
mod check;
pub(crate) mod compress;
pub mod consts;
pub(crate) mod copy;
pub mod error;
pub mod events;
pub mod evname;
pub mod feature_check;
pub mod features;
pub mod header;
pub mod input;
mod input_dir;
mod input_error;
mod input_open;
mod input_salvage;
pub(crate) mod progress;
pub mod record;
pub mod salvage;
pub mod sample;
mod spool;
pub(crate) mod stream;
pub mod walk;
pub mod writer;

pub use attr::{Attr, Attrs};
pub use error::{FormatError, FormatErrorKind, RecordTooLarge};
pub use features::{BuildIdEntry, EventDesc};
pub use header::{FeatureBits, FeatureTable, FileHeader, Kind, Section};
pub use input::{DirFileError, Input, InputError, Layout};
pub use record::{RecordHeader, SampleId, SampleIdLayout, Trailer};
pub use salvage::Salvaged;
pub use walk::{Visitor, Walk, DEFAULT_DECOMPRESSED_CAP};
pub use writer::{Metadata, WriteError};
