//! Unit tests of the radix tree: a property test against a `BTreeMap` model
//! (tags included) in every mode, and a few targeted cases.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::{RadixTree, SLOTS, Tag};
use crate::Mode;

#[derive(Clone, Debug)]
enum Op {
    Insert(u64),
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
        3 => key().prop_map(Op::Remove),
        2 => (key(), 0..4u8).prop_map(|(k, t)| Op::SetTag(k, t)),
        2 => (key(), 0..4u8).prop_map(|(k, t)| Op::ClearTag(k, t)),
        1 => (key(), 0..20usize).prop_map(|(k, m)| Op::Gang(k, m)),
        1 => (key(), 0..20usize, 0..4u8).prop_map(|(k, m, t)| Op::GangTag(k, m, t)),
    ]
}

#[track_caller]
fn run(mode: Mode, ops: &[Op]) {
    let tree = RadixTree::<u64>::new(mode);
    let mut model: BTreeMap<u64, (u64, BTreeSet<u8>)> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(k) => {
                let v = k.wrapping_mul(31).wrapping_add(i as u64);
                let expect = !model.contains_key(&k);
                assert_eq!(tree.insert(k, v).is_ok(), expect, "insert {k}");
                if expect {
                    model.insert(k, (v, BTreeSet::new()));
                }
            }
            Op::Remove(k) => assert_eq!(tree.take(k), model.remove(&k).map(|e| e.0), "remove {k}"),
            Op::SetTag(k, t) => {
                let present = model.get_mut(&k).map(|e| e.1.insert(t)).is_some();
                assert_eq!(tree.set_tag(k, Tag(t)), present, "set_tag {k} {t}");
            }
            Op::ClearTag(k, t) => {
                let was = model.get_mut(&k).is_some_and(|e| e.1.remove(&t));
                assert_eq!(tree.clear_tag(k, Tag(t)), was, "clear_tag {k} {t}");
            }
            Op::Gang(k, m) => {
                let want: Vec<(u64, u64)> = model.range(k..).take(m).map(|(k, e)| (*k, e.0)).collect();
                assert_eq!(tree.gang_lookup(k, m), want, "gang {k} {m}");
            }
            Op::GangTag(k, m, t) => {
                let want: Vec<(u64, u64)> = model
                    .range(k..)
                    .filter(|(_, e)| e.1.contains(&t))
                    .take(m)
                    .map(|(k, e)| (*k, e.0))
                    .collect();
                assert_eq!(tree.gang_lookup_tag(k, m, Tag(t)), want, "gang_tag {k} {m} {t}");
            }
        }
        tree.check_invariants()
            .unwrap_or_else(|e| panic!("after op {i} {op:?}: {e}"));
    }
    assert_eq!(tree.len(), model.len());
    for (k, (v, tags)) in &model {
        assert_eq!(tree.get_cloned(*k), Some(*v));
        for t in 0..4u8 {
            assert_eq!(tree.get_tag(*k, Tag(t)), tags.contains(&t), "final tag {k} {t}");
        }
    }
    for k in model.keys().copied().collect::<Vec<_>>() {
        assert!(tree.remove(k));
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
