//! Integration tests of `dcache`: a property test against a model and
//! multi-threaded stress tests with verification.

mod drop;
mod model;
mod stats;
mod stress;
