//! Answers that overlapped a change of the source are not lent to the
//! kernel.
//!
//! With `--kernel-cache` (and, for attributes, the default mode with the
//! watch) a reply lends the kernel what it answers for a timeout: an hour
//! for what the watch covers. The watch keeps that right by invalidating
//! the kernel's copy when it applies a change, and the kernel orders most
//! of those invalidations after the replies in flight: `inval_entry`
//! takes the directory's lock, which a LOOKUP in it holds until its reply
//! is instantiated, and `inval_inode` moves the inode's attribute version,
//! so that a GETATTR or LOOKUP reply sent before it is not kept. What it
//! cannot order is an `inval_inode` of an inode the kernel does not have
//! yet: the first LOOKUP of a file whose attributes changed while it was
//! read instantiates the inode from its reply, after the invalidation
//! found nothing, and kept the old mode or size for the hour. The same
//! holds for a watch that fails while a reply is in flight: its drop
//! invalidates what the kernel has, not what a reply is about to give it.
//!
//! Two checks close that, around each reply that lends (LOOKUP, the
//! entries of MKNOD, MKDIR, SYMLINK, LINK and CREATE, GETATTR, SETATTR,
//! READDIRPLUS):
//! - **Before the reply.** The request takes a [`Lease`] (the change
//!   sequence, `fs/watched.rs`) when it starts. If the sequence moved by
//!   the time the reply is built, or the request's own read found that it
//!   overlapped a change ([`Entry::lend`]: the paths that read the source
//!   check the sequence and the events lost for objects not known yet),
//!   the reply lends nothing: its timeouts are 0, and the kernel asks again
//!   next time. A watch that fails moves the sequence first
//!   (`drop_everything`), so the replies in flight then lend nothing.
//!   (READDIRPLUS has no such check: its entries are written as they are
//!   read.)
//! - **After the reply.** If the sequence moved between the first check
//!   and the reply's write, the kernel is told to forget what the reply
//!   lent (queued, so sent after the reply). For a brand-new inode this
//!   narrows the window to the moment between the reply's write and the
//!   kernel's instantiation of it, without closing it: nothing in FUSE 7.40
//!   can (the epoch that outdates older dentries came with 7.44).
//!
//! Counted in `coherence.unlent_replies` and `coherence.overlapped_replies`.

use super::*;

/// The change sequence when a request began (see the module docs); none
/// without the watch, where nothing moves it.
#[derive(Clone, Copy, Debug)]
pub struct Lease(Option<u64>);

impl Lease {
    /// Whether a change can overtake the request (the watch runs): only
    /// then is it worth recording what a reply lends.
    pub fn may_break(self) -> bool {
        self.0.is_some()
    }
}

impl Fs {
    /// Taken when a request that may lend the kernel its answer starts.
    pub fn lease(&self) -> Lease {
        Lease(self.watching().then(|| self.source_seq()))
    }

    /// Whether a reply may lend the kernel its answer for the timeouts:
    /// no change of the source was applied since `lease` was taken.
    pub fn lease_holds(&self, lease: Lease) -> bool {
        lease.0.is_none_or(|seq| !self.source_changed_since(seq))
    }

    /// After a reply that lent the kernel what `lent` names (entries and
    /// attributes): if a change was applied since `lease`, the kernel is
    /// told to forget them.
    pub fn after_lent_reply(&self, lease: Lease, lent: impl FnOnce() -> Vec<Inval>) {
        if !self.lease_holds(lease) && self.kernel_keeps_attrs() {
            self.watched.overlapped_replies.fetch_add(1, Ordering::Relaxed);
            self.inval.push(lent());
        }
    }

    /// Counts a reply that lent nothing because it overlapped a change
    /// (`coherence.unlent_replies`).
    pub fn count_unlent(&self) {
        self.watched.unlent_replies.fetch_add(1, Ordering::Relaxed);
    }
}
