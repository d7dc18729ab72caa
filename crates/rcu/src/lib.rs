//! The read side that the `dcache` and `pagecache` crates share: the calling
//! thread's participant in the epoch collector, pinned inline, and the
//! thread's statistics shard.
//!
//! Seed 000's dcache and seed 002's page cache both run their lookups as RCU
//! read-side critical sections; in user space those are crossbeam-epoch pins
//! of its global collector. A pin is the one thing every hit of either cache
//! does, so its cost is counted in every row of their benchmarks:
//!
//! - **One participant per thread for both crates.** Frees that one crate
//!   defers wait in the calling thread's bag of the collector until the bag
//!   is full or flushed, and a flush by either crate (the dcache's
//!   `quiesce`, after a drop) must push out what the other retired too: a
//!   mount retires page-cache folios and dcache entries on the same threads,
//!   and the folios are counted as freed when they are retired. So the two
//!   crates must pin the same participant, and a crate of its own is where
//!   that participant can live. [`flush`] is the drain for code outside the
//!   crates (tests, examples, benchmarks): `crossbeam_epoch::pin().flush()`
//!   flushes crossbeam's own participant, a different bag.
//! - **Pinned inline.** `crossbeam_epoch::pin` runs through a function that
//!   the compiler keeps out of line, because its slow path registers a
//!   participant: a call and its register saves on every lookup, 11.4 of
//!   485.2 instructions per operation of the churn bench (`churnprof`, by
//!   callgrind). Here the thread-local
//!   handle is read inline and only its slow path (a pin while the thread's
//!   thread-locals are being dropped) is out of line.
//! - **The statistics shard** ([`stats_shard`]): each thread owns one slot of
//!   every counter of both crates, so a hit counts with a plain load and
//!   store rather than a read-modify-write.
//!
//! Under `--cfg rcufs_loom` this crate is empty: the cache crates' `sync`
//! modules then give each structure a loom-built collector of its own and
//! count in one shared shard.

#![cfg_attr(rcufs_loom, allow(unused))]

#[cfg(not(rcufs_loom))]
pub use imp::*;

#[cfg(not(rcufs_loom))]
mod imp {
    use crossbeam_epoch::{Guard, LocalHandle};

    std::thread_local! {
        /// The calling thread's participant in crossbeam-epoch's global
        /// collector, the one both cache crates pin (crossbeam's own `pin`
        /// keeps another). Dropped when the thread exits, which hands its
        /// bag of deferred frees to the collector's global queue.
        static HANDLE: LocalHandle = crossbeam_epoch::default_collector().register();
    }

    /// Pins the calling thread in crossbeam-epoch's global collector, as
    /// `crossbeam_epoch::pin` does, through this crate's participant. The
    /// common case is inlined; while the thread's thread-locals are being
    /// dropped it falls back to crossbeam's own participant.
    #[inline]
    pub fn pin() -> Guard {
        match HANDLE.try_with(LocalHandle::pin) {
            Ok(guard) => guard,
            Err(_) => pin_late(),
        }
    }

    /// A pin while the thread's thread-locals are dropped.
    #[cold]
    #[inline(never)]
    fn pin_late() -> Guard {
        crossbeam_epoch::pin()
    }

    /// Hands the calling thread's deferred frees (both crates') to the
    /// collector's global queue and runs those whose grace period has
    /// passed: the drain for tests, examples and benchmarks. Frees become
    /// due only as every pinned thread moves on, so a caller waiting for
    /// one calls this in a loop.
    pub fn flush() {
        pin().flush();
    }

    /// Statistics shards a thread can own (see [`stats_shard`]).
    pub const OWNED_SHARDS: usize = 64;

    /// The statistics shard of the calling thread, and whether the thread
    /// owns it. A thread owns one of `OWNED_SHARDS` shard numbers from its
    /// first count until it exits (then the number is free for another
    /// thread); while it does, it is the only writer of that shard in every
    /// counter of both crates and may count with a plain load and store,
    /// which unlike a read-modify-write is no barrier on the hit path.
    /// Threads beyond those, and threads that count while their
    /// thread-locals are torn down, share shard `OWNED_SHARDS` and count
    /// with `fetch_add`.
    ///
    /// Inlined (the cache crates' callers are generic, so their code runs
    /// monomorphised in the user's crate, where a plain function of theirs
    /// could not be): the common case is one thread-local load and a test.
    /// Out of line, through a thread-local with a destructor, it was 8.9 of
    /// 494 instructions per operation of the churn bench (`churnprof`).
    #[inline]
    pub fn stats_shard() -> (usize, bool) {
        let i = match SHARD_NUMBER.with(std::cell::Cell::get) {
            0 => claim_shard(),
            n => n - 1,
        };
        (i, i < OWNED_SHARDS)
    }

    std::thread_local! {
        /// The calling thread's shard number plus one once it has one (0
        /// before), and `OWNED_SHARDS + 1` once it gave it back: read on
        /// every count, and without a destructor, so that reading it is one
        /// thread-local load (a thread-local with one, as the owner of the
        /// number in `claim_shard` is, is checked for being made or dropped
        /// on every access).
        static SHARD_NUMBER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// The first count of a thread (or one made while its thread-locals
    /// are dropped): claims a shard number for it, and records it in
    /// `SHARD_NUMBER`.
    #[cold]
    #[inline(never)]
    fn claim_shard() -> usize {
        use std::sync::atomic::{AtomicU64, Ordering};
        /// Bit `i` set: shard number `i` is free.
        static FREE: AtomicU64 = AtomicU64::new(u64::MAX);
        struct Owned(usize);
        impl Drop for Owned {
            fn drop(&mut self) {
                // Counts made while the thread's other thread-locals are
                // dropped go to the shared shard.
                SHARD_NUMBER.with(|n| n.set(OWNED_SHARDS + 1));
                if self.0 < OWNED_SHARDS {
                    // Release: the exiting owner's counts happen before the
                    // next owner's; pairs with the Acquire CAS below.
                    FREE.fetch_or(1 << self.0, Ordering::Release);
                }
            }
        }
        fn claim() -> usize {
            let mut free = FREE.load(Ordering::Relaxed);
            while free != 0 {
                let i = free.trailing_zeros() as usize;
                // Acquire: pairs with the Release `fetch_or` of the number's
                // previous owner, so its last stores to the shard are seen
                // by our first load.
                match FREE.compare_exchange_weak(free, free & !(1 << i), Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return i,
                    Err(now) => free = now,
                }
            }
            OWNED_SHARDS
        }
        std::thread_local! {
            static SHARD: Owned = Owned(claim());
        }
        match SHARD.try_with(|s| s.0) {
            Ok(i) => {
                SHARD_NUMBER.with(|n| n.set(i + 1));
                i
            }
            Err(_) => OWNED_SHARDS,
        }
    }
}
