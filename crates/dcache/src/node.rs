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
//! # The key and its inline hash
//!
//! The key (parent id, hash, name) is one heap object behind `Node::key`,
//! swapped as a whole by rename; names up to `INLINE_NAME` bytes are stored
//! inside it, so a lookup that compares names pays one dependent cache miss
//! for the key and none more for the bytes. The node also keeps a copy of the
//! key's hash (`Node::hash`) next to its chain link, so a scan rejects the
//! other nodes of a chain on the node's own cache line, without touching
//! their keys (the kernel's dentry keeps `d_name.hash` inline the same way).
//!
//! Why a copy that rename updates separately from the key is safe. Rename
//! stores, in this order: the odd rename count (AcqRel), the new key (Release
//! swap), the new hash copy (Release), then links the node into its new
//! chain (Release). A scan loads the copy with Acquire and, only if it equals
//! the wanted hash, loads the key (Acquire) and compares it in full. So:
//! - a scan that sees the *new* copy synchronises with its store and so sees
//!   the new key and the odd count: it decides on the new key, and if it then
//!   misses, the re-check of the count in `find_live` makes it retry;
//! - a scan that sees the *old* copy and skips the node decides exactly as a
//!   scan that read the old key would (the old hash differs from the wanted
//!   one, so the old key does too); reading the old key is an outcome the
//!   key's own protocol already allows, without synchronising with the
//!   rename;
//! - a scan that sees the old copy equal to the wanted hash loads the key,
//!   and whichever key it reads it compares in full, as before.
//!
//! Every outcome of the scan is thus one a scan without the copy could have
//! had, and the rename-count argument of `Dcache::find_live` covers misses as
//! before. Writers that scan under a bucket lock read the copy exactly: it is
//! written only under the locks of the buckets the node leaves and joins. The
//! loom model `dcache_rename_in_chain_vs_lookup` (a rename within one chain,
//! where a stale copy is most likely to mislead) checks this.
//!
//! The referenced bit lives in a byte of its own (`referenced`): hits set it
//! with a plain store only if a load shows it clear, so repeated hits write
//! nothing shared (seed 000 §6, and the kernel's `DCACHE_REFERENCED`).

use std::collections::BTreeMap;
use std::ptr::{self, NonNull};

use crate::sync::epoch::{self, Atomic, Guard};
use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell};

/// The node is being freed; no reference may be taken any more.
pub(crate) const DEAD: usize = 1 << (usize::BITS - 1);
/// The node is logically out of the hash table.
pub(crate) const UNHASHED: usize = 1 << (usize::BITS - 2);
/// The node is linked on an LRU list.
pub(crate) const ON_LRU: usize = 1 << (usize::BITS - 3);
/// The reference count proper.
pub(crate) const COUNT_MASK: usize = ON_LRU - 1;

/// Names up to this many bytes live inside the key object itself, so that a
/// lookup reaches them without another dependent cache miss; longer names
/// (rare in practice) get a heap allocation of their own.
pub(crate) const INLINE_NAME: usize = 30;

/// The bytes of a name: inline when short, boxed when long.
#[derive(Debug)]
pub(crate) enum Name {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Heap(Box<[u8]>),
}

impl Name {
    pub(crate) fn new(name: &[u8]) -> Self {
        if name.len() <= INLINE_NAME {
            let mut bytes = [0; INLINE_NAME];
            bytes[..name.len()].copy_from_slice(name);
            Self::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            Self::Heap(name.into())
        }
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(b) => b,
        }
    }
}

/// The hash key of a node: its parent's id and its name (the name's bytes
/// inline in the same allocation when short, see `INLINE_NAME`). A rename
/// replaces the whole key with one pointer swap, so a lookup always reads a
/// consistent (parent, name) pair.
#[derive(Debug)]
pub(crate) struct Key {
    pub(crate) parent: u64,
    pub(crate) hash: u64,
    pub(crate) name: Name,
}

impl Key {
    #[inline]
    pub(crate) fn matches(&self, hash: u64, parent: u64, name: &[u8]) -> bool {
        self.hash == hash && self.parent == parent && self.name.as_bytes() == name
    }

    /// The name's bytes.
    #[inline]
    pub(crate) fn name(&self) -> &[u8] {
        self.name.as_bytes()
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
///
/// `repr(C)` keeps the fields a hit reads (chain link, hash copy, key
/// pointer, state word, referenced byte, id, payload) at the front, in the
/// first cache line of the allocation for a small payload.
#[repr(C)]
pub(crate) struct Node<T> {
    /// The next node in the hash chain.
    pub(crate) next: Atomic<Node<T>>,
    /// A copy of `key.hash`, so that a scan rejects the other nodes of a
    /// chain without loading their keys. Stored (Release) by rename after
    /// the new key; see the module docs for why a stale copy is harmless.
    pub(crate) hash: AtomicU64,
    /// (parent id, name), swapped as a whole by rename.
    pub(crate) key: Atomic<Key>,
    /// The state word; see the module docs.
    pub(crate) count: AtomicUsize,
    /// Set by hits, cleared by the pruner (second chance).
    pub(crate) referenced: AtomicBool,
    /// The node is in the hash chain of its key's bucket (bucket lock).
    pub(crate) linked: AtomicBool,
    /// Unique for the life of the cache, never reused; children name it.
    pub(crate) id: u64,
    /// `None` for a negative entry.
    pub(crate) payload: Option<T>,
    /// The parent node (null for the root). Changed only by rename, under the
    /// rename lock and both parents' child locks.
    pub(crate) parent: AtomicPtr<Node<T>>,
    /// LRU links (LRU lock).
    pub(crate) lru: UnsafeCell<Link<T>>,
    /// Cached children by id (ids grow, which `drop_subtree` uses as a cursor).
    pub(crate) children: Mutex<BTreeMap<u64, NodePtr<T>>>,
}

// SAFETY: all shared mutable state of a node is atomics, locks, or the LRU
// cell that is only touched under the LRU lock; the payload is `Sync`.
unsafe impl<T: Send + Sync> Sync for Node<T> {}
// SAFETY: the node owns its payload, which is `Send`.
unsafe impl<T: Send + Sync> Send for Node<T> {}

impl<T> Node<T> {
    pub(crate) fn new(id: u64, key: Key, parent: *const Node<T>, payload: Option<T>, count: usize) -> Self {
        Self {
            next: Atomic::null(),
            hash: AtomicU64::new(key.hash),
            key: Atomic::new(key),
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
