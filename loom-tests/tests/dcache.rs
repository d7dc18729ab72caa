#![cfg(rcufs_loom)]
//! loom models of the concurrency protocols of `dcache` (one per protocol of
//! its issue): lookup against unhash and reclamation; the referenced bit and
//! reference count against pruning; two racing inserts of one name; rename
//! against lookup; a rename's in-place key change (under the node's
//! sequence count) against lookups of torn keys; subtree drop against an
//! insert under the dropped directory; rename against subtree drop; the
//! eviction policy's queues against lookups and removal; a prune batch's
//! release of its victims' parent against a lookup of that parent; a prune
//! batch's reclamation against a reference-free lookup of a victim; an
//! insert that lists its new entry while holding it against the pruner.
//!
//! Under `rcufs_loom` the cache has two hash buckets and a fixed hash seed,
//! and crossbeam-epoch runs on loom with a fresh default collector per
//! execution. Payloads carry a flag their `Drop` clears (a plain std atomic:
//! it is an observer, not part of the protocol), so a model can check that no
//! payload is freed while a handle or a pin can still reach it.
//!
//! The model names start with `dcache_` so that `cargo xtask loom dcache`
//! selects them.

use std::sync::Arc as StdArc;
use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering as StdOrdering};

use dcache::{Config, Dcache, Dentry, Lookup};
use loom::thread;

/// A payload that knows whether it has been dropped.
struct P {
    v: u32,
    alive: StdArc<StdAtomicBool>,
}

impl P {
    fn new(v: u32) -> (Self, StdArc<StdAtomicBool>) {
        let alive = StdArc::new(StdAtomicBool::new(true));
        (
            Self {
                v,
                alive: alive.clone(),
            },
            alive,
        )
    }
}

impl Drop for P {
    fn drop(&mut self) {
        self.alive.store(false, StdOrdering::SeqCst);
    }
}

fn small() -> Config {
    Config {
        max_entries: 64,
        max_negative: 64,
        prune_batch: 2,
    }
}

fn cache() -> Dcache<P> {
    Dcache::new(small(), P::new(0).0)
}

#[track_caller]
fn payload_of(l: &Lookup<P>) -> Option<u32> {
    match l {
        Lookup::Positive(d) => {
            let p = d.payload().expect("positive");
            assert!(p.alive.load(StdOrdering::SeqCst), "a counted payload was dropped");
            Some(p.v)
        }
        _ => None,
    }
}

/// Two names under `parent` whose hashes land in the wanted buckets.
fn names_in(c: &Dcache<P>, parent: &Dentry<P>, same_bucket: bool) -> (Vec<u8>, Vec<u8>) {
    let first = b"n0".to_vec();
    let b0 = c.bucket_of(parent, &first);
    for i in 1..1000 {
        let n = format!("n{i}").into_bytes();
        if (c.bucket_of(parent, &n) == b0) == same_bucket {
            return (first, n);
        }
    }
    unreachable!("two buckets and a thousand names")
}

/// A lookup racing with `remove` and the node's reclamation: the reader
/// either gets a live payload or misses, never a freed one; afterwards the
/// name is gone and the entry is freed once the last handle goes.
#[test]
fn dcache_lookup_vs_unhash_and_reclaim() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        drop(c.insert(&root, b"a", Some(P::new(1).0)));
        let reader = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || {
                let l = c.lookup(&root, b"a");
                let seen = payload_of(&l);
                assert!(seen.is_none() || seen == Some(1));
                // Also the reference-free form.
                let v = c.lookup_with(&root, b"a", |p| p.map(|p| (p.v, p.alive.load(StdOrdering::SeqCst))));
                assert!(matches!(v, None | Some(Some((1, true)))), "{v:?}");
            })
        };
        assert!(c.remove(&root, b"a"));
        reader.join().unwrap();
        assert!(matches!(c.lookup(&root, b"a"), Lookup::Miss));
        assert_eq!(c.len(), 0);
    });
}

/// The referenced bit and the reference count against the pruner: a hit
/// that takes a handle keeps the entry alive; if the pruner runs first the
/// entry is gone. After all handles are dropped, a still-cached entry is on
/// the LRU (hashed and unused implies listed).
#[test]
fn dcache_referenced_and_refcount_vs_prune() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        drop(c.insert(&root, b"a", Some(P::new(1).0)));
        let reader = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || {
                let l = c.lookup(&root, b"a");
                payload_of(&l)
            })
        };
        let pruned = c.prune(1);
        let seen = reader.join().unwrap();
        assert!(seen.is_some() || pruned == 1);
        assert_eq!(c.len() + pruned, 1);
        assert_eq!(c.lru_len(), c.len());
        if c.len() == 1 {
            assert_eq!(payload_of(&c.lookup(&root, b"a")), Some(1));
        }
    });
}

/// Two threads that miss the same name and insert it end with one entry,
/// and both get a handle on it (`d_alloc_parallel`).
#[test]
fn dcache_racing_inserts_of_one_name() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        let other = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || c.insert(&root, b"x", Some(P::new(2).0)))
        };
        let mine = c.insert(&root, b"x", Some(P::new(1).0));
        let theirs = other.join().unwrap();
        assert!(Dentry::ptr_eq(&mine, &theirs));
        assert_eq!(c.len(), 1);
        let v = mine.payload().unwrap().v;
        assert!(mine.payload().unwrap().alive.load(StdOrdering::SeqCst));
        assert_eq!(payload_of(&c.lookup(&root, b"x")), Some(v));
    });
}

/// A rename moves a node to another hash chain while a reader walks the
/// chain it left: the reader must still find an unrelated entry that sits
/// behind the moved one (the rename sequence count makes it retry), and sees
/// the moved entry under its old or its new name.
#[test]
fn dcache_rename_vs_lookup() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        // `b` and `c` share a chain, `b` in front (inserted last); the new
        // name of `b` hashes to the other chain.
        let (cname, bname) = names_in(&c, &root, true);
        let (_, newname) = names_in(&c, &root, false);
        assert_ne!(c.bucket_of(&root, &newname), c.bucket_of(&root, &bname));
        drop(c.insert(&root, &cname, Some(P::new(3).0)));
        drop(c.insert(&root, &bname, Some(P::new(2).0)));
        let reader = {
            let c = c.clone();
            let root = root.clone();
            let (cname, bname, newname) = (cname.clone(), bname.clone(), newname.clone());
            thread::spawn(move || {
                assert_eq!(
                    payload_of(&c.lookup(&root, &cname)),
                    Some(3),
                    "an unrelated entry was missed"
                );
                let old = payload_of(&c.lookup(&root, &bname));
                let new = payload_of(&c.lookup(&root, &newname));
                // The rename happens at one point: if the old name is already
                // gone, the later lookup must find the new one.
                assert!(old == Some(2) || new == Some(2), "{old:?} {new:?}");
            })
        };
        assert!(c.rename(&root, &bname, &root, &newname));
        reader.join().unwrap();
        assert!(matches!(c.lookup(&root, &bname), Lookup::Miss));
        assert_eq!(payload_of(&c.lookup(&root, &newname)), Some(2));
        assert_eq!(payload_of(&c.lookup(&root, &cname)), Some(3));
    });
}

/// A rename within one hash chain (both names in the same bucket) against
/// a reader of both names: the scan compares each node's inline copy of the
/// hash before its key, and the rename stores that copy after the new key,
/// so a reader may see the copy and the key out of step. The rename still
/// happens at one point: a reader that no longer finds the old name finds
/// the new one.
#[test]
fn dcache_rename_in_chain_vs_lookup() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        let (oldname, newname) = names_in(&c, &root, true);
        assert_eq!(c.bucket_of(&root, &oldname), c.bucket_of(&root, &newname));
        drop(c.insert(&root, &oldname, Some(P::new(2).0)));
        let reader = {
            let c = c.clone();
            let root = root.clone();
            let (oldname, newname) = (oldname.clone(), newname.clone());
            thread::spawn(move || {
                let old = payload_of(&c.lookup(&root, &oldname));
                let new = payload_of(&c.lookup(&root, &newname));
                assert!(old == Some(2) || new == Some(2), "{old:?} {new:?}");
            })
        };
        assert!(c.rename(&root, &oldname, &root, &newname));
        reader.join().unwrap();
        assert!(matches!(c.lookup(&root, &oldname), Lookup::Miss));
        assert_eq!(payload_of(&c.lookup(&root, &newname)), Some(2));
    });
}

/// A rename changes the moved node's key (parent id, name) in place, as one
/// write section of the node's sequence count, against lookups of the two
/// keys a torn read of it would give: (new parent, old name) and (old
/// parent, new name). Neither is ever cached, so both lookups must miss. The
/// cache hashes every key to its name's length, so both probes reach the
/// node and agree with it in hash and length: only the sequence count's
/// re-check keeps a reader from matching fields read half before and half
/// after the rename. A third lookup of the new key must find the entry once
/// the old key is gone.
#[test]
fn dcache_rename_key_torn_vs_lookup() {
    loom::model(|| {
        let c = StdArc::new(Dcache::with_colliding_hashes(small(), P::new(0).0));
        let root = c.root();
        let a = c.insert(&root, b"a", Some(P::new(1).0));
        let b = c.insert(&root, b"b", Some(P::new(2).0));
        drop(c.insert(&a, b"x", Some(P::new(3).0)));
        let reader = {
            let c = c.clone();
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || {
                let torn_new_parent = c.lookup_with(&b, b"x", |p| p.map(|p| p.v));
                assert_eq!(torn_new_parent, None, "(new parent, old name) matched a torn key");
                let torn_old_parent = c.lookup_with(&a, b"y", |p| p.map(|p| p.v));
                assert_eq!(torn_old_parent, None, "(old parent, new name) matched a torn key");
            })
        };
        assert!(c.rename(&a, b"x", &b, b"y"));
        reader.join().unwrap();
        assert!(matches!(c.lookup(&a, b"x"), Lookup::Miss));
        assert_eq!(payload_of(&c.lookup(&b, b"y")), Some(3));
    });
}

/// A rename over a cached target against a lookup of the target name: the
/// name is cached before the rename (the old target) and after it (the
/// moved entry), so the lookup must find one of the two, never miss.
#[test]
fn dcache_rename_over_target_vs_lookup() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        drop(c.insert(&root, b"t", Some(P::new(1).0)));
        drop(c.insert(&root, b"s", Some(P::new(2).0)));
        let reader = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || payload_of(&c.lookup(&root, b"t")))
        };
        assert!(c.rename(&root, b"s", &root, b"t"));
        let seen = reader.join().unwrap();
        assert!(matches!(seen, Some(1 | 2)), "the target name was missed: {seen:?}");
        assert_eq!(payload_of(&c.lookup(&root, b"t")), Some(2));
    });
}

/// A positive insert over a cached negative entry (a create) against a
/// lookup of the name: the name is cached before (negative) and after
/// (positive), so the lookup sees one of the two, never a miss.
#[test]
fn dcache_insert_over_negative_vs_lookup() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        drop(c.insert(&root, b"n", None));
        let reader = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || match c.lookup(&root, b"n") {
                Lookup::Negative => Some(None),
                l @ Lookup::Positive(_) => Some(payload_of(&l)),
                Lookup::Miss => None,
            })
        };
        drop(c.insert(&root, b"n", Some(P::new(1).0)));
        let seen = reader.join().unwrap();
        assert!(matches!(seen, Some(None | Some(1))), "the name was missed: {seen:?}");
        assert_eq!(payload_of(&c.lookup(&root, b"n")), Some(1));
    });
}

/// `remove` against a `replace` of the same name: the name is cached
/// throughout the replacement, so the remove finds something to remove, and
/// afterwards the name is cached only if the replacement came after it.
#[test]
fn dcache_remove_vs_replace() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        drop(c.insert(&root, b"n", Some(P::new(1).0)));
        let replacer = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || c.replace(&root, b"n", Some(P::new(2).0)))
        };
        let removed = c.remove(&root, b"n");
        let new = replacer.join().unwrap();
        assert!(removed, "the name was cached throughout, yet remove found nothing");
        // Either the replacement came last (its entry is cached) or the
        // remove did (nothing is).
        let now = payload_of(&c.lookup(&root, b"n"));
        assert_eq!(now.is_some(), new.is_hashed(), "{now:?}");
    });
}

/// `drop_subtree(d)` against an insert under `d/e` (a directory being
/// dropped): afterwards no entry that existed before the call is found under
/// `d`, and the new entry is cached only if its parent still is (a node under
/// an unhashed parent is never hashed).
#[test]
fn dcache_drop_subtree_vs_insert() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        let d = c.insert(&root, b"d", Some(P::new(1).0));
        let e = c.insert(&d, b"e", Some(P::new(2).0));
        drop(c.insert(&e, b"f", Some(P::new(3).0)));
        let inserter = {
            let c = c.clone();
            let e = e.clone();
            thread::spawn(move || c.insert(&e, b"g", Some(P::new(4).0)))
        };
        let stats = c.drop_subtree(&d, |_| true);
        let g = inserter.join().unwrap();
        // `e` and `f`, plus `g` if it was cached under `e` before `e` was
        // unhashed.
        assert!(matches!(stats.dropped + stats.busy, 2 | 3), "{stats:?}");
        assert!(!e.is_hashed());
        assert!(matches!(c.lookup(&d, b"e"), Lookup::Miss));
        assert!(matches!(c.lookup(&e, b"f"), Lookup::Miss));
        // `g` is new: it may survive only while its parent is cached, and
        // `e` is not.
        assert!(!g.is_hashed());
        assert!(matches!(c.lookup(&e, b"g"), Lookup::Miss));
        assert!(d.is_hashed());
    });
}

/// A rename that moves an entry from outside into a directory being dropped:
/// whichever order, nothing that existed before the drop is left under it.
#[test]
fn dcache_rename_vs_drop_subtree() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        let d = c.insert(&root, b"d", Some(P::new(1).0));
        drop(c.insert(&d, b"x", Some(P::new(2).0)));
        drop(c.insert(&root, b"y", Some(P::new(3).0)));
        let renamer = {
            let c = c.clone();
            let (root, d) = (root.clone(), d.clone());
            thread::spawn(move || c.rename(&root, b"y", &d, b"y"))
        };
        let stats = c.drop_subtree(&d, |_| true);
        assert!(renamer.join().unwrap());
        assert!(matches!(c.lookup(&d, b"x"), Lookup::Miss));
        assert!(matches!(c.lookup(&root, b"y"), Lookup::Miss));
        // Either the drop saw `y` under `d` and dropped it (a rename during
        // the walk makes it walk again), or the rename came after the walk
        // and `y` is cached under `d`; never both, never neither.
        let y_cached = payload_of(&c.lookup(&d, b"y")).is_some();
        assert_eq!(stats.dropped + stats.busy, if y_cached { 1 } else { 2 }, "{stats:?}");
    });
}

/// `Dentry::parent` against a rename that moves the entry away and the
/// removal that then frees its old parent: the reader gets the old or the
/// new parent, alive, never a freed one.
#[test]
fn dcache_parent_vs_rename_and_free() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        let a = c.insert(&root, b"a", Some(P::new(1).0));
        let b = c.insert(&root, b"b", Some(P::new(2).0));
        let x = c.insert(&a, b"x", Some(P::new(3).0));
        let (a_id, b_id) = (a.id(), b.id());
        drop(a);
        let reader = {
            let x = x.clone();
            thread::spawn(move || {
                let p = x.parent().expect("x has a parent");
                let v = p.payload().expect("positive");
                assert!(v.alive.load(StdOrdering::SeqCst), "a freed parent was returned");
                assert!(p.id() == a_id || p.id() == b_id);
            })
        };
        let moved = {
            let Lookup::Positive(a) = c.lookup(&root, b"a") else {
                panic!("a is cached")
            };
            c.rename(&a, b"x", &b, b"x")
        };
        assert!(moved);
        assert!(c.remove(&root, b"a"));
        reader.join().unwrap();
        assert_eq!(x.parent().map(|p| p.id()), Some(b_id));
    });
}

/// Two removals of two names in one hash chain (`head → y → x`): each
/// unlinks its node under the bucket's bit lock, reading the chain's links
/// Relaxed, so the second must see the first's unlink through the lock
/// (the Acquire compare-exchange that sets the bit pairing with the Release
/// store that clears it).
/// Without that, the second can read a stale `next` and link a removed node
/// back into the chain, which `assert_consistent` reports (and a later lookup
/// could reach it after it is freed). Fails if either side of the lock is
/// weakened to Relaxed.
#[test]
fn dcache_bucket_lock_vs_unlink() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        let (x, y) = names_in(&c, &root, true);
        drop(c.insert(&root, &x, Some(P::new(1).0)));
        drop(c.insert(&root, &y, Some(P::new(2).0)));
        let other = {
            let c = c.clone();
            let root = root.clone();
            let x = x.clone();
            thread::spawn(move || assert!(c.remove(&root, &x)))
        };
        assert!(c.remove(&root, &y));
        other.join().unwrap();
        c.assert_consistent();
        assert!(matches!(c.lookup(&root, &x), Lookup::Miss));
        assert!(matches!(c.lookup(&root, &y), Lookup::Miss));
        assert_eq!(c.len(), 0);
    });
}

/// `drop_subtree` walks a directory's list of children in batches (of one
/// here), resuming at a child it holds counted. A rename moves that child to
/// another directory, and an insert there then appends after it, writing its
/// sibling link under the other directory's child lock. The walk must notice
/// the move (the child's parent is no longer the directory whose lock it
/// holds) and start again, rather than follow the child into the other
/// list: loom reports that as a data race on the sibling link if the check
/// is removed. Whatever the order, nothing is left cached under the dropped
/// directory, the other directory keeps its new entry, and the chains are
/// consistent.
#[test]
fn dcache_drop_cursor_vs_rename_away() {
    // Batches of one make the execution long (the cache's own drop at the
    // end walks the whole tree a child at a time): more branches than
    // loom's default 1,000 per execution, and more states than a run at
    // preemption bound 2 gets through in reasonable time. One preemption is
    // what the race needs (the walker stopped between two batches while the
    // other thread renames and inserts), so the bound is 1 here.
    let mut model = loom::model::Builder::new();
    model.max_branches = 10_000;
    model.preemption_bound = Some(1);
    model.check(|| {
        let c = StdArc::new(Dcache::new(
            Config {
                prune_batch: 1,
                ..small()
            },
            P::new(0).0,
        ));
        let root = c.root();
        let d = c.insert(&root, b"d", Some(P::new(1).0));
        let e = c.insert(&root, b"e", Some(P::new(2).0));
        drop(c.insert(&d, b"a", Some(P::new(3).0)));
        drop(c.insert(&d, b"b", Some(P::new(4).0)));
        let renamer = {
            let c = c.clone();
            let (d, e) = (d.clone(), e.clone());
            thread::spawn(move || {
                let moved = c.rename(&d, b"b", &e, b"b");
                drop(c.insert(&e, b"z", Some(P::new(5).0)));
                moved
            })
        };
        c.drop_subtree(&d, |_| true);
        let moved = renamer.join().unwrap();
        assert!(matches!(c.lookup(&d, b"a"), Lookup::Miss));
        assert!(matches!(c.lookup(&d, b"b"), Lookup::Miss));
        assert_eq!(payload_of(&c.lookup(&e, b"z")), Some(5));
        // `b` moved out of `d` before the walk reached it, or the walk
        // dropped it first (then the rename found it gone), or the walk had
        // collected it just before the move and drops it at its new place.
        let b_in_e = payload_of(&c.lookup(&e, b"b"));
        assert!(b_in_e.is_none() || (moved && b_in_e == Some(4)));
        c.assert_consistent();
    });
}

/// The eviction policy's queues (S3-FIFO, `policy.rs`) against a counted
/// lookup and a removal. `a` was hit while on probation. The pruner moves it
/// to the main queue, or, if the lookup holds it, takes it off lazily and
/// marks it for the main queue, where the lookup's last `put` puts it; then
/// it evicts `b` (never hit). The removal kills `a` wherever it is, taking
/// it off the list its queue byte names. Whatever the order, every list
/// holds exactly its nodes, each on the queue its byte names, and nothing
/// is left. Fails (a list's nodes and length disagree) if a kill takes the
/// node off the probation queue whatever its byte says.
#[test]
fn dcache_policy_queues_vs_lookup_and_remove() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        drop(c.insert(&root, b"a", Some(P::new(1).0)));
        drop(c.insert(&root, b"b", Some(P::new(2).0)));
        assert!(c.lookup_with(&root, b"a", |_| ()).is_some());
        let pruner = {
            let c = c.clone();
            thread::spawn(move || c.prune(1))
        };
        assert_eq!(payload_of(&c.lookup(&root, b"a")), Some(1));
        assert!(c.remove(&root, b"a"));
        assert_eq!(pruner.join().unwrap(), 1);
        c.assert_lists_consistent();
        assert!(matches!(c.lookup(&root, b"a"), Lookup::Miss));
        assert!(matches!(c.lookup(&root, b"b"), Lookup::Miss));
        assert_eq!(c.len(), 0);
        assert_eq!(c.lru_len(), 0);
    });
}

/// A prune batch releases its victims' references on their parent together
/// (one decrement when none of them is the last, `release_many`), against
/// a counted lookup of that parent whose handle is then dropped. Whoever
/// drops the parent's last reference puts it on the LRU: afterwards the
/// parent is cached, unused and listed, and its children are gone.
#[test]
fn dcache_batch_release_vs_parent_lookup() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        let d = c.insert(&root, b"d", Some(P::new(1).0));
        drop(c.insert(&d, b"x", Some(P::new(2).0)));
        drop(c.insert(&d, b"y", Some(P::new(3).0)));
        // `d` is held by its two children only, and on no list.
        drop(d);
        let reader = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || payload_of(&c.lookup(&root, b"d")))
        };
        // The probation queue holds `x` and `y` (both unused, never hit).
        assert_eq!(c.prune(2), 2);
        assert_eq!(reader.join().unwrap(), Some(1));
        c.assert_lists_consistent();
        assert_eq!(c.len(), 1);
        assert_eq!(c.lru_len(), 1, "the parent's last put did not list it");
        assert_eq!(payload_of(&c.lookup(&root, b"d")), Some(1));
    });
}

/// A prune batch's reclamation against a reference-free lookup of one of
/// its victims: the pruner evicts `a` (its only entry, so whether the
/// lookup's hit promotes it first or not) and frees the batch with one
/// function deferred to the epoch collector; a reader pinned in
/// `lookup_with` either misses or sees the payload alive, never dropped.
/// The model keeps its own handle on the payload's flag, so the flag
/// outlives the payload. Fails if the batch is freed at once instead of
/// deferred: the reader then reads the freed node, and loom stops on the
/// garbage it finds in the node's atomics.
#[test]
fn dcache_prune_batch_reclaim_vs_lookup_with() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        // Kept until the end: the flag outlives the payload.
        let (p, _alive) = P::new(1);
        drop(c.insert(&root, b"a", Some(p)));
        let reader = {
            let c = c.clone();
            let root = root.clone();
            thread::spawn(move || c.lookup_with(&root, b"a", |p| p.map(|p| (p.v, p.alive.load(StdOrdering::SeqCst)))))
        };
        assert_eq!(c.prune(1), 1);
        let seen = reader.join().unwrap();
        assert!(matches!(seen, None | Some(Some((1, true)))), "{seen:?}");
        c.assert_lists_consistent();
        assert_eq!(c.len(), 0);
    });
}

/// An insert lists its new entry on the LRU at once, while its handle still
/// holds it, under the shard's LRU lock; the pruner runs meanwhile over the
/// same lists. The pruner evicts `a` (listed, unused, never hit) and then,
/// depending on the order, finds `b` held (takes it off, marks it for the
/// main queue; the handle's drop lists it again) or unused (evicts it) or
/// not yet listed. Afterwards every list holds exactly its nodes and every
/// cached entry, unused, is listed. Fails (a listed node without
/// `ON_LRU`) if the insert lists the entry without setting `ON_LRU`, by
/// which the handle's drop and the pruner know it is listed.
#[test]
fn dcache_insert_lists_vs_prune() {
    loom::model(|| {
        let c = StdArc::new(cache());
        let root = c.root();
        drop(c.insert(&root, b"a", Some(P::new(1).0)));
        let pruner = {
            let c = c.clone();
            thread::spawn(move || c.prune(2))
        };
        let b = c.insert(&root, b"b", Some(P::new(2).0));
        assert_eq!(payload_of(&Lookup::Positive(b)), Some(2));
        let pruned = pruner.join().unwrap();
        assert!(pruned >= 1, "the unused `a` was not evicted");
        c.assert_lists_consistent();
        assert_eq!(c.len() + pruned, 2);
        assert_eq!(c.lru_len(), c.len());
    });
}
