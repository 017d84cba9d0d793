//! `cargo ekstazi test`: select, run what is affected, record, report.
//!
//! The run path of [`crate::pipeline`]: prepare → open the records → plan
//! → run (the scheduler, [`run_tests`]) → record (each finished test, as it
//! finishes, [`Runner::record`]) → report ([`report`]).

mod audit;
mod verdict_first;

use crate::cargo::libtest::TestCase;
use crate::cli::{TestArgs, parse_harness_args};
use crate::output::junit;
use crate::output::progress::Progress;
use crate::output::report::{self, Tally};
use crate::pipeline::{self, records::Written};
use crate::run::background;
use crate::run::scheduler::{self, Ended, Event, Finished, RunResult, Schedule};
use crate::session::options::{Request, harness_words};
use crate::session::recording;
use crate::session::{Planned, Session};
use crate::style;
use anyhow::{Context, Result};
use ekstazi_core::model::record::Outcome;
use ekstazi_core::storage::history::Manifest;
use ekstazi_core::storage::run_log::{self, RunEntry};
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub fn run(args: TestArgs) -> Result<ExitCode> {
    // First: it takes a variable out of the environment.
    let failed_in_verdicts = background::failed_in_verdicts()?;
    let start = Instant::now();
    let in_background = failed_in_verdicts.is_some();
    let asked_audit = args.audit;
    let mut request = request(args)?;
    if in_background {
        // The reports the user asked for are the verdict run's.
        request.report_json = None;
        request.junit = None;
    }
    let mut session = pipeline::prepare(request)?;
    let auditing = asked_audit || (!in_background && audit_is_due(&session));
    // Decided before anything is recorded, as a run without it would.
    let would = auditing.then(|| audit::would_be_plan(&mut session));
    let verdicts_first = !in_background && !auditing && verdict_first::applies(&session);
    // A run that records nothing runs as `cargo test` does.
    let unrecorded = !in_background
        && !auditing
        && !verdicts_first
        && verdict_first::unrecorded_applies(&session);
    if !verdicts_first && !unrecorded {
        // Held in case the verdicts came first; they do not.
        session.snapshots.save_held();
    }
    let pipeline::Opened {
        lock,
        plan,
        tally,
        nothing,
    } = pipeline::open_and_plan(&mut session, !verdicts_first && !unrecorded)?;
    let recording = lock.is_some();
    let selected = pipeline::selected(&plan);
    let mut stdout = anstream::stdout().lock();
    if let Some(why) = nothing {
        writeln!(stdout, "{why}")?;
    }
    if verdicts_first || unrecorded {
        let after = match verdicts_first {
            true => verdict_first::After::Record,
            false => verdict_first::After::Nothing,
        };
        return verdict_first::run(
            &mut session,
            (&plan, &selected),
            tally,
            (start, after),
            &mut stdout,
        );
    }
    let dirs = RunDirs::make(&session, recording)?;
    let run_clock = Instant::now();
    let (ended, ran) = run_tests(
        &session,
        &dirs,
        &selected,
        Recording {
            on: recording,
            failed_in_verdicts: failed_in_verdicts.unwrap_or_default(),
        },
        (&plan, tally),
        &mut stdout,
    )?;
    session.timings.push(("run", run_clock.elapsed()));
    if recording {
        pipeline::records::finish_recording(&session, &plan, &ran.written.records);
    }
    if in_background {
        background::finished(session.store.root());
    }
    let audit = would
        .as_deref()
        .map(|would| audit::judge(&session, would, &selected, &ran.results));
    report(
        &session,
        (&plan, &selected),
        &ran,
        audit.as_ref(),
        start.elapsed(),
        &mut stdout,
    )?;
    if recording {
        log_run(&session, &ran.tally, start.elapsed(), auditing);
    }
    let code = exit_code(&session, ended, &ran.tally, selected.len(), recording);
    Ok(match &audit {
        Some(audit) if !audit.missed.is_empty() && ended == Ended::Completed => {
            ExitCode::from(crate::exit::MISSED)
        }
        _ => code,
    })
}

/// Whether `[run] full-every` makes this run an audit (the run log is
/// read only when a schedule is set, and not under `--forceall`).
fn audit_is_due(session: &Session) -> bool {
    let settings = &session.options.settings;
    if settings.forceall || settings.full_every.is_none() {
        return false;
    }
    let runs = run_log::read(session.store.root());
    if runs.in_the_future > 0 {
        style::warn(format!(
            "{} line(s) of {} dated after this machine's clock were left out \
             ([run] full-every counts the others)",
            runs.in_the_future,
            session.store.root().join(run_log::FILE).display()
        ));
    }
    let due = audit::due(settings, &runs.entries);
    if let Some(why) = &due {
        style::note(format!(
            "running every test as an audit: {why} ([run] full-every)"
        ));
    }
    due.is_some()
}

/// This run, in the state directory's log of runs (`stats`, `full-every`).
fn log_run(session: &Session, tally: &Tally, spent: Duration, audit: bool) {
    let entry = RunEntry {
        at_ms: ekstazi_core::model::record::now_ms(),
        commit: session
            .repo
            .as_ref()
            .map(|r| r.head.clone())
            .unwrap_or_default(),
        selected: tally.selected,
        skipped: tally.skipped,
        passed: tally.passed,
        failed: tally.failed,
        flaky: tally.flaky.len(),
        spent,
        saved: tally.saved,
        full: audit || session.options.settings.forceall,
    };
    if let Err(e) = run_log::append(session.store.root(), &entry) {
        style::warn(format!("cannot log this run for `stats`: {e}"));
    }
}

/// What the command line asks: libtest's arguments parsed first.
fn request(args: TestArgs) -> Result<Request> {
    let harness = parse_harness_args(args.filter.as_deref(), &args.libtest)?;
    let harness_words = harness_words(args.filter.as_deref(), &args.libtest);
    Ok(Request {
        layer: args.layer(),
        cargo: args.cargo,
        harness,
        harness_words,
        no_wait: args.recording.no_wait,
        report_json: args.report_json,
        junit: args.junit,
        archive: None,
    })
}

/// The run stage: the selected tests through the scheduler, each printed,
/// recorded and counted as it finishes.
fn run_tests(
    session: &Session,
    dirs: &RunDirs,
    selected: &[&Planned],
    recording: Recording,
    (plan, tally): (&[Planned], Tally),
    stdout: &mut impl Write,
) -> Result<(Ended, Ran)> {
    let config = run_config(session, dirs);
    let expected = expected_durations(plan, selected);
    let progress = Progress::new(expected.iter().sum(), selected.len(), config.jobs);
    let cases: Vec<&TestCase> = selected.iter().map(|p| &p.case).collect();
    let mut runner = Runner {
        session,
        selected,
        expected,
        jobs: config.jobs,
        recording,
        progress,
        stdout,
        parents: OnceCell::new(),
        ran: Ran {
            tally,
            ..Ran::default()
        },
    };
    let ended = scheduler::run_all(&session.suite(), &config, &cases, |event| {
        runner.on_event(event)
    })?;
    runner.progress.finish();
    Ok((ended, runner.ran))
}

/// What a run records.
struct Recording {
    /// Whether it records at all.
    on: bool,
    /// In the recording of a verdict-first run: the tests that failed in
    /// its verdicts ([`background::label`]). Their records say failed,
    /// whatever this run sees.
    failed_in_verdicts: HashSet<String>,
}

/// The directories a run's tests need, removed when it ends.
struct RunDirs {
    /// The tests' own temporary directories go under it, if they get one.
    tmp: Option<PathBuf>,
    /// The directory `tmp` is, when it is this run's own.
    _own_tmp: Option<tempfile::TempDir>,
    /// Where the trace files go.
    traces: tempfile::TempDir,
}

impl RunDirs {
    fn make(session: &Session, recording: bool) -> Result<RunDirs> {
        // In the tool's own root, when there is one: a test that lists the
        // system's temporary directory must not see this run's come and go.
        let traces = match &session.scratch {
            Some(scratch) => scratch.run_dir("traces"),
            None => tempfile::Builder::new().prefix("ekstazi-traces").tempdir(),
        }
        .context("cannot create a directory for traces")?;
        let (tmp, _own_tmp) = tests_tmp(session, recording)?;
        Ok(RunDirs {
            tmp,
            _own_tmp,
            traces,
        })
    }
}

/// How the scheduler runs this run's tests.
fn run_config(session: &Session, dirs: &RunDirs) -> Schedule {
    let options = &session.options;
    let settings = &options.settings;
    Schedule {
        jobs: options.jobs(),
        shim: (!settings.skipme).then(|| session.shim.clone()),
        trace_dir: dirs.traces.path().to_path_buf(),
        tmp: dirs.tmp.clone(),
        custom_harness_args: options.harness_words.clone(),
        timeout: settings.timeout,
        slow: settings.slow_timeout,
        fork_server: settings.fork_server,
        retries: settings.retries,
    }
}

/// What the run gathered for the report.
#[derive(Default)]
struct Ran {
    tally: Tally,
    /// Each failed test's label and output.
    failures: Vec<(String, Vec<u8>)>,
    written: Written,
    /// By job (position in the selected tests).
    results: HashMap<usize, RunResult>,
}

/// The run stage's end of the scheduler: prints each event, records each
/// finished test and gathers what the report needs.
struct Runner<'a, W> {
    session: &'a Session,
    selected: &'a [&'a Planned],
    /// Per job, its expected duration (for the progress bar).
    expected: Vec<Duration>,
    jobs: usize,
    recording: Recording,
    progress: Progress,
    stdout: &'a mut W,
    /// At a merge, what was filed at each parent: a test that fails here
    /// and passed at every parent is labelled a merge conflict. Read at the
    /// first failure, not by every run at a merge.
    parents: OnceCell<Vec<Option<Manifest>>>,
    ran: Ran,
}

impl<W: Write> Runner<'_, W> {
    fn on_event(&mut self, event: Event) {
        match event {
            Event::Slow { job, elapsed } => {
                let label = report::test_label(self.session, self.selected[job]);
                self.ran.tally.slow.push(label.clone());
                self.print(report::slow_line(&label, elapsed));
            }
            Event::Finished(finished) => self.on_finished(finished),
        }
    }

    fn on_finished(&mut self, finished: Finished) {
        let planned = self.selected[finished.job];
        let label = report::test_label(self.session, planned);
        self.progress
            .advance(self.expected[finished.job], self.jobs);
        if finished.interrupted {
            // It did not finish: no outcome, and its record stays as it was.
            self.ran.tally.interrupted += 1;
            self.print(report::interrupted_line(&label, &finished));
            return;
        }
        let passed = finished.outcome == Outcome::Passed;
        if passed {
            self.ran.tally.passed += 1;
        } else {
            self.ran.tally.failed += 1;
        }
        if finished.flaky() {
            self.ran.tally.flaky.push(label.clone());
        }
        self.record(planned, &finished, &label);
        let options = &self.session.options;
        let (quiet, show_output) = (options.cargo.quiet, options.harness.show_output);
        let (progress, stdout) = (&self.progress, &mut self.stdout);
        progress.suspend(|| {
            if !quiet || !passed || finished.flaky() {
                let _ = writeln!(stdout, "{}", report::finished_line(&label, &finished));
            }
            if passed && show_output {
                let _ = stdout.write_all(&finished.output);
            }
        });
        let result = self.result(planned, finished, label);
        self.ran.results.insert(result.0, result.1);
    }

    /// The record stage, for one test: its record written, unless this run
    /// records nothing, the run was partial, or it is never recorded.
    fn record(&mut self, planned: &Planned, finished: &Finished, label: &str) {
        if self.recording.on && !finished.partial && !planned.never_recorded() {
            let key = &self.session.built.binaries[planned.case.binary].key;
            let failed_in_verdicts = &self.recording.failed_in_verdicts;
            // A pass after a failure is no witness: the test runs next time.
            let untrusted_pass = finished.flaky()
                || failed_in_verdicts.contains(&background::label(key, &planned.case.name));
            let ended = recording::Ended {
                outcome: finished.outcome,
                untrusted_pass,
                duration: finished.duration,
                started: finished.started,
                trace: &finished.trace,
            };
            let env = self
                .session
                .environment_of(&planned.case, finished.tmpdir.as_deref());
            let record = recording::record_of(self.session, &planned.case, &ended, &env);
            self.ran.written.save(self.session, label, record);
        }
    }

    /// What the report says of a test that ran; a failure's output is kept
    /// for the failures' listing, labelled a merge conflict if it is one.
    fn result(
        &mut self,
        planned: &Planned,
        finished: Finished,
        label: String,
    ) -> (usize, RunResult) {
        let merge_conflict =
            finished.outcome != Outcome::Passed && self.passed_at_every_parent(planned);
        let flaky = finished.flaky();
        let output = if finished.outcome == Outcome::Passed {
            Vec::new()
        } else {
            let label = if merge_conflict {
                format!("{label} (merge conflict: it passed at every parent)")
            } else {
                label
            };
            self.ran.failures.push((label, finished.output.clone()));
            finished.output
        };
        let result = RunResult {
            outcome: finished.outcome,
            duration: finished.duration,
            output,
            merge_conflict,
            flaky,
        };
        (finished.job, result)
    }

    fn passed_at_every_parent(&self, planned: &Planned) -> bool {
        let session = self.session;
        let parents = self.parents.get_or_init(|| {
            session
                .repo
                .as_ref()
                .filter(|repo| repo.parents.len() >= 2)
                .map(|repo| {
                    let history = session.store.history();
                    repo.parents.iter().map(|p| history.manifest(p)).collect()
                })
                .unwrap_or_default()
        });
        ekstazi_core::workflows::merge_check::passed_at_every_parent(
            parents,
            &session.built.binaries[planned.case.binary].key,
            &planned.case.name,
        )
    }

    /// A line between the progress bar's redraws.
    fn print(&mut self, line: String) {
        let (progress, stdout) = (&self.progress, &mut self.stdout);
        progress.suspend(|| {
            let _ = writeln!(stdout, "{line}");
        });
    }
}

/// The report stage: `--report-json`, `--junit`, the failures, the summary
/// and the notes.
fn report(
    session: &Session,
    (plan, selected): (&[Planned], &[&Planned]),
    ran: &Ran,
    audit: Option<&audit::Audit>,
    elapsed: Duration,
    stdout: &mut impl Write,
) -> Result<()> {
    let options = &session.options;
    let outcomes = results_by_plan(plan, selected, |job| ran.results.get(&job));
    if let Some(path) = &options.report_json {
        let mut json = report::run_json(session, plan, &outcomes, elapsed);
        json.audit = audit.map(audit::Audit::json);
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &options.junit {
        junit::write(path, session, plan, &outcomes, elapsed)?;
    }
    report::print_failures(stdout, &ran.failures)?;
    report::print_summary(stdout, &ran.written.errors, &ran.tally, elapsed)?;
    if let Some(audit) = audit {
        audit::print(stdout, audit, plan.len())?;
    }
    let slow_limit = options.settings.slow_timeout.as_secs_f64();
    for (labels, kind, why) in [
        (
            &ran.tally.flaky,
            "flaky",
            "(passed only after failing; they run next time)".to_owned(),
        ),
        (&ran.tally.slow, "slow", format!("(over {slow_limit}s)")),
    ] {
        if !labels.is_empty() {
            writeln!(
                stdout,
                "{} {kind} test{} {why}: {}",
                labels.len(),
                if labels.len() == 1 { "" } else { "s" },
                labels.join(", ")
            )?;
        }
    }
    Ok(())
}

/// Each planned test's result, in the plan's order; `result` gives it by
/// the test's position among the selected ones (its job).
fn results_by_plan<'a>(
    plan: &[Planned],
    selected: &[&Planned],
    result: impl Fn(usize) -> Option<&'a RunResult>,
) -> Vec<Option<&'a RunResult>> {
    plan.iter()
        .map(|p| {
            let job = selected.iter().position(|s| std::ptr::eq(*s, p))?;
            result(job)
        })
        .collect()
}

/// The last notes, and the exit status: `cargo test`'s, or a shell's for
/// the signal that interrupted the run.
fn exit_code(
    session: &Session,
    ended: Ended,
    tally: &Tally,
    selected: usize,
    recording: bool,
) -> ExitCode {
    if !recording && !session.options.settings.skipme {
        style::note("no record was written (--no-record, or the state directory is read-only)");
    }
    if let Ended::Interrupted(signal) = ended {
        style::warn(format!(
            "interrupted by signal {signal}: {} test(s) did not finish and keep their previous \
             records, {} test(s) were not started; they run next time",
            tally.interrupted,
            selected - tally.passed - tally.failed - tally.interrupted,
        ));
        return ExitCode::from(crate::exit::stopped_by(signal));
    }
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::TESTS_FAILED)
    }
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
