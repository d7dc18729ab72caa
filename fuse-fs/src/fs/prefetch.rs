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
    pub(super) fn prefetch_names(&self, dir: &Arc<Inode>, batch: &[RawDirent]) -> usize {
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
                Hit::Miss => true,
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
}
