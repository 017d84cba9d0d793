//! The history: the records that held at each commit, so that a record
//! made on another branch, at a parent of a merge or before a revert can
//! vouch for a test now.
//!
//! A record is a witness: *given exactly these dependencies, this test
//! passed*. It stays true wherever its dependencies match, whatever commit
//! it was made at. So a run on a clean tree files, under `HEAD`'s commit id,
//! the record that held for each test it decided (the one it just wrote, or
//! the one that vouched for a skipped test), and later runs look among the
//! filed records for one that vouches for a test the current record does
//! not ([`Candidates`]).
//!
//! ```text
//! .history/
//!   commits/<commit id>        a manifest: per test, the record that held
//!                              (whole, or its changes over a base: `manifests`)
//!   packs/<digest>             the objects one filing wrote, with an index
//!                              (with copies of the base links spans name,
//!                              and the manifests' bases)
//!   .base                      the base the last manifest was written over
//!   .current                   which object each current record was filed as
//!   .swept                     how many packs the last sweep left
//! ```
//! Records are content-addressed: a test unaffected across a hundred
//! commits is one object. A record is kept as a skeleton, and its long
//! lists of executed functions as chunks shared between records
//! ([`objects::Skeleton`]). Each part is named by the digest its seal ends with, and
//! the skeleton names its chunks, so a record's id is its skeleton's name
//! ([`objects::record_id`]): reading a part checks it against its name, and nothing
//! hashes a record whole again (a Merkle tree, as git's trees are). What one run files goes
//! into one pack file, so the history is a few files per commit, not one
//! per object (each file costs a filesystem block). Manifests and objects
//! are sealed and zstd-compressed; anything that does not decode, is not
//! sealed with its name or names another test is *no record* (its test runs),
//! never an error. The history is bounded: [`History::prune`] keeps the
//! newest commits and drops the objects no kept commit names, rewriting a
//! pack when less than half of it is still named; it sweeps when a commit
//! went, or when the packs have doubled since the last sweep (runs filed
//! again under one commit leave a pack each). A run files mostly the
//! records it found: those the last filing filed are named by the object
//! it remembered for them ([`Known`]), not cut again.
//!
//! Here: the [`History`], its manifests and filing. In [`objects`]: how a
//! record is cut into named parts and put back. In `packs`: the pack files,
//! reading them and pruning. In [`candidates`]: which filed records may
//! vouch for a test.
//!
//! Invariant: the history keeps and finds records; whether one vouches is
//! decided in `selection::vouch`, never here. What it reads is untrusted:
//! every part is checked against its name before it is used.

use crate::model::dep::Hash;
use crate::model::record::{Outcome, Record};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

pub mod candidates;
mod manifests;
pub mod objects;
mod packs;

pub(crate) use manifests::ManifestView;
pub use manifests::{Entry, Manifest};

use candidates::Candidates;
use packs::{MAX_PACK_INDEX_BYTES, Packs};

/// Dictionaries read from the packs, by name (`None`: missing or damaged).
type DictsRead = HashMap<Hash, Option<Arc<[u8]>>>;

/// The records filed per commit, in a store.
#[derive(Clone, Debug)]
pub struct History {
    dir: PathBuf,
    /// Every path below `dir` is reached through it, never through a link.
    state: crate::files::contained::StateDir,
    /// Where each object is, read from the packs' indexes on first use and
    /// kept up to date by this process's writes. Behind a read-write lock:
    /// every object read looks it up, from every thread judging tests.
    packs: Arc<RwLock<Option<Packs>>>,
    /// The store's bases, when it has them: long lists of executed
    /// functions are cut by their order (`objects`).
    bases: Option<Arc<crate::storage::fn_sets::FnSets>>,
    /// The links spans name (`objects`), read from the packs once.
    chains: Arc<std::sync::Mutex<crate::storage::chains::Chains>>,
    /// The store's base of dependencies, when it has one: bodies keep
    /// their dependencies as sets over it (`objects`).
    dep_bases: Option<Arc<crate::storage::fn_sets::DepSets>>,
    /// The links bodies' dependencies name, read from the packs once.
    dep_chains: Arc<std::sync::Mutex<crate::storage::chains::Chains<crate::model::dep::Dep>>>,
    /// The store's dictionaries, when it has them: bodies are compressed
    /// with the current one (`objects`).
    dicts: Option<Arc<crate::storage::dicts::Dicts>>,
    /// The dictionaries bodies name, read from the packs once.
    dicts_read: Arc<std::sync::Mutex<DictsRead>>,
}

/// Where the number of packs the last sweep left is kept (a hint for this
/// store only: not exported).
pub(crate) const SWEPT: &str = ".swept";
/// Where the last filing left which object each current record it filed
/// is (see [`Known::Current`]; this store's only: not exported).
pub(crate) const CURRENT: &str = ".current";
const CURRENT_MAGIC: &[u8; 4] = b"EKZK";

/// A record to file under a commit, and what names its object already.
pub struct Filing<'a> {
    /// The test's binary key.
    pub binary: &'a str,
    /// The test's name within its binary.
    pub test: &'a str,
    /// The record's outcome, which the manifest's entry keeps.
    pub outcome: Outcome,
    /// The record itself, to cut into an object: needed only where `known`
    /// names no object this history holds ([`History::knows`]).
    pub record: Option<&'a Record>,
    /// The test ran at this commit (see [`Entry::ran`]).
    pub ran: bool,
    /// What names the record's object already, if anything.
    pub known: Known,
}

impl<'a> Filing<'a> {
    /// A record held whole.
    pub fn of(record: &'a Record, ran: bool, known: Known) -> Filing<'a> {
        Filing {
            binary: &record.binary,
            test: &record.test,
            outcome: record.outcome,
            record: Some(record),
            ran,
            known,
        }
    }
}

/// What is known of a record's object before it is cut: it names the
/// object only while this history holds it.
#[derive(Clone, Copy, Debug)]
pub enum Known {
    /// Nothing: the record is cut into an object.
    Nothing,
    /// It is this history's object `id` (a filed record that vouched).
    Filed(Hash),
    /// It is the current record whose file is sealed with this digest
    /// ([`crate::storage::store::Store::load_sealed`], [`crate::storage::store::Store::save`]):
    /// the same digest, the same bytes, the same record, which the last
    /// filing may have filed already.
    Current(Hash),
}

/// What [`History::prune`] removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// How many commits' manifests were removed.
    pub commits: usize,
    /// Objects and chunks removed from disk (a pack kept whole keeps its
    /// unnamed ones until it is rewritten).
    pub objects: usize,
}

/// A commit id as git prints it: 40 (SHA-1) or 64 (SHA-256) hex digits.
pub fn is_commit_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl History {
    /// The history at `dir`, reached from `dir` itself (see
    /// [`History::within`]).
    pub fn new(dir: &Path) -> History {
        History::within(crate::files::contained::StateDir::new(dir), dir)
    }

    /// The history at `dir`, inside the state directory `state` (which
    /// reaches `dir` without following a link).
    pub fn within(state: crate::files::contained::StateDir, dir: &Path) -> History {
        History {
            dir: dir.to_path_buf(),
            state,
            packs: Arc::default(),
            bases: None,
            chains: Arc::default(),
            dep_bases: None,
            dep_chains: Arc::default(),
            dicts: None,
            dicts_read: Arc::default(),
        }
    }

    /// This history, cutting the records it files by where their
    /// functions sit in `bases` and their dependencies in `deps`, and
    /// compressing their bodies with the current one of `dicts`
    /// (`objects`): the store's.
    pub fn cut_by(
        self,
        bases: Arc<crate::storage::fn_sets::FnSets>,
        deps: Arc<crate::storage::fn_sets::DepSets>,
        dicts: Arc<crate::storage::dicts::Dicts>,
    ) -> History {
        History {
            bases: Some(bases),
            dep_bases: Some(deps),
            dicts: Some(dicts),
            ..self
        }
    }

    /// The history's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn commits_dir(&self) -> PathBuf {
        self.dir.join("commits")
    }

    fn packs_dir(&self) -> PathBuf {
        self.dir.join("packs")
    }

    /// [`History::file_known`] of records nothing names yet: each
    /// `(record, ran here)`.
    #[cfg(test)]
    pub(crate) fn file(
        &self,
        commit: &str,
        records: &[(&Record, bool)],
        now_ms: u64,
    ) -> io::Result<()> {
        let filings: Vec<Filing<'_>> = records
            .iter()
            .map(|(record, ran)| Filing::of(record, *ran, Known::Nothing))
            .collect();
        self.file_known(commit, &filings, now_ms)
    }

    /// Files records under `commit`, merged into what the commit already
    /// holds (an earlier run at the same commit, a shard's), taking what is
    /// known of each record's object already (see [`Known`]). Objects are
    /// written before the manifest that names them.
    pub fn file_known(&self, commit: &str, filings: &[Filing<'_>], now_ms: u64) -> io::Result<()> {
        if !is_commit_id(commit) {
            return Err(io::Error::other(format!("`{commit}` is not a commit id")));
        }
        let mut entries: HashMap<(String, String), Entry> = self
            .manifest(commit)
            .map(Manifest::by_test)
            .unwrap_or_default();
        let ids = self.ids_of(filings)?;
        for (filing, id) in filings.iter().zip(ids) {
            entries.insert(
                (filing.binary.to_owned(), filing.test.to_owned()),
                Entry {
                    binary: filing.binary.to_owned(),
                    test: filing.test.to_owned(),
                    record: id,
                    outcome: filing.outcome,
                    ran: filing.ran,
                },
            );
        }
        let mut entries: Vec<Entry> = entries.into_values().collect();
        entries.sort_by(|a, b| (&a.binary, &a.test).cmp(&(&b.binary, &b.test)));
        self.put_manifest(&Manifest {
            commit: commit.to_owned(),
            filed_at_ms: now_ms,
            entries,
        })
    }

    /// Each record's object id: the one it is known by, while this history
    /// holds that object; else what cutting it gives (written when new).
    /// Remembers which current record was filed as which object, for the
    /// next filing: with most tests unaffected, a run files mostly the
    /// records it found, and cutting them again to name them was a fifth
    /// of a run's CPU time with nothing changed (just, `perf`).
    fn ids_of(&self, filings: &[Filing<'_>]) -> io::Result<Vec<Hash>> {
        let remembered = self.remembered_current();
        let known = self.held(&remembered, filings.iter().map(|filing| &filing.known));
        let to_cut: Vec<&Record> = filings
            .iter()
            .zip(&known)
            .filter(|(_, id)| id.is_none())
            .map(|(filing, _)| {
                filing.record.ok_or_else(|| {
                    io::Error::other(format!(
                        "the record of {} {} names no object of the history, and was not read",
                        filing.binary, filing.test
                    ))
                })
            })
            .collect::<io::Result<_>>()?;
        let mut cut_ids = self.put_records(&to_cut)?.into_iter();
        let ids: Vec<Hash> = known
            .into_iter()
            .map(|id| id.or_else(|| cut_ids.next()))
            .collect::<Option<_>>()
            .ok_or_else(|| io::Error::other("an id for every record cut"))?;
        let current: Vec<(Hash, Hash)> = filings
            .iter()
            .zip(&ids)
            .filter_map(|(filing, id)| match filing.known {
                Known::Current(digest) => Some((digest, *id)),
                _ => None,
            })
            .collect();
        // Only a shortcut for the next filing: lost, that one cuts them all.
        // Rewritten only when it changed: with nothing rerun, it has not.
        let unchanged = current.len() == remembered.len()
            && current
                .iter()
                .all(|(digest, id)| remembered.get(digest) == Some(id));
        if !unchanged {
            let _ = self.remember_current(current);
        }
        Ok(ids)
    }

    /// Whether each of `known` names an object this history holds: a
    /// record so known is filed without being read ([`Filing::record`]).
    pub fn knows(&self, known: &[Known]) -> Vec<bool> {
        self.held(&self.remembered_current(), known.iter())
            .iter()
            .map(Option::is_some)
            .collect()
    }

    /// The object each of `known` names, while this history holds it
    /// (`remembered`: [`History::remembered_current`]).
    fn held<'k>(
        &self,
        remembered: &HashMap<Hash, Hash>,
        known: impl Iterator<Item = &'k Known>,
    ) -> Vec<Option<Hash>> {
        let mut guard = self.packs.write().expect("pack index lock");
        let packs = guard.get_or_insert_with(|| self.read_packs());
        known
            .map(|known| {
                match known {
                    Known::Nothing => None,
                    Known::Filed(id) => Some(*id),
                    Known::Current(digest) => remembered.get(digest).copied(),
                }
                .filter(|id| packs.at.contains_key(id))
            })
            .collect()
    }

    /// Which object each current record (by the digest its file is sealed
    /// with) was filed as, by the last filing; empty when unreadable.
    fn remembered_current(&self) -> HashMap<Hash, Hash> {
        let Some(bytes) = self
            .state
            .read_bounded(&self.dir.join(CURRENT), MAX_PACK_INDEX_BYTES)
            .ok()
        else {
            return HashMap::new();
        };
        crate::files::sealed::open::<Vec<(Hash, Hash)>>(CURRENT_MAGIC, &bytes)
            .map(|pairs| pairs.into_iter().collect())
            .unwrap_or_default()
    }

    fn remember_current(&self, mut pairs: Vec<(Hash, Hash)>) -> io::Result<()> {
        pairs.sort_unstable();
        pairs.dedup();
        let body = postcard::to_stdvec(&pairs).map_err(io::Error::other)?;
        self.state.write_atomic(
            &self.dir.join(CURRENT),
            &crate::files::sealed::seal(CURRENT_MAGIC, &body),
        )
    }

    /// The filed records that may vouch for a test, from every intact
    /// manifest ([`Candidates`]). The manifests are read in parallel, each
    /// decoded in place and kept only as the passing records it names (as
    /// owned [`Manifest`]s, 100 commits' ~120 000 entries were a quarter of
    /// a million strings allocated and freed: ripgrep, `perf`).
    pub fn candidates(&self, head: Option<&str>, parents: &[String]) -> Candidates {
        use rayon::prelude::*;
        let filed: Vec<candidates::Filed> = self
            .commit_ids()
            .par_iter()
            .filter_map(|id| self.with_manifest(id, |view| candidates::Filed::of(&view)))
            .collect();
        Candidates::new(filed, head, parents)
    }

    /// The ids of the commits filed (intact or not), sorted.
    pub fn commit_ids(&self) -> Vec<String> {
        let Ok(Some(entries)) = self.state.read_dir(&self.commits_dir()) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = entries
            .into_iter()
            .filter_map(|e| e.name.into_string().ok())
            .filter(|name| is_commit_id(name))
            .collect();
        ids.sort();
        ids
    }

    /// Every intact manifest, newest filed first; damaged ones are left out
    /// (their commits hold no record).
    pub fn manifests(&self) -> Vec<Manifest> {
        self.manifests_and_bases()
            .into_iter()
            .map(|(manifest, _)| manifest)
            .collect()
    }

    /// [`History::manifests`], each with the base it is kept over, if any.
    pub(crate) fn manifests_and_bases(&self) -> Vec<(Manifest, Option<Hash>)> {
        use rayon::prelude::*;
        // In parallel: 100 commits' manifests are ~120 000 entries to
        // decompress and decode, a good part of what a history adds to an
        // analysis where few tests try it.
        let mut all: Vec<(Manifest, Option<Hash>)> = self
            .commit_ids()
            .par_iter()
            .filter_map(|id| self.with_manifest(id, |view| (view.to_owned(), view.base)))
            .collect();
        all.sort_by(|(a, _), (b, _)| {
            b.filed_at_ms
                .cmp(&a.filed_at_ms)
                .then(a.commit.cmp(&b.commit))
        });
        all
    }

    /// Bytes on disk: per commit, its manifest; and all objects (with their
    /// chunks) together.
    pub fn sizes(&self) -> (HashMap<String, u64>, u64) {
        let manifests = self
            .commit_ids()
            .into_iter()
            .filter_map(|id| {
                let len = self.state.file_len(&self.commits_dir().join(&id))?;
                Some((id, len))
            })
            .collect();
        let packs = self.packs_dir();
        let objects = self
            .state
            .read_dir(&packs)
            .ok()
            .flatten()
            .map(|entries| {
                entries
                    .iter()
                    .filter_map(|e| self.state.file_len(&packs.join(&e.name)))
                    .sum()
            })
            .unwrap_or(0);
        (manifests, objects)
    }
}

#[cfg(test)]
mod tests {
    use super::objects::{buckets, cut, record_id};
    use super::packs::{Loc, SWEEP_SLACK};
    use super::*;
    use crate::model::record::tests_support::sample;
    use std::fs;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

    #[test]
    fn filed_records_are_shared_and_merged_per_commit() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let record = sample();
        let mut other = sample();
        other.test = "other".into();
        history.file(A, &[(&record, true)], 1).unwrap();
        history.file(B, &[(&record, false)], 2).unwrap();
        history.file(B, &[(&other, true)], 3).unwrap();
        let b = history.manifest(B).unwrap();
        assert_eq!(b.entries.len(), 2, "a second run at B adds to it");
        assert_eq!(b.filed_at_ms, 3);
        let id = record_id(&record).unwrap();
        assert_eq!(history.object(&id), Some(record.clone()));
        let (_, objects) = history.sizes();
        assert!(objects > history.object_size(&id).unwrap());
        assert_eq!(
            fs::read_dir(history.packs_dir()).unwrap().count(),
            2,
            "one object per distinct record, one pack per filing that wrote one"
        );
        assert_eq!(
            history
                .manifests()
                .iter()
                .map(|m| m.commit.as_str())
                .collect::<Vec<_>>(),
            [B, A]
        );
        assert!(history.file("HEAD", &[(&record, true)], 4).is_err());
    }

    #[test]
    fn pruning_keeps_the_newest_commits_and_their_objects() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let mut old = sample();
        old.duration_us = 1;
        let new = sample();
        history.file(A, &[(&old, true)], 1).unwrap();
        history.file(B, &[(&new, true)], 2).unwrap();
        history.file(C, &[(&new, false)], 3).unwrap();
        let pruned = history.prune(2).unwrap();
        assert_eq!(
            pruned,
            Pruned {
                commits: 1,
                objects: 1
            }
        );
        assert!(history.manifest(A).is_none());
        assert!(history.object(&record_id(&old).unwrap()).is_none());
        assert!(history.object(&record_id(&new).unwrap()).is_some());
    }

    #[test]
    fn long_function_lists_are_shared_in_chunks_and_checked_whole() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let mut record = sample();
        record.code[0].functions = (0..2000u32)
            .map(|i| {
                let mut id = [0; 8];
                id.copy_from_slice(&blake3::hash(&i.to_le_bytes()).as_bytes()[..8]);
                id
            })
            .collect();
        record.code[0].functions.sort_unstable();
        let entries = |h: &History| h.read_packs().at.len();
        history.file(A, &[(&record, true)], 1).unwrap();
        let cut = buckets(2000);
        assert_eq!(cut, 16);
        assert_eq!(
            entries(&history),
            cut + 2,
            "the chunks, the body and the skeleton"
        );
        // A rerun after one function changed: one id out, another in.
        let mut rerun = record.clone();
        rerun.duration_us += 1;
        rerun.code[0].functions[0] = [0xff; 8];
        rerun.code[0].functions.sort_unstable();
        history.file(B, &[(&rerun, true)], 2).unwrap();
        assert!(
            entries(&history) <= cut + 2 + 2 + 1,
            "only the chunks that changed and the skeleton are new: the body is shared"
        );
        assert_eq!(
            history.object(&record_id(&record).unwrap()),
            Some(record.clone())
        );
        assert_eq!(
            history.object(&record_id(&rerun).unwrap()),
            Some(rerun.clone())
        );
        // Pruning A keeps the chunks B still shares, even from A's pack.
        let pruned = history.prune(1).unwrap();
        assert_eq!(pruned.commits, 1);
        assert_eq!(
            pruned.objects, 0,
            "A's pack is mostly B's chunks: kept whole, A's skeleton with it"
        );
        let reopened = History::new(dir.path());
        assert_eq!(
            reopened.object(&record_id(&rerun).unwrap()),
            Some(rerun.clone())
        );
        assert_eq!(reopened.commit_ids(), [B]);
        // Damaged packs make their records no record.
        for pack in fs::read_dir(reopened.packs_dir()).unwrap() {
            let path = pack.unwrap().path();
            let mut bytes = fs::read(&path).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            fs::write(&path, bytes).unwrap();
        }
        assert!(
            History::new(dir.path())
                .object(&record_id(&rerun).unwrap())
                .is_none()
        );
    }

    #[test]
    fn lists_kept_as_sets_over_their_base_outlive_it() {
        use crate::storage::fn_sets::{FnSets, base_key};
        let id = |i: u32| {
            let mut id = [0; 8];
            id.copy_from_slice(&blake3::hash(&i.to_le_bytes()).as_bytes()[..8]);
            id
        };
        // Two tests run the same 1 500 functions, then 500 of their own.
        let ran = |own: u32| {
            let mut ids: Vec<crate::model::code_dep::FnId> =
                (0..1500).chain(own..own + 500).map(id).collect();
            ids.sort_unstable();
            ids
        };
        let dir = tempfile::tempdir().unwrap();
        let bases = Arc::new(FnSets::new(
            crate::files::contained::StateDir::new(dir.path()),
            &dir.path().join(".sets"),
        ));
        // And read the same 40 files.
        let files: Vec<crate::model::dep::Dep> = (0..40)
            .map(|i| crate::model::dep::Dep {
                target: crate::model::dep::Target::Content(
                    crate::model::path::StoredPath::new(
                        crate::model::path::Anchor::Workspace,
                        format!("data/f{i:02}"),
                    )
                    .unwrap(),
                ),
                sum: crate::model::dep::Sum::Hash(*blake3::hash(&[i]).as_bytes()),
            })
            .collect();
        let mut first = sample();
        first.code[0].functions = ran(10_000);
        first.deps.extend(files.iter().cloned());
        first.sort_deps();
        let mut second = sample();
        second.test = "second".into();
        second.code[0].functions = ran(20_000);
        second.deps.extend(files.iter().cloned());
        second.sort_deps();
        // The store writes their files first, so that the base holds them:
        // a test that ran only what they share was recorded before them.
        let key = base_key(&first.binary, &first.code[0].unit);
        let mut shared: Vec<crate::model::code_dep::FnId> = (0..1500).map(id).collect();
        shared.sort_unstable();
        bases.encode(&key, shared);
        bases.encode(&key, first.code[0].functions.clone());
        bases.encode(&key, second.code[0].functions.clone());
        // The store's records trained a dictionary.
        let dicts = Arc::new(crate::storage::dicts::Dicts::training_after(
            crate::files::contained::StateDir::new(dir.path()),
            &dir.path().join(".dicts"),
            64,
        ));
        for i in 0..64 {
            let mut alike = sample();
            alike.test = format!("tests::case_{i}");
            dicts.offer(&postcard::to_stdvec(&alike).unwrap().repeat(8));
        }
        let dict = dicts.current_name().expect("a dictionary trained");
        let deps = Arc::new(crate::storage::fn_sets::DepSets::new(
            crate::files::contained::StateDir::new(dir.path()),
            &dir.path().join(".deps"),
        ));
        let history = History::new(&dir.path().join("history")).cut_by(bases, deps, dicts);
        let entries = |h: &History| h.read_packs().at.len();
        history.file(A, &[(&first, true)], 1).unwrap();
        let after_first = entries(&history);
        assert_eq!(
            after_first,
            1 + 2 + 2 + 1 + 1,
            "the set of positions 0–1999, the body, the skeleton, the two links of the base it needs, the dictionary the body was compressed with and the link of the dependencies' base"
        );
        history.file(A, &[(&second, true)], 2).unwrap();
        assert_eq!(
            entries(&history),
            after_first + 3,
            "the body is shared; the set, the skeleton and the base's third link are new"
        );
        // Put back whole, ascending, however they were cut.
        let manifest = history.manifest(A).unwrap();
        for (record, test) in [(&first, "reads_data"), (&second, "second")] {
            let entry = manifest.entries.iter().find(|e| e.test == test).unwrap();
            assert_eq!(history.object(&entry.record).as_ref(), Some(record));
        }
        // A sweep keeps the link a kept set needs, the chain before, and
        // the dictionary the set was compressed with.
        let entry = manifest
            .entries
            .iter()
            .find(|e| e.test == "second")
            .unwrap();
        let chunks: std::collections::HashSet<Hash> = history
            .skeleton(&entry.record)
            .unwrap()
            .chunks
            .into_iter()
            .flatten()
            .collect();
        let named = history.named_by_parts(&chunks);
        assert!(named.len() == 4 && named.contains(&dict), "{named:?}");
        assert_eq!(
            history.named_by_parts(&[entry.record].into()),
            [dict].into(),
            "the skeleton is compressed with the dictionary too"
        );
        let body = history.skeleton(&entry.record).unwrap().body;
        let named = history.named_by_parts(&[body].into());
        assert!(
            named.len() == 2 && named.contains(&dict),
            "and the dictionary its body was compressed with, and the link of its dependencies"
        );
        // The history's copies outlive the store's bases and dictionary.
        std::fs::remove_dir_all(dir.path().join(".sets")).unwrap();
        std::fs::remove_dir_all(dir.path().join(".deps")).unwrap();
        std::fs::remove_dir_all(dir.path().join(".dicts")).unwrap();
        history.file(B, &[(&first, true)], 3).unwrap();
        assert_eq!(history.prune(1).unwrap().commits, 1);
        let reopened = History::new(&dir.path().join("history"));
        let [entry] = &reopened.manifest(B).unwrap().entries[..] else {
            panic!("one entry")
        };
        assert_eq!(reopened.object(&entry.record).as_ref(), Some(&first));
        // Cut by first byte, the second's 500 own ids touch all 16 chunks.
        let plain = History::new(&dir.path().join("plain"));
        plain.file(A, &[(&first, true)], 1).unwrap();
        let before = entries(&plain);
        plain.file(A, &[(&second, true)], 2).unwrap();
        assert_eq!(entries(&plain), before + buckets(2000) + 1);
    }

    /// `n` records of tests `t0`, `t1`, …
    fn samples(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| {
                let mut r = sample();
                r.test = format!("t{i}");
                r
            })
            .collect()
    }

    #[test]
    fn pruning_rewrites_a_pack_mostly_dropped_and_removes_damaged_ones() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let records: Vec<Record> = samples(10);
        let all: Vec<(&Record, bool)> = records.iter().map(|r| (r, true)).collect();
        history.file(A, &all, 1).unwrap();
        history.file(B, &all[..1], 2).unwrap();
        fs::write(history.packs_dir().join("garbage"), b"not a pack").unwrap();
        let pruned = history.prune(1).unwrap();
        assert_eq!(pruned.commits, 1);
        assert_eq!(pruned.objects, 9);
        let packs: Vec<PathBuf> = fs::read_dir(history.packs_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(packs.len(), 1, "{packs:?}");
        let reopened = History::new(dir.path());
        assert_eq!(
            reopened.object(&record_id(&records[0]).unwrap()),
            Some(records[0].clone())
        );
        assert!(reopened.object(&record_id(&records[1]).unwrap()).is_none());
    }

    #[test]
    fn a_current_record_filed_before_is_named_by_what_was_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let record = sample();
        let id = record_id(&record).unwrap();
        // The digest the store sealed the current record's file with.
        let sealed = [7; 32];
        let filing = |record, known| Filing::of(record, false, known);
        history
            .file_known(A, &[filing(&record, Known::Current(sealed))], 1)
            .unwrap();
        assert_eq!(history.manifest(A).unwrap().entries[0].record, id);
        history
            .file_known(B, &[filing(&record, Known::Current(sealed))], 2)
            .unwrap();
        assert_eq!(history.manifest(B).unwrap().entries[0].record, id);
        // The digest stands for the record: what was filed for it is named
        // without cutting the record again. (A record under another
        // record's digest shows it; the store never pairs them so.)
        let mut other = sample();
        other.duration_us += 1;
        history
            .file_known(C, &[filing(&other, Known::Current(sealed))], 3)
            .unwrap();
        assert_eq!(history.manifest(C).unwrap().entries[0].record, id);
        // An object the history no longer holds names nothing: the record
        // is cut, and filed under its own id.
        let empty = tempfile::tempdir().unwrap();
        let gone = History::new(empty.path());
        for known in [Known::Current(sealed), Known::Filed(id)] {
            gone.file_known(A, &[filing(&other, known)], 1).unwrap();
            assert_eq!(
                gone.manifest(A).unwrap().entries[0].record,
                record_id(&other).unwrap()
            );
        }
        // A filed record that vouched is named by its id.
        history
            .file_known(A, &[filing(&other, Known::Filed(id))], 4)
            .unwrap();
        assert_eq!(history.manifest(A).unwrap().entries[0].record, id);
    }

    #[test]
    fn runs_filed_again_under_one_commit_do_not_pile_up_packs() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let tests: Vec<Record> = samples(4);
        let mut most = 0;
        let mut last = Vec::new();
        for run in 0..100u64 {
            // Every test ran again: a new duration, so a new record, which
            // replaces the one filed under the commit before.
            let records: Vec<Record> = tests
                .iter()
                .map(|r| Record {
                    duration_us: run + 1,
                    ..r.clone()
                })
                .collect();
            let filed: Vec<(&Record, bool)> = records.iter().map(|r| (r, true)).collect();
            history.file(A, &filed, run).unwrap();
            history
                .prune(crate::options::settings::DEFAULT_HISTORY_COMMITS)
                .unwrap();
            most = most.max(fs::read_dir(history.packs_dir()).unwrap().count());
            last = records;
        }
        assert!(most <= 2 * SWEEP_SLACK, "{most} packs for one commit");
        let reopened = History::new(dir.path());
        let manifest = reopened.manifest(A).unwrap();
        assert_eq!(manifest.entries.len(), 4);
        for record in &last {
            let id = record_id(record).unwrap();
            assert!(manifest.entries.iter().any(|e| e.record == id));
            assert_eq!(reopened.object(&id), Some(record.clone()));
        }
    }

    #[test]
    fn a_filed_record_whose_paths_escape_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        // Only decoding makes such a path: its constructor refuses it.
        let escaping: crate::model::path::StoredPath =
            postcard::from_bytes(&[0, 4, b'.', b'.', b'/', b'x']).unwrap();
        assert!(!escaping.is_valid());
        let mut in_body = sample();
        in_body.deps[0].target = crate::model::dep::Target::Content(escaping.clone());
        let mut in_skeleton = sample();
        in_skeleton.test = "other".into();
        in_skeleton.code[0].unit = crate::model::code_dep::CodeUnit::Program(escaping);
        let ids = history.put_records(&[&in_body, &in_skeleton]).unwrap();
        for id in &ids {
            assert!(history.object(id).is_none());
        }
        let skeleton = history.skeleton(&ids[0]).expect("its skeleton is sound");
        assert!(
            history
                .body(&skeleton.body)
                .unwrap()
                .fill(skeleton.record)
                .is_none()
        );
        assert!(history.skeleton(&ids[1]).is_none());
    }

    /// Where an object's packed bytes are: its pack's path, and place.
    fn locate(history: &History, id: &Hash) -> Option<(PathBuf, Loc)> {
        history.read_index();
        let guard = history.packs.read().unwrap();
        let packs = guard.as_ref()?;
        let loc = *packs.at.get(id)?;
        Some((packs.files[loc.pack as usize].clone(), loc))
    }

    #[test]
    fn damage_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let record = sample();
        history.file(A, &[(&record, true)], 1).unwrap();
        let id = record_id(&record).unwrap();
        // An object whose bytes were altered in its pack is no record.
        let (pack, loc) = locate(&history, &id).unwrap();
        let mut bytes = fs::read(&pack).unwrap();
        bytes[(loc.offset + u64::from(loc.len) / 2) as usize] ^= 0x40;
        fs::write(&pack, bytes).unwrap();
        assert!(History::new(dir.path()).object(&id).is_none());
        // An intact skeleton under another record's id is not that record,
        // nor is a chunk under another chunk's name.
        let mut other = sample();
        other.test = "other".into();
        other.code[0].functions = (0..300u16)
            .map(|i| [i.to_le_bytes()[0], i.to_le_bytes()[1], 0, 0, 0, 0, 0, 0])
            .collect();
        let planted = History::new(dir.path());
        let cut = cut(&other, &Default::default(), None, None).unwrap();
        // Parts: the body, then the chunks.
        let chunk = cut.parts[1].0;
        {
            let mut guard = planted.packs.write().unwrap();
            let packs = guard.get_or_insert_with(|| planted.read_packs());
            let forged = [
                ([9; 32], crate::files::sealed::pack(&cut.skeleton)),
                ([8; 32], crate::files::sealed::pack(&cut.parts[2].1)),
                ([7; 32], crate::files::sealed::pack(&cut.parts[0].1)),
            ];
            planted.write_pack(packs, &forged).unwrap();
        }
        assert!(planted.skeleton(&[9; 32]).is_none());
        assert!(planted.chunk(&[8; 32]).is_none());
        assert!(planted.body(&[7; 32]).is_none());
        assert!(planted.chunk(&chunk).is_none(), "never written");
        // A manifest filed under another commit's name is not that commit's.
        fs::copy(history.commits_dir().join(A), history.commits_dir().join(B)).unwrap();
        assert!(history.manifest(B).is_none());
        fs::write(history.commits_dir().join(A), b"garbage").unwrap();
        assert!(history.manifest(A).is_none());
        assert!(history.manifests().is_empty());
        // A planted symbolic link is not followed.
        fs::remove_file(history.commits_dir().join(C)).ok();
        std::os::unix::fs::symlink("/dev/zero", history.commits_dir().join(C)).unwrap();
        assert!(history.manifest(C).is_none());
    }

    #[test]
    fn a_large_manifest_reads_as_before_and_one_claiming_more_than_any_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        // 20 000 tests of long names: 2 MiB and more unpacked, so read as a
        // large one (checked as a stream, then unpacked).
        let entries: Vec<Entry> = (0..20_000u32)
            .map(|i| Entry {
                binary: "pkg::integration".into(),
                test: format!("tests::{}::{i:08}", "long_module_name".repeat(5)),
                record: *blake3::hash(&i.to_le_bytes()).as_bytes(),
                outcome: Outcome::Passed,
                ran: true,
            })
            .collect();
        let large = Manifest {
            commit: A.into(),
            filed_at_ms: 1,
            entries,
        };
        history.put_whole_manifest(&large).unwrap();
        let packed = fs::read(history.commits_dir().join(A)).unwrap();
        assert!(!crate::files::sealed::declares_small(&packed));
        assert_eq!(history.manifest(A).as_ref(), Some(&large));
        // Kept over a base, it reads the same: the base is the large one.
        history.put_manifest(&large).unwrap();
        assert!(history.base_of(A).is_some());
        assert_eq!(history.manifest(A).as_ref(), Some(&large));
        let candidates = history.candidates(None, &[]);
        let e = &large.entries[12_345];
        assert_eq!(
            candidates
                .of(&e.binary, &e.test)
                .map(|(id, _)| *id)
                .collect::<Vec<_>>(),
            [e.record]
        );
        // Sealed bytes whose header claims 33 MiB: refused from their
        // first ten bytes, the rest never unpacked.
        let mut claims = b"EKZH".to_vec();
        claims.extend_from_slice(&crate::files::sealed::FORMAT_VERSION.to_le_bytes());
        claims.extend_from_slice(&(33u32 << 20).to_le_bytes());
        claims.resize(4 << 20, 0);
        fs::write(
            history.commits_dir().join(B),
            crate::files::sealed::pack(&claims),
        )
        .unwrap();
        assert!(history.manifest(B).is_none());
        assert_eq!(history.manifests().len(), 1);
    }

    #[test]
    fn candidates_come_head_then_parents_then_the_newest_others_and_never_failures() {
        let manifest = |commit: &str, at, record: u8, outcome| Manifest {
            commit: commit.into(),
            filed_at_ms: at,
            entries: vec![Entry {
                binary: "b".into(),
                test: "t".into(),
                record: [record; 32],
                outcome,
                ran: true,
            }],
        };
        let d = "dddddddddddddddddddddddddddddddddddddddd";
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        for filed in [
            manifest(A, 4, 1, Outcome::Passed),
            manifest(B, 1, 2, Outcome::Passed),
            manifest(C, 3, 3, Outcome::Failed),
            manifest(d, 2, 2, Outcome::Passed),
        ] {
            history.put_manifest(&filed).unwrap();
        }
        let candidates = history.candidates(Some(C), &[B.to_owned(), A.to_owned()]);
        let found: Vec<(u8, String)> = candidates
            .of("b", "t")
            .map(|(id, vouch)| (id[0], vouch.to_string()))
            .collect();
        assert_eq!(
            found,
            [
                (2, "as at bbbbbbb, parent 1".to_owned()),
                (1, "as at aaaaaaa, parent 2".to_owned())
            ],
            "C's record failed; d's is B's object again"
        );
        assert_eq!(candidates.of("b", "other").count(), 0);
    }
}
