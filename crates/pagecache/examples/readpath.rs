//! How a FUSE read reply is best assembled from cached pages: page by page
//! with `get_or_fill` into a growing `Vec` (what `fuse-fs`'s `Data::read`
//! does), or with one ranged `read_into` into a zeroed `Vec` of the reply's
//! size. 128 KiB reads from a cached 4 MiB file; prints the time per read of
//! each, alternated over 7 rounds, and the median ratio (round 0 is warm-up).
//!
//! `cargo run --release -p pagecache --example readpath`

use pagecache::{Config, PageCache};
use std::hint::black_box;
use std::time::Instant;
/// Alternates the two ways over 7 rounds and prints their times.
fn main() {
    let cache = PageCache::new(Config::default());
    let ps = 4096u64;
    let file = 4u64 << 20;
    for i in 0..file / ps {
        cache
            .get_or_fill(1, i, |b: &mut [u8]| -> Result<usize, ()> {
                b.fill(i as u8);
                Ok(b.len())
            })
            .unwrap();
    }
    let size = 128 * 1024usize;
    let reads = 20_000u64;
    let mut res = Vec::new();
    for round in 0..7 {
        // old: per-page get_or_fill + extend
        let t = Instant::now();
        for r in 0..reads {
            let offset = (r * 131_072 + 1000) % (file - size as u64);
            let end = offset + size as u64;
            let mut out = Vec::with_capacity(size);
            let mut index = offset / ps;
            while index * ps < end {
                let start = index * ps;
                let page = cache
                    .get_or_fill(1, index, |_b: &mut [u8]| -> Result<usize, ()> { unreachable!() })
                    .unwrap();
                let from = (offset.max(start) - start) as usize;
                let to = (page.len() as u64).min(end - start) as usize;
                out.extend_from_slice(&page[from..to]);
                index += 1;
            }
            black_box(&out);
        }
        let old = t.elapsed().as_nanos() as f64 / reads as f64;
        let t = Instant::now();
        for r in 0..reads {
            let offset = (r * 131_072 + 1000) % (file - size as u64);
            let mut out = vec![0u8; size];
            let n = cache
                .read_into(1, offset, &mut out, |_i: u64, _b: &mut [u8]| -> Result<usize, ()> {
                    unreachable!()
                })
                .unwrap();
            out.truncate(n);
            black_box(&out);
        }
        let new = t.elapsed().as_nanos() as f64 / reads as f64;
        if round > 0 {
            res.push(new / old);
        }
        println!(
            "round {round}: per-page {old:.0} ns, read_into {new:.0} ns per 128 KiB read, ratio {:.2}",
            new / old
        );
    }
    res.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("median new/old {:.2}", res[res.len() / 2]);
}
