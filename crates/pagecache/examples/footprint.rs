//! Measures the heap memory of the page cache's metadata: the bytes one
//! inode entry costs beyond its cached pages' buffers (the entry's tree, its
//! root leaf, the `Arc`, the inode map's share), and what is left once CLOCK
//! or drops emptied the inodes. A counting global allocator tracks the live
//! heap bytes.
//!
//! `cargo run --release -p pagecache --example footprint -- [inodes]`
//! (default 10000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use pagecache::{Config, Mode, PageCache};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const PAGE: usize = 4096;

fn main() {
    let n: u64 = std::env::args().nth(1).map_or(10_000, |a| a.parse().expect("inodes"));
    for mode in Mode::ALL {
        let cache = PageCache::new(Config {
            budget_bytes: (n as usize + 16) * PAGE,
            page_size: PAGE,
            mode,
        });
        let base = LIVE.load(Ordering::Relaxed);
        for ino in 0..n {
            cache.get_or_fill(ino, 0, |b| Ok::<_, ()>(b.len())).expect("fill");
        }
        let full = LIVE.load(Ordering::Relaxed) - base;
        let per = full as f64 / n as f64 - PAGE as f64;
        for ino in 0..n {
            cache.drop_range(ino, 0, 0);
        }
        // Retired entries and pages are freed by the epoch collector: let it run.
        for _ in 0..64 {
            rcu::flush();
        }
        let left = LIVE.load(Ordering::Relaxed) - base;
        println!(
            "{mode:?}: {n} inodes of one page: {per:.0} B of metadata per inode; after dropping every page {} entries, {left} B left",
            cache.inode_count()
        );
    }
}
