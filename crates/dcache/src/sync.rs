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

    pub(crate) use crossbeam_utils::CachePadded;

    /// A small per-thread number used to pick a statistics shard, so that
    /// threads mostly count on cache lines of their own.
    pub(crate) fn thread_shard() -> usize {
        use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};
        static NEXT: StdAtomicUsize = StdAtomicUsize::new(0);
        std::thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, StdOrdering::Relaxed);
        }
        SHARD.try_with(|s| *s).unwrap_or(0)
    }

    /// Whether the crate is built for the loom model checker.
    pub(crate) const LOOM: bool = false;
}

#[cfg(rcufs_loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

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

    pub(crate) use crossbeam_utils::CachePadded;

    /// Under loom every thread counts in shard 0: the statistics are not part
    /// of any protocol the models check, and fewer shards mean fewer states.
    pub(crate) fn thread_shard() -> usize {
        0
    }

    /// Whether the crate is built for the loom model checker.
    pub(crate) const LOOM: bool = true;
}

pub(crate) use imp::*;
