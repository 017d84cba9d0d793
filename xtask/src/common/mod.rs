//! What the benchmarks (`bench`) and the evaluations (`eval`) both use:
//! statistics (`stats`: the one `median`, means, shares, percentiles),
//! running commands (`process`: timed runs, checked runs, captured output,
//! the cargo-ekstazi binary to measure) and the workspace's files
//! (`files`: its root, scratch directories, tree copies).
//!
//! Main types: none of its own; command lines are `Vec<String>` (what
//! `process::run` takes), timings `Duration`s, statistics over `f64`s.
//!
//! Invariant: `common` is the bottom layer of xtask: it imports neither
//! `bench` nor `eval` (nor anything else of the crate but itself), so both
//! can use it without a circle.

pub mod files;
pub mod process;
pub mod stats;
