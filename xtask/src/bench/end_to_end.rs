//! `cargo xtask bench`: end-to-end timings of `cargo ekstazi test` against
//! `cargo test` and `cargo nextest run` on one project, measured in the
//! same session and interleaved so that machine noise hits every command
//! alike; the figures that matter are the ratios.

use super::in_project;
use crate::common::process::{
    ekstazi_binary, ekstazi_command, plain_command, run, wait_for_recording,
};
use crate::common::stats::{median, seconds};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// The cargo project to measure [default: a copy of examples/demo]
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// A cargo-ekstazi binary to measure [default: built from this workspace]
    #[arg(long)]
    pub ekstazi: Option<PathBuf>,
    /// Timed runs of each command
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Cargo options for every command (e.g. --workspace)
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

pub fn bench(args: Args) -> Result<()> {
    let ekstazi = ekstazi_binary(args.ekstazi)?;
    in_project(args.project.as_deref(), |project| {
        bench_in(project, &ekstazi, args.runs, &args.cargo_args)
    })
}

fn bench_in(project: &Path, ekstazi: &Path, runs: usize, cargo_args: &[String]) -> Result<()> {
    eprintln!("measuring in {}", project.display());

    let cargo = |args: &[&str]| plain_command(args, cargo_args);
    let ekstazi_cmd = |args: &[&str]| ekstazi_command(ekstazi, args, cargo_args);
    let has_nextest = Command::new("cargo")
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());

    // Build everything once and let the records settle, so that every timed
    // command starts from a built tree.
    for setup in [
        cargo(&["test", "--no-run", "-q"]),
        ekstazi_cmd(&["test", "-q"]),
        ekstazi_cmd(&["test", "-q"]),
    ] {
        run(project, &setup)?;
    }
    if has_nextest {
        run(project, &cargo(&["nextest", "run", "--no-run"]))?;
        run(project, &ekstazi_cmd(&["nextest"]))?;
    }

    // The commands' names, by which the ratios below find them.
    let (test, tests, quiet, forceall, spawned, verdicts) = (
        "cargo test",
        "cargo test --tests (no doctests)",
        "cargo ekstazi test (nothing changed)",
        "cargo ekstazi test --forceall",
        "cargo ekstazi test --forceall --no-fork-server",
        "cargo ekstazi test --forceall --verdict-first",
    );
    let (nextest, nextest_quiet, nextest_forceall) = (
        "cargo nextest run",
        "cargo ekstazi nextest (nothing changed)",
        "cargo ekstazi nextest --forceall",
    );
    let mut commands: Vec<(&str, Vec<String>)> = vec![
        (test, cargo(&["test", "-q"])),
        (tests, cargo(&["test", "--tests", "-q"])),
        (quiet, ekstazi_cmd(&["test", "-q"])),
        (forceall, ekstazi_cmd(&["test", "-q", "--forceall"])),
        (
            spawned,
            ekstazi_cmd(&["test", "-q", "--forceall", "--no-fork-server"]),
        ),
        (
            verdicts,
            ekstazi_cmd(&["test", "-q", "--forceall", "--verdict-first"]),
        ),
    ];
    if has_nextest {
        commands.push((nextest, cargo(&["nextest", "run", "--no-fail-fast"])));
        commands.push((nextest_quiet, ekstazi_cmd(&["nextest"])));
        let mut all = ekstazi_cmd(&["nextest", "--forceall"]);
        all.extend(["--".to_owned(), "--no-fail-fast".to_owned()]);
        commands.push((nextest_forceall, all));
    }
    // A verdict-first run's recording goes on after it ends: it is waited
    // for, untimed, before the next command, and its time shown apart.
    let state = project.join(".ekstazi");
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); commands.len()];
    let mut recording: Vec<Vec<Duration>> = vec![Vec::new(); commands.len()];
    for round in 0..runs {
        eprintln!("round {}/{runs}", round + 1);
        for (i, (_, command)) in commands.iter().enumerate() {
            times[i].push(run(project, command)?);
            recording[i].push(wait_for_recording(&state)?);
        }
    }

    let medians: Vec<f64> = times.iter().map(|t| median(&seconds(t))).collect();
    println!("| command | median | min | then recording in the background (median) |");
    println!("|---|---:|---:|---:|");
    for ((name, _), ((t, m), r)) in commands
        .iter()
        .zip(times.iter().zip(&medians).zip(&recording))
    {
        let min = t.iter().min().copied().unwrap_or_default().as_secs_f64();
        let after = match median(&seconds(r)) {
            r if r < 0.05 => "—".to_owned(),
            r => format!("{r:.3}s"),
        };
        println!("| `{name}` | {m:.3}s | {min:.3}s | {after} |");
    }
    println!();
    let of = |name: &str| {
        commands
            .iter()
            .position(|(n, _)| *n == name)
            .map(|i| medians[i])
    };
    let ratio = |what: &str, a: &str, b: &str| {
        if let (Some(a), Some(b)) = (of(a), of(b)) {
            println!("- {what}: **{:.2}×**", a / b);
        }
    };
    ratio("nothing changed vs `cargo test`", quiet, test);
    ratio("nothing changed vs `cargo test --tests`", quiet, tests);
    ratio(
        "`--forceall` vs `cargo test` (the goal: ≤ 1.4×)",
        forceall,
        test,
    );
    ratio(
        "`--forceall --verdict-first` vs `cargo test` (the wait for verdicts)",
        verdicts,
        test,
    );
    ratio(
        "`--forceall` with the fork server vs without (`--no-fork-server`)",
        forceall,
        spawned,
    );
    ratio("`--forceall` vs `cargo nextest run`", forceall, nextest);
    ratio(
        "`cargo ekstazi nextest`, nothing changed vs `cargo nextest run`",
        nextest_quiet,
        nextest,
    );
    ratio(
        "`cargo ekstazi nextest --forceall` vs `cargo nextest run`",
        nextest_forceall,
        nextest,
    );
    ratio("`--forceall` vs `cargo test --tests`", forceall, tests);
    Ok(())
}
