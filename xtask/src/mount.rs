//! Running `rcufs mount` from a task: the [`Daemon`] guard and the mount-table
//! helpers shared by `demo` and `soak`.
//!
//! Invariant: a task that starts a [`Daemon`] never leaves a mount behind.
//! Dropping the guard sends SIGTERM to the `rcufs mount` process it started
//! (rcufs unmounts cleanly on it), kills it if it has not exited within 20 s,
//! and falls back to `umount -l` if the mount outlives the daemon.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::util::root;

/// The cargo target directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root().join(dir),
        None => root().join("target"),
    }
}

/// The mountinfo line of the mount at `mnt` (the last one, which is the
/// visible one when mounts are stacked).
fn mountinfo_line(mnt: &Path) -> Option<String> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mnt.to_string_lossy().replace(' ', "\\040");
    text.lines()
        .rev()
        .find(|line| line.split_once(" - ").and_then(|(left, _)| left.split(' ').nth(4)) == Some(want.as_str()))
        .map(str::to_string)
}

/// Whether mountinfo lists a mount at `mnt`; returns its filesystem type and source.
pub fn mounted_at(mnt: &Path) -> Option<(String, String)> {
    let line = mountinfo_line(mnt)?;
    let (_, right) = line.split_once(" - ")?;
    let mut r = right.split(' ');
    let (fstype, source) = (r.next().unwrap_or(""), r.next().unwrap_or(""));
    Some((fstype.to_string(), source.to_string()))
}

/// The device number `(major, minor)` of the mount at `mnt`, from mountinfo
/// (never from `stat`, which would block on a hung FUSE mount). For a FUSE
/// mount the minor is the connection's number in `/sys/fs/fuse/connections`.
pub fn mount_dev(mnt: &Path) -> Option<(u32, u32)> {
    let line = mountinfo_line(mnt)?;
    let (major, minor) = line.split(' ').nth(2)?.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Whether the mount at `mnt` is rcufs: type `fuse.rcufs`, or `fuse` with
/// source `rcufs` (a FUSE library mounting with mount(2) directly).
pub fn rcufs_mounted_at(mnt: &Path) -> bool {
    mounted_at(mnt).is_some_and(|(t, s)| t == "fuse.rcufs" || (t == "fuse" && s == "rcufs"))
}

/// The running `rcufs mount`; dropping it takes the mount down.
pub struct Daemon {
    child: Option<Child>,
    pid: u32,
    mnt: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Starts `rcufs mount SRC MNT ARGS...` with stdout and stderr in `log`
    /// and waits (up to 20 s) until the mount appears.
    pub fn start(rcufs: &Path, src: &Path, mnt: &Path, args: &[&str], log: &Path) -> Result<Daemon> {
        let out = fs::File::create(log)?;
        let child = Command::new(rcufs)
            .arg("mount")
            .arg(src)
            .arg(mnt)
            .args(args)
            // Plain log lines, so that their levels can be read back.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("cannot start rcufs")?;
        let mut d = Daemon {
            pid: child.id(),
            child: Some(child),
            mnt: mnt.to_path_buf(),
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !rcufs_mounted_at(mnt) {
            if let Some(status) = d.child.as_mut().expect("started").try_wait()? {
                d.child = None;
                bail!("rcufs mount exited with {status}:\n{}", d.log_text());
            }
            if Instant::now() > deadline {
                bail!("the mount did not appear within 20 s; rcufs says:\n{}", d.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(d)
    }

    /// The process id of the `rcufs mount` process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the daemon wrote to stdout and stderr so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `Some(status)` once the daemon has exited (it is then reaped).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Kills the daemon at once (SIGKILL) and reaps it; the kernel then
    /// aborts the connection. The mount is left for [`Daemon::stop`] or the
    /// guard to take down.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait up to 20 s for a clean exit.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            if mounted_at(&self.mnt).is_some() {
                lazy_unmount(&self.mnt);
            }
            return Ok(());
        };
        signal_term(child.id());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                lazy_unmount(&self.mnt);
                bail!(
                    "rcufs did not exit within 20 s of SIGTERM; killed it:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if mounted_at(&self.mnt).is_some() {
            lazy_unmount(&self.mnt);
            bail!("rcufs exited ({status}) but left the mount behind; unmounted it lazily");
        }
        if !status.success() {
            bail!("rcufs exited with {status}:\n{}", self.log_text());
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some()
            && let Err(e) = self.stop()
        {
            eprintln!("xtask: while unmounting {}: {e:#}", self.mnt.display());
        }
        if mounted_at(&self.mnt).is_some() {
            lazy_unmount(&self.mnt);
        }
    }
}

fn signal_term(pid: u32) {
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
}

/// `umount -l MNT`.
pub fn lazy_unmount(mnt: &Path) {
    let _ = Command::new("umount").arg("-l").arg(mnt).status();
}
