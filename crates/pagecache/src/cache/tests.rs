//! Unit tests of the page cache: fill, hit, fill failure, budget and
//! CLOCK, pinned pages, writes, truncation and drops, in every mode.

use std::convert::Infallible;

use super::{Config, DropCounts, PageCache};
use crate::Mode;

fn cache(mode: Mode, pages: usize) -> PageCache {
    PageCache::new(Config {
        budget_bytes: pages * 16,
        page_size: 16,
        mode,
    })
}

/// Fills page `index` of `ino` with `len` bytes of `byte`.
#[track_caller]
fn fill(c: &PageCache, ino: u64, index: u64, byte: u8, len: usize) -> Vec<u8> {
    let r = c
        .get_or_fill(ino, index, |buf| {
            buf[..len].fill(byte);
            buf[len..].fill(0xee); // garbage past the end must not survive
            Ok::<_, Infallible>(len)
        })
        .unwrap();
    r.to_vec()
}

#[test]
fn fill_then_hit() {
    for mode in Mode::ALL {
        let c = cache(mode, 8);
        assert!(c.get(1, 0).is_none());
        assert_eq!(fill(&c, 1, 0, 7, 16), vec![7; 16]);
        assert_eq!(c.get(1, 0).unwrap().to_vec(), vec![7; 16]);
        let called = c
            .get_or_fill(1, 0, |_| -> Result<usize, ()> { panic!("hit must not fill") })
            .unwrap();
        assert_eq!(called.len(), 16);
        let s = c.stats();
        assert_eq!(
            (s.hits, s.misses, s.fills, s.pages, s.bytes_cached),
            (2, 2, 1, 1, 16),
            "{mode:?}"
        );
        c.check_invariants().unwrap();
    }
}

#[test]
fn failed_fill_leaves_nothing() {
    for mode in Mode::ALL {
        let c = cache(mode, 8);
        let err = c.get_or_fill(3, 9, |buf| {
            buf.fill(1);
            Err("io")
        });
        assert_eq!(err.unwrap_err(), "io");
        assert!(c.get(3, 9).is_none());
        assert_eq!(c.stats().pages, 0);
        c.check_invariants().unwrap();
        assert_eq!(fill(&c, 3, 9, 2, 5), vec![2; 5]);
    }
}

#[test]
fn short_page_and_writes() {
    for mode in Mode::ALL {
        let c = cache(mode, 8);
        assert_eq!(fill(&c, 1, 0, 1, 16), vec![1; 16]);
        assert_eq!(fill(&c, 1, 1, 2, 4), vec![2; 4]);
        // In place, inside and extending the short page with a hole.
        c.write(1, 18, &[9, 9]);
        assert_eq!(c.get(1, 1).unwrap().to_vec(), vec![2, 2, 9, 9]);
        c.write(1, 22, &[5]);
        assert_eq!(c.get(1, 1).unwrap().to_vec(), vec![2, 2, 9, 9, 0, 0, 5]);
        // A write past the short page drops it (the file grew past it).
        c.write(1, 40, &[1]);
        assert!(c.get(1, 1).is_none());
        assert_eq!(c.get(1, 0).unwrap().to_vec(), vec![1; 16]);
        // A page held by a reader never changes under it: the write
        // replaces it with an updated copy.
        let held = c.get(1, 0).unwrap();
        c.write(1, 0, &[3]);
        assert_eq!(held.to_vec(), vec![1; 16]);
        let mut now = vec![1; 16];
        now[0] = 3;
        assert_eq!(c.get(1, 0).unwrap().to_vec(), now);
        c.check_invariants().unwrap();
    }
}

#[test]
fn truncate_shortens_and_drops() {
    for mode in Mode::ALL {
        let c = cache(mode, 8);
        for i in 0..4 {
            fill(&c, 5, i, i as u8 + 1, 16);
        }
        c.truncate(5, 20);
        assert_eq!(c.get(5, 1).unwrap().to_vec(), vec![2; 4]);
        assert!(c.get(5, 2).is_none() && c.get(5, 3).is_none());
        c.truncate(5, 22);
        assert_eq!(c.get(5, 1).unwrap().to_vec(), vec![2, 2, 2, 2, 0, 0]);
        c.truncate(5, 64);
        assert!(c.get(5, 1).is_none(), "a short page below the new end is dropped");
        assert_eq!(c.get(5, 0).unwrap().to_vec(), vec![1; 16]);
        c.check_invariants().unwrap();
    }
}

#[test]
fn drops() {
    for mode in Mode::ALL {
        let c = cache(mode, 64);
        for ino in 1..=3 {
            for i in 0..5 {
                fill(&c, ino, i * 100, 1, 16);
            }
        }
        assert_eq!(c.drop_range(1, 100, 300), DropCounts { pages: 3, bytes: 48 });
        assert_eq!(c.drop_inode(2), DropCounts { pages: 5, bytes: 80 });
        assert_eq!(c.drop_inodes(&[1, 3, 4]), DropCounts { pages: 7, bytes: 112 });
        assert_eq!(c.stats().pages, 0);
        assert_eq!(c.inode_count(), 0);
        c.check_invariants().unwrap();
    }
}

#[test]
fn budget_evicts_by_clock_and_spares_pinned_pages() {
    for mode in Mode::ALL {
        let c = cache(mode, 4);
        let pinned = c.get_or_fill(1, 0, |b| Ok::<_, Infallible>(b.len())).unwrap();
        for i in 1..4 {
            fill(&c, 1, i, 1, 16);
        }
        // Page 1 is hit: it gets a second chance.
        assert!(c.get(1, 1).is_some());
        for i in 4..8 {
            fill(&c, 1, i, 1, 16);
            assert!(c.stats().bytes_cached <= 4 * 16, "{mode:?}: budget kept");
        }
        assert!(c.get(1, 0).is_some(), "{mode:?}: a pinned page is never evicted");
        assert!(c.stats().evictions >= 4);
        drop(pinned);
        c.check_invariants().unwrap();
    }
}

/// The metadata per cached page, printed for the closing note (run with
/// `--nocapture`); asserts only the layout facts the docs state.
#[test]
fn metadata_overhead_per_page() {
    use crate::folio::{Folio, FolioHandle};
    use crate::radix::SLOTS;
    let header = std::mem::size_of::<Folio>();
    let handle = std::mem::size_of::<FolioHandle>();
    let node = std::mem::size_of::<crate::radix::node::Node<Folio>>();
    assert!(node >= SLOTS * 8, "the slots are in the node");
    assert_eq!(handle, 8);
    assert_eq!(header, 64, "the folio header is one cache line before the bytes");
    // A page-tree slot points at its folio (no box in between).
    println!(
        "per folio: header {header} B (same allocation as the bytes) + leaf node {node} B / {SLOTS} slots (a slot is a {handle}-byte pointer)"
    );
}

/// An inode whose pages are all gone leaves the inode map, whichever way
/// its last page went: CLOCK reclaim, `drop_range`, `truncate` to zero, a
/// failed fill. Many inodes filled one after another under a budget of
/// four pages keep the map at most a few entries long.
#[test]
fn emptied_inodes_leave_the_map() {
    for mode in Mode::ALL {
        let c = cache(mode, 4);
        for ino in 0..200 {
            fill(&c, ino, 0, 1, 16);
            fill(&c, ino, 7, 1, 16);
            assert!(
                c.inode_count() <= 5,
                "{mode:?}: {} inode entries for 4 pages",
                c.inode_count()
            );
        }
        c.check_invariants().unwrap();
        let c = cache(mode, 64);
        fill(&c, 1, 0, 1, 16);
        fill(&c, 1, 3, 1, 16);
        fill(&c, 2, 0, 1, 16);
        fill(&c, 3, 0, 1, 16);
        assert_eq!(c.inode_count(), 3);
        assert_eq!(c.drop_range(1, 0, 2).pages, 1);
        assert_eq!(c.inode_count(), 3, "{mode:?}: inode 1 still has page 3");
        assert_eq!(c.drop_range(1, 3, 3).pages, 1);
        assert_eq!(c.inode_count(), 2, "{mode:?}: drop_range emptied inode 1");
        c.truncate(2, 0);
        assert_eq!(c.inode_count(), 1, "{mode:?}: truncate to 0 emptied inode 2");
        assert!(c.get_or_fill(4, 0, |_| Err::<usize, _>("io")).is_err());
        assert_eq!(c.inode_count(), 1, "{mode:?}: a failed fill leaves no entry");
        // The inode comes back on the next fill, with its own pages only.
        assert_eq!(fill(&c, 1, 3, 5, 16), vec![5; 16]);
        assert!(c.get(1, 0).is_none());
        assert_eq!(c.inode_count(), 2);
        c.check_invariants().unwrap();
    }
}

/// `read_into` returns exactly the file's bytes for any range, whatever is
/// cached (nothing, some pages, pages evicted by a small budget), stops at
/// the end of the file, fills only what is missing, and walks across leaf
/// boundaries (the file spans three leaves).
#[test]
fn read_into_matches_the_file() {
    use crate::radix::SLOTS;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    const PS: usize = 16;
    for mode in Mode::ALL {
        for budget_pages in [4usize, 1024] {
            let c = PageCache::new(Config {
                budget_bytes: budget_pages * PS,
                page_size: PS,
                mode,
            });
            let len = PS * (2 * SLOTS + 9) + 5;
            let file: Vec<u8> = (0..len).map(|i| (i * 7 + i / PS) as u8).collect();
            let pages = len.div_ceil(PS) as u64;
            let read_page = |index: u64, b: &mut [u8]| -> Result<usize, Infallible> {
                let start = (index as usize * PS).min(len);
                let end = (start + PS).min(len);
                b[..end - start].copy_from_slice(&file[start..end]);
                Ok(end - start)
            };
            let mut rng = SmallRng::seed_from_u64(7);
            for round in 0..300 {
                if round % 3 == 0 {
                    let i = rng.random_range(0..pages);
                    c.get_or_fill(9, i, |b| read_page(i, b)).unwrap();
                }
                if round % 17 == 0 {
                    let i = rng.random_range(0..pages);
                    c.drop_range(9, i, i + rng.random_range(0..40));
                }
                let offset = rng.random_range(0..len as u64 + 20);
                let want = rng.random_range(0..6 * PS + 3);
                let mut buf = vec![0xaa; want];
                let fills = c.stats().fills;
                let mut filled = Vec::new();
                let n = c
                    .read_into(9, offset, &mut buf, |i, b| {
                        filled.push(i);
                        read_page(i, b)
                    })
                    .unwrap();
                let lo = (offset as usize).min(len);
                let hi = (offset as usize + want).min(len);
                assert_eq!(n, hi - lo, "{mode:?} read {want} at {offset}");
                assert_eq!(&buf[..n], &file[lo..hi], "{mode:?} read {want} at {offset}");
                assert!(buf[n..].iter().all(|&b| b == 0xaa), "bytes past the end untouched");
                assert_eq!(c.stats().fills - fills, filled.len() as u64);
                let mut sorted = filled.clone();
                sorted.dedup();
                assert_eq!(sorted, filled, "{mode:?}: a page filled twice in one read");
            }
            // Everything cached (big budget): a read of the whole file fills nothing.
            if budget_pages == 1024 {
                let mut buf = vec![0; len];
                c.read_into(9, 0, &mut buf, |i, b| read_page(i, b)).unwrap();
                let fills = c.stats().fills;
                let hits = c.stats().hits;
                let mut again = vec![0; len];
                let n = c
                    .read_into(9, 0, &mut again, |_, _| -> Result<usize, Infallible> {
                        panic!("a cached read must not fill")
                    })
                    .unwrap();
                assert_eq!((n, &again), (len, &file));
                assert_eq!(c.stats().fills, fills);
                assert_eq!(c.stats().hits - hits, pages, "one hit per page");
            }
            c.check_invariants().unwrap();
        }
    }
}
