//! Running tests: the scheduler that runs the selected tests, one process
//! per test, `-j` at a time ([`scheduler::run_all`], configured by
//! [`scheduler::Schedule`], each ending as a [`scheduler::Finished`] and,
//! once judged, a [`scheduler::RunResult`]); the runner's end of a test
//! binary's fork server ([`fork_server`]); the runtime shim written out
//! from this binary ([`shim`]); and cargo-ekstazi's temporary directories
//! ([`scratch::Scratch`]). With verdicts first, the selected tests run as
//! `cargo test` runs them ([`verdicts`]), and their recording is left to
//! cargo-ekstazi again, in the background ([`background`]).
//!
//! Invariant: running never reads or writes records and never sees the
//! session: it is given the binaries, their environments and the tests to
//! run ([`scheduler::Suite`]), and reports what happened. It imports
//! `cargo`, `cli`, `style`, `exit`, `secrets` and `processes` only.

pub mod background;
pub mod fork_server;
pub mod scheduler;
pub mod scratch;
pub mod shim;
pub mod verdicts;
