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
        // A page held by a reader is dropped, never changed under it.
        let held = c.get(1, 0).unwrap();
        c.write(1, 0, &[3]);
        assert_eq!(held.to_vec(), vec![1; 16]);
        assert!(c.get(1, 0).is_none());
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
        "per folio: header {header} B (beside the bytes, or in a page frame's header slot) + leaf node {node} B / {SLOTS} slots (a slot is a {handle}-byte pointer)"
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

/// A fill callback that reads `file` from page `first` on, as a source
/// would: the folio's buffer gets the file's bytes, the count is short at
/// the end of the file.
fn from_file(file: &[u8], page_size: usize) -> impl Fn(u64, &mut [u8]) -> Result<usize, Infallible> + '_ {
    move |first, buf| {
        let start = (first as usize * page_size).min(file.len());
        let n = (file.len() - start).min(buf.len());
        buf[..n].copy_from_slice(&file[start..start + n]);
        Ok(n)
    }
}

/// A folio fill covers the aligned run of the requested order; every page
/// inside it is then a hit (one fill), a page past the end of the file is
/// empty, and the folio shrinks to fit around pages already cached.
#[test]
fn folio_fill_and_lookups() {
    for mode in Mode::ALL {
        let c = cache(mode, 256);
        let file: Vec<u8> = (0..16 * 13 + 5).map(|i| i as u8).collect(); // 13 pages and 5 bytes
        let fill = from_file(&file, 16);
        // Page 2 alone first, then an order-3 folio around page 5: it must
        // not cover page 2, so it shrinks to pages 4..8.
        c.get_or_fill(1, 2, |b| fill(2, b)).unwrap();
        let firsts = std::cell::RefCell::new(Vec::new());
        let p5 = c
            .get_or_fill_folio(1, 5, 3, |first, b| {
                firsts.borrow_mut().push((first, b.len()));
                fill(first, b)
            })
            .unwrap();
        assert_eq!(firsts.take(), vec![(4, 64)], "{mode:?}");
        assert_eq!(&p5[..], &file[80..96]);
        for i in 4..8 {
            let p = c.get(1, i).expect("inside the folio");
            assert_eq!(&p[..], &file[i as usize * 16..][..16], "{mode:?} page {i}");
        }
        assert!(c.get(1, 3).is_none() && c.get(1, 8).is_none());
        // An order-3 folio at the end of the file: pages 8..16, the file
        // ends in page 13, pages 14 and 15 are empty.
        c.get_or_fill_folio(1, 9, 3, |first, b| fill(first, b)).unwrap();
        assert_eq!(&c.get(1, 13).unwrap()[..], &file[208..]);
        assert!(c.get(1, 14).unwrap().is_empty());
        let s = c.stats();
        assert_eq!((s.fills, s.pages), (3, 1 + 4 + 8), "{mode:?}");
        c.check_invariants().unwrap();
    }
}

/// Reads of any range return the file's bytes whatever the folios cached
/// (`read_into`, `read_range_into` appending to a Vec, `read_refs` slices
/// one per folio), stop at the end of the file, and a read of a cached range
/// fills nothing.
#[test]
fn ranged_reads_over_folios() {
    use crate::FillOrder;
    for mode in Mode::ALL {
        let c = cache(mode, 1024);
        let file: Vec<u8> = (0..16 * 200 + 7).map(|i| (i * 5 + i / 16) as u8).collect();
        let fill = from_file(&file, 16);
        for (offset, len, order) in [(0u64, 100usize, 2), (300, 700, 4), (16 * 190, 500, 6), (5, 3000, 0)] {
            let mut out = vec![9u8; 3];
            let n = c
                .read_range_into(1, offset, len, &mut out, FillOrder::Order(order), &fill)
                .unwrap();
            let lo = (offset as usize).min(file.len());
            let hi = (offset as usize + len).min(file.len());
            assert_eq!(n, hi - lo);
            assert_eq!(&out[3..], &file[lo..hi], "{mode:?} {offset} {len}");
            let mut slices = Vec::new();
            let fills = c.stats().fills;
            let m = c
                .read_refs(
                    1,
                    offset,
                    len,
                    FillOrder::Readahead,
                    &mut slices,
                    |_, _| -> Result<usize, Infallible> { panic!("a cached range must not fill") },
                )
                .unwrap();
            assert_eq!(c.stats().fills, fills);
            assert_eq!(m, n);
            let joined: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            assert_eq!(joined, &file[lo..hi]);
            let mut at = offset;
            for s in &slices {
                assert_eq!(s.offset(), at, "slices in file order");
                at += s.len() as u64;
            }
            let mut buf = vec![0u8; len];
            assert_eq!(c.read_into(1, offset, &mut buf, &fill).unwrap(), n);
            assert_eq!(&buf[..n], &file[lo..hi]);
        }
        // One slice per folio: a range inside one order-6 folio is one slice.
        let mut slices = Vec::new();
        c.read_refs(1, 16 * 192, 16 * 8, FillOrder::Order(0), &mut slices, &fill)
            .unwrap();
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0].folio_pages(), 64);
        c.check_invariants().unwrap();
    }
}

/// Sequential reads through the readahead fill growing folios: reading a
/// file of 256 pages 4 pages at a time takes a handful of fills, and a
/// random single page afterwards one page.
#[test]
fn readahead_grows_folios_for_sequential_reads() {
    use crate::FillOrder;
    let c = cache(Mode::Optimistic, 4096);
    let file: Vec<u8> = (0..16 * 256).map(|i| (i / 16) as u8).collect();
    let fill = from_file(&file, 16);
    let mut out = Vec::new();
    for i in 0..64u64 {
        c.read_range_into(1, i * 64, 64, &mut out, FillOrder::Readahead, &fill)
            .unwrap();
    }
    assert_eq!(out, file);
    let s = c.stats();
    assert!(s.fills <= 8, "{} fills for 256 pages read sequentially", s.fills);
    let c2 = cache(Mode::Optimistic, 4096);
    let mut out = Vec::new();
    c2.read_range_into(1, 16 * 77, 16, &mut out, FillOrder::Readahead, &fill)
        .unwrap();
    assert_eq!(c2.stats().pages, 1, "a random page is filled alone");
    c.check_invariants().unwrap();
}

/// With the end of the file given, readahead's folios stop there: a file
/// of 3 pages read from its start takes 3 pages of budget (not the 16 of
/// the first read's window), and a sequential reader of a larger file
/// still gets folios as large as without it up to the end.
#[test]
fn readahead_within_the_file_stops_at_its_end() {
    use crate::FillOrder;
    /// Reads `len` bytes at `off` of `file` through `c`, appended to `out`.
    fn read(c: &PageCache, off: u64, len: usize, order: FillOrder, file: &[u8], out: &mut Vec<u8>) {
        c.read_range_into(1, off, len, out, order, from_file(file, 16)).unwrap();
    }
    let within = |end| FillOrder::ReadaheadWithin { end };
    let small: Vec<u8> = (0..16 * 3 - 5).map(|i| i as u8).collect();
    let c = cache(Mode::Optimistic, 4096);
    let mut out = Vec::new();
    read(&c, 0, 64, within(3), &small, &mut out);
    assert_eq!(out, small);
    assert_eq!(c.stats().pages, 3, "the file's 3 pages, nothing past them");
    let c2 = cache(Mode::Optimistic, 4096);
    read(&c2, 0, 64, FillOrder::Readahead, &small, &mut Vec::new());
    assert!(c2.stats().pages > 3, "without the end the first window is larger");

    let file: Vec<u8> = (0..16 * 256).map(|i| (i / 16) as u8).collect();
    let seq = cache(Mode::Optimistic, 4096);
    let mut out = Vec::new();
    for i in 0..64u64 {
        read(&seq, i * 64, 64, within(256), &file, &mut out);
    }
    assert_eq!(out, file);
    assert_eq!(seq.stats().pages, 256);
    assert!(seq.stats().fills <= 8, "{} fills", seq.stats().fills);
    // A stale end (the file grew) limits readahead, not the bytes read.
    let stale = cache(Mode::Optimistic, 4096);
    let mut out = Vec::new();
    read(&stale, 0, 16 * 256, within(2), &file, &mut out);
    assert_eq!(out, file);
    seq.check_invariants().unwrap();
    stale.check_invariants().unwrap();
}

#[test]
fn order_within_keeps_folios_inside_the_end() {
    use super::order_within;
    assert_eq!(order_within(0, 4, 3), 1, "pages 0-1; page 2 alone later");
    assert_eq!(order_within(2, 4, 3), 0);
    assert_eq!(order_within(0, 6, 64), 6);
    assert_eq!(order_within(0, 6, 1000), 6);
    assert_eq!(order_within(64, 6, 100), 5, "64..96 ends inside 100");
    assert_eq!(
        order_within(5, 3, 0),
        1,
        "an end at or before the page: folios end with it (4..6)"
    );
}

/// A drop, a write, a truncate or reclaim that touches one page of a folio
/// acts on the whole folio: a drop or reclaim removes all of it, a write
/// or truncate replaces it with an updated copy (holders keep the old
/// bytes).
#[test]
fn folios_are_dropped_written_and_truncated_whole() {
    for mode in Mode::ALL {
        let c = cache(mode, 64);
        let mut file: Vec<u8> = (0..16 * 16).map(|i| i as u8).collect();
        let fill = |file: &Vec<u8>| {
            let f = file.clone();
            move |first: u64, b: &mut [u8]| from_file(&f, 16)(first, b)
        };
        c.get_or_fill_folio(1, 0, 3, fill(&file)).unwrap();
        c.get_or_fill_folio(1, 8, 3, fill(&file)).unwrap();
        assert_eq!(c.drop_range(1, 3, 3), DropCounts { pages: 8, bytes: 128 }, "{mode:?}");
        assert!(c.get(1, 0).is_none() && c.get(1, 7).is_none());
        // A write into the second folio replaces it whole.
        file[16 * 9 + 2..16 * 9 + 5].copy_from_slice(&[1, 2, 3]);
        c.write(1, 16 * 9 + 2, &[1, 2, 3]);
        for i in 8..16 {
            assert_eq!(&c.get(1, i).unwrap()[..], &file[i as usize * 16..][..16], "{mode:?}");
        }
        // One a reader holds is dropped whole; the holder keeps its bytes.
        let held = c.get(1, 9).unwrap();
        let before = held.to_vec();
        c.write(1, 16 * 9, &[5]);
        file[16 * 9] = 5;
        assert_eq!(held.to_vec(), before);
        assert!(c.get(1, 8).is_none() && c.get(1, 15).is_none(), "{mode:?}");
        drop(held);
        c.get_or_fill_folio(1, 8, 3, fill(&file)).unwrap();
        // Truncate inside it: the folio stays, shortened; pages past the end are empty.
        c.truncate(1, 16 * 10 + 3);
        file.truncate(16 * 10 + 3);
        assert_eq!(&c.get(1, 10).unwrap()[..], &file[160..]);
        assert!(c.get(1, 12).unwrap().is_empty());
        assert_eq!(c.stats().pages, 8);
        // Grow it inside the folio: zeros.
        c.truncate(1, 16 * 11);
        file.resize(16 * 11, 0);
        assert_eq!(&c.get(1, 10).unwrap()[..], &file[160..]);
        // Truncate below it: gone whole.
        c.truncate(1, 16 * 7);
        assert_eq!(c.stats().pages, 0);
        c.check_invariants().unwrap();
        // Reclaim evicts whole folios: fill 6 folios of 8 pages under a
        // budget of 64 pages (48 + 16 spare), then 4 more.
        for k in 0..10u64 {
            c.get_or_fill_folio(2, k * 8, 3, |_, b| Ok::<_, Infallible>(b.len()))
                .unwrap();
            assert!(c.stats().bytes_cached <= 64 * 16, "{mode:?}: budget kept");
        }
        assert!(c.stats().evictions >= 2);
        c.check_invariants().unwrap();
    }
}

/// `write_through` caches what a write makes known: the pages it covers
/// completely (as large aligned folios), the partial last page when the
/// write ends the file, nothing for partial pages otherwise; reading it
/// back fills nothing.
#[test]
fn write_through_inserts_covered_pages() {
    use crate::FillOrder;
    for mode in Mode::ALL {
        let c = cache(mode, 1024);
        let data: Vec<u8> = (0..16 * 20 + 9).map(|i| (i * 3) as u8).collect();
        // A write of 20 pages and 9 bytes at offset 16 * 4 + 5 (to byte
        // 398), ending the file.
        let offset = 16 * 4 + 5;
        c.write_through(1, offset, &data, Some(offset + data.len() as u64));
        // Page 4 is partial at its start: not cached. Pages 5..=23 are
        // covered; page 24 holds the last 14 bytes and ends the file.
        assert!(c.get(1, 4).is_none());
        let mut file = vec![0u8; offset as usize];
        file.extend_from_slice(&data);
        for i in 5..=24u64 {
            let p = c.get(1, i).unwrap_or_else(|| panic!("{mode:?}: page {i} not cached"));
            let start = i as usize * 16;
            assert_eq!(&p[..], &file[start..(start + 16).min(file.len())], "{mode:?} page {i}");
        }
        let mut out = Vec::new();
        let n = c
            .read_range_into(
                1,
                16 * 5,
                4096,
                &mut out,
                FillOrder::Readahead,
                |_, _| -> Result<usize, Infallible> { panic!("written pages are cached") },
            )
            .unwrap();
        assert_eq!(&out[..n], &file[80..]);
        // As folios 5, 6..8, 8..16, 16..24 and 24.
        assert_eq!(c.stats().pages, 20, "{:?}", c.stats());
        let mut slices = Vec::new();
        c.read_refs(
            1,
            16 * 5,
            16 * 20,
            FillOrder::Order(0),
            &mut slices,
            |_, _| -> Result<usize, Infallible> { panic!("written pages are cached") },
        )
        .unwrap();
        let pages: Vec<u64> = slices.iter().map(|s| s.folio_pages()).collect();
        assert_eq!(pages, vec![1, 2, 8, 8, 1], "{mode:?}");
        assert!(c.get(1, 25).is_none());
        // Without the file size the partial last page stays uncached, and a
        // write that does not end the file caches only whole pages.
        let c = cache(mode, 1024);
        c.write_through(2, 0, &data, None);
        assert!(c.get(2, 19).is_some() && c.get(2, 20).is_none());
        c.write_through(3, 0, &data, Some(10_000));
        assert!(c.get(3, 20).is_none());
        c.check_invariants().unwrap();
        // Within the budget: a write larger than the budget caches at most
        // the budget.
        let c = cache(mode, 8);
        c.write_through(4, 0, &[7u8; 16 * 40], None);
        assert!(c.stats().bytes_cached <= 8 * 16);
        c.check_invariants().unwrap();
    }
}

mod model {
    //! A property test against a model: the backing file as a `Vec<u8>`.
    //! Random reads (every ranged API, folio fills of any order, the
    //! readahead), writes (with and without write-through), truncations,
    //! drops and held references, under budgets that force reclaim, in
    //! every radix-tree mode. After each operation: every read returned the
    //! file's bytes, every page the cache holds is the file's page, a held
    //! page never changed, and `check_invariants` passes (folio alignment
    //! and coverage, slot tags, byte accounting).

    use std::convert::Infallible;

    use proptest::prelude::*;

    use super::{Config, PageCache};
    use crate::{FillOrder, Mode};

    const PS: usize = 16;
    /// The file stays within this many pages.
    const SPAN: usize = 150;

    #[derive(Clone, Debug)]
    enum Read {
        Into,
        Range,
        Refs,
        Page,
        Folio(u32),
    }

    #[derive(Clone, Debug)]
    enum Op {
        Read {
            offset: usize,
            len: usize,
            how: Read,
            order: Option<u32>,
        },
        Write {
            offset: usize,
            len: usize,
            through: bool,
            tell_size: bool,
        },
        Truncate(usize),
        DropRange(u64, u64),
        DropInode,
        Hold(usize),
        Release,
    }

    fn op() -> impl Strategy<Value = Op> {
        let at = 0..SPAN * PS;
        let read = prop_oneof![
            Just(Read::Into),
            Just(Read::Range),
            Just(Read::Refs),
            Just(Read::Page),
            (0..=crate::MAX_ORDER).prop_map(Read::Folio),
        ];
        prop_oneof![
            6 => (at.clone(), 0..40 * PS, read, prop::option::of(0..=crate::MAX_ORDER))
                .prop_map(|(offset, len, how, order)| Op::Read { offset, len, how, order }),
            3 => (at.clone(), 1..20 * PS, any::<bool>(), any::<bool>())
                .prop_map(|(offset, len, through, tell_size)| Op::Write { offset, len, through, tell_size }),
            1 => at.clone().prop_map(Op::Truncate),
            1 => (0..SPAN as u64, 0..8u64).prop_map(|(f, n)| Op::DropRange(f, f + n)),
            1 => Just(Op::DropInode),
            1 => (0..SPAN).prop_map(Op::Hold),
            1 => Just(Op::Release),
        ]
    }

    fn fill(file: &[u8]) -> impl FnMut(u64, &mut [u8]) -> Result<usize, Infallible> + '_ {
        move |first, buf| {
            let start = (first as usize * PS).min(file.len());
            let n = (file.len() - start).min(buf.len());
            buf[..n].copy_from_slice(&file[start..start + n]);
            Ok(n)
        }
    }

    #[track_caller]
    fn run(mode: Mode, budget_pages: usize, ops: &[Op]) {
        let c = PageCache::new(Config {
            budget_bytes: budget_pages * PS,
            page_size: PS,
            mode,
        });
        let mut file: Vec<u8> = (0..SPAN * PS * 2 / 3).map(|i| (i * 7 + i / PS) as u8).collect();
        let mut held: Vec<(crate::PageRef, Vec<u8>)> = Vec::new();
        let mut version = 0u8;
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Read {
                    offset,
                    len,
                    ref how,
                    order,
                } => {
                    let order = order.map_or(FillOrder::Readahead, FillOrder::Order);
                    let lo = offset.min(file.len());
                    let hi = (offset + len).min(file.len());
                    let want = &file[lo..hi];
                    let got: Vec<u8> = match how {
                        Read::Into => {
                            let mut buf = vec![0u8; len];
                            let n = c.read_into(1, offset as u64, &mut buf, fill(&file)).unwrap();
                            buf.truncate(n);
                            buf
                        }
                        Read::Range => {
                            let mut out = Vec::new();
                            c.read_range_into(1, offset as u64, len, &mut out, order, fill(&file))
                                .unwrap();
                            out
                        }
                        Read::Refs => {
                            let mut slices = Vec::new();
                            c.read_refs(1, offset as u64, len, order, &mut slices, fill(&file))
                                .unwrap();
                            slices.iter().flat_map(|s| s.iter().copied()).collect()
                        }
                        Read::Page | Read::Folio(_) => {
                            let index = (offset / PS) as u64;
                            let o = if let Read::Folio(o) = how { *o } else { 0 };
                            let mut f = fill(&file);
                            let p = c.get_or_fill_folio(1, index, o, |first, b| f(first, b)).unwrap();
                            let start = (index as usize * PS).min(file.len());
                            let end = (start + PS).min(file.len());
                            assert_eq!(&p[..], &file[start..end], "step {step}: page {index}");
                            want.to_vec()
                        }
                    };
                    assert_eq!(got, want, "step {step}: {op:?}");
                }
                Op::Write {
                    offset,
                    len,
                    through,
                    tell_size,
                } => {
                    version = version.wrapping_add(1);
                    let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ version.wrapping_mul(37)).collect();
                    if file.len() < offset + len {
                        file.resize(offset + len, 0);
                    }
                    file[offset..offset + len].copy_from_slice(&data);
                    if through {
                        let size = tell_size.then_some(file.len() as u64);
                        c.write_through(1, offset as u64, &data, size);
                    } else {
                        c.write(1, offset as u64, &data);
                    }
                }
                Op::Truncate(size) => {
                    file.resize(size, 0);
                    c.truncate(1, size as u64);
                }
                Op::DropRange(first, last) => {
                    c.drop_range(1, first, last);
                }
                Op::DropInode => {
                    c.drop_inode(1);
                }
                Op::Hold(index) => {
                    if let Some(p) = c.get(1, index as u64) {
                        let bytes = p.to_vec();
                        held.push((p, bytes));
                    }
                }
                Op::Release => {
                    held.clear();
                }
            }
            for (p, bytes) in &held {
                assert_eq!(&p[..], &bytes[..], "step {step}: a held page changed");
            }
            c.check_invariants()
                .unwrap_or_else(|e| panic!("step {step} {op:?}: {e}"));
            for index in 0..SPAN as u64 + 8 {
                if let Some(p) = c.get(1, index) {
                    let start = (index as usize * PS).min(file.len());
                    let end = (start + PS).min(file.len());
                    assert_eq!(
                        &p[..],
                        &file[start..end],
                        "step {step} {op:?}: cached page {index} differs"
                    );
                }
            }
        }
        drop(held);
        c.drop_inode(1);
        assert_eq!(c.stats().bytes_cached, 0);
        c.check_invariants().unwrap();
    }

    fn budget() -> impl Strategy<Value = usize> {
        prop_oneof![Just(12usize), Just(64), Just(4096)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 48 } else { 256 }))]

        #[test]
        fn cache_matches_file_serial(budget in budget(), ops in proptest::collection::vec(op(), 1..60)) {
            run(Mode::Serial, budget, &ops);
        }

        #[test]
        fn cache_matches_file_lock_coupled(budget in budget(), ops in proptest::collection::vec(op(), 1..60)) {
            run(Mode::LockCoupled, budget, &ops);
        }

        #[test]
        fn cache_matches_file_optimistic(budget in budget(), ops in proptest::collection::vec(op(), 1..60)) {
            run(Mode::Optimistic, budget, &ops);
        }
    }
}

/// Two writes to different pages of one folio, whose callers hold only
/// their own pages (the filesystem's range locks are per page) and so run
/// at once. Each replaces the folio by an updated copy; the second found
/// the folio before the first replaced it. It must then write into the
/// first one's copy rather than give up: giving up left the first one's
/// copy, which holds the old bytes where the second wrote, in the cache
/// (stale bytes read back through the mount). The interleaving is made by
/// hand: the second write's lookup, then the whole first write, then the
/// second's replacement of the folio it found, which must report the race;
/// then what `update_cached` does on that report (a fresh lookup and the
/// write again). That `update_cached` does look again is the loom model
/// `cow_write_vs_cow_write_same_folio`'s to show.
#[test]
fn a_write_that_meets_another_writes_copy_of_its_folio_writes_into_it() {
    for mode in Mode::ALL {
        let c = cache(mode, 64);
        let mut file: Vec<u8> = (0..16 * 8).map(|i| i as u8).collect();
        let f = file.clone();
        c.get_or_fill_folio(1, 0, 3, move |first, b| from_file(&f, 16)(first, b))
            .unwrap();
        let inode = c.inode(1).expect("inode");
        let guard = c.domain.pin();
        // The second writer (page 6) finds the folio...
        let &(_, found) = inode.pages.gang_runs(6, 1, None, &guard).first().expect("folio");
        // ...the first (page 1) replaces it meanwhile...
        c.write(1, 16 + 3, &[0xa1, 0xa2]);
        file[16 + 3..16 + 5].copy_from_slice(&[0xa1, 0xa2]);
        // ...and the second goes on with the folio it found.
        file[16 * 6 + 7..16 * 6 + 9].copy_from_slice(&[0xb1, 0xb2]);
        inode.invalidate();
        assert_eq!(
            c.write_folio(&inode, found, 16 * 6 + 7, &[0xb1, 0xb2]),
            super::write::Written::Raced,
            "{mode:?}: a replacement of a folio another write replaced first"
        );
        drop(guard);
        // What `update_cached` does then: looks the pages up again and
        // writes into what it finds.
        c.write(1, 16 * 6 + 7, &[0xb1, 0xb2]);
        for i in 0..8u64 {
            if let Some(p) = c.get(1, i) {
                assert_eq!(&p[..], &file[i as usize * 16..][..16], "{mode:?}: page {i}");
            }
        }
        c.check_invariants().unwrap();
    }
}
