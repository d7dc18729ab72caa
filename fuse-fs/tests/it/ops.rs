//! Daily operation: `mount -t fuse.rcufs` and `mount -a` from an fstab
//! through the mount helper, `umount`, failing mounts, the systemd
//! readiness notification, and the daemon's log.
//!
//! mount(8) finds its helper only in `/sbin` (and `/sbin/fs.d`, `/sbin/fs`;
//! no environment variable moves it), so the helper tests put a symlink
//! `/sbin/mount.fuse.rcufs` to the binary under test for their duration
//! ([`HelperLink`]): they hold an exclusive `flock` on a lock file while the
//! link exists, which serialises them within this test binary and against
//! another test run on the machine; a link left by a crashed run is simply
//! replaced, and an installed helper (a link elsewhere, or a file, moved
//! aside meanwhile) is put back afterwards.
//! The daemons the helper starts are not children of the test; they are
//! found by scanning `/proc` for an `rcufs mount` whose command line names
//! the test's mount point, and a daemon counts as gone once its process is
//! gone or a zombie (its parent is init, which may reap it late).

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Mount, any_mount_at, eventually, mount_possible, rcufs, rcufs_mount_at};

const HELPER: &str = "/sbin/mount.fuse.rcufs";
const LOCK: &str = "/tmp/rcufs-mount-helper-test.lock";

/// `/sbin/mount.fuse.rcufs` pointing at the binary under test while it lives.
struct HelperLink {
    _lock: File,
    previous: Previous,
}

/// What was at [`HELPER`] before the test, to be put back.
enum Previous {
    /// Nothing, or a link to a test binary (a crashed run's leftover).
    Nothing,
    /// A link somewhere else (an install): its target.
    Link(PathBuf),
    /// A file (an installed copy), moved aside to this path.
    File(PathBuf),
}

impl HelperLink {
    fn install() -> HelperLink {
        let lock = File::create(LOCK).expect("lock file");
        // SAFETY: flock on an open descriptor touches no memory.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0, "flock");
        let ours = Path::new(env!("CARGO_BIN_EXE_rcufs"));
        let saved = PathBuf::from(format!("{HELPER}.saved-by-rcufs-tests"));
        let previous = match std::fs::symlink_metadata(HELPER) {
            Err(_) => Previous::Nothing,
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(HELPER).unwrap();
                if target.to_string_lossy().contains("/target/debug/") || target == ours {
                    Previous::Nothing
                } else {
                    Previous::Link(target)
                }
            }
            Ok(_) => {
                std::fs::rename(HELPER, &saved).expect("move the installed helper aside");
                Previous::File(saved)
            }
        };
        let tmp = format!("{HELPER}.test-{}", std::process::id());
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(ours, &tmp).expect("symlink the helper");
        std::fs::rename(&tmp, HELPER).expect("install the helper link");
        HelperLink { _lock: lock, previous }
    }
}

impl Drop for HelperLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(HELPER);
        match &self.previous {
            Previous::Nothing => {}
            Previous::Link(target) => {
                let _ = std::os::unix::fs::symlink(target, HELPER);
            }
            Previous::File(saved) => {
                let _ = std::fs::rename(saved, HELPER);
            }
        }
    }
}

/// Descriptors closed on drop.
struct Fds([i32; 2]);

impl Drop for Fds {
    fn drop(&mut self) {
        for fd in self.0 {
            // SAFETY: the descriptors are ours and closed once.
            unsafe { libc::close(fd) };
        }
    }
}

/// A source and mount points in a temporary directory; dropping it
/// unmounts whatever is left and kills the daemons serving it.
struct Dirs {
    tmp: Option<tempfile::TempDir>,
    src: PathBuf,
    mnt: PathBuf,
    mnt2: PathBuf,
    log: PathBuf,
}

impl Dirs {
    fn new() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (src, mnt, mnt2) = (base.join("src"), base.join("mnt"), base.join("mnt2"));
        for d in [&src, &mnt, &mnt2] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(src.join("hello"), b"hello through rcufs").unwrap();
        Dirs {
            log: base.join("rcufs.log"),
            tmp: Some(tmp),
            src,
            mnt,
            mnt2,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        for mnt in [&self.mnt, &self.mnt2] {
            for pid in daemons(mnt) {
                // SAFETY: kill touches no memory.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            while any_mount_at(mnt).is_some() {
                let c = crate::sys::cpath(mnt);
                // SAFETY: the path is NUL-terminated.
                if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                    eprintln!("LEAKED MOUNT at {}: keeping its directory", mnt.display());
                    if let Some(tmp) = self.tmp.take() {
                        let _ = tmp.keep();
                    }
                    break;
                }
            }
        }
        if std::thread::panicking() {
            eprintln!("daemon log of the failed test:\n{}", self.log_text());
        }
    }
}

/// The live (not zombie) `rcufs mount` processes whose command line names `mnt`.
fn daemons(mnt: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_daemon = args.len() > 2
            && args[0].ends_with(b"rcufs")
            && args[1] == b"mount"
            && args.contains(&mnt.as_os_str().as_bytes());
        if is_daemon && proc_state(pid).is_some_and(|s| s != 'Z') {
            out.push(pid);
        }
    }
    out
}

/// The state letter and the session id from `/proc/PID/stat`.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid pgrp session ..."; comm may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let session = f.nth(2)?.parse().ok()?;
    Some((state, session))
}

fn proc_state(pid: i32) -> Option<char> {
    proc_stat(pid).map(|(s, _)| s)
}

/// Runs a util-linux command (`mount`, `umount`) with `RUST_LOG=info` for
/// the daemon it may start.
fn run(program: &str, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(program)
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[track_caller]
fn succeeds(program: &str, args: &[&std::ffi::OsStr]) -> Output {
    let out = run(program, args);
    assert!(out.status.success(), "{program} {args:?} failed: {}", text(&out));
    out
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

/// The one daemon serving `mnt`.
#[track_caller]
fn daemon(mnt: &Path) -> i32 {
    let pids = daemons(mnt);
    assert_eq!(pids.len(), 1, "expected one daemon for {}: {pids:?}", mnt.display());
    pids[0]
}

/// Waits (up to 20 s) until no daemon serves `mnt` any more.
#[track_caller]
fn daemon_gone(mnt: &Path) {
    assert!(
        eventually(Duration::from_secs(20), || daemons(mnt).is_empty()),
        "the daemon for {} is still running 20 s after umount: {:?}",
        mnt.display(),
        daemons(mnt)
    );
}

/// The mountinfo source of the topmost mount at `mnt`.
fn mount_source(mnt: &Path) -> Option<String> {
    fuse_fs::mountinfo::mounts()
        .unwrap()
        .into_iter()
        .rev()
        .find(|m| m.mount_point == mnt)
        .map(|m| m.source)
}

fn stats(mnt: &Path) -> Value {
    let raw = crate::sys::getxattr(mnt, fuse_fs::protocol::XATTR_STATS).expect("stats xattr");
    serde_json::from_slice(&raw).expect("stats JSON")
}

#[test]
fn mount_t_fuse_rcufs_returns_a_live_mount_with_a_detached_daemon_that_umount_ends() {
    if !mount_possible() {
        return;
    }
    let _link = HelperLink::install();
    let d = Dirs::new();
    let opts = format!(
        "dcache_entries=1000,page_cache_size=16M,kernel_cache,threads=2,coherence=ttl,revalidate=0.5,nofail,_netdev,defaults,log_file={}",
        d.log.display()
    );
    // A descriptor mount's caller leaks (no close-on-exec), as a script's
    // pipe would be: the daemon must not keep it.
    let mut pipe = [0; 2];
    // SAFETY: pipe writes two descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let leaked = std::fs::read_link(format!("/proc/self/fd/{}", pipe[1])).unwrap();
    let _pipe_guard = Fds(pipe);
    succeeds(
        "mount",
        &[
            os("-t"),
            os("fuse.rcufs"),
            d.src.as_os_str(),
            d.mnt.as_os_str(),
            os("-o"),
            os(&opts),
        ],
    );
    // Live when mount returns: no waiting.
    assert!(rcufs_mount_at(&d.mnt), "mount returned before the mount existed");
    assert_eq!(std::fs::read(d.mnt.join("hello")).unwrap(), b"hello through rcufs");
    assert_eq!(mount_source(&d.mnt).as_deref(), Some(d.src.to_str().unwrap()));
    // The options arrived.
    let s = stats(&d.mnt);
    assert_eq!(s["dcache"]["capacity"], 1000, "{s}");
    assert_eq!(s["pagecache"]["budget_bytes"], 16 << 20, "{s}");
    assert_eq!(s["kernel_cache"], true, "{s}");
    // Detached: its own session, stdin from /dev/null, output to the log.
    let pid = daemon(&d.mnt);
    let (_, session) = proc_stat(pid).unwrap();
    assert_eq!(session, pid, "the daemon does not lead its own session");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap(),
        Path::new("/dev/null")
    );
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/fd/2")).unwrap(), d.log);
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        assert_ne!(
            std::fs::read_link(fd.path()).ok().as_ref(),
            Some(&leaked),
            "the daemon kept the caller's leaked descriptor"
        );
    }

    succeeds("umount", &[d.mnt.as_os_str()]);
    assert!(any_mount_at(&d.mnt).is_none());
    daemon_gone(&d.mnt);
    let log = d.log_text();
    let mounted = log
        .lines()
        .find(|l| l.contains("mounted source="))
        .unwrap_or_else(|| panic!("{log}"));
    for field in [
        "dcache_entries=1000",
        "page_cache_bytes=16777216",
        "kernel_cache=true",
        "threads=2",
        "coherence=\"ttl\"",
        "revalidate_secs=0.5",
    ] {
        assert!(mounted.contains(field), "the mount line lacks {field}: {mounted}");
    }
    assert!(log.contains("unmounted mountpoint="), "no unmount line:\n{log}");
    assert!(!log.contains('\x1b'), "escape codes in the log:\n{log:?}");
}

#[test]
fn mount_a_from_a_temporary_fstab_mounts_once_and_umount_unmounts() {
    if !mount_possible() {
        return;
    }
    let _link = HelperLink::install();
    let d = Dirs::new();
    let fstab = d.log.with_file_name("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# rcufs lines as an operator writes them\n\
             {src} {mnt} fuse.rcufs defaults,nofail,_netdev,x-systemd.requires=network.target,page_cache_size=8M,allow_other,log_file={log} 0 0\n\
             {src} {mnt2} fuse.rcufs noauto,ro,dcache_entries=500,log_file={log} 0 0\n",
            src = d.src.display(),
            mnt = d.mnt.display(),
            mnt2 = d.mnt2.display(),
            log = d.log.display()
        ),
    )
    .unwrap();
    succeeds("mount", &[os("-a"), os("-T"), fstab.as_os_str()]);
    assert!(rcufs_mount_at(&d.mnt), "mount -a did not mount the fstab line");
    assert!(any_mount_at(&d.mnt2).is_none(), "mount -a mounted a noauto line");
    assert_eq!(stats(&d.mnt)["pagecache"]["budget_bytes"], 8 << 20);
    assert_eq!(std::fs::read(d.mnt.join("hello")).unwrap(), b"hello through rcufs");
    // A second `mount -a` sees the line mounted and leaves it alone.
    succeeds("mount", &[os("-a"), os("-T"), fstab.as_os_str()]);
    let count = fuse_fs::mountinfo::mounts()
        .unwrap()
        .iter()
        .filter(|m| m.mount_point == d.mnt)
        .count();
    assert_eq!(count, 1, "the second mount -a mounted again");
    let pid = daemon(&d.mnt);
    // The noauto line mounts by its mount point.
    succeeds("mount", &[os("-T"), fstab.as_os_str(), d.mnt2.as_os_str()]);
    assert_eq!(stats(&d.mnt2)["dcache"]["capacity"], 500);
    let write = std::fs::write(d.mnt2.join("new"), b"x");
    assert_eq!(crate::sys::errno(&write), Some(libc::EROFS), "the ro line is writable");
    std::fs::write(d.mnt.join("new"), b"x").expect("the rw line is read-only");

    succeeds("umount", &[d.mnt.as_os_str()]);
    succeeds("umount", &[d.mnt2.as_os_str()]);
    assert!(any_mount_at(&d.mnt).is_none() && any_mount_at(&d.mnt2).is_none());
    daemon_gone(&d.mnt);
    daemon_gone(&d.mnt2);
    assert!(proc_state(pid).is_none_or(|s| s == 'Z'), "pid {pid} still runs");
}

#[test]
fn a_failing_mount_exits_non_zero_with_the_reason_and_leaves_nothing() {
    if !mount_possible() {
        return;
    }
    let _link = HelperLink::install();
    let d = Dirs::new();
    let log = format!("log_file={}", d.log.display());
    let missing = d.src.with_file_name("missing");
    let cases: [(&Path, String, &str); 4] = [
        (&missing, log.clone(), "does not exist"),
        (
            &d.src,
            format!("{log},no_such_option"),
            "unknown mount option `no_such_option`",
        ),
        (&d.src, format!("{log},threads=0"), "`threads=0`"),
        (
            &d.src,
            format!("{log},kernel_cache=yes"),
            "`kernel_cache` takes no value",
        ),
    ];
    for (src, opts, reason) in cases {
        let out = run(
            "mount",
            &[
                os("-t"),
                os("fuse.rcufs"),
                src.as_os_str(),
                d.mnt.as_os_str(),
                os("-o"),
                os(&opts),
            ],
        );
        assert!(!out.status.success(), "mount -o {opts} succeeded: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(reason), "mount -o {opts}: no {reason:?} in {stderr}");
        assert!(any_mount_at(&d.mnt).is_none(), "mount -o {opts} left a mount");
        assert!(daemons(&d.mnt).is_empty(), "mount -o {opts} left a daemon");
    }
    // The mount point is busy: the daemon's own check, reported through the helper.
    let m = Mount::start(&[]).unwrap();
    let out = run(
        "mount",
        &[
            os("-t"),
            os("fuse.rcufs"),
            d.src.as_os_str(),
            m.mnt.as_os_str(),
            os("-o"),
            os(&log),
        ],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("busy"), "{}", text(&out));
}

/// A daemon that mounts but never reports ready: the helper gives up at its
/// deadline, stops the daemon (which unmounts) and fails.
#[test]
fn a_daemon_that_never_gets_ready_is_stopped_and_the_mount_fails() {
    if !mount_possible() {
        return;
    }
    let _link = HelperLink::install();
    let d = Dirs::new();
    let out = Command::new("mount")
        .args([
            os("-t"),
            os("fuse.rcufs"),
            d.src.as_os_str(),
            d.mnt.as_os_str(),
            os("-o"),
        ])
        .arg(format!("log_file={}", d.log.display()))
        .env("RCUFS_FAULT", "withhold-ready")
        .env("RCUFS_HELPER_READY_TIMEOUT_SECS", "2")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did not report the mount ready within 2 s"),
        "{}",
        text(&out)
    );
    // It had mounted: the log says so, and the stop unmounted it.
    assert!(d.log_text().contains(" mounted "), "{}", d.log_text());
    daemon_gone(&d.mnt);
    assert!(any_mount_at(&d.mnt).is_none(), "the stopped daemon left its mount");
}

#[test]
fn helper_conventions_fake_verbose_sloppy() {
    if !mount_possible() {
        return;
    }
    let _link = HelperLink::install();
    let d = Dirs::new();
    let log = format!("log_file={}", d.log.display());
    // -f: everything is checked, nothing is mounted or started.
    let out = succeeds(
        "mount",
        &[
            os("-f"),
            os("-v"),
            os("-t"),
            os("fuse.rcufs"),
            d.src.as_os_str(),
            d.mnt.as_os_str(),
            os("-o"),
            os(&log),
        ],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing mounted"),
        "{}",
        text(&out)
    );
    assert!(any_mount_at(&d.mnt).is_none() && daemons(&d.mnt).is_empty());
    let missing = d.src.with_file_name("missing");
    let out = run(
        "mount",
        &[
            os("-f"),
            os("-t"),
            os("fuse.rcufs"),
            missing.as_os_str(),
            d.mnt.as_os_str(),
        ],
    );
    assert!(!out.status.success(), "-f did not check the source: {}", text(&out));
    // -s: an unknown option is dropped with a note; -n is accepted.
    let out = succeeds(
        "mount",
        &[
            os("-s"),
            os("-n"),
            os("-t"),
            os("fuse.rcufs"),
            d.src.as_os_str(),
            d.mnt.as_os_str(),
            os("-o"),
            os(&format!("{log},no_such_option")),
        ],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ignoring unknown mount option `no_such_option`"),
        "{}",
        text(&out)
    );
    assert!(rcufs_mount_at(&d.mnt));
    succeeds("umount", &[d.mnt.as_os_str()]);
    daemon_gone(&d.mnt);
}

#[test]
fn a_sigterm_to_the_detached_daemon_unmounts() {
    if !mount_possible() {
        return;
    }
    let _link = HelperLink::install();
    let d = Dirs::new();
    succeeds(
        "mount",
        &[
            os("-t"),
            os("fuse.rcufs"),
            d.src.as_os_str(),
            d.mnt.as_os_str(),
            os("-o"),
            os(&format!("log_file={}", d.log.display())),
        ],
    );
    let pid = daemon(&d.mnt);
    // SAFETY: kill touches no memory.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    daemon_gone(&d.mnt);
    assert!(any_mount_at(&d.mnt).is_none(), "SIGTERM left the mount");
    let log = d.log_text();
    assert!(log.contains("unmounting") && log.contains("unmounted"), "{log}");
}

/// The log lines of a foreground mount whose stderr is a file: plain text,
/// one line at mount with the effective options, one at each step of the
/// unmount.
#[test]
fn a_redirected_log_is_plain_text_with_a_line_per_event() {
    let Some(mut m) = Mount::with_env(
        &["-o", "threads=2,dcache_entries=2000,ro"],
        &[("RUST_LOG", "info")],
        |_| {},
    ) else {
        return;
    };
    m.stop_with(libc::SIGTERM);
    let log = m.log_text();
    assert!(!log.contains('\x1b'), "escape codes in a redirected log:\n{log:?}");
    let mounted: Vec<&str> = log.lines().filter(|l| l.contains(" mounted ")).collect();
    assert_eq!(mounted.len(), 1, "{log}");
    for field in [
        format!("source={}", m.src.display()),
        format!("mountpoint={}", m.mnt.display()),
        "threads=2".to_string(),
        "dcache_entries=2000".to_string(),
        "fuse_options=ro".to_string(),
    ] {
        assert!(mounted[0].contains(&field), "no {field} in {}", mounted[0]);
    }
    assert!(log.contains("unmounting"), "{log}");
    assert!(log.contains("unmounted"), "{log}");
}

#[test]
fn log_file_takes_the_whole_output_of_a_foreground_mount() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("logs/rcufs.log");
    let Some(mut m) = Mount::with_env(&["--log-file", log.to_str().unwrap()], &[("RUST_LOG", "info")], |_| {}) else {
        return;
    };
    m.stop_with(libc::SIGTERM);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(" mounted ") && text.contains("unmounted"), "{text}");
    assert!(m.log_text().is_empty(), "output left on stderr: {}", m.log_text());
}

#[test]
fn json_logs_are_one_object_per_line() {
    let Some(mut m) = Mount::with_env(&["--log-format", "json"], &[("RUST_LOG", "info")], |_| {}) else {
        return;
    };
    m.stop_with(libc::SIGTERM);
    let log = m.log_text();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\nlog:\n{log}")))
        .collect();
    let mounted = lines
        .iter()
        .find(|v| v["fields"]["message"] == "mounted")
        .unwrap_or_else(|| panic!("no mounted event:\n{log}"));
    assert_eq!(mounted["level"], "INFO");
    assert_eq!(mounted["fields"]["mountpoint"], m.mnt.to_str().unwrap());
    assert!(mounted["fields"]["dcache_entries"].is_u64(), "{mounted}");
    assert!(lines.iter().any(|v| v["fields"]["message"] == "unmounted"), "{log}");

    // A failed mount reports its error as JSON too.
    let out = rcufs()
        .args(["mount", "/nonexistent-rcufs-source"])
        .arg(&m.mnt)
        .args(["--log-format", "json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_str(stderr.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    assert_eq!(v["level"], "ERROR", "{v}");
    assert!(v["fields"]["error"].as_str().unwrap().contains("does not exist"), "{v}");
}

/// `Type=notify`: with `NOTIFY_SOCKET` set, `rcufs mount` in the foreground
/// sends `READY=1` (with its pid) only once the mount answers, and
/// `STOPPING=1` when it unmounts.
#[test]
fn notify_socket_gets_ready_once_the_mount_is_live_and_stopping_at_unmount() {
    if !mount_possible() {
        return;
    }
    let d = Dirs::new();
    let sock_path = d.log.with_file_name("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let log = File::create(&d.log).unwrap();
    let mut child = rcufs()
        .arg("mount")
        .arg(&d.src)
        .arg(&d.mnt)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("no READY=1 within 20 s");
    // Checked before anything else can wait: the mount must already answer.
    let live = rcufs_mount_at(&d.mnt);
    let content = std::fs::read(d.mnt.join("hello"));
    let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    assert!(ready.contains(&format!("MAINPID={}", child.id())), "{ready}");
    assert!(live, "READY=1 came before the mount existed");
    assert_eq!(content.unwrap(), b"hello through rcufs");
    // SAFETY: kill touches no memory; the pid is our live child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let n = sock.recv(&mut buf).expect("no STOPPING=1 within 20 s");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    assert!(eventually(Duration::from_secs(20), || matches!(
        child.try_wait(),
        Ok(Some(_))
    )));
    let mut rest = String::new();
    File::open(&d.log).unwrap().read_to_string(&mut rest).unwrap();
    assert!(!rest.contains("could not notify"), "{rest}");
}

/// A process in a mount namespace of its own, killed on drop.
struct Namespace(std::process::Child);

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `mount -N PID`: the mount and its daemon live in that process's mount
/// namespace, not in the caller's; `umount` there ends the daemon.
#[test]
fn mount_n_mounts_in_another_namespace() {
    if !mount_possible() {
        return;
    }
    let _link = HelperLink::install();
    let d = Dirs::new();
    let ns = Namespace(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sleep", "600"])
            .spawn()
            .expect("unshare"),
    );
    let pid = ns.0.id().to_string();
    let ns_file = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    assert!(
        eventually(Duration::from_secs(20), || ns_file(&pid) != ns_file("self")),
        "unshare made no namespace"
    );
    succeeds(
        "mount",
        &[
            os("-N"),
            os(&pid),
            os("-t"),
            os("fuse.rcufs"),
            d.src.as_os_str(),
            d.mnt.as_os_str(),
            os("-o"),
            os(&format!("log_file={}", d.log.display())),
        ],
    );
    assert!(any_mount_at(&d.mnt).is_none(), "-N mounted in the caller's namespace");
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let theirs = fuse_fs::mountinfo::parse_mountinfo(&theirs);
    assert!(
        theirs
            .iter()
            .any(|m| m.mount_point == d.mnt && fuse_fs::mountinfo::is_rcufs(m)),
        "no rcufs mount at {} in the namespace of {pid}",
        d.mnt.display()
    );
    let daemon_pid = daemon(&d.mnt);
    assert_eq!(ns_file(&daemon_pid.to_string()), ns_file(&pid));
    let cat = Command::new("nsenter")
        .args(["-t", &pid, "-m", "cat"])
        .arg(d.mnt.join("hello"))
        .output()
        .unwrap();
    assert_eq!(cat.stdout, b"hello through rcufs", "{}", text(&cat));
    succeeds(
        "nsenter",
        &[os("-t"), os(&pid), os("-m"), os("umount"), d.mnt.as_os_str()],
    );
    daemon_gone(&d.mnt);
}
