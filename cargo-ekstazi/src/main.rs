//! `cargo ekstazi`: regression test selection for Rust.
//!
//! `cargo ekstazi test` builds the test binaries as `cargo test` would, lists
//! their tests, and runs — one process per test, under a shim that records
//! every file the test touches — only the tests whose recorded dependencies
//! changed since they last passed. The decisions live in `ekstazi-core`;
//! this crate wires the stages together:
//!
//! [`build`] (cargo) → [`list`] (libtest) → [`session`] (analysis) →
//! [`run`] (processes under [`shim`]) → [`recording`] (records) → [`report`].

mod build;
mod cli;
mod env;
mod instrument;
mod list;
mod recording;
mod report;
mod run;
mod session;
mod shim;
mod workspace;

use anyhow::{Context, Result};
use clap::Parser;
use cli::{CargoCli, Command, ListArgs, TestArgs, parse_harness_args};
use ekstazi_core::filter::Decision;
use ekstazi_core::record::Outcome;
use session::Session;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The exit status of `cargo test` when tests fail or do not compile.
const TESTS_FAILED: u8 = 101;

fn main() -> ExitCode {
    if std::env::var_os(instrument::WRAPPER_ENV).is_some() {
        instrument::wrap_rustc();
    }
    // Cargo runs us as `cargo-ekstazi ekstazi <args>`; accept being run
    // directly as `cargo-ekstazi <args>` too.
    let mut args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_none_or(|a| a != "ekstazi") {
        args.insert(1, "ekstazi".into());
    }
    let CargoCli::Ekstazi(cli) = CargoCli::parse_from(args);
    let result = match cli.command {
        Command::Test(args) => test(args),
        Command::List(args) => list(args),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.is::<build::BuildFailed>() => {
            eprintln!("error: {e}");
            ExitCode::from(TESTS_FAILED)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn test(args: TestArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let harness = parse_harness_args(args.filter.as_deref(), &args.libtest)?;
    let mut session = Session::prepare(&args.cargo, &args.selection)?;
    let lock = if args.no_record {
        None
    } else {
        lock_store(&session, !args.no_wait)?
    };
    let recording = lock.is_some();
    note_other_versions(&session);
    note_fallbacks(&session);
    let plan = session.analyse(&harness.filter, args.selection.forceall);
    if recording {
        forget_removed_tests(&session)?;
        repoint_unaffected(&session, &plan);
    }
    if args.cargo.verbose > 0 {
        eprintln!(
            "cargo-ekstazi: {}",
            session::describe_timings(&session.timings)
        );
    }

    let selected: Vec<&session::Planned> = plan.iter().filter(|p| p.selected()).collect();
    let mut tally = report::Tally::default();
    for planned in &plan {
        match planned.decision {
            Decision::Ignored => tally.ignored += 1,
            Decision::Run if !planned.selected() => {
                tally.skipped += 1;
                tally.saved += planned
                    .last
                    .as_ref()
                    .map_or(Duration::ZERO, |r| r.duration());
            }
            _ => {}
        }
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{}",
        report::selection_line(selected.len(), tally.skipped, tally.ignored)
    )?;

    let trace_dir = tempfile::Builder::new()
        .prefix("ekstazi-traces")
        .tempdir()
        .context("cannot create a directory for traces")?;
    let jobs = args
        .jobs
        .or(harness.test_threads)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let mut custom_harness_args: Vec<String> = args.filter.iter().cloned().collect();
    custom_harness_args.extend(args.libtest.iter().cloned());
    let config = run::RunConfig {
        jobs,
        shim: session.shim.clone(),
        trace_dir: trace_dir.path().to_path_buf(),
        custom_harness_args,
        timeout: args
            .timeout
            .filter(|secs| *secs > 0.0)
            .map(std::time::Duration::from_secs_f64),
    };
    let cases: Vec<&list::TestCase> = selected.iter().map(|p| &p.case).collect();
    let mut failures = Vec::new();
    let mut record_errors = Vec::new();
    let mut outcomes = std::collections::HashMap::new();
    let run_clock = Instant::now();
    let ended = run::run_all(&session, &config, &cases, |finished| {
        let planned = selected[finished.job];
        let label = report::test_label(&session, planned);
        if finished.interrupted {
            // It did not finish: no outcome, and its record stays as it was.
            tally.interrupted += 1;
            let _ = writeln!(stdout, "{}", report::interrupted_line(&label, &finished));
            return;
        }
        outcomes.insert(finished.job, (finished.outcome, finished.duration));
        if finished.outcome == Outcome::Passed {
            tally.passed += 1;
        } else {
            tally.failed += 1;
        }
        if recording && !finished.partial {
            let record = recording::record_of(&session, &planned.case, &finished);
            if let Err(e) = session.store.save(&record) {
                record_errors.push(format!("{label}: {e}"));
            }
        }
        if !args.cargo.quiet || finished.outcome != Outcome::Passed {
            let _ = writeln!(stdout, "{}", report::finished_line(&label, &finished));
        }
        if finished.outcome != Outcome::Passed {
            failures.push((label, finished.output));
        } else if harness.show_output {
            let _ = stdout.write_all(&finished.output);
        }
    })?;

    session.timings.push(("run", run_clock.elapsed()));
    if recording {
        forget_unused_snapshots(&session);
    }
    if let Some(path) = &args.report_json {
        let results: Vec<_> = plan
            .iter()
            .map(|p| {
                let job = selected.iter().position(|s| std::ptr::eq(*s, p));
                (p, job.and_then(|j| outcomes.get(&j).copied()))
            })
            .collect();
        let json = report::run_json(&session, &results, start.elapsed());
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    report::print_failures(&mut stdout, &failures)?;
    for error in &record_errors {
        eprintln!("warning: could not record {error}; the test will run again next time");
    }
    writeln!(
        stdout,
        "\n{}",
        report::summary_line(&tally, start.elapsed())
    )?;
    if !recording {
        eprintln!(
            "cargo-ekstazi: no record was written (--no-record, or the state directory is read-only)"
        );
    }
    if let run::Ended::Interrupted(signal) = ended {
        eprintln!(
            "cargo-ekstazi: interrupted by signal {signal}: {} test(s) did not finish and keep their previous \
             records, {} test(s) were not started; they run next time",
            tally.interrupted,
            cases.len() - tally.passed - tally.failed - tally.interrupted,
        );
        return Ok(ExitCode::from(128 + signal as u8));
    }
    Ok(if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(TESTS_FAILED)
    })
}

fn list(args: ListArgs) -> Result<ExitCode> {
    let harness = parse_harness_args(args.filter.as_deref(), &args.libtest)?;
    let mut session = Session::prepare(&args.cargo, &args.selection)?;
    note_other_versions(&session);
    note_fallbacks(&session);
    let plan = session.analyse(&harness.filter, args.selection.forceall);
    if args.cargo.verbose > 0 {
        eprintln!(
            "cargo-ekstazi: {}",
            session::describe_timings(&session.timings)
        );
    }
    let listing = report::list_json(&session, &plan, args.cargo.verbose > 0);
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut stdout, &listing)?;
        writeln!(stdout)?;
    } else {
        report::print_list_table(&mut stdout, &listing)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Takes the state directory's run lock, saying so when another run holds
/// it (and failing at once without `wait`). A state directory that cannot be
/// written is not fatal: the run selects from the records it can read, runs,
/// and records nothing (`None`), and says so.
fn lock_store(session: &Session, wait: bool) -> Result<Option<ekstazi_core::store::StoreLock>> {
    let root = session.store.root();
    let unwritable = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied
                | std::io::ErrorKind::ReadOnlyFilesystem
                | std::io::ErrorKind::StorageFull
        )
    };
    match session.store.lock(true, false) {
        Ok(lock) => Ok(Some(lock)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && !wait => Err(anyhow::anyhow!(
            "another cargo-ekstazi run holds the state directory {} (--no-wait)",
            root.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            eprintln!(
                "cargo-ekstazi: waiting for another run to release {}",
                root.display()
            );
            session
                .store
                .lock(true, true)
                .map(Some)
                .with_context(|| format!("cannot lock the state directory {}", root.display()))
        }
        Err(e) if unwritable(&e) => {
            eprintln!(
                "warning: the state directory {} cannot be written ({e}): tests are selected from the records \
                 that can be read, and none is recorded",
                root.display()
            );
            Ok(None)
        }
        Err(e) => {
            Err(e).with_context(|| format!("cannot lock the state directory {}", root.display()))
        }
    }
}

/// Says which binaries fall back to binary granularity, and why.
fn note_fallbacks(session: &Session) {
    if session.granularity != cli::Granularity::Function {
        return;
    }
    for (binary, code) in session.built.binaries.iter().zip(&session.code) {
        if let Err(why) = code {
            eprintln!(
                "note: {} depends on its whole binary (binary granularity): {why}",
                binary.key
            );
        }
    }
}

fn note_other_versions(session: &Session) {
    for version in session.store.other_versions() {
        eprintln!(
            "note: records of format {version} in {} are ignored (this cargo-ekstazi writes v{}); \
             they are left in place",
            session.store.root().display(),
            ekstazi_core::record::FORMAT_VERSION
        );
    }
}

/// A test unaffected by a rebuild keeps its record, re-expressed against
/// the new build's fingerprints: the next comparison is then against the
/// present (quicker), and the old fingerprints can go.
fn repoint_unaffected(session: &Session, plan: &[session::Planned]) {
    for planned in plan
        .iter()
        .filter(|p| p.decision == Decision::Run && !p.selected())
    {
        let Some(record) = &planned.last else {
            continue;
        };
        if let Some(updated) = session.repointed(&planned.case, record)
            && session.store.save(&updated).is_err()
        {
            // Not fatal: the old record still holds, with the old fingerprints.
            continue;
        }
    }
}

/// Removes the function fingerprints no record names any more.
fn forget_unused_snapshots(session: &Session) {
    if let Ok(referenced) = session.store.referenced_snapshots() {
        let _ = session.store.retain_snapshots(&referenced);
    }
}

/// Removes the records of tests and targets that no longer exist.
fn forget_removed_tests(session: &Session) -> Result<()> {
    for (index, binary) in session.built.binaries.iter().enumerate() {
        let names = session
            .tests
            .iter()
            .filter(|t| t.binary == index)
            .map(|t| t.name.as_str());
        session
            .store
            .retain_tests(&binary.key, names)
            .with_context(|| format!("cannot clean the records of {}", binary.key))?;
    }
    let keys = session.ws.all_binary_keys();
    session
        .store
        .retain_binaries(keys.iter().map(String::as_str))
        .context("cannot clean the records of removed targets")?;
    Ok(())
}
