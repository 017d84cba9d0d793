//! A test that ran cargo depends on the content of what the builds that
//! cargo used were compiled from, and on the lockfile that pins the
//! registry's sources among them (see [`crate::capture::cargo_runs`]);
//! what cargo made there stands for nothing of its own.

use super::{Facts, canonical};
use crate::capture::cargo_runs;
use crate::capture::environment::Environment;
use crate::capture::trace::Trace;
use crate::model::code_dep::CodeUnit;
use crate::model::dep::{Dep, EnvName, Target};
use crate::model::path::StoredPath;
use crate::model::record::{Ignored, MAX_IGNORED, Record};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Adds to `record` the inputs of the builds the test's cargo used, in
/// place of cargo's bookkeeping there. Returns the build directories that
/// cargo used.
pub(super) fn deps(
    trace: &Trace,
    since: SystemTime,
    env: &Environment,
    facts: &Facts<'_>,
    record: &mut Record,
) -> Vec<PathBuf> {
    let dirs = cargo_runs::build_dirs(trace);
    if dirs.is_empty() {
        return dirs;
    }
    forget_bookkeeping(&dirs, facts, record);
    let pinned: Vec<&Path> = facts.cargo_home.into_iter().collect();
    let roots = cargo_runs::manifest_dirs(trace, &pinned);
    let written = cargo_runs::written(trace);
    let mut sources: Vec<PathBuf> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let all: Vec<_> = dirs
        .iter()
        .map(|dir| facts.builds.inputs(dir, &pinned))
        .collect();
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
        facts.root,
    ));
    let anchors = facts.checksums.anchors();
    let mut targets = vec![Target::Content(
        anchors.store(&facts.root.join("Cargo.lock")),
    )];
    targets.extend(
        sources
            .iter()
            .filter(|source| {
                facts.ignore.check(source).is_none() && !cargo_runs::is_written(source, &written)
            })
            .map(|source| Target::Content(anchors.store(source))),
    );
    let known: HashSet<Target> = record.deps.iter().map(|d| d.target.clone()).collect();
    targets.sort();
    targets.dedup();
    for target in targets {
        if !known.contains(&target) {
            let sum = facts.checksums.as_seen_since(&target, since);
            record.deps.push(Dep { target, sum });
        }
    }
    // The variables rustc read at compile time, as the test was given
    // them (its cargo, and the rustc that cargo runs, see the same).
    names.sort();
    names.dedup();
    for name in names {
        if facts.ignore.check_env(name.as_bytes()).is_some() {
            continue;
        }
        let name = EnvName(name.into_bytes());
        let sum = env.sum(&name);
        let target = Target::Env(name);
        if !known.contains(&target) {
            record.deps.push(Dep { target, sum });
        }
    }
    dirs
}

/// Leaves out what cargo keeps in the build directories `dirs` as it
/// builds, from the inputs [`deps`] adds: the dep-info files (read and
/// rewritten), the listings of its directories (`deps/`, which rustc
/// searches), and the lookups of what it is about to make (absent before a
/// unit's first build). The programs run from there stay, and the files
/// read there that are not dep-info (a build script's output, a library
/// rustc links).
fn forget_bookkeeping(dirs: &[PathBuf], facts: &Facts<'_>, record: &mut Record) {
    let anchors = facts.checksums.anchors();
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
}

/// Leaves out of `record` what cargo made in the build directories `dirs`
/// its test's cargo used (the programs the test ran from there, their
/// functions, the libraries and files it read there): their inputs, which
/// [`deps`] added, stand for them (see
/// [`crate::capture::cargo_runs::is_product_of`]). The test binary
/// itself keeps its own dependency, as for any test.
pub(super) fn forget_products(
    test_binary: &Path,
    dirs: &[PathBuf],
    facts: &Facts<'_>,
    record: &mut Record,
) {
    if dirs.is_empty() {
        return;
    }
    let anchors = facts.checksums.anchors();
    let made = |stored: &StoredPath| {
        anchors.resolve(stored).is_some_and(|path| {
            dirs.iter().any(|dir| cargo_runs::is_product_of(dir, &path))
                && canonical(&path) != test_binary
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
