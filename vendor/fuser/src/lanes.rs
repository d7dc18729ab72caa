//! Lanes: a bound on the executors any one group of requests may hold at
//! once (an rcufs addition; see PATCHES.md).
//!
//! A filesystem names a request's lane with [`Filesystem::lane`] (rcufs:
//! the device of a filesystem mounted under its source that can stop
//! answering, such as NFS or another FUSE filesystem). At most
//! [`Config::lane_width`] executors run requests of one lane. The
//! executors are first `/dev/fuse` workers, at most all of them but one
//! (the budget), then threads of the lanes' own, made for a request when
//! the budget is spent and ended when their lane has nothing left to run
//! ([`Entry::Spawn`]; at most [`SPARE_THREADS`]). A request that finds
//! its lane full, or every executor taken (the capacity spent), is copied
//! out of the worker's buffer and queued, and the worker goes back to
//! reading `/dev/fuse`. An executor that finishes a request of a lane
//! runs that lane's queued requests, in arrival order, and then those of
//! another lane that waited for the capacity, before it reads again (or
//! ends). So lanes whose requests never return hold their width of
//! executors each, and all of them together never the last worker (but
//! for [`Entry::Over`]), nor, while threads can be made, the other lanes'
//! executors; their queued callers wait, as the kernel waits for a
//! request the daemon has read, until they are killed: an INTERRUPT for a
//! queued request whose caller has a fatal signal pending takes it out of
//! its queue ([`Lanes::interrupt`], [`killed`]) and the session answers
//! it `EINTR`.
//!
//! Invariant, under the mutex: a lane's queue is non-empty only while the
//! lane runs `width` requests or the capacity is spent (a request is
//! queued only then; an executor leaves a lane with a queue only for
//! another while the capacity stays spent, and leaving one frees the
//! capacity only with its queue empty, then takes a request of a lane
//! left waiting for it); so a request that finds room overtakes no queued
//! request of its lane. While the capacity is spent, an executor finishing
//! a lane's request takes the first arrived of the requests that may run
//! (its own lane's or a waiting lane's), so one busy lane does not keep
//! the others out. The queues hold at most [`MAX_QUEUED_BYTES`]; past that
//! a request runs at once, outside its lane's count and ahead of its
//! queue ([`Entry::Over`]).
//!
//! [`Filesystem::lane`]: crate::Filesystem::lane
//! [`Config::lane_width`]: crate::Config::lane_width

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// The lanes of one session; `T` is a queued request (its bytes, and the
/// channel it came from, which its reply must go back through: each
/// worker's cloned `/dev/fuse` descriptor has its own list of requests in
/// flight, and a reply written to another is refused with `ENOENT`).
#[derive(Debug)]
pub(crate) struct Lanes<T> {
    width: usize,
    /// The `/dev/fuse` workers lanes may hold together.
    budget: usize,
    /// The executors lanes may have together: `budget` workers and threads
    /// of their own ([`Entry::Spawn`]).
    capacity: usize,
    lanes: Mutex<Inner<T>>,
    watched: Mutex<Watched>,
}

/// The most bytes of requests queued in all lanes together. Past it a
/// request runs at once outside its lane's count ([`Entry::Over`]), so that
/// callers piling writes onto a filesystem that stopped cannot grow the
/// daemon's memory without bound; they then hold workers, as without
/// lanes.
pub(crate) const MAX_QUEUED_BYTES: usize = 64 << 20;

/// The threads of the lanes' own that may run at once
/// ([`Entry::Spawn`]): past the workers the lanes may hold, each lane's
/// requests run on threads made for them, so that a lane whose requests
/// never return keeps no other lane from its workers; at most this many
/// (a lane whose requests never return holds its width of them).
pub(crate) const SPARE_THREADS: usize = 32;

/// The most interrupted requests watched at once ([`Lanes::watch`]).
pub(crate) const MAX_WATCHED: usize = 4096;

/// What an INTERRUPT found among the queued requests ([`Lanes::interrupt`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found<T> {
    /// The request, taken out of its queue.
    Taken(T),
    /// Queued, and left there.
    Left,
    /// Not queued: running, answered, or not queued yet.
    Absent,
}

/// Interrupted requests left queued ([`Lanes::watch`]).
#[derive(Debug, Default)]
struct Watched {
    /// Each request, and how many passes in a row found it not queued.
    uniques: Vec<(u64, u8)>,
    /// Whether a watch runs.
    running: bool,
}

/// What a request arriving in a lane does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Run it now, then run the lane's queue ([`Lanes::next`]).
    Run,
    /// Run it on a thread of its own, which then runs the lane's queue
    /// ([`Lanes::next`], not as a worker): the workers the lanes may hold
    /// are all in lanes.
    Spawn,
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

/// The hasher of the lanes' map: a rotation, an exclusive or and a
/// multiplication per word (the scheme of rustc's `FxHasher`). Lane keys
/// are few and chosen by the filesystem (rcufs's are device numbers), not
/// by callers, so SipHash's resistance to chosen keys buys nothing, and it
/// cost about 150 instructions a lookup, several lookups per request of a
/// lane.
#[derive(Debug, Default)]
struct LaneHasher(u64);

impl LaneHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Hasher for LaneHasher {
    fn finish(&self) -> u64 {
        // The multiplication leaves the low bits (which pick the bucket)
        // depending on the key's low bits alone: keys that differ only
        // above them (devices 8:0 and 9:0) would share a bucket. The
        // rotation brings the well-mixed high bits down, as rustc's
        // `FxHasher` does since 2.0.
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
}

/// The lanes, the requests they run and the bytes queued in them.
#[derive(Debug)]
struct Inner<T> {
    lanes: HashMap<u64, Lane<T>, BuildHasherDefault<LaneHasher>>,
    /// Executors in lanes: workers and threads of the lanes' own.
    running: usize,
    /// Of those, `/dev/fuse` workers.
    workers: usize,
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
    /// Lanes of `width` executors each (0: none), `budget` workers and
    /// `spare` threads of their own in all.
    pub(crate) fn new(width: usize, budget: usize, spare: usize) -> Self {
        Self {
            width: width.min(budget + spare),
            budget,
            capacity: budget + spare,
            lanes: Mutex::new(Inner {
                lanes: HashMap::default(),
                running: 0,
                workers: 0,
                bytes: 0,
                arrivals: 0,
            }),
            watched: Mutex::default(),
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
        let (bytes, room) = (inner.bytes, inner.running < self.capacity);
        let l = inner.lanes.entry(lane).or_default();
        if l.running < self.width && room {
            l.running += 1;
            inner.running += 1;
            if inner.workers < self.budget {
                inner.workers += 1;
                return Entry::Run;
            }
            return Entry::Spawn;
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

    /// After running a request of `lane` (entered with [`Entry::Run`] or
    /// [`Entry::Spawn`], or returned by this): the next queued request to
    /// run and its lane, or `None` once the caller has left every lane.
    /// While the capacity is spent, that is the request that arrived first
    /// among this lane's and those of lanes with room in their width that
    /// wait for an executor (so that a busy lane does not keep the others
    /// out); otherwise this lane's next, then the first arrived of any
    /// lane's that waited. `worker`: whether the caller is a `/dev/fuse`
    /// worker ([`Entry::Run`]) or a lane's own thread ([`Entry::Spawn`]).
    pub(crate) fn next(&self, lane: u64, worker: bool) -> Option<(u64, T)> {
        let mut inner = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let width = self.width;
        let to = if inner.running == self.capacity {
            inner.oldest(|k, l| k == lane || l.running < width)
        } else if inner.lanes[&lane].queued.is_empty() {
            None
        } else {
            Some(lane)
        };
        if to != Some(lane) {
            // Leaves this lane (the capacity stays spent if it moves to
            // another, so this lane's queue may stay non-empty).
            let l = inner.lanes.get_mut(&lane).expect("a running lane is listed");
            l.running -= 1;
            if l.running == 0 && l.queued.is_empty() {
                inner.lanes.remove(&lane);
            }
            inner.running -= 1;
            inner.workers -= usize::from(worker);
        }
        let to = match to {
            Some(k) => k,
            // A lane that waited for an executor (its queue is non-empty
            // with room in its width).
            None => inner.oldest(|_, l| l.running < width)?,
        };
        let l = inner.lanes.get_mut(&to).expect("a lane with a queue is listed");
        let (req, size, _) = l.queued.pop_front().expect("a non-empty queue");
        if to != lane {
            l.running += 1;
            inner.running += 1;
            inner.workers += usize::from(worker);
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

    /// An INTERRUPT came for a request: if the queued request `is_it`
    /// picks is one `cancel` says may go, it leaves its queue unrun and is
    /// returned (its caller is to be answered `EINTR`).
    pub(crate) fn interrupt(&self, is_it: impl Fn(&T) -> bool, cancel: impl FnOnce(&T) -> bool) -> Found<T> {
        let mut inner = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let hit = inner
            .lanes
            .iter()
            .find_map(|(&k, l)| Some((k, l.queued.iter().position(|(t, _, _)| is_it(t))?)));
        let Some((k, i)) = hit else {
            return Found::Absent;
        };
        let l = inner.lanes.get_mut(&k).expect("found above");
        if !cancel(&l.queued[i].0) {
            return Found::Left;
        }
        let (t, size, _) = l.queued.remove(i).expect("found above");
        // A lane that waited for an executor with nothing running leaves
        // with its last queued request.
        if l.running == 0 && l.queued.is_empty() {
            inner.lanes.remove(&k);
        }
        inner.bytes -= size;
        Found::Taken(t)
    }

    /// Watches an interrupted request for [`Lanes::watched`]: one whose
    /// caller may be killed later, or that was not queued yet when its
    /// INTERRUPT was read. Returns true if no watch was running (the
    /// caller starts one). At most [`MAX_WATCHED`] are kept, the oldest
    /// dropped first.
    pub(crate) fn watch(&self, unique: u64) -> bool {
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        if w.uniques.len() == MAX_WATCHED {
            w.uniques.remove(0);
        }
        w.uniques.push((unique, 0));
        !std::mem::replace(&mut w.running, true)
    }

    /// The watched requests, for one pass of the watch; `look` says what
    /// became of each ([`Found`]): one taken leaves the watch, one queued
    /// stays, one not queued stays for one more pass (it may have been
    /// read and not queued yet when this pass began). Returns false, and
    /// ends the watch, once none is left.
    pub(crate) fn watched(&self, mut look: impl FnMut(u64) -> Found<()>) -> bool {
        let now = std::mem::take(&mut self.watched.lock().unwrap_or_else(|e| e.into_inner()).uniques);
        let kept: Vec<(u64, u8)> = now
            .into_iter()
            .filter_map(|(u, absent)| match look(u) {
                Found::Taken(()) => None,
                Found::Left => Some((u, 0)),
                Found::Absent => (absent == 0).then_some((u, 1)),
            })
            .collect();
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        // Watched meanwhile, after these.
        let added = std::mem::take(&mut w.uniques);
        w.uniques = kept;
        w.uniques.extend(added);
        let excess = w.uniques.len().saturating_sub(MAX_WATCHED);
        w.uniques.drain(..excess);
        w.running = !w.uniques.is_empty();
        w.running
    }

    /// Ends the watch with nothing watched (no thread could be made for
    /// it): the next [`Lanes::watch`] starts one again.
    pub(crate) fn stop_watch(&self) {
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        w.uniques.clear();
        w.running = false;
    }

    /// Whether any lane runs a request: if none does, no request is queued,
    /// and none read now can be (it would run).
    pub(crate) fn busy(&self) -> bool {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner()).running > 0
    }

    /// Requests queued now, over all lanes.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.lanes.lock().unwrap().lanes.values().map(|l| l.queued.len()).sum()
    }
}

/// Whether the thread `pid` (a request's caller, as the kernel names it
/// in the daemon's pid namespace; 0 if it has no pid there) has a fatal
/// signal pending: the kernel adds `SIGKILL` to each thread's own pending
/// set when a signal kills the process (`complete_signal`), and a killed
/// thread waiting for a request the daemon has read stays until it is
/// answered.
pub(crate) fn killed(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| fatal_pending(&s))
}

/// Whether a `/proc/PID/status` text shows `SIGKILL` pending, for the
/// thread (`SigPnd`) or its process (`ShdPnd`). (`SigBlk` does not
/// matter: `SIGKILL` cannot be blocked.)
fn fatal_pending(status: &str) -> bool {
    let kill = 1u64 << (libc::SIGKILL - 1);
    status
        .lines()
        .filter_map(|l| l.strip_prefix("SigPnd:").or_else(|| l.strip_prefix("ShdPnd:")))
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & kill != 0)
}

#[cfg(test)]
mod test {
    use super::*;

    /// Device numbers that differ only above the low bits (8:0, 9:0, ...:
    /// a major number is shifted left by 8) still differ in the low bits
    /// of their hashes, which pick a bucket.
    #[test]
    fn lane_keys_differing_high_spread_over_buckets() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<LaneHasher>::default();
        let low: std::collections::HashSet<u64> =
            (8u64..24).map(|major| b.hash_one(major << 8) & 0xf).collect();
        assert!(low.len() >= 8, "16 devices fell in {} of 16 buckets", low.len());
    }

    #[test]
    fn a_full_lane_queues_in_order_and_its_last_worker_runs_the_queue() {
        let lanes = Lanes::<Vec<u8>>::new(1, 8, 0);
        assert_eq!(lanes.enter(7, 1, || unreachable!()), Entry::Run);
        // The lane is full: the next two are queued, another lane is not.
        assert_eq!(lanes.enter(7, 1, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(7, 1, || vec![2]), Entry::Queued);
        assert_eq!(lanes.enter(8, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.queued(), 2);
        assert_eq!(lanes.next(7, true), Some((7, vec![1])));
        assert_eq!(lanes.next(7, true), Some((7, vec![2])));
        assert_eq!(lanes.next(7, true), None);
        // Left: the next request of the lane runs at once.
        assert_eq!(lanes.enter(7, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.next(7, true), None);
        assert_eq!(lanes.next(8, true), None);
        assert!(lanes.lanes.lock().unwrap().lanes.is_empty());
    }

    #[test]
    fn a_lane_runs_its_width_at_once() {
        let lanes = Lanes::<Vec<u8>>::new(2, 8, 0);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || vec![3]), Entry::Queued);
        // One of the two leaves only after the queue is run.
        assert_eq!(lanes.next(1, true), Some((1, vec![3])));
        assert_eq!(lanes.next(1, true), None);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.next(1, true), None);
        assert_eq!(lanes.next(1, true), None);
        assert!(lanes.lanes.lock().unwrap().lanes.is_empty());
    }

    #[test]
    fn past_the_byte_bound_a_request_runs_outside_its_lane() {
        let lanes = Lanes::<Vec<u8>>::new(1, 8, 0);
        assert_eq!(lanes.enter(1, 10, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, MAX_QUEUED_BYTES - 10, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(1, 11, || unreachable!()), Entry::Over);
        assert_eq!(lanes.enter(2, 11, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(2, 11, || unreachable!()), Entry::Over);
        assert_eq!(lanes.enter(1, 10, || vec![2]), Entry::Queued);
        assert_eq!(lanes.next(1, true), Some((1, vec![1])));
        // Room again.
        assert_eq!(lanes.enter(2, 11, || vec![3]), Entry::Queued);
        assert_eq!(lanes.next(1, true), Some((1, vec![2])));
        assert_eq!(lanes.next(1, true), None);
        assert_eq!(lanes.next(2, true), Some((2, vec![3])));
        assert_eq!(lanes.next(2, true), None);
        assert_eq!(lanes.lanes.lock().unwrap().bytes, 0);
    }

    #[test]
    fn lanes_together_leave_a_worker_and_a_leaving_worker_runs_another_lanes_queue() {
        // Three workers: lanes may hold two, each one.
        let lanes = Lanes::<Vec<u8>>::new(1, 2, 0);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(2, 1, || unreachable!()), Entry::Run);
        // The budget is spent: a third lane queues, though its width has room.
        assert_eq!(lanes.enter(3, 1, || vec![3]), Entry::Queued);
        assert_eq!(lanes.enter(3, 1, || vec![4]), Entry::Queued);
        // Lane 1's worker leaves it and takes lane 3's first request.
        assert_eq!(lanes.next(1, true), Some((3, vec![3])));
        // Lane 3 is at its width: its next request waits for it.
        assert_eq!(lanes.next(2, true), None);
        assert_eq!(lanes.next(3, true), Some((3, vec![4])));
        assert_eq!(lanes.next(3, true), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.bytes), (0, 0));
    }

    #[test]
    fn a_closed_session_runs_nothing_queued() {
        let lanes = Lanes::<Vec<u8>>::new(1, 2, 0);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 1, || vec![1]), Entry::Queued);
        assert_eq!(lanes.enter(2, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(3, 1, || vec![3]), Entry::Queued);
        lanes.close();
        assert_eq!(lanes.next(1, true), None);
        assert_eq!(lanes.next(2, true), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.bytes), (0, 0));
    }

    #[test]
    fn an_interrupt_takes_a_queued_request_only_if_told_and_never_a_running_one() {
        let lanes = Lanes::<Vec<u8>>::new(1, 1, 0);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(1, 2, || vec![10]), Entry::Queued);
        assert_eq!(lanes.enter(2, 3, || vec![20]), Entry::Queued);
        assert_eq!(lanes.enter(1, 4, || vec![11]), Entry::Queued);
        // Not queued (the running request is not in any queue).
        assert_eq!(lanes.interrupt(|r| r == &[99], |_| true), Found::Absent);
        // Queued, and not to be cancelled: it stays.
        assert_eq!(lanes.interrupt(|r| r == &[10], |_| false), Found::Left);
        assert_eq!(lanes.queued(), 3);
        assert_eq!(lanes.interrupt(|r| r == &[10], |_| true), Found::Taken(vec![10]));
        // Lane 2 waited for the budget with nothing running: it goes with
        // its one request.
        assert_eq!(lanes.interrupt(|r| r == &[20], |r| r == &[20]), Found::Taken(vec![20]));
        assert!(!lanes.lanes.lock().unwrap().lanes.contains_key(&2));
        assert_eq!(lanes.lanes.lock().unwrap().bytes, 4);
        assert_eq!(lanes.next(1, true), Some((1, vec![11])));
        assert_eq!(lanes.next(1, true), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.bytes), (0, 0));
    }

    #[test]
    fn a_watch_keeps_what_its_pass_keeps_and_ends_when_none_is_left() {
        let lanes = Lanes::<Vec<u8>>::new(1, 1, 0);
        // The first watched request starts the watch; the next do not.
        assert!(lanes.watch(1));
        assert!(!lanes.watch(2));
        assert!(!lanes.watch(3));
        let mut seen = Vec::new();
        let found = |u| match u {
            1 => Found::Taken(()),
            2 => Found::Left,
            _ => Found::Absent,
        };
        assert!(lanes.watched(|u| {
            seen.push(u);
            found(u)
        }));
        assert_eq!(seen, [1, 2, 3]);
        assert!(!lanes.watch(4));
        // 3 was not queued on two passes in a row: it leaves.
        let mut seen = Vec::new();
        assert!(lanes.watched(|u| {
            seen.push(u);
            found(u)
        }));
        assert_eq!(seen, [2, 3, 4]);
        let mut seen = Vec::new();
        assert!(!lanes.watched(|u| {
            seen.push(u);
            Found::Taken(())
        }));
        assert_eq!(seen, [2, 4]);
        // Ended: the next one starts a watch again.
        assert!(lanes.watch(5));
        for u in 6..(6 + MAX_WATCHED as u64) {
            assert!(!lanes.watch(u));
        }
        let mut first = None;
        lanes.watched(|u| {
            first.get_or_insert(u);
            Found::Taken(())
        });
        assert_eq!(first, Some(6), "the oldest is dropped past the bound");
        // A watch that could not start is stopped, and starts again.
        assert!(lanes.watch(7));
        lanes.stop_watch();
        assert!(lanes.watch(8));
    }

    #[test]
    fn a_thread_with_a_fatal_signal_pending_is_told_from_one_without() {
        assert!(!killed(0));
        assert!(!killed(std::process::id()));
        // The mount tests kill a real caller; here the reading of the two
        // masks.
        let status =
            |sig, shd| format!("Name:\tx\nSigQ:\t0/1\nSigPnd:\t{sig}\nShdPnd:\t{shd}\nSigBlk:\tffffffffffffffff\n");
        assert!(!fatal_pending(&status("0000000000000000", "0000000000000000")));
        // SIGTERM (15) and SIGINT (2) pending: not SIGKILL.
        assert!(!fatal_pending(&status("0000000000004002", "0000000000004002")));
        assert!(fatal_pending(&status("0000000000000100", "0000000000000000")));
        assert!(fatal_pending(&status("0000000000000000", "0000000000000102")));
    }

    #[test]
    fn past_the_budget_a_lane_gets_threads_of_its_own_up_to_the_spare_ones() {
        // Two workers (the lanes may hold one), two spare threads.
        let lanes = Lanes::<Vec<u8>>::new(1, 1, 2);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        // Lane 1 is full; lanes 2 and 3 get threads, lane 4 waits.
        assert_eq!(lanes.enter(1, 1, || vec![10]), Entry::Queued);
        assert_eq!(lanes.enter(2, 1, || unreachable!()), Entry::Spawn);
        assert_eq!(lanes.enter(3, 1, || unreachable!()), Entry::Spawn);
        assert_eq!(lanes.enter(4, 1, || vec![40]), Entry::Queued);
        // Lane 2's thread leaves its lane for lane 4's request, which
        // arrived after lane 1's but may run (lane 1 is at its width).
        assert_eq!(lanes.next(2, false), Some((4, vec![40])));
        assert_eq!(lanes.next(4, false), None);
        {
            let inner = lanes.lanes.lock().unwrap();
            assert_eq!((inner.running, inner.workers), (2, 1));
        }
        // The worker leaves lane 1 after its queue; the budget is free
        // again, so the next request is a worker's.
        assert_eq!(lanes.next(1, true), Some((1, vec![10])));
        assert_eq!(lanes.next(1, true), None);
        assert_eq!(lanes.enter(5, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.next(5, true), None);
        assert_eq!(lanes.next(3, false), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.workers, inner.bytes), (0, 0, 0));
    }

    #[test]
    fn with_one_worker_every_request_of_a_lane_gets_a_thread() {
        let lanes = Lanes::<Vec<u8>>::new(1, 0, 4);
        assert!(lanes.enabled());
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Spawn);
        assert_eq!(lanes.enter(1, 1, || vec![1]), Entry::Queued);
        assert_eq!(lanes.next(1, false), Some((1, vec![1])));
        assert_eq!(lanes.next(1, false), None);
        assert!(!Lanes::<Vec<u8>>::new(1, 0, 0).enabled());
    }

    #[test]
    fn with_the_budget_spent_the_first_arrived_runs_next_whatever_its_lane() {
        // Two workers: the lanes may hold one.
        let lanes = Lanes::<Vec<u8>>::new(1, 1, 0);
        assert_eq!(lanes.enter(1, 1, || unreachable!()), Entry::Run);
        assert_eq!(lanes.enter(2, 1, || vec![20]), Entry::Queued);
        assert_eq!(lanes.enter(1, 1, || vec![10]), Entry::Queued);
        assert_eq!(lanes.enter(1, 1, || vec![11]), Entry::Queued);
        // Lane 2's request came first: lane 1's worker moves to it.
        assert_eq!(lanes.next(1, true), Some((2, vec![20])));
        // Then lane 1's, in their order.
        assert_eq!(lanes.next(2, true), Some((1, vec![10])));
        assert_eq!(lanes.next(1, true), Some((1, vec![11])));
        assert_eq!(lanes.next(1, true), None);
        let inner = lanes.lanes.lock().unwrap();
        assert!(inner.lanes.is_empty());
        assert_eq!((inner.running, inner.bytes), (0, 0));
    }
}
