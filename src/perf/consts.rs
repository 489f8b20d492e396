//! Kernel and perf numbers, each written once. A unit test checks them against
//! linux-perf-event-reader and linux-perf-data. Numbers travel as plain
//! integers so that unknown record types and feature bits pass through.

/// Record type numbers (`perf_event_header.type`).
pub mod types {
    /// PERF_RECORD_MMAP.
    pub const MMAP: u32 = 1;
    /// PERF_RECORD_COMM.
    pub const COMM: u32 = 3;
    /// PERF_RECORD_EXIT.
    pub const EXIT: u32 = 4;
    /// PERF_RECORD_FORK.
    pub const FORK: u32 = 7;
    /// PERF_RECORD_SAMPLE.
    pub const SAMPLE: u32 = 9;
    /// PERF_RECORD_MMAP2.
    pub const MMAP2: u32 = 10;
    /// PERF_RECORD_KSYMBOL: a kernel symbol (a JITed BPF function) appears.
    pub const KSYMBOL: u32 = 17;
    /// PERF_RECORD_BPF_EVENT: a BPF program is loaded or unloaded.
    pub const BPF_EVENT: u32 = 18;
    /// PERF_RECORD_HEADER_ATTR (pipe mode: an attr and its ids).
    pub const HEADER_ATTR: u32 = 64;
    /// PERF_RECORD_HEADER_EVENT_TYPE (obsolete pipe-mode event names).
    pub const HEADER_EVENT_TYPE: u32 = 65;
    /// PERF_RECORD_HEADER_TRACING_DATA (pipe mode: `u32 size`, then that
    /// many bytes of tracing data after the record, outside its size).
    pub const HEADER_TRACING_DATA: u32 = 66;
    /// PERF_RECORD_AUXTRACE: AUX area data (Intel PT, ARM SPE, CoreSight),
    /// whose `u64 size` bytes follow the record outside its header size.
    pub const AUXTRACE: u32 = 71;
    /// PERF_RECORD_HEADER_BUILD_ID (pipe mode: one BUILD_ID table entry).
    pub const HEADER_BUILD_ID: u32 = 67;
    /// PERF_RECORD_FINISHED_ROUND: records before it may be sorted by time.
    pub const FINISHED_ROUND: u32 = 68;
    /// PERF_RECORD_EVENT_UPDATE: u64 type ([`super::event_update`]), u64
    /// id, then (NAME) the event's name; pipe mode names its events with it.
    pub const EVENT_UPDATE: u32 = 78;
    /// PERF_RECORD_HEADER_FEATURE (pipe mode: one feature payload).
    pub const HEADER_FEATURE: u32 = 80;
    /// PERF_RECORD_COMPRESSED: zstd-compressed records (`perf record -z`).
    pub const COMPRESSED: u32 = 81;
    /// PERF_RECORD_FINISHED_INIT: the end of the synthesized records.
    pub const FINISHED_INIT: u32 = 82;
    /// PERF_RECORD_COMPRESSED2 (newer perf: header, u64 data_size, data).
    pub const COMPRESSED2: u32 = 83;

    /// perf's name of record type `t` (without `PERF_RECORD_`), for the
    /// types perf writes; None for others.
    pub fn name(t: u32) -> Option<&'static str> {
        const KERNEL: [&str; 22] = [
            "",
            "MMAP",
            "LOST",
            "COMM",
            "EXIT",
            "THROTTLE",
            "UNTHROTTLE",
            "FORK",
            "READ",
            "SAMPLE",
            "MMAP2",
            "AUX",
            "ITRACE_START",
            "LOST_SAMPLES",
            "SWITCH",
            "SWITCH_CPU_WIDE",
            "NAMESPACES",
            "KSYMBOL",
            "BPF_EVENT",
            "CGROUP",
            "TEXT_POKE",
            "AUX_OUTPUT_HW_ID",
        ];
        const USER: [&str; 20] = [
            "HEADER_ATTR",
            "HEADER_EVENT_TYPE",
            "HEADER_TRACING_DATA",
            "HEADER_BUILD_ID",
            "FINISHED_ROUND",
            "ID_INDEX",
            "AUXTRACE_INFO",
            "AUXTRACE",
            "AUXTRACE_ERROR",
            "THREAD_MAP",
            "CPU_MAP",
            "STAT_CONFIG",
            "STAT",
            "STAT_ROUND",
            "EVENT_UPDATE",
            "TIME_CONV",
            "HEADER_FEATURE",
            "COMPRESSED",
            "FINISHED_INIT",
            "COMPRESSED2",
        ];
        let name = match t {
            1..22 => KERNEL[t as usize],
            64..84 => USER[t as usize - 64],
            _ => return None,
        };
        Some(name)
    }
}

/// What a PERF_RECORD_EVENT_UPDATE carries (`PERF_EVENT_UPDATE__*`).
pub mod event_update {
    /// The event's unit (a string).
    pub const UNIT: u64 = 0;
    /// Its scale (a double).
    pub const SCALE: u64 = 1;
    /// Its name (a string).
    pub const NAME: u64 = 2;
    /// Its CPUs (a CPU map).
    pub const CPUS: u64 = 3;
}

/// `perf_event_header.misc` bits.
pub mod misc {
    /// The cpumode bits (kernel, user, hypervisor, guest ...).
    pub const CPUMODE_MASK: u16 = 7;
    /// Kernel cpumode.
    pub const KERNEL: u16 = 1;
    /// User cpumode.
    pub const USER: u16 = 2;
    /// PERF_RECORD_MISC_HYPERVISOR.
    pub const HYPERVISOR: u16 = 3;
    /// PERF_RECORD_MISC_GUEST_KERNEL.
    pub const GUEST_KERNEL: u16 = 4;
    /// PERF_RECORD_MISC_GUEST_USER.
    pub const GUEST_USER: u16 = 5;
    /// The map could not be read completely (timeout).
    pub const PROC_MAP_PARSE_TIMEOUT: u16 = 1 << 12;
    /// COMM made by exec (the old address space is gone).
    pub const COMM_EXEC: u16 = 1 << 13;
    /// MMAP2 of a non-executable VMA.
    pub const MMAP_DATA: u16 = 1 << 13;
    /// MMAP2 carries a build id instead of maj/min/ino.
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    /// BUILD_ID table entry: byte 20 of build_id holds the id length.
    pub const BUILD_ID_SIZE: u16 = 1 << 15;
}

/// `PERF_RECORD_KSYMBOL_TYPE_*` (the record's `ksym_type`) and
/// `PERF_BPF_EVENT_*` (a BPF_EVENT's `type`), from the kernel's
/// perf_event.h (linux-perf-event-reader does not define them).
pub mod bpf {
    /// PERF_RECORD_KSYMBOL_TYPE_BPF: a JITed BPF program or sub-program.
    pub const KSYM_TYPE_BPF: u16 = 1;
    /// PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER: the symbol goes away.
    pub const KSYM_FLAG_UNREGISTER: u16 = 1;
    /// PERF_BPF_EVENT_PROG_LOAD.
    pub const EVENT_PROG_LOAD: u16 = 1;
    /// PERF_BPF_EVENT_PROG_UNLOAD.
    pub const EVENT_PROG_UNLOAD: u16 = 2;
    /// BPF_TAG_SIZE: a program's tag (a hash of its instructions) in bytes.
    pub const TAG_SIZE: usize = 8;
}

/// `perf_event_attr.sample_type` bits that place fields in samples and trailers.
pub mod sample_type {
    /// PERF_SAMPLE_IP.
    pub const IP: u64 = 1 << 0;
    /// PERF_SAMPLE_TID.
    pub const TID: u64 = 1 << 1;
    /// PERF_SAMPLE_TIME.
    pub const TIME: u64 = 1 << 2;
    /// PERF_SAMPLE_ADDR.
    pub const ADDR: u64 = 1 << 3;
    /// PERF_SAMPLE_READ: the counter values (`read_format` shapes them).
    pub const READ: u64 = 1 << 4;
    /// PERF_SAMPLE_CALLCHAIN: u64 nr, then nr addresses and context markers.
    pub const CALLCHAIN: u64 = 1 << 5;
    /// PERF_SAMPLE_ID.
    pub const ID: u64 = 1 << 6;
    /// PERF_SAMPLE_CPU.
    pub const CPU: u64 = 1 << 7;
    /// PERF_SAMPLE_PERIOD.
    pub const PERIOD: u64 = 1 << 8;
    /// PERF_SAMPLE_STREAM_ID.
    pub const STREAM_ID: u64 = 1 << 9;
    /// PERF_SAMPLE_IDENTIFIER.
    pub const IDENTIFIER: u64 = 1 << 16;
}

/// `perf_event_attr.read_format` bits: the shape of a sample's READ values.
pub mod read_format {
    /// PERF_FORMAT_TOTAL_TIME_ENABLED.
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    /// PERF_FORMAT_TOTAL_TIME_RUNNING.
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    /// PERF_FORMAT_ID.
    pub const ID: u64 = 1 << 2;
    /// PERF_FORMAT_GROUP: u64 nr, then a value (and id, lost) per member.
    pub const GROUP: u64 = 1 << 3;
    /// PERF_FORMAT_LOST (Linux 6.0+).
    pub const LOST: u64 = 1 << 4;
}

/// Callchain context markers: entries at or above [`context::MAX`] are not
/// addresses but say whose frames follow.
pub mod context {
    /// PERF_CONTEXT_HV.
    pub const HV: u64 = -32i64 as u64;
    /// PERF_CONTEXT_KERNEL.
    pub const KERNEL: u64 = -128i64 as u64;
    /// PERF_CONTEXT_USER.
    pub const USER: u64 = -512i64 as u64;
    /// PERF_CONTEXT_GUEST.
    pub const GUEST: u64 = -2048i64 as u64;
    /// PERF_CONTEXT_GUEST_KERNEL.
    pub const GUEST_KERNEL: u64 = -2176i64 as u64;
    /// PERF_CONTEXT_GUEST_USER.
    pub const GUEST_USER: u64 = -2560i64 as u64;
    /// PERF_CONTEXT_MAX: the smallest marker.
    pub const MAX: u64 = -4095i64 as u64;
}

/// `perf_event_attr` flag bits (the C bitfield after `read_format`), in
/// little-endian bit numbering.
pub mod attr_flags {
    /// Starts disabled.
    pub const DISABLED: u64 = 1 << 0;
    /// Reports PERF_RECORD_MMAP.
    pub const MMAP: u64 = 1 << 8;
    /// Reports PERF_RECORD_COMM.
    pub const COMM: u64 = 1 << 9;
    /// Reports FORK and EXIT.
    pub const TASK: u64 = 1 << 13;
    /// `sample_freq` is set instead of `sample_period`.
    pub const FREQ: u64 = 1 << 10;
    /// Reports mmaps of non-executable memory too (perf's MMAP_DATA maps).
    pub const MMAP_DATA: u64 = 1 << 17;
    /// Non-sample records carry the sample_id trailer.
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// Reports PERF_RECORD_MMAP2 instead of MMAP.
    pub const MMAP2: u64 = 1 << 23;
    /// COMM records tell exec from rename.
    pub const COMM_EXEC: u64 = 1 << 24;
    /// Times are of `clockid` (`perf record -k`), not perf's default clock.
    pub const USE_CLOCKID: u64 = 1 << 25;
    /// MMAP2 records carry build ids.
    pub const BUILD_ID: u64 = 1 << 34;
}

/// Feature bit numbers (`HEADER_*`).
pub mod feature {
    /// HEADER_TRACING_DATA: tracepoint formats (perf's trace-event data).
    pub const TRACING_DATA: u32 = 1;
    /// HEADER_BUILD_ID: the DSO -> build id table.
    pub const BUILD_ID: u32 = 2;
    /// HEADER_HOSTNAME.
    pub const HOSTNAME: u32 = 3;
    /// HEADER_OSRELEASE.
    pub const OSRELEASE: u32 = 4;
    /// HEADER_VERSION: the writing tool's version.
    pub const VERSION: u32 = 5;
    /// HEADER_ARCH.
    pub const ARCH: u32 = 6;
    /// HEADER_NRCPUS: online and available CPUs.
    pub const NRCPUS: u32 = 7;
    /// HEADER_CMDLINE.
    pub const CMDLINE: u32 = 11;
    /// HEADER_EVENT_DESC: attrs with names and ids.
    pub const EVENT_DESC: u32 = 12;
    /// HEADER_AUXTRACE: the file offsets of the AUXTRACE records (u64 nr,
    /// then {u64 file_offset, u64 size} each), how perf finds the AUX data.
    pub const AUXTRACE: u32 = 18;
    /// HEADER_DIR_FORMAT: a directory recording's version (u64; 1: its
    /// records are in `data` and the `data.*` files beside it).
    pub const DIR_FORMAT: u32 = 24;
    /// HEADER_COMPRESSED: version, type, level, ratio and the buffer size
    /// (mmap_len) one COMPRESSED record decompresses into.
    pub const COMPRESSED: u32 = 27;
    /// HEADER_LAST_FEATURE as perf 6.1 numbers it: ends the pipe-mode features.
    pub const LAST_FEATURE: u32 = 32;

    /// perf's name of feature `bit` (without `HEADER_`), for the bits perf
    /// 6.1 knows; None for others.
    pub fn name(bit: u32) -> Option<&'static str> {
        const NAMES: [&str; LAST_FEATURE as usize] = [
            "RESERVED",
            "TRACING_DATA",
            "BUILD_ID",
            "HOSTNAME",
            "OSRELEASE",
            "VERSION",
            "ARCH",
            "NRCPUS",
            "CPUDESC",
            "CPUID",
            "TOTAL_MEM",
            "CMDLINE",
            "EVENT_DESC",
            "CPU_TOPOLOGY",
            "NUMA_TOPOLOGY",
            "BRANCH_STACK",
            "PMU_MAPPINGS",
            "GROUP_DESC",
            "AUXTRACE",
            "STAT",
            "CACHE",
            "SAMPLE_TIME",
            "MEM_TOPOLOGY",
            "CLOCKID",
            "DIR_FORMAT",
            "BPF_PROG_INFO",
            "BPF_BTF",
            "COMPRESSED",
            "CPU_PMU_CAPS",
            "CLOCK_DATA",
            "HYBRID_TOPOLOGY",
            "HYBRID_CPU_PMU_CAPS",
        ];
        NAMES.get(bit as usize).copied()
    }
}

/// PERF_TYPE_SOFTWARE.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// PERF_COUNT_SW_DUMMY: the event that only carries side-band records.
pub const PERF_COUNT_SW_DUMMY: u64 = 9;
/// `perf_event_attr` size written in new files (PERF_ATTR_SIZE_VER7), the
/// largest perf 6.1 accepts.
pub const ATTR_SIZE: usize = 128;
/// Smallest `perf_event_attr` (PERF_ATTR_SIZE_VER0).
pub const ATTR_SIZE_VER0: usize = 64;
/// `PERFILE2` as bytes; read as a host u64 it tells the byte order.
pub const MAGIC: &[u8; 8] = b"PERFILE2";
/// Size of the file-mode header.
pub const FILE_HEADER_SIZE: u64 = 104;
/// Size of the pipe-mode header.
pub const PIPE_HEADER_SIZE: u64 = 16;
/// Longest build id MMAP2 and BUILD_ID entries carry.
pub const MAX_BUILD_ID: usize = crate::model::MAX_BUILD_ID;

#[cfg(test)]
mod tests {
    use super::*;
    use linux_perf_data::Feature;
    use linux_perf_event_reader::constants as k;

    // Every kernel number here equals linux-perf-event-reader's / linux-perf-data's.
    #[test]
    fn constants_match_the_reference_crates() {
        let pairs: &[(u64, u64)] = &[
            (types::MMAP.into(), k::PERF_RECORD_MMAP.into()),
            (types::COMM.into(), k::PERF_RECORD_COMM.into()),
            (types::EXIT.into(), k::PERF_RECORD_EXIT.into()),
            (
                misc::CPUMODE_MASK.into(),
                k::PERF_RECORD_MISC_CPUMODE_MASK.into(),
            ),
            (types::FORK.into(), k::PERF_RECORD_FORK.into()),
            (types::SAMPLE.into(), k::PERF_RECORD_SAMPLE.into()),
            (types::MMAP2.into(), k::PERF_RECORD_MMAP2.into()),
            (misc::KERNEL.into(), k::PERF_RECORD_MISC_KERNEL.into()),
            (misc::USER.into(), k::PERF_RECORD_MISC_USER.into()),
            (
                misc::GUEST_KERNEL.into(),
                k::PERF_RECORD_MISC_GUEST_KERNEL.into(),
            ),
            (
                misc::HYPERVISOR.into(),
                k::PERF_RECORD_MISC_HYPERVISOR.into(),
            ),
            (
                misc::GUEST_USER.into(),
                k::PERF_RECORD_MISC_GUEST_USER.into(),
            ),
            (
                misc::PROC_MAP_PARSE_TIMEOUT.into(),
                k::PERF_RECORD_MISC_PROC_MAP_PARSE_TIMEOUT.into(),
            ),
            (misc::MMAP_DATA.into(), k::PERF_RECORD_MISC_MMAP_DATA.into()),
            (
                misc::MMAP_BUILD_ID.into(),
                k::PERF_RECORD_MISC_MMAP_BUILD_ID.into(),
            ),
            (
                misc::BUILD_ID_SIZE.into(),
                k::PERF_RECORD_MISC_BUILD_ID_SIZE.into(),
            ),
            (sample_type::IP, k::PERF_SAMPLE_IP),
            (sample_type::TID, k::PERF_SAMPLE_TID),
            (sample_type::TIME, k::PERF_SAMPLE_TIME),
            (sample_type::ADDR, k::PERF_SAMPLE_ADDR),
            (sample_type::ID, k::PERF_SAMPLE_ID),
            (sample_type::CPU, k::PERF_SAMPLE_CPU),
            (sample_type::PERIOD, k::PERF_SAMPLE_PERIOD),
            (sample_type::STREAM_ID, k::PERF_SAMPLE_STREAM_ID),
            (sample_type::IDENTIFIER, k::PERF_SAMPLE_IDENTIFIER),
            (attr_flags::DISABLED, k::ATTR_FLAG_BIT_DISABLED),
            (attr_flags::MMAP, k::ATTR_FLAG_BIT_MMAP),
            (attr_flags::COMM, k::ATTR_FLAG_BIT_COMM),
            (attr_flags::TASK, k::ATTR_FLAG_BIT_TASK),
            (attr_flags::MMAP_DATA, k::ATTR_FLAG_BIT_MMAP_DATA),
            (attr_flags::SAMPLE_ID_ALL, k::ATTR_FLAG_BIT_SAMPLE_ID_ALL),
            (attr_flags::MMAP2, k::ATTR_FLAG_BIT_MMAP2),
            (attr_flags::COMM_EXEC, k::ATTR_FLAG_BIT_COMM_EXEC),
            (attr_flags::BUILD_ID, k::ATTR_FLAG_BIT_BUILD_ID),
            (PERF_TYPE_SOFTWARE.into(), k::PERF_TYPE_SOFTWARE.into()),
            (PERF_COUNT_SW_DUMMY, k::PERF_COUNT_SW_DUMMY),
            (ATTR_SIZE as u64, k::PERF_ATTR_SIZE_VER7.into()),
            (ATTR_SIZE_VER0 as u64, k::PERF_ATTR_SIZE_VER0.into()),
            (feature::BUILD_ID.into(), Feature::BUILD_ID.0.into()),
            (feature::HOSTNAME.into(), Feature::HOSTNAME.0.into()),
            (feature::OSRELEASE.into(), Feature::OSRELEASE.0.into()),
            (feature::VERSION.into(), Feature::VERSION.0.into()),
            (feature::ARCH.into(), Feature::ARCH.0.into()),
            (feature::NRCPUS.into(), Feature::NRCPUS.0.into()),
            (feature::CMDLINE.into(), Feature::CMDLINE.0.into()),
            (feature::EVENT_DESC.into(), Feature::EVENT_DESC.0.into()),
            (feature::COMPRESSED.into(), Feature::COMPRESSED.0.into()),
            (feature::AUXTRACE.into(), Feature::AUXTRACE.0.into()),
            (feature::TRACING_DATA.into(), Feature::TRACING_DATA.0.into()),
        ];
        for (i, (ours, theirs)) in pairs.iter().enumerate() {
            assert_eq!(ours, theirs, "constant #{i}");
        }
        // The user-space record types perf defines after PERF_RECORD_USER_TYPE_START.
        assert_eq!(
            u64::from(types::HEADER_ATTR),
            u64::from(k::PERF_RECORD_USER_TYPE_START)
        );
        // HEADER_LAST_FEATURE follows the last feature perf 6.1 knows (HYBRID_CPU_PMU_CAPS = 31).
        assert_eq!(feature::LAST_FEATURE, Feature::HYBRID_CPU_PMU_CAPS.0 + 1);
    }

    // The names of record types and features agree with their numbers.
    #[test]
    fn names_agree_with_numbers() {
        for (t, n) in [
            (types::SAMPLE, "SAMPLE"),
            (types::MMAP2, "MMAP2"),
            (types::BPF_EVENT, "BPF_EVENT"),
            (types::HEADER_ATTR, "HEADER_ATTR"),
            (types::HEADER_TRACING_DATA, "HEADER_TRACING_DATA"),
            (types::AUXTRACE, "AUXTRACE"),
            (types::EVENT_UPDATE, "EVENT_UPDATE"),
            (types::COMPRESSED2, "COMPRESSED2"),
        ] {
            assert_eq!(types::name(t), Some(n));
        }
        assert_eq!((types::name(0), types::name(84)), (None, None));
        for (b, n) in [
            (feature::TRACING_DATA, "TRACING_DATA"),
            (feature::CMDLINE, "CMDLINE"),
            (feature::EVENT_DESC, "EVENT_DESC"),
            (feature::AUXTRACE, "AUXTRACE"),
            (feature::COMPRESSED, "COMPRESSED"),
            (feature::LAST_FEATURE - 1, "HYBRID_CPU_PMU_CAPS"),
        ] {
            assert_eq!(feature::name(b), Some(n));
        }
        assert_eq!(feature::name(feature::LAST_FEATURE), None);
    }

    // The sample-decoding numbers equal linux-perf-event-reader's.
    #[test]
    fn sample_constants_match_the_reference_crate() {
        let pairs: &[(u64, u64)] = &[
            (misc::COMM_EXEC.into(), k::PERF_RECORD_MISC_COMM_EXEC.into()),
            (sample_type::READ, k::PERF_SAMPLE_READ),
            (sample_type::CALLCHAIN, k::PERF_SAMPLE_CALLCHAIN),
            (
                read_format::TOTAL_TIME_ENABLED,
                k::PERF_FORMAT_TOTAL_TIME_ENABLED,
            ),
            (
                read_format::TOTAL_TIME_RUNNING,
                k::PERF_FORMAT_TOTAL_TIME_RUNNING,
            ),
            (read_format::ID, k::PERF_FORMAT_ID),
            (read_format::GROUP, k::PERF_FORMAT_GROUP),
            (context::HV, k::PERF_CONTEXT_HV),
            (context::KERNEL, k::PERF_CONTEXT_KERNEL),
            (context::USER, k::PERF_CONTEXT_USER),
            (context::GUEST, k::PERF_CONTEXT_GUEST),
            (context::GUEST_KERNEL, k::PERF_CONTEXT_GUEST_KERNEL),
            (context::GUEST_USER, k::PERF_CONTEXT_GUEST_USER),
            (context::MAX, k::PERF_CONTEXT_MAX),
            (attr_flags::FREQ, k::ATTR_FLAG_BIT_FREQ),
            (attr_flags::USE_CLOCKID, k::ATTR_FLAG_BIT_USE_CLOCKID),
            (
                types::EVENT_UPDATE.into(),
                linux_perf_data::UserRecordType::PERF_EVENT_UPDATE
                    .record_type()
                    .0
                    .into(),
            ),
        ];
        for (i, (ours, theirs)) in pairs.iter().enumerate() {
            assert_eq!(ours, theirs, "constant #{i}");
        }
    }

    // The BPF record types equal linux-perf-event-reader's; the ksym and
    // event types (which it does not define) are the uapi's values.
    #[test]
    fn bpf_constants_match_the_reference_crate() {
        assert_eq!(types::KSYMBOL, k::PERF_RECORD_KSYMBOL);
        assert_eq!(types::BPF_EVENT, k::PERF_RECORD_BPF_EVENT);
        assert_eq!((bpf::KSYM_TYPE_BPF, bpf::KSYM_FLAG_UNREGISTER), (1, 1));
        assert_eq!((bpf::EVENT_PROG_LOAD, bpf::EVENT_PROG_UNLOAD), (1, 2));
        assert_eq!(bpf::TAG_SIZE, 8);
    }
}
