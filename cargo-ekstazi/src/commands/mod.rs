//! What the commands share: the state directory's lock, notes about the
//! records, and the housekeeping a recording run does.

pub mod list;
pub mod merge_state;
pub mod nextest;
pub mod test;
pub mod why;

use crate::report::{self, Tally};
use crate::session::{self, Planned, Session};
use crate::style;
use anyhow::{Context, Result};
use ekstazi_core::filter::Filter;
use ekstazi_core::settings::Granularity;
use std::io::Write;

/// The plan of a run that runs tests (`test`, `nextest`): the analysis, the
/// housekeeping a recording run does before running (records of removed
/// tests forgotten, unaffected ones re-pointed at this build), and the
/// selection line printed. Also returns the tally so far and, when nothing
/// is selected, the sentence that says why.
pub fn plan_run(
    session: &mut Session,
    filter: &Filter,
    recording: bool,
    verbose: bool,
) -> Result<(Vec<Planned>, Tally, Option<String>)> {
    let plan = session.analyse(filter);
    if recording {
        forget_removed_tests(session)?;
        repoint_unaffected(session, &plan);
    }
    if verbose {
        print_timings(session);
    }
    let selected = plan.iter().filter(|p| p.selected()).count();
    let tally = Tally::of_plan(&plan);
    writeln!(
        anstream::stdout(),
        "{}",
        report::selection_line(&tally, selected, session.settings.partition)
    )?;
    let nothing = report::nothing_to_run(&tally, selected, plan.len());
    Ok((plan, tally, nothing))
}

/// Takes the state directory's run lock, saying so when another run holds
/// it (and failing at once without `wait`). A state directory that cannot be
/// written is not fatal: the run selects from the records it can read, runs,
/// and records nothing (`None`), and says so.
pub fn lock_store(session: &Session, wait: bool) -> Result<Option<ekstazi_core::store::StoreLock>> {
    let root = session.store.root();
    let unwritable = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied
                | std::io::ErrorKind::ReadOnlyFilesystem
                | std::io::ErrorKind::StorageFull
        )
    };
    match session.store.lock(true, false) {
        Ok(lock) => Ok(Some(lock)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && !wait => Err(anyhow::anyhow!(
            "another cargo-ekstazi run holds the state directory {} (--no-wait)",
            root.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            style::note(format!(
                "waiting for another cargo-ekstazi run to release {}",
                root.display()
            ));
            session
                .store
                .lock(true, true)
                .map(Some)
                .with_context(|| format!("cannot lock the state directory {}", root.display()))
        }
        Err(e) if unwritable(&e) => {
            style::warn(format!(
                "the state directory {} cannot be written ({e}): tests are selected from the records \
                 that can be read, and none is recorded",
                root.display()
            ));
            Ok(None)
        }
        Err(e) => {
            Err(e).with_context(|| format!("cannot lock the state directory {}", root.display()))
        }
    }
}

/// Says which binaries fall back to binary granularity, and why.
pub fn note_fallbacks(session: &Session) {
    if session.granularity != Granularity::Function {
        return;
    }
    for (binary, code) in session.built.binaries.iter().zip(&session.code) {
        if let Err(why) = code
            && binary.doctests.is_none()
        {
            style::note(format!(
                "{} depends on its whole binary (binary granularity): {why}",
                binary.key
            ));
        }
    }
}

pub fn note_other_versions(session: &Session) {
    for version in session.store.other_versions() {
        style::note(format!(
            "records of format {version} in {} are ignored (this cargo-ekstazi writes v{}); \
             they are left in place",
            session.store.root().display(),
            ekstazi_core::record::FORMAT_VERSION
        ));
    }
}

/// A test unaffected by a rebuild keeps its record, re-expressed against
/// the new build's fingerprints: the next comparison is then against the
/// present (quicker), and the old fingerprints can go.
pub fn repoint_unaffected(session: &Session, plan: &[session::Planned]) {
    for planned in plan.iter().filter(|p| p.unaffected()) {
        let Some(record) = &planned.last else {
            continue;
        };
        if let Some(updated) = session.repointed(&planned.case, record)
            && session.store.save(&updated).is_err()
        {
            // Not fatal: the old record still holds, with the old fingerprints.
            continue;
        }
    }
}

/// Removes the function fingerprints no record names any more.
pub fn forget_unused_snapshots(session: &Session) {
    if let Ok(referenced) = session.store.referenced_snapshots() {
        let _ = session.store.retain_snapshots(&referenced);
    }
}

/// Removes the records of tests and targets that no longer exist.
pub fn forget_removed_tests(session: &Session) -> Result<()> {
    for (index, binary) in session.built.binaries.iter().enumerate() {
        let names = session
            .tests
            .iter()
            .filter(|t| t.binary == index)
            .map(|t| t.name.as_str());
        session
            .store
            .retain_tests(&binary.key, names)
            .with_context(|| format!("cannot clean the records of {}", binary.key))?;
    }
    let keys = session.ws.all_binary_keys();
    session
        .store
        .retain_binaries(keys.iter().map(String::as_str))
        .context("cannot clean the records of removed targets")?;
    Ok(())
}

/// Never select from nothing silently: says when there are no records to
/// select from. Loudly on CI, where it usually means the state directory
/// was not restored from the cache.
pub fn note_missing_records(session: &Session) {
    let settings = &session.settings;
    if settings.skipme || settings.forceall || session.store.has_records() {
        return;
    }
    let root = session.store.root().display();
    if style::on_ci() {
        style::warn(format!(
            "no records in {root} on this CI machine: every test runs. Restore the state \
             directory from a cache before `cargo ekstazi` runs (README, \"In CI\") to run \
             only the affected tests"
        ));
    } else {
        style::note(format!(
            "no records yet in {root}: every test runs, and is recorded"
        ));
    }
}

/// `-v`: where the time went.
pub fn print_timings(session: &Session) {
    eprintln!(
        "cargo-ekstazi: {}",
        session::describe_timings(&session.timings)
    );
}
