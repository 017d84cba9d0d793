//! `cargo xtask eval noise`: what reruns when nothing changed. At one
//! commit of a real project, `cargo ekstazi test` runs once from an empty
//! state (everything), then again and again with nothing touched. From the
//! second run on, only the tests that did not pass in the run before may
//! be selected; every other selection is noise, printed with its reasons so
//! that it can be fixed or documented as a blind spot.
//!
//! The runs are a developer's: doctests included, the same `TMPDIR` (the
//! run's own, quiet, not emptied between runs), the same state and target
//! directory. Output: `<out>/noise.md`, and each run's log and report.

use super::evidence::{self, Report, TestId, log_file};
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[derive(clap::Args)]
pub struct NoiseArgs {
    /// The commit to run at
    #[arg(long, default_value = "HEAD")]
    pub rev: String,
    /// Runs in all (the first runs everything)
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    #[command(flatten)]
    pub project: evidence::Project,
}

/// One run after the first: what it selected, split by why.
struct Rerun {
    selected: usize,
    /// Selected because they did not pass in the run before: expected.
    failures: usize,
    /// Selected for any other reason: noise.
    noise: Vec<(TestId, Vec<String>)>,
    /// Tests that did not pass in this run (the next run's expected
    /// selections).
    failed_now: usize,
    wall: f64,
}

pub fn noise(args: &NoiseArgs) -> Result<()> {
    let (ekstazi, scratch) = args.project.scratch_setup()?;
    let head = evidence::checkout_headline(&scratch, &args.rev)?;
    let state = args.project.out.join("state");
    let target = args.project.out.join("target");
    // A state left by an earlier invocation would make the first run a
    // rerun.
    let _ = std::fs::remove_dir_all(&state);
    let tmp = evidence::private_tmp(&scratch);
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;

    let mut previous: Option<Report> = None;
    let mut reruns = Vec::new();
    let mut first = (0usize, 0usize, 0.0f64);
    for run in 1..=args.runs.max(2) {
        eprintln!("run {run} at {}", head);
        let report_path = args.project.out.join(format!("run-{run}.json"));
        let (report, wall) = ekstazi_run(
            args,
            &ekstazi,
            &scratch,
            &state,
            &target,
            &tmp,
            &report_path,
            &args.project.out.join(format!("run-{run}.log")),
        )?;
        let failed_now = report
            .in_scope()
            .filter(|t| t.selected && t.outcome.as_deref().is_some_and(|o| o != "passed"))
            .count();
        match &previous {
            None => first = (report.in_scope().count(), failed_now, wall),
            Some(before) => {
                let rerun = classify(before, &report, failed_now, wall);
                eprintln!(
                    "  {} selected: {} did not pass before, {} noise",
                    rerun.selected,
                    rerun.failures,
                    rerun.noise.len()
                );
                reruns.push(rerun);
            }
        }
        previous = Some(report);
    }

    let text = render(
        &super::replay::project_name(&args.project.repo),
        &head,
        &args.project.cargo_args,
        first,
        &reruns,
    );
    std::fs::write(args.project.out.join("noise.md"), &text)?;
    print!("{text}");
    Ok(())
}

/// One `cargo ekstazi test` with its report; doctests included, `TMPDIR`
/// kept.
#[allow(clippy::too_many_arguments)]
fn ekstazi_run(
    args: &NoiseArgs,
    ekstazi: &Path,
    dir: &Path,
    state: &Path,
    target: &Path,
    tmp: &Path,
    report: &Path,
    log: &Path,
) -> Result<(Report, f64)> {
    let _ = std::fs::remove_file(report);
    let clock = Instant::now();
    Command::new(ekstazi)
        .args(["ekstazi", "test", "--state-dir"])
        .arg(state)
        .arg("--report-json")
        .arg(report)
        .arg("--timeout")
        .arg(args.project.timeout.as_secs().max(1).to_string())
        .args(&args.project.cargo_args)
        .current_dir(dir)
        .env("TMPDIR", tmp)
        .env("CARGO_TARGET_DIR", target)
        .stdout(log_file(log)?)
        .stderr(log_file(log)?)
        .status()
        .with_context(|| format!("cannot run {}", ekstazi.display()))?;
    let wall = clock.elapsed().as_secs_f64();
    let bytes = std::fs::read(report)
        .with_context(|| format!("cargo ekstazi test wrote no report (see {})", log.display()))?;
    Ok((serde_json::from_slice(&bytes)?, wall))
}

fn classify(before: &Report, now: &Report, failed_now: usize, wall: f64) -> Rerun {
    let outcome_before: HashMap<(&str, &str), Option<&str>> = before
        .in_scope()
        .map(|t| ((t.binary.as_str(), t.name.as_str()), t.outcome.as_deref()))
        .collect();
    let mut failures = 0;
    let mut noise = Vec::new();
    let selected: Vec<_> = now.in_scope().filter(|t| t.selected).collect();
    for test in &selected {
        // A test skipped before has its outcome from the run it last ran
        // in, which passed (else it would not have been skipped).
        let did_not_pass = outcome_before
            .get(&(test.binary.as_str(), test.name.as_str()))
            .copied()
            .flatten()
            .is_some_and(|o| o != "passed");
        if did_not_pass {
            failures += 1;
        } else {
            noise.push((
                (test.binary.clone(), test.name.clone()),
                test.reasons.clone(),
            ));
        }
    }
    noise.sort();
    Rerun {
        selected: selected.len(),
        failures,
        noise,
        failed_now,
        wall,
    }
}

fn render(
    project: &str,
    head: &str,
    cargo_args: &[String],
    (tests, failed_first, wall_first): (usize, usize, f64),
    reruns: &[Rerun],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{project} at {head} (`cargo ekstazi test {}`): {tests} tests and doctest units",
        cargo_args.join(" ")
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| run | selected | of them, not passed in the run before | other (noise) | not passed in this run | wall |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| 1 | {tests} (empty state) | | | {failed_first} | {wall_first:.1}s |"
    );
    for (i, r) in reruns.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1}s |",
            i + 2,
            r.selected,
            r.failures,
            r.noise.len(),
            r.failed_now,
            r.wall
        );
    }
    for (i, r) in reruns.iter().enumerate() {
        if r.noise.is_empty() {
            continue;
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "Noise in run {}:", i + 2);
        for ((binary, name), reasons) in &r.noise {
            let _ = writeln!(out, "- `{binary}` `{name}`: {}", reasons.join("; "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(tests: &[(&str, bool, Option<&str>, &[&str])]) -> Report {
        let tests: Vec<serde_json::Value> = tests
            .iter()
            .map(|(name, selected, outcome, reasons)| {
                serde_json::json!({
                    "binary": "b", "name": name, "ignored": false,
                    "selected": selected, "outcome": outcome, "reasons": reasons,
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({"timings": {}, "tests": tests})).unwrap()
    }

    #[test]
    fn a_rerun_of_a_failure_is_expected_and_anything_else_is_noise() {
        let before = report(&[
            ("fails", true, Some("failed"), &[]),
            ("passes", true, Some("passed"), &[]),
            ("skipped", false, None, &["unaffected"]),
        ]);
        let now = report(&[
            ("fails", true, Some("failed"), &["failed last time"]),
            ("passes", true, Some("passed"), &["directory changed: /tmp"]),
            ("skipped", false, None, &[]),
        ]);
        let rerun = classify(&before, &now, 1, 1.0);
        assert_eq!((rerun.selected, rerun.failures), (2, 1));
        assert_eq!(
            rerun.noise,
            vec![(
                ("b".to_owned(), "passes".to_owned()),
                vec!["directory changed: /tmp".to_owned()]
            )]
        );
    }
}
