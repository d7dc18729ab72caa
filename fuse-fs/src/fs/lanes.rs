//! Lanes: filesystems under the source that can stop answering get a
//! bounded share of the workers.
//!
//! A request that enters a filesystem mounted under the source waits as
//! long as that filesystem does. An NFS server gone under a `hard` mount,
//! or a FUSE daemon that hangs, would otherwise take one worker per
//! request sent there until every worker waits and the whole mount stops,
//! requests answered from the caches included (SEMANTICS.md, "A
//! filesystem under the source that stops answering").
//!
//! So the filesystems that can stop answering are given lanes (the
//! vendored fuser's `Filesystem::lane`, `Config::lane_width`; PATCHES.md):
//! at most half the workers (at least one, and always one fewer than all)
//! run requests of one such filesystem at a time; the lane's other
//! requests are queued and run in order by its workers as they finish, and
//! the remaining workers serve everything else. A stopped filesystem then
//! holds its own callers, as natively, and its lane's workers.
//!
//! Which filesystems: those whose `statfs` type is a network or cluster
//! filesystem, FUSE, or autofs ([`may_stop`]), mounted under the source
//! (the source's own filesystem is never one: every request is on it).
//! They are learned when a lookup first crosses into one
//! ([`Fs::note_crossing`], where the mount flags are read,
//! `fs/submounts.rs`). A request belongs to a lane when:
//! - its node is an inode on such a filesystem (LOOKUP: its parent); or
//! - it is a LOOKUP of a name that led into such a filesystem when it was
//!   looked up from the source (the mount point's name under its
//!   directory, recorded at the crossing, [`MAX_CROSSINGS`] at most).
//!
//! READDIRPLUS lists such a mount point's name without attributes (the
//! kernel asks a LOOKUP when the name is used, which goes to the lane).
//!
//! What this does not cover:
//! - the first crossing into a filesystem that has already stopped (its
//!   type is not known before it answers); that request waits in a worker
//!   outside any lane;
//! - requests served over io_uring (their replies go through their queue
//!   entry: `--io-uring` mounts have no lanes);
//! - the kernel's own locks on the mirror's directories, held by a request
//!   waiting in the filesystem (an UNLINK or RENAME of the mount point's
//!   name waits for the LOOKUP holding its directory);
//! - with `--threads 1` there is no worker to spare: no lanes.

use std::collections::{HashMap, HashSet};

use std::sync::atomic::{AtomicBool, Ordering};

use crate::inode::Inode;

use super::Fs;

/// The most mount-point names recorded (mount points come and go with
/// automounts; past this, lookups of new ones go outside the lanes until
/// rcufs restarts).
pub const MAX_CROSSINGS: usize = 4096;

/// Whether a filesystem of `statfs` type `f_type` can stop answering for
/// longer than a local disk does: network and cluster filesystems, FUSE
/// filesystems (a user-space daemon), and autofs (whose lookups wait for
/// the automounter).
pub fn may_stop(f_type: i64) -> bool {
    const TYPES: &[i64] = &[
        0x6969,                 // NFS
        0x517B,                 // SMB
        0xFF53_4D42_u32 as i64, // CIFS
        0xFE53_4D42_u32 as i64, // SMB2
        0x6573_5546,            // FUSE
        0x0102_1997,            // 9P
        0x00C3_6400,            // Ceph
        0x6B41_4653,            // AFS (kAFS)
        0x5346_414F,            // AFS
        0x7375_7245,            // Coda
        0x564C,                 // NCP
        0x0BD0_0BD0,            // Lustre
        0x2003_0528,            // OrangeFS
        0x0116_1970,            // GFS2
        0x7461_636F,            // OCFS2
        0x0187,                 // autofs
    ];
    TYPES.contains(&f_type)
}

/// Mount points under one directory: each name and the device it leads to.
type Crossings = Vec<(Box<[u8]>, u64)>;

/// The filesystems under the source that can stop answering, and the
/// names that led into them.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    /// Set once one is known: until then no request needs a look.
    any: AtomicBool,
    /// Their devices.
    devs: parking_lot::RwLock<HashSet<u64>>,
    /// Mount points by the node id of their directory: (name, device).
    crossings: parking_lot::RwLock<HashMap<u64, Crossings>>,
}

impl Fs {
    /// A lookup of `name` under `parent` crossed into the filesystem on
    /// `dev`, of `statfs` type `f_type` (module docs).
    pub(super) fn note_crossing(&self, parent: &Inode, name: &[u8], dev: u64, f_type: i64) {
        if !may_stop(f_type) || dev == self.root.key.0 {
            return;
        }
        let l = &self.lanes;
        if l.devs.write().insert(dev) {
            tracing::info!(
                name = %String::from_utf8_lossy(name),
                dev,
                f_type = format_args!("{f_type:#x}"),
                "a filesystem under the source that can stop answering: its requests get a lane of their own"
            );
        }
        let mut crossings = l.crossings.write();
        let known = crossings
            .get(&parent.ino)
            .is_some_and(|v| v.iter().any(|(n, _)| &**n == name));
        if !known {
            let recorded: usize = crossings.values().map(Vec::len).sum();
            if recorded < MAX_CROSSINGS {
                crossings.entry(parent.ino).or_default().push((name.into(), dev));
            }
        }
        drop(crossings);
        // Relaxed: the sets are read under their locks; this flag only
        // saves requests the look while it is clear.
        l.any.store(true, Ordering::Relaxed);
    }

    /// Filesystems given a lane, and mount-point names recorded (gauges of
    /// the statistics' `source` section).
    pub(super) fn lane_counts(&self) -> (u64, u64) {
        let l = &self.lanes;
        let names = l.crossings.read().values().map(Vec::len).sum::<usize>();
        (l.devs.read().len() as u64, names as u64)
    }

    /// The lane of a request on node `ino` (`name`: a LOOKUP's), if it
    /// belongs to one (module docs).
    pub fn lane(&self, ino: u64, name: Option<&[u8]>) -> Option<u64> {
        let l = &self.lanes;
        if !l.any.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(dev) = name.and_then(|n| self.crossing(ino, n)) {
            return Some(dev);
        }
        let dev = self.table.get(ino).ok()?.key.0;
        l.devs.read().contains(&dev).then_some(dev)
    }

    /// The device a lookup of `name` under node `dir` crossed into, if it
    /// is a filesystem that can stop answering.
    pub(super) fn crossing(&self, dir: u64, name: &[u8]) -> Option<u64> {
        let l = &self.lanes;
        if !l.any.load(Ordering::Relaxed) {
            return None;
        }
        l.crossings
            .read()
            .get(&dir)?
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|&(_, dev)| dev)
    }
}
