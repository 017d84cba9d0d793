//! The workspace being tested: where it is, where cargo builds, which
//! packages and targets it has, and which toolchain builds it.

use crate::cli::CargoOpts;
use anyhow::{Context, Result, bail};
use cargo_metadata::{Metadata, MetadataCommand, Package, PackageId, TargetKind};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Facts about the workspace and toolchain that every stage reads.
pub struct Workspace {
    pub root: PathBuf,
    pub target_dir: PathBuf,
    /// The cargo that invoked us (`$CARGO`), so tests build with the same toolchain.
    pub cargo: OsString,
    pub cargo_home: Option<PathBuf>,
    /// `rustc -vV`, verbatim.
    pub rustc_version: String,
    pub host: String,
    pub sysroot: PathBuf,
    pub packages: HashMap<PackageId, Package>,
    /// The packages `cargo test` tests without `-p` or `--workspace`.
    pub default_members: Vec<PackageId>,
    /// `(package name, kind, target name)` of every target with `harness = false`.
    custom_harness: HashSet<(String, String, String)>,
}

impl Workspace {
    pub fn load(opts: &CargoOpts) -> Result<Workspace> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = MetadataCommand::new();
        command.cargo_path(&cargo).no_deps();
        if let Some(path) = &opts.manifest_path {
            command.manifest_path(path);
        }
        let mut other = Vec::new();
        if opts.frozen {
            other.push("--frozen".to_owned());
        }
        if opts.offline {
            other.push("--offline".to_owned());
        }
        command.other_options(other);
        let metadata: Metadata = command
            .exec()
            .context("cannot read the workspace with `cargo metadata`")?;

        let root = metadata.workspace_root.clone().into_std_path_buf();
        let target_dir = match &opts.target_dir {
            Some(dir) => std::path::absolute(dir)?,
            None => metadata.target_directory.clone().into_std_path_buf(),
        };
        let (rustc_version, host, sysroot) = toolchain(&root)?;
        let mut custom_harness = HashSet::new();
        let mut packages = HashMap::new();
        for package in metadata.workspace_packages() {
            custom_harness.extend(custom_harness_targets(package)?);
            packages.insert(package.id.clone(), package.clone());
        }
        let default_members = if metadata.workspace_default_members.is_available() {
            metadata.workspace_default_members.to_vec()
        } else {
            metadata.workspace_members.clone()
        };
        Ok(Workspace {
            default_members,
            root,
            target_dir,
            cargo,
            cargo_home: cargo_home(),
            rustc_version,
            host,
            sysroot,
            packages,
            custom_harness,
        })
    }

    /// Whether a target runs without libtest (`harness = false`).
    pub fn has_custom_harness(&self, package: &str, kind: &str, name: &str) -> bool {
        self.custom_harness
            .contains(&(package.to_owned(), kind.to_owned(), name.to_owned()))
    }

    /// The binary key of every target that can produce a test binary (and
    /// of every library's doctests), so that records of targets that no
    /// longer exist can be removed.
    pub fn all_binary_keys(&self) -> Vec<String> {
        self.packages
            .values()
            .flat_map(|p| {
                p.targets.iter().flat_map(move |t| {
                    let doc = t.doctest.then(|| doctest_key(&p.name, &t.name));
                    std::iter::once(binary_key(&p.name, &t.kind, &t.name)).chain(doc)
                })
            })
            .collect()
    }

    /// The workspace packages `cargo test` with these options tests, by
    /// cargo's rules: `-p` specs (names or globs, a version after `@`
    /// ignored), else every member with `--workspace` (less `--exclude`),
    /// else the default members.
    pub fn selected_packages(&self, opts: &CargoOpts) -> Vec<&Package> {
        let matcher = |specs: &[String]| {
            let globs: Vec<globset::GlobMatcher> = specs
                .iter()
                .filter_map(|spec| {
                    let name = spec.rsplit(['/', '#']).next().unwrap_or(spec);
                    let name = name.split('@').next().unwrap_or(name);
                    globset::Glob::new(name).ok().map(|g| g.compile_matcher())
                })
                .collect();
            move |package: &Package| globs.iter().any(|g| g.is_match(package.name.as_str()))
        };
        let mut packages: Vec<&Package> = if !opts.package.is_empty() {
            let wanted = matcher(&opts.package);
            self.packages.values().filter(|p| wanted(p)).collect()
        } else if opts.workspace || opts.all {
            let excluded = matcher(&opts.exclude);
            self.packages.values().filter(|p| !excluded(p)).collect()
        } else {
            self.default_members
                .iter()
                .filter_map(|id| self.packages.get(id))
                .collect()
        };
        packages.sort_by(|a, b| a.name.cmp(&b.name));
        packages
    }

    /// The workspace packages `package` depends on through `path`
    /// dependencies of any kind (doctests link dev-dependencies too),
    /// transitively, itself included.
    pub fn path_closure<'a>(&'a self, package: &'a Package) -> Vec<&'a Package> {
        let by_dir: HashMap<&Path, &Package> = self
            .packages
            .values()
            .filter_map(|p| Some((p.manifest_path.parent()?.as_std_path(), p)))
            .collect();
        let mut seen: Vec<&Package> = vec![package];
        let mut next = 0;
        while let Some(current) = seen.get(next).copied() {
            next += 1;
            for dep in &current.dependencies {
                if let Some(found) = dep.path.as_ref().and_then(|d| by_dir.get(d.as_std_path()))
                    && !seen.iter().any(|s| s.id == found.id)
                {
                    seen.push(found);
                }
            }
        }
        seen
    }
}

/// The key of a library's doctests: `doc` is no cargo target kind, so it
/// names no binary.
pub fn doctest_key(package: &str, lib: &str) -> String {
    ekstazi_core::model::key::binary_key(package, "doc", lib)
}

/// The stable name of a test binary (see [`ekstazi_core::model::key::binary_key`]).
pub fn binary_key(package: &str, kinds: &[TargetKind], target: &str) -> String {
    ekstazi_core::model::key::binary_key(package, primary_kind(kinds), target)
}

/// The one kind that names a target: every library crate type is `lib`.
pub fn primary_kind(kinds: &[TargetKind]) -> &'static str {
    let kind = kinds.first();
    match kind {
        Some(TargetKind::Bin) => "bin",
        Some(TargetKind::Test) => "test",
        Some(TargetKind::Bench) => "bench",
        Some(TargetKind::Example) => "example",
        Some(TargetKind::CustomBuild) => "build-script",
        _ => "lib",
    }
}

fn toolchain(root: &Path) -> Result<(String, String, PathBuf)> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let run = |args: &[&str]| -> Result<String> {
        let output = Command::new(&rustc)
            .args(args)
            .current_dir(root)
            .output()
            .with_context(|| format!("cannot run `rustc {}`", args.join(" ")))?;
        if !output.status.success() {
            bail!(
                "`rustc {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    // The two calls at once: each is a process start of the toolchain's
    // proxy and rustc, paid by every run before the build can begin.
    let (version, sysroot) = std::thread::scope(|scope| {
        let sysroot = scope.spawn(|| run(&["--print", "sysroot"]));
        let version = run(&["-vV"]);
        (
            version,
            sysroot.join().expect("`rustc --print sysroot` thread"),
        )
    });
    let version = version?;
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .context("`rustc -vV` names no host")?
        .to_owned();
    Ok((version, host, PathBuf::from(sysroot?)))
}

fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::home_dir().map(|home| home.join(".cargo")))
        .and_then(|p| std::path::absolute(p).ok())
}

/// Targets declared with `harness = false`, which `cargo metadata` does not
/// report, read from the manifest itself.
fn custom_harness_targets(package: &Package) -> Result<Vec<(String, String, String)>> {
    let text = std::fs::read_to_string(&package.manifest_path)
        .with_context(|| format!("cannot read {}", package.manifest_path))?;
    let manifest: toml::Table = text
        .parse()
        .with_context(|| format!("cannot parse {}", package.manifest_path))?;
    let no_harness =
        |table: &toml::Table| table.get("harness").and_then(toml::Value::as_bool) == Some(false);
    let mut found = Vec::new();
    if let Some(lib) = manifest.get("lib").and_then(toml::Value::as_table)
        && no_harness(lib)
    {
        let name = package
            .targets
            .iter()
            .find(|t| primary_kind(&t.kind) == "lib")
            .map(|t| t.name.clone())
            .unwrap_or_default();
        found.push((package.name.to_string(), "lib".to_owned(), name));
    }
    for kind in ["bin", "test", "bench", "example"] {
        let tables = manifest
            .get(kind)
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten();
        for table in tables.filter_map(toml::Value::as_table) {
            if let (true, Some(name)) = (
                no_harness(table),
                table.get("name").and_then(toml::Value::as_str),
            ) {
                found.push((package.name.to_string(), kind.to_owned(), name.to_owned()));
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_crate_type_is_the_library() {
        assert_eq!(binary_key("demo", &[TargetKind::ProcMacro], "demo"), "demo");
        assert_eq!(binary_key("demo", &[TargetKind::Test], "it"), "demo::it");
    }
}
