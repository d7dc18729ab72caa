//! A lock-coupled radix tree with tags and optimistic locking, and a page
//! cache built on it: seed 002, "A Concurrent Pagecache"
//! (`../shared/seeds/002_04c288f4fca924a4.txt`).
//!
//! # Design
//! - [`radix::RadixTree`] maps `u64` indexes to values. Lookups (single,
//!   gang, tagged gang) take no lock and run under an epoch guard (the RCU
//!   radix tree of §2.3). Writers follow one of three [`Mode`]s chosen at
//!   construction, the paper's CONFIG option: one tree lock (`Serial`),
//!   per-node locks with ladder and path locking (`LockCoupled`, §2.4), or
//!   lock-free descent to the lowest node to change, then validation under
//!   its lock (`Optimistic`, §5). Levels with a single child are skipped;
//!   small values can live in the slots themselves ([`radix::Inline`]).
//! - [`PageCache`] keeps folios, aligned runs of 1 to 64 pages, keyed by
//!   (inode, page index): one radix tree per inode, where a folio is a
//!   multi-index entry (its pointer in each slot it covers, as the Linux
//!   XArray stores large folios), found through another radix tree keyed by
//!   inode. Folios carry their own reference count; lookups take
//!   speculative references (§3.1.2) and removal is exclusive per folio
//!   through a no-new-references bit (§3.1.3). A folio's bytes never change
//!   after its fill (writes replace it by a copy), so ranged reads copy
//!   them under the epoch guard without a reference, and [`FolioSlice`]s
//!   hand them out for zero-copy replies. Misses are filled once by one
//!   thread while the others wait, in folios of the order the caller or the
//!   per-inode [`Readahead`] asks for. A byte budget is kept by CLOCK
//!   reclaim over the ACCESSED tag.
//!
//! # Invariants
//! - Items and nodes unlinked from a tree are freed only after every epoch
//!   guard that could have seen them is dropped.
//! - After quiescence a tree node's tag bit for a slot is set if and only if
//!   some entry below that slot has the tag; a tagged child's parent bit is
//!   set at every instant.
//! - A folio in the cache has a count of at least one (the tree's); a folio
//!   with another reference (a [`PageRef`], a [`FolioSlice`], a filler) is
//!   never reclaimed, and its bytes never change after its fill.
//! - A folio of `2^order` pages fills exactly the aligned run of slots it
//!   covers, in one leaf.
//!
//! # Concurrency
//! Lock order: a tree's root lock, then node locks parent before child; a
//! folio's no-new-references bit is taken with no tree lock held, and tree
//! locks may be taken while holding it. See `radix` and `cache` module docs
//! for the protocols. Only `sync.rs` names the primitives, so that the
//! `loom-tests` crate can model-check them under `--cfg rcufs_loom`.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod cache;
mod counter;
mod folio;
mod frames;
pub use frames::{FrameUsage, usage as frame_usage};
pub mod radix;
mod readahead;
mod sync;

pub use cache::{Config, DropCounts, FillOrder, MAX_ORDER, PageCache, Stats};
pub use folio::{FolioSlice, PageRef};
pub use radix::{RadixTree, Tag};
pub use readahead::Readahead;

/// The writer protocol of a radix tree (seed 002's CONFIG option, plus the
/// optimistic locking of §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One lock for all writers; lock-free readers (the lockless pagecache).
    Serial,
    /// Per-node locks: ladder locking for insert and set-tag, path locking
    /// for remove and clear-tag.
    LockCoupled,
    /// Lock-free descent to the lowest node to change, validated under its
    /// lock; falls back to `LockCoupled` when validation fails.
    Optimistic,
}

impl Mode {
    /// The three modes, for tests and benchmarks.
    pub const ALL: [Mode; 3] = [Mode::Serial, Mode::LockCoupled, Mode::Optimistic];
}
