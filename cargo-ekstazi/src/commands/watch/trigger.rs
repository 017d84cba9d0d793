//! What starts a `watch` cycle: a save in the workspace.
//!
//! The workspace's directories are watched one by one (`notify`: inotify
//! on Linux), never recursively from the root: the target directory, `.git`
//! and the state directory are never watched at all, and a directory
//! .gitignore leaves out is not either, unless a record names a file in it
//! (the tests' own data). A directory made later is added as it appears.
//!
//! An event counts when it is a write, a creation, a removal or a rename
//! (not a read, nor a change of times or permissions), of a path the ignore
//! rules keep and that is not an editor's scratch file. Events that come
//! close together (a formatter's, a branch switch) are gathered until
//! [`QUIET`] passes with none, and make one cycle. A file whose bytes are
//! those it had (`touch`, a formatter that changed nothing) does not count.
//!
//! None of this decides what a cycle runs: the cycle checksums what the
//! records name, as any run does. A missed event delays a cycle; it cannot
//! skip a test.

use super::{Event, Places};
use anyhow::{Context, Result};
use ekstazi_core::model::dep::Target;
use ekstazi_core::model::path::Anchor;
use ekstazi_core::storage::store::Store;
use ignore::gitignore::Gitignore;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the events of one save, or one burst of saves, may be apart.
const QUIET: Duration = Duration::from_millis(20);
/// The longest a steady stream of events holds a cycle back.
const LONGEST: Duration = Duration::from_millis(500);
/// The longest the files the records name wait for a recording to end.
const RECORDING_AWAITED: Duration = Duration::from_secs(600);
/// Files larger than this are not read when the watch starts, to know
/// their bytes; a write to one always counts.
const LARGEST_KNOWN: u64 = 16 << 20;

type Raw = notify::Result<notify::Event>;

pub struct Trigger {
    scope: Arc<Scope>,
    watcher: Arc<Mutex<RecommendedWatcher>>,
}

/// Which paths count.
struct Scope {
    root: PathBuf,
    /// Never watched: the target directory, `.git`, the state directory.
    skipped: Vec<PathBuf>,
    /// The ignore files found, shallowest first, and the global one
    /// (read again when one of them changes).
    ignores: Mutex<Vec<Gitignore>>,
    /// Files the records name: they count whatever the ignore files say.
    named: Mutex<HashSet<PathBuf>>,
    /// The directories watched.
    watched: Mutex<HashSet<PathBuf>>,
}

impl Trigger {
    /// Watches the workspace and sends [`Event::Changed`] for each save
    /// that counts.
    pub fn start(places: &Places, events: Sender<Event>) -> Result<Trigger> {
        let (raw, received) = mpsc::channel::<Raw>();
        let watcher = notify::recommended_watcher(move |event| {
            let _ = raw.send(event);
        })
        .context("cannot watch the workspace's files")?;
        let watcher = Arc::new(Mutex::new(watcher));
        let mut scope = Scope {
            root: places.root.clone(),
            skipped: vec![
                places.target_dir.clone(),
                places.root.join(".git"),
                places.state_dir.clone(),
            ],
            ignores: Mutex::new(Vec::new()),
            named: Mutex::new(named_paths(places)),
            watched: Mutex::new(HashSet::new()),
        };
        let walked = scope.walk(&places.root);
        scope.ignores = Mutex::new(ignore_files(&places.root, &walked.ignore_files));
        let scope = Arc::new(scope);
        let trigger = Trigger {
            scope: Arc::clone(&scope),
            watcher: Arc::clone(&watcher),
        };
        let named = named_dirs(&lock(&scope.named));
        trigger.watch_dirs(walked.dirs.iter().chain(&named).map(PathBuf::as_path));
        // Read now, before the first cycle starts: a save made from here on
        // differs from what is known.
        let known = known_bytes(&walked.files);
        let filter = Filter {
            trigger: trigger.clone_handle(),
            known,
        };
        std::thread::spawn(move || filter.run(received, events));
        Ok(trigger)
    }

    fn clone_handle(&self) -> Trigger {
        Trigger {
            scope: Arc::clone(&self.scope),
            watcher: Arc::clone(&self.watcher),
        }
    }

    /// How many directories are watched.
    pub fn directories(&self) -> usize {
        lock(&self.scope.watched).len()
    }

    /// After a cycle, once its recording in the background has ended: the
    /// files the records then name, watched from then on. On a thread of
    /// its own: reading every record takes time on a large workspace.
    pub fn refresh_named(&self, places: &Places) {
        let trigger = self.clone_handle();
        let places = places.clone();
        std::thread::spawn(move || {
            let give_up = Instant::now() + RECORDING_AWAITED;
            while crate::run::background::runs(&places.state_dir) && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(200));
            }
            let named = named_paths(&places);
            let dirs = named_dirs(&named);
            *lock(&trigger.scope.named) = named;
            trigger.watch_dirs(dirs.iter().map(PathBuf::as_path));
        });
    }

    fn watch_dirs<'a>(&self, dirs: impl Iterator<Item = &'a Path>) {
        let mut watcher = lock(&self.watcher);
        let mut watched = lock(&self.scope.watched);
        for dir in dirs {
            if self.scope.is_skipped(dir) || watched.contains(dir) || !dir.is_dir() {
                continue;
            }
            // A directory that went meanwhile is no error: its creation
            // will come as an event of its parent.
            if watcher.watch(dir, RecursiveMode::NonRecursive).is_ok() {
                watched.insert(dir.to_path_buf());
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a walk of the workspace found that counts.
#[derive(Default)]
struct Walked {
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
    ignore_files: Vec<PathBuf>,
}

impl Scope {
    /// The directories and files under `top` that count, as the `ignore`
    /// crate walks them (.gitignore, .ignore, git's excludes).
    fn walk(&self, top: &Path) -> Walked {
        let skipped = self.skipped.clone();
        let walk = ignore::WalkBuilder::new(top)
            .hidden(false)
            .require_git(false)
            .filter_entry(move |entry| !skipped.iter().any(|dir| entry.path().starts_with(dir)))
            .build();
        let mut walked = Walked::default();
        for entry in walk.flatten() {
            let path = entry.path().to_path_buf();
            match entry.file_type() {
                Some(kind) if kind.is_dir() => walked.dirs.push(path),
                Some(kind) if kind.is_file() => {
                    let name = entry.file_name();
                    if name == ".gitignore" || name == ".ignore" {
                        walked.ignore_files.push(path.clone());
                    }
                    walked.files.push(path);
                }
                _ => {}
            }
        }
        walked
    }

    /// Reads the ignore files again, from a walk of the workspace.
    fn read_ignore_files(&self) {
        let walked = self.walk(&self.root);
        *lock(&self.ignores) = ignore_files(&self.root, &walked.ignore_files);
    }

    fn is_skipped(&self, path: &Path) -> bool {
        !path.starts_with(&self.root) || self.skipped.iter().any(|dir| path.starts_with(dir))
    }

    /// Whether a change of `path` counts.
    fn counts(&self, path: &Path) -> bool {
        if self.is_skipped(path) || is_scratch(path) {
            return false;
        }
        {
            // A file in a directory a record lists counts too.
            let named = lock(&self.named);
            if named.contains(path) || path.parent().is_some_and(|dir| named.contains(dir)) {
                return true;
            }
        }
        let is_dir = path.is_dir();
        let mut ignored = false;
        for matcher in lock(&self.ignores).iter() {
            let base = match matcher.path().as_os_str().is_empty() {
                true => self.root.as_path(),
                false => matcher.path(),
            };
            let Ok(relative) = path.strip_prefix(base) else {
                continue;
            };
            let found = matcher.matched_path_or_any_parents(relative, is_dir);
            if !found.is_none() {
                ignored = found.is_ignore();
            }
        }
        !ignored
    }
}

/// An editor's scratch file: vim's swap files and its write test `4913`,
/// emacs's backups and lock files.
fn is_scratch(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return false;
    };
    name == "4913"
        || name.ends_with('~')
        || name.starts_with(".#")
        || (name.starts_with('.')
            && [".swp", ".swo", ".swx"]
                .iter()
                .any(|ext| name.ends_with(ext)))
}

/// The ignore files' matchers, shallowest first (a deeper file's word
/// wins), git's global excludes and the repository's `info/exclude` first
/// of all.
fn ignore_files(root: &Path, found: &[PathBuf]) -> Vec<Gitignore> {
    let mut files = found.to_vec();
    files.sort_by_key(|path| path.components().count());
    let mut matchers = vec![Gitignore::global().0];
    let exclude = root.join(".git/info/exclude");
    if exclude.is_file() {
        let mut builder = ignore::gitignore::GitignoreBuilder::new(root);
        builder.add(&exclude);
        matchers.extend(builder.build().ok());
    }
    matchers.extend(files.iter().map(|file| Gitignore::new(file).0));
    matchers
}

/// The workspace's files the records name (read, listed, looked up), as
/// absolute paths.
fn named_paths(places: &Places) -> HashSet<PathBuf> {
    let Ok(records) = Store::new(&places.state_dir).records() else {
        return HashSet::new();
    };
    let mut named = HashSet::new();
    for record in records.into_iter().filter_map(|(_, record)| record.ok()) {
        for dep in &record.deps {
            let stored = match &dep.target {
                Target::Content(path)
                | Target::Kind { path, .. }
                | Target::Listing(path)
                | Target::Link(path)
                | Target::Resolved(path) => path,
                _ => continue,
            };
            if stored.anchor() == Anchor::Workspace {
                named.insert(places.root.join(stored.rel()));
            }
        }
    }
    named
}

/// The directories to watch for the paths the records name: a directory
/// itself (its entries may be listed), a file's directory.
fn named_dirs(named: &HashSet<PathBuf>) -> Vec<PathBuf> {
    named
        .iter()
        .filter_map(|path| match path.is_dir() {
            true => Some(path.clone()),
            false => path.parent().map(Path::to_path_buf),
        })
        .collect()
}

/// What a path holds, to tell a write that changed it from one that did not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bytes {
    Absent,
    Directory,
    File(blake3::Hash),
    /// Too large, or unreadable: any write counts.
    Unknown,
}

fn bytes_of(path: &Path) -> Bytes {
    match std::fs::metadata(path) {
        Err(_) => Bytes::Absent,
        Ok(meta) if meta.is_dir() => Bytes::Directory,
        Ok(meta) if meta.len() > LARGEST_KNOWN => Bytes::Unknown,
        Ok(_) => match std::fs::read(path) {
            Ok(bytes) => Bytes::File(blake3::hash(&bytes)),
            Err(_) => Bytes::Unknown,
        },
    }
}

fn known_bytes(files: &[PathBuf]) -> HashMap<PathBuf, Bytes> {
    use rayon::prelude::*;
    files
        .par_iter()
        .map(|path| (path.clone(), bytes_of(path)))
        .collect()
}

/// The thread between the file events and the loop.
struct Filter {
    trigger: Trigger,
    /// What each path held when last seen.
    known: HashMap<PathBuf, Bytes>,
}

impl Filter {
    fn run(mut self, received: Receiver<Raw>, events: Sender<Event>) {
        while let Ok(first) = received.recv() {
            let Some(burst) = gather(first, &received) else {
                return;
            };
            let changed = self.changed(burst);
            let Some(changed) = changed else { continue };
            if events.send(Event::Changed(changed)).is_err() {
                return;
            }
        }
    }

    /// The paths whose change counts, in order; an empty list when the
    /// watcher lost events; `None` when nothing counts.
    fn changed(&mut self, burst: Vec<Raw>) -> Option<Vec<PathBuf>> {
        let mut lost = false;
        let mut paths = Vec::new();
        for event in burst {
            let Ok(event) = event else {
                lost = true;
                continue;
            };
            lost |= event.need_rescan();
            if counts(&event.kind) {
                paths.extend(event.paths);
            }
        }
        let rules_changed = paths.iter().any(|path| {
            let name = path.file_name();
            name == Some(".gitignore".as_ref()) || name == Some(".ignore".as_ref())
        });
        if rules_changed {
            self.trigger.scope.read_ignore_files();
        }
        let mut changed = Vec::new();
        for path in paths {
            if changed.contains(&path) || !self.trigger.scope.counts(&path) {
                continue;
            }
            let now = bytes_of(&path);
            if now == Bytes::Directory {
                self.watch_new(&path);
            }
            let before = self.known.insert(path.clone(), now);
            // Made and gone within the burst: an editor's or a tool's
            // temporary file.
            let passing = before.is_none() && now == Bytes::Absent;
            if !passing && (before != Some(now) || matches!(now, Bytes::Unknown | Bytes::Directory))
            {
                changed.push(path);
            }
        }
        match (lost, changed.is_empty()) {
            (true, true) => Some(Vec::new()),
            (_, false) => Some(changed),
            (false, true) => None,
        }
    }

    /// A directory that appeared, and the directories in it.
    fn watch_new(&mut self, dir: &Path) {
        let walked = self.trigger.scope.walk(dir);
        self.trigger
            .watch_dirs(walked.dirs.iter().map(PathBuf::as_path));
    }
}

/// The first event and every one that follows within [`QUIET`] of the
/// last, up to [`LONGEST`]; `None` when the watcher is gone.
fn gather(first: Raw, received: &Receiver<Raw>) -> Option<Vec<Raw>> {
    let mut burst = vec![first];
    let end = Instant::now() + LONGEST;
    loop {
        let wait = QUIET.min(end.saturating_duration_since(Instant::now()));
        match received.recv_timeout(wait) {
            Ok(event) => burst.push(event),
            Err(RecvTimeoutError::Timeout) => return Some(burst),
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Whether an event of this kind can change what a test sees: not a read,
/// nor a change of times or permissions.
fn counts(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editors_scratch_files_do_not_count() {
        for name in ["4913", "lib.rs~", ".#lib.rs", ".lib.rs.swp", ".lib.rs.swx"] {
            assert!(is_scratch(Path::new(name)), "{name}");
        }
        for name in ["lib.rs", "swp", "data.swp.txt", "a~b"] {
            assert!(!is_scratch(Path::new(name)), "{name}");
        }
    }

    #[test]
    fn reads_and_changes_of_times_do_not_count() {
        use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind};
        assert!(counts(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(!counts(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!counts(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!counts(&EventKind::Modify(ModifyKind::Metadata(
            MetadataKind::Any
        ))));
        assert!(counts(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(counts(&EventKind::Create(CreateKind::File)));
        assert!(counts(&EventKind::Remove(RemoveKind::Any)));
    }

    fn scope(root: &Path) -> Scope {
        let scope = Scope {
            root: root.to_path_buf(),
            skipped: vec![root.join("target"), root.join(".git")],
            ignores: Mutex::new(Vec::new()),
            named: Mutex::new(HashSet::from([
                root.join("out/kept.txt"),
                root.join("out/listed"),
            ])),
            watched: Mutex::new(HashSet::new()),
        };
        scope.read_ignore_files();
        scope
    }

    #[test]
    fn the_ignore_files_decide_but_the_records_win() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/gen")).unwrap();
        std::fs::create_dir_all(root.join("out")).unwrap();
        std::fs::write(root.join(".gitignore"), "out/\n*.log\n").unwrap();
        std::fs::write(root.join("src/.gitignore"), "gen/\n!keep.log\n").unwrap();
        let scope = scope(root);
        assert!(scope.counts(&root.join("src/lib.rs")));
        assert!(!scope.counts(&root.join("target/debug/x")));
        assert!(!scope.counts(&root.join(".git/index")));
        assert!(!scope.counts(&root.join("out/other.txt")));
        assert!(
            scope.counts(&root.join("out/kept.txt")),
            "named by a record"
        );
        assert!(
            scope.counts(&root.join("out/listed/new.txt")),
            "in a directory a record names"
        );
        assert!(!scope.counts(&root.join("run.log")));
        assert!(
            scope.counts(&root.join("src/keep.log")),
            "the deeper file wins"
        );
        assert!(!scope.counts(&root.join("src/gen/a.rs")));
        assert!(!scope.counts(Path::new("/elsewhere/file")));
    }
}
