//! Unit tests of the readahead policy: a simulated reader that fills what
//! the policy suggests, as the page cache does (the largest aligned folio
//! not covering cached pages).

use std::collections::BTreeSet;

use super::{Readahead, order_for};

/// Reads `want` pages at each index of `reads`, with `cached` as the set of
/// cached pages, filling each miss with the aligned folio the policy
/// suggests (shrunk until it covers no cached page); returns the folios
/// filled as (first, order).
fn simulate(reads: &[(u64, u64)], max: u32) -> Vec<(u64, u32)> {
    let ra = Readahead::new();
    let mut cached = BTreeSet::new();
    let mut fills = Vec::new();
    for &(start, want) in reads {
        let mut index = start;
        let mut first_miss = true;
        while index < start + want {
            if cached.contains(&index) {
                index += 1;
                continue;
            }
            let window = ra.suggest(index, start + want - index, first_miss, max);
            first_miss = false;
            let mut order = window;
            let first = loop {
                let first = index & !((1u64 << order) - 1);
                if (first..first + (1 << order)).all(|i| !cached.contains(&i)) {
                    break first;
                }
                order -= 1;
            };
            cached.extend(first..first + (1 << order));
            ra.filled(first, 1 << order, window);
            fills.push((first, order));
        }
    }
    fills
}

#[test]
fn orders() {
    assert_eq!(
        (order_for(0), order_for(1), order_for(2), order_for(3), order_for(32)),
        (0, 0, 1, 2, 5)
    );
}

/// A file read sequentially one page at a time: the first read takes four
/// pages, then the window doubles at each aligned boundary up to the
/// maximum, so 256 pages take 9 fills rather than 256.
#[test]
fn sequential_pages_grow_to_the_maximum() {
    let reads: Vec<(u64, u64)> = (0..256).map(|i| (i, 1)).collect();
    let fills = simulate(&reads, 6);
    assert_eq!(
        fills,
        vec![(0, 2), (4, 2), (8, 3), (16, 4), (32, 5), (64, 6), (128, 6), (192, 6)]
    );
}

/// 128 KiB reads (32 pages) from the start: four times the request is
/// capped at the maximum, one fill serves two reads.
#[test]
fn sequential_large_reads() {
    let reads: Vec<(u64, u64)> = (0..8).map(|i| (i * 32, 32)).collect();
    assert_eq!(simulate(&reads, 6), vec![(0, 6), (64, 6), (128, 6), (192, 6)]);
}

/// Random single-page reads fill single pages, even after a sequential
/// run grew the window; a read of several pages gets what it needs, in
/// two folios if alignment cuts it (the second miss of a read is not taken
/// for a sequential reader).
#[test]
fn random_reads_fill_what_they_need() {
    let fills = simulate(&[(0, 1), (1000, 1), (77, 1), (5000, 1), (300, 8)], 6);
    assert_eq!(fills, vec![(0, 2), (1000, 0), (77, 0), (5000, 0), (296, 3), (304, 2)]);
    let ra = Readahead::new();
    ra.filled(64, 64, 6);
    assert_eq!(ra.suggest(128, 1, true, 6), 6, "sequential: stays at the maximum");
    assert_eq!(ra.suggest(128, 1, false, 6), 0, "a read's later miss: what it needs");
    assert_eq!(ra.suggest(7, 1, true, 6), 0, "random: back to one page");
    assert_eq!(ra.suggest(7, 3, true, 6), 2, "never less than the request");
    assert_eq!(ra.suggest(7, 1000, true, 6), 6, "never more than the maximum");
}
