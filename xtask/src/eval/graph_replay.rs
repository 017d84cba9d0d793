//! `cargo xtask eval replay --graph`: replays every commit of a window of a
//! project's history, merges and their branches alike, and measures at
//! merges (and at reverts, cherry-picks and rebased commits) what Gligoric et al.'s history
//! paper ("Regression Test Selection for Distributed Software Histories")
//! compares:
//!
//! - the **linearisation**: today's rule, the current records alone (the
//!   state the previously replayed commit left: `list --no-history`);
//! - **S¹**: traditional selection against the immediate dominator, i.e.
//!   the records filed under it alone (`list --vouch-only-from <idom>`);
//! - **Sᵏ**: the same against each parent, intersected;
//! - **S⁰**: no selection at the merge at all, only the selections stored
//!   at the commits before it: the tests selected on two branches since
//!   their lowest common dominator, plus the tests not available on every
//!   branch (the paper's formulas 10–13);
//! - the **tool**: `cargo ekstazi test` with its history.
//!
//! The window is the `--commits` newest commits reachable from `--from` in
//! topological order, replayed parents first; a commit whose parents are all
//! outside it only starts the state. One state directory, with its history,
//! and one target directory are carried across the whole window, and every
//! commit is checked out clean, so every run is filed under its commit.
//!
//! A revert or cherry-pick is known by its message (`git revert`, `git
//! cherry-pick -x`), or by its patch id (`git patch-id --stable`): the same
//! patch as an older commit the window's end reaches is a cherry-pick; as a
//! commit only another ref reaches (a pull request's branch in a mirror),
//! a *rebased* commit, which is how rebase-merges and one-commit squashes
//! appear in `git log`.
//!
//! Safety: `cargo test` runs everything at every commit. A test the tool
//! skipped is a miss when its outcome differs from its outcome at its
//! *witness*: the commit the record that vouched for it was filed under, or,
//! when its current record vouched, the witness of that record.
//!
//! The dominators are those of the window's graph with one virtual root
//! standing for everything before the window: a commit with a parent
//! outside the window hangs from it, so a dominator that lies before the
//! window is "outside", and what needs it is reported as not computable
//! rather than guessed.
//!
//! Output in `<out>`: `graph.csv`, `summary.md`, the reports of the tool
//! under `reports/`, each `list --json` under `lists/`, logs under `logs/`,
//! a file per miss under `misses/`.

use super::evidence::{self, EkstaziOpts, Report, TestId};
use super::replay::ReplayArgs;
use crate::common::process::output;
use crate::common::stats;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct GraphArgs {
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    pub project: evidence::Project,
    /// Commits in the window, start commits included.
    pub commits: usize,
    pub from: String,
    pub granularity: String,
}

impl GraphArgs {
    /// `eval replay --graph`: one granularity, since one state carries the
    /// history (refused before the tool is built), and the project
    /// resolved.
    pub fn from_replay(args: ReplayArgs) -> Result<Self> {
        let granularity = match &args.granularity[..] {
            [] => "function".to_owned(),
            [one] => one.clone(),
            _ => bail!("--graph measures one granularity: one state carries the history"),
        };
        Ok(GraphArgs {
            project: args.project.resolve(true)?,
            commits: args.commits,
            from: args.from,
            granularity,
        })
    }
}

type Tests = BTreeSet<TestId>;

/// The window's commit graph. Commits are numbered in replay order, so a
/// parent always has a smaller number than its child.
#[derive(Clone, Debug, Default)]
pub struct Dag {
    /// Per commit, its parents inside the window.
    pub parents: Vec<Vec<usize>>,
    /// Per commit: some parent lies outside the window (or it has none).
    pub outside: Vec<bool>,
}

impl Dag {
    /// It only starts the state: none of its parents is in the window.
    pub fn is_start(&self, n: usize) -> bool {
        self.parents[n].is_empty()
    }

    /// Per commit, its immediate dominator; `None` is the virtual root (the
    /// history before the window).
    ///
    /// The numbering is topological, so a dominator always has a smaller
    /// number than what it dominates, and one pass in order sees every
    /// parent's dominator before its children need it (Cooper, Harvey and
    /// Kennedy's algorithm, which needs no iteration on an acyclic graph).
    pub fn dominators(&self) -> Vec<Option<usize>> {
        let mut idom = vec![None; self.parents.len()];
        for n in 0..self.parents.len() {
            if self.outside[n] {
                continue;
            }
            let mut parents = self.parents[n].iter().copied();
            let first = parents.next();
            idom[n] = parents.fold(first, |d, p| common_dominator(&idom, d, Some(p)));
        }
        idom
    }

    /// The commits `n` with `d ⪯ n ⪯ p` and `n ≠ d` (the paper's
    /// `d ⪯* p \ {d}`), for a `d` that dominates `p`: walking back from `p`
    /// stops at `d`, and every way back passes it.
    pub fn between(&self, d: usize, p: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![p];
        while let Some(n) = stack.pop() {
            if n != d && seen.insert(n) {
                stack.extend(&self.parents[n]);
            }
        }
        seen
    }
}

/// The lowest common dominator of `a` and `b`: their nearest common
/// ancestor in the dominator tree, which is the immediate dominator a merge
/// of the two would have (the paper's `dom(a, b)`).
pub fn common_dominator(
    idom: &[Option<usize>],
    mut a: Option<usize>,
    mut b: Option<usize>,
) -> Option<usize> {
    loop {
        match (a, b) {
            (Some(x), Some(y)) if x == y => return a,
            // The one numbered later cannot dominate the other: move it up.
            (Some(x), Some(y)) if x > y => a = idom[x],
            (Some(_), Some(y)) => b = idom[y],
            _ => return None,
        }
    }
}

/// What S⁰ reads: the selections and the tests of the commits replayed so
/// far.
#[derive(Debug, Default)]
pub struct Stored {
    /// Short names, for saying what is missing.
    pub names: Vec<String>,
    /// Per commit, per parent in the window: the traditional selection
    /// between that parent and the commit (the parent's filed records
    /// checked against the commit).
    pub from_parent: Vec<BTreeMap<usize, Tests>>,
    /// Per commit, the tests available there (`#[ignore]`d ones left out).
    pub available: Vec<Option<Tests>>,
}

impl Stored {
    pub fn new(names: Vec<String>) -> Self {
        let n = names.len();
        Stored {
            names,
            from_parent: vec![BTreeMap::new(); n],
            available: vec![None; n],
        }
    }

    /// The paper's `S_sel(n)`: what changed on the edges into `n`
    /// affects. At a merge that is the union over its parents: the proof of
    /// S⁰ needs the changes of every edge of the graph, not the selection
    /// a merge ended up running.
    fn selection(&self, dag: &Dag, n: usize) -> Result<Tests, String> {
        if dag.outside[n] {
            return Err(format!("{} has a parent outside the window", self.names[n]));
        }
        let mut tests = Tests::new();
        for p in &dag.parents[n] {
            let from = self.from_parent[n]
                .get(p)
                .ok_or_else(|| format!("no selection stored at {}", self.names[n]))?;
            tests.extend(from.iter().cloned());
        }
        Ok(tests)
    }

    /// `∪ S_sel(n)` for `n ∈ d ⪯* p \ {d}`.
    fn selected_between(&self, dag: &Dag, d: usize, p: usize) -> Result<Tests, String> {
        let mut tests = Tests::new();
        for n in dag.between(d, p) {
            tests.extend(self.selection(dag, n)?);
        }
        Ok(tests)
    }

    fn available(&self, n: usize) -> Result<&Tests, String> {
        self.available[n]
            .as_ref()
            .ok_or_else(|| format!("no tests known at {}", self.names[n]))
    }
}

/// S⁰ at the merge `h` (the paper's formulas 10 and 11): the tests selected
/// on at least two of its branches since their lowest common dominator,
/// and the tests not available on every branch.
pub fn s0_merge(
    dag: &Dag,
    idom: &[Option<usize>],
    stored: &Stored,
    h: usize,
) -> Result<Tests, String> {
    // For two parents this is `dom(p, p')`; the paper takes `imd(h)` for
    // any number.
    let d = idom[h].ok_or("its dominator is outside the window")?;
    let parents = &dag.parents[h];
    let since: Vec<Tests> = parents
        .iter()
        .map(|&p| stored.selected_between(dag, d, p))
        .collect::<Result<_, _>>()?;
    let mut tests = Tests::new();
    for (i, a) in since.iter().enumerate() {
        for b in &since[i + 1..] {
            tests.extend(a.intersection(b).cloned());
        }
    }
    let here = stored.available(h)?;
    let mut everywhere: Option<Tests> = None;
    for &p in parents {
        let at = stored.available(p)?;
        everywhere = Some(match everywhere {
            None => at.clone(),
            Some(e) => e.intersection(at).cloned().collect(),
        });
    }
    let everywhere = everywhere.unwrap_or_default();
    tests.retain(|t| here.contains(t));
    tests.extend(here.difference(&everywhere).cloned());
    Ok(tests)
}

/// S⁰ at `h`, a cherry-pick of `picked` (formula 12) or a revert of it
/// (formula 13), with `p` the parent of `h`, `q` the parent of `picked`
/// and `d = dom(p, q)`: the tests `picked` selected that were also selected
/// on either side since `d`, the tests `picked` added (a cherry-pick) or
/// removed (a revert), and the tests new between `d` and `p`.
pub fn s0_pick(
    dag: &Dag,
    idom: &[Option<usize>],
    stored: &Stored,
    h: usize,
    picked: usize,
    revert: bool,
) -> Result<Tests, String> {
    let [p] = dag.parents[h][..] else {
        return Err("it has more than one parent".into());
    };
    let q = match dag.parents[picked][..] {
        [q] if !dag.outside[picked] => q,
        _ => {
            return Err(format!(
                "{} is a merge, or its parent is outside the window",
                stored.names[picked]
            ));
        }
    };
    let d = common_dominator(idom, Some(p), Some(q)).ok_or_else(|| {
        format!(
            "dom(parent, {}'s parent) is outside the window",
            stored.names[picked]
        )
    })?;
    let selected_at_picked = stored.from_parent[picked]
        .get(&q)
        .ok_or_else(|| format!("no selection stored at {}", stored.names[picked]))?;
    let mut around = stored.selected_between(dag, d, p)?;
    around.extend(stored.selected_between(dag, d, q)?);
    let mut tests: Tests = selected_at_picked.intersection(&around).cloned().collect();
    let (with, without) = if revert { (q, picked) } else { (picked, q) };
    tests.extend(
        stored
            .available(with)?
            .difference(stored.available(without)?)
            .cloned(),
    );
    tests.extend(
        stored
            .available(p)?
            .difference(stored.available(d)?)
            .cloned(),
    );
    let here = stored.available(h)?;
    tests.retain(|t| here.contains(t));
    Ok(tests)
}

/// Per test, the commit whose `cargo test` outcome vouches for its record:
/// where the record the tool holds for it was last checked by a run.
#[derive(Debug, Default)]
pub struct Witnesses(HashMap<TestId, usize>);

impl Witnesses {
    /// The witness of a test skipped at this commit: the commit whose filed
    /// record vouched, else that of its current record.
    pub fn of(&self, id: &TestId, vouched_by: Option<usize>) -> Option<usize> {
        vouched_by.or_else(|| self.0.get(id).copied())
    }

    /// After the tool's run at `here`: a test that ran is witnessed here; a
    /// skipped one that another commit's record vouched for takes that
    /// record as its current one (the tool adopts it), and its witness.
    pub fn update(&mut self, here: usize, id: &TestId, ran: bool, vouched_by: Option<usize>) {
        if ran {
            self.0.insert(id.clone(), here);
        } else if let Some(v) = vouched_by {
            self.0.insert(id.clone(), v);
        }
    }
}

/// A test the tool skipped whose `cargo test` outcome differs from its
/// outcome at its witness.
#[derive(Debug, PartialEq)]
pub struct Miss {
    pub id: TestId,
    pub witness: Option<usize>,
    pub before: Option<String>,
    pub now: String,
}

/// The tool's verdict on one test at one commit.
pub struct Verdict {
    pub id: TestId,
    pub selected: bool,
    pub ran: bool,
    /// The commit (its number in the window) whose filed record vouched.
    pub vouched_by: Option<usize>,
}

/// What the safety check saw at one commit.
#[derive(Debug, Default)]
pub struct Checked {
    pub misses: Vec<Miss>,
    /// Skipped tests compared with their witness (a check that compared
    /// nothing would pass whatever happened).
    pub compared: usize,
    /// Skipped tests `cargo test` gave no outcome for here.
    pub unknown: usize,
}

/// The safety check at `here`, judged before the witnesses take this run
/// in.
pub fn check(
    witnesses: &Witnesses,
    outcomes: &[Option<HashMap<TestId, String>>],
    here: usize,
    verdicts: &[Verdict],
) -> Checked {
    let mut checked = Checked::default();
    let Some(now) = &outcomes[here] else {
        return checked;
    };
    for verdict in verdicts.iter().filter(|v| !v.selected) {
        let Some(outcome) = now.get(&verdict.id) else {
            checked.unknown += 1;
            continue;
        };
        if outcome == "ignored" {
            continue;
        }
        checked.compared += 1;
        let witness = witnesses.of(&verdict.id, verdict.vouched_by);
        let before = witness
            .and_then(|w| outcomes[w].as_ref())
            .and_then(|o| o.get(&verdict.id));
        if before != Some(outcome) {
            checked.misses.push(Miss {
                id: verdict.id.clone(),
                witness,
                before: before.cloned(),
                now: outcome.clone(),
            });
        }
    }
    checked
}

/// How a commit was made, as far as its parents and message tell.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// None of its parents is in the window.
    Start,
    Commit,
    Merge,
    /// Of the commit (its number in the window, when it is in it).
    Revert(Option<usize>),
    /// Of the commit its message names, or of an older commit with the same
    /// patch id (its number in the window, when it is in it).
    CherryPick(Option<usize>),
    /// The same patch id as a commit that the window's end does not reach
    /// (a pull request's branch, as a rebase-merge or a one-commit squash
    /// leaves it): the change made again on another base.
    Rebased,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Start => "start",
            Kind::Commit => "commit",
            Kind::Merge => "merge",
            Kind::Revert(_) => "revert",
            Kind::CherryPick(_) => "cherry-pick",
            Kind::Rebased => "rebased",
        }
    }

    /// The commits the options are measured at.
    fn compared(self) -> bool {
        !matches!(self, Kind::Start | Kind::Commit)
    }
}

/// Per commit of `commits`, the other commits of the clone (every ref) that
/// have its patch id (`git patch-id --stable`: the diff without
/// whitespace, line numbers and order of files): copies of the same change.
/// Merges have none.
fn copies_by_patch_id(repo: &Path, commits: &[String]) -> Result<Vec<Vec<String>>> {
    let mut log = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["log", "--all", "--no-merges", "-p", "--format=commit %H"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run git log")?;
    let ids = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["patch-id", "--stable"])
        .stdin(log.stdout.take().context("git log's output")?)
        .output()
        .context("cannot run git patch-id")?;
    log.wait()?;
    let mut by_patch: HashMap<&str, Vec<&str>> = HashMap::new();
    let text = String::from_utf8_lossy(&ids.stdout);
    for line in text.lines() {
        if let Some((patch, commit)) = line.split_once(' ') {
            by_patch.entry(patch).or_default().push(commit);
        }
    }
    let mut patch_of: HashMap<&str, &str> = HashMap::new();
    for (patch, with) in &by_patch {
        for commit in with {
            patch_of.insert(commit, patch);
        }
    }
    Ok(commits
        .iter()
        .map(|c| {
            patch_of
                .get(c.as_str())
                .map(|p| {
                    by_patch[p]
                        .iter()
                        .filter(|o| **o != c.as_str())
                        .map(|o| (*o).to_owned())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect())
}

/// The commit a message says it reverts or cherry-picks, if it says so.
fn named_commit<'m>(message: &'m str, before: &str) -> Option<&'m str> {
    let at = message.find(before)? + before.len();
    let hex = message[at..].trim_start();
    let end = hex
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(hex.len());
    (end >= 7).then(|| &hex[..end])
}

/// The window: commits in replay order with their full and short ids.
struct Window {
    commits: Vec<String>,
    /// Per commit, the other commits of the clone with its patch id.
    copies: Vec<Vec<String>>,
    /// The commits the window's end reaches.
    reached: std::collections::HashSet<String>,
    short: Vec<String>,
    subjects: Vec<String>,
    all_parents: Vec<Vec<String>>,
    index: HashMap<String, usize>,
    dag: Dag,
}

impl Window {
    /// `source` is the project's repository, whose every ref (pull
    /// requests' too, in a mirror) is searched for copies.
    fn read(scratch: &Path, source: &Path, from: &str, n: usize) -> Result<Window> {
        let listing = output(
            Command::new("git")
                .arg("-C")
                .arg(scratch)
                .args(["log", "--topo-order", "--format=%H%x09%h%x09%P%x09%s", "-n"])
                .arg(n.to_string())
                .arg(from),
        )?;
        let mut lines: Vec<&str> = listing.lines().collect();
        lines.reverse();
        let mut window = Window {
            copies: Vec::new(),
            reached: output(
                Command::new("git")
                    .arg("-C")
                    .arg(scratch)
                    .args(["rev-list", from]),
            )?
            .lines()
            .map(str::to_owned)
            .collect(),
            commits: Vec::new(),
            short: Vec::new(),
            subjects: Vec::new(),
            all_parents: Vec::new(),
            index: HashMap::new(),
            dag: Dag::default(),
        };
        for line in lines {
            let mut fields = line.splitn(4, '\t');
            let (Some(commit), Some(short), Some(parents)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            window.index.insert(commit.to_owned(), window.commits.len());
            window.commits.push(commit.to_owned());
            window.short.push(short.to_owned());
            window.subjects.push(fields.next().unwrap_or("").to_owned());
            window
                .all_parents
                .push(parents.split_whitespace().map(str::to_owned).collect());
        }
        for parents in &window.all_parents {
            let inside: Vec<usize> = parents
                .iter()
                .filter_map(|p| window.index.get(p).copied())
                .collect();
            window
                .dag
                .outside
                .push(parents.is_empty() || inside.len() < parents.len());
            window.dag.parents.push(inside);
        }
        window.copies = copies_by_patch_id(source, &window.commits)?;
        Ok(window)
    }

    fn kind(&self, scratch: &Path, n: usize) -> Result<Kind> {
        if self.dag.is_start(n) {
            return Ok(Kind::Start);
        }
        if self.all_parents[n].len() > 1 {
            return Ok(Kind::Merge);
        }
        let message = output(Command::new("git").arg("-C").arg(scratch).args([
            "log",
            "-1",
            "--format=%B",
            &self.commits[n],
        ]))?;
        let resolve = |named: &str| -> Option<usize> {
            let full = output(Command::new("git").arg("-C").arg(scratch).args([
                "rev-parse",
                "--verify",
                "-q",
                &format!("{named}^{{commit}}"),
            ]))
            .ok()?;
            self.index.get(full.trim()).copied()
        };
        if let Some(named) = named_commit(&message, "This reverts commit") {
            return Ok(Kind::Revert(resolve(named)));
        }
        if let Some(named) = named_commit(&message, "cherry picked from commit") {
            return Ok(Kind::CherryPick(resolve(named)));
        }
        // A copy made without `-x`: the same patch as an older commit of the
        // window (or of the history before it) is a cherry-pick; as one the
        // end does not reach, a rebase of it.
        let copies = &self.copies[n];
        if let Some(&earlier) = copies
            .iter()
            .filter_map(|c| self.index.get(c))
            .filter(|&&c| c < n)
            .max()
        {
            return Ok(Kind::CherryPick(Some(earlier)));
        }
        let before_window = |c: &String| self.reached.contains(c) && !self.index.contains_key(c);
        if copies.iter().any(before_window) {
            return Ok(Kind::CherryPick(None));
        }
        if copies.iter().any(|c| !self.reached.contains(c)) {
            return Ok(Kind::Rebased);
        }
        Ok(Kind::Commit)
    }

    /// A two-parent merge git makes on its own gives the tree the merge
    /// has: S⁰ is only safe at such auto-merges. `None` when it cannot tell
    /// (an octopus, or a parent outside the clone).
    fn auto_merge(&self, scratch: &Path, n: usize) -> Option<bool> {
        let [a, b] = &self.all_parents[n][..] else {
            return None;
        };
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(scratch)
                .args(args)
                .stderr(Stdio::null())
                .output()
                .ok()
        };
        let merged = git(&["merge-tree", "--write-tree", "--no-messages", a, b])?;
        if merged.status.code() == Some(1) {
            return Some(false);
        }
        if !merged.status.success() {
            return None;
        }
        let tree = git(&["rev-parse", &format!("{}^{{tree}}", self.commits[n])])?;
        let first = |o: &[u8]| String::from_utf8_lossy(o).lines().next().map(str::to_owned);
        Some(first(&merged.stdout).is_some() && first(&merged.stdout) == first(&tree.stdout))
    }
}

/// One measured commit.
#[derive(Debug, Default)]
struct Row {
    commit: String,
    subject: String,
    parents: Vec<String>,
    kind: &'static str,
    auto: Option<bool>,
    tests: Option<usize>,
    tool: Option<usize>,
    /// Tests the tool selected that Sᵏ did not (at an ordinary commit,
    /// that its parent's records alone did not).
    tool_beyond_sk: Option<usize>,
    linearisation: Option<usize>,
    s1: Option<usize>,
    sk: Option<usize>,
    s0: Option<usize>,
    /// `S_sel`: the selection stored for S⁰ (the union over parents).
    stored: Option<usize>,
    misses: usize,
    /// Skipped tests the safety check compared with their witness, and
    /// those `cargo test` gave no outcome for.
    compared: usize,
    unknown: usize,
    notes: Vec<String>,
}

const CSV_HEADER: &str = "commit,parents,kind,auto_merge,tests,tool,linearisation,s1,sk,s0,stored_selection,tool_beyond_sk,misses,skipped_compared,skipped_unknown,subject,notes";

/// What `cargo ekstazi list --json` printed (`docs/reference/json.md`).
#[derive(Deserialize)]
struct ListJson {
    tests: Vec<ListTest>,
}

#[derive(Deserialize)]
struct ListTest {
    binary: String,
    name: String,
    selected: bool,
}

/// A listing's tests and its selection.
struct Listing {
    tests: Tests,
    selected: Tests,
}

/// What every `cargo ekstazi` command of the replay shares.
struct Tool<'a> {
    args: &'a GraphArgs,
    ekstazi: &'a Path,
    scratch: &'a Path,
    state: PathBuf,
    target: PathBuf,
    /// `EKSTAZI_HISTORY_COMMITS`: the whole window, so that the records
    /// the references need are never pruned (the tool has the same
    /// history).
    env: Vec<(&'static str, String)>,
}

impl Tool<'_> {
    /// The environment of `cargo ekstazi test` ([`evidence::ekstazi_test`]):
    /// records name variables such as `TMPDIR`, so a listing in another
    /// environment would select tests for that alone.
    fn command(&self) -> Command {
        let mut command = Command::new(self.ekstazi);
        command
            .current_dir(self.scratch)
            .env("TMPDIR", evidence::private_tmp(self.scratch))
            .env("CARGO_TARGET_DIR", &self.target)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// `cargo ekstazi list --json` with `variant` (`--no-history`, or
    /// `--vouch-only-from <commit>`), kept under `lists/<label>.json`.
    fn list(&self, label: &str, variant: &[&str]) -> Result<Listing> {
        let log = self
            .args
            .project
            .out
            .join("logs")
            .join(format!("{label}.log"));
        let out = self
            .command()
            .args(["ekstazi", "list", "--json", "--no-doc", "--granularity"])
            .arg(&self.args.granularity)
            .arg("--state-dir")
            .arg(&self.state)
            .args(variant)
            .args(&self.args.project.cargo_args)
            .stderr(evidence::log_file(&log)?)
            .output()
            .context("cannot run cargo ekstazi list")?;
        let lists = self.args.project.out.join("lists");
        std::fs::create_dir_all(&lists)?;
        std::fs::write(lists.join(format!("{label}.json")), &out.stdout)?;
        if !out.status.success() {
            anyhow::bail!(
                "cargo ekstazi list {variant:?} failed (see {})",
                log.display()
            );
        }
        let json: ListJson = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("cannot read the output of list {variant:?}"))?;
        let id = |t: &ListTest| (t.binary.clone(), t.name.clone());
        Ok(Listing {
            tests: json.tests.iter().map(id).collect(),
            selected: json.tests.iter().filter(|t| t.selected).map(id).collect(),
        })
    }

    /// The commits that have filed records.
    fn filed(&self) -> BTreeSet<String> {
        #[derive(Deserialize)]
        struct History {
            commits: Vec<Filed>,
        }
        #[derive(Deserialize)]
        struct Filed {
            commit: String,
        }
        let out = self
            .command()
            .args(["ekstazi", "history", "list", "--json", "--state-dir"])
            .arg(&self.state)
            .stderr(Stdio::null())
            .output();
        out.ok()
            .filter(|o| o.status.success())
            .and_then(|o| serde_json::from_slice::<History>(&o.stdout).ok())
            .map(|h| h.commits.into_iter().map(|c| c.commit).collect())
            .unwrap_or_default()
    }
}

pub fn replay(args: &GraphArgs) -> Result<()> {
    let (ekstazi, scratch) = args.project.scratch_setup()?;
    let window = Window::read(&scratch, &args.project.repo, &args.from, args.commits)?;
    let n = window.commits.len();
    let mut replay = GraphReplay::new(args, &window, &ekstazi, &scratch)?;
    for h in 0..n {
        if replay.commit(h)? {
            // A long replay can be read while it runs.
            replay.save(h + 1)?;
        }
    }
    replay.save(n)?;
    print!(
        "{}",
        std::fs::read_to_string(args.project.out.join("summary.md"))?
    );
    Ok(())
}

/// One graph replay as it goes: the window and the tool, and what the
/// commits replayed so far leave to the next ones (S⁰'s selections, the
/// outcomes and witnesses the safety check compares with, the rows).
struct GraphReplay<'a> {
    args: &'a GraphArgs,
    window: &'a Window,
    idom: Vec<Option<usize>>,
    /// Commits that only start the state.
    starts: usize,
    tool: Tool<'a>,
    logs: PathBuf,
    reports: PathBuf,
    stored: Stored,
    /// Per commit, `cargo test`'s outcomes (`None`: not built, or not yet
    /// replayed).
    outcomes: Vec<Option<HashMap<TestId, String>>>,
    witnesses: Witnesses,
    rows: Vec<Row>,
    not_built: Vec<String>,
    ekstazi_failed: Vec<String>,
}

impl<'a> GraphReplay<'a> {
    fn new(
        args: &'a GraphArgs,
        window: &'a Window,
        ekstazi: &'a Path,
        scratch: &'a Path,
    ) -> Result<Self> {
        let dag = &window.dag;
        let n = window.commits.len();
        let starts = (0..n).filter(|&c| dag.is_start(c)).count();
        eprintln!(
            "replaying {n} commits of {} in topological order ({starts} of them only start the state)",
            args.project.repo.display()
        );
        let tool = Tool {
            args,
            ekstazi,
            scratch,
            state: args.project.out.join("state"),
            target: args.project.out.join("target"),
            env: vec![("EKSTAZI_HISTORY_COMMITS", (n + 1).to_string())],
        };
        let reports = args.project.out.join("reports");
        std::fs::create_dir_all(&reports)?;
        Ok(GraphReplay {
            args,
            window,
            idom: dag.dominators(),
            starts,
            tool,
            logs: args.project.out.join("logs"),
            reports,
            stored: Stored::new(window.short.clone()),
            outcomes: vec![None; n],
            witnesses: Witnesses::default(),
            rows: Vec::new(),
            not_built: Vec::new(),
            ekstazi_failed: Vec::new(),
        })
    }

    /// Replays commit `h`: `cargo test`, the references (before the tool's
    /// run changes the state), the tool, and the safety check. False when
    /// the commit did not build or the tool wrote no report: nothing new
    /// to write then.
    fn commit(&mut self, h: usize) -> Result<bool> {
        evidence::checkout_clean(self.tool.scratch, &self.window.commits[h])?;
        let kind = self.window.kind(self.tool.scratch, h)?;
        let mut row = self.row(h, kind);
        eprintln!(
            "[{}/{}] {} ({}) {}",
            h + 1,
            self.window.commits.len(),
            row.commit,
            row.kind,
            row.subject
        );
        if !self.retest(h)? {
            return Ok(false);
        }
        let sk = if kind == Kind::Start {
            None
        } else {
            self.references(h, kind, &mut row)
        };
        let Some(report) = self.run_tool(h)? else {
            return Ok(false);
        };
        self.check_safety(h, &report, sk.as_ref(), &mut row)?;
        print_progress(&row);
        if kind != Kind::Start {
            self.rows.push(row);
        }
        Ok(true)
    }

    /// The row of commit `h`, with what its place in the graph says.
    fn row(&self, h: usize, kind: Kind) -> Row {
        let window = self.window;
        Row {
            commit: window.short[h].clone(),
            subject: window.subjects[h].clone(),
            parents: window.all_parents[h]
                .iter()
                .map(|p| {
                    window
                        .index
                        .get(p)
                        .map_or_else(|| p[..7].to_owned(), |&c| window.short[c].clone())
                })
                .collect(),
            kind: kind.name(),
            auto: (kind == Kind::Merge)
                .then(|| window.auto_merge(self.tool.scratch, h))
                .flatten(),
            ..Row::default()
        }
    }

    /// `cargo test` at `h`, its outcomes kept; false when it did not build.
    fn retest(&mut self, h: usize) -> Result<bool> {
        let short = &self.window.short[h];
        let project = &self.args.project;
        let retest = evidence::retest_all_in(
            self.tool.scratch,
            Some(&project.out.join("target-cargo-test")),
            &project.cargo_args,
            project.timeout,
            &self.logs.join(format!("{h:03}-{short}-cargo-test.log")),
        )?;
        if !retest.built {
            eprintln!("  does not build: skipped");
            self.not_built.push(short.to_owned());
            return Ok(false);
        }
        self.outcomes[h] = Some(retest.outcomes);
        Ok(true)
    }

    /// What the references select at `h`: each parent's records alone
    /// (kept for S⁰), and at the commits compared, the paper's options.
    /// Returns Sᵏ, when every parent is in the window.
    fn references(&mut self, h: usize, kind: Kind, row: &mut Row) -> Option<Tests> {
        let dag = &self.window.dag;
        let filed = self.tool.filed();
        let per_parent = self.per_parent(h, &filed, row);
        let mut sk = None;
        if !dag.outside[h] {
            row.stored = self.stored.selection(dag, h).ok().map(|s| s.len());
            // Sᵏ; at an ordinary commit, the traditional selection
            // against its parent. The tool lets every parent's records
            // vouch, so it must never select beyond it.
            sk = per_parent
                .iter()
                .cloned()
                .collect::<Option<Vec<Tests>>>()
                .and_then(|sets| {
                    sets.into_iter()
                        .reduce(|a, b| a.intersection(&b).cloned().collect())
                });
        }
        if kind.compared() {
            row.linearisation = self.linearisation(h, row);
            row.s1 = self.s1(h, &filed, &per_parent, row);
            if dag.outside[h] {
                row.notes.push("Sᵏ: a parent is outside the window".into());
            }
            row.sk = sk.as_ref().map(BTreeSet::len);
            row.s0 = self.s0(h, kind, row);
        }
        sk
    }

    /// Per parent in the window, what its filed records alone select at
    /// `h` (`None`: the listing failed); what they list and select is kept
    /// for S⁰.
    fn per_parent(
        &mut self,
        h: usize,
        filed: &BTreeSet<String>,
        row: &mut Row,
    ) -> Vec<Option<Tests>> {
        let window = self.window;
        let mut per_parent = Vec::new();
        for &p in &window.dag.parents[h] {
            let label = format!("parent-{}", window.short[p]);
            let listing = self.only_from(h, filed, label, p, row);
            per_parent.push(listing.as_ref().map(|l| l.selected.clone()));
            if let Some(listing) = listing {
                self.stored.available[h].get_or_insert(listing.tests);
                self.stored.from_parent[h].insert(p, listing.selected);
            }
        }
        per_parent
    }

    /// `list --vouch-only-from <commit>` at `h`; a failure, and a commit
    /// with no filed records, are noted in the row.
    fn only_from(
        &self,
        h: usize,
        filed: &BTreeSet<String>,
        label: String,
        commit: usize,
        row: &mut Row,
    ) -> Option<Listing> {
        let window = self.window;
        if !filed.contains(&window.commits[commit]) {
            row.notes
                .push(format!("{} has no filed records", window.short[commit]));
        }
        self.tool
            .list(
                &format!("{h:03}-{}-{label}", window.short[h]),
                &["--vouch-only-from", &window.commits[commit]],
            )
            .map_err(|e| row.notes.push(format!("{e:#}")))
            .ok()
    }

    /// The linearisation: the history left out, as if the commits were
    /// one line.
    fn linearisation(&self, h: usize, row: &mut Row) -> Option<usize> {
        let label = format!("{h:03}-{}-linearisation", self.window.short[h]);
        match self.tool.list(&label, &["--no-history"]) {
            Ok(listing) => Some(listing.selected.len()),
            Err(e) => {
                row.notes.push(format!("{e:#}"));
                None
            }
        }
    }

    /// S¹: what the immediate dominator's records alone select (a
    /// parent's listing, when the dominator is a parent).
    fn s1(
        &self,
        h: usize,
        filed: &BTreeSet<String>,
        per_parent: &[Option<Tests>],
        row: &mut Row,
    ) -> Option<usize> {
        let Some(d) = self.idom[h] else {
            row.notes
                .push("S¹: the dominator is outside the window".into());
            return None;
        };
        match self.window.dag.parents[h].iter().position(|&p| p == d) {
            Some(i) => per_parent[i].as_ref().map(BTreeSet::len),
            None => {
                let label = format!("idom-{}", self.window.short[d]);
                self.only_from(h, filed, label, d, row)
                    .map(|l| l.selected.len())
            }
        }
    }

    /// S⁰ from the selections stored so far, or why it cannot be computed.
    fn s0(&self, h: usize, kind: Kind, row: &mut Row) -> Option<usize> {
        let (dag, idom, stored) = (&self.window.dag, &self.idom, &self.stored);
        let s0 = match kind {
            Kind::Merge => s0_merge(dag, idom, stored, h),
            Kind::Revert(Some(x)) => s0_pick(dag, idom, stored, h, x, true),
            Kind::CherryPick(Some(x)) => s0_pick(dag, idom, stored, h, x, false),
            Kind::Rebased => Err("its original is on a branch the window does not hold".into()),
            _ => Err("the commit it names is outside the window".into()),
        };
        match s0 {
            Ok(tests) => Some(tests.len()),
            Err(why) => {
                row.notes.push(format!("S⁰: {why}"));
                None
            }
        }
    }

    /// `cargo ekstazi test` at `h`, recording; `None` when it wrote no
    /// report.
    fn run_tool(&mut self, h: usize) -> Result<Option<Report>> {
        let short = &self.window.short[h];
        let project = &self.args.project;
        let run = evidence::ekstazi_test_with_env(
            &EkstaziOpts {
                ekstazi: self.tool.ekstazi,
                dir: self.tool.scratch,
                state: &self.tool.state,
                granularity: &self.args.granularity,
                cargo_args: &project.cargo_args,
                target_dir: Some(&self.tool.target),
                log: &self.logs.join(format!("{h:03}-{short}-ekstazi.log")),
                report: &self.reports.join(format!("{h:03}-{short}.json")),
                timeout: project.timeout,
                mode: evidence::RunMode::Record,
            },
            &self.tool.env,
        )?;
        if run.report.is_none() {
            eprintln!("  cargo ekstazi test failed and wrote no report (see logs)");
            self.ekstazi_failed.push(short.to_owned());
        }
        Ok(run.report)
    }

    /// The safety check at `h` (each miss reported), then the witnesses
    /// and S⁰'s tests take the run in; the row gets the tool's figures.
    fn check_safety(
        &mut self,
        h: usize,
        report: &Report,
        sk: Option<&Tests>,
        row: &mut Row,
    ) -> Result<()> {
        self.stored.available[h] = Some(
            report
                .in_scope()
                .map(|t| (t.binary.clone(), t.name.clone()))
                .collect(),
        );
        let verdicts = self.verdicts(report);
        let checked = check(&self.witnesses, &self.outcomes, h, &verdicts);
        for miss in &checked.misses {
            self.report_miss(h, miss)?;
        }
        for v in &verdicts {
            self.witnesses.update(h, &v.id, v.ran, v.vouched_by);
        }
        let selected: Tests = verdicts
            .iter()
            .filter(|v| v.selected)
            .map(|v| v.id.clone())
            .collect();
        row.tests = Some(verdicts.len());
        row.tool = Some(selected.len());
        row.misses = checked.misses.len();
        row.compared = checked.compared;
        row.unknown = checked.unknown;
        if let Some(sk) = sk {
            row.tool_beyond_sk = Some(selected.difference(sk).count());
        }
        Ok(())
    }

    /// The tool's verdicts, with the commit whose record vouched.
    fn verdicts(&self, report: &Report) -> Vec<Verdict> {
        report
            .in_scope()
            .map(|t| Verdict {
                id: (t.binary.clone(), t.name.clone()),
                selected: t.selected,
                ran: t.outcome.is_some(),
                vouched_by: t
                    .vouched_by
                    .as_ref()
                    .and_then(|v| self.window.index.get(&v.commit).copied()),
            })
            .collect()
    }

    fn report_miss(&self, h: usize, miss: &Miss) -> Result<()> {
        let window = self.window;
        let detail = format!(
            "commit {} ({}): skipped, but went {} (at {}) -> {} under cargo test",
            window.commits[h],
            window.subjects[h],
            miss.before.as_deref().unwrap_or("(no outcome)"),
            miss.witness
                .map_or("no witness".to_owned(), |w| window.short[w].clone()),
            miss.now
        );
        evidence::report_miss(
            &self.args.project.out.join("misses"),
            &window.short[h],
            &self.tool.state,
            &miss.id,
            &detail,
        )?;
        Ok(())
    }

    /// `graph.csv` and `summary.md`, with `done` commits replayed.
    fn save(&self, done: usize) -> Result<()> {
        write_results(
            self.args,
            &self.rows,
            &self.not_built,
            &self.ekstazi_failed,
            done,
            self.window.commits.len(),
            self.starts,
        )
    }
}

/// The line each replayed commit ends with.
fn print_progress(row: &Row) {
    eprintln!(
        "  tool {}/{} | linearisation {} | S¹ {} | Sᵏ {} | S⁰ {}{}",
        row.tool.unwrap_or(0),
        row.tests.unwrap_or(0),
        cell(row.linearisation),
        cell(row.s1),
        cell(row.sk),
        cell(row.s0),
        if row.misses == 0 {
            String::new()
        } else {
            format!(" | {} MISSES", row.misses)
        }
    );
}

fn cell(value: Option<usize>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| v.to_string())
}

fn write_results(
    args: &GraphArgs,
    rows: &[Row],
    not_built: &[String],
    ekstazi_failed: &[String],
    done: usize,
    total: usize,
    starts: usize,
) -> Result<()> {
    let mut csv = format!("{CSV_HEADER}\n");
    for r in rows {
        let opt = |v: Option<usize>| v.map_or(String::new(), |v| v.to_string());
        writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.commit,
            r.parents.join(" "),
            r.kind,
            r.auto.map_or("", |a| if a { "yes" } else { "no" }),
            opt(r.tests),
            opt(r.tool),
            opt(r.linearisation),
            opt(r.s1),
            opt(r.sk),
            opt(r.s0),
            opt(r.stored),
            opt(r.tool_beyond_sk),
            r.misses,
            r.compared,
            r.unknown,
            quote(&r.subject),
            quote(&r.notes.join("; "))
        )?;
    }
    std::fs::write(args.project.out.join("graph.csv"), csv)?;

    let mut s = String::new();
    writeln!(
        s,
        "## {}: graph replay, {done} of {total} commits ending at `{}` (topological order; {starts} only start the state)\n",
        super::replay::project_name(&args.project.repo),
        args.from
    )?;
    writeln!(
        s,
        "Granularity {}; cargo options: `{}`. Commits that did not build (skipped): {}{}. cargo-ekstazi runs that failed: {}{}. Misses: **{}** (skipped tests compared with their witness: {}; skipped tests `cargo test` gave no outcome for: {}). Tests the tool selected beyond Sᵏ (at an ordinary commit, beyond its parent's records alone), all commits: {}.\n",
        args.granularity,
        args.project.cargo_args.join(" "),
        not_built.len(),
        in_parens(not_built),
        ekstazi_failed.len(),
        in_parens(ekstazi_failed),
        rows.iter().map(|r| r.misses).sum::<usize>(),
        rows.iter().map(|r| r.compared).sum::<usize>(),
        rows.iter().map(|r| r.unknown).sum::<usize>(),
        rows.iter().filter_map(|r| r.tool_beyond_sk).sum::<usize>()
    )?;
    for kind in ["merge", "revert", "cherry-pick", "rebased"] {
        let at: Vec<&Row> = rows.iter().filter(|r| r.kind == kind).collect();
        if !at.is_empty() {
            s.push_str(&comparison(kind, &at));
        }
    }
    s.push_str("### Per commit\n\n");
    s.push_str("| commit | parents | kind | tests | tool | linearisation | S¹ | Sᵏ | S⁰ | stored | misses | notes |\n");
    s.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in rows {
        let kind = match r.auto {
            Some(false) => format!("{} (not auto)", r.kind),
            _ => r.kind.to_owned(),
        };
        writeln!(
            s,
            "| `{}` | {} | {kind} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.commit,
            r.parents.join(" "),
            cell(r.tests),
            cell(r.tool),
            cell(r.linearisation),
            cell(r.s1),
            cell(r.sk),
            cell(r.s0),
            cell(r.stored),
            r.misses,
            r.notes.join("; ").replace('|', "\\|")
        )?;
    }
    std::fs::write(args.project.out.join("summary.md"), s)?;
    Ok(())
}

/// One figure of a row, for the summary.
type Column = fn(&Row) -> Option<usize>;

/// The history paper's comparison (Gligoric et al., CAV 2014) over the commits of one kind.
fn comparison(kind: &str, rows: &[&Row]) -> String {
    let mut s = String::new();
    let column =
        |f: Column| -> Vec<f64> { rows.iter().filter_map(|r| f(r)).map(|v| v as f64).collect() };
    let options: [(&str, Column); 6] = [
        ("tests", |r| r.tests),
        ("linearisation", |r| r.linearisation),
        ("S¹", |r| r.s1),
        ("Sᵏ", |r| r.sk),
        ("S⁰", |r| r.s0),
        ("tool", |r| r.tool),
    ];
    let _ = writeln!(s, "### At {kind} commits ({})\n", rows.len());
    s.push_str("| | ");
    for (name, _) in &options {
        let _ = write!(s, "{name} | ");
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(options.len()));
    s.push_str("\n| mean | ");
    for (_, f) in &options {
        let values = column(*f);
        if values.is_empty() {
            s.push_str("— | ");
        } else {
            let _ = write!(s, "{:.1} (n={}) | ", stats::mean(&values), values.len());
        }
    }
    s.push_str("\n\n");
    // Over the commits where both are known, so that one missing value
    // does not tilt the ratio.
    let reduction = |f: Column| -> String {
        let pairs: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r.linearisation? as f64, f(r)? as f64)))
            .collect();
        let (lin, x): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        let (lin, x) = (stats::mean(&lin), stats::mean(&x));
        if pairs.is_empty() {
            "—".to_owned()
        } else if x == 0.0 {
            format!("∞ (mean {lin:.1} → 0, n={})", pairs.len())
        } else {
            format!("{:.2}× (n={})", lin / x, pairs.len())
        }
    };
    let _ = writeln!(
        s,
        "- reduction against the linearisation (ratio of the means): tool {}, Sᵏ {}, S¹ {}, S⁰ {}",
        reduction(|r| r.tool),
        reduction(|r| r.sk),
        reduction(|r| r.s1),
        reduction(|r| r.s0)
    );
    let over: Vec<&str> = rows
        .iter()
        .filter(|r| matches!((r.tool, r.sk), (Some(t), Some(k)) if t > k))
        .map(|r| r.commit.as_str())
        .collect();
    let beyond: usize = rows.iter().filter_map(|r| r.tool_beyond_sk).sum();
    let _ = writeln!(
        s,
        "- {kind} commits where the tool selected more than Sᵏ: **{}**{} (must be 0); tests the tool selected outside Sᵏ: {beyond}",
        over.len(),
        in_parens(&over.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>())
    );
    if kind == "merge" {
        let not_auto: Vec<String> = rows
            .iter()
            .filter(|r| r.auto == Some(false))
            .map(|r| r.commit.clone())
            .collect();
        let _ = writeln!(
            s,
            "- not auto-merges (S⁰ is only safe at auto-merges): {}{}",
            not_auto.len(),
            in_parens(&not_auto)
        );
    }
    let _ = writeln!(
        s,
        "- misses at these commits: {}\n",
        rows.iter().map(|r| r.misses).sum::<usize>()
    );
    s
}

fn in_parens(items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!(" ({})", items.join(", "))
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository where `main` has a rebase of a pull request's commit and
    /// a copy of one of its own commits, made without `-x`.
    #[test]
    fn copies_are_told_by_patch_id() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .arg("-C")
                .arg(repo)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        let commit = |file: &str, text: &str, message: &str| {
            std::fs::write(repo.join(file), text).unwrap();
            git(&["add", "."]);
            git(&["commit", "-q", "-m", message]);
            git(&["rev-parse", "HEAD"])
        };
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("b.txt"), "y\n").unwrap();
        commit("a.txt", "x\n", "start");
        git(&["checkout", "-q", "-b", "pr"]);
        commit("a.txt", "x\nA\n", "on the branch");
        git(&["checkout", "-q", "main"]);
        commit("a.txt", "x\nA\n", "rebased onto main");
        let m2 = commit("b.txt", "y\nB\n", "adds B");
        commit("b.txt", "y\n", "takes B out");
        commit("b.txt", "y\nB\n", "B again");
        let window = Window::read(repo, repo, "main", 10).unwrap();
        let kinds: Vec<Kind> = (0..window.commits.len())
            .map(|n| window.kind(repo, n).unwrap())
            .collect();
        let picked = window.index[&m2];
        assert_eq!(
            kinds,
            [
                Kind::Start,
                Kind::Rebased,
                Kind::Commit,
                Kind::Commit,
                Kind::CherryPick(Some(picked))
            ]
        );
    }

    fn dag(parents: &[&[usize]]) -> Dag {
        Dag {
            parents: parents.iter().map(|p| p.to_vec()).collect(),
            outside: parents.iter().map(|p| p.is_empty()).collect(),
        }
    }

    fn t(name: &str) -> TestId {
        ("pkg".to_owned(), name.to_owned())
    }

    fn tests(names: &[&str]) -> Tests {
        names.iter().map(|n| t(n)).collect()
    }

    #[test]
    fn dominators_of_a_criss_cross_merge() {
        // 0 ─┬─ 1 ─┬─ 3 (1, 2) ─┬─ 5 (3, 4)
        //    └─ 2 ─┴─ 4 (2, 1) ─┘
        // 3 and 4 have two merge bases (1 and 2); what dominates 5 is 0.
        let g = dag(&[&[], &[0], &[0], &[1, 2], &[2, 1], &[3, 4]]);
        let idom = g.dominators();
        assert_eq!(
            idom,
            vec![None, Some(0), Some(0), Some(0), Some(0), Some(0)]
        );
        assert_eq!(common_dominator(&idom, Some(3), Some(4)), Some(0));
        assert_eq!(common_dominator(&idom, Some(1), Some(1)), Some(1));
        assert_eq!(g.between(0, 3), BTreeSet::from([1, 2, 3]));
        assert_eq!(g.between(0, 0), BTreeSet::new());
    }

    #[test]
    fn dominators_on_a_line_and_past_the_window() {
        // 0 ─ 1 ─ 2 ─┬──── 4 (2, 3) ─ 5 ─ 6 (5, and a commit before the window)
        //            └─ 3 ─┘
        let mut g = dag(&[&[], &[0], &[1], &[2], &[2, 3], &[4], &[5]]);
        g.outside[6] = true;
        let idom = g.dominators();
        assert_eq!(idom[4], Some(2));
        assert_eq!(idom[5], Some(4));
        // A parent before the window: what dominates it is unknown.
        assert_eq!(idom[6], None);
        assert_eq!(common_dominator(&idom, Some(6), Some(5)), None);
        // Two windows' start commits meet only at the virtual root.
        let two = dag(&[&[], &[], &[0, 1]]);
        assert_eq!(two.dominators(), vec![None, None, None]);
    }

    /// The paper's Figure 6 (Theorem 3): t's method changes between n1 and
    /// n3 and between n1 and n4, not between n1 and n2; n5 = n2 + n3,
    /// n6 = n2 + n4, n7 = n5 + n6. lca(n5, n6) = {n2}, dom(n5, n6) = n1:
    /// over the lca t would be left out, over the dominator it is in.
    #[test]
    fn s0_uses_the_lowest_common_dominator_not_the_merge_base() {
        let g = dag(&[&[], &[0], &[0], &[0], &[1, 2], &[1, 3], &[4, 5]]);
        let idom = g.dominators();
        assert_eq!(idom[6], Some(0));
        let mut stored = Stored::new((1..=7).map(|i| format!("n{i}")).collect());
        let all = tests(&["t", "u"]);
        for n in 0..7 {
            stored.available[n] = Some(all.clone());
        }
        stored.from_parent[1].insert(0, tests(&[]));
        stored.from_parent[2].insert(0, tests(&["t"]));
        stored.from_parent[3].insert(0, tests(&["t"]));
        // At the merges, what the other side changed.
        stored.from_parent[4].insert(1, tests(&["t"]));
        stored.from_parent[4].insert(2, tests(&[]));
        stored.from_parent[5].insert(1, tests(&["t"]));
        stored.from_parent[5].insert(3, tests(&[]));
        assert_eq!(s0_merge(&g, &idom, &stored, 6).unwrap(), tests(&["t"]));
        // n5 = n2 + n3: t is affected on one side only.
        assert_eq!(s0_merge(&g, &idom, &stored, 4).unwrap(), tests(&[]));
    }

    #[test]
    fn s0_selects_tests_new_on_one_branch_and_needs_every_selection() {
        // 0 ─┬─ 1 ─┬─ 3 (1, 2)
        //    └─ 2 ─┘
        let g = dag(&[&[], &[0], &[0], &[1, 2]]);
        let idom = g.dominators();
        let mut stored = Stored::new(vec!["a".into(), "b".into(), "c".into(), "m".into()]);
        stored.available[0] = Some(tests(&["x", "y"]));
        stored.available[1] = Some(tests(&["x", "y", "new"]));
        stored.available[2] = Some(tests(&["x", "y"]));
        stored.available[3] = Some(tests(&["x", "y", "new"]));
        stored.from_parent[1].insert(0, tests(&["x", "new"]));
        // Without 2's selection there is nothing to say.
        let err = s0_merge(&g, &idom, &stored, 3).unwrap_err();
        assert!(err.contains("no selection stored at c"), "{err}");
        stored.from_parent[2].insert(0, tests(&["x"]));
        assert_eq!(
            s0_merge(&g, &idom, &stored, 3).unwrap(),
            tests(&["new", "x"])
        );
        stored.from_parent[2].insert(0, tests(&["y"]));
        assert_eq!(s0_merge(&g, &idom, &stored, 3).unwrap(), tests(&["new"]));
    }

    #[test]
    fn s0_of_a_cherry_pick_and_a_revert() {
        // 0 ─┬─ 1 ── 3 (picks 2)
        //    └─ 2
        let g = dag(&[&[], &[0], &[0], &[1]]);
        let idom = g.dominators();
        let mut stored = Stored::new((0..4).map(|i| i.to_string()).collect());
        for n in 0..4 {
            stored.available[n] = Some(tests(&["x", "y", "z"]));
        }
        stored.available[2] = Some(tests(&["x", "y", "z", "w"]));
        stored.available[3] = Some(tests(&["x", "y", "z", "w"]));
        stored.from_parent[1].insert(0, tests(&["x"]));
        stored.from_parent[2].insert(0, tests(&["x", "y", "w"]));
        // x: picked and also changed on the branch it lands on; w: added
        // by the picked commit; y: only the picked commit's.
        assert_eq!(
            s0_pick(&g, &idom, &stored, 3, 2, false).unwrap(),
            tests(&["w", "x"])
        );
        // 0 ── 1 ── 2 ── 3 (reverts 1)
        let line = dag(&[&[], &[0], &[1], &[2]]);
        let idom = line.dominators();
        let mut stored = Stored::new((0..4).map(|i| i.to_string()).collect());
        stored.available[0] = Some(tests(&["x", "y", "gone"]));
        for n in 1..4 {
            stored.available[n] = Some(tests(&["x", "y"]));
        }
        stored.from_parent[1].insert(0, tests(&["x"]));
        stored.from_parent[2].insert(1, tests(&["y"]));
        stored.from_parent[3].insert(2, tests(&[]));
        // The reverted commit lies between the dominator (0) and the
        // parent, so all it selected is in; the test it removed comes back
        // but is not available at 3.
        assert_eq!(
            s0_pick(&line, &idom, &stored, 3, 1, true).unwrap(),
            tests(&["x"])
        );
    }

    #[test]
    fn a_skipped_test_is_judged_against_the_commit_that_vouched() {
        let outcomes = |v: &[(&str, &str)]| {
            Some(
                v.iter()
                    .map(|(n, o)| (t(n), (*o).to_owned()))
                    .collect::<HashMap<_, _>>(),
            )
        };
        // 0: a and b pass. 1 (another branch): a fails there. 2: a passes
        // again, b fails.
        let all = vec![
            outcomes(&[("a", "ok"), ("b", "ok"), ("i", "ignored")]),
            outcomes(&[("a", "FAILED"), ("b", "ok")]),
            outcomes(&[("a", "ok"), ("b", "FAILED"), ("i", "ignored")]),
        ];
        let verdict = |n: &str, selected: bool, vouched_by: Option<usize>| Verdict {
            id: t(n),
            selected,
            ran: selected,
            vouched_by,
        };
        let mut w = Witnesses::default();
        let at0 = [verdict("a", true, None), verdict("b", true, None)];
        assert!(check(&w, &all, 0, &at0).misses.is_empty());
        for v in &at0 {
            w.update(0, &v.id, v.ran, v.vouched_by);
        }
        let at1 = [verdict("a", true, None), verdict("b", false, None)];
        let at1_checked = check(&w, &all, 1, &at1);
        assert!(at1_checked.misses.is_empty());
        assert_eq!(at1_checked.compared, 1);
        for v in &at1 {
            w.update(1, &v.id, v.ran, v.vouched_by);
        }
        assert_eq!(w.of(&t("a"), None), Some(1));
        assert_eq!(w.of(&t("b"), None), Some(0));
        // At 2, a is skipped on 0's word: it passed there, as here. b is
        // skipped on its current record's: its witness, 0, had it pass.
        let at2 = [
            verdict("a", false, Some(0)),
            verdict("b", false, None),
            verdict("i", false, None),
        ];
        let found = check(&w, &all, 2, &at2).misses;
        assert_eq!(
            found,
            vec![Miss {
                id: t("b"),
                witness: Some(0),
                before: Some("ok".into()),
                now: "FAILED".into()
            }]
        );
        for v in &at2 {
            w.update(2, &v.id, v.ran, v.vouched_by);
        }
        assert_eq!(w.of(&t("a"), None), Some(0));
        // Skipped without a witness: nothing vouches for it.
        let unknown = [verdict("c", false, None)];
        let all = vec![outcomes(&[("c", "ok")])];
        assert_eq!(
            check(&Witnesses::default(), &all, 0, &unknown).misses[0].witness,
            None
        );
    }

    #[test]
    fn messages_name_reverted_and_picked_commits() {
        let revert =
            "Revert \"x\"\n\nThis reverts commit 0123456789abcdef0123456789abcdef01234567.\n";
        assert_eq!(
            named_commit(revert, "This reverts commit"),
            Some("0123456789abcdef0123456789abcdef01234567")
        );
        let pick = "fix\n\n(cherry picked from commit abcdef12)";
        assert_eq!(
            named_commit(pick, "cherry picked from commit"),
            Some("abcdef12")
        );
        assert_eq!(
            named_commit("This reverts commit of doom", "This reverts commit"),
            None
        );
    }
}
