//! The run path `test`, `list` and `nextest` share, as its stages:
//!
//! 1. [`prepare`]: resolve the options (once, into the session's
//!    [`Options`](crate::session::options::Options)) → open the workspace
//!    → build → list → checksum and fingerprint ([`Session::prepare`]);
//! 2. [`open_records`]: the notes about the records, and the state
//!    directory's lock for a run that records;
//! 3. [`analyse`] (`list`), or [`plan`] (`test`, `nextest`): the analysis,
//!    the housekeeping before a recording run, the selection line (`test`
//!    and `nextest` take 2 and 3 as one, [`open_and_plan`]);
//! 4. run → record → report: the command's own (the scheduler for `test`,
//!    `cargo nextest run` for `nextest`), each finished test's record
//!    written through [`records::Written`], and [`records::finish_recording`]
//!    after the last.
//!
//! Main types: [`Session`], [`Planned`], [`Tally`]. Invariant: every stage
//! reads the options from the session, never from the command line; the
//! pipeline imports `session` and `output`, and only `commands`
//! imports it.

pub mod records;

use crate::output::report::{self, Tally};
use crate::session::options::Request;
use crate::session::{Planned, Session};
use anyhow::Result;
use ekstazi_core::storage::store::StoreLock;
use std::io::Write;

/// Resolve the options → open the workspace → build → list → checksum and
/// fingerprint: the session every later stage reads.
pub fn prepare(request: Request) -> Result<Session> {
    Session::prepare(request)
}

/// Fetches from the remote store, if one is set; says when there are no
/// records to select from; for a command that
/// records (`records`), takes the state directory's lock unless the
/// options say not to record (`None`: nothing is recorded); then notes
/// records of other formats and binaries that fall back to binary
/// granularity.
pub fn open_records(session: &mut Session, records: bool) -> Result<Option<StoreLock>> {
    records::fetch_remote(session);
    records::note_missing_records(session);
    records::note_parents_without_records(session);
    let settings = &session.options.settings;
    let lock = if !records || settings.no_record || settings.skipme {
        None
    } else {
        records::lock_store(session, !session.options.no_wait)?
    };
    records::note_other_versions(session);
    // A recording needs every binary's fingerprints (and the notes of
    // those that fall back say so before it); a run that records nothing
    // makes them only where asked, and names what it made.
    if lock.is_some() {
        session.fingerprint_all();
    }
    // With `--skipme` the granularity is binary: nothing falls back.
    records::note_fallbacks(session);
    Ok(lock)
}

/// What a command that runs tests (`test`, `nextest`) opens with: the
/// records opened ([`open_records`]), and the plan made ([`plan`]).
pub struct Opened {
    /// The state directory's lock; `None`: nothing is recorded.
    pub lock: Option<StoreLock>,
    pub plan: Vec<Planned>,
    pub tally: Tally,
    /// When nothing is selected, the sentence that says why.
    pub nothing: Option<String>,
}

/// The tests a run runs, in the plan's order.
pub fn selected(plan: &[Planned]) -> Vec<&Planned> {
    plan.iter().filter(|p| p.selected()).collect()
}

/// [`open_records`] (taking the lock when `records`), then [`plan`].
pub fn open_and_plan(session: &mut Session, records: bool) -> Result<Opened> {
    let lock = open_records(session, records)?;
    let (plan, tally, nothing) = plan(session, lock.is_some())?;
    Ok(Opened {
        lock,
        plan,
        tally,
        nothing,
    })
}

/// The analysis alone (`list`): every test the filter keeps, decided; and
/// with `-v`, where the time went.
pub fn analyse(session: &mut Session) -> Vec<Planned> {
    let plan = session.analyse();
    if session.options.verbose() {
        records::print_timings(session);
    }
    plan
}

/// The plan of a run that runs tests (`test`, `nextest`): the analysis, the
/// housekeeping a recording run does before running (records of removed
/// tests forgotten, vouching records adopted), and the selection line
/// printed. Also returns the tally so far and, when nothing is selected,
/// the sentence that says why.
pub fn plan(
    session: &mut Session,
    recording: bool,
) -> Result<(Vec<Planned>, Tally, Option<String>)> {
    let plan = session.analyse();
    if recording {
        records::forget_removed_tests(session)?;
        records::adopt_vouching_records(session, &plan);
    }
    if session.options.verbose() {
        records::print_timings(session);
    }
    let selected = plan.iter().filter(|p| p.selected()).count();
    let tally = Tally::of_plan(&plan);
    writeln!(
        anstream::stdout(),
        "{}",
        report::selection_line(&tally, selected, session.options.settings.partition)
    )?;
    let nothing = report::nothing_to_run(&tally, selected, plan.len());
    Ok((plan, tally, nothing))
}
