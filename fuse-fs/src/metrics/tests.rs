//! Unit tests of the stats-to-Prometheus conversion: names, units, kinds,
//! labels, and that keys nobody listed are exported too.

use serde_json::json;

use super::*;

fn sample() -> Value {
    json!({
        "dcache": {"entries": 3, "hits": 10, "misses": 2, "capacity": 100},
        "pagecache": {"pages": 4, "bytes_cached": 16384, "budget_bytes": 1048576, "hits": 7, "evictions": 0},
        "drops": {"busy": 1, "bytes_freed": 8192},
        "kernel_cache": true,
        "panics": 0,
    })
}

#[test]
fn known_leaves_get_kinds_units_and_the_mount_label() {
    let text = render(&sample(), "/mnt/a b");
    for line in [
        "# TYPE rcufs_dcache_hits_total counter",
        "# HELP rcufs_dcache_hits_total Lookups answered by the dentry cache (stats field dcache.hits)",
        "rcufs_dcache_hits_total{mountpoint=\"/mnt/a b\"} 10",
        "# TYPE rcufs_dcache_entries gauge",
        "rcufs_dcache_entries{mountpoint=\"/mnt/a b\"} 3",
        "# TYPE rcufs_pagecache_cached_bytes gauge",
        "rcufs_pagecache_cached_bytes{mountpoint=\"/mnt/a b\"} 16384",
        "rcufs_pagecache_budget_bytes{mountpoint=\"/mnt/a b\"} 1048576",
        "rcufs_drops_busy_total{mountpoint=\"/mnt/a b\"} 1",
        "rcufs_drops_freed_bytes_total{mountpoint=\"/mnt/a b\"} 8192",
        "rcufs_kernel_cache{mountpoint=\"/mnt/a b\"} 1",
        "rcufs_panics_total{mountpoint=\"/mnt/a b\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in:\n{text}");
    }
}

#[test]
fn unlisted_counters_are_exported_without_edits() {
    // A section and keys this module has never heard of, as the stats grow.
    let stats = json!({
        "watch": {"events": 5, "overflows": 1, "queue_len": 2, "lag_ns": 1500, "mode": "fanotify"},
        "coherence": "watch",
    });
    let text = render(&stats, "/m");
    for line in [
        "rcufs_watch_events_total{mountpoint=\"/m\"} 5",
        "rcufs_watch_overflows_total{mountpoint=\"/m\"} 1",
        "# TYPE rcufs_watch_queue_len gauge",
        "rcufs_watch_queue_len{mountpoint=\"/m\"} 2",
        "# TYPE rcufs_watch_lag_seconds gauge",
        "rcufs_watch_mode_info{value=\"fanotify\",mountpoint=\"/m\"} 1",
        "rcufs_coherence_info{value=\"watch\",mountpoint=\"/m\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in:\n{text}");
    }
    let lag = text
        .lines()
        .find(|l| l.starts_with("rcufs_watch_lag_seconds{"))
        .expect("lag line");
    let v: f64 = lag.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((v - 1.5e-6).abs() < 1e-12, "{lag}");
}

#[test]
fn large_counters_are_exact_and_names_unique() {
    // Prometheus values are float64: whole numbers are exact up to 2^53.
    let big = (1u64 << 53) - 1;
    let stats = json!({"a": {"hits": big}, "a_hits": 3});
    let text = render(&stats, "/m");
    assert!(
        text.contains(&format!("rcufs_a_hits_total{{mountpoint=\"/m\"}} {big}")),
        "{text}"
    );
    // `a_hits` at the top derives the same name: it is left out, not doubled.
    assert_eq!(text.matches("# TYPE rcufs_a_hits_total counter").count(), 1, "{text}");
}

#[test]
fn kinds_follow_the_table_then_the_last_word() {
    assert_eq!(guess_kind("shared_fd_reuses"), Kind::Counter);
    assert_eq!(guess_kind("open_files"), Kind::Gauge);
    let busy = leaf(&["drops", "busy"], &json!(1)).unwrap();
    assert_eq!(busy.kind, Kind::Counter);
    assert!(leaf(&["x"], &json!([1, 2])).is_none());
    assert!(leaf(&["x"], &Value::Null).is_none());
}
