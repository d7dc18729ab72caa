//! Mounting: [`MountOptions`], [`mount`] and the [`Mounted`] handle.
//!
//! `mount` checks everything a person can get wrong before touching the
//! kernel (source missing or not a directory, mount point missing, busy or
//! inside the source, no `/dev/fuse`, not root and no `fusermount3`), builds
//! the filesystem, mounts it with fuser and returns once the kernel has sent
//! INIT, so the mount is usable when `mount` returns.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::fs::{Coherence, Fs, FsConfig, WATCH_REVALIDATE};
use crate::fuse::{self, FuseAdapter};
use crate::inval::Lane;
use crate::slow_source::Profile;
use crate::sys;
use crate::sys::Stopper;
use crate::watch::{Unwatchable, Watcher};

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The directory to mirror.
    pub source: PathBuf,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// FUSE worker threads (`None`: available parallelism, at least 2; more
    /// for a network or FUSE source, see `slow_source.rs`).
    pub threads: Option<usize>,
    /// How long one FUSE worker polls for the next request after answering
    /// one before it sleeps (`Duration::ZERO`: never; see `--poll-us`).
    pub poll: Duration,
    /// Whether requests come through io_uring queues (default `Off`).
    pub io_uring: IoUring,
    /// dcache capacity (default 1,000,000).
    pub dcache_entries: usize,
    /// dcache negative-entry capacity (default `dcache_entries / 4`).
    pub dcache_negative: usize,
    /// Page cache budget in bytes (default 512 MiB).
    pub page_cache_bytes: u64,
    /// Let the kernel cache entries, attributes and pages (default false).
    pub kernel_cache: bool,
    /// How soon names and attributes changed directly in the source are seen
    /// (`None`: 1 s, or 10 s for a network or FUSE source, see `slow_source.rs`).
    pub revalidate: Option<Duration>,
    /// `-o` options: allow_other, allow_root, default_permissions, ro, rw,
    /// dev, nodev, suid, nosuid, exec, noexec, atime, noatime, sync, async, dirsync.
    pub fuse_options: Vec<String>,
    /// How changes made directly in the source are seen (default `Auto`).
    pub coherence: CoherenceRequest,
}

/// The `--io-uring` choice: how requests reach the daemon (`fuse.rs`,
/// "FUSE over io_uring").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoUring {
    /// Through `/dev/fuse` only.
    #[default]
    Off,
    /// Through per-CPU io_uring queues (Linux 6.14+, the `fuse` module's
    /// `enable_uring` set); the mount fails if the kernel does not offer it.
    On,
    /// As `On`, with the queues' threads under `SCHED_IDLE`.
    Idle,
}

impl IoUring {
    /// The name `--io-uring` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Idle => "idle",
        }
    }
}

impl std::str::FromStr for IoUring {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "idle" => Ok(Self::Idle),
            _ => Err(format!("unknown io_uring mode `{s}` (use off, on or idle)")),
        }
    }
}

/// The `--coherence` choice: how changes made directly in the source reach
/// the mount (see SEMANTICS.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CoherenceRequest {
    /// Watch where possible (root, a local filesystem with file ids),
    /// timeouts elsewhere.
    #[default]
    Auto,
    /// Watch the source with fanotify; fail the mount if that is impossible.
    Watch,
    /// Re-check the source after `revalidate`.
    Ttl,
}

impl std::str::FromStr for CoherenceRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "watch" => Ok(Self::Watch),
            "ttl" => Ok(Self::Ttl),
            _ => Err(format!("unknown coherence mode `{s}` (use auto, watch or ttl)")),
        }
    }
}

/// Decides the coherence mode; with `Watch` chosen, returns the watcher
/// (its marks are in place: no change after this point is missed).
fn choose_coherence(opts: &MountOptions) -> Result<(Coherence, String, Option<Watcher>)> {
    let watch = |force: bool| Watcher::new(&opts.source, force);
    let describe = |w: &Watcher| {
        let fs: Vec<String> = w
            .marked()
            .iter()
            .map(|m| format!("{} at {}", m.fstype, m.mount_point.display()))
            .collect();
        let mut why = format!("fanotify on {}", fs.join(", "));
        if !w.unmarked().is_empty() {
            let not: Vec<String> = w
                .unmarked()
                .iter()
                .map(|u| format!("{} at {}", u.fstype, u.mount_point.display()))
                .collect();
            why += &format!("; not on {} (ttl there)", not.join(", "));
        }
        why
    };
    match opts.coherence {
        CoherenceRequest::Ttl => Ok((Coherence::Ttl, "asked for (coherence=ttl)".into(), None)),
        CoherenceRequest::Watch => {
            if !sys::is_root() {
                bail!("coherence=watch needs root (fanotify filesystem marks and file handles); use ttl");
            }
            let w = watch(true).context("coherence=watch: cannot watch the source")?;
            Ok((Coherence::Watch, describe(&w), Some(w)))
        }
        CoherenceRequest::Auto => {
            if !sys::is_root() {
                return Ok((Coherence::Ttl, "not root: no fanotify filesystem marks".into(), None));
            }
            match watch(false) {
                Ok(w) => Ok((Coherence::Watch, describe(&w), Some(w))),
                Err(e) if e.downcast_ref::<Unwatchable>().is_some() => {
                    let why = e.downcast_ref::<Unwatchable>().map(|u| u.0.clone()).unwrap_or_default();
                    Ok((Coherence::Ttl, format!("cannot watch: {why}"), None))
                }
                Err(e) => Err(e.context("setting up the source watch")),
            }
        }
    }
}

/// The number of FUSE worker threads for a local source: the machine's
/// parallelism, at least 2.
pub fn local_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2)
}

impl Default for MountOptions {
    fn default() -> Self {
        Self {
            source: PathBuf::new(),
            mountpoint: PathBuf::new(),
            threads: None,
            poll: Duration::ZERO,
            io_uring: IoUring::Off,
            dcache_entries: 1_000_000,
            dcache_negative: 250_000,
            page_cache_bytes: 512 << 20,
            kernel_cache: false,
            revalidate: None,
            fuse_options: Vec::new(),
            coherence: CoherenceRequest::Auto,
        }
    }
}

/// A mounted rcufs.
pub struct Mounted {
    mountpoint: PathBuf,
    running: Option<fuse::session::Running>,
    /// The daemon's own threads, kept (ended by `join_worker`).
    threads: Threads,
    fs: Arc<Fs>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted").field("mountpoint", &self.mountpoint).finish()
    }
}

impl Mounted {
    /// The mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The filesystem behind the mount (for statistics).
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Unmounts and waits for the worker threads.
    pub fn unmount(mut self) -> Result<()> {
        let r = self.running.take().map(fuse::session::stop).transpose();
        self.join_worker();
        r.with_context(|| format!("unmounting {}", self.mountpoint.display()))?;
        Ok(())
    }

    /// Waits until the filesystem is unmounted from outside (`umount`).
    pub fn wait(mut self) -> Result<()> {
        let r = self.running.take().map(fuse::session::wait).transpose();
        self.join_worker();
        r.context("the FUSE session ended with an error")?;
        Ok(())
    }

    fn join_worker(&mut self) {
        // The adapter closed the background queues when the session
        // dropped it, so the queues' threads have ended or are about to.
        self.threads.end();
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = fuse::session::stop(r);
        }
        self.join_worker();
    }
}

fn is_mount_point(path: &Path) -> Result<bool> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let canon = path.canonicalize()?;
    Ok(mountinfo.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|mp| mp.replace("\\040", " ") == canon.to_string_lossy())
    }))
}

/// Checks the options as `mount` does, without mounting.
pub fn validate(opts: &MountOptions) -> Result<()> {
    let src = &opts.source;
    let meta = std::fs::metadata(src).with_context(|| {
        format!(
            "source {} does not exist or cannot be read; give an existing directory",
            src.display()
        )
    })?;
    if !meta.is_dir() {
        bail!(
            "source {} is not a directory; give the directory to mirror",
            src.display()
        );
    }
    let mp = &opts.mountpoint;
    let mmeta = std::fs::metadata(mp).with_context(|| {
        format!(
            "mount point {} does not exist; create it with `mkdir -p {}`",
            mp.display(),
            mp.display()
        )
    })?;
    if !mmeta.is_dir() {
        bail!("mount point {} is not a directory", mp.display());
    }
    let (csrc, cmp) = (src.canonicalize()?, mp.canonicalize()?);
    if cmp.starts_with(&csrc) {
        bail!(
            "mount point {} is inside the source {}; a mount inside its own source would see itself, choose another place",
            mp.display(),
            src.display()
        );
    }
    if is_mount_point(&cmp)? {
        bail!(
            "mount point {} is busy (something is already mounted there); unmount it first",
            mp.display()
        );
    }
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing; load the fuse module (`modprobe fuse`) or run where FUSE is available");
    }
    if !sys::is_root() {
        let on_path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()))
            .unwrap_or(false);
        if !on_path {
            bail!("not running as root and no fusermount3 on PATH; run as root or install fuse3");
        }
    }
    for o in &opts.fuse_options {
        for part in o.split(',').filter(|p| !p.is_empty()) {
            if !fuse::session::KNOWN_OPTIONS.contains(&part) {
                bail!(
                    "unknown mount option `{part}`; known: {}",
                    fuse::session::KNOWN_OPTIONS.join(", ")
                );
            }
        }
    }
    if opts.io_uring == IoUring::Idle
        && let Err(e) = crate::uring_guard::can_raise()
    {
        bail!(
            "--io-uring idle needs the right to raise a thread from SCHED_IDLE back to normal priority \
             (root, CAP_SYS_NICE, or RLIMIT_NICE of 20 or more), or its starved queue threads could not \
             be helped: {e}; use --io-uring on"
        );
    }
    let _ = meta.dev();
    Ok(())
}

/// Takes `CAP_SYS_RESOURCE` out of this thread's effective set, after the
/// descriptor limit was raised and before any of the daemon's threads
/// exists (each inherits its creator's set). A write runs as the daemon,
/// and an operation acting as the caller switches only the filesystem
/// identity, which keeps this capability: with it, every user's writes
/// through the mount would pass hard disk quotas (and, on filesystems
/// that ask for it rather than for the fsuid, the blocks reserved for
/// root). So a root caller cannot write past a hard quota through the
/// mount either. It stays permitted, not effective.
fn drop_resource_override() {
    match sys::set_thread_effective_cap(sys::CAP_SYS_RESOURCE, false) {
        Ok(true) => tracing::debug!("CAP_SYS_RESOURCE taken out of the effective set"),
        Ok(false) => {}
        Err(e) => tracing::warn!(
            "cannot take CAP_SYS_RESOURCE out of the effective set ({e}): writes through the mount may pass \
             disk quotas and the blocks reserved for root"
        ),
    }
}

/// A source on a `noexec` mount gives a `noexec` mirror: otherwise the
/// mirror would be a way around the mount's policy (a user could run what
/// they may only read there). (`nosuid` and `nodev` are the mirror's
/// defaults already; `-o suid` or `-o dev` over such a source is the
/// administrator's choice, and is logged.)
fn inherit_noexec(source: &std::path::Path, options: &mut Vec<String>) {
    let Ok(path) = sys::cstr(source.as_os_str().as_encoded_bytes()) else {
        return;
    };
    let Ok(flags) = sys::mount_flags(&path) else {
        return;
    };
    if flags & libc::ST_NOEXEC != 0 && !options.iter().any(|o| o == "noexec") {
        tracing::info!("the source is on a noexec mount: so is the mirror");
        options.push("noexec".into());
    }
    for (given, flag) in [("suid", libc::ST_NOSUID), ("dev", libc::ST_NODEV)] {
        if flags & flag != 0 && options.iter().any(|o| o == given) {
            tracing::warn!("-o {given} over a source mounted no{given}: the mirror allows what the source does not");
        }
    }
}

/// Mounts rcufs; returns once the kernel mount exists and has been initialised.
pub fn mount(opts: MountOptions) -> Result<Mounted> {
    validate(&opts)?;
    let nofile = sys::raise_nofile_limit();
    drop_resource_override();
    // Leave room for open files, directories and the FUSE channels.
    let fd_pool = ((nofile / 4) as usize).clamp(64, 8192);
    let (coherence, coherence_why, watcher) = choose_coherence(&opts)?;
    // Defaults for the options not given, by the kind of source.
    let profile = Profile::of(&opts.source);
    let threads = opts.threads.unwrap_or_else(|| profile.threads(local_threads()));
    // With the watch, the interval of what the watch cannot see (and of
    // everything, should the watch stop); the rest is kept for an hour.
    let revalidate = opts.revalidate.unwrap_or_else(|| profile.revalidate());
    let mut options: Vec<String> = opts
        .fuse_options
        .iter()
        .flat_map(|o| o.split(',').filter(|p| !p.is_empty()).map(String::from))
        .collect();
    inherit_noexec(&opts.source, &mut options);
    let cfg = FsConfig {
        revalidate,
        watch_revalidate: WATCH_REVALIDATE,
        kernel_cache: opts.kernel_cache,
        dcache_entries: opts.dcache_entries,
        dcache_negative: opts.dcache_negative,
        page_cache_bytes: opts.page_cache_bytes,
        fd_pool,
        use_handles: sys::is_root(),
        fd_limit: nofile,
        coherence,
        coherence_why: coherence_why.clone(),
        source_kind: profile.kind(),
        name_stat_flags: profile.name_stat_flags(),
        workers: threads,
        mirror_flags: crate::fs::submounts::enforced_by(&options),
    };
    // Opened before `Fs::new` reads the mount table, so that a change
    // made after that read is reported to the lanes' thread (below).
    let table_watch = if opts.io_uring == IoUring::Off {
        crate::mount_table::MountTableWatch::open()
            .inspect_err(|e| {
                tracing::warn!(
                    "cannot watch the mount table ({e}): filesystems mounted under the source from now on get lanes only once entered"
                );
            })
            .ok()
    } else {
        None
    };
    let fs = Arc::new(
        Fs::new(&opts.source, cfg).map_err(|e| anyhow::anyhow!("opening source {}: {e}", opts.source.display()))?,
    );
    let notifier = Arc::new(OnceLock::new());
    // Until the mount is up, a failure ends the threads started so far.
    let mut started = Threads {
        fs: Some(fs.clone()),
        workers: Vec::new(),
        stoppers: Vec::new(),
        stop: Arc::default(),
    };
    let workers = &mut started.workers;
    // The source watcher's thread: its marks are already in place, so a
    // change made from now on is applied even if it is read later.
    if let Some(w) = watcher {
        started.stoppers.push(w.stopper()?);
        fs.set_watch_marker(w.marker()?, w.marked().iter().map(|m| (m.dev, m.mount_id)));
        fs.set_watch_syncer(w.syncer()?);
        let fs = fs.clone();
        spawn(workers, "rcufs-watch", "the source watcher thread", move || {
            watch_worker(&w, &fs)
        })?;
    }
    // The invalidation threads (one per lane: two send entries) and the
    // thread that answers drops once their invalidations are sent
    // (`inval.rs`).
    for (name, lane) in [
        ("rcufs-inval-e", Lane::Entries),
        ("rcufs-inval-e2", Lane::EntriesAside),
        ("rcufs-inval-i", Lane::Inodes),
    ] {
        let (notifier, fs) = (notifier.clone(), fs.clone());
        spawn(workers, name, "an invalidation thread", move || {
            fuse::inval_worker(fs, notifier, lane)
        })?;
    }
    let f = fs.clone();
    spawn(workers, "rcufs-answers", "the drop-answer thread", move || {
        crate::inval::answer_worker(f.inval_queue())
    })?;
    let f = fs.clone();
    spawn(workers, "rcufs-warm", "the warm thread", move || f.warm_worker())?;
    if fs.config().source_kind == "network" {
        // The names READDIRPLUS answered without attributes (`fs/prefetch.rs`).
        for i in 0..crate::fs::prefetch::BACKGROUND_THREADS {
            let f = fs.clone();
            spawn(
                workers,
                &format!("rcufs-names-{i}"),
                "a name lookup thread",
                move || f.name_worker(),
            )?;
        }
        // The listings read ahead of a walk (`fs/walk_ahead.rs`).
        for i in 0..crate::fs::walk_ahead::LIST_THREADS {
            let f = fs.clone();
            spawn(workers, &format!("rcufs-lists-{i}"), "a listing thread", move || {
                f.list_worker()
            })?;
        }
    }
    let adapter = FuseAdapter::new(fs.clone(), notifier.clone()).with_io_uring(opts.io_uring);
    let source = opts.source.canonicalize().unwrap_or_else(|_| opts.source.clone());
    let running = match fuse::session::start(
        adapter,
        &source,
        &opts.mountpoint,
        fuse::session::Serving {
            threads,
            poll: opts.poll,
            io_uring: opts.io_uring,
        },
        &options,
        &notifier,
    ) {
        Ok(r) => r,
        // `started` ends the threads (the adapter was dropped with the
        // failed session, closing the queues; closing them again is
        // harmless).
        Err(e) => return Err(anyhow::Error::new(e).context(format!("mounting on {}", opts.mountpoint.display()))),
    };
    // The one line an operator reads to know what is mounted and how.
    tracing::info!(
        source = %opts.source.display(),
        mountpoint = %opts.mountpoint.display(),
        threads,
        poll_us = opts.poll.as_micros() as u64,
        io_uring = opts.io_uring.name(),
        source_fstype = %profile.fstype,
        source_kind = profile.kind(),
        dcache_entries = opts.dcache_entries,
        dcache_negative = opts.dcache_negative,
        page_cache_bytes = opts.page_cache_bytes,
        kernel_cache = opts.kernel_cache,
        coherence = coherence.name(),
        coherence_why = %coherence_why,
        revalidate_secs = revalidate.as_secs_f64(),
        fuse_options = %options.join(","),
        fd_pool,
        "mounted"
    );
    // The thread that ends when this flag is set (the guard), at unmount
    // or by `started` if the start fails after it.
    let stop = started.stop.clone();
    // `--io-uring idle`: the guard against starved queue threads.
    if opts.io_uring == IoUring::Idle {
        let stop = stop.clone();
        let guard = spawn(
            &mut started.workers,
            "rcufs-guard",
            "the io_uring guard thread",
            move || {
                crate::uring_guard::run(&stop);
            },
        );
        if let Err(e) = guard {
            let _ = fuse::session::stop(running);
            return Err(e);
        }
    }
    // The lanes (`/dev/fuse` workers only) kept in step with the mount
    // table: filesystems mounted under the source from now on get theirs
    // before anything enters them (`fs/lanes.rs`). Not joined at unmount
    // (see `Fs::lane_mounts_worker`); without it, lanes are learned at
    // crossings only.
    if let Some(watch) = table_watch {
        let f = Arc::downgrade(&fs);
        let thread = watch.stopper().and_then(|stopper| {
            std::thread::Builder::new()
                .name("rcufs-mounts".into())
                .spawn(move || Fs::lane_mounts_worker(&f, &watch))?;
            Ok(stopper)
        });
        match thread {
            Ok(stopper) => started.stoppers.push(stopper),
            Err(e) => tracing::warn!(
                "cannot start the mount table's thread ({e}): filesystems mounted under the source from now on get lanes only once entered"
            ),
        }
    }
    started.keep();
    Ok(Mounted {
        mountpoint: opts.mountpoint,
        running: Some(running),
        threads: started,
        fs,
    })
}

/// The daemon's threads, and what ends each: the background queues
/// (`Fs::close_background`), the stoppers (the source watcher's loop and
/// the mount table's, `fs/lanes.rs`) and the flag (the `--io-uring idle`
/// guard, `uring_guard.rs`). Dropped before [`keep`](Threads::keep) (a
/// `mount` whose start failed), it closes the queues and ends them all,
/// so a failed mount leaves no thread behind; once kept, the `Mounted`
/// ends them ([`end`](Threads::end)).
struct Threads {
    /// The filesystem whose queues the drop closes; `None` once kept.
    fs: Option<Arc<Fs>>,
    workers: Vec<JoinHandle<()>>,
    stoppers: Vec<Stopper>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Threads {
    /// The mount is up: the threads are the `Mounted`'s to end.
    fn keep(&mut self) {
        self.fs = None;
    }

    /// Stops the loops, sets the flag and joins the threads (those on the
    /// background queues end once the queues are closed).
    fn end(&mut self) {
        for s in self.stoppers.drain(..) {
            s.stop();
        }
        // Relaxed: a request to end, which publishes nothing.
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            fs.close_background();
            self.end();
        }
    }
}

/// Starts the daemon's thread `name` running `f`, kept in `workers` to be
/// joined at unmount; `what` names it in the error.
fn spawn(workers: &mut Vec<JoinHandle<()>>, name: &str, what: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    let handle = std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .with_context(|| format!("starting {what}"))?;
    workers.push(handle);
    Ok(())
}

/// The source watcher's loop: applies each batch of events. A panic while
/// applying one drops every cache (the batch's changes may be missing from
/// them) and the watch goes on; an error that ends the loop drops every
/// cache and leaves the mount re-checking the source after `--revalidate`,
/// as with `ttl` coherence (`fs/watched.rs`).
fn watch_worker(w: &Watcher, fs: &Fs) {
    if let Some(after) = crate::fault::watch_fails() {
        std::thread::sleep(after);
        fs.watch_failed("injected fault");
        return;
    }
    if let Some(stall) = crate::fault::watch_stall() {
        std::thread::sleep(stall);
    }
    // A panic outside the guarded application of a batch (in reading or
    // parsing the events) ends the watch: nothing reports changes any more,
    // so it fails as an error does.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.run(|events| {
            let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fs.apply_source_events(events)));
            if applied.is_err() {
                crate::fault::record_panic();
                let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fs.watch_batch_failed()));
                if dropped.is_err() {
                    // Nothing more can be trusted of what the watch kept.
                    crate::fault::record_panic();
                    fs.watch_failed("a panic while dropping the caches after a failed batch");
                }
            }
        })
    }));
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => fs.watch_failed(&format!("{e:#}")),
        Err(_) => {
            crate::fault::record_panic();
            fs.watch_failed("a panic in the watcher's thread");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads of this process named `name`.
    fn threads_named(name: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == name)
            .count()
    }

    /// A mount's unmount ends its mount table's thread, even while the
    /// filesystem lives on (here, held by the test), which only the stop
    /// can do. (No other test of this binary mounts, so the thread's name
    /// is this mount's alone.)
    #[test]
    fn an_unmount_ends_the_mount_tables_thread() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
            eprintln!("SKIPPED: mounting needs root and /dev/fuse");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (source, mountpoint) = (dir.path().join("src"), dir.path().join("mnt"));
        std::fs::create_dir(&source).unwrap();
        std::fs::create_dir(&mountpoint).unwrap();
        let m = mount(MountOptions {
            source,
            mountpoint,
            ..MountOptions::default()
        })
        .expect("mounting a temporary directory");
        // A thread names itself once it runs: waited for.
        let soon = |n: usize| {
            (0..3000).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                threads_named("rcufs-mounts") == n
            })
        };
        assert!(soon(1), "the mount table's thread is not running");
        let fs = m.fs().clone();
        m.unmount().unwrap();
        assert!(soon(0), "the mount table's thread outlived the unmount by 30 s");
        drop(fs);
    }

    /// A start that fails after threads were started ends them all: a
    /// thread on a background queue (the warm thread), one that waits for
    /// a stopper (the mount table's) and one that watches the flag (as the
    /// io_uring guard does).
    #[test]
    fn a_failed_start_ends_the_threads_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(Fs::new(dir.path(), FsConfig::default()).unwrap());
        let watch = crate::mount_table::MountTableWatch::open().unwrap();
        let mut threads = Threads {
            fs: Some(fs.clone()),
            workers: Vec::new(),
            stoppers: vec![watch.stopper().unwrap()],
            stop: Arc::default(),
        };
        let (tx, ended) = std::sync::mpsc::channel();
        let (f, t) = (fs.clone(), tx.clone());
        spawn(&mut threads.workers, "t-warm", "a test thread", move || {
            f.warm_worker();
            let _ = t.send("the warm thread");
        })
        .unwrap();
        let (f, t) = (Arc::downgrade(&fs), tx.clone());
        spawn(&mut threads.workers, "t-mounts", "a test thread", move || {
            Fs::lane_mounts_worker(&f, &watch);
            let _ = t.send("the mount table's thread");
        })
        .unwrap();
        // As the io_uring guard watches the flag.
        let flag = threads.stop.clone();
        spawn(&mut threads.workers, "t-flag", "a test thread", move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = tx.send("the flag's thread");
        })
        .unwrap();
        assert!(
            ended.recv_timeout(Duration::from_millis(100)).is_err(),
            "a thread ended before the drop"
        );
        // The drop joins them: on a thread of its own, so that a thread it
        // fails to end fails the test rather than hanging it.
        std::thread::spawn(move || drop(threads));
        let mut gone: Vec<_> = (0..3)
            .map_while(|_| ended.recv_timeout(Duration::from_secs(30)).ok())
            .collect();
        gone.sort_unstable();
        assert_eq!(
            gone,
            ["the flag's thread", "the mount table's thread", "the warm thread"],
            "dropping the threads of a failed start did not end them all"
        );
        // The kept threads are not ended by the guard (a filesystem of
        // their own: the drop above closed the first one's queues).
        let fs = Arc::new(Fs::new(dir.path(), FsConfig::default()).unwrap());
        let f = fs.clone();
        let mut threads = Threads {
            fs: Some(fs),
            workers: Vec::new(),
            stoppers: Vec::new(),
            stop: Arc::default(),
        };
        spawn(&mut threads.workers, "t-warm", "a test thread", move || f.warm_worker()).unwrap();
        let fs = threads.fs.clone().unwrap();
        threads.keep();
        // Dropped once kept, it closes nothing (the `Mounted` ends them).
        let workers = std::mem::take(&mut threads.workers);
        drop(threads);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!workers[0].is_finished(), "a kept thread was ended");
        fs.close_background();
        for w in workers {
            w.join().unwrap();
        }
    }
}
