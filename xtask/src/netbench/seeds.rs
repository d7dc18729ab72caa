//! The seeds' experiments in front of a network source: `cargo xtask
//! netbench [--seed004 N[,N...]] [--seed001 N[,N...]] [--delay-ms MS]`.
//!
//! Over the local disk (`cargo xtask fsbench`) a miss costs the source's
//! cold lookup or read, which this machine's disk answers in less time than
//! a FUSE round trip takes; `fsbench/source_cost.rs` measures how much of
//! the speedup that accounts for. The papers' misses went to a disk that
//! took about 38 µs more per entry and read at about 130 MB/s (see there).
//! Here the source is sshfs over the delay link, so a miss crosses the
//! link: the case of a network filesystem's mount, which rcufs's caches
//! are for.
//!
//! Each run is fsbench's (`fsbench::seed004`, `fsbench::seed001`: the same
//! caches, passes, drops and kernel-cache emptying) with the sshfs mount as
//! the source: a fresh sshfs mount per run (its own caches kept 1 s, the
//! kernel's none, `noforget`, as netbench's rcufs modes) and a fresh rcufs
//! mount over it.
//! - Seed 004: three directories of `N` empty files, a dcache of about two.
//! - Seed 001: directories 1 and 3 of `N` files of 2 MB, `cp -r 1 2; cp -r
//!   3 4; grep data 1/*`, with a page-cache budget of three directories of
//!   `N` files and 2 % (`fsbench --paper`'s rule, applied to each count:
//!   four directories never fit, three always do).
//!
//! Writes `target/rcufs-bench/netbench_seed<NNN>_<delay>us.{json,md}`, one
//! pair per seed that ran (copied to `benches/results/`); a later run of
//! the same seed at the same delay replaces them.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::link::{DelayLink, SftpServer};
use super::sshfs::Sshfs;
use crate::fsbench::{self, S001_PAPER, S004_PAPER, SeedRun, paper_ratio};

/// sshfs's options: what it keeps from a listing for 1 s, nothing kept by
/// the kernel, its inode numbers kept (see `Mode::sshfs_options`).
const SSHFS_OPTIONS: &str = "dcache_timeout=1,entry_timeout=0,attr_timeout=0,negative_timeout=0,noforget";

/// The file counts to run (sorted, without repeats).
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) seed004: Vec<usize>,
    pub(crate) seed001: Vec<usize>,
}

/// One file count, without and with the drop.
struct Point {
    seed: &'static str,
    files: usize,
    without: SeedRun,
    with: SeedRun,
    /// The paper's speedup at the same count, where its table has one.
    paper: Option<f64>,
    record: Value,
}

/// One of fsbench's seed runs with a fresh sshfs mount as the source.
fn over_sshfs(
    served: &Path,
    work: &Path,
    link: &DelayLink,
    tag: &str,
    logs: &Path,
    seed: impl FnOnce(&Path) -> Result<SeedRun>,
) -> Result<SeedRun> {
    let conn = link.connections();
    let sshfs = Sshfs::mount(
        link.addr().port(),
        served,
        &work.join("seeds-sshfs"),
        SSHFS_OPTIONS,
        &logs.join(format!("seeds-sshfs-{tag}.log")),
    )?;
    fs::metadata(sshfs.path()).context("stat of the fresh sshfs mount")?;
    // The mount may answer before its connection is accepted (see
    // `mount_mode`): wait for it, so that the run goes through the link.
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.connections() <= conn && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if link.connections() <= conn {
        bail!("sshfs for {tag} answers without a connection through the link");
    }
    let run = seed(sshfs.path())?;
    drop(sshfs);
    eprintln!(
        "xtask netbench: {tag} over the link: {:.3} s; timed pass's counters {}",
        run.secs, run.delta
    );
    Ok(run)
}

/// Runs the experiments over a link that delays each direction by
/// `delay`; writes and prints the table.
pub(crate) fn run(rcufs: &Path, work: &Path, c: &Counts, delay: Duration, logs: &Path) -> Result<()> {
    let served = work.join("seeds-served");
    // `fsbench --paper`'s sets: `paper001/x<count>/{1,3}` and `s004/{1,2,3}`.
    fsbench::generate_paper_sets(&served, &c.seed001, &c.seed004, &[])?;
    let server = SftpServer::start()?;
    let link = DelayLink::start(server.addr(), delay)?;
    let mnt = work.join("seeds-mnt");
    let delay_ms = delay.as_secs_f64() * 1e3;
    // One count's two runs, without and with the drop; `seed` is fsbench's
    // run given the sshfs source, whether to drop and the rcufs log.
    let pair = |name: &str, x: usize, seed: &dyn Fn(&Path, bool, &Path) -> Result<SeedRun>| {
        let run = |drop2: bool| {
            let tag = format!("{name}-{x}-{}", if drop2 { "drop" } else { "keep" });
            let log = logs.join(format!("seeds-rcufs-{tag}.log"));
            over_sshfs(&served, work, &link, &tag, logs, |src| seed(src, drop2, &log))
        };
        Ok::<_, anyhow::Error>((run(false)?, run(true)?))
    };
    let mut points = Vec::new();
    for &x in &c.seed004 {
        let (without, with) = pair("seed004", x, &|src, drop2, log| {
            fsbench::seed004(rcufs, src, &mnt, x, drop2, log)
        })?;
        let paper = paper_ratio(S004_PAPER, x);
        let record = fsbench::seed_record(
            format!(
                "seed 004 in front of sshfs, {delay_ms} ms each way: 2nd pass over dir 1, {x} files/dir, dcache for ~2 dirs, without vs with `drop --dentries 2`"
            ),
            &without,
            &with,
            paper.unwrap_or(4.29),
        );
        points.push(Point {
            seed: "004",
            files: x,
            without,
            with,
            paper,
            record,
        });
    }
    for &x in &c.seed001 {
        let budget = fsbench::s001_budget(&[x]);
        let base = format!("paper001/x{x}");
        let (without, with) = pair("seed001", x, &|src, drop2, log| {
            fsbench::seed001(rcufs, src, &mnt, &base, budget, drop2, log)
        })?;
        let paper = paper_ratio(S001_PAPER, x);
        let record = fsbench::seed_record(
            format!(
                "seed 001 in front of sshfs, {delay_ms} ms each way: `cp -r 1 2; cp -r 3 4; grep data 1/*`, {x} files of 2 MB/dir, page cache {} MB (3 dirs and 2 %), without vs with `drop --pages 2`",
                budget / 1_000_000
            ),
            &without,
            &with,
            paper.unwrap_or(6.888 / 2.197),
        );
        points.push(Point {
            seed: "001",
            files: x,
            without,
            with,
            paper,
            record,
        });
    }
    let (n, median_us, p99_us) = link.delays().summary();
    let link_md = format!(
        "sshfs over a link delaying each direction {delay_ms} ms; achieved one-way delay: median {median_us:.0} µs, 99th percentile {p99_us:.0} µs over {n} chunks"
    );
    for seed in ["004", "001"] {
        let ours: Vec<&Point> = points.iter().filter(|p| p.seed == seed).collect();
        if ours.is_empty() {
            continue;
        }
        let (section, what) = if seed == "004" {
            ("dcache", "dentry")
        } else {
            ("pagecache", "page-cache")
        };
        let mut md = String::new();
        let _ = writeln!(md, "### Seed {seed} in front of a network source ({link_md})\n");
        let _ = writeln!(
            md,
            "| files per dir | without drop (s) | with drop (s) | speedup | paper at the same count | timed pass without: {what} misses / hits | with |\n|---:|---:|---:|---:|---:|---:|---:|"
        );
        let mut records = Vec::new();
        for p in ours {
            let c = |r: &SeedRun| format!("{} / {}", r.delta[section]["misses"], r.delta[section]["hits"]);
            let _ = writeln!(
                md,
                "| {} | {:.3} | {:.3} | {:.2}x | {} | {} | {} |",
                p.files,
                p.without.secs,
                p.with.secs,
                p.without.secs / p.with.secs,
                p.paper.map_or("-".into(), |r| format!("{r:.2}x")),
                c(&p.without),
                c(&p.with)
            );
            let mut r = p.record.clone();
            r["files_per_dir"] = p.files.into();
            r["delay_ms"] = delay_ms.into();
            r["achieved_delay_us"] = serde_json::json!({"median": median_us, "p99": p99_us});
            records.push(r);
        }
        print!("{md}");
        write(
            &format!("netbench_seed{seed}_{}us", delay.as_micros()),
            &md,
            &Value::Array(records),
        )?;
    }
    Ok(())
}

/// Writes `<stem>.md` and `<stem>.json` to the bench output directory and
/// copies them to `benches/results/`.
fn write(stem: &str, md: &str, records: &Value) -> Result<()> {
    let out = crate::bench::out_dir();
    fs::create_dir_all(&out)?;
    fs::write(out.join(format!("{stem}.md")), md)?;
    fs::write(out.join(format!("{stem}.json")), serde_json::to_string_pretty(records)?)?;
    let results = crate::util::root().join("benches/results");
    fs::create_dir_all(&results)?;
    for ext in ["md", "json"] {
        fs::copy(out.join(format!("{stem}.{ext}")), results.join(format!("{stem}.{ext}")))?;
    }
    eprintln!("xtask netbench: wrote {stem}.{{md,json}} (copied to benches/results/)");
    Ok(())
}
