//! PERF_RECORD_SAMPLE bodies, decoded as far as the callchain: every field
//! before it is stepped over by its size as `sample_type` and `read_format`
//! place it (perf's `evsel__parse_sample` order). Pure code over bytes.

use super::attr::Attr;
use super::consts::{context, read_format as rf, sample_type as st};
pub use super::error::SampleError;
use crate::bytes::{Endian, Rd};

/// The fields of a sample a profile needs. Absent fields are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sample<'a> {
    /// PERF_SAMPLE_IP.
    pub ip: Option<u64>,
    /// PERF_SAMPLE_TID: (pid, tid).
    pub pid_tid: Option<(u32, u32)>,
    /// PERF_SAMPLE_TIME.
    pub time: Option<u64>,
    /// PERF_SAMPLE_PERIOD.
    pub period: Option<u64>,
    /// PERF_SAMPLE_CALLCHAIN as stored: addresses and context markers.
    pub callchain: Option<Callchain<'a>>,
}

/// The callchain's entries, read in place from the sample's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Callchain<'a> {
    bytes: &'a [u8],
    e: Endian,
}

impl<'a> Callchain<'a> {
    /// The entries in order: addresses and context markers.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let r = Rd(self.e);
        self.bytes
            .chunks_exact(8)
            .map(move |c| r.u64(c, 0).unwrap_or_default())
    }

    /// The entries as stored (8 bytes each, in the recording's order).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The first user-space frame: the entry right after the first
    /// PERF_CONTEXT_USER marker, when it is an address (the user-mode ip
    /// of a sample taken in the kernel). Reads no further than that entry;
    /// the marker is looked for by its bytes (a compare an entry).
    pub fn first_user(&self) -> Option<u64> {
        let marker = self.e.u64_bytes(context::USER);
        let mut entries = self.bytes.chunks_exact(8);
        entries.position(|c| c == marker)?;
        let frame = Rd(self.e).u64(entries.next()?, 0)?;
        (frame < context::MAX).then_some(frame)
    }
}

/// Decodes `body` (after the record header) of a sample of `attr`.
#[inline(always)]
pub fn parse_sample<'a>(body: &'a [u8], attr: &Attr, e: Endian) -> Result<Sample<'a>, SampleError> {
    let r = Rd(e);
    let t = attr.sample_type;
    let mut at = 0usize;
    let mut s = Sample::default();
    let u64_at = |at: &mut usize, what| {
        let v = r.u64(body, *at).ok_or(SampleError::Truncated(what))?;
        *at += 8;
        Ok::<u64, SampleError>(v)
    };
    if t & st::IDENTIFIER != 0 {
        u64_at(&mut at, "identifier")?;
    }
    if t & st::IP != 0 {
        s.ip = Some(u64_at(&mut at, "ip")?);
    }
    if t & st::TID != 0 {
        let pid = r.u32(body, at).ok_or(SampleError::Truncated("pid"))?;
        let tid = r.u32(body, at + 4).ok_or(SampleError::Truncated("tid"))?;
        s.pid_tid = Some((pid, tid));
        at += 8;
    }
    if t & st::TIME != 0 {
        s.time = Some(u64_at(&mut at, "time")?);
    }
    for (bit, what) in [
        (st::ADDR, "addr"),
        (st::ID, "id"),
        (st::STREAM_ID, "stream id"),
    ] {
        if t & bit != 0 {
            u64_at(&mut at, what)?;
        }
    }
    if t & st::CPU != 0 {
        u64_at(&mut at, "cpu")?;
    }
    if t & st::PERIOD != 0 {
        s.period = Some(u64_at(&mut at, "period")?);
    }
    debug_assert_eq!(at, fixed_len(t));
    s.callchain = callchain_at(body, at, attr, e)?;
    Ok(s)
}

/// The fields before READ, one 8-byte word each (TID: pid and tid): their
/// order in a body is `parse_sample`'s, their length this mask's bits.
const FIXED: u64 = st::IDENTIFIER
    | st::IP
    | st::TID
    | st::TIME
    | st::ADDR
    | st::ID
    | st::STREAM_ID
    | st::CPU
    | st::PERIOD;

/// Bytes of the fields before READ in a body of `sample_type`.
#[inline]
fn fixed_len(sample_type: u64) -> usize {
    8 * (sample_type & FIXED).count_ones() as usize
}

/// The callchain of `body` (after the record header) of a sample of `attr`,
/// without decoding the fields before it: `None` when `attr` samples none.
/// An error when the body is too short for the fields before it or for the
/// count it claims.
#[inline]
pub fn callchain<'a>(
    body: &'a [u8],
    attr: &Attr,
    e: Endian,
) -> Result<Option<Callchain<'a>>, SampleError> {
    let at = fixed_len(attr.sample_type);
    if at > body.len() {
        return Err(SampleError::Truncated("fields before the callchain"));
    }
    callchain_at(body, at, attr, e)
}

/// The READ values (stepped over) and the callchain of `body`, from `at`
/// (the end of the fields before READ).
#[inline]
fn callchain_at<'a>(
    body: &'a [u8],
    mut at: usize,
    attr: &Attr,
    e: Endian,
) -> Result<Option<Callchain<'a>>, SampleError> {
    let t = attr.sample_type;
    if t & st::READ != 0 {
        at += read_len(body, at, attr.read_format, e)?;
    }
    if t & st::CALLCHAIN == 0 {
        return Ok(None);
    }
    let nr = Rd(e)
        .u64(body, at)
        .ok_or(SampleError::Truncated("callchain nr"))?;
    at += 8;
    let room = (body.len().saturating_sub(at) / 8) as u64;
    if nr > room {
        return Err(SampleError::Implausible("callchain nr", nr));
    }
    Ok(Some(Callchain {
        bytes: &body[at..at + 8 * nr as usize],
        e,
    }))
}

/// Bytes of the READ values at `at`, per `read_format`.
fn read_len(body: &[u8], at: usize, format: u64, e: Endian) -> Result<usize, SampleError> {
    let times = [rf::TOTAL_TIME_ENABLED, rf::TOTAL_TIME_RUNNING]
        .iter()
        .filter(|&&b| format & b != 0)
        .count();
    let per_value = 1 + [rf::ID, rf::LOST]
        .iter()
        .filter(|&&b| format & b != 0)
        .count();
    let words = if format & rf::GROUP != 0 {
        let nr = Rd(e)
            .u64(body, at)
            .ok_or(SampleError::Truncated("read group nr"))?;
        let room = (body.len().saturating_sub(at) / 8) as u64;
        if nr > room {
            return Err(SampleError::Implausible("read group nr", nr));
        }
        1 + times + nr as usize * per_value
    } else {
        times + per_value
    };
    let len = words * 8;
    if at + len > body.len() {
        return Err(SampleError::Truncated("read values"));
    }
    Ok(len)
}

/// Whose frames a callchain entry belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameMode {
    /// The host kernel (and hypervisor).
    Kernel,
    /// The sampled process.
    User,
    /// A guest's kernel or user space (not attributed here).
    Guest,
}

/// The callchain's addresses into `out` (cleared first), leaf first, each
/// with whose it is; the context markers say so and are dropped. `first`
/// is the mode of frames before any marker (the sample's cpumode).
pub fn frames_into(
    chain: impl Iterator<Item = u64>,
    first: FrameMode,
    out: &mut Vec<(FrameMode, u64)>,
) {
    out.clear();
    let mut mode = first;
    for a in chain {
        if a >= context::MAX {
            mode = match a {
                context::KERNEL | context::HV => FrameMode::Kernel,
                context::USER => FrameMode::User,
                _ => FrameMode::Guest,
            };
            continue;
        }
        out.push((mode, a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;

    fn attr(sample_type: u64, read_format: u64) -> Attr {
        Attr {
            sample_type,
            read_format,
            ..Default::default()
        }
    }

    // Every field before the callchain is stepped over by its size, in both
    // byte orders, READ groups included; the callchain is read whole.
    #[test]
    fn fields_in_perf_order() {
        for e in [Endian::Little, Endian::Big] {
            let t = st::IDENTIFIER
                | st::IP
                | st::TID
                | st::TIME
                | st::ADDR
                | st::ID
                | st::CPU
                | st::PERIOD
                | st::READ
                | st::CALLCHAIN;
            let mut b = Vec::new();
            b.put_u64(e, 99); // identifier
            b.put_u64(e, 0x1000); // ip
            b.put_u32(e, 7);
            b.put_u32(e, 8);
            b.put_u64(e, 123); // time
            b.put_u64(e, 0xdead); // addr
            b.put_u64(e, 99); // id
            b.put_u64(e, 3); // cpu, res
            b.put_u64(e, 4000); // period
            b.put_u64(e, 2); // group nr
            b.put_u64(e, 5); // time enabled
            for v in [1u64, 11, 2, 22] {
                b.put_u64(e, v); // value, id per member
            }
            b.put_u64(e, 3); // callchain nr
            for a in [context::USER, 0x1000, 0x2000] {
                b.put_u64(e, a);
            }
            let a = attr(t, rf::GROUP | rf::ID | rf::TOTAL_TIME_ENABLED);
            let s = parse_sample(&b, &a, e).unwrap();
            assert_eq!(s.ip, Some(0x1000));
            assert_eq!(s.pid_tid, Some((7, 8)));
            assert_eq!(s.time, Some(123));
            assert_eq!(s.period, Some(4000));
            assert_eq!(callchain(&b, &a, e), Ok(s.callchain));
            let chain: Vec<u64> = s.callchain.unwrap().iter().collect();
            assert_eq!(chain, vec![context::USER, 0x1000, 0x2000]);
        }
    }

    // Counts that claim more than the record holds are errors, never
    // allocations; a short body is an error naming the field.
    #[test]
    fn hostile_counts() {
        let e = Endian::Little;
        let mut b = Vec::new();
        b.put_u64(e, u64::MAX);
        let chain = attr(st::CALLCHAIN, 0);
        assert_eq!(
            parse_sample(&b, &chain, e),
            Err(SampleError::Implausible("callchain nr", u64::MAX))
        );
        let read = attr(st::READ, rf::GROUP);
        assert!(matches!(
            parse_sample(&b, &read, e),
            Err(SampleError::Implausible(..))
        ));
        assert_eq!(
            parse_sample(&[0; 4], &attr(st::IP, 0), e),
            Err(SampleError::Truncated("ip"))
        );
        assert_eq!(
            parse_sample(&[0; 8], &attr(st::READ, rf::ID), e),
            Err(SampleError::Truncated("read values"))
        );
    }

    // The callchain alone is found past the fields before it, READ values
    // included, as parse_sample finds it; a body too short for those, or
    // a count past its end, is an error; the first user frame is the entry
    // after the USER marker, when that is an address.
    #[test]
    fn the_callchain_alone_and_its_first_user_frame() {
        let e = Endian::Big;
        let a = attr(st::IP | st::TID | st::READ | st::CALLCHAIN, rf::ID);
        let mut b = Vec::new();
        b.put_u64(e, 0xffff_1000); // ip
        b.put_u64(e, 7); // pid, tid
        b.put_u64(e, 1); // value
        b.put_u64(e, 9); // id
        b.put_u64(e, 4); // nr
        for v in [context::KERNEL, 0xffff_1000, context::USER, 0x5000] {
            b.put_u64(e, v);
        }
        let chain = callchain(&b, &a, e).unwrap().unwrap();
        assert_eq!(Some(chain), parse_sample(&b, &a, e).unwrap().callchain);
        assert_eq!(chain.first_user(), Some(0x5000));
        assert_eq!(callchain(&b, &attr(st::IP, 0), e), Ok(None));
        assert!(callchain(&b[..8], &a, e).is_err());
        assert!(callchain(&b[..b.len() - 8], &a, e).is_err());
        let first_user = |chain: &[u64]| {
            let mut b = Vec::new();
            b.put_u64(e, chain.len() as u64);
            chain.iter().for_each(|&v| b.put_u64(e, v));
            let a = attr(st::CALLCHAIN, 0);
            callchain(&b, &a, e).unwrap().unwrap().first_user()
        };
        assert_eq!(first_user(&[context::KERNEL, 1, 2]), None);
        assert_eq!(first_user(&[context::KERNEL, 1, context::USER]), None);
        assert_eq!(first_user(&[context::USER, context::GUEST, 3]), None);
        assert_eq!(first_user(&[3, context::USER, 4, 5]), Some(4));
    }

    // Markers switch the mode of the frames after them and are dropped.
    #[test]
    fn frames_follow_markers() {
        let frames = |chain: &[u64], first| {
            let mut out = Vec::new();
            frames_into(chain.iter().copied(), first, &mut out);
            out
        };
        let chain = [context::KERNEL, 1, 2, context::USER, 3, context::GUEST, 4];
        assert_eq!(
            frames(&chain, FrameMode::User),
            vec![
                (FrameMode::Kernel, 1),
                (FrameMode::Kernel, 2),
                (FrameMode::User, 3),
                (FrameMode::Guest, 4)
            ]
        );
        assert_eq!(
            frames(&[5], FrameMode::Kernel),
            vec![(FrameMode::Kernel, 5)]
        );
    }
}
