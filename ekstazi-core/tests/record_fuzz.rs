//! The record decoder against hostile bytes: whatever a state directory
//! restored from a shared cache holds, decoding never panics, never
//! allocates without bound, and accepts nothing that is not an intact record.

use ekstazi_core::code::{CodeDep, CodeUnit};
use ekstazi_core::dep::{Dep, FileKind, Sum, Target};
use ekstazi_core::path::{Anchor, StoredPath};
use ekstazi_core::record::{Global, Outcome, Record};
use proptest::prelude::*;

fn path(anchor: Anchor, rel: &str) -> StoredPath {
    StoredPath::new(anchor, rel.as_bytes()).unwrap()
}

/// A record with one dependency of every kind that carries a path.
fn sample(name: &str, functions: Vec<u64>) -> Record {
    Record {
        binary: "pkg::integration".into(),
        test: name.into(),
        global: Global {
            rustc: "rustc 1.95.0".into(),
            granularity: "function".into(),
            ..Global::default()
        },
        outcome: Outcome::Passed,
        duration_us: 42,
        recorded_at_ms: 0,
        always: vec![],
        deps: vec![
            Dep {
                target: Target::Content(path(Anchor::Workspace, "data/a.txt")),
                sum: Sum::Hash([9; 32]),
            },
            Dep {
                target: Target::Kind {
                    path: path(Anchor::Workspace, "flag"),
                    follow: true,
                },
                sum: Sum::Absent,
            },
            Dep {
                target: Target::Listing(path(Anchor::Workspace, "data")),
                sum: Sum::Kind(FileKind::Dir),
            },
            Dep {
                target: Target::Program(path(Anchor::Target, "debug/helper")),
                sum: Sum::Unknown,
            },
            Dep {
                target: Target::BuildFile(path(Anchor::Target, "debug/deps/pkg-1.d")),
                sum: Sum::Hash([3; 32]),
            },
        ],
        code: vec![CodeDep {
            unit: CodeUnit::TestBinary,
            build: [7; 32],
            uninstrumented: [8; 32],
            functions: functions.into_iter().map(u64::to_le_bytes).collect(),
        }],
        network: vec![],
        ignored: vec![],
    }
}

/// Seals a body as a record file would, with a correct digest: what an
/// attacker who knows the format (the digest is no secret) can write.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut out = b"EKZR".to_vec();
    out.extend_from_slice(&ekstazi_core::record::FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    let digest = blake3::hash(&out);
    out.extend_from_slice(digest.as_bytes());
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Record::decode(&bytes);
    }

    #[test]
    fn a_well_sealed_arbitrary_body_never_panics(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Record::decode(&sealed(&body));
    }

    #[test]
    fn records_round_trip(name in "[a-z:_]{1,40}", functions in proptest::collection::vec(any::<u64>(), 0..64)) {
        let record = sample(&name, functions);
        prop_assert_eq!(Record::decode(&record.encode()), Ok(record));
    }

    #[test]
    fn any_byte_change_is_detected(at in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let mut bytes = sample("t", vec![1, 2, 3]).encode();
        let i = at.index(bytes.len());
        bytes[i] ^= xor;
        prop_assert!(Record::decode(&bytes).is_err());
    }

    #[test]
    fn any_truncation_or_extension_is_detected(cut in any::<prop::sample::Index>(), extra in proptest::collection::vec(any::<u8>(), 1..64)) {
        let bytes = sample("t", vec![1]).encode();
        let i = cut.index(bytes.len());
        prop_assert!(Record::decode(&bytes[..i]).is_err());
        let mut longer = bytes.clone();
        longer.extend_from_slice(&extra);
        prop_assert!(Record::decode(&longer).is_err());
    }
}

#[test]
fn a_sealed_record_with_an_escaping_path_is_refused() {
    // Paths are validated after decoding: a digest anyone can compute does
    // not make `../../etc/passwd` a workspace path.
    let good = sample("t", vec![]);
    let body = postcard::to_stdvec(&good).unwrap();
    let needle = b"data/a.txt";
    let at = body
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut evil = body.clone();
    evil[at..at + needle.len()].copy_from_slice(b"../../a.tx");
    assert!(Record::decode(&sealed(&evil)).is_err());
}

#[test]
fn a_four_gigabyte_length_prefix_is_refused_without_allocating() {
    let mut bytes = sample("t", vec![]).encode();
    bytes[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(Record::decode(&bytes).is_err());
    // A body that claims a vector of 2^60 elements, sealed correctly.
    let mut body = postcard::to_stdvec(&sample("t", vec![])).unwrap();
    body.extend_from_slice(&[0xff; 9]);
    assert!(Record::decode(&sealed(&body)).is_err());
}
