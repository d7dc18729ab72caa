//! `--kernel-cache`: the kernel caches entries, attributes and pages too;
//! the operations stay correct and a drop also invalidates the kernel's
//! copies. The invalidations are sent after the drop's reply, from another
//! thread, so the checks after a drop allow them a moment to arrive.

use std::fs;
use std::time::Duration;

use fuse_fs::protocol::{DropMode, XATTR_DROP};

use crate::harness::{Mount, content, eventually, write_tree};
use crate::sys::{self, errno};

const ARGS: &[&str] = &["--kernel-cache", "--revalidate", "3600"];

fn tree(src: &std::path::Path) {
    for i in 0..10 {
        write_tree(src, &[(&format!("d/f{i}"), &content(i, 9000))]);
    }
}

#[test]
fn basic_operations_are_correct() {
    let Some(m) = Mount::with(ARGS, tree) else { return };
    assert_eq!(m.stats()["kernel_cache"], serde_json::Value::Bool(true));
    for _ in 0..2 {
        for i in 0..10 {
            assert_eq!(fs::read(m.at(&format!("d/f{i}"))).unwrap(), content(i, 9000));
        }
    }
    fs::write(m.at("d/new"), b"new").unwrap();
    assert_eq!(fs::read(m.at("d/new")).unwrap(), b"new");
    assert_eq!(fs::read(m.src_at("d/new")).unwrap(), b"new");
    fs::write(m.at("d/new"), b"newer and longer").unwrap();
    assert_eq!(fs::read(m.at("d/new")).unwrap(), b"newer and longer");
    fs::rename(m.at("d/new"), m.at("d/renamed")).unwrap();
    assert_eq!(errno(&fs::metadata(m.at("d/new"))), Some(libc::ENOENT));
    assert_eq!(fs::read(m.at("d/renamed")).unwrap(), b"newer and longer");
    fs::remove_file(m.at("d/renamed")).unwrap();
    assert_eq!(errno(&fs::metadata(m.at("d/renamed"))), Some(libc::ENOENT));
    let names: Vec<_> = fs::read_dir(m.at("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 10);
}

#[test]
fn drop_invalidates_the_kernel_entries_and_pages() {
    let Some(m) = Mount::with(ARGS, tree) else { return };
    // Negative entry: cached by the kernel and by rcufs.
    assert_eq!(errno(&fs::metadata(m.at("d/late"))), Some(libc::ENOENT));
    fs::write(m.src_at("d/late"), b"late").unwrap();
    assert_eq!(
        errno(&fs::metadata(m.at("d/late"))),
        Some(libc::ENOENT),
        "negative entries should be cached"
    );
    let out = sys::drop_dir(&m.at("d"), DropMode::All).unwrap();
    assert!(out.dentries_dropped >= 1, "{out:?}");
    assert!(
        eventually(Duration::from_secs(5), || fs::metadata(m.at("d/late")).is_ok()),
        "the name made in the source is still hidden 5 s after the drop"
    );
    assert_eq!(fs::read(m.at("d/late")).unwrap(), b"late");

    // Pages: a same-size rewrite in the source, seen after the drop by xattr.
    assert_eq!(fs::read(m.at("d/f2")).unwrap(), content(2, 9000));
    let f = fs::File::open(m.at("d/f2")).unwrap();
    fs::write(m.src_at("d/f2"), content(77, 9000)).unwrap();
    sys::setxattr(&m.at("d"), XATTR_DROP, b"all", 0).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || fs::read(m.at("d/f2")).unwrap()
            == content(77, 9000)),
        "the source's new content is not seen 5 s after the drop"
    );
    drop(f);
}

#[test]
fn a_walk_past_the_descriptor_limit_does_not_run_out_of_descriptors() {
    // RLIMIT_NOFILE's hard limit here is 20,000: a passthrough that keeps one
    // descriptor per inode the kernel knows fails past it.
    const DIRS: usize = 50;
    const PER_DIR: usize = 500;
    let Some(m) = Mount::with(ARGS, |src| {
        for d in 0..DIRS {
            let dir = src.join(format!("d{d:02}"));
            fs::create_dir(&dir).unwrap();
            for f in 0..PER_DIR {
                fs::write(dir.join(format!("f{f:03}")), [d as u8, f as u8]).unwrap();
            }
        }
    }) else {
        return;
    };
    let mut seen = 0;
    for d in 0..DIRS {
        for e in fs::read_dir(m.at(&format!("d{d:02}"))).unwrap() {
            let e = e.unwrap();
            assert!(e.metadata().unwrap().is_file());
            seen += 1;
        }
        // Read a few files of each directory: data still flows.
        for f in [0, PER_DIR / 2, PER_DIR - 1] {
            assert_eq!(fs::read(m.at(&format!("d{d:02}/f{f:03}"))).unwrap(), [d as u8, f as u8]);
        }
    }
    assert_eq!(seen, DIRS * PER_DIR);
    let known = m.stat("inodes", "known");
    let fds = m.stat("inodes", "open_fds");
    assert!(
        known >= (DIRS * PER_DIR) as u64,
        "the kernel holds {} inodes but rcufs knows {known}",
        DIRS * PER_DIR
    );
    assert!(fds < 20_000, "{fds} descriptors open for {known} inodes");
    // The mount still creates and opens files.
    fs::write(m.at("d00/after"), b"after").unwrap();
    assert_eq!(fs::read(m.at("d00/after")).unwrap(), b"after");
}
