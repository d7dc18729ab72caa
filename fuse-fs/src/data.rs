//! The data layer: every read of the filesystem goes through the page cache
//! (`crates/pagecache`).
//!
//! # Design
//! A READ of `size` bytes at `offset` becomes one `get_or_fill` per page it
//! covers; a missing page is filled with one `pread` of a whole page on the
//! open file's descriptor, and concurrent readers of a missing page wait for
//! that one fill (the page cache's protocol), so the source is read once.
//! The answer is the list of pinned pages with the byte range of each
//! ([`PinnedRead`]): the FUSE adapter writes them to the kernel as they are,
//! without copying them into a reply buffer. A page shorter than the page
//! size is the end of the file at fill time, so the read stops there.
//!
//! Writes are cached write-through ([`Data::wrote`]): after the source took
//! the bytes, the cached pages they touch are updated and the pages they
//! cover whole are cached with them, so reading back what was just written
//! is a hit; a copy caches its destination the same way ([`Data::copied`]).
//! A miss is filled with one `pread` of the source for the missing page,
//! the missing pages after it in the request and, for a sequential reader,
//! the readahead window (`readahead.rs`). The page cache's fill protocol
//! protects only the page whose fill does the read (its generation check
//! covers reads made while the page is in the cache); the run's other
//! pages are cached from bytes read before they entered it, so they are
//! checked against a count of changes kept here (`Data::changes`), moved
//! by every change before it touches the cache, and a page whose check
//! fails leaves the cache before anyone can read it (see `cache_run`).
//!
//! # Invariants
//! - The cache never holds bytes the source does not (after the caller's
//!   write-through): writes call [`Data::wrote`] only after the source took
//!   the bytes, holding the written pages' range lock (`range_lock.rs`)
//!   across both; size changes call [`Data::resized`]; anything the cache
//!   cannot keep exact is dropped.
//! - No lock of this layer covers more than one page-cache tree node: the
//!   cached read path is the page cache's lock-free lookup (seed 003, "Recent
//!   HAMMER SMP performance work").

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use pagecache::PageCache;

use crate::error::FsResult;
use crate::pinned::PinnedRead;
use crate::readahead::Readahead;
use crate::sys;

/// The pages a write holds (see [`Data::write_pages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritePages {
    /// The first page index.
    pub first: u64,
    /// The last page index (`u64::MAX`: to the end, whatever it becomes).
    pub last: u64,
}

/// Pages and bytes dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct Dropped {
    /// Pages.
    pub pages: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The page cache of the mount.
pub struct Data {
    cache: PageCache,
    budget: u64,
    /// Moves before every change of cached pages that follows a change of
    /// the source (writes, copies, size changes, invalidations, drops):
    /// a readahead that read the source before a change and cached what it
    /// read after it undoes that (see [`Data::read`]).
    changes: AtomicU64,
}

thread_local! {
    /// The buffer one source read of a run of pages lands in (per worker).
    static RUN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most pages read from the source in one fill (the request's missing
/// run plus the readahead window).
const MAX_RUN: u64 = 2 * crate::readahead::MAX_PAGES;

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Data").field("budget", &self.budget).finish()
    }
}

impl Data {
    /// A cache of `budget` bytes.
    pub fn new(budget: u64) -> Self {
        let config = pagecache::Config {
            budget_bytes: budget as usize,
            ..pagecache::Config::default()
        };
        Self {
            cache: PageCache::new(config),
            budget,
            changes: AtomicU64::new(0),
        }
    }

    fn ps(&self) -> u64 {
        self.cache.page_size() as u64
    }

    /// Reads `size` bytes at `offset` of file `id` (open as `fd`): pins the
    /// cached page of each page-sized piece of the range and returns the
    /// pinned pages with the byte range of each, for a reply without a copy
    /// (`pinned.rs`). A page shorter than the page size is the end of the
    /// file at fill time: the read stops there.
    ///
    /// A missing page is filled with one `pread` of the source that also
    /// covers the missing pages after it in the request, and, for a
    /// sequential reader (`ra`), the readahead window past the request
    /// (`readahead.rs`); those other pages are cached from that read.
    pub fn read(
        &self,
        id: u64,
        fd: BorrowedFd<'_>,
        offset: u64,
        size: u32,
        ra: Option<&Readahead>,
    ) -> FsResult<PinnedRead> {
        let ps = self.ps();
        let end = offset.saturating_add(size as u64);
        let first = offset / ps;
        let req_pages = end.div_ceil(ps).saturating_sub(first);
        let ahead = match ra {
            Some(r) if size > 0 => r.advise(offset, end, req_pages),
            _ => 0,
        };
        let mut out = PinnedRead::with_capacity(req_pages as usize);
        let mut index = first;
        while index * ps < end {
            let start = index * ps;
            // Filled by the closure on a miss: the run's length in pages,
            // the bytes read and the change count before the read.
            let mut run: Option<(u64, usize, u64)> = None;
            let page = self.cache.get_or_fill(id, index, |buf: &mut [u8]| {
                let pages = (end.div_ceil(ps) - index + ahead).clamp(1, MAX_RUN);
                // SeqCst: see `changed`.
                let seq = self.changes.load(Ordering::SeqCst);
                RUN.with_borrow_mut(|b| {
                    let want = (pages * ps) as usize;
                    if b.len() < want {
                        b.resize(want, 0);
                    }
                    let n = sys::pread_full(fd, &mut b[..want], start)?;
                    let here = n.min(buf.len());
                    buf[..here].copy_from_slice(&b[..here]);
                    run = Some((pages, n, seq));
                    Ok::<usize, crate::error::FsError>(here)
                })
            })?;
            if let Some((pages, n, seq)) = run
                && pages > 1
                && n > ps as usize
            {
                self.cache_run(id, index, n, seq);
            }
            let len = page.len();
            let from = (offset.max(start) - start) as usize;
            if from >= len {
                break;
            }
            let to = (len as u64).min(end - start) as usize;
            out.push(page, from..to);
            if (len as u64) < ps {
                break;
            }
            index += 1;
        }
        Ok(out)
    }

    /// Caches the pages after `index` that the run read just put into this
    /// thread's buffer (`n` bytes from page `index` on). Those bytes were
    /// read before the pages entered the cache, so the page cache's own
    /// fill check does not cover them: each page checks, while it is still
    /// being filled (invisible: a reader that finds it waits), that no
    /// change reached the cache since `seq` was taken before the read, and
    /// otherwise fails its fill (the page leaves the cache, its waiters
    /// read it again) and ends the run.
    fn cache_run(&self, id: u64, index: u64, n: usize, seq: u64) {
        crate::fault::cache_jitter();
        let ps = self.ps() as usize;
        RUN.with_borrow(|b| {
            for (k, chunk) in b[..n].chunks(ps).enumerate().skip(1) {
                let fresh = self.cache.get_or_fill(id, index + k as u64, |buf: &mut [u8]| {
                    buf[..chunk.len()].copy_from_slice(chunk);
                    // SeqCst fence, then the load: see `changed`. The page
                    // is in the cache (filling) before this load.
                    fence(Ordering::SeqCst);
                    if self.changes.load(Ordering::SeqCst) == seq {
                        Ok(chunk.len())
                    } else {
                        Err(())
                    }
                });
                if fresh.is_err() {
                    break;
                }
            }
        });
    }

    /// Records a change before the cache is updated for it.
    ///
    /// SeqCst, with a fence on each side: a readahead puts a page into the
    /// cache (filling) and then loads `changes`; a change of the source
    /// bumps `changes` and then looks for cached pages to update or drop.
    /// This is a store-then-load on each side (Dekker), which acquire and
    /// release cannot order: with both fences sequentially consistent,
    /// either the readahead sees the bump (and fails that page's fill) or
    /// the change's cache update finds the page (and drops it: a filling
    /// page cannot be written in place), so no page keeps bytes read
    /// before the change. A reader that found such a page while it was
    /// filling did so before the change's cache update, that is before the
    /// change was acknowledged: its read overlapped the change.
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The pages a write of `len` bytes at `offset` must hold in the range
    /// locks (`range_lock.rs`) from before its source write until its cache
    /// update, given the file's size as last seen: the pages it writes, and
    /// for a write that may change the end of file (it ends past `size`, or
    /// `append`) every page from the old end on.
    pub fn write_pages(&self, offset: u64, len: u64, size: u64, append: bool) -> WritePages {
        let ps = self.ps();
        let end = offset.saturating_add(len);
        if append {
            return WritePages {
                first: 0,
                last: u64::MAX,
            };
        }
        if end > size {
            return WritePages {
                first: offset.min(size) / ps,
                last: u64::MAX,
            };
        }
        WritePages {
            first: offset / ps,
            last: end.saturating_sub(1).max(offset) / ps,
        }
    }

    /// `data` was written at `offset` and the source took it; the file is
    /// now `size` bytes long. Write-through: cached pages the write touches
    /// are updated (or dropped, if a reader holds them), and the pages it
    /// wrote whole are cached with its bytes, so that reading back what was
    /// just written is a hit (seed 001's `cp`). With `tail` (the caller
    /// holds every page from the write on), so is the page holding the new
    /// end of file when the write ends the file there.
    ///
    /// The caller holds the written pages' range lock from before the
    /// source write (`write_pages`), so no other change of these pages
    /// reaches the source or the cache in between; a reader's fill that
    /// raced the source write is caught by the page cache's generation.
    /// Pages are inserted within the budget (CLOCK reclaim makes room).
    pub fn wrote(&self, id: u64, offset: u64, data: &[u8], size: u64, tail: bool) {
        self.changed();
        self.cache.write(id, offset, data);
        let ps = self.ps();
        let end = offset.saturating_add(data.len() as u64);
        let mut index = offset.div_ceil(ps);
        while index * ps < end {
            let start = index * ps;
            let n = if end - start >= ps {
                ps
            } else if tail && end == size {
                end - start
            } else {
                break;
            };
            let bytes = &data[(start - offset) as usize..(start - offset + n) as usize];
            let _ = self.cache.get_or_fill(id, index, |buf: &mut [u8]| {
                buf[..bytes.len()].copy_from_slice(bytes);
                Ok::<usize, std::convert::Infallible>(bytes.len())
            });
            index += 1;
        }
    }

    /// The source copied `n` bytes of file `src` (open as `src_fd`) at
    /// `off_in` to file `dst` at `off_out` (`copy_file_range`), and `dst`
    /// is now `size` bytes long. Caches the copy as a write of those bytes
    /// would be (see [`Data::wrote`]): each destination page the copy
    /// covers whole (and, with `tail`, the one ending the file) is filled
    /// from the source's range read through this cache, which caches the
    /// source's pages too, as the kernel's page cache does for a copy.
    /// The caller holds `dst`'s whole range and `src`'s copied range in the
    /// range locks from before the copy, so both still hold what was copied.
    #[allow(clippy::too_many_arguments)]
    pub fn copied(
        &self,
        src: u64,
        src_fd: BorrowedFd<'_>,
        off_in: u64,
        dst: u64,
        off_out: u64,
        n: u64,
        size: u64,
        tail: bool,
    ) -> FsResult<()> {
        self.changed();
        let ps = self.ps();
        let end = off_out.saturating_add(n);
        let mut index = off_out.div_ceil(ps);
        while index * ps < end {
            let start = index * ps;
            let len = if end - start >= ps {
                ps
            } else if tail && end == size {
                end - start
            } else {
                break;
            };
            let from = self.read(src, src_fd, off_in + (start - off_out), len as u32, None)?;
            if from.len() as u64 != len {
                break; // The source is shorter now: cache nothing more.
            }
            let _ = self.cache.get_or_fill(dst, index, |buf: &mut [u8]| {
                let mut at = 0;
                for s in from.slices() {
                    buf[at..at + s.len()].copy_from_slice(s);
                    at += s.len();
                }
                Ok::<usize, std::convert::Infallible>(at)
            });
            index += 1;
        }
        Ok(())
    }

    /// The file's size changed from `old` to `new` through the mount.
    pub fn resized(&self, id: u64, _old: u64, new: u64) {
        // The page cache shortens or zero-extends the page holding the new end.
        self.changed();
        self.cache.truncate(id, new);
    }

    /// Bytes from `offset` on may have changed.
    pub fn invalidate_from(&self, id: u64, offset: u64) {
        self.changed();
        self.cache.drop_range(id, offset / self.ps(), u64::MAX);
    }

    /// Bytes `offset..offset+len` may have changed.
    pub fn invalidate_range(&self, id: u64, offset: u64, len: u64) {
        if len > 0 {
            self.changed();
            let ps = self.ps();
            self.cache
                .drop_range(id, offset / ps, offset.saturating_add(len - 1) / ps);
        }
    }

    /// Drops every page of `id`.
    pub fn drop_inode(&self, id: u64) -> Dropped {
        self.changed();
        let d = self.cache.drop_inode(id);
        Dropped {
            pages: d.pages,
            bytes: d.bytes,
        }
    }

    /// Bytes of budget not used by cached pages.
    pub fn room(&self) -> u64 {
        self.budget.saturating_sub(self.cache.stats().bytes_cached)
    }

    /// The page size (every cached page costs this much of the budget).
    pub fn page_size(&self) -> u64 {
        self.ps()
    }

    /// Inodes with a page-cache entry.
    pub fn inode_count(&self) -> usize {
        self.cache.inode_count()
    }

    /// The cache's counters as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        let s = self.cache.stats();
        serde_json::json!({"pages": s.pages, "bytes_cached": s.bytes_cached, "budget_bytes": self.budget,
            "hits": s.hits, "misses": s.misses, "fills": s.fills, "evictions": s.evictions,
            "inodes": self.cache.inode_count() as u64})
    }
}
