//! One thread's run of the `churn` bench's stream (`benches/benches/churn.rs`)
//! on the dcache alone, for callgrind and `perf`: no threads, no timing
//! harness, nothing but the operations in the loop.
//!
//! `cargo run --release -p dcache --example churnprof -- [OPS]`
//!
//! The same inputs as the bench (its generators and seeds, copied from
//! `benches/src/lib.rs`): 200,000 distinct file names under one directory,
//! a Zipf 0.99 stream of 2^21 keys over them, a cache of 20,000 entries.
//! Each operation is a `lookup_with` and, on a miss, an `insert` whose
//! handle is dropped at once. One warm-up pass over the stream, then `OPS`
//! counted operations (default: one more pass); prints the hit ratio of the
//! counted ones. Every operation goes through `access`, which is never
//! inlined, so that `valgrind --tool=callgrind
//! --toggle-collect=churnprof::access` counts exactly the operations (divide
//! by its calls).

use std::hint::black_box;

use dcache::{Config, Dcache, Dentry};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const KEYS: usize = 200_000;
const CAPACITY: usize = 20_000;
const SAMPLES: usize = 1 << 21;
const ZIPF_S: f64 = 0.99;

/// `benches::SEED`.
const SEED: u64 = 0x5eed_0000_0002_0004;

/// `benches::rng`.
fn rng(stream: u64) -> StdRng {
    StdRng::seed_from_u64(SEED ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

const STEMS: &[&str] = &[
    "README",
    "Makefile",
    "Kconfig",
    "config",
    "main",
    "lib",
    "src",
    "include",
    "index",
    "util",
    "test",
    "module",
    "driver",
    "core",
    "build",
    "package",
    "setup",
    "init",
    "inode",
    "dcache",
    "namei",
    "super",
    "file",
    "page",
    "alloc",
    "x86_64-linux-gnu",
    "python3",
    "share",
    "locale",
    "icons",
    "systemd",
    "libssl",
    "libcrypto",
    "bin",
];
const SUFFIXES: &[&str] = &[
    "", "", "", ".c", ".h", ".rs", ".o", ".so", ".so.3", ".md", ".txt", ".json", ".py", ".toml", ".d", ".png",
];

/// `benches::names`.
fn names(n: usize, stream: u64) -> Vec<Box<[u8]>> {
    let mut rng = rng(stream);
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let stem = STEMS[rng.random_range(0..STEMS.len())];
        let suffix = SUFFIXES[rng.random_range(0..SUFFIXES.len())];
        let name = match rng.random_range(0..4) {
            0 => format!("{stem}{suffix}"),
            1 => format!("{stem}{}{suffix}", rng.random_range(0..1000)),
            2 => format!("{stem}_{:x}{suffix}", rng.random::<u32>() & 0xfffff),
            _ => format!("{}-{stem}{suffix}", rng.random_range(0..100)),
        };
        if seen.insert(name.clone()) {
            out.push(name.into_bytes().into_boxed_slice());
        }
    }
    out
}

/// `benches::zipf_keys` (with `benches::permutation`).
fn zipf_keys(n: usize, s: f64, samples: usize, stream: u64) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(n);
    let mut total = 0.0;
    for k in 1..=n {
        total += 1.0 / (k as f64).powf(s);
        cdf.push(total);
    }
    let mut scatter: Vec<u32> = (0..n as u32).collect();
    scatter.shuffle(&mut rng(stream ^ 0xabc));
    let mut rng = rng(stream);
    (0..samples)
        .map(|_| {
            let u = rng.random::<f64>() * total;
            let rank = cdf.partition_point(|&c| c < u).min(n - 1);
            scatter[rank]
        })
        .collect()
}

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

fn main() {
    let ops: usize = std::env::args().nth(1).map_or(SAMPLES, |a| a.parse().expect("OPS"));
    let names = names(KEYS, 21);
    let stream = zipf_keys(KEYS, ZIPF_S, SAMPLES, 22);
    let dc = Dcache::new(
        Config {
            max_entries: CAPACITY,
            max_negative: CAPACITY / 4,
            ..Config::default()
        },
        0,
    );
    let dir = dc.insert(&dc.root(), b"dir", Some(1));
    for &k in &stream {
        access(&dc, &dir, &names, k);
    }
    let mut hits = 0u64;
    for &k in stream.iter().cycle().take(ops) {
        hits += u64::from(access(&dc, &dir, &names, k));
    }
    println!("{ops} operations, hit ratio {:.4}", hits as f64 / ops.max(1) as f64);
}
