//! A store as one file: its records, function table, uninstrumented tables
//! and history, as a zstd-compressed tar (`history export`), and back
//! (`history import`).
//!
//! A tar, so that the file is what every system already reads
//! (`tar --zstd -tf state.tar.zst` lists it); the function fingerprints of
//! builds (`.code/`) are a cache and are left out. Importing trusts nothing
//! in the file: it is read as a stream ([`tar_reader`]), every size checked
//! before anything is buffered or written; only regular files at the paths
//! a store uses are unpacked, into a scratch directory, each name checked
//! component by component and within limits of count and size
//! ([`MAX_ENTRIES`], [`MAX_BYTES`]); the scratch store is then merged like a
//! CI shard's ([`crate::storage::merge_state`]), which checks every record, table and
//! manifest before keeping it.
//!
//! ```text
//! v12/<binary key>/<test>            current records
//! v12/.functions/<digest>            the function table
//! v12/.sets/<digest>                 bases of executed functions
//! v12/.deps/<digest>                 the base of dependencies
//! v12/.dicts/<digest>                dictionaries record files are compressed with
//! v12/.uninstrumented/<digest>       uninstrumented functions of builds
//! v12/.history/commits/<commit id>   which record held per test, per commit
//! v12/.history/packs/<digest>        the records the history names
//! ```

pub mod tar_reader;

use crate::files::contained::{How, Kind, StateDir};
use crate::files::sealed::FORMAT_VERSION;
use crate::storage::store::Store;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use tar_reader::TarReader;

/// At most this many entries, and this many bytes (decompressed), are read
/// from an archive: ten times a real history (100 commits of ripgrep's
/// history export to about 100 MB unpacked), short of filling a CI
/// runner's disk, inodes or memory.
pub const MAX_ENTRIES: usize = 1_000_000;
/// At most this many bytes, decompressed, are read from an archive (see
/// [`MAX_ENTRIES`]).
pub const MAX_BYTES: u64 = 1 << 30;

/// The largest zstd window an archive is read with, as a power of two:
/// 8 MiB, which takes what `export` writes (zstd's level 3: 2 MiB) and what
/// `zstd -19` does (8 MiB); a stream decoder holds its window, and zstd's
/// own default limit (128 MiB) cost 138 MB resident for one hostile frame.
/// A frame that asks for more is refused from its header.
pub const WINDOW_LOG_MAX: u32 = 23;

/// What an export wrote, or an unpacking took.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// Files written or taken.
    pub files: usize,
    /// Their bytes together.
    pub bytes: u64,
    /// Entries of an archive that were not taken: not a regular file, or
    /// not at a path a store uses.
    pub left_out: usize,
}

/// Why an archive cannot be imported at all.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive, or the scratch directory, could not be read or written.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The archive holds another format version's state: its directory
    /// (`v11`, say).
    #[error("the file holds records of format {0}; this cargo-ekstazi reads v{FORMAT_VERSION}")]
    OtherVersion(String),
    /// More entries or bytes than any state, or a zstd window over
    /// [`WINDOW_LOG_MAX`]: which bound it passed.
    #[error("the file holds more than any state: {0}")]
    TooLarge(String),
}

/// The files an export holds, by path relative to the store's root
/// (`v12/...`), in order: what `history export` writes, and what a push to
/// a remote store holds (`storage::remote`). Each is read with
/// [`read_exported`].
pub(crate) fn exported_paths(store: &Store) -> io::Result<Vec<String>> {
    let version = format!("v{FORMAT_VERSION}");
    let root = store.root().join(&version);
    let mut files = Vec::new();
    collect(store.state(), &root, Path::new(&version), &mut files)?;
    let mut files: Vec<String> = files
        .into_iter()
        .filter_map(|path| Some(path.to_str()?.to_owned()))
        .collect();
    files.sort();
    Ok(files)
}

/// One of [`exported_paths`], read: never through a link (a planted one
/// would export what it points to); `None` when it went since it was
/// listed (a concurrent run's housekeeping).
pub(crate) fn read_exported(store: &Store, relative: &str) -> Option<Vec<u8>> {
    store
        .state()
        .read_bounded(&store.root().join(relative), MAX_BYTES)
        .ok()
}

/// Writes the store's records and history to `to`.
pub fn export(store: &Store, to: &Path) -> io::Result<Counted> {
    let files = exported_paths(store)?;
    let parent = to.parent().filter(|p| !p.as_os_str().is_empty());
    let mut counted = Counted::default();
    crate::files::write_atomic_with(parent.unwrap_or(Path::new(".")), to, |out| {
        let encoder = zstd::stream::write::Encoder::new(&*out, 0)?;
        let mut tar = tar::Builder::new(encoder);
        tar.mode(tar::HeaderMode::Deterministic);
        for relative in files {
            let Some(bytes) = read_exported(store, &relative) else {
                continue;
            };
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut header, &relative, bytes.as_slice())?;
            counted.files += 1;
            counted.bytes += bytes.len() as u64;
        }
        tar.into_inner()?.finish()?;
        Ok(())
    })?;
    Ok(counted)
}

/// The regular files below `dir` worth exporting, as paths relative to the
/// store root (`prefix` is `dir`'s).
fn collect(state: &StateDir, dir: &Path, prefix: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let Some(entries) = state.read_dir(dir)? else {
        return Ok(());
    };
    for entry in entries {
        let Some(name) = entry.name.to_str() else {
            continue;
        };
        // A build's fingerprints are a cache, `.tmp*` are writes under way,
        // and the history's notes on its last sweep and filing concern
        // this store only.
        if name == ".code"
            || name.starts_with(".tmp")
            || name == crate::storage::history::SWEPT
            || name == crate::storage::history::CURRENT
        {
            continue;
        }
        let relative = prefix.join(name);
        match entry.kind {
            Kind::Dir => collect(state, &dir.join(name), &relative, out)?,
            Kind::File => out.push(relative),
            Kind::Other => {}
        }
    }
    Ok(())
}

/// Unpacks the archive at `from` into the empty directory `into`, taking
/// only regular files at the paths a store uses.
pub fn unpack(from: &Path, into: &Path) -> Result<Counted, ArchiveError> {
    let file = fs::File::open(from)?;
    let mut decoder = zstd::stream::read::Decoder::new(file)?;
    decoder.window_log_max(WINDOW_LOG_MAX)?;
    let mut tar = TarReader::with_limit(decoder, MAX_BYTES);
    let mut counted = Counted::default();
    let mut entries = 0;
    let state = StateDir::new(into);
    let create = How {
        write: true,
        create: true,
        truncate: true,
        ..How::default()
    };
    while let Some(header) = tar.next_header().map_err(too_large)? {
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(ArchiveError::TooLarge(format!(
                "over {MAX_ENTRIES} entries"
            )));
        }
        // Checked before the data is read, skipped or not.
        if tar.read.saturating_add(header.size) > MAX_BYTES {
            return Err(ArchiveError::TooLarge(format!("over {MAX_BYTES} bytes")));
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&header.path));
        if let Some(version) = other_version(&path) {
            return Err(ArchiveError::OtherVersion(version));
        }
        if !header.is_regular() || !is_store_path(&path) {
            counted.left_out += 1;
            continue;
        }
        counted.files += 1;
        let target = into.join(&path);
        state.make_dir(target.parent().expect("a store path has a parent"))?;
        let mut out = state.open(&target, create)?;
        tar.copy_data(header.size, &mut out).map_err(too_large)?;
        counted.bytes += header.size;
    }
    Ok(counted)
}

/// The reader's error past [`MAX_BYTES`], or the decoder's at a window
/// over [`WINDOW_LOG_MAX`], as what it means.
fn too_large(e: io::Error) -> ArchiveError {
    if e.kind() == io::ErrorKind::FileTooLarge {
        ArchiveError::TooLarge(e.to_string())
    } else if e.to_string().contains("too much memory") {
        // zstd's "Frame requires too much memory for decoding".
        ArchiveError::TooLarge(format!(
            "a zstd window over {} MiB",
            1 << (WINDOW_LOG_MAX - 20)
        ))
    } else {
        ArchiveError::Io(e)
    }
}

/// `Some(vN)` when the path is in another format's directory.
fn other_version(path: &Path) -> Option<String> {
    let first = path.components().next()?.as_os_str().to_str()?;
    let digits = first.strip_prefix('v')?;
    (digits.parse::<u16>().is_ok() && digits != FORMAT_VERSION.to_string())
        .then(|| first.to_owned())
}

/// Whether `path` is one a store of this format uses: every component a
/// name the store writes (see the module's layout), nothing that climbs,
/// roots or links.
pub(crate) fn is_store_path(path: &Path) -> bool {
    let mut parts = Vec::new();
    for component in path.components() {
        let std::path::Component::Normal(part) = component else {
            return false;
        };
        let Some(part) = part.to_str() else {
            return false;
        };
        let plain = !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.%~".contains(&b));
        if !plain {
            return false;
        }
        parts.push(part);
    }
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let version = format!("v{FORMAT_VERSION}");
    match parts.as_slice() {
        [v, rest @ ..] if *v == version => match rest {
            [".functions", name] => hex(name, 32),
            // A store's own heads are its own: the bases records name travel.
            [".sets" | ".deps", name] => hex(name, 64),
            // Likewise its current dictionary: those records name travel.
            [".dicts", name] => hex(name, 64),
            [".uninstrumented", name] => hex(name, 64),
            [".history", "commits", id] => crate::storage::history::is_commit_id(id),
            [".history", "packs", name] => hex(name, 64),
            [key, test] => !key.starts_with('.') && !test.starts_with(".tmp"),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_paths_a_store_uses_are_taken() {
        let v = format!("v{FORMAT_VERSION}");
        let ok = [
            format!("{v}/pkg%3A%3Aint/tests%3A%3Aa"),
            format!("{v}/.functions/{}", "a".repeat(32)),
            format!("{v}/.uninstrumented/{}", "b".repeat(64)),
            format!("{v}/.history/commits/{}", "c".repeat(40)),
            format!("{v}/.history/packs/{}", "d".repeat(64)),
            format!("{v}/.sets/{}", "e".repeat(64)),
            format!("{v}/.dicts/{}", "f".repeat(64)),
            format!("{v}/.deps/{}", "a".repeat(64)),
        ];
        for path in &ok {
            assert!(is_store_path(Path::new(path)), "{path}");
        }
        let bad = [
            format!("{v}/../escape"),
            format!("/{v}/pkg/test"),
            format!("{v}/pkg/../../x"),
            format!("{v}/pkg/sub/deeper"),
            format!("{v}/.code/{}", "a".repeat(64)),
            format!("{v}/.sets/heads"),
            format!("{v}/.deps/heads"),
            format!("{v}/.dicts/current"),
            format!("{v}/.history/commits/HEAD"),
            format!("{v}/.history/packs/.tmp123"),
            format!("{v}/.history/objects/ab/{}", "d".repeat(62)),
            format!("{v}/pkg/.tmp123"),
            format!("{v}/pkg/na me"),
            "v1/pkg/test".to_owned(),
            "lock".to_owned(),
        ];
        for path in &bad {
            assert!(!is_store_path(Path::new(path)), "{path}");
        }
        assert_eq!(other_version(Path::new("v1/pkg/test")), Some("v1".into()));
        assert_eq!(other_version(Path::new(&ok[0])), None);
    }
}
