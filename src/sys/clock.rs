//! System constants and clocks: `sysconf` and `clock_gettime`.

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of the start
/// time in `/proc/PID/stat`; 100 if sysconf fails.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes an integer name and touches no memory of ours.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

/// Reads a clock (`CLOCK_MONOTONIC`, `CLOCK_BOOTTIME`, ...) in nanoseconds.
pub fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed timespec that the call
    // fills; clock_gettime reads nothing else of ours.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}
