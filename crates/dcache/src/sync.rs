//! The only module of this crate that names threads, atomics, locks, cells or
//! the epoch collector.
//!
//! Normally it re-exports `std`, `parking_lot` and `crossbeam-epoch`; built with
//! `--cfg rcufs_loom --cfg crossbeam_loom` it re-exports loom's model-checked
//! replacements instead, so that the `loom-tests` crate can explore every
//! interleaving of the protocols in this crate. Call sites are identical in both
//! builds: `Mutex::lock()` returns a guard, `UnsafeCell` is used through `with`
//! and `with_mut`.

// The shim offers the same set of names in both builds; a given build of the
// crate need not use every one of them.
#![allow(dead_code, unused_imports)]

#[cfg(not(rcufs_loom))]
mod imp {
    pub(crate) use std::sync::Arc;
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };

    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    /// A mutex whose `lock()` returns the guard directly, as loom's does after
    /// unwrapping: parking_lot has no poisoning.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(parking_lot::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
            self.0.lock()
        }

        pub(crate) fn try_lock(&self) -> Option<parking_lot::MutexGuard<'_, T>> {
            self.0.try_lock()
        }
    }

    /// `UnsafeCell` with loom's closure-based access, so that loom can track
    /// every access to the cell's contents.
    #[derive(Debug, Default)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    pub(crate) mod epoch {
        pub(crate) use crossbeam_epoch::*;

        /// Pins the calling thread through the participant both cache
        /// crates share, inlined (`rcu::pin`); shadows crossbeam's `pin`.
        pub(crate) use rcu::pin;
    }

    pub(crate) fn spin_loop() {
        std::hint::spin_loop();
    }

    /// Asks the CPU to start loading the cache line at `p` (a hint: no
    /// effect on what the program computes, so nothing for loom to model).
    /// The pruner's batches know their next victims' addresses long before
    /// they touch them; prefetched, the misses overlap.
    #[inline(always)]
    pub(crate) fn prefetch<T>(p: *const T) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint; it never faults, whatever the
        // address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    /// One wait of a spin lock's waiter that has spun `spins` times: a spin
    /// hint at first, then giving the core away, since the holder may be
    /// preempted (a user-space bit lock cannot disable preemption as the
    /// kernel's does).
    pub(crate) fn backoff(spins: u32) {
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }

    /// Hands this thread's deferred frees to the collector's global queue
    /// and lets it free what no reader can see any more.
    pub(crate) fn flush_deferred(guard: &epoch::Guard) {
        guard.flush();
    }

    /// Counts `n` frees this thread deferred and flushes (as
    /// `flush_deferred`) once `every` have gathered since its last flush by
    /// this function. A flush hands the thread's whole bag of deferred
    /// frees to the collector's queue, a copy of about 2 KB: once per batch
    /// of a few frees it cost the churn bench more than the frees. Up to
    /// `every - 1` frees may then wait in the bag of a thread that goes
    /// idle, as they would in crossbeam's own bag of 64.
    pub(crate) fn flush_deferred_every(guard: &epoch::Guard, n: usize, every: usize) {
        std::thread_local! {
            static PENDING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }
        let due = PENDING
            .try_with(|p| {
                let total = p.get() + n;
                p.set(if total >= every { 0 } else { total });
                total >= every
            })
            .unwrap_or(true);
        if due {
            guard.flush();
        }
    }

    /// Freed blocks of one layout (a node's) that a thread keeps for its
    /// next allocations of that layout, at most `MAGAZINE_BLOCKS`: the
    /// user-space counterpart of the kernel's dentry slab and its per-CPU
    /// free lists. The epoch collector frees nodes a bag (dozens) at a
    /// time, more than the allocator's own per-thread cache of a size keeps
    /// (seven, in glibc's), so most frees and the inserts' allocations after
    /// them went through its slower shared bins: about 330 instructions per
    /// node in the churn bench, against about 60 for a push and a pop here.
    struct Magazine {
        layout: std::alloc::Layout,
        blocks: Vec<*mut u8>,
    }

    /// At most this many blocks per thread (152 KB of 152-byte nodes). A
    /// step of the collector frees up to eight bags of deferred functions,
    /// and the pruner's are batches: at two threads on the churn stream, a
    /// magazine of 256 blocks served 46 % of the inserts, one of 1024 72 %.
    const MAGAZINE_BLOCKS: usize = 1024;

    /// Whether freed blocks are kept at all (see `set_keep_blocks`).
    static KEEP_BLOCKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

    /// Turns the magazines off (or on again) for the whole process: with
    /// them off every freed block goes back to the global allocator at
    /// once, so that a memory checker sees every node's end and reports a
    /// read of a freed node, which a block kept for reuse would hide.
    pub(crate) fn set_keep_blocks(on: bool) {
        // Relaxed: a switch read by later frees; it publishes nothing.
        KEEP_BLOCKS.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    impl Drop for Magazine {
        fn drop(&mut self) {
            for &b in &self.blocks {
                // SAFETY: every kept block was allocated with `self.layout`
                // (see `free_block`) and is owned by the magazine alone.
                unsafe { std::alloc::dealloc(b, self.layout) };
            }
        }
    }

    std::thread_local! {
        static MAGAZINE: std::cell::RefCell<Magazine> = const {
            std::cell::RefCell::new(Magazine { layout: std::alloc::Layout::new::<()>(), blocks: Vec::new() })
        };
    }

    /// Half magazines that threads with too many freed blocks handed over,
    /// for threads whose own magazine ran empty (the depot of Bonwick and
    /// Adams's magazine allocator): at two threads, one thread's collector
    /// step often frees what the other one's inserts allocated. At most
    /// `DEPOT_LOADS` loads of one layout; beyond that, blocks go back to the
    /// global allocator.
    struct Depot {
        layout: std::alloc::Layout,
        loads: Vec<Vec<*mut u8>>,
    }

    // SAFETY: the depot's blocks are memory that no one else refers to
    // (freed nodes' blocks); whoever takes a load owns its blocks.
    unsafe impl Send for Depot {}

    /// At most this many loads of `MAGAZINE_BLOCKS / 2` blocks (304 KB of
    /// 152-byte nodes, for the process).
    const DEPOT_LOADS: usize = 4;

    static DEPOT: std::sync::Mutex<Depot> = std::sync::Mutex::new(Depot {
        layout: std::alloc::Layout::new::<()>(),
        loads: Vec::new(),
    });

    /// Loads in the depot (a hint read without its lock, so that a thread
    /// whose magazine is empty does not lock an empty depot).
    static DEPOT_LEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// A load of blocks of `layout` from the depot, if it has one.
    fn depot_take(layout: std::alloc::Layout) -> Option<Vec<*mut u8>> {
        // Relaxed: a hint; the lock below decides.
        if DEPOT_LEN.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        let mut d = DEPOT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if d.layout != layout {
            return None;
        }
        let load = d.loads.pop()?;
        // Relaxed: as above (changed under the lock).
        DEPOT_LEN.store(d.loads.len(), std::sync::atomic::Ordering::Relaxed);
        Some(load)
    }

    /// Hands a load of blocks of `layout` to the depot, or to the global
    /// allocator if the depot is full or holds another layout.
    #[cold]
    fn depot_give(layout: std::alloc::Layout, load: Vec<*mut u8>) {
        let mut d = DEPOT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if d.loads.is_empty() {
            d.layout = layout;
        }
        if d.layout == layout && d.loads.len() < DEPOT_LOADS {
            d.loads.push(load);
            // Relaxed: see `depot_take`.
            DEPOT_LEN.store(d.loads.len(), std::sync::atomic::Ordering::Relaxed);
            return;
        }
        drop(d);
        for b in load {
            // SAFETY: a magazine's block, allocated with `layout` (see
            // `free_block`), owned by this load alone.
            unsafe { std::alloc::dealloc(b, layout) };
        }
    }

    /// A block of `layout` (not zero-sized): one this thread kept (its
    /// magazine refilled from the depot when empty), else a new one from
    /// the global allocator. Null if that fails.
    #[inline]
    pub(crate) fn alloc_block(layout: std::alloc::Layout) -> *mut u8 {
        let kept = MAGAZINE
            .try_with(|m| {
                let mut m = m.try_borrow_mut().ok()?;
                if m.layout == layout { m.blocks.pop() } else { None }
            })
            .ok()
            .flatten();
        kept.unwrap_or_else(|| alloc_block_slow(layout))
    }

    /// `alloc_block` when the magazine has no block of `layout`: refilled
    /// from the depot if that has a load, else the global allocator.
    #[cold]
    #[inline(never)]
    fn alloc_block_slow(layout: std::alloc::Layout) -> *mut u8 {
        let kept = MAGAZINE
            .try_with(|m| {
                let mut m = m.try_borrow_mut().ok()?;
                if !m.blocks.is_empty() {
                    return None;
                }
                m.blocks = depot_take(layout)?;
                m.layout = layout;
                m.blocks.pop()
            })
            .ok()
            .flatten();
        // SAFETY: `layout` is not zero-sized (the caller's promise).
        kept.unwrap_or_else(|| unsafe { std::alloc::alloc(layout) })
    }

    /// Gives back a block from `alloc_block` (or from the global allocator)
    /// with the same `layout`: this thread keeps it if its magazine holds
    /// that layout (or is empty), handing half of a full magazine to the
    /// depot first; else it goes back to the global allocator.
    ///
    /// # Safety
    /// `p` was allocated by the global allocator with `layout`, whatever
    /// was in it was dropped, and nothing uses it any more.
    #[inline]
    pub(crate) unsafe fn free_block(p: *mut u8, layout: std::alloc::Layout) {
        // Relaxed: see `set_keep_blocks`.
        let kept = KEEP_BLOCKS.load(std::sync::atomic::Ordering::Relaxed)
            && MAGAZINE
                .try_with(|m| {
                    let Ok(mut m) = m.try_borrow_mut() else { return false };
                    if m.layout != layout {
                        if !m.blocks.is_empty() {
                            return false;
                        }
                        m.layout = layout;
                        m.blocks.reserve_exact(MAGAZINE_BLOCKS);
                    }
                    if m.blocks.len() >= MAGAZINE_BLOCKS {
                        let load = m.blocks.split_off(MAGAZINE_BLOCKS / 2);
                        depot_give(layout, load);
                    }
                    m.blocks.push(p);
                    true
                })
                .unwrap_or(false);
        if !kept {
            // SAFETY: forwarded from the caller.
            unsafe { std::alloc::dealloc(p, layout) };
        }
    }

    pub(crate) use crossbeam_utils::CachePadded;

    /// The calling thread's statistics shard and whether it owns it, and
    /// how many shards threads can own: one scheme and one set of shard
    /// numbers for both cache crates (`rcu::stats_shard`).
    pub(crate) use rcu::{OWNED_SHARDS, stats_shard};

    /// Whether the crate is built for the loom model checker.
    pub(crate) const LOOM: bool = false;
}

#[cfg(rcufs_loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };

    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    /// loom's mutex with the poisoning unwrapped, so call sites match the
    /// parking_lot build.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().expect("loom mutex poisoned")
        }

        pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    pub(crate) mod epoch {
        pub(crate) use crossbeam_epoch::*;
    }

    /// Under loom a spin must yield, or the model never lets the other thread
    /// make the progress the spinner waits for.
    pub(crate) fn spin_loop() {
        loom::thread::yield_now();
    }

    /// Under loom a no-op.
    pub(crate) fn prefetch<T>(_p: *const T) {}

    /// As `spin_loop`: every wait yields.
    pub(crate) fn backoff(_spins: u32) {
        loom::thread::yield_now();
    }

    /// Under loom a no-op: flushing changes only when deferred frees run
    /// (a thread's bag is freed at its exit in any case), not whether any
    /// reader can see freed memory, and the collector's queue operations it
    /// adds multiplied the models' states (the dcache models went from
    /// about two minutes to over six at preemption bound 2).
    pub(crate) fn flush_deferred(_guard: &epoch::Guard) {}

    /// As `flush_deferred`: a no-op.
    pub(crate) fn flush_deferred_every(_guard: &epoch::Guard, _n: usize, _every: usize) {}

    /// Under loom the global allocator itself: a thread's cache of blocks
    /// changes no ordering the models check.
    pub(crate) fn alloc_block(layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: `layout` is not zero-sized (the caller's promise).
        unsafe { std::alloc::alloc(layout) }
    }

    /// # Safety
    /// As in the other build.
    pub(crate) unsafe fn free_block(p: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: forwarded from the caller.
        unsafe { std::alloc::dealloc(p, layout) };
    }

    /// Under loom there are no magazines.
    pub(crate) fn set_keep_blocks(_on: bool) {}

    pub(crate) use crossbeam_utils::CachePadded;

    /// Under loom every thread counts in the one shared shard, with
    /// `fetch_add`: the statistics are not part of any protocol the models
    /// check, and fewer shards mean fewer states.
    pub(crate) const OWNED_SHARDS: usize = 0;

    pub(crate) fn stats_shard() -> (usize, bool) {
        (0, false)
    }

    /// Whether the crate is built for the loom model checker.
    pub(crate) const LOOM: bool = true;
}

pub(crate) use imp::*;
