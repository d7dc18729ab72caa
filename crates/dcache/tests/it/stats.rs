//! The statistics' per-thread shards (`rcu::stats_shard`, through the crate's `sync` module): no count is
//! lost by threads beyond the owned shards, by threads that reuse the
//! shard number of one that exited, or by counts made while a thread's
//! thread-locals are dropped.

use std::sync::{Arc, Barrier};
use std::thread;

use dcache::{Config, Dcache};

/// Lookups (misses) each thread makes.
const EACH: u64 = 1000;

/// `threads` threads alive at once, each counting `EACH` misses.
fn misses_from(c: &Arc<Dcache<u32>>, threads: usize) {
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (c, start) = (c.clone(), start.clone());
            thread::spawn(move || {
                let root = c.root();
                start.wait();
                for i in 0..EACH {
                    assert_eq!(c.lookup_with(&root, format!("{t}-{i}").as_bytes(), |_| ()), None);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn no_count_is_lost_past_the_owned_shards_or_across_reused_ones() {
    let c = Arc::new(Dcache::new(Config::default(), 0));
    // More threads at once than there are owned shards (64), twice: the
    // second round reuses the numbers the first gave back.
    misses_from(&c, 80);
    assert_eq!(c.stats().misses, 80 * EACH);
    misses_from(&c, 80);
    assert_eq!(c.stats().misses, 160 * EACH);
}

/// Counts on exit: a thread-local whose drop looks up in the cache.
struct LookupOnExit(Arc<Dcache<u32>>);

impl Drop for LookupOnExit {
    fn drop(&mut self) {
        let root = self.0.root();
        assert_eq!(self.0.lookup_with(&root, b"on-exit", |_| ()), None);
    }
}

thread_local! {
    static ON_EXIT: std::cell::RefCell<Option<LookupOnExit>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn counts_made_while_a_thread_exits_are_kept() {
    let c = Arc::new(Dcache::new(Config::default(), 0));
    for first in [true, false] {
        let c2 = c.clone();
        thread::spawn(move || {
            // Registered first, so dropped last (thread-locals are dropped
            // newest first): either the thread's first count is made on
            // exit, or it counted before and its shard's owner is dropped
            // by then (the count goes to the shared shard).
            ON_EXIT.with(|e| *e.borrow_mut() = Some(LookupOnExit(c2.clone())));
            if !first {
                assert_eq!(c2.lookup_with(&c2.root(), b"before", |_| ()), None);
            }
        })
        .join()
        .unwrap();
    }
    assert_eq!(c.stats().misses, 3);
}
