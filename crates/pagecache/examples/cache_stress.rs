//! A stress run of the radix tree and the page cache, with verification,
//! small enough to run under valgrind memcheck:
//! `PAGECACHE_SYSTEM_ALLOC=1 valgrind --tool=memcheck --error-exitcode=1
//! target/debug/examples/cache_stress` (the variable keeps folios out of
//! the page-frame pool, whose reuse of frames memcheck cannot see; run it
//! without valgrind too, where the 4 KiB rounds use frames).
//!
//! Threads insert, tag, untag and remove interleaved keys of a tree in each
//! mode (and multi-index runs in leaves of their own) while a reader
//! gang-looks-up; then threads fill (pages and folios of several orders),
//! hit, read ranges of (copies and held folio slices), write (in the cache
//! and write-through) and drop pages of a cache with a budget that forces
//! CLOCK eviction, checking every page's bytes, while another inode is
//! written through and truncated. Exits non-zero (panics) on any mismatch.

use std::sync::atomic::{AtomicBool, Ordering};

use pagecache::radix::{SHIFT, SLOTS};
use pagecache::{Config, FillOrder, Mode, PageCache, RadixTree, Tag};

const THREADS: u64 = 2;

fn tree_stress(mode: Mode, keys: u64) {
    let tree = RadixTree::new(mode);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let r = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let g = tree.pin();
                for (k, v) in tree.gang_lookup_in(0, 64, &g) {
                    assert_eq!(*v, k * 3);
                }
                for (k, v) in tree.gang_lookup_in(1 << 40, 64, &g) {
                    // A run's value is three times its first key, which is
                    // at or before `k` in the same leaf.
                    let first = *v / 3;
                    assert!(*v % 3 == 0 && first <= k && k - first < SLOTS as u64, "{k}: {v}");
                }
            }
        });
        let ws: Vec<_> = (0..THREADS)
            .map(|t| {
                let tree = &tree;
                s.spawn(move || {
                    let mine: Vec<u64> = (0..keys).filter(|k| k % THREADS == t).map(|k| k * 37).collect();
                    for &k in &mine {
                        tree.insert(k, k * 3).unwrap();
                    }
                    for &k in &mine {
                        assert!(tree.set_tag(k, Tag::DIRTY));
                    }
                    for &k in mine.iter().step_by(2) {
                        assert!(tree.clear_tag(k, Tag::DIRTY));
                    }
                    for &k in mine.iter().step_by(3) {
                        assert!(tree.remove(k));
                    }
                    // Runs of 2^order keys, in leaves far above the others.
                    let base = (1u64 << 40) + t * SLOTS as u64;
                    for order in 0..=SHIFT {
                        for first in (0..SLOTS as u64).step_by(1 << order) {
                            let k = base + first;
                            tree.insert_run(k, order, k * 3).unwrap();
                        }
                        for first in (0..SLOTS as u64).step_by(1 << order) {
                            assert_eq!(tree.take(base + first + (1 << order) - 1), Some((base + first) * 3));
                        }
                    }
                })
            })
            .collect();
        for w in ws {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        r.join().unwrap();
    });
    tree.check_invariants().unwrap();
    let expect = (0..keys).filter(|k| !(k / THREADS).is_multiple_of(3)).count();
    assert_eq!(tree.len(), expect);
}

fn page(ino: u64, index: u64, ps: usize) -> Vec<u8> {
    (0..ps as u64).map(|i| (ino * 7 + index * 13 + i) as u8).collect()
}

fn cache_stress(mode: Mode, rounds: u64, ps: usize) {
    let cache = PageCache::new(Config {
        budget_bytes: 32 * ps,
        page_size: ps,
        mode,
    });
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let cache = &cache;
            s.spawn(move || {
                let fill = |ino: u64, first: u64, b: &mut [u8]| {
                    for (j, chunk) in b.chunks_mut(ps).enumerate() {
                        chunk.copy_from_slice(&page(ino, first + j as u64, ps));
                    }
                    Ok::<_, ()>(b.len())
                };
                let mut held = Vec::new();
                for i in 0..rounds {
                    let (ino, index) = (i % 3, (i * 7 + t) % 48);
                    let r = cache
                        .get_or_fill_folio(ino, index, (i % 4) as u32, |first, b| fill(ino, first, b))
                        .unwrap();
                    assert_eq!(&*r, &page(ino, index, ps)[..]);
                    if i % 17 == 0 {
                        // Rewrite with the same bytes: replaced or dropped.
                        cache.write(ino, index * ps as u64, &page(ino, index, ps));
                    }
                    if i % 13 == 0 {
                        let mut bytes = page(ino, index, ps);
                        bytes.extend(page(ino, index + 1, ps));
                        cache.write_through(ino, index * ps as u64, &bytes, None);
                    }
                    if i % 7 == 0 {
                        let mut out = Vec::new();
                        let n = cache
                            .read_range_into(
                                ino,
                                index * ps as u64,
                                5 * ps,
                                &mut out,
                                FillOrder::Readahead,
                                |f, b| fill(ino, f, b),
                            )
                            .unwrap();
                        assert_eq!(n, out.len());
                        for (j, chunk) in out.chunks(ps).enumerate() {
                            assert_eq!(chunk, &page(ino, index + j as u64, ps)[..]);
                        }
                        let mut slices = Vec::new();
                        cache
                            .read_refs(
                                ino,
                                index * ps as u64 + 3,
                                2 * ps,
                                FillOrder::Order(1),
                                &mut slices,
                                |f, b| fill(ino, f, b),
                            )
                            .unwrap();
                        held.push(slices);
                        if held.len() > 3 {
                            held.remove(0);
                        }
                    }
                    if i % 11 == 0 {
                        // Another inode written through and truncated (not verified).
                        cache.write_through(3, (i % 8) * ps as u64, &vec![t as u8; 3 * ps / 2], Some(20 * ps as u64));
                        cache.truncate(3, (i % 10) * ps as u64 / 2);
                        let mut out = Vec::new();
                        cache
                            .read_range_into(3, 0, 4 * ps, &mut out, FillOrder::Order(2), |_, b| {
                                b.fill(0);
                                Ok::<_, ()>(0)
                            })
                            .unwrap();
                    }
                    if i % 29 == 0 {
                        cache.drop_range(ino, index, index + 3);
                    }
                    if i % 5 == 0 {
                        // A ranged read of three pages, across the fast
                        // leaf walk and the fill path.
                        let first = index.min(45);
                        let mut buf = vec![0u8; 3 * ps];
                        let n = cache
                            .read_into(ino, first * ps as u64, &mut buf, |j, b| {
                                b.copy_from_slice(&page(ino, j, ps));
                                Ok::<_, ()>(ps)
                            })
                            .unwrap();
                        assert_eq!(n, buf.len());
                        for (j, chunk) in buf.chunks(ps).enumerate() {
                            assert_eq!(chunk, &page(ino, first + j as u64, ps)[..]);
                        }
                    }
                }
            });
        }
    });
    cache.check_invariants().unwrap();
    assert!(cache.stats().evictions > 0);
    cache.drop_inodes(&[0, 1, 2, 3]);
    assert_eq!(cache.stats().pages, 0);
}

fn main() {
    let keys = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3000);
    for mode in Mode::ALL {
        tree_stress(mode, keys);
        cache_stress(mode, keys, 256);
        // Single 4 KiB pages live in page frames (`frames.rs`).
        cache_stress(mode, keys / 4, 4096);
        println!("{mode:?}: ok");
    }
}
