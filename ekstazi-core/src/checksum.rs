//! Checksums of the current world: file contents, path kinds, and the smart
//! checksum of a test binary.
//!
//! [`Checksums`] computes each target at most once per run (in parallel when
//! asked for many at once); the selection compares what it returns with
//! what records hold.

use crate::dep::{Hash, Sum, Target};
use crate::path::Anchors;
use rayon::prelude::*;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The checksum of a file's bytes. Only regular files are read: a FIFO or a
/// device would block or never end, so for those (and directories) the
/// checksum is their kind.
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
        hasher.update_reader(file)?;
        Ok(*hasher.finalize().as_bytes())
    });
    match hash {
        Ok(hash) => Sum::Hash(hash),
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
    use object::{Object, ObjectSection, SectionFlags, SectionKind};

    let data = fs::read(path)?;
    let file = object::File::parse(&*data).map_err(io::Error::other)?;
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
    known: Mutex<HashMap<Target, Sum>>,
}

impl Checksums {
    pub fn new(anchors: Anchors) -> Checksums {
        Checksums {
            anchors,
            known: Mutex::new(HashMap::new()),
        }
    }

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
        let follow = !matches!(target, Target::Kind { follow: false, .. });
        let before = modified(&path, follow);
        let sum = self.compute(target);
        match sum {
            Sum::Hash(_) => {
                let after = modified(&path, follow);
                let stable =
                    before == after && before.is_some_and(|mtime| settled_before(mtime, since));
                if stable { sum } else { Sum::Unknown }
            }
            // A directory's time changes with its entries; its kind is what counts.
            Sum::Kind(_) => sum,
            // The test found it, so it was there: now it is not.
            Sum::Absent | Sum::Unknown => Sum::Unknown,
        }
    }

    fn path_of(&self, target: &Target) -> Option<std::path::PathBuf> {
        match target {
            Target::Content(path) | Target::Kind { path, .. } => self.anchors.resolve(path),
            Target::TestBinary => None,
        }
    }

    fn compute(&self, target: &Target) -> Sum {
        let Some(path) = self.path_of(target) else {
            return Sum::Unknown;
        };
        match target {
            Target::Content(_) => content(&path),
            Target::Kind { follow, .. } => kind(&path, *follow),
            Target::TestBinary => Sum::Unknown,
        }
    }
}

/// Whether a modification time proves the entry was last changed before
/// `since`. Kernels stamp files from a coarse clock (a few milliseconds
/// behind), and some file systems keep whole seconds only, so a time too
/// close to `since` proves nothing.
fn settled_before(mtime: SystemTime, since: SystemTime) -> bool {
    let coarse = mtime
        .duration_since(SystemTime::UNIX_EPOCH)
        .is_ok_and(|d| d.subsec_nanos() == 0);
    let margin = if coarse {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(50)
    };
    since.checked_sub(margin).is_some_and(|limit| mtime < limit)
}

fn modified(path: &Path, follow: bool) -> Option<SystemTime> {
    let meta = if follow {
        fs::metadata(path)
    } else {
        fs::symlink_metadata(path)
    };
    meta.ok()?.modified().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dep::FileKind;

    #[test]
    fn a_recent_modification_proves_nothing() {
        let now = SystemTime::now();
        assert!(!settled_before(now, now));
        assert!(!settled_before(now - Duration::from_millis(10), now));
        assert!(settled_before(
            now - Duration::from_secs(1),
            now + Duration::from_nanos(1)
        ));
        let whole_second = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(!settled_before(
            whole_second,
            whole_second + Duration::from_secs(1)
        ));
        assert!(settled_before(
            whole_second,
            whole_second + Duration::from_secs(3)
        ));
    }

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
    fn the_smart_checksum_reads_real_binaries() {
        let exe = std::env::current_exe().unwrap();
        let a = smart_binary(&exe, &[]).unwrap();
        assert_eq!(smart_binary(&exe, &[]).unwrap(), a);
        assert!(smart_binary(Path::new("/dev/null"), &[]).is_err());
    }
}
