#![cfg(rcufs_loom)]
//! loom model of the data layer's folio fill against a write through the
//! mount (`fuse-fs/src/data.rs`), on the real page cache.
//!
//! A READ that misses fills a whole folio with one `pread` of the source,
//! inside the page cache's fill: the folio is in the cache (filling) while
//! the source is read, and the filler compares the inode's generation
//! before and after. A write through the mount changes the source and then
//! updates the cache (`PageCache::write`, which bumps the generation before
//! it looks for folios). So either the fill read the source after the
//! write changed it, or the write's cache update comes after the fill
//! began: it then finds the folio (ready: updated by copy-on-write) or the
//! filler sees the generation moved (and discards its folio). The model
//! asserts that afterwards the cache holds what the source holds, for the
//! page the write changed and the one it did not.
//!
//! This replaces the model of the old per-page readahead, which cached the
//! pages after the first from bytes read before they entered the cache and
//! needed a change count of its own; a folio's bytes are all read inside
//! its fill, so the page cache's own check covers them.
//!
//! `fuse-fs` has no loom switch of its own, so the model repeats the two
//! sides' steps with loom's atomics (the source is one atomic byte per
//! page). With the write's two steps swapped (`CACHE_BEFORE_SOURCE`) it
//! fails: a fill that began after the cache update reads the old source
//! and keeps it.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU8, Ordering};
use loom::thread;
use pagecache::{Config, FillOrder, Mode, PageCache};

/// Set to true to update the cache before the source (the model then fails).
const CACHE_BEFORE_SOURCE: bool = false;

fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    b.check(f);
}

#[test]
fn folio_fill_vs_write() {
    model(|| {
        let c = Arc::new(PageCache::new(Config {
            budget_bytes: 1 << 10,
            page_size: 8,
            mode: Mode::LockCoupled,
        }));
        // Pages 0 and 1 of inode 1 in the source: every byte of a page is
        // its value.
        let source = Arc::new([AtomicU8::new(1), AtomicU8::new(1)]);
        let writer = {
            let (c, source) = (c.clone(), source.clone());
            thread::spawn(move || {
                // The pwrite of page 1, then the write-through.
                if CACHE_BEFORE_SOURCE {
                    c.write(1, 8, &[2; 8]);
                    source[1].store(2, Ordering::SeqCst);
                } else {
                    source[1].store(2, Ordering::SeqCst);
                    c.write(1, 8, &[2; 8]);
                }
            })
        };
        // A READ of both pages that misses: one folio of both, filled by
        // one read of the source.
        let mut slices = Vec::new();
        let n = c
            .read_refs(1, 0, 16, FillOrder::Order(1), &mut slices, |first, buf: &mut [u8]| {
                assert_eq!(first, 0);
                buf[..8].fill(source[0].load(Ordering::SeqCst));
                buf[8..16].fill(source[1].load(Ordering::SeqCst));
                Ok::<usize, ()>(16)
            })
            .expect("the fill does not fail");
        assert_eq!(n, 16);
        drop(slices);
        writer.join().unwrap();
        for page in 0..2u64 {
            if let Some(p) = c.get(1, page) {
                let want = source[page as usize].load(Ordering::SeqCst);
                assert!(
                    p.iter().all(|&b| b == want),
                    "page {page}: the cache kept {:?}, the source holds {want}",
                    &p[..]
                );
            }
        }
    });
}
