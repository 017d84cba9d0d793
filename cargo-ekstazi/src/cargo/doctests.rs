//! A library's doctests as one test unit: the libraries `cargo test` would
//! run doctests for, with the dep-info of everything they are compiled from.

use crate::cargo::test_build::{self, Built};
use crate::cargo::workspace::Workspace;
use crate::cli::CargoOpts;
use std::path::PathBuf;

/// The doctests of each library `cargo test` would run them for, as one
/// unit each, with the dep-info of everything they are compiled from: the
/// library and the path packages it depends on. A path package outside the
/// workspace (whose dependencies are not known here) is counted for every
/// library.
pub fn units(ws: &Workspace, cargo: &CargoOpts, built: &Built) -> Vec<test_build::TestBinary> {
    let outside: Vec<&PathBuf> = built
        .lib_dep_info
        .iter()
        .filter(|(id, _)| id.repr.starts_with("path+") && !ws.packages.contains_key(*id))
        .map(|(_, dep_info)| dep_info)
        .collect();
    ws.selected_packages(cargo)
        .into_iter()
        .filter_map(|package| {
            let lib = package
                .targets
                .iter()
                .find(|t| crate::cargo::workspace::primary_kind(&t.kind) == "lib" && t.doctest)?;
            let own = built.lib_dep_info.get(&package.id)?;
            let mut dep_info = vec![own.clone()];
            let mut build_outputs = Vec::new();
            for (i, dep) in ws.path_closure(package).into_iter().enumerate() {
                if i > 0 {
                    dep_info.extend(built.lib_dep_info.get(&dep.id).cloned());
                }
                build_outputs.extend(built.build_outputs.get(&dep.id).cloned());
            }
            dep_info.extend(outside.iter().map(|p| (*p).clone()));
            if !may_have_doctests(&ws.root, &dep_info) {
                return None;
            }
            let manifests = ws
                .path_closure(package)
                .into_iter()
                .map(|p| p.manifest_path.clone().into_std_path_buf())
                .chain(std::iter::once(ws.root.join("Cargo.toml")))
                .collect();
            Some(test_build::TestBinary {
                key: crate::cargo::workspace::doctest_key(&package.name, &lib.name),
                path: package.manifest_path.clone().into_std_path_buf(),
                package_id: package.id.clone(),
                manifest_path: package.manifest_path.clone().into_std_path_buf(),
                out_dir: None,
                bin_exes: Vec::new(),
                custom_harness: false,
                doctests: Some(test_build::Doctests {
                    package: package.name.to_string(),
                    dep_info,
                    build_outputs,
                    manifests,
                }),
            })
        })
        .collect()
}

/// Whether the library whose dep-info comes first may have doctests (see
/// [`ekstazi_core::capture::doctests`]); a dep-info that cannot be read says yes.
fn may_have_doctests(root: &std::path::Path, dep_info: &[PathBuf]) -> bool {
    let sources = |path: &PathBuf| -> Option<Vec<PathBuf>> {
        let text = std::fs::read_to_string(path).ok()?;
        Some(ekstazi_core::capture::depinfo::parse(&text, root).sources)
    };
    let Some((own, deps)) = dep_info.split_first() else {
        return true;
    };
    let Some(own) = sources(own) else {
        return true;
    };
    let mut dep_sources = Vec::new();
    for dep in deps {
        match sources(dep) {
            Some(found) => dep_sources.extend(found),
            None => return true,
        }
    }
    ekstazi_core::capture::doctests::may_have_doctests(
        own.iter().map(PathBuf::as_path),
        dep_sources.iter().map(PathBuf::as_path),
    )
}
