//! Signals while `record` runs perf: SIGINT, SIGTERM and SIGHUP go to
//! perf (so it finishes its file), held while perf is being started.

/// Where `record` is with perf, for the signal thread ([`on_signal`]).
enum PerfState {
    /// No perf to hand signals to: they end mmap2-synth.
    Idle,
    /// perf is being started: a signal waits for it (the first one).
    Spawning(Option<i32>),
    /// perf runs: signals go to it, through its pidfd when the kernel has
    /// them (held here, so it cannot close while a signal is sent).
    Running(Option<std::os::fd::OwnedFd>),
}

static PERF: std::sync::Mutex<PerfState> = std::sync::Mutex::new(PerfState::Idle);

/// Set in the signal handler itself when SIGINT, SIGTERM or SIGHUP
/// reaches us (Ctrl-C reaches the whole process group): the user asked
/// the run to end. Not left to the thread that reads the signals, which
/// may run only after perf has died of the same Ctrl-C and been reaped.
static ASKED: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
    std::sync::OnceLock::new();

/// The flag [`ASKED`], its handlers registered on first use.
fn asked() -> &'static std::sync::atomic::AtomicBool {
    ASKED.get_or_init(|| {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let _ = signal_hook::flag::register(sig, flag.clone());
        }
        flag
    })
}

/// The signal perf died of, when it is one it got because the user asked
/// the run to end (SIGINT or SIGTERM, SIGHUP passed on as SIGTERM; after a
/// SIGINT perf may die of the SIGTERM it sends its workload): perf stopped
/// as asked, it did not fail.
pub(super) fn stopped_as_asked(died_of: Option<i32>) -> Option<i32> {
    let asked = asked().load(std::sync::atomic::Ordering::SeqCst);
    died_of.filter(|&s| asked && (s == libc::SIGINT || s == libc::SIGTERM))
}

fn perf_state() -> std::sync::MutexGuard<'static, PerfState> {
    PERF.lock().unwrap_or_else(|e| e.into_inner())
}

/// What perf is sent for a signal mmap2-synth got: SIGHUP as SIGTERM,
/// which perf handles (it finishes its file; SIGHUP would kill it).
fn for_perf(sig: i32) -> i32 {
    if sig == libc::SIGHUP {
        libc::SIGTERM
    } else {
        sig
    }
}

/// Takes SIGINT, SIGTERM or SIGHUP for perf while `record` runs it: true
/// when it was passed on (or kept for a perf being started), so the
/// signal thread must not end the process; false when it should.
pub(crate) fn on_signal(sig: i32) -> bool {
    use std::os::fd::AsRawFd;
    match &mut *perf_state() {
        PerfState::Idle => false,
        PerfState::Spawning(pending) => {
            pending.get_or_insert(sig);
            true
        }
        PerfState::Running(Some(pidfd)) => {
            mmap2_synth::sys::pidfd_send_signal(pidfd.as_raw_fd(), for_perf(sig)).is_ok()
        }
        // no pidfd (Linux < 5.3): Ctrl-C reaches perf through the process
        // group; anything else ends us
        PerfState::Running(None) => sig == libc::SIGINT,
    }
}

/// Routes the signals that would end us to perf while it runs (see
/// [`on_signal`]), from [`SignalsToPerf::spawning`] until dropped.
pub(super) struct SignalsToPerf;

impl SignalsToPerf {
    /// Holds signals back while perf is started.
    pub(super) fn spawning() -> SignalsToPerf {
        // (noted from now on, for perf's end: see stopped_as_asked)
        asked();
        *perf_state() = PerfState::Spawning(None);
        SignalsToPerf
    }

    /// perf started: signals go to it from now on, and one that came while
    /// it was being started goes now (without a pidfd, anything but Ctrl-C
    /// kills it: it would be recording on, with nobody to merge its file).
    pub(super) fn started(&self, perf: &mut std::process::Child) {
        use std::os::fd::AsRawFd;
        let pidfd = mmap2_synth::sys::pidfd_open(perf.id()).ok();
        let mut st = perf_state();
        let pending = match &*st {
            PerfState::Spawning(p) => *p,
            _ => None,
        };
        if let Some(sig) = pending {
            match &pidfd {
                Some(fd) => {
                    let _ = mmap2_synth::sys::pidfd_send_signal(fd.as_raw_fd(), for_perf(sig));
                }
                None if sig != libc::SIGINT => {
                    let _ = perf.kill();
                }
                None => {}
            }
        }
        *st = PerfState::Running(pidfd);
    }
}

impl Drop for SignalsToPerf {
    fn drop(&mut self) {
        // the pidfd closes here, under the lock
        let was = std::mem::replace(&mut *perf_state(), PerfState::Idle);
        // a signal held for a perf that never started (its start failed):
        // ours to end with, as it would have been
        if let PerfState::Spawning(Some(sig)) = was {
            mmap2_synth::output::remove_temporaries();
            super::remove_scratch();
            std::process::exit(128 + sig);
        }
    }
}
