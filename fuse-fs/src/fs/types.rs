//! What the requests take and answer: the caller, attributes, entries,
//! open and directory answers, SETATTR's changes. Plain data, free of FUSE
//! types as the rest of [`crate::fs`] is (`fuse.rs` turns them into
//! fuser's).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::inval::Inval;
use crate::protocol::DropArgs;

/// Who sent a request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caller {
    /// uid (the caller's fsuid).
    pub uid: u32,
    /// gid (the caller's fsgid).
    pub gid: u32,
    /// pid (the calling thread's id; 0 when the kernel sends on its own).
    pub pid: u32,
    /// The caller's umask, for the creating operations (0 elsewhere).
    pub umask: u32,
}

/// The type of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// FIFO.
    Fifo,
    /// Socket.
    Socket,
    /// Character device.
    Char,
    /// Block device.
    Block,
}

impl Kind {
    fn from_mode(mode: u32) -> Self {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => Self::Dir,
            libc::S_IFLNK => Self::Symlink,
            libc::S_IFIFO => Self::Fifo,
            libc::S_IFSOCK => Self::Socket,
            libc::S_IFCHR => Self::Char,
            libc::S_IFBLK => Self::Block,
            _ => Self::File,
        }
    }

    pub(super) fn from_dtype(d: u8) -> Self {
        match d {
            libc::DT_DIR => Self::Dir,
            libc::DT_LNK => Self::Symlink,
            libc::DT_FIFO => Self::Fifo,
            libc::DT_SOCK => Self::Socket,
            libc::DT_CHR => Self::Char,
            libc::DT_BLK => Self::Block,
            _ => Self::File,
        }
    }
}

/// Attributes as the kernel sees them (`ino` is the node id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Node id.
    pub ino: u64,
    /// Size.
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    /// Access time.
    pub atime: SystemTime,
    /// Modification time.
    pub mtime: SystemTime,
    /// Change time.
    pub ctime: SystemTime,
    /// Type.
    pub kind: Kind,
    /// Permission bits (including setuid, setgid, sticky).
    pub perm: u16,
    /// Links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number.
    pub rdev: u32,
    /// Preferred I/O size.
    pub blksize: u32,
}

/// A `stat` time as `SystemTime`; an unrepresentable one becomes the epoch
/// (a request never panics on a strange timestamp).
pub(super) fn time(sec: i64, nsec: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsec.clamp(0, 999_999_999) as u64);
    let t = if sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(sec as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(sec.unsigned_abs()))
    };
    t.and_then(|t| t.checked_add(nanos)).unwrap_or(UNIX_EPOCH)
}

impl Attr {
    /// The attributes of `st` for node id `ino`.
    pub fn from_stat(ino: u64, st: &libc::stat) -> Self {
        Self {
            ino,
            size: st.st_size.max(0) as u64,
            blocks: st.st_blocks.max(0) as u64,
            atime: time(st.st_atime, st.st_atime_nsec),
            mtime: time(st.st_mtime, st.st_mtime_nsec),
            ctime: time(st.st_ctime, st.st_ctime_nsec),
            kind: Kind::from_mode(st.st_mode),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize as u32,
        }
    }
}

/// A LOOKUP answer. `ino == 0` is a negative entry the kernel may cache
/// (only in kernel-cache mode; otherwise a missing name is `ENOENT`).
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Node id (0: negative).
    pub ino: u64,
    /// Attributes.
    pub attr: Attr,
    /// Whether the kernel may keep the answer for its timeouts: false when
    /// the read of the source behind it overlapped a change of the source
    /// (an applied event, an event for an object not known yet, a change
    /// through the mount), which rcufs then did not cache either. Such an
    /// answer is given timeouts of 0 (`fuse.rs`): a change applied while
    /// it was in flight cannot have invalidated what the kernel makes of it.
    pub lend: bool,
}

/// An OPEN/CREATE answer.
#[derive(Debug)]
pub struct Opened {
    /// The file handle.
    pub fh: u64,
    /// Bypass the kernel's page cache (every read reaches rcufs).
    pub direct_io: bool,
    /// Keep the kernel's page cache from the previous open.
    pub keep_cache: bool,
    /// The kernel need not send a FLUSH at each close (`fs/flush.rs`).
    pub no_flush: bool,
    /// No stamp vouched for what the caches hold of the file (it changed in
    /// the source since the cache last saw it, or a drop cleared the stamp):
    /// its cached pages were dropped, and the kernel's attributes may be
    /// stale too.
    pub changed: bool,
    /// Default mode with attributes lent to the kernel (`fs/watched.rs`):
    /// the kernel may hold attributes older than the source's (this open
    /// found them changed since rcufs last had them, any change moves the
    /// ctime, or another open that did has not told the kernel yet), so it
    /// must forget them before the open is answered.
    pub attrs_changed: bool,
    /// Held while this open's invalidation is pending: drop it once the
    /// kernel was told (`inode.rs`, [`crate::inode::PendingAttrInval`]).
    pub attr_inval: Option<crate::inode::PendingAttrInval>,
}

/// One directory entry for READDIR/READDIRPLUS.
#[derive(Clone, Debug)]
pub struct DirItem {
    /// The inode number to show (node id when known, else the source's).
    pub ino: u64,
    /// The offset to resume after this entry.
    pub next_offset: u64,
    /// The type.
    pub kind: Kind,
    /// The name.
    pub name: Vec<u8>,
    /// READDIRPLUS only: the entry (one kernel reference taken unless the
    /// name is `.` or `..`); `None` for a name answered without attributes
    /// (a slow source's name not cached yet: `fs/prefetch.rs`).
    pub entry: Option<Entry>,
}

/// A GETXATTR/LISTXATTR answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XattrReply {
    /// The size the value would have (the caller asked with size 0).
    Size(u32),
    /// The value.
    Data(Vec<u8>),
}

/// A STATFS answer.
#[derive(Clone, Copy, Debug)]
pub struct Statfs {
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
    /// Fragment size.
    pub frsize: u32,
}

/// The result of a directory drop.
#[derive(Clone, Debug, Default)]
pub struct DropOutcome {
    /// The counts, as the ioctl reports them.
    pub args: DropArgs,
    /// Kernel invalidations to send after the reply, bottom-up.
    pub inval: Vec<Inval>,
}

/// SETATTR's changes.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// New atime (`None` inside: now).
    pub atime: Option<Option<SystemTime>>,
    /// New mtime (`None` inside: now).
    pub mtime: Option<Option<SystemTime>>,
    /// The open file the change came through, if any.
    pub fh: Option<u64>,
}
