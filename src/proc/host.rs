//! Facts about this machine that a perf.data header records.

use super::parse::count_cpu_list;

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
