//! Builds the runtime shim (`ekstazi-runtime`, a `cdylib`) so that it can be
//! embedded in the `cargo-ekstazi` binary: `cargo install` then gives a
//! self-contained tool that writes the shim out on first use.
//!
//! Cargo has no stable way for one package to depend on another's `cdylib`
//! artifact (artifact dependencies are nightly-only), so this runs a nested
//! `cargo` into its own target directory under `OUT_DIR`, which cannot
//! contend with the outer build's lock.
//!
//! The sources come through the package graph, not from `../`: the runtime
//! and the wire formats are dependencies whose build scripts export their
//! directories (`links` metadata), so this works the same from a checkout
//! and from packages installed out of a registry. The nested build is of a
//! small workspace written under `OUT_DIR` that depends on the runtime by
//! path and patches `ekstazi-wire` to the sources the runner is built from:
//! a packaged runtime names `ekstazi-wire` by version only.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let runtime = dependency_source("EKSTAZI_RUNTIME");
    let wire = dependency_source("EKSTAZI_WIRE");
    for watched in ["src", "stub", "Cargo.toml", "build.rs", "shim-profile.toml"] {
        println!(
            "cargo::rerun-if-changed={}",
            runtime.join(watched).display()
        );
    }
    for watched in ["src", "Cargo.toml", "build.rs"] {
        println!("cargo::rerun-if-changed={}", wire.join(watched).display());
    }
    let profile = runtime.join("shim-profile.toml");
    assert!(
        profile.is_file(),
        "{} is missing: the shim is built with it",
        profile.display()
    );

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // docs.rs builds without the network a nested cargo may need, and its
    // documentation has no use for the shim: embed an empty one.
    if env::var_os("DOCS_RS").is_some() {
        write(&out_dir.join("libekstazi_runtime.so"), "");
        write(&out_dir.join("ekstazi_sancov.o"), "");
        return;
    }
    let target = env::var("TARGET").expect("cargo sets TARGET");
    build_sancov_stub(&runtime, &target, &out_dir);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let build_dir = out_dir.join("runtime-build");
    let workspace = build_dir.join("workspace");
    let target_dir = build_dir.join("target");
    write_workspace(&workspace, &runtime, &wire);

    let mut build = Command::new(cargo);
    build
        .args(["rustc", "--release", "--quiet", "--target", &target])
        .args(["-p", "ekstazi-runtime", "--lib", "--crate-type", "cdylib"])
        .arg("--config")
        .arg(&profile)
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's flags and wrappers are for cargo-ekstazi, not for a
    // shim that is loaded into other programs.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        build.env_remove(var);
    }
    let status = build
        .status()
        .expect("cannot run cargo to build ekstazi-runtime");
    assert!(
        status.success(),
        "building ekstazi-runtime failed: {status}"
    );

    let built = target_dir
        .join(&target)
        .join("release")
        .join("libekstazi_runtime.so");
    std::fs::copy(&built, out_dir.join("libekstazi_runtime.so"))
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
}

/// Compiles the coverage callbacks linked into instrumented binaries
/// (`stub/sancov.rs` of the runtime) to one object file, with the compiler
/// building this package: stable `rustc --emit=obj` of a `no_std` library,
/// one codegen unit, which holds exactly the two callbacks.
fn build_sancov_stub(runtime: &Path, target: &str, out_dir: &Path) {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = out_dir.join("ekstazi_sancov.o");
    let status = Command::new(rustc)
        .args(["--edition", "2024", "--crate-type", "lib", "--emit", "obj"])
        .args(["--crate-name", "ekstazi_sancov", "--target", target])
        .args([
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "codegen-units=1",
        ])
        .args(["-C", "relocation-model=pic", "-C", "debuginfo=0"])
        .arg("-o")
        .arg(&output)
        .arg(runtime.join("stub").join("sancov.rs"))
        .env_remove("RUSTC_WRAPPER")
        .status()
        .expect("cannot run rustc to build the coverage callbacks");
    assert!(
        status.success(),
        "building the coverage callbacks failed: {status}"
    );
}

/// The source directory a dependency's build script exported as `links`
/// metadata (`DEP_<LINKS>_SOURCE`).
fn dependency_source(links: &str) -> PathBuf {
    let var = format!("DEP_{links}_SOURCE");
    let dir = env::var_os(&var).unwrap_or_else(|| {
        panic!(
            "cargo did not set {var}: its package must be a normal dependency with a build script"
        )
    });
    PathBuf::from(dir)
}

/// Writes the workspace the nested cargo builds: a placeholder package that
/// depends on the runtime, with `ekstazi-wire` patched to `wire`. The lock
/// file of the outer build, where there is one (the checkout's, or the one
/// packaged with cargo-ekstazi), seeds its own, so the shim is built with
/// the same `libc` and without asking the registry again.
fn write_workspace(workspace: &Path, runtime: &Path, wire: &Path) {
    std::fs::create_dir_all(workspace)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", workspace.display()));
    let mut manifest = String::from(
        "# Written by cargo-ekstazi's build script: the shim is built from here.\n\
         [workspace]\n\n\
         [package]\n\
         name = \"ekstazi-runtime-build\"\n\
         version = \"0.0.0\"\n\
         edition = \"2024\"\n\
         publish = false\n\n\
         [lib]\n\
         path = \"lib.rs\"\n\n",
    );
    writeln!(
        manifest,
        "[dependencies]\nekstazi-runtime = {{ path = {} }}\n",
        toml_string(runtime)
    )
    .unwrap();
    writeln!(
        manifest,
        "[patch.crates-io]\nekstazi-wire = {{ path = {} }}",
        toml_string(wire)
    )
    .unwrap();
    write(&workspace.join("Cargo.toml"), &manifest);
    write(&workspace.join("lib.rs"), "");

    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let lock = workspace.join("Cargo.lock");
    if !lock.exists()
        && let Some(seed) = [
            manifest_dir.join("Cargo.lock"),
            manifest_dir.join("..").join("Cargo.lock"),
        ]
        .into_iter()
        .find(|seed| seed.is_file())
    {
        // Only a seed: cargo drops what the shim does not use.
        let _ = std::fs::copy(seed, lock);
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// `path` as a TOML basic string.
fn toml_string(path: &Path) -> String {
    let path = path
        .to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8, which a Cargo.toml needs", path.display()));
    let mut quoted = String::from("\"");
    for c in path.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => write!(quoted, "\\u{:04X}", c as u32).unwrap(),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}
