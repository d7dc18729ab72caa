//! The bounded pool of `O_PATH` descriptors of inodes reached without a
//! pinned descriptor: opened on demand (`open_by_handle_at`, or by name),
//! evicted by CLOCK.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::FsResult;

/// A bounded pool of `O_PATH` descriptors keyed by node id, with CLOCK
/// eviction (a hit only sets a flag; the sweeper gives flagged entries a
/// second pass). It is sharded so that no single lock covers the filesystem.
#[derive(Debug)]
pub struct FdPool {
    shards: Box<[Mutex<PoolShard>]>,
    per_shard: usize,
    opens: AtomicU64,
}

#[derive(Debug, Default)]
struct PoolShard {
    map: crate::ids::IdMap<u64, (Arc<OwnedFd>, bool)>,
    clock: VecDeque<u64>,
}

impl FdPool {
    /// A pool holding at most about `capacity` descriptors.
    pub fn new(capacity: usize) -> Self {
        let n = 16;
        Self {
            shards: (0..n).map(|_| Mutex::new(PoolShard::default())).collect(),
            per_shard: (capacity / n).max(2),
            opens: AtomicU64::new(0),
        }
    }

    fn shard(&self, ino: u64) -> &Mutex<PoolShard> {
        &self.shards[(ino as usize) % self.shards.len()]
    }

    /// The pooled descriptor for `ino`, opening it with `open` on a miss
    /// (outside the shard lock).
    pub fn get(&self, ino: u64, open: impl FnOnce() -> FsResult<OwnedFd>) -> FsResult<Arc<OwnedFd>> {
        {
            let mut shard = self.shard(ino).lock();
            if let Some((fd, referenced)) = shard.map.get_mut(&ino) {
                *referenced = true;
                return Ok(fd.clone());
            }
        }
        let fd = Arc::new(open()?);
        self.opens.fetch_add(1, Ordering::Relaxed);
        let mut evicted = Vec::new();
        let out = {
            let mut shard = self.shard(ino).lock();
            if let Some((existing, _)) = shard.map.get(&ino) {
                existing.clone()
            } else {
                shard.map.insert(ino, (fd.clone(), false));
                shard.clock.push_back(ino);
                while shard.map.len() > self.per_shard {
                    let Some(victim) = shard.clock.pop_front() else { break };
                    match shard.map.get_mut(&victim) {
                        Some((_, referenced)) if *referenced => {
                            *referenced = false;
                            shard.clock.push_back(victim);
                        }
                        Some(_) => evicted.extend(shard.map.remove(&victim)),
                        None => {}
                    }
                }
                fd
            }
        };
        drop(evicted); // Closed outside the lock.
        Ok(out)
    }

    /// Forgets the descriptor of `ino` (closed once its last user drops it).
    pub fn remove(&self, ino: u64) {
        let removed = {
            let mut shard = self.shard(ino).lock();
            let r = shard.map.remove(&ino);
            if r.is_some() {
                shard.clock.retain(|&i| i != ino);
            }
            r
        };
        drop(removed);
    }

    /// Descriptors currently pooled.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Whether the pool holds no descriptor.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Descriptors opened since the mount (misses).
    pub fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }
}
