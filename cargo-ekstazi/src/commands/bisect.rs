//! `cargo ekstazi bisect <TEST>...`: the latest commit that broke the
//! tests, with as few builds as possible.
//!
//! The search is `ekstazi_core::workflows::bisect` (the Regression Predecessors
//! Algorithm). A commit is good when every named test passes there, bad
//! when one fails. Each question is answered cheapest first: from the
//! history (a record of the test filed at that commit: `history` if it ran
//! there, `inherited` if a record vouched for it there), else by building
//! and running the tests at that commit (`built`) in a scratch git worktree
//! with one instrumented target directory for every query, so builds are
//! incremental. What a build learns is filed into the history (not into
//! the current records). A commit that does not build, or lacks a test, is
//! skipped. Ctrl-C stops the build, removes the worktree and leaves the
//! state directory as it was after the last finished query.

use crate::cli::{BisectArgs, SearchArg};
use crate::git::repo::Repo;
use crate::git::worktree::{TestId, Worktree, short};
use crate::style;
use anyhow::{Context, Result, bail};
use ekstazi_core::model::record::{Outcome, Record};
use ekstazi_core::storage::history::History;
use ekstazi_core::storage::store::Store;
use ekstazi_core::workflows::bisect::{self, Answer, Dag, Oracle, Regression, Search, Unsolved};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::process::{Command, ExitCode};

pub fn run(args: BisectArgs) -> Result<ExitCode> {
    let opened = super::locked_repo(&args.state, "bisect")?;
    let history = opened.store.history();
    let bad = resolve_revs(&opened.repo, &args.bad, &["HEAD"])?;
    let mut good = resolve_revs(&opened.repo, &args.good, &[])?;
    let mut builder = Worktree::new(
        &opened.repo,
        &opened.root,
        &opened.store,
        &args.state.cargo,
        "bisect",
    )?;
    let (tests, builds) = named_tests(&args.tests, &opened.store, &history, &mut builder, &bad[0])?;
    let dag = commit_dag(&opened.root, &bad, &good, args.first_parent)?;
    let mut oracle = Answers::new(history.clone(), tests.clone(), builder, builds);
    oracle.refuse_failing(&good)?;
    if good.is_empty() {
        good.push(find_good(&opened.root, &bad[0], &mut oracle)?);
    }
    let search = search_of(args.search);
    let found = bisect::regressions(&dag, &bad, &good, &mut oracle, search, args.propagate);
    if let Some(e) = oracle.failure.take() {
        return Err(e);
    }
    let builds = oracle.builds;
    let test_runs = oracle.test_runs;
    let queries = oracle.log.take();
    let git_bisect_builds = if args.compare_git_bisect {
        Some(git_bisect_builds(&dag, &bad, &good, &mut oracle)?)
    } else {
        None
    };
    drop(oracle);

    let report = BisectJson {
        regressions: regressions_explained(&opened.store, &opened.repo, &history, &tests, &found),
        queries,
        builds,
        test_runs,
        git_bisect_builds,
    };
    write_report(&report, args.json)?;
    conclude(&report, unsolved(&found))
}

/// The commits `given` names, else those `default` names.
fn resolve_revs(repo: &Repo, given: &[String], default: &[&str]) -> Result<Vec<String>> {
    let given: Vec<&str> = if given.is_empty() {
        default.to_vec()
    } else {
        given.iter().map(String::as_str).collect()
    };
    given
        .iter()
        .map(|rev| {
            repo.resolve(rev)
                .with_context(|| format!("`{rev}` is not a commit of this repository"))
        })
        .collect()
}

/// The tests `queries` name, and how many builds it took to find them.
fn named_tests(
    queries: &[String],
    store: &Store,
    history: &History,
    builder: &mut Worktree,
    bad: &str,
) -> Result<(Vec<TestId>, usize)> {
    let mut known = known_tests(store, history)?;
    let mut builds = 0;
    if queries
        .iter()
        .any(|query| matching(&known, query).is_empty())
    {
        // A cold start (a fresh clone, no state): the tests are found where
        // they fail, at the bad end, built and run once; what that run
        // files answers for the bad end too.
        style::note(format!(
            "no record names {}: building the bad end {} to list its tests",
            queries.join(", "),
            short(bad)
        ));
        let ran = builder.run(bad, &[], true)?;
        builds += 1;
        let outcomes = ran.outcomes.with_context(|| {
            format!(
                "the bad end {} does not build (the output: {})",
                short(bad),
                builder.log().display()
            )
        })?;
        known.extend(outcomes.into_iter().map(|(id, _)| id));
    }
    let tests = resolve_tests(queries, &known)?;
    if tests.iter().any(|(binary, _)| binary.contains("::doc/")) {
        bail!("doctests cannot be bisected: name the tests of a test binary");
    }
    Ok((tests, builds))
}

fn search_of(arg: SearchArg) -> Search {
    match arg {
        SearchArg::Multiplying => Search::Multiplying,
        SearchArg::MultiplyingThenBinary => Search::MultiplyingThenBinary,
        SearchArg::Binary => Search::Binary,
    }
}

/// How many commits git bisect asks about on the same answers: each of
/// its questions is a build (it has no history); commits this search did
/// not judge are built now.
fn git_bisect_builds(
    dag: &Dag,
    bad: &[String],
    good: &[String],
    oracle: &mut Answers,
) -> Result<usize> {
    oracle.quiet = true;
    let mut asked = 0;
    for leaf in bad {
        asked += bisect::git_bisect(dag, leaf, good, &mut |c: &str| {
            oracle.known(c).unwrap_or_else(|| oracle.query(c))
        })
        .1;
    }
    if let Some(e) = oracle.failure.take() {
        return Err(e);
    }
    Ok(asked)
}

/// Each regression point found, with its bad commit's subject and what
/// differs between the tests' records at its two ends.
fn regressions_explained(
    store: &Store,
    repo: &Repo,
    history: &History,
    tests: &[TestId],
    found: &[Result<Regression, Unsolved>],
) -> Vec<RegressionJson> {
    let table = ekstazi_core::digests::functions::FunctionTable::load(&store.functions_dir());
    let subjects = repo.subjects(
        found
            .iter()
            .flatten()
            .flat_map(|r| [r.good.as_str(), r.bad.as_str()]),
    );
    found
        .iter()
        .flatten()
        .map(|r| RegressionJson {
            good: r.good.clone(),
            bad: r.bad.clone(),
            leaf: r.leaf.clone(),
            subject: subjects.get(&r.bad).cloned(),
            skipped: r.skipped.clone(),
            changed: explain(history, tests, r, &table),
        })
        .collect()
}

/// Why no regression point was found from some bad commits.
fn unsolved(found: &[Result<Regression, Unsolved>]) -> Vec<String> {
    found
        .iter()
        .filter_map(|r| r.as_ref().err())
        .map(|e| match e {
            Unsolved::NoGoodCommit(leaf) => {
                format!("no commit known to be good precedes {}", short(leaf))
            }
            Unsolved::LeafIsGood(leaf) => {
                format!("the tests pass at the bad commit {}", short(leaf))
            }
        })
        .collect()
}

/// The report, as JSON or for people.
fn write_report(report: &BisectJson, json: bool) -> Result<()> {
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, report)?;
        writeln!(out)?;
    } else {
        print_report(&mut out, report)?;
    }
    Ok(())
}

/// Success when a regression point was found, with a warning for each bad
/// commit without one; else an error that says why.
fn conclude(report: &BisectJson, unsolved: Vec<String>) -> Result<ExitCode> {
    if report.regressions.is_empty() {
        bail!(
            "no regression point found: {}",
            if unsolved.is_empty() {
                "every commit was skipped".to_owned()
            } else {
                unsolved.join("; ")
            }
        );
    }
    for why in unsolved {
        style::warn(why);
    }
    Ok(ExitCode::SUCCESS)
}

/// `bisect --json` (docs/reference/json.md).
#[derive(Serialize)]
struct BisectJson {
    regressions: Vec<RegressionJson>,
    queries: Vec<Query>,
    builds: usize,
    test_runs: usize,
    /// With `--compare-git-bisect`: how many commits `git bisect` asks
    /// about (each a build) from the same ends, on the same answers.
    git_bisect_builds: Option<usize>,
}

#[derive(Serialize)]
struct RegressionJson {
    good: String,
    bad: String,
    /// The bad commit it was searched from.
    leaf: String,
    subject: Option<String>,
    /// Commits between the two that could not be judged.
    skipped: Vec<String>,
    /// What differs between the tests' records at `good` and at `bad`.
    changed: Vec<String>,
}

#[derive(Clone, Serialize)]
struct Query {
    commit: String,
    answer: &'static str,
    how: &'static str,
}

fn print_report(out: &mut impl Write, report: &BisectJson) -> Result<()> {
    for query in &report.queries {
        writeln!(
            out,
            "  {}  {:<4}  {}",
            short(&query.commit),
            query.answer,
            query.how
        )?;
    }
    for r in &report.regressions {
        writeln!(
            out,
            "regression: {} (good) -> {} (bad){}",
            short(&r.good),
            short(&r.bad),
            r.subject
                .as_deref()
                .map(|s| format!(" \"{s}\""))
                .unwrap_or_default()
        )?;
        if !r.skipped.is_empty() {
            writeln!(
                out,
                "    or one of the commits between, which could not be judged: {}",
                r.skipped
                    .iter()
                    .map(|c| short(c))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        for change in &r.changed {
            writeln!(out, "    {change}")?;
        }
    }
    let from_history = report.queries.iter().filter(|q| q.how != "built").count();
    writeln!(
        out,
        "{} commits judged: {} from the history, {} built; {} build(s), {} test run(s){}",
        report.queries.len(),
        from_history,
        report.queries.len() - from_history,
        report.builds,
        report.test_runs,
        report
            .git_bisect_builds
            .map(|n| format!("; git bisect from the same ends: {n} build(s)"))
            .unwrap_or_default()
    )?;
    Ok(())
}

/// The tests the state and the history know.
fn known_tests(store: &Store, history: &History) -> Result<BTreeSet<TestId>> {
    let mut known: BTreeSet<TestId> = store
        .records()?
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .map(|r| (r.binary, r.test))
        .collect();
    for manifest in history.manifests() {
        known.extend(manifest.entries.into_iter().map(|e| (e.binary, e.test)));
    }
    Ok(known)
}

/// The known tests `query` names: an exact label (`<binary id> <name>`),
/// else an exact name, else those whose label contains it.
fn matching<'a>(known: &'a BTreeSet<TestId>, query: &str) -> Vec<&'a TestId> {
    let label = |t: &TestId| format!("{} {}", t.0, t.1);
    let exact: Vec<&TestId> = known.iter().filter(|t| label(t) == query).collect();
    let named: Vec<&TestId> = known.iter().filter(|t| t.1 == query).collect();
    let partial: Vec<&TestId> = known.iter().filter(|t| label(t).contains(query)).collect();
    [exact, named, partial]
        .into_iter()
        .find(|f| !f.is_empty())
        .unwrap_or_default()
}

/// The named tests, among the known ones; a name that matches several
/// tests must match each exactly.
fn resolve_tests(queries: &[String], known: &BTreeSet<TestId>) -> Result<Vec<TestId>> {
    let mut tests = Vec::new();
    for query in queries {
        let label = |t: &TestId| format!("{} {}", t.0, t.1);
        let found = matching(known, query);
        if found.is_empty() {
            bail!(
                "no test matches `{query}`: neither the records, the history nor the tests at \
                 the bad end name it"
            );
        }
        if found.len() > 1 && !found.iter().all(|t| t.1 == *query) {
            bail!(
                "{} tests match `{query}`; name one: {}",
                found.len(),
                found
                    .iter()
                    .take(5)
                    .map(|t| label(t))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        tests.extend(found.into_iter().cloned());
    }
    tests.sort();
    tests.dedup();
    Ok(tests)
}

/// The commits reachable from the bad ones and not from the good ones,
/// with their parents (only the first with `--first-parent`).
fn commit_dag(root: &Path, bad: &[String], good: &[String], first_parent: bool) -> Result<Dag> {
    let mut command = Command::new("git");
    command.arg("-C").arg(root).args(["rev-list", "--parents"]);
    if first_parent {
        command.arg("--first-parent");
    }
    command.args(bad);
    command.args(good.iter().map(|g| format!("^{g}")));
    let output = command.output().context("cannot run git rev-list")?;
    if !output.status.success() {
        bail!(
            "git rev-list failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8(output.stdout)?;
    Ok(Dag::new(text.lines().filter_map(|line| {
        let mut ids = line.split_whitespace().map(str::to_owned);
        let commit = ids.next()?;
        let mut parents: Vec<String> = ids.collect();
        if first_parent {
            parents.truncate(1);
        }
        Some((commit, parents))
    })))
}

/// Without `--good`: the newest first-parent ancestor of `bad` the history
/// shows good, else the first good one of `bad~1`, `bad~3`, `bad~7`, …
/// (built), as multiplying search would ask.
fn find_good(root: &Path, bad: &str, oracle: &mut Answers) -> Result<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-list", "--first-parent", bad])
        .output()?;
    let line: Vec<String> = String::from_utf8(output.stdout)?
        .lines()
        .map(str::to_owned)
        .collect();
    if let Some(good) = line
        .iter()
        .skip(1)
        .find(|c| oracle.known(c) == Some(Answer::Good))
    {
        return Ok(good.clone());
    }
    let mut step = 1;
    while step < line.len() {
        let commit = &line[step];
        if oracle.query(commit) == Answer::Good {
            return Ok(commit.clone());
        }
        if let Some(e) = oracle.failure.take() {
            return Err(e);
        }
        step = step * 2 + 1;
    }
    bail!(
        "no good commit found among the first-parent ancestors of {}: give one with --good",
        short(bad)
    )
}

/// What differs between the tests' records at the two commits.
fn explain(
    history: &History,
    tests: &[TestId],
    r: &Regression,
    table: &ekstazi_core::digests::functions::FunctionTable,
) -> Vec<String> {
    let record_at = |commit: &str, test: &TestId| -> Option<Record> {
        let manifest = history.manifest(commit)?;
        let entry = manifest
            .entries
            .iter()
            .find(|e| e.binary == test.0 && e.test == test.1)?;
        history.object(&entry.record)
    };
    let mut changed = Vec::new();
    for test in tests {
        let (Some(good), Some(bad)) = (record_at(&r.good, test), record_at(&r.bad, test)) else {
            continue;
        };
        if bad.outcome == Outcome::Passed {
            continue;
        }
        for change in bisect::explain(&good, &bad, table) {
            if !changed.contains(&change) {
                changed.push(change);
            }
        }
    }
    changed
}

/// The answers: the history's, else a build's.
struct Answers {
    history: History,
    tests: Vec<TestId>,
    /// Per commit, what the history says (read once).
    seen: RefCell<HashMap<String, Option<(Answer, &'static str)>>>,
    log: RefCell<Vec<Query>>,
    builder: Worktree,
    builds: usize,
    test_runs: usize,
    /// Why the search had to stop (interrupted, or a build could not run).
    failure: Option<anyhow::Error>,
    /// Answering for the git bisect comparison: not this search's queries.
    quiet: bool,
}

impl Answers {
    /// The answers for `tests`, none given yet; `builds` were spent
    /// already.
    fn new(history: History, tests: Vec<TestId>, builder: Worktree, builds: usize) -> Answers {
        Answers {
            history,
            tests,
            seen: RefCell::new(HashMap::new()),
            log: RefCell::new(Vec::new()),
            builder,
            builds,
            test_runs: 0,
            failure: None,
            quiet: false,
        }
    }

    /// An error when the history shows a named test failing at one of the
    /// `good` commits.
    fn refuse_failing(&self, good: &[String]) -> Result<()> {
        for commit in good {
            if self
                .history_answer(commit)
                .is_some_and(|(a, _)| a == Answer::Bad)
            {
                bail!(
                    "a named test fails at the good commit {} (its filed records say so)",
                    short(commit)
                );
            }
        }
        Ok(())
    }

    fn logged(&self, commit: &str, answer: Answer, how: &'static str) {
        if self.quiet {
            return;
        }
        let mut log = self.log.borrow_mut();
        if !log.iter().any(|q| q.commit == commit) {
            log.push(Query {
                commit: commit.to_owned(),
                answer: match answer {
                    Answer::Good => "good",
                    Answer::Bad => "bad",
                    Answer::Skip => "skip",
                },
                how,
            });
        }
    }

    /// The history's answer for a commit: every named test has a record
    /// filed there.
    fn history_answer(&self, commit: &str) -> Option<(Answer, &'static str)> {
        if let Some(known) = self.seen.borrow().get(commit) {
            return *known;
        }
        let answer = self.history.manifest(commit).and_then(|manifest| {
            let mut verdict = (Answer::Good, "history");
            for test in &self.tests {
                let entry = manifest
                    .entries
                    .iter()
                    .find(|e| e.binary == test.0 && e.test == test.1)?;
                if !entry.ran {
                    verdict.1 = "inherited";
                }
                if entry.outcome != Outcome::Passed {
                    verdict.0 = Answer::Bad;
                }
            }
            Some(verdict)
        });
        self.seen.borrow_mut().insert(commit.to_owned(), answer);
        answer
    }
}

impl Oracle for Answers {
    fn known(&self, commit: &str) -> Option<Answer> {
        let (answer, how) = self.history_answer(commit)?;
        self.logged(commit, answer, how);
        Some(answer)
    }

    fn query(&mut self, commit: &str) -> Answer {
        // After a failure, every further question is skipped: the search
        // ends without another build, and the failure is reported.
        if self.failure.is_some() {
            return Answer::Skip;
        }
        let answer = match build_and_run(&mut self.builder, commit, &self.tests) {
            Ok((answer, ran)) => {
                if !self.quiet {
                    self.builds += 1;
                    self.test_runs += ran;
                }
                answer
            }
            Err(e) => {
                self.failure = Some(e);
                return Answer::Skip;
            }
        };
        self.seen.borrow_mut().remove(commit);
        self.logged(commit, answer, "built");
        answer
    }
}

/// The tests' verdict at `commit`, and how many of them ran: skipped when
/// it does not build or lacks one of them.
fn build_and_run(
    worktree: &mut Worktree,
    commit: &str,
    tests: &[TestId],
) -> Result<(Answer, usize)> {
    let ran = worktree.run(commit, tests, true)?;
    let Some(outcomes) = ran.outcomes else {
        return Ok((Answer::Skip, 0));
    };
    let mut count = 0;
    let mut verdict = Answer::Good;
    for test in tests {
        match outcomes.iter().find(|(id, _)| id == test) {
            // The test does not exist at this commit, or did not run.
            None | Some((_, None)) => return Ok((Answer::Skip, count)),
            Some((_, Some(outcome))) => {
                count += 1;
                if *outcome != Outcome::Passed {
                    verdict = Answer::Bad;
                }
            }
        }
    }
    Ok((verdict, count))
}
