//! Code dependencies at function granularity: which functions of which
//! program a test executed, and whether any of them changed.
//!
//! A record keeps, per program, the smart checksum of the build the test ran
//! ([`crate::model::code_dep::CodeDep::build`]), the ids of the functions it executed (a digest of
//! name and fingerprint each, resolved by the [`FunctionTable`]) and the
//! digest of the table of the program's uninstrumented functions. Nothing in
//! it depends on where a function sat in one build, so a rebuild that leaves
//! a test's functions alone leaves its record as it was. Selection asks the
//! present build whether it still has each function with the same
//! fingerprint ([`Build`]), and names the ones it has not.

use crate::digests::fingerprint::{Fp, Snapshot};
use crate::digests::functions::{Collision, FunctionTable};
use crate::digests::prehashed::PrehashedState;
use crate::model::code_dep::FnId;
use crate::model::dep::Hash;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// A program's functions compiled without coverage (the standard library, C
/// code), by name: no coverage names them, so every test of the program
/// depends on all of them. Stored once per distinct table, by its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uninstrumented {
    /// Sorted.
    pub names: Vec<String>,
    /// `fps[i]` is the fingerprint of `names[i]`.
    pub fps: Vec<Fp>,
}

impl Uninstrumented {
    /// The uninstrumented functions of a build's snapshot.
    pub fn of(snapshot: &Snapshot) -> Uninstrumented {
        Uninstrumented {
            names: snapshot.other_names.iter().collect(),
            fps: snapshot.other_fps.clone(),
        }
    }

    /// The digest records name this table by (`CodeDep::uninstrumented`).
    pub fn digest(&self) -> Hash {
        let body = postcard::to_stdvec(self).expect("a table always serialises");
        *blake3::hash(&body).as_bytes()
    }

    /// Whether it is well formed: sorted, one fingerprint per name.
    pub fn is_consistent(&self) -> bool {
        self.fps.len() == self.names.len() && self.names.windows(2).all(|w| w[0] < w[1])
    }

    /// The functions present in both tables whose fingerprints differ. A
    /// function only added or only removed changes no test's behaviour by
    /// itself: an instrumented function had to change to start or stop
    /// reaching it, and that change is seen there.
    pub fn changes<'a>(&'a self, new: &Uninstrumented) -> Vec<&'a str> {
        self.names
            .iter()
            .zip(&self.fps)
            .filter(|(name, fp)| {
                new.names
                    .binary_search(name)
                    .is_ok_and(|i| new.fps[i] != **fp)
            })
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

/// A program's build as selection compares records with it: its
/// fingerprints, and the ids of all its functions, so that a recorded
/// function still present with the same fingerprint is one set lookup.
pub struct Build {
    /// The executable's smart checksum: what records keep as the build a test
    /// ran.
    pub id: Hash,
    /// Every function of the build, with its fingerprint.
    pub snapshot: Arc<Snapshot>,
    /// Worked out on first use: a run where nothing changed compares no
    /// record with a new build, and pays for none of this.
    /// Function ids are digests already: their bytes are the hash.
    ids: OnceLock<HashSet<FnId, PrehashedState>>,
    /// Per function (index into the snapshot's names), its id, on first use.
    ids_by_index: OnceLock<Vec<FnId>>,
    /// The function indexes ordered by id, and each function's place in
    /// that order (its rank), on first use.
    id_order: OnceLock<IdOrder>,
    /// Each flag's function index, looked up by address, on first use.
    flag_table: OnceLock<Option<FlagTable>>,
    /// Per function, whether it was interned into the table whose epoch
    /// is kept beside: a run records thousands of tests that execute the
    /// same functions, and need not hash and look each up every time.
    interned: Mutex<(u64, Vec<bool>)>,
    /// Per function (index into the snapshot's names), its stable name's
    /// hash, on first use.
    stable: OnceLock<Vec<u64>>,
    /// The uninstrumented functions and their table's digest, on first use.
    uninstrumented: OnceLock<(Uninstrumented, Hash)>,
}

impl Build {
    /// The build whose smart checksum is `id`, of these fingerprints.
    pub fn new(id: Hash, snapshot: Arc<Snapshot>) -> Build {
        Build {
            id,
            snapshot,
            ids: OnceLock::new(),
            ids_by_index: OnceLock::new(),
            id_order: OnceLock::new(),
            flag_table: OnceLock::new(),
            interned: Mutex::new((0, Vec::new())),
            stable: OnceLock::new(),
            uninstrumented: OnceLock::new(),
        }
    }

    fn stable(&self) -> &[u64] {
        self.stable.get_or_init(|| {
            let mut by_index = vec![0; self.snapshot.names.len()];
            for &(hash, i) in &self.snapshot.stable {
                by_index[i as usize] = hash;
            }
            by_index
        })
    }

    fn ids(&self) -> &HashSet<FnId, PrehashedState> {
        self.ids
            .get_or_init(|| self.ids_by_index().iter().copied().collect())
    }

    fn ids_by_index(&self) -> &[FnId] {
        self.ids_by_index.get_or_init(|| {
            self.stable()
                .iter()
                .zip(&self.snapshot.fps)
                .map(|(stable, fp)| crate::digests::functions::id_of(*stable, fp))
                .collect()
        })
    }

    /// Whether this build has the function `id` stands for: one of the same
    /// stable name and fingerprint. Decided from the build alone; the table
    /// is only asked for the name of what is not here.
    pub fn has(&self, id: &FnId) -> bool {
        self.ids().contains(id)
    }

    /// What became of a recorded function in this build.
    pub(crate) fn fate(&self, id: &FnId, table: &FunctionTable) -> Fate {
        if self.has(id) {
            return Fate::Same;
        }
        match table.get(id) {
            None => Fate::Unknown,
            Some(function) => {
                if self
                    .snapshot
                    .with_stable_name(function.stable)
                    .next()
                    .is_some()
                {
                    Fate::Changed(function.name)
                } else {
                    Fate::Removed(function.name)
                }
            }
        }
    }

    /// The ids of the functions of these coverage flags (their addresses,
    /// sorted and without repeats, as `capture::coverage::coverage` gives them), added to
    /// the table, sorted; `Ok(None)` if one is not a function of this build
    /// (the coverage is not of this build, and cannot be trusted).
    pub fn executed(
        &self,
        flags: &[u32],
        table: &FunctionTable,
    ) -> Result<Option<Vec<FnId>>, Collision> {
        let Some(hits) = self.indexes_of_flags(flags) else {
            return Ok(None);
        };
        let by_index = self.ids_by_index();
        let mut interned = self.interned.lock().expect("interned functions lock");
        let epoch = table.epoch();
        if interned.0 != epoch {
            *interned = (epoch, vec![false; by_index.len()]);
        }
        for &index in &hits {
            let index = index as usize;
            if !interned.1[index] {
                table.intern_named_by(
                    by_index[index],
                    || self.snapshot.names.get(index),
                    self.stable()[index],
                    &self.snapshot.fps[index],
                )?;
                interned.1[index] = true;
            }
        }
        if table.epoch() != epoch {
            // The table changed meanwhile (another thread found a
            // collision): what was skipped must be asked again.
            interned.0 = 0;
            drop(interned);
            return self.executed(flags, table);
        }
        drop(interned);
        Ok(Some(self.sorted_ids(&hits)))
    }

    /// The function index of each coverage flag address, in the order
    /// given; `None` if one is not a function's flag (the caller then
    /// depends on the whole program, which is safe).
    fn indexes_of_flags(&self, addresses: &[u32]) -> Option<Vec<u32>> {
        if let Some(table) = self.flag_table() {
            return addresses.iter().map(|&a| table.index_of(a)).collect();
        }
        // Flags too far apart for a table: both lists are sorted, so each
        // search starts where the last ended and gallops.
        let all = &self.snapshot.flags;
        let mut from = 0;
        let mut hits = Vec::with_capacity(addresses.len());
        for &address in addresses {
            let address = u64::from(address);
            let rest = &all[from..];
            let mut bound = 1;
            while bound < rest.len() && rest[bound - 1].0 < address {
                bound *= 2;
            }
            let at = from + rest[..bound.min(rest.len())].partition_point(|(a, _)| *a < address);
            match all.get(at) {
                Some(&(a, index)) if a == address => hits.push(index),
                // Not a flag, or the addresses were not sorted.
                _ => return None,
            }
            from = at + 1;
        }
        Some(hits)
    }

    fn flag_table(&self) -> Option<&FlagTable> {
        self.flag_table
            .get_or_init(|| FlagTable::of(&self.snapshot.flags))
            .as_ref()
    }

    /// The ids of these functions, sorted and without repeats. A test
    /// executes thousands of a program's tens of thousands of functions:
    /// sorting their ranks (small integers) costs a fraction of sorting
    /// their ids, or of a pass over every function (`perf`, just's
    /// integration tests).
    fn sorted_ids(&self, hits: &[u32]) -> Vec<FnId> {
        let by_index = self.ids_by_index();
        let order = self.id_order();
        let mut ranks: Vec<u32> = hits.iter().map(|&i| order.rank[i as usize]).collect();
        ranks.sort_unstable();
        let mut ids: Vec<FnId> = ranks
            .iter()
            .map(|&r| by_index[order.indexes[r as usize] as usize])
            .collect();
        ids.dedup();
        ids
    }

    fn id_order(&self) -> &IdOrder {
        self.id_order.get_or_init(|| {
            let by_index = self.ids_by_index();
            let mut indexes: Vec<u32> = (0..by_index.len() as u32).collect();
            indexes.sort_unstable_by_key(|&i| by_index[i as usize]);
            let mut rank = vec![0; indexes.len()];
            for (r, &i) in indexes.iter().enumerate() {
                rank[i as usize] = r as u32;
            }
            IdOrder { indexes, rank }
        })
    }

    /// Whether any function of these coverage flags walks the whole
    /// environment; true too when a flag is not of this build (safe).
    pub fn walks_environment(&self, flags: &[u32]) -> bool {
        let walkers = &self.snapshot.environment_walkers;
        if walkers.is_empty() {
            return false;
        }
        match self.indexes_of_flags(flags) {
            Some(hits) => hits.iter().any(|i| walkers.binary_search(i).is_ok()),
            None => true,
        }
    }

    /// The table of its functions compiled without coverage.
    pub fn uninstrumented(&self) -> &Uninstrumented {
        &self.uninstrumented_table().0
    }

    /// The digest of the table of its uninstrumented functions.
    pub fn uninstrumented_id(&self) -> Hash {
        self.uninstrumented_table().1
    }

    fn uninstrumented_table(&self) -> &(Uninstrumented, Hash) {
        self.uninstrumented.get_or_init(|| {
            let table = Uninstrumented::of(&self.snapshot);
            let digest = table.digest();
            (table, digest)
        })
    }
}

/// A build's functions ordered by id.
struct IdOrder {
    /// The function indexes, ascending by id.
    indexes: Vec<u32>,
    /// Per function index, its place in `indexes`.
    rank: Vec<u32>,
}

/// A snapshot's flags as a table from address to function index. A
/// program's flags are one byte each, side by side in one section, so the
/// table is about as long as the list, and a lookup is an index.
struct FlagTable {
    first: u64,
    /// Per address from `first`, the function index; [`NOT_A_FLAG`] where
    /// no flag is.
    index: Vec<u32>,
}

const NOT_A_FLAG: u32 = u32::MAX;

impl FlagTable {
    /// `None` when the flags are spread too thinly for a table to pay.
    fn of(flags: &[(u64, u32)]) -> Option<FlagTable> {
        let first = flags.iter().map(|&(a, _)| a).min()?;
        let last = flags.iter().map(|&(a, _)| a).max()?;
        let span = usize::try_from(last - first).ok()?.checked_add(1)?;
        if span > flags.len().saturating_mul(4).saturating_add(4096) {
            return None;
        }
        let mut index = vec![NOT_A_FLAG; span];
        // Reversed, so that a repeated address keeps its first entry, as
        // the search of the sorted list finds it.
        for &(address, i) in flags.iter().rev() {
            index[(address - first) as usize] = i;
        }
        Some(FlagTable { first, index })
    }

    fn index_of(&self, address: u32) -> Option<u32> {
        let offset = u64::from(address).checked_sub(self.first)?;
        let i = *self.index.get(usize::try_from(offset).ok()?)?;
        (i != NOT_A_FLAG).then_some(i)
    }
}

/// What became of a function a test executed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fate {
    Same,
    Changed(Arc<str>),
    Removed(Arc<str>),
    /// The table does not know the id (damaged, or not merged in).
    Unknown,
}

/// Where the linker map of an instrumented executable is: next to it, or,
/// for an executable cargo copied out of `deps/` (a `[[bin]]`), next to the
/// original, found by being the same file.
pub fn map_path(binary: &Path) -> Option<PathBuf> {
    beside(binary, ".map")
}

/// Where the extents kept of an instrumented executable's map are, once
/// the map is gone (see [`crate::digests::fingerprint::kept`]): where its
/// map was.
pub fn kept_extents_path(binary: &Path) -> Option<PathBuf> {
    beside(binary, crate::digests::fingerprint::kept::SUFFIX)
}

/// The extents kept of the map of the executable at `binary`, if they were
/// kept for this very executable.
pub fn kept_extents(binary: &Path) -> Option<Vec<crate::digests::fingerprint::map::Extent>> {
    use crate::digests::fingerprint::kept;
    let path = kept_extents_path(binary)?;
    let loaded = kept::loaded_digest(&crate::digests::mapped::bytes(binary).ok()?)?;
    kept::read(&path, &loaded)
}

/// Where an instrumented executable's data extents come from: its map, or
/// what was kept of it.
pub fn extent_source(binary: &Path) -> Option<crate::digests::fingerprint::ExtentSource> {
    use crate::digests::fingerprint::ExtentSource;
    map_path(binary)
        .map(ExtentSource::Map)
        .or_else(|| kept_extents(binary).map(ExtentSource::Kept))
}

/// The file `binary` + `suffix`, or, for an executable cargo copied out of
/// `deps/`, the original's.
fn beside(binary: &Path, suffix: &str) -> Option<PathBuf> {
    let here = append(binary, suffix);
    if here.exists() {
        return Some(here);
    }
    let name = binary.file_name()?.to_str()?;
    let deps = binary.parent()?.join("deps");
    let target = std::fs::metadata(binary).ok()?;
    for entry in std::fs::read_dir(&deps).ok()?.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let candidate = file
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|hash| !hash.contains('.'));
        if candidate && same_file(&entry.path(), binary, &target) {
            let there = append(&entry.path(), suffix);
            if there.exists() {
                return Some(there);
            }
        }
    }
    None
}

/// Whether `candidate` is `binary`: the same file (a hard link), or, where
/// cargo had to copy, the same bytes.
fn same_file(candidate: &Path, binary: &Path, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(candidate).is_ok_and(|m| {
        (m.dev(), m.ino()) == (meta.dev(), meta.ino())
            || (m.len() == meta.len()
                && std::fs::read(candidate).ok() == std::fs::read(binary).ok())
    })
}

fn append(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// What tests elsewhere in the crate build snapshots with.
#[cfg(test)]
pub(crate) mod tests_support {
    use crate::digests::fingerprint::Snapshot;

    /// A build of `functions` (name, and a byte its fingerprint repeats),
    /// with an uninstrumented table told apart by `uninstrumented`.
    pub(crate) fn snapshot(functions: &[(&str, u8)], uninstrumented: u8) -> Snapshot {
        let mut functions = functions.to_vec();
        functions.sort();
        let mut stable: Vec<(u64, u32)> = functions
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (crate::digests::fingerprint::stable_hash(n), i as u32))
            .collect();
        stable.sort_unstable();
        Snapshot {
            names: functions.iter().map(|(n, _)| (*n).to_owned()).collect(),
            fps: functions.iter().map(|(_, f)| [*f; 16]).collect(),
            flags: vec![],
            stable,
            other_names: ["memcpy".to_owned(), format!("only_in_{uninstrumented}")]
                .iter()
                .collect(),
            other_fps: vec![[uninstrumented; 16], [0; 16]],
            environment_walkers: vec![],
            stats: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::snapshot;
    use super::*;

    #[test]
    fn executed_functions_come_out_sorted_by_id_however_many() {
        let names: Vec<String> = (0..100).map(|i| format!("f{i}")).collect();
        let functions: Vec<(&str, u8)> = names.iter().map(|n| (n.as_str(), 1)).collect();
        // Flags side by side (looked up in a table), and far apart (searched).
        for (spacing, looked_up) in [(16u32, true), (1 << 20, false)] {
            let mut many = snapshot(&functions, 0);
            // Flags out of the names' order, as a linker lays functions out.
            many.flags = (0..100u32)
                .map(|i| (u64::from(i * spacing), (i * 37) % 100))
                .collect();
            let build = Build::new([0; 32], Arc::new(many.clone()));
            assert_eq!(build.flag_table().is_some(), looked_up);
            let dir = tempfile::tempdir().unwrap();
            let table = FunctionTable::load(dir.path());
            let naive = |addresses: &[u32]| {
                let mut ids: Vec<FnId> = addresses
                    .iter()
                    .map(|a| {
                        let i = many.of_flag(u64::from(*a)).unwrap() as usize;
                        crate::digests::functions::id_of(
                            crate::digests::fingerprint::stable_hash(&many.names.get(i).unwrap()),
                            &many.fps[i],
                        )
                    })
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                ids
            };
            let all: Vec<u32> = (0..100).map(|i| i * spacing).collect();
            let few = [spacing, 3 * spacing, 99 * spacing];
            for addresses in [&all[..], &few, &all[..60], &all[99..], &[]] {
                assert_eq!(
                    build.executed(addresses, &table).unwrap().unwrap(),
                    naive(addresses)
                );
            }
            // An address between flags, before the first or past the last
            // is not this build's coverage.
            for addresses in [&[spacing, spacing + 1][..], &[100 * spacing], &[u32::MAX]] {
                assert_eq!(build.executed(addresses, &table), Ok(None), "{addresses:?}");
            }
            // Out of order: looked up, each address still names its own
            // function; searched, the coverage is refused. Never another
            // function.
            let unsorted = [3 * spacing, spacing];
            let expected = looked_up.then(|| naive(&unsorted));
            assert_eq!(build.executed(&unsorted, &table), Ok(expected));
        }
        let mut shifted = snapshot(&functions, 0);
        shifted.flags = (0..100u32).map(|i| (u64::from(i) + 0x1000, i)).collect();
        let build = Build::new([0; 32], Arc::new(shifted));
        assert!(build.flag_table().is_some());
        let dir = tempfile::tempdir().unwrap();
        let table = FunctionTable::load(dir.path());
        assert_eq!(build.executed(&[0xfff], &table), Ok(None));
        assert_eq!(build.executed(&[0x1000 + 100], &table), Ok(None));
        assert_eq!(
            build
                .executed(&[0x1000, 0x1063], &table)
                .unwrap()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn executed_functions_are_interned_once_and_collisions_still_surface() {
        let mut old = snapshot(&[("a", 1), ("b", 2), ("c", 3)], 0);
        old.flags = vec![(0x10, 0), (0x20, 1), (0x30, 2)];
        let build = Build::new([0; 32], Arc::new(old.clone()));
        let dir = tempfile::tempdir().unwrap();
        let table = FunctionTable::load(dir.path());
        let id = |i: usize| {
            crate::digests::functions::id_of(
                crate::digests::fingerprint::stable_hash(&old.names.get(i).unwrap()),
                &old.fps[i],
            )
        };
        let mut first = vec![id(0), id(2)];
        first.sort_unstable();
        assert_eq!(build.executed(&[0x10, 0x30], &table), Ok(Some(first)));
        assert_eq!(table.len().0, 2);
        // Asked again, and for one more: the same ids, the new one interned.
        let second = build
            .executed(&[0x10, 0x20, 0x30], &table)
            .unwrap()
            .unwrap();
        assert_eq!(second.len(), 3);
        assert!(second.contains(&id(1)));
        assert_eq!(table.len().0, 3);
        // An address that is no function's entry: not this build's coverage.
        assert_eq!(build.executed(&[0x11], &table), Ok(None));
        // Another table is asked, not trusted from the first one's answers.
        let other_dir = tempfile::tempdir().unwrap();
        crate::digests::functions::write_segment_as_is(
            other_dir.path(),
            vec![(id(0), "evil".into(), 7, [1; 16])],
        );
        let lying = FunctionTable::load(other_dir.path());
        assert_eq!(build.executed(&[0x10], &lying), Err(Collision(id(0))));
        // And a collision the first table learns of later surfaces too.
        table.absorb(&lying);
        assert_eq!(build.executed(&[0x10], &table), Err(Collision(id(0))));
        assert_eq!(build.executed(&[0x20], &table), Ok(Some(vec![id(1)])));
    }
}
