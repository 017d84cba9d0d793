//! `cargo xtask bench-edit`: end to end after a one-function edit, the case
//! where building weighs most (the goal: never above 100 % of
//! `cargo test` on a build-dominated crate).
//!
//! Each round inserts `std::hint::black_box(<round>u32);` before one line of
//! one source file, a statement that changes the function's code (and so
//! its fingerprint) and nothing else, then times `cargo test` and
//! `cargo ekstazi test` on that same tree. Both rebuild after the same edit,
//! each in its own target directory, so neither profits from the other's
//! build; which goes first alternates by round, so that a warm page cache
//! favours neither. Exit codes are not judged (a flaky test must not stop
//! a benchmark), but the edit must build: the setup checks it.
//!
//! With `--parts`, the same edits time only the rebuild, plain and with each
//! part of the instrumented build added in turn (`super::build_parts`,
//! chosen by `super::bench_edit`). With `--stages`, the plain side is its
//! build and its tests timed apart, and the tool's stages are read from its
//! report (`super::edit_stages`).

use super::edit_stages;
use crate::common::process::{
    ekstazi_binary, ekstazi_command, plain_command, run, wait_for_recording,
};
use crate::common::stats::{median, seconds};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The project, the edit made in it each round, and the cargo-ekstazi
/// measured: `bench-edit`'s and `bench-watch`'s.
#[derive(clap::Args)]
pub struct EditPoint {
    /// The cargo project to measure [default: a copy of examples/demo]
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// The source file to edit, relative to the project
    #[arg(long)]
    pub file: PathBuf,
    /// The 1-based line a statement is inserted before (inside a function body)
    #[arg(long)]
    pub line: usize,
    /// A cargo-ekstazi binary to measure [default: built from this workspace]
    #[arg(long)]
    pub ekstazi: Option<PathBuf>,
}

impl EditPoint {
    /// Fails unless `cargo test --no-run` builds `dir` with the edit made:
    /// a line outside a function body would time failing builds.
    pub fn check_builds(&self, dir: &Path, cargo_args: &[String]) -> Result<()> {
        let built = Command::new("cargo")
            .args(["test", "--no-run", "-q"])
            .args(cargo_args)
            .current_dir(dir)
            .status()?;
        if !built.success() {
            bail!(
                "the project does not build with the edit at {}:{}: is that line inside a function body?",
                self.file.display(),
                self.line
            );
        }
        Ok(())
    }
}

/// `bench-edit`'s options, for `edit` and `build_parts` alike.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub point: EditPoint,
    /// Timed rounds (an edit, then both commands)
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Time only the rebuild, plain and with each part of the
    /// instrumented build added in turn (module `build_parts`)
    #[arg(long)]
    pub parts: bool,
    /// Time `cargo ekstazi test --verdict-first`; its recording in the
    /// background is waited for before the next command, and shown apart
    #[arg(long, conflicts_with = "parts")]
    pub verdict_first: bool,
    /// Also time the stages, with or without --verdict-first: `cargo test
    /// --no-run` then `cargo test` apart (their sum is `cargo test`'s
    /// time), and `cargo ekstazi test`'s own (its --report-json); prints
    /// their medians and the floor and end-to-end ratios
    #[arg(long, conflicts_with = "parts")]
    pub stages: bool,
    /// Cargo options for both commands (e.g. --workspace)
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

impl Args {
    /// The cargo-ekstazi binary, given or built (and taken out of the
    /// options), and at least one round.
    pub fn resolve(mut self) -> Result<(PathBuf, Self)> {
        let ekstazi = ekstazi_binary(self.point.ekstazi.take())?;
        let runs = self.runs.max(1);
        Ok((ekstazi, Args { runs, ..self }))
    }
}

pub fn measure(args: &Args, ekstazi: &Path, project: &Path) -> Result<()> {
    let file = project.join(&args.point.file);
    let original = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let edited = |round: usize| edit(&original, args.point.line, round);
    eprintln!("measuring in {}", project.display());

    let result = rounds(args, ekstazi, project, &file, &edited);
    // The project is the user's: it gets its file back whatever happened.
    std::fs::write(&file, &original)?;
    let timings = result?;
    let name = if args.verdict_first {
        "cargo ekstazi test --verdict-first"
    } else {
        "cargo ekstazi test"
    };
    print_ends(args, &timings, name);
    if args.stages {
        edit_stages::print(&timings.stages, name);
    }
    Ok(())
}

/// Both sides' medians and minimums, and their ratio.
fn print_ends(args: &Args, timings: &Timings, name: &str) {
    let Timings {
        plain,
        ekstazi,
        recording,
        ..
    } = timings;
    let (p, e) = (median(&seconds(plain)), median(&seconds(ekstazi)));
    println!("| after a one-function edit | median | min |");
    println!("|---|---:|---:|");
    for (name, times) in [("cargo test", plain), (name, ekstazi)] {
        let min = times
            .iter()
            .min()
            .copied()
            .unwrap_or_default()
            .as_secs_f64();
        println!("| `{name}` | {:.3}s | {min:.3}s |", median(&seconds(times)));
    }
    let per_round: Vec<String> = plain
        .iter()
        .zip(ekstazi)
        .map(|(p, e)| format!("{:.2}", e.as_secs_f64() / p.as_secs_f64()))
        .collect();
    println!();
    println!("- `{name}` vs `cargo test`: **{:.2}×**", e / p);
    if args.verdict_first {
        println!(
            "- then recording in the background: {:.3}s (median)",
            median(&seconds(recording))
        );
    }
    println!("- round by round: {}", per_round.join(", "));
}

/// Per round: `cargo test` (with `--stages`, its build and tests summed),
/// `cargo ekstazi test`, the recording after a verdict-first run, and with
/// `--stages` both sides' stages.
#[derive(Default)]
struct Timings {
    plain: Vec<Duration>,
    ekstazi: Vec<Duration>,
    recording: Vec<Duration>,
    stages: Vec<edit_stages::Round>,
}

fn rounds(
    args: &Args,
    ekstazi: &Path,
    project: &Path,
    file: &Path,
    edited: &dyn Fn(usize) -> Result<String>,
) -> Result<Timings> {
    let report = args.stages.then(edit_stages::Report::new).transpose()?;
    let mut timed = vec!["test".to_owned(), "-q".to_owned()];
    if args.verdict_first {
        timed.push("--verdict-first".to_owned());
    }
    timed.extend(report.iter().flat_map(edit_stages::Report::args));
    let timed: Vec<&str> = timed.iter().map(String::as_str).collect();
    let tool = ekstazi_command(ekstazi, &timed, &args.cargo_args);
    let state = project.join(".ekstazi");
    settle(args, project, file, edited, &tool)?;

    let mut timings = Timings::default();
    for round in 1..=args.runs {
        eprintln!("round {round}/{}", args.runs);
        std::fs::write(file, edited(round)?)?;
        let plain_first = round % 2 == 1;
        let first = plain_first.then(|| plain_side(args, project)).transpose()?;
        if let Some(report) = &report {
            report.clear()?;
        }
        timings.ekstazi.push(run(project, &tool)?);
        timings.recording.push(wait_for_recording(&state)?);
        let tool_stages = report.as_ref().map(edit_stages::Report::read).transpose()?;
        let (plain, plain_stages) = match first {
            Some(first) => first,
            None => plain_side(args, project)?,
        };
        timings.plain.push(plain);
        if let (Some(plain), Some(tool)) = (plain_stages, tool_stages) {
            timings.stages.push(edit_stages::Round { plain, tool });
        }
    }
    Ok(timings)
}

/// Both builds made and the records settled at edit 0, so that every
/// timed run starts from the previous round's tree; and the edit checked
/// before anything is timed: a line outside a function body would time
/// two failing builds.
fn settle(
    args: &Args,
    project: &Path,
    file: &Path,
    edited: &dyn Fn(usize) -> Result<String>,
    tool: &[String],
) -> Result<()> {
    std::fs::write(file, edited(0)?)?;
    args.point.check_builds(project, &args.cargo_args)?;
    for _ in 0..2 {
        run(project, tool)?;
        wait_for_recording(&project.join(".ekstazi"))?;
    }
    Ok(())
}

/// `cargo test`, or with `--stages` its build then its tests, timed apart
/// (the time is their sum).
fn plain_side(args: &Args, project: &Path) -> Result<(Duration, Option<edit_stages::PlainStages>)> {
    if !args.stages {
        let cargo = plain_command(&["test", "-q"], &args.cargo_args);
        return Ok((run(project, &cargo)?, None));
    }
    let stages = edit_stages::plain(project, &args.cargo_args)?;
    let sum = Duration::from_secs_f64(stages.build + stages.tests);
    Ok((sum, Some(stages)))
}

/// `source` with the round's statement inserted before its 1-based `line`.
pub(crate) fn edit(source: &str, line: usize, round: usize) -> Result<String> {
    let lines: Vec<&str> = source.split_inclusive('\n').collect();
    if line == 0 || line > lines.len() {
        bail!("line {line} is not in the file ({} lines)", lines.len());
    }
    let indent: String = lines[line - 1]
        .chars()
        .take_while(|c| c.is_whitespace() && *c != '\n')
        .collect();
    let mut out = String::with_capacity(source.len() + 48);
    for (i, text) in lines.iter().enumerate() {
        if i == line - 1 {
            out.push_str(&format!("{indent}std::hint::black_box({round}u32);\n"));
        }
        out.push_str(text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_goes_before_the_line_with_its_indent() {
        let source = "fn f() -> u32 {\n    1\n}\n";
        assert_eq!(
            edit(source, 2, 7).unwrap(),
            "fn f() -> u32 {\n    std::hint::black_box(7u32);\n    1\n}\n"
        );
    }

    #[test]
    fn a_line_past_the_end_is_refused() {
        assert!(edit("fn f() {}\n", 2, 0).is_err());
        assert!(edit("fn f() {}\n", 0, 0).is_err());
    }
}
