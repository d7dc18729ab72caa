//! The page cache: fixed-size pages keyed by (inode, page index), one radix
//! tree per inode, speculative references, fill-once, a byte budget with
//! CLOCK reclaim (seed 002, "A Concurrent Pagecache", §3).
//!
//! # Structure
//! `inodes` is itself a [`RadixTree`] keyed by inode number, holding an
//! `Arc<Inode>`; each [`Inode`] holds a `RadixTree<Page, PageOwn>` whose
//! slots point at the pages themselves (a slot is the tree's reference). Both are
//! read without locks.
//!
//! # Protocols
//! - **Lookup** (§3.1.2): under an epoch guard, find the page in the tree,
//!   take a reference only if the count is non-zero and `NONEWREFS` is clear
//!   (`Page::try_get`), then re-read the slot (of the leaf the descent
//!   found: a leaf never moves and is unlinked only once empty, so this is
//!   the tree's slot); if it no longer holds this page, drop the reference
//!   and retry. A page whose `NONEWREFS` is set is being removed or written:
//!   retry until the slot changes or the bit clears.
//! - **Ranged reads** (`read_into`): the same speculative reference per page,
//!   but consecutive pages are taken from consecutive slots of the leaf
//!   already found (a new descent only at a leaf boundary), under one epoch
//!   pin, with one statistics update per call. Anything but a filled page in
//!   the slot (missing, filling, busy) sends that page through
//!   `get_or_fill`.
//! - **Removal** (§3.1.3): take the page's `NONEWREFS` (for reclaim, only if
//!   the tree's reference is the only one), then remove the slot with
//!   `remove_if` comparing the pointer. `NONEWREFS` stays set on a removed
//!   page, so no new reference is ever taken on it; holders of older
//!   references keep the memory until they drop them.
//! - **Fill once**: a thread that misses inserts a page in the `FILLING`
//!   state; a failed insert means another thread is filling or has filled,
//!   and the loser goes back to the lookup. Waiters sleep on a condition
//!   variable picked by the page's address. A failed fill removes the page
//!   from the tree before it sets `FAILED`, so no half-filled page stays
//!   visible and a waiter that retries does not find it again. A fill
//!   callback that panics is a failed fill (a drop guard ends it while the
//!   panic unwinds), so it never leaves a `FILLING` page behind.
//! - **Invalidation vs fills**: every `write`, `truncate` and drop bumps the
//!   inode's generation before touching pages; a filler compares the
//!   generation before and after its fill and, if it changed, takes its page
//!   out of the tree (its caller still gets the bytes, read concurrently
//!   with the invalidation). The filler tags a short page `PARTIAL` before
//!   it reads the generation, and an invalidation bumps the generation
//!   before it looks for `PARTIAL` pages; with a SeqCst fence on each side
//!   one of the two sees the other.
//! - **Dropping an inode**: the inode's insertion gate is closed (a flag
//!   plus a count of threads between "decided to insert" and "inserted");
//!   once the count drains, the inode leaves the map and its pages are
//!   removed. A filler that finds the gate closed retries and creates a new
//!   inode entry once the old one is gone.
//! - **Retiring an emptied inode**: whoever removes a page (reclaim, a drop,
//!   a truncate, a write over a held page, a failed or stale fill) then
//!   checks whether the inode's tree is empty; if so it closes the gate only
//!   if no inserter is inside (a CAS from 0, Acquire, pairing with the
//!   Release of `gate_exit`), checks emptiness again, and either unlinks the
//!   entry from the map (the gate stays closed for good) or reopens the
//!   gate. An inserter inside the gate makes the CAS fail; one that entered
//!   and left before it is seen by the re-check; one that comes after finds
//!   the gate closed and retries through the map. So no page is inserted
//!   into an entry that left the map, and the budget never counts a page
//!   nobody can find. `drop_inode` that finds the gate closed by a
//!   retirement waits until the entry leaves the map or the gate reopens.
//! - **Budget**: bytes are reserved (a page size each) before a page is
//!   inserted; when the total passes the budget the inserting thread runs
//!   CLOCK: the hand walks (inode, index) order; a page with the ACCESSED
//!   tag loses it (second chance), one without it is evicted if its count
//!   shows only the tree's reference. A hit sets ACCESSED only if it is not
//!   set, so repeated hits write nothing shared. If every page is in use the
//!   budget is exceeded until references are dropped.
//!
//! Lock order: `NONEWREFS` of a page, then tree locks; the CLOCK hand's
//! mutex before either; a wait-queue mutex is never held with another lock.

use std::ptr::NonNull;

use crate::Mode;
use crate::counter::Counter;
use crate::page::{FAILED, FILLING, NONEWREFS, Page, PageOwn, PageRef, page_item};
use crate::radix::node::bit;
use crate::radix::{RadixTree, SLOTS, Tag};
use crate::sync::epoch::Guard;
use crate::sync::{Arc, AtomicU64, Condvar, Domain, Mutex, Ordering, fence, yield_now};

/// Configuration of a [`PageCache`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Memory budget in bytes (each cached page counts `page_size`).
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
    /// Lookups that found a filled page.
    pub hits: u64,
    /// Lookups that found no filled page (including those that then waited
    /// for another thread's fill).
    pub misses: u64,
    /// Successful fills.
    pub fills: u64,
    /// Pages evicted by CLOCK reclaim.
    pub evictions: u64,
    /// Bytes accounted to cached pages (a page size each).
    pub bytes_cached: u64,
    /// Cached pages.
    pub pages: u64,
}

/// What a drop operation removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Pages removed from the cache.
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

/// One inode's pages.
pub(crate) struct Inode {
    /// The inode number (the key of this entry in the inode map).
    ino: u64,
    pub(crate) pages: RadixTree<Page, PageOwn>,
    /// Insertion gate: `GATE_CLOSED` plus the number of inserters inside.
    gate: AtomicU64,
    /// Invalidation generation (see the module docs).
    generation: AtomicU64,
}

impl Inode {
    fn new(ino: u64, mode: Mode, domain: Domain) -> Self {
        Self {
            ino,
            pages: RadixTree::with_domain_compact(mode, domain),
            gate: AtomicU64::new(0),
            generation: AtomicU64::new(0),
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

/// Ends a fill whose callback panicked as a failed fill (the page leaves the
/// tree, `FAILED` is set, waiters wake and retry), so that a panicking
/// callback neither leaves a `FILLING` page that every later reader of the
/// index would wait on forever nor leaks its reserved bytes. Forgotten once
/// the callback returns.
struct FillUnwind<'a> {
    cache: &'a PageCache,
    inode: &'a Inode,
    index: u64,
    page: &'a PageRef,
}

impl Drop for FillUnwind<'_> {
    fn drop(&mut self) {
        let page = self.page.ptr();
        self.cache.remove_page(self.inode, self.index, page);
        self.page.page().finish_fill(false);
        self.cache.wake_fill(page);
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
    Ready(PageRef),
    Filling(PageRef),
    Missing,
}

impl PageCache {
    /// An empty cache.
    ///
    /// # Panics
    /// If `page_size` is zero.
    pub fn new(config: Config) -> Self {
        assert!(config.page_size > 0, "page size must be positive");
        let domain = Domain::new();
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

    fn ps(&self) -> u64 {
        self.cfg.page_size as u64
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
    /// and never fills. Lock-free (speculative reference).
    pub fn get(&self, ino: u64, index: u64) -> Option<PageRef> {
        let guard = self.domain.pin();
        if let Some(inode) = self.inodes.lookup(ino, &guard)
            && let Found::Ready(r) = Self::lookup_page(inode, index, &guard)
        {
            self.hits.incr();
            return Some(r);
        }
        self.misses.incr();
        None
    }

    /// Speculative get of the page at `index` (§3.1.2); a filled page gets
    /// the ACCESSED tag if it lacks it.
    ///
    /// One descent finds the leaf; the accuracy check after the reference is
    /// taken re-reads the same leaf slot rather than descending again. That is
    /// the same check: a leaf is unlinked only once all its slots are empty
    /// and never moves (growing and shrinking add or remove nodes above it),
    /// so a slot that still holds the item is the tree's slot for `index`.
    fn lookup_page(inode: &Inode, index: u64, guard: &Guard) -> Found {
        loop {
            let Some((leaf, s)) = inode.pages.find_leaf(index, guard) else {
                return Found::Missing;
            };
            let item = leaf.item(s, guard);
            // SAFETY: the item was in the slot while `guard` is pinned; it is
            // retired only after leaving the slot.
            let Some(handle) = (unsafe { item.as_ref() }) else {
                return Found::Missing;
            };
            match handle.try_get() {
                Ok(state) => {
                    // SAFETY: `try_get` gave us a reference. The pointer is the
                    // slot's (not one derived from `handle`), with the provenance of the
                    // allocation that the last reference frees.
                    let r = unsafe { PageRef::from_raw(NonNull::new_unchecked(item.as_raw().cast_mut())) };
                    // Accuracy: the slot must still hold this page, or the
                    // page was removed after we loaded it. Acquire (in
                    // `item`): pairs with the Release store of the slot.
                    if leaf.item(s, guard) != item {
                        continue; // `r` drops our reference.
                    }
                    if state & FILLING != 0 {
                        return Found::Filling(r);
                    }
                    // Only if not set, so repeated hits write nothing shared.
                    if leaf.tag_bits(Tag::ACCESSED.idx()) & bit(s) == 0 {
                        inode.pages.set_tag(index, Tag::ACCESSED);
                    }
                    return Found::Ready(r);
                }
                Err(_) => yield_now(), // Being removed or written: retry.
            }
        }
    }

    fn wait_queue(&self, page: NonNull<Page>) -> &(Mutex<()>, Condvar) {
        let h = (page.as_ptr() as usize >> 6) ^ (page.as_ptr() as usize >> 12);
        &self.waits[h % WAIT_BUCKETS]
    }

    /// Waits until the page is not FILLING; true if the fill succeeded.
    fn wait_fill(&self, r: &PageRef) -> bool {
        let (lock, cv) = self.wait_queue(r.ptr());
        let mut g = lock.lock();
        while r.page().state() & FILLING != 0 {
            g = cv.wait(g);
        }
        drop(g);
        r.page().state() & FAILED == 0
    }

    fn wake_fill(&self, page: NonNull<Page>) {
        let (lock, cv) = self.wait_queue(page);
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
    /// panics, the panic propagates and the fill counts as failed.
    pub fn get_or_fill<E>(
        &self,
        ino: u64,
        index: u64,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<PageRef, E> {
        let mut fill = Some(fill);
        let mut counted = false;
        loop {
            let found = {
                let guard = self.domain.pin();
                match self.inodes.lookup(ino, &guard) {
                    Some(inode) => Self::lookup_page(inode, index, &guard),
                    None => Found::Missing,
                }
            };
            match found {
                Found::Ready(r) => {
                    if !counted {
                        self.hits.incr();
                    }
                    return Ok(r);
                }
                Found::Filling(r) => {
                    if !counted {
                        self.misses.incr();
                        counted = true;
                    }
                    if self.wait_fill(&r) {
                        return Ok(r);
                    }
                    continue; // The fill failed: retry, maybe as the filler.
                }
                Found::Missing => {}
            }
            let inode = self.inode_for_insert(ino);
            self.reserve();
            if !inode.gate_enter() {
                self.unreserve();
                continue;
            }
            let page = Page::new_filling(self.cfg.page_size);
            // The slot takes the tree's reference (one of the two the page
            // was made with).
            let inserted = inode.pages.insert_with(index, page, |p, _| page_item(p));
            inode.gate_exit();
            if inserted.is_err() {
                // SAFETY: the insert failed, so no other thread saw the page.
                unsafe { Page::free_unshared(page) };
                self.unreserve();
                continue;
            }
            if !counted {
                self.misses.incr();
            }
            let before = inode.generation();
            // SAFETY: we hold the filler's reference to a page we inserted.
            let mine = unsafe { PageRef::from_raw(page) };
            let f = fill
                .take()
                .expect("the fill closure runs at most once: after it we return");
            // If `f` panics, the guard ends the fill as failed while the
            // panic unwinds; otherwise it is disarmed below.
            let unwind = FillUnwind {
                cache: self,
                inode: &inode,
                index,
                page: &mine,
            };
            // SAFETY: the page is FILLING and we are its filler.
            let buf = unsafe { mine.page().buffer_mut() };
            let res = f(buf);
            std::mem::forget(unwind);
            match res {
                Ok(n) => {
                    let n = n.min(buf.len());
                    buf[n..].fill(0);
                    // SAFETY: we are the filler of a FILLING page.
                    unsafe { mine.page().set_len(n) };
                    if n < self.cfg.page_size {
                        inode.pages.set_tag(index, Tag::PARTIAL);
                    }
                    if inode.fill_is_stale(before) {
                        self.remove_page(&inode, index, page);
                    }
                    mine.page().finish_fill(true);
                    self.wake_fill(page);
                    self.fills.incr();
                    return Ok(mine);
                }
                Err(e) => {
                    self.remove_page(&inode, index, page);
                    mine.page().finish_fill(false);
                    self.wake_fill(page);
                    return Err(e);
                }
            }
        }
    }

    /// Copies the cached bytes of `ino` from `offset` into `buf`, filling
    /// missing pages with `fill(index, page_buf)` (as
    /// [`get_or_fill`](Self::get_or_fill) does, same contract per page), and
    /// returns the number of bytes copied: `buf.len()`, or fewer when a page
    /// shorter than the page size (the end of the file) ends the range.
    ///
    /// This is a cached read of several pages with the cost of one: one
    /// epoch pin and one descent for a run of consecutive cached pages (the
    /// next page is read from the next slot of the same leaf; the descent is
    /// repeated only on entering another leaf), one statistics update per
    /// call, and per page only the speculative reference that keeps the
    /// bytes stable while they are copied. A page that is missing, being
    /// filled or being removed or written ends the run and goes through
    /// `get_or_fill`.
    pub fn read_into<E>(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let ps = self.ps();
        let mut done = 0usize;
        let mut index = offset / ps;
        let mut hits = 0i64;
        // Copies page `index` (valid bytes `page`) into `buf`; true if the
        // read is over (buffer full or end of file).
        let copy = |page: &[u8], index: u64, done: &mut usize, buf: &mut [u8]| -> bool {
            let at = offset + *done as u64;
            let from = (at - index * ps) as usize;
            if from >= page.len() {
                return true;
            }
            let n = (page.len() - from).min(buf.len() - *done);
            buf[*done..*done + n].copy_from_slice(&page[from..from + n]);
            *done += n;
            *done == buf.len() || page.len() < self.cfg.page_size
        };
        'read: while done < buf.len() {
            // The fast path: a run of filled pages, walked leaf by leaf.
            {
                let guard = self.domain.pin();
                if let Some(inode) = self.inodes.lookup(ino, &guard) {
                    let mut at = inode.pages.find_leaf(index, &guard);
                    while let Some((leaf, s)) = at {
                        let item = leaf.item(s, &guard);
                        // SAFETY: the item was in the slot while `guard` is
                        // pinned; it is retired only after leaving the slot.
                        let Some(handle) = (unsafe { item.as_ref() }) else {
                            break;
                        };
                        let Ok(state) = handle.try_get() else { break };
                        // SAFETY: `try_get` gave us a reference. The pointer is the
                        // slot's (not one derived from `handle`), with the provenance of the
                        // allocation that the last reference frees.
                        let r = unsafe { PageRef::from_raw(NonNull::new_unchecked(item.as_raw().cast_mut())) };
                        // Accuracy, as in `lookup_page`: the same leaf slot
                        // still holds the page (Acquire in `item`, pairing
                        // with the Release store of the slot).
                        if state & FILLING != 0 || leaf.item(s, &guard) != item {
                            break;
                        }
                        if leaf.tag_bits(Tag::ACCESSED.idx()) & bit(s) == 0 {
                            inode.pages.set_tag(index, Tag::ACCESSED);
                        }
                        hits += 1;
                        let over = copy(&r, index, &mut done, buf);
                        drop(r);
                        if over {
                            break 'read;
                        }
                        index += 1;
                        // The next index is the next slot of this leaf unless
                        // it starts a new leaf; a leaf unlinked meanwhile has
                        // only empty slots, which sends us to the slow path.
                        at = if s + 1 < SLOTS {
                            Some((leaf, s + 1))
                        } else {
                            inode.pages.find_leaf(index, &guard)
                        };
                    }
                }
            }
            // The slow path for one page: wait for its fill or fill it.
            let r = self.get_or_fill(ino, index, |b| fill(index, b))?;
            if copy(&r, index, &mut done, buf) {
                break;
            }
            index += 1;
        }
        self.hits.add(hits);
        Ok(done)
    }

    /// Reserves a page's bytes, reclaiming if over budget.
    fn reserve(&self) {
        // Relaxed: accounting only; the budget is soft under races.
        let now = self.bytes.fetch_add(self.ps(), Ordering::Relaxed) + self.ps();
        let budget = self.cfg.budget_bytes as u64;
        if now > budget {
            self.reclaim(now - budget);
        }
    }

    fn unreserve(&self) {
        // Relaxed: accounting only.
        self.bytes.fetch_sub(self.ps(), Ordering::Relaxed);
    }

    /// Removes `page` from `index` of `inode` (§3.1.3): takes `NONEWREFS`
    /// (waiting while another thread holds it, unless the page has left the
    /// slot), then removes the slot if it still holds the page. True if this
    /// call removed it.
    fn remove_page(&self, inode: &Inode, index: u64, page: NonNull<Page>) -> bool {
        let guard = self.domain.pin();
        let in_slot = || {
            inode
                .pages
                .lookup(index, &guard)
                .is_some_and(|h| std::ptr::eq(h, page.as_ptr()))
        };
        loop {
            if !in_slot() {
                return false;
            }
            // SAFETY: the page is in the slot while `guard` is pinned, so the
            // tree's reference keeps it alive.
            if unsafe { page.as_ref() }.try_lock_nonewrefs() {
                break;
            }
            yield_now();
        }
        // NONEWREFS stays set: the page never gains a reference again.
        if inode.pages.remove_if(index, |h| std::ptr::eq(h, page.as_ptr())) {
            self.unreserve();
            self.retire_if_empty(inode);
            true
        } else {
            // Not reachable while removals hold NONEWREFS; keep it safe.
            // SAFETY: as above, the guard keeps the page alive.
            unsafe { page.as_ref() }.release_exclusive();
            false
        }
    }

    /// Takes an inode whose last page is gone out of the inode map, so that
    /// an inode nobody uses costs no memory. Called after every removal of a
    /// page. The gate is closed only if no inserter is inside, and the
    /// emptiness is checked again after closing it: a fill that inserted
    /// before the close is seen by the re-check (the entry then stays, gate
    /// reopened), and a fill that comes after it finds the gate closed and
    /// retries through the map, where it finds no entry (or a new one) once
    /// this one is gone. So no page is ever inserted into an entry that has
    /// left the map, and no page is lost with it.
    fn retire_if_empty(&self, inode: &Inode) {
        if !inode.pages.is_empty() || !inode.gate_try_close_idle() {
            return;
        }
        if !inode.pages.is_empty() {
            inode.gate_reopen();
            return;
        }
        // The gate stays closed for good: this entry takes no page again.
        self.inodes
            .remove_if(inode.ino, |i| std::ptr::eq(Arc::as_ptr(i), inode));
    }

    /// Evicts an unused page (CLOCK): only if the tree's reference is the
    /// only one and no flag is set.
    fn try_evict(&self, inode: &Inode, index: u64, handle: &Page) -> bool {
        if !handle.try_lock_unused() {
            return false;
        }
        if inode.pages.remove_if(index, |h| std::ptr::eq(h, handle)) {
            self.unreserve();
            self.evictions.incr();
            self.retire_if_empty(inode);
            true
        } else {
            handle.release_exclusive();
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
            let pages = inode.pages.gang(hand.1, 32, None, &guard);
            scanned += 1;
            if pages.is_empty() {
                *hand = if ino == u64::MAX { (0, 0) } else { (ino + 1, 0) };
                continue;
            }
            for (index, handle) in pages {
                scanned += 1;
                *hand = if index == u64::MAX {
                    (ino.wrapping_add(1), 0)
                } else {
                    (ino, index + 1)
                };
                if inode.pages.get_tag(index, Tag::ACCESSED) {
                    inode.pages.clear_tag(index, Tag::ACCESSED);
                } else if self.try_evict(inode, index, handle) {
                    freed += ps;
                    if freed >= want {
                        break;
                    }
                }
            }
        }
    }

    /// Updates cached pages with bytes the caller has written through to the
    /// backing file at `offset`. A page that a reader holds, or that is being
    /// filled, is dropped instead (it cannot be changed in place). Short
    /// pages before the write are dropped too: the file grew past them.
    ///
    /// Ordering contract: for one inode, the caller must make its `write`
    /// and `truncate` calls in the order of the backing-file changes they
    /// describe (for example by holding a per-inode lock across the backing
    /// write and this call). The cache cannot see the backing order: if two
    /// overlapping writes reach the file as A then B but the cache as B then
    /// A, the page keeps A's bytes while the file has B's. Fills need no such
    /// care (the invalidation generation handles them).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let Some(inode) = self.inode(ino) else { return };
        inode.invalidate();
        let ps = self.ps();
        let end = offset.saturating_add(data.len() as u64);
        let (first, last) = (offset / ps, (end - 1) / ps);
        self.drop_partial_below(&inode, first);
        let mut next = first;
        while next <= last {
            let guard = self.domain.pin();
            let batch = inode.pages.gang(next, 64, None, &guard);
            let Some(&(max_seen, _)) = batch.last() else { break };
            for (index, handle) in batch {
                if index > last {
                    return;
                }
                let start = index * ps;
                let lo = offset.max(start);
                let hi = end.min(start.saturating_add(ps));
                let src = &data[(lo - offset) as usize..(hi - offset) as usize];
                let page = handle;
                if page.try_lock_unused() {
                    // SAFETY: we hold NONEWREFS with the tree's reference as the
                    // only one: nobody else reads or writes the buffer.
                    let buf = unsafe { page.buffer_mut() };
                    let at = (lo - start) as usize;
                    buf[at..at + src.len()].copy_from_slice(src);
                    // SAFETY: as above.
                    unsafe { page.set_len(page.len().max(at + src.len())) };
                    page.release_exclusive();
                } else {
                    self.remove_page(&inode, index, NonNull::from(handle));
                }
            }
            if max_seen == u64::MAX {
                break;
            }
            next = max_seen + 1;
        }
    }

    /// Drops cached pages past `new_size` and shortens (or, for a file that
    /// grew inside its last page, lengthens with zeros) the page holding the
    /// new end; short pages before it are dropped (the file grew past them).
    /// The ordering contract of [`write`](Self::write) applies.
    pub fn truncate(&self, ino: u64, new_size: u64) {
        let Some(inode) = self.inode(ino) else { return };
        inode.invalidate();
        let ps = self.ps();
        let keep = new_size.div_ceil(ps);
        self.drop_range_in(&inode, keep, u64::MAX);
        let tail = (new_size % ps) as usize;
        let last_full = new_size / ps;
        self.drop_partial_below(&inode, last_full);
        if tail != 0 {
            let guard = self.domain.pin();
            if let Some(handle) = inode.pages.lookup(last_full, &guard) {
                let page = handle;
                if page.try_lock_unused() {
                    // SAFETY: NONEWREFS with only the tree's reference: the
                    // buffer is ours.
                    let buf = unsafe { page.buffer_mut() };
                    buf[tail..].fill(0);
                    // SAFETY: as above.
                    unsafe { page.set_len(tail) };
                    // Tag before releasing, so a concurrent invalidation that
                    // finds the page unlocked also finds the tag.
                    inode.pages.set_tag(last_full, Tag::PARTIAL);
                    page.release_exclusive();
                } else {
                    self.remove_page(&inode, last_full, NonNull::from(handle));
                }
            }
        }
    }

    /// Drops the pages before `below` that are shorter than a page.
    fn drop_partial_below(&self, inode: &Inode, below: u64) {
        let guard = self.domain.pin();
        let mut next = 0;
        while next < below {
            let batch = inode.pages.gang(next, 64, Some(Tag::PARTIAL.idx()), &guard);
            let Some(&(max_seen, _)) = batch.last() else { return };
            for (index, handle) in batch {
                if index >= below {
                    return;
                }
                // A page still FILLING is stale by the generation check of its
                // filler; a filled one is checked by length.
                // A page still FILLING or held exclusively may be short: drop it.
                // Otherwise the length is a hint that can only be stale
                // towards "short" (lengths grow only under NONEWREFS).
                let short = handle.state() & (FILLING | NONEWREFS) != 0 || handle.len() < self.cfg.page_size;
                if short {
                    self.remove_page(inode, index, NonNull::from(handle));
                } else {
                    inode.pages.clear_tag(index, Tag::PARTIAL);
                }
            }
            next = max_seen + 1;
        }
    }

    fn inode(&self, ino: u64) -> Option<Arc<Inode>> {
        let guard = self.domain.pin();
        self.inodes.lookup(ino, &guard).cloned()
    }

    fn drop_range_in(&self, inode: &Inode, first: u64, last: u64) -> DropCounts {
        let mut counts = DropCounts::default();
        let mut next = first;
        while next <= last {
            let guard = self.domain.pin();
            let batch = inode.pages.gang(next, 64, None, &guard);
            let Some(&(max_seen, _)) = batch.last() else { break };
            for (index, handle) in batch {
                if index > last {
                    return counts;
                }
                if self.remove_page(inode, index, NonNull::from(handle)) {
                    counts.pages += 1;
                    counts.bytes += self.ps();
                }
            }
            if max_seen == u64::MAX {
                break;
            }
            next = max_seen + 1;
        }
        counts
    }

    /// Drops the pages of `ino` with index in `first..=last`.
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

    /// Checks the radix-tree invariants of every tree and that the byte
    /// count matches the cached pages. Call it only when quiescent.
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
                pages += inode.pages.len() as u64;
                for (index, handle) in inode.pages.gang(0, usize::MAX, None, &guard) {
                    let s = handle.state();
                    if s & (NONEWREFS | FILLING | FAILED) != 0 {
                        return Err(format!("inode {ino} page {index}: state {s:#x} while quiescent"));
                    }
                }
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
