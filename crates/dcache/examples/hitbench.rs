//! A first measurement of hit-lookup throughput at 1 and 2 threads (the full
//! criterion benchmarks live in the `benches` crate).
//!
//! `cargo run --release -p dcache --example hitbench [-- RUNS MILLIS]`
//!
//! Caches 4096 names under one directory and a 4-deep path, then each thread
//! looks up names in a pseudo-random order for MILLIS milliseconds. Prints
//! the median over RUNS runs of the total millions of lookups per second for
//! each form of lookup: `Counted` (`lookup`, a counted handle per hit),
//! `With` (`lookup_with`, no count), `Pinned` (`Pinned::lookup`, one pin per
//! 256 lookups, no count) and `Walk4` (a 4-component `walk`, one count).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use dcache::{Config, Dcache, Lookup, Walk};

const NAMES: usize = 4096;

#[derive(Clone, Copy, Debug)]
enum Form {
    Counted,
    With,
    Pinned,
    Walk4,
}

fn run(c: &Arc<Dcache<u64>>, names: &Arc<Vec<Vec<u8>>>, form: Form, threads: usize, millis: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (c, names, stop) = (c.clone(), names.clone(), stop.clone());
            thread::spawn(move || {
                let root = c.root();
                let dir = match c.lookup(&root, b"dir") {
                    Lookup::Positive(d) => d,
                    _ => unreachable!("dir is cached and held"),
                };
                let path: [&[u8]; 4] = [b"usr", b"share", b"doc", b"README"];
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                let mut ops = 0u64;
                let mut sink = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // The pinned form pins once per batch of 256 lookups.
                    let pinned = matches!(form, Form::Pinned).then(|| c.pin());
                    for _ in 0..256 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let name = &names[(x as usize) % NAMES];
                        sink = sink.wrapping_add(match form {
                            Form::Counted => match c.lookup(&dir, name) {
                                Lookup::Positive(d) => *d.payload().unwrap(),
                                _ => panic!("miss"),
                            },
                            Form::With => c.lookup_with(&dir, name, |p| *p.unwrap()).unwrap(),
                            Form::Pinned => {
                                let p = pinned.as_ref().expect("pinned");
                                *p.lookup(&dir, name).unwrap().payload().unwrap()
                            }
                            Form::Walk4 => match c.walk(&root, path) {
                                Walk::Found(d) => *d.payload().unwrap(),
                                _ => panic!("miss"),
                            },
                        });
                    }
                    ops += 256;
                }
                std::hint::black_box(sink);
                ops
            })
        })
        .collect();
    let start = Instant::now();
    thread::sleep(Duration::from_millis(millis));
    stop.store(true, Ordering::Relaxed);
    let ops: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    ops as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map_or(5, |a| a.parse().expect("RUNS"));
    let millis: u64 = args.next().map_or(500, |a| a.parse().expect("MILLIS"));
    let c = Arc::new(Dcache::new(
        Config {
            max_entries: 1 << 16,
            ..Config::default()
        },
        0u64,
    ));
    let root = c.root();
    let dir = c.insert(&root, b"dir", Some(1));
    let names: Arc<Vec<Vec<u8>>> = Arc::new((0..NAMES).map(|i| format!("file-{i:05}.txt").into_bytes()).collect());
    for (i, n) in names.iter().enumerate() {
        drop(c.insert(&dir, n, Some(i as u64)));
    }
    let mut d = root.clone();
    for comp in [&b"usr"[..], b"share", b"doc", b"README"] {
        d = c.insert(&d, comp, Some(7));
    }
    drop(d);
    let (node, bucket) = Dcache::<u64>::layout_bytes();
    println!("layout (T = u64): node {node} B, bucket {bucket} B");
    println!(
        "{} buckets, {} entries, {runs} runs of {millis} ms, median Mlookups/s",
        c.buckets(),
        c.len()
    );
    for form in [Form::Counted, Form::With, Form::Pinned, Form::Walk4] {
        for threads in [1, 2] {
            let mut r: Vec<f64> = (0..runs).map(|_| run(&c, &names, form, threads, millis)).collect();
            r.sort_by(f64::total_cmp);
            let all: Vec<String> = r.iter().map(|v| format!("{v:.2}")).collect();
            println!(
                "{form:?}\t{threads} thread(s)\tmedian {:.2}\t(runs: {})",
                r[r.len() / 2],
                all.join(" ")
            );
        }
    }
    drop(dir);
}
