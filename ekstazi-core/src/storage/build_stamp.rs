//! The last build's stamp: every file `cargo test --no-run` read or wrote
//! to make the test binaries, each by its identity (`stat`, as git's index
//! keeps it), the variables it read, and a digest of how it was asked for.
//! While the stamp holds, cargo would find every unit fresh, so a run
//! takes the binaries the stamp names and does not start cargo at all: on
//! a workspace of a hundred crates, cargo's own check that nothing changed
//! costs more than everything else a run with nothing changed does.
//!
//! Invariants:
//! - a stamp holds only while every file it names has the identity it had
//!   (absent ones still absent), every variable the value it had, and the
//!   request digest is the same: anything else runs cargo, as before;
//! - a stamp is taken only when no source the build read (a file outside
//!   the target directory) changed within the clock's resolution of the
//!   build's start ([`settled_before`]): an edit saved while cargo read the
//!   file could otherwise keep its old identity's place in the stamp, and
//!   the binaries built from the older text would be taken for current;
//! - what the stamp carries for the caller (the build's result) is opaque
//!   here, sealed with the stamp and bounded in size.
//!
//! What the files and variables are, and the request, are the caller's to
//! gather: it knows cargo (`cargo-ekstazi`'s `cargo::build_footprint`).

use crate::files::identity::{Identity, settled_before};
use crate::files::sealed::{open, seal};
use crate::model::dep::Hash;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

const MAGIC: &[u8; 4] = b"EKZD";

/// A stamp lists a build's files and its result: a larger file is not one
/// of ours, and is refused before it is read.
pub const MAX_STAMP_BYTES: u64 = 64 << 20;

/// What a build read and made, as it was when it finished.
#[derive(Debug, Serialize, Deserialize)]
pub struct BuildStamp {
    request: Hash,
    /// Each file by its path's bytes, and its identity (`None`: absent).
    files: Vec<(Vec<u8>, Option<Identity>)>,
    /// Each variable by name, and its value (`None`: unset).
    env: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    payload: Vec<u8>,
}

/// What a build read: sources and variables, and what it wrote.
pub struct Inputs {
    /// Files the build read. Each must be there: a source the build named
    /// that is not is a path this side resolved otherwise than the build
    /// did, and its absence would hold for ever. A change to one since the
    /// build started makes the stamp racy.
    pub sources: Vec<PathBuf>,
    /// Files whose absence the build relied on as much as their presence
    /// (configuration looked up along the directories), racy like sources.
    pub probes: Vec<PathBuf>,
    /// Files the build wrote (binaries, dep-info, build scripts' outputs),
    /// and any under `outputs_root`: new by construction, so not judged racy.
    pub outputs: Vec<PathBuf>,
    /// The directory the build writes into (the target directory): every
    /// file below it counts as an output.
    pub outputs_root: PathBuf,
    /// Variables the build read.
    pub env: Vec<OsString>,
}

/// Why no stamp was taken.
#[derive(Debug, PartialEq, Eq)]
pub enum NotTaken {
    /// A source changed too near the build's start to tell whether the
    /// build read it before or after.
    Racy(PathBuf),
    /// A source the build named is not there.
    Missing(PathBuf),
}

impl BuildStamp {
    /// Stamps a build that started at `started`, asked for as `request`,
    /// that read and made `inputs`, and whose result is `payload`.
    pub fn take(
        request: Hash,
        inputs: Inputs,
        payload: Vec<u8>,
        started: SystemTime,
    ) -> Result<BuildStamp, NotTaken> {
        // Per path: whether it is an output, and whether it must exist.
        let mut paths: Vec<(PathBuf, bool, bool)> = inputs
            .sources
            .into_iter()
            .map(|p| (p, false, true))
            .chain(inputs.probes.into_iter().map(|p| (p, false, false)))
            .chain(inputs.outputs.into_iter().map(|p| (p, true, true)))
            .map(|(p, output, needed)| {
                let output = output || p.starts_with(&inputs.outputs_root);
                (p, output, needed)
            })
            .collect();
        paths.sort();
        // Of the same path's entries, the strictest stays (sorted, `true`
        // after `false`: the last).
        paths.reverse();
        paths.dedup_by(|later, kept| later.0 == kept.0);
        let files: Vec<(PathBuf, bool, bool, Option<Identity>)> = paths
            .into_par_iter()
            .map(|(path, output, needed)| {
                let identity = Identity::of(&path, true);
                (path, output, needed, identity)
            })
            .collect();
        for (path, output, needed, identity) in &files {
            match identity {
                None if *needed => return Err(NotTaken::Missing(path.clone())),
                Some(id) if !output && !settled_before(id.changed(), started) => {
                    return Err(NotTaken::Racy(path.clone()));
                }
                _ => {}
            }
        }
        let mut env: Vec<(Vec<u8>, Option<Vec<u8>>)> = inputs
            .env
            .into_iter()
            .map(|name| {
                let value = std::env::var_os(&name).map(OsString::into_vec);
                (name.into_vec(), value)
            })
            .collect();
        env.sort();
        env.dedup();
        Ok(BuildStamp {
            request,
            files: files
                .into_iter()
                .map(|(path, _, _, identity)| (path.into_os_string().into_vec(), identity))
                .collect(),
            env,
            payload,
        })
    }

    /// Whether the build the stamp describes is the one `request` would
    /// make now: the same request, and every file and variable as it was.
    pub fn holds(&self, request: &Hash) -> bool {
        self.request == *request
            && self.env.iter().all(|(name, value)| {
                std::env::var_os(OsString::from_vec(name.clone())).map(OsString::into_vec) == *value
            })
            && self.files.par_iter().all(|(path, identity)| {
                Identity::of(Path::new(std::ffi::OsStr::from_bytes(path)), true) == *identity
            })
    }

    /// What the caller stamped with the build.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// How many files the stamp names.
    pub fn files(&self) -> usize {
        self.files.len()
    }

    /// The stamp, sealed, as it is written to its file.
    pub fn encode(&self) -> Vec<u8> {
        seal(
            MAGIC,
            &postcard::to_stdvec(self).expect("a stamp always serialises"),
        )
    }

    /// A stamp read back whole, or `None`: a damaged, foreign or older
    /// stamp is no stamp, and cargo runs.
    pub fn decode(bytes: &[u8]) -> Option<BuildStamp> {
        open(MAGIC, bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `sources` of `dir`, and a binary the build made.
    fn inputs(dir: &Path, sources: &[&str]) -> Inputs {
        std::fs::create_dir_all(dir.join("target")).unwrap();
        if !dir.join("target/bin").exists() {
            std::fs::write(dir.join("target/bin"), "bin").unwrap();
        }
        Inputs {
            sources: sources.iter().map(|s| dir.join(s)).collect(),
            probes: vec![dir.join("gone.rs")],
            outputs: vec![dir.join("target/bin")],
            outputs_root: dir.join("target"),
            env: vec!["EKSTAZI_STAMP_TEST_UNSET".into()],
        }
    }

    fn settled() -> SystemTime {
        SystemTime::now() + Duration::from_secs(3)
    }

    #[test]
    fn a_stamp_holds_until_a_file_changes_appears_or_goes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.rs"), "a").unwrap();
        let request = [1; 32];
        let stamp = BuildStamp::take(
            request,
            inputs(dir.path(), &["a.rs"]),
            b"built".to_vec(),
            settled(),
        )
        .unwrap();
        let stamp = BuildStamp::decode(&stamp.encode()).unwrap();
        assert!(stamp.holds(&request));
        assert_eq!(stamp.payload(), b"built");
        assert!(!stamp.holds(&[2; 32]), "another request");

        std::fs::write(dir.path().join("gone.rs"), "").unwrap();
        assert!(!stamp.holds(&request), "a file that was absent appeared");
        std::fs::remove_file(dir.path().join("gone.rs")).unwrap();
        assert!(stamp.holds(&request));

        std::fs::write(dir.path().join("a.rs"), "b").unwrap();
        assert!(!stamp.holds(&request), "a source changed");
    }

    #[test]
    fn an_output_that_changed_breaks_it_too() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.rs"), "a").unwrap();
        let stamp =
            BuildStamp::take([1; 32], inputs(dir.path(), &["a.rs"]), vec![], settled()).unwrap();
        std::fs::remove_file(dir.path().join("target/bin")).unwrap();
        assert!(!stamp.holds(&[1; 32]));
    }

    #[test]
    fn a_source_changed_after_the_build_started_gives_no_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let started = SystemTime::now();
        std::fs::write(dir.path().join("a.rs"), "a").unwrap();
        let taken = BuildStamp::take([1; 32], inputs(dir.path(), &["a.rs"]), vec![], started);
        assert_eq!(taken.unwrap_err(), NotTaken::Racy(dir.path().join("a.rs")));
    }

    #[test]
    fn a_missing_source_gives_no_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let taken = BuildStamp::take([1; 32], inputs(dir.path(), &["a.rs"]), vec![], settled());
        assert_eq!(
            taken.unwrap_err(),
            NotTaken::Missing(dir.path().join("a.rs"))
        );
    }

    #[test]
    fn a_variable_that_changed_breaks_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut with_var = inputs(dir.path(), &[]);
        with_var.env = vec!["PATH".into()];
        let stamp = BuildStamp::take([1; 32], with_var, vec![], settled()).unwrap();
        assert!(stamp.holds(&[1; 32]));
        let mut other = stamp;
        other.env[0].1 = Some(b"/elsewhere".to_vec());
        assert!(!other.holds(&[1; 32]));
    }

    #[test]
    fn a_damaged_stamp_is_no_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let stamp = BuildStamp::take([1; 32], inputs(dir.path(), &[]), vec![7], settled()).unwrap();
        let mut bytes = stamp.encode();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        assert!(BuildStamp::decode(&bytes).is_none());
        assert!(BuildStamp::decode(&bytes[..10]).is_none());
    }
}
