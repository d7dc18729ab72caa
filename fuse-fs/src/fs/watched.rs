//! Coherence with the source by watching it: what a source change
//! reported by the watcher ([`crate::watch`]) does to the caches.
//!
//! # Design
//! Each event names an object by file handle; the inode table's handle
//! index finds the inode rcufs knows for it, or nothing (an object rcufs
//! never looked up, or one it has forgotten: nothing of it is cached, and
//! the event costs that one hash lookup). For a known object:
//! - a name created, deleted or moved in a directory: the dcache entry under
//!   it (positive or negative, and everything below it) is removed, the
//!   directory's attributes expire and its kept listing is forgotten (the
//!   next OPENDIR reads the source and answers without `FOPEN_KEEP_CACHE`,
//!   so the kernel drops its copy of the listing); with `--kernel-cache`,
//!   the kernel's entry and the directory's attributes are invalidated;
//! - attributes changed: the cached attributes expire (kernel: attributes);
//! - data changed: the cached pages are dropped and the attributes expire
//!   (kernel: attributes and pages).
//!
//! A queue overflow (events lost) drops everything under the mount, as a
//! root `rcufs drop --all` does, and is counted and logged once. So does a
//! batch that could not be applied (a panic while applying it), counted in
//! `failed_batches`; the watch goes on. A mount attached or detached under
//! the source arrives as the name changed at its mount point (what the
//! caches hold under either directory stays true of it) or, where it could
//! not be placed, drops everything too (`watch/mounts.rs`).
//!
//! # What the watch cannot see
//! Kept for the watch's interval (an hour) is only what an event would
//! correct ([`Fs::covered`]): an inode in the handle index, on a
//! filesystem that is marked, while the watch runs. Everything else is
//! re-checked after `--revalidate` as with `ttl` coherence, and the kernel
//! is given that interval for it ([`Fs::entry_ttl`], [`Fs::attr_ttl`]: a
//! name's timeout is its directory's interval, as name events are the
//! directory's):
//! - an inode without a file handle (`Backing::ByName`: a FUSE filesystem
//!   under the source, or a forced watch of a source without handles);
//! - an inode on a filesystem under the source that could not be marked;
//! - every inode once the watch has failed ([`Fs::watch_failed`]: its
//!   thread ended on an error). Then every cache is dropped as on an
//!   overflow: the kernel and rcufs held entries for the hour, and events
//!   since the last batch applied are lost.
//!
//! Replies choose their timeouts without a table lookup while everything
//! is covered ([`Fs::all_covered`]); once one inode is not, each reply
//! looks its inode up.
//!
//! # The race with lookups, and the change sequence
//! An event is read after the change is visible in the source. A request
//! that read the source *before* the change but stores what it read *after*
//! the watcher applied the event would cache the old state, and with the
//! watch there is no timeout to correct it. So every batch of events that
//! touches something known bumps a change sequence (`seq`) before it is
//! applied, and every path that reads the source and then caches the
//! result takes the sequence before reading and checks it after storing
//! ([`Fs::source_seq`], [`Fs::source_changed_since`]); if it moved, the path
//! undoes its store (removes the dcache entry, expires the attributes).
//! Either the watcher's removal comes after the store (and removes it) or
//! the store's check comes after the bump (and sees it): the bump and the
//! check are each followed/preceded by a `SeqCst` fence, the store-buffer
//! pattern (Dekker). The sequence is global, not per object: a lookup that
//! overlaps any applied change is not cached, which under heavy churn in
//! watched directories costs only cache insertions, never correctness.
//! A name event also counts as a change of its directory's names
//! ([`Inode::change_names`], as a change through the mount does), so a
//! lookup of a name that read the source before the event skips caching
//! it ([`Inode::cache_if_unchanged`]) instead of caching the old state for
//! the moment until its check of the sequence undoes it.
//!
//! An event for an object that is not known is dropped (most events under
//! a busy filesystem are), but the object may be known a moment later: a
//! lookup that read it before the change interns it after the watcher
//! looked for it, and its attributes (a directory's too, when a name in
//! it changed) would be kept for the hour. So the paths that read the
//! source and may make a new inode count themselves in `interning`
//! ([`Fs::interning`]) from before their read until their checks. The
//! watcher loads that count before it looks a batch's objects up; if a
//! read was in flight, it records the handles it did not find in `lost`
//! and looks them up again; each read, once its inode is in the handle
//! index, looks its handle up in `lost` ([`Fs::lost_event_for`]) and then
//! checks the sequence. A read whose check of `lost` comes before the
//! watcher's record had listed its inode before the second look, which
//! finds it and applies the event; a read whose check comes after finds
//! its handle recorded; and a read counted after the watcher's load read
//! the source after the change. `lost` is emptied by a batch that finds no
//! read in flight (nobody can need it then); if it grows past
//! [`LOST_MAX`], the watcher bumps the sequence instead and empties it (a
//! read checks `lost` before the sequence, so it sees one or the other).
//! Unlike a bump, this costs the reads in flight nothing when the unknown
//! objects are not theirs (churn elsewhere on the filesystem).
//!
//! Kernel invalidations (`--kernel-cache`) go through the same bounded
//! queue as drops; the watcher waits for room rather than dropping one
//! (with the watch, the kernel's timeouts are an hour), and gives up after
//! 5 s, counting `inval_dropped`.
//!
//! # Catching up before answering (`--kernel-cache`)
//! The kernel discards a GETATTR reply if an `inval_inode` of the same
//! inode lands while it is in flight (`fuse_change_attributes`: the
//! inode's `attr_version` moved), and a read that asked for it goes on
//! with the old size (zeros past a new, shorter end). So a change must not
//! have its invalidations sent *after* a request that already saw it was
//! answered: a process that changes a file in the source and then opens
//! it through the mount would otherwise race the watcher's invalidation
//! of its own, already seen, change with its first read. Two requests see
//! changes before the watcher does, and both catch up first
//! ([`Fs::catch_up_with_source`]: the watcher reads and applies everything
//! queued, bounded by [`SYNC_WAIT`]):
//! - an open that finds the file's stamp moved; its answer is then kept
//!   until the inode's queued invalidation, moved to the front of its lane,
//!   has been sent (`fuse.rs`);
//! - a drop, whose answer already waits for every invalidation queued
//!   before its own.
//!
//! What is left is a read through a descriptor opened before the change,
//! overlapping the change's own invalidation: it may still see the old
//! size once (SEMANTICS.md, "Limits").
//!
//! # Attributes lent to the kernel (the default mode)
//! In the default mode the kernel keeps no entries, and without the watch
//! no attributes: every LOOKUP reply's attributes are stale on arrival, so
//! a `stat` of `d/f` is five round trips (the root's attributes, LOOKUP
//! and GETATTR of `d`, LOOKUP and GETATTR of `f`). With the watch, replies
//! lend the kernel their attributes for [`LENT_ATTR_TTL`] (one to two
//! jiffies once the kernel rounds it), so the permission check or `stat` that follows a LOOKUP uses
//! its reply: two round trips. Entries stay at 0, so every lookup still
//! reaches the dcache. The kernel then holds attributes for a millisecond,
//! and they are invalidated as `--kernel-cache`'s copies are:
//! - an applied event invalidates the kernel's attributes of the object
//!   (and of the directory, for a name), as in kernel-cache mode;
//! - a drop invalidates the attributes of every inode under the directory
//!   the kernel knows, and answers once they are sent;
//! - an open that finds the file's attributes changed since rcufs last had
//!   them makes the kernel forget its copy before the open is answered
//!   (the LOOKUP of the same `open` may have lent the old ones), and so
//!   does every other open of the file until it has
//!   ([`crate::inode::PendingAttrInval`]: the others find the new
//!   attributes already stored, but their LOOKUPs may have been lent the
//!   old ones).
//!
//! Without them a lent copy would be stale for at most two jiffies, except for
//! POSIX ACLs: the kernel keeps a cached ACL until it forgets it, which it
//! does when a LOOKUP revalidates a dentry, when a permission check finds
//! the attributes stale, or on an invalidation, and lent attributes skip
//! the second. (This machine's kernel, 6.18, asks for the ACLs at every
//! walk anyway: reading `d/f` 1,000 times as a non-owner sent 3,000
//! GETXATTRs and 64 GETATTRs. Nothing in the protocol promises that.) The
//! invalidation of an applied attribute event, which a `setfacl` in the
//! source is, bounds it on a kernel that keeps them. So lending stops for
//! good, logged, the first time the invalidation queue drops anything
//! (`inval.rs`: a full queue): from then on replies lend nothing, and the
//! kernel's next check of each inode asks again and forgets the ACL. With
//! `ttl` coherence nothing reports changes, and nothing is lent.

use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use super::{Caller, Fs, ROOT_INO};
use crate::inode::Inode;
use crate::inval::Inval;
use crate::protocol::DropMode;
use crate::watch::{Event, Handle, Marker, Syncer};

/// How the mount keeps up with changes made directly in the source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Coherence {
    /// Re-check the source after the revalidation interval.
    #[default]
    Ttl,
    /// Watch the source (fanotify): every change reported is applied at once.
    Watch,
}

impl Coherence {
    /// The name used in options and the stats.
    pub fn name(self) -> &'static str {
        match self {
            Coherence::Ttl => "ttl",
            Coherence::Watch => "watch",
        }
    }
}

/// The revalidation interval in watch mode of what the watch sees
/// ([`Fs::covered`]): the kernel's entry and attribute timeouts
/// (`--kernel-cache`) and rcufs's own re-checks. A safety net only:
/// changes are applied when their events arrive.
pub const WATCH_REVALIDATE: Duration = Duration::from_secs(3600);

/// The most handles of unknown objects kept for the reads in flight
/// before the watcher bumps the change sequence instead (see the module
/// docs).
pub const LOST_MAX: usize = 4096;

/// How long the watcher waits for room in the kernel-invalidation queue.
const INVAL_WAIT: Duration = Duration::from_secs(5);

/// How long the default mode with the watch lends the kernel the
/// attributes of a reply (the kernel keeps them to the end of the next
/// jiffy: 4-8 ms at `HZ=250`); see the module docs.
pub const LENT_ATTR_TTL: Duration = Duration::from_millis(1);

/// How long a request waits for the watcher to catch up (a round takes
/// well under a millisecond unless the watcher is waiting for room in the
/// invalidation queue, or stalled).
pub const SYNC_WAIT: Duration = Duration::from_millis(50);

/// The watch's state and counters.
#[derive(Debug, Default)]
pub struct Watched {
    /// The change sequence (see the module docs).
    seq: AtomicU64,
    /// Reads of the source that may make a new inode, in flight (see the
    /// module docs).
    interning: AtomicUsize,
    /// Events read (after the daemon's own were skipped).
    events: AtomicU64,
    /// Events about objects rcufs knows (applied).
    applied: AtomicU64,
    /// Batches that touched something known (each bumped `seq`).
    batches: AtomicU64,
    /// Events for objects not known, recorded in `lost` and looked up
    /// again because a read of the source was in flight (see the module
    /// docs).
    unknown_rechecked: AtomicU64,
    /// The handle keys of those objects (see the module docs).
    pub(super) lost: Mutex<HashSet<Box<[u8]>>>,
    /// Queue overflows (everything dropped).
    overflows: AtomicU64,
    /// Mounts attached, detached or moved under the source where they
    /// could be placed (their mount points' entries forgotten).
    mount_changes: AtomicU64,
    /// Batches of mount changes that could not be placed (everything
    /// dropped).
    mount_drops: AtomicU64,
    /// Batches that could not be applied (everything dropped).
    failed_batches: AtomicU64,
    /// Kernel invalidations the watcher could not queue.
    inval_dropped: AtomicU64,
    /// How to mark filesystems mounted under the source after the mount
    /// started, and the filesystems marked (or found unwatchable) so far,
    /// by device and unique mount id (a filesystem mounted in place of a
    /// gone one may have its device number, never its mount id).
    marker: OnceLock<(Marker, Mutex<Marks>)>,
    /// Filesystems under the source that could not be watched (their
    /// devices are `Marked::Failed` in `marker`).
    unwatched: AtomicU64,
    /// Those devices, readable without the marks' mutex (appended under
    /// it, before `unwatched` counts them).
    unwatched_devs: parking_lot::RwLock<Vec<u64>>,
    /// Set once the watch has stopped (its thread ended on an error): it
    /// sees nothing any more.
    failed: AtomicBool,
    /// How to wait for the watcher to catch up.
    syncer: OnceLock<Syncer>,
    /// Catch-ups asked for, and those that timed out.
    syncs: AtomicU64,
    sync_timeouts: AtomicU64,
    /// Set once the invalidation queue dropped something: the default mode
    /// lends no more attributes (see the module docs).
    lending_stopped: AtomicBool,
    /// Replies that lent nothing because they overlapped a change, and
    /// lending replies a change overtook after they were built
    /// (`fs/lease.rs`).
    pub(super) unlent_replies: AtomicU64,
    pub(super) overlapped_replies: AtomicU64,
}

/// The handle-index key of the object an event is about (the directory,
/// for a name event).
fn handle_key_of(ev: &Event<'_>) -> Option<Box<[u8]>> {
    let h = match ev {
        Event::Overflow | Event::Mounts | Event::Mount { .. } => return None,
        Event::Name { dir, .. } => dir,
        Event::Attrib(h) | Event::Data(h) => h,
    };
    Some(crate::inode::InodeTable::handle_key(h.fsid, h.handle_type, h.bytes))
}

/// The filesystems under the source marked (or found unwatchable), by
/// device number and unique mount id.
type Marks = HashMap<(u64, u64), Marked>;

/// A filesystem under the source and its mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marked {
    /// Marked by the watch before the mount started.
    AtStart,
    /// Marked when a lookup first entered it.
    Later,
    /// Could not be marked.
    Failed,
}

/// A read of the source counted in `Watched::interning`.
pub(super) struct Interning<'a>(Option<&'a AtomicUsize>);

impl Drop for Interning<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.0 {
            // SeqCst: after the reader's check of the sequence; pairs with
            // the load in `apply_source_events`.
            n.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// What one event does.
enum Action<'a> {
    Name(Arc<Inode>, &'a [u8]),
    Attrib(Arc<Inode>),
    Data(Arc<Inode>),
}

impl Fs {
    pub(super) fn watching(&self) -> bool {
        self.cfg.coherence == Coherence::Watch
    }

    /// Whether the watch reports the changes of `inode`'s source object, so
    /// that what was read of it may be kept for the watch's interval: the
    /// watch is running, the inode is in the handle index (the watcher
    /// finds objects by handle), and its filesystem is marked. Otherwise
    /// it is re-checked after `--revalidate`, as with `ttl` coherence (see
    /// the module docs, "What the watch cannot see").
    pub(crate) fn covered(&self, inode: &Inode) -> bool {
        self.watching()
            && !self.watched.failed.load(Ordering::Relaxed)
            && inode.indexed()
            && !self.on_unwatched_filesystem(inode.key.0)
    }

    /// Whether every inode is [`covered`](Self::covered) (so a reply need
    /// not look its inode up to choose its timeouts).
    pub(crate) fn all_covered(&self) -> bool {
        self.watching()
            && !self.watched.failed.load(Ordering::Relaxed)
            && self.table.unindexed() == 0
            && self.watched.unwatched.load(Ordering::Relaxed) == 0
    }

    /// [`covered`](Self::covered) of the inode with node id `ino` (a node
    /// id no longer known: not covered); no table lookup while everything
    /// is covered.
    pub(crate) fn covered_ino(&self, ino: u64) -> bool {
        self.watching() && (self.all_covered() || self.table.get(ino).is_ok_and(|i| self.covered(&i)))
    }

    fn on_unwatched_filesystem(&self, dev: u64) -> bool {
        // Acquire: pairs with the Release increment in `entered_filesystem`,
        // after the device was listed.
        if self.watched.unwatched.load(Ordering::Acquire) == 0 {
            return false;
        }
        // Not the marks' mutex, which a lookup holds while it marks a
        // filesystem: this is on every cache hit's freshness check.
        self.watched.unwatched_devs.read().contains(&dev)
    }

    /// The watch has stopped for good (`why`): from now on every object is
    /// re-checked after `--revalidate`, and what was kept for the watch's
    /// interval is dropped, in rcufs and in the kernel, as a queue overflow
    /// drops it.
    pub fn watch_failed(&self, why: &str) {
        if self.watched.failed.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::error!(
            "the source watch stopped: {why}; every cache of the mount is dropped, and changes made \
             directly in the source are seen after {:?} (--revalidate) from now on",
            self.cfg.revalidate
        );
        self.drop_everything("after the watch stopped");
    }

    /// A batch of events could not be applied (a panic while applying it):
    /// its changes may be missing from the caches, so everything is
    /// dropped, as after a queue overflow. The watch goes on.
    pub fn watch_batch_failed(&self) {
        self.watched.failed_batches.fetch_add(1, Ordering::Relaxed);
        tracing::error!("a panic while applying source events: every cache of the mount is dropped; the watch goes on");
        self.drop_everything("after a failed batch of source events");
    }

    /// Drops every cache of the mount as a root `rcufs drop --all` does,
    /// and queues the kernel's invalidations (waiting for room).
    fn drop_everything(&self, when: &str) {
        // As before an applied batch: a read of the source in flight that
        // stores after this drop sees the change sequence moved.
        self.bump_seq();
        match self.drop_dir(ROOT_INO, DropMode::All, Caller::default()) {
            Ok(out) => {
                if self.kernel_keeps_attrs() && !out.inval.is_empty() {
                    let dropped = self.inval.push_waiting(out.inval, INVAL_WAIT);
                    if dropped > 0 {
                        self.watched.inval_dropped.fetch_add(dropped, Ordering::Relaxed);
                    }
                }
            }
            Err(e) => tracing::error!("dropping the caches {when}: {e}"),
        }
    }

    /// Whether replies lend the kernel their attributes (the default mode
    /// with the watch, until the invalidation queue first drops something;
    /// see the module docs).
    pub(crate) fn lends_attrs(&self) -> bool {
        if self.cfg.kernel_cache || !self.watching() || self.watched.lending_stopped.load(Ordering::Relaxed) {
            return false;
        }
        if self.inval.has_overflowed() {
            if !self.watched.lending_stopped.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "a kernel invalidation was dropped (its queue was full): the kernel is no longer lent \
                     attributes, so that its copies are all asked for again"
                );
            }
            return false;
        }
        true
    }

    /// Counts a read of the source that may make a new inode until the
    /// guard drops (see the module docs): taken before [`source_seq`](Self::source_seq),
    /// dropped after [`source_changed_since`](Self::source_changed_since).
    pub(super) fn interning(&self) -> Interning<'_> {
        if !self.watching() {
            return Interning(None);
        }
        // SeqCst: before the caller's load of the sequence and its read of
        // the source; pairs with the load in `apply_source_events`.
        self.watched.interning.fetch_add(1, Ordering::SeqCst);
        Interning(Some(&self.watched.interning))
    }

    /// After a read counted by [`interning`](Self::interning) listed
    /// `inode` in the handle index, and before its check of the sequence:
    /// whether the watcher dropped an event for it meanwhile, not knowing
    /// it yet (see the module docs). Then what was read is out of date.
    pub(super) fn lost_event_for(&self, inode: &Inode) -> bool {
        if !self.watching() {
            return false;
        }
        let lost = self.watched.lost.lock();
        !lost.is_empty() && inode.handle_key().is_some_and(|k| lost.contains(&k))
    }

    /// The change sequence, taken before reading the source.
    pub(super) fn source_seq(&self) -> u64 {
        if !self.watching() {
            return 0;
        }
        self.watched.seq.load(Ordering::SeqCst)
    }

    /// After storing what was read from the source: whether a source change
    /// was applied since `before` (then the store must be undone).
    pub(super) fn source_changed_since(&self, before: u64) -> bool {
        if !self.watching() {
            return false;
        }
        // SeqCst fence: orders the caller's store into a cache before this
        // load; pairs with the fence after the bump in `apply_source_events`.
        fence(Ordering::SeqCst);
        self.watched.seq.load(Ordering::Relaxed) != before
    }

    /// Stores freshly read attributes, unless a source change was applied
    /// since `before` (taken before the `stat`): then they expire instead.
    pub(super) fn store_attr(&self, inode: &Inode, st: libc::stat, before: u64) {
        inode.set_attr(st);
        if self.source_changed_since(before) {
            inode.expire_attr();
        }
    }

    /// Reads `dir`'s attributes (stored) and whole listing from `fd` and
    /// keeps the listing (`listing.rs`), unless a source change was applied
    /// since before the attributes were read: then the kept listing is
    /// forgotten again (the watcher may have forgotten the directory's
    /// listing before this one was kept). The listing read still serves
    /// the handle it was read for, as a snapshot.
    pub(super) fn read_listing(&self, fd: BorrowedFd<'_>, dir: &Inode) -> crate::error::FsResult<crate::listing::Read> {
        let before = self.source_seq();
        let st = crate::sys::fstat(fd)?;
        self.store_attr(dir, st, before);
        let read = self.listings.read(fd, dir, &st)?;
        if self.source_changed_since(before) {
            dir.set_listing(None);
        }
        Ok(read)
    }

    /// Lets the filesystem mark filesystems mounted under the source later
    /// (`devs`: the devices and unique mount ids the watch marked at the
    /// start).
    pub fn set_watch_marker(&self, marker: Marker, devs: impl IntoIterator<Item = (u64, u64)>) {
        let devs = devs.into_iter().map(|d| (d, Marked::AtStart)).collect();
        let _ = self.watched.marker.set((marker, Mutex::new(devs)));
    }

    /// Lets requests wait for the watcher to catch up.
    pub fn set_watch_syncer(&self, syncer: Syncer) {
        let _ = self.watched.syncer.set(syncer);
    }

    /// With the watch and `--kernel-cache`: waits (at most [`SYNC_WAIT`])
    /// until the watcher has applied every event queued in the source's
    /// watch before this call (see the module docs). Must not be called
    /// holding a lock the watcher takes (an inode's stamps, a directory's
    /// name-change lock, the caches'), nor from the watcher's own thread.
    pub(super) fn catch_up_with_source(&self) {
        if !self.watching() || !self.cfg.kernel_cache || self.watched.failed.load(Ordering::Relaxed) {
            return;
        }
        let Some(syncer) = self.watched.syncer.get() else {
            return;
        };
        self.watched.syncs.fetch_add(1, Ordering::Relaxed);
        if !syncer.sync(crate::fault::sync_wait().unwrap_or(SYNC_WAIT)) {
            self.watched.sync_timeouts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A lookup found `name` under `dir` on device `dev`, which differs from
    /// its parent's: a mount under the source. Marks its filesystem if the
    /// watch has not yet; one that cannot be marked is logged and counted
    /// (its changes are then seen only through a drop or the interval).
    /// Returns whether the caller must read again what it read: the
    /// filesystem was marked after the mount started, perhaps after that
    /// read, whose result a change made before the mark would not correct.
    /// (A device is listed only once its mark is made, so a lookup that
    /// finds it listed finds its mark made; only lookups that cross into the
    /// filesystem, its root's, read again.)
    ///
    /// The mark is made outside the marks' lock when the mount's unique id
    /// is known: making it opens the filesystem's root, which a filesystem
    /// that stopped answering holds forever, and the lock is taken by every
    /// lookup that crosses into any filesystem under the source and by the
    /// watcher. Two lookups that cross at once may both mark (adding the
    /// same mark twice changes nothing); the first to list the mount is
    /// kept. A stale entry that a mark listed after its mount left (the
    /// watcher forgot the mount meanwhile) names a mount id that is never
    /// used again, so no lookup that knows its mount's id matches it.
    /// Without the id, entries are matched by device, which a later
    /// filesystem may reuse: such a lookup matches only the entries the
    /// watcher's forgetting is ordered with (those made at the start, and
    /// those made, as its own mark is then, under the lock), and so may
    /// mark a filesystem again, or list it as unwatched if its name went
    /// meanwhile (a cost in caching only).
    pub(super) fn entered_filesystem(&self, dir: BorrowedFd<'_>, name: &CStr, dev: u64) -> bool {
        let Some((marker, marks)) = self.watched.marker.get() else {
            return false;
        };
        // The mount the name leads to. Without its id (a kernel that gives
        // none, or the name gone since the lookup) any entry of the device
        // answers, as the device alone told filesystems apart before.
        let mount_id = crate::sys::mount_id_unique_at(dir, name).ok();
        let known = |devs: &Marks| match mount_id {
            Some(id) => devs.get(&(dev, id)).copied(),
            None => devs
                .iter()
                .find(|((d, id), m)| *d == dev && (*id == 0 || **m == Marked::AtStart))
                .map(|(_, m)| *m),
        };
        let mark = || crate::fault::mark_fails().map_or_else(|| marker.mark(dir, name), Err);
        let mut devs = marks.lock();
        if let Some(m) = known(&devs) {
            return m == Marked::Later;
        }
        let marked = if mount_id.is_some() {
            // Unlocked (see above).
            drop(devs);
            let marked = mark();
            devs = marks.lock();
            if let Some(m) = known(&devs) {
                // Another lookup listed the mount meanwhile: its entry
                // stands. Read again if either mark was made after the
                // mount started (this one, perhaps after the caller's read).
                return marked.is_ok() || m == Marked::Later;
            }
            marked
        } else {
            mark()
        };
        let key = (dev, mount_id.unwrap_or(0));
        devs.insert(key, if marked.is_ok() { Marked::Later } else { Marked::Failed });
        if marked.is_err() {
            // Listed before it is counted, under the marks' lock.
            self.watched.unwatched_devs.write().push(dev);
            self.watched.unwatched.fetch_add(1, Ordering::Release);
        }
        drop(devs);
        match marked {
            Ok(()) => {
                tracing::info!(name = %name.to_string_lossy(), dev, "watching a filesystem mounted under the source");
                true
            }
            Err(why) => {
                tracing::warn!(
                    name = %name.to_string_lossy(),
                    dev,
                    "cannot watch a filesystem mounted under the source ({why}): changes made directly there \
                     are seen after {:?} (--revalidate), as with coherence ttl",
                    self.cfg.revalidate
                );
                false
            }
        }
    }

    fn find(&self, h: &Handle<'_>) -> Option<Arc<Inode>> {
        self.table.find_handle(h.fsid, h.handle_type, h.bytes)
    }

    /// What `ev` does to a known object; None for an overflow and for
    /// an object not known.
    fn action_of<'e>(&self, ev: &'e Event<'e>) -> Option<Action<'e>> {
        match ev {
            Event::Overflow | Event::Mounts | Event::Mount { .. } => None,
            Event::Name { dir, name } => self.find(dir).map(|d| Action::Name(d, name)),
            Event::Attrib(h) => self.find(h).map(Action::Attrib),
            Event::Data(h) => self.find(h).map(Action::Data),
        }
    }

    /// Bumps the change sequence before a batch is applied.
    fn bump_seq(&self) {
        self.watched.seq.fetch_add(1, Ordering::SeqCst);
        // SeqCst fence: the bump is visible before anything after it
        // removes a cached entry or looks an object up; pairs with the
        // fence in `source_changed_since`.
        fence(Ordering::SeqCst);
    }

    /// Applies a batch of source events (the watcher thread calls this).
    pub fn apply_source_events(&self, events: &[Event<'_>]) {
        if events
            .iter()
            .any(|e| matches!(e, Event::Name { name, .. } if crate::fault::apply_panics(name)))
        {
            panic!("injected fault: applying a batch of {} source events", events.len());
        }
        let w = &self.watched;
        w.events.fetch_add(events.len() as u64, Ordering::Relaxed);
        // SeqCst: before the lookups below; pairs with the increment and
        // the decrement in `interning` (see the module docs).
        let interning = w.interning.load(Ordering::SeqCst);
        let mut overflow = false;
        let mut remounted = false;
        let mut mounts = Vec::new();
        let mut actions = Vec::new();
        let mut unknown = Vec::new();
        for ev in events {
            match self.action_of(ev) {
                Some(a) => actions.push(a),
                None if matches!(ev, Event::Overflow) => overflow = true,
                None if matches!(ev, Event::Mounts) => remounted = true,
                None if let Event::Mount { id, gone, placed } = ev => {
                    if *placed {
                        mounts.push((*id, *gone));
                    } else if self.table.holds_mount(*id) {
                        // Left from where the watch never saw it: what
                        // came from it cannot be placed.
                        remounted = true;
                    }
                }
                None => unknown.push(ev),
            }
        }
        let mut bumped = false;
        if interning == 0 {
            // No read in flight: none can need what was recorded.
            let mut lost = w.lost.lock();
            if !lost.is_empty() {
                lost.clear();
            }
        } else if !unknown.is_empty() {
            // A read in flight may be about to make an inode for one of
            // them: record them, then look them up again.
            let mut lost = w.lost.lock();
            if lost.len() + unknown.len() > LOST_MAX {
                // Bumped before emptied: a read that finds its record gone
                // checks the sequence after, and sees the bump.
                self.bump_seq();
                bumped = true;
                lost.clear();
            } else {
                lost.extend(unknown.iter().filter_map(|ev| handle_key_of(ev)));
            }
            drop(lost);
            w.unknown_rechecked.fetch_add(unknown.len() as u64, Ordering::Relaxed);
            actions.extend(unknown.into_iter().filter_map(|ev| self.action_of(ev)));
        }
        if actions.is_empty() && !overflow && !remounted && mounts.is_empty() {
            return;
        }
        crate::fault::watch_apply_delay();
        w.applied.fetch_add(actions.len() as u64, Ordering::Relaxed);
        w.batches.fetch_add(1, Ordering::Relaxed);
        if !bumped {
            self.bump_seq();
        }
        let kc = self.cfg.kernel_cache;
        // Attributes the kernel may hold: kernel-cache mode's, or lent ones.
        let attrs = self.kernel_keeps_attrs();
        let known = |i: &Inode| i.ino == ROOT_INO || i.nlookup() > 0;
        let mut inval = Vec::new();
        for a in &actions {
            match a {
                Action::Name(dir, name) => {
                    tracing::trace!(dir = dir.ino, name = %String::from_utf8_lossy(name), "source: name changed");
                    // Counted as a change of the directory's names, as the
                    // changes through the mount are: a lookup that read the
                    // source before it then skips caching what it read,
                    // rather than caching it and undoing that after its
                    // check of the sequence (stale for that moment).
                    dir.change_names(|| self.names.remove(dir, name));
                    dir.expire_attr();
                    dir.set_listing(None);
                    if kc && known(dir) {
                        inval.push(Inval::Entry {
                            parent: dir.ino,
                            name: name.to_vec(),
                        });
                    }
                    if attrs && known(dir) {
                        inval.push(Inval::Inode {
                            ino: dir.ino,
                            offset: -1,
                        });
                    }
                }
                Action::Attrib(i) => {
                    tracing::trace!(ino = i.ino, "source: attributes changed");
                    i.expire_attr();
                    if attrs && known(i) {
                        inval.push(Inval::Inode { ino: i.ino, offset: -1 });
                    }
                }
                Action::Data(i) => {
                    tracing::trace!(ino = i.ino, "source: data changed");
                    i.expire_attr();
                    self.data.drop_inode(i.ino);
                    *i.data_stamp.lock() = None;
                    if attrs && known(i) {
                        // Pages too in kernel-cache mode; the default mode
                        // lends only attributes.
                        let offset = if kc { 0 } else { -1 };
                        inval.push(Inval::Inode { ino: i.ino, offset });
                    }
                }
            }
        }
        drop(actions);
        if attrs && !inval.is_empty() {
            let dropped = self.inval.push_waiting(inval, INVAL_WAIT);
            if dropped > 0 {
                w.inval_dropped.fetch_add(dropped, Ordering::Relaxed);
            }
        }
        if overflow {
            // The watcher's thread alone applies events (and counts these).
            if w.overflows.load(Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "the source watch lost events (its queue overflowed): dropping every cache of the mount; \
                     further overflows are counted in the stats (coherence.overflows)"
                );
            }
            self.drop_everything("after a watch overflow");
            // Counted once handled: a reader of the stats that sees the
            // overflow sees the caches it dropped gone.
            w.overflows.fetch_add(1, Ordering::Relaxed);
        }
        if remounted {
            // The filesystems marked may be gone: forget the marks made (a
            // filesystem mounted later in a gone one's place has another
            // mount id, so it is marked anyway when a lookup enters it;
            // this only keeps the map to what is mounted), then forget
            // everything cached. A filesystem that could not be marked stays
            // unwatched (and counted once).
            if let Some((_, devs)) = w.marker.get() {
                devs.lock().retain(|_, m| *m == Marked::Failed);
            }
            tracing::info!(
                "a mount under the source was attached or detached where it could not be placed: dropping every \
                 cache of the mount"
            );
            self.drop_everything("after a mount change under the source");
            w.mount_drops.fetch_add(1, Ordering::Relaxed);
        }
        if !mounts.is_empty() {
            // Placed: each mount point's entry was forgotten above, as a
            // name changed in its parent (`watch/mounts.rs`). Left to do:
            // forget the marks of the mounts that left (as above, a
            // filesystem that could not be marked stays listed).
            let gone: Vec<u64> = mounts.iter().filter(|&&(_, gone)| gone).map(|&(id, _)| id).collect();
            if !gone.is_empty()
                && let Some((_, devs)) = w.marker.get()
            {
                devs.lock()
                    .retain(|&(_, id), m| *m == Marked::Failed || !gone.contains(&id));
            }
            if !remounted {
                tracing::info!(
                    mounts = mounts.len(),
                    "mounts under the source attached or detached: the entries of their mount points forgotten"
                );
            }
            w.mount_changes.fetch_add(mounts.len() as u64, Ordering::Relaxed);
        }
        self.reap();
    }

    /// The watch's counters as JSON (with the mode and why it was chosen).
    pub(super) fn coherence_json(&self) -> serde_json::Value {
        let w = &self.watched;
        serde_json::json!({
            "mode": self.cfg.coherence.name(),
            "why": self.cfg.coherence_why,
            "events": w.events.load(Ordering::Relaxed),
            "applied": w.applied.load(Ordering::Relaxed),
            "batches": w.batches.load(Ordering::Relaxed),
            "unknown_rechecked": w.unknown_rechecked.load(Ordering::Relaxed),
            "overflows": w.overflows.load(Ordering::Relaxed),
            "mount_changes": w.mount_changes.load(Ordering::Relaxed),
            "mount_drops": w.mount_drops.load(Ordering::Relaxed),
            "failed_batches": w.failed_batches.load(Ordering::Relaxed),
            "failed": u64::from(w.failed.load(Ordering::Relaxed)),
            "unindexed": self.table.unindexed(),
            "watch_revalidate_secs": if self.watching() { self.cfg.watch_revalidate.as_secs_f64() } else { 0.0 },
            "inval_dropped": w.inval_dropped.load(Ordering::Relaxed),
            "unwatched_filesystems": w.unwatched.load(Ordering::Relaxed),
            "syncs": w.syncs.load(Ordering::Relaxed),
            "sync_timeouts": w.sync_timeouts.load(Ordering::Relaxed),
            "indexed_handles": self.table.indexed_handles() as u64,
            "attrs_lent": u64::from(self.lends_attrs()),
            "unlent_replies": w.unlent_replies.load(Ordering::Relaxed),
            "overlapped_replies": w.overlapped_replies.load(Ordering::Relaxed),
        })
    }
}
