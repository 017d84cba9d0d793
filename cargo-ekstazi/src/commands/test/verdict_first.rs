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
    start: Instant,
    stdout: &mut impl Write,
) -> Result<ExitCode> {
    let clock = Instant::now();
    let options = &session.options;
    let config = VerdictConfig {
        jobs: options.jobs(),
        custom_harness_args: &options.harness_words,
        show_output: options.harness.show_output,
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
    if let Some(path) = &session.options.report_json {
        write_json(session, plan, selected, &passed, start, path)?;
    }
    report::print_summary(stdout, &[], &tally, start.elapsed())?;
    stdout.flush()?;
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
    Ok(match tally.failed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(crate::TESTS_FAILED),
    })
}

/// `--report-json`: the selection and each verdict, no test's duration.
fn write_json(
    session: &Session,
    plan: &[Planned],
    selected: &[&Planned],
    passed: &[bool],
    start: Instant,
    path: &std::path::Path,
) -> Result<()> {
    let results: Vec<RunResult> = passed
        .iter()
        .map(|&ok| RunResult {
            outcome: if ok { Outcome::Passed } else { Outcome::Failed },
            duration: Duration::ZERO,
            output: Vec::new(),
            merge_conflict: false,
            flaky: false,
        })
        .collect();
    let outcomes = super::results_by_plan(plan, selected, |job| results.get(job));
    let mut json = report::run_json(session, plan, &outcomes, start.elapsed());
    json.verdict_first = true;
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
            record.outcome = Outcome::Failed;
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
