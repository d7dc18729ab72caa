//! Kept directory listings: a listing costs an open, reads and a close in
//! the source (three round trips over sshfs; on a local source, system
//! calls, and with `--kernel-cache` the READDIRPLUS and READDIR round trips
//! that the kernel's own copy of a kept listing saves).
//!
//! # What
//! OPENDIR reads the whole listing of a directory from the source at once
//! (`getdents64` until the end) and keeps it on the directory's inode with
//! the time it was read. Another OPENDIR of the same directory is served
//! from that listing without reading the source: with `--coherence ttl`
//! within the revalidation interval *R*; with `watch` while the source's
//! stamp of the directory (one `fstat` at the OPENDIR) is the one it was
//! read under and no event for a name in it has arrived.
//!
//! READDIR and READDIRPLUS of an open handle read the snapshot the handle
//! was opened with, at offsets of its own (the entry's index + 1), as a
//! directory stream keeps reading its own snapshot; a READDIR from offset
//! 0 first makes the handle read the directory's listing of now if its
//! snapshot has been replaced or forgotten since (`Fs::readdir`; POSIX's
//! `rewinddir`). READDIRPLUS answers each entry through LOOKUP, so the
//! names and attributes it returns are those of the name cache.
//!
//! With `--kernel-cache` the kernel is told to cache what it reads of a
//! handle that reads a listing (`FOPEN_CACHE_DIR`), and to keep that copy
//! (`FOPEN_KEEP_CACHE`) only when a kept listing served the OPENDIR: an
//! OPENDIR that read the source answers without it, and the kernel drops
//! its copy. The kernel fills its copy from a READDIR at offset 0 of any
//! handle that reads a listing, and stamps it with the directory's
//! attributes at that moment; since such a READDIR reads the directory's
//! listing of that moment (above), not an older snapshot of a handle kept
//! open across a change, the kernel's copy is never older than rcufs's
//! listing.
//! (A change through the mount moves the directory's version in the
//! kernel, which drops its copy too.)
//!
//! # Invariants
//! - A listing is served only while younger than *R*, while the listing
//!   generation it was read under is current (a drop of the mount's root
//!   moves it, forgetting every listing), and while the directory's
//!   cached attributes still show the stamp (size, mtime, ctime) it was
//!   read under.
//! - A drop of another directory forgets the listings of the directories
//!   it drops ([`Listings::forget`]), not those of other users' trees.
//!   A listing whose read overlapped a forget of its directory's listing
//!   (by a drop, a change through the mount, the watcher) is not kept:
//!   each forget moves a count on the directory ([`Inode::listing_epoch`])
//!   that the read takes before it reads the source and compares when it
//!   stores, both under the directory's lock, so one of the two sees the
//!   other. The count is the directory's own, so that one user's drops,
//!   however many, keep no other directory's listing from being kept.
//! - A change through the mount to a directory's names (create, mkdir,
//!   mknod, symlink, link, unlink, rmdir, rename) forgets that directory's
//!   listing before it is answered; the revalidation that finds the
//!   directory changed in the source forgets it too.
//! - Memory is bounded: a directory of more than [`MAX_ENTRIES`] entries is
//!   not kept (its handles read the source as before), and all kept
//!   listings together hold at most the budget given to [`Listings::new`]
//!   (entries); past it, listings are read for their handle only, and
//!   those together hold at most as many entries again (a user keeping
//!   directories open holds the daemon's memory); past that, a handle
//!   reads the source as a stream, and the descriptor it then keeps
//!   counts against the descriptor reserve. A listing gives its entries
//!   back to its budget when its last holder lets it go.
//! - With `watch` the interval is the watch's hour, the stamp compared is
//!   the one the source shows at the OPENDIR (`Fs::opendir` refreshes the
//!   directory's attributes first), the watcher forgets the listing of a
//!   directory on an event for a name in it, and a listing read while a
//!   change was applied is forgotten at once (`Fs::read_listing`, the
//!   change sequence of `fs/watched.rs`).

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::FsResult;
use crate::inode::{Inode, Stamp};
use crate::sys::{self, RawDirent};

/// The most entries one kept listing may have.
pub const MAX_ENTRIES: usize = 100_000;

/// A directory's listing as read at one moment.
#[derive(Debug)]
pub struct Listing {
    /// The entries, `.` and `..` included, in the source's order.
    pub entries: Vec<RawDirent>,
    /// When it was read.
    at: Instant,
    /// The directory's stamp when it was read.
    stamp: Stamp,
    /// The listing generation it was read under.
    generation: u64,
    /// The budget it counts against (kept listings', or that of listings
    /// read for one handle only), given back when it is freed.
    budget: Option<Arc<AtomicUsize>>,
}

impl Drop for Listing {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.fetch_sub(self.entries.len(), Ordering::Relaxed);
        }
    }
}

/// The listings of the mount: their generation, budget and counters.
#[derive(Debug)]
pub struct Listings {
    enabled: bool,
    generation: AtomicU64,
    /// Entries held by kept listings.
    held: Arc<AtomicUsize>,
    /// Entries held by listings read for their handle only.
    handles_held: Arc<AtomicUsize>,
    /// The most entries of each kind.
    budget: usize,
    hits: AtomicU64,
    reads: AtomicU64,
    /// Handles made to read a newer listing at a READDIR from offset 0.
    renewed: AtomicU64,
    too_big: AtomicU64,
    /// Listings not read for their handle: both budgets were spent.
    over_budget: AtomicU64,
}

/// What [`Listings::read`] found.
pub enum Read {
    /// The whole listing (kept on the inode if it fits the budgets).
    Whole(Arc<Listing>),
    /// More than [`MAX_ENTRIES`] entries, or both budgets spent: read the
    /// descriptor as a stream.
    TooBig,
}

impl Listings {
    /// Listings kept only if `enabled`, at most `budget` entries in all.
    pub fn new(enabled: bool, budget: usize) -> Self {
        Self {
            enabled,
            generation: AtomicU64::new(0),
            held: Arc::new(AtomicUsize::new(0)),
            handles_held: Arc::new(AtomicUsize::new(0)),
            budget,
            hits: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            renewed: AtomicU64::new(0),
            too_big: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
        }
    }

    /// Whether listings are kept at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// `dir`'s kept listing, if it may be served: younger than `ttl`, of
    /// the current generation, and read under the stamp the directory's
    /// cached attributes show.
    pub fn fresh(&self, dir: &Inode, ttl: Duration) -> Option<Arc<Listing>> {
        let l = self.servable(dir, ttl)?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(l)
    }

    /// [`Listings::fresh`] without counting a hit.
    pub fn servable(&self, dir: &Inode, ttl: Duration) -> Option<Arc<Listing>> {
        if !self.enabled {
            return None;
        }
        let l = dir.listing()?;
        let now = Stamp::of(&dir.attr().st);
        (l.at.elapsed() < ttl && l.generation == self.generation.load(Ordering::Relaxed) && l.stamp == now).then_some(l)
    }

    /// Reads the whole listing of `fd` (a directory open for reading, whose
    /// attributes were just read as `st`) and keeps it on `dir` if the
    /// budgets allow.
    pub fn read(&self, fd: BorrowedFd<'_>, dir: &Inode, st: &libc::stat) -> FsResult<Read> {
        let generation = self.generation.load(Ordering::Relaxed);
        // Before the source is read: a forget after this keeps what is
        // read out of the directory (module docs).
        let epoch = dir.listing_epoch();
        let at = Instant::now();
        let mut entries = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut offset = 0i64;
        loop {
            let batch = sys::read_dir_batch(fd, offset, &mut buf)?;
            let Some(last) = batch.last() else { break };
            offset = last.next_off;
            entries.extend(batch);
            if entries.len() > MAX_ENTRIES {
                self.too_big.fetch_add(1, Ordering::Relaxed);
                return Ok(Read::TooBig);
            }
        }
        let n = entries.len();
        let keep = self.enabled && Self::take(&self.held, n, self.budget);
        if !keep && !Self::take(&self.handles_held, n, self.budget) {
            self.over_budget.fetch_add(1, Ordering::Relaxed);
            return Ok(Read::TooBig);
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let listing = Arc::new(Listing {
            entries,
            at,
            stamp: Stamp::of(st),
            generation,
            budget: Some(if keep {
                self.held.clone()
            } else {
                self.handles_held.clone()
            }),
        });
        crate::fault::listing_read_hook(dir.ino);
        if keep {
            // Not kept if the directory's listing was forgotten since the
            // read began; it still serves the handle that asked for it.
            dir.keep_listing_if(epoch, listing.clone());
        }
        Ok(Read::Whole(listing))
    }

    /// Takes `n` entries of `budget` from `held`, if they fit.
    fn take(held: &AtomicUsize, n: usize, budget: usize) -> bool {
        if held.fetch_add(n, Ordering::Relaxed) + n <= budget {
            return true;
        }
        held.fetch_sub(n, Ordering::Relaxed);
        false
    }

    /// Counts a handle made to read a newer listing (`Fs::readdir`).
    pub fn renewed(&self) {
        self.renewed.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets every kept listing (a drop): they stay allocated until their
    /// directory's next OPENDIR replaces them or the inode is freed, but
    /// none is served again.
    pub fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets `dir`'s kept listing (a drop of a directory above it), and
    /// keeps out one being read now.
    pub fn forget(&self, dir: &Inode) {
        dir.set_listing(None);
    }

    /// The `listings` section of the stats.
    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "enabled": self.enabled,
            "hits": self.hits.load(Ordering::Relaxed),
            "reads": self.reads.load(Ordering::Relaxed),
            "renewed": self.renewed.load(Ordering::Relaxed),
            "too_big": self.too_big.load(Ordering::Relaxed),
            "over_budget": self.over_budget.load(Ordering::Relaxed),
            "entries": self.held.load(Ordering::Relaxed) as u64,
            "handle_entries": self.handles_held.load(Ordering::Relaxed) as u64,
            "budget_entries": self.budget as u64,
        })
    }
}

/// The batch of `listing` that starts at `offset` (an index), each entry
/// with the offset of the next one.
pub fn batch(listing: &Listing, offset: u64, max: usize) -> Vec<RawDirent> {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    listing
        .entries
        .iter()
        .enumerate()
        .skip(start)
        .take(max)
        .map(|(i, e)| RawDirent {
            ino: e.ino,
            next_off: i as i64 + 1,
            dtype: e.dtype,
            name: e.name.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests;
