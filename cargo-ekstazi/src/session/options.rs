//! The options of one invocation of `test`, `list`, `nextest` or `why`:
//! what its command line asks ([`Request`]), resolved once, with
//! `.config/ekstazi.toml` and the environment, into the [`Options`] every
//! later stage reads.

use crate::cargo::workspace::Workspace;
use crate::cli::{CargoOpts, HarnessArgs};
use crate::git::repo::Repo;
use crate::style;
use anyhow::{Context as _, Result};
use ekstazi_core::options::config::{Config, DebugInfo};
use ekstazi_core::options::settings::{Doctests, Granularity, Layer, Settings};
use std::path::PathBuf;

/// What a command line asks of the run path, before the configuration
/// file and the environment are read.
#[derive(Default)]
pub struct Request {
    /// The cargo options of the command line.
    pub cargo: CargoOpts,
    /// The settings the command line sets.
    pub layer: Layer,
    /// What the harness is asked: the filter, `--test-threads`,
    /// `--show-output` (for `nextest`, its `--ignored`; for `why`, nothing).
    pub harness: HarnessArgs,
    /// The filter and the words after `--`, as given: a `harness = false`
    /// binary, and doctests, receive them.
    pub harness_words: Vec<String>,
    /// `--no-wait`: fail at once if another run holds the state directory.
    pub no_wait: bool,
    /// `--report-json PATH`.
    pub report_json: Option<PathBuf>,
    /// `--junit PATH`.
    pub junit: Option<PathBuf>,
    /// `nextest run --archive-file PATH`: the build is unpacked from this
    /// archive, made elsewhere, not built here.
    pub archive: Option<PathBuf>,
}

/// The filter and the words after `--`, as given: what a `harness =
/// false` binary and doctests receive ([`Request::harness_words`]).
pub fn harness_words(filter: Option<&str>, libtest: &[String]) -> Vec<String> {
    filter
        .map(str::to_owned)
        .into_iter()
        .chain(libtest.iter().cloned())
        .collect()
}

/// The options of a run, every source applied: resolved once, by
/// [`resolve`], and read by every stage after it.
pub struct Options {
    /// The cargo options of the command line (doctests are built with them).
    pub cargo: CargoOpts,
    /// The run's settings: the command line, `.config/ekstazi.toml` and the
    /// environment, in that precedence.
    pub settings: Settings,
    /// The settings' granularity, but binary with `--skipme`.
    pub granularity: Granularity,
    /// `.config/ekstazi.toml`, the ignored paths of every source added.
    pub config: Config,
    pub harness: HarnessArgs,
    pub harness_words: Vec<String>,
    pub no_wait: bool,
    pub report_json: Option<PathBuf>,
    pub junit: Option<PathBuf>,
}

impl Options {
    /// `-v`: say where the time went.
    pub fn verbose(&self) -> bool {
        self.cargo.verbose > 0
    }

    /// `[build] debuginfo`: how much the instrumented build keeps.
    pub fn debuginfo(&self) -> DebugInfo {
        self.config.build.debuginfo
    }

    /// `--doc`: the doctests alone.
    pub fn only_doctests(&self) -> bool {
        self.settings.doctests == Doctests::Only
    }

    /// Whether the libraries' doctests are among the tests.
    pub fn with_doctests(&self) -> bool {
        match self.settings.doctests {
            Doctests::Only => true,
            Doctests::Include => !self.cargo.selects_targets(),
            Doctests::Exclude => false,
        }
    }

    /// How many tests run at once: `-j`, else libtest's `--test-threads`,
    /// else the available cores.
    pub fn jobs(&self) -> usize {
        self.settings
            .jobs
            .or(self.harness.test_threads)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
    }
}

/// Resolves the request with the workspace's configuration file and the
/// environment. Also opens the repository, when the history is on: before
/// the build, as a run is filed under `HEAD` only if the tree was clean
/// from start to end (and `--vouch-only-from` names one of its commits).
pub fn resolve(request: Request, ws: &Workspace) -> Result<(Options, Option<Repo>)> {
    let mut config = Config::load(&ws.root)?;
    let mut settings = resolve_settings(request.layer, &config, &ws.root)?;
    // Cargo's `--offline` (or `--frozen`) keeps this run off the network too.
    if request.cargo.offline || request.cargo.frozen {
        settings.fetch = false;
    }
    let repo = settings.history.then(|| Repo::at(&ws.root)).flatten();
    if !settings.forceall && !settings.skipme {
        let asked = match &repo {
            Some(repo) => repo.asks_full_run,
            None => crate::git::repo::asks_full_run(&ws.root),
        };
        if asked {
            style::note(format!(
                "running every test: HEAD's message has the trailer `{}: all`",
                crate::git::repo::FULL_RUN_TRAILER
            ));
            settings.forceall = true;
        }
    }
    if let Some(rev) = &settings.vouch_only_from {
        let commit = repo.as_ref().and_then(|r| r.resolve(rev));
        settings.vouch_only_from = Some(commit.with_context(|| {
            format!("--vouch-only-from: `{rev}` is not a commit of this repository")
        })?);
    }
    config
        .ignore
        .paths
        .extend(settings.extra_ignore_paths.iter().cloned());
    // `--skipme` is the escape hatch: the ordinary build, no shim.
    let granularity = if settings.skipme {
        Granularity::Binary
    } else {
        settings.granularity
    };
    let options = Options {
        cargo: request.cargo,
        settings,
        granularity,
        config,
        harness: request.harness,
        harness_words: request.harness_words,
        no_wait: request.no_wait,
        report_json: request.report_json,
        junit: request.junit,
    };
    Ok((options, repo))
}

/// The settings from the command line, `.config/ekstazi.toml` and the
/// environment, in that precedence.
fn resolve_settings(cli: Layer, config: &Config, root: &std::path::Path) -> Result<Settings> {
    let file = Layer::from_config(config, root)?;
    let env = Layer::from_env(|name| std::env::var(name).ok())?;
    Ok(Settings::resolve(cli, file, env)?)
}
