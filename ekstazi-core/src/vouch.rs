//! Whether a record filed in the history vouches for a test now, read
//! cheapest first.
//!
//! A test the current record does not vouch for has every distinct record
//! filed for it tried in turn (`history::Candidates`), and on a real
//! project most of them fail: the change that made the current record fail
//! is usually in them too. So a filed record is first judged by its
//! skeleton — outcome, toolchain, programs, and the chunks of executed
//! functions this run already found wanting — then by the other chunks its
//! long lists of executed functions are kept in, and only then by its body
//! — files, environment, short lists of functions. A chunk is content-addressed and shared by many records, and
//! whether every function in it is in a build does not depend on which
//! record holds it: it is decided once per chunk and build in a run, and
//! read once ([`Verdicts`]). Only a record that passes all of that is put
//! back together from its parts (each checked against its name when read)
//! and judged again by [`select::vouches`]: that last check alone decides a
//! skip, the earlier ones only rule out.

use crate::code::Build;
use crate::dep::Hash;
use crate::functions::FnId;
use crate::history::History;
use crate::record::{Outcome, Record};
use crate::select::{self, CodeNow, Present};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// What a run has learned of the history's chunks, for every test it
/// judges.
#[derive(Default)]
pub struct Verdicts {
    /// Per (chunk, build), whether every function of the chunk is in the
    /// build.
    holds: RwLock<HashMap<(Hash, Hash), bool>>,
    /// Chunks read, decoded. Records of different tests share many of
    /// them: ripgrep's records at one commit name 32 652 chunks, 19 182 of
    /// them distinct.
    read: RwLock<ReadChunks>,
}

#[derive(Default)]
struct ReadChunks {
    chunks: HashMap<Hash, Arc<[FnId]>>,
    ids: usize,
}

/// Function ids the chunks kept in memory may hold in all (64 MiB):
/// far above one commit's distinct chunks on ripgrep (~2.4 million ids).
const MAX_READ_IDS: usize = 8 << 20;

impl Verdicts {
    fn known(&self, chunk: &Hash, build: &Hash) -> Option<bool> {
        self.holds
            .read()
            .expect("verdicts lock")
            .get(&(*chunk, *build))
            .copied()
    }

    fn decide(&self, chunk: &Hash, build: &Build, ids: &[FnId]) -> bool {
        let holds = ids.iter().all(|id| build.has(id));
        self.holds
            .write()
            .expect("verdicts lock")
            .insert((*chunk, build.id), holds);
        holds
    }

    /// A chunk's functions: read from the history once per run.
    fn chunk(&self, history: &History, chunk: &Hash) -> Option<Arc<[FnId]>> {
        if let Some(ids) = self.read.read().expect("chunks lock").chunks.get(chunk) {
            return Some(ids.clone());
        }
        let ids: Arc<[FnId]> = history.chunk(chunk)?.into();
        let mut read = self.read.write().expect("chunks lock");
        if read.ids + ids.len() <= MAX_READ_IDS && !read.chunks.contains_key(chunk) {
            read.ids += ids.len();
            read.chunks.insert(*chunk, ids.clone());
        }
        Some(ids)
    }
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
    let skeleton = history.skeleton(id)?;
    let head = &skeleton.record;
    if head.binary != binary
        || head.test != test
        || head.outcome != Outcome::Passed
        || !head.global.changes(present.global).is_empty()
    {
        return None;
    }
    let chunks = &skeleton.chunks;
    let mut builds = Vec::with_capacity(chunks.len());
    for (dep, chunks) in head.code.iter().zip(chunks) {
        builds.push(match select::code_now(dep, present) {
            CodeNow::Gone if !chunks.is_empty() => return None,
            CodeNow::Build(build) => Some(build),
            CodeNow::Ran | CodeNow::Gone => None,
        });
    }
    let judged = || {
        chunks
            .iter()
            .zip(&builds)
            .filter_map(|(c, b)| Some((c, b.as_ref()?)))
    };
    // Most candidates end here: a chunk this run already found wanting.
    for (chunks, build) in judged() {
        if chunks
            .iter()
            .any(|chunk| verdicts.known(chunk, &build.id) == Some(false))
        {
            return None;
        }
    }
    // Then the chunks not judged yet, the first found wanting ending it:
    // before the body, so that a candidate that fails on both leaves a
    // verdict for the next (the records of one test at other commits share
    // most chunks; on ripgrep, with the body first, nearly every candidate
    // decoded it: `perf` found as many samples reading bodies as skeletons).
    for (chunks, build) in judged() {
        for chunk in chunks {
            if verdicts.known(chunk, &build.id).is_none()
                && !verdicts.decide(chunk, build, &verdicts.chunk(history, chunk)?)
            {
                return None;
            }
        }
    }
    // Then the body: files, environment, short lists of functions.
    let record = history.body(&skeleton.body)?.fill(head.clone())?;
    if !select::vouches(&record, present) {
        return None;
    }
    // Then the record whole.
    let mut functions = Vec::with_capacity(chunks.len());
    for chunks in chunks {
        let mut listed = Vec::new();
        for chunk in chunks {
            listed.extend_from_slice(&verdicts.chunk(history, chunk)?);
        }
        functions.push(listed);
    }
    let record = History::assemble(record, functions)?;
    select::vouches(&record, present).then_some(record)
}
