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
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use crate::sys::{self, Stopper};

/// An open mount table whose changes can be waited for, with a descriptor
/// that ends the wait (see [`stopper`](MountTableWatch::stopper)).
#[derive(Debug)]
pub struct MountTableWatch {
    file: File,
    /// An eventfd, readable once a [`Stopper`] of this watch fired.
    stop: OwnedFd,
}

/// What a [`MountTableWatch::wait`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The table changed since the last wait (or since the open).
    Changed,
    /// Nothing, within the time given (or the wait was interrupted by a
    /// signal).
    Quiet,
    /// A stopper fired: the watcher should end.
    Stopped,
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
            stop: sys::eventfd()?,
        })
    }

    /// A handle that ends this watch's waits, the current one and every
    /// later one, from any thread.
    pub fn stopper(&self) -> std::io::Result<Stopper> {
        Stopper::of(&self.stop)
    }

    /// Waits up to `timeout` (for ever if `None`) for the table to change
    /// or a stopper to fire. A stop wins over a change seen in the same
    /// wait.
    pub fn wait(&self, timeout: Option<Duration>) -> std::io::Result<Seen> {
        self.poll(true, timeout)
    }

    /// Waits up to `timeout` for a stopper only (a pause between two
    /// readings of the table that a stop still ends at once); whether one
    /// fired.
    pub fn stopped_within(&self, timeout: Duration) -> std::io::Result<bool> {
        Ok(self.poll(false, Some(timeout))? == Seen::Stopped)
    }

    fn poll(&self, table: bool, timeout: Option<Duration>) -> std::io::Result<Seen> {
        let mut pfds = [
            libc::pollfd {
                fd: self.stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLPRI,
                revents: 0,
            },
        ];
        let n = if table { 2 } else { 1 };
        let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
        // SAFETY: `pfds` holds `n` (at most 2) valid pollfds for the
        // duration of the call.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(Seen::Quiet)
            } else {
                Err(e)
            };
        }
        if pfds[0].revents != 0 {
            return Ok(Seen::Stopped);
        }
        let got = if table { pfds[1].revents } else { 0 };
        if got & (libc::POLLHUP | libc::POLLNVAL) != 0 {
            // Never seen from `/proc`; reported rather than waited on in a
            // loop that would spin.
            return Err(std::io::Error::other(format!(
                "poll of the mount table reported {got:#x}"
            )));
        }
        Ok(if got & (libc::POLLPRI | libc::POLLERR) != 0 {
            Seen::Changed
        } else {
            Seen::Quiet
        })
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
            assert_eq!(
                w.wait(Some(Duration::from_millis(50))).unwrap(),
                Seen::Quiet,
                "a quiet table was reported changed"
            );
            let dir = tempfile::tempdir().unwrap();
            let at = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: NUL-terminated strings; no data.
            let rc = unsafe { libc::mount(c"none".as_ptr(), at.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) };
            assert_eq!(rc, 0, "mounting a tmpfs: {}", std::io::Error::last_os_error());
            assert_eq!(
                w.wait(Some(Duration::from_secs(5))).unwrap(),
                Seen::Changed,
                "a mount was not reported"
            );
            // Whatever else was reported, quiet again before the unmount,
            // so that its report is its own.
            let quiet = (0..100).any(|_| w.wait(Some(Duration::from_millis(50))).unwrap() == Seen::Quiet);
            assert!(quiet, "the table never went quiet after a mount");
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::umount2(at.as_ptr(), 0) }, 0);
            assert_eq!(
                w.wait(Some(Duration::from_secs(5))).unwrap(),
                Seen::Changed,
                "an unmount was not reported"
            );
        });
    }

    /// A stopper ends a wait that has no time limit, from another thread,
    /// and every wait after it; a pause ends at once too.
    #[test]
    fn a_stopper_ends_the_waits() {
        let w = MountTableWatch::open().unwrap();
        let stopper = w.stopper().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let seen = loop {
                // A change of the process's table (other tests mount) is
                // not what this waits for.
                match w.wait(None) {
                    Ok(Seen::Changed | Seen::Quiet) => continue,
                    other => break other.map_err(|e| e.to_string()),
                }
            };
            let _ = tx.send(seen);
            // Were the stop not kept, the first of these would wait for
            // ever and the second a minute; the test fails after 30 s.
            let later = w.wait(None).map_err(|e| e.to_string());
            let _ = tx.send(later);
            let pause = w.stopped_within(Duration::from_secs(60)).map_err(|e| e.to_string());
            let _ = tx.send(pause.map(|stopped| if stopped { Seen::Stopped } else { Seen::Quiet }));
        });
        std::thread::sleep(Duration::from_millis(50));
        stopper.stop();
        for what in ["a wait without a time limit", "a later wait", "a pause"] {
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(30)),
                Ok(Ok(Seen::Stopped)),
                "{what} did not end with the stop"
            );
        }
    }
}
