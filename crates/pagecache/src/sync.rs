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
    /// For process-wide state made on first use (the page-frame pool).
    pub(crate) use std::sync::LazyLock;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

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
    }

    pub(crate) fn spin_loop() {
        std::hint::spin_loop();
    }

    /// Gives the processor to another thread: used by waits that may last
    /// longer than a few spins (a remover waiting for a page's exclusive bit).
    pub(crate) fn yield_now() {
        std::thread::yield_now();
    }

    /// The guard type of [`Mutex::lock`].
    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    /// A condition variable whose `wait` takes and returns the guard, as
    /// loom's does after unwrapping.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(crate) const fn new() -> Self {
            Self(parking_lot::Condvar::new())
        }

        pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(&mut guard);
            guard
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    /// Pads and aligns a value to a cache line, so that per-thread counters do
    /// not share lines.
    pub(crate) use crossbeam_utils::CachePadded;

    /// The epoch domain of a structure. In the normal build every structure
    /// uses crossbeam-epoch's global collector (pinning is then a thread-local
    /// operation); the type is a zero-sized token so that the loom build can
    /// give each structure a collector of its own.
    #[derive(Debug, Clone, Default)]
    pub(crate) struct Domain;

    impl Domain {
        pub(crate) fn new() -> Self {
            Self
        }

        #[inline]
        pub(crate) fn pin(&self) -> epoch::Guard {
            epoch::pin()
        }

        /// Nothing to do with the global collector (see the loom build).
        pub(crate) fn drain(&self) {}
    }

    /// Counter shards a thread can own (see `stats_shard`).
    pub(crate) const OWNED_SHARDS: usize = 64;

    /// The counter shard of the calling thread, and whether the thread owns
    /// it. A thread owns one of `OWNED_SHARDS` shard numbers from its first
    /// count until it exits (then the number is free for another thread);
    /// while it does, it is the only writer of that shard in every counter
    /// and may count with a plain load and store, which unlike a
    /// read-modify-write is no barrier on the hit path. Threads beyond
    /// those, and threads that count while their thread-locals are torn
    /// down, share shard `OWNED_SHARDS` and count with `fetch_add`. (The
    /// same scheme as the dcache's statistics.)
    ///
    /// Inlined: the common case is one thread-local load and a test, where
    /// a thread-local with a destructor is checked for being made or
    /// dropped on every access (as the dcache's).
    #[inline]
    pub(crate) fn stats_shard() -> (usize, bool) {
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
        use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};
        /// Bit `i` set: shard number `i` is free.
        static FREE: StdAtomicU64 = StdAtomicU64::new(u64::MAX);
        struct Owned(usize);
        impl Drop for Owned {
            fn drop(&mut self) {
                // Counts made while the thread's other thread-locals are
                // dropped go to the shared shard.
                SHARD_NUMBER.with(|n| n.set(OWNED_SHARDS + 1));
                if self.0 < OWNED_SHARDS {
                    // Release: the exiting owner's counts happen before the
                    // next owner's; pairs with the Acquire CAS below.
                    FREE.fetch_or(1 << self.0, StdOrdering::Release);
                }
            }
        }
        fn claim() -> usize {
            let mut free = FREE.load(StdOrdering::Relaxed);
            while free != 0 {
                let i = free.trailing_zeros() as usize;
                // Acquire: pairs with the Release `fetch_or` of the number's
                // previous owner, so its last stores to the shard are seen
                // by our first load.
                match FREE.compare_exchange_weak(free, free & !(1 << i), StdOrdering::Acquire, StdOrdering::Relaxed) {
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

#[cfg(rcufs_loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
    /// Not modeled: only the page-frame pool's process-wide statics use it,
    /// and this build never reaches them (it uses no frames, `frames.rs`).
    pub(crate) use std::sync::LazyLock;

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

    /// Gives the processor to another thread.
    pub(crate) fn yield_now() {
        loom::thread::yield_now();
    }

    /// The guard type of [`Mutex::lock`].
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    /// loom's condition variable with the poisoning unwrapped.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Self(loom::sync::Condvar::new())
        }

        pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(guard).expect("loom mutex poisoned")
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    /// Padding does not matter to loom; the name stays for identical call sites.
    pub(crate) use crossbeam_utils::CachePadded;

    /// Each structure owns a fresh collector under loom, because statics (the
    /// global collector) persist across the iterations of a model. Each loom
    /// thread registers once per domain and keeps its handle here: a fresh
    /// registration per pin would make every pin run a full collection
    /// (crossbeam collects on a participant's first pin), which multiplies
    /// the interleavings loom explores for nothing.
    #[derive(Debug, Clone)]
    pub(crate) struct Domain(loom::sync::Arc<DomainInner>);

    #[derive(Debug)]
    pub(crate) struct DomainInner {
        collector: epoch::Collector,
        /// Not a loom mutex on purpose: loom runs one thread at a time and
        /// this lock is never held across a loom operation, so it adds no
        /// interleaving; it only keeps the bookkeeping sound.
        handles: std::sync::Mutex<Vec<(loom::thread::ThreadId, Box<LocalHandleCell>)>>,
    }

    /// A `LocalHandle` used only by the loom thread that registered it.
    #[derive(Debug)]
    struct LocalHandleCell(epoch::LocalHandle);

    // SAFETY: a handle is only used by the loom thread whose id it is filed
    // under (see `Domain::pin`); it moves between OS threads only inside
    // loom's scheduler, which runs one model thread at a time.
    unsafe impl Send for LocalHandleCell {}

    impl Default for Domain {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Domain {
        pub(crate) fn new() -> Self {
            Self(loom::sync::Arc::new(DomainInner {
                collector: epoch::Collector::new(),
                handles: std::sync::Mutex::new(Vec::new()),
            }))
        }

        pub(crate) fn pin(&self) -> epoch::Guard {
            let me = loom::thread::current().id();
            // The std lock is never held across a loom operation (register,
            // pin): loom could switch to a thread that then blocks on it for
            // real.
            let found = {
                let handles = self.0.handles.lock().expect("domain handles");
                handles
                    .iter()
                    .find(|(id, _)| *id == me)
                    .map(|(_, h)| std::ptr::from_ref(&h.0))
            };
            if let Some(h) = found {
                // SAFETY: handles are boxed and only dropped with the domain,
                // which `self` keeps alive; this one belongs to this thread.
                return unsafe { &*h }.pin();
            }
            let h = Box::new(LocalHandleCell(self.0.collector.register()));
            let guard = h.0.pin();
            self.0.handles.lock().expect("domain handles").push((me, h));
            guard
        }

        /// Runs every deferred destructor of this domain. Called when the
        /// structure that owns the domain is dropped, so no guard of it is
        /// held. Needed because retired garbage can hold a clone of the
        /// domain (a page cache's retired inode entry owns a tree on the
        /// cache's domain): the collector would keep itself alive through its
        /// own garbage, and loom reports the cycle as leaked `Arc`s. Dropping
        /// the handles moves their bags to the collector's queue; pins and
        /// flushes from a fresh handle then advance the epoch and run them.
        pub(crate) fn drain(&self) {
            let handles = std::mem::take(&mut *self.0.handles.lock().expect("domain handles"));
            drop(handles);
            let h = self.0.collector.register();
            for _ in 0..64 {
                h.pin().flush();
            }
        }
    }

    /// Under loom every thread counts in the one shared shard, with
    /// `fetch_add`: the statistics are not part of any protocol the models
    /// check, and fewer shards mean fewer states.
    pub(crate) const OWNED_SHARDS: usize = 0;

    pub(crate) fn stats_shard() -> (usize, bool) {
        (0, false)
    }
}

pub(crate) use imp::*;
