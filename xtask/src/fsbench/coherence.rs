//! The `coherence` section of `cargo xtask fsbench`: what watching the
//! source (`--coherence watch`) costs and gains against timeouts
//! (`--coherence ttl`, the default 1 s), in both modes.
//!
//! For each mode (default and `--kernel-cache`) a `watch` mount and a `ttl`
//! mount of the same source run side by side:
//! - hot `stat` of the first 15,000 files of the metadata tree (10,000 with
//!   `--quick`), one thread, and hot `stat` of missing names: 7 rounds of
//!   native, watch, ttl (after a warm-up pass, the median of 3 timed passes
//!   of the files, of 9 of the 1,500 missing names, whose single pass takes
//!   only a millisecond or two), ratios taken within each round, medians
//!   reported. Each pass is also timed in this process's CPU time (its stat
//!   threads included); that ratio (`cpu_ratio`) is reported where no
//!   lookup reached the daemon during the rounds (the kernel answered every
//!   `stat` itself, so that CPU time is the whole cost): it does not move
//!   with what else runs on the machine, the wall-clock ratio does;
//! - visibility: how long after a change made directly in the source
//!   (a file created under a name the mount has just answered "missing",
//!   and a chmod of a file whose attributes it has just answered) a `stat`
//!   through the mount first shows it; the `stat` is repeated every 50 µs.
//!   200 samples of each kind with `watch` (40 with `--quick`), 5 with `ttl`
//!   (each takes about the interval);
//! - with `watch` only: hot `stat` while another thread creates and deletes
//!   100,000 files in a directory outside the source on the same
//!   filesystem (the watch's filesystem mark reports all of them), against
//!   the same without churn, samples of at least 1.5 s; the native source's
//!   own slowdown under the same churn is measured alongside, so the watch's
//!   cost is the ratio of the two;
//! - with `watch` only: a tmpfs attached and detached under the source
//!   before a pass of hot `stat`s, against a pass without (5 rounds): what
//!   a mount coming and going under the source costs the caches;
//! - with `watch` only: the watcher thread's CPU time per rename of a
//!   directory next to the source (each starts a list of the namespace's
//!   mounts, in case one came in with it) against per rename of a file
//!   (no list), each rename its own round.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{Mount, Scale, median, meta_files, stat_all, stat_missing};

/// One mount configuration of the section.
struct Config {
    name: &'static str,
    args: &'static [&'static str],
    watch: bool,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "rcufs watch",
        args: &["--coherence", "watch"],
        watch: true,
    },
    Config {
        name: "rcufs ttl",
        args: &["--coherence", "ttl"],
        watch: false,
    },
    Config {
        name: "rcufs-kc watch",
        args: &["--coherence", "watch", "--kernel-cache"],
        watch: true,
    },
    Config {
        name: "rcufs-kc ttl",
        args: &["--coherence", "ttl", "--kernel-cache"],
        watch: false,
    },
];

/// This process's CPU time (user and system, of all its threads, those
/// that have exited included: `stat_all` runs its stats in a thread of its
/// own).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_PROCESS_CPUTIME_ID
    // needs nothing else.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One sample: units per second of wall time and of the process's CPU time.
#[derive(Clone, Copy)]
struct Rate {
    wall: f64,
    cpu: f64,
}

/// Runs `f` (which returns how many units it processed) once untimed, then
/// `reps` times timed; the median rates, in wall and in CPU time.
fn sample(reps: usize, mut f: impl FnMut() -> Result<u64>) -> Result<Rate> {
    f()?;
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (w0, c0) = (Instant::now(), process_cpu());
        let n = f()? as f64;
        let (w, c) = (w0.elapsed(), process_cpu() - c0);
        wall.push(n / w.as_secs_f64());
        // A pass shorter than the clock's resolution cannot happen here
        // (1,500 syscalls at least), but keep the ratio finite.
        cpu.push(n / c.as_secs_f64().max(1e-9));
    }
    Ok(Rate {
        wall: median(wall),
        cpu: median(cpu),
    })
}

/// Lookups the mount's daemon served so far (its dentry cache's hits,
/// misses and negative hits), or `None` if its counters are unavailable.
fn lookups_served(m: &Mount) -> Option<u64> {
    let d = &m.stats()["dcache"];
    Some(d["hits"].as_u64()? + d["misses"].as_u64()? + d["negative_hits"].as_u64()?)
}

/// The native, watch and ttl rates of one workload, a triple per round.
#[derive(Default)]
struct Rounds {
    n: Vec<f64>,
    w: Vec<f64>,
    t: Vec<f64>,
    /// The same in CPU time.
    nc: Vec<f64>,
    wc: Vec<f64>,
    tc: Vec<f64>,
}

impl Rounds {
    fn push(&mut self, native: Rate, watch: Rate, ttl: Rate) {
        self.n.push(native.wall);
        self.w.push(watch.wall);
        self.t.push(ttl.wall);
        self.nc.push(native.cpu);
        self.wc.push(watch.cpu);
        self.tc.push(ttl.cpu);
    }

    /// The median over the rounds of `a / b`, each taken within its round.
    fn ratio(a: &[f64], b: &[f64]) -> f64 {
        median(a.iter().zip(b).map(|(x, y)| x / y).collect())
    }

    /// "native / watch / ttl" medians, for the table.
    fn rates(&self) -> String {
        let m = |v: &[f64]| median(v.to_vec());
        format!("{:.0} / {:.0} / {:.0}", m(&self.n), m(&self.w), m(&self.t))
    }
}

/// Percentile `p` (0..=100) of `v` (sorted here).
fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Spins (50 µs apart) until `f` holds; the time it took, or `None` after 10 s.
fn until(f: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if f() {
            return Some(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(10) {
            return None;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Visibility samples, in milliseconds: `(creates, chmods, timeouts)`.
fn visibility(src: &Path, mnt: &Path, tag: &str, samples: usize) -> Result<(Vec<f64>, Vec<f64>, usize)> {
    let dir = format!("coherence-{tag}");
    fs::create_dir_all(src.join(&dir))?;
    // Let the mount see the directory.
    until(|| mnt.join(&dir).exists()).context("the sample directory never appeared through the mount")?;
    let (mut creates, mut chmods, mut timeouts) = (Vec::new(), Vec::new(), 0);
    for i in 0..samples {
        let rel = format!("{dir}/f{i}");
        let (s, m) = (src.join(&rel), mnt.join(&rel));
        // The mount answers "missing" (and caches that), twice.
        for _ in 0..2 {
            if fs::symlink_metadata(&m).is_ok() {
                anyhow::bail!("{} exists before it was created", m.display());
            }
        }
        fs::write(&s, b"x")?;
        match until(|| fs::symlink_metadata(&m).is_ok()) {
            Some(d) => creates.push(d.as_secs_f64() * 1e3),
            None => timeouts += 1,
        }
        // Its attributes are cached; change them in the source.
        let mode = |p: &Path| fs::symlink_metadata(p).map(|md| md.permissions().mode() & 0o777);
        mode(&m)?;
        mode(&m)?;
        fs::set_permissions(&s, fs::Permissions::from_mode(0o600))?;
        match until(|| mode(&m).is_ok_and(|x| x == 0o600)) {
            Some(d) => chmods.push(d.as_secs_f64() * 1e3),
            None => timeouts += 1,
        }
    }
    Ok((creates, chmods, timeouts))
}

/// Stats every path of `paths` over and over for at least `secs`; the rate.
fn stat_for(paths: &[PathBuf], secs: f64) -> Result<f64> {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        n += stat_all(paths, 1)?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Creates and deletes `n` files under `dir`, over and over, until `stop`.
fn churn(dir: &Path, n: usize, stop: &AtomicBool, ops: &AtomicU64) -> Result<()> {
    fs::create_dir_all(dir)?;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..n {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            fs::write(dir.join(format!("c{i}")), b"")?;
            ops.fetch_add(1, Ordering::Relaxed);
        }
        for i in 0..n {
            let _ = fs::remove_file(dir.join(format!("c{i}")));
            ops.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Runs the section; returns its records and its markdown table.
pub(super) fn run(
    rcufs: &Path,
    src: &Path,
    mnt: &Path,
    work: &Path,
    s: &Scale,
    logs: &Path,
) -> Result<(Vec<Value>, String)> {
    let all = meta_files(src, s);
    let count = all.len().min(15_000);
    let rel: Vec<PathBuf> = all[..count]
        .iter()
        .map(|p| p.strip_prefix(src).expect("under src").to_path_buf())
        .collect();
    let missing_rel: Vec<PathBuf> = (0..s.meta_dirs.min(15))
        .flat_map(|d| (0..s.missing_per_dir).map(move |i| PathBuf::from(format!("meta/d{d:03}/gone{i:04}"))))
        .collect();
    let under = |root: &Path, v: &[PathBuf]| -> Vec<PathBuf> { v.iter().map(|r| root.join(r)).collect() };
    let (native_files, native_missing) = (under(src, &rel), under(src, &missing_rel));
    let quick = s.meta_files < 1_000;
    let mut records = Vec::new();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n### coherence: watch vs ttl ({count} files hot, {} missing names; each mode's watch and ttl mounts side by side, native in the same rounds)\n",
        missing_rel.len()
    );
    let _ = writeln!(
        md,
        "| mount | samples | create seen p50 / p99 (ms) | chmod seen p50 / p99 (ms) | timeouts |\n|---|---:|---:|---:|---:|"
    );
    let mut churn_md = String::new();
    let mut ab_md = String::new();
    let mut cpu_md = String::new();
    let mut mount_md = String::new();
    let mut rename_md = String::new();
    for pair in CONFIGS.chunks(2) {
        let (cw, ct) = (&pair[0], &pair[1]);
        // Both mounts at once, so that every round measures native, watch
        // and ttl within the same few seconds; ratios are taken per round.
        let mount = |c: &Config, at: &str| {
            let extra: Vec<String> = c.args.iter().map(|a| a.to_string()).collect();
            let log = logs.join(format!("coherence-{}.log", c.name.replace(' ', "-")));
            Mount::new(rcufs, src, &mnt.with_file_name(at), &extra, &log)
        };
        let mw = mount(cw, "mnt-watch")?;
        let mt = mount(ct, "mnt-ttl")?;
        let (fw, ft) = (under(mw.path(), &rel), under(mt.path(), &rel));
        let (mw_miss, mt_miss) = (under(mw.path(), &missing_rel), under(mt.path(), &missing_rel));
        let (mut hot, mut miss) = (Rounds::default(), Rounds::default());
        // Whatever the mounts answer for the first time, before counting.
        stat_all(&fw, 1)?;
        stat_all(&ft, 1)?;
        stat_missing(&mw_miss)?;
        stat_missing(&mt_miss)?;
        let served = |m: &Mount| lookups_served(m);
        let before = (served(&mw), served(&mt));
        for _ in 0..7 {
            hot.push(
                sample(3, || stat_all(&native_files, 1))?,
                sample(3, || stat_all(&fw, 1))?,
                sample(3, || stat_all(&ft, 1))?,
            );
            miss.push(
                sample(9, || stat_missing(&native_missing))?,
                sample(9, || stat_missing(&mw_miss))?,
                sample(9, || stat_missing(&mt_miss))?,
            );
        }
        // This CPU time is the whole cost only if the kernel
        // answered every stat itself.
        let during = |b: Option<u64>, m: &Mount| Some(served(m)?.saturating_sub(b?));
        let (w_served, t_served) = (during(before.0, &mw), during(before.1, &mt));
        let (w_quiet, t_quiet) = (w_served == Some(0), t_served == Some(0));
        let cpu_ratio = |ok: bool, a: &[f64], b: &[f64]| ok.then(|| Rounds::ratio(a, b));
        let (hw, ht, hwt) = (
            Rounds::ratio(&hot.w, &hot.n),
            Rounds::ratio(&hot.t, &hot.n),
            Rounds::ratio(&hot.w, &hot.t),
        );
        let (mw_, mt_, mwt) = (
            Rounds::ratio(&miss.w, &miss.n),
            Rounds::ratio(&miss.t, &miss.n),
            Rounds::ratio(&miss.w, &miss.t),
        );
        let _ = writeln!(
            ab_md,
            "| {} | {} | {hw:.2}x | {ht:.2}x | {hwt:.2}x | {} | {mw_:.2}x | {mt_:.2}x | {mwt:.2}x |",
            cw.name.trim_end_matches(" watch"),
            hot.rates(),
            miss.rates(),
        );
        let cpu = [
            (
                cpu_ratio(w_quiet, &hot.wc, &hot.nc),
                cpu_ratio(w_quiet, &miss.wc, &miss.nc),
            ),
            (
                cpu_ratio(t_quiet, &hot.tc, &hot.nc),
                cpu_ratio(t_quiet, &miss.tc, &miss.nc),
            ),
        ];
        for ((c, hot, miss), ((hot_cpu, miss_cpu), served)) in [(cw, hw, mw_), (ct, ht, mt_)]
            .into_iter()
            .zip(cpu.into_iter().zip([w_served, t_served]))
        {
            records.push(
                json!({"name": format!("coherence: hot stat, {} vs native (median of 7 per-round ratios)", c.name),
                "ratio": hot, "cpu_ratio": hot_cpu, "lookups_served_during_rounds": served, "unit": "x native",
                "target": if c.name == "rcufs-kc watch" { json!(0.85) } else { Value::Null }}),
            );
            records.push(json!({"name": format!("coherence: stat of missing names, {} vs native (median of 7 per-round ratios)", c.name),
                "ratio": miss, "cpu_ratio": miss_cpu, "unit": "x native",
                "target": if c.name == "rcufs-kc watch" { json!(0.85) } else { Value::Null }}));
        }
        let show = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |x| format!("{x:.2}x"));
        for (c, (hot_cpu, miss_cpu)) in [cw, ct].into_iter().zip(cpu) {
            let _ = writeln!(cpu_md, "| {} | {} | {} |", c.name, show(hot_cpu), show(miss_cpu));
        }
        records.push(
            json!({"name": format!("coherence: hot stat, {} vs {} (median of 7 per-round ratios)", cw.name, ct.name),
            "ratio": hwt, "unit": "x", "missing_names_ratio": mwt}),
        );
        for (c, m) in [(ct, &mt), (cw, &mw)] {
            let samples = if c.watch { if quick { 40 } else { 200 } } else { 5 };
            let tag = c.name.replace(' ', "-");
            let (creates, chmods, timeouts) = visibility(src, m.path(), &tag, samples)?;
            let (c50, c99, m50, m99) = (
                percentile(creates.clone(), 50.0),
                percentile(creates, 99.0),
                percentile(chmods.clone(), 50.0),
                percentile(chmods, 99.0),
            );
            let _ = writeln!(
                md,
                "| {} | {samples} | {c50:.2} / {c99:.2} | {m50:.2} / {m99:.2} | {timeouts} |",
                c.name
            );
            records.push(
                json!({"name": format!("coherence: change visible through the mount, {}", c.name),
            "create_ms_p50": c50, "create_ms_p99": c99, "chmod_ms_p50": m50, "chmod_ms_p99": m99,
            "samples": samples, "timeouts": timeouts, "unit": "ms",
            "target_p99_ms": if c.watch { json!(10.0) } else { Value::Null }}),
            );
            if c.watch {
                let files = &fw;
                // Churn elsewhere on the same filesystem: 100,000 files (10,000
                // with --quick) created and deleted in a loop.
                let n = if quick { 10_000 } else { 100_000 };
                let dir = work.join(format!("churn-{tag}"));
                let stop = Arc::new(AtomicBool::new(false));
                let ops = Arc::new(AtomicU64::new(0));
                let before = m.stats();
                let files = &files[..];
                let (nq, oq, nc, oc, churned) = std::thread::scope(|sc| -> Result<(f64, f64, f64, f64, u64)> {
                    // Quiet first, then under churn, each interleaved with
                    // native, each sample at least 1.5 s long (so that the
                    // churn really runs during the mount's samples).
                    let (mut nq, mut oq) = (vec![], vec![]);
                    for _ in 0..3 {
                        nq.push(stat_for(&native_files, 1.5)?);
                        oq.push(stat_for(files, 1.5)?);
                    }
                    let h = {
                        let (stop, ops, dir) = (stop.clone(), ops.clone(), dir.clone());
                        sc.spawn(move || churn(&dir, n, &stop, &ops))
                    };
                    // Let the churn get going.
                    std::thread::sleep(Duration::from_millis(500));
                    let (mut nc, mut oc) = (vec![], vec![]);
                    let mut churned = 0;
                    for _ in 0..3 {
                        nc.push(stat_for(&native_files, 1.5)?);
                        let start = ops.load(Ordering::Relaxed);
                        oc.push(stat_for(files, 1.5)?);
                        churned += ops.load(Ordering::Relaxed) - start;
                    }
                    stop.store(true, Ordering::Relaxed);
                    h.join().expect("churn thread panicked")?;
                    Ok((median(nq), median(oq), median(nc), median(oc), churned))
                })?;
                let _ = fs::remove_dir_all(&dir);
                let after = m.stats();
                let events = after["coherence"]["events"].as_u64().unwrap_or(0)
                    - before["coherence"]["events"].as_u64().unwrap_or(0);
                let own = oc / oq;
                let native = nc / nq;
                let _ = writeln!(
                    churn_md,
                    "| {} | {oq:.0} | {oc:.0} | {own:.3} | {native:.3} | {:.3} | {churned} | {events} |",
                    c.name,
                    own / native
                );
                records.push(
                    json!({"name": format!("coherence: hot stat under churn of {n} files elsewhere, {}", c.name),
                "ours": oc, "baseline": oq, "unit": "stat/s", "ratio": own,
                "native_ratio": native, "relative_to_native": own / native, "churn_ops": churned,
                "watch_events": events, "target_relative": 0.9}),
                );
                let (quiet, changed, drops) = after_mount_changes(src, m, files)?;
                let _ = writeln!(
                    mount_md,
                    "| {} | {quiet:.0} | {changed:.0} | {:.3} | {drops} |",
                    c.name,
                    changed / quiet
                );
                records.push(json!({
                    "name": format!("coherence: first hot stat pass after a mount attached and detached under the source, {}", c.name),
                    "ours": changed, "baseline": quiet, "unit": "stat/s", "ratio": changed / quiet,
                    "drops": drops,
                }));
                let r = rename_rounds(src, m, if quick { 300 } else { 1000 })?;
                let _ = writeln!(
                    rename_md,
                    "| {} | {} | {:.1} | {:.1} | {:.2} | {} |",
                    c.name,
                    r.mounts,
                    r.dir_us,
                    r.file_us,
                    r.dir_us / r.file_us,
                    r.drops
                );
                records.push(json!({
                    "name": format!("coherence: watcher CPU per round, a directory renamed elsewhere on the source's filesystem (the mounts listed) vs a file, {}", c.name),
                    "ours": r.dir_us, "baseline": r.file_us, "unit": "us of watcher CPU per rename",
                    "ratio": r.dir_us / r.file_us, "mounts_in_namespace": r.mounts, "renames": r.renames,
                    "drops": r.drops,
                }));
            }
        }
        drop(mw);
        drop(mt);
    }
    for (head, rows) in [
        (
            "| mode | hot stat/s native / watch / ttl | watch vs native | ttl vs native | watch vs ttl | missing/s native / watch / ttl | watch vs native | ttl vs native | watch vs ttl |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            &ab_md,
        ),
        (
            "| mount (in the benchmark's CPU time; - where lookups reached the daemon during the rounds) | hot stat vs native | missing names vs native |\n|---|---:|---:|",
            &cpu_md,
        ),
        (
            "| mount under churn elsewhere | hot stat/s quiet | under churn | ratio | native's ratio | relative | churn ops during the mount's samples | watch events |\n|---|---:|---:|---:|---:|---:|---:|---:|",
            &churn_md,
        ),
        (
            "| mount, a tmpfs attached and detached under the source before each pass (medians of 5) | hot stat/s, a pass without | the first pass after | ratio | cache drops |\n|---|---:|---:|---:|---:|",
            &mount_md,
        ),
        (
            "| mount, renames by another process next to the source, each its own watcher round (medians of 3 alternated sets) | mounts in the namespace | µs of watcher CPU per directory rename | per file rename | ratio | cache drops |\n|---|---:|---:|---:|---:|---:|",
            &rename_md,
        ),
    ] {
        let _ = writeln!(md, "\n{head}");
        md.push_str(rows);
    }
    Ok((records, md))
}

/// What [`rename_rounds`] measured.
struct RenameRounds {
    renames: usize,
    mounts: usize,
    dir_us: f64,
    file_us: f64,
    drops: u64,
}

/// What learning the mounts costs the watch: the CPU time of the daemon's
/// watcher thread per rename of a directory on the source's filesystem
/// (each makes the next round list the namespace's mounts, in case one
/// came under the source with it), against as many renames of a file
/// (which list nothing). Renamed by this process, outside the source (a
/// move into it would change what is cached), 2 ms apart so that each is a
/// round of its own; `n` of each kind in 3 alternated sets; the medians,
/// and the drops of every cache the watch made meanwhile.
fn rename_rounds(src: &Path, m: &Mount, n: usize) -> Result<RenameRounds> {
    let pid = m.pid().context("the daemon's pid")?;
    let watcher_ns = || -> Result<u64> {
        for t in fs::read_dir(format!("/proc/{pid}/task"))? {
            let t = t?.path();
            if fs::read_to_string(t.join("comm")).unwrap_or_default().trim() == "rcufs-watch" {
                // Its first field: nanoseconds on a CPU.
                let s = fs::read_to_string(t.join("schedstat"))?;
                return s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .context("schedstat of the watcher thread");
            }
        }
        bail!("no rcufs-watch thread in process {pid}")
    };
    let base = src.parent().context("the source's parent")?.join("rename-rounds");
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(base.join("a/d"))?;
    fs::create_dir_all(base.join("b"))?;
    fs::write(base.join("a/f"), b"f")?;
    let drops = |m: &Mount| m.stats()["drops"]["requests"].as_u64().unwrap_or(0);
    let drops_before = drops(m);
    let (mut dir_us, mut file_us) = (vec![], vec![]);
    for round in 0..3 {
        for dirs in if round % 2 == 0 { [true, false] } else { [false, true] } {
            let name = if dirs { "d" } else { "f" };
            let (a, b) = (base.join("a").join(name), base.join("b").join(name));
            std::thread::sleep(Duration::from_millis(200));
            let before = watcher_ns()?;
            for i in 0..n {
                let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                fs::rename(from, to)?;
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(200));
            let us = (watcher_ns()? - before) as f64 / 1e3 / n as f64;
            if dirs {
                dir_us.push(us)
            } else {
                file_us.push(us)
            }
            if n % 2 == 1 {
                fs::rename(&b, &a)?;
            }
        }
    }
    let _ = fs::remove_dir_all(&base);
    let mounts = fs::read_to_string("/proc/self/mountinfo")?.lines().count();
    Ok(RenameRounds {
        renames: n,
        mounts,
        dir_us: median(dir_us),
        file_us: median(file_us),
        drops: drops(m) - drops_before,
    })
}

/// A tmpfs attached and detached under the source (as a chroot's `/proc`
/// comes and goes in a build tree), and what the first pass of hot `stat`s
/// over `files` after it runs at, against a pass without: 5 rounds, the
/// medians in stat/s, and the drops of every cache the watch made
/// (`drops.requests` of the mount's stats; a build that drops everything
/// on such a change, or the changes it cannot place, counts one each).
fn after_mount_changes(src: &Path, m: &Mount, files: &[PathBuf]) -> Result<(f64, f64, u64)> {
    let point = src.join("mount-change");
    fs::create_dir_all(&point)?;
    let pass = || -> Result<f64> {
        let t = Instant::now();
        let n = stat_all(files, 1)?;
        Ok(n as f64 / t.elapsed().as_secs_f64())
    };
    let stat = |sec: &str, key: &str| m.stats()[sec][key].as_u64().unwrap_or(0);
    let mount_changes = || stat("coherence", "mount_changes") + stat("coherence", "mount_drops");
    let run = |cmd: &mut std::process::Command| -> Result<()> {
        let st = cmd.status().with_context(|| format!("running {cmd:?}"))?;
        anyhow::ensure!(st.success(), "{cmd:?}: {st}");
        Ok(())
    };
    let drops_before = stat("drops", "requests");
    let (mut quiet, mut changed) = (vec![], vec![]);
    for _ in 0..5 {
        quiet.push(pass()?);
        let before = mount_changes();
        run(std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&point))?;
        run(std::process::Command::new("umount").arg(&point))?;
        // Until the watch has applied both (a build that counts a batch
        // once may show one), at most a second.
        let start = Instant::now();
        while mount_changes() < before + 2 && start.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(10));
        }
        changed.push(pass()?);
    }
    let _ = fs::remove_dir(&point);
    Ok((median(quiet), median(changed), stat("drops", "requests") - drops_before))
}
