//! Radix-tree lookups against congee (an adaptive radix tree with optimistic
//! lock coupling on crossbeam-epoch) and a `RwLock<BTreeMap>`, at 1 and 2
//! threads, on dense and sparse keys.
//!
//! Seed 002 ("A Concurrent Pagecache", §2.3) makes radix-tree lookups fully
//! concurrent under RCU; rcufs's `RadixTree` lookups run under an epoch
//! guard and take no lock. Keys:
//! - *dense*: indexes `0..2^20` (the pages of a 4 GiB file);
//! - *sparse*: 2^20 distinct indexes spread uniformly over `0..2^32` (a sparse
//!   16 TiB file: about one entry per 4,096 indexes).
//!
//! Contenders, all holding `u64` values: `rcufs_radix` is the tree with the
//! [`Inline`] policy (the value in the slot word, read by copy: what congee
//! does with its `usize` values), `rcufs_radix_boxed` the default policy (one
//! heap box per value, read by reference), `congee`, `rwlock_btreemap`.
//! Every contender holds the same keys and is probed in the same random
//! order; every lookup pins the epoch once (congee's and ours).
//!
//! The heap bytes each structure holds after the build (requested bytes,
//! through a counting global allocator, after crossbeam-epoch's due garbage
//! is collected) are written as the side result `memory_<group>` in bytes
//! per key.

use std::collections::BTreeMap;

use benches::{
    CountingAlloc, Routine, Unit, collect_epoch_garbage, consume, cycle, live_bytes, permutation, run_group,
    sparse_indexes, timed_threads, write_side_result,
};
use criterion::{Criterion, criterion_group, criterion_main};
use pagecache::Mode;
use pagecache::radix::{Inline, RadixTree};
use parking_lot::RwLock;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const N: usize = 1 << 20;

/// Runs `build` and returns the heap bytes per key it left allocated.
fn bytes_per_key(build: impl FnOnce()) -> f64 {
    collect_epoch_garbage();
    let before = live_bytes();
    build();
    collect_epoch_garbage();
    live_bytes().saturating_sub(before) as f64 / N as f64
}

fn bench_lookups(c: &mut Criterion) {
    benches::calibration(c, "radix");
    let sets = [
        ("dense", (0..N as u64).collect::<Vec<u64>>()),
        ("sparse", sparse_indexes(N, 32, 31)),
    ];
    for (kind, keys) in sets {
        let probes: Vec<u64> = permutation(N, 32).into_iter().map(|i| keys[i as usize]).collect();

        let ours: RadixTree<u64, Inline> = RadixTree::with_policy(Mode::Optimistic);
        let boxed: RadixTree<u64> = RadixTree::new(Mode::Optimistic);
        let congee: congee::Congee<usize, usize> = congee::Congee::default();
        let btree: RwLock<BTreeMap<u64, u64>> = RwLock::new(BTreeMap::new());
        let memory = serde_json::json!({
            "rcufs_radix": bytes_per_key(|| {
                for &k in &keys {
                    assert!(ours.insert(k, k + 1).is_ok());
                }
            }),
            "rcufs_radix_boxed": bytes_per_key(|| {
                for &k in &keys {
                    assert!(boxed.insert(k, k + 1).is_ok());
                }
            }),
            "congee": bytes_per_key(|| {
                for &k in &keys {
                    let guard = congee.pin();
                    congee
                        .insert(k as usize, k as usize + 1, &guard)
                        .expect("congee has memory");
                }
            }),
            "rwlock_btreemap": bytes_per_key(|| {
                let mut bt = btree.write();
                for &k in &keys {
                    bt.insert(k, k + 1);
                }
            }),
        });
        write_side_result(
            &format!("memory_radix_lookup_{kind}"),
            &serde_json::json!({ "keys": N, "unit": "bytes per key", "bytes_per_key": memory,
                "rcufs_radix_nodes": ours.node_count() }),
        );

        let off = |t: usize, threads: usize| t * N / threads;
        let contenders: Vec<(&str, Routine<'_>)> = vec![
            (
                "rcufs_radix",
                Box::new(|threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t, threads), iters, |&k| {
                            let guard = ours.pin();
                            consume(ours.get_copied(k, &guard));
                        })
                    })
                }),
            ),
            (
                "rcufs_radix_boxed",
                Box::new(|threads, iters| {
                    timed_threads(threads, iters, |t, iters| {
                        cycle(&probes, off(t, threads), iters, |&k| {
                            let guard = boxed.pin();
                            consume(boxed.get(k, &guard).copied());
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
        run_group(
            c,
            &format!("radix_lookup_{kind}"),
            Unit::Op,
            probes.len() as u64,
            &contenders,
        );
    }
}

criterion_group! {
    name = radix_benches;
    config = benches::criterion();
    targets = bench_lookups
}
criterion_main!(radix_benches);
