//! Lanes: a bound on the `/dev/fuse` workers any one group of requests may
//! hold at once (an rcufs addition; see PATCHES.md).
//!
//! A filesystem names a request's lane with [`Filesystem::lane`] (rcufs:
//! the device of a filesystem mounted under its source that can stop
//! answering, such as NFS or another FUSE filesystem). At most
//! [`Config::lane_width`] workers run requests of one lane, and at most
//! all workers but one run requests of any lane (the budget); a request
//! that finds its lane full, or the budget spent, is copied out of the
//! worker's buffer and queued, and the worker goes back to reading
//! `/dev/fuse`. A worker that finishes a request of a lane runs that
//! lane's queued requests, in arrival order, and then those of another
//! lane that waited for the budget, before it reads again. So lanes whose
//! requests never return hold their width of workers each, and all of
//! them together never the last worker (but for [`Entry::Over`]); their
//! queued callers wait, and cannot be interrupted, since the kernel waits
//! for a request the daemon has read.
//!
//! Invariant, under the mutex: a lane's queue is non-empty only while the
//! lane runs `width` requests or the budget is spent (a request is queued
//! only then; a worker leaves a lane with a queue only for another while
//! the budget stays spent, and leaving one frees the budget only with its
//! queue empty, then takes a request of a lane left waiting for the
//! budget); so a request that finds room overtakes no queued request of
//! its lane. While the budget is spent, a worker finishing a lane's request
//! takes the first arrived of the requests that may run (its own lane's
//! or a waiting lane's), so one busy lane does not keep the others out.
//! The
//! queues hold at most
//! [`MAX_QUEUED_BYTES`]; past that a request runs at once, outside its
//! lane's count and ahead of its queue ([`Entry::Over`]).
//!
//! [`Filesystem::lane`]: crate::Filesystem::lane
//! [`Config::lane_width`]: crate::Config::lane_width

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The lanes of one session; `T` is a queued request (its bytes, and the
/// channel it came from, which its reply must go back through: each
/// worker's cloned `/dev/fuse` descriptor has its own list of requests in
/// flight, and a reply written to another is refused with `ENOENT`).
#[derive(Debug)]
pub(crate) struct Lanes<T> {
    width: usize,
    budget: usize,
    lanes: Mutex<Inner<T>>,
}

/// The most bytes of requests queued in all lanes together. Past it a
/// request runs at once outside its lane's count ([`Entry::Over`]), so that
/// callers piling writes onto a filesystem that stopped cannot grow the
/// daemon's memory without bound; they then hold workers, as without
/// lanes.
pub(crate) const MAX_QUEUED_BYTES: usize = 64 << 20;

/// What a request arriving in a lane does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Run it now, then run the lane's queue ([`Lanes::next`]).
    Run,
    /// It was queued.
    Queued,
    /// The queues are full: run it now, outside the lane's count.
    Over,
}

#[derive(Debug)]
struct Lane<T> {
    running: usize,
    /// Queued requests, their sizes and arrival numbers.
    queued: VecDeque<(T, usize, u64)>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Self {
            running: 0,
            queued: VecDeque::new(),
        }
    }
}

/// The lanes, the requests they run and the bytes queued in them.
#[derive(Debug)]
struct Inner<T> {
    lanes: HashMap<u64, Lane<T>>,
    running: usize,
    bytes: usize,
    /// The next arrival number.
    arrivals: u64,
}

impl<T> Inner<T> {
    /// The lane whose queue's head arrived first among the lanes that
    /// `may` run it.
    fn oldest(&self, may: impl Fn(u64, &Lane<T>) -> bool) -> Option<u64> {
        self.lanes
            .iter()
            .filter(|&(&k, l)| may(k, l))
            .filter_map(|(&k, l)| Some((l.queued.front()?.2, k)))
            .min()
            .map(|(_, k)| k)
    }
}

impl<T> Lanes<T> {
    /// Lanes of `width` workers each (0: none), `budget` workers in all.
    pub(crate) fn new(width: usize, budget: usize) -> Self {
        Self {
            width: width.min(budget),
            budget,
            lanes: Mutex::new(Inner {
                lanes: HashMap::new(),
                running: 0,
                bytes: 0,
                arrivals: 0,
            }),
        }
    }

    /// Whether requests are put in lanes at all.
    pub(crate) fn enabled(&self) -> bool {
        self.width > 0
    }

    /// A request of `lane`, of `size` bytes, arrives; if it is queued,
    /// `copy()` is queued in its place.
    pub(crate) fn enter(&self, lane: u64, size: usize, copy: impl FnOnce() -> T) -> Entry {
        let mut inner = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let (bytes, room) = (inner.bytes, inner.running < self.budget);
        let l = inner.lanes.entry(lane).or_default();
        if l.running < self.width && room {
            l.running += 1;
            inner.running += 1;
            return Entry::Run;
        }
        if bytes + size > MAX_QUEUED_BYTES {
            if l.running == 0 && l.queued.is_empty() {
                inner.lanes.remove(&lane);
            }
            return Entry::Over;
        }
        let arrival = inner.arrivals;
        let l = inner.lanes.get_mut(&lane).expect("listed above");
        l.queued.push_back((copy(), size, arrival));
        inner.arrivals += 1;
        inner.bytes += size;
        Entry::Queued
    }

    /// After running a request of `lane` (entered with [`Entry::Run`], or
    /// returned by this): the next queued request to run and its lane, or
    /// `None` once the caller has left every lane. While the budget is
    /// spent, that is the request that arrived first among this lane's
    /// and those of lanes with room in their width that wait for the
    /// budget (so that a busy lane does not keep the budget from the
    /// others); otherwise this lane's next, then the first arrived of
    /// any lane's that waited.
    pub(crate) fn next(&self, lane: u64) -> Option<(u64, T)> {
        let mut inner = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let width = self.width;
        let to = if inner.running == self.budget {
            inner.oldest(|k, l| k == lane || l.running < width)
        } else if inner.lanes[&lane].queued.is_empty() {
            None
        } else {
            Some(lane)
        };
        if to != Some(lane) {
            // Leaves this lane (the budget stays spent if it moves to
            // another, so this lane's queue may stay non-empty).
            let l = inner.lanes.get_mut(&lane).expect("a running lane is listed");
            l.running -= 1;
            if l.running == 0 && l.queued.is_empty() {
                inner.lanes.remove(&lane);
            }
            inner.running -= 1;
        }
        let to = match to {
            Some(k) => k,
            // A lane that waited for the budget (its queue is non-empty
            // with room in its width).
            None => inner.oldest(|_, l| l.running < width)?,
        };
        let l = inner.lanes.get_mut(&to).expect("a lane with a queue is listed");
        let (req, size, _) = l.queued.pop_front().expect("a non-empty queue");
        if to != lane {
            l.running += 1;
            inner.running += 1;
        }
        inner.bytes -= size;
        Some((to, req))
    }

    /// The session is over (the connection was unmounted or aborted):
    /// drops every queued request unrun, so that none is applied after its
    /// caller was told the connection was gone; workers still running a
    /// lane's request then find its queue empty and leave.
    pub(crate) fn close(&self) {
        let mut inner = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        for l in inner.lanes.values_mut() {
            l.queued.clear();
        }
        inner.lanes.retain(|_, l| l.running > 0);
        inner.bytes = 0;
    }

    /// Requests queued now, over all lanes.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.lanes.lock().unwrap().lanes.values().map(|l| l.queued.len()).sum()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_full_lane_queues_in_order_and_its_last_worker_runs_the_queue() {
        let lanes = Lanes::<Vec<u8>>::new(1, 8);
        assert_eq!(lanes.enter(7, 1, || unreachable!()), Entry::Run);
        // The lane is full: the next two are queued, another lane is not.
        assert_eq!(lanes.enter(7, 1, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(7, 1, || vec![2]), Entry::Queued);
        assert_eq!(lanes.enter(8, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.queued(), 2);
        assert_eq!(lanes.next(7), Some((7, vec![1])));
        assert_eq!(lanes.next(7), Some((7, vec![2])));
        assert_eq!(lanes.next(7), None);
        // Left: the next request of the lane runs at once.
        assert_eq!(lanes.enter(7, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.next(7), None);
        assert_eq!(lanes.next(8), None);
        assert!(lanes.lanes.lock().unwrap().lanes.is_empty());
    }

    #[test]
    fn a_lane_runs_its_width_at_once() {
        let lanes = Lanes::<Vec<u8>>::new(2, 8);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || vec![3]), Entry::Queued);
        // One of the two leaves only after the queue is run.
        assert_eq!(lanes.next(1), Some((1, vec![3])));
        assert_eq!(lanes.next(1), None);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.next(1), None);
        assert_eq!(lanes.next(1), None);
        assert!(lanes.lanes.lock().unwrap().lanes.is_empty());
    }

    #[test]
    fn past_the_byte_bound_a_request_runs_outside_its_lane() {
        let lanes = Lanes::<Vec<u8>>::new(1, 8);
        assert_eq!(lanes.enter(1, 10, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, MAX_QUEUED_BYTES - 10, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(1, 11, || unreachable!()), Entry::Over);
        assert_eq!(lanes.enter(2, 11, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(2, 11, || unreachable!()), Entry::Over);
        assert_eq!(lanes.enter(1, 10, || vec![2]), Entry::Queued);
        assert_eq!(lanes.next(1), Some((1, vec![1])));
        // Room again.
        assert_eq!(lanes.enter(2, 11, || vec![3]), Entry::Queued);
        assert_eq!(lanes.next(1), Some((1, vec![2])));
        assert_eq!(lanes.next(1), None);
        assert_eq!(lanes.next(2), Some((2, vec![3])));
        assert_eq!(lanes.next(2), None);
        assert_eq!(lanes.lanes.lock().unwrap().bytes, 0);
    }

    #[test]
    fn lanes_together_leave_a_worker_and_a_leaving_worker_runs_another_lanes_queue() {
        // Three workers: lanes may hold two, each one.
        let lanes = Lanes::<Vec<u8>>::new(1, 2);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(2, 1, || unreachable!()), Entry::Run);
        // The budget is spent: a third lane queues, though its width has room.
        assert_eq!(lanes.enter(3, 1, || vec![3]), Entry::Queued);
        assert_eq!(lanes.enter(3, 1, || vec![4]), Entry::Queued);
        // Lane 1's worker leaves it and takes lane 3's first request.
        assert_eq!(lanes.next(1), Some((3, vec![3])));
        // Lane 3 is at its width: its next request waits for it.
        assert_eq!(lanes.next(2), None);
        assert_eq!(lanes.next(3), Some((3, vec![4])));
        assert_eq!(lanes.next(3), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.bytes), (0, 0));
    }

    #[test]
    fn a_closed_session_runs_nothing_queued() {
        let lanes = Lanes::<Vec<u8>>::new(1, 2);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(2, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(3, 1, || vec![3]), Entry::Queued);
        lanes.close();
        assert_eq!(lanes.next(1), None);
        assert_eq!(lanes.next(2), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.bytes), (0, 0));
    }

    #[test]
    fn with_the_budget_spent_the_first_arrived_runs_next_whatever_its_lane() {
        // Two workers: the lanes may hold one.
        let lanes = Lanes::<Vec<u8>>::new(1, 1);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(2, 1, || vec![20]), Entry::Queued);
        assert_eq!(lanes.enter(1, 1, || vec![10]), Entry::Queued);
        assert_eq!(lanes.enter(1, 1, || vec![11]), Entry::Queued);
        // Lane 2's request came first: lane 1's worker moves to it.
        assert_eq!(lanes.next(1), Some((2, vec![20])));
        // Then lane 1's, in their order.
        assert_eq!(lanes.next(2), Some((1, vec![10])));
        assert_eq!(lanes.next(1), Some((1, vec![11])));
        assert_eq!(lanes.next(1), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.bytes), (0, 0));
    }
}
