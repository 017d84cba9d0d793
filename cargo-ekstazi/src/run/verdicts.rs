//! Verdicts first: the selected tests run the way `cargo test` runs them,
//! one process per test binary with libtest's threads, on the instrumented
//! build with the shim inert (nothing traced, nothing written), so that
//! their verdicts come as soon as `cargo test`'s would.
//!
//! Nothing here is recorded: a verdict-first run hands its selected tests
//! to a recording in the background (`crate::run::background`), which runs
//! them again one process each, under the shim, as an ordinary run does;
//! a run whose records nobody keeps (`--no-record`, a pull request's job)
//! ends with the verdicts.

use crate::cargo::libtest::{TestCase, WHOLE_BINARY};
use crate::run::scheduler::{Suite, doctests_command};
use crate::style::BOLD;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// How the verdict run is set up.
pub struct VerdictConfig<'a> {
    /// libtest's `--test-threads`.
    pub jobs: usize,
    /// The user's words after `--`, for `harness = false` binaries and
    /// doctests (as the scheduler gives them).
    pub custom_harness_args: &'a [String],
    /// `--nocapture` or `--show-output` asked for: passing tests' output is
    /// shown too, after each (libtest's `--show-output`, which keeps the
    /// `test <name> ... ok` lines whole).
    pub show_output: bool,
    /// A binary whose process fails fails its tests that libtest did not
    /// report failed (a crash in a destructor after the last `ok`), as it
    /// fails `cargo test`. Off when a recording follows, which runs each
    /// test alone and finds which it was.
    pub exit_status_counts: bool,
}

/// Runs `cases`, binary by binary in the order they come, echoing what
/// libtest prints to `out`. Returns, per case, whether it passed: a test
/// libtest did not report as `ok` did not.
pub fn run(
    suite: &Suite<'_>,
    cases: &[&TestCase],
    config: &VerdictConfig<'_>,
    out: &mut impl Write,
) -> Result<Vec<bool>> {
    let mut passed = vec![false; cases.len()];
    let mut order: Vec<usize> = Vec::new();
    let mut by_binary: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, case) in cases.iter().enumerate() {
        by_binary
            .entry(case.binary)
            .or_insert_with(|| {
                order.push(case.binary);
                Vec::new()
            })
            .push(i);
    }
    for binary in order {
        let jobs = &by_binary[&binary];
        let built = &suite.binaries[binary];
        writeln!(out, "     {BOLD}Running{BOLD:#} {}", built.key)?;
        out.flush()?;
        if let Some(doctests) = &built.doctests {
            let mut command = doctests_command(suite, config.custom_harness_args, doctests);
            let ok = run_whole(&mut command, "cargo test --doc")?;
            jobs.iter().for_each(|&i| passed[i] = ok);
            continue;
        }
        let mut command = Command::new(&built.path);
        command
            .current_dir(built.manifest_dir())
            .envs(suite.envs[binary].iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        let whole = jobs.len() == 1 && cases[jobs[0]].name == WHOLE_BINARY && built.custom_harness;
        if whole {
            command.args(config.custom_harness_args);
            passed[jobs[0]] = run_whole(&mut command, &built.key)?;
            continue;
        }
        command
            .arg("--exact")
            .args(jobs.iter().map(|&i| &cases[i].name))
            .args(["--test-threads", &config.jobs.to_string()]);
        if jobs.iter().any(|&i| cases[i].ignored) {
            command.arg("--include-ignored");
        }
        if config.show_output {
            command.arg("--show-output");
        }
        let (reported, success) = run_libtest(&mut command, &built.key, out)?;
        let blamed = reported.values().any(|ok| !ok);
        for &i in jobs {
            passed[i] = reported.get(cases[i].name.as_str()) == Some(&true)
                && (success || blamed || !config.exit_status_counts);
        }
    }
    Ok(passed)
}

/// A process that is one verdict (a custom harness, a library's doctests):
/// its output straight to the terminal, its exit status the verdict.
fn run_whole(command: &mut Command, what: &str) -> Result<bool> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {what}"))?;
    Ok(status.success())
}

/// A libtest binary's run: its output echoed as it comes, each test's
/// verdict read from its `test <name> ... ok` lines, and whether the
/// process succeeded.
fn run_libtest(
    command: &mut Command,
    key: &str,
    out: &mut impl Write,
) -> Result<(HashMap<String, bool>, bool)> {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run the tests of {key}"))?;
    let stdout = child.stdout.take().expect("piped");
    let mut reported = HashMap::new();
    for line in BufReader::new(stdout).split(b'\n') {
        let line = line.with_context(|| format!("cannot read the output of {key}"))?;
        out.write_all(&line)?;
        out.write_all(b"\n")?;
        if let Some((name, ok)) = verdict_of(&String::from_utf8_lossy(&line)) {
            reported.insert(name, ok);
        }
    }
    out.flush()?;
    let status = child
        .wait()
        .with_context(|| format!("lost the tests of {key}"))?;
    Ok((reported, status.success()))
}

/// libtest's line for a finished test: its name, and whether it passed.
fn verdict_of(line: &str) -> Option<(String, bool)> {
    let (name, verdict) = line.strip_prefix("test ")?.rsplit_once(" ... ")?;
    if verdict.starts_with("ok") {
        Some((name.to_owned(), true))
    } else if verdict.starts_with("FAILED") {
        Some((name.to_owned(), false))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_lines_give_verdicts() {
        assert_eq!(verdict_of("test a::b ... ok"), Some(("a::b".into(), true)));
        assert_eq!(
            verdict_of("test a::b ... FAILED"),
            Some(("a::b".into(), false))
        );
        assert_eq!(verdict_of("test a::b ... ignored"), None);
        assert_eq!(verdict_of("test result: ok. 1 passed"), None);
        assert_eq!(verdict_of("running 3 tests"), None);
    }
}
