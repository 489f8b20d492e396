//! The records a merge inserts, held as what they are made of (a snapshot
//! file's processes, kernel maps and BPF records as runs of repeats, see
//! [`crate::snapshot::read`]) and encoded as they are written: each run's
//! record is encoded once and written as often as it repeats, so a
//! snapshot of a few records repeated costs its distinct content, not the
//! ~180 MiB of records it expands to.

use std::io::{self, Write};

use super::error::MergeError;
use super::windows::Windows;
use super::write;
use crate::model::{Part, Process};
use crate::perf::record::split_records;
use crate::perf::{BuildIdEntry, RecordTooLarge};
use crate::snapshot::{
    build_id_entries_of, encode_kernel, encode_part, encode_process, kernel_table_entries,
    BpfRecord, Encoding, HeldProcess, KernelMaps, Runs,
};

/// The processes a merge inserts: read from the live system, or held as
/// read from a snapshot file, or read again from it window by window.
pub enum Processes<'a> {
    Live(Vec<Process>),
    Held(Vec<HeldProcess>),
    Windows(Windows<'a>),
}

impl Processes<'_> {
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Processes::Live(p) => p.len(),
            Processes::Held(p) => p.len(),
            Processes::Windows(w) => w.processes,
        }
    }

    /// Their maps, repeats counted.
    pub fn maps(&self) -> usize {
        match self {
            Processes::Live(p) => p.iter().map(|p| p.vmas.len()).sum(),
            Processes::Held(p) => p.iter().map(HeldProcess::map_count).sum(),
            Processes::Windows(w) => w.maps,
        }
    }

    /// The BUILD_ID table entries of their maps.
    fn build_id_entries(&self) -> Vec<BuildIdEntry> {
        match self {
            Processes::Live(p) => build_id_entries_of(p.iter().map(|p| &p.vmas)),
            Processes::Held(p) => build_id_entries_of(p.iter().map(|h| h.runs().map(|(v, _)| v))),
            Processes::Windows(w) => w.build_ids.clone(),
        }
    }
}

/// What a merge inserts, in perf's order: the kernel and module maps, the
/// BPF programs' records, then per process its COMMs and maps (as
/// [`crate::snapshot::encode`] orders them), each encoded with `enc`.
pub struct Records<'a> {
    pub kernel: KernelMaps,
    pub bpf: Runs<BpfRecord>,
    pub processes: Processes<'a>,
    enc: Encoding,
    /// Bytes and records, measured by encoding each run once.
    size: u64,
    records: u64,
}

impl<'a> Records<'a> {
    /// The records of these, measured (a record too large to encode is an
    /// error here, before anything is written).
    pub fn new(
        kernel: KernelMaps,
        bpf: Runs<BpfRecord>,
        processes: Processes<'a>,
        enc: Encoding,
    ) -> Result<Records<'a>, MergeError> {
        let mut r = Records {
            kernel,
            bpf,
            processes,
            enc,
            size: 0,
            records: 0,
        };
        let (mut size, mut records) = (0u64, 0u64);
        let e = enc.endian;
        r.each(&mut |bytes, n| {
            size += bytes.len() as u64 * u64::from(n);
            records += split_records(bytes, e).count() as u64 * u64::from(n);
        })?;
        (r.size, r.records) = (size, records);
        Ok(r)
    }

    /// Records inserted.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// BPF programs inserted: their BPF_EVENT PROG_LOAD records.
    pub fn bpf_programs(&self) -> usize {
        let loads = self.bpf.iter().filter(|(r, _)| r.is_prog_load());
        loads.map(|(_, n)| n as usize).sum()
    }

    /// The BUILD_ID table entries of the kernel maps, then the processes'.
    pub fn build_id_entries(&self) -> Vec<BuildIdEntry> {
        let mut all = kernel_table_entries(self.kernel.distinct());
        all.extend(self.processes.build_id_entries());
        all
    }

    /// Hands each run's bytes, in order, to `f` with how often they repeat.
    fn each(&self, f: &mut dyn FnMut(&[u8], u32)) -> Result<(), MergeError> {
        let enc = &self.enc;
        let mut buf = Vec::new();
        for (m, n) in self.kernel.iter() {
            encode_kernel(std::slice::from_ref(m), enc, &mut buf)?;
            emit(f, &mut buf, n as usize);
        }
        for (r, n) in self.bpf.iter() {
            r.encode(enc, &mut buf)?;
            emit(f, &mut buf, n as usize);
        }
        match &self.processes {
            Processes::Live(procs) => {
                for p in procs {
                    encode_process(p, enc, &mut buf)?;
                    emit(f, &mut buf, 1);
                }
            }
            Processes::Held(procs) => each_held(procs, enc, f)?,
            Processes::Windows(w) => w.each(&mut |procs| Ok(each_held(procs, enc, f)?))?,
        }
        Ok(())
    }
}

/// [`Records::each`] of held processes.
fn each_held(
    procs: &[HeldProcess],
    enc: &Encoding,
    f: &mut dyn FnMut(&[u8], u32),
) -> Result<(), RecordTooLarge> {
    let mut buf = Vec::new();
    for h in procs {
        // the pieces of encode_part: the leader's COMM, each run's map,
        // the other threads' COMMs
        let threads = h.threads();
        let mut piece = Process::empty(h.pid);
        piece.threads = threads.iter().take(1).cloned().collect();
        let part = |first, last| Part { first, last };
        encode_part(&piece, part(true, false), enc, &mut buf)?;
        emit(f, &mut buf, 1);
        for (vma, n) in h.runs() {
            piece.vmas = vec![vma.clone()];
            encode_part(&piece, part(false, false), enc, &mut buf)?;
            emit(f, &mut buf, n);
        }
        piece.vmas.clear();
        piece.threads = threads;
        encode_part(&piece, part(false, true), enc, &mut buf)?;
        emit(f, &mut buf, 1);
    }
    Ok(())
}

/// Hands `buf` (if not empty) to `f` to be repeated `n` times, and empties
/// it.
fn emit(f: &mut dyn FnMut(&[u8], u32), buf: &mut Vec<u8>, mut n: usize) {
    while !buf.is_empty() && n > 0 {
        let k = n.min(u32::MAX as usize);
        f(buf, k as u32);
        n -= k;
    }
    buf.clear();
}

impl write::Inserted for Records<'_> {
    fn size(&self) -> u64 {
        self.size
    }

    fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut failed = None;
        self.each(&mut |bytes, n| {
            for _ in 0..n {
                if failed.is_some() {
                    return;
                }
                failed = out.write_all(bytes).err();
            }
        })
        .map_err(io::Error::other)?;
        failed.map_or(Ok(()), Err)
    }
}
