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

use benches::{Routine, Unit, consume, cycle, names, permutation, run_group, timed_threads};
use criterion::{Criterion, criterion_group, criterion_main};
use dcache::{Config, Dcache, Dentry, Lookup, Walk};

const DEPTH: usize = 8;
const FANOUT: usize = 4;

/// Builds the tree and returns the leaf paths (as component indexes into `names`).
fn build(dc: &Dcache<u64>, names: &[Box<[u8]>]) -> Vec<[u8; DEPTH]> {
    fn rec(dc: &Dcache<u64>, names: &[Box<[u8]>], at: &Dentry<u64>, path: &mut Vec<u8>, out: &mut Vec<[u8; DEPTH]>) {
        if path.len() == DEPTH {
            out.push(path.as_slice().try_into().expect("DEPTH components"));
            return;
        }
        for i in 0..FANOUT {
            // Level l uses names l*FANOUT .. (l+1)*FANOUT, so components differ by level.
            let comp = (path.len() * FANOUT + i) as u8;
            let child = dc.insert(at, &names[comp as usize], Some(comp as u64 + 1));
            path.push(comp);
            rec(dc, names, &child, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    rec(dc, names, &dc.root(), &mut Vec::new(), &mut out);
    out
}

fn bench_walk(c: &mut Criterion) {
    benches::calibration(c, "walk");
    let names = names(DEPTH * FANOUT, 11);
    let dc: Dcache<u64> = Dcache::new(
        Config {
            max_entries: 1 << 20,
            ..Config::default()
        },
        0,
    );
    let leaves = build(&dc, &names);
    let order = permutation(leaves.len(), 12);
    let paths: Vec<[&[u8]; DEPTH]> = order
        .iter()
        .map(|&l| leaves[l as usize].map(|comp| &*names[comp as usize]))
        .collect();
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
