//! The eviction policy: S3-FIFO (Yang et al., "FIFO queues are all you need
//! for cache eviction", SOSP 2023), kept lazy in the way of seed 000's LRU
//! ("Scalability of the directory entry cache", §6): a hit never touches a
//! list.
//!
//! # What
//!
//! Unused positive entries sit on one of two FIFO queues, intrusive lists
//! linked through the nodes (`lru.rs`):
//! - *small*, the probation queue, which new entries enter, about
//!   `SMALL_PERCENT` % of `max_entries`;
//! - *main*, for entries that were hit while on probation, or came back soon
//!   after probation evicted them.
//!
//! Beside them, the *ghost* remembers fingerprints of entries that were
//! evicted from *small*: an entry whose key is still remembered when it is
//! cached again goes straight to *main*. Negative entries keep their own
//! list, bounded by `max_negative` as before and pruned as a CLOCK (a hit
//! buys a second pass).
//!
//! # Algorithm
//!
//! Each node has an access frequency (`Node::freq`, 0 to `MAX_FREQ`), which a
//! hit raises only while it is below `MAX_FREQ` (so repeated hits on a hot
//! entry write nothing), and a queue byte (`Node::queue`, a [`Queue`]). The
//! pruner ([`Lru::select`]) takes a victim from the head of *small* when
//! *small* is over its share (or *main* is empty), going on along *small*
//! until it evicts one, else from the head of *main*:
//! - an entry in use (count above 0) is taken off its list, lazily, as the
//!   LRU always did; one taken off *small* is marked for *main* (it is in
//!   use: accessed), where its last `put` puts it back;
//! - on *small*, an entry with a frequency above 0 moves to *main*'s tail
//!   with its frequency reset; one without is evicted and its fingerprint
//!   goes to the ghost;
//! - on *main*, an entry with a frequency above 0 loses one and goes to the
//!   tail (the CLOCK of S3-FIFO's main queue); one without is evicted.
//!
//! A node that is put on a list for the first time (by its insert; its
//! queue is [`Queue::New`]) goes to *main* if the ghost holds its
//! fingerprint, else to *small*; later it goes back to the queue its byte
//! names. A new entry still held by its inserter when the pruner reaches
//! it counts as used, as any entry in use does.
//!
//! On the `churn` bench's stream (Zipf 0.99 over ten times the capacity) the
//! lazy LRU this replaces kept 0.747 of the accesses, quick_cache 0.797;
//! this policy keeps 0.799 with the paper's 10 % small queue. A simulation
//! on the same stream (small share, ghost size and frequency bits swept)
//! put a one-bit frequency (the old referenced bit) at 0.793 with the same
//! queues: the two bits are what lifts it above quick_cache. See
//! BENCHMARKS.md, "dcache: counted lookups and the churn policy".
//!
//! # The ghost
//!
//! S3-FIFO's ghost is a FIFO of the keys most recently evicted from *small*.
//! Here it is a direct-mapped table of 32-bit fingerprints (the key's hash
//! bits, which the node keeps): remembering overwrites whatever held the
//! slot, and a fingerprint found is cleared. It costs 4 bytes per slot and
//! one memory access, and forgets in random rather than FIFO order, which
//! the simulation showed to be as good. A ghost as large as the main queue
//! (the paper's) kept less of the Zipf stream than one of a sixteenth to an
//! eighth of the capacity, which is what `GHOST_DIVISOR` gives.
//!
//! # Invariants
//!
//! - Everything here (the lists, the ghost, every node's `queue` byte and
//!   the pruner's writes of `freq`) changes only under the LRU lock; hits
//!   write `freq` without it.
//! - A node is on the list its `queue` byte and its sign name (negative
//!   entries: the negative list) if and only if its `ON_LRU` state bit is
//!   set.
//! - The pruner evicts only an entry whose state word it moved from count 0
//!   to `DEAD` (a compare-exchange, as before), so an entry in use is never
//!   evicted.

use std::ptr::NonNull;

use crate::Config;
use crate::lru::List;
use crate::node::{COUNT_MASK, DEAD, Node, NodePtr, ON_LRU, UNHASHED};
use crate::sync::Ordering;

/// The largest access frequency a hit records (two bits, as S3-FIFO's).
pub(crate) const MAX_FREQ: u8 = 3;

/// The share of `max_entries` that the probation queue keeps before the
/// pruner takes victims from it first (S3-FIFO's default).
const SMALL_PERCENT: usize = 10;

/// The ghost has `max_entries / GHOST_DIVISOR` slots, rounded up to a power
/// of two (so between a sixteenth and an eighth of `max_entries`).
const GHOST_DIVISOR: usize = 16;

/// Which queue a positive node is on, or goes back to when its last
/// reference is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Queue {
    /// Never listed yet: the ghost decides.
    New = 0,
    /// The probation queue.
    Small = 1,
    /// The main queue.
    Main = 2,
}

impl Queue {
    /// The queue byte of `node`, a node of this shard.
    ///
    /// # Safety
    /// The caller holds the shard's LRU lock (`&mut Lru`), under which
    /// alone the byte is read and written once the node is published.
    unsafe fn of<T>(node: &Node<T>) -> Self {
        // SAFETY: forwarded from the caller.
        match node.queue.with(|q| unsafe { *q }) {
            0 => Queue::New,
            1 => Queue::Small,
            _ => Queue::Main,
        }
    }

    /// # Safety
    /// As for `of`.
    unsafe fn set<T>(self, node: &Node<T>) {
        // SAFETY: forwarded from the caller.
        node.queue.with_mut(|q| unsafe { *q = self as u8 });
    }
}

/// Fingerprints of entries recently evicted from *small*.
pub(crate) struct Ghost {
    /// 0 is an empty slot; fingerprints have bit 0 set.
    slots: Box<[u32]>,
    /// Shifts a mixed fingerprint down to a slot index.
    shift: u32,
}

impl Ghost {
    fn new(max_entries: usize) -> Self {
        let n = (max_entries / GHOST_DIVISOR).next_power_of_two().clamp(16, 1 << 24);
        Self {
            slots: vec![0; n].into_boxed_slice(),
            shift: 32 - n.trailing_zeros(),
        }
    }

    /// The fingerprint of a key hash, and its slot. The slot comes from the
    /// high bits of a multiplicative mix, not from the low bits that pick
    /// the key's hash bucket.
    fn locate(&self, hash: u32) -> (u32, usize) {
        let fp = hash | 1;
        (fp, (fp.wrapping_mul(0x9E37_79B1) >> self.shift) as usize)
    }

    fn remember(&mut self, hash: u32) {
        let (fp, i) = self.locate(hash);
        self.slots[i] = fp;
    }

    /// Whether the fingerprint of `hash` is remembered; forgets it if so.
    fn take(&mut self, hash: u32) -> bool {
        let (fp, i) = self.locate(hash);
        let hit = self.slots[i] == fp;
        if hit {
            self.slots[i] = 0;
        }
        hit
    }
}

/// The policy's lists and ghost, behind the one LRU mutex.
pub(crate) struct Lru<T> {
    small: List<T>,
    main: List<T>,
    negative: List<T>,
    ghost: Ghost,
    /// How long *small* may grow before the pruner takes from it first.
    small_target: usize,
}

impl<T> Lru<T> {
    /// The lists of one of `shards` LRU shards, which share `max_entries`.
    pub(crate) fn new(config: &Config, shards: usize) -> Self {
        let share = config.max_entries / shards;
        Self {
            small: List::new(),
            main: List::new(),
            negative: List::new(),
            ghost: Ghost::new(share),
            small_target: (share * SMALL_PERCENT / 100).max(1),
        }
    }

    /// Entries on the lists (unused, evictable).
    pub(crate) fn len(&self) -> usize {
        self.small.len() + self.main.len() + self.negative.len()
    }

    /// The lengths of *small*, *main* and the negative list.
    pub(crate) fn lens(&self) -> (usize, usize, usize) {
        (self.small.len(), self.main.len(), self.negative.len())
    }

    /// Walks every list (lock held) and panics unless each node on it has
    /// `ON_LRU`, is not `DEAD`, is of the list's kind (negative or not) and,
    /// on a queue, has that queue's byte, and unless each list's length is
    /// the number of nodes on it. For tests and loom models.
    pub(crate) fn assert_consistent(&mut self) {
        let lists = [
            (&self.small, Some(Queue::Small), false),
            (&self.main, Some(Queue::Main), false),
            (&self.negative, None, true),
        ];
        for (list, queue, negative) in lists {
            let mut n = 0;
            let mut cur = list.head();
            // SAFETY: nodes on the lists are alive (killers take them off
            // under this lock, which `&mut self` holds, before freeing).
            while let Some(node) = unsafe { cur.as_ref() } {
                n += 1;
                assert!(n <= list.len(), "dcache: a list longer than its length");
                let c = node.count.load(Ordering::Relaxed);
                assert!(
                    c & ON_LRU != 0 && c & DEAD == 0,
                    "dcache: a listed node off the LRU or dead"
                );
                assert_eq!(node.is_negative(), negative, "dcache: a node on the other sign's list");
                if let Some(q) = queue {
                    // SAFETY: a node of this shard's lists, lock held.
                    assert_eq!(unsafe { Queue::of(node) }, q, "dcache: a node on another queue's list");
                }
                // SAFETY: on this list, lock held.
                cur = unsafe { list.next(cur) };
            }
            assert_eq!(n, list.len(), "dcache: a list's length is not its nodes'");
        }
    }

    /// The list `node` is on (its `ON_LRU` bit is set).
    ///
    /// # Safety
    /// `node` is a node of this shard (alive; its id names the shard).
    pub(crate) unsafe fn list_for(&mut self, node: &Node<T>) -> &mut List<T> {
        if node.is_negative() {
            return &mut self.negative;
        }
        // SAFETY: a node of this shard, whose lock we hold (`&mut self`).
        match unsafe { Queue::of(node) } {
            Queue::Main => &mut self.main,
            Queue::Small | Queue::New => &mut self.small,
        }
    }

    /// Puts a node on its list: the insert that hashed it (still holding
    /// it), or the last `put` of a hashed node off the lists.
    ///
    /// # Safety
    /// The LRU lock is held (`&mut self`), `node` is a node of this shard,
    /// alive and on no list.
    pub(crate) unsafe fn enlist(&mut self, node: &Node<T>) {
        if node.is_negative() {
            // SAFETY: forwarded from the caller.
            unsafe { self.negative.push_back(node) };
            return;
        }
        // SAFETY: a node of this shard, whose lock we hold (caller).
        let q = match unsafe { Queue::of(node) } {
            Queue::New if self.ghost.take(node.hash_bits()) => Queue::Main,
            Queue::New => Queue::Small,
            q => q,
        };
        // SAFETY: as above.
        unsafe { q.set(node) };
        let list = if q == Queue::Main {
            &mut self.main
        } else {
            &mut self.small
        };
        // SAFETY: forwarded from the caller.
        unsafe { list.push_back(node) };
    }

    /// One pass of the pruner over the negative list (`negative`) or the
    /// two queues: appends up to `want` victims to `victims`, each of them
    /// marked `DEAD | UNHASHED` by this call, taken off its list, with
    /// `ON_LRU` cleared; the caller kills them after releasing the lock.
    /// Looks at each listed entry at most `MAX_FREQ + 2` times.
    pub(crate) fn select(&mut self, negative: bool, want: usize, victims: &mut Vec<NodePtr<T>>) {
        let listed = if negative {
            self.negative.len()
        } else {
            self.small.len() + self.main.len()
        };
        let mut budget = listed.saturating_mul(usize::from(MAX_FREQ) + 2);
        let start = victims.len();
        // Which queue the next victim comes from. As in S3-FIFO's `evictS`,
        // once the pass takes from *small* it goes on there (promoting what
        // was hit) until it evicts an entry or *small* runs empty: an entry
        // just promoted is not the next victim of an otherwise empty *main*.
        let choose = |lru: &Self| !negative && (lru.small.len() > lru.small_target || lru.main.len() == 0);
        let mut from_small = choose(self);
        while victims.len() - start < want && budget > 0 {
            budget -= 1;
            if from_small && self.small.len() == 0 {
                from_small = false;
            }
            let list = if negative {
                &mut self.negative
            } else if from_small {
                &mut self.small
            } else {
                &mut self.main
            };
            let head = list.head();
            // SAFETY: nodes on the lists are alive (killers take them off
            // under this lock before freeing them).
            let Some(node) = (unsafe { head.as_ref() }) else { break };
            // The next head is cold too (it was queued long ago): start
            // loading its state word and its links while this one is
            // handled.
            // SAFETY: `head` is on this list and the lock is held, so the
            // node after it is on the list too, and alive.
            if let Some(n) = unsafe { list.next(head).as_ref() } {
                crate::sync::prefetch(&n.count);
                crate::sync::prefetch(&n.lru);
            }
            let c = node.count.load(Ordering::Relaxed);
            if c & DEAD != 0 {
                // Its killer is waiting for this lock to take it off.
                // SAFETY: on the list, lock held.
                unsafe { list.rotate(head) };
                continue;
            }
            if c & COUNT_MASK != 0 {
                // In use: take it off lazily. Its last `put` will put it
                // back (ON_LRU is clear), under this lock.
                if node
                    .count
                    .compare_exchange(c, c & !ON_LRU, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    // SAFETY: on the list, lock held.
                    unsafe { list.remove(head) };
                    if from_small {
                        // Used while on probation: it goes back to *main*.
                        // SAFETY: a node of this shard's lists, whose lock
                        // we hold.
                        unsafe { Queue::Main.set(node) };
                    }
                }
                continue;
            }
            // Relaxed: a hint (see `Node::mark_referenced`); hits racing
            // with this read or the stores below lose at most a count.
            let f = node.freq.load(Ordering::Relaxed);
            if f > 0 {
                if from_small {
                    node.freq.store(0, Ordering::Relaxed);
                    // SAFETY: as above.
                    unsafe { Queue::Main.set(node) };
                    // SAFETY: on *small*, lock held; then on no list.
                    unsafe {
                        self.small.remove(head);
                        self.main.push_back(head);
                    }
                } else {
                    node.freq.store(f - 1, Ordering::Relaxed);
                    // SAFETY: on the list, lock held.
                    unsafe { list.rotate(head) };
                }
                continue;
            }
            // Acquire: we are going to free the node; pairs with the
            // Release decrements of its former holders in `release_one`.
            if node
                .count
                .compare_exchange(c, c | UNHASHED | DEAD, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: on the list, lock held.
                unsafe { list.remove(head) };
                node.count.fetch_and(!ON_LRU, Ordering::Relaxed);
                if from_small {
                    self.ghost.remember(node.hash_bits());
                }
                victims.push(NodePtr(NonNull::from(node)));
                from_small = choose(self);
            }
        }
    }
}
