//! Whether a record filed in the history vouches for a test now, read
//! cheapest first.
//!
//! A test the current record does not vouch for has every distinct record
//! filed for it tried in turn (`storage::history::candidates::Candidates`), and on a real
//! project most of them fail: the change that made the current record fail
//! is usually in them too. So a filed record is first judged by its
//! skeleton — outcome, toolchain, programs, and the chunks of executed
//! functions this run already found wanting — then by the other chunks its
//! long lists of executed functions are kept in, and only then by its body
//! — files, environment, short lists of functions. A chunk is content-addressed and shared by many records, and
//! whether every function in it is in a build does not depend on which
//! record holds it: it is decided once per chunk and build in a run, and
//! read once ([`Verdicts`]). A chunk's verdict is exactly what
//! `changed_code::holds` decides for those ids against that build, and the body is
//! judged by [`select::vouches`] itself, the rule a current record is
//! judged by: so a record that passes both is one `select::vouches` would
//! pass whole, and it is put back together from its parts (each checked
//! against its name when read) without being judged again.

use crate::digests::program::Build;
use crate::model::code_dep::FnId;
use crate::model::dep::Hash;
use crate::model::record::{Outcome, Record};
use crate::selection::select::{self, CodeNow, Present};
use crate::storage::history::History;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// What a run has learned of the history's chunks, for every test it
/// judges.
#[derive(Default)]
pub struct Verdicts {
    /// Per (chunk, build), whether every function of the chunk is in the
    /// build.
    holds: RwLock<HashMap<(Hash, Hash), bool, foldhash::fast::RandomState>>,
    /// Chunks read, decoded. Records of different tests share many of
    /// them: ripgrep's records at one commit name 32 652 chunks, 19 182 of
    /// them distinct.
    read: RwLock<ReadChunks>,
}

#[derive(Default)]
struct ReadChunks {
    chunks: HashMap<Hash, Arc<[FnId]>, foldhash::fast::RandomState>,
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

    /// Whether every function of `chunk` is in `build`: the verdict this
    /// run reached, or reached now; `None` if the chunk cannot be read.
    fn holds(&self, history: &History, chunk: &Hash, build: &Build) -> Option<bool> {
        match self.known(chunk, &build.id) {
            Some(known) => Some(known),
            None => Some(self.decide(chunk, build, &self.chunk(history, chunk)?)),
        }
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
    // Then every chunk, the first found wanting ending it: before the body,
    // so that a candidate that fails on both leaves a verdict for the next
    // (the records of one test at other commits share most chunks; on
    // ripgrep, with the body first, nearly every candidate decoded it:
    // `perf` found as many samples reading bodies as skeletons). A verdict
    // is read again here, not taken from the pass above: another thread may
    // have found a chunk wanting since, and skipping what is known then
    // skipped a chunk known to fail (6 tests in a replay of ripgrep's 100
    // commits).
    for (chunks, build) in judged() {
        for chunk in chunks {
            if !verdicts.holds(history, chunk, build)? {
                return None;
            }
        }
    }
    // Then the body: files, environment, short lists of functions, and
    // the programs' uninstrumented functions. With every chunk of the long
    // lists found to hold above, that is `select::vouches` of the record
    // whole; judging the whole again cost a fifth of the history's share
    // of an analysis at a branch switch (ripgrep, `perf`), every one of
    // its functions looked up twice.
    let record = history.body(&skeleton.body)?.fill(head.clone())?;
    if !select::vouches(&record, present) {
        return None;
    }
    let mut functions = Vec::with_capacity(chunks.len());
    for chunks in chunks {
        let mut listed = Vec::new();
        for chunk in chunks {
            listed.extend_from_slice(&verdicts.chunk(history, chunk)?);
        }
        functions.push(listed);
    }
    History::assemble(record, functions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::environment::Environment;
    use crate::digests::checksum::Checksums;
    use crate::digests::fingerprint::Snapshot;
    use crate::digests::program::Build;
    use crate::model::code_dep::CodeUnit;
    use crate::model::dep::Sum;
    use crate::model::path::Anchors;
    use crate::model::record::tests_support::sample;
    use crate::options::config::NetworkPolicy;
    use crate::storage::snapshots::Snapshots;
    use crate::storage::store::Store;
    use std::path::Path;

    /// `n` functions `f0000`…, each fingerprint 1, but 2 for those in
    /// `changed`.
    fn snapshot(n: usize, changed: &[usize]) -> Snapshot {
        let names: Vec<String> = (0..n).map(|i| format!("f{i:04}")).collect();
        let functions: Vec<(&str, u8)> = names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.as_str(), if changed.contains(&i) { 2 } else { 1 }))
            .collect();
        crate::digests::program::tests_support::snapshot(&functions, 0)
    }

    /// A passing record of a test that executed every function of a
    /// build of `n` functions, filed in a history; the same functions kept
    /// as the build `[10; 32]`; and what judging the record takes.
    struct Filed {
        _dir: tempfile::TempDir,
        state: std::path::PathBuf,
        history: History,
        snapshots: Snapshots,
        checksums: Checksums,
        env: Environment,
        network: NetworkPolicy,
        record: Record,
        id: Hash,
        /// The functions' ids, by index.
        ids: Vec<FnId>,
    }

    fn filed(n: usize) -> Filed {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(".ekstazi");
        let ran = snapshot(n, &[]);
        Store::new(&state).save_snapshot(&[10; 32], &ran).unwrap();
        let snapshots = Snapshots::new(Store::new(&state));
        let build = Build::new([10; 32], Arc::new(ran.clone()));
        snapshots.keep_uninstrumented(&build).unwrap();
        let ids: Vec<FnId> = (0..n)
            .map(|i| {
                let name = ran.names.get(i).unwrap();
                let stable = crate::digests::fingerprint::stable_hash(&name);
                snapshots
                    .table()
                    .intern(&name, stable, &ran.fps[i])
                    .unwrap()
            })
            .collect();
        let mut functions = ids.clone();
        functions.sort_unstable();
        let mut record = sample();
        record.deps.clear();
        record.code[0].unit = CodeUnit::TestBinary;
        // Another build than any judged against: its chunks are judged.
        record.code[0].build = [9; 32];
        record.code[0].uninstrumented = build.uninstrumented_id();
        record.code[0].functions = functions;
        record.code.truncate(1);
        let history = History::new(&dir.path().join("history"));
        history
            .file(&"a".repeat(40), &[(&record, true)], 1)
            .unwrap();
        let id = crate::storage::history::objects::record_id(&record).unwrap();
        let checksums = Checksums::new(Anchors::new(dir.path(), &dir.path().join("t"), None));
        let env = Environment::new([], checksums.anchors(), None, Path::new("/nowhere"));
        Filed {
            state,
            history,
            snapshots,
            env,
            checksums,
            network: NetworkPolicy::default(),
            record,
            id,
            ids,
            _dir: dir,
        }
    }

    impl Filed {
        /// Keeps a build with the functions in `changed` edited, as `id`.
        fn build(&self, id: Hash, changed: &[usize]) {
            let snapshot = snapshot(self.ids.len(), changed);
            Store::new(&self.state)
                .save_snapshot(&id, &snapshot)
                .unwrap();
        }

        /// The filed record, if it vouches for its test with the test
        /// binary now the build `binary`.
        fn judge(&self, binary: Hash, verdicts: &Verdicts) -> Option<Record> {
            let present = Present {
                global: &self.record.global,
                binary: &Sum::Hash(binary),
                binary_path: Path::new("/nonexistent"),
                checksums: &self.checksums,
                snapshots: &self.snapshots,
                env: &self.env,
                network: &self.network,
                always_run_external: false,
                forced: false,
            };
            filed_vouches(
                &self.history,
                &self.id,
                &self.record.binary,
                &self.record.test,
                &present,
                verdicts,
            )
        }
    }

    #[test]
    fn a_filed_record_vouches_only_when_every_chunk_of_its_functions_holds() {
        // A test that executed 300 functions: its list is kept in chunks,
        // judged chunk by chunk and not again whole, so one function changed
        // in one chunk must be enough to rule the record out, whatever the
        // verdicts already reached against another build.
        let filed = filed(300);
        filed.build([11; 32], &[200]);
        let verdicts = Verdicts::default();
        assert!(filed.judge([11; 32], &verdicts).is_none(), "f0200 changed");
        let whole = filed
            .judge([10; 32], &verdicts)
            .expect("the same functions");
        assert_eq!(whole, filed.record);
        assert!(
            filed.judge([11; 32], &verdicts).is_none(),
            "from the verdicts"
        );
        assert!(filed.judge([11; 32], &Verdicts::default()).is_none());
    }

    #[test]
    fn a_chunk_found_wanting_by_another_thread_is_not_taken_to_hold() {
        // Tests are judged in parallel and share the verdicts. A candidate
        // that found no chunk known to fail, then judges the chunks one by
        // one, must still stop at a chunk another thread found wanting in
        // between: taking "known" for "holds" let a record vouch whose
        // changed function was in that chunk. The changed function here is
        // in the last chunk, the one threads judging in step reach last.
        let filed = filed(4096);
        let last = (0..filed.ids.len()).max_by_key(|&i| filed.ids[i]).unwrap();
        filed.build([11; 32], &[last]);
        let threads = 4;
        for _ in 0..200 {
            let verdicts = Verdicts::default();
            let start = std::sync::Barrier::new(threads);
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| {
                        start.wait();
                        assert!(
                            filed.judge([11; 32], &verdicts).is_none(),
                            "a changed function's record vouched"
                        );
                    });
                }
            });
        }
    }
}
