//! `cargo xtask eval bisect`: does `cargo ekstazi bisect` find the *latest*
//! regression point, and with how many builds, against `git bisect run`?
//!
//! On a window of a real project's first-parent history:
//!
//! 1. **CI.** `cargo ekstazi test` runs at every commit of the window, oldest
//!    first, with the state and history carried: the history a CI job would
//!    have left (a record at every commit, selective as CI is).
//! 2. **Real regressions.** Every test that fails at the window's newest
//!    commit and passed at its oldest is bisected.
//! 3. **Injected regressions.** A mutant that some test kills at the newest
//!    commit (tried alone under `cargo test`) is applied from a commit k
//!    onwards; every second one is removed at j > k and applied again at
//!    m > j (non-monotone: `git bisect` from the oldest commit can find the
//!    old point). Mutants whose killing tests are disjoint share one
//!    rewritten history (a *chain*), so that CI runs once per chain. The
//!    rewritten commits are made with git plumbing (the original tree with
//!    the active mutants applied), and CI runs on them from the state the
//!    original window left, as a CI job on a new branch would.
//! 4. **Ground truth.** A test's answer at a commit is what CI saw there:
//!    its outcome where it ran, good where a passing record vouched for it,
//!    skip where it did not exist or nothing built. The latest regression
//!    point is the good commit nearest the newest one and the first bad
//!    commit after it.
//! 5. **The searches** between the same ends (good: the oldest commit;
//!    bad: the newest): `git bisect run` with a plain `cargo test` of the
//!    one test (exit 125 where it does not build or the test is missing);
//!    then, for each `--searches` value (by default all of `cargo ekstazi
//!    bisect --search`: `multiplying`, `multiplying-binary`, `binary`),
//!    `cargo ekstazi bisect` on the CI state with its history removed (the
//!    current records only), and on the CI state as it is. Each starts from
//!    a fresh copy of the CI state, so none is answered by what an earlier
//!    one filed; they share the scratch worktree's target directory, so
//!    later ones build faster (wall time favours them, builds do not).
//!
//! Output in `<out>`: `bisect.csv` (a line per regression and search, with
//! the latest point's distance from the bad end and its bucket),
//! `summary.md` (per kind of regression and search: latest point found,
//! builds mean / median / P90; then the same per distance bucket: 1, 2–3,
//! 4–7, 8–15, 16–31, 32+ commits back), and logs under `logs/`.

use super::evidence::{self, EkstaziOpts, Report, RetestAll, TestId};
use super::mutate::{self, Mutant, SplitMix};
use crate::common::files::copy_tree;
use crate::common::process::{output, run_ok};
use crate::common::stats;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BisectEvalArgs {
    /// Commits in the window (after the oldest, the good end)
    #[arg(long, default_value_t = 50)]
    pub commits: usize,
    /// The newest commit of the window (the bad end)
    #[arg(long, default_value = "HEAD")]
    pub from: String,
    /// Injected regressions to make
    #[arg(long, default_value_t = 40)]
    pub regressions: usize,
    /// Mutants per rewritten history (their killing tests disjoint),
    /// so that CI runs once for several
    #[arg(long, default_value_t = 5)]
    pub per_chain: usize,
    /// Seed of the choice and placement of mutants
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only mutate Rust sources under these paths (default: every
    /// package's `src/`)
    #[arg(long = "src", value_delimiter = ',')]
    pub sources: Vec<String>,
    /// Search the regressions an earlier run left in `<out>/cases.json`
    /// again, without its CI
    #[arg(long)]
    pub resume: bool,
    /// The tool's searches (`cargo ekstazi bisect --search` values)
    #[arg(long, value_delimiter = ',', value_parser = SEARCHES, default_values = SEARCHES)]
    pub searches: Vec<String>,
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    #[command(flatten)]
    pub project: evidence::Project,
}

impl BisectEvalArgs {
    /// The project resolved, and at least one mutant per rewritten history.
    pub fn resolve(self) -> Result<Self> {
        Ok(BisectEvalArgs {
            project: self.project.resolve(true)?,
            per_chain: self.per_chain.max(1),
            ..self
        })
    }
}

/// The tool's `--search` values, in the order they are reported.
pub const SEARCHES: [&str; 3] = ["multiplying", "multiplying-binary", "binary"];

/// What a commit says of one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Truth {
    Good,
    Bad,
    Skip,
}

/// One regression to search for (kept in `<out>/cases.json`, so that
/// `--resume` searches again without CI).
#[derive(Serialize, Deserialize)]
struct Case {
    name: String,
    kind: String,
    test: TestId,
    /// The chain's commits, oldest first: index 0 is the good end, the last
    /// the bad one.
    chain: Vec<String>,
    truth: Vec<Truth>,
    /// Where the mutant is active (`k`, or `k..j, m..`).
    placement: String,
    /// The CI state the searches start from.
    state: PathBuf,
}

/// One search's result.
#[derive(Default)]
struct Found {
    point: Option<(String, String)>,
    builds: usize,
    test_runs: usize,
    wall: f64,
    error: Option<String>,
}

/// A mutant placed in a chain.
struct Placed {
    mutant: Mutant,
    /// The replaced text with the rest of its first and last lines around
    /// it: unique in the file at every commit it is active at.
    needle: String,
    replacement: String,
    test: TestId,
    kills: BTreeSet<TestId>,
    active: Vec<bool>,
    placement: String,
}

/// One way a regression is searched: `git bisect run`, or the tool with
/// one `--search`, on the CI state with or without its history.
#[derive(Clone, PartialEq, Eq)]
struct Way {
    /// The tool's `--search`; `None` for `git bisect run`.
    search: Option<String>,
    history: bool,
}

impl Way {
    fn label(&self) -> String {
        match &self.search {
            None => "git bisect run".to_owned(),
            Some(search) => format!(
                "{search}, {}",
                if self.history {
                    "CI history"
                } else {
                    "no history"
                }
            ),
        }
    }
}

/// `git bisect run`, then each search without history, then each with.
fn ways(searches: &[String]) -> Vec<Way> {
    let mut ways = vec![Way {
        search: None,
        history: false,
    }];
    for history in [false, true] {
        ways.extend(searches.iter().map(|s| Way {
            search: Some(s.clone()),
            history,
        }));
    }
    ways
}

/// Buckets of the distance of the latest regression point from the bad
/// end (commits from its good commit to the bad end): 1 is the bad end
/// itself, the multiplying search's first probe; each next bucket is its
/// next probe's reach.
const DISTANCES: [(usize, usize, &str); 6] = [
    (1, 1, "1"),
    (2, 3, "2–3"),
    (4, 7, "4–7"),
    (8, 15, "8–15"),
    (16, 31, "16–31"),
    (32, usize::MAX, "32+"),
];

fn bucket(distance: usize) -> &'static str {
    DISTANCES
        .iter()
        .find(|(lo, hi, _)| (*lo..=*hi).contains(&distance))
        .map_or("0", |(_, _, name)| name)
}

/// How far back from the bad end the latest point's good commit is.
fn distance(case: &Case) -> Option<usize> {
    let (good, _) = latest_point(&case.truth)?;
    Some(case.truth.len() - 1 - good)
}

pub fn bisect(args: &BisectEvalArgs) -> Result<()> {
    let (ekstazi, scratch) = args.project.scratch_setup()?;
    let git = |a: &[&str]| evidence::git(&scratch, a);
    // A rerun starts with no bisect of an earlier one in flight.
    let _ = git(&["bisect", "reset"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let listing = output(
        git(&["rev-list", "--first-parent", "-n"])
            .arg((args.commits + 1).to_string())
            .arg(&args.from),
    )?;
    let mut commits: Vec<String> = listing.lines().map(str::to_owned).collect();
    commits.reverse();
    let n = commits.len() - 1;
    anyhow::ensure!(n >= 3, "the window needs at least 4 commits");
    eprintln!(
        "bisect evaluation on {} commits of {}",
        n + 1,
        args.project.repo.display()
    );
    let logs = args.project.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    let cases_path = args.project.out.join("cases.json");
    let cases: Vec<Case> = if args.resume && cases_path.exists() {
        eprintln!("the regressions of {}", cases_path.display());
        let cases: Vec<Case> = serde_json::from_slice(&std::fs::read(&cases_path)?)?;
        anyhow::ensure!(
            cases
                .iter()
                .all(|c| c.chain.len() == commits.len() && c.chain[0] == commits[0]),
            "{} holds the regressions of another window",
            cases_path.display()
        );
        cases
    } else {
        let cases = make_cases(args, &ekstazi, &scratch, &commits, &logs)?;
        std::fs::write(&cases_path, serde_json::to_vec_pretty(&cases)?)?;
        cases
    };

    // 5. The searches.
    let ways = ways(&args.searches);
    let mut rows: Vec<(usize, Way, Found)> = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        let expected = latest_point(&case.truth);
        eprintln!(
            "[{c}/{}] {} ({}{}): {} {}; latest point {}",
            cases.len(),
            case.name,
            case.kind,
            if case.placement.is_empty() {
                String::new()
            } else {
                format!(", active {}", case.placement)
            },
            case.test.0,
            case.test.1,
            expected.map_or("none (dropped)".to_owned(), |(g, b)| format!("{g} → {b}"))
        );
        if expected.is_none() {
            continue;
        }
        let log = logs.join(format!("search-{}.log", case.name));
        for way in &ways {
            let found = match &way.search {
                None => git_bisect(args, &scratch, case, &log)?,
                Some(search) => {
                    // Each search starts from the CI state as it was: what
                    // an earlier one filed would answer for free.
                    let state = args.project.out.join("state-search");
                    let _ = std::fs::remove_dir_all(&state);
                    std::fs::create_dir_all(&state)?;
                    copy_tree(&case.state, &state)?;
                    if !way.history {
                        for version in std::fs::read_dir(&state)? {
                            let _ = std::fs::remove_dir_all(version?.path().join(".history"));
                        }
                    }
                    tool_bisect(&ekstazi, &scratch, &state, case, search, &log)?
                }
            };
            rows.push((c, way.clone(), found));
        }
        for (_, way, f) in rows.iter().rev().take(ways.len()).rev() {
            eprintln!(
                "  {}: {}, {} builds, {} test runs, {:.1}s{}",
                way.label(),
                describe(case, f.point.as_ref()),
                f.builds,
                f.test_runs,
                f.wall,
                f.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
        write_results(args, &cases, &rows)?;
    }
    write_results(args, &cases, &rows)?;
    print!(
        "{}",
        std::fs::read_to_string(args.project.out.join("summary.md"))?
    );
    Ok(())
}

/// Steps 1–4: CI over the window, the real regressions, the injected ones
/// with CI over their chains, and the ground truth of each.
fn make_cases(
    args: &BisectEvalArgs,
    ekstazi: &Path,
    scratch: &Path,
    commits: &[String],
    logs: &Path,
) -> Result<Vec<Case>> {
    let n = commits.len() - 1;
    let ci = Ci {
        ekstazi,
        scratch,
        args,
        // The window and every rewritten commit: nothing may be pruned.
        bound: ((n + 1) * (2 + args.regressions)).to_string(),
        logs,
    };

    // 1. CI over the original window.
    let base_state = args.project.out.join("state-ci");
    let _ = std::fs::remove_dir_all(&base_state);
    eprintln!("CI over the window");
    let base_reports = ci.run(&base_state, commits, 0, "base")?;
    let base: Vec<Option<&Report>> = base_reports.iter().map(Option::as_ref).collect();

    let mut cases: Vec<Case> = Vec::new();
    // 2. Real regressions.
    if let Some(newest) = &base_reports[n] {
        for t in newest
            .in_scope()
            .filter(|t| t.selected && t.outcome.as_deref().is_some_and(|o| o != "passed"))
            .filter(|t| !t.binary.contains("::doc/"))
        {
            let test = (t.binary.clone(), t.name.clone());
            let truth = truths(&base, &test);
            if truth[0] != Truth::Good {
                eprintln!(
                    "  {} {} fails at the newest commit but did not pass at the oldest",
                    test.0, test.1
                );
                continue;
            }
            cases.push(Case {
                name: format!("real-{}", cases.len()),
                kind: "real".to_owned(),
                test,
                chain: commits.to_vec(),
                truth,
                placement: String::new(),
                state: base_state.clone(),
            });
        }
    }

    // 3. Injected regressions, in chains.
    if args.regressions > 0 {
        inject(args, &ci, commits, &base, &base_state, &mut cases)?;
    }

    Ok(cases)
}

/// CI: `cargo ekstazi test` at each commit of a chain, state carried.
struct Ci<'a> {
    ekstazi: &'a Path,
    scratch: &'a Path,
    args: &'a BisectEvalArgs,
    bound: String,
    logs: &'a Path,
}

impl Ci<'_> {
    /// Runs at `chain[from..]`; the reports, indexed like the chain (`None`
    /// before `from`, and where nothing was reported).
    fn run(
        &self,
        state: &Path,
        chain: &[String],
        from: usize,
        tag: &str,
    ) -> Result<Vec<Option<Report>>> {
        let mut reports: Vec<Option<Report>> = (0..chain.len()).map(|_| None).collect();
        for (i, commit) in chain.iter().enumerate().skip(from) {
            evidence::checkout_clean(self.scratch, commit)?;
            let run = evidence::ekstazi_test_with_env(
                &EkstaziOpts {
                    ekstazi: self.ekstazi,
                    dir: self.scratch,
                    state,
                    granularity: "function",
                    cargo_args: &self.args.project.cargo_args,
                    target_dir: Some(&self.args.project.out.join("target-ci")),
                    log: &self.logs.join(format!("ci-{tag}-{i:03}.log")),
                    report: &self.logs.join(format!("ci-{tag}-{i:03}.json")),
                    timeout: self.args.project.timeout,
                    mode: evidence::RunMode::Record,
                },
                &[("EKSTAZI_HISTORY_COMMITS", self.bound.clone())],
            )?;
            if let Some(report) = &run.report {
                eprintln!(
                    "  {tag} [{i}/{}] {}: {} of {} selected, {:.1}s",
                    chain.len() - 1,
                    &commit[..8],
                    report.selected().len(),
                    report.in_scope().count(),
                    run.wall
                );
            } else {
                eprintln!(
                    "  {tag} [{i}/{}] {}: no report (does not build?)",
                    chain.len() - 1,
                    &commit[..8]
                );
            }
            reports[i] = run.report;
        }
        Ok(reports)
    }
}

/// Makes the injected regressions: mutants placed, chains rewritten, CI
/// run on each chain.
fn inject(
    args: &BisectEvalArgs,
    ci: &Ci,
    commits: &[String],
    base: &[Option<&Report>],
    base_state: &Path,
    cases: &mut Vec<Case>,
) -> Result<()> {
    let scratch = ci.scratch;
    let n = commits.len() - 1;
    evidence::checkout_clean(scratch, &commits[n])?;
    let plain_target = args.project.out.join("target-plain");
    let mut retest_args = args.project.cargo_args.clone();
    retest_args.push("--tests".to_owned());
    eprintln!("cargo test at the newest commit");
    let clean = evidence::retest_all_in(
        scratch,
        Some(&plain_target),
        &retest_args,
        args.project.timeout,
        &ci.logs.join("tip-cargo-test.log"),
    )?;
    anyhow::ensure!(clean.built, "the newest commit does not build");
    let order = mutate::interleave(mutate::candidates(scratch, &args.sources, &[])?, args.seed);
    let mut rng = SplitMix(args.seed ^ 0x5eed);
    let mut pending: Vec<Placed> = Vec::new();
    let mut made = 0;
    let mut tried = 0;
    let mut chain_no = 0;
    for mutant in order {
        if made + pending.len() >= args.regressions {
            break;
        }
        tried += 1;
        let non_monotone = (made + pending.len()) % 2 == 1;
        let Some(placed) = place(
            scratch,
            commits,
            mutant,
            &clean,
            &plain_target,
            &retest_args,
            args.project.timeout,
            &ci.logs.join(format!("mutant-{tried:03}.log")),
            &pending,
            non_monotone,
            &mut rng,
        )?
        else {
            continue;
        };
        eprintln!(
            "  mutant {}:{} ({}) kills {} {}; active {}",
            placed.mutant.file,
            placed.mutant.line,
            placed.mutant.what,
            placed.test.0,
            placed.test.1,
            placed.placement
        );
        pending.push(placed);
        if pending.len() < args.per_chain && made + pending.len() < args.regressions {
            continue;
        }
        let chain = rewrite(scratch, commits, &pending, chain_no, &args.project.out)?;
        let first = pending
            .iter()
            .filter_map(|p| p.active.iter().position(|a| *a))
            .min()
            .unwrap_or(n);
        let state = args.project.out.join(format!("state-chain-{chain_no}"));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state)?;
        copy_tree(base_state, &state)?;
        eprintln!("CI over chain {chain_no} from commit {first}");
        let chain_reports = ci.run(&state, &chain, first, &format!("chain-{chain_no}"))?;
        let reports: Vec<Option<&Report>> = (0..=n)
            .map(|i| {
                if i < first {
                    base[i]
                } else {
                    chain_reports[i].as_ref()
                }
            })
            .collect();
        for p in pending.drain(..) {
            cases.push(Case {
                name: format!("chain{chain_no}-{made}"),
                kind: if p.placement.contains(',') {
                    "non-monotone"
                } else {
                    "monotone"
                }
                .to_owned(),
                truth: truths(&reports, &p.test),
                test: p.test,
                chain: chain.clone(),
                placement: p.placement,
                state: state.clone(),
            });
            made += 1;
        }
        chain_no += 1;
        // The next mutants are placed and tried at the newest commit as it
        // is, not as the chain left it.
        evidence::checkout_clean(scratch, &commits[n])?;
    }
    if made < args.regressions {
        eprintln!("only {made} injected regressions from {tried} candidate mutants");
    }
    Ok(())
}

/// A mutant made into a regression, if some test it kills is free (no
/// other mutant of the chain kills it, and it kills none of theirs) and its
/// text is found, once, in enough of the window.
#[allow(clippy::too_many_arguments)]
fn place(
    scratch: &Path,
    commits: &[String],
    mutant: Mutant,
    clean: &RetestAll,
    plain_target: &Path,
    retest_args: &[String],
    timeout: Duration,
    log: &Path,
    pending: &[Placed],
    non_monotone: bool,
    rng: &mut SplitMix,
) -> Result<Option<Placed>> {
    let n = commits.len() - 1;
    let path = scratch.join(&mutant.file);
    let text = std::fs::read_to_string(&path)?;
    if mutant.end > text.len()
        || !text.is_char_boundary(mutant.start)
        || !text.is_char_boundary(mutant.end)
    {
        bail!(
            "{}: the worktree is not at the commit the mutant was found at",
            mutant.file
        );
    }
    let line_start = text[..mutant.start].rfind('\n').map_or(0, |p| p + 1);
    let line_end = text[mutant.end..]
        .find('\n')
        .map_or(text.len(), |p| mutant.end + p);
    let needle = text[line_start..line_end].to_owned();
    let replacement = format!(
        "{}{}{}",
        &text[line_start..mutant.start],
        mutant.with,
        &text[mutant.end..line_end]
    );
    if text.matches(needle.as_str()).count() != 1 {
        return Ok(None);
    }
    // Where the needle is found once, from the newest commit back.
    let mut earliest = n;
    while earliest > 1 {
        let at = output(&mut evidence::git(
            scratch,
            &[
                "show",
                &format!("{}:{}", commits[earliest - 1], mutant.file),
            ],
        ))
        .unwrap_or_default();
        if at.matches(needle.as_str()).count() != 1 {
            break;
        }
        earliest -= 1;
    }
    // k is drawn over the whole window first, and the mutant kept only if
    // its text is there from k on: drawing k within the mutant's own room
    // would put most regressions in the last few commits (code changes),
    // where a search from the bad end is cheapest.
    let k = if non_monotone {
        1 + rng.below(n - 3)
    } else {
        1 + rng.below(n - 1)
    };
    if earliest > k {
        return Ok(None);
    }
    // Killed alone, at the newest commit.
    std::fs::write(&path, mutant.apply(&text))?;
    let result = evidence::retest_all_in(scratch, Some(plain_target), retest_args, timeout, log);
    std::fs::write(&path, &text)?;
    run_ok(&mut evidence::git(scratch, &["clean", "-fdq"]))?;
    let retest = result?;
    if !retest.built {
        return Ok(None);
    }
    let kills: BTreeSet<TestId> = retest
        .outcomes
        .iter()
        .filter(|(id, o)| {
            o.as_str() != "ok"
                && o.as_str() != "ignored"
                && !id.0.contains("::doc/")
                && clean.outcomes.get(*id).is_some_and(|c| c == "ok")
        })
        .map(|(id, _)| id.clone())
        .collect();
    if pending
        .iter()
        .any(|p| kills.contains(&p.test) || (p.mutant.file == mutant.file && overlaps(p, &needle)))
    {
        return Ok(None);
    }
    let Some(test) = kills
        .iter()
        .find(|t| pending.iter().all(|p| !p.kills.contains(*t)))
        .cloned()
    else {
        return Ok(None);
    };
    let mut active = vec![false; n + 1];
    let placement = if non_monotone {
        let j = k + 1 + rng.below(n - k - 2);
        let m = j + 1 + rng.below(n - j);
        for (i, a) in active.iter_mut().enumerate() {
            *a = (k..j).contains(&i) || i >= m;
        }
        format!("{k}..{j}, {m}..")
    } else {
        for a in &mut active[k..] {
            *a = true;
        }
        format!("{k}..")
    };
    Ok(Some(Placed {
        mutant,
        needle,
        replacement,
        test,
        kills,
        active,
        placement,
    }))
}

/// Two mutants of one file must not touch the same lines.
fn overlaps(p: &Placed, needle: &str) -> bool {
    p.needle.contains(needle) || needle.contains(p.needle.as_str())
}

/// The chain: the window's commits, each rewritten (on the rewritten
/// parent) from the first where a mutant is active, with the mutants
/// active there applied. A branch `eval/chain-N` keeps it.
fn rewrite(
    scratch: &Path,
    commits: &[String],
    placed: &[Placed],
    chain_no: usize,
    out: &Path,
) -> Result<Vec<String>> {
    let index = out.join("chain-index");
    let git = |a: &[&str]| {
        let mut c = Command::new("git");
        c.arg("-C")
            .arg(scratch)
            .args(a)
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_AUTHOR_NAME", "eval")
            .env("GIT_AUTHOR_EMAIL", "eval@localhost")
            .env("GIT_COMMITTER_NAME", "eval")
            .env("GIT_COMMITTER_EMAIL", "eval@localhost");
        c
    };
    let mut chain: Vec<String> = Vec::new();
    for (i, commit) in commits.iter().enumerate() {
        let active: Vec<&Placed> = placed.iter().filter(|p| p.active[i]).collect();
        let rewritten_parent = i > 0 && chain[i - 1] != commits[i - 1];
        if active.is_empty() && !rewritten_parent {
            chain.push(commit.clone());
            continue;
        }
        run_ok(&mut git(&["read-tree", commit]))?;
        let files: BTreeSet<&str> = active.iter().map(|p| p.mutant.file.as_str()).collect();
        for file in files {
            let mut text = output(&mut git(&["show", &format!("{commit}:{file}")]))?;
            for p in active.iter().filter(|p| p.mutant.file == file) {
                if text.matches(p.needle.as_str()).count() != 1 {
                    bail!("{file} at {commit}: the mutant's text is not found once");
                }
                text = text.replacen(p.needle.as_str(), &p.replacement, 1);
            }
            let blob = hash_object(scratch, &text)?;
            let listing = output(&mut git(&["ls-tree", commit, "--", file]))?;
            let mode = listing.split_whitespace().next().context("no mode")?;
            run_ok(&mut git(&[
                "update-index",
                "--cacheinfo",
                &format!("{mode},{blob},{file}"),
            ]))?;
        }
        let tree = output(&mut git(&["write-tree"]))?;
        let subject = output(&mut git(&["log", "-1", "--format=%s", commit]))?;
        let message = format!(
            "{} [eval: {}]",
            subject.trim(),
            if active.is_empty() {
                "no mutant".to_owned()
            } else {
                active
                    .iter()
                    .map(|p| format!("{}:{}", p.mutant.file, p.mutant.line))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let mut command = git(&["commit-tree", tree.trim(), "-m", &message]);
        if i > 0 {
            command.args(["-p", &chain[i - 1]]);
        }
        chain.push(output(&mut command)?.trim().to_owned());
    }
    let _ = std::fs::remove_file(&index);
    run_ok(&mut git(&[
        "branch",
        "-f",
        &format!("eval/chain-{chain_no}"),
        chain.last().context("empty chain")?,
    ]))?;
    Ok(chain)
}

fn hash_object(scratch: &Path, text: &str) -> Result<String> {
    use std::io::Write;
    let mut child = evidence::git(scratch, &["hash-object", "-w", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(out.status.success(), "git hash-object failed");
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// A test's answer at each commit, from CI's reports.
fn truths(reports: &[Option<&Report>], test: &TestId) -> Vec<Truth> {
    reports
        .iter()
        .map(|report| {
            let Some(report) = report else {
                return Truth::Skip;
            };
            match report
                .in_scope()
                .find(|t| t.binary == test.0 && t.name == test.1)
            {
                None => Truth::Skip,
                Some(t) if !t.selected => Truth::Good,
                Some(t) => match t.outcome.as_deref() {
                    Some("passed") => Truth::Good,
                    Some(_) => Truth::Bad,
                    None => Truth::Skip,
                },
            }
        })
        .collect()
}

/// The latest regression point: the good commit nearest the bad end, and
/// the first bad commit after it (commits between them were skipped).
fn latest_point(truth: &[Truth]) -> Option<(usize, usize)> {
    if truth.last() != Some(&Truth::Bad) {
        return None;
    }
    let good = truth.iter().rposition(|t| *t == Truth::Good)?;
    let bad = good + 1 + truth[good + 1..].iter().position(|t| *t == Truth::Bad)?;
    Some((good, bad))
}

/// `git bisect run` with a plain `cargo test` of the one test.
fn git_bisect(args: &BisectEvalArgs, scratch: &Path, case: &Case, log: &Path) -> Result<Found> {
    let git = |a: &[&str]| evidence::git(scratch, a);
    let counter = args.project.out.join("git-bisect-builds");
    std::fs::write(&counter, "")?;
    let bad = case.chain.last().context("empty chain")?;
    evidence::checkout_clean(scratch, bad)?;
    run_ok(
        git(&["bisect", "start", bad, &case.chain[0], "--"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    // 125: cannot be judged (does not build, or the test is not there).
    const SCRIPT: &str = r#"
echo build >> "$EVAL_COUNTER"
git clean -fdq
cargo test $EVAL_TARGET --no-run -q >/dev/null 2>&1 || exit 125
out=$(timeout "$EVAL_TIMEOUT" cargo test $EVAL_TARGET -- --exact "$EVAL_NAME" 2>&1)
status=$?
printf '%s\n' "$out" | grep -F "test $EVAL_NAME ... " >&2
[ $status -eq 124 ] && exit 1
printf '%s\n' "$out" | grep -qxF "test $EVAL_NAME ... ok" && exit 0
printf '%s\n' "$out" | grep -qF "test $EVAL_NAME ... " && exit 1
exit 125
"#;
    let clock = Instant::now();
    let out = git(&["bisect", "run", "sh", "-c", SCRIPT])
        .env("EVAL_COUNTER", &counter)
        .env(
            "EVAL_TARGET",
            ekstazi_core::model::key::cargo_target_args(&case.test.0).join(" "),
        )
        .env("EVAL_NAME", &case.test.1)
        .env(
            "EVAL_TIMEOUT",
            args.project.timeout.as_secs().max(1).to_string(),
        )
        .env("CARGO_TARGET_DIR", args.project.out.join("target-plain"))
        .env("TMPDIR", evidence::private_tmp(scratch))
        .output()?;
    let wall = clock.elapsed().as_secs_f64();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, format!("== git bisect\n{text}").as_bytes())
        })?;
    run_ok(
        git(&["bisect", "reset"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let builds = std::fs::read_to_string(&counter)?.lines().count();
    let first_bad = text
        .lines()
        .find_map(|l| l.strip_suffix(" is the first bad commit"))
        .map(str::to_owned);
    let point = first_bad.and_then(|b| {
        let i = case.chain.iter().position(|c| *c == b)?;
        Some((case.chain[i.checked_sub(1)?].clone(), b))
    });
    Ok(Found {
        error: point
            .is_none()
            .then(|| "no single first bad commit".to_owned()),
        point,
        builds,
        test_runs: builds,
        wall,
    })
}

/// `cargo ekstazi bisect --json` on a state directory.
fn tool_bisect(
    ekstazi: &Path,
    scratch: &Path,
    state: &Path,
    case: &Case,
    search: &str,
    log: &Path,
) -> Result<Found> {
    let bad = case.chain.last().context("empty chain")?;
    evidence::checkout_clean(scratch, bad)?;
    let clock = Instant::now();
    let out = Command::new(ekstazi)
        .args([
            "ekstazi",
            "bisect",
            "--json",
            "--search",
            search,
            "--state-dir",
        ])
        .arg(state)
        .args(["--good", &case.chain[0], "--bad", bad])
        .arg(format!("{} {}", case.test.0, case.test.1))
        .current_dir(scratch)
        .env("TMPDIR", evidence::private_tmp(scratch))
        .output()?;
    let wall = clock.elapsed().as_secs_f64();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
        .and_then(|mut f| {
            std::io::Write::write_all(
                &mut f,
                format!(
                    "== cargo ekstazi bisect --search {search} ({})\n{}\n{}\n",
                    state.display(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
                .as_bytes(),
            )
        })?;
    let json: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(json) => json,
        Err(_) => {
            return Ok(Found {
                wall,
                error: Some(
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .last()
                        .unwrap_or("failed")
                        .to_owned(),
                ),
                ..Found::default()
            });
        }
    };
    let count = |key: &str| json[key].as_u64().unwrap_or(0) as usize;
    let point = json["regressions"].get(0).and_then(|r| {
        Some((
            r["good"].as_str()?.to_owned(),
            r["bad"].as_str()?.to_owned(),
        ))
    });
    Ok(Found {
        error: point.is_none().then(|| "no regression point".to_owned()),
        point,
        builds: count("builds"),
        test_runs: count("test_runs"),
        wall,
    })
}

/// `g → b` by index in the chain, `(latest)` when it is the latest point.
fn describe(case: &Case, point: Option<&(String, String)>) -> String {
    let Some((good, bad)) = point else {
        return "no point".to_owned();
    };
    let at = |c: &str| {
        case.chain
            .iter()
            .position(|x| x == c)
            .map_or_else(|| c[..c.len().min(8)].to_owned(), |i| i.to_string())
    };
    let latest = is_latest(case, point);
    format!(
        "{} → {}{}",
        at(good),
        at(bad),
        if latest {
            " (latest)"
        } else {
            " (NOT the latest)"
        }
    )
}

fn is_latest(case: &Case, point: Option<&(String, String)>) -> bool {
    let (Some((good, bad)), Some((g, b))) = (point, latest_point(&case.truth)) else {
        return false;
    };
    *good == case.chain[g] && *bad == case.chain[b]
}

fn write_results(
    args: &BisectEvalArgs,
    cases: &[Case],
    rows: &[(usize, Way, Found)],
) -> Result<()> {
    let mut csv = String::from(
        "case,kind,placement,binary,test,truth_good,truth_bad,distance,distance_bucket,way,search,history,good,bad,latest,builds,test_runs,wall_s,error\n",
    );
    for (c, way, f) in rows {
        let case = &cases[*c];
        let (g, b) = latest_point(&case.truth).unwrap_or((0, 0));
        let d = distance(case).unwrap_or(0);
        let index = |s: &str| {
            case.chain
                .iter()
                .position(|x| x == s)
                .map_or(String::new(), |i| i.to_string())
        };
        let _ = writeln!(
            csv,
            "{},{},\"{}\",{},\"{}\",{g},{b},{d},{},\"{}\",{},{},{},{},{},{},{},{:.1},\"{}\"",
            case.name,
            case.kind,
            case.placement,
            case.test.0,
            case.test.1,
            bucket(d),
            way.label(),
            way.search.as_deref().unwrap_or("git-bisect"),
            way.history,
            f.point.as_ref().map_or(String::new(), |p| index(&p.0)),
            f.point.as_ref().map_or(String::new(), |p| index(&p.1)),
            is_latest(case, f.point.as_ref()),
            f.builds,
            f.test_runs,
            f.wall,
            f.error.clone().unwrap_or_default().replace('"', "'")
        );
    }
    std::fs::write(args.project.out.join("bisect.csv"), csv)?;
    std::fs::write(
        args.project.out.join("summary.md"),
        summary(args, cases, rows),
    )?;
    Ok(())
}

/// The summary: per kind of regression and way, the latest point found and
/// the builds; then the same per distance of the latest point from the bad
/// end.
fn summary(args: &BisectEvalArgs, cases: &[Case], rows: &[(usize, Way, Found)]) -> String {
    let ways = ways(&args.searches);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "{} commits ending at {} of {}; {} regressions searched\n",
        args.commits + 1,
        args.from,
        super::replay::project_name(&args.project.repo),
        rows.len() / ways.len()
    );
    // One line: cases, latest found, builds, test runs, wall.
    let line = |chosen: &[(&Case, &Found)]| -> String {
        let latest = chosen
            .iter()
            .filter(|(c, f)| is_latest(c, f.point.as_ref()))
            .count();
        let builds: Vec<f64> = chosen.iter().map(|(_, f)| f.builds as f64).collect();
        let runs: Vec<f64> = chosen.iter().map(|(_, f)| f.test_runs as f64).collect();
        let walls: Vec<f64> = chosen.iter().map(|(_, f)| f.wall).collect();
        format!(
            "{} | {latest} ({:.0} %) | {:.1} / {:.1} / {:.0} | {:.1} / {:.1} | {:.1}s |",
            chosen.len(),
            stats::share(latest, chosen.len()),
            stats::mean(&builds),
            stats::median(&builds),
            stats::percentile(&builds, 90.0),
            stats::mean(&runs),
            stats::median(&runs),
            stats::mean(&walls)
        )
    };
    let chosen = |way: &Way, keep: &dyn Fn(&Case) -> bool| -> Vec<(&Case, &Found)> {
        rows.iter()
            .filter(|(c, w, _)| w == way && keep(&cases[*c]))
            .map(|(c, _, f)| (&cases[*c], f))
            .collect()
    };
    let header = "| cases | latest point found | builds (mean / median / P90) | test runs (mean / median) | wall (mean) |";
    let rule = "|---:|---:|---:|---:|---:|";
    let _ = writeln!(md, "| regressions | search {header}");
    let _ = writeln!(md, "|---|---{rule}");
    for kinds in [
        &["real", "monotone", "non-monotone"][..],
        &["real"],
        &["monotone"],
        &["non-monotone"],
    ] {
        for way in &ways {
            let chosen = chosen(way, &|c| kinds.contains(&c.kind.as_str()));
            if chosen.is_empty() {
                continue;
            }
            let _ = writeln!(
                md,
                "| {} | {} | {}",
                if kinds.len() > 1 { "all" } else { kinds[0] },
                way.label(),
                line(&chosen)
            );
        }
    }
    let _ = writeln!(
        md,
        "\nBy the distance of the latest point from the bad end (commits from its good commit to the bad end; 1: the bad end itself broke):\n"
    );
    let _ = writeln!(md, "| distance | search {header}");
    let _ = writeln!(md, "|---|---{rule}");
    for (lo, hi, name) in DISTANCES {
        for way in &ways {
            let chosen = chosen(way, &|c| {
                distance(c).is_some_and(|d| (lo..=hi).contains(&d))
            });
            if chosen.is_empty() {
                continue;
            }
            let _ = writeln!(md, "| {name} | {} | {}", way.label(), line(&chosen));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use Truth::*;

    #[test]
    fn the_latest_point_is_nearest_the_bad_end() {
        assert_eq!(
            latest_point(&[Good, Bad, Good, Good, Bad, Bad]),
            Some((3, 4))
        );
        assert_eq!(
            latest_point(&[Good, Bad, Good, Skip, Skip, Bad]),
            Some((2, 5))
        );
        assert_eq!(latest_point(&[Good, Bad, Bad, Good]), None);
        assert_eq!(latest_point(&[Bad, Bad]), None);
    }

    #[test]
    fn the_summary_gives_each_search_its_p90_and_its_distances() {
        let args = BisectEvalArgs {
            project: evidence::Project {
                repo: PathBuf::from("/x/hexyl"),
                out: PathBuf::from("/x/out"),
                cargo_args: Vec::new(),
                timeout: Duration::from_secs(1),
                ekstazi: Some(PathBuf::from("cargo-ekstazi")),
            },
            from: "HEAD".to_owned(),
            commits: 5,
            regressions: 2,
            per_chain: 1,
            seed: 1,
            sources: Vec::new(),
            resume: false,
            searches: SEARCHES.map(str::to_owned).into(),
        };
        let chain: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
        let case = |name: &str, truth: Vec<Truth>| Case {
            name: name.to_owned(),
            kind: "monotone".to_owned(),
            test: ("t".to_owned(), "n".to_owned()),
            chain: chain.clone(),
            truth,
            placement: String::new(),
            state: PathBuf::new(),
        };
        // The latest points: 4 → 5 (1 back) and 1 → 2 (4 back).
        let cases = [
            case("near", vec![Good, Good, Good, Good, Good, Bad]),
            case("far", vec![Good, Good, Bad, Bad, Bad, Bad]),
        ];
        let found = |g: &str, b: &str, builds| Found {
            point: Some((g.to_owned(), b.to_owned())),
            builds,
            ..Found::default()
        };
        let mut rows = Vec::new();
        for (c, right) in [(0, ("c4", "c5")), (1, ("c1", "c2"))] {
            for (i, way) in ways(&args.searches).into_iter().enumerate() {
                // git bisect misses the far one; the others find both.
                let f = if i == 0 && c == 1 {
                    found("c0", "c1", 3)
                } else {
                    found(right.0, right.1, i)
                };
                rows.push((c, way, f));
            }
        }
        let md = summary(&args, &cases, &rows);
        assert!(md.contains("builds (mean / median / P90)"), "{md}");
        assert!(
            md.contains("| all | git bisect run | 2 | 1 (50 %) | 1.5 / 1.5 / 3 |"),
            "{md}"
        );
        assert!(
            md.contains("| all | multiplying-binary, no history | 2 | 2 (100 %) | 2.0 / 2.0 / 2 |"),
            "{md}"
        );
        assert!(
            md.contains("| 4–7 | git bisect run | 1 | 0 (0 %) |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | binary, CI history | 1 | 1 (100 %) |"),
            "{md}"
        );
        assert!(!md.contains("| 2–3 |"), "no case is 2–3 back: {md}");
    }

    #[test]
    fn distances_fall_in_the_multiplying_probes_buckets() {
        let names: Vec<&str> = [1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 500].map(bucket).into();
        assert_eq!(
            names,
            [
                "1", "2–3", "2–3", "4–7", "4–7", "8–15", "8–15", "16–31", "16–31", "32+", "32+"
            ]
        );
    }
}
