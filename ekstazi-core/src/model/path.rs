//! Paths as records store them: relative to an anchor (the workspace, the
//! target directory, cargo's home) so that a record made in one checkout is
//! valid in another, and validated on the way in, because a record read from
//! disk is data, not a place to look at.

use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// What a stored path is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Anchor {
    /// The cargo workspace root.
    Workspace,
    /// The cargo target directory (which may live outside the workspace).
    Target,
    /// `$CARGO_HOME` (registry sources, git checkouts).
    CargoHome,
    /// The file system root: an absolute path outside every other anchor.
    Root,
}

/// A normalised path relative to an [`Anchor`]: `/`-separated, no empty,
/// `.` or `..` components, no NUL. Bytes, not `String`: Unix paths need not
/// be UTF-8.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StoredPath {
    anchor: Anchor,
    rel: Vec<u8>,
}

impl StoredPath {
    /// Builds a stored path, refusing anything that could escape its anchor.
    pub fn new(anchor: Anchor, rel: impl Into<Vec<u8>>) -> Option<StoredPath> {
        let path = StoredPath {
            anchor,
            rel: rel.into(),
        };
        path.is_valid().then_some(path)
    }

    /// Whether the path is in its normal, anchor-confined form. Paths decoded
    /// from a record are checked with this before they are used.
    pub fn is_valid(&self) -> bool {
        if self.rel.is_empty() {
            return true;
        }
        !self.rel.contains(&0)
            && self
                .rel
                .split(|b| *b == b'/')
                .all(|part| !part.is_empty() && part != b"." && part != b"..")
    }

    /// The anchor the path is relative to.
    pub fn anchor(&self) -> Anchor {
        self.anchor
    }

    /// The relative part.
    pub fn rel(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.rel))
    }
}

impl fmt::Display for StoredPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rel = String::from_utf8_lossy(&self.rel);
        match self.anchor {
            Anchor::Workspace if rel.is_empty() => f.write_str("."),
            Anchor::Workspace => f.write_str(&rel),
            Anchor::Target => write!(f, "$CARGO_TARGET_DIR/{rel}"),
            Anchor::CargoHome => write!(f, "$CARGO_HOME/{rel}"),
            Anchor::Root => write!(f, "/{rel}"),
        }
    }
}

/// The directories stored paths are relative to, in this checkout.
#[derive(Clone, Debug)]
pub struct Anchors {
    workspace: PathBuf,
    target: PathBuf,
    cargo_home: Option<PathBuf>,
}

impl Anchors {
    /// All three must be absolute; they are normalised lexically.
    pub fn new(workspace: &Path, target: &Path, cargo_home: Option<&Path>) -> Anchors {
        Anchors {
            workspace: normalize(workspace),
            target: normalize(target),
            cargo_home: cargo_home.map(normalize),
        }
    }

    /// The workspace root.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The workspace, the target directory and cargo's home.
    pub fn dirs(&self) -> (&Path, &Path, Option<&Path>) {
        (&self.workspace, &self.target, self.cargo_home.as_deref())
    }

    /// The anchors' absolute paths as bytes, longest first: what a smart
    /// checksum erases so that a binary built in another checkout matches.
    pub fn erase_list(&self) -> Vec<Vec<u8>> {
        let mut list: Vec<Vec<u8>> = [
            Some(&self.target),
            Some(&self.workspace),
            self.cargo_home.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|p| p.as_os_str().as_bytes().to_vec())
        .collect();
        list.sort_by_key(|s| std::cmp::Reverse(s.len()));
        list.dedup();
        list
    }

    /// Stores an absolute path relative to the most specific anchor it lies
    /// under. The target directory comes first: it usually lies inside the
    /// workspace but moves independently of it (`CARGO_TARGET_DIR`).
    pub fn store(&self, absolute: &Path) -> StoredPath {
        let path = normalize(absolute);
        let candidates = [
            (Anchor::Target, Some(&self.target)),
            (Anchor::Workspace, Some(&self.workspace)),
            (Anchor::CargoHome, self.cargo_home.as_ref()),
        ];
        for (anchor, base) in candidates {
            if let Some(rel) = base.and_then(|base| path.strip_prefix(base).ok()) {
                return StoredPath {
                    anchor,
                    rel: rel.as_os_str().as_bytes().to_vec(),
                };
            }
        }
        let rel = path.strip_prefix("/").unwrap_or(&path);
        StoredPath {
            anchor: Anchor::Root,
            rel: rel.as_os_str().as_bytes().to_vec(),
        }
    }

    /// Where a stored path is in this checkout; `None` for a path relative to
    /// cargo's home when there is none.
    pub fn resolve(&self, stored: &StoredPath) -> Option<PathBuf> {
        let base: &Path = match stored.anchor {
            Anchor::Workspace => &self.workspace,
            Anchor::Target => &self.target,
            Anchor::CargoHome => self.cargo_home.as_deref()?,
            Anchor::Root => Path::new("/"),
        };
        if stored.rel.is_empty() {
            Some(base.to_path_buf())
        } else {
            Some(base.join(stored.rel()))
        }
    }
}

/// The absolute directories of this checkout (workspace, target directory,
/// cargo's home, toolchain, ...), each with the placeholder that stands for
/// it in text that names them: environment values, rustc's dep-info, a build
/// script's output. Two texts equal after replacement say the same thing
/// about their own checkouts.
#[derive(Clone, Debug, Default)]
pub struct Placeholders {
    /// Longest first, so that a directory inside another is replaced whole.
    dirs: Vec<(Vec<u8>, &'static [u8])>,
}

impl Placeholders {
    /// The anchors' directories, and the toolchain's root if known.
    pub fn new(anchors: &Anchors, sysroot: Option<&Path>) -> Placeholders {
        let mut placeholders = Placeholders::default();
        placeholders.add(&anchors.target, b"${CARGO_TARGET_DIR}");
        placeholders.add(&anchors.workspace, b"${WORKSPACE}");
        if let Some(home) = &anchors.cargo_home {
            placeholders.add(home, b"${CARGO_HOME}");
        }
        if let Some(sysroot) = sysroot {
            placeholders.add(sysroot, b"${SYSROOT}");
        }
        placeholders
    }

    /// Replaces `dir` (absolute) by `name`. The root is never replaced: it
    /// would replace every path.
    pub fn add(&mut self, dir: &Path, name: &'static [u8]) {
        let dir = normalize(dir);
        if dir == Path::new("/") || !dir.is_absolute() {
            return;
        }
        self.dirs.push((dir.as_os_str().as_bytes().to_vec(), name));
        self.dirs
            .sort_by_key(|(dir, _)| std::cmp::Reverse(dir.len()));
    }

    /// Also the directories as a Makefile spells them (rustc's dep-info
    /// escapes spaces and `#` with a backslash, and doubles `$`).
    pub fn with_makefile_spelling(mut self) -> Placeholders {
        let escaped: Vec<(Vec<u8>, &'static [u8])> = self
            .dirs
            .iter()
            .filter_map(|(dir, name)| {
                let mut out = Vec::with_capacity(dir.len());
                for &b in dir {
                    match b {
                        b' ' | b'#' => out.extend_from_slice(&[b'\\', b]),
                        b'$' => out.extend_from_slice(b"$$"),
                        b => out.push(b),
                    }
                }
                (out != *dir).then_some((out, *name))
            })
            .collect();
        self.dirs.extend(escaped);
        self.dirs
            .sort_by_key(|(dir, _)| std::cmp::Reverse(dir.len()));
        self
    }

    /// Whether there is no directory to replace.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// [`Placeholders::replace`], or `None` when it would change nothing:
    /// most text names no directory, and a search for each is cheaper than
    /// a copy.
    pub fn replaced(&self, text: &[u8]) -> Option<Vec<u8>> {
        if !self
            .dirs
            .iter()
            .any(|(dir, _)| memchr::memmem::find(text, dir).is_some())
        {
            return None;
        }
        let out = self.replace(text);
        (out != text).then_some(out)
    }

    /// `text` with every directory that starts a path and ends at a path
    /// boundary replaced by its placeholder.
    pub fn replace(&self, text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        'scan: while i < text.len() {
            let at_start = i == 0 || !is_name_byte(text[i - 1]);
            if at_start && text[i] == b'/' {
                for (dir, name) in &self.dirs {
                    if text[i..].starts_with(dir) {
                        let end = i + dir.len();
                        if end == text.len() || !is_name_byte(text[end]) {
                            out.extend_from_slice(name);
                            i = end;
                            continue 'scan;
                        }
                    }
                }
            }
            out.push(text[i]);
            i += 1;
        }
        out
    }
}

/// Bytes that continue a file name (a prefix followed by one of these is not
/// the whole directory).
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+' | b'@' | b'~')
}

/// Removes `.` and `..` components and repeated separators without touching
/// the file system: traced paths may no longer exist, and the meaning the
/// test gave a path is the lexical one it passed to the kernel (symbolic
/// links followed by `..` are the rare exception, and are resolved by the
/// kernel's answer being recorded for the path as named).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchors() -> Anchors {
        Anchors::new(
            Path::new("/ws"),
            Path::new("/ws/target"),
            Some(Path::new("/home/u/.cargo")),
        )
    }

    #[test]
    fn paths_are_stored_relative_to_the_most_specific_anchor() {
        let a = anchors();
        assert_eq!(
            a.store(Path::new("/ws/data/a.txt")).to_string(),
            "data/a.txt"
        );
        assert_eq!(
            a.store(Path::new("/ws/target/debug/x")).to_string(),
            "$CARGO_TARGET_DIR/debug/x"
        );
        assert_eq!(
            a.store(Path::new("/home/u/.cargo/registry/src/x"))
                .to_string(),
            "$CARGO_HOME/registry/src/x"
        );
        assert_eq!(a.store(Path::new("/etc/hosts")).to_string(), "/etc/hosts");
        assert_eq!(a.store(Path::new("/ws")).to_string(), ".");
        assert_eq!(a.store(Path::new("/wsx/a")).to_string(), "/wsx/a");
    }

    #[test]
    fn stored_paths_resolve_in_another_checkout() {
        let stored = anchors().store(Path::new("/ws/./data/../data/a.txt"));
        let elsewhere = Anchors::new(Path::new("/ci/ws"), Path::new("/ci/ws/target"), None);
        assert_eq!(
            elsewhere.resolve(&stored),
            Some(PathBuf::from("/ci/ws/data/a.txt"))
        );
    }

    #[test]
    fn paths_that_escape_their_anchor_are_invalid() {
        for bad in [
            &b"../x"[..],
            b"a/../../x",
            b"a//b",
            b"./a",
            b"/etc/passwd",
            b"a\0b",
            b"a/",
        ] {
            assert!(
                StoredPath::new(Anchor::Workspace, bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(StoredPath::new(Anchor::Workspace, &b"a/b.txt"[..]).is_some());
        assert!(StoredPath::new(Anchor::Workspace, &b""[..]).is_some());
    }

    #[test]
    fn replaced_is_none_when_no_directory_is_named() {
        let p = Placeholders::new(&anchors(), None);
        assert_eq!(p.replaced(b"/wsx/a and ws/b"), None);
        assert_eq!(
            p.replaced(b"/ws/target/debug/helper").as_deref(),
            Some(&b"${CARGO_TARGET_DIR}/debug/helper"[..])
        );
        assert!(Placeholders::default().is_empty());
        assert_eq!(Placeholders::default().replaced(b"/ws/a"), None);
    }

    #[test]
    fn placeholders_replace_whole_directories_at_path_starts() {
        let mut p = Placeholders::new(&anchors(), Some(Path::new("/opt/rust")));
        p.add(Path::new("/"), b"${NEVER}");
        let replace = |text: &str| String::from_utf8(p.replace(text.as_bytes())).unwrap();
        assert_eq!(
            replace("/ws/target/debug/x.d: /ws/src/lib.rs /opt/rust/lib/x"),
            "${CARGO_TARGET_DIR}/debug/x.d: ${WORKSPACE}/src/lib.rs ${SYSROOT}/lib/x"
        );
        assert_eq!(replace("/wsx/a a/ws/b /ws"), "/wsx/a a/ws/b ${WORKSPACE}");
        let spaced = Anchors::new(Path::new("/my ws"), Path::new("/my ws/target"), None);
        let make = Placeholders::new(&spaced, None).with_makefile_spelling();
        assert_eq!(
            make.replace(b"/my\\ ws/src/a.rs /my ws/b"),
            b"${WORKSPACE}/src/a.rs ${WORKSPACE}/b"
        );
    }

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d//e")),
            PathBuf::from("/a/c/d/e")
        );
        assert_eq!(normalize(Path::new("/../a")), PathBuf::from("/a"));
    }
}
