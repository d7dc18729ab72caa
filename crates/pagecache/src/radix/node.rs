//! The radix-tree node: slots, per-tag bitmaps, the node lock, the count of
//! occupied slots, the `dead` flag, and the node's key range (seed 002, "A
//! Concurrent Pagecache", §2.1 for the tag bitmaps and §2.4 for the per-node
//! lock).
//!
//! # Key ranges and skipped levels
//! A node of height `h` covers the aligned range of `2^(SHIFT*h)` indexes
//! from its `base`; a node of height 1 is a leaf whose slots hold items, a
//! higher node holds child nodes. A child sits in the slot of its parent
//! whose range contains its own, but it need not be one level below: levels
//! that would hold a single child are skipped (path compression at slot
//! granularity, as an adaptive radix tree compresses a path of one-child
//! nodes). A sparse tree then holds, below its dense top, only the nodes
//! where paths fork, and a new index in an empty region of a node gets a leaf
//! directly under it.
//!
//! An inner slot holds the child's address with the child's height in the
//! low bits (nodes are aligned past [`MAX_HEIGHT`]), so a lock-free descent
//! picks the child's slot without first reading the child's header. Only a
//! child that skips levels needs its header read, to check that its range
//! holds the index (`base`); both reads can be in flight at once.
//!
//! A node's height and base never change: growing puts a new root above the
//! old one, shrinking makes a root's only child the root, and splitting puts
//! a new node between a parent and a child whose range does not hold a new
//! index (`write.rs`). Nodes are never moved or copied, which is what lets an
//! optimistic operation lock a node found without locks and then only check
//! that it is still attached, and lets the page cache re-read a leaf slot it
//! found earlier.
//!
//! # Leaf words
//! A leaf slot holds a word that the tree's item policy (`Own`) gives
//! meaning: a pointer to the item, or, for [`Inline`](super::Inline), the
//! value itself shifted left by one with bit 0 set (a value too wide for that
//! is boxed, and the slot holds the box's address, whose bit 0 is clear).
//! A pointer word may carry a tag in the low bits its item's alignment
//! leaves free (the page cache keeps a folio's order and state there): the
//! tree stores and compares the whole word ([`erase`], [`Node::item`] keep
//! it), and strips the tag only where it dereferences (`Shared::as_ref`,
//! `Shared::as_raw`). The tree's own low-bit encodings never meet such a
//! word: a child's height and the lone-entry marker are in inner slots
//! only, and bit 0 means an inline value only in [`Inline`](super::Inline)
//! trees, whose words carry no tag.
//!
//! # Lone entries
//! In a tree of inline values, an index that is alone in the range of an
//! inner slot can be kept in that slot, with no leaf below: the lazy
//! expansion of an adaptive radix tree. The word holds the index's bits
//! below the slot and the value's bits, above a marker bit and a zero
//! height field (a child's height is never zero):
//!
//! ```text
//! | value bits | index bits below the slot | 1 | 0 (height field) |
//! ```
//!
//! A value too wide for what is left of the word gets a leaf instead. The
//! slot's tag bits are the entry's tags. A second index in the slot's range
//! replaces the entry by a node holding both (published in one store, so a
//! reader finds the entry in the old word or in the new node).
//!
//! # Invariants (every field that changes is written only under the node lock)
//! - `count` is the number of non-null slots.
//! - `dead` is set, under the node lock, exactly when the node is unlinked
//!   from the tree (an emptied node removed from its parent, or a root
//!   replaced by its only child); a dead node is never written again, and it
//!   is freed only after the epoch grace period.
//! - `tags[t]` bit `s` set implies slot `s` is non-null; for an inner node,
//!   child `s` having any tag-`t` bit implies bit `s` of `tags[t]` is set
//!   (the "child tagged ⇒ parent tagged" invariant **I1**, kept at every
//!   instant by setting tags top-down and clearing them bottom-up). The
//!   converse holds after quiescence.
//! - A child's height is below its parent's, and its range lies inside the
//!   range of the parent slot that holds it.

use std::marker::PhantomData;

use crate::sync::epoch::{Guard, Pointer, Shared};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering};

/// Bits of the index consumed by one level: 6 (64 slots, as in Linux), or 2
/// under loom so that a handful of keys builds a deep tree.
#[cfg(not(rcufs_loom))]
pub const SHIFT: u32 = 6;
/// Bits of the index consumed by one level (loom build).
#[cfg(rcufs_loom)]
pub const SHIFT: u32 = 2;

/// Slots per node.
pub const SLOTS: usize = 1 << SHIFT;

/// Mask of the slot bits.
pub(crate) const MASK: u64 = SLOTS as u64 - 1;

/// The height of a tree that can hold every `u64` key.
pub const MAX_HEIGHT: usize = 64_usize.div_ceil(SHIFT as usize);

/// Number of tags kept per entry.
pub const NUM_TAGS: usize = 4;

/// The low bits of an inner slot that carry the child's height (zero in a
/// lone entry).
const HEIGHT_MASK: usize = std::mem::align_of::<Node<()>>() - 1;

/// The marker bit of a lone entry, just above the height field.
const LONE_MARK: usize = HEIGHT_MASK + 1;

/// The bits of a lone entry below its index bits: the height field and the
/// marker.
const LONE_SHIFT: u32 = LONE_MARK.trailing_zeros() + 1;

const _: () = assert!(
    HEIGHT_MASK >= MAX_HEIGHT,
    "node alignment leaves room for the height in a child pointer"
);

/// The largest offset in the range of a node of `height`: the node covers
/// `base..=base + max_index(height)`.
#[inline]
pub(crate) fn max_index(height: usize) -> u64 {
    let bits = SHIFT as usize * height;
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

/// The base of the range of height `height` that holds `index`.
#[inline]
pub(crate) fn base_of(index: u64, height: usize) -> u64 {
    index & !max_index(height)
}

/// The lowest height whose aligned range holds both `a` and `b`.
pub(crate) fn common_height(a: u64, b: u64) -> usize {
    let bits = (64 - (a ^ b).leading_zeros()) as usize;
    bits.div_ceil(SHIFT as usize).max(1)
}

/// The word of a lone entry for `index` whose value has the bits `bits`, in
/// a slot of a node of height `h`, if the bits fit.
pub(crate) fn lone_word(h: usize, index: u64, bits: u64) -> Option<usize> {
    let below = SHIFT * (h as u32 - 1);
    let room = (usize::BITS).checked_sub(LONE_SHIFT + below)?;
    if room == 0 || (room < 64 && bits >> room != 0) {
        return None;
    }
    let sub = (index & max_index(h - 1)) as usize;
    Some((((bits as usize) << below | sub) << LONE_SHIFT) | LONE_MARK)
}

/// The value bits of the lone entry `w` in a slot of a node of height `h`,
/// if it is the entry of `index` (whose range the slot holds).
#[inline]
pub(crate) fn lone_bits(h: usize, w: usize, index: u64) -> Option<u64> {
    let below = SHIFT * (h as u32 - 1);
    let payload = (w >> LONE_SHIFT) as u64;
    let mask = max_index(h - 1);
    (payload & mask == index & mask).then(|| payload >> below)
}

/// The index of the lone entry `w` in slot `s` of `node`.
pub(crate) fn lone_index<V>(node: &Node<V>, s: usize, w: usize) -> u64 {
    let h = node.height();
    let shift = SHIFT as usize * (h - 1);
    node.base + ((s as u64) << shift) + ((w >> LONE_SHIFT) as u64 & max_index(h - 1))
}

/// The leaf word (an [`Inline`](super::Inline) value word) of the value
/// bits of a lone entry.
#[inline]
pub(crate) fn lone_leaf_word<'g>(bits: u64) -> Raw<'g> {
    raw(((bits as usize) << 1) | 1)
}

/// The slot of `index` in a node of `height`.
#[inline]
pub(crate) fn slot_of(index: u64, height: usize) -> usize {
    // At most SHIFT * (MAX_HEIGHT - 1) < 64.
    debug_assert!((1..=MAX_HEIGHT).contains(&height), "height {height}");
    ((index >> (SHIFT as usize * (height - 1))) & MASK) as usize
}

/// The bit of slot `s` in a tag bitmap.
pub(crate) fn bit(s: usize) -> u64 {
    1u64 << s
}

/// The bitmap of `n` slots from slot `s` (`s + n <= SLOTS`).
pub(crate) fn run_bits(s: usize, n: usize) -> u64 {
    debug_assert!(s + n <= SLOTS, "a run stays inside its node");
    if n >= 64 { u64::MAX } else { ((1u64 << n) - 1) << s }
}

/// The slots of a bitmap, in increasing order.
pub(crate) fn slots_of(mut bits: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if bits == 0 {
            return None;
        }
        let s = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        Some(s)
    })
}

/// What a slot points to, with its type erased: a `Node<V>` in an inner
/// node, a `V` in a leaf (the node's height says which). Alignment 1, so
/// that a pointer of any item type converts to and from it unchanged.
pub(crate) struct Erased {
    _opaque: u8,
}

/// A leaf slot's word as a pointer of the erased type (never dereferenced
/// as such): null for an empty slot.
pub(crate) type Raw<'g> = Shared<'g, Erased>;

/// The word of a [`Raw`].
#[inline]
pub(crate) fn word(raw: Raw<'_>) -> usize {
    raw.as_raw() as usize
}

/// The [`Raw`] of a word.
#[inline]
pub(crate) fn raw<'g>(word: usize) -> Raw<'g> {
    Shared::from(word as *const Erased)
}

/// An item pointer as a leaf word, with its tag: the whole word, as
/// [`cast`] reads it back (`as_raw` would drop the tag).
#[inline]
pub(crate) fn erase<V>(p: Shared<'_, V>) -> Raw<'_> {
    raw(p.into_usize())
}

/// A leaf word of a tree of pointers as its item pointer, with its tag (the
/// inverse of [`erase`]); `as_ref`, `deref` and `as_raw` strip the tag.
#[inline]
pub(crate) fn unerase<V>(raw: Raw<'_>) -> Shared<'_, V> {
    cast(raw)
}

/// The inner-slot word of a child node (0 for null): its address and its
/// height.
pub(crate) fn child_word<V>(child: Shared<'_, Node<V>>) -> usize {
    // SAFETY: a non-null child is a live node that the caller is linking or
    // has just made, so reading its fixed height is sound.
    match unsafe { child.as_ref() } {
        None => 0,
        Some(c) => child.as_raw() as usize | c.height(),
    }
}

/// Converts a slot's pointer to the type the node's height says it has,
/// keeping the whole word: an item policy may keep a tag in the low bits
/// its item's alignment leaves free (the page cache keeps a folio's order
/// there), which `Erased`, of alignment 1, carries through untouched.
fn cast<'g, T, U>(p: Shared<'g, T>) -> Shared<'g, U> {
    // SAFETY: the word came from a `Shared` of the same slot; `Shared` is
    // `Copy` and owns nothing, so converting it back is only a cast.
    unsafe { Shared::from_usize(p.into_usize()) }
}

/// Where a lock-free descent goes from an inner node (see [`Node::step`]).
pub(crate) enum Step<'g, V> {
    /// The slot's child, whose range holds the index, and its height (from
    /// the slot, so the descent need not read the child's header).
    Down(&'g Node<V>, usize),
    /// The slot is empty.
    Empty,
    /// The slot's child skips levels and its range does not hold the index:
    /// the index is not in the tree below this slot.
    Beside,
    /// The slot holds a lone entry (this word); it is the index's if
    /// [`lone_bits`] says so.
    Lone(usize),
}

/// What an inner slot holds (see [`Node::slot`]).
pub(crate) enum Slot<'g, V> {
    Empty,
    Child(&'g Node<V>),
    /// A lone entry's word.
    Lone(usize),
}

/// One node of the tree.
///
/// Aligned so that an inner slot's low bits can carry the child's height
/// (16 bytes normally, for heights up to 11; 64 under loom, where the
/// 2-bit levels make trees up to 32 high).
#[cfg_attr(not(rcufs_loom), repr(align(16)))]
#[cfg_attr(rcufs_loom, repr(align(64)))]
pub(crate) struct Node<V> {
    /// The first index of the node's range (a multiple of
    /// `max_index(height) + 1`); fixed.
    pub(crate) base: u64,
    /// One bitmap per tag, bit `s` for slot `s`.
    pub(crate) tags: [AtomicU64; NUM_TAGS],
    /// Occupied slots; written under the lock, read with `Relaxed` as a hint
    /// by optimistic descents and validated under the lock.
    pub(crate) count: AtomicU32,
    /// 1 for a leaf; fixed.
    height: u8,
    /// Set when the node is unlinked; read under the node lock to validate.
    pub(crate) dead: AtomicBool,
    /// The node lock of seed 002 §2.4 (unused in `Mode::Serial`).
    pub(crate) lock: Mutex<()>,
    /// The slots, in the node itself (not behind a box: one dependent load
    /// fewer per level of a lookup). Tagged children in an inner node, item
    /// words in a leaf, fixed by the height.
    slots: [AtomicUsize; SLOTS],
    _items: PhantomData<V>,
}

impl<V> Node<V> {
    /// A node of `height` whose range holds `index`.
    pub(crate) fn new(height: usize, index: u64) -> Self {
        debug_assert!((1..=MAX_HEIGHT).contains(&height), "height {height}");
        Self {
            base: base_of(index, height),
            tags: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU32::new(0),
            height: height as u8,
            dead: AtomicBool::new(false),
            lock: Mutex::new(()),
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
            _items: PhantomData,
        }
    }

    #[inline]
    pub(crate) fn height(&self) -> usize {
        usize::from(self.height)
    }

    #[inline]
    pub(crate) fn is_leaf(&self) -> bool {
        self.height == 1
    }

    /// Whether the node's range holds `index`.
    #[inline]
    pub(crate) fn covers(&self, index: u64) -> bool {
        base_of(index, self.height()) == self.base
    }

    /// The last index of the node's range.
    pub(crate) fn last_index(&self) -> u64 {
        self.base | max_index(self.height())
    }

    /// One step of a lock-free descent from this inner node, whose height is
    /// `h` (passed in so that the caller's copy, not this header, is read),
    /// towards `index`, which the node's range holds.
    #[inline]
    pub(crate) fn step<'g>(&self, h: usize, index: u64, guard: &'g Guard) -> Step<'g, V> {
        debug_assert_eq!(h, self.height(), "the caller's height is the node's");
        debug_assert!(
            h > 1 && self.covers(index),
            "a step from an inner node that covers the index"
        );
        let _ = guard;
        // Acquire: the child's initialisation happens before its
        // publication; pairs with the Release store in `set_word`.
        let w = self.slots[slot_of(index, h)].load(Ordering::Acquire);
        if w == 0 {
            return Step::Empty;
        }
        let ch = w & HEIGHT_MASK;
        if ch == 0 {
            return Step::Lone(w);
        }
        // SAFETY: a child loaded while `guard` is pinned is retired (if ever)
        // only after it is unlinked, so it outlives 'g; the word is the
        // address of a `Node<V>` tagged with its height.
        let child = unsafe { &*((w & !HEIGHT_MASK) as *const Node<V>) };
        // A child one level down covers the slot's whole range; one that
        // skips levels covers part of it and must be checked.
        if ch + 1 == h || child.base == base_of(index, ch) {
            Step::Down(child, ch)
        } else {
            Step::Beside
        }
    }

    /// What slot `s` of an inner node holds.
    #[inline]
    pub(crate) fn slot<'g>(&self, s: usize, guard: &'g Guard) -> Slot<'g, V> {
        debug_assert!(!self.is_leaf(), "an inner slot of a leaf");
        let _ = guard;
        // Acquire: the child's (or entry's) initialisation happens before
        // its publication; pairs with the Release store in `set_word`.
        let w = self.slots[s].load(Ordering::Acquire);
        if w == 0 {
            Slot::Empty
        } else if w & HEIGHT_MASK == 0 {
            Slot::Lone(w)
        } else {
            // SAFETY: a child loaded while `guard` is pinned is retired (if
            // ever) only after it is unlinked, so it outlives 'g.
            Slot::Child(unsafe { &*((w & !HEIGHT_MASK) as *const Node<V>) })
        }
    }

    /// The child at slot `s` of an inner node (null if empty or a lone
    /// entry). Only for inner nodes.
    #[inline]
    pub(crate) fn child<'g>(&self, s: usize, guard: &'g Guard) -> Shared<'g, Node<V>> {
        debug_assert!(!self.is_leaf(), "child of a leaf");
        let _ = guard;
        // Acquire: the child's initialisation happens before its
        // publication; pairs with the Release store in `set_word`.
        let w = self.slots[s].load(Ordering::Acquire);
        if w & HEIGHT_MASK == 0 {
            return Shared::null();
        }
        Shared::from((w & !HEIGHT_MASK) as *const Node<V>)
    }

    /// Publishes (or clears) a child. Caller holds the node lock (or the
    /// serial writer lock).
    pub(crate) fn set_child(&self, s: usize, child: Shared<'_, Node<V>>) {
        self.set_word(s, child_word(child));
    }

    /// Publishes an inner slot's word: a child's ([`child_word`]), a lone
    /// entry's ([`lone_word`]) or 0. Caller holds the node lock (or the
    /// serial writer lock), or the node is not yet published.
    pub(crate) fn set_word(&self, s: usize, w: usize) {
        debug_assert!(!self.is_leaf(), "an inner slot of a leaf");
        debug_assert!(
            w & HEIGHT_MASK < usize::from(self.height),
            "a child is below its parent"
        );
        // Release: publishes the child's initialisation; pairs with the
        // Acquire loads in `step`, `slot` and `child`.
        self.slots[s].store(w, Ordering::Release);
    }

    /// The item at slot `s` of a leaf of a tree whose items are pointers
    /// (not [`Inline`](super::Inline) words). Only for leaves.
    #[inline]
    pub(crate) fn item<'g>(&self, s: usize, guard: &'g Guard) -> Shared<'g, V> {
        cast(self.raw(s, guard))
    }

    /// The word in slot `s` of a leaf. Only for leaves.
    #[inline]
    pub(crate) fn raw<'g>(&self, s: usize, guard: &'g Guard) -> Raw<'g> {
        debug_assert!(self.is_leaf(), "item of an inner node");
        let _ = guard;
        // Acquire: pairs with the Release store in `set_raw`, so the item's
        // contents are visible to the reader.
        raw(self.slots[s].load(Ordering::Acquire))
    }

    /// Publishes (or clears) a leaf word. Caller holds the node lock (or the
    /// serial writer lock).
    pub(crate) fn set_raw(&self, s: usize, item: Raw<'_>) {
        debug_assert!(self.is_leaf(), "item of an inner node");
        // Release: publishes the item's contents; pairs with the Acquire
        // load in `raw`.
        self.slots[s].store(word(item), Ordering::Release);
    }

    /// The run of slot `s` of a leaf: the slots next to `s` (with `s`)
    /// that hold the same item, as a bitmap; `bit(s)` alone for an empty
    /// slot. Exact under the node lock (the writers' only use); a hint
    /// otherwise. An item stored by `insert_run` fills an aligned run of a
    /// power-of-two length, and no item is in two runs, so the run is
    /// exactly the slots it was stored in. Trees of inline values have no
    /// runs (equal values in adjacent slots are separate entries): `single`
    /// says so.
    pub(crate) fn run_at(&self, s: usize, single: bool) -> u64 {
        debug_assert!(self.is_leaf(), "runs are in leaves");
        // Relaxed: compared only, never dereferenced (see above).
        let p = self.slots[s].load(Ordering::Relaxed);
        if p == 0 || single {
            return bit(s);
        }
        let same = |x: usize| self.slots[x].load(Ordering::Relaxed) == p;
        let (mut lo, mut hi) = (s, s);
        while lo > 0 && same(lo - 1) {
            lo -= 1;
        }
        while hi + 1 < SLOTS && same(hi + 1) {
            hi += 1;
        }
        run_bits(lo, hi - lo + 1)
    }

    /// The word in slot `s`, for comparisons only (never dereferenced):
    /// `check_invariants` and the tree's drop use it to find runs.
    pub(crate) fn slot_addr(&self, s: usize) -> usize {
        // Relaxed: compared only.
        self.slots[s].load(Ordering::Relaxed)
    }

    /// Whether slot `s` is occupied.
    pub(crate) fn occupied(&self, s: usize) -> bool {
        // Relaxed: a presence check; callers that dereference load again
        // with Acquire (`step`, `child`, `raw`) or hold the node lock.
        self.slots[s].load(Ordering::Relaxed) != 0
    }

    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn add_count(&self, delta: i32) {
        // Relaxed: written under the node lock; the lock orders it.
        let c = self.count.load(Ordering::Relaxed);
        self.count.store(c.wrapping_add_signed(delta), Ordering::Relaxed);
    }

    /// The tag-`t` bitmap. Lock-free readers use it as a hint only.
    pub(crate) fn tag_bits(&self, t: usize) -> u64 {
        // Acquire: a tagged gang lookup reads the bitmap and then the slot;
        // pairs with the Release in `set_tag_bit`/`clear_tag_bit`.
        self.tags[t].load(Ordering::Acquire)
    }

    /// The tag-`t` bitmap, read under the node lock or as a hint that a
    /// later locked read validates.
    pub(crate) fn tag_bits_relaxed(&self, t: usize) -> u64 {
        self.tags[t].load(Ordering::Relaxed)
    }

    /// Whether any tag is set on this node.
    pub(crate) fn any_tag(&self, t: usize) -> bool {
        self.tags[t].load(Ordering::Relaxed) != 0
    }

    /// Sets bit `s` of tag `t`; returns whether it was clear. Under the lock.
    pub(crate) fn set_tag_bit(&self, t: usize, s: usize) -> bool {
        let old = self.tags[t].load(Ordering::Relaxed);
        if old & bit(s) != 0 {
            return false;
        }
        // Release: orders the bit after the slot it describes; pairs with the
        // Acquire load in `tag_bits`.
        self.tags[t].store(old | bit(s), Ordering::Release);
        true
    }

    /// Clears bit `s` of tag `t`; returns whether it was set. Under the lock.
    pub(crate) fn clear_tag_bit(&self, t: usize, s: usize) -> bool {
        let old = self.tags[t].load(Ordering::Relaxed);
        if old & bit(s) == 0 {
            return false;
        }
        // Release: pairs with the Acquire load in `tag_bits`.
        self.tags[t].store(old & !bit(s), Ordering::Release);
        true
    }

    pub(crate) fn is_dead(&self) -> bool {
        // Relaxed: written and validated under the node lock.
        self.dead.load(Ordering::Relaxed)
    }

    pub(crate) fn mark_dead(&self) {
        self.dead.store(true, Ordering::Relaxed);
    }
}
