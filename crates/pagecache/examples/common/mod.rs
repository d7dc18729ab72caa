//! What the radix-tree examples share (seed 002's benchmark, "A Concurrent
//! Pagecache", §4).

/// The indexes thread `t` of `threads` applies its operation to, out of
/// `0..n`: every `threads`-th one (interleaved), or its own contiguous
/// share (sequential, the last thread taking the remainder).
pub fn keys_of(t: usize, threads: usize, n: u64, interleaved: bool) -> Vec<u64> {
    if interleaved {
        (0..n).filter(|i| *i as usize % threads == t).collect()
    } else {
        let per = n / threads as u64;
        (t as u64 * per..if t + 1 == threads { n } else { (t as u64 + 1) * per }).collect()
    }
}
