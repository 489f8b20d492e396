//! Clock arithmetic: whether a live process started after a recording
//! ended, with /proc's boot-time ticks and perf's monotonic clock; and this
//! process's clocks as the kernel's perf events stamp them, whatever time
//! namespace it runs in.

use std::sync::OnceLock;

use crate::sys;

/// A clock's offset in `/proc/self/timens_offsets` text (lines "monotonic
/// SECS NSECS" and "boottime SECS NSECS"), in nanoseconds; 0 when absent
/// or unreadable (no time namespaces).
pub fn timens_offset(text: &[u8], clock: &str) -> i64 {
    let text = String::from_utf8_lossy(text);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() == Some(clock) {
            let secs: i64 = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let nsecs: i64 = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            return secs.saturating_mul(1_000_000_000).saturating_add(nsecs);
        }
    }
    0
}

/// This process's time namespace offsets, as `/proc/self/timens_offsets`
/// gives them (empty outside time namespaces).
pub fn timens_offsets_text() -> Vec<u8> {
    std::fs::read("/proc/self/timens_offsets").unwrap_or_default()
}

/// CLOCK_MONOTONIC in nanoseconds as perf events stamp it (`use_clockid`):
/// this process's clock less its time namespace's offset, which perf's
/// clock does not see. None if the clock cannot be read.
pub fn event_monotonic_ns() -> Option<u64> {
    static OFFSET: OnceLock<i64> = OnceLock::new();
    let off = *OFFSET.get_or_init(|| timens_offset(&timens_offsets_text(), "monotonic"));
    Some(sys::clock_ns(libc::CLOCK_MONOTONIC)?.wrapping_add_signed(off.wrapping_neg()))
}

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
///
/// In a time namespace, /proc's start times and our boot clock carry the
/// same boottime offset, which cancels; the monotonic clock is the kernel's
/// ([`event_monotonic_ns`]). A negative boottime offset can make the
/// BOOTTIME - MONOTONIC difference negative, so the arithmetic is signed,
/// and it wraps the start of a process older than the offset's reach (as
/// /proc's unsigned sum does) past now: such a process is not stale.
pub fn started_after(start_ticks: u64, ticks_per_sec: u64, last_sample_ns: u64) -> bool {
    let mono = event_monotonic_ns().unwrap_or(0);
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
    let start_boot = u128::from(start_ticks) * 1_000_000_000 / u128::from(ticks_per_sec.max(1));
    if start_boot > u128::from(boottime_now) {
        // started "after now": /proc's sum wrapped under a negative offset
        return false;
    }
    let start_mono = start_boot as i128 - (i128::from(boottime_now) - i128::from(monotonic_now));
    start_mono > i128::from(last_sample_ns) + i128::from(stale_margin_ns(monotonic_now))
}

/// The margin [`started_after`] allows: 0.5 s plus 100 ppm of uptime.
pub fn stale_margin_ns(monotonic_now: u64) -> u64 {
    500_000_000 + monotonic_now / 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    // A time namespace's offsets are read per clock from their lines;
    // anything else gives 0.
    #[test]
    fn timens_offsets_per_clock() {
        let text = b"monotonic -3600 250\nboottime 3 500000000\n";
        assert_eq!(timens_offset(text, "monotonic"), -3_599_999_999_750);
        assert_eq!(timens_offset(text, "boottime"), 3_500_000_000);
        assert_eq!(timens_offset(b"garbage", "boottime"), 0);
        assert_eq!(timens_offset(b"", "monotonic"), 0);
    }

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

    // A time namespace's boot clock set back further than the machine
    // slept: BOOTTIME - MONOTONIC is negative there, and a start is still
    // moved by it (it was taken as 0); a start wrapped past now is old.
    #[test]
    fn staleness_under_a_negative_boottime_offset() {
        let sec = 1_000_000_000u64;
        // kernel: boot 300 s, mono 300 s; namespace boot clock -250 s; the
        // process started at 290 s (40 s in the namespace), the recording
        // ended at 200 s: stale
        assert!(started_after_at(
            40 * 100,
            100,
            200 * sec,
            300 * sec,
            50 * sec
        ));
        // the recording ended at 295 s: not stale
        assert!(!started_after_at(
            40 * 100,
            100,
            295 * sec,
            300 * sec,
            50 * sec
        ));
        // started at 10 s, before the offset's reach: /proc's sum wrapped
        let wrapped = (10 * sec).wrapping_sub(250 * sec) / 10_000_000;
        assert!(!started_after_at(
            wrapped,
            100,
            200 * sec,
            300 * sec,
            50 * sec
        ));
    }
}
