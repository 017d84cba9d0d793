//! The history's objects: a record kept as a [`Skeleton`] (everything but
//! its long lists of executed functions) and chunks of those lists shared
//! between records, each named by the digest its seal ends with; a
//! record's id is its skeleton's name ([`record_id`]). Cutting a record
//! into parts (`cut`) and putting them back ([`History::assemble`]).

use super::History;
use crate::files::sealed::{name_of, named};
use crate::model::code_dep::FnId;
use crate::model::dep::Hash;
use crate::model::record::Record;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io;

const SKELETON_MAGIC: &[u8; 4] = b"EKZO";
const CHUNK_MAGIC: &[u8; 4] = b"EKZC";
const BODY_MAGIC: &[u8; 4] = b"EKZB";
/// A list of executed functions this long or longer is kept in chunks.
pub(super) const CHUNKED_FROM: usize = 256;
/// About this many ids to a chunk...
pub(super) const IDS_PER_CHUNK: usize = 128;
/// ...in at most this many chunks per list (each costs a reference in the
/// skeleton and an entry in a pack's index).
pub(super) const MAX_CHUNKS: usize = 64;

/// How many chunks a list of `len` ids is cut into, by the ids' first
/// byte: a power of two, so that a list that grows past a boundary
/// recuts into halves, not into unrelated pieces.
pub(super) fn buckets(len: usize) -> usize {
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

/// A record's id in the history: the name of its skeleton, which names
/// its chunks. The same record always cuts the same way, so it has one id.
pub fn record_id(record: &Record) -> io::Result<Hash> {
    cut(record).map(|cut| cut.id)
}

/// A record cut as the history keeps it: its skeleton, sealed, and the
/// body and chunks it names, sealed; each named by its seal's digest.
pub(super) struct Cut {
    pub(super) id: Hash,
    pub(super) skeleton: Vec<u8>,
    /// The body, then the chunks.
    pub(super) parts: Vec<(Hash, Vec<u8>)>,
}

pub(super) fn cut(record: &Record) -> io::Result<Cut> {
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
            let sealed = crate::files::sealed::seal(CHUNK_MAGIC, &piece);
            let name = name_of(&sealed)?;
            names.push(name);
            sealed_chunks.push((name, sealed));
        }
        chunks.push(names);
    }
    let body = crate::files::sealed::seal(
        BODY_MAGIC,
        &postcard::to_stdvec(&body).map_err(io::Error::other)?,
    );
    let skeleton = Skeleton {
        record,
        chunks,
        body: name_of(&body)?,
    };
    let sealed = crate::files::sealed::seal(
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

impl History {
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
            .for_each(|(_, bytes)| *bytes = crate::files::sealed::pack(bytes));
        if !new.is_empty() {
            self.write_pack(packs, &new)?;
        }
        Ok(ids)
    }

    /// A filed record's skeleton, if intact and sealed with its id. The
    /// body and chunks it names are checked against their names when read
    /// ([`History::body`], [`History::chunk`]).
    pub fn skeleton(&self, id: &Hash) -> Option<Skeleton> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        let skeleton: Skeleton = crate::files::sealed::open(SKELETON_MAGIC, &sealed).ok()?;
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
        crate::files::sealed::open(BODY_MAGIC, &sealed).ok()
    }

    /// A chunk's functions, if it is intact and the one its name says.
    pub fn chunk(&self, id: &Hash) -> Option<Vec<FnId>> {
        let sealed = self.read_entry(id)?;
        if !named(&sealed, id) {
            return None;
        }
        let ids = crate::files::sealed::open_raw(CHUNK_MAGIC, &sealed).ok()?;
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
}
