//! Page-cache hits: look a 4 KiB page up and copy it out (what a cached
//! `read` does), at 1 and 2 threads, in bytes per second, beside a plain
//! `memcpy` of the same pages from a `Vec` (the physical limit of the copy).
//!
//! Seed 003 (HAMMER SMP work) doubled concurrent cached-read throughput by
//! taking the per-mount lock off the cached read path; seed 002's lookups run
//! under RCU. rcufs's `PageCache::get` pins the page with a speculative
//! reference and takes no lock, so a hit should cost little more than the
//! copy. `rcufs_read_into` copies the same pages through
//! `PageCache::read_into` (one call per page here), and `rcufs_read_range`
//! through `PageCache::read_range_into` into a reused `Vec` (neither takes
//! a reference: folios never change after their fill), and
//! `memcpy_cached_pages` copies the cache's own pages through slices taken
//! once before (the same memory without the lookup: it separates what the
//! lookup costs from where the bytes sit), and `memcpy_cached_pages_pinned`
//! does the same inside an epoch pin (`rcu::pin`), as the cache's hit paths
//! run: the
//! least any lookup under an epoch can cost, one dependent load (the page's
//! address) and one pin. `memcpy` copies from boxed
//! pages, as a heap gives them (16-byte aligned, most spanning two pages of
//! memory); `memcpy_aligned` from page-aligned pages in 2 MiB-aligned
//! memory, as the kernel's page cache and rcufs's page frames place them:
//! the better-placed copy, which the cache's rows are also held to. The
//! working set is
//! 16,384 pages (64 MiB, twice this machine's 32 MiB last-level cache) in
//! 16 files, probed in the same random order by all. Every copy lands on
//! a page boundary, as in a reader's page-aligned buffer: glibc's `memcpy`
//! runs about four times slower on this machine's CPUs when the destination
//! is 1 to 31 bytes past the source modulo 4 KiB (BENCHMARKS.md, "Copies 16
//! bytes past their source"), so a heap buffer's chance placement could
//! otherwise decide a row.
//!
//! `pagecache_range_128k` and `pagecache_range_1m`: 128 KiB and 1 MiB reads
//! at random aligned offsets of 16 files of 4 MiB cached as folios of 64
//! pages (what a FUSE read of a large file asks), through `read_range_into`
//! (`rcufs_read_range`) and through `read_refs` plus a copy of the slices
//! (`rcufs_read_refs`: what a vectored write of the reply would read),
//! beside `memcpy` of the same bytes from plain 4 MiB buffers.

use benches::{Routine, Unit, consume, cycle, permutation, run_group, timed_threads};
use criterion::{Criterion, criterion_group, criterion_main};
use pagecache::{Config, FillOrder, FolioSlice, PageCache};

const PAGE: usize = 4096;
const FILES: u64 = 16;
const PAGES_PER_FILE: u64 = 1024;

fn bench_hits(c: &mut Criterion) {
    benches::calibration(c, "pagecache");
    let total = (FILES * PAGES_PER_FILE) as usize;
    let cache = PageCache::new(Config {
        budget_bytes: 4 * total * PAGE,
        page_size: PAGE,
        ..Config::default()
    });
    let mut plain: Vec<Box<[u8]>> = Vec::with_capacity(total);
    for ino in 1..=FILES {
        for index in 0..PAGES_PER_FILE {
            let byte = (ino * 31 + index) as u8;
            let page = cache
                .get_or_fill(ino, index, |buf| {
                    buf.fill(byte);
                    Ok::<usize, ()>(buf.len())
                })
                .expect("fill succeeds");
            assert_eq!(page.len(), PAGE);
            plain.push(vec![byte; PAGE].into_boxed_slice());
        }
    }
    let mut aligned = AlignedPages::new(total);
    for (p, page) in plain.iter().enumerate() {
        aligned.page_mut(p).copy_from_slice(page);
    }
    // The cache's own pages, referenced once, as slices: the copy from the
    // same memory without the lookup.
    let held: Vec<_> = (1..=FILES)
        .flat_map(|ino| (0..PAGES_PER_FILE).map(move |index| (ino, index)))
        .map(|(ino, index)| cache.get(ino, index).expect("every benchmark page is cached"))
        .collect();
    let held: Vec<&[u8]> = held.iter().map(|r| &r[..]).collect();
    let probes: Vec<(u64, u64)> = permutation(total, 41)
        .into_iter()
        .map(|p| (p as u64 / PAGES_PER_FILE + 1, p as u64 % PAGES_PER_FILE))
        .collect();

    let off = |t: usize, threads: usize| t * total / threads;
    let contenders: Vec<(&str, Routine<'_>)> = vec![
        (
            "rcufs_pagecache",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut dest = AlignedPages::new(1);
                    let buf = dest.page_mut(0);
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        let page = cache.get(ino, index).expect("every benchmark page is cached");
                        buf[..page.len()].copy_from_slice(&page);
                        consume(&*buf);
                    })
                })
            }),
        ),
        (
            "rcufs_read_into",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut dest = AlignedPages::new(1);
                    let buf = dest.page_mut(0);
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        let n = cache
                            .read_into(ino, index * PAGE as u64, buf, |_, _| Err::<usize, ()>(()))
                            .expect("every benchmark page is cached");
                        assert_eq!(n, PAGE);
                        consume(&*buf);
                    })
                })
            }),
        ),
        (
            "rcufs_read_range",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    // Appends start on a page boundary, as the others' copies
                    // do (the bytes before it stay in the `Vec`).
                    let mut out = Vec::<u8>::with_capacity(2 * PAGE);
                    let pad = out.as_ptr().align_offset(PAGE);
                    out.resize(pad, 0);
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        out.truncate(pad);
                        let n = cache
                            .read_range_into(ino, index * PAGE as u64, PAGE, &mut out, FillOrder::Order(0), |_, _| {
                                Err::<usize, ()>(())
                            })
                            .expect("every benchmark page is cached");
                        assert_eq!(n, PAGE);
                        consume(&out[pad..]);
                    })
                })
            }),
        ),
        (
            "memcpy_cached_pages",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut dest = AlignedPages::new(1);
                    let buf = dest.page_mut(0);
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        buf.copy_from_slice(held[((ino - 1) * PAGES_PER_FILE + index) as usize]);
                        consume(&*buf);
                    })
                })
            }),
        ),
        (
            "memcpy_cached_pages_pinned",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut dest = AlignedPages::new(1);
                    let buf = dest.page_mut(0);
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        let guard = rcu::pin();
                        buf.copy_from_slice(held[((ino - 1) * PAGES_PER_FILE + index) as usize]);
                        consume(&*buf);
                        drop(guard);
                    })
                })
            }),
        ),
        (
            "memcpy",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut dest = AlignedPages::new(1);
                    let buf = dest.page_mut(0);
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        let page = &plain[((ino - 1) * PAGES_PER_FILE + index) as usize];
                        buf.copy_from_slice(page);
                        consume(&*buf);
                    })
                })
            }),
        ),
        (
            "memcpy_aligned",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut dest = AlignedPages::new(1);
                    let buf = dest.page_mut(0);
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        buf.copy_from_slice(aligned.page(((ino - 1) * PAGES_PER_FILE + index) as usize));
                        consume(&*buf);
                    })
                })
            }),
        ),
    ];
    run_group(
        c,
        "pagecache_hit_copy",
        Unit::Bytes(PAGE as u64),
        total as u64,
        &contenders,
    );
}

/// `n` page-aligned pages in one allocation aligned to 2 MiB and marked
/// `MADV_HUGEPAGE`, as the page frames' chunks are: the same placement.
struct AlignedPages {
    base: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: plain bytes, written only through `&mut self`.
unsafe impl Sync for AlignedPages {}
// SAFETY: as above; the allocation belongs to the value.
unsafe impl Send for AlignedPages {}

impl AlignedPages {
    fn new(n: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(n * PAGE, 2 << 20).expect("a valid layout");
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc(layout) };
        let base = std::ptr::NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        // SAFETY: the range is the allocation's (2 MiB-aligned, a multiple of
        // pages); advice only, given before the first write faults the
        // memory in. Then every byte is written once.
        unsafe {
            libc::madvise(ptr.cast(), layout.size(), libc::MADV_HUGEPAGE);
            std::ptr::write_bytes(ptr, 0, layout.size());
        }
        Self { base, layout }
    }

    /// Page `p`'s bytes.
    fn page(&self, p: usize) -> &[u8] {
        assert!((p + 1) * PAGE <= self.layout.size());
        // SAFETY: the page is inside the allocation, whose bytes were all
        // written in `new`, and is written only through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(p * PAGE), PAGE) }
    }

    fn page_mut(&mut self, p: usize) -> &mut [u8] {
        assert!((p + 1) * PAGE <= self.layout.size());
        // SAFETY: as in `page`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(p * PAGE), PAGE) }
    }
}

impl Drop for AlignedPages {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// Files of this size, cached as folios of 64 pages, for the range groups.
const BIG: u64 = 4 << 20;

fn bench_ranges(c: &mut Criterion) {
    let cache = PageCache::new(Config {
        budget_bytes: 4 * (FILES * BIG) as usize,
        page_size: PAGE,
        ..Config::default()
    });
    let mut plain: Vec<Vec<u8>> = Vec::new();
    for ino in 1..=FILES {
        let bytes: Vec<u8> = (0..BIG).map(|i| (ino * 7 + i / PAGE as u64) as u8).collect();
        for first in (0..BIG / PAGE as u64).step_by(64) {
            cache
                .get_or_fill_folio(ino, first, 6, |f, b| {
                    let at = (f * PAGE as u64) as usize;
                    b.copy_from_slice(&bytes[at..at + b.len()]);
                    Ok::<usize, ()>(b.len())
                })
                .expect("fill succeeds");
        }
        plain.push(bytes);
    }
    for (group, size) in [
        ("pagecache_range_128k", 128usize << 10),
        ("pagecache_range_1m", 1 << 20),
    ] {
        let per = BIG / size as u64;
        let probes: Vec<(u64, u64)> = permutation((FILES * per) as usize, 43)
            .into_iter()
            .map(|p| (p as u64 / per + 1, (p as u64 % per) * size as u64))
            .collect();
        let off = |t: usize, threads: usize| t * probes.len() / threads;
        let none = |_: u64, _: &mut [u8]| Err::<usize, ()>(());
        let (cache, plain, probes) = (&cache, &plain, &probes);
        let contenders: Vec<(&str, Routine<'_>)> = vec![
            (
                "rcufs_read_range",
                Box::new(move |threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        let mut out = Vec::with_capacity(size);
                        cycle(probes, off(t, threads), iters, |&(ino, at)| {
                            out.clear();
                            let n = cache
                                .read_range_into(ino, at, size, &mut out, FillOrder::Readahead, none)
                                .expect("cached");
                            assert_eq!(n, size);
                            consume(&out);
                        })
                    })
                }),
            ),
            (
                "rcufs_read_refs",
                Box::new(move |threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        let mut out = Vec::with_capacity(size);
                        let mut slices: Vec<FolioSlice> = Vec::with_capacity(8);
                        cycle(probes, off(t, threads), iters, |&(ino, at)| {
                            out.clear();
                            let n = cache
                                .read_refs(ino, at, size, FillOrder::Readahead, &mut slices, none)
                                .expect("cached");
                            assert_eq!(n, size);
                            for s in slices.drain(..) {
                                out.extend_from_slice(&s);
                            }
                            consume(&out);
                        })
                    })
                }),
            ),
            (
                "memcpy",
                Box::new(move |threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        let mut out = Vec::with_capacity(size);
                        cycle(probes, off(t, threads), iters, |&(ino, at)| {
                            out.clear();
                            let f = &plain[(ino - 1) as usize];
                            out.extend_from_slice(&f[at as usize..at as usize + size]);
                            consume(&out);
                        })
                    })
                }),
            ),
        ];
        run_group(c, group, Unit::Bytes(size as u64), probes.len() as u64, &contenders);
    }
}

criterion_group! {
    name = pagecache_benches;
    config = benches::criterion();
    targets = bench_hits, bench_ranges
}
criterion_main!(pagecache_benches);
