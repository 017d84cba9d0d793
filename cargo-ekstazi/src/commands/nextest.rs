//! `cargo ekstazi nextest`: the selection run through `cargo nextest run`,
//! then recorded as `cargo ekstazi test` records it.
//!
//! 1. The same run path as `test` up to the plan ([`pipeline::prepare`],
//!    [`pipeline::open_and_plan`]), with the same
//!    housekeeping of the records.
//! 2. `cargo nextest run` with the same cargo options, the instrumented
//!    build's environment, `--target <host>` and `--target-dir`: cargo finds
//!    the build fresh, and nextest runs the very binaries the analysis saw.
//! 3. Only the selected tests: one equality filterset per test, by binary id
//!    and exact name ([`filterset`]).
//! 4. Each test through cargo-ekstazi as nextest's *target runner*
//!    ([`runner`]): the shim preloaded, a trace of its own named by nextest's
//!    `NEXTEST_BINARY_ID` and `NEXTEST_TEST_NAME`, then `exec` — nextest
//!    keeps the test's process, its timeouts and its signals.
//! 5. The outcomes from a JUnit report nextest writes where a tool
//!    configuration file (`--tool-config-file ekstazi:...`) sends it
//!    ([`results`]); each test with a result is recorded with the same
//!    [`recording`](crate::session::recording) as `test`. A test with no result keeps
//!    its record.

mod archive;
mod args;
mod config;
mod filterset;
mod results;
pub mod runner;

use crate::cargo::instrument;
use crate::cargo::libtest::TestCase;
use crate::cli::{HarnessArgs, NextestAction, NextestArgs};
use crate::output::report::{self, Tally};
use crate::pipeline::{self, records::Written};
use crate::session::options::Request;
use crate::session::recording;
use crate::session::{Planned, Session};
use crate::style;
use anyhow::{Context, Result, bail};
use ekstazi_core::capture::environment::Environment;
use ekstazi_core::model::record::Outcome;
use ekstazi_core::model::record::Record;
use ekstazi_core::options::settings::Granularity;
use ekstazi_core::selection::filter::Filter;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The first cargo-nextest that tells a test's binary id and name to its
/// process (`NEXTEST_BINARY_ID`, `NEXTEST_TEST_NAME`, `NEXTEST_ATTEMPT`).
const MIN_NEXTEST: (u64, u64, u64) = (0, 9, 116);

pub fn run(args: NextestArgs) -> Result<ExitCode> {
    if args.selection.doc {
        bail!("nextest does not run doctests: use `cargo ekstazi test --doc`");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    match args.action.unwrap_or(NextestAction::Run) {
        NextestAction::Archive => archive::run(&args, &cargo),
        NextestAction::Run => {
            check_nextest(&cargo)?;
            run_selected(args)
        }
    }
}

/// `run`: select, run under nextest, record.
fn run_selected(mut args: NextestArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let user = args::parse(&args.nextest)?;
    archive::check_run_args(&mut args)?;
    if args.skipme
        && let Some(file) = &args.archive_file
    {
        // The escape hatch, for an archive: nextest as the user would run it.
        let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command
            .args(["nextest", "run", "--archive-file"])
            .arg(file)
            .arg("--workspace-remap")
            .arg(archive::workspace(&args)?)
            .args(&args.nextest);
        let (status, _) = wait_for(command)?;
        return Ok(exit_code(status));
    }
    let mut session = pipeline::prepare(request(&args, &user))?;
    let build = if args.archive_file.is_some() {
        Build::Archived(instrument::build_dir(&session.ws.target_dir)?)
    } else if session.options.granularity == Granularity::Function {
        Build::Instrumented
    } else {
        Build::Plain
    };
    if session.options.settings.skipme {
        // The escape hatch: nextest as the user would run it.
        let mut command = nextest_command(&session, &Build::Plain)?;
        command.args(&args.nextest);
        let (status, _) = wait_for(command)?;
        return Ok(exit_code(status));
    }
    let user_runner = config::user_runner(&session.ws.host, session.ws.cargo_home.as_deref())?;
    let pipeline::Opened {
        lock,
        plan,
        mut tally,
        nothing,
    } = pipeline::open_and_plan(&mut session, true)?;
    let recording = lock.is_some();
    let selected = pipeline::selected(&plan);
    let mut stdout = anstream::stdout().lock();
    if let Some(why) = nothing {
        // Nextest is not started: it would only say that no test matched.
        writeln!(stdout, "{why}")?;
        if recording {
            pipeline::records::finish_recording(&session, &plan, &[]);
        }
        return Ok(ExitCode::SUCCESS);
    }
    stdout.flush()?;

    let dirs = RunDirs::make(&session, &user, recording)?;
    let ids = test_ids(&session, &selected);
    let command = run_command(&session, &user, &dirs, &ids, recording, user_runner, &build)?;
    let launched = SystemTime::now();
    let run_clock = Instant::now();
    let (status, interrupted) = wait_for(command)?;
    session.timings.push(("nextest", run_clock.elapsed()));
    // The runner made each test's directory; nothing removes them but us.
    if recording && let Some(scratch) = &session.scratch {
        scratch.sweep();
    }
    let reported = read_results(&dirs, launched, status);
    let ran = Ran {
        selected: &selected,
        ids: &ids,
        dirs: &dirs,
        launched,
        interrupted: interrupted.is_some(),
        recording,
    };
    let recorded = record_results(&session, &ran, &reported, &mut tally);
    if recording {
        pipeline::records::finish_recording(&session, &plan, &recorded.written.records);
    }
    drop(lock);
    report(
        &session,
        &recorded,
        &tally,
        interrupted,
        recording,
        start,
        &mut stdout,
    )?;
    Ok(exit_code(status))
}

/// What the command line asks: the cargo options and the settings, and
/// nextest's `--ignored` as the filter.
fn request(args: &NextestArgs, user: &args::UserArgs) -> Request {
    let filter = Filter {
        run_ignored: user.run_ignored,
        ..Filter::default()
    };
    Request {
        cargo: args.cargo.clone(),
        layer: args.layer(),
        harness: HarnessArgs {
            filter,
            ..HarnessArgs::default()
        },
        no_wait: args.recording.no_wait,
        archive: args.archive_file.clone(),
        ..Request::default()
    }
}

/// The selected tests by (binary id, name), as nextest names them.
fn test_ids(session: &Session, selected: &[&Planned]) -> Vec<(String, String)> {
    selected
        .iter()
        .map(|p| (binary_key(session, &p.case).to_owned(), p.case.name.clone()))
        .collect()
}

/// Where a nextest run writes: a private directory for the report, the
/// tool configuration file and the traces; the tests' temporary
/// directories; and the report the repository's configuration sends
/// elsewhere, if it does.
struct RunDirs {
    tmp: Option<PathBuf>,
    /// The directory `tmp` is, when it is this run's own (removed first).
    _own_tmp: Option<tempfile::TempDir>,
    _private: tempfile::TempDir,
    traces: PathBuf,
    our_junit: PathBuf,
    tool_config: PathBuf,
    user_junit: Option<PathBuf>,
}

impl RunDirs {
    fn make(session: &Session, user: &args::UserArgs, recording: bool) -> Result<RunDirs> {
        let private = match &session.scratch {
            Some(scratch) => scratch.run_dir("nextest"),
            None => tempfile::Builder::new().prefix("ekstazi-nextest").tempdir(),
        }
        .context("cannot create a directory for nextest's report and the traces")?;
        let (tmp, _own_tmp) = super::test::tests_tmp(session, recording)?;
        let traces = private.path().join("traces");
        let profile = user
            .profile
            .clone()
            .or_else(|| {
                std::env::var("NEXTEST_PROFILE")
                    .ok()
                    .filter(|p| !p.is_empty())
            })
            .unwrap_or_else(|| "default".to_owned());
        let our_junit = private.path().join("junit.xml");
        let tool_config = private.path().join("nextest.toml");
        std::fs::write(&tool_config, config::tool_config(&profile, &our_junit))
            .with_context(|| format!("cannot write {}", tool_config.display()))?;
        // The repository's configuration wins over a tool's: if it sends this
        // profile's report somewhere, the report is read from there.
        let user_junit =
            config::repository_junit(&session.ws.root, user.config_file.as_deref(), &profile);
        Ok(RunDirs {
            tmp,
            _own_tmp,
            _private: private,
            traces,
            our_junit,
            tool_config,
            user_junit,
        })
    }
}

/// `cargo nextest run` for the selected tests: on the instrumented build
/// (its target directory prepared), with our tool configuration, one
/// filterset per test, and cargo-ekstazi as the target runner.
fn run_command(
    session: &Session,
    user: &args::UserArgs,
    dirs: &RunDirs,
    ids: &[(String, String)],
    recording: bool,
    user_runner: Option<Vec<String>>,
    build: &Build,
) -> Result<Command> {
    let mut command = nextest_command(session, build)?;
    command.arg("--tool-config-file").arg({
        let mut value = OsString::from("ekstazi:");
        value.push(&dirs.tool_config);
        value
    });
    let tests: Vec<(&str, &str)> = ids.iter().map(|(b, n)| (b.as_str(), n.as_str())).collect();
    for expression in filterset::filtersets(&tests, &user.filtersets, filterset::MAX_ARG) {
        command.arg("-E").arg(expression);
    }
    if !user.jobs
        && let Some(jobs) = session.options.settings.jobs
    {
        command.args(["--test-threads", &jobs.to_string()]);
    }
    command.args(&user.rest);
    let shim = recording.then_some(session.shim.as_path());
    runner_env(
        &mut command,
        session,
        shim.map(|s| (s, dirs.traces.as_path())),
        user_runner.as_deref(),
    )?;
    if let Some(tmp) = &dirs.tmp {
        command.env(runner::TMP_ENV, tmp);
    }
    Ok(command)
}

/// The outcomes nextest reported: from our JUnit report, or the
/// repository's if it is from this run.
fn read_results(
    dirs: &RunDirs,
    launched: SystemTime,
    status: ExitStatus,
) -> Vec<results::Reported> {
    let junit = match &dirs.user_junit {
        Some(path) if !dirs.our_junit.exists() => path.clone(),
        _ => dirs.our_junit.clone(),
    };
    let fresh = std::fs::metadata(&junit)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= launched - Duration::from_secs(1));
    if fresh {
        match std::fs::read_to_string(&junit)
            .map_err(anyhow::Error::from)
            .and_then(|xml| results::parse(&xml))
        {
            Ok(reported) => reported,
            Err(e) => {
                style::warn(format!(
                    "cannot read nextest's report {}: {e:#}; no test is recorded",
                    junit.display()
                ));
                Vec::new()
            }
        }
    } else {
        if status.code() == Some(0) || status.code() == Some(100) {
            style::warn(format!(
                "nextest wrote no JUnit report at {}; no test is recorded",
                junit.display()
            ));
        }
        Vec::new()
    }
}

/// What the record stage reads of the run.
struct Ran<'a> {
    selected: &'a [&'a Planned],
    ids: &'a [(String, String)],
    dirs: &'a RunDirs,
    launched: SystemTime,
    /// A signal stopped the run.
    interrupted: bool,
    recording: bool,
}

/// What the record stage gathered for the report.
struct Recorded {
    written: Written,
    /// The tests that passed only on a retry.
    flaky: Vec<String>,
    /// Selected tests with no result from nextest.
    missing: usize,
}

/// The record stage: counts each selected test nextest reported, and
/// records it (a test killed by an interrupt keeps its record).
fn record_results(
    session: &Session,
    ran: &Ran<'_>,
    reported: &[results::Reported],
    tally: &mut Tally,
) -> Recorded {
    let by_id: HashMap<(&str, &str), usize> = ran
        .ids
        .iter()
        .enumerate()
        .map(|(i, (b, n))| ((b.as_str(), n.as_str()), i))
        .collect();
    let mut written = Written::default();
    let mut flaky = Vec::new();
    let mut seen = vec![false; ran.selected.len()];
    for result in reported {
        let Some(&job) = by_id.get(&(result.binary.as_str(), result.name.as_str())) else {
            continue;
        };
        if std::mem::replace(&mut seen[job], true) {
            continue;
        }
        let planned = ran.selected[job];
        let label = report::test_label(session, planned);
        if ran.interrupted && result.outcome == Outcome::Crashed {
            // Killed when nextest stopped the run: it did not finish, and
            // keeps its record, as with `cargo ekstazi test`.
            tally.interrupted += 1;
            seen[job] = false;
            continue;
        }
        // Counted as nextest counts it; recorded as `result.outcome` says.
        if result.passed {
            tally.passed += 1;
        } else {
            tally.failed += 1;
        }
        if result.flaky {
            flaky.push(label.clone());
        }
        if !ran.recording || planned.never_recorded() {
            continue;
        }
        let record = record_of(session, ran, job, result);
        written.save(session, &label, record);
    }
    let missing = seen.iter().filter(|s| !**s).count();
    Recorded {
        written,
        flaky,
        missing,
    }
}

/// The record of a test nextest ran, from the trace and the stamp the
/// runner left for it.
fn record_of(session: &Session, ran: &Ran<'_>, job: usize, result: &results::Reported) -> Record {
    let planned = ran.selected[job];
    let trace = runner::trace_path(&ran.dirs.traces, &result.binary, &result.name, 1);
    let stamp = runner::read_stamp(&runner::stamp_path(&trace));
    let ended = recording::Ended {
        outcome: result.outcome,
        untrusted_pass: false,
        duration: result.duration,
        // The runner's note, else nextest's, else the run's start: an
        // earlier start is only more cautious.
        started: stamp
            .as_ref()
            .map(|s| s.started)
            .or(result.started)
            .unwrap_or(ran.launched),
        trace: &trace,
    };
    let env = match &stamp {
        Some(stamp) => Cow::Owned(given_environment(session, stamp.env.clone())),
        None => {
            let tmpdir = ran
                .dirs
                .tmp
                .as_ref()
                .map(|t| session.tmpdir_of(&planned.case, t));
            Cow::Owned(
                session
                    .environment_of(&planned.case, tmpdir.as_deref())
                    .into_owned(),
            )
        }
    };
    recording::record_of(session, &planned.case, &ended, &env)
}

/// The report stage: the summary and the notes.
fn report(
    session: &Session,
    recorded: &Recorded,
    tally: &Tally,
    interrupted: Option<i32>,
    recording: bool,
    start: Instant,
    stdout: &mut impl Write,
) -> Result<()> {
    report::print_summary(stdout, &recorded.written.errors, tally, start.elapsed())?;
    let flaky = &recorded.flaky;
    if !flaky.is_empty() {
        style::note(format!(
            "{} test(s) passed only on a retry, and are recorded as failed: they run again next \
             time ({})",
            flaky.len(),
            flaky.join(", ")
        ));
    }
    let missing = recorded.missing - tally.interrupted;
    if missing > 0 {
        style::note(format!(
            "{missing} selected test(s) have no result from nextest (filtered out by nextest's \
             options, not started after a failure, or the run was interrupted): they keep their \
             records, and run next time"
        ));
    }
    if !recording {
        style::note("no record was written (--no-record, or the state directory is read-only)");
    }
    if let Some(signal) = interrupted {
        style::warn(format!(
            "interrupted by signal {signal}: {} test(s) that nextest stopped keep their previous \
             records",
            tally.interrupted
        ));
    }
    if session.options.verbose() {
        pipeline::records::print_timings(session);
    }
    Ok(())
}

fn binary_key<'a>(session: &'a Session, case: &TestCase) -> &'a str {
    &session.built.binaries[case.binary].key
}

/// The environment a test was given, as the selection compares it.
fn given_environment(session: &Session, vars: Vec<(OsString, OsString)>) -> Environment {
    let env = Environment::new(
        vars,
        session.checksums.anchors(),
        Some(&session.ws.sysroot),
        session.shim.parent().unwrap_or(&session.ws.target_dir),
    )
    .ignoring(session.ignore.env_rules().clone());
    match &session.scratch {
        Some(scratch) => env.with_private_tmp(scratch.root()),
        None => env,
    }
}

/// `cargo nextest run` with the cargo options of the session's build; with
/// `build` (the instrumented build's target directory), that build's
/// target, directory and environment, so that cargo finds it fresh.
fn instrumentation(session: &Session) -> instrument::Instrumentation<'_> {
    instrument::Instrumentation {
        shim: &session.shim,
        debuginfo: session.options.debuginfo(),
        workspace: &session.ws.root,
    }
}

/// Which build nextest runs.
enum Build {
    /// The ordinary build (binary granularity, `--skipme`).
    Plain,
    /// The instrumented build of function granularity, in its own target
    /// directory.
    Instrumented,
    /// A nextest archive's build, unpacked in this directory: nextest reuses
    /// it (`--binaries-metadata`) and builds nothing.
    Archived(PathBuf),
}

fn nextest_command(session: &Session, build: &Build) -> Result<Command> {
    let mut command = Command::new(&session.ws.cargo);
    command.args(["nextest", "run"]);
    match build {
        Build::Plain => {
            command.args(args::cargo_args(&session.options.cargo, false));
        }
        Build::Instrumented => {
            let dir =
                instrument::prepare_target_dir(&session.ws.target_dir, instrumentation(session))?;
            command
                .args(args::cargo_args(&session.options.cargo, true))
                .args(["--target", &session.ws.host])
                .arg("--target-dir")
                .arg(dir)
                .envs(instrument::build_env(instrumentation(session)));
        }
        Build::Archived(dir) => {
            let metadata = dir.join("nextest");
            command
                .arg("--binaries-metadata")
                .arg(metadata.join("binaries-metadata.json"))
                .arg("--cargo-metadata")
                .arg(metadata.join("cargo-metadata.json"))
                .arg("--target-dir-remap")
                .arg(dir)
                .arg("--workspace-remap")
                .arg(&session.ws.root);
        }
    }
    command.args(style::cargo_color_arg());
    Ok(command)
}

/// Makes cargo-ekstazi nextest's target runner for the host. With `traced`
/// (the shim and the directory for traces), tests run under the shim. The
/// user's own runner, if any, is chained behind ours.
fn runner_env(
    command: &mut Command,
    session: &Session,
    traced: Option<(&Path, &Path)>,
    user_runner: Option<&[String]>,
) -> Result<()> {
    let me = std::env::current_exe().context("cannot find the cargo-ekstazi executable")?;
    if me
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .any(u8::is_ascii_whitespace)
    {
        bail!(
            "cargo-ekstazi is installed at {}, a path with a space, which cannot be nextest's \
             target runner (cargo splits it at spaces); install it elsewhere",
            me.display()
        );
    }
    let var = config::runner_var(&session.ws.host);
    // What the test must get back: the variables set here for nextest and
    // its build, as the user had them.
    let mut restore: Vec<String> = Vec::new();
    let mut names: Vec<OsString> = command
        .get_envs()
        .map(|(name, _)| name.to_owned())
        .collect();
    names.push(var.clone().into());
    for name in &names {
        let name = name.to_string_lossy();
        restore.push(match std::env::var(&*name) {
            Ok(value) => format!("{name}={value}"),
            Err(_) => name.into_owned(),
        });
    }
    let separator = runner::SEPARATOR.to_string();
    command
        .env(
            &var,
            format!("{} ekstazi {}", me.display(), runner::SUBCOMMAND),
        )
        .env(runner::RESTORE_ENV, restore.join(&separator));
    if let Some((shim, traces)) = traced {
        command
            .env(runner::SHIM_ENV, shim)
            .env(runner::TRACE_DIR_ENV, traces);
    }
    let whole: Vec<String> = session
        .built
        .binaries
        .iter()
        .filter(|b| b.custom_harness)
        .map(|b| {
            std::fs::canonicalize(&b.path)
                .unwrap_or_else(|_| b.path.clone())
                .display()
                .to_string()
        })
        .collect();
    command.env(runner::WHOLE_ENV, whole.join("\n"));
    if let Some(words) = user_runner {
        command.env(runner::INNER_ENV, words.join(&separator));
    }
    Ok(())
}

/// Fails early, and plainly, without a usable cargo-nextest.
fn check_nextest(cargo: &OsString) -> Result<()> {
    let install = "install it with `cargo install --locked cargo-nextest` (https://nexte.st)";
    let output = Command::new(cargo)
        .args(["nextest", "--version"])
        .output()
        .context("cannot run cargo")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !text.starts_with("cargo-nextest ") {
        bail!("cargo-nextest is not installed: {install}");
    }
    let version = text
        .split_whitespace()
        .nth(1)
        .and_then(parse_version)
        .with_context(|| format!("cannot read cargo-nextest's version from {text:?}"))?;
    if version < MIN_NEXTEST {
        let (major, minor, patch) = MIN_NEXTEST;
        bail!(
            "cargo-nextest {} is too old for cargo ekstazi nextest (it needs {major}.{minor}.{patch} \
             or later): {install}",
            text.split_whitespace().nth(1).unwrap_or_default()
        );
    }
    Ok(())
}

fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    let core = text.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Runs nextest with the terminal, and waits for it. Ctrl-C reaches nextest
/// from the terminal (it stops the tests and reports what finished); here it
/// only must not end cargo-ekstazi before the results are recorded. SIGTERM
/// and SIGHUP, sent to cargo-ekstazi alone, are passed on to nextest.
/// Returns nextest's status and the signal received, if one was.
fn wait_for(mut command: Command) -> Result<(ExitStatus, Option<i32>)> {
    let received = Arc::new(AtomicUsize::new(0));
    let mut handlers = Vec::new();
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let received = received.clone();
        handlers.push(unsafe {
            // SAFETY: the action only stores to an atomic.
            signal_hook::low_level::register(sig, move || {
                received.store(sig as usize, Ordering::SeqCst)
            })
        }?);
    }
    let result = (|| {
        let mut child = command.spawn().context("cannot run `cargo nextest run`")?;
        let mut interrupted = None;
        loop {
            if let Some(status) = child.try_wait().context("lost cargo-nextest")? {
                return Ok((status, interrupted));
            }
            let sig = received.swap(0, Ordering::SeqCst) as i32;
            if sig != 0 {
                interrupted = Some(sig);
            }
            if sig == signal_hook::consts::SIGTERM || sig == signal_hook::consts::SIGHUP {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(child.id() as i32, sig) };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })();
    for handler in handlers {
        signal_hook::low_level::unregister(handler);
    }
    result
}

/// Nextest's exit status as ours; a signal that ended it as a shell says it.
fn exit_code(status: ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(crate::exit::stopped_by(signal)),
        (None, None) => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare() {
        assert_eq!(parse_version("0.9.143"), Some((0, 9, 143)));
        assert_eq!(parse_version("0.9.116-b.1"), Some((0, 9, 116)));
        assert!(parse_version("0.9.115").unwrap() < MIN_NEXTEST);
        assert!(parse_version("1.0.0").unwrap() > MIN_NEXTEST);
        assert_eq!(parse_version("x"), None);
    }

    #[test]
    fn recording_paths_of_runner_and_command_agree() {
        // The command reads the trace where the runner wrote it.
        let dir = std::path::PathBuf::from("/traces");
        assert_eq!(
            runner::trace_path(&dir, "a::b", "t", 1),
            dir.join("a%3A%3Ab").join("t")
        );
    }
}
