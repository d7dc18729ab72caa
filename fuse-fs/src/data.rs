//! The data layer: every read of the filesystem goes through the page cache
//! (`crates/pagecache`).
//!
//! # Design
//! A READ of `size` bytes at `offset` is one ranged read of the page cache
//! (`PageCache::read_refs`): one descent finds the first cached folio, each
//! folio the range covers is taken with one speculative reference (not one
//! per page), and the walk moves to the next folio within the leaf. The
//! answer is the list of those folio slices ([`PinnedRead`]): the FUSE
//! adapter writes them to the kernel as they are (`pinned.rs`). A folio
//! shorter than its size is the end of the file at fill time, so the read
//! stops there.
//!
//! A miss is filled with one `pread` of the source into one folio: for a
//! random read, the pages the request needs (rounded up to a power of two);
//! for a sequential reader, a window that doubles per miss up to 64 pages
//! (256 KiB), the page cache's readahead (`crates/pagecache/src/readahead.rs`,
//! the kernel's `ondemand_readahead` in folio orders). So a sequential
//! read of a cold file is a few large `pread`s, and a hot 1 MiB read pins a
//! handful of folios, not 256 pages. Concurrent readers of a missing folio
//! wait for its one fill (the page cache's protocol), so the source is read
//! once. Every byte a fill caches is read inside that fill, while its folio
//! is in the cache, so the page cache's generation check (a write, truncate
//! or drop of the inode during the fill discards it) covers all of them.
//!
//! Writes are cached write-through ([`Data::wrote`]): after the source took
//! the bytes, the cached folios they touch are updated (copy-on-write) and
//! the pages they cover whole are cached with them, so reading back what
//! was just written is a hit; a copy caches its destination the same way
//! ([`Data::copied`]).
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

use pagecache::{FillOrder, PageCache};

use crate::error::FsResult;
use crate::pinned::PinnedRead;
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

thread_local! {
    /// The folio slices one READ collects, before they move into its
    /// answer (kept per worker, so that a READ allocates only the answer).
    static SLICES: std::cell::RefCell<Vec<pagecache::FolioSlice>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Unit tests: the folio slices this thread's READs still hold between
/// calls (none, however the last one ended).
#[cfg(test)]
pub(crate) fn slices_held() -> usize {
    SLICES.with_borrow(Vec::len)
}

/// A READ's list of folio slices, emptied when dropped.
struct ClearOnDrop<'a>(&'a mut Vec<pagecache::FolioSlice>);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// The page cache of the mount.
pub struct Data {
    cache: PageCache,
    budget: u64,
}

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
        }
    }

    fn ps(&self) -> u64 {
        self.cache.page_size() as u64
    }

    /// Reads `size` bytes at `offset` of file `id` (open as `fd`): pins
    /// the cached folios that hold the range and returns them with the
    /// bytes of each the range covers, for a reply without a copy
    /// (`pinned.rs`); fewer bytes at the end of the file. Misses are filled
    /// from `fd`, one `pread` per folio (see the module docs), the folios
    /// kept within `file_size` (the size last seen: a hint that bounds
    /// readahead, not the read).
    pub fn read(&self, id: u64, fd: BorrowedFd<'_>, offset: u64, size: u32, file_size: u64) -> FsResult<PinnedRead> {
        let ps = self.ps();
        SLICES.with_borrow_mut(|slices| {
            slices.clear();
            // Empties the list however the call ends: a fill that panics
            // unwinds past the `drain` below (the adapter answers EIO and
            // the worker goes on), and the references collected before it
            // would otherwise stay held until this worker's next READ,
            // keeping their folios from reclaim.
            let slices = ClearOnDrop(slices);
            let read = self.cache.read_refs(
                id,
                offset,
                size as usize,
                FillOrder::ReadaheadWithin {
                    end: file_size.div_ceil(ps),
                },
                slices.0,
                |first, buf: &mut [u8]| {
                    crate::fault::fill_hook(first);
                    let n = sys::pread_full(fd, buf, first * ps)?;
                    // A slow fill widens its race with writes (fault tests).
                    crate::fault::cache_jitter();
                    Ok::<usize, crate::error::FsError>(n)
                },
            );
            // On an error too, so that no pin outlives the call.
            let out = PinnedRead::from_folios(slices.0.drain(..));
            read.map(|_| out)
        })
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
            let from = self.read(
                src,
                src_fd,
                off_in + (start - off_out),
                len as u32,
                off_in + (start - off_out) + len,
            )?;
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
        self.cache.truncate(id, new);
    }

    /// Bytes from `offset` on may have changed.
    pub fn invalidate_from(&self, id: u64, offset: u64) {
        self.cache.drop_range(id, offset / self.ps(), u64::MAX);
    }

    /// Bytes `offset..offset+len` may have changed.
    pub fn invalidate_range(&self, id: u64, offset: u64, len: u64) {
        if len > 0 {
            let ps = self.ps();
            self.cache
                .drop_range(id, offset / ps, offset.saturating_add(len - 1) / ps);
        }
    }

    /// Drops every page of `id`.
    pub fn drop_inode(&self, id: u64) -> Dropped {
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
        let frames = pagecache::frame_usage();
        serde_json::json!({"pages": s.pages, "bytes_cached": s.bytes_cached, "budget_bytes": self.budget,
            "hits": s.hits, "misses": s.misses, "fills": s.fills, "evictions": s.evictions,
            "inodes": self.cache.inode_count() as u64,
            "frame_chunk_bytes": frames.chunk_bytes, "frame_used_bytes": frames.used_bytes})
    }
}
