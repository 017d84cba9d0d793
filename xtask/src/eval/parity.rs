//! `cargo xtask eval parity`: does every test pass under `cargo ekstazi
//! test` exactly when it passes under `cargo test`? At one commit of a
//! real project, `cargo test --no-fail-fast` and `cargo ekstazi test
//! --forceall` (from an empty state, so every test runs under the shim, a
//! process each) run the same tests, and every test whose outcome differs
//! is listed: those that fail only under the tool (the tool is not
//! invisible to them) and those that fail only under `cargo test`.
//!
//! Doctests are left out on both sides, as the replays leave them out
//! (`cargo test`'s are told apart from its other tests by time only).
//! Output: `<out>/parity.md`, both runs' logs and the tool's report.

use super::evidence::{self, EkstaziOpts, RunMode, TestId};
use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::fmt::Write as _;

#[derive(clap::Args)]
pub struct ParityArgs {
    /// The commit to run at
    #[arg(long, default_value = "HEAD")]
    pub rev: String,
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    #[command(flatten)]
    pub project: evidence::Project,
}

pub fn parity(args: &ParityArgs) -> Result<()> {
    let project = &args.project;
    let (ekstazi, scratch) = project.scratch_setup()?;
    let head = evidence::checkout_headline(&scratch, &args.rev)?;
    eprintln!("cargo test at {}", head);
    let retest = evidence::retest_all(
        &scratch,
        &project.cargo_args,
        project.timeout,
        &project.out.join("cargo-test.log"),
    )?;
    if !retest.built {
        bail!("the project does not build at {}", args.rev);
    }
    eprintln!("cargo ekstazi test --forceall at {}", head);
    let state = project.out.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let report_path = project.out.join("ekstazi.json");
    let run = evidence::ekstazi_test_with_env(
        &EkstaziOpts {
            ekstazi: &ekstazi,
            dir: &scratch,
            state: &state,
            granularity: "function",
            cargo_args: &project.cargo_args,
            target_dir: Some(&project.out.join("target")),
            log: &project.out.join("ekstazi.log"),
            report: &report_path,
            timeout: project.timeout,
            mode: RunMode::Record,
        },
        &[("EKSTAZI_FORCEALL", "1".to_owned())],
    )?;
    let report = run
        .report
        .context("cargo ekstazi test wrote no report (see ekstazi.log)")?;

    let fails = |outcome: &str| outcome != "ok" && outcome != "ignored";
    let cargo_failed: BTreeSet<TestId> = retest
        .outcomes
        .iter()
        .filter(|(_, o)| fails(o))
        .map(|(id, _)| id.clone())
        .collect();
    let mut tool_failed = BTreeSet::new();
    let mut compared = 0;
    for test in report.in_scope() {
        let id = (test.binary.clone(), test.name.clone());
        let Some(outcome) = &test.outcome else {
            continue;
        };
        if !retest.outcomes.contains_key(&id) {
            continue;
        }
        compared += 1;
        if outcome != "passed" {
            tool_failed.insert(id);
        }
    }
    let cargo_failed: BTreeSet<TestId> = cargo_failed
        .into_iter()
        .filter(|id| report.knows(id))
        .collect();
    let only_tool: Vec<&TestId> = tool_failed.difference(&cargo_failed).collect();
    let only_cargo: Vec<&TestId> = cargo_failed.difference(&tool_failed).collect();

    let mut text = String::new();
    writeln!(
        text,
        "# Parity: {} at {}\n",
        super::replay::project_name(&project.repo),
        head
    )?;
    writeln!(
        text,
        "Cargo options: `{}`. Tests compared (run by both, doctests apart): {compared}.\n",
        project.cargo_args.join(" ")
    )?;
    writeln!(text, "| | tests |\n|---|---:|")?;
    writeln!(text, "| fail under `cargo test` | {} |", cargo_failed.len())?;
    writeln!(
        text,
        "| fail under `cargo ekstazi test --forceall` | {} |",
        tool_failed.len()
    )?;
    writeln!(text, "| fail under the tool only | {} |", only_tool.len())?;
    writeln!(
        text,
        "| fail under `cargo test` only | {} |",
        only_cargo.len()
    )?;
    for (title, ids) in [
        ("Fail under the tool only", &only_tool),
        ("Fail under `cargo test` only", &only_cargo),
    ] {
        if ids.is_empty() {
            continue;
        }
        writeln!(text, "\n## {title}\n")?;
        for (binary, name) in ids.iter() {
            writeln!(text, "- `{binary}` `{name}`")?;
        }
    }
    std::fs::write(project.out.join("parity.md"), &text)?;
    print!("{text}");
    Ok(())
}
