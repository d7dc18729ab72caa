//! A stress run of the radix tree and the page cache, with verification,
//! small enough to run under valgrind memcheck:
//! `valgrind --tool=memcheck --error-exitcode=1 target/debug/examples/cache_stress`.
//!
//! Threads insert, tag, untag and remove interleaved keys of a tree in each
//! mode while a reader gang-looks-up; then threads fill, hit, read ranges
//! of, write and drop pages of a cache with a budget that forces CLOCK eviction, checking every
//! page's bytes. Exits non-zero (panics) on any mismatch.

use std::sync::atomic::{AtomicBool, Ordering};

use pagecache::{Config, Mode, PageCache, RadixTree, Tag};

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

fn cache_stress(mode: Mode, rounds: u64) {
    let ps = 256;
    let cache = PageCache::new(Config {
        budget_bytes: 32 * ps,
        page_size: ps,
        mode,
    });
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..rounds {
                    let (ino, index) = (i % 3, (i * 7 + t) % 48);
                    let r = cache
                        .get_or_fill(ino, index, |b| {
                            b.copy_from_slice(&page(ino, index, ps));
                            Ok::<_, ()>(ps)
                        })
                        .unwrap();
                    assert_eq!(&*r, &page(ino, index, ps)[..]);
                    if i % 17 == 0 {
                        // Rewrite with the same bytes: in place or dropped.
                        cache.write(ino, index * ps as u64, &page(ino, index, ps));
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
    cache.drop_inodes(&[0, 1, 2]);
    assert_eq!(cache.stats().pages, 0);
}

fn main() {
    let keys = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3000);
    for mode in Mode::ALL {
        tree_stress(mode, keys);
        cache_stress(mode, keys);
        println!("{mode:?}: ok");
    }
}
