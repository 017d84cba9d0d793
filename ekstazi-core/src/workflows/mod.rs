//! The git workflows built on the history: finding where a test regressed
//! ([`bisect`], with its [`bisect::Search`]) and checking a merge against
//! the records of its sides ([`merge_check`], with its
//! [`merge_check::Verdict`]).
//!
//! Invariant: workflows read storage, digests and the model; they never run
//! git themselves (cargo-ekstazi does) and nothing else in the crate
//! imports them.

pub mod bisect;
pub mod merge_check;
