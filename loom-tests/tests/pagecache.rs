#![cfg(rcufs_loom)]
//! loom models of the protocols of `pagecache` (seed 002, "A Concurrent
//! Pagecache"): ladder locking (two inserts in one leaf, in sibling leaves),
//! growing and shrinking against lock-free lookups, path locking of
//! set-tag against clear-tag on siblings, an optimistic start whose
//! validation fails, a gang lookup against a remove, and the page cache's
//! speculative reference against removal, copy-on-write and fill-once,
//! and the retirement of an emptied inode entry against a fill; the
//! multi-index runs of folios (insert against insert inside, removal
//! against removal in one leaf); and the folio protocols: a reference-less
//! copy against the fill of a folio (the ready tag published after the
//! bytes), against a copy-on-write replacement, a held folio slice against
//! a write, a folio slice against a removal, a drop against a
//! copy-on-write write, and write-through against a racing fill. For the
//! skipped levels: a split against a set-tag walker and against lookups, a
//! root shrinking to a far child against an optimistic insert; inline
//! values replaced and removed under readers, and a lone entry moved into
//! a node against a set-tag on it.
//!
//! Under `rcufs_loom` a node has 4 slots, so small keys build deep trees:
//! a leaf covers 4 keys, a height-2 tree 16, height 3 64. Each tree or cache
//! owns a fresh epoch collector, so nothing persists across iterations.

use std::sync::atomic::{AtomicBool, Ordering};

use loom::sync::Arc;
use loom::thread;
use pagecache::radix::Inline;
use pagecache::{Config, FillOrder, Mode, PageCache, RadixTree, Tag};

/// Runs a model with room for the long execution paths of an epoch pin
/// plus a tree walk (loom's default of 1000 branches is too few).
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    b.check(f);
}

fn tree(mode: Mode, keys: &[u64]) -> Arc<RadixTree<u64>> {
    let t = RadixTree::new(mode);
    for &k in keys {
        t.insert(k, k * 10).unwrap();
    }
    Arc::new(t)
}

#[track_caller]
fn check(t: &RadixTree<u64>, present: &[u64], absent: &[u64]) {
    t.check_invariants().unwrap();
    for &k in present {
        assert_eq!(t.get_cloned(k), Some(k * 10), "key {k} lost");
    }
    for &k in absent {
        assert_eq!(t.get_cloned(k), None, "key {k} still there");
    }
}

/// Two inserts race in one leaf of an empty tree (both may create the root).
#[test]
fn ladder_two_inserts_same_leaf() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t = tree(mode, &[]);
            let t2 = t.clone();
            let h = thread::spawn(move || t2.insert(0, 0).unwrap());
            t.insert(1, 10).unwrap();
            h.join().unwrap();
            check(&t, &[0, 1], &[]);
        });
    }
}

/// Two inserts race to create sibling leaves under one parent.
#[test]
fn ladder_two_inserts_sibling_leaves() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t = tree(mode, &[15]);
            let t2 = t.clone();
            let h = thread::spawn(move || t2.insert(4, 40).unwrap());
            t.insert(8, 80).unwrap();
            h.join().unwrap();
            check(&t, &[4, 8, 15], &[]);
            assert_eq!(t.height(), 2);
        });
    }
}

/// An insert that grows the tree by two levels against lock-free lookups:
/// the old key is always found, the gang lookup sees a prefix-consistent
/// result.
#[test]
fn grow_vs_lookup() {
    model(|| {
        let t = tree(Mode::LockCoupled, &[1]);
        let t2 = t.clone();
        let h = thread::spawn(move || t2.insert(20, 200).unwrap());
        assert_eq!(t.get_cloned(1), Some(10));
        let g = t.gang_lookup(0, 4);
        assert!(g == vec![(1, 10)] || g == vec![(1, 10), (20, 200)], "{g:?}");
        h.join().unwrap();
        check(&t, &[1, 20], &[]);
        assert_eq!(t.height(), 3);
    });
}

/// A remove that shrinks the tree from height 3 to 1 against lookups: the
/// remaining key is always found through the old or the new root.
#[test]
fn shrink_vs_lookup() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t = tree(mode, &[1, 20]);
            let t2 = t.clone();
            let h = thread::spawn(move || assert!(t2.remove(20)));
            assert_eq!(t.get_cloned(1), Some(10));
            h.join().unwrap();
            check(&t, &[1], &[20]);
            assert_eq!(t.height(), 1);
        });
    }
}

/// Clear-tag (path locking, walking up) against set-tag (ladder, walking
/// down) on entries in sibling leaves: the shared parent's bitmap must be
/// right at the end.
#[test]
fn set_tag_vs_clear_tag_siblings() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t = tree(mode, &[0, 4]);
            assert!(t.set_tag(0, Tag::DIRTY));
            let t2 = t.clone();
            let h = thread::spawn(move || assert!(t2.set_tag(4, Tag::DIRTY)));
            assert!(t.clear_tag(0, Tag::DIRTY));
            h.join().unwrap();
            check(&t, &[0, 4], &[]);
            assert!(!t.get_tag(0, Tag::DIRTY));
            assert!(t.get_tag(4, Tag::DIRTY));
            assert_eq!(t.gang_keys(0, 8, Some(Tag::DIRTY)), vec![4]);
        });
    }
}

static SAW_FAILED_VALIDATION: AtomicBool = AtomicBool::new(false);

/// An optimistic insert locks the leaf it found without locks while a
/// concurrent remove empties and unlinks that leaf: in some interleavings
/// the validation (leaf dead) fails and the insert restarts from the root.
#[test]
fn optimistic_validation_fails() {
    model(|| {
        let t = tree(Mode::Optimistic, &[5, 9]);
        let t2 = t.clone();
        let h = thread::spawn(move || assert!(t2.remove(5)));
        t.insert(6, 60).unwrap();
        h.join().unwrap();
        check(&t, &[6, 9], &[5]);
        if t.failed_validations() > 0 {
            SAW_FAILED_VALIDATION.store(true, Ordering::Relaxed);
        }
    });
    assert!(
        SAW_FAILED_VALIDATION.load(Ordering::Relaxed),
        "no interleaving failed the validation"
    );
}

/// A gang lookup against a remove of a middle entry: the others are always
/// returned, in order.
#[test]
fn gang_lookup_vs_remove() {
    model(|| {
        let t = tree(Mode::LockCoupled, &[1, 5, 9]);
        let t2 = t.clone();
        let h = thread::spawn(move || assert!(t2.remove(5)));
        let g: Vec<u64> = t.gang_lookup(0, 8).into_iter().map(|(k, _)| k).collect();
        assert!(g == vec![1, 5, 9] || g == vec![1, 9], "{g:?}");
        h.join().unwrap();
        check(&t, &[1, 9], &[5]);
    });
}

/// Two removals in one leaf: a multi-index entry (slots 0 and 1) and the
/// leaf's other entry (slot 2). Whichever goes second empties the leaf,
/// which must then be unlinked: an optimistic removal may start at the leaf
/// only if the leaf keeps an entry outside the whole run it removes, and
/// must re-check that under the leaf's lock. (Key 5, in a sibling leaf,
/// keeps the tree at height 2, so the emptied leaf is not the root.)
#[test]
fn run_remove_vs_remove_same_leaf() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t = tree(mode, &[2, 5]);
            t.insert_run(0, 1, 0).unwrap();
            let t2 = t.clone();
            let h = thread::spawn(move || assert!(t2.remove(2)));
            assert!(t.remove(1));
            h.join().unwrap();
            // `check` runs `check_invariants`: no empty leaf stays linked.
            check(&t, &[5], &[0, 1, 2]);
        });
    }
}

/// A multi-index entry (indexes 2 and 3) races with a single insert at its
/// second index: exactly one wins, each thread's lookups find the winner's
/// value or nothing, and the leaf holds exactly the winner.
#[test]
fn run_insert_vs_insert_inside() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t = tree(mode, &[0]);
            let t2 = t.clone();
            let h = thread::spawn(move || {
                let won = t2.insert_run(2, 1, 9).is_ok();
                let v = t2.get_cloned(3);
                assert!(v == Some(30) || (won && v == Some(9)), "{v:?}");
                won
            });
            let single = t.insert(3, 30).is_ok();
            let v = t.get_cloned(2);
            assert!(v.is_none() || v == Some(9), "{v:?}");
            let run = h.join().unwrap();
            assert!(run != single, "run {run}, single {single}");
            if run {
                check(&t, &[0], &[]);
                assert_eq!((t.get_cloned(2), t.get_cloned(3)), (Some(9), Some(9)));
            } else {
                check(&t, &[0, 3], &[2]);
            }
        });
    }
}

/// A split against a set-tag walker. Keys 0 and 48 make a root of height 3
/// whose slot 0 holds the leaf of 0..=3 directly (height 2 skipped).
/// `set_tag(0)` walks root → leaf with ladder locking, setting the root's
/// bit before the leaf's; `insert(4)` misses that leaf's range under slot 0
/// and splits: a new node of height 2 takes the leaf and a leaf for 4. The
/// new node's bit for the old leaf is copied from the leaf's tags, which a
/// walker that passed the root may still be about to set: the split locks
/// the leaf to wait it out. Lookups of 0 and 4 during the split see the key
/// or (for 4) nothing, never another key's value through a leaf beside the
/// path.
#[test]
fn split_vs_set_tag() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t = tree(mode, &[0, 48]);
            let t2 = t.clone();
            let h = thread::spawn(move || {
                t2.insert(4, 40).unwrap();
                assert_eq!(t2.get_cloned(0), Some(0));
            });
            assert!(t.set_tag(0, Tag::DIRTY));
            let v = t.get_cloned(4);
            assert!(v.is_none() || v == Some(40), "{v:?}");
            h.join().unwrap();
            check(&t, &[0, 4, 48], &[]);
            assert_eq!(t.gang_keys(0, 8, Some(Tag::DIRTY)), vec![0]);
            assert_eq!(t.node_count(), 5, "the root, the split node and three leaves");
        });
    }
}

/// A removal that leaves the root one child in its last slot (keys 1 and
/// 60: the root of height 3 holds the leaves of 0..=3 and 60..=63 directly)
/// makes that leaf the root, while an optimistic insert of 20 descends the
/// old root, finds slot 1 empty, and locks the old root to put a leaf
/// there. If the shrink won, the old root is dead and the insert must start
/// again from the new root (growing it back); the key must never land in
/// the unlinked old root.
#[test]
fn shrink_to_far_child_vs_insert() {
    model(|| {
        let t = tree(Mode::Optimistic, &[1, 60]);
        let t2 = t.clone();
        let h = thread::spawn(move || assert!(t2.remove(1)));
        t.insert(20, 200).unwrap();
        assert_eq!(t.get_cloned(60), Some(600));
        h.join().unwrap();
        check(&t, &[20, 60], &[1]);
    });
}

/// Inline values: a replacement (an inline value by a boxed one, 2^63 does
/// not fit the word) and a removal against readers, which see the old
/// value, the new one or nothing after the removal; equal values in
/// adjacent slots are separate entries, so removing one keeps the other.
#[test]
fn inline_replace_remove_vs_get() {
    model(|| {
        let t: Arc<RadixTree<u64, Inline>> = Arc::new(RadixTree::with_policy(Mode::Optimistic));
        for k in 1..=3 {
            t.insert(k, 10).unwrap();
        }
        let t2 = t.clone();
        let h = thread::spawn(move || {
            t2.replace(1, 1 << 63).unwrap();
            assert!(t2.remove(2));
        });
        let v = t.get_cloned(1);
        assert!(v == Some(10) || v == Some(1 << 63), "{v:?}");
        let w = t.get_cloned(2);
        assert!(w == Some(10) || w.is_none(), "{w:?}");
        assert_eq!(t.get_cloned(3), Some(10));
        h.join().unwrap();
        assert_eq!(t.get_cloned(1), Some(1 << 63));
        assert_eq!(t.get_cloned(2), None);
        assert_eq!(t.get_cloned(3), Some(10));
        t.check_invariants().unwrap();
    });
}

/// A lone entry (key 48, kept in the root's slot 3: keys 0 and 48 make a
/// root of height 3 with a leaf in slot 0) is moved into a new node when
/// key 52 arrives in the same slot's range, while another thread tags it
/// and looks both up: the entry is always found, with its value, and keeps
/// its tag whichever goes first (the move copies the slot's bits to the
/// entry's new slot, under the same lock the tagger needs).
#[test]
fn lone_expand_vs_set_tag() {
    for mode in [Mode::LockCoupled, Mode::Optimistic] {
        model(move || {
            let t: Arc<RadixTree<u64, Inline>> = Arc::new(RadixTree::with_policy(mode));
            t.insert(0, 1).unwrap();
            t.insert(48, 2).unwrap();
            let t2 = t.clone();
            let h = thread::spawn(move || t2.insert(52, 3).unwrap());
            assert!(t.set_tag(48, Tag::DIRTY));
            assert_eq!(t.get_cloned(48), Some(2));
            let v = t.get_cloned(52);
            assert!(v.is_none() || v == Some(3), "{v:?}");
            h.join().unwrap();
            t.check_invariants().unwrap();
            assert_eq!(t.gang_lookup(0, 8), vec![(0, 1), (48, 2), (52, 3)]);
            assert_eq!(t.gang_keys(0, 8, Some(Tag::DIRTY)), vec![48]);
            assert_eq!(t.node_count(), 3, "the root, the leaf of 0 and the node of 48 and 52");
        });
    }
}

fn small_cache() -> Arc<PageCache> {
    let c = PageCache::new(Config {
        budget_bytes: 1 << 10,
        page_size: 8,
        mode: Mode::LockCoupled,
    });
    c.get_or_fill(1, 0, |b| {
        b.fill(7);
        Ok::<_, ()>(8)
    })
    .unwrap();
    Arc::new(c)
}

/// A speculative reference against the page's removal: the reader gets the
/// whole page or nothing, a page it got stays readable after the removal,
/// and after the removal nobody finds it.
#[test]
fn speculative_ref_vs_removal() {
    model(|| {
        let c = small_cache();
        let c2 = c.clone();
        let h = thread::spawn(move || assert_eq!(c2.drop_range(1, 0, 0).pages, 1));
        let got = c.get(1, 0);
        h.join().unwrap();
        if let Some(r) = got {
            assert_eq!(&*r, &[7u8; 8]);
        }
        assert!(c.get(1, 0).is_none());
        c.check_invariants().unwrap();
    });
}

/// A speculative reference against an in-place write: the reader sees the
/// old page or the new one, never a mix, and a page it holds never changes.
#[test]
fn speculative_ref_vs_write() {
    model(|| {
        let c = small_cache();
        let c2 = c.clone();
        let h = thread::spawn(move || c2.write(1, 0, &[9, 9, 9, 9, 9, 9, 9, 9]));
        let got = c.get(1, 0);
        if let Some(r) = &got {
            assert!(**r == [7u8; 8] || **r == [9u8; 8], "{:?}", &**r);
        }
        let before = got.as_ref().map(|r| r.to_vec());
        h.join().unwrap();
        if let Some(r) = got {
            assert_eq!(Some(r.to_vec()), before, "a held page changed");
        }
        if let Some(r) = c.get(1, 0) {
            assert_eq!(&*r, &[9u8; 8]);
        }
        c.check_invariants().unwrap();
    });
}

/// Two threads miss the same page: one fill, both see its bytes.
#[test]
fn fill_once() {
    model(|| {
        let c = small_cache(); // inode 1 exists: the model is about the page, not the inode map
        let fills = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let (c2, f2) = (c.clone(), fills.clone());
        let fill = move |f: &loom::sync::atomic::AtomicUsize, b: &mut [u8]| {
            f.fetch_add(1, Ordering::Relaxed);
            b.fill(3);
            Ok::<_, ()>(8)
        };
        let h = thread::spawn(move || c2.get_or_fill(1, 1, |b| fill(&f2, b)).unwrap().to_vec());
        let mine = c.get_or_fill(1, 1, |b| fill(&fills, b)).unwrap().to_vec();
        assert_eq!(h.join().unwrap(), mine);
        assert_eq!(mine, vec![3u8; 8]);
        assert_eq!(fills.load(Ordering::Relaxed), 1);
    });
}

/// The last page of an inode is dropped (which takes the emptied entry out
/// of the inode map: close the gate if idle, re-check emptiness, unlink)
/// while another thread fills a second page of the same inode. The fill
/// must land in an entry that stays in the map, or retry into a new entry,
/// or (when the drop's invalidation made it stale) leave the cache; never
/// stay in an entry that left the map, which would leak a page nobody can
/// find while the byte count still includes it (`check_invariants`
/// compares the two).
#[test]
fn retire_empty_inode_vs_fill() {
    model(|| {
        let c = small_cache();
        let c2 = c.clone();
        let h = thread::spawn(move || assert_eq!(c2.drop_range(1, 0, 0).pages, 1));
        let r = c
            .get_or_fill(1, 1, |b| {
                b.fill(5);
                Ok::<_, ()>(8)
            })
            .unwrap();
        assert_eq!(&*r, &[5u8; 8]);
        h.join().unwrap();
        c.check_invariants().unwrap();
        assert!(c.get(1, 0).is_none());
        let cached = c.get(1, 1).is_some();
        assert_eq!(c.stats().pages, u64::from(cached));
        assert_eq!(c.inode_count(), usize::from(cached), "an entry without pages stayed");
        drop(r);
        assert_eq!(c.drop_range(1, 1, 1).pages, u64::from(cached));
        assert_eq!(c.inode_count(), 0, "the emptied entry left the map");
    });
}

/// A ranged read of two pages (consecutive slots of one leaf, the second
/// read without a new descent) against an in-place write of both: each page
/// of the result is all old or all new bytes, never a mix, and a page the
/// reader had to fill comes from the backing store (the new bytes).
#[test]
fn read_into_vs_write() {
    model(|| {
        let c = small_cache();
        c.get_or_fill(1, 1, |b| {
            b.fill(7);
            Ok::<_, ()>(8)
        })
        .unwrap();
        let c2 = c.clone();
        let h = thread::spawn(move || c2.write(1, 0, &[9; 16]));
        let mut buf = [0u8; 16];
        let n = c
            .read_into(1, 0, &mut buf, |_, b| {
                b.fill(9);
                Ok::<_, ()>(8)
            })
            .unwrap();
        assert_eq!(n, 16);
        for page in buf.chunks(8) {
            assert!(page == [7; 8] || page == [9; 8], "torn page {page:?}");
        }
        h.join().unwrap();
        c.check_invariants().unwrap();
    });
}

/// A cache holding inode 1's page 0 (sevens) and, for the folio models, a
/// folio of two pages at indexes 2 and 3 (eights).
fn folio_cache() -> Arc<PageCache> {
    let c = small_cache();
    c.get_or_fill_folio(1, 2, 1, |first, b| {
        assert_eq!((first, b.len()), (2, 16));
        b.fill(8);
        Ok::<_, ()>(16)
    })
    .unwrap();
    c
}

/// The fill of a two-page folio against a reference-less copy of its
/// second page (`read_range_into`, which takes no reference and reads
/// readiness from the slot's tag): the copy sees the filled bytes or fills
/// the page itself, never the bytes being written. Under loom the folio's
/// bytes are a tracked cell: a copy not ordered after the filler's writes
/// (by the ready tag's Release store and the reader's Acquire load) fails
/// the model.
#[test]
fn folio_fill_vs_copy() {
    model(|| {
        let c = small_cache();
        let c2 = c.clone();
        // The reader is the spawned thread: the interleaving that matters
        // (the filler preempted right after its insert) then takes one
        // preemption, well within the bound.
        let h = thread::spawn(move || {
            let mut out = Vec::new();
            let n = c2
                .read_range_into(1, 24, 8, &mut out, FillOrder::Order(0), |_, b| {
                    b.fill(3);
                    Ok::<_, ()>(b.len())
                })
                .unwrap();
            assert_eq!((n, &out[..]), (8, &[3u8; 8][..]));
        });
        let p = c
            .get_or_fill_folio(1, 2, 1, |_, b| {
                b.fill(3);
                Ok::<_, ()>(b.len())
            })
            .unwrap();
        assert_eq!(&*p, &[3u8; 8]);
        h.join().unwrap();
        c.check_invariants().unwrap();
    });
}

/// A copy-on-write write of a folio nobody holds against a
/// reference-less copy of it: the copy is all old or all new bytes (one
/// folio, replaced at once in both slots, and its bytes never written once
/// published: under loom a copy racing a write of them fails the model),
/// and afterwards the cache holds the new ones.
#[test]
fn cow_write_vs_copy() {
    model(|| {
        let c = folio_cache();
        let c2 = c.clone();
        let h = thread::spawn(move || {
            let mut out = Vec::new();
            c2.read_range_into(1, 16, 16, &mut out, FillOrder::Order(0), |_, b| {
                b.fill(9);
                Ok::<_, ()>(b.len())
            })
            .unwrap();
            assert!(out == [8; 16] || out == [9; 16], "torn folio {out:?}");
        });
        c.write(1, 16, &[9; 16]);
        h.join().unwrap();
        assert_eq!(&*c.get(1, 3).expect("replaced, not dropped"), &[9u8; 8]);
        c.check_invariants().unwrap();
    });
}

/// Two copy-on-write writes to the two pages of one folio at once (the
/// filesystem's range locks are per page, so its writers of different
/// pages of a folio do not exclude each other): afterwards the cache holds
/// both writes. A write whose replacement lost to the other's copy writes
/// into that copy; when it gave up instead, the cache kept the other's copy,
/// with the old bytes where it wrote (stale bytes read back through the
/// mount, found by a mount test of concurrent writers and truncates).
#[test]
fn cow_write_vs_cow_write_same_folio() {
    model(|| {
        let c = folio_cache();
        let c2 = c.clone();
        let h = thread::spawn(move || c2.write(1, 16, &[5; 8]));
        c.write(1, 24, &[6; 8]);
        h.join().unwrap();
        let (a, b) = (c.get(1, 2), c.get(1, 3));
        assert_eq!(a.is_some(), b.is_some(), "half of a folio cached");
        if let (Some(a), Some(b)) = (a, b) {
            assert_eq!((&*a, &*b), (&[5u8; 8][..], &[6u8; 8][..]), "a write lost in the cache");
        }
        c.check_invariants().unwrap();
    });
}

/// A write over a folio a reader holds (a folio slice, as a zero-copy
/// reply keeps until its write returns): the folio is dropped, and the
/// slice keeps its bytes.
#[test]
fn write_vs_held_slice() {
    model(|| {
        let c = folio_cache();
        let mut held = Vec::new();
        c.read_refs(1, 16, 16, FillOrder::Order(0), &mut held, |_, _| Err::<usize, ()>(()))
            .unwrap();
        let c2 = c.clone();
        let h = thread::spawn(move || c2.write(1, 16, &[9; 16]));
        let bytes: Vec<u8> = held.iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(bytes, vec![8u8; 16], "a held slice changed");
        h.join().unwrap();
        drop(held);
        assert!(c.get(1, 2).is_none(), "a held folio is dropped, not replaced");
        c.check_invariants().unwrap();
    });
}

/// A drop of a folio (an invalidation: the source changed) against a
/// copy-on-write write of it: whichever way they interleave, nothing of
/// the folio stays cached (a write that replaced the folio first has its
/// copy removed by the drop, which retries on the replacement; a drop that
/// claimed the folio first makes the replacement fail).
#[test]
fn drop_vs_cow_write() {
    model(|| {
        let c = folio_cache();
        let c2 = c.clone();
        let h = thread::spawn(move || {
            c2.drop_range(1, 2, 2);
        });
        c.write(1, 16, &[9; 8]);
        h.join().unwrap();
        assert!(
            c.get(1, 2).is_none() && c.get(1, 3).is_none(),
            "the folio outlived the drop"
        );
        c.check_invariants().unwrap();
    });
}

/// Write-through against a fill of the same pages: the source is written
/// (nines) before `write_through`, a fill reads the source at some point
/// (sevens before the write, nines after). Each page a reader gets is one
/// or the other, and once both are done the cache holds only nines: a fill
/// that read the source before the write is not kept.
#[test]
fn write_through_vs_fill() {
    model(|| {
        let c = small_cache();
        let written = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (c2, w2) = (c.clone(), written.clone());
        let h = thread::spawn(move || {
            w2.store(true, Ordering::SeqCst);
            c2.write_through(1, 16, &[9; 16], None);
        });
        let mut out = Vec::new();
        c.read_range_into(1, 16, 16, &mut out, FillOrder::Order(1), |_, b| {
            b.fill(if written.load(Ordering::SeqCst) { 9 } else { 7 });
            Ok::<_, ()>(b.len())
        })
        .unwrap();
        for page in out.chunks(8) {
            assert!(page == [7; 8] || page == [9; 8], "torn page {page:?}");
        }
        h.join().unwrap();
        for i in [2, 3] {
            if let Some(p) = c.get(1, i) {
                assert_eq!(&*p, &[9u8; 8], "a stale fill stayed cached at {i}");
            }
        }
        c.check_invariants().unwrap();
    });
}

/// Folio slices (`read_refs`, one speculative reference per folio) against
/// the folio's removal: the slices hold the whole folio's bytes (the old
/// folio's, or a refill's if the removal came first) and stay readable
/// after the removal.
#[test]
fn folio_slice_vs_removal() {
    model(|| {
        let c = folio_cache();
        let c2 = c.clone();
        let h = thread::spawn(move || assert_eq!(c2.drop_range(1, 3, 3).pages, 2));
        let mut slices = Vec::new();
        let n = c
            .read_refs(1, 16, 16, FillOrder::Order(0), &mut slices, |_, b| {
                b.fill(8);
                Ok::<_, ()>(b.len())
            })
            .unwrap();
        assert_eq!(n, 16);
        h.join().unwrap();
        let bytes: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(bytes, vec![8u8; 16]);
        drop(slices);
        c.check_invariants().unwrap();
    });
}
