//! The filesystem's one error type and its errno mapping.
//!
//! Every operation of [`crate::fs::Fs`] returns `Result<T, FsError>`; the
//! adapter in `fuse.rs` answers the kernel with [`FsError::errno`]. An error
//! that comes from the source filesystem keeps the source's errno, so callers
//! of the mount see exactly what they would see on the source. Errors rcufs
//! makes up itself (a bad drop mode, an unknown ioctl) use the errno the
//! kernel would use for the same mistake.
//!
//! [`FsError::is_expected`] separates the errnos that are part of normal
//! operation (a missing name, an existing name, a missing attribute) from the
//! ones that deserve a warning, so that the adapter logs the former at debug.

use std::io;

/// An errno, positive, never zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{msg} (errno {code})", msg = io::Error::from_raw_os_error(*.0), code = .0)]
pub struct FsError(i32);

/// The result of a filesystem operation.
pub type FsResult<T> = Result<T, FsError>;

impl FsError {
    /// An error with errno `errno`; zero or negative values become `EIO`.
    pub fn new(errno: i32) -> Self {
        if errno > 0 { Self(errno) } else { Self(libc::EIO) }
    }

    /// The errno to answer the kernel with.
    pub fn errno(self) -> i32 {
        self.0
    }

    /// The errno of the calling thread's last failed libc call.
    pub fn last_os_error() -> Self {
        io::Error::last_os_error().into()
    }

    /// Whether this errno is a normal answer (logged at debug) rather than a
    /// sign that something went wrong (logged at warn).
    pub fn is_expected(self) -> bool {
        matches!(
            self.0,
            libc::ENOENT
                | libc::EEXIST
                | libc::ENODATA
                | libc::ENOTEMPTY
                | libc::ENOTDIR
                | libc::EISDIR
                | libc::EACCES
                | libc::EPERM
                | libc::ENOTTY
                | libc::ERANGE
                | libc::EXDEV
                | libc::ENOTSUP
                | libc::ENXIO
                | libc::EINVAL
                | libc::ELOOP
                | libc::ENAMETOOLONG
                | libc::EAGAIN
        )
    }

    /// `ENOENT`.
    pub const NOENT: Self = Self(libc::ENOENT);
    /// `EINVAL`.
    pub const INVAL: Self = Self(libc::EINVAL);
    /// `EBADF`.
    pub const BADF: Self = Self(libc::EBADF);
    /// `ENOTDIR`.
    pub const NOTDIR: Self = Self(libc::ENOTDIR);
    /// `EPERM`.
    pub const PERM: Self = Self(libc::EPERM);
    /// `ENOTTY`.
    pub const NOTTY: Self = Self(libc::ENOTTY);
    /// `ENODATA`.
    pub const NODATA: Self = Self(libc::ENODATA);
    /// `ERANGE`.
    pub const RANGE: Self = Self(libc::ERANGE);
    /// `ESTALE`.
    pub const STALE: Self = Self(libc::ESTALE);
    /// `EIO`.
    pub const IO: Self = Self(libc::EIO);
}

impl From<io::Error> for FsError {
    fn from(e: io::Error) -> Self {
        Self::new(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<std::ffi::NulError> for FsError {
    fn from(_: std::ffi::NulError) -> Self {
        Self::INVAL
    }
}

impl From<FsError> for io::Error {
    fn from(e: FsError) -> Self {
        io::Error::from_raw_os_error(e.errno())
    }
}
