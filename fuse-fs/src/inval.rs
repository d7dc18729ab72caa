//! The kernel-invalidation queue (kernel-cache mode, and the attributes the
//! default mode lends the kernel with the watch): bounded, coalescing,
//! in two lanes, with answers deferred until a drop's invalidations are sent.
//!
//! # Design
//! Request handlers hand invalidations to `fuse.rs`, which pushes them here;
//! two invalidation threads pop them and tell the kernel, one per [`Lane`]:
//! entries (`inval_entry`, which takes the parent directory's inode lock in
//! the kernel) and inodes (`inval_inode`, which takes no inode lock but
//! waits for the locked and under-writeback pages it invalidates). The
//! lanes are separate so that an entry waiting for a directory lock held
//! by some request in flight never delays the attribute and page
//! invalidations a drop's caller needs to see. The queue is keyed by what
//! is invalidated: an entry by `(parent, name)`, an inode by node id.
//! Pushing a key that is already queued merges into the queued one (for an
//! inode, the widest range wins: offset 0 = attributes and every page, -1 =
//! attributes only) and keeps its place, so repeated drops of one
//! directory cost nothing more.
//!
//! A drop is answered only once its invalidations are sent, so that its
//! caller sees the kernel's copies gone: [`answer_when_sent`]
//! (InvalQueue::answer_when_sent) keeps the answer (a closure holding the
//! FUSE reply) and the answering thread ([`answer_worker`]) runs it when
//! they are, or after a bound. No FUSE worker thread waits meanwhile: a
//! worker that did would be one fewer to answer the very requests (a LOOKUP
//! under a directory lock, a WRITE of a page under writeback) whose
//! completion the invalidation threads may be waiting for in the kernel;
//! with every worker waiting that way the mount stalled until the bound.
//!
//! # Invariants
//! - The queue never holds more than `bound` keys; a push beyond that is
//!   dropped and counted in `overflows` (the kernel then keeps its copy until
//!   the entry and attribute timeouts, as with any lost notification).
//! - `push` never blocks on the consumers: it takes one leaf lock for a few
//!   map operations.
//! - Keys of one lane come out in the order they were first queued (drops
//!   queue theirs bottom-up, as the kernel wants them).
//! - A directory whose inode lock the kernel holds for a SETXATTR in flight
//!   ([`hold`](InvalQueue::hold)) gets no `inval_entry` until that request
//!   is answered: its entries are parked. Its holder's answer does not wait
//!   for entries in held directories, nor for any entry while the entry
//!   lane is sending one in a held directory (it may be blocked on that
//!   very lock, taken by the kernel before the hold was registered).
//! - Every kept answer runs exactly once: when its invalidations are sent,
//!   at its deadline, or when the queue closes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A kernel cache invalidation to send after the reply (kernel-cache mode,
/// and attributes lent in the default mode with the watch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inval {
    /// `inval_entry(parent, name)`.
    Entry {
        /// Directory node id.
        parent: u64,
        /// Name.
        name: Vec<u8>,
    },
    /// `inval_inode(ino, offset, len)`: offset 0, len 0 = attributes and all
    /// pages; offset -1 = attributes only.
    Inode {
        /// Node id.
        ino: u64,
        /// Offset (-1: attributes only).
        offset: i64,
    },
}

/// Which invalidation thread sends a kind of invalidation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// `inval_entry` (may wait for a directory's inode lock).
    Entries = 0,
    /// `inval_inode` (may wait for locked pages and writeback).
    Inodes = 1,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Entry(u64, Vec<u8>),
    Inode(u64),
}

impl Key {
    fn lane(&self) -> Lane {
        match self {
            Key::Entry(..) => Lane::Entries,
            Key::Inode(_) => Lane::Inodes,
        }
    }
}

/// How a kept answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything it waited for was sent.
    Sent,
    /// Its deadline passed first.
    TimedOut,
    /// The queue closed (the session ended).
    Closed,
}

/// A kept answer.
type Answer = Box<dyn FnOnce(Outcome) + Send>;

/// What a kept answer waits for.
#[derive(Clone, Copy, Debug)]
enum Until {
    /// Everything up to `ticket` sent, for a waiter holding `holding`.
    Ticket { ticket: u64, holding: Option<u64> },
    /// Nothing for this inode queued or being sent.
    Inode(u64),
}

struct Waiter {
    until: Until,
    deadline: Instant,
    answer: Answer,
}

#[derive(Default)]
struct State {
    /// Keys queued in each lane, in first-queued order.
    order: [VecDeque<Key>; 2],
    /// Queued keys: for an inode, the offset to send; and the key's
    /// sequence number (the order it was first queued in).
    queued: HashMap<Key, (i64, u64)>,
    /// The next sequence number.
    next_seq: u64,
    /// Per lane, the invalidation popped and not yet reported
    /// [`InvalQueue::done`], with its sequence number.
    current: [Option<(Key, u64)>; 2],
    /// Directories whose inode lock the kernel holds for a request in
    /// flight (a SETXATTR on them), with a count: `inval_entry` of a name in
    /// one would wait for that request, so such entries are parked.
    held: HashMap<u64, usize>,
    /// Entries taken out of `order` because their directory is held; they
    /// go back to the front when it is released.
    parked: Vec<Key>,
    /// Answers kept until their invalidations are sent.
    waiters: Vec<Waiter>,
    closed: bool,
}

impl State {
    /// Whether everything with a sequence number up to `ticket` was sent,
    /// for a waiter holding `holding` (see the module's invariants).
    fn sent(&self, ticket: u64, holding: Option<u64>) -> bool {
        let in_held = |k: &Key| matches!(k, Key::Entry(p, _) if self.held.contains_key(p));
        // The entry lane may be blocked on a held directory's lock: a
        // holder's answer must not wait for it (or for what queues behind).
        let entries_blocked = self.current[Lane::Entries as usize]
            .as_ref()
            .is_some_and(|(k, _)| in_held(k));
        let skip_entries = holding.is_some() && entries_blocked;
        let exempt = |k: &Key| holding.is_some() && (in_held(k) || (skip_entries && k.lane() == Lane::Entries));
        let waits_for = |k: &Key, seq: u64| seq <= ticket && !exempt(k);
        let pending = |k: &Key| self.queued.get(k).is_some_and(|&(_, seq)| waits_for(k, seq));
        // A skipped lane is not scanned at all: the answering thread checks
        // this after every invalidation sent, and a large drop's entry lane
        // scanned each time would cost its length squared.
        let lanes = &self.order[usize::from(skip_entries)..];
        !self.current.iter().flatten().any(|(k, seq)| waits_for(k, *seq))
            && !lanes.iter().flatten().any(pending)
            && !self.parked.iter().any(pending)
    }

    /// Whether nothing for inode `ino` is queued or being sent.
    fn inode_sent(&self, ino: u64) -> bool {
        let key = Key::Inode(ino);
        !self.queued.contains_key(&key)
            && self.current[Lane::Inodes as usize]
                .as_ref()
                .is_none_or(|(k, _)| *k != key)
    }

    fn reached(&self, until: Until) -> bool {
        match until {
            Until::Ticket { ticket, holding } => self.sent(ticket, holding),
            Until::Inode(ino) => self.inode_sent(ino),
        }
    }

    fn len(&self) -> usize {
        self.order[0].len() + self.order[1].len() + self.parked.len()
    }
}

/// The bounded, coalescing queue.
pub struct InvalQueue {
    state: Mutex<State>,
    /// Signalled when a lane has something to pop (or the queue closed).
    ready: Condvar,
    /// Signalled when what the waiters wait for may have changed.
    idle: Condvar,
    bound: usize,
    pushed: AtomicU64,
    coalesced: AtomicU64,
    overflows: AtomicU64,
    timeouts: AtomicU64,
}

impl std::fmt::Debug for InvalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvalQueue").field("stats", &self.stats()).finish()
    }
}

/// The queue's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InvalStats {
    /// Keys queued now.
    pub queued: u64,
    /// Invalidations pushed since the mount.
    pub pushed: u64,
    /// Pushes merged into a key already queued.
    pub coalesced: u64,
    /// Pushes dropped because the queue was full.
    pub overflows: u64,
    /// Answers given at their deadline, before their invalidations were sent.
    pub timeouts: u64,
}

/// Most invalidations queued by default.
pub const DEFAULT_BOUND: usize = 65_536;

impl InvalQueue {
    /// A queue holding at most `bound` (at least 1) keys.
    pub fn new(bound: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            idle: Condvar::new(),
            bound: bound.max(1),
            pushed: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        }
    }

    /// Queues `items`; never waits for the consumers. Returns the ticket to
    /// wait for them with ([`answer_when_sent`](Self::answer_when_sent)):
    /// the highest sequence number among their keys (a coalesced item
    /// counts with the key it merged into).
    pub fn push(&self, items: impl IntoIterator<Item = Inval>) -> u64 {
        let mut added = false;
        let mut ticket = 0;
        {
            let mut st = self.state.lock();
            if st.closed {
                return 0;
            }
            for item in items {
                self.pushed.fetch_add(1, Ordering::Relaxed);
                let (key, offset) = match item {
                    Inval::Entry { parent, name } => (Key::Entry(parent, name), 0),
                    Inval::Inode { ino, offset } => (Key::Inode(ino), offset),
                };
                if let Some((queued, seq)) = st.queued.get_mut(&key) {
                    if offset >= 0 && (*queued < 0 || offset < *queued) {
                        *queued = offset;
                    }
                    ticket = ticket.max(*seq);
                    self.coalesced.fetch_add(1, Ordering::Relaxed);
                } else if st.len() >= self.bound {
                    self.overflows.fetch_add(1, Ordering::Relaxed);
                } else {
                    st.next_seq += 1;
                    let seq = st.next_seq;
                    ticket = ticket.max(seq);
                    st.queued.insert(key.clone(), (offset, seq));
                    st.order[key.lane() as usize].push_back(key);
                    added = true;
                }
            }
        }
        if added {
            // Both lanes' threads wait on one condition variable.
            self.ready.notify_all();
        }
        ticket
    }

    /// Whether any invalidation was ever dropped for want of room: the
    /// kernel may then keep a copy nothing will invalidate.
    pub fn has_overflowed(&self) -> bool {
        self.overflows.load(Ordering::Relaxed) > 0
    }

    /// Queues `items` one by one, waiting (up to `max_wait` in all) for
    /// room whenever the queue is full, instead of dropping; for a producer
    /// that may wait (the source watcher is not a FUSE worker, so the
    /// invalidation threads never wait for it). Returns how many were
    /// dropped after all (counted in `overflows` too).
    pub fn push_waiting(&self, items: Vec<Inval>, max_wait: Duration) -> u64 {
        let deadline = Instant::now() + max_wait;
        let before = self.overflows.load(Ordering::Relaxed);
        for item in items {
            {
                let mut st = self.state.lock();
                while !st.closed && st.len() >= self.bound {
                    // `idle` is signalled at every pop and `done`.
                    if self.idle.wait_until(&mut st, deadline).timed_out() {
                        break;
                    }
                }
            }
            self.push([item]);
        }
        self.overflows.load(Ordering::Relaxed) - before
    }

    /// The next invalidation of `lane` to send, waiting for one; `None` once
    /// the queue is closed and the lane empty. Entries in a held directory
    /// are parked instead. Report each with [`done`](Self::done) once sent.
    pub fn pop(&self, lane: Lane) -> Option<Inval> {
        let mut st = self.state.lock();
        loop {
            while let Some(key) = st.order[lane as usize].pop_front() {
                if let Key::Entry(parent, _) = &key
                    && st.held.contains_key(parent)
                {
                    st.parked.push(key);
                    continue;
                }
                let (offset, seq) = st.queued.remove(&key).unwrap_or((0, 0));
                st.current[lane as usize] = Some((key.clone(), seq));
                drop(st);
                // What the answers wait for changed (the entry lane may now
                // be sending in a held directory).
                self.idle.notify_all();
                return Some(match key {
                    Key::Entry(parent, name) => Inval::Entry { parent, name },
                    Key::Inode(ino) => Inval::Inode { ino, offset },
                });
            }
            if st.closed {
                return None;
            }
            self.ready.wait(&mut st);
        }
    }

    /// Reports the invalidation last popped from `lane` as sent.
    pub fn done(&self, lane: Lane) {
        self.state.lock().current[lane as usize] = None;
        self.idle.notify_all();
    }

    /// Marks `dir` as locked by the kernel for a request (SETXATTR) in
    /// flight: entries in it are parked, not sent, until
    /// [`release`](Self::release).
    pub fn hold(&self, dir: u64) {
        *self.state.lock().held.entry(dir).or_insert(0) += 1;
    }

    /// Ends one [`hold`](Self::hold) of `dir`; with the last one, its
    /// parked entries go back to the front of the entry lane.
    pub fn release(&self, dir: u64) {
        let mut st = self.state.lock();
        let last = match st.held.get_mut(&dir) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => true,
            None => return,
        };
        if !last {
            return;
        }
        st.held.remove(&dir);
        let parked = std::mem::take(&mut st.parked);
        let (back, keep): (Vec<Key>, Vec<Key>) = parked
            .into_iter()
            .partition(|k| matches!(k, Key::Entry(p, _) if *p == dir));
        st.parked = keep;
        for key in back.into_iter().rev() {
            st.order[Lane::Entries as usize].push_front(key);
        }
        drop(st);
        self.ready.notify_all();
        self.idle.notify_all();
    }

    /// Waits until everything up to `ticket` was sent, as a kept answer
    /// would (see [`answer_when_sent`](Self::answer_when_sent)), at most
    /// `timeout`; returns whether it got there. The tests' synchronous view
    /// of the same rule.
    #[cfg(test)]
    pub fn wait_sent(&self, ticket: u64, timeout: Duration, holding: Option<u64>) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock();
        while !st.sent(ticket, holding) {
            if st.closed || self.idle.wait_until(&mut st, deadline).timed_out() {
                return st.sent(ticket, holding);
            }
        }
        true
    }

    /// Keeps `answer` until every invalidation with a sequence number up to
    /// `ticket` (what one [`push`](Self::push) returned) was sent, or
    /// `timeout` passed; later pushes do not delay it. A waiter that holds a
    /// directory (`holding`: its own SETXATTR) does not wait for entries in
    /// held directories, queued, parked or in flight, nor for entries while
    /// the entry lane sends one in a held directory: they go once those
    /// requests are answered. [`answer_worker`] then runs the answer, on its
    /// own thread, with how it ended; it runs at once, on this thread, if
    /// that is already so (or the queue is closed).
    pub fn answer_when_sent(&self, ticket: u64, timeout: Duration, holding: Option<u64>, answer: Answer) {
        self.keep(Until::Ticket { ticket, holding }, timeout, answer);
    }

    /// Moves the invalidation of inode `ino`, if one is queued, to the front
    /// of its lane (the order of the inode lane does not matter to the
    /// kernel; only entries go bottom-up). Returns whether one is queued or
    /// being sent.
    pub fn expedite_inode(&self, ino: u64) -> bool {
        let mut st = self.state.lock();
        let key = Key::Inode(ino);
        if st.queued.contains_key(&key) {
            let lane = &mut st.order[Lane::Inodes as usize];
            if let Some(at) = lane.iter().position(|k| *k == key) {
                lane.remove(at);
                lane.push_front(key);
            }
            return true;
        }
        !st.inode_sent(ino)
    }

    /// Keeps `answer` until nothing for inode `ino` is queued or being
    /// sent, or `timeout` passed, like
    /// [`answer_when_sent`](Self::answer_when_sent) (and run by the same
    /// answering thread, or at once if that is already so).
    pub fn answer_when_inode_sent(&self, ino: u64, timeout: Duration, answer: Answer) {
        self.keep(Until::Inode(ino), timeout, answer);
    }

    fn keep(&self, until: Until, timeout: Duration, answer: Answer) {
        let mut st = self.state.lock();
        let now = if st.closed {
            Some(Outcome::Closed)
        } else if st.reached(until) {
            Some(Outcome::Sent)
        } else {
            None
        };
        match now {
            Some(outcome) => {
                drop(st);
                answer(outcome);
            }
            None => {
                st.waiters.push(Waiter {
                    until,
                    deadline: Instant::now() + timeout,
                    answer,
                });
                drop(st);
                self.idle.notify_all();
            }
        }
    }

    /// Runs the kept answers whose time has come; returns false once the
    /// queue is closed and every answer ran. Waits (until the earliest
    /// deadline) if none is ready.
    fn answer_ready(&self) -> bool {
        let mut st = self.state.lock();
        loop {
            let now = Instant::now();
            let mut ready = Vec::new();
            for w in std::mem::take(&mut st.waiters) {
                let outcome = if st.reached(w.until) {
                    Outcome::Sent
                } else if st.closed {
                    Outcome::Closed
                } else if w.deadline <= now {
                    Outcome::TimedOut
                } else {
                    st.waiters.push(w);
                    continue;
                };
                ready.push((w, outcome));
            }
            if !ready.is_empty() {
                drop(st);
                for (w, outcome) in ready {
                    if outcome == Outcome::TimedOut {
                        self.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    // A panicking answer must not end this thread: every
                    // later drop would then wait for an answer forever.
                    let answer = w.answer;
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer(outcome))).is_err() {
                        tracing::error!("a drop's answer panicked");
                    }
                }
                return true;
            }
            if st.closed {
                return false;
            }
            match st.waiters.iter().map(|w| w.deadline).min() {
                Some(d) => {
                    self.idle.wait_until(&mut st, d);
                }
                None => self.idle.wait(&mut st),
            }
        }
    }

    /// Ends the queue: pushes are ignored, `pop` returns `None` once what
    /// is queued has been taken, and kept answers run.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.ready.notify_all();
        self.idle.notify_all();
    }

    /// The counters.
    pub fn stats(&self) -> InvalStats {
        InvalStats {
            queued: self.state.lock().len() as u64,
            pushed: self.pushed.load(Ordering::Relaxed),
            coalesced: self.coalesced.load(Ordering::Relaxed),
            overflows: self.overflows.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
        }
    }
}

impl Default for InvalQueue {
    fn default() -> Self {
        Self::new(DEFAULT_BOUND)
    }
}

/// Runs kept answers as their invalidations are sent, until the queue
/// closes and none is left (run on its own thread).
pub fn answer_worker(queue: &InvalQueue) {
    while queue.answer_ready() {}
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn entry(parent: u64, name: &str) -> Inval {
        Inval::Entry {
            parent,
            name: name.as_bytes().to_vec(),
        }
    }

    fn inode(ino: u64, offset: i64) -> Inval {
        Inval::Inode { ino, offset }
    }

    /// Closes the queue and pops the entry lane, then the inode lane.
    fn drain(q: &InvalQueue) -> Vec<Inval> {
        q.close();
        let mut out: Vec<Inval> = std::iter::from_fn(|| q.pop(Lane::Entries)).collect();
        out.extend(std::iter::from_fn(|| q.pop(Lane::Inodes)));
        out
    }

    #[test]
    fn same_keys_coalesce_in_first_order_and_the_widest_range_wins() {
        let q = InvalQueue::new(100);
        q.push([entry(1, "a"), inode(5, -1), entry(1, "b")]);
        q.push([entry(1, "a"), inode(5, 0), inode(6, -1), inode(6, -1), entry(2, "a")]);
        // Attributes-only never narrows a queued full invalidation.
        q.push([inode(5, -1)]);
        let s = q.stats();
        assert_eq!((s.queued, s.pushed, s.coalesced, s.overflows), (5, 9, 4, 0));
        assert_eq!(
            drain(&q),
            [entry(1, "a"), entry(1, "b"), entry(2, "a"), inode(5, 0), inode(6, -1)]
        );
    }

    #[test]
    fn the_bound_holds_and_overflows_are_counted() {
        let q = InvalQueue::new(3);
        q.push((0..10).map(|i| inode(i, 0)));
        // A key already queued still coalesces when the queue is full.
        q.push([inode(1, -1), inode(2, 0)]);
        let s = q.stats();
        assert_eq!((s.queued, s.overflows, s.coalesced), (3, 7, 2));
        assert_eq!(drain(&q), [inode(0, 0), inode(1, 0), inode(2, 0)]);
        // Popped keys make room again; the bound covers both lanes.
        let q = InvalQueue::new(2);
        q.push([inode(1, 0), entry(2, "x")]);
        q.push([inode(3, 0)]);
        assert_eq!(q.stats().overflows, 1);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(1, 0)));
        q.push([inode(3, 0)]);
        assert_eq!(q.stats().overflows, 1);
        assert_eq!(drain(&q), [entry(2, "x"), inode(3, 0)]);
    }

    #[test]
    fn wait_sent_returns_once_everything_popped_is_done() {
        let q = Arc::new(InvalQueue::new(8));
        assert!(q.wait_sent(u64::MAX, Duration::ZERO, None), "an empty queue is idle");
        let t = q.push([entry(1, "x"), inode(2, 0)]);
        assert!(!q.wait_sent(t, Duration::from_millis(10), None), "two queued");
        let sent = Arc::new(AtomicUsize::new(0));
        let consumers: Vec<_> = [Lane::Entries, Lane::Inodes]
            .into_iter()
            .map(|lane| {
                let (q, sent) = (q.clone(), sent.clone());
                std::thread::spawn(move || {
                    while q.pop(lane).is_some() {
                        std::thread::sleep(Duration::from_millis(20));
                        sent.fetch_add(1, Ordering::SeqCst);
                        q.done(lane);
                    }
                })
            })
            .collect();
        assert!(q.wait_sent(t, Duration::from_secs(10), None));
        // Sent, not merely popped.
        assert_eq!(sent.load(Ordering::SeqCst), 2);
        q.close();
        for c in consumers {
            c.join().unwrap();
        }
    }

    #[test]
    fn a_ticket_waits_for_its_own_pushes_not_later_ones() {
        let q = InvalQueue::new(8);
        let first = q.push([inode(1, 0), entry(1, "a")]);
        let second = q.push([inode(2, 0), entry(1, "a")]);
        // The coalesced entry counts with the key it merged into.
        assert!(second > first);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(1, 0)));
        assert!(!q.wait_sent(first, Duration::ZERO, None), "popped is not sent");
        q.done(Lane::Inodes);
        assert!(!q.wait_sent(first, Duration::ZERO, None), "entry a is still queued");
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "a")));
        q.done(Lane::Entries);
        assert!(q.wait_sent(first, Duration::ZERO, None), "later pushes do not count");
        assert!(!q.wait_sent(second, Duration::ZERO, None));
        assert_eq!(q.pop(Lane::Inodes), Some(inode(2, 0)));
        q.done(Lane::Inodes);
        assert!(q.wait_sent(second, Duration::ZERO, None));
    }

    #[test]
    fn entries_in_a_held_directory_wait_for_its_release() {
        let q = InvalQueue::new(8);
        q.hold(7);
        q.push([entry(7, "a"), inode(7, 0), entry(8, "b"), entry(7, "c")]);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(7, 0)));
        q.done(Lane::Inodes);
        assert_eq!(q.pop(Lane::Entries), Some(entry(8, "b")));
        q.done(Lane::Entries);
        // The holder does not wait for the parked entries; anyone else does.
        assert!(q.wait_sent(u64::MAX, Duration::ZERO, Some(7)));
        assert!(!q.wait_sent(u64::MAX, Duration::from_millis(10), None));
        assert_eq!(q.stats().queued, 2);
        q.release(7);
        assert_eq!(drain(&q), [entry(7, "a"), entry(7, "c")]);
    }

    /// The kernel may take a directory's lock for a SETXATTR before its
    /// handler registers the hold, and the entry lane may already be
    /// blocked on that lock: the holder's answer must then not wait for
    /// entries (its own answer is what unblocks them), but still for its
    /// inodes, which the other lane sends meanwhile.
    #[test]
    fn a_holder_does_not_wait_behind_an_entry_sent_in_a_held_directory() {
        let q = InvalQueue::new(8);
        q.push([entry(7, "early")]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(7, "early")));
        // Blocked in the kernel on directory 7's lock from here on.
        q.hold(7);
        let t = q.push([entry(9, "sub"), inode(10, 0)]);
        assert!(!q.wait_sent(t, Duration::ZERO, Some(7)), "the inode is not sent yet");
        assert!(!q.wait_sent(t, Duration::ZERO, None));
        assert_eq!(q.pop(Lane::Inodes), Some(inode(10, 0)));
        q.done(Lane::Inodes);
        assert!(q.wait_sent(t, Duration::ZERO, Some(7)));
        assert!(!q.wait_sent(t, Duration::ZERO, None), "others wait for every entry");
        q.release(7);
        q.done(Lane::Entries);
        assert_eq!(q.pop(Lane::Entries), Some(entry(9, "sub")));
        q.done(Lane::Entries);
        assert!(q.wait_sent(t, Duration::ZERO, None));
    }

    #[test]
    fn a_kept_answer_runs_once_when_sent_at_its_deadline_or_at_close() {
        let q = Arc::new(InvalQueue::new(8));
        let answers = {
            let q = q.clone();
            std::thread::spawn(move || answer_worker(&q))
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let keep = |ticket: u64, timeout: Duration, tag: &'static str| {
            let tx = tx.clone();
            q.answer_when_sent(ticket, timeout, None, Box::new(move |o| tx.send((tag, o)).unwrap()));
        };
        // Nothing queued: answered at once.
        keep(0, Duration::from_secs(60), "empty");
        assert_eq!(rx.try_recv().unwrap(), ("empty", Outcome::Sent));
        // Answered when the lane reports it sent, not before.
        let t = q.push([inode(1, 0)]);
        keep(t, Duration::from_secs(60), "sent");
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(q.pop(Lane::Inodes), Some(inode(1, 0)));
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "popped is not sent"
        );
        q.done(Lane::Inodes);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            ("sent", Outcome::Sent)
        );
        // Never sent: answered at the deadline, and counted.
        let t = q.push([entry(2, "stuck")]);
        keep(t, Duration::from_millis(30), "late");
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            ("late", Outcome::TimedOut)
        );
        assert_eq!(q.stats().timeouts, 1);
        // Still waiting at close: answered then.
        let t = q.push([entry(3, "never")]);
        keep(t, Duration::from_secs(60), "closed");
        q.close();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            ("closed", Outcome::Closed)
        );
        answers.join().unwrap();
        assert!(rx.try_recv().is_err(), "each answer runs once");
    }

    #[test]
    fn an_inode_is_expedited_and_its_own_answer_waits_only_for_it() {
        let q = Arc::new(InvalQueue::new(8));
        let answers = {
            let q = q.clone();
            std::thread::spawn(move || answer_worker(&q))
        };
        q.push([entry(1, "stuck"), inode(2, 0), inode(3, 0), inode(4, -1)]);
        assert!(!q.expedite_inode(9), "nothing for inode 9");
        assert!(q.expedite_inode(3));
        let (tx, rx) = std::sync::mpsc::channel();
        q.answer_when_inode_sent(3, Duration::from_secs(60), Box::new(move |o| tx.send(o).unwrap()));
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "queued is not sent"
        );
        assert_eq!(q.pop(Lane::Inodes), Some(inode(3, 0)), "expedited to the front");
        assert!(q.expedite_inode(3), "being sent still counts");
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "popped is not sent"
        );
        q.done(Lane::Inodes);
        // Answered although the entry and inodes 2 and 4 are still queued.
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), Outcome::Sent);
        assert!(!q.expedite_inode(3));
        // Nothing queued for it: answered at once, on this thread.
        let (tx, rx) = std::sync::mpsc::channel();
        q.answer_when_inode_sent(3, Duration::from_secs(60), Box::new(move |o| tx.send(o).unwrap()));
        assert_eq!(rx.try_recv().unwrap(), Outcome::Sent);
        assert_eq!(drain(&q), vec![entry(1, "stuck"), inode(2, 0), inode(4, -1)]);
        answers.join().unwrap();
    }

    #[test]
    fn pop_waits_for_a_push_and_ends_at_close() {
        let q = Arc::new(InvalQueue::new(8));
        let consumer = |lane| {
            let q = q.clone();
            std::thread::spawn(move || std::iter::from_fn(|| q.pop(lane)).collect::<Vec<_>>())
        };
        let (entries, inodes) = (consumer(Lane::Entries), consumer(Lane::Inodes));
        std::thread::sleep(Duration::from_millis(20));
        q.push([entry(1, "x")]);
        q.push([inode(2, 0)]);
        std::thread::sleep(Duration::from_millis(20));
        q.close();
        // Pushes after close are ignored.
        q.push([inode(3, 0)]);
        assert_eq!(entries.join().unwrap(), [entry(1, "x")]);
        assert_eq!(inodes.join().unwrap(), [inode(2, 0)]);
    }
}
