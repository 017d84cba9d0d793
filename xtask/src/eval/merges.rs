//! `cargo xtask eval merges`: does `cargo ekstazi merge-check` find and
//! name the conflicts of merges, and is it quiet where a merge passes?
//!
//! **Built conflicts**, as TOM built MCon4J, from a real
//! project's history:
//!
//! 1. **Side A** is a real commit that changes non-test source and adds or
//!    changes a test (a function with a `#[…test]` attribute whose text is
//!    new or differs from its parent's), the test passing there.
//! 2. **What that test executes** at A comes from its cargo-ekstazi record:
//!    the names of the functions it ran, its own binary's and the programs
//!    it started.
//! 3. **Side B** branches from A's parent with one mutant (`mutate`'s
//!    operators) in a function the test executed.
//! 4. **The merge** is git's default strategy, `git merge --no-ff` of B
//!    into A. Every `--octopus-every`-th merge has a third side: the
//!    parent with a mutant in a function the test did not execute, in
//!    another file. A merge that conflicts textually, or where A's test
//!    passes, is dropped, and the next mutant tried.
//!
//! **Built semantic conflicts** (`--semantic`), which that construction
//! cannot make (B's mutant reaches A's test at B too, or the test is new):
//! side A is a real commit after which a test it leaves unchanged executes
//! a function it did not execute at the parent (by their records at both),
//! and side B mutates that function. At B the test does not reach the
//! mutant; at the merge it does. Kept only when the test passes at every
//! parent and fails at the merge.
//!
//! **Ground truth**, from plain `cargo test` (every test) at the base, at
//! each parent and at the merge, by the definitions, in the order
//! merge-check's documentation gives them: a test failing at the merge is
//! *already failing* if it failed at a parent; else *lost behaviour* if a
//! side added or changed it and it passed there; else a *semantic
//! conflict* if it passed at every parent.
//!
//! **The tool**: `cargo ekstazi merge-check --json <merge>` from an empty
//! state (so it builds and runs the base and every parent itself), its
//! conflicts compared test by test with the ground truth, and the tests it
//! ran at the merge counted against all of them.
//!
//! **Real merges**: the project's own merge commits, newest first, where
//! `cargo test` passes at the merge. Any conflict merge-check blames on
//! them is a false alarm.
//!
//! Output in `<out>`: `merges.csv` (a line per merge), `merges.json` (each
//! merge's verdicts test by test), `summary.md`, and logs under `logs/`.

use super::evidence::{self, EkstaziOpts, RetestAll, TestId};
use super::mutate::{self, Mutant};
use crate::common::process::{output, run_ok};
use crate::common::stats;
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use syn::visit::Visit;

#[derive(clap::Args)]
pub struct MergeEvalArgs {
    /// Non-merge commits searched for a first side, newest first
    #[arg(long, default_value_t = 200)]
    pub window: usize,
    /// The newest commit searched
    #[arg(long, default_value = "HEAD")]
    pub from: String,
    /// Conflicting merges to build
    #[arg(long, default_value_t = 16)]
    pub merges: usize,
    /// Semantic conflicts to build: side A is a real commit after which
    /// an unchanged test executes a function it did not execute at the
    /// parent, and side B mutates that function
    #[arg(long, default_value_t = 8)]
    pub semantic: usize,
    /// Every n-th built merge gets a third side (an octopus merge); 0:
    /// none
    #[arg(long, default_value_t = 4)]
    pub octopus_every: usize,
    /// Real merge commits that pass to check for false alarms
    #[arg(long, default_value_t = 10)]
    pub real: usize,
    /// Mutants tried per test of the first side
    #[arg(long, default_value_t = 4)]
    pub tries: usize,
    /// Seed of the choice of mutants
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only mutate Rust sources under these paths (default: every
    /// package's `src/`)
    #[arg(long = "src", value_delimiter = ',')]
    pub sources: Vec<String>,
    /// The project, where results go, the tool, the cargo options and the
    /// time limit.
    #[command(flatten)]
    pub project: evidence::Project,
}

impl MergeEvalArgs {
    /// The project resolved, and at least one mutant tried per test.
    pub fn resolve(self) -> Result<Self> {
        Ok(MergeEvalArgs {
            project: self.project.resolve(true)?,
            tries: self.tries.max(1),
            ..self
        })
    }
}

/// What merge-check can say of a test.
const KINDS: [&str; 3] = ["semantic conflict", "lost behaviour", "already failing"];

/// How a built merge's sides were chosen.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Construction {
    /// MCon4J's: side A's own test, and a mutant in what it executes.
    OwnTest,
    /// A test that side A's change makes reach a function side B mutates.
    Reach,
}

/// One checked merge: built (`test` is the one it was built around) or
/// real.
#[derive(Default)]
struct Row {
    name: String,
    construction: Option<Construction>,
    merge: String,
    parents: usize,
    /// Side A's commit and test, and the mutant(s), for built merges.
    test: Option<TestId>,
    mutants: Vec<String>,
    /// Ground truth: every test failing at the merge and its verdict.
    truth: BTreeMap<TestId, &'static str>,
    /// merge-check's verdicts.
    reported: BTreeMap<TestId, String>,
    /// Tests at the merge (not ignored), and those merge-check ran there.
    tests: usize,
    ran: usize,
    both_sides: usize,
    untested: usize,
    exit: Option<i32>,
    wall: f64,
    error: Option<String>,
}

impl Row {
    /// The verdicts merge-check got right, got wrong, missed, and made up.
    fn tally(&self) -> (usize, usize, usize, usize) {
        let mut right = 0;
        let mut wrong = 0;
        let mut missed = 0;
        for (test, kind) in &self.truth {
            match self.reported.get(test) {
                Some(k) if k == kind => right += 1,
                Some(_) => wrong += 1,
                None => missed += 1,
            }
        }
        let made_up = self
            .reported
            .keys()
            .filter(|t| !self.truth.contains_key(*t))
            .count();
        (right, wrong, missed, made_up)
    }

    /// The test the merge was built around (side A's own, or the one A
    /// makes reach B's mutant): its ground truth, and merge-check's
    /// verdict if it gave one.
    fn own_test(&self) -> Option<(&'static str, Option<&str>)> {
        let test = self.test.as_ref()?;
        Some((
            self.truth.get(test).copied().unwrap_or("passes"),
            self.reported.get(test).map(String::as_str),
        ))
    }

    /// Conflicts merge-check blames on the merge (exit 101's).
    fn blamed(&self) -> usize {
        self.reported
            .values()
            .filter(|k| *k != "already failing")
            .count()
    }
}

pub fn merges(args: &MergeEvalArgs) -> Result<()> {
    let (ekstazi, scratch) = args.project.scratch_setup()?;
    let logs = args.project.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut rows = Vec::new();

    // Real merges that pass.
    let listing = output(&mut evidence::git(
        &scratch,
        &["rev-list", "--merges", &args.from],
    ))?;
    let mut skipped_real = 0;
    for merge in listing.lines() {
        if rows.len() >= args.real {
            break;
        }
        let name = format!("real-{}", &merge[..10]);
        let log = logs.join(format!("{name}.log"));
        evidence::checkout_clean(&scratch, merge)?;
        let at_merge = evidence::retest_all(
            &scratch,
            &args.project.cargo_args,
            args.project.timeout,
            &log,
        )?;
        if !passes(&at_merge) {
            eprintln!("{name}: cargo test does not pass at the merge; skipped");
            skipped_real += 1;
            continue;
        }
        let mut row = Row {
            name,
            merge: merge.to_owned(),
            parents: parents(&scratch, merge)?.len(),
            tests: counted(&at_merge),
            ..Row::default()
        };
        merge_check(&ekstazi, &scratch, &args.project, &log, &mut row)?;
        eprintln!("{}", describe(&row));
        rows.push(row);
    }

    // Built conflicts.
    let listing = output(
        evidence::git(&scratch, &["rev-list", "--no-merges", "-n"])
            .arg(args.window.to_string())
            .arg(&args.from),
    )?;
    let mut rng = mutate::SplitMix(args.seed ^ 0x3e46);
    for (construction, wanted, prefix) in [
        (Construction::OwnTest, args.merges, "built"),
        (Construction::Reach, args.semantic, "semantic"),
    ] {
        let mut built = 0;
        for (index, commit) in listing.lines().enumerate() {
            if built >= wanted {
                break;
            }
            let name = format!("{prefix}-{built:02}-{}", &commit[..10]);
            let log = logs.join(format!("{name}.log"));
            let octopus =
                args.octopus_every > 0 && built % args.octopus_every == args.octopus_every - 1;
            let plan = Plan {
                commit,
                index,
                construction,
                octopus,
                log: &log,
            };
            match build_conflict(args, &ekstazi, &scratch, &plan, &mut rng) {
                Ok(Some(mut row)) => {
                    row.name = name;
                    merge_check(&ekstazi, &scratch, &args.project, &log, &mut row)?;
                    eprintln!("{}", describe(&row));
                    rows.push(row);
                    built += 1;
                }
                Ok(None) => {}
                Err(e) => eprintln!("{}: {e:#}", &commit[..10]),
            }
            // Partial results survive an interrupted run.
            write_results(args, &rows, skipped_real)?;
        }
    }
    write_results(args, &rows, skipped_real)?;
    eprintln!("results in {}", args.project.out.display());
    Ok(())
}

/// One merge to try to build: side A's commit (its place in the window
/// seeds the mutants' order) and how to choose the other sides.
struct Plan<'a> {
    commit: &'a str,
    index: usize,
    construction: Construction,
    octopus: bool,
    log: &'a Path,
}

/// A test to build a merge around: the functions side B may mutate, and
/// everything it executes at A (a third side mutates none of those).
struct Target {
    test: TestId,
    mutate_in: BTreeSet<String>,
    executed_at_a: BTreeSet<String>,
}

/// A conflicting merge with the plan's commit as side A, or `None` when no
/// test and mutant of the plan's construction make one.
fn build_conflict(
    args: &MergeEvalArgs,
    ekstazi: &Path,
    scratch: &Path,
    plan: &Plan,
    rng: &mut mutate::SplitMix,
) -> Result<Option<Row>> {
    let build = Build {
        args,
        ekstazi,
        scratch,
        plan,
    };
    let Some((parent, own_static)) = build.candidate()? else {
        return Ok(None);
    };
    let Some(side_a) = build.side_a(parent, &own_static)? else {
        return Ok(None);
    };
    let sites = build.sites(&side_a.parent)?;
    let targets = match plan.construction {
        Construction::OwnTest => side_a.own_test_targets(),
        Construction::Reach => build.reach_targets(&side_a, &sites, rng)?,
    };
    if targets.is_empty() {
        return Ok(None);
    }
    build.try_targets(&side_a, &sites, &targets, rng)
}

/// What building one merge works with.
struct Build<'a> {
    args: &'a MergeEvalArgs,
    ekstazi: &'a Path,
    scratch: &'a Path,
    plan: &'a Plan<'a>,
}

/// Side A as measured: its parent (the base), `cargo test` at both, its
/// own tests, and every test's records at A.
struct SideA {
    parent: String,
    at_base: RetestAll,
    at_a: RetestAll,
    own: BTreeSet<TestId>,
    records: tempfile::TempDir,
}

/// Where side B can put a mutant, and the functions they are in.
struct Sites {
    mutants: Vec<Mutant>,
    spans: Spans,
}

impl Sites {
    fn in_any(&self, m: &Mutant, names: &BTreeSet<String>) -> bool {
        enclosing(&self.spans, m).is_some_and(|f| names.contains(f))
    }

    /// The sites in the named functions.
    fn inside(&self, names: &BTreeSet<String>) -> Vec<Mutant> {
        self.mutants
            .iter()
            .filter(|m| self.in_any(m, names))
            .cloned()
            .collect()
    }

    /// The sites in none of the named functions.
    fn outside(&self, names: &BTreeSet<String>) -> Vec<&Mutant> {
        self.mutants
            .iter()
            .filter(|m| enclosing(&self.spans, m).is_none_or(|f| !names.contains(f)))
            .collect()
    }
}

impl SideA {
    /// MCon4J's targets: up to two of side A's own tests that pass at A,
    /// each mutated in anything it executes there.
    fn own_test_targets(&self) -> Vec<Target> {
        self.own
            .iter()
            .filter(|id| passes_at(&self.at_a, id))
            .take(2)
            .map(|id| {
                let executed = executed_functions(self.records.path(), id);
                Target {
                    test: id.clone(),
                    mutate_in: executed.clone(),
                    executed_at_a: executed,
                }
            })
            .collect()
    }
}

fn passes_at(run: &RetestAll, id: &TestId) -> bool {
    run.outcomes.get(id).is_some_and(|o| o == "ok")
}

impl Build<'_> {
    /// Side A's one parent and the tests its change adds or edits, by
    /// name; `None` when the commit cannot be this plan's side A (a merge,
    /// no mutable source changed, or for MCon4J's construction no test of
    /// its own).
    fn candidate(&self) -> Result<Option<(String, BTreeSet<String>)>> {
        let commit = self.plan.commit;
        let parent = match &parents(self.scratch, commit)?[..] {
            [one] => one.clone(),
            _ => return Ok(None),
        };
        let changed = output(&mut evidence::git(
            self.scratch,
            &["diff", "--name-only", &parent, commit],
        ))?;
        let changed: Vec<&str> = changed.lines().collect();
        if !changed
            .iter()
            .any(|f| mutate::is_mutable_source(f, &self.args.sources))
        {
            return Ok(None);
        }
        let own_static = own_tests(self.scratch, &parent, commit, &changed)?;
        if self.plan.construction == Construction::OwnTest {
            if own_static.is_empty() {
                return Ok(None);
            }
            eprintln!(
                "{}: side A adds or changes {}",
                &commit[..10],
                own_static.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(Some((parent, own_static)))
    }

    /// `cargo test` at the checked-out commit.
    fn retest(&self) -> Result<RetestAll> {
        let project = &self.args.project;
        evidence::retest_all(
            self.scratch,
            &project.cargo_args,
            project.timeout,
            self.plan.log,
        )
    }

    /// `cargo test` at `rev`, checked out.
    fn retest_at(&self, rev: &str) -> Result<RetestAll> {
        evidence::checkout_clean(self.scratch, rev)?;
        self.retest()
    }

    /// Every test's records at the checked-out commit, into `state`.
    fn record_all(&self, state: &Path) -> Result<()> {
        record_all(self.args, self.ekstazi, self.scratch, state, self.plan.log)
    }

    /// `cargo test` at the base and at A (`None` when either does not
    /// build), side A's own tests, and what every test executes at A.
    fn side_a(&self, parent: String, own_static: &BTreeSet<String>) -> Result<Option<SideA>> {
        let at_base = self.retest_at(&parent)?;
        let at_a = self.retest_at(self.plan.commit)?;
        if !at_base.built || !at_a.built {
            eprintln!("{}: does not build", &self.plan.commit[..10]);
            return Ok(None);
        }
        // Side A's own tests, as the issue defines them: added (a name the
        // base has no test of: a test moved to another module is one), or with
        // changed text.
        let own: BTreeSet<TestId> = at_a
            .outcomes
            .keys()
            .filter(|id| {
                !at_base.outcomes.contains_key(*id) || own_static.contains(last_segment(&id.1))
            })
            .cloned()
            .collect();
        // What tests execute at A (and, for a semantic conflict, at the base).
        let records = tempfile::tempdir_in(&self.args.project.out)?;
        self.record_all(records.path())?;
        Ok(Some(SideA {
            parent,
            at_base,
            at_a,
            own,
            records,
        }))
    }

    /// Where side B can put a mutant: the parent's sources, checked out
    /// from here on.
    fn sites(&self, parent: &str) -> Result<Sites> {
        evidence::checkout_clean(self.scratch, parent)?;
        // For a semantic conflict, not next to what A changed: the functions
        // A makes a test reach are often those it edits, and git would not
        // merge the two. (MCon4J's construction tries them, as it was
        // measured.)
        let touched = if self.plan.construction == Construction::Reach {
            changed_lines(self.scratch, parent, self.plan.commit)?
        } else {
            HashMap::new()
        };
        let mutants: Vec<Mutant> = mutate::candidates(self.scratch, &self.args.sources, &[])?
            .into_iter()
            .filter(|m| {
                touched.get(&m.file).is_none_or(|ranges| {
                    !ranges
                        .iter()
                        .any(|(from, to)| m.line + 3 >= *from && m.line <= to + 3)
                })
            })
            .collect();
        let spans = function_spans_of(self.scratch, &mutants);
        Ok(Sites { mutants, spans })
    }

    /// A semantic conflict's targets: up to three tests (from a seeded
    /// place in their order) that are not A's own, pass at the base and at
    /// A, and at A execute functions they did not at the base, where a
    /// mutant can go.
    fn reach_targets(
        &self,
        side_a: &SideA,
        sites: &Sites,
        rng: &mut mutate::SplitMix,
    ) -> Result<Vec<Target>> {
        let at_base_state = tempfile::tempdir_in(&self.args.project.out)?;
        self.record_all(at_base_state.path())?;
        let mut targets: Vec<Target> = side_a
            .at_base
            .outcomes
            .keys()
            .filter(|id| {
                !side_a.own.contains(*id)
                    && passes_at(&side_a.at_base, id)
                    && passes_at(&side_a.at_a, id)
            })
            .filter_map(|id| {
                let executed_at_a = executed_functions(side_a.records.path(), id);
                let before = executed_functions(at_base_state.path(), id);
                // By name: a function of a name the test never ran at
                // the base is one it cannot reach at side B either.
                let mutate_in: BTreeSet<String> =
                    executed_at_a.difference(&before).cloned().collect();
                // (A function A added has no site at the parent.)
                let has_sites = || sites.mutants.iter().any(|m| sites.in_any(m, &mutate_in));
                (!before.is_empty() && has_sites()).then(|| Target {
                    test: id.clone(),
                    mutate_in,
                    executed_at_a,
                })
            })
            .collect();
        targets.sort_by(|a, b| a.test.cmp(&b.test));
        let start = if targets.is_empty() {
            0
        } else {
            rng.below(targets.len())
        };
        targets.rotate_left(start);
        targets.truncate(3);
        if !targets.is_empty() {
            eprintln!(
                "{}: side A makes {} reach functions it did not run before",
                &self.plan.commit[..10],
                targets
                    .iter()
                    .map(|t| t.test.1.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(targets)
    }

    /// Up to `--tries` mutants per target, in a seeded order (for a
    /// semantic conflict, none tried for an earlier target), until one
    /// makes a conflict.
    fn try_targets(
        &self,
        side_a: &SideA,
        sites: &Sites,
        targets: &[Target],
        rng: &mut mutate::SplitMix,
    ) -> Result<Option<Row>> {
        let reach = self.plan.construction == Construction::Reach;
        let mut tried_before: BTreeSet<String> = BTreeSet::new();
        for target in targets {
            let inside = sites.inside(&target.mutate_in);
            let outside = sites.outside(&target.executed_at_a);
            let order = mutate::interleave(inside, self.args.seed ^ self.plan.index as u64);
            let fresh = order
                .into_iter()
                .filter(|m| !reach || tried_before.insert(describe_mutant(m)));
            for mutant in fresh.take(self.args.tries) {
                if let ControlFlow::Break(row) =
                    self.try_mutant(side_a, target, &mutant, &outside, rng)?
                {
                    return Ok(row);
                }
            }
        }
        Ok(None)
    }

    /// The merge of side A with side B's mutant (and a third side's),
    /// judged by `cargo test` at it and at each parent: the conflict's row,
    /// `Continue` to the next mutant, or `Break(None)` when an octopus has
    /// no third side.
    fn try_mutant(
        &self,
        side_a: &SideA,
        target: &Target,
        mutant: &Mutant,
        outside: &[&Mutant],
        rng: &mut mutate::SplitMix,
    ) -> Result<ControlFlow<Option<Row>>> {
        let Some((sides, mutants)) = self.other_sides(&side_a.parent, mutant, outside, rng)? else {
            return Ok(ControlFlow::Break(None));
        };
        let test = &target.test;
        let tried = format!("{}: {}", &self.plan.commit[..10], describe_mutant(mutant));
        let Some(merge) = merge_of(self.scratch, self.plan.commit, &sides)? else {
            eprintln!("{tried}: textual conflict");
            return Ok(ControlFlow::Continue(()));
        };
        let at_merge = self.retest()?;
        // A mutant that makes a test hang is no conflict to name:
        // `cargo test` was stopped, and what it did not reach has no
        // outcome to judge by.
        if !at_merge.built
            || at_merge.timed_out
            || at_merge.outcomes.get(test).is_none_or(|o| o == "ok")
        {
            eprintln!("{tried}: {} passes at the merge (or no outcome)", test.1);
            return Ok(ControlFlow::Continue(()));
        }
        let mut at_parents = vec![side_a.at_a.outcomes.clone()];
        for side in &sides {
            at_parents.push(self.retest_at(side)?.outcomes);
        }
        let truth = ground_truth(&at_merge.outcomes, &at_parents, &side_a.own);
        // A mutant the test reaches at side B after all (a function of
        // the same name elsewhere) makes no semantic conflict.
        if self.plan.construction == Construction::Reach
            && truth.get(test) != Some(&"semantic conflict")
        {
            eprintln!("{tried}: {} fails at a parent too", test.1);
            return Ok(ControlFlow::Continue(()));
        }
        Ok(ControlFlow::Break(Some(Row {
            construction: Some(self.plan.construction),
            merge,
            parents: 1 + sides.len(),
            test: Some(test.clone()),
            mutants,
            truth,
            tests: counted(&at_merge),
            ..Row::default()
        })))
    }

    /// Side B, the parent with the mutant, and for an octopus a third side
    /// with a mutant in another file that the test executes nothing of at
    /// A; the sides' commits and their mutants, or `None` when there is no
    /// such third mutant.
    fn other_sides(
        &self,
        parent: &str,
        mutant: &Mutant,
        outside: &[&Mutant],
        rng: &mut mutate::SplitMix,
    ) -> Result<Option<(Vec<String>, Vec<String>)>> {
        let mut sides = vec![side(self.scratch, parent, &[mutant])?];
        let mut mutants = vec![describe_mutant(mutant)];
        if self.plan.octopus {
            let other: Vec<&Mutant> = outside
                .iter()
                .filter(|m| m.file != mutant.file)
                .copied()
                .collect();
            if other.is_empty() {
                return Ok(None);
            }
            let third = other[rng.below(other.len())];
            sides.push(side(self.scratch, parent, &[third])?);
            mutants.push(describe_mutant(third));
        }
        Ok(Some((sides, mutants)))
    }
}

/// `cargo ekstazi test` of every test at the checked-out commit, its
/// records into `state`.
fn record_all(
    args: &MergeEvalArgs,
    ekstazi: &Path,
    scratch: &Path,
    state: &Path,
    log: &Path,
) -> Result<()> {
    evidence::ekstazi_test(&EkstaziOpts {
        ekstazi,
        dir: scratch,
        state,
        granularity: "function",
        cargo_args: &args.project.cargo_args,
        target_dir: None,
        log,
        report: &args.project.out.join("report.json"),
        timeout: args.project.timeout,
        mode: evidence::RunMode::Record,
    })?;
    Ok(())
}

/// The verdict of every test that fails at the merge, by the issue's
/// definitions (own tests are side A's: the mutant sides change no test).
fn ground_truth(
    at_merge: &HashMap<TestId, String>,
    at_parents: &[HashMap<TestId, String>],
    own_a: &BTreeSet<TestId>,
) -> BTreeMap<TestId, &'static str> {
    let mut truth = BTreeMap::new();
    for (test, outcome) in at_merge {
        if outcome == "ok" || outcome == "ignored" {
            continue;
        }
        let there: Vec<Option<&str>> = at_parents
            .iter()
            .map(|p| p.get(test).map(String::as_str).filter(|o| *o != "ignored"))
            .collect();
        let verdict = if there.iter().any(|o| o.is_some_and(|o| o != "ok")) {
            "already failing"
        } else if own_a.contains(test) && there[0] == Some("ok") {
            "lost behaviour"
        } else if there.iter().all(|o| *o == Some("ok")) {
            "semantic conflict"
        } else {
            continue;
        };
        truth.insert(test.clone(), verdict);
    }
    truth
}

/// The lines (first, last; 1-based, at `parent`) that `commit` changed,
/// per file: the hunks of `git diff -U0`.
fn changed_lines(
    scratch: &Path,
    parent: &str,
    commit: &str,
) -> Result<HashMap<String, Vec<(usize, usize)>>> {
    let diff = output(&mut evidence::git(
        scratch,
        &["diff", "-U0", "--no-color", parent, commit],
    ))?;
    let mut out: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    let mut file = None;
    for line in diff.lines() {
        if let Some(path) = line.strip_prefix("--- ") {
            file = path.strip_prefix("a/").map(str::to_owned);
        } else if let (Some(hunk), Some(file)) = (line.strip_prefix("@@ -"), &file) {
            let old = hunk.split(' ').next().unwrap_or_default();
            let (start, len) = old.split_once(',').unwrap_or((old, "1"));
            if let (Ok(start), Ok(len)) = (start.parse::<usize>(), len.parse::<usize>()) {
                out.entry(file.clone())
                    .or_default()
                    .push((start, start + len.saturating_sub(1)));
            }
        }
    }
    Ok(out)
}

/// `cargo ekstazi merge-check --json` at the row's merge, from an empty
/// state; its verdicts and counts go into the row.
fn merge_check(
    ekstazi: &Path,
    scratch: &Path,
    project: &evidence::Project,
    log: &Path,
    row: &mut Row,
) -> Result<()> {
    evidence::checkout_clean(scratch, &row.merge)?;
    let state = tempfile::tempdir_in(&project.out)?;
    let clock = Instant::now();
    let ran = Command::new(ekstazi)
        .args(["ekstazi", "merge-check", "--json", "--state-dir"])
        .arg(state.path())
        .arg(&row.merge)
        .current_dir(scratch)
        .env("TMPDIR", evidence::private_tmp(scratch))
        // Every nested `cargo ekstazi test` kills a test that hangs.
        .env(
            "EKSTAZI_TIMEOUT",
            project.timeout.as_secs().max(1).to_string(),
        )
        .output()?;
    row.wall = clock.elapsed().as_secs_f64();
    row.exit = ran.status.code();
    let mut file = evidence::log_file(log)?;
    std::io::Write::write_all(
        &mut file,
        format!(
            "== cargo ekstazi merge-check {}\n{}\n{}\n",
            row.merge,
            String::from_utf8_lossy(&ran.stdout),
            String::from_utf8_lossy(&ran.stderr)
        )
        .as_bytes(),
    )?;
    let json: serde_json::Value = match serde_json::from_slice(&ran.stdout) {
        Ok(json) => json,
        Err(_) => {
            row.error = Some(
                String::from_utf8_lossy(&ran.stderr)
                    .lines()
                    .last()
                    .unwrap_or("failed")
                    .to_owned(),
            );
            return Ok(());
        }
    };
    let names = |key: &str| json[key].as_array().map_or(0, Vec::len);
    row.ran = names("ran_at_merge");
    row.both_sides = names("both_sides");
    row.untested = names("untested");
    for conflict in json["conflicts"].as_array().into_iter().flatten() {
        if let (Some(test), Some(kind)) = (conflict["test"].as_str(), conflict["kind"].as_str())
            && let Some((binary, name)) = test.split_once(' ')
        {
            row.reported
                .insert((binary.to_owned(), name.to_owned()), kind.to_owned());
        }
    }
    Ok(())
}

/// A commit of `parent`'s tree with `mutants` applied.
fn side(scratch: &Path, parent: &str, mutants: &[&Mutant]) -> Result<String> {
    evidence::checkout_clean(scratch, parent)?;
    for mutant in mutants {
        let path = scratch.join(&mutant.file);
        let text = std::fs::read_to_string(&path)?;
        std::fs::write(&path, mutant.apply(&text))?;
    }
    run_ok(
        evidence::git(scratch, &identity(&["commit", "-q", "-a", "-m"]))
            .arg(format!("mutant: {}", describe_mutant(mutants[0]))),
    )?;
    Ok(output(&mut evidence::git(scratch, &["rev-parse", "HEAD"]))?
        .trim()
        .to_owned())
}

/// `sides` merged into `commit` with git's default strategy, checked out;
/// `None` on a textual conflict.
fn merge_of(scratch: &Path, commit: &str, sides: &[String]) -> Result<Option<String>> {
    evidence::checkout_clean(scratch, commit)?;
    let mut merge = identity(&["merge", "--no-ff", "--no-edit", "-q"]);
    merge.extend(sides.iter().map(String::as_str));
    let merged = evidence::git(scratch, &merge)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?
        .success();
    if !merged {
        let _ = evidence::git(scratch, &["merge", "--abort"]).status();
        return Ok(None);
    }
    Ok(Some(
        output(&mut evidence::git(scratch, &["rev-parse", "HEAD"]))?
            .trim()
            .to_owned(),
    ))
}

fn identity<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![
        "-c",
        "user.name=eval merges",
        "-c",
        "user.email=eval@localhost",
        "-c",
        "commit.gpgsign=false",
    ];
    all.extend(args);
    all
}

fn parents(scratch: &Path, commit: &str) -> Result<Vec<String>> {
    Ok(output(&mut evidence::git(
        scratch,
        &["rev-parse", &format!("{commit}^@")],
    ))?
    .lines()
    .map(str::to_owned)
    .collect())
}

fn passes(run: &RetestAll) -> bool {
    run.built
        && !run.timed_out
        && !run.outcomes.is_empty()
        && run.outcomes.values().all(|o| o == "ok" || o == "ignored")
}

fn counted(run: &RetestAll) -> usize {
    run.outcomes.values().filter(|o| *o != "ignored").count()
}

fn describe_mutant(m: &Mutant) -> String {
    format!("{}:{} {}", m.file, m.line, m.what)
}

fn last_segment(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name)
}

/// The test functions (a `#[…test]` attribute) that `commit` adds or
/// changes against `parent`, by name, in the Rust files it changes.
fn own_tests(
    scratch: &Path,
    parent: &str,
    commit: &str,
    changed: &[&str],
) -> Result<BTreeSet<String>> {
    let mut own = BTreeSet::new();
    for file in changed.iter().filter(|f| f.ends_with(".rs")) {
        let text_at = |rev: &str| {
            output(&mut evidence::git(
                scratch,
                &["show", &format!("{rev}:{file}")],
            ))
            .unwrap_or_default()
        };
        let before = test_functions(&text_at(parent));
        for (name, text) in test_functions(&text_at(commit)) {
            if before.get(&name) != Some(&text) {
                own.insert(name);
            }
        }
    }
    Ok(own)
}

/// Test functions by name, with their text (tokens, so that formatting
/// alone is no change).
fn test_functions(text: &str) -> BTreeMap<String, String> {
    struct Tests(BTreeMap<String, String>);
    impl<'ast> Visit<'ast> for Tests {
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            let is_test = f
                .attrs
                .iter()
                .any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"));
            if is_test {
                let tokens = quote::ToTokens::to_token_stream(f).to_string();
                self.0.insert(f.sig.ident.to_string(), tokens);
            }
            syn::visit::visit_item_fn(self, f);
        }
    }
    let mut tests = Tests(BTreeMap::new());
    if let Ok(ast) = syn::parse_file(text) {
        tests.visit_file(&ast);
    }
    tests.0
}

/// Each function's byte span and name, per file of `sites`.
type Spans = HashMap<String, Vec<(usize, usize, String)>>;

fn function_spans_of(scratch: &Path, sites: &[Mutant]) -> Spans {
    let files: BTreeSet<&str> = sites.iter().map(|m| m.file.as_str()).collect();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(scratch.join(file)).unwrap_or_default();
            (file.to_owned(), function_spans(&text))
        })
        .collect()
}

/// The name of the innermost function around a mutant.
fn enclosing<'a>(spans: &'a Spans, m: &Mutant) -> Option<&'a str> {
    spans
        .get(&m.file)?
        .iter()
        .filter(|(start, end, _)| *start <= m.start && m.end <= *end)
        .min_by_key(|(start, end, _)| end - start)
        .map(|(_, _, name)| name.as_str())
}

fn function_spans(text: &str) -> Vec<(usize, usize, String)> {
    struct Functions<'a> {
        line_starts: Vec<usize>,
        text: &'a str,
        found: Vec<(usize, usize, String)>,
    }
    impl Functions<'_> {
        fn offset(&self, at: proc_macro2::LineColumn) -> usize {
            let start = self.line_starts.get(at.line.saturating_sub(1)).copied();
            let start = start.unwrap_or(self.text.len());
            let line = &self.text[start..];
            start
                + line
                    .char_indices()
                    .nth(at.column)
                    .map_or(line.len(), |(i, _)| i)
        }
        fn add(&mut self, ident: &syn::Ident, span: proc_macro2::Span) {
            let (start, end) = (self.offset(span.start()), self.offset(span.end()));
            self.found.push((start, end, ident.to_string()));
        }
    }
    impl<'ast> Visit<'ast> for Functions<'_> {
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            self.add(&f.sig.ident, syn::spanned::Spanned::span(f));
            syn::visit::visit_item_fn(self, f);
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            self.add(&f.sig.ident, syn::spanned::Spanned::span(f));
            syn::visit::visit_impl_item_fn(self, f);
        }
        fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
            self.add(&f.sig.ident, syn::spanned::Spanned::span(f));
            syn::visit::visit_trait_item_fn(self, f);
        }
    }
    let mut functions = Functions {
        line_starts: std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect(),
        text,
        found: Vec::new(),
    };
    if let Ok(ast) = syn::parse_file(text) {
        functions.visit_file(&ast);
    }
    functions.found
}

/// The names (last path segment) of the functions a test's record says it
/// executed, in its own binary and in the programs it ran.
fn executed_functions(state: &Path, (binary, test): &TestId) -> BTreeSet<String> {
    use ekstazi_core::storage::store::{Loaded, Store};
    let store = Store::new(state);
    let Loaded::Found(record) = store.load(binary, test) else {
        return BTreeSet::new();
    };
    let table = ekstazi_core::digests::functions::FunctionTable::load(&store.functions_dir());
    record
        .code
        .iter()
        .flat_map(|code| code.functions.iter())
        .filter_map(|id| table.get(id))
        .filter_map(|f| function_name(&ekstazi_core::digests::fingerprint::demangle(&f.name)))
        .collect()
}

/// `a::B<T>::c::{{closure}}::h0123…` → `c`.
fn function_name(demangled: &str) -> Option<String> {
    let mut flat = String::with_capacity(demangled.len());
    let mut depth = 0usize;
    for c in demangled.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => flat.push(c),
            _ => {}
        }
    }
    flat.rsplit("::")
        .find(|s| {
            let hash = s.len() == 17
                && s.starts_with('h')
                && s[1..].chars().all(|c| c.is_ascii_hexdigit());
            !(s.is_empty() || s.starts_with('{') || hash)
        })
        .map(str::to_owned)
}

fn describe(row: &Row) -> String {
    let (right, wrong, missed, made_up) = row.tally();
    let mut line = format!(
        "{}: {} parents, ran {}/{} tests at the merge, {} meet two sides",
        row.name, row.parents, row.ran, row.tests, row.both_sides
    );
    if let Some((truth, reported)) = row.own_test() {
        let _ = write!(
            line,
            "; its test: {truth}, merge-check: {}",
            reported.unwrap_or("nothing")
        );
    }
    let _ = write!(
        line,
        "; verdicts {right} right, {wrong} wrong, {missed} missed, {made_up} unfounded; exit {}",
        row.exit.map_or("-".to_owned(), |c| c.to_string())
    );
    if let Some(e) = &row.error {
        let _ = write!(line, "; error: {e}");
    }
    line
}

fn write_results(args: &MergeEvalArgs, rows: &[Row], skipped_real: usize) -> Result<()> {
    let mut csv = String::from(
        "name,merge,parents,kind,test,truth,reported,tests,ran,both_sides,untested,\
         right,wrong,missed,unfounded,exit,wall,mutants,error\n",
    );
    for row in rows {
        let (right, wrong, missed, made_up) = row.tally();
        let (truth, reported) = row.own_test().unwrap_or(("", None));
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.1},\"{}\",\"{}\"",
            row.name,
            row.merge,
            row.parents,
            match row.construction {
                Some(Construction::OwnTest) => "built",
                Some(Construction::Reach) => "semantic",
                None => "real",
            },
            row.test
                .as_ref()
                .map_or(String::new(), |(b, n)| format!("{b} {n}")),
            truth,
            reported.unwrap_or(""),
            row.tests,
            row.ran,
            row.both_sides,
            row.untested,
            right,
            wrong,
            missed,
            made_up,
            row.exit.map_or(String::new(), |c| c.to_string()),
            row.wall,
            row.mutants.join(" | ").replace('"', "'"),
            row.error.as_deref().unwrap_or("").replace('"', "'"),
        );
    }
    std::fs::write(args.project.out.join("merges.csv"), csv)?;
    // Each merge's verdicts, test by test, to check a disagreement by.
    let name = |(binary, test): &TestId| format!("{binary} {test}");
    let details: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "name": row.name,
                "merge": row.merge,
                "test": row.test.as_ref().map(name),
                "mutants": row.mutants,
                "truth": row.truth.iter().map(|(t, k)| (name(t), *k)).collect::<BTreeMap<_, _>>(),
                "reported": row.reported.iter().map(|(t, k)| (name(t), k)).collect::<BTreeMap<_, _>>(),
                "error": row.error,
            })
        })
        .collect();
    std::fs::write(
        args.project.out.join("merges.json"),
        serde_json::to_string_pretty(&details)?,
    )?;
    std::fs::write(
        args.project.out.join("summary.md"),
        summary(args, rows, skipped_real),
    )?;
    Ok(())
}

fn summary(args: &MergeEvalArgs, rows: &[Row], skipped_real: usize) -> String {
    let (built, real): (Vec<&Row>, Vec<&Row>) = rows.iter().partition(|r| r.test.is_some());
    let mut s = format!(
        "# merge-check on {} (from {})\n\n",
        args.project.repo.display(),
        args.from
    );
    for (construction, what, whose) in [
        (Construction::OwnTest, "Built conflicts", "side A's test"),
        (
            Construction::Reach,
            "Built semantic conflicts",
            "the test side A makes reach side B's mutant",
        ),
    ] {
        let these: Vec<&&Row> = built
            .iter()
            .filter(|r| r.construction == Some(construction))
            .collect();
        if these.is_empty() {
            continue;
        }
        let octopus = these.iter().filter(|r| r.parents > 2).count();
        let detected = these
            .iter()
            .filter(|r| r.own_test().is_some_and(|(_, rep)| rep.is_some()))
            .count();
        let right = these
            .iter()
            .filter(|r| r.own_test().is_some_and(|(t, rep)| rep == Some(t)))
            .count();
        let _ = writeln!(
            s,
            "{what}: {} ({octopus} octopus), {whose} detected in {detected} ({:.0} %), \
             classified right in {right} ({:.0} %).\n",
            these.len(),
            stats::share(detected, these.len()),
            stats::share(right, these.len()),
        );
    }
    let errors = rows.iter().filter(|r| r.error.is_some()).count();
    let _ = writeln!(s, "merge-check failed on {errors} merge(s).\n");
    // Per ground-truth verdict: tests, merge-check's same verdict, another
    // verdict, none (not run at the merge).
    let mut by_kind: BTreeMap<&str, (usize, usize, usize, usize)> = BTreeMap::new();
    let (mut all_right, mut all_wrong, mut all_missed, mut all_made_up) = (0, 0, 0, 0);
    for row in &built {
        let (r, w, m, u) = row.tally();
        all_right += r;
        all_wrong += w;
        all_missed += m;
        all_made_up += u;
        for (test, kind) in &row.truth {
            let e = by_kind.entry(kind).or_default();
            e.0 += 1;
            match row.reported.get(test) {
                Some(k) if k == kind => e.1 += 1,
                Some(_) => e.2 += 1,
                None => e.3 += 1,
            }
        }
    }
    let _ = writeln!(
        s,
        "Every test failing at a built merge: {} right, {} classified wrong, {} missed, \
         {} reported without ground truth.\n",
        all_right, all_wrong, all_missed, all_made_up
    );
    s.push_str(
        "| ground truth | tests | merge-check agrees | another verdict | not run at the merge |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for kind in KINDS {
        let (n, ok, other, none) = by_kind.get(kind).copied().unwrap_or_default();
        let _ = writeln!(s, "| {kind} | {n} | {ok} | {other} | {none} |");
    }
    let ran: usize = built.iter().map(|r| r.ran).sum();
    let tests: usize = built.iter().map(|r| r.tests).sum();
    let _ = writeln!(
        s,
        "\nTests run at the built merges: {ran} of {tests} ({:.1} %).\n",
        stats::share(ran, tests)
    );
    let alarms = real.iter().filter(|r| r.blamed() > 0).count();
    let ran: usize = real.iter().map(|r| r.ran).sum();
    let tests: usize = real.iter().map(|r| r.tests).sum();
    let untested = real.iter().filter(|r| r.untested > 0).count();
    let _ = writeln!(
        s,
        "Real merges that pass: {} checked ({skipped_real} skipped: cargo test does not pass \
         there), false alarms on {alarms}; tests run at the merge: {ran} of {tests} ({:.1} %); \
         untested interactions listed at {untested}.\n",
        real.len(),
        stats::share(ran, tests),
    );
    s.push_str(
        "| merge | parents | the test it was built around | truth | merge-check | ran | tests | wall s |\n",
    );
    s.push_str("|---|---:|---|---|---|---:|---:|---:|\n");
    for row in rows {
        let (truth, reported) = row.own_test().unwrap_or(("", None));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            row.name,
            row.parents,
            row.test.as_ref().map_or("—".to_owned(), |(_, n)| n.clone()),
            if truth.is_empty() { "—" } else { truth },
            match (&row.error, reported) {
                (Some(e), _) => format!("error: {e}"),
                (None, Some(k)) => k.to_owned(),
                (None, None) if row.blamed() > 0 => format!("{} blamed", row.blamed()),
                (None, None) => "nothing".to_owned(),
            },
            row.ran,
            row.tests,
            row.wall
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_are_the_last_segment_outside_generics_and_closures() {
        let name = |s| function_name(s).unwrap();
        assert_eq!(name("hexyl::Printer<W>::print_byte"), "print_byte");
        assert_eq!(
            name("<dust::node::Node as core::cmp::Ord>::cmp::h0123456789abcdef"),
            "cmp"
        );
        assert_eq!(
            name("fd::walk::spawn_senders::{{closure}}"),
            "spawn_senders"
        );
    }

    #[test]
    fn a_test_is_own_when_added_or_its_text_changed() {
        let before = "#[test]\nfn kept() { assert!(true) }\n#[test]\nfn changed() { f(1) }";
        let after = "#[test]\nfn kept() {\n    assert!(true)\n}\n#[test]\nfn changed() { f(2) }\n\
                     mod m { #[tokio::test]\nasync fn added() {} }";
        let before = test_functions(before);
        let own: Vec<String> = test_functions(after)
            .into_iter()
            .filter(|(n, t)| before.get(n) != Some(t))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(own, ["added", "changed"]);
    }

    #[test]
    fn a_mutant_belongs_to_the_innermost_function() {
        let text = "fn outer() {\n    fn inner() { 1 < 2; }\n    3 > 4;\n}\n";
        let spans: Spans = [("a.rs".to_owned(), function_spans(text))].into();
        let at = |needle: &str| Mutant {
            operator: mutate::Operator::Comparison,
            file: "a.rs".to_owned(),
            line: 0,
            start: text.find(needle).unwrap(),
            end: text.find(needle).unwrap() + 1,
            with: String::new(),
            what: String::new(),
        };
        assert_eq!(enclosing(&spans, &at("<")), Some("inner"));
        assert_eq!(enclosing(&spans, &at(">")), Some("outer"));
    }

    #[test]
    fn ground_truth_follows_the_documented_order() {
        let id = |n: &str| ("b".to_owned(), n.to_owned());
        let outcomes = |pairs: &[(&str, &str)]| -> HashMap<TestId, String> {
            pairs
                .iter()
                .map(|(n, o)| (id(n), (*o).to_owned()))
                .collect()
        };
        let merge = outcomes(&[
            ("both", "FAILED"),
            ("new", "FAILED"),
            ("broken", "FAILED"),
            ("fine", "ok"),
        ]);
        let a = outcomes(&[
            ("both", "ok"),
            ("new", "ok"),
            ("broken", "ok"),
            ("fine", "ok"),
        ]);
        let b = outcomes(&[("both", "ok"), ("broken", "FAILED"), ("fine", "ok")]);
        let own = [id("new")].into();
        let truth = ground_truth(&merge, &[a, b], &own);
        assert_eq!(truth.get(&id("both")), Some(&"semantic conflict"));
        assert_eq!(truth.get(&id("new")), Some(&"lost behaviour"));
        assert_eq!(truth.get(&id("broken")), Some(&"already failing"));
        assert_eq!(truth.get(&id("fine")), None);
    }
}
