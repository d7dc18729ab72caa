//! Directory drop by ioctl and by xattr: the counters, the effect (a change
//! made directly in the source becomes visible only after the drop),
//! concurrency with readers, permissions and bad input.
//!
//! The mounts here use `--revalidate 3600` so that nothing but the drop
//! refreshes what the caches hold within a test.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;

use fuse_fs::protocol::{DropArgs, DropMode, IOC_DROP, XATTR_DROP};

use crate::harness::{Mount, content, write_tree};
use crate::sys::{self, errno};

/// Timeouts of an hour and no watch: a change made in the source stays
/// unseen until a drop, which is what these tests check.
const SLOW_REVALIDATE: &[&str] = &["--coherence", "ttl", "--revalidate", "3600"];

fn tree(src: &Path) {
    for i in 0..20 {
        write_tree(
            src,
            &[
                (&format!("d/sub/f{i}"), &content(i, 10_000)),
                (&format!("other/g{i}"), b"other"),
            ],
        );
    }
}

/// Dentries a drop took out of the dcache: freed (`dentries_dropped`) or,
/// when the kernel still holds their inode, only unhashed (`busy`). Either
/// way the next lookup of the name goes to the source.
pub fn unhashed(out: &DropArgs) -> u64 {
    out.dentries_dropped + out.busy
}

/// Walks and reads everything under `dir` (fills both caches).
fn walk(dir: &Path) -> usize {
    let mut files = 0;
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            files += walk(&e.path());
        } else {
            fs::read(e.path()).unwrap();
            files += 1;
        }
    }
    files
}

#[test]
fn ioctl_drop_counts_and_makes_a_new_source_name_visible() {
    let Some(m) = Mount::with(SLOW_REVALIDATE, tree) else {
        return;
    };
    assert_eq!(walk(&m.at("d")), 20);
    // A negative entry for a name that then appears directly in the source.
    assert_eq!(errno(&fs::metadata(m.at("d/sub/late"))), Some(libc::ENOENT));
    fs::write(m.src_at("d/sub/late"), b"made in the source").unwrap();
    assert_eq!(
        errno(&fs::metadata(m.at("d/sub/late"))),
        Some(libc::ENOENT),
        "the negative entry should still be cached before the drop (revalidate is 3600 s)"
    );
    let requests = m.stat("drops", "requests");
    let dcache_dropped = m.stat("dcache", "dropped");
    let cached_before = m.stat("pagecache", "bytes_cached");
    assert!(
        cached_before >= 20 * 10_000,
        "reading 200 kB cached only {cached_before} bytes"
    );

    let out = sys::drop_dir(&m.at("d"), DropMode::All).unwrap();
    assert!(
        unhashed(&out) >= 21,
        "dropped {out:?}: expected sub, its 20 files and the negative entry"
    );
    assert!(
        out.pages_dropped >= 20 * 3,
        "dropped {out:?}: 20 files of 3 pages each were cached"
    );
    assert!(out.bytes_freed >= out.pages_dropped * 4096 / 2, "{out:?}");
    assert_eq!(out.skipped, 0, "root owns everything: {out:?}");

    assert_eq!(m.stat("drops", "requests"), requests + 1);
    assert!(m.stat("drops", "dentries_dropped") >= out.dentries_dropped);
    assert!(m.stat("dcache", "dropped") >= dcache_dropped + out.dentries_dropped);
    assert!(m.stat("pagecache", "bytes_cached") < cached_before);

    assert_eq!(fs::read(m.at("d/sub/late")).unwrap(), b"made in the source");
    // The other directory was not touched: still served, still correct.
    assert_eq!(fs::read(m.at("other/g3")).unwrap(), b"other");
}

#[test]
fn page_drop_makes_a_same_size_source_rewrite_visible_to_an_open_file() {
    let Some(m) = Mount::with(SLOW_REVALIDATE, tree) else {
        return;
    };
    let f = File::open(m.at("d/sub/f1")).unwrap();
    let mut buf = vec![0; 10_000];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, content(1, 10_000));
    // Rewrite the source in place, same size, while the file stays open.
    let new = content(99, 10_000);
    OpenOptions::new()
        .write(true)
        .open(m.src_at("d/sub/f1"))
        .unwrap()
        .write_all_at(&new, 0)
        .unwrap();
    let hits = m.stat("pagecache", "hits");
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(
        buf,
        content(1, 10_000),
        "a read of cached pages should come from the page cache before the drop"
    );
    assert!(m.stat("pagecache", "hits") > hits);

    let out = sys::drop_dir(&m.at("d"), DropMode::Pages).unwrap();
    assert!(out.pages_dropped >= 3, "{out:?}");
    assert_eq!(out.dentries_dropped, 0, "mode 1 drops no dentries: {out:?}");
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(
        buf, new,
        "after the page drop the open file must read the source's new content"
    );
}

#[test]
fn dentry_drop_leaves_the_pages_of_open_files() {
    let Some(m) = Mount::with(SLOW_REVALIDATE, tree) else {
        return;
    };
    walk(&m.at("d"));
    // Mode 2 may free the pages of inodes nothing refers to any more (as
    // evicting an inode does in Linux), but not those of open files.
    let open: Vec<File> = (0..20)
        .map(|i| File::open(m.at(&format!("d/sub/f{i}"))).unwrap())
        .collect();
    let out = sys::drop_dir(&m.at("d"), DropMode::Dentries).unwrap();
    assert_eq!(out.pages_dropped, 0, "mode 2 dropped pages of open files: {out:?}");
    assert_eq!(out.bytes_freed, 0, "{out:?}");
    assert!(unhashed(&out) >= 1, "{out:?}");
    // Everything still reads correctly, through the open files and by name.
    let mut buf = vec![0; 10_000];
    for (i, f) in open.iter().enumerate() {
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, content(i, 10_000));
        assert_eq!(fs::read(m.at(&format!("d/sub/f{i}"))).unwrap(), content(i, 10_000));
    }
}

#[test]
fn xattr_drop_counts_and_makes_a_new_source_name_visible() {
    let Some(m) = Mount::with(SLOW_REVALIDATE, tree) else {
        return;
    };
    walk(&m.at("d"));
    assert_eq!(errno(&fs::metadata(m.at("d/sub/late"))), Some(libc::ENOENT));
    fs::write(m.src_at("d/sub/late"), b"late").unwrap();
    assert_eq!(errno(&fs::metadata(m.at("d/sub/late"))), Some(libc::ENOENT));
    let requests = m.stat("drops", "requests");
    let dropped = m.stat("drops", "dentries_dropped");
    sys::setxattr(&m.at("d"), XATTR_DROP, b"3", 0).unwrap();
    assert_eq!(m.stat("drops", "requests"), requests + 1);
    assert!(m.stat("drops", "dentries_dropped") > dropped);
    assert_eq!(fs::read(m.at("d/sub/late")).unwrap(), b"late");

    // Every accepted spelling works, including echo's trailing newline.
    for value in [&b"1"[..], b"2", b"pages", b"dentries", b"all", b"3\n"] {
        let before = m.stat("drops", "requests");
        sys::setxattr(&m.at("d/sub"), XATTR_DROP, value, 0).unwrap_or_else(|e| panic!("value {value:?}: {e}"));
        assert_eq!(m.stat("drops", "requests"), before + 1, "value {value:?}");
    }
    // The control names are not stored in the source.
    assert_eq!(errno(&sys::getxattr(&m.src_at("d"), XATTR_DROP)), Some(libc::ENODATA));
    assert!(
        sys::listxattr(&m.at("d"))
            .unwrap()
            .iter()
            .all(|n| !n.starts_with("user.rcufs."))
    );
}

#[test]
fn stats_xattr_on_any_directory() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let raw = sys::getxattr(&m.at("d/sub"), fuse_fs::protocol::XATTR_STATS).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let sections = [
        (
            "dcache",
            &[
                "entries",
                "negative",
                "hits",
                "misses",
                "negative_hits",
                "inserts",
                "evictions",
                "dropped",
                "capacity",
            ][..],
        ),
        (
            "pagecache",
            &[
                "pages",
                "bytes_cached",
                "budget_bytes",
                "hits",
                "misses",
                "fills",
                "evictions",
            ],
        ),
        ("inodes", &["known", "open_fds"]),
        (
            "drops",
            &[
                "requests",
                "dentries_dropped",
                "pages_dropped",
                "bytes_freed",
                "skipped",
                "busy",
            ],
        ),
    ];
    for (section, keys) in sections {
        for key in keys {
            assert!(v[section][key].is_u64(), "stats lack {section}.{key}: {v}");
        }
    }
    assert_eq!(v["kernel_cache"], serde_json::Value::Bool(false));
    assert_eq!(
        v["dcache"]["capacity"].as_u64(),
        Some(1_000_000),
        "the default --dcache-entries"
    );
    assert_eq!(
        v["pagecache"]["budget_bytes"].as_u64(),
        Some(512 << 20),
        "the default --page-cache-size"
    );
}

#[test]
fn mount_options_reach_the_caches() {
    let Some(m) = Mount::start(&["--dcache-entries", "5000", "--page-cache-size", "8M", "--threads", "3"]) else {
        return;
    };
    assert_eq!(m.stat("dcache", "capacity"), 5000);
    assert_eq!(m.stat("pagecache", "budget_bytes"), 8 << 20);
}

#[test]
fn reads_concurrent_with_drops_return_correct_data() {
    const FILES: usize = 16;
    const ROUNDS: usize = if cfg!(debug_assertions) { 15 } else { 60 };
    let Some(m) = Mount::with(SLOW_REVALIDATE, |src| {
        for i in 0..FILES {
            write_tree(src, &[(&format!("hot/d{}/f{i}", i % 4), &content(i, 5000 + i * 3000))]);
        }
    }) else {
        return;
    };
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..3)
            .map(|t| {
                let m = &m;
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        for i in 0..FILES {
                            let k = (i + t * 5 + round) % FILES;
                            let got = fs::read(m.at(&format!("hot/d{}/f{k}", k % 4))).unwrap();
                            assert_eq!(got, content(k, 5000 + k * 3000), "file {k}, reader {t}, round {round}");
                        }
                    }
                })
            })
            .collect();
        let dropper = s.spawn(|| {
            let mut drops = 0;
            for round in 0..ROUNDS * 2 {
                let mode = [DropMode::All, DropMode::Pages, DropMode::Dentries][round % 3];
                let dir = if round % 2 == 0 {
                    "hot".to_string()
                } else {
                    format!("hot/d{}", round % 4)
                };
                sys::drop_dir(&m.at(&dir), mode).unwrap();
                drops += 1;
            }
            drops
        });
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(dropper.join().unwrap(), ROUNDS * 2);
    });
    assert_eq!(m.stat("drops", "requests"), (ROUNDS * 2) as u64);
}

#[test]
fn bad_modes_and_flags_are_einval_and_change_nothing() {
    let Some(m) = Mount::with(SLOW_REVALIDATE, tree) else {
        return;
    };
    walk(&m.at("d"));
    let dir = File::open(m.at("d")).unwrap();
    let entries = m.stat("dcache", "entries");
    let pages = m.stat("pagecache", "pages");
    for mode in [0, 4, 7, u32::MAX] {
        let args = DropArgs {
            mode,
            ..DropArgs::request(DropMode::All)
        };
        assert_eq!(
            errno(&sys::ioctl_drop(dir.as_raw_fd(), args)),
            Some(libc::EINVAL),
            "mode {mode}"
        );
    }
    let args = DropArgs {
        flags: 1,
        ..DropArgs::request(DropMode::All)
    };
    assert_eq!(
        errno(&sys::ioctl_drop(dir.as_raw_fd(), args)),
        Some(libc::EINVAL),
        "unknown flag"
    );
    for value in [&b"0"[..], b"4", b"", b"everything", b"3 ", b"33", b"all\n\n"] {
        assert_eq!(
            errno(&sys::setxattr(&m.at("d"), XATTR_DROP, value, 0)),
            Some(libc::EINVAL),
            "xattr value {value:?}"
        );
    }
    assert_eq!(
        m.stat("dcache", "entries"),
        entries,
        "a rejected drop changed the dcache"
    );
    assert_eq!(
        m.stat("pagecache", "pages"),
        pages,
        "a rejected drop changed the page cache"
    );
    assert_eq!(m.stat("drops", "dentries_dropped"), 0);
}

#[test]
fn a_regular_file_is_enotdir() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let f = File::open(m.at("d/sub/f0")).unwrap();
    assert_eq!(
        errno(&sys::ioctl_drop(f.as_raw_fd(), DropArgs::request(DropMode::All))),
        Some(libc::ENOTDIR)
    );
    assert_eq!(
        errno(&sys::setxattr(&m.at("d/sub/f0"), XATTR_DROP, b"3", 0)),
        Some(libc::ENOTDIR)
    );
}

#[test]
fn unknown_ioctls_are_enotty() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let dir = File::open(m.at("d")).unwrap();
    let unknown = [
        sys::ioc(3, b'R', 2, 64), // our magic, another number
        sys::ioc(3, b'R', 1, 32), // our number with the wrong size
        sys::ioc(3, b'Q', 1, 64), // another magic
        sys::ioc(2, b'R', 1, 64), // read-only direction
    ];
    for cmd in unknown {
        let mut buf = [0u8; 64];
        assert_eq!(
            errno(&sys::ioctl64(dir.as_raw_fd(), cmd, &mut buf)),
            Some(libc::ENOTTY),
            "cmd {cmd:#x}"
        );
    }
    // The daemon is still serving.
    assert!(fs::metadata(m.at("d/sub/f0")).unwrap().is_file());
    assert_ne!(IOC_DROP, unknown[0]);
}

const NOBODY: u32 = 65534;

#[test]
fn a_non_owner_gets_eperm_and_unowned_entries_are_skipped() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        if std::env::var("RCUFS_REQUIRE_MOUNT").is_ok_and(|v| v == "1") {
            panic!("the permission test needs root to switch users");
        }
        eprintln!("SKIPPED: the permission test needs root to switch users");
        return;
    }
    let Some(m) = Mount::with(&["-o", "allow_other", "--revalidate", "3600"], |src| {
        tree(src);
        fs::create_dir(src.join("mine")).unwrap();
        write_tree(src, &[("mine/own", b"nobody's"), ("mine/roots", b"root's")]);
        std::os::unix::fs::chown(src.join("mine"), Some(NOBODY), Some(NOBODY)).unwrap();
        std::os::unix::fs::chown(src.join("mine/own"), Some(NOBODY), Some(NOBODY)).unwrap();
        for p in ["d", "d/sub", "mine"] {
            fs::set_permissions(src.join(p), fs::Permissions::from_mode(0o755)).unwrap();
        }
    }) else {
        return;
    };
    walk(&m.at("d"));
    walk(&m.at("mine"));
    let entries = m.stat("dcache", "entries");
    // A root-owned directory: nobody may not drop it, by ioctl or by xattr.
    assert_eq!(drop_as_nobody(&m.at("d"), DropMode::All).map(|_| ()), Err(libc::EPERM));
    // By xattr the kernel may refuse first: with default_permissions it checks
    // write access for any user.* attribute and answers EACCES itself.
    let by_xattr = sys::setxattr_as(NOBODY, NOBODY, &m.at("d"), XATTR_DROP, b"3");
    assert!(matches!(by_xattr, Err(libc::EPERM | libc::EACCES)), "{by_xattr:?}");
    assert_eq!(
        m.stat("dcache", "entries"),
        entries,
        "a refused drop changed the dcache"
    );
    // Nobody's own directory: dropped, and root's file under it skipped.
    let out = drop_as_nobody(&m.at("mine"), DropMode::All).expect("the owner may drop");
    assert!(
        out.skipped >= 1,
        "root's file under nobody's directory should be skipped: {out:?}"
    );
    assert!(unhashed(&out) >= 1, "nobody's own file should be dropped: {out:?}");
    assert_eq!(fs::read(m.at("mine/roots")).unwrap(), b"root's");
}

/// A drop the caller may not make is refused before it waits for the
/// source watch to catch up (with `--kernel-cache`, a drop first lets the
/// watcher apply what it has read): a user cannot make the daemon's
/// workers and watcher wait by asking for drops of others' directories.
#[test]
fn a_refused_drop_does_not_wait_for_the_watch() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        if std::env::var("RCUFS_REQUIRE_MOUNT").is_ok_and(|v| v == "1") {
            panic!("the permission test needs root to switch users");
        }
        eprintln!("SKIPPED: the permission test needs root to switch users");
        return;
    }
    let Some(m) = Mount::with(
        &["-o", "allow_other", "--kernel-cache", "--coherence", "watch"],
        |src| {
            tree(src);
            fs::create_dir(src.join("mine")).unwrap();
            std::os::unix::fs::chown(src.join("mine"), Some(NOBODY), Some(NOBODY)).unwrap();
            fs::set_permissions(src.join("d"), fs::Permissions::from_mode(0o755)).unwrap();
        },
    ) else {
        return;
    };
    walk(&m.at("d"));
    let syncs = m.stat("coherence", "syncs");
    for _ in 0..3 {
        assert_eq!(drop_as_nobody(&m.at("d"), DropMode::All).map(|_| ()), Err(libc::EPERM));
    }
    assert_eq!(
        m.stat("coherence", "syncs"),
        syncs,
        "a refused drop waited for the watch"
    );
    // The owner's drop catches up as before.
    drop_as_nobody(&m.at("mine"), DropMode::All).expect("the owner may drop");
    assert!(m.stat("coherence", "syncs") > syncs, "{}", m.stats());
}

fn drop_as_nobody(dir: &Path, mode: DropMode) -> Result<DropArgs, i32> {
    sys::drop_as(NOBODY, NOBODY, dir, DropArgs::request(mode))
}

#[test]
fn dropping_the_mount_root_keeps_the_mount_working() {
    let Some(m) = Mount::with(SLOW_REVALIDATE, tree) else {
        return;
    };
    walk(&m.mnt);
    assert_eq!(errno(&fs::metadata(m.at("late"))), Some(libc::ENOENT));
    fs::write(m.src_at("late"), b"late").unwrap();
    for mode in [DropMode::All, DropMode::Dentries, DropMode::Pages, DropMode::All] {
        let out = sys::drop_dir(&m.mnt, mode).unwrap();
        assert_eq!(out.skipped, 0, "{out:?}");
        // Everything is still reachable and correct after each drop.
        assert_eq!(walk(&m.mnt), 41, "after a {mode:?} drop of the root");
        assert_eq!(fs::read(m.at("d/sub/f7")).unwrap(), content(7, 10_000));
    }
    assert_eq!(fs::read(m.at("late")).unwrap(), b"late");
    fs::write(m.at("made-after"), b"x").unwrap();
    assert_eq!(fs::read(m.src_at("made-after")).unwrap(), b"x");
    sys::setxattr(&m.mnt, XATTR_DROP, b"all", 0).unwrap();
    assert!(fs::metadata(m.at("d/sub")).unwrap().is_dir());
    assert_eq!(m.stat("drops", "requests"), 5);
}

#[test]
fn metadata_churn_concurrent_with_drops_stays_coherent() {
    const ROUNDS: usize = if cfg!(debug_assertions) { 100 } else { 300 };
    for args in [
        &["--revalidate", "3600"][..],
        &["--kernel-cache", "--revalidate", "3600"],
    ] {
        let Some(m) = Mount::with(args, |src| {
            for t in 0..3 {
                fs::create_dir_all(src.join(format!("w{t}"))).unwrap();
            }
        }) else {
            return;
        };
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..3)
                .map(|t| {
                    let m = &m;
                    s.spawn(move || {
                        let dir = format!("w{t}");
                        for r in 0..ROUNDS {
                            let body = content(t * 1000 + r, 100 + r * 37);
                            let (tmp, fin) = (m.at(&format!("{dir}/tmp")), m.at(&format!("{dir}/file{}", r % 3)));
                            fs::write(&tmp, &body).unwrap();
                            fs::rename(&tmp, &fin).unwrap();
                            assert_eq!(fs::read(&fin).unwrap(), body, "{args:?} worker {t} round {r}");
                            assert_eq!(errno(&fs::metadata(&tmp)), Some(libc::ENOENT));
                            if r % 5 == 4 {
                                fs::remove_file(&fin).unwrap();
                                assert_eq!(errno(&fs::metadata(&fin)), Some(libc::ENOENT));
                            }
                            if r % 7 == 0 {
                                let sub = m.at(&format!("{dir}/sub{r}"));
                                fs::create_dir(&sub).unwrap();
                                fs::write(sub.join("x"), b"x").unwrap();
                                fs::remove_file(sub.join("x")).unwrap();
                                fs::remove_dir(&sub).unwrap();
                            }
                        }
                    })
                })
                .collect();
            let dropper = s.spawn(|| {
                for r in 0..ROUNDS {
                    let target = if r % 2 == 0 {
                        m.mnt.clone()
                    } else {
                        m.at(&format!("w{}", r % 3))
                    };
                    sys::drop_dir(&target, [DropMode::All, DropMode::Dentries, DropMode::Pages][r % 3]).unwrap();
                }
            });
            for w in workers {
                w.join().unwrap();
            }
            dropper.join().unwrap();
        });
        // The mount and the source agree at the end.
        for t in 0..3 {
            let names = |p: std::path::PathBuf| -> std::collections::BTreeSet<String> {
                fs::read_dir(p)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            };
            let dir = format!("w{t}");
            assert_eq!(names(m.at(&dir)), names(m.src_at(&dir)), "{args:?}");
            for name in names(m.src_at(&dir)) {
                let rel = format!("{dir}/{name}");
                assert_eq!(
                    fs::read(m.at(&rel)).unwrap(),
                    fs::read(m.src_at(&rel)).unwrap(),
                    "{args:?} {rel}"
                );
            }
        }
    }
}

/// After a pages drop, reads through a descriptor that stayed open fill the
/// page cache again; a later change of the file in the source must still be
/// seen at the next open. (Before, the drop cleared the file's data stamp,
/// the refilled pages had none to be checked against, and the next open
/// served them stale.)
#[test]
fn pages_refilled_after_a_drop_are_checked_at_the_next_open() {
    let Some(m) = Mount::with(SLOW_REVALIDATE, |src| {
        write_tree(src, &[("d/f", &content(1, 10_000))]);
    }) else {
        return;
    };
    let held = File::open(m.at("d/f")).unwrap();
    let mut buf = vec![0u8; 10_000];
    held.read_exact_at(&mut buf, 0).unwrap();
    sys::setxattr(&m.at("d"), XATTR_DROP, b"pages", 0).unwrap();
    // Refills the page cache through the descriptor that stayed open.
    held.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, content(1, 10_000));
    let new = content(2, 7_000);
    let f = OpenOptions::new().write(true).open(m.src_at("d/f")).unwrap();
    f.write_all_at(&new, 0).unwrap();
    f.set_len(new.len() as u64).unwrap();
    drop(f);
    assert_eq!(
        fs::read(m.at("d/f")).unwrap(),
        new,
        "the next open served the refilled pages"
    );
}
