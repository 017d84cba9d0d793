//! The state directory: one record file per test.
//!
//! ```text
//! .ekstazi/
//!   lock                      held by a run or a fetch (exclusive), an export or a push (shared); an analysis takes none
//!   v12/                      one directory per record format version
//!     <binary key>/<test>     escaped names, one record each
//!     .code/<id>              function fingerprints of one build of a
//!                             program (a cache: the present builds')
//!     .functions/<digest>     the function table (`functions`)
//!     .sets/<digest>          executed functions kept once per program,
//!                             that records name as sets (`fn_sets`)
//!     .deps/<digest>          dependencies kept once, likewise
//!     .dicts/<digest>         zstd dictionaries records are compressed
//!                             with (`dicts`)
//!     .uninstrumented/<id>    uninstrumented functions of a build, by
//!                             digest, for the records that name them
//!     .history/               records filed per commit (`history`)
//! ```
//! One file per test lets runs and CI shards write without coordination and
//! merge by copying. Files are written to a temporary name and renamed (a
//! record: written into a spare file and exchanged with the old one,
//! `files::Replacer`), so a reader sees a whole old record or a whole new
//! one. Names are escaped so
//! that no test name can leave its directory, and a record is only accepted
//! for the test whose file it is in.

use crate::digests::fingerprint::Snapshot;
use crate::digests::kept_sums::MAX_KEPT_SUMS_BYTES;
use crate::digests::program::Uninstrumented;
use crate::files::contained::{How, Kind, StateDir};
use crate::files::identity::Identity;
use crate::files::sealed::{DecodeError, FORMAT_VERSION};
use crate::files::{ReadError, Replacer};
use crate::model::dep::Hash;
use crate::model::record::{MAX_RECORD_BYTES, Record};
use crate::storage::build_stamp::{BuildStamp, MAX_STAMP_BYTES};
use crate::storage::chains::Item;
use crate::storage::dicts::Dicts;
use crate::storage::fn_sets::{DepSets, FnSets, Sets};
use crate::storage::record_file;
use crate::storage::record_index::{self, Index};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where function fingerprints live, among the binaries' record directories
/// (no binary key starts with a dot).
const SNAPSHOTS_DIR: &str = ".code";

/// A state directory.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
    records: PathBuf,
    /// Every path below `root` is reached through it, never through a link.
    state: StateDir,
    /// How records are replaced: a run rewrites thousands.
    replacer: Arc<Replacer>,
    /// The bases records keep their executed functions against.
    sets: Arc<FnSets>,
    /// The base records keep their dependencies against.
    deps: Arc<DepSets>,
    /// The dictionaries record files are compressed with.
    dicts: Arc<Dicts>,
}

/// What the store holds for one test.
#[derive(Debug)]
pub enum Loaded {
    /// No record: the test is new (or was never recorded).
    Missing,
    /// A record file that cannot be trusted.
    Invalid(Invalid),
    /// An intact record of this test.
    Found(Box<Record>),
}

/// Why a record file was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    /// Read, but not whole or not this test's.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// It could not be read.
    #[error("record cannot be read: {0}")]
    Io(#[from] io::Error),
}

/// A held lock on a state directory; released on drop.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
}

impl Store {
    /// The store rooted at `root` (nothing is created until written).
    pub fn new(root: &Path) -> Store {
        let records = root.join(format!("v{FORMAT_VERSION}"));
        let state = StateDir::new(root);
        Store {
            root: root.to_path_buf(),
            sets: Arc::new(FnSets::new(state.clone(), &records.join(SETS_DIR))),
            deps: Arc::new(DepSets::new(state.clone(), &records.join(DEPS_DIR))),
            dicts: Arc::new(Dicts::new(state.clone(), &records.join(DICTS_DIR))),
            records,
            state,
            replacer: Arc::default(),
        }
    }

    /// The bases records keep their executed functions against.
    pub fn sets(&self) -> &Arc<FnSets> {
        &self.sets
    }

    /// The base records keep their dependencies against.
    pub fn deps(&self) -> &Arc<DepSets> {
        &self.deps
    }

    /// The dictionaries record files are compressed with.
    pub fn dicts(&self) -> &Arc<Dicts> {
        &self.dicts
    }

    /// Where record files keep their sets.
    fn bases(&self) -> record_file::Bases<'_> {
        record_file::Bases {
            functions: &self.sets,
            deps: &self.deps,
        }
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The state directory, to reach its files without following a link.
    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// Takes the run lock: exclusive to write, shared to only read.
    /// `wait: false` fails at once with `WouldBlock` when another run holds it.
    pub fn lock(&self, exclusive: bool, wait: bool) -> io::Result<StoreLock> {
        self.state.make_dir(&self.root)?;
        // Keep the state out of version control, and out of the files cargo
        // watches for packages whose build script names none (cargo lists
        // the untracked files git does not ignore): otherwise every run
        // would make the next one rebuild.
        let gitignore = self.root.join(".gitignore");
        if self.state.file_len(&gitignore).is_none() {
            self.state.write_atomic(
                &gitignore,
                b"# Written by cargo-ekstazi: per-test records, not sources.\n*\n",
            )?;
        }
        let how = How {
            write: true,
            create: true,
            ..How::default()
        };
        let file = self.state.open(&self.root.join("lock"), how)?;
        match (exclusive, wait) {
            (true, true) => file.lock()?,
            (false, true) => file.lock_shared()?,
            (true, false) => file.try_lock().map_err(try_lock_error)?,
            (false, false) => file.try_lock_shared().map_err(try_lock_error)?,
        }
        Ok(StoreLock { _file: file })
    }

    /// Whether it holds any record of this format (a first run, or a CI
    /// cache that was not restored, has none).
    pub fn has_records(&self) -> bool {
        self.state
            .read_dir(&self.records)
            .ok()
            .flatten()
            .is_some_and(|entries| {
                // Caches a run with no record may leave are no records.
                entries.iter().any(|e| {
                    ![
                        SNAPSHOTS_DIR,
                        KEPT_SUMS,
                        INDEX_DIR,
                        SETS_DIR,
                        DEPS_DIR,
                        DICTS_DIR,
                    ]
                    .contains(&&*e.name.to_string_lossy())
                })
            })
    }

    /// Record format versions present besides ours (as directory names).
    pub fn other_versions(&self) -> Vec<String> {
        let ours = format!("v{FORMAT_VERSION}");
        let Ok(Some(entries)) = self.state.read_dir(&self.root) else {
            return vec![];
        };
        let mut found: Vec<String> = entries
            .into_iter()
            .filter_map(|e| e.name.into_string().ok())
            .filter(|name| {
                name != &ours && name.starts_with('v') && name[1..].parse::<u16>().is_ok()
            })
            .collect();
        found.sort();
        found
    }

    fn binary_dir(&self, binary: &str) -> PathBuf {
        self.records.join(escape(binary))
    }

    /// Where the record of a test lives.
    pub fn record_path(&self, binary: &str, test: &str) -> PathBuf {
        self.binary_dir(binary).join(escape(test))
    }

    /// Reads the record of one test, trusting nothing in the file.
    pub fn load(&self, binary: &str, test: &str) -> Loaded {
        self.load_sealed(binary, test).0
    }

    /// [`Store::load`], with the digest the record's file is sealed with
    /// when it was found: the same bytes, the same record (the history
    /// remembers which of its objects a current record was filed as).
    pub fn load_sealed(&self, binary: &str, test: &str) -> (Loaded, Option<Hash>) {
        let path = self.record_path(binary, test);
        match self.read_bounded(&path) {
            Ok(None) => (Loaded::Missing, None),
            Ok(Some(bytes)) => match record_file::decode(&bytes, self.bases(), &self.dicts) {
                Ok(record) if record.binary == binary && record.test == test => (
                    Loaded::Found(Box::new(record)),
                    crate::files::sealed::sealed_digest(&bytes),
                ),
                Ok(_) => (Loaded::Invalid(DecodeError::OtherTest.into()), None),
                Err(e) => (Loaded::Invalid(e.into()), None),
            },
            Err(Invalid::Io(e)) if e.kind() == io::ErrorKind::NotFound => (Loaded::Missing, None),
            Err(e) => (Loaded::Invalid(e), None),
        }
    }

    /// [`Store::load_sealed`], with the identity the record's file had
    /// before and after it was read (`None` if the two differ: it changed
    /// while read, and no index entry may stand for it).
    pub fn load_identified(
        &self,
        binary: &str,
        test: &str,
    ) -> (Loaded, Option<Hash>, Option<Identity>) {
        let path = self.record_path(binary, test);
        let before = self.state.identity(&path);
        let (loaded, sealed) = self.load_sealed(binary, test);
        let after = self.state.identity(&path);
        let identity = before.filter(|_| before == after && matches!(loaded, Loaded::Found(_)));
        (loaded, sealed, identity)
    }

    /// The identity of each of `tests`' record files now, as an index
    /// entry names it (the binary's directory reached once).
    pub fn record_identities(&self, binary: &str, tests: &[&str]) -> Vec<Option<Identity>> {
        let names: Vec<String> = tests.iter().map(|test| escape(test)).collect();
        let names: Vec<&std::ffi::OsStr> = names.iter().map(|n| n.as_ref()).collect();
        self.state.identities(&self.binary_dir(binary), &names)
    }

    /// Files' and programs' checksums kept by an earlier run
    /// (`digests::kept_sums`), as bytes for `Checksums::with_kept`.
    pub fn kept_sums(&self) -> Option<Vec<u8>> {
        self.state
            .read_bounded(&self.records.join(KEPT_SUMS), MAX_KEPT_SUMS_BYTES)
            .ok()
    }

    /// Keeps files' and programs' checksums for the next run (not fatal to lose).
    pub fn save_kept_sums(&self, bytes: &[u8]) -> io::Result<()> {
        self.real_dir(&self.records)?;
        self.state
            .write_atomic(&self.records.join(KEPT_SUMS), bytes)
    }

    /// The index of a binary's records, if kept, intact and its own.
    pub fn record_index(&self, binary: &str) -> Option<record_index::Loaded> {
        let path = self.records.join(INDEX_DIR).join(escape(binary));
        let bytes = self
            .state
            .read_bounded(&path, record_index::MAX_INDEX_BYTES)
            .ok()?;
        Index::decode(&bytes, binary)
    }

    /// Keeps the index of a binary's records (not fatal to lose: the
    /// records are then read whole).
    pub fn save_record_index(&self, index: &Index) -> io::Result<()> {
        let dir = self.records.join(INDEX_DIR);
        self.real_dir(&dir)?;
        self.state
            .write_atomic(&dir.join(escape(index.binary())), &index.encode())
    }

    /// Writes a record atomically (a spare file exchanged into place, see
    /// `files::Replacer`: a reader sees the whole old record or the whole
    /// new one); returns the digest its file is sealed with (see
    /// [`Store::load_sealed`]).
    pub fn save(&self, record: &Record) -> io::Result<Hash> {
        let dir = self.binary_dir(&record.binary);
        self.real_dir(&dir)?;
        let encoded = record_file::encode(record, self.bases(), &self.dicts);
        let digest = crate::files::sealed::sealed_digest(&encoded)
            .ok_or_else(|| io::Error::other("a sealed record ends with its digest"))?;
        self.replacer
            .replace(&dir, &dir.join(escape(&record.test)), &encoded)?;
        Ok(digest)
    }

    /// Removes the record of one test, if any.
    pub fn remove(&self, binary: &str, test: &str) -> io::Result<()> {
        self.state.remove(&self.record_path(binary, test))
    }

    /// Removes the records of a binary's tests that are not in `tests` (the
    /// binary's complete test list), and temporary files of interrupted
    /// writes. Returns how many records were removed.
    pub fn retain_tests<'a>(
        &self,
        binary: &str,
        tests: impl IntoIterator<Item = &'a str>,
    ) -> io::Result<usize> {
        let keep: HashSet<String> = tests.into_iter().map(escape).collect();
        self.retain_files(&self.binary_dir(binary), &keep)
    }

    /// Removes the record directories of binaries not in `binaries` (every
    /// test binary the workspace can build), and their record indexes.
    /// Returns how many record directories went.
    pub fn retain_binaries<'a>(
        &self,
        binaries: impl IntoIterator<Item = &'a str>,
    ) -> io::Result<usize> {
        let keep: HashSet<String> = binaries.into_iter().map(escape).collect();
        self.retain_files(&self.records.join(INDEX_DIR), &keep)?;
        let Some(entries) = self.state.read_dir(&self.records)? else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in entries {
            let name = &entry.name;
            // Names with a leading dot are the store's own (no escaped key has one).
            let ours = name.as_encoded_bytes().starts_with(b".");
            let stale = !ours && name.to_str().is_none_or(|name| !keep.contains(name));
            // A link is removed as a link (`StateDir::remove` follows none).
            if stale && entry.kind != Kind::File {
                self.state.remove(&self.records.join(name))?;
                removed += usize::from(entry.kind == Kind::Dir);
            }
        }
        Ok(removed)
    }

    fn retain_files(&self, dir: &Path, keep: &HashSet<String>) -> io::Result<usize> {
        // Read without following a link: a linked directory is not ours
        // to sweep (it reads as absent, and is replaced when written).
        let Some(entries) = self.state.read_dir(dir)? else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in entries {
            let name = &entry.name;
            let stale = name.to_str().is_none_or(|name| !keep.contains(name));
            if stale && entry.kind != Kind::Dir {
                self.state.remove(&dir.join(name))?;
                removed += usize::from(!name.as_encoded_bytes().starts_with(b".tmp"));
            }
        }
        Ok(removed)
    }
}

/// Every record of the store, for merging: each file with its record, or
/// why it is not one (damaged, or not the record of the test its path names).
pub type Listed = Vec<(PathBuf, Result<Record, Invalid>)>;

impl Store {
    /// Every record file of this format, read and checked.
    pub fn records(&self) -> io::Result<Listed> {
        let mut found = Vec::new();
        self.each_record_file(|dir_name, name, path, bytes| {
            let record = bytes.and_then(|bytes| {
                record_file::decode(&bytes, self.bases(), &self.dicts)
                    .map_err(Invalid::from)
                    .and_then(|record| {
                        let bound = dir_name.to_str() == Some(&escape(&record.binary))
                            && name.to_str() == Some(&escape(&record.test));
                        if bound {
                            Ok(record)
                        } else {
                            Err(DecodeError::OtherTest.into())
                        }
                    })
            });
            found.push((path, record));
        })?;
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }

    /// Removes the links of bases no intact record file names (and no
    /// newest base), and the dictionaries no record file names (but the
    /// current one), from one reading of the record files. Returns how
    /// many links and how many dictionaries went.
    pub fn collect_sets_and_dicts(&self) -> io::Result<(usize, usize)> {
        let hex = |name: Hash| blake3::Hash::from_bytes(name).to_hex().to_string();
        let (mut bases, mut deps) = (HashSet::new(), HashSet::new());
        let mut dicts: HashSet<String> = HashSet::from([crate::storage::dicts::CURRENT.to_owned()]);
        dicts.extend(self.dicts.current_name().map(hex));
        self.each_record_file(|_, _, _, bytes| {
            let Ok(bytes) = bytes else { return };
            if let Some((functions, dep_base)) = record_file::bases(&bytes, &self.dicts) {
                bases.extend(functions);
                deps.extend(dep_base);
            }
            dicts.extend(record_file::dictionary(&bytes).map(hex));
        })?;
        Ok((
            self.retain_sets(&bases)? + retain_links(self, &self.deps, DEPS_DIR, &deps)?,
            self.retain_files(&self.records.join(DICTS_DIR), &dicts)?,
        ))
    }

    /// Removes the links of bases no chain of `keep` (nor a program's
    /// newest base) passes through, and writes cut short. Returns how many
    /// links went.
    pub(crate) fn retain_sets(&self, keep: &HashSet<Hash>) -> io::Result<usize> {
        retain_links(self, &self.sets, SETS_DIR, keep)
    }

    /// Calls `f` with each record file's binary directory, name, path and
    /// bytes (or why they could not be read).
    fn each_record_file(
        &self,
        mut f: impl FnMut(&std::ffi::OsStr, &std::ffi::OsStr, PathBuf, Result<Vec<u8>, Invalid>),
    ) -> io::Result<()> {
        let Some(binaries) = self.state.read_dir(&self.records)? else {
            return Ok(());
        };
        for binary in binaries {
            let dir_name = &binary.name;
            if dir_name.as_encoded_bytes().starts_with(b".") || binary.kind != Kind::Dir {
                continue;
            }
            let dir = self.records.join(dir_name);
            for entry in self.state.read_dir(&dir)?.unwrap_or_default() {
                let name = &entry.name;
                if name.as_encoded_bytes().starts_with(b".tmp") {
                    continue;
                }
                let path = dir.join(name);
                match self.read_bounded(&path) {
                    Ok(Some(bytes)) => f(dir_name, name, path, Ok(bytes)),
                    Ok(None) => continue,
                    Err(e) => f(dir_name, name, path, Err(e)),
                }
            }
        }
        Ok(())
    }

    /// The ids of the stored snapshots (whatever their state).
    pub fn snapshot_ids(&self) -> io::Result<Vec<Hash>> {
        let Some(entries) = self.state.read_dir(&self.snapshot_dir())? else {
            return Ok(Vec::new());
        };
        let mut ids = Vec::new();
        for entry in entries {
            let name = entry.name;
            if let Some(id) = name
                .to_str()
                .and_then(|hex| blake3::Hash::from_hex(hex).ok())
            {
                ids.push(*id.as_bytes());
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }
}

/// Function-fingerprint snapshots, by id (the smart checksum of the build
/// they describe).
impl Store {
    fn snapshot_dir(&self) -> PathBuf {
        self.records.join(SNAPSHOTS_DIR)
    }

    fn snapshot_path(&self, id: &Hash) -> PathBuf {
        self.snapshot_dir()
            .join(blake3::Hash::from_bytes(*id).to_hex().as_str())
    }

    /// A stored snapshot, if present, intact and consistent.
    pub fn load_snapshot(&self, id: &Hash) -> Option<Snapshot> {
        let packed = self.read_bounded(&self.snapshot_path(id)).ok()??;
        let bytes =
            crate::files::sealed::unpack_sealed(SNAPSHOT_MAGIC, &packed, MAX_SNAPSHOT_BYTES)
                .ok()?;
        let (named, snapshot): (Hash, Snapshot) =
            crate::files::sealed::open(SNAPSHOT_MAGIC, &bytes).ok()?;
        // Bound to its name: a sealed snapshot of another build copied
        // under this build's id (which anyone can predict) describes other
        // code, and would let its tests be judged by the old fingerprints.
        if named != *id {
            return None;
        }
        let n = snapshot.names.len();
        let consistent = snapshot.fps.len() == n
            && snapshot.names.strictly_ascending()
            && snapshot.other_fps.len() == snapshot.other_names.len()
            && snapshot.other_names.strictly_ascending()
            && snapshot.flags.iter().all(|(_, i)| (*i as usize) < n)
            && snapshot.stable.iter().all(|(_, i)| (*i as usize) < n)
            && snapshot.stable.windows(2).all(|w| w[0] <= w[1]);
        consistent.then_some(snapshot)
    }

    /// Stores a snapshot atomically, compressed: its names are most of
    /// it, and they repeat their crates' and modules' paths (coreutils'
    /// two programs: 26.5 MB before).
    pub fn save_snapshot(&self, id: &Hash, snapshot: &Snapshot) -> io::Result<()> {
        let dir = self.snapshot_dir();
        self.real_dir(&dir)?;
        let body = postcard::to_stdvec(&(id, snapshot)).map_err(io::Error::other)?;
        self.state.write_atomic(
            &self.snapshot_path(id),
            &crate::files::sealed::pack_kept(&crate::files::sealed::seal(SNAPSHOT_MAGIC, &body)),
        )
    }

    /// Removes every snapshot not in `keep`; returns how many went.
    pub fn retain_snapshots(&self, keep: &HashSet<Hash>) -> io::Result<usize> {
        self.retain_ids(&self.snapshot_dir(), keep)
    }

    /// The stamp of the last build, if one is kept and intact.
    pub fn build_stamp(&self) -> Option<BuildStamp> {
        let path = self.root.join(BUILD_STAMP);
        let bytes = self.state.read_bounded(&path, MAX_STAMP_BYTES).ok()?;
        BuildStamp::decode(&bytes)
    }

    /// Keeps `stamp` as the last build's.
    pub fn save_build_stamp(&self, stamp: &BuildStamp) -> io::Result<()> {
        self.real_dir(&self.root)?;
        self.state
            .write_atomic(&self.root.join(BUILD_STAMP), &stamp.encode())
    }

    /// Forgets the last build's stamp (its build failed, or was not stamped).
    pub fn forget_build_stamp(&self) -> io::Result<()> {
        self.state.remove(&self.root.join(BUILD_STAMP))
    }

    /// The records filed per commit.
    pub fn history(&self) -> crate::storage::history::History {
        crate::storage::history::History::within(
            self.state.clone(),
            &self.records.join(HISTORY_DIR),
        )
        .cut_by(self.sets.clone(), self.deps.clone(), self.dicts.clone())
    }

    /// Where the function table's segments are.
    pub fn functions_dir(&self) -> PathBuf {
        self.records.join(FUNCTIONS_DIR)
    }

    fn uninstrumented_path(&self, id: &Hash) -> PathBuf {
        self.records
            .join(UNINSTRUMENTED_DIR)
            .join(blake3::Hash::from_bytes(*id).to_hex().as_str())
    }

    /// Keeps an uninstrumented table under its digest (once).
    pub fn save_uninstrumented(&self, id: &Hash, table: &Uninstrumented) -> io::Result<()> {
        let path = self.uninstrumented_path(id);
        if self.state.file_len(&path).is_some() {
            return Ok(());
        }
        let body = postcard::to_stdvec(table).map_err(io::Error::other)?;
        self.state.write_atomic(
            &path,
            &crate::files::sealed::seal(UNINSTRUMENTED_MAGIC, &body),
        )
    }

    /// Removes every uninstrumented table not in `keep`; returns how many went.
    pub fn retain_uninstrumented(&self, keep: &HashSet<Hash>) -> io::Result<usize> {
        self.retain_ids(&self.records.join(UNINSTRUMENTED_DIR), keep)
    }

    /// Removes every file of `dir`, named by the hex of an id, whose id is
    /// not in `keep`.
    fn retain_ids(&self, dir: &Path, keep: &HashSet<Hash>) -> io::Result<usize> {
        let keep: HashSet<String> = keep
            .iter()
            .map(|id| blake3::Hash::from_bytes(*id).to_hex().to_string())
            .collect();
        self.retain_files(dir, &keep)
    }

    /// A stored uninstrumented table, if present, intact and the one its
    /// digest names.
    pub fn load_uninstrumented(&self, id: &Hash) -> Option<Uninstrumented> {
        let bytes = self.read_bounded(&self.uninstrumented_path(id)).ok()??;
        let table: Uninstrumented =
            crate::files::sealed::open(UNINSTRUMENTED_MAGIC, &bytes).ok()?;
        (table.is_consistent() && table.digest() == *id).then_some(table)
    }
}

/// `EKZS` before snapshots mapped coverage flags, not entry addresses, to
/// functions, `EKZL` before a snapshot named the build it describes
/// inside its seal, and `EKZB` before it kept its addresses as differences:
/// a snapshot of an old kind is not read (a cache: the build is
/// fingerprinted again), and `EKZS` and `EKZL` are not used again (`EKZF`
/// names the function table's segments, `EKZB` the history's bodies).
const SNAPSHOT_MAGIC: &[u8; 4] = b"EKZ6";
/// A snapshot unpacks to at most this much (coreutils' multicall program:
/// about 20 MB); more is not one of ours, and is refused while streamed.
const MAX_SNAPSHOT_BYTES: u64 = 512 << 20;
const UNINSTRUMENTED_MAGIC: &[u8; 4] = b"EKZU";
const FUNCTIONS_DIR: &str = ".functions";
/// Removes from `dir` the links of `sets` no chain of `keep` (nor a
/// newest base) passes through, and writes cut short.
fn retain_links<T: Item>(
    store: &Store,
    sets: &Sets<T>,
    dir: &str,
    keep: &HashSet<Hash>,
) -> io::Result<usize> {
    let mut names: HashSet<String> = sets
        .kept(keep)
        .iter()
        .map(|name| blake3::Hash::from_bytes(*name).to_hex().to_string())
        .collect();
    names.insert(crate::storage::fn_sets::HEADS.to_owned());
    store.retain_files(&store.records.join(dir), &names)
}

const SETS_DIR: &str = ".sets";
const DEPS_DIR: &str = ".deps";
const DICTS_DIR: &str = ".dicts";
/// Files' and programs' checksums, by their files' identity.
const KEPT_SUMS: &str = ".sums";
/// The indexes of the records, one file per binary.
const INDEX_DIR: &str = ".index";
/// Beside the records' directories, not in ours: a stamp alone is no
/// record, and its seal names the format it was written in.
const BUILD_STAMP: &str = "build-stamp";
const HISTORY_DIR: &str = ".history";
const UNINSTRUMENTED_DIR: &str = ".uninstrumented";

impl Store {
    /// Makes `dir` (inside the state directory) a real directory before
    /// anything is written into it: a symbolic link planted in a restored
    /// state directory would otherwise send records anywhere. What is in the
    /// way is removed — it is the store's own place.
    fn real_dir(&self, dir: &Path) -> io::Result<()> {
        self.state.make_dir(dir)
    }

    /// Reads a record file, refusing what cannot be a record: anything but
    /// a regular file (a planted symlink or FIFO), or more than
    /// [`MAX_RECORD_BYTES`]. `None` when there is no file.
    fn read_bounded(&self, path: &Path) -> Result<Option<Vec<u8>>, Invalid> {
        match self.state.read_bounded(path, MAX_RECORD_BYTES) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(ReadError::Missing) => Ok(None),
            Err(ReadError::NotRegular) => {
                Err(io::Error::other("record is not a regular file").into())
            }
            Err(ReadError::TooLarge) => Err(DecodeError::TooLarge.into()),
            Err(ReadError::Io(e)) => Err(e.into()),
        }
    }
}

fn try_lock_error(e: fs::TryLockError) -> io::Error {
    match e {
        fs::TryLockError::WouldBlock => io::ErrorKind::WouldBlock.into(),
        fs::TryLockError::Error(e) => e,
    }
}

/// Longest escaped name kept verbatim; longer ones end in a digest so that
/// they stay within the 255-byte limit of common file systems.
const MAX_NAME: usize = 160;

/// Escapes a binary key or test name into one safe file name: ASCII letters,
/// digits, `_` and `-` stay, a `.` stays unless it comes first, everything
/// else becomes `%XX`. The result never is `.`/`..`, never contains `/`, and
/// different names give different results (long ones up to a 128-bit digest).
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, byte) in name.bytes().enumerate() {
        let keep =
            byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' || (byte == b'.' && i > 0);
        if keep {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if out.is_empty() {
        out.push('%');
    }
    if out.len() > MAX_NAME {
        let digest = blake3::hash(name.as_bytes()).to_hex();
        let mut cut = MAX_NAME - 33;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('~');
        out.push_str(&digest[..32]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::record::Outcome;

    #[test]
    fn escaped_names_stay_in_their_directory() {
        assert_eq!(escape("tests::reads_data"), "tests%3A%3Areads_data");
        assert_eq!(escape(".."), "%2E.");
        assert_eq!(escape("a/../../b"), "a%2F..%2F..%2Fb");
        assert_eq!(escape(""), "%");
        let long = "x".repeat(1000);
        assert!(escape(&long).len() <= MAX_NAME);
        assert_ne!(escape(&long), escape(&"x".repeat(999)));
    }

    #[test]
    fn records_round_trip_through_the_store_and_are_bound_to_their_test() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let record = crate::model::record::tests_support::sample();
        store.save(&record).unwrap();
        match store.load(&record.binary, &record.test) {
            Loaded::Found(found) => assert_eq!(*found, record),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store.load(&record.binary, "other"),
            Loaded::Missing
        ));
        // A record copied under another test's name is not that test's record.
        fs::copy(
            store.record_path(&record.binary, &record.test),
            store.record_path(&record.binary, "other"),
        )
        .unwrap();
        assert!(matches!(
            store.load(&record.binary, "other"),
            Loaded::Invalid(Invalid::Decode(DecodeError::OtherTest))
        ));
    }

    #[test]
    fn a_snapshot_of_the_kind_keyed_by_entry_addresses_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut snapshot =
            crate::digests::program::tests_support::snapshot(&[("a", 1), ("b", 2)], 0);
        snapshot.flags = vec![(0x10, 0), (0x20, 1)];
        let id = [7; 32];
        store.save_snapshot(&id, &snapshot).unwrap();
        assert_eq!(store.load_snapshot(&id).unwrap().flags, snapshot.flags);
        // The same body as `b976fa2`'s predecessors sealed it: its numbers
        // are entry addresses, and read as flags they would name the wrong
        // functions.
        let body = postcard::to_stdvec(&snapshot).unwrap();
        fs::write(
            store.snapshot_path(&id),
            crate::files::sealed::seal(b"EKZS", &body),
        )
        .unwrap();
        assert!(store.load_snapshot(&id).is_none());
    }

    #[test]
    fn a_snapshot_copied_under_another_builds_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let snapshot = crate::digests::program::tests_support::snapshot(&[("a", 1)], 0);
        let (old, new) = ([1; 32], [2; 32]);
        store.save_snapshot(&old, &snapshot).unwrap();
        fs::copy(store.snapshot_path(&old), store.snapshot_path(&new)).unwrap();
        assert!(store.load_snapshot(&old).is_some());
        assert!(store.load_snapshot(&new).is_none());
    }

    #[test]
    fn stale_records_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut record = crate::model::record::tests_support::sample();
        for name in ["a", "b", "c"] {
            record.test = name.into();
            record.outcome = Outcome::Passed;
            store.save(&record).unwrap();
        }
        assert_eq!(store.retain_tests(&record.binary, ["a", "c"]).unwrap(), 1);
        assert!(matches!(store.load(&record.binary, "b"), Loaded::Missing));
        assert!(matches!(store.load(&record.binary, "a"), Loaded::Found(_)));
        let index = Index::build(&record.binary, [], [], std::time::SystemTime::now());
        store.save_record_index(&index).unwrap();
        let other = Index::build("other", [], [], std::time::SystemTime::now());
        store.save_record_index(&other).unwrap();
        assert_eq!(store.retain_binaries(["other"]).unwrap(), 1);
        assert!(matches!(store.load(&record.binary, "a"), Loaded::Missing));
        let indexes = dir.path().join(format!("v{FORMAT_VERSION}/{INDEX_DIR}"));
        let left: Vec<_> = std::fs::read_dir(indexes)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["other"], "the removed binary's index goes with it");
    }

    #[test]
    fn a_planted_directory_symlink_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let record = crate::model::record::tests_support::sample();
        let binary_dir = store
            .record_path(&record.binary, "x")
            .parent()
            .unwrap()
            .to_path_buf();
        fs::create_dir_all(binary_dir.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &binary_dir).unwrap();
        store.save(&record).unwrap();
        assert_eq!(
            fs::read_dir(elsewhere.path()).unwrap().count(),
            0,
            "nothing written outside"
        );
        assert!(fs::symlink_metadata(&binary_dir).unwrap().is_dir());
        assert!(matches!(
            store.load(&record.binary, &record.test),
            Loaded::Found(_)
        ));
    }

    #[test]
    fn a_planted_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let path = store.record_path("b", "t");
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(matches!(store.load("b", "t"), Loaded::Invalid(_)));
    }
}
