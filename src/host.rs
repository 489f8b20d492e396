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

/// The machine facts a perf.data header records, read once so tests can fix them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// `/proc/sys/kernel/hostname`.
    pub hostname: Vec<u8>,
    /// `/proc/sys/kernel/osrelease` (`uname -r`).
    pub osrelease: Vec<u8>,
    /// Online CPUs (NRCPUS' first number).
    pub cpus_online: u32,
    /// Present CPUs (NRCPUS' second number).
    pub cpus_available: u32,
}

impl HostFacts {
    /// Reads this machine's facts; a file that cannot be read gives an empty
    /// string or the worker-thread count.
    pub fn read() -> HostFacts {
        let online = count_cpu_list(&read_trimmed("/sys/devices/system/cpu/online"));
        let possible = count_cpu_list(&read_trimmed("/sys/devices/system/cpu/present"));
        let fallback = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let online = online.filter(|&n| n > 0).unwrap_or(fallback);
        HostFacts {
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            osrelease: read_trimmed("/proc/sys/kernel/osrelease"),
            cpus_online: online,
            cpus_available: possible.filter(|&n| n > 0).unwrap_or(online),
        }
    }
}

/// HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS and CMDLINE payloads, ascending.
pub fn host_features(e: Endian, host: &HostFacts, cmdline: &[Vec<u8>]) -> Vec<(u32, Vec<u8>)> {
    vec![
        (
            feature::HOSTNAME,
            perf_data::string_feature(e, &host.hostname),
        ),
        (
            feature::OSRELEASE,
            perf_data::string_feature(e, &host.osrelease),
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
        (
            feature::NRCPUS,
            perf_data::nrcpus_feature(e, host.cpus_online, host.cpus_available),
        ),
        (feature::CMDLINE, perf_data::cmdline_feature(e, cmdline)),
    ]
}
