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

        /// Pins the calling thread through the participant both cache
        /// crates share, inlined (`rcu::pin`); shadows crossbeam's `pin`.
        pub(crate) use rcu::pin;
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

    /// The calling thread's statistics shard and whether it owns it, and
    /// how many shards threads can own: one scheme and one set of shard
    /// numbers for both cache crates (`rcu::stats_shard`).
    pub(crate) use rcu::{OWNED_SHARDS, stats_shard};
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
