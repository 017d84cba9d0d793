//! Function fingerprints: a checksum of every function of an instrumented
//! test binary that changes when, and only when, what the function does
//! changes.
//!
//! A function's fingerprint hashes its machine code with every field that
//! holds an address replaced by *what it refers to*: a function by its
//! symbol name, data by its content — recursively through the pointers
//! inside data (vtables, tables of function pointers) — a jump inside the
//! function by its offset. No address enters a hash, so changing one
//! function leaves the others' fingerprints alone, and a changed constant,
//! `static`, string or vtable changes exactly the functions that use it.
//!
//! Like Ekstazi's smart checksum ignores debug information, the line and
//! column stored in `core::panic::Location` data are ignored (the file name
//! is kept), and so is the line of a `tracing` event's callsite (in its
//! metadata and its name, `event <file>:<line>`), so that moving code down a
//! few lines changes no fingerprint. A string constant that names a
//! directory of the checkout (`env!("CARGO_MANIFEST_DIR")`) is hashed with
//! that directory as a placeholder, and its length with it, so that moving
//! the checkout changes none either.
//!
//! Inputs: the executable, linked with `--emit-relocs` (relocations of data
//! survive linking) and the linker's map (the exact extent of every
//! anonymous constant). Code is x86-64, decoded with `iced-x86`: a field
//! relative to the instruction pointer is found by decoding, which gives the
//! exact target (a relocation's `S + A` is skewed by the bytes that follow
//! the field in the instruction).
//!
//! Functions compiled without coverage (the standard library, C code from
//! build scripts) are fingerprinted too, and every test of the binary
//! depends on all of them: a change to one selects them all.
//!
//! Main types: [`Snapshot`] (a build's fingerprints, its names kept in one
//! buffer by [`names`]), read by `image` (the
//! ELF), `map` (the linker map) and `normalise` (the hashing). Invariant:
//! no address enters a hash; a fingerprint reads only the executable and
//! its map, never a record.

pub mod calls;
mod image;
pub mod kept;
pub mod map;
pub mod names;
mod normalise;
mod source_path;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The maps and sets fingerprinting fills, keyed by addresses and names,
/// hashed with `foldhash` (seeded per process): SipHash was the largest
/// hashing cost of fingerprinting a binary (`perf`), and its resistance to
/// chosen keys protects nothing here.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;
use crate::model::path::Placeholders;
pub use names::Names;
use std::path::{Path, PathBuf};

/// A function fingerprint: 128 bits of blake3.
pub type Fp = [u8; 16];

/// Why a binary cannot be fingerprinted (its tests then fall back to the
/// binary's smart checksum).
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// The executable, or its map, could not be read or parsed: why.
    #[error("cannot parse the executable: {0}")]
    Parse(String),
    /// An executable fingerprints do not support (not x86-64): why.
    #[error("{0}")]
    Unsupported(String),
    /// The executable has no coverage flags: not an instrumented build.
    #[error("the executable carries no coverage instrumentation")]
    NotInstrumented,
    /// No extents of the executable's data: the linker map names none of
    /// its sections, or neither a map nor its kept extents are there.
    #[error("the linker map has no input sections")]
    NoMap,
}

/// The fingerprints of one binary, as stored and compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Instrumented functions, sorted by (mangled) name.
    pub names: Names,
    /// `fps[i]` is the fingerprint of `names[i]`.
    pub fps: Vec<Fp>,
    /// Coverage flag address of each instrumented function → index into
    /// `names`, sorted by address: how coverage (the flags a process set)
    /// maps to functions. Stored as differences from the address before
    /// (`ascending_addresses`).
    #[serde(with = "ascending_addresses")]
    pub flags: Vec<(u64, u32)>,
    /// A hash of each instrumented function's [`stable_name`] → index into
    /// `names`, sorted: finds a function again after a rebuild that renamed
    /// it only in its crate hash.
    pub stable: Vec<(u64, u32)>,
    /// Functions compiled without coverage (the standard library, C code),
    /// sorted by name: no test's coverage names them, so every test of the
    /// binary depends on all of them.
    pub other_names: Names,
    /// `other_fps[i]` is the fingerprint of `other_names[i]`.
    pub other_fps: Vec<Fp>,
    /// Instrumented functions (indexes into `names`, ascending) whose code
    /// walks the whole environment (`std::env::vars`, `vars_os`, libc's
    /// `environ`): a test that executes one depends on every variable.
    pub environment_walkers: Vec<u32>,
    /// Counts of what was fingerprinted.
    pub stats: Stats,
}

/// Addresses sorted ascending, stored as the difference from the one
/// before: small numbers, in one or two bytes each where an address took
/// three or four (on coreutils' multicall program, 0.44 MB of a 3.4 MB
/// snapshot compressed, 0.23 MB so). An address below the one before is
/// not one of ours.
mod ascending_addresses {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(flags: &[(u64, u32)], s: S) -> Result<S::Ok, S::Error> {
        let mut last = 0;
        let steps: Vec<(u64, u32)> = flags
            .iter()
            .map(|&(at, index)| {
                let step = at.wrapping_sub(last);
                last = at;
                (step, index)
            })
            .collect();
        steps.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, u32)>, D::Error> {
        let steps = Vec::<(u64, u32)>::deserialize(d)?;
        let mut last: u64 = 0;
        steps
            .into_iter()
            .map(|(step, index)| {
                last = last
                    .checked_add(step)
                    .ok_or_else(|| serde::de::Error::custom("an address past the end"))?;
                Ok((last, index))
            })
            .collect()
    }
}

/// Counts for diagnostics and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Functions fingerprinted, instrumented or not.
    pub functions: u64,
    /// Instrumented functions.
    pub instrumented: u64,
    /// References that could not be resolved to a symbol or data extent
    /// (hashed by section and offset: safe, but layout-dependent).
    pub unresolved: u64,
    /// The functions' machine code together, in bytes.
    pub code_bytes: u64,
}

impl Snapshot {
    /// The index of a function by mangled name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.binary_search(name).ok()
    }

    /// The functions with this stable name.
    pub(crate) fn with_stable_name(&self, hash: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.stable.partition_point(|(h, _)| *h < hash);
        self.stable[start..]
            .iter()
            .take_while(move |(h, _)| *h == hash)
            .map(|(_, i)| *i as usize)
    }

    /// The function of this build that stands for `name` (fingerprint `fp`)
    /// of another build: the one of that mangled name, or else one with the
    /// same stable name — the one with the same fingerprint if there is one
    /// (a dependency bumped to a new version rehashes every symbol of the
    /// crate, without changing any code). `None`: no such function any more.
    pub fn counterpart(&self, name: &str, fp: &Fp) -> Option<usize> {
        if let Some(i) = self.index_of(name) {
            return Some(i);
        }
        let mut candidates = self.with_stable_name(stable_hash(name)).peekable();
        let first = *candidates.peek()?;
        Some(candidates.find(|&i| self.fps[i] == *fp).unwrap_or(first))
    }

    /// The function whose coverage flag is at `addr`.
    pub fn of_flag(&self, addr: u64) -> Option<u32> {
        self.flags
            .binary_search_by_key(&addr, |(a, _)| *a)
            .ok()
            .map(|i| self.flags[i].1)
    }
}

/// Where the extents of an executable's data come from.
pub enum ExtentSource {
    /// Its linker map.
    Map(PathBuf),
    /// What was kept of its map ([`kept`]).
    Kept(Vec<map::Extent>),
}

/// Fingerprints every function of the instrumented executable at `binary`,
/// with the extents of its data from `source`, and gives the extents back
/// (to be kept: [`kept::write`]). The directories of `checkout` are hashed
/// as their placeholders where string constants name them, so that the same
/// code built in another checkout has the same fingerprints.
pub fn fingerprint_file(
    binary: &Path,
    source: ExtentSource,
    checkout: &Placeholders,
) -> Result<(Snapshot, Vec<map::Extent>), FingerprintError> {
    with_image_file(binary, source, |image| {
        let snapshot = fingerprint_image(&image, checkout)?;
        Ok((snapshot, image.extents))
    })
}

/// Reads the executable at `binary`, mapped, with its extents from
/// `source` (a map is read while the executable's symbols are), and hands
/// the image to `f`.
fn with_image_file<T>(
    binary: &Path,
    source: ExtentSource,
    f: impl FnOnce(image::Image<'_>) -> Result<T, FingerprintError>,
) -> Result<T, FingerprintError> {
    let data = crate::digests::mapped::bytes(binary).map_err(unreadable)?;
    let image = match source {
        ExtentSource::Map(map) => image::Image::parse_with(&data, |keep| {
            // Read, not mapped: the linker rewrites its map in place, and a
            // mapped file truncated under a reader raises `SIGBUS`.
            let file = std::fs::File::open(&map).map_err(unreadable)?;
            map::read(file, keep).map_err(unreadable)
        })?,
        ExtentSource::Kept(extents) => image::Image::parse_with(&data, |_| Ok(extents))?,
    };
    f(image)
}

fn unreadable(e: std::io::Error) -> FingerprintError {
    FingerprintError::Parse(e.to_string())
}

fn fingerprint_image(
    image: &image::Image<'_>,
    checkout: &Placeholders,
) -> Result<Snapshot, FingerprintError> {
    if image.coverage_flags.is_empty() {
        return Err(FingerprintError::NotInstrumented);
    }
    let by_addr = one_symbol_per_address(image);
    let instrumented: FastSet<u64> = image
        .coverage_flags
        .iter()
        .map(|(_, entry)| *entry)
        .collect();
    let normaliser = normalise::Normaliser::new(image, checkout);
    let shallow = shallow_fingerprints(&normaliser, &by_addr);
    let computed = Copies::of(image, &by_addr, &instrumented, &shallow).told_apart(&shallow);

    let (names, fps, entries) = by_name(computed.iter().filter(|c| c.3));
    let environment_walkers = environment_walkers(&names, &shallow, &instrumented);
    let flags = flags_of(image, &entries);
    let stable = stable_hashes(&by_addr, &names);
    let (other_names, other_fps) = uninstrumented(&computed, &normaliser);

    let stats = Stats {
        functions: computed.len() as u64,
        instrumented: names.len() as u64,
        unresolved: normaliser.unresolved(),
        code_bytes: by_addr.values().map(|f| f.size).sum(),
    };
    Ok(Snapshot {
        names: names.iter().collect(),
        fps,
        flags,
        stable,
        other_names: other_names.iter().collect(),
        other_fps,
        environment_walkers,
        stats,
    })
}

/// One representative symbol per address: aliases share code.
fn one_symbol_per_address<'i>(image: &'i image::Image<'_>) -> BTreeMap<u64, &'i image::Symbol> {
    let mut by_addr: BTreeMap<u64, &image::Symbol> = BTreeMap::new();
    for f in &image.functions {
        by_addr
            .entry(f.addr)
            .and_modify(|g| {
                if f.name < g.name {
                    *g = f;
                }
            })
            .or_insert(f);
    }
    by_addr
}

/// A function's fingerprint before copies of one instance are told apart
/// ([`Copies`]).
struct Shallow<'i> {
    addr: u64,
    name: &'i str,
    fp: Fp,
    /// The ambiguous functions it refers to, in the order met.
    ambiguous: Vec<u64>,
    /// Whether its code walks the whole environment.
    walks: bool,
}

/// Every function's [`Shallow`] fingerprint, in parallel.
fn shallow_fingerprints<'i>(
    normaliser: &normalise::Normaliser<'i, '_>,
    by_addr: &BTreeMap<u64, &'i image::Symbol>,
) -> Vec<Shallow<'i>> {
    by_addr
        .par_iter()
        .map_init(normalise::Memo::default, |memo, (addr, f)| {
            let (fp, ambiguous, walks) = normaliser.function(f, memo);
            Shallow {
                addr: *addr,
                name: f.name.as_str(),
                fp,
                ambiguous,
                walks,
            }
        })
        .collect()
}

/// A function's address, name, fingerprint, and whether it is
/// instrumented.
type Computed<'i> = (u64, &'i str, Fp, bool);

/// The copies of functions whose name other functions share, and which
/// references to them are told apart by content.
struct Copies<'s> {
    by_addr: &'s BTreeMap<u64, &'s image::Symbol>,
    instrumented: &'s FastSet<u64>,
    shallow_of: FastMap<u64, Fp>,
    /// Per shared name, the shallow fingerprints of its copies.
    contents: FastMap<&'s str, FastSet<Fp>>,
    weak_at: FastSet<u64>,
}

impl<'s> Copies<'s> {
    fn of(
        image: &'s image::Image<'_>,
        by_addr: &'s BTreeMap<u64, &'s image::Symbol>,
        instrumented: &'s FastSet<u64>,
        shallow: &[Shallow<'_>],
    ) -> Copies<'s> {
        // A reference to a function whose name other functions share (a generic
        // instance each crate keeps a copy of) says which one by its content —
        // when the copies differ: identical copies are interchangeable, and a
        // new identical copy elsewhere must not change the referring function.
        let shallow_of: FastMap<u64, Fp> = shallow.iter().map(|s| (s.addr, s.fp)).collect();
        let mut contents: FastMap<&str, FastSet<Fp>> = FastMap::default();
        for (addr, f) in by_addr {
            if f.ambiguous {
                contents
                    .entry(f.token.as_str())
                    .or_default()
                    .insert(shallow_of[addr]);
            }
        }
        let weak_at: FastSet<u64> = image
            .functions
            .iter()
            .filter(|f| f.weak)
            .map(|f| f.addr)
            .collect();
        Copies {
            by_addr,
            instrumented,
            shallow_of,
            contents,
            weak_at,
        }
    }

    /// Whether the reference from the function at `from` to the one at
    /// `target` is told apart by the target's content.
    ///
    /// Copies are told apart, but not between uninstrumented functions: the
    /// toolchain's precompiled code (libtest, std) names the copy it calls
    /// exactly — its own local copy, bound when its object was compiled, or
    /// a strong global instance whose mangled name holds the crate that
    /// instantiated it (the linker allows one definition of it) — so the
    /// reference cannot move to another copy, and the copy's own
    /// fingerprint already stands for its content. Telling it apart there
    /// would make the toolchain's fingerprints change whenever the
    /// project's crates stop (or start) keeping a copy of the same instance
    /// — every test of the binary would run. (Not through a weak symbol:
    /// a definition elsewhere may replace it at link time.)
    fn tells_apart(&self, from: u64, target: &u64) -> bool {
        self.by_addr.get(target).is_some_and(|f| {
            let reference = Reference {
                from_instrumented: self.instrumented.contains(&from),
                to_instrumented: self.instrumented.contains(target),
                to_weak: self.weak_at.contains(target),
            };
            let copies_differ = self
                .contents
                .get(f.token.as_str())
                .is_some_and(|c| c.len() > 1);
            copies_differ && !reference.names_its_copy_exactly()
        })
    }

    /// Each function's fingerprint, with the content of each copy its
    /// references tell apart hashed in.
    fn told_apart<'i>(&self, shallow: &[Shallow<'i>]) -> Vec<Computed<'i>> {
        shallow
            .par_iter()
            .map(|s| {
                let mut told: Vec<&u64> = s
                    .ambiguous
                    .iter()
                    .filter(|t| self.tells_apart(s.addr, t))
                    .collect();
                told.dedup();
                let fp = if told.is_empty() {
                    s.fp
                } else {
                    let mut h = blake3::Hasher::new();
                    h.update(&s.fp);
                    for target in told {
                        h.update(&self.shallow_of[target]);
                    }
                    truncate(h.finalize())
                };
                (s.addr, s.name, fp, self.instrumented.contains(&s.addr))
            })
            .collect()
    }
}

/// The indexes in `names` of the instrumented functions that walk the
/// whole environment.
fn environment_walkers(
    names: &[String],
    shallow: &[Shallow<'_>],
    instrumented: &FastSet<u64>,
) -> Vec<u32> {
    let walkers: FastSet<&str> = shallow
        .iter()
        .filter(|s| s.walks && instrumented.contains(&s.addr))
        .map(|s| s.name)
        .collect();
    names
        .iter()
        .enumerate()
        .filter(|(_, name)| walkers.contains(name.as_str()))
        .map(|(i, _)| i as u32)
        .collect()
}

/// Each coverage flag and the index of its function (`entries`: function
/// starts and their indexes, sorted).
fn flags_of(image: &image::Image<'_>, entries: &[(u64, u32)]) -> Vec<(u64, u32)> {
    // A flag whose entry is not a function's start names none: a test that
    // sets it depends on its whole program.
    image
        .coverage_flags
        .iter()
        .filter_map(|(flag, entry)| {
            let i = entries.binary_search_by_key(entry, |(a, _)| *a).ok()?;
            Some((*flag, entries[i].1))
        })
        .collect()
}

/// The hash of each of `names`' stable name, with its index, sorted.
fn stable_hashes(by_addr: &BTreeMap<u64, &image::Symbol>, names: &[String]) -> Vec<(u64, u32)> {
    // A symbol's token is its stable name, demangled once already.
    let token_of: FastMap<&str, &str> = by_addr
        .values()
        .map(|f| (f.name.as_str(), f.token.as_str()))
        .collect();
    let mut stable: Vec<(u64, u32)> = names
        .par_iter()
        .enumerate()
        .map(|(i, name)| {
            let hash = match token_of.get(name.as_str()) {
                Some(token) => hash_of_stable_name(token),
                None => stable_hash(name),
            };
            (hash, i as u32)
        })
        .collect();
    stable.sort_unstable();
    stable
}

/// The uninstrumented functions sorted by name, with their fingerprints,
/// and the program's constructors among them.
fn uninstrumented(
    computed: &[Computed<'_>],
    normaliser: &normalise::Normaliser<'_, '_>,
) -> (Vec<String>, Vec<Fp>) {
    let (mut other_names, mut other_fps, _) = by_name(
        computed
            .iter()
            .filter(|c| !c.3 && !is_coverage_constructor(c.1)),
    );
    // Which constructors the program runs before `main`, by name: every
    // test's process runs them all, so a constructor added or removed (an
    // `inventory::submit!`, a `#[ctor]`) is a change for every test, as an
    // uninstrumented function's is. (What an instrumented constructor
    // executes is each test's coverage, written as `main` starts.)
    if let Some(digest) = normaliser.section_digest(".init_array", &mut normalise::Memo::default())
    {
        let at = other_names.partition_point(|n| n.as_str() < CONSTRUCTORS);
        other_names.insert(at, CONSTRUCTORS.to_owned());
        other_fps.insert(at, truncate(blake3::Hash::from_bytes(digest)));
    }
    (other_names, other_fps)
}

/// The name the list of a program's constructors goes by among its
/// uninstrumented functions.
pub const CONSTRUCTORS: &str = "(the constructors in .init_array)";

/// A module constructor the coverage pass adds: it only hands the flag and
/// PC arrays to cargo-ekstazi's runtime, which records and changes
/// nothing, so it is no dependency of any test. Fingerprinted, it was a
/// false one: the linker keeps one copy of it, whose references to
/// `__stop___sancov_pcs` resolve to whatever object begins the section
/// after the PC table, so a new static elsewhere reran every test of the
/// program (fd's graph replay, commit `30fd75b`).
fn is_coverage_constructor(name: &str) -> bool {
    name.starts_with("sancov.module_ctor")
}

/// Functions sorted by name, with their fingerprints and entries. Local
/// functions can share a name (one per codegen unit): the name stands for
/// all of them, and its fingerprint for all of theirs.
fn by_name<'a>(
    computed: impl Iterator<Item = &'a Computed<'a>>,
) -> (Vec<String>, Vec<Fp>, Vec<(u64, u32)>) {
    let mut named: BTreeMap<&str, (Vec<Fp>, Vec<u64>)> = BTreeMap::new();
    for (addr, name, fp, _) in computed {
        let slot = named.entry(name).or_default();
        slot.0.push(*fp);
        slot.1.push(*addr);
    }
    let mut names = Vec::with_capacity(named.len());
    let mut fps = Vec::with_capacity(named.len());
    let mut entries = Vec::new();
    for (index, (name, (mut parts, addrs))) in named.into_iter().enumerate() {
        parts.sort_unstable();
        let fp = if let [one] = parts[..] {
            one
        } else {
            let mut h = blake3::Hasher::new();
            parts.iter().for_each(|p| {
                h.update(p);
            });
            truncate(h.finalize())
        };
        names.push(name.to_owned());
        fps.push(fp);
        entries.extend(addrs.into_iter().map(|a| (a, index as u32)));
    }
    entries.sort_unstable();
    (names, fps, entries)
}

/// A reference to a function other functions share a name with.
#[derive(Clone, Copy)]
struct Reference {
    from_instrumented: bool,
    to_instrumented: bool,
    to_weak: bool,
}

impl Reference {
    /// Whether the reference cannot move to another copy of the same
    /// instance in another build (see [`Copies::tells_apart`]).
    fn names_its_copy_exactly(self) -> bool {
        !self.from_instrumented && !self.to_instrumented && !self.to_weak
    }
}

fn truncate(hash: blake3::Hash) -> Fp {
    let mut fp = [0; 16];
    fp.copy_from_slice(&hash.as_bytes()[..16]);
    fp
}

/// A readable name for a mangled symbol, without the trailing hash.
pub fn demangle(name: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(name))
}

/// A symbol's name without the hashes that change with a crate's build
/// metadata (legacy mangling's `h…` suffix, v0's crate disambiguators).
pub fn stable_name(name: &str) -> String {
    demangle(name)
}

/// A v0-mangled name with every crate root's disambiguator (the hash of
/// the crate's build metadata) taken out: `Cs<hash>_` becomes `C`. The rest
/// stays, among it the disambiguators of items of one name in one scope,
/// which [`stable_name`] drops. Other names are returned as they are.
///
/// By hand: `rustc_demangle` prints the crate hashes (as `crate[<hex>]`,
/// the base-62 number plus 2) but exposes no parse tree; each printed hash
/// is turned back into its base-62 spelling and removed from the name.
pub fn without_crate_hashes(name: &str) -> String {
    if !name.starts_with("_R") {
        return name.to_owned();
    }
    let printed = rustc_demangle::demangle(name).to_string();
    let mut out = name.to_owned();
    for hash in printed
        .split('[')
        .skip(1)
        .filter_map(|rest| rest.split_once(']'))
    {
        let Ok(value) = u64::from_str_radix(hash.0, 16) else {
            continue;
        };
        let spelled = match value {
            0 => continue,
            1 => String::new(),
            n => base62(n - 2),
        };
        out = out.replace(&format!("Cs{spelled}_"), "C");
    }
    out
}

fn base62(mut n: u64) -> String {
    const DIGITS: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 62) as usize]);
        n /= 62;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// A 64-bit hash of a symbol's [`stable_name`].
pub fn stable_hash(name: &str) -> u64 {
    hash_of_stable_name(&stable_name(name))
}

pub(crate) fn hash_of_stable_name(stable: &str) -> u64 {
    let digest = blake3::hash(stable.as_bytes());
    u64::from_le_bytes(digest.as_bytes()[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_kept_as_differences_and_read_back() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Flags(#[serde(with = "ascending_addresses")] Vec<(u64, u32)>);
        let flags = Flags(vec![(0x5a_0000, 3), (0x5a_0010, 0), (0x5a_1000, 1)]);
        let bytes = postcard::to_stdvec(&flags).unwrap();
        assert!(bytes.len() < postcard::to_stdvec(&flags.0).unwrap().len());
        assert_eq!(postcard::from_bytes::<Flags>(&bytes).unwrap(), flags);
        // Steps that pass the last address: not one of ours.
        let past = postcard::to_stdvec(&vec![(u64::MAX, 0u32), (2, 1)]).unwrap();
        assert!(postcard::from_bytes::<Flags>(&past).is_err());
    }

    #[test]
    fn crate_hashes_leave_and_scope_disambiguators_stay() {
        // fd's `augment_args` has three `static DEFAULT_VALUE`s; a dependency
        // bump changed fd's crate hash from `bC6OWozCNE2` to `d8kyZLkA4bc`.
        let first_old = "_RNvNvXs4_NtCsbC6OWozCNE2_2fd3cliNtB7_4OptsNtNtCsau51AWZonUi_12clap_builder6derive4Args12augment_args13DEFAULT_VALUE";
        let first_new = "_RNvNvXs4_NtCsd8kyZLkA4bc_2fd3cliNtB7_4OptsNtNtCsau51AWZonUi_12clap_builder6derive4Args12augment_args13DEFAULT_VALUE";
        let second_old = "_RNvNvXs4_NtCsbC6OWozCNE2_2fd3cliNtB7_4OptsNtNtCsau51AWZonUi_12clap_builder6derive4Args12augment_argss_13DEFAULT_VALUE";
        assert_eq!(stable_name(first_old), stable_name(second_old));
        assert_eq!(
            without_crate_hashes(first_old),
            "_RNvNvXs4_NtC2fd3cliNtB7_4OptsNtNtC12clap_builder6derive4Args12augment_args13DEFAULT_VALUE"
        );
        assert_eq!(
            without_crate_hashes(first_old),
            without_crate_hashes(first_new)
        );
        assert_ne!(
            without_crate_hashes(first_old),
            without_crate_hashes(second_old)
        );
        // Legacy names carry their hash in the symbol itself: kept whole.
        let legacy = "_ZN2fx4read17h0123456789abcdefE";
        assert_eq!(without_crate_hashes(legacy), legacy);
    }

    #[test]
    fn only_precompiled_code_names_its_copy_exactly() {
        let reference = |from_instrumented, to_instrumented, to_weak| Reference {
            from_instrumented,
            to_instrumented,
            to_weak,
        };
        // std's `addr2line::line::path_push` calls std's global copy of
        // `RawVecInner::try_allocate_in` (instantiated by gimli); minijinja
        // lost its own copy when a dependency (`unicase`) went away, which
        // must not make `path_push` look changed.
        assert!(reference(false, false, false).names_its_copy_exactly());
        // A weak definition may be replaced by another object's.
        assert!(!reference(false, false, true).names_its_copy_exactly());
        // The project's code is rebuilt: its reference may move to another
        // copy (a crate starts exporting the instance, codegen units are
        // repartitioned), and only the content tells which.
        assert!(!reference(true, false, false).names_its_copy_exactly());
        assert!(!reference(true, true, false).names_its_copy_exactly());
        assert!(!reference(false, true, false).names_its_copy_exactly());
    }
}
