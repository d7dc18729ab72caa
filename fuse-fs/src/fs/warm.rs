//! The daemon side of warming: `setfattr -n user.rcufs.warm -v MODE DIR`
//! asks the filesystem to walk DIR's subtree in the source itself and fill
//! the dentry cache and (modes `pages`/`1`, `all`/`3`) the page cache, the
//! inverse of `user.rcufs.drop` (same values).
//!
//! # Design
//! The SETXATTR only queues the request and returns at once: one thread of
//! the mount (`rcufs-warm`, started by `mount.rs`) runs the walks, one at a
//! time, so no FUSE worker waits for a walk. A request while a walk is
//! queued or running gets `EBUSY`. Only root and the mount's owner may ask
//! (`EPERM` otherwise): the walk reads as the daemon.
//!
//! The walk goes breadth-first through the source with `getdents64`,
//! `fstatat` and the inode table's `intern`, inserting each entry into the
//! dcache under the dentry of its parent, which the walk holds (the kernel
//! does not know these directories, so their inodes keep no dentry handle:
//! see `names.rs`). A regular file is then read to its end through the page
//! cache as a READ would, after the open's stamp check (`Fs::opened`), so the
//! next open through the kernel keeps the pages. Budgets: it stops looking
//! up entries when the dentry cache has no room left, and stops reading
//! files once the next file's pages (`size / page + 1`) do not fit in the
//! page budget's free part, so it never evicts what it warmed. The walk
//! skips nothing it can read; an entry that fails is counted and skipped.
//!
//! The walk ends early when the mount ends ([`Warmer::close`], from the
//! adapter's drop). Its counters are the `warm` section of the stats.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::{Caller, Fs};
use crate::error::{FsError, FsResult};
use crate::inode::{Inode, NewInode, Stamp};
use crate::names::DentryHandle;
use crate::protocol::DropMode;
use crate::sys;

/// The queue (at most one walk) and the counters of the daemon's warms.
#[derive(Debug, Default)]
pub struct Warmer {
    state: Mutex<State>,
    cv: Condvar,
    requests: AtomicU64,
    busy_refusals: AtomicU64,
    completed: AtomicU64,
    entries: AtomicU64,
    files: AtomicU64,
    pages: AtomicU64,
    budget_stops: AtomicU64,
    errors: AtomicU64,
    last_elapsed_ns: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    job: Option<(Arc<Inode>, DropMode)>,
    running: bool,
    closed: bool,
}

/// What one walk did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkOutcome {
    /// Entries inserted or found in the dentry cache.
    pub entries: u64,
    /// Files read to their end.
    pub files: u64,
    /// Pages those reads cost.
    pub pages: u64,
    /// Whether the page budget stopped the reading.
    pub budget_reached: bool,
    /// Whether the dentry cache's capacity stopped the lookups.
    pub dentries_full: bool,
    /// Entries that could not be read.
    pub errors: u64,
}

impl Warmer {
    /// Ends the worker's loop and any walk under way (the mount is gone).
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.cv.notify_all();
    }

    fn closed(&self) -> bool {
        self.state.lock().closed
    }

    /// The counters, as the `warm` section of the stats.
    pub fn stats_json(&self) -> serde_json::Value {
        let running = {
            let s = self.state.lock();
            u64::from(s.running || s.job.is_some())
        };
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "requests": n(&self.requests),
            "busy_refusals": n(&self.busy_refusals),
            "completed": n(&self.completed),
            "running": running,
            "entries": n(&self.entries),
            "files": n(&self.files),
            "pages": n(&self.pages),
            "budget_stops": n(&self.budget_stops),
            "errors": n(&self.errors),
            "last_elapsed_ns": n(&self.last_elapsed_ns),
        })
    }
}

impl Fs {
    /// SETXATTR `user.rcufs.warm` on `ino`: queues a walk of its subtree.
    pub(super) fn request_warm(&self, ino: u64, value: &[u8], caller: Caller) -> FsResult<()> {
        let mode = DropMode::from_xattr_value(value).ok_or(FsError::INVAL)?;
        let dir = self.dir(ino)?;
        if caller.uid != 0 && caller.uid != sys::euid() {
            return Err(FsError::PERM);
        }
        let w = &self.warmer;
        let mut s = w.state.lock();
        if s.closed {
            return Err(FsError::new(libc::ESHUTDOWN));
        }
        if s.running || s.job.is_some() {
            w.busy_refusals.fetch_add(1, Ordering::Relaxed);
            return Err(FsError::new(libc::EBUSY));
        }
        s.job = Some((dir, mode));
        w.requests.fetch_add(1, Ordering::Relaxed);
        drop(s);
        w.cv.notify_all();
        Ok(())
    }

    /// The warm thread: runs queued walks until the mount ends.
    pub fn warm_worker(&self) {
        let w = &self.warmer;
        loop {
            let (dir, mode) = {
                let mut s = w.state.lock();
                loop {
                    if s.closed {
                        return;
                    }
                    if let Some(job) = s.job.take() {
                        s.running = true;
                        break job;
                    }
                    w.cv.wait(&mut s);
                }
            };
            let start = Instant::now();
            let out = self.warm_walk(&dir, mode);
            let elapsed = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            w.entries.fetch_add(out.entries, Ordering::Relaxed);
            w.files.fetch_add(out.files, Ordering::Relaxed);
            w.pages.fetch_add(out.pages, Ordering::Relaxed);
            w.errors.fetch_add(out.errors, Ordering::Relaxed);
            w.budget_stops
                .fetch_add(u64::from(out.budget_reached), Ordering::Relaxed);
            w.last_elapsed_ns.store(elapsed, Ordering::Relaxed);
            tracing::info!(
                dir = dir.ino,
                entries = out.entries,
                files = out.files,
                pages = out.pages,
                budget_reached = out.budget_reached,
                dentries_full = out.dentries_full,
                errors = out.errors,
                elapsed_ms = elapsed / 1_000_000,
                "warm done"
            );
            let mut s = w.state.lock();
            s.running = false;
            w.completed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Walks `dir`'s subtree in the source (see the module docs).
    pub fn warm_walk(&self, dir: &Arc<Inode>, mode: DropMode) -> WalkOutcome {
        let mut out = WalkOutcome::default();
        let Some(root_dentry) = self.names.dentry(dir) else {
            // The directory's own dentry was dropped: nothing can be cached
            // under it until the kernel looks it up again.
            return out;
        };
        let pages = mode.drops_pages();
        let mut queue: VecDeque<(Arc<Inode>, DentryHandle)> = VecDeque::from([(dir.clone(), root_dentry)]);
        let mut buf = vec![0u8; 16 * 1024];
        while let Some((d, dd)) = queue.pop_front() {
            if self.warmer.closed() {
                break;
            }
            // A drop (or a rename over it) unhashed this directory's dentry
            // since it was queued: what is inserted under it now could never
            // be found, so its subtree is left alone.
            if !dd.is_hashed() {
                continue;
            }
            let Ok(fd) = self.table.open(&d, libc::O_RDONLY | libc::O_DIRECTORY) else {
                out.errors += 1;
                continue;
            };
            let pfd = match self.table.path_fd(&d) {
                Ok(p) => p,
                Err(_) => {
                    out.errors += 1;
                    continue;
                }
            };
            let mut offset = 0i64;
            'dir: loop {
                let batch = match sys::read_dir_batch(fd.as_fd(), offset, &mut buf) {
                    Ok(b) if !b.is_empty() => b,
                    Ok(_) => break,
                    Err(_) => {
                        out.errors += 1;
                        break;
                    }
                };
                for raw in batch {
                    offset = raw.next_off;
                    if raw.name == b"." || raw.name == b".." {
                        continue;
                    }
                    if self.warmer.closed() {
                        break 'dir;
                    }
                    // A cached, fresh entry is used as it is; anything else is
                    // read from the source and inserted.
                    let found = match self.names.lookup_under(&dd, &raw.name) {
                        Some((cd, inode)) if self.usable(&inode) => Some((cd, inode)),
                        _ => {
                            if self.names.room() == 0 {
                                out.dentries_full = true;
                                break 'dir;
                            }
                            match self.warm_lookup(&d, pfd.as_fd(), &dd, &raw.name) {
                                Ok(v) => v,
                                Err(_) => {
                                    out.errors += 1;
                                    None
                                }
                            }
                        }
                    };
                    let Some((cd, inode)) = found else { continue };
                    out.entries += 1;
                    if inode.is_dir() {
                        queue.push_back((inode, cd));
                    } else if pages && !out.budget_reached && inode.kind == libc::S_IFREG {
                        let size = u64::try_from(inode.attr().st.st_size).unwrap_or(0);
                        let cost = (size / self.data.page_size() + 1) * self.data.page_size();
                        if cost > self.data.room() {
                            out.budget_reached = true;
                            continue;
                        }
                        match self.warm_file(&inode) {
                            Ok(n) => {
                                out.files += 1;
                                out.pages += n;
                            }
                            Err(_) => out.errors += 1,
                        }
                    }
                }
            }
            if out.dentries_full {
                break;
            }
        }
        out
    }

    /// Looks `name` up in the source under `parent` (whose `O_PATH`
    /// descriptor is `pfd` and dentry `pd`), interns it and inserts it under
    /// `pd`; `None` if it is gone or changed while it was read.
    fn warm_lookup(
        &self,
        parent: &Arc<Inode>,
        pfd: std::os::fd::BorrowedFd<'_>,
        pd: &DentryHandle,
        name: &[u8],
    ) -> FsResult<Option<(DentryHandle, Arc<Inode>)>> {
        self.reap();
        let cname = sys::cstr(name)?;
        let _interning = self.interning();
        let before = self.source_seq();
        let names_read = parent.reading_names();
        let renames = self.table.watch_renames();
        let mut read = sys::fstatat(pfd, &cname, libc::AT_SYMLINK_NOFOLLOW);
        if let Ok(st) = &read
            && st.st_dev != parent.key.0
            && self.entered_filesystem(pfd, &cname, st.st_dev)
        {
            // As `Fs::lookup_source` does: a filesystem mounted under the
            // source after the start is marked by the first walk into it.
            read = sys::fstatat(pfd, &cname, libc::AT_SYMLINK_NOFOLLOW);
        }
        match read {
            Ok(st) => {
                if st.st_dev != parent.key.0 {
                    self.may_enter(parent, pfd, &cname, st.st_dev)?;
                }
                let inode = self.table.intern(NewInode {
                    parent_ino: parent.ino,
                    parent: pfd,
                    name: &cname,
                    st,
                    renames,
                })?;
                let cached = parent.cache_if_unchanged(names_read, || self.names.insert_under(pd, name, Some(&inode)));
                // `lost_event_for` before the sequence (see `fs/watched.rs`).
                let lost = self.lost_event_for(&inode);
                match cached {
                    Some(d) if !lost && !self.source_changed_since(before) => Ok(Some((d, inode))),
                    // Changed while read (as in `Fs::lookup_source`): not
                    // cached, and the walk does not go below it.
                    _ => {
                        if cached.is_some() {
                            self.names.remove_under(pd, name);
                        }
                        inode.expire_attr();
                        Ok(None)
                    }
                }
            }
            Err(e) if e.errno() == libc::ENOENT => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the regular file `inode` to its end through the page cache;
    /// returns the pages that cost (`size / page + 1`, as a READ to the end
    /// caches them).
    fn warm_file(&self, inode: &Arc<Inode>) -> FsResult<u64> {
        let fd = self.table.open(inode, libc::O_RDONLY | libc::O_NOFOLLOW)?;
        let before = self.source_seq();
        let st = sys::fstat(fd.as_fd())?;
        self.store_attr(inode, st, before);
        // The open's stamp check (see `Fs::opened`): pages cached under an
        // older stamp cannot be trusted; the new stamp vouches for the pages
        // read now, so the next open through the kernel keeps them.
        {
            let now = Stamp::of(&st);
            let mut stamp = inode.data_stamp.lock();
            if *stamp != Some(now) {
                self.data.drop_inode(inode.ino);
                *stamp = Some(now);
            }
        }
        const CHUNK: u32 = 128 << 10;
        let mut offset = 0u64;
        loop {
            let got = self
                .data
                .read(inode.ino, fd.as_fd(), offset, CHUNK, st.st_size.max(0) as u64)?;
            offset += got.len() as u64;
            if got.len() < CHUNK as usize {
                break;
            }
        }
        Ok(offset / self.data.page_size() + 1)
    }
}
