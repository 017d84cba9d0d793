//! Turning a finished test's trace into its record.

use crate::cargo::libtest::TestCase;
use crate::run::scheduler::Finished;
use crate::session::Session;
use ekstazi_core::capture::collect::{Context, Observed, collect};
use ekstazi_core::capture::environment::Environment;
use ekstazi_core::capture::trace;
use ekstazi_core::capture::trace::CoverageEvent;
use ekstazi_core::digests::checksum::ListingWitness;
use ekstazi_core::digests::program::Build;
use ekstazi_core::model::code_dep::{CodeDep, CodeUnit};
use ekstazi_core::model::dep::{Dep, Sum, Target};
use ekstazi_core::model::record::Record;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The record of a finished test, with the dependencies its run observed.
/// Only a pass lets the record vouch (any other outcome runs again next
/// time whatever changed); a failure's dependencies say what it failed on
/// (`bisect` compares them with a pass's).
pub fn record_of(session: &Session, case: &TestCase, finished: &Finished) -> Record {
    let env = session.environment_of(case, finished.tmpdir.as_deref());
    record_in(session, case, finished, &env)
}

/// [`record_of`] a test that was given the environment `env` (another
/// runner's, such as cargo-nextest's) rather than the one cargo-ekstazi
/// gives its tests.
pub fn record_in(
    session: &Session,
    case: &TestCase,
    finished: &Finished,
    env: &Environment,
) -> Record {
    let binary = &session.built.binaries[case.binary];
    let mut record = empty_record(session, case, finished);
    // A doctest unit's build files, and then what rustdoc and the
    // doctests were seen to read (see `crate::cargo::rustdoc`).
    if let Some(doctests) = &binary.doctests {
        doctest_deps(session, case, doctests, finished.started, &mut record);
    }
    let bytes = match std::fs::read(&finished.trace) {
        Ok(bytes) => bytes,
        // No file: the shim never started, which `collect` reports.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            record
                .always
                .push(format!("its trace could not be read: {e}"));
            return record;
        }
    };
    let trace = trace::parse(&bytes);
    let lost = trace::lost_marker(&finished.trace);
    let doctest_ignore = binary
        .doctests
        .is_some()
        .then(|| ignore_built_crates(&session.ignore, &session.ws.target_dir));
    let collected = collect(
        &trace,
        &Context {
            anchors: session.checksums.anchors(),
            ignore: doctest_ignore.as_ref().unwrap_or(&session.ignore),
            env,
            services: &session.services,
        },
    );
    record.always.extend(collected.always);
    if lost.exists() {
        record.always.push(
            "the shim could not write all of its trace (a full disk, a file size limit, or its descriptor taken)"
                .to_owned(),
        );
    }
    record.network = collected.network;
    record.ignored = collected.ignored;
    add_observed(
        session,
        finished,
        collected.observed,
        &collected.witnesses,
        &mut record,
    );
    let cargo_dirs = cargo_build_deps(session, &trace, finished.started, env, &mut record);
    if binary.doctests.is_some() {
        // Rustdoc's own executables: no code dependencies, no test binary.
        // Nor the programs a doctest unit runs: rustdoc runs the linker
        // (`cc`, which names `environ`) for every doctest, so each unit
        // would rerun whenever any variable changed (the limitations page
        // lists a walk in a doctest as missed).
        return record;
    }
    let whole_binary = code_deps(
        session,
        case,
        &trace.coverage,
        finished.started,
        env,
        &mut record,
    );
    // After `code_deps`: the programs whose functions it kept are no
    // longer depended on whole.
    if programs_walk_environment(session, case, &record) {
        depend_on_every_variable(env, &mut record);
    }
    // After the walks are judged: a program cargo made may walk them.
    forget_cargo_products(session, case, &cargo_dirs, &mut record);
    if whole_binary {
        record.deps.push(Dep {
            target: Target::TestBinary,
            sum: session.binary_sums[case.binary].clone(),
        });
    }
    // In the order its file gives back, so that the history files the
    // same record whether it was just made or read.
    record.sort_deps();
    record
}

/// A record of the finished test with no dependencies yet.
fn empty_record(session: &Session, case: &TestCase, finished: &Finished) -> Record {
    Record {
        binary: session.built.binaries[case.binary].key.clone(),
        test: case.name.clone(),
        global: session.global.clone(),
        outcome: finished.outcome,
        duration_us: u64::try_from(finished.duration.as_micros()).unwrap_or(u64::MAX),
        recorded_at_ms: ekstazi_core::model::record::now_ms(),
        always: Vec::new(),
        deps: Vec::new(),
        code: Vec::new(),
        network: Vec::new(),
        ignored: Vec::new(),
    }
}

/// Adds what the test was observed to access (and the record does not
/// name already) with its checksum as the test saw it.
fn add_observed(
    session: &Session,
    finished: &Finished,
    observed: Vec<Observed>,
    witnesses: &HashMap<Target, Option<ListingWitness>>,
    record: &mut Record,
) {
    let known: std::collections::HashSet<Target> =
        record.deps.iter().map(|d| d.target.clone()).collect();
    let observed = observed
        .into_iter()
        .filter(|observed| !known.contains(&observed.target))
        .map(|observed| {
            let sum = observed.known.unwrap_or_else(|| {
                let checksums = &session.checksums;
                match checksums.as_seen_since(&observed.target, finished.started) {
                    // A directory the test changed itself, on its first run:
                    // what it found there may still be what is there now.
                    Sum::Unknown => match witnesses.get(&observed.target) {
                        Some(Some(seen)) => checksums.witnessed(&observed.target, seen),
                        _ => Sum::Unknown,
                    },
                    sum => sum,
                }
            });
            Dep {
                target: observed.target,
                sum,
            }
        });
    record.deps.extend(observed);
}

/// A test that ran cargo depends on the content of what the builds that
/// cargo used were compiled from, and on the lockfile that pins the
/// registry's sources among them (see
/// [`ekstazi_core::capture::cargo_runs`]). Returns the build directories
/// that cargo used.
fn cargo_build_deps(
    session: &Session,
    trace: &trace::Trace,
    since: SystemTime,
    env: &Environment,
    record: &mut Record,
) -> Vec<PathBuf> {
    use ekstazi_core::capture::cargo_runs;
    use ekstazi_core::model::record::{Ignored, MAX_IGNORED};
    let dirs = cargo_runs::build_dirs(trace);
    if dirs.is_empty() {
        return dirs;
    }
    let anchors = session.checksums.anchors();
    // What cargo keeps in the build directories as it builds, from the
    // inputs below: the dep-info files (read and rewritten), the listings
    // of its directories (`deps/`, which rustc searches), and the lookups
    // of what it is about to make (absent before a unit's first build).
    // The programs run from there stay, and the files read there that are
    // not dep-info (a build script's output, a library rustc links).
    record.deps.retain(|dep| {
        let (stored, why) = match &dep.target {
            Target::Content(stored) => (
                stored,
                "a dep-info file of a build the test's cargo used (what it names counts)",
            ),
            Target::Listing(stored) => (
                stored,
                "a directory of a build the test's cargo used (what it was built from counts)",
            ),
            Target::Kind { path: stored, .. } => (
                stored,
                "a path of a build the test's cargo used (what it was built from counts)",
            ),
            _ => return true,
        };
        let Some(path) = anchors.resolve(stored) else {
            return true;
        };
        let cargos = dirs.iter().any(|dir| match &dep.target {
            Target::Content(_) => cargo_runs::is_dep_info_of(dir, &path),
            Target::Kind { .. } => path.starts_with(dir) || cargo_runs::is_layout_of(dir, &path),
            _ => path.starts_with(dir),
        });
        if !cargos {
            return true;
        }
        if record.ignored.len() < MAX_IGNORED {
            record.ignored.push(Ignored {
                what: stored.to_string(),
                why: why.to_owned(),
            });
        }
        false
    });
    let pinned: Vec<&Path> = session.ws.cargo_home.iter().map(PathBuf::as_path).collect();
    let roots = cargo_runs::manifest_dirs(trace, &pinned);
    let written = cargo_runs::written(trace);
    let mut sources: Vec<PathBuf> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let all: Vec<_> = dirs.iter().map(|dir| session.build_inputs(dir)).collect();
    for inputs in &all {
        names.extend(inputs.env.iter().cloned());
        for why in &inputs.unknown {
            if !record.always.contains(why) {
                record.always.push(why.clone());
            }
        }
        sources.extend(inputs.sources.iter().cloned());
    }
    let all: Vec<&cargo_runs::BuildInputs> = all.iter().map(|i| i.as_ref()).collect();
    sources.extend(cargo_runs::place(
        &cargo_runs::relative_inputs(&all),
        &roots,
        &session.ws.root,
    ));
    let mut targets = vec![Target::Content(
        anchors.store(&session.ws.root.join("Cargo.lock")),
    )];
    targets.extend(
        sources
            .iter()
            .filter(|source| {
                session.ignore.check(source).is_none() && !cargo_runs::is_written(source, &written)
            })
            .map(|source| Target::Content(anchors.store(source))),
    );
    let known: std::collections::HashSet<Target> =
        record.deps.iter().map(|d| d.target.clone()).collect();
    targets.sort();
    targets.dedup();
    for target in targets {
        if !known.contains(&target) {
            let sum = session.checksums.as_seen_since(&target, since);
            record.deps.push(Dep { target, sum });
        }
    }
    // The variables rustc read at compile time, as the test was given
    // them (its cargo, and the rustc that cargo runs, see the same).
    names.sort();
    names.dedup();
    for name in names {
        if session.ignore.check_env(name.as_bytes()).is_some() {
            continue;
        }
        let name = ekstazi_core::model::dep::EnvName(name.into_bytes());
        let sum = env.sum(&name);
        let target = Target::Env(name);
        if !known.contains(&target) {
            record.deps.push(Dep { target, sum });
        }
    }
    dirs
}

/// Leaves out of `record` what cargo made in the build directories `dirs`
/// its test's cargo used (the programs the test ran from there, their
/// functions, the libraries and files it read there): their inputs, which
/// [`cargo_build_deps`] added, stand for them (see
/// [`ekstazi_core::capture::cargo_runs::is_product_of`]). The test binary
/// itself keeps its own dependency, as for any test.
fn forget_cargo_products(
    session: &Session,
    case: &TestCase,
    dirs: &[PathBuf],
    record: &mut Record,
) {
    use ekstazi_core::capture::cargo_runs::is_product_of;
    use ekstazi_core::model::record::{Ignored, MAX_IGNORED};
    if dirs.is_empty() {
        return;
    }
    let anchors = session.checksums.anchors();
    let test_binary = canonical(&session.built.binaries[case.binary].path);
    let made = |stored: &ekstazi_core::model::path::StoredPath| {
        anchors.resolve(stored).is_some_and(|path| {
            dirs.iter().any(|dir| is_product_of(dir, &path)) && canonical(&path) != test_binary
        })
    };
    const WHY: &str = "made by a cargo the test ran (what it was built from counts)";
    let mut forgotten = Vec::new();
    record.deps.retain(|dep| {
        let stored = match &dep.target {
            Target::Program(p)
            | Target::Library(p)
            | Target::Content(p)
            | Target::Kind { path: p, .. }
            | Target::Listing(p)
            | Target::Link(p)
            | Target::Resolved(p)
            | Target::BuildFile(p) => p,
            _ => return true,
        };
        let keep = !made(stored);
        if !keep {
            forgotten.push(stored.to_string());
        }
        keep
    });
    record.code.retain(|code| match &code.unit {
        CodeUnit::Program(stored) if made(stored) => {
            forgotten.push(format!("the functions of {stored}"));
            false
        }
        _ => true,
    });
    forgotten.dedup();
    for what in forgotten {
        if record.ignored.len() >= MAX_IGNORED {
            break;
        }
        record.ignored.push(Ignored {
            what,
            why: WHY.to_owned(),
        });
    }
}

/// What a library's doctests were compiled from: the sources its dep-info
/// files name (its own and its path dependencies'), the dep-info files
/// themselves (they hold the values of the environment variables read at
/// compile time, and the module list), the build scripts' outputs (cfgs,
/// environment, link instructions), the manifests, the lockfile,
/// `RUSTDOCFLAGS` and `RUSTDOC`. Registry and git dependencies are pinned by the
/// lockfile; the toolchain, profile and features are in the global
/// fingerprint.
fn doctest_deps(
    session: &Session,
    case: &TestCase,
    doctests: &crate::cargo::test_build::Doctests,
    since: SystemTime,
    record: &mut Record,
) {
    let anchors = session.checksums.anchors();
    let mut targets: Vec<Target> = Vec::new();
    for dep_info in &doctests.dep_info {
        match std::fs::read_to_string(dep_info) {
            Ok(text) => {
                let sources =
                    ekstazi_core::capture::depinfo::parse(&text, &session.ws.root).sources;
                targets.extend(sources.iter().map(|f| Target::Content(anchors.store(f))));
                targets.push(Target::BuildFile(anchors.store(dep_info)));
            }
            Err(e) => record.always.push(format!(
                "the dep-info {} cannot be read: {e}",
                dep_info.display()
            )),
        }
    }
    // Build files name this checkout's directories: compared without them.
    targets.extend(
        doctests
            .build_outputs
            .iter()
            .map(|f| Target::BuildFile(anchors.store(f))),
    );
    targets.extend(
        doctests
            .manifests
            .iter()
            .chain(std::iter::once(&session.ws.root.join("Cargo.lock")))
            .map(|f| Target::Content(anchors.store(f))),
    );
    targets.sort();
    targets.dedup();
    for target in targets {
        let sum = session.checksums.as_seen_since(&target, since);
        record.deps.push(Dep { target, sum });
    }
    // `RUSTDOC` is read by cargo alone (rustdoc's children never see ours,
    // see `crate::cargo::rustdoc`).
    for name in [&b"RUSTDOCFLAGS"[..], b"RUSTDOC"] {
        let name = ekstazi_core::model::dep::EnvName(name.to_vec());
        let sum = session.environments[case.binary].sum(&name);
        record.deps.push(Dep {
            target: Target::Env(name),
            sum,
        });
    }
}

/// What a doctest unit's trace leaves out besides what every test's does:
/// the target directory's `deps/` directories (`<target>/<profile>/deps`,
/// `<target>/<triple>/<profile>/deps`), where cargo keeps the crates it
/// compiled. Rustdoc lists them, and reads the library's and its
/// dependencies' `.rlib`s there; but those are compiled from what the
/// unit's build files already name (the dep-info's sources, the lockfile's
/// versions, the toolchain in the global fingerprint), and they are not
/// the same from one checkout to another, nor is the listing from one
/// build of another package to the next: as dependencies they would only
/// rerun doctests for nothing.
fn ignore_built_crates(
    ignore: &ekstazi_core::capture::ignore::Ignore,
    target_dir: &Path,
) -> ekstazi_core::capture::ignore::Ignore {
    let mut ignore = ignore.clone();
    let subdirs = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect()
    };
    let target = ekstazi_core::model::path::normalize(target_dir);
    for dir in subdirs(&target) {
        let nested = subdirs(&dir);
        for candidate in std::iter::once(dir).chain(nested) {
            let deps = candidate.join("deps");
            if deps.is_dir() {
                ignore.add(deps, "compiled by cargo from the doctests' build files");
            }
        }
    }
    ignore
}

/// With function granularity, the functions the test executed, per
/// program, replace the dependency on the whole test binary and on each
/// whole program it ran — where the coverage is complete. Returns whether
/// the test binary must still be depended on whole.
fn code_deps(
    session: &Session,
    case: &TestCase,
    events: &[CoverageEvent],
    since: SystemTime,
    env: &Environment,
    record: &mut Record,
) -> bool {
    let Ok(test_build) = session.code(case.binary) else {
        return true;
    };
    let test_binary = canonical(&session.built.binaries[case.binary].path);
    let coverage = ekstazi_core::capture::coverage::coverage(events);
    let mut whole_binary = true;
    let mut walks_environment = false;
    for (program, flags) in &coverage.complete {
        let stored = session.checksums.anchors().store(program);
        let target = Target::Program(stored.clone());
        if canonical(program) == test_binary {
            walks_environment |= test_build.walks_environment(flags);
            if let Some(dep) = code_dep(session, CodeUnit::TestBinary, test_build, flags, record) {
                // Run as a program too (by a runner of the user's that
                // execs it, or by the test itself): its functions stand
                // for it there as well, as for any other program.
                record.deps.retain(|dep| dep.target != target);
                record.code.push(dep);
                whole_binary = false;
            }
            continue;
        }
        let Sum::Hash(id) = session.checksums.as_seen_since(&target, since) else {
            continue;
        };
        let Ok(build) = session.snapshots.of_binary(program, &id) else {
            continue;
        };
        walks_environment |= build.walks_environment(flags);
        if let Some(dep) = code_dep(session, CodeUnit::Program(stored), &build, flags, record) {
            record.deps.retain(|dep| dep.target != target);
            record.code.push(dep);
        }
    }
    // Without the test binary's coverage (its process was killed, or
    // exec'd), which functions ran is not known: any that walks the
    // environment may have.
    walks_environment |= whole_binary && !test_build.snapshot.environment_walkers.is_empty();
    if walks_environment {
        depend_on_every_variable(env, record);
    }
    whole_binary
}

/// Makes `record` depend on every variable the test was given (that a
/// walk sees): each one's value, so that a change names the variable (and
/// the user can tell whether to ignore it), and which there are.
fn depend_on_every_variable(env: &Environment, record: &mut Record) {
    if record
        .deps
        .iter()
        .any(|dep| dep.target == Target::Environment)
    {
        return;
    }
    for name in env.walked() {
        let target = Target::Env(name);
        if !record.deps.iter().any(|dep| dep.target == target) {
            let Target::Env(name) = &target else {
                unreachable!()
            };
            let sum = env.sum(name);
            record.deps.push(Dep { target, sum });
        }
    }
    record.deps.push(Dep {
        target: Target::Environment,
        sum: env.walked_names(),
    });
}

/// Whether a program the test ran, other than the test binary, may have
/// walked the environment it inherited, where its executed functions do
/// not tell (they replaced its dependency on the whole program when they
/// do, see [`code_deps`]): a program of the project's that did not report
/// them (killed, or under binary granularity) when any of its functions
/// walks; a program the project did not build (a shell, an interpreter)
/// when it names `environ` (`ekstazi_core::digests::environ_walkers`).
/// Not asked for a doctest unit (see [`record_in`]).
fn programs_walk_environment(session: &Session, case: &TestCase, record: &Record) -> bool {
    let test_binary = canonical(&session.built.binaries[case.binary].path);
    let function_granularity = session.code(case.binary).is_ok();
    record.deps.iter().any(|dep| {
        let (Target::Program(stored), Sum::Hash(id)) = (&dep.target, &dep.sum) else {
            return false;
        };
        let Some(path) = session.checksums.anchors().resolve(stored) else {
            return true;
        };
        if canonical(&path) == test_binary {
            return false; // its functions decide, in `code_deps`
        }
        if function_granularity && let Ok(build) = session.snapshots.of_binary(&path, id) {
            return !build.snapshot.environment_walkers.is_empty();
        }
        session.environ_walkers.may_walk(&path, id)
    })
}

/// The functions of these coverage flags of `build`, named in the
/// function table; `None` when the coverage is not of this build, or the
/// uninstrumented functions cannot be kept (the program is then depended on
/// whole). A function id two functions share makes the test always run.
fn code_dep(
    session: &Session,
    unit: CodeUnit,
    build: &Build,
    flags: &[u32],
    record: &mut Record,
) -> Option<CodeDep> {
    let functions = match build.executed(flags, session.snapshots.table()) {
        Ok(functions) => functions?,
        Err(collision) => {
            record.always.push(format!("{collision} (in {unit})"));
            return None;
        }
    };
    session.snapshots.keep_uninstrumented(build).ok()?;
    Some(CodeDep {
        unit,
        build: build.id,
        uninstrumented: build.uninstrumented_id(),
        functions,
    })
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ekstazi_core::capture::ignore::Ignore;

    #[test]
    fn doctests_leave_out_the_crates_cargo_compiled_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path();
        for sub in [
            "debug/deps",
            "debug/build/x-1/out",
            "release/deps",
            "x86_64-unknown-linux-gnu/debug/deps",
            "ekstazi/build/x86_64-unknown-linux-gnu/debug/deps",
        ] {
            std::fs::create_dir_all(target.join(sub)).unwrap();
        }
        std::fs::write(target.join("debug/deps/libx-1.rlib"), b"").unwrap();
        let ignore = ignore_built_crates(&Ignore::defaults(), target);
        let ignored = |rel: &str| ignore.check(&target.join(rel)).is_some();
        assert!(ignored("debug/deps/libx-1.rlib"));
        assert!(ignored("debug/deps"), "its listing");
        assert!(ignored("release/deps/liby-2.rmeta"));
        assert!(ignored("x86_64-unknown-linux-gnu/debug/deps/libx-1.rlib"));
        assert!(
            !ignored("debug/build/x-1/out/generated.rs"),
            "a build script's"
        );
        assert!(!ignored("debug/depsx"));
        assert!(!ignored("debug/x"));
        assert!(
            !ignored("ekstazi/build/x86_64-unknown-linux-gnu/debug/deps/libx-1.rlib"),
            "not what `cargo test --doc` builds"
        );
    }
}
