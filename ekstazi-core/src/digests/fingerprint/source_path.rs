//! The source file a panic location names, without what a dependency
//! update or another machine changes in it.
//!
//! Cargo unpacks a registry dependency into
//! `$CARGO_HOME/registry/src/<index>/<name>-<version>/`, and rustc keeps that
//! absolute path in every `core::panic::Location` of the crate (each
//! overflow check, bounds check and `unwrap`). A version bump that leaves a
//! function's code as it was would still change the function through its
//! locations' file names: measured on ripgrep, `eca13f08` (aho-corasick
//! 1.1.2 → 1.1.3, whose x86-64 code is the same) reran 574 of 1 085 tests
//! for `aho_corasick::util::remapper::Remapper::swap` and kin, and 12
//! without the version in the path. Lines are forgotten for the same
//! reason (moving code is not changing it); the file itself is kept, as the
//! crate and path inside it, so that moving code to another file is still
//! seen.

use std::borrow::Cow;

/// `path` with the machine- and version-dependent part of a dependency's
/// source directory replaced by the crate's name: `…/registry/src/<index>/
/// <name>-<version>/<rest>` becomes `registry:<name>/<rest>`, and
/// `…/git/checkouts/<repo>-<hash>/<rev>/<rest>` becomes
/// `git:<repo>-<hash>/<rest>`. Any other path is returned as it is.
pub(crate) fn stable_source_path(path: &[u8]) -> Cow<'_, [u8]> {
    if let Some(rest) = after_last(path, b"/registry/src/")
        && let Some((_index, rest)) = split_component(rest)
        && let Some((dir, rest)) = split_component(rest)
        && let Some(name) = crate_name_of_versioned_dir(dir)
    {
        return Cow::Owned([b"registry:", name, b"/", rest].concat());
    }
    if let Some(rest) = after_last(path, b"/git/checkouts/")
        && let Some((repo, rest)) = split_component(rest)
        && let Some((_rev, rest)) = split_component(rest)
    {
        return Cow::Owned([b"git:", repo, b"/", rest].concat());
    }
    Cow::Borrowed(path)
}

fn after_last<'p>(path: &'p [u8], marker: &[u8]) -> Option<&'p [u8]> {
    let at = memchr::memmem::rfind(path, marker)?;
    Some(&path[at + marker.len()..])
}

/// The first component of `path` and the rest after its `/`; `None` for an
/// empty component or one with no `/` after it.
fn split_component(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let slash = memchr::memchr(b'/', path)?;
    (slash > 0).then(|| (&path[..slash], &path[slash + 1..]))
}

/// `name` of a directory `<name>-<version>`, where the version is a semver
/// version (crate names have no `.`, so the first `-` followed by one is
/// the split, even in names such as `md-5` or `foo-1`).
fn crate_name_of_versioned_dir(dir: &[u8]) -> Option<&[u8]> {
    let dir = std::str::from_utf8(dir).ok()?;
    dir.match_indices('-')
        .map(|(at, _)| at)
        .find(|&at| at > 0 && semver::Version::parse(&dir[at + 1..]).is_ok())
        .map(|at| &dir.as_bytes()[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stable(path: &str) -> String {
        String::from_utf8(stable_source_path(path.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn a_registry_dependency_loses_its_version_and_home() {
        let a = "/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/crossbeam-epoch-0.9.15/src/atomic.rs";
        let b = "/home/ci/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/crossbeam-epoch-0.9.16/src/atomic.rs";
        assert_eq!(stable(a), "registry:crossbeam-epoch/src/atomic.rs");
        assert_eq!(stable(a), stable(b));
        assert_eq!(
            stable("/c/registry/src/i/md-5-0.10.6/src/lib.rs"),
            "registry:md-5/src/lib.rs"
        );
        assert_eq!(
            stable("/c/registry/src/i/foo-1-2.0.0-rc.1+build.5/src/a/b.rs"),
            "registry:foo-1/src/a/b.rs"
        );
    }

    #[test]
    fn a_git_dependency_loses_its_revision() {
        assert_eq!(
            stable("/c/git/checkouts/regex-1a2b3c4d5e6f7a8b/0123abc/regex-syntax/src/lib.rs"),
            "git:regex-1a2b3c4d5e6f7a8b/regex-syntax/src/lib.rs"
        );
    }

    #[test]
    fn other_paths_are_kept_whole() {
        for path in [
            "src/lib.rs",
            "crates/ignore/src/walk.rs",
            "/rustc/4eb161250e340c8f48f66e2b929ef4a5bed7c181/library/core/src/str/mod.rs",
            // Not `<name>-<version>`: a workspace that happens to live there.
            "/x/registry/src/index/not-a-version/src/lib.rs",
            "/x/registry/src/index/-1.0.0/src/lib.rs",
            "/x/registry/src/index/",
            "/x/git/checkouts/repo/",
        ] {
            assert_eq!(stable(path), path);
        }
    }
}
