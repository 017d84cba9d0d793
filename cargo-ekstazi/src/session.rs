//! One invocation's view of the world: the workspace, the built binaries,
//! their tests, the store and the present checksums; and the analysis that
//! turns them into a plan.

use crate::build::{self, Built};
use crate::cli::CargoOpts;
use crate::env::test_env;
use crate::git::Repo;
use crate::list::{self, TestCase};
use crate::scratch::Scratch;
use crate::workspace::Workspace;
use anyhow::Context as _;
use anyhow::Result;
use ekstazi_core::capture::environment::Environment;
use ekstazi_core::capture::ignore::Ignore;
use ekstazi_core::digests::checksum::Checksums;
use ekstazi_core::digests::program::Build;
use ekstazi_core::files::sealed::FORMAT_VERSION;
use ekstazi_core::model::code_dep::CodeUnit;
use ekstazi_core::model::dep::{Hash, Sum, Target};
use ekstazi_core::model::path::Anchors;
use ekstazi_core::model::record::{Global, Outcome, Record};
use ekstazi_core::options::config::{Config, DebugInfo};
use ekstazi_core::options::config::{NetworkPolicy, Service};
use ekstazi_core::options::settings::{Doctests, External, Granularity, Layer, Settings};
use ekstazi_core::selection::filter::{Decision, Filter};
use ekstazi_core::selection::select::{self, Present, Reason};
use ekstazi_core::selection::vouch::{Verdicts, filed_vouches};
use ekstazi_core::storage::history::candidates::{Candidates, Vouch};
use ekstazi_core::storage::history::{History, Known};
use ekstazi_core::storage::snapshots::Snapshots;
use ekstazi_core::storage::store::{Loaded, Store};
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub struct Session {
    pub ws: Workspace,
    /// The cargo options of the command line (doctests are built with them).
    pub cargo: CargoOpts,
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
    /// `[build] debuginfo`: how much the instrumented build keeps.
    pub debuginfo: DebugInfo,
    pub granularity: Granularity,
    pub snapshots: Snapshots,
    /// Per binary, with function granularity, the fingerprints of its
    /// functions now — or why it falls back to binary granularity.
    pub code: Vec<Result<Arc<Build>, String>>,
    /// The run's options, every source applied.
    pub settings: Settings,
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
    /// The repository, when the history is on and the workspace is in one.
    pub repo: Option<Repo>,
    /// The filed records that may vouch for a test, read when the first
    /// test needs them.
    candidates: OnceLock<Candidates>,
    /// The history they are read from, and what was found of their chunks.
    filed: OnceLock<(History, Verdicts)>,
}

/// A test and what the analysis decided about it.
pub struct Planned {
    pub case: TestCase,
    pub decision: Decision,
    /// Empty: skipped as unaffected.
    pub reasons: Vec<Reason>,
    /// The previous record, if intact (for its duration); for a test a
    /// filed record vouched for, that record.
    pub last: Option<Box<Record>>,
    /// What names `last` in the history already, for filing it again.
    pub last_known: Known,
    /// A record filed under a commit (not the current one) vouched for it.
    pub vouched: Option<Vouch>,
    /// Affected, but another shard of a `--partition`ed run runs it.
    pub elsewhere: bool,
}

impl Planned {
    /// It runs in this run.
    pub fn selected(&self) -> bool {
        self.affected() && !self.elsewhere
    }

    /// Something it depends on changed (or nothing is known): it runs in
    /// this run, or in another shard's.
    pub fn affected(&self) -> bool {
        self.decision == Decision::Run && !self.reasons.is_empty()
    }

    /// Its record holds: skipped as unaffected.
    pub fn unaffected(&self) -> bool {
        self.decision == Decision::Run && self.reasons.is_empty()
    }

    /// Its record is not to be written (a never-record pattern).
    pub fn never_recorded(&self) -> bool {
        self.reasons
            .iter()
            .any(|r| matches!(r, Reason::NeverRecorded(_) | Reason::Skipme))
    }
}

impl Session {
    /// Builds the test binaries and lists their tests. `cli` is what the
    /// command line sets; the configuration file and environment fill in
    /// the rest.
    pub fn prepare(cargo: &CargoOpts, cli: Layer) -> Result<Session> {
        let mut clock = Instant::now();
        let mut timings = Vec::new();
        let mut lap = |stage| {
            timings.push((stage, clock.elapsed()));
            clock = Instant::now();
        };
        let ws = Workspace::load(cargo)?;
        let mut config = Config::load(&ws.root)?;
        let mut settings = resolve_settings(cli, &config, &ws.root)?;
        // Before the build: a run is filed under `HEAD` only if the tree
        // was clean from start to end.
        let repo = settings.history.then(|| Repo::at(&ws.root)).flatten();
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
        let shim = crate::shim::install(&ws.target_dir)?;
        lap("workspace");
        // `--skipme` is the escape hatch: the ordinary build, no shim.
        let granularity = if settings.skipme {
            Granularity::Binary
        } else {
            settings.granularity
        };
        let instrumentation = crate::instrument::Instrumentation {
            shim: &shim,
            debuginfo: config.build.debuginfo,
        };
        let instrumented = (granularity == Granularity::Function).then_some(instrumentation);
        let only_doctests = settings.doctests == Doctests::Only;
        // `--doc` builds the libraries alone, for their dep-info.
        let extra: &[&str] = if only_doctests { &["--lib"] } else { &[] };
        let mut built = build::build(&ws, cargo, instrumented, extra)?;
        if only_doctests {
            built.binaries.clear();
        }
        let with_doctests = match settings.doctests {
            Doctests::Only => true,
            Doctests::Include => !cargo.selects_targets(),
            Doctests::Exclude => false,
        };
        if with_doctests {
            let units = doctest_units(&ws, cargo, &built);
            built.binaries.extend(units);
        }
        lap("build");
        let envs: Vec<_> = built
            .binaries
            .iter()
            .map(|b| test_env(&ws, &built, b))
            .collect();
        let listed: Vec<Vec<TestCase>> = built
            .binaries
            .par_iter()
            .enumerate()
            .map(|(i, binary)| list::list(i, binary, &envs[i]))
            .collect::<Result<_>>()?;
        let mut tests: Vec<TestCase> = listed.into_iter().flatten().collect();
        tests.sort_by(|a, b| {
            (&built.binaries[a.binary].key, &a.name).cmp(&(&built.binaries[b.binary].key, &b.name))
        });
        lap("list");

        let state_dir = match &settings.state_dir {
            Some(dir) => std::path::absolute(dir)?,
            None => ws.root.join(".ekstazi"),
        };
        let store = Store::new(&state_dir);
        let global = Global {
            rustc: ws.rustc_version.clone(),
            target: ws.host.clone(),
            profile: cargo.profile_name(),
            features: cargo.feature_request(),
            rustflags: rustflags(),
            tool: format!(
                "cargo-ekstazi {} format {FORMAT_VERSION} shim {}",
                env!("CARGO_PKG_VERSION"),
                crate::shim::digest()
            ),
            granularity: granularity.as_str().to_owned(),
            config: config.recording_digest(),
        };
        let checksums = Checksums::new(Anchors::new(
            &ws.root,
            &ws.target_dir,
            ws.cargo_home.as_deref(),
        ))
        .with_toolchain(&ws.sysroot);
        // `Unknown` for a binary that cannot be read: its tests always run
        // (and for doctests, which no record makes depend on a binary).
        let binary_sums: Vec<Sum> = built
            .binaries
            .par_iter()
            .map(|b| match b.doctests {
                Some(_) => Sum::Unknown,
                None => checksums.test_binary(&b.path),
            })
            .collect();
        lap("binary checksums");
        let snapshots = Snapshots::new(store.clone());
        let code = built
            .binaries
            .par_iter()
            .zip(&binary_sums)
            .map(|(binary, sum)| match (granularity, sum) {
                _ if binary.doctests.is_some() => Err("doctests".to_owned()),
                (Granularity::Binary, _) => Err("binary granularity".to_owned()),
                (Granularity::Function, Sum::Hash(id)) => snapshots
                    .of_binary(&binary.path, id)
                    .map_err(|e| e.to_string()),
                (Granularity::Function, _) => Err("the binary cannot be read".to_owned()),
            })
            .collect();
        lap("function fingerprints");
        let mut ignore = Ignore::defaults()
            .with_config(&config, &ws.root)
            .map_err(anyhow::Error::msg)
            .context(
                "in the ignored paths (.config/ekstazi.toml, --ignore-path, EKSTAZI_IGNORE_PATHS)",
            )?;
        ignore.add(
            ekstazi_core::model::path::normalize(&state_dir),
            "state directory",
        );
        ignore.add(
            ekstazi_core::model::path::normalize(&ws.sysroot),
            "toolchain (part of the global fingerprint)",
        );
        ignore.add(
            ekstazi_core::model::path::normalize(&shim),
            "cargo-ekstazi's shim",
        );
        // Made before the analysis: a test that lists the system's temporary
        // directory saw the root there, and must find it there again.
        let scratch = match Scratch::open(&ws.root, &state_dir) {
            Ok(scratch) => {
                ignore.add(
                    ekstazi_core::model::path::normalize(scratch.root()),
                    "cargo-ekstazi's temporary directories (a test's own starts empty)",
                );
                Some(scratch)
            }
            Err(e) => {
                crate::style::warn(format!(
                    "{e:#}: tests share the temporary directory of the environment"
                ));
                None
            }
        };
        let environments = envs
            .iter()
            .map(|vars| {
                let env = Environment::new(
                    crate::run::test_environment(vars, &shim),
                    checksums.anchors(),
                    Some(&ws.sysroot),
                    shim.parent().unwrap_or(&ws.target_dir),
                )
                .ignoring(ignore.env_patterns().cloned());
                match &scratch {
                    Some(scratch) => env.with_private_tmp(scratch.root()),
                    None => env,
                }
            })
            .collect();
        let services = config
            .services(&ws.root)
            .map_err(anyhow::Error::msg)
            .context("in the declared services (.config/ekstazi.toml)")?;
        Ok(Session {
            ws,
            cargo: cargo.clone(),
            built,
            envs,
            tests,
            store,
            global,
            checksums,
            binary_sums,
            ignore,
            debuginfo: config.build.debuginfo,
            shim,
            granularity,
            snapshots,
            code,
            network_policy: config.network_policy(),
            services,
            settings,
            environments,
            scratch,
            timings,
            repo,
            candidates: OnceLock::new(),
            filed: OnceLock::new(),
        })
    }

    /// The root under which tests get their own temporary directories, if
    /// they get one (a run that records nothing, and so holds no lock, puts
    /// them in a directory of its own under it).
    pub fn private_tmp(&self) -> Option<&Path> {
        let scratch = self.scratch.as_ref()?;
        (self.settings.private_tmpdir && !self.settings.skipme).then(|| scratch.root())
    }

    /// The `TMPDIR` a test is given when its directory is under `parent`.
    pub fn tmpdir_of(&self, case: &TestCase, parent: &Path) -> PathBuf {
        let key = &self.built.binaries[case.binary].key;
        crate::scratch::test_dir(parent, key, &case.name)
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

    /// Decides, for every test the filter keeps, whether it runs and why;
    /// with `--partition`, which of the affected tests this shard runs.
    pub fn analyse(&mut self, filter: &Filter) -> Vec<Planned> {
        let clock = Instant::now();
        let mut plan = self.plan(filter);
        if let Some(partition) = &self.settings.partition {
            let affected = plan.iter_mut().filter(|p| p.affected());
            for (position, planned) in affected.enumerate() {
                let key = &self.built.binaries[planned.case.binary].key;
                planned.elsewhere = !partition.contains(position, key, &planned.case.name);
            }
        }
        self.timings.push(("analysis", clock.elapsed()));
        plan
    }

    fn plan(&self, filter: &Filter) -> Vec<Planned> {
        let scoped: Vec<(TestCase, Decision)> = self
            .tests
            .iter()
            .filter_map(|case| {
                // A `harness = false` binary, and doctests, receive the
                // filter themselves.
                let decision = if case.name == list::WHOLE_BINARY || case.name == list::DOCTESTS {
                    Decision::Run
                } else {
                    filter.decide(&case.name, case.ignored)
                };
                (decision != Decision::Out).then(|| (case.clone(), decision))
            })
            .collect();
        let only_filed = self.only_filed();
        let loaded: Vec<Option<(Loaded, Option<Hash>)>> = scoped
            .par_iter()
            .map(|(case, decision)| {
                (*decision == Decision::Run).then(|| {
                    let key = &self.built.binaries[case.binary].key;
                    match &only_filed {
                        Some(filed) => (filed.load(key, &case.name), None),
                        None => self.store.load_sealed(key, &case.name),
                    }
                })
            })
            .collect();
        let records: Vec<&Record> = loaded
            .iter()
            .flatten()
            .filter_map(|(l, _)| match l {
                Loaded::Found(record) => Some(&**record),
                _ => None,
            })
            .collect();
        let programs: Vec<Target> = records
            .iter()
            .flat_map(|r| &r.code)
            .filter_map(|c| match &c.unit {
                CodeUnit::Program(path) => Some(Target::Program(path.clone())),
                CodeUnit::TestBinary => None,
            })
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let targets = records
            .iter()
            .flat_map(|r| r.deps.iter().map(|d| &d.target));
        self.checksums.prefetch(
            targets
                .chain(&programs)
                .filter(|t| !matches!(t, Target::TestBinary)),
        );
        // Programs the records ran that were rebuilt since: fingerprint each
        // once, in parallel, before the tests that ran them are compared.
        programs.par_iter().for_each(|target| {
            if let (Sum::Hash(id), Target::Program(path)) = (self.checksums.get(target), target)
                && records
                    .iter()
                    .flat_map(|r| &r.code)
                    .any(|c| c.unit == CodeUnit::Program(path.clone()) && c.build != id)
                && let Some(path) = self.checksums.anchors().resolve(path)
            {
                let _ = self.snapshots.of_binary(&path, &id);
            }
        });

        // Judged in parallel, in two passes: the current records first, then
        // the tests they do not vouch for, which try the records filed in
        // the history in turn.
        let judged: Vec<(TestCase, Decision, Option<Judged<'_>>)> = scoped
            .into_par_iter()
            .zip(loaded)
            .map(|((case, decision), loaded)| {
                let Some((loaded, sealed)) = loaded else {
                    return (case, decision, None);
                };
                let env = self.selection_environment_of(&case);
                let present = self.present(case.binary, &env);
                let rules = self.rules(&case);
                // A failure last time runs again, whatever passed elsewhere:
                // a failed run records no dependencies, so nothing says it
                // failed in another world than this one.
                let history = self.repo.is_some()
                    && only_filed.is_none()
                    && !present.forced
                    && rules.is_empty();
                let holds = history
                    && matches!(&loaded, Loaded::Found(record) if select::vouches(record, &present));
                let may_vouch = history
                    && !holds
                    && match &loaded {
                        Loaded::Found(record) => record.outcome == Outcome::Passed,
                        Loaded::Missing | Loaded::Invalid(_) => true,
                    };
                let judged = Judged {
                    loaded,
                    sealed,
                    env,
                    rules,
                    holds,
                    may_vouch,
                };
                (case, decision, Some(judged))
            })
            .collect();
        if judged.iter().flat_map(|(.., j)| j).any(|j| j.may_vouch) {
            self.read_history();
        }
        judged
            .into_par_iter()
            .map(|(case, decision, judged)| {
                let Some(Judged {
                    loaded,
                    sealed,
                    env,
                    rules,
                    holds,
                    may_vouch,
                }) = judged
                else {
                    return Planned {
                        case,
                        decision,
                        reasons: Vec::new(),
                        last: None,
                        last_known: Known::Nothing,
                        vouched: None,
                        elsewhere: false,
                    };
                };
                let present = self.present(case.binary, &env);
                // The reasons are worked out only for a test that runs: at a
                // branch switch, most tests whose current record fails have
                // a filed one that vouches, and naming every changed
                // function of the current record cost them more than the
                // history's own reading (ripgrep, `perf`).
                let filed = if may_vouch {
                    self.vouching(&case, &present)
                } else {
                    None
                };
                let (mut reasons, last, last_known, vouched) = match filed {
                    Some((record, id, vouch)) => {
                        (Vec::new(), Some(record), Known::Filed(id), Some(vouch))
                    }
                    None => {
                        // Judged already: `select::reasons` finds none
                        // exactly when `select::vouches` holds (not forced).
                        let reasons = if holds {
                            Vec::new()
                        } else {
                            select::reasons(&loaded, &present)
                        };
                        let last = match loaded {
                            Loaded::Found(record) => Some(record),
                            _ => None,
                        };
                        // The store gives a digest with a found record only.
                        let last_known = sealed.map_or(Known::Nothing, Known::Current);
                        (reasons, last, last_known, None)
                    }
                };
                reasons.extend(rules);
                Planned {
                    case,
                    decision,
                    reasons,
                    last,
                    last_known,
                    vouched,
                    elsewhere: false,
                }
            })
            .collect()
    }

    /// Reads what trying the history needs, the manifests and the packs'
    /// indexes, with every core at it. Read lazily by the first test to
    /// need them, they kept one core busy while the other judging thread
    /// waited for them: at a branch switch on ripgrep's 100 commits, a
    /// fifth of the history's cost.
    fn read_history(&self) {
        let Some(repo) = &self.repo else {
            return;
        };
        let (history, _) = self
            .filed
            .get_or_init(|| (self.store.history(), Verdicts::default()));
        rayon::join(
            || {
                self.candidates
                    .get_or_init(|| history.candidates(Some(&repo.head), &repo.parents));
            },
            || history.read_index(),
        );
    }

    /// With `--vouch-only-from`, the records filed under that commit, which
    /// then stand for the current records.
    fn only_filed(&self) -> Option<Filed> {
        let commit = self.settings.vouch_only_from.as_deref()?;
        let history = self.store.history();
        let entries = history
            .manifest(commit)
            .map(|m| {
                m.entries
                    .into_iter()
                    .map(|e| ((e.binary, e.test), e.record))
                    .collect()
            })
            .unwrap_or_default();
        Some(Filed { history, entries })
    }

    /// A record filed under a commit that vouches for the test now, if any
    /// (see `ekstazi_core::storage::history::candidates::Candidates` for the order they are
    /// tried in).
    fn vouching(
        &self,
        case: &TestCase,
        present: &Present<'_>,
    ) -> Option<(Box<Record>, Hash, Vouch)> {
        let repo = self.repo.as_ref()?;
        let (history, verdicts) = self
            .filed
            .get_or_init(|| (self.store.history(), Verdicts::default()));
        let candidates = self
            .candidates
            .get_or_init(|| history.candidates(Some(&repo.head), &repo.parents));
        let key = &self.built.binaries[case.binary].key;
        // The current record's own filed copy is tried too, rather than
        // cutting the current record to find its id (which cost more than
        // a candidate): it fails where the current record failed, and the
        // chunk verdicts it leaves serve the candidates after it.
        candidates.of(key, &case.name).find_map(|(id, vouch)| {
            let record = filed_vouches(history, id, key, &case.name, present, verdicts)?;
            Some((Box::new(record), *id, vouch.clone()))
        })
    }

    /// What the selection compares a record of a test of `binary`, given
    /// `env`, with.
    pub fn present<'a>(&'a self, binary: usize, env: &'a Environment) -> Present<'a> {
        Present {
            global: &self.global,
            binary: &self.binary_sums[binary],
            binary_path: &self.built.binaries[binary].path,
            checksums: &self.checksums,
            snapshots: &self.snapshots,
            env,
            network: &self.network_policy,
            always_run_external: self.settings.external == External::AlwaysRun,
            forced: self.settings.forceall,
        }
    }

    /// The reasons the settings give to run a test whatever its record says.
    fn rules(&self, case: &TestCase) -> Vec<Reason> {
        let key = &self.built.binaries[case.binary].key;
        let settings = &self.settings;
        let mut reasons = Vec::new();
        if settings.skipme {
            reasons.push(Reason::Skipme);
        }
        if let Some(pattern) = settings.always_run.matching(key, &case.name) {
            reasons.push(Reason::AlwaysRunPattern(pattern.to_owned()));
        }
        if let Some(pattern) = settings.never_record.matching(key, &case.name) {
            reasons.push(Reason::NeverRecorded(pattern.to_owned()));
        }
        reasons
    }
}

/// A test's current record, judged, between the two passes of the plan.
struct Judged<'a> {
    loaded: Loaded,
    /// The digest the current record's file is sealed with, when found.
    sealed: Option<Hash>,
    env: Cow<'a, Environment>,
    rules: Vec<Reason>,
    /// Its current record vouches for it (judged only where the history
    /// may be tried; else its reasons are worked out in the second pass).
    holds: bool,
    /// Its current record does not vouch for it, and a filed one may.
    may_vouch: bool,
}

/// The settings from the command line, `.config/ekstazi.toml` and the
/// environment, in that precedence.
fn resolve_settings(cli: Layer, config: &Config, root: &std::path::Path) -> Result<Settings> {
    let file = Layer::from_config(config, root)?;
    let env = Layer::from_env(|name| std::env::var(name).ok())?;
    Ok(Settings::resolve(cli, file, env)?)
}

/// The doctests of each library `cargo test` would run them for, as one
/// unit each, with the dep-info of everything they are compiled from: the
/// library and the path packages it depends on. A path package outside the
/// workspace (whose dependencies are not known here) is counted for every
/// library.
fn doctest_units(ws: &Workspace, cargo: &CargoOpts, built: &Built) -> Vec<build::TestBinary> {
    let outside: Vec<&PathBuf> = built
        .lib_dep_info
        .iter()
        .filter(|(id, _)| id.repr.starts_with("path+") && !ws.packages.contains_key(*id))
        .map(|(_, dep_info)| dep_info)
        .collect();
    ws.selected_packages(cargo)
        .into_iter()
        .filter_map(|package| {
            let lib = package
                .targets
                .iter()
                .find(|t| crate::workspace::primary_kind(&t.kind) == "lib" && t.doctest)?;
            let own = built.lib_dep_info.get(&package.id)?;
            let mut dep_info = vec![own.clone()];
            let mut build_outputs = Vec::new();
            for (i, dep) in ws.path_closure(package).into_iter().enumerate() {
                if i > 0 {
                    dep_info.extend(built.lib_dep_info.get(&dep.id).cloned());
                }
                build_outputs.extend(built.build_outputs.get(&dep.id).cloned());
            }
            dep_info.extend(outside.iter().map(|p| (*p).clone()));
            if !may_have_doctests(&ws.root, &dep_info) {
                return None;
            }
            let manifests = ws
                .path_closure(package)
                .into_iter()
                .map(|p| p.manifest_path.clone().into_std_path_buf())
                .chain(std::iter::once(ws.root.join("Cargo.toml")))
                .collect();
            Some(build::TestBinary {
                key: crate::workspace::doctest_key(&package.name, &lib.name),
                path: package.manifest_path.clone().into_std_path_buf(),
                package_id: package.id.clone(),
                manifest_path: package.manifest_path.clone().into_std_path_buf(),
                out_dir: None,
                bin_exes: Vec::new(),
                custom_harness: false,
                doctests: Some(build::Doctests {
                    package: package.name.to_string(),
                    dep_info,
                    build_outputs,
                    manifests,
                }),
            })
        })
        .collect()
}

/// Whether the library whose dep-info comes first may have doctests (see
/// [`ekstazi_core::capture::doctests`]); a dep-info that cannot be read says yes.
fn may_have_doctests(root: &std::path::Path, dep_info: &[PathBuf]) -> bool {
    let sources = |path: &PathBuf| -> Option<Vec<PathBuf>> {
        let text = std::fs::read_to_string(path).ok()?;
        Some(ekstazi_core::capture::depinfo::parse(&text, root).sources)
    };
    let Some((own, deps)) = dep_info.split_first() else {
        return true;
    };
    let Some(own) = sources(own) else {
        return true;
    };
    let mut dep_sources = Vec::new();
    for dep in deps {
        match sources(dep) {
            Some(found) => dep_sources.extend(found),
            None => return true,
        }
    }
    ekstazi_core::capture::doctests::may_have_doctests(
        own.iter().map(PathBuf::as_path),
        dep_sources.iter().map(PathBuf::as_path),
    )
}

fn rustflags() -> String {
    [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
    ]
    .iter()
    .filter_map(|var| std::env::var(var).ok().map(|v| format!("{var}={v}")))
    .collect::<Vec<_>>()
    .join(" ")
}

impl Session {
    /// Writes a test's record, after the functions it names: a record never
    /// names a function the table on disk does not hold.
    /// Returns the digest its file is sealed with.
    pub fn save_record(&self, record: &Record) -> std::io::Result<Hash> {
        self.snapshots.table().flush()?;
        self.store.save(record)
    }
}

/// The records filed under one commit, by test.
struct Filed {
    history: ekstazi_core::storage::history::History,
    entries: std::collections::HashMap<(String, String), ekstazi_core::model::dep::Hash>,
}

impl Filed {
    fn load(&self, binary: &str, test: &str) -> Loaded {
        let Some(id) = self.entries.get(&(binary.to_owned(), test.to_owned())) else {
            return Loaded::Missing;
        };
        match self.history.object(id) {
            Some(record) if record.binary == binary && record.test == test => {
                Loaded::Found(Box::new(record))
            }
            _ => Loaded::Invalid(ekstazi_core::storage::store::Invalid::Decode(
                ekstazi_core::files::sealed::DecodeError::BadDigest,
            )),
        }
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
