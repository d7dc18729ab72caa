//! Directory handles: OPENDIR, READDIR and READDIRPLUS, RELEASEDIR,
//! FSYNCDIR. A handle reads a listing (`listing.rs`) when one is kept or
//! could be read whole, otherwise its own descriptor of the directory.

use std::os::fd::AsFd;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Attr, Caller, Coherence, DirItem, Entry, Fs, Kind};
use crate::error::{FsError, FsResult};
use crate::inode::{Inode, ROOT_INO};
use crate::listing;
use crate::open_files::OpenDir;
use crate::sys;

impl Fs {
    /// OPENDIR, as the caller. With kept listings (`listing.rs`), a fresh
    /// one is served without touching the source (the kernel has checked
    /// the caller's access to the directory, as for a cached lookup);
    /// otherwise the whole listing is read now and the handle reads that.
    pub fn opendir(&self, ino: u64, caller: Caller) -> FsResult<u64> {
        let inode = self.dir(ino)?;
        self.walk_ahead(&inode);
        if self.stamp_checked(&inode)
            && let Some(l) = self.listings.fresh(&inode, self.interval(&inode))
        {
            return Ok(self.dirs.insert(OpenDir {
                inode,
                fd: Mutex::new(None),
                listing: Mutex::new(Some(l)),
                kept: true,
                charge: None,
            }));
        }
        let fd = self.open_inode(&inode, libc::O_RDONLY | libc::O_DIRECTORY, caller)?;
        self.gate.admit_number(fd.as_fd(), caller.uid)?;
        let mut listing = None;
        if self.listings.enabled()
            && let listing::Read::Whole(l) = self.read_listing(fd.as_fd(), &inode)?
        {
            listing = Some(l);
        }
        // A handle that reads a listing needs no descriptor, nor a share
        // of them: only a kept descriptor is charged.
        let (fd, charge) = match listing {
            Some(_) => (None, None),
            None => (Some(fd), self.gate.take_share(caller.uid)?),
        };
        Ok(self.dirs.insert(OpenDir {
            inode,
            fd: Mutex::new(fd),
            charge,
            listing: Mutex::new(listing),
            kept: false,
        }))
    }

    /// Whether `dir`'s kept listing may be compared with its cached stamp:
    /// with the watch a kept listing has no interval, so the stamp is the
    /// source's of now (one `fstat`), and a change the watcher has not
    /// applied yet is not listed stale; false if that `fstat` failed (the
    /// caller then reads the source, which gives the error).
    fn stamp_checked(&self, dir: &Inode) -> bool {
        self.cfg.coherence != Coherence::Watch || dir.listing().is_none() || self.refresh(dir).is_ok()
    }

    /// Before a READDIR from offset 0 of a handle that reads a listing:
    /// makes the handle read the directory's listing of now, not the one
    /// it was opened with, if that one has since been replaced or
    /// forgotten (a handle kept open or rewound across a change). With
    /// `--kernel-cache` such a READDIR may start the kernel's copy of the
    /// listing, which the kernel stamps with the directory's attributes of
    /// now and keeps for every later OPENDIR answered with
    /// `FOPEN_KEEP_CACHE`: an old snapshot there would outlive the change.
    /// (It is also what POSIX asks of `rewinddir`.) The source is read as
    /// the daemon: the handle's OPENDIR checked the caller's access. No
    /// `fstat` here: the kernel stamps its copy with the attributes rcufs
    /// last gave it, and whatever refreshed those past the listing's stamp
    /// (the watcher's event, an OPENDIR's check, an expiry) also made the
    /// listing unservable.
    fn renew_listing(&self, dir: &OpenDir) -> FsResult<()> {
        let Some(held) = dir.listing.lock().clone() else {
            return Ok(());
        };
        let servable = self.listings.servable(&dir.inode, self.interval(&dir.inode));
        if servable.is_some_and(|now| Arc::ptr_eq(&now, &held)) {
            return Ok(());
        }
        let fd = self.table.open(&dir.inode, libc::O_RDONLY | libc::O_DIRECTORY)?;
        if let listing::Read::Whole(l) = self.read_listing(fd.as_fd(), &dir.inode)? {
            self.listings.renewed();
            *dir.listing.lock() = Some(l);
        }
        // Grown past `listing::MAX_ENTRIES`: the handle keeps its snapshot.
        Ok(())
    }

    /// Kernel-cache mode: whether the kernel may cache what it reads of the
    /// directory handle `fh` (`FOPEN_CACHE_DIR`: the handle reads a listing),
    /// and whether it may keep what it cached before (`FOPEN_KEEP_CACHE`: a
    /// kept listing served this OPENDIR, the one the kernel's copy came
    /// from; every OPENDIR that read the source answers without it, so the
    /// kernel drops its copy whenever rcufs's listing was read again).
    pub fn dir_cache_flags(&self, fh: u64) -> (bool, bool) {
        let Ok(dir) = self.dirs.get(fh) else {
            return (false, false);
        };
        let cache = self.cfg.kernel_cache && dir.listing.lock().is_some();
        (cache, cache && dir.kept)
    }

    /// READDIR (`plus` = READDIRPLUS). `sink` gets each entry and returns
    /// true when the reply buffer is full (the entry was not taken; its
    /// kernel reference, if any, is returned here).
    pub fn readdir(&self, fh: u64, offset: u64, plus: bool, mut sink: impl FnMut(&DirItem) -> bool) -> FsResult<()> {
        let dir = self.dirs.get(fh)?;
        let mut later = Vec::new();
        let r = self.readdir_from(&dir, offset, plus, &mut sink, &mut later);
        self.look_up_later(&dir.inode, later);
        r
    }

    /// [`Fs::readdir`]'s loop; the names answered without attributes are
    /// left in `later`.
    fn readdir_from(
        &self,
        dir: &OpenDir,
        offset: u64,
        plus: bool,
        sink: &mut impl FnMut(&DirItem) -> bool,
        later: &mut Vec<Vec<u8>>,
    ) -> FsResult<()> {
        if offset == 0
            && let Err(e) = self.renew_listing(dir)
        {
            // The source cannot be read now (a directory removed there,
            // out of descriptors): the handle reads its snapshot, as before.
            tracing::debug!(ino = dir.inode.ino, "READDIR from 0 keeps its listing: {e}");
        }
        let listing = dir.listing.lock().clone();
        let mut buf = vec![0u8; 16 * 1024];
        let mut offset = offset as i64;
        loop {
            let batch = match (&listing, &*dir.fd.lock()) {
                (Some(l), _) => listing::batch(l, offset as u64, 256),
                (None, Some(fd)) => sys::read_dir_batch(fd.as_fd(), offset, &mut buf)?,
                (None, None) => return Err(FsError::BADF),
            };
            if batch.is_empty() {
                return Ok(());
            }
            let names_first = plus && self.answers_names_first(&dir.inode);
            for raw in batch {
                let dots = raw.name == b"." || raw.name == b"..";
                let mut item = DirItem {
                    ino: raw.ino,
                    next_offset: raw.next_off as u64,
                    kind: Kind::from_dtype(raw.dtype),
                    name: raw.name,
                    entry: None,
                };
                let mut referenced = None;
                if plus {
                    if dots {
                        let ino = if item.name == b"." { dir.inode.ino } else { ROOT_INO };
                        let mut attr = Attr::from_stat(ino, &sys::zero_stat());
                        attr.kind = Kind::Dir;
                        item.entry = Some(Entry { ino, attr, lend: true });
                    } else if self.crossing(&dir.inode, &item.name).is_some() {
                        // A mount point of a filesystem that can stop
                        // answering (`fs/lanes.rs`): listed by name, so
                        // that its attributes are asked for in its lane.
                        if sink(&item) {
                            return Ok(());
                        }
                        offset = raw.next_off;
                        continue;
                    } else {
                        let found = if names_first {
                            let watch = self.table.watch_renames();
                            match self.fresh_name(&dir.inode, &item.name) {
                                Some(inode) => Some(self.answer_cached(&dir.inode, &item.name, &inode, watch)),
                                None => {
                                    // Listed now, looked up in the background
                                    // (`fs/prefetch.rs`).
                                    if sink(&item) {
                                        return Ok(());
                                    }
                                    later.push(item.name);
                                    offset = raw.next_off;
                                    continue;
                                }
                            }
                        } else {
                            match self.lookup(dir.inode.ino, &item.name) {
                                Ok(e) => Some(e).filter(|e| e.ino != 0),
                                // A name that cannot be looked up (a
                                // filesystem the mirror does not serve,
                                // `fs/submounts.rs`): listed by name, as
                                // READDIR lists it; using it asks a LOOKUP,
                                // which fails the same way.
                                Err(e) if e.errno() == libc::EACCES => {
                                    if sink(&item) {
                                        return Ok(());
                                    }
                                    offset = raw.next_off;
                                    continue;
                                }
                                Err(_) => None,
                            }
                        };
                        match found {
                            Some(e) => {
                                item.ino = e.ino;
                                item.kind = e.attr.kind;
                                item.entry = Some(e);
                                referenced = Some(e.ino);
                            }
                            // Gone since getdents listed it: skip.
                            None => {
                                offset = raw.next_off;
                                continue;
                            }
                        }
                    }
                }
                if sink(&item) {
                    if let Some(ino) = referenced {
                        self.forget(ino, 1);
                    }
                    return Ok(());
                }
                offset = raw.next_off;
            }
        }
    }

    /// RELEASEDIR.
    pub fn releasedir(&self, fh: u64) -> FsResult<()> {
        self.dirs.remove(fh).map(drop).ok_or(FsError::BADF)
    }

    /// FSYNCDIR.
    pub fn fsyncdir(&self, fh: u64, datasync: bool) -> FsResult<()> {
        let dir = self.dirs.get(fh)?;
        let fd = dir.fd.lock();
        match &*fd {
            Some(fd) => sys::fsync(fd.as_fd(), datasync),
            // A handle that reads a listing: sync the directory itself.
            None => sys::fsync(
                self.table.open(&dir.inode, libc::O_RDONLY | libc::O_DIRECTORY)?.as_fd(),
                datasync,
            ),
        }
    }
}
