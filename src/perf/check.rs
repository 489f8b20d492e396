//! What the walk requires of every record before a visitor sees it: the
//! records some reader decodes must decode, wherever they are (file or
//! pipe mode, inside COMPRESSED records or not). One reader refusing a
//! record that another copies made `convert` write outputs its own `dump`
//! (and `merge`, `pprof`, perf) refused: a FORK of 8 bytes, a HEADER_ATTR
//! in a file's data section copied into a stream where it is an attr.

use super::attr::pipe_attr;
use super::bpf::{parse_bpf_event, parse_ksymbol};
use super::consts::{feature, types};
use super::error::{FormatError, FormatErrorKind as K};
use super::events::{parse_comm, parse_fork, parse_map};
use super::features::parse_build_id_table;
use super::record::RecordHeader;
use crate::bytes::{Endian, Rd};

/// [`check_record`] where it can find anything: a SAMPLE (nearly every
/// record of a dense recording) passes without a call.
#[inline(always)]
pub(crate) fn check(at: u64, h: &RecordHeader, body: &[u8], e: Endian) -> Result<(), FormatError> {
    match h.type_ {
        types::SAMPLE => Ok(()),
        _ => check_record(at, h, body, e),
    }
}

/// Checks the record at `at` (for one inside a COMPRESSED record, the
/// compressed record's offset) whose `body` follows its header: MMAP,
/// MMAP2, COMM, FORK, EXIT, KSYMBOL and BPF_EVENT must hold their fixed
/// fields (as `dump` decodes them), HEADER_ATTR an attr whose size fits
/// the record (as a stream's reader takes it), HEADER_BUILD_ID and a
/// HEADER_FEATURE of BUILD_ID a whole table. Any other record is not
/// looked at.
#[inline(never)]
pub(crate) fn check_record(
    at: u64,
    h: &RecordHeader,
    body: &[u8],
    e: Endian,
) -> Result<(), FormatError> {
    let decodes = match h.type_ {
        types::MMAP | types::MMAP2 => parse_map(h, body, e).is_some(),
        types::COMM => parse_comm(body, e).is_some(),
        types::FORK | types::EXIT => parse_fork(body, e).is_some(),
        types::KSYMBOL => parse_ksymbol(body, e).is_some(),
        types::BPF_EVENT => parse_bpf_event(body, e).is_some(),
        types::HEADER_ATTR => return pipe_attr(at, body, e).map(drop),
        types::HEADER_BUILD_ID => {
            let mut full = Vec::with_capacity(body.len() + 8);
            h.put(&mut full, e);
            full.extend_from_slice(body);
            return parse_build_id_table(&full, e, at).map(drop);
        }
        types::HEADER_FEATURE => return build_id_feature(at, body, e),
        _ => true,
    };
    match decodes {
        true => Ok(()),
        false => Err(FormatError::at(at, K::MalformedRecord(h.type_))),
    }
}

/// Checks a HEADER_FEATURE record at `at` (`body` after its header) that
/// holds a BUILD_ID table, as a file's BUILD_ID section is checked: every
/// reader of the stream (a convert writing it out as it is, the build-id
/// lookups) takes it whole or refuses it. An error names the record, and
/// where in it.
fn build_id_feature(at: u64, body: &[u8], e: Endian) -> Result<(), FormatError> {
    if Rd(e).u64(body, 0) != Some(u64::from(feature::BUILD_ID)) {
        return Ok(());
    }
    // the record's 8-byte header, then the feature's u64 id, then the table
    let start = at + 16;
    parse_build_id_table(&body[8..], e, start).map_err(|err| {
        let kind = K::BadFeatureRecord {
            feature: "BUILD_ID",
            at: err.offset,
            payload: start,
            what: Box::new(err.kind),
        };
        FormatError::at(at, kind)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(type_: u32, body: &[u8]) -> RecordHeader {
        RecordHeader {
            type_,
            misc: 0,
            size: 8 + body.len() as u16,
        }
    }

    // Records of the kinds readers decode are refused at their offset when their fixed fields do not fit; others pass unread.
    #[test]
    fn records_that_do_not_decode_are_refused() {
        let e = Endian::Little;
        for t in [
            types::MMAP,
            types::MMAP2,
            types::COMM,
            types::FORK,
            types::EXIT,
            types::KSYMBOL,
            types::BPF_EVENT,
        ] {
            let err = check_record(40, &header(t, &[]), &[], e).unwrap_err();
            assert_eq!(err.offset, 40);
            assert!(
                matches!(err.kind, K::MalformedRecord(x) if x == t),
                "{t}: {err}"
            );
        }
        for t in [types::SAMPLE, types::FINISHED_ROUND, 12345] {
            check_record(40, &header(t, &[]), &[], e).unwrap();
        }
        // a FORK's 24 bytes (pid, ppid, tid, ptid, time) decode
        check_record(40, &header(types::FORK, &[0; 24]), &[0; 24], e).unwrap();
    }

    // A HEADER_ATTR whose attr.size is 0 or past the record (what a stream's reader refuses) is refused in any mode; a whole one passes.
    #[test]
    fn header_attr_must_hold_its_attr() {
        let e = Endian::Little;
        let mut body = crate::perf::Attr::default().encode(e);
        body.extend_from_slice(&7u64.to_le_bytes());
        check_record(0, &header(types::HEADER_ATTR, &body), &body, e).unwrap();
        for size in [0u32, 8, body.len() as u32 + 8] {
            body[4..8].copy_from_slice(&size.to_le_bytes());
            let err = check_record(96, &header(types::HEADER_ATTR, &body), &body, e).unwrap_err();
            assert_eq!(err.offset, 96);
            assert!(matches!(err.kind, K::BadAttrSize(_)), "{size}: {err}");
        }
        // cut inside the attr's fixed fields
        let short = &body[..16];
        check_record(0, &header(types::HEADER_ATTR, short), short, e).unwrap_err();
    }

    // A HEADER_BUILD_ID too short for an entry's fixed fields is refused; one holding them passes.
    #[test]
    fn header_build_id_must_hold_its_entry() {
        let e = Endian::Little;
        // pid and the 24-byte id field, then a name ("a", padded)
        let whole = [&[0u8; 4 + 24][..], b"a\0\0\0\0\0\0\0"].concat();
        check_record(0, &header(types::HEADER_BUILD_ID, &whole), &whole, e).unwrap();
        for body in [&whole[..20], &[][..]] {
            let h = header(types::HEADER_BUILD_ID, body);
            check_record(0, &h, body, e).unwrap_err();
        }
    }
}
