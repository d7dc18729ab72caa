//! loom models of every concurrency protocol in `dcache` and `pagecache`.
//!
//! The models live in `tests/` and compile only under
//! `--cfg rcufs_loom --cfg crossbeam_loom`; run them with `cargo xtask loom`.
//! Without that cfg this crate is empty.
