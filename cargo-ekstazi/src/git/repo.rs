//! What the history needs to know of the repository: `HEAD`, its parents,
//! and whether the work tree is clean.
//!
//! From the `git` command rather than a library: it reads the repository
//! exactly as the user's own git does (worktrees, alternates, SHA-256,
//! `safe.directory`), and two plumbing calls, made at once, are all a run
//! needs. Not a git repository, or no `git` on the `PATH`: no history, and
//! the run behaves as it would without one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository a workspace is in, as a run found it.
#[derive(Clone, Debug)]
pub struct Repo {
    dir: PathBuf,
    /// `HEAD`'s commit id.
    pub head: String,
    /// Its parents, in order (two or more at a merge, none at a root).
    pub parents: Vec<String>,
    /// No tracked file differed from `HEAD` (untracked files do not count:
    /// a record names every file it read, untracked or not, and is checked
    /// against each before it vouches).
    pub clean: bool,
    /// `HEAD`'s message ends with the trailer `Ekstazi: all`.
    pub asks_full_run: bool,
}

impl Repo {
    /// The repository containing `dir`, if any.
    pub fn at(dir: &Path) -> Option<Repo> {
        // `HEAD`'s trailers asked beside `HEAD` and the status.
        let (state, asks_full_run) = std::thread::scope(|scope| {
            let asks_full_run = scope.spawn(|| asks_full_run(dir));
            (
                head_and_status(dir),
                asks_full_run.join().expect("`git log` thread"),
            )
        });
        let (head, parents, clean) = state?;
        Some(Repo {
            clean,
            dir: dir.to_path_buf(),
            head,
            parents,
            asks_full_run,
        })
    }

    /// Whether the repository is still at the same clean `HEAD` (a run is
    /// only filed under a commit if it saw that commit from start to end).
    pub fn unchanged(&self) -> bool {
        head_and_status(&self.dir).is_some_and(|(head, _, clean)| clean && head == self.head)
    }

    /// The root commits (those with no parent that `HEAD` reaches): what
    /// names the project in a signature.
    pub fn root_commits(&self) -> Vec<String> {
        lines(git(&self.dir, &["rev-list", "--max-parents=0", "HEAD"]))
    }

    /// `HEAD` and its first-parent ancestors, nearest first, at most `n`.
    pub fn ancestry(&self, n: usize) -> Vec<String> {
        lines(git(
            &self.dir,
            &["rev-list", "--first-parent", "-n", &n.to_string(), "HEAD"],
        ))
    }

    /// The top directory of the work tree.
    pub fn toplevel(&self) -> Option<PathBuf> {
        let dir = git(&self.dir, &["rev-parse", "--show-toplevel"])?;
        Some(PathBuf::from(dir.trim_end()))
    }

    /// The full id of the commit `rev` names.
    pub fn resolve(&self, rev: &str) -> Option<String> {
        let id = git(
            &self.dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ],
        )?;
        let id = id.trim();
        ekstazi_core::storage::history::is_commit_id(id).then(|| id.to_owned())
    }

    /// The subject lines of these commits (those the repository has).
    pub fn subjects<'a>(
        &self,
        commits: impl IntoIterator<Item = &'a str>,
    ) -> std::collections::HashMap<String, String> {
        let commits: Vec<&str> = commits.into_iter().collect();
        let mut args = vec!["log", "--no-walk=unsorted", "--format=%H %s"];
        args.extend(&commits);
        // One call, not one per commit; a commit this clone lacks (filed on
        // another machine) fails the whole call, so then each is asked alone.
        let output = git(&self.dir, &args).unwrap_or_else(|| {
            commits
                .iter()
                .filter_map(|c| git(&self.dir, &["log", "-1", "--format=%H %s", c]))
                .collect()
        });
        output
            .lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(id, subject)| (id.to_owned(), subject.to_owned()))
            .collect()
    }
}

/// `HEAD`, its parents, and whether the tree is clean; `None` outside a
/// repository or on an unborn branch.
fn head_and_status(dir: &Path) -> Option<(String, Vec<String>, bool)> {
    // Asked at once: both are paid by every run, twice (before the build
    // and after the tests).
    let (line, clean) = std::thread::scope(|scope| {
        let clean = scope.spawn(|| is_clean(dir));
        // `HEAD`'s id, then its parents', on one line; nothing for an
        // unborn branch.
        let line = git(
            dir,
            &["rev-list", "--parents", "-n", "1", "HEAD^{commit}", "--"],
        );
        (line, clean.join().expect("`git status` thread"))
    });
    let line = line?;
    let mut ids = line.split_whitespace();
    let head = ids.next()?.to_owned();
    if !ekstazi_core::storage::history::is_commit_id(&head) {
        return None;
    }
    let parents = ids
        .filter(|id| ekstazi_core::storage::history::is_commit_id(id))
        .map(str::to_owned)
        .collect();
    Some((head, parents, clean?))
}

/// The trailer that asks for a full run from a commit message
/// (`Ekstazi: all`): the escape hatch a CI recipe needs nothing for.
pub const FULL_RUN_TRAILER: &str = "Ekstazi";

/// Whether `HEAD`'s message ends with the trailer `Ekstazi: all` (a
/// `Key: value` line at its end, as `git interpret-trailers` reads them);
/// never outside a repository.
pub fn asks_full_run(dir: &Path) -> bool {
    let format = format!("--format=%(trailers:key={FULL_RUN_TRAILER},valueonly,separator=%x00)");
    git(dir, &["log", "-1", &format, "HEAD"]).is_some_and(|out| {
        out.trim_end_matches('\n')
            .split('\0')
            .any(|value| value.trim().eq_ignore_ascii_case("all"))
    })
}

fn is_clean(dir: &Path) -> Option<bool> {
    git(dir, &["status", "--porcelain", "--untracked-files=no"]).map(|s| s.is_empty())
}

fn lines(out: Option<String>) -> Vec<String> {
    out.map(|out| out.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Runs git in `dir`; its standard output, if it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        // `status` would otherwise take the index lock to refresh it, and
        // fail a user's concurrent git command.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()
}
