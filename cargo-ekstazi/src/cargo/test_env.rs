//! The environment cargo gives a test process, reproduced so that a test
//! behaves under cargo-ekstazi as it does under `cargo test`.

use crate::cargo::test_build::{Built, TestBinary};
use crate::cargo::workspace::Workspace;
use std::ffi::OsString;
use std::path::PathBuf;

/// Variables to set for every test of `binary` (on top of the inherited
/// environment), in the order cargo documents them.
pub fn test_env(ws: &Workspace, built: &Built, binary: &TestBinary) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |key: &str, value: OsString| env.push((key.into(), value));
    set("CARGO", ws.cargo.clone());
    set("CARGO_MANIFEST_DIR", binary.manifest_dir().into_os_string());
    set(
        "CARGO_MANIFEST_PATH",
        binary.manifest_path.clone().into_os_string(),
    );
    if let Some(package) = ws.packages.get(&binary.package_id) {
        let version = &package.version;
        let text = |s: Option<&str>| OsString::from(s.unwrap_or_default());
        set("CARGO_PKG_VERSION", version.to_string().into());
        set("CARGO_PKG_VERSION_MAJOR", version.major.to_string().into());
        set("CARGO_PKG_VERSION_MINOR", version.minor.to_string().into());
        set("CARGO_PKG_VERSION_PATCH", version.patch.to_string().into());
        set("CARGO_PKG_VERSION_PRE", version.pre.to_string().into());
        set("CARGO_PKG_AUTHORS", package.authors.join(":").into());
        set("CARGO_PKG_NAME", package.name.to_string().into());
        set(
            "CARGO_PKG_DESCRIPTION",
            text(package.description.as_deref()),
        );
        set("CARGO_PKG_HOMEPAGE", text(package.homepage.as_deref()));
        set("CARGO_PKG_REPOSITORY", text(package.repository.as_deref()));
        set("CARGO_PKG_LICENSE", text(package.license.as_deref()));
        set(
            "CARGO_PKG_LICENSE_FILE",
            text(package.license_file.as_ref().map(|p| p.as_str())),
        );
        set(
            "CARGO_PKG_RUST_VERSION",
            package
                .rust_version
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
                .into(),
        );
        set(
            "CARGO_PKG_README",
            text(package.readme.as_ref().map(|p| p.as_str())),
        );
    }
    if let Some(out_dir) = &binary.out_dir {
        set("OUT_DIR", out_dir.clone().into_os_string());
    }
    for (name, path) in &binary.bin_exes {
        set(
            &format!("CARGO_BIN_EXE_{name}"),
            path.clone().into_os_string(),
        );
    }
    set("LD_LIBRARY_PATH", library_path(ws, built, binary));
    env
}

/// Cargo's search path for dynamic libraries: the profile and `deps`
/// directories, native directories from build scripts, the toolchain's
/// libraries, then whatever the user had.
fn library_path(ws: &Workspace, built: &Built, binary: &TestBinary) -> OsString {
    let deps = binary.path.parent().map(PathBuf::from).unwrap_or_default();
    let profile_dir = deps.parent().map(PathBuf::from).unwrap_or_default();
    let mut dirs = vec![profile_dir, deps];
    dirs.extend(built.native_dirs.iter().cloned());
    dirs.push(ws.sysroot.join("lib/rustlib").join(&ws.host).join("lib"));
    dirs.push(ws.sysroot.join("lib"));
    if let Some(existing) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&existing));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}
