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
//!
//! Variables a shell sets for itself ([`SHELL_BOOKKEEPING`]) are left out
//! of walks of the environment by default: they say how the tool was
//! started (from a prompt, a script, under `time`), not what the tests are
//! given. A test that reads one by name still depends on it.

use crate::options::config::Config;
use ignore::gitignore::Gitignore;
use std::path::{Path, PathBuf};

/// The reason shown for accesses the configuration ignores.
pub const BY_CONFIG: &str = "ignored by .config/ekstazi.toml";

/// The variables a shell keeps for its own bookkeeping, left out of walks
/// of the environment unless `[ignore] env` keeps them (`!NAME`):
/// - `_`: bash and zsh put the path of the command they run in its
///   environment (the issue that made this list: `cargo ekstazi test` typed
///   at a prompt, under `time` or from a script gives each a different `_`);
/// - `SHLVL`: bash, zsh, ksh, tcsh and fish count nested shells in it, so it
///   differs between a prompt and a script;
/// - `OLDPWD`: the directory before the last `cd`, exported by bash, zsh,
///   ksh and dash.
///
/// `PWD` is kept: a shell and programs that print the logical working
/// directory (`pwd -L`, `make`'s `CURDIR` through the shell) take it from
/// there when it names the working directory; its value is compared with
/// the workspace's path replaced by a placeholder, so it stays the same
/// from one checkout to another, and changes only when the tool is started
/// from another directory.
pub const SHELL_BOOKKEEPING: &[&str] = &["_", "SHLVL", "OLDPWD"];

/// Which environment variables are not dependencies: the configured
/// patterns (read by name or walked), the shell's bookkeeping (walked
/// only), and the names the configuration keeps (`!NAME`), which win.
#[derive(Clone, Debug, Default)]
pub struct EnvIgnore {
    ignored: Option<globset::GlobSet>,
    kept: Option<globset::GlobSet>,
}

impl EnvIgnore {
    /// The rules of these patterns (`None`: none of that kind).
    pub fn new(ignored: Option<globset::GlobSet>, kept: Option<globset::GlobSet>) -> EnvIgnore {
        EnvIgnore { ignored, kept }
    }

    fn matches(set: &Option<globset::GlobSet>, name: &str) -> bool {
        set.as_ref().is_some_and(|set| set.is_match(name))
    }

    /// Whether reading `name` (by name) is not a dependency.
    pub fn ignores_read(&self, name: &[u8]) -> bool {
        let Ok(name) = std::str::from_utf8(name) else {
            return false;
        };
        Self::matches(&self.ignored, name) && !Self::matches(&self.kept, name)
    }

    /// Whether `name` is left out of a walk of the whole environment.
    pub fn ignores_in_walk(&self, name: &[u8]) -> bool {
        let Ok(text) = std::str::from_utf8(name) else {
            return false;
        };
        (Self::matches(&self.ignored, text) || SHELL_BOOKKEEPING.contains(&text))
            && !Self::matches(&self.kept, text)
    }
}

/// A set of ignored directory trees, each with the reason shown to users,
/// and the configuration's patterns.
#[derive(Clone, Debug, Default)]
pub struct Ignore {
    trees: Vec<(PathBuf, String)>,
    /// Patterns relative to the workspace root, and the root.
    relative: Option<(PathBuf, Gitignore)>,
    /// Patterns matched against absolute paths.
    absolute: Option<Gitignore>,
    env: EnvIgnore,
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
    pub fn with_config(
        mut self,
        config: &Config,
        workspace: &Path,
    ) -> Result<Ignore, crate::options::errors::BadConfig> {
        let patterns = config.ignore.compile(workspace)?;
        self.relative = patterns.relative;
        self.absolute = patterns.absolute;
        self.env = EnvIgnore::new(patterns.env, patterns.env_kept);
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

    /// Which variables are not dependencies (`[ignore] env` and the
    /// defaults).
    pub fn env_rules(&self) -> &EnvIgnore {
        &self.env
    }

    /// Why reading the environment variable `name` is not a dependency.
    pub fn check_env(&self, name: &[u8]) -> Option<&str> {
        if crate::capture::environment::is_own(name) {
            return Some("cargo-ekstazi's own variable");
        }
        self.env.ignores_read(name).then_some(BY_CONFIG)
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

    #[test]
    fn the_shells_bookkeeping_is_left_out_of_walks_unless_kept() {
        let rules = |env: &str| {
            let config = Config::parse(&format!("[ignore]\nenv = [{env}]\n")).unwrap();
            Ignore::defaults()
                .with_config(&config, Path::new("/ws"))
                .unwrap()
                .env_rules()
                .clone()
        };
        let defaults = rules("");
        for name in ["_", "SHLVL", "OLDPWD"] {
            assert!(defaults.ignores_in_walk(name.as_bytes()), "{name}");
            assert!(
                !defaults.ignores_read(name.as_bytes()),
                "{name} read by name"
            );
        }
        for name in ["PWD", "PATH", "MODE", "SHLVL2"] {
            assert!(!defaults.ignores_in_walk(name.as_bytes()), "{name}");
        }
        let configured = rules(r#""CI_*", "!SHLVL", "!CI_MODE""#);
        assert!(!configured.ignores_in_walk(b"SHLVL"), "kept");
        assert!(configured.ignores_in_walk(b"_"), "still a default");
        assert!(configured.ignores_in_walk(b"CI_JOB"));
        assert!(configured.ignores_read(b"CI_JOB"));
        assert!(!configured.ignores_read(b"CI_MODE"), "a keep wins");
        assert!(!configured.ignores_in_walk(b"CI_MODE"));
        assert!(
            Config::parse("[ignore]\nenv = [\"!a[\"]\n")
                .and_then(|c| Ignore::defaults()
                    .with_config(&c, Path::new("/ws"))
                    .map(|_| ()))
                .is_err(),
            "a bad kept pattern is an error"
        );
    }
}
