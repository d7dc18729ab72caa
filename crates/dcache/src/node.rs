//! The dentry node: its key, its state word, and its links into the hash
//! chain, the LRU list and its parent's list of children.
//!
//! A `Node` is allocated by an insert (`Node::block`) and freed through the
//! epoch collector (a deferred `Node::free`) by the one thread that marks it
//! `DEAD`. It is the
//! user-space counterpart of `struct dentry` (seed 000, "Scalability of the
//! directory entry cache", §3 and §6): the hash link is read by lock-free
//! lookups, the LRU link only under the LRU lock, the sibling links only under
//! the parent's child lock (`children.rs`).
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
//! | `ON_LRU`       | linked on an LRU list (changes only under the LRU lock)     | the insert, or the last `put` of a hashed node | pruner, killer |
//! | low bits       | counted handles plus one per cached child                  | `get`/`try_get`                | `put`      |
//!
//! Invariants:
//! - a node with `DEAD` has count 0, `UNHASHED`, no children, and exactly one
//!   thread (the killer) owns its teardown;
//! - a hashed node with count 0 that is not `DEAD` has `ON_LRU` (its insert
//!   links it while holding it, and a last `put` that finds it off the
//!   lists links it before it lets the count reach 0);
//! - `ON_LRU` is set if and only if the node is linked on an LRU list, and
//!   both change together under the LRU lock;
//! - `linked` (the node is in a hash chain) changes only under the lock of the
//!   bucket of its current key.
//!
//! # The key: hash, parent id and name inline, under a sequence count
//!
//! Like the kernel's `struct dentry` (`d_name.hash_len`, `d_parent`,
//! `d_iname`, `d_seq`), the node holds its key itself: the low 32 bits of the
//! key's hash (`hash`), the parent's id (`parent_id`), the name's length and
//! its first `INLINE_NAME` bytes as words (`len`, `name`); a name longer than
//! that also has a heap copy of its own (`long`), which rename replaces and
//! frees through the epoch collector. A hit thus costs two dependent cache
//! misses, the bucket and the node, and compares names word by word.
//!
//! Rename changes these fields in place, so a lock-free reader could read
//! them torn (the new parent with the old name). A per-node sequence count
//! (`seq`, the kernel's `d_seq`) guards them, as a seqlock:
//! - the writer (rename, which holds the rename lock and the locks of the
//!   buckets the node leaves and joins) stores the odd count with Release,
//!   issues a Release fence, stores the fields (Relaxed; the long name with
//!   Release), and stores the next even count with Release;
//! - a reader (`Node::key_matches`) loads the count with Acquire, gives up on
//!   an odd one, loads the fields (Relaxed) and compares them, then issues an
//!   Acquire fence and re-loads the count: only an unchanged count makes a
//!   match. A load that read a field stored inside a write section makes the
//!   fence synchronise with the writer's Release fence, so the re-load sees
//!   the odd count or a later one, and the torn read is thrown away.
//!
//! A reader that gives up on a node, or rejects it on fields read torn,
//! treats it as not matching; that is only ever a miss, and misses are
//! re-checked against the global rename count (`Dcache::find_live`): every
//! per-node write section lies inside the global odd window, and the odd
//! per-node count is stored with Release after the global count was made
//! odd, so a reader that saw any of it (and issues the Acquire fence before
//! the re-check) sees the global count changed and retries. Writers that
//! read keys under a bucket lock read them exactly: the fields change only
//! under the locks of the buckets the node leaves and joins.
//!
//! The loom models `dcache_rename_vs_lookup`,
//! `dcache_rename_in_chain_vs_lookup` and `dcache_rename_key_torn_vs_lookup`
//! check this protocol.
//!
//! The eviction policy's access frequency lives in a byte of its own
//! (`freq`, 0 to `policy::MAX_FREQ`): hits raise it with a plain store only
//! if a load shows it below the maximum, so repeated hits on a hot entry
//! write nothing shared (seed 000 §6 and the kernel's `DCACHE_REFERENCED`,
//! which is the one-bit case). Which of the policy's queues the node is on
//! (`queue`) is another byte, in what was padding, changed only under the
//! LRU lock (see `policy.rs`).

use std::ptr::{self, NonNull};

use crate::children::Sibling;
use crate::sync::epoch::{self, Atomic, Guard, Owned};
use crate::sync::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell, fence, spin_loop,
};

/// The node is being freed; no reference may be taken any more.
pub(crate) const DEAD: usize = 1 << (usize::BITS - 1);
/// The node is logically out of the hash table.
pub(crate) const UNHASHED: usize = 1 << (usize::BITS - 2);
/// The node is linked on an LRU list.
pub(crate) const ON_LRU: usize = 1 << (usize::BITS - 3);
/// The reference count proper.
pub(crate) const COUNT_MASK: usize = ON_LRU - 1;

/// Words of name kept inside the node.
pub(crate) const NAME_WORDS: usize = 4;
/// Names up to this many bytes live inside the node itself (the kernel's
/// `DNAME_INLINE_LEN` is 40 on 64-bit machines); a longer name keeps its
/// first `INLINE_NAME` bytes there too, and the whole name in a heap copy.
pub(crate) const INLINE_NAME: usize = NAME_WORDS * 8;

/// The 1 to 7 bytes of `b` as a little-endian word, zero padded, read with
/// at most two loads and no copy loop (overlapping loads for 4 to 7 bytes;
/// the first, middle and last byte for 1 to 3).
#[inline(always)]
pub(crate) fn tail_word(b: &[u8]) -> u64 {
    let n = b.len();
    debug_assert!((1..8).contains(&n));
    if n >= 4 {
        let lo = u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")));
        let hi = u64::from(u32::from_le_bytes(b[n - 4..].try_into().expect("4 bytes")));
        // The two loads overlap when n < 8; the shared bytes are equal.
        lo | (hi << ((n - 4) * 8))
    } else {
        u64::from(b[0]) | (u64::from(b[n / 2]) << (n / 2 * 8)) | (u64::from(b[n - 1]) << ((n - 1) * 8))
    }
}

/// The 1 to 8 bytes of `b` as a little-endian word, zero padded.
#[inline(always)]
fn last_word(b: &[u8]) -> u64 {
    match b.try_into() {
        Ok(w) => u64::from_le_bytes(w),
        Err(_) => tail_word(b),
    }
}

/// The first `INLINE_NAME` bytes of `name` as little-endian words, zero
/// padded, and how many of the words the name uses.
///
/// One branch on the length and straight-line loads, so that a lookup keeps
/// the words in registers (a loop over the name's chunks stored them to the
/// stack and read them back for the hash and for every comparison).
/// Always inlined: out of line, it returns the words through memory.
#[inline(always)]
fn name_words(name: &[u8]) -> ([u64; NAME_WORDS], usize) {
    let word = |i: usize| u64::from_le_bytes(name[i * 8..i * 8 + 8].try_into().expect("an 8-byte chunk"));
    match name.len() {
        0 => ([0; NAME_WORDS], 0),
        1..=8 => ([last_word(name), 0, 0, 0], 1),
        9..=16 => ([word(0), last_word(&name[8..]), 0, 0], 2),
        17..=24 => ([word(0), word(1), last_word(&name[16..]), 0], 3),
        25..=32 => ([word(0), word(1), word(2), last_word(&name[24..])], 4),
        _ => ([word(0), word(1), word(2), word(3)], 4),
    }
}

/// A looked-up name prepared once for comparison with many nodes: its
/// inline words, as the nodes store them.
pub(crate) struct Probe<'a> {
    pub(crate) bytes: &'a [u8],
    words: [u64; NAME_WORDS],
    used: usize,
}

impl<'a> Probe<'a> {
    #[inline]
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let (words, used) = name_words(bytes);
        Self { bytes, words, used }
    }

    /// The inline words (zero beyond the ones the name uses) and how many
    /// the name uses.
    #[inline]
    pub(crate) fn words(&self) -> (&[u64; NAME_WORDS], usize) {
        (&self.words, self.used)
    }
}

/// The heap copy of a name longer than `INLINE_NAME`.
#[derive(Debug)]
pub(crate) struct LongName {
    pub(crate) bytes: Box<[u8]>,
}

/// A raw node pointer that may be handed between threads (pruning victims).
pub(crate) struct NodePtr<T>(pub(crate) NonNull<Node<T>>);

impl<T> Clone for NodePtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for NodePtr<T> {}

// SAFETY: a `NodePtr` is only an address; every dereference happens under the
// protocol that keeps the node alive (a reference, the LRU lock or an epoch
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
/// `repr(C)` keeps the fields a hit reads (chain link, sequence count, hash,
/// parent id, name length, state word, payload, then the name's words)
/// together at the front: for a 16-byte name and an 8-byte payload they are
/// the first 64 bytes.
#[repr(C)]
pub(crate) struct Node<T> {
    /// The next node in the hash chain.
    pub(crate) next: Atomic<Node<T>>,
    /// The key's sequence count (the kernel's `d_seq`): odd while rename
    /// changes `hash`, `parent_id`, `len`, `name` and `long`.
    pub(crate) seq: AtomicU32,
    /// The low 32 bits of the key's hash (the bucket index is taken from
    /// them).
    pub(crate) hash: AtomicU32,
    /// The parent's id.
    pub(crate) parent_id: AtomicU64,
    /// The name's length in bytes.
    pub(crate) len: AtomicU32,
    /// Raised by hits up to `policy::MAX_FREQ`, lowered by the pruner.
    pub(crate) freq: AtomicU8,
    /// The node is in the hash chain of its key's bucket (bucket lock).
    pub(crate) linked: AtomicBool,
    /// Guards `first_child` and the children's `sibling` links (one byte,
    /// in what would be padding).
    pub(crate) child_lock: Mutex<()>,
    /// The policy queue the node is on or goes back to (`policy::Queue`;
    /// read and written only under its LRU shard's lock; one byte, in what
    /// was padding).
    pub(crate) queue: UnsafeCell<u8>,
    /// The state word; see the module docs.
    pub(crate) count: AtomicUsize,
    /// `None` for a negative entry.
    pub(crate) payload: Option<T>,
    /// The name's first `INLINE_NAME` bytes, zero padded (see `name_words`).
    pub(crate) name: [AtomicU64; NAME_WORDS],
    /// The whole name if it is longer than `INLINE_NAME`, else null.
    pub(crate) long: Atomic<LongName>,
    /// Unique for the life of the cache, never reused; children name it.
    pub(crate) id: u64,
    /// The parent node (null for the root). Changed only by rename, under the
    /// rename lock and both parents' child locks.
    pub(crate) parent: AtomicPtr<Node<T>>,
    /// LRU links (LRU lock).
    pub(crate) lru: UnsafeCell<Link<T>>,
    /// The first cached child (`child_lock`).
    pub(crate) first_child: UnsafeCell<*const Node<T>>,
    /// Links among the parent's children (the parent's `child_lock`).
    pub(crate) sibling: UnsafeCell<Sibling<T>>,
}

// SAFETY: all shared mutable state of a node is atomics, locks, or the cells
// that are only touched under the LRU lock (`lru`), its own child lock
// (`first_child`) or its parent's (`sibling`); the payload is `Sync`.
unsafe impl<T: Send + Sync> Sync for Node<T> {}
// SAFETY: the node owns its payload, which is `Send`.
unsafe impl<T: Send + Sync> Send for Node<T> {}

/// The heap copy for a long name, null for a short one.
fn long_name(name: &[u8]) -> Atomic<LongName> {
    if name.len() > INLINE_NAME {
        Atomic::new(LongName { bytes: name.into() })
    } else {
        Atomic::null()
    }
}

impl<T> Node<T> {
    /// A node with key (`parent_id`, the probe's name) whose table hash is
    /// `hash`.
    #[inline]
    pub(crate) fn new(
        id: u64,
        hash: u64,
        parent_id: u64,
        probe: &Probe<'_>,
        parent: *const Node<T>,
        payload: Option<T>,
        count: usize,
    ) -> Self {
        let name = probe.bytes;
        Self {
            next: Atomic::null(),
            seq: AtomicU32::new(0),
            hash: AtomicU32::new(hash as u32),
            parent_id: AtomicU64::new(parent_id),
            len: AtomicU32::new(name_len(name)),
            freq: AtomicU8::new(0),
            linked: AtomicBool::new(false),
            child_lock: Mutex::new(()),
            queue: UnsafeCell::new(crate::policy::Queue::New as u8),
            count: AtomicUsize::new(count),
            payload,
            name: probe.words.map(AtomicU64::new),
            long: long_name(name),
            id,
            parent: AtomicPtr::new(parent.cast_mut()),
            lru: UnsafeCell::new(Link {
                prev: ptr::null(),
                next: ptr::null(),
            }),
            first_child: UnsafeCell::new(ptr::null()),
            sibling: UnsafeCell::new(Sibling::new()),
        }
    }

    /// An uninitialised block for a node (see `sync::alloc_block`), which
    /// `free` gives back once a node was written into it.
    #[inline]
    pub(crate) fn block() -> NonNull<std::mem::MaybeUninit<Self>> {
        let layout = std::alloc::Layout::new::<Self>();
        match NonNull::new(crate::sync::alloc_block(layout).cast()) {
            Some(p) => p,
            None => std::alloc::handle_alloc_error(layout),
        }
    }

    /// Drops the node at `p` and gives its block back.
    ///
    /// # Safety
    /// `p` is a block from `block` holding a node, and nothing can reach the node any more (its
    /// killer deferred this until no pinned reader could).
    pub(crate) unsafe fn free(p: *mut Self) {
        // SAFETY: forwarded from the caller; the block has the node's
        // layout and is handed back once, after the drop.
        unsafe {
            ptr::drop_in_place(p);
            crate::sync::free_block(p.cast(), std::alloc::Layout::new::<Self>());
        }
    }

    /// What the keys of this node's children are hashed with: its address,
    /// not its id (the kernel hashes with the parent dentry's address too).
    /// A walk knows the address of the next directory as soon as it has
    /// loaded the chain link to it, before the node's own line arrives, so
    /// the CPU can load the next component's bucket while that node is still
    /// being compared (its id, which the comparison of the next key needs,
    /// comes with the line). A node's children live no longer than it, and
    /// rename moves nodes in place, so the address names one directory for
    /// as long as it has children. Under loom the id: loom needs every
    /// execution of a model to take the same branches, and addresses differ.
    #[inline]
    pub(crate) fn hash_parent(&self) -> u64 {
        if crate::sync::LOOM {
            self.id
        } else {
            ptr::from_ref(self) as u64
        }
    }

    #[inline]
    pub(crate) fn is_negative(&self) -> bool {
        self.payload.is_none()
    }

    /// Whether the node's key is (`parent`, the probe's name) with table
    /// hash `hash`, read lock-free under the node's sequence count (see the
    /// module docs). False also when the key was changing or was read torn:
    /// the caller treats that as a miss, which `Dcache::find_live` re-checks
    /// against the global rename count.
    #[inline]
    pub(crate) fn key_matches(&self, hash: u64, parent: u64, probe: &Probe<'_>, guard: &Guard) -> bool {
        // Acquire: pairs with the Release store of the even count that ends
        // a rename's write section, so the fields loaded below are at least
        // that write's.
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 != 0 {
            return false;
        }
        // Relaxed: the sequence count orders these loads (see below).
        if self.hash.load(Ordering::Relaxed) != hash as u32
            || self.parent_id.load(Ordering::Relaxed) != parent
            || self.len.load(Ordering::Relaxed) as usize != probe.bytes.len()
        {
            return false;
        }
        // Word by word with constant indexes, so that the probe's words stay
        // in registers. The first word is compared even for an empty name:
        // with the lengths equal, the words a name does not use are zero in
        // the node and in the probe.
        if self.name[0].load(Ordering::Relaxed) != probe.words[0] {
            return false;
        }
        for i in 1..NAME_WORDS {
            if i < probe.used && self.name[i].load(Ordering::Relaxed) != probe.words[i] {
                return false;
            }
        }
        if probe.bytes.len() > INLINE_NAME {
            // Acquire: pairs with the Release store of the heap copy (by
            // rename, or the node's publication), so its bytes are visible.
            let long = self.long.load(Ordering::Acquire, guard);
            // SAFETY: a heap copy replaced by rename is freed through
            // `defer_destroy`, so one read while pinned stays valid.
            match unsafe { long.as_ref() } {
                Some(l) if *l.bytes == *probe.bytes => {}
                _ => return false,
            }
        }
        // Acquire: orders the loads above before the re-load of the count,
        // and synchronises with the Release fence of a rename whose stores
        // one of them read, so the re-load then sees the count changed.
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == s
    }

    /// The low 32 bits of the key's hash, for a writer that holds the lock
    /// of the node's bucket or reads it to pick the bucket to lock (it
    /// re-checks under the lock).
    #[inline]
    pub(crate) fn hash_bits(&self) -> u32 {
        self.hash.load(Ordering::Relaxed)
    }

    /// The name as of one moment (a consistent read under the sequence
    /// count).
    pub(crate) fn name_bytes(&self, guard: &Guard) -> Vec<u8> {
        loop {
            // Acquire: as in `key_matches`.
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 != 0 {
                spin_loop();
                continue;
            }
            let len = self.len.load(Ordering::Relaxed) as usize;
            let name = if len <= INLINE_NAME {
                let mut bytes = Vec::with_capacity(INLINE_NAME);
                for w in &self.name {
                    bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
                }
                bytes.truncate(len);
                Some(bytes)
            } else {
                // Acquire: as in `key_matches`.
                let long = self.long.load(Ordering::Acquire, guard);
                // SAFETY: as in `key_matches`.
                unsafe { long.as_ref() }.map(|l| l.bytes.to_vec())
            };
            // Acquire: as in `key_matches`; a torn read is retried.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s
                && let Some(name) = name
            {
                return name;
            }
            spin_loop();
        }
    }

    /// Gives the node a new key (rename), as one write section of its
    /// sequence count.
    ///
    /// # Safety
    /// The caller holds the rename lock (so it is the only writer of `seq`)
    /// and the locks of the buckets of the old and the new key, has made the
    /// global rename count odd, and is pinned by `guard`.
    pub(crate) unsafe fn set_key(&self, hash: u64, parent_id: u64, name: &[u8], guard: &Guard) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0);
        // Release: a reader that loads this odd count (Acquire in
        // `key_matches`, or Relaxed followed by the Acquire fence in
        // `Dcache::find_live`) also sees the odd global rename count the
        // caller stored before.
        self.seq.store(s.wrapping_add(1), Ordering::Release);
        // Release: orders the odd count before the field stores below; pairs
        // with the Acquire fences of `key_matches` and `Dcache::find_live`.
        fence(Ordering::Release);
        let (words, _) = name_words(name);
        self.hash.store(hash as u32, Ordering::Relaxed);
        self.parent_id.store(parent_id, Ordering::Relaxed);
        self.len.store(name_len(name), Ordering::Relaxed);
        for (w, v) in self.name.iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        let long = if name.len() > INLINE_NAME {
            Owned::new(LongName { bytes: name.into() }).into_shared(guard)
        } else {
            epoch::Shared::null()
        };
        // Release: publishes the heap copy's bytes; pairs with the Acquire
        // loads of `long`.
        let old = self.long.swap(long, Ordering::Release, guard);
        if !old.is_null() {
            // SAFETY: the old copy is unreachable from the node now; readers
            // pinned before the swap may still read it, and the collector
            // waits for them.
            unsafe { guard.defer_destroy(old) };
        }
        // Release: ends the write section; pairs with the Acquire load that
        // starts `key_matches`.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// Counts a hit for the eviction policy. Writes only if the frequency
    /// is below its maximum, so a hot entry's cache line stays shared
    /// between readers. Two racing hits may store the same value (one hit
    /// lost): the frequency is a hint, as in S3-FIFO.
    #[inline]
    pub(crate) fn mark_referenced(&self) {
        // Relaxed: a hint for the pruner, which reads it under the LRU
        // lock; it orders nothing.
        let f = self.freq.load(Ordering::Relaxed);
        if f < crate::policy::MAX_FREQ {
            self.freq.store(f + 1, Ordering::Relaxed);
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

/// A name's length as stored (names longer than `u32::MAX` bytes are not
/// names).
fn name_len(name: &[u8]) -> u32 {
    u32::try_from(name.len()).expect("dcache: a name longer than 4 GiB")
}

impl<T> Drop for Node<T> {
    fn drop(&mut self) {
        // SAFETY: the node is being destroyed, so no thread can reach it or its
        // heap name any more (it was unlinked from every structure before
        // `defer_destroy`, and the epoch has passed); the heap name was
        // allocated by `Atomic::new` or `Owned::new`.
        unsafe {
            let long = self.long.load(Ordering::Relaxed, epoch::unprotected());
            if !long.is_null() {
                drop(long.into_owned());
            }
        }
    }
}
