//! Writes and truncations that reach the cache after the backing file took
//! them: the cached folios they touch are replaced by updated copies
//! (copy-on-write), and [`PageCache::write_through`] also inserts the
//! folios a write covers completely, so that reading back what was just
//! written is a hit.
//!
//! # Copy-on-write
//! A folio's bytes never change after its fill (`folio.rs`), so that
//! readers may copy them without a reference. A write over a folio that
//! nobody holds (only the tree's reference: the "in place" case of the
//! cache before folios) builds a new folio of the same order and pages
//! (the old bytes, then the written ones; the valid length grown to cover
//! them), and `RadixTree::replace_with` stores it in every slot of the old
//! one's run under the leaf lock, only if the slot still holds the old one
//! and no remover has claimed it (`NONEWREFS` clear): a drop or an
//! eviction that claimed the folio first wins, and a drop that finds its
//! folio replaced removes the replacement (`remove_at`). Two writes to
//! different pages of one folio may run at once (the ordering contract
//! below is per byte, and the filesystem locks pages, not folios): the one
//! whose replacement finds the other's copy in the slot looks the folio up
//! again and writes into that copy, so neither write is lost (loom model
//! `cow_write_vs_cow_write_same_folio`). A folio that
//! someone holds (a `PageRef`, a `FolioSlice`), one still `FILLING` (its
//! fill is stale by the generation check) and one being removed are
//! removed instead, as the cache always did with pages it could not change
//! in place; holders keep the old bytes either way. A truncation replaces
//! the folio holding the new end the same way (a copy whose valid length
//! ends there, zeros after; or drops it if held), and drops every folio
//! past it.
//!
//! # Ordering contract
//! For one inode, the caller makes its `write`, `write_through` and
//! `truncate` calls in the order of the backing-file changes they describe
//! (for example by holding a lock on the written bytes, or on the whole
//! file for a truncation, across the backing write and this call); writes
//! of different bytes need no order between them. The cache cannot see the backing order: if two overlapping
//! writes reach the file as A then B but the cache as B then A, the cache
//! keeps A's bytes while the file has B's. Fills need no such care: each of
//! these calls bumps the inode's generation before touching a folio, and a
//! fill that began before the bump is not kept (see `cache.rs`).
//!
//! # Write-through
//! After the update, `write_through` inserts new folios for the pages the
//! write covers completely (and the partial last page when the caller says
//! the write ends the file), as the largest aligned folios that fit the
//! range and cover no cached page, within the budget (reclaiming as a fill
//! does, and stopping rather than going over it). A fill racing with the
//! insertion either inserted first (its folio then stays: it read the
//! source after the bump, so after the write) or finds the pages cached.

use super::{Inode, PageCache};

/// What [`PageCache::write_folio`] did with the folio it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Written {
    /// Replaced by the updated copy, or removed (held, filling, claimed).
    Done,
    /// Not in its slot any more, or claimed by a remover: look again.
    Raced,
}
use crate::folio::{FILLING, Folio, NONEWREFS, ready_item};
use crate::radix::Tag;

impl PageCache {
    /// Updates cached pages with bytes the caller has written through to the
    /// backing file at `offset`: each cached folio the write touches is
    /// replaced by an updated copy, unless someone holds it (a
    /// [`PageRef`](crate::PageRef) or [`FolioSlice`](crate::FolioSlice)) or it is being filled: then it
    /// is dropped (it cannot change under its holders; a fill read the file
    /// before the write). Short folios before the write are dropped too:
    /// the file grew past them. Pages not cached stay uncached (see
    /// [`write_through`](Self::write_through)).
    ///
    /// Ordering contract: for one inode, the caller must make its `write`,
    /// `write_through` and `truncate` calls in the order of the
    /// backing-file changes they describe (for example by holding a lock on
    /// the written bytes across the backing write and this call; writes of
    /// different bytes may come in any order, also at once). The cache
    /// cannot see the backing order: if two overlapping writes reach the
    /// file as A then B but the cache as B then A, the cache keeps A's
    /// bytes while the file has B's. Fills need no such care (the
    /// invalidation generation handles them).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let Some(inode) = self.inode(ino) else { return };
        inode.invalidate();
        self.update_cached(&inode, offset, data);
    }

    /// As [`write`](Self::write), then also caches what the write makes
    /// known: every page it covers completely that is not cached is
    /// inserted, as the largest aligned folios that fit (at most
    /// [`max_order`](Self::max_order)) and cover no cached page; and, if
    /// `file_size` (the file's size after the write) is given and the write
    /// ends the file, the last page too, as a short page whose valid bytes
    /// end with the file, if the write covers it from its start. Inserted
    /// only within the budget: if reclaim cannot make room, the rest is not
    /// inserted. The ordering contract of `write` applies.
    pub fn write_through(&self, ino: u64, offset: u64, data: &[u8], file_size: Option<u64>) {
        if data.is_empty() {
            return;
        }
        let inode = self.inode_for_insert(ino);
        inode.invalidate();
        self.update_cached(&inode, offset, data);
        let ps = self.ps();
        let end = offset.saturating_add(data.len() as u64);
        let first = offset.div_ceil(ps);
        let mut stop = end / ps;
        if file_size == Some(end) && !end.is_multiple_of(ps) && offset <= stop * ps {
            stop += 1; // The partial last page: the write ends the file.
        }
        let mut index = first;
        while index < stop {
            let fits = (0..=self.max_order)
                .rev()
                .find(|&o| index.is_multiple_of(1 << o) && index + (1 << o) <= stop)
                .unwrap_or(0);
            let order = self.fit_order(&inode, index, fits);
            if inode.pages.lookup(index, &self.domain.pin()).is_some() {
                index += 1; // Cached (or being filled) already.
                continue;
            }
            match self.insert_written(&inode, index, order, offset, data, end) {
                Insert::Done => index += 1 << order,
                Insert::Occupied => index += 1,
                Insert::Stop => break,
            }
        }
        self.retire_if_empty(&inode);
    }

    /// Inserts a folio of `2^order` pages from `index` holding the written
    /// bytes `data` (at `offset`, ending at `end`, which is the end of the
    /// file if it falls inside the folio).
    fn insert_written(&self, inode: &Inode, index: u64, order: u32, offset: u64, data: &[u8], end: u64) -> Insert {
        let ps = self.ps();
        let pages = 1u64 << order;
        if !self.try_reserve(pages) {
            return Insert::Stop;
        }
        let folio = Folio::new_unpublished(index, order, self.cfg.page_size);
        // SAFETY: we built the folio and have not published it.
        let f = unsafe { folio.as_ref() };
        let start = index * ps;
        let len = ((end - start) as usize).min(f.capacity());
        // SAFETY: as above.
        unsafe {
            let from = (start - offset) as usize;
            f.buffer_mut()[..len].copy_from_slice(&data[from..from + len]);
            f.set_len(len);
        }
        let inserted = if inode.gate_enter() {
            let r = inode.pages.insert_run_with(index, order, folio, |p, _| ready_item(p));
            inode.gate_exit();
            if r.is_ok() { Insert::Done } else { Insert::Occupied }
        } else {
            Insert::Stop // The inode is being dropped.
        };
        if !matches!(inserted, Insert::Done) {
            // SAFETY: the insert failed (or was not tried), so no other
            // thread saw the folio.
            unsafe { Folio::free_unshared(folio) };
            self.unreserve(pages);
            return inserted;
        }
        if len < f.capacity() {
            inode.pages.set_tag(index, Tag::PARTIAL);
        }
        Insert::Done
    }

    /// Replaces every cached folio that `data` at `offset` touches by an
    /// updated copy (see the module docs); drops the short folios that end
    /// before it.
    fn update_cached(&self, inode: &Inode, offset: u64, data: &[u8]) {
        let ps = self.ps();
        let end = offset.saturating_add(data.len() as u64);
        let (first, last) = (offset / ps, (end - 1) / ps);
        self.drop_partial_below(inode, first);
        let mut next = first;
        while next <= last {
            let guard = self.domain.pin();
            let Some(&(_, folio)) = inode.pages.gang_runs(next, 1, None, &guard).first() else {
                return;
            };
            if folio.index() > last {
                return;
            }
            if self.write_folio(inode, folio, offset, data) == Written::Raced {
                // Another write replaced the folio first (one of other
                // pages of it: the caller's lock covers only this write's
                // pages), or it was removed: write into what is there now.
                continue;
            }
            next = folio.end();
            if next == 0 {
                return; // The folio ended the index space.
            }
        }
    }

    /// Replaces `folio` (found under a guard the caller holds) by a copy
    /// with `data` at `offset` written into it; removes it instead if it is
    /// held, still filling or being removed. [`Written::Raced`] if the
    /// folio was no longer in its slot (replaced by another write's copy,
    /// or removed) or a remover claimed it: the caller looks again.
    pub(super) fn write_folio(&self, inode: &Inode, folio: &Folio, offset: u64, data: &[u8]) -> Written {
        // Acquire: pairs with the filler's Release, for the copy below.
        let state = folio.state();
        if state & (FILLING | NONEWREFS) != 0 || !folio.is_ready() || folio.is_held() {
            self.remove_at(inode, folio.index());
            return Written::Done;
        }
        let ps = self.ps();
        let start = folio.index() * ps;
        let end = offset + data.len() as u64;
        let lo = offset.max(start);
        let hi = end.min(start + folio.capacity() as u64);
        let at = (lo - start) as usize;
        let src = &data[(lo - offset) as usize..(hi - offset) as usize];
        // SAFETY: the fill is over (checked above) and the caller's guard
        // keeps the folio alive.
        let old = unsafe { folio.bytes() };
        let len = old.len().max(at + src.len());
        let replaced = self.replace_folio(inode, folio, len, |buf| {
            buf[..old.len()].copy_from_slice(old);
            buf[at..at + src.len()].copy_from_slice(src);
        });
        if replaced { Written::Done } else { Written::Raced }
    }

    /// Replaces `folio` by a new folio of the same pages with valid length
    /// `len`, whose bytes `build` writes into a zeroed buffer; keeps the
    /// PARTIAL tag right. Returns false, changing nothing, if the folio was
    /// removed, replaced or claimed by a remover meanwhile: a remover wins;
    /// a write whose folio another write replaced first (writes to
    /// different pages of one folio may run at once: the ordering contract
    /// is per byte) writes into the replacement instead (`update_cached`);
    /// a truncation runs alone (the contract), so only a remover beats it.
    fn replace_folio(&self, inode: &Inode, folio: &Folio, len: usize, build: impl FnOnce(&mut [u8])) -> bool {
        let new = Folio::new_unpublished(folio.index(), folio.order(), self.cfg.page_size);
        // SAFETY: we built `new` and have not published it.
        unsafe {
            let n = new.as_ref();
            build(n.buffer_mut());
            n.set_len(len);
        }
        let claimed = |h: &Folio| std::ptr::eq(h, folio) && h.state() & NONEWREFS == 0;
        if inode
            .pages
            .replace_with(folio.index(), claimed, new, |p, _| ready_item(p))
            .is_err()
        {
            // SAFETY: the replacement failed, so no other thread saw `new`.
            unsafe { Folio::free_unshared(new) };
            return false;
        }
        if len < folio.capacity() {
            inode.pages.set_tag(folio.index(), Tag::PARTIAL);
        } else {
            inode.pages.clear_tag(folio.index(), Tag::PARTIAL);
        }
        true
    }

    /// Drops cached pages past `new_size` and shortens (or, for a file that
    /// grew inside its last folio, lengthens with zeros) the folio holding
    /// the new end, by copy-on-write, or drops it if someone holds it;
    /// short folios before it are dropped (the file grew past them). The
    /// ordering contract of [`write`](Self::write) applies.
    pub fn truncate(&self, ino: u64, new_size: u64) {
        let Some(inode) = self.inode(ino) else { return };
        inode.invalidate();
        let ps = self.ps();
        let keep = new_size.div_ceil(ps);
        self.drop_from(&inode, keep);
        if new_size == 0 {
            return;
        }
        let last = (new_size - 1) / ps;
        let guard = self.domain.pin();
        let Some(folio) = inode.pages.lookup(last, &guard) else {
            drop(guard);
            self.drop_partial_below(&inode, last);
            return;
        };
        self.drop_partial_below(&inode, folio.index());
        if folio.state() & (FILLING | NONEWREFS) != 0 || !folio.is_ready() || folio.is_held() {
            self.remove_at(&inode, folio.index());
            return;
        }
        let len = (new_size - folio.index() * ps) as usize;
        if len == folio.len() {
            return;
        }
        // SAFETY: the fill is over (checked above) and `guard` keeps it.
        let old = unsafe { folio.bytes() };
        let kept = len.min(old.len());
        // A remover that beat it leaves nothing to shorten.
        let _ = self.replace_folio(&inode, folio, len, |buf| buf[..kept].copy_from_slice(&old[..kept]));
    }

    /// Drops every folio that starts at or after page `keep` (a folio that
    /// starts before it stays, for `truncate` to shorten).
    fn drop_from(&self, inode: &Inode, keep: u64) {
        let mut next = keep;
        loop {
            let (index, end) = {
                let guard = self.domain.pin();
                let Some(&(index, folio)) = inode.pages.gang_runs(next, 1, None, &guard).first() else {
                    return;
                };
                (if folio.index() >= keep { Some(index) } else { None }, folio.end())
            };
            if let Some(index) = index {
                self.remove_at(inode, index);
            }
            if end == 0 {
                return; // The folio ended the index space.
            }
            next = end;
        }
    }

    /// Drops the folios that end at or before page `below` and are shorter
    /// than their size (the file grew past them).
    pub(super) fn drop_partial_below(&self, inode: &Inode, below: u64) {
        let guard = self.domain.pin();
        let mut next = 0;
        while next < below {
            let batch = inode.pages.gang_runs(next, 64, Some(Tag::PARTIAL.idx()), &guard);
            if batch.is_empty() {
                return;
            }
            for (index, folio) in batch {
                next = folio.end();
                if index >= below || next == 0 || next > below {
                    return;
                }
                // A folio still FILLING or held exclusively may be short:
                // drop it. Otherwise its length is exact (it never changes
                // after the fill).
                let short = folio.state() & (FILLING | NONEWREFS) != 0 || folio.len() < folio.capacity();
                if short {
                    self.remove_at(inode, index);
                } else {
                    inode.pages.clear_tag(index, Tag::PARTIAL);
                }
            }
        }
    }
}

/// How an insertion of written bytes went.
enum Insert {
    Done,
    /// Some page of the folio is cached or being filled.
    Occupied,
    /// No more insertions: the budget has no room even after reclaim, or
    /// the inode is being dropped.
    Stop,
}
