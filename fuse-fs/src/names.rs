//! The name layer: every LOOKUP of the filesystem goes through the dcache
//! (`crates/dcache`).
//!
//! # Design
//! The dcache maps `(parent dentry, name)` to a payload: the child's
//! `Arc<Inode>` (positive) or nothing (negative, "does not exist"). A hit is
//! answered from the payload without touching the source; a miss goes to the
//! source and inserts what it found, negative results included. The
//! dcache's lookups take no lock and write no shared line (seed 000,
//! "Scalability of the directory entry cache").
//!
//! An inode keeps a counted handle to its dentry (the parent for lookups
//! under it) only while the kernel knows its node id; the handle is released
//! at FORGET, so the payload's `Arc<Inode>` and the dentry never keep each
//! other alive once the kernel has let go.
//!
//! # Invariants
//! - A payload names the inode the source had under that name when it was
//!   inserted or last revalidated; `fs.rs` revalidates entries older than the
//!   revalidation interval and the directory whose mtime moved.
//! - Lookups under a parent whose dentry was unhashed (dropped, renamed
//!   over) bypass the cache until the parent is looked up again.
//! - An inode the kernel knows keeps its handle while its dentry is cached
//!   (a drop releases handles only after unhashing their dentries), as far
//!   as this layer can keep it: a directory the kernel forgot while a child
//!   held its dentry comes back without a handle when the lookup that
//!   revives it caches nothing (a change under its parent came meanwhile).
//!   Every change here does nothing under a parent without a live handle,
//!   so such a dentry, cached out of reach, misses changes; the change
//!   counts the miss (`DentrySlot::missed`), and a dentry given to a
//!   directory ([`Names::attach`], [`Names::insert`]) keeps its cached
//!   children only if it is the one known to be up to date (the last
//!   handle given or let go at FORGET, or the warm walk's) and no change
//!   missed a handle since; otherwise they are dropped before it becomes
//!   the handle.
//! - A live handle is never moved to another dentry: the old one would be
//!   left cached with children that stop being updated.
//! - What a lookup read from the source is cached only if no change of a
//!   name under the parent through the mount came meanwhile, checked and
//!   inserted in one step against the changes' own updates
//!   (`Inode::cache_if_unchanged`, `Inode::change_names`; `fs.rs`).

use std::sync::Arc;

pub use dcache::Verdict;
use dcache::{Config, Dcache, Lookup};

pub use crate::inode::DentryHandle;
use crate::inode::{Inode, ROOT_INO};

/// What the name layer knows of `(parent, name)`.
pub enum Hit {
    /// A cached positive entry.
    Positive(Arc<Inode>),
    /// A cached negative entry.
    Negative,
    /// Not cached.
    Miss,
}

/// Counts of one subtree drop.
#[derive(Clone, Copy, Debug, Default)]
pub struct SubtreeDrop {
    /// Entries dropped.
    pub dropped: u64,
    /// Entries in use, only unhashed.
    pub busy: u64,
    /// Entries the filter refused.
    pub skipped: u64,
}

/// The name cache.
pub struct Names {
    cache: Dcache<Arc<Inode>>,
    root: DentryHandle,
    capacity: usize,
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Names").field("capacity", &self.capacity).finish()
    }
}

impl Names {
    /// A name cache with room for `entries` entries, `negative` of them negative.
    pub fn new(entries: usize, negative: usize, root: &Arc<Inode>) -> Self {
        let config = Config {
            max_entries: entries,
            max_negative: negative,
            ..Config::default()
        };
        let cache = Dcache::new(config, root.clone());
        root.dentry.lock().handle = Some(cache.root());
        Self {
            root: cache.root(),
            cache,
            capacity: entries,
        }
    }

    fn dentry_of(&self, dir: &Inode) -> Option<DentryHandle> {
        if dir.ino == ROOT_INO {
            // The root's dentry is never dropped or replaced.
            return Some(self.root.clone());
        }
        dir.dentry.lock().live().cloned()
    }

    /// The live dentry of `dir`, for a change of names under it. Without
    /// one the change cannot reach a dentry of `dir` that may still be
    /// cached out of reach (the kernel forgot `dir` while a child held its
    /// dentry, then learnt it again from a lookup that cached nothing):
    /// the miss is counted, under the same lock, so that [`Names::vet`]
    /// empties such a dentry before it becomes the handle.
    fn dentry_to_change(&self, dir: &Inode) -> Option<DentryHandle> {
        if dir.ino == ROOT_INO {
            return Some(self.root.clone());
        }
        let mut slot = dir.dentry.lock();
        let live = slot.live().cloned();
        if live.is_none() {
            slot.missed += 1;
        }
        live
    }

    /// Makes `d` the dentry of `inode` known to be up to date, and with
    /// `handle` gives it to `inode` as its handle; nothing if `inode` has
    /// a live handle (moved to another dentry, a live handle would leave
    /// its old one cached with children that stop being updated) or `d`
    /// is no longer cached.
    ///
    /// A directory's `d` keeps its cached children only if no change under
    /// `inode` has missed a handle since the last dentry known to be up to
    /// date (the handle let go at FORGET, the last one given, or the one
    /// the warm walk fills) and `d` is that dentry (or there was none);
    /// otherwise they are dropped first, before `d` becomes the handle (a
    /// lookup under `inode` reads them from then on). A change that misses
    /// a handle during that drop sends us round again; of two callers, the
    /// first to store wins and the other returns.
    fn vet(&self, inode: &Inode, d: &DentryHandle, handle: bool) {
        let mut dropped_at = None;
        loop {
            let old = {
                let mut slot = inode.dentry.lock();
                if slot.live().is_some() || !d.is_hashed() {
                    return;
                }
                let up_to_date = !inode.is_dir()
                    || dropped_at == Some(slot.missed)
                    || (slot.clean_at == slot.missed && (slot.clean == 0 || slot.clean == d.id()));
                if !up_to_date {
                    dropped_at = Some(slot.missed);
                    None
                } else {
                    (slot.clean, slot.clean_at) = (d.id(), slot.missed);
                    Some(if handle { slot.handle.replace(d.clone()) } else { None })
                }
            };
            match old {
                // Released outside the lock.
                Some(old) => return drop(old),
                None => {
                    self.cache.drop_subtree(d, |_| true);
                }
            }
        }
    }

    /// Looks `name` up under `parent`.
    pub fn lookup(&self, parent: &Inode, name: &[u8]) -> Hit {
        let Some(pd) = self.dentry_of(parent) else {
            return Hit::Miss;
        };
        match self.cache.lookup_with(&pd, name, |p| p.cloned()) {
            None => Hit::Miss,
            Some(None) => Hit::Negative,
            Some(Some(inode)) => Hit::Positive(inode),
        }
    }

    /// Gives `child` (just remembered by the kernel) its dentry under
    /// `(parent, name)` if it has no live one.
    pub fn attach(&self, parent: &Inode, name: &[u8], child: &Inode) {
        let has = child.dentry.lock().live().is_some();
        if has || child.nlookup() == 0 {
            return;
        }
        let Some(pd) = self.dentry_of(parent) else { return };
        if let Lookup::Positive(d) = self.cache.lookup(&pd, name)
            && d.payload().is_some_and(|p| std::ptr::eq(Arc::as_ptr(p), child))
        {
            self.vet(child, &d, true);
        }
    }

    /// Records what a lookup found, `(parent, name) -> child` (`None`: a
    /// negative entry); nothing if `parent` has no live dentry (what a
    /// dentry of it out of reach holds is not made wrong by a lookup: only
    /// changes make it so).
    pub fn insert(&self, parent: &Inode, name: &[u8], child: Option<&Arc<Inode>>) {
        let Some(pd) = self.dentry_of(parent) else { return };
        self.insert_under(&pd, name, child);
    }

    /// Records a name made through the mount, `(parent, name) -> child`.
    pub fn insert_made(&self, parent: &Inode, name: &[u8], child: &Arc<Inode>) {
        let Some(pd) = self.dentry_to_change(parent) else {
            return;
        };
        self.insert_under(&pd, name, Some(child));
    }

    /// As [`Names::insert`], under the parent dentry `pd` itself, and
    /// returns the child's dentry (a counted handle). The daemon's warm walk
    /// uses it: it holds the dentries of the directories it walks, which the
    /// kernel does not know, so their inodes keep no handle of their own.
    pub fn insert_under(&self, pd: &DentryHandle, name: &[u8], child: Option<&Arc<Inode>>) -> DentryHandle {
        let d = self.cache.insert(pd, name, child.cloned());
        let same = match (d.payload(), child) {
            (Some(p), Some(c)) => Arc::ptr_eq(p, c),
            (None, None) => true,
            _ => false,
        };
        let d = if same {
            d
        } else {
            self.cache.replace(pd, name, child.cloned())
        };
        // A child the kernel knows takes this dentry as its handle (unless
        // it has a live one). For one it does not know (the warm walk's),
        // the dentry is only made the one known to be up to date, so that
        // the children the walk puts under it are kept when the kernel
        // learns the child.
        if let Some(c) = child {
            self.vet(c, &d, c.nlookup() > 0);
        }
        d
    }

    /// The cached positive entry `(pd, name)` with its dentry, if any.
    pub fn lookup_under(&self, pd: &DentryHandle, name: &[u8]) -> Option<(DentryHandle, Arc<Inode>)> {
        match self.cache.lookup(pd, name) {
            Lookup::Positive(d) => {
                let inode = d.payload().cloned()?;
                Some((d, inode))
            }
            _ => None,
        }
    }

    /// The live dentry of `dir`, if it has one (the root always does).
    pub fn dentry(&self, dir: &Inode) -> Option<DentryHandle> {
        self.dentry_of(dir)
    }

    /// Entries the cache can still take before it evicts.
    pub fn room(&self) -> u64 {
        (self.capacity as u64).saturating_sub(self.cache.stats().entries)
    }

    /// Forgets `(parent, name)` and anything cached under it.
    pub fn remove(&self, parent: &Inode, name: &[u8]) {
        if let Some(pd) = self.dentry_to_change(parent) {
            self.cache.remove(&pd, name);
        }
    }

    /// As [`Names::remove`], under the parent dentry `pd` itself.
    pub fn remove_under(&self, pd: &DentryHandle, name: &[u8]) {
        self.cache.remove(pd, name);
    }

    /// Moves `(op, on)` to `(np, nn)`.
    pub fn rename(&self, op: &Inode, on: &[u8], np: &Inode, nn: &[u8]) {
        match (self.dentry_to_change(op), self.dentry_to_change(np)) {
            (Some(o), Some(n)) => {
                // Refused (a directory moved under itself, as the cache
                // sees it after a rename in the source itself): both
                // names are forgotten.
                if !self.cache.rename(&o, on, &n, nn) {
                    self.cache.remove(&o, on);
                    self.cache.remove(&n, nn);
                }
            }
            (o, n) => {
                if let Some(o) = o {
                    self.cache.remove(&o, on);
                }
                if let Some(n) = n {
                    self.cache.remove(&n, nn);
                }
            }
        }
    }

    /// The dcache's rename count ([`Dcache::renames`]).
    pub fn renames(&self) -> usize {
        self.cache.renames()
    }

    /// Drops everything cached under `dir` (not `dir` itself) that `filter`
    /// accepts; the filter sees every positive payload under it that is not
    /// below an entry it accepted (those go with it), and negative entries
    /// under it are always dropped.
    pub fn drop_subtree(&self, dir: &Inode, mut filter: impl FnMut(&Arc<Inode>) -> bool) -> SubtreeDrop {
        self.drop_subtree_under(dir, |p, _| if filter(p) { Verdict::Drop } else { Verdict::Keep })
    }

    /// [`drop_subtree`](Self::drop_subtree) whose filter may also fence an
    /// entry off (kept, with everything below it unwalked and uncounted)
    /// and is given the entry's parent (the directory's inode).
    pub fn drop_subtree_under(
        &self,
        dir: &Inode,
        filter: impl FnMut(&Arc<Inode>, Option<&Arc<Inode>>) -> Verdict,
    ) -> SubtreeDrop {
        self.drop_subtree_visiting(dir, filter, |_| {})
    }

    /// [`drop_subtree_under`](Self::drop_subtree_under) that also shows
    /// `gone` each inode whose entry it drops without asking the filter (one
    /// below an entry the filter accepted).
    pub fn drop_subtree_visiting(
        &self,
        dir: &Inode,
        mut filter: impl FnMut(&Arc<Inode>, Option<&Arc<Inode>>) -> Verdict,
        gone: impl FnMut(&Arc<Inode>),
    ) -> SubtreeDrop {
        let Some(dd) = self.dentry_to_change(dir) else {
            return SubtreeDrop::default();
        };
        let s = self
            .cache
            .drop_subtree_visiting(&dd, |p: &Arc<Inode>, parent| filter(p, parent), gone);
        SubtreeDrop {
            dropped: s.dropped,
            busy: s.busy,
            skipped: s.skipped,
        }
    }

    /// The layer's counters as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        let s = self.cache.stats();
        serde_json::json!({"entries": s.entries, "negative": s.negative_entries,
            "hits": s.hits, "misses": s.misses, "negative_hits": s.negative_hits, "inserts": s.inserts,
            "evictions": s.evictions, "dropped": s.dropped, "capacity": self.capacity as u64})
    }
}
