//! Changes of this process's mount table, as the kernel signals them.
//!
//! `poll` on an open `/proc/self/mountinfo` reports `POLLPRI` (with
//! `POLLERR`) once after each change of the mount namespace's table (a
//! mount, an unmount, a move, a change of propagation), until the next
//! change; the file need not be read again (`mounts_poll` in the kernel's
//! `fs/proc_namespace.c` compares the namespace's event count with the one
//! it last reported, and records it). Asking this asks no filesystem
//! anything, so it cannot wait on one that stopped answering.
//!
//! The lanes (`fs/lanes.rs`) learn from it the filesystems mounted under
//! the source after the start before anything enters them, and forget
//! the mount points moved away or mounted over.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// An open mount table whose changes can be waited for.
#[derive(Debug)]
pub struct MountTableWatch {
    file: File,
}

impl MountTableWatch {
    /// Opens this process's mount table (`/proc/self/mountinfo`, the one
    /// `mountinfo::mounts` reads); the changes from now on are reported.
    pub fn open() -> std::io::Result<Self> {
        Self::open_at(std::path::Path::new("/proc/self/mountinfo"))
    }

    /// Opens the mount table at `path` (a `mountinfo` file of `/proc`).
    pub fn open_at(path: &std::path::Path) -> std::io::Result<Self> {
        Ok(Self {
            file: File::open(path)?,
        })
    }

    /// Waits up to `timeout` for the table to change; whether it changed
    /// since the last call (or since [`open`](Self::open)).
    pub fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `pfd` is one valid pollfd for the duration of the call,
        // and the count passed is 1.
        let n = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(n > 0 && pfd.revents & (libc::POLLPRI | libc::POLLERR) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::in_own_namespace;

    /// A quiet table is not reported changed, and a change (a tmpfs
    /// mounted, then unmounted, in a mount namespace of the test's own) is.
    /// (Not that a change is reported once: with other tests of this binary
    /// running, a mount was reported twice, and nothing here depends on the
    /// count.)
    #[test]
    fn reports_changes() {
        in_own_namespace(|| {
            // The thread's own table: its namespace is not the process's.
            let w = MountTableWatch::open_at(std::path::Path::new("/proc/thread-self/mountinfo")).unwrap();
            assert!(
                !w.wait(Duration::from_millis(50)).unwrap(),
                "a quiet table was reported changed"
            );
            let dir = tempfile::tempdir().unwrap();
            let at = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: NUL-terminated strings; no data.
            let rc = unsafe { libc::mount(c"none".as_ptr(), at.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) };
            assert_eq!(rc, 0, "mounting a tmpfs: {}", std::io::Error::last_os_error());
            assert!(w.wait(Duration::from_secs(5)).unwrap(), "a mount was not reported");
            // Whatever else was reported, quiet again before the unmount,
            // so that its report is its own.
            let quiet = (0..100).any(|_| !w.wait(Duration::from_millis(50)).unwrap());
            assert!(quiet, "the table never went quiet after a mount");
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::umount2(at.as_ptr(), 0) }, 0);
            assert!(w.wait(Duration::from_secs(5)).unwrap(), "an unmount was not reported");
        });
    }
}
