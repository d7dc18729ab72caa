//! `cargo xtask soak`: the real `rcufs` binary under a long, verified,
//! multi-process load, in each mode (default and `--kernel-cache`) in turn.
//!
//! For each mode the task mounts a fresh source directory, starts `--workers`
//! processes (this binary again, as the hidden `soak-worker` subcommand, see
//! `soak/worker.rs`), each of which owns one directory of the mount and checks
//! every byte it reads against its own exact model, and watches the daemon
//! while they run:
//!
//! - every second it samples the daemon's resident memory (`VmRSS`), its
//!   descriptor count (`/proc/PID/fd`) and threads into
//!   `target/rcufs-soak/MODE.csv`, and fails if the RSS exceeds the bound
//!   (`--page-cache-size` plus [`RSS_ALLOWANCE_MIB`]);
//! - a watchdog thread stats the mount root every second; a stat blocked for
//!   more than [`HANG_SECS`] fails the run, and the FUSE connection is aborted
//!   (`/sys/fs/fuse/connections/N/abort`, or SIGKILL to the daemon) so that
//!   nothing stays stuck;
//! - the daemon's stderr goes to `target/rcufs-soak/MODE.log`: a line at ERROR
//!   level fails the run, WARN lines are counted in the summary; the daemon
//!   exiting before the end fails the run;
//! - a worker that exits non-zero (a miscompare, an unexpected errno) fails
//!   the run with the worker's message, which names the file, the offset,
//!   the expected and the read bytes and the worker's last operations;
//!   when the mount said a name the model has does not exist (`ENOENT`), it
//!   also says what the mount and the source show for each component of the
//!   path, at once, 20 ms later and after a dentry drop of the deepest
//!   directory the mount still shows (a stale dcache entry, a passing
//!   miss, or a name the source lacks too);
//! - at the end (also after a failure, if the mount still answers) it drops
//!   everything (mode 3 on the mount root) and fails if the page cache still
//!   holds pages: pages no drop reaches are memory never given back; and if
//!   any drop's answer waited out its bound for its kernel invalidations
//!   (`kernel_inval.timeouts`): each was a stall of the drop's caller.
//!
//! Workers stop by themselves at a common deadline. Whatever happens (error,
//! panic, SIGINT/SIGTERM), the [`Workers`] guard kills the workers still
//! running by their process ids and the [`Daemon`] guard then unmounts and
//! reaps the daemon. An ERROR line that fuser logs after workers were killed
//! (a reply to a request whose process is gone) is listed, not failed on.
//! `--out DIR` puts the files elsewhere than `target/rcufs-soak`.

pub mod worker;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::mount::{Daemon, lazy_unmount, mount_dev, mounted_at, target_dir};
use crate::util::{cargo, ensure_programs, run};

/// Memory the daemon may hold beyond its page-cache budget, in MiB. What it
/// covers, measured on an idle mount and under this load with a 1 MiB budget
/// (see README "Soak"): the binary and its libraries resident (about 6 MiB),
/// glibc's per-thread malloc arenas of the FUSE threads holding freed request
/// buffers (up to 1 MiB of write payload each), the dcache and inode table of
/// a few thousand entries (under 2 MiB), the page cache's metadata (about 105
/// bytes per 4 KiB page, 2.5 % of the budget) and thread stacks.
pub const RSS_ALLOWANCE_MIB: u64 = 64;

/// The daemon's dentry-cache capacity. The workers name every new file and
/// directory afresh, so the dcache fills up to its capacity (positive and
/// negative entries); at the default (1,000,000, about 200 MiB) that would
/// hide a leak for hours. At this capacity the full dcache is about 4 MiB.
const DCACHE_ENTRIES: &str = "20000";

/// A stat of the mount root blocked this long means the mount stopped answering.
const HANG_SECS: u64 = 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Default,
    KernelCache,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::KernelCache => "kernel-cache",
        }
    }
}

struct Opts {
    secs: f64,
    modes: Vec<Mode>,
    seed: u64,
    workers: usize,
    keep: bool,
    release: bool,
    page_cache: String,
    page_cache_bytes: u64,
    skip: Vec<String>,
    max_ops: u64,
    out: Option<std::path::PathBuf>,
    /// `--coherence` for the daemon (auto, watch or ttl).
    coherence: String,
}

const USAGE: &str = "cargo xtask soak [--minutes N] [--mode default|kernel-cache|both] [--seed S] [--workers W]
                 [--page-cache-size SIZE] [--coherence auto|watch|ttl] [--release] [--keep] [--skip CLASS,...]
                 [--max-ops N] [--out DIR]";

fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v: f64 = num.parse().ok()?;
    (v >= 0.0).then_some((v * mult as f64) as u64)
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        secs: 600.0,
        modes: vec![Mode::Default, Mode::KernelCache],
        seed: 0x5eed_50a4,
        workers: 4,
        keep: false,
        release: false,
        page_cache: "16M".into(),
        page_cache_bytes: 16 << 20,
        skip: Vec::new(),
        max_ops: 100_000_000,
        out: None,
        coherence: "auto".into(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--minutes" => {
                let m: f64 = value()?.parse().context("--minutes")?;
                if m.is_nan() || m <= 0.0 {
                    bail!("--minutes must be positive");
                }
                o.secs = m * 60.0;
            }
            "--mode" => {
                o.modes = match value()?.as_str() {
                    "default" => vec![Mode::Default],
                    "kernel-cache" => vec![Mode::KernelCache],
                    "both" => vec![Mode::Default, Mode::KernelCache],
                    other => bail!("--mode {other}: expected default, kernel-cache or both"),
                }
            }
            "--seed" => o.seed = value()?.parse().context("--seed")?,
            "--workers" => {
                o.workers = value()?.parse().context("--workers")?;
                if o.workers == 0 || o.workers > 64 {
                    bail!("--workers must be 1..=64");
                }
            }
            "--page-cache-size" => {
                let v = value()?.clone();
                o.page_cache_bytes = parse_size(&v).with_context(|| format!("--page-cache-size {v}"))?;
                o.page_cache = v;
            }
            "--skip" => {
                o.skip = value()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                for s in &o.skip {
                    if !worker::CLASSES.iter().any(|(c, _)| c == s) && !worker::KINDS.contains(&s.as_str()) {
                        let known: Vec<&str> = worker::CLASSES.iter().map(|c| c.0).collect();
                        bail!(
                            "--skip {s}: the classes are {}, and each kind of the summary can be named too",
                            known.join(", ")
                        );
                    }
                }
            }
            "--max-ops" => o.max_ops = value()?.parse().context("--max-ops")?,
            "--coherence" => {
                let v = value()?.clone();
                if !["auto", "watch", "ttl"].contains(&v.as_str()) {
                    bail!("--coherence {v}: expected auto, watch or ttl");
                }
                o.coherence = v;
            }
            "--out" => o.out = Some(value()?.into()),
            "--keep" => o.keep = true,
            "--release" => o.release = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(o)
}

/// Set by SIGINT/SIGTERM: the run stops as after a failure, so the mount is
/// still taken down and the daemon reaped.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    // Relaxed: a flag polled every 100 ms, ordering nothing else.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// `cargo xtask soak ARGS`.
pub fn soak(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; it has the signature `signal` expects.
        unsafe { libc::signal(sig, on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
    ensure_programs(&[("kill", "procps"), ("umount", "mount")])?;
    let profile = if o.release { "release" } else { "debug" };
    let mut build = cargo();
    build.args(["build", "--locked", "-p", "fuse-fs", "--bin", "rcufs"]);
    if o.release {
        build.arg("--release");
    }
    run(&mut build)?;
    let rcufs = target_dir().join(profile).join("rcufs");
    if !rcufs.is_file() {
        bail!("the build did not produce {}", rcufs.display());
    }
    let out = o.out.clone().unwrap_or_else(|| target_dir().join("rcufs-soak"));
    fs::create_dir_all(&out)?;
    let base = std::env::temp_dir().join(format!("rcufs-soak-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base)?;

    let mut reports = Vec::new();
    for &mode in &o.modes {
        if INTERRUPTED.load(Ordering::Relaxed) {
            break;
        }
        eprintln!(
            "\nxtask soak: ===== {} mode: {:.0} s, {} workers, seed {}, page cache {} ({profile} rcufs) =====",
            mode.name(),
            o.secs,
            o.workers,
            o.seed,
            o.page_cache
        );
        let report = run_mode(&o, mode, &rcufs, &base.join(mode.name()), &out);
        print!("{}", report.show(&o, &out));
        reports.push(report);
    }

    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: restores the default action (`cargo xtask ci` runs more
        // steps after this one, which Ctrl-C should stop as before).
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    let still_mounted = o
        .modes
        .iter()
        .any(|m| mounted_at(&base.join(m.name()).join("mnt")).is_some());
    if o.keep || still_mounted {
        eprintln!("xtask soak: kept {}", base.display());
    } else {
        let _ = fs::remove_dir_all(&base);
    }
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.failures.is_empty())
        .map(|r| r.mode.name())
        .collect();
    if !failed.is_empty() {
        bail!("soak FAILED in mode(s) {} (see above)", failed.join(", "));
    }
    eprintln!("xtask soak: all modes passed");
    Ok(())
}

/// One sample of the daemon: seconds since the mount, VmRSS KiB, open
/// descriptors, threads.
#[derive(Clone, Copy)]
struct Sample {
    t: f64,
    rss_kib: u64,
    fds: u64,
    threads: u64,
}

fn sample(pid: u32, t: f64) -> Option<Sample> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
    };
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        t,
        rss_kib: field("VmRSS:")?,
        fds,
        threads: field("Threads:").unwrap_or(0),
    })
}

struct Report {
    mode: Mode,
    secs: f64,
    ops: BTreeMap<String, u64>,
    bytes_verified: u64,
    samples: Vec<Sample>,
    fds_end: Option<u64>,
    /// After the final drop: RSS KiB, cached pages, known inodes.
    after_drop: Option<(u64, u64, u64)>,
    /// Some worker did not finish: its counts are its last snapshot.
    partial: bool,
    warnings: BTreeMap<String, u64>,
    failures: Vec<String>,
    /// Set once this task has killed workers: requests they left unanswered
    /// make fuser log "Failed to send FUSE reply" at ERROR level, which is a
    /// consequence of the kill, so later ERROR lines are listed, not failed on.
    workers_killed: bool,
    late_errors: Vec<String>,
    rss_bound_kib: u64,
}

impl Report {
    /// An empty report of `mode` whose RSS bound is `rss_bound_kib`.
    fn new(mode: Mode, rss_bound_kib: u64) -> Self {
        Self {
            mode,
            secs: 0.0,
            ops: BTreeMap::new(),
            bytes_verified: 0,
            samples: Vec::new(),
            fds_end: None,
            after_drop: None,
            partial: false,
            warnings: BTreeMap::new(),
            failures: Vec::new(),
            workers_killed: false,
            late_errors: Vec::new(),
            rss_bound_kib,
        }
    }
}

impl Report {
    fn show(&self, o: &Opts, out: &Path) -> String {
        let mut s = String::new();
        let verdict = if self.failures.is_empty() { "PASSED" } else { "FAILED" };
        let _ = writeln!(
            s,
            "\nsoak {}: {verdict} after {:.0} s ({} workers, seed {}, page cache {})",
            self.mode.name(),
            self.secs,
            o.workers,
            o.seed,
            o.page_cache
        );
        let total: u64 = self.ops.values().sum();
        let _ = writeln!(
            s,
            "  operations verified: {total} in all{}",
            if self.partial {
                " (workers that did not finish counted up to their last 2-second snapshot)"
            } else {
                ""
            }
        );
        let mut line = String::from("   ");
        for k in worker::KINDS {
            let n = self.ops.get(*k).copied().unwrap_or(0);
            let item = format!(" {k} {n},");
            if line.len() + item.len() > 100 {
                let _ = writeln!(s, "{line}");
                line = String::from("   ");
            }
            line.push_str(&item);
        }
        let _ = writeln!(s, "{}", line.trim_end_matches(','));
        let _ = writeln!(
            s,
            "  bytes read and verified: {:.1} MiB",
            self.bytes_verified as f64 / 1048576.0
        );
        if !self.samples.is_empty() {
            let mib = |k: u64| k as f64 / 1024.0;
            let mut rss: Vec<u64> = self.samples.iter().map(|x| x.rss_kib).collect();
            rss.sort_unstable();
            let _ = writeln!(
                s,
                "  daemon RSS: min {:.1} MiB, median {:.1} MiB, max {:.1} MiB (bound {:.1} MiB = page cache + {RSS_ALLOWANCE_MIB} MiB)",
                mib(rss[0]),
                mib(rss[rss.len() / 2]),
                mib(rss[rss.len() - 1]),
                mib(self.rss_bound_kib)
            );
            let step = if self.secs >= 300.0 {
                120.0
            } else {
                (self.secs / 5.0).max(1.0).round()
            };
            let mut curve = Vec::new();
            let mut next = 0.0;
            for x in &self.samples {
                if x.t >= next {
                    curve.push(format!("{:.0} s {:.1}", x.t, mib(x.rss_kib)));
                    next += step;
                    while next <= x.t {
                        next += step;
                    }
                }
            }
            if let Some(last) = self.samples.last() {
                curve.push(format!("end ({:.0} s) {:.1}", last.t, mib(last.rss_kib)));
            }
            let _ = writeln!(s, "  RSS curve (MiB): {}", curve.join(", "));
            let fds_max = self.samples.iter().map(|x| x.fds).max().unwrap_or(0);
            let thr_max = self.samples.iter().map(|x| x.threads).max().unwrap_or(0);
            let _ = writeln!(
                s,
                "  daemon descriptors: {} at start, max {fds_max}, {} after the workers exited; threads max {thr_max}",
                self.samples[0].fds,
                self.fds_end.map_or("-".into(), |n| n.to_string())
            );
        }
        if let Some((rss, pages, known)) = self.after_drop {
            let _ = writeln!(
                s,
                "  after the workers exited and a drop of everything: RSS {:.1} MiB, {pages} pages cached, {known} inodes known",
                rss as f64 / 1024.0
            );
        }
        let warns: u64 = self.warnings.values().sum();
        let _ = writeln!(s, "  rcufs log: {warns} WARN line(s)");
        for (w, n) in self.warnings.iter().take(10) {
            let _ = writeln!(s, "    {n} x {w}");
        }
        let _ = writeln!(
            s,
            "  files: {0}/{1}.csv (samples), {0}/{1}.log (rcufs stderr), {0}/{1}-w*.err (workers)",
            out.display(),
            self.mode.name()
        );
        for e in self.late_errors.iter().take(5) {
            let _ = writeln!(s, "  after workers were killed, the daemon logged: {e}");
        }
        for f in &self.failures {
            let _ = writeln!(s, "  FAILURE: {}", f.replace('\n', "\n    "));
        }
        s
    }
}

/// The watchdog's shared state: when the stat in flight started (ms since
/// the mount, plus one; 0 = none in flight).
struct Watch {
    stop: AtomicBool,
    since_ms: AtomicU64,
}

fn run_mode(o: &Opts, mode: Mode, rcufs: &Path, dir: &Path, out: &Path) -> Report {
    let mut r = Report::new(mode, o.page_cache_bytes / 1024 + RSS_ALLOWANCE_MIB * 1024);
    if let Err(e) = run_mode_in(o, mode, rcufs, dir, out, &mut r) {
        r.failures.push(format!("{e:#}"));
    }
    r
}

fn run_mode_in(o: &Opts, mode: Mode, rcufs: &Path, dir: &Path, out: &Path, r: &mut Report) -> Result<()> {
    let (src, mnt) = (dir.join("src"), dir.join("mnt"));
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(&mnt)?;
    for i in 0..o.workers {
        fs::create_dir_all(src.join(format!("w{i}")))?;
    }
    let log = out.join(format!("{}.log", mode.name()));
    let csv_path = out.join(format!("{}.csv", mode.name()));
    let mut args = vec![
        "--page-cache-size",
        o.page_cache.as_str(),
        "--revalidate",
        "1",
        "--dcache-entries",
        DCACHE_ENTRIES,
        "--coherence",
        o.coherence.as_str(),
    ];
    if mode == Mode::KernelCache {
        args.push("--kernel-cache");
    }
    let mut daemon = Daemon::start(rcufs, &src, &mnt, &args, &log)?;
    let pid = daemon.pid();
    let dev = mount_dev(&mnt);
    let start = Instant::now();
    let until_ms = worker::now_ms() + (o.secs * 1000.0) as u64;

    let watch = Arc::new(Watch {
        stop: AtomicBool::new(false),
        since_ms: AtomicU64::new(0),
    });
    let watchdog = {
        let (watch, mnt) = (Arc::clone(&watch), mnt.clone());
        std::thread::Builder::new()
            .name("soak-watchdog".into())
            .spawn(move || {
                while !watch.stop.load(Ordering::Relaxed) {
                    let t = start.elapsed().as_millis() as u64 + 1;
                    // Relaxed: the main loop only compares times; a value
                    // read late by one poll delays the verdict by 100 ms.
                    watch.since_ms.store(t, Ordering::Relaxed);
                    let _ = fs::metadata(&mnt);
                    watch.since_ms.store(0, Ordering::Relaxed);
                    for _ in 0..10 {
                        if watch.stop.load(Ordering::Relaxed) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            })?
    };

    let exe = std::env::current_exe().context("finding the xtask binary")?;
    let mut workers = Workers(Vec::new());
    let mut spawn_err = None;
    for i in 0..o.workers {
        let _ = fs::remove_file(stats_path(out, mode, i));
        let stdout = File::create(out.join(format!("{}-w{i}.out", mode.name())))?;
        let stderr = File::create(out.join(format!("{}-w{i}.err", mode.name())))?;
        let child = Command::new(&exe)
            .arg("soak-worker")
            .args(["--id", &i.to_string(), "--workers", &o.workers.to_string()])
            .arg("--mnt")
            .arg(&mnt)
            .arg("--src")
            .arg(&src)
            .args(["--seed", &o.seed.to_string(), "--until-ms", &until_ms.to_string()])
            .args(["--max-ops", &o.max_ops.to_string(), "--skip", &o.skip.join(",")])
            .arg("--stats")
            .arg(stats_path(out, mode, i))
            .args(match mode {
                // See `worker::SrcLock`.
                Mode::KernelCache => vec!["--src-lock".into(), out.join("kernel-cache.lock").into_os_string()],
                Mode::Default => Vec::new(),
            })
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn();
        match child {
            Ok(c) => workers.0.push((i, Some(c))),
            Err(e) => {
                spawn_err = Some(format!("cannot start worker {i}: {e}"));
                break;
            }
        }
    }
    if let Some(e) = spawn_err {
        r.failures.push(e);
    }

    let mut csv = File::create(&csv_path)?;
    writeln!(csv, "elapsed_s,rss_kib,fds,threads")?;
    let mut log_pos = 0u64;
    let mut next_sample = Instant::now();
    let hard_deadline = start + Duration::from_secs_f64(o.secs + 60.0);
    let mut hung = false;
    let mut daemon_gone = false;
    while r.failures.is_empty() {
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(1);
            if let Some(s) = sample(pid, start.elapsed().as_secs_f64()) {
                writeln!(csv, "{:.1},{},{},{}", s.t, s.rss_kib, s.fds, s.threads)?;
                r.samples.push(s);
                if s.rss_kib > r.rss_bound_kib {
                    r.failures.push(format!(
                        "daemon RSS {:.1} MiB above the bound {:.1} MiB at {:.0} s",
                        s.rss_kib as f64 / 1024.0,
                        r.rss_bound_kib as f64 / 1024.0,
                        s.t
                    ));
                }
            }
        }
        scan_log(&log, &mut log_pos, r);
        if INTERRUPTED.load(Ordering::Relaxed) {
            r.failures.push("interrupted (SIGINT or SIGTERM)".into());
        }
        if let Some(status) = daemon.exited() {
            daemon_gone = true;
            r.failures.push(format!(
                "the daemon exited during the run ({status}); its log ends:\n{}",
                tail(&daemon.log_text(), 20)
            ));
        }
        let since = watch.since_ms.load(Ordering::Relaxed);
        let now_ms = start.elapsed().as_millis() as u64 + 1;
        if since != 0 && now_ms.saturating_sub(since) > HANG_SECS * 1000 {
            hung = true;
            let stacks = stacks(pid, &workers.0);
            let stack_file = out.join(format!("{}-hang.txt", mode.name()));
            let _ = fs::write(&stack_file, &stacks);
            let how = abort_connection(dev, &mut daemon);
            r.failures.push(format!(
                "the mount stopped answering: a stat of its root blocked for more than {HANG_SECS} s at {:.0} s; \
                 {how}; kernel stacks of the daemon's threads and the workers in {}",
                (since - 1) as f64 / 1000.0,
                stack_file.display()
            ));
        }
        let mut running = 0;
        for (i, slot) in &mut workers.0 {
            let Some(child) = slot else { continue };
            match child.try_wait()? {
                None => running += 1,
                Some(status) => {
                    *slot = None;
                    if !status.success() {
                        let err = fs::read_to_string(out.join(format!("{}-w{i}.err", mode.name()))).unwrap_or_default();
                        r.failures
                            .push(format!("worker {i} failed ({status}):\n{}", err.trim_end()));
                    }
                }
            }
        }
        if running == 0 {
            break;
        }
        if Instant::now() > hard_deadline {
            r.failures
                .push("workers still running 60 s after the deadline (they must stop by themselves)".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    r.secs = start.elapsed().as_secs_f64();

    // Workers still running after a failure: after a hang they return once
    // the connection is aborted, with their last operations on stderr.
    if workers.0.iter().any(|w| w.1.is_some()) && hung {
        std::thread::sleep(Duration::from_secs(3));
    }
    for (i, slot) in &mut workers.0 {
        if let Some(mut child) = slot.take() {
            if let Ok(Some(status)) = child.try_wait() {
                let err = fs::read_to_string(out.join(format!("{}-w{i}.err", mode.name()))).unwrap_or_default();
                if !status.success() && !err.is_empty() {
                    r.failures.push(format!("worker {i} ({status}):\n{}", err.trim_end()));
                }
                continue;
            }
            r.workers_killed = true;
            let _ = child.kill();
            reap(child, *i);
        }
    }

    for i in 0..workers.0.len() {
        collect(&stats_path(out, mode, i), i, r);
    }

    if r.failures.is_empty() {
        // The descriptors the daemon holds once every worker has closed its
        // files (the kernel sends RELEASE asynchronously).
        std::thread::sleep(Duration::from_millis(1500));
        r.fds_end = sample(pid, start.elapsed().as_secs_f64()).map(|s| s.fds);
    }
    // Also after a failure (a miscompare, the RSS bound), as long as the
    // mount still answers: what a full drop leaves tells a leak from a cache.
    match daemon.exited() {
        Some(status) => r.failures.push(format!(
            "the daemon exited before the end of the run ({status}); its log ends:\n{}",
            tail(&daemon.log_text(), 20)
        )),
        None if !hung && !daemon_gone => {
            if let Err(e) = final_drop(rcufs, &mnt, pid, r) {
                r.failures.push(format!("{e:#}"));
            }
        }
        None => {}
    }
    watch.stop.store(true, Ordering::Relaxed);
    if let Err(e) = daemon.stop() {
        r.failures.push(format!("stopping the daemon: {e:#}"));
    }
    // The watchdog's stat returns once the mount is gone or aborted.
    let _ = watchdog.join();
    scan_log(&log, &mut log_pos, r);
    if mounted_at(&mnt).is_some() {
        lazy_unmount(&mnt);
    }
    Ok(())
}

/// With every worker gone, drops everything (mode 3 on the mount root, as
/// root) and checks that the page cache is then empty: a page left over
/// belongs to an inode no drop can reach any more, which is memory only
/// restarting the daemon gets back. Records the RSS after the drop.
fn final_drop(rcufs: &Path, mnt: &Path, pid: u32, r: &mut Report) -> Result<()> {
    worker::drop_dir(mnt, 3, false).context("the final drop of the mount root")?;
    // Inodes the drop released are freed through the dcache's epoch, which
    // advances as threads pin it (every lookup does): the page-cache entries
    // of those inodes go at the reap that follows (every stats read reaps).
    // So give it a few rounds of lookups and stats reads, up to 5 s, before
    // calling what is left unreachable.
    let deadline = Instant::now() + Duration::from_secs(5);
    let v = loop {
        let out = Command::new(rcufs).args(["stats", "--json"]).arg(mnt).output()?;
        if !out.status.success() {
            bail!("rcufs stats failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("rcufs stats --json")?;
        if v["pagecache"]["pages"].as_u64().unwrap_or(0) == 0 || Instant::now() > deadline {
            break v;
        }
        for i in 0..256 {
            let _ = std::fs::symlink_metadata(mnt.join(format!(".soak-no-such-name-{i}")));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let pages = v["pagecache"]["pages"].as_u64().unwrap_or(0);
    let bytes = v["pagecache"]["bytes_cached"].as_u64().unwrap_or(0);
    r.after_drop = Some((
        sample(pid, 0.0).map_or(0, |s| s.rss_kib),
        pages,
        v["inodes"]["known"].as_u64().unwrap_or(0),
    ));
    // A drop's answer waits for its kernel invalidations up to a bound; one
    // that reached it stalled the drop's caller (and, for a drop by
    // `user.rcufs.drop`, every request needing its directory's lock) that
    // long: the two causes seen so far were deadlocks broken by the bound.
    let timeouts = v["kernel_inval"]["timeouts"].as_u64().unwrap_or(0);
    if timeouts != 0 {
        r.failures.push(format!(
            "STALLED DROPS: {timeouts} drop(s) waited out their bound for their kernel invalidations (the \
             daemon's log says \"took longer than\"); the stats: {}",
            v["kernel_inval"]
        ));
    }
    if pages != 0 {
        bail!(
            "UNREACHABLE PAGES: after the workers exited and a drop of everything (mode 3 on the mount root, as \
             root), the page cache still holds {pages} pages ({bytes} bytes) that the drop did not reach ({} \
             inodes known); pages of files the kernel has forgotten are never freed; the stats: {}",
            v["inodes"]["known"],
            v
        );
    }
    Ok(())
}

/// The worker processes of a mode. Dropping it (an early return, a panic)
/// kills, by process id, those still running; it is declared after the
/// [`Daemon`], so it drops first and the workers are gone before the unmount.
struct Workers(Vec<(usize, Option<Child>)>);

impl Drop for Workers {
    fn drop(&mut self) {
        for (i, slot) in &mut self.0 {
            if let Some(mut child) = slot.take() {
                let _ = child.kill();
                reap(child, *i);
            }
        }
    }
}

/// Waits (up to 10 s) for a killed worker; a worker stuck in the kernel on a
/// dead mount is left to exit on its own.
fn reap(mut child: Child, i: usize) {
    for _ in 0..100 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("xtask soak: worker {i} (pid {}) did not exit after SIGKILL", child.id());
}

fn stats_path(out: &Path, mode: Mode, i: usize) -> std::path::PathBuf {
    out.join(format!("{}-w{i}.json", mode.name()))
}

/// Adds a worker's counts to the report. A worker that did not finish (it
/// failed, or was killed after another one failed) left its last 2-second
/// snapshot; a run without failures needs every worker's final counts.
fn collect(path: &Path, i: usize, r: &mut Report) {
    let v = fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    if v["final"] != serde_json::Value::Bool(true) {
        if r.failures.is_empty() {
            r.failures.push(format!(
                "worker {i} exited 0 without its final counts ({})",
                path.display()
            ));
        }
        r.partial = true;
    }
    if let Some(ops) = v["ops"].as_object() {
        for (k, n) in ops {
            *r.ops.entry(k.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    r.bytes_verified += v["bytes_verified"].as_u64().unwrap_or(0);
}

/// Reads the daemon's log from `pos` on: ERROR lines fail the run, WARN lines
/// are counted (by message, without the timestamp).
fn scan_log(log: &Path, pos: &mut u64, r: &mut Report) {
    let Ok(mut f) = File::open(log) else { return };
    if f.seek(SeekFrom::Start(*pos)).is_err() {
        return;
    }
    let mut text = String::new();
    if f.read_to_string(&mut text).is_err() {
        return;
    }
    // Only whole lines; the rest is read next time.
    let Some(end) = text.rfind('\n') else { return };
    *pos += end as u64 + 1;
    for line in text[..end].lines() {
        let plain = strip_ansi(line);
        let mut words = plain.split_whitespace();
        let _time = words.next();
        let rest: Vec<&str> = words.collect();
        match rest.first().copied() {
            Some("ERROR") if r.workers_killed => r.late_errors.push(plain),
            Some("ERROR") => r.failures.push(format!("the daemon logged an error: {plain}")),
            Some("WARN") => *r.warnings.entry(rest[1..].join(" ")).or_default() += 1,
            _ => {}
        }
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ ... final byte in @..~
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) && d != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The kernel stacks (`/proc/PID/task/TID/stack`) of the daemon's threads and
/// of the workers, for a hang report.
fn stacks(daemon: u32, workers: &[(usize, Option<Child>)]) -> String {
    let mut s = String::new();
    let mut pids = vec![("rcufs".to_string(), daemon)];
    for (i, c) in workers {
        if let Some(c) = c {
            pids.push((format!("worker {i}"), c.id()));
        }
    }
    for (who, pid) in pids {
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let tid = t.file_name().to_string_lossy().into_owned();
            let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let stack = fs::read_to_string(t.path().join("stack")).unwrap_or_default();
            let _ = writeln!(s, "== {who} pid {pid} tid {tid} ({})\n{stack}", comm.trim());
        }
    }
    s
}

/// Aborts the FUSE connection of a hung mount: through fusectl (mounting it
/// on `/sys/fs/fuse/connections` if needed), else by killing the daemon.
fn abort_connection(dev: Option<(u32, u32)>, daemon: &mut Daemon) -> String {
    let conns = Path::new("/sys/fs/fuse/connections");
    if let Some((_, minor)) = dev {
        if !conns.join(minor.to_string()).exists() {
            let _ = Command::new("mount")
                .args(["-t", "fusectl", "fusectl"])
                .arg(conns)
                .status();
        }
        let abort = conns.join(format!("{minor}/abort"));
        if fs::write(&abort, "1").is_ok() {
            return format!("aborted the FUSE connection ({})", abort.display());
        }
    }
    daemon.kill();
    "killed the daemon (SIGKILL) to abort the FUSE connection (fusectl unavailable)".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report::new(Mode::Default, 0)
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("1.5k"), Some(1536));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1M"), None);
    }

    #[test]
    fn log_levels() {
        let dir = std::env::temp_dir().join(format!("rcufs-soak-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        fs::write(
            &log,
            "2026-01-01T00:00:00Z  INFO rcufs: serving\n\
             2026-01-01T00:00:01Z  WARN fuse_fs::fuse: odd errno=5\n\
             2026-01-01T00:00:02Z  WARN fuse_fs::fuse: odd errno=5\n\
             \x1b[2m2026-01-01T00:00:03Z\x1b[0m \x1b[31mERROR\x1b[0m fuser::reply: boom\n\
             2026-01-01T00:00:04Z ERROR half a line",
        )
        .unwrap();
        let mut r = report();
        let mut pos = 0;
        scan_log(&log, &mut pos, &mut r);
        assert_eq!(r.warnings.get("fuse_fs::fuse: odd errno=5"), Some(&2));
        assert_eq!(r.failures.len(), 1, "{:?}", r.failures);
        assert!(r.failures[0].contains("ERROR fuser::reply: boom"));
        // The unfinished last line is read once it is whole; after workers
        // were killed an ERROR line is listed, not failed on.
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"\n").unwrap();
        r.workers_killed = true;
        scan_log(&log, &mut pos, &mut r);
        assert_eq!(r.failures.len(), 1);
        assert_eq!(r.late_errors.len(), 1);
        let _ = fs::remove_dir_all(&dir);
    }
}
