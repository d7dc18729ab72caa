//! Mounts attached or detached at or under the source.
//!
//! No filesystem mark reports a mount: a filesystem unmounted from under
//! the source and another mounted in its place changes every object below
//! that point without one event of the filesystem watch, so what rcufs and
//! the kernel keep from the old one would be trusted for the watch's hour
//! (and the new one, with the device number the old one gave back, which
//! an anonymous device gets at once, would pass for marked). Since Linux
//! 6.15 a fanotify group reporting mounts (`FAN_REPORT_MNT`) can mark a
//! mount namespace (`FAN_MARK_MNTNS`) for `FAN_MNT_ATTACH` and
//! `FAN_MNT_DETACH`, each event naming the mount by its unique 64-bit id,
//! the id `statx` reports as `STATX_MNT_ID_UNIQUE`.
//!
//! The group reports every mount of the namespace. Each event's mount is
//! looked up by its id (`statmount`, Linux 6.8): a mount attached (or moved)
//! at or under the source is a change, and its id is kept; a mount detached
//! (or moved away) whose id was kept is a change. The ids of the mounts
//! under the source when the watch starts come from their mount points
//! (`statx`). A mount already gone when its attach is read (attached and
//! detached between two reads) cannot be placed: it counts as a change, as
//! a lost event (`FAN_Q_OVERFLOW`) does; so do mounts that come and go
//! quickly anywhere in the namespace (a container's start), each costing
//! the mount its caches. Nothing here walks a path after the start (a
//! stuck network filesystem under the source cannot hang the watcher),
//! and nothing here fails the watch: a mount watch that cannot read its
//! events or look a mount up reports a change, and one that cannot read
//! them at all turns itself off, logged.

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use parking_lot::Mutex;

use crate::{mountinfo, sys};

/// `FAN_REPORT_MNT` (Linux 6.15, `include/uapi/linux/fanotify.h`).
const FAN_REPORT_MNT: libc::c_uint = 0x0000_4000;
/// `FAN_MARK_MNTNS`.
const FAN_MARK_MNTNS: libc::c_uint = 0x0000_0110;
/// `FAN_MNT_ATTACH`, `FAN_MNT_DETACH`.
const FAN_MNT_ATTACH: u64 = 0x0100_0000;
const FAN_MNT_DETACH: u64 = 0x0200_0000;
/// `FAN_EVENT_INFO_TYPE_MNT`: a `struct fanotify_event_info_mnt`, the
/// header then (aligned) the mount's unique id.
const INFO_MNT: u8 = 7;
/// `struct fanotify_event_metadata`'s size.
const METADATA_LEN: usize = 24;

/// A fanotify group watching the mounts of the daemon's namespace.
#[derive(Debug)]
pub(super) struct MountWatch {
    fan: OwnedFd,
    source: PathBuf,
    /// The unique ids of the mounts at or under the source, as far as the
    /// events read so far tell (only the watcher's thread uses it).
    under: Mutex<HashSet<u64>>,
    /// Reading the group failed: the watch of mounts is off.
    off: AtomicBool,
}

impl MountWatch {
    /// Marks the namespace; an error on kernels before 6.15.
    pub(super) fn new(source: &Path) -> Result<Self> {
        let fan = sys::fanotify_init(libc::FAN_CLASS_NOTIF | libc::FAN_NONBLOCK | FAN_REPORT_MNT)
            .context("fanotify_init(FAN_REPORT_MNT) (mount events need Linux 6.15)")?;
        let ns = sys::cstr(b"/proc/self/ns/mnt")?;
        sys::fanotify_mark(
            fan.as_fd(),
            libc::FAN_MARK_ADD | FAN_MARK_MNTNS,
            FAN_MNT_ATTACH | FAN_MNT_DETACH,
            &ns,
        )
        .context("fanotify_mark(FAN_MARK_MNTNS) on the mount namespace")?;
        // After the mark: a mount made meanwhile is in the table read here,
        // or its event is in the group, or both.
        let text = std::fs::read("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
        let mut under = HashSet::new();
        for m in mountinfo::parse_mountinfo(&String::from_utf8_lossy(&text)) {
            if !m.mount_point.starts_with(source) {
                continue;
            }
            match sys::mount_id_unique(&m.mount_point) {
                Ok(id) => {
                    under.insert(id);
                }
                // Unmounted since the table was read: nothing is cached yet
                // that its going could outdate.
                Err(e) if e.errno() == libc::ENOENT => {}
                Err(e) => return Err(e).context("the unique id of a mount (Linux 6.8)"),
            }
        }
        Ok(Self {
            fan,
            source: source.to_path_buf(),
            under: Mutex::new(under),
            off: AtomicBool::new(false),
        })
    }

    /// The group's descriptor, readable when events are queued.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fan.as_fd()
    }

    /// Reads the group until it is empty; whether what it read concerns
    /// the source (see the module docs).
    pub(super) fn changed(&self, buf: &mut [u8]) -> bool {
        if self.off.load(Ordering::Relaxed) {
            return false;
        }
        let mut events = Vec::new();
        let mut changed = false;
        loop {
            let n = match sys::read(self.fan.as_fd(), buf) {
                Ok(n) => n,
                Err(e) if e.errno() == libc::EINTR => continue,
                Err(e) if e.errno() == libc::EAGAIN => break,
                Err(e) => {
                    tracing::error!(
                        "reading mount events: {e}: mounts under the source are not watched any more (a \
                         filesystem mounted there in place of another is seen only after a drop)"
                    );
                    self.off.store(true, Ordering::Relaxed);
                    return true;
                }
            };
            changed |= parse(&buf[..n], &mut events);
        }
        let mut under = self.under.lock();
        for (mask, id) in events {
            let was = if mask & FAN_MNT_DETACH != 0 {
                under.remove(&id)
            } else {
                under.contains(&id)
            };
            changed |= was;
            if mask & FAN_MNT_ATTACH == 0 {
                continue;
            }
            match sys::statmount_point(id) {
                Ok(Some(point)) => {
                    if Path::new(std::ffi::OsStr::from_bytes(&point)).starts_with(&self.source) {
                        under.insert(id);
                        changed = true;
                    } else {
                        under.remove(&id);
                    }
                }
                // Gone already: where it was, nothing says.
                Ok(None) => changed = true,
                Err(e) => {
                    tracing::debug!(id, "statmount of an attached mount: {e}");
                    changed = true;
                }
            }
        }
        changed
    }
}

/// Adds the events in `buf` to `events` as (mask, mount id); returns
/// whether the kernel lost events.
fn parse(buf: &[u8], events: &mut Vec<(u64, u64)>) -> bool {
    let u16_at = |b: &[u8], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap_or_default());
    let u64_at = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let mut lost = false;
    let mut at = 0;
    while at + METADATA_LEN <= buf.len() {
        let len = u32_at(buf, at) as usize;
        if len < METADATA_LEN || at + len > buf.len() {
            break;
        }
        let ev = &buf[at..at + len];
        at += len;
        let mask = u64_at(ev, 8);
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            lost = true;
            continue;
        }
        let mut rat = (u16_at(ev, 6) as usize).max(METADATA_LEN);
        while rat + 4 <= ev.len() {
            let (kind, rlen) = (ev[rat], u16_at(ev, rat + 2) as usize);
            if rlen < 4 || rat + rlen > ev.len() {
                break;
            }
            if kind == INFO_MNT && rlen >= 12 {
                // The id ends the record (after padding to its alignment,
                // which differs between 64- and 32-bit targets).
                events.push((mask & (FAN_MNT_ATTACH | FAN_MNT_DETACH), u64_at(ev, rat + rlen - 8)));
            }
            rat += rlen;
        }
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(mask: u64, id: u64) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&40u32.to_ne_bytes()); // event_len
        e.extend_from_slice(&[3, 0]); // vers, reserved
        e.extend_from_slice(&24u16.to_ne_bytes()); // metadata_len
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes()); // fd
        e.extend_from_slice(&1234i32.to_ne_bytes()); // pid
        e.extend_from_slice(&[INFO_MNT, 0]);
        e.extend_from_slice(&16u16.to_ne_bytes());
        e.extend_from_slice(&[0; 4]);
        e.extend_from_slice(&id.to_ne_bytes());
        e
    }

    fn mount_tmpfs(at: &Path) {
        let (what, c) = (c"tmpfs", sys::cstr(at.as_os_str().as_encoded_bytes()).unwrap());
        // SAFETY: all strings are NUL-terminated; no data argument.
        let rc = unsafe { libc::mount(what.as_ptr(), c.as_ptr(), what.as_ptr(), 0, std::ptr::null()) };
        assert_eq!(
            rc,
            0,
            "mount tmpfs on {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        );
    }

    fn umount(at: &Path) {
        let c = sys::cstr(at.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: the path is NUL-terminated.
        let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(rc, 0, "umount {}: {}", at.display(), std::io::Error::last_os_error());
    }

    /// Whether the watch reports a change within a second (the kernel
    /// queues the event before the mount call returns, so the first read
    /// finds it; the wait is for a loaded machine's sake only).
    fn reports(w: &MountWatch) -> bool {
        let mut buf = vec![0u8; 4096];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < deadline {
            if w.changed(&mut buf) {
                return true;
            }
            let _ = sys::poll_readable_for(&[w.fd()], std::time::Duration::from_millis(50));
        }
        false
    }

    #[test]
    fn reports_mounts_under_the_source_and_not_elsewhere() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: mounting needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // As `Watcher::new` passes it: canonical.
        let base = dir.path().canonicalize().unwrap();
        let (source, elsewhere) = (base.join("src"), base.join("elsewhere"));
        let (inside, deeper) = (source.join("sub"), source.join("sub/deeper"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let w = MountWatch::new(&source).expect("mount events (Linux 6.15) on this machine");
        mount_tmpfs(&elsewhere);
        assert!(!reports(&w), "a mount outside the source was reported");
        mount_tmpfs(&inside);
        assert!(reports(&w), "a mount under the source was not reported");
        std::fs::create_dir(&deeper).unwrap();
        mount_tmpfs(&deeper);
        assert!(reports(&w), "a mount under a mount under the source was not reported");
        umount(&deeper);
        assert!(reports(&w), "an unmount under the source was not reported");
        umount(&elsewhere);
        assert!(!reports(&w), "an unmount outside the source was reported");
        umount(&inside);
        assert!(reports(&w), "an unmount under the source was not reported");
        // Found where it is mounted, by its id.
        let root = sys::mount_id_unique(Path::new("/")).unwrap();
        assert_eq!(sys::statmount_point(root).unwrap().as_deref(), Some(&b"/"[..]));
        assert_eq!(sys::statmount_point(u64::MAX - 1).unwrap(), None);
    }

    #[test]
    fn parses_attaches_detaches_and_lost_events() {
        let mut buf = event(FAN_MNT_ATTACH, 0x8000_002b);
        buf.extend(event(FAN_MNT_DETACH, 0x8000_002c));
        buf.extend(event(FAN_MNT_ATTACH | FAN_MNT_DETACH, 7));
        let mut events = Vec::new();
        assert!(!parse(&buf, &mut events));
        let both = FAN_MNT_ATTACH | FAN_MNT_DETACH;
        assert_eq!(
            events,
            [(FAN_MNT_ATTACH, 0x8000_002b), (FAN_MNT_DETACH, 0x8000_002c), (both, 7)]
        );
        // A truncated event is not read: the first, whole, is; the
        // second, cut, is not.
        assert!(!parse(&buf[..50], &mut events));
        assert_eq!(events.len(), 4);
        let mut lost = event(libc::FAN_Q_OVERFLOW, 0);
        lost.truncate(24);
        lost[0] = 24;
        assert!(parse(&lost, &mut events));
    }
}
