//! The mount harness: a source tree and a mount point in one temporary
//! directory, the real `rcufs` binary serving one on the other, and a `Drop`
//! that always unmounts and reaps the daemon (SIGTERM, then the FUSE abort
//! switch, SIGKILL and a lazy unmount if it does not go).

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::sys;

/// The `rcufs` binary under test.
pub fn rcufs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rcufs"))
}

/// Why this machine cannot mount, if it cannot.
fn cannot_mount() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        return Some(format!("cannot open /dev/fuse: {e}"));
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let fusermount =
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()));
    if !root && !fusermount {
        return Some("not root and no fusermount3 on PATH".into());
    }
    None
}

/// Returns `false` (after saying so loudly) when the test must skip because
/// this machine cannot mount; panics instead under `RCUFS_REQUIRE_MOUNT=1`.
pub fn mount_possible() -> bool {
    let Some(why) = cannot_mount() else { return true };
    if std::env::var("RCUFS_REQUIRE_MOUNT").is_ok_and(|v| v == "1") {
        panic!("RCUFS_REQUIRE_MOUNT=1 but this machine cannot mount: {why}");
    }
    eprintln!("SKIPPED: cannot mount: {why}");
    false
}

/// Whether mountinfo lists an rcufs mount at `mnt`.
pub fn rcufs_mount_at(mnt: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    text.lines().any(|line| {
        let Some((left, right)) = line.split_once(" - ") else {
            return false;
        };
        let mut r = right.split(' ');
        let (fstype, source) = (r.next().unwrap_or(""), r.next().unwrap_or(""));
        // `fuse.rcufs`, or `fuse` with source `rcufs` when the FUSE library
        // mounts with mount(2) and keeps the subtype only as the source.
        let rcufs = fstype == "fuse.rcufs" || (fstype == "fuse" && source == "rcufs");
        rcufs && left.split(' ').nth(4).map(Path::new) == Some(mnt)
    })
}

/// The filesystem type of the topmost mount at `mnt`, if anything is mounted there.
pub fn any_mount_at(mnt: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    text.lines().rev().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let at = left.split(' ').nth(4).map(Path::new) == Some(mnt);
        at.then(|| right.split(' ').next().unwrap_or("").to_string())
    })
}

/// A running mount. Dropping it unmounts and reaps the daemon.
pub struct Mount {
    tmp: Option<tempfile::TempDir>,
    /// The source directory (canonical).
    pub src: PathBuf,
    /// The mount point (canonical).
    pub mnt: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Mount {
    /// Mounts an empty source with `args` added to `rcufs mount`.
    pub fn start(args: &[&str]) -> Option<Mount> {
        Self::with(args, |_| {})
    }

    /// Fills the source with `setup`, then mounts it. `None` means the test
    /// must skip (already reported).
    pub fn with(args: &[&str], setup: impl FnOnce(&Path)) -> Option<Mount> {
        Self::with_nofile(args, None, setup)
    }

    /// As [`Mount::with`], with the daemon's RLIMIT_NOFILE (soft and hard)
    /// set to `nofile` when given, so that a test can exceed the descriptor
    /// limit with a few thousand files rather than tens of thousands.
    pub fn with_nofile(args: &[&str], nofile: Option<u64>, setup: impl FnOnce(&Path)) -> Option<Mount> {
        Self::spawn(None, args, nofile, &[], setup)
    }

    /// As [`Mount::with`], with `env` added to the daemon's environment.
    pub fn with_env(args: &[&str], env: &[(&str, &str)], setup: impl FnOnce(&Path)) -> Option<Mount> {
        Self::spawn(None, args, None, env, setup)
    }

    /// Mounts an existing directory `source` (for example another mount)
    /// rather than a fresh one.
    pub fn over(source: &Path, args: &[&str]) -> Option<Mount> {
        Self::spawn(Some(source), args, None, &[], |_| {})
    }

    /// As [`Mount::over`], with `env` added to the daemon's environment.
    pub fn over_with_env(source: &Path, args: &[&str], env: &[(&str, &str)]) -> Option<Mount> {
        Self::spawn(Some(source), args, None, env, |_| {})
    }

    /// As [`Mount::over`], with the daemon's RLIMIT_NOFILE set to `nofile`.
    pub fn over_with_nofile(source: &Path, args: &[&str], nofile: u64) -> Option<Mount> {
        Self::spawn(Some(source), args, Some(nofile), &[], |_| {})
    }

    fn spawn(
        source: Option<&Path>,
        args: &[&str],
        nofile: Option<u64>,
        env: &[(&str, &str)],
        setup: impl FnOnce(&Path),
    ) -> Option<Mount> {
        if !mount_possible() {
            return None;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        // Other users (the permission tests) must be able to reach the mount.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (mnt, log) = (base.join("mnt"), base.join("rcufs.log"));
        let src = match source {
            Some(s) => s.to_path_buf(),
            None => {
                let src = base.join("src");
                std::fs::create_dir(&src).unwrap();
                setup(&src);
                src
            }
        };
        std::fs::create_dir(&mnt).unwrap();
        let out = File::create(&log).unwrap();
        let mut cmd = rcufs();
        if let Some(limit) = nofile {
            limit_in_child(&mut cmd, libc::RLIMIT_NOFILE, limit);
        }
        let child = cmd
            .arg("mount")
            .arg(&src)
            .arg(&mnt)
            .args(args)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start rcufs");
        let mut m = Mount {
            tmp: Some(tmp),
            src,
            mnt,
            log,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if rcufs_mount_at(&m.mnt) {
                // The mount is in the table before the daemon has answered
                // the kernel's INIT; a `stat` of the root waits for that
                // handshake, so a test that unmounts at once (or kills the
                // daemon) does not cut it short.
                let _ = std::fs::metadata(&m.mnt);
                return Some(m);
            }
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                m.child = None;
                panic!(
                    "rcufs mount exited with {status} before the mount appeared; its log:\n{}",
                    m.log_text()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "no rcufs mount appeared at {} within 20 s (mounted there: {:?}); log:\n{}",
                    m.mnt.display(),
                    any_mount_at(&m.mnt),
                    m.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `mnt/rel`.
    pub fn at(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.mnt.clone()
        } else {
            self.mnt.join(rel)
        }
    }

    /// `src/rel`.
    pub fn src_at(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.src.clone()
        } else {
            self.src.join(rel)
        }
    }

    /// What the daemon wrote to stdout and stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The stats JSON, read through the `user.rcufs.stats` xattr on the root.
    #[track_caller]
    pub fn stats(&self) -> Value {
        let raw = sys::getxattr(&self.mnt, fuse_fs::protocol::XATTR_STATS)
            .unwrap_or_else(|e| panic!("getxattr user.rcufs.stats: {e}"));
        serde_json::from_slice(&raw).unwrap_or_else(|e| panic!("stats are not JSON ({e}): {raw:?}"))
    }

    /// One counter of the stats, for example `stat("dcache", "hits")`.
    #[track_caller]
    pub fn stat(&self, section: &str, key: &str) -> u64 {
        let s = self.stats();
        s[section][key]
            .as_u64()
            .unwrap_or_else(|| panic!("stats has no {section}.{key}: {s}"))
    }

    /// The daemon's process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("daemon running").id() as i32
    }

    /// Sends `signal` to the daemon and waits (up to 20 s) for it to exit;
    /// returns its status. The mount must be gone afterwards.
    pub fn stop_with(&mut self, signal: i32) -> ExitStatus {
        // SAFETY: kill has no memory preconditions; the pid is our live child.
        unsafe { libc::kill(self.pid(), signal) };
        self.wait_exit(Duration::from_secs(20)).unwrap_or_else(|| {
            panic!(
                "rcufs did not exit within 20 s of signal {signal}; log:\n{}",
                self.log_text()
            )
        })
    }

    /// Waits for the daemon to exit on its own (for example after an
    /// external unmount).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = wait_timeout(self.child.as_mut()?, timeout);
        if status.is_some() {
            self.child = None;
        }
        status
    }

    fn cleanup(&mut self) {
        if self.child.is_some() {
            // SAFETY: kill has no memory preconditions; the pid is our live child.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
            if self.wait_exit(Duration::from_secs(10)).is_none() {
                // Killing the daemon closes its /dev/fuse descriptors, which
                // aborts the connection.
                eprintln!("rcufs ignored SIGTERM for 10 s: killing it");
                if let Some(child) = self.child.as_mut() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                self.child = None;
            }
        }
        // Whatever is still mounted on our private mount point is ours: a
        // daemon that exited without unmounting leaves a dead mount behind
        // (of whatever type it mounted), and deleting the temporary
        // directory must not walk into it.
        while let Some(fstype) = any_mount_at(&self.mnt) {
            eprintln!(
                "rcufs is gone but a {fstype} mount is left at {}: detaching it",
                self.mnt.display()
            );
            let c = sys::cpath(&self.mnt);
            // SAFETY: the path is NUL-terminated.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                break;
            }
        }
        if any_mount_at(&self.mnt).is_some() {
            // Never delete the temporary directory through a live mount.
            eprintln!("LEAKED MOUNT at {}: keeping its directory", self.mnt.display());
            if let Some(tmp) = self.tmp.take() {
                let _ = tmp.keep();
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.cleanup();
        let log = self.log_text();
        if std::thread::panicking() {
            // The test failed: the daemon's side of the story helps.
            eprintln!("rcufs log of the failed test:\n{log}");
        } else if unexpected_panic(&log) {
            // The daemon must never panic, whatever a request carries
            // (panics the test injected itself excepted).
            panic!("the rcufs daemon panicked during this test:\n{log}");
        }
    }
}

/// Whether the daemon's log shows a panic other than one injected with
/// `RCUFS_FAULT` (whose message starts with "injected fault:").
fn unexpected_panic(log: &str) -> bool {
    let mut lines = log.lines().peekable();
    while let Some(line) = lines.next() {
        if line.contains("panicked at") && !lines.peek().is_some_and(|next| next.starts_with("injected fault:")) {
            return true;
        }
    }
    false
}

/// Whether the test can act as another user (it must be root); otherwise
/// says why it skips, or panics under `RCUFS_REQUIRE_MOUNT=1`.
pub fn can_switch_users() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("RCUFS_REQUIRE_MOUNT").is_ok_and(|v| v == "1") {
        panic!("RCUFS_REQUIRE_MOUNT=1 but acting as another user needs root");
    }
    eprintln!("SKIPPED: acting as another user needs root");
    false
}

/// Writes `files` (path relative to `root`, content) creating parent directories.
/// The names a directory stream lists, sorted.
pub fn listed(dir: std::fs::ReadDir) -> Vec<String> {
    let mut v: Vec<String> = dir
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub fn write_tree(root: &Path, files: &[(&str, &[u8])]) {
    for (rel, content) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    }
}

/// Deterministic content for file `i` of length `len`.
pub fn content(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7 + j / 4096) as u8).collect()
}

/// A page-aligned buffer for `O_DIRECT`.
#[repr(align(4096))]
pub struct AlignedPage(pub [u8; 4096]);

/// `path` opened for reading with `O_DIRECT`: every read is a READ
/// request, with `--kernel-cache` too.
pub fn open_direct(path: &Path) -> File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap_or_else(|e| panic!("O_DIRECT open of {}: {e}", path.display()))
}

/// The `/proc` directories of process `pid`'s threads whose name starts
/// with `prefix`.
pub fn threads_named(pid: i32, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .map(|t| t.expect("task").path())
        .filter(|dir| std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.starts_with(prefix)))
        .collect()
}

/// Polls `f` until it returns true or `timeout` passes; returns its last answer.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sets `resource` (soft and hard) to `limit` in `cmd`'s child, before exec.
pub fn limit_in_child(cmd: &mut Command, resource: libc::__rlimit_resource_t, limit: u64) {
    let lim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: the closure runs in the forked child before exec and only
    // calls setrlimit, which is async-signal-safe, on a local.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(resource, &lim) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Waits up to `timeout` for `child` to exit; its status, or None if it
/// is still running.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// For a test that runs rcufs as another user: a temporary directory that
/// user can reach (0755) holding `src` and `mnt`; None (said loudly) when
/// this process is not root and so cannot switch users.
pub fn dirs_for_another_user() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: switching to another user needs root");
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    Some((tmp, src, mnt))
}

/// Waits for the daemon-side warm to finish (`warm.completed` reaching
/// `n`); returns the stats then.
pub fn wait_warm(m: &Mount, n: u64) -> Value {
    let mut last = Value::Null;
    let done = eventually(Duration::from_secs(30), || {
        last = m.stats();
        last["warm"]["completed"].as_u64() == Some(n) && last["warm"]["running"].as_u64() == Some(0)
    });
    assert!(done, "the warm did not finish: {last}\n{}", m.log_text());
    last
}

/// Unmounts (lazily) a filesystem a test mounted, when dropped.
pub struct Submount(pub std::path::PathBuf);

impl Submount {
    /// Mounts a tmpfs on `dir` (inside a mount's source), unmounted when
    /// dropped.
    pub fn tmpfs(dir: &std::path::Path) -> Self {
        let (what, c) = (std::ffi::CString::new("tmpfs").unwrap(), crate::sys::cpath(dir));
        // SAFETY: all strings are NUL-terminated; no data argument.
        let rc = unsafe { libc::mount(what.as_ptr(), c.as_ptr(), what.as_ptr(), 0, std::ptr::null()) };
        assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        Self(dir.to_path_buf())
    }

    /// Binds the directory `from` on `dir`, unmounted when dropped.
    pub fn bind(from: &std::path::Path, dir: &std::path::Path) -> Self {
        let (f, c) = (crate::sys::cpath(from), crate::sys::cpath(dir));
        // SAFETY: the paths are NUL-terminated; no type or data.
        let rc = unsafe {
            libc::mount(
                f.as_ptr(),
                c.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "mount --bind: {}", std::io::Error::last_os_error());
        Self(dir.to_path_buf())
    }
}

impl Submount {
    /// Makes the mount on this directory private: nothing mounted under it
    /// propagates, and a mount under it can be moved (`move_to`).
    pub fn make_private(&self) {
        let c = crate::sys::cpath(&self.0);
        // SAFETY: the path is NUL-terminated; no source, type or data.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                c.as_ptr(),
                std::ptr::null(),
                libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "mount --make-private: {}", std::io::Error::last_os_error());
    }

    /// Moves the mount to `dir` (`mount --move`), which then unmounts it
    /// when dropped.
    pub fn move_to(&mut self, dir: &std::path::Path) {
        let (f, c) = (crate::sys::cpath(&self.0), crate::sys::cpath(dir));
        // SAFETY: the paths are NUL-terminated; no type or data.
        let rc = unsafe {
            libc::mount(
                f.as_ptr(),
                c.as_ptr(),
                std::ptr::null(),
                libc::MS_MOVE,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "mount --move: {}", std::io::Error::last_os_error());
        self.0 = dir.to_path_buf();
    }
}

impl Drop for Submount {
    fn drop(&mut self) {
        let c = crate::sys::cpath(&self.0);
        // SAFETY: the path is NUL-terminated.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The fusectl directory of the FUSE connection behind `mnt`
/// (`/sys/fs/fuse/connections/<minor>`: `waiting`, `abort`), with fusectl
/// mounted first unless it is there already.
pub fn fuse_connection(mnt: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let conns = Path::new("/sys/fs/fuse/connections");
    if any_mount_at(conns).is_none() {
        let status = Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(conns)
            .status()
            .expect("run mount -t fusectl");
        assert!(status.success(), "mounting fusectl failed: {status}");
    }
    let dev = std::fs::metadata(mnt).unwrap().dev();
    conns.join(libc::minor(dev).to_string())
}
