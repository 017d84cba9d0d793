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
//! ([`Verdicts`]). Only a record that passes all of that is read whole,
//! checked against its id, and judged again by [`select::vouches`]: that
//! last check alone decides a skip, the earlier ones only rule out.

use crate::dep::Hash;
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
    for (dep, chunks) in skeleton.code.iter().zip(&chunks) {
        if chunks.is_empty() {
            continue;
        }
        let build = match select::code_now(dep, present) {
            CodeNow::Ran => continue,
            CodeNow::Gone => return None,
            CodeNow::Build(build) => build,
        };
        for chunk in chunks {
            let key = (*chunk, build.id);
            let known = verdicts
                .chunks
                .lock()
                .expect("verdicts lock")
                .get(&key)
                .copied();
            let holds = known.unwrap_or_else(|| {
                let holds = history
                    .chunk(chunk)
                    .is_some_and(|ids| ids.iter().all(|id| build.has(id)));
                verdicts
                    .chunks
                    .lock()
                    .expect("verdicts lock")
                    .insert(key, holds);
                holds
            });
            if !holds {
                return None;
            }
        }
    }
    let record = history.object(id)?;
    (record.binary == binary && record.test == test && select::vouches(&record, present))
        .then_some(record)
}
