//! The loaded BPF programs as perf record synthesizes them at its start:
//! per program, one PERF_RECORD_KSYMBOL per JITed function, then one
//! PERF_RECORD_BPF_EVENT (PROG_LOAD, its id and tag); misc 0 and a zeroed
//! trailer (with the snapshot's event id), in program-id order, after the
//! kernel and module maps.

use super::encode::Encoding;
use crate::perf::bpf::{encode_bpf_event, encode_ksymbol, BpfEvent, Ksymbol};
use crate::perf::consts::bpf;
use crate::perf::{RecordTooLarge, SampleId};
use crate::proc::bpf_progs::BpfProgram;

/// Appends the records of `programs` to `out`.
pub fn encode_bpf_programs(
    programs: &[BpfProgram],
    enc: &Encoding,
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    // perf's synthesized records carry no pid: its trailer's TID is the
    // kernel's (-1) where the snapshot fills TIDs, as for the kernel maps
    let sid = SampleId {
        pid: if enc.fill_tid { u32::MAX } else { 0 },
        id: enc.id,
        ..Default::default()
    };
    for p in programs {
        for f in &p.funcs {
            let k = Ksymbol {
                addr: f.addr,
                len: f.len,
                ksym_type: bpf::KSYM_TYPE_BPF,
                flags: 0,
                name: &f.name,
            };
            encode_ksymbol(out, enc.endian, &k, &enc.layout, &sid)?;
        }
        let b = BpfEvent {
            event_type: bpf::EVENT_PROG_LOAD,
            flags: 0,
            id: p.id,
            tag: p.tag,
        };
        encode_bpf_event(out, enc.endian, &b, &enc.layout, &sid)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::Endian;
    use crate::perf::bpf::{parse_bpf_event, parse_ksymbol};
    use crate::perf::consts::types;
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
