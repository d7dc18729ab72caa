//! The handle index: the live inodes by kernel file handle, the key the
//! source watcher's events name objects by (`fs/watched.rs`). Kept only
//! with the watch ([`InodeTable::index_handles`]).

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{Backing, HandleShard, Inode, InodeTable, ROOT_INO, SHARDS};
use crate::error::{FsError, FsResult};
use crate::sys;

/// The handle index's key: the filesystem id, the handle type and the
/// handle bytes, packed (at most 12 + `MAX_HANDLE_SZ` bytes).
fn pack_handle(fsid: u64, handle_type: i32, bytes: &[u8], out: &mut [u8; 12 + sys::MAX_HANDLE_SZ]) -> usize {
    let len = bytes.len().min(sys::MAX_HANDLE_SZ);
    out[..8].copy_from_slice(&fsid.to_ne_bytes());
    out[8..12].copy_from_slice(&handle_type.to_ne_bytes());
    out[12..12 + len].copy_from_slice(&bytes[..len]);
    12 + len
}

pub(super) fn handle_shard(packed: &[u8]) -> usize {
    // The last bytes of a handle vary most (inode number, generation).
    let tail = &packed[packed.len().saturating_sub(8)..];
    let mut h = 0u64;
    for &b in tail {
        h = h.rotate_left(7) ^ u64::from(b);
    }
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS
}

impl InodeTable {
    /// Turns on the handle index (before any lookup): from now on every
    /// inode with a kernel file handle can be found by it
    /// ([`find_handle`](Self::find_handle)), the root included (its handle
    /// is taken from `root`'s descriptor). Costs one map entry per live
    /// inode. Fails if the root has no file handle.
    pub fn index_handles(&mut self, root: &Inode) -> FsResult<()> {
        let Backing::Pinned(fd) = &root.backing else {
            return Err(FsError::INVAL);
        };
        let (handle, _mount_id) = sys::name_to_handle_at(fd.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH)?;
        let (fsid, _) = sys::fs_ids(fd.as_fd())?;
        let mut buf = [0u8; 12 + sys::MAX_HANDLE_SZ];
        let n = pack_handle(fsid, handle.handle_type(), handle.bytes(), &mut buf);
        let index: Box<[HandleShard]> = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        let root_arc = self.get(ROOT_INO)?;
        index[handle_shard(&buf[..n])]
            .lock()
            .insert(buf[..n].into(), Arc::downgrade(&root_arc));
        let _ = root_arc.hkey.set(buf[..n].into());
        self.by_handle = Some(index);
        Ok(())
    }

    /// Lists `inode` in the handle index, if the table keeps one (`intern`
    /// calls it under the key shard's lock, before the key entry is made).
    /// An inode that cannot be listed (no file handle) is counted in
    /// [`unindexed`](Self::unindexed).
    pub(super) fn index_handle(&self, inode: &Arc<Inode>) {
        let Some(index) = &self.by_handle else {
            return;
        };
        let fsid = match &inode.backing {
            Backing::Handle { mount, .. } => Some(mount.fsid),
            _ => None,
        };
        let (Backing::Handle { handle, .. }, Some(fsid)) = (&inode.backing, fsid) else {
            self.unindexed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut buf = [0u8; 12 + sys::MAX_HANDLE_SZ];
        let n = pack_handle(fsid, handle.handle_type(), handle.bytes(), &mut buf);
        let key: Box<[u8]> = buf[..n].into();
        if inode.hkey.get().is_some() {
            return;
        }
        index[handle_shard(&key)]
            .lock()
            .insert(key.clone(), Arc::downgrade(inode));
        let _ = inode.hkey.set(key);
    }

    /// The key `handle` has in the handle index (see [`Inode::handle_key`]).
    pub fn handle_key(fsid: u64, handle_type: i32, bytes: &[u8]) -> Box<[u8]> {
        let mut buf = [0u8; 12 + sys::MAX_HANDLE_SZ];
        let n = pack_handle(fsid, handle_type, bytes, &mut buf);
        buf[..n].into()
    }

    /// The live inode whose source object has this file handle, if any
    /// (the source watcher's lookup: a hash lookup, no system call).
    pub fn find_handle(&self, fsid: u64, handle_type: i32, bytes: &[u8]) -> Option<Arc<Inode>> {
        let index = self.by_handle.as_ref()?;
        if bytes.len() > sys::MAX_HANDLE_SZ {
            return None;
        }
        let mut buf = [0u8; 12 + sys::MAX_HANDLE_SZ];
        let n = pack_handle(fsid, handle_type, bytes, &mut buf);
        let key = &buf[..n];
        index[handle_shard(key)].lock().get(key).and_then(Weak::upgrade)
    }

    /// Entries in the handle index (live or not yet reaped).
    pub fn indexed_handles(&self) -> usize {
        self.by_handle
            .as_ref()
            .map_or(0, |index| index.iter().map(|s| s.lock().len()).sum())
    }
}
