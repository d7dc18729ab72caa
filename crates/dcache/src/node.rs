//! The dentry node: its key, its state word, and its links into the hash
//! chain, the LRU list and its parent's child map.
//!
//! A `Node` is allocated by an insert and freed through the epoch collector
//! (`Guard::defer_destroy`) by the one thread that marks it `DEAD`. It is the
//! user-space counterpart of `struct dentry` (seed 000, "Scalability of the
//! directory entry cache", §3 and §6): the hash link is read by lock-free
//! lookups, the LRU link only under the LRU lock, the child map only under the
//! node's own `children` lock.
//!
//! # The state word (`count`)
//!
//! Like the kernel's lockref, one atomic word holds the reference count and
//! the state bits that decisions about the count depend on, so that "drop the
//! last reference" and "unhash" / "take off the LRU" are ordered by the
//! word's single modification order and never need a Dekker-style fence:
//!
//! | bit            | meaning                                                     | set by                         | cleared by |
//! |----------------|-------------------------------------------------------------|--------------------------------|------------|
//! | `DEAD`         | being freed; no new reference may be taken                  | the killer (CAS from count 0)  | never      |
//! | `UNHASHED`     | logically out of the cache; lookups skip it                 | the one unhasher (`fetch_or`)  | never      |
//! | `ON_LRU`       | linked on an LRU list (changes only under the LRU lock)     | the last `put` of a hashed node| pruner, killer |
//! | low bits       | counted handles plus one per cached child                  | `get`/`try_get`                | `put`      |
//!
//! Invariants:
//! - a node with `DEAD` has count 0, `UNHASHED`, no children, and exactly one
//!   thread (the killer) owns its teardown;
//! - a hashed node with count 0 that is not `DEAD` has `ON_LRU` (the last
//!   `put` links it before it lets the count reach 0);
//! - `ON_LRU` is set if and only if the node is linked on an LRU list, and
//!   both change together under the LRU lock;
//! - `linked` (the node is in a hash chain) changes only under the lock of the
//!   bucket of its current key.
//!
//! The referenced bit lives in a byte of its own (`referenced`): hits set it
//! with a plain store only if a load shows it clear, so repeated hits write
//! nothing shared (seed 000 §6, and the kernel's `DCACHE_REFERENCED`).

use std::collections::BTreeMap;
use std::ptr::{self, NonNull};

use crate::sync::epoch::{self, Atomic, Guard};
use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Mutex, Ordering, UnsafeCell};

/// The node is being freed; no reference may be taken any more.
pub(crate) const DEAD: usize = 1 << (usize::BITS - 1);
/// The node is logically out of the hash table.
pub(crate) const UNHASHED: usize = 1 << (usize::BITS - 2);
/// The node is linked on an LRU list.
pub(crate) const ON_LRU: usize = 1 << (usize::BITS - 3);
/// The reference count proper.
pub(crate) const COUNT_MASK: usize = ON_LRU - 1;

/// The hash key of a node: its parent's id and its name. A rename replaces
/// the whole key with one pointer swap, so a lookup always reads a
/// consistent (parent, name) pair.
#[derive(Debug)]
pub(crate) struct Key {
    pub(crate) parent: u64,
    pub(crate) hash: u64,
    pub(crate) name: Box<[u8]>,
}

impl Key {
    #[inline]
    pub(crate) fn matches(&self, hash: u64, parent: u64, name: &[u8]) -> bool {
        self.hash == hash && self.parent == parent && *self.name == *name
    }
}

/// A raw node pointer that may be stored in the child maps and LRU links.
pub(crate) struct NodePtr<T>(pub(crate) NonNull<Node<T>>);

impl<T> Clone for NodePtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for NodePtr<T> {}

// SAFETY: a `NodePtr` is only an address; every dereference happens under the
// protocol that keeps the node alive (child-map lock, LRU lock or an epoch
// pin), and `Node<T>` itself is `Send + Sync` when `T` is.
unsafe impl<T: Send + Sync> Send for NodePtr<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Send + Sync> Sync for NodePtr<T> {}

/// The LRU links of a node; accessed only with the LRU lock held.
pub(crate) struct Link<T> {
    pub(crate) prev: *const Node<T>,
    pub(crate) next: *const Node<T>,
}

/// One cached directory entry.
pub(crate) struct Node<T> {
    /// (parent id, name), swapped as a whole by rename.
    pub(crate) key: Atomic<Key>,
    /// The next node in the hash chain.
    pub(crate) next: Atomic<Node<T>>,
    /// The state word; see the module docs.
    pub(crate) count: AtomicUsize,
    /// Set by hits, cleared by the pruner (second chance).
    pub(crate) referenced: AtomicBool,
    /// The node is in the hash chain of its key's bucket (bucket lock).
    pub(crate) linked: AtomicBool,
    /// Unique for the life of the cache, never reused; children name it.
    pub(crate) id: u64,
    /// The parent node (null for the root). Changed only by rename, under the
    /// rename lock and both parents' child locks.
    pub(crate) parent: AtomicPtr<Node<T>>,
    /// LRU links (LRU lock).
    pub(crate) lru: UnsafeCell<Link<T>>,
    /// Cached children by id (ids grow, which `drop_subtree` uses as a cursor).
    pub(crate) children: Mutex<BTreeMap<u64, NodePtr<T>>>,
    /// `None` for a negative entry.
    pub(crate) payload: Option<T>,
}

// SAFETY: all shared mutable state of a node is atomics, locks, or the LRU
// cell that is only touched under the LRU lock; the payload is `Sync`.
unsafe impl<T: Send + Sync> Sync for Node<T> {}
// SAFETY: the node owns its payload, which is `Send`.
unsafe impl<T: Send + Sync> Send for Node<T> {}

impl<T> Node<T> {
    pub(crate) fn new(id: u64, key: Key, parent: *const Node<T>, payload: Option<T>, count: usize) -> Self {
        Self {
            key: Atomic::new(key),
            next: Atomic::null(),
            count: AtomicUsize::new(count),
            referenced: AtomicBool::new(false),
            linked: AtomicBool::new(false),
            id,
            parent: AtomicPtr::new(parent.cast_mut()),
            lru: UnsafeCell::new(Link {
                prev: ptr::null(),
                next: ptr::null(),
            }),
            children: Mutex::new(BTreeMap::new()),
            payload,
        }
    }

    #[inline]
    pub(crate) fn is_negative(&self) -> bool {
        self.payload.is_none()
    }

    /// Reads the current key.
    #[inline]
    pub(crate) fn key<'g>(&self, guard: &'g Guard) -> &'g Key {
        // Acquire: pairs with the Release swap in rename (and the publication
        // of the node by insert), so the key's bytes are visible.
        let key = self.key.load(Ordering::Acquire, guard);
        // SAFETY: a node always has a key; an old key replaced by rename is
        // freed through `defer_destroy` after the swap, so it stays valid for
        // as long as `guard` is pinned.
        unsafe { key.deref() }
    }

    /// Marks the node referenced for the lazy LRU. Writes only if the bit is
    /// clear, so a hot entry's cache line stays shared between readers.
    #[inline]
    pub(crate) fn mark_referenced(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// Adds a reference to a node the caller already holds one on.
    #[inline]
    pub(crate) fn get(&self) {
        // Relaxed: the caller's own reference keeps the node alive, as with
        // `Arc::clone`; nothing is published by taking a reference.
        let old = self.count.fetch_add(1, Ordering::Relaxed);
        debug_assert!(old & DEAD == 0 && old & COUNT_MASK > 0);
    }

    /// Takes a reference on a node found under an epoch pin. Fails if the
    /// node is `DEAD`, and also if `live` is asked and the node is unhashed.
    #[inline]
    pub(crate) fn try_get(&self, live: bool) -> bool {
        let forbidden = if live { DEAD | UNHASHED } else { DEAD };
        let mut c = self.count.load(Ordering::Relaxed);
        loop {
            if c & forbidden != 0 {
                return false;
            }
            // Acquire: pairs with the Release decrement in `release_one`, so
            // that what an earlier holder wrote is visible to the new one.
            match self
                .count
                .compare_exchange_weak(c, c + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => c = now,
            }
        }
    }

    #[inline]
    pub(crate) fn is_unhashed(&self) -> bool {
        self.count.load(Ordering::Relaxed) & UNHASHED != 0
    }
}

impl<T> Drop for Node<T> {
    fn drop(&mut self) {
        // SAFETY: the node is being destroyed, so no thread can reach it or its
        // key any more (it was unlinked from every structure before
        // `defer_destroy`, and the epoch has passed); the key was allocated by
        // `Atomic::new` or swapped in from an `Owned`.
        unsafe {
            let key = self.key.load(Ordering::Relaxed, epoch::unprotected());
            if !key.is_null() {
                drop(key.into_owned());
            }
        }
    }
}
