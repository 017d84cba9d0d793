//! The workspace's configuration: `.config/ekstazi.toml` at the workspace
//! root. Every key is optional; an absent file is the defaults.
//!
//! ```toml
//! [ignore]
//! # gitignore-style patterns, relative to the workspace root: accesses to
//! # matching paths are not dependencies.
//! paths = ["logs/", "*.snap.new"]
//! # gitignore-style patterns matched against absolute paths outside the
//! # workspace.
//! absolute = ["/var/cache/fontconfig/"]
//! # Environment variables that are not dependencies (glob patterns);
//! # `!NAME` keeps one that a default or another pattern leaves out (the
//! # shell's bookkeeping, `_`, `SHLVL` and `OLDPWD`, is left out of walks of
//! # the environment by default).
//! env = ["CI_JOB_*", "!SHLVL"]
//!
//! [network]
//! # Every loopback peer counts as external, the test's own servers and
//! # declared services too (by default only a loopback port nothing of the
//! # test bound is).
//! loopback-is-external = false
//! # External tests always run; `false` selects them like any other.
//! always-run-external = true
//!
//! # A service on this machine that tests reach on a loopback port (one
//! # that no process of the test bound: CI started it). A test that reaches
//! # it depends on the service's inputs instead of always running.
//! [[network.service]]
//! name = "postgres"
//! ports = [5432]
//! # Files or directories, relative to the workspace root, that stand for
//! # the service's state: migrations, a compose file, a seed script.
//! inputs = ["migrations/", "docker-compose.yml"]
//!
//! [libraries]
//! # System shared libraries (outside the workspace, target directory and
//! # cargo's home) are dependencies too.
//! system = false
//!
//! [run]
//! granularity = "function"   # or "binary"
//! jobs = 4                   # tests at once (default: the cores)
//! timeout = 300              # seconds before a test is killed (default: none)
//! slow-timeout = 60          # seconds before a test is reported slow
//! private-tmpdir = true      # each test's own, empty TMPDIR
//! fork-server = true         # start a binary's tests from one loaded process
//! verdict-first = false      # verdicts at once, the recording in the background
//! retries = 0                # reruns of a failed test (a pass then is flaky)
//! full-every = "7d"          # a full run (an audit) every 7 days, or every N runs
//! state-dir = ".ekstazi"     # relative to the workspace root
//! forceall = false
//! skipme = false
//! no-record = false
//!
//! [select]
//! # Glob patterns over test names (or `<binary id> <name>` labels).
//! always-run = ["*::smoke_*"]
//! never-record = ["flaky::*"]
//! # The workspace's absolute path is a dependency of every test.
//! workspace-path = false
//!
//! [history]
//! enabled = true                  # false: only the current records decide
//! commits = 100                   # commits with records kept
//! trusted-keys = ["ed25519:…"]    # an imported or fetched state must be signed by one of these
//! remote = "s3://bucket/prefix"   # a remote store, fetched before selecting
//! fetch = true                    # false: never fetch before selecting
//!
//! [build]
//! # The instrumented build's debug information: "line-tables-only" (file
//! # and line in panics and backtraces) or "profile" (the profile's own).
//! debuginfo = "line-tables-only"
//! ```
//!
//! Unknown keys are errors, so that a typo does not silently change what is
//! recorded. The `[run]` and `[select]` options can also be given on the
//! command line and as `EKSTAZI_*` variables: see [`crate::options::settings`].
//!
//! What decides *what is recorded* (`ignore`, `libraries`), and how the
//! tests are built (`build`), is part of every record's global fingerprint ([`Config::recording_digest`]): changing it
//! reruns every test, since records made under other rules may lack a
//! dependency. The network policy is applied when selecting, to the peers a
//! record keeps, so changing it takes effect without rerunning anything.

use crate::options::errors::BadConfig;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the configuration lives, relative to the workspace root.
pub const CONFIG_PATH: &str = ".config/ekstazi.toml";

/// `.config/ekstazi.toml`, one field per table; an absent table is its
/// defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// `[ignore]`: accesses that are not dependencies.
    pub ignore: IgnoreConfig,
    /// `[network]`: what counts as external, and the declared services.
    pub network: NetworkConfig,
    /// `[libraries]`: which shared libraries are dependencies.
    pub libraries: LibrariesConfig,
    /// `[run]`: how tests are run.
    pub run: RunConfig,
    /// `[select]`: tests that always run or are never recorded.
    pub select: SelectConfig,
    /// `[history]`: records kept per commit, and the remote store.
    pub history: HistoryConfig,
    /// `[build]`: how the instrumented build is made.
    pub build: BuildConfig,
}

/// `[build]`: how the instrumented build is made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct BuildConfig {
    /// How much debug information the instrumented build keeps (default: line
    /// tables only).
    pub debuginfo: DebugInfo,
}

/// How much debug information the instrumented build keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DebugInfo {
    /// At most line tables: file and line in panics and backtraces, which
    /// is what a test run shows. Full debug information is most of what
    /// the compiler and linker write for a test binary, and a debugger
    /// session belongs to a plain `cargo test` build.
    #[default]
    LineTablesOnly,
    /// Whatever the profile (or `RUSTFLAGS`) asks for.
    Profile,
}

impl DebugInfo {
    /// The value as the file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DebugInfo::LineTablesOnly => "line-tables-only",
            DebugInfo::Profile => "profile",
        }
    }
}

/// `[history]`: records kept per commit (see `storage::history`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct HistoryConfig {
    /// Unset: on.
    pub enabled: Option<bool>,
    /// How many commits with records are kept (unset: 100).
    pub commits: Option<usize>,
    /// The public keys whose signature an imported state must carry
    /// (`ed25519:<64 hex digits>` each; see `files::signed`). Empty: an
    /// import is taken on the word of whoever handed it over, as before.
    pub trusted_keys: Vec<String>,
    /// A remote store to push to and fetch from (an OpenDAL URI:
    /// `s3://bucket/prefix`, `file:///srv/ekstazi`, ...).
    pub remote: Option<String>,
    /// Fetch from the remote store before selecting (unset: on).
    pub fetch: Option<bool>,
}

impl HistoryConfig {
    /// The trusted keys, parsed.
    pub fn trusted_keys(&self) -> Result<Vec<crate::files::signed::PublicKey>, BadConfig> {
        self.trusted_keys
            .iter()
            .map(|key| Ok(crate::files::signed::PublicKey::parse(key)?))
            .collect()
    }
}

/// `[run]`: how tests are run; every key optional (see [`crate::options::settings`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunConfig {
    /// `function` or `binary` (checked when the settings read it).
    pub granularity: Option<String>,
    /// How many tests run at once; 0 is refused.
    pub jobs: Option<usize>,
    /// Seconds before a test is killed; 0 is no limit.
    pub timeout: Option<f64>,
    /// Seconds before a running test is reported slow (unset: 60).
    pub slow_timeout: Option<f64>,
    /// Whether each test gets an empty `TMPDIR` of its own (unset: on).
    pub private_tmpdir: Option<bool>,
    /// Whether a binary's tests are started from a fork server (unset: on).
    pub fork_server: Option<bool>,
    /// Whether verdicts come first and the recording after, in the background
    /// (unset: off).
    pub verdict_first: Option<bool>,
    /// How many times a test that failed is run again (unset: 0).
    pub retries: Option<usize>,
    /// `7` (runs) or `"7d"`, `"12h"`, `"30m"`.
    pub full_every: Option<CountOrText>,
    /// Where records live, relative to the workspace root (unset: `.ekstazi`).
    pub state_dir: Option<PathBuf>,
    /// Run every test and rewrite every record.
    pub forceall: Option<bool>,
    /// Run every test as `cargo test` would: no selection, no records.
    pub skipme: Option<bool>,
    /// Select and run, but leave every record as it is.
    pub no_record: Option<bool>,
}

/// A value given as a number or as text (`full-every = 2`, `= "7d"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CountOrText {
    /// A number (`2`).
    Count(usize),
    /// Text (`"7d"`).
    Text(String),
}

impl std::fmt::Display for CountOrText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CountOrText::Count(n) => write!(f, "{n}"),
            CountOrText::Text(t) => f.write_str(t),
        }
    }
}

/// `[select]`: tests that always run, and tests never recorded (so that they
/// always run too).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct SelectConfig {
    /// Glob patterns of tests that run every time.
    pub always_run: Vec<String>,
    /// Glob patterns of tests that run every time and are never recorded.
    pub never_record: Vec<String>,
    /// The workspace's absolute path is a dependency of every test. Records
    /// are blind to where the checkout is, so that a CI cache or a copied
    /// checkout keeps them; a test whose outcome turns on that path (one
    /// that puts `CARGO_MANIFEST_DIR` unquoted into a shell command, say)
    /// is then skipped in a copy at a path where it would fail.
    pub workspace_path: bool,
}

/// `[ignore]`: paths and environment variables whose accesses are not
/// dependencies; part of every record's global fingerprint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct IgnoreConfig {
    /// gitignore-style patterns relative to the workspace root.
    pub paths: Vec<String>,
    /// gitignore-style patterns matched against absolute paths.
    pub absolute: Vec<String>,
    /// Glob patterns of environment variable names.
    pub env: Vec<String>,
}

/// `[network]`: what counts as external, and the local services tests may
/// reach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct NetworkConfig {
    /// Every loopback peer counts as external, the test's own servers and
    /// declared services too (default: only a loopback port nothing of the test
    /// bound).
    pub loopback_is_external: bool,
    /// Unset: external tests always run (unless the command line or the
    /// environment says otherwise).
    pub always_run_external: Option<bool>,
    /// Declared local services (`[[network.service]]`).
    pub service: Vec<ServiceConfig>,
}

/// `[[network.service]]`: see [`crate::options::config::Service`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServiceConfig {
    /// The service's name, kept with the peer in the records of tests that
    /// reach it.
    pub name: String,
    /// The loopback ports it listens on; at least one.
    pub ports: Vec<u16>,
    /// Relative to the workspace root.
    pub inputs: Vec<String>,
}

/// `[libraries]`: which shared libraries are dependencies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LibrariesConfig {
    /// System shared libraries (outside the workspace, the target directory and
    /// cargo's home) are dependencies too (default: not).
    pub system: bool,
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (an absent file is no error: it is the
    /// defaults).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The configuration file's path.
        path: PathBuf,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// The file was read but cannot be used.
    #[error("{path} is not valid: {problem}")]
    Invalid {
        /// The configuration file's path.
        path: PathBuf,
        /// What is wrong in it.
        problem: BadConfig,
    },
}

/// A local service the workspace declares (`[[network.service]]` in
/// `.config/ekstazi.toml`): a test that reaches one of its ports on a
/// loopback address depends on its inputs (the files that stand for its
/// state: migrations, a compose file, a seed script) rather than always
/// running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// The service's name, as declared.
    pub name: String,
    /// The loopback ports it listens on; never empty.
    pub ports: Vec<u16>,
    /// Absolute paths of files or directories (a directory: every file
    /// below it, and its listings).
    pub inputs: Vec<std::path::PathBuf>,
}

/// What counts as external.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// Every loopback peer counts as external: the test's own servers and
    /// declared services too, and `localhost` lookups.
    pub loopback_is_external: bool,
}

/// `[ignore]`'s patterns, compiled (see `capture::ignore::Ignore`, which
/// applies them).
pub(crate) struct IgnorePatterns {
    /// Patterns relative to the workspace root, and the root.
    pub(crate) relative: Option<(PathBuf, Gitignore)>,
    /// Patterns matched against absolute paths.
    pub(crate) absolute: Option<Gitignore>,
    /// Variable name patterns; `None` when there are none.
    pub(crate) env: Option<globset::GlobSet>,
    /// Variable names given as `!PATTERN`: dependencies even when another
    /// pattern or a default leaves them out; `None` when there are none.
    pub(crate) env_kept: Option<globset::GlobSet>,
}

impl IgnoreConfig {
    /// Compiles the patterns; an error names the bad pattern.
    pub(crate) fn compile(&self, workspace: &Path) -> Result<IgnorePatterns, BadConfig> {
        let build = |root: &Path, patterns: &[String]| -> Result<Option<Gitignore>, BadConfig> {
            if patterns.is_empty() {
                return Ok(None);
            }
            let mut builder = GitignoreBuilder::new(root);
            for pattern in patterns {
                builder
                    .add_line(None, pattern)
                    .map_err(|e| BadConfig::Pattern {
                        pattern: pattern.clone(),
                        within: "ignore",
                        why: e.to_string(),
                    })?;
            }
            builder
                .build()
                .map(Some)
                .map_err(|e| BadConfig::Patterns(e.to_string()))
        };
        let relative = build(workspace, &self.paths)?
            .map(|matcher| (crate::model::path::normalize(workspace), matcher));
        let absolute = build(Path::new("/"), &self.absolute)?;
        let globs = |negated: bool| -> Result<Option<globset::GlobSet>, BadConfig> {
            let mut set = globset::GlobSetBuilder::new();
            let mut any = false;
            for pattern in &self.env {
                let (kept, glob) = match pattern.strip_prefix('!') {
                    Some(rest) => (true, rest),
                    None => (false, pattern.as_str()),
                };
                if kept != negated {
                    continue;
                }
                set.add(globset::Glob::new(glob).map_err(|e| BadConfig::Pattern {
                    pattern: pattern.clone(),
                    within: "ignore.env",
                    why: e.to_string(),
                })?);
                any = true;
            }
            if !any {
                return Ok(None);
            }
            set.build()
                .map(Some)
                .map_err(|e| BadConfig::Patterns(e.to_string()))
        };
        let env = globs(false)?;
        let env_kept = globs(true)?;
        Ok(IgnorePatterns {
            relative,
            absolute,
            env,
            env_kept,
        })
    }
}

impl Config {
    /// Reads `<workspace>/.config/ekstazi.toml`; the defaults if there is none.
    pub fn load(workspace: &Path) -> Result<Config, ConfigError> {
        let path = workspace.join(CONFIG_PATH);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(source) => return Err(ConfigError::Io { path, source }),
        };
        let config = Config::parse(&text).map_err(|problem| ConfigError::Invalid {
            path: path.clone(),
            problem,
        })?;
        // Compile the patterns once here so that a bad one is reported with
        // the file's name, before anything runs.
        config
            .ignore
            .compile(workspace)
            .map_err(|problem| ConfigError::Invalid {
                path: path.clone(),
                problem,
            })?;
        config
            .history
            .trusted_keys()
            .map_err(|problem| ConfigError::Invalid {
                path: path.clone(),
                problem,
            })?;
        config
            .services(workspace)
            .map_err(|problem| ConfigError::Invalid { path, problem })?;
        Ok(config)
    }

    /// Parses the configuration's text.
    pub fn parse(text: &str) -> Result<Config, BadConfig> {
        toml::from_str(text).map_err(|e| BadConfig::Syntax {
            message: e.message().to_owned(),
            line: e
                .span()
                .map(|span| text[..span.start].matches('\n').count() + 1),
        })
    }

    /// A digest of the options that decide what is recorded, and how the
    /// tests are built (debug information shows in nothing a test observes
    /// but a backtrace's detail; still, records made with other binaries
    /// are not trusted).
    ///
    /// Declared services decide what is recorded too: a test that reaches
    /// one records its inputs, and one that reaches an undeclared port
    /// records an external peer.
    pub fn recording_digest(&self) -> String {
        if self.ignore == IgnoreConfig::default()
            && self.libraries == LibrariesConfig::default()
            && self.build == BuildConfig::default()
            && self.network.service.is_empty()
        {
            return String::new();
        }
        let text = if self.network.service.is_empty() {
            format!("{:?} {:?} {:?}", self.ignore, self.libraries, self.build)
        } else {
            format!(
                "{:?} {:?} {:?} {:?}",
                self.ignore, self.libraries, self.build, self.network.service
            )
        };
        blake3::hash(text.as_bytes()).to_hex()[..16].to_owned()
    }

    /// [`Config::recording_digest`], with the workspace's path in it when
    /// `[select] workspace-path` makes it a dependency of every test: a
    /// checkout at another path then reruns every test once (`global:
    /// config changed`).
    pub fn global_digest(&self, workspace: &Path) -> String {
        let digest = self.recording_digest();
        if !self.select.workspace_path {
            return digest;
        }
        let mut text = digest.into_bytes();
        text.extend_from_slice(b"\nworkspace ");
        text.extend_from_slice(workspace.as_os_str().as_encoded_bytes());
        blake3::hash(&text).to_hex()[..16].to_owned()
    }

    /// The declared services, their inputs made absolute. An input may not
    /// leave the workspace: the file is shared by everyone who checks the
    /// workspace out.
    pub fn services(&self, workspace: &Path) -> Result<Vec<Service>, BadConfig> {
        self.network
            .service
            .iter()
            .map(|s| {
                if s.ports.is_empty() {
                    return Err(BadConfig::ServiceWithoutPort(s.name.clone()));
                }
                let inputs = s
                    .inputs
                    .iter()
                    .map(|input| {
                        let path = Path::new(input);
                        let inside = path.components().all(|c| {
                            matches!(
                                c,
                                std::path::Component::Normal(_) | std::path::Component::CurDir
                            )
                        });
                        if inside {
                            Ok(workspace.join(path))
                        } else {
                            Err(BadConfig::InputOutside {
                                name: s.name.clone(),
                                input: input.clone(),
                            })
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Service {
                    name: s.name.clone(),
                    ports: s.ports.clone(),
                    inputs,
                })
            })
            .collect()
    }

    /// What counts as external, as `[network]` says.
    pub fn network_policy(&self) -> NetworkPolicy {
        NetworkPolicy {
            loopback_is_external: self.network.loopback_is_external,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_path_is_in_the_global_digest_only_when_asked() {
        let mut config = Config::default();
        let (a, b) = (Path::new("/ws/a"), Path::new("/ws/a b"));
        assert_eq!(config.global_digest(a), config.global_digest(b));
        assert_eq!(config.global_digest(a), config.recording_digest());
        config.select.workspace_path = true;
        assert_ne!(config.global_digest(a), config.global_digest(b));
    }

    #[test]
    fn defaults_when_empty() {
        let config = Config::parse("").unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.network.always_run_external, None);
        assert!(!config.network.loopback_is_external);
        assert_eq!(config.recording_digest(), "");
    }

    #[test]
    fn every_key_parses() {
        let config = Config::parse(
            r#"
            [ignore]
            paths = ["logs/"]
            absolute = ["/var/cache/"]
            env = ["CI_*"]
            [network]
            loopback-is-external = true
            always-run-external = false
            [libraries]
            system = true
            [run]
            granularity = "binary"
            jobs = 2
            timeout = 1.5
            slow-timeout = 30
            private-tmpdir = false
            state-dir = "state"
            forceall = true
            skipme = false
            no-record = true
            [select]
            always-run = ["a*"]
            never-record = ["b*"]
            [build]
            debuginfo = "profile"
            "#,
        )
        .unwrap();
        assert_eq!(config.ignore.paths, ["logs/"]);
        assert!(config.network.loopback_is_external);
        assert_eq!(config.network.always_run_external, Some(false));
        assert!(config.libraries.system);
        assert_eq!(config.run.jobs, Some(2));
        assert_eq!(config.run.slow_timeout, Some(30.0));
        assert_eq!(config.run.private_tmpdir, Some(false));
        assert_eq!(config.select.never_record, ["b*"]);
        assert_eq!(config.build.debuginfo, DebugInfo::Profile);
        assert_ne!(config.recording_digest(), "");
    }

    #[test]
    fn a_declared_service_is_recorded_and_stays_inside_the_workspace() {
        let text =
            "[[network.service]]\nname = \"db\"\nports = [5432]\ninputs = [\"migrations/\"]\n";
        let config = Config::parse(text).unwrap();
        assert_ne!(config.recording_digest(), "", "it decides what is recorded");
        let services = config.services(Path::new("/ws")).unwrap();
        assert_eq!(services[0].ports, [5432]);
        assert_eq!(services[0].inputs, [Path::new("/ws/migrations/")]);
        for bad in ["../db", "/etc/passwd"] {
            let text =
                format!("[[network.service]]\nname = \"db\"\nports = [1]\ninputs = [{bad:?}]\n");
            let err = Config::parse(&text)
                .unwrap()
                .services(Path::new("/ws"))
                .unwrap_err();
            assert!(matches!(err, BadConfig::InputOutside { .. }), "{err}");
            assert!(err.to_string().contains("inside the workspace"), "{err}");
        }
        let no_port = Config::parse("[[network.service]]\nname = \"db\"\n").unwrap();
        assert!(no_port.services(Path::new("/ws")).is_err());
    }

    #[test]
    fn the_debuginfo_is_one_of_two_words() {
        assert_eq!(Config::default().build.debuginfo, DebugInfo::LineTablesOnly);
        let err = Config::parse("[build]\ndebuginfo = \"full\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line-tables-only") && err.contains("profile"),
            "{err}"
        );
    }

    #[test]
    fn the_example_in_this_modules_overview_parses() {
        let source = include_str!("config.rs");
        let example: String = source
            .lines()
            .skip_while(|line| *line != "//! ```toml")
            .skip(1)
            .take_while(|line| *line != "//! ```")
            .map(|line| {
                line.strip_prefix("//!")
                    .unwrap_or(line)
                    .trim_start_matches(' ')
            })
            .map(|line| format!("{line}\n"))
            .collect();
        assert!(example.contains("[history]"), "{example}");
        let config = Config::parse(&example).unwrap();
        assert_eq!(config.history.commits, Some(100));
        assert!(!config.select.workspace_path);
    }

    #[test]
    fn typos_are_errors_with_a_line() {
        let err = Config::parse("[network]\nloopback-is-externa = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("loopback-is-externa"), "{err}");
        assert!(err.ends_with("(line 2)"), "{err}");
        assert!(Config::parse("[ignore]\npaths = \"x\"\n").is_err());
    }

    #[test]
    fn the_network_policy_does_not_change_the_recording_digest() {
        let mut config = Config::default();
        config.network.loopback_is_external = true;
        assert_eq!(config.recording_digest(), "");
        config.ignore.paths.push("x".into());
        assert_ne!(config.recording_digest(), "");
    }

    #[test]
    fn load_reads_the_file_and_reports_bad_patterns() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Config::load(dir.path()).unwrap(), Config::default());
        std::fs::create_dir(dir.path().join(".config")).unwrap();
        std::fs::write(
            dir.path().join(CONFIG_PATH),
            "[network]\nloopback-is-external = true\n",
        )
        .unwrap();
        assert!(
            Config::load(dir.path())
                .unwrap()
                .network
                .loopback_is_external
        );
        std::fs::write(dir.path().join(CONFIG_PATH), "[ignore]\nenv = [\"a[\"]\n").unwrap();
        let err = Config::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("ekstazi.toml is not valid"), "{err}");
    }
}
