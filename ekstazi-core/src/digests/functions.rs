//! The function table: every function a record names, by a content id.
//!
//! A record names each function its test executed by a [`FnId`] (defined
//! with the record model, in `model::code_dep`), a 64-bit
//! digest of the function's stable name (its name without crate hashes,
//! [`crate::digests::fingerprint::stable_hash`]) and fingerprint, never by its place
//! in one build's list. So a record stays byte-for-byte the same across
//! rebuilds that leave its functions alone — a dependency bumped to a new
//! version changes the crate hash in every symbol name of the crates built
//! on it, and no id — and the history can keep it once, content-addressed,
//! for every commit it holds at. The table maps ids back to names and
//! fingerprints, for reasons people read; whether a function is still there
//! is decided from the build alone (`digests::program::Build`), never from the table.
//!
//! ```text
//! .functions/<digest>     a segment: sealed (id, name, fingerprint) entries
//! ```
//! The table is the union of its segments. New entries are written as a
//! segment *before* any record that names them, so a record never names an
//! id the table cannot resolve (an interrupted run leaves a small segment,
//! never a dangling record). Ids are content, not positions: two tables
//! merge by union (CI shards, imported histories), and a compaction rewrites
//! segments without touching a record.
//!
//! Two different functions with one id (a 64-bit collision, or a segment
//! that lies) are never trusted: the id resolves to nothing, and every test
//! that names it runs.

use crate::digests::fingerprint::Fp;
use crate::files::contained::StateDir;
use crate::model::code_dep::FnId;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// The id of the function whose stable name hashes to `stable`
/// ([`crate::digests::fingerprint::stable_hash`]), with fingerprint `fp`. Functions
/// that differ only in crate hashes and not in code share it, as they share
/// references to them in fingerprints (`fingerprint::image`'s tokens).
pub fn id_of(stable: u64, fp: &Fp) -> FnId {
    let mut h = blake3::Hasher::new();
    h.update(&stable.to_le_bytes());
    h.update(fp);
    let mut id = [0; 8];
    id.copy_from_slice(&h.finalize().as_bytes()[..8]);
    id
}

/// What an id stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// A mangled name it had (the first interned, for reasons people read).
    pub name: Arc<str>,
    /// The hash of its stable name.
    pub stable: u64,
    /// Its fingerprint.
    pub fp: Fp,
}

/// Segments are small (ripgrep's whole table is 1.4 MB in 50 of them),
/// but a file larger than this is not one of ours. Planted in a state
/// handed over as is, a segment is unpacked only once its window, the
/// length it claims and its seal are checked as a stream
/// ([`crate::files::sealed::unpack_sealed`]): a forged one costs reading
/// no more than this, never holding it.
const MAX_SEGMENT_BYTES: u64 = 256 << 20;
/// Segments that list each entry's id ([`Entry`]), as they were written
/// before: read, no longer written (but by tests of lying segments,
/// `write_segment_as_is`).
const MAGIC: &[u8; 4] = b"EKZF";
/// Segments whose entries are (name, stable name's hash, fingerprint):
/// an id is those two hashed ([`id_of`]), so it is computed when read,
/// not kept. On coreutils the ids were 0.6 MB of a 4.3 MB table,
/// incompressible, and a table read checked each against its hash anyway.
const UNLISTED_MAGIC: &[u8; 4] = b"EKZ5";

#[derive(Serialize, Deserialize)]
struct Segment<N = String> {
    entries: Vec<(FnId, N, u64, Fp)>,
}

#[derive(Serialize, Deserialize)]
struct Unlisted<N = String> {
    entries: Vec<(N, u64, Fp)>,
}

/// A segment's entry: id, mangled name, stable name's hash, fingerprint.
type Entry = (FnId, String, u64, Fp);

/// A name read past without being kept: postcard hands the bytes over
/// borrowed, so nothing is allocated for it.
struct Unnamed;

impl<'de> Deserialize<'de> for Unnamed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Skip;
        impl serde::de::Visitor<'_> for Skip {
            type Value = Unnamed;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a function name")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Unnamed, E> {
                Ok(Unnamed)
            }
        }
        deserializer.deserialize_str(Skip)
    }
}

/// Two functions were given one id: neither may vouch for a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("two functions share the id {}", hex(.0))]
pub struct Collision(pub FnId);

fn hex(id: &FnId) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The table of a store (or of a history being imported).
pub struct FunctionTable {
    dir: PathBuf,
    /// Reaches `dir`'s files without following a link.
    state: StateDir,
    /// Read from `dir` when first needed: a run in which nothing changed
    /// resolves no id, and coreutils' table takes 18 MB in memory.
    inner: OnceLock<RwLock<Inner>>,
    /// See [`FunctionTable::epoch`].
    epoch: AtomicU64,
}

/// Epochs are unique across the tables of a process.
fn next_epoch() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What the table holds of a function before its name is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    stable: u64,
    fp: Fp,
}

#[derive(Default)]
struct Inner {
    known: HashMap<FnId, Known>,
    /// The names of `known`'s ids, read from the segments when a name is
    /// first asked for ([`Inner::read_names`]). Interning, which is all a
    /// recording does, needs none: on coreutils the names are 12 MB of the
    /// table's 18 MB in memory.
    names: Option<HashMap<FnId, Arc<str>>>,
    /// Ids two segments (or a segment and a new function) disagree on.
    colliding: HashSet<FnId>,
    /// Entries interned since the last [`FunctionTable::flush`].
    pending: Vec<Entry>,
    /// The segment files read or written, for compaction.
    segments: Vec<PathBuf>,
    /// Segment files that could not be trusted.
    damaged: usize,
}

impl FunctionTable {
    /// The table whose segments are in `dir` (none yet is an empty table).
    pub fn load(dir: &Path) -> FunctionTable {
        FunctionTable::load_within(StateDir::new(dir), dir)
    }

    /// The table whose segments are in `dir`, inside the state directory
    /// `state`.
    pub fn load_within(state: StateDir, dir: &Path) -> FunctionTable {
        FunctionTable {
            dir: dir.to_path_buf(),
            state,
            inner: OnceLock::new(),
            epoch: AtomicU64::new(next_epoch()),
        }
    }

    /// The table's contents, its segments read on first use. Segments are
    /// only ever added before a record names them, or replaced by
    /// compaction under the state's lock, so reading them later than the
    /// table was opened sees what reading them then would have, or more.
    fn inner(&self) -> &RwLock<Inner> {
        self.read_first(false)
    }

    /// [`inner`](Self::inner), the segments read with their names if this
    /// is the first use: a first use that asks for a name would otherwise
    /// read every segment twice.
    fn read_first(&self, named: bool) -> &RwLock<Inner> {
        self.inner
            .get_or_init(|| RwLock::new(Inner::read(&self.state, &self.dir, named)))
    }

    /// A number that differs between tables and changes whenever an id
    /// this table accepted from [`intern`](Self::intern) may no longer be
    /// accepted (a collision found, entries dropped, another table
    /// absorbed): what a caller learnt from `intern` holds while the epoch
    /// it read before asking is still the table's.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn invalidate(&self) {
        self.epoch.store(next_epoch(), Ordering::Release);
    }

    /// The function an id stands for; `None` for an id the table does not
    /// hold (or holds twice).
    pub fn get(&self, id: &FnId) -> Option<Function> {
        let inner = self.named();
        if inner.colliding.contains(id) {
            return None;
        }
        let known = inner.known.get(id)?;
        // A name no segment holds any more (another process compacted the
        // table since it was read) resolves to nothing: its tests run.
        let name = inner.names.as_ref()?.get(id)?.clone();
        Some(Function {
            name,
            stable: known.stable,
            fp: known.fp,
        })
    }

    /// The table's contents with the names read.
    fn named(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        {
            let inner = self.read_first(true).read().expect("function table lock");
            if inner.names.is_some() {
                return inner;
            }
        }
        self.inner()
            .write()
            .expect("function table lock")
            .read_names(&self.state);
        self.inner().read().expect("function table lock")
    }

    /// The id of a function (`stable`: its stable name's hash), added to
    /// the table (in memory, until [`flush`](Self::flush)) if it is new.
    pub fn intern(&self, name: &str, stable: u64, fp: &Fp) -> Result<FnId, Collision> {
        self.intern_as(id_of(stable, fp), name, stable, fp)
    }

    /// [`intern`](Self::intern) with the id already worked out: `id` must
    /// be `id_of(stable, fp)`.
    pub fn intern_as(&self, id: FnId, name: &str, stable: u64, fp: &Fp) -> Result<FnId, Collision> {
        self.intern_named_by(id, || Some(name.to_owned()), stable, fp)
    }

    /// [`intern_as`](Self::intern_as), with the name asked for only when
    /// the id is new to the table: a snapshot keeps its names compressed.
    /// A name that cannot be had is taken as a collision: the id is not
    /// interned, and its tests run.
    pub fn intern_named_by(
        &self,
        id: FnId,
        name: impl FnOnce() -> Option<String>,
        stable: u64,
        fp: &Fp,
    ) -> Result<FnId, Collision> {
        debug_assert_eq!(id, id_of(stable, fp));
        {
            let inner = self.inner().read().expect("function table lock");
            if inner.colliding.contains(&id) {
                return Err(Collision(id));
            }
            if let Some(known) = inner.known.get(&id) {
                return if known.stable == stable && known.fp == *fp {
                    Ok(id)
                } else {
                    Err(Collision(id))
                };
            }
        }
        let name = name().ok_or(Collision(id))?;
        let mut inner = self.inner().write().expect("function table lock");
        let new = !inner.known.contains_key(&id);
        if !inner.add(id, &name, stable, *fp) {
            self.invalidate();
            return Err(Collision(id));
        }
        if new {
            inner.pending.push((id, name, stable, *fp));
        }
        Ok(id)
    }

    /// Whether entries were interned that no segment holds yet.
    pub fn has_pending(&self) -> bool {
        !self
            .inner()
            .read()
            .expect("function table lock")
            .pending
            .is_empty()
    }

    /// Writes the interned entries as a new segment. A record that names
    /// them may be written once this returned `Ok`.
    pub fn flush(&self) -> io::Result<()> {
        let mut inner = self.inner().write().expect("function table lock");
        if inner.pending.is_empty() {
            return Ok(());
        }
        let entries = std::mem::take(&mut inner.pending);
        match write_segment(&self.state, &self.dir, entries) {
            Ok(path) => {
                inner.segments.push(path);
                Ok(())
            }
            Err((e, entries)) => {
                inner.pending = entries;
                Err(e)
            }
        }
    }

    /// How many functions the table holds, and in how many segment files.
    pub fn len(&self) -> (usize, usize) {
        let inner = self.inner().read().expect("function table lock");
        (inner.known.len(), inner.segments.len())
    }

    /// Every id the table resolves, sorted.
    pub fn ids(&self) -> Vec<FnId> {
        let inner = self.inner().read().expect("function table lock");
        let mut ids: Vec<FnId> = inner
            .known
            .keys()
            .filter(|id| !inner.colliding.contains(*id))
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Whether the table holds no function.
    pub fn is_empty(&self) -> bool {
        self.len().0 == 0
    }

    /// Rewrites the table as one segment holding the entries `keep` accepts
    /// (all of them with `None`), and removes the segments it replaces.
    /// Colliding ids are left out: they resolve to nothing either way.
    pub fn compact(&self, keep: Option<&HashSet<FnId>>) -> io::Result<()> {
        let mut inner = self.inner().write().expect("function table lock");
        inner.read_names(&self.state);
        let Inner {
            known,
            names,
            colliding,
            pending,
            segments,
            ..
        } = &mut *inner;
        let names = names.get_or_insert_default();
        // An id whose name no segment holds is left out, as a colliding one:
        // it resolves to nothing either way.
        let mut entries: Vec<Entry> = known
            .iter()
            .filter(|(id, _)| !colliding.contains(*id) && keep.is_none_or(|k| k.contains(*id)))
            .filter_map(|(id, f)| Some((*id, names.get(id)?.to_string(), f.stable, f.fp)))
            .collect();
        entries.sort_unstable_by_key(|e| e.0);
        let old = std::mem::take(segments);
        let written = if entries.is_empty() {
            None
        } else {
            Some(write_segment(&self.state, &self.dir, entries).map_err(|(e, _)| e)?)
        };
        for path in old {
            if Some(&path) != written.as_ref() {
                let _ = self.state.remove(&path);
            }
        }
        if let Some(keep) = keep {
            known.retain(|id, _| keep.contains(id));
            names.retain(|id, _| keep.contains(id));
        }
        self.invalidate();
        pending.clear();
        segments.extend(written);
        Ok(())
    }

    /// Adds every entry of `other` (an imported or merged table); returns
    /// the ids the two tables disagree on, which now resolve to nothing.
    pub fn absorb(&self, other: &FunctionTable) -> Vec<FnId> {
        let theirs = other.named();
        let mut ours = self.inner().write().expect("function table lock");
        let mut disagreed = Vec::new();
        let no_names = HashMap::new();
        let their_names = theirs.names.as_ref().unwrap_or(&no_names);
        for (id, f) in &theirs.known {
            let Some(name) = their_names.get(id) else {
                continue;
            };
            let new = !ours.known.contains_key(id);
            if !ours.add(*id, name, f.stable, f.fp) {
                disagreed.push(*id);
            } else if new {
                ours.pending.push((*id, name.to_string(), f.stable, f.fp));
            }
        }
        for id in &theirs.colliding {
            ours.colliding.insert(*id);
        }
        self.invalidate();
        disagreed
    }

    /// The number of segment files that could not be read or trusted.
    pub fn damaged(&self) -> usize {
        self.inner().read().expect("function table lock").damaged
    }
}

impl Inner {
    /// Every segment in `dir`, with the names or without them (`named`);
    /// one that cannot be read or trusted is counted as damaged.
    fn read(state: &StateDir, dir: &Path, named: bool) -> Inner {
        let mut inner = Inner {
            names: named.then(HashMap::new),
            ..Inner::default()
        };
        if let Ok(Some(entries)) = state.read_dir(dir) {
            let mut files: Vec<PathBuf> = entries
                .iter()
                .filter(|e| !e.name.as_encoded_bytes().starts_with(b"."))
                .map(|e| dir.join(&e.name))
                .collect();
            files.sort();
            for file in files {
                let read = if named {
                    read_segment::<String>(state, &file).map(|segment| {
                        for (id, name, stable, fp) in segment.entries {
                            inner.add(id, &name, stable, fp);
                        }
                    })
                } else {
                    read_segment::<Unnamed>(state, &file).map(|segment| {
                        for (id, Unnamed, stable, fp) in segment.entries {
                            inner.add(id, "", stable, fp);
                        }
                    })
                };
                if read.is_none() {
                    inner.damaged += 1;
                }
                inner.segments.push(file);
            }
        }
        inner
    }

    /// Reads the names of the known ids from the segments read or written,
    /// once: the first name a segment gives an id, as when the table was
    /// read whole, and a pending entry's for what no segment holds yet.
    fn read_names(&mut self, state: &StateDir) {
        if self.names.is_some() {
            return;
        }
        let mut names = HashMap::with_capacity(self.known.len());
        for file in &self.segments {
            let Some(segment) = read_segment::<String>(state, file) else {
                continue;
            };
            for (id, name, stable, fp) in segment.entries {
                if self.known.get(&id) == Some(&Known { stable, fp }) {
                    names.entry(id).or_insert_with(|| Arc::from(name));
                }
            }
        }
        for (id, name, ..) in &self.pending {
            names.entry(*id).or_insert_with(|| Arc::from(name.as_str()));
        }
        self.names = Some(names);
    }

    /// Adds an entry; `false` when the id already stands for another
    /// function (then it stands for none).
    fn add(&mut self, id: FnId, name: &str, stable: u64, fp: Fp) -> bool {
        if id_of(stable, &fp) != id {
            // A segment that does not hash to its ids is not trusted for
            // this id, whatever else holds it.
            self.colliding.insert(id);
            return false;
        }
        if self.colliding.contains(&id) {
            return false;
        }
        match self.known.get(&id) {
            // Another mangled name of the same function (a crate hash
            // changed): one entry stands for both.
            Some(f) if f.stable == stable && f.fp == fp => true,
            Some(_) => {
                self.colliding.insert(id);
                false
            }
            None => {
                self.known.insert(id, Known { stable, fp });
                if let Some(names) = &mut self.names {
                    names.insert(id, Arc::from(name));
                }
                true
            }
        }
    }
}

fn read_segment<N: serde::de::DeserializeOwned>(
    state: &StateDir,
    path: &Path,
) -> Option<Segment<N>> {
    let packed = state.read_bounded(path, MAX_SEGMENT_BYTES).ok()?;
    let unpack = |magic| crate::files::sealed::unpack_sealed(magic, &packed, MAX_SEGMENT_BYTES);
    let bytes = unpack(UNLISTED_MAGIC).or_else(|_| unpack(MAGIC)).ok()?;
    if let Ok(unlisted) = crate::files::sealed::open::<Unlisted<N>>(UNLISTED_MAGIC, &bytes) {
        let entries = unlisted
            .entries
            .into_iter()
            .map(|(name, stable, fp)| (id_of(stable, &fp), name, stable, fp))
            .collect();
        return Some(Segment { entries });
    }
    crate::files::sealed::open(MAGIC, &bytes).ok()
}

/// Writes a segment named by its content; gives the entries back on error.
#[allow(clippy::type_complexity)]
fn write_segment(
    state: &StateDir,
    dir: &Path,
    entries: Vec<Entry>,
) -> Result<PathBuf, (io::Error, Vec<Entry>)> {
    // Every entry the table holds hashes to its id (`Inner::add`), so the
    // id is left out and computed again when read.
    let unlisted = Unlisted {
        entries: entries
            .iter()
            .map(|(_, name, stable, fp)| (name.as_str(), *stable, *fp))
            .collect(),
    };
    let body = postcard::to_stdvec(&unlisted).expect("a segment always serialises");
    let sealed = crate::files::sealed::seal(UNLISTED_MAGIC, &body);
    write_sealed(state, dir, &sealed).map_err(|e| (e, entries))
}

/// Writes a sealed segment, named by its content.
fn write_sealed(state: &StateDir, dir: &Path, sealed: &[u8]) -> io::Result<PathBuf> {
    let name = blake3::hash(sealed).to_hex();
    let path = dir.join(&name[..32]);
    state.write_atomic(&path, &crate::files::sealed::pack_kept(sealed))?;
    Ok(path)
}

/// Writes a segment as it is given, true or not, its ids listed as
/// segments did before: for tests of what a lying segment does elsewhere.
#[cfg(test)]
pub(crate) fn write_segment_as_is(dir: &Path, entries: Vec<Entry>) {
    let body = postcard::to_stdvec(&Segment { entries }).expect("a segment always serialises");
    let sealed = crate::files::sealed::seal(MAGIC, &body);
    write_sealed(&StateDir::new(dir), dir, &sealed).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_changes_when_an_accepted_id_may_stop_being_accepted() {
        let (x, y) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let ours = FunctionTable::load(x.path());
        let theirs = FunctionTable::load(y.path());
        assert_ne!(ours.epoch(), theirs.epoch(), "tables are told apart");
        let before = ours.epoch();
        let a = ours.intern("a", 1, &[1; 16]).unwrap();
        ours.flush().unwrap();
        assert_eq!(ours.epoch(), before, "interning and flushing keep it");
        // Absorbing a table that disagrees, and compacting, change it.
        write_segment_as_is(y.path(), vec![(a, "evil".into(), 7, [1; 16])]);
        let lying = FunctionTable::load(y.path());
        ours.absorb(&lying);
        assert_ne!(ours.epoch(), before);
        assert!(ours.intern("a", 1, &[1; 16]).is_err());
        let absorbed = ours.epoch();
        ours.compact(None).unwrap();
        assert_ne!(ours.epoch(), absorbed);
    }

    #[test]
    fn interned_functions_survive_a_reload_and_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let table = FunctionTable::load(dir.path());
        let a = table.intern("a", 1, &[1; 16]).unwrap();
        let b = table.intern("b", 2, &[2; 16]).unwrap();
        assert_eq!(
            table.intern("a", 1, &[1; 16]),
            Ok(a),
            "interning is idempotent"
        );
        assert_ne!(
            a,
            table.intern("a", 1, &[3; 16]).unwrap(),
            "the fingerprint is part of the id"
        );
        assert_eq!(
            table.intern("a renamed (another crate hash)", 1, &[1; 16]),
            Ok(a),
            "a function whose name changed only in crate hashes keeps its id"
        );
        table.flush().unwrap();
        let again = FunctionTable::load(dir.path());
        assert_eq!(again.get(&a).unwrap().fp, [1; 16]);
        assert_eq!(&*again.get(&b).unwrap().name, "b");
        again.compact(Some(&HashSet::from([a]))).unwrap();
        let compacted = FunctionTable::load(dir.path());
        assert_eq!(compacted.len(), (1, 1));
        assert!(compacted.get(&a).is_some() && compacted.get(&b).is_none());
    }

    #[test]
    fn names_are_read_when_first_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let table = FunctionTable::load(dir.path());
        let a = table.intern("a", 1, &[1; 16]).unwrap();
        table.flush().unwrap();
        let lean = FunctionTable::load(dir.path());
        assert_eq!(lean.intern("a", 1, &[1; 16]), Ok(a));
        let b = lean.intern("b", 2, &[2; 16]).unwrap();
        assert!(
            lean.inner().read().unwrap().names.is_none(),
            "interning reads no name"
        );
        assert_eq!(&*lean.get(&b).unwrap().name, "b", "a pending entry's");
        assert_eq!(&*lean.get(&a).unwrap().name, "a", "a segment's");
        // Segments gone since the table was read (another process
        // compacted it): what they named resolves to nothing.
        let gone = FunctionTable::load(dir.path());
        assert_eq!(gone.intern("a", 1, &[1; 16]), Ok(a));
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        assert!(gone.get(&a).is_none());
    }

    #[test]
    fn a_lying_or_damaged_segment_resolves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = id_of(1, &[1; 16]);
        // A segment claiming `a` is another function.
        write_segment_as_is(dir.path(), vec![(a, "evil".into(), 7, [1; 16])]);
        std::fs::write(dir.path().join("garbage"), b"EKZF nonsense").unwrap();
        let table = FunctionTable::load(dir.path());
        assert_eq!(table.damaged(), 1);
        assert!(table.get(&a).is_none());
        assert_eq!(table.intern("a", 1, &[1; 16]), Err(Collision(a)));
    }

    #[test]
    fn tables_that_disagree_trust_neither() {
        let (x, y) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let ours = FunctionTable::load(x.path());
        let theirs = FunctionTable::load(y.path());
        let shared = ours.intern("s", 3, &[1; 16]).unwrap();
        theirs.intern("s", 3, &[1; 16]).unwrap();
        let only_theirs = theirs.intern("t", 4, &[2; 16]).unwrap();
        // Forge a disagreement the way a collision would look.
        theirs.inner().write().unwrap().known.insert(
            shared,
            Known {
                stable: 3,
                fp: [9; 16],
            },
        );
        assert_eq!(ours.absorb(&theirs), vec![shared]);
        assert!(ours.get(&shared).is_none());
        assert_eq!(&*ours.get(&only_theirs).unwrap().name, "t");
    }
}
