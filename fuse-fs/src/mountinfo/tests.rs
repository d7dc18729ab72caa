use std::path::Path;

use super::*;

const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 0:52 / /tmp/my\\040mount rw,nosuid,nodev,relatime shared:80 - fuse.rcufs /srv/data\\040dir rw,user_id=0,group_id=0
37 22 0:52 /sub /bind rw,relatime shared:80 - fuse.rcufs /srv/data rw,user_id=0,group_id=0
garbage line without separator
38 22 0:53 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw
39 22 0:54 / /m rw - fuse rcufs rw,user_id=0
40 22 0:55 / /n rw - fuse sshfs rw,user_id=0
";

#[test]
fn mountinfo_lines_parse_and_unescape() {
    let m = parse_mountinfo(MOUNTINFO);
    assert_eq!(m.len(), 6, "{m:?}");
    assert_eq!(m[0].dev, (8, 1));
    let ids: Vec<u64> = m.iter().map(|e| e.id).collect();
    assert_eq!(ids, [22, 36, 37, 38, 39, 40]);
    assert_eq!(m[0].fstype, "ext4");
    assert_eq!(m[1].mount_point, PathBuf::from("/tmp/my mount"));
    assert_eq!(m[1].source, "/srv/data dir");
    assert_eq!(m[1].fstype, FSTYPE);
    assert_eq!(m[1].dev, (0, 52));
    assert_eq!(m[2].root, PathBuf::from("/sub"));
    assert_eq!(m[3].mount_point, PathBuf::from("/proc/sys/fs/binfmt_misc"));
    let rcufs: Vec<bool> = m.iter().map(is_rcufs).collect();
    assert_eq!(rcufs, [false, true, true, false, true, false]);
}

#[test]
fn unescape_handles_edge_cases() {
    assert_eq!(unescape_bytes("a\\134b"), b"a\\b");
    assert_eq!(unescape_bytes("tab\\011nl\\012"), b"tab\tnl\n");
    // Not a full escape: kept as is.
    assert_eq!(unescape_bytes("end\\04"), b"end\\04");
    assert_eq!(unescape_bytes("\\9zz"), b"\\9zz");
    // Out of byte range: kept as is.
    assert_eq!(unescape_bytes("\\777"), b"\\777");
}

#[test]
fn this_process_has_a_root_mount() {
    let all = mounts().unwrap();
    assert!(all.iter().any(|m| m.mount_point == Path::new("/")), "{all:?}");
}

/// A mount is covered by one mounted on it at the same point, whatever
/// the order of the list (an older mount moved on top of a newer one
/// comes first), and not by one mounted on it elsewhere.
#[test]
fn covered_mounts_are_told_by_parent_not_by_order() {
    let m = parse_mountinfo(
        "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 41 0:60 / /src/x rw - nfs srv:/a rw
41 22 0:61 / /src/x rw - tmpfs none rw
42 22 0:62 / /src/y rw - nfs srv:/b rw
43 42 0:63 / /src/y/inner rw - tmpfs none rw
",
    );
    let covered = covered(&m);
    assert!(
        covered.contains(&41),
        "the tmpfs under the NFS moved on top of it: {covered:?}"
    );
    assert!(!covered.contains(&30));
    assert!(
        !covered.contains(&42),
        "a mount below another's mount point is not covered by it"
    );
    assert!(!covered.contains(&22), "the root is its own parent in no sense here");
    assert_eq!(covered.len(), 1, "{covered:?}");
}
