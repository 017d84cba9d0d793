//! Deciding which tests run, and saying why.
//!
//! Main types: [`select::Present`] (the world now) and the
//! [`select::Reason`]s a test runs for, the verdict on a recorded code
//! dependency ([`changed_code::holds`], [`changed_code::changes`]),
//! libtest's name filters ([`filter::Filter`], [`filter::Decision`]) and
//! the records of other commits that may vouch for a test
//! ([`vouch::Verdicts`]); [`verdict`] puts them together into a test's
//! reasons to run.
//!
//! Invariant: selection is the top of a run's pipeline: it reads storage,
//! digests, capture's normalisation and the model; nothing below imports
//! it.

pub mod changed_code;
pub mod filter;
pub mod select;
pub mod verdict;
pub mod vouch;
