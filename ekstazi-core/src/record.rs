//! The per-test record and its on-disk encoding.
//!
//! ```text
//! magic "EKZR" | format version: u16 LE | body length: u32 LE | body | blake3(everything before)
//! ```
//! The body is the [`Record`] in `postcard`. A record is accepted only whole:
//! right magic, this format version, a length that matches the file, an
//! intact digest, a body that decodes completely and paths that stay inside
//! their anchors. Anything else is a [`DecodeError`], and its test runs.

use crate::code::{CodeDep, CodeUnit};
use crate::dep::Dep;
use crate::network::Peer;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::time::Duration;

/// Bumped whenever the body or the meaning of a checksum changes.
pub const FORMAT_VERSION: u16 = 11;

const MAGIC: &[u8; 4] = b"EKZR";
const HEADER: usize = 4 + 2 + 4;
const DIGEST: usize = 32;

/// Records are small (a test's dependency list); a larger file is not one of
/// ours and is refused before it is read.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// How a test's last run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Passed,
    Failed,
    /// Killed by a signal, or exited without libtest's verdict.
    Crashed,
    TimedOut,
}

impl Outcome {
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
    pub global: Global,
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

/// At most this many ignored accesses are kept per record.
pub const MAX_IGNORED: usize = 200;

/// An access that was not a dependency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ignored {
    /// The path (anchored, as shown) or `$VARIABLE`.
    pub what: String,
    pub why: String,
}

impl Record {
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.duration_us)
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

/// Wraps a serialised body: magic, format version, length, body, digest.
pub(crate) fn seal(magic: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let body_len = u32::try_from(body.len()).expect("a body fits in 4 GiB");
    let mut out = Vec::with_capacity(HEADER + body.len() + DIGEST);
    out.extend_from_slice(magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(body);
    let digest = blake3::hash(&out);
    out.extend_from_slice(digest.as_bytes());
    out
}

/// Checks a sealed body whole and decodes it (a type that borrows, such as
/// `&str`, borrows from `bytes`).
pub(crate) fn open<'a, T: serde::Deserialize<'a>>(
    magic: &[u8; 4],
    bytes: &'a [u8],
) -> Result<T, DecodeError> {
    let (value, rest) =
        postcard::take_from_bytes(open_raw(magic, bytes)?).map_err(|_| DecodeError::BadBody)?;
    if !rest.is_empty() {
        return Err(DecodeError::BadBody);
    }
    Ok(value)
}

/// Checks sealed bytes whole and returns their body, undecoded.
pub(crate) fn open_raw<'a>(magic: &[u8; 4], bytes: &'a [u8]) -> Result<&'a [u8], DecodeError> {
    if bytes.len() < HEADER + DIGEST {
        return Err(DecodeError::Truncated);
    }
    if &bytes[..4] != magic {
        return Err(DecodeError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(DecodeError::OtherVersion(version));
    }
    let body_len = u32::from_le_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]) as usize;
    if body_len != bytes.len() - HEADER - DIGEST {
        return Err(if body_len > bytes.len() - HEADER - DIGEST {
            DecodeError::Truncated
        } else {
            DecodeError::BadLength
        });
    }
    let (signed, digest) = bytes.split_at(HEADER + body_len);
    if blake3::hash(signed).as_bytes() != digest {
        return Err(DecodeError::BadDigest);
    }
    Ok(&signed[HEADER..])
}

/// The digest sealed bytes end with: what names a history object, so that
/// checking the seal also checks the name.
pub(crate) fn sealed_digest(sealed: &[u8]) -> Option<[u8; DIGEST]> {
    sealed
        .get(sealed.len().checked_sub(DIGEST)?..)?
        .try_into()
        .ok()
}

/// Compresses sealed bytes for keeping (function table segments, history
/// objects): names and paths repeat, and zstd at its default level costs
/// little next to the write.
pub(crate) fn pack(sealed: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(sealed, 0).expect("compressing to memory cannot fail")
}

/// Decompresses packed bytes, refusing anything that would exceed `limit`.
pub(crate) fn unpack(packed: &[u8], limit: u64) -> Option<Vec<u8>> {
    thread_local! {
        // One decompression context per thread, reused: making one per
        // call (zstd's stream decoder does) took 39 % of an analysis that
        // read ~1 000 history objects (ripgrep, `perf`), more than the
        // decompression itself.
        static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { RefCell::new(None) };
    }
    let capacity = usize::try_from(limit).ok()?;
    DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = zstd::bulk::Decompressor::new().ok();
        }
        // The buffer is the size the frame declares, capped at `limit`;
        // output beyond the buffer is an error, not a larger allocation.
        cell.as_mut()?.decompress(packed, capacity).ok()
    })
}

/// Why a record was not accepted. Every variant means: run the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record is truncated")]
    Truncated,
    #[error("not a cargo-ekstazi record (bad magic)")]
    BadMagic,
    #[error("record has format version {0}, this cargo-ekstazi reads version {FORMAT_VERSION}")]
    OtherVersion(u16),
    #[error("record length does not match its file")]
    BadLength,
    #[error("record failed its integrity check")]
    BadDigest,
    #[error("record body does not decode")]
    BadBody,
    #[error("record names a path outside its anchor")]
    BadPath,
    #[error("record belongs to another test")]
    OtherTest,
    #[error("record file is larger than any record")]
    TooLarge,
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::dep::{Sum, Target};
    use crate::path::{Anchor, StoredPath};

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
                crate::dep::Dep {
                    target: Target::Content(
                        StoredPath::new(Anchor::Workspace, &b"data/a.txt"[..]).unwrap(),
                    ),
                    sum: Sum::Hash([7; 32]),
                },
                crate::dep::Dep {
                    target: Target::TestBinary,
                    sum: Sum::Hash([1; 32]),
                },
                crate::dep::Dep {
                    target: Target::Env(crate::dep::EnvName(b"MODE".to_vec())),
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

    #[test]
    fn round_trips() {
        let record = sample();
        assert_eq!(Record::decode(&record.encode()), Ok(record));
    }

    #[test]
    fn unpacking_stops_at_the_limit_whatever_the_frame_declares() {
        let bytes = vec![7u8; 4096];
        let packed = pack(&bytes);
        assert_eq!(unpack(&packed, 4096).as_deref(), Some(&bytes[..]));
        assert_eq!(unpack(&packed, 4095), None);
        // A frame that does not declare its size (the stream encoder's).
        let mut undeclared = Vec::new();
        let mut encoder = zstd::stream::write::Encoder::new(&mut undeclared, 0).unwrap();
        std::io::Write::write_all(&mut encoder, &bytes).unwrap();
        encoder.finish().unwrap();
        assert_eq!(unpack(&undeclared, 4096).as_deref(), Some(&bytes[..]));
        assert_eq!(unpack(&undeclared, 4095), None);
        // Two frames: their total counts.
        let twice = [packed.clone(), packed].concat();
        assert_eq!(unpack(&twice, 8192).map(|b| b.len()), Some(8192));
        assert_eq!(unpack(&twice, 8191), None);
        assert_eq!(unpack(b"not zstd", 4096), None);
        // The context is reused after a failure.
        assert_eq!(unpack(&pack(b"after"), 16).as_deref(), Some(&b"after"[..]));
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
