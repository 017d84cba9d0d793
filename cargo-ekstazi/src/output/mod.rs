//! Output: what the user and CI read about a run. The selection line, a
//! line per finished test, the failures and the summary, and the `list`
//! table and JSON ([`report`], counting with [`report::Tally`]); the JUnit
//! XML report ([`junit`]); the progress bar ([`progress::Progress`]).
//!
//! Invariant: output only reads what the session, the analysis and the
//! runs decided (`Session`, `Planned`, `Finished`, `RunResult`); it decides
//! nothing, and writes no record. The terminal's colours and the
//! `note`/`warn` lines are `crate::style`, below every layer.

pub mod junit;
pub mod progress;
pub mod report;
