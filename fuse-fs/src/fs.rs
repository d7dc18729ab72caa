//! The filesystem logic, free of FUSE types: one method per FUSE operation,
//! each returning `FsResult`, so that it can be tested without a mount.
//!
//! # Design
//! - Identity and lifetime of inodes: [`crate::inode`] (key `(st_dev,
//!   st_ino)`, kernel lookup counts, bounded descriptors).
//! - Names: every LOOKUP asks [`crate::names`] (the dcache) first. A hit is
//!   answered from the payload (the `Inode` and its cached attributes); an
//!   entry older than the revalidation interval is checked against the
//!   source first. A miss looks the source up and inserts the result,
//!   negative results included. READDIRPLUS inserts what it lists.
//! - Data: every READ goes through [`crate::data`] (the page cache), filled
//!   with `pread` on the open file's descriptor. WRITE goes to the source
//!   first, then updates the cached pages. At OPEN the file's size, mtime and
//!   ctime are compared with what the cache saw, and stale pages are dropped.
//! - Directory drop ([`Fs::drop_dir`]): the ioctl and the `user.rcufs.drop`
//!   attribute; seeds 001 ("Fadvise: directory level page cache cleaning
//!   support") and 004 ("VFS: Directory level cache cleaning"). It walks the
//!   children index and the dcache subtree, so its cost follows the subtree.
//! - Opens: [`crate::open_files`] (shared descriptors, the root reserve).
//! - Resources: a freed inode's page-cache entry is dropped ([`Fs::forget`]).
//!
//! # Invariants
//! - Errors are the source's errno; rcufs's own errors use the kernel's errno
//!   for the same mistake (see `error.rs`).
//! - Names under `user.rcufs.` never reach the source and are never listed.
//! - No lock covers the whole filesystem on the read path: READ takes the
//!   open-file shard's read lock and the page cache's own fine-grained locks
//!   (seed 003, "Recent HAMMER SMP performance work": a per-mount lock on the
//!   cached read path halved concurrent cached-read throughput).
//! - Every operation that creates, opens, changes or lists something in
//!   the source runs with the caller's identity ([`crate::creds`]), so the
//!   source decides permissions, ownership, setgid inheritance, ACLs and
//!   setuid clearing. Lookups, attribute reads, reads and readdir run as the
//!   daemon (the kernel has checked the caller's access for those).
//! - The process umask is 0; a creating operation uses the caller's umask
//!   on its own thread only (see `creds.rs`).

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::creds::Creds;
use crate::data::Data;
use crate::error::{FsError, FsResult};
use crate::inode::{Inode, InodeTable, NewInode, ROOT_INO, RenameWatch, Stamp, key_of};
use crate::inval::InvalQueue;
use crate::listing::Listings;
use crate::names::{Hit, Names};
use crate::open_files::{self, FdGate, Handles, OpenDir, OpenFile, ShareKey, SharedFd, SharedFds};
use crate::pinned::PinnedRead;
use crate::protocol::{self, DropArgs, DropMode};
use crate::range_lock::RangeLocks;
use crate::sys::{self, cstr};

mod args;
mod dirs;
mod types;
mod watched;
pub use crate::inval::Inval;
use args::{create_flags, may_lose_suidgid, name_ok, source_open_flags, timespec, widened};
pub use types::{Attr, Caller, DirItem, DropOutcome, Entry, Kind, Opened, SetAttr, Statfs, XattrReply};
use watched::Watched;
pub use watched::{Coherence, LENT_ATTR_TTL, WATCH_REVALIDATE};

/// The filesystem's configuration.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// How soon names and attributes changed directly in the source are
    /// seen, where nothing reports their changes: every object with `ttl`
    /// coherence; with the watch, the objects it cannot see (an inode
    /// without a file handle, a filesystem under the source that could not
    /// be marked, everything once the watch has failed).
    pub revalidate: Duration,
    /// With the watch, the same for the objects it sees: a safety net only
    /// ([`WATCH_REVALIDATE`]).
    pub watch_revalidate: Duration,
    /// Let the kernel cache entries, attributes and pages too.
    pub kernel_cache: bool,
    /// dcache capacity.
    pub dcache_entries: usize,
    /// dcache negative-entry capacity.
    pub dcache_negative: usize,
    /// Page cache budget in bytes.
    pub page_cache_bytes: u64,
    /// Most `O_PATH` descriptors kept open for inodes.
    pub fd_pool: usize,
    /// Use kernel file handles (needs root).
    pub use_handles: bool,
    /// The process's descriptor limit (soft `RLIMIT_NOFILE`); non-root opens
    /// are refused before the descriptors reach it (see `open_files.rs`).
    pub fd_limit: u64,
    /// How changes made directly in the source are seen (with `Watch`, the
    /// caller runs a watcher that feeds [`Fs::apply_source_events`]).
    pub coherence: Coherence,
    /// Why that mode was chosen (for the stats and the log).
    pub coherence_why: String,
    /// `local` or `network` (a network or FUSE filesystem), which chose
    /// the defaults of the options not given (`slow_source.rs`).
    pub source_kind: &'static str,
    /// Flags added to `AT_SYMLINK_NOFOLLOW` when a name is looked up in the
    /// source (`slow_source::name_stat_flags`).
    pub name_stat_flags: libc::c_int,
    /// FUSE worker threads (for the stats; 0 when not mounted).
    pub workers: usize,
    /// The mount flags of [`submounts::POLICY_FLAGS`] the mirror enforces
    /// ([`submounts::enforced_by`] its mount options): a filesystem under
    /// the source that enforces one more is not served (`fs/submounts.rs`).
    pub mirror_flags: u64,
}

impl Default for FsConfig {
    fn default() -> Self {
        Self {
            revalidate: Duration::from_secs(1),
            watch_revalidate: WATCH_REVALIDATE,
            kernel_cache: false,
            dcache_entries: 1_000_000,
            dcache_negative: 250_000,
            page_cache_bytes: 512 << 20,
            fd_pool: 4096,
            use_handles: sys::is_root(),
            fd_limit: sys::nofile_limit(),
            coherence: Coherence::Ttl,
            coherence_why: String::new(),
            source_kind: "local",
            name_stat_flags: 0,
            workers: 0,
            mirror_flags: submounts::enforced_by(&[]),
        }
    }
}

#[derive(Debug, Default)]
struct DropCounters {
    requests: AtomicU64,
    dentries: AtomicU64,
    pages: AtomicU64,
    bytes: AtomicU64,
    skipped: AtomicU64,
    busy: AtomicU64,
    visited: AtomicU64,
}

/// The passthrough filesystem.
#[derive(Debug)]
pub struct Fs {
    cfg: FsConfig,
    /// How close each source filesystem is to its reserved blocks (writes).
    space: crate::space::Space,
    table: InodeTable,
    root: Arc<Inode>,
    names: Names,
    data: Data,
    files: Handles<OpenFile>,
    dirs: Handles<OpenDir>,
    shared: SharedFds,
    gate: Arc<FdGate>,
    drops: DropCounters,
    /// The kernel marks every write by a writer without `CAP_FSETID`
    /// (`FUSE_HANDLE_KILLPRIV_V2` was granted at INIT, Linux 5.11): see
    /// [`Fs::write`].
    kernel_marks_kills: AtomicBool,
    /// Filesystems under the source not served for their mount flags
    /// (`fs/submounts.rs`).
    refused_mounts: submounts::Refused,
    /// Filesystems under the source that can stop answering
    /// (`fs/lanes.rs`).
    lanes: lanes::Lanes,
    stale_opens: AtomicU64,
    dir_changes: AtomicU64,
    inval: InvalQueue,
    creds: Creds,
    watched: Watched,
    warmer: warm::Warmer,
    /// Orders each file's source changes and cache updates (`range_lock.rs`).
    writes: RangeLocks,
    listings: Listings,
    source_lookups: crate::slow_source::SourceLookups,
    /// Names a refresh of stale names looked up (`fs/prefetch.rs`).
    prefetched: AtomicU64,
    /// Names READDIRPLUS answered without attributes, waiting to be
    /// looked up (`fs/prefetch.rs`).
    unlisted: prefetch::NameQueue,
    /// Subdirectories a walk will reach, waiting to be listed ahead of it
    /// (`fs/walk_ahead.rs`).
    lists_ahead: prefetch::NameQueue,
    /// Directories whose stale names a lookup refreshed at once.
    refreshes: AtomicU64,
    /// FLUSHes answered (`fs/flush.rs`).
    flushes: AtomicU64,
}

impl Fs {
    /// A filesystem mirroring the directory `source`.
    pub fn new(source: &std::path::Path, cfg: FsConfig) -> FsResult<Self> {
        sys::clear_umask();
        let path = sys::cstr(std::os::unix::ffi::OsStrExt::as_bytes(source.as_os_str()))?;
        let root_fd = sys::open_path(&path, libc::O_PATH | libc::O_DIRECTORY)?;
        let (mut table, root) = InodeTable::new(root_fd, cfg.fd_pool, cfg.use_handles)?;
        if cfg.coherence == Coherence::Watch {
            // The watcher names objects by file handle.
            table.index_handles(&root)?;
        }
        let names = Names::new(cfg.dcache_entries, cfg.dcache_negative, &root);
        let data = Data::new(cfg.page_cache_bytes);
        let gate = Arc::new(FdGate::new(cfg.fd_limit, cfg.fd_pool as u64));
        // Listings are forgotten by time, drops, changes through the mount
        // and, with the watch, by the watcher (`listing.rs`).
        let listings = Listings::new(true, cfg.dcache_entries);
        Ok(Self {
            cfg,
            table,
            root,
            names,
            data,
            files: Handles::default(),
            dirs: Handles::default(),
            shared: SharedFds::default(),
            gate,
            drops: DropCounters::default(),
            refused_mounts: submounts::Refused::default(),
            lanes: lanes::Lanes::default(),
            stale_opens: AtomicU64::new(0),
            dir_changes: AtomicU64::new(0),
            inval: InvalQueue::default(),
            creds: Creds::new(sys::is_root()),
            watched: Watched::default(),
            space: crate::space::Space::default(),
            warmer: warm::Warmer::default(),
            writes: RangeLocks::default(),
            listings,
            source_lookups: Default::default(),
            prefetched: AtomicU64::new(0),
            kernel_marks_kills: AtomicBool::new(false),
            unlisted: prefetch::NameQueue::new([
                "names_first",
                "names_first_looked_up",
                "names_first_unqueued",
                "names_first_waiting",
            ]),
            lists_ahead: prefetch::NameQueue::new([
                "dirs_ahead",
                "dirs_listed_ahead",
                "dirs_ahead_unqueued",
                "dirs_ahead_waiting",
            ]),
            refreshes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
        .with_lanes_from_mount_table(source))
    }

    /// Closes the queues the daemon's background threads wait on
    /// (invalidations, warm walks, names and listings of a slow source), so
    /// that their loops end: the session is over.
    pub fn close_background(&self) {
        self.inval.close();
        self.warmer.close();
        self.unlisted.close();
        self.lists_ahead.close();
    }

    /// The kernel-invalidation queue (filled by the adapter after replies,
    /// emptied by the invalidation thread).
    pub fn inval_queue(&self) -> &InvalQueue {
        &self.inval
    }

    /// The configuration.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// How long what was read of `inode` may be used without asking the
    /// source again: the watch's interval if the watch reports its changes
    /// ([`Fs::covered`]), otherwise `--revalidate`'s.
    pub(crate) fn interval(&self, inode: &Inode) -> Duration {
        if self.covered(inode) {
            self.cfg.watch_revalidate
        } else {
            self.cfg.revalidate
        }
    }

    /// [`interval`](Self::interval) of the inode with node id `ino` (a
    /// node id no longer known: the shorter one).
    fn interval_of(&self, ino: u64) -> Duration {
        if self.covered_ino(ino) {
            self.cfg.watch_revalidate
        } else {
            self.cfg.revalidate
        }
    }

    /// How long the kernel may keep a name under directory `parent` (0
    /// unless kernel-cache mode): the directory's interval, as the names
    /// under it change with it.
    pub fn entry_ttl(&self, parent: u64) -> Duration {
        if self.cfg.kernel_cache {
            self.interval_of(parent)
        } else {
            Duration::ZERO
        }
    }

    /// How long the kernel may keep the attributes of `ino`: its interval
    /// in kernel-cache mode; in the default mode with the watch, a
    /// millisecond ([`LENT_ATTR_TTL`], `fs/watched.rs`) if the watch
    /// reports its changes; otherwise 0.
    pub fn attr_ttl(&self, ino: u64) -> Duration {
        if self.cfg.kernel_cache {
            self.interval_of(ino)
        } else if self.lends_attrs() && self.covered_ino(ino) {
            LENT_ATTR_TTL
        } else {
            Duration::ZERO
        }
    }

    /// Whether the kernel may hold attributes of the mount's inodes, which
    /// changes must then invalidate.
    pub fn kernel_keeps_attrs(&self) -> bool {
        self.cfg.kernel_cache || self.lends_attrs()
    }

    /// Whether what was read of `inode` at `at` is within its interval.
    fn fresh(&self, inode: &Inode, at: Instant) -> bool {
        at.elapsed() < self.interval(inode)
    }

    /// Whether a cached `inode` may be answered as it is: attributes within
    /// the interval, and its source object not gone.
    fn usable(&self, inode: &Inode) -> bool {
        self.fresh(inode, inode.attr().at) && !inode.is_stale()
    }

    /// Answers `name` under `parent` from the name cache's usable `inode`,
    /// as LOOKUP does: one kernel reference, the dentry attached, the link
    /// recorded.
    /// `watch` was taken before the name cache was read.
    fn answer_cached(&self, parent: &Arc<Inode>, name: &[u8], inode: &Arc<Inode>, watch: RenameWatch) -> Entry {
        self.table.remember(inode, 1);
        self.names.attach(parent, name, inode);
        self.table.set_link_unless_moved(inode, parent.ino, name, watch);
        self.entry_of(inode)
    }

    fn inode(&self, ino: u64) -> FsResult<Arc<Inode>> {
        self.table.get(ino)
    }

    fn dir(&self, ino: u64) -> FsResult<Arc<Inode>> {
        let d = self.inode(ino)?;
        if d.is_dir() { Ok(d) } else { Err(FsError::NOTDIR) }
    }

    fn entry_of(&self, inode: &Arc<Inode>) -> Entry {
        Entry {
            ino: inode.ino,
            attr: Attr::from_stat(inode.ino, &inode.attr().st),
            lend: true,
        }
    }

    fn negative(&self, parent: &Inode, name: &[u8]) -> FsResult<Entry> {
        // Kernel-cache mode lends the kernel a negative entry, remembered so
        // that a drop can invalidate it; past the bounds of what is
        // remembered (`inode/negatives.rs`), `ENOENT`, which the kernel
        // does not keep.
        if self.cfg.kernel_cache && parent.push_kernel_negative(name) {
            Ok(Entry {
                ino: 0,
                attr: Attr::from_stat(0, &sys::zero_stat()),
                lend: true,
            })
        } else {
            Err(FsError::NOENT)
        }
    }

    /// Re-reads `inode`'s attributes from the source.
    fn refresh(&self, inode: &Inode) -> FsResult<libc::stat> {
        let fd = self.table.path_fd(inode)?;
        let before = self.source_seq();
        let st = sys::fstat(fd.as_fd())?;
        self.store_attr(inode, st, before);
        Ok(st)
    }

    /// Re-checks a directory whose attributes are older than the
    /// revalidation interval; if its mtime or ctime moved, names under it may
    /// have changed in the source, so its cached children are forgotten.
    fn revalidate_dir(&self, dir: &Inode) {
        let seen = dir.names_stamp();
        if let Some((_, at)) = seen
            && self.fresh(dir, at)
        {
            return;
        }
        let Ok(st) = self.refresh(dir) else { return };
        let now = Stamp::of(&st);
        let changed = match seen {
            Some((stamp, _)) => stamp != now,
            // First check: compare with the attributes the directory was found with.
            None => false,
        };
        if changed {
            dir.set_listing(None);
            self.names.drop_subtree(dir, |_| true);
            self.dir_changes.fetch_add(1, Ordering::Relaxed);
        }
        dir.set_names_stamp(now, Instant::now());
    }

    /// Looks `name` up in the source under `parent`, interns the result and
    /// records it in the name cache. Takes one kernel reference if `remember`.
    fn lookup_source(&self, parent: &Arc<Inode>, name: &[u8], remember: bool) -> FsResult<Option<Arc<Inode>>> {
        self.lookup_source_kept(parent, name, remember).map(|(found, _)| found)
    }

    /// [`lookup_source`](Self::lookup_source), and whether what it read was
    /// kept: false if the read overlapped a change (see [`Entry::lend`]).
    fn lookup_source_kept(
        &self,
        parent: &Arc<Inode>,
        name: &[u8],
        remember: bool,
    ) -> FsResult<(Option<Arc<Inode>>, bool)> {
        // Inserting may evict dcache entries, whose inodes are then freed.
        self.reap();
        let pfd = self.table.path_fd(parent)?;
        let cname = cstr(name)?;
        let _interning = self.interning();
        let before = self.source_seq();
        let names_read = parent.reading_names();
        let renames = self.table.watch_renames();
        let in_flight = self.source_lookups.enter();
        crate::fault::source_delay();
        let flags = libc::AT_SYMLINK_NOFOLLOW | self.cfg.name_stat_flags;
        let mut read = sys::fstatat(pfd.as_fd(), &cname, flags);
        drop(in_flight);
        if let Ok(st) = &read
            && st.st_dev != parent.key.0
            && self.entered_filesystem(pfd.as_fd(), &cname, st.st_dev)
        {
            // Read again now that changes there are reported.
            read = sys::fstatat(pfd.as_fd(), &cname, flags);
        }
        crate::fault::lookup_delay(name);
        crate::fault::lookup_hook(name);
        match read {
            Ok(st) => {
                if st.st_dev != parent.key.0 {
                    tracing::debug!(name = %String::from_utf8_lossy(name), "entering a mount point inside the source");
                    self.may_enter(parent, pfd.as_fd(), &cname, st.st_dev)?;
                }
                let inode = self.table.intern(NewInode {
                    parent_ino: parent.ino,
                    parent: pfd.as_fd(),
                    name: &cname,
                    st,
                    renames,
                })?;
                if remember {
                    self.table.remember(&inode, 1);
                }
                let cached = parent
                    .cache_if_unchanged(names_read, || self.names.insert(parent, name, Some(&inode)))
                    .is_some();
                // `lost_event_for` before the sequence (see `fs/watched.rs`).
                let lost = self.lost_event_for(&inode);
                let kept = cached && !lost && !self.source_changed_since(before);
                if !kept {
                    // A name under the directory changed through the mount,
                    // or the source changed, while this was read: cache
                    // nothing.
                    if cached {
                        self.names.remove(parent, name);
                    }
                    inode.expire_attr();
                }
                Ok((Some(inode), kept))
            }
            Err(e) if e.errno() == libc::ENOENT => {
                let cached = parent
                    .cache_if_unchanged(names_read, || self.names.insert(parent, name, None))
                    .is_some();
                let kept = cached && !self.source_changed_since(before);
                if cached && !kept {
                    self.names.remove(parent, name);
                }
                Ok((None, kept))
            }
            Err(e) => Err(e),
        }
    }

    /// LOOKUP.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> FsResult<Entry> {
        let parent = self.dir(parent)?;
        if name.len() > 255 {
            return Err(FsError::new(libc::ENAMETOOLONG));
        }
        if name == b"." || name == b".." {
            // The kernel resolves these itself; answer as the source would.
            return Err(FsError::NOENT);
        }
        if crate::fault::lookup_panics(name) {
            let _held = parent.attr.lock();
            panic!("injected fault: LOOKUP of {}", String::from_utf8_lossy(name));
        }
        self.revalidate_dir(&parent);
        let watch = self.table.watch_renames();
        match self.names.lookup(&parent, name) {
            Hit::Positive(mut inode) => {
                // A slow source: refresh the directory's stale names at once
                // (`fs/prefetch.rs`), then look again.
                if !self.fresh(&inode, inode.attr().at)
                    && self.refresh_dir(&parent)
                    && let Hit::Positive(again) = self.names.lookup(&parent, name)
                {
                    inode = again;
                }
                // A stale inode (its source object is gone) is never answered.
                if self.usable(&inode) {
                    return Ok(self.answer_cached(&parent, name, &inode, watch));
                }
            }
            Hit::Negative => return self.negative(&parent, name),
            Hit::Miss => {}
        }
        let (found, kept) = self.lookup_source_kept(&parent, name, true)?;
        let mut entry = match found {
            Some(inode) => self.entry_of(&inode),
            None => self.negative(&parent, name)?,
        };
        entry.lend = kept;
        Ok(entry)
    }

    /// FORGET: the kernel drops `n` references to `ino`.
    ///
    /// At the last one, a file whose last link is gone can never be read
    /// again: its pages and page-cache entry go at once. Whatever inode has
    /// been freed since (here or by a dcache eviction) loses its page-cache
    /// entry too (see [`Fs::reap`]).
    pub fn forget(&self, ino: u64, n: u64) {
        if let Some(gone) = self.table.forget(ino, n)
            && gone.attr().st.st_nlink == 0
        {
            self.data.drop_inode(gone.ino);
        }
        self.reap();
    }

    /// Drops the page-cache entries of the inodes freed since the last call.
    fn reap(&self) {
        for ino in self.table.reap() {
            self.data.drop_inode(ino);
        }
    }

    /// GETATTR.
    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> FsResult<Attr> {
        crate::fault::getattr_delay();
        let inode = self.inode(ino)?;
        if let Some(fh) = fh
            && let Ok(file) = self.files.get(fh)
        {
            let before = self.source_seq();
            let st = sys::fstat(file.fd.as_fd())?;
            self.store_attr(&inode, st, before);
            return Ok(Attr::from_stat(ino, &st));
        }
        let a = inode.attr();
        if self.fresh(&inode, a.at) {
            return Ok(Attr::from_stat(ino, &a.st));
        }
        let st = self.refresh(&inode)?;
        Ok(Attr::from_stat(ino, &st))
    }

    /// SETATTR, as the caller (the source checks ownership, and clears
    /// setuid/setgid on truncate and chown as it would for the caller).
    pub fn setattr(&self, ino: u64, set: SetAttr, caller: Caller) -> FsResult<Attr> {
        let inode = self.inode(ino)?;
        let file = match set.fh {
            Some(fh) => self.files.get(fh).ok(),
            None => None,
        };
        let pfd = self.table.path_fd(&inode)?;
        let proc = sys::proc_path(pfd.as_fd());
        let guard = self.creds.act_as(caller)?;
        if let Some(mode) = set.mode {
            sys::chmod(&proc, mode & 0o7777)?;
        }
        if set.uid.is_some() || set.gid.is_some() {
            sys::fchown(pfd.as_fd(), set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX))?;
        }
        let _held = set.size.map(|_| self.writes.lock_all(ino));
        if let Some(size) = set.size {
            let old = inode.size();
            match &file {
                Some(f) => sys::ftruncate(f.fd.as_fd(), size)?,
                None => sys::truncate(&proc, size)?,
            }
            self.data.resized(ino, old, size);
        }
        if set.atime.is_some() || set.mtime.is_some() {
            sys::utimens(&proc, &[timespec(set.atime), timespec(set.mtime)])?;
        }
        drop(guard);
        let before = self.source_seq();
        let st = sys::fstat(pfd.as_fd())?;
        self.store_attr(&inode, st, before);
        // The cached pages stayed exact (a size change went through
        // `resized`), so the new ctime/mtime/size are rcufs's own doing.
        self.note_own_change(&inode, &st);
        Ok(Attr::from_stat(ino, &st))
    }

    /// Records that the file's data changed through the mount (the cache
    /// was kept exact), so the next open does not mistake it for a change
    /// in the source.
    fn note_own_change(&self, inode: &Inode, st: &libc::stat) {
        let mut stamp = inode.data_stamp.lock();
        if stamp.is_some() {
            *stamp = Some(Stamp::of(st));
        }
    }

    /// READLINK.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let inode = self.inode(ino)?;
        let fd = self.table.path_fd(&inode)?;
        sys::readlink_fd(fd.as_fd())
    }

    /// After a change of `parent`'s entries through the mount.
    /// The cached names under it were kept exact, so the new mtime is not
    /// a change made in the source. (A change made in the source at the same
    /// moment is then noticed only at the directory's next change, a drop or
    /// an eviction.)
    fn touched_dir(&self, parent: &Inode) {
        parent.set_listing(None);
        if let Ok(st) = self.refresh(parent) {
            parent.advance_names_stamp(Stamp::of(&st));
        }
    }

    /// After `name` was made under `parent` in the source through the
    /// mount: caches it and answers its entry.
    fn made(&self, parent: &Arc<Inode>, name: &[u8]) -> FsResult<Entry> {
        // Counted, and whatever was cached for the name forgotten, before
        // the lookup below reads the new name: a lookup that read the source
        // before the change cached nothing after this, and what it cached
        // before is gone (the lookup below may not cache, if yet another
        // change comes meanwhile).
        parent.change_names(|| self.names.remove(parent, name));
        self.touched_dir(parent);
        match self.lookup_source_kept(parent, name, true)? {
            (Some(inode), kept) => Ok(Entry {
                lend: kept,
                ..self.entry_of(&inode)
            }),
            (None, _) => Err(FsError::NOENT),
        }
    }

    /// MKNOD, as the caller (who owns the node; the source applies the
    /// directory's setgid and default ACL and the caller's umask).
    pub fn mknod(&self, parent: u64, name: &[u8], mode: u32, rdev: u64, caller: Caller) -> FsResult<Entry> {
        let parent = self.dir(parent)?;
        name_ok(name)?;
        let pfd = self.table.path_fd(&parent)?;
        let cname = cstr(name)?;
        {
            let g = self.creds.act_as(caller)?;
            sys::mknodat(pfd.as_fd(), &cname, g.mode(mode), rdev)?;
        }
        self.made(&parent, name)
    }

    /// MKDIR, as the caller.
    pub fn mkdir(&self, parent: u64, name: &[u8], mode: u32, caller: Caller) -> FsResult<Entry> {
        let parent = self.dir(parent)?;
        name_ok(name)?;
        let pfd = self.table.path_fd(&parent)?;
        let cname = cstr(name)?;
        {
            let g = self.creds.act_as(caller)?;
            sys::mkdirat(pfd.as_fd(), &cname, g.mode(mode))?;
        }
        self.made(&parent, name)
    }

    /// SYMLINK, as the caller.
    pub fn symlink(&self, parent: u64, name: &[u8], target: &[u8], caller: Caller) -> FsResult<Entry> {
        let parent = self.dir(parent)?;
        name_ok(name)?;
        let pfd = self.table.path_fd(&parent)?;
        let cname = cstr(name)?;
        let target = cstr(target)?;
        {
            let _g = self.creds.act_as(caller)?;
            sys::symlinkat(&target, pfd.as_fd(), &cname)?;
        }
        self.made(&parent, name)
    }

    /// LINK, as the caller.
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &[u8], caller: Caller) -> FsResult<Entry> {
        let inode = self.inode(ino)?;
        let parent = self.dir(new_parent)?;
        name_ok(new_name)?;
        if self.across_lanes(inode.key.0, parent.key.0) {
            // Into or out of a filesystem that may not answer, as the
            // source would answer, without a look into it (`fs/lanes.rs`).
            return Err(FsError::new(libc::EXDEV));
        }
        let fd = self.table.path_fd(&inode)?;
        let pfd = self.table.path_fd(&parent)?;
        let cname = cstr(new_name)?;
        {
            let _g = self.creds.act_as(caller)?;
            sys::link_fd(fd.as_fd(), pfd.as_fd(), &cname)?;
        }
        let entry = self.made(&parent, new_name)?;
        let st = inode.attr().st;
        self.note_own_change(&inode, &st);
        Ok(entry)
    }

    /// After a name went away: refresh the inode it named, if known.
    fn unnamed(&self, key: Option<crate::inode::Key>) {
        if let Some(inode) = key.and_then(|k| self.table.find(k)) {
            match self.refresh(&inode) {
                // Another name is left; its ctime moved through the mount.
                Ok(st) => self.note_own_change(&inode, &st),
                Err(_) => inode.attr.lock().st.st_nlink = 0,
            }
        }
    }

    fn remove_entry(&self, parent: u64, name: &[u8], flags: i32, caller: Caller) -> FsResult<()> {
        let parent = self.dir(parent)?;
        let pfd = self.table.path_fd(&parent)?;
        let cname = cstr(name)?;
        // Not for the mount point of a filesystem that may not answer
        // (`fs/lanes.rs`): the `stat` would look into it. The removal
        // itself does not, and the source answers it as it would natively:
        // `EBUSY`, after its own checks (`EROFS`, `EPERM`, `EACCES`).
        let key = if self.mount_point_now(&parent, name) {
            None
        } else {
            sys::fstatat(pfd.as_fd(), &cname, libc::AT_SYMLINK_NOFOLLOW)
                .ok()
                .map(|st| key_of(&st))
        };
        let result = {
            let _g = self.creds.act_as(caller)?;
            sys::unlinkat(pfd.as_fd(), &cname, flags)
        };
        // Whatever the outcome, the cached name may be wrong now: forget it.
        parent.change_names(|| self.names.remove(&parent, name));
        result?;
        self.touched_dir(&parent);
        self.unnamed(key);
        Ok(())
    }

    /// UNLINK, as the caller (the source applies the sticky bit).
    pub fn unlink(&self, parent: u64, name: &[u8], caller: Caller) -> FsResult<()> {
        self.remove_entry(parent, name, 0, caller)
    }

    /// RMDIR, as the caller.
    pub fn rmdir(&self, parent: u64, name: &[u8], caller: Caller) -> FsResult<()> {
        self.remove_entry(parent, name, libc::AT_REMOVEDIR, caller)
    }

    /// RENAME (flags as renameat2: `RENAME_NOREPLACE`, `RENAME_EXCHANGE`,
    /// `RENAME_WHITEOUT`), as the caller.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
        caller: Caller,
    ) -> FsResult<()> {
        let op = self.dir(parent)?;
        let np = self.dir(new_parent)?;
        name_ok(new_name)?;
        // As the source would answer, without a look into a filesystem
        // that may not answer (`fs/lanes.rs`).
        if self.across_lanes(op.key.0, np.key.0) {
            return Err(FsError::new(libc::EXDEV));
        }
        let ofd = self.table.path_fd(&op)?;
        let nfd = self.table.path_fd(&np)?;
        let (oname, nname) = (cstr(name)?, cstr(new_name)?);
        // A mount point's name on either side: no `stat` of the new name,
        // and the source answers the rename `EBUSY` after its own checks,
        // as for an UNLINK (`remove_entry`).
        let replaced = if self.mount_point_now(&op, name) || self.mount_point_now(&np, new_name) {
            None
        } else {
            sys::fstatat(nfd.as_fd(), &nname, libc::AT_SYMLINK_NOFOLLOW)
                .ok()
                .map(|st| key_of(&st))
        };
        let reads = (op.reading_names(), np.reading_names());
        // Until the moved inode's link is updated below, a reopen by name
        // that fails may only have read the old link (`inode.rs`).
        let renaming = self.table.renaming();
        let result = {
            let _g = self.creds.act_as(caller)?;
            sys::renameat2(ofd.as_fd(), &oname, nfd.as_fd(), &nname, flags)
        };
        crate::inode::change_names_of_two((&op, reads.0), (&np, reads.1), |alone| {
            // Another change under either directory since the rename began
            // may have updated the cache out of order: then forget both names.
            if !alone || result.is_err() || flags & libc::RENAME_EXCHANGE != 0 || flags & libc::RENAME_WHITEOUT != 0 {
                self.names.remove(&op, name);
                self.names.remove(&np, new_name);
            } else {
                self.names.rename(&op, name, &np, new_name);
            }
        });
        result?;
        self.touched_dir(&op);
        if op.ino != np.ino {
            self.touched_dir(&np);
        }
        let before = self.source_seq();
        // The moved object's link follows it; with RENAME_EXCHANGE the
        // object that was under the new name moved to the old one, and
        // its link follows it too (a reopen by name, a drop's walk up the
        // links and its entry invalidations all read it).
        let moved = if flags & libc::RENAME_EXCHANGE != 0 { 2 } else { 1 };
        let places = [(&nfd, &nname, &np, new_name), (&ofd, &oname, &op, name)];
        for (fd, cname, dir, bytes) in places.into_iter().take(moved) {
            if let Ok(st) = sys::fstatat(fd.as_fd(), cname, libc::AT_SYMLINK_NOFOLLOW)
                && let Some(inode) = self.table.find(key_of(&st))
            {
                self.store_attr(&inode, st, before);
                self.note_own_change(&inode, &st);
                self.table.moved(&inode, dir.ino, bytes);
            }
        }
        drop(renaming);
        if flags & libc::RENAME_EXCHANGE == 0 {
            self.unnamed(replaced);
        }
        Ok(())
    }

    /// OPEN. Handles of one inode and [`ShareKey`] share one descriptor; a
    /// reuse re-checks the caller's access first (see `open_files.rs`).
    pub fn open(&self, ino: u64, flags: i32, caller: Caller) -> FsResult<Opened> {
        let inode = self.inode(ino)?;
        let fd = self.shared.get(
            ShareKey::new(ino, flags),
            open_files::reusable(flags),
            |fd| {
                // The access check the open would have made, as the caller.
                let _as = self.creds.act_as(caller)?;
                open_files::recheck_access(fd, flags)
            },
            || {
                let fd = self.open_inode(&inode, flags, caller)?;
                self.gate.admit_number(fd.as_fd(), caller.uid)?;
                Ok(fd)
            },
        )?;
        // The caller's share counts every descriptor it has a handle on,
        // made by its open or another's (`open_files.rs`).
        fd.hold(&self.gate, caller.uid, false)?;
        self.opened(inode, fd, flags, caller.uid)
    }

    /// Opens `inode` for the caller. A root caller opens by handle; anyone
    /// else reopens the inode's `O_PATH` descriptor (taken as root:
    /// `open_by_handle_at` needs `CAP_DAC_READ_SEARCH`, which acting as the
    /// caller gives up) through `/proc/self/fd`, as the caller.
    fn open_inode(&self, inode: &Inode, flags: i32, caller: Caller) -> FsResult<OwnedFd> {
        let flags = source_open_flags(inode.kind, flags);
        if !self.creds.takes_uid(caller) {
            return widened(flags, |f| self.table.open(inode, f));
        }
        let pfd = self.table.path_fd(inode)?;
        let _g = self.creds.act_as(caller)?;
        widened(flags, |f| sys::reopen(pfd.as_fd(), f))
    }

    /// Answers an OPEN or CREATE whose descriptor `fd` is held for `uid`
    /// ([`SharedFd::hold`]): the handle lets go of it when dropped, on
    /// every path out of here.
    fn opened(&self, inode: Arc<Inode>, fd: Arc<SharedFd>, flags: i32, uid: u32) -> FsResult<Opened> {
        let file = OpenFile {
            inode,
            fd,
            append: flags & libc::O_APPEND != 0,
            uid,
        };
        let inode = file.inode.clone();
        let before = self.source_seq();
        let st = sys::fstat(file.fd.as_fd())?;
        let had = Stamp::of(&inode.attr().st);
        let now = Stamp::of(&st);
        let lending = self.lends_attrs();
        let attr_inval = (lending && had != now).then(|| inode.pending_attr_inval());
        self.store_attr(&inode, st, before);
        let attrs_changed = attr_inval.is_some() || (lending && inode.attr_inval_pending());
        if self.cfg.kernel_cache && *inode.data_stamp.lock() != Some(now) {
            // A change the watcher may not have applied yet: let it, so that
            // its kernel invalidations go before this open is answered
            // (`fs/watched.rs`, "Catching up before answering").
            self.catch_up_with_source();
        }
        let same = {
            let mut stamp = inode.data_stamp.lock();
            let same = *stamp == Some(now);
            if !same {
                // Changed in the source since the cache saw it, or no stamp
                // vouches for the cached pages (a drop cleared it, and reads
                // through a descriptor that stayed open may have filled pages
                // since, from a file that may have changed again after them):
                // either way they cannot be trusted.
                self.data.drop_inode(inode.ino);
                if stamp.is_some() {
                    self.stale_opens.fetch_add(1, Ordering::Relaxed);
                }
            }
            *stamp = Some(now);
            same
        };
        let no_flush = !flush::needs_flush(flags);
        let fh = self.files.insert(file);
        Ok(Opened {
            fh,
            direct_io: !self.cfg.kernel_cache,
            keep_cache: self.cfg.kernel_cache && same,
            no_flush,
            changed: !same,
            attrs_changed,
            attr_inval,
        })
    }

    /// READ: through the page cache; the answer pins the cached pages it
    /// returns (see `pinned.rs`).
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<PinnedRead> {
        let file = self.files.get(fh)?;
        self.data
            .read(file.inode.ino, file.fd.as_fd(), offset, size, file.inode.size())
    }

    /// WRITE: to the source first, then to the cached pages.
    ///
    /// The source write and the cache update are two steps, so two
    /// overlapping writers could apply them in opposite orders; the pages
    /// the write touches are held in the range locks across both
    /// (`range_lock.rs`), so the kernel may send writes to one file in
    /// parallel (`FOPEN_PARALLEL_DIRECT_WRITES`, see `fuse.rs`). The cache
    /// update is write-through (`Data::wrote`): pages the write covers are
    /// cached with its bytes, so reading them back is a hit.
    ///
    /// A write marked `kill_suidgid` (the kernel's `FUSE_WRITE_KILL_SUIDGID`:
    /// the writer lacks `CAP_FSETID`, by `capable`, in the initial user
    /// namespace) runs as that writer when the file has bits the write may
    /// clear (checked with `fstat` just before), so that the source clears
    /// setuid and setgid as it would for that writer. A writer holding
    /// `CAP_FSETID`, whoever it is, keeps them, as it would locally: its
    /// write is not marked and runs as below (so does a write-back of a
    /// shared mapping's pages, which the kernel sends without the writer's
    /// identity and which locally clears nothing either). Where the kernel
    /// does not mark every such write (no `FUSE_HANDLE_KILLPRIV_V2`: a
    /// buffered write is then unmarked whoever writes), any write by
    /// another user than root runs as the writer too. Otherwise a write by
    /// another user than root runs with that user's filesystem uid only
    /// ([`Creds::act_as_owner_of_write`]: the blocks a filesystem reserves
    /// for root are decided by it) when the filesystem is close to them
    /// (`space.rs`), and as the daemon otherwise.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8], caller: Caller, kill_suidgid: bool) -> FsResult<u32> {
        let file = self.files.get(fh)?;
        let inode = &file.inode;
        let pages = self
            .data
            .write_pages(offset, data.len() as u64, inode.size(), file.append);
        let _held = self.writes.lock(inode.ino, pages.first, pages.last);
        let old_size = inode.size();
        let seq = self.source_seq();
        let marked = self.kernel_marks_kills.load(Ordering::Relaxed);
        let as_writer = (kill_suidgid || (!marked && self.creds.takes_uid(caller)))
            && may_lose_suidgid(sys::fstat(file.fd.as_fd())?.st_mode);
        let n = if as_writer {
            let _g = self.creds.act_as_writer(caller, kill_suidgid)?;
            sys::pwrite(file.fd.as_fd(), data, offset)?
        } else if self.creds.takes_uid(caller) && self.space.low(inode.key.0, file.fd.as_fd()) {
            let _g = self.creds.act_as_owner_of_write(caller, marked && !kill_suidgid)?;
            sys::pwrite(file.fd.as_fd(), data, offset)?
        } else {
            sys::pwrite(file.fd.as_fd(), data, offset)?
        };
        crate::fault::cache_jitter();
        let before = self.source_seq();
        let st = sys::fstat(file.fd.as_fd())?;
        let new_size = st.st_size.max(0) as u64;
        if file.append {
            // O_APPEND wrote at the end of file, wherever that was.
            let start = new_size.saturating_sub(n as u64).min(offset).min(old_size);
            self.data.invalidate_from(inode.ino, start);
        } else {
            if offset > old_size {
                // The bytes between the old end and `offset` became zeros.
                self.data.invalidate_from(inode.ino, old_size);
            }
            self.data
                .wrote(inode.ino, offset, &data[..n], new_size, pages.last == u64::MAX);
            if self.source_changed_since(seq) {
                // A change made in the source was applied meanwhile: what was
                // cached from this write may be older than the source.
                self.data.invalidate_range(inode.ino, offset, n as u64);
            }
        }
        self.store_attr(inode, st, before);
        self.note_own_change(inode, &st);
        Ok(n as u32)
    }

    /// Says whether INIT granted `FUSE_HANDLE_KILLPRIV_V2`, so that the
    /// kernel marks every write by a writer without `CAP_FSETID` (before
    /// any request; see [`Fs::write`]).
    pub fn set_kernel_marks_kills(&self, granted: bool) {
        self.kernel_marks_kills.store(granted, Ordering::Relaxed);
    }

    /// RELEASE.
    pub fn release(&self, fh: u64) -> FsResult<()> {
        self.files.remove(fh).map(drop).ok_or(FsError::BADF)
    }

    /// FSYNC.
    pub fn fsync(&self, fh: u64, datasync: bool) -> FsResult<()> {
        let file = self.files.get(fh)?;
        sys::fsync(file.fd.as_fd(), datasync)
    }

    /// STATFS.
    pub fn statfs(&self, ino: u64) -> FsResult<Statfs> {
        let inode = self.inode(ino).unwrap_or_else(|_| self.root.clone());
        let fd = self.table.path_fd(&inode)?;
        let s = sys::fstatvfs(fd.as_fd())?;
        Ok(Statfs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: s.f_namemax as u32,
            frsize: s.f_frsize as u32,
        })
    }

    /// ACCESS, as the caller (only sent without `default_permissions`).
    pub fn access(&self, ino: u64, mask: i32, caller: Caller) -> FsResult<()> {
        let inode = self.inode(ino)?;
        let fd = self.table.path_fd(&inode)?;
        let _g = self.creds.act_as(caller)?;
        sys::access(&sys::proc_path(fd.as_fd()), mask)
    }

    /// CREATE, as the caller. The file is created with `O_EXCL`; if the
    /// name exists (it appeared in the source after the kernel's lookup) and
    /// the caller did not ask for `O_EXCL`, an existing regular file is
    /// opened as the caller (the source checks the access), and anything
    /// else is answered `ESTALE` after the cached name is forgotten: the
    /// kernel then looks the name up again and opens what it finds itself
    /// (a FIFO, a device, a directory, a symlink), as for a local file,
    /// without ever blocking a worker here.
    pub fn create(&self, parent: u64, name: &[u8], mode: u32, flags: i32, caller: Caller) -> FsResult<(Entry, Opened)> {
        let parent = self.dir(parent)?;
        name_ok(name)?;
        let pfd = self.table.path_fd(&parent)?;
        let cname = cstr(name)?;
        // The file is made by the open, so the reserve is checked before it.
        self.gate.precheck(pfd.as_fd(), caller.uid)?;
        let names_read = parent.reading_names();
        let renames = self.table.watch_renames();
        let fd = self.create_fd(&parent, &pfd, name, &cname, mode, flags, caller)?;
        self.touched_dir(&parent);
        let interning = self.interning();
        let before = self.source_seq();
        let interned = sys::fstat(fd.as_fd()).and_then(|st| {
            let inode = self.table.intern(NewInode {
                parent_ino: parent.ino,
                parent: pfd.as_fd(),
                name: &cname,
                st,
                renames,
            })?;
            Ok((st, inode))
        });
        let (st, inode) = match interned {
            Ok(v) => v,
            Err(e) => {
                // The file was made: the change is counted all the same.
                parent.change_names(|| self.names.remove(&parent, name));
                return Err(e);
            }
        };
        self.table.remember(&inode, 1);
        parent.change_names_since(names_read, |alone| {
            if alone {
                self.names.insert_made(&parent, name, &inode);
            } else {
                // Another change under the directory since the create began
                // (an unlink of the new name, say) may have been applied
                // first: the name is looked up again instead.
                self.names.remove(&parent, name);
            }
        });
        let lost = self.lost_event_for(&inode);
        let overlapped = lost || self.source_changed_since(before);
        if overlapped {
            self.names.remove(&parent, name);
            inode.expire_attr();
        }
        drop(interning);
        // A new (or truncated) file: whatever the cache held is stale.
        self.data.drop_inode(inode.ino);
        *inode.data_stamp.lock() = Some(Stamp::of(&st));
        let entry = Entry {
            lend: !overlapped,
            ..self.entry_of(&inode)
        };
        // The new descriptor joins (or becomes) the inode's shared one.
        let fd = self
            .shared
            .get(ShareKey::new(inode.ino, flags), false, |_| Ok(()), || Ok(fd))?;
        // Made: held whatever the share (the precheck refused the opens
        // past it, but not ones racing with this).
        fd.hold(&self.gate, caller.uid, true)?;
        let opened = self.opened(inode, fd, flags, caller.uid)?;
        Ok((entry, opened))
    }

    /// The descriptor for CREATE (see [`Fs::create`]).
    #[allow(clippy::too_many_arguments)]
    fn create_fd(
        &self,
        parent: &Arc<Inode>,
        pfd: &OwnedFd,
        name: &[u8],
        cname: &CStr,
        mode: u32,
        flags: i32,
        caller: Caller,
    ) -> FsResult<OwnedFd> {
        // A name that keeps appearing and vanishing: give up after a few rounds.
        for _ in 0..4 {
            let made = {
                let g = self.creds.act_as(caller)?;
                widened(create_flags(flags), |f| {
                    sys::openat(pfd.as_fd(), cname, f, g.mode(mode))
                })
            };
            match made {
                Err(e) if e.errno() == libc::EEXIST => {
                    // The kernel was told the name did not exist: whatever
                    // happens now, the cached name must not say so again.
                    self.names.remove(parent, name);
                    if flags & libc::O_EXCL != 0 {
                        return Err(e);
                    }
                }
                other => return other,
            }
            // The name exists. An O_PATH descriptor opens nothing (as root:
            // the kernel has checked the caller's search access).
            let existing = match sys::openat(pfd.as_fd(), cname, libc::O_PATH | libc::O_NOFOLLOW, 0) {
                Ok(fd) => fd,
                Err(e) if e.errno() == libc::ENOENT => continue,
                Err(e) => return Err(e),
            };
            let st = sys::fstat(existing.as_fd())?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(FsError::STALE);
            }
            let flags = source_open_flags(libc::S_IFREG, flags);
            let _g = self.creds.act_as(caller)?;
            return widened(flags, |f| sys::reopen(existing.as_fd(), f));
        }
        self.names.remove(parent, name);
        Err(FsError::STALE)
    }

    /// FALLOCATE, as the caller.
    pub fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32, caller: Caller) -> FsResult<()> {
        let file = self.files.get(fh)?;
        let _held = self.writes.lock_all(file.inode.ino);
        {
            // As the caller, with setuid and setgid kept or cleared by its
            // CAP_FSETID (the kernel sends no kill flag with FALLOCATE).
            let _g = self.creds.act_as_modifier(caller)?;
            sys::fallocate(file.fd.as_fd(), mode, offset, len)?;
        }
        let old = file.inode.size();
        self.data.invalidate_range(file.inode.ino, offset, len);
        self.data.invalidate_from(file.inode.ino, old.min(offset));
        let before = self.source_seq();
        let st = sys::fstat(file.fd.as_fd())?;
        self.store_attr(&file.inode, st, before);
        self.note_own_change(&file.inode, &st);
        Ok(())
    }

    /// LSEEK (`SEEK_DATA`/`SEEK_HOLE` answered by the source).
    pub fn lseek(&self, fh: u64, offset: i64, whence: i32) -> FsResult<i64> {
        let file = self.files.get(fh)?;
        sys::lseek(file.fd.as_fd(), offset, whence)
    }

    /// COPY_FILE_RANGE (the write into the destination as the caller),
    /// done by the source (which may share the blocks); then the copy is
    /// cached as a write of the same bytes would be (`Data::copied`: the
    /// destination's pages from the source range's, read through the
    /// cache), so a `cp` leaves both files cached as the kernel's page cache
    /// does (seed 001). The destination is held whole in the range locks,
    /// and the source range too unless it is the same file.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u32,
        caller: Caller,
    ) -> FsResult<u32> {
        let src = self.files.get(fh_in)?;
        let dst = self.files.get(fh_out)?;
        let len = len.min(u32::MAX as u64 & !0xfff);
        // Two inodes' ranges are taken in inode order, so that copies in
        // opposite directions cannot wait for each other.
        let ps = self.data.page_size();
        let (lo, hi) = (src.inode.ino.min(dst.inode.ino), src.inode.ino.max(dst.inode.ino));
        let range = |ino: u64| {
            if ino == dst.inode.ino {
                self.writes.lock_all(ino)
            } else {
                self.writes
                    .lock(ino, off_in / ps, off_in.saturating_add(len.max(1) - 1) / ps)
            }
        };
        let _held = range(lo);
        let _held_other = (hi != lo).then(|| range(hi));
        let seq = self.source_seq();
        let n = {
            // A write into `dst`: as the caller, with setuid and setgid
            // kept or cleared by its CAP_FSETID (no kill flag is sent).
            let _g = self.creds.act_as_modifier(caller)?;
            sys::copy_file_range(src.fd.as_fd(), off_in, dst.fd.as_fd(), off_out, len, flags)?
        };
        let old = dst.inode.size();
        self.data.invalidate_range(dst.inode.ino, off_out, n as u64);
        if off_out > old {
            self.data.invalidate_from(dst.inode.ino, old);
        }
        let before = self.source_seq();
        let st = sys::fstat(dst.fd.as_fd())?;
        let size = st.st_size.max(0) as u64;
        if src.inode.ino != dst.inode.ino && n > 0 {
            let cached = self.data.copied(
                src.inode.ino,
                src.fd.as_fd(),
                off_in,
                dst.inode.ino,
                off_out,
                n as u64,
                size,
                true,
            );
            if cached.is_err() || self.source_changed_since(seq) {
                self.data.invalidate_range(dst.inode.ino, off_out, n as u64);
            }
        }
        self.store_attr(&dst.inode, st, before);
        self.note_own_change(&dst.inode, &st);
        Ok(n as u32)
    }
}

mod drop;
mod fences;
mod flush;
pub mod lanes;
pub mod lease;
pub mod prefetch;
mod stats;
pub mod submounts;
pub mod walk_ahead;
mod warm;
mod xattr;
pub use warm::{WalkOutcome, Warmer};

#[cfg(test)]
mod tests;
