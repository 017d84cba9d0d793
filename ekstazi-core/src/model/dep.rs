//! What a test depends on, and the checksums that decide whether it changed.

use crate::model::path::StoredPath;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A blake3 digest.
pub type Hash = [u8; 32];

/// The thing a dependency's checksum is taken of.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Target {
    /// The bytes of a file the test read.
    Content(StoredPath),
    /// Whether a path exists, and as what: a lookup the test made without
    /// reading (stat, access), or one that found nothing.
    Kind {
        /// The path looked up.
        path: StoredPath,
        /// Whether the lookup followed a final symbolic link (`false`: it
        /// was about the link itself, as `lstat`).
        follow: bool,
    },
    /// The test binary itself, by its smart checksum (loaded sections only,
    /// no debug information, no build id).
    TestBinary,
    /// A program a process of the test ran, by the same smart checksum (or
    /// its bytes, for a file that is not an executable the checksum reads).
    Program(StoredPath),
    /// The entries of a directory the test listed: names and kinds, sorted
    /// (not their contents).
    Listing(StoredPath),
    /// An environment variable the test read: its value, normalised (see
    /// `capture::environment`), or absence.
    Env(EnvName),
    /// Where a symbolic link the test read points.
    Link(StoredPath),
    /// The canonical form of a path the test resolved (`realpath`).
    Resolved(StoredPath),
    /// A shared library mapped into a process of the test, by the smart
    /// checksum of programs.
    Library(StoredPath),
    /// A file cargo or rustc wrote about a build (rustc's dep-info, a build
    /// script's output), by its content with this checkout's directories
    /// replaced by placeholders ([`crate::model::path::Placeholders`]): such files
    /// name sources by absolute paths, which a moved checkout changes
    /// without changing what they say.
    BuildFile(StoredPath),
    /// Which environment variables the test was given, less
    /// cargo-ekstazi's own and the ignored ones
    /// (`capture::environment::Environment::walked_names`): a test that walks the
    /// environment (`std::env::vars`, `environ`) saw them all, and depends
    /// on each one's value as well ([`Target::Env`]).
    Environment,
}

/// The name of an environment variable (bytes: need not be UTF-8).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EnvName(pub Vec<u8>);

impl fmt::Display for EnvName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl Target {
    /// The file system path the target is about, if any.
    pub fn path(&self) -> Option<&StoredPath> {
        match self {
            Target::Content(path)
            | Target::Kind { path, .. }
            | Target::Program(path)
            | Target::Listing(path)
            | Target::Link(path)
            | Target::Resolved(path)
            | Target::Library(path)
            | Target::BuildFile(path) => Some(path),
            Target::TestBinary | Target::Env(_) | Target::Environment => None,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::TestBinary => f.write_str("test binary"),
            Target::Env(name) => write!(f, "${name}"),
            Target::Environment => f.write_str("the environment's variables"),
            other => other.path().expect("every other target has a path").fmt(f),
        }
    }
}

/// The kind of a file system entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else: a device, a FIFO, a socket.
    Other,
}

impl From<std::fs::FileType> for FileKind {
    fn from(kind: std::fs::FileType) -> FileKind {
        if kind.is_symlink() {
            FileKind::Symlink
        } else if kind.is_dir() {
            FileKind::Dir
        } else if kind.is_file() {
            FileKind::File
        } else {
            FileKind::Other
        }
    }
}

/// A checksum of a [`Target`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Sum {
    /// The content's digest.
    Hash(Hash),
    /// The entry exists, as this kind (for content: it is not a regular file).
    Kind(FileKind),
    /// Nothing at that path.
    Absent,
    /// Could not be established (changed while the test ran, unreadable):
    /// equal to nothing, so the test runs next time.
    Unknown,
}

impl Sum {
    /// Whether a recorded checksum still holds. `Unknown` never does.
    pub fn matches(&self, current: &Sum) -> bool {
        !matches!(self, Sum::Unknown) && !matches!(current, Sum::Unknown) && self == current
    }
}

/// Puts dependencies in the one order records, their files and the
/// history keep them: by target.
pub fn sort(deps: &mut [Dep]) {
    deps.sort_by(|a, b| a.target.cmp(&b.target));
}

/// One dependency: a target and its checksum when the test ran.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dep {
    /// What the test depended on.
    pub target: Target,
    /// Its checksum as the test saw it.
    pub sum: Sum,
}

/// How a dependency changed, as a user reads it.
pub fn describe_change(target: &Target, was: &Sum, now: &Sum) -> String {
    match (target, was, now) {
        (Target::TestBinary, _, _) => "binary changed".to_owned(),
        (Target::Program(_), _, Sum::Absent) => format!("program deleted: {target}"),
        (Target::Program(_), _, _) => format!("program changed: {target}"),
        (Target::Library(_), _, Sum::Absent) => format!("library deleted: {target}"),
        (Target::Library(_), _, _) => format!("library changed: {target}"),
        (Target::Env(name), Sum::Absent, _) => format!("environment variable set: {name}"),
        (Target::Env(name), _, Sum::Absent) => format!("environment variable unset: {name}"),
        (Target::Env(name), _, _) => format!("environment variable changed: {name}"),
        (Target::Environment, _, _) => {
            "environment variables added or removed (the test walks every variable)".to_owned()
        }
        (Target::Listing(_), Sum::Unknown, _) => {
            format!("directory changed while the test ran: {target}")
        }
        (Target::Listing(_), _, Sum::Unknown) => format!("directory cannot be listed: {target}"),
        (Target::Listing(_), Sum::Absent, _) => format!("directory created: {target}"),
        (Target::Listing(_), _, Sum::Absent) => format!("directory deleted: {target}"),
        (Target::Listing(_), Sum::Hash(_), Sum::Hash(_)) => {
            format!("directory listing changed: {target}")
        }
        (Target::Link(_), Sum::Hash(_), Sum::Hash(_)) => {
            format!("symbolic link changed: {target}")
        }
        (Target::Resolved(_), Sum::Hash(_), Sum::Hash(_)) => {
            format!("resolved path changed: {target}")
        }
        (_, Sum::Absent, _) => format!("file created: {target}"),
        (_, Sum::Unknown, _) => format!("file changed while the test ran: {target}"),
        (_, _, Sum::Absent) => format!("file deleted: {target}"),
        (_, _, Sum::Unknown) => format!("file cannot be checked: {target}"),
        (_, Sum::Kind(a), Sum::Kind(b)) if a != b => format!("file type changed: {target}"),
        (_, Sum::Hash(_), Sum::Kind(_)) | (_, Sum::Kind(_), Sum::Hash(_)) => {
            format!("file type changed: {target}")
        }
        _ => format!("file changed: {target}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::path::Anchor;

    fn at(rel: &str) -> StoredPath {
        StoredPath::new(Anchor::Workspace, rel).unwrap()
    }

    const H1: Sum = Sum::Hash([1; 32]);
    const H2: Sum = Sum::Hash([2; 32]);
    const FILE: Sum = Sum::Kind(FileKind::File);
    const DIR: Sum = Sum::Kind(FileKind::Dir);
    const LINK: Sum = Sum::Kind(FileKind::Symlink);

    /// Every arm, by the words a user reads: each target kind against each
    /// way its checksum can change.
    #[test]
    fn every_change_is_described_as_the_readme_lists_it() {
        let content = Target::Content(at("data/a.txt"));
        let kind = Target::Kind {
            path: at("flag"),
            follow: true,
        };
        let program = Target::Program(at("tool.sh"));
        let library = Target::Library(StoredPath::new(Anchor::Target, "debug/libp.so").unwrap());
        let env = Target::Env(EnvName(b"MODE".to_vec()));
        let listing = Target::Listing(at("data"));
        let link = Target::Link(at("links/a"));
        let resolved = Target::Resolved(at("links/b"));
        let build = Target::BuildFile(StoredPath::new(Anchor::Target, "debug/p.d").unwrap());
        let cases: &[(&Target, Sum, Sum, &str)] = &[
            (&Target::TestBinary, H1, H2, "binary changed"),
            (&Target::TestBinary, H1, Sum::Absent, "binary changed"),
            (&program, H1, H2, "program changed: tool.sh"),
            (&program, Sum::Absent, H2, "program changed: tool.sh"),
            (&program, H1, Sum::Unknown, "program changed: tool.sh"),
            (&program, H1, Sum::Absent, "program deleted: tool.sh"),
            (
                &library,
                H1,
                H2,
                "library changed: $CARGO_TARGET_DIR/debug/libp.so",
            ),
            (
                &library,
                H1,
                Sum::Absent,
                "library deleted: $CARGO_TARGET_DIR/debug/libp.so",
            ),
            (&env, Sum::Absent, H2, "environment variable set: MODE"),
            (&env, H1, Sum::Absent, "environment variable unset: MODE"),
            (&env, H1, H2, "environment variable changed: MODE"),
            (&env, Sum::Unknown, H2, "environment variable changed: MODE"),
            (
                &listing,
                Sum::Unknown,
                H2,
                "directory changed while the test ran: data",
            ),
            (
                &listing,
                H1,
                Sum::Unknown,
                "directory cannot be listed: data",
            ),
            (&listing, Sum::Absent, H2, "directory created: data"),
            (&listing, H1, Sum::Absent, "directory deleted: data"),
            (&listing, H1, H2, "directory listing changed: data"),
            (&listing, H1, FILE, "file type changed: data"),
            (&link, H1, H2, "symbolic link changed: links/a"),
            (&link, H1, Sum::Absent, "file deleted: links/a"),
            (&link, Sum::Absent, H2, "file created: links/a"),
            (&link, H1, FILE, "file type changed: links/a"),
            (&resolved, H1, H2, "resolved path changed: links/b"),
            (&resolved, H1, Sum::Absent, "file deleted: links/b"),
            (&content, H1, H2, "file changed: data/a.txt"),
            (&content, Sum::Absent, H2, "file created: data/a.txt"),
            (&content, H1, Sum::Absent, "file deleted: data/a.txt"),
            (
                &content,
                Sum::Unknown,
                H2,
                "file changed while the test ran: data/a.txt",
            ),
            (
                &content,
                H1,
                Sum::Unknown,
                "file cannot be checked: data/a.txt",
            ),
            (&content, H1, DIR, "file type changed: data/a.txt"),
            (&content, DIR, H2, "file type changed: data/a.txt"),
            (&kind, FILE, DIR, "file type changed: flag"),
            (&kind, LINK, FILE, "file type changed: flag"),
            (&kind, Sum::Absent, FILE, "file created: flag"),
            (&kind, DIR, Sum::Absent, "file deleted: flag"),
            (&kind, FILE, FILE, "file changed: flag"),
            (&build, H1, H2, "file changed: $CARGO_TARGET_DIR/debug/p.d"),
        ];
        for (target, was, now, expected) in cases {
            assert_eq!(
                describe_change(target, was, now),
                *expected,
                "{target:?}: {was:?} -> {now:?}"
            );
        }
    }

    #[test]
    fn unknown_never_matches_and_equal_sums_do() {
        assert!(H1.matches(&H1));
        assert!(Sum::Absent.matches(&Sum::Absent));
        assert!(FILE.matches(&FILE));
        assert!(!H1.matches(&H2));
        assert!(!FILE.matches(&DIR));
        assert!(!Sum::Absent.matches(&H1));
        assert!(!Sum::Unknown.matches(&Sum::Unknown));
        assert!(!Sum::Unknown.matches(&H1));
        assert!(!H1.matches(&Sum::Unknown));
    }

    #[test]
    fn targets_show_their_path_or_name() {
        assert_eq!(Target::TestBinary.to_string(), "test binary");
        assert_eq!(Target::Env(EnvName(b"A".to_vec())).to_string(), "$A");
        assert_eq!(Target::Listing(at("d")).to_string(), "d");
        assert_eq!(Target::TestBinary.path(), None);
        assert_eq!(
            Target::Kind {
                path: at("k"),
                follow: false
            }
            .path(),
            Some(&at("k"))
        );
    }

    #[test]
    fn file_kinds_follow_the_file_type() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let kind =
            |p: &std::path::Path| FileKind::from(std::fs::symlink_metadata(p).unwrap().file_type());
        assert_eq!(kind(dir.path()), FileKind::Dir);
        assert_eq!(kind(&file), FileKind::File);
        assert_eq!(kind(&link), FileKind::Symlink);
        assert_eq!(kind(std::path::Path::new("/dev/null")), FileKind::Other);
    }
}
