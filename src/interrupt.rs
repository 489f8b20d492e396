//! Signals while a stream is read. In `perf record -o - | mmap2-synth
//! convert -`, a Ctrl-C reaches the whole foreground process group: perf
//! record stops its workload, writes what its buffers hold and ends its
//! stream, so the recording is still arriving when our SIGINT comes. So once
//! a command reads a stream input (stdin or a FIFO, not a regular file)
//! whose writer has been seen, the first SIGINT or SIGTERM (which perf
//! record takes the same way, from a `kill` of the group or a service
//! manager) is put off: the command reads on to the end of its input and
//! completes. A second one, or SIGHUP, ends it as a signal does otherwise
//! (temporary outputs removed, exit 128 + the signal).

use std::sync::atomic::{AtomicU8, Ordering};

/// No stream read: signals end the process.
const IDLE: u8 = 0;
/// A stream is read: the first SIGINT or SIGTERM is put off.
const STREAMING: u8 = 1;
/// One signal was put off: the next ends the process.
const PUT_OFF: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(IDLE);

/// The command reads a stream whose writer has connected: from now until
/// it ends, its first SIGINT or SIGTERM is put off.
pub fn reading_a_stream() {
    streaming(&STATE);
}

/// For the signal thread: whether `sig` is to be put off (the first SIGINT
/// or SIGTERM while a stream is read); false when it should end the process.
pub fn put_off(sig: i32) -> bool {
    put_off_in(&STATE, sig)
}

/// [`reading_a_stream`] on `state`.
fn streaming(state: &AtomicU8) {
    let _ = state.compare_exchange(IDLE, STREAMING, Ordering::SeqCst, Ordering::SeqCst);
}

/// [`put_off`] on `state`.
fn put_off_in(state: &AtomicU8, sig: i32) -> bool {
    (sig == libc::SIGINT || sig == libc::SIGTERM)
        && state
            .compare_exchange(STREAMING, PUT_OFF, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Nothing is put off before a stream is read; then the first SIGINT or
    // SIGTERM is, never SIGHUP, and never a second signal.
    #[test]
    fn only_the_first_signal_while_streaming_is_put_off() {
        let state = AtomicU8::new(IDLE);
        assert!(!put_off_in(&state, libc::SIGINT));
        streaming(&state);
        assert!(!put_off_in(&state, libc::SIGHUP));
        assert!(put_off_in(&state, libc::SIGTERM));
        assert!(!put_off_in(&state, libc::SIGINT));
        streaming(&state);
        assert!(!put_off_in(&state, libc::SIGINT));
    }
}
