//! Tells the packages that depend on the runtime where its sources are.
//!
//! `cargo-ekstazi` embeds the shim, built as a `cdylib` by a nested `cargo`
//! from these sources (artifact dependencies are nightly-only). Installed
//! from a registry, `cargo-ekstazi` has no `../ekstazi-runtime` beside it:
//! this `links` metadata (`DEP_EKSTAZI_RUNTIME_SOURCE` in its build script)
//! is how the sources reach it through the package graph.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo::metadata=source={dir}");
    // The metadata names a directory, not its contents.
    println!("cargo::rerun-if-changed=build.rs");
}
