//! Open files and directories: the handle tables, the descriptors shared
//! between handles of one inode, and the descriptor reserve kept for root.
//!
//! # Sharing
//! Each OPEN gets its own file handle (`fh`) with its own per-handle state
//! (the `O_APPEND` flag; a directory's read position lives in the kernel's
//! offsets), but the descriptor behind it is shared by every handle of the
//! same inode opened with the same [`ShareKey`]: the access mode and the
//! file status flags that change what a read or write on the descriptor
//! does (`O_APPEND`, `O_SYNC`/`O_DSYNC`, `O_NOATIME`,
//! `O_NONBLOCK`, `O_ASYNC`, `O_PATH`). All I/O on a shared descriptor is
//! positional (`pread`/`pwrite`), so the descriptor's own offset is never
//! used. The daemon thus holds one descriptor per open inode and mode, not
//! one per open: 20,000 opens of one file cost one descriptor.
//!
//! Reusing a descriptor must not skip the permission check the open would
//! have made for the new caller: [`SharedFds::get`] takes the open as a
//! closure and, on the reuse path, runs a `recheck` hook on the shared
//! descriptor first ([`recheck_access`]: `faccessat2(fd, "", mode,
//! AT_EACCESS | AT_EMPTY_PATH)`, which checks under the calling thread's
//! current filesystem credentials, and refuses a write without `O_APPEND`
//! to a file that has become append-only). Opens whose effect or
//! permission that check does not cover (`O_TRUNC` truncates, `O_NOATIME`
//! needs ownership) always run the real open; the fresh descriptor then
//! joins the shared one if there is one (it is closed at once) or becomes
//! it.
//!
//! Directories are not shared: `readdir` seeks the descriptor and reads a
//! batch, and some filesystems keep per-open-file directory state that a
//! seek of another handle would reset (overlayfs's merged-directory cache is
//! rebuilt on a rewind, hashed directories keep a cursor in the open file),
//! so two handles sharing one would see each other's rewinds.
//!
//! # The reserve, and each user's share
//! A non-root caller's open that needs a new descriptor is refused with
//! `EMFILE` once the daemon's descriptors reach `limit − reserve`
//! ([`FdGate`]); root's never is, so a user holding thousands of files open
//! cannot lock root out of the mount. The test is the descriptor number the
//! kernel gave: Linux hands out the lowest free number, so a number at or
//! above the threshold means every number below it is in use. The refusal
//! is logged at most once per interval with the count of suppressed ones.
//!
//! Nor can one user lock the other users out: each non-root user may hold
//! at most half of what lies below the threshold ([`FdGate::user_max`]).
//! What a user holds is counted per descriptor it has a handle on: a
//! shared descriptor is charged once to every non-root user with a handle
//! on it ([`SharedFd::hold`]), from that user's first handle to its last,
//! and a directory's own descriptor to the user who opened it, while the
//! handle keeps it ([`Charge`]). So a descriptor kept open by another
//! user's handles no longer counts against the user who opened it: one
//! user cannot use up another's share by holding on to what that other
//! user opened (when a descriptor was charged to its opener alone, it
//! could). The sum of the charges may exceed the descriptors (two users
//! on one descriptor are charged one each); the threshold, which counts
//! the daemon's real descriptors, is what protects root.
//!
//! # Invariants
//! - A map entry names a live shared descriptor or one whose last handle is
//!   being dropped; the descriptor's `Drop` removes its own entry (only if
//!   the entry still points to it), and closes the descriptor outside the
//!   shard lock.
//! - The shard locks are leaves: nothing is opened, closed or checked while
//!   one is held.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::error::{FsError, FsResult};
use crate::inode::Inode;
use crate::ratelog::RateLimit;
use crate::sys;

/// An open regular file (or other non-directory).
#[derive(Debug)]
pub struct OpenFile {
    /// The inode.
    pub inode: Arc<Inode>,
    /// The descriptor, shared with other handles of the same key; this
    /// handle is one of its holder `uid`'s ([`SharedFd::hold`]), let go
    /// when the handle is dropped.
    pub fd: Arc<SharedFd>,
    /// Opened with `O_APPEND`.
    pub append: bool,
    /// The user whose open made the handle.
    pub uid: u32,
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        self.fd.let_go(self.uid);
    }
}

/// An open directory (its descriptor is its own; see the module docs).
#[derive(Debug)]
pub struct OpenDir {
    /// The inode.
    pub inode: Arc<Inode>,
    /// The descriptor; `readdir` seeks it, so it is locked per batch.
    /// `None` when the handle reads a listing (`listing.rs`) and so needs
    /// none.
    pub fd: Mutex<Option<OwnedFd>>,
    /// The listing this handle reads, if the whole directory was read at
    /// OPENDIR (or a kept listing served it); renewed by a READDIR from
    /// offset 0 if the directory's listing changed since (`Fs::readdir`).
    pub listing: Mutex<Option<Arc<crate::listing::Listing>>>,
    /// Whether a kept listing served the OPENDIR (the same listing as the
    /// previous OPENDIR's, so the kernel may keep what it cached of it).
    pub kept: bool,
    /// The charge of `fd` to its user, given back with the handle.
    pub charge: Option<Charge>,
}

/// A sharded table of open handles (no lock covers all of them).
type Shard<T> = RwLock<crate::ids::IdMap<u64, Arc<T>>>;

/// File handles -> open files or directories.
#[derive(Debug)]
pub struct Handles<T> {
    shards: Box<[Shard<T>]>,
    next: AtomicU64,
}

impl<T> Default for Handles<T> {
    fn default() -> Self {
        Self {
            shards: (0..32).map(|_| RwLock::new(crate::ids::IdMap::default())).collect(),
            next: AtomicU64::new(1),
        }
    }
}

impl<T> Handles<T> {
    fn shard(&self, fh: u64) -> &Shard<T> {
        &self.shards[(fh as usize) % self.shards.len()]
    }

    /// Stores `v` under a new file handle.
    pub fn insert(&self, v: T) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(fh).write().insert(fh, Arc::new(v));
        fh
    }

    /// The handle's entry (`EBADF` if unknown).
    pub fn get(&self, fh: u64) -> FsResult<Arc<T>> {
        self.shard(fh).read().get(&fh).cloned().ok_or(FsError::BADF)
    }

    /// Forgets the handle.
    pub fn remove(&self, fh: u64) -> Option<Arc<T>> {
        self.shard(fh).write().remove(&fh)
    }

    /// Open handles.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The open flags that make two descriptors of one inode behave differently
/// (`O_DIRECT` is not one: it never reaches the source, see `fs/args.rs`).
const SHARE_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_NOATIME
    | libc::O_NONBLOCK
    | libc::O_ASYNC
    | libc::O_PATH
    | libc::O_DIRECTORY;

/// What makes two opens of one inode interchangeable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShareKey {
    ino: u64,
    flags: i32,
}

impl ShareKey {
    /// The key of an open of node id `ino` with `flags`.
    pub fn new(ino: u64, flags: i32) -> Self {
        Self {
            ino,
            flags: flags & SHARE_FLAGS,
        }
    }
}

/// Whether an open with `flags` may reuse a shared descriptor after
/// [`recheck_access`], rather than run the real open: not when the open has
/// an effect (`O_TRUNC`) or a permission rule (`O_NOATIME`) that an access
/// check does not cover.
pub fn reusable(flags: i32) -> bool {
    flags & (libc::O_TRUNC | libc::O_NOATIME) == 0
}

/// The reuse path's permission check: may the calling thread (under its
/// current filesystem credentials) open the descriptor's file with the
/// access mode of `flags`?
///
/// The access check covers the permission bits, ACLs, a read-only
/// filesystem and an immutable file; the open's own rule for an
/// append-only file (`chattr +a`: writing without `O_APPEND` is `EPERM`,
/// even for root) is not part of it and is checked here. A descriptor
/// shared from before the file became append-only would otherwise let a
/// new open write anywhere in it. (Handles opened before keep writing, as
/// descriptors opened before do on the source.)
pub fn recheck_access(fd: BorrowedFd<'_>, flags: i32) -> FsResult<()> {
    let mode = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => libc::R_OK,
        libc::O_WRONLY => libc::W_OK,
        _ => libc::R_OK | libc::W_OK,
    };
    sys::access_fd(fd, mode)?;
    if mode & libc::W_OK != 0 && flags & libc::O_APPEND == 0 && sys::append_only(fd)? {
        return Err(FsError::new(libc::EPERM));
    }
    Ok(())
}

type ShareShard = parking_lot::Mutex<HashMap<ShareKey, Weak<SharedFd>>>;

#[derive(Debug)]
struct SharedInner {
    shards: Box<[ShareShard]>,
    live: AtomicU64,
    reuses: AtomicU64,
}

impl SharedInner {
    fn shard(&self, key: &ShareKey) -> &ShareShard {
        &self.shards[(key.ino as usize ^ key.flags as usize) % self.shards.len()]
    }
}

/// A descriptor shared by the handles of one [`ShareKey`].
#[derive(Debug)]
pub struct SharedFd {
    fd: OwnedFd,
    key: ShareKey,
    table: Arc<SharedInner>,
    /// The non-root users with a handle on the descriptor: how many
    /// handles each, and its charge (see the module docs).
    holders: Mutex<HashMap<u32, Holding>>,
}

#[derive(Debug)]
struct Holding {
    handles: u64,
    _charge: Charge,
}

impl SharedFd {
    /// Counts one more handle of `uid` on the descriptor. A user's first
    /// handle charges the descriptor to it, refused with `EMFILE` if it
    /// holds its share already, unless `forced` (a CREATE's descriptor,
    /// whose file is made: [`FdGate::precheck`] refused past the share
    /// before it). Root's handles are not counted. Each successful call is
    /// matched by one [`let_go`](Self::let_go) (the [`OpenFile`]'s drop).
    pub fn hold(&self, gate: &Arc<FdGate>, uid: u32, forced: bool) -> FsResult<()> {
        if uid == 0 {
            return Ok(());
        }
        // Lock order: the holders, then the gate's users (in `take_share`
        // and in a charge's drop); nothing takes them the other way.
        let mut holders = self.holders.lock();
        if let Some(h) = holders.get_mut(&uid) {
            h.handles += 1;
            return Ok(());
        }
        let charge = if forced {
            gate.charge(uid)
        } else {
            gate.take_share(uid)?
        };
        if let Some(charge) = charge {
            holders.insert(
                uid,
                Holding {
                    handles: 1,
                    _charge: charge,
                },
            );
        }
        Ok(())
    }

    /// One handle of `uid` is gone; its last gives the user's charge back.
    pub fn let_go(&self, uid: u32) {
        if uid == 0 {
            return;
        }
        let mut holders = self.holders.lock();
        if let Some(h) = holders.get_mut(&uid) {
            h.handles -= 1;
            if h.handles == 0 {
                holders.remove(&uid);
            }
        }
    }

    /// The non-root users with a handle on it (for tests).
    pub fn holders(&self) -> usize {
        self.holders.lock().len()
    }
}

impl AsFd for SharedFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for SharedFd {
    fn drop(&mut self) {
        let mut shard = self.table.shard(&self.key).lock();
        // A new open may already have replaced the entry (its upgrade failed
        // while this one was being dropped): leave that one alone.
        if shard
            .get(&self.key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), self as *const Self))
        {
            shard.remove(&self.key);
        }
        drop(shard);
        self.table.live.fetch_sub(1, Ordering::Relaxed);
        // `fd` is closed after this, with no lock held.
    }
}

/// The shared descriptors, by key.
#[derive(Debug)]
pub struct SharedFds {
    inner: Arc<SharedInner>,
}

impl Default for SharedFds {
    fn default() -> Self {
        Self {
            inner: Arc::new(SharedInner {
                shards: (0..32).map(|_| parking_lot::Mutex::new(HashMap::new())).collect(),
                live: AtomicU64::new(0),
                reuses: AtomicU64::new(0),
            }),
        }
    }
}

impl SharedFds {
    /// The descriptor for `key`. With `reuse`, a live shared one is returned
    /// if `recheck` accepts it for this caller (its error is the open's);
    /// otherwise `open` runs, and its descriptor becomes the shared one, or
    /// is closed in favour of one that appeared meanwhile.
    pub fn get(
        &self,
        key: ShareKey,
        reuse: bool,
        recheck: impl FnOnce(BorrowedFd<'_>) -> FsResult<()>,
        open: impl FnOnce() -> FsResult<OwnedFd>,
    ) -> FsResult<Arc<SharedFd>> {
        let inner = &self.inner;
        if reuse {
            let found = inner.shard(&key).lock().get(&key).and_then(Weak::upgrade);
            if let Some(fd) = found {
                recheck(fd.as_fd())?;
                inner.reuses.fetch_add(1, Ordering::Relaxed);
                return Ok(fd);
            }
        }
        let fresh = open()?;
        let mut shard = inner.shard(&key).lock();
        if let Some(existing) = shard.get(&key).and_then(Weak::upgrade) {
            drop(shard);
            // The real open ran its checks; its descriptor is not needed.
            drop(fresh);
            inner.reuses.fetch_add(1, Ordering::Relaxed);
            return Ok(existing);
        }
        let fd = Arc::new(SharedFd {
            fd: fresh,
            key,
            table: inner.clone(),
            holders: Mutex::new(HashMap::new()),
        });
        shard.insert(key, Arc::downgrade(&fd));
        inner.live.fetch_add(1, Ordering::Relaxed);
        Ok(fd)
    }

    /// Shared descriptors open now.
    pub fn live(&self) -> u64 {
        self.inner.live.load(Ordering::Relaxed)
    }

    /// Opens answered with an existing descriptor.
    pub fn reuses(&self) -> u64 {
        self.inner.reuses.load(Ordering::Relaxed)
    }

    /// Keys in the map (live or being dropped; for tests).
    pub fn entries(&self) -> usize {
        self.inner.shards.iter().map(|s| s.lock().len()).sum()
    }
}

/// The descriptor reserve: non-root callers get `EMFILE` once the daemon's
/// descriptors reach the threshold.
#[derive(Debug)]
pub struct FdGate {
    threshold: u64,
    user_max: u64,
    /// Descriptors charged to each non-root user (no entry at 0).
    users: Mutex<HashMap<u32, u64>>,
    refusals: AtomicU64,
    user_refusals: AtomicU64,
    log: RateLimit,
    user_log: RateLimit,
}

/// A descriptor charged to a non-root user ([`FdGate::admit`]); kept
/// beside the descriptor, it gives the charge back when dropped.
#[derive(Debug)]
pub struct Charge {
    gate: Arc<FdGate>,
    uid: u32,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut users = self.gate.users.lock();
        if let Some(n) = users.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                users.remove(&self.uid);
            }
        }
    }
}

impl FdGate {
    /// A gate for a process limit of `limit` descriptors, of which up to
    /// `pool` are the inode pool's: the reserve is the pool plus
    /// `max(64, limit / 32)`, and at least half the limit stays usable by
    /// anyone; each user may hold half of that (see the module docs).
    pub fn new(limit: u64, pool: u64) -> Self {
        let reserve = pool + (limit / 32).max(64);
        let threshold = limit.saturating_sub(reserve).max(limit / 2);
        Self {
            threshold,
            user_max: (threshold / 2).max(1),
            users: Mutex::new(HashMap::new()),
            refusals: AtomicU64::new(0),
            user_refusals: AtomicU64::new(0),
            log: RateLimit::new(Duration::from_secs(10)),
            user_log: RateLimit::new(Duration::from_secs(10)),
        }
    }

    /// The descriptor number from which non-root opens are refused.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The most descriptors one non-root user may hold.
    pub fn user_max(&self) -> u64 {
        self.user_max
    }

    /// Whether the new descriptor `fd` may be kept for a caller with `uid`;
    /// if so, the charge to keep beside it (none for root).
    pub fn admit(self: &Arc<Self>, fd: BorrowedFd<'_>, uid: u32) -> FsResult<Option<Charge>> {
        self.admit_number(fd, uid)?;
        self.take_share(uid)
    }

    /// Whether the new descriptor `fd` may be made for a caller with
    /// `uid`: not for a non-root caller once the descriptor numbers reach
    /// the threshold. Nothing is charged.
    pub fn admit_number(&self, fd: BorrowedFd<'_>, uid: u32) -> FsResult<()> {
        if uid != 0 && (fd.as_raw_fd() as u64) >= self.threshold {
            return Err(self.refuse(uid));
        }
        Ok(())
    }

    /// Charges one more descriptor to `uid`, refused with `EMFILE` once it
    /// holds its share; none for root.
    pub fn take_share(self: &Arc<Self>, uid: u32) -> FsResult<Option<Charge>> {
        if uid == 0 {
            return Ok(None);
        }
        let mut users = self.users.lock();
        let held = users.entry(uid).or_insert(0);
        if *held >= self.user_max {
            drop(users);
            return Err(self.refuse_user(uid));
        }
        *held += 1;
        Ok(Some(Charge {
            gate: self.clone(),
            uid,
        }))
    }

    /// Before an open that cannot be taken back (CREATE makes the file):
    /// whether a new descriptor would be admitted (`any` is any descriptor
    /// to probe with).
    pub fn precheck(&self, any: BorrowedFd<'_>, uid: u32) -> FsResult<()> {
        if uid == 0 {
            return Ok(());
        }
        if (sys::lowest_free_fd(any)? as u64) >= self.threshold {
            return Err(self.refuse(uid));
        }
        if self.held_by(uid) >= self.user_max {
            return Err(self.refuse_user(uid));
        }
        Ok(())
    }

    /// Charges a descriptor already made to `uid`, whatever its share (a
    /// CREATE's, checked by [`precheck`](Self::precheck) before the file
    /// was made); none for root.
    pub fn charge(self: &Arc<Self>, uid: u32) -> Option<Charge> {
        if uid == 0 {
            return None;
        }
        *self.users.lock().entry(uid).or_insert(0) += 1;
        Some(Charge {
            gate: self.clone(),
            uid,
        })
    }

    /// Descriptors charged to `uid` now.
    pub fn held_by(&self, uid: u32) -> u64 {
        self.users.lock().get(&uid).copied().unwrap_or(0)
    }

    /// Charges held now, over every user.
    pub fn charged(&self) -> u64 {
        self.users.lock().values().sum()
    }

    fn refuse(&self, uid: u32) -> FsError {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.log.allow() {
            tracing::warn!(
                uid,
                threshold = self.threshold,
                suppressed,
                "descriptor reserve reached: a non-root open is refused with EMFILE (root's are not)"
            );
        }
        FsError::new(libc::EMFILE)
    }

    fn refuse_user(&self, uid: u32) -> FsError {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        self.user_refusals.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.user_log.allow() {
            tracing::warn!(
                uid,
                user_max = self.user_max,
                suppressed,
                "a user holds its share of the daemon's descriptors: its open is refused with EMFILE \
                 (other users' are not)"
            );
        }
        FsError::new(libc::EMFILE)
    }

    /// Opens refused since the mount (for either reason).
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Of those, the opens refused because their user held its share.
    pub fn user_refusals(&self) -> u64 {
        self.user_refusals.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn null() -> FsResult<OwnedFd> {
        sys::open_path(c"/dev/null", libc::O_RDONLY)
    }

    fn devnull() -> FsResult<OwnedFd> {
        null()
    }

    #[test]
    fn one_descriptor_per_key_released_with_the_last_handle() {
        let s = SharedFds::default();
        let k = ShareKey::new(5, libc::O_RDONLY);
        let mut opens = 0;
        let a = s
            .get(
                k,
                true,
                |_| Ok(()),
                || {
                    opens += 1;
                    devnull()
                },
            )
            .unwrap();
        let b = s.get(k, true, |_| Ok(()), || panic!("reused, not opened")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((opens, s.live(), s.reuses()), (1, 1, 1));
        // Another mode is another descriptor.
        let c = s
            .get(
                ShareKey::new(5, libc::O_RDONLY | libc::O_APPEND),
                true,
                |_| Ok(()),
                devnull,
            )
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(s.live(), 2);
        drop((a, c));
        assert_eq!(s.live(), 1);
        drop(b);
        assert_eq!((s.live(), s.entries()), (0, 0));
    }

    #[test]
    fn concurrent_opens_and_releases_of_one_key_leave_nothing_behind() {
        let s = SharedFds::default();
        let k = ShareKey::new(9, libc::O_RDONLY);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let s = &s;
                scope.spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..5_000 {
                        let fd = s.get(k, t % 2 == 0, |_| Ok(()), devnull).unwrap();
                        // The descriptor is open for as long as it is held.
                        sys::fstat(fd.as_fd()).unwrap();
                        held.push(fd);
                        if i % 3 == 0 {
                            held.clear();
                        }
                    }
                    for fd in &held {
                        sys::fstat(fd.as_fd()).unwrap();
                    }
                });
            }
        });
        assert_eq!((s.live(), s.entries()), (0, 0));
    }

    #[test]
    fn a_refused_recheck_is_the_open_error_and_a_fresh_open_joins() {
        let s = SharedFds::default();
        let k = ShareKey::new(7, libc::O_WRONLY);
        let a = s.get(k, true, |_| Ok(()), devnull).unwrap();
        let denied = s.get(k, true, |_| Err(FsError::new(libc::EACCES)), || panic!("no open"));
        assert_eq!(denied.unwrap_err().errno(), libc::EACCES);
        // Without reuse (O_TRUNC), the open runs and its descriptor is dropped
        // in favour of the shared one.
        let mut ran = false;
        let b = s
            .get(
                k,
                false,
                |_| panic!("no recheck"),
                || {
                    ran = true;
                    devnull()
                },
            )
            .unwrap();
        assert!(ran && Arc::ptr_eq(&a, &b));
        assert_eq!(s.live(), 1);
        assert!(!reusable(libc::O_WRONLY | libc::O_TRUNC));
        assert!(reusable(libc::O_RDWR | libc::O_APPEND));
    }

    #[test]
    fn recheck_access_runs_under_the_threads_filesystem_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private");
        std::fs::write(&path, b"x").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let fd = sys::open_path(&c, libc::O_RDONLY).unwrap();
        if !sys::is_root() {
            return; // Switching the filesystem uid needs root.
        }
        recheck_access(fd.as_fd(), libc::O_RDWR).unwrap();
        // On its own thread: setfsuid changes only the calling thread.
        let denied = std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setfsuid only changes this thread's filesystem uid.
                unsafe { libc::setfsuid(65534) };
                let r = recheck_access(fd.as_fd(), libc::O_RDONLY);
                // SAFETY: as above, back to root before the thread ends.
                unsafe { libc::setfsuid(0) };
                r
            })
            .join()
            .unwrap()
        });
        assert_eq!(denied.unwrap_err().errno(), libc::EACCES);
        recheck_access(fd.as_fd(), libc::O_RDONLY).unwrap();
    }

    #[test]
    fn the_gate_refuses_high_descriptors_for_non_root_only() {
        let g = Arc::new(FdGate::new(1024, 256));
        assert_eq!(g.threshold(), 1024 - 256 - 64);
        let low = null().unwrap();
        assert!((low.as_raw_fd() as u64) < g.threshold());
        g.admit(low.as_fd(), 65534).unwrap();
        g.precheck(low.as_fd(), 65534).unwrap();
        // A tiny limit: every descriptor is above the threshold.
        let g = Arc::new(FdGate::new(2, 0));
        assert_eq!(g.threshold(), 1);
        assert_eq!(g.admit(low.as_fd(), 65534).unwrap_err().errno(), libc::EMFILE);
        assert_eq!(g.precheck(low.as_fd(), 1000).unwrap_err().errno(), libc::EMFILE);
        g.admit(low.as_fd(), 0).unwrap();
        assert_eq!(g.refusals(), 2);
    }

    /// Each non-root user may hold half of what lies below the threshold;
    /// a charge is given back when dropped, and another user (and root)
    /// still gets descriptors while one user holds its whole share.
    #[test]
    fn one_user_holds_at_most_its_share() {
        let g = Arc::new(FdGate::new(1024, 256));
        let share = g.user_max();
        assert_eq!(share, g.threshold() / 2);
        let fd = null().unwrap();
        let mut held: Vec<Charge> = (0..share)
            .map(|_| g.admit(fd.as_fd(), 1000).unwrap().expect("a charge"))
            .collect();
        assert_eq!(g.held_by(1000), share);
        assert_eq!(g.admit(fd.as_fd(), 1000).unwrap_err().errno(), libc::EMFILE);
        assert_eq!(g.precheck(fd.as_fd(), 1000).unwrap_err().errno(), libc::EMFILE);
        assert_eq!(g.user_refusals(), 2);
        let other = g.admit(fd.as_fd(), 1001).unwrap().expect("another user's charge");
        assert!(g.admit(fd.as_fd(), 0).unwrap().is_none(), "root is never charged");
        held.pop();
        assert_eq!(g.held_by(1000), share - 1);
        held.push(g.admit(fd.as_fd(), 1000).unwrap().expect("room again"));
        drop(held);
        drop(other);
        assert_eq!(g.held_by(1000), 0);
        assert!(g.users.lock().is_empty(), "entries left: {:?}", g.users.lock());
        // A create's descriptor is charged whatever the share.
        let made: Vec<Charge> = (0..share + 1).filter_map(|_| g.charge(1002)).collect();
        assert_eq!(g.held_by(1002), share + 1);
        drop(made);
        assert_eq!(g.held_by(1002), 0);
    }

    /// A shared descriptor is charged once to each non-root user with a
    /// handle on it, from its first handle to its last: the user who opened
    /// it is no longer charged once its own handles are gone, however long
    /// another user's keep it open.
    #[test]
    fn a_shared_descriptor_is_charged_to_each_user_holding_it() {
        let g = Arc::new(FdGate::new(1024, 256));
        let s = SharedFds::default();
        let k = ShareKey::new(3, libc::O_RDONLY);
        let (a, b) = (1000, 1001);
        let fd = s.get(k, true, |_| Ok(()), devnull).unwrap();
        fd.hold(&g, a, false).unwrap();
        fd.hold(&g, a, false).unwrap();
        let again = s.get(k, true, |_| Ok(()), || panic!("reused")).unwrap();
        again.hold(&g, b, false).unwrap();
        again.hold(&g, 0, false).unwrap();
        assert_eq!((g.held_by(a), g.held_by(b), g.charged(), fd.holders()), (1, 1, 2, 2));
        fd.let_go(a);
        assert_eq!(g.held_by(a), 1, "one of a's two handles is still open");
        fd.let_go(a);
        assert_eq!((g.held_by(a), g.held_by(b), fd.holders()), (0, 1, 1));
        again.let_go(0);
        again.let_go(b);
        assert_eq!((g.charged(), fd.holders()), (0, 0));
        assert!(g.users.lock().is_empty());
        // A user at its share may add handles to a descriptor it holds,
        // not hold a new one, unless forced (a CREATE's).
        let share = g.user_max();
        let mut rest: Vec<Charge> = (0..share - 1).map(|_| g.take_share(a).unwrap().unwrap()).collect();
        fd.hold(&g, a, false).unwrap();
        fd.hold(&g, a, false).unwrap();
        let other = s
            .get(ShareKey::new(4, libc::O_RDONLY), true, |_| Ok(()), devnull)
            .unwrap();
        assert_eq!(other.hold(&g, a, false).unwrap_err().errno(), libc::EMFILE);
        other.hold(&g, a, true).unwrap();
        assert_eq!(g.held_by(a), share + 1);
        other.let_go(a);
        fd.let_go(a);
        fd.let_go(a);
        rest.clear();
        assert_eq!(g.held_by(a), 0);
    }
}
