//! The radix-tree node: slots, per-tag bitmaps, the node lock, the count of
//! occupied slots and the `dead` flag (seed 002, "A Concurrent Pagecache",
//! §2.1 for the tag bitmaps and §2.4 for the per-node lock).
//!
//! A node's height never changes: a node of height 1 is a leaf whose slots
//! hold items, a higher node holds child nodes. A node's key range never
//! changes either (growing puts a new root above the old one at slot 0,
//! shrinking removes the root above its slot-0 child), which is what lets an
//! optimistic operation lock a node found without locks and then only check
//! that it is still attached.
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

use std::marker::PhantomData;

use crate::sync::epoch::{Atomic, Guard, Pointer, Shared};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};

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

/// The largest index a tree (or subtree) of `height` levels covers.
pub(crate) fn max_index(height: usize) -> u64 {
    let bits = SHIFT as usize * height;
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

/// The smallest height whose tree covers `index`.
pub(crate) fn height_for(index: u64) -> usize {
    let mut h = 1;
    while max_index(h) < index {
        h += 1;
    }
    h
}

/// The slot of `index` in a node of `height`.
pub(crate) fn slot_of(index: u64, height: usize) -> usize {
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
/// that crossbeam-epoch's pointer-tag bits are empty and a pointer of any
/// item type converts to and from it unchanged.
pub(crate) struct Erased {
    _opaque: u8,
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

/// One node of the tree.
pub(crate) struct Node<V> {
    /// 1 for a leaf.
    pub(crate) height: usize,
    /// Set when the node is unlinked; read under the node lock to validate.
    pub(crate) dead: AtomicBool,
    /// Occupied slots; written under the lock, read with `Relaxed` as a hint
    /// by optimistic descents and validated under the lock.
    pub(crate) count: AtomicU32,
    /// The node lock of seed 002 §2.4 (unused in `Mode::Serial`).
    pub(crate) lock: Mutex<()>,
    /// One bitmap per tag, bit `s` for slot `s`.
    pub(crate) tags: [AtomicU64; NUM_TAGS],
    /// The slots, in the node itself (not behind a box: one dependent load
    /// fewer per level of a lookup). Children in an inner node, items in a
    /// leaf, fixed by the height.
    slots: [Atomic<Erased>; SLOTS],
    _items: PhantomData<V>,
}

impl<V> Node<V> {
    pub(crate) fn new(height: usize) -> Self {
        Self {
            height,
            dead: AtomicBool::new(false),
            count: AtomicU32::new(0),
            lock: Mutex::new(()),
            tags: std::array::from_fn(|_| AtomicU64::new(0)),
            slots: std::array::from_fn(|_| Atomic::null()),
            _items: PhantomData,
        }
    }

    pub(crate) fn is_leaf(&self) -> bool {
        self.height == 1
    }

    /// The child at slot `s` of an inner node. Only for inner nodes.
    #[inline]
    pub(crate) fn child<'g>(&self, s: usize, guard: &'g Guard) -> Shared<'g, Node<V>> {
        debug_assert!(!self.is_leaf(), "child of a leaf");
        // Acquire: the child's initialisation happens before its
        // publication; pairs with the Release store in `set_child`.
        cast(self.slots[s].load(Ordering::Acquire, guard))
    }

    /// The item at slot `s` of a leaf. Only for leaves.
    #[inline]
    pub(crate) fn item<'g>(&self, s: usize, guard: &'g Guard) -> Shared<'g, V> {
        debug_assert!(self.is_leaf(), "item of an inner node");
        // Acquire: pairs with the Release store in `set_item`, so the
        // item's contents are visible to the reader.
        cast(self.slots[s].load(Ordering::Acquire, guard))
    }

    /// Publishes (or clears) a child. Caller holds the node lock (or the
    /// serial writer lock).
    pub(crate) fn set_child(&self, s: usize, child: Shared<'_, Node<V>>) {
        debug_assert!(!self.is_leaf(), "child of a leaf");
        // Release: publishes the child's initialisation; pairs with the
        // Acquire load in `child`.
        self.slots[s].store(cast(child), Ordering::Release);
    }

    /// Publishes (or clears) an item. Caller holds the node lock (or the
    /// serial writer lock).
    pub(crate) fn set_item(&self, s: usize, item: Shared<'_, V>) {
        debug_assert!(self.is_leaf(), "item of an inner node");
        // Release: publishes the item's contents; pairs with the Acquire
        // load in `item`.
        self.slots[s].store(cast(item), Ordering::Release);
    }

    /// The run of slot `s` of a leaf: the slots next to `s` (with `s`)
    /// that hold the same item, as a bitmap; `bit(s)` alone for an empty
    /// slot. Exact under the node lock (the writers' only use); a hint
    /// otherwise. An item stored by `insert_run` fills an aligned run of a
    /// power-of-two length, and no item is in two runs, so the run is
    /// exactly the slots it was stored in.
    pub(crate) fn run_at(&self, s: usize, guard: &Guard) -> u64 {
        debug_assert!(self.is_leaf(), "runs are in leaves");
        // Relaxed: compared only, never dereferenced (see above).
        let p = self.slots[s].load(Ordering::Relaxed, guard);
        if p.is_null() {
            return bit(s);
        }
        let same = |x: usize| self.slots[x].load(Ordering::Relaxed, guard) == p;
        let (mut lo, mut hi) = (s, s);
        while lo > 0 && same(lo - 1) {
            lo -= 1;
        }
        while hi + 1 < SLOTS && same(hi + 1) {
            hi += 1;
        }
        run_bits(lo, hi - lo + 1)
    }

    /// The raw pointer in slot `s`, for comparisons only (never
    /// dereferenced): `check_invariants` and the tree's drop use it to find
    /// runs.
    pub(crate) fn slot_addr(&self, s: usize, guard: &Guard) -> usize {
        // Relaxed: compared only.
        self.slots[s].load(Ordering::Relaxed, guard).as_raw() as usize
    }

    /// Whether slot `s` is occupied.
    pub(crate) fn occupied(&self, s: usize, guard: &Guard) -> bool {
        // Relaxed: a presence check; callers that dereference load again
        // with Acquire (`child`, `item`) or hold the node lock.
        !self.slots[s].load(Ordering::Relaxed, guard).is_null()
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
