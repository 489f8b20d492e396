//! Which feature payloads perf 6.1 reads, for both of its readers: each
//! known layout is walked as the feature's `process_*` function reads it.
//!
//! The pipe-mode reader hands a HEADER_FEATURE's payload to `process_*`
//! and aborts the whole stream when that fails. The file-mode reader
//! (`perf_header__process_sections`) calls the same functions on each
//! section in bit order and ignores a failure, but stops there: no later
//! section is read (a `-z` recording whose COMPRESSED section goes unread
//! has no sample perf can decompress). It also reads a section from its
//! offset without bounding the reads by its size: a payload that does not
//! parse within its bytes is read on into whatever follows, with results
//! from garbage to heap corruption (CMDLINE sizes its buffer by the
//! section's size, PMU_MAPPINGS keeps a count without its table, an
//! EVENT_DESC count of 2^32-1 allocates nothing). So an output keeps a
//! section that parses within its bytes, which both readers read alike,
//! and leaves out one that does not.

use super::consts::feature;
use super::features::parse_string_feature;
use super::record::split_records;
use crate::bytes::{Endian, Rd};

/// What perf knows when it reads a feature, from what it read before it
/// (both readers go in bit order): CPU_TOPOLOGY reads one entry per CPU
/// of NRCPUS and checks socket ids unless ARCH is s390/aarch64;
/// GROUP_DESC is matched against the events (attrs).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadState<'a> {
    /// NRCPUS's first u32 (perf's `nr_cpus_avail`), 0 without it.
    pub nr_cpus_avail: u32,
    /// The ARCH string, empty without it.
    pub arch: &'a [u8],
    /// How many events the recording declares.
    pub events: usize,
}

impl<'a> ReadState<'a> {
    /// Takes in feature `bit` with `payload`, as perf does once it read it.
    pub fn note(&mut self, bit: u32, payload: &'a [u8], e: Endian) {
        match bit {
            feature::NRCPUS => self.nr_cpus_avail = Rd(e).u32(payload, 0).unwrap_or(0),
            feature::ARCH => self.arch = parse_string_feature(payload, e).unwrap_or_default(),
            _ => {}
        }
    }
}

/// The features of `features` (bit and payload, ascending) perf 6.1 could
/// not read, with why: read in bit order, as perf reads them, each seeing
/// what was kept before it; `events` is how many events the recording
/// declares. The caller leaves them out (see the module doc).
pub fn unreadable_features<'a>(
    e: Endian,
    events: usize,
    features: impl IntoIterator<Item = (u32, &'a [u8])>,
) -> Vec<(u32, Bad)> {
    let mut st = ReadState {
        events,
        ..ReadState::default()
    };
    let mut out = Vec::new();
    for (bit, payload) in features {
        match feature_problem(bit, payload, e, &st) {
            Some(why) => out.push((bit, why)),
            None => st.note(bit, payload, e),
        }
    }
    out
}

/// Whether [`feature_problem`] walks feature `bit` (the others pass
/// unread: TRACING_DATA, BUILD_ID, those perf has no `process_*` for and
/// those it does not know).
pub fn is_walked(bit: u32) -> bool {
    matches!(bit, 3..=14 | 16..=18 | 20..=31)
}

/// The most bytes a BUILD_ID entry may take for perf 6.1's file-mode
/// reader: it reads `size` minus the fixed part (36 bytes, or 32 in the
/// old layout it takes for a table whose first name reads `nel.kallsyms]`)
/// into a PATH_MAX (4096) buffer on its stack, unchecked. A longer entry
/// smashes the stack (a stream's HEADER_BUILD_ID record is read in place).
pub const MAX_FILE_BUILD_ID_ENTRY: usize = 32 + 4096;

/// A file-mode BUILD_ID table (`table`) without the entries longer than
/// [`MAX_FILE_BUILD_ID_ENTRY`], and how many those were; None when every
/// entry fits. The others are kept byte for byte.
pub fn build_ids_perf_holds(table: &[u8], e: Endian) -> Option<(Vec<u8>, usize)> {
    let long = |size: u16| usize::from(size) > MAX_FILE_BUILD_ID_ENTRY;
    let n = split_records(table, e)
        .filter(|(h, _)| long(h.size))
        .count();
    if n == 0 {
        return None;
    }
    let mut kept = Vec::with_capacity(table.len());
    for (h, body) in split_records(table, e).filter(|(h, _)| !long(h.size)) {
        h.put(&mut kept, e);
        kept.extend_from_slice(body);
    }
    Some((kept, n))
}

/// A cursor over a feature payload reading it the way perf's `do_read_*`
/// do: each read fails when it would run past the payload.
struct Cur<'a> {
    b: &'a [u8],
    at: usize,
    e: Endian,
}

/// Why a payload would not parse.
pub type Bad = &'static str;

impl<'a> Cur<'a> {
    fn u32(&mut self) -> Result<u32, Bad> {
        let v = Rd(self.e)
            .u32(self.b, self.at)
            .ok_or("a u32 runs past its end")?;
        self.at += 4;
        Ok(v)
    }
    fn u64(&mut self) -> Result<u64, Bad> {
        let v = Rd(self.e)
            .u64(self.b, self.at)
            .ok_or("a u64 runs past its end")?;
        self.at += 8;
        Ok(v)
    }
    fn bytes(&mut self, n: u64) -> Result<&'a [u8], Bad> {
        let n = usize::try_from(n).map_err(|_| "a length runs past its end")?;
        let end = self.at.checked_add(n).filter(|&end| end <= self.b.len());
        let v = &self.b[self.at..end.ok_or("a length runs past its end")?];
        self.at += n;
        Ok(v)
    }
    /// A string: u32 length, then that many bytes with a NUL among them
    /// (perf runs `strlen` over what it read).
    fn string(&mut self) -> Result<&'a [u8], Bad> {
        let len = self.u32()?;
        let s = self.bytes(u64::from(len))?;
        match s.iter().position(|&c| c == 0) {
            Some(n) => Ok(&s[..n]),
            None => Err("a string has no NUL within its length"),
        }
    }
    /// `n` strings; the length perf counts for each (`string_size`).
    fn strings(&mut self, n: u32) -> Result<u64, Bad> {
        let mut size = 0u64;
        for _ in 0..n {
            let s = self.string()?;
            size += ((s.len() as u64 + 1).div_ceil(64) * 64) + 4;
        }
        Ok(size)
    }
    fn left(&self) -> usize {
        self.b.len() - self.at
    }
    /// A count of items of at least `min` bytes each, bounded by the bytes left.
    fn count(&mut self, min: usize) -> Result<u32, Bad> {
        let n = self.u32()?;
        if n as usize > self.left() / min {
            return Err("a count runs past its end");
        }
        Ok(n)
    }
}

/// Why perf 6.1 could not read feature `bit` carrying `payload` (its
/// `process_*` function fails, or reads past the payload), None when it
/// reads it. Each known layout is walked as perf reads it; a bit perf has
/// no `process_*` for (BRANCH_STACK, STAT) or does not know passes, and
/// so do TRACING_DATA and BUILD_ID (see [`build_ids_perf_holds`]).
/// DIR_FORMAT always fails: perf requires a directory recording, which no
/// stream or single file is.
pub fn feature_problem(bit: u32, payload: &[u8], e: Endian, st: &ReadState) -> Option<Bad> {
    let mut c = Cur {
        b: payload,
        at: 0,
        e,
    };
    let foreign = e != Endian::NATIVE;
    let res = match bit {
        // HOSTNAME..ARCH, CPUDESC, CPUID
        3..=6 | 8 | 9 => c.string().map(drop),
        feature::NRCPUS => c.u64().map(drop),
        10 | 21 | 23 => c.bytes(if bit == 21 { 16 } else { 8 }).map(drop),
        feature::CMDLINE => c.count(5).and_then(|n| c.strings(n)).map(drop),
        feature::EVENT_DESC => check_event_desc(&mut c),
        13 => check_cpu_topology(&mut c, st),
        14 => check_numa(&mut c),
        // PMU_MAPPINGS: u32 type and name each
        16 => c
            .count(9)
            .and_then(|n| (0..n).try_for_each(|_| c.u32().and(c.string()).map(drop))),
        17 => check_group_desc(&mut c, st.events),
        20 => check_cache(&mut c),
        22 => check_mem_topology(&mut c),
        // AUXTRACE (file mode only): u64 count, {u64 offset, u64 size} each
        18 => c.u64().and_then(|n| match n > (c.left() / 16) as u64 {
            true => Err("its entry count runs past its end"),
            false => Ok(()),
        }),
        24 => Err("only a directory recording carries DIR_FORMAT"),
        // BPF_PROG_INFO, BPF_BTF: not read in a foreign byte order
        25 | 26 if foreign => Ok(()),
        25 => check_bpf_prog_info(&mut c),
        26 => c.count(8).and_then(|n| {
            (0..n).try_for_each(|_| {
                let len = c.u32().and(c.u32())?;
                c.bytes(u64::from(len)).map(drop)
            })
        }),
        feature::COMPRESSED => c.bytes(20).map(drop),
        // CPU_PMU_CAPS: name=value pairs; HYBRID_TOPOLOGY: name and cpus
        28 | 30 => c
            .count(10)
            .and_then(|n| c.strings(n.saturating_mul(2)))
            .map(drop),
        // PMU_CAPS: per PMU its caps (count, pairs) and its name
        31 => c.count(9).and_then(|n| {
            (0..n).try_for_each(|_| {
                let caps = c.count(10)?;
                c.strings(caps.saturating_mul(2))?;
                c.string().map(drop)
            })
        }),
        29 => match c.u32() {
            Ok(1) => c.bytes(20).map(drop),
            Ok(_) => Err("its version is not 1"),
            Err(err) => Err(err),
        },
        _ => Ok(()),
    };
    res.err()
}

/// EVENT_DESC: u32 nr, u32 attr_sz, then per event the attr, u32 nr_ids,
/// the name and the ids.
fn check_event_desc(c: &mut Cur) -> Result<(), Bad> {
    let nr = c.u32()?;
    let sz = c.u32()?;
    if nr as usize > c.left() / (sz as usize).saturating_add(9) {
        return Err("its event count runs past its end");
    }
    for _ in 0..nr {
        c.bytes(u64::from(sz))?;
        let ids = c.u32()?;
        c.string()?;
        c.bytes(u64::from(ids) * 8)?;
    }
    Ok(())
}

/// CPU_TOPOLOGY: core and thread sibling lists; then, if perf's count of
/// what it read is below the size, {core, socket} per CPU; then, likewise,
/// the die list and a die id per CPU.
fn check_cpu_topology(c: &mut Cur, st: &ReadState) -> Result<(), Bad> {
    let cpus = st.nr_cpus_avail;
    let mut size = 4;
    let n = c.count(5)?;
    size += c.strings(n)? + 4;
    let n = c.count(5)?;
    size += c.strings(n)?;
    if c.b.len() as u64 <= size {
        return Ok(());
    }
    if cpus as usize > c.left() / 8 {
        return Err("NRCPUS counts more CPUs than it describes");
    }
    let test = !(st.arch.starts_with(b"s390") || st.arch.starts_with(b"aarch64"));
    for _ in 0..cpus {
        c.u32()?;
        let socket = c.u32()?;
        if test && socket != u32::MAX && socket > cpus {
            return Err("a socket id is above the CPU count");
        }
        size += 8;
    }
    if c.b.len() as u64 <= size {
        return Ok(());
    }
    let n = c.count(5)?;
    c.strings(n)?;
    c.bytes(u64::from(cpus) * 4).map(drop)
}

/// NUMA_TOPOLOGY: per node u32 node, u64 total, u64 free, a CPU list perf
/// parses (`perf_cpu_map__new`).
fn check_numa(c: &mut Cur) -> Result<(), Bad> {
    let n = c.count(25)?;
    for _ in 0..n {
        c.bytes(20)?;
        if !cpu_list_parses(c.string()?) {
            return Err("a node's CPU list does not parse");
        }
    }
    Ok(())
}

/// A CPU list perf reads: empty, or decimal `N` / `N-M` items joined by
/// commas, ascending-free but without a CPU twice, below 2^16 CPUs.
fn cpu_list_parses(s: &[u8]) -> bool {
    let mut seen: Vec<(u32, u32)> = Vec::new();
    let num = |t: &[u8]| -> Option<u32> {
        let ok =
            !t.is_empty() && t.iter().all(u8::is_ascii_digit) && (t.len() == 1 || t[0] != b'0');
        std::str::from_utf8(t)
            .ok()
            .filter(|_| ok)?
            .parse()
            .ok()
            .filter(|&v| v < 1 << 16)
    };
    s.is_empty()
        || s.split(|&b| b == b',').all(|item| {
            let mut ends = item.splitn(2, |&b| b == b'-');
            let lo = ends.next().and_then(num);
            let hi = ends.next().map_or(lo, num);
            match (lo, hi) {
                (Some(lo), Some(hi))
                    if lo <= hi && !seen.iter().any(|&(a, b)| lo <= b && a <= hi) =>
                {
                    seen.push((lo, hi));
                    true
                }
                _ => false,
            }
        })
}

/// GROUP_DESC: per group its name, leader index and member count, which
/// perf then matches against the events in order.
fn check_group_desc(c: &mut Cur, events: usize) -> Result<(), Bad> {
    let n = c.count(13)?;
    let mut groups = Vec::with_capacity(n as usize);
    for _ in 0..n {
        c.string()?;
        groups.push((c.u32()?, c.u32()?));
    }
    if n == 0 {
        return Ok(());
    }
    let (mut i, mut nr) = (0usize, 0u32);
    for idx in 0..events {
        match groups.get(i) {
            Some(&(leader, members)) if leader as usize == idx => {
                if nr > 0 {
                    return Err("its groups do not match the events");
                }
                nr = members.wrapping_sub(1);
                i += 1;
            }
            _ if nr > 0 => nr -= 1,
            _ => {}
        }
    }
    match i == groups.len() && nr == 0 {
        true => Ok(()),
        false => Err("its groups do not match the events"),
    }
}

/// CACHE: u32 version 1, u32 count, per level 4 u32 and 3 strings.
fn check_cache(c: &mut Cur) -> Result<(), Bad> {
    if c.u32()? != 1 {
        return Err("its version is not 1");
    }
    let n = c.count(31)?;
    (0..n).try_for_each(|_| c.bytes(16).and(c.strings(3)).map(drop))
}

/// MEM_TOPOLOGY: u64 version 1, u64 block size, u64 count, per node u64
/// node, u64 size and a bitmap (u64 bits, then the u64 words).
fn check_mem_topology(c: &mut Cur) -> Result<(), Bad> {
    if c.u64()? != 1 {
        return Err("its version is not 1");
    }
    c.u64()?;
    let n = c.u64()?;
    if n > (c.left() / 24) as u64 {
        return Err("its node count runs past its end");
    }
    for _ in 0..n {
        c.bytes(16)?;
        let bits = c.u64()?;
        c.bytes(bits.div_ceil(64).saturating_mul(8))?;
    }
    Ok(())
}

/// BPF_PROG_INFO: per program u32 info_len, u32 data_len, u64 arrays, the
/// info and the data.
fn check_bpf_prog_info(c: &mut Cur) -> Result<(), Bad> {
    let n = c.count(16)?;
    (0..n).try_for_each(|_| {
        let (info, data) = (c.u32()?, c.u32()?);
        c.u64()?;
        c.bytes(u64::from(info))
            .and(c.bytes(u64::from(data)))
            .map(drop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;
    use crate::perf::features::{cmdline_feature, encode_string, nrcpus_feature, string_feature};

    // The validator walks perf's layouts: our own encodings pass, an
    // empty or NUL-less string, a short fixed feature, a CPU list perf
    // refuses, groups that miss the events and an AUXTRACE count past its
    // end do not.
    #[test]
    fn feature_problems() {
        let e = Endian::Little;
        let st = ReadState {
            events: 2,
            ..ReadState::default()
        };
        let ok = |bit, p: &[u8]| feature_problem(bit, p, e, &st).is_none();
        let mut aux = Vec::new();
        aux.put_u64(e, 1);
        assert!(!ok(18, &aux));
        aux.extend_from_slice(&[0; 16]);
        assert!(ok(18, &aux));
        assert!(ok(feature::HOSTNAME, &string_feature(e, b"h")));
        assert!(ok(feature::CMDLINE, &cmdline_feature(e, &[b"a".to_vec()])));
        assert!(ok(feature::NRCPUS, &nrcpus_feature(e, 2, 2)));
        assert!(!ok(feature::HOSTNAME, &[]));
        assert!(!ok(feature::HOSTNAME, &[1, 0, 0, 0, b'x']));
        assert!(!ok(feature::NRCPUS, &[0; 4]));
        assert!(!ok(24, &[0; 8]));
        assert!(ok(15, &[]));
        assert!(cpu_list_parses(b"0-3,5") && cpu_list_parses(b""));
        assert!(!cpu_list_parses(b"0-3,2") && !cpu_list_parses(b"x") && !cpu_list_parses(b"3-1"));
        let group = |leader: u32, members: u32| {
            let mut g = Vec::new();
            g.put_u32(e, 1);
            encode_string(&mut g, e, b"g");
            g.put_u32(e, leader);
            g.put_u32(e, members);
            g
        };
        assert!(ok(17, &group(0, 2)));
        assert!(!ok(17, &group(0, 3)));
        assert!(!ok(17, &group(5, 1)));
    }

    // NRCPUS read before CPU_TOPOLOGY counts there: a topology naming
    // more CPUs than it describes fails only after an NRCPUS saying so.
    #[test]
    fn state_flows_in_bit_order() {
        use crate::perf::features::nrcpus_feature;
        let e = Endian::Little;
        let mut topo = Vec::new();
        for _ in 0..2 {
            topo.put_u32(e, 1);
            encode_string(&mut topo, e, b"0");
        }
        topo.extend_from_slice(&[0; 8]); // one CPU's core and socket
        let alone = [(13, &topo[..])];
        assert!(unreadable_features(e, 1, alone).is_empty());
        let nr = nrcpus_feature(e, 4, 4);
        let both = [(feature::NRCPUS, &nr[..]), (13, &topo[..])];
        assert_eq!(
            unreadable_features(e, 1, both),
            [(13, "NRCPUS counts more CPUs than it describes")]
        );
    }

    // A BUILD_ID entry longer than perf's file reader holds is left out,
    // the others kept byte for byte; a table whose entries fit is None.
    #[test]
    fn long_build_id_entries_are_left_out() {
        use crate::perf::record::RecordHeader;
        let e = Endian::Little;
        let entry = |size: u16, fill: u8| {
            let mut v = Vec::new();
            RecordHeader {
                type_: 0,
                misc: 1,
                size,
            }
            .put(&mut v, e);
            v.resize(usize::from(size), fill);
            v
        };
        let ok = [entry(64, 1), entry(MAX_FILE_BUILD_ID_ENTRY as u16, 2)].concat();
        assert!(build_ids_perf_holds(&ok, e).is_none());
        let table = [
            entry(64, 1),
            entry(MAX_FILE_BUILD_ID_ENTRY as u16 + 8, 3),
            entry(64, 4),
        ]
        .concat();
        let (kept, n) = build_ids_perf_holds(&table, e).unwrap();
        assert_eq!(n, 1);
        assert_eq!(kept, [entry(64, 1), entry(64, 4)].concat());
    }
}
