//! The options of a run, from three sources in order of precedence: the
//! command line, the workspace's `.config/ekstazi.toml`, and `EKSTAZI_*`
//! environment variables.
//!
//! A single-valued option takes the value of the first source that sets it.
//! Pattern lists (always-run, never-record, ignored paths) add up across
//! sources: the workspace's list is the project's policy, and a pattern on
//! the command line or in the environment extends it for one run. Adding
//! a pattern can only run more tests or record fewer accesses, and the
//! latter is part of every record's global fingerprint.
//!
//! | option | command line | `.config/ekstazi.toml` | environment |
//! |---|---|---|---|
//! | run every test | `--forceall` | `[run] forceall` | `EKSTAZI_FORCEALL` |
//! | no selection, no recording | `--skipme` | `[run] skipme` | `EKSTAZI_SKIPME` |
//! | keep records as they are | `--no-record` | `[run] no-record` | `EKSTAZI_NO_RECORD` |
//! | state directory | `--state-dir` | `[run] state-dir` | `EKSTAZI_DIR` |
//! | granularity | `--granularity` | `[run] granularity` | `EKSTAZI_GRANULARITY` |
//! | jobs | `-j`/`--jobs` | `[run] jobs` | `EKSTAZI_JOBS` |
//! | timeout (seconds) | `--timeout` | `[run] timeout` | `EKSTAZI_TIMEOUT` |
//! | slow threshold (seconds) | `--slow-timeout` | `[run] slow-timeout` | `EKSTAZI_SLOW_TIMEOUT` |
//! | a private `TMPDIR` per test | `--no-private-tmpdir` | `[run] private-tmpdir` | `EKSTAZI_PRIVATE_TMPDIR` |
//! | tests started from a fork server | `--no-fork-server` | `[run] fork-server` | `EKSTAZI_FORK_SERVER` |
//! | verdicts first, recording after | `--verdict-first` | `[run] verdict-first` | `EKSTAZI_VERDICT_FIRST` |
//! | reruns of a failed test | `--retries` | `[run] retries` | `EKSTAZI_RETRIES` |
//! | a full run on a schedule | | `[run] full-every` | `EKSTAZI_FULL_EVERY` |
//! | external tests | `--external` | `[network] always-run-external` | `EKSTAZI_EXTERNAL` |
//! | always-run tests | `--always-run` | `[select] always-run` | `EKSTAZI_ALWAYS_RUN` |
//! | never-record tests | `--never-record` | `[select] never-record` | `EKSTAZI_NEVER_RECORD` |
//! | ignored paths | `--ignore-path` | `[ignore] paths` | `EKSTAZI_IGNORE_PATHS` |
//! | CI shard | `--partition` | | `EKSTAZI_PARTITION` |
//! | records kept per commit | `--no-history` | `[history] enabled` | `EKSTAZI_HISTORY` |
//! | commits kept | | `[history] commits` | `EKSTAZI_HISTORY_COMMITS` |
//! | the remote store | | `[history] remote` | `EKSTAZI_REMOTE` |
//! | fetching from it before selecting | `--offline` (cargo's) | `[history] fetch` | `EKSTAZI_FETCH` |
//! | doctests | `--doc`/`--no-doc` | | |
//!
//! Lists in the environment are comma-separated; booleans are `1`/`true`/
//! `yes`/`on` or `0`/`false`/`no`/`off` (empty is false).

use crate::options::config::Config;
use crate::options::errors::{BadValue, Expected};
use globset::{Glob, GlobMatcher};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// How finely code dependencies are tracked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Granularity {
    /// The functions a test executed (an instrumented build).
    #[default]
    Function,
    /// The test binary as a whole (the ordinary build).
    Binary,
}

impl Granularity {
    /// The word `--granularity` takes for it, as records keep it.
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Function => "function",
            Granularity::Binary => "binary",
        }
    }
}

impl FromStr for Granularity {
    type Err = BadValue;

    fn from_str(s: &str) -> Result<Granularity, BadValue> {
        match s {
            "function" => Ok(Granularity::Function),
            "binary" => Ok(Granularity::Binary),
            other => Err(BadValue::not(other, Expected::Granularity)),
        }
    }
}

/// What to do with a test that reached another machine last time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum External {
    /// It always runs: its dependencies cannot all be checksummed.
    AlwaysRun,
    /// It is selected like any other test, on its local dependencies.
    Select,
}

impl FromStr for External {
    type Err = BadValue;

    fn from_str(s: &str) -> Result<External, BadValue> {
        match s {
            "always-run" => Ok(External::AlwaysRun),
            "select" => Ok(External::Select),
            other => Err(BadValue::not(other, Expected::External)),
        }
    }
}

/// How often a run is a full one (`[run] full-every`): every N runs, or
/// when the last full run is older than a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullEvery {
    /// Every this many runs (at least 1): a run is full when the runs since the
    /// last full one, this one included, reach it.
    Runs(usize),
    /// When the last full run is at least this long ago.
    Age(Duration),
}

impl FromStr for FullEvery {
    type Err = BadValue;

    /// `7` (runs), or a number with `m`, `h` or `d` (minutes, hours, days).
    fn from_str(s: &str) -> Result<FullEvery, BadValue> {
        let s = s.trim();
        let bad = || BadValue::not(s, Expected::FullEvery);
        if let Ok(n) = s.parse::<usize>() {
            return if n == 0 {
                Err(bad())
            } else {
                Ok(FullEvery::Runs(n))
            };
        }
        let (number, unit) = s.split_at(s.len().saturating_sub(1));
        let n: u64 = number.trim().parse().map_err(|_| bad())?;
        let seconds = match unit {
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        match n.checked_mul(seconds) {
            Some(0) | None => Err(bad()),
            Some(secs) => Ok(FullEvery::Age(Duration::from_secs(secs))),
        }
    }
}

/// The options one source sets; `None` and empty lists are unset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layer {
    /// Run every test, ignoring records (`--forceall`).
    pub forceall: Option<bool>,
    /// Run every test as `cargo test` would: no selection, no shim, no records
    /// (`--skipme`).
    pub skipme: Option<bool>,
    /// Select and run, but leave every record as it is (`--no-record`).
    pub no_record: Option<bool>,
    /// Where records live (`--state-dir`); one from the configuration file is
    /// already joined to the workspace root.
    pub state_dir: Option<PathBuf>,
    /// What a test's code dependency is (`--granularity`).
    pub granularity: Option<Granularity>,
    /// How many tests run at once (`-j`); at least 1.
    pub jobs: Option<usize>,
    /// Seconds.
    pub timeout: Option<f64>,
    /// Seconds.
    pub slow_timeout: Option<f64>,
    /// Whether each test gets an empty `TMPDIR` of its own.
    pub private_tmpdir: Option<bool>,
    /// Whether a libtest binary's tests are forked from a fork server.
    pub fork_server: Option<bool>,
    /// Whether the selected tests' verdicts come first and their recording
    /// after (`--verdict-first`).
    pub verdict_first: Option<bool>,
    /// How many times a test that failed is run again (`--retries`).
    pub retries: Option<usize>,
    /// When a run is a full one (`[run] full-every`).
    pub full_every: Option<FullEvery>,
    /// What to do with external tests (`--external`, `[network]
    /// always-run-external`).
    pub external: Option<External>,
    /// Patterns of tests that run every time.
    pub always_run: Vec<String>,
    /// Patterns of tests that run every time and are never recorded.
    pub never_record: Vec<String>,
    /// Patterns of paths whose accesses are not dependencies (`--ignore-path`);
    /// empty from the configuration file, whose `[ignore] paths` the ignore
    /// rules read themselves.
    pub ignore_paths: Vec<String>,
    /// This CI job's share of the selected tests (`--partition`); never from
    /// the configuration file.
    pub partition: Option<Partition>,
    /// Whether doctests run (`--doc`, `--no-doc`); set on the command line
    /// only.
    pub doctests: Option<Doctests>,
    /// Whether records are filed per commit (`--no-history` turns it off).
    pub history: Option<bool>,
    /// How many commits with records are kept; at least 1.
    pub history_commits: Option<usize>,
    /// The remote store's URI (`[history] remote`).
    pub remote: Option<String>,
    /// Whether to fetch from the remote store before selecting.
    pub fetch: Option<bool>,
    /// Command line only (an evaluation aid): the records filed under this
    /// commit are the only ones.
    pub vouch_only_from: Option<String>,
}

/// Whether doctests run, as `cargo test` runs them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Doctests {
    /// With the other tests, when no target selection excludes them.
    #[default]
    Include,
    /// Only doctests (`--doc`).
    Only,
    /// No doctests (`--no-doc`).
    Exclude,
}

/// An option's value could not be understood; says where it came from.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {problem}")]
pub struct SettingsError {
    /// Where the value came from: an environment variable, a key of the
    /// configuration file, or a list of patterns.
    pub source_name: String,
    /// What is wrong with the value.
    pub problem: BadValue,
}

impl Layer {
    /// The options set by `EKSTAZI_*` variables; `get` reads one variable.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Layer, SettingsError> {
        let error = |var: &str, problem: BadValue| SettingsError {
            source_name: format!("environment variable {var}"),
            problem,
        };
        let flag = |var: &str| -> Result<Option<bool>, SettingsError> {
            get(var)
                .map(|v| parse_bool(&v).map_err(|m| error(var, m)))
                .transpose()
        };
        let parsed = |var: &str| -> Option<Result<String, SettingsError>> {
            get(var).filter(|v| !v.is_empty()).map(Ok)
        };
        let seconds = |var: &str| -> Result<Option<f64>, SettingsError> {
            parsed(var)
                .map(|v| v.and_then(|v| parse_seconds(&v).map_err(|m| error(var, m))))
                .transpose()
        };
        let list = |var: &str| -> Vec<String> {
            get(var)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(Layer {
            forceall: flag("EKSTAZI_FORCEALL")?,
            skipme: flag("EKSTAZI_SKIPME")?,
            no_record: flag("EKSTAZI_NO_RECORD")?,
            state_dir: get("EKSTAZI_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            granularity: parsed("EKSTAZI_GRANULARITY")
                .map(|v| v.and_then(|v| v.parse().map_err(|m| error("EKSTAZI_GRANULARITY", m))))
                .transpose()?,
            jobs: parsed("EKSTAZI_JOBS")
                .map(|v| v.and_then(|v| parse_jobs(&v).map_err(|m| error("EKSTAZI_JOBS", m))))
                .transpose()?,
            timeout: seconds("EKSTAZI_TIMEOUT")?,
            slow_timeout: seconds("EKSTAZI_SLOW_TIMEOUT")?,
            private_tmpdir: flag("EKSTAZI_PRIVATE_TMPDIR")?,
            fork_server: flag("EKSTAZI_FORK_SERVER")?,
            verdict_first: flag("EKSTAZI_VERDICT_FIRST")?,
            full_every: parsed("EKSTAZI_FULL_EVERY")
                .map(|v| v.and_then(|v| v.parse().map_err(|m| error("EKSTAZI_FULL_EVERY", m))))
                .transpose()?,
            retries: parsed("EKSTAZI_RETRIES")
                .map(|v| {
                    v.and_then(|v| {
                        v.trim().parse::<usize>().map_err(|_| {
                            error("EKSTAZI_RETRIES", BadValue::not(v, Expected::Reruns))
                        })
                    })
                })
                .transpose()?,
            external: parsed("EKSTAZI_EXTERNAL")
                .map(|v| v.and_then(|v| v.parse().map_err(|m| error("EKSTAZI_EXTERNAL", m))))
                .transpose()?,
            always_run: list("EKSTAZI_ALWAYS_RUN"),
            never_record: list("EKSTAZI_NEVER_RECORD"),
            ignore_paths: list("EKSTAZI_IGNORE_PATHS"),
            partition: parsed("EKSTAZI_PARTITION")
                .map(|v| v.and_then(|v| v.parse().map_err(|m| error("EKSTAZI_PARTITION", m))))
                .transpose()?,
            doctests: None,
            history: flag("EKSTAZI_HISTORY")?,
            remote: get("EKSTAZI_REMOTE").filter(|v| !v.is_empty()),
            fetch: flag("EKSTAZI_FETCH")?,
            history_commits: parsed("EKSTAZI_HISTORY_COMMITS")
                .map(|v| {
                    v.and_then(|v| match v.trim().parse::<usize>() {
                        Ok(n) if n > 0 => Ok(n),
                        _ => Err(error(
                            "EKSTAZI_HISTORY_COMMITS",
                            BadValue::not(v, Expected::Commits),
                        )),
                    })
                })
                .transpose()?,
            vouch_only_from: None,
        })
    }

    /// The options `.config/ekstazi.toml` sets. A relative state directory
    /// is relative to the workspace root, where the file lives.
    pub fn from_config(config: &Config, workspace: &Path) -> Result<Layer, SettingsError> {
        let error = |key: &str, problem: BadValue| SettingsError {
            source_name: format!("{} key {key}", crate::options::config::CONFIG_PATH),
            problem,
        };
        let run = &config.run;
        let seconds = |key: &str, value: Option<f64>| {
            value
                .map(|v| check_seconds(v).map_err(|m| error(key, m)))
                .transpose()
        };
        Ok(Layer {
            forceall: run.forceall,
            skipme: run.skipme,
            no_record: run.no_record,
            state_dir: run.state_dir.as_ref().map(|dir| workspace.join(dir)),
            granularity: run
                .granularity
                .as_deref()
                .map(|g| g.parse().map_err(|m| error("run.granularity", m)))
                .transpose()?,
            jobs: run
                .jobs
                .map(|j| match j {
                    0 => Err(error("run.jobs", BadValue::Zero)),
                    j => Ok(j),
                })
                .transpose()?,
            timeout: seconds("run.timeout", run.timeout)?,
            slow_timeout: seconds("run.slow-timeout", run.slow_timeout)?,
            private_tmpdir: run.private_tmpdir,
            fork_server: run.fork_server,
            verdict_first: run.verdict_first,
            retries: run.retries,
            full_every: run
                .full_every
                .as_ref()
                .map(|v| {
                    v.to_string()
                        .parse()
                        .map_err(|m| error("run.full-every", m))
                })
                .transpose()?,
            external: config.network.always_run_external.map(|always| {
                if always {
                    External::AlwaysRun
                } else {
                    External::Select
                }
            }),
            always_run: config.select.always_run.clone(),
            never_record: config.select.never_record.clone(),
            // Read from the configuration by the ignore rules themselves.
            ignore_paths: Vec::new(),
            partition: None,
            doctests: None,
            history: config.history.enabled,
            remote: config.history.remote.clone(),
            fetch: config.history.fetch,
            history_commits: config
                .history
                .commits
                .map(|n| match n {
                    0 => Err(error("history.commits", BadValue::Zero)),
                    n => Ok(n),
                })
                .transpose()?,
            vouch_only_from: None,
        })
    }
}

/// The options of a run, every source applied.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Every test runs, records ignored, and every record is rewritten.
    pub forceall: bool,
    /// Every test runs as `cargo test` runs it: no selection, no shim, no
    /// records.
    pub skipme: bool,
    /// The selected tests run and every record is left as it is.
    pub no_record: bool,
    /// `None`: `<workspace>/.ekstazi`.
    pub state_dir: Option<PathBuf>,
    /// What a test's code dependency is.
    pub granularity: Granularity,
    /// `None`: the available cores.
    pub jobs: Option<usize>,
    /// A test running longer is killed and counts as timed out; `None`: no
    /// limit (a timeout of 0 is none).
    pub timeout: Option<Duration>,
    /// A test running longer is reported slow.
    pub slow_timeout: Duration,
    /// Each test gets a `TMPDIR` of its own, empty when it starts.
    pub private_tmpdir: bool,
    /// A libtest binary's tests are forked from one process that loaded it.
    pub fork_server: bool,
    /// The selected tests' verdicts first, as `cargo test` gives them
    /// (one process per binary, nothing traced); their recording after, in
    /// the background.
    pub verdict_first: bool,
    /// A test that fails is run again, in a fresh process, up to this many
    /// times; one that then passes is flaky, and its record never vouches.
    pub retries: usize,
    /// A run is a full one (an audit) when the last was this long or this
    /// many runs ago.
    pub full_every: Option<FullEvery>,
    /// What to do with a test that reached another machine last time (default:
    /// it always runs).
    pub external: External,
    /// Tests that run every time: every source's patterns together.
    pub always_run: TestPatterns,
    /// Tests that run every time and are never recorded: every source's
    /// patterns together.
    pub never_record: TestPatterns,
    /// Ignored path patterns from the command line and environment (those of
    /// the configuration file are already in it).
    pub extra_ignore_paths: Vec<String>,
    /// This CI job's share of the selected tests; `None`: all of them.
    pub partition: Option<Partition>,
    /// Whether doctests run.
    pub doctests: Doctests,
    /// Records are filed per commit, and filed records may vouch.
    pub history: bool,
    /// How many commits with records are kept.
    pub history_commits: usize,
    /// The remote store records are fetched from before selecting (an
    /// OpenDAL URI), if any.
    pub remote: Option<String>,
    /// Fetch from the remote store before selecting.
    pub fetch: bool,
    /// Select as if the records filed under this commit were the only ones
    /// (`cargo xtask eval replay --graph` measures the history paper's S¹ and Sᵏ so).
    pub vouch_only_from: Option<String>,
}

/// How many commits with records are kept unless configured.
pub const DEFAULT_HISTORY_COMMITS: usize = 100;

/// The default threshold for reporting a test as slow, as cargo-nextest's.
pub const DEFAULT_SLOW_TIMEOUT: Duration = Duration::from_secs(60);

impl Settings {
    /// Applies the sources, highest precedence first.
    pub fn resolve(cli: Layer, file: Layer, env: Layer) -> Result<Settings, SettingsError> {
        let layers = [&cli, &file, &env];
        macro_rules! first {
            ($field:ident) => {
                layers.iter().find_map(|layer| layer.$field.clone())
            };
        }
        let patterns = |name: &str, pick: fn(&Layer) -> &Vec<String>| {
            TestPatterns::new(layers.iter().flat_map(|l| pick(l)).cloned()).map_err(|problem| {
                SettingsError {
                    source_name: name.to_owned(),
                    problem,
                }
            })
        };
        Ok(Settings {
            forceall: first!(forceall).unwrap_or(false),
            skipme: first!(skipme).unwrap_or(false),
            no_record: first!(no_record).unwrap_or(false),
            state_dir: first!(state_dir),
            granularity: first!(granularity).unwrap_or_default(),
            jobs: first!(jobs),
            timeout: first!(timeout)
                .filter(|s| *s > 0.0)
                .map(Duration::from_secs_f64),
            slow_timeout: first!(slow_timeout)
                .filter(|s| *s > 0.0)
                .map_or(DEFAULT_SLOW_TIMEOUT, Duration::from_secs_f64),
            private_tmpdir: first!(private_tmpdir).unwrap_or(true),
            fork_server: first!(fork_server).unwrap_or(true),
            verdict_first: first!(verdict_first).unwrap_or(false),
            retries: first!(retries).unwrap_or(0),
            full_every: first!(full_every),
            external: first!(external).unwrap_or(External::AlwaysRun),
            always_run: patterns("always-run patterns", |l| &l.always_run)?,
            never_record: patterns("never-record patterns", |l| &l.never_record)?,
            extra_ignore_paths: [&cli, &env]
                .iter()
                .flat_map(|l| l.ignore_paths.iter().cloned())
                .collect(),
            partition: first!(partition),
            doctests: first!(doctests).unwrap_or_default(),
            history: first!(history).unwrap_or(true),
            history_commits: first!(history_commits).unwrap_or(DEFAULT_HISTORY_COMMITS),
            remote: first!(remote),
            fetch: first!(fetch).unwrap_or(true),
            vouch_only_from: cli.vouch_only_from.clone(),
        })
    }
}

/// Glob patterns over tests: a pattern matches a test's name
/// (`module::test`) or its label (`<binary id> <name>`, as the runner
/// prints it). `*` matches any characters, `::` included.
#[derive(Clone, Debug, Default)]
pub struct TestPatterns {
    patterns: Vec<(String, GlobMatcher)>,
}

impl TestPatterns {
    /// The patterns, each compiled; fails with `BadValue::Pattern` on one that
    /// is not a glob.
    pub fn new(patterns: impl IntoIterator<Item = String>) -> Result<TestPatterns, BadValue> {
        let patterns = patterns
            .into_iter()
            .map(|p| {
                let glob = Glob::new(&p).map_err(|e| BadValue::Pattern {
                    pattern: p.clone(),
                    why: e.to_string(),
                })?;
                Ok((p, glob.compile_matcher()))
            })
            .collect::<Result<_, BadValue>>()?;
        Ok(TestPatterns { patterns })
    }

    /// The first pattern that matches the test.
    pub fn matching(&self, binary: &str, test: &str) -> Option<&str> {
        if self.patterns.is_empty() {
            return None;
        }
        let label = format!("{binary} {test}");
        self.patterns
            .iter()
            .find(|(_, m)| m.is_match(test) || m.is_match(&label))
            .map(|(p, _)| p.as_str())
    }

    /// Whether there are no patterns (nothing matches).
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

/// A boolean as options take it: `1`, `true`, `yes`, `on`, or `0`, `false`,
/// `no`, `off`, in any case, and empty for false; anything else is a
/// `BadValue`.
pub fn parse_bool(value: &str) -> Result<bool, BadValue> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "off" => Ok(false),
        other => Err(BadValue::not(other, Expected::Boolean)),
    }
}

/// Seconds, fractions allowed; 0 turns the limit off.
pub fn parse_seconds(value: &str) -> Result<f64, BadValue> {
    let seconds: f64 = value
        .trim()
        .parse()
        .map_err(|_| BadValue::not(value, Expected::Seconds))?;
    check_seconds(seconds)
}

fn check_seconds(seconds: f64) -> Result<f64, BadValue> {
    if (0.0..1e9).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(BadValue::Seconds(seconds))
    }
}

/// A number of jobs: a whole number, at least 1.
pub fn parse_jobs(value: &str) -> Result<usize, BadValue> {
    match value.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(BadValue::not(value, Expected::Jobs)),
        Ok(n) => Ok(n),
    }
}

/// `--partition hash:M/N` or `count:M/N`: which of N CI jobs runs a test,
/// in the meaning cargo-nextest gives them. `hash` puts a test in the same
/// shard whatever else is selected (a stable hash of its binary and name);
/// `count` deals the selected tests out in turn, which balances the shards
/// but moves tests between them as the selection changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// How tests are dealt to the shards.
    pub kind: PartitionKind,
    /// 1-based.
    pub shard: u64,
    /// How many shards there are (N).
    pub total: u64,
}

/// How `--partition` deals the selected tests to shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionKind {
    /// By a stable hash of the test's binary and name (`hash:M/N`).
    Hash,
    /// In turn, by the test's position among the selected tests (`count:M/N`).
    Count,
}

impl FromStr for Partition {
    type Err = BadValue;

    fn from_str(s: &str) -> Result<Partition, BadValue> {
        let usage = || BadValue::not(s, Expected::Partition);
        let (kind, rest) = s.split_once(':').ok_or_else(usage)?;
        let kind = match kind {
            "hash" => PartitionKind::Hash,
            "count" => PartitionKind::Count,
            _ => return Err(usage()),
        };
        let (shard, total) = rest.split_once('/').ok_or_else(usage)?;
        let shard: u64 = shard.parse().map_err(|_| usage())?;
        let total: u64 = total.parse().map_err(|_| usage())?;
        if shard == 0 || total == 0 || shard > total {
            return Err(usage());
        }
        Ok(Partition { kind, shard, total })
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            PartitionKind::Hash => "hash",
            PartitionKind::Count => "count",
        };
        write!(f, "{kind}:{}/{}", self.shard, self.total)
    }
}

impl Partition {
    /// Whether this shard runs a test; `position` is its index among the
    /// selected tests in their listed order (for `count`).
    pub fn contains(&self, position: usize, binary: &str, test: &str) -> bool {
        let bucket = match self.kind {
            PartitionKind::Count => position as u64 % self.total,
            PartitionKind::Hash => {
                let mut hasher = blake3::Hasher::new();
                hasher.update(binary.as_bytes());
                hasher.update(&[0]);
                hasher.update(test.as_bytes());
                let digest = hasher.finalize();
                let head: [u8; 8] = digest.as_bytes()[..8].try_into().expect("8 bytes");
                u64::from_le_bytes(head) % self.total
            }
        };
        bucket + 1 == self.shard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn the_command_line_wins_then_the_file_then_the_environment() {
        let cli = Layer {
            jobs: Some(3),
            ..Layer::default()
        };
        let file = Layer {
            jobs: Some(5),
            timeout: Some(10.0),
            granularity: Some(Granularity::Binary),
            ..Layer::default()
        };
        let env = Layer::from_env(env(&[
            ("EKSTAZI_JOBS", "7"),
            ("EKSTAZI_TIMEOUT", "20"),
            ("EKSTAZI_SLOW_TIMEOUT", "2.5"),
            ("EKSTAZI_GRANULARITY", "function"),
            ("EKSTAZI_FORCEALL", "yes"),
        ]))
        .unwrap();
        let settings = Settings::resolve(cli, file, env).unwrap();
        assert_eq!(settings.jobs, Some(3));
        assert_eq!(settings.timeout, Some(Duration::from_secs(10)));
        assert_eq!(settings.granularity, Granularity::Binary);
        assert_eq!(settings.slow_timeout, Duration::from_millis(2500));
        assert!(settings.forceall);
        assert!(!settings.skipme);
        assert_eq!(settings.external, External::AlwaysRun);
    }

    #[test]
    fn a_source_can_turn_a_flag_off() {
        let file = Layer {
            forceall: Some(false),
            ..Layer::default()
        };
        let from_env = Layer::from_env(env(&[("EKSTAZI_FORCEALL", "1")])).unwrap();
        assert!(
            !Settings::resolve(Layer::default(), file, from_env)
                .unwrap()
                .forceall
        );
        // On unless a source turns it off.
        let private = |file: Option<bool>, vars: &[(&str, &str)]| {
            let file = Layer {
                private_tmpdir: file,
                ..Layer::default()
            };
            let from_env = Layer::from_env(env(vars)).unwrap();
            Settings::resolve(Layer::default(), file, from_env)
                .unwrap()
                .private_tmpdir
        };
        assert!(private(None, &[]));
        assert!(!private(None, &[("EKSTAZI_PRIVATE_TMPDIR", "0")]));
        assert!(!private(Some(false), &[("EKSTAZI_PRIVATE_TMPDIR", "1")]));
    }

    #[test]
    fn pattern_lists_add_up() {
        let cli = Layer {
            always_run: vec!["*smoke*".into()],
            ignore_paths: vec!["logs/".into()],
            ..Layer::default()
        };
        let file = Layer {
            always_run: vec!["it::*".into()],
            ..Layer::default()
        };
        let env = Layer::from_env(env(&[
            ("EKSTAZI_ALWAYS_RUN", "a, b"),
            ("EKSTAZI_IGNORE_PATHS", "tmp/"),
        ]))
        .unwrap();
        let settings = Settings::resolve(cli, file, env).unwrap();
        assert_eq!(
            settings.always_run.matching("pkg", "tests::smoke_a"),
            Some("*smoke*")
        );
        assert_eq!(settings.always_run.matching("pkg", "it::x"), Some("it::*"));
        assert_eq!(settings.always_run.matching("pkg", "b"), Some("b"));
        assert_eq!(settings.always_run.matching("pkg", "c"), None);
        assert_eq!(settings.extra_ignore_paths, ["logs/", "tmp/"]);
    }

    #[test]
    fn patterns_match_names_and_labels() {
        let patterns = TestPatterns::new(["pkg::it *".to_owned()]).unwrap();
        assert_eq!(patterns.matching("pkg::it", "a::b"), Some("pkg::it *"));
        assert_eq!(patterns.matching("pkg", "a::b"), None);
        assert!(TestPatterns::new(["a[".to_owned()]).is_err());
    }

    #[test]
    fn bad_values_name_their_source() {
        let err = Layer::from_env(env(&[("EKSTAZI_JOBS", "0")])).unwrap_err();
        assert!(err.to_string().contains("EKSTAZI_JOBS"), "{err}");
        let err = Layer::from_env(env(&[("EKSTAZI_TIMEOUT", "soon")])).unwrap_err();
        assert!(err.to_string().contains("EKSTAZI_TIMEOUT"), "{err}");
        let err = Layer::from_env(env(&[("EKSTAZI_FORCEALL", "maybe")])).unwrap_err();
        assert!(err.to_string().contains("EKSTAZI_FORCEALL"), "{err}");
        let err = Layer::from_env(env(&[("EKSTAZI_GRANULARITY", "line")])).unwrap_err();
        assert!(err.to_string().contains("function"), "{err}");
        assert!(Layer::from_env(env(&[("EKSTAZI_TIMEOUT", "-1")])).is_err());
        assert_eq!(
            Layer::from_env(env(&[("EKSTAZI_FORCEALL", "")]))
                .unwrap()
                .forceall,
            Some(false)
        );
    }

    #[test]
    fn partitions_parse_and_cover_every_test_once() {
        assert!("hash:0/2".parse::<Partition>().is_err());
        assert!("hash:3/2".parse::<Partition>().is_err());
        assert!("slice:1/2".parse::<Partition>().is_err());
        assert!("count:1".parse::<Partition>().is_err());
        let shards: Vec<Partition> = (1..=3)
            .map(|m| format!("hash:{m}/3").parse().unwrap())
            .collect();
        let counts: Vec<Partition> = (1..=3)
            .map(|m| format!("count:{m}/3").parse().unwrap())
            .collect();
        let mut sizes = [0; 3];
        for i in 0..300 {
            let name = format!("t{i}");
            let hash: Vec<_> = shards.iter().map(|s| s.contains(i, "pkg", &name)).collect();
            assert_eq!(hash.iter().filter(|x| **x).count(), 1);
            sizes[hash.iter().position(|x| *x).unwrap()] += 1;
            let count: Vec<_> = counts.iter().map(|s| s.contains(i, "pkg", &name)).collect();
            assert_eq!(count.iter().filter(|x| **x).count(), 1);
        }
        assert!(sizes.iter().all(|&n| n > 60), "{sizes:?}");
        assert_eq!(shards[1].to_string(), "hash:2/3");
    }
}
