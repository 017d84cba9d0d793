//! Running commands: timed and unjudged (`run`, for benchmarks), checked
//! (`run_ok`), captured (`output`), and the cargo-ekstazi binary they
//! measure, given or built from this workspace.

use super::files::workspace_root;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The given cargo-ekstazi binary, or one built from this workspace.
pub fn ekstazi_binary(given: Option<PathBuf>) -> Result<PathBuf> {
    match given {
        Some(path) => Ok(std::path::absolute(path)?),
        None => build_ekstazi(),
    }
}

/// Builds cargo-ekstazi in release mode and returns the binary's path.
pub fn build_ekstazi() -> Result<PathBuf> {
    let root = workspace_root();
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "-p", "cargo-ekstazi"])
        .current_dir(&root)
        .status()?;
    if !status.success() {
        bail!("building cargo-ekstazi failed");
    }
    Ok(root.join("target/release/cargo-ekstazi"))
}

/// `cargo <args> <cargo_args>`, as `run` takes it.
pub fn plain_command(args: &[&str], cargo_args: &[String]) -> Vec<String> {
    command_line("cargo", &[], args, cargo_args)
}

/// `<ekstazi> ekstazi <args> <cargo_args>`: cargo-ekstazi as cargo runs it.
pub fn ekstazi_command(ekstazi: &Path, args: &[&str], cargo_args: &[String]) -> Vec<String> {
    command_line(
        &ekstazi.display().to_string(),
        &["ekstazi"],
        args,
        cargo_args,
    )
}

fn command_line(program: &str, sub: &[&str], args: &[&str], cargo_args: &[String]) -> Vec<String> {
    std::iter::once(program)
        .chain(sub.iter().copied())
        .chain(args.iter().copied())
        .map(str::to_owned)
        .chain(cargo_args.iter().cloned())
        .collect()
}

/// Runs a command in `dir`, quietly, and returns its wall-clock time. Exit
/// codes are not judged: a flaky test must not stop a benchmark.
pub fn run(dir: &Path, command: &[String]) -> Result<Duration> {
    let start = Instant::now();
    Command::new(&command[0])
        .args(&command[1..])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    Ok(start.elapsed())
}

/// Waits for the recording a `--verdict-first` run left running in the
/// background on `state_dir` (its process id file goes when it ends), and
/// returns how long that took: a benchmark must not time its next command
/// while it runs, and says how long recording took after the verdicts.
pub fn wait_for_recording(state_dir: &Path) -> Result<Duration> {
    let start = Instant::now();
    while running_recording(state_dir).is_some() {
        if start.elapsed() > Duration::from_secs(3 * 3600) {
            bail!(
                "the background recording in {} never ended",
                state_dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(start.elapsed())
}

/// The process id `state_dir`'s `recording.pid` names: the recording a
/// `--verdict-first` run left in the background, or that it had.
pub fn recording_pid(state_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(state_dir.join("recording.pid")).ok()?;
    text.trim().parse::<u32>().ok().filter(|pid| *pid > 0)
}

/// [`recording_pid`], while that process runs (not a zombie).
pub fn running_recording(state_dir: &Path) -> Option<u32> {
    let pid = recording_pid(state_dir)?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
    (state != 'Z' && state != 'X').then_some(pid)
}

pub fn run_ok(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

pub fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
