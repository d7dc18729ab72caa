//! Per-inode page-range locks: the order in which changes of one file reach
//! the source is the order in which they reach the page cache.
//!
//! # What
//! The page cache's ordering contract (`crates/pagecache/src/cache.rs`,
//! `PageCache::write`): for one inode, writes and truncates must update the
//! cache in the order their changes reached the backing file, or a page can
//! keep the bytes of the write that lost the race in the file. rcufs writes
//! the source first and the cache second, two steps; [`RangeLocks`] makes
//! the pair atomic with respect to every other change of the same pages:
//! a WRITE holds the pages it touches from before its `pwrite` until its
//! cache update is done; a truncate, `fallocate`, `copy_file_range` or
//! `O_APPEND` write holds the whole file.
//!
//! This is what lets rcufs ask the kernel for parallel direct writes
//! (`FOPEN_PARALLEL_DIRECT_WRITES`): the kernel then sends non-extending
//! direct writes to one file concurrently, and writes of disjoint pages go
//! on in parallel here too, while writes sharing a page are ordered.
//! Writes through a shared mapping (the kernel's write-back, which no inode
//! lock orders against other writes) take the same locks.
//!
//! # Invariants
//! - Two held ranges of one inode never share a page.
//! - A thread holds ranges of at most two inodes at once (a copy), and
//!   takes them in inode order, so waits cannot form a cycle.
//! - An inode's entry exists only while a range of it is held or waited
//!   for (memory follows what is in use).
//!
//! # Algorithm
//! A table of 64 shards by inode number, each a mutex over a map from
//! inode to the ranges held on it (a short list), with one condition
//! variable per shard. `lock` waits while a held range overlaps its own,
//! then adds it; the guard's drop removes it and wakes the shard's waiters.
//! Like a file's `i_rwsem`, with the granularity of pages; the kernel's own
//! range locks (`fs/fuse` takes none; XFS's and Lustre's extent locks) do
//! the same. A wait is bounded by the holder's `pwrite` and cache update.

use std::collections::HashMap;

use parking_lot::{Condvar, Mutex};

const SHARDS: usize = 64;

/// An inclusive range of page indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pages {
    first: u64,
    last: u64,
}

impl Pages {
    fn overlaps(self, o: Pages) -> bool {
        self.first <= o.last && o.first <= self.last
    }
}

#[derive(Default)]
struct Shard {
    held: Mutex<HashMap<u64, Vec<Pages>>>,
    freed: Condvar,
}

/// The range locks of every inode of the mount.
pub struct RangeLocks {
    shards: Box<[Shard]>,
}

impl Default for RangeLocks {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

impl std::fmt::Debug for RangeLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeLocks").field("held", &self.held()).finish()
    }
}

/// A held range; dropping it releases the range.
#[must_use = "the range is released when the guard is dropped"]
pub struct RangeGuard<'a> {
    locks: &'a RangeLocks,
    ino: u64,
    pages: Pages,
}

impl RangeLocks {
    fn shard(&self, ino: u64) -> &Shard {
        // Node ids are sequential: the low bits spread them.
        &self.shards[(ino as usize) % SHARDS]
    }

    /// Waits until no held range of `ino` shares a page with
    /// `first..=last`, then holds that range until the guard is dropped.
    pub fn lock(&self, ino: u64, first: u64, last: u64) -> RangeGuard<'_> {
        let pages = Pages {
            first: first.min(last),
            last: last.max(first),
        };
        let shard = self.shard(ino);
        let mut held = shard.held.lock();
        while held.get(&ino).is_some_and(|v| v.iter().any(|&h| h.overlaps(pages))) {
            shard.freed.wait(&mut held);
        }
        held.entry(ino).or_default().push(pages);
        RangeGuard {
            locks: self,
            ino,
            pages,
        }
    }

    /// Holds every page of `ino`.
    pub fn lock_all(&self, ino: u64) -> RangeGuard<'_> {
        self.lock(ino, 0, u64::MAX)
    }

    /// Ranges held now, over all inodes.
    pub fn held(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.held.lock().values().map(Vec::len).sum::<usize>())
            .sum()
    }

    /// Inodes with an entry now (held or being released).
    pub fn inodes(&self) -> usize {
        self.shards.iter().map(|s| s.held.lock().len()).sum()
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let shard = self.locks.shard(self.ino);
        let mut held = shard.held.lock();
        if let Some(v) = held.get_mut(&self.ino) {
            if let Some(i) = v.iter().position(|&p| p == self.pages) {
                v.swap_remove(i);
            }
            if v.is_empty() {
                held.remove(&self.ino);
            }
        }
        drop(held);
        shard.freed.notify_all();
    }
}

#[cfg(test)]
mod tests;
