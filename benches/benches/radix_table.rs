//! Seed 002's table: "A Concurrent Pagecache" (Ottawa Linux Symposium 2007),
//! §4.1 and §5.1, reproduced on rcufs's radix tree.
//!
//! The paper's kernel module runs threads that each apply one radix-tree
//! operation (insert, tag, untag, remove) to a range of indexes, in two range
//! modes: *interleaved* (every thread walks the whole range and takes the
//! indexes `i` with `i mod threads == thread`: maximal cache-line overlap) and
//! *sequential* (the range is cut into one sub-range per thread: minimal
//! overlap). It times each operation over 16,777,216 indexes on a 2-way
//! machine, with the single tree lock ("serial"), with per-node lock coupling
//! ("concurrent") and with optimistic locking, and prints the gain against
//! serial as `(serial - t) / serial`.
//!
//! This binary (a plain `main`, not criterion: the paper's figure is one timed
//! pass per operation) does the same with `pagecache::Mode::{Serial,
//! LockCoupled, Optimistic}` at 2 threads, repeats every pass
//! `RCUFS_RADIX_TABLE_REPEAT` times (default 3) and reports the median. Two
//! last columns time the serial and the optimistic mode at one thread: the
//! uncontended costs. Two threads on 2 cores can at best halve the
//! optimistic mode's, so its gain over serial is bounded by
//! `1 - (optimistic at 1 thread / 2) / serial`; gains like the paper's need
//! the single lock to lose much more at 2 threads (its cache-line bouncing)
//! than the optimistic mode's cheaper operations save.
//!
//! The tree stores `u64` values inline in its slots (the [`Inline`] policy):
//! the paper's module stores item pointers, which cost the tree no
//! allocation either; a boxed value per index would add a `malloc` per
//! insert and a deferred `free` per remove to every mode.
//!
//! - `RCUFS_RADIX_TABLE_INDEXES`: the range (default 1,048,576, the quick
//!   setting; the paper's is 16,777,216).
//! - The result is printed like the paper's tables and written as the side
//!   result `seed002_table` (see `benches::write_side_result`).

use std::time::Duration;

use benches::{timed_threads, write_side_result};
use pagecache::Mode;
use pagecache::radix::{Inline, RadixTree, Tag};

const THREADS: usize = 2;

/// The paper's optimistic-locking gains (§5.1), per operation.
const PAPER_INTERLEAVED: [f64; 4] = [0.25, 0.51, 0.76, 0.54];
const PAPER_SEQUENTIAL: [f64; 4] = [0.78, 0.65, 0.77, 0.56];
const OPS: [&str; 4] = ["insert", "tag", "untag", "remove"];

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Interleaved,
    Sequential,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Interleaved => "interleaved",
            Layout::Sequential => "sequential",
        }
    }

    /// Calls `f` on every index that `thread` owns, in the order the paper's
    /// module visits them.
    #[inline]
    fn for_each(self, n: u64, thread: usize, threads: usize, mut f: impl FnMut(u64)) {
        let t = thread as u64;
        let k = threads as u64;
        match self {
            Layout::Interleaved => {
                let mut i = t;
                while i < n {
                    f(i);
                    i += k;
                }
            }
            Layout::Sequential => {
                for i in (t * n / k)..((t + 1) * n / k) {
                    f(i);
                }
            }
        }
    }
}

/// One pass of the four operations on a fresh tree; returns their times.
fn run(mode: Mode, layout: Layout, n: u64, threads: usize) -> [Duration; 4] {
    let tree: RadixTree<u64, Inline> = RadixTree::with_policy(mode);
    let insert = timed_threads(threads, 0, |t, _| {
        layout.for_each(n, t, threads, |i| {
            let fresh = tree.insert(i, i).is_ok();
            assert!(fresh, "index {i} inserted twice");
        })
    });
    let tag = timed_threads(threads, 0, |t, _| {
        layout.for_each(n, t, threads, |i| {
            let set = tree.set_tag(i, Tag::DIRTY);
            assert!(set, "index {i} missing when tagging");
        })
    });
    let untag = timed_threads(threads, 0, |t, _| {
        layout.for_each(n, t, threads, |i| {
            let cleared = tree.clear_tag(i, Tag::DIRTY);
            assert!(cleared, "index {i} missing when untagging");
        })
    });
    let remove = timed_threads(threads, 0, |t, _| {
        layout.for_each(n, t, threads, |i| {
            let removed = tree.remove(i);
            assert!(removed, "index {i} missing when removing");
        })
    });
    assert!(tree.is_empty(), "{mode:?} {} left entries behind", layout.name());
    [insert, tag, untag, remove]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

fn main() {
    // `cargo bench` passes `--bench` (and maybe a filter); a filter that does
    // not name this table skips it, as criterion binaries do.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if !filter.is_empty() && !filter.iter().any(|f| "seed002_table".contains(f.as_str())) {
        return;
    }
    let n = env_u64("RCUFS_RADIX_TABLE_INDEXES", 1 << 20);
    let reps = env_u64("RCUFS_RADIX_TABLE_REPEAT", 3).max(1) as usize;
    let modes = [Mode::Serial, Mode::LockCoupled, Mode::Optimistic];

    let mut rows = Vec::new();
    for layout in [Layout::Interleaved, Layout::Sequential] {
        // times[mode][op] = samples in seconds.
        let mut times = vec![vec![Vec::new(); 4]; modes.len()];
        // One more row: the single tree lock at one thread, the cost of the
        // operations without any contention (on 2 cores, a perfectly parallel
        // mode can at best halve it).
        let mut single = vec![Vec::new(); 4];
        let mut single_optimistic = vec![Vec::new(); 4];
        for _ in 0..reps {
            for (m, &mode) in modes.iter().enumerate() {
                for (op, d) in run(mode, layout, n, THREADS).into_iter().enumerate() {
                    times[m][op].push(d.as_secs_f64());
                }
            }
            for (op, d) in run(Mode::Serial, layout, n, 1).into_iter().enumerate() {
                single[op].push(d.as_secs_f64());
            }
            for (op, d) in run(Mode::Optimistic, layout, n, 1).into_iter().enumerate() {
                single_optimistic[op].push(d.as_secs_f64());
            }
        }
        let paper = if layout == Layout::Interleaved {
            PAPER_INTERLEAVED
        } else {
            PAPER_SEQUENTIAL
        };
        println!(
            "\nThe {} mode gives ({n} indexes, {THREADS} threads, median of {reps}, seconds):",
            layout.name()
        );
        println!(
            "{:<10} {:>9} {:>12} {:>6} {:>11} {:>6} {:>11} {:>17} {:>21}",
            "operation",
            "serial",
            "lockcoupled",
            "gain",
            "optimistic",
            "gain",
            "paper gain",
            "serial, 1 thread",
            "optimistic, 1 thread"
        );
        for (op, name) in OPS.iter().enumerate() {
            let serial = median(times[0][op].clone());
            let coupled = median(times[1][op].clone());
            let optimistic = median(times[2][op].clone());
            let one = median(single[op].clone());
            let one_optimistic = median(single_optimistic[op].clone());
            let gain = |t: f64| (serial - t) / serial;
            println!(
                "{:<10} {:>9.3} {:>12.3} {:>5.0}% {:>11.3} {:>5.0}% {:>10.0}% {:>17.3} {:>21.3}",
                name,
                serial,
                coupled,
                gain(coupled) * 100.0,
                optimistic,
                gain(optimistic) * 100.0,
                paper[op] * 100.0,
                one,
                one_optimistic
            );
            rows.push(serde_json::json!({
                "layout": layout.name(), "op": name,
                "serial_s": serial, "lockcoupled_s": coupled, "optimistic_s": optimistic,
                "gain_lockcoupled": gain(coupled), "gain_optimistic": gain(optimistic),
                "paper_gain_optimistic": paper[op], "serial_1thread_s": one,
                "optimistic_1thread_s": one_optimistic,
            }));
        }
    }
    write_side_result(
        "seed002_table",
        &serde_json::json!({ "indexes": n, "threads": THREADS, "repeat": reps, "rows": rows }),
    );
}
