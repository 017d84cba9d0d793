//! The record model: what cargo-ekstazi knows about a test's last run.
//!
//! Main types: [`record::Record`] (with its [`record::Outcome`] and
//! [`record::Global`] fingerprint), its dependencies [`dep::Dep`] (a
//! [`dep::Target`] and its [`dep::Sum`]), the code it executed
//! ([`code_dep::CodeDep`], naming functions by [`code_dep::FnId`]), the
//! peers it reached ([`peer::Peer`]), paths kept relative to their anchor
//! ([`path::StoredPath`], [`path::Anchors`]) and the stable names of test
//! binaries ([`key`]).
//!
//! Invariant: the model only describes. It imports nothing of the crate
//! but `files` (a record is encoded with the common seal); capture,
//! digests, storage and selection all build on it, never the reverse.

pub mod code_dep;
pub mod dep;
pub mod key;
pub mod path;
pub mod peer;
pub mod record;
