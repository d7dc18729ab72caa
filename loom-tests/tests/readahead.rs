#![cfg(rcufs_loom)]
//! loom model of the readahead check of `fuse-fs/src/data.rs`
//! (`Data::cache_run` against `Data::changed`), on the real page cache.
//!
//! A readahead reads the source for several pages at once and caches the
//! pages after the first from that read, so those pages enter the cache
//! after the read. A write through the mount changes the source, bumps the
//! data layer's change count and then updates the cache
//! (`PageCache::write`). The readahead took the count before its read and
//! checks it while the page is still filling (after the page is in the
//! tree); the write bumps it before it looks for the page: a store and then
//! a load on each side, ordered by a SeqCst fence on each side, so either
//! the readahead sees the bump (and fails its fill) or the write finds the
//! page (and drops it, since a filling page cannot be written in place).
//! The model asserts that afterwards the cache holds what the source holds.
//!
//! `fuse-fs` has no loom switch of its own, so the model repeats the two
//! sides' steps with loom's atomics (the source is an atomic byte).
//! Without the check (`NO_CHECK` below) it fails: a page keeps the
//! source's old byte (the write finished before the page entered the
//! cache, so neither the write's cache update nor the page cache's own
//! generation check saw it). With the check made Relaxed and its fence
//! dropped (`RELAXED_READAHEAD`) it still passes at preemption bound 2:
//! the epoch pins inside `PageCache::write` and `get_or_fill` are SeqCst
//! fences on both sides and order the two accesses of `changes` already.
//! `data.rs` keeps its own fences so as not to rely on that.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering, fence};
use loom::thread;
use pagecache::{Config, Mode, PageCache};

/// Set to true to weaken the readahead's side (see the module docs).
const RELAXED_READAHEAD: bool = false;
/// Set to true to drop the readahead's check (the model then fails).
const NO_CHECK: bool = false;

fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    b.check(f);
}

#[test]
fn readahead_fill_vs_write() {
    model(|| {
        let c = Arc::new(PageCache::new(Config {
            budget_bytes: 1 << 10,
            page_size: 8,
            mode: Mode::LockCoupled,
        }));
        // Page 1 of inode 1 in the source: every byte is this value.
        let source = Arc::new(AtomicU64::new(1));
        let changes = Arc::new(AtomicU64::new(0));
        let writer = {
            let (c, source, changes) = (c.clone(), source.clone(), changes.clone());
            thread::spawn(move || {
                // The pwrite, then `Data::changed`, then the cache update.
                source.store(2, Ordering::SeqCst);
                changes.fetch_add(1, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                c.write(1, 8, &[2; 8]);
            })
        };
        // The readahead: the count, the source read, then the page's fill.
        let seq = changes.load(Ordering::SeqCst);
        let read = source.load(Ordering::SeqCst) as u8;
        let _ = c.get_or_fill(1, 1, |b: &mut [u8]| {
            b.fill(read);
            let now = if RELAXED_READAHEAD {
                changes.load(Ordering::Relaxed)
            } else {
                fence(Ordering::SeqCst);
                changes.load(Ordering::SeqCst)
            };
            if now == seq || NO_CHECK { Ok(8) } else { Err(()) }
        });
        writer.join().unwrap();
        if let Some(p) = c.get(1, 1) {
            assert_eq!(p[0], 2, "the cache kept a byte the source no longer has");
        }
    });
}
