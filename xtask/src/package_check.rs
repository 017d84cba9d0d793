//! `cargo xtask package-check`: the published packages build and work on
//! their own, as they will for a user who installs them from a registry.
//!
//! 1. `cargo package` of the published crates, together: cargo verifies
//!    each by building it from its `.crate` file, with its siblings served
//!    from a temporary local registry (nothing is on crates.io yet).
//! 2. Each `.crate` file is unpacked into a temporary directory outside the
//!    checkout and checked for the files every package must carry (the
//!    licences, the readme, and what the shim is built with).
//! 3. `cargo install --locked --path` of the unpacked `cargo-ekstazi`, its
//!    `ekstazi-*` dependencies patched to the unpacked packages: nothing of
//!    the checkout is reachable, so a file a package misses fails here.
//! 4. The installed tool runs a copy of `examples/demo` twice: the first
//!    run runs every test, the second skips them all.
//!
//! The install is a debug build in cargo's verification target directory
//! (`target/package`): what is checked is what the packages contain, and
//! the third-party crates the verification compiled are reused. The
//! `ekstazi-*` crates and the shim are always rebuilt, from their new
//! temporary paths.

use crate::common::files::{copy_tree, workspace_root};
use anyhow::{Context, Result, bail, ensure};
use serde::Deserialize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The published packages, each after those it depends on.
const PACKAGES: [&str; 4] = [
    "ekstazi-wire",
    "ekstazi-core",
    "ekstazi-runtime",
    "cargo-ekstazi",
];

/// What every package carries besides its sources (which the verification
/// and the install check by building them).
const EVERY_PACKAGE: [&str; 5] = [
    "Cargo.toml",
    "Cargo.lock",
    "README.md",
    "LICENSE-MIT",
    "LICENSE-APACHE",
];

/// What one package needs beyond `EVERY_PACKAGE`.
fn own_files(package: &str) -> &'static [&'static str] {
    match package {
        "ekstazi-runtime" => &["build.rs", "shim-profile.toml"],
        "ekstazi-wire" | "cargo-ekstazi" => &["build.rs"],
        _ => &[],
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Package uncommitted changes too
    #[arg(long)]
    pub allow_dirty: bool,
}

pub fn check(args: &Args) -> Result<()> {
    let start = Instant::now();
    let root = workspace_root();
    let version = workspace_version(&root)?;
    let package_dir = root.join("target").join("package");

    forget_unpacked_packages(&version)?;
    let step = Instant::now();
    let mut package = cargo();
    package.arg("package").current_dir(&root);
    for name in PACKAGES {
        package.args(["-p", name]);
    }
    if args.allow_dirty {
        package.arg("--allow-dirty");
    }
    package.env_remove("CARGO_TARGET_DIR");
    run(&mut package).context("packaging (and verifying) the crates failed")?;
    eprintln!(
        "package-check: packaged and verified {} crates in {:.0?}",
        PACKAGES.len(),
        step.elapsed()
    );

    let tmp = tempfile::Builder::new()
        .prefix("ekstazi-package-check-")
        .tempdir()?;
    let result = from_packages(&package_dir, &version, tmp.path());
    if result.is_err() {
        let kept = tmp.keep();
        eprintln!(
            "package-check: failed; its files are left in {}",
            kept.display()
        );
    }
    result?;
    eprintln!("package-check: passed in {:.0?}", start.elapsed());
    Ok(())
}

/// Removes the copies of this workspace's packages that an earlier check
/// left unpacked in cargo's home. `cargo package` verifies each crate
/// against the others through a temporary registry in the target
/// directory, whose packages cargo unpacks into
/// `$CARGO_HOME/registry/src/<registry id>/<name>-<version>/`, the id
/// derived from the registry's path; cargo does not unpack a name and
/// version it finds there again. So a second check of one checkout, its
/// sources changed but not its version, verified the crates against the
/// first check's sources (`cannot find function` in a dependent crate).
/// Only local registries' directories (whose names start with `-`, having
/// no host) are looked in; cargo unpacks the packages again.
fn forget_unpacked_packages(version: &str) -> Result<()> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(home) => PathBuf::from(home),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".cargo"),
            None => return Ok(()),
        },
    };
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().as_encoded_bytes().starts_with(b"-") {
            continue;
        }
        for name in PACKAGES {
            let unpacked = registry.path().join(format!("{name}-{version}"));
            if unpacked.is_dir() {
                std::fs::remove_dir_all(&unpacked)
                    .with_context(|| format!("cannot remove {}", unpacked.display()))?;
            }
        }
    }
    Ok(())
}

/// Steps 2 to 4, in `tmp`.
fn from_packages(package_dir: &Path, version: &str, tmp: &Path) -> Result<()> {
    let unpacked = tmp.join("packages");
    std::fs::create_dir_all(&unpacked)?;
    for name in PACKAGES {
        let dir = unpack(package_dir, name, version, &unpacked)?;
        let missing: Vec<&str> = EVERY_PACKAGE
            .iter()
            .chain(own_files(name))
            .copied()
            .filter(|file| !dir.join(file).is_file())
            .collect();
        ensure!(
            missing.is_empty(),
            "the package {name} misses {} (is it in the crate's directory and not excluded?)",
            missing.join(", ")
        );
    }

    let step = Instant::now();
    let install_root = tmp.join("root");
    let mut install = cargo();
    install
        .args(["install", "--locked", "--debug", "--path"])
        .arg(unpacked.join(format!("cargo-ekstazi-{version}")))
        .arg("--root")
        .arg(&install_root)
        .arg("--target-dir")
        .arg(package_dir)
        // Outside the checkout, so that none of its configuration applies.
        .current_dir(tmp)
        .env_remove("CARGO_TARGET_DIR");
    for name in PACKAGES.iter().filter(|&&name| name != "cargo-ekstazi") {
        let dir = unpacked.join(format!("{name}-{version}"));
        install.arg("--config").arg(format!(
            "patch.crates-io.{name}.path={}",
            toml_string(&dir)?
        ));
    }
    let log =
        run_logged(&mut install).context("installing cargo-ekstazi from its packages failed")?;
    // An unused patch would mean a dependency came from somewhere else.
    if let Some(line) = log.iter().find(|line| line.contains("was not used")) {
        bail!("the install did not take every package from the packages: {line}");
    }
    let ekstazi = install_root.join("bin").join("cargo-ekstazi");
    ensure!(ekstazi.is_file(), "{} was not installed", ekstazi.display());
    eprintln!(
        "package-check: installed cargo-ekstazi from the packages in {:.0?}",
        step.elapsed()
    );

    let demo = tmp.join("demo");
    std::fs::create_dir_all(&demo)?;
    copy_tree(&workspace_root().join("examples").join("demo"), &demo)?;
    let first = demo_run(&ekstazi, &demo, &tmp.join("first.json"))?;
    ensure!(first.tests > 0, "the demo's first run found no tests");
    ensure!(
        first.selected == first.tests && first.passed == first.tests,
        "the demo's first run should run and pass all {} tests: {} ran, {} passed",
        first.tests,
        first.selected,
        first.passed
    );
    let second = demo_run(&ekstazi, &demo, &tmp.join("second.json"))?;
    ensure!(
        second.tests == first.tests && second.selected == 0,
        "the demo's second run should skip all {} tests: it saw {} and ran {}",
        first.tests,
        second.tests,
        second.selected
    );
    eprintln!(
        "package-check: the installed tool ran the demo's {} tests, then skipped them all",
        first.tests
    );
    Ok(())
}

/// Unpacks `<name>-<version>.crate` into `into`; the package's directory.
fn unpack(package_dir: &Path, name: &str, version: &str, into: &Path) -> Result<PathBuf> {
    let file = package_dir.join(format!("{name}-{version}.crate"));
    ensure!(file.is_file(), "cargo package left no {}", file.display());
    // A `.crate` is a gzipped tarball; `tar` is on every machine this runs
    // on, and spares xtask a decompressor and an archive reader.
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&file)
        .arg("-C")
        .arg(into))
    .with_context(|| format!("cannot unpack {}", file.display()))?;
    let dir = into.join(format!("{name}-{version}"));
    ensure!(
        dir.is_dir(),
        "{} holds no {}",
        file.display(),
        dir.display()
    );
    Ok(dir)
}

/// What `--report-json` says about one run of the demo.
struct Tally {
    tests: usize,
    selected: usize,
    passed: usize,
}

#[derive(Deserialize)]
struct Report {
    tests: Vec<ReportTest>,
}

#[derive(Deserialize)]
struct ReportTest {
    selected: bool,
    outcome: Option<String>,
}

/// `cargo ekstazi test` in `demo` with the installed binary, run directly
/// with the arguments cargo gives a subcommand: `cargo ekstazi` could run
/// another `cargo-ekstazi`, one in `~/.cargo/bin` or earlier on the path.
fn demo_run(ekstazi: &Path, demo: &Path, report: &Path) -> Result<Tally> {
    let mut command = Command::new(ekstazi);
    command
        .args(["ekstazi", "test", "--report-json"])
        .arg(report)
        .current_dir(demo)
        .env("CARGO", env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("EKSTAZI_") || text == "CARGO_TARGET_DIR" {
            command.env_remove(&name);
        }
    }
    run(&mut command).context("cargo ekstazi test failed on the demo")?;
    let text = std::fs::read_to_string(report)
        .with_context(|| format!("cannot read {}", report.display()))?;
    let report: Report = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a test report", report.display()))?;
    Ok(Tally {
        tests: report.tests.len(),
        selected: report.tests.iter().filter(|t| t.selected).count(),
        passed: report
            .tests
            .iter()
            .filter(|t| t.outcome.as_deref() == Some("passed"))
            .count(),
    })
}

fn workspace_version(root: &Path) -> Result<String> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .manifest_path(root.join("Cargo.toml"))
        .no_deps()
        .exec()?;
    let versions: Vec<String> = PACKAGES
        .iter()
        .map(|name| {
            metadata
                .packages
                .iter()
                .find(|p| p.name.as_str() == *name)
                .map(|p| p.version.to_string())
                .with_context(|| format!("the workspace has no package {name}"))
        })
        .collect::<Result<_>>()?;
    ensure!(
        versions.windows(2).all(|w| w[0] == w[1]),
        "the published packages should share one version: {versions:?}"
    );
    Ok(versions[0].clone())
}

fn cargo() -> Command {
    Command::new(env!("CARGO"))
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    ensure!(status.success(), "{command:?} failed: {status}");
    Ok(())
}

/// Runs `command`, passing its standard error through and keeping its lines.
fn run_logged(command: &mut Command) -> Result<Vec<String>> {
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {command:?}"))?;
    let mut lines = Vec::new();
    for line in BufReader::new(child.stderr.take().expect("piped")).lines() {
        let line = line?;
        eprintln!("{line}");
        lines.push(line);
    }
    let status = child.wait()?;
    ensure!(status.success(), "{command:?} failed: {status}");
    Ok(lines)
}

/// `path` as a TOML string, for `--config`.
fn toml_string(path: &Path) -> Result<String> {
    let text = path
        .to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))?;
    Ok(toml_basic_string(text))
}

fn toml_basic_string(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published crates are the workspace's members but xtask, and
    /// every one of them is checked.
    #[test]
    fn every_published_crate_is_checked() {
        let metadata = cargo_metadata::MetadataCommand::new()
            .manifest_path(workspace_root().join("Cargo.toml"))
            .no_deps()
            .exec()
            .unwrap();
        let mut published: Vec<&str> = metadata
            .packages
            .iter()
            .filter(|p| p.publish.as_ref().is_none_or(|to| !to.is_empty()))
            .map(|p| p.name.as_str())
            .collect();
        published.sort_unstable();
        let mut checked = PACKAGES.to_vec();
        checked.sort_unstable();
        assert_eq!(published, checked);
    }

    #[test]
    fn paths_are_quoted_for_toml() {
        assert_eq!(toml_basic_string("/tmp/a b"), "\"/tmp/a b\"");
        assert_eq!(toml_basic_string("/tmp/\"x\\"), "\"/tmp/\\\"x\\\\\"");
        assert_eq!(toml_basic_string("a\nb"), "\"a\\u000Ab\"");
    }
}
