//! Merge risk (TOM's, on real coverage instead of a static call
//! graph): what each side of a merge changed, which tests executed the
//! changes of two or more sides, how a test that fails at the merge is
//! classified, and which changes no test exercises together.
//!
//! Functions are compared across builds by their stable name, as records
//! name them ([`crate::digests::functions`]): against the merge base, a side
//! *changed* a function whose fingerprint differs, *added* one the base
//! lacks and *removed* one it lacks itself. A test *meets* a side when a
//! record of it at the base or at a parent executed a function that side
//! changed or removed, depended on a file it changed (read it, looked it
//! up or found it absent, ran it, loaded it, followed it), listed the
//! directory of a file it added, removed or changed, or read the
//! environment while the side changed a cargo configuration file (whose
//! `[env]` sets variables for tests). A test that meets two or
//! more sides is where their changes can collide without a textual
//! conflict: it runs at the merge, with the tests a side added or changed.
//!
//! A failure at the merge is then one of TOM's oracles:
//! - *semantic conflict*: the test passed at every parent (its
//!   "unexpected behaviour");
//! - *lost behaviour*: a side added or changed the test, it passed there,
//!   and the merge lost what it checks;
//! - *already failing*: it failed at a parent, so the merge is not to blame;
//! - *flaky at the merge*: it failed at the merge, then passed when run
//!   again there (TOM reruns a test before trusting its outcome).

use crate::digests::fingerprint::Fp;
use crate::model::record::Outcome;
use crate::storage::history::Manifest;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The functions of one commit's builds as far as they are known, by the
/// hash of their stable name: a display name and the fingerprints. One
/// stable name can have several: a generic function's instances, or a
/// function built into several binaries.
#[derive(Clone, Debug, Default)]
pub struct Functions {
    by_stable: HashMap<u64, (String, BTreeSet<Fp>)>,
}

impl Functions {
    /// Adds a function; the first name given for a stable name is kept.
    pub fn add(&mut self, stable: u64, name: &str, fp: Fp) {
        self.by_stable
            .entry(stable)
            .or_insert_with(|| (name.to_owned(), BTreeSet::new()))
            .1
            .insert(fp);
    }

    /// How many stable names are known.
    pub fn len(&self) -> usize {
        self.by_stable.len()
    }

    /// Whether no function is known.
    pub fn is_empty(&self) -> bool {
        self.by_stable.is_empty()
    }

    /// The display name of a function, by the hash of its stable name.
    pub fn name(&self, stable: u64) -> Option<&str> {
        self.by_stable.get(&stable).map(|(name, _)| name.as_str())
    }
}

/// Who calls whom directly, by the hashes of stable names
/// ([`crate::digests::fingerprint::calls`]), over the builds of the base and the
/// parents.
#[derive(Clone, Debug, Default)]
pub struct Calls {
    callers: HashMap<u64, HashSet<u64>>,
}

impl Calls {
    /// Adds direct calls, each `(caller, callee)` by the hashes of their
    /// stable names.
    pub fn add(&mut self, calls: &[(u64, u64)]) {
        for (caller, callee) in calls {
            self.callers.entry(*callee).or_default().insert(*caller);
        }
    }

    fn callers_of(&self, callee: u64) -> Option<&HashSet<u64>> {
        self.callers.get(&callee)
    }
}

/// What a side did to a function, against the merge base.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// The base has the function with other fingerprints.
    Changed,
    /// The base lacks the function.
    Added,
    /// The base has the function and the side lacks it.
    Removed,
}

/// One function a side changed against the base.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Change {
    /// The hash of the function's stable name.
    #[serde(skip)]
    pub stable: u64,
    /// The function's display name.
    pub function: String,
    /// What the side did to it.
    pub kind: ChangeKind,
}

/// The functions `side` changed, added and removed against `base`, by
/// name.
pub fn changes(base: &Functions, side: &Functions) -> Vec<Change> {
    let mut out = Vec::new();
    for (stable, (name, fps)) in &side.by_stable {
        match base.by_stable.get(stable) {
            Some((_, old)) if old == fps => {}
            Some(_) => out.push(change(*stable, name, ChangeKind::Changed)),
            None => out.push(change(*stable, name, ChangeKind::Added)),
        }
    }
    for (stable, (name, _)) in &base.by_stable {
        if !side.by_stable.contains_key(stable) {
            out.push(change(*stable, name, ChangeKind::Removed));
        }
    }
    out.sort_by(|a, b| (&a.function, a.kind).cmp(&(&b.function, b.kind)));
    out
}

fn change(stable: u64, name: &str, kind: ChangeKind) -> Change {
    Change {
        stable,
        function: name.to_owned(),
        kind,
    }
}

/// What one side of a merge did, against the base.
#[derive(Clone, Debug, Default)]
pub struct Side {
    /// The parent's commit id.
    pub commit: String,
    /// The functions the side changed, added and removed, sorted by name.
    pub functions: Vec<Change>,
    /// Changed files, as the records name them.
    pub files: BTreeSet<String>,
}

/// What the records of one test at the base and the parents show it
/// touched: functions by stable name, files and listed directories as
/// records name them (relative to the workspace; `""` is its root).
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// The functions executed, by the hash of their stable name.
    pub executed: HashSet<u64>,
    /// The files the test depended on: read, looked up or found absent, ran,
    /// loaded, followed or resolved.
    pub files: HashSet<String>,
    /// The directories whose listing the test depended on.
    pub listed: HashSet<String>,
    /// It read an environment variable, or walked them all.
    pub reads_env: bool,
}

/// Whether `file` (relative to the workspace) is a cargo configuration
/// file, which can set the environment tests are given (`[env]`).
fn is_cargo_config(file: &str) -> bool {
    let name = file.rsplit_once('/').map_or(file, |(_, name)| name);
    let dir = file.rsplit_once('/').map_or("", |(dir, _)| dir);
    (dir == ".cargo" || dir.ends_with("/.cargo")) && (name == "config.toml" || name == "config")
}

/// Per side met, the changes of that side the test touched (functions,
/// then files), in side order.
pub fn sides_met(sides: &[Side], evidence: &Evidence) -> BTreeMap<usize, Vec<String>> {
    let mut met = BTreeMap::new();
    for (i, side) in sides.iter().enumerate() {
        let mut touched: Vec<String> = side
            .functions
            .iter()
            .filter(|c| c.kind != ChangeKind::Added && evidence.executed.contains(&c.stable))
            .map(|c| format!("function {}: {}", kind_word(c.kind), c.function))
            .collect();
        touched.extend(
            side.files
                .iter()
                .filter(|f| evidence.files.contains(*f))
                .map(|f| format!("file changed: {f}")),
        );
        let listed: BTreeSet<&str> = side
            .files
            .iter()
            .map(|f| f.rsplit_once('/').map_or("", |(dir, _)| dir))
            .filter(|dir| evidence.listed.contains(*dir))
            .collect();
        touched.extend(listed.into_iter().map(|dir| {
            format!(
                "directory listing changed: {}",
                if dir.is_empty() { "." } else { dir }
            )
        }));
        if evidence.reads_env {
            touched.extend(
                side.files
                    .iter()
                    .filter(|f| is_cargo_config(f))
                    .map(|f| format!("cargo configuration changed (the environment): {f}")),
            );
        }
        if !touched.is_empty() {
            met.insert(i, touched);
        }
    }
    met
}

fn kind_word(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Changed => "changed",
        ChangeKind::Added => "added",
        ChangeKind::Removed => "removed",
    }
}

/// How a test that fails at the merge is classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// The test passed at every parent: the sides' changes together broke it.
    #[serde(rename = "semantic conflict")]
    SemanticConflict,
    /// A side added or changed the test and it passed there: the merge lost
    /// what it checks.
    #[serde(rename = "lost behaviour")]
    LostBehaviour,
    /// The test failed at a parent already: the merge is not to blame.
    #[serde(rename = "already failing")]
    AlreadyFailing,
    /// The test failed at the merge, then passed when run again there.
    #[serde(rename = "flaky at the merge")]
    FlakyAtMerge,
}

impl Verdict {
    /// Whether the merge is to blame (a flaky test only with `--strict`).
    pub fn blames(self, strict: bool) -> bool {
        match self {
            Verdict::SemanticConflict | Verdict::LostBehaviour => true,
            Verdict::FlakyAtMerge => strict,
            Verdict::AlreadyFailing => false,
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::SemanticConflict => "semantic conflict",
            Verdict::LostBehaviour => "lost behaviour",
            Verdict::AlreadyFailing => "already failing",
            Verdict::FlakyAtMerge => "flaky at the merge",
        })
    }
}

/// A test's outcome at the merge, against its outcome at each parent
/// (`None`: the test is not there) and whether a side added or changed
/// it (`own[i]`: side `i` did). `None` when the merge is not to blame
/// for anything: the test passed, or nothing known says otherwise.
pub fn classify(
    at_merge: Outcome,
    at_parents: &[Option<Outcome>],
    own: &[bool],
) -> Option<Verdict> {
    if at_merge == Outcome::Passed {
        return None;
    }
    if at_parents
        .iter()
        .any(|o| o.is_some_and(|o| o != Outcome::Passed))
    {
        return Some(Verdict::AlreadyFailing);
    }
    let passed_at_own_side = at_parents
        .iter()
        .zip(own)
        .any(|(o, own)| *own && *o == Some(Outcome::Passed));
    if passed_at_own_side {
        return Some(Verdict::LostBehaviour);
    }
    if !at_parents.is_empty() && at_parents.iter().all(|o| *o == Some(Outcome::Passed)) {
        return Some(Verdict::SemanticConflict);
    }
    None
}

/// Whether a test passed at every parent of a merge, as the manifests
/// filed there say (`None`: nothing filed at that parent). Its failure at
/// the merge is then the merge's doing: what `cargo ekstazi test` labels a
/// merge conflict (`merge-check` tells semantic conflict from lost
/// behaviour, which needs the base).
pub fn passed_at_every_parent(parents: &[Option<Manifest>], binary: &str, test: &str) -> bool {
    parents.len() >= 2
        && parents.iter().all(|manifest| {
            manifest.as_ref().is_some_and(|m| {
                m.entries
                    .binary_search_by(|e| (e.binary.as_str(), e.test.as_str()).cmp(&(binary, test)))
                    .is_ok_and(|i| m.entries[i].outcome == Outcome::Passed)
            })
        })
}

/// A change, or a pair of changes, no test exercises with the other
/// sides' changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Untested {
    /// The function changed on two or more sides, or a pair's first function;
    /// by display name.
    pub function: String,
    /// The sides (0-based, in parent order) that changed it (and `with`).
    pub sides: Vec<usize>,
    /// A pair's other function, changed on another side: no test executed
    /// both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with: Option<String>,
    /// A pair's common caller, which some test executes: where a test of
    /// the two together would start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

/// Where a test is missing, ranked:
/// 1. functions changed (or removed) on two or more sides that no test
///    executed, most sides first;
/// 2. pairs of functions changed on different sides that no one test
///    executed both of, while some test executes a function that calls
///    both directly; the pairs whose caller the most tests execute first.
///
/// Then by name. `names` give the callers' names (any build's will do).
pub fn untested(
    sides: &[Side],
    tests: &[Evidence],
    calls: &Calls,
    names: &[&Functions],
) -> Vec<Untested> {
    let mut by_function: BTreeMap<u64, (String, Vec<usize>)> = BTreeMap::new();
    for (i, side) in sides.iter().enumerate() {
        for change in side
            .functions
            .iter()
            .filter(|c| c.kind != ChangeKind::Added)
        {
            let entry = by_function
                .entry(change.stable)
                .or_insert_with(|| (change.function.clone(), Vec::new()));
            entry.1.push(i);
        }
    }
    // The tests (by index) that executed each function.
    let mut tests_of: HashMap<u64, Vec<usize>> = HashMap::new();
    for (t, test) in tests.iter().enumerate() {
        for f in &test.executed {
            tests_of.entry(*f).or_default().push(t);
        }
    }
    let executed_by = |f: u64| tests_of.get(&f).map_or(&[][..], Vec::as_slice);
    let mut out: Vec<Untested> = by_function
        .iter()
        .filter(|(stable, (_, sides))| sides.len() >= 2 && executed_by(**stable).is_empty())
        .map(|(_, (function, sides))| Untested {
            function: function.clone(),
            sides: sides.clone(),
            with: None,
            caller: None,
        })
        .collect();
    out.sort_by(|a, b| {
        b.sides
            .len()
            .cmp(&a.sides.len())
            .then(a.function.cmp(&b.function))
    });

    // Pairs: a function changed on one side only, against one changed on
    // one other side only (those changed on several are above).
    let changed_once = |i: usize| -> Vec<(u64, &str)> {
        sides[i]
            .functions
            .iter()
            .filter(|c| c.kind == ChangeKind::Changed && by_function[&c.stable].1.len() == 1)
            .map(|c| (c.stable, c.function.as_str()))
            .collect()
    };
    let name_of = |stable: u64| names.iter().find_map(|f| f.name(stable));
    let mut pairs: Vec<(usize, Untested)> = Vec::new();
    for i in 0..sides.len() {
        let here = changed_once(i);
        for j in i + 1..sides.len() {
            let there = changed_once(j);
            for &(f, f_name) in &here {
                let Some(f_callers) = calls.callers_of(f) else {
                    continue;
                };
                for &(g, g_name) in &there {
                    let Some(g_callers) = calls.callers_of(g) else {
                        continue;
                    };
                    if shares_any(executed_by(f), executed_by(g)) {
                        continue;
                    }
                    // The common caller the most tests execute.
                    let best = f_callers
                        .intersection(g_callers)
                        .filter_map(|h| {
                            let n = executed_by(*h).len();
                            if n == 0 {
                                return None;
                            }
                            Some((n, name_of(*h)?))
                        })
                        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)));
                    if let Some((n, caller)) = best {
                        pairs.push((
                            n,
                            Untested {
                                function: f_name.to_owned(),
                                sides: vec![i, j],
                                with: Some(g_name.to_owned()),
                                caller: Some(caller.to_owned()),
                            },
                        ));
                    }
                }
            }
        }
    }
    pairs.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| a.1.function.cmp(&b.1.function))
            .then_with(|| a.1.with.cmp(&b.1.with))
    });
    out.extend(pairs.into_iter().map(|(_, u)| u));
    out
}

/// Whether two sorted lists share an element.
fn shares_any(a: &[usize], b: &[usize]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn functions(list: &[(u64, &str, u8)]) -> Functions {
        let mut f = Functions::default();
        for (stable, name, fp) in list {
            f.add(*stable, name, [*fp; 16]);
        }
        f
    }

    #[test]
    fn a_side_changes_adds_and_removes_by_stable_name() {
        let base = functions(&[(1, "price", 1), (2, "tax", 1), (3, "old", 1)]);
        let side = functions(&[(1, "price", 2), (2, "tax", 1), (4, "new", 1)]);
        let kinds: Vec<(String, ChangeKind)> = changes(&base, &side)
            .into_iter()
            .map(|c| (c.function, c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("new".to_owned(), ChangeKind::Added),
                ("old".to_owned(), ChangeKind::Removed),
                ("price".to_owned(), ChangeKind::Changed),
            ]
        );
    }

    fn side(changed: &[(u64, &str)], files: &[&str]) -> Side {
        Side {
            commit: String::new(),
            functions: changed
                .iter()
                .map(|(s, n)| change(*s, n, ChangeKind::Changed))
                .collect(),
            files: files.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    #[test]
    fn a_test_meets_the_sides_whose_changes_it_touched() {
        let sides = [
            side(&[(1, "price")], &[]),
            side(&[(2, "tax")], &["rates.txt"]),
        ];
        let total = Evidence {
            executed: [1, 2, 9].into(),
            ..Evidence::default()
        };
        let met = sides_met(&sides, &total);
        assert_eq!(met.keys().copied().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(met[&0], ["function changed: price"]);
        let reads_rates = Evidence {
            executed: [1].into(),
            files: ["rates.txt".to_owned()].into(),
            ..Evidence::default()
        };
        assert_eq!(
            sides_met(&sides, &reads_rates)[&1],
            ["file changed: rates.txt"]
        );
        let only_tax = Evidence {
            executed: [2].into(),
            ..Evidence::default()
        };
        assert_eq!(sides_met(&sides, &only_tax).len(), 1);
        // A side that adds a file to a directory the test lists, another
        // that adds one at the root it lists.
        let sides = [side(&[], &["data/a.txt"]), side(&[], &["b.txt"])];
        let lists = Evidence {
            listed: ["data".to_owned(), String::new()].into(),
            ..Evidence::default()
        };
        let met = sides_met(&sides, &lists);
        assert_eq!(met[&0], ["directory listing changed: data"]);
        assert_eq!(met[&1], ["directory listing changed: ."]);
        let lists_elsewhere = Evidence {
            listed: ["other".to_owned()].into(),
            ..Evidence::default()
        };
        assert!(sides_met(&sides, &lists_elsewhere).is_empty());
        // A side that changes a cargo configuration meets a test that read
        // the environment, and no other.
        let sides = [side(&[], &[".cargo/config.toml"]), side(&[], &["x.txt"])];
        let reads_env = Evidence {
            reads_env: true,
            ..Evidence::default()
        };
        assert_eq!(
            sides_met(&sides, &reads_env)[&0],
            ["cargo configuration changed (the environment): .cargo/config.toml"]
        );
        assert_eq!(sides_met(&sides, &reads_env).len(), 1);
        assert!(sides_met(&sides, &Evidence::default()).is_empty());
    }

    #[test]
    fn failures_at_the_merge_are_classified_by_the_parents() {
        use Outcome::{Failed, Passed};
        assert_eq!(
            classify(Passed, &[Some(Passed), Some(Passed)], &[false, false]),
            None
        );
        assert_eq!(
            classify(Failed, &[Some(Passed), Some(Passed)], &[false, false]),
            Some(Verdict::SemanticConflict)
        );
        assert_eq!(
            classify(Failed, &[Some(Passed), None], &[true, false]),
            Some(Verdict::LostBehaviour),
            "added on side 0, passing there"
        );
        assert_eq!(
            classify(Failed, &[Some(Passed), Some(Passed)], &[false, true]),
            Some(Verdict::LostBehaviour),
            "changed on side 1"
        );
        assert_eq!(
            classify(Failed, &[Some(Failed), Some(Passed)], &[false, true]),
            Some(Verdict::AlreadyFailing)
        );
        assert_eq!(
            classify(Failed, &[None, None], &[false, false]),
            None,
            "nothing known at the parents"
        );
    }

    #[test]
    fn a_merge_conflict_is_a_test_that_passed_at_every_parent() {
        use crate::storage::history::Entry;
        let manifest = |outcome: Option<Outcome>| Manifest {
            commit: "c".into(),
            filed_at_ms: 0,
            entries: outcome
                .map(|outcome| Entry {
                    binary: "b".into(),
                    test: "t".into(),
                    record: [0; 32],
                    outcome,
                    ran: true,
                })
                .into_iter()
                .collect(),
        };
        let passed = Some(manifest(Some(Outcome::Passed)));
        assert!(passed_at_every_parent(
            &[passed.clone(), passed.clone()],
            "b",
            "t"
        ));
        assert!(
            !passed_at_every_parent(std::slice::from_ref(&passed), "b", "t"),
            "not a merge"
        );
        assert!(!passed_at_every_parent(&[passed.clone(), None], "b", "t"));
        assert!(!passed_at_every_parent(
            &[passed.clone(), Some(manifest(Some(Outcome::Failed)))],
            "b",
            "t"
        ));
        assert!(!passed_at_every_parent(
            &[passed.clone(), Some(manifest(None))],
            "b",
            "t"
        ));
    }

    #[test]
    fn functions_changed_on_two_sides_that_no_test_executes_are_untested() {
        let sides = [
            side(&[(1, "shared"), (2, "tested"), (3, "a_only")], &[]),
            side(&[(1, "shared"), (2, "tested")], &[]),
        ];
        let tests = [Evidence {
            executed: [2, 3].into(),
            ..Evidence::default()
        }];
        assert_eq!(
            untested(&sides, &tests, &Calls::default(), &[]),
            [Untested {
                function: "shared".into(),
                sides: vec![0, 1],
                with: None,
                caller: None,
            }]
        );
    }

    #[test]
    fn changes_of_two_sides_that_one_caller_reaches_but_no_test_together_are_a_pair() {
        // 10 calls 1 and 2 (tested apart), and 3 and 4 (tested together);
        // 20 calls 1 and 5, and no test executes 20.
        let sides = [
            side(&[(1, "price"), (3, "a3")], &[]),
            side(&[(2, "tax"), (4, "b4"), (5, "b5")], &[]),
        ];
        let test = |executed: &[u64]| Evidence {
            executed: executed.iter().copied().collect(),
            ..Evidence::default()
        };
        let tests = [test(&[10, 1]), test(&[10, 2]), test(&[10, 3, 4])];
        let mut calls = Calls::default();
        calls.add(&[(10, 1), (10, 2), (10, 3), (10, 4), (20, 1), (20, 5)]);
        let mut names = Functions::default();
        names.add(10, "total", [0; 16]);
        let pair = |f: &str, g: &str| Untested {
            function: f.into(),
            sides: vec![0, 1],
            with: Some(g.into()),
            caller: Some("total".into()),
        };
        // Not a3 with b4 (one test ran both), nor anything with b5 (its
        // one caller with price runs in no test).
        assert_eq!(
            untested(&sides, &tests, &calls, &[&names]),
            [pair("a3", "tax"), pair("price", "b4"), pair("price", "tax")]
        );
    }
}
