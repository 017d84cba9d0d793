//! What the user sees: the selection, a line per finished test, failures
//! and the summary; and the `list` output, as a table or as JSON.

use crate::cargo::libtest::WHOLE_BINARY;
use crate::run::scheduler::Finished;
use crate::run::scheduler::RunResult;
use crate::session::{Planned, Session};
use crate::style::{BOLD, FAIL, PASS, SKIP, SLOW};
use ekstazi_core::model::record::Outcome;
use ekstazi_core::options::settings::Partition;
use ekstazi_core::selection::filter::Decision;
use serde::Serialize;
use std::io::Write;
use std::time::Duration;

/// Counts for the summary line.
#[derive(Default)]
pub struct Tally {
    /// Selected to run in this run (not the tests of other shards).
    pub selected: usize,
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
    pub skipped: usize,
    /// Stopped by an interrupt before they finished.
    pub interrupted: usize,
    /// Affected, but run by another shard of a partitioned run.
    pub elsewhere: usize,
    /// Sum of the last recorded durations of skipped tests.
    pub saved: Duration,
    /// Labels of the tests that ran longer than the slow threshold.
    pub slow: Vec<String>,
    /// Labels of the tests that passed only after failing (`--retries`).
    pub flaky: Vec<String>,
}

impl Tally {
    /// The counts the plan decides before anything runs.
    pub fn of_plan(plan: &[Planned]) -> Tally {
        let mut tally = Tally::default();
        for planned in plan {
            if planned.selected() {
                tally.selected += 1;
            }
            if planned.decision == Decision::Ignored {
                tally.ignored += 1;
            } else if planned.unaffected() {
                tally.skipped += 1;
                tally.saved += planned
                    .last
                    .as_ref()
                    .map_or(Duration::ZERO, |r| r.duration());
            } else if planned.elsewhere {
                tally.elsewhere += 1;
            }
        }
        tally
    }
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
pub fn selection_line(tally: &Tally, selected: usize, partition: Option<Partition>) -> String {
    let mut line = format!(
        "{BOLD}cargo-ekstazi:{BOLD:#} {selected} test{} selected, {} skipped as unaffected",
        plural(selected),
        tally.skipped
    );
    if tally.ignored > 0 {
        line.push_str(&format!(", {} ignored", tally.ignored));
    }
    if let Some(partition) = partition {
        line.push_str(&format!(
            ", {} for other shards (--partition {partition})",
            tally.elsewhere
        ));
    }
    line
}

/// Says plainly why nothing will run, when nothing will.
pub fn nothing_to_run(tally: &Tally, selected: usize, planned: usize) -> Option<String> {
    if selected > 0 {
        return None;
    }
    Some(if planned == 0 {
        "cargo-ekstazi: no test matches; nothing to run".to_owned()
    } else if tally.skipped > 0 && tally.elsewhere == 0 {
        "cargo-ekstazi: nothing to run: no test's dependencies changed since it last passed \
         (--forceall runs them all)"
            .to_owned()
    } else if tally.elsewhere > 0 {
        "cargo-ekstazi: nothing to run in this shard: the affected tests belong to the others"
            .to_owned()
    } else {
        "cargo-ekstazi: nothing to run: every matching test is ignored".to_owned()
    })
}

/// One line per finished test, in the spirit of cargo-nextest.
pub fn finished_line(label: &str, finished: &Finished) -> String {
    if finished.flaky() {
        return format!(
            "{SLOW}{:>12}{SLOW:#} [{:>8.3}s] {label} (passed on attempt {})",
            "FLAKY",
            finished.duration.as_secs_f64(),
            finished.attempts
        );
    }
    let (status, style) = match finished.outcome {
        Outcome::Passed => ("PASS", PASS),
        Outcome::Failed => ("FAIL", FAIL),
        Outcome::Crashed => ("CRASH", FAIL),
        Outcome::TimedOut => ("TIMEOUT", FAIL),
    };
    format!(
        "{style}{status:>12}{style:#} [{:>8.3}s] {label}",
        finished.duration.as_secs_f64()
    )
}

/// A test still running past the slow threshold, as cargo-nextest says it.
pub fn slow_line(label: &str, elapsed: Duration) -> String {
    format!(
        "{SLOW}{:>12}{SLOW:#} [>{:>7.3}s] {label}",
        "SLOW",
        elapsed.as_secs_f64()
    )
}

/// A test stopped by an interrupt.
pub fn interrupted_line(label: &str, finished: &Finished) -> String {
    format!(
        "{FAIL}{:>12}{FAIL:#} [{:>8.3}s] {label}",
        "INTERRUPTED",
        finished.duration.as_secs_f64()
    )
}

/// Prints each failure's output once, at the end.
pub fn print_failures(out: &mut impl Write, failures: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    if failures.is_empty() {
        return Ok(());
    }
    writeln!(out, "\n{BOLD}failures:{BOLD:#}\n")?;
    for (label, output) in failures {
        writeln!(out, "{FAIL}---- {label} output ----{FAIL:#}")?;
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

/// The records that could not be written (each test runs again next time),
/// then the summary line.
pub fn print_summary(
    out: &mut impl std::io::Write,
    record_errors: &[String],
    tally: &Tally,
    elapsed: Duration,
) -> std::io::Result<()> {
    for error in record_errors {
        crate::style::warn(format!(
            "could not record {error}; the test will run again next time"
        ));
    }
    writeln!(out, "\n{}", summary_line(tally, elapsed))
}

pub fn summary_line(tally: &Tally, elapsed: Duration) -> String {
    let verdict = if tally.failed == 0 {
        format!("{PASS}ok{PASS:#}")
    } else {
        format!("{FAIL}FAILED{FAIL:#}")
    };
    // What ran is said apart from what was selected only when they differ:
    // a runner may stop early (nextest's fail-fast, an interrupt).
    let ran = tally.passed + tally.failed + tally.interrupted;
    let mut line = if ran == tally.selected {
        format!("test result: {verdict}. {} selected: ", tally.selected)
    } else {
        format!(
            "test result: {verdict}. {} selected, {ran} ran: ",
            tally.selected
        )
    };
    line.push_str(&format!(
        "{} passed; {} failed; ",
        tally.passed, tally.failed
    ));
    if tally.interrupted > 0 {
        line.push_str(&format!("{} interrupted; ", tally.interrupted));
    }
    line.push_str(&format!(
        "{} ignored; {SKIP}{} skipped as unaffected{SKIP:#}",
        tally.ignored, tally.skipped
    ));
    if tally.skipped > 0 {
        line.push_str(&format!(" (~{:.2}s saved)", tally.saved.as_secs_f64()));
    }
    if tally.elsewhere > 0 {
        line.push_str(&format!("; {} for other shards", tally.elsewhere));
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
    /// Format of this object; bumped on an incompatible change.
    pub version: u32,
    /// Tests considered (not ignored, matching the filters).
    pub total: usize,
    /// How many of them would run.
    pub selected: usize,
    /// With `--selected` or `--skipped`, only those.
    pub tests: Vec<ListedTest>,
}

/// The version of `list --json`'s output (docs/reference/json.md).
pub const LIST_JSON_VERSION: u32 = 1;

/// Which tests `list` shows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Show {
    All,
    Selected,
    Skipped,
}

#[derive(Serialize)]
pub struct ListedTest {
    pub binary: String,
    pub name: String,
    pub selected: bool,
    pub reasons: Vec<String>,
    /// Affected, but another shard runs it (`--partition`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub other_shard: bool,
    /// Skipped on the word of a record filed under another commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vouched_by: Option<ekstazi_core::storage::history::candidates::Vouch>,
    /// Seconds its last recorded run took.
    pub last_duration: Option<f64>,
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

/// `unaffected`, or `unaffected (as at 1a2b3c4, parent 2)` when a record
/// filed under another commit vouched.
pub fn unaffected(vouch: Option<&ekstazi_core::storage::history::candidates::Vouch>) -> String {
    match vouch {
        Some(vouch) => format!("unaffected ({vouch})"),
        None => "unaffected".to_owned(),
    }
}

#[derive(Serialize)]
pub struct IgnoredAccess {
    pub what: String,
    pub why: String,
}

pub fn list_json(session: &Session, plan: &[Planned], verbose: bool, show: Show) -> ListJson {
    let policy = &session.network_policy;
    let considered: Vec<&Planned> = plan
        .iter()
        .filter(|p| p.decision == Decision::Run)
        .collect();
    let tests: Vec<ListedTest> = considered
        .iter()
        .filter(|p| match show {
            Show::All => true,
            Show::Selected => p.selected(),
            Show::Skipped => p.unaffected(),
        })
        .map(|p| {
            let external_peers = p
                .last
                .as_ref()
                .map(|r| ekstazi_core::selection::select::external_among(r.network(), policy))
                .unwrap_or_default();
            ListedTest {
                binary: session.built.binaries[p.case.binary].key.clone(),
                name: p.case.name.clone(),
                selected: p.selected(),
                reasons: p.reasons.iter().map(ToString::to_string).collect(),
                other_shard: p.elsewhere,
                vouched_by: p.vouched.clone(),
                last_duration: p.last.as_ref().map(|r| r.duration().as_secs_f64()),
                external: !external_peers.is_empty(),
                external_peers,
                // Read whole for this alone where only its index entry was
                // (verbose listings are rare, and the entry leaves them out).
                ignored: verbose.then(|| {
                    session
                        .whole_last(p)
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
        version: LIST_JSON_VERSION,
        total: considered.len(),
        selected: considered.iter().filter(|p| p.selected()).count(),
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
    writeln!(
        out,
        "{BOLD}{:<8} {:<width$}  REASONS{BOLD:#}",
        "RUN", "TEST"
    )?;
    for test in &list.tests {
        let label = format!("{} {}", test.binary, test.name);
        let run = match (test.selected, test.other_shard) {
            (true, _) => format!("{PASS}run{PASS:#}     "),
            (false, true) => format!("{SKIP}shard{SKIP:#}   "),
            (false, false) => format!("{SKIP}skip{SKIP:#}    "),
        };
        let mut reasons = if test.reasons.is_empty() {
            unaffected(test.vouched_by.as_ref())
        } else {
            test.reasons.join("; ")
        };
        if test.external && !test.reasons.iter().any(|r| r.starts_with("external: ")) {
            reasons.push_str(&format!(" (external: {})", test.external_peers.join(", ")));
        }
        writeln!(out, "{run} {label:<width$}  {reasons}")?;
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
    /// Nothing the build reads changed since the last build: cargo was not
    /// started, and that build's binaries ran.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub build_unchanged: bool,
    /// The tests ran as `cargo test` runs them, for their verdicts alone:
    /// no test's duration is known, and their records are written by a
    /// run in the background.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub verdict_first: bool,
    /// With `--audit`: what the selection would have skipped, the misses,
    /// and the time it would have saved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditJson>,
    pub binaries: Vec<RunBinary>,
    pub tests: Vec<RunTest>,
}

/// `--audit`: the tests the selection would have skipped, those of them
/// that failed (the misses), and what they took in this run.
#[derive(Serialize)]
pub struct AuditJson {
    pub would_skip: Vec<String>,
    pub missed: Vec<String>,
    pub seconds_saved: f64,
}

/// A test binary the run built, and the workspace's programs its tests
/// can run (`CARGO_BIN_EXE_*`).
#[derive(Serialize)]
pub struct RunBinary {
    pub binary: String,
    pub path: std::path::PathBuf,
    pub programs: Vec<std::path::PathBuf>,
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
    /// Seconds its last recorded run took (of the vouching record, when
    /// one vouched): for a skipped test, the time its skip saved.
    pub last_duration: Option<f64>,
    /// It passed only after failing (`--retries`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub flaky: bool,
    /// Skipped on the word of a record filed under another commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vouched_by: Option<ekstazi_core::storage::history::candidates::Vouch>,
}

pub fn run_json(
    session: &Session,
    plan: &[Planned],
    results: &[Option<&RunResult>],
    total: Duration,
) -> RunJson {
    let mut timings: std::collections::BTreeMap<String, f64> = session
        .timings
        .iter()
        .map(|(stage, took)| ((*stage).to_owned(), took.as_secs_f64()))
        .collect();
    timings.insert("total".to_owned(), total.as_secs_f64());
    let tests = plan
        .iter()
        .zip(results)
        .map(|(planned, result)| RunTest {
            binary: session.built.binaries[planned.case.binary].key.clone(),
            name: planned.case.name.clone(),
            ignored: planned.decision == Decision::Ignored,
            selected: planned.selected(),
            reasons: planned.reasons.iter().map(ToString::to_string).collect(),
            outcome: result.map(|r| r.outcome.as_str()),
            duration: result.map(|r| r.duration.as_secs_f64()),
            last_duration: planned.last.as_ref().map(|r| r.duration().as_secs_f64()),
            flaky: result.is_some_and(|r| r.flaky),
            vouched_by: planned.vouched.clone(),
        })
        .collect();
    let binaries = session
        .built
        .binaries
        .iter()
        .filter(|b| b.doctests.is_none())
        .map(|b| RunBinary {
            binary: b.key.clone(),
            path: b.path.clone(),
            programs: b.bin_exes.iter().map(|(_, path)| path.clone()).collect(),
        })
        .collect();
    RunJson {
        timings,
        build_unchanged: session.build_unchanged,
        verdict_first: false,
        audit: None,
        binaries,
        tests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(tally: &Tally) -> String {
        let line = summary_line(tally, Duration::from_secs(1));
        anstream::adapter::strip_str(&line).to_string()
    }

    #[test]
    fn the_summary_counts_what_was_selected_and_what_ran() {
        let mut tally = Tally {
            selected: 14,
            passed: 2,
            failed: 2,
            skipped: 3,
            ..Tally::default()
        };
        assert!(
            summary(&tally).starts_with(
                "test result: FAILED. 14 selected, 4 ran: 2 passed; 2 failed; 0 ignored; \
                 3 skipped as unaffected"
            ),
            "{}",
            summary(&tally)
        );
        tally.interrupted = 1;
        assert!(
            summary(&tally).contains("14 selected, 5 ran: 2 passed; 2 failed; 1 interrupted;"),
            "{}",
            summary(&tally)
        );
        let all = Tally {
            selected: 4,
            passed: 4,
            ..Tally::default()
        };
        assert!(
            summary(&all).starts_with("test result: ok. 4 selected: 4 passed; 0 failed;"),
            "{}",
            summary(&all)
        );
    }
}
