//! Accesses that are not dependencies, in one place.
//!
//! Kernel interfaces (`/proc`, `/sys`, `/dev`) describe the machine, not the
//! inputs of a test; the state directory and the tool's own scratch are ours;
//! the toolchain is covered by the global fingerprint; system shared
//! libraries too, unless the configuration says otherwise. The workspace's
//! `.config/ekstazi.toml` adds gitignore-style path patterns and variable
//! names ([`crate::options::config`]). Everything else a test touches is a dependency
//! unless the test created it itself (see [`crate::capture::collect`]).
//! Cargo's and rustc's bookkeeping is not either ([`crate::capture::cargo_runs`]).

use crate::options::config::Config;
use ignore::gitignore::Gitignore;
use std::path::{Path, PathBuf};

/// The reason shown for accesses the configuration ignores.
pub const BY_CONFIG: &str = "ignored by .config/ekstazi.toml";

/// A set of ignored directory trees, each with the reason shown to users,
/// and the configuration's patterns.
#[derive(Clone, Debug, Default)]
pub struct Ignore {
    trees: Vec<(PathBuf, String)>,
    /// Patterns relative to the workspace root, and the root.
    relative: Option<(PathBuf, Gitignore)>,
    /// Patterns matched against absolute paths.
    absolute: Option<Gitignore>,
    env: Option<globset::GlobSet>,
    /// System libraries are dependencies too.
    pub system_libraries: bool,
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

    /// Adds the configuration's patterns; an error names the bad pattern.
    pub fn with_config(mut self, config: &Config, workspace: &Path) -> Result<Ignore, String> {
        let patterns = config.ignore.compile(workspace)?;
        self.relative = patterns.relative;
        self.absolute = patterns.absolute;
        if let Some(env) = patterns.env {
            self.env = Some(env);
        }
        self.system_libraries = config.libraries.system;
        Ok(self)
    }

    /// Ignores everything at or below `tree` (an absolute, normalised path).
    pub fn add(&mut self, tree: impl Into<PathBuf>, why: impl Into<String>) {
        self.trees.push((tree.into(), why.into()));
    }

    /// Why an access to `path` (absolute, normalised) is not a dependency.
    pub fn check(&self, path: &Path) -> Option<&str> {
        if let Some((_, why)) = self.trees.iter().find(|(tree, _)| path.starts_with(tree)) {
            return Some(why);
        }
        if let Some(why) = crate::capture::cargo_runs::bookkeeping(path) {
            return Some(why);
        }
        if let Some((root, matcher)) = &self.relative
            && let Ok(rel) = path.strip_prefix(root)
            && !rel.as_os_str().is_empty()
            && matcher.matched_path_or_any_parents(rel, false).is_ignore()
        {
            return Some(BY_CONFIG);
        }
        if let Some(matcher) = &self.absolute
            && let Ok(rel) = path.strip_prefix("/")
            && !rel.as_os_str().is_empty()
            && matcher.matched_path_or_any_parents(rel, false).is_ignore()
        {
            return Some(BY_CONFIG);
        }
        None
    }

    /// The `[ignore] env` patterns.
    pub fn env_patterns(&self) -> Option<&globset::GlobSet> {
        self.env.as_ref()
    }

    /// Why reading the environment variable `name` is not a dependency.
    pub fn check_env(&self, name: &[u8]) -> Option<&str> {
        if crate::capture::environment::is_own(name) {
            return Some("cargo-ekstazi's own variable");
        }
        let name = std::str::from_utf8(name).ok()?;
        self.env
            .as_ref()
            .is_some_and(|set| set.is_match(name))
            .then_some(BY_CONFIG)
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

    #[test]
    fn configured_patterns_are_gitignore_style() {
        let config = Config::parse(
            r#"
            [ignore]
            paths = ["logs/", "*.tmp", "/data/scratch", "!keep.tmp"]
            absolute = ["/var/cache/"]
            env = ["CI_*", "BUILD_ID"]
            "#,
        )
        .unwrap();
        let ignore = Ignore::defaults()
            .with_config(&config, Path::new("/ws"))
            .unwrap();
        let check = |p: &str| ignore.check(Path::new(p));
        assert_eq!(check("/ws/logs/today.txt"), Some(BY_CONFIG));
        assert_eq!(check("/ws/a/logs/today.txt"), Some(BY_CONFIG), "any depth");
        assert_eq!(check("/ws/a/b.tmp"), Some(BY_CONFIG));
        assert_eq!(check("/ws/a/keep.tmp"), None, "negated");
        assert_eq!(check("/ws/data/scratch/x"), Some(BY_CONFIG));
        assert_eq!(check("/ws/a/data/scratch/x"), None, "anchored");
        assert_eq!(check("/ws/data/a.txt"), None);
        assert_eq!(
            check("/elsewhere/logs/x"),
            None,
            "relative patterns stay in the workspace"
        );
        assert_eq!(check("/var/cache/fc/x"), Some(BY_CONFIG));
        assert_eq!(check("/var/lib/x"), None);
        assert_eq!(ignore.check_env(b"CI_JOB_ID"), Some(BY_CONFIG));
        assert_eq!(ignore.check_env(b"BUILD_ID"), Some(BY_CONFIG));
        assert_eq!(ignore.check_env(b"MODE"), None);
        assert!(ignore.check_env(b"EKSTAZI_TRACE_FILE").is_some());
    }
}
