//! With function granularity, the functions a test executed, per program,
//! replace its dependency on the whole test binary and on each whole
//! program it ran, where the coverage is complete.

use super::{Facts, canonical, depend_on_every_variable};
use crate::capture::environment::Environment;
use crate::capture::trace::CoverageEvent;
use crate::digests::program::Build;
use crate::model::code_dep::{CodeDep, CodeUnit};
use crate::model::dep::{Sum, Target};
use crate::model::record::Record;
use std::path::Path;
use std::time::SystemTime;

/// Adds the functions the test executed to `record`, from the coverage
/// `events`, given `code`, the test binary's fingerprints (`None` under
/// binary granularity). Returns whether the test binary must still be
/// depended on whole.
pub(super) fn deps(
    code: Option<&Build>,
    test_binary: &Path,
    events: &[CoverageEvent],
    since: SystemTime,
    env: &Environment,
    facts: &Facts<'_>,
    record: &mut Record,
) -> bool {
    let Some(test_build) = code else {
        return true;
    };
    let coverage = crate::capture::coverage::coverage(events);
    let mut whole_binary = true;
    let mut walks_environment = false;
    for (program, flags) in &coverage.complete {
        let stored = facts.checksums.anchors().store(program);
        let target = Target::Program(stored.clone());
        if canonical(program) == test_binary {
            walks_environment |= test_build.walks_environment(flags);
            if let Some(dep) = code_dep(CodeUnit::TestBinary, test_build, flags, facts, record) {
                // Run as a program too (by a runner of the user's that
                // execs it, or by the test itself): its functions stand
                // for it there as well, as for any other program.
                record.deps.retain(|dep| dep.target != target);
                record.code.push(dep);
                whole_binary = false;
            }
            continue;
        }
        let Sum::Hash(id) = facts.checksums.as_seen_since(&target, since) else {
            continue;
        };
        let Ok(build) = facts.snapshots.of_binary(program, &id) else {
            continue;
        };
        walks_environment |= build.walks_environment(flags);
        if let Some(dep) = code_dep(CodeUnit::Program(stored), &build, flags, facts, record) {
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

/// Whether a program the test ran, other than the test binary, may have
/// walked the environment it inherited, where its executed functions do
/// not tell (they replaced its dependency on the whole program when they
/// do, see [`deps`]): a program of the project's that did not report
/// them (killed, or under binary granularity) when any of its functions
/// walks; a program the project did not build (a shell, an interpreter)
/// when it names `environ` ([`crate::digests::environ_walkers`]).
/// Not asked for a doctest unit (see [`super::record`]).
pub(super) fn programs_walk_environment(
    function_granularity: bool,
    test_binary: &Path,
    facts: &Facts<'_>,
    record: &Record,
) -> bool {
    record.deps.iter().any(|dep| {
        let (Target::Program(stored), Sum::Hash(id)) = (&dep.target, &dep.sum) else {
            return false;
        };
        let Some(path) = facts.checksums.anchors().resolve(stored) else {
            return true;
        };
        if canonical(&path) == test_binary {
            return false; // its functions decide, in `deps`
        }
        if function_granularity && let Ok(build) = facts.snapshots.of_binary(&path, id) {
            return !build.snapshot.environment_walkers.is_empty();
        }
        facts.environ_walkers.may_walk(&path, id)
    })
}

/// The functions of these coverage flags of `build`, named in the
/// function table; `None` when the coverage is not of this build, or the
/// uninstrumented functions cannot be kept (the program is then depended on
/// whole). A function id two functions share makes the test always run.
fn code_dep(
    unit: CodeUnit,
    build: &Build,
    flags: &[u32],
    facts: &Facts<'_>,
    record: &mut Record,
) -> Option<CodeDep> {
    let functions = match build.executed(flags, facts.snapshots.table()) {
        Ok(functions) => functions?,
        Err(collision) => {
            record.always.push(format!("{collision} (in {unit})"));
            return None;
        }
    };
    facts.snapshots.keep_uninstrumented(build).ok()?;
    Some(CodeDep {
        unit,
        build: build.id,
        uninstrumented: build.uninstrumented_id(),
        functions,
    })
}
