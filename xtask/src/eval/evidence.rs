//! What the evaluation runs and reads, shared by `eval replay` and
//! `eval mutate`: retest-all with `cargo test` (outcome per test, build,
//! test and doctest time), `cargo ekstazi test --report-json`, and, when a
//! test that had to run was skipped, the test's record from the state
//! directory, printed so that the miss can be investigated.

use crate::common::process::{ekstazi_binary, output, run_ok};
use anyhow::{Context, Result};
use clap::builder::TypedValueParser as _;
use ekstazi_core::model::code_dep::CodeUnit;
use ekstazi_core::model::dep::Sum;
use ekstazi_core::storage::store::{Loaded, Store};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What every evaluation of a real project is given, as the command line
/// gives it (each `eval` command flattens it after its own options).
/// [`Project::resolve`] makes it what an evaluation runs on before any
/// evaluation sees it.
#[derive(clap::Args)]
pub struct Project {
    /// A git repository (a clone or a bare mirror) of the project
    #[arg(long)]
    pub repo: PathBuf,
    /// Where the scratch worktree, state and results go
    #[arg(long)]
    pub out: PathBuf,
    /// A cargo-ekstazi binary to measure [default: built from this
    /// workspace in release mode]
    #[arg(long)]
    pub ekstazi: Option<PathBuf>,
    /// Seconds after which a test is killed and counted as failed
    /// (`cargo ekstazi test --timeout`); `cargo test`, which has no
    /// per-test limit, has its whole test run stopped after as long, and
    /// the tests libtest reports still running count as failed
    #[arg(long, default_value = "300", value_parser = clap::value_parser!(u64).map(Duration::from_secs))]
    pub timeout: Duration,
    /// Cargo options for every command (e.g. --workspace)
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

impl Project {
    /// Paths made absolute, and the tool found or built, unless `tool` is
    /// false (a dry run measures nothing, and has none).
    pub fn resolve(self, tool: bool) -> Result<Self> {
        Ok(Project {
            repo: std::path::absolute(self.repo)?,
            out: std::path::absolute(self.out)?,
            ekstazi: if tool {
                Some(ekstazi_binary(self.ekstazi)?)
            } else {
                None
            },
            ..self
        })
    }

    /// Every evaluation's opening: the run's own copy of cargo-ekstazi,
    /// when there is one (rebuilding cargo-ekstazi while a run goes on must
    /// not change the tool half-way through it), and a scratch clone of the
    /// project, both under `out`. Returns the copy's path and the clone's.
    pub fn scratch_setup(&self) -> Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(&self.out)?;
        let copy = self.out.join("cargo-ekstazi");
        if let Some(ekstazi) = self.ekstazi.as_deref().filter(|e| *e != copy) {
            std::fs::copy(ekstazi, &copy).context("cannot copy cargo-ekstazi")?;
        }
        let scratch = self.out.join("worktree");
        if !scratch.exists() {
            run_ok(
                Command::new("git")
                    .args(["clone", "-q", "--no-checkout"])
                    .arg(&self.repo)
                    .arg(&scratch),
            )?;
        }
        Ok((copy, scratch))
    }
}

/// A test's identity: binary key and name.
pub type TestId = (String, String);

/// What `cargo test` (retest-all) did.
pub struct RetestAll {
    /// `cargo test --no-run` succeeded.
    pub built: bool,
    /// Seconds of `cargo test --no-run`.
    pub build: f64,
    /// Seconds of `cargo test` until its first doctest (the tests cargo
    /// ekstazi also runs).
    pub tests: f64,
    /// Seconds of `cargo test`'s doctests (compared apart: the evaluation
    /// runs `cargo ekstazi test --no-doc`).
    pub doctests: f64,
    /// Per test: `ok`, `FAILED`, `ignored`, or `TIMEOUT` for a test still
    /// running when the run was stopped.
    pub outcomes: HashMap<TestId, String>,
    /// The run was stopped at the time limit: tests after the one that
    /// hung have no outcome.
    pub timed_out: bool,
}

/// Runs `cargo test --no-run`, then `cargo test --no-fail-fast`, in `dir`,
/// stopping the test run after `limit` (a mutant can make a test loop
/// forever, and libtest has no timeout of its own). The tests' output is
/// appended to `log`.
pub fn retest_all(
    dir: &Path,
    cargo_args: &[String],
    limit: Duration,
    log: &Path,
) -> Result<RetestAll> {
    retest_all_in(dir, None, cargo_args, limit, log)
}

/// [`retest_all`] with a target directory of its own: one the harness
/// chooses, rather than whatever `CARGO_TARGET_DIR` the harness inherited
/// (the graph replay keeps every build out of the worktree it files
/// records from).
pub fn retest_all_in(
    dir: &Path,
    target: Option<&Path>,
    cargo_args: &[String],
    limit: Duration,
    log: &Path,
) -> Result<RetestAll> {
    let cargo = |args: &[&str]| {
        let mut command = cargo(dir, args, cargo_args);
        if let Some(target) = target {
            command.env("CARGO_TARGET_DIR", target);
        }
        command
    };
    empty_private_tmp(dir)?;
    let clock = Instant::now();
    let built = cargo(&["test", "--no-run", "-q"])
        .stdout(Stdio::null())
        .stderr(log_file(log)?)
        .status()?
        .success();
    let build = clock.elapsed().as_secs_f64();
    if !built {
        return Ok(RetestAll {
            built,
            build,
            tests: 0.0,
            doctests: 0.0,
            outcomes: HashMap::new(),
            timed_out: false,
        });
    }
    let keys = executable_keys(cargo(&["test", "--no-run", "--message-format=json"]))?;
    let clock = Instant::now();
    let merged = merged_output(cargo(&["test", "--no-fail-fast"]), "Doc-tests ", limit)?;
    let text = merged.text;
    let total = clock.elapsed();
    std::io::Write::write_all(&mut log_file(log)?, text.as_bytes())?;
    let tests = merged.until_marker.unwrap_or(total);
    let mut outcomes = parse_cargo_test(&text, &keys);
    if merged.timed_out {
        for id in still_running(&text, &keys) {
            outcomes.entry(id).or_insert_with(|| "TIMEOUT".to_owned());
        }
    }
    Ok(RetestAll {
        built,
        build,
        tests: tests.as_secs_f64(),
        doctests: (total - tests).as_secs_f64(),
        outcomes,
        timed_out: merged.timed_out,
    })
}

/// `id` run again alone under `cargo test`, `runs` times, at the commit
/// checked out in `dir`: its outcome each time (`ok`, `FAILED`, ..., or
/// `not run`). A miss whose test gives its previous outcome back here
/// changed with the run, not with the commit: the replay tells it apart.
pub fn rerun_alone(
    dir: &Path,
    cargo_args: &[String],
    id: &TestId,
    runs: usize,
    limit: Duration,
    log: &Path,
) -> Result<Vec<String>> {
    let keys = executable_keys(cargo(
        dir,
        &["test", "--no-run", "--message-format=json"],
        cargo_args,
    ))?;
    let mut args = cargo_args.to_vec();
    if !args.iter().any(|a| a == "--") {
        args.push("--".to_owned());
    }
    args.extend(["--exact".to_owned(), id.1.clone()]);
    let mut outcomes = Vec::with_capacity(runs);
    for _ in 0..runs {
        empty_private_tmp(dir)?;
        // `--tests`: the test executables alone, not the doctests, which
        // the evaluation leaves out.
        let merged = merged_output(
            cargo(dir, &["test", "--no-fail-fast", "--tests"], &args),
            "Doc-tests ",
            limit,
        )?;
        std::io::Write::write_all(&mut log_file(log)?, merged.text.as_bytes())?;
        let found = parse_cargo_test(&merged.text, &keys);
        outcomes.push(
            found
                .get(id)
                .cloned()
                .unwrap_or_else(|| "not run".to_owned()),
        );
    }
    Ok(outcomes)
}

/// The content of every test executable a report lists, by binary key:
/// which of them a commit changed is what the selection's cost is
/// measured against.
pub fn binary_digests(report: &Report) -> HashMap<String, blake3::Hash> {
    use rayon::prelude::*;
    report
        .binaries
        .par_iter()
        .filter_map(|b| {
            let mut hasher = blake3::Hasher::new();
            hasher
                .update_reader(std::fs::File::open(&b.path).ok()?)
                .ok()?;
            Some((b.binary.clone(), hasher.finalize()))
        })
        .collect()
}

/// What `cargo ekstazi test --report-json` wrote.
#[derive(Deserialize)]
pub struct Report {
    pub timings: BTreeMap<String, f64>,
    /// The test executables the run listed (an older tool's report may
    /// leave them out).
    #[serde(default)]
    pub binaries: Vec<ReportBinary>,
    pub tests: Vec<ReportTest>,
}

#[derive(Deserialize)]
pub struct ReportBinary {
    pub binary: String,
    pub path: PathBuf,
}

#[derive(Deserialize)]
pub struct ReportTest {
    pub binary: String,
    pub name: String,
    pub ignored: bool,
    pub selected: bool,
    pub reasons: Vec<String>,
    pub outcome: Option<String>,
    /// Skipped on the word of a record filed under another commit.
    #[serde(default)]
    pub vouched_by: Option<VouchedBy>,
}

/// The commit whose filed record vouched for a skipped test (`docs/reference/json.md`;
/// its `parent` is not needed: the replay knows every commit's parents).
#[derive(Clone, Debug, Deserialize)]
pub struct VouchedBy {
    pub commit: String,
}

impl Report {
    pub fn timing(&self, stage: &str) -> f64 {
        self.timings.get(stage).copied().unwrap_or(0.0)
    }

    /// What it costs to decide what to run: everything but building and
    /// running the tests (cargo metadata, listing, checksums, fingerprints,
    /// loading and checking records).
    pub fn selection_cost(&self) -> f64 {
        [
            "workspace",
            "list",
            "binary checksums",
            "function fingerprints",
            "analysis",
        ]
        .iter()
        .map(|s| self.timing(s))
        .sum()
    }

    /// Tests in scope (not `#[ignore]`d).
    pub fn in_scope(&self) -> impl Iterator<Item = &ReportTest> {
        self.tests.iter().filter(|t| !t.ignored)
    }

    pub fn selected(&self) -> HashMap<TestId, &ReportTest> {
        self.in_scope()
            .filter(|t| t.selected)
            .map(|t| ((t.binary.clone(), t.name.clone()), t))
            .collect()
    }

    pub fn knows(&self, id: &TestId) -> bool {
        self.in_scope().any(|t| t.binary == id.0 && t.name == id.1)
    }

    /// Selected tests per kind of reason (`function changed`, `file
    /// changed`, `global: rustc changed`, ...), most frequent first.
    pub fn reason_kinds(&self) -> Vec<(String, usize)> {
        let mut kinds: HashMap<String, usize> = HashMap::new();
        for test in self.in_scope().filter(|t| t.selected) {
            let mut seen: Vec<String> = test.reasons.iter().map(|r| reason_kind(r)).collect();
            seen.sort();
            seen.dedup();
            for kind in seen {
                *kinds.entry(kind).or_default() += 1;
            }
        }
        let mut kinds: Vec<_> = kinds.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        kinds
    }
}

/// The kind of a selection reason: `function changed: f` → `function
/// changed`; `global: rustc changed` stays whole.
pub fn reason_kind(reason: &str) -> String {
    // `12 more functions changed (in ...)` continues a `function changed`.
    let digits = reason.trim_start_matches(|c: char| c.is_ascii_digit());
    if digits.len() < reason.len() && digits.starts_with(" more ") {
        return digits
            .trim_start_matches(" more ")
            .split(" (")
            .next()
            .unwrap_or(digits)
            .replace("functions", "function")
            .to_owned();
    }
    if reason.starts_with("global:") {
        reason.to_owned()
    } else {
        reason.split(':').next().unwrap_or(reason).to_owned()
    }
}

/// `kind (n); kind (n)`.
pub fn format_kinds(kinds: &[(String, usize)]) -> String {
    kinds
        .iter()
        .map(|(k, n)| format!("{k} ({n})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One `cargo ekstazi test` run.
pub struct EkstaziRun {
    /// `None` when it wrote no report (it failed before running tests).
    pub report: Option<Report>,
    /// Wall-clock seconds.
    pub wall: f64,
    /// With `--verdict-first`, seconds its recording ran in the background
    /// after it ended.
    pub recording: f64,
}

pub struct EkstaziOpts<'a> {
    pub ekstazi: &'a Path,
    pub dir: &'a Path,
    pub state: &'a Path,
    pub granularity: &'a str,
    pub cargo_args: &'a [String],
    /// A target directory of its own (`CARGO_TARGET_DIR`), if any.
    pub target_dir: Option<&'a Path>,
    /// Where its output goes.
    pub log: &'a Path,
    /// Where the report is kept.
    pub report: &'a Path,
    /// `--timeout`: a test running longer is killed and counted as failed.
    pub timeout: Duration,
    /// How the tests run and are recorded.
    pub mode: RunMode,
}

/// How a timed `cargo ekstazi test` runs its tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// A process per test, recorded as it goes.
    Record,
    /// `--verdict-first`: the run's recording in the background is waited
    /// for, and its time given apart ([`EkstaziRun::recording`]).
    VerdictFirst,
    /// `--no-record`: as `cargo test` runs them, nothing recorded (a pull
    /// request's job). No `--timeout`: it would need a process per test.
    NoRecord,
}

pub fn ekstazi_test(opts: &EkstaziOpts) -> Result<EkstaziRun> {
    ekstazi_test_with_env(opts, &[])
}

/// [`ekstazi_test`] with `EKSTAZI_*` settings of the harness's own (the
/// graph replay's history bound): the worktree must stay clean for the run
/// to be filed, so they cannot go in `.config/ekstazi.toml`.
pub fn ekstazi_test_with_env(opts: &EkstaziOpts, env: &[(&str, String)]) -> Result<EkstaziRun> {
    let _ = std::fs::remove_file(opts.report);
    empty_private_tmp(opts.dir)?;
    let mut command = Command::new(opts.ekstazi);
    command
        // Doctests are compared apart: `cargo test`'s doctest time is
        // measured on its own, and a library's doctests are one unit here.
        .args([
            "ekstazi",
            "test",
            "--no-doc",
            "--granularity",
            opts.granularity,
        ])
        .arg("--state-dir")
        .arg(opts.state)
        .arg("--report-json")
        .arg(opts.report);
    match opts.mode {
        RunMode::Record => command
            .arg("--timeout")
            .arg(opts.timeout.as_secs().max(1).to_string()),
        RunMode::VerdictFirst => command
            .arg("--timeout")
            .arg(opts.timeout.as_secs().max(1).to_string())
            .arg("--verdict-first"),
        RunMode::NoRecord => command.arg("--no-record"),
    };
    command
        .args(opts.cargo_args)
        .current_dir(opts.dir)
        .env("TMPDIR", private_tmp(opts.dir))
        .stdout(log_file(opts.log)?)
        .stderr(log_file(opts.log)?)
        .envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(target) = opts.target_dir {
        command.env("CARGO_TARGET_DIR", target);
    }
    let clock = Instant::now();
    command
        .status()
        .with_context(|| format!("cannot run {}", opts.ekstazi.display()))?;
    let wall = clock.elapsed().as_secs_f64();
    let recording = crate::common::process::wait_for_recording(opts.state)?.as_secs_f64();
    let report = match std::fs::read(opts.report) {
        Ok(bytes) => Some(serde_json::from_slice(&bytes)?),
        Err(_) => None,
    };
    Ok(EkstaziRun {
        report,
        wall,
        recording,
    })
}

/// The record of a test, as text a person can check a miss against: its
/// outcome, what it must always run for, every dependency with its
/// checksum, and the functions it executed per program.
pub fn describe_record(state: &Path, binary: &str, test: &str) -> String {
    let store = Store::new(state);
    let mut out = String::new();
    let record = match store.load(binary, test) {
        Loaded::Missing => return "no record".to_owned(),
        Loaded::Invalid(e) => return format!("record not accepted: {e}"),
        Loaded::Found(record) => record,
    };
    let table = ekstazi_core::digests::functions::FunctionTable::load(&store.functions_dir());
    let _ = writeln!(
        out,
        "record of {binary} {test}: {} in {:.3}s, granularity {}",
        record.outcome.as_str(),
        record.duration().as_secs_f64(),
        record.global.granularity
    );
    for always in &record.always {
        let _ = writeln!(out, "  always runs: {always}");
    }
    let _ = writeln!(out, "  {} dependencies:", record.deps.len());
    for dep in &record.deps {
        let sum = match &dep.sum {
            Sum::Hash(h) => hex(&h[..6]),
            Sum::Kind(k) => format!("{k:?}"),
            Sum::Absent => "absent".to_owned(),
            Sum::Unknown => "unknown".to_owned(),
        };
        let _ = writeln!(out, "    {:?} {} = {sum}", kind_of(&dep.target), dep.target);
    }
    for peer in &record.network {
        let _ = writeln!(out, "  network: {peer:?}");
    }
    for code in &record.code {
        let unit = match &code.unit {
            CodeUnit::TestBinary => "test binary".to_owned(),
            CodeUnit::Program(p) => p.to_string(),
        };
        let _ = writeln!(
            out,
            "  code of {unit} (build {}): {} functions executed",
            hex(&code.build[..6]),
            code.functions.len()
        );
        for id in &code.functions {
            match table.get(id) {
                Some(function) => {
                    let _ = writeln!(
                        out,
                        "    {}",
                        ekstazi_core::digests::fingerprint::demangle(&function.name)
                    );
                }
                None => {
                    let _ = writeln!(out, "    {} (not in the function table)", hex(id));
                }
            }
        }
    }
    out
}

fn kind_of(target: &ekstazi_core::model::dep::Target) -> &'static str {
    use ekstazi_core::model::dep::Target;
    match target {
        Target::Content(_) => "content",
        Target::Kind { .. } => "kind",
        Target::TestBinary => "binary",
        Target::Program(_) => "program",
        Target::Listing(_) => "listing",
        Target::Env(_) => "env",
        Target::Link(_) => "link",
        Target::Resolved(_) => "resolved",
        Target::Library(_) => "library",
        Target::BuildFile(_) => "build file",
        Target::Environment => "environment",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Prints a miss loudly on stderr and writes the full record beside the
/// results; returns the file written.
pub fn report_miss(
    dir: &Path,
    what: &str,
    state: &Path,
    id: &TestId,
    detail: &str,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let record = describe_record(state, &id.0, &id.1);
    let file = dir.join(format!(
        "{}.txt",
        ekstazi_core::storage::store::escape(&format!("{what}-{}-{}", id.0, id.1))
    ));
    std::fs::write(&file, format!("{detail}\n\n{record}"))?;
    let bar = "!".repeat(78);
    eprintln!("{bar}");
    eprintln!("MISS {what}: {} {}", id.0, id.1);
    eprintln!("{detail}");
    for line in record.lines().take(40) {
        eprintln!("  {line}");
    }
    eprintln!("  (whole record: {})", file.display());
    eprintln!("{bar}");
    Ok(file)
}

pub fn cargo(dir: &Path, args: &[&str], extra: &[String]) -> Command {
    let mut command = Command::new("cargo");
    command
        .args(args)
        .args(extra)
        .current_dir(dir)
        .env("TMPDIR", private_tmp(dir));
    command
}

/// The run's own temporary directory, beside its worktree (made, empty,
/// by [`empty_private_tmp`] before every measured run).
const PRIVATE_TMP: &str = "tmp";

/// `TMPDIR` for the project's tests: a run's own, so that two evaluations on
/// one machine cannot meet in fixed scratch paths (ripgrep's tests use
/// `$TMPDIR/ripgrep-tests/<test>/<n>`: two replays running at once made
/// each other's `cargo test` fail, which the safety check reported as
/// misses). `cargo ekstazi` makes its per-workspace root in it, and gives
/// each test its own `TMPDIR` there (the default); emptying it before a run
/// removes that root too, which the run makes again before its analysis.
pub fn private_tmp(worktree: &Path) -> PathBuf {
    worktree.parent().unwrap_or(worktree).join(PRIVATE_TMP)
}

/// Every measured run (each `cargo test`, each `cargo ekstazi test`) starts
/// with an empty `TMPDIR`, as a CI job on a fresh machine does, while
/// cargo-ekstazi's state carries over as a CI cache would carry it. Left
/// over, a run's scratch files are the next run's inputs: a test that found
/// its scratch directory missing and made it would find it there at the
/// next commit and rerun for that alone (ripgrep's `Dir::new`: 326 tests at
/// a window's first commit), and tests that share scratch paths by a
/// per-process counter (`ignore`'s `/tmp/rust-ignore/N`) would see what
/// another test left.
fn empty_private_tmp(worktree: &Path) -> Result<()> {
    let tmp = private_tmp(worktree);
    match std::fs::remove_dir_all(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot empty {}", tmp.display())),
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot make {}", tmp.display()))
}

pub fn log_file(path: &Path) -> Result<std::fs::File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
}

/// `git -C <dir> <args>`.
pub fn git(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("git");
    command.arg("-C").arg(dir).args(args);
    command
}

/// `rev` checked out in the scratch worktree `dir`, forced, and what the
/// previous commit's runs left there removed (snapshots a failure wrote,
/// say), so that it neither reaches this commit's runs nor keeps the tree
/// from being clean; ignored files (`target/`) stay.
pub fn checkout_clean(dir: &Path, rev: &str) -> Result<()> {
    run_ok(&mut git(dir, &["checkout", "-q", "-f", rev]))?;
    run_ok(&mut git(dir, &["clean", "-fdq"]))
}

/// [`checkout_clean`], then the commit's `<short hash> <subject>` line,
/// trimmed, for progress messages and reports.
pub fn checkout_headline(dir: &Path, rev: &str) -> Result<String> {
    checkout_clean(dir, rev)?;
    let line = output(&mut git(dir, &["log", "-1", "--format=%h %s"]))?;
    Ok(line.trim().to_owned())
}

/// The binary key of every test executable `cargo test` builds, by path,
/// from `command`: `cargo test --no-run --message-format=json`.
fn executable_keys(mut command: Command) -> Result<HashMap<PathBuf, String>> {
    use cargo_metadata::Message;
    let out = command.stderr(Stdio::null()).output()?;
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
            let key = ekstazi_core::model::key::binary_key(&name, kind, &artifact.target.name);
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

/// What [`merged_output`] read.
struct Merged {
    text: String,
    /// When the first line starting with the marker arrived.
    until_marker: Option<Duration>,
    /// The command was killed at the time limit.
    timed_out: bool,
}

/// Runs a command with stdout and stderr in one pipe, so that cargo's
/// `Running ...` lines (stderr) stay in order with the tests' results
/// (stdout). After `limit`, the command's whole process group (cargo and
/// the test binary it runs) is killed.
fn merged_output(mut command: Command, marker: &str, limit: Duration) -> Result<Merged> {
    use std::os::unix::process::CommandExt;
    let (reader, writer) = std::io::pipe()?;
    command
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .process_group(0);
    let clock = Instant::now();
    let mut child = command.spawn()?;
    drop(command);
    let group = child.id() as libc::pid_t;
    let (finished, wait_for_finish) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let expired = matches!(
            wait_for_finish.recv_timeout(limit),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        );
        if expired {
            // SAFETY: kill(2) on a process group this function created;
            // the leader is not yet reaped (waited for only after this
            // thread is joined), so the group id cannot have been reused.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        expired
    });
    let mut text = String::new();
    let mut until_marker = None;
    let mut reader = std::io::BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let s = String::from_utf8_lossy(&line);
        if until_marker.is_none() && s.trim_start().starts_with(marker) {
            until_marker = Some(clock.elapsed());
        }
        text.push_str(&s);
    }
    drop(finished);
    let timed_out = watchdog.join().unwrap_or(true);
    child.wait()?;
    if timed_out {
        text.push_str(&format!(
            "\n(stopped by the evaluation after {} s)\n",
            limit.as_secs()
        ));
    }
    Ok(Merged {
        text,
        until_marker,
        timed_out,
    })
}

/// Tests libtest reported as `running for over 60 seconds` (a warning,
/// printed only when the result line is late) without a result after it.
fn still_running(output: &str, keys: &HashMap<PathBuf, String>) -> Vec<TestId> {
    let mut current: Option<&String> = None;
    let mut running = Vec::new();
    for line in output.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("Running ") {
            current = binary_of_running_line(rest, keys);
        } else if let (Some(key), Some(rest)) = (current, from_last_test(trimmed))
            && let Some(name) = rest.strip_suffix(" has been running for over 60 seconds")
        {
            running.push((key.clone(), name.to_owned()));
        }
    }
    running
}

/// The binary key in `Running unittests src/lib.rs (target/debug/deps/x-1a2b)`.
fn binary_of_running_line<'k>(
    rest: &str,
    keys: &'k HashMap<PathBuf, String>,
) -> Option<&'k String> {
    rest.rsplit_once('(')
        .and_then(|(_, p)| p.strip_suffix(')'))
        .and_then(|path| keys.iter().find(|(p, _)| p.ends_with(path)).map(|(_, k)| k))
}

/// Per test, `ok`, `FAILED` or `ignored`, from `cargo test`'s output: a
/// binary's results follow its `Running ... (path)` line.
fn parse_cargo_test(output: &str, keys: &HashMap<PathBuf, String>) -> HashMap<TestId, String> {
    let mut outcomes = HashMap::new();
    let mut current: Option<&String> = None;
    // A test whose line was cut after ` ... ` by what another test wrote
    // past the capture: its outcome comes on a line of its own.
    let mut pending: Option<&str> = None;
    for line in output.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("Doc-tests ") {
            current = None;
        } else if let Some(rest) = trimmed.strip_prefix("Running ") {
            current = binary_of_running_line(rest, keys);
        } else if let Some(key) = current {
            let found = match (result_line(line), pending) {
                (Some(result), _) => Some(result),
                (None, Some(name)) if is_outcome(trimmed) => Some((name, trimmed)),
                (None, _) => {
                    pending = started_line(line).or(pending);
                    None
                }
            };
            if let Some((name, outcome)) = found {
                outcomes.insert((key.clone(), name.to_owned()), outcome.to_owned());
                pending = None;
            }
        }
    }
    outcomes
}

fn is_outcome(word: &str) -> bool {
    matches!(word, "ok" | "FAILED" | "ignored")
}

/// A test's name from a `test NAME ... ` line whose outcome did not
/// follow on it (`test tests::x ... 5`, the `5` another test's).
fn started_line(line: &str) -> Option<&str> {
    let (head, _) = line.rsplit_once(" ... ")?;
    let name = from_last_test(head)?;
    (!name.is_empty() && !name.contains(char::is_whitespace)).then_some(name)
}

/// What follows the last `test ` of a libtest line: what a test wrote past
/// the capture may come before it on the same line.
fn from_last_test(line: &str) -> Option<&str> {
    Some(&line[line.rfind("test ")? + "test ".len()..])
}

/// A test's name and outcome from libtest's `test NAME ... OUTCOME` line.
/// The line may start with what a test wrote to the terminal without a
/// newline and past libtest's capture (coreutils' uucore and numfmt tests:
/// `500test tests::… ... ok`), so the last `test ` before ` ... ` starts
/// it; a test's name has no space.
fn result_line(line: &str) -> Option<(&str, &str)> {
    let (head, outcome) = line.rsplit_once(" ... ")?;
    let name = from_last_test(head)?;
    let outcome = outcome.split(',').next().unwrap_or(outcome).trim();
    let known = is_outcome(outcome);
    (known && !name.is_empty() && !name.contains(char::is_whitespace)).then_some((name, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grep_keys() -> HashMap<PathBuf, String> {
        HashMap::from([(
            PathBuf::from("/w/target/debug/deps/grep-0123"),
            "grep".to_owned(),
        )])
    }

    const RUNNING_GREP: &str = "     Running unittests src/lib.rs (target/debug/deps/grep-0123)\n";

    #[test]
    fn outcomes_follow_their_binary_and_skip_doctests() {
        let keys = grep_keys();
        let text = RUNNING_GREP.to_owned()
            + "\
running 2 tests
test a::b ... ok
test a::c ... FAILED
   Doc-tests grep
test src/lib.rs - x (line 3) ... ok
";
        let outcomes = parse_cargo_test(&text, &keys);
        assert_eq!(outcomes.len(), 2);
        assert_eq!(outcomes[&("grep".into(), "a::c".into())], "FAILED");
    }

    #[test]
    fn a_result_after_what_a_test_wrote_past_the_capture_is_read() {
        let keys = grep_keys();
        let text = RUNNING_GREP.to_owned()
            + "\
running 4 tests
       500test tests::after_a_number ... ok
checksum-error-invalid-lengthtest features::after_words ... FAILED
test a::b ... ignored, slow
a line of its own ... ok
test tests::cut_short ... 5
4Q
ok
";
        let outcomes = parse_cargo_test(&text, &keys);
        assert_eq!(
            outcomes[&("grep".into(), "tests::after_a_number".into())],
            "ok"
        );
        assert_eq!(
            outcomes[&("grep".into(), "features::after_words".into())],
            "FAILED"
        );
        assert_eq!(outcomes[&("grep".into(), "a::b".into())], "ignored");
        // numfmt's, on coreutils: its outcome on a line of its own.
        assert_eq!(outcomes[&("grep".into(), "tests::cut_short".into())], "ok");
        assert_eq!(outcomes.len(), 4, "{outcomes:?}");
    }

    #[test]
    fn a_hung_run_is_stopped_with_its_children_and_its_hung_tests_named() {
        // The grandchild holds the pipe open: only killing the whole group
        // ends the read.
        let mut command = Command::new("sh");
        command.args(["-c", "echo started; (sleep 30; echo never) & wait"]);
        let merged = merged_output(command, "started", Duration::from_secs(1)).unwrap();
        assert!(merged.timed_out);
        assert!(merged.until_marker.is_some());
        assert!(
            merged.text.contains("stopped by the evaluation"),
            "{}",
            merged.text
        );
        assert!(!merged.text.contains("never"), "{}", merged.text);

        let mut command = Command::new("echo");
        command.arg("quick");
        let merged = merged_output(command, "x", Duration::from_secs(60)).unwrap();
        assert!(!merged.timed_out);
        assert_eq!(merged.text, "quick\n");

        let text = RUNNING_GREP.to_owned()
            + "\
running 3 tests
test a::b ... ok
test a::loops has been running for over 60 seconds
500test a::waits has been running for over 60 seconds
";
        assert_eq!(
            still_running(&text, &grep_keys()),
            vec![
                ("grep".to_owned(), "a::loops".to_owned()),
                ("grep".to_owned(), "a::waits".to_owned())
            ]
        );
    }

    #[test]
    fn a_run_gives_its_tests_a_temporary_directory_of_their_own() {
        let command = cargo(Path::new("/eval/out/worktree"), &["test"], &[]);
        let tmpdir = command
            .get_envs()
            .find(|(key, _)| *key == "TMPDIR")
            .and_then(|(_, value)| value);
        assert_eq!(tmpdir, Some(Path::new("/eval/out/tmp").as_os_str()));
    }

    #[test]
    fn each_run_starts_from_an_empty_temporary_directory() {
        let out = tempfile::tempdir().unwrap();
        let worktree = out.path().join("worktree");
        let left = private_tmp(&worktree).join("ripgrep-tests/t/0");
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("file"), "left by the last run").unwrap();
        empty_private_tmp(&worktree).unwrap();
        let tmp = private_tmp(&worktree);
        assert!(tmp.is_dir());
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
        // And from nothing at all.
        std::fs::remove_dir(&tmp).unwrap();
        empty_private_tmp(&worktree).unwrap();
        assert!(tmp.is_dir());
    }

    #[test]
    fn reason_kinds() {
        assert_eq!(reason_kind("function changed: a::b"), "function changed");
        assert_eq!(
            reason_kind("global: rustc changed"),
            "global: rustc changed"
        );
    }
}
