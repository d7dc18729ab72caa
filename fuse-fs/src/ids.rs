//! Maps keyed by numbers rcufs gives out itself (node ids, file handles),
//! by the device numbers of filesystems under the source, or by the
//! directories that hold their mount points.
//!
//! Every request looks its node id up in the inode table, most look up a
//! file handle, and the lanes (`fs/lanes.rs`) look up devices; with std's
//! SipHash-1-3 a lookup of a `u64` cost 150-200 instructions, most of
//! them the hash (callgrind of the daemon under `stat` calls, BENCHMARKS.md
//! "What the lanes cost a request"). These keys are counters, device
//! numbers, or (the lanes' mount points, 4,096 at most) directories that
//! only a mount makes a key, not chosen freely by the users of the mount,
//! so SipHash's resistance to chosen keys buys nothing here: they are
//! hashed with foldhash (its per-process seeded `fast` variant), a few
//! instructions. Maps keyed by what users choose (names, the source's
//! inode numbers in general) keep std's hasher.

use std::collections::{HashMap, HashSet};

/// The hasher of [`IdMap`] and [`IdSet`].
pub type IdHasher = foldhash::fast::RandomState;

/// A map keyed by node ids, file handles or device numbers.
pub type IdMap<K, V> = HashMap<K, V, IdHasher>;

/// A set of node ids or device numbers.
pub type IdSet<K> = HashSet<K, IdHasher>;
