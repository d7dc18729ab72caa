//! A stress run of the radix tree's skipped levels and inline values, with
//! verification, small enough to run under valgrind memcheck:
//! `valgrind --tool=memcheck --error-exitcode=1 target/debug/examples/radix_stress`.
//!
//! In each mode, two writers insert, tag, replace, untag and remove keys
//! spread over all of `u64` (so leaves sit under skipped levels, and
//! inserts split paths, move lone entries into nodes and grow the root at
//! every height), in a tree of
//! inline values whose values alternate between the slot word and the boxed
//! fallback (2^63 and up), while a reader checks every value it finds; then
//! the same keys in a tree of boxed values. Removals shrink the root back
//! down (the inline tree's last key sits in the root, in a leaf or as a
//! lone entry); what is left is dropped with the tree. Exits non-zero (panics) on
//! any mismatch; memcheck reports any use after free or leak of the boxes
//! and nodes.

use std::sync::atomic::{AtomicBool, Ordering};

use pagecache::radix::{Inline, RadixTree};
use pagecache::{Mode, Tag};

const THREADS: u64 = 2;

/// Key `i` of the run: spread over `u64`, distinct.
fn key(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17)
}

/// The value stored at `k`: odd keys get a value too wide for the slot
/// word (boxed), even keys one that fits.
fn value(k: u64) -> u64 {
    if k & 1 == 1 { k | 1 << 63 } else { k >> 1 }
}

fn inline_stress(mode: Mode, keys: u64) {
    let tree: RadixTree<u64, Inline> = RadixTree::with_policy(mode);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let k = key(i % keys);
                let g = tree.pin();
                if let Some(v) = tree.get_copied(k, &g) {
                    assert!(v == value(k) || v == !value(k), "key {k:#x}: {v:#x}");
                }
                for (k, v) in tree.gang_lookup(k, 4) {
                    assert!(v == value(k) || v == !value(k), "key {k:#x}: {v:#x}");
                }
                i += 1;
            }
        });
        let ws: Vec<_> = (0..THREADS)
            .map(|t| {
                let tree = &tree;
                s.spawn(move || {
                    let mine: Vec<u64> = (0..keys).filter(|i| i % THREADS == t).map(key).collect();
                    for &k in &mine {
                        tree.insert(k, value(k)).unwrap();
                    }
                    for &k in &mine {
                        assert!(tree.set_tag(k, Tag::DIRTY));
                    }
                    for &k in mine.iter().step_by(2) {
                        // The complement moves a value between inline and boxed.
                        tree.replace(k, !value(k)).unwrap();
                        assert!(tree.clear_tag(k, Tag::DIRTY));
                    }
                    for &k in mine.iter().step_by(3) {
                        assert!(tree.remove(k));
                    }
                })
            })
            .collect();
        for w in ws {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        r.join().unwrap();
    });
    tree.check_invariants().unwrap();
    let expect = (0..keys).filter(|i| !(i / THREADS).is_multiple_of(3)).count();
    assert_eq!(tree.len(), expect);
    // Empty it down to the last key: the root shrinks to that key's leaf.
    let left = tree.gang_keys(0, usize::MAX, None);
    for &k in &left[1..] {
        assert!(tree.remove(k));
    }
    assert_eq!(
        tree.node_count(),
        1,
        "one key left: in the root (a leaf or a lone entry)"
    );
    tree.check_invariants().unwrap();
}

fn boxed_stress(mode: Mode, keys: u64) {
    let tree: RadixTree<String> = RadixTree::new(mode);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let tree = &tree;
            s.spawn(move || {
                let mine: Vec<u64> = (0..keys).filter(|i| i % THREADS == t).map(key).collect();
                for &k in &mine {
                    tree.insert(k, k.to_string()).unwrap();
                }
                for &k in mine.iter().step_by(2) {
                    assert_eq!(tree.take(k), Some(k.to_string()));
                }
            });
        }
    });
    tree.check_invariants().unwrap();
    for (k, v) in tree.gang_lookup(0, usize::MAX) {
        assert_eq!(v, k.to_string());
    }
}

fn main() {
    let keys = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    for mode in Mode::ALL {
        inline_stress(mode, keys);
        boxed_stress(mode, keys);
        println!("{mode:?}: ok");
    }
}
