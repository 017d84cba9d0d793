//! The housekeeping of the records around a run: the state directory's
//! lock, the notes about the records, the records written as tests finish,
//! and what a recording run does before and after its tests.

use crate::session::{self, Planned, Session};
use crate::style;
use anyhow::{Context, Result};
use ekstazi_core::model::dep::Hash;
use ekstazi_core::model::record::Record;
use ekstazi_core::options::settings::Granularity;
use ekstazi_core::storage::history::{Filing, Known};
use rayon::prelude::*;

/// What a recording run wrote: each record with the digest its file is
/// sealed with; and, for the summary, the records it could not write.
#[derive(Default)]
pub struct Written {
    pub records: Vec<(Record, Hash)>,
    pub errors: Vec<String>,
}

impl Written {
    /// Writes the record of the test labelled `label`.
    pub fn save(&mut self, session: &Session, label: &str, record: Record) {
        match session.save_record(&record) {
            Ok(sealed) => self.records.push((record, sealed)),
            Err(e) => self.errors.push(format!("{label}: {e}")),
        }
    }
}

/// Takes the state directory's run lock, saying so when another run holds
/// it (and failing at once without `wait`). A state directory that cannot be
/// written is not fatal: the run selects from the records it can read, runs,
/// and records nothing (`None`), and says so.
pub fn lock_store(
    session: &Session,
    wait: bool,
) -> Result<Option<ekstazi_core::storage::store::StoreLock>> {
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
    if session.options.granularity != Granularity::Function {
        return;
    }
    for (binary, code) in session.built.binaries.iter().zip(session.code_made()) {
        if let Some(Err(why)) = code
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
    if format_changed(session) {
        // `note_missing_records` said it, with what it means for this run.
        return;
    }
    for version in session.store.other_versions() {
        style::note(format!(
            "records of format {version} in {} are ignored (this cargo-ekstazi writes v{}); \
             they are left in place",
            session.store.root().display(),
            ekstazi_core::files::sealed::FORMAT_VERSION
        ));
    }
}

/// A test that a record filed under another commit vouched for takes that
/// record as its current one: the next run starts from it.
pub fn adopt_vouching_records(session: &Session, plan: &[Planned]) {
    for planned in plan
        .iter()
        .filter(|p| p.unaffected() && p.vouched.is_some())
    {
        if let Some(record) = planned.last.as_ref().and_then(|last| last.record()) {
            // Not fatal: the filed record vouches again next time.
            let _ = session.store.save(record);
        }
    }
}

/// What a recording run does once its tests have finished: files the
/// records that held for each test it decided under `HEAD` (see
/// [`file_history`]), drops the fingerprints of builds it did not use, and,
/// when the function table has grown well past what records name, collects
/// it (`ekstazi_core::storage::gc`).
/// `written` holds each record this run wrote, with the digest its file
/// is sealed with.
pub fn finish_recording(session: &Session, plan: &[Planned], written: &[(Record, Hash)]) {
    file_history(session, plan, written);
    forget_unused_snapshots(session);
    let table = session.snapshots.table();
    if ekstazi_core::storage::gc::due(&session.store, table) {
        // Not fatal: what is left over costs only disk until the next time.
        let _ = ekstazi_core::storage::gc::collect(&session.store, table);
    }
}

/// Files under `HEAD`, for every test this run decided, the record that
/// holds there: the one it wrote (`written`), or the one that vouched for a
/// skipped test. Only when the run saw one clean `HEAD` from start to end;
/// then the history is pruned to its bound.
fn file_history(session: &Session, plan: &[Planned], written: &[(Record, Hash)]) {
    let Some(repo) = &session.repo else {
        return;
    };
    if !repo.clean {
        return;
    }
    if !repo.unchanged() {
        style::note(
            "HEAD or the work tree changed while the tests ran: this run's records are not filed \
             under a commit",
        );
        return;
    }
    let history = session.history();
    let mut records: Vec<Filing<'_>> = written
        .iter()
        .map(|(record, sealed)| Filing::of(record, true, Known::Current(*sealed)))
        .collect();
    // A skipped test held by its index entry alone is read whole only
    // when the history does not hold its record already (as after a run
    // with nothing changed, it does).
    let skipped: Vec<&Planned> = plan
        .iter()
        .filter(|p| p.unaffected() && p.last.is_some())
        .collect();
    let known: Vec<Known> = skipped.iter().map(|p| p.last_known).collect();
    let knows = history.knows(&known);
    let read: Vec<Option<std::borrow::Cow<'_, Record>>> = skipped
        .par_iter()
        .zip(&knows)
        .map(|(p, &knows)| match p.last.as_ref()?.record() {
            None if !knows => session.whole_last(p),
            _ => None,
        })
        .collect();
    records.extend(
        skipped
            .iter()
            .zip(&knows)
            .zip(&read)
            .filter_map(|((p, &knows), read)| {
                let last = p.last.as_ref()?;
                let record = last.record().or(read.as_deref());
                // Neither held nor filed already, and not readable as it
                // was indexed (rewritten since): filed by the next run.
                if record.is_none() && !knows {
                    return None;
                }
                Some(Filing {
                    binary: &session.built.binaries[p.case.binary].key,
                    test: &p.case.name,
                    outcome: last.outcome(),
                    record,
                    ran: false,
                    known: p.last_known,
                })
            }),
    );
    let filed = history
        .file_known(&repo.head, &records, ekstazi_core::model::record::now_ms())
        .and_then(|()| history.prune(session.options.settings.history_commits));
    if let Err(e) = filed {
        style::warn(format!(
            "cannot file this run's records under {}: {e} (the current records are kept)",
            &repo.head[..12]
        ));
    }
}

/// Keeps the function fingerprints of the builds this run used (the next
/// run's cache) and removes the others: no record names a build's
/// fingerprints, so the others are only cache.
fn forget_unused_snapshots(session: &Session) {
    let _ = session.store.retain_snapshots(&session.snapshots.used());
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

/// The first run after the record format changed: records of another
/// format only, and a run that would select from records.
fn format_changed(session: &Session) -> bool {
    let settings = &session.options.settings;
    !settings.skipme
        && !settings.forceall
        && !session.store.has_records()
        && !session.store.other_versions().is_empty()
}

/// Never select from nothing silently: says when there are no records to
/// select from. Loudly on CI, where it usually means the state directory
/// was not restored from the cache.
pub fn note_missing_records(session: &Session) {
    let settings = &session.options.settings;
    if settings.skipme || settings.forceall || session.store.has_records() {
        return;
    }
    let root = session.store.root().display();
    if format_changed(session) {
        // Not the CI warning: the cache was restored, with records this
        // version of the tool no longer reads.
        style::note(format!(
            "the records in {root} are of format {} and this cargo-ekstazi reads format v{} \
             (the record format changed with this version of the tool): every test runs \
             once, and is recorded again; the old records are left in place",
            session.store.other_versions().join(", "),
            ekstazi_core::files::sealed::FORMAT_VERSION
        ));
    } else if style::on_ci() {
        style::warn(format!(
            "no records in {root} on this CI machine: every test runs. Restore the state \
             directory from a cache before `cargo ekstazi` runs (docs/guide/ci.md) to run \
             only the affected tests"
        ));
    } else {
        style::note(format!(
            "no records yet in {root}: every test runs, and is recorded"
        ));
    }
}

/// At a merge, says which parents have no records filed: selecting
/// against every parent ("at least as few as Sᵏ") needs each parent's, and
/// without them the selection is against the others' alone.
/// How long a run waits for the remote store before it selects on the
/// records at hand.
const FETCH_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Before selecting: what the remote store (`[history] remote`) holds for
/// `HEAD` or its nearest pushed ancestor, unless `--offline`, `[history]
/// fetch = false` or `--no-history`. A remote that is down, slow or holds
/// what cannot be checked costs a warning, never the run: it selects on
/// the records at hand.
pub fn fetch_remote(session: &Session) {
    let settings = &session.options.settings;
    let (Some(uri), Some(repo)) = (settings.remote.as_deref(), session.repo.as_ref()) else {
        return;
    };
    let shown = crate::remote::shown(uri);
    if !settings.fetch || !settings.history || settings.forceall {
        return;
    }
    let clock = std::time::Instant::now();
    let trusted = session
        .options
        .config
        .history
        .trusted_keys()
        .unwrap_or_default();
    let ancestry = repo.ancestry(1000);
    let project = ekstazi_core::files::signed::project_of_roots(&repo.root_commits());
    let request = crate::remote::FetchRequest {
        uri,
        ancestry: &ancestry,
        trusted: &trusted,
        project: &project,
        limit: ekstazi_core::storage::archive::MAX_BYTES,
        within: FETCH_WITHIN,
        // A run that only selects (`list`) never waits for another's lock;
        // it selects on the records at hand.
        wait: false,
    };
    match crate::remote::fetch_into_store(&session.store, &request) {
        Ok(Some(fetched)) => {
            style::note(
                crate::remote::describe(uri, &fetched, clock.elapsed())
                    .trim_start_matches("cargo-ekstazi: ")
                    .to_owned(),
            );
            for why in &fetched.refused {
                style::warn(format!(
                    "not taken from {shown}: {why} (the tests concerned run)"
                ));
            }
        }
        Ok(None) => {}
        Err(e) => style::warn(format!(
            "nothing was fetched from {shown} ({:#}); selecting on the records at hand \
             (--offline skips the fetch)",
            e
        )),
    }
}

pub fn note_parents_without_records(session: &Session) {
    let settings = &session.options.settings;
    let Some(repo) = session.repo.as_ref().filter(|r| r.parents.len() >= 2) else {
        return;
    };
    // With no records at all, `note_missing_records` says what matters.
    if settings.skipme || settings.forceall || !settings.history || !session.store.has_records() {
        return;
    }
    let history = session.history();
    let missing: Vec<String> = repo
        .parents
        .iter()
        .enumerate()
        .filter(|(_, parent)| history.manifest(parent).is_none())
        .map(|(i, parent)| format!("parent {} ({})", i + 1, &parent[..parent.len().min(10)]))
        .collect();
    if !missing.is_empty() {
        style::note(format!(
            "HEAD is a merge, and no records are filed at its {}: tests are selected against \
             the other parents' records alone. A run at that commit files them (in CI, the \
             branch's own run, with its state saved: docs/guide/ci.md)",
            missing.join(" or ")
        ));
    }
}

/// `-v`: where the time went.
pub fn print_timings(session: &Session) {
    eprintln!(
        "cargo-ekstazi: {}{}",
        session::describe_timings(&session.timings),
        if session.build_unchanged {
            " (the build unchanged since the last: cargo not started)"
        } else {
            ""
        }
    );
}
