//! A record as its file in the state directory holds it.
//!
//! ```text
//! magic "EKZT" | format version | body length | zstd(body) | digest
//! body: postcard (the record without its executed functions,
//!                 per code dependency its functions as an `FnSet`)
//! ```
//! The executed functions are sets over bases kept once per program
//! (`fn_sets`); the rest (dependencies, ignored accesses, their paths and
//! reasons) repeats within a record and compresses. The seal covers the
//! compressed bytes, so nothing is decompressed before it is checked, and
//! decompression is bounded by [`MAX_RECORD_BYTES`]. A record whose base
//! cannot be read does not decode ([`DecodeError::MissingBase`]): its test
//! runs. The history keeps records in its own form
//! (`history::objects`), from the decoded [`Record`].

use crate::files::sealed::{DecodeError, open_raw, seal};
use crate::model::dep::Hash;
use crate::model::record::{MAX_RECORD_BYTES, Record};
use crate::storage::fn_sets::{FnSet, FnSets, base_key};
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 4] = b"EKZT";

#[derive(Serialize, Deserialize)]
struct Body {
    /// The record, its code dependencies' `functions` empty.
    record: Record,
    /// Per code dependency, its functions.
    sets: Vec<FnSet>,
}

/// Encodes a record for its file, writing links to its bases first.
pub(crate) fn encode(record: &Record, sets: &FnSets) -> Vec<u8> {
    let mut record = record.clone();
    let binary = &record.binary;
    let sets = record
        .code
        .iter_mut()
        .map(|code| {
            sets.encode(
                &base_key(binary, &code.unit),
                std::mem::take(&mut code.functions),
            )
        })
        .collect();
    let body = postcard::to_stdvec(&Body { record, sets }).expect("a record always serialises");
    seal(
        MAGIC,
        &zstd::bulk::compress(&body, 3).expect("compressing to memory cannot fail"),
    )
}

/// Decodes and checks a record file's bytes, its functions read from
/// their bases.
pub(crate) fn decode(bytes: &[u8], sets: &FnSets) -> Result<Record, DecodeError> {
    let body = body_of(bytes)?;
    let Body {
        mut record,
        sets: functions,
    } = body;
    if functions.len() != record.code.len()
        || record.code.iter().any(|code| !code.functions.is_empty())
    {
        return Err(DecodeError::BadBody);
    }
    for (code, set) in record.code.iter_mut().zip(&functions) {
        code.functions = sets.decode(set).ok_or(DecodeError::MissingBase)?;
    }
    record.validate()?;
    Ok(record)
}

fn body_of(bytes: &[u8]) -> Result<Body, DecodeError> {
    parsed(&unpacked(bytes)?)
}

/// A record file's body, its seal checked, decompressed within bounds.
fn unpacked(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
    crate::files::sealed::unpack(open_raw(MAGIC, bytes)?, MAX_RECORD_BYTES)
        .ok_or(DecodeError::BadBody)
}

fn parsed(body: &[u8]) -> Result<Body, DecodeError> {
    let (body, rest) = postcard::take_from_bytes(body).map_err(|_| DecodeError::BadBody)?;
    if !rest.is_empty() {
        return Err(DecodeError::BadBody);
    }
    Ok(body)
}

/// Of a record file's bytes, how many its sets of functions take
/// encoded, and how many the whole body takes before compression (for
/// `eval state`), if it is intact.
pub fn sizes(bytes: &[u8]) -> Option<(usize, usize)> {
    let body = unpacked(bytes).ok()?;
    let sets = parsed(&body).ok()?.sets;
    Some((postcard::to_stdvec(&sets).ok()?.len(), body.len()))
}

/// The bases a record file names (for collecting the links no record
/// needs), if it is intact.
pub(crate) fn bases(bytes: &[u8]) -> Option<Vec<Hash>> {
    let body = body_of(bytes).ok()?;
    Some(body.sets.into_iter().filter_map(|set| set.base).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::contained::StateDir;
    use crate::model::record::tests_support::sample;

    #[test]
    fn a_record_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let sets = FnSets::new(StateDir::new(dir.path()), &dir.path().join(".sets"));
        let mut record = sample();
        record.code[0].functions = (0..500u32)
            .map(|i| {
                let mut id = [0u8; 8];
                id[..4].copy_from_slice(&blake3::hash(&i.to_le_bytes()).as_bytes()[..4]);
                id[4..].copy_from_slice(&i.to_le_bytes());
                id
            })
            .collect();
        record.code[0].functions.sort_unstable();
        let bytes = encode(&record, &sets);
        assert!(bytes.len() < 1000, "{} bytes", bytes.len());
        assert_eq!(decode(&bytes, &sets), Ok(record.clone()));
        assert_eq!(bases(&bytes).unwrap().len(), 1);
        // Every cut and every flipped bit is refused.
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut], &sets).is_err());
        }
        for i in (0..bytes.len()).step_by(7) {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x10;
            assert!(decode(&flipped, &sets).is_err(), "byte {i}");
        }
        // Its base gone, it does not decode, for another reader too.
        std::fs::remove_dir_all(dir.path().join(".sets")).unwrap();
        let fresh = FnSets::new(StateDir::new(dir.path()), &dir.path().join(".sets"));
        assert_eq!(decode(&bytes, &fresh), Err(DecodeError::MissingBase));
    }
}
