//! The page cache: folios keyed by (inode, page index), one radix tree per
//! inode, speculative references, fill-once, a byte budget with CLOCK
//! reclaim (seed 002, "A Concurrent Pagecache", §3).
//!
//! # Structure
//! `inodes` is itself a [`RadixTree`] keyed by inode number, holding an
//! `Arc<Inode>`; each [`Inode`] holds a `RadixTree<Folio, FolioOwn>`. A
//! folio of `2^order` pages (`folio.rs`) is a multi-index entry of that
//! tree: its pointer is in each of the `2^order` slots it covers, an
//! aligned run inside one leaf, so `order <= SHIFT` ([`MAX_ORDER`]: 64
//! pages, 256 KiB of 4 KiB pages) and a lookup of any index inside the
//! folio finds it with one load. (Larger folios would need entries above
//! the leaves, which the tree's typed nodes do not have; a 1 MiB read
//! touches four folios.) Tags (ACCESSED, CLOCK's reference bit, and
//! PARTIAL) live on the folio's first slot. Both trees are read without
//! locks.
//!
//! # Protocols
//! - **Lookup** (§3.1.2): under an epoch guard, find the folio in the
//!   tree, take a reference only if the count is non-zero and `NONEWREFS`
//!   is clear (`Folio::try_get`), then re-read the slot (of the leaf the
//!   descent found: a leaf never moves and is unlinked only once empty, so
//!   this is the tree's slot); if it no longer holds this folio, drop the
//!   reference and retry. A folio whose `NONEWREFS` is set is being
//!   removed: retry until the slot changes.
//! - **Copies without a reference** (`read.rs`): a folio's bytes never
//!   change after its fill, so a ranged read copies them under the epoch
//!   guard alone, once the Acquire load of the state word shows the fill
//!   over; the guard keeps the memory (the tree's reference is dropped only
//!   after the grace period). The copy is the folio as it was when its slot
//!   was read: linearizable there.
//! - **Removal** (§3.1.3): take the folio's `NONEWREFS` (for reclaim, only
//!   if the tree's reference is the only one), then remove the run with
//!   `remove_if` comparing the pointer. `NONEWREFS` stays set on a removed
//!   folio, so no new reference is ever taken on it; holders of older
//!   references keep the memory until they drop them. A removal for a drop
//!   that finds its folio replaced meanwhile (copy-on-write) removes the
//!   replacement too (`remove_at`).
//! - **Writes are copy-on-write** (`write.rs`): a write or truncate builds
//!   a new folio with the new bytes and replaces the old one in every slot
//!   of its run, under the leaf lock, only if the old one is not being
//!   removed (`NONEWREFS` clear): a removal that claimed a folio first wins.
//! - **Fill once**: a thread that misses inserts a folio in the `FILLING`
//!   state, of the order the caller asks for (or the per-inode readahead
//!   suggests), shrunk until its aligned run covers no cached index; a
//!   failed insert means another thread is filling or has filled, and the
//!   loser goes back to the lookup. Waiters sleep on a condition variable
//!   picked by the folio's address. A failed fill removes the folio from
//!   the tree before it sets `FAILED`, so no half-filled folio stays
//!   visible and a waiter that retries does not find it again. A fill
//!   callback that panics is a failed fill (a drop guard ends it while the
//!   panic unwinds), so it never leaves a `FILLING` folio behind.
//! - **Invalidation vs fills**: every `write`, `truncate` and drop bumps the
//!   inode's generation before touching folios; a filler compares the
//!   generation before and after its fill and, if it changed, takes its
//!   folio out of the tree (its caller still gets the bytes, read
//!   concurrently with the invalidation). The filler tags a short folio
//!   `PARTIAL` before it reads the generation, and an invalidation bumps the
//!   generation before it looks for `PARTIAL` folios; with a SeqCst fence on
//!   each side one of the two sees the other.
//! - **Dropping an inode**: the inode's insertion gate is closed (a flag
//!   plus a count of threads between "decided to insert" and "inserted");
//!   once the count drains, the inode leaves the map and its folios are
//!   removed. A filler that finds the gate closed retries and creates a new
//!   inode entry once the old one is gone.
//! - **Retiring an emptied inode**: whoever removes a folio (reclaim, a
//!   drop, a truncate, a write over a filling folio, a failed or stale
//!   fill) then checks whether the inode's tree is empty; if so it closes
//!   the gate only if no inserter is inside (a CAS from 0, Acquire, pairing
//!   with the Release of `gate_exit`), checks emptiness again, and either
//!   unlinks the entry from the map (the gate stays closed for good) or
//!   reopens the gate. An inserter inside the gate makes the CAS fail; one
//!   that entered and left before it is seen by the re-check; one that
//!   comes after finds the gate closed and retries through the map. So no
//!   folio is inserted into an entry that left the map, and the budget
//!   never counts a folio nobody can find. `drop_inode` that finds the gate
//!   closed by a retirement waits until the entry leaves the map or the
//!   gate reopens.
//! - **Budget**: bytes are reserved (a page size per page of the folio)
//!   before a folio is inserted; when the total passes the budget the
//!   inserting thread runs CLOCK: the hand walks (inode, index) order; a
//!   folio with the ACCESSED tag loses it (second chance), one without it
//!   is evicted if its count shows only the tree's reference. A hit sets
//!   ACCESSED only if it is not set, so repeated hits write nothing shared.
//!   (The bit is the leaf's tag rather than a bit of the folio's state
//!   word: a reference-less copy need not load the folio's header at all,
//!   and the leaf's tag bitmap is one line per 64 slots, mostly cached,
//!   where the headers are one line per folio; measured in BENCHMARKS.md.)
//!   If every folio is in use the budget is exceeded until references are
//!   dropped.
//!
//! Lock order: `NONEWREFS` of a folio, then tree locks; the CLOCK hand's
//! mutex before either; a wait-queue mutex is never held with another lock.

use std::ptr::NonNull;

use crate::Mode;
use crate::counter::Counter;
use crate::folio::{FAILED, FILLING, Folio, FolioOwn, NONEWREFS, PageRef, filling_item, prefetch_page, ready_tag};
use crate::frames;
use crate::radix::node::{SHIFT, bit};
use crate::radix::{RadixTree, SLOTS, Tag};
use crate::readahead::Readahead;
use crate::sync::epoch::Guard;
use crate::sync::{Arc, AtomicU64, Condvar, Domain, Mutex, Ordering, fence, yield_now};

mod read;
mod write;

/// The largest folio order: a folio is one run of slots in one leaf.
pub const MAX_ORDER: u32 = SHIFT;

/// How a read fills a miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillOrder {
    /// Folios of the order the inode's readahead suggests (grows while the
    /// inode is read sequentially, one page for random reads; see
    /// [`Readahead`]).
    Readahead,
    /// As [`Readahead`](Self::Readahead), but a folio reaches page `end` or
    /// past it only when the page it is filled for does: `end` is the first
    /// page past the end of the file as the caller last saw it, so a small
    /// file read from its start is not given a folio (and a budget share)
    /// several times its size. A stale `end` only changes how much is read
    /// ahead, never what a read returns.
    ReadaheadWithin {
        /// The first page index at or past the end of the file.
        end: u64,
    },
    /// Folios of at most this order (0: one page).
    Order(u32),
}

impl FillOrder {
    fn is_readahead(self) -> bool {
        matches!(self, FillOrder::Readahead | FillOrder::ReadaheadWithin { .. })
    }
}

/// The largest order up to `order` whose aligned folio covering `index`
/// ends at or before page `end`, or at `index + 1` if `end` is not past
/// `index` (order 0 always qualifies).
fn order_within(index: u64, order: u32, end: u64) -> u32 {
    let limit = end.max(index.saturating_add(1));
    (0..=order)
        .rev()
        .find(|&o| (index & !((1u64 << o) - 1)).saturating_add(1 << o) <= limit)
        .unwrap_or(0)
}

/// Configuration of a [`PageCache`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Memory budget in bytes (each cached page counts `page_size`; a folio
    /// of `2^order` pages counts `2^order` of them).
    pub budget_bytes: usize,
    /// Page size in bytes (4096 by default).
    pub page_size: usize,
    /// Writer protocol of every radix tree in the cache.
    pub mode: Mode,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            budget_bytes: 256 << 20,
            page_size: 4096,
            mode: Mode::Optimistic,
        }
    }
}

/// Counters of a [`PageCache`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups that found a filled page (a ranged read counts each page it
    /// copied or referenced from the cache).
    pub hits: u64,
    /// Lookups that found no filled page (including those that then waited
    /// for another thread's fill).
    pub misses: u64,
    /// Successful fills (one per folio, whatever its size).
    pub fills: u64,
    /// Folios evicted by CLOCK reclaim.
    pub evictions: u64,
    /// Bytes accounted to cached pages (a page size each).
    pub bytes_cached: u64,
    /// Cached pages (a folio of `2^order` pages counts `2^order`).
    pub pages: u64,
}

/// What a drop operation removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Pages removed from the cache (a folio counts each of its pages).
    pub pages: u64,
    /// Bytes released from the budget (a page size each).
    pub bytes: u64,
}

impl std::ops::AddAssign for DropCounts {
    fn add_assign(&mut self, o: Self) {
        self.pages += o.pages;
        self.bytes += o.bytes;
    }
}

const GATE_CLOSED: u64 = 1 << 63;
const WAIT_BUCKETS: usize = 64;
/// Bytes of a page a speculative get prefetches before taking its
/// reference (see `folio::prefetch_page`).
const PREFETCH: usize = 1024;

/// One inode's pages.
pub(crate) struct Inode {
    /// The inode number (the key of this entry in the inode map).
    ino: u64,
    pub(crate) pages: RadixTree<Folio, FolioOwn>,
    /// Insertion gate: `GATE_CLOSED` plus the number of inserters inside.
    gate: AtomicU64,
    /// Invalidation generation (see the module docs).
    generation: AtomicU64,
    /// Sequential-read detection for [`FillOrder::Readahead`].
    ra: Readahead,
}

impl Inode {
    fn new(ino: u64, mode: Mode, domain: Domain) -> Self {
        Self {
            ino,
            pages: RadixTree::with_domain_compact(mode, domain),
            gate: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            ra: Readahead::new(),
        }
    }

    fn gate_enter(&self) -> bool {
        let mut g = self.gate.load(Ordering::Relaxed);
        loop {
            if g & GATE_CLOSED != 0 {
                return false;
            }
            // Acquire: pairs with nothing in particular (the closer only
            // needs our exit's Release); Relaxed would do, Acquire documents
            // that the insertion happens inside the gate.
            match self
                .gate
                .compare_exchange_weak(g, g + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => g = now,
            }
        }
    }

    fn gate_exit(&self) {
        // Release: our insertion happens before the closer's sweep; pairs
        // with the Acquire load in `gate_close`.
        self.gate.fetch_sub(1, Ordering::Release);
    }

    fn gate_closed(&self) -> bool {
        self.gate.load(Ordering::Relaxed) & GATE_CLOSED != 0
    }

    /// Closes the gate and waits until no inserter is inside. False if it
    /// was already closed (another thread is dropping this inode).
    fn gate_close(&self) -> bool {
        // Relaxed: the Acquire loads below order what follows.
        if self.gate.fetch_or(GATE_CLOSED, Ordering::Relaxed) & GATE_CLOSED != 0 {
            return false;
        }
        // Acquire: pairs with the Release in `gate_exit`, so every insertion
        // that passed the gate is visible to the sweep.
        while self.gate.load(Ordering::Acquire) & !GATE_CLOSED != 0 {
            yield_now();
        }
        true
    }

    /// Closes the gate if it is open and no inserter is inside; false
    /// otherwise (an inserter is inside, or another thread closed it).
    fn gate_try_close_idle(&self) -> bool {
        // Acquire: pairs with the Release in `gate_exit` (the exit is an RMW
        // of `gate`, so the value 0 we replace is at or after it in its
        // modification order), so every insertion that passed the gate is
        // visible to the emptiness re-check that follows.
        self.gate
            .compare_exchange(0, GATE_CLOSED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Reopens a gate closed by `gate_try_close_idle` whose inode turned out
    /// not to be empty.
    fn gate_reopen(&self) {
        // Relaxed: nothing is published; inserters that saw the gate closed
        // retry from the map lookup.
        self.gate.fetch_and(!GATE_CLOSED, Ordering::Relaxed);
    }

    /// Bumps the generation before an invalidation.
    fn invalidate(&self) {
        // SeqCst, plus the fence: see `fill_is_stale`. The invalidation's
        // later search for PARTIAL pages must not be reordered before this
        // increment; the SeqCst fence after it and the one in
        // `fill_is_stale` make the two sides a Dekker pair (store; fence;
        // load on each side), which Acquire/Release cannot order.
        self.generation.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    fn generation(&self) -> u64 {
        // Acquire: pairs with the SeqCst increment in `invalidate`.
        self.generation.load(Ordering::Acquire)
    }

    /// Whether an invalidation ran since `before` (after the filler's stores
    /// of the length and the PARTIAL tag).
    fn fill_is_stale(&self, before: u64) -> bool {
        // SeqCst fence: orders our PARTIAL tag store before the generation
        // load; paired with the fence in `invalidate` (see there).
        fence(Ordering::SeqCst);
        self.generation.load(Ordering::SeqCst) != before
    }
}

/// Ends a fill whose callback panicked as a failed fill (the folio leaves
/// the tree, `FAILED` is set, waiters wake and retry), so that a panicking
/// callback neither leaves a `FILLING` folio that every later reader of its
/// indexes would wait on forever nor leaks its reserved bytes. Forgotten
/// once the callback returns.
struct FillUnwind<'a> {
    cache: &'a PageCache,
    inode: &'a Inode,
    folio: &'a FolioRef,
}

impl Drop for FillUnwind<'_> {
    fn drop(&mut self) {
        self.cache.remove_folio(self.inode, self.folio);
        self.folio.finish_fill(false);
        self.cache.wake_fill(self.folio);
    }
}

/// One counted reference to a folio, held inside the crate; turned into a
/// [`PageRef`] or a [`FolioSlice`](crate::FolioSlice) for the user.
pub(crate) struct FolioRef(NonNull<Folio>);

impl FolioRef {
    /// Wraps a reference the caller owns.
    ///
    /// # Safety
    /// The caller transfers one reference to `folio`.
    unsafe fn from_raw(folio: NonNull<Folio>) -> Self {
        Self(folio)
    }

    /// The page `index` of this folio, for the user; the reference moves.
    fn into_page(self, index: u64, page_size: usize) -> PageRef {
        let folio = self.0;
        std::mem::forget(self);
        // SAFETY: our reference moves into the `PageRef`; only folios whose
        // fill succeeded are turned into one (the callers check).
        unsafe { PageRef::from_raw(folio, index, page_size) }
    }

    /// Bytes `start..start + len` of this folio, for the user; the
    /// reference moves.
    fn into_slice(self, start: usize, len: usize) -> crate::FolioSlice {
        let folio = self.0;
        std::mem::forget(self);
        // SAFETY: as in `into_page`.
        unsafe { crate::FolioSlice::from_raw(folio, start, len) }
    }
}

impl std::ops::Deref for FolioRef {
    type Target = Folio;

    fn deref(&self) -> &Folio {
        // SAFETY: the reference keeps the folio alive.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for FolioRef {
    fn drop(&mut self) {
        // SAFETY: we own one reference and never use it again.
        unsafe { Folio::put(self.0) };
    }
}

/// A page cache. See the module docs for the protocols.
pub struct PageCache {
    cfg: Config,
    domain: Domain,
    inodes: RadixTree<Arc<Inode>>,
    /// Reserved bytes: a page size per cached (or being inserted) page.
    bytes: AtomicU64,
    hits: Counter,
    misses: Counter,
    fills: Counter,
    evictions: Counter,
    /// The CLOCK hand: (inode, next page index).
    clock: Mutex<(u64, u64)>,
    waits: Box<[(Mutex<()>, Condvar)]>,
    /// The largest order a fill or a write-through insertion uses: at most
    /// [`MAX_ORDER`], and a folio at most a quarter of the budget.
    max_order: u32,
    /// log2 of the page size if it is a power of two (page numbers by a
    /// shift rather than a division on the hit path), else `u32::MAX`.
    page_shift: u32,
    /// The budget reserved with the page-frame pool, if single pages of
    /// this cache live in frames (`frames.rs`).
    _frames: Option<frames::Reservation>,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("config", &self.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Drop for PageCache {
    fn drop(&mut self) {
        // Under loom, run the deferred destructors (retired inode entries
        // own trees on this domain); nothing to do in the normal build.
        self.domain.drain();
    }
}

/// How a lookup ended.
enum Found {
    Ready(FolioRef),
    Filling(FolioRef),
    Missing,
}

/// What a fill asks for: the order policy, how many pages the read wants
/// from the missing index on, and whether this is the read's first miss
/// (for the readahead).
#[derive(Clone, Copy)]
struct Want {
    order: FillOrder,
    pages: u64,
    first_miss: bool,
}

impl PageCache {
    /// An empty cache.
    ///
    /// # Panics
    /// If `page_size` is zero.
    pub fn new(config: Config) -> Self {
        assert!(config.page_size > 0, "page size must be positive");
        let domain = Domain::new();
        let quarter = (config.budget_bytes / 4).max(config.page_size);
        let page_shift = if config.page_size.is_power_of_two() {
            config.page_size.trailing_zeros()
        } else {
            u32::MAX
        };
        let max_order = (0..=MAX_ORDER)
            .rev()
            .find(|&o| config.page_size.checked_shl(o).is_some_and(|b| b <= quarter))
            .unwrap_or(0);
        let _frames = frames::used_for(0, config.page_size).then(|| frames::Reservation::new(config.budget_bytes));
        Self {
            inodes: RadixTree::with_domain(config.mode, domain.clone()),
            domain,
            cfg: config,
            bytes: AtomicU64::new(0),
            hits: Counter::new(),
            misses: Counter::new(),
            fills: Counter::new(),
            evictions: Counter::new(),
            clock: Mutex::new((0, 0)),
            waits: (0..WAIT_BUCKETS).map(|_| (Mutex::new(()), Condvar::new())).collect(),
            max_order,
            page_shift,
            _frames,
        }
    }

    /// The page size.
    pub fn page_size(&self) -> usize {
        self.cfg.page_size
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The largest folio order this cache fills or inserts: [`MAX_ORDER`],
    /// or less if such a folio would be more than a quarter of the budget.
    pub fn max_order(&self) -> u32 {
        self.max_order
    }

    #[inline]
    fn ps(&self) -> u64 {
        self.cfg.page_size as u64
    }

    /// The page number of byte `at`.
    #[inline]
    fn page_of(&self, at: u64) -> u64 {
        if self.page_shift != u32::MAX {
            at >> self.page_shift
        } else {
            at / self.ps()
        }
    }

    /// The counters (not a snapshot: each is read separately).
    pub fn stats(&self) -> Stats {
        // Relaxed: a statistic.
        let bytes = self.bytes.load(Ordering::Relaxed);
        Stats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            fills: self.fills.get(),
            evictions: self.evictions.get(),
            bytes_cached: bytes,
            pages: bytes / self.ps(),
        }
    }

    /// The cached page, if it is there and filled; never waits for a fill
    /// and never fills. Lock-free (speculative reference on its folio).
    pub fn get(&self, ino: u64, index: u64) -> Option<PageRef> {
        let guard = self.domain.pin();
        if let Some(inode) = self.inodes.lookup(ino, &guard)
            && let Found::Ready(r) = Self::lookup_folio(inode, index, self.cfg.page_size, &guard)
        {
            self.hits.incr();
            return Some(r.into_page(index, self.cfg.page_size));
        }
        self.misses.incr();
        None
    }

    /// Speculative get of the folio covering `index` (§3.1.2); a filled
    /// folio gets the ACCESSED tag if it lacks it.
    ///
    /// One descent finds the leaf; the accuracy check after the reference is
    /// taken re-reads the same leaf slot rather than descending again. That is
    /// the same check: a leaf is unlinked only once all its slots are empty
    /// and never moves (growing and shrinking add or remove nodes above it),
    /// so a slot that still holds the item is the tree's slot for `index`.
    fn lookup_folio(inode: &Inode, index: u64, page_size: usize, guard: &Guard) -> Found {
        loop {
            let Some((leaf, s)) = inode.pages.find_leaf(index, guard) else {
                return Found::Missing;
            };
            let item = leaf.item(s, guard);
            // SAFETY: the item was in the slot while `guard` is pinned; it is
            // retired only after leaving the slot.
            let Some(folio) = (unsafe { item.as_ref() }) else {
                return Found::Missing;
            };
            prefetch_page(item, index, page_size, PREFETCH.min(page_size));
            match folio.try_get() {
                Ok(state) => {
                    // SAFETY: `try_get` gave us a reference.
                    let r = unsafe { FolioRef::from_raw(folio.ptr()) };
                    // Accuracy: the slot must still hold this folio, or it
                    // was removed or replaced after we loaded it. Acquire
                    // (in `item`): pairs with the Release store of the slot.
                    if leaf.item(s, guard) != item {
                        continue; // `r` drops our reference.
                    }
                    if state & FILLING != 0 {
                        return Found::Filling(r);
                    }
                    Self::touch(inode, leaf, folio.index());
                    return Found::Ready(r);
                }
                Err(_) => yield_now(), // Being removed: retry.
            }
        }
    }

    /// Sets the ACCESSED tag on the first slot of the folio starting at
    /// `first` if it is clear (so repeated hits write nothing shared).
    /// `leaf` holds the folio.
    #[inline]
    fn touch(inode: &Inode, leaf: &crate::radix::node::Node<Folio>, first: u64) {
        let head = (first % SLOTS as u64) as usize;
        if leaf.tag_bits(Tag::ACCESSED.idx()) & bit(head) == 0 {
            inode.pages.set_tag(first, Tag::ACCESSED);
        }
    }

    fn wait_queue(&self, folio: &Folio) -> &(Mutex<()>, Condvar) {
        let a = std::ptr::from_ref(folio) as usize;
        let h = (a >> 6) ^ (a >> 12);
        &self.waits[h % WAIT_BUCKETS]
    }

    /// Waits until the folio is not FILLING; true if the fill succeeded.
    fn wait_fill(&self, r: &FolioRef) -> bool {
        let (lock, cv) = self.wait_queue(r);
        let mut g = lock.lock();
        while r.state() & FILLING != 0 {
            g = cv.wait(g);
        }
        drop(g);
        r.state() & FAILED == 0
    }

    fn wake_fill(&self, folio: &Folio) {
        let (lock, cv) = self.wait_queue(folio);
        // Taking the mutex orders the state change before a waiter's check
        // or its sleep, so the wake-up is not lost.
        let _g = lock.lock();
        cv.notify_all();
    }

    /// The inode entry to insert into (created if needed), with a counted
    /// handle so that no epoch guard is held across the fill.
    fn inode_for_insert(&self, ino: u64) -> Arc<Inode> {
        loop {
            {
                let guard = self.domain.pin();
                if let Some(inode) = self.inodes.lookup(ino, &guard) {
                    if !inode.gate_closed() {
                        return Arc::clone(inode);
                    }
                    // Being dropped: wait until it leaves the map.
                    drop(guard);
                    yield_now();
                    continue;
                }
            }
            let fresh = Arc::new(Inode::new(ino, self.cfg.mode, self.domain.clone()));
            if self.inodes.insert(ino, Arc::clone(&fresh)).is_ok() {
                return fresh;
            }
        }
    }

    /// The page, filled by `fill` on a miss. Concurrent missers of one page:
    /// one fills, the others wait and share the result; if the fill fails the
    /// page leaves the cache, the filler gets the error, and each waiter
    /// retries (possibly filling itself). `fill` gets a zeroed buffer of the
    /// page size and returns the number of valid bytes (clamped to the page
    /// size); bytes past it are zeroed again after the call. If `fill`
    /// panics, the panic propagates and the fill counts as failed. (A miss
    /// fills one page; [`get_or_fill_folio`](Self::get_or_fill_folio) fills
    /// larger folios. A hit may find the page inside a larger folio.)
    pub fn get_or_fill<E>(
        &self,
        ino: u64,
        index: u64,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<PageRef, E> {
        self.get_or_fill_folio(ino, index, 0, |_, buf| fill(buf))
    }

    /// The page `index`, filled on a miss as part of a folio of at most
    /// `2^order` pages: the aligned folio covering `index` of the largest
    /// order up to `order` (and up to [`max_order`](Self::max_order)) that
    /// covers no page already cached. `fill(first, buf)` gets the folio's
    /// first page index and a zeroed buffer of the folio's size, and
    /// returns the number of valid bytes read from byte `first * page_size`
    /// on (clamped to the buffer); a short count is the end of the file
    /// (the folio then holds the pages past it as empty, and reads stop
    /// there). Otherwise as [`get_or_fill`](Self::get_or_fill): one fill
    /// per folio, waiters share it, a failed or panicking fill leaves
    /// nothing cached.
    pub fn get_or_fill_folio<E>(
        &self,
        ino: u64,
        index: u64,
        order: u32,
        fill: impl FnOnce(u64, &mut [u8]) -> Result<usize, E>,
    ) -> Result<PageRef, E> {
        let want = Want {
            order: FillOrder::Order(order),
            pages: 1,
            first_miss: true,
        };
        let (r, _) = self.get_or_fill_ref(ino, index, want, fill)?;
        Ok(r.into_page(index, self.cfg.page_size))
    }

    /// The folio covering `index`, filled on a miss with the order `want`
    /// asks for; also whether this call counted a hit (false: a miss).
    fn get_or_fill_ref<E>(
        &self,
        ino: u64,
        index: u64,
        want: Want,
        fill: impl FnOnce(u64, &mut [u8]) -> Result<usize, E>,
    ) -> Result<(FolioRef, bool), E> {
        let mut fill = Some(fill);
        let mut counted = false;
        loop {
            let found = {
                let guard = self.domain.pin();
                match self.inodes.lookup(ino, &guard) {
                    Some(inode) => Self::lookup_folio(inode, index, self.cfg.page_size, &guard),
                    None => Found::Missing,
                }
            };
            match found {
                Found::Ready(r) => {
                    if !counted {
                        self.hits.incr();
                    }
                    return Ok((r, !counted));
                }
                Found::Filling(r) => {
                    if !counted {
                        self.misses.incr();
                        counted = true;
                    }
                    if self.wait_fill(&r) {
                        return Ok((r, false));
                    }
                    continue; // The fill failed: retry, maybe as the filler.
                }
                Found::Missing => {}
            }
            let inode = self.inode_for_insert(ino);
            let window = match want.order {
                FillOrder::Order(o) => o.min(self.max_order),
                FillOrder::Readahead | FillOrder::ReadaheadWithin { .. } => {
                    inode.ra.suggest(index, want.pages, want.first_miss, self.max_order)
                }
            };
            let mut order = self.fit_order(&inode, index, window);
            if let FillOrder::ReadaheadWithin { end } = want.order {
                order = order_within(index, order, end);
            }
            let first = index & !((1u64 << order) - 1);
            let pages = 1u64 << order;
            self.reserve(pages);
            if !inode.gate_enter() {
                self.unreserve(pages);
                continue;
            }
            let folio = Folio::new_filling(first, order, self.cfg.page_size);
            // The run of slots takes the tree's reference (one of the two
            // the folio was made with).
            let inserted = inode.pages.insert_run_with(first, order, folio, |p, _| filling_item(p));
            inode.gate_exit();
            if inserted.is_err() {
                // SAFETY: the insert failed, so no other thread saw the folio.
                unsafe { Folio::free_unshared(folio) };
                self.unreserve(pages);
                continue;
            }
            if !counted {
                self.misses.incr();
            }
            if want.order.is_readahead() {
                inode.ra.filled(first, pages, window);
            }
            let before = inode.generation();
            // SAFETY: we hold the filler's reference to a folio we inserted.
            let mine = unsafe { FolioRef::from_raw(folio) };
            let f = fill
                .take()
                .expect("the fill closure runs at most once: after it we return");
            // If `f` panics, the guard ends the fill as failed while the
            // panic unwinds; otherwise it is disarmed below.
            let unwind = FillUnwind {
                cache: self,
                inode: &inode,
                folio: &mine,
            };
            // SAFETY: the folio is FILLING and we are its filler.
            let buf = unsafe { mine.buffer_mut() };
            let res = f(first, buf);
            std::mem::forget(unwind);
            return match res {
                Ok(n) => {
                    let n = n.min(buf.len());
                    buf[n..].fill(0);
                    // SAFETY: we are the filler of a FILLING folio.
                    unsafe { mine.set_len(n) };
                    if n < mine.capacity() {
                        inode.pages.set_tag(first, Tag::PARTIAL);
                    }
                    if inode.fill_is_stale(before) {
                        self.remove_folio(&inode, &mine);
                    } else {
                        // Publishes the bytes to reference-less readers: the
                        // slots' Release stores follow our writes (see
                        // `read.rs`). A folio removed meanwhile stays out.
                        let me = |h: &Folio| std::ptr::eq(h, &*mine);
                        inode.pages.retag_with(first, me, ready_tag(folio));
                    }
                    mine.finish_fill(true);
                    self.wake_fill(&mine);
                    self.fills.incr();
                    Ok((mine, false))
                }
                Err(e) => {
                    self.remove_folio(&inode, &mine);
                    mine.finish_fill(false);
                    self.wake_fill(&mine);
                    Err(e)
                }
            };
        }
    }

    /// The largest order up to `order` whose aligned run covering `index`
    /// has no occupied slot (read without locks; the insert re-checks
    /// under the leaf lock). 0 if none larger fits (`index` itself was
    /// just found missing).
    fn fit_order(&self, inode: &Inode, index: u64, order: u32) -> u32 {
        if order == 0 {
            return 0;
        }
        let guard = self.domain.pin();
        let Some((leaf, _)) = inode.pages.find_leaf(index, &guard) else {
            return order; // No leaf: nothing cached anywhere near.
        };
        (1..=order)
            .rev()
            .find(|&o| {
                let first = (index & !((1u64 << o) - 1)) % SLOTS as u64;
                (first..first + (1 << o)).all(|s| !leaf.occupied(s as usize))
            })
            .unwrap_or(0)
    }

    /// Reserves the bytes of `pages` pages, reclaiming if over budget.
    fn reserve(&self, pages: u64) {
        let bytes = pages * self.ps();
        // Relaxed: accounting only; the budget is soft under races.
        let now = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let budget = self.cfg.budget_bytes as u64;
        if now > budget {
            self.reclaim(now - budget);
        }
    }

    /// Reserves the bytes of `pages` pages if they fit in the budget, after
    /// reclaiming if needed; false (nothing reserved) if they do not.
    fn try_reserve(&self, pages: u64) -> bool {
        self.reserve(pages);
        // Relaxed: accounting only.
        if self.bytes.load(Ordering::Relaxed) > self.cfg.budget_bytes as u64 {
            self.unreserve(pages);
            return false;
        }
        true
    }

    fn unreserve(&self, pages: u64) {
        // Relaxed: accounting only.
        self.bytes.fetch_sub(pages * self.ps(), Ordering::Relaxed);
    }

    /// Removes `folio` from `inode` (§3.1.3): takes `NONEWREFS` (waiting
    /// while another thread holds it, unless the folio has left its slots),
    /// then removes its run if it still holds the folio. True if this call
    /// removed it.
    fn remove_folio(&self, inode: &Inode, folio: &Folio) -> bool {
        let guard = self.domain.pin();
        let first = folio.index();
        let in_slot = || {
            inode
                .pages
                .lookup(first, &guard)
                .is_some_and(|h| std::ptr::eq(h, folio))
        };
        loop {
            if !in_slot() {
                return false;
            }
            if folio.try_lock_nonewrefs() {
                break;
            }
            yield_now();
        }
        // NONEWREFS stays set: the folio never gains a reference again.
        if inode.pages.remove_if(first, |h| std::ptr::eq(h, folio)) {
            self.unreserve(folio.pages());
            self.retire_if_empty(inode);
            true
        } else {
            // Replaced meanwhile (copy-on-write): it is not ours to remove.
            folio.release_exclusive();
            false
        }
    }

    /// Removes whatever folio covers `index`, also if it is replaced while
    /// this runs (a drop must not leave a copy-on-write replacement of the
    /// folio it came for). Returns the pages removed (0: none was there).
    fn remove_at(&self, inode: &Inode, index: u64) -> u64 {
        loop {
            let guard = self.domain.pin();
            let Some(folio) = inode.pages.lookup(index, &guard) else {
                return 0;
            };
            if !folio.try_lock_nonewrefs() {
                // Another remover (or CLOCK) has it: wait until it leaves
                // the slot, or the bit is released.
                drop(guard);
                yield_now();
                continue;
            }
            if inode.pages.remove_if(index, |h| std::ptr::eq(h, folio)) {
                let pages = folio.pages();
                self.unreserve(pages);
                drop(guard);
                self.retire_if_empty(inode);
                return pages;
            }
            // Replaced between the lookup and the removal: remove that one.
            folio.release_exclusive();
        }
    }

    /// Takes an inode whose last folio is gone out of the inode map, so
    /// that an inode nobody uses costs no memory. Called after every removal
    /// of a folio. The gate is closed only if no inserter is inside, and the
    /// emptiness is checked again after closing it: a fill that inserted
    /// before the close is seen by the re-check (the entry then stays, gate
    /// reopened), and a fill that comes after it finds the gate closed and
    /// retries through the map, where it finds no entry (or a new one) once
    /// this one is gone. So no folio is ever inserted into an entry that has
    /// left the map, and no folio is lost with it.
    fn retire_if_empty(&self, inode: &Inode) {
        if !inode.pages.is_empty() || !inode.gate_try_close_idle() {
            return;
        }
        if !inode.pages.is_empty() {
            inode.gate_reopen();
            return;
        }
        // The gate stays closed for good: this entry takes no folio again.
        self.inodes
            .remove_if(inode.ino, |i| std::ptr::eq(Arc::as_ptr(i), inode));
    }

    /// Evicts an unused folio (CLOCK): only if the tree's reference is the
    /// only one and no flag is set.
    fn try_evict(&self, inode: &Inode, folio: &Folio) -> bool {
        if !folio.try_lock_unused() {
            return false;
        }
        if inode.pages.remove_if(folio.index(), |h| std::ptr::eq(h, folio)) {
            self.unreserve(folio.pages());
            self.evictions.incr();
            self.retire_if_empty(inode);
            true
        } else {
            folio.release_exclusive();
            false
        }
    }

    /// CLOCK over (inode, index) order until `want` bytes are freed or two
    /// sweeps found nothing more.
    fn reclaim(&self, want: u64) {
        let mut hand = self.clock.lock();
        let ps = self.ps();
        // Relaxed: a bound on the scan length only.
        let limit = 2 * (self.bytes.load(Ordering::Relaxed) / ps) + 64;
        let (mut freed, mut scanned) = (0u64, 0u64);
        while freed < want && scanned < limit {
            let guard = self.domain.pin();
            let inos = self.inodes.gang(hand.0, 1, None, &guard);
            let Some(&(ino, inode)) = inos.first() else {
                if *hand == (0, 0) {
                    break; // No inode at all.
                }
                *hand = (0, 0);
                continue;
            };
            if ino != hand.0 {
                *hand = (ino, 0);
            }
            let folios = inode.pages.gang_runs(hand.1, 32, None, &guard);
            scanned += 1;
            if folios.is_empty() {
                *hand = if ino == u64::MAX { (0, 0) } else { (ino + 1, 0) };
                continue;
            }
            for (_, folio) in folios {
                scanned += folio.pages();
                let end = folio.end();
                *hand = if end == 0 { (ino.wrapping_add(1), 0) } else { (ino, end) };
                if inode.pages.get_tag(folio.index(), Tag::ACCESSED) {
                    inode.pages.clear_tag(folio.index(), Tag::ACCESSED);
                } else if self.try_evict(inode, folio) {
                    freed += folio.pages() * ps;
                    if freed >= want {
                        break;
                    }
                }
            }
        }
    }

    fn inode(&self, ino: u64) -> Option<Arc<Inode>> {
        let guard = self.domain.pin();
        self.inodes.lookup(ino, &guard).cloned()
    }

    /// Removes every folio that covers an index in `first..=last`.
    fn drop_range_in(&self, inode: &Inode, first: u64, last: u64) -> DropCounts {
        let mut counts = DropCounts::default();
        let mut next = first;
        while next <= last {
            let guard = self.domain.pin();
            let batch = inode.pages.gang_runs(next, 64, None, &guard);
            let Some(&(max_seen, _)) = batch.last() else { break };
            for (index, folio) in batch {
                if index > last {
                    return counts;
                }
                let pages = self.remove_at(inode, index);
                counts.pages += pages;
                counts.bytes += pages * self.ps();
                next = folio.end();
            }
            if next == 0 || next <= max_seen {
                break; // The last folio ended the index space.
            }
        }
        counts
    }

    /// Drops the pages of `ino` with index in `first..=last`; a folio that
    /// the range cuts is dropped whole.
    pub fn drop_range(&self, ino: u64, first: u64, last: u64) -> DropCounts {
        let Some(inode) = self.inode(ino) else {
            return DropCounts::default();
        };
        inode.invalidate();
        self.drop_range_in(&inode, first, last)
    }

    /// Drops every page of `ino` and forgets the inode.
    pub fn drop_inode(&self, ino: u64) -> DropCounts {
        loop {
            let Some(inode) = self.inode(ino) else {
                return DropCounts::default();
            };
            if !inode.gate_close() {
                // Another drop of this inode, or the retirement of an empty
                // entry, closed the gate first. The former takes the entry out
                // of the map before it sweeps (what remains is its to count);
                // the latter takes it out or reopens the gate. Either way the
                // wait is short; look again.
                yield_now();
                continue;
            }
            inode.invalidate();
            self.inodes.remove_if(ino, |i| Arc::ptr_eq(i, &inode));
            return self.drop_range_in(&inode, 0, u64::MAX);
        }
    }

    /// Drops every page of each inode in `inos` (the directory drop).
    pub fn drop_inodes(&self, inos: &[u64]) -> DropCounts {
        let mut counts = DropCounts::default();
        for &ino in inos {
            counts += self.drop_inode(ino);
        }
        counts
    }

    /// Number of inodes with an entry (exact when quiescent).
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// Checks the radix-tree invariants of every tree, that each folio is
    /// aligned to its size and fills exactly its run of slots, tagged ready
    /// with its order and shortness, that no folio is busy, that bytes past
    /// a folio's valid length are zero, and that the byte count matches the
    /// cached pages. Call it only when quiescent.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.inodes.check_invariants()?;
        let guard = self.domain.pin();
        let mut pages = 0u64;
        let mut next = 0;
        loop {
            let batch = self.inodes.gang(next, 64, None, &guard);
            let Some(&(max_seen, _)) = batch.last() else { break };
            for (ino, inode) in batch {
                inode
                    .pages
                    .check_invariants()
                    .map_err(|e| format!("inode {ino}: {e}"))?;
                let slots = inode.pages.len() as u64;
                let mut covered = 0;
                for (index, folio) in inode.pages.gang_runs(0, usize::MAX, None, &guard) {
                    let (first, n) = (folio.index(), folio.pages());
                    let at = |i: u64| inode.pages.lookup(i, &guard).is_some_and(|h| std::ptr::eq(h, folio));
                    if index != first || first % n != 0 || !at(first) || !at(first + n - 1) {
                        return Err(format!("inode {ino}: folio of {n} pages at {first} found at {index}"));
                    }
                    if (first > 0 && at(first - 1)) || at(first + n) {
                        return Err(format!("inode {ino}: folio of {n} pages at {first} in more slots"));
                    }
                    let s = folio.state();
                    if s & (NONEWREFS | FILLING | FAILED) != 0 {
                        return Err(format!("inode {ino} folio {first}: state {s:#x} while quiescent"));
                    }
                    for i in [first, first + n - 1] {
                        let (leaf, slot) = inode.pages.find_leaf(i, &guard).ok_or("a folio's leaf is gone")?;
                        let item = leaf.item(slot, &guard);
                        if item.tag() != ready_tag(folio.ptr()) {
                            return Err(format!(
                                "inode {ino} folio {first}: slot {i} tagged {:#x}, not ready and {:#x}",
                                item.tag(),
                                ready_tag(folio.ptr())
                            ));
                        }
                    }
                    // SAFETY: not FILLING (checked above), found under `guard`.
                    let all = unsafe { folio.buffer() };
                    if all[folio.len()..].iter().any(|&b| b != 0) {
                        return Err(format!("inode {ino} folio {first}: bytes past its length"));
                    }
                    covered += n;
                }
                if covered != slots {
                    return Err(format!("inode {ino}: folios cover {covered} pages of {slots} slots"));
                }
                pages += covered;
            }
            if max_seen == u64::MAX {
                break;
            }
            next = max_seen + 1;
        }
        // Relaxed: quiescent.
        let bytes = self.bytes.load(Ordering::Relaxed);
        if bytes != pages * self.ps() {
            return Err(format!("{bytes} bytes accounted for {pages} pages"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
