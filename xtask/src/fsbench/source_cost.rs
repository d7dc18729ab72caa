//! What the source's disk accounts for in a seed experiment's speedup.
//!
//! Both seeds time one pass over directory 1 with its entries (seed 004) or
//! pages (seed 001) missing from rcufs's cache, and again with them all
//! hits. A hit still pays rcufs's round trips through `/dev/fuse`; a miss
//! pays those, what the source needs to answer from its disk, and rcufs's
//! own work to fill its cache. The source's part is measured here: the same
//! pass on the source directory itself, after emptying the kernel's caches
//! and again without (`SourceCost`). So `(hit pass + source cold - source
//! hot) / hit pass` is the speedup a cache whose misses cost no more than
//! the source's own cold accesses would show (`SourceCost::bound`); what a
//! measured speedup has above it comes from rcufs's miss path costing more
//! than the source's (its fills read differently from the kernel's
//! readahead), not from the disk.
//!
//! The papers' 4.29x and 3.14x compared the kernel's own cache with a disk
//! that took tens of microseconds per entry and about 100 MB/s. When the
//! source's disk answers a miss in less time than a FUSE round trip takes,
//! no cache above it can show a gain like theirs through a saved disk
//! access, and this bound says by how much.
//!
//! Each pass runs three times (the kernel's caches emptied before every
//! cold one); the medians are kept.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use super::{drop_kernel_caches, median, s004_pass};

/// The source's own cold and hot pass, in seconds (medians of three).
#[derive(Clone, Copy, Debug)]
pub struct SourceCost {
    pub cold: f64,
    pub hot: f64,
}

impl SourceCost {
    /// What a miss adds over a hit for the whole pass: the source's cold
    /// pass minus its hot pass (never below zero).
    pub fn miss_cost(&self) -> f64 {
        (self.cold - self.hot).max(0.0)
    }

    /// The speedup of a cache above the source whose all-hit pass takes
    /// `hit_secs` and whose misses cost what the source's cold accesses do.
    pub fn bound(&self, hit_secs: f64) -> f64 {
        (hit_secs + self.miss_cost()) / hit_secs
    }

    /// The record's fields: the source's passes and the bound.
    pub fn record(&self, hit_secs: f64) -> Value {
        json!({
            "source_cold_s": self.cold,
            "source_hot_s": self.hot,
            "source_bound": self.bound(hit_secs),
        })
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
pub fn s004(src: &Path, files: usize) -> Result<SourceCost> {
    measure(|| s004_pass(src, 1, files).map(drop))
}

/// Seed 001's pass on the source itself: the same `grep -c data` over the
/// same files of directory 1 (output to a pipe, as the timed pass).
pub fn s001(files: &[PathBuf]) -> Result<SourceCost> {
    measure(|| {
        let out = Command::new("grep").arg("-c").arg("data").args(files).output()?;
        if !out.status.success() {
            bail!("grep failed: {}", out.status);
        }
        Ok(())
    })
}
