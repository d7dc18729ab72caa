//! A sharded counter: each thread adds to a cache-padded cell of its own,
//! and a read sums the cells. Used for the tree length and the page-cache
//! statistics, which every operation updates: a single shared counter
//! would bounce one cache line between all writers (the cost seed 002, "A
//! Concurrent Pagecache", §3.2.2 avoids by making `nr_pages` an atomic
//! rather than lock-protected; sharding goes one step further). A thread
//! that owns its cell (`sync::stats_shard`) adds with a plain load and
//! store: a read-modify-write is a full barrier on x86, and on a page-cache
//! hit it would keep the copy's loads and stores from overlapping the next
//! operation. Threads without a cell of their own share one more and add
//! with `fetch_add`.
//!
//! A read is not a snapshot: it is exact only when no thread is adding.

use crate::sync::{AtomicU64, CachePadded, OWNED_SHARDS, Ordering, stats_shard};

/// A counter that many threads update and few read.
pub(crate) enum Counter {
    /// Cache-padded cells: one per owned shard number, and the shared one.
    Sharded(Box<[CachePadded<AtomicU64>]>),
    /// One unpadded cell, for the many small structures (a per-inode tree)
    /// where sharded cells would cost more than the structure itself.
    Single(AtomicU64),
}

impl Counter {
    pub(crate) fn new() -> Self {
        Counter::Sharded(
            (0..=OWNED_SHARDS)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        )
    }

    /// A counter of one unpadded cell.
    pub(crate) fn single() -> Self {
        Counter::Single(AtomicU64::new(0))
    }

    /// Adds `delta` (two's complement, so negative deltas work).
    #[inline]
    pub(crate) fn add(&self, delta: i64) {
        let (cell, owned) = match self {
            Counter::Sharded(cells) => {
                let (shard, owned) = stats_shard();
                (&*cells[shard], owned)
            }
            Counter::Single(cell) => (cell, false),
        };
        // Relaxed: a statistic; no other memory is published through it.
        if owned {
            // This thread is the cell's only writer (see `stats_shard`).
            cell.store(
                cell.load(Ordering::Relaxed).wrapping_add(delta as u64),
                Ordering::Relaxed,
            );
        } else {
            cell.fetch_add(delta as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn incr(&self) {
        self.add(1);
    }

    /// The sum of the cells, clamped at zero for a momentarily negative sum
    /// (one thread's decrement seen before another's increment).
    pub(crate) fn get(&self) -> u64 {
        // Relaxed: a statistic.
        let sum = match self {
            Counter::Sharded(cells) => cells
                .iter()
                .fold(0u64, |acc, c| acc.wrapping_add(c.load(Ordering::Relaxed))),
            Counter::Single(cell) => cell.load(Ordering::Relaxed),
        };
        (sum as i64).max(0) as u64
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counter({})", self.get())
    }
}
