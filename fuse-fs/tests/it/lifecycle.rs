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

/// A request handler that panics (here: an injected fault in LOOKUP that
/// panics while holding the parent directory's attribute lock) answers its
/// request with EIO and nothing else: every worker thread keeps serving, no
/// lock is left poisoned for the requests that follow, and the mount still
/// unmounts cleanly. Before panics were contained, the first panic on the
/// session's thread made rcufs exit and leave a dead mount behind, and a
/// panic elsewhere poisoned the directory's lock for every later lookup.
#[test]
fn a_panicking_request_answers_eio_and_the_daemon_goes_on() {
    let env = [("RCUFS_FAULT", "panic-lookup:boom")];
    let Some(mut m) = Mount::with_env(&["--threads", "2"], &env, |src| {
        write_tree(src, &[("f", b"data"), ("d/g", b"more")]);
    }) else {
        return;
    };
    // Enough panics that every worker thread has had some.
    for i in 0..16 {
        let e = fs::metadata(m.at("boom")).expect_err("the injected fault must fail the lookup");
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EIO),
            "lookup {i} of the faulty name: {e}; log:\n{}",
            m.log_text()
        );
        // The same directory's lock, the same workers: the next requests work.
        assert_eq!(
            fs::read(m.at("f")).unwrap(),
            b"data",
            "after panic {i}; log:\n{}",
            m.log_text()
        );
        assert_eq!(fs::read(m.at("d/g")).unwrap(), b"more");
        let names: Vec<_> = fs::read_dir(m.at(""))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
    assert!(
        m.wait_exit(Duration::from_millis(100)).is_none(),
        "the daemon exited; log:\n{}",
        m.log_text()
    );
    let panics = m.stats()["panics"].as_u64().expect("stats.panics");
    assert!(panics >= 16, "stats count {panics} panics, expected at least 16");
    let log = m.log_text();
    assert!(
        log.contains("request handler panicked") && log.contains("lookup"),
        "the panic is logged with its operation; log:\n{log}"
    );
    let status = m.stop_with(libc::SIGTERM);
    assert!(status.success(), "rcufs exited with {status}; log:\n{}", m.log_text());
    assert!(any_mount_at(&m.mnt).is_none(), "the mount is still listed");
}

/// The abort switch of the connection behind `mnt`.
fn abort_switch(mnt: &std::path::Path) -> std::path::PathBuf {
    crate::harness::fuse_connection(mnt).join("abort")
}

/// When the FUSE session ends without an unmount (here: the connection is
/// aborted through fusectl), rcufs detaches its own mount before it exits
/// rather than leave a dead one ("Transport endpoint is not connected")
/// behind.
#[test]
fn a_session_that_ends_without_unmount_leaves_no_dead_mount() {
    let Some(mut m) = Mount::with(&[], tree) else { return };
    assert_eq!(fs::read(m.at("f")).unwrap(), b"data");
    let switch = abort_switch(&m.mnt);
    fs::write(&switch, b"1").unwrap_or_else(|e| panic!("writing {}: {e}", switch.display()));
    let status = m
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("rcufs did not exit after the abort; log:\n{}", m.log_text()));
    assert_eq!(
        any_mount_at(&m.mnt),
        None,
        "rcufs exited ({status}) and left its mount behind; log:\n{}",
        m.log_text()
    );
}
