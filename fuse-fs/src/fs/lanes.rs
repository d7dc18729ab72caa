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
//! at most half as many executors as there are workers (at least one)
//! run requests of one such filesystem at a time: workers, all lanes
//! together never the last one, and past those threads of the lanes' own
//! (at most 32); a lane's other requests are queued and run in order as
//! its executors finish, and the remaining workers serve everything else.
//! A stopped filesystem then holds its own callers, as natively, and its
//! lane's executors. LOOKUP of a mount point's name goes to its lane;
//! UNLINK, RMDIR and RENAME of it go to the source without the `stat` of
//! the name that would look into the filesystem (the source answers them
//! `EBUSY` after its own checks, as natively), and RENAME and LINK into
//! or out of such a filesystem are answered `EXDEV` without a look into
//! it (`fs.rs`, [`Fs::across_lanes`]).
//!
//! Which filesystems: network and cluster filesystems, FUSE, and autofs
//! ([`may_stop`] by `statfs` type, [`may_stop_fstype`] by the mount
//! table's name), mounted under the source (the source's own filesystem is
//! never one: every request is on it). They are learned from the mount
//! table (`/proc/self/mountinfo`, which asks no filesystem anything): each
//! such mount under the source that is not mounted over, its device, its
//! id and its mount point's name under its directory (that directory's
//! `stat`), at the start ([`Fs::with_lanes_from_mount_table`]) and after
//! each change of the table, which the kernel signals
//! ([`crate::mount_table`]; [`Fs::relearn_lanes`], on a thread of its
//! own), so that one mounted since gets its lane before anything enters
//! it. And when a lookup crosses into one ([`Fs::note_crossing`], where
//! the mount flags are read, `fs/submounts.rs`): one whose change of the
//! table was not read yet, or whose mount point's directory could not be
//! placed.
//!
//! A request belongs to a lane when:
//! - its node is an inode on such a filesystem (LOOKUP: its parent); or
//! - it is a LOOKUP of a mount point's name under its directory (by the
//!   directory's device and inode number; [`MAX_CROSSINGS`] at most).
//!
//! READDIRPLUS lists such a mount point's name without attributes (the
//! kernel asks a LOOKUP when the name is used, which goes to the lane).
//!
//! What this does not cover (SEMANTICS.md lists it all):
//! - a crossing into a filesystem that has already stopped, mounted the
//!   moment before (its change of the table not read yet) or where its
//!   mount point's directory could not be placed: its type is not known
//!   before it answers, so that request waits in a worker outside any lane
//!   (one mounted under another such filesystem's mount point is not
//!   recorded from the table, so as not to `stat` its directory, and its
//!   crossing waits in the outer one's lane);
//! - a mount moved onto a directory of the same name under another such
//!   mount's mount point, or onto one whose directory's `stat` fails,
//!   keeps the record of its old place;
//! - requests served over io_uring (their replies go through their queue
//!   entry: `--io-uring` mounts have no lanes);
//! - the kernel's own locks on the mirror's directories, held by a request
//!   waiting in the filesystem (a change of any name in the mount point's
//!   directory waits for the LOOKUP holding it).
//!
//! A change of the mount table, a lookup of a recorded mount point's name
//! (at most once a second) and an UNLINK, RMDIR or RENAME of one read the
//! table again ([`Fs::relearn_lanes`], [`Fs::forget_unmounted`]), so an
//! unmounted, moved or mounted-over one's name leaves its lane (the
//! filesystem's inodes do not: unmounted lazily, it still serves what the
//! kernel holds under it).

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::FsResult;
use crate::inode::Inode;
use crate::sys;

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
        0x4750_4653,            // GPFS
        0x1983_0326,            // BeeGFS
    ];
    TYPES.contains(&f_type)
}

/// Mount points under one directory: each name, the device it leads to
/// and the mount's id (as the mount table shows it).
type Crossings = Vec<(Box<[u8]>, u64, u64)>;

/// A mount of a filesystem that can stop answering, as the mount table
/// places it under the source.
#[derive(Debug)]
struct LanePlace {
    /// Its mount point's directory, `(st_dev, st_ino)`.
    dir: (u64, u64),
    /// Its mount point's name in that directory.
    name: Box<[u8]>,
    /// The device it serves.
    dev: u64,
    /// The mount's id.
    id: u64,
    /// Its type, as the table names it.
    fstype: String,
}

/// What [`Fs::lane_mounts`] found in the mount table.
#[derive(Debug)]
struct LaneMounts {
    /// The mounts on top of their mount points that could be placed.
    places: Vec<LanePlace>,
    /// The ids of the mounts of filesystems that can stop answering that
    /// lookups cannot reach (`mountinfo::hidden`).
    covered: HashSet<u64>,
    /// The ids of the mounts outside the source.
    outside: HashSet<u64>,
}

/// Whether a filesystem whose mount-table type is `fstype` can stop
/// answering (as [`may_stop`]).
pub fn may_stop_fstype(fstype: &str) -> bool {
    const TYPES: &[&str] = &[
        "nfs",
        "nfs4",
        "smbfs",
        "cifs",
        "smb3",
        "9p",
        "ceph",
        "afs",
        "coda",
        "ncpfs",
        "lustre",
        "orangefs",
        "pvfs2",
        "gfs2",
        "ocfs2",
        "glusterfs",
        "fuse",
        "fuseblk",
        "autofs",
        "virtiofs",
        "gpfs",
        "beegfs",
    ];
    TYPES.contains(&fstype) || fstype.starts_with("fuse.") || fstype.starts_with("fuseblk.")
}

/// The filesystems under the source that can stop answering, and the
/// names that led into them.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    /// Set once one is known: until then no request needs a look.
    any: AtomicBool,
    /// Their devices.
    devs: parking_lot::RwLock<crate::ids::IdSet<u64>>,
    /// Bit [`bit`] of each device ever in `devs`: a request on a device
    /// whose bit is clear is on none, known without taking `devs`'s lock,
    /// whose count every worker would write (a filter: bits are never
    /// cleared, and a set one only means a look under the lock).
    dev_bits: AtomicU64,
    /// Mount points by their directory's `(st_dev, st_ino)`.
    crossings: parking_lot::RwLock<crate::ids::IdMap<(u64, u64), Crossings>>,
    /// Bit [`bit`] of each directory ever in `crossings`, as `dev_bits`.
    dir_bits: AtomicU64,
    /// When the mount table was last read to forget filesystems no longer
    /// mounted ([`Fs::forget_unmounted`]).
    checked: parking_lot::Mutex<Option<std::time::Instant>>,
}

/// The bit of `key` in the filters [`Lanes::dev_bits`] and
/// [`Lanes::dir_bits`]: its top six bits after a multiplication by an odd
/// constant (Fibonacci hashing), which mixes every bit of the key into them.
fn bit(key: u64) -> u64 {
    1 << (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58)
}

/// A directory's key folded to one word for [`bit`].
fn dir_word((dev, ino): (u64, u64)) -> u64 {
    dev.rotate_left(32) ^ ino
}

impl Lanes {
    /// Whether device `dev` may have a lane (its filter bit is set).
    fn may_be_lane(&self, dev: u64) -> bool {
        // Relaxed: a filter. Whether a request that races the learning of
        // a lane (its bit set, then its record inserted under the lock)
        // is put in it is open either way, as it was when `any` alone
        // was checked before the lock: a request that came a moment
        // earlier would not have been.
        self.dev_bits.load(Ordering::Relaxed) & bit(dev) != 0
    }

    /// Whether directory `dir` may hold a recorded mount point (as
    /// [`may_be_lane`](Self::may_be_lane)).
    fn may_hold_crossings(&self, dir: (u64, u64)) -> bool {
        // Relaxed: as in `may_be_lane`.
        self.dir_bits.load(Ordering::Relaxed) & bit(dir_word(dir)) != 0
    }

    /// Whether `p` is recorded as it is.
    fn placed(&self, p: &LanePlace) -> bool {
        self.crossings.read().get(&p.dir).is_some_and(|names| {
            names
                .iter()
                .any(|(n, dev, id)| **n == *p.name && (*dev, *id) == (p.dev, p.id))
        })
    }
}

/// How often a lookup of a recorded mount point re-reads the mount table.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl Fs {
    /// Learns the filesystems under `source` that can stop answering from
    /// the mount table (module docs); logs and goes on without them if it
    /// cannot be read.
    pub(super) fn with_lanes_from_mount_table(self, source: &Path) -> Self {
        let mounts = match crate::mountinfo::mounts() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(
                    "cannot read the mount table ({e:#}): filesystems under the source get lanes only once entered"
                );
                return self;
            }
        };
        let Ok(source) = std::fs::canonicalize(source) else {
            return self;
        };
        // Decoded as the table is (see `source_path`).
        let source = crate::mountinfo::decoded_as_in_table(&source);
        for p in self.lane_mounts(&mounts, &source).places {
            self.note_lane(
                p.dir,
                &p.name,
                (p.dev, p.id),
                format_args!("{} from the mount table", p.fstype),
            );
        }
        self
    }

    /// The mounts of filesystems that can stop answering under `source`
    /// in the table `mounts`: those not mounted over, placed by their
    /// directory's `stat` (not a directory under another such mount, whose
    /// `stat` could wait on that one); and the ids of the mounts mounted
    /// over, and of those outside the source.
    fn lane_mounts(&self, mounts: &[crate::mountinfo::MountEntry], source: &Path) -> LaneMounts {
        let covered = crate::mountinfo::hidden(mounts, |m| may_stop_fstype(&m.fstype));
        let mut outside = HashSet::new();
        let mut under = Vec::new();
        for m in mounts {
            match m.mount_point.strip_prefix(source) {
                Err(_) => {
                    outside.insert(m.id);
                }
                Ok(rel) if !rel.as_os_str().is_empty() && may_stop_fstype(&m.fstype) && !covered.contains(&m.id) => {
                    under.push((rel.to_path_buf(), m));
                }
                Ok(_) => {}
            }
        }
        let mut places = Vec::new();
        for (rel, m) in &under {
            let (Some(dir), Some(name)) = (rel.parent(), rel.file_name()) else {
                continue;
            };
            if under.iter().any(|(other, _)| dir.starts_with(other)) {
                continue;
            }
            let Ok(st) = self.stat_under_source(dir) else {
                continue;
            };
            places.push(LanePlace {
                dir: (st.st_dev, st.st_ino),
                name: name.as_bytes().into(),
                dev: m.st_dev(),
                id: m.id,
                fstype: m.fstype.clone(),
            });
        }
        LaneMounts {
            places,
            covered,
            outside,
        }
    }

    /// The mount table changed ([`crate::mount_table`]): learns the
    /// filesystems that can stop answering mounted under the source since
    /// (before any lookup enters one, so that one already stopped gets its
    /// lane too), and forgets the mount points whose mount is gone, moved
    /// elsewhere (`mount --move`, out of the source or to another place in
    /// it, even onto a directory of the same name), or mounted over. A
    /// record whose mount is still under the source but could not be
    /// placed (its directory's `stat` failed, or it lies under another
    /// such mount, where only a crossing records it) is kept.
    pub fn relearn_lanes(&self) {
        let Ok(mounts) = crate::mountinfo::mounts() else {
            return;
        };
        let Some(source) = self.source_path(&mounts) else {
            return;
        };
        let l = &self.lanes;
        if !l.any.load(Ordering::Relaxed)
            && !mounts
                .iter()
                .any(|m| may_stop_fstype(&m.fstype) && m.mount_point.starts_with(&source))
        {
            // Nothing recorded, nothing to learn.
            return;
        }
        let found = self.lane_mounts(&mounts, &source);
        for p in &found.places {
            if l.placed(p) {
                continue;
            }
            self.note_lane(
                p.dir,
                &p.name,
                (p.dev, p.id),
                format_args!("{}, mounted since the start", p.fstype),
            );
        }
        let placed: HashSet<u64> = found.places.iter().map(|p| p.id).collect();
        let at: HashSet<((u64, u64), &[u8], u64)> = found.places.iter().map(|p| (p.dir, &*p.name, p.id)).collect();
        let elsewhere = |dir: (u64, u64), name: &[u8], id: u64| {
            id != 0
                && (found.covered.contains(&id)
                    || found.outside.contains(&id)
                    || (placed.contains(&id) && !at.contains(&(dir, name, id))))
        };
        self.drop_records(
            |dir, name, _, id| elsewhere(dir, name, id),
            "mount points under the source moved away or mounted over: their names leave the lanes",
        );
        *l.checked.lock() = Some(std::time::Instant::now());
        self.forget_unmounted_in(&mounts);
    }

    /// The source's path now (its root descriptor's, which follows a
    /// rename of a directory above it).
    ///
    /// Decoded as `mountinfo::mounts` decodes the table (lossily), so that
    /// a component that is not UTF-8 compares equal on both sides; and
    /// only when the mount the root is on is in `mounts` at a prefix of
    /// that path, so that a path the table cannot be matched with (the
    /// source deleted, or reached through another root) makes no mount
    /// look outside the source.
    fn source_path(&self, mounts: &[crate::mountinfo::MountEntry]) -> Option<std::path::PathBuf> {
        use std::os::fd::AsRawFd;
        let root = self.table.path_fd(&self.root).ok()?;
        let raw = std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd())).ok()?;
        let path = crate::mountinfo::decoded_as_in_table(&raw);
        let id = sys::mount_id_of(root.as_fd()).ok()?;
        mounts
            .iter()
            .any(|m| m.id == id && path.starts_with(&m.mount_point))
            .then_some(path)
    }

    /// The thread that keeps the lanes of `fs` in step with the mount
    /// table: [`Fs::relearn_lanes`] after each change `watch` reports (at
    /// most 10 times a second), until a stopper of `watch` fires (at
    /// unmount; seen at once, in a wait or a pause) or the filesystem is
    /// gone. It holds the filesystem only while it relearns, and is not
    /// joined at unmount: a `stat` of a mount point's directory that
    /// waited on a filesystem that stopped answering would otherwise hold
    /// the unmount too. (Such a `stat` keeps the filesystem, and so its
    /// descriptors of the source, until it returns: a source that is
    /// itself a network filesystem whose server went away stays busy for
    /// its own unmount until then.)
    pub fn lane_mounts_worker(fs: &std::sync::Weak<Fs>, watch: &crate::mount_table::MountTableWatch) {
        use crate::mount_table::Seen;
        let failed = |e: std::io::Error| {
            tracing::warn!(
                "watching the mount table failed ({e}): filesystems mounted under the source from now on get lanes only once entered"
            );
        };
        loop {
            match watch.wait(None) {
                Ok(Seen::Quiet) => {}
                Ok(Seen::Stopped) => return,
                Ok(Seen::Changed) => {
                    let Some(fs) = fs.upgrade() else {
                        return;
                    };
                    fs.relearn_lanes();
                    drop(fs);
                    // A burst of changes (a container starting) is learned
                    // once more at the end of the pause, not once each.
                    match watch.stopped_within(std::time::Duration::from_millis(100)) {
                        Ok(false) => {}
                        Ok(true) => return,
                        Err(e) => return failed(e),
                    }
                }
                Err(e) => return failed(e),
            }
        }
    }

    /// `fstatat` of `rel` (relative, a directory) under the source root.
    fn stat_under_source(&self, rel: &Path) -> FsResult<libc::stat> {
        let root = self.table.path_fd(&self.root)?;
        if rel.as_os_str().is_empty() {
            return sys::fstatat(root.as_fd(), c".", libc::AT_SYMLINK_NOFOLLOW);
        }
        sys::fstatat(
            root.as_fd(),
            &sys::cstr(rel.as_os_str().as_bytes())?,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    }

    /// A lookup of `name` under `parent` crossed into the filesystem on
    /// `dev`, mounted as `mount` says (module docs).
    pub(super) fn note_crossing(&self, parent: &Inode, name: &[u8], dev: u64, mount: sys::MountOf) {
        if may_stop(mount.f_type) {
            let what = format_args!("statfs type {:#x}", mount.f_type);
            self.note_lane(parent.key, name, (dev, mount.mount_id), what);
        } else if self.recorded(parent, name).is_some() {
            // Mounted over by one that answers: the name leaves the lane.
            let mut crossings = self.lanes.crossings.write();
            if let Some(names) = crossings.get_mut(&parent.key) {
                names.retain(|(n, _, _)| &**n != name);
                if names.is_empty() {
                    crossings.remove(&parent.key);
                }
            }
        }
    }

    /// Gives the filesystem on `dev`, mounted (mount id `id`) on `name` in
    /// the directory `dir` (`(st_dev, st_ino)`), a lane.
    fn note_lane(&self, dir: (u64, u64), name: &[u8], (dev, id): (u64, u64), what: std::fmt::Arguments<'_>) {
        if dev == self.root.key.0 {
            return;
        }
        let l = &self.lanes;
        // Relaxed: see `Lanes::may_be_lane`.
        l.dev_bits.fetch_or(bit(dev), Ordering::Relaxed);
        l.dir_bits.fetch_or(bit(dir_word(dir)), Ordering::Relaxed);
        if l.devs.write().insert(dev) {
            tracing::info!(
                name = %String::from_utf8_lossy(name),
                dev,
                "a filesystem under the source that can stop answering ({what}): its requests get a lane of their own"
            );
        }
        let mut crossings = l.crossings.write();
        let recorded: usize = crossings.values().map(Vec::len).sum();
        let names = crossings.entry(dir).or_default();
        match names.iter_mut().find(|(n, _, _)| &**n == name) {
            // Mounted over since: the one on top.
            Some(known) => (known.1, known.2) = (dev, id),
            None if recorded < MAX_CROSSINGS => names.push((name.into(), dev, id)),
            None => {}
        }
        if names.is_empty() {
            crossings.remove(&dir);
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
        let inode = self.table.get(ino).ok()?;
        if let Some(dev) = name.and_then(|n| self.crossing(&inode, n)) {
            return Some(dev);
        }
        let dev = inode.key.0;
        // The source's own device never has a lane (`note_lane`): no
        // look at the filter, whose bit it may share with a lane's.
        (dev != self.root.key.0 && l.may_be_lane(dev) && l.devs.read().contains(&dev)).then_some(dev)
    }

    /// Whether an object on device `a` and a directory on device `b` are
    /// on two filesystems one of which has a lane: a LINK or RENAME
    /// between them fails with `EXDEV` in the source, and is answered so
    /// without a look into the one that may not answer. Only then: on an
    /// overlayfs source a file's `st_dev` may differ from its directory's
    /// while both are on the one filesystem.
    pub(super) fn across_lanes(&self, a: u64, b: u64) -> bool {
        let l = &self.lanes;
        a != b && l.any.load(Ordering::Relaxed) && (l.may_be_lane(a) || l.may_be_lane(b)) && {
            let devs = l.devs.read();
            devs.contains(&a) || devs.contains(&b)
        }
    }

    /// The device `name` under `dir` leads to, if it is the mount point of
    /// a filesystem that can stop answering, still mounted (by the mount
    /// table read at most [`RECHECK`] ago).
    pub(super) fn crossing(&self, dir: &Inode, name: &[u8]) -> Option<u64> {
        self.recorded(dir, name)?;
        self.forget_unmounted(false);
        self.recorded(dir, name)
    }

    /// [`crossing`](Self::crossing) for an UNLINK, RMDIR or RENAME, which
    /// must not `stat` the name if it is a mount point: the mount table is
    /// read again first, whenever it was read last (these requests are
    /// rare, and a name unmounted a moment ago is a plain entry again).
    pub(super) fn mount_point_now(&self, dir: &Inode, name: &[u8]) -> bool {
        if self.recorded(dir, name).is_none() {
            return false;
        }
        self.forget_unmounted(true);
        self.recorded(dir, name).is_some()
    }

    /// The device recorded for the mount point `name` under `dir`, as
    /// recorded (the mount table not read).
    fn recorded(&self, dir: &Inode, name: &[u8]) -> Option<u64> {
        let l = &self.lanes;
        if !l.any.load(Ordering::Relaxed) || !l.may_hold_crossings(dir.key) {
            return None;
        }
        l.crossings
            .read()
            .get(&dir.key)?
            .iter()
            .find(|(n, _, _)| &**n == name)
            .map(|&(_, dev, _)| dev)
    }

    /// Forgets the mount points' names no longer in the mount table, at
    /// most every [`RECHECK`] unless `now`: after an unmount
    /// (a lazy one of a dead NFS mount, say) the name leads to what is
    /// under it, and its requests must not wait in the lane of the
    /// filesystem gone. Reading the table asks no filesystem anything.
    fn forget_unmounted(&self, now: bool) {
        let l = &self.lanes;
        {
            let mut checked = l.checked.lock();
            if !now && checked.is_some_and(|t| t.elapsed() < RECHECK) {
                return;
            }
            *checked = Some(std::time::Instant::now());
        }
        if let Ok(mounts) = crate::mountinfo::mounts() {
            self.forget_unmounted_in(&mounts);
        }
    }

    /// [`forget_unmounted`](Self::forget_unmounted) by the table `mounts`.
    fn forget_unmounted_in(&self, mounts: &[crate::mountinfo::MountEntry]) {
        // A record is kept while its mount is in the table (its id, with
        // its device: an id the kernel gave a later mount of another
        // filesystem does not keep it) on a directory of its name (a mount
        // moved elsewhere keeps its id). A record of id 0 (the kernel could
        // not tell it at the crossing) is kept while its device is mounted
        // on a directory of its name.
        let mounted: HashSet<(u64, u64, &[u8])> = mounts
            .iter()
            .flat_map(|m| {
                let name = m.mount_point.file_name().map_or(&[][..], |n| n.as_bytes());
                [(m.id, m.st_dev(), name), (0, m.st_dev(), name)]
            })
            .collect();
        let stale = |name: &[u8], dev: u64, id: u64| !mounted.contains(&(id, dev, name));
        // Only the names: a filesystem unmounted lazily keeps serving the
        // inodes the kernel holds under it (a process's working directory,
        // an open file), whose requests stay in its lane.
        self.drop_records(
            |_, name, dev, id| stale(name, dev, id),
            "mount points under the source no longer mounted: their names leave the lanes",
        );
    }

    /// Drops the records of mount points (`doomed(dir, name, dev, id)`),
    /// and logs their names with `why` if there were any: looked for under
    /// the read lock first, so that a table read that finds nothing to
    /// drop takes no write lock.
    fn drop_records(&self, doomed: impl Fn((u64, u64), &[u8], u64, u64) -> bool, why: &str) {
        let l = &self.lanes;
        let any = l
            .crossings
            .read()
            .iter()
            .any(|(&dir, names)| names.iter().any(|(n, dev, id)| doomed(dir, n, *dev, *id)));
        if !any {
            return;
        }
        let mut crossings = l.crossings.write();
        let mut gone = Vec::new();
        for (&dir, names) in crossings.iter_mut() {
            names.retain(|(n, dev, id)| {
                let keep = !doomed(dir, n, *dev, *id);
                if !keep {
                    gone.push(String::from_utf8_lossy(n).into_owned());
                }
                keep
            });
        }
        crossings.retain(|_, names| !names.is_empty());
        drop(crossings);
        tracing::info!(?gone, "{why}");
    }
}
