//! A record as its file in the state directory holds it.
//!
//! ```text
//! magic "EKZT" | format version | body length | zstd(body) | digest
//! magic "EKZW" | format version | body length | dictionary's name
//!              | zstd(body, with the dictionary) | digest
//! body: postcard (the record without its executed functions,
//!                 per code dependency its functions as an `FnSet`)
//! ```
//! Once the state holds enough records, new ones are compressed with a
//! dictionary trained from the first (`dicts`); a record whose dictionary
//! cannot be read does not decode ([`DecodeError::MissingDictionary`]).
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
use crate::storage::dicts::{self, Dicts};
use crate::storage::fn_sets::{FnSet, FnSets, base_key};
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 4] = b"EKZT";
const DICT_MAGIC: &[u8; 4] = b"EKZW";

#[derive(Serialize, Deserialize)]
struct Body {
    /// The record, its code dependencies' `functions` empty.
    record: Record,
    /// Per code dependency, its functions.
    sets: Vec<FnSet>,
}

/// Encodes a record for its file, writing links to its bases first, and
/// compressed with the state's dictionary when it has one.
pub(crate) fn encode(record: &Record, sets: &FnSets, dicts: &Dicts) -> Vec<u8> {
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
    if let Some(framed) = dicts.current().and_then(|dict| dicts::framed(&dict, &body)) {
        return seal(DICT_MAGIC, &framed);
    }
    dicts.offer(&body);
    seal(
        MAGIC,
        &zstd::bulk::compress(&body, 3).expect("compressing to memory cannot fail"),
    )
}

/// Decodes and checks a record file's bytes, its functions read from
/// their bases.
pub(crate) fn decode(bytes: &[u8], sets: &FnSets, dicts: &Dicts) -> Result<Record, DecodeError> {
    let body = body_of(bytes, dicts)?;
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

fn body_of(bytes: &[u8], dicts: &Dicts) -> Result<Body, DecodeError> {
    parsed(&unpacked(bytes, dicts)?)
}

/// A record file's body, its seal checked, decompressed within bounds.
fn unpacked(bytes: &[u8], dicts: &Dicts) -> Result<Vec<u8>, DecodeError> {
    if !bytes.starts_with(DICT_MAGIC) {
        return crate::files::sealed::unpack(open_raw(MAGIC, bytes)?, MAX_RECORD_BYTES)
            .ok_or(DecodeError::BadBody);
    }
    let (name, packed) =
        dicts::unframe(open_raw(DICT_MAGIC, bytes)?).ok_or(DecodeError::BadBody)?;
    let dict = dicts.get(name).ok_or(DecodeError::MissingDictionary)?;
    let limit = usize::try_from(MAX_RECORD_BYTES).map_err(|_| DecodeError::BadBody)?;
    dicts::decompress(&(*name, dict), packed, limit).ok_or(DecodeError::BadBody)
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
pub fn sizes(bytes: &[u8], dicts: &Dicts) -> Option<(usize, usize)> {
    let body = unpacked(bytes, dicts).ok()?;
    let sets = parsed(&body).ok()?.sets;
    Some((postcard::to_stdvec(&sets).ok()?.len(), body.len()))
}

/// The bases a record file names (for collecting the links no record
/// needs), if it is intact.
pub(crate) fn bases(bytes: &[u8], dicts: &Dicts) -> Option<Vec<Hash>> {
    let body = body_of(bytes, dicts).ok()?;
    Some(body.sets.into_iter().filter_map(|set| set.base).collect())
}

/// The dictionary a record file names, if any (for collecting the
/// dictionaries no record needs).
pub(crate) fn dictionary(bytes: &[u8]) -> Option<Hash> {
    dicts::unframe(open_raw(DICT_MAGIC, bytes).ok()?).map(|(name, _)| *name)
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
        let dicts = Dicts::new(StateDir::new(dir.path()), &dir.path().join(".dicts"));
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
        let bytes = encode(&record, &sets, &dicts);
        assert!(bytes.len() < 1000, "{} bytes", bytes.len());
        assert_eq!(decode(&bytes, &sets, &dicts), Ok(record.clone()));
        assert_eq!(bases(&bytes, &dicts).unwrap().len(), 1);
        refuses_every_cut_and_flip(&bytes, &sets, &dicts);
        // Its base gone, it does not decode, for another reader too.
        std::fs::remove_dir_all(dir.path().join(".sets")).unwrap();
        let fresh = FnSets::new(StateDir::new(dir.path()), &dir.path().join(".sets"));
        assert_eq!(
            decode(&bytes, &fresh, &dicts),
            Err(DecodeError::MissingBase)
        );
    }

    fn refuses_every_cut_and_flip(bytes: &[u8], sets: &FnSets, dicts: &Dicts) {
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut], sets, dicts).is_err());
        }
        for i in (0..bytes.len()).step_by(7) {
            let mut flipped = bytes.to_vec();
            flipped[i] ^= 0x10;
            assert!(decode(&flipped, sets, dicts).is_err(), "byte {i}");
        }
    }

    #[test]
    fn records_after_the_first_are_compressed_with_a_dictionary_trained_from_them() {
        let dir = tempfile::tempdir().unwrap();
        let state = || StateDir::new(dir.path());
        let sets = FnSets::new(state(), &dir.path().join(".sets"));
        let dicts = Dicts::training_after(state(), &dir.path().join(".dicts"), 64);
        // Records much alike, as a project's are: the same files, variables
        // and reasons, with names of their own.
        let record = |i: usize| {
            let mut record = sample();
            record.test = format!("tests::case_{i}");
            for k in 0..40 {
                record.ignored.push(crate::model::record::Ignored {
                    what: format!("/work/project/tests/fixtures/case_{}/input_{k}.txt", i % 7),
                    why: "a fixture the test wrote itself".into(),
                });
            }
            record
        };
        let plain: Vec<Vec<u8>> = (0..64).map(|i| encode(&record(i), &sets, &dicts)).collect();
        assert!(plain.iter().all(|b| b.starts_with(MAGIC)));
        let name = dicts.current_name().expect("trained after 64 records");
        let packed = encode(&record(100), &sets, &dicts);
        assert!(packed.starts_with(DICT_MAGIC));
        assert_eq!(dictionary(&packed), Some(name));
        let alone = plain.iter().map(Vec::len).max().unwrap();
        assert!(
            packed.len() * 3 < alone * 2,
            "{} against {alone}",
            packed.len()
        );
        // Read by another process, from the files alone.
        let again = || Dicts::new(state(), &dir.path().join(".dicts"));
        assert_eq!(decode(&packed, &sets, &again()), Ok(record(100)));
        assert_eq!(decode(&plain[3], &sets, &again()), Ok(record(3)));
        refuses_every_cut_and_flip(&packed, &sets, &again());
        // Its dictionary gone, or another under its name: no record.
        let path = dir
            .path()
            .join(".dicts")
            .join(blake3::Hash::from_bytes(name).to_hex().as_str());
        let sealed = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            decode(&packed, &sets, &again()),
            Err(DecodeError::MissingDictionary)
        );
        let mut forged = sealed.clone();
        let middle = forged.len() / 2;
        forged[middle] ^= 1;
        std::fs::write(&path, &forged).unwrap();
        assert_eq!(
            decode(&packed, &sets, &again()),
            Err(DecodeError::MissingDictionary)
        );
        std::fs::write(&path, &sealed).unwrap();
        assert_eq!(decode(&packed, &sets, &again()), Ok(record(100)));
    }
}
