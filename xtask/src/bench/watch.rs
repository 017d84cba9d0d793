//! `cargo xtask bench-watch`: from a save to the last verdict, after a
//! one-function edit, with `cargo ekstazi watch` running, against bacon and
//! against a plain `cargo test` started after the save.
//!
//! Three scratch copies of the project, each building in its own target
//! directory: (A) `cargo ekstazi watch -q`, started once, its stdout piped
//! (so in plain mode: no clearing, no keys) and its stdin null; (B) `bacon
//! --headless test`, started once, if `bacon` is on PATH (else its column
//! is skipped, and the report says so); (C) `cargo test -q`, started after
//! each save. Each round writes the round's edit (`super::edit::edit`, a
//! new value each round, as `bench-edit` does) into each copy in turn, in
//! an order that rotates by round, so that none always goes first after a
//! warm page cache. The clock starts just before the file is written and
//! stops at: for A, the instant its reader thread read the verdict line
//! (`test result: …` with ` selected: `, the last of a cycle); for B, the
//! N-th `test result:` line after the save, N counted once from a `cargo
//! test` (one per test binary, plus the doctests'); for C, its exit.
//!
//! Only one of the three is busy at a time: after A's verdict the next copy
//! waits for A's idle line and for its recording in the background to end
//! (`recording.pid` in the state directory goes); that wait is reported
//! apart and is not in the ratios. After B's verdict, for bacon's `cargo`
//! to exit. Two warm-up rounds are not counted. Exit codes and failing
//! tests are not judged, but the edit must build (checked first, as
//! `bench-edit` does), and a watch cycle started by anything but the edit
//! stops the benchmark: its verdict would not be the edit's.
//!
//! A and B lead process groups of their own, stopped at the end and on an
//! error (and sent SIGTERM if this process dies first). What they print,
//! stdout and stderr, is kept beside the scratch directory.
//!
//! ```sh
//! cargo xtask bench-watch --file shapes/src/lib.rs --line 5 --runs 7   # the demo: square()
//! cargo xtask bench-watch --project /tmp/hexyl --file src/lib.rs --line 249 --runs 7   # hexyl 8eb6d477: outer_sep()
//! ```

use super::edit::edit;
use crate::common::files::{copy_tree, tempfile_dir, workspace_root};
use crate::common::process::{
    ekstazi_binary, ekstazi_command, plain_command, recording_pid, run, wait_for_recording,
};
use crate::common::stats::{median, seconds};
use anyhow::{Context, Result, bail};
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// `bench-watch`'s options: `bench-edit`'s project, edit point, binary and
/// cargo options (the project is copied three times, and left as it is).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub point: super::edit::EditPoint,
    /// Timed rounds (an edit saved in each copy), after two warm-up rounds
    #[arg(long, default_value_t = 7)]
    pub runs: usize,
    /// Cargo options for the three (e.g. --workspace)
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

/// Rounds made before the timed ones, and not counted.
const WARM_UP: usize = 2;
/// The longest any one wait may take (a first build of a large project
/// included) before the benchmark gives up.
const PATIENCE: Duration = Duration::from_secs(30 * 60);
/// How long a stopped watcher may take to stop its children and exit
/// before its process group is killed.
const GRACE: Duration = Duration::from_secs(15);

/// The three measured, in the order of the first round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Watch,
    Bacon,
    Plain,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Watch => "watch",
            Side::Bacon => "bacon",
            Side::Plain => "plain",
        }
    }

    /// Its copy of the project, in the scratch directory.
    fn copy(self, scratch: &Path) -> PathBuf {
        scratch.join(self.name())
    }

    /// What it prints, stdout and stderr, beside the scratch directory
    /// (which goes at the end: the log stays, and says why it failed).
    fn log(self, scratch: &Path) -> PathBuf {
        scratch.with_extension(format!("{}.log", self.name()))
    }
}

/// Each timed round's measurements; `bacon` is empty when bacon was not
/// measured.
#[derive(Default)]
struct Timings {
    watch: Vec<Duration>,
    /// From A's verdict until its idle line and the end of its recording.
    quiet: Vec<Duration>,
    bacon: Vec<Duration>,
    plain: Vec<Duration>,
}

/// `cargo xtask bench-watch`.
pub fn bench(args: Args) -> Result<()> {
    if std::env::var_os("CARGO_TARGET_DIR").is_some() {
        bail!("CARGO_TARGET_DIR is set: the three copies would share one target directory");
    }
    let ekstazi = ekstazi_binary(args.point.ekstazi.clone())?;
    let source = match &args.point.project {
        Some(project) => std::path::absolute(project)?,
        None => workspace_root().join("examples/demo"),
    };
    let bacon = on_path("bacon");
    let scratch = tempfile_dir()?;
    let result = measure(&args, &ekstazi, &source, &scratch, bacon.as_deref());
    // The copies hold three builds; they go whatever happened.
    let _ = std::fs::remove_dir_all(&scratch);
    print_report(&result?, bacon.as_deref());
    Ok(())
}

/// The copies made, the three started and warmed up, and the rounds.
fn measure(
    args: &Args,
    ekstazi: &Path,
    source: &Path,
    scratch: &Path,
    bacon: Option<&Path>,
) -> Result<Timings> {
    let original = std::fs::read_to_string(source.join(&args.point.file))
        .with_context(|| format!("cannot read {}", source.join(&args.point.file).display()))?;
    for side in [Side::Watch, Side::Bacon, Side::Plain] {
        let copy = side.copy(scratch);
        std::fs::create_dir_all(&copy)?;
        copy_tree(source, &copy)?;
        std::fs::write(
            copy.join(&args.point.file),
            edit(&original, args.point.line, 0)?,
        )?;
    }
    eprintln!(
        "measuring in copies of {} in {} (what the watchers print: {}, {})",
        source.display(),
        scratch.display(),
        Side::Watch.log(scratch).display(),
        Side::Bacon.log(scratch).display()
    );
    let results = setup_plain(args, &Side::Plain.copy(scratch))?;
    let bacon = match bacon {
        Some(bacon) => Some(start_bacon(args, bacon, scratch, results)?),
        None => None,
    };
    let watch = start_watch(args, ekstazi, scratch)?;
    let rounds = Rounds {
        args,
        original: &original,
        scratch,
        watch: &watch,
        bacon: bacon.as_ref(),
        results,
    };
    rounds.all()
    // `watch` and `bacon` are stopped here, when dropped, error or not.
}

/// C's build made at edit 0 and checked (a line outside a function body
/// would time failing builds), then the number of `test result:` lines a
/// run prints, which is how B's end is told.
fn setup_plain(args: &Args, dir: &Path) -> Result<usize> {
    args.point.check_builds(dir, &args.cargo_args)?;
    let out = Command::new("cargo")
        .args(["test", "-q"])
        .args(&args.cargo_args)
        .current_dir(dir)
        .stderr(Stdio::null())
        .output()?;
    let results = result_lines(&String::from_utf8_lossy(&out.stdout));
    if results == 0 {
        bail!(
            "`cargo test -q` in {} printed no `test result:` line",
            dir.display()
        );
    }
    Ok(results)
}

/// B started, and its first run (a build from nothing) waited for.
fn start_bacon(args: &Args, bacon: &Path, scratch: &Path, results: usize) -> Result<Watcher> {
    let mut command = vec![
        bacon.display().to_string(),
        "--headless".into(),
        "test".into(),
    ];
    if !args.cargo_args.is_empty() {
        command.push("--".into());
        command.extend(args.cargo_args.iter().cloned());
    }
    let (dir, log) = (Side::Bacon.copy(scratch), Side::Bacon.log(scratch));
    let bacon = Watcher::spawn("bacon", &command, &dir, &log, None)?;
    for _ in 0..results {
        bacon.until("its first run's `test result:` lines", is_test_result)?;
    }
    bacon.settle()?;
    Ok(bacon)
}

/// A started, and its first cycle (every test, then recorded) waited for.
fn start_watch(args: &Args, ekstazi: &Path, scratch: &Path) -> Result<Watcher> {
    let command = ekstazi_command(ekstazi, &["watch", "-q"], &args.cargo_args);
    let (dir, log) = (Side::Watch.copy(scratch), Side::Watch.log(scratch));
    let state = Some(dir.join(".ekstazi"));
    let watch = Watcher::spawn("cargo ekstazi watch", &command, &dir, &log, state)?;
    let cause = watch.until_cycle()?;
    if cause != "first run" {
        bail!("the watch's first cycle was not its first run but: {cause}");
    }
    watch.until_verdict()?;
    watch.quiesce()?;
    Ok(watch)
}

/// What every round needs.
struct Rounds<'a> {
    args: &'a Args,
    original: &'a str,
    scratch: &'a Path,
    watch: &'a Watcher,
    bacon: Option<&'a Watcher>,
    results: usize,
}

impl Rounds<'_> {
    fn all(&self) -> Result<Timings> {
        let mut timings = Timings::default();
        let sides: Vec<Side> = [Side::Watch, Side::Bacon, Side::Plain]
            .into_iter()
            .filter(|side| *side != Side::Bacon || self.bacon.is_some())
            .collect();
        let rounds = WARM_UP + self.args.runs.max(1);
        for round in 1..=rounds {
            let timed = round > WARM_UP;
            if timed {
                eprintln!("round {}/{}", round - WARM_UP, rounds - WARM_UP);
            } else {
                eprintln!("warm-up round {round}/{WARM_UP}");
            }
            let text = edit(self.original, self.args.point.line, round)?;
            let mut warming = Timings::default();
            let into = if timed { &mut timings } else { &mut warming };
            for side in order(round, &sides) {
                self.one(side, &text, into)?;
            }
        }
        Ok(timings)
    }

    /// One side's save and wait, its times added to `timings`.
    fn one(&self, side: Side, text: &str, timings: &mut Timings) -> Result<()> {
        let file = side.copy(self.scratch).join(&self.args.point.file);
        match (side, self.bacon) {
            (Side::Watch, _) => {
                let (verdict, quiet) = self.save_watched(&file, text)?;
                timings.watch.push(verdict);
                timings.quiet.push(quiet);
            }
            (Side::Bacon, Some(bacon)) => {
                timings.bacon.push(self.save_baconed(bacon, &file, text)?)
            }
            (Side::Bacon, None) => {}
            (Side::Plain, _) => {
                let cargo = plain_command(&["test", "-q"], &self.args.cargo_args);
                let t0 = Instant::now();
                std::fs::write(&file, text)?;
                run(&side.copy(self.scratch), &cargo)?;
                timings.plain.push(t0.elapsed());
            }
        }
        Ok(())
    }

    /// A: the save to the verdict line, and the verdict to quiet.
    fn save_watched(&self, file: &Path, text: &str) -> Result<(Duration, Duration)> {
        self.watch.drain();
        let t0 = Instant::now();
        std::fs::write(file, text)?;
        let cause = self.watch.until_cycle()?;
        let edited = self.args.point.file.display().to_string();
        if !cause.starts_with(&edited) {
            bail!("a watch cycle was started by something else than the edit of {edited}: {cause}");
        }
        let t1 = self.watch.until_verdict()?;
        self.watch.quiesce()?;
        Ok((t1 - t0, t1.elapsed()))
    }

    /// B: the save to the last of its `test result:` lines.
    fn save_baconed(&self, bacon: &Watcher, file: &Path, text: &str) -> Result<Duration> {
        bacon.drain();
        let t0 = Instant::now();
        std::fs::write(file, text)?;
        let mut t1 = t0;
        for _ in 0..self.results {
            t1 = bacon.until("a `test result:` line", is_test_result)?;
        }
        bacon.settle()?;
        Ok(t1 - t0)
    }
}

/// Round `round`'s order: the sides rotated by one each round, so that each
/// goes first, second and last equally often.
fn order(round: usize, sides: &[Side]) -> Vec<Side> {
    let mut order = sides.to_vec();
    if !order.is_empty() {
        let len = order.len();
        order.rotate_left((round + len - 1) % len);
    }
    order
}

/// A long-running watcher (the watch or bacon): the leader of a process
/// group of its own, and its stdout line by line, each with the instant a
/// thread read it.
struct Watcher {
    name: &'static str,
    child: Child,
    lines: Receiver<(Instant, String)>,
    /// What it printed, for the errors.
    log: PathBuf,
    /// The watch's state directory, whose recording must end too.
    state: Option<PathBuf>,
}

impl Watcher {
    fn spawn(
        name: &'static str,
        command: &[String],
        dir: &Path,
        log: &Path,
        state: Option<PathBuf>,
    ) -> Result<Self> {
        let file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut record = file.try_clone()?;
        let mut spawn = Command::new(&command[0]);
        spawn
            .args(&command[1..])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe. Should this process die
        // before it stops the watcher, the watcher is told to stop.
        unsafe {
            spawn.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = spawn
            .spawn()
            .with_context(|| format!("cannot run {command:?}"))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let read = Instant::now();
                let _ = writeln!(record, "{line}");
                if send.send((read, line)).is_err() {
                    break;
                }
            }
        });
        Ok(Watcher {
            name,
            child,
            lines,
            log: log.to_owned(),
            state,
        })
    }

    /// What was read and not yet looked at, dropped: what came before a
    /// save is not its answer.
    fn drain(&self) {
        while self.lines.try_recv().is_ok() {}
    }

    /// The instant the first line that `wanted` matches was read; an error
    /// if the watcher ends first, reports a failed build, or takes too long.
    fn until(&self, what: &str, wanted: fn(&str) -> bool) -> Result<Instant> {
        Ok(self.until_line(what, wanted)?.0)
    }

    fn until_line(&self, what: &str, wanted: fn(&str) -> bool) -> Result<(Instant, String)> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = match self.lines.recv_timeout(left) {
                Ok(read) => read,
                Err(RecvTimeoutError::Timeout) => {
                    bail!(
                        "{} never printed {what} (see {})",
                        self.name,
                        self.log.display()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    bail!(
                        "{} ended before it printed {what} (see {})",
                        self.name,
                        self.log.display()
                    )
                }
            };
            let line = strip_ansi(&line);
            if is_build_failure(&line) {
                bail!("{}: the edit did not build: {line}", self.name);
            }
            if wanted(&line) {
                return Ok((at, line));
            }
        }
    }

    /// The watch's next cycle header, and why that cycle runs.
    fn until_cycle(&self) -> Result<String> {
        let (_, header) =
            self.until_line("a cycle's header", |line| cycle_cause(line).is_some())?;
        Ok(cycle_cause(&header).unwrap_or_default().to_owned())
    }

    /// The instant the watch's verdict line was read; an error if the cycle
    /// ends without one.
    fn until_verdict(&self) -> Result<Instant> {
        let wanted = |line: &str| is_verdict(line) || is_idle(line);
        let (at, line) = self.until_line("a verdict line", wanted)?;
        if is_idle(&line) {
            bail!(
                "a cycle ended without a verdict line (see {})",
                self.log.display()
            );
        }
        Ok(at)
    }

    /// The watch, after a verdict: its idle line, and its recording ended.
    fn quiesce(&self) -> Result<()> {
        self.until("its idle line", is_idle)?;
        if let Some(state) = &self.state {
            wait_for_recording(state)?;
        }
        Ok(())
    }

    /// Bacon, after its last `test result:`: its `cargo test` exited.
    fn settle(&self) -> Result<()> {
        let start = Instant::now();
        while has_children(self.child.id())? {
            if start.elapsed() > PATIENCE {
                bail!("{}'s command never ended", self.name);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

impl Drop for Watcher {
    /// SIGTERM to the process group (the watch stops its cycle and its
    /// recording then), SIGKILL if it is still there after [`GRACE`]; then
    /// a recording that outlived it.
    fn drop(&mut self) {
        let group = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the group this process created, whose leader
        // is not reaped yet, so the id is still the group's.
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let start = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && start.elapsed() < GRACE {
            std::thread::sleep(Duration::from_millis(20));
        }
        // What is left of the group (bacon's cargo, say). SAFETY: kill(2)
        // has no memory-safety preconditions; the leader may be reaped by
        // now, but a group's id is not given to another process while any
        // process is in it, and with none left the call fails (ESRCH).
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.child.wait();
        if let Some(state) = &self.state {
            stop_recording(state);
        }
    }
}

/// Kills the recording in the background named by `state`'s
/// `recording.pid`, if it still runs (it leads a session of its own).
fn stop_recording(state: &Path) {
    if let Some(pid) = recording_pid(state)
        && Path::new(&format!("/proc/{pid}")).exists()
    {
        // SAFETY: kill(2) has no memory-safety preconditions; the group is
        // the recording this benchmark's watch started.
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
    }
}

/// Whether a process has a child process (any thread's), from /proc.
fn has_children(pid: u32) -> Result<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("process {pid} is gone"))?;
    for task in tasks {
        let children = std::fs::read_to_string(task?.path().join("children")).unwrap_or_default();
        if !children.trim().is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The program's path if it is on PATH.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The watch's verdict line, the last of its cycle: `test result: ok. 3
/// selected: …` (or `FAILED.`); libtest's own `test result:` lines have no
/// ` selected: `.
fn is_verdict(line: &str) -> bool {
    line.starts_with("test result: ") && line.contains(" selected: ")
}

/// Any `test result:` line, libtest's or the watch's.
fn is_test_result(line: &str) -> bool {
    line.starts_with("test result:")
}

/// The watch's idle line: the cycle, its summary included, is over.
fn is_idle(line: &str) -> bool {
    line.starts_with("cargo-ekstazi: watching for changes")
}

/// The watch's line for a cycle whose build failed.
fn is_build_failure(line: &str) -> bool {
    line.starts_with("cargo-ekstazi: cycle ") && line.contains("the build failed")
}

/// Why a cycle runs, from its header `── cycle <K>: <why> ──`.
fn cycle_cause(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("── cycle ")?.strip_suffix(" ──")?;
    let (number, why) = rest.split_once(": ")?;
    number.parse::<u64>().ok().map(|_| why)
}

/// How many `test result:` lines an output has.
fn result_lines(stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|line| is_test_result(&strip_ansi(line)))
        .count()
}

/// `line` without ANSI escape sequences (bacon runs cargo with `--color
/// always`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // CSI: `ESC [`, parameters, one final byte in @..~.
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

fn print_report(timings: &Timings, bacon: Option<&Path>) {
    let watch = "cargo ekstazi watch";
    println!("| save to last verdict, after a one-function edit | median | min | max |");
    println!("|---|---:|---:|---:|");
    let mut rows = vec![("`cargo test -q`, started after the save", &timings.plain)];
    if bacon.is_some() {
        rows.push(("`bacon --headless test`", &timings.bacon));
    }
    rows.push(("`cargo ekstazi watch`", &timings.watch));
    for (name, times) in rows {
        let (min, max) = (times.iter().min(), times.iter().max());
        let secs = |time: Option<&Duration>| time.copied().unwrap_or_default().as_secs_f64();
        println!(
            "| {name} | {:.3}s | {:.3}s | {:.3}s |",
            median(&seconds(times)),
            secs(min),
            secs(max)
        );
    }
    println!();
    print_ratio(
        &format!("`{watch}` vs `cargo test`"),
        &timings.watch,
        &timings.plain,
    );
    match bacon {
        Some(_) => print_ratio(
            &format!("`{watch}` vs bacon"),
            &timings.watch,
            &timings.bacon,
        ),
        None => println!("- bacon: not on PATH, its column skipped"),
    }
    println!(
        "- then, after the verdict, until the watch is idle and its recording in the background has ended: {:.3}s (median; not in the ratios)",
        median(&seconds(&timings.quiet))
    );
}

/// The ratio of the medians, then round by round.
fn print_ratio(name: &str, numerator: &[Duration], denominator: &[Duration]) {
    let ratio = median(&seconds(numerator)) / median(&seconds(denominator));
    let rounds: Vec<String> = ratios(numerator, denominator)
        .iter()
        .map(|ratio| format!("{ratio:.2}"))
        .collect();
    println!(
        "- {name}: **{ratio:.2}×**; round by round: {}",
        rounds.join(", ")
    );
}

/// Round by round, `numerator / denominator`.
fn ratios(numerator: &[Duration], denominator: &[Duration]) -> Vec<f64> {
    numerator
        .iter()
        .zip(denominator)
        .map(|(n, d)| n.as_secs_f64() / d.as_secs_f64())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_line_is_the_watch_s_not_libtest_s() {
        assert!(is_verdict(
            "test result: ok. 3 selected: 3 passed; 0 failed; 0 ignored; 3 skipped as unaffected (~0.01s saved); finished in 1.05s"
        ));
        assert!(is_verdict(
            "test result: FAILED. 1 selected: 0 passed; 1 failed; 0 ignored; 5 skipped as unaffected; finished in 0.2s"
        ));
        assert!(!is_verdict(
            "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"
        ));
        assert!(!is_verdict("cargo-ekstazi: 3 tests selected: 3 passed"));
        assert!(is_test_result(
            "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"
        ));
    }

    #[test]
    fn a_cycle_header_says_why() {
        assert_eq!(cycle_cause("── cycle 1: first run ──"), Some("first run"));
        assert_eq!(
            cycle_cause("── cycle 12: src/lib.rs and 2 more changed ──"),
            Some("src/lib.rs and 2 more changed")
        );
        assert_eq!(cycle_cause("── cycle x: first run ──"), None);
        assert_eq!(
            cycle_cause("cargo-ekstazi: cycle 3: the build failed"),
            None
        );
        assert!(is_build_failure(
            "cargo-ekstazi: cycle 3: the build failed; fix it and save to try again"
        ));
        assert!(is_idle("cargo-ekstazi: watching for changes…  [a] all"));
    }

    #[test]
    fn colours_are_taken_out_before_matching() {
        let coloured = "test result: \u{1b}[32mok\u{1b}[0m. 2 passed; 0 failed";
        assert_eq!(strip_ansi(coloured), "test result: ok. 2 passed; 0 failed");
        let output = "running 2 tests\n\u{1b}[1mtest result:\u{1b}[0m ok.\n\ntest result: ok.\n";
        assert_eq!(result_lines(output), 2);
    }

    #[test]
    fn each_side_goes_first_in_turn() {
        use Side::*;
        let all = [Watch, Bacon, Plain];
        assert_eq!(order(1, &all), [Watch, Bacon, Plain]);
        assert_eq!(order(2, &all), [Bacon, Plain, Watch]);
        assert_eq!(order(3, &all), [Plain, Watch, Bacon]);
        assert_eq!(order(4, &all), order(1, &all));
        assert_eq!(order(2, &[Watch, Plain]), [Plain, Watch]);
        assert!(order(5, &[]).is_empty());
    }

    #[test]
    fn ratios_round_by_round() {
        let secs = |s: &[u64]| {
            s.iter()
                .map(|&s| Duration::from_secs(s))
                .collect::<Vec<_>>()
        };
        assert_eq!(ratios(&secs(&[1, 3]), &secs(&[2, 3])), [0.5, 1.0]);
    }
}
