//! The record decoder against hostile bytes: whatever a state directory
//! restored from a shared cache holds, decoding never panics, never
//! allocates without bound, and accepts nothing that is not an intact record.

use ekstazi_core::files::sealed::DecodeError;
use ekstazi_core::model::code_dep::{CodeDep, CodeUnit};
use ekstazi_core::model::dep::{Dep, FileKind, Sum, Target};
use ekstazi_core::model::path::{Anchor, StoredPath};
use ekstazi_core::model::record::{Global, Outcome, Record};
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
    out.extend_from_slice(&ekstazi_core::files::sealed::FORMAT_VERSION.to_le_bytes());
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

/// The largest single allocation made on this thread since the last
/// [`largest_allocation_since`]: the decoder must never trust a count.
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub struct Counting;

    thread_local! {
        static LARGEST: Cell<usize> = const { Cell::new(0) };
    }

    fn note(size: usize) {
        // `try_with`: allocations while the thread's locals are torn down.
        let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
    }

    // SAFETY: forwards to the system allocator, only noting sizes.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            // SAFETY: the caller's contract is GlobalAlloc's.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            // SAFETY: as above.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note(new_size);
            // SAFETY: as above.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    /// Runs `f`, and returns what it returned and the largest single
    /// allocation it made on this thread.
    pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
        LARGEST.with(|largest| largest.set(0));
        let out = f();
        (out, LARGEST.with(Cell::get))
    }
}

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// postcard's length prefix: a LEB128 varint.
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// A sealed record whose `deps` claims `count` elements (and holds `tail`
/// after the count): the prefix of a record with no dependencies, code,
/// peers or ignored accesses, whose last five bytes are those five empty
/// vectors' counts.
fn claiming_deps(count: u64, tail: &[u8]) -> Vec<u8> {
    let mut empty = sample("t", vec![]);
    empty.deps.clear();
    empty.code.clear();
    let body = postcard::to_stdvec(&empty).unwrap();
    assert_eq!(
        body[body.len() - 5..],
        [0; 5],
        "always, deps, code, network, ignored"
    );
    let mut evil = body[..body.len() - 4].to_vec();
    evil.extend_from_slice(&varint(count));
    evil.extend_from_slice(tail);
    sealed(&evil)
}

#[test]
fn a_four_gigabyte_length_prefix_is_refused_without_allocating() {
    // The counter sees what this thread allocates.
    let (_, seen) = counting::largest_allocation(|| vec![1u8; 3 << 20]);
    assert!(seen >= 3 << 20, "{seen}");
    let mut bytes = sample("t", vec![]).encode();
    bytes[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    let (decoded, largest) = counting::largest_allocation(|| Record::decode(&bytes));
    assert_eq!(decoded, Err(DecodeError::Truncated));
    assert!(largest < 1 << 20, "{largest} bytes allocated");
}

#[test]
fn a_huge_declared_count_is_decoded_and_refused_without_allocating() {
    // The body is built right: with a count of 0 and the three counts
    // after it, it is a record.
    let whole = claiming_deps(0, &[0, 0, 0]);
    assert!(Record::decode(&whole).is_ok());
    // A vector of 2^60 dependencies (and of 2^32, and of u64::MAX), sealed
    // correctly: decoding reaches the count, finds the body ends, and
    // refuses it, having allocated no more than a real record needs.
    for count in [1 << 60, 1 << 32, u64::MAX] {
        let bytes = claiming_deps(count, &[0, 0, 0]);
        let (decoded, largest) = counting::largest_allocation(|| Record::decode(&bytes));
        assert_eq!(decoded, Err(DecodeError::BadBody), "count {count}");
        assert!(
            largest < 1 << 20,
            "count {count}: {largest} bytes allocated"
        );
    }
    // And a string that claims 2^60 bytes.
    let mut body = postcard::to_stdvec(&sample("t", vec![])).unwrap();
    let name_len = body[0] as usize;
    assert_eq!(&body[1..1 + name_len], b"pkg::integration");
    body.splice(0..1, varint(1 << 60));
    let bytes = sealed(&body);
    let (decoded, largest) = counting::largest_allocation(|| Record::decode(&bytes));
    assert_eq!(decoded, Err(DecodeError::BadBody));
    assert!(largest < 1 << 20, "{largest} bytes allocated");
}
