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

use benches::{Routine, Unit, consume, cycle, permutation, run_group, sparse_indexes, timed_threads};
use criterion::{Criterion, criterion_group, criterion_main};
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

        let off = |t: usize, threads: usize| t * N / threads;
        let contenders: Vec<(&str, Routine<'_>)> = vec![
            (
                "rcufs_radix",
                Box::new(|threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t, threads), iters, |&k| {
                            let guard = ours.pin();
                            consume(ours.get(k, &guard).copied());
                        })
                    })
                }),
            ),
            (
                "congee",
                Box::new(|threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t, threads), iters, |&k| {
                            let guard = congee.pin();
                            consume(congee.get(&(k as usize), &guard));
                        })
                    })
                }),
            ),
            (
                "rwlock_btreemap",
                Box::new(|threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t, threads), iters, |&k| {
                            consume(btree.read().get(&k).copied())
                        })
                    })
                }),
            ),
        ];
        run_group(c, &format!("radix_lookup_{kind}"), Unit::Op, &contenders);
    }
}

criterion_group! {
    name = radix_benches;
    config = benches::criterion();
    targets = bench_lookups
}
criterion_main!(radix_benches);
