//! A record as its file in the state directory holds it.
//!
//! ```text
//! magic "EKZ2" | format version | body length | zstd(body) | digest
//! magic "EKZ3" | format version | body length | dictionary's name
//!              | zstd(body, with the dictionary) | digest
//! body: postcard (the record without its executed functions and its
//!                 dependencies, per code dependency its functions as
//!                 an `FnSet`), then its dependencies as a `DepSet`,
//!                 the sets' bitsets as they are (`Packing::Raw`)
//! ```
//! Files written before have the magics `EKZT` and `EKZW`, bitsets
//! compressed one by one, and dependencies inline or as a set; they are
//! read as they are.
//! Once the state holds enough records, new ones are compressed with a
//! dictionary trained from the first (`dicts`); a record whose dictionary
//! cannot be read does not decode ([`DecodeError::MissingDictionary`]).
//! The executed functions are sets over bases kept once per program, and
//! the dependencies a set over a base kept once per workspace
//! (`fn_sets`): on coreutils, 4 903 records named 6 550 distinct
//! dependencies 225 000 times, and with their checksums they were five
//! sixths of the compressed records. The rest (ignored accesses, their
//! paths and reasons) repeats within a record and compresses. Records
//! written before dependencies had a base hold them inline, and are read
//! as they are. The seal covers the
//! compressed bytes, so nothing is decompressed before it is checked, and
//! decompression is bounded by [`MAX_RECORD_BYTES`]. A record whose base
//! cannot be read does not decode ([`DecodeError::MissingBase`]): its test
//! runs. The history keeps records in its own form
//! (`history::objects`), from the decoded [`Record`].

use crate::files::sealed::{DecodeError, open_raw, seal};
use crate::model::dep::Hash;
use crate::model::record::{MAX_RECORD_BYTES, Record};
use crate::storage::dicts::{self, Dicts};
use crate::storage::fn_sets::{DEPS_KEY, DepSet, DepSets, FnSet, FnSets, Packing, base_key};
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 4] = b"EKZ2";
const DICT_MAGIC: &[u8; 4] = b"EKZ3";
/// Magics of files whose sets' bitsets are compressed one by one.
const ZSTD_SETS_MAGIC: &[u8; 4] = b"EKZT";
const ZSTD_SETS_DICT_MAGIC: &[u8; 4] = b"EKZW";

#[derive(Serialize, Deserialize)]
struct Body {
    /// The record, its code dependencies' `functions` empty.
    record: Record,
    /// Per code dependency, its functions.
    sets: Vec<FnSet>,
}

/// Where a record file's sets are kept: executed functions' bases and
/// dependencies' base.
#[derive(Clone, Copy)]
pub(crate) struct Bases<'a> {
    pub(crate) functions: &'a FnSets,
    pub(crate) deps: &'a DepSets,
}

/// Encodes a record for its file, writing links to its bases first, and
/// compressed with the state's dictionary when it has one.
pub(crate) fn encode(record: &Record, bases: Bases<'_>, dicts: &Dicts) -> Vec<u8> {
    let mut record = record.clone();
    record.sort_deps();
    record.deps.dedup();
    let deps = bases
        .deps
        .encode_packed(DEPS_KEY, std::mem::take(&mut record.deps), Packing::Raw);
    let sets = bases.functions;
    let binary = &record.binary;
    let sets = record
        .code
        .iter_mut()
        .map(|code| {
            sets.encode_packed(
                &base_key(binary, &code.unit),
                std::mem::take(&mut code.functions),
                Packing::Raw,
            )
        })
        .collect();
    let mut body = postcard::to_stdvec(&Body { record, sets }).expect("a record always serialises");
    postcard::to_io(&deps, &mut body).expect("a set always serialises");
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
pub(crate) fn decode(bytes: &[u8], bases: Bases<'_>, dicts: &Dicts) -> Result<Record, DecodeError> {
    let (body, deps, packing) = body_of(bytes, dicts)?;
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
        code.functions = bases
            .functions
            .decode_packed(set, packing)
            .ok_or(DecodeError::MissingBase)?;
    }
    if let Some(deps) = deps {
        if !record.deps.is_empty() {
            return Err(DecodeError::BadBody);
        }
        record.deps = bases
            .deps
            .decode_packed(&deps, packing)
            .ok_or(DecodeError::MissingBase)?;
    }
    record.validate()?;
    Ok(record)
}

/// A record file's body, the dependencies' set after it, and how the
/// sets' bitsets are kept.
type Parts = (Body, Option<DepSet>, Packing);

fn body_of(bytes: &[u8], dicts: &Dicts) -> Result<Parts, DecodeError> {
    let (body, packing) = unpacked(bytes, dicts)?;
    let (body, deps) = parsed(&body)?;
    // Written with its bitsets as they are, a record always has its
    // dependencies as a set.
    if packing == Packing::Raw && deps.is_none() {
        return Err(DecodeError::BadBody);
    }
    Ok((body, deps, packing))
}

/// A record file's body, its seal checked, decompressed within bounds,
/// and how its sets' bitsets are kept (by its magic).
fn unpacked(bytes: &[u8], dicts: &Dicts) -> Result<(Vec<u8>, Packing), DecodeError> {
    let layouts = [
        (MAGIC, DICT_MAGIC, Packing::Raw),
        (ZSTD_SETS_MAGIC, ZSTD_SETS_DICT_MAGIC, Packing::Zstd),
    ];
    for (plain, framed, packing) in layouts {
        if bytes.starts_with(plain) {
            let body = crate::files::sealed::unpack(open_raw(plain, bytes)?, MAX_RECORD_BYTES)
                .ok_or(DecodeError::BadBody)?;
            return Ok((body, packing));
        }
        if bytes.starts_with(framed) {
            let (name, packed) =
                dicts::unframe(open_raw(framed, bytes)?).ok_or(DecodeError::BadBody)?;
            let dict = dicts.get(name).ok_or(DecodeError::MissingDictionary)?;
            let limit = usize::try_from(MAX_RECORD_BYTES).map_err(|_| DecodeError::BadBody)?;
            let body =
                dicts::decompress(&(*name, dict), packed, limit).ok_or(DecodeError::BadBody)?;
            return Ok((body, packing));
        }
    }
    // Not one of ours: the error opening it as the newest says why.
    Err(open_raw(MAGIC, bytes).err().unwrap_or(DecodeError::BadBody))
}

/// The body, and the dependencies' set after it (none in a record
/// written before they had a base: its dependencies are inline).
fn parsed(body: &[u8]) -> Result<(Body, Option<DepSet>), DecodeError> {
    let (body, rest) = postcard::take_from_bytes(body).map_err(|_| DecodeError::BadBody)?;
    if rest.is_empty() {
        return Ok((body, None));
    }
    let (deps, rest) = postcard::take_from_bytes(rest).map_err(|_| DecodeError::BadBody)?;
    if !rest.is_empty() {
        return Err(DecodeError::BadBody);
    }
    Ok((body, Some(deps)))
}

/// Of a record file's bytes, how many its sets of functions take
/// encoded, how many its set of dependencies, and how many the whole body
/// takes before compression (for `eval state`), if it is intact.
pub fn sizes(bytes: &[u8], dicts: &Dicts) -> Option<(usize, usize, usize)> {
    let (body, _) = unpacked(bytes, dicts).ok()?;
    let (parsed, deps) = parsed(&body).ok()?;
    let deps = match deps {
        Some(deps) => postcard::to_stdvec(&deps).ok()?.len(),
        None => 0,
    };
    Some((
        postcard::to_stdvec(&parsed.sets).ok()?.len(),
        deps,
        body.len(),
    ))
}

/// The bases a record file names, of its functions and of its
/// dependencies (for collecting the links no record needs), if it is
/// intact.
pub(crate) fn bases(bytes: &[u8], dicts: &Dicts) -> Option<(Vec<Hash>, Option<Hash>)> {
    let (body, deps, _) = body_of(bytes, dicts).ok()?;
    Some((
        body.sets.into_iter().filter_map(|set| set.base).collect(),
        deps.and_then(|deps| deps.base),
    ))
}

/// The dictionary a record file names, if any (for collecting the
/// dictionaries no record needs).
pub(crate) fn dictionary(bytes: &[u8]) -> Option<Hash> {
    let framed = open_raw(DICT_MAGIC, bytes)
        .or_else(|_| open_raw(ZSTD_SETS_DICT_MAGIC, bytes))
        .ok()?;
    dicts::unframe(framed).map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::contained::StateDir;
    use crate::model::record::tests_support::sample;

    /// Bases in `dir`, as a store keeps them.
    struct Kept {
        functions: FnSets,
        deps: DepSets,
    }

    impl Kept {
        fn in_dir(dir: &std::path::Path) -> Kept {
            Kept {
                functions: FnSets::new(StateDir::new(dir), &dir.join(".sets")),
                deps: DepSets::new(StateDir::new(dir), &dir.join(".deps")),
            }
        }

        fn bases(&self) -> Bases<'_> {
            Bases {
                functions: &self.functions,
                deps: &self.deps,
            }
        }
    }

    #[test]
    fn a_record_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let kept = Kept::in_dir(dir.path());
        let sets = kept.bases();
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
        record.sort_deps();
        let bytes = encode(&record, sets, &dicts);
        assert!(bytes.len() < 1000, "{} bytes", bytes.len());
        assert_eq!(decode(&bytes, sets, &dicts), Ok(record.clone()));
        assert_eq!(bases(&bytes, &dicts).unwrap().0.len(), 1);
        refuses_every_cut_and_flip(&bytes, sets, &dicts);
        // Its base gone, it does not decode, for another reader too.
        std::fs::remove_dir_all(dir.path().join(".sets")).unwrap();
        let fresh = Kept::in_dir(dir.path());
        assert_eq!(
            decode(&bytes, fresh.bases(), &dicts),
            Err(DecodeError::MissingBase)
        );
    }

    #[test]
    fn dependencies_are_kept_once_against_a_base_records_share() {
        use crate::model::dep::{Dep, Sum, Target};
        use crate::model::path::{Anchor, StoredPath};
        let dir = tempfile::tempdir().unwrap();
        let kept = Kept::in_dir(dir.path());
        let dicts = Dicts::new(StateDir::new(dir.path()), &dir.path().join(".dicts"));
        let dep = |i: u32| Dep {
            target: Target::Content(
                StoredPath::new(Anchor::Workspace, format!("data/f{i}")).unwrap(),
            ),
            sum: Sum::Hash(*blake3::hash(&i.to_le_bytes()).as_bytes()),
        };
        let record = |deps: std::ops::Range<u32>| {
            let mut record = sample();
            // Made in any order, kept in one.
            record.deps.extend(deps.rev().map(dep));
            record
        };
        let first = encode(&record(0..60), kept.bases(), &dicts);
        let second = encode(&record(1..61), kept.bases(), &dicts);
        // Sixty checksums are 1 920 bytes alone: each record names its
        // own from the base instead.
        assert!(second.len() < 600, "{} bytes", second.len());
        let again = Kept::in_dir(dir.path());
        let mut sorted = record(1..61);
        sorted.sort_deps();
        assert_eq!(decode(&second, again.bases(), &dicts), Ok(sorted));
        let (_, dep_base) = bases(&first, &dicts).unwrap();
        assert!(dep_base.is_some());
        refuses_every_cut_and_flip(&second, again.bases(), &dicts);
        // A record of the old layout, dependencies inline, reads as it is.
        let mut old = record(0..3);
        old.code.clear();
        let body = postcard::to_stdvec(&Body {
            record: old.clone(),
            sets: Vec::new(),
        })
        .unwrap();
        let inline = seal(ZSTD_SETS_MAGIC, &zstd::bulk::compress(&body, 3).unwrap());
        assert_eq!(decode(&inline, again.bases(), &dicts), Ok(old.clone()));
        // Under the newest magics, a record always has its dependencies'
        // set.
        let unset = seal(MAGIC, &zstd::bulk::compress(&body, 3).unwrap());
        assert_eq!(
            decode(&unset, again.bases(), &dicts),
            Err(DecodeError::BadBody)
        );
        // Written with bitsets compressed one by one (the magics before),
        // a record reads as it was.
        let mut with_deps = old;
        with_deps.deps = record(0..60).deps;
        with_deps.sort_deps();
        let mut bare = with_deps.clone();
        let set = again.deps.encode(DEPS_KEY, std::mem::take(&mut bare.deps));
        let mut zstd_sets = postcard::to_stdvec(&Body {
            record: bare,
            sets: Vec::new(),
        })
        .unwrap();
        postcard::to_io(&set, &mut zstd_sets).unwrap();
        let before = seal(
            ZSTD_SETS_MAGIC,
            &zstd::bulk::compress(&zstd_sets, 3).unwrap(),
        );
        assert_eq!(decode(&before, again.bases(), &dicts), Ok(with_deps));
        // Dependencies both inline and in a set: not ours.
        let mut both = body.clone();
        postcard::to_io(&DepSet::default(), &mut both).unwrap();
        let both = seal(MAGIC, &zstd::bulk::compress(&both, 3).unwrap());
        assert_eq!(
            decode(&both, again.bases(), &dicts),
            Err(DecodeError::BadBody)
        );
        // The base gone, or another base's link under its name: the
        // record does not decode, and its test runs.
        let link = dir.path().join(".deps").join(
            blake3::Hash::from_bytes(dep_base.unwrap())
                .to_hex()
                .as_str(),
        );
        let sealed = std::fs::read(&link).unwrap();
        let (_, forged) = crate::storage::chains::seal_link(None, &[dep(7)]).unwrap();
        std::fs::write(&link, &forged).unwrap();
        assert_eq!(
            decode(&second, Kept::in_dir(dir.path()).bases(), &dicts),
            Err(DecodeError::MissingBase)
        );
        // A link of functions is never read as one of dependencies.
        let (_, of_functions) = crate::storage::chains::seal_link(None, &[[7u8; 8]]).unwrap();
        std::fs::write(&link, &of_functions).unwrap();
        assert_eq!(
            decode(&second, Kept::in_dir(dir.path()).bases(), &dicts),
            Err(DecodeError::MissingBase)
        );
        std::fs::remove_file(&link).unwrap();
        assert_eq!(
            decode(&second, Kept::in_dir(dir.path()).bases(), &dicts),
            Err(DecodeError::MissingBase)
        );
        std::fs::write(&link, &sealed).unwrap();
        assert!(decode(&second, Kept::in_dir(dir.path()).bases(), &dicts).is_ok());
    }

    fn refuses_every_cut_and_flip(bytes: &[u8], sets: Bases<'_>, dicts: &Dicts) {
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
        let kept = Kept::in_dir(dir.path());
        let sets = kept.bases();
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
        let plain: Vec<Vec<u8>> = (0..64).map(|i| encode(&record(i), sets, &dicts)).collect();
        assert!(plain.iter().all(|b| b.starts_with(MAGIC)));
        let name = dicts.current_name().expect("trained after 64 records");
        let packed = encode(&record(100), sets, &dicts);
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
        assert_eq!(decode(&packed, sets, &again()), Ok(record(100)));
        assert_eq!(decode(&plain[3], sets, &again()), Ok(record(3)));
        refuses_every_cut_and_flip(&packed, sets, &again());
        // Its dictionary gone, or another under its name: no record.
        let path = dir
            .path()
            .join(".dicts")
            .join(blake3::Hash::from_bytes(name).to_hex().as_str());
        let sealed = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            decode(&packed, sets, &again()),
            Err(DecodeError::MissingDictionary)
        );
        let mut forged = sealed.clone();
        let middle = forged.len() / 2;
        forged[middle] ^= 1;
        std::fs::write(&path, &forged).unwrap();
        assert_eq!(
            decode(&packed, sets, &again()),
            Err(DecodeError::MissingDictionary)
        );
        std::fs::write(&path, &sealed).unwrap();
        assert_eq!(decode(&packed, sets, &again()), Ok(record(100)));
    }
}
