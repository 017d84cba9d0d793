//! `cargo ekstazi merge-check [<MERGE> | <REV> <REV>...]`: the tests where
//! the changes of a merge's sides meet, run at the merge, and their
//! failures classified (`ekstazi_core::workflows::merge_check`, after TOM's
//! semantic conflicts).
//!
//! Everything happens in a scratch git worktree (`worktree`), so the
//! user's checkout and branches are never touched. A prospective merge of
//! revisions is made there, as a detached commit. The merge base and the
//! parents are known from the records the history filed there, when it
//! holds them for all; else at each every test is built and run: that
//! gives each test's outcome and what it executed, and the fingerprints of
//! every function the builds hold, so that each side's changes are known
//! even where no test executes them. Then only the tests that meet two or more sides,
//! and those a side added or changed, run at the merge. What the runs file
//! joins the history, so a later `cargo ekstazi test` at the merge or its
//! parents can skip what they showed.

use crate::cli::{CargoOpts, MergeCheckArgs};
use crate::git::repo::Repo;
use crate::git::worktree::{Ran, TestId, Worktree, short};
use crate::style;
use anyhow::{Context, Result, bail};
use ekstazi_core::digests::fingerprint::Fp;
use ekstazi_core::digests::functions::FunctionTable;
use ekstazi_core::model::code_dep::FnId;
use ekstazi_core::model::dep::Target;
use ekstazi_core::model::path::Anchor;
use ekstazi_core::model::record::Outcome;
use ekstazi_core::storage::store::Store;
use ekstazi_core::workflows::merge_check::{self, Evidence, Functions, Side, Untested, Verdict};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(args: MergeCheckArgs) -> Result<ExitCode> {
    let opened = super::locked_repo(&args.state, "merge-check")?;
    let toplevel = opened
        .repo
        .toplevel()
        .context("cannot find the repository's top level")?;
    let mut worktree = Worktree::new(
        &opened.repo,
        &opened.root,
        &opened.store,
        &args.state.cargo,
        "merge-check",
    )?;
    let merge = Merge::of(&args.revs, &opened.repo, &toplevel, &mut worktree)?;
    let surveys = Surveys::take(&args, &opened.store, &mut worktree, &merge)?;
    let workspace_in_repo = opened.root.strip_prefix(&toplevel).unwrap_or(Path::new(""));
    let sides = sides(&merge, &surveys, &toplevel, workspace_in_repo)?;
    let tests = surveys.tests();
    let meeting = Meeting::of(&tests, &sides, &surveys);
    let at_merge = run_at_merge(&mut worktree, &merge, &meeting.selected)?;
    let conflicts = conflicts(
        &mut worktree,
        &merge,
        &surveys,
        &meeting,
        &at_merge,
        args.reruns,
    )?;
    let untested = untested(&sides, &meeting, &surveys);
    let report = MergeCheckJson::of(merge, &surveys, &meeting, &at_merge, conflicts, untested);
    write_report(&report, &sides, args.json)?;
    Ok(exit_code(&report, &args))
}

/// The merge checked, its parents and their merge base.
struct Merge {
    commit: String,
    parents: Vec<String>,
    /// Made by `merge-check` from the revisions given (not a branch's).
    prospective: bool,
    base: String,
}

impl Merge {
    /// The merge of `revs` when they are two or more (made in the
    /// worktree), else the merge commit `revs` names (`HEAD` by default).
    fn of(revs: &[String], repo: &Repo, toplevel: &Path, worktree: &mut Worktree) -> Result<Merge> {
        let resolve = |rev: &str| {
            repo.resolve(rev)
                .with_context(|| format!("`{rev}` is not a commit of this repository"))
        };
        let (commit, parents, prospective) = if revs.len() >= 2 {
            let revs: Vec<String> = revs.iter().map(|r| resolve(r)).collect::<Result<_>>()?;
            (make_merge(worktree, &revs)?, revs, true)
        } else {
            let rev = revs.first().map_or("HEAD", String::as_str);
            let merge = resolve(rev)?;
            let parents = parents_of_merge(toplevel, rev, &merge)?;
            (merge, parents, false)
        };
        let base = merge_base(toplevel, &parents)?;
        Ok(Merge {
            commit,
            parents,
            prospective,
            base,
        })
    }

    /// The base, then each parent: the commits surveyed.
    fn surveyed(&self) -> Vec<&String> {
        std::iter::once(&self.base).chain(&self.parents).collect()
    }

    fn how_surveyed(&self, surveys: &Surveys) -> Vec<HowJson> {
        self.surveyed()
            .into_iter()
            .map(|c| HowJson {
                commit: c.clone(),
                how: if surveys.from_history {
                    "history"
                } else {
                    "built"
                },
            })
            .collect()
    }
}

/// The parents of `merge` (which `rev` names); an error when it has fewer
/// than two.
fn parents_of_merge(toplevel: &Path, rev: &str, merge: &str) -> Result<Vec<String>> {
    let parents: Vec<String> =
        crate::git::worktree::git(toplevel, &["rev-parse", &format!("{merge}^@")])?
            .lines()
            .map(str::to_owned)
            .collect();
    if parents.len() < 2 {
        bail!("`{rev}` is not a merge commit: name two or more revisions to check how they merge");
    }
    Ok(parents)
}

/// The best common ancestor of all the parents.
fn merge_base(toplevel: &Path, parents: &[String]) -> Result<String> {
    let mut base_args = vec!["merge-base", "--octopus"];
    base_args.extend(parents.iter().map(String::as_str));
    crate::git::worktree::git(toplevel, &base_args)
        .ok()
        .and_then(|out| out.lines().next().map(str::to_owned))
        .context("the revisions have no common ancestor to compare their changes with")
}

/// Every test at the base and at each parent.
struct Surveys {
    at_base: Survey,
    at_parents: Vec<Survey>,
    /// From the records filed there, not built.
    from_history: bool,
}

impl Surveys {
    fn take(
        args: &MergeCheckArgs,
        store: &Store,
        worktree: &mut Worktree,
        merge: &Merge,
    ) -> Result<Surveys> {
        let commits = merge.surveyed();
        let filed = surveys_filed(args, store, &commits);
        let from_history = filed.is_some();
        let mut surveys = match filed {
            Some(filed) => filed,
            None => surveys_built(worktree, &commits)?,
        };
        let at_parents = surveys.split_off(1);
        let at_base = surveys.pop().expect("the base's survey");
        Ok(Surveys {
            at_base,
            at_parents,
            from_history,
        })
    }

    /// Each parent's survey, then the base's.
    fn all(&self) -> impl Iterator<Item = &Survey> {
        self.at_parents.iter().chain([&self.at_base])
    }

    /// Every test surveyed anywhere.
    fn tests(&self) -> BTreeSet<TestId> {
        let mut tests = BTreeSet::new();
        for at in self.all() {
            tests.extend(at.outcomes.keys().cloned());
        }
        tests
    }
}

/// The `commits` from the history only when it holds every one of them:
/// functions known from records (only those some test executed) and from
/// builds (all of them) would differ where nothing changed. And not when
/// the untested interactions are wanted: they are among the others.
fn surveys_filed(args: &MergeCheckArgs, store: &Store, commits: &[&String]) -> Option<Vec<Survey>> {
    // Nor when the options choose targets, features or a profile: the
    // records filed there do not say what they were run with. Packages are
    // known from the records' binaries.
    let cargo = &args.state.cargo;
    if args.build || args.fail_on_untested || cargo.selects_targets() || cargo.chooses_build() {
        return None;
    }
    commits
        .iter()
        .map(|c| survey_filed(store, c, cargo))
        .collect()
}

/// The `commits` (the base, then each parent) built and every test run
/// there.
fn surveys_built(worktree: &mut Worktree, commits: &[&String]) -> Result<Vec<Survey>> {
    let mut built = Vec::with_capacity(commits.len());
    for (i, commit) in commits.iter().enumerate() {
        let what = match i {
            0 => "the merge base".to_owned(),
            i => format!("parent {i}"),
        };
        built.push(survey_built(worktree, commit, &what)?);
    }
    Ok(built)
}

/// What each parent changed against the base: functions and files.
fn sides(
    merge: &Merge,
    surveys: &Surveys,
    toplevel: &Path,
    workspace_in_repo: &Path,
) -> Result<Vec<Side>> {
    merge
        .parents
        .iter()
        .zip(&surveys.at_parents)
        .map(|(parent, at)| {
            Ok(Side {
                commit: parent.clone(),
                functions: merge_check::changes(&surveys.at_base.functions, &at.functions),
                files: changed_files(toplevel, &merge.base, parent, workspace_in_repo)?,
            })
        })
        .collect()
}

/// Where the sides meet: what each test executed and read at the base and
/// the parents, the sides it meets, and which tests run at the merge.
struct Meeting<'a> {
    evidence: BTreeMap<&'a TestId, Evidence>,
    /// Per test, the sides it meets and the changes it meets there.
    met: BTreeMap<&'a TestId, BTreeMap<usize, Vec<String>>>,
    /// Per test, whether each side added it or changed its own function.
    own: BTreeMap<&'a TestId, Vec<bool>>,
    both_sides: Vec<&'a TestId>,
    /// The tests that meet two or more sides, and each side's own tests.
    selected: Vec<TestId>,
}

impl<'a> Meeting<'a> {
    fn of(tests: &'a BTreeSet<TestId>, sides: &[Side], surveys: &Surveys) -> Meeting<'a> {
        let evidence: BTreeMap<&TestId, Evidence> = tests
            .iter()
            .map(|test| (test, evidence_everywhere(test, surveys)))
            .collect();
        let met: BTreeMap<&TestId, BTreeMap<usize, Vec<String>>> = evidence
            .iter()
            .map(|(test, e)| (*test, merge_check::sides_met(sides, e)))
            .collect();
        let own: BTreeMap<&TestId, Vec<bool>> = tests
            .iter()
            .map(|test| {
                let sides_own = surveys
                    .at_parents
                    .iter()
                    .map(|at| at.is_own(test, &surveys.at_base))
                    .collect();
                (test, sides_own)
            })
            .collect();
        let both_sides: Vec<&TestId> = met
            .iter()
            .filter(|(_, sides)| sides.len() >= 2)
            .map(|(test, _)| *test)
            .collect();
        let selected: Vec<TestId> = tests
            .iter()
            .filter(|t| both_sides.contains(t) || own[t].iter().any(|o| *o))
            .cloned()
            .collect();
        Meeting {
            evidence,
            met,
            own,
            both_sides,
            selected,
        }
    }

    /// The changes `test` meets, each named with its side.
    fn changes_met(&self, test: &TestId) -> Vec<String> {
        self.met
            .get(test)
            .map(|m| {
                m.iter()
                    .flat_map(|(side, changes)| {
                        changes
                            .iter()
                            .map(move |c| format!("parent {}: {c}", side + 1))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// What `test` executed and read at the base and at any parent.
fn evidence_everywhere(test: &TestId, surveys: &Surveys) -> Evidence {
    let mut all = Evidence::default();
    for at in surveys.all() {
        if let Some(e) = at.evidence.get(test) {
            all.executed.extend(&e.executed);
            all.files.extend(e.files.iter().cloned());
            all.listed.extend(e.listed.iter().cloned());
            all.reads_env |= e.reads_env;
        }
    }
    all
}

/// The `selected` tests run at the merge, and how each ended.
fn run_at_merge(
    worktree: &mut Worktree,
    merge: &Merge,
    selected: &[TestId],
) -> Result<HashMap<TestId, Option<Outcome>>> {
    if selected.is_empty() {
        return Ok(HashMap::new());
    }
    // A prospective merge is a commit of its own by now (detached, in
    // the object database), so it is checked out like any other; no
    // branch holds it, so what its run learns is not filed.
    Ok(worktree
        .run(&merge.commit, selected, !merge.prospective)?
        .outcomes
        .with_context(|| {
            format!(
                "the merge {} does not build (the output: {})",
                short(&merge.commit),
                worktree.log().display()
            )
        })?
        .into_iter()
        .collect())
}

/// The tests that fail at the merge, each with its verdict, where it has
/// one.
fn conflicts(
    worktree: &mut Worktree,
    merge: &Merge,
    surveys: &Surveys,
    meeting: &Meeting,
    at_merge: &HashMap<TestId, Option<Outcome>>,
    reruns: usize,
) -> Result<Vec<ConflictJson>> {
    let reran = Reran::at_merge_and_parents(
        worktree,
        merge,
        surveys,
        &meeting.selected,
        at_merge,
        reruns,
    )?;
    let mut conflicts = Vec::new();
    for test in &meeting.selected {
        let Some(Some(outcome)) = at_merge.get(test) else {
            continue;
        };
        if let Some(kind) = reran.verdict(test, *outcome, surveys, &meeting.own[test]) {
            conflicts.push(ConflictJson {
                test: test_name(test),
                kind,
                changes: meeting.changes_met(test),
            });
        }
    }
    Ok(conflicts)
}

/// What the failures at the merge showed when run again.
struct Reran {
    /// Those that passed at the merge on a rerun.
    flaky_at_merge: BTreeSet<TestId>,
    /// Per parent, those that failed there too and passed there on a rerun.
    passed_at_parent: Vec<BTreeSet<TestId>>,
}

impl Reran {
    fn at_merge_and_parents(
        worktree: &mut Worktree,
        merge: &Merge,
        surveys: &Surveys,
        selected: &[TestId],
        at_merge: &HashMap<TestId, Option<Outcome>>,
        reruns: usize,
    ) -> Result<Reran> {
        // A failure is trusted only once it repeats: at the merge, and at a
        // parent that is to excuse it.
        let failed_at_merge: Vec<TestId> = selected
            .iter()
            .filter(|t| matches!(at_merge.get(*t), Some(Some(o)) if *o != Outcome::Passed))
            .cloned()
            .collect();
        let flaky_at_merge = passing_on_a_rerun(worktree, &merge.commit, &failed_at_merge, reruns)?;
        let mut passed_at_parent: Vec<BTreeSet<TestId>> = Vec::new();
        for (parent, at) in merge.parents.iter().zip(&surveys.at_parents) {
            let failed_there: Vec<TestId> = failed_at_merge
                .iter()
                .filter(|t| !flaky_at_merge.contains(*t))
                .filter(|t| at.outcomes.get(*t).is_some_and(|o| *o != Outcome::Passed))
                .cloned()
                .collect();
            passed_at_parent.push(passing_on_a_rerun(worktree, parent, &failed_there, reruns)?);
        }
        Ok(Reran {
            flaky_at_merge,
            passed_at_parent,
        })
    }

    /// The verdict on `test`, which ended with `outcome` at the merge;
    /// `own` says which sides added or changed it.
    fn verdict(
        &self,
        test: &TestId,
        outcome: Outcome,
        surveys: &Surveys,
        own: &[bool],
    ) -> Option<Verdict> {
        let outcomes: Vec<Option<Outcome>> = surveys
            .at_parents
            .iter()
            .zip(&self.passed_at_parent)
            .map(|(at, passed)| match passed.contains(test) {
                true => Some(Outcome::Passed),
                false => at.outcomes.get(test).copied(),
            })
            .collect();
        match self.flaky_at_merge.contains(test) {
            true => Some(Verdict::FlakyAtMerge),
            false => merge_check::classify(outcome, &outcomes, own),
        }
    }
}

/// The functions changed on different sides that no test executes
/// together.
fn untested(sides: &[Side], meeting: &Meeting, surveys: &Surveys) -> Vec<Untested> {
    let mut calls = merge_check::Calls::default();
    for at in surveys.all() {
        calls.add(&at.calls);
    }
    let names: Vec<&Functions> = surveys.all().map(|at| &at.functions).collect();
    merge_check::untested(
        sides,
        &meeting.evidence.values().cloned().collect::<Vec<_>>(),
        &calls,
        &names,
    )
}

/// The report, as JSON or for people.
fn write_report(report: &MergeCheckJson, sides: &[Side], json: bool) -> Result<()> {
    if json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        print_report(&mut anstream::stdout().lock(), report, sides)?;
    }
    Ok(())
}

/// A failure the merge is to blame for, or with `--fail-on-untested` an
/// untested interaction, fails the check.
fn exit_code(report: &MergeCheckJson, args: &MergeCheckArgs) -> ExitCode {
    let blamed = report.conflicts.iter().any(|c| c.kind.blames(args.strict));
    if blamed || (args.fail_on_untested && !report.untested.is_empty()) {
        ExitCode::from(crate::exit::TESTS_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

/// Makes the merge of `revs` in the worktree, as a detached commit.
fn make_merge(worktree: &mut Worktree, revs: &[String]) -> Result<String> {
    worktree.checkout(&revs[0])?;
    let mut merge = vec![
        "-c",
        "user.name=cargo-ekstazi",
        "-c",
        "user.email=cargo-ekstazi@localhost",
        "merge",
        "--no-ff",
        "--no-edit",
        "-q",
    ];
    merge.extend(revs[1..].iter().map(String::as_str));
    if let Err(e) = worktree.git(&merge) {
        let _ = worktree.git(&["merge", "--abort"]);
        bail!(
            "the revisions do not merge cleanly (a textual conflict, or an octopus merge git \
             refuses): resolve it first\n{e}"
        );
    }
    worktree.git(&["rev-parse", "HEAD"])
}

/// Fingerprints by stable name.
type TestFunctions = BTreeMap<u64, BTreeSet<Fp>>;

/// Every test at one commit: outcomes, what each executed and read, and
/// the functions of the builds.
struct Survey {
    outcomes: HashMap<TestId, Outcome>,
    evidence: HashMap<TestId, Evidence>,
    /// Per test, the functions named like the test itself, by stable
    /// name (to tell whether a side changed it).
    test_functions: HashMap<TestId, TestFunctions>,
    functions: Functions,
    /// Direct calls between functions, when the commit was built.
    calls: Vec<(u64, u64)>,
}

impl Survey {
    /// Whether this side added the test, or changed its own function,
    /// against the base.
    fn is_own(&self, test: &TestId, base: &Survey) -> bool {
        if !self.outcomes.contains_key(test) {
            return false;
        }
        if !base.outcomes.contains_key(test) {
            return true;
        }
        let (Some(here), Some(there)) =
            (self.test_functions.get(test), base.test_functions.get(test))
        else {
            return false;
        };
        here != there
    }
}

/// A commit from the records the history filed there, if it holds any,
/// all intact, of the packages the options select. Only the functions some
/// test executed are known then.
fn survey_filed(store: &Store, commit: &str, cargo: &CargoOpts) -> Option<Survey> {
    let history = store.history();
    let manifest = history.manifest(commit)?;
    let table = FunctionTable::load(&store.functions_dir());
    let mut records = Vec::with_capacity(manifest.entries.len());
    let selected = manifest.entries.iter().filter(|entry| {
        let package = entry
            .binary
            .split_once("::")
            .map_or(&*entry.binary, |(p, _)| p);
        cargo.selects_package(package)
    });
    for entry in selected {
        let record = history.object(&entry.record)?;
        if (&record.binary, &record.test) != (&entry.binary, &entry.test) {
            return None;
        }
        records.push(record);
    }
    let outcomes = records
        .iter()
        .map(|r| ((r.binary.clone(), r.test.clone()), r.outcome))
        .collect();
    Some(from_records(outcomes, &records, &table))
}

/// A commit built and every test run there, in the worktree.
fn survey_built(worktree: &mut Worktree, commit: &str, what: &str) -> Result<Survey> {
    let ran = worktree.run(commit, &[], true)?;
    let store = ran.store();
    let Some(outcomes) = &ran.outcomes else {
        bail!(
            "{what} ({}) does not build (the output: {})",
            short(commit),
            worktree.log().display()
        );
    };
    let outcomes: HashMap<TestId, Outcome> = outcomes
        .iter()
        .filter_map(|(id, o)| Some((id.clone(), (*o)?)))
        .collect();
    let table = FunctionTable::load(&store.functions_dir());
    let records: Vec<_> = store
        .records()?
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .collect();
    // The builds know every function, not only those some test executed.
    let mut survey = from_records(outcomes, &records, &table);
    survey.functions = functions_of(&ran)?;
    survey.calls = calls_of(&ran);
    Ok(survey)
}

/// What the records show each test executed and read, and the functions
/// they executed.
fn from_records(
    outcomes: HashMap<TestId, Outcome>,
    records: &[ekstazi_core::model::record::Record],
    table: &FunctionTable,
) -> Survey {
    // Each function looked up and demangled once, however many tests
    // executed it.
    let mut named: HashMap<FnId, Option<(u64, String, Fp)>> = HashMap::new();
    let mut functions = Functions::default();
    let mut evidence = HashMap::new();
    let mut test_functions = HashMap::new();
    for record in records {
        let mut e = Evidence::default();
        let mut own = TestFunctions::new();
        let suffix = format!("::{}", record.test);
        for id in record.code.iter().flat_map(|code| &code.functions) {
            let Some((stable, name, fp)) = named.entry(*id).or_insert_with(|| {
                table.get(id).map(|f| {
                    (
                        f.stable,
                        ekstazi_core::digests::fingerprint::stable_name(&f.name),
                        f.fp,
                    )
                })
            }) else {
                continue;
            };
            e.executed.insert(*stable);
            functions.add(*stable, name, *fp);
            if name.ends_with(&suffix) {
                own.entry(*stable).or_default().insert(*fp);
            }
        }
        for dep in &record.deps {
            match &dep.target {
                Target::Content(path)
                | Target::Kind { path, .. }
                | Target::Program(path)
                | Target::Link(path)
                | Target::Resolved(path)
                | Target::Library(path)
                    if path.anchor() == Anchor::Workspace =>
                {
                    e.files.insert(path.rel().to_string_lossy().into_owned());
                }
                Target::Listing(dir) if dir.anchor() == Anchor::Workspace => {
                    e.listed.insert(dir.rel().to_string_lossy().into_owned());
                }
                Target::Env(_) | Target::Environment => e.reads_env = true,
                _ => {}
            }
        }
        let id = (record.binary.clone(), record.test.clone());
        test_functions.insert(id.clone(), own);
        evidence.insert(id, e);
    }
    Survey {
        outcomes,
        evidence,
        test_functions,
        functions,
        calls: Vec::new(),
    }
}

/// The direct calls in every instrumented executable the run built (one
/// without a linker map, or the extents kept of it, is not instrumented: a
/// build script's program, a doctest).
fn calls_of(ran: &Ran) -> Vec<(u64, u64)> {
    let mut calls: Vec<(u64, u64)> = ran
        .executables
        .iter()
        .filter_map(|path| {
            let extents = ekstazi_core::digests::program::extent_source(path)?;
            ekstazi_core::digests::fingerprint::calls::direct_calls_file(path, extents).ok()
        })
        .flatten()
        .collect();
    calls.sort_unstable();
    calls.dedup();
    calls
}

/// The functions of every build the run fingerprinted.
fn functions_of(ran: &Ran) -> Result<Functions> {
    let store = ran.store();
    let mut functions = Functions::default();
    for id in store.snapshot_ids()? {
        let Some(snapshot) = store.load_snapshot(&id) else {
            continue;
        };
        // By name, each block of names unpacked once.
        let mut by_index = vec![None; snapshot.names.len()];
        for (stable, index) in &snapshot.stable {
            if let Some(slot) = by_index.get_mut(*index as usize) {
                *slot = Some(*stable);
            }
        }
        for ((name, stable), fp) in snapshot.names.iter().zip(by_index).zip(&snapshot.fps) {
            if let Some(stable) = stable {
                functions.add(
                    stable,
                    &ekstazi_core::digests::fingerprint::stable_name(&name),
                    *fp,
                );
            }
        }
    }
    Ok(functions)
}

/// Of `tests`, which failed at `commit`, those that pass when run there
/// again, up to `reruns` times (each run of the ones still failing; not
/// filed, a rerun only confirms).
fn passing_on_a_rerun(
    worktree: &mut Worktree,
    commit: &str,
    tests: &[TestId],
    reruns: usize,
) -> Result<BTreeSet<TestId>> {
    let mut passed = BTreeSet::new();
    let mut failing: Vec<TestId> = tests.to_vec();
    for _ in 0..reruns {
        if failing.is_empty() {
            break;
        }
        let Some(outcomes) = worktree.run(commit, &failing, false)?.outcomes else {
            break;
        };
        for (test, outcome) in outcomes {
            if outcome == Some(Outcome::Passed) && failing.contains(&test) {
                passed.insert(test);
            }
        }
        failing.retain(|t| !passed.contains(t));
    }
    Ok(passed)
}

/// The files `side` changed against `base`, relative to the workspace.
fn changed_files(
    toplevel: &Path,
    base: &str,
    side: &str,
    workspace: &Path,
) -> Result<BTreeSet<String>> {
    let out = crate::git::worktree::git(toplevel, &["diff", "--name-only", "-z", base, side])?;
    Ok(out
        .split('\0')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            PathBuf::from(p)
                .strip_prefix(workspace)
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .collect())
}

fn test_name((binary, name): &TestId) -> String {
    format!("{binary} {name}")
}

#[derive(Serialize)]
struct MergeCheckJson {
    merge: String,
    /// Made by `merge-check` from the revisions given (not a branch's).
    prospective: bool,
    parents: Vec<String>,
    base: Vec<String>,
    both_sides: Vec<String>,
    ran_at_merge: Vec<String>,
    /// How each of the base and the parents was surveyed.
    surveyed: Vec<HowJson>,
    conflicts: Vec<ConflictJson>,
    untested: Vec<Untested>,
}

impl MergeCheckJson {
    fn of(
        merge: Merge,
        surveys: &Surveys,
        meeting: &Meeting,
        at_merge: &HashMap<TestId, Option<Outcome>>,
        conflicts: Vec<ConflictJson>,
        untested: Vec<Untested>,
    ) -> MergeCheckJson {
        MergeCheckJson {
            // Not those gone at the merge (a test a side renamed or removed).
            ran_at_merge: meeting
                .selected
                .iter()
                .filter(|t| matches!(at_merge.get(*t), Some(Some(_))))
                .map(test_name)
                .collect(),
            both_sides: meeting.both_sides.iter().map(|t| test_name(t)).collect(),
            surveyed: merge.how_surveyed(surveys),
            merge: merge.commit,
            prospective: merge.prospective,
            parents: merge.parents,
            base: vec![merge.base],
            conflicts,
            untested,
        }
    }
}

#[derive(Serialize)]
struct HowJson {
    commit: String,
    how: &'static str,
}

#[derive(Serialize)]
struct ConflictJson {
    test: String,
    kind: Verdict,
    changes: Vec<String>,
}

fn print_report(out: &mut impl Write, report: &MergeCheckJson, sides: &[Side]) -> Result<()> {
    let parents: Vec<&str> = report.parents.iter().map(|p| short(p)).collect();
    writeln!(
        out,
        "{} {} of {} (base {})",
        if report.prospective {
            "the merge"
        } else {
            "merge"
        },
        short(&report.merge),
        parents.join(" + "),
        short(&report.base[0])
    )?;
    for (i, side) in sides.iter().enumerate() {
        writeln!(
            out,
            "  parent {} changed {} functions and {} files",
            i + 1,
            side.functions.len(),
            side.files.len()
        )?;
    }
    let meet = match report.both_sides.len() {
        1 => "1 test meets".to_owned(),
        n => format!("{n} tests meet"),
    };
    writeln!(
        out,
        "{meet} two or more sides; {} ran at the merge",
        report.ran_at_merge.len()
    )?;
    for test in &report.both_sides {
        writeln!(out, "  {test}")?;
    }
    if report.conflicts.is_empty() {
        writeln!(out, "no test fails at the merge")?;
    }
    for conflict in &report.conflicts {
        let fail = style::FAIL;
        writeln!(out, "{fail}{}{fail:#}: {}", conflict.kind, conflict.test)?;
        for change in &conflict.changes {
            writeln!(out, "    {change}")?;
        }
    }
    if report.surveyed.iter().any(|s| s.how == "history") {
        writeln!(
            out,
            "(from filed records: functions no test executes are not compared; --build to build)"
        )?;
    }
    print_untested(out, &report.untested)
}

/// The functions changed on several sides that no test executes (alone or
/// together).
fn print_untested(out: &mut impl Write, untested: &[Untested]) -> Result<()> {
    let (alone, pairs): (Vec<&Untested>, Vec<&Untested>) =
        untested.iter().partition(|u| u.with.is_none());
    let parents = |u: &Untested| -> String {
        let sides: Vec<String> = u.sides.iter().map(|s| format!("{}", s + 1)).collect();
        sides.join(", ")
    };
    if !alone.is_empty() {
        writeln!(
            out,
            "changed on several sides, executed by no test ({}):",
            alone.len()
        )?;
        for u in alone {
            writeln!(out, "  {} (parents {})", u.function, parents(u))?;
        }
    }
    if !pairs.is_empty() {
        writeln!(
            out,
            "changed on different sides, never executed by one test, with a caller in common ({}):",
            pairs.len()
        )?;
        // Ranked: the first ones are where a test would reach most.
        const SHOWN: usize = 20;
        for u in pairs.iter().take(SHOWN) {
            writeln!(
                out,
                "  {} and {} (parents {}), both called by {}",
                u.function,
                u.with.as_deref().unwrap_or_default(),
                parents(u),
                u.caller.as_deref().unwrap_or_default()
            )?;
        }
        if pairs.len() > SHOWN {
            writeln!(
                out,
                "  … and {} more (--json lists them all)",
                pairs.len() - SHOWN
            )?;
        }
    }
    Ok(())
}
