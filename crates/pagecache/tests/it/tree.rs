//! Stress of the radix tree in every mode: writers on interleaved keys (so
//! they share leaves and paths), lock-free readers checking what they see,
//! then exact verification against what each writer did, and the tag-bitmap
//! invariants.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use pagecache::{Mode, RadixTree, Tag};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::scaled;

const THREADS: u64 = 3;

fn value_of(key: u64) -> u64 {
    key.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
}

/// One writer's life: random operations on the keys it owns (k % THREADS ==
/// me), keeping a model of them; after each remove the key must be gone.
fn writer(tree: &RadixTree<u64>, me: u64, space: u64, ops: usize) -> BTreeMap<u64, [bool; 4]> {
    let mut rng = SmallRng::seed_from_u64(me * 7919 + space);
    let mut model: BTreeMap<u64, [bool; 4]> = BTreeMap::new();
    for _ in 0..ops {
        let key = rng.random_range(0..space / THREADS) * THREADS + me;
        let tag = rng.random_range(0..4u8);
        match rng.random_range(0..10) {
            0..=3 => {
                let fresh = !model.contains_key(&key);
                assert_eq!(tree.insert(key, value_of(key)).is_ok(), fresh, "insert {key}");
                model.entry(key).or_default();
            }
            4..=5 => {
                assert_eq!(tree.remove(key), model.remove(&key).is_some(), "remove {key}");
                assert!(!tree.contains(key), "removed key {key} still visible to its remover");
            }
            6..=7 => {
                let present = model.get_mut(&key).map(|t| t[usize::from(tag)] = true).is_some();
                assert_eq!(tree.set_tag(key, Tag::new(tag).unwrap()), present, "set_tag {key}");
            }
            _ => {
                let was = model
                    .get_mut(&key)
                    .is_some_and(|t| std::mem::replace(&mut t[usize::from(tag)], false));
                assert_eq!(tree.clear_tag(key, Tag::new(tag).unwrap()), was, "clear_tag {key}");
            }
        }
    }
    model
}

/// A reader: gang lookups return increasing keys with the right values;
/// tagged gang lookups only entries of the right value.
fn reader(tree: &RadixTree<u64>, stop: &AtomicBool, space: u64) {
    let mut rng = SmallRng::seed_from_u64(space);
    while !stop.load(Ordering::Relaxed) {
        let first = rng.random_range(0..space);
        let guard = tree.pin();
        let got = tree.gang_lookup_in(first, 50, &guard);
        for w in got.windows(2) {
            assert!(w[0].0 < w[1].0, "gang lookup out of order");
        }
        for (k, v) in &got {
            assert!(*k >= first);
            assert_eq!(**v, value_of(*k));
        }
        let tagged = tree.gang_lookup_tag_in(first, 50, Tag::DIRTY, &guard);
        for (k, v) in &tagged {
            assert_eq!(**v, value_of(*k));
        }
        if let Some(v) = tree.get(first, &guard) {
            assert_eq!(*v, value_of(first));
        }
    }
}

fn stress(mode: Mode, space: u64) {
    let tree = RadixTree::new(mode);
    let ops = scaled(40_000);
    let stop = AtomicBool::new(false);
    let models: Vec<_> = std::thread::scope(|s| {
        let r = s.spawn(|| reader(&tree, &stop, space));
        let ws: Vec<_> = (0..THREADS)
            .map(|me| {
                s.spawn({
                    let tree = &tree;
                    move || writer(tree, me, space, ops)
                })
            })
            .collect();
        let models = ws.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        r.join().unwrap();
        models
    });
    let mut all = BTreeMap::new();
    for m in models {
        all.extend(m);
    }
    tree.check_invariants()
        .unwrap_or_else(|e| panic!("{mode:?} space {space}: {e}"));
    assert_eq!(tree.len(), all.len());
    let keys: Vec<u64> = tree.gang_lookup(0, usize::MAX).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        all.keys().copied().collect::<Vec<_>>(),
        "{mode:?}: lost or phantom entries"
    );
    for t in 0..4u8 {
        let want: Vec<u64> = all
            .iter()
            .filter(|(_, tags)| tags[usize::from(t)])
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(tree.gang_keys(0, usize::MAX, Tag::new(t)), want, "{mode:?}: tag {t}");
    }
    // Empty it concurrently and check it shrinks to nothing.
    std::thread::scope(|s| {
        for me in 0..THREADS {
            let (tree, all) = (&tree, &all);
            s.spawn(move || {
                for k in all.keys().filter(|k| *k % THREADS == me) {
                    assert!(tree.remove(*k));
                }
            });
        }
    });
    assert!(tree.is_empty(), "{mode:?}: emptied tree has a root");
    tree.check_invariants().unwrap();
}

#[test]
fn stress_small_key_space() {
    for mode in Mode::ALL {
        stress(mode, 512);
    }
}

#[test]
fn stress_large_key_space() {
    for mode in Mode::ALL {
        stress(mode, 1 << 20);
    }
}

/// All threads insert the same keys at once: each key is won exactly once,
/// and the tree grows from empty while they race.
#[test]
fn racing_inserts_win_once() {
    for mode in Mode::ALL {
        let tree = RadixTree::new(mode);
        let n = scaled(50_000) as u64;
        let barrier = Barrier::new(THREADS as usize);
        let wins: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (tree, barrier) = (&tree, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        // Different orders, so that growth races with inserts below.
                        (0..n)
                            .filter(|i| {
                                let k = if t == 0 { *i * 977 } else { (n - 1 - *i) * 977 };
                                tree.insert(k, value_of(k)).is_ok()
                            })
                            .count() as u64
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, n, "{mode:?}");
        assert_eq!(tree.len() as u64, n);
        tree.check_invariants().unwrap();
    }
}

/// Threads racing on the same keys: set-tag on an entry that another thread
/// removes (the cleanup walk of bits set on the way down), clear-tag against
/// set-tag, removes that shrink the tree against inserts that grow it. No
/// exact model exists for shared keys, so the checks are the structural and
/// tag-bitmap invariants at the end, and that every surviving entry holds
/// its own value and its tags are exactly those a tagged lookup reports.
#[test]
fn shared_keys_tag_remove_races() {
    // Keys spread over several levels so that removals empty nodes and
    // shrink the root while other threads tag below it.
    let keys: Vec<u64> = (0..24u64).map(|i| (i % 6) << (6 * (i / 6))).collect();
    for mode in Mode::ALL {
        for round in 0..scaled(16) as u64 {
            let tree = RadixTree::new(mode);
            let barrier = Barrier::new(THREADS as usize);
            std::thread::scope(|s| {
                for me in 0..THREADS {
                    let (tree, barrier, keys) = (&tree, &barrier, &keys);
                    s.spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(round * 31 + me);
                        barrier.wait();
                        for _ in 0..scaled(4000) {
                            let key = keys[rng.random_range(0..keys.len())];
                            let tag = Tag::new(rng.random_range(0..2u8)).unwrap();
                            match rng.random_range(0..8) {
                                0 | 1 => {
                                    let _ = tree.insert(key, value_of(key));
                                }
                                2 | 3 => {
                                    tree.remove(key);
                                }
                                4 | 5 => {
                                    tree.set_tag(key, tag);
                                }
                                _ => {
                                    tree.clear_tag(key, tag);
                                }
                            }
                        }
                    });
                }
            });
            tree.check_invariants()
                .unwrap_or_else(|e| panic!("{mode:?} round {round}: {e}"));
            for (k, v) in tree.gang_lookup(0, usize::MAX) {
                assert_eq!(v, value_of(k), "{mode:?}");
            }
            for tag in [Tag::DIRTY, Tag::WRITEBACK] {
                let tagged: Vec<u64> = tree.gang_keys(0, usize::MAX, Some(tag));
                let expect: Vec<u64> = tree
                    .gang_keys(0, usize::MAX, None)
                    .into_iter()
                    .filter(|&k| tree.get_tag(k, tag))
                    .collect();
                assert_eq!(tagged, expect, "{mode:?} {tag:?}");
            }
        }
    }
}
