//! Clock arithmetic for staleness: whether a live process started after a
//! recording ended, with /proc's boot-time ticks and perf's monotonic clock.

use crate::sys;

/// Clock ticks per second, the unit of `/proc/PID/stat`'s start time.
pub fn ticks_per_second() -> u64 {
    sys::clock_ticks_per_second()
}

/// Whether a live process started after the recording's last sample.
///
/// perf's default clock (sched_clock) runs with CLOCK_MONOTONIC: time since
/// boot without suspend. `/proc/PID/stat` counts from boot *with* suspend
/// (CLOCK_BOOTTIME), in clock ticks. The start time is moved onto the
/// monotonic clock by today's BOOTTIME - MONOTONIC offset; the margin covers
/// the tick resolution plus 100 ppm of uptime for the drift between
/// sched_clock and the NTP-steered monotonic clock.
pub fn started_after(start_ticks: u64, ticks_per_sec: u64, last_sample_ns: u64) -> bool {
    let mono = sys::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0);
    let boot = sys::clock_ns(libc::CLOCK_BOOTTIME).unwrap_or(mono);
    started_after_at(start_ticks, ticks_per_sec, last_sample_ns, mono, boot)
}

/// [`started_after`] with the clocks given (pure, for tests).
pub fn started_after_at(
    start_ticks: u64,
    ticks_per_sec: u64,
    last_sample_ns: u64,
    monotonic_now: u64,
    boottime_now: u64,
) -> bool {
    let start_boot =
        (u128::from(start_ticks) * 1_000_000_000 / u128::from(ticks_per_sec.max(1))) as u64;
    let start_mono = start_boot.saturating_sub(boottime_now.saturating_sub(monotonic_now));
    start_mono > last_sample_ns.saturating_add(stale_margin_ns(monotonic_now))
}

/// The margin [`started_after`] allows: 0.5 s plus 100 ppm of uptime.
pub fn stale_margin_ns(monotonic_now: u64) -> u64 {
    500_000_000 + monotonic_now / 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    // Start times are moved from the boot clock to the monotonic one and
    // compared with a margin; suspend time does not make old processes stale.
    #[test]
    fn staleness_uses_one_clock() {
        let sec = 1_000_000_000u64;
        // started at 100 s, recording ended at 200 s: not stale
        assert!(!started_after_at(
            100 * 100,
            100,
            200 * sec,
            300 * sec,
            300 * sec
        ));
        // started at 250 s, after the recording: stale
        assert!(started_after_at(
            250 * 100,
            100,
            200 * sec,
            300 * sec,
            300 * sec
        ));
        // same, but within the margin: not stale
        assert!(!started_after_at(
            20_040,
            100,
            200 * sec,
            300 * sec,
            300 * sec
        ));
        // a machine that slept 1000 s after booting: boottime is ahead, a
        // process started (monotonic) at 100 s shows 1100 s in /proc
        assert!(!started_after_at(
            1100 * 100,
            100,
            200 * sec,
            300 * sec,
            1300 * sec
        ));
        assert_eq!(stale_margin_ns(100_000 * sec), sec / 2 + 10 * sec);
    }
}
