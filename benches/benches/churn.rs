//! Bounded cache churn: a skewed (Zipf 0.99) stream of lookups over a key
//! space ten times the cache's capacity, inserting on every miss, for rcufs's
//! dcache (bounded by `Config::max_entries`, lazy LRU of seed 000 §6) against
//! moka (TinyLFU) and quick_cache (CLOCK-Pro-like).
//!
//! Keys are `(parent, name)` pairs under one directory (the dcache's key
//! shape); names are distinct realistic file names. Criterion measures the
//! throughput (operations per second, an operation being one lookup plus an
//! insert when it misses); a separate fixed pass, outside criterion, counts
//! the hit ratio of each cache after a warm-up pass and writes it as the side
//! result `churn_hit_ratio` (see `benches::write_side_result`).
//!
//! Capacities: every cache is asked for `CAPACITY` entries. moka and
//! quick_cache count entries like the dcache does (weight 1 per entry).

use std::sync::atomic::{AtomicU64, Ordering};

use benches::{Routine, Unit, consume, cycle, run_group, timed_threads, write_side_result};
use criterion::{Criterion, criterion_group, criterion_main};
use dcache::{Dcache, Dentry};

use benches::churn::{CAPACITY, KEYS, ZIPF_S};

type Key = (u64, Box<[u8]>);

/// One contender: `access` looks `key` up and inserts it on a miss, and says
/// whether it hit.
trait Churn: Sync {
    fn access(&self, key: u32) -> bool;
    /// Entries held now (to check that the cache kept to its capacity).
    fn len(&self) -> usize;
}

struct Ours {
    dc: Dcache<u64>,
    dir: Dentry<u64>,
    names: Vec<Box<[u8]>>,
}

impl Churn for Ours {
    fn access(&self, key: u32) -> bool {
        let name = &self.names[key as usize];
        match self.dc.lookup_with(&self.dir, name, |p| p.copied()) {
            Some(Some(v)) => {
                consume(v);
                true
            }
            _ => {
                consume(self.dc.insert(&self.dir, name, Some(key as u64)));
                false
            }
        }
    }

    fn len(&self) -> usize {
        self.dc.len()
    }
}

struct Moka {
    cache: moka::sync::Cache<Key, u64>,
    keys: Vec<Key>,
}

impl Churn for Moka {
    fn access(&self, key: u32) -> bool {
        let k = &self.keys[key as usize];
        match self.cache.get(k) {
            Some(v) => {
                consume(v);
                true
            }
            None => {
                self.cache.insert(k.clone(), key as u64);
                false
            }
        }
    }

    fn len(&self) -> usize {
        self.cache.run_pending_tasks();
        self.cache.entry_count() as usize
    }
}

struct Quick {
    cache: quick_cache::sync::Cache<Key, u64>,
    keys: Vec<Key>,
}

impl Churn for Quick {
    fn access(&self, key: u32) -> bool {
        let k = &self.keys[key as usize];
        match self.cache.get(k) {
            Some(v) => {
                consume(v);
                true
            }
            None => {
                self.cache.insert(k.clone(), key as u64);
                false
            }
        }
    }

    fn len(&self) -> usize {
        self.cache.len()
    }
}

fn contenders(names: &[Box<[u8]>]) -> Vec<(&'static str, Box<dyn Churn>)> {
    let keys: Vec<Key> = names.iter().map(|n| (1, n.clone())).collect();
    let (dc, dir) = benches::churn::dcache();
    vec![
        (
            "rcufs_dcache",
            Box::new(Ours {
                dc,
                dir,
                names: names.to_vec(),
            }) as Box<dyn Churn>,
        ),
        (
            "moka",
            Box::new(Moka {
                cache: moka::sync::Cache::new(CAPACITY as u64),
                keys: keys.clone(),
            }),
        ),
        (
            "quick_cache",
            Box::new(Quick {
                cache: quick_cache::sync::Cache::new(CAPACITY),
                keys,
            }),
        ),
    ]
}

fn bench_churn(c: &mut Criterion) {
    let (names, stream) = benches::churn::inputs();

    // Hit ratios: a warm-up pass over the stream, then a counted pass, at 2 threads.
    let mut ratios = serde_json::Map::new();
    let mut lens = serde_json::Map::new();
    for (name, cache) in contenders(&names) {
        let hits = AtomicU64::new(0);
        let half = stream.len() / 2;
        timed_threads(2, half as u64, |t, iters| {
            cycle(&stream, t * half, iters, |&k| consume(cache.access(k)))
        });
        timed_threads(2, half as u64, |t, iters| {
            let mut local = 0;
            cycle(&stream, t * half, iters, |&k| local += u64::from(cache.access(k)));
            // Relaxed: the total is read after the threads are joined.
            hits.fetch_add(local, Ordering::Relaxed);
        });
        let ratio = hits.load(Ordering::Relaxed) as f64 / stream.len() as f64;
        ratios.insert(name.to_string(), serde_json::json!(ratio));
        lens.insert(name.to_string(), serde_json::json!(cache.len()));
    }
    write_side_result(
        "churn_hit_ratio",
        &serde_json::json!({
            "keys": KEYS, "capacity": CAPACITY, "zipf_s": ZIPF_S, "threads": 2,
            "ops": stream.len(), "hit_ratio": ratios, "entries_after": lens,
        }),
    );

    let caches = contenders(&names);
    let n = stream.len();
    let routines: Vec<(&str, Routine<'_>)> = caches
        .iter()
        .map(|(name, cache)| {
            let cache = &**cache;
            let stream = &stream;
            let r: Routine<'_> = Box::new(move |threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(stream, t * n / threads, iters, |&k| consume(cache.access(k)))
                })
            });
            (*name, r)
        })
        .collect();
    // Each contender is a bounded cache whose contents carry over from burst
    // to burst: no pass over the inputs to repeat before a timed burst.
    run_group(c, "churn", Unit::Op, 0, &routines);
}

criterion_group! {
    name = churn_benches;
    config = benches::criterion();
    targets = bench_churn
}
criterion_main!(churn_benches);
