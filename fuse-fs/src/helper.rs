//! The mount(8) helper: `rcufs` started under the name `mount.fuse.rcufs`
//! (or `mount.rcufs`), a symlink to the same binary that
//! `cargo xtask install` puts in `/sbin`.
//!
//! `mount -t fuse.rcufs SOURCE DIR -o OPTS`, and an fstab line of type
//! `fuse.rcufs`, make mount(8) run `/sbin/mount.fuse.rcufs SOURCE DIR
//! [-sfnv] [-N NS] [-o OPTS] [-t TYPE]` (util-linux mount(8), "External
//! helpers"; it strips `noauto`, `x-*`, `comment=` and a few more before).
//! The helper:
//! 1. turns the `-o` list into an `rcufs mount` command line
//!    (`mount_opts.rs`: rcufs keys become flags, `nofail`, `_netdev`,
//!    `defaults`, `user`, ... are dropped, FUSE options stay) and parses it
//!    with the same clap definition, so a bad value fails here, before
//!    anything starts;
//! 2. with `-f` (fake) only checks what `rcufs mount` would check and
//!    returns; `-n` is accepted and has no effect (rcufs keeps no mtab);
//!    `-v` prints what it does; `-s` drops unknown options with a note;
//! 3. opens the log file (`log_file=PATH`, default
//!    `/var/log/rcufs/<escaped mount point>.log`, appended to), and re-executes
//!    its own binary as `rcufs mount ...` in a new session (`setsid`), stdin
//!    from `/dev/null`, stdout and stderr to the log, no other inherited
//!    descriptor. Re-executing rather than forking keeps the daemon's
//!    threads out of the picture: nothing is forked from a multi-threaded
//!    process;
//! 4. waits until the daemon reports `READY=1` over the systemd readiness
//!    protocol (`notify.rs`, on a socket in a fresh mode-0700 directory the
//!    helper made for it, so no other user can report for the daemon),
//!    which it sends only after the kernel mount exists and has answered
//!    INIT; then checks that mountinfo shows the rcufs mount at DIR and exits
//!    0, leaving the daemon running. If the daemon exits first, the helper
//!    prints the daemon's error lines from the log and exits 32 (mount(8)'s
//!    "mount failure"); after 60 s without readiness it stops the daemon
//!    (SIGTERM, then SIGKILL) and fails the same way. Usage errors exit 1.
//!
//! `-N NS` mounts in another mount namespace: the helper enters it
//! (`setns(2)`; NS is a pid or a namespace file such as
//! `/proc/PID/ns/mnt`) before it checks or starts anything, so the daemon
//! and its mount live there.
//!
//! Unmounting is plain `umount DIR`: the daemon sees its session end and
//! exits.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

use crate::cli::{Cli, Command as CliCommand};
use crate::{mount_opts, notify};

/// Where the detached daemons log unless `log_file=` says otherwise.
pub const LOG_DIR: &str = "/var/log/rcufs";

/// How long the helper waits for the daemon to report the mount ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// [`READY_TIMEOUT`], or in debug builds `RCUFS_HELPER_READY_TIMEOUT_SECS`
/// when set (for the test of a daemon that never gets ready).
fn ready_timeout() -> Duration {
    if cfg!(debug_assertions)
        && let Some(secs) = std::env::var("RCUFS_HELPER_READY_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
    {
        return Duration::from_secs(secs);
    }
    READY_TIMEOUT
}

/// mount(8)'s exit code for an incorrect invocation.
const EXIT_USAGE: u8 = 1;
/// mount(8)'s exit code for a failed mount.
const EXIT_FAILURE: u8 = 32;

/// Whether the program was started as a mount helper (`mount.fuse.rcufs`,
/// `mount.rcufs`): its name starts with `mount.`.
pub fn invoked_as_helper(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| n.starts_with("mount."))
}

/// A failure: the exit code and what to print.
struct Fail(u8, String);

fn usage(msg: impl Into<String>) -> Fail {
    Fail(EXIT_USAGE, msg.into())
}

fn failure(msg: impl Into<String>) -> Fail {
    Fail(EXIT_FAILURE, msg.into())
}

/// The helper's command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HelperArgs {
    /// SOURCE (the directory to mirror).
    pub spec: OsString,
    /// The mount point.
    pub dir: OsString,
    /// `-s`: drop unknown options instead of failing.
    pub sloppy: bool,
    /// `-f`: check everything, mount nothing.
    pub fake: bool,
    /// `-n`: do not write /etc/mtab (rcufs never does).
    pub no_mtab: bool,
    /// `-v`: say what happens.
    pub verbose: bool,
    /// `-o` lists, in order.
    pub options: Vec<String>,
    /// `-N`: the mount namespace to mount in.
    pub namespace: Option<String>,
    /// `-t`: the type mount(8) names (`fuse.rcufs`).
    pub fstype: Option<String>,
}

const HELP: &str = "\
usage: mount.fuse.rcufs SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS] [-t fuse.rcufs]

The mount(8) helper of rcufs: mounts SOURCE at MOUNTPOINT with a detached
daemon and returns once the mount is live. OPTIONS are the `rcufs mount`
options as key=value or key (dcache_entries=N, page_cache_size=SIZE,
kernel_cache, revalidate=SECS, threads=N, log_file=PATH, log_format=json, ...)
and the FUSE options (allow_other, ro, default_permissions, ...); defaults,
nofail, _netdev, user, x-* and the like are accepted and ignored. The daemon
logs to log_file (default /var/log/rcufs/<escaped mount point>.log).
-s drops unknown options, -f only checks, -n is accepted, -v is verbose.
";

/// Parses the helper's command line (without the program name).
pub fn parse_args(args: &[OsString]) -> Result<HelperArgs, String> {
    let mut out = HelperArgs::default();
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some(s) = arg.to_str().filter(|s| s.starts_with('-') && s.len() > 1) else {
            positional.push(arg.clone());
            continue;
        };
        if s == "--help" || s == "-h" {
            return Err(String::new());
        }
        for (i, c) in s[1..].char_indices() {
            match c {
                's' => out.sloppy = true,
                'f' => out.fake = true,
                'n' => out.no_mtab = true,
                'v' => out.verbose = true,
                'o' | 't' | 'N' => {
                    // The value is the rest of this word or the next word.
                    let rest = &s[1 + i + 1..];
                    let value = if rest.is_empty() {
                        it.next()
                            .ok_or_else(|| format!("-{c} needs a value"))?
                            .to_str()
                            .ok_or_else(|| format!("the value of -{c} is not UTF-8"))?
                            .to_string()
                    } else {
                        rest.trim_start_matches('=').to_string()
                    };
                    match c {
                        'o' => out.options.push(value),
                        't' => out.fstype = Some(value),
                        _ => out.namespace = Some(value),
                    }
                    break;
                }
                other => return Err(format!("unknown option -{other}")),
            }
        }
    }
    match <[OsString; 2]>::try_from(positional) {
        Ok([spec, dir]) => {
            out.spec = spec;
            out.dir = dir;
            Ok(out)
        }
        Err(p) => Err(format!("expected SOURCE and MOUNTPOINT, got {} arguments", p.len())),
    }
}

/// The helper's entry point: `argv` is the whole command line.
pub fn main(argv: Vec<OsString>) -> ExitCode {
    let name = Path::new(&argv[0])
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "mount.fuse.rcufs".into());
    match run(&argv[1..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            if msg.is_empty() {
                eprint!("{HELP}");
            } else {
                eprintln!("{name}: {msg}");
            }
            ExitCode::from(code)
        }
    }
}

fn run(args: &[OsString]) -> Result<(), Fail> {
    let h = parse_args(args).map_err(usage)?;
    if let Some(ns) = &h.namespace {
        enter_mount_namespace(ns).map_err(failure)?;
    }
    if let Some(t) = &h.fstype
        && t != "fuse.rcufs"
        && t != "rcufs"
    {
        return Err(usage(format!("-t {t}: this helper mounts fuse.rcufs only")));
    }
    let mut argv: Vec<OsString> = vec!["rcufs".into(), "mount".into(), h.spec.clone(), h.dir.clone()];
    for o in &h.options {
        argv.push("-o".into());
        argv.push(o.into());
    }
    let expanded = mount_opts::expand(argv, h.sloppy).map_err(usage)?;
    for d in &expanded.dropped {
        eprintln!("rcufs: ignoring unknown mount option `{d}` (-s)");
    }
    let cli = Cli::try_parse_from(&expanded.args).map_err(|e| {
        // clap's first line says what is wrong; its hint about `--help`
        // does not fit a mount helper.
        let text = e.render().to_string();
        let first = text
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_string();
        match expanded.origin_note(&first) {
            Some(note) => usage(format!("{first} {note}")),
            None => usage(first),
        }
    })?;
    let CliCommand::Mount(args) = cli.command else {
        unreachable!("the expanded command line is a mount")
    };
    let log = args
        .log_file
        .clone()
        .unwrap_or_else(|| default_log_path(Path::new(&h.dir)));
    let opts = crate::mount_options(&args);
    if h.verbose {
        eprintln!(
            "rcufs: mounting {} on {} (log: {})",
            opts.source.display(),
            opts.mountpoint.display(),
            log.display()
        );
    }
    if h.fake {
        fuse_fs::validate(&opts).map_err(|e| failure(format!("{e:#}")))?;
        if h.verbose {
            eprintln!("rcufs: -f: the checks passed; nothing mounted");
        }
        return Ok(());
    }
    let pid = spawn_and_wait(&expanded.args[2..], &log, &opts.mountpoint)?;
    if h.verbose {
        eprintln!("rcufs: mounted; the daemon is pid {pid}");
    }
    Ok(())
}

/// Starts the daemon (`rcufs mount ARGS`) detached, logging to `log`, and
/// waits until it reports the mount at `mountpoint` ready. Returns its pid.
fn spawn_and_wait(mount_args: &[OsString], log: &Path, mountpoint: &Path) -> Result<u32, Fail> {
    let file = open_log(log).map_err(failure)?;
    let start_len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let exe = std::env::current_exe().map_err(|e| failure(format!("finding the rcufs binary: {e}")))?;
    let ready = ReadySocket::new().map_err(|e| failure(format!("creating the readiness socket: {e}")))?;
    let mut cmd = Command::new(&exe);
    cmd.arg0("rcufs")
        .arg("mount")
        .args(mount_args)
        .env(notify::NOTIFY_SOCKET, &ready.path)
        .stdin(Stdio::null())
        .stdout(file.try_clone().map_err(|e| failure(format!("log file: {e}")))?)
        .stderr(file);
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes two system calls, both async-signal-safe and touching no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // Descriptors mount(8)'s caller leaked to us without
            // close-on-exec (a pipe a script reads our output from) must
            // not live on in the daemon: it would hold them for its whole
            // life. Marking them close-on-exec (rather than closing them)
            // keeps std's own exec-error pipe working. A kernel without
            // close_range (before 5.11) just keeps them.
            let _ = libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| failure(format!("starting {}: {e}", exe.display())))?;
    let timeout = ready_timeout();
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    loop {
        match ready.sock.recv(&mut buf) {
            Ok(n) if String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "READY=1") => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(failure(format!("readiness socket: {e}"))),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(failure(format!(
                "{}(the daemon exited with {status} before the mount was ready; log: {})",
                daemon_errors(log, start_len),
                log.display()
            )));
        }
        if Instant::now() > deadline {
            stop(&mut child);
            return Err(failure(format!(
                "{}(the daemon did not report the mount ready within {} s and was stopped; log: {})",
                daemon_errors(log, start_len),
                timeout.as_secs(),
                log.display()
            )));
        }
    }
    let canon = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let mounted = fuse_fs::mountinfo::mounts()
        .map(|ms| {
            ms.iter()
                .any(|m| fuse_fs::mountinfo::is_rcufs(m) && m.mount_point == canon)
        })
        .unwrap_or(false);
    if !mounted {
        stop(&mut child);
        return Err(failure(format!(
            "the daemon reported ready but mountinfo shows no rcufs mount at {}; it was stopped (log: {})",
            canon.display(),
            log.display()
        )));
    }
    // The daemon keeps running in its own session; dropping `child` neither
    // kills nor waits for it.
    Ok(child.id())
}

/// The socket the daemon reports readiness on: `notify` in a fresh
/// directory of mode 0700 (so that only the helper's user can send to it),
/// both removed on drop.
struct ReadySocket {
    dir: PathBuf,
    path: PathBuf,
    sock: UnixDatagram,
}

impl ReadySocket {
    fn new() -> std::io::Result<ReadySocket> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("rcufs-mount-{}-{nanos}", std::process::id()));
        // Fails if the name exists: the directory is ours and empty.
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("notify");
        let sock = match UnixDatagram::bind(&path) {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        let r = ReadySocket { dir, path, sock };
        r.sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        Ok(r)
    }
}

impl Drop for ReadySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Stops a daemon that failed to come up: SIGTERM (it unmounts what it
/// mounted), then SIGKILL if it is still there after 5 s.
fn stop(child: &mut std::process::Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill touches no memory; the pid is our unreaped child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Enters the mount namespace `ns` names: a pid (its `/proc/PID/ns/mnt`)
/// or a namespace file.
fn enter_mount_namespace(ns: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let path = if !ns.is_empty() && ns.bytes().all(|b| b.is_ascii_digit()) {
        format!("/proc/{ns}/ns/mnt")
    } else {
        ns.to_string()
    };
    let f = File::open(&path).map_err(|e| format!("-N {ns}: opening {path}: {e}"))?;
    // SAFETY: setns takes a descriptor we own and a flag; the helper has not
    // started any thread, as entering a mount namespace requires.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNS) } == -1 {
        return Err(format!(
            "-N {ns}: entering the mount namespace {path}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Opens (creating it and its directory if needed) the log file for appending.
fn open_log(log: &Path) -> Result<File, String> {
    if let Some(dir) = log.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating the log directory {}: {e}", dir.display()))?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(log)
        .map_err(|e| format!("opening the log file {}: {e}", log.display()))
}

/// The error lines the daemon wrote to `log` after byte `from` (all its
/// lines, at most the last 20, when none says "error"), each ending in a
/// newline.
fn daemon_errors(log: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(log)
        && f.seek(SeekFrom::Start(from)).is_ok()
    {
        let _ = f.take(1 << 20).read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.to_ascii_lowercase().contains("error"))
        .collect();
    let chosen = if errors.is_empty() {
        &lines[lines.len().saturating_sub(20)..]
    } else {
        &errors[..]
    };
    chosen.iter().map(|l| format!("{l}\n")).collect()
}

/// `/var/log/rcufs/<mount point escaped as systemd-escape --path does>.log`:
/// `/mnt/my-data` gives `mnt-my\x2ddata.log`, `/` gives `-.log`.
pub fn default_log_path(mountpoint: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    PathBuf::from(LOG_DIR).join(format!("{}.log", escape_path(&canon)))
}

/// systemd's path escaping (`systemd-escape --path`).
pub fn escape_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let trimmed: Vec<&[u8]> = bytes.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
    if trimmed.is_empty() {
        return "-".into();
    }
    let mut out = String::new();
    for (i, comp) in trimmed.iter().enumerate() {
        if i > 0 {
            out.push('-');
        }
        for (j, &b) in comp.iter().enumerate() {
            let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b':' || (b == b'.' && (i, j) != (0, 0));
            if plain {
                out.push(b as char);
            } else {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
