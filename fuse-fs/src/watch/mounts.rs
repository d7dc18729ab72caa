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
//! The group reports every mount of the namespace. A batch of events
//! concerns the source when one of them names a mount that was at or under
//! the source when last looked (a detach, or a move away) or is there now
//! (an attach, or a move in); a mount attached and detached within one
//! batch, where neither look can have seen it, counts too, as does a lost
//! event (`FAN_Q_OVERFLOW`). Mounts elsewhere cost a read of
//! `/proc/self/mountinfo` and a `statx` per mount under the source.
//!
//! Not seen: a mount hidden under another mounted over it at the same
//! point (its id is not the one `statx` finds there) when it is detached
//! while still hidden, which changes nothing visible under the source.

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

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
/// header then (8-aligned) the mount's unique id.
const INFO_MNT: u8 = 7;
/// `struct fanotify_event_metadata`'s size.
const METADATA_LEN: usize = 24;

/// A fanotify group watching the mounts of the daemon's namespace.
#[derive(Debug)]
pub(super) struct MountWatch {
    fan: OwnedFd,
    source: PathBuf,
    /// The unique ids of the mounts at or under the source at the last
    /// look (only the watcher's thread uses it).
    under: Mutex<HashSet<u64>>,
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
        let watch = Self {
            fan,
            source: source.to_path_buf(),
            under: Mutex::default(),
        };
        *watch.under.lock() = watch.look()?;
        Ok(watch)
    }

    /// The group's descriptor, readable when events are queued.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fan.as_fd()
    }

    /// Reads the group until it is empty; whether what it read concerns
    /// the source (see the module docs).
    pub(super) fn changed(&self, buf: &mut [u8]) -> Result<bool> {
        let mut attached = Vec::new();
        let mut detached = Vec::new();
        let mut lost = false;
        loop {
            let n = match sys::read(self.fan.as_fd(), buf) {
                Ok(n) => n,
                Err(e) if e.errno() == libc::EINTR => continue,
                Err(e) if e.errno() == libc::EAGAIN => break,
                Err(e) => anyhow::bail!("reading mount events: {e}"),
            };
            lost |= parse(&buf[..n], &mut attached, &mut detached);
        }
        if attached.is_empty() && detached.is_empty() && !lost {
            return Ok(false);
        }
        let now = self.look()?;
        let mut under = self.under.lock();
        let concerns = |id: &u64| now.contains(id) || under.contains(id);
        let changed = lost
            || attached.iter().any(concerns)
            || detached.iter().any(concerns)
            || attached.iter().any(|id| detached.contains(id));
        *under = now;
        Ok(changed)
    }

    /// The unique ids of the mounts at or under the source now.
    fn look(&self) -> Result<HashSet<u64>> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
        let mut ids = HashSet::new();
        for m in mountinfo::parse_mountinfo(&text) {
            if !m.mount_point.starts_with(&self.source) {
                continue;
            }
            // A mount point gone meanwhile (detached since the read) has no
            // id to give: its detach is in the group for the next look.
            if let Ok(id) = sys::mount_id_unique(&m.mount_point) {
                ids.insert(id);
            }
        }
        Ok(ids)
    }
}

/// Adds the mounts the events in `buf` attach or detach to the lists;
/// returns whether the kernel lost events.
fn parse(buf: &[u8], attached: &mut Vec<u64>, detached: &mut Vec<u64>) -> bool {
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
            if kind == INFO_MNT && rlen >= 16 {
                let id = u64_at(ev, rat + 8);
                if mask & FAN_MNT_ATTACH != 0 {
                    attached.push(id);
                }
                if mask & FAN_MNT_DETACH != 0 {
                    detached.push(id);
                }
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
            if w.changed(&mut buf).unwrap() {
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
        let (source, elsewhere) = (dir.path().join("src"), dir.path().join("elsewhere"));
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
    }

    #[test]
    fn parses_attaches_detaches_and_lost_events() {
        let mut buf = event(FAN_MNT_ATTACH, 0x8000_002b);
        buf.extend(event(FAN_MNT_DETACH, 0x8000_002c));
        buf.extend(event(FAN_MNT_ATTACH | FAN_MNT_DETACH, 7));
        let (mut a, mut d) = (Vec::new(), Vec::new());
        assert!(!parse(&buf, &mut a, &mut d));
        assert_eq!(a, [0x8000_002b, 7]);
        assert_eq!(d, [0x8000_002c, 7]);
        // A truncated event is not read: the first, whole, is; the
        // second, cut, is not.
        assert!(!parse(&buf[..50], &mut a, &mut d));
        assert_eq!((a.len(), d.len()), (3, 2));
        let mut lost = event(libc::FAN_Q_OVERFLOW, 0);
        lost.truncate(24);
        lost[0] = 24;
        assert!(parse(&lost, &mut a, &mut d));
    }
}
