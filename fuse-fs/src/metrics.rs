//! The stats JSON (`user.rcufs.stats`, [`crate::fs::Fs::stats_json`]) as a
//! Prometheus scrape: used by `rcufs stats --format prometheus` and by the
//! daemon's `/metrics` endpoint (`metrics_http.rs`), so both print the same
//! thing for the same counters.
//!
//! # Design
//! The conversion walks the JSON rather than naming each counter, so a
//! counter added to the stats appears in the scrape with no edit here:
//! - every numeric leaf at `section.key` becomes `rcufs_section_key`, every
//!   top-level number `rcufs_key`; a boolean becomes a 0/1 gauge; a string
//!   becomes a gauge `rcufs_..._info{value="..."} 1`; arrays and nulls are
//!   left out;
//! - units go into the name as Prometheus asks: a `bytes` word anywhere in
//!   the key moves to the end (`bytes_cached` → `cached_bytes`), and a
//!   duration in `_ns`/`_us`/`_ms` is converted to seconds (`_seconds`);
//! - counter or gauge: [`TABLE`] says so (with a help text) for the names it
//!   knows; any other key is a counter when its last word is one of
//!   [`COUNTER_WORDS`] (`hits`, `evictions`, `dropped`, ...), else a gauge.
//!   Counters end in `_total`.
//! - every sample carries the label `mountpoint="..."`.
//!
//! The text is written by the `prometheus` crate's `TextEncoder` in the
//! Prometheus text exposition format 0.0.4 ([`CONTENT_TYPE`]), the format
//! every Prometheus server scrapes and `promtool check metrics` checks.
//! (`prometheus-client` writes only OpenMetrics, whose counter families are
//! named without `_total`; Debian 12's promtool 2.42 reads such a scrape as
//! untyped samples without help and fails the check.)
//!
//! # Invariants
//! - Each metric name appears once: a leaf whose derived name is already
//!   taken is left out, so the output is always a valid exposition.
//! - A value is never invented: only leaves present in the JSON are
//!   exported, with their values.

use std::collections::{HashMap, HashSet};

use prometheus::core::Collector;
use prometheus::{Counter, Gauge, IntCounter, IntGauge, Opts, Registry, TextEncoder};
use serde_json::Value;

/// The media type of what [`render`] writes: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Counter or gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows (until the daemon restarts): exported with `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// The leaves whose kind or help the name alone does not give: `(JSON path,
/// kind, help)`. Leaves not listed here are still exported (see the module
/// docs); this table only adds words.
pub const TABLE: &[(&str, Kind, &str)] = &[
    ("dcache.entries", Kind::Gauge, "Dentries in the rcufs dentry cache"),
    (
        "dcache.negative",
        Kind::Gauge,
        "Negative dentries (names known not to exist) in the dentry cache",
    ),
    ("dcache.hits", Kind::Counter, "Lookups answered by the dentry cache"),
    (
        "dcache.misses",
        Kind::Counter,
        "Lookups the dentry cache could not answer",
    ),
    (
        "dcache.negative_hits",
        Kind::Counter,
        "Lookups answered by a negative dentry",
    ),
    ("dcache.inserts", Kind::Counter, "Dentries inserted"),
    (
        "dcache.evictions",
        Kind::Counter,
        "Dentries evicted to stay within the capacity",
    ),
    (
        "dcache.dropped",
        Kind::Counter,
        "Dentries removed by drops and invalidations",
    ),
    (
        "dcache.capacity",
        Kind::Gauge,
        "Capacity of the dentry cache, in entries",
    ),
    ("pagecache.pages", Kind::Gauge, "Pages in the rcufs page cache"),
    (
        "pagecache.bytes_cached",
        Kind::Gauge,
        "Bytes accounted to cached pages (a page size each)",
    ),
    ("pagecache.budget_bytes", Kind::Gauge, "Page cache budget"),
    (
        "pagecache.frame_chunk_bytes",
        Kind::Gauge,
        "Bytes of the 2 MiB chunks the page frames of single 4 KiB pages come from (in use, free, and their headers); process-wide, shared by every mount the process serves",
    ),
    (
        "pagecache.frame_used_bytes",
        Kind::Gauge,
        "Bytes of page frames holding a cached page (or one awaiting its grace period); process-wide",
    ),
    ("pagecache.hits", Kind::Counter, "Page lookups that found a filled page"),
    (
        "pagecache.misses",
        Kind::Counter,
        "Page lookups that found no filled page",
    ),
    ("pagecache.fills", Kind::Counter, "Pages filled from the source"),
    (
        "pagecache.evictions",
        Kind::Counter,
        "Pages evicted to stay within the budget",
    ),
    ("pagecache.inodes", Kind::Gauge, "Files with pages in the page cache"),
    ("inodes.known", Kind::Gauge, "Inodes the filesystem knows"),
    ("inodes.open_fds", Kind::Gauge, "File descriptors the daemon has open"),
    (
        "inodes.pooled_fds",
        Kind::Gauge,
        "Descriptors in the inode descriptor pool",
    ),
    (
        "inodes.fd_threshold",
        Kind::Gauge,
        "Descriptor count past which non-root opens are refused",
    ),
    (
        "inodes.fd_user_max",
        Kind::Gauge,
        "Most descriptors one non-root user may hold",
    ),
    (
        "inodes.fd_user_refusals",
        Kind::Counter,
        "Non-root opens refused because their user held its share of the descriptors",
    ),
    (
        "inodes.fd_charged",
        Kind::Gauge,
        "Descriptors charged to non-root users, one per user with a handle on each",
    ),
    ("drops.requests", Kind::Counter, "Directory drops requested"),
    (
        "drops.busy",
        Kind::Counter,
        "Dentries a drop found in use by the kernel (unhashed, freed later)",
    ),
    (
        "drops.skipped",
        Kind::Counter,
        "Entries a drop skipped because the caller does not own them",
    ),
    ("drops.visited", Kind::Counter, "Inodes visited by drops"),
    (
        "kernel_cache",
        Kind::Gauge,
        "1 when the kernel may cache entries, attributes and pages",
    ),
    (
        "panics",
        Kind::Counter,
        "Requests whose handler panicked (answered EIO)",
    ),
    (
        "coherence.mode",
        Kind::Gauge,
        "The coherence mode in force (--coherence), as the label value",
    ),
    (
        "coherence.why",
        Kind::Gauge,
        "Why that coherence mode was chosen, as the label value",
    ),
    (
        "coherence.events",
        Kind::Counter,
        "Source change events the watcher read",
    ),
    (
        "coherence.applied",
        Kind::Counter,
        "Source change events about objects rcufs knows (applied)",
    ),
    (
        "coherence.batches",
        Kind::Counter,
        "Event batches that touched something rcufs knows",
    ),
    (
        "coherence.unknown_rechecked",
        Kind::Counter,
        "Events for objects rcufs did not know, looked up again because a read of the source was in flight",
    ),
    (
        "coherence.overflows",
        Kind::Counter,
        "Watcher queue overflows (every cache of the mount was then dropped)",
    ),
    (
        "coherence.mount_changes",
        Kind::Counter,
        "Mounts attached, detached or moved under the source where they could be placed (the entries of their mount points were then forgotten)",
    ),
    (
        "coherence.mount_drops",
        Kind::Counter,
        "Mount changes that could not be placed (every cache of the mount was then dropped)",
    ),
    (
        "coherence.failed_batches",
        Kind::Counter,
        "Event batches that could not be applied (every cache of the mount was then dropped)",
    ),
    (
        "coherence.failed",
        Kind::Gauge,
        "1 once the source watch has stopped (everything is then re-checked after --revalidate)",
    ),
    (
        "coherence.unindexed",
        Kind::Counter,
        "Inodes made without a file handle, which the watch cannot find (re-checked after --revalidate)",
    ),
    (
        "coherence.watch_revalidate_secs",
        Kind::Gauge,
        "The interval of what the watch sees (0 without the watch)",
    ),
    (
        "coherence.inval_dropped",
        Kind::Counter,
        "Kernel invalidations the watcher could not queue",
    ),
    (
        "coherence.unwatched_filesystems",
        Kind::Gauge,
        "Filesystems under the source that could not be watched",
    ),
    (
        "coherence.indexed_handles",
        Kind::Gauge,
        "Inodes indexed by file handle for the watcher",
    ),
    (
        "coherence.attrs_lent",
        Kind::Gauge,
        "1 while replies lend the kernel their attributes for a millisecond (default mode with the watch, until an invalidation is lost)",
    ),
    (
        "coherence.unlent_replies",
        Kind::Counter,
        "Replies given timeouts of 0 because the read behind them overlapped a change of the source",
    ),
    (
        "coherence.overlapped_replies",
        Kind::Counter,
        "Lending replies a change overtook as they were sent, whose entries and attributes the kernel was told to forget",
    ),
    (
        "warm.requests",
        Kind::Counter,
        "Warms requested with the user.rcufs.warm attribute",
    ),
    ("warm.completed", Kind::Counter, "Daemon-side warms finished"),
    (
        "warm.running",
        Kind::Gauge,
        "1 while a daemon-side warm is queued or running",
    ),
    (
        "warm.entries",
        Kind::Counter,
        "Entries the daemon-side warms put in or found in the dentry cache",
    ),
    ("warm.files", Kind::Counter, "Files the daemon-side warms read"),
    ("warm.pages", Kind::Counter, "Pages the daemon-side warms cached"),
    (
        "warm.budget_stops",
        Kind::Counter,
        "Daemon-side warms that stopped reading at the page budget",
    ),
    (
        "warm.last_elapsed_ns",
        Kind::Gauge,
        "Duration of the last daemon-side warm",
    ),
    (
        "source.flushes",
        Kind::Counter,
        "FLUSHes (closes that reach the source) answered",
    ),
    (
        "source.lane_filesystems",
        Kind::Gauge,
        "Filesystems under the source that can stop answering, given a lane of at most half the workers",
    ),
    (
        "source.lane_mount_points",
        Kind::Gauge,
        "Mount-point names whose LOOKUPs go to such a filesystem's lane",
    ),
];

/// Last words of a key that make an unlisted leaf a counter.
pub const COUNTER_WORDS: &[&str] = &[
    "hits",
    "misses",
    "inserts",
    "evictions",
    "dropped",
    "fills",
    "requests",
    "reuses",
    "refusals",
    "opens",
    "changes",
    "queued",
    "pushed",
    "coalesced",
    "overflows",
    "timeouts",
    "rescued",
    "panics",
    "skipped",
    "visited",
    "freed",
    "errors",
    "events",
    "total",
    "count",
    "reads",
    "writes",
    "retries",
    "revalidations",
    "invalidations",
    "rescans",
    "applied",
];

/// How one leaf is exported.
#[derive(Clone, Debug, PartialEq)]
pub struct Leaf {
    /// The name without the `rcufs_` prefix, the unit and `_total`.
    pub name: String,
    /// The unit the encoder appends, if any.
    pub unit: Option<&'static str>,
    /// Counter or gauge.
    pub kind: Kind,
    /// The help text.
    pub help: String,
    /// The value, already in the unit.
    pub value: f64,
    /// The value when the JSON gave a whole number (exported as an integer
    /// metric; the text format still writes it as a float, exact up to 2^53).
    pub int: Option<u64>,
    /// For a string leaf, its value (exported as a label of an `_info` gauge).
    pub label: Option<String>,
}

fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    out.trim_matches('_').to_string()
}

/// The kind of an unlisted key: counter if its last word says so.
pub fn guess_kind(key: &str) -> Kind {
    let last = key.rsplit(['_', '.']).next().unwrap_or(key);
    if COUNTER_WORDS.contains(&last) {
        Kind::Counter
    } else {
        Kind::Gauge
    }
}

/// Derives the exported leaf for `path` (the JSON keys from the root) and
/// its JSON value; `None` for values that are not exported.
pub fn leaf(path: &[&str], value: &Value) -> Option<Leaf> {
    let (key, parents) = path.split_last()?;
    let dotted = path.join(".");
    let listed = TABLE.iter().find(|(p, _, _)| *p == dotted);
    let (mut value_f, mut int, label) = match value {
        Value::Number(n) => (n.as_f64()?, n.as_u64(), None),
        Value::Bool(b) => (f64::from(u8::from(*b)), Some(u64::from(*b)), None),
        Value::String(s) => (1.0, Some(1), Some(s.clone())),
        _ => return None,
    };
    // Units: a `bytes` word moves to the end; ns/us/ms become seconds.
    let mut words: Vec<&str> = key.split('_').filter(|w| !w.is_empty()).collect();
    let mut unit = None;
    if label.is_none() {
        if let Some(i) = words.iter().position(|w| *w == "bytes") {
            words.remove(i);
            unit = Some("bytes");
        } else if let Some(&last) = words.last() {
            let scale = match last {
                "ns" => Some(1e-9),
                "us" => Some(1e-6),
                "ms" => Some(1e-3),
                "secs" | "seconds" | "sec" => Some(1.0),
                _ => None,
            };
            if let Some(scale) = scale {
                words.pop();
                value_f *= scale;
                int = None;
                unit = Some("seconds");
            }
        }
    }
    let mut name_parts: Vec<String> = parents.iter().map(|p| sanitize(p)).collect();
    let stem = sanitize(&words.join("_"));
    if !stem.is_empty() {
        name_parts.push(stem);
    }
    if label.is_some() {
        name_parts.push("info".into());
    }
    let name = name_parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("_");
    if name.is_empty() {
        return None;
    }
    let kind = match (label.is_some(), listed) {
        (true, _) => Kind::Gauge,
        (false, Some((_, kind, _))) => *kind,
        (false, None) => guess_kind(key),
    };
    let help = match listed {
        Some((_, _, help)) => format!("{help} (stats field {dotted})"),
        None => format!("rcufs stats field {dotted}"),
    };
    Some(Leaf {
        name,
        unit,
        kind,
        help,
        value: value_f,
        int,
        label,
    })
}

/// Every exported leaf of `stats`, in the JSON's order, each name once.
pub fn leaves(stats: &Value) -> Vec<Leaf> {
    fn walk<'a>(v: &'a Value, path: &mut Vec<&'a str>, out: &mut Vec<Leaf>) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    path.push(k);
                    walk(child, path, out);
                    path.pop();
                }
            }
            other => out.extend(leaf(path, other)),
        }
    }
    let mut out = Vec::new();
    walk(stats, &mut Vec::new(), &mut out);
    let mut seen = HashSet::new();
    out.retain(|l| seen.insert((l.name.clone(), l.unit)));
    out
}

/// The Prometheus exposition of `stats` for the mount at `mountpoint`.
pub fn render(stats: &Value, mountpoint: &str) -> String {
    let labels = HashMap::from([("mountpoint".to_string(), mountpoint.to_string())]);
    let registry = Registry::new_custom(Some("rcufs".into()), Some(labels)).expect("a valid prefix");
    for l in leaves(stats) {
        let mut name = l.name.clone();
        if let Some(unit) = l.unit {
            name = format!("{name}_{unit}");
        }
        if l.kind == Kind::Counter {
            name.push_str("_total");
        }
        let mut opts = Opts::new(name, l.help.clone());
        if let Some(v) = &l.label {
            opts = opts.const_label("value", v.clone());
        }
        let collector: prometheus::Result<Box<dyn Collector>> = match (l.kind, l.int) {
            (Kind::Counter, Some(n)) => IntCounter::with_opts(opts).map(|c| {
                c.inc_by(n);
                Box::new(c) as Box<dyn Collector>
            }),
            (Kind::Counter, None) if l.value >= 0.0 => Counter::with_opts(opts).map(|c| {
                c.inc_by(l.value);
                Box::new(c) as Box<dyn Collector>
            }),
            (Kind::Counter, None) => continue, // A negative "counter" is no counter.
            (Kind::Gauge, Some(n)) if i64::try_from(n).is_ok() => IntGauge::with_opts(opts).map(|g| {
                g.set(n as i64);
                Box::new(g) as Box<dyn Collector>
            }),
            (Kind::Gauge, _) => Gauge::with_opts(opts).map(|g| {
                g.set(l.value);
                Box::new(g) as Box<dyn Collector>
            }),
        };
        // A name the format rejects is left out rather than failing the scrape.
        if let Err(e) = collector.and_then(|c| registry.register(c)) {
            tracing::debug!(metric = %l.name, "not exported: {e}");
        }
    }
    TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap_or_else(|e| format!("# rcufs: encoding the metrics failed: {e}\n"))
}

#[cfg(test)]
mod tests;
