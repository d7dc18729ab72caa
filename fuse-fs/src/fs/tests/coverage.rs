//! What the watch can see and what it cannot: an inode without a file
//! handle, and everything once the watch has failed, is re-checked after
//! `--revalidate` as with `ttl` coherence, and the kernel is given that
//! interval for it; a root drop (a watch overflow's, a failed watch's)
//! reaches every inode the kernel knows, orphans included.

use super::*;

const SHORT: Duration = Duration::from_millis(50);

/// The watch's coherence with `--kernel-cache`, `--revalidate` of
/// [`SHORT`], and file handles or not: `None`, said, when not root.
fn watched_kc(use_handles: bool) -> Option<T> {
    if !sys::is_root() {
        eprintln!("SKIPPED: file handles for the watch need root");
        return None;
    }
    Some(setup(FsConfig {
        coherence: Coherence::Watch,
        use_handles,
        kernel_cache: true,
        revalidate: SHORT,
        ..default_cfg()
    }))
}

fn mode_in_source(t: &T, rel: &str, mode: u32) {
    std::fs::set_permissions(t.src.join(rel), std::os::unix::fs::PermissionsExt::from_mode(mode)).expect("chmod");
}

/// With file handles the watcher finds every inode, so what was read is
/// kept for the watch's interval; without them (a FUSE filesystem under
/// the source, say) it finds none, and each is re-checked after
/// `--revalidate`. The root is found by its handle either way.
#[test]
fn what_the_watch_cannot_find_is_rechecked_after_revalidate() {
    let (Some(seen), Some(unseen)) = (watched_kc(true), watched_kc(false)) else {
        return;
    };
    for (t, indexed) in [(&seen, true), (&unseen, false)] {
        let a = walk(&t.fs, "a.txt").expect("a");
        let d = walk(&t.fs, "d").expect("d");
        let long = t.fs.cfg.watch_revalidate;
        let want = if indexed { long } else { SHORT };
        assert_eq!(t.fs.attr_ttl(a.ino), want, "a.txt, indexed: {indexed}");
        assert_eq!(t.fs.entry_ttl(d.ino), want, "names under d, indexed: {indexed}");
        assert_eq!(t.fs.entry_ttl(ROOT_INO), long, "the root is always indexed");
        assert_eq!(t.fs.attr_ttl(ROOT_INO), long);
        assert_eq!(t.fs.stats_json()["coherence"]["unindexed"], if indexed { 0 } else { 2 });

        // A change no event reports (none is applied here): seen after the
        // short interval only where the watch could not have reported it.
        let old = a.attr.perm & 0o777;
        assert_ne!(old, 0o600);
        // Negative (kernel-cache mode answers node id 0).
        assert_eq!(t.fs.lookup(d.ino, b"new").expect("d/new").ino, 0);
        mode_in_source(t, "a.txt", 0o600);
        std::fs::write(t.src.join("d/new"), b"n").expect("create in the source");
        std::thread::sleep(SHORT * 2);
        let mode = t.fs.getattr(a.ino, None).expect("getattr").perm & 0o777;
        assert_eq!(mode, if indexed { old } else { 0o600 }, "indexed: {indexed}");
        let new = t.fs.lookup(d.ino, b"new").expect("d/new").ino;
        assert_eq!(new != 0, !indexed, "d/new, indexed: {indexed}");
    }
}

/// Once the watch has failed, nothing is kept for its interval: every
/// inode is re-checked after `--revalidate`, and what the kernel was given
/// for the watch's interval is invalidated (a drop of everything).
#[test]
fn a_failed_watch_drops_everything_and_falls_back_to_revalidate() {
    let Some(t) = watched_kc(true) else { return };
    let a = walk(&t.fs, "a.txt").expect("a");
    let f = walk(&t.fs, "d/e/f").expect("f");
    assert_eq!(read_all(&t.fs, f.ino).len(), 10_000);
    assert_eq!(t.fs.attr_ttl(a.ino), t.fs.cfg.watch_revalidate);
    let queued = || t.fs.inval_queue().stats().queued;
    let before = queued();

    t.fs.watch_failed("a test");
    assert_eq!(t.fs.stats_json()["coherence"]["failed"], 1);
    for ino in [ROOT_INO, a.ino, f.ino] {
        assert_eq!(t.fs.attr_ttl(ino), SHORT, "node {ino}");
        assert_eq!(t.fs.entry_ttl(ino), SHORT, "node {ino}");
    }
    assert!(queued() > before, "no kernel invalidation queued");
    assert_eq!(t.fs.stats_json()["pagecache"]["pages"], 0, "{}", t.fs.stats_json());
    mode_in_source(&t, "a.txt", 0o600);
    std::thread::sleep(SHORT * 2);
    assert_eq!(t.fs.getattr(a.ino, None).expect("getattr").perm & 0o777, 0o600);
}

/// A drop (of the root if `root`, else of `d`) reaches an inode the kernel
/// knows under a directory whose node id it has forgotten (an orphan,
/// listed under that old node id until a lookup of the directory adopts
/// it), also when the dcache no longer holds its name: its pages go, and
/// the kernel is told. A drop of a directory must take the orphans too:
/// they have no recorded place, and may be under it.
fn a_drop_reaches_what_the_kernel_knows_under_a_forgotten_directory(root: bool) {
    let t = setup(FsConfig {
        kernel_cache: true,
        revalidate: Duration::from_secs(3600),
        ..default_cfg()
    });
    let d = walk(&t.fs, "d").expect("d").ino;
    let e = t.fs.lookup(d, b"e").expect("e").ino;
    let f = t.fs.lookup(e, b"f").expect("f").ino;
    assert_eq!(read_all(&t.fs, f).len(), 10_000);
    t.fs.forget(e, 1);
    let dir_d = t.fs.table.get(d).expect("d");
    t.fs.names.drop_subtree(&dir_d, |_| true);
    let out =
        t.fs.drop_dir(if root { ROOT_INO } else { d }, DropMode::All, ME)
            .expect("drop");
    assert!(
        out.inval.contains(&Inval::Inode { ino: f, offset: 0 }),
        "f's pages not invalidated: {:?}",
        out.inval
    );
    assert!(out.args.pages_dropped > 0, "{:?}", out.args);
    assert_eq!(t.fs.stats_json()["pagecache"]["pages"], 0);
}

#[test]
fn a_root_drop_reaches_what_the_kernel_knows_under_a_forgotten_directory() {
    a_drop_reaches_what_the_kernel_knows_under_a_forgotten_directory(true);
}

#[test]
fn a_subtree_drop_reaches_what_the_kernel_knows_under_a_forgotten_directory() {
    a_drop_reaches_what_the_kernel_knows_under_a_forgotten_directory(false);
}
