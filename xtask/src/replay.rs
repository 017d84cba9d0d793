//! `cargo xtask eval replay`: replays a real project's first-parent history
//! and measures, at every commit, what cargo-ekstazi selects against running
//! everything with `cargo test` — and checks safety: every test whose
//! outcome under `cargo test` changed since the previous commit must have
//! been selected.
//!
//! Per commit and granularity it records tests available, tests selected
//! (and why), build, test and end-to-end times of both, and misses. Output:
//! `<out>/replay-<granularity>.csv` and `<out>/summary.md`.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct ReplayArgs {
    pub repo: PathBuf,
    pub commits: usize,
    pub from: String,
    pub granularities: Vec<String>,
    pub out: PathBuf,
    pub cargo_args: Vec<String>,
    pub ekstazi: PathBuf,
}

/// A test's identity: binary key and name.
type TestId = (String, String);

/// What `cargo ekstazi test --report-json` wrote.
#[derive(Deserialize)]
struct Report {
    timings: BTreeMap<String, f64>,
    tests: Vec<ReportTest>,
}

#[derive(Deserialize)]
struct ReportTest {
    binary: String,
    name: String,
    ignored: bool,
    selected: bool,
    reasons: Vec<String>,
}

/// One commit's measurements for one granularity.
struct Row {
    commit: String,
    tests: usize,
    selected: usize,
    retest_build: f64,
    retest_test: f64,
    ekstazi_total: f64,
    ekstazi_build: f64,
    ekstazi_analysis: f64,
    ekstazi_run: f64,
    misses: usize,
    changed_outcomes: usize,
    top_reason: String,
}

pub fn replay(args: &ReplayArgs) -> Result<()> {
    std::fs::create_dir_all(&args.out)?;
    // A copy of the binary: rebuilding cargo-ekstazi while a replay runs
    // must not change the tool half-way through it.
    let ekstazi = args.out.join("cargo-ekstazi");
    std::fs::copy(&args.ekstazi, &ekstazi).context("cannot copy cargo-ekstazi")?;
    let scratch = args.out.join("worktree");
    if !scratch.exists() {
        run_ok(
            Command::new("git")
                .args(["clone", "-q", "--no-checkout"])
                .arg(&args.repo)
                .arg(&scratch),
        )?;
    }
    let listing = output(
        Command::new("git")
            .arg("-C")
            .arg(&scratch)
            .args(["rev-list", "--first-parent", "-n"])
            .arg((args.commits + 1).to_string())
            .arg(&args.from),
    )?;
    let mut commits: Vec<String> = listing.lines().map(str::to_owned).collect();
    commits.reverse();
    eprintln!(
        "replaying {} commits (+1 to start from) of {}",
        commits.len() - 1,
        args.repo.display()
    );

    let mut rows: HashMap<String, Vec<Row>> = HashMap::new();
    let mut previous: Option<HashMap<TestId, String>> = None;
    let mut skipped_commits = 0;
    for (i, commit) in commits.iter().enumerate() {
        run_ok(
            Command::new("git")
                .arg("-C")
                .arg(&scratch)
                .args(["checkout", "-q", "-f", commit]),
        )?;
        let subject = output(Command::new("git").arg("-C").arg(&scratch).args([
            "log",
            "-1",
            "--format=%h %s",
        ]))?;
        eprintln!("[{i}/{}] {}", commits.len() - 1, subject.trim());

        // Retest-all: cargo test, build and tests timed apart.
        let (built, retest_build) = timed(|| {
            cargo(&scratch, &["test", "--no-run", "-q"], &args.cargo_args)
                .status()
                .map(|s| s.success())
        })?;
        if !built {
            eprintln!("  does not build: skipped");
            skipped_commits += 1;
            previous = None;
            continue;
        }
        let (retest, retest_test) = timed(|| {
            merged_output(cargo(
                &scratch,
                &["test", "--no-fail-fast"],
                &args.cargo_args,
            ))
        })?;
        let keys = executable_keys(&scratch, &args.cargo_args)?;
        let outcomes = parse_cargo_test(&retest, &keys);

        for granularity in &args.granularities {
            let state = args.out.join(format!("state-{granularity}"));
            let report_path = args.out.join(format!("report-{granularity}.json"));
            let (status, total) = timed(|| {
                Command::new(&ekstazi)
                    .args(["ekstazi", "test", "-q", "--granularity", granularity])
                    .arg("--state-dir")
                    .arg(&state)
                    .arg("--report-json")
                    .arg(&report_path)
                    .args(&args.cargo_args)
                    .current_dir(&scratch)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map_err(anyhow::Error::from)
            })?;
            let report: Report = match std::fs::read(&report_path) {
                Ok(bytes) => serde_json::from_slice(&bytes)?,
                Err(_) => bail!("cargo ekstazi wrote no report at {commit} ({status})"),
            };
            let _ = std::fs::remove_file(&report_path);
            let in_scope: Vec<&ReportTest> = report.tests.iter().filter(|t| !t.ignored).collect();
            let selected: HashMap<TestId, &ReportTest> = in_scope
                .iter()
                .filter(|t| t.selected)
                .map(|t| ((t.binary.clone(), t.name.clone()), *t))
                .collect();

            // Safety: every test whose retest-all outcome changed since the
            // previous commit (or that is new) must have been selected.
            let mut misses = 0;
            let mut changed = 0;
            if let Some(previous) = &previous {
                for (id, outcome) in &outcomes {
                    if outcome == "ignored" {
                        continue;
                    }
                    let before = previous.get(id);
                    if before.is_some_and(|b| b == outcome) {
                        continue;
                    }
                    changed += usize::from(before.is_some());
                    if !selected.contains_key(id)
                        && in_scope
                            .iter()
                            .any(|t| (&t.binary, &t.name) == (&id.0, &id.1))
                    {
                        misses += 1;
                        eprintln!(
                            "  MISS ({granularity}): {} {} went {} -> {outcome} at {commit} but was not selected",
                            id.0,
                            id.1,
                            before.map_or("(new)", String::as_str)
                        );
                    }
                }
            }
            let mut reasons: HashMap<String, usize> = HashMap::new();
            for test in selected.values() {
                for reason in &test.reasons {
                    let kind = reason.split(':').next().unwrap_or(reason).to_owned();
                    *reasons.entry(kind).or_default() += 1;
                }
            }
            let top_reason = reasons
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .map(|(r, n)| format!("{r} ({n})"))
                .unwrap_or_default();
            let timing = |stage: &str| report.timings.get(stage).copied().unwrap_or(0.0);
            let row = Row {
                commit: subject
                    .split_whitespace()
                    .next()
                    .unwrap_or(commit)
                    .to_owned(),
                tests: in_scope.len(),
                selected: selected.len(),
                retest_build: retest_build.as_secs_f64(),
                retest_test: retest_test.as_secs_f64(),
                ekstazi_total: total.as_secs_f64(),
                ekstazi_build: timing("build"),
                ekstazi_analysis: timing("analysis")
                    + timing("binary checksums")
                    + timing("function fingerprints")
                    + timing("list"),
                ekstazi_run: timing("run"),
                misses,
                changed_outcomes: changed,
                top_reason,
            };
            eprintln!(
                "  {granularity}: {}/{} selected ({:.1}%), {:.1}s vs cargo test {:.1}s{}",
                row.selected,
                row.tests,
                share(row.selected, row.tests),
                row.ekstazi_total,
                row.retest_build + row.retest_test,
                if misses > 0 {
                    format!(", {misses} MISSES")
                } else {
                    String::new()
                }
            );
            if i > 0 {
                rows.entry(granularity.clone()).or_default().push(row);
            }
        }
        previous = Some(outcomes);
    }

    let mut summary = String::new();
    writeln!(
        summary,
        "## {} — {} commits from {}\n",
        args.repo.display(),
        commits.len() - 1,
        args.from
    )?;
    writeln!(
        summary,
        "Commits that did not build (skipped): {skipped_commits}\n"
    )?;
    writeln!(
        summary,
        "| granularity | commits | mean selected | median selected | mean e2e time vs cargo test | mean test time vs cargo test | mean selection cost | misses |"
    )?;
    writeln!(summary, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
    for granularity in &args.granularities {
        let rows = rows.get(granularity).map(Vec::as_slice).unwrap_or(&[]);
        write_csv(&args.out.join(format!("replay-{granularity}.csv")), rows)?;
        if rows.is_empty() {
            continue;
        }
        let shares: Vec<f64> = rows.iter().map(|r| share(r.selected, r.tests)).collect();
        let e2e: Vec<f64> = rows
            .iter()
            .map(|r| r.ekstazi_total / (r.retest_build + r.retest_test))
            .collect();
        let test_time: Vec<f64> = rows.iter().map(|r| r.ekstazi_run / r.retest_test).collect();
        let cost: Vec<f64> = rows.iter().map(|r| r.ekstazi_analysis).collect();
        writeln!(
            summary,
            "| {granularity} | {} | {:.1}% | {:.1}% | {:.0}% | {:.0}% | {:.2}s | {} |",
            rows.len(),
            mean(&shares),
            median(&shares),
            100.0 * mean(&e2e),
            100.0 * mean(&test_time),
            mean(&cost),
            rows.iter().map(|r| r.misses).sum::<usize>()
        )?;
    }
    std::fs::write(args.out.join("summary.md"), &summary)?;
    print!("{summary}");
    Ok(())
}

fn write_csv(path: &Path, rows: &[Row]) -> Result<()> {
    let mut csv = String::from(
        "commit,tests,selected,share,retest_build_s,retest_test_s,ekstazi_total_s,ekstazi_build_s,ekstazi_analysis_s,ekstazi_run_s,changed_outcomes,misses,top_reason\n",
    );
    for r in rows {
        writeln!(
            csv,
            "{},{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{:.3},{:.2},{},{},\"{}\"",
            r.commit,
            r.tests,
            r.selected,
            share(r.selected, r.tests),
            r.retest_build,
            r.retest_test,
            r.ekstazi_total,
            r.ekstazi_build,
            r.ekstazi_analysis,
            r.ekstazi_run,
            r.changed_outcomes,
            r.misses,
            r.top_reason.replace('"', "'")
        )?;
    }
    std::fs::write(path, csv)?;
    Ok(())
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

fn cargo(dir: &Path, args: &[&str], extra: &[String]) -> Command {
    let mut command = Command::new("cargo");
    command.args(args).args(extra).current_dir(dir);
    command
}

fn timed<T, E: Into<anyhow::Error>>(f: impl FnOnce() -> Result<T, E>) -> Result<(T, Duration)> {
    let start = Instant::now();
    let value = f().map_err(Into::into)?;
    Ok((value, start.elapsed()))
}

fn run_ok(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The binary key of every test executable `cargo test` builds, by path.
fn executable_keys(dir: &Path, extra: &[String]) -> Result<HashMap<PathBuf, String>> {
    use cargo_metadata::Message;
    let out = cargo(dir, &["test", "--no-run", "--message-format=json"], extra)
        .stderr(Stdio::null())
        .output()?;
    let mut keys = HashMap::new();
    for message in Message::parse_stream(&out.stdout[..]) {
        if let Message::CompilerArtifact(artifact) = message?
            && artifact.profile.test
            && let Some(executable) = artifact.executable
        {
            let kind = match artifact.target.kind.first() {
                Some(cargo_metadata::TargetKind::Bin) => "bin",
                Some(cargo_metadata::TargetKind::Test) => "test",
                Some(cargo_metadata::TargetKind::Bench) => "bench",
                Some(cargo_metadata::TargetKind::Example) => "example",
                _ => "lib",
            };
            let package = artifact.package_id.repr.clone();
            let name = package_name(&package);
            let key = ekstazi_core::key::binary_key(&name, kind, &artifact.target.name);
            keys.insert(executable.into_std_path_buf(), key);
        }
    }
    Ok(keys)
}

/// The package name in a package id (`path+file:///x/grep#0.3.1`,
/// `registry+...#name@1.0`, or the old `name 1.0 (source)`).
fn package_name(id: &str) -> String {
    if let Some((_, tail)) = id.rsplit_once('#') {
        if let Some((name, _)) = tail.split_once('@') {
            return name.to_owned();
        }
        // `path+file:///x/ripgrep#15.2.0`: the name is the directory's.
        return id[..id.len() - tail.len() - 1]
            .rsplit('/')
            .next()
            .unwrap_or(tail)
            .to_owned();
    }
    id.split_whitespace().next().unwrap_or(id).to_owned()
}

/// Runs a command with stdout and stderr in one pipe, so that cargo's
/// `Running ...` lines (stderr) stay in order with the tests' results (stdout).
fn merged_output(mut command: Command) -> Result<String> {
    use std::io::Read;
    let (mut reader, writer) = std::io::pipe()?;
    command.stdout(writer.try_clone()?).stderr(writer);
    let mut child = command.spawn()?;
    drop(command);
    let mut text = String::new();
    reader.read_to_string(&mut text)?;
    child.wait()?;
    Ok(text)
}

/// Per test, `ok`, `FAILED` or `ignored`, from `cargo test`'s output: a
/// binary's results follow its `Running ... (path)` line.
fn parse_cargo_test(output: &str, keys: &HashMap<PathBuf, String>) -> HashMap<TestId, String> {
    let mut outcomes = HashMap::new();
    let mut current: Option<&String> = None;
    for line in output.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("Doc-tests ") {
            current = None;
        } else if let Some(rest) = trimmed.strip_prefix("Running ") {
            current = rest
                .rsplit_once('(')
                .and_then(|(_, p)| p.strip_suffix(')'))
                .and_then(|path| keys.iter().find(|(p, _)| p.ends_with(path)).map(|(_, k)| k));
        } else if let (Some(key), Some(rest)) = (current, line.strip_prefix("test "))
            && let Some((name, outcome)) = rest.rsplit_once(" ... ")
        {
            let outcome = outcome
                .split(',')
                .next()
                .unwrap_or(outcome)
                .trim()
                .to_owned();
            outcomes.insert((key.clone(), name.to_owned()), outcome);
        }
    }
    outcomes
}
