//! Measures the heap bytes the cache allocates per cached entry, with a
//! counting global allocator.
//!
//! `cargo run --release -p dcache --example overhead [-- ENTRIES]`
//!
//! Caches ENTRIES names of 16 bytes (payload `u64`) spread over 100
//! directories, with `max_entries` equal to ENTRIES so the bucket array is
//! sized as in production, and prints the bytes requested from the allocator
//! per entry and the number of allocations per entry (each costs the
//! allocator's own header on top, 8 to 16 bytes with glibc).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use dcache::{Config, Dcache};

struct Counting;

static BYTES: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let n: usize = std::env::args().nth(1).map_or(100_000, |a| a.parse().expect("ENTRIES"));
    let b0 = BYTES.load(Ordering::Relaxed);
    let c = Dcache::new(
        Config {
            max_entries: n + 200,
            ..Config::default()
        },
        0u64,
    );
    let (b1, a1) = (BYTES.load(Ordering::Relaxed), ALLOCS.load(Ordering::Relaxed));
    let root = c.root();
    let dirs: Vec<_> = (0..100)
        .map(|i| c.insert(&root, format!("dir-{i:012}").as_bytes(), Some(i)))
        .collect();
    for i in 0..n {
        let d = &dirs[i % dirs.len()];
        drop(c.insert(d, format!("file-{i:011}").as_bytes(), Some(i as u64)));
    }
    let (b2, a2) = (BYTES.load(Ordering::Relaxed), ALLOCS.load(Ordering::Relaxed));
    let (node, bucket) = Dcache::<u64>::layout_bytes();
    let per = (b2 - b1) as f64 / (n + 100) as f64;
    let table = (b1 - b0) as f64 / (n + 100) as f64;
    println!("entries {}, buckets {}", c.len(), c.buckets());
    println!("size_of: node {node} B (payload Option<u64> = 16 B of it, name inline), bucket {bucket} B");
    println!(
        "heap per entry: {per:.1} B in entries ({:.2} allocations), {table:.1} B of table and fixed state",
        (a2 - a1) as f64 / (n + 100) as f64
    );
    println!("total {:.1} B per entry, payload included", per + table);
}
