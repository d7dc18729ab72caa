//! Slow sources: a network or FUSE filesystem as the source gets its own
//! defaults (a longer revalidation interval, more workers), lookups of one
//! directory's children are in flight together rather than one behind the
//! other, a listing's names are answered before their lookups, and
//! directory listings are served from rcufs's cache within the interval
//! (and forgotten by a change through the mount or a drop).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Barrier;

use crate::harness::{Mount, listed};

fn tree(src: &std::path::Path) {
    fs::create_dir(src.join("d")).unwrap();
    for i in 0..32 {
        fs::write(src.join(format!("d/f{i:02}")), [i as u8]).unwrap();
    }
}

#[test]
fn a_fuse_source_gets_the_network_defaults_and_a_local_one_does_not() {
    let Some(lower) = Mount::with(&["--coherence", "ttl"], tree) else {
        return;
    };
    let local = lower.stats();
    assert_eq!(local["source"]["kind"], "local", "{}", local["source"]);
    assert_eq!(local["source"]["revalidate_secs"], 1.0);
    let Some(upper) = Mount::over(&lower.mnt, &[]) else {
        return;
    };
    let s = upper.stats();
    assert_eq!(s["source"]["kind"], "network", "{}", s["source"]);
    assert_eq!(s["coherence"]["mode"], "ttl");
    assert_eq!(s["source"]["revalidate_secs"], 10.0);
    assert!(s["source"]["workers"].as_u64().unwrap() >= 16, "{}", s["source"]);
    // Given options win over the source's defaults.
    let Some(given) = Mount::over(&lower.mnt, &["--revalidate", "0.5", "--threads", "3"]) else {
        return;
    };
    let s = given.stats();
    assert_eq!(s["source"]["revalidate_secs"], 0.5);
    assert_eq!(s["source"]["workers"], 3);
}

/// 16 threads each `stat` another child of one directory at the same time,
/// every lookup in the source taking 300 ms (`RCUFS_FAULT=source-delay`):
/// with enough workers the lookups are in flight together; with two, at
/// most two are.
#[test]
fn parallel_lookups_of_one_directorys_children_are_in_flight_together() {
    for (threads, at_least, at_most) in [("16", 8, 16), ("2", 1, 2)] {
        let env = [("RCUFS_FAULT", "source-delay:300")];
        let Some(m) = Mount::with_env(&["--threads", threads, "--coherence", "ttl"], &env, tree) else {
            return;
        };
        fs::metadata(m.at("d")).unwrap();
        let before = m.stats()["source"]["lookups"].as_u64().unwrap();
        let barrier = Barrier::new(16);
        std::thread::scope(|s| {
            for i in 0..16 {
                let (m, barrier) = (&m, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    assert_eq!(fs::read(m.at(&format!("d/f{i:02}"))).unwrap(), [i as u8]);
                });
            }
        });
        let src = m.stats()["source"].clone();
        let max = src["lookups_in_flight_max"].as_u64().unwrap();
        assert!(
            src["lookups"].as_u64().unwrap() >= before + 16,
            "the lookups did not reach the source: {src}"
        );
        assert!(
            (at_least..=at_most).contains(&max),
            "--threads {threads}: {max} lookups in flight at most, expected {at_least}..={at_most}: {src}"
        );
    }
}

#[test]
fn listings_are_served_from_the_cache_and_forgotten_by_changes_and_drops() {
    listings_in(&[]);
}

/// With `--kernel-cache` the kernel caches the listings too
/// (`FOPEN_CACHE_DIR`), and must drop its copy exactly when rcufs does.
#[test]
fn listings_are_served_from_the_cache_and_forgotten_by_changes_and_drops_with_kernel_cache() {
    listings_in(&["--kernel-cache"]);
}

fn listings_in(extra: &[&str]) {
    let mut args = vec!["--coherence", "ttl", "--revalidate", "3600"];
    args.extend_from_slice(extra);
    let Some(m) = Mount::with(&args, tree) else {
        return;
    };
    let list = || listed(fs::read_dir(m.at("d")).unwrap());
    let first = list();
    assert_eq!(first.len(), 32);
    let reads = m.stats()["listings"]["reads"].as_u64().unwrap();
    let hits = m.stats()["listings"]["hits"].as_u64().unwrap();
    assert_eq!(list(), first);
    let l = m.stats()["listings"].clone();
    assert_eq!(
        l["reads"].as_u64().unwrap(),
        reads,
        "the second listing read the source: {l}"
    );
    assert!(l["hits"].as_u64().unwrap() > hits, "{l}");
    // A name made directly in the source is not listed within the
    // interval (that is the promise: within R)...
    fs::write(m.src_at("d/made-in-source"), b"x").unwrap();
    assert!(!list().contains(&"made-in-source".to_string()));
    // ...but one made through the mount is, at once, and so is the rest.
    fs::write(m.at("d/made-here"), b"y").unwrap();
    let now = list();
    assert!(now.contains(&"made-here".to_string()), "{now:?}");
    assert!(now.contains(&"made-in-source".to_string()), "{now:?}");
    fs::remove_file(m.at("d/made-here")).unwrap();
    assert!(!list().contains(&"made-here".to_string()));
    // A drop forgets every listing.
    fs::remove_file(m.src_at("d/made-in-source")).unwrap();
    assert!(list().contains(&"made-in-source".to_string()), "still the kept listing");
    let out = crate::harness::rcufs().arg("drop").arg(m.at("")).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(list(), first);
}

/// A listing with attributes (READDIRPLUS) of a directory whose entries
/// rcufs has not seen, over a FUSE source where every lookup takes 200 ms:
/// the names are answered at once, without attributes, and looked up in
/// the background (`fs/prefetch.rs`); every entry then shows its type,
/// size and mode, in both modes. A drop empties the background queue.
#[test]
fn readdirplus_over_a_slow_source_answers_the_names_first_and_looks_them_up_behind() {
    let Some(lower) = Mount::with(&["--coherence", "ttl"], tree) else {
        return;
    };
    for mode in [&[][..], &["--kernel-cache"][..]] {
        let env = [("RCUFS_FAULT", "source-delay:200")];
        let Some(upper) = Mount::over_with_env(&lower.mnt, mode, &env) else {
            return;
        };
        fs::metadata(upper.at("d")).unwrap();
        let before = upper.stats()["source"].clone();
        let mut names: Vec<(String, bool)> = fs::read_dir(upper.at("d"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.file_type().unwrap().is_file(),
                )
            })
            .collect();
        let listed = upper.stats()["source"].clone();
        names.sort();
        let expected: Vec<(String, bool)> = (0..32).map(|i| (format!("f{i:02}"), true)).collect();
        assert_eq!(names, expected, "{mode:?}: the listing");
        let n = |s: &serde_json::Value, k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no {k} in {s}"));
        assert!(
            n(&listed, "names_first") >= n(&before, "names_first") + 32,
            "{mode:?}: the names were not answered without attributes: {listed}"
        );
        // Two background threads at 200 ms a lookup need 3.2 s for the 32
        // names: the listing above did not wait for them.
        assert!(
            n(&listed, "lookups") < n(&before, "lookups") + 32,
            "{mode:?}: the listing waited for its entries' lookups: {listed}"
        );
        for i in 0..32 {
            let m = fs::symlink_metadata(upper.at(&format!("d/f{i:02}"))).unwrap();
            assert!(m.is_file(), "{mode:?}: f{i:02}");
            assert_eq!(m.len(), 1, "{mode:?}: f{i:02}");
            assert_eq!(
                m.permissions().mode(),
                fs::symlink_metadata(lower.src.join(format!("d/f{i:02}")))
                    .unwrap()
                    .permissions()
                    .mode(),
                "{mode:?}: f{i:02}"
            );
        }
        let after = upper.stats()["source"].clone();
        assert!(
            n(&after, "names_first_looked_up") >= 1,
            "{mode:?}: no name was looked up in the background: {after}"
        );
        assert_eq!(n(&after, "names_first_unqueued"), 0, "{mode:?}: {after}");
    }
    // A drop right after a listing empties the queue: the names listed
    // before it are not put back in the cache behind it.
    let env = [("RCUFS_FAULT", "source-delay:200")];
    let Some(upper) = Mount::over_with_env(&lower.mnt, &[], &env) else {
        return;
    };
    fs::metadata(upper.at("d")).unwrap();
    assert_eq!(fs::read_dir(upper.at("d")).unwrap().count(), 32);
    let s = upper.stats()["source"].clone();
    assert!(
        s["names_first_waiting"].as_u64().unwrap() > 0,
        "nothing queued to drop: {s}"
    );
    let out = crate::harness::rcufs().arg("drop").arg(upper.at("")).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let s = upper.stats()["source"].clone();
    assert_eq!(s["names_first_waiting"], 0, "the drop left names queued: {s}");
}

/// After the interval, the first `stat` that finds a stale name refreshes
/// every stale cached name of its directory at once; the siblings' `stat`s
/// that follow are answered without asking the source one by one.
#[test]
fn a_stale_name_refreshes_its_directorys_stale_names_at_once() {
    let Some(lower) = Mount::with(&["--coherence", "ttl"], tree) else {
        return;
    };
    let Some(upper) = Mount::over(&lower.mnt, &["--revalidate", "1"]) else {
        return;
    };
    let stat_all = |from: usize| {
        for i in from..32 {
            assert_eq!(fs::metadata(upper.at(&format!("d/f{i:02}"))).unwrap().len(), 1);
        }
    };
    stat_all(0);
    std::thread::sleep(std::time::Duration::from_millis(1300));
    fs::metadata(upper.at("d/f00")).unwrap();
    let src = upper.stats()["source"].clone();
    assert!(src["dir_refreshes"].as_u64().unwrap() >= 1, "no refresh: {src}");
    let before = src["lookups"].as_u64().unwrap();
    stat_all(1);
    let after = upper.stats()["source"]["lookups"].as_u64().unwrap();
    assert!(
        after - before < 4,
        "the siblings went to the source one by one ({} lookups): {}",
        after - before,
        upper.stats()["source"]
    );
}

/// Over a FUSE source rcufs takes a name's attributes from the source's
/// lookup (`AT_STATX_DONT_SYNC`, one request to the source's daemon
/// instead of two): a change of mode and size made in the source below is
/// still seen once both mounts' intervals have passed, in both modes.
#[test]
fn a_fuse_sources_attribute_changes_are_seen_after_the_interval() {
    for mode in [&[][..], &["--kernel-cache"][..]] {
        let Some(lower) = Mount::with(&["--coherence", "ttl", "--revalidate", "0.2"], tree) else {
            return;
        };
        let mut args = vec!["--revalidate", "0.3"];
        args.extend_from_slice(mode);
        let Some(upper) = Mount::over(&lower.mnt, &args) else {
            return;
        };
        let file = upper.at("d/f03");
        let before = fs::symlink_metadata(&file).unwrap();
        assert_eq!(before.len(), 1);
        assert_ne!(before.permissions().mode() & 0o777, 0o600);
        fs::write(lower.src.join("d/f03"), b"grown").unwrap();
        fs::set_permissions(lower.src.join("d/f03"), fs::Permissions::from_mode(0o600)).unwrap();
        let mut last = (0, 0);
        let seen = crate::harness::eventually(std::time::Duration::from_secs(5), || {
            let m = fs::symlink_metadata(&file).unwrap();
            last = (m.len(), m.permissions().mode() & 0o777);
            last == (5, 0o600)
        });
        assert!(
            seen,
            "{mode:?}: still {last:?} through the upper mount (source: 5 bytes, 0600)"
        );
        // A name created below is found too.
        fs::write(lower.src.join("d/new"), b"n").unwrap();
        assert!(
            crate::harness::eventually(std::time::Duration::from_secs(5), || upper.at("d/new").exists()),
            "{mode:?}: a new name in the source is not seen"
        );
    }
}

/// A walk of a tree over a slow source (every source lookup 20 ms): the
/// subdirectories after the ones it opened are listed ahead
/// (`fs/walk_ahead.rs`), and everything the walk sees, in both modes, is
/// what the source holds.
#[test]
fn a_walk_over_a_slow_source_lists_the_next_directories_ahead() {
    let Some(lower) = Mount::with(&["--coherence", "ttl"], |src| {
        for t in 0..3 {
            for s in 0..6 {
                let d = src.join(format!("w/t{t}/s{s}"));
                fs::create_dir_all(&d).unwrap();
                for f in 0..5 {
                    fs::write(d.join(format!("f{f}")), vec![b'x'; t * 100 + s * 10 + f]).unwrap();
                }
            }
        }
    }) else {
        return;
    };
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, u64)>, root: &std::path::Path) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if m.is_dir() {
                out.push((rel, 0));
                walk(&p, out, root);
            } else {
                out.push((rel, m.len()));
            }
        }
    }
    let mut expected = Vec::new();
    walk(&lower.src.join("w"), &mut expected, &lower.src);
    expected.sort();
    assert_eq!(expected.len(), 3 + 18 + 90);
    for mode in [&[][..], &["--kernel-cache"][..]] {
        let env = [("RCUFS_FAULT", "source-delay:20")];
        let Some(upper) = Mount::over_with_env(&lower.mnt, mode, &env) else {
            return;
        };
        let mut got = Vec::new();
        walk(&upper.at("w"), &mut got, &upper.mnt);
        got.sort();
        assert_eq!(got, expected, "{mode:?}: the walk through the mount");
        let s = upper.stats()["source"].clone();
        assert!(
            s["dirs_listed_ahead"].as_u64().unwrap() >= 5,
            "{mode:?}: the walk's next directories were not listed ahead: {s}"
        );
        assert!(
            upper.stats()["listings"]["hits"].as_u64().unwrap() >= 5,
            "{mode:?}: no OPENDIR was served from a listing read ahead: {}",
            upper.stats()["listings"]
        );
    }
}
