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
/// end (the first condition variable); [`Progress::sync`] waits on the
/// second for a drain to complete.
#[derive(Debug, Default)]
pub struct Progress(Mutex<Drains>, Condvar, Condvar);

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
    /// New processes the drains saw forked, (pid, parent pid), not yet
    /// taken by [`Progress::sync`].
    forked: Vec<(u32, u32)>,
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
        self.2.notify_all();
    }

    /// Notes the new processes a drain saw forked (before it completes).
    pub fn forked(&self, forked: &mut Vec<(u32, u32)>) {
        self.lock().forked.append(forked);
    }

    /// Asks for a drain now and waits for it, at most `timeout`: the new
    /// processes the drains saw forked that no sync took yet, every fork
    /// before the call among them (None when the drain did not complete
    /// in time, or the drainer failed or stopped).
    pub fn sync(&self, timeout: Duration) -> Option<Vec<(u32, u32)>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut d = self.lock();
        // a drain begun after now
        let want = d.begun + 1;
        d.nudged = true;
        self.1.notify_one();
        while d.done < want && !d.failed && !d.stop {
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            d = match self.2.wait_timeout(d, left) {
                Ok((d, _)) => d,
                Err(e) => e.into_inner().0,
            };
        }
        (d.done >= want && !d.failed).then(|| std::mem::take(&mut d.forked))
    }

    /// Marks the drainer failed (see [`Drains::settles`]).
    pub(super) fn fail(&self) {
        self.lock().failed = true;
        self.2.notify_all();
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
        self.2.notify_all();
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

    // A sync is answered by a drain begun after it (with the forks the
    // drains saw, once), and by nothing in time when no drain comes or the
    // drainer failed.
    #[test]
    fn a_sync_waits_for_a_drain_begun_after_it() {
        let p = std::sync::Arc::new(Progress::default());
        let under_way = p.begin();
        assert_eq!(p.sync(Duration::from_millis(20)), None, "no drain came");
        assert!(!p.wait(Duration::ZERO), "its nudge, taken here");
        let drainer = {
            let p = std::sync::Arc::clone(&p);
            std::thread::spawn(move || {
                // the one under way completes, then one begun after the sync
                p.forked(&mut vec![(5, 1)]);
                p.complete(under_way, &mut HashSet::new(), false);
                assert!(!p.wait(Duration::from_secs(30)), "nudged by the sync");
                let n = p.begin();
                p.forked(&mut vec![(6, 5)]);
                p.complete(n, &mut HashSet::new(), false);
            })
        };
        let got = p.sync(Duration::from_secs(30));
        drainer.join().unwrap();
        assert_eq!(got, Some(vec![(5, 1), (6, 5)]));
        let n = p.begin();
        p.complete(n, &mut HashSet::new(), false);
        p.fail();
        assert_eq!(p.sync(Duration::from_secs(30)), None, "failed");
    }
}
