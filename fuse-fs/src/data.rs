//! The data layer: every read of the filesystem goes through here.
//!
//! (This revision does not cache pages yet: reads go to the source. The
//! page-cache-backed version replaces this file.)

use std::os::fd::BorrowedFd;

use crate::error::FsResult;
use crate::sys;

/// Pages and bytes dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct Dropped {
    /// Pages.
    pub pages: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The page cache of the mount.
#[derive(Debug, Default)]
pub struct Data {}

impl Data {
    /// A cache of `budget` bytes.
    pub fn new(_budget: u64) -> Self {
        Self {}
    }

    /// Reads `size` bytes at `offset` of file `id` (open as `fd`).
    pub fn read(&self, _id: u64, fd: BorrowedFd<'_>, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let mut buf = vec![0u8; size as usize];
        let n = sys::pread_full(fd, &mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// `data` was written through at `offset`.
    pub fn wrote(&self, _id: u64, _offset: u64, _data: &[u8]) {}

    /// The file's size changed from `old` to `new` through the mount.
    pub fn resized(&self, _id: u64, _old: u64, _new: u64) {}

    /// Bytes from `offset` on may have changed.
    pub fn invalidate_from(&self, _id: u64, _offset: u64) {}

    /// Bytes `offset..offset+len` may have changed.
    pub fn invalidate_range(&self, _id: u64, _offset: u64, _len: u64) {}

    /// Drops every page of `id`.
    pub fn drop_inode(&self, _id: u64) -> Dropped {
        Dropped::default()
    }

    /// The cache's counters as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({"pages": 0, "bytes_cached": 0, "budget_bytes": 0, "hits": 0, "misses": 0,
            "fills": 0, "evictions": 0})
    }
}
