use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::mountinfo::MountEntry;

fn m(mount_point: &str, fstype: &str) -> MountEntry {
    MountEntry {
        id: 0,
        parent_id: 1,
        dev: (0, 0),
        root: PathBuf::from("/"),
        mount_point: PathBuf::from(mount_point),
        fstype: fstype.into(),
        source: "x".into(),
    }
}

#[test]
fn network_and_fuse_types_are_slow_local_ones_are_not() {
    for t in ["nfs4", "ceph", "fuse.sshfs", "fuse", "fuse.rcufs", "cifs", "9p"] {
        assert!(is_slow(t), "{t}");
    }
    for t in ["ext4", "xfs", "btrfs", "tmpfs", "overlay", ""] {
        assert!(!is_slow(t), "{t}");
    }
}

#[test]
fn the_holding_mount_is_the_longest_prefix_and_the_last_of_stacked_ones() {
    let mounts = [
        m("/", "ext4"),
        m("/srv", "xfs"),
        m("/srv/remote", "tmpfs"),
        m("/srv/remote", "fuse.sshfs"),
        m("/srv/remote2", "nfs4"),
    ];
    let at = |p: &str| holding(&mounts, Path::new(p)).map(|m| m.fstype.as_str());
    assert_eq!(at("/srv/remote/a/b"), Some("fuse.sshfs"));
    assert_eq!(at("/srv/remote"), Some("fuse.sshfs"));
    // A path component, not a string prefix.
    assert_eq!(at("/srv/remote22/x"), Some("xfs"));
    assert_eq!(at("/srv/remote2/x"), Some("nfs4"));
    assert_eq!(at("/home"), Some("ext4"));
}

#[test]
fn only_a_slow_source_gets_the_longer_interval_and_more_workers() {
    let net = Profile::of_type("fuse.sshfs".into());
    assert_eq!(net.revalidate(), Duration::from_secs(10));
    assert_eq!(net.threads(2), NETWORK_THREADS);
    assert_eq!(net.threads(64), 64);
    assert_eq!(net.kind(), "network");
    let local = Profile::of_type("ext4".into());
    assert_eq!(local.revalidate(), Duration::from_secs(1));
    assert_eq!(local.threads(2), 2);
    assert_eq!(local.kind(), "local");
}

#[test]
fn this_process_root_is_held_by_some_mount() {
    // `/` is always mounted; its type is whatever this machine has.
    let p = Profile::of(Path::new("/"));
    assert!(!p.fstype.is_empty(), "{p:?}");
}

#[test]
fn only_a_fuse_source_gets_its_names_attributes_from_the_lookup() {
    for fuse in ["fuse", "fuse.sshfs", "fuseblk"] {
        assert_eq!(
            Profile::of_type(fuse.into()).name_stat_flags(),
            libc::AT_STATX_DONT_SYNC,
            "{fuse}"
        );
    }
    // NFS would skip its attribute revalidation; local filesystems ignore it.
    for other in ["nfs", "nfs4", "cifs", "ext4", "tmpfs", ""] {
        assert_eq!(Profile::of_type(other.into()).name_stat_flags(), 0, "{other}");
    }
}
