//! Payload destruction through the epoch.

use std::sync::Arc;

/// Every payload of a dropped cache is dropped, once the epoch lets its
/// destructor run.
#[test]
fn payloads_are_dropped() {
    let token = Arc::new(());
    {
        let c = dcache::Dcache::new(dcache::Config::default(), token.clone());
        let root = c.root();
        for i in 0..100u32 {
            c.insert(&root, format!("{i}").as_bytes(), Some(token.clone()));
        }
    }
    // Destruction goes through the epoch; flush until it has run. Other
    // tests of this binary pin the same global collector, so the epoch
    // advances only as they get scheduled: give them time (a liveness bound,
    // not a timing check).
    let since = std::time::Instant::now();
    while Arc::strong_count(&token) != 1 && since.elapsed().as_secs() < 30 {
        crossbeam_epoch::pin().flush();
        std::thread::yield_now();
    }
    assert_eq!(Arc::strong_count(&token), 1);
}
