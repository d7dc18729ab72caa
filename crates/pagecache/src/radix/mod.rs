//! A radix tree keyed by `u64` with per-node locks, tags, lock-free lookups,
//! and three writer protocols (seed 002, "A Concurrent Pagecache", §2 and §5).
//!
//! # Layout
//! Nodes of [`SLOTS`] slots (64; 4 under loom), held in the node itself,
//! consume [`SHIFT`] bits of the
//! index per level. A leaf (height 1) holds items, owned by the tree as
//! its item policy [`Own`] says (boxed by default); an inner node holds child nodes. The tree grows at the top when a
//! larger index arrives (the old root goes to slot 0 of a new root) and
//! shrinks when a removal that holds the root lock leaves the root empty or
//! with one child at slot 0. Unlinked nodes and removed items are retired to
//! the epoch collector and stay readable until no reader can hold them.
//!
//! # Multi-index entries
//! [`RadixTree::insert_run`] stores one item in every slot of an aligned
//! run of `2^order` indexes inside one leaf (`order <= SHIFT`): the same
//! pointer in each slot, as the XArray stores a large folio in every slot
//! it covers (the XArray's sibling entries point back to a head slot; a
//! lookup here needs no second load). A run is written and cleared slot by
//! slot under the leaf lock, so a lock-free reader can see part of it, but
//! every slot it finds filled holds an item covering that index. The run
//! of a slot is recovered from the slots themselves (the adjacent slots
//! holding the same pointer), so removals and replacements need no size
//! stored with the item: `remove` of any index of a run removes all of it.
//! `len` and gang lookups count and return each index.
//!
//! # Tags
//! [`NUM_TAGS`] tags ([`Tag::DIRTY`], [`Tag::WRITEBACK`], [`Tag::ACCESSED`],
//! [`Tag::PARTIAL`]), one bitmap per tag per node. After quiescence a node's
//! bit for a slot is set if and only if some entry below that slot has the
//! tag; at every instant a tagged child has its bit set in its parent (I1),
//! because tags are set top-down (uni-directional) and cleared bottom-up.
//!
//! # Lookups
//! `get`, `get_tag`, `gang_lookup` and `gang_lookup_tag` take no lock: they
//! load the root and the slots with `Acquire` under an epoch guard. A gang
//! lookup behaves like a series of single lookups, not a snapshot: every
//! entry it returns was present at some instant during the call, every entry
//! present during the whole call is returned (up to `max`), and entries
//! inserted or removed during the call may or may not appear. A tagged gang
//! lookup returns entries that were present with the tag's bit set at some
//! instant during the call (the slot is re-read after the bitmap).
//!
//! # Writers: the three [`Mode`]s
//! - `Serial`: one tree lock (the root lock) serialises all writers; no node
//!   lock is taken. This is the "lockless pagecache" baseline of §2.3.
//! - `LockCoupled`: `insert` and `set_tag` walk down with ladder locking
//!   (§2.4.1): a node's lock is held only until its child's is taken.
//!   `remove` and `clear_tag` use path locking (§2.4.2): they keep the locks
//!   of the path but release every lock above the lowest termination point,
//!   a node the upward walk will never pass. The held locks live in an
//!   explicit lock context, [`write::LockCtx`], as in §2.4.3.
//! - `Optimistic` (§5): descend without locks to the lowest node the
//!   operation must change, lock it, validate that it is not dead and that
//!   the condition that made it the entry point still holds, and continue
//!   with coupled locking from there; if validation fails, release and run
//!   the `LockCoupled` protocol from the root.
//!
//! # Lock order
//! The root lock before any node lock; a parent's lock before its child's.
//! Nobody locks upward: path locking keeps the upper locks instead, and an
//! optimistic operation that must go up releases everything and restarts.
//!
//! # Termination conditions (checked on the way down, under the node lock)
//! - clear-tag `t` at node N whose path slot is `s`: N has a tag-`t` bit other
//!   than `s` (N stays tagged, so its parent is untouched).
//! - remove at N: N has at least two children (it stays non-empty) and, for
//!   every tag, N's bitmap has no bit `s` or has another bit as well. At the
//!   root the count must be at least three, so that a removal that may leave
//!   the root with one child keeps the root lock and can shrink the tree.
//!
//! `set_tag` on a missing index may have set bits on the way down before
//! finding out; it then runs a clear-tag walk for that index that clears
//! every bit whose subtree holds no tagged entry (a lock-free existence check
//! first makes this rare).

pub(crate) mod node;
pub(crate) mod write;

#[cfg(test)]
mod tests;

use std::marker::PhantomData;

use crate::Mode;
use crate::counter::Counter;
use crate::sync::epoch::{self, Atomic, Shared};
use crate::sync::{Domain, Mutex, Ordering};

pub use node::{MAX_HEIGHT, NUM_TAGS, SHIFT, SLOTS};
use node::{Node, bit, max_index, slot_of};

/// A tag: an index into the per-node tag bitmaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(u8);

impl Tag {
    /// Pages whose contents differ from the backing store.
    pub const DIRTY: Tag = Tag(0);
    /// Pages being written back.
    pub const WRITEBACK: Tag = Tag(1);
    /// Pages hit since the CLOCK hand last passed (the page cache's reference
    /// bit, on a folio's first slot).
    pub const ACCESSED: Tag = Tag(2);
    /// Pages shorter than the page size (the end of a file), used by the page cache.
    pub const PARTIAL: Tag = Tag(3);
    /// Every tag.
    pub const ALL: [Tag; NUM_TAGS] = [Tag::DIRTY, Tag::WRITEBACK, Tag::ACCESSED, Tag::PARTIAL];

    /// The tag with this number, if it is below [`NUM_TAGS`].
    pub fn new(n: u8) -> Option<Tag> {
        (usize::from(n) < NUM_TAGS).then_some(Tag(n))
    }

    pub(crate) fn idx(self) -> usize {
        usize::from(self.0)
    }
}

/// An epoch guard for guard-bound lookups ([`RadixTree::get`],
/// [`RadixTree::gang_lookup_in`]). Hold it briefly: while any guard is held,
/// nothing retired after it was taken can be freed.
pub struct Guard {
    pub(crate) inner: epoch::Guard,
}

/// How a tree owns the items its leaf slots point to: how an item removed
/// from a slot is retired (after the epoch grace period) and how the items
/// left in a dropped tree are freed. The default, [`Boxed`], gives each
/// value its own heap allocation; the page cache stores pages directly,
/// the slot pointing at the page and standing for one of its references.
///
/// # Safety
/// `retire` must not free or invalidate the item before every guard pinned
/// at the time of the call is dropped: lock-free readers still dereference
/// it until then.
pub unsafe trait Own<V>: 'static {
    /// Retires an item that has left its slot.
    ///
    /// # Safety
    /// `item` was in a slot of a tree with this policy and is no longer in
    /// any; it is retired once.
    unsafe fn retire(item: Shared<'_, V>, guard: &epoch::Guard);

    /// Frees an item of a tree being dropped.
    ///
    /// # Safety
    /// As for `retire`, and no other thread can reach the item.
    unsafe fn free(item: Shared<'_, V>);
}

/// The default item policy: each value boxed, freed after the grace period.
pub struct Boxed;

// SAFETY: `defer_destroy` runs the destructor only after every guard pinned
// before it is dropped.
unsafe impl<V: Send + 'static> Own<V> for Boxed {
    unsafe fn retire(item: Shared<'_, V>, guard: &epoch::Guard) {
        // SAFETY: per the contract the item is unlinked and retired once;
        // readers that loaded it are pinned, and the destructor runs after
        // they unpin.
        unsafe { guard.defer_destroy(item) };
    }

    unsafe fn free(item: Shared<'_, V>) {
        // SAFETY: per the contract the item is exclusively ours, from
        // `Owned::new` in `insert`.
        drop(unsafe { item.into_owned() });
    }
}

/// A concurrent radix tree from `u64` to `V`. See the module docs.
pub struct RadixTree<V: Send + Sync + 'static, O: Own<V> = Boxed> {
    mode: Mode,
    /// The root node; null for an empty tree. Written under `root_lock`.
    pub(crate) root: Atomic<Node<V>>,
    /// Guards `root` (growing, shrinking, emptying); in `Mode::Serial` it is
    /// the single writer lock.
    pub(crate) root_lock: Mutex<()>,
    len: Counter,
    /// Optimistic starts whose validation under the lock failed (rare, so
    /// one unpadded cell).
    pub(crate) failed_validations: Counter,
    domain: Domain,
    _owns: PhantomData<(V, O)>,
}

// SAFETY: the tree owns its items (per its policy `O`) and hands out `&V` to any
// thread; `V: Send + Sync` makes both sound. Nodes are only reached through
// the epoch protocol and the node locks.
unsafe impl<V: Send + Sync + 'static, O: Own<V>> Send for RadixTree<V, O> {}
// SAFETY: as above; every shared mutation goes through atomics and locks.
unsafe impl<V: Send + Sync + 'static, O: Own<V>> Sync for RadixTree<V, O> {}

impl<V: Send + Sync + 'static, O: Own<V>> std::fmt::Debug for RadixTree<V, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RadixTree")
            .field("mode", &self.mode)
            .field("len", &self.len())
            .finish()
    }
}

impl<V: Send + Sync + 'static> RadixTree<V> {
    /// An empty tree whose writers follow `mode`.
    pub fn new(mode: Mode) -> Self {
        Self::with_domain(mode, Domain::new())
    }
}

impl<V: Send + Sync + 'static, O: Own<V>> RadixTree<V, O> {
    pub(crate) fn with_domain(mode: Mode, domain: Domain) -> Self {
        Self::with_len_counter(mode, domain, Counter::new())
    }

    /// A tree whose length is one unpadded counter instead of sharded
    /// cache-padded cells: for the page cache's per-inode trees, of which
    /// there are many and each is small (2 KiB of padding would be most of
    /// an inode entry).
    pub(crate) fn with_domain_compact(mode: Mode, domain: Domain) -> Self {
        Self::with_len_counter(mode, domain, Counter::single())
    }

    fn with_len_counter(mode: Mode, domain: Domain, len: Counter) -> Self {
        Self {
            mode,
            root: Atomic::null(),
            root_lock: Mutex::new(()),
            len,
            failed_validations: Counter::single(),
            domain,
            _owns: PhantomData,
        }
    }

    /// The writer protocol chosen at construction.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Pins the current thread for guard-bound lookups.
    pub fn pin(&self) -> Guard {
        Guard {
            inner: self.domain.pin(),
        }
    }

    pub(crate) fn raw_pin(&self) -> epoch::Guard {
        self.domain.pin()
    }

    /// How many optimistic starts failed validation under the node lock and
    /// fell back to the coupled protocol from the root (`Mode::Optimistic`).
    pub fn failed_validations(&self) -> u64 {
        self.failed_validations.get()
    }

    /// Number of items (exact when no writer runs).
    pub fn len(&self) -> usize {
        self.len.get() as usize
    }

    /// Whether the tree holds no item.
    pub fn is_empty(&self) -> bool {
        // Acquire: pairs with the Release stores of the root in write.rs.
        self.root.load(Ordering::Acquire, &self.raw_pin()).is_null()
    }

    /// The current height (0 for an empty tree).
    pub fn height(&self) -> usize {
        let guard = self.raw_pin();
        // Acquire: pairs with the Release stores of the root in write.rs.
        let root = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: the root is retired only after being unlinked, and `guard`
        // pins the epoch, so it is not freed while we read it.
        unsafe { root.as_ref() }.map_or(0, |r| r.height)
    }

    /// The leaf holding `index` and the slot, or None. Lock-free.
    #[inline]
    pub(crate) fn find_leaf<'g>(&self, index: u64, guard: &'g epoch::Guard) -> Option<(&'g Node<V>, usize)> {
        // Acquire: the root's initialisation is visible; pairs with the
        // Release stores of the root in write.rs.
        let root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: nodes reachable from the root while `guard` is pinned are
        // retired (if ever) only after being unlinked, so they outlive 'g.
        let mut node = unsafe { root.as_ref() }?;
        // The heights below the root are known without reading them: a
        // child's height is its parent's minus one, for every parent it
        // ever had (growing and shrinking move whole subtrees under a new
        // root or out from under an old one). Not reading each node's
        // height field keeps a lookup to one cache line per level, the
        // slot's.
        let mut height = node.height;
        if index > max_index(height) {
            return None;
        }
        loop {
            debug_assert_eq!(node.height, height, "heights decrease by one");
            let s = slot_of(index, height);
            if height == 1 {
                return Some((node, s));
            }
            let child = node.child(s, guard);
            // SAFETY: as above; the child was reachable when loaded.
            node = unsafe { child.as_ref() }?;
            height -= 1;
        }
    }

    pub(crate) fn lookup<'g>(&self, index: u64, guard: &'g epoch::Guard) -> Option<&'g V> {
        let (leaf, s) = self.find_leaf(index, guard)?;
        let item = leaf.item(s, guard);
        // SAFETY: a removed item is retired after its slot is cleared, and
        // `guard` pins the epoch, so the item outlives 'g.
        unsafe { item.as_ref() }
    }

    /// The item at `index`, valid while `guard` is held and the tree is
    /// borrowed. Lock-free.
    ///
    /// The reference borrows the tree as well as the guard: dropping the
    /// tree frees every item at once, whatever guards are held, so a
    /// reference that outlived the tree would dangle.
    ///
    /// ```compile_fail
    /// use pagecache::{Mode, RadixTree};
    /// let tree = RadixTree::new(Mode::LockCoupled);
    /// tree.insert(1, String::from("one")).unwrap();
    /// let guard = tree.pin();
    /// let item = tree.get(1, &guard).unwrap();
    /// drop(tree); // error: `tree` is still borrowed by `item`
    /// assert_eq!(item, "one");
    /// ```
    pub fn get<'g>(&'g self, index: u64, guard: &'g Guard) -> Option<&'g V> {
        self.lookup(index, &guard.inner)
    }

    /// A clone of the item at `index`. Lock-free.
    pub fn get_cloned(&self, index: u64) -> Option<V>
    where
        V: Clone,
    {
        self.lookup(index, &self.raw_pin()).cloned()
    }

    /// Whether `index` is present. Lock-free.
    pub fn contains(&self, index: u64) -> bool {
        self.lookup(index, &self.raw_pin()).is_some()
    }

    /// Whether `index` is present and has `tag`. Lock-free.
    pub fn get_tag(&self, index: u64, tag: Tag) -> bool {
        let guard = self.raw_pin();
        match self.find_leaf(index, &guard) {
            Some((leaf, s)) => !leaf.item(s, &guard).is_null() && leaf.tag_bits(tag.idx()) & bit(s) != 0,
            None => false,
        }
    }

    /// Up to `max` entries with index `>= first`, in index order, valid while
    /// `guard` is held and the tree is borrowed. Lock-free; a series of
    /// single lookups, not a snapshot.
    ///
    /// ```compile_fail
    /// use pagecache::{Mode, RadixTree};
    /// let tree = RadixTree::new(Mode::Optimistic);
    /// tree.insert(1, String::from("one")).unwrap();
    /// let guard = tree.pin();
    /// let items = tree.gang_lookup_in(0, 8, &guard);
    /// drop(tree); // error: `tree` is still borrowed by `items`
    /// assert_eq!(items[0].1, "one");
    /// ```
    pub fn gang_lookup_in<'g>(&'g self, first: u64, max: usize, guard: &'g Guard) -> Vec<(u64, &'g V)> {
        self.gang(first, max, None, &guard.inner)
    }

    /// Like [`gang_lookup_in`](Self::gang_lookup_in), for entries with `tag`.
    ///
    /// ```compile_fail
    /// use pagecache::{Mode, RadixTree, Tag};
    /// let tree = RadixTree::new(Mode::Serial);
    /// tree.insert(1, String::from("one")).unwrap();
    /// tree.set_tag(1, Tag::DIRTY);
    /// let guard = tree.pin();
    /// let items = tree.gang_lookup_tag_in(0, 8, Tag::DIRTY, &guard);
    /// drop(tree); // error: `tree` is still borrowed by `items`
    /// assert_eq!(items[0].1, "one");
    /// ```
    pub fn gang_lookup_tag_in<'g>(&'g self, first: u64, max: usize, tag: Tag, guard: &'g Guard) -> Vec<(u64, &'g V)> {
        self.gang(first, max, Some(tag.idx()), &guard.inner)
    }

    /// Up to `max` entries with index `>= first`, cloned.
    pub fn gang_lookup(&self, first: u64, max: usize) -> Vec<(u64, V)>
    where
        V: Clone,
    {
        let guard = self.raw_pin();
        self.gang(first, max, None, &guard)
            .into_iter()
            .map(|(k, v)| (k, v.clone()))
            .collect()
    }

    /// Up to `max` entries with index `>= first` that have `tag`, cloned.
    pub fn gang_lookup_tag(&self, first: u64, max: usize, tag: Tag) -> Vec<(u64, V)>
    where
        V: Clone,
    {
        let guard = self.raw_pin();
        self.gang(first, max, Some(tag.idx()), &guard)
            .into_iter()
            .map(|(k, v)| (k, v.clone()))
            .collect()
    }

    /// The indexes (only) of up to `max` entries from `first`, optionally
    /// with `tag`.
    pub fn gang_keys(&self, first: u64, max: usize, tag: Option<Tag>) -> Vec<u64> {
        let guard = self.raw_pin();
        self.gang(first, max, tag.map(Tag::idx), &guard)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    pub(crate) fn gang<'g>(
        &self,
        first: u64,
        max: usize,
        tag: Option<usize>,
        guard: &'g epoch::Guard,
    ) -> Vec<(u64, &'g V)> {
        self.gang_with(first, max, tag, false, guard)
    }

    /// Like `gang`, but a multi-index entry is returned once, at the first
    /// of its indexes the lookup reaches (so `max` counts entries).
    pub(crate) fn gang_runs<'g>(
        &self,
        first: u64,
        max: usize,
        tag: Option<usize>,
        guard: &'g epoch::Guard,
    ) -> Vec<(u64, &'g V)> {
        self.gang_with(first, max, tag, true, guard)
    }

    fn gang_with<'g>(
        &self,
        first: u64,
        max: usize,
        tag: Option<usize>,
        runs: bool,
        guard: &'g epoch::Guard,
    ) -> Vec<(u64, &'g V)> {
        let mut out = Vec::new();
        if max == 0 {
            return out;
        }
        // Acquire: pairs with the Release stores of the root in write.rs.
        let root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: the root is retired only after being unlinked; `guard` pins the epoch.
        let Some(root) = (unsafe { root.as_ref() }) else {
            return out;
        };
        if first > max_index(root.height) {
            return out;
        }
        Self::collect(root, 0, first, tag, max, runs, &mut out, guard);
        out
    }

    /// Depth-first, in slot order, from the slot of `first`. Returns true
    /// once `out` holds `max` entries. With `runs`, an item equal to the
    /// one pushed from the previous slot of the same leaf is skipped.
    #[allow(clippy::too_many_arguments)]
    fn collect<'g>(
        node: &'g Node<V>,
        base: u64,
        first: u64,
        tag: Option<usize>,
        max: usize,
        runs: bool,
        out: &mut Vec<(u64, &'g V)>,
        guard: &'g epoch::Guard,
    ) -> bool {
        let shift = SHIFT as usize * (node.height - 1);
        let start = slot_of(first.max(base), node.height);
        let mut prev = Shared::null();
        for s in start..SLOTS {
            let child_base = u128::from(base) + ((s as u128) << shift);
            if child_base > u128::from(u64::MAX) {
                break;
            }
            let child_base = child_base as u64;
            if let Some(t) = tag
                && node.tag_bits(t) & bit(s) == 0
            {
                continue;
            }
            if node.is_leaf() {
                let item = node.item(s, guard);
                if item.is_null() || (runs && item == prev) {
                    continue;
                }
                prev = item;
                if let Some(t) = tag {
                    // Re-read the slot after the bitmap (which was read after
                    // the first load): the same item was in the slot while the
                    // bit was set. Epoch pinning rules out reuse of the address.
                    if node.tag_bits(t) & bit(s) == 0 || node.item(s, guard) != item {
                        continue;
                    }
                }
                // SAFETY: the item was in the slot while `guard` was pinned;
                // it is retired only after leaving the slot.
                out.push((child_base, unsafe { item.deref() }));
                if out.len() >= max {
                    return true;
                }
            } else {
                let child = node.child(s, guard);
                // SAFETY: the child was reachable while `guard` was pinned.
                if let Some(c) = unsafe { child.as_ref() }
                    && Self::collect(c, child_base, first.max(child_base), tag, max, runs, out, guard)
                {
                    return true;
                }
            }
        }
        false
    }

    /// Checks the structural invariants: counts match the occupied slots,
    /// no non-root node is empty, heights decrease by one, no reachable node
    /// is dead, a tag bit implies an occupied slot, and an inner node's bit
    /// for a child is set if and only if the child has a bit of that tag; the
    /// number of items matches `len()`. Call it only when no writer runs.
    pub fn check_invariants(&self) -> Result<(), String> {
        let guard = self.raw_pin();
        // Acquire: pairs with the Release stores of the root in write.rs.
        let root = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: `guard` pins the epoch; the root is reachable.
        let Some(root) = (unsafe { root.as_ref() }) else {
            return if self.len.get() == 0 {
                Ok(())
            } else {
                Err(format!("empty root but len {}", self.len()))
            };
        };
        let mut seen = std::collections::HashSet::new();
        let items = Self::check_node(root, true, &mut seen, &guard)?;
        if items != self.len() {
            return Err(format!("{items} items reachable but len {}", self.len()));
        }
        Ok(())
    }

    fn check_node(
        node: &Node<V>,
        is_root: bool,
        seen: &mut std::collections::HashSet<usize>,
        guard: &epoch::Guard,
    ) -> Result<usize, String> {
        if node.is_dead() {
            return Err(format!("dead node of height {} reachable", node.height));
        }
        if node.is_leaf() {
            Self::check_runs(node, seen, guard)?;
        }
        let mut occupied = 0;
        let mut items = 0;
        for s in 0..SLOTS {
            let present = node.occupied(s, guard);
            occupied += usize::from(present);
            for t in 0..NUM_TAGS {
                let tagged = node.tag_bits(t) & bit(s) != 0;
                if tagged && !present {
                    return Err(format!("tag {t} set on empty slot {s} at height {}", node.height));
                }
            }
            if node.is_leaf() {
                items += usize::from(present);
            } else {
                let child = node.child(s, guard);
                // SAFETY: reachable while `guard` is pinned.
                if let Some(c) = unsafe { child.as_ref() } {
                    if c.height + 1 != node.height {
                        return Err(format!("child height {} under {}", c.height, node.height));
                    }
                    for t in 0..NUM_TAGS {
                        let parent_bit = node.tag_bits(t) & bit(s) != 0;
                        if parent_bit != c.any_tag(t) {
                            return Err(format!(
                                "tag {t}: parent bit {parent_bit} for slot {s} at height {} but child tagged {}",
                                node.height,
                                c.any_tag(t)
                            ));
                        }
                    }
                    items += Self::check_node(c, false, seen, guard)?;
                }
            }
        }
        if occupied != node.count() as usize {
            return Err(format!(
                "count {} but {occupied} occupied at height {}",
                node.count(),
                node.height
            ));
        }
        if occupied == 0 && !is_root {
            return Err(format!("empty non-root node at height {}", node.height));
        }
        if occupied == 0 && is_root {
            return Err("empty root left in the tree".into());
        }
        Ok(items)
    }

    /// Every run of equal items in a leaf (a multi-index entry) is aligned
    /// to its length, which is a power of two, and no item is in two runs.
    fn check_runs(
        leaf: &Node<V>,
        seen: &mut std::collections::HashSet<usize>,
        guard: &epoch::Guard,
    ) -> Result<(), String> {
        let mut s = 0;
        while s < SLOTS {
            let p = leaf.slot_addr(s, guard);
            if p == 0 {
                s += 1;
                continue;
            }
            let mut n = 1;
            while s + n < SLOTS && leaf.slot_addr(s + n, guard) == p {
                n += 1;
            }
            if !n.is_power_of_two() || s % n != 0 {
                return Err(format!("a run of {n} slots at slot {s} of a leaf"));
            }
            if !seen.insert(p) {
                return Err(format!("an item in two runs (again at slot {s} of a leaf)"));
            }
            s += n;
        }
        Ok(())
    }

    pub(crate) fn len_counter(&self) -> &Counter {
        &self.len
    }
}

impl<V: Send + Sync + 'static, O: Own<V>> Drop for RadixTree<V, O> {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no other thread can reach the tree, so
        // no guard is needed and every node and item can be freed now.
        let guard = unsafe { epoch::unprotected() };
        let root = self.root.load(Ordering::Relaxed, guard);
        if !root.is_null() {
            // SAFETY: the tree is exclusively ours (see above) and the root
            // is a live node owned by the tree.
            unsafe { free_subtree::<V, O>(root, guard) };
        }
    }
}

/// Frees a node, its subtree and its items.
///
/// # Safety
/// No other thread may reach `node`, and it must be owned by the tree
/// (linked, not already retired).
unsafe fn free_subtree<V, O: Own<V>>(node: Shared<'_, Node<V>>, guard: &epoch::Guard) {
    // SAFETY: the caller guarantees exclusive access to a live node.
    let n = unsafe { node.deref() };
    for s in 0..SLOTS {
        if n.is_leaf() {
            let p = n.item(s, guard);
            // A multi-index entry fills adjacent slots: free it once, at the
            // first slot of its run.
            if !p.is_null() && (s == 0 || n.item(s - 1, guard) != p) {
                // SAFETY: the item is owned by this exclusive, live leaf.
                unsafe { O::free(p) };
            }
        } else {
            let p = n.child(s, guard);
            if !p.is_null() {
                // SAFETY: the child is owned by this exclusive, live node.
                unsafe { free_subtree::<V, O>(p, guard) };
            }
        }
    }
    // SAFETY: every child and item is freed; the node itself is owned here.
    drop(unsafe { node.into_owned() });
}
