//! Sharded event counters: hits, misses, negative hits, inserts, evictions,
//! drops.
//!
//! Seed 000 ("Scalability of the directory entry cache", §7) shows what one
//! globally written cache line does to lookups on many CPUs; a statistics
//! counter bumped by every hit would be exactly such a line. Each thread
//! counts in a cache-padded shard of its own (see `sync::stats_shard`): a
//! thread that owns its shard adds with a plain load and store, because a
//! read-modify-write is a full barrier on x86 and would keep a lookup's
//! cache misses from overlapping the next one's. Threads beyond
//! `OWNED_SHARDS` share one more shard and add with `fetch_add`. `Stats`
//! sums the shards on read. The counters are Relaxed: they order nothing
//! and a reader may see a sum that is a few events behind.

use crate::sync::{AtomicU64, CachePadded, OWNED_SHARDS, Ordering, stats_shard};

/// Which counter an event goes to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    Hit = 0,
    Miss = 1,
    NegativeHit = 2,
    Insert = 3,
    Eviction = 4,
    Dropped = 5,
}

const EVENTS: usize = 6;
/// The owned shards and the shared one.
const SHARDS: usize = OWNED_SHARDS + 1;

/// The shards of counters.
pub(crate) struct Counters {
    shards: Box<[CachePadded<[AtomicU64; EVENTS]>]>,
}

impl Counters {
    pub(crate) fn new() -> Self {
        let shards = (0..SHARDS)
            .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        Self { shards }
    }

    /// Counts `n` events of kind `event` in this thread's shard.
    #[inline]
    pub(crate) fn add(&self, event: Event, n: u64) {
        if n == 0 {
            return;
        }
        let (shard, owned) = stats_shard();
        let cell = &self.shards[shard][event as usize];
        // Relaxed: a statistic; it publishes nothing.
        if owned {
            // This thread is the shard's only writer (see `stats_shard`).
            cell.store(cell.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        } else {
            cell.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The sum over shards of one counter.
    pub(crate) fn sum(&self, event: Event) -> u64 {
        self.shards
            .iter()
            .map(|s| s[event as usize].load(Ordering::Relaxed))
            .sum()
    }
}

/// A snapshot of the cache's counters and sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups (and walk components) that found a positive entry.
    pub hits: u64,
    /// Lookups that found nothing cached.
    pub misses: u64,
    /// Lookups that found a negative entry.
    pub negative_hits: u64,
    /// Entries created by `insert`/`replace`.
    pub inserts: u64,
    /// Entries freed by pruning (capacity or `prune`).
    pub evictions: u64,
    /// Entries unhashed by `drop_subtree`, `remove`, `replace` and rename
    /// targets (whether freed at once or only unhashed because in use).
    pub dropped: u64,
    /// Entries allocated now (hashed or unhashed but still referenced),
    /// the root excluded.
    pub entries: u64,
    /// Negative entries among `entries`.
    pub negative_entries: u64,
}
