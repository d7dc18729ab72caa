//! Extended attributes: passed to the source as the caller, except the
//! `user.rcufs.` names, which are the mount's own controls and never reach
//! the source (`user.rcufs.drop`, `user.rcufs.warm`, `user.rcufs.stats`),
//! and `trusted.*` names, hidden from callers without `CAP_SYS_ADMIN`.

use super::*;

impl Fs {
    fn xattr_path(&self, inode: &Inode) -> FsResult<(Arc<OwnedFd>, std::ffi::CString)> {
        let fd = self.table.path_fd(inode)?;
        let p = sys::proc_path(fd.as_fd());
        Ok((fd, p))
    }

    /// SETXATTR. `user.rcufs.drop` drops the directory's caches,
    /// `user.rcufs.warm` queues a walk that fills them (`fs/warm.rs`); other
    /// `user.rcufs.` names are refused; everything else goes to the source.
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32, caller: Caller) -> FsResult<Vec<Inval>> {
        if let Some(rest) = name.strip_prefix(protocol::XATTR_PREFIX.as_bytes()) {
            if rest == b"warm" {
                self.request_warm(ino, value, caller)?;
                return Ok(Vec::new());
            }
            if rest != b"drop" {
                return Err(FsError::new(libc::ENOTSUP));
            }
            let mode = DropMode::from_xattr_value(value).ok_or(FsError::INVAL)?;
            self.may_drop(ino, caller)?;
            self.catch_up_with_source();
            return Ok(self.drop_dir(ino, mode, caller)?.inval);
        }
        let inode = self.inode(ino)?;
        if inode.kind == libc::S_IFLNK {
            return Err(FsError::PERM);
        }
        let (_fd, path) = self.xattr_path(&inode)?;
        let _g = self.creds.act_as(caller)?;
        sys::setxattr(&path, &cstr(name)?, value, flags)?;
        xattr_changed(&inode);
        Ok(Vec::new())
    }

    fn sized(value: Vec<u8>, size: u32) -> FsResult<XattrReply> {
        if size == 0 {
            Ok(XattrReply::Size(value.len() as u32))
        } else if value.len() > size as usize {
            Err(FsError::RANGE)
        } else {
            Ok(XattrReply::Data(value))
        }
    }

    /// GETXATTR, as the caller. `user.rcufs.stats` is the mount's
    /// statistics as JSON, for root and the mount's owner only (`EACCES`).
    pub fn getxattr(&self, ino: u64, name: &[u8], size: u32, caller: Caller) -> FsResult<XattrReply> {
        let inode = self.inode(ino)?;
        if let Some(rest) = name.strip_prefix(protocol::XATTR_PREFIX.as_bytes()) {
            if rest == b"stats" {
                if caller.uid != 0 && caller.uid != sys::euid() {
                    return Err(FsError::new(libc::EACCES));
                }
                let json = serde_json::to_vec(&self.stats_json()).map_err(|_| FsError::IO)?;
                return Self::sized(json, size);
            }
            return Err(FsError::NODATA);
        }
        if inode.kind == libc::S_IFLNK {
            return Err(FsError::NODATA);
        }
        let (_fd, path) = self.xattr_path(&inode)?;
        let cname = cstr(name)?;
        // Reading an ACL needs no permission of its own, and the kernel
        // asks for it at every permission check of a non-owner (it forgets
        // ACLs whenever it refreshes attributes): no identity switch there.
        let _g = if name.starts_with(b"system.posix_acl_") {
            None
        } else {
            Some(self.creds.act_as(caller)?)
        };
        if size == 0 {
            let n = sys::getxattr(&path, &cname, &mut [])?;
            return Ok(XattrReply::Size(n as u32));
        }
        let mut buf = vec![0u8; size as usize];
        let n = sys::getxattr(&path, &cname, &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    /// LISTXATTR, as the caller, without the `user.rcufs.` names, and
    /// without `trusted.*` names unless the caller has `CAP_SYS_ADMIN` (the
    /// source would hide them from the caller, but not from the daemon:
    /// acting as the caller keeps `CAP_SYS_ADMIN`).
    pub fn listxattr(&self, ino: u64, size: u32, caller: Caller) -> FsResult<XattrReply> {
        let inode = self.inode(ino)?;
        if inode.kind == libc::S_IFLNK {
            return Self::sized(Vec::new(), size);
        }
        let (_fd, path) = self.xattr_path(&inode)?;
        let hide_trusted = !self.creds.caller_is_admin(caller);
        let g = self.creds.act_as(caller)?;
        let mut list = loop {
            let n = sys::listxattr(&path, &mut [])?;
            let mut buf = vec![0u8; n + 64];
            match sys::listxattr(&path, &mut buf) {
                Ok(m) => {
                    buf.truncate(m);
                    break buf;
                }
                Err(e) if e.errno() == libc::ERANGE => continue,
                Err(e) => return Err(e),
            }
        };
        drop(g);
        let prefix = protocol::XATTR_PREFIX.as_bytes();
        let mut out = Vec::with_capacity(list.len());
        for n in list
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty() && !n.starts_with(prefix))
            .filter(|n| !(hide_trusted && n.starts_with(b"trusted.")))
        {
            out.extend_from_slice(n);
            out.push(0);
        }
        list.clear();
        Self::sized(out, size)
    }

    /// REMOVEXATTR, as the caller.
    pub fn removexattr(&self, ino: u64, name: &[u8], caller: Caller) -> FsResult<()> {
        if name.starts_with(protocol::XATTR_PREFIX.as_bytes()) {
            return Err(FsError::NODATA);
        }
        let inode = self.inode(ino)?;
        if inode.kind == libc::S_IFLNK {
            return Err(FsError::NODATA);
        }
        let (_fd, path) = self.xattr_path(&inode)?;
        let _g = self.creds.act_as(caller)?;
        sys::removexattr(&path, &cstr(name)?)?;
        xattr_changed(&inode);
        Ok(())
    }
}

/// After a change of `inode`'s extended attributes in the source: its
/// cached attributes are out of date (the ctime, and the mode when an
/// access ACL changed it). The watch skips the daemon's own events, and
/// `ttl` would keep them to the end of the interval, so they expire here.
fn xattr_changed(inode: &Inode) {
    inode.expire_attr();
}
