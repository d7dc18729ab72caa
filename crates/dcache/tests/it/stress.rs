//! Multi-threaded stress tests with verification: concurrent lookups,
//! inserts, renames, drops and pruning, checking that no insert is lost, no
//! entry is seen after its drop, no unrelated entry is missed while renames
//! move nodes between chains, and no payload is freed while counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use dcache::{Config, Dcache, Dentry, Lookup};

/// Scales iteration counts down in debug builds.
fn scaled(n: usize) -> usize {
    if cfg!(debug_assertions) { n / 10 } else { n }
}

/// A payload that checks it is still alive whenever it is read.
#[derive(Debug)]
struct Payload {
    value: u64,
    check: u64,
    alive: AtomicBool,
}

impl Payload {
    fn new(value: u64) -> Self {
        Self {
            value,
            check: !value,
            alive: AtomicBool::new(true),
        }
    }

    #[track_caller]
    fn verify(&self) -> u64 {
        assert!(self.alive.load(Ordering::Relaxed), "payload read after its drop");
        assert_eq!(self.check, !self.value, "payload torn or freed");
        self.value
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Relaxed);
    }
}

fn name(i: usize) -> Vec<u8> {
    format!("entry-{i}").into_bytes()
}

/// Concurrent inserts of overlapping name sets: every name ends up cached
/// exactly once, and every inserter got the one entry.
#[test]
fn no_lost_insert_and_one_entry_per_name() {
    let c = Arc::new(Dcache::new(
        Config {
            max_entries: 1 << 20,
            ..Config::default()
        },
        Payload::new(0),
    ));
    let n = scaled(20_000);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let c = c.clone();
            thread::spawn(move || {
                let root = c.root();
                let mut got = Vec::with_capacity(n);
                for i in 0..n {
                    // Threads overlap pairwise on each name.
                    let k = (i * 2 + t % 2) % n;
                    let d = c.insert(&root, &name(k), Some(Payload::new(k as u64)));
                    assert_eq!(d.payload().unwrap().verify(), k as u64);
                    got.push((k, d.id()));
                }
                got
            })
        })
        .collect();
    let mut ids = std::collections::HashMap::new();
    for t in threads {
        for (k, id) in t.join().unwrap() {
            assert_eq!(*ids.entry(k).or_insert(id), id, "two entries for one name");
        }
    }
    let root = c.root();
    for (&k, &id) in &ids {
        match c.lookup(&root, &name(k)) {
            Lookup::Positive(d) => assert_eq!(d.id(), id),
            other => panic!("lost insert of {k}: {other:?}"),
        }
    }
    assert_eq!(c.len(), ids.len());
}

/// Readers look up stable entries while writers rename, insert, remove and
/// prune other entries in the same chains (few buckets), and drop a scratch
/// subtree: a stable entry is never missed, payloads read are never freed.
#[test]
fn readers_never_miss_stable_entries_under_churn() {
    // A small table so that stable and churned names share chains.
    let c = Arc::new(Dcache::new(
        Config {
            max_entries: 64,
            max_negative: 16,
            prune_batch: 8,
        },
        Payload::new(0),
    ));
    let root = c.root();
    let stable: Vec<Dentry<Payload>> = (0..32)
        .map(|i| c.insert(&root, &name(i), Some(Payload::new(i as u64))))
        .collect();
    let scratch = c.insert(&root, b"scratch", Some(Payload::new(999)));
    // A stable directory with stable children, for walks and pinned lookups.
    let sdir = c.insert(&root, b"stable-dir", Some(Payload::new(500)));
    let schildren: Vec<Dentry<Payload>> = (0..8)
        .map(|i| c.insert(&sdir, &name(i), Some(Payload::new(600 + i as u64))))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..2 {
        let (c, stop, reads) = (c.clone(), stop.clone(), reads.clone());
        handles.push(thread::spawn(move || {
            let root = c.root();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let k = i % 32;
                match c.lookup(&root, &name(k)) {
                    Lookup::Positive(d) => assert_eq!(d.payload().unwrap().verify(), k as u64),
                    other => panic!("stable entry {k} missed: {other:?}"),
                }
                let v = c.lookup_with(&root, &name(k), |p| p.map(Payload::verify));
                assert_eq!(v, Some(Some(k as u64)));
                // A whole-path walk and a pinned two-step lookup of stable
                // entries behind churned chains.
                let j = k % 8;
                match c.walk(&root, [&b"stable-dir"[..], &name(j)[..]]) {
                    dcache::Walk::Found(d) => assert_eq!(d.payload().unwrap().verify(), 600 + j as u64),
                    other => panic!("stable path {j} missed: {other:?}"),
                }
                {
                    let p = c.pin();
                    let d = p.lookup_in(p.root(), b"stable-dir").expect("stable dir");
                    let e = p.lookup_in(d, &name(j)).expect("stable child");
                    assert_eq!(e.payload().unwrap().verify(), 600 + j as u64);
                }
                // Churned names: whatever is found must be alive.
                let _ = c.lookup_with(&root, &name(1000 + k), |p| p.map(Payload::verify));
                i += 1;
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let writer = {
        let (c, stop, sdir, reads) = (c.clone(), stop.clone(), sdir.clone(), reads.clone());
        thread::spawn(move || {
            let root = c.root();
            let rounds = scaled(20_000);
            let mut seen = 0;
            for r in 0..rounds {
                // Every 64 rounds, wait until the readers have made progress,
                // so that reads really overlap the churn even when the
                // scheduler of a loaded machine would let this thread run
                // all its rounds first.
                if r % 64 == 0 {
                    // A liveness guard, not a timing check: readers that
                    // stopped (panicked) must fail the test, not hang it.
                    let since = std::time::Instant::now();
                    while reads.load(Ordering::Relaxed) == seen {
                        assert!(since.elapsed().as_secs() < 60, "the readers stopped reading");
                        thread::yield_now();
                    }
                    seen = reads.load(Ordering::Relaxed);
                }
                let a = name(1000 + r % 32);
                let b = name(1000 + (r + 7) % 32);
                match r % 6 {
                    0 => drop(c.insert(&root, &a, Some(Payload::new(1000 + (r % 32) as u64)))),
                    1 if r % 12 == 1 => {
                        // Through the stable directory and back.
                        // Only this thread moves churned entries, so the way
                        // back works whenever the way there did.
                        if c.rename(&root, &a, &sdir, &b) {
                            assert!(c.rename(&sdir, &b, &root, &a));
                        }
                    }
                    1 => drop(c.rename(&root, &a, &root, &b)),
                    2 => drop(c.remove(&root, &a)),
                    3 => drop(c.insert(&root, &a, None)),
                    4 => {
                        let s = c.insert(&scratch, &a, Some(Payload::new(5)));
                        drop(c.insert(&s, b"x", None));
                        c.drop_subtree(&scratch, |_| true);
                    }
                    _ => drop(c.prune(4)),
                }
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    writer.join().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    c.assert_consistent();
    c.assert_lists_consistent();
    for (i, d) in schildren.iter().enumerate() {
        assert!(d.is_hashed());
        assert_eq!(d.payload().unwrap().verify(), 600 + i as u64);
    }
    for (i, d) in stable.iter().enumerate() {
        assert!(d.is_hashed());
        assert_eq!(d.payload().unwrap().verify(), i as u64);
    }
}

/// After `drop_subtree` returns, no entry inserted before the call is found,
/// while another thread keeps inserting under the same directory.
#[test]
fn no_entry_seen_after_its_drop() {
    use std::sync::Mutex;
    let c = Arc::new(Dcache::new(
        Config {
            max_entries: 1 << 20,
            prune_batch: 16,
            ..Config::default()
        },
        Payload::new(0),
    ));
    let root = c.root();
    let dir = c.insert(&root, b"dir", Some(Payload::new(1)));
    // The last (index, directory id, leaf id) inserted, published after the
    // inserts returned.
    let last = Arc::new(Mutex::new(None::<(usize, u64, u64)>));
    let done = Arc::new(AtomicBool::new(false));
    let total = scaled(30_000);
    let inserter = {
        let (c, dir, last, done) = (c.clone(), dir.clone(), last.clone(), done.clone());
        thread::spawn(move || {
            for i in 0..total {
                let sub = c.insert(&dir, &name(i % 64), Some(Payload::new(2)));
                let leaf = c.insert(&sub, &name(i), Some(Payload::new(i as u64)));
                *last.lock().unwrap() = Some((i, sub.id(), leaf.id()));
            }
            done.store(true, Ordering::Release);
        })
    };
    loop {
        let finished = done.load(Ordering::Acquire);
        let before = *last.lock().unwrap();
        c.drop_subtree(&dir, |_| true);
        let Some((i, sub_id, leaf_id)) = before else {
            assert!(!finished, "the inserter publishes before it finishes");
            continue;
        };
        match c.walk(&dir, [&name(i % 64)[..], &name(i)[..]]) {
            dcache::Walk::Found(d) => assert_ne!(d.id(), leaf_id, "a dropped leaf is still found"),
            dcache::Walk::Miss { deepest, consumed: 1 } => {
                assert_ne!(deepest.id(), sub_id, "a dropped directory is still found")
            }
            dcache::Walk::Miss { consumed, .. } => assert_eq!(consumed, 0),
            dcache::Walk::Negative { .. } => panic!("no negative entries here"),
        }
        if finished {
            break;
        }
    }
    inserter.join().unwrap();
}

/// Handles taken from lookups keep payloads alive while a pruner, a dropper
/// and capacity pressure free everything unused around them.
#[test]
fn no_entry_freed_while_counted() {
    let c = Arc::new(Dcache::new(
        Config {
            max_entries: 128,
            max_negative: 32,
            prune_batch: 16,
        },
        Payload::new(0),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for t in 0..2u64 {
        let (c, stop) = (c.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            let root = c.root();
            let mut held: Vec<Dentry<Payload>> = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = (i * 7 + t) % 512;
                let n = name(k as usize);
                match c.lookup(&root, &n) {
                    Lookup::Positive(d) => {
                        assert_eq!(d.payload().unwrap().verify(), k);
                        held.push(d);
                    }
                    _ => held.push(c.insert(&root, &n, Some(Payload::new(k)))),
                }
                if held.len() > 16 {
                    let d = held.remove(0);
                    assert_eq!(d.payload().unwrap().verify() % 512, d.payload().unwrap().value);
                }
                i += 1;
            }
            for d in &held {
                d.payload().unwrap().verify();
            }
        }));
    }
    let pruner = {
        let (c, stop) = (c.clone(), stop.clone());
        thread::spawn(move || {
            let root = c.root();
            for r in 0..scaled(5_000) {
                if r % 10 == 0 {
                    c.drop_subtree(&root, |p| p.value % 2 == 0);
                } else {
                    c.prune(8);
                }
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    pruner.join().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    c.assert_lists_consistent();
    // Once every handle is gone, everything can be freed.
    let root = c.root();
    c.drop_subtree(&root, |_| true);
    assert_eq!(c.len(), 0);
}

/// A rename over a cached target is one step: a name that is cached before
/// and after every rename (a fresh entry is renamed over it again and again)
/// is never missed by a concurrent lookup, as with the kernel's `rename_lock`
/// covering the target's unhash.
#[test]
fn rename_over_target_never_misses_the_target_name() {
    let c = Arc::new(Dcache::new(Config::default(), Payload::new(0)));
    let root = c.root();
    drop(c.insert(&root, b"target", Some(Payload::new(0))));
    let done = Arc::new(AtomicBool::new(false));
    let rounds = scaled(20_000);
    let renamer = {
        let (c, root, done) = (c.clone(), root.clone(), done.clone());
        thread::spawn(move || {
            for i in 1..=rounds {
                drop(c.insert(&root, b"source", Some(Payload::new(i as u64))));
                assert!(c.rename(&root, b"source", &root, b"target"));
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut misses = 0;
    while !done.load(Ordering::Acquire) {
        match c.lookup(&root, b"target") {
            Lookup::Positive(d) => {
                d.payload().unwrap().verify();
            }
            _ => misses += 1,
        }
    }
    renamer.join().unwrap();
    assert_eq!(misses, 0, "the target name was missed mid-rename");
}

/// Replacing a cached entry (a positive insert over a negative one, as a
/// create does, or `replace`) is one step: a name that stays cached through
/// every replacement is never missed by a concurrent lookup.
#[test]
fn replacing_an_entry_never_misses_the_name() {
    let c = Arc::new(Dcache::new(Config::default(), Payload::new(0)));
    let root = c.root();
    drop(c.insert(&root, b"name", None));
    let done = Arc::new(AtomicBool::new(false));
    let rounds = scaled(20_000);
    let writer = {
        let (c, root, done) = (c.clone(), root.clone(), done.clone());
        thread::spawn(move || {
            for i in 1..=rounds {
                // A create over the negative entry, then back to negative.
                drop(c.insert(&root, b"name", Some(Payload::new(i as u64))));
                drop(c.replace(&root, b"name", None));
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut misses = 0;
    while !done.load(Ordering::Acquire) {
        match c.lookup(&root, b"name") {
            Lookup::Positive(d) => {
                d.payload().unwrap().verify();
            }
            Lookup::Negative => {}
            Lookup::Miss => misses += 1,
        }
    }
    writer.join().unwrap();
    assert_eq!(misses, 0, "the name was missed while an insert replaced its entry");
}

/// A rename changes the moved node's key (parent id, name) in place, under
/// the node's sequence count. Readers look up the keys a torn read of it
/// would give (the other parent with either name; names mixing the words of
/// the two names) in a cache where every key of one name length has the
/// same hash, so only the sequence count keeps them from matching: each of
/// those lookups must miss. The moving entry's `name()` is always one of
/// its two names, never a mixture. Short (inline) and long names alike.
#[test]
fn torn_keys_never_match_while_renames_change_keys_in_place() {
    fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
        a.iter().chain(b).copied().collect()
    }
    for (word, rest) in [(8, 8), (8, 32)] {
        let (upper, lower) = (vec![b'A'; word], vec![b'a'; word]);
        let (upper_rest, lower_rest) = (vec![b'B'; rest], vec![b'b'; rest]);
        // The entry moves between (a, n1) and (b, n2).
        let n1 = cat(&upper, &lower_rest);
        let n2 = cat(&lower, &upper_rest);
        let torn_names = [cat(&lower, &lower_rest), cat(&upper, &upper_rest)];
        let c = Arc::new(Dcache::with_colliding_hashes(Config::default(), Payload::new(0)));
        let root = c.root();
        let a = c.insert(&root, b"a", Some(Payload::new(1)));
        let b = c.insert(&root, b"b", Some(Payload::new(2)));
        let x = c.insert(&a, &n1, Some(Payload::new(3)));
        // Probes that must miss: the other parent's name, and the mixtures.
        let mut probes = vec![(b.clone(), n1.clone()), (a.clone(), n2.clone())];
        for t in &torn_names {
            probes.push((a.clone(), t.clone()));
            probes.push((b.clone(), t.clone()));
        }
        let probes = Arc::new(probes);
        let done = Arc::new(AtomicBool::new(false));
        // Readers that finished a pass of their probes. The renames go on
        // until both have (on two busy cores the writer could otherwise
        // finish before a reader is scheduled at all).
        let passed = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (c, probes, done, x) = (c.clone(), probes.clone(), done.clone(), x.clone());
                let (n1, n2, passed) = (n1.clone(), n2.clone(), passed.clone());
                thread::spawn(move || {
                    let mut lookups = 0u64;
                    while !done.load(Ordering::Acquire) {
                        for (parent, name) in probes.iter() {
                            let hit = c.lookup_with(parent, name, |p| p.map(Payload::verify));
                            assert_eq!(hit, None, "a torn key matched: {:?}", String::from_utf8_lossy(name));
                            lookups += 1;
                        }
                        let now = x.name();
                        assert!(
                            now == n1 || now == n2,
                            "a torn name: {:?}",
                            String::from_utf8_lossy(&now)
                        );
                        if lookups == probes.len() as u64 {
                            passed.fetch_add(1, Ordering::Release);
                        }
                    }
                    lookups
                })
            })
            .collect();
        let mut i = 0;
        while i < scaled(20_000) || passed.load(Ordering::Acquire) < 2 {
            assert!(c.rename(&a, &n1, &b, &n2));
            assert!(c.rename(&b, &n2, &a, &n1));
            i += 1;
        }
        done.store(true, Ordering::Release);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        assert_eq!(x.name(), n1);
        assert!(matches!(c.lookup(&a, &n1), Lookup::Positive(_)));
    }
}
