//! The cache proper: the shared state, counted handles, and every operation
//! (lookup, insert, replace, remove, rename, walk, drop_subtree, prune).
//!
//! The algorithms are those of the Linux dcache as seed 000 ("Scalability of
//! the directory entry cache") started it and as the kernel does it today:
//! RCU (here: crossbeam-epoch) reads of the hash chains (§3), a lazy LRU
//! (§6), a whole-path walk that takes a reference on the result only (§7,
//! "fast walk"), `d_alloc_parallel`-style single insertion of a name, a
//! global rename sequence count (`rename_lock`), and resumable subtree walks
//! (`shrink_dcache_parent`). The memory-ordering argument for each step is in
//! the comments next to the atomic operations; the protocols are summarised in
//! the crate docs.
//!
//! Lock order (outer to inner): rename lock, then child locks (two only in
//! rename, by node id), then bucket locks (two only in rename, by index),
//! then the LRU lock. The LRU lock is a leaf: nothing is acquired while it is
//! held. No thread takes a child lock while holding a bucket lock or the
//! LRU lock.

use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};

use crate::Config;
use crate::children::ChildGuard;
use crate::node::{COUNT_MASK, DEAD, Node, NodePtr, ON_LRU, Probe, UNHASHED};
use crate::policy::Lru;
use crate::stats::{Counters, Event, Stats};
use crate::sync::epoch::{self, Guard};
use crate::sync::{self, AtomicU64, AtomicUsize, CachePadded, Mutex, Ordering, fence, spin_loop};
use crate::table::Table;

/// After this many restarts caused by concurrent renames, `drop_subtree`
/// holds the rename lock for its next pass (the kernel's `d_walk` does the
/// same with `rename_lock`), which bounds its work.
const RESTARTS_BEFORE_LOCK: u32 = 2;

/// How often a lookup rescans a chain in which it skipped an unhashed entry
/// with the wanted key before it trusts a miss (see `Dcache::find_live`).
const RESCANS_AFTER_SKIP: u32 = 2;

/// State shared by the cache and every handle. It is freed by whichever
/// thread kills the root node, which can only happen once the `Dcache` is
/// dropped and no handle is left (every node holds a reference on its
/// parent, so any live handle keeps the root alive).
///
/// Lookups read `table`, `rename_seq`, `counters` and `config`, which only
/// renames write; what inserts and the LRU write (the shards) sits on cache
/// lines of its own, so that creating files does not make every lookup miss
/// on the shared state.
pub(crate) struct Shared<T> {
    pub(crate) table: Table<T>,
    /// The entries in shards (see `shard_of`): each with its own LRU lists,
    /// insertion numbers and counts, on cache lines of its own.
    pub(crate) shards: Box<[CachePadded<Shard<T>>]>,
    /// `shards.len() - 1`; a node's shard is `id & shard_mask`.
    pub(crate) shard_mask: u64,
    /// Serialises renames (the writer side of the kernel's `rename_lock`).
    pub(crate) rename_lock: Mutex<()>,
    /// Odd while a rename is moving a node between chains.
    pub(crate) rename_seq: AtomicUsize,
    pub(crate) counters: Counters,
    pub(crate) config: Config,
}

/// A share of the entries, as the kernel splits its LRU (`list_lru`) per
/// memory node: what an insert and an eviction write, apart from the
/// parent and the hash bucket. Each shard keeps to its share of
/// `max_entries` and `max_negative`, so the shards stay the same size
/// however the inserts fall (with one global count, pruning the shard of
/// whichever insert crossed the bound let their sizes drift apart, which
/// cost the churn bench a point of hit ratio).
pub(crate) struct Shard<T> {
    pub(crate) lru: Mutex<Lru<T>>,
    /// The next insertion number in this shard (ids are
    /// `number << shard bits | shard index`).
    pub(crate) next_id: AtomicU64,
    /// Entries of this shard, hashed or unhashed but still referenced.
    pub(crate) entries: AtomicUsize,
    pub(crate) negatives: AtomicUsize,
}

/// LRU shards per entry of `max_entries`: one shard per this many entries,
/// at most `MAX_SHARDS`, a power of two (one for small caches, whose tests
/// count on single queues, and under loom).
const ENTRIES_PER_SHARD: usize = 4096;
/// The most LRU shards.
const MAX_SHARDS: usize = 8;

impl<T> Shared<T> {
    /// The shard of `node`: fixed for its life (the low bits of its id), so
    /// that its last `put`, the pruner and its killer agree on the lock
    /// without reading anything that changes. The bits come from the key's
    /// hash when the node is created, so that a key cached again falls in
    /// the same shard and finds its fingerprint in that shard's ghost.
    #[inline]
    pub(crate) fn shard_of(&self, node: &Node<T>) -> &Shard<T> {
        &self.shards[(node.id & self.shard_mask) as usize]
    }

    /// The insertion limits of `drop_subtree`: per shard, the smallest id
    /// an insert after this call can get.
    fn id_limits(&self) -> [u64; MAX_SHARDS] {
        let mut limits = [u64::MAX; MAX_SHARDS];
        for (i, s) in self.shards.iter().enumerate() {
            // Relaxed: see the increment in `insert_inner`.
            limits[i] = s.next_id.load(Ordering::Relaxed) << self.shard_mask.count_ones() | i as u64;
        }
        limits
    }

    /// Accounts a hit on `n` found by a lookup that takes no reference: the
    /// lazy LRU's referenced mark (written only if clear) and the thread's
    /// own statistics shard, the only writes a hit makes.
    #[inline]
    fn record_hit(&self, n: &Node<T>) {
        n.mark_referenced();
        let event = if n.is_negative() {
            Event::NegativeHit
        } else {
            Event::Hit
        };
        self.counters.add(event, 1);
    }
}

/// The common case of [`release_one`], inlined into every handle's drop:
/// one compare-exchange that drops a reference which is not the last, or the
/// last one of a hashed node that is already on the LRU (the first case of
/// `release_one`'s loop, tried once). Returns false when the caller must take
/// the slow path: the last reference to a node that is unhashed or off the
/// LRU, or a compare-exchange that lost a race.
///
/// It is inlined because a counted lookup whose handle is dropped at once
/// (what the filesystem does for every LOOKUP) otherwise runs two calls with
/// their register saves between one lookup's node miss and the next
/// lookup's bucket load, and the CPU's out-of-order window no longer reaches
/// the next lookup's misses: with this and `find_live` inlined, a counted
/// lookup costs what a borrowed one does (see BENCHMARKS.md, "dcache:
/// counted lookups and the churn policy").
#[inline]
fn release_fast<T>(node: &Node<T>) -> bool {
    let c = node.count.load(Ordering::Relaxed);
    debug_assert!(c & DEAD == 0 && c & COUNT_MASK > 0, "dcache: reference count underflow");
    let plain = c & COUNT_MASK > 1 || c & (ON_LRU | UNHASHED | COUNT_MASK) == ON_LRU | 1;
    // Release: as the decrement in `release_one`; pairs with the Acquire CAS
    // in `try_get`, in the DEAD transition and in the pruner.
    plain
        && node
            .count
            .compare_exchange(c, c - 1, Ordering::Release, Ordering::Relaxed)
            .is_ok()
}

/// Drops `k` references on `node`, which the caller holds: with one
/// decrement when that leaves at least one (then none of them was the last,
/// and `k` single decrements would have done nothing else), else one by
/// one through `put_node`.
fn release_many<T>(shared_ptr: NonNull<Shared<T>>, node: NonNull<Node<T>>, k: usize) {
    // SAFETY: the caller holds `k` references on `node`.
    let n = unsafe { node.as_ref() };
    let mut c = n.count.load(Ordering::Relaxed);
    while c & COUNT_MASK > k {
        // Release: as the decrement in `release_one`; pairs with the Acquire
        // CAS in `try_get`, in the DEAD transition and in the pruner.
        match n
            .count
            .compare_exchange_weak(c, c - k, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => return,
            Err(now) => c = now,
        }
    }
    for _ in 0..k {
        put_node(shared_ptr, node, false);
    }
}

/// Drops one reference on `node`. Returns true if the caller now owns the
/// node's teardown (it was the last reference to an unhashed node and the
/// call marked it `DEAD`).
///
/// The last reference to a hashed node that is not on the LRU is dropped under
/// the LRU lock together with linking the node there, so the node is never
/// unreferenced, hashed and unlisted at once.
fn release_one<T>(shared: &Shared<T>, node: &Node<T>) -> bool {
    let mut c = node.count.load(Ordering::Relaxed);
    loop {
        debug_assert!(c & DEAD == 0 && c & COUNT_MASK > 0, "dcache: reference count underflow");
        let last = c & COUNT_MASK == 1;
        if !last || (c & ON_LRU != 0 && c & UNHASHED == 0) {
            // Release: our uses of the node happen before whoever takes the
            // next reference or frees it; pairs with the Acquire CAS in
            // `try_get`, in the DEAD transition below and in the pruner.
            match node
                .count
                .compare_exchange_weak(c, c - 1, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return false,
                Err(now) => c = now,
            }
            continue;
        }
        if c & UNHASHED != 0 {
            // Acquire: we are about to free the node; pairs with the Release
            // decrements of all earlier holders.
            match node
                .count
                .compare_exchange_weak(c, (c - 1) | DEAD, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => c = now,
            }
            continue;
        }
        // Last reference to a hashed node that is off the LRU: put it on.
        let mut lru = shared.shard_of(node).lru.lock();
        c = node.count.load(Ordering::Relaxed);
        while c & COUNT_MASK == 1 && c & (UNHASHED | ON_LRU) == 0 {
            // Release: as the decrement above.
            match node
                .count
                .compare_exchange_weak(c, (c - 1) | ON_LRU, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => {
                    // SAFETY: we hold the LRU lock of the node's shard; the
                    // node is alive (it cannot be killed before its killer
                    // takes this lock to take it off the list) and it was on
                    // no list (ON_LRU was clear, and that bit changes only
                    // under this lock).
                    unsafe { lru.enlist(node) };
                    return false;
                }
                Err(now) => c = now,
            }
        }
        drop(lru);
    }
}

/// Puts a node that an insert has just hashed on its LRU list while the
/// insert's handle still holds it, so that the handle's drop (in the
/// filesystem and the churn bench, at once) is the inlined fast path of a
/// listed node, not the slow path of the last reference to a hashed node
/// off the lists, which took the shard's lock there (about 110
/// instructions per insert, and an out-of-line call, on the churn stream).
/// The lock is taken here instead, once. A node listed while in use is
/// what the lazy LRU has always allowed: a pruner that reaches it while it
/// is still held takes it off (and, off the probation queue, marks it for
/// the main queue), and its last `put` lists it again.
fn enlist_new<T>(shared: &Shared<T>, node: &Node<T>) {
    let mut lru = shared.shard_of(node).lru.lock();
    // Relaxed: `ON_LRU` changes only under this lock, which we hold, and
    // our reference keeps the node from `DEAD`; an `UNHASHED` set by a
    // concurrent drop since the insert is seen here or not, and either is
    // sound (an unhashed node is not listed, or is taken off by its killer).
    let c = node.count.load(Ordering::Relaxed);
    if c & (ON_LRU | UNHASHED) == 0 {
        // Relaxed: as above; the word's other bits and the count may change
        // meanwhile (lookups, a drop), which the read-modify-write keeps.
        node.count.fetch_or(ON_LRU, Ordering::Relaxed);
        // SAFETY: we hold the LRU lock of the node's shard; the node is
        // alive (our reference) and on no list (ON_LRU was clear, and that
        // bit changes only under this lock).
        unsafe { lru.enlist(node) };
    }
}

/// Tears down a node whose `DEAD` bit the caller set: takes it off the LRU,
/// out of its hash chain and off its parent's list of children, and hands its
/// memory to the epoch collector. Returns the parent, on which the caller
/// still holds the node's reference (null for the root).
///
/// # Safety
/// The caller set `DEAD` on `node` (so it owns the teardown) and is pinned.
unsafe fn kill<T>(shared: &Shared<T>, node: &Node<T>, guard: &Guard) -> *const Node<T> {
    // ON_LRU cannot be set on a DEAD node (setting it needs a reference) and
    // the pruner skips DEAD nodes, so only we change it from here on.
    if node.count.load(Ordering::Relaxed) & ON_LRU != 0 {
        let mut lru = shared.shard_of(node).lru.lock();
        // SAFETY: ON_LRU is set, so the node is on its list, in its shard,
        // whose lock we hold.
        unsafe { lru.list_for(node).remove(node) };
        node.count.fetch_and(!ON_LRU, Ordering::Relaxed);
    }
    shared.table.unlink(node, guard);
    debug_assert!(ChildGuard::lock(node).is_empty(), "dcache: a dead node with children");
    // Acquire: pairs with the Release store of rename; a DEAD node cannot be
    // moved any more (rename holds a reference).
    let parent = node.parent.load(Ordering::Acquire).cast_const();
    // SAFETY: the node holds a reference on its parent until we release it
    // after this function returns.
    if let Some(p) = unsafe { parent.as_ref() } {
        // SAFETY: every cached child is on its parent's list until its
        // killer (we) takes it off; the parent is alive (the node's
        // reference).
        unsafe { ChildGuard::lock(p).remove(node) };
        let shard = shared.shard_of(node);
        shard.entries.fetch_sub(1, Ordering::Relaxed);
        if node.is_negative() {
            shard.negatives.fetch_sub(1, Ordering::Relaxed);
        }
    }
    // SAFETY: the node is DEAD (no new references), unhashed and unlinked from
    // its chain, off the LRU and off its parent's list of children, and it has no
    // children (each would hold a reference). Only readers pinned before the
    // unlinking can still see it, and the collector waits for them.
    let p = ptr::from_ref(node).cast_mut();
    // SAFETY: as above; the node came from `Node::block` (`insert_inner`,
    // `Dcache::build`) and only its killer (we) frees it.
    unsafe { guard.defer_unchecked(move || Node::free(p)) };
    parent
}

/// Drops one reference; if it was the last one of an unhashed node, frees the
/// node and walks up releasing parents as needed. Frees the shared state if
/// the root goes. Returns how many nodes it freed: 0, or `node` and the
/// ancestors whose last reference went with it.
///
/// With `flush`, a node freed here goes straight to the collector's global
/// queue: crossbeam-epoch otherwise keeps deferred frees in the calling
/// thread's local bag until 64 of them gather there, so on a thread that
/// then goes idle the payloads (and whatever they own: in rcufs an inode
/// and, through it, its page-cache entry) would never be dropped. Callers
/// that free many nodes in a row pass false and flush once at the end
/// ([`flush_deferred`]); a flush costs about 0.3 µs.
#[inline]
fn put_node<T>(shared_ptr: NonNull<Shared<T>>, node: NonNull<Node<T>>, flush: bool) -> usize {
    // SAFETY: the caller holds a reference on `node`.
    if release_fast(unsafe { node.as_ref() }) {
        return 0;
    }
    put_node_slow(shared_ptr, node, flush)
}

/// [`put_node`] past its inlined fast path.
#[inline(never)]
fn put_node_slow<T>(shared_ptr: NonNull<Shared<T>>, node: NonNull<Node<T>>, flush: bool) -> usize {
    // SAFETY: the caller's reference on `node` keeps the root, and so the
    // shared state, alive.
    let shared = unsafe { shared_ptr.as_ref() };
    // SAFETY: the caller holds a reference on `node`.
    if !release_one(shared, unsafe { node.as_ref() }) {
        return 0;
    }
    let guard = epoch::pin();
    let mut n = node.as_ptr().cast_const();
    let mut freed = 0;
    loop {
        freed += 1;
        // SAFETY: `n` is DEAD and this thread set that bit; we are pinned.
        let parent = unsafe { kill(shared, &*n, &guard) };
        if parent.is_null() {
            // The root is gone: no node, handle or cache refers to the shared
            // state any more (each would hold a reference reaching the root).
            debug_assert!(shared.table.is_empty(&guard), "dcache: entries left behind the root");
            if flush {
                sync::flush_deferred(&guard);
            }
            drop(guard);
            // SAFETY: allocated by `Box::into_raw` in `Dcache::new`, and this
            // is the one thread that killed the root.
            unsafe { drop(Box::from_raw(shared_ptr.as_ptr())) };
            return freed;
        }
        // SAFETY: we hold the dead child's reference on `parent`.
        if !release_one(shared, unsafe { &*parent }) {
            if flush {
                sync::flush_deferred(&guard);
            }
            return freed;
        }
        n = parent;
    }
}

/// Hands the nodes this thread freed (and not yet flushed) to the
/// collector's global queue, and lets it free what no reader can see any
/// more (see [`put_node`]).
fn flush_deferred() {
    sync::flush_deferred(&epoch::pin());
}

/// How many victims ahead `kill_victims` prefetches what it will touch.
const PREFETCH_AHEAD: usize = 4;

/// Kills nodes the pruner marked `DEAD` (and took off the LRU), as one
/// batch: each leaves its hash chain (under its bucket's lock), then its
/// parent's list of children, one child-lock section per parent; the entry
/// counts drop once, the memory goes to the epoch collector, and each
/// parent loses the victims' references on it with one decrement when none
/// of them is its last (`release_many`).
///
/// It is `kill` and `put_node` per victim, regrouped: every victim leaves
/// every structure before its memory is deferred, and a parent is released
/// only after its dead children are off its list, as `put_node` does. What
/// the batch saves is the parents' lock and count traffic, the same cache
/// lines for every victim under one directory (and, at two threads, lines
/// the inserting threads take too), and the misses it can overlap: the
/// victims' buckets and sibling links are known a few victims ahead and
/// prefetched.
fn kill_victims<T>(shared_ptr: NonNull<Shared<T>>, mut victims: Vec<NodePtr<T>>, guard: &Guard) {
    if victims.is_empty() {
        return;
    }
    // SAFETY: the victims hold references on their parents, keeping the root
    // and so the shared state alive until the last release below.
    let shared = unsafe { shared_ptr.as_ref() };
    // SAFETY: the pruner set DEAD on each victim and handed its teardown to
    // us; it is freed only by the `defer_destroy` at the end.
    let node = |v: &NodePtr<T>| unsafe { v.0.as_ref() };
    for (i, v) in victims.iter().enumerate() {
        if let Some(ahead) = victims.get(i + PREFETCH_AHEAD) {
            let a = node(ahead);
            sync::prefetch(shared.table.bucket_of(a.hash_bits()));
            sync::prefetch(&a.parent);
            sync::prefetch(&a.sibling);
        }
        let n = node(v);
        debug_assert!(n.count.load(Ordering::Relaxed) & (DEAD | ON_LRU) == DEAD);
        shared.table.unlink(n, guard);
        debug_assert!(ChildGuard::lock(n).is_empty(), "dcache: a dead node with children");
    }
    // Acquire: pairs with the Release store of rename; a DEAD node cannot be
    // moved any more (rename holds a reference).
    let parent_of = |v: &NodePtr<T>| node(v).parent.load(Ordering::Acquire).cast_const();
    victims.sort_unstable_by_key(|v| parent_of(v) as usize);
    let negatives = victims.iter().filter(|v| node(v).is_negative()).count();
    for run in victims.chunk_by(|a, b| ptr::eq(parent_of(a), parent_of(b))) {
        let parent = parent_of(&run[0]);
        // SAFETY: the root is never on the LRU, so every victim has a
        // parent, on which it holds a reference.
        let p = unsafe { &*parent };
        let mut children = ChildGuard::lock(p);
        for (i, v) in run.iter().enumerate() {
            if let Some(ahead) = run.get(i + PREFETCH_AHEAD) {
                // SAFETY: read under the parent's child lock, which guards
                // the links of its children.
                let (prev, next) = node(ahead).sibling.with(|s| unsafe { ((*s).prev, (*s).next) });
                sync::prefetch(prev);
                sync::prefetch(next);
            }
            // SAFETY: every cached child is on its parent's list until its
            // killer (we) takes it off; we hold the parent's child lock.
            unsafe { children.remove(node(v)) };
        }
    }
    // A batch comes from one shard's lists.
    if let Some(first) = victims.first() {
        let shard = shared.shard_of(node(first));
        debug_assert!(victims.iter().all(|v| ptr::eq(shared.shard_of(node(v)), shard)));
        shard.entries.fetch_sub(victims.len(), Ordering::Relaxed);
        shard.negatives.fetch_sub(negatives, Ordering::Relaxed);
    }
    for run in victims.chunk_by(|a, b| ptr::eq(parent_of(a), parent_of(b))) {
        // SAFETY: the parent is non-null (above) and we hold its dead
        // children's `run.len()` references on it.
        let parent = unsafe { NonNull::new_unchecked(parent_of(&run[0]).cast_mut()) };
        release_many(shared_ptr, parent, run.len());
    }
    // One deferred function frees the whole batch, in the vector that
    // collected it (three words: it fits inside the deferred function, so
    // nothing more is allocated). One `defer_destroy` per victim cost about
    // 70 instructions each (the bag's slot, its dispatch when collected) and
    // filled the thread's bag, whose hand-over to the global queue copies
    // 2 KB, as many times as fast as batches are long (16 in the churn
    // bench).
    // SAFETY: every victim is DEAD (no new references), unhashed and
    // unlinked from its chain, off the LRU and off its parent's list of
    // children, and it has no children (each would hold a reference), so
    // only readers pinned before the unlinking can still reach it, and the
    // collector runs this after they unpinned. Each came from `Node::block`
    // (`insert_inner`) and is freed here once (the pruner marked it
    // DEAD, which exactly one thread does, and handed it to this batch
    // only).
    unsafe {
        guard.defer_unchecked(move || {
            for v in victims {
                Node::free(v.0.as_ptr());
            }
        });
    }
}

/// A counted handle on a dentry. While it exists the entry's memory and
/// payload stay valid; the entry may still be unhashed (removed from the
/// cache) by others, which `is_hashed` tells.
pub struct Dentry<T: Send + Sync + 'static> {
    node: NonNull<Node<T>>,
    shared: NonNull<Shared<T>>,
}

// SAFETY: a handle is a counted reference to a `Node<T>`, which is `Send +
// Sync` for `T: Send + Sync`; the shared state is all atomics and locks.
unsafe impl<T: Send + Sync + 'static> Send for Dentry<T> {}
// SAFETY: as for `Send`; `&Dentry` only reads.
unsafe impl<T: Send + Sync + 'static> Sync for Dentry<T> {}

impl<T: Send + Sync + 'static> Dentry<T> {
    /// Wraps a reference the caller already took.
    ///
    /// # Safety
    /// The caller owns one reference on `node`, which belongs to the cache
    /// whose shared state is `shared`.
    unsafe fn from_counted(node: &Node<T>, shared: NonNull<Shared<T>>) -> Self {
        Self {
            node: NonNull::from(node),
            shared,
        }
    }

    #[inline]
    fn node(&self) -> &Node<T> {
        // SAFETY: the handle holds a reference, so the node is not freed.
        unsafe { self.node.as_ref() }
    }

    /// The payload, or `None` for a negative entry.
    pub fn payload(&self) -> Option<&T> {
        self.node().payload.as_ref()
    }

    /// The entry's current name (it changes on rename; empty for the root).
    pub fn name(&self) -> Vec<u8> {
        let guard = epoch::pin();
        self.node().name_bytes(&guard)
    }

    /// Whether the entry caches "does not exist".
    pub fn is_negative(&self) -> bool {
        self.node().is_negative()
    }

    /// Whether the entry is still in the cache (lookups can find it).
    pub fn is_hashed(&self) -> bool {
        !self.node().is_unhashed()
    }

    /// A number unique to this entry for the life of the cache.
    pub fn id(&self) -> u64 {
        self.node().id
    }

    /// Whether two handles name the same entry.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.node == b.node
    }

    /// The current parent (`None` for the root).
    pub fn parent(&self) -> Option<Dentry<T>> {
        // The pin keeps a parent we read valid while we take a reference.
        let _guard = epoch::pin();
        loop {
            // Acquire: pairs with the Release store of the new parent in
            // rename.
            let p = self.node().parent.load(Ordering::Acquire);
            // SAFETY: the parent was this node's parent while we were pinned,
            // so its memory is still valid (it is freed through the epoch).
            let pr = unsafe { p.as_ref() }?;
            if pr.try_get(false) {
                // SAFETY: we just took the reference.
                return Some(unsafe { Dentry::from_counted(pr, self.shared) });
            }
            // The old parent died after a rename moved us away (the pin keeps
            // its memory valid); reload the pointer.
            spin_loop();
        }
    }

    /// Drops the handle; returns how many entries that freed: 0, or, if
    /// this was the last reference to an entry no longer cached, that
    /// entry and each ancestor no longer cached whose last reference was
    /// the freed child's (so a directory held only by its children goes
    /// with the last of them).
    pub fn release(self) -> usize {
        let this = ManuallyDrop::new(self);
        put_node(this.shared, this.node, true)
    }

    /// Drops the handle without flushing what it frees (see [`put_node`]);
    /// returns whether that freed the entry.
    fn release_batched(self) -> bool {
        let this = ManuallyDrop::new(self);
        put_node(this.shared, this.node, false) > 0
    }
}

impl<T: Send + Sync + 'static> Clone for Dentry<T> {
    fn clone(&self) -> Self {
        self.node().get();
        Self {
            node: self.node,
            shared: self.shared,
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Dentry<T> {
    fn drop(&mut self) {
        put_node(self.shared, self.node, true);
    }
}

impl<T: Send + Sync + 'static> fmt::Debug for Dentry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dentry")
            .field("id", &self.id())
            .field("name", &String::from_utf8_lossy(&self.name()))
            .field("negative", &self.is_negative())
            .field("hashed", &self.is_hashed())
            .finish()
    }
}

/// The result of [`Dcache::lookup`].
#[derive(Debug)]
pub enum Lookup<T: Send + Sync + 'static> {
    /// A cached positive entry.
    Positive(Dentry<T>),
    /// A cached "does not exist".
    Negative,
    /// Nothing cached.
    Miss,
}

/// The result of [`Dcache::walk`].
#[derive(Debug)]
pub enum Walk<T: Send + Sync + 'static> {
    /// Every component resolved to a positive entry; this is the last one.
    Found(Dentry<T>),
    /// Component number `consumed` (0-based) is cached as negative under
    /// `parent` (which resolved the first `consumed` components).
    Negative { parent: Dentry<T>, consumed: usize },
    /// Component number `consumed` is not cached under `deepest`.
    Miss { deepest: Dentry<T>, consumed: usize },
}

/// What [`Dcache::drop_subtree`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropStats {
    /// Entries unhashed and freed.
    pub dropped: u64,
    /// Entries unhashed but still referenced when the walk finished (by a
    /// handle, or by a cached child that was itself busy); they are freed when
    /// the last reference goes.
    pub busy: u64,
    /// Entries the filter kept (their subtrees are still walked) or fenced
    /// (their subtrees are not).
    pub skipped: u64,
}

/// What [`Dcache::drop_subtree_with`] does with a cached entry below the
/// directory, as its filter decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Unhash it, and everything below it.
    Drop,
    /// Keep it, and walk on into what is below it.
    Keep,
    /// Keep it and everything below it, unwalked: the filter is not asked
    /// about anything below, which the walk's statistics then do not count.
    Fence,
}

/// The concurrent directory-entry cache. See the crate docs.
pub struct Dcache<T: Send + Sync + 'static> {
    shared: NonNull<Shared<T>>,
    root: ManuallyDrop<Dentry<T>>,
    _owns: PhantomData<T>,
}

// SAFETY: the cache is a handle on the shared state (atomics and locks) and a
// counted root handle; payloads are `Send + Sync`.
unsafe impl<T: Send + Sync + 'static> Send for Dcache<T> {}
// SAFETY: every method takes `&self` and synchronises internally.
unsafe impl<T: Send + Sync + 'static> Sync for Dcache<T> {}

impl<T: Send + Sync + 'static> Dcache<T> {
    /// A cache whose root entry carries `root_payload`.
    pub fn new(config: Config, root_payload: T) -> Self {
        Self::build(config, root_payload, false)
    }

    /// A cache in which every key's hash is its name's length, so that keys
    /// of equal length collide whatever their parents and bytes: for tests
    /// and loom models of the key protocol, which need lookups to compare
    /// keys that differ in everything but the hash. Slow; never use it
    /// otherwise.
    #[doc(hidden)]
    pub fn with_colliding_hashes(config: Config, root_payload: T) -> Self {
        Self::build(config, root_payload, true)
    }

    fn build(config: Config, root_payload: T, colliding: bool) -> Self {
        let config = config.normalized();
        let buckets = if crate::sync::LOOM {
            2
        } else {
            (config.max_entries / 2).next_power_of_two().clamp(16, 1 << 24)
        };
        let seed = if crate::sync::LOOM {
            0
        } else {
            use std::hash::BuildHasher;
            std::hash::RandomState::new().hash_one(0x5eed_u64)
        };
        let root = Node::block();
        // SAFETY: a fresh block for a node, ours alone.
        let root: *const Node<T> = unsafe {
            (*root.as_ptr()).write(Node::new(
                0,
                0,
                u64::MAX,
                &Probe::new(b""),
                ptr::null(),
                Some(root_payload),
                1,
            ))
        };
        let shards = if crate::sync::LOOM {
            1
        } else {
            (config.max_entries / ENTRIES_PER_SHARD)
                .clamp(1, MAX_SHARDS)
                .next_power_of_two()
        };
        let shared = Box::new(Shared {
            table: Table::new(buckets, seed, colliding),
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(Shard {
                        lru: Mutex::new(Lru::new(&config, shards)),
                        // Number 0 of shard 0 is the root's id.
                        next_id: AtomicU64::new(1),
                        entries: AtomicUsize::new(0),
                        negatives: AtomicUsize::new(0),
                    })
                })
                .collect(),
            shard_mask: shards as u64 - 1,
            rename_lock: Mutex::new(()),
            rename_seq: AtomicUsize::new(0),
            counters: Counters::new(),
            config,
        });
        let shared = NonNull::from(Box::leak(shared));
        // SAFETY: `root` was just allocated with one reference, which the
        // cache keeps until it is dropped.
        let root = unsafe { Dentry::from_counted(&*root, shared) };
        Self {
            shared,
            root: ManuallyDrop::new(root),
            _owns: PhantomData,
        }
    }

    /// Panics if `d` belongs to another cache: mixing caches would link
    /// nodes of one into the child lists and reference counts of the other.
    #[inline]
    #[track_caller]
    fn own(&self, d: &Dentry<T>) {
        assert!(d.shared == self.shared, "dcache: a handle from another cache");
    }

    #[inline]
    fn sh(&self) -> &Shared<T> {
        // SAFETY: the cache holds a reference on the root, which keeps the
        // shared state alive.
        unsafe { self.shared.as_ref() }
    }

    /// # Safety
    /// As for `Dentry::from_counted`.
    #[inline]
    unsafe fn counted(&self, node: &Node<T>) -> Dentry<T> {
        // SAFETY: forwarded from the caller.
        unsafe { Dentry::from_counted(node, self.shared) }
    }

    /// The configuration in force (after normalisation).
    pub fn config(&self) -> &Config {
        &self.sh().config
    }

    /// A counted handle on the root entry.
    pub fn root(&self) -> Dentry<T> {
        (*self.root).clone()
    }

    /// The number of buckets of the hash table.
    pub fn buckets(&self) -> usize {
        self.sh().table.len()
    }

    /// Sizes of the per-entry structures, in bytes: the node (with its key:
    /// hash bits, parent id and the name inline up to `INLINE_NAME` = 32
    /// bytes; its hash and LRU links, state word, child-list links and
    /// payload) and one hash bucket (there is one bucket per two entries of
    /// `max_entries`). A name longer than 32 bytes also has a heap copy. For
    /// overhead accounting.
    #[doc(hidden)]
    pub fn layout_bytes() -> (usize, usize) {
        (
            std::mem::size_of::<Node<T>>(),
            std::mem::size_of::<crate::table::Bucket<T>>(),
        )
    }

    /// Panics unless every hash chain holds only hashed nodes that are
    /// marked linked and sit in the bucket of their key. Holds whenever no
    /// operation is in flight; for tests and loom models.
    #[doc(hidden)]
    pub fn assert_consistent(&self) {
        self.sh().table.assert_consistent(&epoch::pin());
    }

    /// The bucket a name under `parent` hashes to (for tests and models that
    /// want names in the same or in different chains).
    #[doc(hidden)]
    pub fn bucket_of(&self, parent: &Dentry<T>, name: &[u8]) -> usize {
        self.own(parent);
        let sh = self.sh();
        sh.table.index(sh.table.hash(parent.node().hash_parent(), name))
    }

    /// Finds the hashed node for (pid, name), lock-free.
    ///
    /// A rename can move a node the scan stands on into another chain and so
    /// make it miss; a miss is therefore only trusted if the rename sequence
    /// count did not change. The misleading value (the moved node's new
    /// `next`) is stored with Release after the count was made odd and read
    /// here with Acquire, so a scan that followed it sees the count changed.
    /// Likewise a rename's target is unhashed while the count is odd, and a
    /// scan reads the bit with Acquire, so a scan that skipped the target
    /// retries instead of reporting a miss for a name that is cached before
    /// and after the rename. An insert that replaces an entry links the new
    /// one before it unhashes the old, so a scan that skipped an unhashed
    /// entry with the wanted key rescans (a bounded number of times: an
    /// unhashed node can linger in a chain while it is held) and finds the
    /// replacement.
    ///
    /// Out of line (as the compiler chose before `find_live_inlined` was
    /// split off): inlined into `lookup_with`, it made that one about 10 %
    /// slower in the hit bench.
    #[inline(never)]
    fn find_live<'g>(&self, pid: u64, probe: &Probe<'_>, hash: u64, guard: &'g Guard) -> Option<&'g Node<T>> {
        self.find_live_inlined::<false>(pid, probe, hash, guard)
    }

    /// `find_live`, always inlined: the counted lookup's form. There the call
    /// and its register saves sat between one lookup's misses and the next
    /// one's and kept the CPU from overlapping them (see `release_fast`).
    /// With `INLINE_SCAN` the chain scan is inlined too, the walk's form:
    /// there a call per component, its register saves and the probe's words
    /// reloaded from memory were an eighth of a walk's instructions (1,593
    /// to 1,395 per 8-component walk by callgrind, `walkprof`).
    #[inline(always)]
    fn find_live_inlined<'g, const INLINE_SCAN: bool>(
        &self,
        pid: u64,
        probe: &Probe<'_>,
        hash: u64,
        guard: &'g Guard,
    ) -> Option<&'g Node<T>> {
        let sh = self.sh();
        let index = sh.table.index(hash);
        let mut rescans = 0;
        loop {
            // Acquire: pairs with the Release increment that ends a rename, so
            // a scan that starts after it sees the chains it left.
            let seq = sh.rename_seq.load(Ordering::Acquire);
            if seq & 1 == 1 {
                spin_loop();
                continue;
            }
            let (found, skipped) = if INLINE_SCAN {
                sh.table.scan_inlined(index, hash, pid, probe, guard)
            } else {
                sh.table.scan(index, hash, pid, probe, guard)
            };
            if let Some(node) = found {
                return Some(node);
            }
            if skipped && rescans < RESCANS_AFTER_SKIP {
                rescans += 1;
                continue;
            }
            // Acquire: orders the scan's loads before the re-check, and
            // synchronises with the Release stores and fences of a rename
            // whose effects the scan read (a moved `next`, a target's
            // `UNHASHED` bit, a node's odd sequence count or a key field
            // stored in its write section), all of which come after the
            // rename made the count odd; so the re-check then sees it changed.
            fence(Ordering::Acquire);
            if sh.rename_seq.load(Ordering::Relaxed) == seq {
                return None;
            }
        }
    }

    /// Looks `name` up under `parent`, taking a reference on a positive hit.
    pub fn lookup(&self, parent: &Dentry<T>, name: &[u8]) -> Lookup<T> {
        self.own(parent);
        let sh = self.sh();
        let guard = epoch::pin();
        let pid = parent.node().id;
        let probe = Probe::new(name);
        let hash = sh.table.hash_probe(parent.node().hash_parent(), &probe);
        loop {
            match self.find_live_inlined::<false>(pid, &probe, hash, &guard) {
                Some(n) if n.is_negative() => {
                    n.mark_referenced();
                    sh.counters.add(Event::NegativeHit, 1);
                    return Lookup::Negative;
                }
                Some(n) if n.try_get(true) => {
                    n.mark_referenced();
                    sh.counters.add(Event::Hit, 1);
                    // SAFETY: `try_get` took the reference.
                    return Lookup::Positive(unsafe { self.counted(n) });
                }
                // Unhashed since the scan found it: whatever replaced it (a
                // renamed entry, a new insert) may already be hashed, so
                // search again rather than report a miss for a name that
                // stayed cached.
                Some(_) => spin_loop(),
                None => {
                    sh.counters.add(Event::Miss, 1);
                    return Lookup::Miss;
                }
            }
        }
    }

    /// Looks `name` up under `parent` without taking a reference: `f` sees the
    /// payload while the lookup is pinned. `None` is a miss, `Some(f(None))`
    /// a negative hit, `Some(f(Some(payload)))` a positive hit.
    pub fn lookup_with<R>(&self, parent: &Dentry<T>, name: &[u8], f: impl FnOnce(Option<&T>) -> R) -> Option<R> {
        self.own(parent);
        let sh = self.sh();
        let guard = epoch::pin();
        let pid = parent.node().id;
        let probe = Probe::new(name);
        let hash = sh.table.hash_probe(parent.node().hash_parent(), &probe);
        match self.find_live(pid, &probe, hash, &guard) {
            Some(n) => {
                sh.record_hit(n);
                Some(f(n.payload.as_ref()))
            }
            None => {
                sh.counters.add(Event::Miss, 1);
                None
            }
        }
    }

    /// Pins the current thread for a series of reference-free lookups.
    pub fn pin(&self) -> Pinned<'_, T> {
        Pinned {
            cache: self,
            guard: epoch::pin(),
        }
    }

    /// Caches `name` under `parent` with `payload` (`None` caches "does not
    /// exist"). If a positive entry is already cached it is returned and
    /// `payload` is dropped (two racing inserts end with one entry, as
    /// `d_alloc_parallel`); a cached negative entry is replaced by a positive
    /// insert. Under an unhashed parent the new entry is returned unhashed.
    pub fn insert(&self, parent: &Dentry<T>, name: &[u8], payload: Option<T>) -> Dentry<T> {
        self.insert_inner(parent, name, payload, false)
    }

    /// Caches `name` under `parent` unconditionally: any cached entry for the
    /// name is unhashed first, together with its cached subtree.
    pub fn replace(&self, parent: &Dentry<T>, name: &[u8], payload: Option<T>) -> Dentry<T> {
        self.insert_inner(parent, name, payload, true)
    }

    fn insert_inner(&self, parent: &Dentry<T>, name: &[u8], payload: Option<T>, replace: bool) -> Dentry<T> {
        self.own(parent);
        let sh = self.sh();
        let guard = epoch::pin();
        let pnode = parent.node();
        let probe = Probe::new(name);
        let hash = sh.table.hash_probe(pnode.hash_parent(), &probe);
        let index = sh.table.index(hash);
        let keeps = |n: &Node<T>, payload: &Option<T>| !replace && (!n.is_negative() || payload.is_none());
        // No lock-free look for an existing entry first: callers insert
        // after a lookup missed (the filesystem after its LOOKUP of the
        // source, the churn bench after a miss), so it would repeat their
        // lookup; the scan under the bucket lock below finds an entry that
        // appeared meanwhile.
        let mut old = None;
        // A reference to release only after the locks are gone (releasing
        // the last one frees the node, which takes the bucket lock).
        let mut release_later = None;
        let new = {
            let mut children = ChildGuard::lock(pnode);
            // The parent's UNHASHED bit is set before whoever unhashed it
            // takes this lock to collect the children, so either we see it
            // here or our child is collected (the lock orders the two).
            let parent_live = !pnode.is_unhashed();
            let _bucket = sh.table.lock(index);
            // The entry this insert replaces; it is unhashed only after the
            // new node is linked, so that lookups never miss the name.
            let mut replaced = None;
            if parent_live && let Some(n) = sh.table.scan_locked(index, hash, pnode.id, &probe, &guard) {
                if keeps(n, &payload) && n.try_get(true) {
                    // SAFETY: `try_get` took the reference.
                    return unsafe { self.counted(n) };
                }
                if n.try_get(false) {
                    // SAFETY: `try_get` took the reference.
                    replaced = Some(unsafe { self.counted(n) });
                }
            }
            // The shard, from the hash's high bits (the low ones pick the
            // bucket), in the id's low bits (`shard_of`).
            let index_in = (hash >> 40) & sh.shard_mask;
            let shard = &sh.shards[index_in as usize];
            // Relaxed: ids need only be unique, and larger than the limit
            // of a `drop_subtree` that began before this insert, which
            // coherence of the shard's counter gives (its load is Relaxed
            // too).
            let number = shard.next_id.fetch_add(1, Ordering::Relaxed);
            let id = (number << sh.shard_mask.count_ones()) | index_in;
            let negative = payload.is_none();
            let initial = if parent_live { 1 } else { 1 | UNHASHED };
            // Written straight into its allocation, not built on the stack
            // and copied there.
            // SAFETY: a fresh block for a node, ours alone; the node is
            // freed only by its killer, which needs a reference we hold.
            let node: &Node<T> = unsafe {
                (*Node::block().as_ptr()).write(Node::new(id, hash, pnode.id, &probe, pnode, payload, initial))
            };
            if parent_live {
                // SAFETY: we hold the bucket lock, the node is new (alive, in
                // no chain) and its key hashes to `index`.
                unsafe { sh.table.link_locked(index, node, &guard) };
            }
            if let Some(d) = replaced {
                // AcqRel: the single unhash transition; Release pairs with
                // the Acquire in `release_one`'s DEAD CAS (via the word's
                // modification order) and with the Acquire load of the bit in
                // `scan`, which then also sees the new node linked above.
                let first = d.node().count.fetch_or(UNHASHED, Ordering::AcqRel) & UNHASHED == 0;
                // SAFETY: we hold the lock of the bucket of the replaced
                // node's key (the same key as the new node's).
                unsafe { sh.table.unlink_locked(index, d.node(), &guard) };
                if first {
                    old = Some(d);
                } else {
                    release_later = Some(d);
                }
            }
            // SAFETY: the node is new (on no list) and its parent is `pnode`,
            // whose child lock we hold.
            unsafe { children.push_back(node) };
            pnode.get();
            shard.entries.fetch_add(1, Ordering::Relaxed);
            if negative {
                shard.negatives.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: the node was created with one reference, which is ours.
            (unsafe { self.counted(node) }, parent_live)
        };
        let (new, hashed) = new;
        if hashed {
            enlist_new(sh, new.node());
        }
        drop(release_later);
        sh.counters.add(Event::Insert, 1);
        if let Some(old) = old {
            sh.counters.add(Event::Dropped, 1);
            self.drop_subtree(&old, |_| true);
        }
        // Under the insert's pin: a second pin for the pruner cost about 55
        // instructions a batch.
        self.enforce_capacity((new.node().id & sh.shard_mask) as usize, &guard);
        drop(guard);
        new
    }

    /// Unhashes the entry `d` (if nobody did yet) and unlinks it from its
    /// chain. Returns whether this call unhashed it.
    fn unhash(&self, d: &Dentry<T>) -> bool {
        // AcqRel: the single unhash transition, see `insert_inner`.
        if d.node().count.fetch_or(UNHASHED, Ordering::AcqRel) & UNHASHED != 0 {
            return false;
        }
        let guard = epoch::pin();
        self.sh().table.unlink(d.node(), &guard);
        true
    }

    /// Unhashes the entry for `name` under `parent` and its cached subtree
    /// (unlink, rmdir). Returns whether an entry (positive or negative) was
    /// cached.
    pub fn remove(&self, parent: &Dentry<T>, name: &[u8]) -> bool {
        self.own(parent);
        let sh = self.sh();
        let pid = parent.node().id;
        let probe = Probe::new(name);
        let hash = sh.table.hash_probe(parent.node().hash_parent(), &probe);
        loop {
            let found = {
                let guard = epoch::pin();
                match self.find_live(pid, &probe, hash, &guard) {
                    // SAFETY: `try_get` took the reference.
                    Some(n) if n.try_get(true) => Some(unsafe { self.counted(n) }),
                    Some(_) => continue,
                    None => None,
                }
            };
            let Some(d) = found else { return false };
            if !self.unhash(&d) {
                // Someone else unhashed it first, perhaps a replacement that
                // already linked a new entry for the name: look again.
                spin_loop();
                continue;
            }
            sh.counters.add(Event::Dropped, 1);
            self.drop_subtree(&d, |_| true);
            return true;
        }
    }

    /// Moves the entry `old_name` under `old_parent` to `new_name` under
    /// `new_parent`, with its cached subtree; a cached target is unhashed
    /// (with its subtree). Returns false if no positive entry is cached at the
    /// old name (a cached negative one is removed), or if the move would put
    /// a directory under itself. Call it after the filesystem renamed: unless
    /// the move is refused as a directory under itself, whatever is cached at
    /// the new name (a stale positive entry, or a negative one that would now
    /// hide the renamed file) is unhashed even when the source is not cached.
    pub fn rename(&self, old_parent: &Dentry<T>, old_name: &[u8], new_parent: &Dentry<T>, new_name: &[u8]) -> bool {
        self.own(old_parent);
        self.own(new_parent);
        let mut cleanup = Vec::new();
        let moved = {
            let _rename = self.sh().rename_lock.lock();
            self.rename_locked(old_parent, old_name, new_parent, new_name, &mut cleanup)
        };
        // Subtree drops take the rename lock themselves when renames keep
        // interfering, so they run after it is released.
        for d in cleanup {
            self.drop_subtree(&d, |_| true);
        }
        moved
    }

    fn rename_locked(
        &self,
        op: &Dentry<T>,
        old_name: &[u8],
        np: &Dentry<T>,
        new_name: &[u8],
        cleanup: &mut Vec<Dentry<T>>,
    ) -> bool {
        let sh = self.sh();
        let guard = epoch::pin();
        let (opn, npn) = (op.node(), np.node());
        let old_probe = Probe::new(old_name);
        let old_hash = sh.table.hash_probe(opn.hash_parent(), &old_probe);
        let x = match self.find_live(opn.id, &old_probe, old_hash, &guard) {
            // SAFETY: `try_get` took the reference.
            Some(n) if n.try_get(true) => unsafe { self.counted(n) },
            _ => {
                // The source is not cached, but the name it went to now
                // names it: whatever is cached there is stale.
                self.unhash_name(np, new_name, cleanup);
                return false;
            }
        };
        if x.is_negative() {
            if self.unhash(&x) {
                sh.counters.add(Event::Dropped, 1);
                cleanup.push(x);
            }
            self.unhash_name(np, new_name, cleanup);
            return false;
        }
        if opn.id == npn.id && old_name == new_name {
            return true;
        }
        let xn = x.node();
        // Refuse to move a directory under itself. Parents change only under
        // the rename lock, which we hold.
        let mut a: *const Node<T> = npn;
        while !a.is_null() {
            if ptr::eq(a, xn) {
                return false;
            }
            // SAFETY: `np` is counted and every node holds a reference on its
            // parent, so the whole ancestor chain is alive.
            a = unsafe { (*a).parent.load(Ordering::Relaxed) };
        }
        if !ptr::eq(xn.parent.load(Ordering::Relaxed), opn) {
            return false;
        }
        let new_hash = sh.table.hash(npn.hash_parent(), new_name);
        let same_parent = ptr::eq(opn, npn);
        // Child-map locks: by id when there are two (not by address: loom
        // needs every execution of a model to take the same branches).
        let (mut old_children, mut new_children) = if same_parent {
            (ChildGuard::lock(opn), None)
        } else if opn.id < npn.id {
            let o = ChildGuard::lock(opn);
            (o, Some(ChildGuard::lock(npn)))
        } else {
            let n = ChildGuard::lock(npn);
            (ChildGuard::lock(opn), Some(n))
        };
        if xn.is_unhashed() {
            // Dropped meanwhile: nothing to move, but the target is stale.
            drop(new_children);
            drop(old_children);
            self.unhash_name(np, new_name, cleanup);
            return false;
        }
        if npn.is_unhashed() {
            // Moving into a dropped directory: the entry leaves the cache.
            drop(new_children);
            drop(old_children);
            if self.unhash(&x) {
                sh.counters.add(Event::Dropped, 1);
                cleanup.push(x);
            }
            return true;
        }
        let (oi, ni) = (sh.table.index(old_hash), sh.table.index(new_hash));
        let (first, second) = (oi.min(ni), oi.max(ni));
        let _b1 = sh.table.lock(first);
        let _b2 = (first != second).then(|| sh.table.lock(second));
        // AcqRel: makes the count odd before the target is unhashed and the
        // node's links change, so the whole move, the target's unhash
        // included, is one step for lookups (the kernel's `d_move` drops the
        // target inside its `rename_lock` write section too). The Release
        // stores of the target's UNHASHED bit, the new key and `next` below
        // carry the odd count to any reader that sees them (paired with the
        // Acquire loads in `scan` and the re-check in `find_live`); the
        // Acquire side orders it with the read-modify-writes of
        // `drop_subtree`.
        sh.rename_seq.fetch_add(1, Ordering::AcqRel);
        if let Some(t) = sh
            .table
            .scan_locked(ni, new_hash, npn.id, &Probe::new(new_name), &guard)
            && t.try_get(false)
        {
            // SAFETY: `try_get` took the reference.
            let t = unsafe { self.counted(t) };
            // AcqRel: the single unhash transition, see `insert_inner`; its
            // Release half also carries the odd rename count to a reader that
            // skips `t` because it sees the bit (Acquire in `scan`).
            if t.node().count.fetch_or(UNHASHED, Ordering::AcqRel) & UNHASHED == 0 {
                sh.counters.add(Event::Dropped, 1);
            }
            // SAFETY: we hold the lock of the bucket of `t`'s key.
            unsafe { sh.table.unlink_locked(ni, t.node(), &guard) };
            cleanup.push(t);
        }
        // SAFETY: we hold the lock of bucket `oi`, the bucket of x's key.
        unsafe { sh.table.unlink_locked(oi, xn, &guard) };
        // The new key, as one write section of the node's sequence count
        // (inside the odd global window, which the protocol needs).
        // SAFETY: we hold the rename lock, the locks of buckets `oi` and
        // `ni`, and made the global count odd above.
        unsafe { xn.set_key(new_hash, npn.id, new_name, &guard) };
        // SAFETY: we hold the lock of bucket `ni`, x is in no chain, and its
        // new key hashes to `ni`.
        unsafe { sh.table.link_locked(ni, xn, &guard) };
        // AcqRel: ends the move; Release pairs with the Acquire loads that
        // start `find_live` and `walk`.
        sh.rename_seq.fetch_add(1, Ordering::AcqRel);
        drop(_b2);
        drop(_b1);
        if let Some(new_children) = new_children.as_mut() {
            // SAFETY: x is alive (counted) and on its parent `opn`'s list
            // (checked above under the rename lock); we hold both child
            // locks, and set x's parent to `npn` below before releasing them.
            unsafe {
                old_children.remove(xn);
                new_children.push_back(xn);
            }
            npn.get();
            // Release: publishes the parent pointer for `Dentry::parent`;
            // pairs with its Acquire load.
            xn.parent.store(ptr::from_ref(npn).cast_mut(), Ordering::Release);
        }
        drop(new_children);
        drop(old_children);
        if !same_parent {
            // The moved entry's reference on its old parent, taken when it was
            // inserted (or moved) there.
            put_node(self.shared, NonNull::from(opn), true);
        }
        true
    }

    /// Unhashes whatever is cached at `name` under `parent` (positive or
    /// negative), handing it to `cleanup` for its subtree; for a rename that
    /// moves nothing cached.
    fn unhash_name(&self, parent: &Dentry<T>, name: &[u8], cleanup: &mut Vec<Dentry<T>>) {
        let found = {
            let guard = epoch::pin();
            let pid = parent.node().id;
            let probe = Probe::new(name);
            let hash = self.sh().table.hash_probe(parent.node().hash_parent(), &probe);
            match self.find_live(pid, &probe, hash, &guard) {
                // SAFETY: `try_get` took the reference.
                Some(n) if n.try_get(true) => Some(unsafe { self.counted(n) }),
                _ => None,
            }
        };
        if let Some(t) = found
            && self.unhash(&t)
        {
            self.sh().counters.add(Event::Dropped, 1);
            cleanup.push(t);
        }
    }

    /// Resolves `components` one after another from `start` under a single
    /// epoch pin, taking a reference only on the result (seed 000 §7, "fast
    /// walk"). Components are plain names; `.` and `..` are the caller's
    /// business. A walk that raced with a rename is retried, so the result is
    /// a path that existed at one moment.
    ///
    /// The components' iterator is cloned for a retry, so a walk needs no
    /// copy of them (an allocation per walk cost about a tenth of an
    /// eight-component walk's time).
    pub fn walk<'a, I>(&self, start: &Dentry<T>, components: I) -> Walk<T>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        self.own(start);
        let comps = components.into_iter();
        let sh = self.sh();
        let guard = epoch::pin();
        'retry: loop {
            // Acquire: pairs with the Release increment that ends a rename.
            let seq = sh.rename_seq.load(Ordering::Acquire);
            if seq & 1 == 1 {
                spin_loop();
                continue;
            }
            let mut cur: &Node<T> = start.node();
            let mut hits = 0;
            let mut end = None;
            for (i, comp) in comps.clone().enumerate() {
                let probe = Probe::new(comp);
                // Hashed with `cur`'s address, which the chain link to it
                // gave before `cur`'s own line arrived: the next bucket's
                // load need not wait for the node's (see `hash_parent`).
                let hash = sh.table.hash_probe(cur.hash_parent(), &probe);
                match self.find_live_inlined::<true>(cur.id, &probe, hash, &guard) {
                    Some(n) if n.is_negative() => {
                        n.mark_referenced();
                        end = Some((i, true));
                        break;
                    }
                    Some(n) => {
                        n.mark_referenced();
                        hits += 1;
                        cur = n;
                    }
                    None => {
                        end = Some((i, false));
                        break;
                    }
                }
            }
            // Acquire: pairs with the rename increments; a path that a rename
            // changed under us is walked again.
            if sh.rename_seq.load(Ordering::Acquire) != seq {
                continue 'retry;
            }
            let counted = if ptr::eq(cur, start.node()) {
                start.clone()
            } else if cur.try_get(true) {
                // SAFETY: `try_get` took the reference.
                unsafe { self.counted(cur) }
            } else {
                // The entry was unhashed since we passed it: walk again.
                continue 'retry;
            };
            sh.counters.add(Event::Hit, hits);
            return match end {
                None => Walk::Found(counted),
                Some((consumed, true)) => {
                    sh.counters.add(Event::NegativeHit, 1);
                    Walk::Negative {
                        parent: counted,
                        consumed,
                    }
                }
                Some((consumed, false)) => {
                    sh.counters.add(Event::Miss, 1);
                    Walk::Miss {
                        deepest: counted,
                        consumed,
                    }
                }
            };
        }
    }

    /// The rename count: it moves with every rename in the cache (twice:
    /// odd while one runs). Read with a read-modify-write, which reads the
    /// latest value in its modification order, without waiting; a caller
    /// that sees the same count twice knows no rename began in between.
    pub fn renames(&self) -> usize {
        // AcqRel: as in `seq_rmw`, paired with the renames' increments.
        self.sh().rename_seq.fetch_add(0, Ordering::AcqRel)
    }

    /// Reads the rename count with a read-modify-write, which always reads
    /// the latest value in its modification order; waits while it is odd.
    fn seq_rmw(&self) -> usize {
        loop {
            // AcqRel: orders this pass against the increments of every rename
            // (they are read-modify-writes of the same word): either a rename
            // is entirely before this read and its effects are visible, or it
            // comes after and sees everything the pass did before.
            let s = self.sh().rename_seq.fetch_add(0, Ordering::AcqRel);
            if s & 1 == 0 {
                return s;
            }
            spin_loop();
        }
    }

    /// Unhashes every cached entry below `dir` (not `dir` itself) for which
    /// `filter` returns true; negative entries are always dropped. Works in
    /// batches of `prune_batch` children, never holding a lock across
    /// batches, and restarts if a rename interferes. After it returns, no
    /// lookup under `dir` hits an entry that existed before the call, except
    /// those the filter kept.
    ///
    /// An entry that a concurrent rename moves out of the subtree just after
    /// the walk collected it may still be dropped (at its new place). That
    /// costs a later miss, never a stale hit.
    pub fn drop_subtree(&self, dir: &Dentry<T>, mut filter: impl FnMut(&T) -> bool) -> DropStats {
        self.drop_subtree_with(dir, |p| if filter(p) { Verdict::Drop } else { Verdict::Keep })
    }

    /// [`drop_subtree`](Self::drop_subtree) with a filter that can also
    /// fence an entry off ([`Verdict::Fence`]): it is kept, and nothing
    /// below it is walked, asked about, dropped or counted (negative
    /// entries below it included). A caller that may drop only some of a
    /// tree (a user's drop of a directory holding another user's private
    /// one) thus neither touches nor learns what lies below the entries it
    /// may not enter. A fenced entry below one the walk unhashed is dropped
    /// anyway, as a kept one is: a caller that must keep it keeps the
    /// entries above it too ([`drop_subtree_under`](Self::drop_subtree_under)
    /// tells the filter each entry's parent, so that a first pass that
    /// drops nothing can find them).
    pub fn drop_subtree_with(&self, dir: &Dentry<T>, mut filter: impl FnMut(&T) -> Verdict) -> DropStats {
        self.drop_subtree_under(dir, |p, _| filter(p))
    }

    /// [`drop_subtree_with`](Self::drop_subtree_with) whose filter is also
    /// given the entry's parent's payload (`None` for a child of a `dir`
    /// that has none).
    pub fn drop_subtree_under(&self, dir: &Dentry<T>, filter: impl FnMut(&T, Option<&T>) -> Verdict) -> DropStats {
        self.drop_subtree_visiting(dir, filter, |_| {})
    }

    /// [`drop_subtree_under`](Self::drop_subtree_under) that also shows
    /// `gone` the payload of every entry it drops without asking the filter:
    /// those below an entry the walk unhashed (and any found unhashed
    /// already), so that a caller that keeps state for its payloads can
    /// drop that too. The filter and `gone` together see every payload the
    /// walk drops (a payload may be shown twice if a rename moves its
    /// entry during the walk, which then makes another pass).
    pub fn drop_subtree_visiting(
        &self,
        dir: &Dentry<T>,
        mut filter: impl FnMut(&T, Option<&T>) -> Verdict,
        mut gone: impl FnMut(&T),
    ) -> DropStats {
        self.own(dir);
        let sh = self.sh();
        // Entries whose insertion happened before this call have smaller ids;
        // entries inserted during the call are left alone, which bounds the
        // work.
        let limits = sh.id_limits();
        let mut stats = DropStats::default();
        let mut attempt = 0;
        loop {
            let locked = (attempt >= RESTARTS_BEFORE_LOCK).then(|| sh.rename_lock.lock());
            let seq = self.seq_rmw();
            let mut skipped = 0;
            if self.drop_pass(
                dir,
                &limits,
                seq,
                locked.is_some(),
                &mut filter,
                &mut gone,
                &mut stats,
                &mut skipped,
            ) {
                stats.skipped = skipped;
                break;
            }
            attempt += 1;
        }
        // The freed entries' payloads go now, not whenever this thread
        // next frees 64 more (see `put_node`).
        flush_deferred();
        sh.counters.add(Event::Dropped, stats.dropped + stats.busy);
        stats
    }

    #[allow(clippy::too_many_arguments)]
    fn drop_pass(
        &self,
        dir: &Dentry<T>,
        limits: &[u64; MAX_SHARDS],
        seq: usize,
        locked: bool,
        filter: &mut impl FnMut(&T, Option<&T>) -> Verdict,
        gone: &mut impl FnMut(&T),
        stats: &mut DropStats,
        skipped: &mut u64,
    ) -> bool {
        /// Where the walk of a node's children stands.
        enum Cursor<T: Send + Sync + 'static> {
            /// Not started.
            Start,
            /// Resume at this child, the first not looked at yet (counted,
            /// so it stays on the list unless a rename moves it, which is
            /// checked). Not one already in a batch: a reference held on
            /// such a child would make it count as busy when its own frame
            /// releases it.
            At(Dentry<T>),
            /// Every child looked at.
            Done,
        }
        struct Frame<T: Send + Sync + 'static> {
            node: Dentry<T>,
            cursor: Cursor<T>,
            /// Children inserted after the call (by `limits`) are passed
            /// over.
            bounded: bool,
            /// This pass unhashed the node and owes the count.
            dropping: bool,
        }
        // Under a node that is unhashed no child can be added any more (insert
        // and rename check the parent under its child lock), so all of its
        // children are walked, however new: then no node is left hashed under
        // an unhashed parent. Under a node that stays cached (`dir`, or one the
        // filter kept) only children older than the call are, which bounds
        // the walk while inserts go on.
        let bounded = |d: &Dentry<T>| d.is_hashed();
        let mask = self.sh().shard_mask;
        let before_call = |id: u64| id < limits[(id & mask) as usize];
        let finish = |f: Frame<T>, stats: &mut DropStats| {
            if let Cursor::At(c) = f.cursor {
                c.release_batched();
            }
            if f.dropping {
                if f.node.release_batched() {
                    stats.dropped += 1;
                } else {
                    stats.busy += 1;
                }
            }
        };
        let batch_size = self.sh().config.prune_batch;
        let mut stack = vec![Frame {
            bounded: bounded(dir),
            node: dir.clone(),
            cursor: Cursor::Start,
            dropping: false,
        }];
        let mut batch = Vec::with_capacity(batch_size);
        let complete = loop {
            let Some(top) = stack.last_mut() else {
                // The final check: a rename that changed the tree after our
                // last look must make us walk again.
                break locked || self.seq_rmw() == seq;
            };
            if !matches!(top.cursor, Cursor::Done) {
                let children = ChildGuard::lock(top.node.node());
                let mut c = match &top.cursor {
                    Cursor::Start => children.first(),
                    // A rename that moved the cursor's child to another
                    // directory since the last batch (its parent changes
                    // only under this lock) makes the pass start again, as
                    // the rename count below would.
                    Cursor::At(d) if !ptr::eq(d.node().parent.load(Ordering::Relaxed), top.node.node()) => {
                        break false;
                    }
                    Cursor::At(d) => d.node(),
                    Cursor::Done => ptr::null(),
                };
                while !c.is_null() && batch.len() < batch_size {
                    // SAFETY: a node on a list is alive: its killer takes it
                    // off under this lock before freeing it.
                    let child = unsafe { &*c };
                    if (!top.bounded || before_call(child.id)) && child.try_get(false) {
                        // SAFETY: `try_get` took the reference.
                        batch.push(unsafe { self.counted(child) });
                    }
                    // SAFETY: `child` is on this list and alive.
                    c = unsafe { children.next(child) };
                }
                // The next cursor: the first child not looked at that can
                // be counted (one being freed is passed over: it is out of
                // the cache already). The old cursor is released after the
                // lock: releasing can free a node, which takes this lock.
                let next = loop {
                    // SAFETY: as above.
                    let Some(child) = (unsafe { c.as_ref() }) else {
                        break Cursor::Done;
                    };
                    if child.try_get(false) {
                        // SAFETY: `try_get` took the reference.
                        break Cursor::At(unsafe { self.counted(child) });
                    }
                    // SAFETY: as above.
                    c = unsafe { children.next(child) };
                };
                let old = std::mem::replace(&mut top.cursor, next);
                drop(children);
                if let Cursor::At(old) = old {
                    old.release_batched();
                }
            }
            if batch.is_empty() {
                let f = stack.pop().expect("the stack has a top");
                finish(f, stats);
                continue;
            }
            // Everything below an unhashed node goes, whatever the filter says:
            // it is unreachable by lookups from `dir` already, and must not
            // stay hashed under an unhashed parent.
            let parent_gone = !top.node.is_hashed();
            // The batch's parent, held while its children are pushed above it.
            let parent = top.node.clone();
            for child in batch.drain(..).rev() {
                let verdict = if parent_gone || !child.is_hashed() {
                    if let Some(p) = child.payload() {
                        gone(p);
                    }
                    Verdict::Drop
                } else {
                    child.payload().map_or(Verdict::Drop, |p| filter(p, parent.payload()))
                };
                let dropping = match verdict {
                    Verdict::Drop => self.unhash(&child),
                    Verdict::Keep => {
                        *skipped += 1;
                        false
                    }
                    Verdict::Fence => {
                        // Kept, and not walked: its reference goes now.
                        *skipped += 1;
                        child.release_batched();
                        continue;
                    }
                };
                stack.push(Frame {
                    bounded: bounded(&child),
                    node: child,
                    cursor: Cursor::Start,
                    dropping,
                });
            }
            if !locked && self.seq_rmw() != seq {
                break false;
            }
        };
        while let Some(f) = stack.pop() {
            finish(f, stats);
        }
        complete
    }

    /// Frees up to `max` unused entries from the LRU lists (negative entries
    /// first). Returns how many were freed.
    pub fn prune(&self, max: usize) -> usize {
        let guard = epoch::pin();
        let n = self.prune_from(0, max, &guard);
        // The caller asked for the memory: every freed payload goes now.
        sync::flush_deferred(&guard);
        n
    }

    /// `prune`, taking from the LRU shards in turn from `shard` on.
    fn prune_from(&self, shard: usize, max: usize, guard: &Guard) -> usize {
        let n = self.prune_shards(shard, true, max, guard);
        n + self.prune_shards(shard, false, max - n, guard)
    }

    /// Prunes one list (or pair of queues) of each LRU shard in turn, from
    /// `shard` on, until `want` are freed or every shard was asked.
    fn prune_shards(&self, shard: usize, negative: bool, want: usize, guard: &Guard) -> usize {
        let shards = self.sh().shards.len();
        let mut n = 0;
        for i in 0..shards {
            if n >= want {
                break;
            }
            n += self.prune_list((shard + i) % shards, negative, want - n, guard);
        }
        n
    }

    /// Prunes shard `shard` (the new entry's) if the insert put it over its
    /// share of a bound, by its share of `prune_batch`: a whole batch out of
    /// a quarter of the entries took them deeper into that shard's queues
    /// than a global queue would have gone (at four shards, the churn
    /// bench's hit ratio was 0.798 with whole batches, 0.799 with shares,
    /// as with one shard).
    fn enforce_capacity(&self, shard: usize, guard: &Guard) {
        let sh = self.sh();
        let c = &sh.config;
        let s = &sh.shards[shard];
        let n = sh.shards.len();
        let batch = (c.prune_batch / n).max(1);
        // Relaxed: a bound, checked again by the next insert.
        if s.negatives.load(Ordering::Relaxed) > c.max_negative / n {
            self.prune_list(shard, true, batch, guard);
        }
        if s.entries.load(Ordering::Relaxed) > c.max_entries / n {
            // Negatives first, if the shard has any: a pass over an empty
            // negative list still pinned, allocated its victims' vector and
            // took the LRU lock, once per positive batch (in the churn bench,
            // which caches no negatives, about 380 instructions each).
            let k = if s.negatives.load(Ordering::Relaxed) > 0 {
                self.prune_list(shard, true, batch, guard)
            } else {
                0
            };
            self.prune_list(shard, false, batch - k, guard);
        }
    }

    /// One pass of the pruner over the negative list or the two queues of
    /// the eviction policy (`policy.rs`: S3-FIFO, lazy as seed 000 §6.2's
    /// LRU): in-use entries are taken off, entries hit since the last pass
    /// get another one (or move from probation to the main queue), unused
    /// ones without hits are evicted. Scans each entry at most
    /// `MAX_FREQ + 2` times per call.
    fn prune_list(&self, shard: usize, negative: bool, want: usize, guard: &Guard) -> usize {
        if want == 0 {
            return 0;
        }
        let sh = self.sh();
        let mut victims = Vec::with_capacity(want.min(Config::MAX_BATCH));
        sh.shards[shard].lru.lock().select(negative, want, &mut victims);
        let n = victims.len();
        kill_victims(self.shared, victims, guard);
        // As in `drop_subtree`, the freed payloads go soon, not whenever this
        // thread next frees 64 more (see `put_node`); but a flush per shard's
        // share of a batch cost more than the batch, so one per 64 frees.
        sync::flush_deferred_every(guard, n, 64);
        sh.counters.add(Event::Eviction, n as u64);
        n
    }

    /// The number of entries (hashed, or unhashed but still referenced),
    /// the root excluded.
    pub fn len(&self) -> usize {
        self.sh().shards.iter().map(|s| s.entries.load(Ordering::Relaxed)).sum()
    }

    /// Whether no entry but the root is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of negative entries.
    pub fn negative_len(&self) -> usize {
        self.sh()
            .shards
            .iter()
            .map(|s| s.negatives.load(Ordering::Relaxed))
            .sum()
    }

    /// The number of entries on the LRU lists (unused, evictable).
    pub fn lru_len(&self) -> usize {
        self.sh().shards.iter().map(|s| s.lru.lock().len()).sum()
    }

    /// Panics unless every LRU list holds exactly its nodes, each listed,
    /// alive and on the list its sign and queue byte name (see
    /// `policy::Lru::assert_consistent`). For tests and loom models.
    #[doc(hidden)]
    pub fn assert_lists_consistent(&self) {
        for shard in self.sh().shards.iter() {
            shard.lru.lock().assert_consistent();
        }
    }

    /// The lengths of the eviction policy's lists: the probation queue, the
    /// main queue and the negative list (for tests).
    #[doc(hidden)]
    pub fn policy_lens(&self) -> (usize, usize, usize) {
        self.sh().shards.iter().fold((0, 0, 0), |(s, m, n), shard| {
            let (a, b, c) = shard.lru.lock().lens();
            (s + a, m + b, n + c)
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let sh = self.sh();
        let c = &sh.counters;
        Stats {
            hits: c.sum(Event::Hit),
            misses: c.sum(Event::Miss),
            negative_hits: c.sum(Event::NegativeHit),
            inserts: c.sum(Event::Insert),
            evictions: c.sum(Event::Eviction),
            dropped: c.sum(Event::Dropped),
            entries: self.len() as u64,
            negative_entries: self.negative_len() as u64,
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Dcache<T> {
    fn drop(&mut self) {
        // SAFETY: `self.root` is not used again.
        let root = unsafe { ManuallyDrop::take(&mut self.root) };
        self.drop_subtree(&root, |_| true);
        // AcqRel: the root's unhash transition (it is in no chain); from here
        // its last reference frees it and the shared state.
        root.node().count.fetch_or(UNHASHED, Ordering::AcqRel);
        drop(root);
    }
}

impl<T: Send + Sync + 'static> fmt::Debug for Dcache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dcache")
            .field("config", self.config())
            .field("stats", &self.stats())
            .finish()
    }
}

/// A pinned view of the cache for lookups that take no reference at all:
/// the returned [`DentryRef`]s are valid while the `Pinned` lives. Keep it
/// short-lived: while a thread is pinned, no memory freed by the cache can
/// be reclaimed.
pub struct Pinned<'c, T: Send + Sync + 'static> {
    cache: &'c Dcache<T>,
    guard: Guard,
}

impl<'c, T: Send + Sync + 'static> Pinned<'c, T> {
    fn lookup_under(&self, parent: &Node<T>, name: &[u8]) -> Option<DentryRef<'_, T>> {
        let sh = self.cache.sh();
        let probe = Probe::new(name);
        let hash = sh.table.hash_probe(parent.hash_parent(), &probe);
        match self.cache.find_live(parent.id, &probe, hash, &self.guard) {
            Some(n) => {
                sh.record_hit(n);
                Some(DentryRef { node: n, pinned: self })
            }
            None => {
                sh.counters.add(Event::Miss, 1);
                None
            }
        }
    }

    /// Looks `name` up under a counted `parent`; `None` is a miss.
    pub fn lookup(&self, parent: &Dentry<T>, name: &[u8]) -> Option<DentryRef<'_, T>> {
        self.cache.own(parent);
        self.lookup_under(parent.node(), name)
    }

    /// Looks `name` up under a pinned `parent`.
    pub fn lookup_in(&self, parent: DentryRef<'_, T>, name: &[u8]) -> Option<DentryRef<'_, T>> {
        assert!(
            ptr::eq(parent.pinned.cache, self.cache),
            "dcache: a reference from another cache"
        );
        self.lookup_under(parent.node, name)
    }

    /// The root entry, borrowed.
    pub fn root(&self) -> DentryRef<'_, T> {
        DentryRef {
            node: self.cache.root.node(),
            pinned: self,
        }
    }
}

/// A dentry borrowed under a [`Pinned`]: no reference count is held; the
/// memory stays valid while the pin lasts, though the entry may be unhashed
/// meanwhile.
pub struct DentryRef<'p, T: Send + Sync + 'static> {
    node: &'p Node<T>,
    pinned: &'p Pinned<'p, T>,
}

impl<T: Send + Sync + 'static> Clone for DentryRef<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Send + Sync + 'static> Copy for DentryRef<'_, T> {}

impl<'p, T: Send + Sync + 'static> DentryRef<'p, T> {
    /// The payload, or `None` for a negative entry.
    pub fn payload(&self) -> Option<&'p T> {
        self.node.payload.as_ref()
    }

    /// Whether the entry caches "does not exist".
    pub fn is_negative(&self) -> bool {
        self.node.is_negative()
    }

    /// Whether the entry is still in the cache.
    pub fn is_hashed(&self) -> bool {
        !self.node.is_unhashed()
    }

    /// The entry's unique id.
    pub fn id(&self) -> u64 {
        self.node.id
    }

    /// The entry's current name (rename changes it in place, so it is
    /// copied out).
    pub fn name(&self) -> Vec<u8> {
        self.node.name_bytes(&self.pinned.guard)
    }

    /// Takes a counted handle, unless the entry was unhashed meanwhile.
    pub fn to_dentry(&self) -> Option<Dentry<T>> {
        // SAFETY: `try_get` took the reference.
        self.node
            .try_get(true)
            .then(|| unsafe { self.pinned.cache.counted(self.node) })
    }
}
