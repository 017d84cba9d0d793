//! Executed functions kept once per program, and dependencies once per
//! workspace, not once per test ([`Sets`]: [`FnSets`] and [`FnSet`],
//! [`DepSets`] and [`DepSet`]).
//!
//! A record lists the functions its test executed, 8 bytes an id. On
//! coreutils that was 77 % of the records' bytes: each test ran about
//! 2 900 functions of the multicall program, most of them the same start-up
//! code. So a record file keeps its list as a set over a *base*: a list of
//! ids kept once, in the order they were first seen, so that what every
//! test executes comes first and a test's set, a bitset over the base's
//! positions, compresses to a few hundred bytes.
//!
//! ```text
//! .sets/<digest>   a link: sealed (the link before it, more ids)
//! .sets/heads      per program, the link new records are written against
//! .deps/<digest>   likewise, of dependencies (a path or variable with its
//! .deps/heads      checksum): on coreutils, 4 903 records named 6 550
//!                  distinct ones 225 000 times
//! ```
//! A base is a chain of links, each adding ids to the one before: a run
//! that meets new functions adds a link, and records written before and
//! after it share everything but the new ids. A link is named by its seal's
//! digest and checked against that name when read, so links are content:
//! two state directories merge by copying them, and a forged or damaged link
//! is never taken. A link is written *before* any record that names it; a
//! record whose base is missing or damaged does not decode, and its test
//! runs. Losing `heads` costs bytes, never a record: the next run starts a
//! new chain.

use crate::files::contained::StateDir;
use crate::files::sealed::{open, seal};
use crate::model::code_dep::FnId;
use crate::model::dep::Dep;
use crate::model::dep::Hash;
use crate::storage::chains::{
    Chains, Item, Link, MAX_BASE, MAX_LINK_BYTES, ids_at, seal_link, set_bits,
};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const HEADS_MAGIC: &[u8; 4] = b"EKZN";
/// A set this small is kept as its ids: a base would cost more.
const INLINE_BELOW: usize = 16;
/// A record that brings this many ids its base lacks adds a link of them
/// at once...
const LINK_FROM: usize = 32;
/// ...and ids brought a few at a time are kept in their records until
/// this many are waiting, or until a second record brings one of them,
/// then linked together. An id only one record holds (a test's own
/// temporary directory) costs little kept in it; one that many hold
/// (the files of a utility's tests, read by every one of them) cost each
/// record its whole bytes until linked: on coreutils, dependencies waiting
/// for 256 others took 400 bytes a record.
const PENDING_LINK: usize = 256;
const MAX_HEADS_BYTES: u64 = 16 << 20;
/// The file naming each program's newest base, beside the links.
pub(crate) const HEADS: &str = "heads";

/// The key of the base a record of test binary `binary` keeps its
/// functions in `unit` against: per binary and program, since a test
/// binary's functions are its own.
pub fn base_key(binary: &str, unit: &crate::model::code_dep::CodeUnit) -> String {
    format!("{binary}\n{unit}")
}

/// The key of the base a record of any test binary keeps its
/// dependencies against: one per workspace, since tests of every binary
/// read the same files.
pub const DEPS_KEY: &str = "deps";

/// A base as the history cuts records by it (`history::objects`): each
/// id's position, and the links it is made of.
#[derive(Clone, Debug)]
pub struct Order {
    /// Each id's position in the base.
    pub positions: Arc<HashMap<FnId, u32>>,
    path: Arc<[Arc<Link>]>,
}

impl Order {
    /// The names of the base's links, first to last.
    pub fn links(&self) -> impl Iterator<Item = Hash> + '_ {
        self.path.iter().map(|link| link.name)
    }

    /// The base's length up to and with link `index` of [`Order::links`].
    pub fn end_of(&self, index: usize) -> usize {
        self.path[index].end()
    }

    /// The index in [`Order::links`] of the link holding `position`.
    pub fn covering(&self, position: usize) -> Option<usize> {
        let i = self.path.partition_point(|link| link.end() <= position);
        (i < self.path.len()).then_some(i)
    }
}

/// A record's items of one kind in one base, as its file keeps them: the
/// items at `bits`' set positions of the base `base`, and `extra`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "T: Item")]
pub struct Set<T> {
    /// The link whose chain is the base, if any.
    pub base: Option<Hash>,
    /// A bitset over the base's positions, zstd-compressed or as it is
    /// ([`Packing`]: the container says which).
    pub bits: Vec<u8>,
    /// Items kept as they are: a short set's, or those its base lacks.
    pub extra: Vec<T>,
}

impl<T> Default for Set<T> {
    fn default() -> Self {
        Set {
            base: None,
            bits: Vec::new(),
            extra: Vec::new(),
        }
    }
}

/// A record's executed functions in one program.
pub type FnSet = Set<FnId>;
/// A record's dependencies.
pub type DepSet = Set<Dep>;

/// The bases of one kind of a state directory: links read once and kept,
/// and per key the base this process writes records against.
#[derive(Debug)]
pub struct Sets<T: Item> {
    state: StateDir,
    dir: PathBuf,
    inner: Mutex<Inner<T>>,
}

/// Bases of executed functions, one per program (`.sets/`).
pub type FnSets = Sets<FnId>;
/// Bases of dependencies, one per workspace (`.deps/`).
pub type DepSets = Sets<Dep>;

#[derive(Debug)]
struct Inner<T> {
    chains: Chains<T>,
    /// `heads`, read when a record is first written.
    heads: Option<HashMap<String, Hash>>,
    tips: HashMap<String, Tip<T>>,
}

impl<T> Default for Inner<T> {
    fn default() -> Self {
        Inner {
            chains: Chains::default(),
            heads: None,
            tips: HashMap::new(),
        }
    }
}

/// The base records of one program are written against.
#[derive(Debug)]
struct Tip<T> {
    link: Option<usize>,
    /// Shared with the history, which cuts records by them
    /// ([`FnSets::order`]).
    positions: Arc<HashMap<T, u32>>,
    /// Ids records kept as `extra` since the last link.
    pending: Vec<T>,
    pending_set: HashSet<T>,
}

impl<T> Default for Tip<T> {
    fn default() -> Self {
        Tip {
            link: None,
            positions: Arc::default(),
            pending: Vec::new(),
            pending_set: HashSet::new(),
        }
    }
}

impl<T: Item> Tip<T> {
    /// Gives `ids` the positions from `start` on.
    fn place(&mut self, start: usize, ids: &[T]) {
        let positions = Arc::make_mut(&mut self.positions);
        for (k, id) in ids.iter().enumerate() {
            positions.insert(
                id.clone(),
                u32::try_from(start + k).expect("a base fits in u32"),
            );
        }
    }
}

impl<T: Item> Sets<T> {
    /// The bases kept in `dir`, inside the state directory `state`.
    pub fn new(state: StateDir, dir: &Path) -> Sets<T> {
        Sets {
            state,
            dir: dir.to_path_buf(),
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `ids` (none repeated) as a record keeps them against the base of
    /// `key`, adding a link to the base first when they bring enough new
    /// ids, the bitset compressed ([`Packing::Zstd`]). A link that cannot
    /// be written leaves the ids in the record.
    pub fn encode(&self, key: &str, ids: Vec<T>) -> Set<T> {
        self.encode_packed(key, ids, Packing::Zstd)
    }

    /// [`Sets::encode`], the bitset kept as `packing` says.
    pub fn encode_packed(&self, key: &str, ids: Vec<T>, packing: Packing) -> Set<T> {
        if ids.len() < INLINE_BELOW {
            return Set {
                extra: ids,
                ..Set::default()
            };
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let tip = self.tip(inner, key);
        let new: Vec<T> = ids
            .iter()
            .filter(|id| !tip.positions.contains_key(*id))
            .cloned()
            .collect();
        let waiting = tip.pending.len() + new.len();
        let shared = new.iter().any(|id| tip.pending_set.contains(id));
        if tip.link.is_none() || new.len() >= LINK_FROM || waiting >= PENDING_LINK || shared {
            // Failing to write a link costs only bytes: the ids stay extra.
            let _ = self.extend(inner, key, &new);
        }
        let tip = inner.tips.get_mut(key).expect("just inserted");
        let Some(link) = tip.link else {
            return Set {
                extra: ids,
                ..Set::default()
            };
        };
        let len = inner.chains.link(link).end();
        let mut bitset = vec![0u8; len.div_ceil(8)];
        let mut extra = Vec::new();
        for id in ids {
            match tip.positions.get(&id) {
                Some(&p) => bitset[p as usize / 8] |= 1 << (p % 8),
                None => {
                    if tip.pending_set.insert(id.clone()) {
                        tip.pending.push(id.clone());
                    }
                    extra.push(id);
                }
            }
        }
        Set {
            base: Some(inner.chains.link(link).name),
            bits: match packing {
                Packing::Zstd => {
                    zstd::bulk::compress(&bitset, 3).expect("compressing to memory cannot fail")
                }
                Packing::Raw => bitset,
            },
            extra,
        }
    }
}

impl FnSets {
    /// The base `key`'s records are written against (read from `heads` if
    /// no record was written yet); `None` when there is none.
    pub fn order(&self, key: &str) -> Option<Order> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let tip = self.tip(inner, key);
        let (link, positions) = (tip.link?, tip.positions.clone());
        Some(Order {
            positions,
            path: inner.chains.path_to(link),
        })
    }
}

impl<T: Item> Sets<T> {
    /// The base `key`'s records are written against: the one this process
    /// extended, else the first ([`FnSets::first_tip`]).
    fn tip<'a>(&self, inner: &'a mut Inner<T>, key: &str) -> &'a mut Tip<T> {
        if !inner.tips.contains_key(key) {
            let tip = self.first_tip(inner, key);
            inner.tips.insert(key.to_owned(), tip);
        }
        inner.tips.get_mut(key).expect("just inserted")
    }

    /// The base a process starts writing `key`'s records against: the one
    /// `heads` names, if it can be read whole.
    fn first_tip(&self, inner: &mut Inner<T>, key: &str) -> Tip<T> {
        let head = self.heads(inner).get(key).copied();
        let Some(link) = head.and_then(|head| self.resolve(inner, &head)) else {
            return Tip::default();
        };
        let mut tip = Tip {
            link: Some(link),
            ..Tip::default()
        };
        for i in inner.chains.path_of(link) {
            let link = inner.chains.link(i);
            tip.place(link.start, &link.ids);
        }
        tip
    }

    /// `heads`, read on first use.
    fn heads<'a>(&self, inner: &'a mut Inner<T>) -> &'a mut HashMap<String, Hash> {
        inner.heads.get_or_insert_with(|| self.read_heads())
    }

    /// Adds a link of `key`'s waiting ids and `new` to its base (or starts
    /// a base, when there is none or it is full), and names it in `heads`.
    fn extend(&self, inner: &mut Inner<T>, key: &str, new: &[T]) -> io::Result<()> {
        let tip = inner.tips.get_mut(key).expect("tip made first");
        let mut ids = std::mem::take(&mut tip.pending);
        tip.pending_set.clear();
        let mut seen: HashSet<T> = ids.iter().cloned().collect();
        ids.extend(new.iter().filter(|id| seen.insert((*id).clone())).cloned());
        let full = tip.positions.len() + ids.len() > MAX_BASE;
        if full {
            tip.positions = Arc::default();
            tip.link = None;
        }
        let parent = tip.link;
        let written = seal_link(parent.map(|p| inner.chains.link(p).name), &ids).and_then(
            |(name, sealed)| {
                self.state.make_dir(&self.dir)?;
                self.state.write_atomic(&self.link_path(&name), &sealed)?;
                Ok(name)
            },
        );
        let name = match written {
            Ok(name) => name,
            Err(e) => {
                // Put back what was waiting, so that it is linked later.
                let tip = inner.tips.get_mut(key).expect("tip made first");
                tip.pending_set.extend(ids.iter().cloned());
                tip.pending = ids;
                return Err(e);
            }
        };
        let tip = inner.tips.get_mut(key).expect("tip made first");
        let start = tip.positions.len();
        tip.place(start, &ids);
        tip.link = Some(inner.chains.add(name, parent, start, ids));
        let heads = self.heads(inner);
        heads.insert(key.to_owned(), name);
        let mut listed: Vec<(&String, &Hash)> = heads.iter().collect();
        listed.sort();
        // Not being able to name it costs bytes only (see the module).
        let _ = self.state.write_atomic(
            &self.dir.join(HEADS),
            &seal(
                HEADS_MAGIC,
                &postcard::to_stdvec(&listed).map_err(io::Error::other)?,
            ),
        );
        Ok(())
    }

    fn read_heads(&self) -> HashMap<String, Hash> {
        self.state
            .read_bounded(&self.dir.join(HEADS), MAX_HEADS_BYTES)
            .ok()
            .and_then(|bytes| open::<Vec<(String, Hash)>>(HEADS_MAGIC, &bytes).ok())
            .map(|listed| listed.into_iter().collect())
            .unwrap_or_default()
    }

    fn link_path(&self, name: &Hash) -> PathBuf {
        self.dir
            .join(blake3::Hash::from_bytes(*name).to_hex().as_str())
    }

    /// The link `name` and the chain before it, read from this
    /// directory ([`Chains::resolve`]).
    fn resolve(&self, inner: &mut Inner<T>, name: &Hash) -> Option<usize> {
        inner.chains.resolve(name, |name| self.link_file(name))
    }

    /// The sealed bytes of the link `name` as its file holds them
    /// (unchecked), if it can be read.
    pub fn link_file(&self, name: &Hash) -> Option<Vec<u8>> {
        self.state
            .read_bounded(&self.link_path(name), MAX_LINK_BYTES)
            .ok()
    }

    /// The ids `set` stands for, in their one order ([`Item::canonical`]);
    /// `None` when its base is missing or damaged, or the set does not
    /// fit it.
    pub fn decode(&self, set: &Set<T>) -> Option<Vec<T>> {
        self.decode_packed(set, Packing::Zstd)
    }

    /// [`Sets::decode`] of a set whose bitset is kept as `packing` says.
    pub fn decode_packed(&self, set: &Set<T>, packing: Packing) -> Option<Vec<T>> {
        decode_with(set, packing, |base| {
            self.lock()
                .chains
                .path_named(base, |name| self.link_file(name))
        })
    }

    /// The names of the links on the chain of `name`, first to last, if it
    /// resolves (what the history copies to keep a set readable).
    pub fn chain(&self, name: &Hash) -> Option<Vec<Hash>> {
        let mut inner = self.lock();
        inner.chains.names(name, |name| self.link_file(name))
    }

    /// The links on the chains of `keep` and of `heads`: what a sweep of
    /// the directory keeps (`Store::retain_sets`).
    pub fn kept(&self, keep: &HashSet<Hash>) -> HashSet<Hash> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let heads: Vec<Hash> = self.heads(inner).values().copied().collect();
        let mut kept = HashSet::new();
        for name in keep.iter().chain(&heads) {
            if let Some(tip) = self.resolve(inner, name) {
                kept.extend(
                    inner
                        .chains
                        .path_of(tip)
                        .into_iter()
                        .map(|i| inner.chains.link(i).name),
                );
            }
        }
        kept
    }
}

/// How a set's bitset is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// zstd-compressed, for a set kept alone (the history's chunks).
    Zstd,
    /// As it is, for a set inside something compressed whole (a record
    /// file): compressed with the rest, by the state's dictionary, which
    /// holds what every test's bitset begins with. On coreutils the
    /// records' sets of functions took 3.2 MB so, against 4.3 MB
    /// compressed one by one.
    Raw,
}

/// The items `set` stands for, in their one order, its base's chain
/// given by `path_of` (wherever its links are kept); `None` when the
/// chain cannot be had, or the set does not fit it.
pub(crate) fn decode_with<T: Item>(
    set: &Set<T>,
    packing: Packing,
    path_of: impl FnOnce(&Hash) -> Option<Arc<[Arc<Link<T>>]>>,
) -> Option<Vec<T>> {
    match &set.base {
        None => T::canonical(set.extra.clone()),
        Some(base) => items_of(&path_of(base)?, set, packing),
    }
}

/// The items `set` stands for against the base made of `path` (its
/// base's chain), in their one order; `None` if the set does not fit it.
pub(crate) fn items_of<T: Item>(
    path: &[Arc<Link<T>>],
    set: &Set<T>,
    packing: Packing,
) -> Option<Vec<T>> {
    let len = path.last()?.end();
    let bytes = len.div_ceil(8);
    let bitset: std::borrow::Cow<'_, [u8]> = match packing {
        Packing::Zstd => crate::files::sealed::unpack(&set.bits, bytes as u64)?.into(),
        Packing::Raw => (&set.bits[..]).into(),
    };
    if bitset.len() != bytes || (!len.is_multiple_of(8) && bitset[bytes - 1] >> (len % 8) != 0) {
        return None;
    }
    // Sized exactly: a coreutils analysis holds every record at once.
    let count: usize = bitset.iter().map(|b| b.count_ones() as usize).sum();
    let mut ids = ids_at(path, set_bits(&bitset, 0), count + set.extra.len())?;
    ids.extend_from_slice(&set.extra);
    T::canonical(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(range: std::ops::Range<u32>) -> Vec<FnId> {
        let mut ids: Vec<FnId> = range
            .map(|i| {
                let mut id = [0u8; 8];
                id[..4].copy_from_slice(&blake3::hash(&i.to_le_bytes()).as_bytes()[..4]);
                id[4..].copy_from_slice(&i.to_le_bytes());
                id
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    fn sets(dir: &Path) -> FnSets {
        FnSets::new(StateDir::new(dir), &dir.join(".sets"))
    }

    #[test]
    fn sets_share_a_base_and_decode_to_their_ids() {
        let dir = tempfile::tempdir().unwrap();
        let store = sets(dir.path());
        let first = store.encode("p", ids(0..3000));
        assert!(first.base.is_some() && first.extra.is_empty());
        // A set with a few new ids keeps them; one with many links them.
        let few = [ids(0..2500), ids(5000..5010)].concat();
        let mut few_sorted = few.clone();
        few_sorted.sort_unstable();
        let second = store.encode("p", few_sorted.clone());
        assert_eq!(second.extra.len(), 10);
        // A second record bringing them links them: many records may.
        let again_few = store.encode("p", few_sorted.clone());
        assert!(again_few.extra.is_empty());
        assert_ne!(again_few.base, second.base);
        let many = ids(1000..4000);
        let third = store.encode("p", many.clone());
        assert!(third.extra.is_empty());
        // What every set holds costs next to nothing.
        let again_first = store.encode("p", ids(0..3000));
        assert!(
            again_first.bits.len() < 100,
            "{} bytes",
            again_first.bits.len()
        );
        // Read back by another process, from the files alone.
        let again = sets(dir.path());
        assert_eq!(again.decode(&first), Some(ids(0..3000)));
        assert_eq!(again.decode(&second), Some(few_sorted));
        assert_eq!(again.decode(&third), Some(many));
        // ...which writes against the same base.
        let fourth = again.encode("p", ids(0..100));
        assert_eq!(fourth.base, third.base);
        // Short sets are kept as they are.
        assert_eq!(store.encode("p", ids(0..3)).base, None);
    }

    #[test]
    fn a_missing_or_forged_link_decodes_to_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = sets(dir.path());
        let set = store.encode("p", ids(0..300));
        let path = store.link_path(&set.base.unwrap());
        let sealed = std::fs::read(&path).unwrap();
        // Another link's content under this name.
        let other = sets(tempfile::tempdir().unwrap().path());
        let (_, forged) = crate::storage::chains::seal_link(None, &ids(1..301)).unwrap();
        std::fs::write(&path, &forged).unwrap();
        assert_eq!(sets(dir.path()).decode(&set), None);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(sets(dir.path()).decode(&set), None);
        std::fs::write(&path, &sealed).unwrap();
        assert_eq!(sets(dir.path()).decode(&set), Some(ids(0..300)));
        // Bits beyond the base, or an extra id the base holds: refused.
        let mut wide = set.clone();
        wide.bits = zstd::bulk::compress(&[0xff; 64], 3).unwrap();
        assert_eq!(other.decode(&wide), None);
        assert_eq!(sets(dir.path()).decode(&wide), None);
        let mut repeated = set.clone();
        repeated.extra = vec![ids(0..300)[7]];
        assert_eq!(sets(dir.path()).decode(&repeated), None);
    }

    #[test]
    fn retain_keeps_the_chains_named_and_the_heads() {
        use crate::storage::store::Store;
        let dir = tempfile::tempdir().unwrap();
        let sets_dir = dir
            .path()
            .join(format!("v{}/.sets", crate::files::sealed::FORMAT_VERSION));
        let store = Store::new(dir.path());
        let old = store.sets().encode("a", ids(0..300));
        let newer = store.sets().encode("a", ids(0..600));
        let gone = store.sets().encode("b", ids(700..800));
        // Without heads, only what is named is kept.
        std::fs::remove_file(sets_dir.join(HEADS)).unwrap();
        std::fs::write(sets_dir.join(".tmpcut"), b"half").unwrap();
        let store = Store::new(dir.path());
        let keep = HashSet::from([newer.base.unwrap()]);
        assert_eq!(store.retain_sets(&keep).unwrap(), 1);
        assert!(!sets_dir.join(".tmpcut").exists());
        assert_eq!(store.sets().decode(&old), Some(ids(0..300)));
        assert_eq!(store.sets().decode(&newer), Some(ids(0..600)));
        assert_eq!(Store::new(dir.path()).sets().decode(&gone), None);
    }
}
