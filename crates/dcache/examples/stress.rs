//! A small multi-threaded stress run of every operation, sized to finish in
//! seconds under `valgrind --tool=memcheck` (which is not part of CI).
//!
//! `cargo build --release -p dcache --example stress &&
//!  valgrind --tool=memcheck --error-exitcode=1 target/release/examples/stress [ROUNDS]`
//!
//! Three threads insert, look up, walk, rename, remove, drop subtrees and
//! prune under one small cache, checking payloads as they read them; at the
//! end everything is dropped and the cache must be empty. Every third name
//! is longer than the node's inline name, so renames also replace and free
//! heap copies of names.

use std::sync::Arc;
use std::thread;

use dcache::{Config, Dcache, Lookup, Walk};

fn name(i: usize) -> Vec<u8> {
    if i % 3 == 2 {
        format!("n{i}-a-name-longer-than-what-the-node-keeps-inline").into_bytes()
    } else {
        format!("n{i}").into_bytes()
    }
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(3000, |a| a.parse().expect("ROUNDS"));
    let c = Arc::new(Dcache::new(
        Config {
            max_entries: 256,
            max_negative: 32,
            prune_batch: 8,
        },
        (0usize, 0usize),
    ));
    let threads: Vec<_> = (0..3usize)
        .map(|t| {
            let c = c.clone();
            thread::spawn(move || {
                let root = c.root();
                let mut x = 0x2545_F491_4F6C_DD1Du64 ^ t as u64;
                for r in 0..rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (a, b) = ((x % 24) as usize, ((x >> 8) % 24) as usize);
                    let dir = c.insert(&root, &name(a % 4), Some((a % 4, a % 4)));
                    match (x >> 16) % 10 {
                        0..=2 => drop(c.insert(&dir, &name(a), Some((a, a)))),
                        3 => drop(c.insert(&dir, &name(a), None)),
                        4 => {
                            if let Lookup::Positive(d) = c.lookup(&dir, &name(a)) {
                                let &(p, q) = d.payload().unwrap();
                                assert_eq!(p, q);
                            }
                        }
                        5 => {
                            if let Walk::Found(d) = c.walk(&root, [&name(a % 4)[..], &name(b)[..]]) {
                                let &(p, q) = d.payload().unwrap();
                                assert_eq!(p, q);
                            }
                        }
                        6 => {
                            let other = c.insert(&root, &name(b % 4), Some((b % 4, b % 4)));
                            c.rename(&dir, &name(a), &other, &name(b));
                        }
                        7 => drop(c.remove(&dir, &name(a))),
                        8 if r % 16 == 0 => drop(c.drop_subtree(&dir, |&(p, _)| p % 2 == t % 2)),
                        _ => drop(c.prune(4)),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let root = c.root();
    let s = c.drop_subtree(&root, |_| true);
    assert_eq!(c.len(), 0, "{s:?}");
    println!("ok: {:?}", c.stats());
}
