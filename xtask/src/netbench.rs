//! `cargo xtask netbench`: rcufs in front of a network filesystem.
//!
//! The network source is built here (`netbench/link.rs`): `sftp-server`
//! behind a TCP listener on 127.0.0.1, reached through a forwarder that
//! delays every chunk by `--delay-ms` (default 0.5 ms) in each direction,
//! and mounted with `sshfs -o directport=PORT` (SFTP without ssh). Each mode
//! gets its own sshfs mount over that link (so no mode warms another's
//! cache):
//!
//! - `sshfs`: the raw sshfs mount, with sshfs's own cache timeouts
//!   (`dcache_timeout`) set to the TTL *T*, the kernel's at sshfs's defaults
//!   (entry and attributes 1 s, no negative entries): it promises a change
//!   made on the server is seen within *T* + 1 s;
//! - `sshfs-kt`: the same with the kernel's timeouts at *T* too
//!   (`entry_timeout`, `attr_timeout`, `negative_timeout`) and
//!   `auto_cache`: within 2 *T*;
//! - `rcufs`: rcufs (default mode, `--revalidate` *T*) over an sshfs mount
//!   that keeps what a listing told it for 1 s (`dcache_timeout=1`), lets
//!   the kernel keep nothing, and keeps its inode numbers (`noforget`, see
//!   `Mode::sshfs_options`): within *T* + 2 s;
//! - `rcufs-kc`: the same with `--kernel-cache`: within 2 *T* + 2 s;
//! - `local`: the served directory itself, no network and no FUSE: the
//!   floor of each workload (what `find`, `stat`, git and cargo cost
//!   themselves), for reading how much of a mode's time is left to save.
//!
//! Each round mounts everything afresh (cold caches; the kernel's caches are
//! emptied before each cold pass too), then runs each workload on each
//! mode, in an order that rotates per round: `find`+`stat` of the tree
//! cold, warm, on the first pass after the TTL expired and warm after that; `git status` in
//! a checked-out repository; `cargo build` of a small crate (target
//! directory on the local disk), from scratch and with nothing changed;
//! reading a data set again; a compiler's include search (mostly missing
//! names). Every result is checked (the listing and sizes against the
//! source, a clean `git status`, the build's success, the data's checksum,
//! the headers found), so a wrong answer fails the run, not only a slow one.
//! A warm pass starts [`GAP`] (2 s) after the pass before it on the same
//! mode, as when a person runs a command again a moment later. Figures are
//! seconds per pass; the ratios are `sshfs` time / mode time
//! (above 1: faster than raw sshfs), the median of the per-round ratios.
//! The link's achieved one-way delay and the SFTP requests each mode sent
//! per pass are reported beside them.
//!
//! `--ci` runs it small (a 1,000-file tree, *T* = 5 s, one round, the
//! debug build) and adds the checks that a change made directly on the
//! server is seen through every mode within its promise (an overwritten
//! file, and a renamed one whose old name now holds a new file: the
//! by-name reopen answers `ESTALE` and the kernel looks the name up again),
//! then a walk of 25,000 entries (250 directories) with the daemon's
//! descriptor limit at 512, so a pool of 128 (`netbench/walk.rs`).
//! `--walk N` runs only that walk, at `N` entries
//! (the 1,000,000-entry run of BENCHMARKS.md). `--seed004 N[,N...]` and
//! `--seed001 N[,N...]` run only the seeds' experiments over the link
//! (`netbench/seeds.rs`).
//!
//! Writes `target/rcufs-bench/netbench.{json,md,svg}` and, for a full run,
//! copies them to `benches/results/`.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bench::out_dir;
use crate::util::{cargo, ensure_programs, root, run};

mod link;
mod seeds;
mod sshfs;
mod walk;
mod work;

use link::{DelayLink, SftpServer};
use sshfs::{Rcufs, Sshfs};
use work::Scale;

/// The modes compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Sshfs,
    SshfsKernel,
    Rcufs,
    RcufsKc,
    Local,
}

const MODES: [Mode; 5] = [Mode::Sshfs, Mode::SshfsKernel, Mode::Rcufs, Mode::RcufsKc, Mode::Local];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sshfs => "sshfs",
            Mode::SshfsKernel => "sshfs-kt",
            Mode::Rcufs => "rcufs",
            Mode::RcufsKc => "rcufs-kc",
            Mode::Local => "local",
        }
    }

    fn is_rcufs(self) -> bool {
        matches!(self, Mode::Rcufs | Mode::RcufsKc)
    }

    /// The `-o` options of this mode's sshfs mount (see the module docs).
    fn sshfs_options(self, ttl: u64) -> String {
        match self {
            Mode::Sshfs => format!("dcache_timeout={ttl}"),
            Mode::SshfsKernel => {
                format!("dcache_timeout={ttl},entry_timeout={ttl},attr_timeout={ttl},negative_timeout={ttl},auto_cache")
            }
            // `noforget`: sshfs numbers inodes itself (SFTP has no inode
            // numbers) and gives a forgotten one a new number at its next
            // lookup; rcufs keys inodes by `(st_dev, st_ino)`, so without it
            // every object whose sshfs inode the kernel forgot looked like a
            // new file under the old name (and its directory's cached names
            // were dropped with it).
            Mode::Rcufs | Mode::RcufsKc => {
                "dcache_timeout=1,entry_timeout=0,attr_timeout=0,negative_timeout=0,noforget".into()
            }
            Mode::Local => String::new(),
        }
    }

    /// Within how long a change on the server is seen through this mode.
    fn promise(self, ttl: Duration) -> Duration {
        match self {
            Mode::Sshfs => ttl + Duration::from_secs(1),
            Mode::SshfsKernel => ttl * 2,
            Mode::Rcufs => ttl + Duration::from_secs(2),
            Mode::RcufsKc => ttl * 2 + Duration::from_secs(2),
            Mode::Local => Duration::ZERO,
        }
    }
}

/// One mode's mounts: its sshfs and, for rcufs modes, rcufs over it.
struct Mounted {
    mode: Mode,
    /// The SFTP connection of its sshfs, in the link's accept order.
    conn: usize,
    rcufs: Option<Rcufs>,
    /// `None` for `local`.
    sshfs: Option<Sshfs>,
    /// The served directory itself (`local`).
    local: Option<PathBuf>,
}

impl Mounted {
    /// Where the workloads run.
    fn path(&self) -> &Path {
        match (&self.rcufs, &self.sshfs, &self.local) {
            (Some(r), _, _) => r.path(),
            (None, Some(s), _) => s.path(),
            (None, None, Some(l)) => l,
            (None, None, None) => unreachable!("every mode has a path"),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // rcufs before the sshfs it serves from.
        self.rcufs.take();
        self.sshfs.take();
    }
}

/// One timed pass.
struct Sample {
    workload: &'static str,
    mode: Mode,
    round: usize,
    secs: f64,
    requests: u64,
}

/// The pause before every warm pass: a person running a command again a
/// moment later. It is longer than the kernel's timeouts in the `sshfs`
/// mode (1 s, sshfs's defaults), so that mode's warm passes are served by
/// sshfs's own cache (*T*) whatever the previous pass took, rather than
/// partly by the kernel's copies of its last second.
const GAP: Duration = Duration::from_secs(2);

/// The workloads, in table order.
const WORKLOADS: [&str; 9] = [
    "find+stat, cold",
    "find+stat, warm",
    "find+stat, first pass after the TTL expired",
    "find+stat, warm after the TTL passed once",
    "git status",
    "cargo build, from scratch",
    "cargo build, nothing changed",
    "read the data set again",
    "include search (missing names)",
];

struct Options {
    ci: bool,
    rounds: usize,
    delay: Duration,
    ttl: u64,
    keep: bool,
    /// Only the four `find`+`stat` rows (a quick experiment; its results
    /// stay in `target/`).
    find_only: bool,
    walk: Option<usize>,
    walk_source: walk::Source,
    /// Only the seeds' experiments, at these file counts per directory.
    seeds: Option<seeds::Counts>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        ci: false,
        rounds: 3,
        delay: Duration::from_micros(500),
        ttl: fuse_default_ttl(),
        keep: false,
        find_only: false,
        walk: None,
        walk_source: walk::Source::Rcufs,
        seeds: None,
    };
    let mut it = args.iter();
    let mut rounds = None;
    let mut ttl = None;
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().with_context(|| format!("{a} needs {what}"));
        match a.as_str() {
            "--ci" => o.ci = true,
            "--keep" => o.keep = true,
            "--find-only" => o.find_only = true,
            "--rounds" => rounds = Some(value("a count")?.parse()?),
            "--delay-ms" => o.delay = Duration::from_secs_f64(value("milliseconds")?.parse::<f64>()? / 1000.0),
            "--ttl" => ttl = Some(value("whole seconds")?.parse()?),
            "--walk" => o.walk = Some(value("a number of entries")?.parse()?),
            "--seed004" | "--seed001" => {
                let list = value("file counts per directory, comma-separated")?;
                let mut counts = list
                    .split(',')
                    .map(|x| {
                        x.trim()
                            .parse::<usize>()
                            .with_context(|| format!("{a}: {x:?} is not a count"))
                    })
                    .collect::<Result<Vec<_>>>()?;
                if counts.contains(&0) {
                    bail!("{a}: a file count must be at least 1");
                }
                counts.sort_unstable();
                counts.dedup();
                let seeds = o.seeds.get_or_insert_with(seeds::Counts::default);
                if a == "--seed004" {
                    seeds.seed004 = counts;
                } else {
                    seeds.seed001 = counts;
                }
            }
            "--walk-source" => {
                o.walk_source = match value("rcufs or sshfs")?.as_str() {
                    "rcufs" => walk::Source::Rcufs,
                    "sshfs" => walk::Source::Sshfs,
                    other => bail!("unknown walk source {other} (rcufs or sshfs)"),
                }
            }
            other => bail!(
                "unknown argument {other}; usage: cargo xtask netbench [--ci] [--rounds N] [--delay-ms MS] \
                 [--ttl SECS] [--keep] [--find-only] | --walk N [--walk-source rcufs|sshfs] | [--seed004 N[,N...]] [--seed001 N[,N...]] [--delay-ms MS]"
            ),
        }
    }
    if o.seeds.is_some() {
        let others = [
            (o.walk.is_some(), "--walk"),
            (o.ci, "--ci"),
            (o.find_only, "--find-only"),
            (rounds.is_some(), "--rounds"),
            (ttl.is_some(), "--ttl"),
        ];
        if let Some((_, flag)) = others.iter().find(|(given, _)| *given) {
            bail!("--seed004/--seed001 run only the seeds' experiments; {flag} does not apply to them");
        }
    }
    if o.ci {
        // Longer than the pause before a warm pass, so that warm passes
        // are warm at this scale too.
        o.rounds = 1;
        o.ttl = 5;
    }
    o.rounds = rounds.unwrap_or(o.rounds).max(1);
    o.ttl = ttl.unwrap_or(o.ttl).max(1);
    Ok(o)
}

/// rcufs's revalidation interval for a network source, in whole seconds.
fn fuse_default_ttl() -> u64 {
    10
}

/// The Debian packages the task needs: sshfs, the SFTP server and git.
fn ensure_tools() -> Result<()> {
    ensure_programs(&[("sshfs", "sshfs"), ("git", "git"), ("find", "findutils")])?;
    if !Path::new(link::SFTP_SERVER).exists() {
        eprintln!("xtask: installing Debian package openssh-sftp-server");
        run(std::process::Command::new("apt-get").args(["update", "-qq"]))?;
        run(std::process::Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends", "openssh-sftp-server"])
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    if !Path::new(link::SFTP_SERVER).exists() {
        bail!(
            "{} is still missing after installing openssh-sftp-server",
            link::SFTP_SERVER
        );
    }
    Ok(())
}

/// Builds rcufs (release, or debug for `--ci`) and returns the binary.
fn build_rcufs(ci: bool) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args(["build", "--locked", "-p", "fuse-fs", "--bin", "rcufs"]);
    if !ci {
        cmd.arg("--release");
    }
    run(&mut cmd).context("building rcufs")?;
    Ok(crate::mount::target_dir().join(if ci { "debug/rcufs" } else { "release/rcufs" }))
}

pub fn netbench(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    ensure_tools()?;
    let rcufs = build_rcufs(o.ci)?;
    let work = crate::util::WorkDir::new("netbench", o.keep);
    fs::create_dir_all(&work.path)?;
    let logs = out_dir().join("netbench-logs");
    fs::create_dir_all(&logs)?;
    if let Some(n) = o.walk {
        let r = walk::run(&rcufs, &work.path, n, None, o.walk_source, &logs)?;
        return write_walk(&r);
    }
    if let Some(counts) = &o.seeds {
        return seeds::run(&rcufs, &work.path, counts, o.delay, &logs);
    }
    let s = if o.ci { Scale::ci() } else { Scale::full() };
    let served = work.path.join("served");
    fs::create_dir_all(&served)?;
    let started = Instant::now();
    work::generate(&served, &s, MODES.len()).context("generating the data sets")?;
    eprintln!(
        "xtask netbench: generated {} files in {:.1} s",
        s.tree_files(),
        started.elapsed().as_secs_f64()
    );
    let expected_tree = work::find_stat(&served.join("tree"))?;
    let expected_sum = work::read_data(&served.join("data"), &s)?;
    let expected_found = s.inc_dirs * s.inc_headers;

    let server = SftpServer::start()?;
    let link = DelayLink::start(server.addr(), o.delay)?;
    let ttl = Duration::from_secs(o.ttl);
    let mut samples = Vec::new();
    let mut stats = serde_json::Map::new();
    let mut checks = Vec::new();
    for round in 0..o.rounds {
        let order: Vec<Mode> = (0..MODES.len()).map(|i| MODES[(i + round) % MODES.len()]).collect();
        eprintln!(
            "xtask netbench: round {} of {}: {:?}",
            round + 1,
            o.rounds,
            order.iter().map(|m| m.name()).collect::<Vec<_>>()
        );
        let mut mounts = Vec::new();
        for (i, &mode) in MODES.iter().enumerate() {
            mounts.push(mount_mode(mode, i, &o, &rcufs, &served, &work.path, &link, &logs)?);
        }
        let find = |m: &Mounted| -> Result<()> {
            let got = work::find_stat(&m.path().join("tree"))?;
            if got != expected_tree {
                let first = got.iter().zip(&expected_tree).find(|(a, b)| a != b);
                bail!(
                    "{}: find+stat listed {} entries, the source has {}; first difference: {first:?}",
                    m.mode.name(),
                    got.len(),
                    expected_tree.len()
                );
            }
            Ok(())
        };
        let by_mode = |mode: Mode| mounts.iter().find(|m| m.mode == mode).expect("mounted");
        let mut timed = |workload: &'static str, m: &Mounted, f: &dyn Fn(&Mounted) -> Result<()>| -> Result<()> {
            let before = link.requests(m.conn);
            let t = Instant::now();
            f(m).with_context(|| format!("{workload} on {}", m.mode.name()))?;
            let secs = t.elapsed().as_secs_f64();
            samples.push(Sample {
                workload,
                mode: m.mode,
                round,
                secs,
                requests: link.requests(m.conn) - before,
            });
            eprintln!("xtask netbench:   {:<9} {workload}: {secs:.3} s", m.mode.name());
            Ok(())
        };
        // Each mode's passes follow one another, so that a mode's warm
        // pass never waits out the others' (a pass of 20,000 files takes
        // seconds: longer than some of the timeouts compared).
        for &mode in &order {
            drop_kernel_caches()?;
            timed(WORKLOADS[0], by_mode(mode), &find)?;
            std::thread::sleep(GAP);
            timed(WORKLOADS[1], by_mode(mode), &find)?;
        }
        // Every cache's copy is older than its timeout after this (the
        // rcufs modes' sshfs keeps listings for at most 2 s).
        std::thread::sleep(ttl + Duration::from_secs(2));
        for &mode in &order {
            timed(WORKLOADS[2], by_mode(mode), &find)?;
            std::thread::sleep(GAP);
            timed(WORKLOADS[3], by_mode(mode), &find)?;
        }
        if o.find_only {
            drop(mounts);
            continue;
        }
        for &mode in &order {
            let m = by_mode(mode);
            let repo = m.path().join(format!("repo{}", mode as usize));
            let status = |_: &Mounted| -> Result<()> {
                let out = work::git_status(&repo)?;
                if !out.is_empty() {
                    bail!("git status is not clean:\n{out}");
                }
                Ok(())
            };
            status(m)?; // Refreshes the index for this mount's inode numbers.
            std::thread::sleep(GAP);
            timed(WORKLOADS[4], m, &status)?;
        }
        for &mode in &order {
            let m = by_mode(mode);
            let target = work.path.join(format!("target-{}", mode.name()));
            let _ = fs::remove_dir_all(&target);
            let krate = m.path().join("crate");
            let build = |_: &Mounted| work::cargo_build(&krate, &target);
            timed(WORKLOADS[5], m, &build)?;
            std::thread::sleep(GAP);
            timed(WORKLOADS[6], m, &build)?;
        }
        for &mode in &order {
            let m = by_mode(mode);
            let read = |m: &Mounted| -> Result<()> {
                let sum = work::read_data(&m.path().join("data"), &s)?;
                if sum != expected_sum {
                    bail!("the data set read back with checksum {sum:x}, the source's is {expected_sum:x}");
                }
                Ok(())
            };
            read(m)?;
            std::thread::sleep(GAP);
            timed(WORKLOADS[7], m, &read)?;
        }
        for &mode in &order {
            let m = by_mode(mode);
            let search = |m: &Mounted| -> Result<()> {
                let (found, _) = work::include_search(&m.path().join("include"), &s)?;
                if found != expected_found {
                    bail!("the include search found {found} headers of {expected_found}");
                }
                Ok(())
            };
            search(m)?;
            std::thread::sleep(GAP);
            timed(WORKLOADS[8], m, &search)?;
        }
        if o.ci {
            checks.extend(check_source_changes(&mounts, &served, ttl)?);
        }
        for m in &mounts {
            if let Some(r) = &m.rcufs {
                let st = r.stats();
                if st["source"]["kind"] != "network" || st["coherence"]["mode"] != "ttl" {
                    bail!(
                        "{}: rcufs over sshfs should see a network source with ttl coherence; stats say source {} coherence {}",
                        m.mode.name(),
                        st["source"],
                        st["coherence"]["mode"]
                    );
                }
                stats.insert(format!("{} round {}", m.mode.name(), round + 1), st);
            }
        }
        drop(mounts);
    }
    let (n, p50, p99) = link.delays().summary();
    let delays = json!({"chunks": n, "p50_us": p50, "p99_us": p99, "asked_us": o.delay.as_micros() as u64});
    drop(link);
    drop(server);

    let mut walk_result = None;
    if o.ci {
        // The descriptor bound over a source without file handles, at a
        // scale CI affords: more entries than the daemon may hold descriptors.
        walk_result = Some(walk::run(
            &rcufs,
            &work.path,
            25_000,
            Some(512),
            walk::Source::Rcufs,
            &logs,
        )?);
    }
    let summary = summarise(&samples);
    let md = markdown(&o, &s, &summary, &samples, &delays, &checks, walk_result.as_ref());
    print!("\n{md}");
    let doc = json!({
        "machine": crate::util::machine(),
        "load": crate::util::loadavg(),
        "ci": o.ci,
        "rounds": o.rounds,
        "ttl_secs": o.ttl,
        "delay": delays,
        "scale": format!("{s:?}"),
        "records": summary,
        "samples": samples.iter().map(|x| json!({"workload": x.workload, "mode": x.mode.name(), "round": x.round, "secs": x.secs, "requests": x.requests})).collect::<Vec<_>>(),
        "checks": checks,
        "walk": walk_result.as_ref().map(walk::Outcome::json),
        "stats": stats,
    });
    let out = out_dir();
    fs::create_dir_all(&out)?;
    fs::write(out.join("netbench.json"), serde_json::to_string_pretty(&doc)?)?;
    fs::write(out.join("netbench.md"), &md)?;
    fs::write(out.join("netbench.svg"), plot(&summary))?;
    if !o.ci && !o.find_only {
        let results = root().join("benches/results");
        fs::create_dir_all(&results)?;
        for f in ["netbench.json", "netbench.md", "netbench.svg"] {
            fs::copy(out.join(f), results.join(f))?;
        }
    }
    eprintln!("xtask netbench: wrote {}", out.join("netbench.md").display());
    drop(work);
    Ok(())
}

/// Mounts `mode`'s sshfs (the `i`-th connection of this round's mounts)
/// and, for an rcufs mode, rcufs over it.
#[allow(clippy::too_many_arguments)]
fn mount_mode(
    mode: Mode,
    i: usize,
    o: &Options,
    rcufs: &Path,
    served: &Path,
    work: &Path,
    link: &DelayLink,
    logs: &Path,
) -> Result<Mounted> {
    if mode == Mode::Local {
        return Ok(Mounted {
            mode,
            conn: usize::MAX,
            rcufs: None,
            sshfs: None,
            local: Some(served.to_path_buf()),
        });
    }
    let conn = link.connections();
    let sshfs_at = work.join(format!("sshfs{i}"));
    let sshfs = Sshfs::mount(
        link.addr().port(),
        served,
        &sshfs_at,
        &mode.sshfs_options(o.ttl),
        &logs.join(format!("sshfs-{}.log", mode.name())),
    )?;
    // The mount may appear before sshfs's connection is accepted: ask it
    // something, then wait for the link to have accepted it (sshfs opens
    // one; the last one accepted is this mount's).
    fs::metadata(sshfs.path()).with_context(|| format!("stat of the fresh sshfs mount for {}", mode.name()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.connections() <= conn && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let conns = link.connections();
    if conns <= conn {
        bail!(
            "sshfs for {} answers without a connection through the link",
            mode.name()
        );
    }
    if conns > conn + 1 {
        eprintln!(
            "xtask netbench: {} connections through the link while sshfs for {} mounted; counting the last",
            conns - conn,
            mode.name()
        );
    }
    let conn = conns - 1;
    let rcufs = if mode.is_rcufs() {
        let mut args = Vec::new();
        if o.ttl != fuse_default_ttl() {
            args.extend(["--revalidate".to_string(), o.ttl.to_string()]);
        }
        if mode == Mode::RcufsKc {
            args.push("--kernel-cache".into());
        }
        Some(Rcufs::mount(
            rcufs,
            sshfs.path(),
            &work.join(format!("rcufs{i}")),
            &args,
            None,
            &logs.join(format!("{}.log", mode.name())),
        )?)
    } else {
        None
    };
    Ok(Mounted {
        mode,
        conn,
        rcufs,
        sshfs: Some(sshfs),
        local: None,
    })
}

/// Changes made directly on the server, seen through every mode within its
/// promise: a file overwritten with new content, and a file renamed away
/// with a new file put under its old name (over a source without file
/// handles, rcufs's reopen by name finds another object there: `ESTALE`,
/// and the kernel looks the name up again). Returns one record per mode.
fn check_source_changes(mounts: &[Mounted], served: &Path, ttl: Duration) -> Result<Vec<Value>> {
    // Through every mode first, so that each has the old state cached.
    let (a, b) = ("tree/t00/s00/f0001.c", "tree/t00/s00/f0002.c");
    // `local` is the changed directory itself: nothing to see.
    let mounts: Vec<&Mounted> = mounts.iter().filter(|m| m.mode != Mode::Local).collect();
    for m in &mounts {
        fs::read(m.path().join(a))?;
        fs::read(m.path().join(b))?;
    }
    let changed_at = Instant::now();
    fs::write(served.join(a), b"changed on the server\n")?;
    fs::rename(served.join(b), served.join("tree/t00/s00/moved.c"))?;
    fs::write(served.join(b), b"a new file under the old name\n")?;
    let mut out = Vec::new();
    for m in mounts {
        let promise = m.mode.promise(ttl);
        let deadline = changed_at + promise + Duration::from_secs(2);
        let seen = loop {
            let ok = fs::read(m.path().join(a)).is_ok_and(|x| x == b"changed on the server\n")
                && fs::read(m.path().join(b)).is_ok_and(|x| x == b"a new file under the old name\n")
                && fs::read(m.path().join("tree/t00/s00/moved.c")).is_ok_and(|x| x == b"int x;\n"[..3]);
            if ok {
                break Some(changed_at.elapsed());
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let Some(seen) = seen else {
            bail!(
                "{}: the changes made on the server were not all seen within {:.1} s (its promise {:.1} s + 2 s)",
                m.mode.name(),
                (promise + Duration::from_secs(2)).as_secs_f64(),
                promise.as_secs_f64()
            );
        };
        eprintln!(
            "xtask netbench:   {:<9} saw the server's changes after {:.2} s (promise {:.1} s)",
            m.mode.name(),
            seen.as_secs_f64(),
            promise.as_secs_f64()
        );
        out.push(json!({"mode": m.mode.name(), "seen_after_secs": seen.as_secs_f64(), "promise_secs": promise.as_secs_f64()}));
    }
    // Back as generated, for the next round.
    fs::remove_file(served.join(b))?;
    fs::rename(served.join("tree/t00/s00/moved.c"), served.join(b))?;
    fs::write(served.join(a), &b"int x;\n"[..2])?;
    Ok(out)
}

/// Empties the kernel's page, dentry and inode caches (needs root).
fn drop_kernel_caches() -> Result<()> {
    let _ = std::process::Command::new("sync").status();
    fs::write("/proc/sys/vm/drop_caches", "3").context("echo 3 > /proc/sys/vm/drop_caches (needs root)")
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per workload and mode: the median time and requests, and the median of
/// the per-round speedups against `sshfs`.
fn summarise(samples: &[Sample]) -> Vec<Value> {
    let mut out = Vec::new();
    for w in WORKLOADS {
        for mode in MODES {
            let mine: Vec<&Sample> = samples.iter().filter(|s| s.workload == w && s.mode == mode).collect();
            if mine.is_empty() {
                continue;
            }
            let ratios: Vec<f64> = mine
                .iter()
                .filter_map(|s| {
                    samples
                        .iter()
                        .find(|b| b.workload == w && b.mode == Mode::Sshfs && b.round == s.round)
                        .map(|b| b.secs / s.secs)
                })
                .collect();
            out.push(json!({
                "workload": w,
                "mode": mode.name(),
                "secs": median(mine.iter().map(|s| s.secs).collect()),
                "requests": median(mine.iter().map(|s| s.requests as f64).collect()),
                "speedup_vs_sshfs": median(ratios),
            }));
        }
    }
    out
}

fn get<'a>(summary: &'a [Value], w: &str, mode: Mode) -> Option<&'a Value> {
    summary.iter().find(|r| r["workload"] == w && r["mode"] == mode.name())
}

fn markdown(
    o: &Options,
    s: &Scale,
    summary: &[Value],
    samples: &[Sample],
    delays: &Value,
    checks: &[Value],
    walk: Option<&walk::Outcome>,
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### netbench{}: {} round(s), TTL {} s, {} ms added each way (achieved: median {:.0} µs, p99 {:.0} µs over {} chunks), load {:.1}\n",
        if o.ci { " --ci" } else { "" },
        o.rounds,
        o.ttl,
        o.delay.as_secs_f64() * 1000.0,
        delays["p50_us"].as_f64().unwrap_or(f64::NAN),
        delays["p99_us"].as_f64().unwrap_or(f64::NAN),
        delays["chunks"],
        crate::util::loadavg()
    );
    let _ = writeln!(
        md,
        "Tree: {} files in {} directories; git: {} files; crate: {} modules; data: {} MiB in {} files; include path: {} directories, {} headers.\n",
        s.tree_files(),
        s.top * s.sub + s.top,
        s.git_dirs * s.git_files,
        s.modules,
        s.data_bytes() >> 20,
        s.data_files,
        s.inc_dirs,
        s.inc_dirs * s.inc_headers
    );
    md.push_str("Seconds per pass (median over rounds), SFTP requests per pass, and speedup against `sshfs` (median of per-round ratios; above 1 is faster):\n\n");
    md.push_str("| workload |");
    for m in MODES {
        let _ = write!(md, " {} s | req |", m.name());
    }
    for m in &MODES[1..] {
        let _ = write!(md, " {} vs sshfs |", m.name());
    }
    md.push_str("\n|---|");
    for _ in 0..MODES.len() * 2 + MODES.len() - 1 {
        md.push_str("---:|");
    }
    md.push('\n');
    for w in WORKLOADS {
        let _ = write!(md, "| {w} |");
        for m in MODES {
            match get(summary, w, m) {
                Some(r) => {
                    let _ = write!(
                        md,
                        " {:.3} | {:.0} |",
                        r["secs"].as_f64().unwrap_or(f64::NAN),
                        r["requests"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                None => md.push_str(" - | - |"),
            }
        }
        for m in &MODES[1..] {
            match get(summary, w, *m) {
                Some(r) => {
                    let _ = write!(md, " {:.2}x |", r["speedup_vs_sshfs"].as_f64().unwrap_or(f64::NAN));
                }
                None => md.push_str(" - |"),
            }
        }
        md.push('\n');
    }
    if o.rounds > 1 {
        md.push_str("\nPer-round speedups of `rcufs-kc` against `sshfs`:\n\n");
        for w in WORKLOADS {
            let rs: Vec<String> = (0..o.rounds)
                .filter_map(|round| {
                    let t = |mode: Mode| {
                        samples
                            .iter()
                            .find(|x| x.workload == w && x.mode == mode && x.round == round)
                            .map(|x| x.secs)
                    };
                    Some(format!("{:.2}", t(Mode::Sshfs)? / t(Mode::RcufsKc)?))
                })
                .collect();
            let _ = writeln!(md, "- {w}: {}", rs.join(", "));
        }
    }
    if !checks.is_empty() {
        md.push_str("\nChanges made on the server, seen after (s) / promised within (s): ");
        let parts: Vec<String> = checks
            .iter()
            .map(|c| {
                format!(
                    "{} {:.2} / {:.0}",
                    c["mode"].as_str().unwrap_or("?"),
                    c["seen_after_secs"].as_f64().unwrap_or(f64::NAN),
                    c["promise_secs"].as_f64().unwrap_or(f64::NAN)
                )
            })
            .collect();
        let _ = writeln!(md, "{}.", parts.join("; "));
    }
    if let Some(w) = walk {
        md.push('\n');
        md.push_str(&w.markdown());
    }
    md
}

/// The speedups against `sshfs` as a grouped bar chart.
fn plot(summary: &[Value]) -> String {
    let categories: Vec<String> = WORKLOADS.iter().map(|w| w.to_string()).collect();
    let series: Vec<crate::bench::svg::Series> = MODES[1..]
        .iter()
        .map(|&m| crate::bench::svg::Series {
            label: m.name().to_string(),
            values: WORKLOADS
                .iter()
                .map(|w| {
                    get(summary, w, m)
                        .and_then(|r| r["speedup_vs_sshfs"].as_f64())
                        .unwrap_or(f64::NAN)
                })
                .collect(),
        })
        .collect();
    crate::bench::svg::grouped_bars(
        "Speedup against the raw sshfs mount (0.5 ms each way)",
        "sshfs time / mode time",
        &categories,
        &series,
    )
}

/// Writes the result of a walk alone (`--walk N`).
fn write_walk(w: &walk::Outcome) -> Result<()> {
    let md = w.markdown();
    print!("\n{md}");
    let out = out_dir();
    fs::create_dir_all(&out)?;
    fs::write(out.join("netbench-walk.json"), serde_json::to_string_pretty(&w.json())?)?;
    fs::write(out.join("netbench-walk.md"), &md)?;
    eprintln!("xtask netbench: wrote {}", out.join("netbench-walk.md").display());
    Ok(())
}
