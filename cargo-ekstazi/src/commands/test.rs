//! `cargo ekstazi test`: select, run what is affected, record, report.

use crate::cli::{TestArgs, parse_harness_args};
use crate::progress::Progress;
use crate::report;
use crate::run::{self, Event};
use crate::session::{Planned, Session};
use crate::{junit, recording, style};
use anyhow::{Context, Result};
use ekstazi_core::model::record::Outcome;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How a test that ran ended.
pub struct RunResult {
    pub outcome: Outcome,
    pub duration: Duration,
    /// Its output, kept for tests that did not pass.
    pub output: Vec<u8>,
    /// It failed at a merge, and passed at every parent.
    pub merge_conflict: bool,
}

pub fn run(args: TestArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let harness = parse_harness_args(args.filter.as_deref(), &args.libtest)?;
    let mut session = Session::prepare(&args.cargo, args.layer())?;
    let settings = session.settings.clone();
    super::note_missing_records(&session);
    let lock = if settings.no_record || settings.skipme {
        None
    } else {
        super::lock_store(&session, !args.recording.no_wait)?
    };
    let recording = lock.is_some();
    super::note_other_versions(&session);
    if !settings.skipme {
        super::note_fallbacks(&session);
    }
    let (plan, mut tally, nothing) = super::plan_run(
        &mut session,
        &harness.filter,
        recording,
        args.cargo.verbose > 0,
    )?;
    let selected: Vec<&Planned> = plan.iter().filter(|p| p.selected()).collect();
    let mut stdout = anstream::stdout().lock();
    if let Some(why) = nothing {
        writeln!(stdout, "{why}")?;
    }

    // In the tool's own root, when there is one: a test that lists the
    // system's temporary directory must not see this run's come and go.
    let trace_dir = match &session.scratch {
        Some(scratch) => scratch.run_dir("traces"),
        None => tempfile::Builder::new().prefix("ekstazi-traces").tempdir(),
    }
    .context("cannot create a directory for traces")?;
    let (tmp, _own_tmp) = tests_tmp(&session, recording)?;
    let jobs = settings
        .jobs
        .or(harness.test_threads)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let mut custom_harness_args: Vec<String> = args.filter.iter().cloned().collect();
    custom_harness_args.extend(args.libtest.iter().cloned());
    let config = run::RunConfig {
        jobs,
        shim: (!settings.skipme).then(|| session.shim.clone()),
        trace_dir: trace_dir.path().to_path_buf(),
        tmp,
        custom_harness_args,
        timeout: settings.timeout,
        slow: settings.slow_timeout,
        fork_server: settings.fork_server,
    };
    let expected = expected_durations(&plan, &selected);
    let mut progress = Progress::new(expected.iter().sum(), selected.len(), jobs);
    let cases: Vec<&crate::list::TestCase> = selected.iter().map(|p| &p.case).collect();
    let mut failures = Vec::new();
    let mut record_errors = Vec::new();
    let mut written = Vec::new();
    let mut results: HashMap<usize, RunResult> = HashMap::new();
    // At a merge, what was filed at each parent: a test that fails here and
    // passed at every parent is labelled a merge conflict. Read at the
    // first failure, not by every run at a merge.
    let parents: std::cell::OnceCell<Vec<Option<ekstazi_core::storage::history::Manifest>>> =
        std::cell::OnceCell::new();
    let parents_filed = || {
        session
            .repo
            .as_ref()
            .filter(|repo| repo.parents.len() >= 2)
            .map(|repo| {
                let history = session.store.history();
                repo.parents.iter().map(|p| history.manifest(p)).collect()
            })
            .unwrap_or_default()
    };
    let run_clock = Instant::now();
    let ended = run::run_all(&session, &config, &cases, |event| {
        let finished = match event {
            Event::Slow { job, elapsed } => {
                let label = report::test_label(&session, selected[job]);
                tally.slow.push(label.clone());
                progress.suspend(|| {
                    let _ = writeln!(stdout, "{}", report::slow_line(&label, elapsed));
                });
                return;
            }
            Event::Finished(finished) => finished,
        };
        let planned = selected[finished.job];
        let label = report::test_label(&session, planned);
        progress.advance(expected[finished.job], jobs);
        if finished.interrupted {
            // It did not finish: no outcome, and its record stays as it was.
            tally.interrupted += 1;
            progress.suspend(|| {
                let _ = writeln!(stdout, "{}", report::interrupted_line(&label, &finished));
            });
            return;
        }
        if finished.outcome == Outcome::Passed {
            tally.passed += 1;
        } else {
            tally.failed += 1;
        }
        if recording && !finished.partial && !planned.never_recorded() {
            let record = recording::record_of(&session, &planned.case, &finished);
            match session.save_record(&record) {
                Ok(sealed) => written.push((record, sealed)),
                Err(e) => record_errors.push(format!("{label}: {e}")),
            }
        }
        progress.suspend(|| {
            if !args.cargo.quiet || finished.outcome != Outcome::Passed {
                let _ = writeln!(stdout, "{}", report::finished_line(&label, &finished));
            }
            if finished.outcome == Outcome::Passed && harness.show_output {
                let _ = stdout.write_all(&finished.output);
            }
        });
        let merge_conflict = finished.outcome != Outcome::Passed
            && ekstazi_core::workflows::merge_check::passed_at_every_parent(
                parents.get_or_init(parents_filed),
                &session.built.binaries[planned.case.binary].key,
                &planned.case.name,
            );
        let output = if finished.outcome == Outcome::Passed {
            Vec::new()
        } else {
            let label = if merge_conflict {
                format!("{label} (merge conflict: it passed at every parent)")
            } else {
                label
            };
            failures.push((label, finished.output.clone()));
            finished.output
        };
        results.insert(
            finished.job,
            RunResult {
                outcome: finished.outcome,
                duration: finished.duration,
                output,
                merge_conflict,
            },
        );
    })?;
    progress.finish();

    session.timings.push(("run", run_clock.elapsed()));
    if recording {
        super::finish_recording(&session, &plan, &written);
    }
    // Results by position in the plan.
    let outcomes: Vec<Option<&RunResult>> = plan
        .iter()
        .map(|p| {
            let job = selected.iter().position(|s| std::ptr::eq(*s, p))?;
            results.get(&job)
        })
        .collect();
    if let Some(path) = &args.report_json {
        let json = report::run_json(&session, &plan, &outcomes, start.elapsed());
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.junit {
        junit::write(path, &session, &plan, &outcomes, start.elapsed())?;
    }
    report::print_failures(&mut stdout, &failures)?;
    report::print_summary(&mut stdout, &record_errors, &tally, start.elapsed())?;
    if !tally.slow.is_empty() {
        writeln!(
            stdout,
            "{} slow test{} (over {}s): {}",
            tally.slow.len(),
            if tally.slow.len() == 1 { "" } else { "s" },
            settings.slow_timeout.as_secs_f64(),
            tally.slow.join(", ")
        )?;
    }
    if !recording && !settings.skipme {
        style::note("no record was written (--no-record, or the state directory is read-only)");
    }
    if let run::Ended::Interrupted(signal) = ended {
        style::warn(format!(
            "interrupted by signal {signal}: {} test(s) did not finish and keep their previous \
             records, {} test(s) were not started; they run next time",
            tally.interrupted,
            cases.len() - tally.passed - tally.failed - tally.interrupted,
        ));
        return Ok(ExitCode::from(128 + signal as u8));
    }
    Ok(if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::TESTS_FAILED)
    })
}

/// Where the tests' own temporary directories go: in the root, where each
/// test finds the same `TMPDIR` every run, when this run records (it holds
/// the state directory's lock, so no other run uses them); else in a
/// directory of this run's own (returned, to be removed at the end).
pub fn tests_tmp(
    session: &Session,
    recording: bool,
) -> Result<(Option<PathBuf>, Option<tempfile::TempDir>)> {
    let (Some(root), Some(scratch)) = (session.private_tmp(), &session.scratch) else {
        return Ok((None, None));
    };
    if recording {
        scratch.sweep();
        return Ok((Some(root.to_path_buf()), None));
    }
    let own = scratch
        .run_dir("tmp")
        .context("cannot create a directory for the tests' temporary directories")?;
    Ok((Some(own.path().to_path_buf()), Some(own)))
}

/// How long each selected test is expected to take: its last recorded
/// duration, else the mean of the recorded ones (for the progress bar).
fn expected_durations(plan: &[Planned], selected: &[&Planned]) -> Vec<Duration> {
    let known: Vec<Duration> = plan
        .iter()
        .filter_map(|p| p.last.as_ref().map(|r| r.duration()))
        .collect();
    let mean = match known.len() {
        0 => Duration::from_millis(100),
        n => known.iter().sum::<Duration>() / n as u32,
    };
    selected
        .iter()
        .map(|p| p.last.as_ref().map_or(mean, |r| r.duration()))
        .collect()
}
