//! The wire protocol between `rcufs drop`/`rcufs stats` and the mounted
//! filesystem: the directory-drop ioctl and the `user.rcufs.*` extended
//! attributes.
//!
//! FUSE forwards only *restricted* ioctls: the kernel copies exactly
//! `_IOC_SIZE(cmd)` bytes in and out and follows no pointer inside them, so the
//! request is one fixed-size, pointer-free `#[repr(C)]` struct, and the command
//! number carries a magic byte of rcufs's own. The filesystem answers any other
//! command with `ENOTTY`.
//!
//! The drop modes are numbered as the kernel's `drop_caches` and as the
//! directory-level cache cleaning patches (seed 004, "VFS: Directory level
//! cache cleaning"): 1 = page cache, 2 = dentries and inodes, 3 = both.

/// The ioctl magic byte ("type" field of the command number).
pub const IOCTL_MAGIC: u8 = b'R';

/// The version a client writes into [`DropArgs::version`].
pub const DROP_ARGS_VERSION: u32 = 1;

/// The name of the extended attribute that drops a directory's caches when
/// set. Values: `1`, `2`, `3`, `pages`, `dentries`, `all`.
pub const XATTR_DROP: &str = "user.rcufs.drop";

/// The name of the extended attribute that, when set on a directory, makes
/// the filesystem walk that directory's subtree in the source and fill its
/// caches, in the background, within their budgets. Values as for
/// [`XATTR_DROP`]; `EBUSY` while a walk is under way; root and the mount's
/// owner only.
pub const XATTR_WARM: &str = "user.rcufs.warm";

/// The name of the extended attribute whose value is the mount's statistics
/// as JSON.
pub const XATTR_STATS: &str = "user.rcufs.stats";

/// The prefix of every rcufs control attribute. Names under it are never
/// passed to the source and never listed.
pub const XATTR_PREFIX: &str = "user.rcufs.";

/// What a directory drop drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DropMode {
    /// 1: the page cache of every file under the directory.
    Pages = 1,
    /// 2: the dentries (and the inodes they pin) under the directory.
    Dentries = 2,
    /// 3: both.
    All = 3,
}

impl DropMode {
    /// Parses the numeric mode of the ioctl.
    pub fn from_u32(mode: u32) -> Option<Self> {
        match mode {
            1 => Some(Self::Pages),
            2 => Some(Self::Dentries),
            3 => Some(Self::All),
            _ => None,
        }
    }

    /// Parses the value of the `user.rcufs.drop` attribute: `1`, `2`, `3`,
    /// `pages`, `dentries` or `all`, optionally followed by one newline (as
    /// `echo` writes it).
    pub fn from_xattr_value(value: &[u8]) -> Option<Self> {
        let value = value.strip_suffix(b"\n").unwrap_or(value);
        match value {
            b"1" | b"pages" => Some(Self::Pages),
            b"2" | b"dentries" => Some(Self::Dentries),
            b"3" | b"all" => Some(Self::All),
            _ => None,
        }
    }

    /// Whether this mode drops page-cache pages.
    pub fn drops_pages(self) -> bool {
        matches!(self, Self::Pages | Self::All)
    }

    /// Whether this mode drops dentries.
    pub fn drops_dentries(self) -> bool {
        matches!(self, Self::Dentries | Self::All)
    }
}

/// The argument of [`IOC_DROP`]: mode and flags in, counts out.
///
/// The layout is fixed (64 bytes, no padding the compiler chooses, no
/// pointers) because the kernel copies it byte for byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct DropArgs {
    /// In: [`DROP_ARGS_VERSION`].
    pub version: u32,
    /// In: a [`DropMode`] number.
    pub mode: u32,
    /// In: no flags are defined yet; any set bit is `EINVAL`.
    pub flags: u32,
    /// In: zero. Out: how many inodes the drop visited (index entries
    /// walked plus dcache entries seen; saturates), so that its cost can be
    /// checked against the size of the subtree.
    pub visited: u32,
    /// Out: dentries dropped.
    pub dentries_dropped: u64,
    /// Out: page-cache pages dropped.
    pub pages_dropped: u64,
    /// Out: bytes of page cache freed.
    pub bytes_freed: u64,
    /// Out: entries skipped because the caller does not own them (seed 001).
    pub skipped: u64,
    /// Out: dentries that were in use, so only unhashed rather than freed.
    pub busy: u64,
    /// Out: time the drop took inside the filesystem, in nanoseconds.
    pub elapsed_ns: u64,
}

const _: () = assert!(std::mem::size_of::<DropArgs>() == 64);

/// Builds an ioctl command number as Linux's `_IOC` macro does.
const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    const NRSHIFT: u32 = 0;
    const TYPESHIFT: u32 = 8;
    const SIZESHIFT: u32 = 16;
    const DIRSHIFT: u32 = 30;
    (dir << DIRSHIFT) | ((size as u32) << SIZESHIFT) | ((ty as u32) << TYPESHIFT) | ((nr as u32) << NRSHIFT)
}

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `_IOWR('R', 1, struct DropArgs)`: drop the caches under the directory the
/// ioctl is issued on.
pub const IOC_DROP: u32 = ioc(IOC_READ | IOC_WRITE, IOCTL_MAGIC, 1, std::mem::size_of::<DropArgs>());

impl DropArgs {
    /// A request for `mode`.
    pub fn request(mode: DropMode) -> Self {
        Self {
            version: DROP_ARGS_VERSION,
            mode: mode as u32,
            ..Self::default()
        }
    }

    /// The struct as the bytes the kernel copies.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        let words32 = [self.version, self.mode, self.flags, self.visited];
        for (i, w) in words32.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
        }
        let words64 = [
            self.dentries_dropped,
            self.pages_dropped,
            self.bytes_freed,
            self.skipped,
            self.busy,
            self.elapsed_ns,
        ];
        for (i, w) in words64.iter().enumerate() {
            out[16 + i * 8..24 + i * 8].copy_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// Parses the bytes the kernel copied; `None` unless exactly 64 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != 64 {
            return None;
        }
        let u32_at = |i: usize| u32::from_ne_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_ne_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(Self {
            version: u32_at(0),
            mode: u32_at(4),
            flags: u32_at(8),
            visited: u32_at(12),
            dentries_dropped: u64_at(16),
            pages_dropped: u64_at(24),
            bytes_freed: u64_at(32),
            skipped: u64_at(40),
            busy: u64_at(48),
            elapsed_ns: u64_at(56),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_number_matches_the_c_macro() {
        // _IOWR('R', 1, 64 bytes) = (3 << 30) | (64 << 16) | ('R' << 8) | 1.
        assert_eq!(IOC_DROP, 0xC040_5201);
    }

    #[test]
    fn drop_args_round_trip() {
        let args = DropArgs {
            version: 1,
            mode: 3,
            flags: 0,
            visited: 0,
            dentries_dropped: 10,
            pages_dropped: 20,
            bytes_freed: 30,
            skipped: 40,
            busy: 50,
            elapsed_ns: 60,
        };
        assert_eq!(DropArgs::from_bytes(&args.to_bytes()), Some(args));
        assert_eq!(DropArgs::from_bytes(&[0u8; 63]), None);
    }

    #[test]
    fn xattr_values() {
        assert_eq!(DropMode::from_xattr_value(b"3\n"), Some(DropMode::All));
        assert_eq!(DropMode::from_xattr_value(b"pages"), Some(DropMode::Pages));
        assert_eq!(DropMode::from_xattr_value(b"dentries"), Some(DropMode::Dentries));
        assert_eq!(DropMode::from_xattr_value(b"4"), None);
        assert_eq!(DropMode::from_xattr_value(b""), None);
        assert_eq!(DropMode::from_u32(0), None);
    }
}
