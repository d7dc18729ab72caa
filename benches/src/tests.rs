use super::*;

#[test]
fn names_are_distinct_and_deterministic() {
    let a = names(2000, 7);
    let b = names(2000, 7);
    assert_eq!(a, b);
    let set: std::collections::HashSet<_> = a.iter().collect();
    assert_eq!(set.len(), a.len());
    assert!(a.iter().all(|n| !n.is_empty() && !n.contains(&b'/') && n.len() <= 40));
}

#[test]
fn zipf_is_skewed_towards_few_keys() {
    let n = 10_000;
    let keys = zipf_keys(n, 0.99, 100_000, 3);
    assert!(keys.iter().all(|&k| (k as usize) < n));
    let mut counts = vec![0u32; n];
    for &k in &keys {
        counts[k as usize] += 1;
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    // Under Zipf(0.99) over 10,000 keys the 1% most popular keys draw about
    // half of the samples; a uniform draw would give them 1%.
    let top: u32 = counts[..n / 100].iter().sum();
    assert!(top > 30_000, "top 1% drew only {top} of 100000");
}

#[test]
fn sparse_indexes_are_distinct_sorted_and_in_range() {
    let v = sparse_indexes(1000, 32, 1);
    assert_eq!(v.len(), 1000);
    assert!(v.windows(2).all(|w| w[0] < w[1]));
    assert!(v.iter().all(|&x| x < 1 << 32));
}

#[test]
fn timed_threads_runs_every_thread_once() {
    let ran = std::sync::atomic::AtomicU64::new(0);
    timed_threads(2, 5, |t, iters| {
        ran.fetch_add((t as u64 + 1) * iters, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(ran.load(std::sync::atomic::Ordering::Relaxed), 5 + 10);
}

#[test]
fn cycle_wraps_around() {
    let mut seen = Vec::new();
    cycle(&[1, 2, 3], 2, 5, |x| seen.push(*x));
    assert_eq!(seen, [3, 1, 2, 3, 1]);
}
