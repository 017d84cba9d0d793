//! One invocation's view of the world, and what the analysis decides.
//!
//! [`Session`] holds the workspace, the built binaries, their tests, the
//! store and the present checksums; [`Session::prepare`] makes it stage by
//! stage from the [`options::Options`] resolved once from a
//! [`options::Request`] ([`prepare`]), its build skipped while the last
//! one's stamp holds ([`stamped_build`]); [`Session::analyse`] turns it into
//! the plan, a [`analysis::Planned`] per test ([`analysis`]); and
//! [`recording`] turns a finished test's trace into its record.
//!
//! Invariant: the session decides and records, but runs nothing and prints
//! no report: it imports `cargo`, `git` and `run`, never `output`,
//! `pipeline` or `commands`.

pub mod analysis;
pub mod options;
mod prepare;
pub mod recording;
mod stamped_build;

pub use analysis::Planned;

use crate::cargo::libtest::TestCase;
use crate::cargo::test_build::Built;
use crate::cargo::workspace::Workspace;
use crate::git::repo::Repo;
use crate::run::scheduler::Suite;
use crate::run::scratch::Scratch;
use ekstazi_core::capture::cargo_runs::KnownBuilds;
use ekstazi_core::capture::environment::Environment;
use ekstazi_core::capture::ignore::Ignore;
use ekstazi_core::digests::checksum::Checksums;
use ekstazi_core::digests::program::Build;
use ekstazi_core::model::dep::{Hash, Sum};
use ekstazi_core::model::record::{Global, Record};
use ekstazi_core::options::config::{NetworkPolicy, Service};
use ekstazi_core::selection::vouch::Verdicts;
use ekstazi_core::storage::history::History;
use ekstazi_core::storage::history::candidates::Candidates;
use ekstazi_core::storage::snapshots::Snapshots;
use ekstazi_core::storage::store::Store;
use options::Options;
use rayon::prelude::*;
use std::borrow::Cow;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub struct Session {
    pub ws: Workspace,
    /// The run's options, resolved once.
    pub options: Options,
    pub built: Built,
    /// Per binary, the variables cargo would set for its tests.
    pub envs: Vec<Vec<(OsString, OsString)>>,
    /// Every test of every built binary, unfiltered.
    pub tests: Vec<TestCase>,
    pub store: Store,
    pub global: Global,
    pub checksums: Checksums,
    /// Per binary, its smart checksum now.
    pub binary_sums: Vec<Sum>,
    pub ignore: Ignore,
    /// The runtime shim, written out for this build.
    pub shim: PathBuf,
    pub snapshots: Snapshots,
    /// Which programs the project did not build may walk their
    /// environment, by checksum.
    pub environ_walkers: ekstazi_core::digests::environ_walkers::EnvironWalkers,
    /// Per binary, with function granularity, the fingerprints of its
    /// functions now — or why it falls back to binary granularity; made
    /// when first asked for ([`Session::code`]): only a recording needs
    /// them, and on a large test binary they are a tenth of a run with
    /// nothing changed.
    code: Vec<OnceLock<Result<Arc<Build>, String>>>,
    pub network_policy: NetworkPolicy,
    /// The local services `.config/ekstazi.toml` declares.
    pub services: Vec<Service>,
    /// Per binary, the environment its tests are given (what `getenv`
    /// dependencies are compared with), but for each test's own `TMPDIR`
    /// ([`Session::environment_of`]).
    pub environments: Vec<Environment>,
    /// cargo-ekstazi's temporary directories; `None` if the root could not
    /// be made (tests then share the environment's `TMPDIR`).
    pub scratch: Option<Scratch>,
    /// How long each stage took, for `-v`.
    pub timings: Vec<(&'static str, Duration)>,
    /// Nothing the build reads changed since the last one: cargo was not
    /// started ([`stamped_build`]).
    pub build_unchanged: bool,
    /// The repository, when the history is on and the workspace is in one.
    pub repo: Option<Repo>,
    /// The filed records that may vouch for a test, read when the first
    /// test needs them.
    candidates: OnceLock<Candidates>,
    /// The history they are read from, and what was found of their chunks.
    filed: OnceLock<(History, Verdicts)>,
    /// What each build directory a test's cargo used was built from.
    builds: KnownBuilds,
}

impl Session {
    /// The fingerprints of `binary`'s functions now, or why it falls back
    /// to binary granularity.
    pub fn code(&self, binary: usize) -> &Result<Arc<Build>, String> {
        self.code[binary].get_or_init(|| {
            prepare::fingerprint_functions(
                &self.built.binaries[binary],
                &self.binary_sums[binary],
                &self.snapshots,
                self.options.granularity,
            )
        })
    }

    /// Every binary's fingerprints, made in parallel, ahead of a recording
    /// (which needs them all), timed as a stage.
    pub fn fingerprint_all(&mut self) {
        let clock = std::time::Instant::now();
        let session = &*self;
        (0..session.code.len()).into_par_iter().for_each(|binary| {
            let _ = session.code(binary);
        });
        self.timings
            .push(("function fingerprints", clock.elapsed()));
    }

    /// The fingerprints made so far, per binary.
    pub fn code_made(&self) -> impl Iterator<Item = Option<&Result<Arc<Build>, String>>> {
        self.code.iter().map(OnceLock::get)
    }

    /// The store's history, one instance for the whole run: the one the
    /// analysis tried filed records in, its packs' index already read
    /// (on coreutils, 15 MB each time it is read), or opened now.
    pub fn history(&self) -> &History {
        &self.filed().0
    }

    /// The history, with what was found of its chunks' verdicts.
    fn filed(&self) -> &(History, Verdicts) {
        self.filed
            .get_or_init(|| (self.store.history(), Verdicts::default()))
    }

    /// What the scheduler runs tests from.
    pub fn suite(&self) -> Suite<'_> {
        Suite {
            ws: &self.ws,
            cargo: &self.options.cargo,
            binaries: &self.built.binaries,
            envs: &self.envs,
        }
    }

    /// The root under which tests get their own temporary directories, if
    /// they get one (a run that records nothing, and so holds no lock, puts
    /// them in a directory of its own under it).
    pub fn private_tmp(&self) -> Option<&Path> {
        let scratch = self.scratch.as_ref()?;
        (self.options.settings.private_tmpdir && !self.options.settings.skipme)
            .then(|| scratch.root())
    }

    /// The `TMPDIR` a test is given when its directory is under `parent`.
    pub fn tmpdir_of(&self, case: &TestCase, parent: &Path) -> PathBuf {
        let key = &self.built.binaries[case.binary].key;
        crate::run::scratch::test_dir(parent, key, &case.name)
    }

    /// The environment a test is given: its binary's, with its own `TMPDIR`.
    pub fn environment_of(&self, case: &TestCase, tmpdir: Option<&Path>) -> Cow<'_, Environment> {
        let env = &self.environments[case.binary];
        match tmpdir {
            Some(dir) => Cow::Owned(env.with_var(b"TMPDIR", dir.as_os_str().as_bytes())),
            None => Cow::Borrowed(env),
        }
    }

    /// The environment the selection compares a test's record with: the
    /// one a run that records gives it.
    pub fn selection_environment_of(&self, case: &TestCase) -> Cow<'_, Environment> {
        let tmpdir = self.private_tmp().map(|root| self.tmpdir_of(case, root));
        self.environment_of(case, tmpdir.as_deref())
    }

    /// Writes a test's record, after the functions it names: a record never
    /// names a function the table on disk does not hold.
    /// Returns the digest its file is sealed with.
    pub fn save_record(&self, record: &Record) -> std::io::Result<Hash> {
        self.snapshots.table().flush()?;
        self.store.save(record)
    }
}

/// `build 0.31s, list 0.02s, ...` for `-v`.
pub fn describe_timings(timings: &[(&'static str, Duration)]) -> String {
    timings
        .iter()
        .map(|(stage, took)| format!("{stage} {:.3}s", took.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}
