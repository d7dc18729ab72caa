//! The writers of the radix tree: the explicit lock context, ladder locking,
//! path locking and optimistic entry (seed 002, "A Concurrent Pagecache",
//! §2.4.1, §2.4.2, §2.4.3 and §5), and the changes of shape that skipped
//! levels bring (new leaves directly under a slot, splits, growing and
//! shrinking to any height).
//!
//! Every writer runs one of two skeletons from a *start node* that it holds
//! locked:
//! - [`RadixTree::insert_from`] and [`RadixTree::set_tag_from`] are the
//!   uni-directional operations: ladder locking, each step locks the child
//!   and then releases everything above it.
//! - [`RadixTree::path_from`] runs remove and clear-tag: it keeps the locks
//!   of the path, releasing everything above a node as soon as that node is
//!   found to be a termination point, then modifies the bottom and walks back
//!   up through the held locks only.
//!
//! The start node is either the root, reached under the root lock (`Serial`
//! and `LockCoupled`, and the fallback of `Optimistic`), or a node found by a
//! lock-free descent and validated under its lock (`Optimistic`). Validation
//! is what makes the optimistic start equivalent to a coupled descent: the
//! node is not dead (so it is still linked, with its fixed key range), and
//! the entry condition holds under its lock (for insert nothing more; for
//! set-tag the node already has the tag, so by invariant I1 every ancestor
//! has it too; for remove and clear-tag the node is a termination point, so
//! no ancestor will change).
//!
//! # Inserting under skipped levels
//! At an inner node N (locked) whose slot `s` is on the path of the index:
//! - an empty slot gets a new leaf directly (whatever N's height), filled
//!   with the item before it is published, so the insert ends there;
//! - a child whose range holds the index is the next step of the ladder;
//! - a child C whose range does not hold it (it skips levels) is *split*: a
//!   new node M at the lowest height whose range holds both C and the index
//!   takes C and a new leaf with the item, and is published in slot `s`.
//!   M's tag bits for C must equal C's "any tag" flags. Those flags change
//!   only under N's lock (a set-tag that tags C first sets N's bit, holding
//!   N; a clear or remove that untags C clears N's bit, holding N) except
//!   for a ladder walker that came through N before us and still holds C:
//!   it took C's lock while holding N's, so locking C (after N: parent
//!   before child) waits it out. With N and C locked, M copies C's flags and
//!   they stay right.
//!
//! In a tree of inline values an index alone under an empty slot becomes a
//! lone entry there (`node.rs`). The node whose slot holds it is the entry's
//! holder, playing the leaf's part: set-tag, clear-tag and remove end there
//! (the slot's bits are the entry's tags; removing clears the slot, and the
//! holder may then empty like a leaf), and an insert of another index in
//! the slot's range *expands* it: a new node (a leaf if both share one) takes
//! the entry, with the slot's tag bits, and the new index, and is published
//! in the slot under the holder's lock, which every writer of the entry
//! needs.
//!
//! In `Serial` mode the root lock is the single writer lock, held for the
//! whole operation, and node locks are never taken.

use super::node::{
    self, MAX_HEIGHT, NUM_TAGS, Node, Raw, Slot, Step, bit, child_word, common_height, erase, lone_bits,
    lone_leaf_word, lone_word, run_bits, slot_of, slots_of, word,
};
use super::{Boxed, Found, Inline, Own, RadixTree, Tag, Word, inline_item, retire_word};
use std::mem::ManuallyDrop;

use crate::Mode;
use crate::sync::MutexGuard;
use crate::sync::Ordering;
use crate::sync::epoch::{Guard, Owned, Shared};

/// The locks one writer holds: the lock context of seed 002 §2.4.3, made a
/// value. `path[i]` for `i < depth` are the nodes of the walk from the start
/// node down; `guards[i]` is `Some` while `path[i]`'s lock is held.
/// Everything strictly above `top` has been released. `root` holds the
/// tree's root lock (in `Serial` mode, for the whole operation).
///
/// A writer makes one context on its stack and passes it down by `&mut`:
/// the context is about 200 bytes (two arrays of [`MAX_HEIGHT`] entries),
/// and moving it through `Option`/`Result` returns cost a `memcpy` per
/// move, a fifth of the write path's time in seed 002's table.
///
/// Only `guards[top..depth]` can hold a lock; dropping the context releases
/// those (deepest first) instead of visiting all [`MAX_HEIGHT`] entries,
/// which was a tenth of an optimistic write's instructions.
pub(crate) struct LockCtx<'a, V> {
    serial: bool,
    root: Option<MutexGuard<'a, ()>>,
    /// Whether `path[0]` is the tree's root reached under the root lock, and
    /// no termination point has been found since (so the root may change).
    at_root: bool,
    path: [Option<&'a Node<V>>; MAX_HEIGHT],
    /// Not dropped as a whole: `Drop` empties `guards[top..depth]`, and
    /// every other entry is `None` at all times.
    guards: ManuallyDrop<[Option<MutexGuard<'a, ()>>; MAX_HEIGHT]>,
    depth: usize,
    top: usize,
}

impl<V> Drop for LockCtx<'_, V> {
    fn drop(&mut self) {
        self.release_held();
    }
}

impl<'a, V> LockCtx<'a, V> {
    fn new(serial: bool) -> Self {
        Self {
            serial,
            root: None,
            at_root: false,
            path: [None; MAX_HEIGHT],
            guards: ManuallyDrop::new(std::array::from_fn(|_| None)),
            depth: 0,
            top: 0,
        }
    }

    /// Releases the held node locks, deepest first.
    fn release_held(&mut self) {
        let (top, depth) = (self.top, self.depth);
        for g in self.guards[top..depth].iter_mut().rev() {
            *g = None;
        }
    }

    /// Releases every lock (deepest first) and empties the context.
    fn reset(&mut self) {
        self.release_held();
        self.root = None;
        self.at_root = false;
        self.depth = 0;
        self.top = 0;
    }

    /// Locks `node` (not in `Serial` mode) and appends it to the path.
    fn push(&mut self, node: &'a Node<V>) {
        let guard = if self.serial { None } else { Some(node.lock.lock()) };
        self.push_locked(node, guard);
    }

    fn push_locked(&mut self, node: &'a Node<V>, guard: Option<MutexGuard<'a, ()>>) {
        self.path[self.depth] = Some(node);
        self.guards[self.depth] = guard;
        self.depth += 1;
    }

    fn last(&self) -> &'a Node<V> {
        self.path[self.depth - 1].expect("lock context has a node")
    }

    fn node(&self, i: usize) -> &'a Node<V> {
        self.path[i].expect("lock context has a node")
    }

    /// Releases every lock above the last node (the ladder step, and the
    /// release at a termination point). In `Serial` mode the writer lock
    /// stays held; only the bookkeeping moves.
    fn release_above_last(&mut self) {
        let last = self.depth - 1;
        if last == self.top && !self.at_root {
            return;
        }
        self.at_root = false;
        if !self.serial {
            self.root = None;
        }
        for g in &mut self.guards[self.top..last] {
            *g = None;
        }
        self.top = last;
    }

    /// One step of ladder locking: locks `child` and releases everything
    /// above it. In `Serial` mode there is nothing to lock or release, and
    /// nothing above is needed again: the child replaces the last node.
    fn ladder_step(&mut self, child: &'a Node<V>) {
        if self.serial {
            self.path[self.depth - 1] = Some(child);
            self.at_root = false;
            return;
        }
        self.push(child);
        self.release_above_last();
    }

    /// Releases the node locks below the first node, keeping the root lock
    /// and the first node's lock (before shrinking the tree).
    fn release_below_first(&mut self) {
        for g in &mut self.guards[1..self.depth] {
            *g = None;
        }
        self.depth = 1;
    }
}

/// The two bi-directional operations.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PathOp {
    Remove,
    ClearTag(usize),
}

/// Whether `node`, on the path through slot `s`, is a termination point of
/// `op` (see the module docs of `radix`). `is_root` applies the stricter rule
/// that keeps the root lock when the tree may shrink. A removal at a leaf
/// removes the whole run of the slot (a multi-index entry), so the leaf
/// must keep at least one slot outside that run, and for every tag either
/// no bit of the run or some bit outside it. `single` says the tree has no
/// runs (inline values).
fn is_term<V>(node: &Node<V>, s: usize, op: PathOp, is_root: bool, single: bool) -> bool {
    match op {
        PathOp::ClearTag(t) => node.tag_bits_relaxed(t) & !bit(s) != 0,
        PathOp::Remove => {
            let gone = if node.is_leaf() { node.run_at(s, single) } else { bit(s) };
            // One slot goes, except for a multi-index entry (and baseline
            // x86-64 has no popcount instruction).
            let n = if gone & (gone - 1) == 0 { 1 } else { gone.count_ones() };
            let need = n + if is_root { 2 } else { 1 };
            if node.count() < need {
                return false;
            }
            let mut ok = true;
            for t in 0..NUM_TAGS {
                let b = node.tag_bits_relaxed(t);
                ok &= b & gone == 0 || b & !gone != 0;
            }
            ok
        }
    }
}

/// Where the path of `index` goes from slot `s` of the inner node `node`,
/// read under `node`'s lock (or the serial writer lock), so that a child
/// cannot be unlinked before the caller locks it.
enum Next<'a, V> {
    /// Down to this child, whose range holds the index.
    Down(&'a Node<V>),
    /// Nowhere: the slot holds the index's lone entry.
    Lone,
    /// The index is not in the tree.
    Missing,
}

fn next_on_path<'a, V>(node: &Node<V>, s: usize, index: u64, guard: &'a Guard) -> Next<'a, V> {
    match node.slot(s, guard) {
        Slot::Child(c) if c.covers(index) => Next::Down(c),
        Slot::Lone(w) if lone_bits(node.height(), w, index).is_some() => Next::Lone,
        _ => Next::Missing,
    }
}

impl<V: Send + Sync + 'static, O: Own<V>> RadixTree<V, O> {
    fn serial(&self) -> bool {
        self.mode() == Mode::Serial
    }

    /// Takes the root lock and starts a context at the root. With `grow`,
    /// creates the root (a leaf) if the tree is empty, or puts a new root
    /// above it whose range holds `index` as well. Returns false (with
    /// nothing locked) if the tree is empty or its range misses `index`
    /// and `grow` is false.
    fn start_at_root<'a>(&'a self, ctx: &mut LockCtx<'a, V>, index: u64, grow: bool, guard: &'a Guard) -> bool {
        debug_assert_eq!(ctx.depth, 0, "a root start needs an empty context");
        let serial = self.serial();
        let root_guard = self.root_lock.lock();
        // Acquire: pairs with the Release stores below (made under the same
        // lock by an earlier holder; the lock already orders them).
        let mut root = self.root.load(Ordering::Acquire, guard);
        if root.is_null() {
            if !grow {
                return false;
            }
            root = Owned::new(Node::new(1, index)).into_shared(guard);
            // Release: publishes the new root's initialisation; pairs with
            // the Acquire loads of the root in lookups.
            self.root.store(root, Ordering::Release);
        }
        // SAFETY: the root is linked and we hold the root lock, so it cannot
        // be retired while `guard` is pinned.
        let mut r = unsafe { root.deref() };
        if !r.covers(index) {
            if !grow {
                return false;
            }
            // Lock the old root so that its tag bitmaps are stable while the
            // new root's bits are computed from them.
            let _old = if serial { None } else { Some(r.lock.lock()) };
            let up = Node::new(common_height(r.base, index), index);
            let s = slot_of(r.base, up.height());
            for t in 0..NUM_TAGS {
                if r.any_tag(t) {
                    up.set_tag_bit(t, s);
                }
            }
            up.set_child(s, root);
            up.add_count(1);
            root = Owned::new(up).into_shared(guard);
            // Release: publishes the new root; pairs with the Acquire loads
            // of the root in lookups.
            self.root.store(root, Ordering::Release);
            // SAFETY: just published under the root lock; not retired.
            r = unsafe { root.deref() };
        }
        ctx.root = Some(root_guard);
        ctx.push(r);
        ctx.at_root = true;
        true
    }

    // ----- insert -------------------------------------------------------

    /// Inserts the item `make(value)` at `index`; gives `value` back if
    /// occupied. `make` is called only if the index is free, under the lock
    /// that publishes the item, and must return an item that this tree's
    /// policy `O` may retire and free.
    pub(crate) fn insert_with<T>(
        &self,
        index: u64,
        value: T,
        make: impl for<'g> FnOnce(T, &'g Guard) -> Shared<'g, V>,
    ) -> Result<(), T> {
        self.insert_raw(index, 0, value, |v, g| erase(make(v, g)))
    }

    /// Inserts the item `make(value)` at every index of the aligned run of
    /// `2^order` indexes from `first` (a multi-index entry, all in one
    /// leaf), or gives `value` back if any of them is occupied. The slots
    /// are filled one by one under the leaf lock: a lock-free reader may
    /// see some of them filled and others not yet, but every slot it finds
    /// filled holds the item, which covers that index.
    ///
    /// # Panics
    /// If `order` exceeds [`SHIFT`](super::SHIFT) or `first` is not a
    /// multiple of `2^order`.
    pub(crate) fn insert_run_with<T>(
        &self,
        first: u64,
        order: u32,
        value: T,
        make: impl for<'g> FnOnce(T, &'g Guard) -> Shared<'g, V>,
    ) -> Result<(), T> {
        self.insert_raw(first, order, value, |v, g| erase(make(v, g)))
    }

    /// [`insert_run_with`](Self::insert_run_with) with a leaf word.
    fn insert_raw<T>(
        &self,
        first: u64,
        order: u32,
        value: T,
        make: impl for<'g> FnOnce(T, &'g Guard) -> Raw<'g>,
    ) -> Result<(), T> {
        assert!(order <= super::SHIFT, "a run fits in one leaf");
        assert_eq!(first & ((1u64 << order) - 1), 0, "a run is aligned to its length");
        debug_assert!(order == 0 || !O::INLINE, "inline trees have no runs");
        let guard = self.raw_pin();
        let mut ctx = LockCtx::new(self.serial());
        if !(self.mode() == Mode::Optimistic && self.optimistic_insert_start(&mut ctx, first, &guard)) {
            let started = self.start_at_root(&mut ctx, first, true, &guard);
            debug_assert!(started, "a growing start always starts");
        }
        self.insert_from(&mut ctx, first, 1 << order, value, make, &guard)
    }

    /// Lock-free descent to the lowest existing node whose range holds
    /// `index` (a leaf, or the inner node whose slot is empty, holds a lone
    /// entry, or holds a child beside the index), locked and validated (not
    /// dead), or None.
    fn optimistic_insert_start<'a>(&'a self, ctx: &mut LockCtx<'a, V>, index: u64, guard: &'a Guard) -> bool {
        // Acquire: pairs with the Release stores of the root.
        let root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: reachable while `guard` is pinned.
        let Some(mut node) = (unsafe { root.as_ref() }) else {
            return false;
        };
        if !node.covers(index) {
            return false;
        }
        let mut h = node.height();
        while h > 1 {
            match node.step(h, index, guard) {
                Step::Down(c, ch) => {
                    h = ch;
                    node = c;
                }
                Step::Empty | Step::Beside | Step::Lone(_) => break,
            }
        }
        let lock = node.lock.lock();
        if node.is_dead() {
            self.failed_validations.incr();
            return false;
        }
        ctx.push_locked(node, Some(lock));
        true
    }

    /// The word that puts the new item `item` (filling `n` slots from the
    /// slot of `index`) in a slot of a node of height `h` that is locked or
    /// not yet published: a lone entry if the tree keeps values inline and
    /// the value fits, else a new leaf, filled before anyone can see it.
    fn holder_word(&self, h: usize, index: u64, n: usize, item: Raw<'_>, guard: &Guard) -> usize {
        let w = word(item);
        if O::INLINE
            && n == 1
            && w & 1 == 1
            && let Some(lone) = lone_word(h, index, (w >> 1) as u64)
        {
            return lone;
        }
        let leaf: Node<V> = Node::new(1, index);
        for x in slots_of(run_bits(slot_of(index, 1), n)) {
            leaf.set_raw(x, item);
        }
        leaf.add_count(n as i32);
        child_word(Owned::new(leaf).into_shared(guard))
    }

    /// Ladder locking from the context's last node down to where the item
    /// goes: the leaf slots (`n` from the slot of `index`), or an empty slot
    /// on the way (a lone entry or a new leaf there), or a slot whose lone
    /// entry or skipped child must first make room (`expand`, `split`).
    fn insert_from<'a, T>(
        &'a self,
        ctx: &mut LockCtx<'a, V>,
        index: u64,
        n: usize,
        value: T,
        make: impl for<'g> FnOnce(T, &'g Guard) -> Raw<'g>,
        guard: &'a Guard,
    ) -> Result<(), T> {
        loop {
            let node = ctx.last();
            let h = node.height();
            let s = slot_of(index, h);
            if h == 1 {
                let run = run_bits(s, n);
                if slots_of(run).any(|x| node.occupied(x)) {
                    return Err(value);
                }
                let item = make(value, guard);
                for x in slots_of(run) {
                    node.set_raw(x, item);
                }
                node.add_count(n as i32);
                self.len_counter().add(n as i64);
                return Ok(());
            }
            match node.slot(s, guard) {
                Slot::Empty => {
                    // A lone index under an empty slot: it goes straight
                    // here, whatever the height.
                    let w = self.holder_word(h, index, n, make(value, guard), guard);
                    node.set_word(s, w);
                    node.add_count(1);
                }
                Slot::Child(c) if c.covers(index) => {
                    // The child is linked under `node`, whose lock we hold,
                    // so it cannot be unlinked before we lock it.
                    ctx.ladder_step(c);
                    continue;
                }
                Slot::Child(c) => {
                    let w = self.holder_word(common_height(c.base, index), index, n, make(value, guard), guard);
                    self.split(node, s, c, index, w, guard);
                }
                Slot::Lone(w) => {
                    if lone_bits(h, w, index).is_some() {
                        return Err(value);
                    }
                    self.expand(node, s, w, index, make(value, guard), guard);
                }
            }
            self.len_counter().add(n as i64);
            return Ok(());
        }
    }

    /// Puts a new node between `node` (locked) and its child `c` at slot
    /// `s`, whose range misses `index`: the new node covers both and holds
    /// `c` and `index`'s holder word `new` (see the module docs for why `c`
    /// is locked meanwhile).
    fn split(&self, node: &Node<V>, s: usize, c: &Node<V>, index: u64, new: usize, guard: &Guard) {
        let _c = if self.serial() { None } else { Some(c.lock.lock()) };
        let mid = Node::new(common_height(c.base, index), index);
        let h = mid.height();
        debug_assert!(c.height() < h && h < node.height(), "a split is between the two");
        let cs = slot_of(c.base, h);
        for t in 0..NUM_TAGS {
            if c.any_tag(t) {
                mid.set_tag_bit(t, cs);
            }
        }
        mid.set_child(cs, node.child(s, guard));
        mid.set_word(slot_of(index, h), new);
        mid.add_count(2);
        node.set_child(s, Owned::new(mid).into_shared(guard));
    }

    /// Replaces the lone entry `lone` in slot `s` of `node` (locked) by a
    /// node holding it and the new `item` at `index`: a leaf if both are in
    /// one leaf's range, else an inner node at the height where they fork,
    /// holding the old entry (still lone) and the new one (lone or in a
    /// leaf). The old entry keeps its tags (its slot's bits in `node`),
    /// which only writers holding `node`'s lock change; `node`'s own bits
    /// for the slot stay right. One store publishes the node, so a reader
    /// sees the entry in the old word or in the new node.
    fn expand(&self, node: &Node<V>, s: usize, lone: usize, index: u64, item: Raw<'_>, guard: &Guard) {
        let e = node::lone_index(node, s, lone);
        let bits = lone_bits(node.height(), lone, e).expect("the entry's own index");
        let h = common_height(e, index);
        debug_assert!(h < node.height(), "both are in the slot's range");
        let below = Node::new(h, index);
        let es = slot_of(e, h);
        if h == 1 {
            below.set_raw(es, lone_leaf_word(bits));
            below.set_raw(slot_of(index, 1), item);
        } else {
            let moved = lone_word(h, e, bits).expect("a value that fits higher up fits lower down");
            below.set_word(es, moved);
            below.set_word(slot_of(index, h), self.holder_word(h, index, 1, item, guard));
        }
        below.add_count(2);
        for t in 0..NUM_TAGS {
            if node.tag_bits_relaxed(t) & bit(s) != 0 {
                below.set_tag_bit(t, es);
            }
        }
        node.set_child(s, Owned::new(below).into_shared(guard));
    }

    // ----- set_tag ------------------------------------------------------

    /// Sets `tag` on the entry at `index`; false if there is no entry.
    pub fn set_tag(&self, index: u64, tag: Tag) -> bool {
        let t = tag.idx();
        let guard = self.raw_pin();
        let mut ctx = LockCtx::new(self.serial());
        let started = if self.mode() == Mode::Optimistic {
            match self.optimistic_tag_start(&mut ctx, index, t, &guard) {
                Ok(()) => true,
                Err(Missing) => return false,
                Err(Tagged) => return true,
                Err(Fallback) => false,
            }
        } else {
            // Lock-free fast paths: a missing entry, or one already tagged.
            let (node, s) = match self.find(index, &guard) {
                Some(Found::Leaf(leaf, s)) if leaf.occupied(s) => (leaf, s),
                Some(Found::Lone(node, s, _)) => (node, s),
                _ => return false,
            };
            if node.tag_bits(t) & bit(s) != 0 {
                return true;
            }
            false
        };
        if !started && !self.start_at_root(&mut ctx, index, false, &guard) {
            return false;
        }
        self.set_tag_from(&mut ctx, index, t, &guard)
    }

    /// Lock-free descent that checks the entry (missing, or already tagged:
    /// nothing to do, linearized at the read) and finds the lowest node on
    /// the path that already has a tag-`t` bit, then locks and validates it
    /// (not dead, still tagged).
    fn optimistic_tag_start<'a>(
        &'a self,
        ctx: &mut LockCtx<'a, V>,
        index: u64,
        t: usize,
        guard: &'a Guard,
    ) -> Result<(), Start> {
        // Acquire: pairs with the Release stores of the root.
        let root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: reachable while `guard` is pinned.
        let mut node = unsafe { root.as_ref() }.ok_or(Missing)?;
        if !node.covers(index) {
            return Err(Missing);
        }
        let mut best = None;
        let mut h = node.height();
        let (bottom, s) = loop {
            if node.any_tag(t) {
                best = Some(node);
            }
            if h == 1 {
                break (node, slot_of(index, 1));
            }
            match node.step(h, index, guard) {
                Step::Down(c, ch) => {
                    h = ch;
                    node = c;
                }
                Step::Lone(w) if lone_bits(h, w, index).is_some() => break (node, slot_of(index, h)),
                Step::Empty | Step::Beside | Step::Lone(_) => return Err(Missing),
            }
        };
        if !bottom.occupied(s) {
            return Err(Missing);
        }
        if bottom.tag_bits(t) & bit(s) != 0 {
            return Err(Tagged);
        }
        let node = best.ok_or(Fallback)?;
        let lock = node.lock.lock();
        if node.is_dead() || !node.any_tag(t) {
            self.failed_validations.incr();
            return Err(Fallback);
        }
        ctx.push_locked(node, Some(lock));
        Ok(())
    }

    /// Ladder locking down to the leaf, setting the tag-`t` bit of the path
    /// slot in each node top-down (so a tagged child always has its parent's
    /// bit: invariant I1).
    fn set_tag_from<'a>(&'a self, ctx: &mut LockCtx<'a, V>, index: u64, t: usize, guard: &'a Guard) -> bool {
        let mut set_above = false;
        loop {
            let node = ctx.last();
            let s = slot_of(index, node.height());
            if node.is_leaf() {
                if node.occupied(s) {
                    node.set_tag_bit(t, s);
                    return true;
                }
                break;
            }
            match next_on_path(node, s, index, guard) {
                Next::Down(child) => {
                    set_above |= node.set_tag_bit(t, s);
                    ctx.ladder_step(child);
                }
                Next::Lone => {
                    // A lone entry's tags are its slot's bits.
                    node.set_tag_bit(t, s);
                    return true;
                }
                Next::Missing => break,
            }
        }
        ctx.reset();
        if set_above {
            // The entry vanished after the lock-free check: undo the bits set
            // on the way down that no tagged entry justifies, with a full
            // clear-tag walk from the root (never optimistic: it must run
            // even though the entry is missing).
            if self.start_at_root(ctx, index, false, guard) {
                self.path_from(ctx, index, PathOp::ClearTag(t), None::<fn(&V) -> bool>, guard);
            }
        }
        false
    }

    // ----- remove and clear_tag -----------------------------------------

    /// Removes the entry at `index` (all of a multi-index entry covering
    /// it); false if there was none.
    pub fn remove(&self, index: u64) -> bool {
        let guard = self.raw_pin();
        self.path_op(index, PathOp::Remove, None::<fn(&V) -> bool>, &guard)
            .is_some()
    }

    /// Removes the entry at `index` (all of a multi-index entry covering
    /// it) if `pred` (called under the leaf lock) accepts it.
    pub fn remove_if(&self, index: u64, pred: impl FnOnce(&V) -> bool) -> bool {
        let guard = self.raw_pin();
        self.path_op(index, PathOp::Remove, Some(pred), &guard).is_some()
    }

    /// Removes the entry at `index` (all of a multi-index entry covering
    /// it) and returns a clone of it.
    pub fn take(&self, index: u64) -> Option<V>
    where
        V: Clone,
    {
        let guard = self.raw_pin();
        let item = self.path_op(index, PathOp::Remove, None::<fn(&V) -> bool>, &guard)?;
        // SAFETY: the item was retired while `guard` is pinned, so it is not
        // freed yet.
        Some(unsafe { O::with_value(word(item), V::clone) })
    }

    /// Clears `tag` on the entry at `index`; true if it was set.
    pub fn clear_tag(&self, index: u64, tag: Tag) -> bool {
        let guard = self.raw_pin();
        if self.mode() != Mode::Optimistic && !self.get_tag(index, tag) {
            // Linearizes at the lock-free read: the tag was clear. (The
            // optimistic descent checks this itself.)
            return false;
        }
        self.path_op(index, PathOp::ClearTag(tag.idx()), None::<fn(&V) -> bool>, &guard)
            .is_some()
    }

    /// Runs remove or clear-tag: optimistic start if the mode allows and
    /// validation succeeds, else from the root. For remove, returns the
    /// removed (retired) item; for clear-tag, Some(null) if the bit was
    /// cleared.
    fn path_op<'a>(
        &'a self,
        index: u64,
        op: PathOp,
        pred: Option<impl FnOnce(&V) -> bool>,
        guard: &'a Guard,
    ) -> Option<Raw<'a>> {
        let mut ctx = LockCtx::new(self.serial());
        let started = match self.mode() {
            Mode::Optimistic => match self.optimistic_path_start(&mut ctx, index, op, guard) {
                Ok(()) => true,
                Err(Missing | Tagged) => return None,
                Err(Fallback) => false,
            },
            _ => false,
        };
        if !started && !self.start_at_root(&mut ctx, index, false, guard) {
            return None;
        }
        self.path_from(&mut ctx, index, op, pred, guard)
    }

    /// Lock-free descent that checks the entry (for clear-tag, that it has
    /// the tag) and finds the lowest termination point of `op` on the path
    /// of `index`, then locks and validates it. The termination condition is
    /// checked bottom-up from the leaf, which is usually one already.
    fn optimistic_path_start<'a>(
        &'a self,
        ctx: &mut LockCtx<'a, V>,
        index: u64,
        op: PathOp,
        guard: &'a Guard,
    ) -> Result<(), Start> {
        // Acquire: pairs with the Release stores of the root.
        let root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: reachable while `guard` is pinned.
        let mut node = unsafe { root.as_ref() }.ok_or(Missing)?;
        if !node.covers(index) {
            return Err(Missing);
        }
        let mut path: [&'a Node<V>; MAX_HEIGHT] = [node; MAX_HEIGHT];
        let mut depth = 0;
        let mut h = node.height();
        loop {
            path[depth] = node;
            depth += 1;
            if h == 1 {
                break;
            }
            match node.step(h, index, guard) {
                Step::Down(c, ch) => {
                    h = ch;
                    node = c;
                }
                // The entry is in this node's slot: the node is the bottom.
                Step::Lone(w) if lone_bits(h, w, index).is_some() => break,
                Step::Empty | Step::Beside | Step::Lone(_) => return Err(Missing),
            }
        }
        let s = slot_of(index, h);
        if !node.occupied(s) {
            return Err(Missing);
        }
        if let PathOp::ClearTag(t) = op
            && node.tag_bits(t) & bit(s) == 0
        {
            return Err(Missing); // Linearizes at this read: the tag was clear.
        }
        // The first node is the root: apply the root rule to it (keep the
        // root lock when the tree may shrink), so that removals that can
        // shrink the tree go through the root lock in every mode.
        let mut d = depth;
        let (node, was_root) = loop {
            if d == 0 {
                return Err(Fallback);
            }
            d -= 1;
            let n = path[d];
            if is_term(n, slot_of(index, n.height()), op, d == 0, O::INLINE) {
                break (n, d == 0);
            }
        };
        let lock = node.lock.lock();
        if node.is_dead() || !is_term(node, slot_of(index, node.height()), op, was_root, O::INLINE) {
            self.failed_validations.incr();
            return Err(Fallback);
        }
        ctx.push_locked(node, Some(lock));
        Ok(())
    }

    /// Path locking from the context's last node (the root under the root
    /// lock, or a validated termination point).
    fn path_from<'a>(
        &'a self,
        ctx: &mut LockCtx<'a, V>,
        index: u64,
        op: PathOp,
        pred: Option<impl FnOnce(&V) -> bool>,
        guard: &'a Guard,
    ) -> Option<Raw<'a>> {
        // Descend, keeping locks, releasing above each termination point.
        loop {
            let node = ctx.last();
            let s = slot_of(index, node.height());
            // At a start node below the root nothing is held above: skip
            // the check (the optimistic start has just made it). In `Serial`
            // mode the single lock stays held whatever the check says, and
            // the walk back up stops by itself at the first parent that
            // does not change (as a single-lock tree's would), so the check
            // would only move bookkeeping: skip it too.
            let above = ctx.at_root || ctx.depth > ctx.top + 1;
            if !ctx.serial && above && is_term(node, s, op, ctx.at_root && ctx.depth == 1, O::INLINE) {
                ctx.release_above_last();
            }
            if node.is_leaf() {
                break;
            }
            if let PathOp::ClearTag(t) = op
                && node.tag_bits_relaxed(t) & bit(s) == 0
            {
                break; // Nothing below is tagged (I1); walk up from here.
            }
            match next_on_path(node, s, index, guard) {
                Next::Down(child) => ctx.push(child),
                Next::Lone => break,
                Next::Missing if op == PathOp::Remove => return None,
                Next::Missing => break,
            }
        }
        let bottom = ctx.last();
        let s = slot_of(index, bottom.height());
        // The entry's lone word if the bottom is an inner node holding it.
        let lone = match bottom.is_leaf() {
            true => None,
            false => match bottom.slot(s, guard) {
                Slot::Lone(w) => lone_bits(bottom.height(), w, index),
                _ => None,
            },
        };
        match op {
            PathOp::Remove if lone.is_some() => {
                let item = lone_leaf_word(lone.expect("checked"));
                if let Some(pred) = pred
                    // SAFETY: the value is a lone entry's, read under the lock.
                    && !unsafe { O::with_value(word(item), pred) }
                {
                    return None;
                }
                for t in 0..NUM_TAGS {
                    bottom.clear_tag_bit(t, s);
                }
                bottom.set_word(s, 0);
                bottom.add_count(-1);
                self.len_counter().add(-1);
                self.walk_up_remove(ctx, index, guard);
                Some(item)
            }
            PathOp::Remove => {
                if !bottom.is_leaf() {
                    return None;
                }
                let item = bottom.raw(s, guard);
                if item.is_null() {
                    return None;
                }
                if let Some(pred) = pred
                    // SAFETY: the item is in a slot of a leaf we hold locked.
                    && !unsafe { O::with_value(word(item), pred) }
                {
                    return None;
                }
                // The whole run of the slot goes: a multi-index entry
                // leaves every index it covers, under this one lock.
                let run = bottom.run_at(s, O::INLINE);
                for x in slots_of(run) {
                    for t in 0..NUM_TAGS {
                        bottom.clear_tag_bit(t, x);
                    }
                    bottom.set_raw(x, Shared::null());
                }
                let n = run.count_ones();
                bottom.add_count(-(n as i32));
                self.len_counter().add(-i64::from(n));
                // SAFETY: the item is unlinked, retired once; the policy
                // defers its destruction past every pinned reader.
                unsafe { retire_word::<V, O>(item, guard) };
                self.walk_up_remove(ctx, index, guard);
                Some(item)
            }
            PathOp::ClearTag(t) => {
                let cleared = (bottom.is_leaf() || lone.is_some()) && bottom.clear_tag_bit(t, s);
                for d in (ctx.top..ctx.depth - 1).rev() {
                    let (parent, child) = (ctx.node(d), ctx.node(d + 1));
                    if child.any_tag(t) {
                        break;
                    }
                    parent.clear_tag_bit(t, slot_of(index, parent.height()));
                }
                cleared.then(Shared::null)
            }
        }
    }

    // ----- replace ------------------------------------------------------

    /// Replaces the item covering `index` with `make(value)` if `pred`
    /// (called under the leaf lock) accepts the old one: every slot of the
    /// old item's run gets the new item, and the old one is retired. Gives
    /// `value` back if there is no item or `pred` refuses. Tags stay as
    /// they are. The new item must cover the same indexes as the old one
    /// (the caller's contract: a lock-free reader of any slot of the run
    /// finds one or the other, and each covers its index).
    pub(crate) fn replace_with<T>(
        &self,
        index: u64,
        pred: impl FnOnce(&V) -> bool,
        value: T,
        make: impl for<'g> FnOnce(T, &'g Guard) -> Shared<'g, V>,
    ) -> Result<(), T> {
        self.replace_raw(index, pred, value, |v, g| erase(make(v, g)))
    }

    /// [`replace_with`](Self::replace_with) with a leaf word.
    fn replace_raw<T>(
        &self,
        index: u64,
        pred: impl FnOnce(&V) -> bool,
        value: T,
        make: impl for<'g> FnOnce(T, &'g Guard) -> Raw<'g>,
    ) -> Result<(), T> {
        let guard = self.raw_pin();
        let mut ctx = LockCtx::new(self.serial());
        if !self.lock_holder(&mut ctx, index, &guard) {
            return Err(value);
        }
        let node = ctx.last();
        let h = node.height();
        let s = slot_of(index, h);
        if h > 1 {
            // A lone entry: a new value that fits takes its place; one that
            // does not gets a leaf there, with the entry's tags.
            let Slot::Lone(w) = node.slot(s, &guard) else {
                return Err(value);
            };
            let old = lone_leaf_word(lone_bits(h, w, index).expect("the holder holds the index"));
            // SAFETY: the value is a lone entry's, read under the lock.
            if !unsafe { O::with_value(word(old), pred) } {
                return Err(value);
            }
            let new = make(value, &guard);
            let w = word(new);
            if let Some(lone) = (w & 1 == 1).then(|| lone_word(h, index, (w >> 1) as u64)).flatten() {
                node.set_word(s, lone);
            } else {
                let leaf = Node::new(1, index);
                let ls = slot_of(index, 1);
                leaf.set_raw(ls, new);
                leaf.add_count(1);
                for t in 0..NUM_TAGS {
                    if node.tag_bits_relaxed(t) & bit(s) != 0 {
                        leaf.set_tag_bit(t, ls);
                    }
                }
                node.set_child(s, Owned::new(leaf).into_shared(&guard));
            }
            return Ok(());
        }
        let old = node.raw(s, &guard);
        // SAFETY: the item is in a slot of a leaf we hold locked.
        if old.is_null() || !unsafe { O::with_value(word(old), pred) } {
            return Err(value);
        }
        let run = node.run_at(s, O::INLINE);
        let new = make(value, &guard);
        for x in slots_of(run) {
            node.set_raw(x, new);
        }
        // SAFETY: the old item left every slot it was in, under the leaf
        // lock; it is retired once, past every pinned reader.
        unsafe { retire_word::<V, O>(old, &guard) };
        Ok(())
    }

    /// Rewrites the tag bits of the pointer in every slot of the run
    /// holding `index` (the same item, differently tagged: an item policy's
    /// own use of the bits its item's alignment leaves free), if `pred`
    /// (called under the leaf lock) accepts the item. Nothing is retired.
    /// False if there is no item or `pred` refuses. Trees of pointers only
    /// (an inline tree's words are values, with no tag bits).
    pub(crate) fn retag_with(&self, index: u64, pred: impl FnOnce(&V) -> bool, tag: usize) -> bool {
        const { assert!(!O::INLINE, "inline words carry no tag") };
        let guard = self.raw_pin();
        let mut ctx = LockCtx::new(self.serial());
        if !self.lock_holder(&mut ctx, index, &guard) {
            return false;
        }
        let leaf = ctx.last();
        // A tree of pointers has no lone entries: the holder is the leaf.
        debug_assert!(leaf.is_leaf(), "a lone entry in a tree of pointers");
        let s = slot_of(index, 1);
        let item = leaf.item(s, &guard);
        // SAFETY: the item is in a slot of a leaf we hold locked, so it is
        // not retired; `as_ref` strips the old tag.
        match unsafe { item.as_ref() } {
            Some(v) if pred(v) => {}
            _ => return false,
        }
        let run = leaf.run_at(s, false);
        let tagged = erase(item.with_tag(tag));
        for x in slots_of(run) {
            leaf.set_raw(x, tagged);
        }
        true
    }

    /// Locks the node that holds `index` (the root lock too in `Serial`
    /// mode): its leaf, or the inner node whose slot holds its lone entry;
    /// from a validated optimistic descent, or by ladder locking from the
    /// root. False, with nothing locked, if `index` is not in the tree.
    fn lock_holder<'a>(&'a self, ctx: &mut LockCtx<'a, V>, index: u64, guard: &'a Guard) -> bool {
        let mut started = false;
        if self.mode() == Mode::Optimistic {
            let node = match self.find(index, guard) {
                None => return false, // Linearizes at the lock-free read.
                Some(Found::Leaf(n, _) | Found::Lone(n, _, _)) => n,
            };
            let lock = node.lock.lock();
            if node.is_dead() {
                self.failed_validations.incr();
            } else {
                // A lone entry may have made room for a node since: the
                // ladder below goes on from here.
                ctx.push_locked(node, Some(lock));
                started = true;
            }
        }
        if !started && !self.start_at_root(ctx, index, false, guard) {
            return false;
        }
        loop {
            let node = ctx.last();
            if node.is_leaf() {
                return true;
            }
            match next_on_path(node, slot_of(index, node.height()), index, guard) {
                Next::Down(child) => ctx.ladder_step(child),
                Next::Lone => return true,
                Next::Missing => {
                    ctx.reset();
                    return false;
                }
            }
        }
    }

    /// After a removal at the bottom of `ctx`: unlink emptied nodes and clear
    /// parents' tag bits upward through the held locks; then, if the root
    /// lock is still held, empty the tree or make a root's only child the
    /// root, as often as that applies.
    fn walk_up_remove<'a>(&'a self, ctx: &mut LockCtx<'a, V>, index: u64, guard: &'a Guard) {
        for d in (ctx.top..ctx.depth - 1).rev() {
            let (parent, child) = (ctx.node(d), ctx.node(d + 1));
            let ps = slot_of(index, parent.height());
            if child.count() == 0 {
                let shared = parent.child(ps, guard);
                parent.set_child(ps, Shared::null());
                for t in 0..NUM_TAGS {
                    parent.clear_tag_bit(t, ps);
                }
                parent.add_count(-1);
                child.mark_dead();
                // SAFETY: the child is unlinked and dead; lock-free readers
                // that reached it are pinned, and lockers validate `dead`.
                unsafe { guard.defer_destroy(shared) };
            } else {
                let mut changed = false;
                for t in 0..NUM_TAGS {
                    if !child.any_tag(t) {
                        changed |= parent.clear_tag_bit(t, ps);
                    }
                }
                if !changed {
                    break;
                }
            }
        }
        if !ctx.at_root {
            return;
        }
        // We hold the root lock and the root's lock: empty or shrink.
        ctx.release_below_first();
        // Acquire: pairs with the Release stores of the root.
        let mut root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: linked, and we hold the root lock.
        let mut r = unsafe { root.deref() };
        if r.count() == 0 {
            r.mark_dead();
            // Release: pairs with the Acquire loads of the root in lookups.
            self.root.store(Shared::null(), Ordering::Release);
            // SAFETY: unlinked and dead; see `defer_destroy` above.
            unsafe { guard.defer_destroy(root) };
            return;
        }
        let mut held: Option<MutexGuard<'a, ()>> = None;
        while !r.is_leaf() && r.count() == 1 {
            let Some(child) = (0..super::SLOTS).map(|s| r.child(s, guard)).find(|c| !c.is_null()) else {
                break;
            };
            // SAFETY: linked under the root, which we hold locked.
            let c = unsafe { child.deref() };
            let c_lock = if ctx.serial { None } else { Some(c.lock.lock()) };
            r.mark_dead();
            // Release: publishes the child as root; pairs with the Acquire
            // loads of the root in lookups. Readers still holding the old
            // root see the same child in its slot.
            self.root.store(child, Ordering::Release);
            // SAFETY: the old root is unlinked and dead; readers that hold it
            // are pinned.
            unsafe { guard.defer_destroy(root) };
            held = c_lock;
            root = child;
            r = c;
        }
        drop(held);
    }
}

impl<V: Send + Sync + 'static> RadixTree<V, Boxed> {
    /// Inserts `value` at `index`; gives it back if the index is occupied.
    pub fn insert(&self, index: u64, value: V) -> Result<(), V> {
        self.insert_with(index, value, |v, guard| Owned::new(v).into_shared(guard))
    }

    /// Inserts `value` as one multi-index entry covering the `2^order`
    /// indexes from `first` (which must be a multiple of `2^order`;
    /// `order` at most [`SHIFT`](super::SHIFT), so that the entry fits in
    /// one leaf); gives it back if any of them is occupied. Every index of
    /// the run then finds the value (`get`, gang lookups, which return it
    /// once per index), `len` counts each index, and `remove` (or `take`)
    /// of any of them removes the whole entry. Tags stay per index.
    ///
    /// # Panics
    /// If `order` or `first` break the rule above.
    pub fn insert_run(&self, first: u64, order: u32, value: V) -> Result<(), V> {
        self.insert_run_with(first, order, value, |v, guard| Owned::new(v).into_shared(guard))
    }

    /// Replaces the entry covering `index` (every index of a multi-index
    /// entry) with `value`; gives `value` back if there is none. Lock-free
    /// readers find the old value or the new one at each index.
    pub fn replace(&self, index: u64, value: V) -> Result<(), V> {
        self.replace_with(index, |_| true, value, |v, guard| Owned::new(v).into_shared(guard))
    }
}

impl<V: Word> RadixTree<V, Inline> {
    /// Inserts `value` at `index`, in the slot itself; gives it back if the
    /// index is occupied.
    pub fn insert(&self, index: u64, value: V) -> Result<(), V> {
        self.insert_raw(index, 0, value, inline_item)
    }

    /// Replaces the entry at `index` with `value`; gives `value` back if
    /// there is none. Lock-free readers find the old value or the new one.
    pub fn replace(&self, index: u64, value: V) -> Result<(), V> {
        self.replace_raw(index, |_| true, value, inline_item)
    }
}

/// Why an optimistic start did not happen.
enum Start {
    /// The entry is not there (or, for clear-tag, has no tag); linearizes
    /// at the lock-free read.
    Missing,
    /// For set-tag: the entry has the tag already (linearizes at the read).
    Tagged,
    /// Validation failed or no entry point exists: use the root.
    Fallback,
}
use Start::{Fallback, Missing, Tagged};
