//! The per-test record and its on-disk encoding.
//!
//! ```text
//! magic "EKZR" | format version: u16 LE | body length: u32 LE | body | blake3(everything before)
//! ```
//! The body is the [`Record`] in `postcard`. A record is accepted only whole:
//! right magic, this format version, a length that matches the file, an
//! intact digest, a body that decodes completely and paths that stay inside
//! their anchors. Anything else is a [`DecodeError`], and its test runs.
//! The seal is the one every kept file has ([`crate::files::sealed`]).

use crate::files::sealed::{DecodeError, open, seal};
use crate::model::code_dep::{CodeDep, CodeUnit};
use crate::model::dep::Dep;
use crate::model::peer::Peer;
use serde::{Deserialize, Serialize};
use std::time::Duration;

const MAGIC: &[u8; 4] = b"EKZR";

/// Records are small (a test's dependency list); a larger file is not one of
/// ours and is refused before it is read.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// How a test's last run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Exited successfully, with libtest's verdict of a pass where the
    /// process is libtest's.
    Passed,
    /// Exited with a failing status.
    Failed,
    /// Killed by a signal, or exited without libtest's verdict.
    Crashed,
    /// Killed for running longer than the timeout.
    TimedOut,
}

impl Outcome {
    /// The outcome in words: `passed`, `failed`, `crashed` or `timed out`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Crashed => "crashed",
            Outcome::TimedOut => "timed out",
        }
    }
}

/// What every test of a run depends on: a change re-runs every test that
/// recorded the old value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Global {
    /// `rustc -vV`.
    pub rustc: String,
    /// The target triple.
    pub target: String,
    /// The cargo profile the tests were built with.
    pub profile: String,
    /// Feature flags as given on the command line, normalised.
    pub features: String,
    /// `RUSTFLAGS` and `CARGO_ENCODED_RUSTFLAGS`.
    pub rustflags: String,
    /// cargo-ekstazi's own version and the record format version.
    pub tool: String,
    /// `function` or `binary`: what code dependencies were recorded.
    pub granularity: String,
    /// The digest of the configuration that decides what is recorded
    /// (`.config/ekstazi.toml`'s ignore rules; empty for the defaults).
    pub config: String,
}

impl Global {
    /// The names of the components that differ, as "global: X changed" reasons use them.
    pub fn changes(&self, now: &Global) -> Vec<&'static str> {
        let pairs = [
            ("rustc", &self.rustc, &now.rustc),
            ("target", &self.target, &now.target),
            ("profile", &self.profile, &now.profile),
            ("features", &self.features, &now.features),
            ("RUSTFLAGS", &self.rustflags, &now.rustflags),
            ("cargo-ekstazi", &self.tool, &now.tool),
            ("granularity", &self.granularity, &now.granularity),
            ("config", &self.config, &now.config),
        ];
        pairs
            .into_iter()
            .filter(|(_, a, b)| a != b)
            .map(|(name, _, _)| name)
            .collect()
    }
}

/// Everything known about one test's last run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The stable binary key (`package`, `package::bin/name`, ...).
    pub binary: String,
    /// The test's path within its binary.
    pub test: String,
    /// What every test of the run depended on.
    pub global: Global,
    /// How the test's run ended.
    pub outcome: Outcome,
    /// Wall-clock time of the test's process, in microseconds.
    pub duration_us: u64,
    /// When the run ended, in milliseconds since the Unix epoch: where
    /// shards of a partitioned run both hold a record of a test, the newer
    /// one wins (`merge-state`).
    pub recorded_at_ms: u64,
    /// Why this test must run next time whatever else holds (its trace was
    /// incomplete, it touched something that cannot be checksummed). Empty
    /// for a fully traced test.
    pub always: Vec<String>,
    /// What the test observed, each with its checksum as the test saw it.
    pub deps: Vec<Dep>,
    /// The functions the test executed, per program (function granularity).
    pub code: Vec<CodeDep>,
    /// What the test reached over sockets that may be another machine
    /// (judged external or not at selection time, under the configuration).
    pub network: Vec<Peer>,
    /// Accesses that were not dependencies, and why (for `list --verbose`);
    /// at most [`MAX_IGNORED`].
    pub ignored: Vec<Ignored>,
}

/// At most this many ignored accesses are kept per record...
pub const MAX_IGNORED: usize = 200;
/// ...and at most this many for one reason, then one entry saying how many
/// more there were: a coreutils test made about 35 files in its temporary
/// directory, each path kept whole, and they were half of a record's bytes
/// before compression while `list -v` needs only a few to show why.
pub const MAX_IGNORED_PER_REASON: usize = 8;

/// Now, in milliseconds since the Unix epoch by this machine's clock: what
/// records (`recorded_at_ms`), the history's manifests and the log of runs
/// are dated in.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An access that was not a dependency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// The path (anchored, as shown) or `$VARIABLE`.
    pub what: String,
    /// Why it was not a dependency, in words `list --verbose` shows.
    pub why: String,
}

impl Record {
    /// Wall-clock time of the test's process.
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.duration_us)
    }

    /// Puts the dependencies in their one order, by target: the order a
    /// record file gives back (`storage::record_file`), so that a record
    /// made and the same record read are equal.
    pub fn sort_deps(&mut self) {
        crate::model::dep::sort(&mut self.deps);
    }

    /// Serialises the record with header and digest.
    pub fn encode(&self) -> Vec<u8> {
        seal(
            MAGIC,
            &postcard::to_stdvec(self).expect("a record always serialises"),
        )
    }

    /// Parses and checks an encoded record.
    pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        let record: Record = open(MAGIC, bytes)?;
        record.validate()?;
        Ok(record)
    }

    pub(crate) fn validate(&self) -> Result<(), DecodeError> {
        let paths_ok = self
            .deps
            .iter()
            .filter_map(|dep| dep.target.path())
            .chain(self.network.iter().filter_map(|peer| match peer {
                Peer::Unix(path) => Some(path),
                _ => None,
            }))
            .chain(self.code.iter().filter_map(|code| match &code.unit {
                CodeUnit::Program(path) => Some(path),
                CodeUnit::TestBinary => None,
            }))
            .all(|path| path.is_valid());
        if paths_ok {
            Ok(())
        } else {
            Err(DecodeError::BadPath)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::model::dep::{Sum, Target};
    use crate::model::path::{Anchor, StoredPath};

    pub(crate) fn sample() -> Record {
        Record {
            binary: "demo::integration".into(),
            test: "reads_data".into(),
            global: Global {
                rustc: "rustc 1.95.0".into(),
                ..Global::default()
            },
            outcome: Outcome::Passed,
            duration_us: 1234,
            recorded_at_ms: 0,
            always: vec![],
            deps: vec![
                crate::model::dep::Dep {
                    target: Target::Content(
                        StoredPath::new(Anchor::Workspace, &b"data/a.txt"[..]).unwrap(),
                    ),
                    sum: Sum::Hash([7; 32]),
                },
                crate::model::dep::Dep {
                    target: Target::TestBinary,
                    sum: Sum::Hash([1; 32]),
                },
                crate::model::dep::Dep {
                    target: Target::Env(crate::model::dep::EnvName(b"MODE".to_vec())),
                    sum: Sum::Absent,
                },
            ],
            code: vec![CodeDep {
                unit: CodeUnit::TestBinary,
                build: [3; 32],
                uninstrumented: [4; 32],
                functions: vec![[1; 8], [5; 8], [30; 8]],
            }],
            network: vec![Peer::Ip("127.0.0.1:80".parse().unwrap())],
            ignored: vec![Ignored {
                what: "/proc/self/maps".into(),
                why: "kernel interface".into(),
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::sample;
    use super::*;
    use crate::files::sealed::FORMAT_VERSION;

    #[test]
    fn round_trips() {
        let record = sample();
        assert_eq!(Record::decode(&record.encode()), Ok(record));
    }

    #[test]
    fn every_truncation_is_rejected() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert!(Record::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[i] ^= 1 << bit;
                assert!(Record::decode(&flipped).is_err(), "byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn another_version_is_named() {
        let mut bytes = sample().encode();
        let other = FORMAT_VERSION + 1;
        bytes[4..6].copy_from_slice(&other.to_le_bytes());
        assert_eq!(
            Record::decode(&bytes),
            Err(DecodeError::OtherVersion(other))
        );
    }

    #[test]
    fn a_huge_length_prefix_is_rejected_without_allocating() {
        let mut bytes = sample().encode();
        bytes[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Record::decode(&bytes), Err(DecodeError::Truncated));
    }

    #[test]
    fn global_changes_are_named() {
        let a = Global::default();
        let b = Global {
            rustc: "other".into(),
            features: "x".into(),
            ..Global::default()
        };
        assert_eq!(a.changes(&b), vec!["rustc", "features"]);
        assert!(a.changes(&a).is_empty());
    }
}
