//! `cargo xtask eval mutate`: a mutation campaign. Small changes are made to
//! a real project one at a time — a comparison flipped, an integer constant
//! changed, a function's body replaced by a default value, a string literal
//! altered, a byte of a data file the tests read changed — and for each,
//! `cargo ekstazi test` starts from the state recorded on the clean tree
//! while `cargo test` runs everything. **Every test that fails under the
//! mutant must have been selected**; one that was not is a miss, printed
//! with its record.
//!
//! Mutation sites are found by parsing the project's Rust sources (`syn`):
//! code outside `#[cfg(test)]` modules and `#[test]` functions, never
//! inside attributes or macro invocations. Candidates of each operator are
//! shuffled with a seeded generator and taken in turn, operator by
//! operator, so a campaign is reproducible from its seed. A mutant that
//! does not compile is counted and replaced by the next candidate.
//!
//! Output in `<out>`: `mutants.csv` (one line per mutant), `summary.md`,
//! logs under `logs/`, reports under `reports/`, a file per miss under
//! `misses/`.

use super::evidence::{self, EkstaziOpts, RetestAll, TestId};
use crate::common::process::{output, run_ok};
use crate::common::stats;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use syn::spanned::Spanned;
use syn::visit::Visit;

#[derive(clap::Args)]
pub struct MutateArgs {
    /// The commit to mutate
    #[arg(long, default_value = "HEAD")]
    pub rev: String,
    /// Mutants to build and test (those that do not compile are
    /// counted apart and replaced)
    #[arg(long, default_value_t = 30)]
    pub mutants: usize,
    /// Seed of the choice of mutants
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Granularities to check, comma-separated
    #[arg(long, default_value = "function", value_delimiter = ',')]
    pub granularity: Vec<String>,
    /// Only mutate Rust sources under these paths (relative to the
    /// repository root; default: every package's `src/`)
    #[arg(long = "src", value_delimiter = ',')]
    pub sources: Vec<String>,
    /// Data files (relative paths, git pathspecs) the tests read, to
    /// mutate as well; default: none
    #[arg(long = "data", value_delimiter = ',')]
    pub data: Vec<String>,
    /// Only print the mutants in the order they would be tried
    #[arg(long)]
    pub dry_run: bool,
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    #[command(flatten)]
    pub project: evidence::Project,
}

impl MutateArgs {
    /// The project resolved; a dry run measures nothing, so it has no tool.
    pub fn resolve(self) -> Result<Self> {
        Ok(MutateArgs {
            project: self.project.resolve(!self.dry_run)?,
            ..self
        })
    }
}

/// A mutation operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    /// `<` ↔ `>=`, `>` ↔ `<=`, `==` ↔ `!=`.
    Comparison,
    /// An integer literal `n` → `n + 1` (`n - 1` from 255 up).
    Constant,
    /// A function's body → `{}` or `{ Default::default() }`.
    Body,
    /// A string literal gets a `~` in front of its content.
    String,
    /// One letter or digit of a data file the tests read, changed.
    Data,
}

impl Operator {
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Comparison => "flip comparison",
            Operator::Constant => "change constant",
            Operator::Body => "body to default",
            Operator::String => "alter string literal",
            Operator::Data => "change data file",
        }
    }
}

/// One candidate change: replace `start..end` of `file` by `with`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutant {
    pub operator: Operator,
    /// Relative to the repository root.
    pub file: String,
    pub line: usize,
    pub start: usize,
    pub end: usize,
    pub with: String,
    /// What it does, for the report.
    pub what: String,
}

impl Mutant {
    pub fn apply(&self, text: &str) -> String {
        format!("{}{}{}", &text[..self.start], self.with, &text[self.end..])
    }
}

/// Results of one granularity on one mutant.
#[derive(Clone, Debug, Default)]
struct Side {
    tests: usize,
    selected: usize,
    misses: usize,
    /// Wall-clock seconds of `cargo ekstazi test`.
    total: f64,
    failed_report: bool,
}

struct Outcome {
    mutant: Mutant,
    built: bool,
    /// Tests that failed (or hung) under `cargo test` and passed on the
    /// clean tree.
    killing: Vec<TestId>,
    /// `cargo test` was stopped at the time limit.
    timed_out: bool,
    /// Tests that passed on the clean tree and have no outcome under the
    /// mutant because `cargo test` was stopped before reaching them: the
    /// safety check cannot speak for them.
    unverified: usize,
    retest_total: f64,
    sides: BTreeMap<String, Side>,
}

pub fn mutate(args: &MutateArgs) -> Result<()> {
    let (ekstazi, scratch) = args.project.scratch_setup()?;
    let head = evidence::checkout_headline(&scratch, &args.rev)?;
    eprintln!("mutating {} at {}", args.project.repo.display(), head);

    let candidates = candidates(&scratch, &args.sources, &args.data)?;
    let mut counts: BTreeMap<Operator, usize> = BTreeMap::new();
    for m in &candidates {
        *counts.entry(m.operator).or_default() += 1;
    }
    eprintln!(
        "{} candidate mutants: {}",
        candidates.len(),
        counts
            .iter()
            .map(|(op, n)| format!("{} {n}", op.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let order = interleave(candidates, args.seed);
    if args.dry_run {
        for (n, m) in order.iter().take(args.mutants).enumerate() {
            println!(
                "{n:3} {:20} {}:{}: {}",
                m.operator.as_str(),
                m.file,
                m.line,
                m.what
            );
        }
        return Ok(());
    }

    // `cargo test` for the comparison runs the same tests cargo-ekstazi
    // runs (no doctests).
    let mut retest_args = args.project.cargo_args.clone();
    retest_args.push("--tests".to_owned());
    let logs = args.project.out.join("logs");
    let reports = args.project.out.join("reports");
    std::fs::create_dir_all(&reports)?;

    // The clean tree: retest-all, and the recorded state of each
    // granularity (twice, so that tests whose first run only created what
    // they look up settle).
    eprintln!("recording the clean tree");
    let clean = evidence::retest_all(
        &scratch,
        &retest_args,
        args.project.timeout,
        &logs.join("clean-cargo-test.log"),
    )?;
    anyhow::ensure!(clean.built, "the clean tree does not build");
    anyhow::ensure!(
        !clean.timed_out,
        "cargo test on the clean tree ran over the time limit (--timeout)"
    );
    for granularity in &args.granularity {
        let state = args.project.out.join(format!("clean-state-{granularity}"));
        let _ = std::fs::remove_dir_all(&state);
        for round in 0..2 {
            let run = evidence::ekstazi_test(&EkstaziOpts {
                ekstazi: &ekstazi,
                dir: &scratch,
                state: &state,
                granularity,
                cargo_args: &args.project.cargo_args,
                target_dir: Some(&args.project.out.join(format!("target-{granularity}"))),
                log: &logs.join(format!("clean-{granularity}.log")),
                report: &reports.join(format!("clean-{granularity}-{round}.json")),
                timeout: args.project.timeout,
                mode: evidence::RunMode::Record,
            })?;
            let report = run
                .report
                .context("cargo ekstazi test failed on the clean tree (see logs)")?;
            eprintln!(
                "  {granularity} round {round}: {} of {} tests ran",
                report.selected().len(),
                report.in_scope().count()
            );
        }
    }

    // What the clean tree's runs leave that git ignores (`target/`, say):
    // kept between mutants, while what a mutant's runs add is removed.
    let ignored_clean = ignored_entries(&scratch)?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut unviable = 0;
    for mutant in order {
        if outcomes.iter().filter(|o| o.built).count() >= args.mutants {
            break;
        }
        let n = outcomes.len();
        let path = scratch.join(&mutant.file);
        let text = std::fs::read_to_string(&path)?;
        std::fs::write(&path, mutant.apply(&text))?;
        eprintln!(
            "[{n}] {} {}:{}: {}",
            mutant.operator.as_str(),
            mutant.file,
            mutant.line,
            mutant.what
        );
        let result = try_mutant(args, &ekstazi, &scratch, &clean, &mutant, n);
        // Revert whatever happened, including the ignored files the
        // mutant's runs left (`insta`'s `.pending-snap` files of the tests
        // it made fail): the next mutant would find them as files created.
        std::fs::write(&path, &text)?;
        run_ok(&mut evidence::git(&scratch, &["clean", "-fdq"]))?;
        remove_new_ignored(&scratch, &ignored_clean)?;
        let outcome = result?;
        if !outcome.built {
            unviable += 1;
            eprintln!("  does not compile: replaced by the next candidate");
        } else {
            let sides: Vec<String> = outcome
                .sides
                .iter()
                .map(|(g, s)| {
                    format!(
                        "{g}: {}/{} selected{}",
                        s.selected,
                        s.tests,
                        if s.misses > 0 {
                            format!(", {} MISSES", s.misses)
                        } else {
                            String::new()
                        }
                    )
                })
                .collect();
            let stopped = if outcome.timed_out {
                format!(
                    " (stopped at the time limit; {} not reached)",
                    outcome.unverified
                )
            } else {
                String::new()
            };
            eprintln!(
                "  {} test(s) fail under cargo test{stopped}; {}",
                outcome.killing.len(),
                sides.join("; ")
            );
        }
        outcomes.push(outcome);
        write_results(args, &head, &outcomes, unviable)?;
    }
    write_results(args, &head, &outcomes, unviable)?;
    print!(
        "{}",
        std::fs::read_to_string(args.project.out.join("summary.md"))?
    );
    Ok(())
}

fn try_mutant(
    args: &MutateArgs,
    ekstazi: &Path,
    scratch: &Path,
    clean: &RetestAll,
    mutant: &Mutant,
    n: usize,
) -> Result<Outcome> {
    let logs = args.project.out.join("logs");
    let mut retest_args = args.project.cargo_args.clone();
    retest_args.push("--tests".to_owned());
    let retest = evidence::retest_all(
        scratch,
        &retest_args,
        args.project.timeout,
        &logs.join(format!("{n:03}-cargo-test.log")),
    )?;
    let mut outcome = Outcome {
        mutant: mutant.clone(),
        built: retest.built,
        killing: Vec::new(),
        timed_out: retest.timed_out,
        unverified: 0,
        retest_total: retest.build + retest.tests,
        sides: BTreeMap::new(),
    };
    if !retest.built {
        return Ok(outcome);
    }
    // Tests whose outcome differs from the clean tree's: failing now
    // (the mutant's kills), or no longer failing.
    let mut changed: Vec<(TestId, String, String)> = Vec::new();
    for (id, now) in &retest.outcomes {
        let before = clean.outcomes.get(id).map_or("(new)", String::as_str);
        if now != before && now != "ignored" {
            changed.push((id.clone(), before.to_owned(), now.clone()));
        }
    }
    changed.sort();
    outcome.killing = changed
        .iter()
        .filter(|(_, _, now)| now == "FAILED" || now == "TIMEOUT")
        .map(|(id, _, _)| id.clone())
        .collect();
    if retest.timed_out {
        outcome.unverified = clean
            .outcomes
            .iter()
            .filter(|(id, was)| *was == "ok" && !retest.outcomes.contains_key(*id))
            .count();
    }

    for granularity in &args.granularity {
        let clean_state = args.project.out.join(format!("clean-state-{granularity}"));
        let state = args.project.out.join(format!("state-{granularity}"));
        let _ = std::fs::remove_dir_all(&state);
        copy_dir(&clean_state, &state)?;
        let run = evidence::ekstazi_test(&EkstaziOpts {
            ekstazi,
            dir: scratch,
            state: &state,
            granularity,
            cargo_args: &args.project.cargo_args,
            target_dir: Some(&args.project.out.join(format!("target-{granularity}"))),
            log: &logs.join(format!("{n:03}-{granularity}.log")),
            report: &args
                .project
                .out
                .join("reports")
                .join(format!("{n:03}-{granularity}.json")),
            timeout: args.project.timeout,
            mode: evidence::RunMode::Record,
        })?;
        let mut side = Side {
            total: run.wall,
            ..Side::default()
        };
        match run.report {
            None => {
                side.failed_report = true;
                eprintln!("  {granularity}: cargo ekstazi test wrote no report (see logs)");
            }
            Some(report) => {
                let selected = report.selected();
                side.tests = report.in_scope().count();
                side.selected = selected.len();
                for (id, before, now) in &changed {
                    if selected.contains_key(id) || !report.knows(id) {
                        continue;
                    }
                    side.misses += 1;
                    let detail = format!(
                        "mutant {n} ({}) {}:{}: {}\ngranularity {granularity}: went {before} -> {now} under cargo test but cargo-ekstazi did not select it",
                        mutant.operator.as_str(),
                        mutant.file,
                        mutant.line,
                        mutant.what
                    );
                    // The record it was skipped on is the clean state's.
                    evidence::report_miss(
                        &args.project.out.join("misses"),
                        &format!("mutant{n:03}-{granularity}"),
                        &clean_state,
                        id,
                        &detail,
                    )?;
                }
            }
        }
        outcome.sides.insert(granularity.clone(), side);
    }
    Ok(outcome)
}

fn write_results(
    args: &MutateArgs,
    head: &str,
    outcomes: &[Outcome],
    unviable: usize,
) -> Result<()> {
    let mut csv = String::from(
        "mutant,operator,file,line,what,built,killing_tests,timed_out,unverified,retest_s",
    );
    for g in &args.granularity {
        write!(csv, ",{g}_tests,{g}_selected,{g}_share,{g}_misses,{g}_s")?;
    }
    csv.push('\n');
    for (n, o) in outcomes.iter().enumerate() {
        write!(
            csv,
            "{n},{},{},{},\"{}\",{},{},{},{},{:.2}",
            o.mutant.operator.as_str(),
            o.mutant.file,
            o.mutant.line,
            o.mutant.what.replace('"', "\"\""),
            o.built,
            o.killing.len(),
            o.timed_out,
            o.unverified,
            o.retest_total
        )?;
        for g in &args.granularity {
            let s = o.sides.get(g).cloned().unwrap_or_default();
            write!(
                csv,
                ",{},{},{:.2},{},{:.2}",
                s.tests,
                s.selected,
                stats::share(s.selected, s.tests),
                s.misses,
                s.total
            )?;
        }
        csv.push('\n');
    }
    std::fs::write(args.project.out.join("mutants.csv"), csv)?;

    let built: Vec<&Outcome> = outcomes.iter().filter(|o| o.built).collect();
    let killed = built.iter().filter(|o| !o.killing.is_empty()).count();
    let name = super::replay::project_name(&args.project.repo);
    let mut md = String::new();
    writeln!(
        md,
        "## {name}: mutants of `{}` (seed {})\n",
        head, args.seed
    )?;
    writeln!(
        md,
        "Cargo options: `{}`. Mutants tried: {} ({} did not compile and were replaced); built and tested: {}; killed (some test failed under `cargo test`): {killed}; `cargo test` stopped at the {} s limit: {} ({} tests it did not reach are unverified).\n",
        args.project.cargo_args.join(" "),
        outcomes.len(),
        unviable,
        built.len(),
        args.project.timeout.as_secs(),
        built.iter().filter(|o| o.timed_out).count(),
        built.iter().map(|o| o.unverified).sum::<usize>(),
    )?;
    writeln!(
        md,
        "| granularity | mutants | killed | failing tests | missed | mean selected | median selected | mean selected (killed mutants) |"
    )?;
    writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
    for g in &args.granularity {
        let sides: Vec<(&Outcome, &Side)> = built
            .iter()
            .filter_map(|o| Some((*o, o.sides.get(g)?)))
            .filter(|(_, s)| !s.failed_report)
            .collect();
        let shares: Vec<f64> = sides
            .iter()
            .map(|(_, s)| stats::share(s.selected, s.tests))
            .collect();
        let killed_shares: Vec<f64> = sides
            .iter()
            .filter(|(o, _)| !o.killing.is_empty())
            .map(|(_, s)| stats::share(s.selected, s.tests))
            .collect();
        writeln!(
            md,
            "| {g} | {} | {} | {} | {} | {:.1}% | {:.1}% | {:.1}% |",
            sides.len(),
            sides.iter().filter(|(o, _)| !o.killing.is_empty()).count(),
            sides.iter().map(|(o, _)| o.killing.len()).sum::<usize>(),
            sides.iter().map(|(_, s)| s.misses).sum::<usize>(),
            stats::mean(&shares),
            stats::median(&shares),
            stats::mean(&killed_shares),
        )?;
    }
    writeln!(md, "\nBy operator:\n")?;
    writeln!(md, "| operator | built | killed | did not compile |")?;
    writeln!(md, "|---|---:|---:|---:|")?;
    let mut ops: BTreeMap<Operator, (usize, usize, usize)> = BTreeMap::new();
    for o in outcomes {
        let e = ops.entry(o.mutant.operator).or_default();
        if o.built {
            e.0 += 1;
            e.1 += usize::from(!o.killing.is_empty());
        } else {
            e.2 += 1;
        }
    }
    for (op, (b, k, u)) in ops {
        writeln!(md, "| {} | {b} | {k} | {u} |", op.as_str())?;
    }
    writeln!(md, "\nEvery mutant:\n")?;
    write!(md, "| # | operator | where | change | failing tests |")?;
    for g in &args.granularity {
        write!(md, " {g} selected |")?;
    }
    writeln!(md)?;
    write!(md, "|---:|---|---|---|---:|")?;
    for _ in &args.granularity {
        write!(md, "---:|")?;
    }
    writeln!(md)?;
    for (n, o) in outcomes.iter().enumerate() {
        write!(
            md,
            "| {n} | {} | `{}:{}` | {} | {} |",
            o.mutant.operator.as_str(),
            o.mutant.file,
            o.mutant.line,
            o.mutant.what.replace('|', "\\|"),
            match (o.built, o.timed_out) {
                (false, _) => "does not compile".to_owned(),
                (true, false) => o.killing.len().to_string(),
                (true, true) => format!("{} (hung; {} not reached)", o.killing.len(), o.unverified),
            }
        )?;
        for g in &args.granularity {
            match o.sides.get(g) {
                Some(s) if !s.failed_report => write!(
                    md,
                    " {}/{}{} |",
                    s.selected,
                    s.tests,
                    if s.misses > 0 {
                        format!(" ({} MISSED)", s.misses)
                    } else {
                        String::new()
                    }
                )?,
                Some(_) => write!(md, " no report |")?,
                None => write!(md, " — |")?,
            }
        }
        writeln!(md)?;
    }
    std::fs::write(args.project.out.join("summary.md"), md)?;
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else if kind.is_file() && entry.file_name() != "lock" {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// The untracked paths git ignores in `root`, a wholly untracked directory
/// as one entry (`target/`).
fn ignored_entries(root: &Path) -> Result<BTreeSet<String>> {
    let listed = output(Command::new("git").arg("-C").arg(root).args([
        "ls-files",
        "--others",
        "--ignored",
        "--exclude-standard",
        "--directory",
        "-z",
    ]))?;
    Ok(listed
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Removes the ignored paths that were not there in `before`.
fn remove_new_ignored(root: &Path, before: &BTreeSet<String>) -> Result<()> {
    for entry in ignored_entries(root)?.difference(before) {
        let path = root.join(entry);
        // A new directory is listed before the files in it.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Every candidate mutant of the tracked files: Rust sources under
/// `sources` (default: every `.rs` file outside `tests/`, `benches/`,
/// `examples/` and build scripts) and the data files `data` names (git
/// pathspecs).
pub fn candidates(root: &Path, sources: &[String], data: &[String]) -> Result<Vec<Mutant>> {
    let files = output(Command::new("git").arg("-C").arg(root).arg("ls-files"))?;
    let mut found = Vec::new();
    for file in files.lines() {
        if !is_mutable_source(file, sources) {
            continue;
        }
        let text = match std::fs::read_to_string(root.join(file)) {
            Ok(text) => text,
            Err(_) => continue,
        };
        found.extend(rust_sites(file, &text));
    }
    if !data.is_empty() {
        let listed = output(
            Command::new("git")
                .arg("-C")
                .arg(root)
                .arg("ls-files")
                .arg("--")
                .args(data),
        )?;
        for file in listed.lines().filter(|f| !f.ends_with(".rs")) {
            if let Ok(text) = std::fs::read_to_string(root.join(file))
                && let Some(m) = data_site(file, &text, stable_seed(file))
            {
                found.push(m);
            }
        }
    }
    Ok(found)
}

pub(crate) fn is_mutable_source(file: &str, sources: &[String]) -> bool {
    if !file.ends_with(".rs") {
        return false;
    }
    let parts: Vec<&str> = file.split('/').collect();
    let name = parts.last().copied().unwrap_or("");
    let in_non_library_dir = parts[..parts.len() - 1].iter().any(|p| {
        matches!(
            *p,
            "tests" | "benches" | "examples" | "fuzz" | "testdata" | "xtask"
        )
    });
    if in_non_library_dir || matches!(name, "build.rs" | "tests.rs" | "test.rs") {
        return false;
    }
    sources.is_empty() || sources.iter().any(|s| file.starts_with(s.as_str()))
}

/// The mutation sites of one Rust source file.
pub fn rust_sites(file: &str, text: &str) -> Vec<Mutant> {
    let Ok(ast) = syn::parse_file(text) else {
        return vec![];
    };
    let mut line_starts = vec![0];
    line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
    let mut sites = Sites {
        file,
        text,
        line_starts,
        found: Vec::new(),
        in_type: 0,
    };
    sites.visit_file(&ast);
    sites.found
}

struct Sites<'a> {
    file: &'a str,
    text: &'a str,
    line_starts: Vec<usize>,
    found: Vec<Mutant>,
    in_type: usize,
}

impl Sites<'_> {
    /// The byte offset of a span's start (or end).
    fn offset(&self, at: proc_macro2::LineColumn) -> Option<usize> {
        let line_start = *self.line_starts.get(at.line.checked_sub(1)?)?;
        let line = &self.text[line_start..];
        let within = line
            .char_indices()
            .nth(at.column)
            .map_or(line.len(), |(i, _)| i);
        Some(line_start + within)
    }

    fn push(&mut self, operator: Operator, span: proc_macro2::Span, with: String, what: String) {
        let (Some(start), Some(end)) = (self.offset(span.start()), self.offset(span.end())) else {
            return;
        };
        if start >= end || end > self.text.len() {
            return;
        }
        self.found.push(Mutant {
            operator,
            file: self.file.to_owned(),
            line: span.start().line,
            start,
            end,
            with,
            what,
        });
    }

    fn body(&mut self, sig: &syn::Signature, block: &syn::Block) {
        if sig.constness.is_some() || sig.asyncness.is_some() || sig.ident == "main" {
            return;
        }
        let replacement = match &sig.output {
            syn::ReturnType::Default => "{}",
            syn::ReturnType::Type(_, ty) if defaultable(ty, &sig.generics) => {
                "{ Default::default() }"
            }
            _ => return,
        };
        let current: String = block
            .stmts
            .iter()
            .map(|s| quote_tokens(s).replace(' ', ""))
            .collect();
        if current.is_empty() || current == "Default::default()" {
            return;
        }
        let start = block.brace_token.span.open().start();
        let end = block.brace_token.span.close().end();
        let (Some(s), Some(e)) = (self.offset(start), self.offset(end)) else {
            return;
        };
        if s >= e {
            return;
        }
        self.found.push(Mutant {
            operator: Operator::Body,
            file: self.file.to_owned(),
            line: start.line,
            start: s,
            end: e,
            with: replacement.to_owned(),
            what: format!("body of `{}` replaced by `{replacement}`", sig.ident),
        });
    }
}

/// At most `max` characters of `s`, newlines shown as `\\n`.
fn one_line(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect::<String>().replace('\n', "\\n");
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

fn quote_tokens(t: &impl quote::ToTokens) -> String {
    t.to_token_stream().to_string()
}

/// Whether `Default::default()` likely type-checks for a return type:
/// not a reference (but `&str`), `impl Trait`, `Result`, `Self`, `Box`, a
/// bare generic parameter or `!`.
fn defaultable(ty: &syn::Type, generics: &syn::Generics) -> bool {
    match ty {
        syn::Type::Reference(r) => {
            matches!(&*r.elem, syn::Type::Path(p) if p.path.is_ident("str"))
                && r.mutability.is_none()
        }
        syn::Type::Path(p) => {
            let Some(last) = p.path.segments.last() else {
                return false;
            };
            let name = last.ident.to_string();
            let generic =
                p.path.segments.len() == 1 && generics.type_params().any(|t| t.ident == last.ident);
            !generic
                && p.qself.is_none()
                && !matches!(
                    name.as_str(),
                    "Result" | "Self" | "Box" | "Rc" | "Arc" | "Pin" | "Cow"
                )
        }
        syn::Type::Tuple(t) => t.elems.iter().all(|e| defaultable(e, generics)),
        syn::Type::Paren(p) => defaultable(&p.elem, generics),
        _ => false,
    }
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        if path.is_ident("cfg") {
            let tokens = quote_tokens(&a.meta);
            return tokens.contains("test")
                && !tokens.contains("not (test")
                && !tokens.contains("not(test");
        }
        false
    })
}

impl<'ast> Visit<'ast> for Sites<'_> {
    // Attributes (doc comments are `#[doc = "..."]`) are not code.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_only(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test_only(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        self.body(&f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        self.body(&f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        if let Some(block) = &f.default {
            self.body(&f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }

    fn visit_type(&mut self, t: &'ast syn::Type) {
        self.in_type += 1;
        syn::visit::visit_type(self, t);
        self.in_type -= 1;
    }

    fn visit_generic_argument(&mut self, g: &'ast syn::GenericArgument) {
        self.in_type += 1;
        syn::visit::visit_generic_argument(self, g);
        self.in_type -= 1;
    }

    fn visit_expr_binary(&mut self, e: &'ast syn::ExprBinary) {
        use syn::BinOp;
        let flipped = match e.op {
            BinOp::Lt(_) => Some(("<", ">=")),
            BinOp::Le(_) => Some(("<=", ">")),
            BinOp::Gt(_) => Some((">", "<=")),
            BinOp::Ge(_) => Some((">=", "<")),
            BinOp::Eq(_) => Some(("==", "!=")),
            BinOp::Ne(_) => Some(("!=", "==")),
            _ => None,
        };
        if let Some((from, to)) = flipped
            && self.in_type == 0
            && let Some(start) = self.offset(e.op.span().start())
            && self.text[start..].starts_with(from)
        {
            let line = e.op.span().start().line;
            let shown = one_line(&quote_tokens(e), 60);
            self.found.push(Mutant {
                operator: Operator::Comparison,
                file: self.file.to_owned(),
                line,
                start,
                end: start + from.len(),
                with: to.to_owned(),
                what: format!("`{from}` → `{to}` in `{shown}`"),
            });
        }
        syn::visit::visit_expr_binary(self, e);
    }

    fn visit_expr_lit(&mut self, e: &'ast syn::ExprLit) {
        if self.in_type > 0 {
            return;
        }
        match &e.lit {
            syn::Lit::Int(i) => {
                if let Ok(value) = i.base10_parse::<u128>() {
                    let new = if value < 255 { value + 1 } else { value - 1 };
                    let original = i.token().to_string();
                    let new_text = if original.starts_with("0x") {
                        format!("0x{new:x}{}", i.suffix())
                    } else if original.starts_with("0b") {
                        format!("0b{new:b}{}", i.suffix())
                    } else if original.starts_with("0o") {
                        format!("0o{new:o}{}", i.suffix())
                    } else {
                        format!("{new}{}", i.suffix())
                    };
                    self.push(
                        Operator::Constant,
                        i.span(),
                        new_text.clone(),
                        format!("`{original}` → `{new_text}`"),
                    );
                }
            }
            syn::Lit::Str(_) | syn::Lit::ByteStr(_) => {
                let (original, span) = match &e.lit {
                    syn::Lit::Str(s) => (s.token().to_string(), s.span()),
                    syn::Lit::ByteStr(s) => (s.token().to_string(), s.span()),
                    _ => unreachable!("matched above"),
                };
                if let Some(quote) = original.find('"') {
                    let new_text = format!("{}~{}", &original[..=quote], &original[quote + 1..]);
                    let shown = one_line(&original, 50);
                    self.push(
                        Operator::String,
                        span,
                        new_text,
                        format!("`~` prepended to {shown}"),
                    );
                }
            }
            _ => {}
        }
    }
}

/// A change of one letter or digit in a data file, at a place chosen with
/// `seed`.
pub fn data_site(file: &str, text: &str, seed: u64) -> Option<Mutant> {
    let places: Vec<(usize, char)> = text
        .char_indices()
        .filter(|(_, c)| c.is_ascii_alphanumeric())
        .collect();
    if places.is_empty() {
        return None;
    }
    let (at, c) = places[(SplitMix(seed).next() % places.len() as u64) as usize];
    let new = match c {
        'z' => 'a',
        'Z' => 'A',
        '9' => '0',
        c => (c as u8 + 1) as char,
    };
    let line = text[..at].matches('\n').count() + 1;
    Some(Mutant {
        operator: Operator::Data,
        file: file.to_owned(),
        line,
        start: at,
        end: at + 1,
        with: new.to_string(),
        what: format!("`{c}` → `{new}`"),
    })
}

fn stable_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// SplitMix64: a tiny seeded generator, enough for choosing mutants
/// reproducibly (and placing them: `super::bisect`).
pub(crate) struct SplitMix(pub u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..bound` (`bound` ≥ 1).
    pub(crate) fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

/// The candidates in the order they are tried, chosen with `seed`: one
/// operator after the other, so that every operator is represented, and
/// within an operator a file chosen at random and then a site of it, so
/// that a file with a thousand string literals (a table of file types, say)
/// does not crowd out the others.
pub fn interleave(candidates: Vec<Mutant>, seed: u64) -> Vec<Mutant> {
    let mut rng = SplitMix(seed);
    let mut by_op: BTreeMap<Operator, BTreeMap<String, Vec<Mutant>>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for m in candidates {
        if seen.insert((m.file.clone(), m.start, m.end, m.with.clone())) {
            by_op
                .entry(m.operator)
                .or_default()
                .entry(m.file.clone())
                .or_default()
                .push(m);
        }
    }
    let mut order = Vec::new();
    loop {
        let mut any = false;
        for files in by_op.values_mut() {
            if files.is_empty() {
                continue;
            }
            any = true;
            let k = (rng.next() % files.len() as u64) as usize;
            let file = files.keys().nth(k).expect("k < len").clone();
            let sites = files.get_mut(&file).expect("present");
            let i = (rng.next() % sites.len() as u64) as usize;
            order.push(sites.swap_remove(i));
            if sites.is_empty() {
                files.remove(&file);
            }
        }
        if !any {
            break;
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_mutants_runs_leave_ignored_is_removed_and_the_rest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let git = |args: &[&str]| run_ok(Command::new("git").arg("-C").arg(root).args(args));
        git(&["init", "-q"]).unwrap();
        std::fs::write(root.join(".gitignore"), "*.pending-snap\ntarget/\n").unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::write(root.join("target/debug/old"), "").unwrap();
        std::fs::write(root.join("kept.pending-snap"), "").unwrap();
        let before = ignored_entries(root).unwrap();
        assert!(before.contains("target/"), "{before:?}");

        std::fs::write(root.join("target/debug/new"), "").unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(root.join("tests/.t.rs.pending-snap"), "").unwrap();
        std::fs::write(root.join("new.pending-snap"), "").unwrap();
        remove_new_ignored(root, &before).unwrap();

        assert!(!root.join("tests/.t.rs.pending-snap").exists());
        assert!(!root.join("new.pending-snap").exists());
        assert!(root.join("kept.pending-snap").exists());
        assert!(root.join("target/debug/old").exists());
        assert!(root.join("target/debug/new").exists(), "inside target/");
        assert_eq!(ignored_entries(root).unwrap(), before);
    }

    const SOURCE: &str = r#"
/// A doc comment "with a string".
pub fn limit(x: u32) -> bool {
    x < 10
}

pub fn name() -> &'static str {
    "apple"
}

fn log(s: &str) {
    println!("{} {}", s, 3);
}

#[cfg(test)]
mod tests {
    #[test]
    fn t() {
        assert!(super::limit(3) == true);
    }
}
"#;

    #[test]
    fn finds_sites_outside_tests_and_macros() {
        let sites = rust_sites("src/lib.rs", SOURCE);
        let whats: Vec<String> = sites
            .iter()
            .map(|m| {
                format!(
                    "{:?} {}",
                    m.operator,
                    m.apply(SOURCE).lines().nth(m.line - 1).unwrap().trim()
                )
            })
            .collect();
        assert!(
            whats.contains(&"Comparison x >= 10".to_owned()),
            "{whats:#?}"
        );
        assert!(whats.contains(&"Constant x < 11".to_owned()), "{whats:#?}");
        assert!(
            whats.contains(&"String \"~apple\"".to_owned()),
            "{whats:#?}"
        );
        assert!(
            whats.contains(&"Body pub fn limit(x: u32) -> bool { Default::default() }".to_owned()),
            "{whats:#?}"
        );
        assert!(
            whats.contains(&"Body fn log(s: &str) {}".to_owned()),
            "{whats:#?}"
        );
        // Nothing from the doc comment, the macro call or the test module.
        assert_eq!(sites.len(), 6, "{whats:#?}");
        assert!(sites.iter().all(|m| m.line < 15));
    }

    #[test]
    fn multibyte_text_before_a_site() {
        let text = "fn f() -> bool { \"é→\" == \"x\" }\n";
        let sites = rust_sites("a.rs", text);
        let flip = sites
            .iter()
            .find(|m| m.operator == Operator::Comparison)
            .unwrap();
        assert_eq!(flip.apply(text), "fn f() -> bool { \"é→\" != \"x\" }\n");
    }

    #[test]
    fn data_changes_one_character_deterministically() {
        let a = data_site("t.txt", "hello, world 9\n", 7).unwrap();
        let b = data_site("t.txt", "hello, world 9\n", 7).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.end - a.start, 1);
        assert_ne!(a.apply("hello, world 9\n"), "hello, world 9\n");
    }

    #[test]
    fn interleaving_is_seeded_and_mixes_operators() {
        let sites = rust_sites("src/lib.rs", SOURCE);
        let a = interleave(sites.clone(), 3);
        let b = interleave(sites.clone(), 3);
        assert_eq!(a, b);
        assert_eq!(a.len(), sites.len());
        let first_ops: HashSet<Operator> = a.iter().take(4).map(|m| m.operator).collect();
        assert_eq!(first_ops.len(), 4);
    }

    #[test]
    fn source_filter() {
        assert!(is_mutable_source("crates/ignore/src/walk.rs", &[]));
        assert!(!is_mutable_source("crates/ignore/tests/x.rs", &[]));
        assert!(!is_mutable_source("build.rs", &[]));
        assert!(!is_mutable_source("src/x.rs", &["crates/".to_owned()]));
    }
}
