//! A concurrent directory-entry cache (skeleton; see issue "crates/dcache").

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod sync;
