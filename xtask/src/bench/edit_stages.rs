//! `cargo xtask bench-edit --stages`: where the time goes on each side
//! after a one-function edit. The plain side is `cargo test --no-run` (the
//! build) then `cargo test` (the tests, nothing left to build), timed
//! apart; the tool side is the timed `cargo ekstazi test` run of
//! `super::edit`, whose stages its report gives (`--report-json`, see
//! docs/reference/json.md). `super::edit` runs the rounds; this module
//! times the plain side, reads the reports and prints the medians.

use crate::common::process::{plain_command, run};
use crate::common::stats::median;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The plain side of a round, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlainStages {
    /// `cargo test --no-run`.
    pub build: f64,
    /// `cargo test`, after that build.
    pub tests: f64,
}

/// The stages of one `cargo ekstazi test` run, in seconds, as its report
/// gives them (a stage it does not name took none).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ToolStages {
    pub workspace: f64,
    pub build: f64,
    /// `list` and `binary checksums`.
    pub listing: f64,
    /// `function fingerprints` (made only in a run that records).
    pub fingerprints: f64,
    pub analysis: f64,
    /// The tests' run; with `--verdict-first`, the verdicts.
    pub run: f64,
    /// From the run's start to its report.
    pub total: f64,
}

/// One round's stages, both sides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Round {
    pub plain: PlainStages,
    pub tool: ToolStages,
}

impl Round {
    fn plain_total(&self) -> f64 {
        self.plain.build + self.plain.tests
    }

    /// What the tool cannot do without: its build and its run, against
    /// the plain build and tests.
    pub fn floor(&self) -> f64 {
        (self.tool.build + self.tool.run) / self.plain_total()
    }

    /// The tool's whole run against the plain build and tests.
    pub fn end_to_end(&self) -> f64 {
        self.tool.total / self.plain_total()
    }
}

/// The plain side: `cargo test --no-run`, then `cargo test`, timed apart.
pub fn plain(project: &Path, cargo_args: &[String]) -> Result<PlainStages> {
    let build = run(
        project,
        &plain_command(&["test", "--no-run", "-q"], cargo_args),
    )?;
    let tests = run(project, &plain_command(&["test", "-q"], cargo_args))?;
    Ok(PlainStages {
        build: build.as_secs_f64(),
        tests: tests.as_secs_f64(),
    })
}

/// The stages in a `--report-json` report.
pub fn parse(json: &str) -> Result<ToolStages> {
    #[derive(Deserialize)]
    struct Report {
        timings: BTreeMap<String, f64>,
    }
    let timings = serde_json::from_str::<Report>(json)?.timings;
    let get = |stage: &str| timings.get(stage).copied().unwrap_or(0.0);
    if !timings.contains_key("total") {
        bail!("the report's timings have no total");
    }
    Ok(ToolStages {
        workspace: get("workspace"),
        build: get("build"),
        listing: get("list") + get("binary checksums"),
        fingerprints: get("function fingerprints"),
        analysis: get("analysis"),
        run: get("run"),
        total: get("total"),
    })
}

/// Where each timed `cargo ekstazi test` writes its report: a scratch
/// directory outside the project, so that no test sees the file.
pub struct Report {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Report {
    pub fn new() -> Result<Report> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("report.json");
        Ok(Report { _dir: dir, path })
    }

    /// `--report-json <path>`.
    pub fn args(&self) -> [String; 2] {
        ["--report-json".to_owned(), self.path.display().to_string()]
    }

    /// No report left: the next one read is the next run's.
    pub fn clear(&self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    pub fn read(&self) -> Result<ToolStages> {
        let text = std::fs::read_to_string(&self.path)
            .context("`cargo ekstazi test` wrote no report (did the project build?)")?;
        parse(&text).context("in `cargo ekstazi test`'s report")
    }
}

/// The medians of the rounds' stages, and of their ratios.
pub fn print(rounds: &[Round], tool: &str) {
    let med = |stage: fn(&Round) -> f64| median(&rounds.iter().map(stage).collect::<Vec<_>>());
    let row = |name: &str, plain: Option<fn(&Round) -> f64>, tool: fn(&Round) -> f64| {
        let plain = plain.map_or(String::new(), |p| format!("{:.3}s", med(p)));
        println!("| {name} | {plain} | {:.3}s |", med(tool));
    };
    println!();
    println!(
        "| stage (median of {} rounds) | `cargo test` | `{tool}` |",
        rounds.len()
    );
    println!("|---|---:|---:|");
    row("build", Some(|r| r.plain.build), |r| r.tool.build);
    row("workspace", None, |r| r.tool.workspace);
    row("list + binary checksums", None, |r| r.tool.listing);
    if rounds.iter().any(|r| r.tool.fingerprints > 0.0) {
        row("function fingerprints", None, |r| r.tool.fingerprints);
    }
    row("analysis", None, |r| r.tool.analysis);
    row("tests", Some(|r| r.plain.tests), |r| r.tool.run);
    row("total", Some(Round::plain_total), |r| r.tool.total);
    println!();
    println!("plain: `cargo test --no-run`, then `cargo test`; tool: the stages of its report");
    println!(
        "(`tests` is its run, with --verdict-first the verdicts; `total`, its start to its report)."
    );
    println!();
    for (name, ratio) in [
        (
            "floor: (tool build + tool run) / (plain build + plain tests)",
            Round::floor as fn(&Round) -> f64,
        ),
        (
            "end to end: tool total / (plain build + plain tests)",
            Round::end_to_end,
        ),
    ] {
        let each: Vec<String> = rounds.iter().map(|r| format!("{:.2}", ratio(r))).collect();
        println!(
            "- {name}: **{:.2}×** (round by round: {})",
            med(ratio),
            each.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{
        "timings": {"workspace": 0.21, "build": 1.3, "list": 0.05, "binary checksums": 0.02,
                    "analysis": 0.01, "run": 2.2, "total": 4.3},
        "verdict_first": true, "binaries": [], "tests": []
    }"#;

    #[test]
    fn the_report_gives_the_stages_list_and_checksums_together() {
        let stages = parse(REPORT).unwrap();
        assert_eq!(stages.workspace, 0.21);
        assert_eq!(stages.build, 1.3);
        assert!((stages.listing - 0.07).abs() < 1e-9);
        assert_eq!(stages.fingerprints, 0.0);
        assert_eq!(
            (stages.analysis, stages.run, stages.total),
            (0.01, 2.2, 4.3)
        );
    }

    #[test]
    fn a_report_without_timings_or_total_is_refused() {
        assert!(parse(r#"{"tests": []}"#).is_err());
        assert!(parse(r#"{"timings": {"build": 1.0}}"#).is_err());
    }

    #[test]
    fn the_floor_is_the_tool_build_and_run_over_the_plain_build_and_tests() {
        let round = Round {
            plain: PlainStages {
                build: 3.0,
                tests: 1.0,
            },
            tool: ToolStages {
                build: 2.5,
                run: 0.5,
                total: 5.0,
                ..parse(REPORT).unwrap()
            },
        };
        assert_eq!(round.floor(), 0.75);
        assert_eq!(round.end_to_end(), 1.25);
    }
}
