//! The kernel-invalidation queue (kernel-cache mode, and the attributes the
//! default mode lends the kernel with the watch): bounded, coalescing,
//! sent by three lanes (entries, inodes, and a rescue lane for entries),
//! with answers deferred until a drop's own invalidations are sent.
//!
//! # Design
//! Request handlers hand invalidations to `fuse.rs`, which pushes them here;
//! invalidation threads pop them and tell the kernel, one per [`Lane`]:
//! two for entries (`inval_entry`, which takes the parent directory's inode
//! lock in the kernel) and one for inodes (`inval_inode`, which takes no
//! inode lock but waits for the locked and under-writeback pages it
//! invalidates). The lanes are separate so that an entry waiting for a
//! directory lock held by some request in flight never delays the
//! attribute and page invalidations a drop's caller needs to see. The
//! second entry lane is a rescue lane: it takes entries (from the same
//! queue) only while the first has been sending one for [`ASIDE_AFTER`],
//! and only in other directories than that one, so that an entry waiting
//! for one directory's lock does not hold up the entries of every other
//! directory behind it (the entries of a drop of `d` by
//! `user.rcufs.drop`, behind one in `d`'s parent that waits for an `rmdir`
//! of `d`, which waits for `d`'s lock, which the drop's SETXATTR holds
//! until it is answered). The two never send in one directory at once.
//! The queue is keyed by what is invalidated: an entry by
//! `(parent, name)`, an inode by node id.
//! Pushing a key that is already queued merges into the queued one (for an
//! inode, the widest range wins: offset 0 = attributes and every page, -1 =
//! attributes only) and keeps its place, so repeated drops of one
//! directory cost nothing more.
//!
//! A drop is answered only once its invalidations are sent, so that its
//! caller sees the kernel's copies gone: [`answer_when_sent`]
//! (InvalQueue::answer_when_sent) keeps the answer (a closure holding the
//! FUSE reply) and the answering thread ([`answer_worker`]) runs it when
//! they are, or after a bound. It waits for its own invalidations only
//! (the [`Ticket`] of its push: the keys it queued or merged into), not for
//! whatever was queued before them: an unrelated entry waiting in the
//! kernel for its directory's lock could be waiting, through a third
//! process, for the very lock the drop's own request holds (an `rmdir` of
//! the directory a drop by `user.rcufs.drop` holds locks the parent, then
//! waits for the directory), and only the bound broke that cycle. No FUSE
//! worker thread waits meanwhile: a worker that did would be one fewer to
//! answer the very requests (a LOOKUP under a directory lock, a WRITE of a
//! page under writeback) whose completion the invalidation threads may be
//! waiting for in the kernel; with every worker waiting that way the mount
//! stalled until the bound.
//!
//! # Invariants
//! - The queue never holds more than `bound` keys; a push beyond that is
//!   dropped and counted in `overflows` (the kernel then keeps its copy until
//!   the entry and attribute timeouts, as with any lost notification).
//! - `push` never blocks on the consumers: it takes one leaf lock for a few
//!   map operations.
//! - Inodes come out in the order they were first queued, and so do the
//!   entries of one directory. Entries of different directories come out in
//!   that order too, except while the rescue lane runs: an entry lane then
//!   passes over (at most [`ENTRY_SCAN`] of) those in the directory the
//!   other is sending in. Drops queue theirs bottom-up, and a directory's
//!   entry may then reach the kernel before its children's, which the
//!   kernel handles as well (the children are shrunk with it, or found
//!   under the directory's inode and invalidated after).
//! - A directory whose inode lock the kernel holds for a SETXATTR in flight
//!   ([`hold`](InvalQueue::hold)) gets no `inval_entry` until that request
//!   is answered: its entries are parked. Its holder's answer does not wait
//!   for entries in held directories, nor for any entry while an entry
//!   lane is sending one in a held directory (it may be blocked on that
//!   very lock, taken by the kernel before the hold was registered): those
//!   entries then follow its answer. Each check looks again at what was
//!   exempt only for the moment (another request's hold, a lane's).
//! - Every kept answer runs exactly once: when its invalidations are sent,
//!   at its deadline, or when the queue closes.
//! - A ticket's key counts as sent once it is neither queued nor being sent
//!   under the sequence number it was ticketed with: the same key queued
//!   again after it was sent is another invalidation, not waited for.

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
    /// A second `inval_entry` sender, taking entries from the same queue
    /// while [`Lane::Entries`] has been sending one for [`ASIDE_AFTER`] (it
    /// is waiting for a directory's lock), in other directories than that.
    EntriesAside = 2,
}

impl Lane {
    /// The queue the lane takes from (the entry lanes share one).
    fn queue(self) -> usize {
        match self {
            Lane::Entries | Lane::EntriesAside => 0,
            Lane::Inodes => 1,
        }
    }

    /// The other entry lane, for an entry lane.
    fn other_entries(self) -> Lane {
        match self {
            Lane::Entries => Lane::EntriesAside,
            _ => Lane::Entries,
        }
    }
}

/// How many queued entries an entry lane looks at, past those in the
/// directory the other entry lane sends in, before it waits instead: a
/// bound on each pop's cost when thousands of entries of one directory
/// queue behind one that waits for that directory's lock.
pub const ENTRY_SCAN: usize = 4096;

/// How long [`Lane::Entries`] sends one entry before [`Lane::EntriesAside`]
/// takes others: far above what one `inval_entry` costs when its
/// directory's lock is free (microseconds), far below the drops' bound.
pub const ASIDE_AFTER: Duration = Duration::from_millis(10);

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

/// What one [`push_ticketed`](InvalQueue::push_ticketed) queued, to wait
/// for: each key with the sequence number it is queued under (its own, or
/// that of the queued key it merged into). Keys dropped for want of room
/// are not in it: nothing will send them.
#[derive(Debug, Default)]
pub struct Ticket {
    /// Its entries, in the order pushed.
    entries: Vec<(Key, u64)>,
    /// Its inodes, in the order pushed.
    inodes: Vec<(Key, u64)>,
}

/// How far checks of one ticket got: the keys before `entry` and `inode`
/// were sent (or, for entries, in the holder's own directory); and, if
/// `entries_ok_at` is the state's [`entry_gen`](State::entry_gen), every
/// entry from `entry` on was sent or exempt at the last check.
#[derive(Debug, Default)]
struct Cursor {
    entry: usize,
    inode: usize,
    entries_ok_at: Option<u64>,
}

/// What a kept answer waits for.
#[derive(Debug)]
enum Until {
    /// Every key of `ticket` sent, for a waiter holding `holding`; `at`
    /// remembers how far earlier checks got.
    Ticket {
        ticket: Ticket,
        at: Cursor,
        holding: Option<u64>,
    },
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
    current: [Option<(Key, u64)>; 3],
    /// When [`Lane::Entries`] popped the entry it is sending, if any.
    entries_since: Option<Instant>,
    /// [`Lane::EntriesAside`] waits with no deadline: the first lane's next
    /// pop must wake it.
    aside_idle: bool,
    /// Moves whenever an entry's exemption for a holder may change: an
    /// entry lane starts or ends one, a directory is held or released.
    entry_gen: u64,
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
    /// Whether key `key`, ticketed under `seq`, is still queued (parked
    /// included) or being sent.
    fn pending(&self, key: &Key, seq: u64) -> bool {
        self.queued.get(key).is_some_and(|&(_, s)| s == seq)
            || self.current.iter().flatten().any(|(k, s)| *s == seq && k == key)
    }

    /// Whether every key of `ticket` was sent, for a waiter holding
    /// `holding` (see the module's invariants). The cursor moves past the
    /// keys seen sent and the entries in the holder's own directory (exempt
    /// until its answer, which ends its hold), up to the first entry exempt
    /// only for now; the entries after that are walked again only when
    /// something that decides an entry's exemption changed (`entry_gen`).
    /// So the answering thread, which checks after every invalidation sent,
    /// walks a large drop's ticket about once in all.
    fn sent(&self, ticket: &Ticket, at: &mut Cursor, holding: Option<u64>) -> bool {
        // Inodes are never exempt.
        while let Some((k, seq)) = ticket.inodes.get(at.inode) {
            if self.pending(k, *seq) {
                return false;
            }
            at.inode += 1;
        }
        if at.entries_ok_at == Some(self.entry_gen) {
            return true;
        }
        let in_held = |k: &Key| matches!(k, Key::Entry(p, _) if self.held.contains_key(p));
        let lane_in_held = |l: Lane| self.current[l as usize].as_ref().is_some_and(|(k, _)| in_held(k));
        // An entry lane may be blocked on a held directory's lock: a
        // holder's answer must not wait for it, nor for what queues behind
        // it. (The rescue lane could send some of that, but it may be
        // blocked too, in a directory a third process locked while it waits
        // for the held one; the holder's entries outside its own directory
        // then follow its answer.)
        let skip_entries = holding.is_some() && (lane_in_held(Lane::Entries) || lane_in_held(Lane::EntriesAside));
        let exempt = |k: &Key| holding.is_some() && (in_held(k) || (skip_entries && k.lane() == Lane::Entries));
        let own = |k: &Key| matches!((k, holding), (Key::Entry(p, _), Some(h)) if *p == h);
        let mut i = at.entry;
        let mut advancing = true;
        while let Some((k, seq)) = ticket.entries.get(i) {
            if self.pending(k, *seq) && !own(k) {
                if !exempt(k) {
                    return false;
                }
                // Exempt while another hold lasts or a lane is blocked:
                // looked at again once that may have changed.
                advancing = false;
            }
            i += 1;
            if advancing {
                at.entry = i;
            }
        }
        at.entries_ok_at = Some(self.entry_gen);
        true
    }

    /// Whether nothing for inode `ino` is queued or being sent.
    fn inode_sent(&self, ino: u64) -> bool {
        let key = Key::Inode(ino);
        !self.queued.contains_key(&key)
            && self.current[Lane::Inodes as usize]
                .as_ref()
                .is_none_or(|(k, _)| *k != key)
    }

    fn reached(&self, until: &mut Until) -> bool {
        match until {
            Until::Ticket { ticket, at, holding } => self.sent(ticket, at, *holding),
            Until::Inode(ino) => self.inode_sent(*ino),
        }
    }

    fn len(&self) -> usize {
        self.order[0].len() + self.order[1].len() + self.parked.len()
    }

    /// Whether [`Lane::Entries`] has been sending one entry for
    /// [`ASIDE_AFTER`]: the rescue lane may take others.
    fn entries_stuck(&self) -> bool {
        self.entries_since.is_some_and(|t| t.elapsed() >= ASIDE_AFTER)
    }

    /// The next entry for entry lane `lane`: the first queued one not in
    /// the directory the other entry lane is sending in (looking at most
    /// [`ENTRY_SCAN`] of those); entries in held directories met on the way
    /// are parked.
    fn take_entry(&mut self, lane: Lane) -> Option<Key> {
        let busy = match &self.current[lane.other_entries() as usize] {
            Some((Key::Entry(p, _), _)) => Some(*p),
            _ => None,
        };
        let mut i = 0;
        while i < ENTRY_SCAN {
            let parent = match self.order[0].get(i)? {
                Key::Entry(p, _) => *p,
                Key::Inode(_) => unreachable!("inodes are queued in their own lane"),
            };
            if Some(parent) == busy {
                i += 1;
            } else if self.held.contains_key(&parent) {
                let key = self.order[0].remove(i).expect("looked at just now");
                self.parked.push(key);
            } else {
                return self.order[0].remove(i);
            }
        }
        None
    }
}

/// The bounded, coalescing queue.
pub struct InvalQueue {
    state: Mutex<State>,
    /// Signalled when a lane has something to pop (or the queue closed).
    ready: Condvar,
    /// [`Lane::EntriesAside`]'s: signalled when [`Lane::Entries`] pops an
    /// entry while the rescue lane waits with no deadline, when entries are
    /// queued while the first lane is stuck, when entries are released, and
    /// at close.
    aside: Condvar,
    /// Signalled when what the kept answers wait for may have changed
    /// (`done`, `hold`, `release`, a new answer, close) and when a pop
    /// makes room in a full queue (for `push_waiting`).
    idle: Condvar,
    bound: usize,
    pushed: AtomicU64,
    coalesced: AtomicU64,
    overflows: AtomicU64,
    timeouts: AtomicU64,
    rescued: AtomicU64,
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
    /// Entries the rescue lane ([`Lane::EntriesAside`]) sent while the
    /// first entry lane waited for a directory's lock.
    pub rescued: u64,
}

/// Most invalidations queued by default.
pub const DEFAULT_BOUND: usize = 65_536;

impl InvalQueue {
    /// A queue holding at most `bound` (at least 1) keys.
    pub fn new(bound: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            aside: Condvar::new(),
            idle: Condvar::new(),
            bound: bound.max(1),
            pushed: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            rescued: AtomicU64::new(0),
        }
    }

    /// Queues `items`; never waits for the consumers.
    pub fn push(&self, items: impl IntoIterator<Item = Inval>) {
        self.push_inner(items, None);
    }

    /// Queues `items` like [`push`](Self::push), and returns the ticket to
    /// wait for them with ([`answer_when_sent`](Self::answer_when_sent)).
    pub fn push_ticketed(&self, items: impl IntoIterator<Item = Inval>) -> Ticket {
        let mut ticket = Ticket::default();
        self.push_inner(items, Some(&mut ticket));
        ticket
    }

    fn push_inner(&self, items: impl IntoIterator<Item = Inval>, mut ticket: Option<&mut Ticket>) {
        let mut added = false;
        let stuck;
        {
            let mut st = self.state.lock();
            if st.closed {
                return;
            }
            for item in items {
                self.pushed.fetch_add(1, Ordering::Relaxed);
                let (key, offset) = match item {
                    Inval::Entry { parent, name } => (Key::Entry(parent, name), 0),
                    Inval::Inode { ino, offset } => (Key::Inode(ino), offset),
                };
                let (seq, new) = if let Some((queued, seq)) = st.queued.get_mut(&key) {
                    if offset >= 0 && (*queued < 0 || offset < *queued) {
                        *queued = offset;
                    }
                    self.coalesced.fetch_add(1, Ordering::Relaxed);
                    (*seq, false)
                } else if st.len() >= self.bound {
                    self.overflows.fetch_add(1, Ordering::Relaxed);
                    continue;
                } else {
                    st.next_seq += 1;
                    (st.next_seq, true)
                };
                // A copy of the key only for a ticket.
                if let Some(t) = ticket.as_deref_mut() {
                    match key.lane() {
                        Lane::Inodes => t.inodes.push((key.clone(), seq)),
                        _ => t.entries.push((key.clone(), seq)),
                    }
                }
                if new {
                    st.queued.insert(key.clone(), (offset, seq));
                    st.order[key.lane() as usize].push_back(key);
                    added = true;
                }
            }
            stuck = added && st.entries_stuck();
        }
        if added {
            // The entry and inode lanes' threads wait on one condition
            // variable; the rescue lane is told only when it may take
            // something.
            self.ready.notify_all();
            if stuck {
                self.aside.notify_one();
            }
        }
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
                    // `idle` is signalled when a pop makes room.
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
    /// the queue is closed and the lane empty (for [`Lane::EntriesAside`],
    /// once it is closed and nothing is left for it: [`Lane::Entries`]
    /// sends the rest). Entries in a held directory are parked instead.
    /// Report each with [`done`](Self::done) once sent.
    pub fn pop(&self, lane: Lane) -> Option<Inval> {
        let mut st = self.state.lock();
        loop {
            // Only the rescue lane asks (a read of the clock).
            let stuck = lane == Lane::EntriesAside && st.entries_stuck();
            let next = match lane {
                Lane::Inodes => st.order[1].pop_front(),
                Lane::Entries => st.take_entry(lane),
                Lane::EntriesAside if stuck => st.take_entry(lane),
                Lane::EntriesAside => None,
            };
            if let Some(key) = next {
                let (offset, seq) = st.queued.remove(&key).unwrap_or((0, 0));
                st.current[lane as usize] = Some((key.clone(), seq));
                // Room for `push_waiting`, if the queue was full.
                let room = st.len() + 1 >= self.bound;
                if lane != Lane::Inodes {
                    st.entry_gen += 1;
                }
                match lane {
                    Lane::Entries => {
                        st.entries_since = Some(Instant::now());
                        if st.aside_idle {
                            // The rescue lane times this entry from now.
                            self.aside.notify_one();
                        }
                    }
                    Lane::EntriesAside => {
                        self.rescued.fetch_add(1, Ordering::Relaxed);
                    }
                    Lane::Inodes => {}
                }
                drop(st);
                // A pop makes no kept answer ready (a popped key is still
                // being sent, and entries in held directories are parked,
                // not popped), so it wakes no answer: a drop of thousands
                // of names would cost as many wake-ups of the answering
                // thread.
                if room {
                    self.idle.notify_all();
                }
                return Some(match key {
                    Key::Entry(parent, name) => Inval::Entry { parent, name },
                    Key::Inode(ino) => Inval::Inode { ino, offset },
                });
            }
            if st.closed && (lane == Lane::EntriesAside || st.order[lane.queue()].is_empty()) {
                return None;
            }
            match (lane, st.entries_since) {
                (Lane::EntriesAside, Some(t)) if !stuck => {
                    self.aside.wait_until(&mut st, t + ASIDE_AFTER);
                }
                (Lane::EntriesAside, _) => {
                    // Nothing being sent, or stuck with nothing it may take:
                    // woken by the first lane's next pop (from which it
                    // times), by pushes while the first lane is stuck, by
                    // releases and at close.
                    st.aside_idle = true;
                    self.aside.wait(&mut st);
                    st.aside_idle = false;
                }
                _ => self.ready.wait(&mut st),
            }
        }
    }

    /// Reports the invalidation last popped from `lane` as sent.
    pub fn done(&self, lane: Lane) {
        {
            let mut st = self.state.lock();
            st.current[lane as usize] = None;
            if lane == Lane::Entries {
                st.entries_since = None;
            }
            if lane != Lane::Inodes {
                st.entry_gen += 1;
            }
        }
        self.idle.notify_all();
        if lane == Lane::EntriesAside {
            // The first entry lane may wait for this directory to be free.
            self.ready.notify_all();
        }
    }

    /// Marks `dir` as locked by the kernel for a request (SETXATTR) in
    /// flight: entries in it are parked, not sent, until
    /// [`release`](Self::release).
    pub fn hold(&self, dir: u64) {
        {
            let mut st = self.state.lock();
            *st.held.entry(dir).or_insert(0) += 1;
            st.entry_gen += 1;
        }
        // A holder's answer may be ready now: an entry lane may already be
        // sending in `dir`, and exempts its entries.
        self.idle.notify_all();
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
        st.entry_gen += 1;
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
        self.aside.notify_one();
        self.idle.notify_all();
    }

    /// Waits until every key of `ticket` was sent, as a kept answer would
    /// (see [`answer_when_sent`](Self::answer_when_sent)), at most
    /// `timeout`; returns whether it got there. The tests' synchronous view
    /// of the same rule.
    #[cfg(test)]
    pub fn wait_sent(&self, ticket: &Ticket, timeout: Duration, holding: Option<u64>) -> bool {
        let deadline = Instant::now() + timeout;
        let mut at = Cursor::default();
        let mut st = self.state.lock();
        while !st.sent(ticket, &mut at, holding) {
            if st.closed || self.idle.wait_until(&mut st, deadline).timed_out() {
                return st.sent(ticket, &mut at, holding);
            }
        }
        true
    }

    /// Keeps `answer` until every invalidation of `ticket` (what one
    /// [`push_ticketed`](Self::push_ticketed) returned) was sent, or
    /// `timeout` passed; other pushes, before or after, do not delay it. A
    /// waiter that holds a directory (`holding`: its own SETXATTR) does not
    /// wait for entries in held directories, queued, parked or in flight,
    /// nor for entries while an entry lane sends one in a held directory:
    /// they go once those requests are answered. [`answer_worker`] then runs the answer, on its
    /// own thread, with how it ended; it runs at once, on this thread, if
    /// that is already so (or the queue is closed).
    pub fn answer_when_sent(&self, ticket: Ticket, timeout: Duration, holding: Option<u64>, answer: Answer) {
        self.keep(
            Until::Ticket {
                ticket,
                at: Cursor::default(),
                holding,
            },
            timeout,
            answer,
        );
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

    fn keep(&self, mut until: Until, timeout: Duration, answer: Answer) {
        let mut st = self.state.lock();
        let now = if st.closed {
            Some(Outcome::Closed)
        } else if st.reached(&mut until) {
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
            for mut w in std::mem::take(&mut st.waiters) {
                let outcome = if st.reached(&mut w.until) {
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
        self.aside.notify_all();
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
            rescued: self.rescued.load(Ordering::Relaxed),
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
        assert!(
            q.wait_sent(&Ticket::default(), Duration::ZERO, None),
            "an empty ticket is sent"
        );
        let t = q.push_ticketed([entry(1, "x"), inode(2, 0)]);
        assert!(!q.wait_sent(&t, Duration::from_millis(10), None), "two queued");
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
        assert!(q.wait_sent(&t, Duration::from_secs(10), None));
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
        let first = q.push_ticketed([inode(1, 0), entry(1, "a")]);
        // The coalesced entry counts with the key it merged into.
        let second = q.push_ticketed([inode(2, 0), entry(1, "a")]);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(1, 0)));
        assert!(!q.wait_sent(&first, Duration::ZERO, None), "popped is not sent");
        q.done(Lane::Inodes);
        assert!(!q.wait_sent(&first, Duration::ZERO, None), "entry a is still queued");
        assert!(
            !q.wait_sent(&second, Duration::ZERO, None),
            "its merged entry is still queued"
        );
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "a")));
        q.done(Lane::Entries);
        assert!(q.wait_sent(&first, Duration::ZERO, None), "later pushes do not count");
        assert!(!q.wait_sent(&second, Duration::ZERO, None));
        assert_eq!(q.pop(Lane::Inodes), Some(inode(2, 0)));
        q.done(Lane::Inodes);
        assert!(q.wait_sent(&second, Duration::ZERO, None));
    }

    /// A drop waits for its own invalidations only: an entry queued before
    /// them may wait in the kernel for a lock that a third process holds
    /// while it waits for the lock the drop's own request holds.
    #[test]
    fn a_ticket_does_not_wait_for_what_others_queued_before_it() {
        let q = InvalQueue::new(8);
        q.push([entry(1, "other"), inode(5, -1)]);
        let t = q.push_ticketed([inode(2, 0), inode(3, -1)]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "other")));
        // Blocked in the kernel from here on: never reported done.
        assert!(!q.wait_sent(&t, Duration::ZERO, None), "nothing of its own sent yet");
        assert_eq!(q.pop(Lane::Inodes), Some(inode(5, -1)));
        q.done(Lane::Inodes);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(2, 0)));
        q.done(Lane::Inodes);
        assert!(!q.wait_sent(&t, Duration::ZERO, None), "inode 3 is still queued");
        assert_eq!(q.pop(Lane::Inodes), Some(inode(3, -1)));
        q.done(Lane::Inodes);
        assert!(
            q.wait_sent(&t, Duration::ZERO, None),
            "the blocked entry is not its own"
        );
        // A key queued again after it was sent is another invalidation.
        let again = q.push_ticketed([inode(7, 0)]);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(7, 0)));
        q.done(Lane::Inodes);
        q.push([inode(7, 0)]);
        assert!(q.wait_sent(&again, Duration::ZERO, None), "re-queued after it was sent");
    }

    /// The rescue lane takes entries only once the first entry lane has
    /// been sending one for [`ASIDE_AFTER`], and never in that directory:
    /// an entry waiting in the kernel for one directory's lock holds up
    /// that directory's later entries only.
    #[test]
    fn the_rescue_lane_passes_over_the_directory_the_first_is_stuck_in() {
        let q = InvalQueue::new(16);
        q.hold(4);
        let t = q.push_ticketed([
            entry(1, "a"),
            entry(1, "b"),
            entry(2, "c"),
            entry(4, "held"),
            entry(1, "d"),
            entry(3, "e"),
        ]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "a")));
        let popped = Instant::now();
        // Blocked in the kernel on directory 1's lock from here on.
        assert_eq!(q.pop(Lane::EntriesAside), Some(entry(2, "c")));
        assert!(popped.elapsed() >= ASIDE_AFTER, "taken before the first lane was stuck");
        q.done(Lane::EntriesAside);
        assert_eq!(q.pop(Lane::EntriesAside), Some(entry(3, "e")), "held ones are parked");
        q.done(Lane::EntriesAside);
        assert!(!q.wait_sent(&t, Duration::ZERO, None), "directory 1's entries are left");
        assert_eq!(q.stats().queued, 3);
        // Nothing left for the rescue lane but directory 1's: it waits
        // (here, with the queue closed, it ends).
        q.close();
        assert_eq!(q.pop(Lane::EntriesAside), None);
        q.done(Lane::Entries);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "b")));
        q.done(Lane::Entries);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "d")), "one directory's in order");
        q.done(Lane::Entries);
        assert!(q.wait_sent(&t, Duration::ZERO, Some(4)));
        assert_eq!(q.stats().queued, 1, "the held directory's entry stays parked");
    }

    /// While the first entry lane is not stuck, the rescue lane takes
    /// nothing: entries keep their order.
    #[test]
    fn the_rescue_lane_waits_while_the_first_lane_flows() {
        let q = Arc::new(InvalQueue::new(8));
        q.push([entry(1, "a"), entry(2, "b")]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "a")));
        q.done(Lane::Entries);
        let aside = {
            let q = q.clone();
            std::thread::spawn(move || q.pop(Lane::EntriesAside))
        };
        std::thread::sleep(ASIDE_AFTER * 3);
        q.close();
        assert_eq!(aside.join().unwrap(), None, "the rescue lane took an entry");
        assert_eq!(q.pop(Lane::Entries), Some(entry(2, "b")));
    }

    /// A rescue lane that found nothing to take while the first lane was
    /// stuck, and then waits with no deadline, is woken by the first
    /// lane's next pop: entries queued meanwhile are not left until a later
    /// push or the close.
    #[test]
    fn the_rescue_lane_times_every_entry_the_first_lane_starts() {
        let q = Arc::new(InvalQueue::new(8));
        q.push([entry(1, "a")]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "a")));
        let (tx, rx) = std::sync::mpsc::channel();
        let aside = {
            let q = q.clone();
            std::thread::spawn(move || tx.send(q.pop(Lane::EntriesAside)).unwrap())
        };
        // Stuck, with nothing else queued: the rescue lane waits.
        std::thread::sleep(ASIDE_AFTER * 3);
        q.done(Lane::Entries);
        // Not stuck now: this push does not wake it.
        q.push([entry(1, "b"), entry(2, "x")]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "b")));
        // Stuck again on directory 1: directory 2's entry is the rescue
        // lane's.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            Some(entry(2, "x")),
            "the rescue lane slept through the first lane's pop"
        );
        aside.join().unwrap();
        q.close();
    }

    /// A pop that makes room in a full queue wakes `push_waiting` at once,
    /// not at the invalidation's `done` (which an entry waiting for a lock
    /// may not reach for a long time).
    #[test]
    fn a_pop_that_makes_room_wakes_a_waiting_push() {
        let q = Arc::new(InvalQueue::new(1));
        q.push([inode(1, 0)]);
        let (tx, rx) = std::sync::mpsc::channel();
        let pusher = {
            let q = q.clone();
            std::thread::spawn(move || {
                tx.send(q.push_waiting(vec![inode(2, 0)], Duration::from_secs(30)))
                    .unwrap()
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(q.pop(Lane::Inodes), Some(inode(1, 0)));
        // Never reported done.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            0,
            "dropped for want of room"
        );
        pusher.join().unwrap();
        assert_eq!(q.stats().queued, 1);
    }

    /// The rescue lane looks no further than [`ENTRY_SCAN`] entries past
    /// the stuck directory's.
    #[test]
    fn the_rescue_lane_looks_only_so_far() {
        let q = Arc::new(InvalQueue::new(ENTRY_SCAN + 8));
        q.push((0..=ENTRY_SCAN).map(|i| entry(1, &i.to_string())));
        q.push([entry(2, "far")]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(1, "0")));
        // ENTRY_SCAN of directory 1 left in front of directory 2's.
        let aside = {
            let q = q.clone();
            std::thread::spawn(move || q.pop(Lane::EntriesAside))
        };
        std::thread::sleep(ASIDE_AFTER * 5);
        assert!(!aside.is_finished(), "directory 2's entry is beyond the scan");
        q.close();
        assert_eq!(aside.join().unwrap(), None);
        assert_eq!(q.stats().queued, ENTRY_SCAN as u64 + 1);
    }

    #[test]
    fn entries_in_a_held_directory_wait_for_its_release() {
        let q = InvalQueue::new(8);
        q.hold(7);
        let t = q.push_ticketed([entry(7, "a"), inode(7, 0), entry(8, "b"), entry(7, "c")]);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(7, 0)));
        q.done(Lane::Inodes);
        assert_eq!(q.pop(Lane::Entries), Some(entry(8, "b")));
        q.done(Lane::Entries);
        // The holder does not wait for the parked entries; anyone else does.
        assert!(q.wait_sent(&t, Duration::ZERO, Some(7)));
        assert!(!q.wait_sent(&t, Duration::from_millis(10), None));
        assert_eq!(q.stats().queued, 2);
        q.release(7);
        assert_eq!(drain(&q), [entry(7, "a"), entry(7, "c")]);
    }

    /// The kernel may take a directory's lock for a SETXATTR before its
    /// handler registers the hold, and an entry lane may already be
    /// blocked on that lock: the holder's answer must then not wait for
    /// entries (its own answer is what unblocks them, or, through a third
    /// process, the other entry lane's), but still for its inodes, which
    /// the inode lane sends meanwhile.
    #[test]
    fn a_holder_does_not_wait_behind_an_entry_sent_in_a_held_directory() {
        let q = InvalQueue::new(8);
        q.push([entry(7, "early")]);
        assert_eq!(q.pop(Lane::Entries), Some(entry(7, "early")));
        // Blocked in the kernel on directory 7's lock from here on.
        q.hold(7);
        let t = q.push_ticketed([entry(9, "sub"), inode(10, 0)]);
        assert!(!q.wait_sent(&t, Duration::ZERO, Some(7)), "the inode is not sent yet");
        assert!(!q.wait_sent(&t, Duration::ZERO, None));
        assert_eq!(q.pop(Lane::Inodes), Some(inode(10, 0)));
        q.done(Lane::Inodes);
        assert!(q.wait_sent(&t, Duration::ZERO, Some(7)));
        assert!(!q.wait_sent(&t, Duration::ZERO, None), "others wait for their entries");
        // The rescue lane sends the entry (the first lane is stuck).
        assert_eq!(q.pop(Lane::EntriesAside), Some(entry(9, "sub")));
        q.done(Lane::EntriesAside);
        assert!(q.wait_sent(&t, Duration::ZERO, None));
        assert_eq!(q.stats().rescued, 1);
        q.release(7);
        q.done(Lane::Entries);
    }

    /// An entry exempt only while a hold lasts is waited for again once it
    /// ends: a later check does not take it as sent.
    #[test]
    fn an_exemption_that_ends_is_not_taken_as_sent() {
        let q = InvalQueue::new(8);
        q.hold(7);
        q.hold(5);
        let t = q.push_ticketed([entry(5, "other"), inode(10, 0)]);
        let mut next = Cursor::default();
        assert!(!q.state.lock().sent(&t, &mut next, Some(7)), "the inode is queued");
        // Directory 5 is another request's: released before this answer.
        q.release(5);
        assert_eq!(q.pop(Lane::Inodes), Some(inode(10, 0)));
        q.done(Lane::Inodes);
        assert!(!q.state.lock().sent(&t, &mut next, Some(7)), "the entry in 5 is queued");
        assert_eq!(q.pop(Lane::Entries), Some(entry(5, "other")));
        q.done(Lane::Entries);
        assert!(q.state.lock().sent(&t, &mut next, Some(7)));
    }

    #[test]
    fn a_kept_answer_runs_once_when_sent_at_its_deadline_or_at_close() {
        let q = Arc::new(InvalQueue::new(8));
        let answers = {
            let q = q.clone();
            std::thread::spawn(move || answer_worker(&q))
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let keep = |ticket: Ticket, timeout: Duration, tag: &'static str| {
            let tx = tx.clone();
            q.answer_when_sent(ticket, timeout, None, Box::new(move |o| tx.send((tag, o)).unwrap()));
        };
        // Nothing queued: answered at once.
        keep(Ticket::default(), Duration::from_secs(60), "empty");
        assert_eq!(rx.try_recv().unwrap(), ("empty", Outcome::Sent));
        // Answered when the lane reports it sent, not before.
        let t = q.push_ticketed([inode(1, 0)]);
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
        let t = q.push_ticketed([entry(2, "stuck")]);
        keep(t, Duration::from_millis(30), "late");
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            ("late", Outcome::TimedOut)
        );
        assert_eq!(q.stats().timeouts, 1);
        // Still waiting at close: answered then.
        let t = q.push_ticketed([entry(3, "never")]);
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
