use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::RangeLocks;

#[test]
fn disjoint_ranges_are_held_at_once_and_entries_go_when_released() {
    let l = RangeLocks::default();
    let a = l.lock(7, 0, 3);
    let b = l.lock(7, 4, 9);
    let c = l.lock(8, 0, 3);
    assert_eq!(l.held(), 3);
    assert_eq!(l.inodes(), 2);
    drop((a, b, c));
    assert_eq!(l.held(), 0);
    assert_eq!(l.inodes(), 0, "no entry stays for an inode nobody holds");
}

#[test]
fn an_overlapping_range_waits_for_the_holder() {
    let l = RangeLocks::default();
    let held = l.lock(1, 10, 20);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _g = l.lock(1, 20, 30); // shares page 20
            tx.send(()).expect("send");
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the overlapping lock was taken while the first was held"
        );
        drop(held);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the waiter got the range once it was released");
    });
    let _all = l.lock_all(1);
}

#[test]
fn read_modify_write_under_the_lock_loses_no_update() {
    // Each thread adds to a counter of "page" 5 with a gap between its load
    // and its store; only mutual exclusion of overlapping ranges keeps every
    // update. Threads locking other pages of the same inode run alongside.
    let l = RangeLocks::default();
    let counter = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (l, stop) = (&l, &stop);
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _g = l.lock(3, 100, 200);
            }
        });
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let counter = &counter;
                s.spawn(move || {
                    for _ in 0..500 {
                        let _g = l.lock(3, 5 - t.min(5), 5 + t);
                        let v = counter.load(Ordering::Relaxed);
                        std::thread::yield_now();
                        counter.store(v + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(counter.load(Ordering::Relaxed), 2000);
    assert_eq!(l.inodes(), 0);
}
