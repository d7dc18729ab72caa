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
        rcu::flush();
        std::thread::yield_now();
    }
    assert_eq!(Arc::strong_count(&token), 1);
}

/// The payload of an entry removed (or dropped with its directory) on a
/// thread that then goes idle is dropped all the same: the thread hands its
/// deferred frees to the collector at once instead of keeping them in its
/// local bag until 64 gather (in rcufs the payload is an inode that owns a
/// page-cache entry, which stayed cached where no drop could reach it).
#[test]
fn a_payload_freed_on_a_thread_that_goes_idle_is_dropped() {
    for how in ["remove", "drop_subtree", "prune"] {
        let token = Arc::new(());
        let c = Arc::new(dcache::Dcache::new(dcache::Config::default(), Arc::new(())));
        let (freed_tx, freed_rx) = std::sync::mpsc::channel();
        let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
        let idle = {
            let (c, token) = (c.clone(), token.clone());
            std::thread::spawn(move || {
                let root = c.root();
                let dir = c.insert(&root, b"dir", Some(Arc::new(())));
                drop(c.insert(&dir, b"x", Some(token)));
                match how {
                    "remove" => assert!(c.remove(&dir, b"x")),
                    "drop_subtree" => assert_eq!(c.drop_subtree(&dir, |_| true).dropped, 1),
                    _ => assert!(c.prune(usize::MAX) >= 1),
                }
                freed_tx.send(()).unwrap();
                // Idle, and alive: a thread's exit would flush its bag too.
                exit_rx.recv().unwrap();
            })
        };
        freed_rx.recv().unwrap();
        // This thread drives the collector; other tests of the binary pin it
        // too (a liveness bound, not a timing check).
        let since = std::time::Instant::now();
        while Arc::strong_count(&token) != 1 && since.elapsed().as_secs() < 30 {
            rcu::flush();
            std::thread::yield_now();
        }
        assert_eq!(Arc::strong_count(&token), 1, "{how}: the payload was never dropped");
        exit_tx.send(()).unwrap();
        idle.join().unwrap();
    }
}
