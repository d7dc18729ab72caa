//! A filesystem under the source that stops answering holds its own lane
//! of workers, not the whole mount (`fs/lanes.rs`).

use std::fs;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use crate::harness::{Mount, Submount, eventually, fuse_connection, write_tree};

/// Requests the kernel has sent on the connection behind `mnt` and not yet
/// had answered.
fn waiting(mnt: &Path) -> u64 {
    let p = fuse_connection(mnt).join("waiting");
    fs::read_to_string(&p).unwrap().trim().parse().unwrap()
}

/// Stops (or continues) the daemon of `m`.
fn signal(m: &Mount, sig: i32) {
    // SAFETY: kill has no memory preconditions; the pid is the mount's live
    // daemon.
    assert_eq!(unsafe { libc::kill(m.pid(), sig) }, 0);
}

#[test]
fn a_stopped_filesystem_under_the_source_holds_its_lane_not_the_mount() {
    // The filesystem that stops: another rcufs mount, bound under the
    // source (a FUSE filesystem, so one that can stop answering).
    let Some(inner) = Mount::with(&[], |src| write_tree(src, &[("d/keep", b"keep")])) else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    fs::create_dir(top.path().join("fuse")).unwrap();
    write_tree(top.path(), &[("other/f", b"other")]);
    let bind = Submount::bind(&inner.mnt, &top.path().join("fuse"));
    // Two workers: without lanes, two requests waiting in the stopped
    // filesystem take both.
    let Some(outer) = Mount::over(top.path(), &["--threads", "2"]) else {
        return;
    };
    assert_eq!(outer.stat("source", "lane_filesystems"), 0);
    // A first lookup crosses into it (and gives it its lane).
    assert_eq!(fs::read(outer.at("fuse/d/keep")).unwrap(), b"keep");
    assert_eq!(outer.stat("source", "lane_filesystems"), 1);
    assert_eq!(outer.stat("source", "lane_mount_points"), 1);
    assert_eq!(fs::read(outer.at("other/f")).unwrap(), b"other");
    let before = waiting(&outer.mnt);
    signal(&inner, libc::SIGSTOP);
    // Two lookups of names not cached, in the stopped filesystem: each
    // waits.
    let stats: Vec<_> = (0..2)
        .map(|i| {
            let p = outer.at(&format!("fuse/d/new{i}"));
            std::thread::spawn(move || fs::symlink_metadata(p).map_err(|e| e.raw_os_error()))
        })
        .collect();
    // Both reached the daemon: the kernel waits for two more answers.
    let sent = eventually(Duration::from_secs(10), || waiting(&outer.mnt) >= before + 2);
    if !sent {
        signal(&inner, libc::SIGCONT);
        panic!(
            "the two lookups never reached the daemon ({} waiting)",
            waiting(&outer.mnt)
        );
    }
    // A read elsewhere in the mount is still served.
    let (tx, rx) = mpsc::channel();
    let p = outer.at("other/f");
    let other = std::thread::spawn(move || tx.send(fs::read(p).ok()).unwrap());
    let answered = rx.recv_timeout(Duration::from_secs(5));
    // A listing of the directory holding the mount point, once what was
    // cached of the mount point is stale (`--revalidate` 1 s): it lists
    // the name without asking the stopped filesystem for attributes.
    std::thread::sleep(Duration::from_millis(1100));
    let (tx, rx) = mpsc::channel();
    let root = outer.mnt.clone();
    let lister = std::thread::spawn(move || tx.send(crate::harness::listed(fs::read_dir(root).unwrap())).unwrap());
    let listed = rx.recv_timeout(Duration::from_secs(5));
    signal(&inner, libc::SIGCONT);
    other.join().unwrap();
    lister.join().unwrap();
    assert_eq!(
        listed,
        Ok(vec!["fuse".to_string(), "other".to_string()]),
        "a listing of the mount point's directory waited for the stopped filesystem"
    );
    for s in stats {
        assert_eq!(
            s.join().unwrap().map(|_| ()),
            Err(Some(libc::ENOENT)),
            "a lookup in the continued filesystem"
        );
    }
    assert_eq!(
        answered,
        Ok(Some(b"other".to_vec())),
        "a read elsewhere in the mount waited for the stopped filesystem"
    );
    // The lane's queued request ran once the filesystem answered again, and
    // the lane serves as before.
    assert_eq!(fs::read(outer.at("fuse/d/keep")).unwrap(), b"keep");
    drop(outer);
    drop(bind);
    drop(inner);
}
