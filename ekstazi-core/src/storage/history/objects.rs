//! The history's objects: a record kept as a [`Skeleton`] (everything but
//! its long lists of executed functions) and chunks of those lists shared
//! between records, each named by the digest its seal ends with; a
//! record's id is its skeleton's name ([`record_id`]). Cutting a record
//! into parts (`cut`) and putting them back ([`History::assemble`]).
//!
//! A long list is kept as its record file keeps it: a set over its
//! program's base (`storage::fn_sets`), a bitset over the base's
//! positions up to the link holding the last of them, which it names,
//! compressed with the dictionary bodies are. The history keeps copies of the links among its objects, so that
//! its records outlive the store's base. Ids no base holds are cut by
//! their first byte, each chunk its ids end to end.
//!
//! Cut by the ids' first byte (a hash's, so spread evenly), each chunk held
//! a few of a test's own functions, tests seldom shared one, and on
//! coreutils chunks were 90 % of the history. Cut into spans of 1 024 of
//! the base's positions (`Span`, still read), the tests of one feature
//! shared most of theirs, but each span cost its name in the skeleton, an
//! entry in the pack's index and a seal: on coreutils, 9.1 MB for sets
//! their record files keep in 4.6 MB. One set per list costs that once.

use super::History;
use crate::files::sealed::{name_of, named};
use crate::model::code_dep::FnId;
use crate::model::dep::Dep;
use crate::model::dep::Hash;
use crate::model::record::Record;
use crate::storage::chains::{Chains, Item, Link, MAX_BASE, ids_at, set_bits};
use crate::storage::dicts::{self, Dict};
use crate::storage::fn_sets::{
    DEPS_KEY, DepSet, DepSets, FnSet, Order, Packing, base_key, decode_with, items_of,
};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Arc;

const SKELETON_MAGIC: &[u8; 4] = b"EKZO";
/// A skeleton compressed with the dictionary bodies are (its name, then
/// the compressed skeleton). Alone, a skeleton's toolchain, builds and
/// names compressed poorly: on coreutils, 2.4 MB of skeletons took 0.4 MB
/// with the dictionary, which holds what records repeat.
const PACKED_SKELETON_MAGIC: &[u8; 4] = b"EKZ1";
/// A skeleton unpacks to at most this much.
const MAX_SKELETON_BYTES: usize = 16 << 20;
const CHUNK_MAGIC: &[u8; 4] = b"EKZC";
const BODY_MAGIC: &[u8; 4] = b"EKZB";
/// A body compressed with a dictionary of record files (`dicts`), which
/// the history keeps a copy of: its name, then the compressed body.
const PACKED_BODY_MAGIC: &[u8; 4] = b"EKZG";
/// Bodies whose dependencies follow them as a set over the store's base
/// of dependencies ([`DepSet`]), the history keeping copies of its links:
/// plain, and compressed with a dictionary. New magics, so that a tool
/// that knows only bodies with their dependencies inline reads these as
/// nothing (its tests run), never as a body without dependencies.
const DEPS_BODY_MAGIC: &[u8; 4] = b"EKZM";
const PACKED_DEPS_BODY_MAGIC: &[u8; 4] = b"EKZZ";
/// A body unpacks to at most this much.
const MAX_BODY_BYTES: usize = 64 << 20;
/// A list of executed functions this long or longer is kept in chunks.
pub(super) const CHUNKED_FROM: usize = 256;
/// About this many ids to a chunk...
pub(super) const IDS_PER_CHUNK: usize = 128;
/// ...in at most this many chunks per list (each costs a reference in the
/// skeleton and an entry in a pack's index).
pub(super) const MAX_CHUNKS: usize = 64;

/// A span of a base's positions: which of them a record's list holds
/// (written before lists were kept as one set).
const SPAN_MAGIC: &[u8; 4] = b"EKZQ";
/// A list's ids a base holds, as a set over it ([`FnSet`]).
const SET_MAGIC: &[u8; 4] = b"EKZA";

/// The same, compressed with the dictionary bodies are, its bitset as it
/// is (`Packing::Raw`): every test's bitset begins alike, which the
/// dictionary holds. A set compressed alone (`SET_MAGIC`) is written when
/// there is no dictionary.
const PACKED_SET_MAGIC: &[u8; 4] = b"EKZ4";
/// A packed set unpacks to at most this much: a whole base's bitset.
const MAX_SET_BYTES: usize = MAX_BASE / 8 + (64 << 10);

/// How hard a set's bitset is compressed alone: as hard as record files
/// did. On coreutils, level 19 saved 0.24 MB of 5.65 and took 4 s longer
/// to file 4 903 records.
const SET_LEVEL: i32 = 3;

/// Per program (`binary\nunit`, as `fn_sets` keys bases), the base its
/// records are written against: what long lists are cut by.
pub(super) type Orders = HashMap<String, Order>;

/// How many chunks a list of `len` ids is cut into, by the ids' first
/// byte: a power of two, so that a list that grows past a boundary
/// recuts into halves, not into unrelated pieces.
pub(super) fn buckets(len: usize) -> usize {
    len.div_ceil(IDS_PER_CHUNK)
        .next_power_of_two()
        .min(MAX_CHUNKS)
}

/// A chunk kept as a bitset over positions `start`… of the base whose
/// last link is `link` (a link the history keeps a copy of, with the
/// chain before it). Read, no longer written.
#[derive(Serialize, Deserialize)]
struct Span {
    link: Hash,
    start: u32,
    bits: Vec<u8>,
}

/// A long list's chunks, sealed: first the ids `order` places, as a set
/// over the base up to the link holding the last of them; then the ids
/// `order` does not place, cut by first byte ([`buckets`]), each chunk its
/// ids end to end. The same list and order always cut the same way. Also
/// the index in `order.links()` of the last link the set needs. The set
/// is compressed with `dict` when there is one.
fn chunks_of(
    functions: Vec<FnId>,
    order: Option<&Order>,
    dict: Option<&Dict>,
) -> io::Result<(Vec<Vec<u8>>, usize)> {
    let mut placed: Vec<usize> = Vec::new();
    let mut rest = Vec::new();
    for function in functions {
        match order.and_then(|order| order.positions.get(&function)) {
            Some(&at) => placed.push(at as usize),
            None => rest.push(function),
        }
    }
    placed.sort_unstable();
    let mut chunks = Vec::new();
    let mut last_link = 0;
    if let (Some(order), Some(&last)) = (order, placed.last()) {
        let link = order
            .covering(last)
            .ok_or_else(|| io::Error::other("a position past its base"))?;
        last_link = link;
        let mut bits = vec![0u8; order.end_of(link).div_ceil(8)];
        for p in placed {
            bits[p / 8] |= 1 << (p % 8);
        }
        let mut set = FnSet {
            base: order.links().nth(link),
            bits,
            extra: Vec::new(),
        };
        let raw = postcard::to_stdvec(&set).map_err(io::Error::other)?;
        match dict.and_then(|dict| dicts::framed(dict, &raw)) {
            Some(framed) => chunks.push(crate::files::sealed::seal(PACKED_SET_MAGIC, &framed)),
            None => {
                set.bits = zstd::bulk::compress(&set.bits, SET_LEVEL)?;
                chunks.push(crate::files::sealed::seal(
                    SET_MAGIC,
                    &postcard::to_stdvec(&set).map_err(io::Error::other)?,
                ));
            }
        }
    }
    let cut = buckets(rest.len());
    let mut pieces: Vec<Vec<u8>> = vec![Vec::new(); cut];
    for function in rest {
        pieces[usize::from(function[0]) * cut / 256].extend_from_slice(&function);
    }
    chunks.extend(
        pieces
            .into_iter()
            .filter(|b| !b.is_empty())
            .map(|piece| crate::files::sealed::seal(CHUNK_MAGIC, &piece)),
    );
    Ok((chunks, last_link))
}

/// How a record is kept in the history: a skeleton, the record without
/// its dependencies and lists of executed functions; a body, with its
/// dependencies and short lists; and per program the chunks its long lists
/// were cut into.
///
/// A test reruns because a function it executed changed, so its new
/// record differs from the old one in a few ids: cut by position, only the
/// chunks holding them are new, and the rest is shared with the old record. A
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
    deps: Vec<crate::model::dep::Dep>,
    network: Vec<crate::model::peer::Peer>,
    ignored: Vec<crate::model::record::Ignored>,
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

/// A body's bytes as kept: the body, then (`with_deps`) its dependencies'
/// set, and nothing more.
fn parse_body(bytes: &[u8], with_deps: bool) -> Option<(Body, Option<DepSet>)> {
    if !with_deps {
        return Some((whole(bytes)?, None));
    }
    let (body, rest) = postcard::take_from_bytes(bytes).ok()?;
    Some((body, Some(whole(rest)?)))
}

/// A value that is the whole of `bytes`, nothing after it.
fn whole<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let (value, rest) = postcard::take_from_bytes(bytes).ok()?;
    rest.is_empty().then_some(value)
}

/// A record's id in the history, its long lists cut by the ids' first
/// byte alone (no base to place them): the name of its skeleton, which
/// names its chunks. A record cut against its programs' bases (as
/// [`History::put_records`] does when the history knows them) gets
/// another id; each is the whole record.
pub fn record_id(record: &Record) -> io::Result<Hash> {
    cut(record, &Orders::new(), None, None).map(|cut| cut.id)
}

/// A record cut as the history keeps it: its skeleton, sealed, and the
/// body and chunks it names, sealed; each named by its seal's digest.
pub(super) struct Cut {
    pub(super) id: Hash,
    pub(super) skeleton: Vec<u8>,
    /// The body, then the chunks.
    pub(super) parts: Vec<(Hash, Vec<u8>)>,
    /// Per base its spans were cut by, the index in its links of the last
    /// one they need: the history keeps that link and the chain before it.
    pub(super) links: Vec<(String, usize)>,
    /// Whether its body or skeleton was compressed with the dictionary.
    pub(super) uses_dict: bool,
    /// The link whose chain is the base its dependencies were kept
    /// against, if any: the history keeps that chain.
    pub(super) dep_base: Option<Hash>,
}

pub(super) fn cut(
    record: &Record,
    orders: &Orders,
    dict: Option<&Dict>,
    deps: Option<&DepSets>,
) -> io::Result<Cut> {
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
    let mut links = Vec::new();
    let binary = record.binary.clone();
    for code in &mut record.code {
        if code.functions.len() < CHUNKED_FROM {
            body.functions.push(std::mem::take(&mut code.functions));
            chunks.push(Vec::new());
            continue;
        }
        body.functions.push(Vec::new());
        let key = base_key(&binary, &code.unit);
        let (pieces, last_link) =
            chunks_of(std::mem::take(&mut code.functions), orders.get(&key), dict)?;
        if orders.contains_key(&key) {
            links.push((key, last_link));
        }
        let mut names = Vec::new();
        for sealed in pieces {
            let name = name_of(&sealed)?;
            names.push(name);
            sealed_chunks.push((name, sealed));
        }
        chunks.push(names);
    }
    // Sorted and deduplicated as a record file keeps them, so that a
    // record filed and the same record read give one body.
    let dep_set = deps.map(|deps| {
        crate::model::dep::sort(&mut body.deps);
        body.deps.dedup();
        deps.encode(DEPS_KEY, std::mem::take(&mut body.deps))
    });
    let mut bytes = postcard::to_stdvec(&body).map_err(io::Error::other)?;
    if let Some(set) = &dep_set {
        postcard::to_io(set, &mut bytes).map_err(io::Error::other)?;
    }
    let (plain, packed) = match dep_set {
        Some(_) => (DEPS_BODY_MAGIC, PACKED_DEPS_BODY_MAGIC),
        None => (BODY_MAGIC, PACKED_BODY_MAGIC),
    };
    let framed = dict.and_then(|dict| dicts::framed(dict, &bytes));
    let mut uses_dict = framed.is_some()
        || sealed_chunks
            .iter()
            .any(|(_, chunk)| chunk.starts_with(PACKED_SET_MAGIC));
    let body = match framed {
        Some(framed) => crate::files::sealed::seal(packed, &framed),
        None => crate::files::sealed::seal(plain, &bytes),
    };
    let skeleton = Skeleton {
        record,
        chunks,
        body: name_of(&body)?,
    };
    let bytes = postcard::to_stdvec(&skeleton).map_err(io::Error::other)?;
    let sealed = match dict.and_then(|dict| dicts::framed(dict, &bytes)) {
        Some(framed) => {
            uses_dict = true;
            crate::files::sealed::seal(PACKED_SKELETON_MAGIC, &framed)
        }
        None => crate::files::sealed::seal(SKELETON_MAGIC, &bytes),
    };
    let mut parts = vec![(skeleton.body, body)];
    parts.extend(sealed_chunks);
    Ok(Cut {
        id: name_of(&sealed)?,
        skeleton: sealed,
        parts,
        links,
        uses_dict,
        dep_base: dep_set.and_then(|set| set.base),
    })
}

impl History {
    /// Writes records not there already, as one pack: their skeletons, and
    /// the bodies and chunks no record has yet (see [`Skeleton`]). Returns
    /// each record's id.
    pub fn put_records(&self, records: &[&Record]) -> io::Result<Vec<Hash>> {
        use rayon::prelude::*;
        // Cut and compressed in parallel: a run of thousands of tests files
        // them all once its tests are done, and the user waits for it.
        let orders = self.orders(records);
        let dict = self.dicts.as_ref().and_then(|dicts| {
            let (name, dict) = dicts.current()?;
            Some(((name, dict), dicts.sealed(&name)?))
        });
        let deps = self.dep_bases.as_deref();
        let cuts: Vec<Cut> = records
            .par_iter()
            .map(|r| cut(r, &orders, dict.as_ref().map(|(dict, _)| dict), deps))
            .collect::<io::Result<_>>()?;
        let ids = cuts.iter().map(|c| c.id).collect();
        let mut guard = self.packs.write().expect("pack index lock");
        let packs = guard.get_or_insert_with(|| self.read_packs());
        let mut new: Vec<(Hash, Vec<u8>)> = Vec::new();
        let mut added = HashSet::new();
        let mut last_links: HashMap<&str, usize> = HashMap::new();
        for (key, last) in cuts.iter().flat_map(|cut| &cut.links) {
            let at = last_links.entry(key).or_default();
            *at = (*at).max(*last);
        }
        // The links spans name, copied from the store's bases, so that the
        // records outlive them. One that cannot be read leaves its spans
        // unreadable: their records are no record, and their tests run.
        for (key, last) in last_links {
            let (Some(bases), Some(order)) = (&self.bases, orders.get(key)) else {
                continue;
            };
            for name in order.links().take(last + 1) {
                if packs.at.contains_key(&name) || added.contains(&name) {
                    continue;
                }
                if let Some(sealed) = bases.link_file(&name).filter(|b| named(b, &name)) {
                    added.insert(name);
                    new.push((name, sealed));
                }
            }
        }
        // The chains bodies' dependencies name, copied likewise.
        if let Some(deps) = deps {
            let tips: HashSet<Hash> = cuts.iter().filter_map(|cut| cut.dep_base).collect();
            for tip in tips.iter().filter(|tip| !packs.at.contains_key(tip)) {
                for name in deps.chain(tip).unwrap_or_default() {
                    if packs.at.contains_key(&name) || added.contains(&name) {
                        continue;
                    }
                    if let Some(sealed) = deps.link_file(&name).filter(|b| named(b, &name)) {
                        added.insert(name);
                        new.push((name, sealed));
                    }
                }
            }
        }
        // The dictionary bodies were compressed with, copied likewise.
        if let Some(((name, _), sealed)) = dict
            && cuts.iter().any(|cut| cut.uses_dict)
            && !packs.at.contains_key(&name)
        {
            added.insert(name);
            new.push((name, sealed));
        }
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
            .for_each(|(_, bytes)| *bytes = crate::files::sealed::pack(bytes));
        if !new.is_empty() {
            self.write_pack(packs, &new)?;
        }
        Ok(ids)
    }

    /// The order of each base the long lists of `records` are kept
    /// against in the store's record files, when the history knows the
    /// store's bases ([`History::cut_by`]).
    fn orders(&self, records: &[&Record]) -> Orders {
        let mut orders = Orders::new();
        let Some(sets) = &self.bases else {
            return orders;
        };
        for record in records {
            for code in record
                .code
                .iter()
                .filter(|c| c.functions.len() >= CHUNKED_FROM)
            {
                let key = base_key(&record.binary, &code.unit);
                if !orders.contains_key(&key)
                    && let Some(order) = sets.order(&key)
                {
                    orders.insert(key, order);
                }
            }
        }
        orders
    }

    /// A filed record's skeleton, if intact and sealed with its id. The
    /// body and chunks it names are checked against their names when read
    /// ([`History::body`], [`History::chunk`]).
    pub fn skeleton(&self, id: &Hash) -> Option<Skeleton> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        let skeleton: Skeleton =
            match crate::files::sealed::open_raw(PACKED_SKELETON_MAGIC, &sealed) {
                Ok(framed) => whole(&self.unframed(framed, MAX_SKELETON_BYTES)?)?,
                Err(_) => crate::files::sealed::open(SKELETON_MAGIC, &sealed).ok()?,
            };
        // Its programs' paths are resolved before the record is whole.
        skeleton.record.validate().ok()?;
        (skeleton.chunks.len() == skeleton.record.code.len()).then_some(skeleton)
    }

    /// A record's body, if it is intact and the one its name says, its
    /// dependencies read from the history's copy of their base.
    pub fn body(&self, id: &Hash) -> Option<Body> {
        let (mut body, deps) = self.body_and_deps(id)?;
        if let Some(deps) = deps {
            if !body.deps.is_empty() {
                return None;
            }
            body.deps = self.deps_of(&deps)?;
        }
        Some(body)
    }

    /// A body as kept, and its dependencies' set when they follow it.
    fn body_and_deps(&self, id: &Hash) -> Option<(Body, Option<DepSet>)> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        self.body_and_deps_in(&sealed)
    }

    /// [`History::body_and_deps`] of sealed bytes already read and checked.
    fn body_and_deps_in(&self, sealed: &[u8]) -> Option<(Body, Option<DepSet>)> {
        let open_raw = crate::files::sealed::open_raw;
        for (magic, with_deps) in [(BODY_MAGIC, false), (DEPS_BODY_MAGIC, true)] {
            if let Ok(bytes) = open_raw(magic, sealed) {
                return parse_body(bytes, with_deps);
            }
        }
        let (framed, with_deps) = match open_raw(PACKED_BODY_MAGIC, sealed) {
            Ok(framed) => (framed, false),
            Err(_) => (open_raw(PACKED_DEPS_BODY_MAGIC, sealed).ok()?, true),
        };
        parse_body(&self.unframed(framed, MAX_BODY_BYTES)?, with_deps)
    }

    /// Bytes compressed with a dictionary, framed with its name
    /// (`dicts::framed`), decompressed with the history's copy of it
    /// within `limit`.
    fn unframed(&self, framed: &[u8], limit: usize) -> Option<Vec<u8>> {
        let (name, packed) = dicts::unframe(framed)?;
        let dict = (*name, self.dict(name)?);
        dicts::decompress(&dict, packed, limit)
    }

    /// The chain of the link `name` in `chains`, its links read from the
    /// history's objects.
    fn path_named<T: Item>(
        &self,
        chains: &std::sync::Mutex<Chains<T>>,
        name: &Hash,
    ) -> Option<Arc<[Arc<Link<T>>]>> {
        chains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .path_named(name, |name| self.read_entry(name))
    }

    /// The dependencies `set` stands for, read from the history's copy of
    /// its base; `None` if a link is missing or damaged, or the set does
    /// not fit the base.
    fn deps_of(&self, set: &DepSet) -> Option<Vec<Dep>> {
        decode_with(set, Packing::Zstd, |base| {
            self.path_named(&self.dep_chains, base)
        })
    }

    /// The history's copy of the dictionary `name`, read once.
    fn dict(&self, name: &Hash) -> Option<Arc<[u8]>> {
        let mut read = self.dicts_read.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(dict) = read.get(name) {
            return dict.clone();
        }
        let dict = self
            .read_entry(name)
            .and_then(|sealed| dicts::opened(&sealed, name));
        read.insert(*name, dict.clone());
        dict
    }

    /// A chunk's functions, if it is intact and the one its name says.
    pub fn chunk(&self, id: &Hash) -> Option<Vec<FnId>> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        let Ok(ids) = crate::files::sealed::open_raw(CHUNK_MAGIC, &sealed) else {
            if let Some(set) = self.packed_set(&sealed) {
                return self.set(&set, Packing::Raw);
            }
            if let Ok(set) = crate::files::sealed::open::<FnSet>(SET_MAGIC, &sealed) {
                return self.set(&set, Packing::Zstd);
            }
            return self.span(&crate::files::sealed::open(SPAN_MAGIC, &sealed).ok()?);
        };
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

    /// A set's functions, read from the history's copy of its base, in
    /// ascending order; `None` if a link is missing or damaged, or the set
    /// does not fit the base.
    fn set(&self, set: &FnSet, packing: Packing) -> Option<Vec<FnId>> {
        let path = self.path_named(&self.chains, set.base.as_ref()?)?;
        items_of(&path, set, packing)
    }

    /// A set compressed with a dictionary (sealed bytes checked by the
    /// caller), decompressed with the history's copy of it.
    fn packed_set(&self, sealed: &[u8]) -> Option<FnSet> {
        let framed = crate::files::sealed::open_raw(PACKED_SET_MAGIC, sealed).ok()?;
        whole(&self.unframed(framed, MAX_SET_BYTES)?)
    }

    /// A span's functions, read from the history's copy of its base; `None`
    /// if a link is missing or damaged, or the span does not fit the base.
    fn span(&self, span: &Span) -> Option<Vec<FnId>> {
        if span.bits.len() > MAX_BASE / 8 {
            return None;
        }
        let path = self.path_named(&self.chains, &span.link)?;
        let count = span.bits.iter().map(|b| b.count_ones() as usize).sum();
        ids_at(&path, set_bits(&span.bits, span.start as usize), count)
    }

    /// What the parts among `parts` (skeletons, chunks and bodies) name
    /// besides themselves: the links of the bases sets, spans and bodies'
    /// dependencies are kept against, with the chains before them, and the
    /// dictionaries skeletons and bodies were compressed with. What the
    /// history keeps for them when it prunes.
    pub(super) fn named_by_parts(&self, parts: &HashSet<Hash>) -> HashSet<Hash> {
        let (mut tips, mut dep_tips) = (HashSet::new(), HashSet::new());
        let mut named = HashSet::new();
        for sealed in parts.iter().filter_map(|part| self.read_entry(part)) {
            if let Ok(span) = crate::files::sealed::open::<Span>(SPAN_MAGIC, &sealed) {
                tips.insert(span.link);
                continue;
            }
            if let Ok(set) = crate::files::sealed::open::<FnSet>(SET_MAGIC, &sealed) {
                tips.extend(set.base);
                continue;
            }
            if let Some(set) = self.packed_set(&sealed) {
                tips.extend(set.base);
            }
            for magic in [
                PACKED_BODY_MAGIC,
                PACKED_DEPS_BODY_MAGIC,
                PACKED_SKELETON_MAGIC,
                PACKED_SET_MAGIC,
            ] {
                if let Ok(inner) = crate::files::sealed::open_raw(magic, &sealed)
                    && let Some((dict, _)) = dicts::unframe(inner)
                {
                    named.insert(*dict);
                }
            }
            if sealed.starts_with(DEPS_BODY_MAGIC) || sealed.starts_with(PACKED_DEPS_BODY_MAGIC) {
                dep_tips.extend(
                    self.body_and_deps_in(&sealed)
                        .and_then(|(_, deps)| deps?.base),
                );
            }
        }
        named.extend(self.chains_of(&self.chains, &tips));
        named.extend(self.chains_of(&self.dep_chains, &dep_tips));
        named
    }

    /// The names of the links on the chains of `tips`, read from the
    /// history's objects.
    fn chains_of<T: Item>(
        &self,
        chains: &std::sync::Mutex<Chains<T>>,
        tips: &HashSet<Hash>,
    ) -> Vec<Hash> {
        let mut chains = chains.lock().unwrap_or_else(|p| p.into_inner());
        tips.iter()
            .flat_map(|tip| {
                chains
                    .names(tip, |name| self.read_entry(name))
                    .unwrap_or_default()
            })
            .collect()
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
    /// dependency, the functions of its chunks ([`History::chunk`]),
    /// ascending. The parts being sealed with their names, only
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
                // Chunks cut by position hold ids in no common order.
                code.functions
                    .sort_unstable_by_key(|id| u64::from_be_bytes(*id));
                code.functions.dedup();
            }
        }
        record.validate().ok()?;
        Some(record)
    }
}
