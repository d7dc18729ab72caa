//! rcufs: a passthrough FUSE filesystem whose lookups go through `dcache` and
//! whose reads go through `pagecache` (library half of the `rcufs` binary, so
//! that the filesystem can be tested without a mount).

pub mod protocol;
