//! A scratch git worktree where the tests of another commit are built and
//! run (`bisect`, `merge-check`), without touching the user's checkout.
//!
//! It lives under the workspace's `target/ekstazi/<purpose>/`, named after
//! the process that made it, so that two runs at once each have their own;
//! what a killed run left behind is removed by the next. The instrumented
//! target directory beside it is shared by every run, so that builds are
//! incremental, and a run holds its lock from the build of a commit to
//! the end of that commit's tests, so that no other run's build replaces
//! the binaries it runs. Each run has a state directory of its own (so that it runs
//! what it is asked to, whatever the user's records say); what it files is
//! then merged into the user's history, not into the current records. The
//! worktree is removed on drop, and a run stops when the interrupt flag is
//! raised (Ctrl-C), its process group killed. Every run takes the user's
//! cargo options (packages, features, profile), so that it builds and runs
//! what their `cargo ekstazi test` would.

use crate::cli::CargoOpts;
use crate::git::repo::Repo;
use crate::style;
use anyhow::{Context, Result, bail};
use ekstazi_core::model::record::Outcome;
use ekstazi_core::storage::store::Store;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A test: its binary id and name.
pub type TestId = (String, String);

pub struct Worktree {
    toplevel: PathBuf,
    /// The workspace's place within the repository.
    workspace: PathBuf,
    worktree: PathBuf,
    created: bool,
    target_dir: PathBuf,
    /// Held by a run from its build to the end of its tests.
    target_lock: PathBuf,
    /// The last run's output (the runs' own is not shown).
    log: PathBuf,
    store: Store,
    interrupted: Arc<AtomicBool>,
    /// The user's cargo options, as every run here takes them.
    cargo: CargoOpts,
}

/// What one run at a commit showed.
pub struct Ran {
    /// Each test the run reported and its outcome (`None`: not run, as a
    /// test filtered out); `None` when nothing was reported: it did not
    /// build.
    pub outcomes: Option<Vec<(TestId, Option<Outcome>)>>,
    /// The executables the run built: test binaries and the programs
    /// their tests can run.
    pub executables: BTreeSet<PathBuf>,
    /// The run's own state directory: its records, and the function
    /// fingerprints of the builds it ran.
    pub state: tempfile::TempDir,
}

impl Ran {
    pub fn store(&self) -> Store {
        Store::new(&self.state.path().join("state"))
    }

    /// The run, with what its JSON report (`text`) says: each test's
    /// outcome, and the executables it built.
    fn with_report(self, text: &str) -> Result<Ran> {
        let report: serde_json::Value = serde_json::from_str(text)?;
        let outcomes = report["tests"]
            .as_array()
            .map(|tests| {
                tests
                    .iter()
                    .filter_map(|t| {
                        let id = (
                            t["binary"].as_str()?.to_owned(),
                            t["name"].as_str()?.to_owned(),
                        );
                        Some((id, outcome_named(t["outcome"].as_str())))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let executables = report["binaries"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|b| {
                let programs = b["programs"].as_array().into_iter().flatten();
                std::iter::once(&b["path"]).chain(programs)
            })
            .filter_map(|p| p.as_str().map(PathBuf::from))
            .collect();
        Ok(Ran {
            outcomes: Some(outcomes),
            executables,
            ..self
        })
    }
}

impl Worktree {
    /// The scratch worktree of this process for `purpose` (`bisect`,
    /// `merge-check`), not made yet, whose runs Ctrl-C, SIGTERM and SIGHUP
    /// stop; what killed runs left there is removed.
    pub fn new(
        repo: &Repo,
        root: &Path,
        store: &Store,
        cargo: &CargoOpts,
        purpose: &str,
    ) -> Result<Worktree> {
        let interrupted = Arc::new(AtomicBool::new(false));
        // A closed terminal (SIGHUP) stops it as Ctrl-C does: its worktree and
        // its inner run go.
        for signal in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::flag::register(signal, interrupted.clone())?;
        }
        let toplevel = repo
            .toplevel()
            .context("cannot find the repository's top level")?;
        let workspace = root
            .strip_prefix(&toplevel)
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let scratch = root.join("target").join("ekstazi").join(purpose);
        remove_leftovers(&toplevel, &scratch);
        let me = std::process::id();
        Ok(Worktree {
            worktree: scratch.join(format!("{WORKTREE}-{me}")),
            target_dir: scratch.join("target"),
            target_lock: scratch.join("target.lock"),
            log: scratch.join(format!("{LOG}-{me}.log")),
            toplevel,
            workspace,
            created: false,
            store: store.clone(),
            interrupted,
            cargo: cargo.for_worktree(),
        })
    }

    /// Removes the scratch worktree, and git's note of it.
    fn remove_worktree(&self) {
        let path = self.worktree.to_string_lossy();
        let _ = git(&self.toplevel, &["worktree", "remove", "--force", &path]);
        let _ = std::fs::remove_dir_all(&self.worktree);
        let _ = git(&self.toplevel, &["worktree", "prune"]);
    }

    /// What the last run printed: where to look when it built nothing.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Git in the worktree (made at `commit` first if there is none yet).
    pub fn git(&mut self, args: &[&str]) -> Result<String> {
        git(&self.worktree, args)
    }

    /// Puts the worktree at `commit`, clean.
    pub fn checkout(&mut self, commit: &str) -> Result<()> {
        if self.interrupted.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        if self.created {
            git(
                &self.worktree,
                &["checkout", "-q", "-f", "--detach", commit],
            )?;
            git(&self.worktree, &["clean", "-q", "-f", "-d", "-x"])?;
            return Ok(());
        }
        if self.worktree.exists() {
            // A worktree an earlier, killed run left behind.
            self.remove_worktree();
        }
        std::fs::create_dir_all(self.worktree.parent().expect("in target"))?;
        git(
            &self.toplevel,
            &[
                "worktree",
                "add",
                "-q",
                "--detach",
                "--force",
                &self.worktree.to_string_lossy(),
                commit,
            ],
        )?;
        self.created = true;
        Ok(())
    }

    /// Builds and runs `tests` (every test when empty) at `commit`; what
    /// the run files there joins the user's history unless `file` is
    /// false (a commit no branch holds, such as a prospective merge, would
    /// only use up the history's budget).
    pub fn run(&mut self, commit: &str, tests: &[TestId], file: bool) -> Result<Ran> {
        self.checkout(commit)?;
        let state = tempfile::Builder::new()
            .prefix("ekstazi-worktree")
            .tempdir()?;
        let unbuilt = |state| Ran {
            outcomes: None,
            executables: BTreeSet::new(),
            state,
        };
        if !self.holds_the_workspace(commit) {
            return Ok(unbuilt(state));
        }
        style::note(format!(
            "building and running the tests at {}",
            short(commit)
        ));
        let report = state.path().join("report.json");
        let command = self.test_command(&state, &report, tests)?;
        self.run_to_the_end(command)?;
        let ran = unbuilt(state);
        // What the run filed at this commit joins the history.
        if file {
            ekstazi_core::storage::merge_state::merge_filed(&self.store, &ran.store())
                .context("cannot keep what the build learnt")?;
        }
        let Ok(text) = std::fs::read_to_string(&report) else {
            return Ok(ran);
        };
        ran.with_report(&text)
    }

    /// Whether the workspace is there at `commit` (checked out): a
    /// project moved in or out leaves nothing to build. Run there, cargo
    /// would look for a manifest in the directories around the worktree —
    /// the user's own checkout, which holds it — and judge the commit by
    /// the user's code.
    fn holds_the_workspace(&self, commit: &str) -> bool {
        let manifest = self.worktree.join(&self.workspace).join("Cargo.toml");
        if !manifest.is_file() {
            style::note(format!(
                "no {} at {}: nothing to build",
                self.workspace.join("Cargo.toml").display(),
                short(commit)
            ));
            return false;
        }
        true
    }

    /// `cargo ekstazi test` in the worktree, of its own `state`, writing
    /// its JSON report to `report` and its output to the log.
    fn test_command(
        &self,
        state: &tempfile::TempDir,
        report: &Path,
        tests: &[TestId],
    ) -> Result<Command> {
        let mut command = Command::new(std::env::current_exe()?);
        clean_environment(&mut command);
        crate::secrets::hand_on(&mut command);
        command
            // Its verdicts and records at once: what it filed is merged
            // as soon as it ends.
            .args(["ekstazi", "test", "--verdict-first=false", "--state-dir"])
            .arg(state.path().join("state"))
            .arg("--target-dir")
            .arg(&self.target_dir)
            .arg("--report-json")
            .arg(report)
            .current_dir(self.worktree.join(&self.workspace))
            .stdin(Stdio::null());
        let log = std::fs::File::create(&self.log)
            .with_context(|| format!("cannot write {}", self.log.display()))?;
        command.stdout(log.try_clone()?).stderr(log);
        command.args(self.selection_args(tests));
        Ok(command)
    }

    /// The cargo options and test names that choose `tests` (every test
    /// the user's options choose when empty).
    fn selection_args(&self, tests: &[TestId]) -> Vec<String> {
        if tests.is_empty() {
            return self.cargo.to_cargo_args(true);
        }
        // The tests name their packages and targets; the user's
        // selection of them would only add others to build.
        let mut args = self.cargo.build_only().to_cargo_args(true);
        let binaries: BTreeSet<&str> = tests.iter().map(|(b, _)| b.as_str()).collect();
        if binaries.iter().any(|b| b.contains("::doc/")) {
            // `--doc` goes with no other target: name the packages, and
            // the names below choose among all their tests.
            let packages: BTreeSet<&str> = binaries
                .iter()
                .map(|b| b.split_once("::").map_or(*b, |(package, _)| package))
                .collect();
            for package in packages {
                args.extend(["-p".to_owned(), package.to_owned()]);
            }
        } else {
            for binary in binaries {
                args.extend(ekstazi_core::model::key::cargo_target_args(binary));
            }
        }
        args.extend(["--".to_owned(), "--exact".to_owned()]);
        args.extend(tests.iter().map(|(_, name)| name.clone()));
        args
    }

    /// Runs `command` in a process group of its own, holding the shared
    /// target directory's lock, until it ends or the interrupt flag is
    /// raised (then its whole group is stopped).
    fn run_to_the_end(&self, mut command: Command) -> Result<()> {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
        let _lock = self.lock_target()?;
        let mut child = command.spawn().context("cannot start cargo ekstazi test")?;
        loop {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            if self.interrupted.load(Ordering::SeqCst) {
                // SAFETY: kill(2) on the child's own process group.
                unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGTERM) };
                let _ = child.wait();
                bail!("interrupted");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A test's outcome as the JSON report names it; `None`: it did not run.
fn outcome_named(name: Option<&str>) -> Option<Outcome> {
    match name {
        Some("passed") => Some(Outcome::Passed),
        Some("failed") => Some(Outcome::Failed),
        Some("crashed") => Some(Outcome::Crashed),
        Some("timed out") => Some(Outcome::TimedOut),
        _ => None,
    }
}

impl Worktree {
    /// The shared target directory's lock, waited for (another `bisect` or
    /// `merge-check` may be building there) unless interrupted.
    fn lock_target(&self) -> Result<std::fs::File> {
        use std::os::fd::AsRawFd;
        std::fs::create_dir_all(self.target_lock.parent().expect("in target"))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.target_lock)
            .with_context(|| format!("cannot open {}", self.target_lock.display()))?;
        let mut said = false;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(file);
            }
            if self.interrupted.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            if !said {
                style::note(format!(
                    "waiting for another run that builds in {}",
                    self.target_dir.display()
                ));
                said = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The scratch worktree's name, before the process id.
const WORKTREE: &str = "worktree";
/// The last run's log's name, before the process id.
const LOG: &str = "last-run";

/// Removes what runs that no longer exist left in `scratch`: worktrees
/// (and git's notes of them) and logs. A live process's are its own.
fn remove_leftovers(toplevel: &Path, scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return;
    };
    let mut pruned = false;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = |prefix: &str, suffix: &str| {
            name.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(suffix))
                .map(|pid| pid.parse::<u32>().ok())
        };
        let path = entry.path();
        // The name of one worktree for all runs, before names had an owner.
        let legacy = name == WORKTREE;
        if legacy || owner(&format!("{WORKTREE}-"), "").is_some_and(|pid| !alive(pid)) {
            let _ = git(
                toplevel,
                &["worktree", "remove", "--force", &path.to_string_lossy()],
            );
            let _ = std::fs::remove_dir_all(&path);
            pruned = true;
        } else if owner(&format!("{LOG}-"), ".log").is_some_and(|pid| !alive(pid)) {
            let _ = std::fs::remove_file(&path);
        }
    }
    if pruned {
        let _ = git(toplevel, &["worktree", "prune"]);
    }
}

/// Whether `pid` names a live process; a name without one does not.
fn alive(pid: Option<u32>) -> bool {
    pid.is_some_and(crate::processes::alive)
}

impl Drop for Worktree {
    fn drop(&mut self) {
        if self.created {
            self.remove_worktree();
        }
    }
}

/// A commit id as the reports print it.
pub fn short(commit: &str) -> &str {
    commit.get(..10).unwrap_or(commit)
}

pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The variables a run here keeps of the user's `EKSTAZI_*`: how tests are
/// run and traced. The others (a partition, `forceall`, patterns, another
/// state directory, verdicts first, ...) are about the user's own runs; in
/// a run here they would change what runs and what is recorded, and so what
/// `bisect` and `merge-check` conclude.
const KEPT_VARIABLES: [&str; 6] = [
    "EKSTAZI_JOBS",
    "EKSTAZI_TIMEOUT",
    "EKSTAZI_SLOW_TIMEOUT",
    "EKSTAZI_PRIVATE_TMPDIR",
    "EKSTAZI_FORK_SERVER",
    "EKSTAZI_NO_SUD",
];

/// Takes the user's `EKSTAZI_*` variables out of a run's environment, but
/// for [`KEPT_VARIABLES`].
fn clean_environment(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("EKSTAZI_") && !KEPT_VARIABLES.contains(&text.as_ref()) {
            command.env_remove(&name);
        }
    }
}
