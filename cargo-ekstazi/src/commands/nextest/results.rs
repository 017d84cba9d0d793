//! Reading each test's outcome and duration back from nextest's JUnit report.

use anyhow::{Context, Result};
use ekstazi_core::model::record::Outcome;
use quick_junit::{NonSuccessKind, Report, TestCaseStatus};
use std::time::{Duration, SystemTime};

/// What nextest reported for one test.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// The binary id (the test case's class name).
    pub binary: String,
    pub name: String,
    /// What its record says.
    pub outcome: Outcome,
    /// It failed, then passed on a retry: recorded as failed.
    pub flaky: bool,
    /// Nextest counts it as passed (a flaky test too, unless configured
    /// with `flaky-result = "fail"`).
    pub passed: bool,
    /// Of the attempt that decided the outcome (the first, for a flaky test).
    pub duration: Duration,
    /// When that attempt started, if nextest said.
    pub started: Option<SystemTime>,
}

/// The tests of a JUnit report that ran, with what the record should say;
/// skipped ones are left out.
pub fn parse(xml: &str) -> Result<Vec<Reported>> {
    let report = Report::deserialize_from_str(xml).context("cannot read nextest's JUnit report")?;
    let mut out = Vec::new();
    for suite in &report.test_suites {
        for case in &suite.test_cases {
            let binary = case
                .classname
                .as_ref()
                .map_or(suite.name.as_str(), |c| c.as_str());
            let (outcome, flaky, first) = match &case.status {
                TestCaseStatus::Skipped { .. } => continue,
                TestCaseStatus::Success { flaky_runs } if flaky_runs.is_empty() => {
                    (Outcome::Passed, false, None)
                }
                // Passed on a retry: not a pass. The first attempt's failure decides.
                TestCaseStatus::Success { flaky_runs } => {
                    let first = &flaky_runs[0];
                    (
                        non_success(first.kind, first.ty.as_deref()),
                        true,
                        Some((first.time, first.timestamp)),
                    )
                }
                TestCaseStatus::NonSuccess {
                    kind, ty, reruns, ..
                } => {
                    let outcome = non_success(*kind, ty.as_deref());
                    // `flaky-result = "fail"`: a failure whose reruns are the
                    // failed attempts before the pass.
                    let flaky = reruns.kind == quick_junit::FlakyOrRerun::Flaky;
                    let outcome = if flaky && outcome == Outcome::Passed {
                        Outcome::Failed
                    } else {
                        outcome
                    };
                    (outcome, flaky, None)
                }
            };
            let (time, timestamp) = first.unwrap_or((case.time, case.timestamp));
            let passed =
                matches!(case.status, TestCaseStatus::Success { .. }) || outcome == Outcome::Passed;
            out.push(Reported {
                binary: binary.to_owned(),
                name: case.name.as_str().to_owned(),
                outcome,
                flaky,
                passed,
                duration: time.unwrap_or_default(),
                started: timestamp.map(SystemTime::from),
            });
        }
    }
    Ok(out)
}

/// The outcome of a test nextest did not count as a plain pass, from the
/// failure's type (nextest's words: `test failure with exit code 101`,
/// `test abort`, `test timeout`, `test passed but leaked handles`, ...).
fn non_success(kind: NonSuccessKind, ty: Option<&str>) -> Outcome {
    let ty = ty.unwrap_or_default();
    if ty.contains("passed but leaked handles") {
        // Nextest passes it (LEAK): the test passed, and a process it left
        // behind held its output open; `cargo ekstazi test` records it passed too.
        Outcome::Passed
    } else if ty.contains("timeout") {
        Outcome::TimedOut
    } else if ty.contains("abort") || kind == NonSuccessKind::Error {
        Outcome::Crashed
    } else {
        Outcome::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as nextest 0.9.143 writes it (trimmed): a pass, a failure,
    /// a flaky pass, a timeout, a crash, a leaky pass and a skipped test.
    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="7" failures="3" errors="1" uuid="4fc68d05-3b0b-46ca-8a6a-57ba557d8983" timestamp="2026-08-05T00:50:00.000+00:00" time="1.2">
    <testsuite name="alpha" tests="2" disabled="0" errors="0" failures="1">
        <testcase name="tests::doubles" classname="alpha" timestamp="2026-08-05T00:50:00.100+00:00" time="0.035">
        </testcase>
        <testcase name="tests::triples" classname="alpha" timestamp="2026-08-05T00:50:00.100+00:00" time="0.041">
            <failure type="test failure with exit code 101">thread 'tests::triples' panicked</failure>
        </testcase>
    </testsuite>
    <testsuite name="beta::files" tests="5" disabled="0" errors="1" failures="2">
        <testcase name="flaky" classname="beta::files" timestamp="2026-08-05T00:50:01.000+00:00" time="0.020">
            <flakyFailure type="test failure with exit code 101" timestamp="2026-08-05T00:50:00.500+00:00" time="0.019">first attempt failed</flakyFailure>
        </testcase>
        <testcase name="slow" classname="beta::files" timestamp="2026-08-05T00:50:00.100+00:00" time="5.000">
            <failure type="test timeout"/>
        </testcase>
        <testcase name="crashes" classname="beta::files" timestamp="2026-08-05T00:50:00.100+00:00" time="0.010">
            <failure type="test abort"/>
        </testcase>
        <testcase name="leaks" classname="beta::files" timestamp="2026-08-05T00:50:00.100+00:00" time="0.110">
            <error type="test passed but leaked handles"/>
        </testcase>
        <testcase name="skipped" classname="beta::files" time="0.000">
            <skipped message="Skipped: test ignored"/>
        </testcase>
    </testsuite>
</testsuites>
"#;

    #[test]
    fn outcomes_durations_and_start_times_are_read() {
        let reported = parse(REPORT).unwrap();
        let summary: Vec<(&str, &str, Outcome, bool, bool)> = reported
            .iter()
            .map(|r| {
                let (binary, name) = (r.binary.as_str(), r.name.as_str());
                (binary, name, r.outcome, r.flaky, r.passed)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("alpha", "tests::doubles", Outcome::Passed, false, true),
                ("alpha", "tests::triples", Outcome::Failed, false, false),
                ("beta::files", "flaky", Outcome::Failed, true, true),
                ("beta::files", "slow", Outcome::TimedOut, false, false),
                ("beta::files", "crashes", Outcome::Crashed, false, false),
                ("beta::files", "leaks", Outcome::Passed, false, true),
            ]
        );
        assert_eq!(reported[0].duration, Duration::from_millis(35));
        let started = reported[0].started.unwrap();
        let epoch = started.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(epoch.as_millis() % 1000, 100);
        // The flaky test's first attempt is the one that counts.
        assert_eq!(reported[2].duration, Duration::from_millis(19));
    }

    #[test]
    fn a_flaky_failure_is_a_failure() {
        let xml = r#"<testsuites name="nextest-run" tests="1" failures="1" errors="0">
    <testsuite name="a" tests="1" disabled="0" errors="0" failures="1">
        <testcase name="t" classname="a" time="0.020">
            <failure type="flaky failure" message="test passed on attempt 2/2 but is configured to fail when flaky"/>
            <flakyFailure type="test failure with exit code 101" time="0.019"/>
        </testcase>
    </testsuite>
</testsuites>"#;
        let reported = parse(xml).unwrap();
        assert_eq!(reported.len(), 1);
        assert_eq!(reported[0].outcome, Outcome::Failed);
        assert!(reported[0].flaky);
        assert!(!reported[0].passed);
        assert!(parse("<not junit").is_err());
    }
}
