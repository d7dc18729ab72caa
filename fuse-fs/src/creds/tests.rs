//! Unit tests of the caller credentials: real threads switching identity,
//! checked through `/proc/thread-self/status` and through what the kernel
//! then allows.

use std::sync::{Barrier, mpsc};

use super::*;

/// One field line of this thread's `/proc/thread-self/status`.
fn status(field: &str) -> String {
    let s = std::fs::read_to_string("/proc/thread-self/status").expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(field).map(|r| r.trim().to_string()))
        .unwrap_or_else(|| panic!("no {field} in {s}"))
}

/// (fsuid, fsgid, groups, umask) of this thread.
fn ids() -> (u32, u32, Vec<u32>, String) {
    let nth = |line: String, i: usize| -> u32 { line.split_whitespace().nth(i).unwrap().parse().unwrap() };
    let groups = status("Groups:")
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    (nth(status("Uid:"), 3), nth(status("Gid:"), 3), groups, status("Umask:"))
}

/// Makes a thread that fails before its rendezvous still arrive at them,
/// so that its partner fails the test by the panic it reports rather than
/// waiting on the barrier for ever.
struct Rendezvous<'a> {
    barrier: &'a Barrier,
    left: std::cell::Cell<usize>,
}

impl Rendezvous<'_> {
    fn wait(&self) {
        self.left.set(self.left.get() - 1);
        self.barrier.wait();
    }
}

impl Drop for Rendezvous<'_> {
    fn drop(&mut self) {
        for _ in 0..self.left.get() {
            self.barrier.wait();
        }
    }
}

fn root() -> bool {
    if sys::is_root() {
        return true;
    }
    eprintln!("SKIPPED: switching identities needs root");
    false
}

#[test]
fn status_lines_are_parsed() {
    let p = ProcCreds::parse("Name:\tx\nGroups:\t4 24 27 \nCapEff:\t0000000000200000\n");
    assert_eq!(&*p.groups, &[4, 24, 27]);
    assert!(p.has_cap(sys::CAP_SYS_ADMIN));
    assert!(!p.has_cap(sys::CAP_FSETID));
    let none = ProcCreds::parse("Groups:\t\nCapEff:\t0000000000000000\n");
    assert!(none.groups.is_empty());
    assert!(!none.has_cap(sys::CAP_SYS_ADMIN));
}

#[test]
fn a_gone_process_has_no_groups_and_no_capabilities() {
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("wait");
    let creds = Creds::new(false);
    let p = creds.proc_creds(Caller {
        uid: 1,
        gid: 1,
        pid,
        umask: 0,
    });
    assert!(p.groups.is_empty() && p.cap_eff == 0, "{p:?}");
    // Our own process is root with capabilities (when run as root).
    let me = creds.proc_creds(Caller {
        pid: std::process::id(),
        ..Caller::default()
    });
    assert_eq!(me.has_cap(sys::CAP_SYS_ADMIN), sys::is_root());
}

#[test]
fn a_process_whose_ids_are_not_the_requests_lends_nothing() {
    assert_eq!(
        fs_ids("Name:\tx\nUid:\t1000\t1000\t1000\t1001\nGid:\t50\t50\t50\t51\n"),
        Some((1001, 51)),
        "the fourth fields: the filesystem ids"
    );
    assert_eq!(fs_ids("Name:\tx\n"), None);
    // Our own process (root with capabilities when run as root), named by
    // a request of another identity: as if its pid had been reused.
    let creds = Creds::new(false);
    let other = creds.proc_creds(Caller {
        uid: 12345,
        gid: 12345,
        pid: std::process::id(),
        umask: 0,
    });
    assert!(other.groups.is_empty() && other.cap_eff == 0, "{other:?}");
    let (uid, gid) = fs_ids(&std::fs::read_to_string("/proc/self/status").expect("status")).expect("ids");
    let me = creds.proc_creds(Caller {
        uid,
        gid,
        pid: std::process::id(),
        umask: 0,
    });
    assert_eq!(me.has_cap(sys::CAP_SYS_ADMIN), sys::is_root(), "{me:?}");
}

#[test]
fn root_of_another_user_namespace_has_no_capabilities() {
    if !root() {
        return;
    }
    let Ok(mut child) = std::process::Command::new("unshare")
        .args(["-Ur", "sleep", "30"])
        .spawn()
    else {
        eprintln!("SKIPPED: unshare(1) cannot be run");
        return;
    };
    let pid = child.id();
    let ours = std::fs::read_link("/proc/self/ns/user").expect("our namespace");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::read_link(format!("/proc/{pid}/ns/user")).is_ok_and(|ns| ns == ours) {
        assert!(
            std::time::Instant::now() < deadline,
            "unshare -Ur made no user namespace"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let (uid, gid) = fs_ids(&status).expect("ids");
    assert_ne!(
        u64::from_str_radix(
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .expect("CapEff")
                .trim(),
            16
        )
        .expect("hex"),
        0,
        "root of its own namespace has capabilities there"
    );
    let p = Creds::new(false).proc_creds(Caller {
        uid,
        gid,
        pid,
        umask: 0,
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(!p.has_cap(sys::CAP_SYS_ADMIN), "{p:?}");
}

#[test]
fn a_thread_takes_the_caller_identity_and_gives_it_back_alone() {
    if !root() {
        return;
    }
    // A thread holding groups 4242 and 4343, with the caller's filesystem
    // ids, stands for the calling process.
    let (tid_tx, tid_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        sys::set_thread_groups(&[4242, 4343]).expect("setgroups");
        // SAFETY: setfsgid and setfsuid (raw system calls, this thread's
        // ids only) have no memory-safety preconditions.
        unsafe {
            libc::setfsgid(65533);
            libc::setfsuid(65534);
        }
        tid_tx.send(status("Pid:").parse::<u32>().unwrap()).unwrap();
        let _ = done_rx.recv();
    });
    let tid = tid_rx.recv().unwrap();
    let creds = Creds::new(true);
    let caller = Caller {
        uid: 65534,
        gid: 65533,
        pid: tid,
        umask: 0o027,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // 0700 whatever the process umask is now (other tests set it to 0).
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let before = ids();
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let acting = s.spawn(|| {
            let rendezvous = Rendezvous {
                barrier: &barrier,
                left: std::cell::Cell::new(2),
            };
            // A first umask gives the thread its own fs context, so that
            // other tests resetting the process umask cannot touch it.
            drop(
                creds
                    .act_as(Caller {
                        umask: 0o077,
                        ..Caller::default()
                    })
                    .expect("act as root"),
            );
            let mine = ids();
            let g = creds.act_as(caller).expect("act as the caller");
            assert!(g.switched());
            let (uid, gid, groups, umask) = ids();
            assert_eq!(
                (uid, gid, groups, umask.as_str()),
                (65534, 65533, vec![4242, 4343], "0027")
            );
            // The kernel now treats this thread as nobody: root's 0700
            // directory refuses it.
            let c = sys::cstr(dir.path().join("x").as_os_str().as_encoded_bytes()).unwrap();
            let e = sys::open_path(&c, libc::O_CREAT | libc::O_WRONLY).expect_err("created as nobody");
            assert_eq!(e.errno(), libc::EACCES);
            rendezvous.wait(); // the other thread checks itself now
            rendezvous.wait();
            drop(g);
            let after = ids();
            assert_eq!(after.0, 0);
            assert_eq!(after.1, mine.1);
            assert_eq!(after.2, mine.2);
            assert_eq!(after.3, mine.3, "the umask was not restored");
            // Root again: the same create works.
            sys::open_path(&c, libc::O_CREAT | libc::O_WRONLY).expect("created as root");
        });
        let other = s.spawn(|| {
            barrier.wait();
            let now = ids();
            barrier.wait();
            now
        });
        acting.join().unwrap();
        let (uid, gid, groups, umask) = other.join().unwrap();
        assert_eq!(
            (uid, gid, &groups),
            (before.0, before.1, &before.2),
            "another thread's identity changed"
        );
        // (Other tests set the shared process umask to 0 at any time; it
        // must just never be the caller's.)
        assert_ne!(umask, "0027", "another thread got the caller's umask");
    });
    done_tx.send(()).unwrap();
    holder.join().unwrap();
    let now = ids();
    assert_eq!((now.0, now.1, &now.2), (before.0, before.1, &before.2));
}

#[test]
fn a_root_writer_without_cap_fsetid_loses_it_for_the_write_only() {
    if !root() {
        return;
    }
    let creds = Creds::new(true);
    let root_caller = Caller {
        pid: std::process::id(),
        ..Caller::default()
    };
    let fsetid = || u64::from_str_radix(&status("CapEff:"), 16).unwrap() & (1 << sys::CAP_FSETID) != 0;
    std::thread::spawn(move || {
        assert!(fsetid());
        {
            let g = creds.act_as_writer(root_caller, true).expect("act");
            assert!(!g.switched());
            assert!(!fsetid(), "CAP_FSETID still effective");
        }
        assert!(fsetid(), "CAP_FSETID not restored");
        let _g = creds.act_as_writer(root_caller, false).expect("act");
        assert!(fsetid(), "dropped without the kernel's flag");
    })
    .join()
    .unwrap();
}
