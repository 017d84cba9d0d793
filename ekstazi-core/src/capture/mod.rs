//! Capturing a test's evidence: from what the shim wrote while the test ran
//! to the dependency targets of its new record.
//!
//! Main types: the shim's [`trace::Trace`] and its events, [`collect`]'s
//! `collect` (accesses to targets, checksummed as the test saw them), the
//! [`ignore::Ignore`] rules that say what is not an input, the normalised
//! [`environment::Environment`], the [`network`] peers a test reached, the
//! per-program [`coverage::Coverage`], the dep-info and doctest helpers
//! ([`depinfo`], [`doctests`]), and what a test that runs cargo depends on
//! ([`cargo_runs`]).
//!
//! Invariant: capture reads what a run left and the options; it imports the
//! record model, options and digests, never storage or selection.

pub mod cargo_runs;
pub mod collect;
pub mod coverage;
pub mod depinfo;
pub mod doctests;
pub mod environment;
pub mod ignore;
pub mod network;
pub mod trace;
