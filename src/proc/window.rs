//! An ordered window over parallel work: workers take indexes in order and
//! finish them in any order; one consumer receives the results in index
//! order. What is held is bounded twice: by count (a worker starts index `i`
//! only while `i` is fewer than `ahead` past the one the consumer takes
//! next) and by weight (no new index while the results waiting for the
//! consumer weigh more than `budget`). The consumer is woken once a batch
//! of results is ready in order, not for each one, so a consumer faster
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

struct State<T> {
    /// The next index a worker takes.
    next: usize,
    /// The index the consumer takes next.
    taken: usize,
    /// Results by index from `taken` on, with their weights.
    ready: VecDeque<Option<(T, usize)>>,
    /// Their total weight.
    weight: usize,
    /// Results ready in order from `taken` on.
    in_order: usize,
    /// Who is asleep.
    consumer_waits: bool,
    workers_waiting: usize,
    /// Stopped (an error, a panic, or the end): workers take no more.
    stopped: bool,
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

    /// Whether the consumer, if asleep, should wake: the next result is
    /// there and a batch is, or nothing else will come sooner (workers
    /// asleep, or no index left to start).
    fn wake_consumer(&self, st: &State<T>) -> bool {
        st.consumer_waits
            && st.in_order > 0
            && (st.in_order >= self.batch
                || st.workers_waiting > 0
                || st.next >= self.len
                || st.stopped)
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
            st.workers_waiting += 1;
            if self.wake_consumer(&st) {
                self.consumer.notify_one();
            }
            st = self.workers.wait(st).unwrap_or_else(|e| e.into_inner());
            st.workers_waiting -= 1;
        }
    }

    /// Index `i` (from [`Window::next`]) is done: `t`, weighing `weight`.
    pub(crate) fn done(&self, i: usize, t: T, weight: usize) {
        let mut st = self.lock();
        let slot = i - st.taken;
        if st.ready.len() <= slot {
            st.ready.resize_with(slot + 1, || None);
        }
        st.ready[slot] = Some((t, weight));
        st.weight += weight;
        while st.ready.get(st.in_order).is_some_and(Option::is_some) {
            st.in_order += 1;
        }
        if self.wake_consumer(&st) {
            self.consumer.notify_one();
        }
    }

    /// The result of the next index, waiting for it; None when every index
    /// was taken, or the window stopped first.
    pub(crate) fn take(&self) -> Option<T> {
        let mut st = self.lock();
        loop {
            if st.taken >= self.len {
                return None;
            }
            if st.in_order > 0 {
                let (t, weight) = st
                    .ready
                    .pop_front()
                    .flatten()
                    .expect("in_order counts filled slots at the front");
                st.in_order -= 1;
                st.taken += 1;
                st.weight -= weight;
                if st.workers_waiting > 0 {
                    self.workers.notify_all();
                }
                return Some(t);
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
}
