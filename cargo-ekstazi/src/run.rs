//! Running the selected tests: one process per test, `-j` at a time, each
//! under the shim with its own trace file.

use crate::list::{TestCase, WHOLE_BINARY};
use crate::session::Session;
use anyhow::{Context, Result};
use ekstazi_core::record::Outcome;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

/// How a run is set up.
pub struct RunConfig {
    pub jobs: usize,
    pub shim: PathBuf,
    /// Where trace files go (a private temporary directory).
    pub trace_dir: PathBuf,
    /// Extra arguments for `harness = false` binaries (the user's filter);
    /// when not empty such a run is partial and is not recorded.
    pub custom_harness_args: Vec<String>,
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
    /// A partial run that must not be recorded.
    pub partial: bool,
}

/// Runs `jobs` with `config.jobs` workers; `on_finish` sees each result as
/// it comes (on the calling thread, in completion order).
pub fn run_all(
    session: &Session,
    config: &RunConfig,
    jobs: &[&TestCase],
    mut on_finish: impl FnMut(Finished),
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Result<Finished>>();
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.clamp(1, jobs.len().max(1)) {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || {
                loop {
                    let job = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = jobs.get(job) else { break };
                    let result = run_one(session, config, job, case);
                    if tx.send(result).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for result in rx {
            on_finish(result?);
        }
        Ok(())
    })
}

fn run_one(session: &Session, config: &RunConfig, job: usize, case: &TestCase) -> Result<Finished> {
    let binary = &session.built.binaries[case.binary];
    let trace = config.trace_dir.join(format!("{job}.trace"));
    let mut command = Command::new(&binary.path);
    let whole = case.name == WHOLE_BINARY && binary.custom_harness;
    if whole {
        command.args(&config.custom_harness_args);
    } else {
        command.args(["--exact", &case.name, "--nocapture"]);
        if case.ignored {
            command.arg("--include-ignored");
        }
        // The harness's main thread is told apart from the test by being the
        // main thread of a process running this binary (the shim compares
        // with `/proc/self/exe`, which is canonical).
        let canonical = std::fs::canonicalize(&binary.path).unwrap_or_else(|_| binary.path.clone());
        command.env("EKSTAZI_LIBTEST", canonical);
    }
    command
        .current_dir(binary.manifest_dir())
        .envs(session.envs[case.binary].iter().map(|(k, v)| (k, v)))
        .env("LD_PRELOAD", preload(&config.shim))
        .env("EKSTAZI_TRACE_FILE", &trace)
        .stdin(Stdio::null());
    let (mut reader, writer) = std::io::pipe().context("cannot create a pipe")?;
    command.stdout(writer.try_clone()?).stderr(writer);

    let started = SystemTime::now();
    let clock = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {}", binary.path.display()))?;
    // The pipe's write ends now live in the child alone: drop ours so that
    // reading ends when the test's processes close theirs.
    drop(command);
    let mut output = Vec::new();
    reader.read_to_end(&mut output).ok();
    let status = child.wait().context("lost the test process")?;
    let duration = clock.elapsed();

    let outcome = if whole {
        match (status.success(), status.code()) {
            (true, _) => Outcome::Passed,
            (false, Some(_)) => Outcome::Failed,
            (false, None) => Outcome::Crashed,
        }
    } else {
        judge(status, &output)
    };
    Ok(Finished {
        job,
        outcome,
        duration,
        started,
        output,
        trace,
        partial: whole && !config.custom_harness_args.is_empty(),
    })
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

/// `LD_PRELOAD` with the shim first and the user's own preloads kept.
fn preload(shim: &Path) -> OsString {
    let mut value = shim.as_os_str().to_owned();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
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
