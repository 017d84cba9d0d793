//! `cargo ekstazi test --verdict-first`: the selected tests' verdicts as
//! soon as `cargo test` would give them, their recording after.
//!
//! The selection is the ordinary one. The selected tests then run as
//! `cargo test` runs them, one process per binary ([`verdicts::run`]),
//! and the command ends with their verdicts. Recording them is a second run
//! of the same command, in the background at the lowest priority
//! ([`background::spawn`]), which runs them again one process each, under
//! the shim. Until it has recorded a test, that test keeps its old record,
//! which does not vouch for the changed code: it runs again. A later run
//! stops the recording before it builds. A test that failed in the
//! verdicts has its record marked failed at once, before the recording
//! starts: should the recording not get to it, a record that vouched for
//! the tree as it is (`--forceall`, an always-run test) would otherwise
//! skip a test the user just saw fail.
//!
//! For the local loop. `--report-json` says what was selected and each
//! verdict, with no test's duration; a run that writes JUnit (a CI run)
//! records as it goes.
//!
//! A run whose records nobody keeps (`--no-record`: a pull request's job,
//! whose state is the base branch's and is thrown away after) needs no
//! process per test either: it runs the same way and ends with the
//! verdicts ([`After::Nothing`]), with no recording after.

use crate::output::report::{self, Tally};
use crate::run::background;
use crate::run::scheduler::RunResult;
use crate::run::verdicts::{self, VerdictConfig};
use crate::session::{Planned, Session};
use crate::style;
use anyhow::{Context, Result};
use ekstazi_core::model::record::Outcome;
use ekstazi_core::storage::store::Loaded;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What follows the verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// The recording, in the background (`--verdict-first`).
    Record,
    /// Nothing: the run records nothing (`--no-record`).
    Nothing,
}

/// Whether a run that records nothing runs as `cargo test` does (one
/// process per binary) rather than a process per test: unless an option
/// needs a process per test, which is then said once.
pub fn unrecorded_applies(session: &Session) -> bool {
    let settings = &session.options.settings;
    if !settings.no_record || settings.skipme {
        return false;
    }
    let needs = if settings.retries > 0 {
        Some("--retries")
    } else if settings.timeout.is_some() {
        Some("--timeout")
    } else {
        None
    };
    if let Some(option) = needs {
        style::note(format!(
            "a process per test, as a recording run: {option} needs one \
             (without it, --no-record runs the tests as `cargo test` does)"
        ));
        return false;
    }
    true
}

/// Whether this run gives verdicts first: asked for, and there is
/// something to record.
pub fn applies(session: &Session) -> bool {
    let options = &session.options;
    let settings = &options.settings;
    if !settings.verdict_first || settings.no_record || settings.skipme {
        return false;
    }
    if style::on_ci() {
        style::note(
            "verdicts first is off on CI (`CI` is set): the job would end before its recording",
        );
        return false;
    }
    if options.junit.is_some() {
        style::note(
            "verdicts first is off in a run that writes JUnit (--junit): \
             the report needs each test's duration",
        );
        return false;
    }
    true
}

/// The verdicts, the summary, and the recording started in the background.
pub fn run(
    session: &mut Session,
    (plan, selected): (&[Planned], &[&Planned]),
    mut tally: Tally,
    (start, after): (Instant, After),
    stdout: &mut impl Write,
) -> Result<ExitCode> {
    let clock = Instant::now();
    let options = &session.options;
    let config = VerdictConfig {
        jobs: options.jobs(),
        custom_harness_args: &options.harness_words,
        show_output: options.harness.show_output,
        exit_status_counts: after == After::Nothing,
    };
    let cases: Vec<_> = selected.iter().map(|p| &p.case).collect();
    let passed = match cases.is_empty() {
        true => Vec::new(),
        false => verdicts::run(&session.suite(), &cases, &config, stdout)?,
    };
    session.timings.push(("run", clock.elapsed()));
    let mut failed = Vec::new();
    for (planned, &ok) in selected.iter().zip(&passed) {
        if ok {
            tally.passed += 1;
        } else {
            tally.failed += 1;
            failed.push(*planned);
        }
    }
    if !failed.is_empty() {
        writeln!(stdout, "\nfailed:")?;
        for planned in &failed {
            writeln!(stdout, "    {}", report::test_label(session, planned))?;
        }
    }
    let results = verdict_results(&passed);
    if let Some(path) = &session.options.report_json {
        write_json(session, (plan, selected), &results, (start, after), path)?;
    }
    if let Some(path) = &session.options.junit {
        let outcomes = super::results_by_plan(plan, selected, |job| results.get(job));
        crate::output::junit::write(path, session, plan, &outcomes, start.elapsed())?;
    }
    report::print_summary(stdout, &[], &tally, start.elapsed())?;
    stdout.flush()?;
    // Before the recording starts, which reads them.
    session.snapshots.save_held();
    let code = match tally.failed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(crate::exit::TESTS_FAILED),
    };
    if after == After::Nothing {
        style::note("no record was written (--no-record): the tests ran as `cargo test` runs them");
        return Ok(code);
    }
    if !failed.is_empty() {
        mark_failed(session, &failed);
    }
    let labels: Vec<String> = failed
        .iter()
        .map(|p| background::label(&session.built.binaries[p.case.binary].key, &p.case.name))
        .collect();
    match background::spawn(session.store.root(), &labels) {
        // Nothing selected: the recording only files the run.
        Ok(_) if selected.is_empty() => {}
        Ok(log) => style::note(format!(
            "recording {} test(s) in the background, at low priority (its log: {}); \
             a later run stops it, and what it had not recorded runs again",
            selected.len(),
            log.display()
        )),
        Err(e) => style::warn(format!(
            "{e:#}: nothing was recorded, and these tests run again next time"
        )),
    }
    Ok(code)
}

/// Each verdict as a run's result: no duration (libtest gives none per
/// test), no output of its own (libtest printed it with the binary's).
fn verdict_results(passed: &[bool]) -> Vec<RunResult> {
    passed
        .iter()
        .map(|&ok| RunResult {
            outcome: if ok { Outcome::Passed } else { Outcome::Failed },
            duration: Duration::ZERO,
            output: Vec::new(),
            merge_conflict: false,
            flaky: false,
        })
        .collect()
}

/// `--report-json`: the selection and each verdict, no test's duration.
fn write_json(
    session: &Session,
    (plan, selected): (&[Planned], &[&Planned]),
    results: &[RunResult],
    (start, after): (Instant, After),
    path: &std::path::Path,
) -> Result<()> {
    let outcomes = super::results_by_plan(plan, selected, |job| results.get(job));
    let mut json = report::run_json(session, plan, &outcomes, start.elapsed());
    json.verdict_first = after == After::Record;
    for test in &mut json.tests {
        test.duration = None;
    }
    std::fs::write(path, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The records of the tests that failed in the verdicts say failed, under
/// the state directory's lock: a failed record never vouches.
fn mark_failed(session: &Session, failed: &[&Planned]) {
    let lock = match crate::pipeline::records::lock_store(session, true) {
        Ok(Some(lock)) => lock,
        // Read-only: nothing is recorded, by the recording either.
        Ok(None) => return,
        Err(e) => {
            style::warn(format!(
                "{e:#}: the failures are recorded by the recording alone"
            ));
            return;
        }
    };
    for planned in failed {
        let key = &session.built.binaries[planned.case.binary].key;
        if let Loaded::Found(mut record) = session.store.load(key, &planned.case.name) {
            ekstazi_core::recording::mark_failed(&mut record);
            if let Err(e) = session.store.save(&record) {
                style::warn(format!(
                    "cannot mark {key} {} failed: {e}",
                    planned.case.name
                ));
            }
        }
    }
    drop(lock);
}
