//! Directory readahead over a slow source: when a walk (`find`, `du`,
//! `git status`, a build's scan) opens one subdirectory after another,
//! the next subdirectories are listed, and their names looked up, before
//! the walk reaches them.
//!
//! # Why
//! A walk of a cold tree over a network source waits, directory after
//! directory, for each listing's round trips (on sshfs, an open, two or
//! more reads and a close, each a round trip), one directory at a time:
//! the walker opens the next directory only when it is done with the
//! previous one. And every name the walk then `stat`s costs a LOOKUP into
//! rcufs after the listing answered it without attributes
//! (`fs/prefetch.rs`), two FUSE round trips per name where the source
//! alone costs one. A listing read ahead overlaps those round trips with
//! the walk, several directories at a time, and names looked up ahead let
//! READDIRPLUS answer them with their attributes, so the kernel keeps
//! them and the `stat`s never reach rcufs. This is the page cache's
//! sequential readahead, applied to the children of a directory in the
//! order its listing gives them.
//!
//! # Algorithm
//! Only for a network or FUSE source, with kept listings (`listing.rs`).
//! - OPENDIR of a directory *D* whose parent *P* has a kept listing finds
//!   *D*'s index there. If the walk moves forward under *P* (a child after
//!   the last one opened, or the first child opened of a *P* that was
//!   itself listed ahead), the next [`WINDOW`] subdirectories of *P* (by
//!   the listing's type) not queued before are queued.
//! - [`LIST_THREADS`] threads take them in order: each is looked up in the
//!   source if needed, claimed (once per *R*), opened and read whole as the
//!   daemon, and kept as its listing, so the walk's OPENDIR is served
//!   from it. Its names (up to [`MAX_NAMES`]) go to the background lookups
//!   of `fs/prefetch.rs` (counted in `source.names_first`), and its first
//!   subdirectory is queued too (a depth-first walk opens it first; this
//!   follows the leftmost path down, one listing per level).
//!
//! # Invariants
//! - A listing read ahead is a listing like any other: served only while
//!   younger than *R*, of the current generation and under the
//!   directory's stamp; a drop forgets it and empties the queue.
//! - It is read as the daemon, as the slow-source refresh is
//!   (ARCHITECTURE.md, "Acting as the caller"); what it holds reaches a
//!   caller only through an OPENDIR and LOOKUPs the kernel has checked
//!   against the caller (`default_permissions`).
//! - Bounded: at most [`WINDOW`] subdirectories ahead of the walk per
//!   directory (plus the first subdirectory of each listed ahead), the queue at most `prefetch::MAX_QUEUED`, and a listing
//!   of more than [`MAX_NAMES`] names is kept without looking its names up.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Fs;
use crate::inode::Inode;
use crate::names::Hit;

/// Subdirectories listed ahead of a walk, per directory.
pub const WINDOW: usize = 8;

/// Threads that list directories ahead of a walk (each waits for the
/// source's round trips, so more than the cores).
pub const LIST_THREADS: usize = 4;

/// A directory listed ahead with more names than this is kept without
/// looking its names up.
pub const MAX_NAMES: usize = 4096;

/// The index of `name` in `entries`, looked for from `from` to the end and
/// then from the start.
fn find_from(entries: &[crate::sys::RawDirent], from: usize, name: &[u8]) -> Option<usize> {
    let from = from.min(entries.len());
    let is = |e: &crate::sys::RawDirent| e.name == name;
    entries[from..]
        .iter()
        .position(is)
        .map(|i| i + from)
        .or_else(|| entries[..from].iter().position(is))
}

impl Fs {
    /// OPENDIR of `dir`: queues the subdirectories that follow it under its
    /// parent if a walk moves forward there (see the module docs).
    pub(super) fn walk_ahead(&self, dir: &Arc<Inode>) {
        if self.cfg.source_kind != "network" || !self.listings.enabled() {
            return;
        }
        let (pino, name) = dir.link();
        let Ok(parent) = self.inode(pino) else { return };
        let Some(l) = self.listings.servable(&parent, self.interval(&parent)) else {
            return;
        };
        // A walk opens the children in listing order: look from the last
        // one opened on, so a walk through n subdirectories compares about
        // n names in all, not n^2/2.
        let from = parent.walked_to().map_or(0, |w| w + 1);
        let Some(index) = find_from(&l.entries, from, &name) else {
            return;
        };
        let Some(start) = parent.walk_progress(index) else {
            return;
        };
        let mut names = Vec::new();
        let mut end = start;
        for (i, e) in l.entries.iter().enumerate().skip(start) {
            if names.len() == WINDOW {
                break;
            }
            end = i + 1;
            if e.dtype == libc::DT_DIR && e.name != b"." && e.name != b".." {
                names.push(e.name.clone());
            }
        }
        parent.set_ahead_to(end);
        if !names.is_empty() {
            self.lists_ahead.push(&parent, names);
        }
    }

    /// The queue of subdirectories to list ahead.
    pub fn list_queue(&self) -> &super::prefetch::NameQueue {
        &self.lists_ahead
    }

    /// A background thread: lists queued subdirectories until the queue
    /// closes.
    pub fn list_worker(&self) {
        while let Some((parent, name)) = self.lists_ahead.pop() {
            self.list_ahead(&parent, &name);
        }
    }

    /// Lists `name` under `parent` ahead of a walk and queues its names for
    /// the background lookups.
    fn list_ahead(&self, parent: &Arc<Inode>, name: &[u8]) {
        let dir = match self.names.lookup(parent, name) {
            Hit::Positive(inode) if self.usable(&inode) => inode,
            Hit::Negative => return,
            _ => match self.lookup_source(parent, name, false) {
                Ok(Some(inode)) => inode,
                _ => return,
            },
        };
        if !dir.is_dir()
            || self.listings.servable(&dir, self.interval(&dir)).is_some()
            || !dir.claim_list_ahead(self.interval(&dir))
        {
            return;
        }
        let Ok(fd) = self.table.open(&dir, libc::O_RDONLY | libc::O_DIRECTORY) else {
            return;
        };
        let Ok(crate::listing::Read::Whole(l)) = self.read_listing(fd.as_fd(), &dir) else {
            return;
        };
        drop(fd);
        dir.mark_listed_ahead();
        self.lists_ahead.done.fetch_add(1, Ordering::Relaxed);
        // A depth-first walk that enters `dir` opens its first
        // subdirectory first: list that one too.
        if let Some((i, first)) = l
            .entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.dtype == libc::DT_DIR && e.name != b"." && e.name != b"..")
        {
            dir.set_ahead_to(i + 1);
            self.lists_ahead.push(&dir, vec![first.name.clone()]);
        }
        if l.entries.len() <= MAX_NAMES + 2 {
            let names = l
                .entries
                .iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .map(|e| e.name.clone())
                .collect();
            self.look_up_later(&dir, names);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::find_from;
    use crate::sys::RawDirent;

    fn entries(names: &[&str]) -> Vec<RawDirent> {
        names
            .iter()
            .map(|n| RawDirent {
                ino: 1,
                next_off: 0,
                dtype: libc::DT_DIR,
                name: n.as_bytes().to_vec(),
            })
            .collect()
    }

    #[test]
    fn a_name_is_found_after_the_start_or_before_it() {
        let e = entries(&["a", "b", "c", "d"]);
        assert_eq!(find_from(&e, 0, b"c"), Some(2));
        assert_eq!(find_from(&e, 3, b"d"), Some(3));
        assert_eq!(find_from(&e, 3, b"a"), Some(0), "wraps to the start");
        assert_eq!(find_from(&e, 9, b"b"), Some(1), "a start past the end");
        assert_eq!(find_from(&e, 2, b"x"), None);
        assert_eq!(find_from(&[], 0, b"a"), None);
    }
}
