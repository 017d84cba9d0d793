//! A test build carried to another machine in a nextest archive
//! (`cargo ekstazi nextest archive`), and unpacked there.
//!
//! The archive is cargo-nextest's own (`cargo nextest archive` of the
//! instrumented build): a `.tar.zst` whose every entry is under `target/`.
//! Beside the binaries it carries one more file of ours, [`MANIFEST`] at the
//! root of the archived target directory (nextest's `archive.include` puts
//! it there, and nextest ignores it when it unpacks). The [`BuildManifest`] says
//! what cargo's messages said on the building machine and what no longer
//! can be asked there: each binary's key, path and package, its build
//! script's output, its `CARGO_BIN_EXE_*` programs, and the toolchain and
//! flags the build was made with. Every path in it is relative to the
//! archived target directory or to the workspace root, so that the build
//! can be unpacked in another directory on another machine.
//!
//! [`unpack`] puts the archive's `target/` where the instrumented build of
//! this workspace goes (`<target>/ekstazi/build`): a record made from the
//! unpacked build names the same paths as one made by a local build.
//! It reads the archive as a stream (`ekstazi_core`'s hardened tar reader,
//! rather than the `tar` crate, for the reasons given there), takes only
//! regular files with plain relative names, and leaves no instrumentation
//! marker, so that a later local build starts from an empty directory.

use crate::cargo::test_build::{Built, TestBinary};
use crate::cargo::workspace::Workspace;
use crate::cli::CargoOpts;
use anyhow::{Context, Result, bail};
use ekstazi_core::storage::archive::tar_reader::TarReader;
use serde::{Deserialize, Serialize};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The manifest's name, in the archived target directory.
pub const MANIFEST: &str = "ekstazi-build.json";
/// Bumped when the manifest changes shape.
const FORMAT: u32 = 1;
/// Every entry of a nextest archive is under this directory.
const ARCHIVE_ROOT: &str = "target";
/// Bounds on what is unpacked: far above a real build (ripgrep's
/// instrumented test binaries archive to about 300 MB), short of filling a
/// runner's disk or inodes from a damaged file.
const MAX_ENTRIES: usize = 1_000_000;
const MAX_BYTES: u64 = 64 << 30;

/// What selection on another machine needs to know of a build that it
/// cannot ask cargo there.
#[derive(Debug, Serialize, Deserialize)]
pub struct BuildManifest {
    pub format: u32,
    /// cargo-ekstazi's version and its shim's digest: only the same tool
    /// reads the build and its coverage the same way.
    pub tool: String,
    /// `rustc -vV` of the toolchain that built it.
    pub rustc_version: String,
    /// The compiler flags of the environment it was built in.
    pub rustflags: String,
    pub host: String,
    /// The cargo options it was built with (package and target selection,
    /// features, profile).
    pub cargo: CargoOpts,
    pub binaries: Vec<ArchivedBinary>,
    /// Native library directories, relative to the target directory.
    pub native_dirs: Vec<PathBuf>,
}

/// One test binary of the archive.
#[derive(Debug, Serialize, Deserialize)]
pub struct ArchivedBinary {
    pub key: String,
    /// Relative to the target directory.
    pub path: PathBuf,
    /// Its package's manifest, relative to the workspace root.
    pub manifest: PathBuf,
    /// Relative to the target directory.
    pub out_dir: Option<PathBuf>,
    /// Relative to the target directory.
    pub bin_exes: Vec<(String, PathBuf)>,
    pub custom_harness: bool,
}

impl BuildManifest {
    /// The manifest of `built`, made in `build_dir` (the instrumented
    /// build's target directory) of `ws`.
    pub fn of(
        ws: &Workspace,
        built: &Built,
        build_dir: &Path,
        cargo: &CargoOpts,
        tool: String,
        rustflags: String,
    ) -> Result<BuildManifest> {
        let in_build = |path: &Path| relative(path, build_dir, "the target directory");
        let binaries = built
            .binaries
            .iter()
            .filter(|b| b.doctests.is_none())
            .map(|b| {
                Ok(ArchivedBinary {
                    key: b.key.clone(),
                    path: in_build(&b.path)?,
                    manifest: relative(&b.manifest_path, &ws.root, "the workspace")?,
                    out_dir: b.out_dir.as_deref().map(in_build).transpose()?,
                    bin_exes: b
                        .bin_exes
                        .iter()
                        .map(|(name, path)| Ok((name.clone(), in_build(path)?)))
                        .collect::<Result<_>>()?,
                    custom_harness: b.custom_harness,
                })
            })
            .collect::<Result<_>>()?;
        // A native directory outside the build (a system library) is found
        // on the other machine where it is found here, or not at all.
        let native_dirs = built
            .native_dirs
            .iter()
            .filter_map(|d| in_build(d).ok())
            .collect();
        Ok(BuildManifest {
            format: FORMAT,
            tool,
            rustc_version: ws.rustc_version.clone(),
            rustflags,
            host: ws.host.clone(),
            cargo: CargoOpts {
                manifest_path: None,
                target_dir: None,
                ..cargo.clone()
            },
            binaries,
            native_dirs,
        })
    }

    /// Writes it where `cargo nextest archive` takes it from.
    pub fn write(&self, build_dir: &Path) -> Result<PathBuf> {
        let path = build_dir.join(MANIFEST);
        let text = serde_json::to_vec_pretty(self)?;
        fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// The build as the session reads it, its paths in `build_dir` and in
    /// the workspace `ws`.
    pub fn built(&self, ws: &Workspace, build_dir: &Path) -> Result<Built> {
        let binaries = self
            .binaries
            .iter()
            .map(|b| {
                let manifest_path = ws.root.join(&b.manifest);
                let package_id = ws
                    .packages
                    .values()
                    .find(|p| p.manifest_path.as_std_path() == manifest_path)
                    .map(|p| p.id.clone())
                    .with_context(|| {
                        format!(
                            "the archive's test binary {} belongs to {}, which is not a package \
                             of the workspace at {}: is it the commit the archive was built from?",
                            b.key,
                            b.manifest.display(),
                            ws.root.display()
                        )
                    })?;
                Ok(TestBinary {
                    key: b.key.clone(),
                    path: build_dir.join(&b.path),
                    package_id,
                    manifest_path,
                    out_dir: b.out_dir.as_ref().map(|d| build_dir.join(d)),
                    bin_exes: b
                        .bin_exes
                        .iter()
                        .map(|(name, path)| (name.clone(), build_dir.join(path)))
                        .collect(),
                    custom_harness: b.custom_harness,
                    doctests: None,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Built {
            binaries,
            native_dirs: self.native_dirs.iter().map(|d| build_dir.join(d)).collect(),
            ..Built::default()
        })
    }
}

/// The files besides the binaries that the archive must carry, relative to
/// `build_dir`: the manifest, and the linker maps (or the extents kept of
/// them) the function fingerprints are read with (for a `CARGO_BIN_EXE_*`
/// program copied out of `deps/`, the original its map is found beside
/// too).
pub fn extra_files(built: &Built, build_dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from(MANIFEST)];
    let programs = built
        .binaries
        .iter()
        .filter(|b| b.doctests.is_none())
        .flat_map(|b| std::iter::once(&b.path).chain(b.bin_exes.iter().map(|(_, p)| p)));
    for program in programs {
        let Some(map) = ekstazi_core::digests::program::map_path(program)
            .or_else(|| ekstazi_core::digests::program::kept_extents_path(program))
        else {
            continue;
        };
        let original = map.with_extension("");
        if original != *program {
            files.extend(relative(&original, build_dir, "").ok());
        }
        files.extend(relative(&map, build_dir, "").ok());
    }
    files.sort();
    files.dedup();
    files
}

/// `path` relative to `base`, which it must be in.
fn relative(path: &Path, base: &Path, what: &str) -> Result<PathBuf> {
    match path.strip_prefix(base) {
        Ok(rel) => Ok(rel.to_owned()),
        Err(_) => bail!(
            "{} is outside {what} ({}): it cannot be carried in an archive",
            path.display(),
            base.display()
        ),
    }
}

/// Whether the nextest archive at `archive` carries a manifest (a
/// repository's own `archive.include` replaces the one that adds it).
pub fn has_manifest(archive: &Path) -> Result<bool> {
    let mut found = false;
    walk(archive, |rel, _, tar| {
        found |= rel == Path::new(MANIFEST);
        tar.skip_data()?;
        Ok(())
    })?;
    Ok(found)
}

/// Unpacks the nextest archive at `archive` into `build_dir` (emptied
/// first), and reads its manifest.
pub fn unpack(archive: &Path, build_dir: &Path) -> Result<BuildManifest> {
    if !archive.is_file() {
        bail!("no archive at {}", archive.display());
    }
    if build_dir.exists() {
        fs::remove_dir_all(build_dir)
            .with_context(|| format!("cannot empty {}", build_dir.display()))?;
    }
    fs::create_dir_all(build_dir)
        .with_context(|| format!("cannot create {}", build_dir.display()))?;
    walk(archive, |rel, header, tar| {
        let to = build_dir.join(rel);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut out = fs::File::create(&to)?;
        match &header.sparse {
            // nextest archives a linked executable with holes as sparse.
            Some(sparse) => tar.copy_sparse(sparse, &mut out)?,
            None => tar.copy_data(header.size, &mut out)?,
        }
        out.set_permissions(fs::Permissions::from_mode(header.mode & 0o777))?;
        Ok(())
    })
    .with_context(|| format!("cannot unpack the archive {}", archive.display()))?;
    read_manifest(build_dir).with_context(|| {
        format!(
            "{} is not an archive made by `cargo ekstazi nextest archive`",
            archive.display()
        )
    })
}

/// Reads the manifest unpacked in `build_dir`.
fn read_manifest(build_dir: &Path) -> Result<BuildManifest> {
    let path = build_dir.join(MANIFEST);
    let text = fs::read(&path).with_context(|| format!("it has no {MANIFEST}"))?;
    let format: serde_json::Value =
        serde_json::from_slice(&text).with_context(|| format!("its {MANIFEST} is damaged"))?;
    if format["format"].as_u64() != Some(u64::from(FORMAT)) {
        bail!(
            "its {MANIFEST} is of format {}; this cargo-ekstazi reads format {FORMAT}",
            format["format"]
        );
    }
    serde_json::from_value(format).with_context(|| format!("its {MANIFEST} is damaged"))
}

type Tar = TarReader<zstd::stream::read::Decoder<'static, std::io::BufReader<fs::File>>>;
type Header = ekstazi_core::storage::archive::tar_reader::Header;

/// Calls `each` with every regular file of the archive, sparse or not (its
/// path inside `target/`), within the bounds; other entries are passed
/// over.
fn walk(
    archive: &Path,
    mut each: impl FnMut(&Path, &Header, &mut Tar) -> std::io::Result<()>,
) -> Result<()> {
    let file = fs::File::open(archive)
        .with_context(|| format!("cannot open the archive {}", archive.display()))?;
    let decoder = zstd::stream::read::Decoder::new(file)?;
    let mut tar = TarReader::with_limit(decoder, MAX_BYTES);
    let mut entries = 0;
    while let Some(header) = tar
        .next_header()
        .with_context(|| format!("{} is not a nextest archive", archive.display()))?
    {
        entries += 1;
        if entries > MAX_ENTRIES {
            bail!("the archive has over {MAX_ENTRIES} entries");
        }
        if tar.read.saturating_add(header.size) > MAX_BYTES {
            bail!("the archive holds over {MAX_BYTES} bytes");
        }
        if header
            .sparse
            .as_ref()
            .is_some_and(|s| s.real_size > MAX_BYTES)
        {
            bail!("the archive holds a file of over {MAX_BYTES} bytes");
        }
        if !header.is_regular() && !header.is_sparse() {
            continue;
        }
        let path = Path::new(std::ffi::OsStr::from_bytes(&header.path));
        let Some(rel) = inside_root(path) else {
            bail!(
                "the archive has an entry {} outside `{ARCHIVE_ROOT}/`: it is not a nextest archive",
                path.display()
            );
        };
        each(&rel, &header, &mut tar)?;
    }
    if entries == 0 {
        bail!("{} holds no files", archive.display());
    }
    Ok(())
}

/// `target/<rest>` as `<rest>`, if every component of it is a plain name.
fn inside_root(path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(ARCHIVE_ROOT).ok()?;
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    (plain && rel.components().next().is_some()).then(|| rel.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_under_the_root_are_taken() {
        assert_eq!(
            inside_root(Path::new("target/debug/deps/x")),
            Some(PathBuf::from("debug/deps/x"))
        );
        for bad in [
            "target",
            "other/x",
            "target/../x",
            "/target/x",
            "targetx/y",
            "target/a/../../b",
        ] {
            assert_eq!(inside_root(Path::new(bad)), None, "{bad}");
        }
    }
}
