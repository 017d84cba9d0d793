//! The selection evaluations, the `cargo xtask eval …` commands: each runs
//! cargo-ekstazi on a real project's history (or on mutants of it) beside
//! the ground truth of `cargo test` running everything, and checks safety
//! (no test that had to run was skipped) as well as measuring the savings.
//!
//! - `eval replay`: history replay with a safety check (`replay`); with
//!   `--graph`, every commit of a window, merges included, and the history paper's
//!   options at merges, reverts and cherry-picks (`graph_replay`).
//! - `eval mutate`: a mutation campaign with a safety check (`mutate`,
//!   whose `Mutant`s and operators `bisect` and `merges` reuse).
//! - `eval bisect`: `cargo ekstazi bisect` against `git bisect run` on
//!   real and injected regressions (`bisect`).
//! - `eval merges`: `cargo ekstazi merge-check` on merges built to conflict
//!   and on real merges that pass (`merges`).
//! - `eval noise`: what reruns with nothing changed (`noise`).
//! - `eval parity`: whether every test passes under the tool exactly when
//!   it passes under `cargo test` (`parity`).
//! - `eval plot`: a replay's SVG figure drawn again from its CSV files
//!   (`plot`), with its summary and time tables.
//! - `eval state`: what a recorded state's bytes are, and how much of them
//!   tests share (`state_census`).
//!
//! Main types: `evidence::Project` (what every evaluation is given),
//! `evidence::RetestAll` (the ground truth of one `cargo test`) and
//! `evidence::Report` (what one `cargo ekstazi test` selected and why).
//!
//! Invariant: evaluations use `common` (statistics, checked runs) and
//! ekstazi-core, never `bench`; `evidence` is their shared base and uses
//! none of them.

pub mod bisect;
pub mod evidence;
pub mod graph_replay;
pub mod merges;
pub mod mutate;
pub mod noise;
pub mod parity;
pub mod plot;
pub mod replay;
pub mod replay_rows;
pub mod state_census;
