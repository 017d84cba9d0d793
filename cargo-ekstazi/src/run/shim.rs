//! The runtime shim, embedded in this binary at build time (see `build.rs`)
//! and written out next to the build on first use, so that an installed
//! cargo-ekstazi needs nothing else; beside it, the object with the
//! coverage callbacks that instrumented binaries link
//! (`ekstazi-runtime/stub/sancov.rs`).

use crate::cargo::instrument::{CALLBACKS, callbacks_path};
use anyhow::{Context, Result, bail};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

static SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libekstazi_runtime.so"));

/// A short digest of the embedded shim: records made with another shim saw
/// the world through other hooks, so it is part of the global fingerprint.
pub fn digest() -> String {
    blake3::hash(SHIM).to_hex()[..16].to_owned()
}

/// Where the shim of this build lives: `<target dir>/ekstazi/`, under a
/// name that carries its digest.
pub fn path(target_dir: &Path) -> Result<PathBuf> {
    let dir = std::path::absolute(target_dir.join("ekstazi"))?;
    Ok(dir.join(format!("libekstazi_runtime-{}.so", digest())))
}

/// Writes the shim to its [`path`] and returns it. A file already there is
/// used only if its bytes are the embedded shim's: the name carries the
/// digest, but a file can be damaged or replaced in place, and a shim that
/// is not ours would break every test or trace them wrongly.
pub fn install(target_dir: &Path) -> Result<PathBuf> {
    let path = path(target_dir)?;
    let dir = path.parent().expect("the shim's path has a directory");
    // LD_PRELOAD separates entries with spaces and colons.
    if path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .any(|b| b.is_ascii_whitespace() || *b == b':')
    {
        bail!(
            "the target directory {} contains a space or a colon, which LD_PRELOAD cannot carry; \
             choose another with --target-dir",
            target_dir.display()
        );
    }
    write_if_other(dir, &path, SHIM)?;
    write_if_other(dir, &callbacks_path(&path), CALLBACKS)?;
    Ok(path)
}

/// Writes `bytes` to `path` in `dir` unless the file there holds them.
fn write_if_other(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    // Comparing the bytes costs well under a millisecond: the file is
    // small, and read from the page cache.
    if fs::read(path).is_ok_and(|current| current == bytes) {
        return Ok(());
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".shim")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write to {}", dir.display()))?;
    tmp.write_all(bytes)?;
    tmp.as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
