//! `cargo ekstazi stats`: what the selection saved, from the log of the
//! runs that recorded in the state directory
//! (`ekstazi_core::storage::run_log`): overall, per recent day and per
//! recent commit. Needs no build.
//!
//! Time saved is an estimate, and says so: the sum, over the tests each
//! run skipped, of the duration their records give (their last run's).

use crate::cli::StatsArgs;
use crate::style::BOLD;
use anyhow::Result;
use ekstazi_core::storage::run_log::{self, RunEntry, Totals};
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// How many recent days and commits are shown.
const DAYS: u64 = 7;
const COMMITS: usize = 10;

pub fn run(args: StatsArgs) -> Result<ExitCode> {
    let state = match &args.state_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => super::workspace_state_dir(args.manifest_path.as_deref())?.1,
    };
    let entries = run_log::read(&state).entries;
    let now_ms = ekstazi_core::model::record::now_ms();
    let mut out = anstream::stdout().lock();
    let overall = Totals::of(&entries);
    if args.summary {
        writeln!(out, "{}", summary_line(&overall))?;
        return Ok(ExitCode::SUCCESS);
    }
    let days = per_day(&entries, now_ms);
    let commits = per_commit(&entries);
    if args.json {
        let json = StatsJson {
            runs_logged: entries.len(),
            estimate: "seconds_saved: the sum, over each run's skipped tests, of their last recorded durations",
            overall: TotalsJson::from(&overall),
            days: days
                .iter()
                .map(|(day, t)| (format!("{day}"), TotalsJson::from(t)))
                .collect(),
            commits: commits
                .iter()
                .map(|(c, t)| (c.clone(), TotalsJson::from(t)))
                .collect(),
        };
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        writeln!(out, "no run has recorded in {} yet", state.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "{}", summary_line(&overall))?;
    writeln!(
        out,
        "(time saved: the skipped tests' last recorded durations, summed over runs)"
    )?;
    table(
        &mut out,
        "days ago",
        days.iter().map(|(d, t)| (d.to_string(), t)),
    )?;
    table(
        &mut out,
        "commit",
        commits
            .iter()
            .map(|(c, t)| (c[..c.len().min(10)].to_owned(), t)),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `12 runs: 340 of 2 400 tests selected, 2 060 skipped; 41.0s spent, ~2m13s saved`.
fn summary_line(t: &Totals) -> String {
    format!(
        "cargo-ekstazi: {} run{}: {} tests selected, {} skipped; {} spent, ~{} saved",
        t.runs,
        if t.runs == 1 { "" } else { "s" },
        t.selected,
        t.skipped,
        human(t.spent),
        human(t.saved)
    )
}

fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// The last [`DAYS`] days' totals, newest first (0: the last 24 hours).
fn per_day(entries: &[RunEntry], now_ms: u64) -> Vec<(u64, Totals)> {
    (0..DAYS)
        .filter_map(|day| {
            let runs: Vec<&RunEntry> = entries
                .iter()
                .filter(|e| now_ms.saturating_sub(e.at_ms) / 86_400_000 == day)
                .collect();
            (!runs.is_empty()).then(|| (day, Totals::of(runs)))
        })
        .collect()
}

/// The last [`COMMITS`] commits' totals, the newest run's commit first.
fn per_commit(entries: &[RunEntry]) -> Vec<(String, Totals)> {
    let mut order: Vec<&str> = Vec::new();
    for e in entries.iter().rev() {
        if !e.commit.is_empty() && !order.contains(&e.commit.as_str()) {
            order.push(&e.commit);
        }
    }
    order
        .into_iter()
        .take(COMMITS)
        .map(|c| {
            let runs = entries.iter().filter(|e| e.commit == c);
            (c.to_owned(), Totals::of(runs))
        })
        .collect()
}

fn table<'a>(
    out: &mut impl Write,
    what: &str,
    rows: impl Iterator<Item = (String, &'a Totals)>,
) -> std::io::Result<()> {
    let rows: Vec<_> = rows.collect();
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\n{BOLD}{what:<10} {:>5} {:>9} {:>9} {:>7} {:>10} {:>10}{BOLD:#}",
        "runs", "selected", "skipped", "failed", "spent", "saved"
    )?;
    for (key, t) in rows {
        writeln!(
            out,
            "{key:<10} {:>5} {:>9} {:>9} {:>7} {:>10} {:>10}",
            t.runs,
            t.selected,
            t.skipped,
            t.failed,
            human(t.spent),
            human(t.saved)
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct StatsJson {
    runs_logged: usize,
    /// How `seconds_saved` is estimated.
    estimate: &'static str,
    overall: TotalsJson,
    /// By days ago (`"0"`: the last 24 hours).
    days: std::collections::BTreeMap<String, TotalsJson>,
    /// By commit id.
    commits: std::collections::BTreeMap<String, TotalsJson>,
}

#[derive(Serialize)]
struct TotalsJson {
    runs: usize,
    selected: usize,
    skipped: usize,
    failed: usize,
    flaky: usize,
    seconds_spent: f64,
    seconds_saved: f64,
}

impl From<&Totals> for TotalsJson {
    fn from(t: &Totals) -> TotalsJson {
        TotalsJson {
            runs: t.runs,
            selected: t.selected,
            skipped: t.skipped,
            failed: t.failed,
            flaky: t.flaky,
            seconds_spent: t.spent.as_secs_f64(),
            seconds_saved: t.saved.as_secs_f64(),
        }
    }
}
