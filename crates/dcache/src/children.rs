//! A directory's cached children: a list linked through the children
//! themselves, under the directory's child lock.
//!
//! The kernel keeps a dentry's children on `d_children`, linked through each
//! child's `d_sib` (`d_subdirs`/`d_child` before 6.8), under the parent's
//! `d_lock`; this is the same, with the parent's `child_lock` (one byte in the
//! node's padding). It replaced a `BTreeMap<u64, NodePtr>` per directory,
//! which cost about 34 bytes per child on top of a 32-byte map header in
//! every node; the list costs 24 bytes per node (`first_child` and the two
//! sibling links) and no allocation.
//!
//! # Protocol
//! - A directory's `first_child` and the `sibling` links of its children are
//!   read and written only while the directory's `child_lock` is held
//!   ([`ChildGuard`]). A child is on exactly one list: that of the node its
//!   `parent` pointer names; rename moves it while holding both parents'
//!   child locks (by id order, as before).
//! - The list is singly linked forward (`next`, null at the end) and its
//!   `prev` links are circular: the first child's `prev` is the last child,
//!   so that appending is O(1) with one head pointer per directory.
//! - New children are appended, so children inserted while `drop_subtree`
//!   walks a list come after its cursor. The walk's cursor is a child it holds
//!   a counted reference on (a counted child is never unlinked: only its
//!   killer and rename unlink it, and rename is checked for, see `drop_pass`).
//!
//! The loom models that insert, rename and drop subtrees
//! (`dcache_drop_subtree_vs_insert`, `dcache_rename_vs_drop_subtree`,
//! `dcache_parent_vs_rename_and_free`) run these lists, and loom checks
//! every access to their cells against the child lock.

use std::ptr;

use crate::node::Node;
use crate::sync::MutexGuard;

/// A node's links among its parent's children (its parent's child lock).
pub(crate) struct Sibling<T> {
    /// The previous child; for the first child, the last one.
    pub(crate) prev: *const Node<T>,
    /// The next child, null for the last.
    pub(crate) next: *const Node<T>,
}

impl<T> Sibling<T> {
    pub(crate) const fn new() -> Self {
        Self {
            prev: ptr::null(),
            next: ptr::null(),
        }
    }
}

/// The child lock of a directory, held: access to its list of children.
pub(crate) struct ChildGuard<'a, T> {
    dir: &'a Node<T>,
    _lock: MutexGuard<'a, ()>,
}

impl<'a, T> ChildGuard<'a, T> {
    /// Locks `dir`'s children.
    pub(crate) fn lock(dir: &'a Node<T>) -> Self {
        Self {
            _lock: dir.child_lock.lock(),
            dir,
        }
    }

    /// The first child, or null.
    pub(crate) fn first(&self) -> *const Node<T> {
        // SAFETY: we hold the directory's child lock, which guards the cell.
        self.dir.first_child.with(|f| unsafe { *f })
    }

    /// The child after `child`, or null.
    ///
    /// # Safety
    /// `child` is alive and on this directory's list.
    pub(crate) unsafe fn next(&self, child: *const Node<T>) -> *const Node<T> {
        // SAFETY: the child is on our list (caller), so our lock guards its
        // links, and it is alive (caller).
        unsafe { (*child).sibling.with(|s| (*s).next) }
    }

    /// Appends `child`.
    ///
    /// # Safety
    /// `child` is alive, on no list, and its `parent` is (or is about to be
    /// set to) this directory, before this lock is released.
    pub(crate) unsafe fn push_back(&mut self, child: &Node<T>) {
        let c: *const Node<T> = child;
        let first = self.first();
        // SAFETY: every node reached is on our list (so alive: a child is
        // unlinked by its killer, under this lock, before it is freed), and
        // this lock guards all the links we touch; `child` is on no list, so
        // nobody else touches its links.
        unsafe {
            if first.is_null() {
                child.sibling.with_mut(|s| {
                    *s = Sibling {
                        prev: c,
                        next: ptr::null(),
                    }
                });
                self.dir.first_child.with_mut(|f| *f = c);
            } else {
                let last = (*first).sibling.with(|s| (*s).prev);
                child.sibling.with_mut(|s| {
                    *s = Sibling {
                        prev: last,
                        next: ptr::null(),
                    }
                });
                (*last).sibling.with_mut(|s| (*s).next = c);
                (*first).sibling.with_mut(|s| (*s).prev = c);
            }
        }
    }

    /// Unlinks `child` from this directory's list.
    ///
    /// # Safety
    /// `child` is alive and on this directory's list.
    pub(crate) unsafe fn remove(&mut self, child: &Node<T>) {
        let c: *const Node<T> = child;
        let first = self.first();
        // SAFETY: as in `push_back`; `child` is on our list (caller).
        unsafe {
            let (prev, next) = child.sibling.with(|s| ((*s).prev, (*s).next));
            if ptr::eq(c, first) {
                self.dir.first_child.with_mut(|f| *f = next);
                if !next.is_null() {
                    // The new first child inherits the pointer to the last.
                    (*next).sibling.with_mut(|s| (*s).prev = prev);
                }
            } else {
                (*prev).sibling.with_mut(|s| (*s).next = next);
                if next.is_null() {
                    // `child` was the last: the first child's `prev` moves back.
                    (*first).sibling.with_mut(|s| (*s).prev = prev);
                } else {
                    (*next).sibling.with_mut(|s| (*s).prev = prev);
                }
            }
            child.sibling.with_mut(|s| *s = Sibling::new());
        }
    }

    /// Whether the directory has no cached child.
    pub(crate) fn is_empty(&self) -> bool {
        self.first().is_null()
    }
}
