//! Readahead: detects sequential reads of a file and suggests the order of
//! the folio that fills the next miss, so that a sequential reader reads
//! the source in large pieces and caches them as few entries (the idea of
//! the Linux kernel's `ondemand_readahead`, with the window sized in folio
//! orders; large folios are how seed 002's radix tree, through the
//! XArray's multi-index entries, stores them today).
//!
//! # Algorithm
//! One word per file: the page index where a sequential reader's next miss
//! is expected (the end of the last folio filled for it) and the current
//! window, as an order. On a miss at `index` of a read that wants `want`
//! pages from there:
//! - at the expected index (a sequential continuation): the window doubles
//!   (order + 1), as the kernel's window grows while reads stay sequential;
//! - at index 0 with no history (the first read of a file): four times
//!   the request, the kernel's initial window;
//! - anywhere else (a random read): just what the request needs, rounded
//!   up to a power of two; for a 4 KiB read, one page.
//!
//! Never less than the request needs, never more than the caller's maximum
//! order. A later miss of the same read (the first folio did not reach its
//! end) continues the previous fill by construction, so it is not taken as
//! a sign of a sequential reader: it gets what the read still needs. The filled folio may be smaller than the suggestion (it must be
//! aligned and must not cover cached pages); the window is remembered as
//! suggested, so it keeps growing and larger folios follow at the next
//! aligned index.
//!
//! # Invariants
//! The state is a hint: it is read and written with Relaxed atomics, only
//! on misses (hits write nothing), and racing readers of one file may
//! overwrite each other's updates, which only costs a suggestion.

use crate::sync::{AtomicU64, Ordering};

/// Bits of the state word that hold the window's order.
const ORDER_BITS: u32 = 8;

/// Per-file sequential-read detection. See the module docs.
#[derive(Debug, Default)]
pub struct Readahead {
    /// `next << ORDER_BITS | order`, 0 for no history.
    state: AtomicU64,
}

/// The smallest order whose folio holds `pages` pages.
fn order_for(pages: u64) -> u32 {
    pages.max(1).next_power_of_two().trailing_zeros()
}

impl Readahead {
    /// No history: the first miss is treated as random (or as a file's
    /// first read if it is at index 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// The order of the folio to fill for a miss at page `index` of a read
    /// that wants `want` pages from `index` on, at most `max_order`;
    /// `first_miss` says whether this is the read's first miss (see the
    /// module docs).
    pub fn suggest(&self, index: u64, want: u64, first_miss: bool, max_order: u32) -> u32 {
        // Relaxed: a hint (see the module docs).
        let state = self.state.load(Ordering::Relaxed);
        let (next, window) = (state >> ORDER_BITS, (state & ((1 << ORDER_BITS) - 1)) as u32);
        let need = order_for(want);
        let order = if !first_miss {
            need
        } else if state != 0 && index == next {
            window + 1
        } else if state == 0 && index == 0 {
            need + 2
        } else {
            need
        };
        order.max(need).min(max_order)
    }

    /// Records that a miss was filled by the folio of `pages` pages from
    /// `first`, for a suggested window of `window`: a sequential reader's
    /// next miss is expected at the folio's end.
    pub fn filled(&self, first: u64, pages: u64, window: u32) {
        let next = first.saturating_add(pages) & (u64::MAX >> ORDER_BITS);
        // Relaxed: a hint.
        self.state.store(
            next << ORDER_BITS | u64::from(window.min((1 << ORDER_BITS) - 1)),
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests;
