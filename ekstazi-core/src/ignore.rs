//! Accesses that are not dependencies, in one place.
//!
//! Kernel interfaces (`/proc`, `/sys`, `/dev`) describe the machine, not the
//! inputs of a test; the state directory and the tool's own scratch are ours;
//! the toolchain is covered by the global fingerprint. Everything else a
//! test touches is a dependency unless the test created it itself (see
//! [`crate::collect`]).

use std::path::{Path, PathBuf};

/// A set of ignored directory trees, each with the reason shown to users.
#[derive(Clone, Debug, Default)]
pub struct Ignore {
    trees: Vec<(PathBuf, String)>,
}

impl Ignore {
    /// The rules every run applies.
    pub fn defaults() -> Ignore {
        let mut ignore = Ignore::default();
        ignore.add("/proc", "kernel interface");
        ignore.add("/sys", "kernel interface");
        ignore.add("/dev", "device");
        ignore
    }

    /// Ignores everything at or below `tree` (an absolute, normalised path).
    pub fn add(&mut self, tree: impl Into<PathBuf>, why: impl Into<String>) {
        self.trees.push((tree.into(), why.into()));
    }

    /// Why an access to `path` (absolute, normalised) is not a dependency.
    pub fn check(&self, path: &Path) -> Option<&str> {
        self.trees
            .iter()
            .find(|(tree, _)| path.starts_with(tree))
            .map(|(_, why)| why.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_match_by_component() {
        let mut ignore = Ignore::defaults();
        ignore.add("/ws/.ekstazi", "state directory");
        assert_eq!(
            ignore.check(Path::new("/proc/self/maps")),
            Some("kernel interface")
        );
        assert_eq!(
            ignore.check(Path::new("/ws/.ekstazi/v1/x")),
            Some("state directory")
        );
        assert_eq!(ignore.check(Path::new("/ws/.ekstazix")), None);
        assert_eq!(ignore.check(Path::new("/devices")), None);
    }
}
