//! Reading a snapshot file (or any recording) back: its COMM and map
//! records as processes, and its kernel maps.

use std::collections::BTreeMap;

use crate::bytes::Endian;
use crate::model::{KernelMap, Perms, Process, Thread, Vma};
use crate::perf::consts::{misc, types};
use crate::perf::events::{parse_comm, parse_map, MapRecord};
use crate::perf::{Attrs, FormatError, FormatErrorKind, Input, InputError, RecordHeader, Visitor};
use crate::proc::kernel::KERNEL_DSO;

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
                let m = parse_map(&h, body, e).ok_or_else(|| {
                    FormatError::at(at, FormatErrorKind::MalformedRecord(h.type_))
                })?;
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
    Ok(read_snapshot_with_kernel(input)?.0)
}

/// [`read_snapshot`], and the kernel's and modules' maps (pid -1, cpumode
/// kernel) with the ids they carry.
pub fn read_snapshot_with_kernel(
    input: &Input,
) -> Result<(Vec<Process>, Vec<KernelMap>), InputError> {
    let mut reader = MapsReader {
        comms: Vec::new(),
        maps: Vec::new(),
        e: input.endian(),
    };
    input.walk(&mut reader)?;
    let kernel = reader
        .maps
        .iter()
        .filter(|m| is_kernel_map(m))
        .map(|m| KernelMap {
            start: m.key.addr,
            end: m.key.addr.saturating_add(m.key.len),
            pgoff: m.key.pgoff,
            name: m.key.filename.as_slice().into(),
            dso: match m.key.filename.starts_with(KERNEL_DSO) {
                true => KERNEL_DSO.to_vec(),
                false => m.key.filename.clone(),
            },
            build_id: m.build_id,
        })
        .collect();
    Ok((processes_from_records(&reader.comms, &reader.maps), kernel))
}

/// A map of the host kernel or a module: pid -1, cpumode kernel.
pub fn is_kernel_map(m: &MapRecord) -> bool {
    m.key.pid == u32::MAX && m.misc & misc::CPUMODE_MASK == misc::KERNEL
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
            name: m.key.filename.as_slice().into(),
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
                ino_generation: 0,
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
