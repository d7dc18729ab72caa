//! A sharded counter: each thread adds to one of a few cache-padded cells
//! picked by a per-thread hint, and a read sums the cells. Used for the tree
//! length and the page-cache statistics, which every operation updates: a
//! single shared counter would bounce one cache line between all writers
//! (the cost seed 002, "A Concurrent Pagecache", §3.2.2 avoids by making
//! `nr_pages` an atomic rather than lock-protected; sharding goes one step
//! further).
//!
//! A read is not a snapshot: it is exact only when no thread is adding.

use crate::sync::{AtomicU64, CachePadded, Ordering, shard_hint};

#[cfg(not(rcufs_loom))]
const SHARDS: usize = 16; // a power of two
/// One cell under loom: fewer atomics, fewer branches to explore.
#[cfg(rcufs_loom)]
const SHARDS: usize = 1;

/// A counter that many threads update and few read.
pub(crate) enum Counter {
    /// Cache-padded cells, one picked per thread.
    Sharded(Box<[CachePadded<AtomicU64>]>),
    /// One unpadded cell, for the many small structures (a per-inode tree)
    /// where 16 padded cells would cost more than the structure itself.
    Single(AtomicU64),
}

impl Counter {
    pub(crate) fn new() -> Self {
        Counter::Sharded((0..SHARDS).map(|_| CachePadded::new(AtomicU64::new(0))).collect())
    }

    /// A counter of one unpadded cell.
    pub(crate) fn single() -> Self {
        Counter::Single(AtomicU64::new(0))
    }

    /// Adds `delta` (two's complement, so negative deltas work).
    pub(crate) fn add(&self, delta: i64) {
        let cell = match self {
            Counter::Sharded(cells) => &cells[shard_hint() & (SHARDS - 1)],
            Counter::Single(cell) => cell,
        };
        // Relaxed: a statistic; no other memory is published through it.
        cell.fetch_add(delta as u64, Ordering::Relaxed);
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
