//! Replacing many files at once each, without a new file per write.
//!
//! [`super::write_atomic`] makes a temporary file and renames it over the
//! old one, which the file system then deletes. On ext4 every new file
//! costs a search of the inode table that grows with the files deleted
//! lately: over a run that rewrites thousands of records, the runner spent
//! more time creating files than encoding them (perf, a `--forceall` of
//! just's 2 400 tests: 3.5 % of all samples in `ext4`'s `recently_deleted`,
//! nearly all under the records' temporary files; creating and renaming
//! 2 400 files took 0.9 s of CPU against 0.2 s exchanging them).
//!
//! So the [`Replacer`] keeps one spare file: a record is written into it,
//! and `renameat2(RENAME_EXCHANGE)` swaps it with the old record in one
//! step, as atomically as a rename: a reader sees the whole old file or the
//! whole new one. The old record's file becomes the next spare. No file is
//! created or deleted once the spare exists.
//!
//! The exchange is used only over a regular file with one link, and the
//! spare only while it is one (opened without following a link, checked
//! before it is cut short): anything else, a file system without
//! `RENAME_EXCHANGE`, or any error, and the write is
//! [`super::write_atomic`]'s, with the same result. The spare is named like
//! a temporary file (`.tmp…`), which the store ignores and sweeps if a run
//! was killed.

use rustix::fs::{CWD, RenameFlags, renameat_with};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// Replaces files as [`super::write_atomic`] does, through one spare file.
#[derive(Debug, Default)]
pub(crate) struct Replacer {
    spare: Mutex<Spare>,
}

#[derive(Debug, Default)]
enum Spare {
    /// None yet: the next write makes one.
    #[default]
    None,
    Ready(PathBuf),
    /// The file system cannot exchange: every write is a rename.
    Off,
}

impl Replacer {
    /// Replaces `path` (in `dir`) with `bytes`, at once.
    pub(crate) fn replace(&self, dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
        if let Spare::Ready(file) = &*spare {
            match exchange(file, path, bytes) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    let _ = fs::remove_file(file);
                    let unsupported = unsupported(&e);
                    *spare = if unsupported { Spare::Off } else { Spare::None };
                }
            }
        }
        super::write_atomic(dir, path, bytes)?;
        if matches!(*spare, Spare::None) {
            *spare = make(dir).map_or(Spare::None, Spare::Ready);
        }
        Ok(())
    }
}

impl Drop for Replacer {
    fn drop(&mut self) {
        let spare = self.spare.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Spare::Ready(file) = spare {
            let _ = fs::remove_file(file);
        }
    }
}

/// Whether `renameat2` said it cannot exchange here, now or ever: a file
/// system without `RENAME_EXCHANGE` (`EINVAL`, `EOPNOTSUPP`), a kernel
/// without `renameat2` (`ENOSYS`), or the spare on another mount (`EXDEV`).
fn unsupported(e: &io::Error) -> bool {
    use rustix::io::Errno;
    [Errno::INVAL, Errno::OPNOTSUPP, Errno::NOSYS, Errno::XDEV]
        .iter()
        .any(|errno| e.raw_os_error() == Some(errno.raw_os_error()))
}

fn make(dir: &Path) -> io::Result<PathBuf> {
    let (_, path) = tempfile::Builder::new()
        .prefix(".tmp")
        .tempfile_in(dir)?
        .keep()
        .map_err(|e| e.error)?;
    Ok(path)
}

/// Writes `bytes` into the spare and exchanges it with `path`; `false`
/// (nothing changed) when `path` is not a regular file with one link.
fn exchange(spare: &Path, path: &Path, bytes: &[u8]) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() && meta.nlink() == 1 => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    let mut file = open_spare(spare)?;
    // Written over and then cut to length, not emptied first: the spare's
    // blocks are kept rather than freed and allocated again.
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)?;
    drop(file);
    renameat_with(CWD, spare, CWD, path, RenameFlags::EXCHANGE)?;
    Ok(true)
}

/// The spare, for writing, if it is still a regular file of one link: it
/// is not cut short before that is known.
fn open_spare(spare: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(spare)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(io::Error::other("the spare file is no longer ours"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// The one spare in `dir`.
    fn spare_in(dir: &Path) -> PathBuf {
        let name = files_in(dir)
            .into_iter()
            .find(|n| n.starts_with(".tmp"))
            .expect("a spare once a file was written");
        dir.join(name)
    }

    #[test]
    fn replacing_exchanges_a_spare_and_creates_no_file_after_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let replacer = Replacer::default();
        replacer.replace(dir.path(), &a, b"a1").unwrap();
        replacer.replace(dir.path(), &b, b"b1").unwrap();
        let spare = spare_in(dir.path());
        let inode = |p: &Path| fs::metadata(p).unwrap().ino();
        let before = [inode(&a), inode(&b), inode(&spare)];
        for round in 2..5 {
            replacer
                .replace(dir.path(), &a, format!("a{round}").as_bytes())
                .unwrap();
            replacer
                .replace(dir.path(), &b, format!("b{round}").as_bytes())
                .unwrap();
        }
        assert_eq!(fs::read(&a).unwrap(), b"a4");
        assert_eq!(fs::read(&b).unwrap(), b"b4");
        // A long record, then a short one over the spare that held it.
        replacer.replace(dir.path(), &a, &[b'l'; 5000]).unwrap();
        replacer.replace(dir.path(), &b, &[b'm'; 6000]).unwrap();
        replacer.replace(dir.path(), &a, b"short").unwrap();
        replacer.replace(dir.path(), &b, b"b4").unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"short");
        assert_eq!(fs::read(&b).unwrap(), b"b4");
        // The same three files, passed around: none made, none deleted.
        let mut after = [inode(&a), inode(&b), inode(&spare)];
        let mut before = before;
        before.sort();
        after.sort();
        assert_eq!(before, after);
        let spare_name = spare.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(files_in(dir.path()), [spare_name, "a".into(), "b".into()]);
        drop(replacer);
        assert_eq!(files_in(dir.path()), ["a", "b"]);
    }

    #[test]
    fn a_link_at_the_path_or_in_place_of_the_spare_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::write(&outside, b"keep").unwrap();
        let a = dir.path().join("a");
        let replacer = Replacer::default();
        replacer.replace(dir.path(), &a, b"a1").unwrap();
        // A hard link planted at the path: replaced, its other name intact.
        fs::remove_file(&a).unwrap();
        fs::hard_link(&outside, &a).unwrap();
        replacer.replace(dir.path(), &a, b"a2").unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"a2");
        assert_eq!(fs::read(&outside).unwrap(), b"keep");
        // The spare swapped for a symbolic link, then for a hard link.
        let plant_symlink = |spare: &Path| std::os::unix::fs::symlink(&outside, spare);
        let plant_hard_link = |spare: &Path| fs::hard_link(&outside, spare);
        for (plant, record) in [
            (
                &plant_symlink as &dyn Fn(&Path) -> std::io::Result<()>,
                b"a3",
            ),
            (&plant_hard_link, b"a4"),
        ] {
            let spare = spare_in(dir.path());
            fs::remove_file(&spare).unwrap();
            plant(&spare).unwrap();
            replacer.replace(dir.path(), &a, record).unwrap();
            assert_eq!(fs::read(&a).unwrap(), record);
            assert_eq!(fs::read(&outside).unwrap(), b"keep");
        }
    }

    #[test]
    fn a_missing_or_removed_spare_or_path_falls_back_to_a_rename() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let replacer = Replacer::default();
        replacer.replace(dir.path(), &a, b"a1").unwrap();
        for name in files_in(dir.path()) {
            if name.starts_with(".tmp") {
                fs::remove_file(dir.path().join(name)).unwrap();
            }
        }
        replacer.replace(dir.path(), &a, b"a2").unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"a2");
        let new = dir.path().join("new");
        replacer.replace(dir.path(), &new, b"n").unwrap();
        assert_eq!(fs::read(&new).unwrap(), b"n");
        // A directory where a file was: the write fails as a rename would.
        let d = dir.path().join("d");
        fs::create_dir(&d).unwrap();
        assert!(replacer.replace(dir.path(), &d, b"x").is_err());
        assert!(d.is_dir());
    }
}
