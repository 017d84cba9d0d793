//! The byte formats that cross the boundary between the shim
//! (`ekstazi-runtime`, loaded into every test process) and the runner
//! (`cargo-ekstazi` with `ekstazi-core`): one definition, read by both ends.
//!
//! - [`trace`]: the events a traced process appends to its trace file, with
//!   their tags, flags and path kinds;
//! - [`fork`]: the fork server's request and reply messages;
//! - [`listing`]: the per-entry hashes of a directory listing's witness.
//!
//! Invariant: this crate has no dependencies and never allocates on the
//! shim's paths (decoders borrow from their buffer), because the shim runs
//! inside other programs, before their `main` and inside `malloc`.

#![warn(missing_docs)]

pub mod fork;
pub mod listing;
pub mod trace;
