//! Unit tests of the radix tree: a property test against a `BTreeMap` model
//! (tags and multi-index entries included) in every mode, for boxed and for
//! inline values, on keys of every magnitude (so that levels are skipped,
//! split and grown at every height), and a few targeted cases.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::{Boxed, Inline, Own, RadixTree, SHIFT, SLOTS, Tag, Word};
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

/// Keys mostly from a small range (dense leaves, sibling nodes, shrinking),
/// sometimes of any magnitude below 2^64 (skipped levels, splits and roots
/// at every height) and sometimes anywhere.
fn key() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..(4 * SLOTS as u64),
        2 => 0..(SLOTS as u64 * SLOTS as u64 * 4),
        2 => (0u32..64).prop_flat_map(|b| 0..=(u64::MAX >> b)),
        1 => any::<u64>(),
    ]
}

/// The two item policies under test, with the operations whose signatures
/// differ between them.
trait Policy: Own<u64> + Sized {
    fn insert(t: &RadixTree<u64, Self>, k: u64, v: u64) -> bool;
    /// A multi-index entry, or (inline trees have none) a single insert of `first`.
    fn insert_run(t: &RadixTree<u64, Self>, first: u64, order: u32, v: u64) -> bool;
    fn replace(t: &RadixTree<u64, Self>, k: u64, v: u64) -> bool;
    const RUNS: bool;
}

impl Policy for Boxed {
    fn insert(t: &RadixTree<u64, Self>, k: u64, v: u64) -> bool {
        t.insert(k, v).is_ok()
    }
    fn insert_run(t: &RadixTree<u64, Self>, first: u64, order: u32, v: u64) -> bool {
        t.insert_run(first, order, v).is_ok()
    }
    fn replace(t: &RadixTree<u64, Self>, k: u64, v: u64) -> bool {
        t.replace(k, v).is_ok()
    }
    const RUNS: bool = true;
}

impl Policy for Inline {
    fn insert(t: &RadixTree<u64, Self>, k: u64, v: u64) -> bool {
        t.insert(k, v).is_ok()
    }
    fn insert_run(t: &RadixTree<u64, Self>, first: u64, _: u32, v: u64) -> bool {
        t.insert(first, v).is_ok()
    }
    fn replace(t: &RadixTree<u64, Self>, k: u64, v: u64) -> bool {
        t.replace(k, v).is_ok()
    }
    const RUNS: bool = false;
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

/// Runs `ops` on a tree and on the model, checking every answer and the
/// tree's invariants after each step. Values are spread over all of `u64`,
/// so that inline trees hold both inline and boxed values.
#[track_caller]
fn run<O: Policy>(mode: Mode, ops: &[Op]) {
    let tree = RadixTree::<u64, O>::with_policy(mode);
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
                assert_eq!(O::insert(&tree, k, v), expect, "insert {k}");
                if expect {
                    insert(&mut model, k, 1, v);
                }
            }
            Op::InsertRun(k, order) => {
                let order = if O::RUNS { order } else { 0 };
                let len = 1u64 << order;
                let first = k & !(len - 1);
                let v = k.wrapping_mul(17).wrapping_add(i as u64);
                let expect = model.range(first..=first + (len - 1)).next().is_none();
                assert_eq!(
                    O::insert_run(&tree, first, order, v),
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
                assert_eq!(O::replace(&tree, k, v), found.is_some(), "replace {k}");
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
    let guard = tree.pin();
    for (k, e) in &model {
        assert_eq!(tree.get_cloned(*k), Some(e.value));
        assert_eq!(tree.get_copied(*k, &guard), Some(e.value));
        for t in 0..4u8 {
            assert_eq!(tree.get_tag(*k, Tag(t)), e.tags.contains(&t), "final tag {k} {t}");
        }
    }
    drop(guard);
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
        run::<Boxed>(Mode::Serial, &ops);
    }

    #[test]
    fn matches_model_lock_coupled(ops in proptest::collection::vec(op(), 1..200)) {
        run::<Boxed>(Mode::LockCoupled, &ops);
    }

    #[test]
    fn matches_model_optimistic(ops in proptest::collection::vec(op(), 1..200)) {
        run::<Boxed>(Mode::Optimistic, &ops);
    }

    #[test]
    fn inline_matches_model_serial(ops in proptest::collection::vec(op(), 1..200)) {
        run::<Inline>(Mode::Serial, &ops);
    }

    #[test]
    fn inline_matches_model_lock_coupled(ops in proptest::collection::vec(op(), 1..200)) {
        run::<Inline>(Mode::LockCoupled, &ops);
    }

    #[test]
    fn inline_matches_model_optimistic(ops in proptest::collection::vec(op(), 1..200)) {
        run::<Inline>(Mode::Optimistic, &ops);
    }

    /// Every integer type's bits convert back to the same value.
    #[test]
    fn words_round_trip(x in any::<i64>(), y in any::<u64>()) {
        prop_assert_eq!(i64::from_bits(x.to_bits()), x);
        prop_assert_eq!(i32::from_bits((x as i32).to_bits()), x as i32);
        prop_assert_eq!(i8::from_bits((x as i8).to_bits()), x as i8);
        prop_assert_eq!(u64::from_bits(y.to_bits()), y);
        prop_assert_eq!(u16::from_bits((y as u16).to_bits()), y as u16);
        prop_assert_eq!(usize::from_bits((y as usize).to_bits()), y as usize);
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
    use crate::sync::Arc;
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

/// Levels with a single child are skipped: two far-apart keys make a root
/// at the height of their common range with the two leaves right under it;
/// a key in between splits the skipped path at the height where it forks;
/// lookups beside a skipped child find nothing; removing keys shrinks the
/// root to the remaining leaf, wherever its range is.
#[test]
fn skips_levels() {
    let far = 1u64 << (SHIFT * 6);
    for mode in Mode::ALL {
        let tree = RadixTree::new(mode);
        tree.insert(far + 3, 1u32).unwrap();
        assert_eq!(tree.height(), 1, "{mode:?}: one key is one leaf, wherever it is");
        tree.insert(5, 2).unwrap();
        assert_eq!(tree.height(), 7, "{mode:?}: the lowest range holding 5 and {far}");
        assert_eq!(tree.node_count(), 3, "{mode:?}: the root and two leaves");
        // Beside both leaves, on their slots' paths: absent.
        for absent in [far, far + SLOTS as u64, 5 + SLOTS as u64, 1 << (SHIFT * 3)] {
            assert!(!tree.contains(absent), "{mode:?}: {absent}");
            assert!(!tree.remove(absent));
            assert!(!tree.set_tag(absent, Tag::DIRTY));
        }
        tree.check_invariants().unwrap();
        // Forks under the far leaf's slot at height 4.
        assert!(tree.set_tag(far + 3, Tag::DIRTY));
        tree.insert(far + (1 << (SHIFT * 3)), 3).unwrap();
        assert_eq!(tree.node_count(), 5, "{mode:?}: a split node and a third leaf");
        tree.check_invariants().unwrap();
        assert_eq!(tree.gang_keys(0, 10, None), vec![5, far + 3, far + (1 << (SHIFT * 3))]);
        assert_eq!(tree.gang_keys(far + 4, 10, None), vec![far + (1 << (SHIFT * 3))]);
        assert_eq!(tree.gang_keys(0, 10, Some(Tag::DIRTY)), vec![far + 3]);
        assert!(tree.clear_tag(far + 3, Tag::DIRTY));
        tree.check_invariants().unwrap();
        assert!(tree.remove(5));
        tree.check_invariants().unwrap();
        assert_eq!(tree.height(), 4, "{mode:?}: the split node is the root now");
        assert!(tree.remove(far + (1 << (SHIFT * 3))));
        assert_eq!(tree.height(), 1, "{mode:?}: shrinks to the far leaf");
        assert_eq!(tree.get_cloned(far + 3), Some(1));
        tree.check_invariants().unwrap();
    }
}

/// Inline trees keep values up to 2^63 - 1 in the slot and box larger ones;
/// both read back, replace, take and drop (the boxes are freed: run under
/// valgrind to see it), and signed values keep their sign.
#[test]
fn inline_values() {
    for mode in Mode::ALL {
        let tree: RadixTree<u64, Inline> = RadixTree::with_policy(mode);
        let values = [0, 1, (1 << 63) - 1, 1 << 63, u64::MAX];
        for (k, &v) in values.iter().enumerate() {
            tree.insert(k as u64, v).unwrap();
            assert_eq!(tree.insert(k as u64, 7), Err(7));
        }
        // Equal neighbours are separate entries (no runs in inline trees).
        tree.insert(10, 9).unwrap();
        tree.insert(11, 9).unwrap();
        assert!(tree.remove(10));
        assert_eq!(tree.get_cloned(11), Some(9), "{mode:?}");
        let guard = tree.pin();
        for (k, &v) in values.iter().enumerate() {
            assert_eq!(tree.get_copied(k as u64, &guard), Some(v), "{mode:?}");
        }
        drop(guard);
        assert_eq!(tree.replace(3, 5), Ok(()));
        assert_eq!(tree.replace(4, 1 << 62), Ok(()));
        assert_eq!(tree.take(3), Some(5));
        assert_eq!(tree.take(1), Some(1));
        assert_eq!(
            tree.gang_lookup(0, 10),
            vec![(0, 0), (2, (1 << 63) - 1), (4, 1 << 62), (11, 9)]
        );
        assert!(tree.remove_if(2, |v| *v == (1 << 63) - 1));
        tree.check_invariants().unwrap();
        tree.insert(1 << 40, u64::MAX).unwrap();
        drop(tree);

        let signed: RadixTree<i64, Inline> = RadixTree::with_policy(mode);
        for (k, v) in [(0, -1i64), (1, i64::MIN), (2, i64::MAX), (3, -(1 << 62))] {
            signed.insert(k, v).unwrap();
            assert_eq!(signed.get_cloned(k), Some(v));
        }
    }
}

/// In an inline tree, an index alone in an inner slot's range is kept in
/// that slot (no leaf); a second index in the range moves it into a node at
/// the height where the two fork (or into a leaf when they share one), with
/// its tags; a value too wide for the slot word gets a leaf; replacing and
/// removing work on entries wherever they are.
#[test]
fn lone_entries() {
    let far = 1u64 << (SHIFT * 6);
    for mode in Mode::ALL {
        let tree: RadixTree<u64, Inline> = RadixTree::with_policy(mode);
        tree.insert(5, 50).unwrap();
        assert_eq!(tree.node_count(), 1, "{mode:?}: the first key makes a leaf root");
        tree.insert(far + 3, 1).unwrap();
        assert_eq!(tree.node_count(), 2, "{mode:?}: a root over the leaf and a lone entry");
        assert!(tree.set_tag(far + 3, Tag::WRITEBACK));
        assert!(tree.get_tag(far + 3, Tag::WRITEBACK));
        assert!(!tree.contains(far + 4), "{mode:?}: beside the lone entry");
        tree.insert(far + (1 << (SHIFT * 3)), 2).unwrap();
        assert_eq!(
            tree.node_count(),
            3,
            "{mode:?}: the entry moved into a node with the new one"
        );
        tree.check_invariants().unwrap();
        assert!(
            tree.get_tag(far + 3, Tag::WRITEBACK),
            "{mode:?}: the moved entry keeps its tag"
        );
        tree.insert(far + 4, 3).unwrap();
        assert_eq!(
            tree.node_count(),
            4,
            "{mode:?}: two entries of one leaf range make a leaf"
        );
        tree.check_invariants().unwrap();
        assert!(tree.get_tag(far + 3, Tag::WRITEBACK));
        assert!(!tree.get_tag(far + 4, Tag::WRITEBACK));
        // A value too wide for a lone entry high up gets a leaf.
        tree.insert(far << 10, u64::MAX >> 2).unwrap();
        assert_eq!(
            tree.node_count(),
            6,
            "{mode:?}: a new root and a leaf for the wide value"
        );
        tree.check_invariants().unwrap();
        assert_eq!(
            tree.gang_lookup(0, 10),
            vec![
                (5, 50),
                (far + 3, 1),
                (far + 4, 3),
                (far + (1 << (SHIFT * 3)), 2),
                (far << 10, u64::MAX >> 2)
            ]
        );
        assert_eq!(tree.gang_keys(0, 10, Some(Tag::WRITEBACK)), vec![far + 3]);
        // Replace a lone entry by a wide value (it gets a leaf, with the tag)
        // and back.
        let lone = far + (1 << (SHIFT * 3));
        assert!(tree.set_tag(lone, Tag::DIRTY));
        tree.replace(lone, u64::MAX).unwrap();
        assert_eq!(tree.get_cloned(lone), Some(u64::MAX));
        assert!(
            tree.get_tag(lone, Tag::DIRTY),
            "{mode:?}: the leaf took the entry's tag"
        );
        tree.check_invariants().unwrap();
        tree.replace(lone, 7).unwrap();
        assert_eq!(tree.get_cloned(lone), Some(7));
        assert!(tree.clear_tag(lone, Tag::DIRTY));
        assert_eq!(tree.take(far << 10), Some(u64::MAX >> 2));
        assert!(tree.remove(5));
        tree.check_invariants().unwrap();
        for k in [far + 3, far + 4, lone] {
            assert!(tree.remove(k), "{mode:?}: {k}");
            tree.check_invariants().unwrap();
        }
        assert!(tree.is_empty());
    }
}

/// Items whose pointers carry a tag in the low bits their alignment leaves
/// free (as the page cache's folios carry their order and state, odd tags
/// included: bit 0 is an inline tree's value marker) keep it through
/// skipped levels, splits, growth and shrinking; lookups and gang lookups
/// dereference them with the tag stripped; `gang_runs` returns a run once;
/// `retag_with` rewrites every slot of a run; replacement, removal and the
/// tree's drop retire and free tagged items.
#[test]
fn tagged_pointers_across_skipped_levels() {
    use crate::sync::Arc;
    use crate::sync::epoch::Owned;

    /// A value and a counted owner, aligned as a folio is (six free bits).
    #[repr(align(64))]
    struct Item(u64, #[allow(dead_code)] Arc<()>);

    let far = 1u64 << (SHIFT * 5);
    let mid = far + (1 << (SHIFT * 2));
    for mode in Mode::ALL {
        // Items still in the tree when it drops hold `kept`; retired ones
        // (freed whenever the epoch collector gets to them) hold `gone`.
        let kept = Arc::new(());
        let gone = Arc::new(());
        let tree: RadixTree<Item> = RadixTree::new(mode);
        let put = |first: u64, order: u32, tag: usize, owner: &Arc<()>| {
            let item = Item(first, Arc::clone(owner));
            tree.insert_run_with(first, order, item, |v, g| Owned::new(v).into_shared(g).with_tag(tag))
                .is_ok()
        };
        // What a lock-free reader of index `k` finds: the item's value and
        // the slot's tag.
        let at = |k: u64| {
            let g = tree.raw_pin();
            let (leaf, s) = tree.find_leaf(k, &g)?;
            let item = leaf.item(s, &g);
            // SAFETY: read under `g`, which is still pinned.
            let v = unsafe { item.as_ref() }?.0;
            assert_eq!(tree.lookup(k, &g).map(|i| i.0), Some(v), "{mode:?}: lookup of {k}");
            Some((v, item.tag()))
        };
        assert!(put(0, 2, 0b1_0011, &gone), "{mode:?}");
        assert!(put(far, 3, 0b0_0101, &gone), "{mode:?}: grows over skipped levels");
        assert!(put(mid, 0, 0b1_1111, &kept), "{mode:?}: splits the far path");
        assert!(!put(far + 4, 0, 0b1, &gone), "{mode:?}: inside a run");
        tree.check_invariants().unwrap();
        assert!(tree.height() > 2, "{mode:?}: levels in between");
        for k in 0..4 {
            assert_eq!(at(k), Some((0, 0b1_0011)), "{mode:?}: {k}");
        }
        for k in far..far + 8 {
            assert_eq!(at(k), Some((far, 0b0_0101)), "{mode:?}: {k}");
        }
        assert_eq!(at(mid), Some((mid, 0b1_1111)), "{mode:?}");
        assert_eq!(at(4), None);
        assert_eq!(at(far + 8), None);
        {
            let g = tree.raw_pin();
            let runs: Vec<(u64, u64)> = tree.gang_runs(0, 10, None, &g).iter().map(|(k, v)| (*k, v.0)).collect();
            assert_eq!(runs, vec![(0, 0), (far, far), (mid, mid)], "{mode:?}");
            let from_inside: Vec<u64> = tree.gang_runs(far + 3, 10, None, &g).iter().map(|(k, _)| *k).collect();
            assert_eq!(
                from_inside,
                vec![far + 3, mid],
                "{mode:?}: a run from where the lookup enters it"
            );
            assert_eq!(tree.gang(0, 100, None, &g).len(), 4 + 8 + 1, "{mode:?}");
        }
        // The tag is rewritten in every slot of the run, the item kept.
        assert!(!tree.retag_with(far + 5, |_| false, 0b1), "{mode:?}: refused");
        assert!(tree.retag_with(far + 5, |v| v.0 == far, 0b0_1010), "{mode:?}");
        for k in far..far + 8 {
            assert_eq!(at(k), Some((far, 0b0_1010)), "{mode:?}: {k}");
        }
        assert!(!tree.retag_with(far + 8, |_| true, 0b1), "{mode:?}: no item");
        // A replacement of a tagged item by another, differently tagged.
        let new = Item(0, Arc::clone(&kept));
        let replaced = tree.replace_with(
            2,
            |v| v.0 == 0,
            new,
            |v, g| Owned::new(v).into_shared(g).with_tag(0b0_0001),
        );
        assert!(replaced.is_ok(), "{mode:?}");
        assert_eq!(at(3), Some((0, 0b0_0001)), "{mode:?}");
        tree.set_tag(mid, Tag::DIRTY);
        assert_eq!(tree.gang(0, 10, Some(Tag::DIRTY.idx()), &tree.raw_pin()).len(), 1);
        // Removing the run retires it; the tree shrinks past the skipped levels.
        assert!(tree.remove(far + 1), "{mode:?}");
        assert_eq!(at(far), None);
        tree.check_invariants().unwrap();
        assert_eq!(at(mid), Some((mid, 0b1_1111)), "{mode:?}");
        assert_eq!(tree.len(), 4 + 1);
        // Dropping the tree frees what is left, each item once.
        drop(tree);
        assert_eq!(Arc::strong_count(&kept), 1, "{mode:?}: items left in the tree freed");
    }
}
