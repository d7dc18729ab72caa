//! Readahead for a file's sequential reads: how many pages past a READ to
//! fill from the source in the same read, from the handle's access pattern.
//!
//! # What
//! Each open file handle keeps a [`Readahead`]: where its last READ ended
//! and its current window. A READ that starts where the previous one ended
//! is sequential: the window doubles (from the request's own size, up to
//! [`MAX_PAGES`]); any other READ closes it. `data.rs` fills a READ's first
//! missing page and the missing run after it, plus the window's pages past
//! the request, with one `pread` from the source (the kernel's on-demand
//! readahead, `mm/readahead.c`, sizes its window the same way), instead of
//! one `pread` per page.
//!
//! # Invariants
//! The state is a hint: concurrent READs of one handle may race on it and
//! only change how much is read ahead, never what a READ returns.

use std::sync::atomic::{AtomicU64, Ordering};

/// The largest window, in pages (1 MiB of 4 KiB pages).
pub const MAX_PAGES: u64 = 256;

/// One handle's sequential-read state.
#[derive(Debug, Default)]
pub struct Readahead {
    /// Where the last READ ended (the next sequential offset).
    next: AtomicU64,
    /// The current window in pages (0: not sequential).
    window: AtomicU64,
}

impl Readahead {
    /// A READ of `offset..end` (`req_pages` pages); returns how many pages
    /// past its end to read ahead.
    pub fn advise(&self, offset: u64, end: u64, req_pages: u64) -> u64 {
        // Relaxed: a hint (see the module docs); nothing is published.
        let prev = self.next.swap(end, Ordering::Relaxed);
        let sequential = offset != 0 && prev == offset;
        let w = if sequential {
            (self.window.load(Ordering::Relaxed) * 2).max(req_pages).min(MAX_PAGES)
        } else {
            0
        };
        self.window.store(w, Ordering::Relaxed);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_PAGES, Readahead};

    #[test]
    fn the_window_grows_on_sequential_reads_and_closes_on_a_seek() {
        let r = Readahead::default();
        assert_eq!(r.advise(0, 4096, 1), 0, "a first read at 0 is not yet a pattern");
        assert_eq!(r.advise(4096, 8192, 1), 1);
        assert_eq!(r.advise(8192, 12288, 1), 2);
        assert_eq!(r.advise(12288, 16384, 1), 4);
        assert_eq!(r.advise(100_000, 104_096, 1), 0, "a seek closes the window");
        assert_eq!(r.advise(104_096, 104_096 + (1 << 20), 256), 256);
        for i in 0..8u64 {
            let off = 104_096 + (1 + i) * (1 << 20);
            assert_eq!(r.advise(off, off + (1 << 20), 256), MAX_PAGES, "capped");
        }
    }
}
