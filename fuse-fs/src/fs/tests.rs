//! Unit tests of the filesystem logic (no mount).
