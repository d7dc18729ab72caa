//! A walk with `stat` over a source without file handles (`cargo xtask
//! netbench --walk N`): the daemon's descriptors stay under its bound
//! however many inodes the kernel comes to know.
//!
//! The tree (`N` empty files, 100 per directory) is made on the local
//! disk and served to rcufs by a FUSE filesystem, which gives no usable file
//! handles: another rcufs mount (`--walk-source rcufs`, the default, the
//! case of the issue: a FUSE filesystem as the source) or sshfs without an
//! added delay (`--walk-source sshfs`). rcufs is mounted over it, once in
//! each mode, and `find MNT -print0 | xargs -0 stat` runs through it while
//! the daemon's descriptors and RSS are sampled every 100 ms. A `stat` that
//! fails (`EMFILE` or anything else) fails the walk.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::link::SftpServer;
use super::sshfs::{Rcufs, Sshfs};

/// What serves the tree to the rcufs under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Another rcufs mount of the tree (a FUSE filesystem).
    Rcufs,
    /// sshfs over an SFTP server of this machine, no added delay.
    Sshfs,
}

/// One mode's walk.
pub struct ModeWalk {
    mode: &'static str,
    secs: f64,
    fds_max: u64,
    fd_limit: u64,
    rss_max_kib: u64,
    stats: Value,
}

/// The walk in both modes.
pub struct Outcome {
    entries: usize,
    source: Source,
    modes: Vec<ModeWalk>,
}

impl Outcome {
    pub fn json(&self) -> Value {
        json!({
            "entries": self.entries,
            "source": format!("{:?}", self.source),
            "modes": self.modes.iter().map(|m| json!({
                "mode": m.mode,
                "secs": m.secs,
                "fds_max": m.fds_max,
                "fd_limit": m.fd_limit,
                "rss_max_kib": m.rss_max_kib,
                "stats": m.stats,
            })).collect::<Vec<_>>(),
        })
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "Walk with `stat` of {} entries over a source without file handles ({:?}), `find | xargs stat`:\n",
            self.entries, self.source
        );
        md.push_str("| mode | seconds | entries/s | daemon descriptors, max | descriptor limit | inodes known at the end | pooled descriptors | RSS max (MiB) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for m in &self.modes {
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.0} | {} | {} | {} | {} | {:.1} |",
                m.mode,
                m.secs,
                self.entries as f64 / m.secs,
                m.fds_max,
                m.fd_limit,
                m.stats["inodes"]["known"],
                m.stats["inodes"]["pooled_fds"],
                m.rss_max_kib as f64 / 1024.0
            );
        }
        md
    }
}

/// Makes the tree, then walks it through rcufs in each mode.
pub fn run(
    rcufs: &Path,
    work: &Path,
    entries: usize,
    nofile: Option<u64>,
    source: Source,
    logs: &Path,
) -> Result<Outcome> {
    let tree = work.join("walk");
    // Small directories, so that a large walk has more directories than the
    // descriptor pool holds (a quarter of the limit): the pool evicts and
    // reopens by name, which is what the bound is about.
    let per_dir = 100;
    let started = Instant::now();
    for d in 0..entries.div_ceil(per_dir) {
        let dir = tree.join(format!("d{:03}/d{d:05}", d / 1000));
        fs::create_dir_all(&dir)?;
        for f in 0..per_dir.min(entries - d * per_dir) {
            File::create(dir.join(format!("f{f:03}")))?;
        }
    }
    eprintln!(
        "xtask netbench: made {entries} files for the walk in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut modes = Vec::new();
    for (mode, args) in [("rcufs", vec![]), ("rcufs-kc", vec!["--kernel-cache".to_string()])] {
        // A fresh source mount per mode, so that neither walk starts warm.
        let server;
        let (_lower_rcufs, _lower_sshfs, lower_path);
        match source {
            Source::Rcufs => {
                let l = Rcufs::mount(
                    rcufs,
                    &tree,
                    &work.join("walk-lower"),
                    &[],
                    None,
                    &logs.join(format!("walk-lower-{mode}.log")),
                )?;
                lower_path = l.path().to_path_buf();
                (_lower_rcufs, _lower_sshfs) = (Some(l), None);
            }
            Source::Sshfs => {
                server = SftpServer::start()?;
                let l = Sshfs::mount(
                    server.addr().port(),
                    &tree,
                    &work.join("walk-lower"),
                    "",
                    &logs.join(format!("walk-sshfs-{mode}.log")),
                )?;
                lower_path = l.path().to_path_buf();
                (_lower_rcufs, _lower_sshfs) = (None, Some(l));
            }
        }
        let upper = Rcufs::mount(
            rcufs,
            &lower_path,
            &work.join("walk-upper"),
            &args,
            nofile,
            &logs.join(format!("walk-{mode}.log")),
        )?;
        let pid = upper.pid().context("the walk's daemon is gone")?;
        let fd_limit = open_files_limit(pid)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (fds_max, rss_max) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let sampler = {
            let (stop, fds_max, rss_max) = (stop.clone(), fds_max.clone(), rss_max.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(d) = fs::read_dir(format!("/proc/{pid}/fd")) {
                        fds_max.fetch_max(d.count() as u64, Ordering::Relaxed);
                    }
                    rss_max.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        let t = Instant::now();
        let out = Command::new("sh")
            .arg("-c")
            .arg("find \"$1\" -print0 | xargs -0 stat -c %s | wc -l")
            .arg("sh")
            .arg(upper.path())
            .stdin(Stdio::null())
            .output()?;
        let secs = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        let stats = upper.stats();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let listed: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
        let want = entries + entries.div_ceil(per_dir) + entries.div_ceil(per_dir * 1000) + 1;
        if !out.status.success() || !stderr.trim().is_empty() || listed != want {
            bail!(
                "{mode}: the walk stat-ed {listed} of {want} entries ({}); stderr: {}",
                out.status,
                stderr.lines().take(5).collect::<Vec<_>>().join(" | ")
            );
        }
        let fds_max = fds_max.load(Ordering::Relaxed);
        if fds_max >= fd_limit {
            bail!("{mode}: the daemon held {fds_max} descriptors, its limit is {fd_limit}");
        }
        if stats["inodes"]["by_name"].as_u64().unwrap_or(0) < entries as u64 / 2 {
            bail!("{mode}: the source gave file handles after all: {}", stats["inodes"]);
        }
        eprintln!(
            "xtask netbench: walk {mode}: {secs:.1} s, descriptors at most {fds_max} (limit {fd_limit}), RSS at most {} MiB, {} inodes known",
            rss_max.load(Ordering::Relaxed) / 1024,
            stats["inodes"]["known"]
        );
        modes.push(ModeWalk {
            mode,
            secs,
            fds_max,
            fd_limit,
            rss_max_kib: rss_max.load(Ordering::Relaxed),
            stats,
        });
        drop(upper);
    }
    fs::remove_dir_all(&tree).with_context(|| format!("removing {}", tree.display()))?;
    Ok(Outcome { entries, source, modes })
}

/// The soft `Max open files` of process `pid`.
fn open_files_limit(pid: u32) -> Result<u64> {
    let limits = fs::read_to_string(format!("/proc/{pid}/limits"))?;
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .context("no Max open files in /proc/PID/limits")
}

/// `VmRSS` of process `pid` in KiB (0 if unreadable).
fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
