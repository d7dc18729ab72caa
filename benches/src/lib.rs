//! Shared helpers for the benches in `benches/benches/`: the criterion
//! configuration every group uses, the multi-threaded timing loop, workload
//! generators (realistic file names, Zipf-distributed keys, sparse indexes) and
//! the side files the benches write for `cargo xtask bench`.
//!
//! # Method
//!
//! Every group runs rcufs's structure and its competitors side by side, on the
//! same pre-generated inputs, at 1 and 2 threads. A multi-threaded measurement
//! uses `iter_custom`: `threads` scoped threads each run `iters` operations and
//! the wall time from a common start (a barrier) to the last thread's end is
//! the sample. The group's `Throughput` is `threads` elements (or bytes) per
//! iteration, so criterion's throughput figures are totals across threads and
//! a perfect 1 → 2 thread scaling doubles them.
//!
//! Inputs are generated before timing with a fixed seed, so every run and every
//! contender sees the same keys in the same order. Nothing allocates inside a
//! timed loop unless the operation itself does (an insert on a cache miss).
//!
//! # Environment
//!
//! - `RCUFS_BENCH_QUICK=1`: shorter warm-up and measurement (smoke runs).
//! - `RCUFS_BENCH_OUT=DIR`: where benches write side results that criterion
//!   does not measure (hit ratios, the seed 002 table) as JSON; `cargo xtask
//!   bench` sets it to `target/rcufs-bench/raw`.
//! - `RCUFS_BENCH_CPU_TIME=1`: time each thread's share by the CPU time the
//!   thread ran (`CLOCK_THREAD_CPUTIME_ID`) instead of wall time,
//!   and take the slowest thread's. On a machine with more runnable threads
//!   than cores the wall time of a burst mostly measures the other tenants;
//!   the CPU time measures the operation (still inflated by the caches the
//!   other tenants evict). At 2 threads it no longer shows what two threads
//!   running at once do to each other unless they did run at once, so use
//!   it for 1-thread figures and A/B comparisons of one build against
//!   another, and say so.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// The thread counts every multi-threaded group measures (this machine has 2 cores).
pub const THREADS: [usize; 2] = [1, 2];

/// The seed of every generator, so that all contenders see the same input.
pub const SEED: u64 = 0x5eed_0000_0002_0004;

/// Whether `RCUFS_BENCH_CPU_TIME` asks for CPU time instead of wall time.
fn cpu_time() -> bool {
    static CPU_TIME: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CPU_TIME.get_or_init(|| std::env::var_os("RCUFS_BENCH_CPU_TIME").is_some_and(|v| v != "0"))
}

/// The CPU time the calling thread has run, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `op` and returns how long it took: wall time, or the thread's CPU
/// time under `RCUFS_BENCH_CPU_TIME`.
fn timed(op: impl FnOnce()) -> Duration {
    if cpu_time() {
        let start = thread_cpu_ns();
        op();
        Duration::from_nanos(thread_cpu_ns() - start)
    } else {
        let start = Instant::now();
        op();
        start.elapsed()
    }
}

/// Whether `RCUFS_BENCH_QUICK` asks for short smoke runs.
pub fn quick() -> bool {
    std::env::var_os("RCUFS_BENCH_QUICK").is_some_and(|v| v != "0")
}

/// The criterion configuration of every group: short warm-up and measurement
/// (this machine is shared and `cargo xtask bench` must stay within minutes),
/// few samples, medians reported by the xtask.
pub fn criterion() -> criterion::Criterion {
    let (warm, measure) = if quick() {
        (Duration::from_millis(300), Duration::from_millis(700))
    } else {
        (Duration::from_secs(1), Duration::from_secs(2))
    };
    criterion::Criterion::default()
        .warm_up_time(warm)
        .measurement_time(measure)
        .sample_size(20)
        .nresamples(10_000)
        .without_plots()
}

/// A deterministic generator for inputs.
pub fn rng(stream: u64) -> StdRng {
    StdRng::seed_from_u64(SEED ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Runs `op(thread, iters)` on `threads` scoped threads started together and
/// returns the wall time from the first thread's start to the last one's end.
///
/// `op` runs the thread's whole share of the work (it is handed `iters`, the
/// number of operations criterion asked for, and the thread's index, so that
/// each thread can start at its own offset in the input).
pub fn timed_threads<F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn(usize, u64) + Sync,
{
    if threads == 1 {
        return timed(|| op(0, iters));
    }
    // Each thread stamps its own start (after the barrier) and end; the
    // sample runs from the earliest start to the latest end, so a thread that
    // finishes while another is not yet scheduled is still counted.
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                let op = &op;
                s.spawn(move || {
                    barrier.wait();
                    if cpu_time() {
                        // The thread's CPU time; the slowest thread's is the sample.
                        return (None, timed(|| op(t, iters)));
                    }
                    let start = Instant::now();
                    op(t, iters);
                    (Some(start), start.elapsed())
                })
            })
            .collect();
        let spans: Vec<(Option<Instant>, Duration)> = handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect();
        if cpu_time() {
            // The slowest thread's CPU time.
            return spans.iter().map(|s| s.1).max().expect("at least one thread");
        }
        let start = spans.iter().filter_map(|s| s.0).min().expect("at least one thread");
        let end = spans
            .iter()
            .filter_map(|s| Some(s.0? + s.1))
            .max()
            .expect("at least one thread");
        end.duration_since(start)
    })
}

/// Cycles through `items` from `offset`, `iters` times, calling `f` on each.
/// Each thread passes a different offset so that threads do not walk the same
/// input in lock step.
#[inline]
pub fn cycle<T>(items: &[T], offset: usize, iters: u64, mut f: impl FnMut(&T)) {
    let n = items.len();
    let mut i = offset % n;
    for _ in 0..iters {
        f(&items[i]);
        i += 1;
        if i == n {
            i = 0;
        }
    }
}

/// Name stems and suffixes from real trees (a Linux source tree, /usr/lib).
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

/// `n` distinct realistic file names (3 to 30 bytes): a stem from real trees,
/// often a short random infix, and a common suffix.
pub fn names(n: usize, stream: u64) -> Vec<Box<[u8]>> {
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

/// A random permutation of `0..n` (the probe order of hit benchmarks).
pub fn permutation(n: usize, stream: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    v.shuffle(&mut rng(stream));
    v
}

/// `samples` keys in `0..n` drawn from a Zipf distribution of exponent `s`
/// (key 0 most popular; keys are then scattered by a fixed permutation so
/// that popular keys are not neighbours in memory).
pub fn zipf_keys(n: usize, s: f64, samples: usize, stream: u64) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(n);
    let mut total = 0.0;
    for k in 1..=n {
        total += 1.0 / (k as f64).powf(s);
        cdf.push(total);
    }
    let scatter = permutation(n, stream ^ 0xabc);
    let mut rng = rng(stream);
    (0..samples)
        .map(|_| {
            let u = rng.random::<f64>() * total;
            let rank = cdf.partition_point(|&c| c < u).min(n - 1);
            scatter[rank]
        })
        .collect()
}

/// `n` distinct indexes spread uniformly over `0..2^bits` (sorted).
pub fn sparse_indexes(n: usize, bits: u32, stream: u64) -> Vec<u64> {
    let mut rng = rng(stream);
    let mut set = std::collections::BTreeSet::new();
    while set.len() < n {
        set.insert(rng.random::<u64>() >> (64 - bits));
    }
    set.into_iter().collect()
}

/// Where side results go (`RCUFS_BENCH_OUT`), if anywhere.
pub fn out_dir() -> Option<PathBuf> {
    std::env::var_os("RCUFS_BENCH_OUT").map(PathBuf::from)
}

/// Writes `value` as `RCUFS_BENCH_OUT/<name>.json` (when the variable is set)
/// and always prints it, so a plain `cargo bench` shows it too.
pub fn write_side_result(name: &str, value: &serde_json::Value) {
    let text = serde_json::to_string_pretty(value).expect("JSON values serialise");
    println!(
        "side result {name}: {}",
        serde_json::to_string(value).expect("serialises")
    );
    if let Some(dir) = out_dir()
        && let Err(e) =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join(format!("{name}.json")), text))
    {
        eprintln!("warning: cannot write side result {name} to {}: {e}", dir.display());
    }
}

/// Keeps `x` alive and opaque to the optimiser.
#[inline]
pub fn consume<T>(x: T) {
    black_box(x);
}

#[cfg(test)]
mod tests;

/// Bytes allocated and not yet freed through [`CountingAlloc`].
static LIVE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A global allocator that counts the bytes requested and not yet freed, for
/// footprint figures: a bench binary installs it with `#[global_allocator]`
/// and reads [`live_bytes`] before and after building a structure. It adds
/// one relaxed atomic add per allocation and per free (none happen in the
/// timed loops of the benches that install it).
pub struct CountingAlloc;

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counter is only a statistic.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size, std::sync::atomic::Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

/// The bytes allocated and not yet freed through [`CountingAlloc`] (zero if
/// the binary does not install it). Relaxed: a statistic.
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Runs crossbeam-epoch's deferred destructors that are due (a few hundred
/// pins and flushes of the global collector), so that a footprint taken
/// next does not count garbage still waiting for its grace period: both
/// this thread's bags, the one the cache crates share (`rcu::flush`) and
/// crossbeam's own participant's, which the peers (congee) defer into.
pub fn collect_epoch_garbage() {
    for _ in 0..512 {
        rcu::flush();
        crossbeam_epoch::pin().flush();
    }
}

/// A calibration group, `calibration_<bench>`: independent per-thread ALU
/// work (no shared memory) at 1 and 2 threads. Its 1 → 2 thread scaling is
/// the parallelism this machine actually gave the bench at that moment (it is
/// shared: other work steals cores), the ceiling for every contender's
/// scaling in the same binary.
pub fn calibration(c: &mut criterion::Criterion, bench: &str) {
    let work: Routine<'_> = Box::new(|threads, iters| {
        timed_threads(threads, iters, |t, iters| {
            let mut x = black_box(0x9e37_79b9_7f4a_7c15u64 ^ t as u64);
            for _ in 0..iters {
                // About 50 ns of dependent ALU work per iteration.
                for _ in 0..64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
                black_box(x);
            }
        })
    });
    run_group(
        c,
        &format!("calibration_{bench}"),
        Unit::Op,
        0,
        &[("independent_work", work)],
    );
}

/// A contender's timed routine: `routine(threads, iters)` runs `iters`
/// operations on each of `threads` threads and returns the wall time (what
/// `iter_custom` wants).
pub type Routine<'a> = Box<dyn Fn(usize, u64) -> Duration + Sync + 'a>;

/// What one operation of a group processes, per thread.
#[derive(Clone, Copy, Debug)]
pub enum Unit {
    /// One operation.
    Op,
    /// This many bytes.
    Bytes(u64),
}

/// Rounds of the interleaved pass (see [`run_group`]).
const ROUNDS: usize = 15;

/// Runs one comparison group two ways:
///
/// 1. as a criterion group (`group/contender/threads`, `Throughput` per
///    [`Unit`] times `threads`), the contenders one after the other;
/// 2. as an *interleaved* pass: `ROUNDS` rounds in which every contender, at
///    every thread count, runs a burst of about 20 ms after an untimed 4 ms
///    one, in a random order drawn afresh each round; the
///    median rate per contender is written as the side result
///    `interleaved_<group>`. On a shared machine whose load changes from one
///    second to the next, this pass exposes every contender to the same
///    conditions, so its ratios are the ones to trust; criterion's figures
///    give the distribution of each contender on its own.
///
/// `cover` is the number of operations per thread that pass once over the
/// group's inputs (the length of the probe cycle; 0 for a group whose
/// contenders carry their own state from burst to burst, such as a bounded
/// cache under churn). The untimed burst before each timed one runs at
/// least that many, so that every contender's own data is back in the
/// caches, as far as it fits, before it is timed, whichever contender ran
/// before it. A fifth of a 20 ms burst covers about a quarter of a 65,536-key
/// cycle at 5 Mop/s: without `cover` the timed burst then starts by
/// fetching the rest from memory, and measures the misses the previous
/// contender caused rather than the contender's own hit path.
pub fn run_group(
    c: &mut criterion::Criterion,
    group: &str,
    unit: Unit,
    cover: u64,
    contenders: &[(&str, Routine<'_>)],
) {
    let mut g = c.benchmark_group(group);
    for threads in THREADS {
        g.throughput(match unit {
            Unit::Op => criterion::Throughput::Elements(threads as u64),
            Unit::Bytes(b) => criterion::Throughput::Bytes(b * threads as u64),
        });
        for (name, routine) in contenders {
            g.bench_function(criterion::BenchmarkId::new(*name, threads), |b| {
                b.iter_custom(|iters| routine(threads, iters))
            });
        }
    }
    g.finish();
    // Skip the interleaved pass when criterion only lists or filters out
    // this group (`cargo bench -- --list`, or a filter naming another group).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| group.contains(f.as_str()) || f.contains(group)) {
        return;
    }
    let per_op = match unit {
        Unit::Op => 1.0,
        Unit::Bytes(b) => b as f64,
    };
    // Every (contender, thread count) pair is one slot of a round, so that
    // thread scaling is also measured under the same conditions.
    let slots: Vec<(usize, usize)> = THREADS
        .iter()
        .flat_map(|&threads| (0..contenders.len()).map(move |i| (i, threads)))
        .collect();
    // Iterations for a burst of about 20 ms, from a short probe.
    let bursts: Vec<u64> = slots
        .iter()
        .map(|&(i, threads)| {
            let r = &contenders[i].1;
            let mut iters = 1_000u64;
            loop {
                let d = r(threads, iters);
                if d >= Duration::from_millis(2) || iters >= 1 << 30 {
                    let per = d.as_secs_f64() / iters as f64;
                    return ((0.02 / per.max(1e-12)) as u64).clamp(100, 1 << 32);
                }
                iters *= 4;
            }
        })
        .collect();
    let mut samples = vec![Vec::with_capacity(ROUNDS); slots.len()];
    let mut order: Vec<usize> = (0..slots.len()).collect();
    let mut rng = rng(0x1e4);
    for _ in 0..ROUNDS {
        // A fresh random order each round: no contender always follows the
        // same one (whose memory it would find in, or missing from, the caches).
        order.shuffle(&mut rng);
        for &s in &order {
            let (i, threads) = slots[s];
            // An untimed warm-up burst (a fifth of the timed one, and at
            // least one pass over the inputs) brings the contender's own data
            // back into the caches first.
            contenders[i].1(threads, (bursts[s] / 5).max(cover).max(1));
            let d = contenders[i].1(threads, bursts[s]);
            samples[s].push(per_op * threads as f64 * bursts[s] as f64 / d.as_secs_f64().max(1e-12));
        }
    }
    let mut result = serde_json::Map::new();
    for threads in THREADS {
        let mut at = serde_json::Map::new();
        for (s, &(i, t)) in slots.iter().enumerate() {
            if t == threads {
                let mut v = samples[s].clone();
                v.sort_by(f64::total_cmp);
                at.insert(contenders[i].0.to_string(), serde_json::json!(v[v.len() / 2]));
            }
        }
        result.insert(threads.to_string(), serde_json::Value::Object(at));
    }
    write_side_result(
        &format!("interleaved_{group}"),
        &serde_json::json!({
            "group": group, "rounds": ROUNDS, "burst_ms": 20,
            "unit": match unit { Unit::Op => "op/s", Unit::Bytes(_) => "B/s" },
            "median_rate": result,
        }),
    );
}

/// The `churn` bench's workload, shared with the `churnprof` example so
/// that both run exactly the same stream on the same cache.
pub mod churn {
    use dcache::{Config, Dcache, Dentry};

    /// Distinct names in the key space.
    pub const KEYS: usize = 200_000;
    /// Entries every cache is asked to hold (a tenth of the keys).
    pub const CAPACITY: usize = 20_000;
    /// Length of the access stream.
    pub const SAMPLES: usize = 1 << 21;
    /// The stream's Zipf exponent.
    pub const ZIPF_S: f64 = 0.99;

    /// The names and the stream of indexes into them.
    pub fn inputs() -> (Vec<Box<[u8]>>, Vec<u32>) {
        (super::names(KEYS, 21), super::zipf_keys(KEYS, ZIPF_S, SAMPLES, 22))
    }

    /// rcufs's dcache bounded to `CAPACITY`, and the directory the names
    /// are cached under.
    pub fn dcache() -> (Dcache<u64>, Dentry<u64>) {
        let dc = Dcache::new(
            Config {
                max_entries: CAPACITY,
                max_negative: CAPACITY / 4,
                ..Config::default()
            },
            0,
        );
        let dir = dc.insert(&dc.root(), b"dir", Some(1));
        (dc, dir)
    }
}

/// The `walk` bench's tree and paths, shared with the `walkprof` example so
/// that both walk exactly the same paths in the same order.
pub mod walk {
    use dcache::{Config, Dcache, Dentry};

    /// Components per path.
    pub const DEPTH: usize = 8;
    /// Children of every directory.
    pub const FANOUT: usize = 4;

    /// The names of the tree's components (level `l` uses names
    /// `l * FANOUT .. (l + 1) * FANOUT`, so components differ by level).
    pub fn names() -> Vec<Box<[u8]>> {
        super::names(DEPTH * FANOUT, 11)
    }

    /// The cache with the whole tree cached (fan-out `FANOUT` at each of
    /// `DEPTH` levels) and the leaf paths as component indexes into `names`.
    pub fn build(names: &[Box<[u8]>]) -> (Dcache<u64>, Vec<[u8; DEPTH]>) {
        fn rec(
            dc: &Dcache<u64>,
            names: &[Box<[u8]>],
            at: &Dentry<u64>,
            path: &mut Vec<u8>,
            out: &mut Vec<[u8; DEPTH]>,
        ) {
            if path.len() == DEPTH {
                out.push(path.as_slice().try_into().expect("DEPTH components"));
                return;
            }
            for i in 0..FANOUT {
                let comp = (path.len() * FANOUT + i) as u8;
                let child = dc.insert(at, &names[comp as usize], Some(comp as u64 + 1));
                path.push(comp);
                rec(dc, names, &child, path, out);
                path.pop();
            }
        }
        let dc = Dcache::new(
            Config {
                max_entries: 1 << 20,
                ..Config::default()
            },
            0,
        );
        let mut out = Vec::new();
        rec(&dc, names, &dc.root(), &mut Vec::new(), &mut out);
        (dc, out)
    }

    /// The paths in the order the bench walks them.
    pub fn paths<'a>(names: &'a [Box<[u8]>], leaves: &[[u8; DEPTH]]) -> Vec<[&'a [u8]; DEPTH]> {
        super::permutation(leaves.len(), 12)
            .iter()
            .map(|&l| leaves[l as usize].map(|comp| &*names[comp as usize]))
            .collect()
    }
}
