//! Page-cache hits: look a 4 KiB page up and copy it out (what a cached
//! `read` does), at 1 and 2 threads, in bytes per second, beside a plain
//! `memcpy` of the same pages from a `Vec` (the physical limit of the copy).
//!
//! Seed 003 (HAMMER SMP work) doubled concurrent cached-read throughput by
//! taking the per-mount lock off the cached read path; seed 002's lookups run
//! under RCU. rcufs's `PageCache::get` pins the page with a speculative
//! reference and takes no lock, so a hit should cost little more than the
//! copy. `rcufs_read_into` copies the same pages through
//! `PageCache::read_into` (one call per page here). The working set is 16,384 pages (64 MiB, twice this machine's 32 MiB
//! last-level cache) in 16 files, probed in the same random order by both.

use benches::{Routine, Unit, consume, cycle, permutation, run_group, timed_threads};
use criterion::{Criterion, criterion_group, criterion_main};
use pagecache::{Config, PageCache};

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
                    let mut buf = vec![0u8; PAGE];
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        let page = cache.get(ino, index).expect("every benchmark page is cached");
                        buf[..page.len()].copy_from_slice(&page);
                        consume(&buf);
                    })
                })
            }),
        ),
        (
            "rcufs_read_into",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut buf = vec![0u8; PAGE];
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        let n = cache
                            .read_into(ino, index * PAGE as u64, &mut buf, |_, _| Err::<usize, ()>(()))
                            .expect("every benchmark page is cached");
                        assert_eq!(n, PAGE);
                        consume(&buf);
                    })
                })
            }),
        ),
        (
            "memcpy",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let mut buf = vec![0u8; PAGE];
                    cycle(&probes, off(t, threads), iters, |&(ino, index)| {
                        let page = &plain[((ino - 1) * PAGES_PER_FILE + index) as usize];
                        buf.copy_from_slice(page);
                        consume(&buf);
                    })
                })
            }),
        ),
    ];
    run_group(c, "pagecache_hit_copy", Unit::Bytes(PAGE as u64), &contenders);
}

criterion_group! {
    name = pagecache_benches;
    config = benches::criterion();
    targets = bench_hits
}
criterion_main!(pagecache_benches);
