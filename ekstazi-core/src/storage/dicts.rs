//! A zstd dictionary for record files, trained from the state's own
//! records ([`Dicts`]).
//!
//! A record file is compressed alone, so what every record of a project
//! repeats (its fixtures' paths, the variables its tests read, the
//! programs they run) is paid in every file. A dictionary holds it once:
//! on coreutils, 1 000 record files took 3.6 MB compressed alone and
//! 1.8 MB with a 64 KiB dictionary trained from 256 others.
//!
//! ```text
//! .dicts/<digest>   a dictionary, sealed, named by its seal's digest
//! .dicts/current    the one new record files are compressed with
//! ```
//! The first [`TRAIN_AFTER`] records a state receives are written without
//! one and kept as samples; then a dictionary is trained from them, written,
//! and named `current`. A dictionary is written *before* any record that
//! names it, and checked against its name when read: a record whose
//! dictionary is missing or damaged does not decode, and its test runs.
//! Losing `current` costs bytes, never a record: the next process trains
//! another.

use crate::files::contained::StateDir;
use crate::files::sealed::{name_of, named, open, open_raw, seal};
use crate::model::dep::Hash;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const DICT_MAGIC: &[u8; 4] = b"EKZY";
const CURRENT_MAGIC: &[u8; 4] = b"EKZV";
/// The file naming the dictionary new records are compressed with.
pub(crate) const CURRENT: &str = "current";
/// Records written without a dictionary before one is trained from them.
pub const TRAIN_AFTER: usize = 256;
/// A dictionary's size: on coreutils, 64 KiB compressed better than 32 or
/// 128 (1.76 MB for 1 000 records against 1.94 and 2.42).
const DICT_BYTES: usize = 64 << 10;
/// Samples kept at most, in bytes: with as many, a dictionary is trained
/// from fewer records.
const MAX_SAMPLE_BYTES: usize = 16 << 20;
const MAX_DICT_FILE_BYTES: u64 = 1 << 20;

/// A dictionary, by name.
pub type Dict = (Hash, Arc<[u8]>);

/// The dictionaries of a state directory.
#[derive(Debug)]
pub struct Dicts {
    state: StateDir,
    dir: PathBuf,
    train_after: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// `current`, read on first use (`None` inside: there is none).
    current: Option<Option<Dict>>,
    /// Dictionaries read, by name (`None`: missing or damaged).
    read: HashMap<Hash, Option<Arc<[u8]>>>,
    samples: Vec<Vec<u8>>,
    sample_bytes: usize,
    /// A dictionary was trained (or tried) by this process.
    tried: bool,
}

impl Dicts {
    /// The dictionaries kept in `dir`, inside the state directory `state`.
    pub fn new(state: StateDir, dir: &Path) -> Dicts {
        Dicts::training_after(state, dir, TRAIN_AFTER)
    }

    /// As [`Dicts::new`], training after `records` samples (tests).
    pub fn training_after(state: StateDir, dir: &Path, records: usize) -> Dicts {
        Dicts {
            state,
            dir: dir.to_path_buf(),
            train_after: records,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The dictionary new record files are compressed with, if any.
    pub fn current(&self) -> Option<Dict> {
        let mut inner = self.lock();
        if inner.current.is_none() {
            let named = self
                .state
                .read_bounded(&self.dir.join(CURRENT), 1 << 10)
                .ok()
                .and_then(|bytes| open::<Hash>(CURRENT_MAGIC, &bytes).ok());
            let dict = named.and_then(|name| Some((name, self.read(&mut inner, &name)?)));
            inner.current = Some(dict);
        }
        inner.current.clone().flatten()
    }

    /// The dictionary `name`, if it can be read and is the one its name
    /// says.
    pub fn get(&self, name: &Hash) -> Option<Arc<[u8]>> {
        self.read(&mut self.lock(), name)
    }

    fn read(&self, inner: &mut Inner, name: &Hash) -> Option<Arc<[u8]>> {
        if let Some(read) = inner.read.get(name) {
            return read.clone();
        }
        let dict = self.sealed(name).and_then(|sealed| opened(&sealed, name));
        inner.read.insert(*name, dict.clone());
        dict
    }

    /// The dictionary `name`'s sealed bytes as its file holds them, if
    /// they are the ones its name says (the history keeps a copy).
    pub fn sealed(&self, name: &Hash) -> Option<Vec<u8>> {
        self.state
            .read_bounded(&self.path(name), MAX_DICT_FILE_BYTES)
            .ok()
            .filter(|sealed| named(sealed, name))
    }

    /// Takes the body of a record written without a dictionary as a
    /// sample; with enough, trains one and makes it current. A dictionary
    /// that cannot be trained or written leaves records without one.
    pub fn offer(&self, body: &[u8]) {
        let mut inner = self.lock();
        if matches!(inner.current, Some(Some(_))) || inner.tried {
            return;
        }
        inner.sample_bytes += body.len();
        inner.samples.push(body.to_vec());
        if inner.samples.len() < self.train_after && inner.sample_bytes < MAX_SAMPLE_BYTES {
            return;
        }
        // Once a process: training failed, it would fail again.
        inner.tried = true;
        let samples = std::mem::take(&mut inner.samples);
        if let Some(dict) = self.train(&samples) {
            inner.read.insert(dict.0, Some(dict.1.clone()));
            inner.current = Some(Some(dict));
        }
    }

    fn train(&self, samples: &[Vec<u8>]) -> Option<Dict> {
        let trained = zstd::dict::from_samples(samples, DICT_BYTES).ok()?;
        let sealed = seal(DICT_MAGIC, &trained);
        let name = name_of(&sealed).ok()?;
        self.state.make_dir(&self.dir).ok()?;
        self.state.write_atomic(&self.path(&name), &sealed).ok()?;
        // Not being able to name it costs bytes only: it is not used.
        self.state
            .write_atomic(
                &self.dir.join(CURRENT),
                &seal(CURRENT_MAGIC, &postcard::to_stdvec(&name).ok()?),
            )
            .ok()?;
        Some((name, trained.into()))
    }

    fn path(&self, name: &Hash) -> PathBuf {
        self.dir
            .join(blake3::Hash::from_bytes(*name).to_hex().as_str())
    }

    /// The name of `current`, if there is one: what a sweep keeps beside
    /// the dictionaries records name.
    pub fn current_name(&self) -> Option<Hash> {
        self.current().map(|(name, _)| name)
    }
}

/// The dictionary `sealed` holds, if it is sealed with `name` and is one.
pub(crate) fn opened(sealed: &[u8], name: &Hash) -> Option<Arc<[u8]>> {
    if !named(sealed, name) {
        return None;
    }
    open_raw(DICT_MAGIC, sealed).ok().map(Arc::from)
}

/// `body` compressed with `dict`, framed as record files and the
/// history's bodies keep it: the dictionary's name, then the compressed
/// bytes.
pub(crate) fn framed(dict: &Dict, body: &[u8]) -> Option<Vec<u8>> {
    Some([&dict.0[..], &compress(dict, body)?].concat())
}

/// The dictionary a frame names, and its compressed bytes.
pub(crate) fn unframe(framed: &[u8]) -> Option<(&Hash, &[u8])> {
    framed.split_first_chunk::<32>()
}

/// `body` compressed with `dict`: one compressor per thread and
/// dictionary, since loading a dictionary costs more than compressing a
/// record. At level 9, as what is kept long is: coreutils' 4 903 record
/// bodies (38.7 MB) took 4.46 MB against 4.79 MB at level 3, in 0.47 s
/// against 0.06 s on one core.
fn compress(dict: &Dict, body: &[u8]) -> Option<Vec<u8>> {
    thread_local! {
        static COMPRESSOR: Cached<zstd::bulk::Compressor<'static>> = const { RefCell::new(None) };
    }
    with_cached(
        &COMPRESSOR,
        dict,
        |d| zstd::bulk::Compressor::with_dictionary(crate::files::sealed::KEPT_LEVEL, d),
        |c| c.compress(body).ok(),
    )
}

/// `packed` decompressed with `dict`, if it fits in `limit` bytes.
pub(crate) fn decompress(dict: &Dict, packed: &[u8], limit: usize) -> Option<Vec<u8>> {
    thread_local! {
        static DECOMPRESSOR: Cached<zstd::bulk::Decompressor<'static>> = const { RefCell::new(None) };
    }
    // Output beyond `limit` is an error, not a larger allocation.
    with_cached(
        &DECOMPRESSOR,
        dict,
        zstd::bulk::Decompressor::with_dictionary,
        |d| d.decompress(packed, limit).ok(),
    )
}

/// A thread's (de)compressor and the dictionary it was made with.
type Cached<T> = RefCell<Option<(Hash, T)>>;

/// `f` on this thread's `T` for `dict`, made anew when it was made with
/// another dictionary.
fn with_cached<T, R>(
    cell: &'static std::thread::LocalKey<Cached<T>>,
    dict: &Dict,
    make: impl FnOnce(&[u8]) -> std::io::Result<T>,
    f: impl FnOnce(&mut T) -> Option<R>,
) -> Option<R> {
    cell.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|(name, _)| *name != dict.0) {
            *cell = Some((dict.0, make(&dict.1).ok()?));
        }
        f(&mut cell.as_mut()?.1)
    })
}
