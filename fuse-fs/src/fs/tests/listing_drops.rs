//! A drop forgets the kept listings of the directories it drops, and only
//! those (all of them for the mount's root); a listing whose read
//! overlapped a drop of its directory is not kept, and one whose read
//! overlapped drops of other directories is.

use super::*;

/// `ttl` coherence with an hour's interval; `d` and `d/e` looked up, and
/// a sibling `s` of `d`.
fn two_trees() -> (T, Arc<Inode>, Arc<Inode>, Arc<Inode>) {
    let t = setup(FsConfig {
        coherence: Coherence::Ttl,
        revalidate: Duration::from_secs(3600),
        ..default_cfg()
    });
    std::fs::create_dir(t.src.join("s")).expect("mkdir s");
    let d = walk(&t.fs, "d").expect("d").ino;
    let e = walk(&t.fs, "d/e").expect("d/e").ino;
    let s = walk(&t.fs, "s").expect("s").ino;
    let get = |ino| t.fs.table.get(ino).expect("known");
    let (d, e, s) = (get(d), get(e), get(s));
    (t, d, e, s)
}

fn list(t: &T, dir: &Inode) {
    let fh = t.fs.opendir(dir.ino, ME).expect("opendir");
    t.fs.releasedir(fh).expect("releasedir");
}

/// Makes the next listing read of `reading` (on this thread) drop
/// `dropping` `times` times on another thread, as drop requests would run,
/// between its read of the source and its store. Returns a check that the
/// drops ran.
fn drop_during_read(t: &Arc<T>, reading: u64, dropping: u64, times: usize) -> impl Fn() {
    let requests = |t: &T| t.fs.drops.requests.load(Ordering::Relaxed);
    let (before, check) = (requests(t), t.clone());
    let ran = move || {
        assert_eq!(
            requests(&check) - before,
            times as u64,
            "the drops did not run during the read"
        )
    };
    let t = t.clone();
    crate::fault::on_next_listing_read(reading, move || {
        let t = t.clone();
        std::thread::spawn(move || {
            for _ in 0..times {
                t.fs.drop_dir(dropping, DropMode::All, ME).expect("drop");
            }
        })
        .join()
        .expect("the drops");
    });
    ran
}

#[test]
fn a_drop_forgets_the_listings_under_its_directory_only() {
    let (t, d, e, s) = two_trees();
    for dir in [&d, &e, &s] {
        list(&t, dir);
        assert!(dir.listing().is_some(), "node {}: no listing kept", dir.ino);
    }
    let reads = || t.fs.listings.stats_json()["reads"].as_u64().expect("reads");
    let before = reads();
    t.fs.drop_dir(d.ino, DropMode::All, ME).expect("drop d");
    assert!(
        d.listing().is_none() && e.listing().is_none(),
        "d's tree kept its listings"
    );
    list(&t, &s);
    assert_eq!(reads(), before, "the sibling's listing was read again after d's drop");
    list(&t, &e);
    assert_eq!(reads(), before + 1, "d/e's listing was served after d's drop");
    // The root's drop forgets every listing.
    t.fs.drop_dir(ROOT_INO, DropMode::Pages, ME).expect("drop /");
    list(&t, &s);
    assert_eq!(reads(), before + 2, "the root's drop left s's listing");
}

/// A listing read before a drop of its directory and kept after the drop
/// forgot the listings would serve what the drop was asked to forget.
#[test]
fn a_listing_whose_read_overlaps_a_drop_is_not_kept() {
    let (t, d, _, s) = two_trees();
    let fs = Arc::new(t);
    let ran = drop_during_read(&fs, d.ino, d.ino, 1);
    list(&fs, &d);
    ran();
    assert!(
        d.listing().is_none(),
        "a listing read before d's drop was kept after it"
    );
    // A read that overlaps no drop is kept, as before.
    list(&fs, &s);
    assert!(s.listing().is_some());
}

/// Drops of other directories during a listing's read leave it kept: one
/// user dropping their own directory in a loop must not stop every other
/// directory's listing from being kept.
#[test]
fn a_listing_whose_read_overlaps_drops_elsewhere_is_kept() {
    let (t, d, e, s) = two_trees();
    let fs = Arc::new(t);
    let ran = drop_during_read(&fs, d.ino, s.ino, 3);
    list(&fs, &d);
    ran();
    assert!(
        d.listing().is_some(),
        "drops of a sibling during d's listing read kept d's listing out"
    );
    // A drop below d forgets what it drops, not d's listing above it.
    list(&fs, &e);
    fs.fs.drop_dir(e.ino, DropMode::All, ME).expect("drop d/e");
    assert!(d.listing().is_some(), "a drop of d/e forgot d's listing");
    assert!(e.listing().is_none(), "a drop of d/e kept its listing");
}

/// A directory the kernel does not know (a list-ahead looked it up and
/// read its listing) under a dropped directory: its entry goes unasked with
/// the one above it, and its listing must go too, kept before the drop or
/// read while it ran.
#[test]
fn a_drop_forgets_the_listings_of_directories_the_kernel_does_not_know() {
    let (t, d, e, _) = two_trees();
    std::fs::create_dir(t.src.join("d/e/x")).expect("mkdir d/e/x");
    std::fs::create_dir(t.src.join("d/e/y")).expect("mkdir d/e/y");
    let unknown = |name: &[u8]| {
        let i = t.fs.lookup_source(&e, name, false).expect("lookup").expect("found");
        assert_eq!(i.nlookup(), 0, "the kernel was lent the entry");
        i
    };
    let (x, y) = (unknown(b"x"), unknown(b"y"));
    let read = |t: &T, dir: &Arc<Inode>| {
        let fd = t.fs.table.open(dir, libc::O_RDONLY | libc::O_DIRECTORY).expect("open");
        assert!(matches!(
            t.fs.read_listing(fd.as_fd(), dir),
            Ok(crate::listing::Read::Whole(_))
        ));
    };
    // Kept before the drop.
    read(&t, &x);
    assert!(x.listing().is_some());
    // Read while the drop runs, stored after it.
    let t = Arc::new(t);
    let ran = drop_during_read(&t, y.ino, d.ino, 1);
    read(&t, &y);
    ran();
    assert!(x.listing().is_none(), "a listing kept before the drop of d survived it");
    assert!(y.listing().is_none(), "a listing read while d was dropped was kept");
}
