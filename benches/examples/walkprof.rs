//! One thread's walks of the `walk` bench's paths (`benches/benches/walk.rs`),
//! for callgrind and `perf`: no threads, no timing harness, nothing but the
//! walks in the loop.
//!
//! `cargo run --release -p benches --example walkprof -- [epoch|pinned|counted] [WALKS] [hot]`
//!
//! The same tree and path order as the bench: 8-component paths from the
//! root to a random leaf of a tree of fan-out 4. One warm-up pass over the
//! paths, then `WALKS` counted walks (default: one more pass). Every walk
//! goes through a function that is never inlined (`epoch`, `pinned`,
//! `counted`), so that `valgrind --tool=callgrind
//! --toggle-collect=walkprof::epoch` counts exactly the walks (divide by its
//! calls, and by 8 for a component). Prints the sum of the payloads found,
//! so the loop is not removed.

use std::hint::black_box;

use benches::walk::{DEPTH, build, names, paths};
use dcache::{Dcache, Dentry, Lookup, Walk};

/// One walk of the bench's `rcufs_epoch_walk`.
#[inline(never)]
fn epoch(dc: &Dcache<u64>, root: &Dentry<u64>, path: &[&[u8]; DEPTH]) -> u64 {
    match dc.walk(root, path.iter().copied()) {
        Walk::Found(d) => d.payload().copied().unwrap_or(0),
        _ => panic!("every path is cached"),
    }
}

/// One walk of the bench's `rcufs_pinned_walk`.
#[inline(never)]
fn pinned(dc: &Dcache<u64>, path: &[&[u8]; DEPTH]) -> u64 {
    let pinned = dc.pin();
    let mut at = pinned.root();
    for comp in path {
        at = pinned.lookup_in(at, comp).expect("every path is cached");
    }
    at.payload().copied().unwrap_or(0)
}

/// One walk of the bench's `counted_per_component`.
#[inline(never)]
fn counted(dc: &Dcache<u64>, root: &Dentry<u64>, path: &[&[u8]; DEPTH]) -> u64 {
    let mut at = root.clone();
    for comp in path {
        at = match dc.lookup(&at, comp) {
            Lookup::Positive(d) => d,
            _ => panic!("every path is cached"),
        };
    }
    at.payload().copied().unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "epoch".into());
    let names = names();
    let (dc, leaves) = build(&names);
    let paths = paths(&names, &leaves);
    let walks: usize = args.next().map_or(paths.len(), |a| a.parse().expect("WALKS"));
    // `hot`: the counted walks take the first path every time, so that the
    // walk's data stays in the first-level cache (what a walk costs without
    // its misses).
    let hot = args.next().is_some_and(|a| a == "hot");
    let root = dc.root();
    let one = |path: &[&[u8]; DEPTH]| match mode.as_str() {
        "epoch" => epoch(&dc, &root, path),
        "pinned" => pinned(&dc, path),
        "counted" => counted(&dc, &root, path),
        m => panic!("unknown mode {m}: epoch, pinned or counted"),
    };
    let mut sum = 0u64;
    for path in &paths {
        sum = sum.wrapping_add(one(black_box(path)));
    }
    let timed = if hot { &paths[..1] } else { &paths[..] };
    for path in timed.iter().cycle().take(walks) {
        sum = sum.wrapping_add(one(black_box(path)));
    }
    println!("{walks} {mode} walks, payload sum {sum}");
}
