//! The rows of `cargo xtask eval replay`: one commit's measurements for
//! one granularity, their CSV file, and the tables drawn from them. Both
//! the replay, which writes them, and `eval plot`, which redraws them, read
//! them here.

use crate::common::stats;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// One commit's measurements for one granularity.
#[derive(Clone, Debug)]
pub struct Row {
    pub commit: String,
    pub subject: String,
    pub tests: usize,
    pub selected: usize,
    /// Seconds of `cargo test --no-run`.
    pub retest_build: f64,
    /// Seconds of `cargo test` without its doctests.
    pub retest_test: f64,
    pub retest_doctests: f64,
    /// Wall-clock seconds of `cargo ekstazi test`.
    pub ekstazi_total: f64,
    pub ekstazi_build: f64,
    pub ekstazi_selection: f64,
    pub ekstazi_run: f64,
    /// With `--verdict-first`: seconds its recording took in the
    /// background, after the verdicts; with `--pull-request`: seconds the
    /// run that records the commit took, after the timed one (neither in
    /// `ekstazi_total`).
    pub ekstazi_recording: f64,
    /// Tests whose retest-all outcome differs from the previous commit's.
    pub changed_outcomes: usize,
    pub misses: usize,
    /// Of the misses, those whose test gave its previous outcome back when
    /// run again alone under `cargo test` at the same commit: the change of
    /// outcome came with the run, not with the commit.
    pub misses_not_reproduced: usize,
    /// Test executables the run listed, and how many of them differ in
    /// content from the previous commit's (new ones included).
    pub binaries: usize,
    pub binaries_changed: usize,
    /// Selected tests that failed under cargo-ekstazi but passed under
    /// `cargo test` (flaky when run one per process).
    pub ekstazi_only_failures: usize,
    pub reasons: String,
}

impl Row {
    pub fn share(&self) -> f64 {
        stats::share(self.selected, self.tests)
    }

    /// `cargo test` end to end, doctests left out (the evaluation runs
    /// `cargo ekstazi test --no-doc`).
    pub fn retest_total(&self) -> f64 {
        self.retest_build + self.retest_test
    }
}

pub const CSV_HEADER: &str = "commit,subject,tests,selected,share,retest_build_s,retest_test_s,retest_doctests_s,ekstazi_total_s,ekstazi_build_s,ekstazi_selection_s,ekstazi_run_s,changed_outcomes,misses,ekstazi_only_failures,reasons,ekstazi_recording_s,misses_not_reproduced,binaries,binaries_changed";

/// The figures of a replay, one line per granularity.
pub fn summary_table(granularities: &[String], rows: &HashMap<String, Vec<Row>>) -> String {
    let mut out = String::new();
    out.push_str(
        "| granularity | commits | mean selected | median selected | P90 selected | mean e2e time vs cargo test | mean test time vs cargo test | mean selection cost | outcome changes | misses |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for granularity in granularities {
        let Some(rows) = rows.get(granularity).filter(|r| !r.is_empty()) else {
            continue;
        };
        let shares: Vec<f64> = rows.iter().map(Row::share).collect();
        let e2e: Vec<f64> = rows
            .iter()
            .map(|r| r.ekstazi_total / r.retest_total())
            .collect();
        let test_time: Vec<f64> = rows.iter().map(|r| r.ekstazi_run / r.retest_test).collect();
        let cost: Vec<f64> = rows.iter().map(|r| r.ekstazi_selection).collect();
        let _ = writeln!(
            out,
            "| {granularity} | {} | {:.1}% | {:.1}% | {:.1}% | {:.0}% | {:.0}% | {:.2}s | {} | {} |",
            rows.len(),
            stats::mean(&shares),
            stats::median(&shares),
            stats::percentile(&shares, 90.0),
            100.0 * stats::mean(&e2e),
            100.0 * stats::mean(&test_time),
            stats::mean(&cost),
            rows.iter().map(|r| r.changed_outcomes).sum::<usize>(),
            misses_cell(rows)
        );
    }
    out
}

/// The misses, and how many of them did not come back when their test ran
/// again alone at the same commit.
fn misses_cell(rows: &[Row]) -> String {
    let misses: usize = rows.iter().map(|r| r.misses).sum();
    match rows.iter().map(|r| r.misses_not_reproduced).sum::<usize>() {
        0 => misses.to_string(),
        gone => format!("{misses} ({gone} not reproduced alone)"),
    }
}

/// A commit "rebuilds" when its plain build took longer than this: below
/// it, cargo only checked that nothing changed, and a ratio of two no-op
/// builds says nothing about the instrumented build.
const REBUILD_SECONDS: f64 = 3.0;

/// Where the time went, one line per granularity: cargo-ekstazi's stages
/// and `cargo test`'s own build as shares of `cargo test`'s build and test
/// run (means over commits), and the instrumented build against the plain
/// one at the commits that rebuild (the goal: at most 1.05×).
pub fn time_table(granularities: &[String], rows: &HashMap<String, Vec<Row>>) -> String {
    let mut out = String::new();
    out.push_str(
        "| granularity | `cargo test`'s build | instrumented build | selection | test run | the rest | end to end | commits that rebuild | instrumented rebuild vs plain: mean (median) |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for granularity in granularities {
        let Some(rows) = rows.get(granularity).filter(|r| !r.is_empty()) else {
            continue;
        };
        let share = |part: &dyn Fn(&Row) -> f64| {
            let shares: Vec<f64> = rows.iter().map(|r| part(r) / r.retest_total()).collect();
            100.0 * stats::mean(&shares)
        };
        let rebuilds: Vec<f64> = rows
            .iter()
            .filter(|r| r.retest_build > REBUILD_SECONDS)
            .map(|r| r.ekstazi_build / r.retest_build)
            .collect();
        let rebuild = if rebuilds.is_empty() {
            "—".to_owned()
        } else {
            format!(
                "{:.2}× ({:.2}×)",
                stats::mean(&rebuilds),
                stats::median(&rebuilds)
            )
        };
        let _ = writeln!(
            out,
            "| {granularity} | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {} | {rebuild} |",
            share(&|r| r.retest_build),
            share(&|r| r.ekstazi_build),
            share(&|r| r.ekstazi_selection),
            share(&|r| r.ekstazi_run),
            share(&|r| { r.ekstazi_total - r.ekstazi_build - r.ekstazi_selection - r.ekstazi_run }),
            share(&|r| r.ekstazi_total),
            rebuilds.len(),
        );
    }
    out
}

pub fn write_csv(path: &Path, rows: &[Row]) -> Result<()> {
    let mut csv = format!("{CSV_HEADER}\n");
    for r in rows {
        writeln!(
            csv,
            "{},{},{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.3},{:.2},{},{},{},{},{:.2},{},{},{}",
            r.commit,
            quote(&r.subject),
            r.tests,
            r.selected,
            r.share(),
            r.retest_build,
            r.retest_test,
            r.retest_doctests,
            r.ekstazi_total,
            r.ekstazi_build,
            r.ekstazi_selection,
            r.ekstazi_run,
            r.changed_outcomes,
            r.misses,
            r.ekstazi_only_failures,
            quote(&r.reasons),
            r.ekstazi_recording,
            r.misses_not_reproduced,
            r.binaries,
            r.binaries_changed
        )?;
    }
    std::fs::write(path, csv)?;
    Ok(())
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Reads a CSV written by [`write_csv`] back (for `eval plot`).
pub fn read_csv(path: &Path) -> Result<Vec<Row>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let f = split_csv(line);
        if f.len() < 16 {
            continue;
        }
        let num = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
        let int = |i: usize| f[i].parse::<usize>().unwrap_or(0);
        rows.push(Row {
            commit: f[0].clone(),
            subject: f[1].clone(),
            tests: int(2),
            selected: int(3),
            retest_build: num(5),
            retest_test: num(6),
            retest_doctests: num(7),
            ekstazi_total: num(8),
            ekstazi_build: num(9),
            ekstazi_selection: num(10),
            ekstazi_run: num(11),
            // Older files have no recording column.
            ekstazi_recording: if f.len() > 16 { num(16) } else { 0.0 },
            changed_outcomes: int(12),
            misses: int(13),
            ekstazi_only_failures: int(14),
            reasons: f[15].clone(),
            // Nor have they the columns after it.
            misses_not_reproduced: f.get(17).map_or(0, |_| int(17)),
            binaries: f.get(18).map_or(0, |_| int(18)),
            binaries_changed: f.get(19).map_or(0, |_| int(19)),
        });
    }
    Ok(rows)
}

fn split_csv(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips() {
        let row = Row {
            commit: "abc".into(),
            subject: "say \"hi\", then go".into(),
            tests: 10,
            selected: 3,
            retest_build: 1.0,
            retest_test: 2.0,
            retest_doctests: 0.5,
            ekstazi_total: 1.5,
            ekstazi_build: 1.0,
            ekstazi_selection: 0.25,
            ekstazi_run: 0.2,
            ekstazi_recording: 0.0,
            changed_outcomes: 1,
            misses: 0,
            misses_not_reproduced: 0,
            binaries: 7,
            binaries_changed: 2,
            ekstazi_only_failures: 0,
            reasons: "function changed (3); new (1)".into(),
        };
        let dir = std::env::temp_dir().join(format!("xtask-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.csv");
        write_csv(&path, std::slice::from_ref(&row)).unwrap();
        let back = read_csv(&path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].subject, row.subject);
        assert_eq!(back[0].reasons, row.reasons);
        assert_eq!(back[0].selected, 3);
        assert_eq!(back[0].ekstazi_selection, 0.25);
        assert_eq!((back[0].binaries, back[0].binaries_changed), (7, 2));
    }

    #[test]
    fn the_time_table_takes_the_rebuild_ratio_at_commits_that_rebuild_only() {
        let row = |retest_build: f64, ekstazi_build: f64| Row {
            commit: "c".into(),
            subject: String::new(),
            tests: 4,
            selected: 1,
            retest_build,
            retest_test: 10.0 - retest_build,
            retest_doctests: 0.0,
            ekstazi_total: ekstazi_build + 1.0,
            ekstazi_build,
            ekstazi_selection: 0.5,
            ekstazi_run: 0.5,
            ekstazi_recording: 0.0,
            changed_outcomes: 0,
            misses: 0,
            misses_not_reproduced: 0,
            binaries: 1,
            binaries_changed: 1,
            ekstazi_only_failures: 0,
            reasons: String::new(),
        };
        // A no-op build (1 s against 2 s) is no rebuild; the three that
        // rebuild give 1.10×, 1.30× and 1.10×.
        let rows = HashMap::from([(
            "function".to_owned(),
            vec![row(1.0, 2.0), row(5.0, 5.5), row(4.0, 5.2), row(6.0, 6.6)],
        )]);
        let table = time_table(&["function".to_owned()], &rows);
        let line = table.lines().nth(2).unwrap();
        assert!(line.ends_with("| 3 | 1.17× (1.10×) |"), "{line}");
        // End to end: (3 + 6.5 + 6.2 + 7.6) / 10 over four commits.
        assert!(line.contains("| 58% |"), "{line}");
    }
}
