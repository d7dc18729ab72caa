//! The kernel-invalidation queue (kernel-cache mode): bounded and coalescing.
//!
//! # Design
//! Request handlers hand invalidations to `fuse.rs` after their reply; it
//! pushes them here and the invalidation thread pops them and tells the
//! kernel. The queue is keyed by what is invalidated: an entry by
//! `(parent, name)`, an inode by node id. Pushing a key that is already
//! queued merges into the queued one (for an inode, the widest range wins:
//! offset 0 = attributes and every page, -1 = attributes only) and keeps its
//! place, so repeated drops of one directory cost nothing more.
//!
//! # Invariants
//! - The queue never holds more than `bound` keys; a push beyond that is
//!   dropped and counted in `overflows` (the kernel then keeps its copy until
//!   the entry and attribute timeouts, as with any lost notification).
//! - `push` never blocks on the consumer: it takes one leaf lock for a few
//!   map operations. A FUSE worker that blocked here while the invalidation
//!   thread waits for a kernel inode lock held by that worker's request
//!   could deadlock.
//! - Keys come out in the order they were first queued (drops queue theirs
//!   bottom-up, as the kernel wants them).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

/// A kernel cache invalidation to send after the reply (kernel-cache mode).
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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Entry(u64, Vec<u8>),
    Inode(u64),
}

#[derive(Debug, Default)]
struct State {
    order: VecDeque<Key>,
    /// Queued keys: for an inode, the offset to send; and the key's
    /// sequence number (the order it was first queued in).
    queued: HashMap<Key, (i64, u64)>,
    /// The next sequence number.
    next_seq: u64,
    /// The invalidation popped and not yet reported [`InvalQueue::done`],
    /// with its sequence number (the consumer is one thread).
    current: Option<(Key, u64)>,
    /// Directories whose inode lock the kernel holds for a request in
    /// flight (a SETXATTR on them), with a count: `inval_entry` of a name in
    /// one would wait for that request, so such entries are parked.
    held: HashMap<u64, usize>,
    /// Entries taken out of `order` because their directory is held; they
    /// go back to the front when it is released.
    parked: Vec<Key>,
    closed: bool,
}

/// The bounded, coalescing queue.
#[derive(Debug)]
pub struct InvalQueue {
    state: Mutex<State>,
    ready: Condvar,
    idle: Condvar,
    bound: usize,
    pushed: AtomicU64,
    coalesced: AtomicU64,
    overflows: AtomicU64,
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
        }
    }

    /// Queues `items`; never waits for the consumer. Returns the ticket to
    /// wait for them with ([`wait_sent`](Self::wait_sent)): the highest
    /// sequence number among their keys (a coalesced item counts with the
    /// key it merged into).
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
                    // Offset 0 covers the pages and the attributes; a
                    // positive offset covers the pages from there on.
                    if offset >= 0 && (*queued < 0 || offset < *queued) {
                        *queued = offset;
                    }
                    ticket = ticket.max(*seq);
                    self.coalesced.fetch_add(1, Ordering::Relaxed);
                } else if st.order.len() + st.parked.len() >= self.bound {
                    self.overflows.fetch_add(1, Ordering::Relaxed);
                } else {
                    st.next_seq += 1;
                    let seq = st.next_seq;
                    ticket = ticket.max(seq);
                    st.queued.insert(key.clone(), (offset, seq));
                    st.order.push_back(key);
                    added = true;
                }
            }
        }
        if added {
            self.ready.notify_one();
        }
        ticket
    }

    /// Takes the oldest invalidation that can be sent now (entries in a held
    /// directory are parked until it is released), waiting for one; `None`
    /// once the queue is closed and empty. Report each with
    /// [`done`](Self::done) once it has been sent.
    pub fn pop(&self) -> Option<Inval> {
        let mut st = self.state.lock();
        loop {
            while let Some(key) = st.order.pop_front() {
                if let Key::Entry(parent, _) = &key
                    && st.held.contains_key(parent)
                {
                    st.parked.push(key);
                    continue;
                }
                let (offset, seq) = st.queued.remove(&key).unwrap_or((0, 0));
                st.current = Some((key.clone(), seq));
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

    /// Reports that an invalidation taken with [`pop`](Self::pop) has been
    /// sent to the kernel (or failed).
    pub fn done(&self) {
        let mut st = self.state.lock();
        st.current = None;
        drop(st);
        // Waiters check their own tickets.
        self.idle.notify_all();
    }

    /// Marks directory `dir` as locked by the kernel for a request in
    /// flight: entries in it are parked, not sent, until
    /// [`release`](Self::release).
    pub fn hold(&self, dir: u64) {
        *self.state.lock().held.entry(dir).or_insert(0) += 1;
    }

    /// Ends one [`hold`](Self::hold) of `dir`; with the last one, its
    /// parked entries go back to the front of the queue.
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
            st.order.push_front(key);
        }
        drop(st);
        self.ready.notify_one();
    }

    /// Waits until every invalidation with a sequence number up to `ticket`
    /// (what one [`push`](Self::push) returned) has been sent, at most
    /// `timeout`; returns whether it got there. Later pushes do not delay
    /// it. A drop waits here before it answers, so that its caller sees the
    /// kernel's copies gone; the bound keeps a worker from waiting forever
    /// if the invalidation thread is stuck on a kernel lock whose holder
    /// waits for a FUSE reply. A waiter that holds a directory (`holding`:
    /// its own SETXATTR) does not wait for entries in held directories,
    /// queued, parked or in flight: they go once those requests are answered.
    pub fn wait_sent(&self, ticket: u64, timeout: std::time::Duration, holding: Option<u64>) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut st = self.state.lock();
        let sent = |st: &State| {
            let exempt = |k: &Key| holding.is_some() && matches!(k, Key::Entry(p, _) if st.held.contains_key(p));
            let waits_for = |k: &Key, seq: u64| seq <= ticket && !exempt(k);
            let pending = |k: &Key| st.queued.get(k).is_some_and(|&(_, seq)| waits_for(k, seq));
            !st.current.as_ref().is_some_and(|(k, seq)| waits_for(k, *seq))
                && !st.order.iter().any(pending)
                && !st.parked.iter().any(pending)
        };
        while !sent(&st) {
            if st.closed || self.idle.wait_until(&mut st, deadline).timed_out() {
                return sent(&st);
            }
        }
        true
    }

    /// Ends the queue: pushes are ignored, and `pop` returns `None` once
    /// what is queued has been taken.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.ready.notify_all();
        self.idle.notify_all();
    }

    /// The counters.
    pub fn stats(&self) -> InvalStats {
        InvalStats {
            queued: {
                let st = self.state.lock();
                (st.order.len() + st.parked.len()) as u64
            },
            pushed: self.pushed.load(Ordering::Relaxed),
            coalesced: self.coalesced.load(Ordering::Relaxed),
            overflows: self.overflows.load(Ordering::Relaxed),
        }
    }
}

impl Default for InvalQueue {
    fn default() -> Self {
        Self::new(DEFAULT_BOUND)
    }
}

#[cfg(test)]
mod tests {
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

    fn drain(q: &InvalQueue) -> Vec<Inval> {
        q.close();
        std::iter::from_fn(|| q.pop()).collect()
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
            [entry(1, "a"), inode(5, 0), entry(1, "b"), inode(6, -1), entry(2, "a")]
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
        // Popped keys make room again.
        let q = InvalQueue::new(2);
        q.push([inode(1, 0), inode(2, 0)]);
        assert_eq!(q.pop(), Some(inode(1, 0)));
        q.push([inode(3, 0)]);
        assert_eq!(q.stats().overflows, 0);
        assert_eq!(drain(&q), [inode(2, 0), inode(3, 0)]);
    }

    #[test]
    fn wait_idle_returns_once_everything_popped_is_done() {
        let q = std::sync::Arc::new(InvalQueue::new(8));
        assert!(
            q.wait_sent(u64::MAX, std::time::Duration::ZERO, None),
            "an empty queue is idle"
        );
        let t = q.push([entry(1, "x"), inode(2, 0)]);
        assert!(
            !q.wait_sent(t, std::time::Duration::from_millis(10), None),
            "two queued"
        );
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let consumer = {
            let (q, sent) = (q.clone(), sent.clone());
            std::thread::spawn(move || {
                while q.pop().is_some() {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    q.done();
                }
            })
        };
        assert!(q.wait_sent(t, std::time::Duration::from_secs(10), None));
        // Idle means sent, not merely popped.
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 2);
        q.close();
        consumer.join().unwrap();
    }

    #[test]
    fn a_ticket_waits_for_its_own_pushes_not_later_ones() {
        let q = InvalQueue::new(8);
        let first = q.push([inode(1, 0), entry(1, "a")]);
        let second = q.push([inode(2, 0), entry(1, "a")]);
        // The coalesced entry counts with the key it merged into.
        assert!(second > first);
        assert_eq!(q.pop(), Some(inode(1, 0)));
        assert!(
            !q.wait_sent(first, std::time::Duration::ZERO, None),
            "popped is not sent"
        );
        q.done();
        assert!(
            !q.wait_sent(first, std::time::Duration::ZERO, None),
            "entry a is still queued"
        );
        assert_eq!(q.pop(), Some(entry(1, "a")));
        q.done();
        assert!(
            q.wait_sent(first, std::time::Duration::ZERO, None),
            "later pushes do not count"
        );
        assert!(!q.wait_sent(second, std::time::Duration::ZERO, None));
        assert_eq!(q.pop(), Some(inode(2, 0)));
        q.done();
        assert!(q.wait_sent(second, std::time::Duration::ZERO, None));
    }

    #[test]
    fn entries_in_a_held_directory_wait_for_its_release() {
        let q = InvalQueue::new(8);
        q.hold(7);
        q.push([entry(7, "a"), inode(7, 0), entry(8, "b"), entry(7, "c")]);
        assert_eq!(q.pop(), Some(inode(7, 0)));
        q.done();
        assert_eq!(q.pop(), Some(entry(8, "b")));
        q.done();
        // The holder does not wait for the parked entries; anyone else does.
        assert!(q.wait_sent(u64::MAX, std::time::Duration::ZERO, Some(7)));
        assert!(!q.wait_sent(u64::MAX, std::time::Duration::from_millis(10), None));
        assert_eq!(q.stats().queued, 2);
        q.release(7);
        assert_eq!(drain(&q), [entry(7, "a"), entry(7, "c")]);
    }

    #[test]
    fn pop_waits_for_a_push_and_ends_at_close() {
        let q = std::sync::Arc::new(InvalQueue::new(8));
        let consumer = {
            let q = q.clone();
            std::thread::spawn(move || std::iter::from_fn(|| q.pop()).collect::<Vec<_>>())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        q.push([entry(1, "x")]);
        q.push([inode(2, 0)]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        q.close();
        // Pushes after close are ignored.
        q.push([inode(3, 0)]);
        assert_eq!(consumer.join().unwrap(), [entry(1, "x"), inode(2, 0)]);
    }
}
