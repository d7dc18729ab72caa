//! The hit paths measured in CPU time rather than wall time, for A/B
//! comparisons on a loaded machine: a thread's time on the CPU
//! (`CLOCK_THREAD_CPUTIME_ID`, exact to the nanosecond: the kernel adds
//! the time since the last tick when it is read) does not count the time
//! other processes hold the core, which wall-time benchmarks do. (Cache
//! and memory-bandwidth interference still count.)
//!
//! Contenders, one thread, same random probes, interleaved in random order
//! over the rounds, median per contender:
//! - `radix_dense` / `radix_sparse`: `RadixTree::get` on 2^20 keys, dense
//!   (`0..2^20`) or spread over `0..2^32` (boxed values);
//! - `radix_dense_inline` / `radix_sparse_inline`: the same keys in trees
//!   of inline values (`radix::Inline`), read with `get_copied`;
//! - `pagecache_get_copy`: `PageCache::get` and a copy of the 4 KiB page
//!   (the `pagecache_hit_copy` bench's loop), 16 files × 1024 pages;
//! - `pagecache_read_into`: the same through `PageCache::read_into`;
//! - `pagecache_read_range`: the same through `PageCache::read_range_into`
//!   into a reused `Vec` (cleared, not zeroed);
//! - `held_memcpy`: the same copy from the cache's own pages, found from
//!   slices of them taken once before (the copy from the same memory,
//!   without the lookup): what separates the lookup's cost from the
//!   placement of the bytes;
//! - `memcpy`: the same copy from a `Vec` of boxed pages;
//! - `aligned_memcpy`: the same copy from page-aligned pages in 2 MiB-aligned
//!   memory marked `MADV_HUGEPAGE` (where the page frames put the cache's
//!   pages), the address computed rather than loaded; and
//!   `aligned_loaded_memcpy`, the same with each page's address loaded from
//!   a table of slices (one dependent load, as `held_memcpy` has: the
//!   least any lookup adds); `aligned_loaded_pinned_memcpy`, that copy
//!   inside an epoch pin (the least any lookup under an epoch adds: the
//!   page cache's hit paths pin once per call, through `rcu::pin`), and
//!   `pin_only`, that pin alone; `pin_crossbeam`, `crossbeam_epoch::pin`
//!   alone (its own participant, pinned through a call);
//! - every copy lands in a destination that starts on a page boundary
//!   (see `Dest`), but `aligned_memcpy_16_past`: `aligned_memcpy` into a
//!   destination 16 bytes past one, the case `Dest` avoids;
//! - `range128k_read_range`, `range1m_read_range`: 128 KiB and 1 MiB reads
//!   at random aligned offsets of 16 files of 4 MiB cached as folios of
//!   64 pages, through `read_range_into`, and `range128k_read_refs`,
//!   `range1m_read_refs`: the same through `read_refs` plus a copy of the
//!   slices (what a `writev` would read); beside `range128k_memcpy`,
//!   `range1m_memcpy`, the same bytes copied from plain 4 MiB buffers.
//!
//! - `pagecache_fill`: a miss, `get_or_fill` of a 4 KiB page of a fresh
//!   file whose fill writes the page, and its share of dropping the file
//!   after every 8,192 pages (so that the folios' memory is freed and used
//!   again, as a cache that runs at its budget does). Run once as is and once
//!   with `PAGECACHE_SYSTEM_ALLOC=1` to set the page frames against the
//!   allocator's blocks.
//!
//! `cargo run --release -p pagecache --example hitpath -- [rounds] [filter]`
//! (default 15 rounds; `filter`, a comma-separated list, keeps the
//! contenders whose name contains one of its parts, and builds only what
//! they use: for profiling one path). For an A/B against an older commit,
//! build that commit's own `hitpath` in a separate directory and compare
//! the contenders both have.

use std::hint::black_box;

use pagecache::radix::Inline;
use pagecache::{Config, FillOrder, FolioSlice, Mode, PageCache, RadixTree};

const PAGE: usize = 4096;
const FILES: u64 = 16;
const PAGES_PER_FILE: u64 = 1024;
const KEYS: usize = 1 << 20;

/// Nanoseconds this thread has run on a CPU.
fn cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A xorshift generator: deterministic probes without a dependency.
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut next = xorshift(seed);
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        v.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    v
}

type Op<'a> = Box<dyn FnMut(usize) + 'a>;

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(15, |a| a.parse().expect("rounds"));
    let filter = std::env::args().nth(2).unwrap_or_default();
    let chosen = |name: &str| filter.split(',').any(|f| name.contains(f));
    let dense: RadixTree<u64> = RadixTree::new(Mode::Optimistic);
    let sparse: RadixTree<u64> = RadixTree::new(Mode::Optimistic);
    let mut next = xorshift(31);
    // Only what the chosen contenders use is built (for profiles of one).
    let keys = if filter.is_empty() || filter.contains("radix") {
        KEYS
    } else {
        1
    };
    let mut sparse_keys = std::collections::BTreeSet::new();
    while sparse_keys.len() < keys {
        sparse_keys.insert(next() & 0xffff_ffff);
    }
    let sparse_keys: Vec<u64> = sparse_keys.into_iter().collect();
    let dense_inline: RadixTree<u64, Inline> = RadixTree::with_policy(Mode::Optimistic);
    let sparse_inline: RadixTree<u64, Inline> = RadixTree::with_policy(Mode::Optimistic);
    for k in 0..keys as u64 {
        dense.insert(k, k + 1).unwrap();
        dense_inline.insert(k, k + 1).unwrap();
    }
    for &k in &sparse_keys {
        sparse.insert(k, k + 1).unwrap();
        sparse_inline.insert(k, k + 1).unwrap();
    }
    let probes = permutation(keys, 32);

    let cache = PageCache::new(Config {
        budget_bytes: 4 * (FILES * PAGES_PER_FILE) as usize * PAGE,
        page_size: PAGE,
        ..Config::default()
    });
    let mut plain: Vec<Box<[u8]>> = Vec::new();
    for ino in 1..=FILES {
        for index in 0..PAGES_PER_FILE {
            let byte = (ino * 31 + index) as u8;
            cache
                .get_or_fill(ino, index, |b| {
                    b.fill(byte);
                    Ok::<usize, ()>(b.len())
                })
                .unwrap();
            plain.push(vec![byte; PAGE].into_boxed_slice());
        }
    }
    let total = (FILES * PAGES_PER_FILE) as usize;
    let aligned = aligned_pages(&plain);
    let aligned_slices: Vec<&[u8]> = aligned.chunks(PAGE).collect();
    // The cache's own pages, referenced once: the copy without the lookup.
    let held: Vec<_> = (1..=FILES)
        .flat_map(|ino| (0..PAGES_PER_FILE).map(move |index| (ino, index)))
        .map(|(ino, index)| cache.get(ino, index).expect("cached"))
        .collect();
    let held: Vec<&[u8]> = held.iter().map(|r| &r[..]).collect();
    let pages: Vec<(u64, u64)> = permutation(total, 41)
        .into_iter()
        .map(|p| (p as u64 / PAGES_PER_FILE + 1, p as u64 % PAGES_PER_FILE))
        .collect();

    // Files of 4 MiB cached as folios of 64 pages, for the range rows.
    const BIG: u64 = 4 << 20;
    let folios = PageCache::new(Config {
        budget_bytes: 4 * (FILES * BIG) as usize,
        page_size: PAGE,
        ..Config::default()
    });
    let mut big_plain: Vec<Vec<u8>> = Vec::new();
    let range_names = [
        "range128k_read_range",
        "range128k_read_refs",
        "range128k_memcpy",
        "range1m_read_range",
        "range1m_read_refs",
        "range1m_memcpy",
    ];
    let big_files = if range_names.iter().any(|n| chosen(n)) {
        FILES
    } else {
        0
    };
    for ino in 1..=big_files {
        let bytes: Vec<u8> = (0..BIG).map(|i| (ino * 7 + i / 4096) as u8).collect();
        for first in (0..BIG / PAGE as u64).step_by(64) {
            folios
                .get_or_fill_folio(ino, first, 6, |f, b| {
                    let at = (f * PAGE as u64) as usize;
                    b.copy_from_slice(&bytes[at..at + b.len()]);
                    Ok::<usize, ()>(b.len())
                })
                .unwrap();
        }
        big_plain.push(bytes);
    }
    let ranges = |size: u64| -> Vec<(u64, u64)> {
        let per = BIG / size;
        permutation((FILES * per) as usize, 43)
            .into_iter()
            .map(|p| (p as u64 / per + 1, (p as u64 % per) * size))
            .collect()
    };
    let (r128, r1m) = (ranges(128 << 10), ranges(1 << 20));
    let out = std::cell::RefCell::new(Dest::new(1 << 20));
    let slices = std::cell::RefCell::new(Vec::<FolioSlice>::with_capacity(64));
    let none = |_: u64, _: &mut [u8]| Err::<usize, ()>(());
    let read_range = |ino: u64, offset: u64, len: usize| {
        let mut d = out.borrow_mut();
        let o = d.clear();
        let n = folios
            .read_range_into(ino, offset, len, o, FillOrder::Readahead, none)
            .expect("cached");
        black_box((n, d.bytes()));
    };
    let read_refs = |ino: u64, offset: u64, len: usize| {
        let (mut d, mut s) = (out.borrow_mut(), slices.borrow_mut());
        let o = d.clear();
        let n = folios
            .read_refs(ino, offset, len, FillOrder::Readahead, &mut s, none)
            .expect("cached");
        for piece in s.drain(..) {
            o.extend_from_slice(&piece);
        }
        black_box((n, d.bytes()));
    };
    let plain_range = |ino: u64, offset: u64, len: usize| {
        let mut d = out.borrow_mut();
        let o = d.clear();
        let f = &big_plain[(ino - 1) as usize];
        o.extend_from_slice(&f[offset as usize..offset as usize + len]);
        black_box(d.bytes());
    };

    // Fresh files filled page by page and dropped every `FILL_RUN` pages.
    const FILL_RUN: u64 = 8192;
    let fills = PageCache::new(Config {
        budget_bytes: 2 * FILL_RUN as usize * PAGE,
        page_size: PAGE,
        ..Config::default()
    });
    let filled = std::cell::Cell::new(0u64);

    // One destination buffer for every contender (they run one at a time).
    let buf = std::cell::RefCell::new(Dest::new(2 * PAGE));
    let mut ops: Vec<(&str, usize, Op<'_>)> = vec![
        (
            "radix_dense",
            2_000_000,
            Box::new(|i| {
                let g = dense.pin();
                black_box(dense.get(probes[i % keys] as u64, &g).copied());
            }),
        ),
        (
            "radix_sparse",
            2_000_000,
            Box::new(|i| {
                let g = sparse.pin();
                black_box(sparse.get(sparse_keys[probes[i % keys]], &g).copied());
            }),
        ),
        (
            "radix_dense_inline",
            2_000_000,
            Box::new(|i| {
                let g = dense_inline.pin();
                black_box(dense_inline.get_copied(probes[i % keys] as u64, &g));
            }),
        ),
        (
            "radix_sparse_inline",
            2_000_000,
            Box::new(|i| {
                let g = sparse_inline.pin();
                black_box(sparse_inline.get_copied(sparse_keys[probes[i % keys]], &g));
            }),
        ),
        (
            "pagecache_get_copy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let p = cache.get(ino, index).expect("cached");
                let mut d = buf.borrow_mut();
                let b = d.page();
                b[..p.len()].copy_from_slice(&p);
                black_box(&*b);
            }),
        ),
        (
            "pagecache_read_into",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let mut d = buf.borrow_mut();
                let b = d.page();
                let n = cache
                    .read_into(ino, index * PAGE as u64, b, |_, _| Err::<usize, ()>(()))
                    .expect("cached");
                black_box((n, &*b));
            }),
        ),
        (
            "pagecache_read_range",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let mut d = out.borrow_mut();
                let o = d.clear();
                let n = cache
                    .read_range_into(ino, index * PAGE as u64, PAGE, o, FillOrder::Order(0), none)
                    .expect("cached");
                black_box((n, d.bytes()));
            }),
        ),
        (
            "held_memcpy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let mut d = buf.borrow_mut();
                let b = d.page();
                b.copy_from_slice(held[((ino - 1) * PAGES_PER_FILE + index) as usize]);
                black_box(&*b);
            }),
        ),
        (
            "memcpy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let mut d = buf.borrow_mut();
                let b = d.page();
                b.copy_from_slice(&plain[((ino - 1) * PAGES_PER_FILE + index) as usize]);
                black_box(&*b);
            }),
        ),
        (
            "aligned_memcpy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let p = ((ino - 1) * PAGES_PER_FILE + index) as usize;
                let mut d = buf.borrow_mut();
                let b = d.page();
                b.copy_from_slice(&aligned[p * PAGE..(p + 1) * PAGE]);
                black_box(&*b);
            }),
        ),
        (
            "aligned_loaded_memcpy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let p = ((ino - 1) * PAGES_PER_FILE + index) as usize;
                let mut d = buf.borrow_mut();
                let b = d.page();
                b.copy_from_slice(aligned_slices[p]);
                black_box(&*b);
            }),
        ),
        (
            "aligned_memcpy_16_past",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let p = ((ino - 1) * PAGES_PER_FILE + index) as usize;
                let mut d = buf.borrow_mut();
                let b = d.page_at(16);
                b.copy_from_slice(&aligned[p * PAGE..(p + 1) * PAGE]);
                black_box(&*b);
            }),
        ),
        (
            "aligned_loaded_pinned_memcpy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let p = ((ino - 1) * PAGES_PER_FILE + index) as usize;
                let g = rcu::pin();
                let mut d = buf.borrow_mut();
                let b = d.page();
                b.copy_from_slice(aligned_slices[p]);
                black_box(&*b);
                drop(g);
            }),
        ),
        (
            "pin_only",
            2_000_000,
            Box::new(|i| {
                let g = rcu::pin();
                black_box((&g, i));
                drop(g);
            }),
        ),
        (
            "pin_crossbeam",
            2_000_000,
            Box::new(|i| {
                let g = crossbeam_epoch::pin();
                black_box((&g, i));
                drop(g);
            }),
        ),
        (
            "pagecache_fill",
            200_000,
            Box::new(|_| {
                let n = filled.get();
                filled.set(n + 1);
                let (ino, index) = (n / FILL_RUN + 1, n % FILL_RUN);
                let p = fills
                    .get_or_fill(ino, index, |b| {
                        b.fill(index as u8);
                        Ok::<usize, ()>(b.len())
                    })
                    .expect("filled");
                black_box(&p[..1]);
                drop(p);
                if index == FILL_RUN - 1 {
                    fills.drop_inode(ino);
                }
            }),
        ),
        (
            "range128k_read_range",
            10_000,
            Box::new(|i| {
                let (ino, off) = r128[i % r128.len()];
                read_range(ino, off, 128 << 10);
            }),
        ),
        (
            "range128k_read_refs",
            10_000,
            Box::new(|i| {
                let (ino, off) = r128[i % r128.len()];
                read_refs(ino, off, 128 << 10);
            }),
        ),
        (
            "range128k_memcpy",
            10_000,
            Box::new(|i| {
                let (ino, off) = r128[i % r128.len()];
                plain_range(ino, off, 128 << 10);
            }),
        ),
        (
            "range1m_read_range",
            1_500,
            Box::new(|i| {
                let (ino, off) = r1m[i % r1m.len()];
                read_range(ino, off, 1 << 20);
            }),
        ),
        (
            "range1m_read_refs",
            1_500,
            Box::new(|i| {
                let (ino, off) = r1m[i % r1m.len()];
                read_refs(ino, off, 1 << 20);
            }),
        ),
        (
            "range1m_memcpy",
            1_500,
            Box::new(|i| {
                let (ino, off) = r1m[i % r1m.len()];
                plain_range(ino, off, 1 << 20);
            }),
        ),
    ];
    ops.retain(|(name, _, _)| chosen(name));
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
    let mut order: Vec<usize> = (0..ops.len()).collect();
    let mut next = xorshift(77);
    let mut start = 0usize;
    for _ in 0..rounds {
        for i in (1..order.len()).rev() {
            order.swap(i, (next() % (i as u64 + 1)) as usize);
        }
        for &c in &order {
            let (_, n, op) = &mut ops[c];
            for i in 0..*n / 5 {
                op(start + i); // warm-up
            }
            let t0 = cpu_ns();
            for i in 0..*n {
                op(start + i);
            }
            samples[c].push((cpu_ns() - t0) as f64 / *n as f64);
            start += 7919;
        }
    }
    for (c, (name, _, _)) in ops.iter().enumerate() {
        let v = &mut samples[c];
        v.sort_by(f64::total_cmp);
        println!(
            "{name:22} median {:8.1} ns/op (min {:.1}, max {:.1})",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        );
    }
}

/// A copy destination whose bytes start on a page boundary, as a reader's
/// buffer usually does (and as the kernel's pages do). Where a destination
/// starts matters here: glibc's `memcpy` copies these sizes with `rep
/// movsb`, which on this machine's CPUs (AMD EPYC) runs about four times
/// slower when the destination is 1 to 31 bytes past the source modulo
/// 4 KiB, and a heap block of 128 KiB or more starts 16 bytes past a page
/// boundary (the allocator's header), so a `Vec` of that size copying from
/// page-aligned pages is exactly that case (BENCHMARKS.md, "Copies 16
/// bytes past their source").
struct Dest {
    v: Vec<u8>,
    /// Bytes before the page boundary, kept in `v` so that appends start on it.
    pad: usize,
}

impl Dest {
    /// Room for `cap` bytes from a page boundary.
    fn new(cap: usize) -> Self {
        let mut v = Vec::<u8>::with_capacity(cap + PAGE);
        let pad = v.as_ptr().align_offset(PAGE);
        v.resize(pad, 0);
        Self { v, pad }
    }

    /// The buffer emptied to the boundary, to append to (no more than the
    /// capacity asked for, so that it never moves).
    fn clear(&mut self) -> &mut Vec<u8> {
        self.v.truncate(self.pad);
        &mut self.v
    }

    /// The bytes appended since the last `clear`.
    fn bytes(&self) -> &[u8] {
        &self.v[self.pad..]
    }

    /// One page from the boundary, to copy into.
    fn page(&mut self) -> &mut [u8] {
        self.page_at(0)
    }

    /// One page from `off` bytes past the boundary.
    fn page_at(&mut self, off: usize) -> &mut [u8] {
        self.v.resize(self.pad + off + PAGE, 0);
        &mut self.v[self.pad + off..]
    }
}

/// `pages` copied into one 2 MiB-aligned run of memory marked
/// `MADV_HUGEPAGE` before its first write (leaked: the example's life).
fn aligned_pages(pages: &[Box<[u8]>]) -> &'static [u8] {
    let len = pages.len() * PAGE;
    let layout = std::alloc::Layout::from_size_align(len, 2 << 20).expect("a valid layout");
    // SAFETY: the layout's size is not zero (there are pages).
    let ptr = unsafe { std::alloc::alloc(layout) };
    assert!(!ptr.is_null(), "out of memory");
    // SAFETY: the range is the allocation; advice first, then every byte
    // is written before the slice is made.
    unsafe {
        libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
        for (i, p) in pages.iter().enumerate() {
            std::ptr::copy_nonoverlapping(p.as_ptr(), ptr.add(i * PAGE), PAGE);
        }
        std::slice::from_raw_parts(ptr, len)
    }
}
