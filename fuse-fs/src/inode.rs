//! The inode table: FUSE node ids for the source's inodes, keyed by
//! `(st_dev, st_ino)`, with the kernel's lookup counts.
//!
//! # Identity
//! Each source inode the filesystem knows of is one [`Inode`], found by its
//! key `(st_dev, st_ino)`, so hard links and a name reached twice give the
//! kernel one node id, and two source filesystems (a mount point inside the
//! source) never collide. Node ids are handed out from a counter and never
//! reused during a mount, so a stale node id can never name a different file.
//!
//! # Lifetime
//! The kernel holds `nlookup` references to a node id (one per successful
//! LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK and per READDIRPLUS entry) and
//! returns them with FORGET. While `nlookup > 0` the node id is in the table;
//! when it falls to zero the entry is removed, so memory follows what the
//! kernel knows, not what was ever seen. The dcache may keep an `Arc<Inode>`
//! alive longer as a dentry payload (so a cached name keeps its identity and
//! its cached pages); such an inode is found again by key and re-enters the
//! table with its old node id.
//!
//! Transitions of `nlookup` to and from zero happen under the node id's shard
//! lock, so a LOOKUP racing with the FORGET that ends a node id either finds
//! the entry (and revives it) or re-inserts it; never a lost reference.
//!
//! # Backing
//! An inode names its source object without a descriptor: a kernel file
//! handle (`name_to_handle_at`) plus the mount id. Descriptors are opened on
//! demand through a bounded pool ([`FdPool`]) of `O_PATH` descriptors with
//! CLOCK eviction, so the number of open descriptors stays bounded however
//! many inodes the kernel knows. For a source filesystem that has no file
//! handles (a FUSE or network filesystem, or when not running as root, since
//! `open_by_handle_at` needs `CAP_DAC_READ_SEARCH`), an inode is reached by
//! its name under its parent ([`Backing::ByName`]: the link holds the parent
//! inode), opened into the same pool on demand and checked against its key
//! `(st_dev, st_ino)`; a name that no longer leads to it (removed or renamed
//! in the source) gives `ESTALE`, and the kernel looks the name up again.
//! Renames through the mount move the link ([`InodeTable::moved`]; an
//! exchange moves both objects' links), and a lookup's record of where it
//! found an inode never undoes a newer move
//! ([`InodeTable::set_link_unless_moved`]). Only
//! the root keeps a pinned descriptor.
//!
//! # What is given back, and when
//! - Node id leaves the table at the last FORGET (above), with its pooled
//!   descriptor, its dentry handle and its entry in the children index.
//! - When an `Inode` itself is freed (no kernel reference, no dcache payload,
//!   no open file holds it), its `Drop` queues `(node id, key)` on the
//!   table's reaper; [`InodeTable::reap`] (called by `fs.rs` on FORGET and
//!   lookups) removes the dead key-index entry and returns the node ids, whose
//!   page-cache entries `fs.rs` then drops. Node ids are never reused, so a
//!   queued id can never name a newer inode.
//! - The children index ([`crate::children`]) lists the inodes the kernel
//!   knows under the directory of their link, so a directory drop walks the
//!   subtree rather than every inode. Lock order: node-id table shard →
//!   `Inode::link` → children-index shard.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::children::Children;
use crate::error::{FsError, FsResult};
use crate::sys::{self, KernelHandle};

mod fd_pool;
mod handles;
pub mod negatives;
pub use fd_pool::FdPool;
use handles::handle_shard;

/// The handle an inode keeps to its dentry while the kernel knows it (defined
/// here, not in `names.rs`, so that the inode table does not depend on the
/// name layer that depends on it).
pub type DentryHandle = dcache::Dentry<Arc<Inode>>;

/// The root's node id (FUSE_ROOT_ID).
pub const ROOT_INO: u64 = 1;

const SHARDS: usize = 64;

/// `(st_dev, st_ino)` of a source inode.
pub type Key = (u64, u64);

/// The key of a `stat` result.
pub fn key_of(st: &libc::stat) -> Key {
    (st.st_dev, st.st_ino)
}

/// How an inode reaches its source object.
#[derive(Debug)]
pub enum Backing {
    /// A kernel file handle on a source mount; descriptors come from the pool.
    Handle {
        /// The handle bytes.
        handle: KernelHandle,
        /// The mount `name_to_handle_at` reported, held open while an
        /// inode on it lives.
        mount: Arc<SourceMount>,
    },
    /// A pinned `O_PATH` descriptor: the root only.
    Pinned(Arc<OwnedFd>),
    /// The fallback for a source without file handles: the object is
    /// reached by its name under its parent (the inode's link, which holds
    /// the parent inode), opened into the pool on demand and checked
    /// against the key; it holds no descriptor while not in use.
    ByName,
}

/// A source mount whose file handles inodes use: the descriptor
/// `open_by_handle_at` needs, open while an inode on the mount lives and
/// closed with the last one, so that rcufs does not keep a filesystem
/// mounted under the source busy (unmountable) after the kernel and rcufs
/// have let go of everything on it (a drop; the kernel's forgets).
#[derive(Debug)]
pub struct SourceMount {
    /// A directory on the mount, opened for real (`open_by_handle_at`
    /// refuses `O_PATH` descriptors).
    fd: OwnedFd,
    /// The filesystem's id (`f_fsid`), which the watcher's events carry.
    fsid: u64,
    /// The mount's unique id (`STATX_MNT_ID_UNIQUE`; 0 where the kernel
    /// gives none), by which the mount watch names it.
    unique_id: u64,
}

/// The attributes last read from the source, and when.
#[derive(Clone, Copy, Debug)]
pub struct AttrState {
    /// The `stat` result.
    pub st: libc::stat,
    /// When it was read.
    pub at: Instant,
}

/// What the page cache saw of a file's data: size, mtime and ctime. A
/// different stamp at open means the file changed behind rcufs's back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of a `stat` result.
    pub fn of(st: &libc::stat) -> Self {
        Self {
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// The file size in this stamp.
    pub fn size(&self) -> u64 {
        self.size.max(0) as u64
    }
}

/// What only a directory keeps.
#[derive(Debug, Default)]
struct DirState {
    /// The stamp under which the cached names below were last checked
    /// against the source, and when (see `Fs::revalidate_dir`). Kept apart
    /// from the attributes so that a GETATTR refresh does not hide a change.
    names_stamp: Option<(Stamp, Instant)>,
    /// Kernel-cache mode: names answered to the kernel as negative entries
    /// (which it caches), so that a drop can invalidate them.
    kernel_negatives: negatives::KernelNegatives,
    /// The listing last read from the source (`listing.rs`).
    listing: Option<Arc<crate::listing::Listing>>,
    /// How many times a kept listing was forgotten (`set_listing(None)`):
    /// a listing whose read began before a forget is not kept after it
    /// (`keep_listing_if`).
    forgets: u64,
    /// When a lookup last refreshed every stale name below at once
    /// (`fs/prefetch.rs`).
    refreshed: Option<Instant>,
    /// The walk under this directory (`fs/walk_ahead.rs`): the listing
    /// index of the child last opened, ...
    walked_to: Option<usize>,
    /// ...the index after the last child queued to be listed ahead...
    ahead_to: usize,
    /// ...whether this directory's own listing was read ahead of a walk...
    listed_ahead: bool,
    /// ...and when it was last claimed to be listed ahead.
    list_ahead_at: Option<Instant>,
}

/// An inode's handle to its dentry, and what the name layer needs to give
/// it one back safely (`names.rs`, "Invariants").
#[derive(Default)]
pub struct DentrySlot {
    /// The handle: held only while the kernel knows the node id.
    pub handle: Option<DentryHandle>,
    /// Directories: changes of names under this one that found no live
    /// handle to update (their dentries may hold stale children).
    pub missed: u64,
    /// The id of the dentry known to have seen every change until
    /// `missed` reached `clean_at` (the last handle given, the handle as
    /// it was let go at FORGET, or the dentry the warm walk fills), so
    /// that it may be taken back with its children; 0 for none yet (no
    /// dentry has id 0 but the root's).
    pub clean: u64,
    pub clean_at: u64,
}

impl DentrySlot {
    /// The handle if its dentry is still cached.
    pub fn live(&self) -> Option<&DentryHandle> {
        self.handle.as_ref().filter(|d| d.is_hashed())
    }

    /// Lets go of the handle (FORGET), remembering that its dentry's
    /// children have seen every change so far.
    pub fn let_go(&mut self) -> Option<DentryHandle> {
        let h = self.handle.take();
        if let Some(d) = &h {
            (self.clean, self.clean_at) = (d.id(), self.missed);
        }
        h
    }
}

impl std::fmt::Debug for DentrySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DentrySlot")
            .field("handle", &self.handle.as_ref().map(|d| d.id()))
            .field("missed", &self.missed)
            .field("clean", &self.clean)
            .field("clean_at", &self.clean_at)
            .finish()
    }
}

/// One source inode known to the filesystem.
#[derive(Debug)]
pub struct Inode {
    /// The FUSE node id.
    pub ino: u64,
    /// `(st_dev, st_ino)` in the source.
    pub key: Key,
    /// The file type bits (`st_mode & S_IFMT`).
    pub kind: u32,
    backing: Backing,
    /// The kernel's lookup count (see the module docs for its lock rule).
    nlookup: AtomicU64,
    /// Set once an open by handle failed with `ESTALE`: the source object is gone.
    stale: AtomicBool,
    /// Cached attributes.
    pub attr: Mutex<AttrState>,
    /// What the page cache saw at the last open or write; `None` before the first open.
    pub data_stamp: Mutex<Option<Stamp>>,
    /// Opens that found the attributes changed and have not yet made the
    /// kernel forget the copy it may have been lent (see
    /// [`PendingAttrInval`]).
    attr_invals: AtomicU32,
    /// Directories: changes of names under this one made through the
    /// mount, counted under this lock with their update of the name cache
    /// (see [`Inode::change_names_since`]).
    name_changes: RwLock<u32>,
    /// Directories only, allocated on first use (files do not pay for it).
    dir: Mutex<Option<Box<DirState>>>,
    /// The dentry this inode was last found under (the dcache's counted
    /// handle), held only while the kernel knows the node id so that it never
    /// forms a cycle with the payload; see `names.rs`.
    pub dentry: Mutex<DentrySlot>,
    /// The directory (node id) and name this inode was last found under;
    /// used to find the inodes under a directory and to name them to the
    /// kernel when invalidating. Changed only by the table: a rename's
    /// [`InodeTable::moved`], a lookup's
    /// [`InodeTable::set_link_unless_moved`], and an orphan's adoption.
    link: Mutex<Link>,
    /// Told when this inode is freed (`None` for the root, which never is).
    reaper: Option<Arc<Reaper>>,
    /// Its entry in the handle index (see [`InodeTable::find_handle`]),
    /// when the table keeps one and this inode is the one listed. Set once,
    /// by the table's `intern` under the key's lock, so reading it takes no
    /// lock.
    hkey: std::sync::OnceLock<Box<[u8]>>,
}

/// Held by an open that found an inode's attributes changed since rcufs
/// last had them, in the default mode with attributes lent to the kernel
/// (`fs/watched.rs`), from before it stores the new ones until the kernel
/// was told to forget its copy (dropped after that). Meanwhile every other
/// open of the inode tells the kernel too: it finds the new attributes
/// already stored, but the kernel may still hold the old ones, lent by a
/// LOOKUP that came before the store.
#[derive(Debug)]
pub struct PendingAttrInval(Arc<Inode>);

impl Inode {
    /// Marks an invalidation of the kernel's attributes as pending (see
    /// [`PendingAttrInval`]). Call it before storing the new attributes.
    pub fn pending_attr_inval(self: &Arc<Self>) -> PendingAttrInval {
        // Relaxed: the attribute lock orders it before the store that
        // follows, and so before any open that reads the new attributes.
        self.attr_invals.fetch_add(1, Ordering::Relaxed);
        PendingAttrInval(self.clone())
    }

    /// Whether an open that found the attributes changed has not yet told
    /// the kernel (call it after reading the attributes).
    pub fn attr_inval_pending(&self) -> bool {
        // Acquire: pairs with the Release decrement in `PendingAttrInval`'s
        // drop, so that seeing it done means the invalidation was sent.
        self.attr_invals.load(Ordering::Acquire) > 0
    }
}

/// A rename under way (see [`InodeTable::renaming`]).
#[derive(Debug)]
pub struct Renaming<'a>(&'a InodeTable);

impl Drop for Renaming<'_> {
    fn drop(&mut self) {
        // SeqCst: ordered after the link's update; pairs with the loads in
        // `open_by_name`.
        self.0.renames_done.fetch_add(1, Ordering::SeqCst);
    }
}

/// A read of names under a directory from the source, to be cached: see
/// [`Inode::reading_names`].
#[derive(Clone, Copy, Debug)]
pub struct NamesRead(u32);

impl Inode {
    /// Call before reading a name under this directory from the source,
    /// to cache what is read ([`Inode::cache_if_unchanged`]) or to change
    /// it ([`Inode::change_names_since`]).
    pub fn reading_names(&self) -> NamesRead {
        NamesRead(*self.name_changes.read())
    }

    /// Runs `insert` (the caching of what a lookup read from the source)
    /// unless a name under this directory was changed through the mount
    /// since `read`; returns what it returned, if it ran. The check and the insert are
    /// one step against changes ([`Inode::change_names`]): an insert either
    /// comes before a change's own update of the name cache, which then
    /// overrides it, or sees the change and is skipped. (Checked after the
    /// insert instead, a stale entry was visible until the check undid it:
    /// a transient ENOENT for a name just made, found by the name stress
    /// test under load.)
    pub fn cache_if_unchanged<R>(&self, read: NamesRead, insert: impl FnOnce() -> R) -> Option<R> {
        let changes = self.name_changes.read();
        (*changes == read.0).then(insert)
    }

    /// A change of names under this directory through the mount, made in
    /// the source after `read` was taken: counts it and runs `update` (the
    /// name cache's update) in one step, told whether no other change came
    /// since `read`. If one did, the two updates may be in the wrong order,
    /// and `update` should only remove.
    pub fn change_names_since<R>(&self, read: NamesRead, update: impl FnOnce(bool) -> R) -> R {
        let mut changes = self.name_changes.write();
        let alone = *changes == read.0;
        *changes = changes.wrapping_add(1);
        update(alone)
    }

    /// [`Inode::change_names_since`] for an update that only removes, which
    /// is right whatever came before it.
    pub fn change_names(&self, update: impl FnOnce()) {
        let mut changes = self.name_changes.write();
        *changes = changes.wrapping_add(1);
        update();
    }
}

/// [`Inode::change_names_since`] for a change under two directories (a rename):
/// both are held, in node id order, while `update` runs.
pub fn change_names_of_two<R>(a: (&Inode, NamesRead), b: (&Inode, NamesRead), update: impl FnOnce(bool) -> R) -> R {
    if a.0.ino == b.0.ino {
        return a.0.change_names_since(a.1, update);
    }
    let (first, second) = if a.0.ino < b.0.ino { (a, b) } else { (b, a) };
    first.0.change_names_since(first.1, |first_alone| {
        second
            .0
            .change_names_since(second.1, |second_alone| update(first_alone && second_alone))
    })
}

impl Drop for PendingAttrInval {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in `attr_inval_pending`.
        self.0.attr_invals.fetch_sub(1, Ordering::Release);
    }
}

/// Where an inode was last found, and where the children index lists it.
#[derive(Debug)]
struct Link {
    parent: u64,
    name: Box<[u8]>,
    /// [`Backing::ByName`] inodes: the parent inode, kept alive so that the
    /// object can be reopened by name however long the kernel keeps it.
    parent_ref: Option<Arc<Inode>>,
    /// The parent the children index lists this inode under: `Some` exactly
    /// while the node id is in the table.
    indexed: Option<u64>,
    /// The table's count of renames through the mount ([`InodeTable::moved`])
    /// when one last moved this link; 0 if none did.
    moved_at: u64,
}

impl Link {
    fn new(parent: u64, name: Box<[u8]>, parent_ref: Option<Arc<Inode>>) -> Mutex<Self> {
        Mutex::new(Self {
            parent,
            name,
            parent_ref,
            indexed: None,
            moved_at: 0,
        })
    }
}

/// An inode freed: its node id, key and handle-index key.
type Gone = (u64, Key, Option<Box<[u8]>>);

/// Inodes freed since the last [`InodeTable::reap`].
#[derive(Debug, Default)]
struct Reaper {
    gone: parking_lot::Mutex<Vec<Gone>>,
    /// A hint that `gone` is not empty, so callers need not take the lock.
    pending: AtomicBool,
}

impl Drop for Inode {
    fn drop(&mut self) {
        if let Some(r) = &self.reaper {
            let hkey = self.hkey.take();
            r.gone.lock().push((self.ino, self.key, hkey));
            r.pending.store(true, Ordering::Relaxed);
        }
    }
}

impl Inode {
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == libc::S_IFDIR
    }

    /// The cached attributes.
    pub fn attr(&self) -> AttrState {
        *self.attr.lock()
    }

    /// The size in the cached attributes (without copying the rest).
    pub fn size(&self) -> u64 {
        self.attr.lock().st.st_size.max(0) as u64
    }

    /// Replaces the cached attributes with a fresh `stat`, unless the cached
    /// ones are newer (a later ctime): two threads can take `stat`s in one
    /// order and store them in the other, and an older `stat` stored last
    /// would serve attributes from before a change for up to the
    /// revalidation interval (seen as a stale size after a change in the
    /// source). Only attributes stored within the last second win so (the
    /// race is that short), so a clock stepped back cannot pin old ones.
    /// The time of the check moves forward either way.
    pub fn set_attr(&self, st: libc::stat) {
        let mut a = self.attr.lock();
        let newer = (a.st.st_ctime, a.st.st_ctime_nsec) > (st.st_ctime, st.st_ctime_nsec)
            && a.at.elapsed() < std::time::Duration::from_secs(1);
        let st = if newer && a.st.st_ino == st.st_ino { a.st } else { st };
        *a = AttrState { st, at: Instant::now() };
    }

    /// The directory (node id) and name this inode was last found under.
    pub fn link(&self) -> (u64, Box<[u8]>) {
        let l = self.link.lock();
        (l.parent, l.name.clone())
    }

    /// The directory (node id) this inode was last found under.
    pub fn link_parent(&self) -> u64 {
        self.link.lock().parent
    }

    /// This inode's key in the table's handle index, once it is listed
    /// there (with the watch only).
    pub fn handle_key(&self) -> Option<Box<[u8]>> {
        self.hkey.get().cloned()
    }

    /// Whether this inode is listed in the handle index, so that the
    /// source watcher can find it by the handle its events carry.
    pub fn indexed(&self) -> bool {
        self.hkey.get().is_some()
    }

    /// Forgets the cached attributes, so the next use reads the source.
    pub fn expire_attr(&self) {
        let mut a = self.attr.lock();
        if let Some(old) = Instant::now().checked_sub(std::time::Duration::from_secs(3600 * 24)) {
            a.at = old;
        }
    }

    /// Directories: the stamp the cached names below were last checked
    /// under, and when.
    pub fn names_stamp(&self) -> Option<(Stamp, Instant)> {
        self.dir.lock().as_ref().and_then(|d| d.names_stamp)
    }

    /// Directories: records the stamp the cached names below were checked under.
    pub fn set_names_stamp(&self, stamp: Stamp, at: Instant) {
        self.dir.lock().get_or_insert_default().names_stamp = Some((stamp, at));
    }

    /// Directories: moves an existing names stamp to `stamp` (a change made
    /// through the mount), keeping its time.
    pub fn advance_names_stamp(&self, stamp: Stamp) {
        if let Some(d) = self.dir.lock().as_mut()
            && let Some((s, _)) = d.names_stamp.as_mut()
        {
            *s = stamp;
        }
    }

    /// Directories: the listing last read from the source, if kept.
    pub fn listing(&self) -> Option<Arc<crate::listing::Listing>> {
        self.dir.lock().as_ref().and_then(|d| d.listing.clone())
    }

    /// Directories: keeps `listing` (or forgets the kept one with `None`,
    /// which also keeps out every listing whose read began before: see
    /// [`listing_epoch`](Self::listing_epoch)). A new listing starts a new
    /// walk (`fs/walk_ahead.rs`).
    pub fn set_listing(&self, listing: Option<Arc<crate::listing::Listing>>) {
        self.store_listing(listing, None);
    }

    /// Directories: the count of forgotten listings, taken before a listing
    /// is read from the source and handed with it to
    /// [`keep_listing_if`](Self::keep_listing_if).
    pub fn listing_epoch(&self) -> u64 {
        self.dir.lock().get_or_insert_default().forgets
    }

    /// Directories: keeps `listing` as [`set_listing`](Self::set_listing)
    /// does, unless a listing was forgotten since `epoch` was taken (a
    /// drop of the directory, a change to it): what was read before that
    /// may be what the forget was for. Whether it was kept.
    pub fn keep_listing_if(&self, epoch: u64, listing: Arc<crate::listing::Listing>) -> bool {
        self.store_listing(Some(listing), Some(epoch))
    }

    /// [`set_listing`](Self::set_listing), or with `epoch`
    /// [`keep_listing_if`](Self::keep_listing_if).
    fn store_listing(&self, listing: Option<Arc<crate::listing::Listing>>, epoch: Option<u64>) -> bool {
        let old = {
            let mut guard = self.dir.lock();
            // No state: no listing kept and no read begun (a read takes its
            // epoch first, which makes the state), so nothing to forget.
            if guard.is_none() && listing.is_none() {
                return true;
            }
            let d = guard.get_or_insert_default();
            if epoch.is_some_and(|e| e != d.forgets) {
                return false;
            }
            if listing.is_none() {
                d.forgets += 1;
            }
            d.walked_to = None;
            d.ahead_to = 0;
            d.listed_ahead = false;
            std::mem::replace(&mut d.listing, listing)
        };
        drop(old); // Freed outside the lock.
        true
    }

    /// Directories: claims the refresh of the names below (true) unless one
    /// was claimed less than `interval` ago.
    pub fn claim_refresh(&self, interval: std::time::Duration) -> bool {
        self.claim(interval, |d| &mut d.refreshed)
    }

    /// Directories: sets the time `slot` picks to now (true) unless it is
    /// less than `interval` old.
    fn claim(&self, interval: std::time::Duration, slot: impl FnOnce(&mut DirState) -> &mut Option<Instant>) -> bool {
        let mut guard = self.dir.lock();
        let at = slot(guard.get_or_insert_default());
        if at.is_some_and(|t| t.elapsed() < interval) {
            return false;
        }
        *at = Some(Instant::now());
        true
    }

    /// Directories: the listing index of the child opened last, if any
    /// since the listing was set.
    pub fn walked_to(&self) -> Option<usize> {
        self.dir.lock().as_ref().and_then(|d| d.walked_to)
    }

    /// Directories: a child at listing index `index` was opened. Returns
    /// the first index to list ahead from if this looks like a walk (a
    /// child after the last one opened, or the first child opened of a
    /// directory itself listed ahead), `None` otherwise.
    pub fn walk_progress(&self, index: usize) -> Option<usize> {
        let mut guard = self.dir.lock();
        let d = guard.get_or_insert_default();
        let walking = match d.walked_to {
            Some(last) => index > last,
            None => d.listed_ahead,
        };
        d.walked_to = Some(index);
        walking.then(|| d.ahead_to.max(index + 1))
    }

    /// Directories: children before listing index `end` have been queued
    /// to be listed ahead.
    pub fn set_ahead_to(&self, end: usize) {
        let mut guard = self.dir.lock();
        let d = guard.get_or_insert_default();
        d.ahead_to = d.ahead_to.max(end);
    }

    /// Directories: claims listing this directory ahead of a walk (true)
    /// unless that was claimed less than `interval` ago.
    pub fn claim_list_ahead(&self, interval: std::time::Duration) -> bool {
        self.claim(interval, |d| &mut d.list_ahead_at)
    }

    /// Directories: the kept listing was read ahead of a walk, so the walk
    /// is expected to go on below (`fs/walk_ahead.rs`).
    pub fn mark_listed_ahead(&self) {
        self.dir.lock().get_or_insert_default().listed_ahead = true;
    }

    /// Directories: remembers a name answered to the kernel as a negative
    /// entry; whether it is remembered (a bound may refuse it).
    pub fn push_kernel_negative(&self, name: &[u8]) -> bool {
        self.dir.lock().get_or_insert_default().kernel_negatives.push(name)
    }

    /// Directories: remembers again names taken with
    /// [`take_kernel_negatives`](Self::take_kernel_negatives) and not
    /// invalidated (their count was theirs; no bound refuses them).
    pub fn restore_kernel_negatives(&self, names: Vec<Box<[u8]>>) {
        if names.is_empty() {
            return;
        }
        self.dir.lock().get_or_insert_default().kernel_negatives.restore(names);
    }

    /// Directories: takes the remembered negative names.
    pub fn take_kernel_negatives(&self) -> Vec<Box<[u8]>> {
        self.dir
            .lock()
            .as_mut()
            .map(|d| d.kernel_negatives.take())
            .unwrap_or_default()
    }

    /// The kernel's lookup count.
    pub fn nlookup(&self) -> u64 {
        self.nlookup.load(Ordering::Relaxed)
    }

    /// Whether an open found the source object gone.
    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }
}

type InoShard = RwLock<crate::ids::IdMap<u64, Arc<Inode>>>;
type KeyShard = Mutex<HashMap<Key, Weak<Inode>>>;
type HandleShard = Mutex<HashMap<Box<[u8]>, Weak<Inode>>>;

/// The table of inodes the kernel knows, plus the key index.
#[derive(Debug)]
pub struct InodeTable {
    by_ino: Box<[InoShard]>,
    by_key: Box<[KeyShard]>,
    next_ino: AtomicU64,
    /// The source mounts live inodes use, by the mount id
    /// `name_to_handle_at` reports (on kernels before 6.12, an id a gone
    /// mount gave back may be another's now: its entry is dead then, and a
    /// new one is opened).
    mounts: RwLock<HashMap<u64, Weak<SourceMount>>>,
    /// Source mounts whose file handles are not used (FUSE), by the same
    /// id (on kernels before 6.12, a mount given a gone one's id would not
    /// use its handles either: reached by name, it is then covered by
    /// timeouts rather than the watch).
    no_handles: RwLock<std::collections::HashSet<u64>>,
    /// File handle -> inode, for the source watcher (`None` unless
    /// [`index_handles`](Self::index_handles) turned it on).
    by_handle: Option<Box<[HandleShard]>>,
    /// The pool of `O_PATH` descriptors.
    pub pool: FdPool,
    use_handles: bool,
    interns: AtomicU64,
    /// Renames begun and renames whose inode's link was updated after
    /// them (see [`InodeTable::renaming`]).
    renames_begun: AtomicU64,
    renames_done: AtomicU64,
    /// Renames through the mount that moved a link ([`InodeTable::moved`]).
    link_moves: AtomicU64,
    /// Inodes created with [`Backing::ByName`].
    by_name: AtomicU64,
    /// See [`unindexed`](Self::unindexed).
    unindexed: AtomicU64,
    children: Children,
    /// Directory key -> the node id of that directory that the kernel
    /// forgot while inodes it still knows were listed under it (a file kept
    /// open in a directory whose entry a drop invalidated). When the
    /// directory comes back under a new node id, those inodes are moved
    /// under it (`adopt`), so that a drop of the directory finds them.
    /// Entries whose old node id lists no children are swept with the keys.
    orphans: Mutex<HashMap<Key, u64>>,
    reaper: Arc<Reaper>,
}

/// What [`InodeTable::intern`] needs to create an inode it does not know.
pub struct NewInode<'a> {
    /// The node id of the directory.
    pub parent_ino: u64,
    /// The directory the object was found in.
    pub parent: BorrowedFd<'a>,
    /// Its name there (empty with `AT_EMPTY_PATH` semantics for the root).
    pub name: &'a std::ffi::CStr,
    /// Its `stat`.
    pub st: libc::stat,
    /// Taken before `st` was read ([`InodeTable::watch_renames`]): a rename
    /// through the mount that moved the object since then has the newer
    /// record of its name.
    pub renames: RenameWatch,
}

/// The count of renames through the mount when a read of the source or of
/// the name cache began ([`InodeTable::watch_renames`]): a link that a
/// rename moved after that is newer than what the read found.
#[derive(Clone, Copy, Debug)]
pub struct RenameWatch(u64);

impl InodeTable {
    /// An empty table whose root is the directory `root_fd` (an `O_PATH` descriptor).
    pub fn new(root_fd: OwnedFd, pool_capacity: usize, use_handles: bool) -> FsResult<(Self, Arc<Inode>)> {
        let st = sys::fstat(root_fd.as_fd())?;
        let table = Self {
            by_ino: (0..SHARDS).map(|_| RwLock::new(crate::ids::IdMap::default())).collect(),
            by_key: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            next_ino: AtomicU64::new(ROOT_INO + 1),
            mounts: RwLock::new(HashMap::new()),
            no_handles: RwLock::new(std::collections::HashSet::new()),
            by_handle: None,
            pool: FdPool::new(pool_capacity),
            use_handles,
            interns: AtomicU64::new(0),
            renames_begun: AtomicU64::new(0),
            renames_done: AtomicU64::new(0),
            link_moves: AtomicU64::new(0),
            by_name: AtomicU64::new(0),
            unindexed: AtomicU64::new(0),
            children: Children::default(),
            orphans: Mutex::new(HashMap::new()),
            reaper: Arc::new(Reaper::default()),
        };
        let root = Arc::new(Inode {
            ino: ROOT_INO,
            key: key_of(&st),
            kind: st.st_mode & libc::S_IFMT,
            backing: Backing::Pinned(Arc::new(root_fd)),
            nlookup: AtomicU64::new(1),
            stale: AtomicBool::new(false),
            attr: Mutex::new(AttrState { st, at: Instant::now() }),
            data_stamp: Mutex::new(None),
            attr_invals: AtomicU32::new(0),
            name_changes: RwLock::new(0),
            dir: Mutex::new(None),
            dentry: Mutex::new(DentrySlot::default()),
            link: Link::new(ROOT_INO, Box::default(), None),
            reaper: None,
            hkey: std::sync::OnceLock::new(),
        });
        table.by_ino[Self::ino_shard(ROOT_INO)]
            .write()
            .insert(ROOT_INO, root.clone());
        table.by_key[Self::key_shard(&root.key)]
            .lock()
            .insert(root.key, Arc::downgrade(&root));
        Ok((table, root))
    }

    fn ino_shard(ino: u64) -> usize {
        (ino as usize) % SHARDS
    }

    fn key_shard(key: &Key) -> usize {
        (key.1 ^ key.0.rotate_left(17)) as usize % SHARDS
    }

    /// The inode with node id `ino`, if the kernel knows it.
    pub fn get(&self, ino: u64) -> FsResult<Arc<Inode>> {
        self.by_ino[Self::ino_shard(ino)]
            .read()
            .get(&ino)
            .cloned()
            .ok_or(FsError::STALE)
    }

    /// Taken before a read (of the source, or of the name cache) that
    /// records where it found an inode ([`intern`](Self::intern), through
    /// [`NewInode::renames`], or [`set_link_unless_moved`](Self::set_link_unless_moved)).
    pub fn watch_renames(&self) -> RenameWatch {
        // SeqCst: pairs with the increment in `moved`, which comes after the
        // rename in the source; this load comes before the caller's read.
        RenameWatch(self.link_moves.load(Ordering::SeqCst))
    }

    /// A rename through the mount moved `inode` to `name` under `parent`
    /// in the source: records the new link, newer than what any read
    /// begun before now found (see [`set_link_unless_moved`](Self::set_link_unless_moved)).
    pub fn moved(&self, inode: &Inode, parent: u64, name: &[u8]) {
        // SeqCst: after the rename in the source; pairs with the load in
        // `watch_renames`. A read that found the old name began before it.
        let at = self.link_moves.fetch_add(1, Ordering::SeqCst) + 1;
        self.update_link(inode, parent, name, |link| {
            link.moved_at = at;
            true
        });
    }

    /// Records that a read begun at `watch` found `inode` as `name` under
    /// `parent`, unless a rename through the mount moved it since: then the
    /// rename's record is newer (the read may have found the old name).
    /// The check and the update are one step under the link's lock, as is
    /// the rename's update, so neither overwrites a newer one.
    pub fn set_link_unless_moved(&self, inode: &Inode, parent: u64, name: &[u8], watch: RenameWatch) {
        self.update_link(inode, parent, name, |link| link.moved_at <= watch.0);
    }

    /// The inode for the source object described by `new`, creating it (and
    /// its backing) if no live inode has its key. Does not change `nlookup`.
    /// An existing inode's link is set to where `new` found it, unless a
    /// rename through the mount moved it since the read began
    /// ([`set_link_unless_moved`](Self::set_link_unless_moved)).
    pub fn intern(&self, new: NewInode<'_>) -> FsResult<Arc<Inode>> {
        let key = key_of(&new.st);
        let kind = new.st.st_mode & libc::S_IFMT;
        let shard = &self.by_key[Self::key_shard(&key)];
        let found = shard.lock().get(&key).and_then(Weak::upgrade);
        if let Some(inode) = &found
            && inode.kind == kind
            && !inode.is_stale()
            && self.same_object(inode, &new)
        {
            inode.set_attr(new.st);
            self.set_link_unless_moved(inode, new.parent_ino, new.name.to_bytes(), new.renames);
            return Ok(Arc::clone(inode));
        }
        if let Some(old) = &found
            && tracing::enabled!(tracing::Level::DEBUG)
        {
            let old_alive = self.still_opens(old);
            tracing::debug!(
                old = old.ino,
                old_alive,
                name = %new.name.to_string_lossy(),
                stale = old.is_stale(),
                kind_changed = old.kind != kind,
                nlookup = old.nlookup(),
                "a live inode's key gets a new inode"
            );
        }
        // Build the backing outside the lock: it makes syscalls.
        let backing = self.make_backing(&new)?;
        let parent_ref = match backing {
            Backing::ByName => Some(self.get(new.parent_ino)?),
            _ => None,
        };
        let fresh = Arc::new(Inode {
            ino: self.next_ino.fetch_add(1, Ordering::Relaxed),
            key,
            kind,
            backing,
            nlookup: AtomicU64::new(0),
            stale: AtomicBool::new(false),
            attr: Mutex::new(AttrState {
                st: new.st,
                at: Instant::now(),
            }),
            data_stamp: Mutex::new(None),
            attr_invals: AtomicU32::new(0),
            name_changes: RwLock::new(0),
            dir: Mutex::new(None),
            dentry: Mutex::new(DentrySlot::default()),
            link: Link::new(new.parent_ino, new.name.to_bytes().into(), parent_ref),
            reaper: Some(self.reaper.clone()),
            hkey: std::sync::OnceLock::new(),
        });
        let (result, displaced) = {
            let mut map = shard.lock();
            let existing = map.get(&key).and_then(Weak::upgrade);
            match existing {
                Some(inode) if inode.kind == kind && !inode.is_stale() => (inode, Some(fresh)),
                other => {
                    // Into the handle index before the key lock is let go:
                    // from then on another lookup can find the inode by
                    // its key (the found path above) and cache names under
                    // its dentry, and the watcher finds directories by
                    // handle. Listed only after that, an event for a name
                    // made in the directory meanwhile was dropped as one
                    // of an object rcufs does not know, and a negative
                    // entry cached there stayed (found by the name stress
                    // test). Lock order: key shard, then the handle
                    // index's (`reap` and `find_handle` never nest them).
                    self.index_handle(&fresh);
                    map.insert(key, Arc::downgrade(&fresh));
                    (fresh, other)
                }
            }
        };
        drop(displaced); // Any Arc<Inode> is dropped outside the key lock.
        crate::fault::publish_hook(new.name.to_bytes());
        if self.interns.fetch_add(1, Ordering::Relaxed) % 65_536 == 65_535 {
            self.sweep_keys();
        }
        Ok(result)
    }

    /// Whether `inode` (found by key) is still the object `new` describes:
    /// inode numbers are reused once a file is deleted, and the dcache may
    /// keep an inode alive past its file's deletion in the source. The file
    /// handle carries the generation, so equal handles mean the same object;
    /// a pinned descriptor of a deleted file shows no links. A mismatch marks
    /// the old inode stale.
    fn same_object(&self, inode: &Inode, new: &NewInode<'_>) -> bool {
        let same = match &inode.backing {
            Backing::Handle { handle, mount } => {
                let flags = if new.name.is_empty() { libc::AT_EMPTY_PATH } else { 0 };
                sys::name_to_handle_at(new.parent, new.name, flags).is_ok_and(|(h, _)| &h == handle) || {
                    // The name leads elsewhere or nowhere now. If the inode's
                    // own object still lives with the key the caller read
                    // (a rename moved it after the read), that object is the
                    // one read: no two live objects share a key. If it is
                    // gone, the key was reused by the object read.
                    sys::open_by_handle_at(mount.fd.as_fd(), handle, libc::O_PATH | libc::O_NOFOLLOW)
                        .and_then(|fd| sys::fstat(fd.as_fd()))
                        .is_ok_and(|st| key_of(&st) == inode.key)
                }
            }
            Backing::Pinned(fd) => {
                sys::fstat(fd.as_fd()).is_ok_and(|st| st.st_nlink > 0 || st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            }
            // Found by key under this very name: the same object, unless
            // its inode number was reused while rcufs held the old inode
            // (without a handle's generation that cannot be told apart; the
            // data stamp at open still drops pages of a different file).
            Backing::ByName => true,
        };
        if !same {
            if tracing::enabled!(tracing::Level::DEBUG) {
                // Whether the old object still exists (then the name moved
                // between the caller's stat and this check) or is gone (its
                // inode number was reused): only the latter is expected.
                let old_alive = self.still_opens(inode);
                tracing::debug!(ino = inode.ino, name = %new.name.to_string_lossy(), old_alive, "inode marked stale: the name is another object now");
            }
            inode.stale.store(true, Ordering::Relaxed);
        }
        same
    }

    /// Whether `inode`'s source object can still be opened (for the debug
    /// log: it changes nothing, not even the stale mark).
    fn still_opens(&self, inode: &Inode) -> bool {
        match &inode.backing {
            Backing::Pinned(fd) => sys::fstat(fd.as_fd()).is_ok_and(|st| st.st_nlink > 0),
            Backing::ByName => self.open_by_name(inode, false).is_ok(),
            Backing::Handle { handle, mount } => {
                sys::open_by_handle_at(mount.fd.as_fd(), handle, libc::O_PATH | libc::O_NOFOLLOW).is_ok()
            }
        }
    }

    fn make_backing(&self, new: &NewInode<'_>) -> FsResult<Backing> {
        let flags = if new.name.is_empty() { libc::AT_EMPTY_PATH } else { 0 };
        // An object on the same filesystem as a parent reached by name has no
        // usable handle either: skip asking (on a FUSE source each
        // `name_to_handle_at` is one more LOOKUP round trip to its daemon).
        let parent_by_name = self.by_ino[Self::ino_shard(new.parent_ino)]
            .read()
            .get(&new.parent_ino)
            .is_some_and(|p| matches!(p.backing, Backing::ByName) && p.key.0 == new.st.st_dev);
        if self.use_handles && !parent_by_name {
            match sys::name_to_handle_at(new.parent, new.name, flags) {
                Ok((_, mount_id)) if self.no_handles.read().contains(&mount_id) => {}
                Ok((handle, mount_id)) => {
                    let live = self.mounts.read().get(&mount_id).and_then(Weak::upgrade);
                    let mount = match live {
                        Some(m) => m,
                        None => {
                            // `open_by_handle_at` refuses `O_PATH` mount descriptors
                            // (EBADF), so this one is a real open of a directory:
                            // the object itself (a mount's root is a directory) or,
                            // for a non-directory, its parent on the same filesystem.
                            let fd = sys::openat(
                                new.parent,
                                new.name,
                                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                                0,
                            )
                            .or_else(|_| sys::reopen(new.parent, libc::O_RDONLY | libc::O_DIRECTORY))?;
                            // What the name led to a moment ago may be on
                            // another mount now (one mounted over it, or a
                            // file bind-mounted on a file, whose parent is
                            // elsewhere): then no descriptor for this mount
                            // is at hand, and the object is reached by name.
                            let same_mount = sys::name_to_handle_at(fd.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH)
                                .is_ok_and(|(_, id)| id == mount_id);
                            if !same_mount {
                                return Ok(self.by_name_backing());
                            }
                            let (fsid, magic) = sys::fs_ids(fd.as_fd()).unwrap_or((0, 0));
                            if magic == sys::FUSE_SUPER_MAGIC {
                                // A FUSE filesystem hands out handles, but opens
                                // them only while the kernel still caches the
                                // inode (unless it exports, which the kernel
                                // does not tell): useless once evicted.
                                self.no_handles.write().insert(mount_id);
                                return self.make_backing(new);
                            }
                            // Read before the lock, which every new inode
                            // takes: a call into a filesystem that stopped
                            // answering must hold no lock others need.
                            let unique_id = sys::mount_id_unique_at(fd.as_fd(), sys::EMPTY).unwrap_or(0);
                            let mut mounts = self.mounts.write();
                            // Another lookup may have opened it meanwhile.
                            match mounts.get(&mount_id).and_then(Weak::upgrade) {
                                Some(m) => m,
                                None => {
                                    mounts.retain(|_, m| m.strong_count() > 0);
                                    let m = Arc::new(SourceMount { fd, fsid, unique_id });
                                    mounts.insert(mount_id, Arc::downgrade(&m));
                                    m
                                }
                            }
                        }
                    };
                    return Ok(Backing::Handle { handle, mount });
                }
                Err(e) if matches!(e.errno(), libc::EOPNOTSUPP | libc::ENOSYS | libc::EOVERFLOW) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.by_name_backing())
    }

    /// `Backing::ByName`, counted (and said once).
    fn by_name_backing(&self) -> Backing {
        if self.by_name.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::info!(
                "no kernel file handles for the source here (not root, or a filesystem without them): \
                 inodes are reopened by name from their parent, through the bounded descriptor pool"
            );
        }
        Backing::ByName
    }

    fn sweep_keys(&self) {
        for shard in self.by_key.iter() {
            shard.lock().retain(|_, w| w.strong_count() > 0);
        }
        self.orphans.lock().retain(|_, old| self.children.has(*old));
    }

    /// `dir` has just entered the table: if the kernel forgot an earlier
    /// node id of the same directory while inodes it still knows were
    /// listed under that node id, list them (and link them) under `dir`.
    /// Without this they would stay under a node id no lookup leads to,
    /// and a drop of the directory would miss them: their pages, in rcufs
    /// and in the kernel, would outlive the drop.
    fn adopt(&self, dir: &Inode) {
        let old = {
            let mut orphans = self.orphans.lock();
            match orphans.get(&dir.key) {
                Some(&old) => {
                    orphans.remove(&dir.key);
                    old
                }
                None => return,
            }
        };
        if old == dir.ino {
            return;
        }
        for child in self.children.of(old) {
            let Ok(inode) = self.get(child) else { continue };
            let mut link = inode.link.lock();
            if link.indexed == Some(old) {
                self.children.remove(old, child);
                self.children.add(dir.ino, child);
                link.indexed = Some(dir.ino);
                link.parent = dir.ino;
            }
        }
    }

    /// Records that `inode` is `name` under `parent`, moving it in the
    /// children index if the kernel knows it, if `update`, given the link
    /// under its lock, says so (and may change it).
    fn update_link(&self, inode: &Inode, parent: u64, name: &[u8], update: impl FnOnce(&mut Link) -> bool) {
        // Taken before the link lock (lock order: table shard, then link).
        let parent_ref = match inode.backing {
            Backing::ByName => self.get(parent).ok(),
            _ => None,
        };
        let mut link = inode.link.lock();
        if !update(&mut link) {
            return;
        }
        if link.parent != parent || &*link.name != name {
            link.parent = parent;
            link.name = name.into();
            if let Some(p) = parent_ref {
                link.parent_ref = Some(p);
            }
        }
        if let Some(old) = link.indexed
            && old != parent
        {
            self.children.remove(old, inode.ino);
            self.children.add(parent, inode.ino);
            link.indexed = Some(parent);
        }
    }

    /// Lists `inode` in the children index (called under its table-shard lock).
    fn index(&self, inode: &Inode) {
        let mut link = inode.link.lock();
        if link.indexed.is_none() && inode.ino != ROOT_INO {
            self.children.add(link.parent, inode.ino);
            link.indexed = Some(link.parent);
        }
    }

    /// Takes `inode` out of the children index (called under its table-shard lock).
    fn unindex(&self, inode: &Inode) {
        let mut link = inode.link.lock();
        if let Some(p) = link.indexed.take() {
            self.children.remove(p, inode.ino);
        }
    }

    /// Adds `n` kernel references to `inode`, (re)entering it in the table.
    pub fn remember(&self, inode: &Arc<Inode>, n: u64) {
        let entered = {
            let mut map = self.by_ino[Self::ino_shard(inode.ino)].write();
            let entered = !map.contains_key(&inode.ino);
            map.entry(inode.ino).or_insert_with(|| inode.clone());
            self.index(inode);
            inode.nlookup.fetch_add(n, Ordering::Relaxed);
            entered
        };
        // Outside the shard lock: adopting looks children up in the table.
        if entered && inode.is_dir() {
            self.adopt(inode);
        }
    }

    /// Takes `n` kernel references from `ino`; when none are left the inode
    /// leaves the table and is returned (to be dropped by the caller outside
    /// any lock).
    pub fn forget(&self, ino: u64, n: u64) -> Option<Arc<Inode>> {
        if ino == ROOT_INO {
            return None;
        }
        let removed = {
            let mut map = self.by_ino[Self::ino_shard(ino)].write();
            let inode = map.get(&ino)?;
            let left = inode.nlookup.load(Ordering::Relaxed).saturating_sub(n);
            inode.nlookup.store(left, Ordering::Relaxed);
            if left > 0 {
                return None;
            }
            let removed = map.remove(&ino)?;
            self.unindex(&removed);
            if removed.is_dir() && self.children.has(ino) {
                self.orphans.lock().insert(removed.key, ino);
            }
            // The kernel no longer knows the node id: release its dentry so
            // that the dcache may evict it (and with it the payload's
            // reference). Taken under the shard lock so that a racing LOOKUP
            // that revives the node id attaches a dentry after this, not before.
            let dentry = removed.dentry.lock().let_go();
            (removed, dentry)
        };
        let (removed, dentry) = removed;
        {
            // Released outside the shard lock.
            let _released = dentry;
        }
        self.pool.remove(ino);
        {
            // The count is read under the key lock: `intern` revives an
            // inode only by upgrading its key entry under that lock, so
            // nothing can take a reference between the check and the
            // removal. Checked before taking the lock, a LOOKUP could revive
            // the inode in between, and the live inode lost its key entry:
            // the next lookup of the object made a second node id for it,
            // and the kernel then had two inodes for one file (descriptors
            // on one, the path on the other: each missed the other's size
            // changes and page invalidations; found by the soak).
            let mut keys = self.by_key[Self::key_shard(&removed.key)].lock();
            if Arc::strong_count(&removed) == 1
                && keys
                    .get(&removed.key)
                    .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&removed)))
            {
                keys.remove(&removed.key);
            }
        }
        Some(removed)
    }

    /// An `O_PATH` descriptor for `inode` (pooled or pinned).
    pub fn path_fd(&self, inode: &Inode) -> FsResult<Arc<OwnedFd>> {
        match &inode.backing {
            Backing::Pinned(fd) => Ok(fd.clone()),
            Backing::Handle { .. } => self
                .pool
                .get(inode.ino, || self.open(inode, libc::O_PATH | libc::O_NOFOLLOW)),
            Backing::ByName => self.pool.get(inode.ino, || self.open_by_name(inode, true)),
        }
    }

    /// Opens a [`Backing::ByName`] inode (`O_PATH`): its name under its
    /// parent (whose descriptor comes from the pool, recursively up to the
    /// root), checked to still be the inode's `(st_dev, st_ino)`. A name
    /// that is gone or names another object now means the object was
    /// removed or renamed in the source: `ESTALE` (and, with `mark`, the
    /// inode is marked stale), so the kernel looks the name up again.
    fn open_by_name(&self, inode: &Inode, mark: bool) -> FsResult<OwnedFd> {
        // A rename through the mount moves the object in the source before
        // it updates the link: a failure while one ran may only mean the
        // link was read in between. The name is tried again then (up to 64
        // times); the inode is marked stale after a failure that no rename
        // overlapped, or after the last try. Only this level's own name is
        // retried: the parent's descriptor comes from `path_fd`, whose
        // reopen does its own retries, so a parent's failure is final here.
        let mut tries = 0;
        loop {
            tries += 1;
            // SeqCst: as the counts' updates in `renaming` and `Renaming`'s drop.
            let begun = self.renames_begun.load(Ordering::SeqCst);
            let done = self.renames_done.load(Ordering::SeqCst);
            let (parent, name) = {
                let l = inode.link.lock();
                (l.parent_ref.clone(), l.name.clone())
            };
            let parent = parent.ok_or(FsError::STALE)?;
            let pfd = self.path_fd(&parent)?;
            let cname = sys::cstr(&name)?;
            match sys::openat(pfd.as_fd(), &cname, libc::O_PATH | libc::O_NOFOLLOW, 0) {
                Ok(fd) if key_of(&sys::fstat(fd.as_fd())?) == inode.key => return Ok(fd),
                // Another object under the name now, or none.
                Ok(_) => {}
                Err(e) if matches!(e.errno(), libc::ENOENT | libc::ENOTDIR) => {}
                Err(e) => return Err(e),
            }
            let quiet = begun == done
                && self.renames_begun.load(Ordering::SeqCst) == begun
                && self.renames_done.load(Ordering::SeqCst) == done;
            if quiet || tries >= 64 {
                if mark {
                    tracing::debug!(ino = inode.ino, name = %String::from_utf8_lossy(&name), "inode marked stale: its name no longer leads to it");
                    inode.stale.store(true, Ordering::Relaxed);
                }
                return Err(FsError::STALE);
            }
            std::thread::yield_now();
        }
    }

    /// Tells the table a rename through the mount is under way until the
    /// returned guard is dropped, which the caller does after updating the
    /// moved inode's link ([`InodeTable::moved`]).
    pub fn renaming(&self) -> Renaming<'_> {
        // SeqCst: ordered before the rename in the source; pairs with the
        // loads in `open_by_name`.
        self.renames_begun.fetch_add(1, Ordering::SeqCst);
        Renaming(self)
    }

    /// Opens `inode` afresh with `flags` (a real descriptor, not pooled).
    pub fn open(&self, inode: &Inode, flags: libc::c_int) -> FsResult<OwnedFd> {
        let reopen = |fd: &OwnedFd| {
            if flags & libc::O_PATH != 0 {
                sys::openat(fd.as_fd(), sys::EMPTY, flags | libc::O_PATH, 0).or_else(|_| sys::reopen(fd.as_fd(), flags))
            } else {
                sys::reopen(fd.as_fd(), flags)
            }
        };
        match &inode.backing {
            Backing::Pinned(fd) => reopen(fd),
            // Checked by name first (`O_PATH`), then reopened: an open with
            // `O_TRUNC` never reaches an object the name no longer names.
            Backing::ByName => reopen(&*self.path_fd(inode)?),
            Backing::Handle { handle, mount } => {
                let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
                sys::open_by_handle_at(mount.fd.as_fd(), handle, flags).inspect_err(|e| {
                    if e.errno() == libc::ESTALE {
                        tracing::debug!(ino = inode.ino, name = %String::from_utf8_lossy(&inode.link().1), "inode marked stale: its handle no longer opens");
                        inode.stale.store(true, Ordering::Relaxed);
                    }
                })
            }
        }
    }

    /// The live inode with source key `key`, if any.
    pub fn find(&self, key: Key) -> Option<Arc<Inode>> {
        self.by_key[Self::key_shard(&key)]
            .lock()
            .get(&key)
            .and_then(Weak::upgrade)
    }

    /// Whether an inode of the table lives on the mount with unique id
    /// `id` (through its kernel file handle's mount).
    pub fn holds_mount(&self, id: u64) -> bool {
        id != 0
            && self
                .mounts
                .read()
                .values()
                .any(|m| m.upgrade().is_some_and(|m| m.unique_id == id))
    }

    /// Inodes created without a file handle ([`Backing::ByName`]).
    pub fn by_name(&self) -> u64 {
        self.by_name.load(Ordering::Relaxed)
    }

    /// Inodes made while the handle index was kept that could not be
    /// listed in it (no file handle): the source watcher cannot find them.
    pub fn unindexed(&self) -> u64 {
        self.unindexed.load(Ordering::Relaxed)
    }

    /// Every inode the kernel knows, the root excluded.
    pub fn all_known(&self) -> Vec<Arc<Inode>> {
        let mut out = Vec::new();
        for shard in self.by_ino.iter() {
            out.extend(shard.read().values().filter(|i| i.ino != ROOT_INO).cloned());
        }
        out
    }

    /// Inodes the kernel knows.
    pub fn known(&self) -> usize {
        self.by_ino.iter().map(|s| s.read().len()).sum()
    }

    /// The inodes the kernel knows under directory `dir` (not `dir`
    /// itself), each with its depth (1 = a child), found by walking the
    /// children index down from `dir`; and how many index entries the walk
    /// visited. The cost follows the subtree, not the table.
    pub fn known_under(&self, dir: u64) -> (Vec<(Arc<Inode>, u32)>, u64) {
        self.known_under_where(dir, |_| true)
    }

    /// [`known_under`](Self::known_under), entering only the directories
    /// `enter` accepts (those it refuses are listed, not what is under
    /// them).
    pub fn known_under_where(&self, dir: u64, enter: impl Fn(&Inode) -> bool) -> (Vec<(Arc<Inode>, u32)>, u64) {
        let mut out = Vec::new();
        let mut visited = 0u64;
        let mut seen = std::collections::HashSet::new();
        seen.insert(dir);
        let mut queue = VecDeque::from([(dir, 0u32)]);
        while let Some((parent, depth)) = queue.pop_front() {
            for child in self.children.of(parent) {
                visited += 1;
                if !seen.insert(child) {
                    continue; // A cycle through stale links.
                }
                let Ok(inode) = self.get(child) else { continue };
                if inode.is_dir() && enter(&inode) {
                    queue.push_back((child, depth + 1));
                }
                out.push((inode, depth + 1));
            }
        }
        (out, visited)
    }

    /// The inodes the kernel knows under the node ids of directories it
    /// has forgotten (orphans, see [`adopt`](Self::adopt)), each with its
    /// depth under that node id. Where such a directory is, nothing here
    /// says until a lookup adopts its children.
    pub fn orphans_known(&self) -> Vec<(Arc<Inode>, u32)> {
        self.orphans_known_where(|_| true)
    }

    /// [`orphans_known`](Self::orphans_known), entering only the
    /// directories `enter` accepts (see [`known_under_where`](Self::known_under_where)).
    pub fn orphans_known_where(&self, enter: impl Fn(&Inode) -> bool) -> Vec<(Arc<Inode>, u32)> {
        let olds: Vec<u64> = self.orphans.lock().values().copied().collect();
        olds.into_iter()
            .flat_map(|old| self.known_under_where(old, &enter).0)
            .collect()
    }

    /// Directories with a child in the children index.
    pub fn indexed_parents(&self) -> usize {
        self.children.parents()
    }

    /// The node ids of the inodes freed since the last call; their dead
    /// key-index entries are removed on the way. The caller drops their
    /// page-cache entries.
    pub fn reap(&self) -> Vec<u64> {
        if !self.reaper.pending.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let gone = {
            let mut g = self.reaper.gone.lock();
            self.reaper.pending.store(false, Ordering::Relaxed);
            std::mem::take(&mut *g)
        };
        for (ino, key, hkey) in &gone {
            // A dcache-only inode may have had a pooled descriptor.
            self.pool.remove(*ino);
            {
                let mut keys = self.by_key[Self::key_shard(key)].lock();
                if keys.get(key).is_some_and(|w| w.strong_count() == 0) {
                    keys.remove(key);
                }
            }
            if let (Some(h), Some(index)) = (hkey, &self.by_handle) {
                let mut map = index[handle_shard(h)].lock();
                if map.get(h).is_some_and(|w| w.strong_count() == 0) {
                    map.remove(h);
                }
            }
        }
        gone.into_iter().map(|(ino, _, _)| ino).collect()
    }

    /// Every inode the kernel knows (for tests).
    pub fn snapshot(&self) -> Vec<Arc<Inode>> {
        self.by_ino
            .iter()
            .flat_map(|s| s.read().values().cloned().collect::<Vec<_>>())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table over a temporary directory holding one file, `f`.
    struct OneFile {
        _dir: tempfile::TempDir,
        /// The directory, as the parent descriptor of lookups.
        pfd: OwnedFd,
        table: InodeTable,
        /// `f`'s `stat`.
        st: libc::stat,
    }

    impl OneFile {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(dir.path().join("f"), b"x").expect("write");
            let path = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).expect("path");
            let root_fd = sys::open_path(&path, libc::O_PATH | libc::O_DIRECTORY).expect("open");
            let pfd = root_fd.try_clone().expect("dup");
            let (table, _root) = InodeTable::new(root_fd, 16, sys::is_root()).expect("table");
            let st = sys::fstatat(pfd.as_fd(), c"f", libc::AT_SYMLINK_NOFOLLOW).expect("stat");
            Self {
                _dir: dir,
                pfd,
                table,
                st,
            }
        }

        /// `f`'s inode, as a LOOKUP finds it (without a kernel reference).
        fn intern(&self) -> Arc<Inode> {
            self.table
                .intern(NewInode {
                    parent_ino: ROOT_INO,
                    parent: self.pfd.as_fd(),
                    name: c"f",
                    st: self.st,
                    renames: self.table.watch_renames(),
                })
                .expect("intern")
        }
    }

    #[test]
    fn a_freed_inode_is_reaped_with_its_key_and_index_entries() {
        let one = OneFile::new();
        let table = &one.table;
        let inode = one.intern();
        let (ino, key) = (inode.ino, inode.key);
        table.remember(&inode, 2);
        let under: Vec<(u64, u32)> = table.known_under(ROOT_INO).0.iter().map(|(i, d)| (i.ino, *d)).collect();
        assert_eq!(under, [(ino, 1)]);
        assert!(table.forget(ino, 1).is_none());
        let gone = table.forget(ino, 1).expect("the last reference");
        assert!(table.known_under(ROOT_INO).0.is_empty());
        assert_eq!(table.indexed_parents(), 0);
        // Still alive (held here): nothing to reap, the key still finds it.
        assert!(table.reap().is_empty());
        drop(gone);
        assert!(table.find(key).is_some());
        drop(inode);
        assert_eq!(table.reap(), [ino]);
        assert!(table.find(key).is_none());
        assert_eq!(table.by_key.iter().map(|s| s.lock().len()).sum::<usize>(), 1);
        assert!(table.reap().is_empty());
    }

    /// FORGET of the last kernel reference racing with a LOOKUP that
    /// revives the inode: while the lookup holds the inode it found, the
    /// key index must still lead to it. FORGET used to read the reference
    /// count before taking the key lock, so the lookup's revival could fall
    /// in between and the key entry of a live inode was removed; the next
    /// lookup then made a second node id for the same file.
    #[test]
    fn a_lookup_that_revives_a_forgotten_inode_keeps_its_key_entry() {
        let one = OneFile::new();
        let table = &one.table;
        let lookup = || {
            let inode = one.intern();
            table.remember(&inode, 1);
            inode
        };
        let key = lookup().key;
        let stop = AtomicBool::new(false);
        let lost = std::thread::scope(|s| {
            // The kernel forgetting whatever node id the file has now.
            let forgetter = s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(i) = table.find(key) {
                        let ino = i.ino;
                        drop(i);
                        drop(table.forget(ino, u64::MAX));
                    }
                }
            });
            let mut lost = 0u32;
            for _ in 0..200_000 {
                let held = lookup();
                if table.find(key).is_none_or(|i| i.ino != held.ino) {
                    lost += 1;
                }
            }
            stop.store(true, Ordering::Relaxed);
            forgetter.join().expect("forgetter");
            lost
        });
        assert_eq!(lost, 0, "a held, known inode lost its key entry {lost} times");
    }
}
