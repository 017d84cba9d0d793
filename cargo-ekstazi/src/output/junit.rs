//! `--junit PATH`: a JUnit XML report for CI dashboards. Every test the
//! filters keep appears: those that ran with their outcome, and those that
//! did not as skipped, with the reason (unaffected, ignored, another
//! shard's, not started), so that a dashboard does not read a skipped test
//! as a vanished one.

use crate::run::scheduler::RunResult;
use crate::session::{Planned, Session};
use anyhow::{Context, Result};
use ekstazi_core::model::record::Outcome;
use ekstazi_core::selection::filter::Decision;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestRerun, TestSuite};
use std::path::Path;
use std::time::Duration;

/// The message of a test skipped because nothing it depends on changed.
pub const UNAFFECTED: &str = "unaffected: no dependency changed since it last passed";

pub fn write(
    path: &Path,
    session: &Session,
    plan: &[Planned],
    results: &[Option<&RunResult>],
    elapsed: Duration,
) -> Result<()> {
    let mut report = Report::new("cargo-ekstazi");
    report.set_time(elapsed);
    let mut suites: Vec<TestSuite> = Vec::new();
    for (planned, result) in plan.iter().zip(results) {
        let binary = &session.built.binaries[planned.case.binary].key;
        if suites.last().is_none_or(|s| s.name.as_str() != binary) {
            suites.push(TestSuite::new(binary.as_str()));
        }
        let suite = suites.last_mut().expect("just pushed");
        suite.add_test_case(case(binary, planned, *result, session));
    }
    report.add_test_suites(suites);
    let xml = report
        .to_string()
        .context("cannot serialise the JUnit report")?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, xml).with_context(|| format!("cannot write {}", path.display()))
}

fn case(
    binary: &str,
    planned: &Planned,
    result: Option<&RunResult>,
    session: &Session,
) -> TestCase {
    let reasons = planned
        .reasons
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let skipped = |message: String| {
        let mut status = TestCaseStatus::skipped();
        status.set_message(message);
        status
    };
    let status = match result {
        // A pass after a failure: nextest's way, a success with a flaky
        // failure before it.
        Some(result) if result.outcome == Outcome::Passed && result.flaky => {
            let mut status = TestCaseStatus::success();
            let mut rerun = TestRerun::new(NonSuccessKind::Failure);
            rerun.set_message("failed before it passed (--retries)");
            status.add_rerun(rerun);
            status
        }
        Some(result) if result.outcome == Outcome::Passed => TestCaseStatus::success(),
        Some(result) => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            let kind = if result.merge_conflict {
                "merge conflict"
            } else {
                result.outcome.as_str()
            };
            let message = if result.merge_conflict {
                format!(
                    "{}: merge conflict (it passed at every parent)",
                    result.outcome.as_str()
                )
            } else {
                result.outcome.as_str().to_owned()
            };
            status
                .set_message(message)
                .set_type(kind)
                .set_description(String::from_utf8_lossy(&result.output));
            status
        }
        None if planned.decision == Decision::Ignored => skipped("ignored".to_owned()),
        None if planned.unaffected() => skipped(match &planned.vouched {
            Some(vouch) => format!("{UNAFFECTED} ({vouch})"),
            None => UNAFFECTED.to_owned(),
        }),
        None if planned.elsewhere => skipped(format!(
            "affected ({reasons}), run by another shard (--partition {})",
            session
                .options
                .settings
                .partition
                .map(|p| p.to_string())
                .unwrap_or_default()
        )),
        None => skipped(format!(
            "affected ({reasons}), but not run: the run was interrupted"
        )),
    };
    let mut case = TestCase::new(planned.case.name.as_str(), status);
    case.set_classname(binary);
    if let Some(result) = result {
        // None when the tests ran as `cargo test` runs them: libtest gives
        // no time per test, and a zero would be a claim.
        if !result.duration.is_zero() {
            case.set_time(result.duration);
        }
        if result.outcome == Outcome::Passed && !reasons.is_empty() {
            case.add_property(("ekstazi.reasons", reasons.as_str()));
        }
    }
    case
}
