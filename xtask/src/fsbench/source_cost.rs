//! What the source's disk accounts for in a seed experiment's speedup.
//!
//! Both seeds time one pass over directory 1 with its entries (seed 004) or
//! pages (seed 001) missing from rcufs's cache, and again with them all
//! hits. A hit still pays rcufs's round trips through `/dev/fuse`; a miss
//! pays those, what the source needs to answer from its disk, and rcufs's
//! own work to fill its cache. The source's part is measured here: the same
//! pass on the source directory itself, after emptying the kernel's caches
//! and again without (`SourceCost`). `(hit pass + source cold - source hot)
//! / hit pass` is then the speedup of a cache whose misses cost no more than
//! the source's cold accesses over its hot ones (`SourceCost::disk_share`).
//! It is not a limit: a measured speedup above it means that a miss costs
//! rcufs more than it costs the source (or is noise: the seed's runs are
//! single, the source's passes medians of three).
//!
//! The papers' misses were expensive: seed 004's table has a pass over
//! 260,000 files take 13.4 s without the cleaning and 3.7 s with it, about
//! 38 µs more per miss; seed 001's grep read its 920 MB in 6.9 s without
//! the cleaning, about 130 MB/s. When the source's disk answers a miss in
//! less time than a FUSE round trip takes, a saved disk access cannot show
//! a gain like theirs, and this figure says by how much.
//!
//! Each pass runs three times (the kernel's caches emptied before every
//! cold one); the medians are kept.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};

use super::{drop_kernel_caches, median, s004_pass};

/// The source's own cold and hot pass, in seconds (medians of three).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SourceCost {
    pub(crate) cold: f64,
    pub(crate) hot: f64,
}

impl SourceCost {
    /// What the source's misses add over its hits for the whole pass: its
    /// cold pass minus its hot pass (never below zero).
    pub(crate) fn miss_cost(&self) -> f64 {
        (self.cold - self.hot).max(0.0)
    }

    /// The speedup of a cache above the source whose all-hit pass takes
    /// `hit_secs` and whose misses add what the source's cold accesses add.
    pub(crate) fn disk_share(&self, hit_secs: f64) -> f64 {
        (hit_secs + self.miss_cost()) / hit_secs
    }

    /// The record's fields: the source's passes and the disk's share.
    pub(crate) fn record(&self, hit_secs: f64) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("source_cold_s".into(), json!(self.cold));
        m.insert("source_hot_s".into(), json!(self.hot));
        m.insert("disk_share".into(), json!(self.disk_share(hit_secs)));
        m
    }
}

fn measure(mut pass: impl FnMut() -> Result<()>) -> Result<SourceCost> {
    let (mut cold, mut hot) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        drop_kernel_caches()?;
        let start = Instant::now();
        pass()?;
        cold.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        pass()?;
        hot.push(start.elapsed().as_secs_f64());
    }
    Ok(SourceCost {
        cold: median(cold),
        hot: median(hot),
    })
}

/// Seed 004's pass on the source itself: an `lstat` of each of the first
/// `files` files of `src/s004/1`.
pub(crate) fn s004(src: &Path, files: usize) -> Result<SourceCost> {
    measure(|| s004_pass(src, 1, files).map(|_| ()))
}

/// Seed 001's pass on the source itself: the same `grep -c data` over the
/// same files of directory 1 (output to a pipe, as the timed pass).
pub(crate) fn s001(files: &[PathBuf]) -> Result<SourceCost> {
    measure(|| {
        let out = Command::new("grep").arg("-c").arg("data").args(files).output()?;
        if !out.status.success() {
            bail!("grep failed: {}", out.status);
        }
        Ok(())
    })
}
