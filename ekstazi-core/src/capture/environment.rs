//! Environment variables as dependencies.
//!
//! The shim reports every `getenv` with the value the process saw. A test
//! depends on a variable when the value it saw is the one the runner gave
//! it ([`Environment`]): a value the test (or a process between it and the
//! reader) set itself comes from code that is already a dependency.
//!
//! Values are compared *normalised*, so that a record stays valid in another
//! checkout and across runs:
//! - the tool's own per-run variables (`EKSTAZI_*`) are never dependencies;
//! - the shim's entry is taken out of `LD_PRELOAD`;
//! - absolute paths of the workspace, the target directory, cargo's home and
//!   the toolchain are replaced by placeholders (`CARGO_MANIFEST_DIR`,
//!   `OUT_DIR`, `CARGO_BIN_EXE_*`, `LD_LIBRARY_PATH`, `CARGO`, ...).
//!
//! Walking the whole environment (`std::env::vars`, which reads `environ`
//! directly) cannot be seen by an `LD_PRELOAD` shim. The function
//! fingerprints see it instead: a test that executed a function whose code
//! calls one of std's walkers, or reads `environ` itself, depends on every
//! variable it was given ([`Environment::walked`]) but the tool's own and
//! the ignored ones: on each one's value, and on which there are. What a test passes on to a child process through
//! `Command` is seen when the child reads it.

use crate::model::dep::{EnvName, Sum};
use crate::model::path::{Anchors, Placeholders, normalize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The prefix of the variables cargo-ekstazi sets for its own use.
pub const OWN_PREFIX: &[u8] = b"EKSTAZI_";

/// Whether a variable is the tool's own (never a dependency).
pub fn is_own(name: &[u8]) -> bool {
    name.starts_with(OWN_PREFIX)
}

/// The environment a test process starts with, and how its values are
/// normalised.
#[derive(Clone, Debug)]
pub struct Environment {
    vars: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Directories replaced by placeholders.
    placeholders: Placeholders,
    /// The directory the shim is written to: its `LD_PRELOAD` entry is ours.
    shim_dir: Vec<u8>,
    /// Names left out of [`Environment::walked`] (`[ignore] env` and the
    /// shell's bookkeeping).
    ignored: crate::capture::ignore::EnvIgnore,
}

impl Environment {
    /// `vars` in the order they are applied (later ones win), as the runner
    /// builds the test's environment. `sysroot` is the toolchain's root and
    /// `shim_dir` the directory holding the shim.
    pub fn new(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        anchors: &Anchors,
        sysroot: Option<&Path>,
        shim_dir: &Path,
    ) -> Environment {
        let vars = vars
            .into_iter()
            .map(|(k, v)| (k.into_vec(), v.into_vec()))
            .collect();
        Environment {
            vars,
            placeholders: Placeholders::new(anchors, sysroot),
            shim_dir: normalize(shim_dir).as_os_str().as_bytes().to_vec(),
            ignored: crate::capture::ignore::EnvIgnore::default(),
        }
    }

    /// Leaves the variables these rules ignore in a walk out of
    /// [`Environment::walked`].
    pub fn ignoring(mut self, names: crate::capture::ignore::EnvIgnore) -> Environment {
        self.ignored = names;
        self
    }

    /// The variables a walk of the environment sees, in name order: every
    /// one given, but cargo-ekstazi's own, the ignored ones and the shell's
    /// bookkeeping ([`crate::capture::ignore::SHELL_BOOKKEEPING`]).
    pub fn walked(&self) -> impl Iterator<Item = EnvName> + '_ {
        self.vars
            .keys()
            .filter(|name| !is_own(name) && !self.ignored.ignores_in_walk(name))
            .map(|name| EnvName(name.clone()))
    }

    /// The checksum of which variables a walk sees ([`Environment::walked`]):
    /// their names, not their values (each value is a dependency of its
    /// own, so that a change names its variable).
    pub fn walked_names(&self) -> Sum {
        let mut hasher = blake3::Hasher::new();
        for name in self.walked() {
            hasher.update(&(name.0.len() as u64).to_le_bytes());
            hasher.update(&name.0);
        }
        Sum::Hash(*hasher.finalize().as_bytes())
    }

    /// `root` holds the tests' private temporary directories: a test's is
    /// compared by its place under it, wherever the tool put the root (it
    /// depends on the checkout's path).
    pub fn with_private_tmp(mut self, root: &Path) -> Environment {
        self.placeholders.add(root, b"${PRIVATE_TMP}");
        self
    }

    /// The same environment with one variable set (a test's own `TMPDIR`).
    pub fn with_var(&self, name: &[u8], value: &[u8]) -> Environment {
        let mut env = self.clone();
        env.vars.insert(name.to_vec(), value.to_vec());
        env
    }

    /// The value the test process is given.
    pub fn given(&self, name: &[u8]) -> Option<&[u8]> {
        self.vars.get(name).map(Vec::as_slice)
    }

    /// The checksum of a variable as given: a digest of its normalised value,
    /// or `Absent`.
    pub fn sum(&self, name: &EnvName) -> Sum {
        match self.given(&name.0) {
            None => Sum::Absent,
            Some(value) => {
                let mut hasher = blake3::Hasher::new();
                hasher.update(&self.normalize(&name.0, value));
                Sum::Hash(*hasher.finalize().as_bytes())
            }
        }
    }

    /// A value as records compare it.
    pub fn normalize(&self, name: &[u8], value: &[u8]) -> Vec<u8> {
        let value = if name == b"LD_PRELOAD" {
            self.without_shim(value)
        } else {
            value.to_vec()
        };
        self.placeholders.replace(&value)
    }

    /// `LD_PRELOAD` without the shim's entry (entries are separated by
    /// colons or spaces).
    fn without_shim(&self, value: &[u8]) -> Vec<u8> {
        let kept: Vec<&[u8]> = value
            .split(|b| *b == b':' || *b == b' ')
            .filter(|entry| !entry.is_empty())
            .filter(|entry| {
                let path = PathBuf::from(std::ffi::OsStr::from_bytes(entry));
                path.parent().map(normalize).as_deref()
                    != Some(Path::new(std::ffi::OsStr::from_bytes(&self.shim_dir)))
            })
            .collect();
        kept.join(&b':')
    }
}

/// What an environment event says: the name, and the value seen (`None`:
/// unset). `long`: the value was too long for the shim to carry.
pub fn parse_event(payload: &[u8]) -> (&[u8], Option<&[u8]>) {
    match memchr::memchr(b'=', payload) {
        Some(at) => (&payload[..at], Some(&payload[at + 1..])),
        None => (payload, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Environment {
        let anchors = Anchors::new(
            Path::new("/ws"),
            Path::new("/ws/target"),
            Some(Path::new("/home/u/.cargo")),
        );
        Environment::new(
            vars.iter().map(|(k, v)| (k.into(), v.into())),
            &anchors,
            Some(Path::new("/home/u/.rustup/toolchains/stable")),
            Path::new("/ws/target/ekstazi"),
        )
    }

    fn norm(e: &Environment, name: &str, value: &str) -> String {
        String::from_utf8(e.normalize(name.as_bytes(), value.as_bytes())).unwrap()
    }

    #[test]
    fn workspace_paths_are_placeholders() {
        let e = env(&[]);
        assert_eq!(
            norm(&e, "CARGO_MANIFEST_DIR", "/ws/beta"),
            "${WORKSPACE}/beta"
        );
        assert_eq!(
            norm(&e, "CARGO_BIN_EXE_helper", "/ws/target/debug/helper"),
            "${CARGO_TARGET_DIR}/debug/helper"
        );
        assert_eq!(
            norm(
                &e,
                "LD_LIBRARY_PATH",
                "/ws/target/debug:/home/u/.rustup/toolchains/stable/lib:/usr/lib"
            ),
            "${CARGO_TARGET_DIR}/debug:${SYSROOT}/lib:/usr/lib"
        );
        assert_eq!(
            norm(&e, "X", "/wsx/a"),
            "/wsx/a",
            "a prefix of a name is not a path"
        );
        assert_eq!(norm(&e, "X", "a/ws/b"), "a/ws/b", "not at a path's start");
        assert_eq!(norm(&e, "X", "--dir=/ws"), "--dir=${WORKSPACE}");
        assert_eq!(norm(&e, "MODE", "fast"), "fast");
    }

    #[test]
    fn the_shim_is_taken_out_of_ld_preload() {
        let e = env(&[]);
        assert_eq!(
            norm(
                &e,
                "LD_PRELOAD",
                "/ws/target/ekstazi/libekstazi_runtime-ab.so"
            ),
            ""
        );
        assert_eq!(
            norm(
                &e,
                "LD_PRELOAD",
                "/ws/target/ekstazi/libekstazi_runtime-ab.so:/usr/lib/libfaketime.so"
            ),
            "/usr/lib/libfaketime.so"
        );
    }

    #[test]
    fn sums_follow_the_normalised_value() {
        let here = env(&[("MODE", "fast"), ("DIR", "/ws/data")]);
        let anchors = Anchors::new(Path::new("/ci"), Path::new("/ci/target"), None);
        let there = Environment::new(
            [
                ("MODE".into(), "fast".into()),
                ("DIR".into(), "/ci/data".into()),
            ],
            &anchors,
            None,
            Path::new("/ci/target/ekstazi"),
        );
        let name = |n: &str| EnvName(n.as_bytes().to_vec());
        assert_eq!(here.sum(&name("DIR")), there.sum(&name("DIR")));
        assert_eq!(here.sum(&name("MODE")), there.sum(&name("MODE")));
        assert_eq!(here.sum(&name("NOPE")), Sum::Absent);
        assert_ne!(here.sum(&name("MODE")), here.sum(&name("DIR")));
    }

    #[test]
    fn a_private_tmpdir_is_compared_by_its_place_under_its_root() {
        let here = env(&[("TMPDIR", "/tmp")]).with_private_tmp(Path::new("/tmp/ekstazi-1"));
        let there = env(&[]).with_private_tmp(Path::new("/var/tmp/ekstazi-2"));
        let name = EnvName(b"TMPDIR".to_vec());
        let a = here.with_var(b"TMPDIR", b"/tmp/ekstazi-1/t-a");
        assert_eq!(a.given(b"TMPDIR"), Some(&b"/tmp/ekstazi-1/t-a"[..]));
        assert_eq!(here.given(b"TMPDIR"), Some(&b"/tmp"[..]), "a copy");
        assert_eq!(
            a.sum(&name),
            there
                .with_var(b"TMPDIR", b"/var/tmp/ekstazi-2/t-a")
                .sum(&name)
        );
        assert_ne!(
            a.sum(&name),
            there
                .with_var(b"TMPDIR", b"/var/tmp/ekstazi-2/t-b")
                .sum(&name)
        );
        assert_ne!(a.sum(&name), here.sum(&name));
    }

    #[test]
    fn events_parse() {
        assert_eq!(parse_event(b"A=b=c"), (&b"A"[..], Some(&b"b=c"[..])));
        assert_eq!(parse_event(b"A="), (&b"A"[..], Some(&b""[..])));
        assert_eq!(parse_event(b"A"), (&b"A"[..], None));
        assert!(is_own(b"EKSTAZI_TRACE_FILE"));
        assert!(!is_own(b"MODE"));
    }
}
