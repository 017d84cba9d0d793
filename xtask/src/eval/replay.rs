//! `cargo xtask eval replay`: replays a real project's first-parent history
//! and measures, at every commit, what cargo-ekstazi selects against running
//! everything with `cargo test` — and checks safety: every test whose
//! outcome under `cargo test` changed since the previous commit that built
//! must have been selected.
//!
//! Per commit and granularity it records tests available, tests selected
//! and why, build, test and end-to-end times of both, the test executables
//! whose content the commit changed (what the selection's cost is measured
//! against), and misses. A missed test runs again alone under `cargo test`
//! at the same commit: when its previous outcome comes back, the miss is
//! counted "not reproduced", a change the run made and not the commit. Each
//! granularity has its own state directory and target directory (binary
//! granularity would otherwise reuse the build `cargo test` just made and
//! look free), so every side pays for its own incremental build. Output in
//! `<out>`: `replay-<granularity>.csv`, `summary.md`, `replay.svg`, the
//! reports of every run under `reports/`, logs under `logs/`, and a file
//! per miss under `misses/`.
//!
//! `--pull-request` replays a pull request's job at every commit: the
//! timed run is `--no-record`, on the state recorded at the commit before
//! (the base branch's), and a recording run then records the commit, as
//! the base branch's push would, its time reported apart.

use super::evidence::{
    self, EkstaziOpts, EkstaziRun, Report, ReportTest, RetestAll, RunMode, TestId,
};
use super::replay_rows::{Row, summary_table, time_table, write_csv};
use crate::common::process::output;
use anyhow::Result;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How many times a missed test runs again alone, to tell a change of
/// outcome the commit made from one the run made.
const RERUNS: usize = 3;

/// `eval replay`'s options, with `--graph` those of `graph_replay` too
/// (which takes them through [`super::graph_replay::GraphArgs::from_replay`]).
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Commits to replay (after one to start from); with --graph, the
    /// whole window, the commits that only start the state included
    #[arg(long, default_value_t = 20)]
    pub commits: usize,
    /// The newest commit to replay
    #[arg(long, default_value = "HEAD")]
    pub from: String,
    /// Granularities to measure, comma-separated [default:
    /// function,binary; with --graph, function]
    #[arg(long, value_delimiter = ',')]
    pub granularity: Vec<String>,
    /// Replay every commit of the window in topological order, merges
    /// and their branches alike, with the history carried, and compare
    /// at merges, reverts and cherry-picks what the history paper's options
    /// select (linearisation, S¹, Sᵏ, S⁰) with the tool
    #[arg(long)]
    pub graph: bool,
    /// Run `cargo ekstazi test --verdict-first`: time the wait for the
    /// verdicts, and wait for the recording in the background before
    /// the next commit (its time reported apart)
    #[arg(long, conflicts_with = "graph")]
    pub verdict_first: bool,
    /// A pull request's job at every commit: `cargo ekstazi test
    /// --no-record` timed on the state recorded at the commit before;
    /// then a recording run records the commit (reported apart)
    #[arg(long, conflicts_with_all = ["graph", "verdict_first"])]
    pub pull_request: bool,
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    #[command(flatten)]
    pub project: evidence::Project,
}

impl ReplayArgs {
    /// The project resolved, and the granularities measured when none is
    /// given.
    pub fn resolve(self) -> Result<Self> {
        let project = self.project.resolve(true)?;
        let granularity = if self.granularity.is_empty() {
            vec!["function".into(), "binary".into()]
        } else {
            self.granularity
        };
        Ok(ReplayArgs {
            project,
            granularity,
            ..self
        })
    }

    /// How the timed run runs: `--verdict-first` (its time is the wait for
    /// the verdicts, and its recording in the background is waited for
    /// before the next commit and reported apart), or `--no-record` as a
    /// pull request's job: the timed run records nothing, on the state
    /// recorded at the commit before (as the base branch's CI left it); a
    /// recording run then records the commit, as the base branch's next
    /// push would, untimed and reported apart.
    fn mode(&self) -> RunMode {
        match (self.verdict_first, self.pull_request) {
            (true, _) => RunMode::VerdictFirst,
            (_, true) => RunMode::NoRecord,
            _ => RunMode::Record,
        }
    }
}

pub fn replay(args: &ReplayArgs) -> Result<()> {
    let (ekstazi, scratch) = args.project.scratch_setup()?;
    let commits = first_parents(args, &scratch)?;
    let mut replay = Replay::new(args, &commits, &ekstazi, &scratch)?;
    for i in 0..commits.len() {
        if replay.commit(i)? {
            // Write the results so far: a long replay can be read (and
            // plotted) while it runs.
            write_results(
                args,
                &replay.rows,
                &replay.not_built,
                &replay.ekstazi_failed,
                i,
            )?;
        }
    }
    let summary = std::fs::read_to_string(args.project.out.join("summary.md"))?;
    print!("{summary}");
    Ok(())
}

/// The commits to replay, oldest first: `--commits` of `--from`'s first
/// parents and the one to start from.
fn first_parents(args: &ReplayArgs, scratch: &Path) -> Result<Vec<String>> {
    let listing = output(
        Command::new("git")
            .arg("-C")
            .arg(scratch)
            .args(["rev-list", "--first-parent", "-n"])
            .arg((args.commits + 1).to_string())
            .arg(&args.from),
    )?;
    let mut commits: Vec<String> = listing.lines().map(str::to_owned).collect();
    commits.reverse();
    Ok(commits)
}

/// One replay as it goes: the commits and the tool, and what the commits
/// replayed so far leave to the next ones (per granularity, the outcomes
/// the safety check compares with and the test executables' digests), the
/// rows and what did not build or run.
struct Replay<'a> {
    args: &'a ReplayArgs,
    commits: &'a [String],
    ekstazi: &'a Path,
    scratch: &'a Path,
    logs: PathBuf,
    reports: PathBuf,
    rows: HashMap<String, Vec<Row>>,
    /// Per granularity, the retest-all outcomes at the commit its state was
    /// last recorded at (a commit whose run failed recorded nothing).
    previous: HashMap<String, HashMap<TestId, String>>,
    /// Per granularity, the test executables' digests at that commit.
    binaries_before: HashMap<String, HashMap<String, blake3::Hash>>,
    not_built: Vec<String>,
    ekstazi_failed: Vec<String>,
}

/// The commit being replayed, and what `cargo test` did there.
struct Commit<'c> {
    i: usize,
    hash: &'c str,
    short: &'c str,
    subject: &'c str,
    retest: RetestAll,
}

/// One granularity's run at a commit: its state directory, and the stem of
/// its files' names under `reports/` and `logs/`.
struct Side<'g> {
    granularity: &'g str,
    state: PathBuf,
    stem: String,
}

impl<'a> Replay<'a> {
    fn new(
        args: &'a ReplayArgs,
        commits: &'a [String],
        ekstazi: &'a Path,
        scratch: &'a Path,
    ) -> Result<Self> {
        eprintln!(
            "replaying {} commits (+1 to start from) of {}",
            commits.len() - 1,
            args.project.repo.display()
        );
        let reports = args.project.out.join("reports");
        std::fs::create_dir_all(&reports)?;
        Ok(Replay {
            args,
            commits,
            ekstazi,
            scratch,
            logs: args.project.out.join("logs"),
            reports,
            rows: HashMap::new(),
            previous: HashMap::new(),
            binaries_before: HashMap::new(),
            not_built: Vec::new(),
            ekstazi_failed: Vec::new(),
        })
    }

    /// Replays commit `i`: `cargo test`, then each granularity's run. False
    /// when the commit did not build: nothing new to write then.
    fn commit(&mut self, i: usize) -> Result<bool> {
        let hash = &self.commits[i];
        let line = evidence::checkout_headline(self.scratch, hash)?;
        let (short, subject) = line.split_once(' ').unwrap_or((&line, ""));
        eprintln!("[{i}/{}] {short} {subject}", self.commits.len() - 1);
        let Some(retest) = self.retest(i, short)? else {
            return Ok(false);
        };
        let at = Commit {
            i,
            hash,
            short,
            subject,
            retest,
        };
        let args = self.args;
        for granularity in &args.granularity {
            self.granularity(&at, granularity)?;
        }
        Ok(true)
    }

    /// `cargo test` at commit `i`; `None` when it did not build.
    fn retest(&mut self, i: usize, short: &str) -> Result<Option<RetestAll>> {
        let project = &self.args.project;
        let retest = evidence::retest_all(
            self.scratch,
            &project.cargo_args,
            project.timeout,
            &self.logs.join(format!("{i:03}-{short}-cargo-test.log")),
        )?;
        if !retest.built {
            eprintln!("  does not build: skipped");
            if i > 0 {
                self.not_built.push(short.to_owned());
            }
            return Ok(None);
        }
        Ok(Some(retest))
    }

    /// `granularity`'s run at the commit: the tool, the safety check, the
    /// row; then what the next commit compares with.
    fn granularity(&mut self, at: &Commit, granularity: &str) -> Result<()> {
        let side = Side {
            granularity,
            state: self.args.project.out.join(format!("state-{granularity}")),
            stem: format!("{:03}-{}-{granularity}", at.i, at.short),
        };
        let run = self.run_tool(at, &side)?;
        let Some(report) = &run.report else {
            eprintln!("  {granularity}: cargo ekstazi test failed and wrote no report (see logs)");
            if at.i > 0 {
                self.ekstazi_failed
                    .push(format!("{} ({granularity})", at.short));
            }
            return Ok(());
        };
        let selected = report.selected();
        let digests = evidence::binary_digests(report);
        let safety = self.safety(at, &side, report, &selected)?;
        let binaries = [digests.len(), self.binaries_changed(granularity, &digests)];
        let row = row(at, &run, report, &selected, &safety, binaries);
        print_progress(granularity, &row);
        if at.i > 0 {
            self.rows
                .entry(granularity.to_owned())
                .or_default()
                .push(row);
        }
        // The next commit is compared with the outcome a test had
        // before a change its reruns did not reproduce: else the
        // flaky outcome's return counts as a miss of its own (a tail
        // timing test on coreutils went ok, FAILED under load, ok).
        let mut outcomes = at.retest.outcomes.clone();
        outcomes.extend(safety.flaky);
        self.previous.insert(granularity.to_owned(), outcomes);
        self.binaries_before.insert(granularity.to_owned(), digests);
        Ok(())
    }

    /// `cargo ekstazi test` at the commit, in the granularity's own state
    /// and target directory, timed as `--verdict-first` or
    /// `--pull-request` asks. With `--pull-request` a recording run then
    /// records the commit (its time the run's `recording`), and at the
    /// first commit, the base of the next, only that run runs.
    fn run_tool(&self, at: &Commit, side: &Side) -> Result<EkstaziRun> {
        let project = &self.args.project;
        let target = project.out.join(format!("target-{}", side.granularity));
        let report_path = self.reports.join(format!("{}.json", side.stem));
        let opts = EkstaziOpts {
            ekstazi: self.ekstazi,
            dir: self.scratch,
            state: &side.state,
            granularity: side.granularity,
            cargo_args: &project.cargo_args,
            target_dir: Some(&target),
            log: &self.logs.join(format!("{}.log", side.stem)),
            report: &report_path,
            timeout: project.timeout,
            mode: self.args.mode(),
        };
        // The first commit only records: it is the base of the next.
        let timed = match (self.args.pull_request, at.i) {
            (true, 0) => None,
            _ => Some(evidence::ekstazi_test(&opts)?),
        };
        Ok(match (self.args.pull_request, timed) {
            (true, timed) => {
                let record_report = self.reports.join(format!("{}-record.json", side.stem));
                let record_log = self.logs.join(format!("{}-record.log", side.stem));
                let recorded = evidence::ekstazi_test(&EkstaziOpts {
                    mode: RunMode::Record,
                    report: &record_report,
                    log: &record_log,
                    ..opts
                })?;
                match timed {
                    Some(mut timed) => {
                        timed.recording = recorded.wall;
                        timed
                    }
                    None => recorded,
                }
            }
            (false, timed) => timed.expect("timed unless a pull request's base"),
        })
    }

    /// The safety check of the run (see [`check_safety`]), a missed test
    /// run again alone under `cargo test`; each miss reported under
    /// `misses/`.
    fn safety(
        &self,
        at: &Commit,
        side: &Side,
        report: &Report,
        selected: &HashMap<TestId, &ReportTest>,
    ) -> Result<Safety> {
        let project = &self.args.project;
        let rerun_log = self.logs.join(format!("{}-rerun.log", side.stem));
        let safety = check_safety(
            self.previous.get(side.granularity),
            &at.retest.outcomes,
            |id| selected.contains_key(id) || !report.knows(id),
            |id| {
                evidence::rerun_alone(
                    self.scratch,
                    &project.cargo_args,
                    id,
                    RERUNS,
                    project.timeout,
                    &rerun_log,
                )
                .unwrap_or_else(|e| vec![format!("not run again ({e})")])
            },
        );
        for miss in &safety.flagged {
            let detail = format!(
                "commit {} ({}), granularity {}: {}",
                at.hash, at.subject, side.granularity, miss.detail
            );
            evidence::report_miss(
                &project.out.join("misses"),
                &format!("{}-{}", at.short, side.granularity),
                &side.state,
                &miss.id,
                &detail,
            )?;
        }
        Ok(safety)
    }

    /// Of the test executables `digests` lists, those that differ in
    /// content from `granularity`'s at the commit before (new ones
    /// included).
    fn binaries_changed(
        &self,
        granularity: &str,
        digests: &HashMap<String, blake3::Hash>,
    ) -> usize {
        digests
            .iter()
            .filter(|(key, digest)| {
                self.binaries_before
                    .get(granularity)
                    .and_then(|before| before.get(*key))
                    != Some(*digest)
            })
            .count()
    }
}

/// The row of one granularity's run at a commit; `binaries`: the test
/// executables the run listed, and how many of them changed.
fn row(
    at: &Commit,
    run: &EkstaziRun,
    report: &Report,
    selected: &HashMap<TestId, &ReportTest>,
    safety: &Safety,
    [binaries, binaries_changed]: [usize; 2],
) -> Row {
    let retest = &at.retest;
    let ekstazi_only_failures = selected
        .iter()
        .filter(|(id, t)| {
            t.outcome.as_deref().is_some_and(|o| o != "passed")
                && retest.outcomes.get(*id).is_some_and(|o| o == "ok")
        })
        .count();
    Row {
        commit: at.short.to_owned(),
        subject: at.subject.to_owned(),
        tests: report.in_scope().count(),
        selected: selected.len(),
        retest_build: retest.build,
        retest_test: retest.tests,
        retest_doctests: retest.doctests,
        ekstazi_total: run.wall,
        ekstazi_build: report.timing("build"),
        ekstazi_selection: report.selection_cost(),
        ekstazi_run: report.timing("run"),
        ekstazi_recording: run.recording,
        changed_outcomes: safety.changed,
        misses: safety.misses,
        misses_not_reproduced: safety.not_reproduced,
        binaries,
        binaries_changed,
        ekstazi_only_failures,
        reasons: evidence::format_kinds(&report.reason_kinds()),
    }
}

/// The line each granularity's run at a commit ends with.
fn print_progress(granularity: &str, row: &Row) {
    let (misses, not_reproduced) = (row.misses, row.misses_not_reproduced);
    eprintln!(
        "  {granularity}: {}/{} selected ({:.1}%), {:.1}s vs cargo test {:.1}s, selection {:.2}s, {} of {} test executables changed{}",
        row.selected,
        row.tests,
        row.share(),
        row.ekstazi_total,
        row.retest_total(),
        row.ekstazi_selection,
        row.binaries_changed,
        row.binaries,
        if misses > 0 {
            format!(", {misses} MISSES ({not_reproduced} not reproduced alone)")
        } else {
            String::new()
        }
    );
}

/// A change of outcome the tool did not select for.
struct Miss {
    id: TestId,
    /// What changed, and what its reruns alone gave.
    detail: String,
}

/// The safety check of one commit.
#[derive(Default)]
struct Safety {
    /// Changes of outcome the tool did not select for.
    misses: usize,
    /// Of those, the ones whose reruns alone brought the previous outcome
    /// back.
    not_reproduced: usize,
    /// Tests whose outcome changed (new tests aside).
    changed: usize,
    flagged: Vec<Miss>,
    /// The outcome before, of each change its reruns did not reproduce:
    /// the run's, not the commit's.
    flaky: Vec<(TestId, String)>,
}

/// Safety: every test whose retest-all outcome changed since the previous
/// commit that built (or that is new) must have been selected. `covered`:
/// the tool selected the test, or does not know it (not in its scope);
/// `rerun`: the outcomes of the test run again alone.
fn check_safety(
    previous: Option<&HashMap<TestId, String>>,
    outcomes: &HashMap<TestId, String>,
    covered: impl Fn(&TestId) -> bool,
    mut rerun: impl FnMut(&TestId) -> Vec<String>,
) -> Safety {
    let mut safety = Safety::default();
    let Some(previous) = previous else {
        return safety;
    };
    for (id, outcome) in outcomes {
        if outcome == "ignored" {
            continue;
        }
        let before = previous.get(id);
        if before.is_some_and(|b| b == outcome) {
            continue;
        }
        safety.changed += usize::from(before.is_some());
        if covered(id) {
            continue;
        }
        safety.misses += 1;
        let again = rerun(id);
        let came_back = before.is_some_and(|b| again.contains(b));
        if let (true, Some(before)) = (came_back, before) {
            safety.not_reproduced += 1;
            safety.flaky.push((id.clone(), before.clone()));
        }
        let detail = format!(
            "went {} -> {outcome} under cargo test but cargo-ekstazi did not select it\nrun again alone under cargo test at this commit, {RERUNS} times: {}{}",
            before.map_or("(new)", String::as_str),
            again.join(", "),
            if came_back {
                " (its previous outcome came back: not reproduced)"
            } else {
                ""
            }
        );
        safety.flagged.push(Miss {
            id: id.clone(),
            detail,
        });
    }
    safety
}

fn write_results(
    args: &ReplayArgs,
    rows: &HashMap<String, Vec<Row>>,
    not_built: &[String],
    ekstazi_failed: &[String],
    done: usize,
) -> Result<()> {
    let name = project_name(&args.project.repo);
    let mut summary = String::new();
    writeln!(
        summary,
        "## {name}: {done} commits replayed, first parent, ending at `{}`\n",
        args.from
    )?;
    writeln!(
        summary,
        "Cargo options: `{}`. Commits that did not build (skipped): {}{}. cargo-ekstazi runs that failed: {}{}.\n",
        args.project.cargo_args.join(" "),
        not_built.len(),
        list_in_parens(not_built),
        ekstazi_failed.len(),
        list_in_parens(ekstazi_failed),
    )?;
    summary.push_str(&summary_table(&args.granularity, rows));
    summary.push('\n');
    summary.push_str(&time_table(&args.granularity, rows));
    summary.push('\n');
    // Per commit, side by side.
    let first = args.granularity.first().and_then(|g| rows.get(g));
    if let Some(first) = first {
        write!(summary, "| commit | subject | tests |")?;
        for g in &args.granularity {
            write!(summary, " {g} |")?;
        }
        writeln!(
            summary,
            " cargo test | changed outcomes | reasons ({}) |",
            args.granularity[0]
        )?;
        write!(summary, "|---|---|---:|")?;
        for _ in &args.granularity {
            write!(summary, "---:|")?;
        }
        writeln!(summary, "---:|---:|---|")?;
        for row in first {
            write!(
                summary,
                "| `{}` | {} | {} |",
                row.commit,
                row.subject.replace('|', "\\|"),
                row.tests
            )?;
            for g in &args.granularity {
                match rows
                    .get(g)
                    .and_then(|r| r.iter().find(|r| r.commit == row.commit))
                {
                    Some(r) => write!(
                        summary,
                        " {} ({:.1}%), {:.1}s = {:.0}%{} |",
                        r.selected,
                        r.share(),
                        r.ekstazi_total,
                        100.0 * r.ekstazi_total / r.retest_total(),
                        match r.ekstazi_recording {
                            t if t >= 0.05 => format!(", then {t:.1}s recording"),
                            _ => String::new(),
                        }
                    )?,
                    None => write!(summary, " — |")?,
                }
            }
            writeln!(
                summary,
                " {:.1}s | {} | {} |",
                row.retest_total(),
                row.changed_outcomes,
                row.reasons
            )?;
        }
    }
    std::fs::write(args.project.out.join("summary.md"), &summary)?;
    for granularity in &args.granularity {
        let rows = rows.get(granularity).map(Vec::as_slice).unwrap_or(&[]);
        write_csv(
            &args.project.out.join(format!("replay-{granularity}.csv")),
            rows,
        )?;
    }
    let series: Vec<(String, Vec<Row>)> = args
        .granularity
        .iter()
        .map(|g| (g.clone(), rows.get(g).cloned().unwrap_or_default()))
        .collect();
    if series.iter().any(|(_, r)| !r.is_empty()) {
        super::plot::replay_svg(&args.project.out.join("replay.svg"), &name, &series)?;
    }
    Ok(())
}

fn list_in_parens(items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!(" ({})", items.join(", "))
    }
}

/// The project's name from its repository path (`.../owner+name/repo`, or
/// the directory's name).
pub fn project_name(repo: &Path) -> String {
    let mut parts = repo
        .components()
        .rev()
        .filter_map(|c| c.as_os_str().to_str());
    let last = parts.next().unwrap_or("project");
    if (last == "repo" || last == ".git")
        && let Some(parent) = parts.next()
    {
        return parent.rsplit('+').next().unwrap_or(parent).to_owned();
    }
    last.trim_end_matches(".git").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_names() {
        assert_eq!(
            project_name(Path::new("/m/BurntSushi+ripgrep/repo")),
            "ripgrep"
        );
        assert_eq!(project_name(Path::new("/x/fd")), "fd");
    }

    fn outcomes(list: &[(&str, &str)]) -> HashMap<TestId, String> {
        list.iter()
            .map(|(test, outcome)| (("b".to_owned(), (*test).to_owned()), (*outcome).to_owned()))
            .collect()
    }

    #[test]
    fn a_flaky_outcome_that_returns_is_no_miss_of_its_own() {
        let skipped = |_: &TestId| false;
        // Commit 1: `tail` fails under load, and passes again alone.
        let before = outcomes(&[("tail", "ok"), ("cut", "ok")]);
        let now = outcomes(&[("tail", "FAILED"), ("cut", "ok")]);
        let first = check_safety(Some(&before), &now, skipped, |_| vec!["ok".to_owned()]);
        assert_eq!((first.misses, first.not_reproduced), (1, 1));
        let mut next_before = now.clone();
        next_before.extend(first.flaky);
        // Commit 2: it passes, as its record says: nothing to flag.
        let later = outcomes(&[("tail", "ok"), ("cut", "ok")]);
        let second = check_safety(Some(&next_before), &later, skipped, |_| unreachable!());
        assert_eq!((second.misses, second.changed), (0, 0));
        // A failure the reruns keep is flagged at every commit it lasts.
        let kept = check_safety(Some(&before), &now, skipped, |_| vec!["FAILED".to_owned()]);
        assert_eq!((kept.misses, kept.not_reproduced), (1, 0));
        assert!(kept.flaky.is_empty());
        let selected = check_safety(Some(&before), &now, |_| true, |_| unreachable!());
        assert_eq!((selected.misses, selected.changed), (0, 1));
    }
}
