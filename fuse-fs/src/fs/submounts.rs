//! Filesystems mounted under the source, and their mount flags.
//!
//! The mirror is one mount with flags of its own: `nosuid` and `nodev`
//! unless `-o suid` or `-o dev` are given, and `noexec` when asked for or
//! when the source itself is on a `noexec` mount (`mount.rs`). Lookups
//! cross into filesystems mounted under the source, and what the kernel
//! enforces for a file reached through the mirror is the mirror's flags,
//! not those of the filesystem the file is on: without a check, a program
//! in a `noexec` upload directory under the source would run through the
//! mirror (`execve` and `mmap(PROT_EXEC)` look at the mount the file is
//! reached through), and a setuid program on a user's `nosuid` stick
//! under the source would keep its privileges through a `-o suid` mirror.
//!
//! So a lookup that enters a filesystem whose `noexec`, `nosuid` or
//! `nodev` the mirror does not enforce fails with `EACCES`: the mount point
//! is listed in its directory but cannot be entered through the mirror.
//! This is logged once per filesystem, with the mount option that would
//! let the mirror serve it. The flags are read when a lookup first finds
//! the filesystem's root (a name whose device differs from its
//! directory's); a filesystem remounted with stricter flags after that is
//! not seen until the mount point's entry is looked up again. A bind mount
//! with stricter flags of a directory of the same filesystem has the
//! device of its parent and is not seen at all (SEMANTICS, "Mounts under
//! the source").

use std::collections::HashSet;
use std::ffi::CStr;
use std::os::fd::BorrowedFd;

use crate::error::{FsError, FsResult};
use crate::inode::Inode;
use crate::sys;

use super::Fs;

/// The mount flags the mirror may have to enforce for a filesystem under
/// the source.
pub const POLICY_FLAGS: u64 = libc::ST_NOEXEC | libc::ST_NOSUID | libc::ST_NODEV;

/// The flags of [`POLICY_FLAGS`] a mirror mounted with `options` (the
/// mount options rcufs passes to the kernel) enforces: `nosuid` and
/// `nodev` unless `suid` or `dev` is given, `noexec` only when given. The
/// mount itself takes its `nosuid` and `nodev` from here (`fuse.rs`,
/// `session`).
pub fn enforced_by(options: &[String]) -> u64 {
    let has = |o: &str| options.iter().any(|x| x == o);
    let mut flags = 0;
    if has("noexec") {
        flags |= libc::ST_NOEXEC;
    }
    if !has("suid") {
        flags |= libc::ST_NOSUID;
    }
    if !has("dev") {
        flags |= libc::ST_NODEV;
    }
    flags
}

/// The filesystems refused so far (by device), so each is logged once.
#[derive(Debug, Default)]
pub(super) struct Refused(parking_lot::Mutex<HashSet<u64>>);

impl Fs {
    /// Whether the filesystem that `name` under `parent` (open as `dir`)
    /// leads to, on device `dev` (not its directory's), may be served
    /// through the mirror: `EACCES` if it enforces a flag of
    /// [`POLICY_FLAGS`] the mirror does not (module docs). Either way it is
    /// given a lane if it can stop answering (`fs/lanes.rs`).
    pub(super) fn may_enter(&self, parent: &Inode, dir: BorrowedFd<'_>, name: &CStr, dev: u64) -> FsResult<()> {
        let mount = sys::mount_flags_at(dir, name)?;
        // Refused or not, lookups of the name reach it.
        self.note_crossing(parent, name.to_bytes(), dev, mount);
        let lost = mount.flags & POLICY_FLAGS & !self.cfg.mirror_flags;
        if lost == 0 {
            return Ok(());
        }
        if self.refused_mounts.0.lock().insert(dev) {
            let names: Vec<&str> = [
                (libc::ST_NOEXEC, "noexec"),
                (libc::ST_NOSUID, "nosuid"),
                (libc::ST_NODEV, "nodev"),
            ]
            .into_iter()
            .filter(|(f, _)| lost & f != 0)
            .map(|(_, n)| n)
            .collect();
            tracing::warn!(
                name = %name.to_string_lossy(),
                dev,
                "a filesystem mounted under the source is {}, which the mirror is not: it is not served \
                 (EACCES), so that the mirror is no way around its policy; mount the mirror with -o {} to serve it",
                names.join(","),
                names.join(",")
            );
        }
        Err(FsError::new(libc::EACCES))
    }
}
