//! Whether a record filed in the history vouches for a test now, read
//! cheapest first.
//!
//! A test the current record does not vouch for has every distinct record
//! filed for it tried in turn (`history::Candidates`), and on a real
//! project most of them fail: the change that made the current record fail
//! is usually in them too. So a filed record is first judged by its
//! skeleton — the global fingerprint, files, environment, programs — and
//! only then by the chunks its long lists of executed functions are kept
//! in. A chunk is content-addressed and shared by many records, and
//! whether every function in it is in a build does not depend on which
//! record holds it: it is decided once per chunk and build in a run
//! ([`Verdicts`]). Only a record that passes all of that is put back
//! together from the parts read (each read once), checked against its id,
//! and judged again by [`select::vouches`]: that last check alone decides a
//! skip, the earlier ones only rule out.

use crate::dep::Hash;
use crate::functions::FnId;
use crate::history::History;
use crate::record::Record;
use crate::select::{self, CodeNow, Present};
use std::collections::HashMap;
use std::sync::Mutex;

/// Per (chunk, build), whether every function of the chunk is in the build.
#[derive(Default)]
pub struct Verdicts {
    chunks: Mutex<HashMap<(Hash, Hash), bool>>,
}

/// The record `id` filed in `history`, if it is a record of `binary`'s
/// `test` and vouches for it now.
pub fn filed_vouches(
    history: &History,
    id: &Hash,
    binary: &str,
    test: &str,
    present: &Present<'_>,
    verdicts: &Verdicts,
) -> Option<Record> {
    let (skeleton, chunks) = history.parts(id)?;
    if skeleton.binary != binary || skeleton.test != test || !select::vouches(&skeleton, present) {
        return None;
    }
    // First the verdicts: a chunk whose verdict this run already knows is
    // not read, and the first that does not hold ends it (most candidates
    // end here). What is read for a verdict is kept for putting the record
    // back together.
    let mut read: Vec<Vec<Option<Vec<FnId>>>> = Vec::with_capacity(chunks.len());
    for (dep, chunks) in skeleton.code.iter().zip(&chunks) {
        let build = match select::code_now(dep, present) {
            CodeNow::Gone if !chunks.is_empty() => return None,
            CodeNow::Build(build) => Some(build),
            CodeNow::Ran | CodeNow::Gone => None,
        };
        let mut kept = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            let Some(build) = &build else {
                kept.push(None);
                continue;
            };
            let key = (*chunk, build.id);
            let known = verdicts
                .chunks
                .lock()
                .expect("verdicts lock")
                .get(&key)
                .copied();
            match known {
                Some(false) => return None,
                Some(true) => kept.push(None),
                None => {
                    let ids = history.chunk(chunk);
                    let holds = ids
                        .as_ref()
                        .is_some_and(|ids| ids.iter().all(|id| build.has(id)));
                    verdicts
                        .chunks
                        .lock()
                        .expect("verdicts lock")
                        .insert(key, holds);
                    if !holds {
                        return None;
                    }
                    kept.push(ids);
                }
            }
        }
        read.push(kept);
    }
    // Then the record whole, each chunk read at most once in all.
    let mut functions = Vec::with_capacity(chunks.len());
    for (chunks, kept) in chunks.iter().zip(read) {
        let mut listed = Vec::new();
        for (chunk, ids) in chunks.iter().zip(kept) {
            listed.extend(match ids {
                Some(ids) => ids,
                None => history.chunk(chunk)?,
            });
        }
        functions.push(listed);
    }
    let record = History::assemble(id, skeleton, functions)?;
    select::vouches(&record, present).then_some(record)
}
