//! The children index: for each directory node id, the node ids the kernel
//! knows whose recorded link (`Inode::link`) names that directory.
//!
//! # Why
//! A directory drop must find the inodes under a directory that the kernel
//! knows. Scanning every known inode costs time in proportion to all of
//! them, whatever the directory (an owner of an empty directory could make
//! the daemon walk 30,000 inodes per request); walking this index from the
//! directory costs time in proportion to the subtree.
//!
//! # Invariants
//! - An inode is listed under exactly one parent, the parent of its link,
//!   while it is in the inode table (`nlookup > 0`), and under none
//!   otherwise. `InodeTable` keeps this: it adds and removes entries under
//!   the node id's table-shard lock (when the node id enters or leaves the
//!   table) and the inode's link lock (when the link changes), in that lock
//!   order; this index's shard locks are leaves.
//! - A parent may leave the table while children are listed under it (the
//!   kernel forgot a directory in which a file stays open through an older
//!   dentry); `InodeTable` then moves them under the directory's next node
//!   id when it enters the table, so that a drop of it finds them.
//! - A parent with no children has no map entry, so the index holds memory
//!   in proportion to the inodes the kernel knows, not to those ever seen.

use std::collections::{HashMap, HashSet};

use parking_lot::Mutex;

const SHARDS: usize = 64;

type Shard = Mutex<HashMap<u64, HashSet<u64>>>;

/// Parent node id -> child node ids.
#[derive(Debug)]
pub struct Children {
    shards: Box<[Shard]>,
}

impl Default for Children {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl Children {
    fn shard(&self, parent: u64) -> &Shard {
        &self.shards[(parent as usize) % SHARDS]
    }

    /// Lists `child` under `parent`.
    pub fn add(&self, parent: u64, child: u64) {
        self.shard(parent).lock().entry(parent).or_default().insert(child);
    }

    /// Stops listing `child` under `parent`.
    pub fn remove(&self, parent: u64, child: u64) {
        let mut shard = self.shard(parent).lock();
        if let Some(set) = shard.get_mut(&parent) {
            set.remove(&child);
            if set.is_empty() {
                shard.remove(&parent);
            }
        }
    }

    /// The children listed under `parent` (a copy: the lock is not held
    /// while the caller looks at them).
    pub fn of(&self, parent: u64) -> Vec<u64> {
        self.shard(parent)
            .lock()
            .get(&parent)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether `parent` has a child listed.
    pub fn has(&self, parent: u64) -> bool {
        self.shard(parent).lock().contains_key(&parent)
    }

    /// Parents with at least one child listed (for tests and statistics).
    pub fn parents(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_remove_and_empty_parents_go_away() {
        let c = Children::default();
        c.add(1, 2);
        c.add(1, 3);
        c.add(65, 4); // Same shard as 1.
        let mut k = c.of(1);
        k.sort_unstable();
        assert_eq!(k, [2, 3]);
        assert_eq!(c.of(65), [4]);
        assert_eq!(c.parents(), 2);
        c.remove(1, 2);
        c.remove(1, 3);
        c.remove(1, 3);
        assert!(c.of(1).is_empty());
        assert_eq!(c.parents(), 1);
        c.remove(65, 4);
        assert_eq!(c.parents(), 0);
    }
}
