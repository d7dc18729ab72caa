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

use crate::fs::{Fs, FsConfig};
use crate::fuse::{self, FuseAdapter};
use crate::inval::Lane;
use crate::sys;

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The directory to mirror.
    pub source: PathBuf,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// FUSE worker threads (default: available parallelism, at least 2).
    pub threads: usize,
    /// dcache capacity (default 1,000,000).
    pub dcache_entries: usize,
    /// dcache negative-entry capacity (default `dcache_entries / 4`).
    pub dcache_negative: usize,
    /// Page cache budget in bytes (default 512 MiB).
    pub page_cache_bytes: u64,
    /// Let the kernel cache entries, attributes and pages (default false).
    pub kernel_cache: bool,
    /// How soon names and attributes changed directly in the source are seen (default 1 s).
    pub revalidate: Duration,
    /// `-o` options: allow_other, allow_root, default_permissions, ro, rw,
    /// dev, nodev, suid, nosuid, exec, noexec, atime, noatime, sync, async, dirsync.
    pub fuse_options: Vec<String>,
}

impl Default for MountOptions {
    fn default() -> Self {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2);
        Self {
            source: PathBuf::new(),
            mountpoint: PathBuf::new(),
            threads,
            dcache_entries: 1_000_000,
            dcache_negative: 250_000,
            page_cache_bytes: 512 << 20,
            kernel_cache: false,
            revalidate: Duration::from_secs(1),
            fuse_options: Vec::new(),
        }
    }
}

/// A mounted rcufs.
pub struct Mounted {
    mountpoint: PathBuf,
    running: Option<fuse::session::Running>,
    workers: Vec<JoinHandle<()>>,
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
        // The adapter closed the invalidation queue when the session
        // dropped it, so the threads' loops have ended or are about to.
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
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
    let _ = meta.dev();
    Ok(())
}

/// Mounts rcufs; returns once the kernel mount exists and has been initialised.
pub fn mount(opts: MountOptions) -> Result<Mounted> {
    validate(&opts)?;
    let nofile = sys::raise_nofile_limit();
    // Leave room for open files, directories and the FUSE channels.
    let fd_pool = ((nofile / 4) as usize).clamp(64, 8192);
    let cfg = FsConfig {
        revalidate: opts.revalidate,
        kernel_cache: opts.kernel_cache,
        dcache_entries: opts.dcache_entries,
        dcache_negative: opts.dcache_negative,
        page_cache_bytes: opts.page_cache_bytes,
        fd_pool,
        use_handles: sys::is_root(),
        fd_limit: nofile,
    };
    let fs = Arc::new(
        Fs::new(&opts.source, cfg).map_err(|e| anyhow::anyhow!("opening source {}: {e}", opts.source.display()))?,
    );
    let notifier = Arc::new(OnceLock::new());
    // The invalidation threads (one per lane) and the thread that answers
    // drops once their invalidations are sent (`inval.rs`).
    let mut workers = Vec::new();
    for (name, lane) in [("rcufs-inval-e", Lane::Entries), ("rcufs-inval-i", Lane::Inodes)] {
        let (notifier, fs) = (notifier.clone(), fs.clone());
        workers.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || fuse::inval_worker(fs, notifier, lane))
                .context("starting an invalidation thread")?,
        );
    }
    {
        let fs = fs.clone();
        workers.push(
            std::thread::Builder::new()
                .name("rcufs-answers".into())
                .spawn(move || crate::inval::answer_worker(fs.inval_queue()))
                .context("starting the drop-answer thread")?,
        );
    }
    {
        let fs = fs.clone();
        workers.push(
            std::thread::Builder::new()
                .name("rcufs-warm".into())
                .spawn(move || fs.warm_worker())
                .context("starting the warm thread")?,
        );
    }
    let options: Vec<String> = opts
        .fuse_options
        .iter()
        .flat_map(|o| o.split(',').filter(|p| !p.is_empty()).map(String::from))
        .collect();
    let adapter = FuseAdapter::new(fs.clone(), notifier.clone());
    let running = match fuse::session::start(adapter, &opts.mountpoint, opts.threads, &options, &notifier) {
        Ok(r) => r,
        Err(e) => {
            // The adapter was dropped with the failed session, closing the queue.
            fs.inval_queue().close();
            fs.warmer().close();
            for w in workers {
                let _ = w.join();
            }
            return Err(anyhow::Error::new(e).context(format!("mounting on {}", opts.mountpoint.display())));
        }
    };
    tracing::info!(source = %opts.source.display(), mountpoint = %opts.mountpoint.display(), fd_pool, "mounted");
    Ok(Mounted {
        mountpoint: opts.mountpoint,
        running: Some(running),
        workers,
        fs,
    })
}
