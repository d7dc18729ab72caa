//! Starting and stopping: a clean unmount on SIGTERM and SIGINT (lazy while a
//! file is open, with the daemon exiting when it closes; a second signal
//! aborts), a clean exit when unmounted from outside; a read-only mount.

use std::fs;
use std::time::Duration;

use std::os::unix::fs::FileExt;

use crate::harness::{Mount, any_mount_at, eventually, write_tree};
use crate::sys::errno;

fn tree(src: &std::path::Path) {
    write_tree(src, &[("f", b"data")]);
}

#[test]
fn sigterm_and_sigint_unmount_cleanly() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let Some(mut m) = Mount::with(&[], tree) else { return };
        assert_eq!(fs::read(m.at("f")).unwrap(), b"data");
        let status = m.stop_with(signal);
        assert!(
            status.success(),
            "rcufs exited with {status} on signal {signal}; log:\n{}",
            m.log_text()
        );
        assert!(
            any_mount_at(&m.mnt).is_none(),
            "the mount is still listed after signal {signal}"
        );
        assert_eq!(fs::read(m.src_at("f")).unwrap(), b"data");
    }
}

#[test]
fn sigterm_with_a_file_open_detaches_and_exits_when_it_closes() {
    let Some(mut m) = Mount::with(&[], tree) else { return };
    let open = fs::File::open(m.at("f")).unwrap();
    // SAFETY: kill has no memory preconditions; the pid is the live daemon.
    unsafe { libc::kill(m.pid(), libc::SIGTERM) };
    assert!(
        eventually(Duration::from_secs(20), || any_mount_at(&m.mnt).is_none()),
        "the busy mount was not detached after SIGTERM; log:\n{}",
        m.log_text()
    );
    // The open file is still served by the detached mount.
    let mut buf = [0u8; 4];
    open.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"data");
    drop(open);
    let status = m.wait_exit(Duration::from_secs(20)).unwrap_or_else(|| {
        panic!(
            "rcufs did not exit after the last open file closed; log:\n{}",
            m.log_text()
        )
    });
    assert!(status.success(), "rcufs exited with {status}; log:\n{}", m.log_text());
}

#[test]
fn a_second_signal_aborts_a_busy_mount() {
    let Some(mut m) = Mount::with(&[], tree) else { return };
    let open = fs::File::open(m.at("f")).unwrap();
    // SAFETY: kill has no memory preconditions; the pid is the live daemon.
    unsafe { libc::kill(m.pid(), libc::SIGTERM) };
    assert!(eventually(Duration::from_secs(20), || any_mount_at(&m.mnt).is_none()));
    m.stop_with(libc::SIGTERM);
    // The connection is gone: the open file cannot be read any more.
    let mut buf = [0u8; 4];
    assert_eq!(errno(&open.read_exact_at(&mut buf, 0)), Some(libc::ENOTCONN));
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

#[test]
fn acknowledged_writes_survive_a_killed_daemon() {
    use std::io::Write;
    let Some(mut m) = Mount::with(&[], tree) else { return };
    let mut open = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.at("new"))
        .unwrap();
    // Each write that returned is acknowledged: no fsync, no close.
    for i in 0..10u8 {
        open.write_all(&[i; 1000]).unwrap();
    }
    let mut old = fs::OpenOptions::new().write(true).open(m.at("f")).unwrap();
    old.write_all(b"DATA").unwrap();
    let status = m.stop_with(libc::SIGKILL);
    assert!(!status.success());
    let expect: Vec<u8> = (0..10u8).flat_map(|i| [i; 1000]).collect();
    assert_eq!(fs::read(m.src_at("new")).unwrap(), expect);
    assert_eq!(fs::read(m.src_at("f")).unwrap(), b"DATA");
    // The dead mount fails instead of hanging, and the harness detaches it.
    assert_eq!(errno(&fs::metadata(m.at("f"))), Some(libc::ENOTCONN));
    drop((open, old));
}
