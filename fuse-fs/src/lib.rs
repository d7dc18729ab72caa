//! rcufs: a passthrough FUSE filesystem whose lookups go through `dcache` and
//! whose reads go through `pagecache` (library half of the `rcufs` binary, so
//! that the filesystem can be tested without a mount).
//!
//! # Design
//! - `fuse.rs` is the only file that names fuser: a thin adapter that turns
//!   each FUSE request into a call of [`fs::Fs`] and its result into a reply.
//! - `fs.rs` is the filesystem logic, testable without a mount; `inode.rs`
//!   the inode table and its bounded descriptors; `names.rs` the dcache
//!   layer (every lookup); `data.rs` the page-cache layer (every read);
//!   `creds.rs` the caller's identity, taken for each operation that
//!   creates, opens, changes or lists something in the source;
//!   `pinned.rs` a READ's answer as pinned cache pages (the zero-copy reply);
//!   `sys.rs` the libc calls; `error.rs` the one error type;
//!   `open_files.rs` open handles, shared descriptors and the root reserve;
//!   `children.rs` the index a directory drop walks; `inval.rs` the bounded
//!   kernel-invalidation queue; `ratelog.rs` rate-limited log lines;
//!   `fs/warm.rs` the daemon-side warm (`user.rcufs.warm`); `metrics.rs`
//!   the stats as a Prometheus exposition and `metrics_http.rs` the
//!   `/metrics` endpoint that serves it; `slow_source.rs` the defaults for
//!   a network or FUSE source; `listing.rs` the directory listings kept
//!   for `ttl` coherence; `uring_guard.rs` the guard that keeps
//!   `--io-uring idle` queue threads from starving.
//! - `mount.rs` is the interface the command line uses: [`MountOptions`],
//!   [`mount`], [`Mounted`].
//!
//! # Invariants
//! - Every errno answered to the kernel is the source's, or the kernel's own
//!   errno for the same mistake.
//! - The number of descriptors held for inodes is bounded (a pool), however
//!   many inodes the kernel knows; open files share one descriptor per inode
//!   and mode, and non-root callers cannot use up the reserve kept for root.
//! - Memory follows the inodes that are alive, not every file ever seen.
//! - Nothing acknowledged is only in memory: writes reach the source before
//!   they are acknowledged and before the cached pages change.
//!
//! # Concurrency
//! fuser runs several worker threads that call [`fs::Fs`] through `&self`
//! (and with `--io-uring`, one thread per CPU serving that CPU's queue).
//! Shared state is sharded (inode table, key index, descriptor pool, open
//! handles) or lives in the cache crates, which take no global lock on
//! lookups and cached reads; per-inode state (attributes, data stamp) has a
//! small mutex of its own. Kernel invalidations are sent from a dedicated
//! thread after the reply.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod children;
pub mod creds;
pub mod data;
pub mod error;
pub mod fault;
pub mod fs;
mod fuse;
pub mod ids;
pub mod inode;
pub mod inval;
pub mod listing;
pub mod metrics;
pub mod metrics_http;
mod mount;
pub mod mount_table;
pub mod mountinfo;
pub mod names;
pub mod open_files;
pub mod pinned;
pub mod protocol;
pub mod range_lock;
pub mod ratelog;
pub mod slow_source;
pub mod space;
pub mod sys;
#[cfg(test)]
mod testing;
pub mod uring_guard;
pub mod watch;

/// The FUSE mount options (`-o`) rcufs passes to the kernel mount.
pub use fuse::session::KNOWN_OPTIONS as FUSE_OPTIONS;
pub use mount::{CoherenceRequest, IoUring, MountOptions, Mounted, local_threads, mount, validate};
