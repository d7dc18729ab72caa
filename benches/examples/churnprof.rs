//! One thread's run of the `churn` bench's stream (`benches/benches/churn.rs`)
//! on the dcache alone, for callgrind and `perf`: no threads, no timing
//! harness, nothing but the operations in the loop.
//!
//! `cargo run --release -p benches --example churnprof -- [OPS] [quick_cache]`
//!
//! With `quick_cache` the same loop runs on the bench's quick_cache contender
//! instead (its `get`, and `insert` on a miss, through `access_quick`), so
//! that both caches are counted the same way.
//!
//! The same inputs and cache as the bench (`benches::churn`): 200,000 distinct file names
//! under one directory, a Zipf 0.99 stream of 2^21 keys over them, a cache
//! of 20,000 entries.
//! Each operation is a `lookup_with` and, on a miss, an `insert` whose
//! handle is dropped at once. One warm-up pass over the stream, then `OPS`
//! counted operations (default: one more pass); prints the hit ratio of the
//! counted ones. Every operation goes through `access`, which is never
//! inlined, so that `valgrind --tool=callgrind
//! --toggle-collect=churnprof::access` counts exactly the operations (divide
//! by its calls).

use std::hint::black_box;

use benches::churn::SAMPLES;
use dcache::{Dcache, Dentry};

/// One operation of the bench's `Ours::access`; whether it hit.
#[inline(never)]
fn access(dc: &Dcache<u64>, dir: &Dentry<u64>, names: &[Box<[u8]>], key: u32) -> bool {
    let name = &names[key as usize];
    match dc.lookup_with(dir, name, |p| p.copied()) {
        Some(Some(v)) => {
            black_box(v);
            true
        }
        _ => {
            black_box(dc.insert(dir, name, Some(u64::from(key))));
            false
        }
    }
}

type Key = (u64, Box<[u8]>);

/// One operation of the bench's `Quick::access`; whether it hit.
#[inline(never)]
fn access_quick(cache: &quick_cache::sync::Cache<Key, u64>, keys: &[Key], key: u32) -> bool {
    let k = &keys[key as usize];
    match cache.get(k) {
        Some(v) => {
            black_box(v);
            true
        }
        None => {
            cache.insert(k.clone(), u64::from(key));
            false
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ops: usize = args.next().map_or(SAMPLES, |a| a.parse().expect("OPS"));
    let quick = match args.next().as_deref() {
        None => false,
        Some("quick_cache") => true,
        Some(other) => panic!("unknown contender {other:?} (only quick_cache)"),
    };
    let (names, stream) = benches::churn::inputs();
    // One warm-up pass over the stream, then `ops` counted operations.
    let run = |access: &dyn Fn(u32) -> bool| {
        for &k in &stream {
            access(k);
        }
        stream
            .iter()
            .cycle()
            .take(ops)
            .map(|&k| u64::from(access(k)))
            .sum::<u64>()
    };
    let hits = if quick {
        let keys: Vec<Key> = names.iter().map(|n| (1, n.clone())).collect();
        let cache = quick_cache::sync::Cache::new(benches::churn::CAPACITY);
        run(&|k| access_quick(&cache, &keys, k))
    } else {
        let (dc, dir) = benches::churn::dcache();
        run(&|k| access(&dc, &dir, &names, k))
    };
    println!("{ops} operations, hit ratio {:.4}", hits as f64 / ops.max(1) as f64);
}
