//! One phase of seed 002's benchmark ("A Concurrent Pagecache", §4), alone,
//! for profiles: the tree is prepared by the earlier phases untimed, then
//! the chosen phase runs timed in nanoseconds per operation. With
//! `PERF_CTL_FIFO` (and `PERF_ACK_FIFO`) set to the fifos given to
//! `perf record --control fifo:CTL,ACK -D -1`, the profile is switched on
//! for the timed phase only, so its samples are the phase's alone.
//!
//! `cargo run --release -p pagecache --example phaseprof -- MODE LAYOUT THREADS PHASE [runs] [keys]`
//! with MODE `serial|coupled|optimistic`, LAYOUT `interleaved|sequential`,
//! PHASE `insert|tag|untag|remove` (defaults: 5 runs, 1,048,576 keys).

use std::io::{Read, Write};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use pagecache::radix::Inline;
use pagecache::{Mode, RadixTree, Tag};

mod common;
use common::keys_of;

fn apply(tree: &RadixTree<u64, Inline>, phase: usize, k: u64) {
    let ok = match phase {
        0 => tree.insert(k, k).is_ok(),
        1 => tree.set_tag(k, Tag::DIRTY),
        2 => tree.clear_tag(k, Tag::DIRTY),
        _ => tree.remove(k),
    };
    assert!(ok, "phase {phase} key {k}");
}

/// Switches an attached `perf record --control` on or off.
fn perf(cmd: &str) {
    let (Ok(ctl), Ok(ack)) = (std::env::var("PERF_CTL_FIFO"), std::env::var("PERF_ACK_FIFO")) else {
        return;
    };
    let mut c = std::fs::OpenOptions::new()
        .write(true)
        .open(ctl)
        .expect("perf control fifo");
    c.write_all(format!("{cmd}\n").as_bytes()).expect("write perf control");
    let mut a = std::fs::File::open(ack).expect("perf ack fifo");
    let mut buf = [0u8; 5];
    let _ = a.read(&mut buf);
}

fn run(mode: Mode, n: u64, threads: usize, interleaved: bool, phase: usize) -> Duration {
    let tree: RadixTree<u64, Inline> = RadixTree::with_policy(mode);
    let keys: Vec<Vec<u64>> = (0..threads).map(|t| keys_of(t, threads, n, interleaved)).collect();
    for p in 0..phase {
        for ks in &keys {
            for &k in ks {
                apply(&tree, p, k);
            }
        }
    }
    let barrier = Barrier::new(threads + 1);
    perf("enable");
    let took = std::thread::scope(|s| {
        for ks in &keys {
            let (tree, barrier) = (&tree, &barrier);
            s.spawn(move || {
                barrier.wait();
                for &k in ks {
                    apply(tree, phase, k);
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    });
    perf("disable");
    took
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "MODE LAYOUT THREADS PHASE [runs] [keys]";
    let mode = match args.first().map(String::as_str) {
        Some("serial") => Mode::Serial,
        Some("coupled") => Mode::LockCoupled,
        Some("optimistic") => Mode::Optimistic,
        _ => panic!("{usage}"),
    };
    let interleaved = match args.get(1).map(String::as_str) {
        Some("interleaved") => true,
        Some("sequential") => false,
        _ => panic!("{usage}"),
    };
    let threads: usize = args.get(2).and_then(|a| a.parse().ok()).expect(usage);
    let phase = ["insert", "tag", "untag", "remove"]
        .iter()
        .position(|p| Some(*p) == args.get(3).map(String::as_str))
        .expect(usage);
    let runs: usize = args.get(4).map_or(5, |a| a.parse().expect(usage));
    let n: u64 = args.get(5).map_or(1 << 20, |a| a.parse().expect(usage));
    let mut ns: Vec<f64> = (0..runs)
        .map(|_| run(mode, n, threads, interleaved, phase).as_secs_f64() * 1e9 / n as f64)
        .collect();
    ns.sort_by(f64::total_cmp);
    println!(
        "{} ns/op (median of {runs}; runs {:?})",
        ns[runs / 2],
        ns.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>()
    );
}
