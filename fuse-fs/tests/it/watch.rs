//! `--coherence watch`: changes made directly in the source reach the mount
//! as soon as the watcher applies their events, in both modes, with the
//! revalidation interval an hour; the daemon's own changes are not applied
//! twice; a lost-event overflow drops everything; `auto` falls back to
//! timeouts on a source that cannot be watched.

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use crate::harness::{Mount, Submount, content, eventually, listed, wait_warm, write_tree};
use crate::sys::errno;
use fuse_fs::protocol::XATTR_DROP;

const DEFAULT: &[&str] = &["--coherence", "watch"];
const KERNEL: &[&str] = &["--coherence", "watch", "--kernel-cache"];

/// Generous: the watch applies a change within milliseconds; the point is
/// that nothing else (an interval of an hour) would show it within this.
const SOON: Duration = Duration::from_secs(20);

fn tree(src: &std::path::Path) {
    write_tree(
        src,
        &[("d/a", &content(1, 9000)), ("d/sub/x", b"x"), ("d/keep", b"keep")],
    );
}

fn sees_source_changes(args: &[&str]) {
    let Some(m) = Mount::with(args, tree) else { return };
    assert_eq!(m.stats()["coherence"]["mode"], "watch", "{}", m.stats());
    // Cache everything: names (a missing one too), attributes, and the
    // pages of a file kept open.
    assert_eq!(errno(&fs::metadata(m.at("d/new"))), Some(libc::ENOENT));
    assert_eq!(fs::metadata(m.at("d/a")).unwrap().permissions().mode() & 0o777, 0o644);
    assert!(fs::metadata(m.at("d/sub/x")).is_ok());
    assert_eq!(errno(&fs::metadata(m.at("d/y"))), Some(libc::ENOENT));
    let open = fs::File::open(m.at("d/a")).unwrap();
    let mut buf = vec![0; 9000];
    open.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, content(1, 9000));
    // Twice, so the second answers come from the caches.
    assert_eq!(errno(&fs::metadata(m.at("d/new"))), Some(libc::ENOENT));
    open.read_exact_at(&mut buf, 0).unwrap();

    // Change the source directly.
    fs::write(m.src_at("d/new"), b"new").unwrap();
    fs::set_permissions(m.src_at("d/a"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::rename(m.src_at("d/sub/x"), m.src_at("d/y")).unwrap();
    // Same size, new bytes, in place: only the data changes.
    fs::OpenOptions::new()
        .write(true)
        .open(m.src_at("d/a"))
        .unwrap()
        .write_all_at(&content(2, 9000), 0)
        .unwrap();

    let start = Instant::now();
    let seen = eventually(SOON, || {
        fs::read(m.at("d/new")).is_ok_and(|b| b == b"new")
            && fs::metadata(m.at("d/a")).is_ok_and(|md| md.permissions().mode() & 0o777 == 0o600)
            && errno(&fs::metadata(m.at("d/sub/x"))) == Some(libc::ENOENT)
            && fs::read(m.at("d/y")).is_ok_and(|b| b == b"x")
            && open.read_exact_at(&mut buf, 0).is_ok()
            && buf == content(2, 9000)
    });
    assert!(
        seen,
        "source changes not seen through the mount within {SOON:?} ({args:?}); stats: {}",
        m.stats()
    );
    eprintln!("{args:?}: all changes seen after {:?}", start.elapsed());
    let applied = m.stats()["coherence"]["applied"].as_u64().unwrap();
    assert!(applied >= 4, "{}", m.stats());
    // Unchanged things are still answered.
    assert_eq!(fs::read(m.at("d/keep")).unwrap(), b"keep");
}

#[test]
fn source_changes_are_seen_at_once() {
    sees_source_changes(DEFAULT);
}

#[test]
fn source_changes_are_seen_at_once_with_kernel_cache() {
    sees_source_changes(KERNEL);
}

/// Every kind of change issue 11 lists, made directly in the source after
/// the mount cached what it changes: an unlink, a rename over an existing
/// name, a chown, a utimes, a same-size rewrite whose timestamps are then
/// set back (no stamp can tell it from the old file: only the watch can),
/// a mkdir with a file in it under a cached missing name, and an `rm -r`
/// of a cached subtree.
fn sees_every_kind_of_change(args: &[&str]) {
    let setup = |src: &std::path::Path| {
        write_tree(
            src,
            &[
                ("d/gone", b"gone"),
                ("d/keep", b"keep"),
                ("d/old", b"old"),
                ("d/owned", b"owned"),
                ("d/touched", b"touched"),
                ("d/same", b"same"),
                ("d/tree/t1", b"t1"),
                ("d/tree/deep/t2", b"t2"),
            ],
        )
    };
    let Some(m) = Mount::with(args, setup) else { return };
    // Cache it all, twice (the second from the caches): names, a missing
    // one, attributes, the pages of every file, the subtree's listings.
    for _ in 0..2 {
        for f in [
            "gone",
            "keep",
            "old",
            "owned",
            "touched",
            "same",
            "tree/t1",
            "tree/deep/t2",
        ] {
            fs::read(m.at(&format!("d/{f}"))).unwrap();
        }
        assert_eq!(fs::read_dir(m.at("d/tree/deep")).unwrap().count(), 1);
        assert_eq!(errno(&fs::metadata(m.at("d/newdir"))), Some(libc::ENOENT));
    }
    let same_before = fs::metadata(m.src_at("d/same")).unwrap();

    fs::remove_file(m.src_at("d/gone")).unwrap();
    fs::rename(m.src_at("d/old"), m.src_at("d/keep")).unwrap();
    std::os::unix::fs::chown(m.src_at("d/owned"), Some(4242), Some(4343)).unwrap();
    let long_ago = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(m.src_at("d/touched"))
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    // Same size, new bytes, then the old timestamps back.
    let same = fs::File::options().write(true).open(m.src_at("d/same")).unwrap();
    same.write_all_at(b"SAME", 0).unwrap();
    same.set_times(
        fs::FileTimes::new()
            .set_modified(same_before.modified().unwrap())
            .set_accessed(same_before.accessed().unwrap()),
    )
    .unwrap();
    drop(same);
    fs::create_dir(m.src_at("d/newdir")).unwrap();
    fs::write(m.src_at("d/newdir/f"), b"in new").unwrap();
    fs::remove_dir_all(m.src_at("d/tree")).unwrap();

    let mut last = String::new();
    let seen = eventually(SOON, || {
        let checks = [
            ("unlinked", errno(&fs::metadata(m.at("d/gone"))) == Some(libc::ENOENT)),
            ("renamed over", fs::read(m.at("d/keep")).is_ok_and(|b| b == b"old")),
            (
                "renamed away",
                errno(&fs::metadata(m.at("d/old"))) == Some(libc::ENOENT),
            ),
            (
                "chown",
                fs::metadata(m.at("d/owned")).is_ok_and(|md| (md.uid(), md.gid()) == (4242, 4343)),
            ),
            (
                "utimes",
                fs::metadata(m.at("d/touched")).is_ok_and(|md| md.modified().unwrap() == long_ago),
            ),
            (
                "same-size rewrite",
                fs::read(m.at("d/same")).is_ok_and(|b| b == b"SAME"),
            ),
            ("mkdir", fs::read(m.at("d/newdir/f")).is_ok_and(|b| b == b"in new")),
            ("rm -r", errno(&fs::metadata(m.at("d/tree"))) == Some(libc::ENOENT)),
            (
                "rm -r, deep",
                errno(&fs::metadata(m.at("d/tree/deep/t2"))) == Some(libc::ENOENT),
            ),
        ];
        last = checks
            .iter()
            .filter(|c| !c.1)
            .map(|c| c.0)
            .collect::<Vec<_>>()
            .join(", ");
        last.is_empty()
    });
    assert!(seen, "{args:?}: not seen within {SOON:?}: {last}; stats: {}", m.stats());
    // The rewrite kept its size and timestamps: the mount must have its
    // new bytes because the watch said so, not because a stamp changed.
    let after = fs::metadata(m.src_at("d/same")).unwrap();
    assert_eq!(
        (after.len(), after.modified().unwrap()),
        (same_before.len(), same_before.modified().unwrap())
    );
}

#[test]
fn every_kind_of_source_change_is_seen() {
    sees_every_kind_of_change(DEFAULT);
}

#[test]
fn every_kind_of_source_change_is_seen_with_kernel_cache() {
    sees_every_kind_of_change(KERNEL);
}

/// With the watch, listings are kept as with `ttl` (`listing.rs`), and with
/// `--kernel-cache` the kernel caches them too: listing an unchanged
/// directory again reads nothing from the source. A name created, renamed
/// or removed directly in the source is listed at once: the watcher
/// applies every batch 300 ms late here (`watch-apply-delay`), so only the
/// OPENDIR's comparison of the kept listing's stamp with the source's can
/// show it. Once the watcher has caught up, the listing is served from the
/// cache again.
fn listings_follow_the_source(args: &[&str]) {
    let env = [("RCUFS_FAULT", "watch-apply-delay:300")];
    let Some(m) = Mount::with_env(args, &env, tree) else {
        return;
    };
    let list = || listed(fs::read_dir(m.at("d")).unwrap());
    let reads = || m.stats()["listings"]["reads"].as_u64().unwrap();
    let first = list();
    assert_eq!(first, ["a", "keep", "sub"]);
    let (r, hits) = (reads(), m.stats()["listings"]["hits"].as_u64().unwrap());
    assert_eq!(list(), first);
    assert_eq!(
        reads(),
        r,
        "{args:?}: an unchanged listing was read again: {}",
        m.stats()
    );
    assert!(m.stats()["listings"]["hits"].as_u64().unwrap() > hits);

    fs::write(m.src_at("d/new"), b"new").unwrap();
    assert_eq!(list(), ["a", "keep", "new", "sub"], "{args:?}: a create in the source");
    fs::rename(m.src_at("d/new"), m.src_at("d/moved")).unwrap();
    assert_eq!(
        list(),
        ["a", "keep", "moved", "sub"],
        "{args:?}: a rename in the source"
    );
    fs::remove_file(m.src_at("d/moved")).unwrap();
    fs::rename(m.src_at("d/sub/x"), m.src_at("d/x")).unwrap();
    assert_eq!(
        list(),
        ["a", "keep", "sub", "x"],
        "{args:?}: a rename into the directory"
    );
    // Once the watcher has caught up (its late events forget the listing
    // once more), an unchanged listing is served from the cache again.
    let mut last = String::new();
    let settled = eventually(SOON, || {
        let r = reads();
        let now = list();
        last = format!("{now:?}, {} reads", reads() - r);
        now == ["a", "keep", "sub", "x"] && reads() == r
    });
    assert!(
        settled,
        "{args:?}: the listing after the changes is not kept: {last}; {}",
        m.stats()
    );
}

/// `--kernel-cache`: the kernel fills its copy of a listing from the first
/// READDIR of any handle that reads one, and stamps it with the
/// directory's attributes of that moment. A handle opened before a change
/// and read only after it (and after another OPENDIR kept the new
/// listing) must therefore read the new listing, or the kernel would serve
/// the old one, stamped as new, to every later OPENDIR.
#[test]
fn a_handle_opened_before_a_change_does_not_leave_the_kernel_an_old_listing() {
    let Some(m) = Mount::with(KERNEL, tree) else { return };
    let list = || listed(fs::read_dir(m.at("d")).unwrap());
    assert_eq!(list(), ["a", "keep", "sub"]);
    // OPENDIR now; its first READDIR comes later.
    let early = fs::read_dir(m.at("d")).unwrap();
    fs::write(m.src_at("d/late"), b"late").unwrap();
    // The watcher has applied the change (the kernel's attributes of `d`
    // are invalidated), and another OPENDIR has read and kept the new
    // listing, answered without `FOPEN_KEEP_CACHE` (so the kernel has no
    // copy), and not read yet either.
    std::thread::sleep(Duration::from_millis(300));
    let other = fs::read_dir(m.at("d")).unwrap();
    let via_early = listed(early);
    drop(other);
    for _ in 0..2 {
        assert_eq!(
            list(),
            ["a", "keep", "late", "sub"],
            "the kernel kept a listing older than the source's; {}",
            m.stats()
        );
    }
    assert_eq!(
        via_early,
        ["a", "keep", "late", "sub"],
        "the early handle read its old snapshot"
    );
}

#[test]
fn listings_are_kept_and_follow_source_changes() {
    listings_follow_the_source(DEFAULT);
}

#[test]
fn listings_are_kept_and_follow_source_changes_with_kernel_cache() {
    listings_follow_the_source(KERNEL);
}

/// `--kernel-cache`: a file changed in the source and then opened through
/// the mount reads exactly its new bytes, even when the watcher applies the
/// change after the open found it (`watch-apply-delay`) while the reader's
/// GETATTR is still in flight (`getattr-delay`). The kernel discards a
/// GETATTR reply if an `inval_inode` of that inode lands meanwhile, and the
/// read then goes on with the old size: one `pread` of a grown file returns
/// the old size's worth (a second one, past it, would ask again: so one
/// only), a shrunk one can return zeros past its new end. The open
/// therefore waits for the watcher to catch up, and for the file's
/// invalidation to be sent, before it answers (`fs/watched.rs`, "Catching
/// up before answering").
#[test]
fn a_fresh_open_after_a_source_change_reads_the_new_size_however_late_the_watcher() {
    // The watcher 20 ms late on purpose; the open's wait for it raised
    // from 50 ms so that a loaded machine's scheduling does not time it out.
    let env = [("RCUFS_FAULT", "watch-apply-delay:20,getattr-delay:300,sync-wait:5000")];
    let Some(m) = Mount::with_env(KERNEL, &env, |src| write_tree(src, &[("f", &content(1, 5000))])) else {
        return;
    };
    // The kernel caches the attributes and the pages.
    assert_eq!(fs::read(m.at("f")).unwrap(), content(1, 5000));
    for (round, len) in [20_000, 3000, 70_000, 10].into_iter().enumerate() {
        let new = content(10 + round, len);
        fs::write(m.src_at("f"), &new).unwrap();
        let f = fs::File::open(m.at("f")).unwrap();
        // One read, and no `fstat` before it: its GETATTR would be the one
        // the watcher's invalidation overlaps, and the read's own would
        // then succeed.
        let mut got = vec![0; len + 100];
        let n = f.read_at(&mut got, 0).unwrap();
        got.truncate(n);
        assert!(
            got == new,
            "round {round}: read {} bytes after the source changed to {len} (first difference at {:?}); stats: {}",
            got.len(),
            got.iter().zip(&new).position(|(a, b)| a != b),
            m.stats()
        );
    }
    let syncs = m.stat("coherence", "syncs");
    assert!(syncs >= 4, "every open that found a change caught up: {}", m.stats());
    assert_eq!(m.stat("coherence", "sync_timeouts"), 0, "{}", m.stats());
}

/// Default mode: a LOOKUP lends the kernel the attributes rcufs has for a
/// millisecond (`fs/watched.rs`, "Attributes lent to the kernel"). When the
/// source changed and the watcher has not applied it yet (here held back
/// 50 ms), the LOOKUP of an `open` lends the old size; the open itself
/// finds the new one and makes the kernel forget the lent attributes before
/// it answers, so `fstat` of the new descriptor gives the new size.
#[test]
fn fstat_after_an_open_gives_the_size_the_open_found_however_late_the_watcher() {
    let env = [("RCUFS_FAULT", "watch-apply-delay:50")];
    let Some(m) = Mount::with_env(DEFAULT, &env, |src| write_tree(src, &[("f", &content(1, 5000))])) else {
        return;
    };
    assert_eq!(fs::metadata(m.at("f")).unwrap().len(), 5000);
    for (round, len) in [20_000usize, 3000, 70_000, 10, 4096].into_iter().enumerate() {
        fs::write(m.src_at("f"), content(10 + round, len)).unwrap();
        let f = fs::File::open(m.at("f")).unwrap();
        assert_eq!(
            f.metadata().unwrap().len(),
            len as u64,
            "round {round}: fstat after the open; stats: {}",
            m.stats()
        );
    }
}

#[test]
fn the_daemons_own_changes_are_not_applied_again() {
    let Some(m) = Mount::with(DEFAULT, tree) else { return };
    assert!(fs::metadata(m.at("d/a")).is_ok());
    let before = m.stats()["coherence"]["applied"].as_u64().unwrap();
    fs::write(m.at("d/a"), b"through the mount").unwrap();
    fs::set_permissions(m.at("d/a"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::write(m.at("d/g"), b"g").unwrap();
    fs::rename(m.at("d/g"), m.at("d/h")).unwrap();
    fs::remove_file(m.at("d/h")).unwrap();
    fs::create_dir(m.at("d/e")).unwrap();
    assert_eq!(fs::read(m.at("d/a")).unwrap(), b"through the mount");
    // Let the watcher read whatever those made the kernel report.
    std::thread::sleep(Duration::from_millis(300));
    let after = m.stats()["coherence"]["applied"].as_u64().unwrap();
    assert_eq!(
        before,
        after,
        "the daemon's own changes were applied as source changes: {}",
        m.stats()
    );
    // A change from outside is.
    fs::set_permissions(m.src_at("d/a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert!(eventually(SOON, || {
        m.stats()["coherence"]["applied"].as_u64().unwrap() > after
    }));
    assert_eq!(fs::metadata(m.at("d/a")).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_lost_event_overflow_drops_every_cache() {
    // The watcher sleeps 8 s before its first read; a burst of 100,000 new
    // files (a create and a close-after-write each) overflows the kernel's
    // queue of 16,384 events meanwhile, even on a loaded machine. A cached
    // file changed in the same burst must read anew afterwards: its own
    // events were among those lost.
    let Some(m) = Mount::with_env(DEFAULT, &[("RCUFS_FAULT", "watch-stall:8000")], tree) else {
        return;
    };
    assert_eq!(fs::read(m.at("d/a")).unwrap(), content(1, 9000));
    assert!(m.stat("dcache", "entries") > 0);
    let churn = m.src_at("churn");
    fs::create_dir(&churn).unwrap();
    fs::write(m.src_at("d/a"), content(3, 7000)).unwrap();
    for i in 0..100_000 {
        fs::write(churn.join(format!("f{i}")), b"").unwrap();
    }
    assert!(
        eventually(Duration::from_secs(30), || m.stat("coherence", "overflows") > 0),
        "no overflow seen: {}",
        m.stats()
    );
    // Everything cached was dropped (the root's own entry aside).
    assert_eq!(m.stat("pagecache", "pages"), 0, "{}", m.stats());
    assert!(m.stat("drops", "requests") >= 1, "{}", m.stats());
    assert!(m.log_text().contains("lost events"), "{}", m.log_text());
    // And the mount still works, with what the source holds now.
    assert_eq!(fs::read(m.at("d/a")).unwrap(), content(3, 7000));
    assert_eq!(fs::read_dir(m.at("churn")).unwrap().count(), 100_000);
}

#[test]
fn auto_watches_a_local_source_and_falls_back_to_ttl_on_a_fuse_source() {
    let Some(local) = Mount::with(&["--coherence", "auto"], tree) else {
        return;
    };
    let s = local.stats();
    assert_eq!(s["coherence"]["mode"], "watch", "{s}");
    let Some(over) = Mount::over(&local.mnt, &["--coherence", "auto"]) else {
        return;
    };
    let s = over.stats();
    assert_eq!(s["coherence"]["mode"], "ttl", "{s}");
    let why = s["coherence"]["why"].as_str().unwrap();
    assert!(why.contains("fuse"), "{why}");
    assert!(over.log_text().is_empty() || !over.log_text().contains("panicked"));
    assert_eq!(fs::read(over.at("d/keep")).unwrap(), b"keep");
    drop(over);
    let Some(ttl) = Mount::with(&["--coherence", "ttl"], tree) else {
        return;
    };
    assert_eq!(ttl.stats()["coherence"]["mode"], "ttl");
}

/// A FUSE filesystem mounted under the source (a user's sshfs in a home
/// directory, say) does not take the watch from the whole mount with
/// `--coherence auto`: the rest of the source is watched, and the FUSE
/// filesystem is found unwatched when a lookup enters it (what is read
/// there is re-checked after `--revalidate`). Before, the whole mount fell
/// back to `ttl`.
#[test]
fn auto_watches_the_rest_of_a_source_with_a_fuse_filesystem_under_it() {
    let Some(inner) = Mount::with(&[], tree) else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    fs::create_dir(top.path().join("sub")).unwrap();
    fs::write(top.path().join("own"), b"own").unwrap();
    let bind = Submount::bind(&inner.mnt, &top.path().join("sub"));
    let Some(outer) = Mount::over(top.path(), &["--coherence", "auto", "--revalidate", "3600"]) else {
        return;
    };
    let s = outer.stats();
    assert_eq!(s["coherence"]["mode"], "watch", "{s}");
    let why = s["coherence"]["why"].as_str().unwrap();
    assert!(why.contains("not on fuse"), "{why}");
    // A name created directly in the source's own filesystem: seen through
    // the watch, not after the hour's --revalidate.
    assert_eq!(errno(&fs::metadata(outer.at("late"))), Some(libc::ENOENT));
    fs::write(top.path().join("late"), b"late").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || fs::metadata(outer.at("late")).is_ok()),
        "{}",
        outer.stats()
    );
    // The FUSE filesystem is served, and counted unwatched once entered.
    assert_eq!(outer.stat("coherence", "unwatched_filesystems"), 0);
    assert_eq!(fs::read(outer.at("sub/d/keep")).unwrap(), b"keep");
    assert_eq!(outer.stat("coherence", "unwatched_filesystems"), 1, "{}", outer.stats());
    assert!(
        outer
            .log_text()
            .contains("not watching a filesystem mounted under the source")
    );
    drop(outer);
    drop(bind);
    drop(inner);
}

/// A FUSE filesystem under the source that stops answering while the first
/// lookup that enters it marks it for the watch (the mark opens its root)
/// holds that lookup, and nothing else: before, the mark was made under the
/// lock that every lookup entering any filesystem under the source takes,
/// so a lookup into a tmpfs mounted there later waited until the FUSE
/// daemon was continued.
#[test]
fn a_stopped_filesystem_under_the_source_holds_no_lookup_into_another() {
    // The FUSE filesystem: an rcufs mount whose root's attributes the
    // kernel keeps (`--kernel-cache`), so that the lookup's `stat` of the
    // mount point is answered and its mark's open is what waits.
    // The mark is made unlocked only where the mount's unique id is known
    // (`STATX_MNT_ID_UNIQUE`, Linux 6.8).
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    if (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (6, 8) {
        eprintln!(
            "SKIPPED: needs Linux 6.8 (unique mount ids), this is {}",
            release.trim()
        );
        return;
    }
    let Some(inner) = Mount::with(&["--kernel-cache"], tree) else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    fs::create_dir(top.path().join("fuse")).unwrap();
    fs::create_dir(top.path().join("late")).unwrap();
    let bind = Submount::bind(&inner.mnt, &top.path().join("fuse"));
    let Some(outer) = Mount::over(top.path(), &["--coherence", "watch", "--threads", "4"]) else {
        return;
    };
    // Mounted after the start: its first lookup marks it.
    let late = Submount::tmpfs(&top.path().join("late"));
    fs::write(top.path().join("late/f"), b"late").unwrap();
    assert!(fs::metadata(top.path().join("fuse/d")).is_ok());
    let stop = |sig| {
        // SAFETY: kill has no memory preconditions; the pid is the inner
        // mount's live daemon.
        assert_eq!(unsafe { libc::kill(inner.pid(), sig) }, 0);
    };
    stop(libc::SIGSTOP);
    let entering = {
        let p = outer.at("fuse/d");
        std::thread::spawn(move || fs::metadata(p).is_ok())
    };
    // Wait until that lookup waits in the mark's open (a daemon thread in
    // `openat`: its `stat` of the mount point was answered from the
    // kernel's cache), so that the read below meets the mark in flight.
    let in_openat = || {
        fs::read_dir(format!("/proc/{}/task", outer.pid())).unwrap().any(|t| {
            let t = t.unwrap().path().join("syscall");
            fs::read_to_string(t).is_ok_and(|s| s.split(' ').next() == Some(&libc::SYS_openat.to_string()))
        })
    };
    let reached = eventually(Duration::from_secs(10), in_openat);
    if !reached {
        stop(libc::SIGCONT);
        panic!("the lookup into the stopped filesystem never waited in the mark's open");
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let p = outer.at("late/f");
    let other = std::thread::spawn(move || tx.send(fs::read(p).ok()).unwrap());
    let answered = rx.recv_timeout(Duration::from_secs(5));
    stop(libc::SIGCONT);
    other.join().unwrap();
    assert!(
        entering.join().unwrap(),
        "the lookup into the FUSE filesystem failed once continued"
    );
    assert_eq!(
        answered,
        Ok(Some(b"late".to_vec())),
        "a read in another filesystem under the source waited for the stopped one"
    );
    assert!(fs::read(outer.at("fuse/d/keep")).unwrap() == b"keep");
    drop(outer);
    drop(late);
    drop(bind);
    drop(inner);
}

/// Lookups and attribute reads racing with changes in the source: whatever
/// a request read before a change and stored after the watcher applied it
/// must not outlive the change (the change sequence, `fs/watched.rs`).
fn races_settle(args: &[&str]) {
    let Some(m) = Mount::with(args, |src| write_tree(src, &[("d/m", b"m")])) else {
        return;
    };
    const NAMES: usize = 8;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let flips = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|sc| {
        // Two readers keep asking the mount about every name.
        for _ in 0..2 {
            sc.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for i in 0..NAMES {
                        let _ = fs::symlink_metadata(m.at(&format!("d/t{i}")));
                    }
                    let _ = fs::symlink_metadata(m.at("d/m"));
                }
            });
        }
        // The source changes under them.
        let start = Instant::now();
        let mut k = 0usize;
        while start.elapsed() < Duration::from_secs(4) {
            let p = m.src_at(&format!("d/t{}", k % NAMES));
            if p.exists() {
                fs::remove_file(&p).unwrap();
            } else {
                fs::write(&p, b"t").unwrap();
            }
            let mode = if k.is_multiple_of(2) { 0o600 } else { 0o644 };
            fs::set_permissions(m.src_at("d/m"), fs::Permissions::from_mode(mode)).unwrap();
            k += 1;
            flips.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // The last events are applied within milliseconds on a quiet machine
    // (a loaded one may take longer to drain the churn's backlog); then
    // every answer must be the source's, and stay so (nothing times out
    // for an hour, so a stale answer would never settle).
    let mode = |p: &std::path::Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    eventually(SOON, || {
        (0..NAMES).all(|i| {
            let rel = format!("d/t{i}");
            m.src_at(&rel).exists() == fs::symlink_metadata(m.at(&rel)).is_ok()
        }) && mode(&m.src_at("d/m")) == mode(&m.at("d/m"))
    });
    for round in 0..3 {
        for i in 0..NAMES {
            let rel = format!("d/t{i}");
            assert_eq!(
                m.src_at(&rel).exists(),
                fs::symlink_metadata(m.at(&rel)).is_ok(),
                "{rel} through the mount differs from the source (round {round}, {} flips, {args:?}); stats {}",
                flips.load(std::sync::atomic::Ordering::Relaxed),
                m.stats()
            );
        }
        assert_eq!(mode(&m.src_at("d/m")), mode(&m.at("d/m")), "d/m's mode ({args:?})");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn lookups_racing_with_source_changes_settle_on_the_source() {
    races_settle(DEFAULT);
}

#[test]
fn lookups_racing_with_source_changes_settle_on_the_source_with_kernel_cache() {
    races_settle(KERNEL);
}

/// A LOOKUP that read "missing" just before the name was created in the
/// source, and stores its answer after the watcher applied the create,
/// must not leave a negative entry behind (with the watch nothing would
/// ever expire it). The daemon holds the LOOKUP between its read and its
/// store for 500 ms (`RCUFS_FAULT=lookup-delay`), and the create lands
/// inside that window.
fn a_lookup_overtaken_by_a_change_caches_nothing(args: &[&str]) {
    let Some(m) = Mount::with_env(args, &[("RCUFS_FAULT", "lookup-delay:late:500")], tree) else {
        return;
    };
    assert!(fs::metadata(m.at("d")).is_ok());
    std::thread::scope(|sc| {
        let slow = sc.spawn(|| fs::symlink_metadata(m.at("d/late")).is_ok());
        // The LOOKUP has read the source by now and waits to store.
        std::thread::sleep(Duration::from_millis(200));
        fs::write(m.src_at("d/late"), b"late").unwrap();
        // The overlapping LOOKUP may answer either way.
        let _ = slow.join().unwrap();
    });
    // Once the watcher has applied the create (milliseconds, longer on a
    // loaded machine; a stale negative entry would never go, nothing
    // expires it): the name is there, through every later lookup.
    eventually(SOON, || fs::read(m.at("d/late")).is_ok());
    for _ in 0..3 {
        assert_eq!(
            fs::read(m.at("d/late")).ok().as_deref(),
            Some(&b"late"[..]),
            "a stale negative entry survived the create ({args:?}); stats {}",
            m.stats()
        );
        std::thread::sleep(Duration::from_millis(600));
    }
}

#[test]
fn a_lookup_overtaken_by_a_source_change_caches_nothing() {
    a_lookup_overtaken_by_a_change_caches_nothing(DEFAULT);
}

#[test]
fn a_lookup_overtaken_by_a_source_change_caches_nothing_with_kernel_cache() {
    a_lookup_overtaken_by_a_change_caches_nothing(KERNEL);
}

/// A first LOOKUP of a file that read its attributes just before they
/// changed in the source, and answers after the watcher saw the change,
/// must not lend the kernel those attributes for the watch's hour: the
/// kernel had no inode for the watcher to invalidate yet, so nothing
/// else would correct them (`fs/lease.rs`). The daemon holds the LOOKUP
/// between its read and its store for 500 ms, and the `chmod` lands
/// inside that window.
#[test]
fn a_first_lookup_overtaken_by_an_attribute_change_lends_nothing() {
    let env = [("RCUFS_FAULT", "lookup-delay:keep:500")];
    let Some(m) = Mount::with_env(KERNEL, &env, tree) else {
        return;
    };
    assert!(fs::metadata(m.at("d")).is_ok());
    std::thread::scope(|sc| {
        let slow = sc.spawn(|| fs::symlink_metadata(m.at("d/keep")).map(|md| md.permissions().mode() & 0o777));
        // The LOOKUP has read the source by now and waits to store.
        std::thread::sleep(Duration::from_millis(200));
        fs::set_permissions(m.src_at("d/keep"), fs::Permissions::from_mode(0o600)).unwrap();
        // The overlapping LOOKUP may answer either mode.
        let _ = slow.join().unwrap();
    });
    assert!(
        eventually(SOON, || fs::metadata(m.at("d/keep")).is_ok_and(|md| md
            .permissions()
            .mode()
            & 0o777
            == 0o600)),
        "the attributes read before the chmod were kept: {}",
        m.stats()
    );
    assert!(m.stat("coherence", "unlent_replies") >= 1, "{}", m.stats());
}

/// Creates and removes names `c0`..`c7` in the source's root until `stop`.
fn churn_source_root(m: &Mount, stop: &std::sync::atomic::AtomicBool) {
    let mut i = 0u32;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let p = m.src_at(&format!("c{}", i % 8));
        if fs::write(&p, b"c").is_ok() && i % 2 == 1 {
            let _ = fs::remove_file(&p);
        }
        i += 1;
    }
}

/// No drop's answer waited for its kernel invalidations until its bound.
#[track_caller]
fn assert_no_drop_waited_out_its_bound(m: &Mount, drops: u64) {
    let log = m.log_text();
    assert!(
        !log.contains("took longer than"),
        "a drop waited out its bound for its invalidations ({drops} drops):\n{log}"
    );
    assert_eq!(m.stat("kernel_inval", "timeouts"), 0, "{}", m.stats());
}

/// Default mode: a drop by `user.rcufs.drop` on the mount's root holds the
/// root's inode lock in the kernel until it is answered, and its answer
/// waited for every invalidation queued before it. A LOOKUP in the root
/// answered just after a source change queued an entry invalidation
/// (useless: the default mode lends no entries) that waited in the kernel
/// for that lock: each such cycle held the drop, and the mount's root,
/// for the drops' 2 s bound (seen in the soak: 5-10 a 30 s run). Three
/// changes each end it: no entry is queued in the default mode (the unit
/// test `only_kernel_cache_mode_invalidates_lent_entries` pins that one),
/// the holder's entries in its own directory are exempt in the default
/// mode too, and a drop waits for its own invalidations only.
#[test]
fn default_mode_drops_at_the_root_never_wait_for_invalidations_they_block() {
    let Some(m) = Mount::with(DEFAULT, tree) else { return };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(4);
    let (drops, looked) = std::thread::scope(|s| {
        let stop = &stop;
        // Source changes in the root, so that LOOKUPs there overlap them.
        s.spawn(|| churn_source_root(&m, stop));
        let lookups = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = fs::symlink_metadata(m.at(&format!("c{}", n % 8)));
                n += 1;
            }
            n
        });
        let mut drops = 0u64;
        while Instant::now() < deadline {
            crate::sys::setxattr(&m.mnt, XATTR_DROP, b"dentries", 0).expect("setxattr user.rcufs.drop");
            drops += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (drops, lookups.join().unwrap())
    });
    let stats = m.stats();
    assert!(drops > 0 && looked > 0, "{drops} drops, {looked} lookups");
    assert!(
        m.stat("coherence", "overlapped_replies") > 0,
        "no LOOKUP overlapped a source change: the test did not reach the case: {stats}"
    );
    assert_no_drop_waited_out_its_bound(&m, drops);
}

/// `--kernel-cache`: a drop by `user.rcufs.drop` of `d` holds `d`'s inode
/// lock in the kernel until it is answered. An `rmdir` of `d` locks `d`'s
/// parent and then waits for `d`'s lock; an entry invalidation in the
/// parent (a name changed there in the source) waits for the parent's
/// lock. The drop's own entry in `d/sub` queued behind that one in the
/// single entry lane: a cycle that only the drops' 2 s bound broke (every
/// run, before). The rescue lane now sends it, and the drop waits for its
/// own invalidations only.
#[test]
fn kernel_cache_drops_wait_only_for_their_own_invalidations() {
    let Some(m) = Mount::with(KERNEL, tree) else { return };
    let stop = std::sync::atomic::AtomicBool::new(false);
    // Until the rescue lane has sent entries (the cycle formed and was
    // broken) and for at least 4 s; at most 30 s.
    let (start, least, most) = (Instant::now(), Duration::from_secs(4), Duration::from_secs(30));
    let (drops, rmdirs) = std::thread::scope(|s| {
        let stop = &stop;
        // Names changing in `d`'s parent, the mount's root, in the source.
        s.spawn(|| churn_source_root(&m, stop));
        // `d` is not empty: each rmdir fails, after waiting for `d`'s lock.
        let rmdirs = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(errno(&fs::remove_dir(m.at("d"))), Some(libc::ENOTEMPTY));
                n += 1;
            }
            n
        });
        let mut drops = 0u64;
        loop {
            let t = start.elapsed();
            if t > most || (t > least && drops.is_multiple_of(16) && m.stat("kernel_inval", "rescued") > 0) {
                break;
            }
            // Known to the kernel again, so that the drop has an entry of
            // its own outside the directory it holds (`d/sub`'s).
            assert!(fs::metadata(m.at("d/sub/x")).is_ok());
            crate::sys::setxattr(&m.at("d"), XATTR_DROP, b"dentries", 0).expect("setxattr user.rcufs.drop");
            drops += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (drops, rmdirs.join().unwrap())
    });
    let stats = m.stats();
    assert!(drops > 0 && rmdirs > 0, "{drops} drops, {rmdirs} rmdirs");
    assert!(
        m.stat("kernel_inval", "rescued") > 0,
        "the entry lane never waited 10 ms for a lock with other entries queued: the test did not reach \
         the case in {drops} drops: {stats}"
    );
    assert_no_drop_waited_out_its_bound(&m, drops);
}

#[test]
fn a_filesystem_mounted_under_the_source_later_is_watched_too() {
    mounted_later_is_watched(false);
}

/// The same, with a daemon-side warm walk the first to enter the
/// filesystem: the lookups after it are hits that never cross into it
/// again, so the walk must mark it.
#[test]
fn a_filesystem_mounted_under_the_source_later_and_warmed_first_is_watched_too() {
    mounted_later_is_watched(true);
}

/// A mount (with `args`) of a source holding the empty directory `sub`,
/// for a test that mounts a tmpfs there; None, said, when not root.
fn mount_with_sub(args: &[&str]) -> Option<Mount> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: mounting a tmpfs inside the source needs root");
        return None;
    }
    Mount::with(args, |src| fs::create_dir(src.join("sub")).unwrap())
}

/// Whether the mount shows `written` holding `bytes` and `chmodded` with
/// mode 0600.
fn shows_write_and_mode(m: &Mount, written: &str, bytes: &[u8], chmodded: &str) -> bool {
    fs::read(m.at(written)).is_ok_and(|b| b == bytes)
        && fs::metadata(m.at(chmodded)).is_ok_and(|md| md.permissions().mode() & 0o777 == 0o600)
}

/// Creates `sub/b` and makes `sub/a` mode 0600 in the source (changes only
/// an event or an expiry reveals: an open re-checks a file's data by
/// itself), and asserts that the mount shows both within `within`.
fn assert_submount_changes_seen(m: &Mount, within: Duration, what: &str) {
    let sub = m.src_at("sub");
    fs::write(sub.join("b"), b"b").unwrap();
    fs::set_permissions(sub.join("a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert!(
        eventually(within, || shows_write_and_mode(m, "sub/b", b"b", "sub/a")),
        "{what}: changes in the submount not seen: {}\n{}",
        m.stats(),
        m.log_text()
    );
}

fn mounted_later_is_watched(warm_first: bool) {
    let Some(m) = mount_with_sub(DEFAULT) else {
        return;
    };
    // Mounted after rcufs started: the watch's first marks missed it.
    let sub = m.src_at("sub");
    let _guard = Submount::tmpfs(&sub);
    fs::write(sub.join("a"), b"a").unwrap();
    // Once the watch has applied the mount: a walk under way when the
    // entry of its mount point is forgotten does not enter it.
    let mounts = || m.stat("coherence", "mount_changes") + m.stat("coherence", "mount_drops");
    assert!(eventually(SOON, || mounts() >= 1), "{}", m.stats());
    if warm_first {
        crate::sys::setxattr(&m.mnt, fuse_fs::protocol::XATTR_WARM, b"all", 0).expect("setxattr user.rcufs.warm");
        let s = wait_warm(&m, 1);
        assert_eq!(s["warm"]["files"], 1, "the warm walk did not enter the submount: {s}");
    }
    assert_eq!(fs::read(m.at("sub/a")).unwrap(), b"a");
    assert_eq!(errno(&fs::metadata(m.at("sub/b"))), Some(libc::ENOENT));
    assert_submount_changes_seen(&m, SOON, &format!("mounted later, warmed first: {warm_first}"));
    assert_eq!(m.stat("coherence", "unwatched_filesystems"), 0);
    drop(m);
}

/// A filesystem under the source unmounted and another mounted in its
/// place (no change any filesystem mark reports): what was cached from the
/// old one is dropped, the new one is seen at once and watched in turn, in
/// both modes.
#[test]
fn a_filesystem_replaced_under_the_source_is_seen_and_watched() {
    for kernel_cache in [false, true] {
        let mut args = DEFAULT.to_vec();
        if kernel_cache {
            args.push("--kernel-cache");
        }
        let Some(m) = mount_with_sub(&args) else {
            return;
        };
        let sub = m.src_at("sub");
        let first = Submount::tmpfs(&sub);
        fs::write(sub.join("a"), b"first").unwrap();
        assert_eq!(fs::read(m.at("sub/a")).unwrap(), b"first");
        assert_eq!(errno(&fs::metadata(m.at("sub/b"))), Some(libc::ENOENT));
        drop(first);
        let _second = Submount::tmpfs(&sub);
        fs::write(sub.join("a"), b"second one").unwrap();
        fs::set_permissions(sub.join("a"), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            eventually(SOON, || fs::read(m.at("sub/a")).is_ok_and(|b| b == b"second one")),
            "the filesystem mounted in the old one's place not seen (kernel cache: {kernel_cache}): {}\n{}",
            m.stats(),
            m.log_text()
        );
        // And watched: a change in it is seen well before the hour.
        assert_eq!(errno(&fs::metadata(m.at("sub/b"))), Some(libc::ENOENT));
        assert_submount_changes_seen(&m, SOON, &format!("the new filesystem, kernel cache: {kernel_cache}"));
        assert!(m.stat("coherence", "mount_changes") >= 1, "{}", m.stats());
        assert_eq!(m.stat("coherence", "unwatched_filesystems"), 0, "{}", m.stats());
        drop(m);
    }
}

/// As [`mount_with_sub`], with `setup` run on the source first; None,
/// said, when not root.
fn mount_as_root(args: &[&str], setup: impl FnOnce(&std::path::Path)) -> Option<Mount> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: mounting a tmpfs inside the source needs root");
        return None;
    }
    Mount::with(args, setup)
}

/// A mount attached under the source, and detached again, costs the
/// caches only its mount point's entry (`watch/mounts.rs`): nothing is
/// dropped, and the mount shows the new filesystem, then the directory it
/// covered, in both modes. (The mount point is not in the root, so that
/// its parent is found by a handle the watch took itself.)
#[test]
fn a_mount_under_the_source_forgets_only_its_mount_points_entry() {
    for kernel_cache in [false, true] {
        let mut args = DEFAULT.to_vec();
        if kernel_cache {
            args.push("--kernel-cache");
        }
        // Written before the daemon starts, so that no event of theirs
        // comes after the reads below.
        let Some(m) = mount_as_root(&args, |src| {
            fs::create_dir_all(src.join("sub/deep")).unwrap();
            fs::write(src.join("sub/deep/covered"), b"covered").unwrap();
            fs::write(src.join("keep"), vec![7u8; 1 << 20]).unwrap();
        }) else {
            return;
        };
        let sub = m.src_at("sub/deep");
        assert_eq!(fs::read(m.at("keep")).unwrap().len(), 1 << 20);
        assert_eq!(fs::read(m.at("sub/deep/covered")).unwrap(), b"covered");
        let drops = m.stat("drops", "requests");
        let unplaced = m.stat("coherence", "mount_drops");
        let changes = m.stat("coherence", "mount_changes");
        let tmpfs = Submount::tmpfs(&sub);
        fs::write(sub.join("a"), b"on the tmpfs").unwrap();
        assert!(
            eventually(SOON, || fs::read(m.at("sub/deep/a"))
                .is_ok_and(|b| b == b"on the tmpfs")),
            "the tmpfs mounted under the source not seen (kernel cache: {kernel_cache}): {}\n{}",
            m.stats(),
            m.log_text()
        );
        assert_eq!(errno(&fs::metadata(m.at("sub/deep/covered"))), Some(libc::ENOENT));
        drop(tmpfs);
        assert!(
            eventually(SOON, || fs::read(m.at("sub/deep/covered"))
                .is_ok_and(|b| b == b"covered")),
            "the directory the tmpfs covered not seen again (kernel cache: {kernel_cache}): {}\n{}",
            m.stats(),
            m.log_text()
        );
        assert_eq!(errno(&fs::metadata(m.at("sub/deep/a"))), Some(libc::ENOENT));
        // Both placed (counted so even in a batch that another change
        // made drop everything). Waited for: the covered directory can be
        // read again before the watch applies the detach (a lookup that
        // finds the tmpfs's inode gone looks the name up anew), and on a
        // busy machine the watch's thread runs late.
        assert!(
            eventually(SOON, || m.stat("coherence", "mount_changes") >= changes + 2),
            "{}",
            m.stats()
        );
        if m.stat("coherence", "mount_drops") != unplaced {
            // Another test's mount, attached and detached elsewhere before
            // the watch read its attach, cannot be placed and drops
            // everything (and the batch's placed changes with it): this
            // round cannot tell.
            eprintln!("NOTE: a mount elsewhere could not be placed meanwhile: the drop count is not checked");
            continue;
        }
        assert_eq!(
            m.stat("drops", "requests"),
            drops,
            "a mount change under the source dropped caches (kernel cache: {kernel_cache}): {}",
            m.stats()
        );
        if !kernel_cache {
            // What was cached elsewhere is still there: in the default
            // mode every read reaches rcufs, and finds its pages.
            let misses = m.stat("pagecache", "misses");
            assert_eq!(fs::read(m.at("keep")).unwrap().len(), 1 << 20);
            if m.stat("coherence", "mount_drops") != unplaced {
                eprintln!("NOTE: a mount elsewhere could not be placed meanwhile: the misses are not checked");
                continue;
            }
            assert_eq!(m.stat("pagecache", "misses"), misses, "{}", m.stats());
        }
        drop(m);
    }
}

/// A mount that reached the source without a mount event (a directory
/// holding it renamed into the source) is learned when the move is
/// reported (`watch/mounts.rs`): when it goes, the directory it covered is
/// seen again, and with `--kernel-cache` (where a drop's catch-up makes
/// sure the move was read before the unmount) its detach is placed. Two
/// kinds: a tmpfs, and a bind of a directory of the source itself, whose
/// objects are the source's own (nothing cached came from another mount,
/// so a detach that cannot be placed drops nothing: this one was stale for
/// the watch's hour before mounts were learned).
#[test]
fn a_mount_brought_in_by_a_rename_is_learned_and_placed_when_it_goes() {
    for (kernel_cache, bind) in [(true, false), (true, true), (false, true)] {
        let mut args = DEFAULT.to_vec();
        if kernel_cache {
            args.push("--kernel-cache");
        }
        // Mounted outside the source (on its filesystem) before the daemon
        // starts, so that the watch never sees it under the source.
        let mut outside = None;
        let Some(m) = mount_as_root(&args, |src| {
            let o = src.join("../outside");
            fs::create_dir_all(o.join("m")).unwrap();
            fs::write(o.join("m/f"), b"covered").unwrap();
            let on = if bind {
                fs::create_dir(src.join("bound")).unwrap();
                fs::write(src.join("bound/f"), b"mounted").unwrap();
                Submount::bind(&src.join("bound"), &o.join("m"))
            } else {
                let t = Submount::tmpfs(&o.join("m"));
                fs::write(o.join("m/f"), b"mounted").unwrap();
                t
            };
            fs::create_dir_all(src.join("sub/other")).unwrap();
            outside = Some((o, on));
        }) else {
            return;
        };
        let what = format!("kernel cache: {kernel_cache}, a bind: {bind}");
        let (o, on) = outside.expect("set up");
        if bind {
            // The bound directory known first by its own name, through the
            // source's mount: the bind adds no object of its own.
            assert_eq!(fs::read(m.at("bound/f")).unwrap(), b"mounted");
        }
        fs::rename(&o, m.src_at("sub/in")).unwrap();
        // Unmounted where it is now.
        std::mem::forget(on);
        let on = Submount(m.src_at("sub/in/m"));
        assert!(
            eventually(SOON, || fs::read(m.at("sub/in/m/f")).is_ok_and(|b| b == b"mounted")),
            "the mount brought in not seen ({what}): {}",
            m.stats()
        );
        // A drop elsewhere catches up with the watch first.
        crate::sys::setxattr(&m.at("sub/other"), XATTR_DROP, b"all", 0).expect("setxattr user.rcufs.drop");
        let (changes, unplaced) = (m.stat("coherence", "mount_changes"), m.stat("coherence", "mount_drops"));
        drop(on);
        assert!(
            eventually(SOON, || fs::read(m.at("sub/in/m/f")).is_ok_and(|b| b == b"covered")),
            "the directory the mount covered not seen again ({what}): {}\n{}",
            m.stats(),
            m.log_text()
        );
        if !kernel_cache {
            continue;
        }
        assert!(
            eventually(SOON, || m.stat("coherence", "mount_changes") > changes),
            "the detach not placed ({what}): {}",
            m.stats()
        );
        if m.stat("coherence", "mount_drops") != unplaced {
            // As in the test above: another test's mount, or its detach
            // read beside the move, cannot be placed.
            eprintln!("NOTE: a mount elsewhere could not be placed meanwhile ({what})");
        }
        drop(m);
    }
}

/// That the tmpfs on `rel` (under the source; its `f` holds "on the
/// tmpfs", and the `f` it covers "covered") is seen through the mount,
/// then unmounts it, and asserts that the directory it covered is seen
/// again and that the watch dropped everything for it.
fn assert_unmount_drops_everything(m: &Mount, rel: &str) {
    let f = format!("{rel}/f");
    assert!(
        eventually(SOON, || fs::read(m.at(&f)).is_ok_and(|b| b == b"on the tmpfs")),
        "the tmpfs on {rel} not seen: {}",
        m.stats()
    );
    let drops = m.stat("coherence", "mount_drops");
    drop(Submount(m.src_at(rel)));
    assert!(
        eventually(SOON, || fs::read(m.at(&f)).is_ok_and(|b| b == b"covered")),
        "the directory the tmpfs covered not seen again: {}\n{}",
        m.stats(),
        m.log_text()
    );
    // (Counted once the caches are dropped.)
    assert!(
        eventually(SOON, || m.stat("coherence", "mount_drops") > drops),
        "{}",
        m.stats()
    );
}

/// A mount point renamed from a namespace where it is no mount point (the
/// mount moves with it, and no mount event says so): the filesystem
/// watch's name event takes the mount's place away, so that its detach
/// drops everything rather than the entry of a name it no longer has.
#[test]
fn a_mount_point_renamed_from_another_namespace_is_seen_to_go() {
    let Some(m) = mount_as_root(&["--coherence", "watch", "--kernel-cache"], |src| {
        fs::create_dir_all(src.join("sub/m")).unwrap();
        fs::write(src.join("sub/m/f"), b"covered").unwrap();
    }) else {
        return;
    };
    let point = m.src_at("sub/m");
    let tmpfs = Submount::tmpfs(&point);
    fs::write(point.join("f"), b"on the tmpfs").unwrap();
    assert!(
        eventually(SOON, || fs::read(m.at("sub/m/f")).is_ok_and(|b| b == b"on the tmpfs")),
        "{}",
        m.stats()
    );
    // Renamed by a thread with a mount namespace of its own, where the
    // tmpfs is unmounted first.
    let (from, to) = (point.clone(), m.src_at("sub/m2"));
    std::thread::spawn(move || {
        // SAFETY: unshares this thread's mount namespace, which only it uses.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNS) }, 0, "unshare");
        // SAFETY: NUL-terminated path; no source, type or data.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "making / private: {}", std::io::Error::last_os_error());
        let c = crate::sys::cpath(&from);
        // SAFETY: the path is NUL-terminated.
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(rc, 0, "umount there: {}", std::io::Error::last_os_error());
        fs::rename(&from, &to).expect("rename where it is no mount point");
    })
    .join()
    .expect("the renaming thread");
    std::mem::forget(tmpfs);
    assert_unmount_drops_everything(&m, "sub/m2");
}

/// A filesystem under the source that rcufs and the kernel let go of can
/// be unmounted (rcufs keeps no descriptor on it then), and another mounted
/// there gets the device number the first gave back: the new one is marked
/// when a lookup enters it (the first one's mark, gone with it, is
/// forgotten), so its changes are seen.
#[test]
fn a_filesystem_let_go_of_unmounts_and_one_with_its_device_number_is_watched() {
    // With `--kernel-cache`, where a drop makes the kernel forget what it
    // held (the default mode's kernel keeps its unused dentries, and their
    // inodes, until it evicts them).
    let Some(m) = mount_with_sub(&["--coherence", "watch", "--kernel-cache"]) else {
        return;
    };
    let sub = m.src_at("sub");
    let first = Submount::tmpfs(&sub);
    let dev = fs::metadata(&sub).unwrap().dev();
    fs::write(sub.join("a"), b"a").unwrap();
    assert_eq!(fs::read(m.at("sub/a")).unwrap(), b"a");
    // After a drop of everything (and the kernel's forgets that follow it)
    // nothing holds the tmpfs: a plain unmount (not a lazy one) succeeds.
    // (Once the kernel has forgotten it all: the daemon is idle then, and
    // nothing but the drop itself may have let go of the tmpfs.)
    crate::sys::setxattr(&m.mnt, XATTR_DROP, b"all", 0).expect("setxattr user.rcufs.drop");
    assert!(
        eventually(SOON, || m.stat("inodes", "known") == 1),
        "the kernel did not forget the tmpfs's inodes: {}",
        m.stats()
    );
    let c = crate::sys::cpath(&sub);
    assert!(
        // SAFETY: the path is NUL-terminated.
        eventually(Duration::from_secs(5), || unsafe { libc::umount2(c.as_ptr(), 0) == 0 }),
        "the first tmpfs stayed busy: {}",
        std::io::Error::last_os_error()
    );
    std::mem::forget(first);
    let _second = Submount::tmpfs(&sub);
    if fs::metadata(&sub).unwrap().dev() != dev {
        // Another test's mount took the number meanwhile: the rest still
        // checks that the new filesystem is marked.
        eprintln!("NOTE: the second tmpfs did not get the first one's device number");
    }
    fs::write(sub.join("a"), b"second").unwrap();
    fs::set_permissions(sub.join("a"), fs::Permissions::from_mode(0o644)).unwrap();
    assert!(
        eventually(SOON, || fs::read(m.at("sub/a")).is_ok_and(|b| b == b"second")),
        "the second tmpfs not seen: {}\n{}",
        m.stats(),
        m.log_text()
    );
    // What only the watch reports (an open re-checks a file's data by
    // itself): a name created where a lookup found none, and a chmod.
    assert_eq!(errno(&fs::metadata(m.at("sub/b"))), Some(libc::ENOENT));
    assert_eq!(fs::metadata(m.at("sub/a")).unwrap().permissions().mode() & 0o777, 0o644);
    assert_submount_changes_seen(&m, SOON, "the second tmpfs (not marked?)");
    assert_eq!(m.stat("coherence", "unwatched_filesystems"), 0, "{}", m.stats());
    drop(m);
}

/// Well past `--revalidate 1` (below), far below the watch's hour.
const RECHECKED: Duration = Duration::from_secs(15);

/// A filesystem mounted under the source later that cannot be marked (a
/// fault here; a network or FUSE filesystem in life): its objects are
/// re-checked after `--revalidate`, as with `ttl` coherence, in rcufs and
/// in the kernel, not kept for the watch's hour.
#[test]
fn a_filesystem_under_the_source_that_cannot_be_watched_is_rechecked_after_revalidate() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: mounting a tmpfs inside the source needs root");
        return;
    }
    for kernel_cache in [false, true] {
        let mut args = vec!["--coherence", "watch", "--revalidate", "1"];
        if kernel_cache {
            args.push("--kernel-cache");
        }
        let Some(m) = Mount::with_env(&args, &[("RCUFS_FAULT", "mark-fails")], |src| {
            fs::create_dir(src.join("sub")).unwrap()
        }) else {
            return;
        };
        let sub = m.src_at("sub");
        let _guard = Submount::tmpfs(&sub);
        fs::write(sub.join("a"), b"a").unwrap();
        assert_eq!(fs::read(m.at("sub/a")).unwrap(), b"a");
        assert_eq!(errno(&fs::metadata(m.at("sub/b"))), Some(libc::ENOENT));
        assert_eq!(m.stat("coherence", "unwatched_filesystems"), 1, "{}", m.stats());
        assert_submount_changes_seen(&m, RECHECKED, &format!("unwatched, kernel cache: {kernel_cache}"));
        // The watch itself goes on.
        assert_eq!(m.stat("coherence", "failed"), 0);
        drop(m);
    }
}

/// A watch that stops (its thread ended on an error: a fault here) leaves
/// nothing kept for its hour: every cache is dropped, in rcufs and in the
/// kernel, and the mount re-checks the source after `--revalidate`.
#[test]
fn a_watch_that_stops_leaves_the_mount_rechecking_after_revalidate() {
    let args = ["--coherence", "watch", "--kernel-cache", "--revalidate", "1"];
    let Some(m) = Mount::with_env(&args, &[("RCUFS_FAULT", "watch-fails:3000")], tree) else {
        return;
    };
    // Cached (and lent to the kernel) while the watch still runs.
    assert_eq!(fs::read(m.at("d/a")).unwrap(), content(1, 9000));
    assert_eq!(errno(&fs::metadata(m.at("d/new"))), Some(libc::ENOENT));
    assert_eq!(
        m.stat("coherence", "failed"),
        0,
        "the watch failed too early: {}",
        m.stats()
    );
    assert!(
        eventually(SOON, || m.stat("coherence", "failed") == 1),
        "the watch did not stop: {}",
        m.log_text()
    );
    assert!(m.log_text().contains("the source watch stopped"), "{}", m.log_text());
    let timeouts = m.stat("coherence", "sync_timeouts");
    fs::set_permissions(m.src_at("d/a"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(m.src_at("d/new"), b"new").unwrap();
    assert_rechecked(&m, "the watch stopped");
    // Nothing waits for the stopped watcher to catch up (the open of a
    // changed file would, for 50 ms).
    assert_eq!(fs::read(m.at("d/a")).unwrap(), content(1, 9000));
    assert_eq!(m.stat("coherence", "sync_timeouts"), timeouts, "{}", m.stats());
}

/// A panic in the watcher's thread outside the application of a batch (in
/// its read loop: a fault here) ends the watch as an error does: it is
/// marked failed, every cache is dropped, and the mount re-checks the
/// source after `--revalidate`, where a thread that silently died left
/// everything trusted for its hour.
#[test]
fn a_panic_in_the_watchers_read_loop_fails_the_watch() {
    let args = ["--coherence", "watch", "--kernel-cache", "--revalidate", "1"];
    let Some(m) = Mount::with_env(&args, &[("RCUFS_FAULT", "watch-read-panics")], tree) else {
        return;
    };
    assert_eq!(fs::read(m.at("d/a")).unwrap(), content(1, 9000));
    assert_eq!(errno(&fs::metadata(m.at("d/new"))), Some(libc::ENOENT));
    assert_eq!(m.stat("coherence", "failed"), 0, "{}", m.stats());
    // The first event read makes the watcher panic.
    fs::set_permissions(m.src_at("d/a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert!(
        eventually(SOON, || m.stat("coherence", "failed") == 1),
        "the panic did not fail the watch: {}\n{}",
        m.stats(),
        m.log_text()
    );
    assert!(
        m.log_text().contains("a panic in the watcher's thread"),
        "{}",
        m.log_text()
    );
    assert!(m.stats()["panics"].as_u64() >= Some(1), "{}", m.stats());
    fs::write(m.src_at("d/new"), b"new").unwrap();
    assert_rechecked(&m, "the watcher's panic");
}

/// After a failed watch: the source's `d/new` (written) and `d/a` (mode
/// 0600) are seen through the mount within `RECHECKED`.
#[track_caller]
fn assert_rechecked(m: &Mount, after: &str) {
    assert!(
        eventually(RECHECKED, || shows_write_and_mode(m, "d/new", b"new", "d/a")),
        "changes after {after} not seen: {}\n{}",
        m.stats(),
        m.log_text()
    );
}

/// A batch of events that cannot be applied (a panic while applying it: a
/// fault here) may hold changes of cached objects: every cache is dropped,
/// and the watch goes on.
#[test]
fn a_batch_of_events_that_cannot_be_applied_drops_every_cache() {
    // The watcher waits 500 ms before applying a batch that touches
    // something cached, so the two changes made meanwhile are read as one
    // batch, the one that panics.
    let env = [("RCUFS_FAULT", "apply-panics:boom,watch-apply-delay:500")];
    let Some(m) = Mount::with_env(KERNEL, &env, tree) else {
        return;
    };
    assert_eq!(fs::read(m.at("d/a")).unwrap(), content(1, 9000));
    assert_eq!(fs::read(m.at("d/keep")).unwrap(), b"keep");
    fs::write(m.src_at("d/keep"), b"kept").unwrap();
    std::thread::sleep(Duration::from_millis(150));
    fs::write(m.src_at("d/boom"), b"").unwrap();
    fs::set_permissions(m.src_at("d/a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert!(
        eventually(SOON, || m.stat("coherence", "failed_batches") >= 1),
        "no failed batch: {}\n{}",
        m.stats(),
        m.log_text()
    );
    assert!(
        eventually(SOON, || {
            fs::metadata(m.at("d/a")).is_ok_and(|md| md.permissions().mode() & 0o777 == 0o600)
        }),
        "the change in the failed batch was lost: {}\n{}",
        m.stats(),
        m.log_text()
    );
    assert_eq!(
        m.stat("coherence", "failed"),
        0,
        "the watch should go on: {}",
        m.stats()
    );
    // And it does: a later change is applied as an event (read through
    // the mount first, so that it is cached again).
    assert!(fs::read(m.at("d/keep")).is_ok());
    let applied = m.stat("coherence", "applied");
    fs::write(m.src_at("d/keep"), b"again").unwrap();
    assert!(eventually(SOON, || fs::read(m.at("d/keep")).is_ok_and(|b| b == b"again")));
    assert!(
        eventually(SOON, || m.stat("coherence", "applied") > applied),
        "no event applied after the failed batch: {}",
        m.stats()
    );
}
