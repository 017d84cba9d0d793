//! Chains of links: what a base of executed functions, or of
//! dependencies, is made of (`fn_sets`), read and checked once, wherever
//! the links are kept.
//!
//! A link is sealed (the link before it, more items) and named by its
//! seal's digest; each kind of item ([`Item`]) seals its links with its
//! own magic, so that a link of one kind is never read as the other. The
//! store keeps links as files in `.sets/` and `.deps/`, and the history
//! keeps copies of them among its objects, so that a record it filed
//! outlives the store's base. Both read them through [`Chains`], given a
//! way to fetch a link's bytes by name.
//!
//! Invariant: a link is taken only if its bytes are sealed with its name,
//! and a chain only if every link on it is, and it is at most
//! `MAX_BASE` ids and `MAX_DEPTH` links long. Anything else is no
//! chain, and what names it decodes to nothing.

use crate::files::sealed::{name_of, named, open, seal};
use crate::model::code_dep::FnId;
use crate::model::dep::{Dep, Hash};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

/// What a base holds: executed functions' ids, or dependencies.
pub trait Item:
    Clone + Eq + std::hash::Hash + Serialize + DeserializeOwned + Send + Sync + std::fmt::Debug
{
    /// What this kind's links are sealed with.
    const LINK_MAGIC: &'static [u8; 4];
    /// Items decoded from a set in their one order, or `None` if they
    /// cannot be a record's (an item repeated).
    fn canonical(items: Vec<Self>) -> Option<Vec<Self>>;
}

impl Item for FnId {
    /// Not `EKZL`, which snapshots once had (`store`'s list of retired
    /// magics).
    const LINK_MAGIC: &'static [u8; 4] = b"EKZE";

    /// Sorted as integers: an analysis that reads every record sorts
    /// millions of ids.
    fn canonical(ids: Vec<FnId>) -> Option<Vec<FnId>> {
        let mut keys: Vec<u64> = ids.into_iter().map(u64::from_be_bytes).collect();
        keys.sort_unstable();
        keys.windows(2)
            .all(|w| w[0] < w[1])
            .then(|| keys.into_iter().map(u64::to_be_bytes).collect())
    }
}

impl Item for Dep {
    const LINK_MAGIC: &'static [u8; 4] = b"EKZJ";

    /// By target, as records are written (`model::dep::sort`).
    fn canonical(mut deps: Vec<Dep>) -> Option<Vec<Dep>> {
        crate::model::dep::sort(&mut deps);
        deps.windows(2).all(|w| w[0] != w[1]).then_some(deps)
    }
}

/// At most this many ids in a base (a bitset of 512 KiB): a chain this
/// long is not extended, a new one is started.
pub(crate) const MAX_BASE: usize = 4 << 20;
/// At most this many links in a chain, read before anything is kept.
const MAX_DEPTH: usize = 1 << 16;
/// A link's sealed bytes are at most this long.
pub(crate) const MAX_LINK_BYTES: u64 = (MAX_BASE as u64) * 8 + (1 << 10);

#[derive(Serialize, Deserialize)]
#[serde(bound = "T: Item")]
struct LinkFile<T> {
    parent: Option<Hash>,
    ids: Vec<T>,
}

/// A link's sealed bytes, and its name; refused when longer than a
/// reader takes ([`MAX_LINK_BYTES`]).
pub(crate) fn seal_link<T: Item>(parent: Option<Hash>, ids: &[T]) -> io::Result<(Hash, Vec<u8>)> {
    let sealed = seal(
        T::LINK_MAGIC,
        &postcard::to_stdvec(&LinkFile {
            parent,
            ids: ids.to_vec(),
        })
        .map_err(io::Error::other)?,
    );
    if sealed.len() as u64 > MAX_LINK_BYTES {
        return Err(io::Error::other("a link longer than its readers take"));
    }
    Ok((name_of(&sealed)?, sealed))
}

/// A link read and placed in its chain.
#[derive(Debug)]
pub(crate) struct Link<T = FnId> {
    pub(crate) name: Hash,
    pub(crate) parent: Option<usize>,
    /// The base's position of this link's first id.
    pub(crate) start: usize,
    pub(crate) ids: Vec<T>,
}

impl<T> Link<T> {
    /// The base's length up to and with this link.
    pub(crate) fn end(&self) -> usize {
        self.start + self.ids.len()
    }
}

/// Links read and checked, by name, and the chains they form.
#[derive(Debug)]
pub struct Chains<T = FnId> {
    /// Shared, so that a set is decoded without holding a lock.
    links: Vec<Arc<Link<T>>>,
    /// Per link, its chain (see [`Chains::path_to`]).
    paths: HashMap<usize, Arc<[Arc<Link<T>>]>>,
    by_name: HashMap<Hash, usize>,
}

impl<T> Default for Chains<T> {
    fn default() -> Self {
        Chains {
            links: Vec::new(),
            paths: HashMap::new(),
            by_name: HashMap::new(),
        }
    }
}

impl<T: Item> Chains<T> {
    pub(crate) fn link(&self, index: usize) -> &Link<T> {
        &self.links[index]
    }

    /// Keeps a link this process wrote (`parent` already kept); its index.
    pub(crate) fn add(
        &mut self,
        name: Hash,
        parent: Option<usize>,
        start: usize,
        ids: Vec<T>,
    ) -> usize {
        if let Some(&i) = self.by_name.get(&name) {
            return i;
        }
        self.links.push(Arc::new(Link {
            name,
            parent,
            start,
            ids,
        }));
        self.by_name.insert(name, self.links.len() - 1);
        self.links.len() - 1
    }

    /// The link `name` and the chain before it, fetched by `read` and
    /// checked against their names; `None` if any is missing, damaged or
    /// out of bounds.
    pub(crate) fn resolve(
        &mut self,
        name: &Hash,
        read: impl Fn(&Hash) -> Option<Vec<u8>>,
    ) -> Option<usize> {
        let mut unread: Vec<(Hash, LinkFile<T>)> = Vec::new();
        let mut next = Some(*name);
        let mut known = None;
        while let Some(name) = next {
            if let Some(&i) = self.by_name.get(&name) {
                known = Some(i);
                break;
            }
            if unread.len() >= MAX_DEPTH {
                return None;
            }
            let bytes = read(&name)?;
            if !named(&bytes, &name) {
                return None;
            }
            let link: LinkFile<T> = open(T::LINK_MAGIC, &bytes).ok()?;
            next = link.parent;
            unread.push((name, link));
        }
        let mut parent = known;
        let mut len = known.map_or(0, |i| self.links[i].end());
        // Checked whole before any is kept.
        if len + unread.iter().map(|(_, l)| l.ids.len()).sum::<usize>() > MAX_BASE {
            return None;
        }
        for (name, link) in unread.into_iter().rev() {
            let count = link.ids.len();
            parent = Some(self.add(name, parent, len, link.ids));
            len += count;
        }
        parent
    }

    /// The chain of the link `name`, first to last ([`Chains::resolve`],
    /// then [`Chains::path_to`]).
    pub(crate) fn path_named(
        &mut self,
        name: &Hash,
        read: impl Fn(&Hash) -> Option<Vec<u8>>,
    ) -> Option<Arc<[Arc<Link<T>>]>> {
        let tip = self.resolve(name, read)?;
        Some(self.path_to(tip))
    }

    /// The links of `tip`'s chain, first to last, kept for the next set of
    /// the same base.
    pub(crate) fn path_to(&mut self, tip: usize) -> Arc<[Arc<Link<T>>]> {
        if let Some(path) = self.paths.get(&tip) {
            return path.clone();
        }
        let path: Arc<[Arc<Link<T>>]> = self
            .path_of(tip)
            .into_iter()
            .map(|i| self.links[i].clone())
            .collect();
        self.paths.insert(tip, path.clone());
        path
    }

    /// The links of `tip`'s chain, first to last.
    pub(crate) fn path_of(&self, tip: usize) -> Vec<usize> {
        let mut path = vec![tip];
        while let Some(parent) = self.links[*path.last().expect("never empty")].parent {
            path.push(parent);
        }
        path.reverse();
        path
    }

    /// The names of the links on the chain of `name`, if it resolves.
    pub(crate) fn names(
        &mut self,
        name: &Hash,
        read: impl Fn(&Hash) -> Option<Vec<u8>>,
    ) -> Option<Vec<Hash>> {
        let tip = self.resolve(name, read)?;
        Some(
            self.path_of(tip)
                .into_iter()
                .map(|i| self.links[i].name)
                .collect(),
        )
    }
}

/// The ids at `positions` (ascending) of the base made of `path`; `None`
/// if a position is past its end.
pub(crate) fn ids_at<T: Clone>(
    path: &[Arc<Link<T>>],
    positions: impl Iterator<Item = usize>,
    capacity: usize,
) -> Option<Vec<T>> {
    let mut ids = Vec::with_capacity(capacity);
    let mut on = path.iter().peekable();
    for p in positions {
        while let Some(link) = on.peek() {
            if p < link.end() {
                break;
            }
            on.next();
        }
        let link = on.peek()?;
        ids.push(link.ids.get(p.checked_sub(link.start)?)?.clone());
    }
    Some(ids)
}

/// The positions set in `bitset`, each plus `start`, ascending.
pub(crate) fn set_bits(bitset: &[u8], start: usize) -> impl Iterator<Item = usize> + '_ {
    bitset.iter().enumerate().flat_map(move |(at, &byte)| {
        let mut byte = byte;
        std::iter::from_fn(move || {
            if byte == 0 {
                return None;
            }
            let p = start + at * 8 + byte.trailing_zeros() as usize;
            byte &= byte - 1;
            Some(p)
        })
    })
}
