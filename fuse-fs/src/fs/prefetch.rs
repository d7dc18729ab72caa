//! READDIRPLUS over a slow source: the names of a batch that the name
//! cache cannot answer are looked up in the source in parallel before the
//! batch is answered.
//!
//! # Why
//! READDIRPLUS answers every entry with its attributes, through LOOKUP.
//! Answered one after the other, a batch whose entries are missing from the
//! name cache (the first listing) or older than the revalidation interval
//! costs one source round trip per entry, back to back, on one worker: on a
//! network source, the round trips of a whole directory queue behind one
//! another while the other workers are idle.
//!
//! # Algorithm
//! Only for a network or FUSE source (`slow_source.rs`). The directory is
//! revalidated once (as LOOKUP would), then the batch's names that miss the
//! name cache or whose entry is stale are looked up in the source by up to
//! [`THREADS`] scoped threads (`lookup_source` without a kernel reference:
//! it fills the name cache and the inode table, as a LOOKUP's miss does).
//! The batch is then answered entry by entry as before; those entries are
//! now fresh hits. Nothing is answered from the prefetch itself, so what the
//! kernel sees is exactly what LOOKUP gives.
//!
//! The same parallel lookups serve a LOOKUP that finds a stale entry
//! ([`Fs::refresh_dir`]): the directory's stale cached names are looked up
//! together, once per interval.
//!
//! # Invariants
//! The prefetch takes no kernel reference (only the answering LOOKUP does),
//! changes nothing in the source, and runs as the daemon, as LOOKUP does.
//! Its cache checks count as name-cache hits and misses in the stats.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Fs;
use crate::inode::Inode;
use crate::names::Hit;
use crate::sys::RawDirent;

/// Most source lookups one READDIRPLUS batch has in flight.
pub const THREADS: usize = 8;

impl Fs {
    /// Looks up, in parallel, the names of `batch` that the name cache
    /// cannot answer (see the module docs). Returns how many were looked up.
    /// With `cached_only`, only names with a stale cached entry are looked
    /// up (a refresh); otherwise missing ones too (a listing's batch).
    pub(super) fn prefetch_names(&self, dir: &Arc<Inode>, batch: &[RawDirent], cached_only: bool) -> usize {
        if self.cfg.source_kind != "network" {
            return 0;
        }
        self.revalidate_dir(dir);
        let wanted: Vec<&[u8]> = batch
            .iter()
            .map(|e| e.name.as_slice())
            .filter(|n| *n != b"." && *n != b"..")
            .filter(|n| match self.names.lookup(dir, n) {
                Hit::Positive(inode) => !self.fresh(inode.attr().at) || inode.is_stale(),
                Hit::Negative => false,
                Hit::Miss => !cached_only,
            })
            .collect();
        if wanted.len() < 2 {
            return 0;
        }
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS.min(wanted.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(name) = wanted.get(i) else { break };
                        // A failure here is LOOKUP's to report when it asks again.
                        let _ = self.lookup_source(dir, name, false);
                    }
                });
            }
        });
        self.prefetched.fetch_add(wanted.len() as u64, Ordering::Relaxed);
        wanted.len()
    }

    /// A LOOKUP found a stale entry under `dir` (a network source): lists
    /// `dir` in the source once per interval and looks up all of its stale
    /// cached names at once, as [`Fs::prefetch_names`] does for a listing.
    /// A stat-driven walk after the interval (`git status`, `xargs stat`)
    /// then pays one listing and parallel lookups per directory rather than
    /// one round trip per name, one after the other. Listing the directory
    /// first also lets the source's own client refresh what it caches from
    /// a listing (sshfs keeps the attributes a listing carries; NFS's
    /// READDIRPLUS does the same), so the lookups that follow may not cross
    /// the network at all. Returns whether it refreshed.
    pub(super) fn refresh_dir(&self, dir: &Arc<Inode>) -> bool {
        if self.cfg.source_kind != "network" || !dir.claim_refresh(self.cfg.revalidate) {
            return false;
        }
        let Ok(fd) = self.table.open(dir, libc::O_RDONLY | libc::O_DIRECTORY) else {
            return false;
        };
        let before = self.source_seq();
        let Ok(st) = crate::sys::fstat(std::os::fd::AsFd::as_fd(&fd)) else {
            return false;
        };
        self.store_attr(dir, st, before);
        match self.listings.read(std::os::fd::AsFd::as_fd(&fd), dir, &st) {
            Ok(crate::listing::Read::Whole(l)) => {
                self.refreshes.fetch_add(1, Ordering::Relaxed);
                self.prefetch_names(dir, &l.entries, true);
                true
            }
            _ => false,
        }
    }
}
