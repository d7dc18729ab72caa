//! The hash table keyed by (parent, name): an array of buckets, each a
//! singly-linked chain read lock-free under an epoch pin and written under a
//! per-bucket bit lock.
//!
//! This is the kernel's `dentry_hashtable` with its per-bucket bit lock
//! (`hlist_bl`; seed 000, "Scalability of the directory entry cache", §3: RCU
//! reads of the hash chains; §4 tried per-bucket locks for everything and
//! failed because of the cross-bucket lists, which is why here the per-bucket
//! lock guards the chain only, and the tree and LRU lists have locks of their
//! own).
//!
//! # The bucket: one word
//!
//! A bucket is the chain's head pointer alone: 8 bytes, half of a pointer
//! beside a mutex, so that twice as many buckets stay in a cache level. Bit 0
//! of the head (`LOCKED`; nodes are 8-byte aligned, so a pointer never has
//! it) is the bucket's lock, as in the kernel's `hlist_bl_lock`:
//! - a writer locks with a compare-exchange (Acquire) from the word with the
//!   bit clear to the word with it set (waiting by reading the word, not
//!   writing it), and unlocks with `fetch_and(!LOCKED, Release)`; only the
//!   holder changes the word while the bit is set. The pair orders each
//!   critical section before the next one: the chain's links and the nodes'
//!   `linked` flags, which writers read Relaxed under the lock, are those the
//!   previous holder left;
//! - a writer that changes the head while holding the lock stores it with
//!   the bit set (`link_locked`, `unlink_locked`);
//! - readers ignore the bit (crossbeam's `Shared` strips tag bits on
//!   dereference), so a locked bucket is read like any other.
//!
//! The loom model `dcache_bucket_lock_vs_unlink` checks the lock (it fails if
//! either ordering of the pair is weakened to Relaxed). Under loom the lock
//! is the same compare-exchange and `fetch_and` on a word of its own beside
//! the head: loom lets a load return any of a word's recent stores, so the
//! lock's two stores per critical section on the head multiplied what each
//! reader's head load could see, and the models that read chains while a
//! writer locks one (`dcache_lookup_vs_unhash_and_reclaim`,
//! `dcache_rename_in_chain_vs_lookup`) went from a few minutes to a quarter
//! of an hour and more each. What loom then does not check is that the bit
//! and the pointer share a word (every head store by a holder keeps the
//! bit; readers strip it), which is no ordering; the unit, stress and
//! memcheck runs use the real layout.
//!
//! # Chain protocol
//! - Insert publishes a node at the head: `node.next = head` (Relaxed, the
//!   node is private), then `head.store(node, Release)`; readers load links
//!   with Acquire, so a reader that reaches a node sees its key and payload.
//! - Unlink stores `pred.next = node.next` (Release) and leaves `node.next`
//!   untouched, so a reader standing on the unlinked node walks on into the
//!   rest of the same chain. The node is freed only after an epoch has passed
//!   (`defer_destroy` by its killer), so the reader's pointer stays valid.
//! - An insert that replaces a cached entry of the same key (a positive
//!   insert over a negative entry, `replace`) links the new node at the head
//!   before it sets `UNHASHED` on the old one, under the bucket lock; a
//!   reader that skipped the old node because of the bit rescans and finds
//!   the new one, so the name is never missed in between.
//! - A rename moves a node to another chain by changing `node.next`; a reader
//!   standing on it can be led into the wrong chain and miss. The global
//!   rename sequence count catches that (see `Dcache::find_live`).
//! - A scan compares each node's key (hash bits, parent id, name), which
//!   the node holds itself, under the node's sequence count; a rename
//!   changes the key in place inside a write section of that count, so a
//!   scan never matches a torn key (the protocol is in `node.rs`).
//!
//! Invariant: `node.linked` is true exactly when the node is in the chain of
//! the bucket of its current key, and it changes only under that bucket's
//! lock.

use std::ptr;

use crate::node::{INLINE_NAME, Node, Probe, UNHASHED};
use crate::sync::epoch::{Atomic, Guard, Shared};
use crate::sync::{Ordering, backoff};

/// The lock bit of a bucket's head word.
const LOCKED: usize = 1;

/// The tag a held bucket's head keeps while its holder stores it: the lock
/// bit, except under loom, where the lock is a word of its own.
const HELD: usize = if crate::sync::LOOM { 0 } else { LOCKED };

/// One hash bucket: the chain's head, whose bit 0 is the bucket's lock.
pub(crate) struct Bucket<T> {
    head: Atomic<Node<T>>,
    /// Under loom only, the lock as a word beside the head (see the module
    /// docs).
    #[cfg(rcufs_loom)]
    lock: crate::sync::AtomicUsize,
}

/// A held bucket lock; dropping it unlocks.
pub(crate) struct BucketGuard<'a, T> {
    bucket: &'a Bucket<T>,
}

impl<T> Bucket<T> {
    /// Takes the bucket's lock (under loom: a word of its own).
    #[cfg(rcufs_loom)]
    pub(crate) fn lock(&self) -> BucketGuard<'_, T> {
        let mut spins = 0u32;
        // Acquire: as in the other build, the same lock on a word of its own.
        while self
            .lock
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins = spins.saturating_add(1);
            backoff(spins);
        }
        BucketGuard { bucket: self }
    }

    /// Takes the bucket's bit lock, spinning (and yielding after a while:
    /// the holder may have been preempted) until it is free.
    #[cfg(not(rcufs_loom))]
    pub(crate) fn lock(&self) -> BucketGuard<'_, T> {
        // SAFETY: the unprotected guard is only used to read and set the
        // tag bit; no node is dereferenced through it.
        let unprotected = unsafe { crate::sync::epoch::unprotected() };
        let mut spins = 0u32;
        // Relaxed: a guess of the word; the compare-exchange checks it.
        let mut cur = self.head.load(Ordering::Relaxed, unprotected);
        loop {
            if cur.tag() & LOCKED == 0 {
                // Acquire: pairs with the Release `fetch_and` of the previous
                // holder's unlock, so this critical section sees everything
                // that one wrote (the chain links and `linked` flags that
                // writers read Relaxed). A compare-exchange rather than a
                // `fetch_or`: a waiter writes nothing, so it neither takes
                // the line from the holder nor (under loom) adds stores to
                // the word's history, which loom keeps only a few of.
                match self.head.compare_exchange_weak(
                    cur,
                    cur.with_tag(LOCKED),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                    unprotected,
                ) {
                    Ok(_) => return BucketGuard { bucket: self },
                    Err(e) => cur = e.current,
                }
                continue;
            }
            spins = spins.saturating_add(1);
            backoff(spins);
            // Relaxed: only waits for the bit to clear.
            cur = self.head.load(Ordering::Relaxed, unprotected);
        }
    }
}

impl<T> Drop for BucketGuard<'_, T> {
    #[cfg(rcufs_loom)]
    fn drop(&mut self) {
        // Release: as in the other build.
        self.bucket.lock.fetch_and(!LOCKED, Ordering::Release);
    }

    #[cfg(not(rcufs_loom))]
    fn drop(&mut self) {
        // SAFETY: as in `Bucket::lock`.
        let unprotected = unsafe { crate::sync::epoch::unprotected() };
        // Release: ends the critical section; pairs with the Acquire
        // compare-exchange of the next `lock` (and, like every head store, with
        // the Acquire head load of `scan`). A read-modify-write, not a load
        // and a store: one step for the model checker, and the word stays
        // exactly what the critical section left, bit aside.
        self.bucket.head.fetch_and(!LOCKED, Ordering::Release, unprotected);
    }
}

/// The bucket array.
pub(crate) struct Table<T> {
    buckets: Box<[Bucket<T>]>,
    mask: usize,
    seed: u64,
    /// Every key hashes to its name's length (see `Dcache::with_colliding_hashes`).
    colliding: bool,
}

const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

#[inline]
fn mix(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(K2).rotate_left(29)
}

/// A fast seeded hash of (parent, name) over the name's little-endian
/// 8-byte words (the last one zero padded), taken from the probe's inline
/// words so that a lookup reads the name once. Not a cryptographic hash:
/// with a per-cache random seed it keeps accidental collisions rare, which
/// is all a cache needs (a hostile name set can lengthen chains but not
/// break correctness).
///
/// The name is mixed first and the parent last, just before the
/// finalisation: in a walk the parent's address is what the previous
/// component's lookup yields, and the name's part, which does not depend on
/// it, can then be computed ahead, off that chain of dependent loads.
#[inline]
pub(crate) fn hash(seed: u64, parent: u64, probe: &Probe<'_>) -> u64 {
    let mut h = seed;
    // Constant indexes keep the words in registers (see `name_words`).
    let (words, used) = probe.words();
    for (i, &w) in words.iter().enumerate() {
        if i < used {
            h = mix(h, w);
        }
    }
    let name = probe.bytes;
    if name.len() > INLINE_NAME {
        let rest = &name[INLINE_NAME..];
        let mut chunks = rest.chunks_exact(8);
        for c in &mut chunks {
            h = mix(h, u64::from_le_bytes(c.try_into().expect("an 8-byte chunk")));
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            h = mix(h, crate::node::tail_word(tail));
        }
    }
    h ^= name.len() as u64;
    h ^= parent.wrapping_mul(K1);
    h ^= h >> 33;
    h = h.wrapping_mul(K1);
    h ^= h >> 29;
    h
}

impl<T> Table<T> {
    /// A table of `buckets` buckets (a power of two).
    pub(crate) fn new(buckets: usize, seed: u64, colliding: bool) -> Self {
        // The nodes keep the hash's low 32 bits, from which the index is
        // taken.
        debug_assert!(buckets.is_power_of_two() && buckets <= 1 << 32);
        let buckets: Box<[Bucket<T>]> = (0..buckets)
            .map(|_| Bucket {
                head: Atomic::null(),
                #[cfg(rcufs_loom)]
                lock: crate::sync::AtomicUsize::new(0),
            })
            .collect();
        let mask = buckets.len() - 1;
        Self {
            buckets,
            mask,
            seed,
            colliding,
        }
    }

    #[inline]
    pub(crate) fn hash(&self, parent: u64, name: &[u8]) -> u64 {
        self.hash_probe(parent, &Probe::new(name))
    }

    /// The hash of (`parent`, the probe's name).
    #[inline]
    pub(crate) fn hash_probe(&self, parent: u64, probe: &Probe<'_>) -> u64 {
        if self.colliding {
            return probe.bytes.len() as u64;
        }
        hash(self.seed, parent, probe)
    }

    #[inline]
    pub(crate) fn index(&self, hash: u64) -> usize {
        (hash as usize) & self.mask
    }

    /// The bucket that `hash` bits pick (for a prefetch).
    #[inline]
    pub(crate) fn bucket_of(&self, hash: u32) -> *const Bucket<T> {
        &self.buckets[self.index(u64::from(hash))]
    }

    /// Locks bucket `index`.
    #[inline]
    pub(crate) fn lock(&self, index: usize) -> BucketGuard<'_, T> {
        self.buckets[index].lock()
    }

    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// One pass over the chain of `index` for a node with this key that is
    /// not unhashed. Lock-free; the caller deals with renames. The flag says
    /// whether the pass skipped an unhashed node with this key: a replacer
    /// links the new node before it unhashes the old one, so a rescan then
    /// finds the replacement (see `Dcache::find_live`).
    ///
    /// Out of line, as the compiler chose for every caller while the walk
    /// called it too (left to the compiler, it inlines `scan` into the
    /// lookups now that the walk uses `scan_inlined`).
    #[inline(never)]
    pub(crate) fn scan<'g>(
        &self,
        index: usize,
        hash: u64,
        parent: u64,
        probe: &Probe<'_>,
        guard: &'g Guard,
    ) -> (Option<&'g Node<T>>, bool) {
        self.scan_inlined(index, hash, parent, probe, guard)
    }

    /// `scan`, always inlined (the walk's form).
    #[inline(always)]
    pub(crate) fn scan_inlined<'g>(
        &self,
        index: usize,
        hash: u64,
        parent: u64,
        probe: &Probe<'_>,
        guard: &'g Guard,
    ) -> (Option<&'g Node<T>>, bool) {
        let mut skipped = false;
        // Acquire: pairs with the Release head store of insert / rename /
        // unlink, so the node's fields are visible.
        let mut cur = self.buckets[index].head.load(Ordering::Acquire, guard);
        // SAFETY: every node reachable from a chain while we are pinned is
        // freed only after an epoch that this guard holds back.
        while let Some(node) = unsafe { cur.as_ref() } {
            // The key is read under the node's sequence count; a torn or
            // changing key does not match, and the caller re-checks such a
            // miss against the global rename count (see `node.rs`).
            if node.key_matches(hash, parent, probe, guard) {
                // Acquire: pairs with the AcqRel `fetch_or(UNHASHED)` of a
                // rename's target or of an entry an insert replaced, so that
                // a scan that skips it because of the bit sees the odd rename
                // count when `find_live` re-checks it after the miss, or the
                // replacement at the chain head when it rescans.
                if node.count.load(Ordering::Acquire) & UNHASHED == 0 {
                    return (Some(node), skipped);
                }
                skipped = true;
            }
            // Acquire: pairs with the Release stores of `next` in insert,
            // unlink and rename.
            cur = node.next.load(Ordering::Acquire, guard);
        }
        (None, skipped)
    }

    /// Like `scan`, but for a writer that holds the bucket lock.
    pub(crate) fn scan_locked<'g>(
        &self,
        index: usize,
        hash: u64,
        parent: u64,
        probe: &Probe<'_>,
        guard: &'g Guard,
    ) -> Option<&'g Node<T>> {
        self.scan(index, hash, parent, probe, guard).0
    }

    /// Checks, with every bucket locked in turn, that each chained node is
    /// marked linked, hashed (not `UNHASHED`) and in the bucket of its key:
    /// what must hold whenever no operation is in flight (for tests and
    /// loom models).
    pub(crate) fn assert_consistent(&self, guard: &Guard) {
        for (i, b) in self.buckets.iter().enumerate() {
            let _lock = b.lock();
            let mut cur = b.head.load(Ordering::Relaxed, guard);
            // SAFETY: nodes in a chain are alive while we hold its lock.
            while let Some(node) = unsafe { cur.as_ref() } {
                assert!(
                    node.linked.load(Ordering::Relaxed),
                    "dcache: a chained node is not marked linked"
                );
                assert!(
                    node.count.load(Ordering::Relaxed) & UNHASHED == 0,
                    "dcache: an unhashed node was left in its chain"
                );
                assert_eq!(
                    self.index(u64::from(node.hash_bits())),
                    i,
                    "dcache: a node in another key's chain"
                );
                cur = node.next.load(Ordering::Relaxed, guard);
            }
        }
    }

    /// Links `node` at the head of bucket `index`.
    ///
    /// # Safety
    /// The caller holds the lock of bucket `index`, `node` is alive, not in
    /// any chain, and its key hashes to `index`.
    pub(crate) unsafe fn link_locked(&self, index: usize, node: &Node<T>, guard: &Guard) {
        let bucket = &self.buckets[index];
        // Relaxed: we hold the lock (the bit is set in what we load; the
        // node's `next` gets the pointer without it).
        let head = bucket.head.load(Ordering::Relaxed, guard).with_tag(0);
        // Release: a reader standing on `node` (a renamed one) that follows
        // this link must see the chain it now leads to; pairs with the Acquire
        // `next` loads in `scan`. The rename sequence count was made odd
        // before this store, which this Release also carries to such a
        // reader.
        node.next.store(head, Ordering::Release);
        // Release: publishes the node (key, payload, next); pairs with the
        // Acquire head load in `scan`.
        // The lock bit stays set: we still hold the lock.
        bucket
            .head
            .store(Shared::from(node as *const Node<T>).with_tag(HELD), Ordering::Release);
        node.linked.store(true, Ordering::Relaxed);
    }

    /// Unlinks `node` from bucket `index` if it is linked there.
    ///
    /// # Safety
    /// The caller holds the lock of bucket `index`, the node's current key
    /// hashes to `index`, and `node` is alive.
    pub(crate) unsafe fn unlink_locked(&self, index: usize, node: &Node<T>, guard: &Guard) {
        if !node.linked.load(Ordering::Relaxed) {
            return;
        }
        let target = node as *const Node<T>;
        let head = &self.buckets[index].head;
        let mut link = head;
        loop {
            // Relaxed: we hold the bucket lock, whose Acquire made the
            // links the previous holders stored visible.
            let cur = link.load(Ordering::Relaxed, guard);
            assert!(!cur.is_null(), "dcache: a linked node is missing from its chain");
            if cur.as_raw() == target {
                let next = node.next.load(Ordering::Relaxed, guard);
                // The head keeps the lock bit: we still hold the lock.
                let next = if ptr::eq(link, head) { next.with_tag(HELD) } else { next };
                // Release: pairs with the Acquire link loads in `scan`; it
                // carries, via the bucket lock, the publication of `next`.
                link.store(next, Ordering::Release);
                node.linked.store(false, Ordering::Relaxed);
                return;
            }
            // SAFETY: nodes in the chain are alive while we hold its lock
            // (a killer unlinks under this lock before freeing).
            link = unsafe { &cur.deref().next };
        }
    }

    /// Locks the bucket of `node`'s current key and unlinks it.
    pub(crate) fn unlink(&self, node: &Node<T>, guard: &Guard) {
        loop {
            let index = self.index(u64::from(node.hash_bits()));
            let _lock = self.lock(index);
            // The key may have been changed by a rename while we waited; a
            // rename changes it only under this bucket's lock, so re-check.
            if self.index(u64::from(node.hash_bits())) != index {
                continue;
            }
            // SAFETY: we hold the bucket lock of the node's current key and the
            // caller's pin (or reference) keeps it alive.
            unsafe { self.unlink_locked(index, node, guard) };
            return;
        }
    }

    /// Whether every chain is empty (used by the cache's destructor checks).
    pub(crate) fn is_empty(&self, guard: &Guard) -> bool {
        self.buckets
            .iter()
            .all(|b| b.head.load(Ordering::Relaxed, guard).is_null())
    }
}
