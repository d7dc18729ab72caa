//! Listings and stale names over a slow source: READDIRPLUS answers the
//! names it has no fresh entry for at once, without attributes, and looks
//! them up in the background; a LOOKUP that finds a stale entry refreshes
//! its directory's stale names together.
//!
//! # Why
//! READDIRPLUS answers every entry with its attributes, which over a
//! network or FUSE source costs one source lookup per name not in the name
//! cache. Done before the reply (in parallel, as rcufs first did), the
//! listing waited for them: a `find | xargs stat` of a cold tree then paid,
//! directory after directory, the listing's network round trips *and* its
//! entries' lookups one after the other, where the same walk on the source
//! itself overlaps `find`'s listings with `stat`'s lookups. Measured over
//! sshfs with 0.5 ms added each way, the cold walk of 20,000 files took
//! 1.8x as long as on raw sshfs (BENCHMARKS.md, issue 14). And over a FUSE
//! source the parallel lookups gained nothing: the kernel serialises
//! lookups in one directory of a FUSE filesystem behind a per-directory
//! mutex unless its daemon asked for parallel directory operations (sshfs
//! does not), so the threads only spun on that mutex.
//!
//! # Algorithm
//! Only for a network or FUSE source (`slow_source.rs`).
//! - READDIRPLUS revalidates the directory once per batch (as LOOKUP
//!   would), answers a name with a fresh positive entry as before (through
//!   LOOKUP: attributes and one kernel reference), and every other name
//!   with its inode number and type only (node id 0). The kernel lists such
//!   an entry as READDIR would and sends a LOOKUP when the name is used
//!   (`fuse_direntplus_link`: "zero nodeid ... only means the userspace
//!   filesystem did not want to return attributes/handle for this entry").
//! - Those names go to the [`NameQueue`]; [`BACKGROUND_THREADS`] threads
//!   look them up in the source (`lookup_source` without a kernel
//!   reference: it fills the name cache and the inode table, as a LOOKUP's
//!   miss does), in listing order, skipping names that became fresh
//!   meanwhile. The LOOKUP the kernel sends for a name is then usually a
//!   name-cache hit; if it comes first, it looks the name up itself and the
//!   queued copy is skipped.
//! - A LOOKUP that finds a stale entry ([`Fs::refresh_dir`]) lists its
//!   directory in the source once per interval and looks up all of its
//!   stale cached names together, by up to [`THREADS`] scoped threads.
//!
//! # Invariants
//! - Nothing is answered from the background lookups except through
//!   LOOKUP, so what the kernel sees is exactly what LOOKUP gives; a
//!   name answered without attributes has no kernel reference.
//! - The queue is bounded ([`MAX_QUEUED`] names); a name that does not fit
//!   is not queued (counted: `source.names_first_unqueued`) and its LOOKUP
//!   looks it up when it comes.
//! - A drop empties the queue of the names under the directories it
//!   drops (all of it, for the root), so names listed before a drop are
//!   not put back in the cache by the background threads after it. (A lookup
//!   already under way finishes, as a concurrent LOOKUP would.)
//! - The background lookups change nothing in the source and run as the
//!   daemon, as LOOKUP does; their cache checks count as name-cache hits
//!   and misses in the stats.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

use super::Fs;
use crate::inode::Inode;
use crate::names::Hit;
use crate::sys::RawDirent;

/// Most source lookups one refresh of stale names has in flight.
pub const THREADS: usize = 8;

/// Threads that look up the names READDIRPLUS answered without attributes
/// (started by the mount for a slow source).
pub const BACKGROUND_THREADS: usize = 2;

/// Most names waiting in the [`NameQueue`].
pub const MAX_QUEUED: usize = 65_536;

/// Names under directories waiting for background threads: those
/// READDIRPLUS answered without attributes (to be looked up), or the
/// subdirectories a walk will reach (to be listed: `fs/walk_ahead.rs`).
#[derive(Debug)]
pub struct NameQueue {
    state: Mutex<QueueState>,
    cv: Condvar,
    /// The stats' names of the four counters below.
    keys: [&'static str; 4],
    /// Names offered.
    offered: AtomicU64,
    /// Names the background threads worked on.
    pub(super) done: AtomicU64,
    /// Names not queued because the queue was full.
    unqueued: AtomicU64,
}

#[derive(Debug, Default)]
struct QueueState {
    names: VecDeque<(Arc<Inode>, Vec<u8>)>,
    closed: bool,
}

impl NameQueue {
    /// An empty queue whose counters the stats show as `keys`: offered,
    /// done, not queued, waiting.
    pub fn new(keys: [&'static str; 4]) -> Self {
        Self {
            state: Mutex::default(),
            cv: Condvar::new(),
            keys,
            offered: AtomicU64::new(0),
            done: AtomicU64::new(0),
            unqueued: AtomicU64::new(0),
        }
    }

    /// Queues `names` under `dir`, as many as fit.
    pub(super) fn push(&self, dir: &Arc<Inode>, names: Vec<Vec<u8>>) {
        let n = names.len() as u64;
        self.offered.fetch_add(n, Ordering::Relaxed);
        let mut s = self.state.lock();
        if s.closed {
            return;
        }
        let room = MAX_QUEUED.saturating_sub(s.names.len());
        let queued = names.len().min(room);
        s.names
            .extend(names.into_iter().take(queued).map(|name| (dir.clone(), name)));
        drop(s);
        self.unqueued.fetch_add(n - queued as u64, Ordering::Relaxed);
        if queued > 0 {
            self.cv.notify_all();
        }
    }

    /// The next name to look up, waiting for one; `None` once closed.
    pub(super) fn pop(&self) -> Option<(Arc<Inode>, Vec<u8>)> {
        let mut s = self.state.lock();
        loop {
            if s.closed {
                return None;
            }
            if let Some(job) = s.names.pop_front() {
                return Some(job);
            }
            self.cv.wait(&mut s);
        }
    }

    /// Forgets the queued names under the directories `dirs` (node ids: a
    /// drop of a directory other than the root).
    pub fn clear_under(&self, dirs: &std::collections::HashSet<u64>) {
        if dirs.is_empty() {
            return;
        }
        self.state.lock().names.retain(|(dir, _)| !dirs.contains(&dir.ino));
    }

    /// Forgets every queued name (a drop of the root).
    pub fn clear(&self) {
        self.state.lock().names.clear();
    }

    /// Ends the background threads' loops (the mount is gone).
    pub fn close(&self) {
        let mut s = self.state.lock();
        s.closed = true;
        s.names.clear();
        drop(s);
        self.cv.notify_all();
    }

    /// Names waiting.
    pub fn len(&self) -> usize {
        self.state.lock().names.len()
    }

    /// Whether no name is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters, in the stats' `source` section.
    pub fn stats(&self) -> [(&'static str, u64); 4] {
        [
            (self.keys[0], self.offered.load(Ordering::Relaxed)),
            (self.keys[1], self.done.load(Ordering::Relaxed)),
            (self.keys[2], self.unqueued.load(Ordering::Relaxed)),
            (self.keys[3], self.len() as u64),
        ]
    }
}

impl Fs {
    /// Whether READDIRPLUS of `dir` answers the names it has no fresh entry
    /// for without attributes (a slow source; see the module docs). Checks
    /// the directory's stamp first, as LOOKUP would.
    pub(super) fn answers_names_first(&self, dir: &Arc<Inode>) -> bool {
        if self.cfg.source_kind != "network" {
            return false;
        }
        self.revalidate_dir(dir);
        true
    }

    /// `name`'s inode under `dir` if its positive entry is usable (LOOKUP
    /// would answer it from the name cache).
    pub(super) fn fresh_name(&self, dir: &Arc<Inode>, name: &[u8]) -> Option<Arc<Inode>> {
        match self.names.lookup(dir, name) {
            Hit::Positive(inode) if self.usable(&inode) => Some(inode),
            _ => None,
        }
    }

    /// Queues names under `dir` for the background lookups (those
    /// READDIRPLUS answered without attributes, or a listing read ahead).
    pub(super) fn look_up_later(&self, dir: &Arc<Inode>, names: Vec<Vec<u8>>) {
        if !names.is_empty() {
            self.unlisted.push(dir, names);
        }
    }

    /// The queue of names answered without attributes.
    pub fn name_queue(&self) -> &NameQueue {
        &self.unlisted
    }

    /// A background thread: looks up queued names until the queue closes.
    pub fn name_worker(&self) {
        while let Some((dir, name)) = self.unlisted.pop() {
            if self.fresh_name(&dir, &name).is_some() {
                continue;
            }
            // A failure here is LOOKUP's to report when it asks.
            let _ = self.lookup_source(&dir, &name, false);
            self.unlisted.done.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Looks up, in parallel, the names of `batch` under `dir` whose cached
    /// entry is stale (see the module docs). Returns how many were looked
    /// up.
    fn refresh_names(&self, dir: &Arc<Inode>, batch: &[RawDirent]) -> usize {
        self.revalidate_dir(dir);
        let wanted: Vec<&[u8]> = batch
            .iter()
            .map(|e| e.name.as_slice())
            .filter(|n| *n != b"." && *n != b"..")
            .filter(|n| match self.names.lookup(dir, n) {
                // Not a mount point (its inode on another filesystem): this
                // LOOKUP waits for the refresh, and a filesystem mounted
                // there that stopped answering would hold it, for a name
                // it did not ask about.
                Hit::Positive(inode) => !self.usable(&inode) && inode.key.0 == dir.key.0,
                Hit::Negative | Hit::Miss => false,
            })
            .collect();
        if wanted.len() < 2 {
            return 0;
        }
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS.min(wanted.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(name) = wanted.get(i) else { break };
                        // A failure here is LOOKUP's to report when it asks again.
                        let _ = self.lookup_source(dir, name, false);
                    }
                });
            }
        });
        self.prefetched.fetch_add(wanted.len() as u64, Ordering::Relaxed);
        wanted.len()
    }

    /// A LOOKUP found a stale entry under `dir` (a network source): lists
    /// `dir` in the source once per interval and looks up all of its stale
    /// cached names at once ([`Fs::refresh_names`]).
    /// A stat-driven walk after the interval (`git status`, `xargs stat`)
    /// then pays one listing and parallel lookups per directory rather than
    /// one round trip per name, one after the other. Listing the directory
    /// first also lets the source's own client refresh what it caches from
    /// a listing (sshfs keeps the attributes a listing carries; NFS's
    /// READDIRPLUS does the same), so the lookups that follow may not cross
    /// the network at all. Returns whether it refreshed.
    /// A listing kept within the interval (one read ahead of a walk:
    /// `fs/walk_ahead.rs`) serves instead of a new one.
    pub(super) fn refresh_dir(&self, dir: &Arc<Inode>) -> bool {
        if self.cfg.source_kind != "network" || !dir.claim_refresh(self.interval(dir)) {
            return false;
        }
        if let Some(l) = self.listings.servable(dir, self.interval(dir)) {
            self.refreshes.fetch_add(1, Ordering::Relaxed);
            self.refresh_names(dir, &l.entries);
            return true;
        }
        let Ok(fd) = self.table.open(dir, libc::O_RDONLY | libc::O_DIRECTORY) else {
            return false;
        };
        match self.read_listing(std::os::fd::AsFd::as_fd(&fd), dir) {
            Ok(crate::listing::Read::Whole(l)) => {
                self.refreshes.fetch_add(1, Ordering::Relaxed);
                self.refresh_names(dir, &l.entries);
                true
            }
            _ => false,
        }
    }
}
