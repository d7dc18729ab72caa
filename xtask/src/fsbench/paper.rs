//! `cargo xtask fsbench --paper`: the seeds' experiments at the papers'
//! scales, each as a curve over the papers' file counts.
//!
//! - Seed 001 ("Fadvise: Directory level page cache cleaning support"),
//!   literally: `cp -r 1 2; cp -r 3 4; time grep data 1/*` with GNU cp, for
//!   X = 360, 380, ..., 460 files of 2 MB per directory (the paper's table),
//!   with one page-cache budget for every X, as the paper's machine had one
//!   memory size: three directories of the largest X and 2 % (2.8 GB). So
//!   four directories never fit and, with the drop of 2, three always do,
//!   which is what the paper's figures show (its times with cleaning stay
//!   nearly flat while those without grow with X). (A first choice, 3.2
//!   directories of the smallest X, 2.3 GB, let three directories overflow
//!   from 384 files on: at 460 files the grep then missed every page of 1
//!   with and without the drop, CLOCK's sequential flooding.) Directories
//!   `1` and `3` of each X are hard links to the first X files of one set.
//! - Seed 004 ("VFS: Directory level cache cleaning"): the access pattern
//!   1, 2, 3, 1 with a dentry cache of about two directories, for 20,000 to
//!   260,000 files per directory (the paper's 180,000-260,000 and smaller
//!   ones for the curve); each X accesses the first X files of three
//!   directories generated at the largest X.
//!
//! Each point runs without and with the drop, one run each; the records
//! carry the timed pass's cache counters, the table the paper's figure at
//! the same X where the paper has one and the speedup the source's disk
//! accounts for (`fsbench/source_cost.rs`), and an SVG plots the speedup
//! against the file count beside both.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use serde_json::Value;

use super::{Scale, seed_record, seed001, seed004, sorted_files, source_cost, with_source_cost, write_text};
use crate::bench::{out_dir, svg};
use crate::util::{Rng, root};

/// Seed 001's file counts per directory (the paper's table).
pub const S001_FILES: &[usize] = &[360, 380, 400, 420, 440, 460];
/// Seed 004's file counts per directory: the paper's 180,000-260,000 and
/// smaller ones, for the curve.
pub const S004_FILES: &[usize] = &[20_000, 60_000, 120_000, 180_000, 220_000, 260_000];

/// The paper's seconds without and with cleaning, by file count.
pub(crate) const S001_PAPER: &[(usize, f64, f64)] = &[
    (360, 2.385, 1.361),
    (380, 3.159, 1.466),
    (400, 3.972, 1.558),
    (420, 4.823, 1.548),
    (440, 5.798, 1.702),
    (460, 6.888, 2.197),
];
pub(crate) const S004_PAPER: &[(usize, f64, f64)] = &[
    (180_000, 2.165, 1.949),
    (200_000, 6.977, 1.906),
    (220_000, 10.032, 2.336),
    (240_000, 11.571, 2.918),
    (260_000, 13.443, 3.651),
];

pub(crate) fn paper_ratio(table: &[(usize, f64, f64)], files: usize) -> Option<f64> {
    table.iter().find(|t| t.0 == files).map(|t| t.1 / t.2)
}

/// Seed 001's budget: three directories of 2 MB files at the largest X,
/// and 2 %.
pub(crate) fn s001_budget(files: &[usize]) -> u64 {
    files.iter().copied().max().unwrap_or(460) as u64 * 2_000_000 * 3 * 102 / 100
}

/// Generates the file sets (before any mount): seed 001's two directories
/// of the largest X with one view of hard links per X, and seed 004's
/// three directories grown to the largest X.
pub fn generate(src: &Path, s001: &[usize], s004: &[usize], skip: &[String]) -> Result<()> {
    let start = Instant::now();
    let mut rng = Rng(0x5eed_0000_0001);
    if !skip.iter().any(|x| x == "paper-s001")
        && let Some(&max) = s001.iter().max()
    {
        for d in ["1", "3"] {
            let dir = src.join(format!("paper001/all/{d}"));
            fs::create_dir_all(&dir)?;
            for f in 0..max {
                write_text(&dir.join(format!("f{f:04}.txt")), 2_000_000, &mut rng)?;
            }
            for &x in s001 {
                let view = src.join(format!("paper001/x{x}/{d}"));
                fs::create_dir_all(&view)?;
                for f in 0..x {
                    let name = format!("f{f:04}.txt");
                    fs::hard_link(dir.join(&name), view.join(&name))?;
                }
            }
        }
    }
    if !skip.iter().any(|x| x == "paper-s004")
        && let Some(&max) = s004.iter().max()
    {
        for d in 1..=3 {
            let dir = src.join(format!("s004/{d}"));
            fs::create_dir_all(&dir)?;
            for f in 0..max {
                let p = dir.join(format!("f{f:06}"));
                if !p.exists() {
                    fs::File::create(p)?;
                }
            }
        }
    }
    let _ = std::process::Command::new("sync").status();
    eprintln!(
        "xtask fsbench: generated the paper-scale sets in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One point of a curve.
struct Point {
    files: usize,
    without: f64,
    with: f64,
    paper: Option<f64>,
    /// The speedup the source's disk accounts for (`fsbench/source_cost.rs`);
    /// `None` if the source's passes failed.
    disk_share: Option<f64>,
    counters: String,
}

/// Runs the curves; returns the records and a markdown section.
#[allow(clippy::too_many_arguments)]
pub fn run(
    rcufs: &Path,
    src: &Path,
    mnt: &Path,
    _s: &Scale,
    logs: &Path,
    s001: &[usize],
    s004: &[usize],
    skip: &[String],
) -> Result<(Vec<Value>, String)> {
    let mut records = Vec::new();
    let mut md = String::new();
    let mut plots = Vec::new();
    let counters = |v: &Value, section: &str| {
        let d = &v[section];
        format!("{} / {}", d["misses"], d["hits"])
    };
    if !skip.iter().any(|x| x == "paper-s001") {
        let budget = s001_budget(s001);
        let mut points = Vec::new();
        for &x in s001 {
            let base = format!("paper001/x{x}");
            eprintln!("xtask fsbench: paper seed 001 at {x} files per directory");
            let keep = seed001(
                rcufs,
                src,
                mnt,
                &base,
                budget,
                false,
                &logs.join(format!("paper001-{x}-keep.log")),
            )?;
            let with = seed001(
                rcufs,
                src,
                mnt,
                &base,
                budget,
                true,
                &logs.join(format!("paper001-{x}-drop.log")),
            )?;
            let cost = sorted_files(&src.join(&base).join("1")).and_then(|f| source_cost::s001(&f));
            let paper = paper_ratio(S001_PAPER, x);
            let mut r = seed_record(
                format!(
                    "seed 001 at the paper's scale: `cp -r 1 2; cp -r 3 4; grep data 1/*`, {x} files of 2 MB/dir, page cache {} MB, without vs with `drop --pages 2`",
                    budget / 1_000_000
                ),
                &keep,
                &with,
                paper.unwrap_or(6.888 / 2.197),
            );
            let disk_share = cost.as_ref().ok().map(|c| c.disk_share(with.secs));
            r = with_source_cost(r, cost, with.secs);
            r["files_per_dir"] = x.into();
            records.push(r);
            points.push(Point {
                files: x,
                without: keep.secs,
                with: with.secs,
                paper,
                disk_share,
                counters: format!(
                    "{} | {}",
                    counters(&keep.delta, "pagecache"),
                    counters(&with.delta, "pagecache")
                ),
            });
        }
        table(
            &mut md,
            &format!(
                "Seed 001 at the paper's scale (literal `cp -r`, page cache {} MB for every X; grep's page misses / hits)",
                budget / 1_000_000
            ),
            &points,
        );
        plots.push((
            "seed001_paper.svg",
            "seed 001: grep speedup with the drop, by files per directory",
            points,
        ));
    }
    if !skip.iter().any(|x| x == "paper-s004") {
        let mut points = Vec::new();
        for &x in s004 {
            eprintln!("xtask fsbench: paper seed 004 at {x} files per directory");
            let keep = seed004(rcufs, src, mnt, x, false, &logs.join(format!("paper004-{x}-keep.log")))?;
            let with = seed004(rcufs, src, mnt, x, true, &logs.join(format!("paper004-{x}-drop.log")))?;
            let cost = source_cost::s004(src, x);
            let paper = paper_ratio(S004_PAPER, x);
            let mut r = seed_record(
                format!(
                    "seed 004 at the paper's scale: 2nd pass over dir 1, {x} files/dir, dcache for ~2 dirs, without vs with `drop --dentries 2`"
                ),
                &keep,
                &with,
                paper.unwrap_or(4.29),
            );
            let disk_share = cost.as_ref().ok().map(|c| c.disk_share(with.secs));
            r = with_source_cost(r, cost, with.secs);
            r["files_per_dir"] = x.into();
            records.push(r);
            points.push(Point {
                files: x,
                without: keep.secs,
                with: with.secs,
                paper,
                disk_share,
                counters: format!(
                    "{} | {}",
                    counters(&keep.delta, "dcache"),
                    counters(&with.delta, "dcache")
                ),
            });
        }
        table(
            &mut md,
            "Seed 004 at the paper's scale (dcache of 2.2 directories at each X; the timed pass's dentry misses / hits)",
            &points,
        );
        plots.push((
            "seed004_paper.svg",
            "seed 004: 2nd pass speedup with the drop, by files per directory",
            points,
        ));
    }
    let out = out_dir();
    fs::create_dir_all(&out)?;
    let results = root().join("benches/results");
    fs::create_dir_all(&results)?;
    for (file, title, points) in plots {
        let cats: Vec<String> = points.iter().map(|p| p.files.to_string()).collect();
        let series = vec![
            svg::Series {
                label: "rcufs".into(),
                values: points.iter().map(|p| p.without / p.with).collect(),
            },
            svg::Series {
                label: "paper (where it has the file count)".into(),
                values: points.iter().map(|p| p.paper.unwrap_or(0.0)).collect(),
            },
            svg::Series {
                label: "what the source's disk accounts for".into(),
                values: points.iter().map(|p| p.disk_share.unwrap_or(0.0)).collect(),
            },
        ];
        fs::write(out.join(file), svg::grouped_bars(title, "speedup (x)", &cats, &series))?;
        fs::copy(out.join(file), results.join(file))?;
        let _ = writeln!(md, "\n![{title}](benches/results/{file})");
    }
    Ok((records, md))
}

fn table(md: &mut String, title: &str, points: &[Point]) {
    let _ = writeln!(
        md,
        "\n### {title}\n\n| files per dir | without drop (s) | with drop (s) | speedup | paper | from the source's disk | timed pass without \\| with |\n|---:|---:|---:|---:|---:|---:|---|"
    );
    for p in points {
        let _ = writeln!(
            md,
            "| {} | {:.3} | {:.3} | {:.2}x | {} | {} | {} |",
            p.files,
            p.without,
            p.with,
            p.without / p.with,
            p.paper.map_or("-".into(), |r| format!("{r:.2}x")),
            p.disk_share.map_or("-".into(), |d| format!("{d:.2}x")),
            p.counters
        );
    }
}
