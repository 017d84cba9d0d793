//! Checksums of the current world: file contents, path kinds, and the smart
//! checksum of a test binary.
//!
//! [`Checksums`] computes each target at most once per run (in parallel when
//! asked for many at once); the selection compares what it returns with
//! what records hold.

use crate::digests::kept_sums::KeptSums;
use crate::files::identity::{Identity, settled_before};
use crate::model::dep::{FileKind, Hash, Sum, Target};
use crate::model::path::{Anchors, Placeholders};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

/// The permission bits that enter a file's checksum: the owner's read,
/// write and execute bits. A script that loses its executable bit fails to
/// run, and a file that loses its read bit fails to open, so they are part
/// of what a test saw. The group's and others' bits are left out: they
/// follow each machine's umask (git itself keeps only the executable bit),
/// and a CI cache restored into a checkout made with another umask must not
/// rerun every test.
pub const MODE_BITS: u32 = 0o700;

fn mode_of(meta: &fs::Metadata) -> u8 {
    use std::os::unix::fs::PermissionsExt;
    ((meta.permissions().mode() & MODE_BITS) >> 6) as u8
}

/// A checksum that covers the permission bits as well as `hash`.
fn with_mode(hash: Hash, mode: u8) -> Hash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&hash);
    hasher.update(&[b'm', mode]);
    *hasher.finalize().as_bytes()
}

/// The checksum of a file's bytes and of its owner's permission bits
/// ([`MODE_BITS`]). Only regular files are read: a FIFO or a device would
/// block or never end, so for those (and directories) the checksum is their
/// kind.
pub fn content(path: &Path) -> Sum {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return absent_or_unknown(&e),
    };
    if !meta.is_file() {
        return Sum::Kind(meta.file_type().into());
    }
    let hash = File::open(path).and_then(|file| {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&[b'm', mode_of(&meta)]);
        hasher.update_reader(file)?;
        Ok(*hasher.finalize().as_bytes())
    });
    match hash {
        Ok(hash) => Sum::Hash(hash),
        Err(e) => absent_or_unknown(&e),
    }
}

/// The checksum of a build file ([`Target::BuildFile`]): its bytes with
/// this checkout's directories replaced by placeholders.
pub fn build_file(path: &Path, placeholders: &Placeholders) -> Sum {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return absent_or_unknown(&e),
    };
    if !meta.is_file() {
        return Sum::Kind(meta.file_type().into());
    }
    match fs::read(path) {
        Ok(bytes) => Sum::Hash(*blake3::hash(&placeholders.replace(&bytes)).as_bytes()),
        Err(e) => absent_or_unknown(&e),
    }
}

/// Whether a path exists and as what.
pub fn kind(path: &Path, follow: bool) -> Sum {
    let meta = if follow {
        fs::metadata(path)
    } else {
        fs::symlink_metadata(path)
    };
    match meta {
        Ok(meta) => Sum::Kind(meta.file_type().into()),
        Err(e) => absent_or_unknown(&e),
    }
}

/// The checksum of a directory's listing: its entries' names and kinds
/// (without following symbolic links), sorted, so that the order the file
/// system returns them in does not matter and the entries' contents do not
/// enter. Not a directory: its kind.
pub fn listing(path: &Path) -> Sum {
    read_listing(path, None)
}

/// [`listing`], and the [`ListingWitness`] of the same read of the
/// directory (`None` when it is not a listing).
pub fn listing_and_witness(path: &Path) -> (Sum, Option<ListingWitness>) {
    let mut witness = ListingWitness::default();
    let sum = read_listing(path, Some(&mut witness));
    let witnessed = matches!(sum, Sum::Hash(_)).then_some(witness);
    (sum, witnessed)
}

/// Reads a directory once for [`listing`], summing up the witness only
/// when asked (the selection checksums listings without one).
fn read_listing(path: &Path, mut witness: Option<&mut ListingWitness>) -> Sum {
    let entries = match fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => return kind(path, true),
        Err(e) => return absent_or_unknown(&e),
    };
    let mut names: Vec<(Vec<u8>, u8)> = Vec::new();
    for entry in entries {
        let Ok(entry) = entry else {
            return Sum::Unknown;
        };
        let kind = match entry.file_type().map(FileKind::from) {
            Ok(FileKind::File) => b'f',
            Ok(FileKind::Dir) => b'd',
            Ok(FileKind::Symlink) => b'l',
            Ok(FileKind::Other) => b'o',
            Err(_) => return Sum::Unknown,
        };
        let name = entry.file_name().as_bytes().to_vec();
        if let Some(witness) = witness.as_deref_mut() {
            witness.add(&name, kind);
        }
        names.push((name, kind));
    }
    names.sort_unstable();
    let mut hasher = blake3::Hasher::new();
    for (name, kind) in &names {
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name);
        hasher.update(&[*kind]);
    }
    Sum::Hash(*hasher.finalize().as_bytes())
}

/// What the shim computes of a directory just before a process first reads
/// it (it reads the directory once itself): the sums of two 64-bit hashes of
/// each entry's kind and name, in whatever order the file system returns
/// them, and the entry count. The shim cannot sort or keep the names (its
/// hooks must not allocate), so it cannot compute [`listing`] itself; equal
/// witnesses say that the test found the listing that is there now, whose
/// checksum can then be recorded. `ekstazi-runtime` computes it in its
/// `hooks::dirs` module, with the same per-entry hashes (`ekstazi_wire::listing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ListingWitness {
    sum: u64,
    mix: u64,
    count: u64,
}

impl ListingWitness {
    /// Its size in a trace event.
    pub const LEN: usize = 24;

    /// Adds one entry (`kind`: `f`, `d`, `l` or `o`).
    pub fn add(&mut self, name: &[u8], kind: u8) {
        let (h1, h2) = ekstazi_wire::listing::entry_hashes(name, kind);
        self.sum = self.sum.wrapping_add(h1);
        self.mix = self.mix.wrapping_add(h2);
        self.count += 1;
    }

    /// As the shim writes it: three little-endian `u64`s.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        for (i, word) in [self.sum, self.mix, self.count].into_iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    /// Reads [`ListingWitness::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Option<ListingWitness> {
        let word = |i: usize| {
            Some(u64::from_le_bytes(
                bytes.get(8 * i..8 * i + 8)?.try_into().ok()?,
            ))
        };
        (bytes.len() == Self::LEN).then_some(())?;
        Some(ListingWitness {
            sum: word(0)?,
            mix: word(1)?,
            count: word(2)?,
        })
    }
}

/// The checksum of where a symbolic link points, as `readlink` returns it.
/// An absolute target is stored relative to its anchor, so that a link into
/// the workspace checksums the same in another checkout.
pub fn link_target(target: &[u8], anchors: &Anchors) -> Sum {
    let mut hasher = blake3::Hasher::new();
    if target.starts_with(b"/") {
        hasher.update(b"abs");
        hash_stored(
            &mut hasher,
            &anchors.store(Path::new(OsStr::from_bytes(target))),
        );
    } else {
        hasher.update(b"rel");
        hasher.update(target);
    }
    Sum::Hash(*hasher.finalize().as_bytes())
}

/// The checksum of a canonical path (what `realpath` returned), relative to
/// its anchor.
pub fn resolved_path(resolved: &Path, anchors: &Anchors) -> Sum {
    let mut hasher = blake3::Hasher::new();
    hash_stored(&mut hasher, &anchors.store(resolved));
    Sum::Hash(*hasher.finalize().as_bytes())
}

fn hash_stored(hasher: &mut blake3::Hasher, path: &crate::model::path::StoredPath) {
    hasher.update(&[path.anchor() as u8]);
    hasher.update(path.rel().as_os_str().as_bytes());
}

/// The present checksum of a symbolic link target.
fn link(path: &Path, anchors: &Anchors) -> Sum {
    match fs::read_link(path) {
        Ok(target) => link_target(target.as_os_str().as_bytes(), anchors),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => kind(path, false),
        Err(e) => absent_or_unknown(&e),
    }
}

fn resolved(path: &Path, anchors: &Anchors) -> Sum {
    match fs::canonicalize(path) {
        Ok(canonical) => resolved_path(&canonical, anchors),
        Err(e) => absent_or_unknown(&e),
    }
}

fn absent_or_unknown(e: &io::Error) -> Sum {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Sum::Absent,
        _ => Sum::Unknown,
    }
}

/// The smart checksum of an executable: every section the loader maps, by
/// name and content, except the build id (which changes with any byte of
/// the file, debug information included). Debug sections are not mapped, so
/// a change that only moves debug information leaves the checksum alone.
///
/// Occurrences of `erase` (the absolute directories of this checkout, e.g.
/// from `env!("CARGO_MANIFEST_DIR")`) are hashed as a placeholder, so that the
/// same sources built in another directory give the same checksum. List
/// longer strings first where one contains another.
pub fn smart_binary(path: &Path, erase: &[&[u8]]) -> io::Result<Hash> {
    smart_binary_of(&fs::read(path)?, erase)
}

/// [`smart_binary`] of a test binary this run's build has just linked,
/// mapped instead of read (see [`crate::digests::mapped`]).
pub fn smart_test_binary(path: &Path, erase: &[&[u8]]) -> io::Result<Hash> {
    smart_binary_of(&crate::digests::mapped::bytes(path)?, erase)
}

fn smart_binary_of(data: &[u8], erase: &[&[u8]]) -> io::Result<Hash> {
    use object::{Object, ObjectSection, SectionFlags, SectionKind};

    let file = object::File::parse(data).map_err(io::Error::other)?;
    let mut hasher = blake3::Hasher::new();
    for section in file.sections() {
        let loaded = match section.flags() {
            SectionFlags::Elf { sh_flags, .. } => sh_flags.0 & object::elf::SHF_ALLOC.0 != 0,
            _ => !matches!(section.kind(), SectionKind::Debug | SectionKind::Metadata),
        };
        let name = section.name_bytes().map_err(io::Error::other)?;
        if !loaded || name == b".note.gnu.build-id" {
            continue;
        }
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name);
        hasher.update(&section.size().to_le_bytes());
        if section.kind() != SectionKind::UninitializedData {
            let bytes = section.data().map_err(io::Error::other)?;
            hash_erasing(&mut hasher, bytes, erase);
        }
    }
    Ok(*hasher.finalize().as_bytes())
}

/// Feeds `bytes` to the hasher with every occurrence of a string in `erase`
/// replaced by a marker naming which one it was.
fn hash_erasing(hasher: &mut blake3::Hasher, mut bytes: &[u8], erase: &[&[u8]]) {
    let finders: Vec<_> = erase
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| memchr::memmem::Finder::new(*s))
        .collect();
    loop {
        let earliest = finders
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.find(bytes).map(|at| (at, i, f.needle().len())))
            .min_by_key(|(at, i, _)| (*at, *i));
        let Some((at, which, len)) = earliest else {
            hasher.update(bytes);
            return;
        };
        hasher.update(&bytes[..at]);
        hasher.update(&[0xff, b'$', which as u8, 0xff]);
        bytes = &bytes[at + len..];
    }
}

/// The current checksum of every target asked about in one run, computed at
/// most once each.
pub struct Checksums {
    anchors: Anchors,
    erase: Vec<Vec<u8>>,
    /// For build files, which name directories as a Makefile spells them.
    placeholders: Placeholders,
    /// Computed before any test ran: the authoritative present.
    known: Mutex<HashMap<Target, Sum>>,
    /// Computed after a test, valid while the entry's stamp is unchanged:
    /// a program that a thousand tests run is checksummed once.
    seen: Mutex<HashMap<Target, (Identity, Sum)>>,
    /// Files' and programs' checksums kept from earlier runs ([`KeptSums`]).
    kept: Mutex<KeptSums>,
}

impl Checksums {
    /// Nothing computed yet, for paths anchored by `anchors`.
    pub fn new(anchors: Anchors) -> Checksums {
        Checksums {
            erase: anchors.erase_list(),
            placeholders: Placeholders::new(&anchors, None).with_makefile_spelling(),
            anchors,
            known: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            kept: Mutex::new(KeptSums::default()),
        }
    }

    /// Files' and programs' checksums kept by an earlier run (`bytes`, as
    /// [`Checksums::kept_to_save`] gave them), for this checkout's erased
    /// directories.
    pub fn with_kept(self, bytes: Option<&[u8]>) -> Checksums {
        let mut binding = blake3::Hasher::new();
        for erased in &self.erase {
            binding.update(&(erased.len() as u64).to_le_bytes());
            binding.update(erased);
        }
        *self.kept.lock().expect("kept sums lock") =
            KeptSums::decode(bytes, *binding.finalize().as_bytes());
        self
    }

    /// What to keep for the next run, if this one checksummed a file it
    /// had not kept.
    pub fn kept_to_save(&self) -> Option<Vec<u8>> {
        self.kept
            .lock()
            .expect("kept sums lock")
            .encode_if_changed()
    }

    /// `compute(path)`, kept by the file's identity under `kind` (one
    /// byte: a file's content and a program's smart checksum differ).
    fn kept(&self, path: &Path, kind: u8, compute: impl FnOnce(&Path) -> Sum) -> Sum {
        let mut key = vec![kind];
        key.extend_from_slice(path.as_os_str().as_bytes());
        let before = Identity::of(path, true);
        if let Some(identity) = &before
            && let Some(sum) = self
                .kept
                .lock()
                .expect("kept sums lock")
                .get(&key, identity)
        {
            return sum;
        }
        let sum = compute(path);
        if let Some(identity) = before
            && Identity::of(path, true) == before
        {
            self.kept
                .lock()
                .expect("kept sums lock")
                .put(&key, identity, &sum);
        }
        sum
    }

    /// The toolchain's root is a placeholder in build files too.
    pub fn with_toolchain(mut self, sysroot: &Path) -> Checksums {
        self.placeholders =
            Placeholders::new(&self.anchors, Some(sysroot)).with_makefile_spelling();
        self
    }

    /// The smart checksum of an executable, with this checkout's directories
    /// erased; the plain content checksum of anything the smart checksum
    /// cannot read (a script run through its `#!` line).
    pub fn program(&self, path: &Path) -> Sum {
        self.executable(path, smart_binary)
    }

    /// [`Checksums::program`] of a test binary this run's build has just
    /// linked: mapped, not read (only its loaded sections are hashed);
    /// kept by the file's identity (an unchanged build's binaries are not
    /// mapped at all).
    pub fn test_binary(&self, path: &Path) -> Sum {
        self.kept(path, b't', |p| self.executable(p, smart_test_binary))
    }

    fn executable(&self, path: &Path, smart: fn(&Path, &[&[u8]]) -> io::Result<Hash>) -> Sum {
        let erase: Vec<&[u8]> = self.erase.iter().map(Vec::as_slice).collect();
        // The mode is taken before the bytes: a program made runnable while
        // it was read is then at worst checksummed as the older mode.
        let mode = fs::metadata(path).map(|meta| mode_of(&meta));
        match (smart(path, &erase), mode) {
            (Ok(hash), Ok(mode)) => Sum::Hash(with_mode(hash, mode)),
            (Ok(_), Err(e)) => absent_or_unknown(&e),
            (Err(_), _) => match content(path) {
                // Nothing can run a directory (`execve` and `dlopen` fail the
                // same way whatever it holds), so its kind is all a test that
                // tried saw; while it stays a directory the test is unaffected,
                // and a file there is another checksum.
                sum @ Sum::Kind(FileKind::Dir) => sum,
                // A device or a FIFO: what it would yield cannot be known.
                Sum::Kind(_) => Sum::Unknown,
                other => other,
            },
        }
    }

    /// What stored paths are anchored to.
    pub fn anchors(&self) -> &Anchors {
        &self.anchors
    }

    /// Computes, in parallel, every target not computed yet.
    pub fn prefetch<'a>(&self, targets: impl IntoIterator<Item = &'a Target>) {
        let missing: Vec<&Target> = {
            let known = self.known.lock().expect("checksum cache lock");
            let mut seen = std::collections::HashSet::new();
            targets
                .into_iter()
                .filter(|t| !known.contains_key(*t) && seen.insert(*t))
                .collect()
        };
        let computed: Vec<(Target, Sum)> = missing
            .into_par_iter()
            .map(|target| (target.clone(), self.compute(target)))
            .collect();
        self.known
            .lock()
            .expect("checksum cache lock")
            .extend(computed);
    }

    /// The current checksum of a path target (`TestBinary` is the caller's:
    /// it is `Unknown` here).
    pub fn get(&self, target: &Target) -> Sum {
        if let Some(sum) = self.known.lock().expect("checksum cache lock").get(target) {
            return sum.clone();
        }
        let sum = self.compute(target);
        self.known
            .lock()
            .expect("checksum cache lock")
            .insert(target.clone(), sum.clone());
        sum
    }

    /// The checksum computed earlier in this run, if any.
    pub fn cached(&self, target: &Target) -> Option<Sum> {
        self.known
            .lock()
            .expect("checksum cache lock")
            .get(target)
            .cloned()
    }

    /// The checksum of a target as a test that started at `since` saw it:
    /// the value computed before the run when there is one. Otherwise the
    /// value now, if it can stand for what the test saw: a file's content
    /// only if it did not change after `since`; a path the test found must
    /// still be there. Anything else is `Unknown` (the test runs next time).
    pub fn as_seen_since(&self, target: &Target, since: SystemTime) -> Sum {
        if let Some(sum) = self.cached(target) {
            return sum;
        }
        let Some(path) = self.path_of(target) else {
            return Sum::Unknown;
        };
        let follow = !matches!(target, Target::Kind { follow: false, .. } | Target::Link(_));
        let before = Identity::of(&path, follow);
        let settled = before.is_some_and(|stamp| settled_before(stamp.changed(), since));
        if settled
            && let Some((stamp, sum)) = self.seen.lock().expect("checksum cache lock").get(target)
            && Some(*stamp) == before
        {
            return sum.clone();
        }
        let sum = self.compute(target);
        match sum {
            Sum::Hash(_) => {
                if !settled || Identity::of(&path, follow) != before {
                    return Sum::Unknown;
                }
                if let Some(stamp) = before {
                    self.seen
                        .lock()
                        .expect("checksum cache lock")
                        .insert(target.clone(), (stamp, sum.clone()));
                }
                sum
            }
            // A directory's time changes with its entries; its kind is what counts.
            Sum::Kind(_) => sum,
            // The test found it, so it was there: now it is not.
            Sum::Absent | Sum::Unknown => Sum::Unknown,
        }
    }

    /// A listing the test read whole, as the shim witnessed it, when
    /// [`Checksums::as_seen_since`] cannot tell (the directory changed
    /// while the test ran, and nothing computed it before): the listing now,
    /// if it is the one the test saw; otherwise `Unknown`.
    pub fn witnessed(&self, target: &Target, seen: &ListingWitness) -> Sum {
        let Target::Listing(_) = target else {
            return Sum::Unknown;
        };
        let Some(path) = self.path_of(target) else {
            return Sum::Unknown;
        };
        match listing_and_witness(&path) {
            (sum @ Sum::Hash(_), Some(now)) if now == *seen => sum,
            _ => Sum::Unknown,
        }
    }

    fn path_of(&self, target: &Target) -> Option<std::path::PathBuf> {
        self.anchors.resolve(target.path()?)
    }

    fn compute(&self, target: &Target) -> Sum {
        let Some(path) = self.path_of(target) else {
            return Sum::Unknown;
        };
        match target {
            Target::Content(_) => self.kept(&path, b'c', content),
            Target::Kind { follow, .. } => kind(&path, *follow),
            Target::Program(_) | Target::Library(_) => self.kept(&path, b'p', |p| self.program(p)),
            Target::Listing(_) => listing(&path),
            Target::BuildFile(_) => build_file(&path, &self.placeholders),
            Target::Link(_) => link(&path, &self.anchors),
            Target::Resolved(_) => resolved(&path, &self.anchors),
            // Not a path: the caller's (see `select::Present`).
            Target::TestBinary | Target::Env(_) | Target::Environment => Sum::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn content_distinguishes_bytes_kinds_and_absence() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        fs::write(&file, "one").unwrap();
        let one = content(&file);
        assert!(matches!(one, Sum::Hash(_)));
        fs::write(&file, "one").unwrap();
        assert_eq!(content(&file), one, "same bytes, new mtime: same checksum");
        fs::write(&file, "two").unwrap();
        assert_ne!(content(&file), one);
        assert_eq!(content(dir.path()), Sum::Kind(FileKind::Dir));
        assert_eq!(content(&dir.path().join("nope")), Sum::Absent);
        assert_eq!(content(&file.join("below-a-file")), Sum::Absent);
        assert_eq!(content(Path::new("/dev/null")), Sum::Kind(FileKind::Other));
    }

    #[test]
    fn the_owners_permission_bits_are_part_of_a_files_checksum() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("hi.sh");
        fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let chmod = |mode| fs::set_permissions(&script, fs::Permissions::from_mode(mode)).unwrap();
        chmod(0o755);
        let checksums = Checksums::new(Anchors::new(dir.path(), &dir.path().join("target"), None));
        let (runnable, program) = (content(&script), checksums.program(&script));
        chmod(0o644);
        assert_ne!(content(&script), runnable, "the executable bit went");
        assert_ne!(checksums.program(&script), program);
        chmod(0o775);
        assert_eq!(content(&script), runnable, "another umask's group bits");
        assert_eq!(checksums.program(&script), program);
    }

    #[test]
    fn a_new_dependency_is_trusted_only_if_it_predates_the_test() {
        let dir = tempfile::tempdir().unwrap();
        let checksums = Checksums::new(Anchors::new(dir.path(), &dir.path().join("target"), None));
        fs::write(dir.path().join("a.txt"), "a").unwrap();
        let target = Target::Content(checksums.anchors().store(&dir.path().join("a.txt")));
        let now = SystemTime::now();
        assert_eq!(
            checksums.as_seen_since(&target, now),
            Sum::Unknown,
            "written as the test started"
        );
        let later = now + Duration::from_secs(1);
        let sum = checksums.as_seen_since(&target, later);
        assert_eq!(sum, content(&dir.path().join("a.txt")));
        assert_eq!(
            checksums.as_seen_since(&target, later),
            sum,
            "served from the stamp cache"
        );
        fs::write(dir.path().join("a.txt"), "bb").unwrap();
        assert_eq!(
            checksums.as_seen_since(&target, later),
            content(&dir.path().join("a.txt")),
            "a new stamp: checksummed again, not served from the cache"
        );
        assert_ne!(checksums.as_seen_since(&target, later), sum);
        let gone = Target::Content(checksums.anchors().store(&dir.path().join("gone")));
        assert_eq!(
            checksums.as_seen_since(&gone, later),
            Sum::Unknown,
            "read, then deleted"
        );
    }

    #[test]
    fn listings_see_names_and_kinds_not_contents() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.json"), "1").unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        let before = listing(dir.path());
        assert!(matches!(before, Sum::Hash(_)));
        fs::write(dir.path().join("a.json"), "2").unwrap();
        assert_eq!(listing(dir.path()), before, "content is not listing");
        fs::write(dir.path().join("b.json"), "").unwrap();
        let added = listing(dir.path());
        assert_ne!(added, before);
        fs::remove_file(dir.path().join("b.json")).unwrap();
        assert_eq!(listing(dir.path()), before);
        fs::remove_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("sub"), "").unwrap();
        assert_ne!(listing(dir.path()), before, "kind of an entry");
        assert_eq!(listing(&dir.path().join("nope")), Sum::Absent);
        assert_eq!(
            listing(&dir.path().join("a.json")),
            Sum::Kind(FileKind::File)
        );
    }

    #[test]
    fn a_witnessed_listing_is_recorded_only_if_it_is_the_one_there_now() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), "").unwrap();
        fs::create_dir(dir.path().join("b")).unwrap();
        let checksums = Checksums::new(Anchors::new(dir.path(), &dir.path().join("target"), None));
        let target = Target::Listing(checksums.anchors().store(dir.path()));
        // Order-free, as the shim sees entries in the file system's order.
        let mut seen = ListingWitness::default();
        seen.add(b"b", b'd');
        seen.add(b"a", b'f');
        assert_eq!(Some(seen), listing_and_witness(dir.path()).1);
        assert_eq!(checksums.witnessed(&target, &seen), listing(dir.path()));
        let mut kind = ListingWitness::default();
        kind.add(b"a", b'f');
        kind.add(b"b", b'f');
        assert_eq!(checksums.witnessed(&target, &kind), Sum::Unknown);
        fs::write(dir.path().join("c"), "").unwrap();
        assert_eq!(
            checksums.witnessed(&target, &seen),
            Sum::Unknown,
            "an entry added after the test read it"
        );
        let bytes = seen.to_bytes();
        assert_eq!(ListingWitness::from_bytes(&bytes), Some(seen));
        assert_eq!(ListingWitness::from_bytes(&bytes[1..]), None);
    }

    #[test]
    fn links_and_resolved_paths_are_anchored() {
        let here = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
        let there = Anchors::new(Path::new("/ci"), Path::new("/ci/target"), None);
        assert_eq!(
            link_target(b"/ws/data/a", &here),
            link_target(b"/ci/data/a", &there)
        );
        assert_ne!(
            link_target(b"data/a", &here),
            link_target(b"/ws/data/a", &here)
        );
        assert_eq!(
            resolved_path(Path::new("/ws/x"), &here),
            resolved_path(Path::new("/ci/x"), &there)
        );
        let dir = tempfile::tempdir().unwrap();
        let anchors = Anchors::new(dir.path(), &dir.path().join("target"), None);
        std::os::unix::fs::symlink("a", dir.path().join("l")).unwrap();
        assert_eq!(
            link(&dir.path().join("l"), &anchors),
            link_target(b"a", &anchors)
        );
        assert_eq!(
            link(dir.path(), &anchors),
            Sum::Kind(FileKind::Dir),
            "not a link"
        );
        assert_eq!(resolved(&dir.path().join("l"), &anchors), Sum::Absent);
        fs::write(dir.path().join("a"), "").unwrap();
        assert_eq!(
            resolved(&dir.path().join("l"), &anchors),
            resolved_path(&dir.path().canonicalize().unwrap().join("a"), &anchors)
        );
    }

    #[test]
    fn erasing_is_position_independent() {
        let hash = |bytes: &[u8]| {
            let mut h = blake3::Hasher::new();
            hash_erasing(&mut h, bytes, &[b"/ws/target", b"/ws"]);
            h.finalize()
        };
        assert_eq!(
            hash(b"x/ws/src/y/ws/target/z"),
            hash(b"x/ws/src/y/ws/target/z")
        );
        let mut h = blake3::Hasher::new();
        hash_erasing(&mut h, b"x/ci/src", &[b"/ci/target", b"/ci"]);
        assert_eq!(hash(b"x/ws/src"), h.finalize());
        assert_ne!(
            hash(b"x/ws/src"),
            hash(b"x/ws/target/src"),
            "which anchor matters"
        );
        assert_ne!(hash(b"abc"), hash(b"abd"));
    }

    #[test]
    fn build_files_checksum_alike_in_a_moved_checkout() {
        let sum_in = |ws: &Path, text: &str| {
            fs::create_dir_all(ws.join("target/debug/deps")).unwrap();
            let file = ws.join("target/debug/deps/a-1.d");
            fs::write(&file, text.replace("WS", ws.to_str().unwrap())).unwrap();
            let checksums = Checksums::new(Anchors::new(ws, &ws.join("target"), None))
                .with_toolchain(Path::new("/opt/rust"));
            let target = Target::BuildFile(checksums.anchors().store(&file));
            checksums.get(&target)
        };
        let dir = tempfile::tempdir().unwrap();
        let text = "WS/target/debug/deps/a-1.d: WS/src/lib.rs /opt/rust/lib/x.rs\n\n\
                    # env-dep:CARGO_MANIFEST_DIR=WS\n";
        let here = sum_in(&dir.path().join("here"), text);
        assert!(matches!(here, Sum::Hash(_)), "{here:?}");
        let moved = sum_in(&dir.path().join("a-longer-name"), text);
        assert_eq!(here, moved);
        let other = sum_in(
            &dir.path().join("other"),
            &text.replace("src/lib.rs", "src/main.rs"),
        );
        assert_ne!(here, other, "what it says still counts");
        assert_eq!(
            build_file(&dir.path().join("nope"), &Placeholders::default()),
            Sum::Absent
        );
    }

    #[test]
    fn a_directory_run_as_a_program_checksums_as_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let checksums = Checksums::new(Anchors::new(dir.path(), &dir.path().join("target"), None));
        let editor = dir.path().join("editor");
        fs::create_dir(&editor).unwrap();
        let target = Target::Program(checksums.anchors().store(&editor));
        let as_dir = checksums.get(&target);
        assert_eq!(as_dir, Sum::Kind(FileKind::Dir));
        assert!(as_dir.matches(&Checksums::new(checksums.anchors().clone()).get(&target)));
        let later = SystemTime::now() + Duration::from_secs(1);
        let fresh = Checksums::new(checksums.anchors().clone());
        assert_eq!(
            fresh.as_seen_since(&target, later),
            as_dir,
            "recorded as such"
        );
        fs::remove_dir(&editor).unwrap();
        fs::write(&editor, "#!/bin/sh\n").unwrap();
        let as_file = Checksums::new(checksums.anchors().clone()).get(&target);
        assert!(matches!(as_file, Sum::Hash(_)), "{as_file:?}");
        assert!(!as_dir.matches(&as_file));
        assert_eq!(
            checksums.program(Path::new("/dev/null")),
            Sum::Unknown,
            "a device"
        );
    }

    #[test]
    fn the_smart_checksum_sees_what_the_loader_maps_and_nothing_else() {
        use object::{Object, ObjectSection};
        let data = fs::read(std::env::current_exe().unwrap()).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let base = smart_binary_of(&data, &[]).unwrap();
        let flipped = |name: &str| {
            let section = file
                .section_by_name(name)
                .unwrap_or_else(|| panic!("the test binary has no {name}"));
            let (start, size) = section.file_range().unwrap();
            let mut copy = data.clone();
            copy[(start + size / 2) as usize] ^= 0xff;
            smart_binary_of(&copy, &[]).unwrap()
        };
        // Debug information, the compiler's note, the symbol table: not
        // loaded. The build id is loaded, but changes with any of those.
        for unmapped in [".debug_info", ".comment", ".symtab", ".note.gnu.build-id"] {
            assert_eq!(flipped(unmapped), base, "{unmapped} is not what runs");
        }
        for mapped in [".text", ".rodata"] {
            assert_ne!(flipped(mapped), base, "{mapped} is what runs");
        }
    }

    #[test]
    fn a_witness_counts_its_entries() {
        let mut witness = ListingWitness::default();
        witness.add(b"a", b'f');
        witness.add(b"b", b'd');
        let count = u64::from_le_bytes(witness.to_bytes()[16..24].try_into().unwrap());
        assert_eq!(count, 2, "as the shim counts them");
    }

    #[test]
    fn a_resolved_path_is_its_path() {
        let here = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
        assert_ne!(
            resolved_path(Path::new("/ws/x"), &here),
            resolved_path(Path::new("/ws/y"), &here)
        );
        assert_ne!(
            resolved_path(Path::new("/ws/x"), &here),
            resolved_path(Path::new("/elsewhere/x"), &here),
            "the workspace's x, or another"
        );
    }

    #[test]
    fn what_was_computed_before_the_run_stays_what_the_tests_are_judged_by() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        fs::write(&file, "before").unwrap();
        let checksums = Checksums::new(Anchors::new(dir.path(), &dir.path().join("target"), None));
        let target = Target::Content(checksums.anchors().store(&file));
        let before = checksums.get(&target);
        assert_eq!(checksums.cached(&target), Some(before.clone()));
        fs::write(&file, "during the run").unwrap();
        // Neither computing ahead nor asking as of a test's start replaces
        // it with what is there now.
        checksums.prefetch([&target, &target]);
        assert_eq!(checksums.cached(&target), Some(before.clone()));
        let later = SystemTime::now() + Duration::from_secs(5);
        assert_eq!(checksums.as_seen_since(&target, later), before);
        // What was not computed before is computed ahead, once.
        let other = Target::Content(checksums.anchors().store(&dir.path().join("b.txt")));
        assert_eq!(checksums.cached(&other), None);
        checksums.prefetch([&other]);
        assert_eq!(checksums.cached(&other), Some(Sum::Absent));
    }

    #[test]
    fn a_file_read_through_a_link_is_stamped_by_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.txt");
        fs::write(&file, "a").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("link")).unwrap();
        let checksums = Checksums::new(Anchors::new(dir.path(), &dir.path().join("target"), None));
        let target = Target::Content(checksums.anchors().store(&dir.path().join("link")));
        let later = SystemTime::now() + Duration::from_secs(1);
        assert_eq!(checksums.as_seen_since(&target, later), content(&file));
        // The link is as it was; what it points to is not.
        fs::write(&file, "bb").unwrap();
        assert_eq!(checksums.as_seen_since(&target, later), content(&file));
    }

    #[test]
    fn a_time_exactly_at_the_margin_proves_nothing() {
        let since = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_500);
        assert!(!settled_before(since - Duration::from_millis(50), since));
        assert!(settled_before(since - Duration::from_millis(51), since));
    }

    #[test]
    fn the_smart_checksum_reads_real_binaries() {
        let exe = std::env::current_exe().unwrap();
        let a = smart_binary(&exe, &[]).unwrap();
        assert_eq!(smart_binary(&exe, &[]).unwrap(), a);
        assert_eq!(smart_test_binary(&exe, &[]).unwrap(), a, "mapped or read");
        assert!(smart_binary(Path::new("/dev/null"), &[]).is_err());
        assert!(smart_test_binary(Path::new("/dev/null"), &[]).is_err());
    }
}
