//! Facts about this machine for the perf.data header features.

use crate::perf_data::{self, feature};
use crate::proc::count_cpu_list;
use crate::record::Endian;

fn read_trimmed(path: &str) -> Vec<u8> {
    let mut v = std::fs::read(path).unwrap_or_default();
    while v.last().is_some_and(|b| b.is_ascii_whitespace()) {
        v.pop();
    }
    v
}

/// HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS and CMDLINE payloads, ascending.
pub fn host_features(e: Endian, cmdline: &[Vec<u8>]) -> Vec<(u32, Vec<u8>)> {
    let online = count_cpu_list(&read_trimmed("/sys/devices/system/cpu/online"));
    let possible = count_cpu_list(&read_trimmed("/sys/devices/system/cpu/present"));
    let fallback = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let online = online.filter(|&n| n > 0).unwrap_or(fallback);
    let avail = possible.filter(|&n| n > 0).unwrap_or(online);
    vec![
        (
            feature::HOSTNAME,
            perf_data::string_feature(e, &read_trimmed("/proc/sys/kernel/hostname")),
        ),
        (
            feature::OSRELEASE,
            perf_data::string_feature(e, &read_trimmed("/proc/sys/kernel/osrelease")),
        ),
        (
            feature::VERSION,
            perf_data::string_feature(
                e,
                format!("mmap2-synth {}", env!("CARGO_PKG_VERSION")).as_bytes(),
            ),
        ),
        (
            feature::ARCH,
            perf_data::string_feature(e, std::env::consts::ARCH.as_bytes()),
        ),
        (feature::NRCPUS, perf_data::nrcpus_feature(e, online, avail)),
        (feature::CMDLINE, perf_data::cmdline_feature(e, cmdline)),
    ]
}
