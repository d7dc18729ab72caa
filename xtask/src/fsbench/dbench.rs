//! The dbench rows of `cargo xtask fsbench`: every run on a filesystem of
//! its own, made just before it, with the targets interleaved.
//!
//! Why a fresh filesystem: dbench creates and deletes files at a high
//! rate, and ext4 without a journal (this project's machines' root
//! filesystem) skips, when it allocates an inode, every inode deleted in the
//! last 60 s, or 360 s while its inode-table block is still dirty
//! (`recently_deleted` under `find_inode_bit`). A create then costs more the
//! more was deleted shortly before it, so on a shared filesystem a dbench
//! run's result depends on the runs before it: five native 2-client runs
//! back to back on the same directory, with mount runs between them, gave
//! 400, 417, 361, 325 and 286 MB/s, and a system-wide profile of the last
//! put 27 % of the machine's samples in `recently_deleted`. Made fresh
//! (`mkfs.ext4` without a journal, as the root filesystem here, on a
//! loop-mounted sparse image in the work directory), every run starts from
//! the same state, whichever target ran before it.
//!
//! Targets: the fresh filesystem itself (`native`), a default rcufs mount of
//! it, a `--kernel-cache` mount; with `RCUFS_FSBENCH_BASE=/path/to/rcufs`
//! that binary's two mounts (A/B); with `RCUFS_FSBENCH_IO_URING=1` the
//! same two over FUSE over io_uring (`--io-uring on`). Each round runs every
//! target once per client count, in an order that rotates from round to
//! round (`RCUFS_FSBENCH_DBENCH_ROUNDS`, default 3, 1 with `--quick`).
//! Rates are medians over the rounds, ratios medians of the per-round
//! ratios against native.
//!
//! Besides the rate, each row records what the machine spent over the
//! dbench command: the busy share of all CPUs (`/proc/stat`), the CPU time
//! per MB moved, and for a mount the daemon's CPU time per MB and its
//! user-space part. From these, two bounds: the ratio the target would
//! reach with every CPU busy at its measured cost per MB, and the same if
//! the daemon's own code (rcufs, fuser, libc) cost nothing. A ratio target
//! above the second is out of reach of a faster daemon alone; a row well
//! below the first with the CPUs half idle is waiting, not computing.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{Measure, Mode, Mount, Scale, median};
use crate::util::run;

/// Bytes of the sparse image each run formats.
const IMAGE_BYTES: u64 = 4 << 30;

/// One kind of run: the fresh filesystem itself or a mount of it.
struct Target {
    name: String,
    /// The row's mode in the main table (A/B and io_uring rows have none).
    mode: Option<Mode>,
    /// The binary and its options, for a mount.
    mount: Option<(PathBuf, Vec<String>)>,
}

/// A fresh ext4 filesystem on a loop-mounted image; unmounted and deleted
/// when dropped, also on failure.
struct FreshFs {
    image: PathBuf,
    dir: PathBuf,
    mounted: bool,
}

impl FreshFs {
    fn new(work: &Path) -> Result<FreshFs> {
        let image = work.join("dbench.img");
        let dir = work.join("dbench-fs");
        fs::create_dir_all(&dir)?;
        let _ = fs::remove_file(&image);
        let f = fs::File::create(&image).with_context(|| format!("creating {}", image.display()))?;
        f.set_len(IMAGE_BYTES)?;
        drop(f);
        let mut fresh = FreshFs {
            image,
            dir,
            mounted: false,
        };
        // No journal, as on the root filesystem the other rows use; the
        // inode tables initialised now, not by the kernel's lazy-init thread
        // during the run.
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=0,nodiscard"])
            .arg(&fresh.image)
            .stdout(Stdio::null()))
        .context("mkfs.ext4 of the dbench image")?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&fresh.image)
            .arg(&fresh.dir))
        .context("mounting the dbench image (root and loop devices are needed)")?;
        fresh.mounted = true;
        Ok(fresh)
    }
}

impl Drop for FreshFs {
    fn drop(&mut self) {
        if self.mounted {
            let ok = Command::new("umount")
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("xtask fsbench: umount {} failed; umount -l", self.dir.display());
                let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            }
        }
        let _ = fs::remove_file(&self.image);
    }
}

/// Busy and idle clock ticks of the whole machine (`/proc/stat`'s `cpu`
/// line: user, nice, system, irq, softirq; idle, iowait). Steal, the time
/// the hypervisor gave to others, is neither.
fn machine_ticks() -> (u64, u64) {
    let text = fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let get = |i: usize| f.get(i).copied().unwrap_or(0);
    (get(0) + get(1) + get(2) + get(5) + get(6), get(3) + get(4))
}

/// Runs dbench with `clients` clients in `dir` (on a filesystem made for
/// the run, so nothing of an earlier run is there to remove, and what it
/// leaves goes with the filesystem) for `secs` seconds; returns its
/// throughput in MB/s.
fn dbench_once(dir: &Path, clients: usize, secs: u64) -> Result<f64> {
    let out = Command::new("dbench")
        .arg("-D")
        .arg(dir)
        .args(["-c", "/usr/share/dbench/client.txt", "-t"])
        .arg(secs.to_string())
        .arg(clients.to_string())
        .output()
        .context("running dbench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let tp = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Throughput "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|x| x.parse::<f64>().ok());
    match tp {
        Some(mb) if out.status.success() => Ok(mb),
        _ => bail!(
            "dbench failed ({}):\n{}\n{}",
            out.status,
            text.lines().rev().take(15).collect::<Vec<_>>().join("\n"),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// What one run measured. The shares are of the machine's CPU capacity
/// (all CPUs) over the whole dbench command, warm-up included, which runs
/// the same load as the timed part.
#[derive(Clone, Copy)]
struct Run {
    mb_s: f64,
    /// Busy share of the machine.
    busy: f64,
    /// The daemon's share, and the part of it in user space (rcufs, fuser
    /// and libc: the code a faster daemon could remove).
    daemon: Option<f64>,
    daemon_user: Option<f64>,
}

impl Run {
    /// CPU milliseconds per MB moved, for a share of a machine of `cpus`.
    fn ms_per_mb(&self, share: f64, cpus: f64) -> f64 {
        share * cpus * 1e3 / self.mb_s
    }
}

fn one_run(t: &Target, work: &Path, clients: usize, secs: u64, logs: &Path) -> Result<Run> {
    let fresh = FreshFs::new(work)?;
    let mount = match &t.mount {
        Some((bin, extra)) => Some(Mount::new(
            bin,
            &fresh.dir,
            &work.join("mnt-dbench"),
            extra,
            &logs.join(format!("dbench-{}.log", t.name)),
        )?),
        None => None,
    };
    let dir = mount.as_ref().map_or(fresh.dir.clone(), |m| m.path().to_path_buf());
    let pid = mount.as_ref().and_then(Mount::pid);
    let (b0, i0) = machine_ticks();
    let d0 = pid.map(|p| super::cpu_ticks(Some(p)));
    let mb_s = dbench_once(&dir, clients, secs)?;
    let (b1, i1) = machine_ticks();
    let d1 = pid.map(|p| super::cpu_ticks(Some(p)));
    drop(mount);
    drop(fresh);
    let all = ((b1 - b0) + (i1 - i0)).max(1) as f64;
    let (daemon, daemon_user) = match (d0, d1) {
        (Some((u0, s0)), Some((u1, s1))) => (
            Some(((u1 + s1).saturating_sub(u0 + s0)) as f64 / all),
            Some(u1.saturating_sub(u0) as f64 / all),
        ),
        _ => (None, None),
    };
    Ok(Run {
        mb_s,
        busy: (b1 - b0) as f64 / all,
        daemon,
        daemon_user,
    })
}

/// `rcufs` is `None` when only native runs (`--modes native`).
pub fn run_rows(
    rcufs: Option<&Path>,
    modes: &[Mode],
    work: &Path,
    s: &Scale,
    logs: &Path,
    quick: bool,
) -> Result<(Vec<Measure>, Vec<Value>, String)> {
    if !crate::util::have("mkfs.ext4") {
        bail!("mkfs.ext4 is needed (Debian package e2fsprogs)");
    }
    let mut targets = vec![Target {
        name: "native".into(),
        mode: Some(Mode::Native),
        mount: None,
    }];
    let mut binaries = Vec::new();
    if let Some(rcufs) = rcufs {
        binaries.push(("rcufs", rcufs.to_path_buf(), true));
        if let Some(b) = std::env::var_os("RCUFS_FSBENCH_BASE") {
            binaries.push(("base", PathBuf::from(b), false));
        }
    }
    for (label, bin, ours) in &binaries {
        for kc in [false, true] {
            let mode = if kc { Mode::RcufsKernelCache } else { Mode::Rcufs };
            if !modes.contains(&mode) {
                continue;
            }
            targets.push(Target {
                name: if kc { format!("{label}-kc") } else { label.to_string() },
                mode: ours.then_some(mode),
                mount: Some((bin.clone(), if kc { vec!["--kernel-cache".into()] } else { vec![] })),
            });
        }
    }
    let uring = rcufs.filter(|_| std::env::var_os("RCUFS_FSBENCH_IO_URING").is_some());
    let _uring_param = if let Some(rcufs) = uring {
        let param = crate::util::UringParam::set()?;
        for (name, extra) in [
            ("uring", &["--io-uring", "on"][..]),
            ("uring-kc", &["--io-uring", "on", "--kernel-cache"]),
        ] {
            targets.push(Target {
                name: name.into(),
                mode: None,
                mount: Some((rcufs.to_path_buf(), extra.iter().map(|s| s.to_string()).collect())),
            });
        }
        Some(param)
    } else {
        None
    };
    let rounds: usize = std::env::var("RCUFS_FSBENCH_DBENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 1 } else { 3 });
    if rounds == 0 {
        bail!("RCUFS_FSBENCH_DBENCH_ROUNDS must be at least 1");
    }
    let mut measures = Vec::new();
    let mut records = Vec::new();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n### dbench, a fresh filesystem per run, interleaved ({rounds} round{} of {} s per target and client count)\n",
        if rounds == 1 { "" } else { "s" },
        s.tool_secs
    );
    let _ = writeln!(
        md,
        "| clients | target | median MB/s | median ratio to native (per round) | min-max ratio | busy share | machine CPU ms/MB | daemon CPU ms/MB (user) | ratio at full CPU | same, daemon's user time removed |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let cpus = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    for clients in [1usize, 2] {
        // runs[target][round]
        let mut runs = vec![Vec::<Run>::new(); targets.len()];
        for r in 0..rounds {
            for k in 0..targets.len() {
                let i = (k + r) % targets.len();
                let res = one_run(&targets[i], work, clients, s.tool_secs, logs)
                    .with_context(|| format!("dbench, {clients} client(s), {}", targets[i].name))?;
                eprintln!(
                    "xtask fsbench: dbench round {} {:<9} {clients} client(s) {:>8.1} MB/s, {:.0} % busy",
                    r + 1,
                    targets[i].name,
                    res.mb_s,
                    res.busy * 100.0
                );
                runs[i].push(res);
            }
        }
        let workload = format!("dbench, {clients} client(s)");
        let native = median(runs[0].iter().map(|x| x.mb_s).collect());
        for (i, t) in targets.iter().enumerate() {
            let per_round = |f: &dyn Fn(&Run, &Run) -> Option<f64>| -> Option<f64> {
                let v: Vec<f64> = (0..rounds).filter_map(|r| f(&runs[i][r], &runs[0][r])).collect();
                (!v.is_empty()).then(|| median(v))
            };
            let rate = median(runs[i].iter().map(|x| x.mb_s).collect());
            let ratios: Vec<f64> = (0..rounds).map(|r| runs[i][r].mb_s / runs[0][r].mb_s).collect();
            let ratio = median(ratios.clone());
            let (lo, hi) = ratios
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            let busy = median(runs[i].iter().map(|x| x.busy).collect());
            let cpu = median(runs[i].iter().map(|x| x.ms_per_mb(x.busy, cpus)).collect());
            let daemon = per_round(&|x, _| x.daemon.map(|s| x.ms_per_mb(s, cpus)));
            let daemon_user = per_round(&|x, _| x.daemon_user.map(|s| x.ms_per_mb(s, cpus)));
            // What the row would reach if the machine were busy all the
            // time at this cost per MB, against native as measured (native
            // itself is not CPU-bound: it waits for its fsyncs).
            let full = per_round(&|x, n| (i > 0 && x.busy > 0.0).then(|| x.mb_s / x.busy / n.mb_s));
            let without_user = per_round(&|x, n| {
                let rest = x.busy - x.daemon_user?;
                (rest > 0.0).then(|| x.mb_s / rest / n.mb_s)
            });
            let x2 = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}x"));
            let _ = writeln!(
                md,
                "| {clients} | {} | {rate:.1} | {} | {} | {:.0} % | {cpu:.2} | {} | {} | {} |",
                t.name,
                if i == 0 { "-".into() } else { format!("{ratio:.2}x") },
                if i == 0 {
                    "-".into()
                } else {
                    format!("{lo:.2}-{hi:.2}x")
                },
                busy * 100.0,
                match (daemon, daemon_user) {
                    (Some(d), Some(u)) => format!("{d:.2} ({u:.2})"),
                    _ => "-".into(),
                },
                x2(full),
                x2(without_user),
            );
            if let Some(mode) = t.mode {
                measures.push(Measure {
                    workload: workload.clone(),
                    mode,
                    value: rate,
                    unit: "MB/s",
                });
            }
            if i > 0 {
                records.push(json!({
                    "name": format!("{workload} (fresh filesystem, interleaved): {} vs native", t.name),
                    "ours": rate, "baseline": native, "unit": "MB/s",
                    "ratio": ratio, "ratio_min": lo, "ratio_max": hi, "rounds": rounds,
                    "busy_share": busy, "machine_cpu_ms_per_mb": cpu,
                    "daemon_cpu_ms_per_mb": daemon, "daemon_user_cpu_ms_per_mb": daemon_user,
                    "ratio_at_full_cpu": full, "ratio_at_full_cpu_without_daemon_user_time": without_user,
                }));
            }
        }
    }
    let _ = writeln!(
        md,
        "\nBusy share and CPU time cover the whole dbench command (its warm-up runs the same load) on all {cpus} CPUs. \
         \"Ratio at full CPU\" is the rate a target would reach with every CPU busy at its measured CPU cost per MB, \
         against native as measured (native is not CPU-bound: it waits for its fsyncs); \"daemon's user time removed\" \
         is the same with the daemon's own user-space work (rcufs, fuser, libc) costing nothing. A ratio target above \
         both is out of reach of a faster daemon alone."
    );
    Ok((measures, records, md))
}
