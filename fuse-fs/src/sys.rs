//! Thin, safe wrappers over the libc calls the passthrough needs.
//!
//! This is the only file of the filesystem with `unsafe` libc calls: each
//! wrapper checks its arguments (C strings, buffer lengths), calls libc once,
//! and turns `-1` into an [`FsError`] carrying the source's errno.
//!
//! Descriptors are `OwnedFd`/`BorrowedFd`, so a descriptor is closed exactly
//! once, when its owner drops it. Operations that Linux refuses on `O_PATH`
//! descriptors (chmod, utimens, truncate, xattrs) go through the
//! `/proc/self/fd/N` magic link, as libfuse's passthrough examples do.
//!
//! Kernel file handles (`name_to_handle_at(2)` / `open_by_handle_at(2)`) let
//! the filesystem name an inode without holding a descriptor open; opening a
//! handle needs `CAP_DAC_READ_SEARCH`, so rcufs uses them when it runs as
//! root and the source filesystem supports them.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{FsError, FsResult};

/// The largest kernel file handle (`MAX_HANDLE_SZ`).
pub const MAX_HANDLE_SZ: usize = 128;

/// Turns a name from the kernel into a C string (`EINVAL` on an inner NUL).
pub fn cstr(name: &[u8]) -> FsResult<CString> {
    Ok(CString::new(name)?)
}

/// The empty C string, for `AT_EMPTY_PATH` calls.
pub const EMPTY: &CStr = c"";

fn check(ret: libc::c_int) -> FsResult<libc::c_int> {
    if ret == -1 {
        Err(FsError::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> FsResult<usize> {
    if ret < 0 {
        Err(FsError::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// A zeroed `struct stat`.
pub fn zero_stat() -> libc::stat {
    // SAFETY: `struct stat` is plain old data; all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// `fstatat(dirfd, name, flags)`.
pub fn fstatat(dirfd: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> FsResult<libc::stat> {
    let mut st = zero_stat();
    // SAFETY: `name` is NUL-terminated and `st` is a valid, writable `struct stat`.
    check(unsafe { libc::fstatat(dirfd.as_raw_fd(), name.as_ptr(), &mut st, flags) })?;
    Ok(st)
}

/// `fstatat(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`: the attributes of
/// the object `fd` refers to (works on `O_PATH` descriptors).
pub fn fstat(fd: BorrowedFd<'_>) -> FsResult<libc::stat> {
    fstatat(fd, EMPTY, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
}

/// The unique id of the mount at `path` (`statx` with
/// `STATX_MNT_ID_UNIQUE`, Linux 6.8; `ENOSYS` where the kernel gives none),
/// not following a last symlink nor triggering an automount.
pub fn mount_id_unique(path: &std::path::Path) -> FsResult<u64> {
    let c = cstr(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))?;
    statx_mount_id(libc::AT_FDCWD, &c)
}

/// As [`mount_id_unique`], for `name` under the directory `dir`.
pub fn mount_id_unique_at(dir: BorrowedFd<'_>, name: &CStr) -> FsResult<u64> {
    statx_mount_id(dir.as_raw_fd(), name)
}

fn statx_mount_id(dirfd: libc::c_int, name: &CStr) -> FsResult<u64> {
    statx_mount_id_of(dirfd, name, libc::STATX_MNT_ID_UNIQUE)
}

/// `statx` for the mount id alone (`mask`: `STATX_MNT_ID_UNIQUE`, or
/// `STATX_MNT_ID`, the id `/proc/self/mountinfo` shows, which the kernel
/// may give a later mount once this one is gone). Asks the filesystem
/// nothing (`AT_STATX_DONT_SYNC`, no attribute asked for).
fn statx_mount_id_of(dirfd: libc::c_int, name: &CStr, mask: u32) -> FsResult<u64> {
    // SAFETY: `statx` is plain old data; all-zero bytes are a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let mut flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT | libc::AT_STATX_DONT_SYNC;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    // SAFETY: `name` is NUL-terminated and `stx` is a valid, writable `struct statx`.
    check(unsafe { libc::statx(dirfd, name.as_ptr(), flags, mask, &mut stx) })?;
    if stx.stx_mask & mask == 0 {
        return Err(FsError::new(libc::ENOSYS));
    }
    Ok(stx.stx_mnt_id)
}

/// The id `/proc/self/mountinfo` shows for the mount `fd` is on (asks
/// the filesystem nothing; an error before Linux 5.8).
pub fn mount_id_of(fd: BorrowedFd<'_>) -> FsResult<u64> {
    statx_mount_id_of(fd.as_raw_fd(), EMPTY, libc::STATX_MNT_ID)
}

/// Where a mount is, as [`statmount`] says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountAt {
    /// Its mount point, relative to this process's root.
    pub point: Vec<u8>,
    /// The unique id of the mount it is mounted on.
    pub parent: u64,
}

/// `struct mnt_id_req` of `statmount` and `listmount`, its first published
/// size (24 bytes: the calling thread's mount namespace).
#[repr(C)]
struct MntIdReq {
    size: u32,
    spare: u32,
    mnt_id: u64,
    param: u64,
}

impl MntIdReq {
    fn new(mnt_id: u64, param: u64) -> Self {
        Self {
            size: std::mem::size_of::<Self>() as u32,
            spare: 0,
            mnt_id,
            param,
        }
    }
}

/// The unique ids of every mount in the calling thread's mount namespace
/// reachable from this process's root, its root mount included, in
/// increasing order (`listmount` from `LSMT_ROOT`, recursive, Linux 6.8).
/// Walks no path.
pub fn listmount() -> FsResult<Vec<u64>> {
    /// `__NR_listmount` (the number of the generic table and x86-64; not
    /// alpha's or MIPS's).
    const SYS_LISTMOUNT: libc::c_long = 458;
    const LSMT_ROOT: u64 = u64::MAX;
    let mut ids = Vec::new();
    let mut buf = vec![0u64; 512];
    loop {
        // Continues after the last id returned (0: from the start): the
        // kernel lists in id order.
        let req = MntIdReq::new(LSMT_ROOT, ids.last().copied().unwrap_or(0));
        // SAFETY: `req` is a valid request of the size it says; `buf` is
        // writable for `buf.len()` ids.
        let n = unsafe {
            libc::syscall(
                SYS_LISTMOUNT,
                &req as *const MntIdReq,
                buf.as_mut_ptr(),
                buf.len(),
                0u32,
            )
        };
        if n < 0 {
            return Err(FsError::last_os_error());
        }
        let n = (n as usize).min(buf.len());
        ids.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return Ok(ids);
        }
    }
}

/// Where the mount with unique id `id` is mounted (`statmount` with
/// `STATMOUNT_MNT_BASIC | STATMOUNT_MNT_POINT`, Linux 6.8); `None` if no
/// such mount exists (any more). Walks no path.
pub fn statmount(id: u64) -> FsResult<Option<MountAt>> {
    /// `__NR_statmount` (the number of the generic table and x86-64; not
    /// alpha's or MIPS's).
    const SYS_STATMOUNT: libc::c_long = 457;
    const STATMOUNT_MNT_BASIC: u64 = 0x2;
    const STATMOUNT_MNT_POINT: u64 = 0x10;
    /// The fixed part of `struct statmount`; its strings follow.
    const HEADER: usize = 512;
    let want = STATMOUNT_MNT_BASIC | STATMOUNT_MNT_POINT;
    let req = MntIdReq::new(id, want);
    let mut words = 1024usize;
    loop {
        let mut buf = vec![0u64; words];
        let len = words * 8;
        // SAFETY: `req` is a valid request of the size it says; `buf` is
        // writable for `len` bytes and 8-aligned, as `struct statmount` needs.
        let r = unsafe { libc::syscall(SYS_STATMOUNT, &req as *const MntIdReq, buf.as_mut_ptr(), len, 0u32) };
        if r == -1 {
            let e = FsError::last_os_error();
            match e.errno() {
                libc::ENOENT => return Ok(None),
                libc::EOVERFLOW if words < (1 << 17) => {
                    words *= 4;
                    continue;
                }
                _ => return Err(e),
            }
        }
        // SAFETY: plain bytes of the buffer just written, within its length.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len) };
        let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let (mask, size) = (u64_at(8), (u32_at(0) as usize).min(len));
        if mask & want != want || size < HEADER {
            return Err(FsError::new(libc::ENOSYS));
        }
        // `mnt_parent_id` at 48, `mnt_point`'s offset in the strings at 108.
        let at = HEADER + u32_at(108) as usize;
        let strings = bytes.get(at..size).ok_or(FsError::new(libc::EIO))?;
        let end = strings.iter().position(|&b| b == 0).unwrap_or(strings.len());
        return Ok(Some(MountAt {
            point: strings[..end].to_vec(),
            parent: u64_at(48),
        }));
    }
}

/// `openat(dirfd, name, flags, mode)`, always with `O_CLOEXEC`.
pub fn openat(dirfd: BorrowedFd<'_>, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> FsResult<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the mode argument is read only with O_CREAT/O_TMPFILE.
    let fd = check(unsafe { libc::openat(dirfd.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: `openat` succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` (relative; `.` for `dir` itself) beneath the directory
/// `dir` with `flags` (`openat2`, Linux 5.6), refusing to leave `dir`, to
/// cross into another mount, or to follow any symlink on the way: the
/// path is resolved within `dir`'s own filesystem or not at all.
pub fn open_beneath(dir: BorrowedFd<'_>, path: &CStr, flags: libc::c_int) -> FsResult<OwnedFd> {
    // SAFETY: `open_how` is plain old data; all-zero bytes are a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve =
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_XDEV | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `path` is NUL-terminated and `how` is a valid `struct open_how`
    // of the size passed; the kernel only reads both.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    let fd = check(fd as libc::c_int)?;
    // SAFETY: `openat2` succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` (absolute) with `flags`.
pub fn open_path(path: &CStr, flags: libc::c_int) -> FsResult<OwnedFd> {
    // SAFETY: `path` is NUL-terminated; no O_CREAT, so the mode is unused.
    let fd = check(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, 0) })?;
    // SAFETY: `open` succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The `/proc/self/fd/N` magic link of `fd`.
pub fn proc_path(fd: BorrowedFd<'_>) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL in a formatted number")
}

/// Reopens the object behind an `O_PATH` descriptor with real access `flags`.
pub fn reopen(fd: BorrowedFd<'_>, flags: libc::c_int) -> FsResult<OwnedFd> {
    open_path(
        &proc_path(fd),
        flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW),
    )
}

/// A kernel file handle: the bytes `name_to_handle_at` returned and the
/// handle type. Holding one costs no descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelHandle {
    handle_type: i32,
    bytes: Box<[u8]>,
}

/// `struct file_handle` followed by room for the largest handle.
#[repr(C)]
struct HandleBuf {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// `name_to_handle_at(dirfd, name, flags)`: the handle and the id of the
/// mount it was reached through: the mount's unique id where the kernel
/// gives it (`AT_HANDLE_MNT_ID_UNIQUE`, Linux 6.12), which no later mount
/// takes, else the id a later mount may be given once this one is gone.
/// `flags` may contain `AT_EMPTY_PATH`; symlinks are not followed.
pub fn name_to_handle_at(dirfd: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> FsResult<(KernelHandle, u64)> {
    /// `AT_HANDLE_MNT_ID_UNIQUE`: the mount id argument is a `u64` and
    /// gets the unique id.
    const AT_HANDLE_MNT_ID_UNIQUE: libc::c_int = 0x001;
    /// Cleared when the kernel refused the flag.
    static UNIQUE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
    let mut buf = HandleBuf {
        handle_bytes: MAX_HANDLE_SZ as libc::c_uint,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mount_id = loop {
        let unique = UNIQUE.load(std::sync::atomic::Ordering::Relaxed);
        let f = if unique { flags | AT_HANDLE_MNT_ID_UNIQUE } else { flags };
        // Room for either form: the kernel writes an `int` without the flag.
        let mut id: u64 = 0;
        // SAFETY: `buf` starts with a `struct file_handle` whose
        // `handle_bytes` says how many bytes follow it, and `f_handle` has
        // exactly that room; `name` is NUL-terminated and `id` is writable
        // for a `u64` (and so for the `int` written without the flag).
        let r = unsafe {
            libc::name_to_handle_at(
                dirfd.as_raw_fd(),
                name.as_ptr(),
                (&mut buf as *mut HandleBuf).cast::<libc::file_handle>(),
                (&mut id as *mut u64).cast::<libc::c_int>(),
                f,
            )
        };
        match check(r) {
            Ok(_) if unique => break id,
            Ok(_) => {
                let b = id.to_ne_bytes();
                break u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
            }
            // A kernel before 6.12: the flag is unknown.
            Err(e) if unique && e.errno() == libc::EINVAL => {
                UNIQUE.store(false, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    };
    let len = (buf.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok((
        KernelHandle {
            handle_type: buf.handle_type,
            bytes: buf.f_handle[..len].into(),
        },
        mount_id,
    ))
}

/// `open_by_handle_at(mount_fd, handle, flags)` (needs `CAP_DAC_READ_SEARCH`).
pub fn open_by_handle_at(mount_fd: BorrowedFd<'_>, handle: &KernelHandle, flags: libc::c_int) -> FsResult<OwnedFd> {
    let mut buf = HandleBuf {
        handle_bytes: handle.bytes.len() as libc::c_uint,
        handle_type: handle.handle_type,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    buf.f_handle[..handle.bytes.len()].copy_from_slice(&handle.bytes);
    // SAFETY: `buf` is a `struct file_handle` whose `handle_bytes` bytes of
    // `f_handle` are initialised; the kernel only reads it.
    let fd = check(unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&mut buf as *mut HandleBuf).cast::<libc::file_handle>(),
            flags | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: the call succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl KernelHandle {
    /// The handle type (`struct file_handle`'s `handle_type`).
    pub fn handle_type(&self) -> i32 {
        self.handle_type
    }

    /// The handle bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// What `statfs` says of the filesystem holding `fd`: its id (`f_fsid`,
/// the id fanotify names filesystems by, as one number: the first word in
/// the low half) and its type (`f_type`, a magic number).
pub fn fs_ids(fd: BorrowedFd<'_>) -> FsResult<(u64, i64)> {
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable `statfs` the kernel fills in.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    // `fsid_t` is two ints; its fields are private in libc, so read its bytes.
    // SAFETY: `fsid_t` is 8 bytes of plain data (two `int`s).
    let words: [i32; 2] = unsafe { std::mem::transmute(st.f_fsid) };
    Ok((fsid_of(words), st.f_type as i64))
}

/// The bytes a user without privileges may still write to the filesystem
/// holding `fd` (`f_bavail` blocks of `fstatfs`).
pub fn available_bytes(fd: BorrowedFd<'_>) -> FsResult<u64> {
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable `statfs` the kernel fills in.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok((st.f_bavail as u64).saturating_mul(st.f_bsize as u64))
}

/// `f_type` of FUSE filesystems.
pub const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// Packs the two words of a `__kernel_fsid_t` as [`fs_ids`] does.
pub fn fsid_of(words: [i32; 2]) -> u64 {
    (words[0] as u32 as u64) | ((words[1] as u32 as u64) << 32)
}

/// `fanotify_init(flags, O_RDONLY | O_CLOEXEC)`.
pub fn fanotify_init(flags: libc::c_uint) -> FsResult<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    let fd = check(unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint) })?;
    // SAFETY: the call succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fanotify_mark(fd, flags, mask, AT_FDCWD, path)`.
pub fn fanotify_mark(fd: BorrowedFd<'_>, flags: libc::c_uint, mask: u64, path: &CStr) -> FsResult<()> {
    // SAFETY: `path` is NUL-terminated; the other arguments are integers.
    check(unsafe { libc::fanotify_mark(fd.as_raw_fd(), flags, mask, libc::AT_FDCWD, path.as_ptr()) })?;
    Ok(())
}

/// An `eventfd` (non-blocking, close-on-exec), to wake a thread in `poll`.
pub fn eventfd() -> FsResult<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: the call succeeded, so `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd's counter (wakes its pollers).
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> FsResult<()> {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer of 8 bytes.
    check_size(unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) })?;
    Ok(())
}

/// Ends a thread's loop that polls an eventfd (the source watcher's, the
/// mount table's): a duplicate of the descriptor, signalled once.
#[derive(Debug)]
pub struct Stopper(OwnedFd);

impl Stopper {
    /// A stopper of the loop that polls `fd` (an eventfd).
    pub fn of(fd: &OwnedFd) -> std::io::Result<Self> {
        Ok(Self(fd.try_clone()?))
    }

    /// Makes the loop return (it sees `fd` readable from now on).
    pub fn stop(&self) {
        let _ = eventfd_signal(self.0.as_fd());
    }
}

/// Waits until one of `fds` is readable (or hung up); returns which are,
/// in order. `EINTR` counts as "none".
pub fn poll_readable(fds: &[BorrowedFd<'_>]) -> FsResult<Vec<bool>> {
    poll_in(fds, -1)
}

/// Like [`poll_readable`], but gives up after `timeout` (then none is).
pub fn poll_readable_for(fds: &[BorrowedFd<'_>], timeout: std::time::Duration) -> FsResult<Vec<bool>> {
    poll_in(fds, timeout.as_millis().min(i32::MAX as u128) as libc::c_int)
}

fn poll_in(fds: &[BorrowedFd<'_>], timeout_ms: libc::c_int) -> FsResult<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a live array of `pfds.len()` pollfd structs.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        if e == libc::EINTR {
            return Ok(vec![false; fds.len()]);
        }
        return Err(FsError::new(e));
    }
    Ok(pfds.iter().map(|p| p.revents != 0).collect())
}

/// Empties an eventfd's counter (non-blocking; nothing to read is fine).
pub fn eventfd_clear(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer of 8 bytes.
    let _ = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
}

/// `read(fd, buf)`.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> FsResult<usize> {
    // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes.
    check_size(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// `pread` until `buf` is full or end of file; returns the bytes read.
pub fn pread_full(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> FsResult<usize> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                rest.as_mut_ptr().cast(),
                rest.len(),
                (offset + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = FsError::last_os_error();
            if e.errno() == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

/// One `pwrite`; returns the bytes written.
pub fn pwrite(fd: BorrowedFd<'_>, data: &[u8], offset: u64) -> FsResult<usize> {
    // SAFETY: `data` is a valid readable buffer of `data.len()` bytes.
    check_size(unsafe { libc::pwrite(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), offset as libc::off_t) })
}

/// `fsync` or `fdatasync`.
pub fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> FsResult<()> {
    // SAFETY: plain syscalls on a descriptor the caller keeps open.
    check(unsafe {
        if datasync {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    })?;
    Ok(())
}

/// `close(dup(fd))`: gives the source the close-time semantics of `flush`
/// (POSIX locks dropped, NFS-style close-to-open) without closing `fd`.
pub fn flush(fd: BorrowedFd<'_>) -> FsResult<()> {
    // SAFETY: `dup` only duplicates a descriptor the caller keeps open.
    let dup = check(unsafe { libc::dup(fd.as_raw_fd()) })?;
    // SAFETY: `dup` is a new descriptor that only this function owns.
    check(unsafe { libc::close(dup) })?;
    Ok(())
}

/// `ftruncate`.
pub fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> FsResult<()> {
    // SAFETY: plain syscall on a descriptor the caller keeps open.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) })?;
    Ok(())
}

/// `truncate(path)`.
pub fn truncate(path: &CStr, size: u64) -> FsResult<()> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::truncate(path.as_ptr(), size as libc::off_t) })?;
    Ok(())
}

/// `fallocate`.
pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> FsResult<()> {
    // SAFETY: plain syscall on a descriptor the caller keeps open.
    check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset as libc::off_t, len as libc::off_t) })?;
    Ok(())
}

/// `lseek`.
pub fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> FsResult<i64> {
    // SAFETY: plain syscall on a descriptor the caller keeps open.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), offset as libc::off_t, whence) };
    if r < 0 {
        Err(FsError::last_os_error())
    } else {
        Ok(r as i64)
    }
}

/// `copy_file_range` between two descriptors at explicit offsets.
pub fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: u64,
    flags: u32,
) -> FsResult<usize> {
    let mut oi = off_in as libc::loff_t;
    let mut oo = off_out as libc::loff_t;
    // SAFETY: both offsets point to live locals; the descriptors are open.
    check_size(unsafe {
        libc::copy_file_range(
            fd_in.as_raw_fd(),
            &mut oi,
            fd_out.as_raw_fd(),
            &mut oo,
            len as usize,
            flags,
        )
    })
}

/// `mkdirat`.
pub fn mkdirat(dirfd: BorrowedFd<'_>, name: &CStr, mode: u32) -> FsResult<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::mkdirat(dirfd.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })?;
    Ok(())
}

/// `mknodat`.
pub fn mknodat(dirfd: BorrowedFd<'_>, name: &CStr, mode: u32, rdev: u64) -> FsResult<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe {
        libc::mknodat(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            mode as libc::mode_t,
            rdev as libc::dev_t,
        )
    })?;
    Ok(())
}

/// `symlinkat(target, dirfd, name)`.
pub fn symlinkat(target: &CStr, dirfd: BorrowedFd<'_>, name: &CStr) -> FsResult<()> {
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::symlinkat(target.as_ptr(), dirfd.as_raw_fd(), name.as_ptr()) })?;
    Ok(())
}

/// `unlinkat`.
pub fn unlinkat(dirfd: BorrowedFd<'_>, name: &CStr, flags: i32) -> FsResult<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::unlinkat(dirfd.as_raw_fd(), name.as_ptr(), flags) })?;
    Ok(())
}

/// `renameat2`.
pub fn renameat2(old_dir: BorrowedFd<'_>, old: &CStr, new_dir: BorrowedFd<'_>, new: &CStr, flags: u32) -> FsResult<()> {
    // SAFETY: both names are NUL-terminated.
    check(unsafe {
        libc::renameat2(
            old_dir.as_raw_fd(),
            old.as_ptr(),
            new_dir.as_raw_fd(),
            new.as_ptr(),
            flags,
        )
    })?;
    Ok(())
}

/// `linkat(AT_FDCWD, "/proc/self/fd/N", new_dir, new, AT_SYMLINK_FOLLOW)`:
/// a new name for the object behind `fd`. Unlike `AT_EMPTY_PATH`, which
/// needs `CAP_DAC_READ_SEARCH`, this works for any caller the source lets
/// link the object (`fs.protected_hardlinks` applies).
pub fn link_fd(fd: BorrowedFd<'_>, new_dir: BorrowedFd<'_>, new: &CStr) -> FsResult<()> {
    let path = proc_path(fd);
    // SAFETY: both names are NUL-terminated.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            path.as_ptr(),
            new_dir.as_raw_fd(),
            new.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })?;
    Ok(())
}

/// `readlinkat(fd, "")`: the target of the symlink `fd` refers to.
pub fn readlink_fd(fd: BorrowedFd<'_>) -> FsResult<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for `buf.len()` bytes and the name is NUL-terminated.
    let n =
        check_size(unsafe { libc::readlinkat(fd.as_raw_fd(), EMPTY.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(n);
    Ok(buf)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`; `u32::MAX` leaves one unchanged.
pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> FsResult<()> {
    // SAFETY: the name is NUL-terminated.
    check(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(())
}

/// `fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW)`.
pub fn fchownat(dirfd: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> FsResult<()> {
    // SAFETY: the name is NUL-terminated.
    check(unsafe { libc::fchownat(dirfd.as_raw_fd(), name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(())
}

/// `chmod(path)`.
pub fn chmod(path: &CStr, mode: u32) -> FsResult<()> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::chmod(path.as_ptr(), mode as libc::mode_t) })?;
    Ok(())
}

/// `utimensat(AT_FDCWD, path, times, 0)`.
pub fn utimens(path: &CStr, times: &[libc::timespec; 2]) -> FsResult<()> {
    // SAFETY: `path` is NUL-terminated and `times` points to two timespecs.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) })?;
    Ok(())
}

/// `fstatvfs`.
pub fn fstatvfs(fd: BorrowedFd<'_>) -> FsResult<libc::statvfs> {
    // SAFETY: `statvfs` is plain old data; all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// `faccessat(AT_FDCWD, path, mask, AT_EACCESS)`: checked with the
/// thread's filesystem ids (without `AT_EACCESS` the kernel would use the
/// real ids, root's).
pub fn access(path: &CStr, mask: i32) -> FsResult<()> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), mask, libc::AT_EACCESS) })?;
    Ok(())
}

/// `getxattr(path, name)` into `buf` (size 0 asks for the length).
pub fn getxattr(path: &CStr, name: &CStr, buf: &mut [u8]) -> FsResult<usize> {
    // SAFETY: the strings are NUL-terminated; `buf` is writable for its length.
    check_size(unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// `setxattr(path, name, value, flags)`.
pub fn setxattr(path: &CStr, name: &CStr, value: &[u8], flags: i32) -> FsResult<()> {
    // SAFETY: the strings are NUL-terminated; `value` is readable for its length.
    check(unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), flags) })?;
    Ok(())
}

/// `listxattr(path)` into `buf` (size 0 asks for the length).
pub fn listxattr(path: &CStr, buf: &mut [u8]) -> FsResult<usize> {
    // SAFETY: the path is NUL-terminated; `buf` is writable for its length.
    check_size(unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// `removexattr(path, name)`.
pub fn removexattr(path: &CStr, name: &CStr) -> FsResult<()> {
    // SAFETY: the strings are NUL-terminated.
    check(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) })?;
    Ok(())
}

/// One directory entry as `getdents64` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawDirent {
    /// The inode number in the source.
    pub ino: u64,
    /// The offset of the next entry (what to seek to to resume after this one).
    pub next_off: i64,
    /// `DT_*` type.
    pub dtype: u8,
    /// The name.
    pub name: Vec<u8>,
}

/// Seeks `fd` (a directory opened for reading) to `offset` and reads one
/// batch of entries with `getdents64`; an empty result means end of directory.
pub fn read_dir_batch(fd: BorrowedFd<'_>, offset: i64, buf: &mut [u8]) -> FsResult<Vec<RawDirent>> {
    lseek(fd, offset, libc::SEEK_SET)?;
    // SAFETY: `buf` is writable for `buf.len()` bytes; getdents64 writes at most that many.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd() as libc::c_long,
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(FsError::last_os_error());
    }
    let n = n as usize;
    let mut out = Vec::new();
    let mut pos = 0;
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    while pos + 19 <= n {
        let ino = u64::from_ne_bytes(buf[pos..pos + 8].try_into().expect("8 bytes"));
        let next_off = i64::from_ne_bytes(buf[pos + 8..pos + 16].try_into().expect("8 bytes"));
        let reclen = u16::from_ne_bytes(buf[pos + 16..pos + 18].try_into().expect("2 bytes")) as usize;
        let dtype = buf[pos + 18];
        if reclen == 0 || pos + reclen > n {
            break;
        }
        let name_bytes = &buf[pos + 19..pos + reclen];
        let len = name_bytes.iter().position(|&b| b == 0).unwrap_or(name_bytes.len());
        out.push(RawDirent {
            ino,
            next_off,
            dtype,
            name: name_bytes[..len].to_vec(),
        });
        pos += reclen;
    }
    Ok(out)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> u64 {
    let Some(rl) = nofile_rlimit() else { return 1024 };
    if rl.rlim_cur < rl.rlim_max {
        let want = libc::rlimit {
            rlim_cur: rl.rlim_max,
            rlim_max: rl.rlim_max,
        };
        // SAFETY: `want` is a valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return want.rlim_cur;
        }
    }
    rl.rlim_cur
}

/// Sets the process umask to 0: the kernel has already applied the caller's
/// umask to the modes rcufs receives.
pub fn clear_umask() {
    // SAFETY: `umask` only sets the process file mode creation mask.
    unsafe { libc::umask(0) };
}

/// Whether the process runs with effective uid 0.
pub fn is_root() -> bool {
    // SAFETY: `geteuid` cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The raw descriptor number (for logs).
pub fn raw(fd: BorrowedFd<'_>) -> RawFd {
    fd.as_raw_fd()
}

/// `mount(source, target, fstype, flags, data)`.
pub fn mount(source: &CStr, target: &CStr, fstype: &CStr, flags: libc::c_ulong, data: &CStr) -> FsResult<()> {
    // SAFETY: all strings are NUL-terminated; `data` is a string, as FUSE expects.
    check(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    })?;
    Ok(())
}

/// `umount2(target, flags)`.
pub fn umount(target: &CStr, flags: i32) -> FsResult<()> {
    // SAFETY: `target` is NUL-terminated.
    check(unsafe { libc::umount2(target.as_ptr(), flags) })?;
    Ok(())
}

/// `faccessat2(fd, "", mode, AT_EACCESS | AT_EMPTY_PATH)`: whether the
/// calling thread, under its current filesystem credentials, may access the
/// object behind `fd` with `mode` (`R_OK`, `W_OK`, `X_OK`). Kernels before
/// 5.8 lack `faccessat2`; there the same check goes through the
/// `/proc/self/fd` link with `faccessat(AT_EACCESS)`.
pub fn access_fd(fd: BorrowedFd<'_>, mode: i32) -> FsResult<()> {
    // SAFETY: the path is a NUL-terminated empty string; the descriptor is
    // kept open by the caller; faccessat2 writes no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_raw_fd() as libc::c_long,
            EMPTY.as_ptr(),
            mode as libc::c_long,
            (libc::AT_EACCESS | libc::AT_EMPTY_PATH) as libc::c_long,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = FsError::last_os_error();
    if e.errno() != libc::ENOSYS {
        return Err(e);
    }
    let path = proc_path(fd);
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), mode, libc::AT_EACCESS) })?;
    Ok(())
}

/// Whether the file behind `fd` (an open descriptor, not `O_PATH`) is
/// append-only (`chattr +a`): as `statx`'s `STATX_ATTR_APPEND` says where
/// the filesystem reports that attribute there, and otherwise as
/// `FS_IOC_GETFLAGS` does; `false` where the filesystem keeps neither.
pub fn append_only(fd: BorrowedFd<'_>) -> FsResult<bool> {
    const FS_APPEND_FL: libc::c_long = 0x20;
    let append = libc::STATX_ATTR_APPEND as u64;
    // SAFETY: `statx` is plain old data; all-zero bytes are a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_SYNC_AS_STAT;
    // SAFETY: the path is a NUL-terminated empty string; `stx` is a valid,
    // writable `struct statx`; the descriptor is kept open by the caller.
    check(unsafe { libc::statx(fd.as_raw_fd(), EMPTY.as_ptr(), flags, 0, &mut stx) })?;
    if stx.stx_attributes_mask & append != 0 {
        return Ok(stx.stx_attributes & append != 0);
    }
    let mut fl: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one `long` into `fl`; the descriptor
    // is kept open by the caller.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut fl) };
    if r != 0 {
        let e = FsError::last_os_error();
        // No inode flags on this filesystem.
        if matches!(e.errno(), libc::ENOTTY | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS) {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(fl & FS_APPEND_FL != 0)
}

/// The lowest free descriptor number (the number the next open would get),
/// found by duplicating `fd` and closing the duplicate.
pub fn lowest_free_fd(fd: BorrowedFd<'_>) -> FsResult<RawFd> {
    // SAFETY: F_DUPFD_CLOEXEC only duplicates a descriptor the caller keeps open.
    let dup = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: `dup` is a new descriptor that only this function owns.
    unsafe { libc::close(dup) };
    Ok(dup)
}

/// The soft `RLIMIT_NOFILE` (1024 if it cannot be read).
pub fn nofile_limit() -> u64 {
    nofile_rlimit().map_or(1024, |rl| rl.rlim_cur)
}

/// `getrlimit(RLIMIT_NOFILE)`.
fn nofile_rlimit() -> Option<libc::rlimit> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is writable.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0).then_some(rl)
}

/// Sets the calling thread's filesystem uid (the raw system call, which
/// changes only this thread; the kernel reports no error, so the result is
/// read back with an invalid id, which changes nothing).
pub fn set_thread_fsuid(uid: u32) -> FsResult<()> {
    // SAFETY: setfsuid takes a plain integer and changes only the calling
    // thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) };
    // SAFETY: as above; -1 is never a valid id, so this only reads.
    let now = unsafe { libc::syscall(libc::SYS_setfsuid, -1 as libc::c_long) } as u32;
    if now == uid { Ok(()) } else { Err(FsError::PERM) }
}

/// Sets the calling thread's filesystem gid (see [`set_thread_fsuid`]).
pub fn set_thread_fsgid(gid: u32) -> FsResult<()> {
    // SAFETY: setfsgid takes a plain integer and changes only the calling
    // thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) };
    // SAFETY: as above; -1 is never a valid id, so this only reads.
    let now = unsafe { libc::syscall(libc::SYS_setfsgid, -1 as libc::c_long) } as u32;
    if now == gid { Ok(()) } else { Err(FsError::PERM) }
}

/// Sets the calling thread's supplementary groups. The raw system call
/// changes only this thread; glibc's `setgroups` changes every thread of
/// the process (it broadcasts the change, as POSIX wants).
pub fn set_thread_groups(groups: &[u32]) -> FsResult<()> {
    // SAFETY: `groups` is a live slice of `groups.len()` gid_t values, which
    // the kernel only reads.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len() as libc::c_long, groups.as_ptr()) };
    if r < 0 { Err(FsError::last_os_error()) } else { Ok(()) }
}

/// The calling thread's supplementary groups.
pub fn thread_groups() -> FsResult<Vec<u32>> {
    // SAFETY: a size of 0 only asks for the count.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, 0 as libc::c_long, std::ptr::null_mut::<u32>()) };
    if n < 0 {
        return Err(FsError::last_os_error());
    }
    let mut groups = vec![0u32; n as usize];
    // SAFETY: `groups` has room for `n` gid_t values.
    let m = unsafe { libc::syscall(libc::SYS_getgroups, n, groups.as_mut_ptr()) };
    if m < 0 {
        return Err(FsError::last_os_error());
    }
    groups.truncate(m as usize);
    Ok(groups)
}

/// Gives the calling thread its own umask, working directory and root
/// (`unshare(CLONE_FS)`), so that [`set_thread_umask`] changes this thread only.
pub fn unshare_fs() -> FsResult<()> {
    // SAFETY: unshare takes a flag word; CLONE_FS only copies the thread's fs_struct.
    check(unsafe { libc::unshare(libc::CLONE_FS) })?;
    Ok(())
}

/// Sets the umask (of this thread alone after [`unshare_fs`]); returns the old one.
pub fn set_thread_umask(mask: u32) -> u32 {
    // SAFETY: `umask` only sets the file mode creation mask.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (two of them for version 3).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// `CAP_FSETID`: keeps setuid/setgid bits on write.
pub const CAP_FSETID: u32 = 4;

/// `CAP_SYS_ADMIN`: among others, sees `trusted.*` attributes.
pub const CAP_SYS_ADMIN: u32 = 21;

/// `CAP_SYS_RESOURCE`: among others, writes past disk quotas and into the
/// blocks a filesystem reserves for root.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// Turns capability `cap` on or off in the calling thread's effective set
/// (raw `capget`/`capset`, which act on this thread only); returns whether
/// it was on before. Turning on needs it in the permitted set.
pub fn set_thread_effective_cap(cap: u32, on: bool) -> FsResult<bool> {
    let mut head = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: `head` is a valid header and `data` has the two elements
    // version 3 needs; the kernel writes only into them.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut head as *mut CapHeader, data.as_mut_ptr()) };
    if r < 0 {
        return Err(FsError::last_os_error());
    }
    let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
    let was = data[word].effective & bit != 0;
    if was == on {
        return Ok(was);
    }
    if on {
        data[word].effective |= bit;
    } else {
        data[word].effective &= !bit;
    }
    head.pid = 0;
    // SAFETY: as above; the kernel only reads `head` and `data`.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut head as *mut CapHeader, data.as_ptr()) };
    if r < 0 {
        return Err(FsError::last_os_error());
    }
    Ok(was)
}

/// The mount flags (`ST_NOEXEC`, `ST_NOSUID`, ...) of the filesystem
/// holding `path` (`statvfs`).
pub fn mount_flags(path: &std::ffi::CStr) -> FsResult<u64> {
    // SAFETY: statvfs is plain old data; all zeros is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a valid, writable
    // statvfs; the call only writes it.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(FsError::last_os_error());
    }
    Ok(st.f_flag as u64)
}

/// The mount flags (`ST_NOEXEC`, `ST_NOSUID`, ...) and the `statfs` type
/// of the filesystem that `name` under `dir` leads to (a mount point's
/// name: the filesystem mounted there), without following a symbolic link.
pub fn mount_flags_at(dir: BorrowedFd<'_>, name: &std::ffi::CStr) -> FsResult<MountOf> {
    // `fstatfs` works on an `O_PATH` descriptor since Linux 3.12.
    let fd = openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
    // SAFETY: `statfs` is plain old data; all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable and `fd` open.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok(MountOf {
        // The flags through `fstatvfs` (libc's `statfs` does not show
        // `f_flags`).
        flags: fstatvfs(fd.as_fd())?.f_flag as u64,
        f_type: st.f_type as i64,
        // 0 where the kernel cannot tell it (before Linux 5.8).
        mount_id: statx_mount_id_of(fd.as_raw_fd(), EMPTY, libc::STATX_MNT_ID).unwrap_or(0),
    })
}

/// What [`mount_flags_at`] tells of the mount a name is on.
#[derive(Clone, Copy, Debug)]
pub struct MountOf {
    /// `statvfs` flags (`ST_NOEXEC`, ...).
    pub flags: u64,
    /// The `statfs` type.
    pub f_type: i64,
    /// The mount's id as `/proc/self/mountinfo` shows it (0: unknown).
    pub mount_id: u64,
}

/// The effective gid of the process.
pub fn egid() -> u32 {
    // SAFETY: `getegid` cannot fail and touches no memory.
    unsafe { libc::getegid() }
}

/// The effective uid of the process.
pub fn euid() -> u32 {
    // SAFETY: `geteuid` cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    /// A handle's mount id is the mount's unique id (which the mount watch
    /// and `statx` use), and the listing of mounts holds it.
    #[test]
    fn a_handles_mount_id_is_the_unique_one() {
        let dir = tempfile::tempdir().unwrap();
        let c = cstr(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        let fd = open_path(&c, libc::O_PATH | libc::O_DIRECTORY).unwrap();
        let (_, id) = name_to_handle_at(fd.as_fd(), EMPTY, libc::AT_EMPTY_PATH).unwrap();
        let unique = mount_id_unique_at(fd.as_fd(), EMPTY).unwrap();
        assert_eq!(id, unique, "AT_HANDLE_MNT_ID_UNIQUE (Linux 6.12) on this machine");
        let ids = listmount().unwrap();
        assert!(ids.contains(&unique), "{unique:#x} not in {ids:x?}");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:x?}");
    }
}
