//! Developer tasks for cargo-ekstazi: `cargo xtask <task>`. This file is
//! the command line and its dispatch; the tasks live below it, each with
//! its options as a `clap::Args` struct of its own module (an evaluation's
//! ends with `evidence::Project`'s), which reaches the task whole:
//!
//! - `bench/`: the timing benchmarks, `cargo xtask bench…`:
//!   - `bench`: end-to-end timings of `cargo ekstazi test` against `cargo
//!     test` and `cargo nextest run` on one project, measured in the same
//!     session and interleaved so that machine noise hits every command
//!     alike; the figures that matter are the ratios (`bench::end_to_end`).
//!   - `bench-edit`: end to end after a one-function edit (`bench::edit`).
//!     With `--parts`, what each part of the instrumented build adds to the
//!     rebuild after such an edit (`bench::build_parts`); with `--stages`,
//!     each side's stages (`bench::edit_stages`).
//!   - `bench-watch`: from a save to the last verdict with `cargo ekstazi
//!     watch` running, against bacon and `cargo test` (`bench::watch`).
//!   - `bench-shim`: the shim's own cost per call and on a real project's
//!     tests, and with `--instrumented` the instrumentation's too
//!     (`bench::shim`).
//!   - `bench-granularity`: what function granularity costs
//!     (`bench::granularity`).
//!   - `bench-selection`: the per-binary stages of the selection cost
//!     (`bench::selection`).
//!   - `bench-history`: what a history of filed records costs the analysis
//!     (`bench::history`).
//! - `eval/`: the selection evaluations, `cargo xtask eval …`:
//!   - `eval replay`: history replay with a safety check (`eval::replay`);
//!     with `--graph`, every commit of a window, merges included, and seed
//!     000's options at merges, reverts and cherry-picks
//!     (`eval::graph_replay`).
//!   - `eval mutate`: a mutation campaign with a safety check
//!     (`eval::mutate`).
//!   - `eval bisect`: `cargo ekstazi bisect` against `git bisect run` on
//!     real and injected regressions (`eval::bisect`).
//!   - `eval merges`: `cargo ekstazi merge-check` on merges built to
//!     conflict (TOM's MCon4J recipe) and on real merges that pass
//!     (`eval::merges`).
//!   - `eval noise`: what reruns with nothing changed (`eval::noise`).
//!   - `eval parity`: whether every test passes under the tool exactly
//!     when it passes under `cargo test` (`eval::parity`).
//!   - `eval plot`: redraws a replay's SVG figure from its CSV files, and
//!     prints its summary and time tables again (`eval::plot`).
//!   - `eval state`: what a recorded state's bytes are, and how much of
//!     them tests share (`eval::state_census`).
//! - `layout`: the import circles between a crate's top-level modules
//!   (`layout`).
//! - `package-check`: the published crates packaged, verified, installed
//!   from their packages alone and run on the demo (`package_check`).
//! - `common/`: what `bench` and `eval` both use (statistics, running
//!   commands, the workspace's files); it uses neither.
//! - Checks run as tests: the code map stays true (`docs_check`), and
//!   cargo-ekstazi makes no record, dependency or verdict itself
//!   (`rooms_check`).

mod bench;
mod common;
#[cfg(test)]
mod docs_check;
mod eval;
mod layout;
mod package_check;
#[cfg(test)]
mod rooms_check;

use anyhow::Result;
use bench::{edit, end_to_end, granularity, history, selection, shim, watch};
use clap::{Parser, Subcommand};
use eval::{bisect, graph_replay, merges, mutate, noise, parity, plot, replay};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Time `cargo ekstazi test` (nothing changed, and --forceall) against
    /// `cargo test` and `cargo nextest run`, and print the ratios
    Bench(end_to_end::Args),
    /// Time `cargo ekstazi test` against `cargo test` after a one-function
    /// edit, a new one each round, and print the ratio (with --stages,
    /// where the time goes on each side)
    BenchEdit(edit::Args),
    /// Time from a save to the last verdict after a one-function edit, a
    /// new one each round: `cargo ekstazi watch` against `bacon --headless
    /// test` (if on PATH) and `cargo test` started after the save
    BenchWatch(watch::Args),
    /// What function granularity costs on one project, from clean builds:
    /// build and test time against binary granularity, fingerprinting speed
    BenchGranularity(granularity::Args),
    /// Time the smart checksums and function fingerprints of a project's
    /// instrumented test binaries (build them first with `cargo ekstazi test`)
    BenchSelection(selection::Args),
    /// Time the analysis (`cargo ekstazi list`) on a state directory with its
    /// history against the same state without it, and print the ratio
    BenchHistory(history::Args),
    /// Time opening, stat'ing and listing many files with and without the shim
    BenchShim(shim::Args),
    /// The measured program of `bench-shim` (run by it)
    #[command(hide = true)]
    ShimWorker {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        files: usize,
    },
    /// Check that each crate's top-level modules refer to one another one
    /// way: print them in such an order, or the circles (and fail)
    Layout {
        /// A crate's directory (or its src/) [default: every crate of the
        /// workspace]
        #[arg(long = "crate")]
        crates: Vec<PathBuf>,
    },
    /// Package the published crates, install cargo-ekstazi from the
    /// packages alone into a temporary root, and run it on the demo twice
    /// (the second run must skip every test)
    PackageCheck(package_check::Args),
    /// Evaluate selection on real projects
    Eval {
        #[command(subcommand)]
        what: Eval,
    },
}

#[derive(Subcommand)]
enum Eval {
    /// Replay consecutive first-parent commits of a project: retest-all with
    /// `cargo test` against `cargo ekstazi test`, per granularity, with a
    /// safety check at every commit
    Replay(replay::ReplayArgs),
    /// Bisect real regressions and injected ones (mutants applied from a
    /// commit on, some removed and applied again) with `git bisect run`,
    /// and with `cargo ekstazi bisect` (each `--searches` value) without
    /// history and with the history CI left at every commit of the window
    Bisect(bisect::BisectEvalArgs),
    /// Build merges that conflict (a real commit with a test of its own as
    /// one side, its parent with a mutant the test executes as the other;
    /// and semantic conflicts, where the real commit makes an unchanged
    /// test reach the function the mutant is in) and check them with `cargo ekstazi merge-check` against the ground
    /// truth of `cargo test` at the base, each parent and the merge; then
    /// real merge commits that pass, for false alarms
    Merges(merges::MergeEvalArgs),
    /// At one commit, `cargo test` and `cargo ekstazi test --forceall`
    /// from an empty state: every test whose outcome differs is listed
    Parity(parity::ParityArgs),
    /// Run `cargo ekstazi test` at one commit from an empty state, then
    /// again with nothing changed: every test a later run selects that had
    /// passed in the run before is noise, listed with its reasons
    Noise(noise::NoiseArgs),
    /// Apply small source mutations to a project one at a time; for each,
    /// `cargo ekstazi test` from a clean recorded state against retest-all:
    /// every test that fails under the mutant must have been selected
    Mutate(mutate::MutateArgs),
    /// Redraw a replay's figure from its CSV files, and print its summary
    /// and time tables again
    Plot {
        /// The replay's output directory
        #[arg(long)]
        out: PathBuf,
        /// The project's name in the caption
        #[arg(long)]
        name: String,
        /// Where to write the SVG [default: <out>/replay.svg]
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// What a recorded state's bytes are, and how much of them tests share
    State {
        /// The state directory (a project's `.ekstazi`)
        #[arg(long)]
        state: PathBuf,
    },
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Bench(args) => end_to_end::bench(args),
        Task::BenchEdit(args) => bench::bench_edit(args),
        Task::BenchWatch(args) => watch::bench(args),
        Task::BenchGranularity(args) => granularity::bench(args),
        Task::BenchSelection(args) => selection::bench(args),
        Task::BenchHistory(args) => history::bench(args),
        Task::BenchShim(args) => shim::bench(&args),
        Task::ShimWorker { dir, files } => shim::shim_worker(&dir, files),
        Task::Layout { crates } => layout::check(&crates),
        Task::PackageCheck(args) => package_check::check(&args),
        Task::Eval { what } => match what {
            Eval::Replay(args) if args.graph => {
                graph_replay::replay(&graph_replay::GraphArgs::from_replay(args)?)
            }
            Eval::Replay(args) => replay::replay(&args.resolve()?),
            Eval::Bisect(args) => bisect::bisect(&args.resolve()?),
            Eval::Merges(args) => merges::merges(&args.resolve()?),
            Eval::Parity(args) => parity::parity(&parity::ParityArgs {
                project: args.project.resolve(true)?,
                ..args
            }),
            Eval::Noise(args) => noise::noise(&noise::NoiseArgs {
                project: args.project.resolve(true)?,
                ..args
            }),
            Eval::Mutate(args) => mutate::mutate(&args.resolve()?),
            Eval::Plot { out, name, svg } => plot::redraw(&out, &name, svg),
            Eval::State { state } => eval::state_census::census(&state),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn eval_bisect_runs_every_search_unless_told() {
        let searches = |extra: &[&str]| {
            let base = ["cargo xtask", "eval", "bisect", "--repo", "r", "--out", "o"];
            let cli = Cli::try_parse_from(base.iter().chain(extra))?;
            let Task::Eval {
                what: Eval::Bisect(args),
            } = cli.task
            else {
                panic!()
            };
            Ok::<_, clap::Error>(args.searches)
        };
        assert_eq!(searches(&[]).unwrap(), bisect::SEARCHES);
        assert_eq!(
            searches(&["--searches", "multiplying,binary"]).unwrap(),
            ["multiplying", "binary"]
        );
        assert!(searches(&["--searches", "linear"]).is_err());
    }
}
