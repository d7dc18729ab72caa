//! Integration tests of `pagecache`: multi-threaded stress of the radix tree
//! and of the page cache, with verification.

mod cache;
mod frames;
mod tree;

/// Scales a loop count down in debug builds, so the suite stays fast.
pub fn scaled(release: usize) -> usize {
    if cfg!(debug_assertions) {
        (release / 8).max(1)
    } else {
        release
    }
}
