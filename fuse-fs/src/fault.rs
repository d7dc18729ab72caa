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
//! `RCUFS_FAULT=cache-jitter:US` makes every WRITE wait a pseudo-random
//! 0 to US microseconds between its source write and its cache update, and
//! every folio fill between its source read and publishing what it read, so
//! that a test of concurrent writers and readers meets the reorderings the
//! range locks (`range_lock.rs`) and the page cache's generation check
//! (`data.rs`) handle;
//! `RCUFS_FAULT=source-delay:MS` makes every lookup in the source take MS
//! milliseconds more (a slow source, for the test that parallel lookups
//! of one directory are in flight together);
//! `RCUFS_FAULT=withhold-ready` makes `rcufs mount` skip its `READY=1`
//! (the mount helper's timeout test; the helper honours
//! `RCUFS_HELPER_READY_TIMEOUT_SECS` in debug builds for the same test);
//! `RCUFS_FAULT=getattr-delay:MS` makes every GETATTR wait MS milliseconds
//! before it answers, and `RCUFS_FAULT=watch-apply-delay:MS` makes the
//! watcher wait MS milliseconds before it applies a batch that touches
//! something cached, so that a test can make a kernel invalidation land
//! while a GETATTR is in flight. The watch's failures:
//! `RCUFS_FAULT=mark-fails` makes marking a filesystem mounted under the
//! source after the start fail; `RCUFS_FAULT=watch-fails:MS` makes the
//! source watcher stop with an error MS milliseconds after the mount
//! started, without reading anything; `RCUFS_FAULT=apply-panics:NAME`
//! makes applying a batch of events that names `NAME` panic before
//! anything of it is applied; `RCUFS_FAULT=watch-read-panics` makes the
//! watcher's thread panic in its read loop, outside the application of a
//! batch, once it has read the first batch of events. Several faults are
//! separated by commas.
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

/// The argument of fault `kind` (`kind:ARG` in the comma-separated
/// `RCUFS_FAULT`), or `""` for a bare `kind`.
#[cfg(debug_assertions)]
fn fault_arg(kind: &str) -> Option<String> {
    let v = std::env::var("RCUFS_FAULT").ok()?;
    v.split(',').find_map(|f| {
        if f == kind {
            Some(String::new())
        } else {
            f.strip_prefix(kind)?.strip_prefix(':').map(str::to_string)
        }
    })
}

/// A fault whose argument is a number of milliseconds.
#[cfg(debug_assertions)]
fn fault_ms(kind: &str) -> Option<std::time::Duration> {
    fault_arg(kind)?.parse().ok().map(std::time::Duration::from_millis)
}

/// Whether a LOOKUP of `name` must panic (debug builds with
/// `RCUFS_FAULT=panic-lookup:NAME` only).
#[cfg(debug_assertions)]
pub fn lookup_panics(name: &[u8]) -> bool {
    use std::sync::OnceLock;
    static NAME: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    let target = NAME.get_or_init(|| fault_arg("panic-lookup").map(String::into_bytes));
    target.as_deref() == Some(name)
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn lookup_panics(_name: &[u8]) -> bool {
    false
}

/// How long a request waits for the source watcher to catch up, in place
/// of `SYNC_WAIT` (debug builds with `RCUFS_FAULT=sync-wait:MS` only), so
/// that a test that slows the watcher down on purpose does not also
/// depend on how loaded the machine is.
#[cfg(debug_assertions)]
pub fn sync_wait() -> Option<std::time::Duration> {
    static WAIT: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *WAIT.get_or_init(|| fault_ms("sync-wait"))
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn sync_wait() -> Option<std::time::Duration> {
    None
}

/// How long the source watcher sleeps before it reads its first batch of
/// events (debug builds with `RCUFS_FAULT=watch-stall:MS` only), so that a
/// test can overflow the kernel's event queue.
#[cfg(debug_assertions)]
pub fn watch_stall() -> Option<std::time::Duration> {
    fault_ms("watch-stall")
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
        let v = fault_arg("lookup-delay")?;
        let (n, ms) = v.rsplit_once(':')?;
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

/// Where a unit test's hook runs (see [`on_next_lookup`],
/// [`on_next_publish`], [`on_next_listing_read`], [`on_next_fill`] and
/// [`on_next_drop_passes`]).
#[cfg(test)]
#[derive(Clone, Copy, PartialEq, Eq)]
enum HookPoint {
    Lookup,
    Publish,
    ListingRead,
    Fill,
    DropPasses,
}

/// A hook's point, the name it waits for and the closure it runs.
#[cfg(test)]
type Hook = (HookPoint, Vec<u8>, Box<dyn FnOnce()>);

#[cfg(test)]
thread_local! {
    /// Unit tests: a closure this thread runs the next time it reaches
    /// the hook's point for the hook's name.
    static HOOK: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

/// Unit tests: runs `hook` inside this thread's next lookup of `name`,
/// between the read of the source and the store into the dcache (where
/// [`lookup_delay`] sleeps), so that a change can land there.
#[cfg(test)]
pub fn on_next_lookup(name: &[u8], hook: impl FnOnce() + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some((HookPoint::Lookup, name.to_vec(), Box::new(hook))));
}

/// Unit tests: runs `hook` when this thread next makes a new inode for
/// `name` (`InodeTable::intern`), right after the inode became findable
/// by its key and the key's lock was let go: where another lookup of the
/// same object can first find it.
#[cfg(test)]
pub fn on_next_publish(name: &[u8], hook: impl FnOnce() + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some((HookPoint::Publish, name.to_vec(), Box::new(hook))));
}

/// Unit tests: runs `hook` when this thread next reads the listing of the
/// directory with node id `ino` (`Listings::read`), between reading the
/// source and keeping what it read.
#[cfg(test)]
pub fn on_next_listing_read(ino: u64, hook: impl FnOnce() + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some((HookPoint::ListingRead, ino.to_ne_bytes().to_vec(), Box::new(hook))));
}

/// Unit tests: runs `hook` when this thread next fills the folio that
/// starts at page `first` of a file (`Data::read`), before it reads the
/// source.
#[cfg(test)]
pub fn on_next_fill(first: u64, hook: impl FnOnce() + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some((HookPoint::Fill, first.to_ne_bytes().to_vec(), Box::new(hook))));
}

/// Unit tests: runs `hook` when this thread's next drop of the directory
/// with node id `ino` by a user (`Fs::drop_dir`) has made its first pass
/// and not begun its second.
#[cfg(test)]
pub fn on_next_drop_passes(ino: u64, hook: impl FnOnce() + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some((HookPoint::DropPasses, ino.to_ne_bytes().to_vec(), Box::new(hook))));
}

/// Runs the hook [`on_next_drop_passes`] set for `ino`, if any.
#[cfg(test)]
pub fn drop_passes_hook(ino: u64) {
    run_hook(HookPoint::DropPasses, &ino.to_ne_bytes());
}

/// Outside unit tests: nothing.
#[cfg(not(test))]
#[inline(always)]
pub fn drop_passes_hook(_ino: u64) {}

/// Runs the hook [`on_next_fill`] set for `first`, if any.
#[cfg(test)]
pub fn fill_hook(first: u64) {
    run_hook(HookPoint::Fill, &first.to_ne_bytes());
}

/// Outside unit tests: nothing.
#[cfg(not(test))]
#[inline(always)]
pub fn fill_hook(_first: u64) {}

/// Runs the hook [`on_next_listing_read`] set for `ino`, if any.
#[cfg(test)]
pub fn listing_read_hook(ino: u64) {
    run_hook(HookPoint::ListingRead, &ino.to_ne_bytes());
}

/// Outside unit tests: nothing.
#[cfg(not(test))]
#[inline(always)]
pub fn listing_read_hook(_ino: u64) {}

/// Runs this thread's hook if it waits for `point` and `name`.
#[cfg(test)]
fn run_hook(point: HookPoint, name: &[u8]) {
    let hook = HOOK.with(|h| {
        let mut h = h.borrow_mut();
        match h.take() {
            Some((p, n, f)) if p == point && n == name => Some(f),
            other => {
                *h = other;
                None
            }
        }
    });
    if let Some(f) = hook {
        f();
    }
}

/// Runs the hook [`on_next_lookup`] set for `name`, if any.
#[cfg(test)]
pub fn lookup_hook(name: &[u8]) {
    run_hook(HookPoint::Lookup, name);
}

/// Outside unit tests: nothing.
#[cfg(not(test))]
#[inline(always)]
pub fn lookup_hook(_name: &[u8]) {}

/// Runs the hook [`on_next_publish`] set for `name`, if any.
#[cfg(test)]
pub fn publish_hook(name: &[u8]) {
    run_hook(HookPoint::Publish, name);
}

/// Outside unit tests: nothing.
#[cfg(not(test))]
#[inline(always)]
pub fn publish_hook(_name: &[u8]) {}

/// Sleeps in every lookup in the source (debug builds with
/// `RCUFS_FAULT=source-delay:MS` only): a slow source.
#[cfg(debug_assertions)]
pub fn source_delay() {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    sleep_for("source-delay", &DELAY);
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
    fault_arg("withhold-ready").is_some()
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn withhold_ready() -> bool {
    false
}

/// Sleeps for fault `kind`'s milliseconds, if it is set (read once, into
/// `cell`).
#[cfg(debug_assertions)]
fn sleep_for(kind: &str, cell: &std::sync::OnceLock<Option<std::time::Duration>>) {
    if let Some(d) = cell.get_or_init(|| fault_ms(kind)) {
        std::thread::sleep(*d);
    }
}

/// Sleeps before a GETATTR answers (debug builds with
/// `RCUFS_FAULT=getattr-delay:MS` only).
#[cfg(debug_assertions)]
pub fn getattr_delay() {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    sleep_for("getattr-delay", &DELAY);
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn getattr_delay() {}

/// Sleeps before the watcher applies a batch that touches something cached
/// (debug builds with `RCUFS_FAULT=watch-apply-delay:MS` only).
#[cfg(debug_assertions)]
pub fn watch_apply_delay() {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    sleep_for("watch-apply-delay", &DELAY);
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn watch_apply_delay() {}

/// Waits a pseudo-random 0 to US microseconds between a source access and
/// the cache update that follows it (debug builds with
/// `RCUFS_FAULT=cache-jitter:US` only).
#[cfg(debug_assertions)]
pub fn cache_jitter() {
    use std::sync::OnceLock;
    static US: OnceLock<Option<u64>> = OnceLock::new();
    let us = US.get_or_init(|| fault_arg("cache-jitter")?.parse().ok());
    if let Some(us) = *us {
        // The low bits of the clock are random enough to reorder writers.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64);
        std::thread::sleep(std::time::Duration::from_micros((t >> 4) % (us + 1)));
    }
}

/// Release builds: nothing.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn cache_jitter() {}

/// Why marking a filesystem under the source fails, if it must (debug
/// builds with `RCUFS_FAULT=mark-fails` only).
#[cfg(debug_assertions)]
pub fn mark_fails() -> Option<String> {
    fault_arg("mark-fails").map(|_| "injected fault".to_string())
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn mark_fails() -> Option<String> {
    None
}

/// After how long the source watcher must stop with an error (debug
/// builds with `RCUFS_FAULT=watch-fails:MS` only).
#[cfg(debug_assertions)]
pub fn watch_fails() -> Option<std::time::Duration> {
    fault_ms("watch-fails")
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn watch_fails() -> Option<std::time::Duration> {
    None
}

/// Whether applying a batch of source events that names `name` must panic
/// (debug builds with `RCUFS_FAULT=apply-panics:NAME` only).
#[cfg(debug_assertions)]
pub fn apply_panics(name: &[u8]) -> bool {
    use std::sync::OnceLock;
    static NAME: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    let target = NAME.get_or_init(|| fault_arg("apply-panics").map(String::into_bytes));
    target.as_deref() == Some(name)
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn apply_panics(_name: &[u8]) -> bool {
    false
}

/// Whether the source watcher's read loop must panic once it has read
/// events (debug builds with `RCUFS_FAULT=watch-read-panics` only).
#[cfg(debug_assertions)]
pub fn watch_read_panics() -> bool {
    use std::sync::OnceLock;
    static SET: OnceLock<bool> = OnceLock::new();
    *SET.get_or_init(|| fault_arg("watch-read-panics").is_some())
}

/// Release builds: never.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn watch_read_panics() -> bool {
    false
}
