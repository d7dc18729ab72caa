//! Both cache crates defer their frees into one participant per thread, so
//! that a drain by either (or by `rcu::flush`) frees what the other retired
//! on the same thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pagecache::{Mode, RadixTree};

/// Runs `drain` until `token` is the last reference, for at most 30 s (a
/// liveness bound, not a timing check: other tests of this binary pin the
/// same collector and can hold the epoch back while they run).
fn drained_by(token: &Arc<()>, drain: fn()) -> bool {
    let since = Instant::now();
    while Arc::strong_count(token) != 1 && since.elapsed() < Duration::from_secs(30) {
        drain();
        std::thread::yield_now();
    }
    Arc::strong_count(token) == 1
}

/// A value the radix tree removed on a fresh thread, whose drop the tree
/// deferred: still alive after `crossbeam_epoch::pin().flush()` (crossbeam's
/// own participant, another bag), and then freed by `drain`.
fn removed_value_is_freed_by(drain: fn()) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let token = Arc::new(());
            let tree: RadixTree<Arc<()>> = RadixTree::new(Mode::Optimistic);
            tree.insert(7, token.clone()).unwrap();
            assert!(tree.remove(7));
            assert_eq!(
                Arc::strong_count(&token),
                2,
                "the removed value was dropped at once, not deferred"
            );
            for _ in 0..1000 {
                crossbeam_epoch::pin().flush();
            }
            assert_eq!(
                Arc::strong_count(&token),
                2,
                "crossbeam's own participant drained the caches' bag: the drains need no `rcu::flush`"
            );
            assert!(drained_by(&token, drain), "the removed value was never dropped");
        });
    });
}

#[test]
fn a_dcache_quiesce_frees_what_the_radix_tree_removed_on_the_same_thread() {
    removed_value_is_freed_by(dcache::quiesce);
}

#[test]
fn rcu_flush_frees_what_the_radix_tree_removed_on_the_same_thread() {
    removed_value_is_freed_by(rcu::flush);
}
