//! Whose identity the daemon acts with: every test mounts with
//! `-o allow_other` and drives the mount as uid/gid 65534 ("nobody") from a
//! child process (a Python script or a plain command), then checks the
//! source. Each test stands for one way in which a daemon acting as root for
//! everybody goes wrong: a create racing with the source, POSIX ACLs,
//! setuid clearing on write, setgid directories, FIFOs met by a create,
//! O_DIRECT, `trusted.*` names, the statistics attribute and the blocks a
//! filesystem reserves for root.
//!
//! Every child runs under a watchdog: it is killed after a deadline and the
//! test fails, so a hung mount fails the test instead of hanging it.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Mount, can_switch_users};
use crate::sys::{self, errno};

const NOBODY: u32 = 65534;

/// Mounts with `-o allow_other` and the given extra arguments.
fn mount(extra: &[&str], setup: impl FnOnce(&Path)) -> Option<Mount> {
    if !can_switch_users() {
        return None;
    }
    let mut args = vec!["-o", "allow_other"];
    args.extend_from_slice(extra);
    Mount::with(&args, setup)
}

/// What a child left behind.
struct Done {
    /// The exit code; `None` when the watchdog had to kill it.
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

/// Waits for `child` at most `timeout`, killing it if it overstays.
fn watch(mut child: Child, timeout: Duration) -> Done {
    let deadline = Instant::now() + timeout;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status.code().unwrap_or(-1));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            // A process blocked on a directory lock behind a hung request
            // cannot die until the mount goes: do not wait for it forever
            // (the harness kills the daemon when the test ends).
            let gone = Instant::now() + Duration::from_secs(2);
            while child.try_wait().unwrap().is_none() && Instant::now() < gone {
                std::thread::sleep(Duration::from_millis(10));
            }
            return Done {
                code: None,
                stdout: String::new(),
                stderr: String::new(),
            };
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |r: Option<&mut dyn std::io::Read>| {
        let mut s = String::new();
        if let Some(r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    };
    let stdout = read(child.stdout.as_mut().map(|r| r as &mut dyn std::io::Read));
    let stderr = read(child.stderr.as_mut().map(|r| r as &mut dyn std::io::Read));
    Done { code, stdout, stderr }
}

/// `program args...` as nobody (no supplementary groups).
fn as_nobody(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).uid(NOBODY).gid(NOBODY).current_dir("/");
    cmd
}

/// A Python script as nobody with `args` as `sys.argv[1:]`.
fn py_cmd(script: &str, args: &[&Path]) -> Command {
    let mut cmd = as_nobody("/usr/bin/python3", &["-c", script]);
    cmd.args(args);
    cmd
}

/// Runs a Python script as nobody and returns what it printed; fails the
/// test if it hangs (20 s) or exits non-zero.
#[track_caller]
fn py(script: &str, args: &[&Path]) -> String {
    let d = watch(spawn(py_cmd(script, args)), Duration::from_secs(20));
    assert_eq!(
        d.code,
        Some(0),
        "the script as nobody failed or hung (None = killed by the watchdog)\nstdout: {}\nstderr: {}",
        d.stdout,
        d.stderr
    );
    d.stdout.trim().to_string()
}

/// `setpriv` arguments for nobody holding `CAP_FSETID` (raised through the
/// ambient set, so the Python it runs has it effective).
const NOBODY_WITH_FSETID: &[&str] = &[
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--inh-caps=+fsetid",
    "--ambient-caps=+fsetid",
];

/// `setpriv` arguments for root without `CAP_FSETID`.
const ROOT_WITHOUT_FSETID: &[&str] = &["--inh-caps=-all", "--bounding-set=-fsetid"];

/// A Python script under `setpriv` with `who`'s identity and capabilities
/// and `args` as `sys.argv[1:]`; fails the test if it hangs (20 s) or exits
/// non-zero.
#[track_caller]
fn py_as(who: &[&str], script: &str, args: &[&OsStr]) {
    let mut cmd = Command::new("/usr/bin/setpriv");
    cmd.args(who)
        .args(["/usr/bin/python3", "-c", script])
        .args(args)
        .current_dir("/");
    let d = watch(spawn(cmd), Duration::from_secs(20));
    assert_eq!(d.code, Some(0), "{args:?}\nstdout: {}\nstderr: {}", d.stdout, d.stderr);
}

/// Writes one byte at offset 0 of `sys.argv[1]`.
const WRITE_A_BYTE: &str =
    "import os, sys\nfd = os.open(sys.argv[1], os.O_WRONLY)\nos.pwrite(fd, b'x', 0)\nos.close(fd)";

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory everybody may create in.
fn public_dir(src: &Path, name: &str) -> PathBuf {
    let d = src.join(name);
    fs::create_dir(&d).unwrap();
    chmod(&d, 0o777);
    d
}

// Point 1: a CREATE without O_EXCL used to open an existing file as root.
#[test]
fn a_create_racing_with_the_source_cannot_open_a_file_the_caller_may_not() {
    for kernel_cache in [false, true] {
        create_race(kernel_cache);
    }
}

/// The arguments for a mount whose caches trust everything for an hour.
fn slow(kernel_cache: bool, more: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec!["--revalidate", "3600"];
    if kernel_cache {
        v.push("--kernel-cache");
    }
    v.extend_from_slice(more);
    v
}

fn create_race(kernel_cache: bool) {
    let Some(m) = mount(&slow(kernel_cache, &[]), |src| {
        public_dir(src, "pub");
    }) else {
        return;
    };
    // The mount learns that the name does not exist (a cached negative entry)...
    assert_eq!(errno(&fs::metadata(m.at("pub/secret"))), Some(libc::ENOENT));
    // ...then root creates it directly in the source, readable by root only.
    let secret = m.src_at("pub/secret");
    fs::write(&secret, b"root's secret").unwrap();
    chmod(&secret, 0o600);
    let out = py(
        r#"
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    print("opened", os.read(fd, 100))
except OSError as e:
    print("errno", e.errno)
"#,
        &[&m.at("pub/secret")],
    );
    assert_eq!(out, format!("errno {}", libc::EACCES), "nobody opened root's 0600 file");
    let st = fs::metadata(&secret).unwrap();
    assert_eq!((st.uid(), st.gid(), st.mode() & 0o7777), (0, 0, 0o600));
    assert_eq!(fs::read(&secret).unwrap(), b"root's secret");
    if !kernel_cache {
        // The name is known now, to everyone. (With --kernel-cache the
        // kernel keeps its own negative entry for up to R.)
        assert_eq!(fs::metadata(m.at("pub/secret")).unwrap().uid(), 0);
    }
    // An exclusive create of an existing name is EEXIST.
    let out = py(
        r#"
import os, sys
try:
    os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    print("created")
except OSError as e:
    print("errno", e.errno)
"#,
        &[&m.at("pub/secret")],
    );
    assert_eq!(out, format!("errno {}", libc::EEXIST));
}

// Objects created by nobody belong to nobody, with the mode asked for
// (umask 0 in the script), whatever their type.
#[test]
fn what_nobody_creates_belongs_to_nobody() {
    let Some(m) = mount(&[], |src| {
        public_dir(src, "pub");
    }) else {
        return;
    };
    let out = py(
        r#"
import os, sys
d = sys.argv[1]
os.umask(0)
os.close(os.open(d + "/file", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
os.mkdir(d + "/dir", 0o750)
os.mkfifo(d + "/fifo", 0o604)
os.symlink("file", d + "/link")
os.link(d + "/file", d + "/hard")
os.rename(d + "/hard", d + "/hard2")
print("ok")
"#,
        &[&m.at("pub")],
    );
    assert_eq!(out, "ok");
    for (name, perm) in [("file", 0o640), ("dir", 0o750), ("fifo", 0o604), ("hard2", 0o640)] {
        let st = fs::metadata(m.src_at(&format!("pub/{name}"))).unwrap();
        assert_eq!(
            (st.uid(), st.gid(), st.mode() & 0o7777),
            (NOBODY, NOBODY, perm),
            "{name}"
        );
    }
    let l = fs::symlink_metadata(m.src_at("pub/link")).unwrap();
    assert_eq!((l.uid(), l.gid()), (NOBODY, NOBODY));
    // Nobody may not remove root's file from a sticky directory.
    fs::write(m.src_at("pub/roots"), b"r").unwrap();
    chmod(&m.src_at("pub"), 0o1777);
    let out = py(
        r#"
import os, sys
try:
    os.unlink(sys.argv[1])
    print("removed")
except OSError as e:
    print("errno", e.errno)
"#,
        &[&m.at("pub/roots")],
    );
    assert_eq!(out, format!("errno {}", libc::EPERM));
    assert!(m.src_at("pub/roots").exists());
}

const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_GROUP: u16 = 0x08;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;

/// The `system.posix_acl_*` value for `entries` (tag, perm, id), in the
/// kernel's order.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

const NO_ID: u32 = u32::MAX;

// Point 2: an ACL entry that denies nobody was ignored.
#[test]
fn posix_acls_of_the_source_are_enforced() {
    for kernel_cache in [false, true] {
        acl_denies(kernel_cache);
    }
}

fn acl_denies(kernel_cache: bool) {
    let extra: &[&str] = if kernel_cache { &["--kernel-cache"] } else { &[] };
    let Some(m) = mount(extra, |src| {
        let f = src.join("denied");
        fs::write(&f, b"not for nobody").unwrap();
        chmod(&f, 0o644);
        let a = acl(&[
            (ACL_USER_OBJ, 6, NO_ID),
            (ACL_USER, 0, NOBODY),
            (ACL_GROUP_OBJ, 4, NO_ID),
            (ACL_MASK, 4, NO_ID),
            (ACL_OTHER, 4, NO_ID),
        ]);
        sys::setxattr(&f, "system.posix_acl_access", &a, 0).expect("the source must support POSIX ACLs");
    }) else {
        return;
    };
    let script = r#"
import os, sys
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as f:
            print("read", f.read())
    except OSError as e:
        print("errno", e.errno)
"#;
    let out = py(script, &[&m.src_at("denied"), &m.at("denied")]);
    let lines: Vec<&str> = out.lines().collect();
    let eacces = format!("errno {}", libc::EACCES);
    assert_eq!(lines[0], eacces, "the ACL does not deny nobody in the source itself");
    assert_eq!(
        lines[1], eacces,
        "kernel cache {kernel_cache}: nobody read through the mount what the ACL denies"
    );
}

/// `CLOCK_MONOTONIC` in seconds: Python's `time.monotonic()` in the child.
fn monotonic() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The default mode with the watch lends the kernel the attributes of a
/// reply for a millisecond (`fs/watched.rs`, "Attributes lent to the
/// kernel"), and the kernel then trusts the ACL it cached with them. nobody
/// reads a file in a directory that only an ACL entry lets it into, over
/// and over (each walk rebuilds the directory's dentry and reaches its
/// cached inode); the entry is then revoked in the source. The walks must
/// stop within the watcher's delay: its attribute invalidation makes a
/// kernel that cached the ACL read it again. (This machine's kernel asks
/// for the ACL at every walk, so here they stop at once even without the
/// invalidation; the test holds the bound for kernels that keep ACLs.)
#[test]
fn an_acl_revoked_in_the_source_stops_walks_through_the_mount() {
    let grant = |perm: u16| {
        acl(&[
            (ACL_USER_OBJ, 7, NO_ID),
            (ACL_USER, perm, NOBODY),
            (ACL_GROUP_OBJ, 0, NO_ID),
            (ACL_MASK, 7, NO_ID),
            (ACL_OTHER, 0, NO_ID),
        ])
    };
    let Some(m) = mount(&[], |src| {
        let d = src.join("locked");
        fs::create_dir(&d).unwrap();
        chmod(&d, 0o700);
        fs::write(d.join("f"), b"inside").unwrap();
        chmod(&d.join("f"), 0o644);
        sys::setxattr(&d, "system.posix_acl_access", &grant(5), 0).expect("the source must support POSIX ACLs");
    }) else {
        return;
    };
    assert_eq!(m.stats()["coherence"]["mode"], "watch", "{}", m.stats());
    let script = r#"
import sys, time
p, ok, deadline = sys.argv[1], 0, time.monotonic() + 10
while time.monotonic() < deadline:
    try:
        with open(p, "rb") as f:
            f.read()
        ok += 1
        if ok == 300:
            print("ready", flush=True)
    except PermissionError:
        print("refused", ok, time.monotonic(), flush=True)
        sys.exit(0)
print("never refused", ok, flush=True)
sys.exit(1)
"#;
    let mut child = spawn(py_cmd(script, &[&m.at("locked/f")]));
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready", "nobody could not read through the ACL's grant");
    sys::setxattr(&m.src_at("locked"), "system.posix_acl_access", &grant(0), 0).unwrap();
    let revoked = monotonic();
    let done = watch(child, Duration::from_secs(20));
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(done.code, Some(0), "{line} (stderr: {})", done.stderr);
    let refused_at: f64 = line
        .split_whitespace()
        .nth(2)
        .and_then(|t| t.parse().ok())
        .expect(&line);
    let late = refused_at - revoked;
    assert!(
        late < 2.0,
        "nobody still walked through the directory {late:.3} s after the ACL was revoked ({line})"
    );
}

// New files in a directory with a default ACL get what a local process gets
// (the umask is ignored there), and the umask applies elsewhere.
#[test]
fn default_acls_and_the_umask_give_what_a_local_create_gives() {
    let Some(m) = mount(&[], |src| {
        for d in ["dacl", "plain"] {
            let p = public_dir(src, d);
            std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let a = acl(&[
            (ACL_USER_OBJ, 7, NO_ID),
            (ACL_GROUP_OBJ, 5, NO_ID),
            (ACL_GROUP, 7, 4242),
            (ACL_MASK, 7, NO_ID),
            (ACL_OTHER, 0, NO_ID),
        ]);
        sys::setxattr(&src.join("dacl"), "system.posix_acl_default", &a, 0).unwrap();
    }) else {
        return;
    };
    let script = r#"
import os, sys
os.umask(0o027)
for d in sys.argv[1:]:
    os.close(os.open(d + "/f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    os.mkdir(d + "/sub", 0o777)
    os.mkfifo(d + "/p", 0o666)
print("ok")
"#;
    for dir in ["dacl", "plain"] {
        let local = m.src_at(&format!("{dir}/local"));
        let via = m.src_at(&format!("{dir}/via"));
        fs::create_dir(&local).unwrap();
        fs::create_dir(&via).unwrap();
        for p in [&local, &via] {
            std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
            chmod(p, 0o777);
            // The subdirectories inherit the default ACL as a local mkdir would.
            if dir == "dacl" {
                let a = sys::getxattr(&m.src_at(dir), "system.posix_acl_default").unwrap();
                sys::setxattr(p, "system.posix_acl_default", &a, 0).unwrap();
            }
        }
        assert_eq!(py(script, &[&local, &m.at(&format!("{dir}/via"))]), "ok");
        for name in ["f", "sub", "p"] {
            let (l, v) = (local.join(name), via.join(name));
            assert_eq!(
                mode(&v),
                mode(&l),
                "{dir}/{name}: through the mount {:o}, locally {:o}",
                mode(&v),
                mode(&l)
            );
            let acl_of = |p: &Path| sys::getxattr(p, "system.posix_acl_access").ok();
            assert_eq!(acl_of(&v), acl_of(&l), "{dir}/{name}: access ACL");
        }
    }
    // The umask mattered (0666 & ~027) where no default ACL applies.
    assert_eq!(mode(&m.src_at("plain/via/f")), 0o640);
}

// Point 3: a write by a non-owner clears setuid and setgid, in both modes.
/// A tmpfs mounted on a directory with `flags`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount_on(dir: &Path, flags: libc::c_ulong) -> Self {
        let (what, at) = (std::ffi::CString::new("tmpfs").unwrap(), sys::cpath(dir));
        // SAFETY: all strings are NUL-terminated; no data argument.
        let rc = unsafe { libc::mount(what.as_ptr(), at.as_ptr(), what.as_ptr(), flags, std::ptr::null()) };
        assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        Self(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let c = sys::cpath(&self.0);
        // SAFETY: the path is NUL-terminated.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A source on a `noexec` mount: the mirror is `noexec` too, so that it is
/// no way to run what may only be read there.
#[test]
fn a_source_on_a_noexec_mount_gives_a_noexec_mirror() {
    let mut tmpfs = None;
    let Some(m) = mount(&[], |src| {
        tmpfs = Some(Tmpfs::mount_on(src, libc::MS_NOEXEC));
        fs::write(src.join("run"), b"#!/bin/sh\necho ran\n").unwrap();
        chmod(&src.join("run"), 0o755);
    }) else {
        return;
    };
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    let mnt = m.mnt.to_string_lossy().into_owned();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(mnt.as_str()))
        .unwrap_or_else(|| panic!("{mnt} not in /proc/self/mounts"));
    assert!(
        line.split(' ').nth(3).unwrap().split(',').any(|o| o == "noexec"),
        "{line}"
    );
    match as_nobody(m.at("run").to_str().unwrap(), &[]).output() {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}"),
        Ok(out) => panic!(
            "ran through the mirror of a noexec source: {}",
            String::from_utf8_lossy(&out.stdout)
        ),
    }
    drop(m);
    drop(tmpfs);
}

/// A `noexec` filesystem mounted under the source of a mirror that is not
/// `noexec`: not entered (its policy would not hold through the mirror),
/// while a filesystem as strict as the mirror beside it is served.
#[test]
fn a_noexec_filesystem_under_the_source_is_not_entered() {
    let mut mounts = Vec::new();
    let Some(m) = mount(&[], |src| {
        for (name, flags) in [("upload", libc::MS_NOEXEC), ("data", 0)] {
            let dir = src.join(name);
            fs::create_dir(&dir).unwrap();
            mounts.push(Tmpfs::mount_on(&dir, flags));
            fs::write(dir.join("run"), b"#!/bin/sh\necho ran\n").unwrap();
            chmod(&dir.join("run"), 0o755);
        }
    }) else {
        return;
    };
    match as_nobody(m.at("upload/run").to_str().unwrap(), &[]).output() {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}"),
        Ok(out) => panic!(
            "ran through the mirror from a noexec filesystem under the source: {}",
            String::from_utf8_lossy(&out.stdout)
        ),
    }
    let err = fs::metadata(m.at("upload")).expect_err("the noexec mount point is not entered");
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    let names: Vec<_> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().any(|n| n == "upload"), "still listed: {names:?}");
    let out = as_nobody(m.at("data/run").to_str().unwrap(), &[])
        .output()
        .expect("a filesystem as strict as the mirror runs what it holds");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    drop(m);
    drop(mounts);
}

/// A small ext4 filesystem (half its blocks reserved for root) mounted on
/// a directory, unmounted on drop.
struct Ext4(PathBuf);

impl Ext4 {
    fn mount_on(dir: &Path) -> Self {
        let img = dir.with_extension("img");
        let f = fs::File::create(&img).unwrap();
        f.set_len(16 << 20).unwrap();
        drop(f);
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "50", "-b", "4096"])
            .arg(&img)
            .output()
            .expect("mkfs.ext4 (Debian's e2fsprogs)");
        assert!(
            mkfs.status.success(),
            "mkfs.ext4: {}",
            String::from_utf8_lossy(&mkfs.stderr)
        );
        let mount = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(dir)
            .output()
            .expect("mount");
        assert!(
            mount.status.success(),
            "mount -o loop: {}",
            String::from_utf8_lossy(&mount.stderr)
        );
        chmod(dir, 0o777);
        Self(dir.to_path_buf())
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        // The loop device is detached with the mount (`mount -o loop` sets
        // autoclear).
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// How many bytes nobody can write to a new file `path` before the
/// filesystem refuses (ENOSPC or EDQUOT).
fn bytes_nobody_can_write(path: &Path) -> u64 {
    py(
        r#"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
chunk, total = b"x" * 65536, 0
try:
    while True:
        total += os.write(fd, chunk)
except OSError as e:
    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
        raise
os.close(fd)
print(total)
"#,
        &[path],
    )
    .parse()
    .expect("a byte count")
}

/// The daemon runs as root, and a write runs as the daemon: it must not
/// let a user's writes into the blocks the source's filesystem reserves
/// for root (nor past disk quotas, which the same capability overrides).
/// There a write takes the writer's filesystem uid, which drops
/// `CAP_FSETID`: a writer holding it must still keep setuid and setgid.
#[test]
fn another_users_writes_stop_where_the_filesystem_stops_theirs() {
    let mut ext4 = None;
    let Some(m) = mount(&[], |src| {
        ext4 = Some(Ext4::mount_on(src));
        for f in [src.join("s"), src.join("s.native")] {
            fs::write(&f, b"#!/bin/sh\n").unwrap();
            chmod(&f, 0o6777);
        }
    }) else {
        return;
    };
    let native = bytes_nobody_can_write(&m.src_at("native"));
    fs::remove_file(m.src_at("native")).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let through = bytes_nobody_can_write(&m.at("through"));
    assert!(native > 1 << 20, "nobody could write only {native} bytes natively");
    assert!(
        through <= native + (1 << 20),
        "through the mount nobody wrote {through} bytes, natively {native}: the daemon's capability let the \
         writes into the blocks reserved for root"
    );
    // Full to the reserve now: nobody holding CAP_FSETID overwrites a byte
    // (kept only where the kernel marks writes without it, Linux 5.11).
    if !kernel_at_least(5, 11) {
        eprintln!("SKIPPED (the CAP_FSETID part): needs Linux 5.11 (FUSE_HANDLE_KILLPRIV_V2)");
        return;
    }
    for f in [m.src_at("s.native"), m.at("s")] {
        py_as(NOBODY_WITH_FSETID, WRITE_A_BYTE, &[f.as_os_str()]);
    }
    assert_eq!(mode(&m.src_at("s.native")), 0o6777, "the kernel's rule changed");
    assert_eq!(
        mode(&m.src_at("s")),
        0o6777,
        "near the reserve, a write by nobody holding CAP_FSETID cleared the bits through the mount"
    );
    drop(m);
    drop(ext4);
}

/// Setuid is cleared by any write of a writer without `CAP_FSETID`;
/// setgid with group execute too, and since Linux 6.2 setgid without it
/// when the writer is not in the file's group (`setattr_should_drop_sgid`).
/// Each case is run natively on a twin of the file in the source first,
/// and the mount must leave the same bits; the test then also checks the
/// rule itself, as Linux 6.2 and later apply it.
#[test]
fn a_write_by_another_user_clears_setuid_and_setgid() {
    // (name, mode, group): "g" is in a group nobody is not in, "h" in
    // nobody's own.
    let files: [(&str, u32, u32); 5] = [
        ("w", 0o6777, 0),
        ("t", 0o6777, 0),
        ("r", 0o6777, 0),
        ("g", 0o2666, 0),
        ("h", 0o2666, 65534),
    ];
    for extra in [&[][..], &["--kernel-cache"]] {
        let Some(m) = mount(extra, |src| {
            for (name, mode, gid) in files {
                for f in [src.join(name), src.join(format!("{name}.native"))] {
                    fs::write(&f, b"#!/bin/sh\n").unwrap();
                    std::os::unix::fs::chown(&f, Some(0), Some(gid)).unwrap();
                    chmod(&f, mode);
                }
            }
        }) else {
            return;
        };
        let script = r#"
import os, sys
w, t, g, h = sys.argv[1:5]
for f in (w, g, h):
    fd = os.open(f, os.O_WRONLY)
    os.pwrite(fd, b"x", 0)
    os.close(fd)
os.truncate(t, 1)
print("ok")
"#;
        let native = ["w", "t", "g", "h"].map(|n| m.src_at(&format!("{n}.native")));
        assert_eq!(py(script, &native.each_ref().map(|p| p.as_path())), "ok");
        let through = ["w", "t", "g", "h"].map(|n| m.at(n));
        assert_eq!(py(script, &through.each_ref().map(|p| p.as_path())), "ok");
        for name in ["w", "t", "g", "h"] {
            assert_eq!(
                mode(&m.src_at(name)),
                mode(&m.src_at(&format!("{name}.native"))),
                "{extra:?}: {name}: a write or truncate by nobody through the mount left other bits than natively"
            );
        }
        // What the kernel's rule says today, so that the comparison above
        // is known to cover a clearing and a keeping of each bit.
        assert_eq!(mode(&m.src_at("w")), 0o777, "{extra:?}");
        assert_eq!(mode(&m.src_at("t")), 0o777, "{extra:?}");
        assert_eq!(fs::read(m.src_at("w")).unwrap(), b"x!/bin/sh\n");
        assert_eq!(fs::metadata(m.src_at("t")).unwrap().len(), 1);
        if kernel_at_least(6, 2) {
            assert_eq!(
                mode(&m.src_at("g")),
                0o666,
                "{extra:?}: setgid kept for a writer outside the group"
            );
        }
        assert_eq!(
            mode(&m.src_at("h")),
            0o2666,
            "{extra:?}: setgid cleared for a writer in the group"
        );
        // Root (with CAP_FSETID) keeps them, as it would locally.
        let f = fs::OpenOptions::new().write(true).open(m.at("r")).unwrap();
        std::os::unix::fs::FileExt::write_at(&f, b"y", 0).unwrap();
        drop(f);
        assert_eq!(
            mode(&m.src_at("r")),
            0o6777,
            "{extra:?}: a write by root cleared the bits"
        );
    }
}

/// A writer other than root that holds `CAP_FSETID` keeps setuid and
/// setgid, as it would locally: the kernel marks its writes as not clearing
/// them (no `FUSE_WRITE_KILL_SUIDGID`). Before, any write by another user
/// than root ran as that user, which gives the capability up, and the bits
/// went. Run natively on a twin first, as above.
#[test]
fn a_write_by_another_user_holding_cap_fsetid_keeps_setuid_and_setgid() {
    if !kernel_at_least(5, 11) {
        eprintln!("SKIPPED: the kernel marks writes without CAP_FSETID only from Linux 5.11 (FUSE_HANDLE_KILLPRIV_V2)");
        return;
    }
    for extra in [&[][..], &["--kernel-cache"]] {
        let Some(m) = mount(extra, |src| {
            for f in [src.join("c"), src.join("c.native")] {
                fs::write(&f, b"#!/bin/sh\n").unwrap();
                chmod(&f, 0o6777);
            }
        }) else {
            return;
        };
        py_as(NOBODY_WITH_FSETID, WRITE_A_BYTE, &[m.src_at("c.native").as_os_str()]);
        py_as(NOBODY_WITH_FSETID, WRITE_A_BYTE, &[m.at("c").as_os_str()]);
        assert_eq!(mode(&m.src_at("c.native")), 0o6777, "the kernel's rule changed");
        assert_eq!(
            mode(&m.src_at("c")),
            0o6777,
            "{extra:?}: a write by nobody holding CAP_FSETID cleared the bits through the mount"
        );
        assert_eq!(fs::read(m.src_at("c")).unwrap(), b"x!/bin/sh\n");
    }
}

/// FALLOCATE and COPY_FILE_RANGE change a file's contents without a kill
/// flag from the kernel: setuid and setgid go by the caller's `CAP_FSETID`,
/// as locally. Nobody holding it keeps them; root without it loses them
/// (before, both ran with their identity as it was, which gave nobody's
/// capability up and kept root's). Each case runs natively on a twin first.
#[test]
fn fallocate_and_copy_file_range_clear_setuid_by_the_callers_cap_fsetid() {
    let script = r#"
import os, sys
op, f, src = sys.argv[1:4]
fd = os.open(f, os.O_WRONLY)
if op == "fallocate":
    os.posix_fallocate(fd, 0, 8192)
else:
    s = os.open(src, os.O_RDONLY)
    assert os.copy_file_range(s, fd, 4, 0, 0) == 4
    os.close(s)
os.close(fd)
print("ok")
"#;
    // (file, operation, who, the mode after)
    let cases: [(&str, &str, &[&str], u32); 4] = [
        ("nf", "fallocate", NOBODY_WITH_FSETID, 0o6777),
        ("nc", "copy", NOBODY_WITH_FSETID, 0o6777),
        ("rf", "fallocate", ROOT_WITHOUT_FSETID, 0o777),
        ("rc", "copy", ROOT_WITHOUT_FSETID, 0o777),
    ];
    for extra in [&[][..], &["--kernel-cache"]] {
        let Some(m) = mount(extra, |src| {
            fs::write(src.join("from"), b"data").unwrap();
            chmod(&src.join("from"), 0o644);
            for (name, ..) in cases {
                for f in [src.join(name), src.join(format!("{name}.native"))] {
                    fs::write(&f, b"#!/bin/sh\n").unwrap();
                    chmod(&f, 0o6777);
                }
            }
        }) else {
            return;
        };
        let run = |who: &[&str], op: &str, f: &Path, from: &Path| {
            py_as(who, script, &[op.as_ref(), f.as_os_str(), from.as_os_str()]);
        };
        for (name, op, who, expected) in cases {
            run(who, op, &m.src_at(&format!("{name}.native")), &m.src_at("from"));
            run(who, op, &m.at(name), &m.at("from"));
            assert_eq!(
                mode(&m.src_at(&format!("{name}.native"))),
                expected,
                "{name}: the kernel's rule is not what this test expects"
            );
            assert_eq!(
                mode(&m.src_at(name)),
                expected,
                "{extra:?}: {op} through the mount left other bits than natively"
            );
        }
    }
}

// Point 4: new objects in a setgid directory take the directory's group.
#[test]
fn new_objects_in_a_setgid_directory_take_its_group() {
    let Some(m) = mount(&[], |src| {
        let d = public_dir(src, "sg");
        std::os::unix::fs::chown(&d, Some(0), Some(4242)).unwrap();
        chmod(&d, 0o2777);
    }) else {
        return;
    };
    let out = py(
        r#"
import os, sys
d = sys.argv[1]
os.close(os.open(d + "/file", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
os.mkdir(d + "/dir", 0o755)
os.mkfifo(d + "/fifo", 0o644)
os.symlink("file", d + "/link")
print("ok")
"#,
        &[&m.at("sg")],
    );
    assert_eq!(out, "ok");
    for name in ["file", "dir", "fifo", "link"] {
        let st = fs::symlink_metadata(m.src_at(&format!("sg/{name}"))).unwrap();
        assert_eq!((st.uid(), st.gid()), (NOBODY, 4242), "sg/{name}");
    }
    assert_ne!(
        mode(&m.src_at("sg/dir")) & 0o2000,
        0,
        "the new directory must be setgid too"
    );
    assert_eq!(fs::metadata(m.at("sg/file")).unwrap().gid(), 4242);
}

// Point 6: an O_CREAT open of a name that became a FIFO in the source must
// not block a daemon worker.
#[test]
fn a_create_meeting_a_fifo_does_not_block_the_daemon() {
    for kernel_cache in [false, true] {
        create_meets_fifo(kernel_cache);
    }
}

fn create_meets_fifo(kernel_cache: bool) {
    let Some(m) = mount(&slow(kernel_cache, &["--threads", "2"]), |src| {
        public_dir(src, "pub");
        fs::write(src.join("file"), b"still served").unwrap();
    }) else {
        return;
    };
    assert_eq!(errno(&fs::metadata(m.at("pub/fifo"))), Some(libc::ENOENT));
    sys::mkfifo(&m.src_at("pub/fifo"), 0o666).unwrap();
    chmod(&m.src_at("pub/fifo"), 0o666);
    // Two readers open with O_CREAT, as a local process would block until a
    // writer comes (the FIFO semantics); they must not block the daemon.
    let reader = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o644)
print("data", os.read(fd, 100))
"#;
    let readers: Vec<Child> = (0..2).map(|_| spawn(py_cmd(reader, &[&m.at("pub/fifo")]))).collect();
    std::thread::sleep(Duration::from_millis(1500));
    // The mount answers everybody meanwhile.
    let stat = watch(
        spawn(as_nobody("/bin/cat", &[m.at("file").to_str().unwrap()])),
        Duration::from_secs(5),
    );
    let responsive = stat.code == Some(0) && stat.stdout == "still served";
    // A writer through the mount meets the readers.
    let writer = watch(
        spawn(py_cmd(
            r#"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
os.write(fd, b"hello")
os.close(fd)
print("wrote")
"#,
            &[&m.at("pub/fifo")],
        )),
        Duration::from_secs(5),
    );
    let done: Vec<Done> = readers.into_iter().map(|r| watch(r, Duration::from_secs(10))).collect();
    assert!(
        responsive,
        "the mount stopped answering while two creates met a FIFO: {:?} {} {}",
        stat.code, stat.stdout, stat.stderr
    );
    assert_eq!(
        (writer.code, writer.stdout.trim()),
        (Some(0), "wrote"),
        "writer: {}",
        writer.stderr
    );
    for (i, d) in done.iter().enumerate() {
        assert!(d.code.is_some(), "reader {i} was still blocked after 10 s");
        assert_eq!(d.code, Some(0), "reader {i}: {}", d.stderr);
    }
    let got: String = done.iter().map(|d| d.stdout.trim()).collect();
    assert!(got.contains("hello"), "no reader got the data: {got}");
    // The source's FIFO was never turned into anything else.
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &fs::symlink_metadata(m.src_at("pub/fifo")).unwrap().file_type()
    ));
}

// Point 8: O_DIRECT reads and writes work through the mount.
#[test]
fn o_direct_reads_and_writes_work() {
    for extra in [&[][..], &["--kernel-cache"]] {
        let Some(m) = mount(extra, |src| {
            public_dir(src, "pub");
            fs::write(src.join("pub/in"), crate::harness::content(3, 1 << 20)).unwrap();
        }) else {
            return;
        };
        let (input, output) = (m.at("pub/in"), m.at("pub/out"));
        let dd = |args: &[String]| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            watch(spawn(as_nobody("/usr/bin/dd", &args)), Duration::from_secs(20))
        };
        let r = dd(&[
            format!("if={}", input.display()),
            "of=/dev/null".into(),
            "bs=64k".into(),
            "iflag=direct".into(),
        ]);
        assert_eq!(r.code, Some(0), "{extra:?} dd iflag=direct: {}", r.stderr);
        let w = dd(&[
            format!("if={}", input.display()),
            format!("of={}", output.display()),
            "bs=64k".into(),
            "oflag=direct".into(),
        ]);
        assert_eq!(w.code, Some(0), "{extra:?} dd oflag=direct: {}", w.stderr);
        assert_eq!(
            fs::read(m.src_at("pub/out")).unwrap(),
            fs::read(m.src_at("pub/in")).unwrap(),
            "{extra:?}"
        );
    }
}

// Point 9: `trusted.*` names are listed only to CAP_SYS_ADMIN callers.
#[test]
fn trusted_xattrs_are_not_listed_to_unprivileged_callers() {
    let Some(m) = mount(&[], |src| {
        let f = src.join("f");
        fs::write(&f, b"x").unwrap();
        sys::setxattr(&f, "trusted.secret", b"1", 0).unwrap();
        sys::setxattr(&f, "user.visible", b"1", 0).unwrap();
    }) else {
        return;
    };
    let as_root = sys::listxattr(&m.at("f")).unwrap();
    assert!(as_root.iter().any(|n| n == "trusted.secret"), "{as_root:?}");
    let script = r#"
import os, sys
for p in sys.argv[1:]:
    print(",".join(sorted(os.listxattr(p))))
"#;
    let out = py(script, &[&m.src_at("f"), &m.at("f")]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "user.visible", "the source itself lists for nobody");
    assert_eq!(
        lines[1], lines[0],
        "the mount lists for nobody what the source would not"
    );
}

// The statistics are for root and the mount's owner only.
#[test]
fn the_stats_attribute_is_refused_to_other_users() {
    let Some(m) = mount(&[], |_| {}) else {
        return;
    };
    let out = py(
        r#"
import os, sys
try:
    os.getxattr(sys.argv[1], "user.rcufs.stats")
    print("read")
except OSError as e:
    print("errno", e.errno)
"#,
        &[&m.mnt],
    );
    assert_eq!(out, format!("errno {}", libc::EACCES));
    // Root still reads them.
    assert!(m.stats()["inodes"]["known"].is_u64());
}

// The caller's supplementary groups (read by the daemon from /proc) count
// in the source's checks: a directory open to group 4242 only, and a chgrp
// to a group the caller is in.
#[test]
fn the_callers_supplementary_groups_count() {
    let Some(m) = mount(&[], |src| {
        let team = src.join("team");
        fs::create_dir(&team).unwrap();
        std::os::unix::fs::chown(&team, Some(0), Some(4242)).unwrap();
        chmod(&team, 0o770);
        public_dir(src, "pub");
    }) else {
        return;
    };
    // Python starts as root and becomes nobody with one supplementary group.
    let script = r#"
import os, sys
os.setgroups([4242]); os.setgid(65534); os.setuid(65534)
team, mine = sys.argv[1], sys.argv[2]
os.close(os.open(team + "/f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
os.mkdir(team + "/d", 0o750)
os.close(os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
os.chown(mine, -1, 4242)
print("ok")
"#;
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args(["-c", script])
        .arg(m.at("team"))
        .arg(m.at("pub/mine"))
        .current_dir("/");
    let d = watch(spawn(cmd), Duration::from_secs(20));
    assert_eq!((d.code, d.stdout.trim()), (Some(0), "ok"), "{}", d.stderr);
    for rel in ["team/f", "team/d"] {
        let st = fs::metadata(m.src_at(rel)).unwrap();
        assert_eq!((st.uid(), st.gid()), (NOBODY, NOBODY), "{rel}");
    }
    assert_eq!(fs::metadata(m.src_at("pub/mine")).unwrap().gid(), 4242);
    // Without the group, the directory is closed.
    let out = py(
        r#"
import os, sys
try:
    os.close(os.open(sys.argv[1] + "/g", os.O_WRONLY | os.O_CREAT, 0o640))
    print("created")
except OSError as e:
    print("errno", e.errno)
"#,
        &[&m.at("team")],
    );
    assert_eq!(out, format!("errno {}", libc::EACCES));
}

// Shared descriptors (one per inode and mode) must not let a second caller
// skip the source's permission check: here root holds a file open, the file
// becomes root-only in the source, and nobody opens it within the kernel's
// attribute timeout (so the kernel's own check, on stale attributes, lets the
// open through to the daemon). The daemon re-checks the access as nobody
// before reusing root's descriptor.
#[test]
fn a_shared_descriptor_is_not_reused_for_a_caller_the_source_refuses() {
    let Some(m) = mount(&slow(true, &[]), |src| {
        public_dir(src, "pub");
        fs::write(src.join("pub/f"), b"was public").unwrap();
        chmod(&src.join("pub/f"), 0o644);
    }) else {
        return;
    };
    let held = fs::File::open(m.at("pub/f")).unwrap();
    // The kernel caches the 0644 attributes for an hour (--revalidate 3600).
    assert_eq!(mode(&m.at("pub/f")), 0o644);
    chmod(&m.src_at("pub/f"), 0o600);
    let out = py(
        r#"
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    print("opened", os.read(fd, 100))
except OSError as e:
    print("errno", e.errno)
"#,
        &[&m.at("pub/f")],
    );
    assert_eq!(
        out,
        format!("errno {}", libc::EACCES),
        "nobody got a descriptor root holds on a file the source refuses to nobody"
    );
    drop(held);
}
