//! Building the test binaries through cargo, as `cargo test --no-run` would,
//! and learning from cargo's messages where each binary is and what its
//! tests need at run time.

use crate::cargo::build_footprint::{self, Gathered};
use crate::cargo::instrument;
use crate::cargo::workspace::{Workspace, binary_key, primary_kind};
use crate::cli::CargoOpts;
use anyhow::{Context, Result};
use cargo_metadata::camino::Utf8PathBuf;
use cargo_metadata::{Artifact, BuildScript, Message, PackageId, Target};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One test binary cargo built.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Not a binary: the doctests of a library, run by `cargo test --doc`.
    pub doctests: Option<Doctests>,
}

/// The doctests of one library package, as one unit of selection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Doctests {
    pub package: String,
    /// The dep-info files of the library and of the path packages it
    /// depends on: what its doctests are compiled from.
    pub dep_info: Vec<PathBuf>,
    /// The build script outputs of those packages.
    pub build_outputs: Vec<PathBuf>,
    /// The manifests of those packages and of the workspace.
    pub manifests: Vec<PathBuf>,
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
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Built {
    pub binaries: Vec<TestBinary>,
    /// Native library directories inside the target directory that build
    /// scripts asked to link from, which cargo puts on the library path of
    /// tests.
    pub native_dirs: Vec<PathBuf>,
    /// Per package built, the dep-info file of its library (the ordinary
    /// build's, else its unit tests').
    pub lib_dep_info: HashMap<PackageId, PathBuf>,
    /// Per package with a build script, the file cargo keeps its output in
    /// (the `cargo::rustc-cfg`, `rustc-env` and link instructions).
    pub build_outputs: HashMap<PackageId, PathBuf>,
}

/// The build failed; cargo already printed why.
#[derive(Debug, thiserror::Error)]
#[error("could not compile the tests (cargo exited with {0})")]
pub struct BuildFailed(pub std::process::ExitStatus);

/// A build as asked for, not started yet.
pub struct Request {
    command: Command,
    /// What names it: see [`build_footprint::request`].
    pub digest: ekstazi_core::model::dep::Hash,
}

/// `cargo test --no-run` with the user's cargo options; with
/// `instrumentation`, the instrumented build of function granularity (see
/// [`instrument`]).
pub fn request(
    ws: &Workspace,
    opts: &CargoOpts,
    instrumentation: Option<instrument::Instrumentation>,
    extra_args: &[&str],
) -> Result<Request> {
    let command = cargo_test_no_run(ws, opts, instrumentation, extra_args)?;
    let digest = build_footprint::request(ws, &command);
    Ok(Request { command, digest })
}

/// Runs the build: what it made, and what it read and made, for its stamp.
/// `linked` is told of each test binary as cargo reports it linked, while
/// cargo goes on building the others.
pub fn build(
    ws: &Workspace,
    request: Request,
    linked: &dyn Fn(&Path),
) -> Result<(Built, Gathered)> {
    let Request { mut command, .. } = request;
    let mut child = command.spawn().context("cannot run cargo")?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut messages = Messages::default();
    for message in Message::parse_stream(BufReader::new(stdout)) {
        let message = message.context("cannot read cargo's build messages")?;
        if let Message::CompilerArtifact(artifact) = &message
            && artifact.profile.test
            && let Some(executable) = &artifact.executable
        {
            linked(executable.as_std_path());
        }
        messages.read(ws, message);
    }
    let status = child.wait().context("cargo did not finish")?;
    if !status.success() {
        return Err(BuildFailed(status).into());
    }
    let gathered = std::mem::take(&mut messages.gathered);
    Ok((messages.into_built(ws), gathered))
}

/// `cargo test --no-run` with the user's options, its messages on stdout;
/// for function granularity, in the instrumented build's target directory.
fn cargo_test_no_run(
    ws: &Workspace,
    opts: &CargoOpts,
    instrumentation: Option<instrument::Instrumentation>,
    extra_args: &[&str],
) -> Result<Command> {
    let mut command = Command::new(&ws.cargo);
    command
        .args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(opts.to_cargo_args(instrumentation.is_some()))
        .args(crate::style::cargo_color_arg())
        .args(extra_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(instrumentation) = instrumentation {
        let dir = instrument::prepare_target_dir(&ws.target_dir, instrumentation)?;
        command
            .args(["--target", &ws.host])
            .arg("--target-dir")
            .arg(dir)
            .envs(instrument::build_env(instrumentation));
    }
    Ok(command)
}

/// What cargo's build messages said, gathered as they come.
#[derive(Default)]
struct Messages {
    tests: Vec<(PackageId, Target, Utf8PathBuf, Utf8PathBuf)>,
    bins: HashMap<PackageId, Vec<(String, PathBuf)>>,
    out_dirs: HashMap<PackageId, PathBuf>,
    native_dirs: Vec<PathBuf>,
    lib_dep_info: HashMap<PackageId, PathBuf>,
    build_outputs: HashMap<PackageId, PathBuf>,
    gathered: Gathered,
}

impl Messages {
    fn read(&mut self, ws: &Workspace, message: Message) {
        match message {
            Message::CompilerArtifact(artifact) => self.artifact(artifact),
            Message::BuildScriptExecuted(script) => self.build_script(ws, script),
            _ => {}
        }
    }

    fn artifact(&mut self, artifact: Artifact) {
        self.gathered.artifact(&artifact);
        let kind = primary_kind(&artifact.target.kind);
        if kind == "lib" {
            let first = artifact.executable.as_ref().or(artifact.filenames.first());
            if let Some(dep_info) = first
                .and_then(|f| ekstazi_core::capture::depinfo::path_of_artifact(f.as_std_path()))
            {
                // The ordinary build's over the unit tests': the doctests
                // link that one.
                if !artifact.profile.test || !self.lib_dep_info.contains_key(&artifact.package_id) {
                    self.lib_dep_info
                        .insert(artifact.package_id.clone(), dep_info);
                }
            }
        }
        let Some(executable) = artifact.executable else {
            return;
        };
        if artifact.profile.test {
            self.tests.push((
                artifact.package_id,
                artifact.target,
                artifact.manifest_path,
                executable,
            ));
        } else if kind == "bin" {
            self.bins
                .entry(artifact.package_id)
                .or_default()
                .push((artifact.target.name.clone(), executable.into_std_path_buf()));
        }
    }

    fn build_script(&mut self, ws: &Workspace, script: BuildScript) {
        self.gathered.build_script(&script);
        for linked in &script.linked_paths {
            let path = linked.as_str();
            let path = path.split_once('=').map_or(path, |(_, p)| p);
            let path = PathBuf::from(path);
            if path.starts_with(&ws.target_dir) && !self.native_dirs.contains(&path) {
                self.native_dirs.push(path);
            }
        }
        if let Some(run_dir) = script.out_dir.parent() {
            self.build_outputs.insert(
                script.package_id.clone(),
                run_dir.join("output").into_std_path_buf(),
            );
        }
        self.out_dirs
            .insert(script.package_id, script.out_dir.into_std_path_buf());
    }

    fn into_built(self, ws: &Workspace) -> Built {
        let binaries = self
            .tests
            .into_iter()
            .map(|(package_id, target, manifest_path, executable)| {
                let package_name = ws
                    .packages
                    .get(&package_id)
                    .map(|p| p.name.to_string())
                    .unwrap_or_else(|| package_id.repr.clone());
                let kind = primary_kind(&target.kind);
                let bin_exes = if matches!(kind, "test" | "bench") {
                    self.bins.get(&package_id).cloned().unwrap_or_default()
                } else {
                    Vec::new()
                };
                TestBinary {
                    key: binary_key(&package_name, &target.kind, &target.name),
                    custom_harness: ws.has_custom_harness(&package_name, kind, &target.name),
                    path: executable.into_std_path_buf(),
                    out_dir: self.out_dirs.get(&package_id).cloned(),
                    package_id,
                    manifest_path: manifest_path.into_std_path_buf(),
                    bin_exes,
                    doctests: None,
                }
            })
            .collect();
        Built {
            binaries,
            native_dirs: self.native_dirs,
            lib_dep_info: self.lib_dep_info,
            build_outputs: self.build_outputs,
        }
    }
}
