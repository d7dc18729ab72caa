//! Thin wrappers over the system calls the tests need that `std` does not
//! offer (extended attributes, the drop ioctl, renameat2, fallocate, lseek
//! with SEEK_DATA/SEEK_HOLE, copy_file_range, mmap, running as another user).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use fuse_fs::protocol::{DropArgs, DropMode, IOC_DROP};

pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("test paths have no NUL")
}

/// Turns a libc return value into a `Result`, reading errno on -1.
fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The errno of a failed call, `None` if it succeeded.
pub fn errno<T>(r: &io::Result<T>) -> Option<i32> {
    r.as_ref().err().map(|e| e.raw_os_error().unwrap_or(-1))
}

pub fn getxattr(p: &Path, name: &str) -> io::Result<Vec<u8>> {
    let (c, n) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; 65536];
    // SAFETY: both strings are NUL-terminated and `buf` is writable for its length.
    let len = check(unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) } as _)?;
    buf.truncate(len as usize);
    Ok(buf)
}

pub fn setxattr(p: &Path, name: &str, value: &[u8], flags: i32) -> io::Result<()> {
    let (c, n) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: both strings are NUL-terminated and `value` is readable for its length.
    check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) } as _)?;
    Ok(())
}

pub fn listxattr(p: &Path) -> io::Result<Vec<String>> {
    let c = cpath(p);
    let mut buf = vec![0u8; 65536];
    // SAFETY: the path is NUL-terminated and `buf` is writable for its length.
    let len = check(unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) } as _)?;
    buf.truncate(len as usize);
    Ok(buf
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

pub fn removexattr(p: &Path, name: &str) -> io::Result<()> {
    let (c, n) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) } as _)?;
    Ok(())
}

/// Issues `cmd` with a 64-byte in/out buffer on `fd`.
pub fn ioctl64(fd: RawFd, cmd: u32, buf: &mut [u8; 64]) -> io::Result<()> {
    // SAFETY: every command the tests send encodes a size of at most 64
    // bytes, so the kernel touches at most the 64 writable bytes of `buf`.
    check(unsafe { libc::ioctl(fd, cmd as _, buf.as_mut_ptr()) } as _)?;
    Ok(())
}

/// Sends the drop ioctl with `args` on `fd`, returning the filled-in struct.
pub fn ioctl_drop(fd: RawFd, args: DropArgs) -> io::Result<DropArgs> {
    let mut buf = args.to_bytes();
    ioctl64(fd, IOC_DROP, &mut buf)?;
    Ok(DropArgs::from_bytes(&buf).expect("64 bytes"))
}

/// Opens `dir` and drops it with `mode`.
pub fn drop_dir(dir: &Path, mode: DropMode) -> io::Result<DropArgs> {
    let f = std::fs::File::open(dir)?;
    ioctl_drop(f.as_raw_fd(), DropArgs::request(mode))
}

/// An ioctl command number built as Linux's `_IOC`.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: u32) -> u32 {
    (dir << 30) | (size << 16) | ((ty as u32) << 8) | nr as u32
}

pub fn renameat2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let (f, t) = (cpath(from), cpath(to));
    // SAFETY: both paths are NUL-terminated; AT_FDCWD makes them relative to the cwd.
    check(unsafe { libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), flags) } as _)?;
    Ok(())
}

pub fn mkfifo(p: &Path, mode: u32) -> io::Result<()> {
    let c = cpath(p);
    // SAFETY: the path is NUL-terminated; mknod of a FIFO needs no device number.
    check(unsafe { libc::mknod(c.as_ptr(), libc::S_IFIFO | mode, 0) } as _)?;
    Ok(())
}

pub fn fallocate(f: &std::fs::File, mode: i32, offset: i64, len: i64) -> io::Result<()> {
    // SAFETY: `f` is an open descriptor for the duration of the call.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) } as _)?;
    Ok(())
}

pub fn lseek(f: &std::fs::File, offset: i64, whence: i32) -> io::Result<i64> {
    // SAFETY: `f` is an open descriptor for the duration of the call.
    check(unsafe { libc::lseek(f.as_raw_fd(), offset, whence) } as _)
}

pub fn copy_file_range(
    from: &std::fs::File,
    off_in: i64,
    to: &std::fs::File,
    off_out: i64,
    len: usize,
) -> io::Result<usize> {
    let (mut i, mut o) = (off_in, off_out);
    // SAFETY: both descriptors are open and the offsets are live locals.
    let n = check(unsafe { libc::copy_file_range(from.as_raw_fd(), &mut i, to.as_raw_fd(), &mut o, len, 0) } as _)?;
    Ok(n as usize)
}

pub fn statvfs(p: &Path) -> io::Result<libc::statvfs> {
    let c = cpath(p);
    // SAFETY: all-zero bytes are a valid statvfs (plain integers).
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the path is NUL-terminated and `s` is a live, writable statvfs.
    check(unsafe { libc::statvfs(c.as_ptr(), &mut s) } as _)?;
    Ok(s)
}

pub fn access(p: &Path, mode: i32) -> io::Result<()> {
    let c = cpath(p);
    // SAFETY: the path is NUL-terminated.
    check(unsafe { libc::access(c.as_ptr(), mode) } as _)?;
    Ok(())
}

/// Maps `len` bytes of `f` read-only and returns a copy of them.
pub fn mmap_read(f: &std::fs::File, len: usize) -> io::Result<Vec<u8>> {
    // SAFETY: a fresh private read-only mapping of an open file; no Rust
    // object aliases it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the mapping is `len` readable bytes and lives until munmap below.
    let copy = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec();
    // SAFETY: `p` and `len` are exactly the mapping made above, not used after this.
    unsafe { libc::munmap(p, len) };
    Ok(copy)
}

/// Runs `f` in a forked child that has switched to `uid`/`gid`, and returns
/// what it sent back: 64 bytes on success or an errno.
///
/// The child of a multi-threaded process may only call async-signal-safe
/// functions, so `f` must do nothing but system calls on data prepared
/// before the fork (no allocation, no locks, no printing).
pub fn as_user(uid: u32, gid: u32, f: impl FnOnce() -> Result<[u8; 64], i32>) -> Result<[u8; 64], i32> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a live array of two descriptors for pipe2 to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the child below only makes system calls (see the doc comment)
    // and leaves with _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: async-signal-safe system calls on plain data; the child ends in _exit.
        unsafe {
            let mut msg = [0u8; 68];
            let ok = libc::setgroups(0, std::ptr::null()) == 0 && libc::setgid(gid) == 0 && libc::setuid(uid) == 0;
            let result = if ok { f() } else { Err(*libc::__errno_location()) };
            match result {
                Ok(bytes) => msg[4..].copy_from_slice(&bytes),
                Err(e) => msg[..4].copy_from_slice(&e.to_ne_bytes()),
            }
            libc::write(wr, msg.as_ptr().cast(), msg.len());
            libc::_exit(0);
        }
    }
    // SAFETY: `wr` is our copy of the pipe's write end, closed once.
    unsafe { libc::close(wr) };
    let mut msg = [0u8; 68];
    let mut got = 0;
    while got < msg.len() {
        // SAFETY: reads into the unfilled tail of `msg`.
        let n = unsafe { libc::read(rd, msg[got..].as_mut_ptr().cast(), msg.len() - got) };
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    let mut status = 0;
    // SAFETY: `rd` is our read end, closed once; `status` is a live int.
    unsafe {
        libc::close(rd);
        libc::waitpid(pid, &mut status, 0);
    }
    assert_eq!(got, msg.len(), "the child sent no answer (wait status {status})");
    let errno = i32::from_ne_bytes(msg[..4].try_into().unwrap());
    if errno != 0 {
        return Err(errno);
    }
    Ok(msg[4..].try_into().unwrap())
}

/// In a child running as `uid`/`gid`: opens `dir` and sends the drop ioctl
/// with `args`.
pub fn drop_as(uid: u32, gid: u32, dir: &Path, args: DropArgs) -> Result<DropArgs, i32> {
    let c = cpath(dir);
    let bytes = args.to_bytes();
    as_user(uid, gid, move || {
        let mut buf = bytes;
        // SAFETY: `c` is NUL-terminated; plain system calls (see as_user).
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
            if fd < 0 {
                return Err(*libc::__errno_location());
            }
            let rc = libc::ioctl(fd, IOC_DROP as _, buf.as_mut_ptr());
            let e = *libc::__errno_location();
            libc::close(fd);
            if rc < 0 { Err(e) } else { Ok(buf) }
        }
    })
    .map(|b| DropArgs::from_bytes(&b).expect("64 bytes"))
}

/// In a child running as `uid`/`gid`: sets the extended attribute.
pub fn setxattr_as(uid: u32, gid: u32, p: &Path, name: &str, value: &[u8]) -> Result<(), i32> {
    let (c, n, v) = (cpath(p), CString::new(name).unwrap(), value.to_vec());
    as_user(uid, gid, move || {
        // SAFETY: the strings are NUL-terminated and `v` is readable; plain system calls.
        unsafe {
            if libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) < 0 {
                Err(*libc::__errno_location())
            } else {
                Ok([0; 64])
            }
        }
    })
    .map(|_| ())
}
