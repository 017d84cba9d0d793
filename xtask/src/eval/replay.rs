//! `cargo xtask eval replay`: replays a real project's first-parent history
//! and measures, at every commit, what cargo-ekstazi selects against running
//! everything with `cargo test` — and checks safety: every test whose
//! outcome under `cargo test` changed since the previous commit that built
//! must have been selected.
//!
//! Per commit and granularity it records tests available, tests selected
//! and why, build, test and end-to-end times of both, and misses. Each
//! granularity has its own state directory and target directory (binary
//! granularity would otherwise reuse the build `cargo test` just made and
//! look free), so every side pays for its own incremental build. Output in
//! `<out>`: `replay-<granularity>.csv`, `summary.md`, `replay.svg`, the
//! reports of every run under `reports/`, logs under `logs/`, and a file
//! per miss under `misses/`.

use super::evidence::{self, EkstaziOpts, TestId};
use crate::common::process::output;
use crate::common::stats;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

pub struct ReplayArgs {
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    pub project: evidence::Project,
    pub commits: usize,
    pub from: String,
    pub granularities: Vec<String>,
}

/// One commit's measurements for one granularity.
#[derive(Clone, Debug)]
pub struct Row {
    pub commit: String,
    pub subject: String,
    pub tests: usize,
    pub selected: usize,
    /// Seconds of `cargo test --no-run`.
    pub retest_build: f64,
    /// Seconds of `cargo test` without its doctests.
    pub retest_test: f64,
    pub retest_doctests: f64,
    /// Wall-clock seconds of `cargo ekstazi test`.
    pub ekstazi_total: f64,
    pub ekstazi_build: f64,
    pub ekstazi_selection: f64,
    pub ekstazi_run: f64,
    /// Tests whose retest-all outcome differs from the previous commit's.
    pub changed_outcomes: usize,
    pub misses: usize,
    /// Selected tests that failed under cargo-ekstazi but passed under
    /// `cargo test` (flaky when run one per process).
    pub ekstazi_only_failures: usize,
    pub reasons: String,
}

impl Row {
    pub fn share(&self) -> f64 {
        stats::share(self.selected, self.tests)
    }

    /// `cargo test` end to end, doctests left out (the evaluation runs
    /// `cargo ekstazi test --no-doc`).
    pub fn retest_total(&self) -> f64 {
        self.retest_build + self.retest_test
    }
}

pub const CSV_HEADER: &str = "commit,subject,tests,selected,share,retest_build_s,retest_test_s,retest_doctests_s,ekstazi_total_s,ekstazi_build_s,ekstazi_selection_s,ekstazi_run_s,changed_outcomes,misses,ekstazi_only_failures,reasons";

pub fn replay(args: &ReplayArgs) -> Result<()> {
    let (ekstazi, scratch) = evidence::scratch_setup(
        &args.project.out,
        Some(&args.project.ekstazi),
        &args.project.repo,
    )?;
    let listing = output(
        Command::new("git")
            .arg("-C")
            .arg(&scratch)
            .args(["rev-list", "--first-parent", "-n"])
            .arg((args.commits + 1).to_string())
            .arg(&args.from),
    )?;
    let mut commits: Vec<String> = listing.lines().map(str::to_owned).collect();
    commits.reverse();
    eprintln!(
        "replaying {} commits (+1 to start from) of {}",
        commits.len() - 1,
        args.project.repo.display()
    );

    let mut rows: HashMap<String, Vec<Row>> = HashMap::new();
    // Per granularity, the retest-all outcomes at the commit its state was
    // last recorded at (a commit whose run failed recorded nothing).
    let mut previous: HashMap<String, HashMap<TestId, String>> = HashMap::new();
    let mut not_built: Vec<String> = Vec::new();
    let mut ekstazi_failed: Vec<String> = Vec::new();
    let logs = args.project.out.join("logs");
    let reports = args.project.out.join("reports");
    std::fs::create_dir_all(&reports)?;
    for (i, commit) in commits.iter().enumerate() {
        evidence::checkout_clean(&scratch, commit)?;
        let line = output(&mut evidence::git(
            &scratch,
            &["log", "-1", "--format=%h %s"],
        ))?;
        let (short, subject) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        eprintln!("[{i}/{}] {short} {subject}", commits.len() - 1);

        let retest = evidence::retest_all(
            &scratch,
            &args.project.cargo_args,
            args.project.timeout,
            &logs.join(format!("{i:03}-{short}-cargo-test.log")),
        )?;
        if !retest.built {
            eprintln!("  does not build: skipped");
            if i > 0 {
                not_built.push(short.to_owned());
            }
            continue;
        }

        for granularity in &args.granularities {
            let state = args.project.out.join(format!("state-{granularity}"));
            let target = args.project.out.join(format!("target-{granularity}"));
            let report_path = reports.join(format!("{i:03}-{short}-{granularity}.json"));
            let run = evidence::ekstazi_test(&EkstaziOpts {
                ekstazi: &ekstazi,
                dir: &scratch,
                state: &state,
                granularity,
                cargo_args: &args.project.cargo_args,
                target_dir: Some(&target),
                log: &logs.join(format!("{i:03}-{short}-{granularity}.log")),
                report: &report_path,
                timeout: args.project.timeout,
            })?;
            let Some(report) = run.report else {
                eprintln!(
                    "  {granularity}: cargo ekstazi test failed and wrote no report (see logs)"
                );
                if i > 0 {
                    ekstazi_failed.push(format!("{short} ({granularity})"));
                }
                continue;
            };
            let selected = report.selected();

            // Safety: every test whose retest-all outcome changed since the
            // previous commit that built (or that is new) must have been
            // selected.
            let mut misses = 0;
            let mut changed = 0;
            if let Some(previous) = previous.get(granularity) {
                for (id, outcome) in &retest.outcomes {
                    if outcome == "ignored" {
                        continue;
                    }
                    let before = previous.get(id);
                    if before.is_some_and(|b| b == outcome) {
                        continue;
                    }
                    changed += usize::from(before.is_some());
                    if !selected.contains_key(id) && report.knows(id) {
                        misses += 1;
                        let detail = format!(
                            "commit {commit} ({subject}), granularity {granularity}: went {} -> {outcome} under cargo test but cargo-ekstazi did not select it",
                            before.map_or("(new)", String::as_str)
                        );
                        evidence::report_miss(
                            &args.project.out.join("misses"),
                            &format!("{short}-{granularity}"),
                            &state,
                            id,
                            &detail,
                        )?;
                    }
                }
            }
            let ekstazi_only_failures = selected
                .iter()
                .filter(|(id, t)| {
                    t.outcome.as_deref().is_some_and(|o| o != "passed")
                        && retest.outcomes.get(*id).is_some_and(|o| o == "ok")
                })
                .count();
            let row = Row {
                commit: short.to_owned(),
                subject: subject.to_owned(),
                tests: report.in_scope().count(),
                selected: selected.len(),
                retest_build: retest.build,
                retest_test: retest.tests,
                retest_doctests: retest.doctests,
                ekstazi_total: run.wall,
                ekstazi_build: report.timing("build"),
                ekstazi_selection: report.selection_cost(),
                ekstazi_run: report.timing("run"),
                changed_outcomes: changed,
                misses,
                ekstazi_only_failures,
                reasons: evidence::format_kinds(&report.reason_kinds()),
            };
            eprintln!(
                "  {granularity}: {}/{} selected ({:.1}%), {:.1}s vs cargo test {:.1}s{}",
                row.selected,
                row.tests,
                row.share(),
                row.ekstazi_total,
                row.retest_total(),
                if misses > 0 {
                    format!(", {misses} MISSES")
                } else {
                    String::new()
                }
            );
            if i > 0 {
                rows.entry(granularity.clone()).or_default().push(row);
            }
            previous.insert(granularity.clone(), retest.outcomes.clone());
        }
        // Write the results so far: a long replay can be read (and
        // plotted) while it runs.
        write_results(args, &rows, &not_built, &ekstazi_failed, i)?;
    }
    let summary = std::fs::read_to_string(args.project.out.join("summary.md"))?;
    print!("{summary}");
    Ok(())
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
    summary.push_str(&summary_table(&args.granularities, rows));
    summary.push('\n');
    summary.push_str(&time_table(&args.granularities, rows));
    summary.push('\n');
    // Per commit, side by side.
    let first = args.granularities.first().and_then(|g| rows.get(g));
    if let Some(first) = first {
        write!(summary, "| commit | subject | tests |")?;
        for g in &args.granularities {
            write!(summary, " {g} |")?;
        }
        writeln!(
            summary,
            " cargo test | changed outcomes | reasons ({}) |",
            args.granularities[0]
        )?;
        write!(summary, "|---|---|---:|")?;
        for _ in &args.granularities {
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
            for g in &args.granularities {
                match rows
                    .get(g)
                    .and_then(|r| r.iter().find(|r| r.commit == row.commit))
                {
                    Some(r) => write!(
                        summary,
                        " {} ({:.1}%), {:.0}s |",
                        r.selected,
                        r.share(),
                        r.ekstazi_total
                    )?,
                    None => write!(summary, " — |")?,
                }
            }
            writeln!(
                summary,
                " {:.0}s | {} | {} |",
                row.retest_total(),
                row.changed_outcomes,
                row.reasons
            )?;
        }
    }
    std::fs::write(args.project.out.join("summary.md"), &summary)?;
    for granularity in &args.granularities {
        let rows = rows.get(granularity).map(Vec::as_slice).unwrap_or(&[]);
        write_csv(
            &args.project.out.join(format!("replay-{granularity}.csv")),
            rows,
        )?;
    }
    let series: Vec<(String, Vec<Row>)> = args
        .granularities
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

/// The figures of a replay, one line per granularity.
pub fn summary_table(granularities: &[String], rows: &HashMap<String, Vec<Row>>) -> String {
    let mut out = String::new();
    out.push_str(
        "| granularity | commits | mean selected | median selected | P90 selected | mean e2e time vs cargo test | mean test time vs cargo test | mean selection cost | outcome changes | misses |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for granularity in granularities {
        let Some(rows) = rows.get(granularity).filter(|r| !r.is_empty()) else {
            continue;
        };
        let shares: Vec<f64> = rows.iter().map(Row::share).collect();
        let e2e: Vec<f64> = rows
            .iter()
            .map(|r| r.ekstazi_total / r.retest_total())
            .collect();
        let test_time: Vec<f64> = rows.iter().map(|r| r.ekstazi_run / r.retest_test).collect();
        let cost: Vec<f64> = rows.iter().map(|r| r.ekstazi_selection).collect();
        let _ = writeln!(
            out,
            "| {granularity} | {} | {:.1}% | {:.1}% | {:.1}% | {:.0}% | {:.0}% | {:.2}s | {} | {} |",
            rows.len(),
            stats::mean(&shares),
            stats::median(&shares),
            stats::percentile(&shares, 90.0),
            100.0 * stats::mean(&e2e),
            100.0 * stats::mean(&test_time),
            stats::mean(&cost),
            rows.iter().map(|r| r.changed_outcomes).sum::<usize>(),
            rows.iter().map(|r| r.misses).sum::<usize>()
        );
    }
    out
}

/// A commit "rebuilds" when its plain build took longer than this: below
/// it, cargo only checked that nothing changed, and a ratio of two no-op
/// builds says nothing about the instrumented build.
const REBUILD_SECONDS: f64 = 3.0;

/// Where the time went, one line per granularity: cargo-ekstazi's stages
/// and `cargo test`'s own build as shares of `cargo test`'s build and test
/// run (means over commits), and the instrumented build against the plain
/// one at the commits that rebuild (issue 17's goal: at most 1.05×).
pub fn time_table(granularities: &[String], rows: &HashMap<String, Vec<Row>>) -> String {
    let mut out = String::new();
    out.push_str(
        "| granularity | `cargo test`'s build | instrumented build | selection | test run | the rest | end to end | commits that rebuild | instrumented rebuild vs plain: mean (median) |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for granularity in granularities {
        let Some(rows) = rows.get(granularity).filter(|r| !r.is_empty()) else {
            continue;
        };
        let share = |part: &dyn Fn(&Row) -> f64| {
            let shares: Vec<f64> = rows.iter().map(|r| part(r) / r.retest_total()).collect();
            100.0 * stats::mean(&shares)
        };
        let rebuilds: Vec<f64> = rows
            .iter()
            .filter(|r| r.retest_build > REBUILD_SECONDS)
            .map(|r| r.ekstazi_build / r.retest_build)
            .collect();
        let rebuild = if rebuilds.is_empty() {
            "—".to_owned()
        } else {
            format!(
                "{:.2}× ({:.2}×)",
                stats::mean(&rebuilds),
                stats::median(&rebuilds)
            )
        };
        let _ = writeln!(
            out,
            "| {granularity} | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {:.0}% | {} | {rebuild} |",
            share(&|r| r.retest_build),
            share(&|r| r.ekstazi_build),
            share(&|r| r.ekstazi_selection),
            share(&|r| r.ekstazi_run),
            share(&|r| { r.ekstazi_total - r.ekstazi_build - r.ekstazi_selection - r.ekstazi_run }),
            share(&|r| r.ekstazi_total),
            rebuilds.len(),
        );
    }
    out
}

fn write_csv(path: &Path, rows: &[Row]) -> Result<()> {
    let mut csv = format!("{CSV_HEADER}\n");
    for r in rows {
        writeln!(
            csv,
            "{},{},{},{},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.3},{:.2},{},{},{},{}",
            r.commit,
            quote(&r.subject),
            r.tests,
            r.selected,
            r.share(),
            r.retest_build,
            r.retest_test,
            r.retest_doctests,
            r.ekstazi_total,
            r.ekstazi_build,
            r.ekstazi_selection,
            r.ekstazi_run,
            r.changed_outcomes,
            r.misses,
            r.ekstazi_only_failures,
            quote(&r.reasons)
        )?;
    }
    std::fs::write(path, csv)?;
    Ok(())
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Reads a CSV written by [`write_csv`] back (for `eval plot`).
pub fn read_csv(path: &Path) -> Result<Vec<Row>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let f = split_csv(line);
        if f.len() < 16 {
            continue;
        }
        let num = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
        let int = |i: usize| f[i].parse::<usize>().unwrap_or(0);
        rows.push(Row {
            commit: f[0].clone(),
            subject: f[1].clone(),
            tests: int(2),
            selected: int(3),
            retest_build: num(5),
            retest_test: num(6),
            retest_doctests: num(7),
            ekstazi_total: num(8),
            ekstazi_build: num(9),
            ekstazi_selection: num(10),
            ekstazi_run: num(11),
            changed_outcomes: int(12),
            misses: int(13),
            ekstazi_only_failures: int(14),
            reasons: f[15].clone(),
        });
    }
    Ok(rows)
}

fn split_csv(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips() {
        let row = Row {
            commit: "abc".into(),
            subject: "say \"hi\", then go".into(),
            tests: 10,
            selected: 3,
            retest_build: 1.0,
            retest_test: 2.0,
            retest_doctests: 0.5,
            ekstazi_total: 1.5,
            ekstazi_build: 1.0,
            ekstazi_selection: 0.25,
            ekstazi_run: 0.2,
            changed_outcomes: 1,
            misses: 0,
            ekstazi_only_failures: 0,
            reasons: "function changed (3); new (1)".into(),
        };
        let dir = std::env::temp_dir().join(format!("xtask-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.csv");
        write_csv(&path, std::slice::from_ref(&row)).unwrap();
        let back = read_csv(&path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].subject, row.subject);
        assert_eq!(back[0].reasons, row.reasons);
        assert_eq!(back[0].selected, 3);
        assert_eq!(back[0].ekstazi_selection, 0.25);
    }

    #[test]
    fn the_time_table_takes_the_rebuild_ratio_at_commits_that_rebuild_only() {
        let row = |retest_build: f64, ekstazi_build: f64| Row {
            commit: "c".into(),
            subject: String::new(),
            tests: 4,
            selected: 1,
            retest_build,
            retest_test: 10.0 - retest_build,
            retest_doctests: 0.0,
            ekstazi_total: ekstazi_build + 1.0,
            ekstazi_build,
            ekstazi_selection: 0.5,
            ekstazi_run: 0.5,
            changed_outcomes: 0,
            misses: 0,
            ekstazi_only_failures: 0,
            reasons: String::new(),
        };
        // A no-op build (1 s against 2 s) is no rebuild; the three that
        // rebuild give 1.10×, 1.30× and 1.10×.
        let rows = HashMap::from([(
            "function".to_owned(),
            vec![row(1.0, 2.0), row(5.0, 5.5), row(4.0, 5.2), row(6.0, 6.6)],
        )]);
        let table = time_table(&["function".to_owned()], &rows);
        let line = table.lines().nth(2).unwrap();
        assert!(line.ends_with("| 3 | 1.17× (1.10×) |"), "{line}");
        // End to end: (3 + 6.5 + 6.2 + 7.6) / 10 over four commits.
        assert!(line.contains("| 58% |"), "{line}");
    }

    #[test]
    fn project_names() {
        assert_eq!(
            project_name(Path::new("/m/BurntSushi+ripgrep/repo")),
            "ripgrep"
        );
        assert_eq!(project_name(Path::new("/x/fd")), "fd");
    }
}
