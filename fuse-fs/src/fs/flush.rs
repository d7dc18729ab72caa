//! FLUSH, and which opens need one.
//!
//! # Why
//! The kernel sends a FLUSH at every `close(2)` of a file on the mount
//! (every descriptor: dups and forks included), and the close waits for
//! the answer: one more round trip through `/dev/fuse` for each file a
//! build or a `grep` opens. Before sending it the kernel writes back the
//! mount's dirty pages of the file (written through a shared mapping);
//! rcufs then answers with `close(dup(fd))` on the source descriptor
//! ([`crate::sys::flush`]), which gives the source what its own close
//! would: on NFS, CIFS, overlayfs or a FUSE source such as sshfs, the
//! write-back and the errors of data written through it (close-to-open).
//!
//! For an open for reading only, none of that carries anything of its
//! own: such a descriptor has written nothing, through `write` or a
//! mapping (a shared writable mapping needs a descriptor open for writing,
//! whose own close still flushes), and the daemon holds no POSIX locks on
//! source files for a close to drop (rcufs implements no lock requests:
//! the kernel keeps the mount's locks itself). So read-only opens are
//! answered with `FOPEN_NOFLUSH` (FUSE 7.35): the kernel sends no FLUSH
//! for their file handle, and their close costs no round trip. mergerfs
//! makes the same choice by default (`flush-on-close=opened-for-write`).
//! What a read-only close no longer does is write back pages dirtied
//! through a mapping made from *another* descriptor that was closed
//! before the writes (map, close, write): those reach the source at the
//! next `msync`, `fsync`, `munmap`, open of the file answered without
//! `FOPEN_KEEP_CACHE`, or background write-back, as POSIX allows.
//!
//! Opens for writing keep their FLUSH on every filesystem, local ones
//! included: there the kernel's write-back of mapped pages at close is
//! what puts data written through a mapping into the source when the
//! writer closes the file.
//!
//! # Invariants
//! - A file handle opened for writing gets a FLUSH at every close, as
//!   before.
//! - Every FLUSH that reaches rcufs is counted (`source.flushes`).

use super::*;

/// Whether a close of a handle opened with `flags` must reach rcufs (see
/// the module docs).
pub(super) fn needs_flush(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

impl Fs {
    /// FLUSH: the source's close of this handle's descriptor, without
    /// closing it (the descriptor may be shared with other handles).
    pub fn flush(&self, fh: u64) -> FsResult<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let file = self.files.get(fh)?;
        sys::flush(file.fd.as_fd())
    }

    /// FLUSHes answered.
    pub(super) fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_opens_for_writing_need_a_flush() {
        assert!(!needs_flush(libc::O_RDONLY));
        assert!(!needs_flush(libc::O_RDONLY | libc::O_NOATIME | libc::O_NONBLOCK));
        assert!(needs_flush(libc::O_WRONLY));
        assert!(needs_flush(libc::O_RDWR));
        assert!(needs_flush(libc::O_WRONLY | libc::O_APPEND));
    }
}
