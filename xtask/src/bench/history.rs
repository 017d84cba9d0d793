//! `cargo xtask bench-history`: what keeping records per commit costs the
//! analysis. The same `cargo ekstazi list` is timed on a state directory
//! with its history and on a copy of it without, alternating, and the
//! medians of the `analysis` stage (loading records, checksums, the
//! vouching candidates) are compared. Both copies have the same current
//! records, so the difference is what the history adds: its manifests read,
//! and the filed records tried for the tests the current records do not
//! vouch for.

use crate::common::files::copy_tree;
use crate::common::process::{ekstazi_binary, output};
use crate::common::stats::median;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args)]
pub struct Args {
    /// The project's checkout, at the commit to analyse
    #[arg(long)]
    pub project: PathBuf,
    /// Its state directory (with a history: an `eval replay`'s `state-function`, say)
    #[arg(long)]
    pub state: PathBuf,
    /// The target directory its state was recorded with
    #[arg(long)]
    pub target_dir: Option<PathBuf>,
    /// A cargo-ekstazi binary to measure [default: built from this workspace]
    #[arg(long)]
    pub ekstazi: Option<PathBuf>,
    /// Timed runs of each
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Cargo options (e.g. --workspace)
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

impl Args {
    /// The cargo-ekstazi binary, given or built (and taken out of the
    /// options), the paths made absolute, and at least one run.
    fn resolve(mut self) -> Result<(PathBuf, Self)> {
        let ekstazi = ekstazi_binary(self.ekstazi.take())?;
        Ok((
            ekstazi,
            Args {
                project: std::path::absolute(self.project)?,
                state: std::path::absolute(self.state)?,
                target_dir: self.target_dir.map(std::path::absolute).transpose()?,
                runs: self.runs.max(1),
                ..self
            },
        ))
    }
}

pub fn bench(args: Args) -> Result<()> {
    let (ekstazi, args) = args.resolve()?;
    // Removed when the bench ends, however it ends: two copies of a state
    // with its history are hundreds of megabytes, and thirty benches left
    // behind filled this machine's disk.
    let scratch = tempfile::Builder::new()
        .prefix("ekstazi-bench-history")
        .tempdir()?;
    let with = scratch.path().join("with-history");
    let without = scratch.path().join("one-state");
    for copy in [&with, &without] {
        std::fs::create_dir_all(copy)?;
        copy_tree(&args.state, copy)?;
    }
    let version = std::fs::read_dir(&without)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.join(".history").is_dir())
        .context(
            "the state directory has no history (run `cargo ekstazi test` on clean commits first)",
        )?;
    std::fs::remove_dir_all(version.join(".history"))?;
    let commits = count_commits(&with)?;

    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut selected = [String::new(), String::new()];
    // One untimed run each first: the build, and the page cache.
    for run in 0..=args.runs {
        for (i, state) in [&with, &without].into_iter().enumerate() {
            let (analysis, line) = analyse(&args, &ekstazi, state)?;
            if run > 0 {
                times[i].push(analysis);
            }
            selected[i] = line;
        }
    }
    let (h, one) = (median(&times[0]), median(&times[1]));
    println!(
        "{} at {}, {} runs each, alternating",
        args.project.display(),
        output(Command::new("git").arg("-C").arg(&args.project).args([
            "log",
            "-1",
            "--format=%h %s"
        ]))?
        .trim(),
        args.runs
    );
    println!("| state | commits kept | analysis (median) | selection |");
    println!("|---|---:|---:|---|");
    println!(
        "| with its history | {commits} | {h:.3}s | {} |",
        selected[0]
    );
    println!("| one state | 0 | {one:.3}s | {} |", selected[1]);
    println!("ratio: {:.2}x", h / one);
    Ok(())
}

fn count_commits(state: &Path) -> Result<usize> {
    let mut n = 0;
    for version in std::fs::read_dir(state)? {
        let commits = version?.path().join(".history/commits");
        if let Ok(entries) = std::fs::read_dir(commits) {
            n += entries.count();
        }
    }
    Ok(n)
}

/// One `cargo ekstazi list -v`: the analysis stage's seconds, and the
/// summary line (`N of M tests selected`).
fn analyse(args: &Args, ekstazi: &Path, state: &Path) -> Result<(f64, String)> {
    let mut command = Command::new(ekstazi);
    command
        .args(["ekstazi", "list", "-v", "--state-dir"])
        .arg(state)
        .args(&args.cargo_args)
        .current_dir(&args.project);
    if let Some(target) = &args.target_dir {
        command.arg("--target-dir").arg(target);
    }
    let out = command.output()?;
    if !out.status.success() {
        bail!(
            "cargo ekstazi list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let analysis = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("cargo-ekstazi: "))
        .flat_map(|l| l.split(", "))
        .find_map(|stage| stage.strip_prefix("analysis "))
        .and_then(|s| s.trim_end_matches('s').parse::<f64>().ok())
        .context("`list -v` printed no analysis time")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains("tests selected"))
        .unwrap_or("")
        .to_owned();
    Ok((analysis, line))
}
