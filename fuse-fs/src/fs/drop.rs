//! Dropping a directory's caches (the `rcufs drop` ioctl and the
//! `user.rcufs.drop` attribute): seeds 001 ("Fadvise: directory level page
//! cache cleaning support") and 004 ("VFS: Directory level cache
//! cleaning"). The walk follows the children index and the dcache subtree,
//! so its cost follows the subtree, not the table.

use super::*;
use std::collections::HashSet;

use super::fences::{Fences, hold_above};
use crate::names::{SubtreeDrop, Verdict};

/// The depth an orphan's own depth is added to (see [`Fs::drop_dir`]):
/// deeper than anything a walk from a directory finds.
const ORPHAN_DEPTH: u32 = 1 << 16;

impl Fs {
    /// IOCTL: only [`protocol::IOC_DROP`] on a directory; anything else is `ENOTTY`.
    pub fn ioctl(&self, ino: u64, cmd: u32, input: &[u8], caller: Caller) -> FsResult<(Vec<u8>, Vec<Inval>)> {
        if cmd != protocol::IOC_DROP {
            return Err(FsError::NOTTY);
        }
        let args = DropArgs::from_bytes(input).ok_or(FsError::INVAL)?;
        if args.version != protocol::DROP_ARGS_VERSION || args.flags != 0 || args.visited != 0 {
            return Err(FsError::INVAL);
        }
        let mode = DropMode::from_u32(args.mode).ok_or(FsError::INVAL)?;
        self.may_drop(ino, caller)?;
        self.catch_up_with_source();
        let mut out = self.drop_dir(ino, mode, caller)?;
        out.args.version = args.version;
        out.args.mode = args.mode;
        Ok((out.args.to_bytes().to_vec(), out.inval))
    }

    /// Whether `caller` may drop directory `ino`'s caches, checked before a
    /// drop waits for the source watch to catch up (so that a refused drop
    /// costs no wait): root may, and the directory's owner as the source
    /// says now (`fstat`). [`drop_dir`](Self::drop_dir) checks again, with
    /// the attributes caught up.
    pub(super) fn may_drop(&self, ino: u64, caller: Caller) -> FsResult<()> {
        let dir = self.inode(ino)?;
        if !dir.is_dir() {
            return Err(FsError::NOTDIR);
        }
        if caller.uid != 0 && self.refresh(&dir)?.st_uid != caller.uid {
            return Err(FsError::PERM);
        }
        Ok(())
    }

    /// How deep `inode` lies under directory `dir` (1 = a child), following
    /// the recorded links up through the inodes the kernel knows; `None` if
    /// it is not under it. `memo` remembers the answer for every directory
    /// passed on the way, so one drop walks each chain once.
    fn under(&self, dir: u64, inode: &Inode, memo: &mut HashMap<u64, Option<u32>>) -> Option<u32> {
        if inode.ino == dir || inode.ino == ROOT_INO {
            // Nothing is under itself; the root's link names itself.
            return None;
        }
        let mut chain = Vec::new();
        let mut cur = inode.link_parent();
        let base = loop {
            if cur == dir {
                break Some(0);
            }
            if let Some(&known) = memo.get(&cur) {
                break known;
            }
            if cur == ROOT_INO || chain.contains(&cur) || chain.len() > 4096 {
                break None;
            }
            chain.push(cur);
            match self.table.get(cur) {
                Ok(parent) => cur = parent.link_parent(),
                Err(_) => break None,
            }
        };
        // chain[i] lies base + (chain.len() - i) levels under `dir`.
        let n = chain.len() as u32;
        for (i, ino) in chain.iter().enumerate() {
            memo.insert(*ino, base.map(|b| b + n - i as u32));
        }
        base.map(|b| b + n + 1)
    }

    /// Drops the caches under directory `ino` (seeds 001 and 004): the
    /// caller must own the directory or be root; inodes under it that the
    /// caller does not own are skipped and counted, and a directory it does
    /// not own is not entered: what lies below it (another user's private
    /// directory, say) is neither dropped nor counted, so a drop neither
    /// flushes nor reveals how much is cached there; the caller's own
    /// directories above such a directory stay cached with it (see
    /// [`above_fences`](Self::above_fences)). Orphans the caller owns right
    /// under a forgotten directory id are dropped wherever they are (see
    /// below).
    pub fn drop_dir(&self, ino: u64, mode: DropMode, caller: Caller) -> FsResult<DropOutcome> {
        let start = Instant::now();
        let dir = self.inode(ino)?;
        if !dir.is_dir() {
            return Err(FsError::NOTDIR);
        }
        let owner = |inode: &Inode| caller.uid == 0 || inode.attr().st.st_uid == caller.uid;
        if !owner(&dir) {
            return Err(FsError::PERM);
        }
        self.drops.requests.fetch_add(1, Ordering::Relaxed);
        // Listings and queued names: all of them for root's drop of the
        // root; otherwise those of the directories dropped (below), so that
        // one user's drop does not empty what other users' trees keep. A
        // non-root owner of the source's root (a user's own mount) drops the
        // root as any other directory: fenced, not whole.
        let root_caller = caller.uid == 0;
        let whole = dir.ino == ROOT_INO && root_caller;
        if whole {
            self.listings.forget_all();
            self.unlisted.clear();
            self.lists_ahead.clear();
        }
        let mut unlisted_dirs = std::collections::HashSet::new();
        let mut out = DropOutcome::default();
        // Every inode under the directory: the kernel's view (the inodes it
        // knows, by their recorded parent chain) and the dcache's.
        let mut found: HashMap<u64, (Arc<Inode>, u32)> = HashMap::new();
        let mut skipped_inos = std::collections::HashSet::new();
        let mut memo = HashMap::new();
        // The kernel's view, walked down the children index: the cost
        // follows the subtree, not every inode the kernel knows.
        let (known, visited) = self.table.known_under_where(dir.ino, owner);
        for (inode, depth) in known {
            found.insert(inode.ino, (inode, depth));
        }
        // What the walk cannot reach: inodes listed under a directory's
        // forgotten node id (orphans, `inode.rs`), until a lookup of the
        // directory adopts them. Where that directory is, nothing says
        // (it may be under `dir`), so every drop takes the orphans its
        // caller owns: rare, and a drop of too much costs only refills.
        // Their depths put them before everything else, in their own
        // bottom-up order.
        // A non-root caller's drop takes only the orphans right under a
        // forgotten id (whose entries the kernel no longer has): deeper
        // ones may lie under another user's directory.
        let orphans = if root_caller {
            self.table.orphans_known()
        } else {
            self.table
                .orphans_known_where(owner)
                .into_iter()
                .filter(|(_, d)| *d == 1)
                .collect()
        };
        for (inode, depth) in orphans {
            if owner(&inode) {
                found.entry(inode.ino).or_insert((inode, ORPHAN_DEPTH + depth));
            }
        }
        if whole {
            // Everything else the kernel knows.
            for inode in self.table.all_known() {
                found.entry(inode.ino).or_insert((inode, 0));
            }
        }
        // A non-root caller's drop neither flushes nor counts what lies in
        // a directory under `dir` that the caller does not own (a fence);
        // since the dcache drops everything below an entry it unhashes,
        // the caller's own directories above each fence stay cached too.
        // (Only a drop of entries unhashes; a pages drop keeps them all.)
        let fenced = !root_caller && mode.drops_dentries();
        // The dcache's rename count before the first pass (see the second
        // pass's filter). A rename anywhere in the cache moves it, so a
        // first pass that a rename overlapped is made again (up to three
        // times), for the second pass to keep every directory only when a
        // rename begins after the first pass.
        let (
            Fences {
                mut held,
                seen_under,
                mapped,
                mut fences,
            },
            renames_at_start,
        ) = if fenced {
            // The negative entries every pass dropped are counted.
            let mut mapped = SubtreeDrop::default();
            let mut tries = 1;
            loop {
                let before = self.names.renames();
                let mut f = self.above_fences(&dir, &found, owner);
                mapped.dropped += f.mapped.dropped;
                mapped.busy += f.mapped.busy;
                if self.names.renames() == before || tries == 3 {
                    f.mapped = mapped;
                    break (f, before);
                }
                tries += 1;
            }
        } else {
            (Fences::default(), 0)
        };
        let mut found_in_dcache = 0u64;
        // The inodes whose entries the walk will count (dropped, or busy
        // while a handle holds them): the known ones cached before it, and
        // those it is asked about (the filter is not asked below an entry
        // it already unhashed; an inode known under another name, a hard
        // link, is found there).
        let mut counted: std::collections::HashSet<u64> = found
            .values()
            .filter(|(i, _)| i.dentry.lock().live().is_some())
            .map(|(i, _)| i.ino)
            .collect();
        if fenced {
            crate::fault::drop_passes_hook(dir.ino);
        }
        // Whether a rename has begun since the first pass; once it has, the
        // count is not read again.
        let mut renamed = false;
        // Directories whose entries go with one above them, unasked: their
        // listings go too (below).
        let mut gone_dirs = Vec::new();
        let sub = self.names.drop_subtree_visiting(
            &dir,
            |inode, parent| {
                found_in_dcache += 1;
                let ok = owner(inode);
                if !ok {
                    skipped_inos.insert(inode.ino);
                }
                found.entry(inode.ino).or_insert_with(|| (inode.clone(), 0));
                if !ok && inode.is_dir() {
                    // Not entered (see above), as the kernel's view was not.
                    fences.push(inode.ino);
                    return Verdict::Fence;
                }
                if held.contains(&inode.ino) {
                    return Verdict::Keep;
                }
                // A directory the first pass did not see here (moved or made
                // since) may hold a fence it could not keep: kept, and walked.
                // So is every directory once any rename has begun since the
                // first pass: one may have moved a fence under a directory the
                // first pass found none under.
                if fenced && inode.is_dir() {
                    renamed = renamed || self.names.renames() != renames_at_start;
                    if renamed || seen_under.get(&inode.ino) != parent.map(|p| &p.ino) {
                        return Verdict::Keep;
                    }
                }
                if ok && mode.drops_dentries() {
                    counted.insert(inode.ino);
                    Verdict::Drop
                } else {
                    Verdict::Keep
                }
            },
            |inode| {
                if inode.is_dir() {
                    gone_dirs.push(inode.clone());
                }
            },
        );
        if fenced {
            // The kernel's entries above every fence stay too, up the links
            // as they are now (a directory moved since the first pass).
            hold_above(
                &fences,
                dir.ino,
                |ino| found.get(&ino).map(|(i, _)| i.link_parent()),
                &mut held,
            );
        }
        // A non-root drop touches kernel entries only in the directories it
        // entered (`dir`, and the caller's own directories reached through
        // the caller's own): an inode's recorded link may be a hard link's
        // name inside another user's directory.
        let entered: HashSet<u64> = if root_caller {
            HashSet::new()
        } else {
            found
                .values()
                .filter(|(i, depth)| i.is_dir() && owner(i) && *depth < ORPHAN_DEPTH)
                .map(|(i, _)| i.ino)
                .chain(std::iter::once(dir.ino))
                .collect()
        };
        if mode.drops_dentries() {
            // Only now, with their dentries unhashed, the inodes the kernel
            // knows let go of them (the next lookup of the name attaches a
            // fresh one). Released before the unhash, a directory's handle
            // would leave its dentry cached but out of the name layer's
            // reach: changes under it through the mount would not reach the
            // dcache (`Names` does nothing without the parent's dentry), and
            // a lookup in that window would take the stale dentry back.
            let (mut freed, mut were_busy) = (0, 0);
            for (inode, _) in found.values() {
                if !root_caller && !owner(inode) && (inode.is_dir() || !entered.contains(&inode.link_parent())) {
                    // Another user's directory, or a file of another user's
                    // last found outside what the drop entered: what its
                    // release frees would tell what is held there.
                    continue;
                }
                let released = {
                    let mut slot = inode.dentry.lock();
                    if slot.handle.as_ref().is_some_and(|d| !d.is_hashed()) {
                        slot.handle.take()
                    } else {
                        None
                    }
                };
                let n = released.map_or(0, |d| d.release()) as u64;
                if n > 0 {
                    // The entry, and the directories above it that were
                    // held only by their children (under `dir`: this walk
                    // unhashed them). The walk counted them busy, as the
                    // handles held them, unless something else had
                    // unhashed the entry before it: then it counts as
                    // dropped here, and its ancestors are taken to be this
                    // walk's. Approximate under changes racing the drop
                    // (an entry unhashed by an unlink between the set's
                    // making and the walk), and for a hard link known
                    // under another name deep under an entry the walk
                    // unhashed.
                    freed += n;
                    were_busy += if counted.contains(&inode.ino) { n } else { n - 1 };
                }
            }
            // With the negative entries the first pass dropped.
            out.args.dentries_dropped = sub.dropped + mapped.dropped + freed;
            out.args.busy = (sub.busy + mapped.busy).saturating_sub(were_busy);
        }
        for (inode, depth) in found.values_mut() {
            if *depth == 0 {
                *depth = self.under(dir.ino, inode, &mut memo).unwrap_or(1);
            }
        }
        if mode.drops_dentries() && self.cfg.kernel_cache {
            // The kernel's negative entries under the directory, deepest first.
            // Not those of the directories the caller does not own.
            let mut dirs: Vec<(&Arc<Inode>, u32)> = found
                .values()
                .filter(|(i, _)| i.is_dir() && owner(i))
                .map(|(i, d)| (i, *d))
                .collect();
            dirs.sort_by_key(|e| std::cmp::Reverse(e.1));
            for (d, _) in dirs.into_iter().chain(std::iter::once((&dir, 0))) {
                let mut names = d.take_kernel_negatives();
                if !root_caller && !names.is_empty() {
                    let fd = self.table.path_fd(d).ok();
                    let (go, stay) = names.into_iter().partition(|name| {
                        fd.as_ref()
                            .is_some_and(|fd| self.negative_may_go(fd.as_fd(), name, caller.uid, &held))
                    });
                    // Recorded again, for a drop that may take them.
                    d.restore_kernel_negatives(stay);
                    names = go;
                }
                out.inval.extend(names.into_iter().map(|name| Inval::Entry {
                    parent: d.ino,
                    name: name.into_vec(),
                }));
            }
        }
        let mut list: Vec<(Arc<Inode>, u32)> = found.into_values().collect();
        // Bottom-up, as the kernel wants its invalidations.
        list.sort_by_key(|e| std::cmp::Reverse(e.1));
        for (inode, _) in &list {
            if !owner(inode) {
                skipped_inos.insert(inode.ino);
                continue;
            }
            if !whole && inode.is_dir() {
                self.listings.forget(inode);
                unlisted_dirs.insert(inode.ino);
            }
            let known = inode.nlookup() > 0;
            // Either mode re-reads the source: the attributes too (a pages
            // drop that kept them would hand the kernel the old size with
            // the next LOOKUP or READDIRPLUS, after its own copy was
            // invalidated).
            inode.expire_attr();
            // Not the entries kept above a fence: the kernel's
            // invalidation of a directory's entry drops all it holds below.
            if mode.drops_dentries() && known && !held.contains(&inode.ino) {
                let (parent, name) = inode.link();
                if root_caller || entered.contains(&parent) {
                    out.inval.push(Inval::Entry {
                        parent,
                        name: name.into_vec(),
                    });
                }
            }
            // Dropping an inode frees its pages, as evicting an inode does in Linux.
            if mode.drops_pages() || !known {
                let d = self.data.drop_inode(inode.ino);
                out.args.pages_dropped += d.pages;
                out.args.bytes_freed += d.bytes;
                *inode.data_stamp.lock() = None;
                if known {
                    out.inval.push(Inval::Inode {
                        ino: inode.ino,
                        offset: 0,
                    });
                }
            } else if known && mode.drops_dentries() {
                out.inval.push(Inval::Inode {
                    ino: inode.ino,
                    offset: -1,
                });
            }
        }
        if mode.drops_dentries() {
            dir.expire_attr();
            // The entries unhashed above are freed after a grace period,
            // which an idle daemon would not end: their inodes (and the
            // descriptor each source mount is held open by) would live on,
            // and a filesystem mounted under the source would stay busy
            // after the kernel forgot everything on it.
            dcache::quiesce();
        }
        if !whole {
            // Directories below one whose entry went, which the kernel does
            // not know (a list-ahead read their listings): forgotten as the
            // ones found above, or a listing read before the drop, or while
            // it ran, would be served after it.
            for d in gone_dirs.iter().filter(|d| owner(d)) {
                self.listings.forget(d);
                unlisted_dirs.insert(d.ino);
            }
            self.listings.forget(&dir);
            unlisted_dirs.insert(dir.ino);
            self.unlisted.clear_under(&unlisted_dirs);
            self.lists_ahead.clear_under(&unlisted_dirs);
        }
        out.args.skipped = skipped_inos.len() as u64;
        // Visited: index entries walked plus the inodes found in the dcache.
        let visited = visited + found_in_dcache;
        out.args.visited = u32::try_from(visited).unwrap_or(u32::MAX);
        out.args.elapsed_ns = start.elapsed().as_nanos() as u64;
        let d = &self.drops;
        d.dentries.fetch_add(out.args.dentries_dropped, Ordering::Relaxed);
        d.pages.fetch_add(out.args.pages_dropped, Ordering::Relaxed);
        d.bytes.fetch_add(out.args.bytes_freed, Ordering::Relaxed);
        d.skipped.fetch_add(out.args.skipped, Ordering::Relaxed);
        d.busy.fetch_add(out.args.busy, Ordering::Relaxed);
        d.visited.fetch_add(visited, Ordering::Relaxed);
        if !self.cfg.kernel_cache {
            if self.lends_attrs() {
                // The default mode lent the kernel attributes only
                // (`fs/watched.rs`, "Attributes lent to the kernel"): the
                // directory's and those of every inode under it it knows.
                out.inval.retain_mut(|i| match i {
                    Inval::Inode { offset, .. } => {
                        *offset = -1;
                        true
                    }
                    Inval::Entry { .. } => false,
                });
                if dir.ino == ROOT_INO || dir.nlookup() > 0 {
                    out.inval.push(Inval::Inode {
                        ino: dir.ino,
                        offset: -1,
                    });
                }
            } else {
                out.inval.clear();
            }
        }
        drop(list);
        self.reap();
        tracing::debug!(
            ino,
            ?mode,
            dentries = out.args.dentries_dropped,
            pages = out.args.pages_dropped,
            visited,
            "drop"
        );
        Ok(out)
    }
}
