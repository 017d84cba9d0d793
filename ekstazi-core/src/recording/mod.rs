//! From the evidence of a finished test to its record: the one place a
//! [`Record`] is made from a run.
//!
//! The runner gathers the evidence ([`Evidence`]: the outcome, the trace's
//! bytes, the environment the test was given, what its unit is built from)
//! and what the run knows ([`Facts`]: the checksums, the function tables,
//! the ignore rules); [`record`] decides, from those alone, what the test
//! depends on:
//!
//! 1. a doctest unit's build files ([`doctests`]);
//! 2. what the trace shows the test accessed ([`crate::capture::collect`]),
//!    each with its checksum as the test saw it;
//! 3. the inputs of the builds a cargo the test ran used, in place of
//!    cargo's own bookkeeping ([`cargo_builds`]);
//! 4. with function granularity, the functions each program executed, in
//!    place of the whole program ([`code`]);
//! 5. every variable, where a program may have walked the environment.
//!
//! Invariant: every record's dependencies come out sorted
//! ([`Record::sort_deps`]), so that the history files the same record
//! whether it was just made or read.

mod cargo_builds;
mod code;
mod doctests;

use crate::capture::cargo_runs::KnownBuilds;
use crate::capture::collect::{Context, Observed, collect};
use crate::capture::environment::Environment;
use crate::capture::ignore::Ignore;
use crate::capture::trace;
use crate::digests::checksum::{Checksums, ListingWitness};
use crate::digests::environ_walkers::EnvironWalkers;
use crate::digests::program::Build;
use crate::model::dep::{Dep, Sum, Target};
use crate::model::record::{Global, Outcome, Record};
use crate::options::config::Service;
use crate::storage::snapshots::Snapshots;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub use doctests::DepInfo;

/// What a finished test left: how it ended, its trace, and what it was
/// given.
pub struct Evidence<'a> {
    /// Its binary's key.
    pub binary: &'a str,
    /// Its name.
    pub test: &'a str,
    /// How it ended.
    pub outcome: Outcome,
    /// It passed only after failing (a retry), or its verdict was a failure
    /// although its recording run passed: a pass that is no witness, so
    /// the record says it failed and the test runs next time.
    pub untrusted_pass: bool,
    /// How long it ran.
    pub duration: Duration,
    /// When its process started: what it read is checksummed as it was
    /// since then.
    pub started: SystemTime,
    /// The bytes of its trace (empty when the shim never started, which
    /// the trace then tells), or why they could not be read.
    pub trace: Result<Vec<u8>, String>,
    /// The shim could not write all of its trace.
    pub trace_lost: bool,
    /// The environment it was given.
    pub env: &'a Environment,
    /// What ran it.
    pub unit: Unit<'a>,
}

/// What a test ran in.
pub enum Unit<'a> {
    /// A test binary (libtest's, or one without a harness).
    Binary {
        /// Its path.
        path: &'a Path,
        /// Its smart checksum now.
        sum: &'a Sum,
        /// With function granularity, the fingerprints of its functions
        /// now; `None` where it falls back to binary granularity.
        code: Option<&'a Build>,
    },
    /// A library's doctests, run by rustdoc.
    Doctests {
        /// The dep-info files of the library and of its path packages.
        dep_info: Vec<DepInfo>,
        /// Their build scripts' outputs.
        build_outputs: &'a [PathBuf],
        /// Their manifests and the workspace's.
        manifests: &'a [PathBuf],
        /// The environment rustdoc is run with (`RUSTDOCFLAGS`,
        /// `RUSTDOC`).
        build_env: &'a Environment,
        /// The ignore rules for its trace: the run's, with the crates
        /// cargo compiled left out too.
        ignore: &'a Ignore,
    },
}

/// What the run knows beside a test's own evidence.
pub struct Facts<'a> {
    /// The run's global fingerprint.
    pub global: &'a Global,
    /// The present checksums, and each as a test saw it.
    pub checksums: &'a Checksums,
    /// The programs' fingerprints and the function table.
    pub snapshots: &'a Snapshots,
    /// Which programs the project did not build may walk the environment.
    pub environ_walkers: &'a EnvironWalkers,
    /// What is never a dependency.
    pub ignore: &'a Ignore,
    /// The local services the configuration declares.
    pub services: &'a [Service],
    /// The workspace's root.
    pub root: &'a Path,
    /// Cargo's home, whose sources the lockfile pins.
    pub cargo_home: Option<&'a Path>,
    /// What the build directories tests' cargos used were built from.
    pub builds: &'a KnownBuilds,
}

/// The record of a finished test, with the dependencies its run observed.
/// Only a pass lets the record vouch (any other outcome runs again next
/// time whatever changed); a failure's dependencies say what it failed on
/// (`bisect` compares them with a pass's).
pub fn record(evidence: &Evidence<'_>, facts: &Facts<'_>) -> Record {
    let mut record = unsorted(evidence, facts);
    // In the order its file gives back, so that the history files the
    // same record whether it was just made or read: a doctest unit's too,
    // and one whose trace could not be read.
    record.sort_deps();
    record
}

/// [`record`], its dependencies in the order they were found.
fn unsorted(evidence: &Evidence<'_>, facts: &Facts<'_>) -> Record {
    let mut record = empty_record(evidence, facts);
    // A doctest unit's build files, and then what rustdoc and the
    // doctests were seen to read.
    if let Unit::Doctests {
        dep_info,
        build_outputs,
        manifests,
        build_env,
        ..
    } = &evidence.unit
    {
        let inputs = doctests::Inputs {
            dep_info,
            build_outputs,
            manifests,
            build_env,
        };
        doctests::deps(&inputs, evidence.started, facts, &mut record);
    }
    let bytes = match &evidence.trace {
        Ok(bytes) => bytes,
        Err(e) => {
            record
                .always
                .push(format!("its trace could not be read: {e}"));
            return record;
        }
    };
    let trace = trace::parse(bytes);
    let cargo_dirs = add_accessed(&trace, evidence, facts, &mut record);
    let Unit::Binary { path, sum, code } = evidence.unit else {
        // Rustdoc's own executables: no code dependencies, no test binary.
        // Nor the programs a doctest unit runs: rustdoc runs the linker
        // (`cc`, which names `environ`) for every doctest, so each unit
        // would rerun whenever any variable changed (the limitations page
        // lists a walk in a doctest as missed).
        return record;
    };
    let test_binary = canonical(path);
    let whole_binary = code::deps(
        code,
        &test_binary,
        &trace.coverage,
        evidence.started,
        evidence.env,
        facts,
        &mut record,
    );
    // After `code::deps`: the programs whose functions it kept are no
    // longer depended on whole.
    if code::programs_walk_environment(code.is_some(), &test_binary, facts, &record) {
        depend_on_every_variable(evidence.env, &mut record);
    }
    // After the walks are judged: a program cargo made may walk them.
    cargo_builds::forget_products(&test_binary, &cargo_dirs, facts, &mut record);
    if whole_binary {
        record.deps.push(Dep {
            target: Target::TestBinary,
            sum: sum.clone(),
        });
    }
    record
}

/// Adds what the trace shows the test accessed, each as the test saw it,
/// and the inputs of the builds a cargo it ran used. Returns those build
/// directories.
fn add_accessed(
    trace: &trace::Trace,
    evidence: &Evidence<'_>,
    facts: &Facts<'_>,
    record: &mut Record,
) -> Vec<PathBuf> {
    let ignore = match &evidence.unit {
        Unit::Doctests { ignore, .. } => *ignore,
        Unit::Binary { .. } => facts.ignore,
    };
    let collected = collect(
        trace,
        &Context {
            anchors: facts.checksums.anchors(),
            ignore,
            env: evidence.env,
            services: facts.services,
        },
    );
    record.always.extend(collected.always);
    if evidence.trace_lost {
        record.always.push(
            "the shim could not write all of its trace (a full disk, a file size limit, or its descriptor taken)"
                .to_owned(),
        );
    }
    record.network = collected.network;
    record.ignored = collected.ignored;
    add_observed(
        facts.checksums,
        evidence.started,
        collected.observed,
        &collected.witnesses,
        record,
    );
    cargo_builds::deps(trace, evidence.started, evidence.env, facts, record)
}

/// Marks `record` failed: its test failed where the verdicts were given,
/// whatever its recording run saw, and a failed record never vouches.
pub fn mark_failed(record: &mut Record) {
    record.outcome = Outcome::Failed;
}

/// A record of the finished test with no dependencies yet.
fn empty_record(evidence: &Evidence<'_>, facts: &Facts<'_>) -> Record {
    Record {
        binary: evidence.binary.to_owned(),
        test: evidence.test.to_owned(),
        global: facts.global.clone(),
        outcome: if evidence.untrusted_pass {
            Outcome::Failed
        } else {
            evidence.outcome
        },
        duration_us: u64::try_from(evidence.duration.as_micros()).unwrap_or(u64::MAX),
        recorded_at_ms: crate::model::record::now_ms(),
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
    checksums: &Checksums,
    started: SystemTime,
    observed: Vec<Observed>,
    witnesses: &HashMap<Target, Option<ListingWitness>>,
    record: &mut Record,
) {
    let known: HashSet<Target> = record.deps.iter().map(|d| d.target.clone()).collect();
    let observed = observed
        .into_iter()
        .filter(|observed| !known.contains(&observed.target))
        .map(|observed| {
            let sum = observed.known.unwrap_or_else(|| {
                match checksums.as_seen_since(&observed.target, started) {
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

/// `path` with its links resolved, or as it is where it cannot be.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::path::Anchors;
    use crate::storage::store::Store;

    /// A doctest unit's record, from `trace`, in a workspace of its own.
    fn doctest_record(trace: Result<Vec<u8>, String>) -> Record {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        for file in ["Cargo.toml", "Cargo.lock", "src/lib.rs"] {
            std::fs::create_dir_all(ws.join(file).parent().unwrap()).unwrap();
            std::fs::write(ws.join(file), file).unwrap();
        }
        let anchors = Anchors::new(ws, &ws.join("target"), None);
        let env = Environment::new([("RUSTDOC".into(), "rustdoc".into())], &anchors, None, ws);
        let checksums = Checksums::new(anchors);
        let snapshots = Snapshots::new(Store::new(&ws.join(".ekstazi")));
        let ignore = Ignore::defaults();
        let builds = KnownBuilds::default();
        let facts = Facts {
            global: &Global::default(),
            checksums: &checksums,
            snapshots: &snapshots,
            environ_walkers: &EnvironWalkers::default(),
            ignore: &ignore,
            services: &[],
            root: ws,
            cargo_home: None,
            builds: &builds,
        };
        let manifests = [ws.join("Cargo.toml")];
        let evidence = Evidence {
            binary: "pkg::doc/lib",
            test: "doctests",
            outcome: Outcome::Passed,
            untrusted_pass: false,
            duration: Duration::from_millis(5),
            started: SystemTime::now(),
            trace,
            trace_lost: false,
            env: &env,
            unit: Unit::Doctests {
                dep_info: Vec::new(),
                build_outputs: &[],
                manifests: &manifests,
                build_env: &env,
                ignore: &ignore,
            },
        };
        record(&evidence, &facts)
    }

    #[test]
    fn every_record_comes_out_with_its_dependencies_in_their_one_order() {
        // A doctest unit's build files and variables, with a trace and
        // without one: the order a record file gives back, so that the
        // history files the same record whether it was just made or read.
        for trace in [Ok(Vec::new()), Err("denied".to_owned())] {
            let made = doctest_record(trace);
            assert!(made.deps.len() >= 4, "{:?}", made.deps);
            let mut sorted = made.clone();
            sorted.sort_deps();
            assert_eq!(made.deps, sorted.deps);
        }
    }

    #[test]
    fn a_pass_that_is_no_witness_is_recorded_failed() {
        let mut made = doctest_record(Ok(Vec::new()));
        assert_eq!(made.outcome, Outcome::Passed);
        mark_failed(&mut made);
        assert_eq!(made.outcome, Outcome::Failed);
    }
}
