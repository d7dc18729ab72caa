//! Checks and conversions of request arguments: names, times, and the
//! flags the source is opened with.

use std::os::fd::OwnedFd;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{FsError, FsResult};

pub(super) fn name_ok(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name.len() > 255 {
        return Err(FsError::new(if name.is_empty() {
            libc::ENOENT
        } else {
            libc::ENAMETOOLONG
        }));
    }
    if name.contains(&b'/') || name == b"." || name == b".." {
        return Err(FsError::INVAL);
    }
    Ok(())
}

pub(super) fn timespec(t: Option<Option<SystemTime>>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(None) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(Some(t)) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
            Err(e) => {
                let d = e.duration();
                let mut sec = -(d.as_secs() as i64);
                let mut nsec = -(d.subsec_nanos() as i64);
                if nsec < 0 {
                    sec -= 1;
                    nsec += 1_000_000_000;
                }
                libc::timespec {
                    tv_sec: sec as libc::time_t,
                    tv_nsec: nsec as libc::c_long,
                }
            }
        },
    }
}

/// The flags to open an existing inode of type `kind` (`S_IF*`) in the
/// source with, from the caller's open flags: no creation, no controlling
/// terminal, no `O_DIRECT` (reads are served from rcufs's page cache and
/// writes are plain `pwrite`s from its buffers, which need not be aligned),
/// and `O_NONBLOCK` for anything but a regular file or a directory, so that
/// opening a FIFO or a device can never block a worker.
pub(super) fn source_open_flags(kind: u32, flags: i32) -> i32 {
    let mut flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_DIRECT);
    if kind != libc::S_IFREG && kind != libc::S_IFDIR {
        flags |= libc::O_NONBLOCK;
    }
    flags
}

/// The flags CREATE opens the source with: always exclusive (an existing
/// name is handled apart, see [`Fs::create`]), never following a symlink,
/// without `O_DIRECT` (see [`source_open_flags`]).
pub(super) fn create_flags(flags: i32) -> i32 {
    (flags | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW) & !(libc::O_NOCTTY | libc::O_DIRECT)
}

/// Whether a write by a writer without `CAP_FSETID` may clear bits of a
/// file with mode `mode`: any setuid or setgid bit. Setuid always goes;
/// setgid goes with group execute, and since Linux 6.2 also without it
/// when the writer is not in the file's group (the kernel's
/// `setattr_should_drop_sgid`), which only the source can tell for the
/// writer's groups: the write then runs as the writer.
pub(super) fn may_lose_suidgid(mode: u32) -> bool {
    mode & (libc::S_ISUID | libc::S_ISGID) != 0
}

/// Opens with `open(flags)`, widening a write-only open to read-write first
/// so that the page cache can be filled through any handle (mmap faults of a
/// shared mapping); falls back to write-only if read-write is refused.
pub(super) fn widened(flags: i32, open: impl Fn(i32) -> FsResult<OwnedFd>) -> FsResult<OwnedFd> {
    if flags & libc::O_ACCMODE == libc::O_WRONLY {
        let rw = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
        if let Ok(fd) = open(rw) {
            return Ok(fd);
        }
    }
    open(flags)
}
