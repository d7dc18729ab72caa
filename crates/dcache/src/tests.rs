//! Unit tests of the single-threaded behaviour of every operation.

use crate::{Config, Dcache, Dentry, DropStats, Lookup, Walk};

fn cache() -> Dcache<u32> {
    Dcache::new(Config::default(), 0)
}

#[track_caller]
fn check_lookup(c: &Dcache<u32>, parent: &Dentry<u32>, name: &str, expected: Option<Option<u32>>) {
    let got = match c.lookup(parent, name.as_bytes()) {
        Lookup::Positive(d) => {
            assert!(d.is_hashed());
            assert_eq!(d.name(), name.as_bytes());
            Some(Some(*d.payload().expect("positive")))
        }
        Lookup::Negative => Some(None),
        Lookup::Miss => None,
    };
    assert_eq!(got, expected, "lookup of {name:?}");
    let with = c.lookup_with(parent, name.as_bytes(), |p| p.copied());
    assert_eq!(with, expected, "lookup_with of {name:?}");
    let pinned = c.pin();
    let r = pinned.lookup(parent, name.as_bytes()).map(|r| r.payload().copied());
    assert_eq!(r, expected, "pinned lookup of {name:?}");
}

#[test]
fn insert_then_lookup_positive_negative_and_miss() {
    let c = cache();
    let root = c.root();
    let a = c.insert(&root, b"a", Some(1));
    c.insert(&root, b"n", None);
    check_lookup(&c, &root, "a", Some(Some(1)));
    check_lookup(&c, &root, "n", Some(None));
    check_lookup(&c, &root, "zz", None);
    check_lookup(&c, &a, "a", None);
    assert_eq!(c.len(), 2);
    assert_eq!(c.negative_len(), 1);
    assert_eq!(a.parent().map(|p| p.id()), Some(root.id()));
    assert!(root.parent().is_none());
    assert!(root.name().is_empty());
}

#[test]
fn insert_keeps_existing_positive_and_replaces_negative() {
    let c = cache();
    let root = c.root();
    let first = c.insert(&root, b"x", Some(1));
    let second = c.insert(&root, b"x", Some(2));
    assert!(Dentry::ptr_eq(&first, &second));
    assert_eq!(second.payload(), Some(&1));
    assert_eq!(c.len(), 1);

    let neg = c.insert(&root, b"y", None);
    let neg2 = c.insert(&root, b"y", None);
    assert!(Dentry::ptr_eq(&neg, &neg2));
    let pos = c.insert(&root, b"y", Some(3));
    assert!(!neg.is_hashed());
    assert!(pos.is_hashed());
    check_lookup(&c, &root, "y", Some(Some(3)));
    drop((neg, neg2));
    assert_eq!(c.len(), 2);
    assert_eq!(c.negative_len(), 0);
}

#[test]
fn replace_unhashes_old_entry_and_its_subtree() {
    let c = cache();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let f = c.insert(&d, b"f", Some(2));
    let d2 = c.replace(&root, b"d", Some(10));
    assert!(!d.is_hashed());
    assert!(!f.is_hashed());
    check_lookup(&c, &root, "d", Some(Some(10)));
    check_lookup(&c, &d, "f", None);
    check_lookup(&c, &d2, "f", None);
    drop((d, f));
    assert_eq!(c.len(), 1);
}

#[test]
fn release_counts_the_entries_it_freed() {
    let c = cache();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let d2 = d.clone();
    // Cached: releasing the last handle keeps the entry.
    assert_eq!(d2.release(), 0);
    assert_eq!(d.clone().release(), 0);
    assert!(c.remove(&root, b"d"));
    let d2 = d.clone();
    // Unhashed but still held by `d2`.
    assert_eq!(d.release(), 0);
    assert_eq!(c.len(), 1);
    assert_eq!(d2.release(), 1, "the last handle of an unhashed entry frees it");
    assert_eq!(c.len(), 0);

    // A directory no longer cached, held only by its children, goes with
    // the last of them: both count.
    let a = c.insert(&root, b"a", Some(2));
    let b = c.insert(&a, b"b", Some(3));
    let x = c.insert(&b, b"x", Some(4));
    let y = c.insert(&b, b"y", Some(5));
    assert!(c.remove(&root, b"a"));
    assert_eq!(a.release(), 0, "held by its child");
    assert_eq!(b.release(), 0, "held by its children");
    assert_eq!(x.release(), 1);
    assert_eq!(c.len(), 3);
    assert_eq!(y.release(), 3, "y, then b, then a");
    assert_eq!(c.len(), 0);
}

#[test]
fn remove_drops_entry_and_subtree() {
    let c = cache();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let e = c.insert(&d, b"e", Some(2));
    c.insert(&e, b"f", Some(3));
    c.insert(&e, b"g", None);
    drop(e);
    assert!(c.remove(&root, b"d"));
    assert!(!c.remove(&root, b"d"));
    assert!(!d.is_hashed());
    check_lookup(&c, &root, "d", None);
    check_lookup(&c, &d, "e", None);
    // Everything but `d` (still held) is freed.
    assert_eq!(c.len(), 1);
    drop(d);
    assert_eq!(c.len(), 0);
    assert_eq!(c.stats().dropped, 4);
}

#[test]
fn insert_under_unhashed_parent_is_not_cached() {
    let c = cache();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    assert!(c.remove(&root, b"d"));
    let x = c.insert(&d, b"x", Some(2));
    assert!(!x.is_hashed());
    check_lookup(&c, &d, "x", None);
    drop((d, x));
    assert_eq!(c.len(), 0);
}

#[test]
fn rename_moves_subtree() {
    let c = cache();
    let root = c.root();
    let a = c.insert(&root, b"a", Some(1));
    let b = c.insert(&root, b"b", Some(2));
    let d = c.insert(&a, b"d", Some(3));
    c.insert(&d, b"f", Some(4));
    assert!(c.rename(&a, b"d", &b, b"e"));
    check_lookup(&c, &a, "d", None);
    check_lookup(&c, &b, "e", Some(Some(3)));
    check_lookup(&c, &d, "f", Some(Some(4)));
    assert_eq!(d.name(), b"e");
    assert_eq!(d.parent().map(|p| p.id()), Some(b.id()));
    match c.walk(&root, [&b"b"[..], b"e", b"f"]) {
        Walk::Found(f) => assert_eq!(f.payload(), Some(&4)),
        other => panic!("{other:?}"),
    }
    // Not cached: false.
    assert!(!c.rename(&a, b"d", &b, b"z"));
    // Into its own subtree: refused.
    assert!(!c.rename(&b, b"e", &d, b"loop"));
    check_lookup(&c, &b, "e", Some(Some(3)));
    // Same name: a no-op that succeeds.
    assert!(c.rename(&b, b"e", &b, b"e"));
    // Within one directory.
    assert!(c.rename(&b, b"e", &b, b"e2"));
    check_lookup(&c, &b, "e2", Some(Some(3)));
    check_lookup(&c, &b, "e", None);
    // Dropping `a` now leaves `d` alone.
    drop(a);
    assert_eq!(
        c.drop_subtree(&root, |&p| p == 1),
        DropStats {
            dropped: 1,
            busy: 0,
            skipped: 3
        }
    );
    check_lookup(&c, &b, "e2", Some(Some(3)));
}

#[test]
fn rename_over_cached_target_unhashes_it() {
    let c = cache();
    let root = c.root();
    let s = c.insert(&root, b"s", Some(1));
    let t = c.insert(&root, b"t", Some(2));
    let tc = c.insert(&t, b"child", Some(3));
    assert!(c.rename(&root, b"s", &root, b"t"));
    assert!(!t.is_hashed());
    assert!(!tc.is_hashed());
    assert!(s.is_hashed());
    check_lookup(&c, &root, "t", Some(Some(1)));
    check_lookup(&c, &root, "s", None);
}

#[test]
fn rename_of_negative_removes_it() {
    let c = cache();
    let root = c.root();
    c.insert(&root, b"n", None);
    assert!(!c.rename(&root, b"n", &root, b"m"));
    check_lookup(&c, &root, "n", None);
    check_lookup(&c, &root, "m", None);
    assert_eq!(c.len(), 0);
}

#[test]
fn rename_of_uncached_source_unhashes_the_target() {
    let c = cache();
    let root = c.root();
    // A stale positive target and a negative one that would hide the
    // renamed file: neither may survive a rename onto its name.
    let t = c.insert(&root, b"t", Some(2));
    c.insert(&root, b"n", None);
    assert!(!c.rename(&root, b"s", &root, b"t"));
    assert!(!t.is_hashed());
    check_lookup(&c, &root, "t", None);
    c.insert(&root, b"neg", None);
    assert!(!c.rename(&root, b"neg", &root, b"n"));
    check_lookup(&c, &root, "n", None);
    check_lookup(&c, &root, "neg", None);
}

#[test]
fn walk_reports_where_the_cached_path_ends() {
    let c = cache();
    let root = c.root();
    let a = c.insert(&root, b"a", Some(1));
    let b = c.insert(&a, b"b", Some(2));
    c.insert(&b, b"neg", None);
    match c.walk(&root, [&b"a"[..], b"b"]) {
        Walk::Found(d) => assert!(Dentry::ptr_eq(&d, &b)),
        other => panic!("{other:?}"),
    }
    match c.walk(&root, [&b"a"[..], b"x", b"y"]) {
        Walk::Miss { deepest, consumed } => {
            assert!(Dentry::ptr_eq(&deepest, &a));
            assert_eq!(consumed, 1);
        }
        other => panic!("{other:?}"),
    }
    match c.walk(&root, [&b"a"[..], b"b", b"neg", b"z"]) {
        Walk::Negative { parent, consumed } => {
            assert!(Dentry::ptr_eq(&parent, &b));
            assert_eq!(consumed, 2);
        }
        other => panic!("{other:?}"),
    }
    match c.walk(&root, std::iter::empty()) {
        Walk::Found(d) => assert!(Dentry::ptr_eq(&d, &root)),
        other => panic!("{other:?}"),
    }
}

/// A cache whose subtree drops work in batches of two children, so that
/// the tests' few children span several batches.
fn small_batches() -> Dcache<u32> {
    Dcache::new(
        Config {
            prune_batch: 2,
            ..Config::default()
        },
        0,
    )
}

/// A fenced entry is kept with everything below it, which the filter is
/// not asked about and the statistics do not count; its siblings' subtrees
/// are walked as before, and a fence below an entry the walk unhashed does
/// not hold.
#[test]
fn drop_subtree_with_a_fence_neither_walks_nor_counts_below_it() {
    use crate::Verdict;
    let c = small_batches();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let fenced = c.insert(&d, b"fenced", Some(2));
    let open = c.insert(&d, b"open", Some(3));
    let gone = c.insert(&d, b"gone", Some(4));
    for i in 0..5u32 {
        c.insert(&fenced, format!("f{i}").as_bytes(), Some(20 + i));
        c.insert(&open, format!("o{i}").as_bytes(), Some(30 + i));
    }
    c.insert(&fenced, b"neg", None);
    c.insert(&open, b"neg", None);
    // A fence under an entry that goes: dropped with its parent.
    let under_gone = c.insert(&gone, b"sub", Some(40));
    c.insert(&under_gone, b"leaf", Some(41));
    let mut asked = Vec::new();
    let s = c.drop_subtree_with(&d, |&p| {
        asked.push(p);
        match p {
            2 | 40 => Verdict::Fence,
            3 => Verdict::Keep,
            _ => Verdict::Drop,
        }
    });
    asked.sort_unstable();
    assert_eq!(
        asked,
        [2, 3, 4, 30, 31, 32, 33, 34],
        "asked below the fence, or not asked at all"
    );
    // Dropped: o0-o4, open's negative and leaf; busy (unhashed, held
    // here): gone and sub, whose fence was not asked about; skipped: the
    // fence and the kept entry, nothing below the fence.
    assert_eq!(
        s,
        DropStats {
            dropped: 7,
            busy: 2,
            skipped: 2
        }
    );
    drop((open, gone, under_gone));
    check_lookup(&c, &d, "fenced", Some(Some(2)));
    for i in 0..5u32 {
        check_lookup(&c, &fenced, &format!("f{i}"), Some(Some(20 + i)));
    }
    check_lookup(&c, &fenced, "neg", Some(None));
    let open = match c.lookup(&d, b"open") {
        Lookup::Positive(o) => o,
        other => panic!("open: {other:?}"),
    };
    check_lookup(&c, &open, "o0", None);
    check_lookup(&c, &open, "neg", None);
    check_lookup(&c, &d, "gone", None);
    drop(fenced);
}

/// The filter of `drop_subtree_under` is told each entry's parent, so a
/// pass that keeps everything can map the tree (the caller then keeps the
/// entries above a fence in the pass that drops).
#[test]
fn drop_subtree_under_tells_the_filter_each_parent() {
    use crate::Verdict;
    let c = small_batches();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let s = c.insert(&d, b"s", Some(2));
    let p = c.insert(&s, b"p", Some(3));
    c.insert(&p, b"x", Some(4));
    c.insert(&s, b"y", Some(5));
    c.insert(&d, b"z", Some(6));
    let mut seen = Vec::new();
    let stats = c.drop_subtree_under(&d, |&v, parent| {
        seen.push((v, parent.copied()));
        if v == 3 { Verdict::Fence } else { Verdict::Keep }
    });
    seen.sort_unstable();
    assert_eq!(seen, [(2, Some(1)), (3, Some(2)), (5, Some(2)), (6, Some(1))]);
    assert_eq!((stats.dropped, stats.busy, stats.skipped), (0, 0, 4));
    drop((s, p));
}

/// `drop_subtree_visiting` shows `gone` every payload it drops unasked
/// (below an entry the filter dropped), and the filter every other one:
/// together, each payload under the directory once.
#[test]
fn drop_subtree_visiting_shows_what_goes_unasked() {
    use crate::Verdict;
    let c = small_batches();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let s = c.insert(&d, b"s", Some(2));
    let p = c.insert(&s, b"p", Some(3));
    c.insert(&p, b"x", Some(4));
    c.insert(&p, b"neg", None);
    c.insert(&s, b"y", Some(5));
    c.insert(&d, b"z", Some(6));
    let (mut asked, mut unasked) = (Vec::new(), Vec::new());
    let stats = c.drop_subtree_visiting(
        &d,
        |&v, _| {
            asked.push(v);
            if v == 2 { Verdict::Drop } else { Verdict::Keep }
        },
        |&v| unasked.push(v),
    );
    asked.sort_unstable();
    unasked.sort_unstable();
    assert_eq!(asked, [2, 6]);
    assert_eq!(unasked, [3, 4, 5]);
    // s, p, x, y and the negative entry under p.
    assert_eq!(stats.dropped + stats.busy, 5);
    assert!(c.lookup_with(&d, b"s", |_| ()).is_none());
    drop((s, p));
}

#[test]
fn drop_subtree_counts_dropped_busy_and_skipped() {
    let c = small_batches();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let mut held = Vec::new();
    for i in 0..10u32 {
        let e = c.insert(&d, format!("f{i}").as_bytes(), Some(100 + i));
        if i % 3 == 0 {
            held.push(e);
        }
    }
    c.insert(&d, b"neg", None);
    // Keep payloads >= 105 (filter false), drop the rest and the negative.
    let s = c.drop_subtree(&d, |&p| p < 105);
    assert_eq!(
        s,
        DropStats {
            dropped: 4,
            busy: 2,
            skipped: 5
        }
    );
    assert!(d.is_hashed());
    for i in 0..10u32 {
        let expected = (i >= 5).then_some(Some(100 + i));
        check_lookup(&c, &d, &format!("f{i}"), expected);
    }
    check_lookup(&c, &d, "neg", None);
    drop(held);
    assert_eq!(c.len(), 6);
}

#[test]
fn capacity_prunes_unused_entries_only() {
    let c = Dcache::new(
        Config {
            max_entries: 16,
            max_negative: 4,
            prune_batch: 4,
        },
        0,
    );
    let root = c.root();
    let held: Vec<_> = (0..8u32)
        .map(|i| c.insert(&root, format!("held{i}").as_bytes(), Some(i)))
        .collect();
    for i in 0..100u32 {
        drop(c.insert(&root, format!("tmp{i}").as_bytes(), Some(i)));
    }
    assert!(c.len() <= 16 + 4, "len {}", c.len());
    for (i, h) in held.iter().enumerate() {
        assert!(h.is_hashed());
        check_lookup(&c, &root, &format!("held{i}"), Some(Some(i as u32)));
    }
    for i in 0..50u32 {
        c.insert(&root, format!("neg{i}").as_bytes(), None);
    }
    assert!(c.negative_len() <= 4 + 4, "negatives {}", c.negative_len());
    assert!(c.stats().evictions > 0);
    // In-use entries survive even an explicit prune of everything.
    c.prune(usize::MAX);
    assert_eq!(c.len(), 8);
    drop(held);
    assert_eq!(c.prune(usize::MAX), 8);
    assert_eq!(c.len(), 0);
}

#[test]
fn directories_with_cached_children_are_not_pruned() {
    let c = cache();
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    drop(c.insert(&d, b"f", Some(2)));
    drop(d);
    // Only `f` is unused; `d` is held by its child. Both are listed (an
    // insert lists its entry at once; one in use leaves lazily).
    assert_eq!(c.lru_len(), 2);
    // The pruner takes `d` off (in use) and evicts `f`.
    assert_eq!(c.prune(1), 1);
    // Now `d` is unused and on the LRU again.
    assert_eq!(c.lru_len(), 1);
    assert_eq!(c.prune(10), 1);
    assert_eq!(c.len(), 0);
}

#[test]
fn referenced_entries_get_a_second_chance() {
    // One LRU shard (see `policy_cache`), so that the two entries share it.
    let c = policy_cache();
    let root = c.root();
    drop(c.insert(&root, b"old", Some(1)));
    drop(c.insert(&root, b"new", Some(2)));
    // A hit on the oldest entry marks it; the pruner then skips it once.
    check_lookup(&c, &root, "old", Some(Some(1)));
    assert_eq!(c.prune(1), 1);
    check_lookup(&c, &root, "old", Some(Some(1)));
    check_lookup(&c, &root, "new", None);
}

#[test]
fn in_use_entries_leave_the_lru_lazily() {
    let c = cache();
    let root = c.root();
    drop(c.insert(&root, b"a", Some(1)));
    assert_eq!(c.lru_len(), 1);
    let a = match c.lookup(&root, b"a") {
        Lookup::Positive(a) => a,
        other => panic!("{other:?}"),
    };
    // The hit did not touch the list.
    assert_eq!(c.lru_len(), 1);
    assert_eq!(c.prune(1), 0);
    assert_eq!(c.lru_len(), 0);
    drop(a);
    assert_eq!(c.lru_len(), 1);
}

/// A cache of 100 entries: one LRU shard, whose probation queue keeps 10
/// before the pruner takes from it first.
fn policy_cache() -> Dcache<u32> {
    Dcache::new(
        Config {
            max_entries: 100,
            max_negative: 100,
            prune_batch: 64,
        },
        0,
    )
}

/// Inserts `prefix0` .. `prefix{n-1}` under `parent`, dropping the handles.
fn insert_unused(c: &Dcache<u32>, parent: &Dentry<u32>, prefix: &str, n: u32) {
    for i in 0..n {
        drop(c.insert(parent, format!("{prefix}{i}").as_bytes(), Some(i)));
    }
}

/// One borrowed hit (it raises the entry's frequency by one).
#[track_caller]
fn hit(c: &Dcache<u32>, parent: &Dentry<u32>, name: &str) {
    assert!(
        c.lookup_with(parent, name.as_bytes(), |_| ()).is_some(),
        "{name} cached"
    );
}

#[test]
fn probation_evicts_entries_without_hits_first() {
    let c = policy_cache();
    let root = c.root();
    insert_unused(&c, &root, "a", 10);
    insert_unused(&c, &root, "b", 30);
    for i in 0..10 {
        hit(&c, &root, &format!("a{i}"));
    }
    assert_eq!(c.policy_lens(), (40, 0, 0));
    // The probation queue is over its share: the pass moves the hit entries
    // at its head to the main queue and evicts the oldest ones without hits.
    assert_eq!(c.prune(10), 10);
    assert_eq!(c.policy_lens(), (20, 10, 0));
    for i in 0..10 {
        hit(&c, &root, &format!("a{i}"));
        assert!(c.lookup_with(&root, format!("b{i}").as_bytes(), |_| ()).is_none());
    }
    for i in 10..30 {
        hit(&c, &root, &format!("b{i}"));
    }
    c.assert_lists_consistent();
}

#[test]
fn an_entry_evicted_from_probation_comes_back_to_the_main_queue() {
    let c = policy_cache();
    let root = c.root();
    insert_unused(&c, &root, "x", 1);
    insert_unused(&c, &root, "f", 20);
    // `x` is the only entry evicted, so the ghost holds its fingerprint.
    assert_eq!(c.prune(1), 1);
    assert_eq!(c.policy_lens(), (20, 0, 0));
    drop(c.insert(&root, b"x0", Some(7)));
    assert_eq!(c.policy_lens(), (20, 1, 0));
    // Another new name goes on probation.
    drop(c.insert(&root, b"y", Some(8)));
    assert_eq!(c.policy_lens(), (21, 1, 0));
    c.assert_lists_consistent();
}

#[test]
fn an_entry_used_while_on_probation_goes_back_to_the_main_queue() {
    let c = policy_cache();
    let root = c.root();
    drop(c.insert(&root, b"u", Some(1)));
    let held = match c.lookup(&root, b"u") {
        Lookup::Positive(d) => d,
        other => panic!("{other:?}"),
    };
    insert_unused(&c, &root, "f", 20);
    // `u` is at the head of the probation queue and in use: the pass takes
    // it off (lazily) and evicts the next entry instead.
    assert_eq!(c.prune(1), 1);
    assert_eq!(c.policy_lens(), (19, 0, 0));
    drop(held);
    assert_eq!(c.policy_lens(), (19, 1, 0));
    hit(&c, &root, "u");
    c.assert_lists_consistent();
}

#[test]
fn the_main_queue_gives_hit_entries_more_laps() {
    let c = policy_cache();
    let root = c.root();
    insert_unused(&c, &root, "m", 2);
    hit(&c, &root, "m0");
    hit(&c, &root, "m1");
    insert_unused(&c, &root, "f", 10);
    // The probation queue (12) is over its share (10): m0 and m1 move to
    // the main queue, f0 goes.
    assert_eq!(c.prune(1), 1);
    assert_eq!(c.policy_lens(), (9, 2, 0));
    // Three more hits on m0 (the most the frequency keeps), one on m1.
    for _ in 0..3 {
        hit(&c, &root, "m0");
    }
    hit(&c, &root, "m1");
    // With the probation queue under its share, the pass takes from the
    // main queue: m1 is evicted on the second lap, m0 (frequency 3) only
    // after the pass has lowered it three times, so m1 goes first.
    assert_eq!(c.prune(1), 1);
    assert_eq!(c.policy_lens(), (9, 1, 0));
    assert!(c.lookup_with(&root, b"m1", |_| ()).is_none());
    hit(&c, &root, "m0");
    c.assert_lists_consistent();
}

#[test]
fn pinned_lookups_chain_without_counts() {
    let c = cache();
    let root = c.root();
    let a = c.insert(&root, b"a", Some(1));
    c.insert(&a, b"b", Some(2));
    let p = c.pin();
    let ra = p.lookup_in(p.root(), b"a").expect("a");
    let rb = p.lookup_in(ra, b"b").expect("b");
    assert_eq!(rb.payload(), Some(&2));
    assert_eq!(rb.name(), b"b");
    let owned = rb.to_dentry().expect("hashed");
    drop(p);
    assert_eq!(owned.payload(), Some(&2));
}

#[test]
fn stats_count_events() {
    let c = cache();
    let root = c.root();
    c.insert(&root, b"a", Some(1));
    c.insert(&root, b"n", None);
    let _ = c.lookup(&root, b"a");
    let _ = c.lookup(&root, b"n");
    let _ = c.lookup(&root, b"m");
    let s = c.stats();
    assert_eq!((s.hits, s.negative_hits, s.misses, s.inserts), (1, 1, 1, 2));
    assert_eq!((s.entries, s.negative_entries), (2, 1));
}

#[test]
fn handles_outlive_the_cache() {
    let c = cache();
    let root = c.root();
    let a = c.insert(&root, b"a", Some(7));
    drop(root);
    drop(c);
    assert!(!a.is_hashed());
    assert_eq!(a.payload(), Some(&7));
    let p = a.parent().expect("root lives while a child does");
    assert!(p.parent().is_none());
}

#[test]
#[should_panic(expected = "a handle from another cache")]
fn handles_of_another_cache_are_refused() {
    let c1 = cache();
    let c2 = cache();
    let r2 = c2.root();
    c1.insert(&r2, b"x", Some(1));
}

#[test]
fn config_is_normalized() {
    let c = Dcache::new(
        Config {
            max_entries: 0,
            max_negative: 10,
            prune_batch: usize::MAX,
        },
        0u32,
    );
    assert_eq!(
        c.config(),
        &Config {
            max_entries: 0,
            max_negative: 0,
            prune_batch: Config::MAX_BATCH
        }
    );
    assert!(c.buckets().is_power_of_two());
    let root = c.root();
    // Every insert prunes; entries in use stay.
    let held = c.insert(&root, b"a", Some(1));
    drop(c.insert(&root, b"b", Some(2)));
    drop(c.insert(&root, b"c", None));
    assert!(held.is_hashed());
    assert!(c.len() <= 2, "len {}", c.len());
    assert_eq!(c.drop_subtree(&root, |_| true).busy, 1);
}

/// Names on both sides of the inline-name limit of the key (and the empty
/// name): each is found under its own bytes only, keeps them through renames
/// between short and long names, and a long name differing from another only
/// past the limit is a different name.
#[test]
fn short_and_long_names_round_trip_through_insert_and_rename() {
    let limit = crate::node::INLINE_NAME;
    let c = cache();
    let root = c.root();
    let names: Vec<String> = [0, 1, limit - 1, limit, limit + 1, 3 * limit, 255]
        .iter()
        .map(|&n| "x".repeat(n))
        .collect();
    for (i, n) in names.iter().enumerate() {
        c.insert(&root, n.as_bytes(), Some(i as u32));
    }
    let twin = format!("{}y", "x".repeat(3 * limit - 1));
    c.insert(&root, twin.as_bytes(), Some(99));
    for (i, n) in names.iter().enumerate() {
        check_lookup(&c, &root, n, Some(Some(i as u32)));
    }
    check_lookup(&c, &root, &twin, Some(Some(99)));
    // Short to long and back; every other name stays as it was.
    let long = "z".repeat(limit + 5);
    assert!(c.rename(&root, names[2].as_bytes(), &root, long.as_bytes()));
    check_lookup(&c, &root, &names[2], None);
    check_lookup(&c, &root, &long, Some(Some(2)));
    assert!(c.rename(&root, long.as_bytes(), &root, b"s"));
    check_lookup(&c, &root, &long, None);
    check_lookup(&c, &root, "s", Some(Some(2)));
    for (i, n) in names.iter().enumerate().filter(|&(i, _)| i != 2) {
        check_lookup(&c, &root, n, Some(Some(i as u32)));
    }
    check_lookup(&c, &root, &twin, Some(Some(99)));
}

/// A walk of a long path (40 components) resolves them all, and reports a
/// miss past that point at the right component.
#[test]
fn walk_of_a_long_path_resolves_every_component() {
    let c = cache();
    let root = c.root();
    let names: Vec<Vec<u8>> = (0..40).map(|i| format!("d{i}").into_bytes()).collect();
    let mut d = root.clone();
    for (i, n) in names.iter().enumerate() {
        d = c.insert(&d, n, Some(i as u32));
    }
    match c.walk(&root, names.iter().map(Vec::as_slice)) {
        Walk::Found(f) => assert!(Dentry::ptr_eq(&f, &d)),
        other => panic!("{other:?}"),
    }
    let mut broken: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    broken[35] = b"absent";
    match c.walk(&root, broken) {
        Walk::Miss { deepest, consumed } => {
            assert_eq!(consumed, 35);
            assert_eq!(deepest.payload(), Some(&34));
        }
        other => panic!("{other:?}"),
    }
}

/// The hash as first defined, over the name's 8-byte chunks copied into
/// zero-padded words: the word-based hash must give the same value for
/// every length, inline or not, so that moving the name's words between
/// the probe and the hash changed no bucket.
fn reference_hash(seed: u64, parent: u64, name: &[u8]) -> u64 {
    const K1: u64 = 0x9E37_79B9_7F4A_7C15;
    const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    let mut h = seed;
    for c in name.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K2).rotate_left(29);
    }
    h ^= name.len() as u64;
    h ^= parent.wrapping_mul(K1);
    h ^= h >> 33;
    h = h.wrapping_mul(K1);
    h ^= h >> 29;
    h
}

#[test]
fn word_hash_matches_the_byte_hash_at_every_length() {
    let bytes: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
    for len in 0..bytes.len() {
        let name = &bytes[..len];
        for (seed, parent) in [(0, 0), (0x1234_5678_9abc_def0, 42), (u64::MAX, u64::MAX)] {
            let probe = crate::node::Probe::new(name);
            assert_eq!(
                crate::table::hash(seed, parent, &probe),
                reference_hash(seed, parent, name),
                "length {len}"
            );
        }
        if (1..8).contains(&len) {
            let mut w = [0u8; 8];
            w[..len].copy_from_slice(name);
            assert_eq!(
                crate::node::tail_word(name),
                u64::from_le_bytes(w),
                "tail of {len} bytes"
            );
        }
    }
}

#[test]
fn chains_stay_consistent_through_every_operation() {
    let c = Dcache::new(
        Config {
            max_entries: 64,
            ..Config::default()
        },
        0u32,
    );
    let root = c.root();
    let d = c.insert(&root, b"d", Some(1));
    let e = c.insert(&root, b"e", Some(2));
    for i in 0..200u32 {
        let name = format!("name-{i}-{}", "x".repeat((i % 40) as usize));
        c.insert(
            if i % 2 == 0 { &d } else { &e },
            name.as_bytes(),
            (i % 3 != 0).then_some(i),
        );
        if i % 5 == 0 {
            c.remove(&d, name.as_bytes());
        }
        if i % 7 == 0 {
            c.rename(&e, name.as_bytes(), &d, format!("moved-{i}").as_bytes());
        }
        c.assert_consistent();
        c.assert_lists_consistent();
    }
    c.drop_subtree(&d, |_| true);
    c.assert_consistent();
}

/// Names of every length up to past the inline words, each cached beside
/// names that differ from it in one byte, with every key in one chain: a
/// lookup and a walk find exactly the name asked for, whichever of the
/// name's words holds the difference.
#[test]
fn names_differing_in_one_byte_are_told_apart_at_every_length() {
    let c: Dcache<u32> = Dcache::with_colliding_hashes(Config::default(), 0);
    let root = c.root();
    let base: Vec<u8> = (0..48u8).map(|i| b'a' + i % 26).collect();
    for len in 1..base.len() {
        let name = &base[..len];
        let dir = c.insert(&root, format!("dir{len}").as_bytes(), Some(len as u32));
        for at in 0..len {
            let mut other = name.to_vec();
            other[at] = b'0';
            drop(c.insert(&dir, &other, Some(1000 + at as u32)));
        }
        drop(c.insert(&dir, name, Some(1)));
        for at in 0..len {
            let mut other = name.to_vec();
            other[at] = b'0';
            match c.lookup(&dir, &other) {
                Lookup::Positive(d) => assert_eq!(d.payload(), Some(&(1000 + at as u32)), "length {len}, byte {at}"),
                _ => panic!("length {len}, byte {at}: missed"),
            }
        }
        match c.walk(&root, [format!("dir{len}").as_bytes(), name]) {
            Walk::Found(d) => assert_eq!(d.payload(), Some(&1), "length {len}"),
            _ => panic!("length {len}: the walk missed"),
        }
        let mut longer = name.to_vec();
        longer.push(0);
        assert!(
            matches!(c.lookup(&dir, &longer), Lookup::Miss),
            "length {len} + a zero byte"
        );
    }
}
