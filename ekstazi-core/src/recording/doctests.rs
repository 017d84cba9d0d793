//! What a library's doctests were compiled from: the sources its dep-info
//! files name (its own and its path dependencies'), the dep-info files
//! themselves (they hold the values of the environment variables read at
//! compile time, and the module list), the build scripts' outputs (cfgs,
//! environment, link instructions), the manifests, the lockfile,
//! `RUSTDOCFLAGS` and `RUSTDOC`. Registry and git dependencies are pinned
//! by the lockfile; the toolchain, profile and features are in the global
//! fingerprint.

use super::Facts;
use crate::capture::environment::Environment;
use crate::model::dep::{Dep, EnvName, Target};
use crate::model::record::Record;
use std::path::PathBuf;
use std::time::SystemTime;

/// A dep-info file of a doctest unit, with its text as the runner read
/// it, or why it could not.
pub struct DepInfo {
    /// Its path.
    pub path: PathBuf,
    /// Its text, or why it could not be read.
    pub text: Result<String, String>,
}

/// A doctest unit's build files.
pub(super) struct Inputs<'a> {
    pub dep_info: &'a [DepInfo],
    pub build_outputs: &'a [PathBuf],
    pub manifests: &'a [PathBuf],
    pub build_env: &'a Environment,
}

/// Adds a doctest unit's build files to `record`, each as it was since
/// `since`.
pub(super) fn deps(inputs: &Inputs<'_>, since: SystemTime, facts: &Facts<'_>, record: &mut Record) {
    let anchors = facts.checksums.anchors();
    let mut targets: Vec<Target> = Vec::new();
    for dep_info in inputs.dep_info {
        match &dep_info.text {
            Ok(text) => {
                let sources = crate::capture::depinfo::parse(text, facts.root).sources;
                targets.extend(sources.iter().map(|f| Target::Content(anchors.store(f))));
                targets.push(Target::BuildFile(anchors.store(&dep_info.path)));
            }
            Err(e) => record.always.push(format!(
                "the dep-info {} cannot be read: {e}",
                dep_info.path.display()
            )),
        }
    }
    // Build files name this checkout's directories: compared without them.
    targets.extend(
        inputs
            .build_outputs
            .iter()
            .map(|f| Target::BuildFile(anchors.store(f))),
    );
    targets.extend(
        inputs
            .manifests
            .iter()
            .chain(std::iter::once(&facts.root.join("Cargo.lock")))
            .map(|f| Target::Content(anchors.store(f))),
    );
    targets.sort();
    targets.dedup();
    for target in targets {
        let sum = facts.checksums.as_seen_since(&target, since);
        record.deps.push(Dep { target, sum });
    }
    // `RUSTDOC` is read by cargo alone (rustdoc's children never see ours).
    for name in [&b"RUSTDOCFLAGS"[..], b"RUSTDOC"] {
        let name = EnvName(name.to_vec());
        let sum = inputs.build_env.sum(&name);
        record.deps.push(Dep {
            target: Target::Env(name),
            sum,
        });
    }
}
