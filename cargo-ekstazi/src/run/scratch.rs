//! cargo-ekstazi's temporary directories: one root per workspace and state
//! directory, in the system's temporary directory (outside the workspace,
//! so that a test that searches upwards from its temporary directory finds
//! there what it would under `cargo test`), kept from run to run.
//!
//! It holds each run's traces, and each test's private temporary
//! directory: `TMPDIR` for the test, empty when it starts, removed when it
//! ends, at a place that depends only on the test (so that the value a test
//! reads is the same every run). Tests then never meet in a shared `/tmp`,
//! and nothing under the root is a dependency: a test's own directory
//! always starts empty, and the rest is other tests' scratch.
//!
//! The paths are short: `/tmp/ek-XXXXXXXX/tXXXXXXXX`, 26 bytes, where
//! `tempfile` under `/tmp` gives a `cargo test` user `/tmp/.tmpXXXXXX`, 15.
//! A test's paths get longer by the difference only, and some behaviour
//! depends on length: ext4 keeps a symbolic link's target of under 60 bytes
//! inside the inode, and a longer one gets a data block (`du` then counts
//! it); a socket's path has 108 bytes at most.
//!
//! The tests' directories are used only by a run that holds the state
//! directory's lock (one at a time, since the root is per state directory);
//! a run that records nothing gives its tests directories under a root of
//! its own, made for it.

use anyhow::{Context, Result, bail};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The prefix of a test's directory (a run's own directories differ).
const TEST_PREFIX: &str = "t";

/// The prefix of a root's name in the system's temporary directory.
const ROOT_PREFIX: &str = "ek-";

/// Letters of a short name: 8 in base 36, 41 bits of the digest (a root is
/// one per user, workspace and state directory, and owned; a test's name
/// is one per test of a workspace: 5 000 tests collide with a chance of 6
/// in a million, and two tests that do only share a directory one at a
/// time, whose name changes the run after).
const NAME_LEN: usize = 8;

/// The first [`NAME_LEN`] base-36 letters of `digest`.
fn short_name(digest: &blake3::Hash) -> String {
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut n = u64::from_le_bytes(digest.as_bytes()[..8].try_into().expect("8 bytes"));
    (0..NAME_LEN)
        .map(|_| {
            let letter = ALPHABET[(n % 36) as usize] as char;
            n /= 36;
            letter
        })
        .collect()
}

/// The per-workspace root.
#[derive(Debug, Clone)]
pub struct Scratch {
    root: PathBuf,
}

impl Scratch {
    /// Makes (or finds) the root for this workspace and state directory, in
    /// the system's temporary directory. Refused when the path is there but
    /// is not a directory of ours that only we can enter: another user could
    /// otherwise read or plant what the tests find.
    pub fn open(workspace: &Path, state_dir: &Path) -> Result<Scratch> {
        let base = std::path::absolute(std::env::temp_dir())?;
        let mut hasher = blake3::Hasher::new();
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        hasher.update(&uid.to_le_bytes());
        hasher.update(workspace.as_os_str().as_encoded_bytes());
        hasher.update(&[0]);
        hasher.update(state_dir.as_os_str().as_encoded_bytes());
        let root = base.join(format!("{ROOT_PREFIX}{}", short_name(&hasher.finalize())));
        match fs::DirBuilder::new().mode(0o700).create(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("cannot make {}", root.display())),
        }
        let meta = fs::symlink_metadata(&root)?;
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
            bail!(
                "{} is not a directory that only this user can enter",
                root.display()
            );
        }
        Ok(Scratch { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A directory of this run's own under the root, removed when dropped.
    pub fn run_dir(&self, prefix: &str) -> io::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(&format!("run-{prefix}-"))
            .tempdir_in(&self.root)
    }

    /// Removes the test directories a run left behind (a run that was
    /// killed). Only for a run that holds the state directory's lock.
    pub fn sweep(&self) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            if entry
                .file_name()
                .as_encoded_bytes()
                .starts_with(TEST_PREFIX.as_bytes())
            {
                let _ = remove_tree(&entry.path());
            }
        }
    }
}

/// The directory, under `parent`, where the test `name` of binary `key`
/// finds its `TMPDIR`: the same for the same test, every run.
pub fn test_dir(parent: &Path, key: &str, name: &str) -> PathBuf {
    let mut hasher = blake3::Hasher::new();
    hasher.update(key.as_bytes());
    hasher.update(&[0]);
    hasher.update(name.as_bytes());
    parent.join(format!("{TEST_PREFIX}{}", short_name(&hasher.finalize())))
}

/// Makes the test's directory, empty, and returns it. What cannot be
/// removed there (another user's entries) gives way to a new directory of
/// another name: the test then sees another `TMPDIR`, which makes it run
/// again next time.
pub fn prepare_test_dir(parent: &Path, key: &str, name: &str) -> io::Result<PathBuf> {
    let dir = test_dir(parent, key, name);
    if remove_tree(&dir).is_ok() {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            Err(_) => {}
        }
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    Ok(tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir_in(parent)?
        .keep())
}

/// Removes a directory tree, making its directories writable first if it
/// must (a test may leave read-only ones). Symbolic links are not followed.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    make_writable(path);
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn make_writable(dir: &Path) {
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_directory_is_stable_and_starts_empty() {
        let parent = tempfile::tempdir().unwrap();
        let a = test_dir(parent.path(), "pkg::it", "a");
        assert_eq!(a, test_dir(parent.path(), "pkg::it", "a"));
        assert_ne!(a, test_dir(parent.path(), "pkg::it", "b"));
        assert_ne!(a, test_dir(parent.path(), "pkg", "it\0a"));

        let dir = prepare_test_dir(parent.path(), "pkg::it", "a").unwrap();
        assert_eq!(dir, a);
        fs::create_dir_all(dir.join("sub/locked")).unwrap();
        fs::write(dir.join("sub/locked/f"), "x").unwrap();
        fs::set_permissions(dir.join("sub/locked"), fs::Permissions::from_mode(0o500)).unwrap();
        fs::set_permissions(dir.join("sub"), fs::Permissions::from_mode(0o500)).unwrap();
        let again = prepare_test_dir(parent.path(), "pkg::it", "a").unwrap();
        assert_eq!(again, a);
        assert_eq!(fs::read_dir(&again).unwrap().count(), 0, "emptied");
        remove_tree(&again).unwrap();
        assert!(!again.exists());
        remove_tree(&again).unwrap();
    }

    #[test]
    fn a_test_directory_is_as_short_as_promised() {
        let dir = test_dir(Path::new("/tmp/ek-01234567"), "pkg::it", "a");
        assert_eq!(dir.as_os_str().len(), "/tmp/ek-01234567/t01234567".len());
    }

    #[test]
    fn a_sweep_removes_test_directories_only() {
        let parent = tempfile::tempdir().unwrap();
        let scratch = Scratch {
            root: parent.path().to_path_buf(),
        };
        let test = prepare_test_dir(parent.path(), "k", "t").unwrap();
        let run = scratch.run_dir("traces").unwrap();
        scratch.sweep();
        assert!(!test.exists());
        assert!(run.path().exists());
    }
}
