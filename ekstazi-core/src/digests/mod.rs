//! Digests.
pub mod checksum;
pub mod coverage_table;
pub mod fingerprint;
pub mod functions;
pub mod mapped;
pub(crate) mod prehashed;
pub mod program;
