//! Tells the packages that depend on the wire formats where their sources
//! are (`DEP_EKSTAZI_WIRE_SOURCE`): `cargo-ekstazi`'s build script builds
//! the shim (`ekstazi-runtime`) with a nested `cargo`, and points it at
//! these very sources so that shim and runner share one definition of the
//! formats, wherever the packages came from.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo::metadata=source={dir}");
    // The metadata names a directory, not its contents.
    println!("cargo::rerun-if-changed=build.rs");
}
