//! `/proc/self/mountinfo`: the mount table as rcufs reads it, to find the
//! rcufs mount that holds a path (`rcufs drop`, `rcufs stats`) and to tell
//! whether the daemon's own mount is still in place when its session ends.
//! Reading it never asks a mounted filesystem anything, so it is safe while
//! a FUSE mount cannot answer yet (or any more).

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The filesystem type rcufs mounts show in mountinfo.
pub const FSTYPE: &str = "fuse.rcufs";

/// Whether a mount is an rcufs mount: type `fuse.rcufs`, or type `fuse` with
/// the mount source `rcufs` (what a FUSE library shows when it mounts with
/// mount(2) directly and passes the subtype only as the source name).
pub fn is_rcufs(m: &MountEntry) -> bool {
    m.fstype == FSTYPE || (m.fstype == "fuse" && m.source == "rcufs")
}

/// One line of `/proc/self/mountinfo`, the fields rcufs needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's id (the kernel may give it to a later mount once this
    /// one is gone).
    pub id: u64,
    /// The id of the mount it is mounted on (its own id for the root of
    /// the namespace).
    pub parent_id: u64,
    /// The device number, `(major, minor)`.
    pub dev: (u32, u32),
    /// The directory of the mounted filesystem that is mounted (`/` unless a bind mount).
    pub root: PathBuf,
    /// Where it is mounted, unescaped.
    pub mount_point: PathBuf,
    /// The filesystem type, for example `fuse.rcufs` or `ext4`.
    pub fstype: String,
    /// The mount source, for example the rcufs source directory.
    pub source: String,
}

impl MountEntry {
    /// The device number as `stat` gives it (`st_dev`).
    pub fn st_dev(&self) -> u64 {
        libc::makedev(self.dev.0, self.dev.1)
    }
}

/// Parses mountinfo text (see proc(5)); malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    // 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    let (left, right) = line.split_once(" - ")?;
    let mut l = left.split(' ');
    let id = l.next()?.parse().ok()?;
    let parent_id = l.next()?.parse().ok()?;
    let (major, minor) = l.next()?.split_once(':')?;
    let root = unescape(l.next()?);
    let mount_point = unescape(l.next()?);
    let mut r = right.split(' ');
    let fstype = r.next()?.to_string();
    let source = String::from_utf8_lossy(&unescape_bytes(r.next().unwrap_or(""))).into_owned();
    Some(MountEntry {
        id,
        parent_id,
        dev: (major.parse().ok()?, minor.parse().ok()?),
        root,
        mount_point,
        fstype,
        source,
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn unescape(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(unescape_bytes(s)))
}

/// The ids of the mounts that `which` picks that lookups cannot reach:
/// another mount, not one they are mounted on (directly or further up),
/// sits at their mount point or at a directory above it. That is one
/// mounted on a mount's root at the same point (not told by the list's
/// order: since Linux 6.8 the table lists mounts by creation, and a mount
/// moved onto a directory already mounted over, or slipped beneath one,
/// is on top of a mount created after it), or one mounted over a
/// directory that holds the mount point. Each picked mount is compared
/// with every other, so `which` should pick few.
pub fn hidden(mounts: &[MountEntry], which: impl Fn(&MountEntry) -> bool) -> std::collections::HashSet<u64> {
    let by_id: std::collections::HashMap<u64, &MountEntry> = mounts.iter().map(|m| (m.id, m)).collect();
    // Whether `a` is `m`'s parent, or its parent's, and so on.
    let below = |m: &MountEntry, a: u64| {
        let mut cur = m;
        // The chain is bounded by the table (a namespace's root may name a
        // parent outside it).
        for _ in 0..mounts.len() {
            if cur.parent_id == a {
                return true;
            }
            match by_id.get(&cur.parent_id) {
                Some(p) if p.id != cur.id => cur = p,
                _ => return false,
            }
        }
        false
    };
    mounts
        .iter()
        .filter(|m| which(m))
        .filter(|m| {
            mounts
                .iter()
                .any(|n| n.id != m.id && m.mount_point.starts_with(&n.mount_point) && !below(m, n.id))
        })
        .map(|m| m.id)
        .collect()
}

/// `path` as the mount table's paths are decoded ([`mounts`]: bytes that
/// are not UTF-8 become U+FFFD), so that it can be compared with them.
pub fn decoded_as_in_table(path: &std::path::Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(String::from_utf8_lossy(path.as_os_str().as_bytes()).into_owned())
}

/// Reads and parses this process's mount table.
pub fn mounts() -> Result<Vec<MountEntry>> {
    // Read as bytes: a mount point that is not UTF-8 anywhere in the
    // namespace must not make the whole table unreadable (its own line is
    // then unescaped from the lossy text, and matches no path).
    let bytes = std::fs::read("/proc/self/mountinfo").context("cannot read /proc/self/mountinfo")?;
    Ok(parse_mountinfo(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests;
