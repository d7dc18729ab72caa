//! dcache hit lookups against the concurrent maps a user would otherwise pick.
//!
//! Seed 000 ("Scalability of the directory entry cache", §3) replaced the
//! global `dcache_lock` taken by every `d_lookup` with RCU lookups. This bench
//! measures the same step in user space: hits on `(parent, name)` keys with
//! realistic names, at 1 and 2 threads, for rcufs's dcache (`lookup_with`: no
//! reference count; `pin().lookup()`: a guard-bound borrow, one pin per
//! lookup; `pin_batch`: one pin per 64 lookups, which shows what the
//! per-lookup pin costs; `lookup`: a counted handle) and for a global
//! `Mutex<HashMap>` (the single `dcache_lock`), an `RwLock<HashMap>`, dashmap,
//! papaya and moka's `get`.
//!
//! Every contender holds the same 65,536 entries (256 directories of 256
//! names) and is probed in the same random order; each thread starts at its
//! own offset. Competitors are keyed by `(parent id, name)` and probed with
//! borrowed keys, so no contender allocates in the timed loop; every
//! contender reads the same probe bytes, allocated in probe order. The maps use
//! their default hashers (SipHash-1-3 for std, dashmap and papaya), as a user
//! would.

use std::collections::HashMap;

use benches::{Routine, Unit, consume, cycle, names, permutation, run_group, timed_threads};
use criterion::{Criterion, criterion_group, criterion_main};
use dcache::{Config, Dcache, Dentry, Lookup};
use parking_lot::{Mutex, RwLock};

const DIRS: usize = 256;
const PER_DIR: usize = 256;

type Key = (u64, Box<[u8]>);

struct Workload {
    /// `names[d * PER_DIR + i]`: name `i` of directory `d`.
    names: Vec<Box<[u8]>>,
    /// Probe order, as indexes into `names` (and `keys`).
    probes: Vec<u32>,
    /// `(d + 1, name)`: the competitors' keys, in `names` order.
    keys: Vec<Key>,
}

impl Workload {
    fn new() -> Self {
        let names = names(DIRS * PER_DIR, 1);
        let keys = names
            .iter()
            .enumerate()
            .map(|(i, n)| ((i / PER_DIR) as u64 + 1, n.clone()))
            .collect();
        Workload {
            names,
            probes: permutation(DIRS * PER_DIR, 2),
            keys,
        }
    }

    /// The competitors' probes: keys in probe order.
    fn probe_keys(&self) -> Vec<Key> {
        self.probes.iter().map(|&p| self.keys[p as usize].clone()).collect()
    }
}

fn offset(len: usize, thread: usize, threads: usize) -> usize {
    thread * len / threads.max(1)
}

fn bench_hits(c: &mut Criterion) {
    benches::calibration(c, "dcache");
    let w = Workload::new();
    let probe_keys = w.probe_keys();

    // rcufs: 256 directories under the root, 256 names in each.
    let dc: Dcache<u64> = Dcache::new(
        Config {
            max_entries: 4 * DIRS * PER_DIR,
            ..Config::default()
        },
        0,
    );
    let root = dc.root();
    let dirs: Vec<Dentry<u64>> = (0..DIRS)
        .map(|d| dc.insert(&root, format!("dir{d}").as_bytes(), Some(d as u64 + 1)))
        .collect();
    for (i, name) in w.names.iter().enumerate() {
        dc.insert(&dirs[i / PER_DIR], name, Some(1000 + i as u64));
    }
    // The same probe bytes as the competitors' (`probe_keys`, allocated in
    // probe order): probing with `w.names` instead would make rcufs alone
    // read each probed name from a random place.
    let ours: Vec<(&Dentry<u64>, &[u8])> = w
        .probes
        .iter()
        .zip(&probe_keys)
        .map(|(&p, k)| (&dirs[p as usize / PER_DIR], &*k.1))
        .collect();

    let mutex: Mutex<HashMap<Key, u64>> = Mutex::new(w.keys.iter().cloned().zip(1000..).collect());
    let rwlock: RwLock<HashMap<Key, u64>> = RwLock::new(w.keys.iter().cloned().zip(1000..).collect());
    let dash: dashmap::DashMap<Key, u64> = w.keys.iter().cloned().zip(1000..).collect();
    let papaya: papaya::HashMap<Key, u64> = w.keys.iter().cloned().zip(1000..).collect();
    let moka: moka::sync::Cache<Key, u64> = moka::sync::Cache::new(4 * w.keys.len() as u64);
    for (k, v) in w.keys.iter().cloned().zip(1000..) {
        moka.insert(k, v);
    }
    moka.run_pending_tasks();

    let n = probe_keys.len();
    let contenders: Vec<(&str, Routine<'_>)> = vec![
        (
            "rcufs_lookup_with",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&ours, offset(n, t, threads), iters, |(parent, name)| {
                        consume(dc.lookup_with(parent, name, |p| p.copied()));
                    })
                })
            }),
        ),
        (
            "rcufs_pinned",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&ours, offset(n, t, threads), iters, |(parent, name)| {
                        let pinned = dc.pin();
                        consume(pinned.lookup(parent, name).and_then(|d| d.payload().copied()));
                    })
                })
            }),
        ),
        (
            "rcufs_pin_batch",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    let start = offset(n, t, threads);
                    let mut done = 0;
                    while done < iters {
                        let batch = (iters - done).min(64);
                        let pinned = dc.pin();
                        let at = (start + done as usize) % n;
                        cycle(&ours, at, batch, |(parent, name)| {
                            consume(pinned.lookup(parent, name).and_then(|d| d.payload().copied()));
                        });
                        done += batch;
                    }
                })
            }),
        ),
        (
            "rcufs_lookup_counted",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&ours, offset(n, t, threads), iters, |(parent, name)| {
                        if let Lookup::Positive(d) = dc.lookup(parent, name) {
                            consume(d.payload().copied());
                        }
                    })
                })
            }),
        ),
        (
            "mutex_hashmap",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&probe_keys, offset(n, t, threads), iters, |k| {
                        consume(mutex.lock().get(k).copied())
                    })
                })
            }),
        ),
        (
            "rwlock_hashmap",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&probe_keys, offset(n, t, threads), iters, |k| {
                        consume(rwlock.read().get(k).copied())
                    })
                })
            }),
        ),
        (
            "dashmap",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&probe_keys, offset(n, t, threads), iters, |k| {
                        consume(dash.get(k).map(|r| *r))
                    })
                })
            }),
        ),
        (
            "papaya",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&probe_keys, offset(n, t, threads), iters, |k| {
                        consume(papaya.pin().get(k).copied())
                    })
                })
            }),
        ),
        (
            "moka",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&probe_keys, offset(n, t, threads), iters, |k| consume(moka.get(k)))
                })
            }),
        ),
    ];
    run_group(c, "dcache_hit", Unit::Op, n as u64, &contenders);
    drop(contenders);
    drop(ours);
}

criterion_group! {
    name = dcache_benches;
    config = benches::criterion();
    targets = bench_hits
}
criterion_main!(dcache_benches);
