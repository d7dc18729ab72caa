use std::os::fd::AsFd;
use std::time::Duration;

use super::*;
use crate::inode::InodeTable;

/// A directory of `n` files, its inode (the table's root) and an open descriptor.
struct Dir {
    tmp: tempfile::TempDir,
    _table: InodeTable,
    inode: Arc<Inode>,
}

impl Dir {
    fn new(n: usize) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        for i in 0..n {
            std::fs::write(tmp.path().join(format!("f{i}")), b"x").expect("write");
        }
        let path = std::ffi::CString::new(tmp.path().as_os_str().as_encoded_bytes()).expect("path");
        let root = sys::open_path(&path, libc::O_PATH | libc::O_DIRECTORY).expect("open");
        let (table, inode) = InodeTable::new(root, 16, false).expect("table");
        Self {
            tmp,
            _table: table,
            inode,
        }
    }

    /// Reads the listing as OPENDIR does (attributes refreshed first).
    fn read(&self, listings: &Listings) -> Read {
        let fd = std::fs::File::open(self.tmp.path()).expect("open dir");
        let st = sys::fstat(fd.as_fd()).expect("fstat");
        self.inode.set_attr(st);
        listings.read(fd.as_fd(), &self.inode, &st).expect("read")
    }
}

fn names(l: &Listing) -> Vec<String> {
    let mut v: Vec<String> = l
        .entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    v.sort();
    v
}

const LONG: Duration = Duration::from_secs(3600);

#[test]
fn a_kept_listing_is_served_until_the_interval_ends() {
    let d = Dir::new(3);
    let listings = Listings::new(true, 1000);
    assert!(listings.fresh(&d.inode, LONG).is_none());
    let Read::Whole(l) = d.read(&listings) else {
        panic!("too big")
    };
    assert_eq!(names(&l), [".", "..", "f0", "f1", "f2"]);
    let again = listings.fresh(&d.inode, LONG).expect("kept");
    assert!(Arc::ptr_eq(&l, &again));
    assert!(
        listings.fresh(&d.inode, Duration::ZERO).is_none(),
        "older than the interval"
    );
    assert_eq!(listings.stats_json()["entries"], 5);
    assert_eq!(listings.stats_json()["hits"], 1);
}

#[test]
fn a_drop_a_change_of_stamp_or_a_forget_ends_a_listing() {
    let d = Dir::new(2);
    let listings = Listings::new(true, 1000);
    d.read(&listings);
    listings.forget_all();
    assert!(listings.fresh(&d.inode, LONG).is_none(), "a drop forgets every listing");
    d.read(&listings);
    assert!(listings.fresh(&d.inode, LONG).is_some());
    // The directory changed in the source and its attributes were re-read.
    std::thread::sleep(Duration::from_millis(10));
    std::fs::write(d.tmp.path().join("new"), b"y").expect("write");
    let st = sys::fstat(std::fs::File::open(d.tmp.path()).expect("open").as_fd()).expect("fstat");
    d.inode.set_attr(st);
    assert!(listings.fresh(&d.inode, LONG).is_none(), "the stamp moved");
    let Read::Whole(l) = d.read(&listings) else {
        panic!("too big")
    };
    assert!(names(&l).contains(&"new".to_string()));
    d.inode.set_listing(None);
    assert!(
        listings.fresh(&d.inode, LONG).is_none(),
        "forgotten by a change through the mount"
    );
    drop(l);
    assert_eq!(
        listings.stats_json()["entries"],
        0,
        "freed listings give their budget back"
    );
}

#[test]
fn past_the_budget_a_listing_serves_its_handle_only() {
    // 12 entries each (with `.` and `..`); room for one of each kind.
    let (a, b) = (Dir::new(10), Dir::new(10));
    let listings = Listings::new(true, 15);
    let Read::Whole(kept) = a.read(&listings) else {
        panic!("too big")
    };
    assert!(listings.fresh(&a.inode, LONG).is_some());
    let Read::Whole(l) = b.read(&listings) else {
        panic!("the handles' budget is not spent")
    };
    assert_eq!(l.entries.len(), 12);
    assert!(listings.fresh(&b.inode, LONG).is_none(), "kept past the budget");
    assert_eq!(listings.stats_json()["entries"], 12);
    assert_eq!(listings.stats_json()["handle_entries"], 12);
    // Both spent: the handle reads the source as a stream, holding nothing.
    assert!(matches!(b.read(&listings), Read::TooBig));
    assert_eq!(listings.stats_json()["over_budget"], 1);
    // Given back when the handle lets its listing go.
    drop(l);
    assert_eq!(listings.stats_json()["handle_entries"], 0);
    assert!(matches!(b.read(&listings), Read::Whole(_)));
    drop(kept);
    // Not kept when disabled either (the watch mode).
    let off = Listings::new(false, 1000);
    assert!(matches!(a.read(&off), Read::Whole(_)));
    assert!(off.fresh(&a.inode, LONG).is_none());
}

#[test]
fn batches_resume_at_their_own_offsets() {
    let d = Dir::new(7);
    let listings = Listings::new(true, 1000);
    let Read::Whole(l) = d.read(&listings) else {
        panic!("too big")
    };
    let mut seen = Vec::new();
    let mut offset = 0u64;
    loop {
        let b = batch(&l, offset, 3);
        let Some(last) = b.last() else { break };
        offset = last.next_off as u64;
        seen.extend(b.into_iter().map(|e| e.name));
    }
    assert_eq!(seen.len(), 9);
    assert_eq!(seen, l.entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>());
    assert!(batch(&l, u64::MAX, 3).is_empty());
}
