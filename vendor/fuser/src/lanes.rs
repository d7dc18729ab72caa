//! Lanes: a bound on the `/dev/fuse` workers any one group of requests may
//! hold at once (an rcufs addition; see PATCHES.md).
//!
//! A filesystem names a request's lane with [`Filesystem::lane`] (rcufs:
//! the device of a filesystem mounted under its source that can stop
//! answering, such as NFS or another FUSE filesystem). At most
//! [`Config::lane_width`] workers run requests of one lane; a request that
//! finds its lane full is copied out of the worker's buffer and queued, and
//! the worker goes back to reading `/dev/fuse`. A worker that finishes a
//! request of a lane runs that lane's queued requests, in arrival order,
//! before it reads again. So a lane whose requests never return holds its
//! width of workers, never all of them, and its queued callers wait as
//! they would natively.
//!
//! Invariant, under the mutex: a lane's queue is non-empty only while the
//! lane runs `width` requests (a request is queued only then, and a worker
//! leaves its lane only when its queue is empty); so a request that finds
//! room overtakes no queued request of its lane. The queues hold at most
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
    /// Queued requests and their sizes.
    queued: VecDeque<(T, usize)>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Self {
            running: 0,
            queued: VecDeque::new(),
        }
    }
}

/// The lanes and the bytes queued in them.
#[derive(Debug)]
struct Inner<T> {
    lanes: HashMap<u64, Lane<T>>,
    bytes: usize,
}

impl<T> Lanes<T> {
    /// Lanes of `width` workers each (0: none).
    pub(crate) fn new(width: usize) -> Self {
        Self {
            width,
            lanes: Mutex::new(Inner {
                lanes: HashMap::new(),
                bytes: 0,
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
        let bytes = inner.bytes;
        let l = inner.lanes.entry(lane).or_default();
        if l.running < self.width {
            l.running += 1;
            return Entry::Run;
        }
        if bytes + size > MAX_QUEUED_BYTES {
            return Entry::Over;
        }
        l.queued.push_back((copy(), size));
        inner.bytes += size;
        Entry::Queued
    }

    /// After running a request of `lane` (entered with [`Entry::Run`]):
    /// the next queued one to run, or `None` once the caller has left the
    /// lane.
    pub(crate) fn next(&self, lane: u64) -> Option<T> {
        let mut inner = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let l = inner.lanes.get_mut(&lane).expect("a running lane is listed");
        if let Some((req, size)) = l.queued.pop_front() {
            inner.bytes -= size;
            return Some(req);
        }
        l.running -= 1;
        if l.running == 0 {
            inner.lanes.remove(&lane);
        }
        None
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
        let lanes = Lanes::<Vec<u8>>::new(1);
        assert_eq!(lanes.enter(7, 1, || unreachable!()), Entry::Run);
        // The lane is full: the next two are queued, another lane is not.
        assert_eq!(lanes.enter(7, 1, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(7, 1, || vec![2]), Entry::Queued);
        assert_eq!(lanes.enter(8, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.queued(), 2);
        assert_eq!(lanes.next(7), Some(vec![1]));
        assert_eq!(lanes.next(7), Some(vec![2]));
        assert_eq!(lanes.next(7), None);
        // Left: the next request of the lane runs at once.
        assert_eq!(lanes.enter(7, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.next(7), None);
        assert_eq!(lanes.next(8), None);
        assert!(lanes.lanes.lock().unwrap().lanes.is_empty());
    }

    #[test]
    fn a_lane_runs_its_width_at_once() {
        let lanes = Lanes::<Vec<u8>>::new(2);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || vec![3]), Entry::Queued);
        // One of the two leaves only after the queue is run.
        assert_eq!(lanes.next(1), Some(vec![3]));
        assert_eq!(lanes.next(1), None);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.next(1), None);
        assert_eq!(lanes.next(1), None);
        assert!(lanes.lanes.lock().unwrap().lanes.is_empty());
    }

    #[test]
    fn past_the_byte_bound_a_request_runs_outside_its_lane() {
        let lanes = Lanes::<Vec<u8>>::new(1);
        assert_eq!(lanes.enter(1, 10, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, MAX_QUEUED_BYTES - 10, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(1, 11, || unreachable!()), Entry::Over);
        assert_eq!(lanes.enter(2, 11, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(2, 11, || unreachable!()), Entry::Over);
        assert_eq!(lanes.enter(1, 10, || vec![2]), Entry::Queued);
        assert_eq!(lanes.next(1), Some(vec![1]));
        // Room again.
        assert_eq!(lanes.enter(2, 11, || vec![3]), Entry::Queued);
        assert_eq!(lanes.next(1), Some(vec![2]));
        assert_eq!(lanes.next(1), None);
        assert_eq!(lanes.next(2), Some(vec![3]));
        assert_eq!(lanes.next(2), None);
        assert_eq!(lanes.lanes.lock().unwrap().bytes, 0);
    }
}
