//! The hot data rows of `cargo xtask fsbench`, interleaved: the native
//! source, a default rcufs mount and a `--kernel-cache` mount of it (and,
//! with `RCUFS_FSBENCH_BASE=/path/to/an/older/rcufs`, that binary's two
//! mounts too, for A/B runs of a change; with `RCUFS_FSBENCH_IO_URING=1`,
//! mounts with `--io-uring on`, `on` and `--kernel-cache`, and `idle`) are
//! all mounted at once, and each
//! round runs one pass of a workload on each of them in turn, in an order
//! that rotates from round to round. Rates are medians over the rounds; the
//! ratios are medians of the per-round ratios against native, so that a
//! burst of load from other work on the machine moves both sides of a ratio.
//!
//! Workloads: every data file read start to end in 1 MiB `read`s (the
//! sequential row), and 4 KiB `pread`s at random page-aligned offsets (the
//! random row). Before the rounds, one untimed pass of each workload on each
//! target fills the caches.
//!
//! For the random row it also records what one request costs: the daemon's
//! CPU time (user + system, from `/proc/PID/stat`) and the reading thread's
//! (`/proc/thread-self/stat`), each per read, over the timed passes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use serde_json::{Value, json};

use super::{Measure, Mode, Mount, Scale, median, read_random, read_sequential};

/// One thing the rounds read from.
struct Target {
    name: String,
    /// The row's mode for the main table (the older binary's have none).
    mode: Option<Mode>,
    dir: PathBuf,
    /// The daemon's process id (none for native).
    pid: Option<u32>,
}

/// Clock ticks of CPU time (user + system) of the process `pid`, or of the
/// calling thread when `pid` is `None`.
fn cpu_ticks(pid: Option<u32>) -> u64 {
    let (user, system) = super::cpu_ticks(pid);
    user + system
}

/// Microseconds per clock tick.
fn tick_us() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1e6 / if hz > 0 { hz as f64 } else { 100.0 }
}

struct Workload {
    name: &'static str,
    unit: &'static str,
    /// Units per byte read (1e-6 for MB/s, 1/4096 for IOPS).
    scale: f64,
    /// Sequential 1 MiB reads (else random 4 KiB preads).
    seq: bool,
}

const SEQ: Workload = Workload {
    name: "sequential 1 MiB reads, hot",
    unit: "MB/s",
    scale: 1e-6,
    seq: true,
};
const RAND: Workload = Workload {
    name: "random 4 KiB reads, hot",
    unit: "IOPS",
    scale: 1.0 / 4096.0,
    seq: false,
};

/// Runs the interleaved hot data rows; returns the main table's measures,
/// the records and a markdown section.
pub fn run(
    rcufs: &Path,
    src: &Path,
    work: &Path,
    s: &Scale,
    logs: &Path,
    quick: bool,
) -> Result<(Vec<Measure>, Vec<Value>, String)> {
    let base = std::env::var_os("RCUFS_FSBENCH_BASE").map(PathBuf::from);
    let mut mounts = Vec::new();
    let mut targets = vec![Target {
        name: "native".into(),
        mode: Some(Mode::Native),
        dir: src.to_path_buf(),
        pid: None,
    }];
    let mut binaries = vec![("rcufs", rcufs.to_path_buf(), true)];
    if let Some(b) = &base {
        binaries.push(("base", b.clone(), false));
    }
    for (label, bin, ours) in &binaries {
        for kc in [false, true] {
            let name = if kc { format!("{label}-kc") } else { label.to_string() };
            let mnt = work.join(format!("mnt-data-{name}"));
            let extra: Vec<String> = if kc { vec!["--kernel-cache".into()] } else { vec![] };
            let m = Mount::new(bin, src, &mnt, &extra, &logs.join(format!("data-{name}.log")))?;
            targets.push(Target {
                name,
                mode: ours.then_some(if kc { Mode::RcufsKernelCache } else { Mode::Rcufs }),
                dir: m.path().to_path_buf(),
                pid: m.pid(),
            });
            mounts.push(m);
        }
    }
    // RCUFS_FSBENCH_IO_URING=1: also FUSE over io_uring (`--io-uring on`,
    // with and without `--kernel-cache`, and `--io-uring idle`), in the
    // same rounds. The kernel offers it only while the fuse module's
    // `enable_uring` is set: it is set for the run and put back after.
    let _uring_param = if std::env::var_os("RCUFS_FSBENCH_IO_URING").is_some() {
        let param = crate::util::UringParam::set()?;
        for (name, extra) in [
            ("uring", &["--io-uring", "on"][..]),
            ("uring-kc", &["--io-uring", "on", "--kernel-cache"]),
            ("uring-idle", &["--io-uring", "idle"]),
        ] {
            let mnt = work.join(format!("mnt-data-{name}"));
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            let m = Mount::new(rcufs, src, &mnt, &extra, &logs.join(format!("data-{name}.log")))?;
            targets.push(Target {
                name: name.into(),
                mode: None,
                dir: m.path().to_path_buf(),
                pid: m.pid(),
            });
            mounts.push(m);
        }
        Some(param)
    } else {
        None
    };
    let rounds = std::env::var("RCUFS_FSBENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 3 } else { 7 });
    let file_bytes = (s.data_file_mib as u64) << 20;
    let files = |t: &Target| -> Vec<PathBuf> {
        (0..s.data_files)
            .map(|i| t.dir.join(format!("data/file{i}.bin")))
            .collect()
    };
    let mut measures = Vec::new();
    let mut records = Vec::new();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n### Hot data, interleaved ({} rounds; {} x {} MiB files; {} random reads per pass)\n",
        rounds, s.data_files, s.data_file_mib, s.random_reads
    );
    let _ = writeln!(
        md,
        "| workload | target | median rate | median ratio to native (per round) | min-max ratio | daemon CPU µs/read | reader CPU µs/read | wall µs/read |\n|---|---|---:|---:|---:|---:|---:|---:|"
    );
    for w in [&SEQ, &RAND] {
        let pass = |t: &Target, seed: u64| -> Result<u64> {
            if w.seq {
                read_sequential(&files(t))
            } else {
                read_random(&files(t), file_bytes, s.random_reads, seed)
            }
        };
        for t in &targets {
            pass(t, 3)?; // Warm-up: every page cached.
        }
        // rates[target][round], and the CPU ticks over the timed passes.
        let mut rates = vec![Vec::new(); targets.len()];
        let mut daemon_ticks = vec![0u64; targets.len()];
        let mut reader_ticks = vec![0u64; targets.len()];
        let mut secs = vec![0f64; targets.len()];
        let mut bytes = vec![0u64; targets.len()];
        for r in 0..rounds {
            for k in 0..targets.len() {
                let i = (k + r) % targets.len();
                let t = &targets[i];
                let (d0, c0) = (t.pid.map(|p| cpu_ticks(Some(p))), cpu_ticks(None));
                let start = Instant::now();
                let n = pass(t, 7 + r as u64)?;
                let el = start.elapsed().as_secs_f64();
                reader_ticks[i] += cpu_ticks(None) - c0;
                if let (Some(p), Some(d0)) = (t.pid, d0) {
                    daemon_ticks[i] += cpu_ticks(Some(p)).saturating_sub(d0);
                }
                secs[i] += el;
                bytes[i] += n;
                rates[i].push(n as f64 / el * w.scale);
            }
        }
        let reads_per = |i: usize| bytes[i] as f64 / if w.seq { (1 << 20) as f64 } else { 4096.0 };
        for (i, t) in targets.iter().enumerate() {
            let rate = median(rates[i].clone());
            let ratios: Vec<f64> = (0..rounds).map(|r| rates[i][r] / rates[0][r]).collect();
            let ratio = median(ratios.clone());
            let (lo, hi) = ratios
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            let per = |ticks: u64| ticks as f64 * tick_us() / reads_per(i);
            let daemon = t.pid.map(|_| per(daemon_ticks[i]));
            let reader = per(reader_ticks[i]);
            let wall = secs[i] * 1e6 / reads_per(i);
            eprintln!(
                "xtask fsbench: {:<9} {:<38} {rate:>14.1} {} (ratio {ratio:.2}x)",
                t.name, w.name, w.unit
            );
            let _ = writeln!(
                md,
                "| {} | {} | {rate:.1} {} | {} | {} | {} | {reader:.2} | {wall:.2} |",
                w.name,
                t.name,
                w.unit,
                if i == 0 { "-".into() } else { format!("{ratio:.2}x") },
                if i == 0 {
                    "-".into()
                } else {
                    format!("{lo:.2}-{hi:.2}x")
                },
                daemon.map_or("-".into(), |d| format!("{d:.2}"))
            );
            if let Some(mode) = t.mode {
                measures.push(Measure {
                    workload: w.name.to_string(),
                    mode,
                    value: rate,
                    unit: w.unit,
                });
            }
            if i > 0 {
                records.push(json!({
                    "name": format!("{} (interleaved): {} vs native", w.name, t.name),
                    "ours": rate, "baseline": median(rates[0].clone()), "unit": w.unit,
                    "ratio": ratio, "ratio_min": lo, "ratio_max": hi, "rounds": rounds,
                    "daemon_cpu_us_per_read": daemon, "reader_cpu_us_per_read": reader,
                    "wall_us_per_read": wall,
                }));
            }
        }
    }
    drop(mounts);
    Ok((measures, records, md))
}
