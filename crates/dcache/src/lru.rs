//! The intrusive doubly-linked lists of unused dentries that the eviction
//! policy (`policy.rs`) keeps behind the one LRU mutex: its probation and
//! main queues and the negative entries' list.
//!
//! They are the lazy LRU of seed 000 ("Scalability of the directory entry
//! cache", §6 and §6.2): a lookup hit never touches a list. Nodes enter a
//! list when an insert hashes them (while its handle still holds them:
//! most are dropped at once, which then costs no lock), and again when
//! their last reference is dropped while they are hashed and off the lists;
//! the pruner fixes the lists up lazily while it walks them (nodes found in
//! use are taken off). Only an insert, `put` (count reaching zero), the
//! pruner and the killer of a node take the lock.
//!
//! Invariant: a node is on a list if and only if its `ON_LRU` state bit is
//! set, and a node on a list is never freed (the killer takes it off first).

use std::ptr;

use crate::node::{Link, Node};

/// One intrusive list.
pub(crate) struct List<T> {
    head: *const Node<T>,
    tail: *const Node<T>,
    len: usize,
}

// SAFETY: the list only holds addresses of nodes, which are `Send + Sync`; it
// is only reached through the LRU mutex.
unsafe impl<T: Send + Sync> Send for List<T> {}

impl<T> List<T> {
    pub(crate) const fn new() -> Self {
        Self {
            head: ptr::null(),
            tail: ptr::null(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn head(&self) -> *const Node<T> {
        self.head
    }

    /// The node after `node` (null at the tail).
    ///
    /// # Safety
    /// The LRU lock is held and `node` is on this list (hence alive).
    pub(crate) unsafe fn next(&self, node: *const Node<T>) -> *const Node<T> {
        // SAFETY: forwarded from the caller.
        unsafe { Self::link(node, |l| l.next) }
    }

    /// Runs `f` on the LRU link of `node`.
    ///
    /// # Safety
    /// The caller holds the LRU lock (it has `&mut` to a list behind it) and
    /// `node` is alive.
    unsafe fn link<R>(node: *const Node<T>, f: impl FnOnce(&mut Link<T>) -> R) -> R {
        // SAFETY: the caller guarantees `node` is alive; the LRU lock
        // serializes every access to the link cell.
        unsafe { (*node).lru.with_mut(|l| f(&mut *l)) }
    }

    /// Appends `node` at the tail (most recently used end).
    ///
    /// # Safety
    /// The LRU lock is held, `node` is alive and on no list.
    pub(crate) unsafe fn push_back(&mut self, node: *const Node<T>) {
        let tail = self.tail;
        // SAFETY: forwarded from the caller.
        unsafe {
            Self::link(node, |l| {
                *l = Link {
                    prev: tail,
                    next: ptr::null(),
                }
            })
        };
        if tail.is_null() {
            self.head = node;
        } else {
            // SAFETY: `tail` is on this list, so it is alive (list invariant).
            unsafe { Self::link(tail, |l| l.next = node) };
        }
        self.tail = node;
        self.len += 1;
    }

    /// Unlinks `node`.
    ///
    /// # Safety
    /// The LRU lock is held and `node` is on this list (hence alive).
    pub(crate) unsafe fn remove(&mut self, node: *const Node<T>) {
        // SAFETY: forwarded from the caller.
        let (prev, next) = unsafe { Self::link(node, |l| (l.prev, l.next)) };
        if prev.is_null() {
            self.head = next;
        } else {
            // SAFETY: `prev` is on this list, so it is alive.
            unsafe { Self::link(prev, |l| l.next = next) };
        }
        if next.is_null() {
            self.tail = prev;
        } else {
            // SAFETY: `next` is on this list, so it is alive.
            unsafe { Self::link(next, |l| l.prev = prev) };
        }
        // SAFETY: forwarded from the caller.
        unsafe {
            Self::link(node, |l| {
                *l = Link {
                    prev: ptr::null(),
                    next: ptr::null(),
                }
            })
        };
        self.len -= 1;
    }

    /// Moves `node` to the tail (a second chance).
    ///
    /// # Safety
    /// As for `remove`.
    pub(crate) unsafe fn rotate(&mut self, node: *const Node<T>) {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.remove(node);
            self.push_back(node);
        }
    }
}
