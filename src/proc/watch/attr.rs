//! The perf_event_attr of a watch event.

use crate::bytes::{Endian, PutExt};

/// perf_event_attr flag bits used here (kernel ABI; checked against
/// linux-perf-event-reader's by a test: `MMAP_DATA` was once bit 10, `freq`,
/// so `-d` watched no data maps).
mod bits {
    pub const INHERIT: u64 = 1 << 1;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const TASK: u64 = 1 << 13;
    pub const MMAP_DATA: u64 = 1 << 17;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
    /// Never set (see [`watch_attr`](super::watch_attr)).
    #[cfg(test)]
    pub const BUILD_ID: u64 = 1 << 34;
}

/// `read_format` PERF_FORMAT_LOST: reading the event gives the records
/// the kernel could not write (Linux 6.0+).
const FORMAT_LOST: u64 = 1 << 4;

/// The attr of a watch event: software dummy, mmap2/comm/task, trailer
/// TID|TIME, times on CLOCK_MONOTONIC; `lost`: readable lost count. No
/// build ids: the kernel leaves the build-id flag it sets for an event
/// that asks for them in the header of the records it writes next for
/// the same mmap, other sessions' inode-form records included (see
/// `snapshot::ids`, which reads the ids instead).
pub fn watch_attr(inherit: bool, data: bool, lost: bool) -> Vec<u8> {
    let e = Endian::NATIVE;
    let mut a = Vec::with_capacity(128);
    a.put_u32(e, 1); // PERF_TYPE_SOFTWARE
    a.put_u32(e, 128);
    a.put_u64(e, 9); // PERF_COUNT_SW_DUMMY
    a.put_u64(e, 1); // sample_period
    a.put_u64(e, 2 | 4); // PERF_SAMPLE_TID | PERF_SAMPLE_TIME
    a.put_u64(e, if lost { FORMAT_LOST } else { 0 }); // read_format
    let mut flags = bits::MMAP
        | bits::COMM
        | bits::TASK
        | bits::SAMPLE_ID_ALL
        | bits::MMAP2
        | bits::COMM_EXEC
        | bits::USE_CLOCKID;
    if inherit {
        flags |= bits::INHERIT;
    }
    if data {
        flags |= bits::MMAP_DATA;
    }
    a.put_u64(e, flags);
    a.resize(92, 0);
    a.put_u32(e, libc::CLOCK_MONOTONIC as u32); // clockid
    a.resize(128, 0);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    // The attr's flag bits are the kernel's, as linux-perf-event-reader
    // names them.
    #[test]
    fn attr_bits_match_the_reference_crate() {
        use linux_perf_event_reader::constants as k;
        let pairs = [
            (bits::INHERIT, k::ATTR_FLAG_BIT_INHERIT),
            (bits::MMAP, k::ATTR_FLAG_BIT_MMAP),
            (bits::COMM, k::ATTR_FLAG_BIT_COMM),
            (bits::TASK, k::ATTR_FLAG_BIT_TASK),
            (bits::MMAP_DATA, k::ATTR_FLAG_BIT_MMAP_DATA),
            (bits::SAMPLE_ID_ALL, k::ATTR_FLAG_BIT_SAMPLE_ID_ALL),
            (bits::MMAP2, k::ATTR_FLAG_BIT_MMAP2),
            (bits::COMM_EXEC, k::ATTR_FLAG_BIT_COMM_EXEC),
            (bits::USE_CLOCKID, k::ATTR_FLAG_BIT_USE_CLOCKID),
            (bits::BUILD_ID, k::ATTR_FLAG_BIT_BUILD_ID),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs);
        }
    }

    // No watch event asks for build ids, in any mode: the kernel's flag
    // for them would leak into other sessions' records.
    #[test]
    fn no_watch_event_asks_for_build_ids() {
        for (inherit, data, lost) in [(false, false, true), (true, true, false)] {
            let a = watch_attr(inherit, data, lost);
            let flags = u64::from_ne_bytes(a[40..48].try_into().unwrap());
            assert_eq!(flags & bits::BUILD_ID, 0);
            assert_ne!(flags & bits::MMAP2, 0, "the flags word is read");
        }
    }
}
