//! A radix tree keyed by `u64` with per-node locks, tags, lock-free lookups,
//! and three writer protocols (seed 002, "A Concurrent Pagecache", §2 and §5).
//!
//! # Layout
//! Nodes of [`SLOTS`] slots (64; 4 under loom), held in the node itself,
//! consume [`SHIFT`] bits of the index per level. A leaf (height 1) holds
//! items, owned by the tree as its item policy [`Own`] says: boxed by
//! default ([`Boxed`]), or, for small `Copy` values, kept in the slot word
//! itself ([`Inline`], read by copy). An inner node holds child nodes.
//!
//! Levels that would hold a single child are skipped (`node.rs`): a child
//! can sit several levels below its parent, its range checked against the
//! index on the way down, so a sparse tree holds only its dense top and the
//! nodes where paths fork, and a lone index under an empty slot gets its leaf
//! directly there. In a tree of inline values a lone index needs no leaf
//! at all: it is kept in that slot with its value (a *lone entry*, the
//! lazy expansion of an adaptive radix tree; `node.rs`), until a second
//! index in the slot's range moves it into a node. The root is the lowest node whose range holds every
//! entry: the tree grows at the top when an index outside it arrives (a new
//! root whose range holds both, with the old root and the new index's leaf
//! in two of its slots) and shrinks when a removal that holds the root lock
//! leaves the root empty or with one child (which becomes the root). Inner
//! nodes are not merged when a removal leaves them with one child. Unlinked
//! nodes and removed items are retired to the epoch collector and stay
//! readable until no reader can hold them.
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
//! `len` and gang lookups count and return each index. Trees of inline
//! values have no multi-index entries.
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
use crate::sync::epoch::{self, Atomic, Owned, Shared};
use crate::sync::{Domain, Mutex, Ordering};

pub use node::{MAX_HEIGHT, NUM_TAGS, SHIFT, SLOTS};
use node::{Node, Raw, Slot, Step, bit, lone_bits, lone_index, lone_leaf_word, raw, slot_of, unerase, word};

/// The size of one tree node (a leaf or an inner node): its header and
/// [`SLOTS`] slots of one word each.
pub const NODE_BYTES: usize = std::mem::size_of::<Node<()>>();

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
/// [`RadixTree::get_copied`], [`RadixTree::gang_lookup_in`]). Hold it
/// briefly: while any guard is held, nothing retired after it was taken can
/// be freed.
pub struct Guard {
    pub(crate) inner: epoch::Guard,
}

/// How a tree owns the items its leaf slots point to: how an item removed
/// from a slot is retired (after the epoch grace period) and how the items
/// left in a dropped tree are freed. The default, [`Boxed`], gives each
/// value its own heap allocation; [`Inline`] keeps small values in the slot
/// word itself; the page cache stores folios directly, the slot pointing at
/// the folio and standing for one of its references. A pointer policy may
/// keep a tag in the low bits its item's alignment leaves free (the page
/// cache keeps a folio's order and state there): the tree stores the whole
/// word, hands it to `retire` and `free` as it was stored, and strips the
/// tag wherever it dereferences an item.
///
/// # Safety
/// `retire` must not free or invalidate the item before every guard pinned
/// at the time of the call is dropped: lock-free readers still dereference
/// it until then. The hidden items are the tree's own and must keep their
/// defaults outside this crate.
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

    /// Whether a leaf word with bit 0 set is a value rather than a pointer
    /// (only [`Inline`]). Such a tree never hands out `&V` that outlives a
    /// call, and has no multi-index entries.
    #[doc(hidden)]
    const INLINE: bool = false;

    /// Calls `f` with the value that the non-null leaf word `w` stands for.
    ///
    /// # Safety
    /// `w` was read from a leaf slot of a tree with this policy under an
    /// epoch guard that is still pinned (or under the leaf's lock).
    #[doc(hidden)]
    unsafe fn with_value<R>(w: usize, f: impl FnOnce(&V) -> R) -> R {
        // SAFETY: per the contract the word is a pointer to a live item
        // (`deref` strips the tag bits a policy may keep in it).
        f(unsafe { unerase::<V>(raw(w)).deref() })
    }
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

/// A value that a tree with the [`Inline`] policy keeps in the slot word
/// itself: it converts to bits and back. Implemented for the integer types
/// (signed ones zigzag-encoded, so that small magnitudes have small bits).
pub trait Word: Copy + Send + Sync + 'static {
    /// The value as bits.
    fn to_bits(self) -> u64;
    /// The value whose [`to_bits`](Word::to_bits) gave `bits`.
    fn from_bits(bits: u64) -> Self;
}

macro_rules! unsigned_word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            #[inline]
            fn to_bits(self) -> u64 {
                self as u64
            }
            #[inline]
            fn from_bits(bits: u64) -> Self {
                bits as $t
            }
        }
    )*};
}
unsigned_word!(u8, u16, u32, u64, usize);

macro_rules! signed_word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            #[inline]
            fn to_bits(self) -> u64 {
                let v = self as i64;
                ((v << 1) ^ (v >> 63)) as u64
            }
            #[inline]
            fn from_bits(bits: u64) -> Self {
                (((bits >> 1) as i64) ^ -((bits & 1) as i64)) as $t
            }
        }
    )*};
}
signed_word!(i8, i16, i32, i64, isize);

/// The item policy of small `Copy` values ([`Word`]s) kept in the slot
/// itself: no allocation per entry and no load beyond the leaf's slot on a
/// lookup. A value's bits shifted left by one, with bit 0 set, are the slot's
/// word; a value whose bits do not fit in the word's other 63 bits (an
/// unsigned value of 2^63 or more, a signed one of magnitude 2^62 or more) is
/// boxed instead, and the slot holds the box's (even) address.
///
/// Such a tree is read by copy ([`RadixTree::get_copied`],
/// [`RadixTree::get_cloned`], [`RadixTree::gang_lookup`]): a slot that a
/// writer may overwrite cannot back a `&V`, so [`RadixTree::get`],
/// [`RadixTree::gang_lookup_in`] and [`RadixTree::gang_lookup_tag_in`] do
/// not compile for it:
///
/// ```compile_fail
/// use pagecache::radix::{Inline, RadixTree};
/// use pagecache::Mode;
/// let tree: RadixTree<u64, Inline> = RadixTree::with_policy(Mode::Optimistic);
/// tree.insert(1, 10).unwrap();
/// let guard = tree.pin();
/// let v: Option<&u64> = tree.get(1, &guard); // error: use `get_copied`
/// ```
///
/// Equal values in adjacent slots are separate entries, so these trees have
/// no multi-index entries (`insert_run`).
pub struct Inline;

// SAFETY: inline values need no retirement; a boxed one is destroyed by
// `defer_destroy`, after every guard pinned before it is dropped.
unsafe impl<V: Word> Own<V> for Inline {
    unsafe fn retire(item: Shared<'_, V>, guard: &epoch::Guard) {
        // SAFETY: the tree retires only even words, the boxes made by
        // `inline_item`; per the contract it is unlinked and retired once.
        unsafe { guard.defer_destroy(item) };
    }

    unsafe fn free(item: Shared<'_, V>) {
        // SAFETY: as above, a box of `inline_item`, exclusively ours.
        drop(unsafe { item.into_owned() });
    }

    const INLINE: bool = true;

    #[inline]
    unsafe fn with_value<R>(w: usize, f: impl FnOnce(&V) -> R) -> R {
        if w & 1 == 1 {
            f(&V::from_bits((w >> 1) as u64))
        } else {
            // SAFETY: an even word of an inline tree is a box of
            // `inline_item`, live while the caller's guard is pinned.
            f(unsafe { &*(w as *const V) })
        }
    }
}

/// The leaf word of `value` in an [`Inline`] tree.
fn inline_item<'g, V: Word>(value: V, guard: &'g epoch::Guard) -> Raw<'g> {
    let bits = value.to_bits();
    if bits <= (usize::MAX >> 1) as u64 {
        raw(((bits as usize) << 1) | 1)
    } else {
        let boxed = Owned::new(value).into_shared(guard);
        raw(boxed.as_raw() as usize)
    }
}

/// Whether a leaf word of a tree with policy `O` is a value (nothing to
/// retire or free).
#[inline]
fn is_value<V, O: Own<V>>(w: usize) -> bool {
    O::INLINE && w & 1 == 1
}

/// Retires a leaf word that left its last slot.
///
/// # Safety
/// As for [`Own::retire`]: the word was in the tree's slots and is in none
/// now, and it is retired once.
unsafe fn retire_word<V, O: Own<V>>(w: Raw<'_>, guard: &epoch::Guard) {
    let w = word(w);
    if !is_value::<V, O>(w) {
        // SAFETY: a pointer word of this policy; per the caller's contract.
        unsafe { O::retire(unerase(raw(w)), guard) };
    }
}

/// Where a lock-free search found an index (see [`RadixTree::find`]).
pub(crate) enum Found<'g, V> {
    /// Slot `s` of this leaf (which may be empty).
    Leaf(&'g Node<V>, usize),
    /// The lone entry in slot `s` of this inner node, and its value bits.
    Lone(&'g Node<V>, usize, u64),
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
    /// An empty tree of boxed values whose writers follow `mode`.
    pub fn new(mode: Mode) -> Self {
        Self::with_domain(mode, Domain::new())
    }
}

impl<V: Send + Sync + 'static, O: Own<V>> RadixTree<V, O> {
    /// An empty tree whose items follow the policy `O` and whose writers
    /// follow `mode`: `let t: RadixTree<u64, Inline> =
    /// RadixTree::with_policy(Mode::Optimistic);`.
    pub fn with_policy(mode: Mode) -> Self {
        Self::with_domain(mode, Domain::new())
    }

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

    /// The root's height (0 for an empty tree): the number of levels the
    /// range of the tree's entries needs, whether or not the levels between
    /// are skipped.
    pub fn height(&self) -> usize {
        let guard = self.raw_pin();
        // Acquire: pairs with the Release stores of the root in write.rs.
        let root = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: the root is retired only after being unlinked, and `guard`
        // pins the epoch, so it is not freed while we read it.
        unsafe { root.as_ref() }.map_or(0, Node::height)
    }

    /// The number of nodes in the tree (each [`NODE_BYTES`] bytes), for
    /// memory accounting. Exact when no writer runs.
    pub fn node_count(&self) -> usize {
        fn count<V>(node: &Node<V>, guard: &epoch::Guard) -> usize {
            1 + if node.is_leaf() {
                0
            } else {
                (0..SLOTS)
                    // SAFETY: reachable while `guard` is pinned.
                    .filter_map(|s| unsafe { node.child(s, guard).as_ref() })
                    .map(|c| count(c, guard))
                    .sum()
            }
        }
        let guard = self.raw_pin();
        // Acquire: pairs with the Release stores of the root in write.rs.
        let root = self.root.load(Ordering::Acquire, &guard);
        // SAFETY: reachable while `guard` is pinned.
        unsafe { root.as_ref() }.map_or(0, |r| count(r, &guard))
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
        if !node.covers(index) {
            return None;
        }
        // The height travels down with the descent (a child's comes with its
        // pointer), so no node header but the root's is read.
        let mut h = node.height();
        while h > 1 {
            match node.step(h, index, guard) {
                Step::Down(c, ch) => {
                    h = ch;
                    node = c;
                }
                // Lone entries are only in inline trees, which use `find`.
                Step::Empty | Step::Beside | Step::Lone(_) => return None,
            }
        }
        Some((node, slot_of(index, 1)))
    }

    /// Where `index` is, or would be, found: a leaf slot, or the lone entry
    /// of an inner slot. Lock-free.
    #[inline]
    pub(crate) fn find<'g>(&self, index: u64, guard: &'g epoch::Guard) -> Option<Found<'g, V>> {
        if !O::INLINE {
            return self.find_leaf(index, guard).map(|(n, s)| Found::Leaf(n, s));
        }
        // Acquire: pairs with the Release stores of the root in write.rs.
        let root = self.root.load(Ordering::Acquire, guard);
        // SAFETY: nodes reachable from the root while `guard` is pinned are
        // retired (if ever) only after being unlinked, so they outlive 'g.
        let mut node = unsafe { root.as_ref() }?;
        if !node.covers(index) {
            return None;
        }
        let mut h = node.height();
        while h > 1 {
            match node.step(h, index, guard) {
                Step::Down(c, ch) => {
                    h = ch;
                    node = c;
                }
                Step::Lone(w) => {
                    let bits = node::lone_bits(h, w, index)?;
                    return Some(Found::Lone(node, slot_of(index, h), bits));
                }
                Step::Empty | Step::Beside => return None,
            }
        }
        Some(Found::Leaf(node, slot_of(index, 1)))
    }

    /// The leaf word at `index` (null if absent), valid while `guard` is
    /// pinned; a lone entry's value as the leaf word it would have. Lock-free.
    #[inline]
    fn lookup_raw<'g>(&self, index: u64, guard: &'g epoch::Guard) -> Raw<'g> {
        match self.find(index, guard) {
            Some(Found::Leaf(leaf, s)) => leaf.raw(s, guard),
            Some(Found::Lone(_, _, bits)) => lone_leaf_word(bits),
            None => Shared::null(),
        }
    }

    /// The item at `index` of a tree of pointers (not [`Inline`]).
    pub(crate) fn lookup<'g>(&self, index: u64, guard: &'g epoch::Guard) -> Option<&'g V> {
        const { assert!(!O::INLINE, "an inline tree is read by copy") };
        let (leaf, s) = self.find_leaf(index, guard)?;
        let item = leaf.item(s, guard);
        // SAFETY: a removed item is retired after its slot is cleared, and
        // `guard` pins the epoch, so the item outlives 'g.
        unsafe { item.as_ref() }
    }

    /// The item at `index`, valid while `guard` is held and the tree is
    /// borrowed. Lock-free. Not for [`Inline`] trees (see there; use
    /// [`get_copied`](Self::get_copied)).
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

    /// A copy of the item at `index`, read under `guard`. Lock-free; the
    /// lookup of [`Inline`] trees.
    #[inline]
    pub fn get_copied(&self, index: u64, guard: &Guard) -> Option<V>
    where
        V: Copy,
    {
        let w = word(self.lookup_raw(index, &guard.inner));
        // SAFETY: read from a leaf slot under the pinned guard.
        (w != 0).then(|| unsafe { O::with_value(w, |v| *v) })
    }

    /// A clone of the item at `index`. Lock-free.
    pub fn get_cloned(&self, index: u64) -> Option<V>
    where
        V: Clone,
    {
        let guard = self.raw_pin();
        let w = word(self.lookup_raw(index, &guard));
        // SAFETY: read from a leaf slot under the pinned guard.
        (w != 0).then(|| unsafe { O::with_value(w, V::clone) })
    }

    /// Whether `index` is present. Lock-free.
    pub fn contains(&self, index: u64) -> bool {
        !self.lookup_raw(index, &self.raw_pin()).is_null()
    }

    /// Whether `index` is present and has `tag`. Lock-free.
    pub fn get_tag(&self, index: u64, tag: Tag) -> bool {
        let guard = self.raw_pin();
        match self.find(index, &guard) {
            Some(Found::Leaf(leaf, s)) => leaf.occupied(s) && leaf.tag_bits(tag.idx()) & bit(s) != 0,
            // A lone entry's tags are its slot's bits.
            Some(Found::Lone(node, s, _)) => node.tag_bits(tag.idx()) & bit(s) != 0,
            None => false,
        }
    }

    /// Up to `max` entries with index `>= first`, in index order, valid while
    /// `guard` is held and the tree is borrowed. Lock-free; a series of
    /// single lookups, not a snapshot. Not for [`Inline`] trees.
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
        self.gang_raw(first, max, None, false, &guard)
            .into_iter()
            // SAFETY: read from leaf slots under the pinned guard.
            .map(|(k, w)| (k, unsafe { O::with_value(word(w), V::clone) }))
            .collect()
    }

    /// Up to `max` entries with index `>= first` that have `tag`, cloned.
    pub fn gang_lookup_tag(&self, first: u64, max: usize, tag: Tag) -> Vec<(u64, V)>
    where
        V: Clone,
    {
        let guard = self.raw_pin();
        self.gang_raw(first, max, Some(tag.idx()), false, &guard)
            .into_iter()
            // SAFETY: read from leaf slots under the pinned guard.
            .map(|(k, w)| (k, unsafe { O::with_value(word(w), V::clone) }))
            .collect()
    }

    /// The indexes (only) of up to `max` entries from `first`, optionally
    /// with `tag`.
    pub fn gang_keys(&self, first: u64, max: usize, tag: Option<Tag>) -> Vec<u64> {
        let guard = self.raw_pin();
        self.gang_raw(first, max, tag.map(Tag::idx), false, &guard)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// [`gang_raw`](Self::gang_raw) for trees of pointers (not [`Inline`]).
    pub(crate) fn gang<'g>(
        &self,
        first: u64,
        max: usize,
        tag: Option<usize>,
        guard: &'g epoch::Guard,
    ) -> Vec<(u64, &'g V)> {
        const { assert!(!O::INLINE, "an inline tree is read by copy") };
        Self::deref_items(self.gang_raw(first, max, tag, false, guard))
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
        const { assert!(!O::INLINE, "an inline tree is read by copy") };
        Self::deref_items(self.gang_raw(first, max, tag, true, guard))
    }

    /// The items of leaf words of a tree of pointers, tags stripped.
    fn deref_items(words: Vec<(u64, Raw<'_>)>) -> Vec<(u64, &V)> {
        words
            .into_iter()
            // SAFETY: each word was in its slot while the caller's guard was
            // pinned, and an item is retired only after leaving its slot, so
            // it outlives the guard's lifetime; `deref` strips the tag bits
            // an item policy may keep in the word.
            .map(|(k, w)| (k, unsafe { unerase::<V>(w).deref() }))
            .collect()
    }

    /// Up to `max` entries (index and leaf word) with index `>= first`,
    /// optionally only those with tag `t`, in index order. With `runs`, a
    /// multi-index entry is returned once (trees of pointers only: equal
    /// words in an inline tree are separate entries).
    fn gang_raw<'g>(
        &self,
        first: u64,
        max: usize,
        tag: Option<usize>,
        runs: bool,
        guard: &'g epoch::Guard,
    ) -> Vec<(u64, Raw<'g>)> {
        debug_assert!(!(runs && O::INLINE), "inline trees have no runs");
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
        Self::collect(root, first, tag, max, runs, &mut out, guard);
        out
    }

    /// Depth-first, in slot order, from the slot of `first` (or the node's
    /// first slot if its range starts after `first`). Returns true once
    /// `out` holds `max` entries. With `runs`, an item equal to the one
    /// pushed from the previous slot of the same leaf is skipped.
    fn collect<'g>(
        node: &'g Node<V>,
        first: u64,
        tag: Option<usize>,
        max: usize,
        runs: bool,
        out: &mut Vec<(u64, Raw<'g>)>,
        guard: &'g epoch::Guard,
    ) -> bool {
        if first > node.last_index() {
            return false;
        }
        let h = node.height();
        let shift = SHIFT as usize * (h - 1);
        let start = if first <= node.base { 0 } else { slot_of(first, h) };
        let mut prev = Raw::null();
        for s in start..SLOTS {
            if let Some(t) = tag
                && node.tag_bits(t) & bit(s) == 0
            {
                continue;
            }
            if node.is_leaf() {
                let item = node.raw(s, guard);
                if item.is_null() || (runs && item == prev) {
                    continue;
                }
                prev = item;
                if let Some(t) = tag {
                    // Re-read the slot after the bitmap (which was read after
                    // the first load): the same item was in the slot while the
                    // bit was set. Epoch pinning rules out reuse of the address.
                    if node.tag_bits(t) & bit(s) == 0 || node.raw(s, guard) != item {
                        continue;
                    }
                }
                out.push((node.base + ((s as u64) << shift), item));
                if out.len() >= max {
                    return true;
                }
            } else {
                match node.slot(s, guard) {
                    Slot::Empty => {}
                    Slot::Child(c) => {
                        if Self::collect(c, first, tag, max, runs, out, guard) {
                            return true;
                        }
                    }
                    Slot::Lone(w) => {
                        let k = lone_index(node, s, w);
                        if k < first {
                            continue;
                        }
                        if let Some(t) = tag {
                            // As for a leaf slot: the bit, then the same word.
                            if node.tag_bits(t) & bit(s) == 0 || !matches!(node.slot(s, guard), Slot::Lone(x) if x == w)
                            {
                                continue;
                            }
                        }
                        let bits = lone_bits(h, w, k).expect("the entry's own index");
                        out.push((k, lone_leaf_word(bits)));
                        if out.len() >= max {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }

    /// Checks the structural invariants: counts match the occupied slots,
    /// no non-root node is empty, a child is below its parent and its range
    /// lies in its parent slot's, no reachable node is dead, a tag bit
    /// implies an occupied slot, and an inner node's bit for a child is set
    /// if and only if the child has a bit of that tag; the number of items
    /// matches `len()`. Call it only when no writer runs.
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
        if !root.covers(root.base) {
            return Err(format!(
                "root base {:#x} not aligned to height {}",
                root.base,
                root.height()
            ));
        }
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
        let h = node.height();
        if node.is_dead() {
            return Err(format!("dead node of height {h} reachable"));
        }
        if node.is_leaf() && !O::INLINE {
            Self::check_runs(node, seen)?;
        }
        let mut occupied = 0;
        let mut items = 0;
        for s in 0..SLOTS {
            let present = node.occupied(s);
            occupied += usize::from(present);
            for t in 0..NUM_TAGS {
                let tagged = node.tag_bits(t) & bit(s) != 0;
                if tagged && !present {
                    return Err(format!("tag {t} set on empty slot {s} at height {h}"));
                }
            }
            if node.is_leaf() {
                items += usize::from(present);
            } else if let Slot::Lone(w) = node.slot(s, guard) {
                if !O::INLINE {
                    return Err(format!("a lone entry in slot {s} at height {h} of a tree of pointers"));
                }
                let k = lone_index(node, s, w);
                if lone_bits(h, w, k).and_then(|b| node::lone_word(h, k, b)) != Some(w) {
                    return Err(format!(
                        "lone entry {w:#x} in slot {s} at height {h} does not round-trip"
                    ));
                }
                items += 1;
            } else {
                let child = node.child(s, guard);
                // SAFETY: reachable while `guard` is pinned.
                if let Some(c) = unsafe { child.as_ref() } {
                    if c.height() >= h {
                        return Err(format!("child height {} under {h}", c.height()));
                    }
                    let slot_base = node.base + ((s as u64) << (SHIFT as usize * (h - 1)));
                    if node::base_of(c.base, h - 1) != slot_base || !c.covers(c.base) {
                        return Err(format!(
                            "child range {:#x}/{} outside slot {s} ({slot_base:#x}) at height {h}",
                            c.base,
                            c.height()
                        ));
                    }
                    for t in 0..NUM_TAGS {
                        let parent_bit = node.tag_bits(t) & bit(s) != 0;
                        if parent_bit != c.any_tag(t) {
                            return Err(format!(
                                "tag {t}: parent bit {parent_bit} for slot {s} at height {h} but child tagged {}",
                                c.any_tag(t)
                            ));
                        }
                    }
                    items += Self::check_node(c, false, seen, guard)?;
                }
            }
        }
        if occupied != node.count() as usize {
            return Err(format!("count {} but {occupied} occupied at height {h}", node.count()));
        }
        if occupied == 0 && !is_root {
            return Err(format!("empty non-root node at height {h}"));
        }
        if occupied == 0 && is_root {
            return Err("empty root left in the tree".into());
        }
        Ok(items)
    }

    /// Every run of equal items in a leaf (a multi-index entry) is aligned
    /// to its length, which is a power of two, and no item is in two runs.
    fn check_runs(leaf: &Node<V>, seen: &mut std::collections::HashSet<usize>) -> Result<(), String> {
        let mut s = 0;
        while s < SLOTS {
            let p = leaf.slot_addr(s);
            if p == 0 {
                s += 1;
                continue;
            }
            let mut n = 1;
            while s + n < SLOTS && leaf.slot_addr(s + n) == p {
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
            let p = n.slot_addr(s);
            // A multi-index entry fills adjacent slots: free it once, at the
            // first slot of its run (inline trees have no runs).
            if p != 0 && !is_value::<V, O>(p) && (O::INLINE || s == 0 || n.slot_addr(s - 1) != p) {
                // SAFETY: the item is owned by this exclusive, live leaf.
                unsafe { O::free(unerase(raw(p))) };
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
