//! How far the watch's drainer has got, shared with the snapshot writer.

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How far the drainer has got, so a writer keeps the map ranges of a
/// scanned process only if the watch may hold a record of one of its pid.
/// The kernel writes a map's record into a ring before the new VMA can be
/// read, so a drain begun after a process was read has taken every record
/// of the maps that read saw. The drainer waits on it between drains, for
/// its period, a nudge (the writer has records waiting for a drain) or the
/// end.
#[derive(Debug, Default)]
pub struct Progress(Mutex<Drains>, Condvar);

/// The drains so far (see [`Progress`]).
#[derive(Debug, Default)]
pub struct Drains {
    begun: u64,
    done: u64,
    /// Pids of the MMAP2 records the completed drains took.
    mapped: HashSet<u32>,
    /// The drainer stopped taking records (its cap): any pid may have
    /// maps in the rings.
    all: bool,
    /// The drainer failed (panicked): nothing it took is used, so nothing
    /// waits for it.
    failed: bool,
    /// A drain is asked for now.
    nudged: bool,
    /// The watch is ending: the last drain comes.
    stop: bool,
}

impl Progress {
    /// The drains, locked: the lock orders a mark against the drains.
    pub fn lock(&self) -> MutexGuard<'_, Drains> {
        // a drainer that panicked holding it left whole counts behind
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a drain: its number.
    pub fn begin(&self) -> u64 {
        let mut d = self.lock();
        d.begun += 1;
        d.begun
    }

    /// Ends drain `n`, which took MMAP2 records of `mapped` (`all`: it
    /// took none, the cap reached).
    pub fn complete(&self, n: u64, mapped: &mut HashSet<u32>, all: bool) {
        let mut d = self.lock();
        d.mapped.extend(mapped.drain());
        d.all |= all;
        d.done = d.done.max(n);
    }

    /// Marks the drainer failed (see [`Drains::settles`]).
    pub(super) fn fail(&self) {
        self.lock().failed = true;
    }

    /// Asks for a drain now rather than at the end of the period.
    pub fn nudge(&self) {
        self.lock().nudged = true;
        self.1.notify_one();
    }

    /// Tells the drainer to make its last drain.
    pub(super) fn stop(&self) {
        self.lock().stop = true;
        self.1.notify_one();
    }

    /// The drainer's wait: until `period` has passed, a nudge or the stop
    /// (then true).
    pub(crate) fn wait(&self, period: Duration) -> bool {
        let mut d = self.lock();
        if !d.nudged && !d.stop {
            d = match self.1.wait_timeout(d, period) {
                Ok((d, _)) => d,
                Err(e) => e.into_inner().0,
            };
        }
        d.nudged = false;
        d.stop
    }
}

/// Marks a [`Progress`] failed if its drainer unwinds past this.
pub(super) struct FailOnPanic<'a>(pub(super) &'a Progress);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail();
        }
    }
}

impl Drains {
    /// A mark for what was read before now: [`Drains::settles`] it once a
    /// drain begun after it has completed.
    pub fn mark(&self) -> u64 {
        self.begun
    }

    /// Whether the drains have taken every record written before `mark`.
    pub fn settles(&self, mark: u64) -> bool {
        self.failed || self.done > mark
    }

    /// Whether the drains took a map record of `pid` (or may have left
    /// one in the rings).
    pub fn mapped(&self, pid: u32) -> bool {
        !self.failed && (self.all || self.mapped.contains(&pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The drainer's wait ends at once on a nudge (a drain, not the end)
    // and on the stop, and after its period otherwise.
    #[test]
    fn the_drainers_wait_ends_on_a_nudge_or_the_stop() {
        let p = Progress::default();
        let t = std::time::Instant::now();
        assert!(!p.wait(Duration::from_millis(20)), "the period");
        assert!(t.elapsed() >= Duration::from_millis(20));
        p.nudge();
        let t = std::time::Instant::now();
        assert!(!p.wait(Duration::from_secs(30)), "a nudge: drain");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        p.stop();
        assert!(p.wait(Duration::from_secs(30)), "the stop");
    }

    // A failed drainer settles every mark and maps no pid: the writer's
    // waiting ranges are dropped, not held to the end of the scan.
    #[test]
    fn a_failed_drainer_settles_everything() {
        let p = Progress::default();
        let n = p.begin();
        p.complete(n, &mut HashSet::from([7]), false);
        let mark = p.lock().mark();
        assert!(!p.lock().settles(mark) && p.lock().mapped(7));
        p.fail();
        assert!(p.lock().settles(mark + 5) && !p.lock().mapped(7));
    }

    // A mark is settled only by a drain begun after it, once completed.
    #[test]
    fn drains_settle_marks_after_their_start() {
        let p = Progress::default();
        let first = p.begin();
        let mark = p.lock().mark();
        p.complete(first, &mut HashSet::from([5]), false);
        assert!(!p.lock().settles(mark), "begun before the mark");
        let second = p.begin();
        assert!(!p.lock().settles(mark), "begun, not completed");
        p.complete(second, &mut HashSet::new(), false);
        let d = p.lock();
        assert!(d.settles(mark));
        assert!(d.mapped(5) && !d.mapped(6));
    }
}
