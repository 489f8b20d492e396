//! Snapshot files both ways: a [`Snapshot`] written as a standalone perf.data
//! (file or pipe mode, with the host's header features), and the COMM and
//! map records of such a file (or any recording) read back as processes.

use std::collections::BTreeMap;
use std::io::Write;

use super::encode::{self, Encoding};
use crate::bytes::Endian;
use crate::model::{Perms, Process, Thread, Vma};
use crate::perf::consts::{attr_flags, feature, sample_type as st, types};
use crate::perf::consts::{PERF_COUNT_SW_DUMMY, PERF_TYPE_SOFTWARE};
use crate::perf::events::{map_error, parse_comm, parse_map, MapRecord};
use crate::perf::features::{cmdline_feature, event_desc_feature, nrcpus_feature, string_feature};
use crate::perf::record::encode_empty;
use crate::perf::writer::{write_file, write_pipe_prologue};
use crate::perf::{
    Attrs, EventDesc, FormatError, FormatErrorKind, Input, InputError, Metadata, RecordHeader,
    RecordTooLarge, Visitor, WriteError,
};
use crate::proc::{HostFacts, Snapshot};

/// The event id written for the single dummy event.
pub const EVENT_ID: u64 = 1;

/// The attr of the dummy event a snapshot is recorded under: a software
/// dummy event with `sample_id_all`, trailer = TID, TIME, IDENTIFIER.
pub fn snapshot_attr() -> crate::perf::Attr {
    crate::perf::Attr {
        type_: PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_DUMMY,
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
        ..crate::perf::Attr::default()
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
    pub endian: Endian,
    /// File or pipe layout.
    pub mode: Mode,
    /// Emit FORK records (system-wide snapshots, as perf does with -a).
    pub forks: bool,
    /// The command line stored in CMDLINE.
    pub cmdline: Vec<Vec<u8>>,
    /// HOSTNAME, OSRELEASE and NRCPUS.
    pub host: HostFacts,
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
        layout: attr.layout(),
        id: EVENT_ID,
        forks,
        fill_tid: true,
    };
    let mut data = Vec::with_capacity(snap.processes.iter().map(|p| 64 + p.vmas.len() * 128).sum());
    encode::encode(snap, &enc, &mut data)?;
    encode_empty(&mut data, endian, types::FINISHED_INIT);
    Ok(data)
}

/// Writes a whole perf.data for the snapshot.
pub fn write_snapshot(
    out: &mut (impl Write + ?Sized),
    snap: &Snapshot,
    opts: &WriteOptions,
) -> Result<(), WriteError> {
    let e = opts.endian;
    let attr = snapshot_attr();
    let data = encode_data(snap, e, opts.forks)?;
    let mut features = host_features(e, &opts.host, &opts.cmdline);
    let events = vec![EventDesc {
        attr,
        name: b"dummy:u".to_vec(),
        ids: vec![EVENT_ID],
    }];
    features.push((feature::EVENT_DESC, event_desc_feature(e, &events)));
    let meta = Metadata {
        endian: e,
        events,
        features,
        build_ids: encode::build_id_entries(snap),
    };
    match opts.mode {
        Mode::File => write_file(out, &meta, &data)?,
        Mode::Pipe => {
            write_pipe_prologue(out, &meta)?;
            out.write_all(&data)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS and CMDLINE payloads, ascending.
pub fn host_features(e: Endian, host: &HostFacts, cmdline: &[Vec<u8>]) -> Vec<(u32, Vec<u8>)> {
    let version = format!("mmap2-synth {}", env!("CARGO_PKG_VERSION"));
    vec![
        (feature::HOSTNAME, string_feature(e, &host.hostname)),
        (feature::OSRELEASE, string_feature(e, &host.osrelease)),
        (feature::VERSION, string_feature(e, version.as_bytes())),
        (
            feature::ARCH,
            string_feature(e, std::env::consts::ARCH.as_bytes()),
        ),
        (
            feature::NRCPUS,
            nrcpus_feature(e, host.cpus_online, host.cpus_available),
        ),
        (feature::CMDLINE, cmdline_feature(e, cmdline)),
    ]
}

/// Longest thread name accepted from a snapshot file (the kernel's are at
/// most 15 bytes).
const MAX_COMM: usize = 255;

/// Collects the COMM and map records of a recording.
struct MapsReader {
    comms: Vec<(u32, u32, Vec<u8>)>,
    maps: Vec<MapRecord>,
    e: Endian,
}

impl Visitor for MapsReader {
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        _attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let e = self.e;
        let bad = || FormatError::at(at, FormatErrorKind::MalformedRecord(h.type_));
        match h.type_ {
            types::COMM => {
                let comm = parse_comm(body, e).ok_or_else(bad)?;
                // the kernel's comm is 16 bytes; a snapshot naming a thread
                // with 64 KiB could not be encoded again
                if comm.2.len() > MAX_COMM {
                    return Err(bad());
                }
                self.comms.push(comm);
            }
            types::MMAP | types::MMAP2 => {
                let m = parse_map(&h, body, e)
                    .ok_or_else(|| FormatError::at(at, map_error(&h, body)))?;
                self.maps.push(m);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Reads a snapshot file (or any recording) back into processes: one per
/// pid of its COMM and map records, the leader first, maps by address.
pub fn read_snapshot(input: &Input) -> Result<Vec<Process>, InputError> {
    let mut reader = MapsReader {
        comms: Vec::new(),
        maps: Vec::new(),
        e: input.endian(),
    };
    input.walk(None, &mut reader)?;
    Ok(processes_from_records(&reader.comms, &reader.maps))
}

/// Turns COMM records (pid, tid, name) and map records into processes.
pub fn processes_from_records(comms: &[(u32, u32, Vec<u8>)], maps: &[MapRecord]) -> Vec<Process> {
    let mut by_pid: BTreeMap<u32, Process> = BTreeMap::new();
    for (pid, tid, comm) in comms {
        let p = by_pid.entry(*pid).or_insert_with(|| Process::empty(*pid));
        if !p.threads.iter().any(|t| t.tid == *tid) {
            p.threads.push(Thread {
                tid: *tid,
                comm: comm.clone(),
            });
        }
    }
    for m in maps.iter().filter(|m| m.key.pid != u32::MAX) {
        let p = by_pid
            .entry(m.key.pid)
            .or_insert_with(|| Process::empty(m.key.pid));
        let (dev_major, dev_minor, inode) = m.dev_ino.unwrap_or((0, 0, 0));
        p.vmas.push(Vma {
            start: m.key.addr,
            end: m.key.addr.saturating_add(m.key.len),
            offset: m.key.pgoff,
            perms: Perms::from_prot_flags(m.prot, m.flags),
            dev_major,
            dev_minor,
            inode,
            name: m.key.filename.clone(),
            build_id: m.build_id,
        });
    }
    for p in by_pid.values_mut() {
        // the leader first, as the encoder expects
        p.threads.sort_by_key(|t| (t.tid != p.pid, t.tid));
        if p.threads.first().is_none_or(|t| t.tid != p.pid) {
            let leader = Thread {
                tid: p.pid,
                comm: Vec::new(),
            };
            p.threads.insert(0, leader);
        }
        p.vmas.sort_by_key(|v| v.start);
    }
    by_pid.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::events::MapKey;

    // Snapshot records become processes: leader first, maps sorted, perms from prot/flags.
    #[test]
    fn snapshot_records_to_processes() {
        let comms = vec![(5, 6, b"worker".to_vec()), (5, 5, b"main".to_vec())];
        let maps: Vec<MapRecord> = [(0x2000u64, 5u32, 2u32), (0x1000, 3, 1)]
            .into_iter()
            .map(|(addr, prot, flags)| MapRecord {
                key: MapKey {
                    pid: 5,
                    addr,
                    len: 0x1000,
                    pgoff: 0,
                    filename: b"/x".to_vec(),
                },
                tid: 5,
                misc: 0,
                build_id: None,
                dev_ino: Some((1, 2, 3)),
                prot,
                flags,
            })
            .collect();
        let p = processes_from_records(&comms, &maps);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].threads[0].comm, b"main");
        assert_eq!(p[0].vmas[0].start, 0x1000);
        assert_eq!(
            p[0].vmas[0].perms,
            Perms::READ | Perms::WRITE | Perms::SHARED
        );
        assert_eq!(p[0].vmas[1].perms, Perms::READ | Perms::EXEC);
        assert_eq!(p[0].vmas[1].inode, 3);
    }
}
