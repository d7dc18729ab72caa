//! One thread's hit lookups on the `dcache_hit` bench's layout, for `perf
//! stat`, `perf record` and callgrind (repeatable instruction counts): no
//! threads, no timing harness, nothing but the lookups in the loop.
//!
//! `cargo run --release -p dcache --example hitprof -- [with|counted|batch] [LOOKUPS]`
//!
//! 65,536 entries (256 directories of 256 names of 3 to 30 bytes), probed in
//! a fixed pseudo-random order with the probe names allocated in probe
//! order, as in `benches/benches/dcache.rs`; `max_entries` is 4x the
//! entries, as there. Prints the number of hits, so the loop is not removed.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
static DUMMY: AtomicU64 = AtomicU64::new(0);

use dcache::{Config, Dcache, Dentry, Lookup};

const DIRS: usize = 256;
const PER_DIR: usize = 256;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "with".into());
    let lookups: u64 = args.next().map_or(20_000_000, |a| a.parse().expect("LOOKUPS"));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let stems = [
        "README",
        "Makefile",
        "main",
        "lib",
        "include",
        "x86_64-linux-gnu",
        "libcrypto",
        "dcache",
    ];
    let sufs = ["", ".c", ".h", ".rs", ".so.3", ".json"];
    let names: Vec<Vec<u8>> = (0..DIRS * PER_DIR)
        .map(|i| {
            let s = stems[(rng.next() % stems.len() as u64) as usize];
            let x = sufs[(rng.next() % sufs.len() as u64) as usize];
            format!("{s}_{i:x}{x}").into_bytes()
        })
        .collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    let dc: Dcache<u64> = Dcache::new(
        Config {
            max_entries: 4 * DIRS * PER_DIR,
            ..Config::default()
        },
        0,
    );
    let root = dc.root();
    let dirs: Vec<Dentry<u64>> = (0..DIRS)
        .map(|d| dc.insert(&root, format!("dir{d}").as_bytes(), Some(d as u64)))
        .collect();
    for (i, n) in names.iter().enumerate() {
        drop(dc.insert(&dirs[i / PER_DIR], n, Some(i as u64)));
    }
    let probes: Vec<(&Dentry<u64>, Box<[u8]>)> = order
        .iter()
        .map(|&i| (&dirs[i / PER_DIR], names[i].clone().into_boxed_slice()))
        .collect();
    let mut hits = 0u64;
    let n = probes.len();
    let mut i = 0;
    match mode.as_str() {
        "with" => {
            for _ in 0..lookups {
                let (p, name) = &probes[i];
                hits += u64::from(dc.lookup_with(p, name, |x| black_box(x.copied())).is_some());
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        "counted" => {
            for _ in 0..lookups {
                let (p, name) = &probes[i];
                if let Lookup::Positive(d) = dc.lookup(p, name) {
                    black_box(d.payload().copied());
                    hits += 1;
                }
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        "batch" => {
            let mut done = 0;
            while done < lookups {
                let pinned = dc.pin();
                for _ in 0..64 {
                    let (p, name) = &probes[i];
                    hits += u64::from(
                        pinned
                            .lookup(p, name)
                            .and_then(|d| black_box(d.payload().copied()))
                            .is_some(),
                    );
                    i = if i + 1 == n { 0 } else { i + 1 };
                }
                done += 64;
            }
        }

        "with_lock_in" => {
            for _ in 0..lookups {
                let (p, name) = &probes[i];
                hits += u64::from(
                    dc.lookup_with(p, name, |x| {
                        DUMMY.fetch_add(1, Ordering::Relaxed);
                        black_box(x.copied())
                    })
                    .is_some(),
                );
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        "with_lock2_in" => {
            for _ in 0..lookups {
                let (p, name) = &probes[i];
                hits += u64::from(
                    dc.lookup_with(p, name, |x| {
                        DUMMY.fetch_add(1, Ordering::Relaxed);
                        black_box(x.copied())
                    })
                    .is_some(),
                );
                DUMMY.fetch_sub(1, Ordering::Relaxed);
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        "with_lock_after" => {
            for _ in 0..lookups {
                let (p, name) = &probes[i];
                hits += u64::from(dc.lookup_with(p, name, |x| black_box(x.copied())).is_some());
                DUMMY.fetch_add(1, Ordering::Relaxed);
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        "with_mfence" => {
            for _ in 0..lookups {
                let (p, name) = &probes[i];
                hits += u64::from(dc.lookup_with(p, name, |x| black_box(x.copied())).is_some());
                std::sync::atomic::fence(Ordering::SeqCst);
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        "counted_keep" => {
            // Counted lookups whose handles are dropped 64 lookups later.
            let mut ring: Vec<Option<Dentry<u64>>> = (0..64).map(|_| None).collect();
            for k in 0..lookups {
                let (p, name) = &probes[i];
                if let Lookup::Positive(d) = dc.lookup(p, name) {
                    black_box(d.payload().copied());
                    hits += 1;
                    ring[(k % 64) as usize] = Some(d);
                }
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        m => panic!("unknown mode {m}"),
    }
    println!("{hits} hits");
}
