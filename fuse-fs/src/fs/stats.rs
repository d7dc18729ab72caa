//! The statistics (the value of `user.rcufs.stats`, `rcufs stats`, and
//! through them the Prometheus exporter).

use super::*;

impl Fs {
    /// The statistics (the value of `user.rcufs.stats`).
    pub fn stats_json(&self) -> serde_json::Value {
        // Inodes freed since the last reap (their `Drop` may run late: the
        // dcache frees payloads through the epoch) give their pages back
        // before the counters are read.
        self.reap();
        let d = &self.drops;
        let inval = self.inval.stats();
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|r| r.count() as u64)
            .unwrap_or(0);
        let mut source = serde_json::json!({
            "kind": self.cfg.source_kind,
            "revalidate_secs": self.cfg.revalidate.as_secs_f64(),
            "workers": self.cfg.workers as u64,
            "lookups": self.source_lookups.total(),
            "lookups_in_flight_max": self.source_lookups.max_in_flight(),
            "refreshed_names": self.prefetched.load(Ordering::Relaxed),
            "dir_refreshes": self.refreshes.load(Ordering::Relaxed),
            "flushes": self.flushes(),
        });
        let (lane_filesystems, lane_mount_points) = self.lane_counts();
        source["lane_filesystems"] = lane_filesystems.into();
        source["lane_mount_points"] = lane_mount_points.into();
        for (k, v) in self.unlisted.stats().into_iter().chain(self.lists_ahead.stats()) {
            source[k] = v.into();
        }
        serde_json::json!({
            "dcache": self.names.stats_json(),
            "coherence": self.coherence_json(),
            "source": source,
            "pagecache": self.data.stats_json(),
            "inodes": {
                "known": self.table.known() as u64,
                "by_name": self.table.by_name(),
                "open_fds": open_fds,
                "pooled_fds": self.table.pool.len() as u64,
                "pool_opens": self.table.pool.opens(),
                "open_files": self.files.len() as u64,
                "open_dirs": self.dirs.len() as u64,
                "shared_fds": self.shared.live(),
                "shared_fd_reuses": self.shared.reuses(),
                "fd_refusals": self.gate.refusals(),
                "fd_threshold": self.gate.threshold(),
                "fd_user_max": self.gate.user_max(),
                "fd_user_refusals": self.gate.user_refusals(),
                "fd_charged": self.gate.charged(),
                "indexed_parents": self.table.indexed_parents() as u64,
                "stale_opens": self.stale_opens.load(Ordering::Relaxed),
                "source_dir_changes": self.dir_changes.load(Ordering::Relaxed),
            },
            "drops": {
                "requests": d.requests.load(Ordering::Relaxed),
                "dentries_dropped": d.dentries.load(Ordering::Relaxed),
                "pages_dropped": d.pages.load(Ordering::Relaxed),
                "bytes_freed": d.bytes.load(Ordering::Relaxed),
                "skipped": d.skipped.load(Ordering::Relaxed),
                "busy": d.busy.load(Ordering::Relaxed),
                "visited": d.visited.load(Ordering::Relaxed),
            },
            "listings": self.listings.stats_json(),
            "kernel_cache": self.cfg.kernel_cache,
            "panics": crate::fault::panics(),
            "warm": self.warmer.stats_json(),
            "kernel_inval": {
                "queued": inval.queued,
                "pushed": inval.pushed,
                "coalesced": inval.coalesced,
                "overflows": inval.overflows,
                "timeouts": inval.timeouts,
                "rescued": inval.rescued,
            },
        })
    }
}
