//! The `rcufs` command line: argument definitions (clap derive) with the
//! library's defaults, and the size and duration parsers. (`mount()` itself
//! checks the source, the mount point and the machine, and names each
//! problem with its fix.)
//!
//! Three subcommands:
//! - `rcufs mount SOURCE MOUNTPOINT [options]` serves SOURCE at MOUNTPOINT in
//!   the foreground until SIGINT/SIGTERM or an unmount from outside; each
//!   of its flags also has an `-o` key (`mount_opts.rs` derives the keys
//!   from the definition below, so a new flag needs nothing more), and the
//!   last of repeated options wins (`args_override_self`);
//! - `rcufs drop [--pages | --dentries | --all] DIR...` drops the caches under
//!   each directory with the drop ioctl (the modes of the kernel's
//!   `drop_caches`, as in seed 004, "VFS: Directory level cache cleaning");
//! - `rcufs stats PATH [--format table|json|prometheus]` prints the counters
//!   of the mount holding PATH;
//! - `rcufs warm [--pages | --dentries | --all] DIR...` fills the caches
//!   under each directory within the page cache budget (`warm.rs`).
//!
//! Sizes are binary: `K`, `M`, `G`, `T` mean 2^10, 2^20, 2^30, 2^40 bytes
//! (an optional `B` or `iB` may follow), and a decimal fraction is allowed
//! with a unit (`1.5G`); the result is rounded down to a whole byte.

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use fuse_fs::protocol::DropMode;
use fuse_fs::{CoherenceRequest, IoUring, MountOptions};

/// The default number of FUSE worker threads for a local source (the
/// library's: the machine's parallelism, at least 2).
pub fn default_threads() -> usize {
    fuse_fs::local_threads()
}

/// `--threads`' default as `--help` shows it.
static DEFAULT_THREADS_HELP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "FUSE worker threads [default: {} here for a local source; {} or more for a network or FUSE source]",
        default_threads(),
        fuse_fs::slow_source::NETWORK_THREADS
    )
});

/// The default dcache capacity, in entries (the library's default).
pub fn default_dcache_entries() -> usize {
    MountOptions::default().dcache_entries
}

/// The default page cache budget as `--help` shows it (the library's
/// default, in the largest binary unit that divides it).
static DEFAULT_PAGE_CACHE_SIZE: LazyLock<String> =
    LazyLock::new(|| show_size(MountOptions::default().page_cache_bytes));

/// `--revalidate`'s default as `--help` shows it.
static DEFAULT_REVALIDATE_HELP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "How soon names and attributes changed directly in SOURCE are seen where nothing reports the \
         changes: everywhere with coherence ttl; with watch, only what the watch cannot see (objects \
         without file handles, filesystems it could not mark, everything if it stops). In seconds \
         (fractions allowed) [default: {} for a local source, {} for a network or FUSE source]",
        fuse_fs::slow_source::LOCAL_REVALIDATE.as_secs_f64(),
        fuse_fs::slow_source::NETWORK_REVALIDATE.as_secs_f64()
    )
});

/// `n` bytes in the largest binary unit that divides it exactly (`512M`).
pub fn show_size(n: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n != 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}
/// The smallest page cache budget `mount` accepts: one page.
pub const MIN_PAGE_CACHE_BYTES: u64 = 4096;

#[derive(Debug, Parser)]
#[command(
    name = "rcufs",
    version,
    about = "A passthrough FUSE filesystem whose lookups go through an RCU dentry cache and whose reads go \
             through a radix-tree page cache, with per-directory cache drop.",
    after_help = "Set RUST_LOG (for example RUST_LOG=debug) to control the log output on stderr."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount a mirror of SOURCE at MOUNTPOINT and serve it in the foreground
    /// until unmounted or sent SIGINT/SIGTERM.
    ///
    /// Every option also has an `-o` spelling (`--dcache-entries 10` is
    /// `-o dcache_entries=10`); the last one given wins.
    #[command(args_override_self = true)]
    Mount(MountArgs),
    /// Drop the cached dentries and/or pages under each DIR (on an rcufs mount).
    Drop(DropCmd),
    /// Print the cache counters of the rcufs mount that holds PATH.
    Stats(StatsCmd),
    /// Fill the cached dentries and/or pages under each DIR (on an rcufs
    /// mount), within the caches' budgets: the inverse of `drop`.
    Warm(WarmCmd),
}

#[derive(Debug, Args)]
pub struct MountArgs {
    /// The directory to mirror.
    pub source: PathBuf,
    /// An existing, empty directory outside SOURCE to mount on.
    pub mountpoint: PathBuf,
    #[arg(long, value_name = "N", help = DEFAULT_THREADS_HELP.as_str(), value_parser = parse_positive)]
    pub threads: Option<usize>,
    /// After answering a request, one FUSE worker keeps polling for the
    /// next one for this many microseconds before it sleeps (0: never, at
    /// most 10000). A request that comes within the window is taken without
    /// waking a sleeping thread, which on machines where waking an idle CPU
    /// is slow (virtual machines) shortens every round trip of a busy
    /// reader; the price is up to one CPU kept busy while requests keep
    /// coming. See BENCHMARKS.md, "What a round trip costs".
    #[arg(long, value_name = "US", default_value_t = 0, value_parser = parse_poll_us)]
    pub poll_us: u64,
    /// How requests reach the daemon: `off` (through /dev/fuse), `on`
    /// (FUSE over io_uring: one queue per CPU, served by a thread pinned to
    /// that CPU; needs Linux 6.14+ with the fuse module's enable_uring set,
    /// and the mount fails otherwise), `idle` (as `on`, the queues' threads
    /// under SCHED_IDLE: a caller stays on its CPU, but the daemon then
    /// runs only when nothing else wants the CPU, so under CPU load every
    /// request waits). See README, "FUSE over io_uring".
    #[arg(long, value_name = "MODE", default_value = "off")]
    pub io_uring: IoUring,
    /// Capacity of the dentry cache, in entries.
    #[arg(long, value_name = "N", default_value_t = default_dcache_entries(), value_parser = parse_positive)]
    pub dcache_entries: usize,
    /// How many of those entries may be negative (names known not to exist)
    /// [default: a quarter of --dcache-entries].
    #[arg(long, value_name = "N")]
    pub dcache_negative: Option<usize>,
    /// Page cache budget: bytes, or with a binary unit (4096, 512K, 512M, 1.5G, 2G).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_PAGE_CACHE_SIZE.as_str(), value_parser = parse_page_cache_size)]
    pub page_cache_size: u64,
    /// Let the kernel cache entries, attributes, negative entries and pages
    /// too (faster; every drop also invalidates the kernel's copies).
    #[arg(long)]
    pub kernel_cache: bool,
    /// How changes made directly in SOURCE reach the mount: `watch` applies
    /// each one as the kernel reports it (fanotify; needs root and a local
    /// filesystem), `ttl` re-checks after --revalidate, `auto` watches where
    /// it can and uses ttl elsewhere.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub coherence: CoherenceRequest,
    #[arg(long, value_name = "SECS", help = DEFAULT_REVALIDATE_HELP.as_str(), value_parser = parse_secs)]
    pub revalidate: Option<Duration>,
    /// Append the log (and anything else written to stdout/stderr) to this
    /// file instead of stderr.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// Log line format: `text` (no colours unless stderr is a terminal) or
    /// `json` (one object per line, for log collectors).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Mount options, comma-separated, repeatable: every option above as
    /// `key=value` or `key` (dcache_entries=N, kernel_cache, ...), and the
    /// FUSE ones (allow_other, ro, default_permissions, ...).
    #[arg(short = 'o', value_name = "OPTS", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub options: Vec<String>,
    /// Serve the counters in the Prometheus format at http://ADDR/metrics
    /// (ADDR: 127.0.0.1:9101, [::1]:9101, localhost:9101, or :9101 for
    /// 127.0.0.1; port 0 picks one and the log names it). Loopback only
    /// unless --metrics-allow-remote.
    #[arg(long, value_name = "ADDR", value_parser = fuse_fs::metrics_http::parse_listen)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Allow --metrics-listen on a non-loopback address (the endpoint has no
    /// authentication: anyone who can reach it reads the counters); nothing
    /// without --metrics-listen.
    #[arg(long)]
    pub metrics_allow_remote: bool,
}

/// The format of the daemon's log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; ANSI colours only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Args)]
pub struct DropCmd {
    /// Drop cached pages only (mode 1).
    #[arg(long, conflicts_with_all = ["dentries", "all"])]
    pub pages: bool,
    /// Drop cached dentries and the inodes they pin only (mode 2).
    #[arg(long, conflicts_with_all = ["pages", "all"])]
    pub dentries: bool,
    /// Drop both (mode 3, the default).
    #[arg(long, conflicts_with_all = ["pages", "dentries"])]
    pub all: bool,
    /// Directories on an rcufs mount; everything cached under each is dropped.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

impl DropCmd {
    /// The mode the flags select (`--all` when none is given).
    pub fn mode(&self) -> DropMode {
        if self.pages {
            DropMode::Pages
        } else if self.dentries {
            DropMode::Dentries
        } else {
            DropMode::All
        }
    }
}

#[derive(Debug, Args)]
pub struct WarmCmd {
    /// Read the files (their pages; the walk caches their dentries too).
    #[arg(long, conflicts_with_all = ["dentries", "all"])]
    pub pages: bool,
    /// Look up every entry only (no file is read).
    #[arg(long, conflicts_with_all = ["pages", "all"])]
    pub dentries: bool,
    /// Both (the default).
    #[arg(long, conflicts_with_all = ["pages", "dentries"])]
    pub all: bool,
    /// Threads walking and reading in parallel.
    #[arg(long, short = 'j', value_name = "N", default_value_t = 4, value_parser = parse_positive)]
    pub jobs: usize,
    /// Directories on an rcufs mount; everything under each is warmed.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

impl WarmCmd {
    /// The mode the flags select (`--all` when none is given).
    pub fn mode(&self) -> crate::warm::WarmMode {
        use crate::warm::WarmMode;
        if self.pages {
            WarmMode::Pages
        } else if self.dentries {
            WarmMode::Dentries
        } else {
            WarmMode::All
        }
    }
}

#[derive(Debug, Args)]
pub struct StatsCmd {
    /// Any path on the mount (the mount point itself, or a file or directory in it).
    pub path: PathBuf,
    /// Print the JSON exactly as the filesystem returns it (same as `--format json`).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: `table` (for people), `json` (as the filesystem
    /// returns it) or `prometheus` (the text exposition format, as the
    /// `--metrics-listen` endpoint serves it).
    #[arg(long, value_enum, default_value_t = StatsFormat::Table)]
    pub format: StatsFormat,
}

/// The output formats of `rcufs stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsFormat {
    /// A table, one block per section.
    Table,
    /// The stats JSON as the filesystem returns it.
    Json,
    /// The Prometheus (OpenMetrics) text exposition format.
    Prometheus,
}

/// Parses a size: a whole number of bytes (`4096`) or a number with a binary
/// unit (`512K`, `512M`, `1.5G`, `2GiB`, `1t`). Fractions need a unit and are
/// rounded down to whole bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown unit `{unit}` in `{s}` (use K, M, G or T)")),
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(format!("`{s}` has no number"));
    }
    if !frac.is_empty() && shift == 0 {
        return Err(format!(
            "`{s}`: a fraction of a byte; give a whole number of bytes or a unit"
        ));
    }
    if frac.contains('.') {
        return Err(format!("`{s}` is not a number"));
    }
    let too_big = || format!("`{s}` is too large");
    let int_value: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_big())?
    };
    let mut bytes = int_value.checked_mul(1u64 << shift).ok_or_else(too_big)?;
    if !frac.is_empty() {
        // At most 12 fraction digits count: 10^12 * 2^40 still fits in u128.
        let digits = &frac[..frac.len().min(12)];
        let numerator: u128 = digits.parse().map_err(|_| format!("`{s}` is not a number"))?;
        let denominator = 10u128.pow(digits.len() as u32);
        let extra = (numerator << shift) / denominator;
        bytes = bytes
            .checked_add(u64::try_from(extra).map_err(|_| too_big())?)
            .ok_or_else(too_big)?;
    }
    Ok(bytes)
}

fn parse_page_cache_size(s: &str) -> Result<u64, String> {
    let bytes = parse_size(s)?;
    if bytes < MIN_PAGE_CACHE_BYTES {
        return Err(format!(
            "the page cache needs at least one page ({MIN_PAGE_CACHE_BYTES} bytes)"
        ));
    }
    Ok(bytes)
}

/// Parses a duration in seconds: `1`, `0`, `0.25`, `30`.
pub fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{s}`: seconds must be a finite number, zero or more"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

/// The largest `--poll-us`: 10 ms (a longer window saves nothing more and
/// only keeps a CPU busy longer after the last request).
pub const MAX_POLL_US: u64 = 10_000;

/// Parses `--poll-us`: whole microseconds, 0 to [`MAX_POLL_US`].
pub fn parse_poll_us(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n <= MAX_POLL_US => Ok(n),
        Ok(_) => Err(format!("at most {MAX_POLL_US} microseconds")),
        Err(_) => Err(format!("`{s}` is not a whole number of microseconds")),
    }
}

fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}

#[cfg(test)]
mod tests;
