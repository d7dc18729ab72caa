//! Stress of the page cache in every mode, against a backing store in
//! memory: readers fill (single pages, folios of random orders, the
//! readahead's folios) and hit (pages, ranged copies, folio slices), one
//! writer writes through and updates the cache (copy-on-write, and
//! write-through insertion), a dropper drops ranges and inodes, and a small
//! budget makes CLOCK evict all along. Checks: every page's content is the
//! pattern of one version; never older than the last write that completed
//! before the read began (so a page removed or replaced by a write is never
//! returned after it); a pinned page or a held folio slice never changes;
//! the counters balance at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use pagecache::{Config, FillOrder, FolioSlice, Mode, PageCache, PageRef};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::scaled;

const PS: usize = 64;
const INODES: u64 = 4;
const PAGES: u64 = 32;

const HALF: usize = PS / 2;

/// A page of version `v`: two halves, each the version in its first 8
/// bytes and then bytes derived from (ino, index, half, v). Each half is
/// written in one piece, so each is self-consistent even while a split
/// write has updated only one of them.
fn pattern(ino: u64, index: u64, v: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(PS);
    for half in 0..2u64 {
        p.extend(v.to_le_bytes());
        p.extend((8..HALF as u64).map(|i| (ino * 131 + index * 31 + half * 57 + v * 7 + i) as u8));
    }
    p
}

/// The oldest version among the halves of a page, after checking that each
/// half is that half's pattern of its version.
#[track_caller]
fn version_of(ino: u64, index: u64, page: &[u8]) -> u64 {
    assert_eq!(page.len(), PS);
    let mut oldest = u64::MAX;
    for half in 0..2 {
        let h = &page[half * HALF..(half + 1) * HALF];
        let v = u64::from_le_bytes(h[..8].try_into().unwrap());
        assert_eq!(
            h,
            &pattern(ino, index, v)[half * HALF..(half + 1) * HALF],
            "torn or foreign page {ino}/{index}"
        );
        oldest = oldest.min(v);
    }
    oldest
}

struct Store {
    /// The backing file's version of each page.
    current: Vec<Mutex<u64>>,
    /// The last version whose cache update completed.
    committed: Vec<AtomicU64>,
}

impl Store {
    fn new() -> Self {
        let n = (INODES * PAGES) as usize;
        Self {
            current: (0..n).map(|_| Mutex::new(0)).collect(),
            committed: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(ino: u64, index: u64) -> usize {
        (ino * PAGES + index) as usize
    }

    fn read(&self, ino: u64, index: u64, buf: &mut [u8]) -> usize {
        let v = *self.current[Self::slot(ino, index)].lock().unwrap();
        buf.copy_from_slice(&pattern(ino, index, v));
        PS
    }

    /// A folio's fill: pages from `first`, one by one (each consistent),
    /// short at the end of the file.
    fn read_folio(&self, ino: u64, first: u64, buf: &mut [u8]) -> usize {
        let mut n = 0;
        for (i, page) in buf.chunks_mut(PS).enumerate() {
            let index = first + i as u64;
            if index >= PAGES {
                break;
            }
            n += self.read(ino, index, page);
        }
        n
    }
}

fn read_checked(cache: &PageCache, store: &Store, ino: u64, index: u64, order: u32) -> PageRef {
    let floor = store.committed[Store::slot(ino, index)].load(Ordering::Acquire);
    let r = cache
        .get_or_fill_folio(ino, index, order, |first, buf| {
            Ok::<_, ()>(store.read_folio(ino, first, buf))
        })
        .unwrap();
    let v = version_of(ino, index, &r);
    assert!(
        v >= floor,
        "page {ino}/{index}: version {v} after write of {floor} completed"
    );
    r
}

/// How a ranged read of the stress reads.
#[derive(Clone, Copy, Debug)]
enum Ranged {
    /// `read_into` (one page per fill).
    Into,
    /// `read_range_into`, filling as the readahead says.
    Range,
    /// `read_refs`, filling folios of up to 4 pages; the slices are held
    /// and checked again later.
    Refs,
}

/// A ranged read of up to `k` whole pages from `index`: every page of the
/// result is one version's pattern, never older than the last write that
/// completed before the read began.
fn read_range_checked(
    cache: &PageCache,
    store: &Store,
    ino: u64,
    index: u64,
    k: u64,
    how: Ranged,
    held: &mut Vec<(FolioSlice, Vec<u8>)>,
) {
    let k = k.min(PAGES - index);
    let floors: Vec<u64> = (index..index + k)
        .map(|i| store.committed[Store::slot(ino, i)].load(Ordering::Acquire))
        .collect();
    let (offset, len) = (index * PS as u64, k as usize * PS);
    let fill = |first: u64, b: &mut [u8]| Ok::<_, ()>(store.read_folio(ino, first, b));
    let buf = match how {
        Ranged::Into => {
            let mut buf = vec![0u8; len];
            let n = cache.read_into(ino, offset, &mut buf, fill).unwrap();
            assert_eq!(n, len);
            buf
        }
        Ranged::Range => {
            let mut out = Vec::new();
            let n = cache
                .read_range_into(ino, offset, len, &mut out, FillOrder::Readahead, fill)
                .unwrap();
            assert_eq!(n, len);
            out
        }
        Ranged::Refs => {
            let mut slices = Vec::new();
            let n = cache
                .read_refs(ino, offset, len, FillOrder::Order(2), &mut slices, fill)
                .unwrap();
            assert_eq!(n, len);
            let bytes: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            for s in slices {
                let copy = s.to_vec();
                held.push((s, copy));
            }
            bytes
        }
    };
    for (j, page) in buf.chunks(PS).enumerate() {
        let i = index + j as u64;
        let v = version_of(ino, i, page);
        assert!(
            v >= floors[j],
            "{how:?}: page {ino}/{i}: version {v} after write of {} completed",
            floors[j]
        );
    }
}

fn stress(mode: Mode) {
    let cache = PageCache::new(Config {
        budget_bytes: 64 * PS,
        page_size: PS,
        mode,
    });
    let store = Store::new();
    let stop = AtomicBool::new(false);
    let reads = scaled(60_000);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..2u64)
            .map(|t| {
                let (cache, store) = (&cache, &store);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut pinned: Vec<(u64, u64, u64, PageRef)> = Vec::new();
                    let mut held: Vec<(FolioSlice, Vec<u8>)> = Vec::new();
                    for _ in 0..reads {
                        let (ino, index) = (rng.random_range(0..INODES), rng.random_range(0..PAGES));
                        let order = [0, 0, 1, 2, 3][rng.random_range(0..5)];
                        let r = read_checked(cache, store, ino, index, order);
                        if rng.random_range(0..16) == 0 {
                            let v = version_of(ino, index, &r);
                            pinned.push((ino, index, v, r));
                        }
                        if pinned.len() > 8 {
                            // A pinned page never changes under its holder.
                            let (ino, index, v, r) = pinned.remove(0);
                            assert_eq!(version_of(ino, index, &r), v);
                        }
                        if let Some(r) = cache.get(ino, index) {
                            version_of(ino, index, &r);
                        }
                        if rng.random_range(0..4) == 0 {
                            let how = [Ranged::Into, Ranged::Range, Ranged::Refs][rng.random_range(0..3)];
                            read_range_checked(cache, store, ino, index, rng.random_range(1..=6), how, &mut held);
                        }
                        if held.len() > 12 {
                            // A held folio slice never changes under its holder.
                            for (s, copy) in held.drain(..6) {
                                assert_eq!(&s[..], &copy[..], "a held folio slice changed");
                            }
                        }
                    }
                })
            })
            .collect();
        let writer = s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(99);
            while !stop.load(Ordering::Relaxed) {
                let (ino, index) = (rng.random_range(0..INODES), rng.random_range(0..PAGES));
                let slot = Store::slot(ino, index);
                // Write through first, then update the cache (the filesystem's order).
                let v = {
                    let mut cur = store.current[slot].lock().unwrap();
                    *cur += 1;
                    *cur
                };
                let whole = pattern(ino, index, v);
                if rng.random_range(0..3) == 0 {
                    cache.write(ino, index * PS as u64, &whole);
                } else if rng.random_range(0..2) == 0 {
                    // Write-through: the page is cached after the call
                    // (within the budget) even if it was not before.
                    let size = (index == PAGES - 1).then_some(PAGES * PS as u64);
                    cache.write_through(ino, index * PS as u64, &whole, size);
                } else {
                    // Two partial writes, one half each.
                    let p = pattern(ino, index, v);
                    cache.write(ino, index * PS as u64 + HALF as u64, &p[HALF..]);
                    cache.write(ino, index * PS as u64, &p[..HALF]);
                }
                store.committed[slot].store(v, Ordering::Release);
            }
        });
        let dropper = s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(7);
            while !stop.load(Ordering::Relaxed) {
                let ino = rng.random_range(0..INODES);
                match rng.random_range(0..3) {
                    0 => drop(cache.drop_inode(ino)),
                    1 => drop(cache.drop_range(ino, rng.random_range(0..PAGES), rng.random_range(0..PAGES))),
                    _ => drop(cache.drop_inodes(&[ino, (ino + 1) % INODES])),
                }
                std::thread::yield_now();
            }
        });
        // Stop the writer and the dropper even if a reader panicked.
        let results: Vec<_> = readers.into_iter().map(|r| r.join()).collect();
        stop.store(true, Ordering::Relaxed);
        for r in results {
            r.unwrap();
        }
        writer.join().unwrap();
        dropper.join().unwrap();
    });
    cache.check_invariants().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    // Held pages and slices may have kept the cache over its budget (it is
    // exceeded while everything is in use); with nothing held, the next
    // fill's reclaim brings it back within.
    let spare = cache
        .get_or_fill(INODES, 0, |b| {
            b.fill(1);
            Ok::<_, ()>(PS)
        })
        .unwrap();
    drop(spare);
    cache.check_invariants().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    let stats = cache.stats();
    assert!(
        stats.bytes_cached <= 64 * PS as u64,
        "{mode:?}: over budget when nothing is held: {stats:?}"
    );
    assert!(
        stats.evictions > 0,
        "{mode:?}: the budget never forced an eviction: {stats:?}"
    );
    // Everything still cached is the latest version.
    for ino in 0..INODES {
        for index in 0..PAGES {
            if let Some(r) = cache.get(ino, index) {
                let want = *store.current[Store::slot(ino, index)].lock().unwrap();
                assert_eq!(
                    version_of(ino, index, &r),
                    want,
                    "{mode:?}: stale page {ino}/{index} at rest"
                );
            }
        }
    }
    let dropped = cache.drop_inodes(&(0..=INODES).collect::<Vec<_>>());
    assert_eq!(dropped.pages, stats.pages);
    assert_eq!(cache.stats().bytes_cached, 0);
}

#[test]
fn stress_readers_writer_dropper() {
    for mode in Mode::ALL {
        stress(mode);
    }
}

/// Threads that miss the same page at once: one fill, one content.
#[test]
fn concurrent_misses_fill_once() {
    for mode in Mode::ALL {
        for round in 0..scaled(40) as u64 {
            let cache = PageCache::new(Config {
                budget_bytes: 1 << 20,
                page_size: PS,
                mode,
            });
            let fills = AtomicUsize::new(0);
            let barrier = Barrier::new(3);
            let pages: Vec<Vec<u8>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..3)
                    .map(|_| {
                        let (cache, fills, barrier) = (&cache, &fills, &barrier);
                        s.spawn(move || {
                            barrier.wait();
                            let r = cache
                                .get_or_fill(1, round, |buf| {
                                    fills.fetch_add(1, Ordering::Relaxed);
                                    std::thread::sleep(Duration::from_millis(2));
                                    buf.copy_from_slice(&pattern(1, round, round));
                                    Ok::<_, ()>(PS)
                                })
                                .unwrap();
                            r.to_vec()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(fills.load(Ordering::Relaxed), 1, "{mode:?}");
            for p in pages {
                assert_eq!(p, pattern(1, round, round));
            }
            assert_eq!(cache.stats().fills, 1);
        }
    }
}

/// The first fill fails while others wait: the failer gets the error, the
/// waiters retry, one of them fills, and no half-filled page is seen.
#[test]
fn failed_fill_with_waiters() {
    for mode in Mode::ALL {
        for round in 0..scaled(40) as u64 {
            let cache = PageCache::new(Config {
                budget_bytes: 1 << 20,
                page_size: PS,
                mode,
            });
            let failed = AtomicBool::new(false);
            let barrier = Barrier::new(3);
            let results: Vec<Result<Vec<u8>, &str>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..3)
                    .map(|_| {
                        let (cache, failed, barrier) = (&cache, &failed, &barrier);
                        s.spawn(move || {
                            barrier.wait();
                            cache
                                .get_or_fill(2, round, |buf| {
                                    buf.fill(0xAA); // must never be seen
                                    std::thread::sleep(Duration::from_millis(1));
                                    if !failed.swap(true, Ordering::Relaxed) {
                                        return Err("io error");
                                    }
                                    buf.copy_from_slice(&pattern(2, round, 5));
                                    Ok(PS)
                                })
                                .map(|r| r.to_vec())
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1, "{mode:?}");
            for r in results.into_iter().flatten() {
                assert_eq!(r, pattern(2, round, 5));
            }
            cache.check_invariants().unwrap();
        }
    }
}

/// A fill callback that panics (a filesystem's read handler can) must act as
/// a failed fill: the page leaves the cache with its bytes unaccounted, and
/// the next reader fills it instead of waiting forever for a fill that will
/// never end.
#[test]
fn panicking_fill_acts_as_failed_fill() {
    for mode in Mode::ALL {
        let cache = PageCache::new(Config {
            budget_bytes: 1 << 20,
            page_size: PS,
            mode,
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.get_or_fill(3, 7, |_buf| -> Result<usize, ()> { panic!("fill handler panicked") })
        }));
        assert!(r.is_err(), "the panic reaches the caller");
        // Checked before any further lookup: a FILLING page left in the tree
        // would make the next `get_or_fill` wait forever.
        cache.check_invariants().unwrap();
        assert_eq!(cache.stats().bytes_cached, 0, "{mode:?}");
        assert!(cache.get(3, 7).is_none());
        let page = cache
            .get_or_fill(3, 7, |buf| {
                buf.copy_from_slice(&pattern(3, 7, 1));
                Ok::<_, ()>(PS)
            })
            .unwrap();
        assert_eq!(&page[..], &pattern(3, 7, 1)[..]);
        cache.check_invariants().unwrap();
    }
}

/// Fills racing with writes that grow the file and truncates that shrink or
/// grow it (so short pages appear, lengthen and vanish). One mutator changes
/// the backing file and then tells the cache, in that order (the contract of
/// `write`); readers fill from the backing file. At the end every cached page
/// must be exactly the file's bytes for that page: a fill that read the file
/// before a change must not stay cached after it, whether the change touched
/// the page (write, truncate) or only moved the end of the file past it.
#[test]
fn fills_vs_writes_and_truncates() {
    const SPAN: usize = 6 * PS;
    for mode in Mode::ALL {
        for round in 0..scaled(24) as u64 {
            let cache = PageCache::new(Config {
                budget_bytes: 1 << 20,
                page_size: PS,
                mode,
            });
            let file = Mutex::new(vec![7u8; PS + 5]);
            let stop = AtomicBool::new(false);
            let read_page = |index: u64| -> PageRef {
                cache
                    .get_or_fill(9, index, |buf| {
                        let n = {
                            let f = file.lock().unwrap();
                            let start = (index as usize * PS).min(f.len());
                            let n = (f.len() - start).min(PS);
                            buf[..n].copy_from_slice(&f[start..start + n]);
                            n
                        };
                        // Widen the window in which the file changes after
                        // the fill read it and before the fill is published.
                        std::thread::sleep(Duration::from_micros(20));
                        Ok::<_, ()>(n)
                    })
                    .unwrap()
            };
            std::thread::scope(|s| {
                for r in 0..2u64 {
                    let (stop, read_page, cache, file) = (&stop, &read_page, &cache, &file);
                    s.spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(round * 17 + r);
                        while !stop.load(Ordering::Relaxed) {
                            let page = read_page(rng.random_range(0..(SPAN / PS) as u64));
                            assert!(page.len() <= PS);
                            if rng.random_range(0..3) == 0 {
                                // A ranged read filling the readahead's folios.
                                let offset = rng.random_range(0..SPAN as u64);
                                let mut out = Vec::new();
                                cache
                                    .read_range_into(9, offset, PS * 3, &mut out, FillOrder::Readahead, |first, buf| {
                                        let f = file.lock().unwrap();
                                        let start = (first as usize * PS).min(f.len());
                                        let n = (f.len() - start).min(buf.len());
                                        buf[..n].copy_from_slice(&f[start..start + n]);
                                        Ok::<_, ()>(n)
                                    })
                                    .unwrap();
                            }
                        }
                    });
                }
                let mut rng = SmallRng::seed_from_u64(round);
                for step in 0..scaled(800) {
                    // Let the readers fill between changes.
                    std::thread::sleep(Duration::from_micros(20));
                    if rng.random_range(0..3) == 0 {
                        let size = rng.random_range(0..SPAN);
                        file.lock().unwrap().resize(size, 0);
                        cache.truncate(9, size as u64);
                    } else {
                        let off = rng.random_range(0..SPAN - 1);
                        let len = rng.random_range(1..(PS + PS / 2).min(SPAN - off));
                        let data: Vec<u8> = (0..len).map(|i| (step + i) as u8 | 1).collect();
                        let size = {
                            let mut f = file.lock().unwrap();
                            if f.len() < off + len {
                                f.resize(off + len, 0);
                            }
                            f[off..off + len].copy_from_slice(&data);
                            f.len() as u64
                        };
                        if step % 2 == 0 {
                            cache.write(9, off as u64, &data);
                        } else {
                            cache.write_through(9, off as u64, &data, Some(size));
                        }
                    }
                }
                stop.store(true, Ordering::Relaxed);
            });
            cache.check_invariants().unwrap();
            let f = file.lock().unwrap();
            for index in 0..(SPAN / PS) as u64 {
                if let Some(page) = cache.get(9, index) {
                    let start = (index as usize * PS).min(f.len());
                    let n = (f.len() - start).min(PS);
                    assert_eq!(
                        &page[..],
                        &f[start..start + n],
                        "{mode:?} round {round}: page {index} differs from the file of {} bytes",
                        f.len()
                    );
                }
            }
        }
    }
}

/// A reader waiting on a fill whose callback panics wakes up, retries and
/// fills the page itself.
#[test]
fn waiter_of_panicking_fill_fills_itself() {
    for mode in Mode::ALL {
        let cache = PageCache::new(Config {
            budget_bytes: 1 << 20,
            page_size: PS,
            mode,
        });
        let inside = Barrier::new(2);
        let page = std::thread::scope(|s| {
            let (cache, inside) = (&cache, &inside);
            let filler = s.spawn(move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    cache.get_or_fill(4, 1, |_buf| -> Result<usize, ()> {
                        inside.wait();
                        // Give the waiter time to find the page filling.
                        std::thread::sleep(Duration::from_millis(5));
                        panic!("fill handler panicked")
                    })
                }))
                .is_err()
            });
            inside.wait();
            let page = cache
                .get_or_fill(4, 1, |buf| {
                    buf.copy_from_slice(&pattern(4, 1, 2));
                    Ok::<_, ()>(PS)
                })
                .unwrap();
            assert!(filler.join().unwrap(), "the filler saw its panic");
            page
        });
        assert_eq!(&page[..], &pattern(4, 1, 2)[..]);
        drop(page);
        cache.check_invariants().unwrap();
    }
}

/// Fills race with the removal of an emptied inode's entry. Three threads
/// each own one page index of one shared inode and loop: fill it, drop it
/// (which may empty the inode and retire its entry, and makes the others'
/// fills stale). A fourth fills and truncates to zero another inode. Two
/// more fill pages of 16 inodes under a budget of 8 pages, so that CLOCK
/// (which does not invalidate) empties entries while they fill: a page they
/// hold must be findable (one that landed in an entry already out of the
/// map would not be). At the end the accounting matches the reachable pages
/// (a page in an unreachable entry would be counted but not found) and
/// dropping everything leaves no entry and no page.
fn fills_vs_emptying(mode: Mode) {
    let cache = PageCache::new(Config {
        budget_bytes: 8 * PS,
        page_size: PS,
        mode,
    });
    let rounds = scaled(8_000);
    let start = Barrier::new(6);
    let byte = |ino: u64, index: u64| (ino * 7 + index + 1) as u8;
    let fill_page = |ino: u64, index: u64| {
        let r = cache
            .get_or_fill(ino, index, |b| {
                b.fill(byte(ino, index));
                Ok::<_, ()>(PS)
            })
            .unwrap();
        assert!(r.iter().all(|&b| b == byte(ino, index)), "page {ino}/{index}");
        r
    };
    std::thread::scope(|s| {
        for me in 0..3u64 {
            let (cache, start) = (&cache, &start);
            s.spawn(move || {
                start.wait();
                for _ in 0..rounds {
                    drop(fill_page(1, me));
                    cache.drop_range(1, me, me);
                }
            });
        }
        let (cache, start) = (&cache, &start);
        s.spawn(move || {
            start.wait();
            for i in 0..rounds as u64 {
                drop(fill_page(2, i % 3));
                cache.truncate(2, 0);
            }
        });
        for me in 0..2u64 {
            s.spawn(move || {
                start.wait();
                for i in 0..rounds as u64 {
                    let (ino, index) = (100 + (i + me) % 16, (i * 7 + me) % 3);
                    let held = fill_page(ino, index);
                    // Held, so CLOCK cannot evict it, and nothing invalidates
                    // these inodes: it must be in the map.
                    let found = cache.get(ino, index).expect("a held page is findable");
                    assert_eq!(found.to_vec(), held.to_vec());
                    assert!(cache.inode_count() <= 24, "{} entries for 8 pages", cache.inode_count());
                }
            });
        }
    });
    cache.check_invariants().unwrap();
    let all: Vec<u64> = (0..200).collect();
    cache.drop_inodes(&all);
    assert_eq!(cache.inode_count(), 0);
    assert_eq!(cache.stats().pages, 0);
    cache.check_invariants().unwrap();
}

#[test]
fn stress_fills_vs_emptying() {
    for mode in Mode::ALL {
        fills_vs_emptying(mode);
    }
}
