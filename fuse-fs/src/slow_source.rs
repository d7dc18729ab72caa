//! Defaults for slow sources: a network filesystem (NFS, CephFS, SMB, ...)
//! or a FUSE filesystem (sshfs, a cloud bucket), where every lookup and
//! every `stat` the daemon sends to the source may be a network round trip.
//!
//! # What changes for such a source
//! The options a person did not give are chosen for the source
//! ([`Profile::of`] reads the type of the filesystem holding it from
//! mountinfo; nothing is asked of the source itself):
//! - **The revalidation interval** (`--revalidate`): [`NETWORK_REVALIDATE`]
//!   (10 s) rather than [`LOCAL_REVALIDATE`] (1 s). Within it, names (also
//!   missing ones), attributes and listings are answered from rcufs's caches
//!   without a round trip. With `--kernel-cache` the kernel keeps its copies
//!   for the same interval, so a change made elsewhere is seen within 2 x 10
//!   s at worst: sshfs's own default cache timeout is 20 s, NFS's attribute
//!   cache 3-60 s.
//! - **Worker threads** (`--threads`): [`NETWORK_THREADS`] (16) rather than
//!   the number of CPUs. A worker that asks the source waits a round trip
//!   with the CPU idle; with two workers, two lookups of one directory's
//!   children are in flight and the others queue behind them. The kernel
//!   sends parallel lookups in one directory (`FUSE_PARALLEL_DIROPS`), so
//!   more workers keep more round trips in flight.
//!
//! # Invariants
//! An option given on the command line (or as an `-o` key) always wins;
//! only absent options take the source's defaults. The choice and its reason
//! are in the `mounted` log line and the stats (`source.kind`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::mountinfo;

/// The revalidation interval for a local source.
pub const LOCAL_REVALIDATE: Duration = Duration::from_secs(1);

/// The revalidation interval for a network or FUSE source.
pub const NETWORK_REVALIDATE: Duration = Duration::from_secs(10);

/// FUSE worker threads for a network or FUSE source.
pub const NETWORK_THREADS: usize = 16;

/// Filesystem types whose operations may cross a network.
const NETWORK_TYPES: &[&str] = &[
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "ceph",
    "9p",
    "afs",
    "glusterfs",
    "lustre",
    "gfs2",
    "ocfs2",
    "virtiofs",
];

/// Whether a filesystem of type `fstype` is slow in the sense of this
/// module: a network filesystem, or any FUSE filesystem (rcufs cannot tell
/// sshfs from a local FUSE filesystem, and a FUSE filesystem costs a round
/// trip through its daemon either way).
pub fn is_slow(fstype: &str) -> bool {
    NETWORK_TYPES.contains(&fstype) || is_fuse(fstype)
}

/// Whether a filesystem of type `fstype` is a FUSE filesystem.
fn is_fuse(fstype: &str) -> bool {
    fstype == "fuse" || fstype.starts_with("fuse.") || fstype == "fuseblk"
}

/// The flags rcufs adds to `AT_SYMLINK_NOFOLLOW` when it looks a name up in
/// a source of type `fstype` (LOOKUP and the slow-source background lookups).
///
/// On a FUSE source, a `stat` of a name costs its daemon two requests when
/// the source's kernel keeps attributes for no time (as rcufs asks of a
/// FUSE source, so that its own interval is the only one): the LOOKUP that
/// resolves the name, which returns the attributes, and a GETATTR that
/// reads them again because they are already out of date. With
/// `AT_STATX_DONT_SYNC` the kernel hands out the attributes the LOOKUP
/// just returned, so one request answers. They are never older than the
/// source's entry timeout: the source's kernel looks the name up again,
/// which refreshes them, as soon as its entry expires. Other filesystems
/// keep their own rules (`AT_STATX_DONT_SYNC` would let NFS skip its
/// attribute revalidation, and a local filesystem ignores it).
pub fn name_stat_flags(fstype: &str) -> libc::c_int {
    if is_fuse(fstype) { libc::AT_STATX_DONT_SYNC } else { 0 }
}

/// What the source is, for choosing defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The type of the filesystem holding the source (`ext4`,
    /// `fuse.sshfs`, ...), empty if mountinfo did not say.
    pub fstype: String,
    /// Whether it is a network or FUSE filesystem.
    pub slow: bool,
}

impl Profile {
    /// The profile of the filesystem holding `source`: the mount whose mount
    /// point is the longest prefix of the source's canonical path.
    pub fn of(source: &Path) -> Self {
        let fstype = source
            .canonicalize()
            .ok()
            .and_then(|src| {
                let mounts = mountinfo::mounts().ok()?;
                holding(&mounts, &src).map(|m| m.fstype.clone())
            })
            .unwrap_or_default();
        Self::of_type(fstype)
    }

    /// The profile of a filesystem of type `fstype`.
    pub fn of_type(fstype: String) -> Self {
        let slow = is_slow(&fstype);
        Self { fstype, slow }
    }

    /// The revalidation interval when none was given.
    pub fn revalidate(&self) -> Duration {
        if self.slow {
            NETWORK_REVALIDATE
        } else {
            LOCAL_REVALIDATE
        }
    }

    /// The number of FUSE worker threads when none was given: `local` (the
    /// machine's parallelism) for a local source.
    pub fn threads(&self, local: usize) -> usize {
        if self.slow { NETWORK_THREADS.max(local) } else { local }
    }

    /// The flags of the `fstatat` that looks a name up in the source, on
    /// top of `AT_SYMLINK_NOFOLLOW`: `AT_STATX_DONT_SYNC` for a FUSE
    /// source (see [`name_stat_flags`]), none otherwise.
    pub fn name_stat_flags(&self) -> libc::c_int {
        name_stat_flags(&self.fstype)
    }

    /// `network` or `local`, for the stats and the log.
    pub fn kind(&self) -> &'static str {
        if self.slow { "network" } else { "local" }
    }
}

/// Lookups sent to the source: how many, and how many were in flight at
/// once at most (the stats' `source.lookups` and
/// `source.lookups_in_flight_max`), which shows whether lookups wait
/// behind one another.
#[derive(Debug, Default)]
pub struct SourceLookups {
    total: AtomicU64,
    now: AtomicU64,
    max: AtomicU64,
}

/// One lookup in flight; counted out when dropped.
pub struct InFlight<'a>(&'a SourceLookups);

impl SourceLookups {
    /// Counts a lookup in until the guard drops.
    pub fn enter(&self) -> InFlight<'_> {
        self.total.fetch_add(1, Ordering::Relaxed);
        let now = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.max.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
    }

    /// Lookups sent so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The most lookups in flight at once so far.
    pub fn max_in_flight(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The mount that holds `path` (canonical): the last listed mount whose
/// mount point is the longest prefix of it (the last one wins when mounts
/// are stacked, as the kernel resolves them).
pub fn holding<'a>(mounts: &'a [mountinfo::MountEntry], path: &Path) -> Option<&'a mountinfo::MountEntry> {
    let mut best: Option<&mountinfo::MountEntry> = None;
    for m in mounts {
        if path.starts_with(&m.mount_point)
            && best.is_none_or(|b| m.mount_point.components().count() >= b.mount_point.components().count())
        {
            best = Some(m);
        }
    }
    best
}

#[cfg(test)]
mod tests;
