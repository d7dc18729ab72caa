//! The name layer: every lookup of the filesystem goes through here.
//!
//! (This revision does not cache names yet: every lookup misses and goes to
//! the source. The dcache-backed version replaces this file.)

use std::sync::Arc;

use crate::inode::Inode;

/// The handle an inode keeps to its dentry while the kernel knows it.
pub type DentryHandle = ();

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
#[derive(Debug, Default)]
pub struct Names {}

impl Names {
    /// A name cache with room for `entries` entries, `negative` of them negative.
    pub fn new(_entries: usize, _negative: usize, _root: &Arc<Inode>) -> Self {
        Self {}
    }

    /// Looks `name` up under `parent`.
    pub fn lookup(&self, _parent: &Inode, _name: &[u8]) -> Hit {
        Hit::Miss
    }

    /// Records `(parent, name) -> child` (`None`: a negative entry).
    pub fn insert(&self, _parent: &Inode, _name: &[u8], _child: Option<&Arc<Inode>>) {}

    /// Forgets `(parent, name)` and anything cached under it.
    pub fn remove(&self, _parent: &Inode, _name: &[u8]) {}

    /// Moves `(op, on)` to `(np, nn)`.
    pub fn rename(&self, _op: &Inode, _on: &[u8], _np: &Inode, _nn: &[u8]) {}

    /// Drops everything cached under `dir` that `filter` accepts; `visit`
    /// sees every positive payload found under it.
    pub fn drop_subtree(&self, _dir: &Inode, _filter: impl FnMut(&Arc<Inode>) -> bool) -> SubtreeDrop {
        SubtreeDrop::default()
    }

    /// The layer's counters as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({"entries": 0, "negative": 0, "hits": 0, "misses": 0, "negative_hits": 0,
            "inserts": 0, "evictions": 0, "dropped": 0, "capacity": 0})
    }
}
