//! Mount tests: each test builds a source tree in a temporary directory,
//! mounts it with the real `rcufs` binary, and checks through the mount
//! against the source.
//!
//! When this machine cannot mount (no usable /dev/fuse, or neither root nor
//! fusermount3) a test prints `SKIPPED: cannot mount: <why>` to stderr and
//! returns; with `RCUFS_REQUIRE_MOUNT=1` (set by `cargo xtask ci`) it fails
//! instead. Every mount is unmounted and every daemon reaped when its test
//! ends, even when the test fails.

mod by_name;
mod cli;
mod datapath;
mod drop;
mod harness;
mod identity;
mod io_uring;
mod kernel_cache;
mod lanes;
mod lifecycle;
mod ops;
mod ops_metrics;
mod posix;
mod resources;
mod slow_source;
mod sys;
mod watch;
