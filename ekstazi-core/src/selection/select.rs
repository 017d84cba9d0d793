//! The verdict for one test: run it, or skip it, and why.
//!
//! A test is skipped only on the evidence of an intact record of a passing
//! run whose global fingerprint and every dependency checksum still match.
//! Every other state is a reason to run, and every reason is named.

use crate::capture::environment::Environment;
use crate::capture::network::is_external;
use crate::digests::checksum::Checksums;
use crate::digests::fingerprint::FingerprintError;
use crate::model::code_dep::{CodeDep, CodeUnit};
use crate::model::dep::{Sum, Target, describe_change};
use crate::model::record::{Global, Outcome, Record};
use crate::options::config::NetworkPolicy;
use crate::storage::record_index::Summarised;
use crate::storage::snapshots::Snapshots;
use crate::storage::store::{Invalid, Loaded};
use std::fmt;
use std::path::Path;

/// Why a test was selected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `--forceall` (an always-run pattern is [`Reason::AlwaysRunPattern`]).
    Forced,
    /// No record.
    New,
    /// A record that cannot be trusted (damaged, another format, another test's).
    Unreadable(String),
    /// The last run did not pass.
    NotPassed(Outcome),
    /// A component of the global fingerprint changed.
    Global(&'static str),
    /// The record says the test can never be skipped.
    Always(String),
    /// A dependency's checksum changed.
    Changed(String),
    /// The test reached another machine (or what the configuration counts
    /// as one) last time.
    External(String),
    /// An always-run pattern matches the test.
    AlwaysRunPattern(String),
    /// A never-record pattern matches the test: it has no record to trust.
    NeverRecorded(String),
    /// `--skipme`: no selection at all.
    Skipme,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Forced => f.write_str("forced"),
            Reason::New => f.write_str("new"),
            Reason::Unreadable(why) => write!(f, "record unreadable: {why}"),
            Reason::NotPassed(Outcome::Failed) => f.write_str("failed last time"),
            Reason::NotPassed(outcome) => write!(f, "{} last time", outcome.as_str()),
            Reason::Global(component) => write!(f, "global: {component} changed"),
            Reason::Always(why) => write!(f, "always runs: {why}"),
            Reason::Changed(change) => f.write_str(change),
            Reason::External(peer) => write!(f, "external: {peer}"),
            Reason::AlwaysRunPattern(pattern) => write!(f, "always-run pattern `{pattern}`"),
            Reason::NeverRecorded(pattern) => write!(f, "never recorded (pattern `{pattern}`)"),
            Reason::Skipme => f.write_str("--skipme: no selection"),
        }
    }
}

/// What the selection needs to know about the present.
pub struct Present<'a> {
    /// What every test of this run depends on now.
    pub global: &'a Global,
    /// The smart checksum of the test's binary now.
    pub binary: &'a Sum,
    /// Where the test's binary is, for fingerprinting its functions.
    pub binary_path: &'a Path,
    /// The present checksums of the records' dependencies.
    pub checksums: &'a Checksums,
    /// The builds' fingerprints, for programs rebuilt since a test ran.
    pub snapshots: &'a Snapshots,
    /// The environment the test would be given now.
    pub env: &'a Environment,
    /// What counts as external.
    pub network: &'a NetworkPolicy,
    /// External tests always run.
    pub always_run_external: bool,
    /// Every test runs (`--forceall`): each gets [`Reason::Forced`] first.
    pub forced: bool,
}

/// The peers of a record that make its test external under `policy`, as
/// shown to users (`list` names them even when they do not select the test).
pub fn external_peers(record: &Record, policy: &NetworkPolicy) -> Vec<String> {
    external_among(&record.network, policy)
}

/// [`external_peers`] of a record's peers, however it is held.
pub fn external_among(network: &[crate::model::peer::Peer], policy: &NetworkPolicy) -> Vec<String> {
    network
        .iter()
        .filter(|peer| is_external(peer, policy))
        .map(ToString::to_string)
        .collect()
}

/// Every reason to run a test; empty means it is skipped as unaffected.
pub fn reasons(loaded: &Loaded, present: &Present<'_>) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if present.forced {
        reasons.push(Reason::Forced);
    }
    let record = match loaded {
        Loaded::Missing => {
            reasons.push(Reason::New);
            return reasons;
        }
        Loaded::Invalid(why) => {
            reasons.push(Reason::Unreadable(match why {
                Invalid::Decode(e) => e.to_string(),
                Invalid::Io(e) => e.to_string(),
            }));
            return reasons;
        }
        Loaded::Found(record) => record,
    };
    reasons.extend(record_reasons(record, present));
    reasons
}

/// Every reason an intact record gives to run its test (not `--forceall`);
/// empty means it vouches for the test: it passed, and everything it
/// depended on is as it was.
pub fn record_reasons(record: &Record, present: &Present<'_>) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if record.outcome != Outcome::Passed {
        reasons.push(Reason::NotPassed(record.outcome));
    }
    reasons.extend(
        record
            .global
            .changes(present.global)
            .into_iter()
            .map(Reason::Global),
    );
    reasons.extend(record.always.iter().cloned().map(Reason::Always));
    if present.always_run_external {
        let peers = external_peers(record, present.network);
        if let Some(first) = peers.first() {
            reasons.push(Reason::External(match peers.len() {
                1 => first.clone(),
                n => format!("{first} and {} more", n - 1),
            }));
        }
    }
    for dep in &record.deps {
        let now = current(&dep.target, present);
        if !dep.sum.matches(&now) {
            reasons.push(Reason::Changed(describe_change(
                &dep.target,
                &dep.sum,
                &now,
            )));
        }
    }
    for dep in &record.code {
        reasons.extend(code_reasons(dep, present).into_iter().map(Reason::Changed));
    }
    reasons
}

/// Whether an intact record vouches for its test: exactly when
/// [`record_reasons`] finds none, but stopping at the first difference
/// (a filed record tried as a candidate usually differs early, and its
/// reasons are never shown).
pub fn vouches(record: &Record, present: &Present<'_>) -> bool {
    record.outcome == Outcome::Passed
        && record.global.changes(present.global).is_empty()
        && record.always.is_empty()
        && (!present.always_run_external || external_peers(record, present.network).is_empty())
        && record
            .deps
            .iter()
            .all(|dep| dep.sum.matches(&current(&dep.target, present)))
        && record.code.iter().all(|dep| code_holds(dep, present))
}

/// Whether a record's summary proves that it vouches for its test:
/// exactly [`vouches`] for a record whose every program is the very build
/// the test ran. `false` says nothing: a rebuilt program's functions, and
/// every reason, are the record's to give (read it whole).
pub fn summary_vouches(summarised: &Summarised, present: &Present<'_>) -> bool {
    let summary = &summarised.summary;
    summary.outcome == Outcome::Passed
        && summary.global.changes(present.global).is_empty()
        && summary.always.is_empty()
        && (!present.always_run_external
            || external_among(&summary.network, present.network).is_empty())
        && summarised
            .deps()
            .all(|dep| dep.sum.matches(&current(&dep.target, present)))
        && summary.code.iter().all(
            |(unit, build)| matches!(program_now(unit, present).0, Sum::Hash(id) if id == *build),
        )
}

/// Whether every function a test executed in one program is as it was.
fn code_holds(dep: &CodeDep, present: &Present<'_>) -> bool {
    match code_now(dep, present) {
        CodeNow::Ran => true,
        CodeNow::Build(build) => {
            crate::selection::changed_code::holds(dep, &build, present.snapshots)
        }
        CodeNow::Gone => false,
    }
}

/// What a code dependency's executed functions are compared with now.
pub enum CodeNow {
    /// The program is the very build the test ran: nothing to compare.
    Ran,
    /// Another build of it.
    Build(std::sync::Arc<crate::digests::program::Build>),
    /// Deleted, unreadable, or its functions cannot be fingerprinted.
    Gone,
}

impl CodeNow {
    /// The program is the very build the test ran.
    pub fn ran(&self) -> bool {
        matches!(self, CodeNow::Ran)
    }
}

/// What `dep`'s program is now: the very build the test ran, another build
/// (fingerprinted), or gone.
pub fn code_now(dep: &CodeDep, present: &Present<'_>) -> CodeNow {
    let (now, path) = program_now(&dep.unit, present);
    match now {
        Sum::Hash(id) if id == dep.build => CodeNow::Ran,
        Sum::Hash(id) => path
            .and_then(|path| present.snapshots.of_binary(&path, &id).ok())
            .map_or(CodeNow::Gone, CodeNow::Build),
        _ => CodeNow::Gone,
    }
}

/// A program's smart checksum now, and where it is (to fingerprint it).
fn program_now(unit: &CodeUnit, present: &Present<'_>) -> (Sum, Option<std::path::PathBuf>) {
    match unit {
        CodeUnit::TestBinary => (
            present.binary.clone(),
            Some(present.binary_path.to_path_buf()),
        ),
        CodeUnit::Program(program) => (
            present.checksums.get(&Target::Program(program.clone())),
            present.checksums.anchors().resolve(program),
        ),
    }
}

/// The checksum of a dependency's target now.
pub fn current(target: &Target, present: &Present<'_>) -> Sum {
    match target {
        Target::TestBinary => present.binary.clone(),
        Target::Env(name) => present.env.sum(name),
        Target::Environment => present.env.walked_names(),
        target => present.checksums.get(target),
    }
}

/// Why the functions a test executed in one program may have changed: none
/// if the program is the very build the test ran, else the comparison of
/// the executed functions' fingerprints.
fn code_reasons(dep: &CodeDep, present: &Present<'_>) -> Vec<String> {
    let (now, path) = program_now(&dep.unit, present);
    let id = match now {
        Sum::Hash(id) if id == dep.build => return Vec::new(),
        Sum::Hash(id) => id,
        Sum::Absent => return vec![format!("program deleted: {}", dep.unit)],
        _ => return vec![format!("program cannot be read: {}", dep.unit)],
    };
    let build = path
        .ok_or_else(|| FingerprintError::Parse("no such path".into()))
        .and_then(|path| present.snapshots.of_binary(&path, &id));
    match build {
        Ok(build) => crate::selection::changed_code::changes(dep, &build, present.snapshots),
        Err(e) => vec![format!("cannot fingerprint {}: {e}", dep.unit)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dep::{Dep, FileKind};
    use crate::model::path::{Anchor, Anchors, StoredPath};
    use crate::model::peer::Peer;
    use crate::model::record::Record;
    use crate::storage::store::Store;
    use std::fs;
    use std::path::Path;

    struct World {
        dir: tempfile::TempDir,
        checksums: Checksums,
        global: Global,
    }

    impl World {
        fn new() -> World {
            let dir = tempfile::tempdir().unwrap();
            let anchors = Anchors::new(dir.path(), &dir.path().join("target"), None);
            World {
                checksums: Checksums::new(anchors),
                dir,
                global: Global::default(),
            }
        }

        fn file(&self, rel: &str, content: &str) {
            fs::write(self.dir.path().join(rel), content).unwrap();
        }

        fn reasons(&self, record: Record) -> Vec<String> {
            self.reasons_with(record, &[], &NetworkPolicy::default())
        }

        fn reasons_with(
            &self,
            record: Record,
            vars: &[(&str, &str)],
            network: &NetworkPolicy,
        ) -> Vec<String> {
            // A fresh cache per question: each models one run.
            let checksums = Checksums::new(self.checksums.anchors().clone());
            let snapshots = Snapshots::new(Store::new(&self.dir.path().join(".ekstazi")));
            let env = Environment::new(
                vars.iter().map(|(k, v)| (k.into(), v.into())),
                self.checksums.anchors(),
                None,
                Path::new("/nowhere"),
            );
            let present = Present {
                global: &self.global,
                binary: &Sum::Hash([1; 32]),
                binary_path: Path::new("/nonexistent"),
                checksums: &checksums,
                snapshots: &snapshots,
                env: &env,
                network,
                always_run_external: true,
                forced: false,
            };
            let found = reasons(&Loaded::Found(Box::new(record.clone())), &present);
            assert_eq!(
                vouches(&record, &present),
                found.is_empty(),
                "the short-circuit agrees with the reasons: {found:?}"
            );
            // The record's index entry proves no more than the record, and
            // as much where the test ran no other build.
            let file = self.dir.path().join("record-file");
            fs::write(&file, "").unwrap();
            let identity = crate::files::identity::Identity::of(&file, false).unwrap();
            let index = crate::storage::record_index::Index::build(
                &record.binary,
                [],
                [(identity, [0; 32], &record)],
                std::time::SystemTime::now() + std::time::Duration::from_secs(3),
            );
            let summarised =
                crate::storage::record_index::Index::decode(&index.encode(), &record.binary)
                    .unwrap()
                    .fresh(&record.test, Some(identity))
                    .unwrap();
            let proved = summary_vouches(&summarised, &present);
            assert!(!proved || found.is_empty(), "{found:?}");
            if record.code.iter().all(|c| code_now(c, &present).ran()) {
                assert_eq!(proved, found.is_empty(), "{found:?}");
            }
            found.iter().map(ToString::to_string).collect()
        }
    }

    fn record(deps: Vec<Dep>) -> Record {
        Record {
            binary: "b".into(),
            test: "t".into(),
            global: Global::default(),
            outcome: Outcome::Passed,
            duration_us: 1,
            recorded_at_ms: 0,
            always: vec![],
            deps,
            code: vec![],
            network: vec![],
            ignored: vec![],
        }
    }

    fn ws(rel: &str) -> StoredPath {
        StoredPath::new(Anchor::Workspace, rel.as_bytes()).unwrap()
    }

    #[test]
    fn an_unchanged_passing_record_is_skipped() {
        let w = World::new();
        w.file("a.txt", "a");
        let sum = crate::digests::checksum::content(&w.dir.path().join("a.txt"));
        let deps = vec![
            Dep {
                target: Target::Content(ws("a.txt")),
                sum,
            },
            Dep {
                target: Target::TestBinary,
                sum: Sum::Hash([1; 32]),
            },
            Dep {
                target: Target::Kind {
                    path: ws("gone"),
                    follow: true,
                },
                sum: Sum::Absent,
            },
            Dep {
                target: Target::Kind {
                    path: ws(""),
                    follow: true,
                },
                sum: Sum::Kind(FileKind::Dir),
            },
        ];
        assert!(w.reasons(record(deps.clone())).is_empty());

        w.file("a.txt", "b");
        w.file("gone", "");
        let mut failed = record(deps);
        failed.outcome = Outcome::Failed;
        failed.deps[1].sum = Sum::Hash([2; 32]);
        assert_eq!(
            w.reasons(failed),
            [
                "failed last time",
                "file changed: a.txt",
                "binary changed",
                "file created: gone"
            ]
        );
    }

    #[test]
    fn the_very_build_a_test_ran_is_not_fingerprinted_again() {
        // A program with the smart checksum it had when the test ran changed
        // in nothing: it is not read again (here it could not be: its path
        // does not exist), and the record vouches. Another build of it is
        // compared function by function, and one that cannot be read runs.
        let w = World::new();
        let mut ran = record(vec![]);
        ran.code = vec![CodeDep {
            unit: CodeUnit::TestBinary,
            build: [1; 32],
            uninstrumented: [0; 32],
            functions: vec![],
        }];
        assert!(w.reasons(ran.clone()).is_empty());

        ran.code[0].build = [2; 32];
        let reasons = w.reasons(ran.clone());
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(
            reasons[0].starts_with("cannot fingerprint test binary: "),
            "{reasons:?}"
        );

        // A program the test ran, deleted since, is said to be deleted.
        ran.code[0].unit = CodeUnit::Program(ws("tool"));
        assert_eq!(w.reasons(ran), ["program deleted: tool"]);
    }

    #[test]
    fn unknown_checksums_never_match() {
        let w = World::new();
        let deps = vec![Dep {
            target: Target::Content(ws("x")),
            sum: Sum::Unknown,
        }];
        assert_eq!(
            w.reasons(record(deps)),
            ["file changed while the test ran: x"]
        );
    }

    #[test]
    fn missing_and_damaged_records_and_global_changes_run() {
        let w = World::new();
        let checksums = Checksums::new(w.checksums.anchors().clone());
        let env = Environment::new([], checksums.anchors(), None, Path::new("/x"));
        let now = Global {
            rustc: "new".into(),
            ..Global::default()
        };
        let snapshots = Snapshots::new(Store::new(&w.dir.path().join(".ekstazi")));
        let present = Present {
            global: &now,
            binary: &Sum::Absent,
            binary_path: Path::new("/nonexistent"),
            checksums: &checksums,
            snapshots: &snapshots,
            env: &env,
            network: &NetworkPolicy::default(),
            always_run_external: true,
            forced: true,
        };
        assert_eq!(
            reasons(&Loaded::Missing, &present),
            [Reason::Forced, Reason::New]
        );
        let bad = Loaded::Invalid(crate::files::sealed::DecodeError::BadDigest.into());
        assert_eq!(
            reasons(&bad, &present)[1].to_string(),
            "record unreadable: record failed its integrity check"
        );
        assert_eq!(
            reasons(&Loaded::Found(Box::new(record(vec![]))), &present)[1].to_string(),
            "global: rustc changed"
        );
    }

    #[test]
    fn environment_variables_compare_by_value() {
        let w = World::new();
        let given = |vars: &[(&str, &str)]| {
            Environment::new(
                vars.iter().map(|(k, v)| (k.into(), v.into())),
                w.checksums.anchors(),
                None,
                Path::new("/nowhere"),
            )
        };
        let mode = crate::model::dep::EnvName(b"MODE".to_vec());
        let deps = vec![Dep {
            target: Target::Env(mode.clone()),
            sum: given(&[("MODE", "fast")]).sum(&mode),
        }];
        let policy = NetworkPolicy::default();
        assert!(
            w.reasons_with(
                record(deps.clone()),
                &[("MODE", "fast"), ("OTHER", "1")],
                &policy
            )
            .is_empty()
        );
        assert_eq!(
            w.reasons_with(record(deps.clone()), &[("MODE", "slow")], &policy),
            ["environment variable changed: MODE"]
        );
        assert_eq!(
            w.reasons_with(record(deps), &[], &policy),
            ["environment variable unset: MODE"]
        );
    }

    #[test]
    fn external_tests_run_under_the_policy() {
        let w = World::new();
        let mut r = record(vec![]);
        r.network = vec![Peer::Own("127.0.0.1:5000".parse().unwrap())];
        let default = NetworkPolicy::default();
        let strict = NetworkPolicy {
            loopback_is_external: true,
        };
        assert!(w.reasons_with(r.clone(), &[], &default).is_empty());
        assert_eq!(
            w.reasons_with(r.clone(), &[], &strict),
            ["external: 127.0.0.1:5000 (bound by the test)"]
        );
        r.network.push(Peer::Host("example.com".into()));
        assert_eq!(
            w.reasons_with(r.clone(), &[], &default),
            ["external: host name example.com"]
        );
        assert_eq!(
            w.reasons_with(r.clone(), &[], &strict),
            ["external: 127.0.0.1:5000 (bound by the test) and 1 more"]
        );
        let service = Peer::Ip("127.0.0.1:5432".parse().unwrap());
        r.network = vec![service];
        assert_eq!(
            w.reasons_with(r, &[], &default),
            ["external: 127.0.0.1:5432"],
            "a loopback port nothing of the test bound"
        );
    }
}
