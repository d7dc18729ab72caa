//! The hash table keyed by (parent id, name): an array of buckets, each a
//! singly-linked chain read lock-free under an epoch pin and written under a
//! per-bucket mutex.
//!
//! This is the kernel's `dentry_hashtable` with its per-bucket bit lock
//! (seed 000, "Scalability of the directory entry cache", §3: RCU reads of the
//! hash chains; §4 tried per-bucket locks for everything and failed because
//! of the cross-bucket lists, which is why here the per-bucket lock guards
//! the chain only, and the tree and LRU lists have locks of their own).
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

use crate::node::{Node, Probe, UNHASHED};
use crate::sync::epoch::{Atomic, Guard, Shared};
use crate::sync::{Mutex, Ordering};

/// One hash bucket.
pub(crate) struct Bucket<T> {
    pub(crate) head: Atomic<Node<T>>,
    pub(crate) lock: Mutex<()>,
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

/// A fast seeded hash of (parent id, name). Not a cryptographic hash: with a
/// per-cache random seed it keeps accidental collisions rare, which is all a
/// cache needs (a hostile name set can lengthen chains but not break
/// correctness).
#[inline]
pub(crate) fn hash(seed: u64, parent: u64, name: &[u8]) -> u64 {
    let mut h = seed ^ parent.wrapping_mul(K1);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K2).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K2).rotate_left(29);
    }
    h ^= name.len() as u64;
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
                lock: Mutex::new(()),
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
        if self.colliding {
            return name.len() as u64;
        }
        hash(self.seed, parent, name)
    }

    #[inline]
    pub(crate) fn index(&self, hash: u64) -> usize {
        (hash as usize) & self.mask
    }

    #[inline]
    pub(crate) fn bucket(&self, index: usize) -> &Bucket<T> {
        &self.buckets[index]
    }

    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }

    /// One pass over the chain of `index` for a node with this key that is
    /// not unhashed. Lock-free; the caller deals with renames. The flag says
    /// whether the pass skipped an unhashed node with this key: a replacer
    /// links the new node before it unhashes the old one, so a rescan then
    /// finds the replacement (see `Dcache::find_live`).
    #[inline]
    pub(crate) fn scan<'g>(
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
        name: &[u8],
        guard: &'g Guard,
    ) -> Option<&'g Node<T>> {
        self.scan(index, hash, parent, &Probe::new(name), guard).0
    }

    /// Links `node` at the head of bucket `index`.
    ///
    /// # Safety
    /// The caller holds the lock of bucket `index`, `node` is alive, not in
    /// any chain, and its key hashes to `index`.
    pub(crate) unsafe fn link_locked(&self, index: usize, node: &Node<T>, guard: &Guard) {
        let bucket = &self.buckets[index];
        let head = bucket.head.load(Ordering::Relaxed, guard);
        // Release: a reader standing on `node` (a renamed one) that follows
        // this link must see the chain it now leads to; pairs with the Acquire
        // `next` loads in `scan`. The rename sequence count was made odd
        // before this store, which this Release also carries to such a
        // reader.
        node.next.store(head, Ordering::Release);
        // Release: publishes the node (key, payload, next); pairs with the
        // Acquire head load in `scan`.
        bucket
            .head
            .store(Shared::from(node as *const Node<T>), Ordering::Release);
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
        let mut link = &self.buckets[index].head;
        loop {
            let cur = link.load(Ordering::Relaxed, guard);
            assert!(!cur.is_null(), "dcache: a linked node is missing from its chain");
            if cur.as_raw() == target {
                let next = node.next.load(Ordering::Relaxed, guard);
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
            let _lock = self.buckets[index].lock.lock();
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
