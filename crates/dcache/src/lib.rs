//! A concurrent directory-entry cache for user space: the Linux dcache's
//! designs (seed 000, "Scalability of the directory entry cache",
//! `../shared/seeds/000_816a3cdb25218f3e.txt`) as a library that knows
//! nothing of filesystems or I/O.
//!
//! A dentry maps (parent dentry, name) to a payload of the user's type `T`,
//! or to "does not exist" (a negative entry). Dentries form a tree: each
//! knows its parent and its cached children.
//!
//! ```
//! use dcache::{Config, Dcache, Lookup};
//!
//! let cache = Dcache::new(Config::default(), "root inode");
//! let root = cache.root();
//! let etc = cache.insert(&root, b"etc", Some("etc inode"));
//! cache.insert(&etc, b"passwd", Some("passwd inode"));
//! cache.insert(&etc, b"shadow", None); // cached "does not exist"
//! match cache.lookup(&etc, b"passwd") {
//!     Lookup::Positive(d) => assert_eq!(d.payload(), Some(&"passwd inode")),
//!     other => panic!("{other:?}"),
//! }
//! assert!(matches!(cache.lookup(&etc, b"shadow"), Lookup::Negative));
//! // `etc` is still held, so it is only unhashed; the other two are freed.
//! let dropped = cache.drop_subtree(&root, |_| true);
//! assert_eq!((dropped.dropped, dropped.busy), (2, 1));
//! assert!(!etc.is_hashed());
//! ```
//!
//! # Design
//!
//! - **Hash table** (`table.rs`): buckets keyed by (parent id, name), sized
//!   from `max_entries` (a power of two, half as many buckets as entries).
//!   Each bucket is a singly-linked chain with its own mutex for writers;
//!   readers walk chains lock-free under a crossbeam-epoch pin (seed 000 §3).
//!   Like the kernel's dentry, a node holds its key itself: the hash's low
//!   32 bits, the parent's id, and the name (inline up to 32 bytes; a longer
//!   one also has a heap copy), so a hit costs two dependent cache misses,
//!   the bucket and the node. Rename changes the key in place inside a
//!   write section of the node's sequence count (the kernel's `d_seq`),
//!   which lock-free readers re-check, so a reader never matches a torn key.
//! - **Nodes** (`node.rs`): one state word holds the reference count and the
//!   `DEAD`, `UNHASHED` and `ON_LRU` bits (like the kernel's lockref), so that
//!   every decision about "the last reference" is made on one atomic word.
//!   A child holds a reference on its parent, so a directory with cached
//!   children is never evicted and the root outlives everything.
//! - **Handles**: [`Dentry`] is a counted handle (clone increments, drop
//!   decrements); [`Pinned`]/[`DentryRef`] and [`Dcache::lookup_with`] borrow
//!   under an epoch pin and touch no count.
//! - **Lazy eviction** (`policy.rs`, `lru.rs`; seed 000 §6 for the
//!   laziness, S3-FIFO for the queues): unused hashed entries sit on
//!   intrusive lists: a probation and a main queue for positive entries, a
//!   CLOCK list for negatives, split into LRU shards with their own locks.
//!   An insert lists its entry at once (an entry in use may be listed: the
//!   pruner takes it off lazily).
//!   A hit only raises the entry's frequency byte, and only while it is
//!   below its maximum. Pruning takes in-use entries off, promotes or ages
//!   accessed ones, evicts the rest in batches of `prune_batch`.
//! - **Capacity**: inserting beyond `max_negative` negative entries prunes a
//!   batch of negatives; beyond `max_entries` entries prunes a batch
//!   (negatives first). Entries in use are never freed, so the bounds can be
//!   exceeded by entries that are referenced.
//! - **Rename** moves the node in place (its id and its address, and so its
//!   children's keys and the buckets they hash to, stay the same), bracketed by a global rename sequence count like the
//!   kernel's `rename_lock`; a lookup that misses re-checks the count.
//! - **Fast walk** (seed 000 §7): [`Dcache::walk`] resolves a whole path under
//!   one pin, taking a reference on the result only, and retries if a rename
//!   ran meanwhile.
//! - **Children** (`children.rs`): a directory's cached children are a list
//!   linked through the children themselves (the kernel's `d_children` and
//!   `d_sib`), under the directory's one-byte child lock.
//! - **Subtree drop**: [`Dcache::drop_subtree`] walks the cached subtree top
//!   down in batches (resuming each list at a child it holds counted),
//!   unhashing as it goes, and restarts when a rename interferes; after two
//!   restarts it holds the rename lock for a pass. Its filter may keep an
//!   entry, or fence it off ([`Dcache::drop_subtree_with`]: kept with
//!   everything below it, unwalked); what goes unasked below a dropped
//!   entry can be seen too ([`Dcache::drop_subtree_visiting`]).
//! - **Statistics** (`stats.rs`) are per-thread sharded counters; a thread
//!   that owns its shard adds with a plain load and store (no barrier on the
//!   hit path).
//! - **Memory**: nodes and the heap copies of long names are freed through crossbeam-epoch's
//!   default collector (the pruner's victims as one deferred function per
//!   batch); a thread keeps up to 1024 freed node blocks for its next
//!   inserts, and threads exchange half magazines through a small depot
//!   (`sync::alloc_block`, the kernel's dentry slab in small). The `Dcache` owns no collector of its own: the default
//!   collector's per-thread handles make a pin a thread-local operation, and
//!   under loom crossbeam builds the default collector per model execution,
//!   so models still start from a clean collector. A payload `T` is dropped
//!   when the epoch destructor of its node runs, which may be late or (at
//!   process exit) never: **never make a payload's `Drop` release an external
//!   resource** (a file descriptor, a lock); the payload's owner decides when
//!   such resources go.
//!
//! # Invariants
//!
//! - A node is freed only after it is `DEAD` (count 0, set by exactly one
//!   thread), unhashed, unlinked from its chain, off the LRU, off its
//!   parent's list of children, and has no children; and then only through
//!   a function deferred to the epoch collector (`Node::free`, which may
//!   keep the block for the thread's next insert), so pinned readers never
//!   see freed or reused memory.
//! - A hashed node with count 0 is on the LRU.
//! - Exactly one thread makes the `UNHASHED` transition of a node (and
//!   counts it); the bucket lock decides who unlinks it.
//! - Every cached child is on its parent's list of children and holds one
//!   reference on its parent; a node under an unhashed parent is never hashed.
//! - Lock order: rename lock → child locks (by node id) → bucket locks (by
//!   index) → one LRU shard's lock (a leaf).
//!
//! # Concurrency
//!
//! Readers (lookup, `lookup_with`, `Pinned::lookup`, walk) take no lock and
//! write nothing shared except the frequency byte of an entry whose
//! frequency is below its maximum, a count on the one entry they return a handle to, and their
//! thread's statistics shard. Writers lock one bucket (and the parent's child
//! lock) per insert; unhash locks one bucket; renames are serialised by the
//! rename lock. A lookup sees the state before or after any concurrent write.
//! Two inserts of one name serialise on the bucket lock and end with one
//! entry. Every protocol has a loom model in the `loom-tests` crate
//! (`tests/dcache.rs`).

//!
//! ## Memory ordering, in brief
//!
//! - *Publication*: a node is fully built before insert stores it at a chain
//!   head with Release; every chain link is loaded with Acquire, so a reader
//!   that reaches a node sees its key and payload.
//! - *Keys* (a seqlock per node, `node.rs`): rename stores the node's odd
//!   sequence count with Release, then a Release fence, the key fields
//!   (Relaxed), and the next even count with Release. A reader loads the
//!   count with Acquire, the fields Relaxed, then an Acquire fence and the
//!   count again: only an unchanged even count makes a match. A key read
//!   torn or changing is a non-match, which the miss re-check covers.
//! - *Reclamation*: unlinking stores the predecessor's link with Release and
//!   leaves the node's own link alone; the node is handed to the
//!   collector (a deferred `Node::free`) only by its killer, after it left every structure, so a
//!   reader pinned before the unlink keeps valid memory.
//! - *Counts*: every decision about the last reference (free it, put it on
//!   the LRU, take it off) is a read-modify-write of the one state word, so
//!   the word's modification order settles races without fences. Decrements
//!   are Release and the transition to `DEAD` is Acquire (as in `Arc`).
//! - *Rename*: the count is made odd (AcqRel) before a cached target is
//!   unhashed and before the moved node's links change; the target's
//!   `UNHASHED` bit and the misleading link a reader could follow are stored
//!   with Release after that, as are the moved node's odd sequence count
//!   and (after a Release fence) its new key fields, so a reader that
//!   skipped the target, followed the link, or rejected the moved node on
//!   any of those values issues an Acquire fence before it re-checks the
//!   count after a miss, sees it changed, and retries: the target name is
//!   never missed mid-rename.
//! - *Replacement*: an insert that replaces an entry of the same key links
//!   the new node (Release) before it sets `UNHASHED` on the old one
//!   (AcqRel); a scan that skipped the old node (Acquire on the bit) rescans
//!   and finds the new one, so the name is never missed in between.
//! - *Subtree drop* reads the rename count with read-modify-writes at the
//!   start and end of a pass, which are totally ordered with the renames'
//!   increments: a rename either precedes the pass entirely (its effects are
//!   visible to it) or changes the count the pass re-reads.
//! - *Locks* order everything else: the bucket bit locks (Acquire
//!   compare-exchange, Release `fetch_and`, `table.rs`) the chain writers,
//!   parking_lot mutexes the child lists and the LRU lists.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod cache;
mod children;
mod lru;
mod node;
mod policy;
mod stats;
mod sync;
mod table;

#[cfg(test)]
mod tests;

pub use cache::{Dcache, Dentry, DentryRef, DropStats, Lookup, Pinned, Verdict, Walk};
pub use stats::Stats;

/// Whether threads keep the memory of freed entries for their next inserts
/// (on by default): each thread keeps up to 1024 blocks of the entry size,
/// and a process-wide depot up to 2048 more, the kernel's dentry slab in
/// small. Off, every freed entry goes back to
/// the global allocator at once, so that a memory checker such as
/// valgrind's memcheck sees each entry's end (a kept block hides a read of
/// a freed entry from it). Process-wide; for such checks only.
#[doc(hidden)]
pub fn keep_freed_entries(on: bool) {
    sync::set_keep_blocks(on);
}

/// Lets what this thread's removals freed be destroyed now (each entry's
/// payload dropped), rather than once enough later operations of the
/// process have moved the epoch on: flushes this thread's deferred frees to
/// the global queue and pins three times, each advancing the epoch as far
/// as no pinned thread holds it back and running what is old enough. A
/// removed entry is freed only after every reader that might see it has
/// unpinned (seed 000's grace period); an idle process has no readers to
/// end one, so payloads that hold resources (descriptors, which keep a
/// filesystem busy) would otherwise outlive their removal for as long as
/// the process stays idle. Entries freed by other threads and still in
/// their own (unflushed) deferred lists wait for those threads' next
/// operations.
pub fn quiesce() {
    for _ in 0..3 {
        sync::epoch::pin().flush();
    }
}

/// Capacity and batching of a [`Dcache`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The most entries (positive and negative, the root excluded) kept when
    /// some are unused; inserting beyond it prunes.
    pub max_entries: usize,
    /// The most negative entries kept; inserting beyond it prunes negatives.
    pub max_negative: usize,
    /// Entries pruned per capacity-triggered pass, and children handled per
    /// locked step of `drop_subtree` (clamped to `1..=MAX_BATCH`).
    pub prune_batch: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_entries: 1 << 18,
            max_negative: 1 << 16,
            prune_batch: 64,
        }
    }
}

impl Config {
    /// The largest batch: a batch is also how many children `drop_subtree`
    /// collects under one lock, so it bounds lock hold times.
    pub const MAX_BATCH: usize = 4096;

    /// `prune_batch` in `1..=MAX_BATCH`, and `max_negative` at most
    /// `max_entries`.
    fn normalized(mut self) -> Self {
        self.prune_batch = self.prune_batch.clamp(1, Self::MAX_BATCH);
        self.max_negative = self.max_negative.min(self.max_entries);
        self
    }
}
