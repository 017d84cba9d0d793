//! `<executable>.extents`: the extents the fingerprints read from a linker
//! map, kept once the map has been read, so that the map can go.
//!
//! A map is 30–75 MB of text per test binary and read once per build of
//! it (its fingerprints are then cached by the build's digest), yet the
//! maps were all of the instrumented build's excess on disk over a plain
//! one. What the fingerprints take from a map, the extents of the loaded
//! sections' input sections, is a few percent of it: that is what stays,
//! for the rare run that must fingerprint the build again (another state
//! directory, a state restored without its snapshots).
//!
//! Invariant: kept extents are used only for the executable they were read
//! for. The file names the digest of everything the loader maps of it
//! (each allocated section's name, address, size and bytes), and a file
//! that does not match it, or does not parse, is not used: its executable
//! is then fingerprinted as one without a map (its tests fall back to the
//! binary's checksum), never with extents of another layout. The file is
//! untrusted input: its size is bounded before it is read.

use super::map::{Extent, Merge};
use crate::model::dep::Hash;
use object::{Object, ObjectSection};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Appended to the executable's path (or its map's, without `.map`).
pub const SUFFIX: &str = ".extents";

/// Bumped when the file's layout changes: an older file is not read.
const FORMAT: u16 = 1;

/// At most this many bytes are read, compressed or not: a real file is a
/// few megabytes.
const MAX_BYTES: u64 = 256 << 20;

#[derive(Serialize, Deserialize)]
struct Kept {
    format: u16,
    loaded: Hash,
    outputs: Vec<String>,
    /// `(start, size, output, merge kind, constant size)`.
    extents: Vec<(u64, u64, u32, u8, u8)>,
}

/// Where the extents kept from the map at `map` go.
pub fn beside_map(map: &Path) -> PathBuf {
    let mut path = map.with_extension("").into_os_string();
    path.push(SUFFIX);
    PathBuf::from(path)
}

/// The digest of what the loader maps of an executable: every allocated
/// section's name, address, size and bytes (the extents of a map describe
/// exactly that).
pub fn loaded_digest(executable: &[u8]) -> Option<Hash> {
    let file = object::File::parse(executable).ok()?;
    let mut hasher = blake3::Hasher::new();
    for section in file.sections() {
        let object::SectionFlags::Elf { sh_flags, .. } = section.flags() else {
            return None;
        };
        if sh_flags.0 & object::elf::SHF_ALLOC.0 == 0 {
            continue;
        }
        hasher.update(section.name_bytes().ok()?);
        hasher.update(&[0]);
        hasher.update(&section.address().to_le_bytes());
        hasher.update(&section.size().to_le_bytes());
        hasher.update(section.data().ok()?);
    }
    Some(*hasher.finalize().as_bytes())
}

/// Writes `extents`, read from the map of the executable whose
/// [`loaded_digest`] is `loaded`, to `path` (through a temporary file
/// renamed into place: a reader never sees half a file).
pub fn write(path: &Path, loaded: &Hash, extents: &[Extent]) -> std::io::Result<()> {
    let mut outputs: Vec<String> = Vec::new();
    let mut index = std::collections::HashMap::<&str, u32>::new();
    let mut rows = Vec::with_capacity(extents.len());
    for e in extents {
        let output = *index.entry(&e.output).or_insert_with(|| {
            outputs.push(e.output.to_string());
            (outputs.len() - 1) as u32
        });
        let (kind, n) = match e.merge {
            Merge::None => (0, 0),
            Merge::Strings => (1, 0),
            Merge::Constants(n) => (2, n),
        };
        rows.push((e.start, e.size, output, kind, n));
    }
    let kept = Kept {
        format: FORMAT,
        loaded: *loaded,
        outputs,
        extents: rows,
    };
    let bytes = postcard::to_allocvec(&kept).map_err(std::io::Error::other)?;
    let compressed = zstd::encode_all(&bytes[..], 1)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, &compressed)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The extents kept at `path` for the executable whose [`loaded_digest`]
/// is `loaded`; `None` when there are none, they are damaged, or they were
/// kept for another executable.
pub fn read(path: &Path, loaded: &Hash) -> Option<Vec<Extent>> {
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > MAX_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    zstd::Decoder::new(file)
        .ok()?
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 > MAX_BYTES {
        return None;
    }
    let kept: Kept = postcard::from_bytes(&bytes).ok()?;
    if kept.format != FORMAT || kept.loaded != *loaded {
        return None;
    }
    let outputs: Vec<Arc<str>> = kept.outputs.iter().map(|o| Arc::from(o.as_str())).collect();
    kept.extents
        .into_iter()
        .map(|(start, size, output, kind, n)| {
            Some(Extent {
                start,
                size,
                name: String::new(),
                output: outputs.get(output as usize)?.clone(),
                merge: match kind {
                    0 => Merge::None,
                    1 => Merge::Strings,
                    2 => Merge::Constants(n),
                    _ => return None,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extents() -> Vec<Extent> {
        let output: Arc<str> = Arc::from(".rodata");
        vec![
            Extent {
                start: 0x1000,
                size: 14,
                name: ".rodata..Lanon.1".into(),
                output: output.clone(),
                merge: Merge::None,
            },
            Extent {
                start: 0x1010,
                size: 64,
                name: ".rodata.cst16".into(),
                output,
                merge: Merge::Constants(16),
            },
        ]
    }

    #[test]
    fn kept_extents_are_read_back_only_for_their_executable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t-abc.extents");
        let loaded = [1; 32];
        write(&path, &loaded, &extents()).unwrap();
        let back = read(&path, &loaded).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!((back[1].start, back[1].size), (0x1010, 64));
        assert_eq!(back[1].merge, Merge::Constants(16));
        assert_eq!(&*back[0].output, ".rodata");
        assert!(read(&path, &[9; 32]).is_none(), "another executable");
        std::fs::write(&path, b"not zstd").unwrap();
        assert!(read(&path, &loaded).is_none(), "damaged");
        assert!(read(&dir.path().join("absent"), &loaded).is_none());
    }

    #[test]
    fn kept_extents_go_beside_the_map() {
        assert_eq!(
            beside_map(Path::new("/t/deps/fx-abc.map")),
            PathBuf::from("/t/deps/fx-abc.extents")
        );
    }
}
