//! The POSIX surface through the mount, each operation checked against the
//! source directory.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::time::{Duration, SystemTime};

use crate::harness::{Mount, content, write_tree};
use crate::sys::{self, errno};

fn tree(src: &std::path::Path) {
    write_tree(
        src,
        &[
            ("a/one", b"first file\n"),
            ("a/b/two", b"second\n"),
            ("top", b"top level"),
        ],
    );
}

#[test]
fn lookup_and_getattr_match_the_source() {
    let Some(m) = Mount::with(&[], tree) else { return };
    for rel in ["a", "a/one", "a/b", "a/b/two", "top"] {
        let (through, direct) = (fs::metadata(m.at(rel)).unwrap(), fs::metadata(m.src_at(rel)).unwrap());
        assert_eq!(through.mode(), direct.mode(), "{rel} mode");
        assert_eq!(through.size(), direct.size(), "{rel} size");
        assert_eq!(through.uid(), direct.uid(), "{rel} uid");
        assert_eq!(through.nlink(), direct.nlink(), "{rel} nlink");
        assert_eq!(through.mtime(), direct.mtime(), "{rel} mtime");
        assert_eq!(through.mtime_nsec(), direct.mtime_nsec(), "{rel} mtime_nsec");
    }
    assert_eq!(errno(&fs::metadata(m.at("a/missing"))), Some(libc::ENOENT));
    assert_eq!(errno(&fs::metadata(m.at("top/below"))), Some(libc::ENOTDIR));
}

#[test]
fn setattr_chmod_chown_truncate_utimens() {
    let Some(m) = Mount::with(&[], tree) else { return };
    fs::set_permissions(m.at("a/one"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(m.src_at("a/one")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(fs::metadata(m.at("a/one")).unwrap().mode() & 0o7777, 0o600);

    std::os::unix::fs::chown(m.at("a/one"), Some(1234), Some(5678)).unwrap();
    let direct = fs::metadata(m.src_at("a/one")).unwrap();
    assert_eq!((direct.uid(), direct.gid()), (1234, 5678));
    let through = fs::metadata(m.at("a/one")).unwrap();
    assert_eq!((through.uid(), through.gid()), (1234, 5678));

    let f = OpenOptions::new().write(true).open(m.at("top")).unwrap();
    f.set_len(3).unwrap();
    assert_eq!(fs::read(m.src_at("top")).unwrap(), b"top");
    assert_eq!(fs::read(m.at("top")).unwrap(), b"top");
    f.set_len(10).unwrap();
    assert_eq!(fs::read(m.at("top")).unwrap(), b"top\0\0\0\0\0\0\0");
    // Truncate by path, without an open file.
    let c = sys::cpath(&m.at("a/b/two"));
    // SAFETY: the path is NUL-terminated.
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 2) }, 0);
    assert_eq!(fs::read(m.at("a/b/two")).unwrap(), b"se");

    let when = SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
    let times = fs::FileTimes::new().set_accessed(when).set_modified(when);
    f.set_times(times).unwrap();
    for p in [m.src_at("top"), m.at("top")] {
        let md = fs::metadata(&p).unwrap();
        assert_eq!(
            (md.mtime(), md.mtime_nsec()),
            (1_000_000_000, 123_456_789),
            "{}",
            p.display()
        );
        assert_eq!(md.atime(), 1_000_000_000, "{}", p.display());
    }
}

#[test]
fn symlink_and_readlink() {
    let Some(m) = Mount::with(&[], tree) else { return };
    std::os::unix::fs::symlink("a/one", m.at("link")).unwrap();
    assert_eq!(fs::read_link(m.src_at("link")).unwrap(), std::path::Path::new("a/one"));
    assert_eq!(fs::read_link(m.at("link")).unwrap(), std::path::Path::new("a/one"));
    assert!(fs::symlink_metadata(m.at("link")).unwrap().file_type().is_symlink());
    assert_eq!(fs::read(m.at("link")).unwrap(), b"first file\n");
    // One made in the source reads back too.
    std::os::unix::fs::symlink("../top", m.src_at("a/uplink")).unwrap();
    assert_eq!(fs::read_link(m.at("a/uplink")).unwrap(), std::path::Path::new("../top"));
    assert_eq!(errno(&fs::read_link(m.at("top"))), Some(libc::EINVAL));
}

#[test]
fn mknod_fifo() {
    let Some(m) = Mount::with(&[], tree) else { return };
    sys::mkfifo(&m.at("a/pipe"), 0o640).unwrap();
    assert!(fs::symlink_metadata(m.src_at("a/pipe")).unwrap().file_type().is_fifo());
    let md = fs::symlink_metadata(m.at("a/pipe")).unwrap();
    assert!(md.file_type().is_fifo());
    assert_eq!(md.mode() & 0o777, 0o640);
    assert_eq!(errno(&sys::mkfifo(&m.at("a/pipe"), 0o640)), Some(libc::EEXIST));
}

#[test]
fn mkdir_rmdir_unlink() {
    let Some(m) = Mount::with(&[], tree) else { return };
    fs::create_dir(m.at("a/new")).unwrap();
    assert!(m.src_at("a/new").is_dir());
    assert_eq!(errno(&fs::create_dir(m.at("a/new"))), Some(libc::EEXIST));
    fs::write(m.at("a/new/f"), b"x").unwrap();
    assert_eq!(errno(&fs::remove_dir(m.at("a/new"))), Some(libc::ENOTEMPTY));
    fs::remove_file(m.at("a/new/f")).unwrap();
    assert!(!m.src_at("a/new/f").exists());
    assert_eq!(errno(&fs::metadata(m.at("a/new/f"))), Some(libc::ENOENT));
    fs::remove_dir(m.at("a/new")).unwrap();
    assert!(!m.src_at("a/new").exists());
    assert_eq!(errno(&fs::metadata(m.at("a/new"))), Some(libc::ENOENT));
    assert_eq!(errno(&fs::remove_file(m.at("a"))), Some(libc::EISDIR));
    assert_eq!(errno(&fs::remove_dir(m.at("top"))), Some(libc::ENOTDIR));
    assert_eq!(errno(&fs::remove_file(m.at("nothing"))), Some(libc::ENOENT));
}

#[test]
fn rename_plain_noreplace_exchange() {
    let Some(m) = Mount::with(&[], tree) else { return };
    // Look both names up first so the caches hold them.
    assert_eq!(fs::read(m.at("a/one")).unwrap(), b"first file\n");
    fs::rename(m.at("a/one"), m.at("a/b/moved")).unwrap();
    assert!(!m.src_at("a/one").exists());
    assert_eq!(fs::read(m.src_at("a/b/moved")).unwrap(), b"first file\n");
    assert_eq!(errno(&fs::metadata(m.at("a/one"))), Some(libc::ENOENT));
    assert_eq!(fs::read(m.at("a/b/moved")).unwrap(), b"first file\n");

    // A file open across a rename keeps working.
    let mut open = File::open(m.at("a/b/moved")).unwrap();
    fs::rename(m.at("a/b/moved"), m.at("renamed")).unwrap();
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "first file\n");

    assert_eq!(
        errno(&sys::renameat2(&m.at("renamed"), &m.at("top"), libc::RENAME_NOREPLACE)),
        Some(libc::EEXIST)
    );
    assert_eq!(fs::read(m.at("top")).unwrap(), b"top level");
    sys::renameat2(&m.at("renamed"), &m.at("fresh"), libc::RENAME_NOREPLACE).unwrap();
    assert_eq!(fs::read(m.src_at("fresh")).unwrap(), b"first file\n");

    sys::renameat2(&m.at("fresh"), &m.at("top"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(m.at("top")).unwrap(), b"first file\n");
    assert_eq!(fs::read(m.at("fresh")).unwrap(), b"top level");
    assert_eq!(fs::read(m.src_at("top")).unwrap(), b"first file\n");
    assert_eq!(fs::read(m.src_at("fresh")).unwrap(), b"top level");

    // Over an existing file, and a directory with contents.
    fs::rename(m.at("fresh"), m.at("top")).unwrap();
    assert_eq!(fs::read(m.at("top")).unwrap(), b"top level");
    fs::rename(m.at("a"), m.at("z")).unwrap();
    assert_eq!(fs::read(m.at("z/b/two")).unwrap(), b"second\n");
    assert_eq!(errno(&fs::metadata(m.at("a/b/two"))), Some(libc::ENOENT));
    assert!(m.src_at("z/b/two").exists());
}

#[test]
fn hard_link() {
    let Some(m) = Mount::with(&[], tree) else { return };
    fs::hard_link(m.at("top"), m.at("a/hard")).unwrap();
    let (x, y) = (
        fs::metadata(m.at("top")).unwrap(),
        fs::metadata(m.at("a/hard")).unwrap(),
    );
    assert_eq!(x.ino(), y.ino());
    assert_eq!(x.nlink(), 2);
    assert_eq!(
        fs::metadata(m.src_at("a/hard")).unwrap().ino(),
        fs::metadata(m.src_at("top")).unwrap().ino()
    );
    fs::write(m.at("a/hard"), b"through the link").unwrap();
    assert_eq!(fs::read(m.at("top")).unwrap(), b"through the link");
    fs::remove_file(m.at("top")).unwrap();
    assert_eq!(fs::metadata(m.at("a/hard")).unwrap().nlink(), 1);
}

#[test]
fn open_read_write_flush_fsync_release() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let data = content(1, 300_000);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(m.at("a/big"))
            .unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        f.sync_data().unwrap();
    }
    assert_eq!(fs::read(m.src_at("a/big")).unwrap(), data);
    assert_eq!(fs::read(m.at("a/big")).unwrap(), data);
    // Twice more: the second read comes from the page cache.
    assert_eq!(fs::read(m.at("a/big")).unwrap(), data);

    // Overwrite in the middle through the mount, across a page boundary.
    let mut f = OpenOptions::new().read(true).write(true).open(m.at("a/big")).unwrap();
    f.seek(SeekFrom::Start(4090)).unwrap();
    f.write_all(b"0123456789").unwrap();
    let mut expect = data.clone();
    expect[4090..4100].copy_from_slice(b"0123456789");
    let mut buf = vec![0; 20];
    f.seek(SeekFrom::Start(4085)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, &expect[4085..4105]);
    drop(f);
    assert_eq!(fs::read(m.src_at("a/big")).unwrap(), expect);
    assert_eq!(fs::read(m.at("a/big")).unwrap(), expect);

    // Append and short reads at the end.
    let mut f = OpenOptions::new().append(true).open(m.at("a/big")).unwrap();
    f.write_all(b"tail").unwrap();
    drop(f);
    expect.extend_from_slice(b"tail");
    assert_eq!(fs::read(m.at("a/big")).unwrap(), expect);
    assert_eq!(fs::read(m.src_at("a/big")).unwrap(), expect);

    // Errors are the source's.
    assert_eq!(errno(&File::open(m.at("a/nothing"))), Some(libc::ENOENT));
    assert_eq!(
        errno(&OpenOptions::new().write(true).create_new(true).open(m.at("top"))),
        Some(libc::EEXIST)
    );
}

#[test]
fn a_write_made_in_the_source_is_seen_at_the_next_open() {
    let Some(m) = Mount::with(&[], tree) else { return };
    assert_eq!(fs::read(m.at("top")).unwrap(), b"top level");
    fs::write(m.src_at("top"), b"changed underneath, longer").unwrap();
    assert_eq!(fs::read(m.at("top")).unwrap(), b"changed underneath, longer");
    // Same size, new content: the changed mtime/ctime still reveal it.
    std::thread::sleep(Duration::from_millis(20));
    fs::write(m.src_at("top"), b"CHANGED UNDERNEATH, LONGER").unwrap();
    assert_eq!(fs::read(m.at("top")).unwrap(), b"CHANGED UNDERNEATH, LONGER");
}

#[test]
fn create_and_access() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(m.at("a/created"))
        .unwrap();
    drop(f);
    let md = fs::metadata(m.src_at("a/created")).unwrap();
    assert!(md.is_file());
    assert_eq!(md.mode() & 0o777, 0o640 & !current_umask());
    sys::access(&m.at("a/created"), libc::R_OK | libc::W_OK).unwrap();
    sys::access(&m.at("a"), libc::X_OK).unwrap();
    assert_eq!(errno(&sys::access(&m.at("a/none"), libc::F_OK)), Some(libc::ENOENT));
    assert_eq!(errno(&sys::access(&m.at("a/created"), libc::X_OK)), Some(libc::EACCES));
}

fn current_umask() -> u32 {
    // SAFETY: umask has no memory preconditions; the old mask is restored at once.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    }
}

#[test]
fn readdir_big_directory_and_fsyncdir() {
    const N: usize = if cfg!(debug_assertions) { 3000 } else { 10000 };
    let Some(m) = Mount::with(&[], |src| {
        fs::create_dir(src.join("big")).unwrap();
        for i in 0..N {
            if i % 10 == 0 {
                fs::create_dir(src.join(format!("big/dir{i:05}"))).unwrap();
            } else {
                fs::write(src.join(format!("big/file{i:05}-with-a-longer-name")), [i as u8]).unwrap();
            }
        }
    }) else {
        return;
    };
    let listing = |p: &std::path::Path| -> BTreeMap<String, (bool, u64)> {
        fs::read_dir(p)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let md = e.metadata().unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    (e.file_type().unwrap().is_dir(), md.ino()),
                )
            })
            .collect()
    };
    let through = listing(&m.at("big"));
    let direct = listing(&m.src_at("big"));
    assert_eq!(through.len(), N);
    assert_eq!(
        through.iter().map(|(k, v)| (k, v.0)).collect::<Vec<_>>(),
        direct.iter().map(|(k, v)| (k, v.0)).collect::<Vec<_>>()
    );
    // A second listing (readdirplus filled the caches) is the same.
    assert_eq!(listing(&m.at("big")), through);
    // Entries appear and disappear.
    fs::write(m.at("big/zz-late"), b"").unwrap();
    fs::remove_file(m.at("big/file00001-with-a-longer-name")).unwrap();
    let again = listing(&m.at("big"));
    assert!(again.contains_key("zz-late") && !again.contains_key("file00001-with-a-longer-name"));
    assert_eq!(again.len(), N);
    File::open(m.at("big")).unwrap().sync_all().unwrap();
}

#[test]
fn statfs_matches_the_source() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let (t, d) = (sys::statvfs(&m.mnt).unwrap(), sys::statvfs(&m.src).unwrap());
    assert_eq!(t.f_bsize, d.f_bsize);
    assert_eq!(t.f_blocks, d.f_blocks);
    assert_eq!(t.f_files, d.f_files);
    assert!(t.f_namemax > 0);
}

#[test]
fn the_four_xattr_calls_on_user_names() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let p = m.at("a/one");
    if let Err(e) = sys::setxattr(&m.src_at("a/one"), "user.probe", b"1", 0) {
        panic!("the source filesystem itself has no user xattrs ({e}); the test needs them");
    }
    sys::removexattr(&m.src_at("a/one"), "user.probe").unwrap();

    sys::setxattr(&p, "user.color", b"blue", 0).unwrap();
    assert_eq!(sys::getxattr(&m.src_at("a/one"), "user.color").unwrap(), b"blue");
    assert_eq!(sys::getxattr(&p, "user.color").unwrap(), b"blue");
    assert_eq!(
        errno(&sys::setxattr(&p, "user.color", b"red", libc::XATTR_CREATE)),
        Some(libc::EEXIST)
    );
    assert_eq!(
        errno(&sys::setxattr(&p, "user.other", b"x", libc::XATTR_REPLACE)),
        Some(libc::ENODATA)
    );
    sys::setxattr(&p, "user.other", b"", 0).unwrap();
    // Only user.* names: the source may carry security.* ones of its own.
    let user_names = |p: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = sys::listxattr(p)
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with("user."))
            .collect();
        names.sort();
        names
    };
    let names = user_names(&p);
    assert_eq!(names, ["user.color", "user.other"]);
    sys::removexattr(&p, "user.color").unwrap();
    assert_eq!(errno(&sys::getxattr(&p, "user.color")), Some(libc::ENODATA));
    assert_eq!(
        errno(&sys::getxattr(&m.src_at("a/one"), "user.color")),
        Some(libc::ENODATA)
    );
    assert_eq!(errno(&sys::removexattr(&p, "user.color")), Some(libc::ENODATA));
    // On a directory too, and the control names are never listed.
    sys::setxattr(&m.at("a"), "user.tag", b"dir", 0).unwrap();
    assert_eq!(user_names(&m.at("a")), ["user.tag"]);
    assert!(
        sys::listxattr(&m.mnt)
            .unwrap()
            .iter()
            .all(|n| !n.starts_with("user.rcufs."))
    );
    // A value set in the source is seen through the mount.
    sys::setxattr(&m.src_at("top"), "user.direct", b"from source", 0).unwrap();
    assert_eq!(sys::getxattr(&m.at("top"), "user.direct").unwrap(), b"from source");
}

#[test]
fn fallocate_and_seek_data_hole() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.at("sparse"))
        .unwrap();
    sys::fallocate(&f, 0, 0, 1 << 20).unwrap();
    assert_eq!(fs::metadata(m.src_at("sparse")).unwrap().len(), 1 << 20);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    // Keep-size allocation does not change the size.
    sys::fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20).unwrap();
    assert_eq!(fs::metadata(m.at("sparse")).unwrap().len(), 1 << 20);
    drop(f);

    // A file with data at 0 and at 1 MiB and a hole between.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(m.at("holey"))
        .unwrap();
    f.write_all(&[1u8; 4096]).unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(&[2u8; 4096]).unwrap();
    f.sync_all().unwrap();
    let direct = File::open(m.src_at("holey")).unwrap();
    for (off, whence) in [
        (0, libc::SEEK_DATA),
        (0, libc::SEEK_HOLE),
        (8192, libc::SEEK_DATA),
        (8192, libc::SEEK_HOLE),
    ] {
        assert_eq!(
            sys::lseek(&f, off, whence).unwrap(),
            sys::lseek(&direct, off, whence).unwrap(),
            "lseek({off}, {whence})"
        );
    }
    assert_eq!(
        errno(&sys::lseek(&f, (1 << 20) + 4096, libc::SEEK_DATA)),
        Some(libc::ENXIO)
    );
    // The hole reads as zeros through the mount.
    let all = fs::read(m.at("holey")).unwrap();
    assert_eq!(all.len(), (1 << 20) + 4096);
    assert!(all[4096..1 << 20].iter().all(|b| *b == 0));
    assert!(all[1 << 20..].iter().all(|b| *b == 2));
}

#[test]
fn copy_file_range_between_files_on_the_mount() {
    let Some(m) = Mount::with(&[], tree) else { return };
    let data = content(7, 100_000);
    fs::write(m.at("from"), &data).unwrap();
    let from = File::open(m.at("from")).unwrap();
    // Read once so the source pages are cached.
    assert_eq!(fs::read(m.at("from")).unwrap(), data);
    let to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.at("to"))
        .unwrap();
    let mut copied = 0;
    while copied < 50_000 {
        let n = sys::copy_file_range(&from, 1000 + copied as i64, &to, copied as i64, 50_000 - copied).unwrap();
        assert!(n > 0, "copy_file_range made no progress");
        copied += n;
    }
    drop(to);
    assert_eq!(fs::read(m.src_at("to")).unwrap(), &data[1000..51_000]);
    assert_eq!(fs::read(m.at("to")).unwrap(), &data[1000..51_000]);
}

#[test]
fn mmap_reads_a_file() {
    let Some(m) = Mount::with(&[], |src| write_tree(src, &[("mapped", &content(3, 20_000))])) else {
        return;
    };
    let f = File::open(m.at("mapped")).unwrap();
    assert_eq!(sys::mmap_read(&f, 20_000).unwrap(), content(3, 20_000));
}

#[test]
fn negative_lookups_are_served_from_the_cache() {
    let Some(m) = Mount::with(&[], tree) else { return };
    assert_eq!(errno(&fs::metadata(m.at("a/ghost"))), Some(libc::ENOENT));
    let before = m.stat("dcache", "negative_hits");
    for _ in 0..5 {
        assert_eq!(errno(&fs::metadata(m.at("a/ghost"))), Some(libc::ENOENT));
    }
    let after = m.stat("dcache", "negative_hits");
    assert!(
        after >= before + 5,
        "negative_hits went from {before} to {after} over 5 repeated misses"
    );
    // Creating the name through the mount replaces the negative entry at once.
    fs::write(m.at("a/ghost"), b"boo").unwrap();
    assert_eq!(fs::read(m.at("a/ghost")).unwrap(), b"boo");
}

#[test]
fn positive_lookups_hit_the_dcache() {
    let Some(m) = Mount::with(&[], tree) else { return };
    fs::metadata(m.at("a/b/two")).unwrap();
    let before = m.stat("dcache", "hits");
    for _ in 0..5 {
        fs::metadata(m.at("a/b/two")).unwrap();
    }
    let after = m.stat("dcache", "hits");
    // Each stat walks a, b and two: at least one hit per repetition.
    assert!(
        after >= before + 5,
        "dcache hits went from {before} to {after} over 5 repeated stats"
    );
    let hits_before = m.stat("pagecache", "hits");
    assert_eq!(fs::read(m.at("a/one")).unwrap(), b"first file\n");
    assert_eq!(fs::read(m.at("a/one")).unwrap(), b"first file\n");
    assert!(
        m.stat("pagecache", "hits") > hits_before,
        "a second read of a small file did not hit the page cache"
    );
}

#[test]
fn readdirplus_fills_the_dcache() {
    let Some(m) = Mount::with(&["--revalidate", "3600"], |src| {
        for i in 0..100 {
            write_tree(src, &[(&format!("dir/f{i:03}"), b"x")]);
        }
    }) else {
        return;
    };
    // `ls -l`: readdir and a stat of each entry (the kernel uses readdirplus).
    let names: Vec<_> = fs::read_dir(m.at("dir"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            e.metadata().unwrap();
            e.file_name()
        })
        .collect();
    assert_eq!(names.len(), 100);
    let (hits, misses) = (m.stat("dcache", "hits"), m.stat("dcache", "misses"));
    assert!(
        m.stat("dcache", "entries") >= 100,
        "the listing did not fill the dcache: {}",
        m.stats()
    );
    for i in 0..100 {
        fs::metadata(m.at(&format!("dir/f{i:03}"))).unwrap();
    }
    assert_eq!(
        m.stat("dcache", "misses"),
        misses,
        "lookups after the listing missed the dcache"
    );
    assert!(m.stat("dcache", "hits") >= hits + 100);
}

#[test]
fn concurrent_cold_reads_fill_each_page_once() {
    const LEN: usize = 64 * 4096;
    let Some(m) = Mount::with(&[], |src| write_tree(src, &[("shared", &content(5, LEN))])) else {
        return;
    };
    assert_eq!(m.stat("pagecache", "fills"), 0);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..4)
            .map(|_| s.spawn(|| assert_eq!(fs::read(m.at("shared")).unwrap(), content(5, LEN))))
            .collect();
        for r in readers {
            r.join().unwrap();
        }
    });
    let (fills, pages) = (m.stat("pagecache", "fills"), m.stat("pagecache", "pages"));
    assert_eq!(m.stat("pagecache", "evictions"), 0);
    assert!(
        pages >= (LEN / 4096) as u64,
        "{pages} pages cached of a {LEN}-byte file"
    );
    assert!(
        fills <= pages,
        "{fills} fills for {pages} cached pages: some page was read from the source twice"
    );
}

#[test]
fn atomic_replace_by_rename_then_reopen() {
    // What editors, git (`config.lock` -> `config`) and linkers do: write a
    // new file under a temporary name, then rename it over the real one.
    let Some(m) = Mount::with(&[], tree) else { return };
    for i in 0..4u8 {
        let lock = m.at("a/config.lock");
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&lock)
            .unwrap();
        f.write_all(&[b'0' + i; 10]).unwrap();
        drop(f);
        fs::set_permissions(&lock, fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("chmod of the new lock file, round {i}: {e}"));
        fs::rename(&lock, m.at("a/config")).unwrap();
        assert_eq!(
            fs::read(m.at("a/config")).unwrap_or_else(|e| panic!("reading the replaced file, round {i}: {e}")),
            [b'0' + i; 10]
        );
        fs::set_permissions(m.at("a/config"), fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("chmod of the replaced file, round {i}: {e}"));
        assert_eq!(fs::read(m.src_at("a/config")).unwrap(), [b'0' + i; 10]);
        assert_eq!(errno(&fs::metadata(m.at("a/config.lock"))), Some(libc::ENOENT));
    }
    // Unlink and create the same name again.
    for i in 0..4u8 {
        fs::write(m.at("a/out"), [i; 3]).unwrap();
        fs::remove_file(m.at("a/out")).unwrap();
        fs::write(m.at("a/out"), [i + 10; 5]).unwrap();
        assert_eq!(fs::read(m.at("a/out")).unwrap(), [i + 10; 5], "round {i}");
        fs::remove_file(m.at("a/out")).unwrap();
    }
}

#[test]
fn extreme_timestamps_in_the_source_are_served() {
    let Some(m) = Mount::with(&[], tree) else { return };
    // Before 1970, and the far end of what ext4 stores; set directly in the source.
    for (secs, nsec) in [(-2_000_000_000i64, 5), (-1, 999_999_999), (16_000_000_000, 0), (0, 0)] {
        let times = [libc::timespec {
            tv_sec: secs,
            tv_nsec: nsec,
        }; 2];
        let c = sys::cpath(&m.src_at("top"));
        // SAFETY: the path is NUL-terminated and `times` is a live array of two timespecs.
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(rc, 0, "utimensat: {}", std::io::Error::last_os_error());
        let direct = fs::metadata(m.src_at("top")).unwrap();
        // Through the mount, after the revalidation interval (1 s) at most.
        let seen = crate::harness::eventually(Duration::from_secs(5), || {
            let md = fs::metadata(m.at("top")).unwrap();
            (md.mtime(), md.mtime_nsec()) == (direct.mtime(), direct.mtime_nsec())
        });
        assert!(seen, "mtime {secs}.{nsec} (source shows {}) not served", direct.mtime());
        assert_eq!(fs::read(m.at("top")).unwrap(), b"top level");
    }
}

/// Lazily unmounts the submount it was given when dropped.
struct Submount(std::cell::RefCell<Option<std::path::PathBuf>>);

impl Drop for Submount {
    fn drop(&mut self) {
        if let Some(p) = self.0.borrow_mut().take() {
            let c = sys::cpath(&p);
            // SAFETY: the path is NUL-terminated.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[test]
fn a_mount_point_inside_the_source_is_served_without_collisions() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: mounting a tmpfs inside the source needs root");
        return;
    }
    // Declared first so that it is dropped after the rcufs mount.
    let submount = Submount(std::cell::RefCell::new(None));
    let Some(m) = Mount::with(&[], |src| {
        tree(src);
        let sub = src.join("sub");
        fs::create_dir(&sub).unwrap();
        let (what, c) = (std::ffi::CString::new("tmpfs").unwrap(), sys::cpath(&sub));
        // SAFETY: all strings are NUL-terminated; no data argument.
        let rc = unsafe { libc::mount(what.as_ptr(), c.as_ptr(), what.as_ptr(), 0, std::ptr::null()) };
        assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        *submount.0.borrow_mut() = Some(sub.clone());
        for i in 0..20 {
            fs::write(sub.join(format!("s{i}")), format!("in the submount {i}")).unwrap();
        }
    }) else {
        return;
    };
    let mut inos = std::collections::HashSet::new();
    for i in 0..20 {
        assert_eq!(
            fs::read_to_string(m.at(&format!("sub/s{i}"))).unwrap(),
            format!("in the submount {i}")
        );
        assert!(inos.insert(fs::metadata(m.at(&format!("sub/s{i}"))).unwrap().ino()));
    }
    for rel in ["a", "a/one", "a/b", "a/b/two", "top", "sub"] {
        assert!(
            inos.insert(fs::metadata(m.at(rel)).unwrap().ino()),
            "{rel} shares an inode number"
        );
    }
    assert_eq!(fs::read(m.at("a/b/two")).unwrap(), b"second\n");
    fs::write(m.at("sub/new"), b"through the mount").unwrap();
    assert_eq!(fs::read(m.src_at("sub/new")).unwrap(), b"through the mount");
    assert_eq!(fs::read_dir(m.at("sub")).unwrap().count(), 21);
    drop(m);
    drop(submount);
}

#[test]
fn names_and_attributes_changed_in_the_source_are_seen_within_revalidate() {
    let Some(m) = Mount::with(&["--coherence", "ttl", "--revalidate", "0.2"], tree) else {
        return;
    };
    assert_eq!(errno(&fs::metadata(m.at("a/born"))), Some(libc::ENOENT));
    let before = fs::metadata(m.at("a/one")).unwrap().mode() & 0o777;
    assert_ne!(before, 0o600);
    fs::write(m.src_at("a/born"), b"new").unwrap();
    fs::set_permissions(m.src_at("a/one"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(m.src_at("top")).unwrap();
    let wait = Duration::from_secs(5);
    assert!(
        crate::harness::eventually(wait, || fs::metadata(m.at("a/born")).is_ok()),
        "a new name"
    );
    assert!(
        crate::harness::eventually(wait, || fs::metadata(m.at("a/one")).unwrap().mode() & 0o777 == 0o600),
        "a new mode"
    );
    assert!(
        crate::harness::eventually(wait, || errno(&fs::metadata(m.at("top"))) == Some(libc::ENOENT)),
        "a removed name"
    );
    assert_eq!(fs::read(m.at("a/born")).unwrap(), b"new");
}

/// A close of a file opened for reading only costs no FLUSH round trip
/// (`FOPEN_NOFLUSH`, `fs/flush.rs`); a close of a file opened for writing
/// still reaches the source, on a local source and on a FUSE one (rcufs
/// over rcufs), in both modes.
#[test]
fn only_closes_of_files_opened_for_writing_reach_the_source() {
    for extra in [&[][..], &["--kernel-cache"][..]] {
        let Some(lower) = Mount::with(extra, tree) else { return };
        let flushes = |m: &Mount| m.stats()["source"]["flushes"].as_u64().unwrap();
        let mut read = String::new();
        File::open(lower.at("a/one"))
            .unwrap()
            .read_to_string(&mut read)
            .unwrap();
        assert_eq!(read, "first file\n");
        assert_eq!(flushes(&lower), 0, "{extra:?}: a read-only close sent a FLUSH");
        OpenOptions::new()
            .append(true)
            .open(lower.at("top"))
            .unwrap()
            .write_all(b"!")
            .unwrap();
        assert_eq!(flushes(&lower), 1, "{extra:?}: a write close sent no FLUSH");
        assert_eq!(fs::read(lower.src_at("top")).unwrap(), b"top level!");
        let Some(upper) = Mount::over(&lower.mnt, extra) else {
            return;
        };
        File::open(upper.at("a/b/two"))
            .unwrap()
            .read_to_string(&mut String::new())
            .unwrap();
        assert_eq!(
            flushes(&upper),
            0,
            "{extra:?}: a read-only close over FUSE sent a FLUSH"
        );
        let before = flushes(&lower);
        let mut f = OpenOptions::new().append(true).open(upper.at("top")).unwrap();
        f.write_all(b"?").unwrap();
        drop(f);
        assert_eq!(flushes(&upper), 1, "{extra:?}: a write close over FUSE sent no FLUSH");
        // The upper daemon's FLUSH closes a duplicate of its descriptor on
        // the lower mount, which flushes there in turn (its open may close
        // descriptors of its own there too).
        assert!(
            flushes(&lower) > before,
            "{extra:?}: the FLUSH did not reach the lower mount"
        );
        assert_eq!(fs::read(lower.src_at("top")).unwrap(), b"top level!?");
    }
}
