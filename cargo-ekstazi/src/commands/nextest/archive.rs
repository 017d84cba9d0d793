//! Build once, run on many machines: `cargo ekstazi nextest archive`, and
//! the checks of `cargo ekstazi nextest run --archive-file`.
//!
//! `archive` builds the instrumented test binaries as `run` would, writes
//! the build's [`BuildManifest`](crate::cargo::archived::BuildManifest) into the
//! instrumented target directory, and has `cargo nextest archive` pack that
//! build, the manifest included (nextest's `archive.include`, set in a tool
//! configuration file). It selects nothing and records nothing.
//!
//! `run --archive-file` on each machine unpacks the archive where the
//! instrumented build goes ([`crate::cargo::archived::unpack`]), then
//! selects from that machine's state directory and that checkout exactly
//! as after a local build, and runs its share under nextest, which reuses
//! the unpacked build (see `super::Build::Archived`). The selection is made
//! on every machine, not once on the building one: every input it reads
//! (the binaries, the checkout, the restored state) is the same on each,
//! so each machine's `--partition` share is of the same list, and a
//! machine records from what it saw itself, with no plan to trust from
//! elsewhere.

use super::{args, check_nextest, exit_code, instrumentation, wait_for};
use crate::cargo::archived::{self, BuildManifest, MANIFEST};
use crate::cargo::instrument;
use crate::cli::{CargoOpts, NextestArgs};
use crate::pipeline;
use crate::session::options::Request;
use crate::style;
use anyhow::{Context, Result, bail};
use ekstazi_core::options::settings::Granularity;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// `cargo ekstazi nextest archive --archive-file PATH [cargo options] [-- nextest archive options]`.
pub fn run(args: &NextestArgs, cargo: &OsString) -> Result<ExitCode> {
    let Some(file) = &args.archive_file else {
        bail!("`cargo ekstazi nextest archive` needs `--archive-file PATH`: where to write it");
    };
    if args.workspace_remap.is_some() {
        bail!("`--workspace-remap` is for `cargo ekstazi nextest run --archive-file`");
    }
    if args.skipme {
        bail!("`--skipme` archives nothing of cargo-ekstazi's: use `cargo nextest archive`");
    }
    let user = archive_args(&args.nextest)?;
    check_nextest(cargo)?;
    let request = Request {
        cargo: args.cargo.clone(),
        layer: args.layer(),
        ..Request::default()
    };
    let session = pipeline::prepare(request)?;
    if session.options.granularity != Granularity::Function {
        bail!(
            "an archive is of the instrumented build of function granularity, and this \
             workspace is configured for {} granularity",
            session.options.granularity.as_str()
        );
    }
    let build = instrument::prepare_target_dir(&session.ws.target_dir, instrumentation(&session))?;
    let manifest = BuildManifest::of(
        &session.ws,
        &session.built,
        &build,
        &session.options.cargo,
        session.global.tool.clone(),
        session.global.rustflags.clone(),
    )?;
    manifest.write(&build)?;
    let private = tempfile::Builder::new()
        .prefix("ekstazi-archive")
        .tempdir()
        .context("cannot create a directory for nextest's configuration")?;
    let tool_config = private.path().join("nextest.toml");
    let extra = archived::extra_files(&session.built, &build);
    std::fs::write(&tool_config, include_files(&extra)?)
        .with_context(|| format!("cannot write {}", tool_config.display()))?;

    let mut command = Command::new(&session.ws.cargo);
    command
        .args(["nextest", "archive", "--archive-file"])
        .arg(file)
        .args(args::cargo_args(&session.options.cargo, true))
        .args(["--target", &session.ws.host])
        .arg("--target-dir")
        .arg(&build)
        .envs(instrument::build_env(instrumentation(&session)))
        .args(style::cargo_color_arg())
        .arg("--tool-config-file")
        .arg({
            let mut value = OsString::from("ekstazi:");
            value.push(&tool_config);
            value
        })
        .args(&user);
    let (status, _) = wait_for(command)?;
    if !status.success() {
        return Ok(exit_code(status));
    }
    if !archived::has_manifest(file)? {
        bail!(
            "the archive {} lacks cargo-ekstazi's {MANIFEST}: the repository's nextest \
             configuration sets `archive.include` for this profile, which replaces \
             cargo-ekstazi's; add `{{ path = \"{MANIFEST}\", relative-to = \"target\" }}` to it",
            file.display()
        );
    }
    writeln!(
        anstream::stdout(),
        "cargo-ekstazi: archived {} test binaries, with what selection needs, to {}; on each \
         machine: cargo ekstazi nextest run --archive-file {} --workspace-remap <checkout> \
         [--partition count:I/N]",
        manifest.binaries.len(),
        file.display(),
        file.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The tool configuration that puts `files` (relative to the target
/// directory) into the archive.
fn include_files(files: &[PathBuf]) -> Result<String> {
    let include: Vec<toml::Value> = files
        .iter()
        .map(|file| {
            let mut entry = toml::Table::new();
            entry.insert("path".into(), file.display().to_string().into());
            entry.insert("relative-to".into(), "target".into());
            toml::Value::Table(entry)
        })
        .collect();
    let mut archive = toml::Table::new();
    archive.insert("include".into(), include.into());
    let mut default = toml::Table::new();
    default.insert("archive".into(), archive.into());
    let mut profile = toml::Table::new();
    profile.insert("default".into(), default.into());
    let mut config = toml::Table::new();
    config.insert("profile".into(), profile.into());
    Ok(toml::to_string(&config)?)
}

/// The user's `cargo nextest archive` options, checked: what is built is
/// cargo-ekstazi's to say.
fn archive_args(words: &[String]) -> Result<Vec<String>> {
    for word in words {
        let (name, _) = args::split_option(word);
        if args::BUILD_OPTIONS.contains(&name) || matches!(name, "--target" | "--config" | "-Z") {
            bail!(
                "`{name}` changes what is built: give cargo's options before `--`, to cargo \
                 ekstazi (`cargo ekstazi nextest archive --archive-file F {name} ...`)"
            );
        }
    }
    Ok(words.to_vec())
}

/// Checks a `run`'s archive options, and points cargo at the remapped
/// workspace.
pub fn check_run_args(args: &mut NextestArgs) -> Result<()> {
    let Some(file) = &args.archive_file else {
        if args.workspace_remap.is_some() {
            bail!("`--workspace-remap` goes with `--archive-file`");
        }
        return Ok(());
    };
    if !file.is_file() {
        bail!(
            "no archive at {}: make one with `cargo ekstazi nextest archive --archive-file {}`",
            file.display(),
            file.display()
        );
    }
    let given = &args.cargo;
    let build_only = CargoOpts {
        manifest_path: None,
        target_dir: None,
        locked: false,
        offline: false,
        frozen: false,
        quiet: false,
        verbose: 0,
        ..given.clone()
    };
    if build_only.to_cargo_args(false) != CargoOpts::default().to_cargo_args(false) {
        bail!(
            "`run --archive-file` runs the build the archive holds: give cargo's package, target, \
             feature and profile options to `cargo ekstazi nextest archive`"
        );
    }
    if let Some(dir) = &args.workspace_remap {
        if given.manifest_path.is_some() {
            bail!("give `--workspace-remap` or `--manifest-path`, not both");
        }
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            bail!(
                "--workspace-remap {}: no Cargo.toml there; give the checkout's root",
                dir.display()
            );
        }
        args.cargo.manifest_path = Some(manifest);
    }
    Ok(())
}

/// The workspace an archived run is in: `--workspace-remap`, else the
/// current directory.
pub fn workspace(args: &NextestArgs) -> Result<PathBuf> {
    Ok(match &args.workspace_remap {
        Some(dir) => std::path::absolute(dir)?,
        None => std::env::current_dir()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_configuration_is_nextests() {
        let files = [
            PathBuf::from(MANIFEST),
            PathBuf::from("x/debug/deps/a \"b\".map"),
        ];
        let parsed: toml::Value = toml::from_str(&include_files(&files).unwrap()).unwrap();
        let include = &parsed["profile"]["default"]["archive"]["include"];
        assert_eq!(include[0]["path"].as_str(), Some(MANIFEST));
        assert_eq!(
            include[1]["path"].as_str(),
            Some("x/debug/deps/a \"b\".map")
        );
        assert_eq!(include[1]["relative-to"].as_str(), Some("target"));
    }

    #[test]
    fn build_options_of_an_archive_are_refused_after_the_separator() {
        for refused in [
            "--release",
            "-p",
            "--features=x",
            "--target",
            "--target-dir",
        ] {
            assert!(archive_args(&[refused.to_owned()]).is_err(), "{refused}");
        }
        assert!(archive_args(&["--zstd-level".to_owned(), "3".to_owned()]).is_ok());
    }
}
