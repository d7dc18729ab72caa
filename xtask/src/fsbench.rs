//! `cargo xtask fsbench [--quick] [--keep] [--modes LIST] [--skip LIST]`: the
//! mount against the native source filesystem.
//!
//! Builds `rcufs` (release), generates the workloads in a fresh directory on
//! the real disk (`$TMPDIR`, else `/var/tmp`; never a tmpfs, so that cold
//! reads are real), then runs the same suite on
//! - `native`: the source directory itself (the limit),
//! - `rcufs`: an rcufs mount of it with the default options (as root on a
//!   local disk: `--coherence auto` chooses `watch`),
//! - `rcufs-kc`: an rcufs mount with `--kernel-cache`,
//!
//! and the seeds' experiments on an rcufs mount:
//! - seed 004 ("VFS: Directory level cache cleaning"): three directories of
//!   many files and a dcache that holds about two of them; access 1, 2, 3,
//!   then time 1 again, without and with `rcufs drop --dentries 2` before 3;
//! - seed 001 ("Fadvise: Directory level page cache cleaning support"):
//!   `cp -r 1 2; cp -r 3 4; time grep data 1/*` with a page-cache budget
//!   smaller than the four directories, without and with `rcufs drop --pages
//!   2` before the second copy. The copies read and write (as the 2013 `cp`
//!   did; today's `cp` uses `copy_file_range`, which bypasses the page cache),
//!   and run twice: as in the paper, and with each copy read back once, since
//!   rcufs does not cache the pages it writes while the kernel's page cache
//!   did.
//!
//! Each seed run also records the cache counters' change over its timed
//! pass (hits, misses), so the table shows what the drop changed, and the
//! same pass on the source itself, cold and hot: the part of the speedup
//! the source's disk accounts for (`fsbench/source_cost.rs`).
//!
//! The dbench rows (`fsbench/dbench.rs`) run apart from the suite: each run
//! on an ext4 filesystem made for it, the native filesystem and the mounts
//! of it interleaved over rounds, because on a shared ext4 without a journal
//! a create costs more the more was deleted in the minutes before.
//!
//! The `coherence` section (`fsbench/coherence.rs`) compares `--coherence
//! watch` with `ttl` in both modes: hot stat and missing names against
//! native, how soon a change made in the source is seen, hot stat under a
//! churn of files elsewhere on the same filesystem, and hot stat after a
//! mount attached and detached under the source.
//!
//! "Cold" passes first empty rcufs's caches (`rcufs drop --all` on the mount
//! root) and then the kernel's (`sync; echo 3 > /proc/sys/vm/drop_caches`,
//! which needs root). Every mount is unmounted when its guard drops, also on
//! failure: SIGTERM to the `rcufs mount` process this task started, then
//! `umount -l` if the mount is still there.
//!
//! Prints one table (rates: higher is better; ratio = mode / native) and
//! writes `target/rcufs-bench/fsbench.json` (one record per comparison:
//! `name`, `ours`, `baseline`, `unit`, `ratio`) and `fsbench.md`, both copied
//! to `benches/results/`. A partial run (`--quick`, `--skip` or `--modes`)
//! writes `fsbench_partial.{json,md}` instead, so that it never replaces a
//! full run's files; `--name NAME` names the files `NAME.{json,md}`.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bench::out_dir;

mod coherence;
mod data;
mod dbench;
mod paper;
mod source_cost;
use crate::util::{Rng, cargo, ensure_programs, root, run};
pub(crate) use paper::{S001_PAPER, S004_PAPER, generate as generate_paper_sets, paper_ratio, s001_budget};

/// Sizes of the generated workloads.
struct Scale {
    /// Directories and files per directory of the metadata tree.
    meta_dirs: usize,
    meta_files: usize,
    /// Entries of the one big directory that is listed.
    big_dir: usize,
    /// Missing names probed per metadata directory.
    missing_per_dir: usize,
    /// Data files and the size of each.
    data_files: usize,
    data_file_mib: usize,
    /// Random 4 KiB reads per timed pass.
    random_reads: usize,
    /// fio and dbench run time per test, seconds.
    tool_secs: u64,
    /// Seed 004: files per directory.
    s004_files: usize,
    /// Seed 001: 2 MB files per directory.
    s001_files: usize,
}

impl Scale {
    fn new(quick: bool) -> Self {
        if quick {
            Scale {
                meta_dirs: 20,
                meta_files: 500,
                big_dir: 5_000,
                missing_per_dir: 50,
                data_files: 4,
                data_file_mib: 16,
                random_reads: 8_192,
                tool_secs: 3,
                s004_files: 3_000,
                s001_files: 20,
            }
        } else {
            Scale {
                meta_dirs: 100,
                meta_files: 1_000,
                big_dir: 50_000,
                missing_per_dir: 100,
                data_files: 4,
                data_file_mib: 64,
                random_reads: 65_536,
                tool_secs: 8,
                s004_files: 20_000,
                s001_files: 100,
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Native,
    Rcufs,
    RcufsKernelCache,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Rcufs => "rcufs",
            Mode::RcufsKernelCache => "rcufs-kc",
        }
    }
}

/// One measured figure of the suite: `workload` on `mode`.
struct Measure {
    workload: String,
    mode: Mode,
    value: f64,
    unit: &'static str,
}

/// A running `rcufs mount`; unmounts when dropped.
struct Mount {
    child: Option<Child>,
    mountpoint: PathBuf,
    rcufs: PathBuf,
}

impl Mount {
    fn new(rcufs: &Path, source: &Path, mountpoint: &Path, extra: &[String], log: &Path) -> Result<Mount> {
        fs::create_dir_all(mountpoint)?;
        let logf = File::create(log)?;
        let mut cmd = Command::new(rcufs);
        cmd.arg("mount").arg(source).arg(mountpoint).args(extra);
        eprintln!(
            "xtask fsbench: $ {} mount {} {} {}",
            rcufs.display(),
            source.display(),
            mountpoint.display(),
            extra.join(" ")
        );
        let child = cmd
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()
            .context("starting rcufs mount")?;
        let mut m = Mount {
            child: Some(child),
            mountpoint: mountpoint.to_path_buf(),
            rcufs: rcufs.to_path_buf(),
        };
        let start = Instant::now();
        while !is_rcufs_mount(mountpoint) {
            if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let text = fs::read_to_string(log).unwrap_or_default();
                m.child = None;
                bail!("rcufs mount exited with {status} before mounting:\n{text}");
            }
            if start.elapsed() > Duration::from_secs(20) {
                bail!("rcufs did not mount {} within 20 s", mountpoint.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(m)
    }

    fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The `rcufs mount` process's id.
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `rcufs drop --MODE DIR`.
    fn drop_caches(&self, mode: &str, dir: &Path) -> Result<()> {
        run(Command::new(&self.rcufs)
            .args(["drop", mode])
            .arg(dir)
            .stdout(Stdio::null()))
    }

    /// The mount's stats JSON (`rcufs stats --json`), or `null` if unavailable.
    fn stats(&self) -> Value {
        Command::new(&self.rcufs)
            .args(["stats", "--json"])
            .arg(&self.mountpoint)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| serde_json::from_slice(&o.stdout).ok())
            .unwrap_or(Value::Null)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM to the `rcufs mount` process started above (by its id):
            // it unmounts cleanly and exits.
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let start = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if start.elapsed() < Duration::from_secs(15) => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        eprintln!("xtask fsbench: rcufs did not exit after SIGTERM; killing it");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        if is_rcufs_mount(&self.mountpoint) {
            eprintln!("xtask fsbench: {} still mounted; umount -l", self.mountpoint.display());
            let _ = Command::new("umount").arg("-l").arg(&self.mountpoint).status();
        }
    }
}

/// Whether `/proc/self/mountinfo` lists an rcufs mount at `mountpoint`.
fn is_rcufs_mount(mountpoint: &Path) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mountpoint.to_string_lossy().replace(' ', "\\040");
    info.lines().any(|l| {
        let mut parts = l.split(" - ");
        let (Some(a), Some(b)) = (parts.next(), parts.next()) else {
            return false;
        };
        let mut fs = b.split(' ');
        // A mount through fusermount shows type `fuse.rcufs`; a direct
        // mount(2) as root shows type `fuse` with source `rcufs`.
        let rcufs = matches!(
            (fs.next(), fs.next()),
            (Some("fuse.rcufs"), _) | (Some("fuse"), Some("rcufs"))
        );
        a.split(' ').nth(4) == Some(want.as_str()) && rcufs
    })
}

/// Empties the kernel's page, dentry and inode caches (needs root).
pub(crate) fn drop_kernel_caches() -> Result<()> {
    let _ = Command::new("sync").status();
    fs::write("/proc/sys/vm/drop_caches", "3").context("echo 3 > /proc/sys/vm/drop_caches (needs root)")
}

/// User and system clock ticks (fields 14 and 15 of stat(5)) of process
/// `pid`, or of the calling thread when `pid` is `None`; zeros if the file
/// cannot be read.
fn cpu_ticks(pid: Option<u32>) -> (u64, u64) {
    let path = pid.map_or_else(|| "/proc/thread-self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    let Ok(text) = fs::read_to_string(path) else {
        return (0, 0);
    };
    // Fields after the command name (which may hold spaces) start at `) `.
    let Some((_, rest)) = text.rsplit_once(") ") else {
        return (0, 0);
    };
    let f: Vec<&str> = rest.split(' ').collect();
    // `rest` starts at field 3.
    let get = |i: usize| f.get(i - 3).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (get(14), get(15))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `f` (which returns how many units it processed) `reps` times after
/// one untimed warm-up pass; returns the median rate in units per second.
fn hot_rate(reps: usize, mut f: impl FnMut() -> Result<u64>) -> Result<f64> {
    f()?;
    let mut rates = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        let n = f()?;
        rates.push(n as f64 / start.elapsed().as_secs_f64());
    }
    Ok(median(rates))
}

fn once_rate(f: impl FnOnce() -> Result<u64>) -> Result<f64> {
    let start = Instant::now();
    let n = f()?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------- workloads

fn write_file(path: &Path, bytes: usize, rng: &mut Rng) -> Result<()> {
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for chunk in buf.chunks_mut(8) {
            let r = rng.next().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        let n = left.min(buf.len());
        f.write_all(&buf[..n])?;
        left -= n;
    }
    Ok(())
}

/// Text files of `bytes` bytes whose lines sometimes contain "data" (seed 001 greps them).
pub(crate) fn write_text(path: &Path, bytes: usize, rng: &mut Rng) -> Result<()> {
    let mut s = String::with_capacity(bytes + 128);
    while s.len() < bytes {
        let r = rng.next();
        if r.is_multiple_of(7) {
            let _ = writeln!(s, "line {r:016x} holds some data");
        } else {
            let _ = writeln!(s, "line {r:016x} {:016x} {:016x}", rng.next(), rng.next());
        }
    }
    s.truncate(bytes);
    fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

fn generate(src: &Path, s: &Scale) -> Result<()> {
    let start = Instant::now();
    let mut rng = Rng(0x5eed_0000_0004);
    for d in 0..s.meta_dirs {
        let dir = src.join(format!("meta/d{d:03}"));
        fs::create_dir_all(&dir)?;
        for f in 0..s.meta_files {
            File::create(dir.join(format!("file{f:05}.txt")))?;
        }
    }
    let big = src.join("big");
    fs::create_dir_all(&big)?;
    for f in 0..s.big_dir {
        File::create(big.join(format!("entry{f:06}")))?;
    }
    fs::create_dir_all(src.join("data"))?;
    for i in 0..s.data_files {
        write_file(&src.join(format!("data/file{i}.bin")), s.data_file_mib << 20, &mut rng)?;
    }
    for d in 1..=3 {
        let dir = src.join(format!("s004/{d}"));
        fs::create_dir_all(&dir)?;
        for f in 0..s.s004_files {
            File::create(dir.join(format!("f{f:06}")))?;
        }
    }
    for d in [1, 3] {
        let dir = src.join(format!("s001/{d}"));
        fs::create_dir_all(&dir)?;
        for f in 0..s.s001_files {
            write_text(&dir.join(format!("f{f:04}.txt")), 2_000_000, &mut rng)?;
        }
    }
    let _ = Command::new("sync").status();
    eprintln!(
        "xtask fsbench: generated the workloads in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

// -------------------------------------------------------------------- suite

fn meta_files(root: &Path, s: &Scale) -> Vec<PathBuf> {
    (0..s.meta_dirs)
        .flat_map(|d| (0..s.meta_files).map(move |f| root.join(format!("meta/d{d:03}/file{f:05}.txt"))))
        .collect()
}

fn stat_all(paths: &[PathBuf], threads: usize) -> Result<u64> {
    let chunk = paths.len().div_ceil(threads);
    std::thread::scope(|sc| {
        let hs: Vec<_> = paths
            .chunks(chunk)
            .map(|part| {
                sc.spawn(move || -> Result<u64> {
                    for p in part {
                        fs::symlink_metadata(p).with_context(|| format!("stat {}", p.display()))?;
                    }
                    Ok(part.len() as u64)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("stat thread panicked")).sum()
    })
}

fn stat_missing(paths: &[PathBuf]) -> Result<u64> {
    for p in paths {
        match fs::symlink_metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("stat {}: {e}", p.display()),
            Ok(_) => bail!("{} exists but should not", p.display()),
        }
    }
    Ok(paths.len() as u64)
}

fn list_dirs(dirs: &[PathBuf]) -> Result<u64> {
    let mut n = 0;
    for d in dirs {
        for e in fs::read_dir(d).with_context(|| format!("readdir {}", d.display()))? {
            std::hint::black_box(e?.file_name());
            n += 1;
        }
    }
    Ok(n)
}

/// `len` bytes of `storage` starting at a page boundary: the readers read
/// into page-aligned buffers, as `dd`, `fio`, `cat` and `cp` do. The
/// kernel's copy into a buffer 16 bytes past a page boundary (where a
/// `Vec` of 1 MiB starts) ran at half the speed here (hot 1 MiB reads of
/// a local file: 8.4 against 16.8 GB/s), which made native look slower
/// than what users see (BENCHMARKS.md, "The data path").
fn page_aligned(storage: &mut Vec<u8>, len: usize) -> &mut [u8] {
    storage.resize(len + 4096, 0);
    let at = storage.as_ptr().align_offset(4096);
    &mut storage[at..at + len]
}

/// Reads every data file start to end in 1 MiB reads into a page-aligned
/// buffer; returns bytes read.
fn read_sequential(files: &[PathBuf]) -> Result<u64> {
    let mut storage = Vec::new();
    let buf = page_aligned(&mut storage, 1 << 20);
    let mut total = 0u64;
    for p in files {
        let mut f = File::open(p).with_context(|| format!("open {}", p.display()))?;
        loop {
            let n = f.read(buf)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    Ok(total)
}

/// `count` 4 KiB preads at random aligned offsets across the data files,
/// into a page-aligned buffer.
fn read_random(files: &[PathBuf], file_bytes: u64, count: usize, seed: u64) -> Result<u64> {
    let handles: Vec<File> = files.iter().map(File::open).collect::<Result<_, _>>()?;
    let mut rng = Rng(seed | 1);
    let mut storage = Vec::new();
    let buf = page_aligned(&mut storage, 4096);
    let pages = file_bytes / 4096;
    let mut total = 0u64;
    for _ in 0..count {
        let r = rng.next();
        let f = &handles[(r % handles.len() as u64) as usize];
        let off = ((r >> 8) % pages) * 4096;
        let n = f.read_at(buf, off)?;
        if n != 4096 {
            bail!("short random read: {n} bytes at {off}");
        }
        total += n as u64;
    }
    Ok(total)
}

/// Runs fio on `files`; returns (bytes/s, IOPS).
fn fio(name: &str, files: &[PathBuf], rw: &str, bs: &str, jobs: usize, secs: u64) -> Result<(f64, f64)> {
    let filenames = files
        .iter()
        .map(|p| p.to_string_lossy().replace(':', "\\:"))
        .collect::<Vec<_>>()
        .join(":");
    let out = Command::new("fio")
        .arg(format!("--name={name}"))
        .arg(format!("--filename={filenames}"))
        .args([
            "--readonly",
            "--ioengine=psync",
            "--direct=0",
            "--time_based",
            "--group_reporting",
        ])
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--numjobs={jobs}"))
        .arg(format!("--runtime={secs}"))
        .arg("--output-format=json")
        .output()
        .context("running fio")?;
    if !out.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("fio's JSON output")?;
    let read = &v["jobs"][0]["read"];
    Ok((
        read["bw_bytes"].as_f64().unwrap_or(0.0),
        read["iops"].as_f64().unwrap_or(0.0),
    ))
}

/// Runs the whole suite on `dir` (the source itself or a mount of it).
/// `cold` empties every cache in front of the disk.
fn suite(
    mode: Mode,
    dir: &Path,
    s: &Scale,
    skip: &[String],
    cold: &dyn Fn() -> Result<()>,
    out: &mut Vec<Measure>,
) -> Result<()> {
    let mut put = |workload: &str, value: f64, unit: &'static str| {
        eprintln!("xtask fsbench: {:<9} {workload:<38} {value:>14.1} {unit}", mode.name());
        out.push(Measure {
            workload: workload.to_string(),
            mode,
            value,
            unit,
        });
    };
    let on = |section: &str| !skip.iter().any(|x| x == section);
    if on("metadata") {
        let files = meta_files(dir, s);
        put(
            "stat every tree file, hot, 1 thread",
            hot_rate(3, || stat_all(&files, 1))?,
            "stat/s",
        );
        put(
            "stat every tree file, hot, 2 threads",
            hot_rate(3, || stat_all(&files, 2))?,
            "stat/s",
        );
        let missing: Vec<PathBuf> = (0..s.meta_dirs)
            .flat_map(|d| (0..s.missing_per_dir).map(move |i| dir.join(format!("meta/d{d:03}/missing{i:04}"))))
            .collect();
        put(
            "stat of missing names, hot",
            hot_rate(3, || stat_missing(&missing))?,
            "stat/s",
        );
        let mut dirs: Vec<PathBuf> = (0..s.meta_dirs).map(|d| dir.join(format!("meta/d{d:03}"))).collect();
        dirs.push(dir.join("big"));
        put(
            "readdir of all tree dirs + big dir, hot",
            hot_rate(3, || list_dirs(&dirs))?,
            "entries/s",
        );
        cold()?;
        put(
            "stat every tree file, cold",
            once_rate(|| stat_all(&files, 1))?,
            "stat/s",
        );
    }
    let data: Vec<PathBuf> = (0..s.data_files)
        .map(|i| dir.join(format!("data/file{i}.bin")))
        .collect();
    let file_bytes = (s.data_file_mib as u64) << 20;
    // The hot data rows run interleaved across the modes (`fsbench/data.rs`).
    if on("data") {
        cold()?;
        put(
            "sequential 1 MiB reads, cold",
            once_rate(|| read_sequential(&data))? / 1e6,
            "MB/s",
        );
        cold()?;
        put(
            "random 4 KiB reads, cold",
            once_rate(|| read_random(&data, file_bytes, s.random_reads / 8, 11))? / 4096.0,
            "IOPS",
        );
    }
    if on("fio") {
        read_sequential(&data)?; // Hot: every page in the caches first.
        let (bw, _) = fio("seqread", &data, "read", "1M", 1, s.tool_secs)?;
        put("fio sequential read 1M, hot, 1 job", bw / 1e6, "MB/s");
        let (_, iops) = fio("randread", &data, "randread", "4k", 2, s.tool_secs)?;
        put("fio random read 4k, hot, 2 jobs", iops, "IOPS");
    }
    // The dbench rows run on a fresh filesystem per run, interleaved across
    // the modes (`fsbench/dbench.rs`).
    Ok(())
}

// -------------------------------------------------------------------- seeds

/// lstat of every file of seed 004's directory `d`; returns the count.
pub(crate) fn s004_pass(mnt: &Path, d: usize, files: usize) -> Result<u64> {
    for f in 0..files {
        let p = mnt.join(format!("s004/{d}/f{f:06}"));
        fs::symlink_metadata(&p).with_context(|| format!("stat {}", p.display()))?;
    }
    Ok(files as u64)
}

/// The change of the mount's counters over a timed pass (`after - before`,
/// for the dcache and page-cache counters).
fn stats_delta(before: &Value, after: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (section, keys) in [
        (
            "dcache",
            &["hits", "misses", "negative_hits", "inserts", "evictions"][..],
        ),
        ("pagecache", &["hits", "misses", "fills", "evictions"][..]),
    ] {
        let mut m = serde_json::Map::new();
        for k in keys {
            if let (Some(a), Some(b)) = (after[section][k].as_u64(), before[section][k].as_u64()) {
                m.insert((*k).to_string(), json!(a.saturating_sub(b)));
            }
        }
        out.insert(section.to_string(), Value::Object(m));
    }
    Value::Object(out)
}

/// One run of a seed experiment: the timed seconds, the counters' change
/// over the timed part, and the counters at the end.
pub(crate) struct SeedRun {
    pub secs: f64,
    pub delta: Value,
    pub after: Value,
}

/// Seed 004 ("VFS: Directory level cache cleaning"): with a dcache that holds
/// about two of the three directories, access 1, 2, 3 (lstat of every file:
/// on a passthrough filesystem an open always reaches the source file, so the
/// pass stats, which is what the dentry cache decides), optionally drop the
/// dentries of 2 before 3, and time 1 again; the kernel's caches are emptied
/// after every pass (see below).
pub(crate) fn seed004(rcufs: &Path, src: &Path, mnt: &Path, files: usize, drop2: bool, log: &Path) -> Result<SeedRun> {
    // Each file is one dentry; a little room for the directories themselves.
    let cap = files * 2 + files / 5;
    let m = Mount::new(
        rcufs,
        src,
        mnt,
        &[
            "--dcache-entries".into(),
            cap.to_string(),
            "--revalidate".into(),
            "600".into(),
        ],
        log,
    )?;
    // The paper modified iput() to free inodes at once; here the kernel's
    // caches are emptied after each pass for the same effect: the kernel
    // forgets the mount's inodes, which releases the dentries rcufs keeps for
    // inodes the kernel knows, so that the dcache's LRU decides what stays.
    let forget = || -> Result<()> {
        drop_kernel_caches()?;
        std::thread::sleep(Duration::from_millis(500));
        Ok(())
    };
    s004_pass(m.path(), 1, files)?;
    forget()?;
    s004_pass(m.path(), 2, files)?;
    forget()?;
    if drop2 {
        m.drop_caches("--dentries", &m.path().join("s004/2"))?;
    }
    s004_pass(m.path(), 3, files)?;
    forget()?;
    let before = m.stats();
    let start = Instant::now();
    s004_pass(m.path(), 1, files)?;
    let secs = start.elapsed().as_secs_f64();
    let after = m.stats();
    Ok(SeedRun {
        secs,
        delta: stats_delta(&before, &after),
        after,
    })
}

/// `cp -r from to` with GNU cp, as the paper ran it (cp copies each file
/// with `copy_file_range`, which rcufs caches as a write of the same bytes).
fn cp_r(from: &Path, to: &Path) -> Result<()> {
    run(Command::new("cp").arg("-r").arg(from).arg(to))
}

/// Seed 001 ("Fadvise: Directory level page cache cleaning support"), run
/// literally: `cp -r 1 2; cp -r 3 4; time grep data 1/*` in `base` (a
/// directory of the source holding `1` and `3`) with a page-cache budget of
/// `budget` bytes, optionally dropping the pages of 2 before the second
/// copy; the kernel's caches are emptied before the grep, so what rcufs
/// does not hold is read from the disk.
pub(crate) fn seed001(
    rcufs: &Path,
    src: &Path,
    mnt: &Path,
    base_rel: &str,
    budget: u64,
    drop2: bool,
    log: &Path,
) -> Result<SeedRun> {
    for d in ["2", "4"] {
        let _ = fs::remove_dir_all(src.join(base_rel).join(d));
    }
    let m = Mount::new(
        rcufs,
        src,
        mnt,
        &[
            "--page-cache-size".into(),
            budget.to_string(),
            "--revalidate".into(),
            "600".into(),
        ],
        log,
    )?;
    let base = m.path().join(base_rel);
    cp_r(&base.join("1"), &base.join("2"))?;
    if drop2 {
        m.drop_caches("--pages", &base.join("2"))?;
    }
    cp_r(&base.join("3"), &base.join("4"))?;
    drop_kernel_caches()?;
    let files = sorted_files(&base.join("1"))?;
    let before = m.stats();
    let start = Instant::now();
    // Output to a pipe: GNU grep stops at the first match when its output is
    // /dev/null, which would read one block per file.
    let out = Command::new("grep").arg("-c").arg("data").args(&files).output()?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("grep failed: {}", out.status);
    }
    let after = m.stats();
    drop(m);
    for d in ["2", "4"] {
        let _ = fs::remove_dir_all(src.join(base_rel).join(d));
    }
    Ok(SeedRun {
        secs,
        delta: stats_delta(&before, &after),
        after,
    })
}

// --------------------------------------------------------------------- task

pub fn fsbench(args: &[String]) -> Result<()> {
    let mut quick = false;
    let mut keep = false;
    let mut modes = vec![Mode::Native, Mode::Rcufs, Mode::RcufsKernelCache];
    let mut skip: Vec<String> = Vec::new();
    let mut paper = false;
    let mut paper_s001: Vec<usize> = paper::S001_FILES.to_vec();
    let mut paper_s004: Vec<usize> = paper::S004_FILES.to_vec();
    let mut name: Option<String> = None;
    let list = |v: Option<&String>, what: &str| -> Result<Vec<usize>> {
        v.with_context(|| format!("{what} needs a list of file counts"))?
            .split(',')
            .map(|x| x.parse().with_context(|| format!("{what}: bad count {x}")))
            .collect()
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--paper" => paper = true,
            "--paper-s001" => paper_s001 = list(it.next(), "--paper-s001")?,
            "--paper-s004" => paper_s004 = list(it.next(), "--paper-s004")?,
            "--keep" => keep = true,
            "--name" => {
                let n = it
                    .next()
                    .context("--name needs a file name (letters, digits, _ and -)")?;
                if n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    bail!("--name {n:?}: use letters, digits, _ and - only (it names NAME.md and NAME.json)");
                }
                name = Some(n.clone());
            }
            "--modes" => {
                let list = it.next().context("--modes needs a list: native,rcufs,rcufs-kc")?;
                modes = list
                    .split(',')
                    .map(|m| match m {
                        "native" => Ok(Mode::Native),
                        "rcufs" => Ok(Mode::Rcufs),
                        "rcufs-kc" => Ok(Mode::RcufsKernelCache),
                        other => bail!("unknown mode {other}"),
                    })
                    .collect::<Result<_>>()?;
            }
            "--skip" => {
                skip.extend(
                    it.next()
                        .context("--skip needs a list: metadata,data,fio,dbench,seed004,seed001,coherence,paper-s001,paper-s004")?
                        .split(',')
                        .map(String::from),
                );
            }
            other => bail!(
                "unknown argument {other}; usage: cargo xtask fsbench [--quick] [--keep] [--name NAME] [--modes native,rcufs,rcufs-kc] \
                 [--skip metadata,data,fio,dbench,seed004,seed001,coherence,paper-s001,paper-s004] \
                 [--paper [--paper-s001 N,N,...] [--paper-s004 N,N,...]]"
            ),
        }
    }
    // A partial run never replaces the full run's files unless told to.
    let full = !quick
        && skip.iter().all(|x| x.is_empty())
        && [Mode::Native, Mode::Rcufs, Mode::RcufsKernelCache]
            .iter()
            .all(|m| modes.contains(m));
    if name.as_deref().is_some_and(|n| !n.starts_with("fsbench")) {
        bail!("--name: fsbench's files are named fsbench*, so that they never replace another task's");
    }
    let name = name.unwrap_or_else(|| if full { "fsbench" } else { "fsbench_partial" }.to_string());
    let s = Scale::new(quick);
    ensure_programs(&[("fio", "fio"), ("dbench", "dbench")])?;

    let needs_rcufs = modes.iter().any(|&m| m != Mode::Native)
        || !skip.iter().any(|x| x == "data")
        || !skip.iter().any(|x| x == "seed004")
        || !skip.iter().any(|x| x == "seed001")
        || !skip.iter().any(|x| x == "coherence")
        || paper;
    let rcufs = if needs_rcufs {
        run(cargo().args(["build", "--release", "--locked", "-p", "fuse-fs", "--bin", "rcufs"]))
            .context("building rcufs")?;
        Some(root().join("target/release/rcufs"))
    } else {
        None
    };

    let work = crate::util::WorkDir::new("fsbench", keep);
    let src = work.path.join("src");
    let mnt = work.path.join("mnt");
    let logs = out_dir().join("fsbench-logs");
    fs::create_dir_all(&src)?;
    fs::create_dir_all(&mnt)?;
    fs::create_dir_all(&logs)?;
    generate(&src, &s)?;
    if paper {
        paper::generate(&src, &paper_s001, &paper_s004, &skip)?;
    }

    let mut measures = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let mut stats = serde_json::Map::new();
    for &mode in &modes {
        let result = match mode {
            Mode::Native => suite(mode, &src, &s, &skip, &drop_kernel_caches, &mut measures),
            Mode::Rcufs | Mode::RcufsKernelCache => {
                let rcufs = rcufs.as_deref().expect("built above");
                let extra: Vec<String> = if mode == Mode::RcufsKernelCache {
                    vec!["--kernel-cache".into()]
                } else {
                    vec![]
                };
                Mount::new(rcufs, &src, &mnt, &extra, &logs.join(format!("{}.log", mode.name()))).and_then(|m| {
                    let root_dir = m.path().to_path_buf();
                    let cold = || -> Result<()> {
                        m.drop_caches("--all", &root_dir)?;
                        drop_kernel_caches()
                    };
                    let r = suite(mode, m.path(), &s, &skip, &cold, &mut measures);
                    stats.insert(mode.name().to_string(), m.stats());
                    r
                })
            }
        };
        if let Err(e) = result {
            eprintln!("xtask fsbench: {} FAILED: {e:#}", mode.name());
            errors.push(format!("{}: {e:#}", mode.name()));
        }
    }

    let mut data_md = String::new();
    let mut data_records = Vec::new();
    if let Some(rcufs) = rcufs.as_deref()
        && !skip.iter().any(|x| x == "data")
    {
        match data::run(rcufs, &src, &work.path, &s, &logs, quick) {
            Ok((m, r, md)) => {
                measures.extend(m.into_iter().filter(|m| modes.contains(&m.mode)));
                data_records = r;
                data_md = md;
            }
            Err(e) => errors.push(format!("data (hot, interleaved): {e:#}")),
        }
    }

    let mut dbench_md = String::new();
    let mut dbench_records = Vec::new();
    if !skip.iter().any(|x| x == "dbench") {
        let bin = rcufs.as_deref().filter(|_| modes.iter().any(|&m| m != Mode::Native));
        match dbench::run_rows(bin, &modes, &work.path, &s, &logs, quick) {
            Ok((m, r, md)) => {
                measures.extend(m.into_iter().filter(|m| modes.contains(&m.mode)));
                dbench_records = r;
                dbench_md = md;
            }
            Err(e) => errors.push(format!("dbench (fresh filesystem, interleaved): {e:#}")),
        }
    }

    let mut seeds = Vec::new();
    if let Some(rcufs) = rcufs.as_deref() {
        if !skip.iter().any(|x| x == "seed004") {
            let r = (|| -> Result<Value> {
                let keep = seed004(rcufs, &src, &mnt, s.s004_files, false, &logs.join("seed004-keep.log"))?;
                let with = seed004(rcufs, &src, &mnt, s.s004_files, true, &logs.join("seed004-drop.log"))?;
                let cost = source_cost::s004(&src, s.s004_files);
                Ok(with_source_cost(
                    seed_record(
                        format!(
                            "seed 004: 2nd pass over dir 1 ({} files/dir, dcache for ~2 dirs), without vs with `drop --dentries 2`",
                            s.s004_files
                        ),
                        &keep,
                        &with,
                        4.29,
                    ),
                    cost,
                    with.secs,
                ))
            })();
            match r {
                Ok(v) => seeds.push(v),
                Err(e) => errors.push(format!("seed004: {e:#}")),
            }
        }
        if !skip.iter().any(|x| x == "seed001") {
            let r = (|| -> Result<Value> {
                let budget = s.s001_files as u64 * 2_000_000 * 16 / 5;
                let keep = seed001(rcufs, &src, &mnt, "s001", budget, false, &logs.join("seed001-keep.log"))?;
                let with = seed001(rcufs, &src, &mnt, "s001", budget, true, &logs.join("seed001-drop.log"))?;
                let cost = sorted_files(&src.join("s001/1")).and_then(|f| source_cost::s001(&f));
                Ok(with_source_cost(
                    seed_record(
                        format!(
                            "seed 001: `cp -r 1 2; cp -r 3 4; grep data 1/*` ({} files of 2 MB/dir, page cache for 3.2 dirs), without vs with `drop --pages 2`",
                            s.s001_files
                        ),
                        &keep,
                        &with,
                        6.888 / 2.197,
                    ),
                    cost,
                    with.secs,
                ))
            })();
            match r {
                Ok(v) => seeds.push(v),
                Err(e) => errors.push(format!("seed001: {e:#}")),
            }
        }
    }

    let mut paper_md = String::new();
    if let (Some(rcufs), true) = (rcufs.as_deref(), paper) {
        match paper::run(rcufs, &src, &mnt, &s, &logs, &paper_s001, &paper_s004, &skip) {
            Ok((r, md)) => {
                seeds.extend(r);
                paper_md = md;
            }
            Err(e) => errors.push(format!("paper: {e:#}")),
        }
    }

    let mut coherence_md = String::new();
    let mut coherence_records = Vec::new();
    if let Some(rcufs) = rcufs.as_deref()
        && !skip.iter().any(|x| x == "coherence")
    {
        match coherence::run(rcufs, &src, &mnt, &work.path, &s, &logs) {
            Ok((r, md)) => {
                coherence_records = r;
                coherence_md = md;
            }
            Err(e) => errors.push(format!("coherence: {e:#}")),
        }
    }

    // Records: every non-native figure against native.
    let mut records = Vec::new();
    for m in measures.iter().filter(|m| m.mode != Mode::Native) {
        if let Some(n) = measures
            .iter()
            .find(|n| n.mode == Mode::Native && n.workload == m.workload)
        {
            records.push(json!({
                "name": format!("{}: {} vs native", m.workload, m.mode.name()),
                "ours": m.value, "baseline": n.value, "unit": m.unit, "ratio": m.value / n.value,
            }));
        }
    }
    records.extend(seeds.iter().cloned());
    records.extend(data_records);
    records.extend(dbench_records);
    records.extend(coherence_records);

    let mut md = table(&measures, &seeds, &errors, &s, quick);
    md.push_str(&data_md);
    md.push_str(&dbench_md);
    md.push_str(&paper_md);
    md.push_str(&coherence_md);
    print!("\n{md}");
    let doc = json!({
        "machine": crate::util::machine(),
        "quick": quick,
        "records": records,
        "measures": measures.iter().map(|m| json!({"workload": m.workload, "mode": m.mode.name(), "value": m.value, "unit": m.unit})).collect::<Vec<_>>(),
        "stats": stats,
        "errors": errors,
    });
    let out = out_dir();
    fs::create_dir_all(&out)?;
    let (json_file, md_file) = (format!("{name}.json"), format!("{name}.md"));
    fs::write(out.join(&json_file), serde_json::to_string_pretty(&doc)?)?;
    fs::write(out.join(&md_file), &md)?;
    let results = root().join("benches/results");
    fs::create_dir_all(&results)?;
    for f in [&json_file, &md_file] {
        fs::copy(out.join(f), results.join(f))?;
    }
    eprintln!(
        "xtask fsbench: wrote {} and {md_file} (copied to benches/results/)",
        out.join(&json_file).display()
    );
    drop(work);
    if !errors.is_empty() {
        bail!("some parts failed:\n  {}", errors.join("\n  "));
    }
    Ok(())
}

/// The paths in `dir`, sorted (as the shell expands `dir/*`).
fn sorted_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    Ok(files)
}

/// `record` with the source's own cold and hot pass and the speedup they
/// account for when the all-hit pass took `hit_secs` (`fsbench/source_cost.rs`).
/// If the source's passes failed, the record keeps the seed's runs and
/// says why the figure is missing.
fn with_source_cost(mut record: Value, cost: Result<source_cost::SourceCost>, hit_secs: f64) -> Value {
    if let Some(r) = record.as_object_mut() {
        match cost {
            Ok(c) => r.extend(c.record(hit_secs)),
            Err(e) => {
                r.insert("source_cost_error".into(), format!("{e:#}").into());
            }
        }
    }
    record
}

/// The record of a seed experiment: ours = with the drop, baseline =
/// without, ratio = the speedup (seconds, lower is better).
pub(crate) fn seed_record(name: String, without: &SeedRun, with: &SeedRun, paper: f64) -> Value {
    json!({
        "name": name,
        "ours": with.secs, "baseline": without.secs, "unit": "s (lower is better)",
        "ratio": without.secs / with.secs, "paper_ratio": paper,
        "timed_pass_counters_without": without.delta, "timed_pass_counters_with": with.delta,
        "stats_without": without.after, "stats_with": with.after,
    })
}

fn table(measures: &[Measure], seeds: &[Value], errors: &[String], s: &Scale, quick: bool) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### fsbench{} ({} files in {} dirs, big dir {} entries, {} x {} MiB data files)\n",
        if quick { " --quick" } else { "" },
        s.meta_dirs * s.meta_files,
        s.meta_dirs,
        s.big_dir,
        s.data_files,
        s.data_file_mib
    );
    let _ = writeln!(
        md,
        "| workload | unit | native | rcufs | ratio | rcufs-kc | ratio |\n|---|---|---:|---:|---:|---:|---:|"
    );
    let mut workloads: Vec<&str> = Vec::new();
    for m in measures {
        if !workloads.contains(&m.workload.as_str()) {
            workloads.push(&m.workload);
        }
    }
    for w in workloads {
        let get = |mode| measures.iter().find(|m| m.workload == w && m.mode == mode);
        let native = get(Mode::Native);
        let cell = |m: Option<&Measure>| m.map_or("-".to_string(), |m| format!("{:.1}", m.value));
        let ratio = |m: Option<&Measure>| match (m, native) {
            (Some(m), Some(n)) => format!("{:.2}x", m.value / n.value),
            _ => "-".into(),
        };
        let unit = measures.iter().find(|m| m.workload == w).map_or("", |m| m.unit);
        let _ = writeln!(
            md,
            "| {w} | {unit} | {} | {} | {} | {} | {} |",
            cell(native),
            cell(get(Mode::Rcufs)),
            ratio(get(Mode::Rcufs)),
            cell(get(Mode::RcufsKernelCache)),
            ratio(get(Mode::RcufsKernelCache))
        );
    }
    if !seeds.is_empty() {
        let _ = writeln!(
            md,
            "\n| seed experiment | without drop (s) | with drop (s) | speedup | paper | from the source's disk | timed pass without: misses / hits | with: misses / hits |\n|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        for v in seeds {
            // The counters of the cache the experiment is about.
            let section = if v["name"].as_str().unwrap_or("").starts_with("seed 004") {
                "dcache"
            } else {
                "pagecache"
            };
            let c = |k: &str| {
                let d = &v[k][section];
                format!("{} / {}", d["misses"], d["hits"])
            };
            let _ = writeln!(
                md,
                "| {} | {:.3} | {:.3} | {:.2}x | {:.2}x | {} | {} | {} |",
                v["name"].as_str().unwrap_or("?"),
                v["baseline"].as_f64().unwrap_or(f64::NAN),
                v["ours"].as_f64().unwrap_or(f64::NAN),
                v["ratio"].as_f64().unwrap_or(f64::NAN),
                v["paper_ratio"].as_f64().unwrap_or(f64::NAN),
                v["disk_share"].as_f64().map_or("-".into(), |c| format!("{c:.2}x")),
                c("timed_pass_counters_without"),
                c("timed_pass_counters_with")
            );
        }
    }
    if !errors.is_empty() {
        let _ = writeln!(md, "\nParts that could not run:\n");
        for e in errors {
            let one_line: Vec<&str> = e.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            let _ = writeln!(md, "- {}", one_line.join(" "));
        }
    }
    md
}
