//! The FUSE adapter: the only file that names `fuser`.
//!
//! Each operation opens a tracing span with the request id, node id and pid,
//! calls the matching method of [`Fs`] and turns its result into the reply:
//! `Ok(v)` into the reply's success form, `Err(e)` into `reply.error(e.errno())`.
//! Expected errnos (ENOENT, EEXIST, ...) are logged at debug, others at warn.
//!
//! The `session` module mounts: as root it calls mount(2) itself with the
//! filesystem type `fuse.rcufs` and `default_permissions`, then hands the
//! `/dev/fuse` descriptor to fuser (`Session::from_fd`), because fuser's own
//! mount always names the type `fuse`; the INIT handshake has happened when
//! it returns. `batch_forget` is fuser's default (one `forget` per node):
//! fuser 0.18 does not export the type of its argument.
//!
//! READ is answered with `ReplyData::data_vectored`, an addition to fuser
//! carried in `vendor/fuser` (ARCHITECTURE.md says why): the reply header
//! and the pinned cache pages of `pinned.rs` go to the kernel in one
//! `writev`, the pages pinned until it returns. Files opened with direct
//! I/O also get `FOPEN_PARALLEL_DIRECT_WRITES` (the kernel sends
//! non-extending writes to one file concurrently; `range_lock.rs` orders
//! those that share a page).
//!
//! With `--io-uring on|idle`, INIT also asks for `FUSE_OVER_IO_URING`
//! (refused with a message that says how to enable it if the kernel does
//! not offer it) and caps `max_write` at 1 MiB (each queue entry holds a
//! buffer of the largest request); requests then come through per-CPU
//! io_uring queues, an addition of the vendored fuser (`uring.rs` there),
//! and this adapter serves them unchanged. `idle` runs the queue threads
//! under `SCHED_IDLE`, watched by `uring_guard.rs`.
//!
//! INIT asks for `FUSE_POSIX_ACL`, `FUSE_DONT_MASK` and
//! `FUSE_HANDLE_KILLPRIV_V2`: the kernel checks ACLs, and leaves the umask
//! and setuid/setgid clearing to the source, since the operations run as
//! the caller (`creds.rs`; `SEMANTICS.md`, "Whose identity"). The caller's
//! uid, gid and pid, and the umask of the creating requests, are passed to
//! [`Fs`] as a [`Caller`].
//!
//! Kernel cache invalidations (kernel-cache mode, and attributes lent in
//! the default mode with the watch; after a drop) go onto the
//! filesystem's bounded queue (`inval.rs`) and two dedicated threads send
//! them (entries and inodes, so that an entry waiting for a directory lock
//! never delays a page invalidation); the push never blocks, and the queue
//! closes when the adapter is dropped (the session ended). A drop is
//! answered only once its invalidations have been sent (bounded), so that
//! its caller sees the kernel's copies gone; its reply is kept by the queue
//! and sent by the queue's answering thread, so that no FUSE worker waits
//! (the requests the invalidations wait for in the kernel need one). The
//! one exception are the entries directly in a directory whose inode lock
//! the kernel holds for a SETXATTR in flight (`inval_entry` in it would
//! wait for that lock): the queue parks them until that request is
//! answered (`HeldDir`). An open that finds the file changed invalidates
//! the kernel's attributes from inside the handler (that takes no inode
//! lock in the kernel).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::error::{FsError, FsResult};
use crate::fs::lease::Lease;
use crate::fs::{Attr, Caller, Fs, Inval, Kind, Opened, SetAttr, XattrReply};
use crate::inval::{Lane, Outcome};
use crate::ratelog::RateLimit;

/// The adapter between fuser and [`Fs`].
pub struct FuseAdapter {
    fs: Arc<Fs>,
    notifier: Arc<OnceLock<Notifier>>,
    io_uring: crate::mount::IoUring,
}

/// Whenever the kernel keeps something rcufs invalidates (kernel-cache
/// mode, or attributes lent in the default mode): marks a directory as
/// locked by the kernel for the request in flight (a SETXATTR on it) until
/// the guard is dropped, after the reply, so that the invalidation thread
/// parks entries in it instead of blocking on that lock. The default mode
/// queues no entries today; the hold keeps a drop's answer from waiting on
/// its own directory's lock if it ever does.
struct HeldDir {
    fs: Arc<Fs>,
    dir: u64,
}

impl HeldDir {
    fn new(fs: &Arc<Fs>, dir: u64) -> Option<Self> {
        fs.kernel_keeps_attrs().then(|| {
            fs.inval_queue().hold(dir);
            Self { fs: fs.clone(), dir }
        })
    }
}

impl Drop for HeldDir {
    fn drop(&mut self) {
        self.fs.inval_queue().release(self.dir);
    }
}

/// How long a drop's answer waits for its kernel invalidations.
const DROP_INVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl FuseAdapter {
    /// An adapter for `fs`; invalidations go to `fs`'s queue, and the few
    /// sent from inside a handler through `notifier`.
    pub fn new(fs: Arc<Fs>, notifier: Arc<OnceLock<Notifier>>) -> Self {
        Self {
            fs,
            notifier,
            io_uring: crate::mount::IoUring::Off,
        }
    }

    /// Asks INIT for FUSE over io_uring unless `mode` is `Off` (see the
    /// module docs); INIT fails if the kernel does not offer it.
    pub fn with_io_uring(mut self, mode: crate::mount::IoUring) -> Self {
        self.io_uring = mode;
        self
    }

    /// Queues a drop's invalidations and runs `answer` (which replies to
    /// the drop) once the invalidation threads have sent them (bounded by
    /// [`DROP_INVAL_WAIT`]), so that the caller of the drop sees the
    /// kernel's copies gone when its ioctl or setxattr returns; at once if
    /// there are none. The answer runs on the queue's answering thread:
    /// this worker goes back to serving requests. `held` is the directory
    /// whose inode lock the kernel holds for this request (SETXATTR on
    /// it), if any: entries directly in it are parked by the queue until
    /// the request is answered (the guard is dropped after `answer`), and
    /// not waited for.
    fn answer_after_inval(&self, inval: Vec<Inval>, held: Option<HeldDir>, answer: impl FnOnce() + Send + 'static) {
        if inval.is_empty() {
            answer();
            drop(held);
            return;
        }
        let q = self.fs.inval_queue();
        let ticket = q.push_ticketed(inval);
        let holding = held.as_ref().map(|h| h.dir);
        q.answer_when_sent(
            ticket,
            DROP_INVAL_WAIT,
            holding,
            Box::new(move |outcome| {
                if outcome == Outcome::TimedOut {
                    tracing::warn!(
                        "a drop's kernel invalidations took longer than {DROP_INVAL_WAIT:?}; answering before they are all sent"
                    );
                }
                answer();
                drop(held);
            }),
        );
    }

    /// Answers the entry `name` under `parent`: the node, its attributes
    /// for [`Fs::attr_ttl`] (lent for a millisecond in the default mode with
    /// the watch) and the name for [`Fs::entry_ttl`]; nothing lent (0 for
    /// both) if the answer overlapped a change of the source since `lease`
    /// (`fs/lease.rs`).
    fn entry(&self, reply: ReplyEntry, parent: u64, name: &OsStr, e: &crate::fs::Entry, lease: Lease) {
        if !self.lends(e.lend, lease) {
            reply.entry_with_ttls(&Duration::ZERO, &Duration::ZERO, &attr(&e.attr), Generation(0));
            return;
        }
        let attr_ttl = if e.ino == 0 {
            Duration::ZERO
        } else {
            self.fs.attr_ttl(e.ino)
        };
        reply.entry_with_ttls(&attr_ttl, &self.fs.entry_ttl(parent), &attr(&e.attr), Generation(0));
        let entries = self.fs.config().kernel_cache;
        self.fs
            .after_lent_reply(lease, || lent_entry(entries, parent, name, e.ino));
    }

    /// Whether a reply may lend its answer: its read was kept (`kept`) and
    /// no change was applied since `lease`; counts the ones that may not.
    fn lends(&self, kept: bool, lease: Lease) -> bool {
        if !self.fs.kernel_keeps_attrs() {
            // Every timeout is 0 anyway.
            return true;
        }
        let lends = kept && self.fs.lease_holds(lease);
        if !lends {
            self.fs.count_unlent();
        }
        lends
    }

    /// Answers attributes of `ino` for [`Fs::attr_ttl`], or for 0 if a
    /// change was applied since `lease` (`fs/lease.rs`).
    fn attr_reply(&self, reply: ReplyAttr, ino: u64, a: &Attr, lease: Lease) {
        if !self.lends(true, lease) {
            reply.attr(&Duration::ZERO, &attr(a));
            return;
        }
        reply.attr(&self.fs.attr_ttl(ino), &attr(a));
        self.fs
            .after_lent_reply(lease, || vec![Inval::Inode { ino, offset: -1 }]);
    }

    /// An open that found the file changed in the source makes the kernel
    /// forget the file's attributes before the open is answered: in
    /// kernel-cache mode, so that a read past the old end of file asks for
    /// the new size (the reply without `FOPEN_KEEP_CACHE` drops its pages);
    /// with attributes lent in the default mode, so that `fstat` of the new
    /// descriptor does not answer the ones its LOOKUP was lent. Attribute
    /// invalidation takes no inode lock in the kernel, so it is safe from
    /// inside the handler.
    fn forget_kernel_attr(&self, ino: u64) {
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(INodeNo(ino), -1, 0)
        {
            tracing::debug!(ino, error = %e, "kernel attribute invalidation not applied");
        }
    }
}

impl Drop for FuseAdapter {
    fn drop(&mut self) {
        // The session is over: let the background threads finish.
        self.fs.close_background();
    }
}

/// Sends the kernel invalidations of `lane` until the queue closes (run on
/// its own thread, one per lane).
pub fn inval_worker(fs: Arc<Fs>, notifier: Arc<OnceLock<Notifier>>, lane: Lane) {
    while let Some(inval) = fs.inval_queue().pop(lane) {
        // No notifier yet: the session is still starting, the kernel has
        // nothing cached to invalidate.
        if let Some(n) = notifier.get() {
            let r = match &inval {
                Inval::Entry { parent, name } => n.inval_entry(INodeNo(*parent), OsStr::from_bytes(name)),
                Inval::Inode { ino, offset } => n.inval_inode(INodeNo(*ino), *offset, 0),
            };
            if let Err(e) = r {
                tracing::debug!(?inval, error = %e, "kernel invalidation not applied");
            }
        }
        // Every popped invalidation is reported, or answers waiting for it
        // would wait out their bound.
        fs.inval_queue().done(lane);
    }
}

/// Out-of-descriptor errors can come thousands of times a second (a caller
/// retrying refused opens): they are logged at most once per interval.
static OUT_OF_FDS: std::sync::LazyLock<RateLimit> =
    std::sync::LazyLock::new(|| RateLimit::new(std::time::Duration::from_secs(10)));

fn errno(e: FsError) -> Errno {
    if e.is_expected() {
        tracing::debug!(errno = e.errno(), "{e}");
    } else if matches!(e.errno(), libc::EMFILE | libc::ENFILE) {
        match OUT_OF_FDS.allow() {
            Some(suppressed) => tracing::warn!(errno = e.errno(), suppressed, "{e}"),
            None => tracing::debug!(errno = e.errno(), "{e}"),
        }
    } else {
        tracing::warn!(errno = e.errno(), "{e}");
    }
    Errno::from_i32(e.errno())
}

/// Answers a request whose success carries no data.
fn reply_empty(reply: ReplyEmpty, result: FsResult<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

/// The xattr replies never say ENOSYS: the kernel would stop sending that
/// xattr operation for the whole mount (and so lose `user.rcufs.*`).
fn xattr_errno(e: FsError) -> Errno {
    if e.errno() == libc::ENOSYS {
        errno(FsError::new(libc::ENOTSUP))
    } else {
        errno(e)
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
        umask: 0,
    }
}

/// The caller of a creating request, with the umask the kernel left to
/// rcufs (`FUSE_DONT_MASK`).
fn creator(req: &Request, umask: u32) -> Caller {
    Caller { umask, ..caller(req) }
}

fn kind(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::Char => FileType::CharDevice,
        Kind::Block => FileType::BlockDevice,
    }
}

fn attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: SystemTime::UNIX_EPOCH,
        kind: kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn fopen(o: &Opened) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if o.direct_io {
        // Parallel direct writes: the kernel sends non-extending direct
        // writes to one file concurrently (extending and O_APPEND ones
        // still one at a time); `Fs::write` orders writes that share a
        // page itself (`range_lock.rs`).
        f |= FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
    }
    if o.keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if o.no_flush {
        // No FLUSH at each close of this handle (`fs/flush.rs`).
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    f
}

fn time_or_now(t: Option<TimeOrNow>) -> Option<Option<SystemTime>> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => Some(t),
        TimeOrNow::Now => None,
    })
}

macro_rules! span {
    ($op:literal, $req:expr, $ino:expr) => {
        tracing::debug_span!($op, req = $req.unique().0, ino = $ino, pid = $req.pid()).entered()
    };
}

/// Runs one request handler's body inside its span and under
/// `catch_unwind`: a panic is logged with the operation and node id and the
/// worker thread goes on serving. The body owns the reply; if the panic
/// unwound past it unsent, fuser's `Drop` for replies answers `EIO`, so the
/// caller gets an error rather than a hang. Locks are parking_lot's, which
/// a panic does not poison, so the requests that follow are not affected.
macro_rules! handler {
    ($op:literal, $req:expr, $ino:expr, $body:block) => {{
        let _s = span!($op, $req, $ino);
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| $body)) {
            panicked($op, $ino, payload.as_ref());
        }
    }};
}

/// Logs a request handler's panic (the default hook has already printed
/// its location and message to stderr).
fn panicked(op: &'static str, ino: u64, payload: &(dyn std::any::Any + Send)) {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into());
    crate::fault::record_panic();
    tracing::error!(op, ino, panic = %msg, "request handler panicked; the request was answered EIO and the daemon goes on");
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut want = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP
            | InitFlags::FUSE_ASYNC_DIO
            // The kernel's permission checks honour the source's ACLs...
            | InitFlags::FUSE_POSIX_ACL
            // ...and the umask is applied by the source (which ignores it
            // under a default ACL, as for a local process).
            | InitFlags::FUSE_DONT_MASK
            // Setuid/setgid clearing on write, truncate and chown is left to
            // the source (the operations run as the caller); the kernel does
            // not turn it into a chmod, which a non-owner may not do.
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if !self.fs.config().kernel_cache {
            // Without kernel caching every lookup must reach rcufs; nothing to add.
        } else {
            // AUTO_INVAL_DATA: every read first refreshes stale attributes
            // (at most once per attribute timeout), so a file that shrank
            // or grew in the source is read to its new end once a drop or
            // an open has invalidated the attributes; without it the
            // kernel trusts its old size for reads inside it and pads a
            // shrunken file with zeros.
            want |= InitFlags::FUSE_CACHE_SYMLINKS | InitFlags::FUSE_AUTO_INVAL_DATA;
        }
        let have = config.capabilities();
        if self.io_uring != crate::mount::IoUring::Off {
            if !have.contains(InitFlags::FUSE_OVER_IO_URING) {
                let msg = "--io-uring: the kernel does not offer FUSE over io_uring (it needs Linux 6.14 or later \
                           built with CONFIG_FUSE_IO_URING, and `echo 1 > /sys/module/fuse/parameters/enable_uring`)";
                tracing::error!("{msg}");
                return Err(std::io::Error::new(std::io::ErrorKind::Unsupported, msg));
            }
            want |= InitFlags::FUSE_OVER_IO_URING;
            // Each queue entry holds a payload buffer of the largest request
            // (max(max_write, max_pages pages)); 1 MiB is the largest WRITE
            // the kernel sends by default (`max_pages_limit` 256), so a
            // larger max_write would only make the buffers larger.
            let _ = config.set_max_write(1 << 20);
        }
        let missing = want - have;
        if missing.contains(InitFlags::FUSE_POSIX_ACL) {
            tracing::warn!("the kernel lacks FUSE_POSIX_ACL: only the mode bits are checked by the kernel");
        }
        if missing.contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            tracing::warn!("the kernel lacks FUSE_DIRECT_IO_ALLOW_MMAP: mmap of files on the mount will fail");
        }
        self.fs
            .set_kernel_marks_kills(have.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2));
        let _ = config.add_capabilities(want & have);
        let _ = config.set_max_readahead(128 * 1024);
        // Background requests (readahead, async RELEASE, async direct I/O)
        // waiting in a lane (`fs/lanes.rs`) count against the kernel's
        // limit, past which it holds every new background request of the
        // mount: 64 rather than fuser's 16, so that one stopped filesystem
        // under the source takes longer to reach it (the kernel caps it
        // for a non-root mounter at `max_user_bgreq`).
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lane(&self, nodeid: INodeNo, lookup_name: Option<&OsStr>) -> Option<u64> {
        self.fs.lane(nodeid.0, lookup_name.map(OsStrExt::as_bytes))
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        handler!("lookup", req, parent.0, {
            let lease = self.fs.lease();
            match self.fs.lookup(parent.0, name.as_bytes()) {
                Ok(e) => self.entry(reply, parent.0, name, &e, lease),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        handler!("forget", req, ino.0, {
            self.fs.forget(ino.0, nlookup);
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        handler!("getattr", req, ino.0, {
            let lease = self.fs.lease();
            match self.fs.getattr(ino.0, fh.map(|f| f.0)) {
                Ok(a) => self.attr_reply(reply, ino.0, &a, lease),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        handler!("setattr", req, ino.0, {
            let lease = self.fs.lease();
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: time_or_now(atime),
                mtime: time_or_now(mtime),
                fh: fh.map(|f| f.0),
            };
            match self.fs.setattr(ino.0, set, caller(req)) {
                Ok(a) => self.attr_reply(reply, ino.0, &a, lease),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        handler!("readlink", req, ino.0, {
            match self.fs.readlink(ino.0) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        handler!("mknod", req, parent.0, {
            let lease = self.fs.lease();
            match self
                .fs
                .mknod(parent.0, name.as_bytes(), mode, rdev as u64, creator(req, umask))
            {
                Ok(e) => self.entry(reply, parent.0, name, &e, lease),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        handler!("mkdir", req, parent.0, {
            let lease = self.fs.lease();
            match self.fs.mkdir(parent.0, name.as_bytes(), mode, creator(req, umask)) {
                Ok(e) => self.entry(reply, parent.0, name, &e, lease),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        handler!("unlink", req, parent.0, {
            reply_empty(reply, self.fs.unlink(parent.0, name.as_bytes(), caller(req)))
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        handler!("rmdir", req, parent.0, {
            reply_empty(reply, self.fs.rmdir(parent.0, name.as_bytes(), caller(req)))
        });
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        handler!("symlink", req, parent.0, {
            let lease = self.fs.lease();
            match self.fs.symlink(
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                caller(req),
            ) {
                Ok(e) => self.entry(reply, parent.0, link_name, &e, lease),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        handler!("rename", req, parent.0, {
            match self.fs.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
                caller(req),
            ) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        handler!("link", req, ino.0, {
            let lease = self.fs.lease();
            match self.fs.link(ino.0, newparent.0, newname.as_bytes(), caller(req)) {
                Ok(e) => self.entry(reply, newparent.0, newname, &e, lease),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        handler!("open", req, ino.0, {
            match self.fs.open(ino.0, flags.0, caller(req)) {
                Ok(mut o) => {
                    if o.attrs_changed {
                        // The LOOKUP of this open may have lent the kernel
                        // attributes the open found outdated: they go
                        // before the answer (`fs/watched.rs`).
                        self.forget_kernel_attr(ino.0);
                    }
                    drop(o.attr_inval.take());
                    if o.changed && self.fs.config().kernel_cache {
                        self.forget_kernel_attr(ino.0);
                        // An invalidation of this file still queued (the
                        // watcher's for the change this open found, or a
                        // drop's) must reach the kernel before the answer:
                        // landing during the reader's first GETATTR, it
                        // would make the kernel discard the new size. Kept
                        // answer: no worker waits (`inval.rs`).
                        let q = self.fs.inval_queue();
                        if q.expedite_inode(ino.0) {
                            let flags = fopen(&o);
                            q.answer_when_inode_sent(
                                ino.0,
                                DROP_INVAL_WAIT,
                                Box::new(move |_| reply.opened(FileHandle(o.fh), flags)),
                            );
                            return;
                        }
                    }
                    reply.opened(FileHandle(o.fh), fopen(&o))
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        handler!("read", req, ino.0, {
            match self.fs.read(fh.0, offset, size) {
                // One writev with the reply header: of the pinned folio
                // ranges themselves for a small reply, of a per-thread copy
                // of them for a large one (`pinned.rs`); the folios stay
                // pinned until it returns.
                Ok(d) => d.with_io_slices(|s| reply.data_vectored(s)),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        handler!("write", req, ino.0, {
            let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
            match self.fs.write(fh.0, offset, data, caller(req), kill) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        handler!("flush", req, ino.0, { reply_empty(reply, self.fs.flush(fh.0)) });
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        handler!("release", req, ino.0, { reply_empty(reply, self.fs.release(fh.0)) });
    }

    fn fsync(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        handler!("fsync", req, ino.0, {
            reply_empty(reply, self.fs.fsync(fh.0, datasync))
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        handler!("opendir", req, ino.0, {
            match self.fs.opendir(ino.0, caller(req)) {
                Ok(fh) => {
                    // Kernel-cache mode over a kept listing (`listing.rs`):
                    // the kernel caches the listing it reads, and keeps it
                    // while rcufs serves the same listing.
                    let mut flags = FopenFlags::empty();
                    let (cache, keep) = self.fs.dir_cache_flags(fh);
                    if cache {
                        flags |= FopenFlags::FOPEN_CACHE_DIR;
                    }
                    if keep {
                        flags |= FopenFlags::FOPEN_KEEP_CACHE;
                    }
                    reply.opened(FileHandle(fh), flags)
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        handler!("readdir", req, ino.0, {
            let r = self.fs.readdir(fh.0, offset, false, |item| {
                reply.add(
                    INodeNo(item.ino),
                    item.next_offset,
                    kind(item.kind),
                    OsStr::from_bytes(&item.name),
                )
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        handler!("readdirplus", req, ino.0, {
            let lease = self.fs.lease();
            let entry_ttl = self.fs.entry_ttl(ino.0);
            // What the reply lends, should a change overtake it
            // (`fs/lease.rs`; nothing to record without the watch): only
            // entries are worth recording, as the attributes lent without
            // them (default mode) last a millisecond.
            let mut lent: Vec<(Vec<u8>, u64)> = Vec::new();
            let r = self.fs.readdir(fh.0, offset, true, |item| match &item.entry {
                Some(e) => {
                    if lease.may_break() && !entry_ttl.is_zero() && item.name != b"." && item.name != b".." {
                        lent.push((item.name.to_vec(), e.ino));
                    }
                    reply.add(
                        INodeNo(e.ino),
                        item.next_offset,
                        OsStr::from_bytes(&item.name),
                        &entry_ttl.min(self.fs.attr_ttl(e.ino)),
                        &attr(&e.attr),
                        Generation(0),
                    )
                }
                // A slow source's name not cached yet (`fs/prefetch.rs`).
                None => reply.add_name_only(
                    INodeNo(item.ino),
                    item.next_offset,
                    kind(item.kind),
                    OsStr::from_bytes(&item.name),
                ),
            });
            match r {
                Ok(()) => {
                    reply.ok();
                    if !lent.is_empty() {
                        let entries = self.fs.config().kernel_cache;
                        self.fs.after_lent_reply(lease, || {
                            lent.iter()
                                .flat_map(|(name, child)| lent_entry(entries, ino.0, OsStr::from_bytes(name), *child))
                                .collect()
                        });
                    }
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn releasedir(&self, req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        handler!("releasedir", req, ino.0, {
            reply_empty(reply, self.fs.releasedir(fh.0))
        });
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        handler!("fsyncdir", req, ino.0, {
            reply_empty(reply, self.fs.fsyncdir(fh.0, datasync))
        });
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        handler!("statfs", req, ino.0, {
            match self.fs.statfs(ino.0) {
                Ok(s) => reply.statfs(
                    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
                ),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        handler!("setxattr", req, ino.0, {
            if position != 0 {
                reply.error(Errno::from_i32(libc::EINVAL));
                return;
            }
            // The kernel holds this inode's lock until the reply.
            let held = HeldDir::new(&self.fs, ino.0);
            match self.fs.setxattr(ino.0, name.as_bytes(), value, flags, caller(req)) {
                Ok(inval) => self.answer_after_inval(inval, held, move || reply.ok()),
                Err(e) => {
                    reply.error(xattr_errno(e));
                    drop(held);
                }
            }
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        handler!("getxattr", req, ino.0, {
            match self.fs.getxattr(ino.0, name.as_bytes(), size, caller(req)) {
                Ok(XattrReply::Size(n)) => reply.size(n),
                Ok(XattrReply::Data(d)) => reply.data(&d),
                Err(e) => reply.error(xattr_errno(e)),
            }
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        handler!("listxattr", req, ino.0, {
            match self.fs.listxattr(ino.0, size, caller(req)) {
                Ok(XattrReply::Size(n)) => reply.size(n),
                Ok(XattrReply::Data(d)) => reply.data(&d),
                Err(e) => reply.error(xattr_errno(e)),
            }
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        handler!("removexattr", req, ino.0, {
            match self.fs.removexattr(ino.0, name.as_bytes(), caller(req)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(xattr_errno(e)),
            }
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        handler!("access", req, ino.0, {
            reply_empty(reply, self.fs.access(ino.0, mask.bits(), caller(req)))
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        handler!("create", req, parent.0, {
            let lease = self.fs.lease();
            match self
                .fs
                .create(parent.0, name.as_bytes(), mode, flags, creator(req, umask))
            {
                Ok((e, o)) => {
                    let lends = self.lends(e.lend, lease);
                    let ttl = if lends {
                        self.fs.entry_ttl(parent.0).min(self.fs.attr_ttl(e.ino))
                    } else {
                        Duration::ZERO
                    };
                    reply.created(&ttl, &attr(&e.attr), Generation(0), FileHandle(o.fh), fopen(&o));
                    if lends {
                        let entries = self.fs.config().kernel_cache;
                        self.fs
                            .after_lent_reply(lease, || lent_entry(entries, parent.0, name, e.ino));
                    }
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        handler!("ioctl", req, ino.0, {
            if flags.contains(IoctlFlags::FUSE_IOCTL_UNRESTRICTED) {
                reply.error(Errno::from_i32(libc::ENOTTY));
                return;
            }
            match self.fs.ioctl(ino.0, cmd, in_data, caller(req)) {
                Ok((out, inval)) => {
                    // The kernel holds no inode lock during an ioctl.
                    self.answer_after_inval(inval, None, move || {
                        let n = out.len().min(out_size as usize);
                        reply.ioctl(0, &out[..n]);
                    });
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        handler!("fallocate", req, ino.0, {
            reply_empty(reply, self.fs.fallocate(fh.0, offset, length, mode, caller(req)))
        });
    }

    fn lseek(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        handler!("lseek", req, ino.0, {
            match self.fs.lseek(fh.0, offset, whence) {
                Ok(o) => reply.offset(o),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        handler!("copy_file_range", req, ino_in.0, {
            match self.fs.copy_file_range(
                fh_in.0,
                offset_in,
                fh_out.0,
                offset_out,
                len,
                flags.bits() as u32,
                caller(req),
            ) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        });
    }
}

/// What `mount.rs` needs from fuser, kept here so that only this file names it.
pub mod session {
    use super::*;
    use std::path::{Path, PathBuf};

    use crate::sys;

    /// A running FUSE session.
    pub struct Running {
        session: fuser::BackgroundSession,
        /// Set when rcufs mounted the filesystem itself (and so unmounts it):
        /// the mount point and the mount's device number (if mountinfo
        /// showed it), which tells this mount from anything mounted there later.
        own_mount: Option<(PathBuf, Option<(u32, u32)>)>,
    }

    /// The mount options rcufs understands.
    pub const KNOWN_OPTIONS: &[&str] = &[
        "allow_other",
        "allow_root",
        "default_permissions",
        "ro",
        "rw",
        "dev",
        "nodev",
        "suid",
        "nosuid",
        "exec",
        "noexec",
        "atime",
        "noatime",
        "sync",
        "async",
        "dirsync",
    ];

    /// How requests are served: `threads` `/dev/fuse` workers, one of which
    /// polls for `poll` after each request (fuser's `Config::spin`, an
    /// addition of the vendored fuser), and with `io_uring` the per-CPU
    /// queues (another addition).
    #[derive(Clone, Copy, Debug)]
    pub struct Serving {
        pub threads: usize,
        pub poll: std::time::Duration,
        pub io_uring: crate::mount::IoUring,
    }

    /// Mounts `adapter` at `mountpoint`, served as `serving` says, with the
    /// given `-o` options (already validated), and sets the notifier for
    /// the invalidation worker.
    ///
    /// As root, rcufs calls mount(2) itself with the filesystem type
    /// `fuse.rcufs` (fuser's own mount always says `fuse`) and `source` as
    /// the mount source, then hands the `/dev/fuse` descriptor to fuser.
    /// (The source shows in mountinfo, `findmnt` and `df`, and mount(8)'s
    /// `mount -a` compares it with fstab's to skip a mounted line.)
    /// Otherwise fuser mounts through fusermount3, the type shows as `fuse`
    /// and the source as `rcufs`.
    pub fn start(
        adapter: FuseAdapter,
        source: &Path,
        mountpoint: &Path,
        serving: Serving,
        options: &[String],
        notifier: &OnceLock<Notifier>,
    ) -> std::io::Result<Running> {
        use fuser::{Config, MountOption, SessionACL};
        let Serving {
            threads,
            poll,
            io_uring,
        } = serving;
        let mut cfg = Config::default();
        cfg.uring_idle = io_uring == crate::mount::IoUring::Idle;
        cfg.n_threads = Some(threads.max(1));
        cfg.clone_fd = true;
        // Each worker has a descriptor of its own (`clone_fd`), which the
        // polling needs: it switches its descriptor's `O_NONBLOCK`.
        cfg.spin = (!poll.is_zero()).then_some(poll);
        // A filesystem under the source that can stop answering holds at
        // most half the workers (`fs/lanes.rs`; fuser leaves one worker
        // out, and past the others runs lanes on threads of their own, so
        // that one stopped filesystem keeps the others from none; with one
        // worker, every lane's requests run on those). Over io_uring the
        // requests do not go through the workers.
        if io_uring == crate::mount::IoUring::Off {
            cfg.lane_width = (threads / 2).max(1);
        }
        let mut opts = vec![
            MountOption::FSName("rcufs".into()),
            MountOption::Subtype("rcufs".into()),
            MountOption::DefaultPermissions,
        ];
        let mut flags: libc::c_ulong = 0;
        for o in options {
            let (opt, flag) = match o.as_str() {
                "allow_other" => {
                    cfg.acl = SessionACL::All;
                    continue;
                }
                "allow_root" => {
                    cfg.acl = SessionACL::RootAndOwner;
                    continue;
                }
                "default_permissions" | "rw" | "exec" | "atime" | "async" => continue,
                "ro" => (MountOption::RO, libc::MS_RDONLY),
                "dev" => (MountOption::Dev, 0),
                "nodev" => (MountOption::NoDev, 0),
                "suid" => (MountOption::Suid, 0),
                "nosuid" => (MountOption::NoSuid, 0),
                "noexec" => (MountOption::NoExec, libc::MS_NOEXEC),
                "noatime" => (MountOption::NoAtime, libc::MS_NOATIME),
                "sync" => (MountOption::Sync, libc::MS_SYNCHRONOUS),
                "dirsync" => (MountOption::DirSync, libc::MS_DIRSYNC),
                other => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("unknown mount option `{other}`"),
                    ));
                }
            };
            opts.push(opt);
            flags |= flag;
        }
        // `nosuid` and `nodev` unless `suid` or `dev` is given: the rule
        // lookups under the source are held to (`fs/submounts.rs`).
        let enforced = crate::fs::submounts::enforced_by(options);
        if enforced & libc::ST_NOSUID != 0 {
            flags |= libc::MS_NOSUID;
        }
        if enforced & libc::ST_NODEV != 0 {
            flags |= libc::MS_NODEV;
        }
        cfg.mount_options = opts;
        if !sys::is_root() {
            let session = fuser::Session::new(adapter, mountpoint, &cfg)?;
            let _ = notifier.set(session.notifier());
            return Ok(Running {
                session: session.spawn()?,
                own_mount: None,
            });
        }
        let dev = sys::open_path(c"/dev/fuse", libc::O_RDWR)?;
        let mut data = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,default_permissions",
            sys::raw(std::os::fd::AsFd::as_fd(&dev))
        );
        if cfg.acl != SessionACL::Owner {
            data.push_str(",allow_other");
        }
        let target = sys::cstr(mountpoint.as_os_str().as_bytes())?;
        let data = std::ffi::CString::new(data).expect("no NUL in mount data");
        let source = sys::cstr(source.as_os_str().as_bytes())?;
        sys::mount(&source, &target, c"fuse.rcufs", flags, &data)?;
        let canon = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
        // Read from mountinfo, not by stat: the mount cannot answer yet.
        let mount_id = mount_dev(&canon);
        let acl = cfg.acl;
        let session = match fuser::Session::from_fd(adapter, dev, acl, cfg) {
            Ok(s) => s,
            Err(e) => {
                let _ = sys::umount(&target, libc::MNT_DETACH);
                return Err(e);
            }
        };
        let _ = notifier.set(session.notifier());
        Ok(Running {
            session: session.spawn()?,
            own_mount: Some((canon, mount_id)),
        })
    }

    /// Unmounts and waits for the session's threads.
    pub fn stop(r: Running) -> std::io::Result<()> {
        if let Some((mp, _)) = &r.own_mount {
            let target = sys::cstr(mp.as_os_str().as_bytes())?;
            match sys::umount(&target, 0) {
                Ok(()) => {}
                // Already unmounted from outside.
                Err(e) if e.errno() == libc::EINVAL || e.errno() == libc::ENOENT => {}
                // Busy: detach now, the kernel finishes when the last user leaves.
                Err(e) if e.errno() == libc::EBUSY => sys::umount(&target, libc::MNT_DETACH)?,
                Err(e) => return Err(std::io::Error::from_raw_os_error(e.errno())),
            }
            r.session.join()
        } else {
            r.session.umount_and_join()
        }
    }

    /// Waits until the filesystem is unmounted from outside. If the session
    /// ends any other way (an error reading `/dev/fuse`, a worker thread
    /// that died, the connection aborted through fusectl) while rcufs's own
    /// mount is still there, that mount is detached before returning, so the
    /// daemon never leaves a dead mount behind ("Transport endpoint is not
    /// connected").
    pub fn wait(r: Running) -> std::io::Result<()> {
        let result = r.session.join();
        if let Some((mp, Some(dev))) = &r.own_mount
            && mount_dev(mp) == Some(*dev)
        {
            match &result {
                Err(e) => {
                    tracing::error!(error = %e, mountpoint = %mp.display(), "the FUSE session failed; detaching the mount")
                }
                Ok(()) => {
                    tracing::warn!(mountpoint = %mp.display(), "the FUSE session ended with the mount still in place; detaching it")
                }
            }
            let target = sys::cstr(mp.as_os_str().as_bytes())?;
            if let Err(e) = sys::umount(&target, libc::MNT_DETACH) {
                tracing::error!(error = %e, "detaching the mount failed");
            }
        }
        result
    }

    /// The device number of the topmost mount at `mp` (from mountinfo,
    /// which never asks the mounted filesystem).
    fn mount_dev(mp: &Path) -> Option<(u32, u32)> {
        crate::mountinfo::mounts()
            .ok()?
            .into_iter()
            .rev()
            .find(|m| m.mount_point == mp)
            .map(|m| m.dev)
    }
}

/// What a reply of entry `name` under `parent` (node `ino`, 0 if negative)
/// lent the kernel, as invalidations (`fs/lease.rs`): the name only in
/// kernel-cache mode (`entries`), as the default mode lends none
/// ([`Fs::entry_ttl`] is 0 there). An entry invalidation waits in the
/// kernel for the parent's inode lock: one queued for nothing in the
/// default mode, when a drop's answer waited for everything queued before
/// its own, held every drop by `user.rcufs.drop` of that parent (whose
/// lock the kernel holds for the SETXATTR) for the drops' bound.
fn lent_entry(entries: bool, parent: u64, name: &OsStr, ino: u64) -> Vec<Inval> {
    let mut v = Vec::with_capacity(2);
    if entries {
        v.push(Inval::Entry {
            parent,
            name: name.as_bytes().to_vec(),
        });
    }
    if ino != 0 {
        v.push(Inval::Inode { ino, offset: -1 });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default mode lends no entries (`Fs::entry_ttl` is 0 there), so
    /// a reply that overlapped a change invalidates none: an entry
    /// invalidation waits in the kernel for its directory's lock, which a
    /// drop by `user.rcufs.drop` of that directory holds.
    #[test]
    fn only_kernel_cache_mode_invalidates_lent_entries() {
        let name = OsStr::new("a");
        assert_eq!(lent_entry(false, 1, name, 5), [Inval::Inode { ino: 5, offset: -1 }]);
        assert!(lent_entry(false, 1, name, 0).is_empty());
        let entry = Inval::Entry {
            parent: 1,
            name: b"a".to_vec(),
        };
        assert_eq!(lent_entry(true, 1, name, 0), std::slice::from_ref(&entry));
        assert_eq!(
            lent_entry(true, 1, name, 5),
            [entry, Inval::Inode { ino: 5, offset: -1 }]
        );
    }
}
