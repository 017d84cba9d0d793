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
//! stops the recording before it builds.
//!
//! For the local loop: a run that writes a report (`--junit`,
//! `--report-json`) is a CI run, and records as it goes.

use crate::output::report::{self, Tally};
use crate::run::background;
use crate::run::verdicts::{self, VerdictConfig};
use crate::session::{Planned, Session};
use crate::style;
use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

/// Whether this run gives verdicts first: asked for, and there is
/// something to record.
pub fn applies(session: &Session) -> bool {
    let options = &session.options;
    let settings = &options.settings;
    if !settings.verdict_first || settings.no_record || settings.skipme {
        return false;
    }
    if options.report_json.is_some() || options.junit.is_some() {
        style::note(
            "verdicts first is off in a run that writes a report (--junit, --report-json): \
             the report needs each test's record",
        );
        return false;
    }
    true
}

/// The verdicts, the summary, and the recording started in the background.
pub fn run(
    session: &Session,
    selected: &[&Planned],
    mut tally: Tally,
    start: Instant,
    stdout: &mut impl Write,
) -> Result<ExitCode> {
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
    report::print_summary(stdout, &[], &tally, start.elapsed())?;
    stdout.flush()?;
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
