//! A first timing of the three writer modes on seed 002's benchmark ("A
//! Concurrent Pagecache", §4): threads insert, tag, untag and remove every
//! key of a range, either interleaved (thread t takes the keys with
//! `i % threads == t`, maximal cache-line sharing) or sequential (each thread
//! a contiguous sub-range). Prints the median wall time of each phase over
//! several runs and the gain against `Serial`, as the paper's tables do.
//!
//! The values are inline in the slots (`radix::Inline`), as in the
//! `radix_table` bench.
//!
//! `cargo run --release -p pagecache --example modes -- [keys] [threads] [runs]`
//! (defaults 1048576, 2, 5). Not a benchmark harness: the full benches live
//! in the `benches` crate.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use pagecache::radix::Inline;
use pagecache::{Mode, RadixTree, Tag};

mod common;
use common::keys_of;

const OPS: [&str; 4] = ["insert", "tag", "untag", "remove"];

/// One run: the four phases, each timed from a barrier to the last thread's end.
fn run(mode: Mode, n: u64, threads: usize, interleaved: bool) -> [Duration; 4] {
    let tree: RadixTree<u64, Inline> = RadixTree::with_policy(mode);
    let mut out = [Duration::ZERO; 4];
    for (phase, slot) in out.iter_mut().enumerate() {
        let barrier = Barrier::new(threads + 1);
        let took = std::thread::scope(|s| {
            for t in 0..threads {
                let (tree, barrier) = (&tree, &barrier);
                let keys = keys_of(t, threads, n, interleaved);
                s.spawn(move || {
                    barrier.wait();
                    for &k in &keys {
                        let ok = match phase {
                            0 => tree.insert(k, k).is_ok(),
                            1 => tree.set_tag(k, Tag::DIRTY),
                            2 => tree.clear_tag(k, Tag::DIRTY),
                            _ => tree.remove(k),
                        };
                        assert!(ok, "{} {k}", OPS[phase]);
                    }
                    barrier.wait();
                });
            }
            barrier.wait();
            let start = Instant::now();
            barrier.wait();
            start.elapsed()
        });
        *slot = took;
    }
    assert!(tree.is_empty());
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric argument"))
        .collect();
    let n = args.first().copied().unwrap_or(1 << 20);
    let threads = args.get(1).copied().unwrap_or(2) as usize;
    let runs = args.get(2).copied().unwrap_or(5) as usize;
    println!("{n} keys, {threads} threads, median of {runs} runs (seconds)");
    for interleaved in [true, false] {
        println!("\n{} mode", if interleaved { "interleaved" } else { "sequential" });
        let med: Vec<[Duration; 4]> = Mode::ALL
            .iter()
            .map(|&mode| {
                let all: Vec<[Duration; 4]> = (0..runs).map(|_| run(mode, n, threads, interleaved)).collect();
                std::array::from_fn(|op| median(all.iter().map(|r| r[op]).collect()))
            })
            .collect();
        println!(
            "{:<8} {:>9} {:>12} {:>7} {:>11} {:>7}",
            "op", "serial", "lockcoupled", "gain", "optimistic", "gain"
        );
        for (op, name) in OPS.iter().enumerate() {
            let s = med[0][op].as_secs_f64();
            let gain = |d: Duration| 100.0 * (s - d.as_secs_f64()) / s;
            println!(
                "{:<8} {:>9.4} {:>12.4} {:>6.0}% {:>11.4} {:>6.0}%",
                name,
                s,
                med[1][op].as_secs_f64(),
                gain(med[1][op]),
                med[2][op].as_secs_f64(),
                gain(med[2][op])
            );
        }
    }
}
