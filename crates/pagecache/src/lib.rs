//! A lock-coupled radix tree and a page cache on it (skeleton; see issue "crates/pagecache").

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod sync;
