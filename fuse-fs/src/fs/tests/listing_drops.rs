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
    let dropper = fs.clone();
    let d_ino = d.ino;
    crate::fault::on_next_listing_read(d.ino, move || {
        // On another thread, as a drop request would run.
        let t = dropper.clone();
        std::thread::spawn(move || t.fs.drop_dir(d_ino, DropMode::All, ME).expect("drop d"))
            .join()
            .expect("the drop");
    });
    list(&fs, &d);
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
    let dropper = fs.clone();
    let s_ino = s.ino;
    crate::fault::on_next_listing_read(d.ino, move || {
        let t = dropper.clone();
        std::thread::spawn(move || {
            for _ in 0..3 {
                t.fs.drop_dir(s_ino, DropMode::All, ME).expect("drop s");
            }
        })
        .join()
        .expect("the drops");
    });
    list(&fs, &d);
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
