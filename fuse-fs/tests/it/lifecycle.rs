//! Starting and stopping: a clean unmount on SIGTERM and SIGINT, and a clean
//! exit when unmounted from outside; a read-only mount.

use std::fs;
use std::time::Duration;

use crate::harness::{Mount, rcufs_mount_at, write_tree};
use crate::sys::errno;

fn tree(src: &std::path::Path) {
    write_tree(src, &[("f", b"data")]);
}

#[test]
fn sigterm_and_sigint_unmount_cleanly() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let Some(mut m) = Mount::with(&[], tree) else { return };
        // Leave an open file behind: the unmount must still happen.
        let _open = fs::File::open(m.at("f")).unwrap();
        assert_eq!(fs::read(m.at("f")).unwrap(), b"data");
        let status = m.stop_with(signal);
        assert!(
            status.success(),
            "rcufs exited with {status} on signal {signal}; log:\n{}",
            m.log_text()
        );
        assert!(
            rcufs_mount_at(&m.mnt).is_none(),
            "the mount is still listed after signal {signal}"
        );
        // The source is intact.
        assert_eq!(fs::read(m.src_at("f")).unwrap(), b"data");
    }
}

#[test]
fn an_external_unmount_ends_the_daemon() {
    let Some(mut m) = Mount::with(&[], tree) else { return };
    let c = crate::sys::cpath(&m.mnt);
    // SAFETY: the path is NUL-terminated.
    let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
    assert_eq!(rc, 0, "umount: {}", std::io::Error::last_os_error());
    let status = m
        .wait_exit(Duration::from_secs(20))
        .expect("rcufs did not exit after an external unmount");
    assert!(status.success(), "rcufs exited with {status}; log:\n{}", m.log_text());
}

#[test]
fn read_only_mount() {
    let Some(m) = Mount::with(&["-o", "ro"], tree) else {
        return;
    };
    assert_eq!(fs::read(m.at("f")).unwrap(), b"data");
    assert_eq!(errno(&fs::write(m.at("g"), b"x")), Some(libc::EROFS));
    assert_eq!(errno(&fs::remove_file(m.at("f"))), Some(libc::EROFS));
    assert!(m.src_at("f").exists());
}
