//! An sshfs mount of a directory of this machine, reached through a
//! [`DelayLink`](super::link::DelayLink) (`-o directport=PORT`: SFTP straight
//! over TCP, no ssh), and the `rcufs mount` over it.
//!
//! Invariant: a guard that mounted takes its mount down when it drops
//! (`umount`, then the foreground `sshfs` or `rcufs` process it started is
//! waited for, killed by its pid after 20 s, and the mount detached with
//! `umount -l` if it is still there).

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::mount::mounted_at;

/// A foreground `sshfs` process and its mount.
pub struct Sshfs {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Sshfs {
    /// Mounts `remote_dir` (served by the SFTP server behind `port`) at
    /// `mnt` with the extra `-o` options `opts`; returns once the mount
    /// answers.
    pub fn mount(port: u16, remote_dir: &Path, mnt: &Path, opts: &str, log: &Path) -> Result<Sshfs> {
        fs::create_dir_all(mnt)?;
        let out = fs::File::create(log)?;
        let mut o = format!("directport={port}");
        if !opts.is_empty() {
            o.push(',');
            o.push_str(opts);
        }
        eprintln!(
            "xtask netbench: $ sshfs -f 127.0.0.1:{} {} -o {o}",
            remote_dir.display(),
            mnt.display()
        );
        let child = Command::new("sshfs")
            .arg("-f")
            .arg(format!("127.0.0.1:{}", remote_dir.display()))
            .arg(mnt)
            .args(["-o", &o])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting sshfs")?;
        let mut m = Sshfs {
            child: Some(child),
            mnt: mnt.to_path_buf(),
        };
        wait_for_mount(&mut m.child, mnt, "fuse.sshfs", log)?;
        Ok(m)
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for Sshfs {
    fn drop(&mut self) {
        take_down(&mut self.child, &self.mnt);
    }
}

/// A foreground `rcufs mount` process and its mount.
pub struct Rcufs {
    child: Option<Child>,
    mnt: PathBuf,
    rcufs: PathBuf,
}

impl Rcufs {
    /// `rcufs mount SRC MNT ARGS...`, with the daemon's descriptor limit
    /// (soft and hard) at `nofile` if given.
    pub fn mount(
        rcufs: &Path,
        src: &Path,
        mnt: &Path,
        args: &[String],
        nofile: Option<u64>,
        log: &Path,
    ) -> Result<Rcufs> {
        fs::create_dir_all(mnt)?;
        let out = fs::File::create(log)?;
        eprintln!(
            "xtask netbench: $ rcufs mount {} {} {}",
            src.display(),
            mnt.display(),
            args.join(" ")
        );
        let mut cmd = Command::new(rcufs);
        cmd.arg("mount")
            .arg(src)
            .arg(mnt)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        if let Some(limit) = nofile {
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: the closure runs in the forked child before exec and
            // only calls setrlimit, which is async-signal-safe, on a value
            // it owns.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd.spawn().context("starting rcufs mount")?;
        let mut m = Rcufs {
            child: Some(child),
            mnt: mnt.to_path_buf(),
            rcufs: rcufs.to_path_buf(),
        };
        wait_for_mount(&mut m.child, mnt, "fuse.rcufs", log)?;
        Ok(m)
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The daemon's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The stats JSON (`rcufs stats --json`), or `null`.
    pub fn stats(&self) -> serde_json::Value {
        Command::new(&self.rcufs)
            .args(["stats", "--json"])
            .arg(&self.mnt)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| serde_json::from_slice(&o.stdout).ok())
            .unwrap_or(serde_json::Value::Null)
    }
}

impl Drop for Rcufs {
    fn drop(&mut self) {
        take_down(&mut self.child, &self.mnt);
    }
}

/// Waits (up to 20 s) for a mount of type `fstype` at `mnt`, failing at
/// once if the process exits first.
fn wait_for_mount(child: &mut Option<Child>, mnt: &Path, fstype: &str, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if mounted_at(mnt).is_some_and(|(t, s)| t == fstype || (t == "fuse" && fstype.ends_with(&s))) {
            return Ok(());
        }
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            *child = None;
            bail!(
                "{fstype} at {} exited with {status} before mounting:\n{}",
                mnt.display(),
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "no {fstype} mount appeared at {} within 20 s:\n{}",
                mnt.display(),
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unmounts `mnt` and reaps the foreground process that served it.
fn take_down(child: &mut Option<Child>, mnt: &Path) {
    if mounted_at(mnt).is_some() {
        let _ = Command::new("umount").arg(mnt).stderr(Stdio::null()).status();
    }
    if let Some(mut c) = child.take() {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match c.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    eprintln!(
                        "xtask netbench: the process serving {} did not exit; killing it",
                        mnt.display()
                    );
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
            }
        }
    }
    if mounted_at(mnt).is_some() {
        crate::mount::lazy_unmount(mnt);
    }
}
