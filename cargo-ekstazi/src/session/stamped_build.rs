//! The test build, skipped when its stamp holds: cargo's own check that
//! nothing changed reads every unit's fingerprint, and on a workspace of a
//! hundred crates costs more than the rest of a run with nothing changed.
//! The stamp (`ekstazi_core::storage::build_stamp`) names every file the
//! last build read or made by its identity, and the variables it read;
//! while each is as it was, that build's binaries are the ones cargo would
//! give, and cargo is not started. Anything else starts cargo, as before,
//! and stamps its build anew.

use crate::cargo::build_footprint::Gathered;
use crate::cargo::test_build::{self, Built, Request};
use crate::cargo::workspace::Workspace;
use anyhow::Result;
use ekstazi_core::model::dep::Hash;
use ekstazi_core::storage::build_stamp::BuildStamp;
use ekstazi_core::storage::store::Store;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// How the test binaries came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// cargo built them (or found them fresh).
    Cargo,
    /// Nothing cargo reads changed since the stamped build: its binaries,
    /// without starting cargo.
    Stamped,
}

/// The binaries `request` builds: the stamped build's while the stamp
/// `store` keeps holds, else cargo's, whose build is then stamped. Without
/// a store (`--skipme`, which writes no state), cargo's.
pub fn build(
    ws: &Workspace,
    store: Option<&Store>,
    request: Request,
    linked: &dyn Fn(&Path),
) -> Result<(Built, Provenance)> {
    let Some(store) = store else {
        let (built, _) = test_build::build(ws, request, linked)?;
        return Ok((built, Provenance::Cargo));
    };
    if let Some(built) = stamped(ws, store, &request.digest) {
        return Ok((built, Provenance::Stamped));
    }
    let digest = request.digest;
    let started = SystemTime::now();
    match test_build::build(ws, request, linked) {
        Ok((built, gathered)) => {
            stamp(ws, store, digest, gathered, &built, started);
            Ok((built, Provenance::Cargo))
        }
        Err(e) => {
            // Not fatal: a stamp holds only while nothing changed.
            let _ = store.forget_build_stamp();
            Err(e)
        }
    }
}

/// The binaries of the stamped build, if its stamp holds for `request`
/// and every program it names is in the target directory (a stamp is
/// state, and state can be handed over: it names nothing else to run).
fn stamped(ws: &Workspace, store: &Store, request: &Hash) -> Option<Built> {
    let stamp = store.build_stamp()?;
    let built: Built = serde_json::from_slice(stamp.payload()).ok()?;
    let inside = made(&built).all(|path| path.starts_with(&ws.target_dir));
    (inside && stamp.holds(request)).then_some(built)
}

/// Keeps the stamp of the build that made `built`; a build that cannot be
/// stamped forgets the last stamp instead. Not fatal either way: the next
/// run starts cargo.
fn stamp(
    ws: &Workspace,
    store: &Store,
    request: Hash,
    gathered: Gathered,
    built: &Built,
    started: SystemTime,
) {
    let stamp = gathered
        .inputs(ws, made(built).collect())
        .ok()
        .zip(serde_json::to_vec(built).ok())
        .and_then(|(inputs, payload)| BuildStamp::take(request, inputs, payload, started).ok());
    let _ = match stamp {
        Some(stamp) => store.save_build_stamp(&stamp),
        None => store.forget_build_stamp(),
    };
}

/// The programs a build made that its tests run: the test binaries, and
/// the binaries they are given (`CARGO_BIN_EXE_<name>`).
fn made(built: &Built) -> impl Iterator<Item = PathBuf> + '_ {
    built.binaries.iter().flat_map(|b| {
        std::iter::once(b.path.clone()).chain(b.bin_exes.iter().map(|(_, p)| p.clone()))
    })
}
