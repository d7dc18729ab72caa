//! The daemon's panic containment counter, and fault injection for the
//! tests that check it.
//!
//! Every request handler runs under `catch_unwind` (see `fuse.rs`); each
//! caught panic is counted here and shown in the stats as `panics`.
//!
//! Fault injection exists only in debug builds (the integration tests run
//! the debug binary): `RCUFS_FAULT=panic-lookup:NAME` in the daemon's
//! environment makes every LOOKUP of `NAME` panic while it holds its parent
//! directory's attribute lock, so a test can check that one bad request
//! neither kills the daemon nor poisons a lock other requests need. Release
//! builds ignore the variable and compile the check away.
//! `RCUFS_FAULT=withhold-ready` makes `rcufs mount` skip its `READY=1`
//! (the mount helper's timeout test; the helper honours
//! `RCUFS_HELPER_READY_TIMEOUT_SECS` in debug builds for the same test).

use std::sync::atomic::{AtomicU64, Ordering};

static PANICS: AtomicU64 = AtomicU64::new(0);

/// Counts one request handler that panicked.
pub fn record_panic() {
    PANICS.fetch_add(1, Ordering::Relaxed);
}

/// Request handlers that panicked since the daemon started.
pub fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Whether a LOOKUP of `name` must panic (debug builds with
/// `RCUFS_FAULT=panic-lookup:NAME` only).
#[cfg(debug_assertions)]
pub fn lookup_panics(name: &[u8]) -> bool {
    use std::sync::OnceLock;
    static NAME: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    let target = NAME.get_or_init(|| {
        std::env::var("RCUFS_FAULT")
            .ok()
            .and_then(|v| v.strip_prefix("panic-lookup:").map(|n| n.as_bytes().to_vec()))
    });
    target.as_deref() == Some(name)
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn lookup_panics(_name: &[u8]) -> bool {
    false
}

/// Whether `rcufs mount` must never report readiness on `NOTIFY_SOCKET`
/// (debug builds with `RCUFS_FAULT=withhold-ready` only), so that a test
/// can watch the mount helper give up on a daemon that mounted but never
/// became ready.
#[cfg(debug_assertions)]
pub fn withhold_ready() -> bool {
    std::env::var("RCUFS_FAULT").is_ok_and(|v| v == "withhold-ready")
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn withhold_ready() -> bool {
    false
}
