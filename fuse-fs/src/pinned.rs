//! A READ's answer as pinned cache units: the reply transport's input.
//!
//! # What
//! [`PinnedRead`] is a list of (pinned unit, byte range) items, in file
//! order: each unit is a counted page-cache reference (a `FolioSlice`, one
//! per folio a READ covers; a speculative reference of seed 002 §3.1.2)
//! that keeps the unit's bytes fixed and its memory alive
//! while the list exists. The FUSE adapter hands a small answer to the
//! kernel as one vectored write (`writev` of the reply header and the
//! ranges, fuser's `ReplyData::data_vectored`), so it is answered without
//! copying the bytes in user space: the kernel copies them once, from the
//! cached units into the reader's buffer; a large answer is copied into a
//! per-thread buffer first (see "Algorithm").
//!
//! # Invariants
//! - Every range lies inside its unit's filled bytes (`push` checks it).
//! - A unit's bytes do not change while it is pinned (the page cache's
//!   invariant: a write to a held page drops it from the cache and leaves
//!   the holder's copy as it was), so the reply is a consistent snapshot
//!   of each unit as the READ found it.
//! - The pins are dropped only after the reply's `writev` has returned (the
//!   list outlives the call that borrows its slices).
//!
//! # Algorithm
//! A reply of at most 8 units and at most 64 KiB (a random 4 KiB read, a
//! 16 KiB read of a folio) goes vectored: its slices are built on the stack
//! and the kernel copies straight from the cached units. A larger reply is
//! first copied into one buffer per worker thread (no allocation, no page
//! fault after the first use), and that buffer is written. Measured on
//! this machine (BENCHMARKS.md, "Zero-copy READ replies" and "Folios on
//! the mount"), the gathered reply is the faster one for large reads,
//! with 4 KiB pages and with 256 KiB folios alike: for each 4 KiB of a
//! `writev` to `/dev/fuse` the kernel pins the user page (`gup_fast`, a
//! page-table walk) and copies it with a short `rep movsb`; from cached
//! units that are cold in the CPU cache this ran at 4.1-4.7 GB/s for 1 MiB
//! reads, against 5.2-5.6 GB/s for one copy in user space (streaming, into
//! a buffer that stays in L2) followed by the kernel's copy out of it. The
//! vectored form is kept where it measured level or better: small replies.

use std::io::IoSlice;
use std::ops::Range;

/// A pinned cache unit: the bytes of a cached folio a read covers, fixed
/// while the reference is held.
pub type Unit = pagecache::FolioSlice;

/// A reply of at most this many items, and at most [`VECTORED_MAX`]
/// bytes, goes vectored (its slices on the stack); see the module docs.
pub const INLINE: usize = 8;

/// The largest reply that goes vectored (see the module docs).
pub const VECTORED_MAX: usize = 64 << 10;

thread_local! {
    /// The gather buffer of this worker thread, kept between replies.
    static GATHER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One item: a pinned unit and the byte range of it the reply carries.
#[derive(Debug)]
struct Item {
    unit: Unit,
    from: u32,
    to: u32,
}

/// The bytes of one READ as pinned units and ranges (see the module docs).
#[derive(Debug, Default)]
pub struct PinnedRead {
    items: Vec<Item>,
    len: usize,
}

impl PinnedRead {
    /// An empty answer with room for `units` items.
    pub fn with_capacity(units: usize) -> Self {
        Self {
            items: Vec::with_capacity(units),
            len: 0,
        }
    }

    /// Appends `range` of `unit`. Empty ranges are not kept.
    ///
    /// # Panics
    /// If `range` is not inside the unit's bytes.
    pub fn push(&mut self, unit: Unit, range: Range<usize>) {
        assert!(
            range.start <= range.end && range.end <= unit.len(),
            "range {range:?} outside a unit of {} bytes",
            unit.len()
        );
        if range.is_empty() {
            return;
        }
        self.len += range.len();
        self.items.push(Item {
            unit,
            from: range.start as u32,
            to: range.end as u32,
        });
    }

    /// Each slice whole, in order (what `PageCache::read_refs` returns).
    pub fn from_folios(slices: impl ExactSizeIterator<Item = Unit>) -> Self {
        let mut r = Self::with_capacity(slices.len());
        for s in slices {
            let n = s.len();
            r.push(s, 0..n);
        }
        r
    }

    /// Bytes in the answer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the answer holds no byte (a read at or past the end of file).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Units pinned.
    pub fn units(&self) -> usize {
        self.items.len()
    }

    /// The answer's bytes, slice by slice, in file order.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        self.items.iter().map(|i| &i.unit[i.from as usize..i.to as usize])
    }

    /// The answer's bytes copied into one buffer (for callers that keep
    /// them).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.slices() {
            v.extend_from_slice(s);
        }
        v
    }

    /// Calls `f` with the answer as a list of `IoSlice`s: the pinned
    /// units' ranges for a small reply, or one slice of this thread's
    /// gather buffer holding a copy of them (see the module docs). The
    /// units stay pinned until `f` returns.
    pub fn with_io_slices<R>(&self, f: impl FnOnce(&[IoSlice<'_>]) -> R) -> R {
        let n = self.items.len();
        if n > INLINE || self.len > VECTORED_MAX {
            return GATHER.with_borrow_mut(|buf| {
                buf.clear();
                for s in self.slices() {
                    buf.extend_from_slice(s);
                }
                f(&[IoSlice::new(buf)])
            });
        }
        let mut a = [IoSlice::new(&[]); INLINE];
        for (slot, s) in a.iter_mut().zip(self.slices()) {
            *slot = IoSlice::new(s);
        }
        f(&a[..n])
    }
}

#[cfg(test)]
mod tests;
