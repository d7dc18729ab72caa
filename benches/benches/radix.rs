//! Radix-tree lookups against congee (an adaptive radix tree with optimistic
//! lock coupling on crossbeam-epoch) and a `RwLock<BTreeMap>`, at 1 and 2
//! threads, on dense and sparse keys.
//!
//! Seed 002 ("A Concurrent Pagecache", §2.3) makes radix-tree lookups fully
//! concurrent under RCU; rcufs's `RadixTree::get` runs under an epoch guard
//! and takes no lock. Keys:
//! - *dense*: indexes `0..2^20` (the pages of a 4 GiB file);
//! - *sparse*: 2^20 distinct indexes spread uniformly over `0..2^32` (a sparse
//!   16 TiB file: deeper trees, one entry per leaf node).
//!
//! Every contender holds the same keys and is probed in the same random order.

use std::collections::BTreeMap;

use benches::{THREADS, consume, cycle, permutation, sparse_indexes, timed_threads};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pagecache::Mode;
use pagecache::radix::RadixTree;
use parking_lot::RwLock;

const N: usize = 1 << 20;

fn bench_lookups(c: &mut Criterion) {
    benches::calibration(c, "radix");
    let sets = [
        ("dense", (0..N as u64).collect::<Vec<u64>>()),
        ("sparse", sparse_indexes(N, 32, 31)),
    ];
    for (kind, keys) in sets {
        let probes: Vec<u64> = permutation(N, 32).into_iter().map(|i| keys[i as usize]).collect();

        let ours: RadixTree<u64> = RadixTree::new(Mode::Optimistic);
        let congee: congee::Congee<usize, usize> = congee::Congee::default();
        let btree: RwLock<BTreeMap<u64, u64>> = RwLock::new(BTreeMap::new());
        {
            let guard = congee.pin();
            let mut bt = btree.write();
            for &k in &keys {
                assert!(ours.insert(k, k + 1).is_ok());
                congee
                    .insert(k as usize, k as usize + 1, &guard)
                    .expect("congee has memory");
                bt.insert(k, k + 1);
            }
        }

        let mut g = c.benchmark_group(format!("radix_lookup_{kind}"));
        for threads in THREADS {
            g.throughput(Throughput::Elements(threads as u64));
            let off = |t: usize| t * N / threads;
            g.bench_function(BenchmarkId::new("rcufs_radix", threads), |b| {
                b.iter_custom(|iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t), iters, |&k| {
                            let guard = ours.pin();
                            consume(ours.get(k, &guard).copied());
                        })
                    })
                })
            });
            g.bench_function(BenchmarkId::new("congee", threads), |b| {
                b.iter_custom(|iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t), iters, |&k| {
                            let guard = congee.pin();
                            consume(congee.get(&(k as usize), &guard));
                        })
                    })
                })
            });
            g.bench_function(BenchmarkId::new("rwlock_btreemap", threads), |b| {
                b.iter_custom(|iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t), iters, |&k| consume(btree.read().get(&k).copied()))
                    })
                })
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = radix_benches;
    config = benches::criterion();
    targets = bench_lookups
}
criterion_main!(radix_benches);
