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
//! neither kills the daemon nor poisons a lock other requests need;
//! `RCUFS_FAULT=watch-stall:MS` makes the source watcher sleep MS
//! milliseconds before its first read, so a test can overflow its queue;
//! `RCUFS_FAULT=lookup-delay:NAME:MS` makes a LOOKUP of `NAME` wait MS
//! milliseconds between reading the source and caching what it read;
//! `RCUFS_FAULT=source-delay:MS` makes every lookup in the source take MS
//! milliseconds more (a slow source, for the test that parallel lookups
//! of one directory are in flight together);
//! `RCUFS_FAULT=withhold-ready` makes `rcufs mount` skip its `READY=1`
//! (the mount helper's timeout test; the helper honours
//! `RCUFS_HELPER_READY_TIMEOUT_SECS` in debug builds for the same test).
//! Release builds ignore the variable and compile the checks away.

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

/// How long the source watcher sleeps before it reads its first batch of
/// events (debug builds with `RCUFS_FAULT=watch-stall:MS` only), so that a
/// test can overflow the kernel's event queue.
#[cfg(debug_assertions)]
pub fn watch_stall() -> Option<std::time::Duration> {
    std::env::var("RCUFS_FAULT")
        .ok()
        .and_then(|v| v.strip_prefix("watch-stall:").and_then(|ms| ms.parse().ok()))
        .map(std::time::Duration::from_millis)
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn watch_stall() -> Option<std::time::Duration> {
    None
}

/// Sleeps between a LOOKUP's read of the source and its store into the
/// dcache, for the name `NAME` (debug builds with
/// `RCUFS_FAULT=lookup-delay:NAME:MS` only), so that a test can make a
/// source change land inside that window.
#[cfg(debug_assertions)]
pub fn lookup_delay(name: &[u8]) {
    use std::sync::OnceLock;
    static DELAY: OnceLock<Option<(Vec<u8>, u64)>> = OnceLock::new();
    let target = DELAY.get_or_init(|| {
        let v = std::env::var("RCUFS_FAULT").ok()?;
        let (n, ms) = v.strip_prefix("lookup-delay:")?.rsplit_once(':')?;
        Some((n.as_bytes().to_vec(), ms.parse().ok()?))
    });
    if let Some((n, ms)) = target
        && n == name
    {
        std::thread::sleep(std::time::Duration::from_millis(*ms));
    }
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn lookup_delay(_name: &[u8]) {}

/// Sleeps in every lookup in the source (debug builds with
/// `RCUFS_FAULT=source-delay:MS` only): a slow source.
#[cfg(debug_assertions)]
pub fn source_delay() {
    use std::sync::OnceLock;
    static DELAY: OnceLock<Option<u64>> = OnceLock::new();
    let ms = DELAY.get_or_init(|| {
        std::env::var("RCUFS_FAULT")
            .ok()?
            .strip_prefix("source-delay:")?
            .parse()
            .ok()
    });
    if let Some(ms) = ms {
        std::thread::sleep(std::time::Duration::from_millis(*ms));
    }
}

/// Release builds: nothing.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn source_delay() {}

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
