//! Building the test binaries through cargo, as `cargo test --no-run` would,
//! and learning from cargo's messages where each binary is and what its
//! tests need at run time.

use crate::cli::CargoOpts;
use crate::instrument;
use crate::workspace::{Workspace, binary_key, primary_kind};
use anyhow::{Context, Result};
use cargo_metadata::{Message, PackageId};
use std::collections::HashMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One test binary cargo built.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// Stable across rebuilds: see [`binary_key`].
    pub key: String,
    pub path: PathBuf,
    pub package_id: PackageId,
    pub manifest_path: PathBuf,
    /// The package's build script output directory, if it has one.
    pub out_dir: Option<PathBuf>,
    /// `CARGO_BIN_EXE_<name>` for integration tests and benches.
    pub bin_exes: Vec<(String, PathBuf)>,
    /// Built with `harness = false`: the binary is one test.
    pub custom_harness: bool,
}

impl TestBinary {
    pub fn manifest_dir(&self) -> PathBuf {
        self.manifest_path
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default()
    }
}

/// What a build produced.
#[derive(Debug, Default)]
pub struct Built {
    pub binaries: Vec<TestBinary>,
    /// Native library directories inside the target directory that build
    /// scripts asked to link from, which cargo puts on the library path of
    /// tests.
    pub native_dirs: Vec<PathBuf>,
}

/// The build failed; cargo already printed why.
#[derive(Debug, thiserror::Error)]
#[error("could not compile the tests (cargo exited with {0})")]
pub struct BuildFailed(pub std::process::ExitStatus);

/// Runs `cargo test --no-run` with the user's cargo options; with `shim`,
/// the instrumented build of function granularity (see [`instrument`]).
pub fn build(ws: &Workspace, opts: &CargoOpts, shim: Option<&Path>) -> Result<Built> {
    let mut command = Command::new(&ws.cargo);
    command
        .args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(opts.to_cargo_args(shim.is_some()))
        .args(crate::style::cargo_color_arg())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(shim) = shim {
        let dir = instrument::prepare_target_dir(&ws.target_dir, shim)?;
        command
            .args(["--target", &ws.host])
            .arg("--target-dir")
            .arg(dir)
            .envs(instrument::build_env(shim));
    }
    let mut child = command.spawn().context("cannot run cargo")?;
    let stdout = child.stdout.take().expect("stdout is piped");

    let mut tests = Vec::new();
    let mut bins: HashMap<PackageId, Vec<(String, PathBuf)>> = HashMap::new();
    let mut out_dirs: HashMap<PackageId, PathBuf> = HashMap::new();
    let mut native_dirs = Vec::new();
    for message in Message::parse_stream(BufReader::new(stdout)) {
        match message.context("cannot read cargo's build messages")? {
            Message::CompilerArtifact(artifact) => {
                let Some(executable) = artifact.executable else {
                    continue;
                };
                let kind = primary_kind(&artifact.target.kind);
                if artifact.profile.test {
                    tests.push((
                        artifact.package_id,
                        artifact.target,
                        artifact.manifest_path,
                        executable,
                    ));
                } else if kind == "bin" {
                    bins.entry(artifact.package_id)
                        .or_default()
                        .push((artifact.target.name.clone(), executable.into_std_path_buf()));
                }
            }
            Message::BuildScriptExecuted(script) => {
                for linked in &script.linked_paths {
                    let path = linked.as_str();
                    let path = path.split_once('=').map_or(path, |(_, p)| p);
                    let path = PathBuf::from(path);
                    if path.starts_with(&ws.target_dir) && !native_dirs.contains(&path) {
                        native_dirs.push(path);
                    }
                }
                out_dirs.insert(script.package_id, script.out_dir.into_std_path_buf());
            }
            _ => {}
        }
    }
    let status = child.wait().context("cargo did not finish")?;
    if !status.success() {
        return Err(BuildFailed(status).into());
    }

    let binaries = tests
        .into_iter()
        .map(|(package_id, target, manifest_path, executable)| {
            let package_name = ws
                .packages
                .get(&package_id)
                .map(|p| p.name.to_string())
                .unwrap_or_else(|| package_id.repr.clone());
            let kind = primary_kind(&target.kind);
            let bin_exes = if matches!(kind, "test" | "bench") {
                bins.get(&package_id).cloned().unwrap_or_default()
            } else {
                Vec::new()
            };
            TestBinary {
                key: binary_key(&package_name, &target.kind, &target.name),
                custom_harness: ws.has_custom_harness(&package_name, kind, &target.name),
                path: executable.into_std_path_buf(),
                out_dir: out_dirs.get(&package_id).cloned(),
                package_id,
                manifest_path: manifest_path.into_std_path_buf(),
                bin_exes,
            }
        })
        .collect();
    Ok(Built {
        binaries,
        native_dirs,
    })
}
