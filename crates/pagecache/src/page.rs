//! A cached page: its bytes, its valid length, and one atomic state word
//! holding the reference count and the flags of the speculative-reference
//! protocol (seed 002, "A Concurrent Pagecache", §3.1.2 and §3.1.3).
//!
//! # The state word
//! | bits  | name        | meaning                                                  |
//! |-------|-------------|----------------------------------------------------------|
//! | 0–31  | refs        | references: the tree's (one, while cached), [`PageRef`]s, a filler's |
//! | 32    | `NONEWREFS` | exclusive: no new reference may be taken (PG_nonewrefs)  |
//! | 33    | `FILLING`   | the filler is writing the bytes; nobody else reads them  |
//! | 34    | `FAILED`    | the fill failed; the page left the tree before this bit   |
//!
//! A speculative get increments `refs` only if it is non-zero and
//! `NONEWREFS` is clear (`try_get`), then re-checks that the tree slot still
//! holds this page. `NONEWREFS` is taken by a remover (and kept for good: a
//! removed page never takes a new reference) or, briefly, by an in-place
//! writer that saw `refs == 1` (only the tree's reference, so no reader
//! holds the bytes).
//!
//! # Invariants
//! - Bytes past the valid length are zero (so a write past the end of a
//!   short page leaves the hole as zeros, as the file has).
//! - While `FILLING`, only the filler touches the bytes and the length.
//! - While any reference other than the tree's exists, the bytes and the
//!   length do not change: writers need `refs == 1` plus `NONEWREFS`.
//! - The memory is freed when `refs` drops to zero. The tree's reference is
//!   dropped by the epoch destructor of the tree item, after every reader
//!   that could have loaded the page from a slot has unpinned, so a
//!   speculative get never touches freed memory.

use std::ptr::NonNull;

use crate::radix::Own;
use crate::sync::epoch::{Guard, Shared};
use crate::sync::{AtomicU64, AtomicUsize, Ordering, UnsafeCell, fence};

const REFS: u64 = (1 << 32) - 1;
pub(crate) const NONEWREFS: u64 = 1 << 32;
pub(crate) const FILLING: u64 = 1 << 33;
pub(crate) const FAILED: u64 = 1 << 34;

pub(crate) struct Page {
    state: AtomicU64,
    /// The valid length. Atomic (Relaxed) only so that a racy hint read
    /// (`drop_partial_below`) is not a data race; the state word orders it.
    len: AtomicUsize,
    data: UnsafeCell<Box<[u8]>>,
}

/// Why a speculative get failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GetError {
    /// `NONEWREFS` is set: the page is being removed or written.
    Busy,
    /// The count is zero (cannot happen while the page is reachable; kept
    /// because it is the protocol's check).
    Dead,
}

impl Page {
    /// A new page in the `FILLING` state with two references: the tree's
    /// and the filler's.
    pub(crate) fn new_filling(page_size: usize) -> NonNull<Page> {
        let page = Box::new(Page {
            state: AtomicU64::new(2 | FILLING),
            len: AtomicUsize::new(0),
            data: UnsafeCell::new(vec![0u8; page_size].into_boxed_slice()),
        });
        NonNull::from(Box::leak(page))
    }

    /// Frees a page that was never shared.
    ///
    /// # Safety
    /// `page` came from `new_filling` and no other thread ever saw it.
    pub(crate) unsafe fn free_unshared(page: NonNull<Page>) {
        // SAFETY: the caller guarantees exclusive ownership of a leaked box.
        drop(unsafe { Box::from_raw(page.as_ptr()) });
    }

    pub(crate) fn state(&self) -> u64 {
        // Acquire: a reader that sees FILLING clear sees the filled bytes;
        // pairs with the Release in `finish_fill`.
        self.state.load(Ordering::Acquire)
    }

    /// Takes a reference if the count is non-zero and `NONEWREFS` is clear.
    /// Returns the new state.
    pub(crate) fn try_get(&self) -> Result<u64, GetError> {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & NONEWREFS != 0 {
                return Err(GetError::Busy);
            }
            if s & REFS == 0 {
                return Err(GetError::Dead);
            }
            // Acquire: the bytes written before `NONEWREFS` was released (an
            // in-place write) or before FILLING was cleared are visible;
            // pairs with the Release in `release_exclusive`/`finish_fill`.
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Ok(s + 1),
                Err(now) => s = now,
            }
        }
    }

    /// Adds a reference to a page the caller already holds one on.
    pub(crate) fn get_more(&self) {
        // Relaxed: the caller's reference keeps the page alive (as Arc::clone).
        self.state.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops a reference; frees the page when it was the last.
    ///
    /// # Safety
    /// The caller owns one reference to `page` and does not use it after.
    pub(crate) unsafe fn put(page: NonNull<Page>) {
        // SAFETY: the caller's reference keeps the page alive until here.
        let p = unsafe { page.as_ref() };
        // Release: this holder's uses of the page happen before the free;
        // pairs with the Acquire fence below in the thread that frees.
        let old = p.state.fetch_sub(1, Ordering::Release);
        if old & REFS == 1 {
            // Acquire fence: every other holder's Release decrement happens
            // before the free (the Arc pattern; no SeqCst needed).
            fence(Ordering::Acquire);
            // SAFETY: the count reached zero, so no holder remains, and the
            // tree's reference (dropped last after the grace period, or
            // earlier if never published) is gone: no reader can reach it.
            drop(unsafe { Box::from_raw(page.as_ptr()) });
        }
    }

    /// Takes `NONEWREFS` if the page has only the tree's reference and no
    /// flag (CLOCK eviction and in-place writes): a page in use fails.
    pub(crate) fn try_lock_unused(&self) -> bool {
        // Acquire: orders our later accesses after the last holder's
        // release of its reference; pairs with the Release in `put`.
        self.state
            .compare_exchange(1, 1 | NONEWREFS, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes `NONEWREFS` whatever the count (removal): false if another
    /// thread holds it.
    pub(crate) fn try_lock_nonewrefs(&self) -> bool {
        // Acquire: pairs with the Release in `release_exclusive`.
        self.state.fetch_or(NONEWREFS, Ordering::Acquire) & NONEWREFS == 0
    }

    /// Releases `NONEWREFS` after an in-place write.
    pub(crate) fn release_exclusive(&self) {
        // Release: publishes the written bytes; pairs with the Acquire CAS
        // in `try_get`.
        self.state.fetch_and(!NONEWREFS, Ordering::Release);
    }

    /// Ends the fill: clears `FILLING`, and sets `FAILED` if `ok` is false.
    pub(crate) fn finish_fill(&self, ok: bool) {
        if !ok {
            // Relaxed: the Release below publishes it.
            self.state.fetch_or(FAILED, Ordering::Relaxed);
        }
        // Release: publishes the bytes and length; pairs with the Acquire
        // load in `state` and the Acquire CAS in `try_get`.
        self.state.fetch_and(!FILLING, Ordering::Release);
    }

    /// The valid length. Exact when the caller holds a reference to a page
    /// that is not `FILLING`, or is the filler, or holds `NONEWREFS` with
    /// `refs == 1`; otherwise a hint.
    pub(crate) fn len(&self) -> usize {
        // Relaxed: ordered by the state word (see the callers' contracts).
        self.len.load(Ordering::Relaxed)
    }

    /// Sets the valid length.
    ///
    /// # Safety
    /// The caller is the filler of a `FILLING` page, or holds `NONEWREFS`
    /// with `refs == 1`.
    pub(crate) unsafe fn set_len(&self, len: usize) {
        // Relaxed: published by the Release that ends the caller's right.
        self.len.store(len, Ordering::Relaxed);
    }

    /// The valid bytes.
    ///
    /// # Safety
    /// As for [`Page::len`]; the slice must not outlive the caller's right.
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: per the contract nobody writes the bytes or the length
        // while the returned borrow lives.
        unsafe {
            let len = self.len();
            let data: *const Box<[u8]> = self.data.with(|p| p);
            &(&*data)[..len]
        }
    }

    /// Mutable access to the whole buffer.
    ///
    /// # Safety
    /// The caller is the filler of a `FILLING` page, or holds `NONEWREFS`
    /// with `refs == 1`; the borrow must end before that right does.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn buffer_mut(&self) -> &mut [u8] {
        // SAFETY: per the contract this thread is the only one touching the
        // buffer.
        unsafe {
            let data: *mut Box<[u8]> = self.data.with_mut(|p| p);
            &mut (&mut *data)[..]
        }
    }
}

// SAFETY: the shared state is atomic, and the bytes (in the `UnsafeCell`)
// are read and written only as the exclusion protocol of this module allows
// (the filler while FILLING, an exclusive writer with `refs == 1` under
// NONEWREFS, readers holding a reference otherwise).
unsafe impl Sync for Page {}
// SAFETY: as above; a page is a heap block with no thread affinity.
unsafe impl Send for Page {}

/// The item policy of the per-inode trees: a leaf slot points at the page
/// itself and stands for the tree's reference (no box between slot and
/// page). Retiring the item drops that reference after the grace period;
/// a dropped tree drops it at once.
pub(crate) struct PageOwn;

// SAFETY: `retire` defers the drop of the tree's reference with the epoch
// guard, so the page stays alive for every reader pinned before it.
unsafe impl Own<Page> for PageOwn {
    unsafe fn retire(item: Shared<'_, Page>, guard: &Guard) {
        let handle = PageHandle(NonNull::new(item.as_raw().cast_mut()).expect("a retired item is non-null"));
        guard.defer(move || drop(handle));
    }

    unsafe fn free(item: Shared<'_, Page>) {
        // SAFETY: per the contract, the slot's reference is ours to drop.
        unsafe { Page::put(NonNull::new(item.as_raw().cast_mut()).expect("a freed item is non-null")) };
    }
}

/// A page pointer in a leaf slot, as the tree stores it.
pub(crate) fn page_item<'g>(page: NonNull<Page>) -> Shared<'g, Page> {
    Shared::from(page.as_ptr().cast_const())
}

/// An owned reference to a page (the tree's, on its way to the epoch
/// destructor). Dropping it drops the reference.
pub(crate) struct PageHandle(pub(crate) NonNull<Page>);

// SAFETY: a handle is a counted reference to a page whose shared state is
// atomic and whose bytes follow the exclusion protocol of this module.
unsafe impl Send for PageHandle {}
// SAFETY: as above.
unsafe impl Sync for PageHandle {}

impl Drop for PageHandle {
    fn drop(&mut self) {
        // SAFETY: the handle owns the tree's reference and is never used again.
        unsafe { Page::put(self.0) };
    }
}

/// A counted reference to a cached page: dereferences to the page's valid
/// bytes (shorter than the page size at the end of a file). While it is
/// held the page is never reclaimed and its bytes never change; if the page
/// is dropped from the cache meanwhile, this reference keeps the memory.
pub struct PageRef {
    page: NonNull<Page>,
}

// SAFETY: a `PageRef` only reads bytes that cannot change while it exists;
// its count is atomic.
unsafe impl Send for PageRef {}
// SAFETY: as above; `&PageRef` gives only shared reads.
unsafe impl Sync for PageRef {}

impl PageRef {
    /// Wraps a reference the caller owns.
    ///
    /// # Safety
    /// The caller transfers one reference to `page`.
    pub(crate) unsafe fn from_raw(page: NonNull<Page>) -> Self {
        Self { page }
    }

    pub(crate) fn page(&self) -> &Page {
        // SAFETY: this reference keeps the page alive.
        unsafe { self.page.as_ref() }
    }

    pub(crate) fn ptr(&self) -> NonNull<Page> {
        self.page
    }
}

impl std::ops::Deref for PageRef {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: a `PageRef` is only handed out for a page that is not
        // FILLING, and while it exists no writer can take the page
        // exclusively (that needs `refs == 1`).
        unsafe { self.page().bytes() }
    }
}

impl Clone for PageRef {
    fn clone(&self) -> Self {
        self.page().get_more();
        Self { page: self.page }
    }
}

impl Drop for PageRef {
    fn drop(&mut self) {
        // SAFETY: this `PageRef` owns one reference and is never used again.
        unsafe { Page::put(self.page) };
    }
}

impl std::fmt::Debug for PageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRef").field("len", &self.len()).finish()
    }
}
