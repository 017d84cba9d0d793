//! Running the selected tests: one process per test, `-j` at a time, each
//! under the shim with its own trace file.

use crate::cargo::libtest::{TestCase, WHOLE_BINARY};
use crate::cargo::test_build::TestBinary;
use crate::cargo::workspace::Workspace;
use crate::cli::CargoOpts;
use crate::run::fork_server::{ForkServer, SERVER_ARGS, Servers, Start};
use anyhow::{Context, Result};
use ekstazi_core::model::record::Outcome;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

/// What the tests run from: the built binaries, the variables cargo gives
/// each binary's tests, and the workspace and cargo options doctests are
/// run with (`cargo test --doc`).
pub struct Suite<'a> {
    pub ws: &'a Workspace,
    pub cargo: &'a CargoOpts,
    pub binaries: &'a [TestBinary],
    /// Per binary, the variables cargo would set for its tests.
    pub envs: &'a [Vec<(OsString, OsString)>],
}

/// How a run is set up.
pub struct Schedule {
    pub jobs: usize,
    /// `None` with `--skipme`: tests run as `cargo test` would run them.
    pub shim: Option<PathBuf>,
    /// Where trace files go (a private temporary directory).
    pub trace_dir: PathBuf,
    /// Where each test's own `TMPDIR` is made; `None`: tests get the
    /// environment's.
    pub tmp: Option<PathBuf>,
    /// Extra arguments for `harness = false` binaries (the user's filter);
    /// when not empty such a run is partial and is not recorded.
    pub custom_harness_args: Vec<String>,
    /// A test running longer is killed and counts as timed out.
    pub timeout: Option<Duration>,
    /// A test running longer is reported slow (once).
    pub slow: Duration,
    /// Start a libtest binary's tests from a fork server (needs the shim).
    pub fork_server: bool,
    /// A test that did not pass runs again, in a fresh process, up to this
    /// many times.
    pub retries: usize,
}

/// What the runner reports while tests run.
pub enum Event {
    /// A test has been running longer than the slow threshold.
    Slow { job: usize, elapsed: Duration },
    /// A test process ended.
    Finished(Finished),
}

/// One finished test process.
pub struct Finished {
    /// Index into the list of jobs given to [`run_all`].
    pub job: usize,
    pub outcome: Outcome,
    pub duration: Duration,
    /// When the process was started, for checking that its inputs did not
    /// change while it ran.
    pub started: SystemTime,
    /// Its stdout and stderr, interleaved as written.
    pub output: Vec<u8>,
    pub trace: PathBuf,
    /// The `TMPDIR` it was given, if its own.
    pub tmpdir: Option<PathBuf>,
    /// A partial run that must not be recorded.
    pub partial: bool,
    /// Stopped because the run was interrupted: it did not finish, so it
    /// has no outcome and must leave its record alone.
    pub interrupted: bool,
    /// How many times it ran (more than once with `--retries`); the
    /// outcome, output and trace are the last run's.
    pub attempts: u32,
}

impl Finished {
    /// It passed, but only after failing: its outcome is not to be trusted.
    pub fn flaky(&self) -> bool {
        self.attempts > 1 && self.outcome == Outcome::Passed
    }
}

/// How a test that ran ended, as the reports tell it.
pub struct RunResult {
    pub outcome: Outcome,
    pub duration: Duration,
    /// Its output, kept for tests that did not pass.
    pub output: Vec<u8>,
    /// It failed at a merge, and passed at every parent.
    pub merge_conflict: bool,
    /// It passed only after failing (`--retries`).
    pub flaky: bool,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every job ran.
    Completed,
    /// A signal stopped it (the signal's number).
    Interrupted(i32),
}

/// Why the watcher killed a test's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    Timeout,
    Interrupt,
}

/// A test running now: its process group, its start, whether the watcher
/// killed it, and whether it was reported slow.
type RunningTest = (i32, Instant, Option<Kill>, bool);

/// The tests running now, by job.
#[derive(Default)]
struct Running {
    jobs: Mutex<HashMap<usize, RunningTest>>,
}

impl Running {
    fn kill(&self, predicate: impl Fn(&Instant) -> bool, why: Kill) {
        let mut jobs = self.jobs.lock().expect("running tests");
        for (pgid, started, killed, _) in jobs.values_mut() {
            if killed.is_none() && predicate(started) {
                // The whole group: a test's children go with it.
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(-*pgid, libc::SIGKILL) };
                *killed = Some(why);
            }
        }
    }

    /// The jobs that have run longer than `limit`, each reported once.
    fn newly_slow(&self, limit: Duration) -> Vec<(usize, Duration)> {
        let mut jobs = self.jobs.lock().expect("running tests");
        jobs.iter_mut()
            .filter(|(_, (_, started, _, reported))| !*reported && started.elapsed() > limit)
            .map(|(job, (_, started, _, reported))| {
                *reported = true;
                (*job, started.elapsed())
            })
            .collect()
    }
}

/// Runs `jobs` with `config.jobs` workers; `on_event` sees each result (and
/// each slow test) as it comes, on the calling thread. SIGINT, SIGTERM
/// and SIGHUP stop the run: no new test starts, running ones are killed
/// (their process groups) and reported interrupted; a second signal exits
/// at once.
pub fn run_all(
    suite: &Suite<'_>,
    config: &Schedule,
    jobs: &[&TestCase],
    mut on_event: impl FnMut(Event),
) -> Result<Ended> {
    let signal = Arc::new(AtomicUsize::new(0));
    let handlers = catch_signals(&signal)?;
    let interrupted = || signal.load(Ordering::SeqCst) != 0;

    let next = AtomicUsize::new(0);
    let running = Running::default();
    let workers = config.jobs.clamp(1, jobs.len().max(1));
    // The watcher stops when the last worker has.
    let working = AtomicUsize::new(workers);
    let (tx, rx) = mpsc::channel::<Result<Event>>();
    let result = std::thread::scope(|scope| {
        // The watcher: timeouts, slow tests, and the signal.
        let watcher_tx = tx.clone();
        let (running, working) = (&running, &working);
        scope.spawn(move || watch(config, running, working, &interrupted, &watcher_tx));
        for _ in 0..workers {
            let tx = tx.clone();
            let (next, interrupted) = (&next, &interrupted);
            scope.spawn(move || {
                let mut servers = Servers::default();
                loop {
                    if interrupted() {
                        break;
                    }
                    let job = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = jobs.get(job) else { break };
                    let result = run_retried(
                        suite,
                        config,
                        running,
                        &mut servers,
                        (job, case),
                        &interrupted,
                    );
                    if tx.send(result.map(Event::Finished)).is_err() {
                        break;
                    }
                }
                working.fetch_sub(1, Ordering::SeqCst);
            });
        }
        drop(tx);
        let mut outcome = Ok(());
        for result in rx {
            match result {
                Ok(event) => on_event(event),
                Err(e) => {
                    outcome = Err(e);
                    signal.store(signal_hook::consts::SIGTERM as usize, Ordering::SeqCst);
                }
            }
        }
        outcome
    });
    for handler in handlers {
        signal_hook::low_level::unregister(handler);
    }
    result?;
    Ok(match signal.load(Ordering::SeqCst) {
        0 => Ended::Completed,
        sig => Ended::Interrupted(sig as i32),
    })
}

/// Runs a test, and again while it does not pass, up to `--retries` times,
/// each in a fresh process with its own trace and `TMPDIR`.
fn run_retried(
    suite: &Suite<'_>,
    config: &Schedule,
    running: &Running,
    servers: &mut Servers,
    (job, case): (usize, &TestCase),
    interrupted: &impl Fn() -> bool,
) -> Result<Finished> {
    let mut finished = run_one(suite, config, running, servers, (job, 1), case)?;
    while finished.outcome != Outcome::Passed
        && !finished.interrupted
        && !finished.partial
        && (finished.attempts as usize) <= config.retries
        && !interrupted()
    {
        let attempt = finished.attempts + 1;
        let _ = std::fs::remove_file(&finished.trace);
        finished = run_one(suite, config, running, servers, (job, attempt), case)?;
        finished.attempts = attempt;
    }
    Ok(finished)
}

fn run_one(
    suite: &Suite<'_>,
    config: &Schedule,
    running: &Running,
    servers: &mut Servers,
    (job, attempt): (usize, u32),
    case: &TestCase,
) -> Result<Finished> {
    let binary = &suite.binaries[case.binary];
    let trace = match attempt {
        1 => config.trace_dir.join(format!("{job}.trace")),
        n => config.trace_dir.join(format!("{job}.{n}.trace")),
    };
    let tmpdir = match &config.tmp {
        Some(parent) => Some(
            crate::run::scratch::prepare_test_dir(parent, &binary.key, &case.name).with_context(
                || format!("cannot make a temporary directory in {}", parent.display()),
            )?,
        ),
        None => None,
    };
    let _removed = RemoveOnDrop(tmpdir.clone());
    if let Some(doctests) = &binary.doctests {
        return run_doctests(suite, config, running, job, doctests, trace, tmpdir);
    }
    let whole = case.name == WHOLE_BINARY && binary.custom_harness;
    let mut command = test_command(suite, config, case.binary, &trace, tmpdir.as_deref());
    if whole {
        command.args(&config.custom_harness_args);
    } else {
        command.args(["--exact", &case.name, "--nocapture"]);
        if case.ignored {
            command.arg("--include-ignored");
        }
    }
    let server = (!whole && config.fork_server && config.shim.is_some())
        .then(|| {
            servers.get(case.binary, || {
                let placeholder = config.trace_dir.join("fork-server.placeholder");
                let mut server = test_command(
                    suite,
                    config,
                    case.binary,
                    &placeholder,
                    config.tmp.as_deref(),
                );
                server.args(SERVER_ARGS);
                server
            })
        })
        .flatten();
    let ran = match server {
        Some(server) => {
            let (ran, server_failed) = supervise_forked(server, command, running, job, &case.name)?;
            if server_failed {
                servers.disable(case.binary);
            }
            ran
        }
        None => supervise(running, job, |output| spawn(command, output, &binary.path))?,
    };
    let outcome = match ran.killed {
        Some(Kill::Timeout) => Outcome::TimedOut,
        _ if whole => exit_outcome(ran.status),
        _ => judge(ran.status, &ran.output),
    };
    Ok(ran.finished(
        job,
        outcome,
        trace,
        tmpdir,
        whole && !config.custom_harness_args.is_empty(),
        config,
    ))
}

/// Stores the first of SIGINT, SIGTERM and SIGHUP received in `signal`;
/// a second ends the process. Returns the handlers, to unregister.
fn catch_signals(signal: &Arc<AtomicUsize>) -> Result<Vec<signal_hook::SigId>> {
    let mut handlers = Vec::new();
    // A second signal while the first is being handled ends the process,
    // whichever the two are (Ctrl-C, then a CI job's SIGTERM). One action
    // per signal, testing and setting the flag at once: two signals sent
    // together can be handled at the same time on two threads, and with
    // signal-hook's separate "exit if set" and "set" actions neither saw
    // the other's, the second was taken for the first and the run ended
    // as if sent one. The end-to-end test that sends two at once
    // (`faults::sigterm_and_sighup_…`) failed 7 runs in 40 so, and 0 in 40
    // with this.
    let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let (signal, seen) = (signal.clone(), seen.clone());
        handlers.push(unsafe {
            // SAFETY: the action only touches atomics, and
            // `low_level::exit` is `_exit`, safe in a signal handler.
            signal_hook::low_level::register(sig, move || {
                if seen.swap(true, Ordering::SeqCst) {
                    signal_hook::low_level::exit(crate::exit::INTERRUPTED_AGAIN.into());
                }
                signal.store(sig as usize, Ordering::SeqCst)
            })
        }?);
    }
    Ok(handlers)
}

/// The watcher, until the last worker has stopped: kills every test at
/// the signal, and a test past its timeout; reports slow tests once.
fn watch(
    config: &Schedule,
    running: &Running,
    working: &AtomicUsize,
    interrupted: &impl Fn() -> bool,
    tx: &mpsc::Sender<Result<Event>>,
) {
    while working.load(Ordering::SeqCst) > 0 {
        if interrupted() {
            running.kill(|_| true, Kill::Interrupt);
        } else if let Some(timeout) = config.timeout {
            running.kill(|started| started.elapsed() > timeout, Kill::Timeout);
        }
        for (job, elapsed) in running.newly_slow(config.slow) {
            let _ = tx.send(Ok(Event::Slow { job, elapsed }));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A doctest unit's run: `cargo test --doc` for the library, rustdoc and
/// the doctests under the shim.
fn run_doctests(
    suite: &Suite<'_>,
    config: &Schedule,
    running: &Running,
    job: usize,
    doctests: &crate::cargo::test_build::Doctests,
    trace: PathBuf,
    tmpdir: Option<PathBuf>,
) -> Result<Finished> {
    let mut command = doctests_command(suite, &config.custom_harness_args, doctests);
    if let Some(dir) = &tmpdir {
        command.env("TMPDIR", dir);
    }
    if let Some(shim) = &config.shim {
        crate::cargo::rustdoc::wrap_doctests(
            &mut command,
            &suite.ws.sysroot,
            preload(shim),
            &trace,
        )
        .context("cannot find cargo-ekstazi's own executable")?;
    }
    let ran = supervise(running, job, |output| {
        spawn(command, output, Path::new("cargo"))
    })?;
    let outcome = match ran.killed {
        Some(Kill::Timeout) => Outcome::TimedOut,
        _ => exit_outcome(ran.status),
    };
    let partial = !config.custom_harness_args.is_empty();
    Ok(ran.finished(job, outcome, trace, tmpdir, partial, config))
}

/// The command that runs a test of `binary` (its arguments are the
/// caller's): the binary in its package's directory, with cargo's
/// environment for it, its own `TMPDIR` and trace file, under the shim.
fn test_command(
    suite: &Suite<'_>,
    config: &Schedule,
    binary: usize,
    trace: &Path,
    tmpdir: Option<&Path>,
) -> Command {
    let built = &suite.binaries[binary];
    let mut command = Command::new(&built.path);
    if let Some(dir) = tmpdir {
        command.env("TMPDIR", dir);
    }
    if !built.custom_harness {
        // The harness's main thread is told apart from the test by being the
        // main thread of a process running this binary (the shim compares
        // with `/proc/self/exe`, which is canonical).
        let canonical = std::fs::canonicalize(&built.path).unwrap_or_else(|_| built.path.clone());
        command.env("EKSTAZI_LIBTEST", canonical);
    }
    command
        .current_dir(built.manifest_dir())
        .envs(suite.envs[binary].iter().map(|(k, v)| (k, v)));
    if let Some(shim) = &config.shim {
        command
            .env("LD_PRELOAD", preload(shim))
            .env("EKSTAZI_TRACE_FILE", trace);
    }
    command
        .stdin(Stdio::null())
        // Its own process group: a test and its children are stopped
        // together, and the terminal's Ctrl-C reaches the runner, which
        // decides what to do with them.
        .process_group(0);
    command
}

/// The variables that differ between two tests of one binary: a fork
/// server is started with placeholders for them, and each child is given
/// the values its own command would have had.
const PER_TEST_VARS: [&str; 2] = ["TMPDIR", "EKSTAZI_TRACE_FILE"];

/// Runs the test `command` describes as a child of `server`, or, if the
/// server does not start it, as `command`. Also says whether the server
/// failed (and is not to be asked again).
fn supervise_forked(
    server: &mut ForkServer,
    command: Command,
    running: &Running,
    job: usize,
    name: &str,
) -> Result<(Ran, bool)> {
    let vars: Vec<Vec<u8>> = command
        .get_envs()
        .filter(|(k, _)| PER_TEST_VARS.iter().any(|name| k == name))
        .filter_map(|(k, v)| Some([k.as_bytes(), b"=", v?.as_bytes()].concat()))
        .collect();
    let mut failed = false;
    let what = PathBuf::from(command.get_program());
    let mut ran = supervise(running, job, |output| {
        match server.start_test(name, &vars, output.as_fd()) {
            Ok(Start::Started(pid)) => return Ok(Process::Forked(server, pid)),
            Ok(Start::Refused) => {}
            Err(_) => failed = true,
        }
        spawn(command, output, &what)
    })?;
    if ran.lost_server {
        failed = true;
        ran.output.extend_from_slice(
            b"\n(cargo-ekstazi: the fork server this test ran from went away before the test ended; its outcome is unknown)\n",
        );
    }
    Ok((ran, failed))
}

/// A test's own temporary directory goes when the test has ended.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = crate::run::scratch::remove_tree(dir);
        }
    }
}

/// A library's doctests, run as `cargo test --doc` runs them (in the
/// user's target directory; rustdoc and the doctests under the shim, cargo
/// not: see `crate::cargo::rustdoc`). With a filter, the run is partial.
pub fn doctests_command(
    suite: &Suite<'_>,
    custom_harness_args: &[String],
    doctests: &crate::cargo::test_build::Doctests,
) -> Command {
    let mut command = Command::new(&suite.ws.cargo);
    command
        .args(suite.cargo.doctest_args(&doctests.package))
        .args(crate::style::cargo_color_arg())
        .current_dir(&suite.ws.root)
        .stdin(Stdio::null())
        .process_group(0);
    if !custom_harness_args.is_empty() {
        command.arg("--").args(custom_harness_args);
    }
    command
}

/// A process that ran to its end (or was killed).
struct Ran {
    status: std::process::ExitStatus,
    started: SystemTime,
    duration: Duration,
    output: Vec<u8>,
    killed: Option<Kill>,
    /// Its fork server went away before reporting its end: `status` says
    /// killed, and the truth is unknown.
    lost_server: bool,
}

impl Ran {
    fn finished(
        mut self,
        job: usize,
        outcome: Outcome,
        trace: PathBuf,
        tmpdir: Option<PathBuf>,
        partial: bool,
        config: &Schedule,
    ) -> Finished {
        if self.killed == Some(Kill::Timeout) {
            let limit = config.timeout.unwrap_or_default().as_secs_f64();
            self.output.extend_from_slice(
                format!("\n(cargo-ekstazi: killed after {limit:.0}s, --timeout)\n").as_bytes(),
            );
        }
        Finished {
            job,
            outcome,
            duration: self.duration,
            started: self.started,
            output: self.output,
            trace,
            tmpdir,
            partial,
            interrupted: self.killed == Some(Kill::Interrupt),
            attempts: 1,
        }
    }
}

/// A test's process, started by the runner or by a fork server.
enum Process<'s> {
    Spawned(std::process::Child),
    Forked(&'s mut ForkServer, i32),
}

/// Starts `command` with `output` as its stdout and stderr.
fn spawn<'s>(
    mut command: Command,
    output: std::io::PipeWriter,
    what: &Path,
) -> Result<Process<'s>> {
    command.stdout(output.try_clone()?).stderr(output);
    let child = command
        .spawn()
        .with_context(|| format!("cannot run {}", what.display()))?;
    // The pipe's write ends now live in the child alone: `command` (dropped
    // here) held ours, so reading ends when the test's processes close theirs.
    Ok(Process::Spawned(child))
}

/// Starts a test with `launch`, its output in a pipe, registers it with the
/// watcher (timeouts, interrupts), and waits for it.
fn supervise<'s>(
    running: &Running,
    job: usize,
    launch: impl FnOnce(std::io::PipeWriter) -> Result<Process<'s>>,
) -> Result<Ran> {
    let (reader, writer) = std::io::pipe().context("cannot create a pipe")?;
    let started = SystemTime::now();
    let clock = Instant::now();
    // `launch` consumes the write end: once it returns, only the test's
    // processes hold it.
    let process = launch(writer)?;
    let pid = match &process {
        Process::Spawned(child) => child.id() as i32,
        Process::Forked(_, pid) => *pid,
    };
    running
        .jobs
        .lock()
        .expect("running tests")
        .insert(job, (pid, clock, None, false));
    let (output, read_all) = read_in_background(reader);
    let mut lost_server = false;
    let status = match process {
        Process::Spawned(mut child) => child.wait().context("lost the test process"),
        Process::Forked(server, _) => Ok(server.wait().unwrap_or_else(|_| {
            lost_server = true;
            std::process::ExitStatus::from_raw(libc::SIGKILL)
        })),
    };
    let killed = running
        .jobs
        .lock()
        .expect("running tests")
        .remove(&job)
        .and_then(|(_, _, k, _)| k);
    let status = status?;
    let duration = clock.elapsed();
    // A process the test left running may hold the output pipe open: wait
    // for it only a moment.
    let _ = read_all.recv_timeout(Duration::from_millis(500));
    let output = std::mem::take(&mut *output.lock().expect("test output"));
    Ok(Ran {
        status,
        started,
        duration,
        output,
        killed,
        lost_server,
    })
}

/// The outcome of a process that is one test: its exit status.
fn exit_outcome(status: std::process::ExitStatus) -> Outcome {
    match (status.success(), status.code()) {
        (true, _) => Outcome::Passed,
        (false, Some(_)) => Outcome::Failed,
        (false, None) => Outcome::Crashed,
    }
}

/// Reads a test's output on a thread of its own; the receiver hears when
/// the pipe is closed by every process that had it.
fn read_in_background(
    mut reader: std::io::PipeReader,
) -> (Arc<Mutex<Vec<u8>>>, mpsc::Receiver<()>) {
    let output = Arc::new(Mutex::new(Vec::new()));
    let (done, read_all) = mpsc::channel();
    let sink = output.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 64 * 1024];
        while let Ok(n) = reader.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("test output")
                .extend_from_slice(&chunk[..n]);
        }
        let _ = done.send(());
    });
    (output, read_all)
}

/// The environment a test of a binary is given, in the order it is built
/// (later entries win): the runner's own, cargo's variables for the binary,
/// the preload. The tool's `EKSTAZI_*` variables are left out: they are
/// never dependencies.
pub fn test_environment(
    cargo_vars: &[(OsString, OsString)],
    shim: &Path,
) -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    vars.extend(cargo_vars.iter().cloned());
    vars.push(("LD_PRELOAD".into(), preload(shim)));
    vars
}

/// `LD_PRELOAD` with the shim first and the user's own preloads kept (an
/// empty one too: the shim takes only its own entry out of the test's
/// sight, and the test then sees the variable as the user set it).
fn preload(shim: &Path) -> OsString {
    let mut value = shim.as_os_str().to_owned();
    if let Some(existing) = std::env::var_os("LD_PRELOAD") {
        value.push(":");
        value.push(existing);
    }
    value
}

/// A libtest process passed only if it exited successfully *and* reported
/// exactly one passing test: an exit without libtest's verdict (a test that
/// calls `exit(0)`, or a name that matched nothing) is not a pass.
fn judge(status: std::process::ExitStatus, output: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(output);
    let verdict = text
        .lines()
        .rev()
        .find(|line| line.starts_with("test result: "));
    match (status.success(), status.code(), verdict) {
        (true, _, Some(line)) if line.starts_with("test result: ok. 1 passed;") => Outcome::Passed,
        (_, Some(101), _) => Outcome::Failed,
        (_, None, _) => Outcome::Crashed,
        (true, _, _) => Outcome::Crashed,
        (false, Some(_), _) => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn only_a_reported_single_pass_is_a_pass() {
        let ok = ExitStatusExt::from_raw(0);
        let failed = ExitStatusExt::from_raw(101 << 8);
        let killed = ExitStatusExt::from_raw(libc::SIGSEGV);
        let pass = b"running 1 test\ntest a ... ok\n\ntest result: ok. 1 passed; 0 failed;\n";
        assert_eq!(judge(ok, pass), Outcome::Passed);
        assert_eq!(
            judge(
                ok,
                b"running 0 tests\ntest result: ok. 0 passed; 0 failed;\n"
            ),
            Outcome::Crashed
        );
        assert_eq!(judge(ok, b"the test called exit(0)"), Outcome::Crashed);
        assert_eq!(
            judge(failed, b"test result: FAILED. 0 passed; 1 failed;"),
            Outcome::Failed
        );
        assert_eq!(judge(killed, pass), Outcome::Crashed);
    }
}
