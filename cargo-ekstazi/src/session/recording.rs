//! Gathering a finished test's evidence for the core to make its record
//! from ([`ekstazi_core::recording::record`]): the trace and the dep-info
//! files read, the environment and the unit's build files looked up.

use crate::cargo::libtest::TestCase;
use crate::session::Session;
use ekstazi_core::capture::environment::Environment;
use ekstazi_core::capture::ignore::Ignore;
use ekstazi_core::capture::trace;
use ekstazi_core::model::record::{Outcome, Record};
use ekstazi_core::recording::{DepInfo, Evidence, Facts, Unit};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How a test's run ended, as its runner saw it.
pub struct Ended<'a> {
    /// How it ended.
    pub outcome: Outcome,
    /// A pass that is no witness (see [`Evidence::untrusted_pass`]).
    pub untrusted_pass: bool,
    /// How long it ran.
    pub duration: Duration,
    /// When its process started.
    pub started: SystemTime,
    /// Where the shim wrote its trace.
    pub trace: &'a Path,
}

/// The record of a finished test that was given the environment `env`.
pub fn record_of(
    session: &Session,
    case: &TestCase,
    ended: &Ended<'_>,
    env: &Environment,
) -> Record {
    let binary = &session.built.binaries[case.binary];
    let doctest_ignore = binary
        .doctests
        .as_ref()
        .map(|_| ignore_built_crates(&session.ignore, &session.ws.target_dir));
    let unit = match (&binary.doctests, &doctest_ignore) {
        (Some(doctests), Some(ignore)) => Unit::Doctests {
            dep_info: doctests
                .dep_info
                .iter()
                .map(|path| DepInfo {
                    path: path.clone(),
                    text: std::fs::read_to_string(path).map_err(|e| e.to_string()),
                })
                .collect(),
            build_outputs: &doctests.build_outputs,
            manifests: &doctests.manifests,
            build_env: &session.environments[case.binary],
            ignore,
        },
        _ => Unit::Binary {
            path: &binary.path,
            sum: &session.binary_sums[case.binary],
            code: session.code(case.binary).as_deref().ok(),
        },
    };
    let trace = match std::fs::read(ended.trace) {
        Ok(bytes) => Ok(bytes),
        // No file: the shim never started, which the trace then tells.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e.to_string()),
    };
    let evidence = Evidence {
        binary: &binary.key,
        test: &case.name,
        outcome: ended.outcome,
        untrusted_pass: ended.untrusted_pass,
        duration: ended.duration,
        started: ended.started,
        trace_lost: trace::lost_marker(ended.trace).exists(),
        trace,
        env,
        unit,
    };
    ekstazi_core::recording::record(&evidence, &session.facts())
}

impl Session {
    /// What the run knows beside a test's own evidence.
    pub fn facts(&self) -> Facts<'_> {
        Facts {
            global: &self.global,
            checksums: &self.checksums,
            snapshots: &self.snapshots,
            environ_walkers: &self.environ_walkers,
            ignore: &self.ignore,
            services: &self.services,
            root: &self.ws.root,
            cargo_home: self.ws.cargo_home.as_deref(),
            builds: &self.builds,
        }
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
fn ignore_built_crates(ignore: &Ignore, target_dir: &Path) -> Ignore {
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

#[cfg(test)]
mod tests {
    use super::*;

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
