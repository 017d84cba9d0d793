//! Builds the runtime shim (`ekstazi-runtime`, a `cdylib`) so that it can be
//! embedded in the `cargo-ekstazi` binary: `cargo install` then gives a
//! self-contained tool that writes the shim out on first use.
//!
//! Cargo has no stable way for one package to depend on another's `cdylib`
//! artifact (artifact dependencies are nightly-only), so this runs a nested
//! `cargo build` of the runtime into its own target directory under
//! `OUT_DIR`, which cannot contend with the outer build's lock.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let runtime = manifest_dir.join("..").join("ekstazi-runtime");
    for watched in ["src", "Cargo.toml", "shim-profile.toml"] {
        println!("cargo:rerun-if-changed={}", runtime.join(watched).display());
    }
    // The formats the shim shares with the runner.
    let wire = manifest_dir.join("..").join("ekstazi-wire");
    for watched in ["src", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", wire.join(watched).display());
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out_dir.join("runtime-build");

    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "--quiet", "--target", &target])
        .arg("--config")
        .arg(runtime.join("shim-profile.toml"))
        .arg("--manifest-path")
        .arg(runtime.join("Cargo.toml"))
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
