//! Path walk of 8-component paths: the epoch walk against a walk that takes
//! and drops a counted reference on every component.
//!
//! Seed 000 ("Scalability of the directory entry cache", §7, "Avoiding
//! cacheline bouncing of d_count") stopped `link_path_walk` from incrementing
//! and decrementing `d_count` on every dentry it passes: shared prefixes such
//! as `/` and `usr` made those counters bounce between CPUs. rcufs's
//! `Dcache::walk` walks the whole path under one epoch guard and counts only
//! the final dentry; the baseline walks with `Dcache::lookup`, which returns a
//! counted handle per component (take the child's count, drop the parent's),
//! as the 2.4 kernel did. A third contender walks with `Dcache::pin()` and
//! `Pinned::lookup_in`, borrowing every component and counting none.
//!
//! The tree has fan-out 4 at each of 8 levels (65,536 leaf paths, 87,381
//! dentries); every walk goes from the root to a random leaf, so all threads
//! share the upper levels, as real paths share `/usr`.
//!
//! At one thread the two walks differ only by the counted walk's extra work
//! per component (a pin, a count taken and one dropped: three locked
//! read-modify-writes, none contended, and about 130 instructions), while
//! both wait on the same cache misses: the table is 4 MiB and the nodes
//! about 14 MiB, so the lower levels miss in the per-core caches on every
//! walk. The `walkprof` example splits the two terms: run with `hot` it
//! walks one path over and over, which takes the misses away. With the
//! misses taking about 300 ns of a walk's 380 and the extra work about
//! 120 ns, the one-thread ratio stays near 1.3; faster per-component code
//! shared by both walks leaves it below (300 + 120) / 300 = 1.4.

use benches::walk::{DEPTH, build, names, paths};
use benches::{Routine, Unit, consume, cycle, run_group, timed_threads};
use criterion::{Criterion, criterion_group, criterion_main};
use dcache::{Lookup, Walk};

fn bench_walk(c: &mut Criterion) {
    benches::calibration(c, "walk");
    let names = names();
    let (dc, leaves) = build(&names);
    let paths: Vec<[&[u8]; DEPTH]> = paths(&names, &leaves);
    let root = dc.root();

    let n = paths.len();
    let contenders: Vec<(&str, Routine<'_>)> = vec![
        (
            "rcufs_epoch_walk",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&paths, t * n / threads, iters, |path| {
                        match dc.walk(&root, path.iter().copied()) {
                            Walk::Found(d) => consume(d.payload().copied()),
                            _ => panic!("every benchmark path is cached"),
                        }
                    })
                })
            }),
        ),
        (
            "rcufs_pinned_walk",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&paths, t * n / threads, iters, |path| {
                        let pinned = dc.pin();
                        let mut at = pinned.root();
                        for comp in path {
                            at = pinned.lookup_in(at, comp).expect("every benchmark path is cached");
                        }
                        consume(at.payload().copied());
                    })
                })
            }),
        ),
        (
            "counted_per_component",
            Box::new(|threads, iters| {
                timed_threads(threads, iters, |t, iters| {
                    cycle(&paths, t * n / threads, iters, |path| {
                        let mut at = root.clone();
                        for comp in path {
                            at = match dc.lookup(&at, comp) {
                                Lookup::Positive(d) => d,
                                _ => panic!("every benchmark path is cached"),
                            };
                        }
                        consume(at.payload().copied());
                    })
                })
            }),
        ),
    ];
    run_group(c, "path_walk", Unit::Op, n as u64, &contenders);
}

criterion_group! {
    name = walk_benches;
    config = benches::criterion();
    targets = bench_walk
}
criterion_main!(walk_benches);
