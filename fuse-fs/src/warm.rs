//! `rcufs warm [--pages | --dentries | --all] [--jobs N] DIR...`: the inverse
//! of `rcufs drop`. Walks each directory through the mount so that rcufs's
//! dentry cache holds its entries and (with `--pages`/`--all`) its page cache
//! holds its files' pages, without pushing out what the warm itself added.
//!
//! # Design
//! Two phases per directory, each on `--jobs` threads:
//! 1. the walk: a shared queue of directories; each worker lists one and
//!    `lstat`s every entry through the mount (a LOOKUP: one dentry each),
//!    queueing subdirectories and recording regular files with their size.
//!    It stops adding entries when the dentry cache would pass its capacity
//!    (`dcache.capacity - dcache.entries` at the start);
//! 2. the pages (not for `--dentries`): the files, in path order, are read
//!    to their end. Each costs `size / page + 1` pages of the budget (rcufs
//!    caches one page per 4 KiB and one for the read that finds the end of
//!    the file). Before reading, a file reserves its cost against
//!    `pagecache.budget_bytes - pagecache.bytes_cached` as read from the
//!    stats when the phase starts; the first file that does not fit stops
//!    the phase: it and every later file are not read ("budget reached"),
//!    so the warm never makes the cache evict a page it warmed.
//!
//! # Limits
//! The reservation counts pages that were already cached before the warm
//! as new ones, so a second warm of a warm tree may stop early; other
//! readers of the mount during the warm can still cause evictions: the
//! summary reports the page cache's evictions during the warm so that this
//! is seen rather than assumed. The page size is the page cache's default
//! (4 KiB), which the mount does not change.

use std::collections::VecDeque;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::{Condvar, Mutex};
use serde_json::Value;

use crate::client;

/// The page cache's page size (`pagecache::Config::default`).
pub const PAGE: u64 = 4096;

/// What to warm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmMode {
    /// Walk and read the files (the walk fills dentries too).
    Pages,
    /// Walk only.
    Dentries,
    /// Both (the default).
    All,
}

impl WarmMode {
    fn reads_pages(self) -> bool {
        matches!(self, Self::Pages | Self::All)
    }
}

/// Budget cost of caching a file of `size` bytes through rcufs.
pub fn file_cost(size: u64) -> u64 {
    (size / PAGE + 1) * PAGE
}

/// What one warm did.
#[derive(Debug, Default)]
pub struct WarmReport {
    /// Directory entries looked up (dentries warmed).
    pub entries: u64,
    /// Entries not looked up because the dentry cache was full.
    pub entries_skipped: u64,
    /// Regular files found.
    pub files: u64,
    /// Files read to their end.
    pub files_read: u64,
    /// Files not read because the page budget would have been exceeded.
    pub files_not_warmed: u64,
    /// Bytes of those files.
    pub bytes_not_warmed: u64,
    /// Pages the reads put in the page cache (by the cost rule).
    pub pages: u64,
    /// Bytes read from the files.
    pub bytes: u64,
    /// Entries or files that could not be read (permissions, races).
    pub errors: u64,
    /// The page budget and what was free when the page phase started.
    pub budget_bytes: u64,
    pub free_bytes: u64,
    /// Page-cache evictions while the warm ran (0 unless something else
    /// filled the cache at the same time).
    pub evictions: u64,
    /// Dentry-cache evictions while the warm ran.
    pub dentry_evictions: u64,
    /// Whether the page phase stopped at the budget.
    pub budget_reached: bool,
    /// Wall time.
    pub elapsed: Duration,
}

fn stat_u64(stats: &Value, section: &str, key: &str) -> Result<u64> {
    stats[section][key]
        .as_u64()
        .ok_or_else(|| anyhow!("the mount's stats have no {section}.{key}"))
}

fn read_stats(mount_point: &Path) -> Result<Value> {
    let json = client::read_stats(mount_point)?;
    serde_json::from_str(&json).context("the stats are not valid JSON")
}

struct WalkQueue {
    state: Mutex<(VecDeque<PathBuf>, usize)>,
    cv: Condvar,
}

impl WalkQueue {
    /// The next directory to list, or `None` once every worker is idle and
    /// the queue is empty.
    fn pop(&self) -> Option<PathBuf> {
        let mut g = self.state.lock();
        loop {
            if let Some(d) = g.0.pop_front() {
                g.1 += 1;
                return Some(d);
            }
            if g.1 == 0 {
                self.cv.notify_all();
                return None;
            }
            self.cv.wait(&mut g);
        }
    }

    fn push(&self, dir: PathBuf) {
        self.state.lock().0.push_back(dir);
        self.cv.notify_one();
    }

    fn done(&self) {
        let mut g = self.state.lock();
        g.1 -= 1;
        if g.1 == 0 && g.0.is_empty() {
            self.cv.notify_all();
        }
    }
}

/// Warms `dir` (on an rcufs mount) with `jobs` threads.
pub fn warm(dir: &Path, mode: WarmMode, jobs: usize) -> Result<WarmReport> {
    let start = Instant::now();
    let mount = client::find_rcufs_mount(dir)?;
    let meta = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!(
            "{}: not a directory (warm walks a directory and everything under it)",
            dir.display()
        );
    }
    let before = read_stats(&mount.mount_point)?;
    let dentry_room = stat_u64(&before, "dcache", "capacity")?.saturating_sub(stat_u64(&before, "dcache", "entries")?);
    let bar = progress_bar();
    bar.set_message(format!("walking {}", dir.display()));

    // Phase 1: the walk.
    let queue = Arc::new(WalkQueue {
        state: Mutex::new((VecDeque::from([dir.to_path_buf()]), 0)),
        cv: Condvar::new(),
    });
    let entries = AtomicU64::new(0);
    let skipped = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let files: Mutex<Vec<(PathBuf, u64)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                while let Some(d) = queue.pop() {
                    walk_one(&d, &queue, &entries, &skipped, &errors, &files, dentry_room, &bar);
                    queue.done();
                }
            });
        }
    });
    let mut files = files.into_inner();
    files.sort();
    let mut report = WarmReport {
        entries: entries.into_inner(),
        entries_skipped: skipped.into_inner(),
        files: files.len() as u64,
        errors: errors.into_inner(),
        ..WarmReport::default()
    };

    // Phase 2: the pages.
    if mode.reads_pages() {
        let now = read_stats(&mount.mount_point)?;
        report.budget_bytes = stat_u64(&now, "pagecache", "budget_bytes")?;
        report.free_bytes = report
            .budget_bytes
            .saturating_sub(stat_u64(&now, "pagecache", "bytes_cached")?);
        let total: u64 = files.iter().map(|(_, size)| *size).sum();
        // The reading stops at the budget: the bar's end is what can fit.
        bar.set_length(total.min(report.free_bytes));
        bar.set_position(0);
        bar.set_message("reading".to_string());
        bar.set_style(
            ProgressStyle::with_template("{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .expect("a valid template"),
        );
        let next = AtomicUsize::new(0);
        let reserved = Mutex::new(0u64);
        let stopped = AtomicBool::new(false);
        let (read, pages, bytes, not_warmed, bytes_not_warmed, errs) = (
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
        );
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| {
                    let mut buf = vec![0u8; 128 << 10];
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((path, size)) = files.get(i) else { break };
                        let cost = file_cost(*size);
                        let fits = {
                            let mut r = reserved.lock();
                            // Relaxed: `stopped` is only read and written
                            // under `reserved`'s lock.
                            if !stopped.load(Ordering::Relaxed) && *r + cost <= report.free_bytes {
                                *r += cost;
                                true
                            } else {
                                stopped.store(true, Ordering::Relaxed);
                                false
                            }
                        };
                        if !fits {
                            not_warmed.fetch_add(1, Ordering::Relaxed);
                            bytes_not_warmed.fetch_add(*size, Ordering::Relaxed);
                            continue;
                        }
                        match read_all(path, &mut buf, &bar) {
                            Ok(n) => {
                                read.fetch_add(1, Ordering::Relaxed);
                                bytes.fetch_add(n, Ordering::Relaxed);
                                pages.fetch_add(cost / PAGE, Ordering::Relaxed);
                            }
                            Err(e) => {
                                tracing::debug!(path = %path.display(), "warm: {e}");
                                errs.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        report.files_read = read.into_inner();
        report.pages = pages.into_inner();
        report.bytes = bytes.into_inner();
        report.files_not_warmed = not_warmed.into_inner();
        report.bytes_not_warmed = bytes_not_warmed.into_inner();
        report.errors += errs.into_inner();
        report.budget_reached = stopped.into_inner();
    }
    bar.finish_and_clear();
    let after = read_stats(&mount.mount_point)?;
    report.evictions =
        stat_u64(&after, "pagecache", "evictions")?.saturating_sub(stat_u64(&before, "pagecache", "evictions")?);
    report.dentry_evictions =
        stat_u64(&after, "dcache", "evictions")?.saturating_sub(stat_u64(&before, "dcache", "evictions")?);
    report.elapsed = start.elapsed();
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn walk_one(
    dir: &Path,
    queue: &WalkQueue,
    entries: &AtomicU64,
    skipped: &AtomicU64,
    errors: &AtomicU64,
    files: &Mutex<Vec<(PathBuf, u64)>>,
    dentry_room: u64,
    bar: &ProgressBar,
) {
    let list = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(dir = %dir.display(), "warm: {e}");
            errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    for entry in list {
        let Ok(entry) = entry else {
            errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        // Claim a dentry of the room first, so that parallel workers never
        // look up more than the cache holds.
        if entries.fetch_add(1, Ordering::Relaxed) >= dentry_room {
            entries.fetch_sub(1, Ordering::Relaxed);
            skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let path = entry.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => queue.push(path),
            Ok(m) if m.is_file() => files.lock().push((path, m.len())),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(path = %path.display(), "warm: {e}");
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        bar.inc(1);
    }
}

/// Reads `path` to its end (through the mount), returning the bytes read.
fn read_all(path: &Path, buf: &mut [u8], bar: &ProgressBar) -> std::io::Result<u64> {
    let mut f = std::fs::File::open(path)?;
    let mut total = 0u64;
    loop {
        let n = match f.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        bar.inc(n as u64);
    }
}

/// A spinner while walking, a bar while reading, on a terminal only.
fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}: {pos} entries").expect("a valid template"));
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// The summary of one warm.
pub fn format_report(dir: &Path, mode: WarmMode, r: &WarmReport) -> String {
    let mut out = format!("{}: warmed {} entries", dir.display(), r.entries);
    if r.entries_skipped > 0 {
        out += &format!(" (dentry cache full: {} entries not looked up)", r.entries_skipped);
    }
    if mode.reads_pages() {
        out += &format!(
            " and {} pages ({}, {} read) of {} of {} files",
            r.pages,
            client::format_bytes(r.pages * PAGE),
            client::format_bytes(r.bytes),
            r.files_read,
            r.files
        );
        if r.budget_reached {
            out += &format!(
                "; page cache budget reached after {} files ({} free of {}): {} files ({}) not warmed",
                r.files_read,
                client::format_bytes(r.free_bytes),
                client::format_bytes(r.budget_bytes),
                r.files_not_warmed,
                client::format_bytes(r.bytes_not_warmed)
            );
        }
    }
    out += &format!("; took {}", client::format_ns(r.elapsed.as_nanos() as u64));
    if r.errors > 0 {
        out += &format!(
            "; {} entries could not be read (run with RUST_LOG=debug for each)",
            r.errors
        );
    }
    if r.evictions > 0 || r.dentry_evictions > 0 {
        out += &format!(
            "; WARNING: {} pages and {} dentries were evicted while warming (other activity on the mount?)",
            r.evictions, r.dentry_evictions
        );
    }
    out
}
