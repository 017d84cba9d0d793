//! How every file cargo-ekstazi keeps is written and read: the seal each
//! one is wrapped in ([`sealed`]: `seal`, `open`, `pack`, `unpack`,
//! [`sealed::FORMAT_VERSION`], [`sealed::DecodeError`]), the one way a file
//! is replaced (`write_atomic`: a temporary file, then a rename; for the
//! many records of a run, `Replacer`, which exchanges a spare file into
//! place instead of making and deleting one per file), the one
//! way a file of ours is read (`read_bounded`: a regular file, and no more
//! than a limit), and `real_dirs`, which makes the directories written
//! into.
//!
//! Invariant: the bottom of the crate. `files` imports no other module of
//! the crate; everything that keeps a file (the record model, the function
//! table, the store, the history) goes through it.

pub mod sealed;
mod spare;

pub(crate) use spare::Replacer;

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;

/// Makes each of `places`, in order, a real directory, removing what is in
/// the way (see `storage::store::Store::real_dir`).
pub(crate) fn real_dirs(places: &[&Path]) -> io::Result<()> {
    for place in places {
        match fs::symlink_metadata(place) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => fs::remove_file(place)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        fs::create_dir_all(place)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` at once: written to a temporary file in
/// `dir` (the directory of `path`), then renamed over it, so that a reader
/// sees the old file or the new one, never a part.
pub(crate) fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(dir, path, |file| file.write_all(bytes))
}

/// [`write_atomic`], the temporary file filled by `fill`; an error leaves
/// `path` as it was and removes the temporary file.
pub(crate) fn write_atomic_with(
    dir: &Path,
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let mut tmp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    fill(tmp.as_file_mut())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Why [`read_bounded`] returned no bytes.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Nothing at the path.
    Missing,
    /// Something other than a regular file (a planted symlink, a FIFO).
    NotRegular,
    /// More than the limit.
    TooLarge,
    Io(io::Error),
}

/// Reads a file of ours, refusing what cannot be one: anything but a
/// regular file (looked at before it is opened: opening a FIFO would
/// block, and a link could lead anywhere), or more than `max` bytes (as the
/// file says, or as read: it may grow meanwhile).
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ReadError::Missing),
        Err(e) => return Err(ReadError::Io(e)),
    };
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    if meta.len() > max {
        return Err(ReadError::TooLarge);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    File::open(path)
        .and_then(|file| file.take(max + 1).read_to_end(&mut bytes))
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::TooLarge);
    }
    Ok(bytes)
}
