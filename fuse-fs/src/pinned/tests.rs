use std::io::IoSlice;

use pagecache::{Config, FillOrder, FolioSlice, PageCache};

use super::{INLINE, PinnedRead, VECTORED_MAX};

/// A cache of 4 KiB pages whose page `i` of inode 1 holds the byte
/// `i as u8` (the last page `short` bytes long when `short` is non-zero).
fn cache_with(pages: u64, short: usize) -> PageCache {
    cache_of(4096, pages, short)
}

fn cache_of(page_size: usize, pages: u64, short: usize) -> PageCache {
    let c = PageCache::new(Config {
        budget_bytes: 256 << 20,
        page_size,
        ..Config::default()
    });
    for i in 0..pages {
        c.get_or_fill(1, i, |b: &mut [u8]| {
            let n = if i + 1 == pages && short != 0 { short } else { b.len() };
            b[..n].fill(i as u8);
            Ok::<_, ()>(n)
        })
        .expect("fill");
    }
    c
}

/// Page `i` of inode 1 (cached) as a pinned unit.
fn unit(c: &PageCache, i: u64) -> FolioSlice {
    let ps = c.page_size();
    let mut v = Vec::new();
    c.read_refs(1, i * ps as u64, ps, FillOrder::Order(0), &mut v, |_, _| {
        Err::<usize, ()>(())
    })
    .expect("the page is cached");
    assert_eq!(v.len(), 1, "a cached page is one slice");
    v.pop().expect("one slice")
}

/// Concatenates what `with_io_slices` hands over, and counts the slices.
fn gathered(r: &PinnedRead) -> (Vec<u8>, usize) {
    r.with_io_slices(|s: &[IoSlice<'_>]| (s.iter().flat_map(|x| x.iter().copied()).collect(), s.len()))
}

#[test]
fn ranges_across_units_come_out_in_order_and_exact() {
    let c = cache_with(3, 100);
    let mut r = PinnedRead::with_capacity(3);
    r.push(unit(&c, 0), 4000..4096);
    r.push(unit(&c, 1), 0..4096);
    r.push(unit(&c, 2), 0..100);
    let mut want = vec![0u8; 96];
    want.extend(vec![1u8; 4096]);
    want.extend(vec![2u8; 100]);
    assert_eq!(r.len(), want.len());
    assert_eq!(r.units(), 3);
    assert_eq!(r.to_vec(), want);
    assert_eq!(gathered(&r), (want, 3));
}

#[test]
fn empty_ranges_are_not_kept() {
    let c = cache_with(1, 10);
    let mut r = PinnedRead::default();
    r.push(unit(&c, 0), 10..10);
    assert!(r.is_empty());
    assert_eq!(r.units(), 0);
    assert_eq!(gathered(&r), (Vec::new(), 0));
}

#[test]
#[should_panic(expected = "outside a unit")]
fn a_range_past_the_unit_is_refused() {
    let c = cache_with(1, 10);
    PinnedRead::default().push(unit(&c, 0), 0..11);
}

#[test]
fn a_pinned_unit_keeps_its_bytes_when_the_cache_writes_over_it() {
    let c = cache_with(1, 0);
    let mut r = PinnedRead::default();
    r.push(unit(&c, 0), 0..8);
    // The write cannot change a held page: it drops it from the cache.
    c.write(1, 0, &[9u8; 8]);
    assert_eq!(r.to_vec(), vec![0u8; 8]);
    assert!(c.get(1, 0).is_none(), "the held page left the cache");
}

#[test]
fn many_small_units_are_gathered_into_one_slice() {
    let c = cache_with(40, 0);
    let mut r = PinnedRead::with_capacity(40);
    for i in 0..40 {
        r.push(unit(&c, i), 0..4096);
    }
    let want: Vec<u8> = (0..40u8).flat_map(|i| vec![i; 4096]).collect();
    assert_eq!(gathered(&r), (want.clone(), 1));
    // The thread's buffer is reused: a second, shorter reply is exact too.
    let mut r = PinnedRead::default();
    for i in 0..9 {
        r.push(unit(&c, i), 100..200);
    }
    let want: Vec<u8> = (0..9u8).flat_map(|i| vec![i; 100]).collect();
    assert_eq!(gathered(&r), (want, 1));
}

#[test]
fn small_replies_go_vectored_and_large_ones_gathered() {
    const PS: usize = 16 << 10;
    let c = cache_of(PS, 8, 0);
    let build = |units: u64, to: usize| {
        let mut r = PinnedRead::with_capacity(units as usize);
        for i in 0..units {
            r.push(unit(&c, i), 0..to);
        }
        r
    };
    let want = |units: u64, to: usize| (0..units).flat_map(|i| vec![i as u8; to]).collect::<Vec<u8>>();
    // 4 units of 16 KiB: 64 KiB, vectored, one slice per unit.
    assert_eq!(VECTORED_MAX, 4 * PS);
    assert_eq!(gathered(&build(4, PS)), (want(4, PS), 4));
    // 5 of them pass 64 KiB: gathered.
    assert_eq!(gathered(&build(5, PS)), (want(5, PS), 1));
    // 8 small units stay vectored; a ninth is gathered however small.
    assert_eq!(gathered(&build(INLINE as u64, 10)), (want(8, 10), 8));
}

#[test]
fn folio_slices_are_whole_units() {
    use pagecache::FillOrder;
    let c = PageCache::new(Config {
        budget_bytes: 16 << 20,
        page_size: 4096,
        ..Config::default()
    });
    let mut slices = Vec::new();
    let n = c
        .read_refs(
            1,
            1000,
            300_000,
            FillOrder::Order(6),
            &mut slices,
            |first, b: &mut [u8]| {
                for (k, x) in b.iter_mut().enumerate() {
                    *x = ((first as usize * 4096 + k) % 251) as u8;
                }
                Ok::<_, ()>(b.len())
            },
        )
        .expect("read");
    assert_eq!(n, 300_000);
    assert!(
        slices.len() <= 3,
        "{} slices for 300,000 bytes of 256 KiB folios",
        slices.len()
    );
    let r = PinnedRead::from_folios(slices.into_iter());
    let want: Vec<u8> = (1000..301_000).map(|i: usize| (i % 251) as u8).collect();
    assert_eq!(r.len(), 300_000);
    assert_eq!(r.to_vec(), want);
    assert_eq!(gathered(&r), (want, 1), "300,000 bytes: gathered");
}
