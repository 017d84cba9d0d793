//! `cargo ekstazi test --audit`: every test runs, as with `--forceall`, and
//! the run says what the selection would have done.
//!
//! Before anything runs, the ordinary analysis decides what it would
//! skip (the records and the history, as a run without `--audit` would
//! use them); then every test runs and every record is rewritten. A test
//! the selection would have skipped and that did not pass is a *miss*:
//! named with the record that vouched for it and what that record said.
//! The time the selection would have saved is what the would-be-skipped
//! tests took in this run.

use crate::output::report::{self, AuditJson};
use crate::run::scheduler::RunResult;
use crate::session::{Planned, Session};
use crate::style::{FAIL, SKIP};
use ekstazi_core::model::record::Outcome;
use ekstazi_core::options::settings::{FullEvery, Settings};
use ekstazi_core::storage::run_log::{self, RunEntry};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

/// What the selection would have skipped, and how that turned out.
#[derive(Debug, Default)]
pub struct Audit {
    /// The tests' labels.
    pub would_skip: Vec<String>,
    pub missed: Vec<Miss>,
    /// What the would-be-skipped tests took in this run.
    pub saved: Duration,
}

/// A test the selection would have skipped that did not pass.
#[derive(Debug)]
pub struct Miss {
    pub label: String,
    /// The record that vouched for it.
    pub vouched_by: String,
    /// What that record said.
    pub reason: String,
}

impl Audit {
    pub fn json(&self) -> AuditJson {
        AuditJson {
            would_skip: self.would_skip.clone(),
            missed: self.missed.iter().map(|m| m.label.clone()).collect(),
            seconds_saved: self.saved.as_secs_f64(),
        }
    }
}

/// Why this run is to be a full one under `[run] full-every`, if it is:
/// the last full run in the log was that many runs, or that long, ago (or
/// there is none).
pub fn due(settings: &Settings, runs: &[RunEntry]) -> Option<String> {
    let every = settings.full_every?;
    let Some(last) = run_log::last_full(runs) else {
        return Some("no full run in the log yet".to_owned());
    };
    match every {
        FullEvery::Runs(n) => {
            let since = runs.iter().rev().take_while(|e| !e.full).count();
            (since + 1 >= n).then(|| {
                format!(
                    "{since} run{} since the last full one",
                    if since == 1 { "" } else { "s" }
                )
            })
        }
        FullEvery::Age(age) => {
            let now_ms = ekstazi_core::model::record::now_ms();
            let ago = Duration::from_millis(now_ms.saturating_sub(last.at_ms));
            (ago >= age).then(|| format!("the last full run was {}h ago", ago.as_secs() / 3600))
        }
    }
}

/// The plan a run without `--audit` would make: the ordinary analysis,
/// with `--forceall` off. The session is left forcing every test.
pub fn would_be_plan(session: &mut Session) -> Vec<Planned> {
    session.options.settings.forceall = false;
    let would = session.analyse();
    session.options.settings.forceall = true;
    would
}

/// Holds the would-be plan against what ran (`results`, by position in
/// `selected`).
pub fn judge(
    session: &Session,
    would: &[Planned],
    selected: &[&Planned],
    results: &HashMap<usize, RunResult>,
) -> Audit {
    let key = |p: &Planned| {
        (
            session.built.binaries[p.case.binary].key.clone(),
            p.case.name.clone(),
        )
    };
    let ran: HashMap<_, &RunResult> = selected
        .iter()
        .enumerate()
        .filter_map(|(job, p)| Some((key(p), results.get(&job)?)))
        .collect();
    let mut audit = Audit::default();
    for planned in would.iter().filter(|p| p.unaffected()) {
        let label = report::test_label(session, planned);
        audit.would_skip.push(label.clone());
        let Some(result) = ran.get(&key(planned)) else {
            continue;
        };
        audit.saved += result.duration;
        if result.outcome != Outcome::Passed {
            audit.missed.push(Miss {
                label,
                vouched_by: vouched_by(planned),
                reason: reason_of(session, planned),
            });
        }
    }
    audit
}

fn vouched_by(planned: &Planned) -> String {
    match &planned.vouched {
        Some(vouch) => format!("the record filed {vouch}"),
        None => "its current record".to_owned(),
    }
}

fn reason_of(session: &Session, planned: &Planned) -> String {
    match session.whole_last(planned) {
        Some(record) => {
            let functions: usize = record.code.iter().map(|c| c.functions.len()).sum();
            format!(
                "it passed, and nothing it depends on changed since: {} files, variables and \
                 programs, {functions} functions executed",
                record.deps.len()
            )
        }
        None => "it passed, and nothing it depends on changed since".to_owned(),
    }
}

/// The audit's lines, after the summary.
pub fn print(out: &mut impl Write, audit: &Audit, tests: usize) -> std::io::Result<()> {
    writeln!(
        out,
        "audit: the selection would have skipped {SKIP}{} of {tests} tests{SKIP:#} \
         (they took {:.2}s here)",
        audit.would_skip.len(),
        audit.saved.as_secs_f64()
    )?;
    if audit.missed.is_empty() {
        return writeln!(
            out,
            "audit: every test it would have skipped passed: no miss"
        );
    }
    for miss in &audit.missed {
        writeln!(
            out,
            "{FAIL}MISS{FAIL:#} {}: skipped on the word of {} ({}), and it failed",
            miss.label, miss.vouched_by, miss.reason
        )?;
    }
    Ok(())
}
