//! Tests that run cargo themselves: `escargot`, trybuild's compile-fail
//! tests, `assert_cmd`'s and snapbox's cargo fallbacks.
//!
//! Why this needs its own rules: a cargo that finds its build fresh decides
//! so from modification times. It looks the sources up but never reads
//! them, so the trace holds only their existence, while what the test then
//! sees (the binary it runs, the errors it compares) was made from their
//! content. A test that ran cargo therefore depends on the content of every
//! input of the builds that cargo used, whether it compiled them or found
//! them fresh: the sources that rustc's dep-info files (`deps/*.d`,
//! `build/*/*.d`) name in each build directory whose lock a process of
//! the test took. That is every compiled input of that build
//! directory, not only of the units this cargo needed: conservative, and
//! cheap (a directory is read again only when its dep-info files change). Sources under `$CARGO_HOME`
//! (registry and git dependencies) are left to the lockfile, which pins
//! them; the manifests and cargo's configuration are read by every cargo
//! run, so the trace has them already.
//!
//! The other half is what cargo keeps for itself ([`bookkeeping`]): its
//! fingerprints, locks, caches of the compiler's answers and of registry
//! use, and rustc's incremental caches record cargo's own state, not what
//! a build produces, and are never dependencies.

use crate::capture::trace::{Access, Trace};
use crate::model::path::normalize;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Why an access to `path` is cargo's or rustc's bookkeeping, if it is.
/// Decided on the path alone, without reading the disk.
pub fn bookkeeping(path: &Path) -> Option<&'static str> {
    let name = path.file_name()?.as_encoded_bytes();
    if name.starts_with(b".global-cache") {
        return Some("cargo's record of when it last used each registry crate");
    }
    if name.starts_with(b".package-cache") {
        return Some("cargo's lock on its package cache");
    }
    if name == b".cargo-lock" {
        return Some("cargo's lock on a build directory");
    }
    if name == b".lock"
        && path
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            == Some(OsStr::new("trybuild"))
    {
        return Some("trybuild's lock on the project it generates (made and removed by each run)");
    }
    if name == b".rustc_info.json" {
        return Some("cargo's cache of the compiler's version and settings");
    }
    let mut components = path.components().map(Component::as_os_str).peekable();
    while let Some(component) = components.next() {
        if component == ".fingerprint" {
            return Some("cargo's fingerprints of its build (whether each unit is fresh)");
        }
        if component == "incremental" && components.peek().is_some_and(|c| is_crate_dir(c)) {
            return Some("rustc's incremental compilation cache");
        }
    }
    None
}

/// rustc's directory for one crate in an incremental cache:
/// `<crate name>-<hash>`, the hash 10 or more letters and digits.
fn is_crate_dir(name: &OsStr) -> bool {
    let Some((krate, hash)) = name.to_str().and_then(|n| n.rsplit_once('-')) else {
        return false;
    };
    !krate.is_empty()
        && krate
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && hash.len() >= 10
        && hash.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The build directories (`<target>/<profile>`, or
/// `<target>/<triple>/<profile>`) a cargo that the test ran built in, or
/// found its build fresh in: those whose lock (`.cargo-lock`) a process of
/// the test took. Only a build takes it: trybuild reads the fingerprints
/// of the test's own build (for its features) without building there. In
/// first-seen order, each once. The harness's own accesses do not count.
pub fn build_dirs(trace: &Trace) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for event in &trace.events {
        if event.by_harness()
            || !matches!(
                event.access,
                Access::Read | Access::Created | Access::Modified
            )
        {
            continue;
        }
        let path = normalize(&event.path);
        if path.file_name() != Some(OsStr::new(".cargo-lock")) {
            continue;
        }
        if let Some(dir) = path.parent()
            && !dirs.iter().any(|d| d == dir)
        {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// Whether `path` is a dep-info file of the build directory `dir`: rustc's
/// (`deps/`, `build/*/`) or the copy cargo writes beside an artefact it
/// uplifts (`<dir>/<name>.d`, `examples/`). Cargo reads and rewrites them
/// as it builds; what they name is what [`build_inputs`] makes
/// dependencies, so they are not dependencies themselves.
pub fn is_dep_info_of(dir: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(dir) else {
        return false;
    };
    if rel.extension() != Some(OsStr::new("d")) {
        return false;
    }
    let parts: Vec<&OsStr> = rel.components().map(Component::as_os_str).collect();
    match parts.as_slice() {
        [_] => true,
        [dir, _] => *dir == "deps" || *dir == "examples",
        [dir, _, _] => *dir == "build",
        _ => false,
    }
}

/// Whether `path` is something cargo made in the build directory `dir`
/// from the inputs [`build_inputs`] names: what it compiled and linked
/// (the artefacts, `deps/`, `examples/`, the build scripts themselves) and
/// the notes it keeps of a script's run (`build/<unit>/output`), but not
/// what the build scripts made (`build/<unit>/out/`, programs included): a
/// script without `rerun-if-changed` lines may have made that from inputs
/// no dep-info names.
///
/// Why the products give way to their inputs: the test's cargo and the
/// tool's build may each make them with other flags or features (a cargo
/// a test runs sees the user's `RUSTFLAGS`, not the coverage flags), so
/// their bytes change from one run to the next with no input changed.
pub fn is_product_of(dir: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(dir) else {
        return false;
    };
    let mut parts = rel.components().map(Component::as_os_str);
    match parts.next() {
        None => false,
        Some(first) if first != "build" => true,
        Some(_) => {
            let _unit = parts.next();
            parts.next().is_some_and(|name| name != "out")
        }
    }
}

/// Whether `path` is a directory cargo makes, as it needs it, to hold the
/// build directory `dir`: the target directory, and for
/// `<target>/<triple>/<profile>` the triple's directory too (a parent
/// whose name holds a `-`, as triples do). Whether it was there when the
/// test's cargo looked is cargo's business (it makes what is missing),
/// not an input of what it builds. Asked only of a lookup, never of a
/// listing.
pub fn is_layout_of(dir: &Path, path: &Path) -> bool {
    let Some(parent) = dir.parent() else {
        return false;
    };
    let triple = parent
        .file_name()
        .is_some_and(|name| name.as_encoded_bytes().contains(&b'-'));
    parent == path || (triple && parent.parent() == Some(path))
}

/// A dep-info file as it is now: a changed stamp means its sources may
/// have changed (cargo writes a unit's dep-info again when it rebuilds it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DepInfoFile {
    /// Where the file is.
    pub path: PathBuf,
    /// When it was last written; `None` when the system cannot say.
    pub modified: Option<std::time::SystemTime>,
    /// Its length, in bytes.
    pub len: u64,
}

/// The dep-info files of a build directory, sorted: `deps/*.d` (every
/// crate compiled there) and `build/*/*.d` (build scripts), and the
/// outputs of its build scripts' runs (`build/*/output`), whose
/// `rerun-if-changed` lines name their inputs.
pub fn dep_info_files(dir: &Path) -> Vec<DepInfoFile> {
    let mut files = dep_info_in(&dir.join("deps"));
    if let Ok(entries) = std::fs::read_dir(dir.join("build")) {
        for entry in entries.flatten() {
            files.extend(dep_info_in(&entry.path()));
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// Whether `path` is a build script's output (`build/<unit>/output`).
fn is_build_output(path: &Path) -> bool {
    path.file_name() == Some(OsStr::new("output"))
}

/// The `*.d` files, and a build script's `output`, directly in `dir`.
fn dep_info_in(dir: &Path) -> Vec<DepInfoFile> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension() == Some(OsStr::new("d")) || is_build_output(&e.path()))
        .filter_map(|e| {
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            Some(DepInfoFile {
                path: e.path(),
                modified: meta.modified().ok(),
                len: meta.len(),
            })
        })
        .collect()
}

/// What each build directory a test's cargo used was built from, read
/// when the first test that ran cargo there is recorded, and read again
/// only when its dep-info files changed since (another test's cargo may
/// build there while the run records).
#[derive(Debug, Default)]
pub struct KnownBuilds(Mutex<HashMap<PathBuf, Arc<BuildInputs>>>);

impl KnownBuilds {
    /// What the build directory `dir` was built from, with the sources
    /// below `pinned` left to the lockfile (see [`build_inputs`]).
    pub fn inputs(&self, dir: &Path, pinned: &[&Path]) -> Arc<BuildInputs> {
        let files = dep_info_files(dir);
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(inputs) = known.get(dir)
            && inputs.files == files
        {
            return Arc::clone(inputs);
        }
        let inputs = Arc::new(build_inputs(dir, files, pinned));
        known.insert(dir.to_path_buf(), Arc::clone(&inputs));
        inputs
    }
}

/// What a build directory was compiled from.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BuildInputs {
    /// The dep-info files read, as they were.
    pub files: Vec<DepInfoFile>,
    /// The absolute sources they name, sorted, each once.
    pub sources: Vec<PathBuf>,
    /// The relative ones, sorted, each once: relative to the root of the
    /// workspace that cargo built (it runs rustc there), which the build
    /// directory does not tell (see [`place`]).
    pub relative: Vec<PathBuf>,
    /// The relative inputs each build script's run names
    /// (`rerun-if-changed`), by package: relative to that package's
    /// directory (see [`relative_inputs`]). Sorted by package.
    pub script_inputs: Vec<(String, Vec<PathBuf>)>,
    /// For each package whose build script was compiled here, whether
    /// only from sources below `pinned` (a registry or git crate's).
    /// With `--target`, a script is compiled in the host's build directory
    /// and run in the target's, so the verdicts of all the directories a
    /// cargo used are joined (see [`relative_inputs`]).
    pub scripts_pinned: Vec<(String, bool)>,
    /// The environment variables rustc read at compile time there
    /// (`# env-dep:` lines, `env!`): cargo compares them from its own
    /// snapshot of the environment, which no hook sees. Sorted, each once.
    pub env: Vec<String>,
    /// Why the inputs are not fully known (a dep-info file that cannot be
    /// read, a directory without any): the test then always runs.
    pub unknown: Vec<String>,
}

/// Reads the dep-info `files` of the build directory `dir` (see
/// [`dep_info_files`]). Sources below one of `pinned` (`$CARGO_HOME`: what
/// the lockfile pins) are left out.
pub fn build_inputs(dir: &Path, files: Vec<DepInfoFile>, pinned: &[&Path]) -> BuildInputs {
    let mut inputs = BuildInputs::default();
    // For each package whose build script was compiled here, whether every
    // one of its scripts was compiled from sources below `pinned` alone
    // (and one at least): a registry or git crate's. A local crate of the
    // same name, or a dep-info that cannot be read, makes it false.
    let mut scripts_pinned: std::collections::HashMap<String, bool> =
        std::collections::HashMap::new();
    if files.is_empty() {
        inputs.unknown.push(format!(
            "it ran cargo, and the build directory {} holds no dep-info file to say what it was built from",
            dir.display()
        ));
    }
    for file in &files {
        let mut script_verdict = |only_pinned: bool| {
            if let Some(package) = compiled_script(&file.path) {
                *scripts_pinned.entry(package.to_owned()).or_insert(true) &= only_pinned;
            }
        };
        match std::fs::read_to_string(&file.path) {
            Ok(text) => {
                let sources = if is_build_output(&file.path) {
                    let (relative, absolute): (Vec<PathBuf>, Vec<PathBuf>) =
                        rerun_if_changed(&text)
                            .into_iter()
                            .partition(|p| p.is_relative());
                    let package = script_package(&file.path).unwrap_or_default();
                    inputs.script_inputs.push((package.to_owned(), relative));
                    absolute
                } else {
                    let info = crate::capture::depinfo::parse(&text, Path::new(""));
                    script_verdict(
                        !info.sources.is_empty()
                            && info.sources.iter().all(|s| {
                                s.is_absolute()
                                    && pinned.iter().any(|pin| normalize(s).starts_with(pin))
                            }),
                    );
                    inputs
                        .env
                        .extend(info.env.into_iter().map(|(name, _)| name));
                    info.sources
                };
                for source in sources {
                    if source.is_relative() {
                        inputs.relative.push(source);
                    } else {
                        let source = normalize(&source);
                        if !pinned.iter().any(|pin| source.starts_with(pin)) {
                            inputs.sources.push(source);
                        }
                    }
                }
            }
            Err(e) => {
                script_verdict(false);
                inputs.unknown.push(format!(
                    "it ran cargo, and the dep-info {} cannot be read: {e}",
                    file.path.display()
                ));
            }
        }
    }
    inputs.files = files;
    for list in [&mut inputs.sources, &mut inputs.relative] {
        list.sort();
        list.dedup();
    }
    inputs.env.sort();
    inputs.env.dedup();
    inputs.script_inputs.sort();
    inputs.scripts_pinned = scripts_pinned.into_iter().collect();
    inputs.scripts_pinned.sort();
    inputs
}

/// The relative inputs of the builds `all` (the directories one test's
/// cargo used), to be placed by [`place`]: those rustc's dep-info names,
/// and those a build script names, but for the scripts of packages
/// compiled from below `pinned` alone in every directory that compiled
/// one: a registry crate's script names its inputs relative to its own
/// directory under `$CARGO_HOME` (ring's `crypto/…` files), which
/// `Cargo.lock` pins as it pins its sources. A script compiled nowhere
/// among them keeps its inputs (conservative).
pub fn relative_inputs(all: &[&BuildInputs]) -> Vec<PathBuf> {
    let mut pinned: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
    for (package, only_pinned) in all.iter().flat_map(|i| &i.scripts_pinned) {
        *pinned.entry(package.as_str()).or_insert(true) &= *only_pinned;
    }
    let mut relative: Vec<PathBuf> = Vec::new();
    for inputs in all {
        relative.extend(inputs.relative.iter().cloned());
        for (package, paths) in &inputs.script_inputs {
            if pinned.get(package.as_str()) != Some(&true) {
                relative.extend(paths.iter().cloned());
            }
        }
    }
    relative.sort();
    relative.dedup();
    relative
}

/// The package a build script's unit directory (`build/<package>-<hash>/`)
/// belongs to, from the file `path` in it.
fn script_package(path: &Path) -> Option<&str> {
    let unit = path.parent()?.file_name()?.to_str()?;
    Some(unit.rsplit_once('-')?.0)
}

/// The package whose build script `path`, a dep-info file in
/// `build/<package>-<hash>/` other than a script's output, was compiled
/// from.
fn compiled_script(path: &Path) -> Option<&str> {
    let in_build = path
        .parent()
        .and_then(Path::parent)
        .is_some_and(|p| p.file_name() == Some(OsStr::new("build")));
    if !in_build || is_build_output(path) {
        return None;
    }
    script_package(path)
}

/// The paths a build script's output names with `cargo:rerun-if-changed=`
/// (or `cargo::`): its inputs, relative to its package's directory unless
/// absolute. A build script that names none is rerun by cargo when any
/// file of its package changes; those it reads besides the package's
/// sources are not known here.
fn rerun_if_changed(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            line.strip_prefix("cargo::rerun-if-changed=")
                .or_else(|| line.strip_prefix("cargo:rerun-if-changed="))
        })
        .map(PathBuf::from)
        .collect()
}

/// The directories of the manifests (`Cargo.toml`) a process of the test
/// read or wrote, but those below one of `pinned`: among them, the root of
/// every workspace a cargo it ran built (cargo reads its root manifest),
/// whether the project's own or one the test generated (trybuild's).
pub fn manifest_dirs(trace: &Trace, pinned: &[&Path]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for event in &trace.events {
        if event.by_harness() || !matches!(event.access, Access::Read | Access::Created) {
            continue;
        }
        let path = normalize(&event.path);
        if path.file_name() != Some(OsStr::new("Cargo.toml"))
            || pinned.iter().any(|pin| path.starts_with(pin))
        {
            continue;
        }
        if let Some(dir) = path.parent()
            && !dirs.iter().any(|d| d == dir)
        {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// The paths a process of the test created or removed: sources among them
/// (trybuild writes its generated project's `main.rs` at every run) are
/// the test's own, as for any file (see [`crate::capture::collect`]).
pub fn written(trace: &Trace) -> std::collections::HashSet<PathBuf> {
    trace
        .events
        .iter()
        .filter(|e| !e.by_harness() && matches!(e.access, Access::Created | Access::Deleted))
        .map(|e| normalize(&e.path))
        .collect()
}

/// Whether `path` is at or below one of `written`.
pub fn is_written(path: &Path, written: &std::collections::HashSet<PathBuf>) -> bool {
    path.ancestors().any(|p| written.contains(p))
}

/// Where the relative sources of a build are: below each of `roots` (the
/// candidates for the root of the workspace cargo built, see
/// [`manifest_dirs`]) that holds them; below `workspace` when none does,
/// so that the source's appearance there reruns the test. Several
/// candidates that hold one are all kept: conservative.
pub fn place(relative: &[PathBuf], roots: &[PathBuf], workspace: &Path) -> Vec<PathBuf> {
    let mut placed = Vec::new();
    for source in relative {
        let found: Vec<PathBuf> = roots
            .iter()
            .map(|root| normalize(&root.join(source)))
            .filter(|p| p.exists())
            .collect();
        if found.is_empty() {
            placed.push(normalize(&workspace.join(source)));
        } else {
            placed.extend(found);
        }
    }
    placed.sort();
    placed.dedup();
    placed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::trace::{Event, FLAG_HARNESS};

    #[test]
    fn cargos_bookkeeping_is_known_by_its_names() {
        let home = "/home/u/.cargo";
        for path in [
            format!("{home}/.global-cache"),
            format!("{home}/.global-cache-journal"),
            format!("{home}/.package-cache"),
            format!("{home}/.package-cache-mutate"),
            "/ws/target/debug/.cargo-lock".to_owned(),
            "/ws/target/.rustc_info.json".to_owned(),
            "/ws/target/tests/trybuild/shout/.lock".to_owned(),
            "/ws/target/debug/.fingerprint".to_owned(),
            "/ws/target/debug/.fingerprint/greeter-0a1b2c3d4e5f6a7b/bin-greeter".to_owned(),
            "/ws/target/debug/incremental/greeter-1vxm2w3qz0l6c".to_owned(),
            "/ws/target/debug/incremental/greeter-1vxm2w3qz0l6c/s-h2-abc/dep-graph.bin".to_owned(),
        ] {
            assert!(bookkeeping(Path::new(&path)).is_some(), "{path}");
        }
        for path in [
            "/ws/src/main.rs",
            "/ws/Cargo.lock",
            "/ws/target/debug/deps/greeter-0a1b2c3d4e5f6a7b.d",
            "/ws/target/debug/incremental",
            "/ws/tests/incremental/case-1.txt",
            "/ws/tests/incremental/basic-inputs.txt",
            "/ws/data/global-cache",
            "/ws/tests/trybuild/.lock",
            "/ws/data/.lock",
            "/ws/data/fingerprint/a",
        ] {
            assert_eq!(bookkeeping(Path::new(path)), None, "{path}");
        }
    }

    fn event(access: Access, flags: u8, path: &str) -> Event {
        Event {
            access,
            flags,
            path: PathBuf::from(path),
        }
    }

    #[test]
    fn the_build_directories_are_those_whose_lock_the_test_took() {
        let trace = Trace {
            events: vec![
                event(Access::Exists, 0, "/ws/src/main.rs"),
                // trybuild reading the test's own build's fingerprints.
                event(
                    Access::Read,
                    0,
                    "/ws/target/debug/.fingerprint/shout-12/lib-shout.json",
                ),
                event(Access::Modified, 0, "/ws/target/debug/.cargo-lock"),
                event(
                    Access::Created,
                    0,
                    "/ws/target/tests/trybuild/x86_64-unknown-linux-gnu/debug/.cargo-lock",
                ),
                event(Access::Read, 0, "/ws/target/debug/.cargo-lock"),
                event(Access::Read, FLAG_HARNESS, "/elsewhere/debug/.cargo-lock"),
                event(Access::Exists, 0, "/ws/target/release/.cargo-lock"),
            ],
            coverage: vec![],
            complete: true,
        };
        assert_eq!(
            build_dirs(&trace),
            [
                PathBuf::from("/ws/target/debug"),
                PathBuf::from("/ws/target/tests/trybuild/x86_64-unknown-linux-gnu/debug"),
            ]
        );
    }

    #[test]
    fn the_layout_of_a_build_directory_is_its_two_parents() {
        let dir = Path::new("/ws/target/x86_64-unknown-linux-gnu/debug");
        assert!(is_layout_of(
            dir,
            Path::new("/ws/target/x86_64-unknown-linux-gnu")
        ));
        assert!(is_layout_of(dir, Path::new("/ws/target")));
        for other in [
            "/ws",
            "/ws/target/x86_64-unknown-linux-gnu/debug",
            "/ws/src",
        ] {
            assert!(!is_layout_of(dir, Path::new(other)), "{other}");
        }
        let host = Path::new("/ws/target/debug");
        assert!(is_layout_of(host, Path::new("/ws/target")));
        assert!(
            !is_layout_of(host, Path::new("/ws")),
            "the workspace is not cargo's"
        );
    }

    #[test]
    fn products_of_a_build_directory_are_its_artefacts_not_its_scripts_outputs() {
        let dir = Path::new("/ws/target/debug");
        for (path, product) in [
            ("/ws/target/debug/greeter", true),
            ("/ws/target/debug/deps/libshout-12.so", true),
            ("/ws/target/debug/deps/libshout-12.rlib", true),
            ("/ws/target/debug/examples/demo", true),
            ("/ws/target/debug/build/x-1/build-script-build", true),
            ("/ws/target/debug/build/x-2/output", true),
            ("/ws/target/debug/build/x-2/out/generated.rs", false),
            ("/ws/target/debug/build/x-2/out/nested/g.rs", false),
            ("/ws/target/debug/build/x-2/out/helper", false),
            ("/ws/target/debug/build/x-2", false),
            ("/ws/target/debug/build", false),
            ("/ws/target/debug", false),
            ("/ws/target/debugx/greeter", false),
            ("/ws/src/main.rs", false),
        ] {
            assert_eq!(is_product_of(dir, Path::new(path)), product, "{path}");
        }
    }

    #[test]
    fn dep_info_files_of_a_build_directory_are_known_by_their_place() {
        let dir = Path::new("/ws/target/debug");
        for path in [
            "/ws/target/debug/greeter.d",
            "/ws/target/debug/deps/greeter-12.d",
            "/ws/target/debug/examples/demo-3.d",
            "/ws/target/debug/build/greeter-9/build_script_build-9.d",
        ] {
            assert!(is_dep_info_of(dir, Path::new(path)), "{path}");
        }
        for path in [
            "/ws/target/debug/greeter",
            "/ws/target/debug/build/greeter-9/out/data.d",
            "/ws/target/debug/sub/x.d",
            "/ws/target/release/greeter.d",
            "/ws/src/lexer.d",
        ] {
            assert!(!is_dep_info_of(dir, Path::new(path)), "{path}");
        }
    }

    #[test]
    fn a_build_directorys_inputs_are_what_its_dep_info_names() {
        let dir = tempfile::tempdir().unwrap();
        let build = dir.path().join("target/debug");
        std::fs::create_dir_all(build.join("deps")).unwrap();
        std::fs::create_dir_all(build.join("build/greeter-9")).unwrap();
        std::fs::write(
            build.join("deps/greeter-12.d"),
            "/t/deps/greeter-12: src/main.rs /home/u/.cargo/registry/src/x/lib.rs /ui/case.rs\n\nsrc/main.rs:\n\n# env-dep:GREETING=hi\n# env-dep:UNSET_ONE\n",
        )
        .unwrap();
        std::fs::write(
            build.join("build/greeter-9/build_script_build-9.d"),
            "/t/build/greeter-9/build_script_build-9: build.rs\n",
        )
        .unwrap();
        std::fs::write(build.join("deps/libgreeter-12.rlib"), b"").unwrap();
        std::fs::create_dir_all(build.join("build/greeter-10")).unwrap();
        std::fs::write(
            build.join("build/greeter-10/output"),
            "cargo:rerun-if-changed=data/words.txt\ncargo::rerun-if-changed=/abs/table.csv\ncargo:rustc-cfg=x\n",
        )
        .unwrap();
        // A registry crate's build script, compiled from `$CARGO_HOME` in
        // the host's directory (as with `--target`), and run in this one,
        // where it names inputs relative to its own directory: pinned.
        let host = dir.path().join("target/host-debug");
        std::fs::create_dir_all(host.join("build/ring-1")).unwrap();
        std::fs::write(
            host.join("build/ring-1/build_script_build-1.d"),
            "/t/build/ring-1/build_script_build-1: /home/u/.cargo/registry/src/x/ring-0.17.14/build.rs\n",
        )
        .unwrap();
        std::fs::create_dir_all(build.join("build/ring-2")).unwrap();
        std::fs::write(
            build.join("build/ring-2/output"),
            "cargo:rerun-if-changed=crypto/chacha/asm/chacha-x86.pl\ncargo:rerun-if-changed=include/ring-core/base.h\n",
        )
        .unwrap();
        let files = dep_info_files(&build);
        assert_eq!(files.len(), 4, "{files:?}");
        let home = [Path::new("/home/u/.cargo")];
        let inputs = build_inputs(&build, files, &home);
        let host_inputs = build_inputs(&host, dep_info_files(&host), &home);
        assert_eq!(host_inputs.scripts_pinned, [("ring".to_owned(), true)]);
        assert_eq!(
            inputs.scripts_pinned,
            [("greeter".to_owned(), false)],
            "its script names build.rs, relative"
        );
        // On its own, this directory does not tell that ring is pinned.
        assert!(
            relative_inputs(&[&inputs]).contains(&PathBuf::from("crypto/chacha/asm/chacha-x86.pl"))
        );
        assert_eq!(
            relative_inputs(&[&inputs, &host_inputs]),
            [
                PathBuf::from("build.rs"),
                PathBuf::from("data/words.txt"),
                PathBuf::from("src/main.rs")
            ]
        );
        assert_eq!(
            inputs.sources,
            [
                PathBuf::from("/abs/table.csv"),
                PathBuf::from("/ui/case.rs")
            ]
        );
        assert_eq!(
            inputs.relative,
            [PathBuf::from("build.rs"), PathBuf::from("src/main.rs")]
        );
        assert_eq!(inputs.env, ["GREETING", "UNSET_ONE"]);
        assert!(inputs.unknown.is_empty());
        let empty = dir.path().join("elsewhere/debug");
        std::fs::create_dir_all(&empty).unwrap();
        let none = build_inputs(&empty, dep_info_files(&empty), &[]);
        assert!(none.sources.is_empty());
        assert_eq!(none.unknown.len(), 1, "{none:?}");
    }
}

#[cfg(test)]
mod placing {
    use super::*;
    use crate::capture::trace::Event;

    #[test]
    fn relative_sources_are_placed_below_the_manifests_that_hold_them() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let generated = ws.join("target/tests/trybuild/shout");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(&generated).unwrap();
        std::fs::write(ws.join("src/main.rs"), "").unwrap();
        std::fs::write(generated.join("main.rs"), "").unwrap();
        let home = dir.path().join("home");
        let event = |access, path: &Path| Event {
            access,
            flags: 0,
            path: path.to_path_buf(),
        };
        let trace = Trace {
            events: vec![
                event(Access::Read, &ws.join("Cargo.toml")),
                event(Access::Created, &generated.join("Cargo.toml")),
                event(Access::Read, &generated.join("Cargo.toml")),
                event(Access::Read, &home.join("registry/src/x/serde/Cargo.toml")),
                event(Access::Missing, &dir.path().join("Cargo.toml")),
            ],
            coverage: vec![],
            complete: true,
        };
        let roots = manifest_dirs(&trace, &[&home]);
        assert_eq!(roots, [ws.clone(), generated.clone()]);
        let placed = place(
            &[
                PathBuf::from("src/main.rs"),
                PathBuf::from("main.rs"),
                PathBuf::from("src/gone.rs"),
            ],
            &roots,
            &ws,
        );
        assert_eq!(
            placed,
            [
                ws.join("src/gone.rs"),
                ws.join("src/main.rs"),
                generated.join("main.rs"),
            ]
        );
    }
}
