//! Preparing a session, stage by stage: open the workspace, resolve the
//! options, build the tests (or unpack them from a nextest archive made
//! elsewhere), list them, open the store, checksum the binaries,
//! fingerprint their functions, and set up what the tests are given
//! (ignored paths, temporary directories, environments).

use super::Session;
use super::options::{self, Options, Request};
use super::stamped_build::{self, Provenance};
use crate::cargo::archived::{self, BuildManifest};
use crate::cargo::libtest::{self, TestCase};
use crate::cargo::test_build::{self, Built, TestBinary};
use crate::cargo::test_env::test_env;
use crate::cargo::workspace::Workspace;
use crate::run::scratch::Scratch;
use anyhow::Context as _;
use anyhow::Result;
use ekstazi_core::capture::environment::Environment;
use ekstazi_core::capture::ignore::Ignore;
use ekstazi_core::digests::checksum::Checksums;
use ekstazi_core::digests::program::Build;
use ekstazi_core::files::sealed::FORMAT_VERSION;
use ekstazi_core::model::dep::Sum;
use ekstazi_core::model::path::Anchors;
use ekstazi_core::model::record::Global;
use ekstazi_core::options::settings::Granularity;
use ekstazi_core::storage::snapshots::Snapshots;
use ekstazi_core::storage::store::Store;
use rayon::prelude::*;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Per binary, the variables cargo would set for its tests.
type CargoEnvs = Vec<Vec<(OsString, OsString)>>;

impl Session {
    /// Builds the test binaries and lists their tests. `request` is what
    /// the command line asks; the configuration file and environment fill
    /// in the rest.
    pub fn prepare(request: Request) -> Result<Session> {
        let mut laps = Laps::start();
        let ws = open_workspace(&request)?;
        let archive = request.archive.clone();
        let (mut options, repo) = options::resolve(request, &ws)?;
        let state_dir = state_dir(&ws, &options)?;
        stop_background_recording(&state_dir);
        let shim = crate::run::shim::install(&ws.target_dir)?;
        let store = Store::new(&state_dir);
        let checksums = Checksums::new(Anchors::new(
            &ws.root,
            &ws.target_dir,
            ws.cargo_home.as_deref(),
        ))
        .with_toolchain(&ws.sysroot)
        .with_kept(store.kept_sums().as_deref());
        let snapshots =
            Snapshots::new(store.clone()).blind_to(checksums.anchors(), Some(&ws.sysroot));
        if options.settings.verdict_first || options.settings.no_record {
            // Kept after the verdicts, should they come first: see
            // `Snapshots::hold_saves`.
            snapshots.hold_saves();
        }
        laps.lap("workspace");
        let mut build_unchanged = false;
        let (built, archived) = match &archive {
            Some(file) => {
                let (built, manifest) = unpack_archive(&ws, &mut options, file)?;
                laps.lap("unpack");
                (built, Some(manifest))
            }
            None => {
                let early = (&checksums, &snapshots);
                let (built, provenance) = build_tests(&ws, &options, &shim, &store, early)?;
                laps.lap("build");
                build_unchanged = provenance == Provenance::Stamped;
                (built, None)
            }
        };
        let (envs, tests) = list_tests(&ws, &built)?;
        laps.lap("list");
        let global = global_fingerprint(&ws, &options, archived.as_ref());
        let binary_sums = checksum_binaries(&built, &checksums);
        laps.lap("binary checksums");
        let code = built.binaries.iter().map(|_| OnceLock::new()).collect();
        let mut ignore = ignored_paths(&options, &ws, &state_dir, &shim)?;
        // Made before the analysis: a test that lists the system's temporary
        // directory saw the root there, and must find it there again.
        let scratch = open_scratch(&ws, &state_dir, &mut ignore);
        let environments = test_environments(&envs, &shim, &checksums, &ws, &ignore, &scratch);
        let services = options
            .config
            .services(&ws.root)
            .map_err(anyhow::Error::msg)
            .context("in the declared services (.config/ekstazi.toml)")?;
        Ok(Session {
            network_policy: options.config.network_policy(),
            ws,
            options,
            built,
            envs,
            tests,
            store,
            global,
            checksums,
            binary_sums,
            ignore,
            shim,
            snapshots,
            environ_walkers: Default::default(),
            code,
            services,
            environments,
            scratch,
            timings: laps.timings,
            build_unchanged,
            repo,
            candidates: OnceLock::new(),
            filed: OnceLock::new(),
            builds: Default::default(),
        })
    }
}

/// How long each stage took, for `-v`.
struct Laps {
    clock: Instant,
    timings: Vec<(&'static str, Duration)>,
}

impl Laps {
    fn start() -> Laps {
        Laps {
            clock: Instant::now(),
            timings: Vec::new(),
        }
    }

    fn lap(&mut self, stage: &'static str) {
        self.timings.push((stage, self.clock.elapsed()));
        self.clock = Instant::now();
    }
}

/// The workspace the command line names (`cargo metadata`, the toolchain).
fn open_workspace(request: &Request) -> Result<Workspace> {
    Workspace::load(&request.cargo)
}

/// The test binaries, built as `cargo test` would (instrumented with
/// function granularity), and the doctest units when doctests are on.
/// With function granularity, each test binary is fingerprinted as soon as
/// it is linked ([`fingerprint_while_building`]).
fn build_tests(
    ws: &Workspace,
    options: &Options,
    shim: &Path,
    store: &Store,
    early: (&Checksums, &Snapshots),
) -> Result<(Built, Provenance)> {
    let instrumentation = crate::cargo::instrument::Instrumentation {
        shim,
        debuginfo: options.debuginfo(),
        workspace: &ws.root,
    };
    let instrumented = (options.granularity == Granularity::Function).then_some(instrumentation);
    let only_doctests = options.only_doctests();
    // `--doc` builds the libraries alone, for their dep-info.
    let extra: &[&str] = if only_doctests { &["--lib"] } else { &[] };
    let request = test_build::request(ws, &options.cargo, instrumented, extra)?;
    let store = (!options.settings.skipme).then_some(store);
    let build = |linked: &dyn Fn(&Path)| stamped_build::build(ws, store, request, linked);
    let (mut built, provenance) = match instrumented.is_some() && store.is_some() {
        true => fingerprint_while_building(early, build)?,
        false => build(&|_| {})?,
    };
    if only_doctests {
        built.binaries.clear();
    }
    if options.with_doctests() {
        let units = crate::cargo::doctests::units(ws, &options.cargo, &built);
        built.binaries.extend(units);
    }
    Ok((built, provenance))
}

/// Runs `build`, fingerprinting each test binary it reports linked on a
/// thread of its own, while cargo builds the others: the analysis then
/// finds those fingerprints made, by the binary's checksum. A binary that
/// changed after is another checksum, fingerprinted again.
fn fingerprint_while_building<T>(
    (checksums, snapshots): (&Checksums, &Snapshots),
    build: impl FnOnce(&dyn Fn(&Path)) -> T,
) -> T {
    std::thread::scope(|scope| {
        let (linked, binaries) = std::sync::mpsc::channel::<PathBuf>();
        scope.spawn(move || {
            for binary in binaries {
                if let Sum::Hash(id) = checksums.test_binary(&binary) {
                    // Its error, if any, comes again where the analysis
                    // asks for it.
                    let _ = snapshots.of_binary(&binary, &id);
                }
            }
        });
        build(&|binary| {
            let _ = linked.send(binary.to_path_buf());
        })
    })
}

/// The test binaries of a nextest archive made elsewhere, unpacked where
/// this workspace's instrumented build goes; the cargo options become the
/// ones the archive was built with (but for where and how cargo speaks).
fn unpack_archive(
    ws: &Workspace,
    options: &mut Options,
    file: &Path,
) -> Result<(Built, BuildManifest)> {
    if options.granularity != Granularity::Function {
        anyhow::bail!(
            "an archive holds the instrumented build of function granularity, but this run \
             is of {} granularity",
            options.granularity.as_str()
        );
    }
    let build_dir = crate::cargo::instrument::build_dir(&ws.target_dir)?;
    let manifest = archived::unpack(file, &build_dir)?;
    let ours = tool();
    if manifest.tool != ours {
        anyhow::bail!(
            "the archive {} was made by {}, and this is {ours}: run it with the same \
             cargo-ekstazi that made it",
            file.display(),
            manifest.tool
        );
    }
    if manifest.host != ws.host {
        anyhow::bail!(
            "the archive {} holds tests built for {}, and this machine is {}",
            file.display(),
            manifest.host,
            ws.host
        );
    }
    let here = &options.cargo;
    options.cargo = crate::cli::CargoOpts {
        manifest_path: here.manifest_path.clone(),
        target_dir: here.target_dir.clone(),
        locked: here.locked,
        offline: here.offline,
        frozen: here.frozen,
        quiet: here.quiet,
        verbose: here.verbose,
        ..manifest.cargo.clone()
    };
    let built = manifest.built(ws, &build_dir)?;
    Ok((built, manifest))
}

/// Every test of every binary, as libtest lists them, sorted by binary and
/// name; and per binary, the variables cargo gives its tests.
fn list_tests(ws: &Workspace, built: &Built) -> Result<(CargoEnvs, Vec<TestCase>)> {
    let envs: CargoEnvs = built
        .binaries
        .iter()
        .map(|b| test_env(ws, built, b))
        .collect();
    let listed: Vec<Vec<TestCase>> = built
        .binaries
        .par_iter()
        .enumerate()
        .map(|(i, binary)| libtest::list(i, binary, &envs[i]))
        .collect::<Result<_>>()?;
    let mut tests: Vec<TestCase> = listed.into_iter().flatten().collect();
    tests.sort_by(|a, b| {
        (&built.binaries[a.binary].key, &a.name).cmp(&(&built.binaries[b.binary].key, &b.name))
    });
    Ok((envs, tests))
}

/// The state directory: `--state-dir` (or its other sources), else
/// `.ekstazi` in the workspace.
fn state_dir(ws: &Workspace, options: &Options) -> Result<PathBuf> {
    Ok(match &options.settings.state_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => ws.root.join(".ekstazi"),
    })
}

/// A verdict-first run's recording, still running in the background, is
/// stopped before the build, which may replace the binaries it runs.
fn stop_background_recording(state_dir: &Path) {
    if crate::run::background::cancel(state_dir).is_some() {
        crate::style::note(
            "stopped the last verdict-first run's recording in the background; \
             the tests it had not recorded run again",
        );
    }
}

/// What every record of this build shares; of a build unpacked from an
/// archive, the toolchain and flags of the machine that built it.
fn global_fingerprint(
    ws: &Workspace,
    options: &Options,
    archived: Option<&BuildManifest>,
) -> Global {
    Global {
        rustc: archived.map_or_else(|| ws.rustc_version.clone(), |m| m.rustc_version.clone()),
        target: ws.host.clone(),
        profile: options.cargo.profile_name(),
        features: options.cargo.feature_request(),
        rustflags: archived.map_or_else(rustflags, |m| m.rustflags.clone()),
        tool: tool(),
        granularity: options.granularity.as_str().to_owned(),
        config: options.config.global_digest(&ws.root),
    }
}

/// This cargo-ekstazi, its record format and its shim.
fn tool() -> String {
    format!(
        "cargo-ekstazi {} format {FORMAT_VERSION} shim {}",
        env!("CARGO_PKG_VERSION"),
        crate::run::shim::digest()
    )
}

/// Per binary, its smart checksum now: `Unknown` for a binary that cannot
/// be read, whose tests always run (and for doctests, which no record
/// makes depend on a binary).
fn checksum_binaries(built: &Built, checksums: &Checksums) -> Vec<Sum> {
    built
        .binaries
        .par_iter()
        .map(|b| match b.doctests {
            Some(_) => Sum::Unknown,
            None => checksums.test_binary(&b.path),
        })
        .collect()
}

/// Per binary, with function granularity, the fingerprints of its
/// functions now — or why it falls back to binary granularity.
pub(super) fn fingerprint_functions(
    binary: &TestBinary,
    sum: &Sum,
    snapshots: &Snapshots,
    granularity: Granularity,
) -> Result<Arc<Build>, String> {
    match (granularity, sum) {
        _ if binary.doctests.is_some() => Err("doctests".to_owned()),
        (Granularity::Binary, _) => Err("binary granularity".to_owned()),
        (Granularity::Function, Sum::Hash(id)) => snapshots
            .of_binary(&binary.path, id)
            .map_err(|e| e.to_string()),
        (Granularity::Function, _) => Err("the binary cannot be read".to_owned()),
    }
}

/// The paths whose accesses are not dependencies: the configured ones, the
/// state directory, the toolchain and the shim.
fn ignored_paths(
    options: &Options,
    ws: &Workspace,
    state_dir: &Path,
    shim: &Path,
) -> Result<Ignore> {
    let mut ignore = Ignore::defaults()
        .with_config(&options.config, &ws.root)
        .map_err(anyhow::Error::msg)
        .context(
            "in the ignored paths (.config/ekstazi.toml, --ignore-path, EKSTAZI_IGNORE_PATHS)",
        )?;
    ignore.add(
        ekstazi_core::model::path::normalize(state_dir),
        "state directory",
    );
    ignore.add(
        ekstazi_core::model::path::normalize(&ws.sysroot),
        "toolchain (part of the global fingerprint)",
    );
    ignore.add(
        ekstazi_core::model::path::normalize(shim),
        "cargo-ekstazi's shim",
    );
    Ok(ignore)
}

/// cargo-ekstazi's temporary directories, ignored as dependencies; `None`
/// (said) if they cannot be made.
fn open_scratch(ws: &Workspace, state_dir: &Path, ignore: &mut Ignore) -> Option<Scratch> {
    match Scratch::open(&ws.root, state_dir) {
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
    }
}

/// Per binary, the environment its tests are given, as the selection
/// compares it.
fn test_environments(
    envs: &CargoEnvs,
    shim: &Path,
    checksums: &Checksums,
    ws: &Workspace,
    ignore: &Ignore,
    scratch: &Option<Scratch>,
) -> Vec<Environment> {
    envs.iter()
        .map(|vars| {
            let env = Environment::new(
                crate::run::scheduler::test_environment(vars, shim),
                checksums.anchors(),
                Some(&ws.sysroot),
                shim.parent().unwrap_or(&ws.target_dir),
            )
            .ignoring(ignore.env_rules().clone());
            match scratch {
                Some(scratch) => env.with_private_tmp(scratch.root()),
                None => env,
            }
        })
        .collect()
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
