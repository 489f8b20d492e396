//! Turns a [`Snapshot`] into a standalone perf.data, in file or pipe mode.

use std::io::{self, Write};

use crate::perf_data::{self, attr_flags, Attr, EventDesc, Metadata};
use crate::record::{self, sample_type as st, Endian, RecordTooLarge};
use crate::synth::{self, Encoding, Snapshot};

/// The event id written for the single dummy event.
pub const EVENT_ID: u64 = 1;

/// The attr of the dummy event a snapshot is recorded under: a software
/// dummy event with `sample_id_all`, trailer = TID, TIME, IDENTIFIER.
pub fn snapshot_attr() -> Attr {
    Attr {
        type_: perf_data::PERF_TYPE_SOFTWARE,
        config: perf_data::PERF_COUNT_SW_DUMMY,
        sample_period: 1,
        sample_type: st::IP | st::TID | st::TIME | st::PERIOD | st::IDENTIFIER,
        read_format: 0,
        flags: attr_flags::DISABLED
            | attr_flags::MMAP
            | attr_flags::COMM
            | attr_flags::TASK
            | attr_flags::SAMPLE_ID_ALL
            | attr_flags::MMAP2
            | attr_flags::COMM_EXEC
            | attr_flags::BUILD_ID,
    }
}

/// Output mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Seekable file layout.
    File,
    /// Pipe layout (stream of records).
    Pipe,
}

/// Options for writing a snapshot.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Byte order.
    pub endian: Endian,
    /// File or pipe layout.
    pub mode: Mode,
    /// Emit FORK records (system-wide snapshots, as perf does with -a).
    pub forks: bool,
    /// The command line stored in CMDLINE.
    pub cmdline: Vec<Vec<u8>>,
    /// HOSTNAME, OSRELEASE and NRCPUS.
    pub host: crate::host::HostFacts,
}

/// Error writing a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A record would be too large.
    #[error(transparent)]
    TooLarge(#[from] RecordTooLarge),
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Encodes the data section: synthesized records, then FINISHED_INIT.
pub fn encode_data(
    snap: &Snapshot,
    endian: Endian,
    forks: bool,
) -> Result<Vec<u8>, RecordTooLarge> {
    let attr = snapshot_attr();
    let enc = Encoding {
        endian,
        layout: attr.sample_id_layout(),
        id: EVENT_ID,
        forks,
        fill_tid: true,
    };
    let mut data = Vec::with_capacity(snap.processes.iter().map(|p| 64 + p.vmas.len() * 128).sum());
    synth::encode(snap, &enc, &mut data)?;
    record::encode_empty(&mut data, endian, record::types::FINISHED_INIT);
    Ok(data)
}

/// Writes a whole perf.data for the snapshot.
pub fn write_snapshot(
    out: &mut impl Write,
    snap: &Snapshot,
    opts: &WriteOptions,
) -> Result<(), WriteError> {
    let e = opts.endian;
    let attr = snapshot_attr();
    let data = encode_data(snap, e, opts.forks)?;
    let mut features = crate::host::host_features(e, &opts.host, &opts.cmdline);
    let events = vec![EventDesc {
        attr: attr.encode(e),
        name: b"dummy:u".to_vec(),
        ids: vec![EVENT_ID],
    }];
    features.push((
        perf_data::feature::EVENT_DESC,
        perf_data::event_desc_feature(e, &events),
    ));
    let meta = Metadata {
        endian: e,
        events,
        features,
        build_ids: synth::build_id_entries(snap),
    };
    match opts.mode {
        Mode::File => perf_data::write_file(out, &meta, &data)?,
        Mode::Pipe => {
            perf_data::write_pipe_prologue(out, &meta)?;
            out.write_all(&data)?;
        }
    }
    out.flush()?;
    Ok(())
}
