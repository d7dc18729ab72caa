//! The client half of `rcufs drop` and `rcufs stats`: talking to a mounted
//! rcufs through the drop ioctl and the `user.rcufs.stats` extended attribute
//! (the protocol in `protocol.rs`), finding the rcufs mount that holds a path
//! in `/proc/self/mountinfo`, and formatting what comes back.
//!
//! The drop is the per-directory cache cleaning of seed 004 ("VFS: Directory
//! level cache cleaning") and seed 001 ("fs: add a per-directory drop_caches
//! interface"): the caller must own the directory or be root, and whatever
//! under it the caller does not own is skipped and counted.
//!
//! A mount is identified by its device number: `stat(PATH).st_dev` is matched
//! against the `major:minor` field of mountinfo, which is exact even through
//! symlinks and bind mounts; the mount must be an rcufs one (see [`is_rcufs`]).

use std::ffi::CString;
use std::fmt::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use fuse_fs::protocol::{DropArgs, DropMode, IOC_DROP, XATTR_STATS};

use fuse_fs::mountinfo::{MountEntry, is_rcufs, mounts};

/// Splits a `dev_t` into major and minor as glibc's `gnu_dev_major`/`minor` do.
fn split_dev(dev: u64) -> (u32, u32) {
    (libc::major(dev), libc::minor(dev))
}

/// Finds the rcufs mount that holds `path`, with a message naming what is
/// there instead when it is not on one.
pub fn find_rcufs_mount(path: &Path) -> Result<MountEntry> {
    let meta = std::fs::metadata(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTCONN) => anyhow!(
            "{}: the FUSE mount holding it is dead (its daemon exited); clear it with `umount -l MOUNTPOINT`",
            path.display()
        ),
        _ => anyhow!("{}: {e}", path.display()),
    })?;
    let dev = split_dev(meta.dev());
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let all = mounts()?;
    let same_dev: Vec<&MountEntry> = all.iter().filter(|m| m.dev == dev).collect();
    // Several entries share a device for bind mounts; prefer the one whose
    // mount point is the longest prefix of the path.
    let best = same_dev
        .iter()
        .filter(|m| canonical.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
        .or_else(|| same_dev.last());
    match best {
        Some(m) if is_rcufs(m) => Ok((*m).clone()),
        Some(m) => bail!(
            "{} is not on an rcufs mount: it is on {} (type {}); give a path under a mount made with `rcufs mount`",
            path.display(),
            m.mount_point.display(),
            m.fstype
        ),
        None => bail!(
            "{} is not on an rcufs mount (its device {}:{} is not in /proc/self/mountinfo)",
            path.display(),
            dev.0,
            dev.1
        ),
    }
}

fn cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| anyhow!("{}: path contains a NUL byte", path.display()))
}

/// Unmounts `mountpoint` from outside the FUSE session: a plain unmount, or a
/// lazy one if the mount is in use; through `fusermount3` when not root.
pub fn unmount(mountpoint: &Path) -> Result<()> {
    let c = cstring(mountpoint)?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EBUSY) => {
            tracing::info!(
                "{} is in use: detaching it lazily; exiting once the last file closes",
                mountpoint.display()
            );
            // SAFETY: as above.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                return Ok(());
            }
            Err(std::io::Error::last_os_error()).with_context(|| format!("lazy unmount of {}", mountpoint.display()))
        }
        Some(libc::EPERM) => {
            let status = std::process::Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(mountpoint)
                .status()
                .context("running fusermount3 -u -z")?;
            if !status.success() {
                bail!("fusermount3 -u -z {} failed: {status}", mountpoint.display());
            }
            Ok(())
        }
        _ => Err(err).with_context(|| format!("unmounting {}", mountpoint.display())),
    }
}

/// Why a drop of one directory failed, with the errno kept for callers that
/// test for it.
#[derive(Debug)]
pub struct DropError {
    pub errno: i32,
    pub message: String,
}

impl std::fmt::Display for DropError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DropError {}

/// Opens `dir` (`O_RDONLY | O_DIRECTORY`) and issues [`IOC_DROP`] with `mode`;
/// returns the filled-in [`DropArgs`].
pub fn drop_dir(dir: &Path, mode: DropMode) -> Result<DropArgs, DropError> {
    let shown = dir.display();
    let fail = |errno: i32, message: String| DropError { errno, message };
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| fail(libc::EINVAL, format!("{shown}: path contains a NUL byte")))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let raw = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        let errno = e.raw_os_error().unwrap_or(0);
        let message = match errno {
            libc::ENOTDIR => {
                format!("{shown}: not a directory (the drop works on a directory and everything under it)")
            }
            libc::ENOENT => format!("{shown}: no such directory"),
            libc::EACCES => format!("{shown}: permission denied opening the directory"),
            libc::ENOTCONN => format!("{shown}: the FUSE mount is dead (its daemon exited)"),
            _ => format!("{shown}: cannot open: {e}"),
        };
        return Err(fail(errno, message));
    }
    // SAFETY: `open` just returned this descriptor and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut args = DropArgs::request(mode);
    // SAFETY: IOC_DROP is `_IOWR` with the size of `DropArgs`, so the kernel
    // reads and writes exactly `size_of::<DropArgs>()` bytes at `&mut args`,
    // which is a live, exclusively borrowed, pointer-free `#[repr(C)]` struct.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), IOC_DROP as _, &mut args as *mut DropArgs) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        let errno = e.raw_os_error().unwrap_or(0);
        let message = match errno {
            libc::ENOTTY => format!("{shown}: not on an rcufs mount (the filesystem does not know the drop ioctl)"),
            libc::EPERM => format!("{shown}: permission denied: you must own the directory or be root"),
            libc::EINVAL => format!("{shown}: the filesystem rejected the request (mode {})", mode as u32),
            _ => format!("{shown}: drop failed: {e}"),
        };
        return Err(fail(errno, message));
    }
    Ok(args)
}

/// Reads the extended attribute `name` of `path` (following symlinks).
pub fn get_xattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let c = cstring(path).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let n = CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: both strings are NUL-terminated and live; a null buffer of
        // size 0 asks only for the value's length.
        let len = unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; len as usize + 1];
        // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
        let got = unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got >= 0 {
            buf.truncate(got as usize);
            return Ok(buf);
        }
        let e = std::io::Error::last_os_error();
        // The value grew between the two calls: ask again.
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
    }
}

/// Reads the stats JSON of the rcufs mount at `mount_point`.
pub fn read_stats(mount_point: &Path) -> Result<String> {
    let bytes = get_xattr(mount_point, XATTR_STATS).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::ENOTSUP) => anyhow!(
            "{}: the filesystem does not answer `{XATTR_STATS}` ({e}); is it an rcufs mount of this version?",
            mount_point.display()
        ),
        _ => anyhow!("{}: cannot read `{XATTR_STATS}`: {e}", mount_point.display()),
    })?;
    String::from_utf8(bytes).map_err(|_| anyhow!("`{XATTR_STATS}` is not UTF-8"))
}

/// Bytes as a short human string: `0 B`, `4.0 KiB`, `1.5 GiB`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A duration in nanoseconds as `812 ns`, `3.4 µs`, `1.25 ms`, `2.50 s`.
pub fn format_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// One line describing a finished drop. Dentries the kernel still holds are
/// taken out of the cache too but only unhashed (`busy`); they are freed when
/// the kernel forgets them, so the line counts them with the dropped ones
/// and says how many they were.
pub fn format_drop(dir: &Path, mode: DropMode, args: &DropArgs, wall_ns: u64) -> String {
    let what = match mode {
        DropMode::Pages => "pages",
        DropMode::Dentries => "dentries",
        DropMode::All => "all",
    };
    format!(
        "{}: dropped ({what}) {} dentries ({} of them still in use by the kernel, unhashed) and {} pages ({}); \
         skipped {} not owned by you; visited {} inodes; took {} in rcufs, {} in all",
        dir.display(),
        args.dentries_dropped + args.busy,
        args.busy,
        args.pages_dropped,
        format_bytes(args.bytes_freed),
        args.skipped,
        args.visited,
        format_ns(args.elapsed_ns),
        format_ns(wall_ns),
    )
}

/// Formats the stats JSON as a table: one block per section, one row per
/// counter, byte counts also in human units, hit ratios where hits and
/// misses are both present. Keys the table does not know are shown too.
pub fn format_stats(json: &str, mount: &MountEntry) -> Result<String> {
    let value: serde_json::Value = serde_json::from_str(json).context("the stats are not valid JSON")?;
    let obj = value
        .as_object()
        .ok_or_else(|| anyhow!("the stats are not a JSON object"))?;
    let mut out = String::new();
    // The mount source is the source directory when the mount records it;
    // a direct mount(2) by the FUSE library records only the name "rcufs".
    if mount.source.is_empty() || mount.source == "rcufs" {
        let _ = writeln!(out, "rcufs mount {}", mount.mount_point.display());
    } else {
        let _ = writeln!(
            out,
            "rcufs mount {} (source {})",
            mount.mount_point.display(),
            mount.source
        );
    }
    // Scalars first, then one block per section.
    for (key, v) in obj.iter().filter(|(_, v)| !v.is_object()) {
        let _ = writeln!(out, "  {key}: {v}");
    }
    // The known sections in a reading order, then any others (sorted).
    const ORDER: [&str; 4] = ["dcache", "pagecache", "inodes", "drops"];
    let mut sections: Vec<(&String, &serde_json::Map<String, serde_json::Value>)> =
        obj.iter().filter_map(|(k, v)| v.as_object().map(|o| (k, o))).collect();
    sections.sort_by_key(|(k, _)| ORDER.iter().position(|o| o == k).unwrap_or(ORDER.len()));
    for (section, fields) in sections {
        let _ = writeln!(out, "{section}");
        // The names line up within a section, however long the longest.
        let w = fields.keys().map(String::len).max().unwrap_or(0).max(18);
        for (key, v) in fields {
            let shown = match v.as_u64() {
                Some(n) if key.contains("bytes") => format!("{n} ({})", format_bytes(n)),
                Some(n) => n.to_string(),
                None => v.to_string(),
            };
            let _ = writeln!(out, "  {key:<w$} {shown:>14}");
        }
        let hits = fields.get("hits").and_then(serde_json::Value::as_u64);
        let misses = fields.get("misses").and_then(serde_json::Value::as_u64);
        if let (Some(h), Some(m)) = (hits, misses)
            && h + m > 0
        {
            let _ = writeln!(
                out,
                "  {:<w$} {:>13.1}%",
                "hit ratio",
                100.0 * h as f64 / (h + m) as f64
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
