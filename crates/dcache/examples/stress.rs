//! A small multi-threaded stress run of every operation, sized to finish in
//! seconds under `valgrind --tool=memcheck` (which is not part of CI).
//!
//! `cargo build --release -p dcache --example stress &&
//!  valgrind --tool=memcheck --error-exitcode=1 target/release/examples/stress [ROUNDS] [keep]`
//!
//! The threads' magazines of freed entries are off unless `keep` is given
//! (`dcache::keep_freed_entries`): off, every freed entry goes back to the
//! allocator, so memcheck reports any read of a freed entry; with `keep`
//! the run checks the magazines' own handling of their blocks instead.
//!
//! Three threads insert, look up, walk, rename, remove, drop subtrees and
//! prune under one small cache, checking payloads as they read them; at the
//! end everything is dropped and the cache must be empty. Every third name
//! is longer than the node's inline name, so renames also replace and free
//! heap copies of names. It runs twice: in a cache of 256 entries (one LRU
//! shard) over 24 names per directory, which stays under its bound, and in
//! one of 16,384 entries (four LRU shards) over 24,000 names, which the
//! inserts keep over its bound, so that the pruner's batches run across
//! shards.

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
    dcache::keep_freed_entries(std::env::args().nth(2).is_some_and(|a| a == "keep"));
    run(rounds, 256, 24);
    run(rounds, 16_384, 24_000);
}

/// The three threads' rounds in a cache of `max_entries`, over `names`
/// names under each of four directories.
fn run(rounds: usize, max_entries: usize, names: u64) {
    let c = Arc::new(Dcache::new(
        Config {
            max_entries,
            max_negative: max_entries / 8,
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
                    let (a, b) = ((x % names) as usize, ((x >> 8) % names) as usize);
                    let dir = c.insert(&root, &name(a % 4), Some((a % 4, a % 4)));
                    // The large cache mostly inserts (70 %; every other
                    // operation 5 %), so that its bound prunes.
                    let op = if names <= 24 {
                        (x >> 16) % 10
                    } else {
                        match (x >> 16) % 20 {
                            k @ 14.. => k - 10,
                            _ => 0,
                        }
                    };
                    match op {
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
                        // In the large cache, subtree drops and explicit
                        // prunes are rare: the bound prunes.
                        8 if r % if names <= 24 { 16 } else { 4096 } == 0 => {
                            c.drop_subtree(&dir, |&(p, _)| p % 2 == t % 2);
                        }
                        _ if names <= 24 || r % 64 == 0 => drop(c.prune(4)),
                        _ => {}
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let root = c.root();
    c.assert_consistent();
    c.assert_lists_consistent();
    let s = c.drop_subtree(&root, |_| true);
    assert_eq!(c.len(), 0, "{s:?}");
    println!("ok ({max_entries} entries at most): {:?}", c.stats());
}
