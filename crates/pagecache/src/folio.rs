//! A folio: the page cache's unit, `2^order` consecutive pages of one file
//! (order 0 is a single page), naturally aligned (its first page index is
//! a multiple of `2^order`). A single 4 KiB page lives in a page frame,
//! its header in the frame's header slot (`frames.rs`: the kernel's
//! `mem_map`), so that its bytes are page-aligned; any other folio is one
//! allocation, the header in the first cache line and the bytes after it.
//! Either way the bytes' address follows from the header's without a load
//! ([`slot_bytes`]) (seed 002, "A Concurrent Pagecache", §3.1.2 and §3.1.3
//! for the reference protocol; the Linux folio for the unit).
//!
//! # The state word
//! | bits  | name        | meaning                                                  |
//! |-------|-------------|----------------------------------------------------------|
//! | 0–31  | refs        | references: the tree's (one, while cached), [`PageRef`]s, [`FolioSlice`]s, a filler's |
//! | 32    | `NONEWREFS` | no new reference may be taken (PG_nonewrefs): the folio is being removed |
//! | 33    | `FILLING`   | the filler is writing the bytes; nobody else reads them  |
//! | 34    | `FAILED`    | the fill failed; the folio left the tree before this bit  |
//!
//! A speculative get increments `refs` only if it is non-zero and
//! `NONEWREFS` is clear (`try_get`), then the caller re-checks that the tree
//! slot still holds this folio. `NONEWREFS` is taken by a remover and kept
//! for good (a removed folio never takes a new reference); CLOCK takes it
//! only on a folio whose sole reference is the tree's (`try_lock_unused`).
//!
//! # Bytes never change after the fill
//! The filler writes the bytes and the valid length while `FILLING`, then
//! clears the bit with a Release. From then on neither changes: a write or
//! a truncate that must change a cached folio builds a new one and replaces
//! it in the tree (copy-on-write, `cache/write.rs`), and holders of the old
//! one keep reading the old bytes. So a reader that found a folio in a slot
//! under an epoch guard and saw `FILLING` and `FAILED` clear (Acquire) may
//! copy its bytes without taking a reference: the guard keeps the memory
//! (the tree's reference is dropped only after the grace period), and
//! nothing writes it.
//!
//! # Invariants
//! - Bytes past the valid length are zero (so a write past the end of a
//!   short folio leaves the hole as zeros, as the file has).
//! - While `FILLING`, only the filler touches the bytes and the length; a
//!   folio built by copy-on-write is written only before it is published.
//! - After the fill, the bytes and the length never change.
//! - The memory is freed when `refs` drops to zero. The tree's reference is
//!   dropped by the epoch destructor of the tree item, after every reader
//!   that could have loaded the folio from a slot has unpinned, so neither a
//!   speculative get nor a reference-less copy touches freed memory.

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::ptr::NonNull;

use crate::frames;
use crate::radix::Own;
use crate::sync::epoch::{Guard, Shared};
use crate::sync::{AtomicU64, AtomicUsize, Ordering, UnsafeCell, fence};

const REFS: u64 = (1 << 32) - 1;
/// More references than this abort the process (as `Arc` does past
/// `isize::MAX`), long before the count could carry into `NONEWREFS`.
const MAX_REFS: u64 = REFS / 2;
pub(crate) const NONEWREFS: u64 = 1 << 32;
pub(crate) const FILLING: u64 = 1 << 33;
pub(crate) const FAILED: u64 = 1 << 34;

/// The header of a folio; its bytes follow it in the same allocation, or,
/// for a folio in a page frame (`frames.rs`), are that frame's.
#[repr(C, align(64))]
pub(crate) struct Folio {
    state: AtomicU64,
    /// The valid length. Atomic (Relaxed) only so that a racy hint read
    /// (`drop_partial_below`) is not a data race; the state word orders it.
    len: AtomicUsize,
    /// The first byte of the bytes (after the header, or the frame's), with
    /// the provenance of the whole allocation or chunk (so that bytes
    /// reached from `&Folio` are in bounds).
    data: NonNull<u8>,
    /// The first page index.
    index: u64,
    /// The bytes' length: `page size << order`.
    capacity: usize,
    order: u32,
    /// Whether the folio lives in a page frame (`frames.rs`).
    framed: bool,
    /// Stands for the bytes in the loom build, where every access to them
    /// goes through this cell so that loom checks that readers are ordered
    /// after the filler; zero-sized in the normal build.
    bytes: UnsafeCell<()>,
}

/// Why a speculative get failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GetError {
    /// `NONEWREFS` is set: the folio is being removed.
    Busy,
    /// The count is zero (cannot happen while the folio is reachable; kept
    /// because it is the protocol's check).
    Dead,
}

/// The bytes between the start of the allocation and the folio's bytes
/// (not framed).
const HEADER: usize = std::mem::size_of::<Folio>();

// A header fills a frame's header slot exactly.
const _: () = assert!(HEADER == frames::SLOT && std::mem::align_of::<Folio>() == frames::SLOT);

fn layout(capacity: usize) -> Layout {
    Layout::from_size_align(HEADER + capacity, std::mem::align_of::<Folio>()).expect("a folio's size fits a layout")
}

impl Folio {
    /// A new folio of `2^order` pages of `page_size` bytes from page
    /// `index`, zeroed, with state `state`. Nobody else sees it until the
    /// caller publishes it.
    fn alloc(index: u64, order: u32, page_size: usize, state: u64) -> NonNull<Folio> {
        let capacity = page_size << order;
        let framed = frames::used_for(order, page_size);
        let (base, data) = if framed {
            let header = frames::alloc_frame();
            // SAFETY: `data_of` keeps the chunk's provenance, and the frame's
            // bytes are inside the chunk; never null.
            (header, unsafe {
                NonNull::new_unchecked(frames::data_of(header.as_ptr()))
            })
        } else {
            let layout = layout(capacity);
            // SAFETY: the layout's size is at least the header's, never zero.
            let base = unsafe { alloc_zeroed(layout) };
            let Some(base) = NonNull::new(base) else {
                handle_alloc_error(layout)
            };
            // SAFETY: the allocation is `HEADER + capacity` bytes long.
            (base, unsafe { base.add(HEADER) })
        };
        let folio = base.cast::<Folio>();
        // SAFETY: the header's place (a frame's slot, or the allocation's
        // start) is fresh, aligned for `Folio` and large enough for it.
        unsafe {
            folio.as_ptr().write(Folio {
                state: AtomicU64::new(state),
                len: AtomicUsize::new(0),
                data,
                index,
                capacity,
                order,
                framed,
                bytes: UnsafeCell::new(()),
            });
        }
        folio
    }

    /// A new folio in the `FILLING` state with two references: the tree's
    /// and the filler's.
    pub(crate) fn new_filling(index: u64, order: u32, page_size: usize) -> NonNull<Folio> {
        Self::alloc(index, order, page_size, 2 | FILLING)
    }

    /// A new, filled folio with one reference (the tree's, once the caller
    /// publishes it), whose bytes the caller writes with `buffer_mut` and
    /// `set_len` before publishing it (copy-on-write, write-through).
    pub(crate) fn new_unpublished(index: u64, order: u32, page_size: usize) -> NonNull<Folio> {
        Self::alloc(index, order, page_size, 1)
    }

    /// Frees a folio that was never shared.
    ///
    /// # Safety
    /// `folio` came from this module and no other thread ever saw it.
    pub(crate) unsafe fn free_unshared(folio: NonNull<Folio>) {
        // SAFETY: the caller guarantees exclusive ownership.
        unsafe { Self::free(folio) };
    }

    /// # Safety
    /// Nobody else holds or can reach `folio`.
    unsafe fn free(folio: NonNull<Folio>) {
        // SAFETY: per the contract the header is ours to read and drop, and
        // the memory came from `alloc`: a frame, or an allocation made with
        // `layout(capacity)`.
        unsafe {
            let (capacity, framed) = (folio.as_ref().capacity, folio.as_ref().framed);
            std::ptr::drop_in_place(folio.as_ptr());
            if framed {
                frames::free_frame(folio.cast());
            } else {
                dealloc(folio.as_ptr().cast(), layout(capacity));
            }
        }
    }

    /// The pointer to this folio with the allocation's provenance (derived
    /// from `data`, not from `&self`), for references and the final free.
    #[inline]
    pub(crate) fn ptr(&self) -> NonNull<Folio> {
        if self.framed {
            // SAFETY: `header_of` keeps the chunk's provenance and maps a
            // frame's bytes back to its (non-null) header slot.
            return unsafe { NonNull::new_unchecked(frames::header_of(self.data.as_ptr())) }.cast();
        }
        // SAFETY: `data` is `HEADER` bytes into the allocation.
        unsafe { self.data.sub(HEADER) }.cast()
    }

    #[inline]
    pub(crate) fn state(&self) -> u64 {
        // Acquire: a reader that sees FILLING clear sees the filled bytes;
        // pairs with the Release in `finish_fill`.
        self.state.load(Ordering::Acquire)
    }

    /// Whether someone besides the tree holds a reference (a [`PageRef`], a
    /// [`FolioSlice`], a filler or a waiter): a write then drops the folio
    /// rather than replace it, as the cache always has for held pages. A
    /// hint: a reference may be taken or dropped right after.
    pub(crate) fn is_held(&self) -> bool {
        // Relaxed: a hint (see above).
        self.state.load(Ordering::Relaxed) & REFS > 1
    }

    /// Whether the fill is over and succeeded, so that the bytes may be
    /// read (by a holder of the epoch guard under which the folio was found
    /// in a slot). Acquire: see [`state`](Self::state).
    #[inline]
    pub(crate) fn is_ready(&self) -> bool {
        self.state() & (FILLING | FAILED) == 0
    }

    /// The first page index.
    #[inline]
    pub(crate) fn index(&self) -> u64 {
        self.index
    }

    /// The order: the folio covers `2^order` pages.
    #[inline]
    pub(crate) fn order(&self) -> u32 {
        self.order
    }

    /// Pages covered.
    #[inline]
    pub(crate) fn pages(&self) -> u64 {
        1 << self.order
    }

    /// The index after the last page covered (0 for a folio that ends the
    /// index space).
    #[inline]
    pub(crate) fn end(&self) -> u64 {
        self.index.wrapping_add(self.pages())
    }

    /// The size of the bytes: the page size times the pages.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes a reference if the count is non-zero and `NONEWREFS` is clear.
    /// Returns the new state.
    #[inline]
    pub(crate) fn try_get(&self) -> Result<u64, GetError> {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & NONEWREFS != 0 {
                return Err(GetError::Busy);
            }
            if s & REFS == 0 {
                return Err(GetError::Dead);
            }
            if s & REFS >= MAX_REFS {
                std::process::abort();
            }
            // Acquire: the bytes written before FILLING was cleared are
            // visible; pairs with the Release in `finish_fill`.
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Ok(s + 1),
                Err(now) => s = now,
            }
        }
    }

    /// Adds a reference to a folio the caller already holds one on.
    #[inline]
    pub(crate) fn get_more(&self) {
        // Relaxed: the caller's reference keeps the folio alive (as Arc::clone).
        let old = self.state.fetch_add(1, Ordering::Relaxed);
        if old & REFS >= MAX_REFS {
            std::process::abort();
        }
    }

    /// Drops a reference; frees the folio when it was the last.
    ///
    /// # Safety
    /// The caller owns one reference to `folio` and does not use it after.
    #[inline]
    pub(crate) unsafe fn put(folio: NonNull<Folio>) {
        // SAFETY: the caller's reference keeps the folio alive until here.
        let f = unsafe { folio.as_ref() };
        // Release: this holder's uses of the folio happen before the free;
        // pairs with the Acquire fence below in the thread that frees.
        let old = f.state.fetch_sub(1, Ordering::Release);
        if old & REFS == 1 {
            // Acquire fence: every other holder's Release decrement happens
            // before the free (the Arc pattern; no SeqCst needed).
            fence(Ordering::Acquire);
            // SAFETY: the count reached zero, so no holder remains, and the
            // tree's reference (dropped last after the grace period, or
            // earlier if never published) is gone: no reader can reach it.
            unsafe { Self::free(f.ptr()) };
        }
    }

    /// Takes `NONEWREFS` if the folio has only the tree's reference and no
    /// flag (CLOCK eviction): a folio in use fails.
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

    /// Releases `NONEWREFS` after a removal that found the folio gone from
    /// its slot (replaced meanwhile), so that its holders' speculative
    /// references work as before.
    pub(crate) fn release_exclusive(&self) {
        // Release: pairs with the Acquire in `try_lock_nonewrefs`.
        self.state.fetch_and(!NONEWREFS, Ordering::Release);
    }

    /// Ends the fill: clears `FILLING`, and sets `FAILED` if `ok` is false.
    pub(crate) fn finish_fill(&self, ok: bool) {
        if !ok {
            // Relaxed: the Release below publishes it (same atomic, earlier
            // in its modification order).
            self.state.fetch_or(FAILED, Ordering::Relaxed);
        }
        // Release: publishes the bytes and length; pairs with the Acquire
        // load in `state` and the Acquire CAS in `try_get`.
        self.state.fetch_and(!FILLING, Ordering::Release);
    }

    /// The valid length. Exact once the fill is over (for the filler,
    /// always); a hint otherwise.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // Relaxed: ordered by the state word (see the callers' contracts).
        self.len.load(Ordering::Relaxed)
    }

    /// Sets the valid length.
    ///
    /// # Safety
    /// The caller is the filler of a `FILLING` folio, or built the folio and
    /// has not published it.
    pub(crate) unsafe fn set_len(&self, len: usize) {
        debug_assert!(len <= self.capacity, "length within the folio");
        // Relaxed: published by the Release that ends the fill, or by the
        // Release store of the slot that publishes the folio.
        self.len.store(len, Ordering::Relaxed);
    }

    /// The valid bytes.
    ///
    /// # Safety
    /// The fill is over and succeeded ([`is_ready`](Self::is_ready) seen
    /// true, or a reference taken with `try_get` on a folio found not
    /// `FILLING`, or the caller built it), or the folio was found (with an
    /// Acquire load) in a tree slot tagged ready: its filler retags the slot
    /// only once the bytes and the length are final, before `finish_fill`
    /// clears `FILLING`, and writes nothing after; and the folio stays alive
    /// while the slice lives (a reference, or the epoch guard under which
    /// the folio was found in a tree slot).
    #[inline]
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        // Under loom: a read of the bytes, checked against the filler's write.
        self.bytes.with(|_| ());
        // SAFETY: `data` points at `capacity` bytes of this allocation and
        // per the contract nobody writes them any more; `len <= capacity`.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len()) }
    }

    /// The whole buffer, past the valid length too (which is zeros).
    ///
    /// # Safety
    /// As for [`bytes`](Self::bytes).
    pub(crate) unsafe fn buffer(&self) -> &[u8] {
        self.bytes.with(|_| ());
        // SAFETY: as in `bytes`, for the whole `capacity`.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.capacity) }
    }

    /// Mutable access to the whole buffer.
    ///
    /// # Safety
    /// The caller is the filler of a `FILLING` folio, or built the folio and
    /// has not published it; the borrow ends before that right does.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn buffer_mut(&self) -> &mut [u8] {
        // Under loom: a write of the bytes.
        self.bytes.with_mut(|_| ());
        // SAFETY: per the contract this thread is the only one touching the
        // buffer, which is `capacity` bytes of this allocation.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.capacity) }
    }
}

// SAFETY: the shared state is atomic, and the bytes are written only by
// the filler while FILLING (or before publication) and only read after.
unsafe impl Sync for Folio {}
// SAFETY: as above; a folio is a heap block with no thread affinity.
unsafe impl Send for Folio {}

/// The item policy of the per-inode trees: a leaf slot points at the folio
/// itself (every slot of its run does) and the run stands for one tree
/// reference. Retiring the item drops that reference after the grace
/// period; a dropped tree drops it at once.
pub(crate) struct FolioOwn;

// SAFETY: `retire` defers the drop of the tree's reference with the epoch
// guard, so the folio stays alive for every reader pinned before it.
unsafe impl Own<Folio> for FolioOwn {
    unsafe fn retire(item: Shared<'_, Folio>, guard: &Guard) {
        let handle = FolioHandle(NonNull::new(item.as_raw().cast_mut()).expect("a retired item is non-null"));
        guard.defer(move || drop(handle));
    }

    unsafe fn free(item: Shared<'_, Folio>) {
        // SAFETY: per the contract, the slot's reference is ours to drop.
        unsafe { Folio::put(NonNull::new(item.as_raw().cast_mut()).expect("a freed item is non-null")) };
    }
}

/// The slot tag's bits: the folio's order, whether its fill is over, and
/// whether it is short (holds the end of the file). A leaf slot's pointer
/// carries them in the low bits the folio's 64-byte alignment leaves free,
/// so that a reference-less reader knows from the slot alone whether it
/// may copy, where the folio starts, how large it is, and (for all but a
/// short folio) how many bytes are valid: the header's load, a cache miss
/// of its own, is then off the copy's path.
const TAG_ORDER: usize = 0b111;
const TAG_NOT_READY: usize = 0b1000;
const TAG_SHORT: usize = 0b1_0000;
/// The folio lives in a page frame (`frames.rs`): its bytes are at
/// [`frames::data_of`] its header, not right after it.
const TAG_FRAMED: usize = 0b10_0000;

/// The tag bit that says where a folio's bytes are.
fn framed_tag(f: &Folio) -> usize {
    if f.framed { TAG_FRAMED } else { 0 }
}

/// The first byte of the folio a slot holds, from the slot's pointer and
/// tag alone (no load of the header), with the slot pointer's provenance.
#[inline]
fn slot_data(item: Shared<'_, Folio>) -> *const u8 {
    let header = item.as_raw().cast::<u8>();
    if item.tag() & TAG_FRAMED != 0 {
        frames::data_of(header)
    } else {
        header.wrapping_add(HEADER)
    }
}

/// The slot pointer of a folio being filled: its order, not ready.
pub(crate) fn filling_item<'g>(folio: NonNull<Folio>) -> Shared<'g, Folio> {
    // SAFETY: the caller owns a reference to the folio, so it is alive.
    let f = unsafe { folio.as_ref() };
    Shared::from(folio.as_ptr().cast_const()).with_tag(f.order as usize | TAG_NOT_READY | framed_tag(f))
}

/// The slot pointer of a folio whose bytes are all written: its order,
/// ready, and short if its valid length is less than its size. Stored with
/// a Release (the tree's `set_item`) after the bytes and the length are
/// written, so a reader that loads it with Acquire sees them.
pub(crate) fn ready_item<'g>(folio: NonNull<Folio>) -> Shared<'g, Folio> {
    Shared::from(folio.as_ptr().cast_const()).with_tag(ready_tag(folio))
}

/// The tag of [`ready_item`].
pub(crate) fn ready_tag(folio: NonNull<Folio>) -> usize {
    // SAFETY: the caller owns a reference to the folio, and wrote (or
    // filled) its length.
    let f = unsafe { folio.as_ref() };
    f.order as usize | if f.len() < f.capacity { TAG_SHORT } else { 0 } | framed_tag(f)
}

/// What a slot's pointer says about its folio (see [`filling_item`] and
/// [`ready_item`]): the order, whether it is ready, whether it is short.
#[inline]
pub(crate) fn slot_tag(item: Shared<'_, Folio>) -> (u32, bool, bool) {
    let t = item.tag();
    ((t & TAG_ORDER) as u32, t & TAG_NOT_READY == 0, t & TAG_SHORT != 0)
}

/// Asks the processor to start loading the first `n` bytes of page `index`
/// of the folio a slot holds, from the slot's pointer and tag alone (no
/// load of the header), so that they arrive while a speculative get waits
/// for the header's state word. That get's compare-and-swap is a full
/// barrier on x86: the copy's loads after it wait for it, and it waits for
/// the state word's miss, so without this the copy's first miss would
/// start only once the header's is over (prefetches are not ordered by
/// locked instructions). Only a hint: nothing is read that the program
/// sees. `n` is at most the page size.
#[inline]
pub(crate) fn prefetch_page(item: Shared<'_, Folio>, index: u64, page_size: usize, n: usize) {
    #[cfg(all(target_arch = "x86_64", not(rcufs_loom)))]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let (order, ready, _) = slot_tag(item);
        if !ready {
            return;
        }
        // Folios are naturally aligned: the page's place in its folio is
        // the index's low `order` bits.
        let page = (index & ((1u64 << order) - 1)) as usize;
        let base = slot_data(item).cast::<i8>().wrapping_add(page * page_size);
        let mut at = 0;
        while at < n {
            // SAFETY: a prefetch never faults and changes nothing the
            // program can observe; the address is inside the folio's
            // allocation (page `page` of a folio of order `order`).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(at)) };
            at += 64;
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(rcufs_loom))))]
    let _ = (item, index, page_size, n);
}

/// The bytes `from..from + n` of the folio a slot holds, computed from the
/// slot's pointer alone (not from the header, whose load may still be in
/// flight: the copy's loads need not wait for it).
///
/// # Safety
/// As for [`Folio::bytes`], and `from + n` is within the valid length.
#[inline]
pub(crate) unsafe fn slot_bytes<'g>(item: Shared<'g, Folio>, from: usize, n: usize) -> &'g [u8] {
    // SAFETY: per the contract the folio is alive for 'g and its fill is
    // over; the bytes start at `slot_data` (in a frame, or `HEADER` bytes
    // into the allocation), and the range is within them. (The pointer is
    // the slot's, which carries the allocation's provenance.)
    unsafe {
        item.deref().bytes.with(|_| ());
        // The tag's view of where the bytes are agrees with the header's.
        debug_assert_eq!(slot_data(item), item.deref().data.as_ptr().cast_const());
        std::slice::from_raw_parts(slot_data(item).add(from), n)
    }
}

/// An owned reference to a folio (the tree's, on its way to the epoch
/// destructor). Dropping it drops the reference.
pub(crate) struct FolioHandle(pub(crate) NonNull<Folio>);

// SAFETY: a handle is a counted reference to a folio whose shared state is
// atomic and whose bytes follow the protocol of this module.
unsafe impl Send for FolioHandle {}
// SAFETY: as above.
unsafe impl Sync for FolioHandle {}

impl Drop for FolioHandle {
    fn drop(&mut self) {
        // SAFETY: the handle owns the tree's reference and is never used again.
        unsafe { Folio::put(self.0) };
    }
}

/// One counted reference to a folio and a byte range of it: what
/// [`PageRef`] and [`FolioSlice`] hold.
struct Held {
    folio: NonNull<Folio>,
    start: u32,
    len: u32,
}

impl Held {
    fn folio(&self) -> &Folio {
        // SAFETY: this reference keeps the folio alive.
        unsafe { self.folio.as_ref() }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: a `Held` is made only for a folio whose fill succeeded or
        // whose slot was found tagged ready (see `PageRef::from_raw`), and
        // the reference keeps it alive. (The
        // whole buffer: an empty page past the end of the file starts past
        // the valid bytes.)
        let all = unsafe { self.folio().buffer() };
        &all[self.start as usize..][..self.len as usize]
    }

    fn clone_ref(&self) -> Self {
        self.folio().get_more();
        Self { ..*self }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: this `Held` owns one reference and is never used again.
        unsafe { Folio::put(self.folio) };
    }
}

/// A counted reference to one cached page: dereferences to the page's valid
/// bytes (shorter than the page size at the end of a file, empty for a page
/// of a folio past the end of the file). While it is held the page's folio
/// is never reclaimed and its bytes never change; if it is dropped from the
/// cache meanwhile, this reference keeps the memory.
pub struct PageRef(Held);

// SAFETY: a `PageRef` only reads bytes that cannot change while it exists;
// its count is atomic.
unsafe impl Send for PageRef {}
// SAFETY: as above; `&PageRef` gives only shared reads.
unsafe impl Sync for PageRef {}

impl PageRef {
    /// Wraps a reference the caller owns, for page `index` of the folio.
    ///
    /// # Safety
    /// The caller transfers one reference to `folio`, whose fill is over
    /// and succeeded or whose slot it found tagged ready (as for
    /// [`Folio::bytes`]), and `index` is inside it.
    pub(crate) unsafe fn from_raw(folio: NonNull<Folio>, index: u64, page_size: usize) -> Self {
        // SAFETY: the reference keeps the folio alive.
        let f = unsafe { folio.as_ref() };
        debug_assert!((f.index()..f.end()).contains(&index), "the page is in the folio");
        let start = (index - f.index()) as usize * page_size;
        let len = f.len().saturating_sub(start).min(page_size);
        Self(Held {
            folio,
            start: start as u32,
            len: len as u32,
        })
    }
}

impl std::ops::Deref for PageRef {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.bytes()
    }
}

impl Clone for PageRef {
    fn clone(&self) -> Self {
        Self(self.0.clone_ref())
    }
}

impl std::fmt::Debug for PageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRef").field("len", &self.len()).finish()
    }
}

/// A counted reference to a cached folio and a byte range of it: what
/// [`PageCache::read_refs`](crate::PageCache::read_refs) returns for a
/// zero-copy reply. Dereferences to those bytes. While it is held the
/// folio is never reclaimed and its bytes never change (a write or a drop
/// meanwhile replaces or removes the folio in the cache; this reference
/// keeps the old one), so the bytes can be handed to a `writev` and the
/// slice dropped when it returns.
pub struct FolioSlice(Held);

// SAFETY: as for `PageRef`.
unsafe impl Send for FolioSlice {}
// SAFETY: as for `PageRef`.
unsafe impl Sync for FolioSlice {}

impl FolioSlice {
    /// Wraps a reference the caller owns, for bytes `start..start + len` of
    /// the folio.
    ///
    /// # Safety
    /// As for [`PageRef::from_raw`], and the range is within the valid
    /// bytes.
    pub(crate) unsafe fn from_raw(folio: NonNull<Folio>, start: usize, len: usize) -> Self {
        // SAFETY: the reference keeps the folio alive.
        debug_assert!(start + len <= unsafe { folio.as_ref() }.len(), "within the valid bytes");
        Self(Held {
            folio,
            start: start as u32,
            len: len as u32,
        })
    }

    /// The file offset of the first byte of the slice.
    pub fn offset(&self) -> u64 {
        let f = self.0.folio();
        let page_size = (f.capacity() >> f.order()) as u64;
        f.index() * page_size + u64::from(self.0.start)
    }

    /// The number of pages of the folio the slice is part of.
    pub fn folio_pages(&self) -> u64 {
        self.0.folio().pages()
    }
}

impl std::ops::Deref for FolioSlice {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.bytes()
    }
}

impl Clone for FolioSlice {
    fn clone(&self) -> Self {
        Self(self.0.clone_ref())
    }
}

impl std::fmt::Debug for FolioSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FolioSlice")
            .field("offset", &self.offset())
            .field("len", &self.len())
            .finish()
    }
}
