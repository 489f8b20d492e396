//! The loaded BPF programs as perf record synthesizes them at its start:
//! per program, one PERF_RECORD_KSYMBOL per JITed function, then one
//! PERF_RECORD_BPF_EVENT (PROG_LOAD, its id and tag); misc 0 and a zeroed
//! trailer (with the snapshot's event id), in program-id order, after the
//! kernel and module maps. A snapshot file's records read back
//! ([`BpfRecord`]) are written again the same way.

use super::encode::Encoding;
use crate::bytes::Endian;
use crate::perf::bpf::{
    encode_bpf_event, encode_ksymbol, parse_bpf_event, parse_ksymbol, BpfEvent, Ksymbol,
};
use crate::perf::consts::{bpf, types};
use crate::perf::{RecordTooLarge, SampleId};
use crate::proc::bpf_progs::BpfProgram;

/// The longest KSYMBOL name taken from a file (the kernel's KSYM_NAME_LEN).
const MAX_KSYM_NAME: usize = 512;

/// A KSYMBOL or BPF_EVENT record's fields, as read from a file or made for
/// a loaded program.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BpfRecord {
    /// A KSYMBOL: addr, len, ksym_type, flags and name (no NUL).
    Ksymbol(u64, u32, u16, u16, Vec<u8>),
    /// A BPF_EVENT.
    Event(BpfEvent),
}

impl BpfRecord {
    /// The record of a KSYMBOL or BPF_EVENT body (after the 8-byte
    /// header), None for another type, Err(()) for a malformed one.
    #[allow(clippy::result_unit_err)]
    pub fn parse(type_: u32, body: &[u8], e: Endian) -> Result<Option<BpfRecord>, ()> {
        Ok(Some(match type_ {
            types::KSYMBOL => {
                let k = parse_ksymbol(body, e).ok_or(())?;
                if k.name.len() > MAX_KSYM_NAME {
                    return Err(());
                }
                BpfRecord::Ksymbol(k.addr, k.len, k.ksym_type, k.flags, k.name.to_vec())
            }
            types::BPF_EVENT => BpfRecord::Event(parse_bpf_event(body, e).ok_or(())?),
            _ => return Ok(None),
        }))
    }

    /// True for a program's load (a BPF_EVENT PROG_LOAD).
    pub fn is_prog_load(&self) -> bool {
        matches!(self, BpfRecord::Event(b) if b.event_type == bpf::EVENT_PROG_LOAD)
    }

    /// Appends the record, with the trailer perf synthesizes, to `out`.
    pub fn encode(&self, enc: &Encoding, out: &mut Vec<u8>) -> Result<(), RecordTooLarge> {
        // perf's synthesized records carry no pid: its trailer's TID is the
        // kernel's (-1) where the snapshot fills TIDs, as for the kernel maps
        let sid = SampleId {
            pid: if enc.fill_tid { u32::MAX } else { 0 },
            id: enc.id,
            ..Default::default()
        };
        match self {
            BpfRecord::Ksymbol(addr, len, ksym_type, flags, name) => {
                let k = Ksymbol {
                    addr: *addr,
                    len: *len,
                    ksym_type: *ksym_type,
                    flags: *flags,
                    name,
                };
                encode_ksymbol(out, enc.endian, &k, &enc.layout, &sid)
            }
            BpfRecord::Event(b) => encode_bpf_event(out, enc.endian, b, &enc.layout, &sid),
        }
    }
}

/// A loaded program's records: a KSYMBOL per function, then its BPF_EVENT.
pub fn program_records(p: &BpfProgram) -> impl Iterator<Item = BpfRecord> + '_ {
    let funcs = p
        .funcs
        .iter()
        .map(|f| BpfRecord::Ksymbol(f.addr, f.len, bpf::KSYM_TYPE_BPF, 0, f.name.clone()));
    funcs.chain(std::iter::once(BpfRecord::Event(BpfEvent {
        event_type: bpf::EVENT_PROG_LOAD,
        flags: 0,
        id: p.id,
        tag: p.tag,
    })))
}

/// Appends the records of `programs` to `out`.
pub fn encode_bpf_programs(
    programs: &[BpfProgram],
    enc: &Encoding,
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    for r in programs.iter().flat_map(program_records) {
        r.encode(enc, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::bpf_progs::BpfFunc;

    // Each program gives its KSYMBOLs (one per function, in order) then its BPF_EVENT, each with the trailer.
    #[test]
    fn records_per_program_in_order() {
        let enc = crate::snapshot::snapshot_encoding(Endian::Little, true);
        let func = |addr, name: &str| BpfFunc {
            addr,
            len: 0x20,
            name: name.as_bytes().to_vec(),
        };
        let programs = vec![
            BpfProgram {
                id: 3,
                tag: [1; 8],
                funcs: vec![func(0x1000, "a"), func(0x2000, "b")],
            },
            BpfProgram {
                id: 9,
                tag: [2; 8],
                funcs: vec![func(0x3000, "c")],
            },
        ];
        let mut out = Vec::new();
        encode_bpf_programs(&programs, &enc, &mut out).unwrap();
        let mut seen = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let t = u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
            let misc = u16::from_le_bytes(out[at + 4..at + 6].try_into().unwrap());
            let size = u16::from_le_bytes(out[at + 6..at + 8].try_into().unwrap()) as usize;
            assert_eq!(misc, 0);
            let body = &out[at + 8..at + size];
            match t {
                types::KSYMBOL => {
                    let k = parse_ksymbol(body, Endian::Little).unwrap();
                    assert_eq!(size, 8 + 16 + 8 + enc.layout.len());
                    seen.push(format!(
                        "k {:x} {}",
                        k.addr,
                        String::from_utf8_lossy(k.name)
                    ));
                }
                types::BPF_EVENT => {
                    let b = parse_bpf_event(body, Endian::Little).unwrap();
                    assert_eq!(size, 8 + 16 + enc.layout.len());
                    seen.push(format!("b {} {:?}", b.id, b.tag));
                }
                _ => panic!("record type {t}"),
            }
            at += size;
        }
        assert_eq!(
            seen,
            [
                "k 1000 a",
                "k 2000 b",
                "b 3 [1, 1, 1, 1, 1, 1, 1, 1]",
                "k 3000 c",
                "b 9 [2, 2, 2, 2, 2, 2, 2, 2]"
            ]
        );
    }
}
