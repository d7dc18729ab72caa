//! The hit paths measured in CPU time rather than wall time, for A/B
//! comparisons on a loaded machine: a thread's time on the CPU (from
//! `/proc/thread-self/schedstat`) does not count the time other processes
//! hold the core, which wall-time benchmarks do. (Cache and memory-bandwidth
//! interference still count.) The kernel updates that figure at scheduler
//! ticks, so each sample runs long enough (0.2-0.5 s) for a tick to be a
//! small error.
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
//! - `memcpy`: the same copy from a `Vec` of boxed pages.
//!
//! `cargo run --release -p pagecache --example hitpath -- [rounds]` (default 15).

use std::hint::black_box;

use pagecache::radix::Inline;
use pagecache::{Config, Mode, PageCache, RadixTree};

const PAGE: usize = 4096;
const FILES: u64 = 16;
const PAGES_PER_FILE: u64 = 1024;
const KEYS: usize = 1 << 20;

/// Nanoseconds this thread has run on a CPU.
fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    s.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat field")
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
    let dense: RadixTree<u64> = RadixTree::new(Mode::Optimistic);
    let sparse: RadixTree<u64> = RadixTree::new(Mode::Optimistic);
    let mut next = xorshift(31);
    let mut sparse_keys = std::collections::BTreeSet::new();
    while sparse_keys.len() < KEYS {
        sparse_keys.insert(next() & 0xffff_ffff);
    }
    let sparse_keys: Vec<u64> = sparse_keys.into_iter().collect();
    let dense_inline: RadixTree<u64, Inline> = RadixTree::with_policy(Mode::Optimistic);
    let sparse_inline: RadixTree<u64, Inline> = RadixTree::with_policy(Mode::Optimistic);
    for k in 0..KEYS as u64 {
        dense.insert(k, k + 1).unwrap();
        dense_inline.insert(k, k + 1).unwrap();
    }
    for &k in &sparse_keys {
        sparse.insert(k, k + 1).unwrap();
        sparse_inline.insert(k, k + 1).unwrap();
    }
    let probes = permutation(KEYS, 32);

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
    let pages: Vec<(u64, u64)> = permutation(total, 41)
        .into_iter()
        .map(|p| (p as u64 / PAGES_PER_FILE + 1, p as u64 % PAGES_PER_FILE))
        .collect();

    // One destination buffer for every contender (they run one at a time).
    let buf = std::cell::RefCell::new(vec![0u8; PAGE]);
    let mut ops: Vec<(&str, usize, Op<'_>)> = vec![
        (
            "radix_dense",
            2_000_000,
            Box::new(|i| {
                let g = dense.pin();
                black_box(dense.get(probes[i % KEYS] as u64, &g).copied());
            }),
        ),
        (
            "radix_sparse",
            2_000_000,
            Box::new(|i| {
                let g = sparse.pin();
                black_box(sparse.get(sparse_keys[probes[i % KEYS]], &g).copied());
            }),
        ),
        (
            "radix_dense_inline",
            2_000_000,
            Box::new(|i| {
                let g = dense_inline.pin();
                black_box(dense_inline.get_copied(probes[i % KEYS] as u64, &g));
            }),
        ),
        (
            "radix_sparse_inline",
            2_000_000,
            Box::new(|i| {
                let g = sparse_inline.pin();
                black_box(sparse_inline.get_copied(sparse_keys[probes[i % KEYS]], &g));
            }),
        ),
        (
            "pagecache_get_copy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let p = cache.get(ino, index).expect("cached");
                let mut b = buf.borrow_mut();
                b[..p.len()].copy_from_slice(&p);
                black_box(&*b);
            }),
        ),
        (
            "pagecache_read_into",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let mut b = buf.borrow_mut();
                let n = cache
                    .read_into(ino, index * PAGE as u64, &mut b, |_, _| Err::<usize, ()>(()))
                    .expect("cached");
                black_box((n, &*b));
            }),
        ),
        (
            "memcpy",
            200_000,
            Box::new(|i| {
                let (ino, index) = pages[i % total];
                let mut b = buf.borrow_mut();
                b.copy_from_slice(&plain[((ino - 1) * PAGES_PER_FILE + index) as usize]);
                black_box(&*b);
            }),
        ),
    ];
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
