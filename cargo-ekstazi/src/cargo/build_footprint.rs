//! What a `cargo test --no-run` read and made, gathered from its messages
//! and the files it left: every unit's dep-info (the sources rustc read,
//! and the variables it read at compile time), every build script's
//! `rerun-if-changed` and `rerun-if-env-changed`, the manifests, the
//! lockfile and the configuration cargo looks up along the directories;
//! and the digest of how the build was asked for (the command, its
//! variables, the toolchain, the workspace's targets, this executable).
//! `ekstazi_core::storage::build_stamp` keeps them and judges whether they
//! still hold.
//!
//! Where cargo would decide on more than these files say, nothing is
//! stamped, and cargo runs every time as before: a unit without dep-info,
//! and a build script of a package outside the cargo home that names no
//! file (cargo then reruns it when any file of its package changes).

use crate::cargo::workspace::Workspace;
use cargo_metadata::{Artifact, BuildScript, PackageId};
use ekstazi_core::capture::depinfo;
use ekstazi_core::files::identity::Identity;
use ekstazi_core::model::dep::Hash;
use ekstazi_core::storage::build_stamp::Inputs;
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory a build script watches with more entries than this is not
/// stamped: checking it would cost what cargo's own check costs.
const MAX_WATCHED_ENTRIES: usize = 20_000;

/// What the build's messages said about its inputs, gathered as they come.
#[derive(Default)]
pub struct Gathered {
    dep_info: BTreeSet<PathBuf>,
    manifests: BTreeSet<PathBuf>,
    package_dirs: HashMap<PackageId, PathBuf>,
    /// Per build script run: its package, and the file cargo keeps its
    /// output in.
    scripts: Vec<(PackageId, PathBuf)>,
    /// Why the build cannot be stamped, once known.
    unstampable: Option<String>,
}

impl Gathered {
    pub fn artifact(&mut self, artifact: &Artifact) {
        self.manifests
            .insert(artifact.manifest_path.clone().into_std_path_buf());
        if let Some(dir) = artifact.manifest_path.parent() {
            self.package_dirs
                .insert(artifact.package_id.clone(), dir.as_std_path().to_path_buf());
        }
        let found = artifact
            .executable
            .iter()
            .chain(&artifact.filenames)
            .flat_map(|f| {
                depinfo::path_of_artifact(f.as_std_path())
                    .into_iter()
                    .chain(script_dep_info(f.as_std_path()))
                    .chain(uplifted_dep_info(f.as_std_path()))
            })
            .find(|d| d.is_file());
        match found {
            Some(dep_info) => {
                self.dep_info.insert(dep_info);
            }
            None => {
                self.unstampable
                    .get_or_insert_with(|| format!("no dep-info for {}", artifact.target.name));
            }
        }
    }

    pub fn build_script(&mut self, script: &BuildScript) {
        if let Some(run_dir) = script.out_dir.parent() {
            self.scripts.push((
                script.package_id.clone(),
                run_dir.join("output").into_std_path_buf(),
            ));
        }
    }

    /// Every file and variable the build read, and what it made (`made`:
    /// the test binaries and the programs they are given), or why the
    /// build cannot be stamped.
    pub fn inputs(self, ws: &Workspace, made: Vec<PathBuf>) -> Result<Inputs, String> {
        if let Some(why) = self.unstampable {
            return Err(why);
        }
        let mut sources: BTreeSet<PathBuf> = self.manifests;
        let mut env: BTreeSet<OsString> = BTreeSet::new();
        for file in &self.dep_info {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let info = depinfo::parse(&text, &ws.root);
            sources.extend(info.sources);
            env.extend(info.env.into_iter().map(|(name, _)| OsString::from(name)));
        }
        let mut outputs: Vec<PathBuf> = self.dep_info.into_iter().collect();
        for (package, output) in &self.scripts {
            let dir = self
                .package_dirs
                .get(package)
                .ok_or_else(|| format!("no package directory for {}", package.repr))?;
            let text = std::fs::read_to_string(output)
                .map_err(|e| format!("cannot read {}: {e}", output.display()))?;
            let rules = ScriptRules::parse(&text);
            let local = ws
                .cargo_home
                .as_deref()
                .is_none_or(|home| !dir.starts_with(home));
            if rules.files.is_empty() && local {
                return Err(format!(
                    "the build script of {} names no file, so cargo watches its whole package",
                    package.repr
                ));
            }
            for watched in rules.files {
                watch(&dir.join(watched), &mut sources)?;
            }
            env.extend(rules.env);
            outputs.push(output.clone());
        }
        outputs.extend(made);
        Ok(Inputs {
            sources: sources.into_iter().collect(),
            probes: probes(ws),
            outputs,
            outputs_root: ws.target_dir.clone(),
            env: env.into_iter().collect(),
        })
    }
}

/// A build script's dep-info: cargo reports the script by the name it
/// copies it to (`build-script-build`), beside rustc's own output, which
/// keeps the unit's hash (`build_script_build-<hash>` and its `.d`).
fn script_dep_info(artifact: &Path) -> Option<PathBuf> {
    if artifact.file_name()? != "build-script-build" {
        return None;
    }
    let dir = artifact.parent()?;
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| {
            path.extension().is_some_and(|e| e == "d")
                && path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("build_script_build-"))
        })
}

/// An uplifted binary's dep-info: cargo reports a binary by the copy it
/// links into the profile's directory (`debug/foo`), a hard link to
/// rustc's output in `deps/` (`debug/deps/foo-<hash>`), whose `.d` is
/// beside it.
fn uplifted_dep_info(artifact: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(artifact).ok()?;
    let prefix = format!("{}-", artifact.file_name()?.to_str()?);
    let deps = artifact.parent()?.join("deps");
    std::fs::read_dir(deps)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix) && !n.ends_with(".d"))
        })
        .find(|entry| {
            entry
                .metadata()
                .is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev())
        })
        .and_then(|entry| depinfo::path_of_artifact(&entry.path()))
}

/// What a build script's output asks cargo to watch.
#[derive(Debug, Default, PartialEq)]
struct ScriptRules {
    files: Vec<PathBuf>,
    env: Vec<OsString>,
}

impl ScriptRules {
    fn parse(output: &str) -> ScriptRules {
        let mut rules = ScriptRules::default();
        for line in output.lines() {
            let Some(rule) = line
                .strip_prefix("cargo::")
                .or_else(|| line.strip_prefix("cargo:"))
            else {
                continue;
            };
            if let Some(path) = rule.strip_prefix("rerun-if-changed=") {
                rules.files.push(PathBuf::from(path));
            } else if let Some(name) = rule.strip_prefix("rerun-if-env-changed=") {
                rules.env.push(OsString::from(name));
            }
        }
        rules
    }
}

/// A watched path: a file, or a directory and everything below it (cargo
/// compares a watched directory's newest entry).
fn watch(path: &Path, sources: &mut BTreeSet<PathBuf>) -> Result<(), String> {
    if !path.is_dir() {
        sources.insert(path.to_path_buf());
        return Ok(());
    }
    for (n, entry) in walkdir::WalkDir::new(path).into_iter().enumerate() {
        if n > MAX_WATCHED_ENTRIES {
            return Err(format!(
                "a build script watches {}, with more than {MAX_WATCHED_ENTRIES} entries",
                path.display()
            ));
        }
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", path.display()))?;
        sources.insert(entry.into_path());
    }
    Ok(())
}

/// The files cargo and rustup look up along the directories, present or
/// not: the workspace's manifest and lockfile, configuration, toolchain
/// files.
fn probes(ws: &Workspace) -> Vec<PathBuf> {
    let mut probes = vec![ws.root.join("Cargo.toml"), ws.root.join("Cargo.lock")];
    let cwd = std::env::current_dir().ok();
    let dirs = cwd
        .iter()
        .flat_map(|d| d.ancestors())
        .chain(ws.root.ancestors())
        .collect::<BTreeSet<_>>();
    for dir in dirs {
        for name in [
            ".cargo/config",
            ".cargo/config.toml",
            "rust-toolchain",
            "rust-toolchain.toml",
        ] {
            probes.push(dir.join(name));
        }
    }
    if let Some(home) = &ws.cargo_home {
        probes.push(home.join("config"));
        probes.push(home.join("config.toml"));
    }
    probes
}

/// The digest of how a build is asked for: the command (program,
/// arguments, the variables it sets, its directory), the variables cargo
/// and rustc read from ours, the toolchain, the workspace's targets as
/// `cargo metadata` found them (a new test file is a new target), and this
/// executable, which is the build's rustc wrapper.
pub fn request(ws: &Workspace, command: &Command) -> Hash {
    let mut hasher = blake3::Hasher::new();
    let mut put = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    put(b"cargo-ekstazi build request 1");
    put(env!("CARGO_PKG_VERSION").as_bytes());
    let me = std::env::current_exe().ok();
    put(format!("{:?}", me.as_deref().and_then(|p| Identity::of(p, true))).as_bytes());
    put(ws.rustc_version.as_bytes());
    put(ws.root.as_os_str().as_bytes());
    put(ws.target_dir.as_os_str().as_bytes());
    put(command.get_program().as_bytes());
    for arg in command
        .get_args()
        .filter(|arg| !only_speaks(arg.as_bytes()))
    {
        put(arg.as_bytes());
    }
    let mut set: Vec<_> = command.get_envs().collect();
    set.sort();
    for (name, value) in set {
        put(name.as_bytes());
        put(value.map_or(b"\0unset".as_slice(), |v| v.as_bytes()));
    }
    put(format!("{:?}", command.get_current_dir()).as_bytes());
    let mut read: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, _)| cargo_reads(name.as_bytes()))
        .collect();
    read.sort();
    for (name, value) in read {
        put(name.as_bytes());
        put(value.as_bytes());
    }
    let mut packages: Vec<_> = ws.packages.values().collect();
    packages.sort_by(|a, b| a.id.cmp(&b.id));
    for package in packages {
        put(package.id.repr.as_bytes());
        put(serde_json::to_string(&package.targets)
            .unwrap_or_default()
            .as_bytes());
    }
    *hasher.finalize().as_bytes()
}

/// Arguments that change how cargo speaks, not what it builds: `-v` of a
/// run is passed on, and would otherwise start cargo for every verbose run.
fn only_speaks(arg: &[u8]) -> bool {
    matches!(arg, b"--verbose" | b"-v" | b"-vv" | b"--quiet" | b"-q") || arg.starts_with(b"--color")
}

/// Variables cargo, rustc, rustup and the compilers build scripts start
/// read (those a build script reads otherwise it names, and the stamp
/// keeps them).
fn cargo_reads(name: &[u8]) -> bool {
    name.starts_with(b"CARGO")
        || name.starts_with(b"RUST")
        || name.starts_with(b"__CARGO")
        || name == b"PATH"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripts_rules_are_read_in_both_spellings() {
        let rules = ScriptRules::parse(
            "cargo:rerun-if-changed=build.rs\n\
             cargo::rerun-if-changed=src/data\n\
             cargo:rustc-cfg=x\n\
             cargo::rerun-if-env-changed=CC\n\
             cargo:rerun-if-env-changed=TARGET_CC\n",
        );
        assert_eq!(
            rules,
            ScriptRules {
                files: vec!["build.rs".into(), "src/data".into()],
                env: vec!["CC".into(), "TARGET_CC".into()],
            }
        );
    }

    #[test]
    fn a_watched_directory_is_every_entry_below_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/deep")).unwrap();
        std::fs::write(dir.path().join("data/deep/a"), "").unwrap();
        let mut sources = BTreeSet::new();
        watch(&dir.path().join("data"), &mut sources).unwrap();
        watch(&dir.path().join("build.rs"), &mut sources).unwrap();
        let names: Vec<_> = sources
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            names,
            ["build.rs", "data", "data/deep", "data/deep/a"]
                .map(PathBuf::from)
                .to_vec()
        );
    }
}
