//! A READ's answer as pinned cache units: the reply transport's input.
//!
//! # What
//! [`PinnedRead`] is a list of (pinned unit, byte range) items, in file
//! order: each unit is a page-cache reference (`PageRef`, a speculative
//! reference of seed 002 §3.1.2) that keeps the unit's bytes fixed and its
//! memory alive while the list exists. The FUSE adapter hands the ranges to
//! the kernel as one vectored write (`writev` of the reply header and the
//! ranges, fuser's `ReplyData::data_vectored`), so a cached READ of a few
//! units, or of large ones, is answered without copying the bytes in user
//! space: the kernel copies them once, from the cached units into the
//! reader's buffer (see "Algorithm" for many small units).
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
//! [`PinnedRead::with_io_slices`] builds the slice list on the stack for
//! small replies (up to 8 units) and on the heap otherwise. A reply of many
//! small units (more than 8, averaging under 16 KiB: a large read of 4 KiB
//! pages) is first copied into one buffer per worker thread instead. On
//! this machine that measured cheaper than handing the kernel 256 separate
//! 4 KiB pages for a 1 MiB reply: for each page of a `writev` to
//! `/dev/fuse` the kernel pins the page (`gup_fast`, a page-table walk to a
//! page somewhere in the heap) and copies it with a short `rep movsb`, and
//! the daemon's CPU time per 768 MiB read went from 13-17 ticks (copy into
//! one buffer) to 17-25 (vectored); see BENCHMARKS.md, "Zero-copy READ
//! replies". Larger units (folios) pass the average-size test and go
//! vectored with no change here. The kernel takes at most
//! `IOV_MAX` (1024) slices in one `writev`, the reply header included; a
//! reply of more units than that (only possible if the kernel's
//! `fs.fuse.max_pages_limit` is raised far above its default of 256 pages
//! per request) is copied into one buffer instead, so it is still answered.
//!
//! The unit is a 4 KiB page today. A larger unit (a folio) changes only what
//! [`Unit`] names and how many items a READ needs; the reply path is the same.

use std::io::IoSlice;
use std::ops::Range;

/// A pinned cache unit: its bytes stay as they are while it is held.
pub type Unit = pagecache::PageRef;

/// At most this many data slices go into one `writev` (`IOV_MAX`, 1024,
/// less one for the reply header).
pub const MAX_SLICES: usize = 1023;

/// Slices of a reply of at most this many items are gathered on the stack.
const INLINE: usize = 8;

/// A reply of more than [`INLINE`] items averaging fewer bytes than this is
/// copied into one buffer before the write (see the module docs).
const GATHER_BELOW: usize = 16 << 10;

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
    /// them, and for replies of more than [`MAX_SLICES`] units).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.slices() {
            v.extend_from_slice(s);
        }
        v
    }

    /// Calls `f` with the answer as a list of at most [`MAX_SLICES`]
    /// `IoSlice`s borrowing the pinned units (copied into one buffer only
    /// when there are more units than that). The units stay pinned until
    /// `f` returns.
    pub fn with_io_slices<R>(&self, f: impl FnOnce(&[IoSlice<'_>]) -> R) -> R {
        let n = self.items.len();
        if n > INLINE && self.len < n * GATHER_BELOW {
            return GATHER.with_borrow_mut(|buf| {
                buf.clear();
                for s in self.slices() {
                    buf.extend_from_slice(s);
                }
                f(&[IoSlice::new(buf)])
            });
        }
        if n <= INLINE {
            let mut a = [IoSlice::new(&[]); INLINE];
            for (slot, s) in a.iter_mut().zip(self.slices()) {
                *slot = IoSlice::new(s);
            }
            f(&a[..n])
        } else if n <= MAX_SLICES {
            let v: Vec<IoSlice<'_>> = self.slices().map(IoSlice::new).collect();
            f(&v)
        } else {
            let flat = self.to_vec();
            f(&[IoSlice::new(&flat)])
        }
    }
}

#[cfg(test)]
mod tests;
