//! What the user sees: the selection, a line per finished test, failures
//! and the summary; and the `list` output, as a table or as JSON.

use crate::list::WHOLE_BINARY;
use crate::run::Finished;
use crate::session::{Planned, Session};
use ekstazi_core::record::Outcome;
use serde::Serialize;
use std::io::Write;
use std::time::Duration;

/// Counts for the summary line.
#[derive(Default)]
pub struct Tally {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
    pub skipped: usize,
    /// Stopped by an interrupt before they finished.
    pub interrupted: usize,
    /// Sum of the last recorded durations of skipped tests.
    pub saved: Duration,
}

pub fn test_label(session: &Session, planned: &Planned) -> String {
    let key = &session.built.binaries[planned.case.binary].key;
    if planned.case.name == WHOLE_BINARY {
        format!("{key} {WHOLE_BINARY}")
    } else {
        format!("{key} {}", planned.case.name)
    }
}

/// The line printed before tests run.
pub fn selection_line(selected: usize, skipped: usize, ignored: usize) -> String {
    let mut line = format!(
        "cargo-ekstazi: {selected} test{} selected, {skipped} skipped as unaffected",
        plural(selected)
    );
    if ignored > 0 {
        line.push_str(&format!(", {ignored} ignored"));
    }
    line
}

/// One line per finished test, in the spirit of cargo-nextest.
pub fn finished_line(label: &str, finished: &Finished) -> String {
    let status = match finished.outcome {
        Outcome::Passed => "PASS",
        Outcome::Failed => "FAIL",
        Outcome::Crashed => "CRASH",
        Outcome::TimedOut => "TIMEOUT",
    };
    format!(
        "{status:>12} [{:>8.3}s] {label}",
        finished.duration.as_secs_f64()
    )
}

/// A test stopped by an interrupt.
pub fn interrupted_line(label: &str, finished: &Finished) -> String {
    format!(
        "{:>12} [{:>8.3}s] {label}",
        "INTERRUPTED",
        finished.duration.as_secs_f64()
    )
}

/// Prints each failure's output once, at the end.
pub fn print_failures(out: &mut impl Write, failures: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    if failures.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nfailures:\n")?;
    for (label, output) in failures {
        writeln!(out, "---- {label} output ----")?;
        out.write_all(output)?;
        if !output.ends_with(b"\n") {
            writeln!(out)?;
        }
        writeln!(out)?;
    }
    writeln!(out, "failures:")?;
    for (label, _) in failures {
        writeln!(out, "    {label}")?;
    }
    Ok(())
}

pub fn summary_line(tally: &Tally, elapsed: Duration) -> String {
    let verdict = if tally.failed == 0 { "ok" } else { "FAILED" };
    let selected = tally.passed + tally.failed;
    let mut line = format!(
        "test result: {verdict}. {selected} selected: {} passed; {} failed; {} ignored; {} skipped as unaffected",
        tally.passed, tally.failed, tally.ignored, tally.skipped
    );
    if tally.skipped > 0 {
        line.push_str(&format!(" (~{:.2}s saved)", tally.saved.as_secs_f64()));
    }
    line.push_str(&format!("; finished in {:.2}s", elapsed.as_secs_f64()));
    line
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `cargo ekstazi list --json`: the stable machine-readable selection.
#[derive(Serialize)]
pub struct ListJson {
    pub total: usize,
    pub selected: usize,
    pub tests: Vec<ListedTest>,
}

#[derive(Serialize)]
pub struct ListedTest {
    pub binary: String,
    pub name: String,
    pub selected: bool,
    pub reasons: Vec<String>,
    /// The test reached another machine (or what `.config/ekstazi.toml`
    /// counts as one) when it last ran.
    pub external: bool,
    /// What it reached, when external.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub external_peers: Vec<String>,
    /// With `--verbose`: accesses of its last run that were not dependencies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored: Option<Vec<IgnoredAccess>>,
}

#[derive(Serialize)]
pub struct IgnoredAccess {
    pub what: String,
    pub why: String,
}

pub fn list_json(session: &Session, plan: &[Planned], verbose: bool) -> ListJson {
    let policy = session.config.network_policy();
    let tests: Vec<ListedTest> = plan
        .iter()
        .filter(|p| p.decision == ekstazi_core::filter::Decision::Run)
        .map(|p| {
            let external_peers = p
                .last
                .as_ref()
                .map(|r| ekstazi_core::select::external_peers(r, &policy))
                .unwrap_or_default();
            ListedTest {
                binary: session.built.binaries[p.case.binary].key.clone(),
                name: p.case.name.clone(),
                selected: p.selected(),
                reasons: p.reasons.iter().map(ToString::to_string).collect(),
                external: !external_peers.is_empty(),
                external_peers,
                ignored: verbose.then(|| {
                    p.last
                        .iter()
                        .flat_map(|r| &r.ignored)
                        .map(|i| IgnoredAccess {
                            what: i.what.clone(),
                            why: i.why.clone(),
                        })
                        .collect()
                }),
            }
        })
        .collect();
    ListJson {
        total: tests.len(),
        selected: tests.iter().filter(|t| t.selected).count(),
        tests,
    }
}

/// `cargo ekstazi list`: the same as a table.
pub fn print_list_table(out: &mut impl Write, list: &ListJson) -> std::io::Result<()> {
    let width = list
        .tests
        .iter()
        .map(|t| t.binary.len() + 1 + t.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    writeln!(out, "{:<8} {:<width$}  REASONS", "RUN", "TEST")?;
    for test in &list.tests {
        let label = format!("{} {}", test.binary, test.name);
        let run = if test.selected { "run" } else { "skip" };
        let mut reasons = if test.reasons.is_empty() {
            "unaffected".to_owned()
        } else {
            test.reasons.join("; ")
        };
        if test.external && !test.reasons.iter().any(|r| r.starts_with("external: ")) {
            reasons.push_str(&format!(" (external: {})", test.external_peers.join(", ")));
        }
        writeln!(out, "{run:<8} {label:<width$}  {reasons}")?;
        for ignored in test.ignored.iter().flatten() {
            writeln!(
                out,
                "{:8}   ignored: {} ({})",
                "", ignored.what, ignored.why
            )?;
        }
    }
    writeln!(out, "\n{} of {} tests selected", list.selected, list.total)
}

/// `--report-json`: what ran, why, how it ended, and where the time went.
#[derive(Serialize)]
pub struct RunJson {
    /// Seconds per stage (`build`, `analysis`, `run`, ...), and `total`.
    pub timings: std::collections::BTreeMap<String, f64>,
    pub tests: Vec<RunTest>,
}

#[derive(Serialize)]
pub struct RunTest {
    pub binary: String,
    pub name: String,
    pub ignored: bool,
    pub selected: bool,
    pub reasons: Vec<String>,
    /// `passed`, `failed`, `crashed`, `timed out`; absent for a test that did not run.
    pub outcome: Option<&'static str>,
    pub duration: Option<f64>,
}

pub fn run_json(
    session: &Session,
    results: &[(&Planned, Option<(Outcome, Duration)>)],
    total: Duration,
) -> RunJson {
    let mut timings: std::collections::BTreeMap<String, f64> = session
        .timings
        .iter()
        .map(|(stage, took)| ((*stage).to_owned(), took.as_secs_f64()))
        .collect();
    timings.insert("total".to_owned(), total.as_secs_f64());
    let tests = results
        .iter()
        .map(|(planned, result)| RunTest {
            binary: session.built.binaries[planned.case.binary].key.clone(),
            name: planned.case.name.clone(),
            ignored: planned.decision == ekstazi_core::filter::Decision::Ignored,
            selected: planned.selected(),
            reasons: planned.reasons.iter().map(ToString::to_string).collect(),
            outcome: result.map(|(outcome, _)| outcome.as_str()),
            duration: result.map(|(_, took)| took.as_secs_f64()),
        })
        .collect();
    RunJson { timings, tests }
}
