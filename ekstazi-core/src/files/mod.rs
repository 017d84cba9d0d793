//! How every file cargo-ekstazi keeps is written and read: the seal each
//! one is wrapped in ([`sealed`]: `seal`, `open`, `pack`, `unpack`,
//! [`sealed::FORMAT_VERSION`], [`sealed::DecodeError`]), the signature a
//! reader checks without a secret ([`signed`]: Ed25519), the one way a file
//! is replaced (`write_atomic`: a temporary file, then a rename; for the
//! many records of a run, `Replacer`, which exchanges a spare file into
//! place instead of making and deleting one per file), [`contained`]:
//! every path of a state directory reached from its own descriptor, never
//! through a link, and read only as a regular file no larger than a limit
//! (`StateDir::read_bounded`); and [`identity`]: a file's version told by
//! `stat`, as git's index tells it.
//!
//! Invariant: the bottom of the crate. `files` imports no other module of
//! the crate; everything that keeps a file (the record model, the function
//! table, the store, the history) goes through it.

pub mod contained;
pub mod identity;
pub mod sealed;
pub mod signed;
mod spare;

pub(crate) use spare::Replacer;

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

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

/// Why [`contained::StateDir::read_bounded`] returned no bytes.
#[derive(Debug)]
pub enum ReadError {
    /// Nothing at the path.
    Missing,
    /// Something other than a regular file (a planted symlink, a FIFO).
    NotRegular,
    /// More than the limit.
    TooLarge,
    /// It could not be opened or read.
    Io(io::Error),
}
