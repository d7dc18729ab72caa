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

/// A mount is hidden by one mounted on it at the same point, whatever
/// the order of the list (an older mount moved on top of a newer one
/// comes first), and by one mounted over a directory above it; not by one
/// it is mounted on, directly or further up, nor by one elsewhere.
#[test]
fn hidden_mounts_are_told_by_parents_not_by_order() {
    let m = parse_mountinfo(
        "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 41 0:60 / /src/x rw - nfs srv:/a rw
41 22 0:61 / /src/x rw - tmpfs none rw
42 22 0:62 / /src/y rw - nfs srv:/b rw
43 42 0:63 / /src/y/inner rw - nfs srv:/c rw
44 22 0:64 / /src/z/deep rw - nfs srv:/d rw
45 22 0:65 / /src/z rw - tmpfs none rw
46 22 0:66 / /other rw - nfs srv:/e rw
",
    );
    let hidden = hidden(&m, |_| true);
    assert!(
        hidden.contains(&41),
        "the tmpfs under the NFS moved on top of it: {hidden:?}"
    );
    assert!(
        hidden.contains(&44),
        "an NFS under a tmpfs mounted over a directory above it: {hidden:?}"
    );
    for id in [22, 30, 42, 43, 45, 46] {
        assert!(!hidden.contains(&id), "{id} is reachable: {hidden:?}");
    }
    let picked = super::hidden(&m, |e| e.fstype == "nfs");
    assert_eq!(
        picked.into_iter().collect::<Vec<_>>(),
        [44],
        "only the picked mounts are told"
    );
}
