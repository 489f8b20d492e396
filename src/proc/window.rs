//! An ordered window over parallel work: workers take indexes in order and
//! finish them in any order; one consumer receives the results in index
//! order. A worker may hand an index's result on in parts ([`Window::part`],
//! then [`Window::done`] with the last), which the consumer receives in
//! order as they come, so one big item need not be held whole. What is held
//! is bounded twice: by count (a worker starts index `i` only while `i` is
//! fewer than `ahead` past the one the consumer takes next) and by weight
//! (no new index, and no further part of any index but the one the consumer
//! is on, while what waits for the consumer weighs more than `budget`). The
//! consumer is woken once a batch of results is ready in order, or for each
//! part of the index it is on, not for each result, so a consumer faster
//! than the workers does not sleep and wake per item.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// See the module doc.
pub(crate) struct Window<T> {
    state: Mutex<State<T>>,
    /// The consumer waits on this one.
    consumer: Condvar,
    /// Workers wait on this one.
    workers: Condvar,
    ahead: usize,
    budget: usize,
    /// In-order results that wake the consumer.
    batch: usize,
    len: usize,
}

/// The parts of one index waiting for the consumer.
struct Slot<T> {
    /// Parts handed on and not yet taken, with their weights.
    parts: VecDeque<(T, usize)>,
    /// The last part was handed on.
    done: bool,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            parts: VecDeque::new(),
            done: false,
        }
    }
}

struct State<T> {
    /// The next index a worker takes.
    next: usize,
    /// The index the consumer takes next.
    taken: usize,
    /// Slots by index from `taken` on.
    ready: VecDeque<Slot<T>>,
    /// The total weight of the parts waiting.
    weight: usize,
    /// Slots done in order from `taken` on.
    in_order: usize,
    /// Who is asleep.
    consumer_waits: bool,
    workers_waiting: usize,
    /// Stopped (an error, a panic, or the end): workers take no more.
    stopped: bool,
}

impl<T> State<T> {
    /// Whether the index the consumer is on has a part waiting.
    fn front_has_part(&self) -> bool {
        self.ready.front().is_some_and(|s| !s.parts.is_empty())
    }

    /// Adds a part of index `i`; `last` ends the index.
    fn push(&mut self, i: usize, t: T, weight: usize, last: bool) {
        let slot = i - self.taken;
        if self.ready.len() <= slot {
            self.ready.resize_with(slot + 1, Slot::default);
        }
        self.ready[slot].parts.push_back((t, weight));
        self.weight += weight;
        if last {
            self.ready[slot].done = true;
            while self.ready.get(self.in_order).is_some_and(|s| s.done) {
                self.in_order += 1;
            }
        }
    }
}

impl<T> Window<T> {
    /// A window over indexes `0..len`.
    pub(crate) fn new(len: usize, ahead: usize, budget: usize) -> Self {
        let ahead = ahead.max(1);
        Window {
            state: Mutex::new(State {
                next: 0,
                taken: 0,
                ready: VecDeque::new(),
                weight: 0,
                in_order: 0,
                consumer_waits: false,
                workers_waiting: 0,
                stopped: false,
            }),
            consumer: Condvar::new(),
            workers: Condvar::new(),
            ahead,
            budget,
            batch: (ahead / 2).max(1),
            len,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // every update is a few assignments: a panic cannot leave it torn
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the consumer, if asleep, should wake: the index it is on has
    /// a part waiting and either is unfinished (its worker streams it) or a
    /// batch is ready, or nothing else will come sooner (workers asleep, or
    /// no index left to start).
    fn wake_consumer(&self, st: &State<T>) -> bool {
        st.consumer_waits
            && st.front_has_part()
            && (st.in_order == 0
                || st.in_order >= self.batch
                || st.workers_waiting > 0
                || st.next >= self.len
                || st.stopped)
    }

    /// Sleeps as a worker until woken.
    fn worker_wait<'a>(&'a self, mut st: MutexGuard<'a, State<T>>) -> MutexGuard<'a, State<T>> {
        st.workers_waiting += 1;
        if self.wake_consumer(&st) {
            self.consumer.notify_one();
        }
        st = self.workers.wait(st).unwrap_or_else(|e| e.into_inner());
        st.workers_waiting -= 1;
        st
    }

    /// The next index to work on, once the window has room; None when all
    /// are taken or the window stopped.
    pub(crate) fn next(&self) -> Option<usize> {
        let mut st = self.lock();
        loop {
            if st.stopped || st.next >= self.len {
                return None;
            }
            if st.next < st.taken.saturating_add(self.ahead) && st.weight <= self.budget {
                st.next += 1;
                return Some(st.next - 1);
            }
            st = self.worker_wait(st);
        }
    }

    /// Hands on a part of index `i` (from [`Window::next`]), weighing
    /// `weight`, more to follow. First waits while what is waiting weighs
    /// more than the budget, unless `i` is the index the consumer is on and
    /// none of its parts are waiting (so the window always moves: what
    /// waits is then the consumer's to take). False when the window
    /// stopped: the part was dropped, and the worker should give `i` up.
    pub(crate) fn part(&self, i: usize, t: T, weight: usize) -> bool {
        let mut st = self.lock();
        loop {
            if st.stopped {
                return false;
            }
            // the index the consumer is on waits only for its own parts
            // to be taken, so the window always moves
            let own_waiting = i == st.taken && st.front_has_part();
            if st.weight <= self.budget || (i == st.taken && !own_waiting) {
                break;
            }
            st = self.worker_wait(st);
        }
        st.push(i, t, weight, false);
        if self.wake_consumer(&st) {
            self.consumer.notify_one();
        }
        true
    }

    /// Index `i` (from [`Window::next`]) is done: `t`, its last part,
    /// weighing `weight`.
    pub(crate) fn done(&self, i: usize, t: T, weight: usize) {
        let mut st = self.lock();
        st.push(i, t, weight, true);
        if self.wake_consumer(&st) {
            self.consumer.notify_one();
        }
    }

    /// The next part in order, waiting for it; None when every index was
    /// taken, or the window stopped first.
    pub(crate) fn take(&self) -> Option<T> {
        let mut st = self.lock();
        loop {
            if st.taken >= self.len {
                return None;
            }
            if let Some(front) = st.ready.front_mut() {
                if let Some((t, weight)) = front.parts.pop_front() {
                    if front.done && front.parts.is_empty() {
                        st.ready.pop_front();
                        st.in_order -= 1;
                        st.taken += 1;
                    }
                    st.weight -= weight;
                    if st.workers_waiting > 0 {
                        self.workers.notify_all();
                    }
                    return Some(t);
                }
            }
            if st.stopped {
                return None;
            }
            st.consumer_waits = true;
            st = self.consumer.wait(st).unwrap_or_else(|e| e.into_inner());
            st.consumer_waits = false;
        }
    }

    /// Stops the window: workers take no more, a waiting consumer returns
    /// what is ready in order, then None.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.workers.notify_all();
        self.consumer.notify_all();
    }

    /// A guard that stops the window when dropped (`only_panics`: only if
    /// its thread is panicking).
    pub(crate) fn stop_on_drop(&self, only_panics: bool) -> StopOnDrop<'_, T> {
        StopOnDrop(self, only_panics)
    }
}

/// See [`Window::stop_on_drop`].
pub(crate) struct StopOnDrop<'a, T>(&'a Window<T>, bool);

impl<T> Drop for StopOnDrop<'_, T> {
    fn drop(&mut self) {
        if !self.1 || std::thread::panicking() {
            self.0.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    /// Runs `f` on a thread, failing the test after 60 s (a deadlock must
    /// fail, not hang the suite).
    fn bounded<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(f()).unwrap());
        rx.recv_timeout(Duration::from_secs(60))
            .expect("done within 60 s")
    }

    /// Runs `workers` threads over `len` items weighing `weight(i)`, the
    /// consumer taking `take` items; returns what it got, the most results
    /// held (started and not yet taken) and the most weight they held (a
    /// result's weight counts from its start, as a worker's memory would).
    fn run(
        len: usize,
        workers: usize,
        (ahead, budget): (usize, usize),
        weight: fn(usize) -> usize,
        take: usize,
    ) -> (Vec<usize>, usize, usize) {
        bounded(move || {
            let w = Window::new(len, ahead, budget);
            let held = AtomicUsize::new(0);
            let most = AtomicUsize::new(0);
            let held_weight = AtomicUsize::new(0);
            let most_weight = AtomicUsize::new(0);
            let mut got = Vec::new();
            std::thread::scope(|s| {
                for k in 0..workers {
                    let (w, held, most) = (&w, &held, &most);
                    let (held_weight, most_weight) = (&held_weight, &most_weight);
                    s.spawn(move || {
                        let _stop = w.stop_on_drop(true);
                        while let Some(i) = w.next() {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            let now =
                                held_weight.fetch_add(weight(i), Ordering::SeqCst) + weight(i);
                            most_weight.fetch_max(now, Ordering::SeqCst);
                            // uneven work, so results finish out of order
                            if (i + k) % 3 == 0 {
                                std::thread::yield_now();
                            }
                            w.done(i, i, weight(i));
                        }
                    });
                }
                let _stop = w.stop_on_drop(false);
                while got.len() < take {
                    let Some(i) = w.take() else { break };
                    held.fetch_sub(1, Ordering::SeqCst);
                    held_weight.fetch_sub(weight(i), Ordering::SeqCst);
                    got.push(i);
                }
            });
            (got, most.into_inner(), most_weight.into_inner())
        })
    }

    // All results arrive in order whatever the workers' pace, and no more
    // than `ahead` are ever started and not yet taken.
    #[test]
    fn ordered_and_bounded_by_count() {
        for workers in [1, 2, 5] {
            let (got, most, _) = run(1000, workers, (8, usize::MAX), |_| 1, usize::MAX);
            assert_eq!(got, (0..1000).collect::<Vec<_>>(), "{workers} workers");
            // `ahead`, plus the one the consumer took and has not counted yet
            assert!(most <= 8 + 1, "{most} held with {workers} workers");
        }
    }

    // Heavy results stop new work: the weight held never exceeds the budget
    // plus one result per worker in progress and the one the consumer is
    // counting (without the budget, 64 ahead would hold about 350).
    #[test]
    fn bounded_by_weight() {
        for workers in [1, 3] {
            let (got, _, most_weight) = run(
                200,
                workers,
                (64, 10),
                |i| if i % 2 == 0 { 10 } else { 1 },
                usize::MAX,
            );
            assert_eq!(got, (0..200).collect::<Vec<_>>());
            let bound = 10 + (workers + 1) * 10;
            assert!(most_weight <= bound, "{most_weight} held, bound {bound}");
        }
    }

    // A consumer that stops early (its sink failed) ends the workers too.
    #[test]
    fn consumer_stop_ends_workers() {
        let (got, _, _) = run(100_000, 2, (16, usize::MAX), |_| 1, 10);
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    /// Runs `workers` threads over `len` items, item `i` handed on in
    /// `parts(i)` parts of weight 10 each; returns the (item, part) pairs
    /// the consumer got and the most weight held (a part counting from just
    /// before it is handed on until the consumer has it).
    fn run_parts(
        len: usize,
        workers: usize,
        budget: usize,
        parts: fn(usize) -> usize,
    ) -> (Vec<(usize, usize)>, usize) {
        bounded(move || {
            let w = Window::new(len, 8, budget);
            let held = AtomicUsize::new(0);
            let most = AtomicUsize::new(0);
            let mut got = Vec::new();
            std::thread::scope(|s| {
                for _ in 0..workers {
                    let (w, held, most) = (&w, &held, &most);
                    s.spawn(move || {
                        let _stop = w.stop_on_drop(true);
                        while let Some(i) = w.next() {
                            let n = parts(i);
                            for j in 0..n {
                                let now = held.fetch_add(10, Ordering::SeqCst) + 10;
                                most.fetch_max(now, Ordering::SeqCst);
                                if j + 1 == n {
                                    w.done(i, (i, j), 10);
                                } else if !w.part(i, (i, j), 10) {
                                    return;
                                }
                            }
                        }
                    });
                }
                let _stop = w.stop_on_drop(false);
                while let Some(p) = w.take() {
                    held.fetch_sub(10, Ordering::SeqCst);
                    got.push(p);
                }
            });
            (got, most.into_inner())
        })
    }

    // Items handed on in parts arrive whole and in order, and a big item
    // waits at the budget instead of piling up, whether the consumer is on
    // it or not: at most the budget plus, per worker, a part let past it and
    // one in hand, the consumer's index's part and the one being counted
    // (with no wait in `part`, over 400).
    #[test]
    fn parts_in_order_and_bounded() {
        let parts = |i: usize| if i % 4 == 1 { 40 } else { 1 + i % 3 };
        for workers in [1, 2, 4] {
            let (got, most) = run_parts(64, workers, 30, parts);
            let want: Vec<(usize, usize)> = (0..64)
                .flat_map(|i| (0..parts(i)).map(move |j| (i, j)))
                .collect();
            assert_eq!(got, want, "{workers} workers");
            let bound = 30 + (2 * workers + 2) * 10;
            assert!(
                most <= bound,
                "{most} held with {workers} workers, bound {bound}"
            );
        }
    }

    // A stopped window refuses further parts, so a worker streaming a big
    // item gives it up instead of blocking for ever.
    #[test]
    fn stopped_window_refuses_parts() {
        let w: Window<usize> = Window::new(4, 4, 0);
        let (a, b) = (w.next().unwrap(), w.next().unwrap());
        assert!(
            w.part(a, 1, 5),
            "the consumer's index waits only for its own parts"
        );
        w.stop();
        assert!(!w.part(b, 2, 5));
        assert!(!w.part(a, 3, 5));
    }
}
