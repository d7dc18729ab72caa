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
