//! Every path of a state directory, reached from the state directory's own
//! descriptor and never through a link.
//!
//! A state directory is often handed to the tool as it is: a CI cache
//! restored into the checkout, a checkout copied with its `.ekstazi/`. Any
//! entry of it may then be a symbolic link, a FIFO or a device where a
//! record directory or a log should be. Resolved by path, a link planted as
//! `v12/<binary>` would have the stale-record sweep delete the files it
//! points to, and one planted as `runs.log` would have the run append to
//! any file the user can write.
//!
//! So a [`StateDir`] opens its root once (the root itself may be a link the
//! user made on purpose: `EKSTAZI_DIR` pointing at a cache volume), and
//! reaches everything below it one component at a time with
//! `openat(O_NOFOLLOW)`, `mkdirat`, `unlinkat` and `renameat`, all relative
//! to directory descriptors. A link, or anything that is not a directory,
//! found where a directory of the state should be is removed as a link
//! (never followed) when the state is being written, and read as absent
//! when it is only read; a file of the state is opened only if it is a
//! regular file. Every link removed is noted once ([`take_removed`]), for
//! the run to say so.
//!
//! Written by hand over `rustix`'s `*at` calls rather than with `cap-std`:
//! cap-std follows links that stay inside its directory, and here a link
//! anywhere in the state is a planted one, to be removed and not followed.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::ReadError;
use super::identity::Identity;

/// Links (and other non-directories) removed from where a directory or file
/// of a state directory should be, in this process, not yet reported.
static REMOVED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The places where a planted link was removed since the last call: each
/// is said once by the run.
pub fn take_removed() -> Vec<PathBuf> {
    std::mem::take(&mut *REMOVED.lock().unwrap_or_else(PoisonError::into_inner))
}

fn note_removed(path: PathBuf) {
    REMOVED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(path);
}

/// A state directory, reached through its own descriptor.
#[derive(Clone, Debug)]
pub struct StateDir {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// Opened on first use (and created when something is written), then
    /// kept: everything below it is reached from it.
    fd: OnceLock<OwnedFd>,
}

/// What a directory entry is, as the entry itself says (not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link, FIFO, socket or device: never one of ours.
    Other,
}

impl From<FileType> for Kind {
    fn from(kind: FileType) -> Kind {
        match kind {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            _ => Kind::Other,
        }
    }
}

/// One entry of a directory of the state.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The entry's name within its directory.
    pub name: OsString,
    /// What the entry is, not followed.
    pub kind: Kind,
}

/// How a file of the state is opened by [`StateDir::open`].
#[derive(Clone, Copy, Debug, Default)]
pub struct How {
    /// Opened for reading and writing, not only reading.
    pub write: bool,
    /// Opened for reading and writing, every write at the end.
    pub append: bool,
    /// Created when missing; a link or other non-file in its place is removed
    /// first.
    pub create: bool,
    /// Cut to nothing once it is known to be a regular file.
    pub truncate: bool,
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC)
    .union(OFlags::RDONLY);

impl StateDir {
    /// The state directory at `root`; nothing is opened until it is first
    /// used.
    pub fn new(root: &Path) -> StateDir {
        StateDir {
            inner: Arc::new(Inner {
                path: root.to_path_buf(),
                fd: OnceLock::new(),
            }),
        }
    }

    /// The state directory's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The root's descriptor; `create` makes the root first when missing.
    fn root(&self, create: bool) -> io::Result<BorrowedFd<'_>> {
        if let Some(fd) = self.inner.fd.get() {
            return Ok(fd.as_fd());
        }
        if create {
            std::fs::create_dir_all(&self.inner.path)?;
        }
        // The root is followed: a link there is the user's own choice.
        let fd = rustix::fs::openat(
            rustix::fs::CWD,
            &self.inner.path,
            OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY,
            Mode::empty(),
        )?;
        let _ = self.inner.fd.set(fd);
        Ok(self.inner.fd.get().expect("just set").as_fd())
    }

    /// `path`'s components below the root: it must lie inside, with no
    /// `..` or other special component.
    fn components<'a>(&self, path: &'a Path) -> io::Result<Vec<&'a std::ffi::OsStr>> {
        let rel = path
            .strip_prefix(&self.inner.path)
            .map_err(|_| outside(path))?;
        rel.components()
            .map(|c| match c {
                Component::Normal(name) => Ok(name),
                _ => Err(outside(path)),
            })
            .collect()
    }

    /// The directory at `components` (below the root), opened without
    /// following a link. With `create`, missing directories are made, and
    /// anything in the way that is not a directory is removed (and noted);
    /// without, such a thing reads as absent (`NotFound`).
    fn walk(&self, components: &[&std::ffi::OsStr], create: bool) -> io::Result<OwnedFd> {
        let root = self.root(create)?;
        let mut dir = rustix::io::dup(root)?;
        let mut at = self.inner.path.clone();
        for name in components {
            at.push(name);
            dir = match rustix::fs::openat(&dir, *name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    rustix::fs::openat(&dir, *name, DIR_FLAGS, Mode::empty())?
                }
                // A link (ELOOP) or a file, FIFO, device (ENOTDIR).
                Err(Errno::LOOP | Errno::NOTDIR) if create => {
                    rustix::fs::unlinkat(&dir, *name, AtFlags::empty())?;
                    note_removed(at.clone());
                    rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o777))?;
                    rustix::fs::openat(&dir, *name, DIR_FLAGS, Mode::empty())?
                }
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(io::ErrorKind::NotFound.into());
                }
                Err(e) => return Err(e.into()),
            };
        }
        Ok(dir)
    }

    /// The directory holding `path` and `path`'s last component.
    fn parent_of<'a>(
        &self,
        path: &'a Path,
        create: bool,
    ) -> io::Result<(OwnedFd, &'a std::ffi::OsStr)> {
        let components = self.components(path)?;
        let Some((name, dirs)) = components.split_last() else {
            return Err(outside(path));
        };
        Ok((self.walk(dirs, create)?, name))
    }

    /// Makes `dir` (inside the state) a real directory, and every one on the
    /// way, removing what is in the way.
    pub fn make_dir(&self, dir: &Path) -> io::Result<()> {
        let components = self.components(dir)?;
        self.walk(&components, true).map(drop)
    }

    /// Replaces `path` with `bytes` at once (a temporary file in the same
    /// directory, renamed over it; the rename replaces a link there, never
    /// follows it).
    pub fn write_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.write_atomic_with(path, |file| file.write_all(bytes))
    }

    /// [`StateDir::write_atomic`], the temporary file filled by `fill`; an
    /// error leaves `path` as it was and removes the temporary file.
    pub fn write_atomic_with(
        &self,
        path: &Path,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        let (dir, name) = self.parent_of(path, true)?;
        let (tmp_name, fd) = create_temporary(&dir)?;
        let mut file = File::from(fd);
        let result = fill(&mut file).and_then(|()| {
            rustix::fs::renameat(&dir, tmp_name.as_os_str(), &dir, name).map_err(Into::into)
        });
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&dir, tmp_name.as_os_str(), AtFlags::empty());
        }
        result
    }

    /// Reads a file of the state, refusing what cannot be one: anything but
    /// a regular file (not followed, and opened without blocking: a FIFO),
    /// or more than `max` bytes.
    pub fn read_bounded(&self, path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
        let mut file = match self.open_regular(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ReadError::Missing),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(ReadError::NotRegular),
            Err(e) => return Err(ReadError::Io(e)),
        };
        let len = file.metadata().map_err(ReadError::Io)?.len();
        if len > max {
            return Err(ReadError::TooLarge);
        }
        let mut bytes = Vec::with_capacity(len as usize);
        (&mut file)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(ReadError::Io)?;
        if bytes.len() as u64 > max {
            return Err(ReadError::TooLarge);
        }
        Ok(bytes)
    }

    /// A regular file of the state, opened to read; `InvalidData` when
    /// something else is there (a link, a FIFO, a directory).
    pub fn open_regular(&self, path: &Path) -> io::Result<File> {
        let (dir, name) = self.parent_of(path, false)?;
        // Looked at before it is opened: opening a FIFO or a device can
        // block or act.
        match kind_at(&dir, name)? {
            Some(Kind::File) => {}
            None => return Err(io::ErrorKind::NotFound.into()),
            Some(_) => return Err(not_regular()),
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return Err(not_regular()),
            Err(e) => return Err(e.into()),
        };
        if !is_regular(&fd)? {
            return Err(not_regular());
        }
        Ok(File::from(fd))
    }

    /// Opens a file of the state as `how` says, never through a link: a
    /// link or anything else that is not a regular file where it should
    /// be is removed first when the file may be created, refused otherwise.
    pub fn open(&self, path: &Path, how: How) -> io::Result<File> {
        let (dir, name) = self.parent_of(path, how.create)?;
        let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        flags |= if how.write || how.append {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        if how.append {
            flags |= OFlags::APPEND;
        }
        if how.create {
            flags |= OFlags::CREATE;
        }
        match kind_at(&dir, name)? {
            None | Some(Kind::File) => {}
            Some(_) if how.create => {
                remove_tree(dir.as_fd(), name)?;
                note_removed(path.to_path_buf());
            }
            Some(_) => return Err(not_regular()),
        }
        let fd = match rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(0o666)) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return Err(not_regular()),
            Err(e) => return Err(e.into()),
        };
        if !is_regular(&fd)? {
            return Err(not_regular());
        }
        // Cut only now that it is known to be a regular file of ours.
        if how.truncate {
            rustix::fs::ftruncate(&fd, 0)?;
        }
        Ok(File::from(fd))
    }

    /// Removes `path`: a file, a link (the link itself) or a directory with
    /// everything in it, none of it followed. Nothing there is not an error.
    pub fn remove(&self, path: &Path) -> io::Result<()> {
        let (dir, name) = match self.parent_of(path, false) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        remove_tree(dir.as_fd(), name)
    }

    /// The entries of a directory of the state (`.` and `..` left out);
    /// `None` when there is no such directory (or something else is there).
    pub fn read_dir(&self, dir: &Path) -> io::Result<Option<Vec<Entry>>> {
        let components = self.components(dir)?;
        let fd = match self.walk(&components, false) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        entries(fd.as_fd()).map(Some)
    }

    /// The identity of the regular file at `path`, reached as every path
    /// of the state is (never through a link); `None` when there is none.
    pub fn identity(&self, path: &Path) -> Option<Identity> {
        let (dir, name) = self.parent_of(path, false).ok()?;
        identity_at(&dir, name)
    }

    /// [`StateDir::identity`] of each of `names` in the directory `dir`,
    /// which is reached once.
    pub fn identities(&self, dir: &Path, names: &[&std::ffi::OsStr]) -> Vec<Option<Identity>> {
        let Ok(components) = self.components(dir) else {
            return vec![None; names.len()];
        };
        match self.walk(&components, false) {
            Ok(dir) => names.iter().map(|name| identity_at(&dir, name)).collect(),
            Err(_) => vec![None; names.len()],
        }
    }

    /// The size of a regular file of the state, if one is there.
    pub fn file_len(&self, path: &Path) -> Option<u64> {
        let (dir, name) = self.parent_of(path, false).ok()?;
        let stat = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile)
            .then_some(stat.st_size as u64)
    }
}

/// The identity of the regular file `name` in `dir`, not followed.
fn identity_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> Option<Identity> {
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    (FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile).then(|| {
        Identity::from_parts(
            stat.st_dev as u64,
            stat.st_ino as u64,
            stat.st_size as u64,
            (stat.st_mtime as i64, stat.st_mtime_nsec as i64),
            (stat.st_ctime as i64, stat.st_ctime_nsec as i64),
        )
    })
}

/// What is at `name` in `dir`, not followed; `None` when nothing is.
fn kind_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<Option<Kind>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(FileType::from_raw_mode(stat.st_mode).into())),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn is_regular(fd: &OwnedFd) -> io::Result<bool> {
    Ok(FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode) == FileType::RegularFile)
}

fn entries(dir: BorrowedFd<'_>) -> io::Result<Vec<Entry>> {
    let mut found = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = std::ffi::OsStr::from_bytes(name);
        let kind = match entry.file_type() {
            FileType::Unknown => {
                let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
                FileType::from_raw_mode(stat.st_mode)
            }
            kind => kind,
        };
        found.push(Entry {
            name: name.to_owned(),
            kind: kind.into(),
        });
    }
    Ok(found)
}

/// Removes `name` in `dir`, descending into a directory by descriptor: a
/// link met anywhere is removed as a link.
fn remove_tree(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let sub = match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries(sub.as_fd())? {
        remove_tree(sub.as_fd(), &entry.name)?;
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A new temporary file in `dir`, named like the store's temporary files
/// (`.tmp…`, which sweeps skip and remove).
fn create_temporary(dir: &OwnedFd) -> io::Result<(OsString, OwnedFd)> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut last = None;
    for _ in 0..16 {
        let name = OsString::from(format!(".tmp{:016x}", random()));
        match rustix::fs::openat(dir, name.as_os_str(), flags, Mode::from_raw_mode(0o666)) {
            Ok(fd) => return Ok((name, fd)),
            Err(Errno::EXIST) => last = Some(Errno::EXIST),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.unwrap_or(Errno::EXIST).into())
}

/// A name's worth of randomness: no two writers (threads, processes) pick
/// the same one in practice, and `O_EXCL` catches it when they do.
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

fn outside(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is not a path inside the state directory",
            path.display()
        ),
    )
}

fn not_regular() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "not a regular file of the state directory",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// A state directory and, beside it, a directory of the user's files
    /// that no operation may change.
    fn setup() -> (tempfile::TempDir, StateDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user");
        fs::create_dir(&user).unwrap();
        fs::write(user.join("precious"), "keep").unwrap();
        let state = StateDir::new(&tmp.path().join("state"));
        (tmp, state, user)
    }

    fn untouched(user: &Path) {
        let names: Vec<_> = fs::read_dir(user)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["precious"]);
        assert_eq!(fs::read_to_string(user.join("precious")).unwrap(), "keep");
    }

    /// Held by the tests that take the process's list of removed links,
    /// so that one does not take what another is about to look for.
    static TAKING: Mutex<()> = Mutex::new(());

    #[test]
    fn a_linked_directory_is_replaced_not_written_through() {
        let _taking = TAKING.lock().unwrap_or_else(PoisonError::into_inner);
        let (_tmp, state, user) = setup();
        let dir = state.path().join("v11/bin");
        fs::create_dir_all(dir.parent().unwrap()).unwrap();
        symlink(&user, &dir).unwrap();
        state.write_atomic(&dir.join("rec"), b"x").unwrap();
        untouched(&user);
        assert!(fs::symlink_metadata(&dir).unwrap().is_dir());
        // Other tests of this process note theirs in the same list (one
        // that takes it holds `TAKING`).
        assert!(take_removed().contains(&dir));
        assert_eq!(state.read_bounded(&dir.join("rec"), 8).unwrap(), b"x");
    }

    #[test]
    fn removal_never_follows_a_link() {
        let (_tmp, state, user) = setup();
        let dir = state.path().join("v11");
        fs::create_dir_all(&dir).unwrap();
        symlink(&user, dir.join("linked")).unwrap();
        fs::create_dir(dir.join("real")).unwrap();
        symlink(&user, dir.join("real/inner")).unwrap();
        symlink(user.join("precious"), dir.join("file")).unwrap();
        for name in ["linked", "real", "file"] {
            state.remove(&dir.join(name)).unwrap();
        }
        untouched(&user);
        assert_eq!(state.read_dir(&dir).unwrap().unwrap().len(), 0);
        // Through a linked directory, nothing is found to remove.
        symlink(&user, dir.join("linked")).unwrap();
        state.remove(&dir.join("linked/precious")).unwrap();
        untouched(&user);
    }

    #[test]
    fn a_linked_or_special_file_is_not_opened_through() {
        let _taking = TAKING.lock().unwrap_or_else(PoisonError::into_inner);
        let (_tmp, state, user) = setup();
        let log = state.path().join("runs.log");
        fs::create_dir_all(state.path()).unwrap();
        symlink(user.join("precious"), &log).unwrap();
        let how = How {
            write: true,
            append: true,
            create: true,
            ..How::default()
        };
        state.open(&log, how).unwrap().write_all(b"line\n").unwrap();
        untouched(&user);
        assert_eq!(fs::read_to_string(&log).unwrap(), "line\n");
        let _ = take_removed();
        // A FIFO is neither read (it would block) nor written.
        let fifo = state.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            state.read_bounded(&fifo, 8),
            Err(ReadError::NotRegular)
        ));
        let truncate = How {
            write: true,
            create: true,
            truncate: true,
            ..How::default()
        };
        state.open(&fifo, truncate).unwrap();
        assert!(fs::symlink_metadata(&fifo).unwrap().is_file());
    }

    #[test]
    fn paths_outside_the_state_are_refused() {
        let (_tmp, state, user) = setup();
        for path in [user.join("precious"), state.path().join("../user/precious")] {
            assert_eq!(
                state.remove(&path).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            assert!(state.write_atomic(&path, b"no").is_err());
        }
        untouched(&user);
    }
}
