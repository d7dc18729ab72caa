//! Single 4 KiB pages live in page frames (`frames.rs`), with their
//! headers apart: a stress of every path that makes, reads, replaces and
//! frees such folios, checked against the bytes they must hold, and the
//! frames all given back once the cache is gone. (The only test of this
//! binary with 4,096-byte pages, so the process's frame count is its own.)

use std::sync::atomic::{AtomicUsize, Ordering};

use pagecache::{Config, FillOrder, PageCache, frame_usage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::scaled;

const PS: usize = 4096;
/// Frames per 2 MiB chunk that hold bytes (the first eight frames' room
/// holds the headers).
const CHUNK_FRAMES: usize = 504;

/// The byte at `off` of file `ino` in generation `g` (a page is written
/// whole, so a page holds one generation).
fn byte(ino: u64, off: u64, g: u8) -> u8 {
    (ino as u8).wrapping_mul(31) ^ (off as u8).wrapping_mul(7) ^ (off >> 12) as u8 ^ g
}

fn page(ino: u64, index: u64, g: u8) -> Vec<u8> {
    (0..PS as u64).map(|i| byte(ino, index * PS as u64 + i, g)).collect()
}

/// Which generation a page holds, checking that it is one whole.
#[track_caller]
fn generation(ino: u64, index: u64, bytes: &[u8]) -> u8 {
    let g = bytes[0] ^ byte(ino, index * PS as u64, 0);
    assert_eq!(bytes, &page(ino, index, g)[..bytes.len()], "torn page {ino}/{index}");
    g
}

/// Counts a reader out when it ends, by return or by panic.
struct Finished<'a>(&'a AtomicUsize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn framed_pages_hold_their_bytes_through_fills_writes_drops_and_reclaim() {
    // Small: every frame in one chunk, reused at once.
    stress(40, 3, 96, scaled(40_000));
    // Large: frames spread over several chunks, so that chunks fill, empty,
    // are lent back and unmapped while others are in use.
    let filled = stress(4 * CHUNK_FRAMES, 6, 1024, scaled(20_000));
    let off = std::env::var_os("PAGECACHE_SYSTEM_ALLOC").is_some_and(|v| v == "1");
    if !off {
        assert!(
            filled.chunk_bytes >= 4 * (2 << 20) && filled.used_bytes >= (4 * CHUNK_FRAMES * PS) as u64,
            "a cache filled with four chunks' frames holds fewer: {filled:?}"
        );
    }
    // The last folios' frees wait in the epoch collector for their grace
    // period: let it pass.
    for _ in 0..10_000 {
        if frame_usage().used_bytes == 0 {
            break;
        }
        rcu::flush();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let left = frame_usage();
    assert_eq!(left.used_bytes, 0, "frames not given back: {left:?}");
    assert!(left.chunk_bytes <= 2 << 20, "more than one spare chunk kept: {left:?}");
    // And the pool serves a new cache after its chunks went back.
    stress(2 * CHUNK_FRAMES, 2, 1024, scaled(2_000));
}

/// Two readers and a writer on a cache of `budget` pages over `inodes`
/// files of `pages` pages, first filled to its budget; returns the frames'
/// usage once it was filled.
fn stress(budget: usize, inodes: u64, pages: u64, rounds: usize) -> pagecache::FrameUsage {
    let cache = PageCache::new(Config {
        budget_bytes: budget * PS,
        page_size: PS,
        ..Config::default()
    });
    for n in 0..budget as u64 {
        let (ino, index) = (n / pages % inodes, n % pages);
        cache
            .get_or_fill(ino, index, |b| {
                b.copy_from_slice(&page(ino, index, 0));
                Ok::<_, ()>(PS)
            })
            .unwrap();
    }
    let filled = frame_usage();
    // Readers done: the writer runs until both are.
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // Readers: single pages (filled as generation 0 when missing),
        // ranged copies across pages, held pages.
        for t in 0..2u64 {
            let cache = &cache;
            let done = &done;
            s.spawn(move || {
                // Counted on the way out even if an assertion fails, so
                // that the writer stops and the failure shows.
                let _done = Finished(done);
                let mut rng = SmallRng::seed_from_u64(t);
                for _ in 0..rounds {
                    let ino = rng.random_range(0..inodes);
                    let index = rng.random_range(0..pages);
                    match rng.random_range(0..3) {
                        0 => {
                            let r = cache
                                .get_or_fill(ino, index, |b| {
                                    b.copy_from_slice(&page(ino, index, 0));
                                    Ok::<_, ()>(PS)
                                })
                                .unwrap();
                            let g = generation(ino, index, &r);
                            std::hint::black_box(&r);
                            assert_eq!(generation(ino, index, &r), g, "a held page changed");
                        }
                        1 => {
                            let mut buf = vec![0u8; 3 * PS];
                            let n = cache
                                .read_into(ino, index * PS as u64, &mut buf, |j, b| {
                                    b.copy_from_slice(&page(ino, j, 0));
                                    Ok::<_, ()>(PS)
                                })
                                .unwrap();
                            assert_eq!(n, buf.len());
                            for (j, chunk) in buf.chunks(PS).enumerate() {
                                generation(ino, index + j as u64, chunk);
                            }
                        }
                        _ => {
                            let mut out = Vec::new();
                            let off = index * PS as u64 + 100;
                            cache
                                .read_range_into(ino, off, PS, &mut out, FillOrder::Order(0), |j, b| {
                                    b.copy_from_slice(&page(ino, j, 0));
                                    Ok::<_, ()>(PS)
                                })
                                .unwrap();
                            assert_eq!(out.len(), PS);
                            // The end of page `index`, then the start of the next.
                            let g = out[0] ^ byte(ino, off, 0);
                            assert_eq!(&out[..PS - 100], &page(ino, index, g)[100..], "torn page {ino}/{index}");
                            let next = (index + 1) * PS as u64;
                            let g = out[PS - 100] ^ byte(ino, next, 0);
                            assert_eq!(
                                &out[PS - 100..],
                                &page(ino, index + 1, g)[..100],
                                "torn page {ino}/{}",
                                index + 1
                            );
                        }
                    }
                }
            });
        }
        // A writer replaces whole pages with other generations (copy-on-write
        // of cached ones) and drops ranges and inodes, until the readers are
        // done: a frame freed and handed out again while a reader still
        // copied it would show as a torn page.
        let cache = &cache;
        let done = &done;
        s.spawn(move || {
            let mut rng = SmallRng::seed_from_u64(99);
            while done.load(Ordering::Relaxed) < 2 {
                let ino = rng.random_range(0..inodes);
                let index = rng.random_range(0..pages);
                let g: u8 = rng.random();
                match rng.random_range(0..4) {
                    0 => cache.write(ino, index * PS as u64, &page(ino, index, g)),
                    1 => cache.write_through(ino, index * PS as u64, &page(ino, index, g), None),
                    2 => {
                        cache.drop_range(ino, index, index + 4);
                    }
                    _ => {
                        cache.drop_inode(ino);
                    }
                }
            }
        });
    });
    cache.check_invariants().unwrap();
    // With the frames turned off (for memcheck) no page may use one.
    let off = std::env::var_os("PAGECACHE_SYSTEM_ALLOC").is_some_and(|v| v == "1");
    let usage = frame_usage();
    assert_eq!(
        usage.used_bytes > 0,
        !off,
        "frames turned off: {off}; in use: {usage:?}"
    );
    // (Not bounded by the budget here: folios replaced or dropped wait for
    // their grace period before their frames come back.)
    filled
}
