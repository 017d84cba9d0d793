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
//!   packs/<digest>             the objects one filing wrote, with an index
//!   .current                   which object each current record was filed as
//!   .swept                     how many packs the last sweep left
//! ```
//! Records are content-addressed: a test unaffected across a hundred
//! commits is one object. A record is kept as a skeleton, and its long
//! lists of executed functions as chunks shared between records
//! ([`Skeleton`]). Each part is named by the digest its seal ends with, and
//! the skeleton names its chunks, so a record's id is its skeleton's name
//! ([`record_id`]): reading a part checks it against its name, and nothing
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

use crate::dep::Hash;
use crate::functions::FnId;
use crate::record::{Outcome, Record};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

const MANIFEST_MAGIC: &[u8; 4] = b"EKZH";
const SKELETON_MAGIC: &[u8; 4] = b"EKZO";
const CHUNK_MAGIC: &[u8; 4] = b"EKZC";
const BODY_MAGIC: &[u8; 4] = b"EKZB";
const PACK_INDEX_MAGIC: &[u8; 4] = b"EKZI";
/// A list of executed functions this long or longer is kept in chunks.
const CHUNKED_FROM: usize = 256;
/// About this many ids to a chunk...
const IDS_PER_CHUNK: usize = 128;
/// ...in at most this many chunks per list (each costs a reference in the
/// skeleton and an entry in a pack's index).
const MAX_CHUNKS: usize = 64;

/// How many chunks a list of `len` ids is cut into, by the ids' first
/// byte: a power of two, so that a list that grows past a boundary
/// recuts into halves, not into unrelated pieces.
fn buckets(len: usize) -> usize {
    len.div_ceil(IDS_PER_CHUNK)
        .next_power_of_two()
        .min(MAX_CHUNKS)
}

/// How a record is kept in the history: a skeleton, the record without
/// its dependencies and lists of executed functions; a body, with its
/// dependencies and short lists; and per program the chunks its long lists
/// were cut into.
///
/// A test reruns because a function it executed changed, so its new
/// record differs from the old one in a few ids: cut by id, only the chunks
/// holding them are new, and the rest is shared with the old record. A
/// chunk holds its ids end to end, not `postcard`: an analysis reads tens
/// of thousands of chunks, and decoding ids one by one through serde cost
/// more than the read.
///
/// The skeleton is what a candidate is ruled out by, cheapest first: the
/// toolchain, the programs, and the chunks this run already found wanting
/// (`vouch`). On ripgrep, decoding whole records was three quarters of the
/// cost of the thousands of candidates an edit makes every test try; the
/// skeleton holds no path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Skeleton {
    /// The record without its `always`, `deps`, `network`, `ignored` and
    /// executed functions.
    pub record: Record,
    /// Per code dependency, its chunks in order (none when kept in the
    /// body).
    pub chunks: Vec<Vec<Hash>>,
    /// The name of the body.
    pub body: Hash,
}

/// What a skeleton leaves out but its chunks: the record's dependencies,
/// and per code dependency its list of executed functions when short.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Body {
    always: Vec<String>,
    deps: Vec<crate::dep::Dep>,
    network: Vec<crate::network::Peer>,
    ignored: Vec<crate::record::Ignored>,
    functions: Vec<Vec<FnId>>,
}

impl Body {
    /// The skeleton's record with this body's parts put back, if they fit
    /// and every path stays inside its anchor.
    pub fn fill(self, mut record: Record) -> Option<Record> {
        if self.functions.len() != record.code.len() {
            return None;
        }
        record.always = self.always;
        record.deps = self.deps;
        record.network = self.network;
        record.ignored = self.ignored;
        for (code, functions) in record.code.iter_mut().zip(self.functions) {
            code.functions = functions;
        }
        // Checked before its files are: a body is untrusted input.
        record.validate().ok()?;
        Some(record)
    }
}
/// A manifest names every test of a workspace once; this is far past any.
const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// The records filed per commit, in a store.
#[derive(Clone, Debug)]
pub struct History {
    dir: PathBuf,
    /// Where each object is, read from the packs' indexes on first use and
    /// kept up to date by this process's writes. Behind a read-write lock:
    /// every object read looks it up, from every thread judging tests.
    packs: Arc<RwLock<Option<Packs>>>,
}

#[derive(Debug, Default)]
struct Packs {
    files: Vec<PathBuf>,
    /// Per pack, its bytes mapped (`None` where it could not be mapped: it
    /// is read from the file then). An analysis reads tens of thousands of
    /// objects (skeletons, chunks) from a few dozen packs; a `pread` for
    /// each, and the buffer it filled, were half of what reading an object
    /// cost (ripgrep, `perf`).
    maps: Vec<Option<Arc<memmap2::Mmap>>>,
    /// Hashed with `foldhash`, seeded per process: SipHash was a third of
    /// reading 100 commits' pack indexes (ripgrep, `perf`), and a seed
    /// keeps an imported pack's index, untrusted, from being made of
    /// colliding keys.
    at: HashMap<Hash, Loc, foldhash::fast::RandomState>,
}

/// A pack's bytes, mapped. Its one hazard is the file being truncated in
/// place while mapped (`SIGBUS`), and no cargo-ekstazi does that: a pack is
/// written whole under a new name and renamed into place, and later only
/// removed (a mapping keeps a removed file's bytes), never changed.
/// Only a regular file, looked at before it is opened: opening a FIFO
/// would block, and a link could lead anywhere.
fn map_pack(path: &Path) -> Option<Arc<memmap2::Mmap>> {
    if !fs::symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    let file = fs::File::open(path).ok()?;
    // SAFETY: only read, and never changed in place (see above).
    unsafe { memmap2::Mmap::map(&file) }.ok().map(Arc::new)
}

#[derive(Clone, Copy, Debug)]
struct Loc {
    pack: usize,
    offset: u64,
    len: u32,
}

/// A pack's index: each object's id, and where its packed bytes are
/// (offset from the end of the index, length).
#[derive(Serialize, Deserialize)]
struct PackIndex {
    entries: Vec<(Hash, u64, u32)>,
}

/// Where the number of packs the last sweep left is kept (a hint for this
/// store only: not exported).
pub(crate) const SWEPT: &str = ".swept";
/// Where the last filing left which object each current record it filed
/// is (see [`Known::Current`]; this store's only: not exported).
pub(crate) const CURRENT: &str = ".current";
const CURRENT_MAGIC: &[u8; 4] = b"EKZK";
/// Packs beyond twice that number before the next sweep: a few runs' worth,
/// so that a small history is not swept at every run.
const SWEEP_SLACK: usize = 16;
/// A pack's index is small (one entry per object); this is far past any.
const MAX_PACK_INDEX_BYTES: u64 = 64 << 20;

/// Which record held for each test at one commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The commit id, lowercase hex.
    pub commit: String,
    /// When the newest run at this commit filed it (ms since the epoch).
    pub filed_at_ms: u64,
    /// Sorted by (binary, test), one per test.
    pub entries: Vec<Entry>,
}

/// A record to file under a commit, and what names its object already.
pub struct Filing<'a> {
    pub record: &'a Record,
    /// The test ran at this commit (see [`Entry::ran`]).
    pub ran: bool,
    pub known: Known,
}

/// What is known of a record's object before it is cut: it names the
/// object only while this history holds it.
#[derive(Clone, Copy, Debug)]
pub enum Known {
    Nothing,
    /// It is this history's object `id` (a filed record that vouched).
    Filed(Hash),
    /// It is the current record whose file is sealed with this digest
    /// ([`crate::store::Store::load_sealed`], [`crate::store::Store::save`]):
    /// the same digest, the same bytes, the same record, which the last
    /// filing may have filed already.
    Current(Hash),
}

/// One test at one commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub binary: String,
    pub test: String,
    /// The record's object id (the blake3 of its encoding).
    pub record: Hash,
    /// That record's outcome (for listings, without reading it).
    pub outcome: Outcome,
    /// The test ran at this commit; else a record made earlier vouched for it.
    pub ran: bool,
}

/// A [`Manifest`] decoded in place, its strings borrowed.
#[derive(Deserialize)]
struct ManifestView<'a> {
    #[serde(borrow)]
    commit: &'a str,
    filed_at_ms: u64,
    #[serde(borrow)]
    entries: Vec<EntryView<'a>>,
}

/// An [`Entry`] decoded in place.
#[derive(Deserialize)]
struct EntryView<'a> {
    #[serde(borrow)]
    binary: &'a str,
    #[serde(borrow)]
    test: &'a str,
    record: Hash,
    outcome: Outcome,
    ran: bool,
}

impl<'a> ManifestView<'a> {
    /// The manifest filed under `commit`, if it is sealed, names that
    /// commit and lists each test once, in order.
    fn open(sealed: &'a [u8], commit: &str) -> Option<ManifestView<'a>> {
        let view: ManifestView<'a> = crate::record::open(MANIFEST_MAGIC, sealed).ok()?;
        let ordered = view
            .entries
            .windows(2)
            .all(|w| (w[0].binary, w[0].test) < (w[1].binary, w[1].test));
        (view.commit == commit && ordered).then_some(view)
    }
}

/// What [`History::prune`] removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub commits: usize,
    /// Objects and chunks removed from disk (a pack kept whole keeps its
    /// unnamed ones until it is rewritten).
    pub objects: usize,
}

/// A commit id as git prints it: 40 (SHA-1) or 64 (SHA-256) hex digits.
pub fn is_commit_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A record's id in the history: the name of its skeleton, which names
/// its chunks. The same record always cuts the same way, so it has one id.
pub fn record_id(record: &Record) -> io::Result<Hash> {
    cut(record).map(|cut| cut.id)
}

/// A record cut as the history keeps it: its skeleton, sealed, and the
/// body and chunks it names, sealed; each named by its seal's digest.
struct Cut {
    id: Hash,
    skeleton: Vec<u8>,
    /// The body, then the chunks.
    parts: Vec<(Hash, Vec<u8>)>,
}

fn cut(record: &Record) -> io::Result<Cut> {
    let mut record = record.clone();
    let mut body = Body {
        always: std::mem::take(&mut record.always),
        deps: std::mem::take(&mut record.deps),
        network: std::mem::take(&mut record.network),
        ignored: std::mem::take(&mut record.ignored),
        functions: Vec::with_capacity(record.code.len()),
    };
    let mut chunks = Vec::with_capacity(record.code.len());
    let mut sealed_chunks = Vec::new();
    for code in &mut record.code {
        if code.functions.len() < CHUNKED_FROM {
            body.functions.push(std::mem::take(&mut code.functions));
            chunks.push(Vec::new());
            continue;
        }
        body.functions.push(Vec::new());
        let cut = buckets(code.functions.len());
        let mut pieces: Vec<Vec<u8>> = vec![Vec::new(); cut];
        for function in code.functions.drain(..) {
            pieces[usize::from(function[0]) * cut / 256].extend_from_slice(&function);
        }
        let mut names = Vec::new();
        for piece in pieces.into_iter().filter(|b| !b.is_empty()) {
            let sealed = crate::record::seal(CHUNK_MAGIC, &piece);
            let name = name_of(&sealed)?;
            names.push(name);
            sealed_chunks.push((name, sealed));
        }
        chunks.push(names);
    }
    let body = crate::record::seal(
        BODY_MAGIC,
        &postcard::to_stdvec(&body).map_err(io::Error::other)?,
    );
    let skeleton = Skeleton {
        record,
        chunks,
        body: name_of(&body)?,
    };
    let sealed = crate::record::seal(
        SKELETON_MAGIC,
        &postcard::to_stdvec(&skeleton).map_err(io::Error::other)?,
    );
    let mut parts = vec![(skeleton.body, body)];
    parts.extend(sealed_chunks);
    Ok(Cut {
        id: name_of(&sealed)?,
        skeleton: sealed,
        parts,
    })
}

fn name_of(sealed: &[u8]) -> io::Result<Hash> {
    crate::record::sealed_digest(sealed).ok_or_else(|| io::Error::other("sealed bytes too short"))
}

/// Sealed bytes read under `name`, if they are sealed with that name.
fn named(sealed: &[u8], name: &Hash) -> bool {
    crate::record::sealed_digest(sealed).is_some_and(|digest| digest == *name)
}

impl History {
    pub fn new(dir: &Path) -> History {
        History {
            dir: dir.to_path_buf(),
            packs: Arc::default(),
        }
    }

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
            .map(|(record, ran)| Filing {
                record,
                ran: *ran,
                known: Known::Nothing,
            })
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
            .map(|m| {
                m.entries
                    .into_iter()
                    .map(|e| ((e.binary.clone(), e.test.clone()), e))
                    .collect()
            })
            .unwrap_or_default();
        let ids = self.ids_of(filings)?;
        for (Filing { record, ran, .. }, id) in filings.iter().zip(ids) {
            entries.insert(
                (record.binary.clone(), record.test.clone()),
                Entry {
                    binary: record.binary.clone(),
                    test: record.test.clone(),
                    record: id,
                    outcome: record.outcome,
                    ran: *ran,
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

    /// Writes a manifest as it is (filing, importing, merging).
    pub fn put_manifest(&self, manifest: &Manifest) -> io::Result<()> {
        let body = postcard::to_stdvec(manifest).map_err(io::Error::other)?;
        let sealed = crate::record::seal(MANIFEST_MAGIC, &body);
        let dir = self.commits_dir();
        crate::store::real_dirs(&[&self.dir, &dir])?;
        write_atomically(
            &dir,
            &dir.join(&manifest.commit),
            &crate::record::pack(&sealed),
        )
    }

    /// Each record's object id: the one it is known by, while this history
    /// holds that object; else what cutting it gives (written when new).
    /// Remembers which current record was filed as which object, for the
    /// next filing: with most tests unaffected, a run files mostly the
    /// records it found, and cutting them again to name them was a fifth
    /// of a run's CPU time with nothing changed (just, `perf`).
    fn ids_of(&self, filings: &[Filing<'_>]) -> io::Result<Vec<Hash>> {
        let remembered = self.remembered_current();
        let known: Vec<Option<Hash>> = {
            let mut guard = self.packs.write().expect("pack index lock");
            let packs = guard.get_or_insert_with(|| self.read_packs());
            filings
                .iter()
                .map(|filing| {
                    match filing.known {
                        Known::Nothing => None,
                        Known::Filed(id) => Some(id),
                        Known::Current(digest) => remembered.get(&digest).copied(),
                    }
                    .filter(|id| packs.at.contains_key(id))
                })
                .collect()
        };
        let to_cut: Vec<&Record> = filings
            .iter()
            .zip(&known)
            .filter(|(_, id)| id.is_none())
            .map(|(filing, _)| filing.record)
            .collect();
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

    /// Which object each current record (by the digest its file is sealed
    /// with) was filed as, by the last filing; empty when unreadable.
    fn remembered_current(&self) -> HashMap<Hash, Hash> {
        let Some(bytes) = read_small(&self.dir.join(CURRENT), MAX_PACK_INDEX_BYTES) else {
            return HashMap::new();
        };
        crate::record::open::<Vec<(Hash, Hash)>>(CURRENT_MAGIC, &bytes)
            .map(|pairs| pairs.into_iter().collect())
            .unwrap_or_default()
    }

    fn remember_current(&self, mut pairs: Vec<(Hash, Hash)>) -> io::Result<()> {
        pairs.sort_unstable();
        pairs.dedup();
        let body = postcard::to_stdvec(&pairs).map_err(io::Error::other)?;
        crate::store::real_dirs(&[&self.dir])?;
        write_atomically(
            &self.dir,
            &self.dir.join(CURRENT),
            &crate::record::seal(CURRENT_MAGIC, &body),
        )
    }

    /// Writes records not there already, as one pack: their skeletons, and
    /// the bodies and chunks no record has yet (see [`Skeleton`]). Returns
    /// each record's id.
    pub fn put_records(&self, records: &[&Record]) -> io::Result<Vec<Hash>> {
        use rayon::prelude::*;
        // Cut and compressed in parallel: a run of thousands of tests files
        // them all once its tests are done, and the user waits for it.
        let cuts: Vec<Cut> = records
            .par_iter()
            .map(|r| cut(r))
            .collect::<io::Result<_>>()?;
        let ids = cuts.iter().map(|c| c.id).collect();
        let mut guard = self.packs.write().expect("pack index lock");
        let packs = guard.get_or_insert_with(|| self.read_packs());
        let mut new: Vec<(Hash, Vec<u8>)> = Vec::new();
        let mut added = HashSet::new();
        for cut in cuts {
            if packs.at.contains_key(&cut.id) || !added.insert(cut.id) {
                continue;
            }
            for (name, sealed) in cut.parts {
                if !packs.at.contains_key(&name) && added.insert(name) {
                    new.push((name, sealed));
                }
            }
            new.push((cut.id, cut.skeleton));
        }
        new.par_iter_mut()
            .for_each(|(_, bytes)| *bytes = crate::record::pack(bytes));
        if !new.is_empty() {
            self.write_pack(packs, &new)?;
        }
        Ok(ids)
    }

    /// Writes `(id, packed bytes)` as a new pack, named by its digest, and
    /// adds it to the index.
    fn write_pack(&self, packs: &mut Packs, objects: &[(Hash, Vec<u8>)]) -> io::Result<()> {
        let mut index = PackIndex {
            entries: Vec::with_capacity(objects.len()),
        };
        let mut offset = 0u64;
        for (id, bytes) in objects {
            let len = u32::try_from(bytes.len()).map_err(io::Error::other)?;
            index.entries.push((*id, offset, len));
            offset += u64::from(len);
        }
        let body = postcard::to_stdvec(&index).map_err(io::Error::other)?;
        let sealed = crate::record::seal(PACK_INDEX_MAGIC, &body);
        let head = u32::try_from(sealed.len()).map_err(io::Error::other)?;
        let mut file = Vec::with_capacity(4 + sealed.len() + offset as usize);
        file.extend_from_slice(&head.to_le_bytes());
        file.extend_from_slice(&sealed);
        for (_, bytes) in objects {
            file.extend_from_slice(bytes);
        }
        let dir = self.packs_dir();
        crate::store::real_dirs(&[&self.dir, &dir])?;
        let path = dir.join(blake3::hash(&file).to_hex().as_str());
        write_atomically(&dir, &path, &file)?;
        let pack = packs.files.len();
        packs.maps.push(map_pack(&path));
        packs.files.push(path);
        let data = 4 + u64::from(head);
        for (id, offset, len) in index.entries {
            packs.at.insert(
                id,
                Loc {
                    pack,
                    offset: data + offset,
                    len,
                },
            );
        }
        Ok(())
    }

    /// Every pack's index. A pack whose index cannot be read holds nothing
    /// (pruning removes it). Read in parallel and into a map sized once:
    /// on ripgrep's 100 commits this is a few hundred thousand entries, and
    /// every thread judging tests waits for it.
    fn read_packs(&self) -> Packs {
        use rayon::prelude::*;
        let mut packs = Packs::default();
        let Ok(entries) = fs::read_dir(self.packs_dir()) else {
            return packs;
        };
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        type Read = (PathBuf, Option<Arc<memmap2::Mmap>>, u64, u64, PackIndex);
        let indexes: Vec<Read> = files
            .into_par_iter()
            .filter_map(|path| {
                let map = map_pack(&path);
                let (data, size, index) = match &map {
                    Some(map) => pack_index(map)?,
                    None => read_pack_index(&path)?,
                };
                Some((path, map, data, size, index))
            })
            .collect();
        packs
            .at
            .reserve(indexes.iter().map(|(.., index)| index.entries.len()).sum());
        for (path, map, data, size, index) in indexes {
            let pack = packs.files.len();
            packs.files.push(path);
            packs.maps.push(map);
            for (id, offset, len) in index.entries {
                let end = data
                    .checked_add(offset)
                    .and_then(|at| at.checked_add(u64::from(len)));
                if end.is_some_and(|end| end <= size) {
                    packs.at.entry(id).or_insert(Loc {
                        pack,
                        offset: data + offset,
                        len,
                    });
                }
            }
        }
        packs
    }

    /// Reads the packs' indexes now, if not read yet (else the first
    /// object read does).
    pub fn read_index(&self) {
        let mut guard = self.packs.write().expect("pack index lock");
        guard.get_or_insert_with(|| self.read_packs());
    }

    /// An object's sealed bytes (unchecked), if some pack holds it.
    fn read_entry(&self, id: &Hash) -> Option<Vec<u8>> {
        {
            let guard = self.packs.read().expect("pack index lock");
            if let Some(packs) = guard.as_ref() {
                return read_object(packs, id);
            }
        }
        self.read_index();
        let guard = self.packs.read().expect("pack index lock");
        read_object(guard.as_ref()?, id)
    }

    /// A filed record's skeleton, if intact and sealed with its id. The
    /// body and chunks it names are checked against their names when read
    /// ([`History::body`], [`History::chunk`]).
    pub fn skeleton(&self, id: &Hash) -> Option<Skeleton> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        let skeleton: Skeleton = crate::record::open(SKELETON_MAGIC, &sealed).ok()?;
        // Its programs' paths are resolved before the record is whole.
        skeleton.record.validate().ok()?;
        (skeleton.chunks.len() == skeleton.record.code.len()).then_some(skeleton)
    }

    /// A record's body, if it is intact and the one its name says.
    pub fn body(&self, id: &Hash) -> Option<Body> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        crate::record::open(BODY_MAGIC, &sealed).ok()
    }

    /// A chunk's functions, if it is intact and the one its name says.
    pub fn chunk(&self, id: &Hash) -> Option<Vec<FnId>> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        let ids = crate::record::open_raw(CHUNK_MAGIC, &sealed).ok()?;
        let width = std::mem::size_of::<FnId>();
        if ids.len() % width != 0 {
            return None;
        }
        Some(
            ids.chunks_exact(width)
                .map(|id| FnId::try_from(id).expect("chunks_exact gives whole ids"))
                .collect(),
        )
    }

    /// The manifest of a commit, if filed and intact.
    pub fn manifest(&self, commit: &str) -> Option<Manifest> {
        let sealed = self.sealed_manifest(commit)?;
        let view = ManifestView::open(&sealed, commit)?;
        Some(Manifest {
            commit: view.commit.to_owned(),
            filed_at_ms: view.filed_at_ms,
            entries: view
                .entries
                .into_iter()
                .map(|e| Entry {
                    binary: e.binary.to_owned(),
                    test: e.test.to_owned(),
                    record: e.record,
                    outcome: e.outcome,
                    ran: e.ran,
                })
                .collect(),
        })
    }

    /// A commit's manifest as filed, unpacked (its seal unchecked).
    fn sealed_manifest(&self, commit: &str) -> Option<Vec<u8>> {
        if !is_commit_id(commit) {
            return None;
        }
        let packed = read_regular(&self.commits_dir().join(commit), MAX_MANIFEST_BYTES)?;
        crate::record::unpack(&packed, MAX_MANIFEST_BYTES)
    }

    /// The filed records that may vouch for a test, from every intact
    /// manifest ([`Candidates`]). The manifests are decoded in place, in
    /// parallel: as owned [`Manifest`]s, 100 commits' ~120 000 entries were
    /// a quarter of a million strings allocated and freed (ripgrep, `perf`).
    pub fn candidates(&self, head: Option<&str>, parents: &[String]) -> Candidates {
        use rayon::prelude::*;
        let ids = self.commit_ids();
        let sealed: Vec<(&String, Vec<u8>)> = ids
            .par_iter()
            .filter_map(|id| Some((id, self.sealed_manifest(id)?)))
            .collect();
        let views: Vec<ManifestView<'_>> = sealed
            .par_iter()
            .filter_map(|(id, sealed)| ManifestView::open(sealed, id))
            .collect();
        Candidates::new(views, head, parents)
    }

    /// The ids of the commits filed (intact or not), sorted.
    pub fn commit_ids(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.commits_dir()) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| is_commit_id(name))
            .collect();
        ids.sort();
        ids
    }

    /// Every intact manifest, newest filed first; damaged ones are left out
    /// (their commits hold no record).
    pub fn manifests(&self) -> Vec<Manifest> {
        use rayon::prelude::*;
        // In parallel: 100 commits' manifests are ~120 000 entries to
        // decompress and decode, a good part of what a history adds to an
        // analysis where few tests try it.
        let mut all: Vec<Manifest> = self
            .commit_ids()
            .par_iter()
            .filter_map(|id| self.manifest(id))
            .collect();
        all.sort_by(|a, b| {
            b.filed_at_ms
                .cmp(&a.filed_at_ms)
                .then(a.commit.cmp(&b.commit))
        });
        all
    }

    /// The record `id`, if present and intact: its skeleton, body and
    /// chunks sealed with their names, and the whole a valid record.
    pub fn object(&self, id: &Hash) -> Option<Record> {
        let skeleton = self.skeleton(id)?;
        let functions = skeleton
            .chunks
            .iter()
            .map(|chunks| {
                let mut listed = Vec::new();
                for chunk in chunks {
                    listed.extend(self.chunk(chunk)?);
                }
                Some(listed)
            })
            .collect::<Option<Vec<_>>>()?;
        let record = self.body(&skeleton.body)?.fill(skeleton.record)?;
        History::assemble(record, functions)
    }

    /// A record put back together from parts already read and checked:
    /// its skeleton filled with its body ([`Body::fill`]) and, per code
    /// dependency, the functions of its chunks in order
    /// ([`History::chunk`]). The parts being sealed with their names, only
    /// the whole's paths are left to check.
    pub fn assemble(mut record: Record, functions: Vec<Vec<FnId>>) -> Option<Record> {
        if functions.len() != record.code.len() {
            return None;
        }
        for (code, more) in record.code.iter_mut().zip(functions) {
            if !more.is_empty() {
                if !code.functions.is_empty() {
                    return None;
                }
                code.functions = more;
            }
        }
        record.validate().ok()?;
        Some(record)
    }

    /// Keeps the `keep` newest commits (by when they were filed), removes
    /// the others, and drops the objects no kept commit names: a pack none
    /// of whose objects are named goes, and one less than half named is
    /// rewritten with those it still holds. Damaged manifests and packs,
    /// and leftovers of interrupted writes, go too. (The current records
    /// are files of their own: pruning never touches them.)
    ///
    /// The objects are swept when a commit went, and also when the packs
    /// have grown well past what the last sweep left: runs filed again
    /// under the same commit replace its records without removing a
    /// commit, and each leaves a pack of its own.
    pub fn prune(&self, keep: usize) -> io::Result<Pruned> {
        let mut pruned = Pruned::default();
        let manifests = self.manifests();
        let kept: HashSet<&str> = manifests
            .iter()
            .take(keep)
            .map(|m| m.commit.as_str())
            .collect();
        let mut swept = false;
        if let Ok(entries) = fs::read_dir(self.commits_dir()) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if !kept.contains(name.as_ref()) {
                    remove(&entry.path())?;
                    pruned.commits += usize::from(is_commit_id(&name));
                    swept = true;
                }
            }
        }
        let mut guard = self.packs.write().expect("pack index lock");
        let packs = guard.get_or_insert_with(|| self.read_packs());
        let on_disk = fs::read_dir(self.packs_dir())
            .map(|e| e.flatten().count())
            .unwrap_or(0);
        if !swept && on_disk == packs.files.len() && !self.packs_overgrown(packs.files.len()) {
            return Ok(pruned);
        }
        let records: HashSet<Hash> = manifests
            .iter()
            .take(keep)
            .flat_map(|m| m.entries.iter().map(|e| e.record))
            .collect();
        drop(guard);
        let chunks: Vec<Hash> = records
            .iter()
            .filter_map(|id| self.skeleton(id))
            .flat_map(|s| s.chunks.into_iter().flatten().chain([s.body]))
            .collect();
        let named: HashSet<Hash> = records.into_iter().chain(chunks).collect();
        let mut guard = self.packs.write().expect("pack index lock");
        let packs = guard.get_or_insert_with(|| self.read_packs());
        let old = std::mem::take(packs);
        // Per pack, its objects still named, how many are not, and the
        // size of all it holds.
        type Tally = (Vec<(Hash, Loc)>, usize, u64);
        let mut per_pack: Vec<Tally> = vec![(Vec::new(), 0, 0); old.files.len()];
        for (id, loc) in &old.at {
            let (live, dead, all) = &mut per_pack[loc.pack];
            *all += u64::from(loc.len);
            if named.contains(id) {
                live.push((*id, *loc));
            } else {
                *dead += 1;
            }
        }
        let listed: HashSet<&PathBuf> = old.files.iter().collect();
        if let Ok(entries) = fs::read_dir(self.packs_dir()) {
            for entry in entries.flatten() {
                if !listed.contains(&entry.path()) {
                    remove(&entry.path())?;
                }
            }
        }
        let mut rewrite: Vec<(Hash, Vec<u8>)> = Vec::new();
        for (pack, (mut live, dead, all)) in per_pack.into_iter().enumerate() {
            let path = &old.files[pack];
            let live_bytes: u64 = live.iter().map(|(_, l)| u64::from(l.len)).sum();
            // Mostly still named: kept as it is, its unnamed objects with
            // it (no manifest leads to them).
            if !live.is_empty() && live_bytes * 2 >= all {
                let kept = packs.files.len();
                packs.files.push(path.clone());
                packs.maps.push(old.maps[pack].clone());
                for (id, loc) in live {
                    packs.at.insert(id, Loc { pack: kept, ..loc });
                }
                continue;
            }
            pruned.objects += dead;
            live.sort_by_key(|(_, loc)| loc.offset);
            if let Ok(file) = fs::File::open(path) {
                use std::os::unix::fs::FileExt;
                for (id, loc) in live {
                    let mut bytes = vec![0; loc.len as usize];
                    if file.read_exact_at(&mut bytes, loc.offset).is_ok() {
                        rewrite.push((id, bytes));
                    }
                }
            }
        }
        // The survivors are written before the packs they come from go.
        if !rewrite.is_empty() {
            self.write_pack(packs, &rewrite)?;
        }
        let still: HashSet<&PathBuf> = packs.files.iter().collect();
        for path in &old.files {
            if !still.contains(path) {
                remove(path)?;
            }
        }
        // Only a hint for the next run: lost, the next run sweeps again.
        let _ = write_atomically(
            &self.dir,
            &self.dir.join(SWEPT),
            packs.files.len().to_string().as_bytes(),
        );
        Ok(pruned)
    }

    /// Whether there are so many more packs than the last sweep left that
    /// most are likely to hold objects no commit names any more. Sweeping
    /// reads every kept record's skeleton, so it is paid once the packs
    /// have doubled, not at every run.
    fn packs_overgrown(&self, packs: usize) -> bool {
        let left: usize = read_small(&self.dir.join(SWEPT), 32)
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0);
        packs > left.saturating_mul(2).saturating_add(SWEEP_SLACK)
    }

    /// Bytes on disk: per commit, its manifest; and all objects (with their
    /// chunks) together.
    pub fn sizes(&self) -> (HashMap<String, u64>, u64) {
        let manifests = self
            .commit_ids()
            .into_iter()
            .filter_map(|id| {
                let len = fs::symlink_metadata(self.commits_dir().join(&id))
                    .ok()?
                    .len();
                Some((id, len))
            })
            .collect();
        let objects = fs::read_dir(self.packs_dir())
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|f| f.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        (manifests, objects)
    }

    /// The packed size of one object's skeleton (what filing it cost,
    /// besides the body and chunks it may share), if present.
    pub fn object_size(&self, id: &Hash) -> Option<u64> {
        self.read_index();
        let guard = self.packs.read().expect("pack index lock");
        let loc = guard.as_ref()?.at.get(id)?;
        Some(u64::from(loc.len))
    }
}

/// A pack's index, where its data starts and the file's size, if the index
/// is intact.
/// The object `id` of `packs`, unpacked (unchecked).
fn read_object(packs: &Packs, id: &Hash) -> Option<Vec<u8>> {
    let loc = *packs.at.get(id)?;
    let limit = crate::record::MAX_RECORD_BYTES;
    if u64::from(loc.len) > limit {
        return None;
    }
    let start = usize::try_from(loc.offset).ok()?;
    let end = start.checked_add(loc.len as usize)?;
    match &packs.maps[loc.pack] {
        Some(map) => crate::record::unpack(map.get(start..end)?, limit),
        None => {
            use std::os::unix::fs::FileExt;
            let file = fs::File::open(&packs.files[loc.pack]).ok()?;
            let mut packed = vec![0; loc.len as usize];
            file.read_exact_at(&mut packed, loc.offset).ok()?;
            crate::record::unpack(&packed, limit)
        }
    }
}

/// A mapped pack's index: where its objects start, its size, the index.
fn pack_index(map: &[u8]) -> Option<(u64, u64, PackIndex)> {
    let head = u32::from_le_bytes(map.get(..4)?.try_into().ok()?);
    let len = u64::from(head);
    if len > MAX_PACK_INDEX_BYTES {
        return None;
    }
    let sealed = map.get(4..4 + head as usize)?;
    let index: PackIndex = crate::record::open(PACK_INDEX_MAGIC, sealed).ok()?;
    Some((4 + len, map.len() as u64, index))
}

fn read_pack_index(path: &Path) -> Option<(u64, u64, PackIndex)> {
    use std::io::Read;
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut file = fs::File::open(path).ok()?;
    let mut head = [0; 4];
    file.read_exact(&mut head).ok()?;
    let len = u64::from(u32::from_le_bytes(head));
    if len > MAX_PACK_INDEX_BYTES || 4 + len > meta.len() {
        return None;
    }
    let mut sealed = vec![0; len as usize];
    file.read_exact(&mut sealed).ok()?;
    let index: PackIndex = crate::record::open(PACK_INDEX_MAGIC, &sealed).ok()?;
    Some((4 + len, meta.len(), index))
}

/// A regular file's bytes, if it is one and no larger than `max`.
fn read_small(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    fs::File::open(path)
        .ok()?
        .take(max + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn remove(path: &Path) -> io::Result<()> {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A regular file's bytes, if it is one and not larger than `limit`.
fn read_regular(path: &Path, limit: u64) -> Option<Vec<u8>> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > limit {
        return None;
    }
    fs::read(path).ok()
}

/// Which commit a vouching record was filed under, seen from `HEAD`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Vouch {
    pub commit: String,
    /// 1-based: the first parent of `HEAD` is 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
}

impl std::fmt::Display for Vouch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = &self.commit[..self.commit.len().min(7)];
        match self.parent {
            Some(n) => write!(f, "as at {short}, parent {n}"),
            None => write!(f, "as at {short}"),
        }
    }
}

/// Per test, the filed records that may vouch for it, in the order they
/// are tried: those filed under `HEAD`, under each parent of `HEAD` in
/// order (so a merge is at least as selective as selecting against each
/// parent and intersecting), then under the other commits, newest first.
/// Only passing records; each object once.
#[derive(Debug, Default)]
pub struct Candidates {
    /// Per test, by [`test_key`]: two tests whose keys collide share a
    /// list, which costs time and never a wrong skip (a filed record
    /// vouches only for the test it is a record of), and no string is
    /// allocated per entry or per lookup.
    by_test: HashMap<u64, Vec<(Hash, usize)>, crate::prehashed::PrehashedState>,
    /// Per manifest position, who filed it.
    vouches: Vec<Vouch>,
}

/// A test's key in [`Candidates`].
fn test_key(binary: &str, test: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    binary.hash(&mut hasher);
    test.hash(&mut hasher);
    hasher.finish()
}

impl Candidates {
    /// From the manifests (any order), `HEAD`'s id and its parents' ids.
    fn new(
        mut ordered: Vec<ManifestView<'_>>,
        head: Option<&str>,
        parents: &[String],
    ) -> Candidates {
        let rank = |m: &ManifestView<'_>| {
            if Some(m.commit) == head {
                (0, 0)
            } else if let Some(i) = parents.iter().position(|p| p == m.commit) {
                (1, i)
            } else {
                (2, 0)
            }
        };
        ordered.sort_by_key(|m| std::cmp::Reverse(m.filed_at_ms));
        // Stable: the others keep their newest-first order.
        ordered.sort_by_key(|m| rank(m));
        let mut candidates = Candidates::default();
        for manifest in ordered {
            let parent = parents
                .iter()
                .position(|p| p == manifest.commit)
                .filter(|_| Some(manifest.commit) != head)
                .map(|i| i + 1);
            let position = candidates.vouches.len();
            candidates.vouches.push(Vouch {
                commit: manifest.commit.to_owned(),
                parent,
            });
            for entry in manifest.entries {
                if entry.outcome != Outcome::Passed {
                    continue;
                }
                let list = candidates
                    .by_test
                    .entry(test_key(entry.binary, entry.test))
                    .or_default();
                if !list.iter().any(|(id, _)| *id == entry.record) {
                    list.push((entry.record, position));
                }
            }
        }
        candidates
    }

    /// The records that may vouch for a test, in order, with who filed
    /// them (and, should two tests' keys collide, the other's too).
    pub fn of(&self, binary: &str, test: &str) -> impl Iterator<Item = (&Hash, &Vouch)> {
        self.by_test
            .get(&test_key(binary, test))
            .into_iter()
            .flatten()
            .map(|(id, position)| (id, &self.vouches[*position]))
    }

    pub fn is_empty(&self) -> bool {
        self.by_test.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests_support::sample;

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
        let filing = |record, known| Filing {
            record,
            ran: false,
            known,
        };
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
                .prune(crate::settings::DEFAULT_HISTORY_COMMITS)
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
        let escaping: crate::path::StoredPath =
            postcard::from_bytes(&[0, 4, b'.', b'.', b'/', b'x']).unwrap();
        assert!(!escaping.is_valid());
        let mut in_body = sample();
        in_body.deps[0].target = crate::dep::Target::Content(escaping.clone());
        let mut in_skeleton = sample();
        in_skeleton.test = "other".into();
        in_skeleton.code[0].unit = crate::code::CodeUnit::Program(escaping);
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
        Some((packs.files[loc.pack].clone(), loc))
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
        let cut = cut(&other).unwrap();
        // Parts: the body, then the chunks.
        let chunk = cut.parts[1].0;
        {
            let mut guard = planted.packs.write().unwrap();
            let packs = guard.get_or_insert_with(|| planted.read_packs());
            let forged = [
                ([9; 32], crate::record::pack(&cut.skeleton)),
                ([8; 32], crate::record::pack(&cut.parts[2].1)),
                ([7; 32], crate::record::pack(&cut.parts[0].1)),
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
