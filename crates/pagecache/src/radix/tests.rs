//! Unit tests of the radix tree: a property test against a `BTreeMap` model
//! (tags and multi-index entries included) in every mode, and a few
//! targeted cases.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::{RadixTree, SHIFT, SLOTS, Tag};
use crate::Mode;

#[derive(Clone, Debug)]
enum Op {
    Insert(u64),
    /// A multi-index entry: the aligned run of `2^order` indexes holding the key.
    InsertRun(u64, u32),
    Replace(u64),
    Remove(u64),
    SetTag(u64, u8),
    ClearTag(u64, u8),
    Gang(u64, usize),
    GangTag(u64, usize, u8),
}

/// Keys mostly from a small range (dense leaves, sibling nodes, shrinking)
/// and sometimes anywhere (growing to full height).
fn key() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..(4 * SLOTS as u64),
        2 => 0..(SLOTS as u64 * SLOTS as u64 * 4),
        1 => any::<u64>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => key().prop_map(Op::Insert),
        3 => (key(), 0..=SHIFT).prop_map(|(k, o)| Op::InsertRun(k, o)),
        1 => key().prop_map(Op::Replace),
        3 => key().prop_map(Op::Remove),
        2 => (key(), 0..4u8).prop_map(|(k, t)| Op::SetTag(k, t)),
        2 => (key(), 0..4u8).prop_map(|(k, t)| Op::ClearTag(k, t)),
        1 => (key(), 0..20usize).prop_map(|(k, m)| Op::Gang(k, m)),
        1 => (key(), 0..20usize, 0..4u8).prop_map(|(k, m, t)| Op::GangTag(k, m, t)),
    ]
}

/// The model's entry at one index: the value, the run it belongs to
/// (first index, length) and the tags of this index.
#[derive(Clone, Debug)]
struct Entry {
    value: u64,
    first: u64,
    len: u64,
    tags: BTreeSet<u8>,
}

#[track_caller]
fn run(mode: Mode, ops: &[Op]) {
    let tree = RadixTree::<u64>::new(mode);
    let mut model: BTreeMap<u64, Entry> = BTreeMap::new();
    let insert = |model: &mut BTreeMap<u64, Entry>, first: u64, len: u64, value: u64| {
        for k in first..=first + (len - 1) {
            let tags = BTreeSet::new();
            model.insert(
                k,
                Entry {
                    value,
                    first,
                    len,
                    tags,
                },
            );
        }
    };
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(k) => {
                let v = k.wrapping_mul(31).wrapping_add(i as u64);
                let expect = !model.contains_key(&k);
                assert_eq!(tree.insert(k, v).is_ok(), expect, "insert {k}");
                if expect {
                    insert(&mut model, k, 1, v);
                }
            }
            Op::InsertRun(k, order) => {
                let len = 1u64 << order;
                let first = k & !(len - 1);
                let v = k.wrapping_mul(17).wrapping_add(i as u64);
                let expect = model.range(first..=first + (len - 1)).next().is_none();
                assert_eq!(
                    tree.insert_run(first, order, v).is_ok(),
                    expect,
                    "insert_run {first} {order}"
                );
                if expect {
                    insert(&mut model, first, len, v);
                }
            }
            Op::Replace(k) => {
                let v = k.wrapping_mul(7).wrapping_add(i as u64);
                let found = model.get(&k).map(|e| (e.first, e.len));
                assert_eq!(tree.replace(k, v).is_ok(), found.is_some(), "replace {k}");
                if let Some((first, len)) = found {
                    for e in model.range_mut(first..=first + (len - 1)) {
                        e.1.value = v;
                    }
                }
            }
            Op::Remove(k) => {
                let want = model.get(&k).map(|e| (e.value, e.first, e.len));
                if let Some((_, first, len)) = want {
                    for x in first..=first + (len - 1) {
                        model.remove(&x);
                    }
                }
                assert_eq!(tree.take(k), want.map(|w| w.0), "remove {k}");
            }
            Op::SetTag(k, t) => {
                let present = model.get_mut(&k).map(|e| e.tags.insert(t)).is_some();
                assert_eq!(tree.set_tag(k, Tag(t)), present, "set_tag {k} {t}");
            }
            Op::ClearTag(k, t) => {
                let was = model.get_mut(&k).is_some_and(|e| e.tags.remove(&t));
                assert_eq!(tree.clear_tag(k, Tag(t)), was, "clear_tag {k} {t}");
            }
            Op::Gang(k, m) => {
                let want: Vec<(u64, u64)> = model.range(k..).take(m).map(|(k, e)| (*k, e.value)).collect();
                assert_eq!(tree.gang_lookup(k, m), want, "gang {k} {m}");
            }
            Op::GangTag(k, m, t) => {
                let want: Vec<(u64, u64)> = model
                    .range(k..)
                    .filter(|(_, e)| e.tags.contains(&t))
                    .take(m)
                    .map(|(k, e)| (*k, e.value))
                    .collect();
                assert_eq!(tree.gang_lookup_tag(k, m, Tag(t)), want, "gang_tag {k} {m} {t}");
            }
        }
        tree.check_invariants()
            .unwrap_or_else(|e| panic!("after op {i} {op:?}: {e}"));
    }
    assert_eq!(tree.len(), model.len());
    for (k, e) in &model {
        assert_eq!(tree.get_cloned(*k), Some(e.value));
        for t in 0..4u8 {
            assert_eq!(tree.get_tag(*k, Tag(t)), e.tags.contains(&t), "final tag {k} {t}");
        }
    }
    while let Some((&k, e)) = model.iter().next() {
        let (first, len) = (e.first, e.len);
        assert!(tree.remove(k));
        for x in first..=first + (len - 1) {
            assert!(model.remove(&x).is_some());
            assert!(!tree.contains(x), "index {x} of a removed run");
        }
    }
    assert!(tree.is_empty(), "tree empties");
    assert_eq!(tree.height(), 0);
    tree.check_invariants().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 64 } else { 256 }))]

    #[test]
    fn matches_model_serial(ops in proptest::collection::vec(op(), 1..200)) {
        run(Mode::Serial, &ops);
    }

    #[test]
    fn matches_model_lock_coupled(ops in proptest::collection::vec(op(), 1..200)) {
        run(Mode::LockCoupled, &ops);
    }

    #[test]
    fn matches_model_optimistic(ops in proptest::collection::vec(op(), 1..200)) {
        run(Mode::Optimistic, &ops);
    }
}

#[test]
fn grows_and_shrinks() {
    for mode in Mode::ALL {
        let tree = RadixTree::new(mode);
        assert_eq!(tree.height(), 0);
        tree.insert(0, 0u32).unwrap();
        assert_eq!(tree.height(), 1);
        tree.insert(u64::MAX, 1).unwrap();
        assert_eq!(tree.height(), super::MAX_HEIGHT);
        assert!(tree.set_tag(u64::MAX, Tag::DIRTY));
        assert_eq!(tree.gang_keys(0, 10, Some(Tag::DIRTY)), vec![u64::MAX]);
        assert!(tree.remove(u64::MAX));
        assert_eq!(
            tree.height(),
            1,
            "{mode:?}: removal of the high key shrinks back to one level"
        );
        tree.check_invariants().unwrap();
        assert_eq!(tree.gang_keys(0, 10, None), vec![0]);
        assert!(tree.remove(0));
        assert!(tree.is_empty());
    }
}

#[test]
fn set_tag_on_missing_entry_leaves_no_bits() {
    for mode in Mode::ALL {
        let tree = RadixTree::new(mode);
        tree.insert(1, 1u8).unwrap();
        tree.insert(SLOTS as u64 * 3, 2).unwrap();
        assert!(!tree.set_tag(2, Tag::WRITEBACK));
        assert!(!tree.set_tag(SLOTS as u64 * 2, Tag::WRITEBACK));
        tree.check_invariants().unwrap();
        assert!(tree.gang_keys(0, 10, Some(Tag::WRITEBACK)).is_empty());
    }
}

/// A multi-index entry is found at each index it covers, once per index in
/// gang lookups, refuses overlapping inserts, is freed once when the tree
/// drops (the allocation count of a value with a destructor), and leaves
/// whole whichever index removes it.
#[test]
fn runs() {
    use std::sync::Arc;
    for mode in Mode::ALL {
        let tree = RadixTree::new(mode);
        let a = Arc::new(1u32);
        tree.insert_run(SLOTS as u64, SHIFT, Arc::clone(&a)).unwrap();
        tree.insert_run(8, 3, Arc::clone(&a)).unwrap();
        assert!(tree.insert(12, Arc::clone(&a)).is_err(), "{mode:?}: inside a run");
        assert!(
            tree.insert_run(0, 4, Arc::clone(&a)).is_err(),
            "{mode:?}: overlaps a run"
        );
        tree.insert(3, Arc::clone(&a)).unwrap();
        assert_eq!(tree.len(), SLOTS + 8 + 1);
        assert_eq!(tree.gang_keys(0, 100, None).len(), 9 + SLOTS.min(100 - 9));
        tree.check_invariants().unwrap();
        // Dropping the tree frees each entry once, however many slots it fills.
        assert_eq!(Arc::strong_count(&a), 4);
        drop(tree);
        assert_eq!(Arc::strong_count(&a), 1, "{mode:?}");
        let tree = RadixTree::new(mode);
        tree.insert_run(SLOTS as u64, SHIFT, 7u8).unwrap();
        tree.insert(0, 1).unwrap();
        assert!(tree.remove(SLOTS as u64 + 5), "{mode:?}");
        assert!(!tree.contains(SLOTS as u64), "{mode:?}: the whole run went");
        assert_eq!(tree.len(), 1);
        assert_eq!(tree.height(), 1, "{mode:?}: the emptied leaf went too");
        tree.check_invariants().unwrap();
    }
}
