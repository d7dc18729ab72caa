use std::path::PathBuf;

use fuse_fs::mountinfo::FSTYPE;

use super::*;

#[test]
fn a_path_on_another_filesystem_is_refused_with_its_type() {
    let tmp = tempfile::tempdir().unwrap();
    let err = find_rcufs_mount(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("not on an rcufs mount"), "{err}");
    let err = find_rcufs_mount(&tmp.path().join("missing")).unwrap_err().to_string();
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn drop_errors_carry_errno() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(drop_dir(&file, DropMode::All).unwrap_err().errno, libc::ENOTDIR);
    assert_eq!(
        drop_dir(&tmp.path().join("nope"), DropMode::All).unwrap_err().errno,
        libc::ENOENT
    );
    // A directory on an ordinary filesystem does not know rcufs's ioctl.
    let e = drop_dir(tmp.path(), DropMode::All).unwrap_err();
    assert_eq!(e.errno, libc::ENOTTY, "{e}");
    assert!(e.message.contains("not on an rcufs mount"), "{e}");
}

#[test]
fn bytes_and_durations_read_well() {
    assert_eq!(format_bytes(0), "0 B");
    assert_eq!(format_bytes(1023), "1023 B");
    assert_eq!(format_bytes(4096), "4.0 KiB");
    assert_eq!(format_bytes(3 << 29), "1.5 GiB");
    assert_eq!(format_ns(812), "812 ns");
    assert_eq!(format_ns(3_400), "3.4 µs");
    assert_eq!(format_ns(1_250_000), "1.25 ms");
    assert_eq!(format_ns(2_500_000_000), "2.50 s");
}

#[test]
fn stats_table_shows_every_counter() {
    let json = r#"{"dcache": {"entries": 7, "hits": 3, "misses": 1},
        "pagecache": {"bytes_cached": 8192, "hits": 0, "misses": 0},
        "future": {"thing": 5}, "kernel_cache": true}"#;
    let mount = MountEntry {
        id: 0,
        parent_id: 1,
        dev: (0, 52),
        root: PathBuf::from("/"),
        mount_point: PathBuf::from("/tmp/my mount"),
        fstype: FSTYPE.to_string(),
        source: "/srv/data dir".to_string(),
    };
    let table = format_stats(json, &mount).unwrap();
    assert!(table.contains("/tmp/my mount"), "{table}");
    assert!(table.contains("kernel_cache: true"), "{table}");
    assert!(table.contains("8192 (8.0 KiB)"), "{table}");
    assert!(table.contains("75.0%"), "dcache hit ratio: {table}");
    assert!(table.contains("thing"), "unknown sections are shown: {table}");
    // Sections come in reading order: dcache before pagecache before unknown ones.
    let pos = |s: &str| table.find(s).unwrap();
    assert!(
        pos("dcache") < pos("pagecache") && pos("pagecache") < pos("future"),
        "{table}"
    );
    assert!(format_stats("not json", &mount).is_err());
    assert!(format_stats("[1]", &mount).is_err());
}

#[test]
fn a_drop_reads_as_one_line() {
    let args = DropArgs {
        dentries_dropped: 2,
        busy: 5,
        pages_dropped: 3,
        bytes_freed: 12288,
        skipped: 1,
        visited: 9,
        elapsed_ns: 1500,
        ..DropArgs::request(DropMode::All)
    };
    assert_eq!(
        format_drop(Path::new("/m/d"), DropMode::All, &args, 2_000_000),
        "/m/d: dropped (all) 7 dentries (5 of them still in use by the kernel, unhashed) and 3 pages (12.0 KiB); \
         skipped 1 not owned by you; visited 9 inodes; took 1.5 µs in rcufs, 2.00 ms in all"
    );
}
