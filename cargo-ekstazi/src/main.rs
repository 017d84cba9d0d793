//! `cargo ekstazi`: regression test selection for Rust.
//!
//! `cargo ekstazi test` builds the test binaries as `cargo test` would, lists
//! their tests, and runs — one process per test, under a shim that records
//! every file the test touches — only the tests whose recorded dependencies
//! changed since they last passed. The decisions live in `ekstazi-core`;
//! this crate wires the stages together:
//!
//! [`pipeline`]: options → workspace → build → list ([`cargo`]) → analysis
//! ([`session`]) → run (processes under the shim, [`run`]) → record →
//! report ([`output`]). [`commands`] holds one module per subcommand;
//! [`git`] the repository and the worktrees of other commits.
//!
//! Layers, each importing only those before it: [`cli`], [`style`],
//! [`exit`], [`secrets`] and [`processes`];
//! [`cargo`] and [`git`]; [`run`]; [`session`]; [`output`]; [`pipeline`];
//! [`commands`], which nothing imports.

mod cargo;
mod cli;
mod commands;
mod exit;
mod git;
mod output;
mod pipeline;
mod processes;
mod remote;
mod run;
mod secrets;
mod session;
mod style;

use clap::Parser;
use cli::{CargoCli, Command};
use std::process::ExitCode;

/// Says once what the run found planted in the state directory and
/// removed: a link (or FIFO, device) where a directory or file of the state
/// should be is never followed (`ekstazi_core::files::contained`).
fn report_removed_links() {
    let removed = ekstazi_core::files::contained::take_removed();
    if let Some(first) = removed.first() {
        let more = match removed.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        anstream::eprintln!(
            "{}warning{:#}: removed what was not a file or directory of the state at {}{more}: \
             a link there is never followed (was the state directory copied or restored with links?)",
            style::WARN,
            style::WARN,
            first.display()
        );
    }
}

fn main() -> ExitCode {
    // First: it takes a variable out of the environment.
    secrets::take();
    // nextest's target runner (`cargo ekstazi nextest`): first, because
    // nextest runs it in the environment of the instrumented build, which
    // would make this process the rustc wrapper.
    let runner = commands::nextest::runner::SUBCOMMAND;
    let mut raw = std::env::args_os().skip(1);
    match (raw.next(), raw.next()) {
        (Some(first), _) if first == runner => commands::nextest::runner::exec(raw.collect()),
        (Some(first), Some(second)) if first == "ekstazi" && second == runner => {
            commands::nextest::runner::exec(raw.collect())
        }
        _ => {}
    }
    // `cargo test --doc`'s rustdoc, for a doctest unit (see `cargo::rustdoc`).
    if std::env::var_os(cargo::rustdoc::WRAPPER_ENV).is_some() {
        cargo::rustdoc::exec();
    }
    if std::env::var_os(cargo::instrument::WRAPPER_ENV).is_some() {
        cargo::instrument::wrap_rustc();
    }
    // Cargo runs us as `cargo-ekstazi ekstazi <args>`; accept being run
    // directly as `cargo-ekstazi <args>` too.
    let mut args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_none_or(|a| a != "ekstazi") {
        args.insert(1, "ekstazi".into());
    }
    let CargoCli::Ekstazi(cli) = CargoCli::parse_from(args);
    style::init(cli.color.as_deref());
    let result = match cli.command {
        Command::Test(args) => commands::test::run(args),
        Command::Watch(args) => commands::watch::run(args),
        Command::List(args) => commands::list::run(args),
        Command::Why(args) => commands::why::run(args),
        Command::MergeState(args) => commands::merge_state::run(args),
        Command::History(args) => commands::history::run(args),
        Command::Stats(args) => commands::stats::run(args),
        Command::Bisect(args) => commands::bisect::run(args),
        Command::MergeCheck(args) => commands::merge_check::run(args),
        Command::Nextest(args) => commands::nextest::run(args),
        Command::Completions(args) => commands::completions::run(args),
        Command::Man(args) => commands::man::run(args),
    };
    report_removed_links();
    match result {
        Ok(code) => code,
        Err(e) if e.is::<cargo::test_build::BuildFailed>() => {
            anstream::eprintln!("{}error{:#}: {e}", style::FAIL, style::FAIL);
            ExitCode::from(exit::TESTS_FAILED)
        }
        Err(e) => {
            anstream::eprintln!("{}error{:#}: {e:#}", style::FAIL, style::FAIL);
            ExitCode::FAILURE
        }
    }
}
