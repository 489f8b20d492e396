//! Signals while a stream is read. In `perf record -o - | mmap2-synth
//! convert -`, a Ctrl-C reaches the whole foreground process group: perf
//! record stops its workload, writes what its buffers hold and ends its
//! stream, so the recording is still arriving when our SIGINT comes. So
//! while a command copies a stream input (stdin or a FIFO, not a regular
//! file) whose writer has been seen, and its records keep coming, the first
//! SIGINT or SIGTERM (which perf record takes the same way, from a `kill`
//! of the group or a service manager) is put off: the command reads on to
//! the end of the stream and completes. Once the stream has ended, signals
//! end the command again. If the stream stops being perf.data instead (a
//! record header of zeros or garbage: nothing a writer is still finishing),
//! a signal put off ends the command then. A second signal, or SIGHUP,
//! always ends it as a signal does otherwise (temporary outputs removed,
//! exit 128 + the signal). So does a signal put off when the stream then
//! sends nothing for a while ([`watch_for_stall`]): a writer finishing its
//! stream keeps writing, a reader stuck on a dead writer (or a stalled file
//! system) would wait for ever.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// No stream read: signals end the process.
const IDLE: i32 = 0;
/// A stream is read: the first SIGINT or SIGTERM is put off. (A signal put
/// off is held as its number, > 0: the next ends the process.)
const STREAMING: i32 = -1;

static STATE: AtomicI32 = AtomicI32::new(IDLE);

/// A stream is being read: from [`reading_a_stream`] to [`stream_read`].
static READING: AtomicBool = AtomicBool::new(false);

/// Bytes of the stream read so far: what [`watch_for_stall`] takes for a
/// sign of life.
static PROGRESS: AtomicU64 = AtomicU64::new(0);

/// How long a stream may send nothing, once a signal was put off, before
/// that signal ends the command after all. `perf record` ends its stream
/// within a second of its SIGINT (its buffers written); a workload that
/// outlives the signal keeps its samples coming.
pub const STALL: Duration = Duration::from_secs(10);

/// What ends the process for a signal put off when the stream turns out
/// bad (the CLI's: temporary outputs removed, exit 128 + the signal).
static ABORT: OnceLock<fn(i32)> = OnceLock::new();

/// Sets what ends the process for a signal put off while a stream was read
/// when the stream then stops being perf.data (see [`stream_read`]).
pub fn on_abort(abort: fn(i32)) {
    let _ = ABORT.set(abort);
}

/// The command reads a stream whose writer has connected: from now until
/// [`stream_read`], its first SIGINT or SIGTERM is put off.
pub fn reading_a_stream() {
    READING.store(true, Ordering::SeqCst);
    streaming(&STATE);
}

/// `n` more bytes of the stream were read (see [`watch_for_stall`]).
pub fn stream_progress(n: usize) {
    PROGRESS.fetch_add(n as u64, Ordering::Relaxed);
}

/// For the signal thread, once [`put_off`] put a signal off: watches the
/// stream on a thread of its own and calls `on_stall` if it sends nothing
/// for `stall` while it is still read (not when it ends).
pub fn watch_for_stall(stall: Duration, on_stall: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        if stalled(&READING, &PROGRESS, stall, Duration::from_millis(50)) {
            on_stall();
        }
    });
}

/// Whether the stream read (`reading`) sent nothing (`progress` unmoved)
/// for `stall`, looking every `poll`; false once it is no longer read.
fn stalled(reading: &AtomicBool, progress: &AtomicU64, stall: Duration, poll: Duration) -> bool {
    let mut seen = progress.load(Ordering::Relaxed);
    let mut since = Instant::now();
    loop {
        if !reading.load(Ordering::SeqCst) {
            return false;
        }
        let now = progress.load(Ordering::Relaxed);
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() >= stall {
            return true;
        }
        std::thread::sleep(poll);
    }
}

/// The stream is read (its copy ended): signals are no longer put off. If
/// it did not end but stopped being perf.data (`bad`), a signal put off
/// while it was read ends the process now, through [`on_abort`]'s function.
pub fn stream_read(bad: bool) {
    READING.store(false, Ordering::SeqCst);
    if let Some(sig) = read_in(&STATE, bad) {
        if let Some(abort) = ABORT.get() {
            abort(sig);
        }
    }
}

/// For the signal thread: whether `sig` is to be put off (the first SIGINT
/// or SIGTERM while a stream is read); false when it should end the process.
pub fn put_off(sig: i32) -> bool {
    put_off_in(&STATE, sig)
}

/// [`reading_a_stream`] on `state`.
fn streaming(state: &AtomicI32) {
    let _ = state.compare_exchange(IDLE, STREAMING, Ordering::SeqCst, Ordering::SeqCst);
}

/// [`stream_read`] on `state`: the signal put off, if `bad` and there is
/// one. A signal put off on a stream that ended stays so (the command
/// completes, any further signal ends it).
fn read_in(state: &AtomicI32, bad: bool) -> Option<i32> {
    let _ = state.compare_exchange(STREAMING, IDLE, Ordering::SeqCst, Ordering::SeqCst);
    let sig = state.load(Ordering::SeqCst);
    (bad && sig > 0).then_some(sig)
}

/// [`put_off`] on `state`.
fn put_off_in(state: &AtomicI32, sig: i32) -> bool {
    (sig == libc::SIGINT || sig == libc::SIGTERM)
        && state
            .compare_exchange(STREAMING, sig, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Nothing is put off before a stream is read; then the first SIGINT or
    // SIGTERM is, never SIGHUP, and never a second signal.
    #[test]
    fn only_the_first_signal_while_streaming_is_put_off() {
        let state = AtomicI32::new(IDLE);
        assert!(!put_off_in(&state, libc::SIGINT));
        streaming(&state);
        assert!(!put_off_in(&state, libc::SIGHUP));
        assert!(put_off_in(&state, libc::SIGTERM));
        assert!(!put_off_in(&state, libc::SIGINT));
        streaming(&state);
        assert!(!put_off_in(&state, libc::SIGINT));
    }

    // Once the stream is read nothing more is put off; the signal put off
    // is handed back only when the stream stopped being perf.data.
    #[test]
    fn a_bad_stream_hands_back_the_signal_put_off() {
        let state = AtomicI32::new(IDLE);
        streaming(&state);
        assert_eq!(read_in(&state, true), None);
        assert!(!put_off_in(&state, libc::SIGINT));
        let state = AtomicI32::new(IDLE);
        streaming(&state);
        assert!(put_off_in(&state, libc::SIGTERM));
        assert_eq!(read_in(&state, false), None);
        assert!(!put_off_in(&state, libc::SIGINT));
        let state = AtomicI32::new(IDLE);
        streaming(&state);
        assert!(put_off_in(&state, libc::SIGTERM));
        assert_eq!(read_in(&state, true), Some(libc::SIGTERM));
    }

    // A stream that sends nothing for the stall is stalled; one whose bytes
    // keep coming is not, nor one no longer read (its end is no stall).
    #[test]
    fn only_a_silent_stream_still_read_is_stalled() {
        let (ms, poll) = (Duration::from_millis(100), Duration::from_millis(5));
        let (reading, progress) = (AtomicBool::new(true), AtomicU64::new(0));
        let t = Instant::now();
        assert!(stalled(&reading, &progress, ms, poll));
        assert!(t.elapsed() >= ms);
        // bytes for twice the stall's time (a second: a loaded machine may
        // put the writer off for a while), then the end
        let long = Duration::from_secs(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..400 {
                    progress.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(poll);
                }
                reading.store(false, Ordering::SeqCst);
            });
            assert!(!stalled(&reading, &progress, long, poll));
        });
        assert!(!stalled(&reading, &progress, ms, poll));
    }
}
