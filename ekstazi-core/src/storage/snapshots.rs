//! Function fingerprints by build ([`Snapshots`]): loaded from the store,
//! or fingerprinted once per run and kept, with the function table records
//! name functions by and the uninstrumented tables of past builds.

use crate::digests::fingerprint::{self, ExtentSource, FingerprintError, Snapshot, kept};
use crate::digests::functions::FunctionTable;
use crate::digests::program::{Build, Uninstrumented, kept_extents, map_path};
use crate::model::dep::Hash;
use crate::model::path::{Anchors, Placeholders};
use crate::storage::store::Store;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// At most this many changed functions are named per program.
pub(crate) const NAMED_CHANGES: usize = 10;

/// The uninstrumented functions that changed between two builds, demangled.
type Changed = Arc<Vec<String>>;

/// Snapshots made but not yet kept, by the build's checksum.
type Held = Vec<(Hash, Arc<Snapshot>)>;

/// Function fingerprints by build, loaded from the store or computed once
/// per run, and the function table records name functions by.
pub struct Snapshots {
    store: Store,
    /// This checkout's directories, which fingerprints are blind to.
    checkout: Placeholders,
    table: FunctionTable,
    builds: Mutex<HashMap<Hash, Arc<Build>>>,
    /// Uninstrumented tables of past builds, `None` when gone or damaged.
    tables: Mutex<HashMap<Hash, Option<Arc<Uninstrumented>>>>,
    /// Changed uninstrumented functions, per (recorded table, present build).
    compared: Mutex<HashMap<(Hash, Hash), Changed>>,
    /// While saves are held back ([`Snapshots::hold_saves`]): the snapshots
    /// fingerprinted since, to keep later.
    held: Mutex<Option<Held>>,
}

impl Drop for Snapshots {
    /// What was held back and not yet kept, as a run that ends early
    /// would have kept it.
    fn drop(&mut self) {
        self.save_held();
    }
}

impl Snapshots {
    /// The builds `store` keeps the fingerprints of, and its function
    /// table; blind to no checkout's directories until [`Snapshots::blind_to`].
    pub fn new(store: Store) -> Snapshots {
        Snapshots {
            table: FunctionTable::load_within(store.state().clone(), &store.functions_dir()),
            store,
            checkout: Placeholders::default(),
            builds: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashMap::new()),
            compared: Mutex::new(HashMap::new()),
            held: Mutex::new(None),
        }
    }

    /// Keeps the snapshots fingerprinted from now on in memory until
    /// [`Snapshots::save_held`] (or the end of this value), rather than as
    /// each is made: compressing one for keeping takes a good part of the
    /// time it took to make, which a run that gives verdicts first spends
    /// after them. A snapshot is a cache by the build's checksum; one not
    /// kept is only made again.
    pub fn hold_saves(&self) {
        let mut held = self.held.lock().expect("held snapshots lock");
        held.get_or_insert_with(Vec::new);
    }

    /// Keeps the snapshots held back, and stops holding them.
    pub fn save_held(&self) {
        // Also from `drop`, where a panic would abort: a poisoned list is
        // still a list of whole snapshots.
        let held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        for (id, snapshot) in held.into_iter().flatten() {
            // As in `of_binary`: a snapshot not kept costs the next run time.
            let _ = self.store.save_snapshot(&id, &snapshot);
        }
    }

    /// Fingerprints computed from now on hash the directories of `anchors`
    /// (and the toolchain's) as placeholders where string constants name
    /// them: a checkout moved elsewhere keeps its fingerprints.
    pub fn blind_to(mut self, anchors: &Anchors, sysroot: Option<&Path>) -> Snapshots {
        self.checkout = Placeholders::new(anchors, sysroot);
        self
    }

    /// The function table records name functions by.
    pub fn table(&self) -> &FunctionTable {
        &self.table
    }

    /// The build of the executable at `binary`, whose smart checksum is
    /// `id`: from the store, or fingerprinted now (and stored).
    pub fn of_binary(&self, binary: &Path, id: &Hash) -> Result<Arc<Build>, FingerprintError> {
        if let Some(build) = self.builds.lock().expect("build cache lock").get(id) {
            return Ok(build.clone());
        }
        let snapshot = match self.store.load_snapshot(id) {
            Some(snapshot) => Arc::new(snapshot),
            None => {
                let snapshot = Arc::new(self.fingerprint(binary)?);
                match self.held.lock().expect("held snapshots lock").as_mut() {
                    Some(held) => held.push((*id, Arc::clone(&snapshot))),
                    // Not being able to keep it costs only time: the next
                    // run computes it again.
                    None => {
                        let _ = self.store.save_snapshot(id, &snapshot);
                    }
                }
                snapshot
            }
        };
        let build = Arc::new(Build::new(*id, snapshot));
        self.builds
            .lock()
            .expect("build cache lock")
            .insert(*id, build.clone());
        Ok(build)
    }

    /// Fingerprints the executable at `binary` with its linker map, then
    /// keeps the map's extents and removes the map (it is read once per
    /// build: the snapshot is stored); or, the map gone, with the extents
    /// kept of it.
    fn fingerprint(&self, binary: &Path) -> Result<Snapshot, FingerprintError> {
        if let Some(map) = map_path(binary) {
            match fingerprint::fingerprint_file(
                binary,
                ExtentSource::Map(map.clone()),
                &self.checkout,
            ) {
                Ok((snapshot, extents)) => {
                    // Keeping them costs only disk if it fails: the map
                    // stays.
                    let loaded = crate::digests::mapped::bytes(binary)
                        .ok()
                        .and_then(|data| kept::loaded_digest(&data));
                    if let Some(loaded) = loaded
                        && kept::write(&kept::beside_map(&map), &loaded, &extents).is_ok()
                    {
                        let _ = std::fs::remove_file(&map);
                    }
                    return Ok(snapshot);
                }
                // Another run may have just kept its extents and removed it.
                Err(e) if map.exists() => return Err(e),
                Err(_) => {}
            }
        }
        let extents = kept_extents(binary).ok_or(FingerprintError::NoMap)?;
        fingerprint::fingerprint_file(binary, ExtentSource::Kept(extents), &self.checkout)
            .map(|(snapshot, _)| snapshot)
    }

    /// The builds loaded or fingerprinted in this run (the ones whose
    /// snapshots are worth keeping for the next).
    pub fn used(&self) -> HashSet<Hash> {
        self.builds
            .lock()
            .expect("build cache lock")
            .keys()
            .copied()
            .collect()
    }

    /// Keeps a build's uninstrumented table, for records that name it.
    pub fn keep_uninstrumented(&self, build: &Build) -> std::io::Result<()> {
        self.store
            .save_uninstrumented(&build.uninstrumented_id(), build.uninstrumented())
    }

    /// The uninstrumented functions of the recorded table `recorded` whose
    /// fingerprints differ in `now`, demangled (at most [`NAMED_CHANGES`]);
    /// `None` when the recorded table is gone.
    pub(crate) fn uninstrumented_changes(
        &self,
        recorded: &Hash,
        now: &Build,
    ) -> Option<Arc<Vec<String>>> {
        let key = (*recorded, now.id);
        if let Some(known) = self.compared.lock().expect("comparison lock").get(&key) {
            return Some(known.clone());
        }
        let old = self
            .tables
            .lock()
            .expect("table cache lock")
            .entry(*recorded)
            .or_insert_with(|| self.store.load_uninstrumented(recorded).map(Arc::new))
            .clone()?;
        let changed: Arc<Vec<String>> = Arc::new(
            old.changes(now.uninstrumented())
                .into_iter()
                .take(NAMED_CHANGES)
                .map(fingerprint::demangle)
                .collect(),
        );
        self.compared
            .lock()
            .expect("comparison lock")
            .insert(key, changed.clone());
        Some(changed)
    }
}
