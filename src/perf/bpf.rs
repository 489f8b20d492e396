//! PERF_RECORD_KSYMBOL and PERF_RECORD_BPF_EVENT, the records perf record
//! synthesizes for every loaded BPF program (tools/perf/util/bpf-event.c):
//! one KSYMBOL per JITed function (where its code is, and its name), one
//! BPF_EVENT per program (its id and tag). Pure encoders and parsers over
//! byte slices, in either byte order.

use super::consts::{bpf, types};
use super::error::RecordTooLarge;
use super::record::{begin_record, finish_record, put_cstr, SampleId, SampleIdLayout};
use crate::bytes::{cstr, Endian, PutExt, Rd};

/// The fields of a PERF_RECORD_KSYMBOL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ksymbol<'a> {
    /// The symbol's start address.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u32,
    /// What it is (`bpf::KSYM_TYPE_BPF` for a BPF function).
    pub ksym_type: u16,
    /// `bpf::KSYM_FLAG_UNREGISTER` when it goes away, else 0.
    pub flags: u16,
    /// Its name, without a NUL.
    pub name: &'a [u8],
}

/// The fields of a PERF_RECORD_BPF_EVENT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BpfEvent {
    /// `bpf::EVENT_PROG_LOAD` or `EVENT_PROG_UNLOAD`.
    pub event_type: u16,
    /// 0 (no flags are defined).
    pub flags: u16,
    /// The program's id.
    pub id: u32,
    /// The program's tag.
    pub tag: [u8; bpf::TAG_SIZE],
}

/// Encodes a PERF_RECORD_KSYMBOL (misc 0, as perf and the kernel write it;
/// the name NUL-padded to 8) with its sample_id trailer.
pub fn encode_ksymbol(
    out: &mut Vec<u8>,
    e: Endian,
    k: &Ksymbol<'_>,
    layout: &SampleIdLayout,
    sid: &SampleId,
) -> Result<(), RecordTooLarge> {
    let at = begin_record(out, e, types::KSYMBOL, 0);
    out.put_u64(e, k.addr);
    out.put_u32(e, k.len);
    out.put_u16(e, k.ksym_type);
    out.put_u16(e, k.flags);
    put_cstr(out, k.name, 8);
    layout.write(out, e, sid);
    finish_record(out, e, at, types::KSYMBOL)
}

/// Encodes a PERF_RECORD_BPF_EVENT (misc 0) with its sample_id trailer.
pub fn encode_bpf_event(
    out: &mut Vec<u8>,
    e: Endian,
    b: &BpfEvent,
    layout: &SampleIdLayout,
    sid: &SampleId,
) -> Result<(), RecordTooLarge> {
    let at = begin_record(out, e, types::BPF_EVENT, 0);
    out.put_u16(e, b.event_type);
    out.put_u16(e, b.flags);
    out.put_u32(e, b.id);
    out.extend_from_slice(&b.tag);
    layout.write(out, e, sid);
    finish_record(out, e, at, types::BPF_EVENT)
}

/// Decodes a KSYMBOL record body (after the 8-byte header; the trailer, if
/// any, follows the name's padding and is ignored). None when the body is
/// shorter than the fixed fields.
pub fn parse_ksymbol(body: &[u8], e: Endian) -> Option<Ksymbol<'_>> {
    let r = Rd(e);
    Some(Ksymbol {
        addr: r.u64(body, 0)?,
        len: r.u32(body, 8)?,
        ksym_type: r.u16(body, 12)?,
        flags: r.u16(body, 14)?,
        name: cstr(body.get(16..)?),
    })
}

/// Decodes a BPF_EVENT record body (after the 8-byte header).
pub fn parse_bpf_event(body: &[u8], e: Endian) -> Option<BpfEvent> {
    let r = Rd(e);
    Some(BpfEvent {
        event_type: r.u16(body, 0)?,
        flags: r.u16(body, 2)?,
        id: r.u32(body, 4)?,
        tag: body.get(8..16)?.try_into().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::consts::sample_type as st;

    const TAG: [u8; 8] = [0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67];

    // A KSYMBOL encodes byte-exact in both byte orders, with and without a trailer, and parses back.
    #[test]
    fn ksymbol_bytes_both_orders() {
        let k = Ksymbol {
            addr: 0xffff_ffff_c000_1000,
            len: 0x40,
            ksym_type: bpf::KSYM_TYPE_BPF,
            flags: 0,
            name: b"bpf_prog_x",
        };
        let mut le = Vec::new();
        encode_ksymbol(
            &mut le,
            Endian::Little,
            &k,
            &SampleIdLayout::default(),
            &SampleId::default(),
        )
        .unwrap();
        let mut want: Vec<u8> = vec![17, 0, 0, 0, 0, 0, 40, 0];
        want.extend_from_slice(&[0x00, 0x10, 0x00, 0xc0, 0xff, 0xff, 0xff, 0xff]);
        want.extend_from_slice(&[0x40, 0, 0, 0, 1, 0, 0, 0]);
        want.extend_from_slice(b"bpf_prog_x\0\0\0\0\0\0");
        assert_eq!(le, want);
        assert_eq!(parse_ksymbol(&le[8..], Endian::Little), Some(k.clone()));

        let layout = SampleIdLayout {
            sample_type: st::TIME | st::IDENTIFIER,
            sample_id_all: true,
        };
        let sid = SampleId {
            id: 5,
            ..Default::default()
        };
        let mut be = Vec::new();
        encode_ksymbol(&mut be, Endian::Big, &k, &layout, &sid).unwrap();
        let mut want: Vec<u8> = vec![0, 0, 0, 17, 0, 0, 0, 56];
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xc0, 0x00, 0x10, 0x00]);
        want.extend_from_slice(&[0, 0, 0, 0x40, 0, 1, 0, 0]);
        want.extend_from_slice(b"bpf_prog_x\0\0\0\0\0\0");
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(be, want);
        assert_eq!(parse_ksymbol(&be[8..], Endian::Big), Some(k));
    }

    // A name of exactly 8 bytes gets a whole word of padding for its NUL.
    #[test]
    fn ksymbol_name_padding() {
        let k = Ksymbol {
            addr: 1,
            len: 2,
            ksym_type: bpf::KSYM_TYPE_BPF,
            flags: 0,
            name: b"12345678",
        };
        let mut out = Vec::new();
        let none = SampleIdLayout::default();
        encode_ksymbol(&mut out, Endian::Little, &k, &none, &SampleId::default()).unwrap();
        assert_eq!(out.len(), 8 + 16 + 16);
        assert_eq!(&out[24..], b"12345678\0\0\0\0\0\0\0\0");
        // a name past a record's 64 KiB is refused, the output left as it was
        let long = vec![b'a'; 70_000];
        let k = Ksymbol { name: &long, ..k };
        let before = out.clone();
        assert!(encode_ksymbol(&mut out, Endian::Little, &k, &none, &SampleId::default()).is_err());
        assert_eq!(out, before);
    }

    // A BPF_EVENT encodes byte-exact in both byte orders and parses back; short bodies do not parse.
    #[test]
    fn bpf_event_bytes_both_orders() {
        let b = BpfEvent {
            event_type: bpf::EVENT_PROG_LOAD,
            flags: 0,
            id: 0x0102_0304,
            tag: TAG,
        };
        let none = SampleIdLayout::default();
        let mut le = Vec::new();
        encode_bpf_event(&mut le, Endian::Little, &b, &none, &SampleId::default()).unwrap();
        let mut want: Vec<u8> = vec![18, 0, 0, 0, 0, 0, 24, 0, 1, 0, 0, 0, 4, 3, 2, 1];
        want.extend_from_slice(&TAG);
        assert_eq!(le, want);
        assert_eq!(parse_bpf_event(&le[8..], Endian::Little), Some(b));

        let layout = SampleIdLayout {
            sample_type: st::TID,
            sample_id_all: true,
        };
        let sid = SampleId {
            pid: u32::MAX,
            ..Default::default()
        };
        let mut be = Vec::new();
        encode_bpf_event(&mut be, Endian::Big, &b, &layout, &sid).unwrap();
        let mut want: Vec<u8> = vec![0, 0, 0, 18, 0, 0, 0, 32, 0, 1, 0, 0, 1, 2, 3, 4];
        want.extend_from_slice(&TAG);
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(be, want);
        assert_eq!(parse_bpf_event(&be[8..], Endian::Big), Some(b));
        assert_eq!(parse_bpf_event(&be[8..23], Endian::Big), None);
        assert_eq!(parse_ksymbol(&[0; 15], Endian::Big), None);
    }
}
